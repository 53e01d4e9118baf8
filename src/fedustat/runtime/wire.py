"""The wire format of networked runs: a versioned, validated encoding of a step's message.

A protocol step emits a :class:`~fedustat.protocols.base.Message` (named arrays and the
bits each element costs). Between processes it travels as one frame, binary throughout
(integers are unsigned LEB128 varints unless a width is given; ``zz`` marks a zigzag
varint, a signed number)::

    b"FDST" | version (uint16, big-endian) | header length (uint32, big-endian)
    | header | body (the arrays' bytes, in header order)

    header  = protocol (32 bytes: SHA-256 of the protocol string)
            | run (varint length, UTF-8) | round (varint)
            | sender role (1 byte, index in ROLES) | sender id (1-byte length, ASCII)
            | receiver (1 byte: 0 party, 1 server)
            | field count (varint) | per field: name (1-byte length, ASCII) | array
            | present (1 byte: 1 party ids, 2 peer traffic)
            | [party ids: array] | [peer traffic: rounds (varint) | 4 arrays]
    array   = dtype (1 byte, index in DTYPES) | bits (1 byte) | flags (1 byte: 1 packed,
              2 signed, 4 column) | dimensions (1 byte) | each dimension (varint)
            | [column: form (1 byte: 0 offsets, 1 steps) | origin (zz) | least step (zz,
              steps only) | width (1 byte)]

The protocol string (the transport's fingerprint of the protocol and its public
configuration) travels as its SHA-256 digest, 32 bytes whatever its length: the receiver
always knows the protocol it runs and checks the digest against it. A frame of another
version is refused by its version number before anything else is read.

Nothing is ever unpickled and no text is parsed beyond names: the body is raw
little-endian numbers of a whitelisted dtype. Payload fields whose declared wire size
(``bits_per_value``) is below their dtype's width are bit-packed to exactly that many
bits, so the bytes on the wire are the bits the cost accounting counts (rounded up to
whole bytes per field). What is not payload -- a frame's party ids, its peer-traffic
counts and the routing fields of relay rows (``to``, ``from``) -- may travel as an
integer *column*: the values minus the least of them (``offsets``), or the first value
and the steps between neighbours minus the least step (``steps``), bit-packed to the
width of the largest; the encoder takes the shortest of these and plain packing. A
contiguous range of party ids costs no body bytes at all.

Rows a party addresses to other parties are sealed per destination, so their bodies
travel apart from their descriptions: :class:`RowLayout` is a message's field
descriptions (as in a header) sent once, and the body of any subset of its rows
(:mod:`fedustat.runtime.network.relay` gives the request that carries them).

:func:`decode` checks everything a forged or malformed frame could get wrong before any
array reaches a protocol step: magic, version, the header's structure (every length
within the frame, no byte left over), the sender's role and identity against what the
transport authenticated, the run, round and protocol, dtypes, flags, shapes, sizes
(against caps, and the body length exactly), floats finite, column values within their
dtype and declared bits, and the party ids a party claims (only its own). A failure
raises :class:`WireError`, which names the sender and the field, so a server can drop one
bad contribution without touching the others.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedustat.protocols.base import ROUTING_FIELDS, Message, PeerTraffic, Role

__all__ = [
    "WIRE_VERSION",
    "Envelope",
    "Expectation",
    "RowLayout",
    "WireError",
    "decode",
    "encode",
    "varint",
]

WIRE_VERSION = 2
MAGIC = b"FDST"
_PREFIX = struct.Struct(">4sHI")

#: Roles a frame may come from: the aggregator, a party (one record or a silo of rows),
#: a computing server of a two-server protocol, and the offline dealer.
ROLES = ("party", "server", "computing-server", "dealer")
#: Whom a frame is for, by its code on the wire.
RECEIVERS = (Role.PARTY, Role.SERVER)

#: Little-endian dtypes only, by their code on the wire (the index); anything else
#: (objects, strings, big-endian) cannot travel.
DTYPES = ("bool", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8", "f8")
_DTYPES = [np.dtype(name).newbyteorder("<") for name in DTYPES]
_DTYPE_CODES = {name: code for code, name in enumerate(DTYPES)}

#: Fields that route rows rather than carry payload: they travel as integer columns.
COLUMN_FIELDS = frozenset(ROUTING_FIELDS)

# Array flags and column forms.
PACKED, SIGNED, COLUMN = 1, 2, 4
OFFSETS, STEPS = 0, 1
# Header presence bits.
HAS_PARTIES, HAS_PEER = 1, 2

_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
_IDENTITY = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_PEER_FIELDS = ("parties", "sent", "received", "offline_received")
_INT64_SPAN = 1 << 63
MAX_HEADER_BYTES = 1 << 20
MAX_RUN_BYTES = 1024
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
    chooses the string, e.g. a registry name and a hash of its parameters; it travels as
    its SHA-256 digest); ``run`` names one execution; ``round`` counts server-party
    exchanges from 0; ``sender_id`` is the sender's identity as its certificate states it.
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


def protocol_digest(protocol: str) -> bytes:
    """The 32 bytes a frame carries for its protocol string."""
    return hashlib.sha256(protocol.encode()).digest()


# --- numbers -------------------------------------------------------------------------

def varint(value: int) -> bytes:
    """Unsigned LEB128: seven bits a byte, least significant first."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def _zigzag(value: int) -> int:
    """A signed number as an unsigned one, small magnitudes small (0, -1, 1, -2, ...)."""
    return value << 1 if value >= 0 else ((-value) << 1) - 1


def _unzigzag(value: int) -> int:
    return value >> 1 if not value & 1 else -((value + 1) >> 1)


def _packed_bytes(count: int, bits: int) -> int:
    return (count * bits + 7) // 8


def _pack(values: np.ndarray, bits: int) -> bytes:
    """The low ``bits`` bits of each value, most significant first, packed densely."""
    if bits == 0 or values.size == 0:
        return b""
    as_unsigned = values.astype(np.int64).view(np.uint64) if values.dtype.kind == "i" \
        else values.astype(np.uint64)
    shifts = np.arange(bits - 1, -1, -1, dtype=np.uint64)
    bit_matrix = ((as_unsigned.reshape(-1, 1) >> shifts) & np.uint64(1)).astype(np.uint8)
    return np.packbits(bit_matrix.reshape(-1)).tobytes()


def _unpack_unsigned(raw: bytes, count: int, bits: int) -> np.ndarray:
    if bits == 0 or count == 0:
        return np.zeros(count, dtype=np.uint64)
    bit_stream = np.unpackbits(np.frombuffer(raw, dtype=np.uint8))[:count * bits]
    weights = np.left_shift(np.uint64(1), np.arange(bits - 1, -1, -1, dtype=np.uint64))
    return (bit_stream.reshape(count, bits).astype(np.uint64) * weights).sum(
        axis=1, dtype=np.uint64)


def _unpack(raw: bytes, count: int, bits: int, dtype: np.dtype, signed: bool
            ) -> np.ndarray:
    unsigned = _unpack_unsigned(raw, count, bits)
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


# --- arrays --------------------------------------------------------------------------

def _column(values: np.ndarray) -> tuple[dict[str, int], bytes] | None:
    """The shorter column form of integer ``values`` (see the module docstring), or None
    when their range does not fit 63 bits."""
    flat = values.reshape(-1)
    if flat.size == 0:
        return {"form": OFFSETS, "origin": 0, "step": 0, "width": 0}, b""
    low, high = int(flat.min()), int(flat.max())
    if high - low >= _INT64_SPAN or high >= _INT64_SPAN:
        return None
    signed = flat.astype(np.int64)
    # Exact in int64: every difference below lies within the values' range (< 2^63).
    width = (high - low).bit_length()
    best = ({"form": OFFSETS, "origin": low, "step": 0, "width": width},
            _pack(signed - np.int64(low), width))
    best_size = len(varint(_zigzag(low))) + len(best[1])
    if flat.size > 1:
        steps = np.diff(signed)
        least = int(steps.min())
        # The spread of the steps is below 2^64: exact as unsigned differences.
        shifted = steps.view(np.uint64) - np.uint64(least % (1 << 64))
        step_width = (int(steps.max()) - least).bit_length()
        body = _pack(shifted, step_width)
        size = len(varint(_zigzag(int(signed[0])))) + len(varint(_zigzag(least))) + len(body)
        if size < best_size:
            return {"form": STEPS, "origin": int(signed[0]), "step": least,
                    "width": step_width}, body
    return best


def _describe(name: str, values: Any, bits: int, sender: str
              ) -> tuple[dict[str, Any], np.ndarray]:
    """The description of one array as a payload field, and the array in its wire dtype;
    a WireError if it cannot travel."""
    array = np.asarray(values)
    if array.dtype.kind in "iu" or array.dtype.kind == "b":
        dtype = np.dtype("bool") if array.dtype.kind == "b" else array.dtype.newbyteorder("<")
    elif array.dtype.kind == "f":
        dtype = np.dtype("<f8")
    else:
        raise WireError(sender, name, f"dtype {array.dtype} cannot travel (numbers only)")
    code = "bool" if dtype.kind == "b" else f"{dtype.kind}{dtype.itemsize}"
    if code not in _DTYPE_CODES:
        raise WireError(sender, name, f"dtype {array.dtype} cannot travel")
    array = np.ascontiguousarray(array, dtype=dtype)
    width = dtype.itemsize * 8
    if not 1 <= bits <= 64:
        raise WireError(sender, name, f"declared wire size {bits} bits is not in 1..64")
    if array.ndim > MAX_DIMENSIONS:
        raise WireError(sender, name, f"{array.ndim} dimensions (at most {MAX_DIMENSIONS})")
    packed = dtype.kind in "iub" and bits < width
    if packed and not _fits(array, bits):
        raise WireError(sender, name, f"values do not fit the declared {bits} bits")
    description = {"dtype": _DTYPE_CODES[code], "bits": int(bits),
                   "flags": (PACKED if packed else 0)
                   | (SIGNED if packed and _is_signed(array) else 0),
                   "shape": list(array.shape), "column": None}
    return description, array


def _body(description: dict[str, Any], array: np.ndarray) -> bytes:
    """A payload field's body: bit-packed to its declared bits, or its raw bytes."""
    if description["flags"] & PACKED:
        return _pack(array.reshape(-1), description["bits"])
    return array.tobytes()


def _array(name: str, values: Any, bits: int, sender: str, column: bool
           ) -> tuple[dict[str, Any], bytes]:
    """The description and body bytes of one array; ``column`` allows the column forms."""
    description, array = _describe(name, values, bits, sender)
    body = _body(description, array)
    if column and array.dtype.kind in "iu":
        as_column = _column(array)
        if as_column is not None:
            extra = len(varint(_zigzag(as_column[0]["origin"]))) + (
                len(varint(_zigzag(as_column[0]["step"])))
                if as_column[0]["form"] == STEPS else 0)
            if extra + len(as_column[1]) + 2 < len(body):
                return {**description, "flags": COLUMN, "column": as_column[0]}, as_column[1]
    return description, body


# --- the header as bytes ---------------------------------------------------------------

def _pack_array(description: dict[str, Any]) -> bytes:
    out = bytearray([description["dtype"], description["bits"], description["flags"],
                     len(description["shape"])])
    for extent in description["shape"]:
        out += varint(extent)
    if description["flags"] & COLUMN:
        column = description["column"]
        out.append(column["form"])
        out += varint(_zigzag(column["origin"]))
        if column["form"] == STEPS:
            out += varint(_zigzag(column["step"]))
        out.append(column["width"])
    return bytes(out)


def _pack_header(header: dict[str, Any]) -> bytes:
    """The header's bytes from its parts as they travel (codes, raw strings)."""
    out = bytearray(header["protocol"])
    out += varint(len(header["run"])) + header["run"]
    out += varint(header["round"])
    out.append(header["sender"])
    out += bytes([len(header["sender_id"])]) + header["sender_id"]
    out.append(header["receiver"])
    out += varint(len(header["fields"]))
    for name, description in header["fields"]:
        out += bytes([len(name)]) + name + _pack_array(description)
    present = (HAS_PARTIES if header["parties"] is not None else 0) \
        | (HAS_PEER if header["peer"] is not None else 0)
    out.append(present)
    if header["parties"] is not None:
        out += _pack_array(header["parties"])
    if header["peer"] is not None:
        rounds, arrays = header["peer"]
        out += varint(rounds)
        for description in arrays:
            out += _pack_array(description)
    return bytes(out)


class _Cursor:
    """Reads a header's bytes; running past its end is a WireError naming the part."""

    def __init__(self, raw: bytes, sender: str, container: str = "header") -> None:
        self.raw = raw
        self.at = 0
        self.sender = sender
        self.container = container

    def take(self, size: int, what: str) -> bytes:
        if self.at + size > len(self.raw):
            raise WireError(self.sender, what, f"the {self.container} ends inside it")
        out = self.raw[self.at:self.at + size]
        self.at += size
        return out

    def byte(self, what: str) -> int:
        if self.at >= len(self.raw):
            raise WireError(self.sender, what, f"the {self.container} ends inside it")
        self.at += 1
        return self.raw[self.at - 1]

    def varint(self, what: str) -> int:
        value = 0
        for shift in range(0, 70, 7):
            byte = self.byte(what)
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if value >= 1 << 64:
                    break
                return value
        raise WireError(self.sender, what, "a number beyond 64 bits")

    def zigzag(self, what: str) -> int:
        return _unzigzag(self.varint(what))


def _unpack_array(cursor: _Cursor, what: str) -> dict[str, Any]:
    description = {"dtype": cursor.byte(what), "bits": cursor.byte(what),
                   "flags": cursor.byte(what)}
    dimensions = cursor.byte(what)
    if dimensions > MAX_DIMENSIONS:
        raise WireError(cursor.sender, what, f"{dimensions} dimensions (at most "
                                             f"{MAX_DIMENSIONS})")
    description["shape"] = [cursor.varint(what) for _ in range(dimensions)]
    description["column"] = None
    if description["flags"] & COLUMN:
        form = cursor.byte(what)
        origin = cursor.zigzag(what)
        step = cursor.zigzag(what) if form == STEPS else 0
        description["column"] = {"form": form, "origin": origin, "step": step,
                                  "width": cursor.byte(what)}
    return description


def _unpack_header(raw: bytes, sender: str) -> dict[str, Any]:
    """The header's parts (codes, raw strings); a WireError where its bytes are malformed."""
    cursor = _Cursor(raw, sender)
    header: dict[str, Any] = {"protocol": cursor.take(32, "protocol")}
    run_length = cursor.varint("run")
    if run_length > MAX_RUN_BYTES:
        raise WireError(sender, "run", f"{run_length} bytes (at most {MAX_RUN_BYTES})")
    header["run"] = cursor.take(run_length, "run")
    header["round"] = cursor.varint("round")
    header["sender"] = cursor.byte("sender")
    header["sender_id"] = cursor.take(cursor.byte("sender_id"), "sender_id")
    header["receiver"] = cursor.byte("receiver")
    count = cursor.varint("fields")
    if count > len(raw):
        raise WireError(sender, "fields", f"{count} fields cannot fit the header")
    header["fields"] = []
    for _ in range(count):
        name = cursor.take(cursor.byte("fields"), "fields")
        label = name.decode("ascii", "replace")
        header["fields"].append((name, _unpack_array(cursor, label)))
    present = cursor.byte("header")
    if present & ~(HAS_PARTIES | HAS_PEER):
        raise WireError(sender, "header", f"unknown presence bits {present:#04x}")
    header["parties"] = _unpack_array(cursor, "parties") if present & HAS_PARTIES else None
    header["peer"] = None
    if present & HAS_PEER:
        rounds = cursor.varint("peer")
        header["peer"] = (rounds, [_unpack_array(cursor, "peer") for _ in _PEER_FIELDS])
    if cursor.at != len(raw):
        raise WireError(sender, "header", f"{len(raw) - cursor.at} bytes beyond its parts")
    return header


# --- encoding ------------------------------------------------------------------------

def _ascii(text: str, pattern: re.Pattern[str], sender: str, what: str) -> bytes:
    if not isinstance(text, str) or not pattern.match(text):
        raise WireError(sender, what, f"{text!r} is not a valid {what}")
    return text.encode("ascii")


def encode(envelope: Envelope) -> bytes:
    """One frame for ``envelope`` (see the module docstring for the layout)."""
    message = envelope.message
    sender = f"{envelope.sender} {envelope.sender_id!r}"
    if envelope.sender not in ROLES:
        raise WireError(sender, "sender", f"unknown role {envelope.sender!r}")
    run = envelope.run.encode()
    if len(run) > MAX_RUN_BYTES:
        raise WireError(sender, "run", f"{len(run)} bytes (at most {MAX_RUN_BYTES})")
    if isinstance(envelope.round, bool) or not 0 <= int(envelope.round) < 1 << 64:
        raise WireError(sender, "round", f"{envelope.round!r} is not a round number")
    fields, bodies = [], []
    for name, values in message.fields.items():
        description, body = _array(name, values, int(message.bits_per_value[name]), sender,
                                    name in COLUMN_FIELDS)
        fields.append((_ascii(name, _NAME, sender, "field name"), description))
        bodies.append(body)
    parties = None
    if message.parties is not None:
        parties, body = _array("parties", np.asarray(message.parties, dtype=np.int64), 64,
                               sender, True)
        bodies.append(body)
    peer = None
    if message.peer is not None:
        arrays = []
        for name in _PEER_FIELDS:
            description, body = _array(name, getattr(message.peer, name), 64, sender, True)
            arrays.append(description)
            bodies.append(body)
        peer = (int(message.peer.rounds), arrays)
    header = _pack_header({
        "protocol": protocol_digest(envelope.protocol), "run": run,
        "round": int(envelope.round), "sender": ROLES.index(envelope.sender),
        "sender_id": _ascii(envelope.sender_id, _IDENTITY, sender, "sender_id"),
        "receiver": RECEIVERS.index(Role(message.receiver)), "fields": fields,
        "parties": parties, "peer": peer})
    return _PREFIX.pack(MAGIC, WIRE_VERSION, len(header)) + header + b"".join(bodies)


# --- decoding ------------------------------------------------------------------------

class _Reader:
    """Reads a frame's body array by array, checking every declared size."""

    def __init__(self, body: memoryview, sender: str, max_elements: int) -> None:
        self.body = body
        self.offset = 0
        self.sender = sender
        self.budget = max_elements

    def fail(self, name: str, reason: str) -> WireError:
        return WireError(self.sender, name, reason)

    def take(self, name: str, size: int) -> bytes:
        if self.offset + size > len(self.body):
            raise self.fail(name, f"body ends before the field's {size} bytes")
        raw = bytes(self.body[self.offset:self.offset + size])
        self.offset += size
        return raw

    def read(self, name: str, description: dict[str, Any]) -> tuple[np.ndarray, int]:
        code = description["dtype"]
        if code >= len(_DTYPES):
            raise self.fail(name, f"dtype code {code} is not accepted (accepted: "
                                  f"{', '.join(f'{i} {n}' for i, n in enumerate(DTYPES))})")
        dtype = _DTYPES[code]
        shape = description["shape"]
        count = math.prod(shape)
        # An empty array's other extents count too: numpy refuses a shape too large for
        # memory even when it holds nothing.
        extent = math.prod(max(d, 1) for d in shape)
        if extent > self.budget:
            raise self.fail(name, f"{extent} elements exceed what this frame may carry")
        self.budget -= count
        bits, flags = description["bits"], description["flags"]
        width = dtype.itemsize * 8
        if not 1 <= bits <= 64:
            raise self.fail(name, f"declared wire size {bits} bits is not in 1..64")
        if flags & ~(PACKED | SIGNED | COLUMN):
            raise self.fail(name, f"unknown flags {flags:#04x}")
        if flags & COLUMN:
            if flags != COLUMN or dtype.kind not in "iu":
                raise self.fail(name, "column flag on a non-integer or packed array")
            return self._column(name, description["column"], dtype, count, bits
                                ).reshape(shape), bits
        packed, signed = bool(flags & PACKED), bool(flags & SIGNED)
        if packed != (dtype.kind in "iub" and bits < width):
            raise self.fail(name, "packing flag does not match the dtype and wire size")
        if signed and not (packed and dtype.kind == "i"):
            raise self.fail(name, "sign flag does not match the dtype and packing")
        size = _packed_bytes(count, bits) if packed else count * dtype.itemsize
        raw = self.take(name, size)
        if packed:
            values = _unpack(raw, count, bits, dtype, signed)
        else:
            values = np.frombuffer(raw, dtype=dtype).copy()
            if dtype.kind == "b" and np.any(np.frombuffer(raw, dtype=np.uint8) > 1):
                raise self.fail(name, "boolean bytes other than 0 and 1")
        return values.reshape(shape), bits

    def _column(self, name: str, column: dict[str, int], dtype: np.dtype, count: int,
                bits: int) -> np.ndarray:
        form, width = column["form"], column["width"]
        if form not in (OFFSETS, STEPS) or width > 64:
            raise self.fail(name, f"column form {form} of width {width} is not accepted")
        stored = count if form == OFFSETS else max(count - 1, 0)
        raw = self.take(name, _packed_bytes(stored, width))
        unsigned = _unpack_unsigned(raw, stored, width)
        origin = np.uint64(column["origin"] % (1 << 64))
        # Modulo 2^64; a result outside the dtype is refused below.
        if form == OFFSETS:
            wrapped = unsigned + origin
        else:
            steps = unsigned + np.uint64(column["step"] % (1 << 64))
            wrapped = np.concatenate([[origin], origin + np.cumsum(steps, dtype=np.uint64)]
                                     )[:count].astype(np.uint64)
        candidate = wrapped.view(np.int64) if dtype.kind == "i" else wrapped
        values = candidate.astype(dtype)
        if not np.array_equal(values, candidate):
            raise self.fail(name, f"column values beyond the dtype {dtype.name}")
        if not _fits(values, bits):
            raise self.fail(name, f"values do not fit the declared {bits} bits")
        return values


def _split_frame(frame: bytes, sender: str) -> tuple[dict[str, Any], memoryview]:
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
    header = _unpack_header(frame[_PREFIX.size:_PREFIX.size + header_length], sender)
    return header, memoryview(frame)[_PREFIX.size + header_length:]


def _text(raw: bytes, sender: str, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise WireError(sender, what, "not valid UTF-8") from None


def _check_routing(header: dict[str, Any], expect: Expectation, sender: str
                   ) -> tuple[str, str]:
    """The sender's role and identity, once every routing fact matches ``expect``."""
    sender_id = _text(header["sender_id"], sender, "sender_id")
    if not _IDENTITY.match(sender_id):
        raise WireError(sender, "sender_id", f"{sender_id!r} is not a valid sender_id")
    if header["sender"] >= len(ROLES):
        raise WireError(sender, "sender", f"unknown role code {header['sender']}")
    if header["receiver"] >= len(RECEIVERS):
        raise WireError(sender, "receiver", f"unknown receiver code {header['receiver']}")
    facts = {"sender": (expect.sender, ROLES[header["sender"]]),
             "sender_id": (expect.sender_id, sender_id),
             "run": (expect.run, _text(header["run"], sender, "run")),
             "round": (expect.round, header["round"]),
             "receiver": (str(expect.receiver), str(RECEIVERS[header["receiver"]]))}
    for key, (wanted, got) in facts.items():
        if got != wanted:
            raise WireError(sender, key, f"expected {wanted!r}, the frame says {got!r}")
    if header["protocol"] != protocol_digest(expect.protocol):
        raise WireError(sender, "protocol", f"expected {expect.protocol!r}, the frame names "
                                            f"another (digest {header['protocol'][:6].hex()})")
    return facts["sender"][1], sender_id


def decode(frame: bytes, expect: Expectation) -> Envelope:
    """Parse and validate one frame; the :class:`Envelope` it carries, or a WireError.

    The error names the sender as the channel authenticated it (``expect.sender`` and
    ``expect.sender_id``) and the field at fault.
    """
    sender = f"{expect.sender} {expect.sender_id!r}"
    header, body = _split_frame(bytes(frame), sender)
    role, sender_id = _check_routing(header, expect, sender)
    reader = _Reader(body, sender, expect.max_elements)
    fields: dict[str, np.ndarray] = {}
    bits: dict[str, int] = {}
    for raw_name, description in header["fields"]:
        name = raw_name.decode("ascii", "replace")
        if not _NAME.match(name):
            raise WireError(sender, "fields", f"field name {name!r} is not a valid identifier")
        if name in fields:
            raise WireError(sender, name, "field sent twice")
        if description["flags"] & COLUMN and name not in COLUMN_FIELDS:
            raise WireError(sender, name, "a payload field cannot travel as a column")
        values, field_bits = reader.read(name, description)
        if values.dtype.kind == "f" and name not in expect.allow_nonfinite \
                and not np.all(np.isfinite(values)):
            raise WireError(sender, name, "holds NaN or infinite values")
        fields[name], bits[name] = values, field_bits
    if expect.fields is not None and set(fields) != expect.fields:
        raise WireError(sender, "fields", f"expected fields {sorted(expect.fields)}, got "
                                          f"{sorted(fields)}")
    parties = None
    if header["parties"] is not None:
        parties, _ = reader.read("parties", header["parties"])
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
        message_role = Role.SERVER if role == "server" else Role.PARTY
        message = Message(message_role, expect.receiver, fields, bits, parties, peer)
    except (TypeError, ValueError) as exc:
        raise WireError(sender, "fields", str(exc)) from None
    return Envelope(expect.protocol, expect.run, header["round"], role, sender_id, message)


def _read_peer(peer: tuple[int, list[dict[str, Any]]] | None, reader: _Reader, sender: str
               ) -> PeerTraffic | None:
    if peer is None:
        return None
    rounds, descriptions = peer
    arrays = {name: reader.read(name, description)[0]
              for name, description in zip(_PEER_FIELDS, descriptions, strict=True)}
    try:
        return PeerTraffic(rounds=rounds, **arrays)
    except (TypeError, ValueError) as exc:
        raise WireError(sender, "peer", str(exc)) from None


def field_bytes(message: Message) -> Mapping[str, int]:
    """Bytes each field of ``message`` occupies in a frame's body (for cost reports)."""
    out = {}
    for name, values in message.fields.items():
        _, body = _array(name, values, int(message.bits_per_value[name]), "self",
                         name in COLUMN_FIELDS)
        out[name] = len(body)
    return out


# --- relayed rows: one layout, bodies cut per destination ------------------------------

@dataclass(frozen=True)
class RowLayout:
    """The fields of a relay-round message, for rows whose bytes travel apart from it.

    A silo's rows to other silos are sealed per destination silo; the payload of each
    sealed part is the body of those rows alone (each payload field's rows, bit-packed
    as in a frame), and the fields' descriptions travel once per request, as this
    layout: a field count (varint), then per field its name (1-byte length, ASCII) and
    array description (as in a frame's header, the row count 0). A routing field's rows
    are not in the body: they are the rows' declared destinations or origins.
    """

    names: tuple[str, ...]
    descriptions: tuple[dict[str, Any], ...]

    @classmethod
    def of(cls, message: Message, sender: str) -> RowLayout:
        """The layout of ``message``'s fields (sign flags as its values need)."""
        names, descriptions = [], []
        for name, values in message.fields.items():
            _ascii(name, _NAME, sender, "field name")
            description, _ = _describe(name, values, int(message.bits_per_value[name]),
                                       sender)
            descriptions.append({**description, "shape": [0, *description["shape"][1:]]})
            names.append(name)
        return cls(tuple(names), tuple(descriptions))

    def to_bytes(self) -> bytes:
        out = bytearray(varint(len(self.names)))
        for name, description in zip(self.names, self.descriptions, strict=True):
            raw = name.encode("ascii")
            out += bytes([len(raw)]) + raw + _pack_array(description)
        return bytes(out)

    @classmethod
    def from_bytes(cls, raw: bytes, sender: str) -> RowLayout:
        """A layout read and checked (names, dtypes, flags, shapes); WireError otherwise."""
        cursor = _Cursor(raw, sender, "layout")
        count = cursor.varint("layout")
        if count > len(raw):
            raise WireError(sender, "layout", f"{count} fields cannot fit the layout")
        names: list[str] = []
        descriptions = []
        for _ in range(count):
            name = cursor.take(cursor.byte("layout"), "layout").decode("ascii", "replace")
            if not _NAME.match(name):
                raise WireError(sender, "layout", f"field name {name!r} is not a valid "
                                                  "identifier")
            if name in names:
                raise WireError(sender, name, "field sent twice")
            description = _unpack_array(cursor, name)
            if not description["shape"] or description["shape"][0] != 0 \
                    or description["flags"] & COLUMN:
                raise WireError(sender, name, "a row layout's field has 0 rows and no column")
            # Check dtype, bits, flags and the size of a row as a frame's reader does.
            _Reader(memoryview(b""), sender, 1 << 27).read(name, description)
            names.append(name)
            descriptions.append(description)
        if cursor.at != len(raw):
            raise WireError(sender, "layout", f"{len(raw) - cursor.at} bytes beyond its fields")
        if sum(name in ROUTING_FIELDS for name in names) != 1:
            raise WireError(sender, "layout", "relayed rows need exactly one of the fields "
                                              f"{ROUTING_FIELDS}")
        return cls(tuple(names), tuple(descriptions))

    @property
    def bits(self) -> dict[str, int]:
        """Each field's declared wire size."""
        return {name: d["bits"] for name, d in zip(self.names, self.descriptions, strict=True)}

    def row_bits(self) -> int:
        """Payload bits of one row (routing fields left out, as the cost accounting does)."""
        return sum(d["bits"] * math.prod(d["shape"][1:])
                   for name, d in zip(self.names, self.descriptions, strict=True)
                   if name not in ROUTING_FIELDS)

    def pack(self, message: Message, rows: slice) -> bytes:
        """The body of ``rows`` of ``message`` (its payload fields, in layout order)."""
        out = []
        for name, description in zip(self.names, self.descriptions, strict=True):
            if name in ROUTING_FIELDS:
                continue
            values = np.ascontiguousarray(np.asarray(message.fields[name])[rows],
                                          dtype=_DTYPES[description["dtype"]])
            out.append(_body(description, values))
        return b"".join(out)

    def unpack(self, raw: bytes, count: int, sender: str, max_elements: int = 1 << 27
               ) -> dict[str, np.ndarray]:
        """The payload fields of ``count`` rows from their body; WireError if it is not
        exactly their bytes or a float is not finite."""
        reader = _Reader(memoryview(raw), sender, max_elements)
        fields = {}
        for name, description in zip(self.names, self.descriptions, strict=True):
            if name in ROUTING_FIELDS:
                continue
            values, _ = reader.read(name, {**description,
                                           "shape": [count, *description["shape"][1:]]})
            if values.dtype.kind == "f" and not np.all(np.isfinite(values)):
                raise WireError(sender, name, "holds NaN or infinite values")
            fields[name] = values
        if reader.offset != len(raw):
            raise WireError(sender, "body", f"{len(raw) - reader.offset} bytes beyond the "
                                            "declared rows")
        return fields
