"""The wire format: round trips, exact packed sizes, and every forged frame refused by name."""

from __future__ import annotations

import contextlib
import json
import pickle
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedustat.protocols.base import Message, PeerTraffic, Role
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

def reframe(frame: bytes, edit) -> bytes:
    """The frame with its JSON header passed through ``edit`` (body unchanged)."""
    _, _, length = struct.unpack_from(">4sHI", frame)
    header = json.loads(frame[10:10 + length])
    edit(header)
    raw = json.dumps(header).encode()
    return struct.pack(">4sHI", MAGIC, WIRE_VERSION, len(raw)) + raw + frame[10 + length:]


GOOD = encode(envelope(party_message()))


@pytest.mark.parametrize(("frame", "field", "reason"), [
    (b"", "frame", "shorter than a frame header"),
    (b"XXXX" + GOOD[4:], "frame", "bad magic"),
    (GOOD[:4] + struct.pack(">H", 9) + GOOD[6:], "version", "wire version 9"),
    (GOOD[:6] + struct.pack(">I", 2**31) + GOOD[10:], "header", "beyond the frame"),
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
    return lambda header: header["fields"][index].__setitem__(key, value)


@pytest.mark.parametrize(("edit", "field", "reason"), [
    (_set("sender_id", "party-9"), "sender_id", "expected 'party-3'"),
    (_set("sender", "dealer"), "sender", "expected 'party'"),
    (_set("sender", "king"), "sender", "unknown role"),
    (_set("round", 1), "round", "expected 0"),
    (_set("round", True), "round", "expected 0"),
    (_set("run", "other-run"), "run", "expected 'run-1'"),
    (_set("protocol", "umpc"), "protocol", "expected 'ldp-quantized'"),
    (_set("receiver", "party"), "receiver", "expected 'server'"),
    (lambda h: h.pop("peer"), "header", "keys must be exactly"),
    (lambda h: h.__setitem__("extra", 1), "header", "keys must be exactly"),
    (_field(0, "dtype", "|O"), "report", "dtype '|O' is not accepted"),
    (_field(0, "dtype", ">i8"), "report", "is not accepted"),
    (_field(0, "dtype", "<i8"), "report", "is not accepted"),
    (_field(0, "shape", [2**40]), "report", "exceed what this frame may carry"),
    (_field(0, "shape", [-1]), "report", "non-negative integers"),
    (_field(0, "shape", [1.5]), "report", "non-negative integers"),
    (_field(0, "bits", 0), "report", "not in 1..64"),
    (_field(0, "packed", False), "report", "packing flag"),
    (_field(0, "name", "__class__()"), "fields", "not a valid identifier"),
    (_field(1, "name", "report"), "report", "field sent twice"),
    (lambda h: h["parties"].__setitem__("dtype", "f8"), "parties", "1-D int64"),
    (_set("parties", None), "parties", "must name its rows"),
])
def test_forged_headers_are_refused_with_the_field_named(edit, field, reason):
    with pytest.raises(WireError, match=rf"party 'party-3': {field}: .*{reason}"):
        decode(reframe(GOOD, edit), expectation())


def test_a_party_cannot_speak_for_another_party():
    forged = encode(envelope(party_message(parties=(3, 7))))
    with pytest.raises(WireError, match="parties: speaks for party 7"):
        decode(forged, expectation())


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


def test_invalid_json_header_is_refused():
    frame = struct.pack(">4sHI", MAGIC, WIRE_VERSION, 3) + b"{x}"
    with pytest.raises(WireError, match="header: not valid JSON"):
        decode(frame, expectation())


def test_non_boolean_bytes_in_an_unpacked_bool_field_are_refused():
    message = Message(Role.PARTY, Role.SERVER, {"flag": np.array([True])}, {"flag": 8},
                      np.array([3]))
    frame = bytearray(encode(envelope(message)))
    frame[-9] = 2  # the flag byte precedes the 8-byte party id
    with pytest.raises(WireError, match="flag: boolean bytes other than 0 and 1"):
        decode(bytes(frame), expectation())


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


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=8)


@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_forged_header_values_never_escape_as_other_errors(data):
    def edit(header):
        key = data.draw(st.sampled_from(sorted(header)), label="key")
        if key == "fields" and data.draw(st.booleans(), label="inside"):
            entry = header["fields"][data.draw(st.integers(0, 1), label="entry")]
            entry[data.draw(st.sampled_from(sorted(entry)), label="field key")] = \
                data.draw(JSON_VALUES, label="value")
        else:
            header[key] = data.draw(JSON_VALUES, label="value")

    with contextlib.suppress(WireError):
        decode(reframe(GOOD, edit), expectation())
