"""The wire format of networked runs: a versioned, validated encoding of a step's message.

A protocol step emits a :class:`~fedustat.protocols.base.Message` (named arrays and the
bits each element costs). Between processes it travels as one frame::

    b"FDST" | version (uint16, big-endian) | header length (uint32, big-endian)
    | header (UTF-8 JSON) | body (the fields' bytes, in header order)

Nothing is ever unpickled: the header is JSON with a fixed set of keys and the body is raw
little-endian numbers of a whitelisted dtype. Integer and boolean fields whose declared
wire size (``bits_per_value``) is below their dtype's width are bit-packed to exactly that
many bits, so the bytes on the wire are the bits the cost accounting counts (rounded up
to whole bytes per field).

:func:`decode` checks everything a forged or malformed frame could get wrong before any
array reaches a protocol step: magic, version, header keys and types, the sender's role
and identity against what the transport authenticated, the run, round and protocol,
dtypes, shapes, sizes (against caps, and the body length exactly), floats finite, and
the party ids a party claims (only its own). A failure raises :class:`WireError`, which
names the sender and the field, so a server can drop one bad contribution without
touching the others.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedustat.protocols.base import Message, PeerTraffic, Role

__all__ = ["WIRE_VERSION", "Envelope", "Expectation", "WireError", "decode", "encode"]

WIRE_VERSION = 1
MAGIC = b"FDST"
_PREFIX = struct.Struct(">4sHI")

#: Roles a frame may come from: the aggregator, a party (one record or a silo of rows),
#: a computing server of a two-server protocol, and the offline dealer.
ROLES = ("party", "server", "computing-server", "dealer")

# Little-endian dtypes only; anything else (objects, strings, big-endian) is refused.
_DTYPES: dict[str, np.dtype] = {name: np.dtype(name).newbyteorder("<") for name in (
    "bool", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f8")}
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
_IDENTITY = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_HEADER_KEYS = {"protocol", "run", "round", "sender", "sender_id", "receiver", "fields",
                "parties", "peer"}
_PEER_FIELDS = ("parties", "sent", "received", "offline_received")
MAX_HEADER_BYTES = 1 << 20
MAX_DIMENSIONS = 8


class WireError(ValueError):
    """A frame that cannot be accepted; names who sent it and which part is wrong."""

    def __init__(self, sender: str, field_name: str, reason: str) -> None:
        self.sender = sender
        self.field = field_name
        self.reason = reason
        super().__init__(f"message from {sender}: {field_name}: {reason}")


@dataclass(frozen=True)
class Envelope:
    """A message with the routing facts a transport checks.

    ``protocol`` identifies the protocol and its public configuration (the transport
    chooses the string, e.g. a registry name and a hash of its parameters); ``run`` names
    one execution; ``round`` counts server-party exchanges from 0; ``sender_id`` is the
    sender's identity as its certificate states it.
    """

    protocol: str
    run: str
    round: int
    sender: str
    sender_id: str
    message: Message


@dataclass(frozen=True)
class Expectation:
    """What the receiver will accept in the next frame.

    ``sender_id`` is the identity the channel authenticated (the TLS peer), not what the
    frame claims; ``party_ids`` are the global ids the authenticated party may speak for
    (its own rows); ``max_elements`` caps the numbers in one frame so a forged shape cannot
    exhaust memory; ``fields`` (optional) fixes the field names a step must send.
    """

    protocol: str
    run: str
    round: int
    sender: str
    sender_id: str
    receiver: Role
    party_ids: np.ndarray | None = None
    max_elements: int = 1 << 27
    fields: frozenset[str] | None = None
    allow_nonfinite: frozenset[str] = field(default_factory=frozenset)


def _packed_bytes(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


def _pack(values: np.ndarray, bits: int) -> bytes:
    """The low ``bits`` bits of each value, most significant first, packed densely."""
    as_unsigned = values.astype(np.int64).view(np.uint64) if values.dtype.kind == "i" \
        else values.astype(np.uint64)
    shifts = np.arange(bits - 1, -1, -1, dtype=np.uint64)
    bit_matrix = ((as_unsigned.reshape(-1, 1) >> shifts) & np.uint64(1)).astype(np.uint8)
    return np.packbits(bit_matrix.reshape(-1)).tobytes()


def _unpack(raw: bytes, count: int, bits: int, dtype: np.dtype, signed: bool
            ) -> np.ndarray:
    bit_stream = np.unpackbits(np.frombuffer(raw, dtype=np.uint8))[:count * bits]
    weights = np.left_shift(np.uint64(1), np.arange(bits - 1, -1, -1, dtype=np.uint64))
    unsigned = (bit_stream.reshape(count, bits).astype(np.uint64) * weights).sum(
        axis=1, dtype=np.uint64)
    if signed and bits < 64:
        # Two's complement in `bits` bits: values at or above 2^(bits-1) are negative.
        # Subtract 2^bits modulo 2^64 (2^63 itself does not fit an int64), then reinterpret.
        unsigned[unsigned >= np.uint64(1 << (bits - 1))] -= np.uint64(1 << bits)
        return unsigned.view(np.int64).astype(dtype)
    return unsigned.astype(dtype) if dtype.kind != "b" else unsigned.astype(bool)


def _is_signed(values: np.ndarray) -> bool:
    """Whether packing needs two's complement: a signed dtype holding a negative value.

    A protocol declares the bits of its values' range: a k-ary report in 0..k-1 stored as
    int64 costs ceil(log2 k) bits, so non-negative values pack as unsigned numbers.
    """
    return values.dtype.kind == "i" and values.size > 0 and int(values.min()) < 0


def _fits(values: np.ndarray, bits: int) -> bool:
    if values.size == 0 or values.dtype.kind == "b" or bits >= 64:
        return True
    if not _is_signed(values):
        return int(values.max()) < (1 << bits)
    low, high = int(values.min()), int(values.max())
    return -(1 << (bits - 1)) <= low and high < (1 << (bits - 1))


def _field_entry(name: str, values: Any, bits: int, sender: str
                 ) -> tuple[dict[str, Any], bytes]:
    array = np.asarray(values)
    if array.dtype.kind in "iu" or array.dtype.kind == "b":
        dtype = np.dtype("bool") if array.dtype.kind == "b" else array.dtype.newbyteorder("<")
    elif array.dtype.kind == "f":
        dtype = np.dtype("<f8")
    else:
        raise WireError(sender, name, f"dtype {array.dtype} cannot travel (numbers only)")
    code = "bool" if dtype.kind == "b" else f"{dtype.kind}{dtype.itemsize}"
    if code not in _DTYPES:
        raise WireError(sender, name, f"dtype {array.dtype} cannot travel")
    array = np.ascontiguousarray(array, dtype=dtype)
    width = dtype.itemsize * 8
    if not 1 <= bits <= 64:
        raise WireError(sender, name, f"declared wire size {bits} bits is not in 1..64")
    packed = dtype.kind in "iub" and bits < width
    if packed and not _fits(array, bits):
        raise WireError(sender, name, f"values do not fit the declared {bits} bits")
    body = _pack(array.reshape(-1), bits) if packed else array.tobytes()
    entry = {"name": name, "dtype": code,
             "shape": list(array.shape), "bits": int(bits), "packed": packed,
             "signed": packed and _is_signed(array)}
    return entry, body


def encode(envelope: Envelope) -> bytes:
    """One frame for ``envelope`` (see the module docstring for the layout)."""
    message = envelope.message
    sender = f"{envelope.sender} {envelope.sender_id!r}"
    entries, bodies = [], []
    for name, values in message.fields.items():
        entry, body = _field_entry(name, values, int(message.bits_per_value[name]), sender)
        entries.append(entry)
        bodies.append(body)
    parties = None
    if message.parties is not None:
        entry, body = _field_entry("parties", np.asarray(message.parties, dtype=np.int64),
                                   64, sender)
        parties = entry
        bodies.append(body)
    peer = None
    if message.peer is not None:
        peer = {"rounds": int(message.peer.rounds), "fields": []}
        for name in _PEER_FIELDS:
            entry, body = _field_entry(name, getattr(message.peer, name), 64, sender)
            peer["fields"].append(entry)
            bodies.append(body)
    header = {"protocol": envelope.protocol, "run": envelope.run, "round": int(envelope.round),
              "sender": envelope.sender, "sender_id": envelope.sender_id,
              "receiver": str(message.receiver), "fields": entries, "parties": parties,
              "peer": peer}
    raw_header = json.dumps(header, separators=(",", ":")).encode()
    return _PREFIX.pack(MAGIC, WIRE_VERSION, len(raw_header)) + raw_header + b"".join(bodies)


class _Reader:
    """Reads a frame's body field by field, checking every declared size."""

    def __init__(self, body: memoryview, sender: str, max_elements: int) -> None:
        self.body = body
        self.offset = 0
        self.sender = sender
        self.budget = max_elements

    def fail(self, name: str, reason: str) -> WireError:
        return WireError(self.sender, name, reason)

    def read(self, entry: Any, expected_name: str | None = None) -> tuple[str, np.ndarray, int]:
        if not isinstance(entry, dict) or set(entry) != {"name", "dtype", "shape", "bits",
                                                         "packed", "signed"}:
            raise self.fail(expected_name or "fields", "malformed field description")
        name = entry["name"]
        if not isinstance(name, str) or not _NAME.match(name):
            raise self.fail("fields", f"field name {name!r} is not a valid identifier")
        if expected_name is not None and name != expected_name:
            raise self.fail(expected_name, f"expected field {expected_name!r}, got {name!r}")
        dtype = _DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) else None
        if dtype is None:
            raise self.fail(name, f"dtype {entry['dtype']!r} is not accepted "
                                  f"(accepted: {sorted(_DTYPES)})")
        shape = entry["shape"]
        if (not isinstance(shape, list) or len(shape) > MAX_DIMENSIONS
                or not all(type(d) is int and d >= 0 for d in shape)):
            raise self.fail(name, f"shape {shape!r} is not a list of at most "
                                  f"{MAX_DIMENSIONS} non-negative integers")
        count = math.prod(shape)
        if count > self.budget:
            raise self.fail(name, f"{count} elements exceed what this frame may carry")
        self.budget -= count
        bits, packed = entry["bits"], entry["packed"]
        width = dtype.itemsize * 8
        if type(bits) is not int or not 1 <= bits <= 64:
            raise self.fail(name, f"declared wire size {bits!r} bits is not in 1..64")
        if type(packed) is not bool or packed != (dtype.kind in "iub" and bits < width):
            raise self.fail(name, "packing flag does not match the dtype and wire size")
        signed = entry["signed"]
        if type(signed) is not bool or (signed and not (packed and dtype.kind == "i")):
            raise self.fail(name, "sign flag does not match the dtype and packing")
        size = _packed_bytes(count, bits) if packed else count * dtype.itemsize
        if self.offset + size > len(self.body):
            raise self.fail(name, f"body ends before the field's {size} bytes")
        raw = self.body[self.offset:self.offset + size]
        self.offset += size
        if packed:
            values = _unpack(bytes(raw), count, bits, dtype, signed)
        else:
            values = np.frombuffer(raw, dtype=dtype).copy()
            if dtype.kind == "b" and np.any(np.frombuffer(raw, dtype=np.uint8) > 1):
                raise self.fail(name, "boolean bytes other than 0 and 1")
        return name, values.reshape(shape), bits


def _parse_header(frame: bytes, sender: str) -> tuple[dict[str, Any], memoryview]:
    if len(frame) < _PREFIX.size:
        raise WireError(sender, "frame", f"{len(frame)} bytes is shorter than a frame header")
    magic, version, header_length = _PREFIX.unpack_from(frame)
    if magic != MAGIC:
        raise WireError(sender, "frame", "not a fedustat frame (bad magic bytes)")
    if version != WIRE_VERSION:
        raise WireError(sender, "version", f"speaks wire version {version}, this build "
                                           f"speaks {WIRE_VERSION}")
    if header_length > MAX_HEADER_BYTES or _PREFIX.size + header_length > len(frame):
        raise WireError(sender, "header", f"declared header length {header_length} is "
                                          "beyond the frame or the limit")
    raw = frame[_PREFIX.size:_PREFIX.size + header_length]
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(sender, "header", f"not valid JSON ({exc})") from None
    if not isinstance(header, dict) or set(header) != _HEADER_KEYS:
        raise WireError(sender, "header", f"keys must be exactly {sorted(_HEADER_KEYS)}")
    return header, memoryview(frame)[_PREFIX.size + header_length:]


def _check_routing(header: dict[str, Any], expect: Expectation, sender: str) -> None:
    facts = {"sender": expect.sender, "sender_id": expect.sender_id,
             "protocol": expect.protocol, "run": expect.run, "round": expect.round,
             "receiver": str(expect.receiver)}
    for key in ("sender", "sender_id"):
        value = header[key]
        if not isinstance(value, str) or not _IDENTITY.match(value):
            raise WireError(sender, key, f"{value!r} is not a valid {key}")
    if header["sender"] not in ROLES:
        raise WireError(sender, "sender", f"unknown role {header['sender']!r}")
    for key, wanted in facts.items():
        if header[key] != wanted or type(header[key]) is not type(wanted):
            raise WireError(sender, key, f"expected {wanted!r}, the frame says "
                                         f"{header[key]!r}")


def decode(frame: bytes, expect: Expectation) -> Envelope:
    """Parse and validate one frame; the :class:`Envelope` it carries, or a WireError.

    The error names the sender as the channel authenticated it (``expect.sender`` and
    ``expect.sender_id``) and the field at fault.
    """
    sender = f"{expect.sender} {expect.sender_id!r}"
    header, body = _parse_header(bytes(frame), sender)
    _check_routing(header, expect, sender)
    reader = _Reader(body, sender, expect.max_elements)
    if not isinstance(header["fields"], list):
        raise WireError(sender, "fields", "must be a list")
    fields: dict[str, np.ndarray] = {}
    bits: dict[str, int] = {}
    for entry in header["fields"]:
        name, values, field_bits = reader.read(entry)
        if name in fields:
            raise WireError(sender, name, "field sent twice")
        if values.dtype.kind == "f" and name not in expect.allow_nonfinite \
                and not np.all(np.isfinite(values)):
            raise WireError(sender, name, "holds NaN or infinite values")
        fields[name], bits[name] = values, field_bits
    if expect.fields is not None and set(fields) != expect.fields:
        raise WireError(sender, "fields", f"expected fields {sorted(expect.fields)}, got "
                                          f"{sorted(fields)}")
    parties = None
    if header["parties"] is not None:
        _, parties, _ = reader.read(header["parties"], "parties")
        if parties.dtype != np.int64 or parties.ndim != 1:
            raise WireError(sender, "parties", "must be a 1-D int64 array of party ids")
        if expect.party_ids is not None and not np.all(np.isin(parties, expect.party_ids)):
            stranger = int(parties[~np.isin(parties, expect.party_ids)][0])
            raise WireError(sender, "parties", f"speaks for party {stranger}, which is not "
                                               "one of its own")
    elif expect.sender == "party":
        raise WireError(sender, "parties", "a party's message must name its rows' party ids")
    peer = _read_peer(header["peer"], reader, sender)
    if reader.offset != len(reader.body):
        raise WireError(sender, "body", f"{len(reader.body) - reader.offset} bytes beyond "
                                        "the declared fields")
    try:
        # Computing servers and the dealer speak as parties of the secure sub-protocol.
        role = Role.SERVER if header["sender"] == "server" else Role.PARTY
        message = Message(role, expect.receiver, fields, bits, parties, peer)
    except (TypeError, ValueError) as exc:
        raise WireError(sender, "fields", str(exc)) from None
    return Envelope(header["protocol"], header["run"], header["round"], header["sender"],
                    header["sender_id"], message)


def _read_peer(peer: Any, reader: _Reader, sender: str) -> PeerTraffic | None:
    if peer is None:
        return None
    if (not isinstance(peer, dict) or set(peer) != {"rounds", "fields"}
            or type(peer["rounds"]) is not int or not isinstance(peer["fields"], list)
            or len(peer["fields"]) != len(_PEER_FIELDS)):
        raise WireError(sender, "peer", "malformed peer-traffic report")
    arrays = {name: reader.read(entry, name)[1]
              for name, entry in zip(_PEER_FIELDS, peer["fields"], strict=True)}
    try:
        return PeerTraffic(rounds=peer["rounds"], **arrays)
    except (TypeError, ValueError) as exc:
        raise WireError(sender, "peer", str(exc)) from None


def field_bytes(message: Message) -> Mapping[str, int]:
    """Bytes each field of ``message`` occupies on the wire (for cost reports)."""
    out = {}
    for name, values in message.fields.items():
        _, body = _field_entry(name, values, int(message.bits_per_value[name]), "self")
        out[name] = len(body)
    return out
