"""The protocol contract (``fedustat.protocols.base``) and the in-process transport
(``fedustat.runtime.simulate``).

A small two-round protocol written here (parties send a value, the server answers with
the mean, parties reply with their deviation and squared deviation, the server releases
the sample variance) is run through ``simulate``; its costs are counted by hand from the
messages it emits and compared with what the transport measured. A second toy protocol
reports traffic among parties (``PeerTraffic``) with numbers chosen by hand, to check how
the transport adds it to the costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from scipy import stats

from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.protocols import registry
from fedustat.protocols.base import (
    ConfidenceInterval,
    Cost,
    Estimate,
    Message,
    PeerTraffic,
    Protocol,
    Role,
    normal_std_error,
)
from fedustat.runtime import simulate as simulate_module
from fedustat.runtime.simulate import simulate

# Wire sizes of the toy protocol, chosen distinct so that a wrong multiplication shows.
VALUE_BITS = 64  # round 1 upload: one value per party
MEAN_BITS = 64  # broadcast field "mean" (one element)
COUNT_BITS = 32  # broadcast field "count" (one element)
DEV_BITS = 16  # round 2 upload: a (rows, 2) field, two elements per party


@dataclass
class _ToyParties:
    values: np.ndarray
    parties: np.ndarray


@dataclass
class _ToyServer:
    n_parties: int
    phase: int = 0
    mean: float = math.nan


class ToyVariance(Protocol):
    """Sample variance in two rounds.

    Round 1: each party uploads its value. The server answers with the mean, either as a
    broadcast (fields ``mean`` and ``count``) or, with ``even_only``, addressed to the
    parties with even ids only. Round 2: every party that received the mean uploads
    ``(x - mean, (x - mean)^2)``. The server releases ``sum (x - mean)^2 / (m - 1)`` over
    the m replies. With ``jitter`` > 0 each party adds N(0, jitter^2) from its own coins
    to its round-2 reply, which makes the protocol randomized.
    """

    name = "toy-variance"

    def __init__(self, *, even_only: bool = False, jitter: float = 0.0) -> None:
        self.even_only = even_only
        self.jitter = jitter

    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _ToyParties:
        return _ToyParties(np.asarray(data[:, 0], dtype=np.float64), np.asarray(parties))

    def init_server(self, n_parties: int) -> _ToyServer:
        return _ToyServer(n_parties)

    def party_step(self, state: _ToyParties, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_ToyParties, Message]:
        if inbox is None:
            msg = Message(Role.PARTY, Role.SERVER, {"x": state.values}, {"x": VALUE_BITS},
                          state.parties)
            return state, msg
        if inbox.is_broadcast:
            mean = float(np.asarray(inbox.fields["mean"])[0])
            rows = np.arange(len(state.parties))
        else:
            # Addressed rows carry global party ids; find them in this batch.
            rows = np.searchsorted(state.parties, np.asarray(inbox.parties))
            mean = float(np.asarray(inbox.fields["mean"])[0]) if rows.size else 0.0
        dev = state.values[rows] - mean
        if self.jitter:
            dev = dev + rng.normal(0.0, self.jitter, rows.size)
        reply = np.column_stack([dev, dev**2])
        msg = Message(Role.PARTY, Role.SERVER, {"dev": reply}, {"dev": DEV_BITS},
                      state.parties[rows])
        return state, msg

    def server_step(self, state: _ToyServer, inbox: Message,
                    rng: np.random.Generator) -> tuple[_ToyServer, Message | Estimate]:
        if state.phase == 0:
            order = np.argsort(inbox.parties, kind="stable")
            state.mean = float(np.mean(np.asarray(inbox.fields["x"])[order]))
            state.phase = 1
            if self.even_only:
                ids = np.arange(0, state.n_parties, 2)
                reply = Message(Role.SERVER, Role.PARTY,
                                {"mean": np.full(ids.size, state.mean)}, {"mean": MEAN_BITS},
                                ids)
            else:
                reply = Message(Role.SERVER, Role.PARTY,
                                {"mean": np.array([state.mean]),
                                 "count": np.array([state.n_parties])},
                                {"mean": MEAN_BITS, "count": COUNT_BITS})
            return state, reply
        order = np.argsort(inbox.parties, kind="stable")
        squares = np.asarray(inbox.fields["dev"])[order, 1]
        value = float(np.sum(squares) / (squares.size - 1))
        est = Estimate(value=value, quantity="variance", protocol=self.name,
                       privacy=PrivacyGuarantee.none(), std_error=None,
                       cost=Cost(server_operations=int(squares.size)),
                       diagnostics={"replies": int(squares.size)})
        return state, est


class NeverEnds(Protocol):
    """A protocol whose server always answers, to exercise the round limit."""

    name = "never-ends"

    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> Any:
        return np.asarray(parties)

    def init_server(self, n_parties: int) -> Any:
        return None

    def party_step(self, state: Any, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[Any, Message]:
        return state, Message(Role.PARTY, Role.SERVER, {"b": np.zeros(len(state))}, {"b": 1},
                              state)

    def server_step(self, state: Any, inbox: Message,
                    rng: np.random.Generator) -> tuple[Any, Message | Estimate]:
        return state, Message(Role.SERVER, Role.PARTY, {}, {})


class Anonymous(NeverEnds):
    """Parties that do not say which row is whose: the transport must refuse it."""

    name = "anonymous"

    def party_step(self, state: Any, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[Any, Message]:
        return state, Message(Role.PARTY, Role.SERVER, {"b": np.zeros(len(state))}, {"b": 1})


class PeerToy(Protocol):
    """Two rounds whose party steps report made-up peer traffic with hand-chosen counts.

    Step 1: party i uploads 16 bits and reports sending ``8 (i + 1)`` bits to its peers,
    receiving 10, and ``100 (i mod 2)`` bits from the dealer, in 2 peer rounds. The server
    broadcasts 32 bits. Step 2: party i uploads 4 bits and reports two rows of its own id
    (sent 3, received 5 each; rows of one id add up) in 1 peer round. The estimate states
    ``declared_offline`` as its own offline figure.
    """

    name = "peer-toy"

    def __init__(self, declared_offline: int = 0, outsider: bool = False) -> None:
        self.declared_offline = declared_offline
        self.outsider = outsider

    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> Any:
        return [np.asarray(parties), 0]

    def init_server(self, n_parties: int) -> Any:
        return [0]

    def party_step(self, state: Any, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[Any, Message]:
        ids, step = state
        state[1] += 1
        if step == 0:
            named = ids + 1000 if self.outsider else ids
            peer = PeerTraffic(named, 8 * (ids + 1), np.full(ids.size, 10), 100 * (ids % 2), 2)
            return state, Message(Role.PARTY, Role.SERVER, {"a": np.zeros(ids.size)}, {"a": 16},
                                  ids, peer=peer)
        twice = np.concatenate([ids, ids])
        peer = PeerTraffic(twice, np.full(twice.size, 3), np.full(twice.size, 5),
                           np.zeros(twice.size, dtype=np.int64), 1)
        return state, Message(Role.PARTY, Role.SERVER, {"b": np.zeros(ids.size)}, {"b": 4},
                              ids, peer=peer)

    def server_step(self, state: Any, inbox: Message,
                    rng: np.random.Generator) -> tuple[Any, Message | Estimate]:
        state[0] += 1
        if state[0] == 1:
            return state, Message(Role.SERVER, Role.PARTY, {"c": np.zeros(1)}, {"c": 32})
        return state, Estimate(0.0, "nothing", self.name, PrivacyGuarantee.none(),
                               cost=Cost(offline_bits=self.declared_offline))


def toy_data(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(3.0, 2.0, n)


# ------------------------------------------------------------------ measured costs


@pytest.mark.parametrize("n", [2, 10, 23])
def test_broadcast_costs_match_hand_count(n: int) -> None:
    x = toy_data(n)
    est = simulate(ToyVariance(), x, rng=0)
    # Each party uploads 1 value of 64 bits, then 2 values of 16 bits.
    up = VALUE_BITS + 2 * DEV_BITS
    # The broadcast carries one 64-bit mean and one 32-bit count; every party downloads it.
    down = MEAN_BITS + COUNT_BITS
    assert est.cost == Cost(bits_per_party=float(up), max_bits_per_party=up,
                            bits_received_per_party=float(down), total_bits=n * (up + down),
                            rounds=3, server_operations=n, offline_bits=0)
    assert est.value == pytest.approx(np.var(x, ddof=1), rel=1e-12)


@pytest.mark.parametrize("batch_size", [None, 1, 2, 7])
def test_addressed_costs_match_hand_count(batch_size: int | None) -> None:
    n = 11
    x = toy_data(n, seed=1)
    est = simulate(ToyVariance(even_only=True), x, rng=0, batch_size=batch_size)
    evens = np.arange(0, n, 2)
    e = evens.size  # 6 of the 11 parties receive the mean and reply
    sent = np.full(n, VALUE_BITS)
    sent[evens] += 2 * DEV_BITS
    received = np.zeros(n)
    received[evens] = MEAN_BITS  # an addressed message costs only its own row
    assert est.cost.bits_per_party == pytest.approx(sent.mean(), rel=1e-15)
    assert est.cost.max_bits_per_party == VALUE_BITS + 2 * DEV_BITS
    assert est.cost.bits_received_per_party == pytest.approx(received.mean(), rel=1e-15)
    assert est.cost.total_bits == int(sent.sum()) + e * MEAN_BITS
    assert est.cost.rounds == 3
    assert est.diagnostics["replies"] == e
    expected = np.sum((x[evens] - x.mean()) ** 2) / (e - 1)
    assert est.value == pytest.approx(expected, rel=1e-12)


def test_deterministic_protocol_does_not_depend_on_batching() -> None:
    x = toy_data(50, seed=2)
    results = [simulate(ToyVariance(), x, rng=5, batch_size=b) for b in (None, 1, 7, 50, 64)]
    for other in results[1:]:
        assert other.value == results[0].value
        assert other.cost == results[0].cost


def test_randomized_protocol_is_reproducible_per_seed_and_batching() -> None:
    x = toy_data(30, seed=3)
    proto = ToyVariance(jitter=0.5)
    for batch_size in (None, 1, 7):
        a = simulate(proto, x, rng=11, batch_size=batch_size)
        b = simulate(proto, x, rng=11, batch_size=batch_size)
        assert a.value == b.value
    # Another seed draws other coins.
    assert simulate(proto, x, rng=11).value != simulate(proto, x, rng=12).value
    # One batch shares one random stream; thirty batches have thirty separate streams.
    assert simulate(proto, x, rng=11).value != simulate(proto, x, rng=11, batch_size=1).value


def test_generator_rng_is_reproducible() -> None:
    x = toy_data(20, seed=4)
    proto = ToyVariance(jitter=1.0)
    a = simulate(proto, x, rng=np.random.default_rng(9), batch_size=3)
    b = simulate(proto, x, rng=np.random.default_rng(9), batch_size=3)
    assert a.value == b.value


def test_seed_sequence_rng_is_accepted() -> None:
    # ``rng`` is typed RandomLike, which includes a SeedSequence (as_rng accepts one).
    x = toy_data(20, seed=4)
    proto = ToyVariance(jitter=1.0)
    a = simulate(proto, x, rng=np.random.SeedSequence(9), batch_size=3)
    b = simulate(proto, x, rng=np.random.SeedSequence(9), batch_size=3)
    assert a.value == b.value


@pytest.mark.parametrize("rng", ["seed", 1.5, [1.0]])
def test_simulate_rejects_bad_rng_naming_the_argument(rng: Any) -> None:
    with pytest.raises(TypeError, match=r"rng must be"):
        simulate(ToyVariance(), toy_data(5), rng=rng)


def test_one_dimensional_data_is_one_column() -> None:
    x = toy_data(12, seed=5)
    assert simulate(ToyVariance(), x).value == simulate(ToyVariance(), x[:, None]).value


# ------------------------------------------------------------------ peer traffic


@pytest.mark.parametrize("batch_size", [None, 1, 3])
def test_peer_traffic_costs_match_hand_count(batch_size: int | None) -> None:
    n = 7
    i = np.arange(n)
    est = simulate(PeerToy(declared_offline=999), np.zeros(n), batch_size=batch_size)
    upload = 16 + 4
    peer_sent = 8 * (i + 1) + 2 * 3
    peer_received = 10 + 2 * 5
    dealer = 100 * (i % 2)
    c = est.cost
    assert c.bits_per_party == pytest.approx(float(np.mean(upload + peer_sent)), rel=1e-15)
    assert c.max_bits_per_party == upload + 8 * n + 6
    assert c.peer_bits_per_party == pytest.approx(float(peer_sent.mean()), rel=1e-15)
    assert c.bits_received_per_party == 32 + peer_received
    assert c.total_bits == n * upload + n * 32 + int(peer_sent.sum())
    # 3 messages through the transport (up, broadcast, up), 2 + 1 peer rounds (the
    # batches of one step exchange at the same time).
    assert c.rounds == 3 + 3 and c.peer_rounds == 3
    # The measured dealer bits replace the protocol's own figure instead of adding to it.
    assert c.offline_bits == int(dealer.sum()) == 300
    assert c.offline_bits_per_party == pytest.approx(300 / n, rel=1e-15)


def test_declared_offline_bits_are_kept_when_no_party_reports_dealer_bits() -> None:
    # One party (id 0) receives no dealer bits: the protocol's own figure stands, and
    # is not attributed to the parties.
    est = simulate(PeerToy(declared_offline=999), np.zeros(1))
    assert est.cost.offline_bits == 999 and est.cost.offline_bits_per_party == 0.0
    assert est.cost.peer_bits_per_party == 8 + 6 and est.cost.peer_rounds == 3
    # A protocol without peer traffic keeps its figure too (ToyVariance declares none).
    assert simulate(ToyVariance(), toy_data(5)).cost.peer_rounds == 0


def test_side_by_side_joins_rows_and_keeps_the_longest_rounds() -> None:
    a = PeerTraffic([0, 1], [5, 6], [7, 8], [1, 2], 3)
    b = PeerTraffic([2], [9], [10], [0], 5)
    both = PeerTraffic.side_by_side([a, b])
    np.testing.assert_array_equal(both.parties, [0, 1, 2])
    np.testing.assert_array_equal(both.sent, [5, 6, 9])
    np.testing.assert_array_equal(both.received, [7, 8, 10])
    np.testing.assert_array_equal(both.offline_received, [1, 2, 0])
    assert both.rounds == 5
    with pytest.raises(ValueError, match=r"parts must hold at least one PeerTraffic"):
        PeerTraffic.side_by_side([])


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"sent": [1, 2, 3]}, ValueError, r"inconsistent lengths: parties=2, sent=3"),
    ({"received": [1]}, ValueError, r"inconsistent lengths: .*received=1"),
    ({"sent": [1, -2]}, ValueError, r"sent must be >= 0 \(bit counts\), got -2"),
    ({"offline_received": [0, -1]}, ValueError, r"offline_received must be >= 0"),
    ({"parties": [-1, 0]}, ValueError, r"parties must be >= 0 \(party ids\)"),
    ({"sent": [1.5, 2.0]}, ValueError, r"sent must contain whole numbers"),
    ({"parties": [[0, 1]]}, ValueError, r"parties must have 1 dimension"),
    ({"received": []}, ValueError, r"received is empty"),
    ({"sent": [np.nan, 1]}, ValueError, r"sent contains 1 NaN"),
    ({"rounds": -1}, ValueError, r"rounds must be >= 0, got -1"),
    ({"rounds": 1.0}, TypeError, r"rounds must be an integer"),
    ({"rounds": True}, TypeError, r"rounds must be an integer"),
])
def test_peer_traffic_validation(kwargs: dict[str, Any], error: type, match: str) -> None:
    args: dict[str, Any] = {"parties": [0, 1], "sent": [1, 2], "received": [2, 1],
                            "offline_received": [0, 0], "rounds": 1}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        PeerTraffic(**args)


def test_peer_traffic_only_on_party_messages() -> None:
    peer = PeerTraffic([0], [1], [1], [0], 1)
    with pytest.raises(ValueError, match=r"peer traffic is reported on messages from parties "
                                         r"only, not on a message from the server"):
        Message(Role.SERVER, Role.PARTY, {}, {}, peer=peer)
    with pytest.raises(TypeError, match=r"peer must be a PeerTraffic or None, got dict"):
        Message(Role.PARTY, Role.SERVER, {}, {}, np.arange(1), peer={"sent": 1})  # type: ignore[arg-type]


def test_simulate_refuses_peer_traffic_of_unknown_parties() -> None:
    with pytest.raises(ValueError, match=r"peer traffic names party 1003, but the run has "
                                         r"parties 0..3"):
        simulate(PeerToy(outsider=True), np.zeros(4))


# ------------------------------------------------------------------ simulate input checks


def test_simulate_rejects_nan_and_infinite_data() -> None:
    x = toy_data(10)
    x[3] = np.nan
    with pytest.raises(ValueError, match=r"data contains 1 NaN or infinite"):
        simulate(ToyVariance(), x)
    x[3] = np.inf
    with pytest.raises(ValueError, match=r"data contains 1 NaN or infinite"):
        simulate(ToyVariance(), x)


def test_simulate_rejects_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"data must have 1 or 2 dimension"):
        simulate(ToyVariance(), np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"data is empty"):
        simulate(ToyVariance(), [])


@pytest.mark.parametrize(("batch_size", "error", "match"), [
    (0, ValueError, r"batch_size must be >= 1, got 0"),
    (-3, ValueError, r"batch_size must be >= 1, got -3"),
    (2.5, TypeError, r"batch_size must be an integer"),
    (True, TypeError, r"batch_size must be an integer"),
    ("4", TypeError, r"batch_size must be an integer"),
])
def test_simulate_rejects_bad_batch_size(batch_size: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        simulate(ToyVariance(), toy_data(5), batch_size=batch_size)


def test_simulate_refuses_party_messages_without_senders() -> None:
    with pytest.raises(ValueError, match=r"must say which party sent each row"):
        simulate(Anonymous(), toy_data(4))


def test_simulate_stops_a_protocol_that_never_finishes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(simulate_module, "MAX_ROUNDS", 25)
    with pytest.raises(RuntimeError, match=r"'never-ends' did not finish within 25 rounds"):
        simulate(NeverEnds(), toy_data(4))


# ------------------------------------------------------------------ Message


def test_message_requires_a_wire_size_for_every_field() -> None:
    with pytest.raises(ValueError, match=r"fields \['b', 'c'\] have no declared wire size"):
        Message(Role.PARTY, Role.SERVER, {"a": np.zeros(2), "b": np.zeros(2), "c": np.zeros(2)},
                {"a": 8}, np.arange(2))


def test_message_requires_one_row_per_party() -> None:
    with pytest.raises(ValueError, match=r"field 'a' must have one row per party \(3\)"):
        Message(Role.PARTY, Role.SERVER, {"a": np.zeros(2)}, {"a": 8}, np.arange(3))
    with pytest.raises(ValueError, match=r"field 'a' must have one row per party \(1\)"):
        Message(Role.PARTY, Role.SERVER, {"a": np.float64(1.0)}, {"a": 8}, np.arange(1))


def test_message_bits() -> None:
    rows = Message(Role.PARTY, Role.SERVER,
                   {"a": np.zeros(3), "b": np.zeros((3, 4)), "c": np.zeros((3, 2, 5))},
                   {"a": 7, "b": 3, "c": 1}, np.array([4, 0, 9]))
    assert not rows.is_broadcast
    np.testing.assert_array_equal(rows.bits_per_row(), [7 + 12 + 10] * 3)
    cast = Message(Role.SERVER, Role.PARTY, {"a": np.zeros(5), "b": np.zeros((2, 3))},
                   {"a": 2, "b": 10})
    assert cast.is_broadcast
    assert cast.bits_per_row() == 5 * 2 + 6 * 10


# ------------------------------------------------------------------ Estimate


def _estimate(std_error: float | None = 0.1) -> Estimate:
    return Estimate(value=0.7, quantity="auc", protocol="toy",
                    privacy=PrivacyGuarantee(1.0, 0.0, PrivacyModel.CENTRAL),
                    std_error=std_error, cost=Cost(bits_per_party=128.0))


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99])
def test_confidence_interval_uses_the_normal_quantile(level: float) -> None:
    ci = _estimate().confidence_interval(level)
    assert isinstance(ci, ConfidenceInterval)
    z = stats.norm.ppf(0.5 + level / 2)
    assert ci.low == pytest.approx(0.7 - z * 0.1, rel=1e-12)
    assert ci.high == pytest.approx(0.7 + z * 0.1, rel=1e-12)
    # Its coverage under the normal law is the level asked for.
    coverage = stats.norm.cdf(ci.high, 0.7, 0.1) - stats.norm.cdf(ci.low, 0.7, 0.1)
    assert coverage == pytest.approx(level, rel=1e-12)


def test_confidence_interval_default_level_is_95_percent() -> None:
    low, high = _estimate().confidence_interval()
    assert (high - low) / 2 == pytest.approx(1.959963984540054 * 0.1, rel=1e-12)


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5, 1.5, math.nan])
def test_confidence_interval_rejects_bad_levels(level: float) -> None:
    with pytest.raises(ValueError, match=r"confidence_level must be in \(0, 1\)"):
        _estimate().confidence_interval(level)


def test_confidence_interval_needs_a_standard_error() -> None:
    with pytest.raises(ValueError, match=r"protocol 'toy' gives no standard error for auc"):
        _estimate(None).confidence_interval()


def test_estimate_behaves_like_a_float_and_a_scipy_result() -> None:
    est = _estimate()
    assert float(est) == 0.7
    assert est.statistic == 0.7
    text = str(est)
    assert text.startswith("auc = 0.7 ± 0.1 (s.e.) [toy;")
    assert "128 bits/party" in text
    assert "eps=1" in text
    assert "s.e." not in str(_estimate(None))
    costed = est.with_cost(Cost(rounds=4))
    assert costed.cost.rounds == 4 and costed.value == est.value and est.cost.rounds == 0


def test_normal_std_error() -> None:
    assert normal_std_error(4.0) == 2.0
    assert normal_std_error(-1e-17) == 0.0  # rounding below zero
    with pytest.raises(ValueError, match=r"variance must be finite and >= 0"):
        normal_std_error(-0.1)
    with pytest.raises(ValueError, match=r"variance must be finite and >= 0"):
        normal_std_error(math.nan)


# ------------------------------------------------------------------ registry


def test_registry_lists_and_builds_protocols() -> None:
    names = [entry.name for entry in registry.available()]
    assert names == sorted(names)
    assert {"central-laplace", "exact"} <= set(names)
    with pytest.raises(ValueError, match=r"unknown protocol 'nope'; available protocols: .*exact"):
        registry.make("nope", None, epsilon=1.0)  # type: ignore[arg-type]


def test_registry_refuses_a_second_factory_under_a_taken_name() -> None:
    entry = next(e for e in registry.available() if e.name == "exact")
    # Registering the same factory again is harmless (modules may be re-imported).
    registry.register("exact", entry.factory, model=entry.model, summary=entry.summary,
                      source=entry.source)
    with pytest.raises(ValueError, match=r"a protocol named 'exact' is already registered"):
        registry.register("exact", lambda *a, **k: None,  # type: ignore[arg-type,return-value]
                          model=entry.model, summary="", source="")


class _RowCounter(Protocol):
    """Each party reports how many rows it holds (a party may hold several rows)."""

    name = "row-counter"

    def encode_parties(self, data, parties):
        return np.asarray(parties)

    def init_server(self, n_parties):
        return n_parties

    def party_step(self, state, inbox, rng):
        ids, counts = np.unique(state, return_counts=True)
        return state, Message(Role.PARTY, Role.SERVER, {"rows": counts}, {"rows": 16}, ids)

    def server_step(self, state, inbox, rng):
        rows = np.zeros(state, dtype=int)
        rows[inbox.parties] = inbox.fields["rows"]
        return state, Estimate(float(rows.max()), "max rows", self.name,
                               PrivacyGuarantee.none(), diagnostics={"rows": rows})


def test_parties_holding_several_rows_are_batched_whole_and_costed_per_party() -> None:
    owners = np.array([2, 0, 1, 2, 2, 0, 3, 1, 2])
    data = np.arange(owners.size, dtype=float)
    for batch_size in (None, 1, 3):
        est = simulate(_RowCounter(), data, parties=owners, batch_size=batch_size)
        assert list(est.diagnostics["rows"]) == [2, 2, 4, 1]
        assert est.cost.bits_per_party == 16 and est.cost.total_bits == 4 * 16


@pytest.mark.parametrize("owners, match", [
    (np.array([0, 1, 3, 3]), "party 2 holds no samples"),
    (np.array([0, -1, 1, 1]), "negative id"),
    (np.array([0, 1, 1]), "for each of the 4 rows"),
    (np.array([0.0, 1.0, 1.0, 0.0]), "integer party id"),
])
def test_bad_party_assignments_are_refused(owners: np.ndarray, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        simulate(_RowCounter(), np.zeros(4), parties=owners)


def test_simulate_refuses_something_that_is_not_a_protocol() -> None:
    with pytest.raises(TypeError, match="protocol must be a fedustat Protocol"):
        simulate("central-laplace", np.zeros(4))  # type: ignore[arg-type]


def test_a_batch_takes_its_rows_of_a_delivered_round_as_views():
    # Rows in recipient order (every relay round's delivery): each batch's part is one
    # range of the rows, taken without a copy, and equal to the rows addressed to it.
    from fedustat.protocols.base import Message, Role
    from fedustat.runtime.simulate import _message_for_batch

    rng = np.random.default_rng(21)
    to = np.sort(rng.integers(0, 30, 200))
    values = rng.integers(0, 2**40, (200, 3)).astype(np.uint64)
    origin = rng.integers(0, 30, 200)
    delivered = Message(Role.PARTY, Role.PARTY, {"x": values, "from": origin},
                        {"x": 40, "from": 32}, to)
    shuffled = rng.permutation(200)
    unordered = Message(Role.SERVER, Role.PARTY, {"x": values[shuffled]}, {"x": 40},
                        to[shuffled])
    for start, stop in ((0, 10), (10, 25), (25, 30), (0, 30), (40, 50)):
        part = _message_for_batch(delivered, slice(start, stop))
        mine = (to >= start) & (to < stop)
        np.testing.assert_array_equal(part.parties, to[mine])
        np.testing.assert_array_equal(part.fields["x"], values[mine])
        assert part.fields["x"].size == 0 or np.shares_memory(part.fields["x"], values)
        other = _message_for_batch(unordered, slice(start, stop))
        assert sorted(other.parties.tolist()) == to[mine].tolist()
