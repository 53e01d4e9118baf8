"""Frames of a relay round: peer rows sealed by their sender, forwarded by the server.

In a relay round every party process (a silo) sends the server one ``Relay`` request::

    b"FDRL" | meta length (uint32) | directory length (uint32)
    | meta (a wire frame) | directory (JSON) | sealed payloads

* *meta* is a validated wire frame (:mod:`fedustat.runtime.wire`) of the rows' routing
  facts only: each row's origin party (``parties``, checked to be the sender's own), its
  destination (``to``) and its payload bits (``row_bits``). The server counts peer
  traffic from it (:meth:`~fedustat.runtime.simulate.MessageLog.record_peer_rows`) and
  routes by it; it never sees a payload.
* the *directory* lists one sealed payload per destination silo: ``{"to", "bytes",
  "rows"}``, the rows being the meta rows addressed to that silo, in order.
* each payload is the wire frame of those rows (all fields, ``to`` included) sealed with
  :class:`~fedustat.runtime.network.e2e.PeerKeys` and bound to the declared rows.

The server's reply to silo ``s`` has the same layout (first byte ``b"P"``, then the
lengths): a meta frame from the server (``from``, ``row_bits``, ``parties`` = recipients)
and a directory ``{"from", "bytes", "rows"}`` of the payloads sealed for ``s``. The
receiver opens each payload (a failure names the sender), decodes it as a frame from
that party, and checks it carries exactly the declared rows before its step sees them.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import numpy as np

from fedustat.protocols.base import PEER_FROM, PEER_TO, Message, Role
from fedustat.runtime.network.e2e import PeerKeys
from fedustat.runtime.simulate import deliver_peer_rows
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

__all__ = ["RELAY_MAGIC", "RelayedPayload", "open_reply", "parse_request", "reply_for",
           "seal_rows"]

RELAY_MAGIC = b"FDRL"
_LENGTHS = struct.Struct(">II")
_ROW_BITS = "row_bits"
_MAX_DIRECTORY_BYTES = 1 << 22


@dataclass(frozen=True)
class RelayedPayload:
    """One sealed payload in transit: from silo ``sender`` to silo ``receiver``, with the
    routing facts of its rows (what the receiver authenticates it against)."""

    sender: int
    receiver: int
    sealed: bytes
    origins: np.ndarray
    targets: np.ndarray
    bits: np.ndarray


def silo_of(ids: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """The silo holding each party id; ``bounds`` are the silos' first ids and the end."""
    return np.searchsorted(bounds, np.asarray(ids, dtype=np.int64), side="right") - 1


def _split(frame: bytes, sender: str, first: bytes) -> tuple[bytes, list, memoryview]:
    head = len(first) + _LENGTHS.size
    if len(frame) < head or frame[:len(first)] != first:
        raise WireError(sender, "relay", "not a relay frame")
    meta_len, dir_len = _LENGTHS.unpack_from(frame, len(first))
    if dir_len > _MAX_DIRECTORY_BYTES or head + meta_len + dir_len > len(frame):
        raise WireError(sender, "relay", "declared lengths exceed the frame")
    meta = frame[head:head + meta_len]
    try:
        directory = json.loads(frame[head + meta_len:head + meta_len + dir_len].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(sender, "directory", f"not valid JSON ({exc})") from None
    if not isinstance(directory, list):
        raise WireError(sender, "directory", "must be a list")
    return meta, directory, memoryview(frame)[head + meta_len + dir_len:]


def _entries(directory: list, key: str, sender: str, n_silos: int, body: memoryview,
             n_rows: int) -> list[tuple[int, int, int]]:
    """(silo, bytes, rows) per directory entry, checked against the body and the meta."""
    out = []
    for entry in directory:
        if not isinstance(entry, dict) or set(entry) != {key, "bytes", "rows"} \
                or not all(type(entry[k]) is int for k in entry):
            raise WireError(sender, "directory", f"malformed entry {entry!r}")
        silo, size, rows = entry[key], entry["bytes"], entry["rows"]
        if not 0 <= silo < n_silos or size < 16 or rows < 1:
            raise WireError(sender, "directory", f"entry {entry!r} is out of range")
        out.append((silo, size, rows))
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
    bits = message.payload_bits_per_row()
    order = np.argsort(silo_of(targets, bounds), kind="stable")
    origins, targets, bits = origins[order], targets[order], bits[order]
    fields = {name: np.asarray(v)[order] for name, v in message.fields.items()}
    dest = silo_of(targets, bounds)
    directory, payloads = [], []
    for silo in np.unique(dest):
        rows = dest == silo
        inner = Message(Role.PARTY, Role.PARTY, {k: v[rows] for k, v in fields.items()},
                        message.bits_per_value, origins[rows])
        plain = encode(Envelope(protocol, run, round_, "party", identity, inner))
        sealed = keys.seal(round_, int(silo), 0, plain, origins[rows], targets[rows],
                           bits[rows])
        directory.append({"to": int(silo), "bytes": len(sealed), "rows": int(rows.sum())})
        payloads.append(sealed)
    meta = Message(Role.PARTY, Role.SERVER, {PEER_TO: targets, _ROW_BITS: bits},
                   {PEER_TO: 64, _ROW_BITS: 64}, origins)
    frame = encode(Envelope(protocol, run, round_, "party", identity, meta))
    header = json.dumps(directory, separators=(",", ":")).encode()
    return RELAY_MAGIC + _LENGTHS.pack(len(frame), len(header)) + frame + header \
        + b"".join(payloads)


def parse_request(request: bytes, expect: Expectation, sender: int, bounds: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[RelayedPayload]]:
    """The server's side: the declared rows (origins, targets, bits) and the payloads of
    a ``Relay`` request from silo ``sender``; a WireError names the sender and the fault."""
    who = f"party {expect.sender_id!r}"
    meta_raw, directory, body = _split(bytes(request), who, RELAY_MAGIC)
    meta = decode(meta_raw, Expectation(
        expect.protocol, expect.run, expect.round, "party", expect.sender_id, Role.SERVER,
        party_ids=expect.party_ids, max_elements=expect.max_elements,
        fields=frozenset({PEER_TO, _ROW_BITS}))).message
    origins = np.asarray(meta.parties, dtype=np.int64)
    targets = np.asarray(meta.fields[PEER_TO])
    bits = np.asarray(meta.fields[_ROW_BITS])
    if targets.dtype.kind not in "iu" or bits.dtype.kind not in "iu" or targets.ndim != 1:
        raise WireError(who, "meta", "row destinations and bits must be integers")
    targets, bits = targets.astype(np.int64), bits.astype(np.int64)
    n_parties = int(bounds[-1])
    if targets.size and (int(targets.min()) < 0 or int(targets.max()) >= n_parties):
        raise WireError(who, PEER_TO, f"addresses a party outside 0..{n_parties - 1}")
    if bits.size and int(bits.min()) < 0:
        raise WireError(who, _ROW_BITS, "negative bit counts")
    n_silos = len(bounds) - 1
    dest = silo_of(targets, bounds)
    if np.any(np.diff(dest) < 0):
        raise WireError(who, PEER_TO, "rows must be grouped by destination silo")
    payloads, offset, row = [], 0, 0
    for silo, size, rows in _entries(directory, "to", who, n_silos, body, origins.size):
        part = slice(row, row + rows)
        if np.any(dest[part] != silo):
            raise WireError(who, "directory", f"the rows declared for silo {silo} are not "
                                              "addressed to it")
        payloads.append(RelayedPayload(sender, silo, bytes(body[offset:offset + size]),
                                       origins[part], targets[part], bits[part]))
        offset, row = offset + size, row + rows
    return origins, targets, bits, payloads


def reply_for(payloads: list[RelayedPayload], *, protocol: str, run: str,
              round_: int) -> bytes:
    """The server's reply to one silo: the payloads sealed for it, in sender order, and
    their declared rows (without the ``b"P"`` reply tag)."""
    payloads = sorted(payloads, key=lambda p: p.sender)
    empty = np.zeros(0, dtype=np.int64)
    origins = np.concatenate([empty, *(p.origins for p in payloads)])
    targets = np.concatenate([empty, *(p.targets for p in payloads)])
    bits = np.concatenate([empty, *(p.bits for p in payloads)])
    meta = Message(Role.SERVER, Role.PARTY, {PEER_FROM: origins, _ROW_BITS: bits},
                   {PEER_FROM: 64, _ROW_BITS: 64}, targets)
    frame = encode(Envelope(protocol, run, round_, "server", "server", meta))
    directory = [{"from": p.sender, "bytes": len(p.sealed), "rows": int(p.origins.size)}
                 for p in payloads]
    header = json.dumps(directory, separators=(",", ":")).encode()
    return _LENGTHS.pack(len(frame), len(header)) + frame + header \
        + b"".join(p.sealed for p in payloads)


def _empty_like(message: Message) -> Message:
    """No rows, with the fields a relay round of this step carries."""
    fields = {name: np.asarray(v)[:0] for name, v in message.fields.items()}
    return Message(Role.PARTY, Role.PARTY, fields, message.bits_per_value,
                   np.zeros(0, dtype=np.int64))


def open_reply(reply: bytes, keys: PeerKeys, bounds: np.ndarray, own: int,
               outgoing: Message | None, *, protocol: str, run: str,
               round_: int) -> Message | None:
    """A party's side: open the payloads the server forwarded, check each one carries
    exactly its declared rows, and deliver them (:func:`deliver_peer_rows`).

    ``outgoing`` is this silo's own message of the round: rows from others must carry the
    same fields (the same step produced them) unless it has no rows (a party that only
    waits, in a round with service roles), and it gives their layout when no row arrives.
    A service that sent nothing this round passes ``None`` and gets ``None`` when no row
    arrives. Senders are named by ``keys.names`` (silos, then service roles).
    """
    meta_raw, directory, body = _split(bytes(reply), "server 'server'", b"")
    meta = decode(meta_raw, Expectation(protocol, run, round_, "server", "server",
                                        Role.PARTY, fields=frozenset({PEER_FROM, _ROW_BITS}))
                  ).message
    origins = np.asarray(meta.fields[PEER_FROM], dtype=np.int64)
    targets = np.asarray(meta.parties, dtype=np.int64)
    bits = np.asarray(meta.fields[_ROW_BITS], dtype=np.int64)
    mine = np.arange(bounds[own], bounds[own + 1])
    if not np.all(np.isin(targets, mine)):
        raise WireError("server 'server'", "parties", "forwards rows addressed to other silos")
    parts: list[Message] = []
    offset, row = 0, 0
    for silo, size, rows in _entries(directory, "from", "server 'server'", len(bounds) - 1,
                                     body, origins.size):
        part = slice(row, row + rows)
        plain = keys.open(round_, silo, 0, bytes(body[offset:offset + size]),
                          origins[part], targets[part], bits[part])
        sender = keys.names[silo]
        inner = decode(plain, Expectation(protocol, run, round_, "party", sender, Role.PARTY,
                                          party_ids=np.arange(bounds[silo],
                                                              bounds[silo + 1]))).message
        layout = outgoing if outgoing is not None and len(outgoing.parties) else (
            parts[0] if parts else inner)
        if set(inner.fields) != set(layout.fields):
            raise WireError(f"party {sender!r}", "fields", f"expected {sorted(layout.fields)}"
                                                           f", got {sorted(inner.fields)}")
        if not (np.array_equal(inner.parties, origins[part])
                and np.array_equal(inner.fields[PEER_TO], targets[part])
                and np.array_equal(inner.payload_bits_per_row(), bits[part])):
            raise WireError(f"party {sender!r}", "relayed payload",
                            "carries other rows than it declared")
        parts.append(inner)
        offset, row = offset + size, row + rows
    if not parts:
        return None if outgoing is None else deliver_peer_rows(_empty_like(outgoing))
    fields = {name: np.concatenate([np.asarray(p.fields[name]) for p in parts])
              for name in parts[0].fields}
    merged = Message(Role.PARTY, Role.PARTY, fields, parts[0].bits_per_value,
                     np.concatenate([np.asarray(p.parties) for p in parts]))
    return deliver_peer_rows(merged)

