"""The wire format: round trips, exact packed sizes, and every forged frame refused by name."""

from __future__ import annotations

import contextlib
import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedustat.protocols.base import Message, PeerTraffic, Role
from fedustat.runtime import wire
from fedustat.runtime.simulate import simulate_run
from fedustat.runtime.wire import (
    MAGIC,
    WIRE_VERSION,
    Envelope,
    Expectation,
    WireError,
    decode,
    encode,
    field_bytes,
)
from release_cases import protocol_cases


def party_message(parties=(3, 4), **fields) -> Message:
    fields = fields or {"report": np.array([5, 1]), "noise": np.array([0.25, -1.5])}
    bits = {name: (3 if np.asarray(v).dtype.kind in "iu" else 64) for name, v in fields.items()}
    return Message(Role.PARTY, Role.SERVER, fields, bits, np.asarray(parties))


def envelope(message: Message, **overrides) -> Envelope:
    facts = {"protocol": "ldp-quantized", "run": "run-1", "round": 0, "sender": "party",
             "sender_id": "party-3"} | overrides
    return Envelope(message=message, **facts)


def expectation(**overrides) -> Expectation:
    facts = {"protocol": "ldp-quantized", "run": "run-1", "round": 0, "sender": "party",
             "sender_id": "party-3", "receiver": Role.SERVER,
             "party_ids": np.array([3, 4])} | overrides
    return Expectation(**facts)


def assert_same_message(a: Message, b: Message) -> None:
    assert a.sender == b.sender and a.receiver == b.receiver
    assert set(a.fields) == set(b.fields)
    for name in a.fields:
        np.testing.assert_array_equal(np.asarray(a.fields[name]), b.fields[name])
        assert int(a.bits_per_value[name]) == b.bits_per_value[name]
    if a.parties is None:
        assert b.parties is None
    else:
        np.testing.assert_array_equal(a.parties, b.parties)


def test_round_trip_of_a_party_message():
    message = party_message()
    got = decode(encode(envelope(message)), expectation())
    assert_same_message(message, got.message)
    assert (got.protocol, got.run, got.round, got.sender, got.sender_id) == (
        "ldp-quantized", "run-1", 0, "party", "party-3")


def test_server_broadcast_and_peer_traffic_round_trip():
    broadcast = Message(Role.SERVER, Role.PARTY, {"threshold": np.array([[0.5, 1.0]])},
                        {"threshold": 64})
    got = decode(encode(envelope(broadcast, sender="server", sender_id="server")),
                 expectation(sender="server", sender_id="server", receiver=Role.PARTY,
                             party_ids=None))
    assert_same_message(broadcast, got.message)
    peer = PeerTraffic(np.array([3]), np.array([10]), np.array([12]), np.array([0]), 2)
    message = Message(Role.PARTY, Role.SERVER, {"share": np.array([7], dtype=np.uint64)},
                      {"share": 64}, np.array([3]), peer)
    got = decode(encode(envelope(message)), expectation())
    assert got.message.peer.rounds == 2
    np.testing.assert_array_equal(got.message.peer.received, [12])


@settings(max_examples=60, deadline=None)
@given(bits=st.integers(1, 64), signed=st.booleans(), count=st.integers(0, 40),
       seed=st.integers(0, 2**32 - 1))
def test_packed_integers_round_trip_at_exactly_their_bits(bits, signed, count, seed):
    rng = np.random.default_rng(seed)
    if signed:
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        values = rng.integers(low, high, size=count, endpoint=True, dtype=np.int64)
    else:
        values = rng.integers(0, 2**bits - 1, size=count, dtype=np.uint64, endpoint=True)
    message = Message(Role.PARTY, Role.SERVER, {"value": values}, {"value": bits},
                      np.arange(count) + 3 if count else np.arange(0))
    frame = encode(envelope(message))
    got = decode(frame, expectation(party_ids=np.arange(3, 3 + count)))
    np.testing.assert_array_equal(got.message.fields["value"], values)
    assert got.message.fields["value"].dtype == values.dtype
    expected_bytes = (count * bits + 7) // 8 if bits < 64 else count * 8
    assert field_bytes(message)["value"] == expected_bytes


def test_booleans_are_packed_to_one_bit():
    flags = np.random.default_rng(1).random(1000) < 0.5
    message = Message(Role.PARTY, Role.SERVER, {"flag": flags}, {"flag": 1},
                      np.arange(1000))
    assert field_bytes(message)["flag"] == 125
    got = decode(encode(envelope(message)), expectation(party_ids=np.arange(1000)))
    np.testing.assert_array_equal(got.message.fields["flag"], flags)


def test_values_beyond_the_declared_bits_are_refused_by_the_sender():
    message = Message(Role.PARTY, Role.SERVER, {"report": np.array([8])}, {"report": 3},
                      np.array([3]))
    with pytest.raises(WireError, match=r"party 'party-3': report: .*do not fit the declared 3"):
        encode(envelope(message))


def test_object_arrays_cannot_travel():
    message = Message(Role.PARTY, Role.SERVER, {"blob": np.array([object()])}, {"blob": 8},
                      np.array([3]))
    with pytest.raises(WireError, match="blob: dtype object cannot travel"):
        encode(envelope(message))


# --- forged and malformed frames -----------------------------------------------------

def split(frame: bytes) -> tuple[dict, bytes]:
    """A frame's header parts (codes and raw strings, as they travel) and its body."""
    _, _, length = struct.unpack_from(">4sHI", frame)
    return wire._unpack_header(frame[10:10 + length], "test"), frame[10 + length:]


def join(header_bytes: bytes, body: bytes) -> bytes:
    return struct.pack(">4sHI", MAGIC, WIRE_VERSION, len(header_bytes)) + header_bytes + body


def reframe(frame: bytes, edit) -> bytes:
    """The frame with its header parts passed through ``edit`` (body unchanged)."""
    header, body = split(frame)
    edit(header)
    return join(wire._pack_header(header), body)


GOOD = encode(envelope(party_message()))
GOOD_HEADER, GOOD_BODY = split(GOOD)


def without_parties_and_peer() -> bytes:
    """GOOD's header bytes up to (and without) its presence byte."""
    return wire._pack_header({**GOOD_HEADER, "parties": None, "peer": None})[:-1]


def test_a_frame_of_the_first_wire_version_is_refused_by_its_version():
    first = struct.pack(">4sHI", MAGIC, 1, 2) + b"{}"
    with pytest.raises(WireError, match=r"party 'party-3': version: speaks wire version 1, "
                                        rf"this build speaks {WIRE_VERSION}"):
        decode(first, expectation())


@pytest.mark.parametrize(("frame", "field", "reason"), [
    (b"", "frame", "shorter than a frame header"),
    (b"XXXX" + GOOD[4:], "frame", "bad magic"),
    (GOOD[:4] + struct.pack(">H", 9) + GOOD[6:], "version", "wire version 9"),
    (GOOD[:6] + struct.pack(">I", 2**31) + GOOD[10:], "header", "beyond the frame"),
    # A header one byte short ends inside its last part; one byte long has a byte over.
    (GOOD[:6] + struct.pack(">I", len(wire._pack_header(GOOD_HEADER)) - 1) + GOOD[10:],
     "parties", "the header ends inside it"),
    (GOOD[:6] + struct.pack(">I", len(wire._pack_header(GOOD_HEADER)) + 1) + GOOD[10:],
     "header", "1 bytes beyond its parts"),
    (join(without_parties_and_peer() + b"\x80", GOOD_BODY), "header", "unknown presence"),
    (join(without_parties_and_peer(), GOOD_BODY), "header", "the header ends inside it"),
    # The round's varint runs past 64 bits.
    (join(GOOD_HEADER["protocol"] + b"\x05run-1" + b"\xff" * 10 + b"\x01", b""), "round",
     "beyond 64 bits"),
    (join(GOOD_HEADER["protocol"] + b"\xff\x7f", b""), "run", "at most 1024"),
    (GOOD[:-1], "parties", "body ends before"),
    (GOOD + b"\x00", "body", "1 bytes beyond"),
    (pickle.dumps({"report": [1]}), "frame", "bad magic"),
])
def test_malformed_frames_are_refused_with_the_field_named(frame, field, reason):
    with pytest.raises(WireError, match=rf"party 'party-3': {field}: .*{reason}"):
        decode(frame, expectation())


def _set(key, value):
    return lambda header: header.__setitem__(key, value)


def _field(index, key, value):
    return lambda header: header["fields"][index][1].__setitem__(key, value)


def _parties(**changes):
    return lambda header: header["parties"].update(changes)


def _rename(index, name):
    def edit(header):
        header["fields"][index] = (name, header["fields"][index][1])
    return edit


I4 = wire.DTYPES.index("i4")
U1 = wire.DTYPES.index("u1")
F8 = wire.DTYPES.index("f8")


@pytest.mark.parametrize(("edit", "field", "reason"), [
    (_set("sender_id", b"party-9"), "sender_id", "expected 'party-3'"),
    (_set("sender_id", b"party 3!"), "sender_id", "not a valid sender_id"),
    (_set("sender_id", b"\xff"), "sender_id", "not valid UTF-8"),
    (_set("sender", wire.ROLES.index("dealer")), "sender", "expected 'party'"),
    (_set("sender", 9), "sender", "unknown role code 9"),
    (_set("round", 1), "round", "expected 0"),
    (_set("run", b"other-run"), "run", "expected 'run-1'"),
    (_set("run", b"\xfe\xff"), "run", "not valid UTF-8"),
    (_set("protocol", wire.protocol_digest("umpc")), "protocol", "expected 'ldp-quantized'"),
    (_set("receiver", 0), "receiver", "expected 'server'"),
    (_set("receiver", 5), "receiver", "unknown receiver code 5"),
    (_field(0, "dtype", 200), "report", "dtype code 200 is not accepted"),
    (_field(0, "dtype", len(wire.DTYPES)), "report", "is not accepted"),
    (_field(0, "shape", [2**40]), "report", "exceed what this frame may carry"),
    (_field(0, "shape", [1] * 9), "report", "9 dimensions"),
    (_field(0, "bits", 0), "report", "not in 1..64"),
    (_field(0, "bits", 65), "report", "not in 1..64"),
    (_field(0, "flags", 0), "report", "packing flag"),
    (_field(0, "flags", 8), "report", "unknown flags"),
    (_field(1, "flags", wire.SIGNED), "noise", "sign flag"),
    (lambda h: h["fields"][0][1].update(
        flags=wire.COLUMN, column={"form": 0, "origin": 5, "step": 0, "width": 0}),
     "report", "payload field cannot travel as a column"),
    (_rename(0, b"__class__()"), "fields", "not a valid identifier"),
    (_rename(1, b"report"), "report", "field sent twice"),
    (_parties(dtype=F8), "parties", "column flag on a non-integer"),
    (_parties(dtype=I4), "parties", "1-D int64"),
    (_parties(shape=[1, 2]), "parties", "1-D int64"),
    (_parties(dtype=U1, column={"form": 0, "origin": 300, "step": 0, "width": 1}),
     "parties", "column values beyond the dtype uint8"),
    (_parties(column={"form": 2, "origin": 3, "step": 0, "width": 1}), "parties",
     "column form 2"),
    (_parties(column={"form": 0, "origin": 3, "step": 0, "width": 65}), "parties",
     "width 65"),
    (_parties(column={"form": 0, "origin": 7, "step": 0, "width": 0}), "parties",
     "speaks for party 7"),
    (_set("parties", None), "parties", "must name its rows"),
])
def test_forged_headers_are_refused_with_the_field_named(edit, field, reason):
    with pytest.raises(WireError, match=rf"party 'party-3': {field}: .*{reason}"):
        decode(reframe(GOOD, edit), expectation())


def test_a_party_cannot_speak_for_another_party():
    forged = encode(envelope(party_message(parties=(3, 7))))
    with pytest.raises(WireError, match="parties: speaks for party 7"):
        decode(forged, expectation())


def test_column_values_beyond_the_declared_bits_are_refused():
    rows = np.arange(3, 103)
    message = Message(Role.PARTY, Role.PARTY, {"v": np.ones(100, dtype=np.int64),
                                               "to": np.arange(1000, 1100)},
                      {"v": 2, "to": 11}, rows)
    frame = encode(envelope(message))
    assert split(frame)[0]["fields"][1][1]["flags"] == wire.COLUMN
    got = decode(frame, expectation(receiver=Role.PARTY, party_ids=rows))
    np.testing.assert_array_equal(got.message.fields["to"], np.arange(1000, 1100))

    def narrow(header):
        header["fields"][1][1]["bits"] = 8
    with pytest.raises(WireError, match="party 'party-3': to: values do not fit the declared 8"):
        decode(reframe(frame, narrow), expectation(receiver=Role.PARTY, party_ids=rows))


def test_non_finite_floats_are_refused_unless_allowed():
    frame = encode(envelope(party_message(report=np.array([1, 2]),
                                          noise=np.array([0.0, np.nan]))))
    with pytest.raises(WireError, match="noise: holds NaN"):
        decode(frame, expectation())
    got = decode(frame, expectation(allow_nonfinite=frozenset({"noise"})))
    assert np.isnan(got.message.fields["noise"][1])


def test_expected_field_names_are_enforced():
    with pytest.raises(WireError, match=r"fields: expected fields \['report'\]"):
        decode(GOOD, expectation(fields=frozenset({"report"})))


def test_a_header_cut_short_is_refused():
    frame = join(GOOD_HEADER["protocol"][:10], b"")
    with pytest.raises(WireError, match="party 'party-3': protocol: the header ends inside"):
        decode(frame, expectation())


def test_non_boolean_bytes_in_an_unpacked_bool_field_are_refused():
    message = Message(Role.PARTY, Role.SERVER, {"flag": np.array([True])}, {"flag": 8},
                      np.array([3]))
    frame = bytearray(encode(envelope(message)))
    frame[-1] = 2  # the flag byte ends the body (a single party id costs no body bytes)
    with pytest.raises(WireError, match="flag: boolean bytes other than 0 and 1"):
        decode(bytes(frame), expectation())


def test_the_sender_refuses_what_the_header_cannot_carry():
    with pytest.raises(WireError, match=r"party 'party-3': field name: 'Bad' is not a valid"):
        encode(envelope(party_message(Bad=np.array([1, 2]))))
    with pytest.raises(WireError, match="run: 2000 bytes"):
        encode(envelope(party_message(), run="r" * 2000))
    with pytest.raises(WireError, match="sender: unknown role 'king'"):
        encode(envelope(party_message(), sender="king"))


# --- size: a one-shot report is its payload and a small header ------------------------

def test_a_one_record_ldp_report_costs_at_most_its_payload_and_200_bytes():
    from fedustat.protocols import registry
    from fedustat.runtime.network.service import fingerprint
    from fedustat.stats import gini_kernel

    protocol = registry.make("ldp-quantized", gini_kernel((0.0, 1.0)), epsilon=1.0, k=256)
    reports = []

    def keep(message):
        if message.sender is Role.PARTY and list(message.parties) == [7]:
            reports.append(message)
        return message

    data = np.random.default_rng(2).random(20)
    simulate_run(protocol, data, rng=2, batch_size=[1] * 20, relay=keep)
    [report] = reports
    payload = sum(field_bytes(report).values())
    # A run id and device identity longer than the server's own (``run-<12 hex>``).
    frame = encode(Envelope(fingerprint(protocol), "run-" + "ab" * 16, 0, "party",
                            "device-" + "cd" * 16, report))
    assert payload == 1  # k = 256: one byte
    assert len(frame) <= payload + 200, len(frame)


def test_a_silos_contiguous_party_ids_cost_no_body_bytes():
    message = Message(Role.PARTY, Role.SERVER, {"report": np.zeros(1000, dtype=np.int64)},
                      {"report": 1}, np.arange(5000, 6000))
    frame = encode(envelope(message, sender_id="party-5"))
    _, body = split(frame)
    assert len(body) == 125  # the 1000 one-bit reports only
    got = decode(frame, expectation(sender_id="party-5", party_ids=np.arange(5000, 6000)))
    np.testing.assert_array_equal(got.message.parties, np.arange(5000, 6000))


# --- round trips of arbitrary messages -----------------------------------------------

NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True)
DTYPE_NAMES = st.sampled_from(["bool", "u1", "u2", "u4", "u8", "i1", "i2", "i4", "i8",
                               "f8"])


@st.composite
def arrays(draw, rows):
    """An array of ``rows`` rows (or any shape when None), its dtype and declared bits."""
    dtype = np.dtype(draw(DTYPE_NAMES))
    tail = draw(st.lists(st.integers(0, 3), max_size=2))
    shape = (rows, *tail) if rows is not None else tuple(
        draw(st.lists(st.integers(0, 4), max_size=3)))
    count = int(np.prod(shape, dtype=np.int64))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype.kind == "b":
        return rng.random(shape) < 0.5, draw(st.integers(1, 64))
    if dtype.kind == "f":
        return rng.normal(size=shape) * 10.0 ** draw(st.integers(-300, 300)), 64
    width = dtype.itemsize * 8
    bits = draw(st.integers(1, width)) if width < 64 else draw(st.integers(1, 64))
    span = min(bits, width)
    if dtype.kind == "u":
        values = rng.integers(0, 2**span - 1, size=count, dtype=np.uint64, endpoint=True)
    else:
        low = -(2 ** (span - 1)) if draw(st.booleans()) else 0
        values = rng.integers(low, 2 ** (span - 1) - 1, size=count, dtype=np.int64,
                              endpoint=True)
    return values.astype(dtype).reshape(shape), bits


@st.composite
def envelopes(draw):
    rows = draw(st.integers(0, 6))
    to_party = draw(st.booleans())
    fields, bits = {}, {}
    for name in draw(st.lists(NAMES.filter(lambda n: n not in ("to", "from", "row_bits")),
                              max_size=4, unique=True)):
        fields[name], bits[name] = draw(arrays(rows))
    parties = np.array(draw(st.lists(st.integers(0, 2**62), min_size=rows, max_size=rows)),
                       dtype=np.int64)
    if to_party:
        fields["to"] = np.array(draw(st.lists(st.integers(0, 2**40), min_size=rows,
                                              max_size=rows)), dtype=np.int64)
        bits["to"] = draw(st.integers(41, 64))
    peer = None
    if draw(st.booleans()):
        r = draw(st.integers(1, 4))
        ids = st.lists(st.integers(0, 2**62), min_size=r, max_size=r)
        peer = PeerTraffic(*(np.array(draw(ids), dtype=np.int64) for _ in range(4)),
                           rounds=draw(st.integers(0, 2**40)))
    receiver = Role.PARTY if to_party else Role.SERVER
    message = Message(Role.PARTY, receiver, fields, bits, parties,
                      None if to_party else peer)
    return Envelope(draw(st.text(max_size=80)), draw(st.text(max_size=40)),
                    draw(st.integers(0, 2**64 - 1)),
                    draw(st.sampled_from(["party", "computing-server", "dealer"])),
                    draw(st.from_regex(r"[A-Za-z0-9_.:-]{1,128}", fullmatch=True)), message)


@settings(max_examples=200, deadline=None)
@given(sent=envelopes())
def test_any_message_round_trips_exactly(sent):
    message = sent.message
    expect = Expectation(sent.protocol, sent.run, sent.round, sent.sender, sent.sender_id,
                         message.receiver, party_ids=np.unique(message.parties),
                         allow_nonfinite=frozenset(message.fields))
    got = decode(encode(sent), expect)
    assert (got.protocol, got.run, got.round, got.sender, got.sender_id) == (
        sent.protocol, sent.run, sent.round, sent.sender, sent.sender_id)
    assert_same_message(message, got.message)
    for name, values in message.fields.items():
        assert got.message.fields[name].dtype == np.asarray(values).dtype.newbyteorder("=")
        assert got.message.fields[name].shape == np.asarray(values).shape
    assert got.message.parties.dtype == np.int64
    if message.peer is None:
        assert got.message.peer is None
    else:
        assert got.message.peer.rounds == message.peer.rounds
        for name in ("parties", "sent", "received", "offline_received"):
            np.testing.assert_array_equal(getattr(got.message.peer, name),
                                          getattr(message.peer, name))


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(-2**63, 2**63 - 1), max_size=12))
def test_integer_columns_round_trip_at_any_spread(values):
    # Party ids travel as columns (offsets or steps); any int64 values come back exactly,
    # whether or not their spread fits a column.
    ids = np.array(values, dtype=np.int64)
    message = Message(Role.SERVER, Role.PARTY, {"x": np.zeros(len(ids), dtype=np.uint8)},
                      {"x": 1}, ids)
    got = decode(encode(envelope(message, sender="server", sender_id="server")),
                 expectation(sender="server", sender_id="server", receiver=Role.PARTY,
                             party_ids=None))
    np.testing.assert_array_equal(got.message.parties, ids)


# --- every registered protocol's messages survive the wire unchanged ------------------

def _through_the_wire(message: Message) -> Message:
    sender = "party" if message.sender is Role.PARTY else "server"
    ids = None if message.parties is None else np.unique(message.parties)
    frame = encode(Envelope("p", "r", 0, sender, sender, message))
    expect = Expectation("p", "r", 0, sender, sender, message.receiver, party_ids=ids,
                         allow_nonfinite=frozenset(message.fields))
    return decode(frame, expect).message


@pytest.mark.parametrize("case", protocol_cases(), ids=lambda c: c.name)
def test_every_protocol_gives_the_same_release_through_the_wire(case):
    direct = simulate_run(case.protocol, case.data, rng=7).estimate
    wired = simulate_run(case.protocol, case.data, rng=7, relay=_through_the_wire).estimate
    assert wired.value == direct.value or (np.isnan(wired.value) and np.isnan(direct.value))
    assert wired.cost == direct.cost


# --- fuzzing: any byte string is either a valid frame or a WireError ----------------------

FRAMES = [GOOD, encode(envelope(Message(
    Role.PARTY, Role.SERVER, {"flag": np.array([True, False, True]),
                              "value": np.array([-3, 2, 1], dtype=np.int16)},
    {"flag": 1, "value": 3}, np.array([3, 3, 4]),
    PeerTraffic(np.array([3]), np.array([8]), np.array([8]), np.array([0]), 1))))]


@settings(max_examples=400, deadline=None)
@given(which=st.sampled_from(range(len(FRAMES))), data=st.data())
def test_mutated_frames_never_escape_as_other_errors(which, data):
    frame = bytearray(FRAMES[which])
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        kind = data.draw(st.sampled_from(["flip", "cut", "grow", "splice"]), label="kind")
        at = data.draw(st.integers(0, max(0, len(frame) - 1)), label="at")
        if kind == "flip" and frame:
            frame[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        elif kind == "cut":
            del frame[at:at + data.draw(st.integers(1, 16), label="length")]
        elif kind == "grow":
            frame[at:at] = data.draw(st.binary(min_size=1, max_size=16), label="bytes")
        else:
            frame[at:at + 4] = data.draw(st.binary(min_size=4, max_size=4), label="bytes")
    try:
        got = decode(bytes(frame), expectation())
    except WireError:
        return
    # A frame that still decodes passed every check: its parties are the sender's own.
    assert np.all(np.isin(got.message.parties, [3, 4]))


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200))
def test_random_bytes_are_refused_cleanly(raw):
    with pytest.raises(WireError):
        decode(raw, expectation())


BYTE_SLOTS = {"sender", "receiver"}
ARRAY_BYTE_SLOTS = {"dtype", "bits", "flags"}


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_forged_header_values_never_escape_as_other_errors(data):
    def edit(header):
        key = data.draw(st.sampled_from(sorted(header)), label="key")
        if key in ("fields", "parties") and data.draw(st.booleans(), label="inside"):
            description = header["parties"] if key == "parties" else \
                header["fields"][data.draw(st.integers(0, 1), label="entry")][1]
            slot = data.draw(st.sampled_from(["dtype", "bits", "flags", "shape", "column"]),
                             label="slot")
            if slot in ARRAY_BYTE_SLOTS:
                description[slot] = data.draw(st.integers(0, 255), label="value")
                if description["flags"] & wire.COLUMN and description["column"] is None:
                    description["column"] = {"form": 0, "origin": 0, "step": 0, "width": 0}
            elif slot == "shape":
                description[slot] = data.draw(st.lists(st.integers(0, 2**64 - 1),
                                                       max_size=8), label="value")
            else:
                description["flags"] |= wire.COLUMN
                description["column"] = {
                    "form": data.draw(st.integers(0, 255), label="form"),
                    "origin": data.draw(st.integers(-2**63, 2**63), label="origin"),
                    "step": data.draw(st.integers(-2**63, 2**63), label="step"),
                    "width": data.draw(st.integers(0, 255), label="width")}
        elif key in BYTE_SLOTS:
            header[key] = data.draw(st.integers(0, 255), label="value")
        elif key == "round":
            header[key] = data.draw(st.integers(0, 2**64 - 1), label="value")
        elif key in ("run", "sender_id"):
            header[key] = data.draw(st.binary(max_size=40), label="value")
        elif key == "protocol":
            header[key] = data.draw(st.binary(min_size=32, max_size=32), label="value")
        elif key == "peer":
            header[key] = (data.draw(st.integers(0, 2**64 - 1), label="rounds"),
                           [dict(header["parties"]) for _ in range(4)])
        else:
            header[key] = None if key == "parties" else []

    header, body = split(GOOD)
    edit(header)
    with contextlib.suppress(WireError):
        decode(join(wire._pack_header(header), body), expectation())


# --- relayed rows: a layout and the rows' bodies --------------------------------------

def relay_rows() -> Message:
    return Message(Role.PARTY, Role.PARTY,
                   {"share": np.array([[1, -2], [3, 4], [-5, 6]]),
                    "open": np.array([True, False, True]),
                    "noise": np.array([0.5, -1.0, 2.0]), "to": np.array([9, 9, 12])},
                   {"share": 5, "open": 1, "noise": 64, "to": 16}, np.array([3, 3, 4]))


def test_a_row_layout_carries_rows_exactly_in_any_split():
    rows = relay_rows()
    layout = wire.RowLayout.of(rows, "party 'party-3'")
    read = wire.RowLayout.from_bytes(layout.to_bytes(), "party 'party-3'")
    assert read == layout and read.row_bits() == 2 * 5 + 1 + 64
    assert read.row_bits() == int(rows.payload_bits_per_row()[0])
    for part in (slice(0, 1), slice(1, 3), slice(0, 3)):
        body = layout.pack(rows, part)
        count = part.stop - part.start
        # Per field, its rows bit-packed: 10 bits a share row, 1 a flag, 8 bytes a float.
        assert len(body) == (count * 10 + 7) // 8 + (count + 7) // 8 + 8 * count
        got = read.unpack(body, count, "party 'party-3'")
        for name in ("share", "open", "noise"):
            np.testing.assert_array_equal(got[name], rows.fields[name][part])
            assert got[name].dtype == rows.fields[name].dtype
    with pytest.raises(WireError, match="party 'party-3': body: 1 bytes beyond"):
        read.unpack(layout.pack(rows, slice(0, 3)) + b"\0", 3, "party 'party-3'")
    with pytest.raises(WireError, match="party 'party-3': noise: body ends before"):
        read.unpack(layout.pack(rows, slice(0, 3))[:-1], 3, "party 'party-3'")
    nan = Message(Role.PARTY, Role.PARTY, {"noise": np.array([np.nan]), "to": np.array([1])},
                  {"noise": 64, "to": 8}, np.array([0]))
    with pytest.raises(WireError, match="noise: holds NaN"):
        layout_nan = wire.RowLayout.of(nan, "x")
        layout_nan.unpack(layout_nan.pack(nan, slice(0, 1)), 1, "party 'party-3'")


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_row_layouts_never_escape_as_other_errors(data):
    raw = bytearray(wire.RowLayout.of(relay_rows(), "x").to_bytes())
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        if data.draw(st.booleans(), label="flip"):
            raw[at] ^= 1 << data.draw(st.integers(0, 7), label="bit")
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=8), label="bytes")
    try:
        layout = wire.RowLayout.from_bytes(bytes(raw), "party 'party-3'")
    except WireError:
        return
    # A layout that reads reads any body as its rows or refuses it.
    with contextlib.suppress(WireError):
        layout.unpack(data.draw(st.binary(max_size=64), label="body"),
                      data.draw(st.integers(0, 4), label="rows"), "party 'party-3'")
