"""The protocol contract (``fedustat.protocols.base``) and the in-process transport
(``fedustat.runtime.simulate``).

A small two-round protocol written here (parties send a value, the server answers with
the mean, parties reply with their deviation and squared deviation, the server releases
the sample variance) is run through ``simulate``; its costs are counted by hand from the
messages it emits and compared with what the transport measured.
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

    def init_parties(self, data: np.ndarray, parties: np.ndarray) -> _ToyParties:
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

    def init_parties(self, data: np.ndarray, parties: np.ndarray) -> Any:
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

    def init_parties(self, data, parties):
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
