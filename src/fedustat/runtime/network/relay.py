"""Frames of a relay round: peer rows sealed by their sender, forwarded by the server.

In a relay round every party process (a silo) sends the server one ``Relay`` request
(integers are unsigned LEB128 varints, as in :mod:`fedustat.runtime.wire`)::

    b"FDRL" | meta length | layout length | directory length (uint32 each, big-endian)
    | meta (a wire frame) | layout | directory | sealed payloads

* *meta* is a validated wire frame of the rows' routing facts only: each row's origin
  party (``parties``, checked to be the sender's own) and its destination (``to``), both
  as integer columns (a few bits a row, often none). The server counts peer traffic from
  it (:meth:`~fedustat.runtime.simulate.MessageLog.record_peer_rows`) and routes by it;
  it never sees a payload.
* the *layout* (:class:`~fedustat.runtime.wire.RowLayout`) describes the rows' fields
  once: names, dtypes, declared bits, sign flags, the shape of one row. Every row's
  payload bits follow from it.
* the *directory* lists one sealed payload per destination silo, in silo order: its
  silo, bytes and rows (three varints), the rows being the meta rows addressed to that
  silo, in order.
* each payload is the body of those rows alone (each payload field's rows, bit-packed
  at its declared bits) sealed with :class:`~fedustat.runtime.network.e2e.PeerKeys`: one
  AEAD per destination silo per round, bound to the run, round, direction, the declared
  rows (origins, destinations, payload bits) and the layout.

The server's reply to silo ``s`` (after the tag ``b"P"``) has the same parts: a meta
frame from the server (``from`` = origins, ``parties`` = recipients), the distinct
layouts of its senders (a count, then each with its length), and a directory of the
payloads sealed for ``s`` (sender silo, bytes, rows, layout index), in sender order. The
receiver opens each payload (a failure names the sender: a payload or layout altered on
the way fails to open) and reads exactly the declared rows from it before its step sees
them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from fedustat.protocols.base import PEER_FROM, PEER_TO, Message, Role
from fedustat.runtime.network.e2e import PeerKeys
from fedustat.runtime.simulate import deliver_peer_rows
from fedustat.runtime.wire import (
    Envelope,
    Expectation,
    RowLayout,
    WireError,
    decode,
    encode,
    varint,
)

__all__ = ["RELAY_MAGIC", "RelayedPayload", "open_reply", "parse_request", "reply_for",
           "seal_rows"]

RELAY_MAGIC = b"FDRL"
_LENGTHS = struct.Struct(">III")
_MAX_SECTION_BYTES = 1 << 22
_TAG_BYTES = 16  # AES-GCM's tag: the least a sealed payload can be


@dataclass(frozen=True)
class RelayedPayload:
    """One sealed payload in transit: from silo ``sender`` to silo ``receiver``, with the
    routing facts of its rows and the sender's layout (what the receiver authenticates
    it against)."""

    sender: int
    receiver: int
    sealed: bytes
    origins: np.ndarray
    targets: np.ndarray
    bits: np.ndarray
    layout: bytes = b""


def silo_of(ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The silo holding each party id; ``bounds`` are the silos' first ids and the end."""
    return np.searchsorted(bounds, np.asarray(ids, dtype=np.int64), side="right") - 1




class _Varints:
    """Reads a section of varints; running past its end is a WireError."""

    def __init__(self, raw: bytes, sender: str, what: str) -> None:
        self.raw, self.at, self.sender, self.what = raw, 0, sender, what

    def done(self) -> bool:
        return self.at >= len(self.raw)

    def next(self) -> int:
        value = 0
        for shift in range(0, 64, 7):
            if self.at >= len(self.raw):
                raise WireError(self.sender, self.what, "ends inside a number")
            byte = self.raw[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise WireError(self.sender, self.what, "a number beyond 63 bits")


def _split(frame: bytes, sender: str, first: bytes) -> tuple[bytes, bytes, bytes, memoryview]:
    head = len(first) + _LENGTHS.size
    if len(frame) < head or frame[:len(first)] != first:
        raise WireError(sender, "relay", "not a relay frame")
    meta_len, layout_len, dir_len = _LENGTHS.unpack_from(frame, len(first))
    if max(layout_len, dir_len) > _MAX_SECTION_BYTES \
            or head + meta_len + layout_len + dir_len > len(frame):
        raise WireError(sender, "relay", "declared lengths exceed the frame")
    meta = frame[head:head + meta_len]
    layout = frame[head + meta_len:head + meta_len + layout_len]
    directory = frame[head + meta_len + layout_len:head + meta_len + layout_len + dir_len]
    return meta, layout, directory, memoryview(frame)[head + meta_len + layout_len + dir_len:]


def _entries(directory: bytes, width: int, sender: str, n_silos: int, body: memoryview,
             n_rows: int) -> list[tuple[int, ...]]:
    """(silo, bytes, rows[, layout]) per directory entry, checked against the body and
    the meta."""
    numbers = _Varints(directory, sender, "directory")
    out = []
    while not numbers.done():
        entry = tuple(numbers.next() for _ in range(width))
        silo, size, rows = entry[:3]
        if not 0 <= silo < n_silos or size < _TAG_BYTES or rows < 1:
            raise WireError(sender, "directory", f"entry {entry!r} is out of range")
        out.append(entry)
    silos = [e[0] for e in out]
    if len(set(silos)) != len(silos) or silos != sorted(silos):
        raise WireError(sender, "directory", "one payload per silo, in silo order")
    if sum(e[1] for e in out) != len(body):
        raise WireError(sender, "body", "payload sizes do not add up to the body")
    if sum(e[2] for e in out) != n_rows:
        raise WireError(sender, "directory", "payload rows do not add up to the declared rows")
    return out


def seal_rows(message: Message, keys: PeerKeys, bounds: np.ndarray, *, protocol: str,
              run: str, round_: int, identity: str) -> bytes:
    """The ``Relay`` request of one silo: its step's rows to parties, sealed per
    destination silo (see the module docstring)."""
    origins = np.asarray(message.parties, dtype=np.int64)
    targets = np.asarray(message.fields[PEER_TO], dtype=np.int64)
    if targets.size and (int(targets.max()) >= int(bounds[-1])):
        raise ValueError(f"a row is addressed to party {int(targets.max())}, but the run "
                         f"has parties 0..{int(bounds[-1]) - 1}")
    order = np.argsort(silo_of(targets, bounds), kind="stable")
    origins, targets = origins[order], targets[order]
    rows = Message(Role.PARTY, Role.PARTY,
                   {name: np.asarray(v)[order] for name, v in message.fields.items()},
                   message.bits_per_value, origins)
    layout = RowLayout.of(rows, f"party {identity!r}")
    raw_layout = layout.to_bytes()
    bits = np.full(origins.size, layout.row_bits(), dtype=np.int64)
    dest = silo_of(targets, bounds)
    # Rows are grouped by destination silo: one sealed payload per group.
    starts = np.flatnonzero(np.r_[True, dest[1:] != dest[:-1]]) if dest.size \
        else np.zeros(0, dtype=np.int64)
    stops = np.r_[starts[1:], dest.size][:starts.size]
    directory, payloads = bytearray(), []
    for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
        part = slice(int(start), int(stop))
        silo = int(dest[start])
        sealed = keys.seal(round_, silo, 0, layout.pack(rows, part), origins[part],
                           targets[part], bits[part], layout=raw_layout)
        directory += varint(silo) + varint(len(sealed)) + varint(stop - start)
        payloads.append(sealed)
    meta = Message(Role.PARTY, Role.SERVER, {PEER_TO: targets},
                   {PEER_TO: rows.bits_per_value[PEER_TO]}, origins)
    frame = encode(Envelope(protocol, run, round_, "party", identity, meta))
    return RELAY_MAGIC + _LENGTHS.pack(len(frame), len(raw_layout), len(directory)) \
        + frame + raw_layout + bytes(directory) + b"".join(payloads)


def parse_request(request: bytes, expect: Expectation, sender: int, bounds: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[RelayedPayload]]:
    """The server's side: the declared rows (origins, targets, bits) and the payloads of
    a ``Relay`` request from silo ``sender``; a WireError names the sender and the fault."""
    who = f"party {expect.sender_id!r}"
    meta_raw, raw_layout, directory, body = _split(bytes(request), who, RELAY_MAGIC)
    meta = decode(meta_raw, Expectation(
        expect.protocol, expect.run, expect.round, "party", expect.sender_id, Role.SERVER,
        party_ids=expect.party_ids, max_elements=expect.max_elements,
        fields=frozenset({PEER_TO}))).message
    layout = RowLayout.from_bytes(raw_layout, who)
    if PEER_TO not in layout.names:
        raise WireError(who, "layout", f"rows to parties need the field {PEER_TO!r}")
    origins = np.asarray(meta.parties, dtype=np.int64)
    targets = np.asarray(meta.fields[PEER_TO])
    if targets.dtype.kind not in "iu" or targets.ndim != 1:
        raise WireError(who, "meta", "row destinations must be integers")
    targets = targets.astype(np.int64)
    bits = np.full(origins.size, layout.row_bits(), dtype=np.int64)
    n_parties = int(bounds[-1])
    if targets.size and (int(targets.min()) < 0 or int(targets.max()) >= n_parties):
        raise WireError(who, PEER_TO, f"addresses a party outside 0..{n_parties - 1}")
    n_silos = len(bounds) - 1
    dest = silo_of(targets, bounds)
    if np.any(np.diff(dest) < 0):
        raise WireError(who, PEER_TO, "rows must be grouped by destination silo")
    payloads, offset, row = [], 0, 0
    for silo, size, rows in _entries(directory, 3, who, n_silos, body, origins.size):
        part = slice(row, row + rows)
        if np.any(dest[part] != silo):
            raise WireError(who, "directory", f"the rows declared for silo {silo} are not "
                                              "addressed to it")
        payloads.append(RelayedPayload(sender, silo, bytes(body[offset:offset + size]),
                                       origins[part], targets[part], bits[part], raw_layout))
        offset, row = offset + size, row + rows
    return origins, targets, bits, payloads


def reply_for(payloads: list[RelayedPayload], *, protocol: str, run: str,
              round_: int) -> bytes:
    """The server's reply to one silo: the payloads sealed for it, in sender order, their
    declared rows and their senders' layouts (without the ``b"P"`` reply tag)."""
    payloads = sorted(payloads, key=lambda p: p.sender)
    empty = np.zeros(0, dtype=np.int64)
    origins = np.concatenate([empty, *(p.origins for p in payloads)])
    targets = np.concatenate([empty, *(p.targets for p in payloads)])
    meta = Message(Role.SERVER, Role.PARTY, {PEER_FROM: origins}, {PEER_FROM: 64}, targets)
    frame = encode(Envelope(protocol, run, round_, "server", "server", meta))
    layouts: list[bytes] = []
    directory = bytearray()
    for p in payloads:
        if p.layout not in layouts:
            layouts.append(p.layout)
        directory += b"".join(varint(v) for v in (p.sender, len(p.sealed), p.origins.size,
                                                    layouts.index(p.layout)))
    raw_layouts = varint(len(layouts)) + b"".join(varint(len(raw)) + raw for raw in layouts)
    return _LENGTHS.pack(len(frame), len(raw_layouts), len(directory)) + frame \
        + raw_layouts + bytes(directory) + b"".join(p.sealed for p in payloads)


def _layouts(raw: bytes, sender: str) -> list[bytes]:
    """The layouts of a reply, as bytes (each is read when a payload names it)."""
    numbers = _Varints(raw, sender, "layouts")
    count, out = numbers.next(), []
    for _ in range(count):
        size = numbers.next()
        if numbers.at + size > len(raw):
            raise WireError(sender, "layouts", "a layout runs past the section")
        out.append(raw[numbers.at:numbers.at + size])
        numbers.at += size
    if not numbers.done():
        raise WireError(sender, "layouts", "bytes beyond the declared layouts")
    return out


def _empty_like(message: Message) -> Message:
    """No rows, with the fields a relay round of this step carries."""
    fields = {name: np.asarray(v)[:0] for name, v in message.fields.items()}
    return Message(Role.PARTY, Role.PARTY, fields, message.bits_per_value,
                   np.zeros(0, dtype=np.int64))


def open_reply(reply: bytes, keys: PeerKeys, bounds: np.ndarray, own: int,
               outgoing: Message | None, *, protocol: str, run: str,
               round_: int) -> Message | None:
    """A party's side: open the payloads the server forwarded, read exactly their
    declared rows from each, and deliver them (:func:`deliver_peer_rows`).

    ``outgoing`` is this silo's own message of the round: rows from others must carry the
    same fields (the same step produced them) unless it has no rows (a party that only
    waits, in a round with service roles), and it gives their layout when no row arrives.
    A service that sent nothing this round passes ``None`` and gets ``None`` when no row
    arrives. Senders are named by ``keys.names`` (silos, then service roles).
    """
    server = "server 'server'"
    meta_raw, raw_layouts, directory, body = _split(bytes(reply), server, b"")
    meta = decode(meta_raw, Expectation(protocol, run, round_, "server", "server",
                                        Role.PARTY, fields=frozenset({PEER_FROM}))).message
    origins = np.asarray(meta.fields[PEER_FROM], dtype=np.int64)
    targets = np.asarray(meta.parties, dtype=np.int64)
    layouts = _layouts(raw_layouts, server)
    mine = np.arange(bounds[own], bounds[own + 1])
    if not np.all(np.isin(targets, mine)):
        raise WireError(server, "parties", "forwards rows addressed to other silos")
    parts: list[Message] = []
    offset, row = 0, 0
    for silo, size, rows, index in _entries(directory, 4, server, len(bounds) - 1, body,
                                            origins.size):
        if index >= len(layouts):
            raise WireError(server, "directory", f"names layout {index} of {len(layouts)}")
        part = slice(row, row + rows)
        sender = f"party {keys.names[silo]!r}"
        layout = RowLayout.from_bytes(layouts[index], sender)
        bits = np.full(rows, layout.row_bits(), dtype=np.int64)
        plain = keys.open(round_, silo, 0, bytes(body[offset:offset + size]),
                          origins[part], targets[part], bits, layout=layouts[index])
        if PEER_TO not in layout.names:
            raise WireError(sender, "layout", f"rows to parties need the field {PEER_TO!r}")
        if not np.all(np.isin(origins[part], np.arange(bounds[silo], bounds[silo + 1]))):
            raise WireError(sender, "relayed payload", "carries rows that are not its own")
        fields = layout.unpack(plain, rows, sender)
        fields[PEER_TO] = targets[part]
        inner = Message(Role.PARTY, Role.PARTY,
                        {name: fields[name] for name in layout.names}, layout.bits,
                        origins[part])
        expected = outgoing if outgoing is not None and len(outgoing.parties) else (
            parts[0] if parts else inner)
        if set(inner.fields) != set(expected.fields):
            raise WireError(sender, "fields", f"expected {sorted(expected.fields)}, got "
                                              f"{sorted(inner.fields)}")
        parts.append(inner)
        offset, row = offset + size, row + rows
    if not parts:
        return None if outgoing is None else deliver_peer_rows(_empty_like(outgoing))
    fields = {name: np.concatenate([np.asarray(p.fields[name]) for p in parts])
              for name in parts[0].fields}
    merged = Message(Role.PARTY, Role.PARTY, fields, parts[0].bits_per_value,
                     np.concatenate([np.asarray(p.parties) for p in parts]))
    return deliver_peer_rows(merged)
