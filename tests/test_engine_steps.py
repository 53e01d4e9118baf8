"""Distributed server steps on the engine beyond ldp-quantized and fedauc-rr.

For each protocol whose server work the engine splits (ldp-tree's per-level Hadamard
sums, FedAUC's Laplace / Gaussian / adaptive variants, ...), a run on a small local Dask
cluster must release what the in-process simulator releases for the same seed and the
same batches (``simulate(..., batch_size=[partition sizes])``): the same numbers where
the server's sums are integers, equal to within float summation order where they are
sums of noisy doubles.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (comes with distributed)

from fedustat.privacy.errors import NormalError  # noqa: E402
from fedustat.protocols.ecdf.fss import FssECDF  # noqa: E402
from fedustat.protocols.ecdf.release import dp_ecdf, dp_ecdf_from_counts  # noqa: E402
from fedustat.protocols.ecdf.roc import dp_roc_curve  # noqa: E402
from fedustat.protocols.ecdf.secagg import PointwiseECDF, pointwise_ecdf  # noqa: E402
from fedustat.protocols.fedauc.protocol import FedAUC, exact_sum, exact_to_float  # noqa: E402
from fedustat.protocols.local.auc_tree import LevelEstimates, _signed_sums  # noqa: E402
from fedustat.protocols.registry import make  # noqa: E402
from fedustat.runtime.engine import (  # noqa: E402
    DaskEngine,
    EngineError,
    distributed_ecdf_counts,
    dp_ecdf_distributed,
    dp_roc_curve_distributed,
    generated_partitions,
    load_all,
    pointwise_ecdf_distributed,
)
from fedustat.runtime.simulate import simulate  # noqa: E402
from fedustat.stats.kernels import auc_kernel, gini_kernel, vus_kernel  # noqa: E402

# Workers import fedustat but not this test module: ship its generators by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SIZES = [300, 450, 250]


def integer_scores(d: int):
    def generate(n: int, rng: np.random.Generator) -> np.ndarray:
        labels = rng.integers(0, 2, n)
        scores = np.clip(rng.normal(0.45 + 0.15 * labels, 0.2, n), 0, 1 - 1e-9)
        return np.column_stack([np.floor(scores * d), labels])
    return generate


def real_scores(n: int, rng: np.random.Generator) -> np.ndarray:
    labels = rng.integers(0, 2, n)
    return np.column_stack([np.clip(rng.normal(0.5 + 0.1 * labels, 0.2, n), 0, 1), labels])


@pytest.fixture(scope="module")
def engine():
    with DaskEngine(n_workers=2) as eng:
        yield eng


def _same_release(a, b) -> None:
    assert b.value == a.value
    assert b.std_error == a.std_error
    assert b.error == a.error
    assert b.diagnostics == a.diagnostics
    assert b.cost == a.cost
    assert b.privacy == a.privacy


# ------------------------------------------------------------------ ldp-tree

TREE_CASES = {
    "users-d64": ({"d": 64}, integer_scores(64)),
    # A deep tree: the batches' sparse sums hold only the indices that were reported.
    "users-d65536": ({"d": 1 << 16}, integer_scores(1 << 16)),
    "budget-basic": ({"d": 32, "split": "budget-basic"}, integer_scores(32)),
    "score-bounds": ({"bounds": (0.0, 1.0), "d": 256}, real_scores),
}


@pytest.mark.parametrize("case", sorted(TREE_CASES))
def test_ldp_tree_engine_equals_in_process(engine, case):
    options, generator = TREE_CASES[case]
    protocol = make("ldp-tree", auc_kernel(), epsilon=2.0, **options)
    parts = generated_partitions(generator, SIZES, seed=12)
    local = simulate(protocol, load_all(parts), rng=4, batch_size=SIZES)
    _same_release(local, engine.run(protocol, parts, rng=4))
    assert engine.run(protocol, parts, rng=5).value != local.value  # the seed matters


def test_level_estimates_from_signed_sums_equal_estimates_from_reports():
    # Both estimation paths (the small runs above prune before any level is queried
    # node by node), on the same reports.
    protocol = make("ldp-tree", auc_kernel(), epsilon=1.0, d=1 << 10)
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 1 << 10, 500)
    reports = protocol.randomizer.randomize(scores, rng)
    direct = LevelEstimates.from_reports(protocol.randomizer, reports, method="per-node")
    per_level = direct.reports
    summed = [_signed_sums(j.astype(np.int64), b.astype(np.int64), 1 << lvl)
              for lvl, (j, b) in enumerate(per_level, 1)]
    for method in ("fwht", "per-node"):
        a = LevelEstimates(protocol.randomizer, per_level, method=method)
        b = LevelEstimates.from_signed_sums(protocol.randomizer, summed, method=method)
        for level in (1, 4, 10):
            nodes = rng.integers(0, 1 << level, 7)
            np.testing.assert_array_equal(a(level, nodes), b(level, nodes))
        assert a.operations == b.operations and a.methods == b.methods


def test_ldp_tree_summary_checks_the_reports():
    protocol = make("ldp-tree", auc_kernel(), epsilon=1.0, d=8, split="budget-basic",
                    oracle="hadamard")
    from fedustat.protocols.base import Message, Role
    fields = {"label": np.array([0, 1]), "bit": np.zeros((2, 3), np.uint8),
              "j1": np.array([0, 1]), "j2": np.array([0, 4]), "j3": np.array([0, 7])}
    msg = Message(Role.PARTY, Role.SERVER, fields, dict.fromkeys(fields, 1), np.arange(2))
    with pytest.raises(ValueError, match=r"j has values outside the input domain \{0, \.\.\., 3\}"):
        protocol.summarize_batch(msg, None)


# ------------------------------------------------------------------ FedAUC, noisy variants


def labelled(n: int, rng: np.random.Generator) -> np.ndarray:
    labels = rng.integers(0, 2, n)
    return np.column_stack([np.clip(rng.normal(0.5, 0.15, n) + 0.1 * labels, 0, 1), labels])


def tied_scores(n: int, rng: np.random.Generator) -> np.ndarray:
    # Scores on a coarse grid (many ties), one value held by about half the samples.
    s = np.where(rng.random(n) < 0.5, 0.3, np.round(rng.normal(0.0, 1.0, n), 1))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-2.0 * s))).astype(float)
    return np.column_stack([s, y])


# In process the server's sums are pairwise float sums, on the engine correctly rounded
# exact sums: the two differ by the pairwise rounding, at most about
# log2(M) * 2^-53 * sum|x| (Higham, Accuracy and Stability, 2002, Sec. 4.2), 1.2e-15
# relative at M = 1120 for sums of same-sign terms; the noisy statistics' sums and
# eq. 1's division (condition number below 10 here) keep the release within 1e-13.
REL = 1e-12


def _close_release(a, b) -> None:
    assert b.value == pytest.approx(a.value, rel=REL, abs=0)
    assert b.std_error == pytest.approx(a.std_error, rel=REL, abs=0)
    assert type(b.error) is type(a.error)
    if a.error is not None:
        assert b.error.variance == pytest.approx(a.error.variance, rel=REL, abs=0)
    assert b.diagnostics.keys() == a.diagnostics.keys()
    for key, value in a.diagnostics.items():
        if isinstance(value, float):
            assert b.diagnostics[key] == pytest.approx(value, rel=REL, abs=1e-300), key
        else:
            assert b.diagnostics[key] == value, key
    assert b.cost == a.cost
    assert b.privacy == a.privacy


FEDAUC_CASES = {
    "laplace-local": ("fedauc-laplace-local", {}, labelled),
    "laplace-local-ties": ("fedauc-laplace", {"alpha": 0.3}, tied_scores),
    "laplace-global": ("fedauc-laplace-global", {}, labelled),
    "gaussian": ("fedauc-gaussian", {"delta": 1e-6}, tied_scores),
    "gaussian-global": ("fedauc-gaussian", {"delta": 1e-6, "sensitivity": "global"},
                        labelled),
    "adaptive": ("fedauc-adaptive", {}, tied_scores),
    "adaptive-exact": ("fedauc-adaptive", {"epsilon": float("inf")}, labelled),
}


@pytest.mark.parametrize("case", sorted(FEDAUC_CASES))
def test_fedauc_noisy_variants_engine_equal_in_process(engine, case):
    name, options, generator = FEDAUC_CASES[case]
    options = {"epsilon": 1.0, **options}
    protocol = make(name, auc_kernel(), **options)
    sizes = [*SIZES, 120]
    parts = generated_partitions(generator, sizes, seed=3)
    local = simulate(protocol, load_all(parts), rng=9, batch_size=sizes)
    got = engine.run(protocol, parts, rng=9, n_buckets=3)
    _close_release(local, got)
    if options["epsilon"] != float("inf"):
        assert engine.run(protocol, parts, rng=10, n_buckets=3).value != got.value


def test_fedauc_refusals_name_the_reason(engine):
    # Nine samples: one client's Laplace term carries more than a tenth of the variance,
    # so the release's law is the exact sum over clients, which needs every scale.
    parts = generated_partitions(labelled, [5, 4], seed=1)
    with pytest.warns(RuntimeWarning, match="projected"):
        local = simulate(make("fedauc-laplace", auc_kernel(), epsilon=1.0), load_all(parts),
                         rng=1, batch_size=[5, 4])
    assert not isinstance(local.error, NormalError)  # in process: the exact sum
    with pytest.raises(EngineError, match=r"fedauc-laplace-local: a few clients' Laplace noise "
                                          r"dominates .* run it in process"):
        engine.run(make("fedauc-laplace", auc_kernel(), epsilon=1.0), parts, rng=1)
    parts = generated_partitions(labelled, [40, 40], seed=1)
    with pytest.raises(EngineError, match="fedauc-adaptive: the distributed engine runs one "
                                          "client per sample"):
        engine.run(make("fedauc-adaptive", auc_kernel(), epsilon=1.0, n_clients=4), parts,
                   rng=1)

    class NoHooks(FedAUC):  # a variant whose last step has no distributed form
        name = "fedauc-nohooks"

        def _local_message(self, state, doubled_ranks, rng):
            raise AssertionError("not reached")

        def _estimate(self, state, stats):
            raise AssertionError("not reached")

    with pytest.raises(EngineError, match="fedauc-nohooks: its last server step has no "
                                          "distributed form"):
        engine.run(NoHooks(1.0), parts, rng=1)


def test_exact_sum_is_the_correctly_rounded_sum_whatever_the_split():
    import math
    rng = np.random.default_rng(7)
    for _ in range(50):
        x = rng.laplace(0.0, 10.0 ** rng.integers(-30, 30), int(rng.integers(1, 2000)))
        x = np.concatenate([x, [5e-324, -1e300, 1e300, 2.0**-1060]])
        cut = int(rng.integers(0, x.size + 1))
        total = exact_sum(x[:cut]) + exact_sum(x[cut:])
        assert exact_to_float(total) == math.fsum(x)
    with pytest.raises(ValueError, match="values to sum must be finite"):
        exact_sum(np.array([1.0, np.inf]))


# ------------------------------------------------------------------ central ECDF counts


def heavy_tail(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.column_stack([rng.lognormal(0.0, 1.0, n), rng.integers(0, 3, n)])


@pytest.mark.parametrize("epsilon", [0.5, 2.0, float("inf")])
def test_dp_ecdf_from_partitions_equals_in_process(engine, epsilon):
    parts = generated_partitions(heavy_tail, SIZES, seed=21)
    data = load_all(parts)
    tau = np.linspace(0.0, 8.0, 37)
    for column in (0, 1):
        want = dp_ecdf(data[:, column], tau, epsilon=epsilon, rng=13)
        got = dp_ecdf_distributed(parts, tau, epsilon=epsilon, rng=13, column=column,
                                  engine=engine)
        np.testing.assert_array_equal(got.values, want.values)
        assert (got.n, got.scale, got.privacy, got.noise_kind) == (
            want.n, want.scale, want.privacy, want.noise_kind)
    counts, n = distributed_ecdf_counts(engine, parts, tau)
    np.testing.assert_array_equal(counts, np.searchsorted(np.sort(data[:, 0]), tau, "right"))
    assert n == sum(SIZES)


@pytest.mark.parametrize(("epsilon", "smooth", "curve_method"),
                         [(1.0, True, None), (3.0, False, None), (2.0, None, None),
                          (2.0, False, "003-tree"), (float("inf"), True, None)])
def test_dp_roc_curve_from_partitions_equals_in_process(engine, epsilon, smooth,
                                                        curve_method):
    parts = generated_partitions(labelled, SIZES, seed=22)
    data = load_all(parts)
    tau = np.linspace(0.0, 1.0, 21)
    want = dp_roc_curve(data[:, 1], data[:, 0], epsilon=epsilon, thresholds=tau,
                        smooth=smooth, curve_method=curve_method, rng=5)
    got = dp_roc_curve_distributed(parts, epsilon=epsilon, thresholds=tau, smooth=smooth,
                                   curve_method=curve_method, rng=5, engine=engine)
    for field in ("fpr", "tpr", "thresholds", "raw_fpr", "raw_tpr"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field))
    assert got.auc == want.auc


def test_ecdf_counts_bad_inputs(engine):
    parts = generated_partitions(labelled, [20, 20], seed=1)
    with pytest.raises(ValueError, match=r"y_score has values above the last threshold 0\.5"):
        dp_roc_curve_distributed(parts, epsilon=1.0, thresholds=[0.1, 0.5], engine=engine)
    with pytest.raises(ValueError, match="column 2 is not a column of the partition's 2"):
        dp_ecdf_distributed(parts, [0.1, 0.5], epsilon=1.0, column=2, engine=engine)
    with pytest.raises(ValueError, match=r"counts must be non-decreasing counts in 0\.\.n"):
        dp_ecdf_from_counts(np.array([3, 2]), 5, [0.1, 0.5], epsilon=1.0)
    with pytest.raises(TypeError, match="partitions must be a non-empty sequence"):
        dp_ecdf_distributed([], [0.1], epsilon=1.0, engine=engine)


@pytest.mark.parametrize("options", [
    {"epsilon": 1.0},  # noise drawn by the servers (distributed Polya shares)
    {"epsilon": 2.0, "n_servers": 3, "query": [0, 5, 17, 36]},
    {"epsilon": float("inf")},
])
def test_pointwise_secagg_ecdf_from_partitions_equals_in_process(engine, options):
    parts = generated_partitions(heavy_tail, [300, 300, 250], seed=23)
    values = load_all(parts)[:, 0]
    tau = np.linspace(0.0, 8.0, 37)
    want = pointwise_ecdf(values, tau, batch_size=300, rng=17, **options)
    got = pointwise_ecdf_distributed(parts, tau, rng=17, engine=engine, **options)
    np.testing.assert_array_equal(got.values, want.values)
    np.testing.assert_array_equal(got.counts, want.counts)
    assert (got.n, got.scale, got.privacy, got.cost, got.setup_cost) == (
        want.n, want.scale, want.privacy, want.cost, want.setup_cost)
    assert got.diagnostics == want.diagnostics


# ------------------------------------------------------------------ gathered server steps


def small_values(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.round(rng.uniform(0.0, 4.0, n) * 8) / 8


def unit_values(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.random(n)


def three_classes(n: int, rng: np.random.Generator) -> np.ndarray:
    y = rng.integers(0, 3, n)
    return np.column_stack([np.clip(rng.normal(0.3 + 0.2 * y, 0.2, n), 0, 1), y])


def _umpc(comparison: str, **params):
    return make("umpc", gini_kernel((0.0, 4.0)), epsilon=1.0, comparison=comparison,
                bounds=(0.0, 4.0), precision=1 / 8, **params)


GRID = np.linspace(0.0, 4.0, 9)
GATHERED_CASES = {
    # Edges join parties of different batches: relay rows (dealt material, shares,
    # openings, noise shares) move between workers.
    "umpc": (lambda: _umpc("fss", threat_model="hf"), small_values, [5, 2, 8, 4]),
    # Public labels: the check-in routes each label to the batches that need it.
    "umpc-auc-fss": (lambda: make("umpc", auc_kernel(), epsilon=1.0, comparison="fss",
                                  bounds=(0.0, 1.0), precision=1 / 64), labelled,
                     [7, 3, 9, 6]),
    "umpc-auc-circuit": (lambda: make("umpc", auc_kernel(), epsilon=1.0,
                                      comparison="circuit", threat_model="dis",
                                      bounds=(0.0, 1.0), precision=1 / 64), labelled,
                         [7, 3, 9, 6]),
    # The computing parties 0..m-1 receive one relay row from every party.
    "ecdf-pointwise-secagg": (lambda: PointwiseECDF(GRID, epsilon=1.0), small_values,
                              [6, 5, 9]),
    "ecdf-fss": (lambda: FssECDF(GRID, epsilon=1.0), small_values, [6, 5, 9]),
    "ldp-ghazi": (lambda: make("ldp-ghazi", gini_kernel((0, 1)), epsilon=1.0), unit_values,
                  [30, 20]),
    "ghazi-shuffle": (lambda: make("ghazi-shuffle", gini_kernel((0, 1)), epsilon=1.0,
                                   delta=1e-6), unit_values, [30, 20]),
    "central-laplace": (lambda: make("central-laplace", auc_kernel(), epsilon=1.0), labelled,
                        [30, 20]),
    # Degree 3, three public classes (2-bit labels), a batch of one party.
    "umpc-vus-circuit": (lambda: make("umpc", vus_kernel(), epsilon=1.0, comparison="circuit",
                                      bounds=(0.0, 1.0), precision=1 / 64), three_classes,
                         [1, 12, 9, 8]),
}


@pytest.mark.parametrize("case", sorted(GATHERED_CASES))
def test_gathered_server_steps_equal_in_process(engine, case):
    build, generator, sizes = GATHERED_CASES[case]
    parts = generated_partitions(generator, sizes, seed=31)
    local = simulate(build(), load_all(parts), rng=6, batch_size=sizes)
    got = engine.run(build(), parts, rng=6, server_steps="gathered")
    if case.startswith("ecdf"):  # the released curve sits in the diagnostics
        a, b = local.diagnostics.pop("curve"), got.diagnostics.pop("curve")
        np.testing.assert_array_equal(b.values, a.values)
        np.testing.assert_array_equal(b.counts, a.counts)
        assert (b.n, b.cost, b.setup_cost) == (a.n, a.cost, a.setup_cost)
    _same_release(local, got)
    if case.startswith("umpc"):
        assert got.cost.peer_rounds >= 4  # dealing, sharing, circuit, noise


def test_gathered_mode_refusals(engine):
    parts = generated_partitions(labelled, [10, 6, 8], seed=4)
    protocol = make("pairs-2pc", auc_kernel(), epsilon=1.0, bounds=(0, 1))
    with pytest.raises(ValueError, match="server_steps must be 'distributed' or 'gathered'"):
        engine.run(protocol, parts, rng=3, server_steps="local")


@pytest.mark.parametrize("case", ["umpc", "umpc-auc-fss", "umpc-vus-circuit"])
def test_umpc_rows_never_reach_the_driver(engine, monkeypatch, case):
    # No round's per-party rows reach the driver: the check-in (labels or check-ins) is
    # summarized and routed between workers, the aggregation (a ring sum of the parties'
    # output shares, 002 Lemma C.1) combined by tasks (gathered_reduction). The driver's
    # server state holds no per-party array and no design tuples.
    from fedustat.protocols.mpc.umpc import UMPC

    seen: list[int] = []
    original = UMPC.server_step
    finish = UMPC.check_in_done
    states: list = []

    def spy(self, state, inbox, rng):
        seen.append(len(inbox.parties))
        return original(self, state, inbox, rng)

    def keep(self, state, design, active):
        finish(self, state, design, active)
        states.append(state)

    monkeypatch.setattr(UMPC, "server_step", spy)
    monkeypatch.setattr(UMPC, "check_in_done", keep)
    build, generator, sizes = GATHERED_CASES[case]
    parts = generated_partitions(generator, sizes, seed=31)
    got = engine.run(build(), parts, rng=6, server_steps="gathered")
    assert seen == []
    (state,) = states
    assert state.public is None and not hasattr(state.design, "tuples")
    if case != "umpc":
        assert state.class_counts.sum() == sum(sizes)
    monkeypatch.setattr(UMPC, "server_step", original)
    monkeypatch.setattr(UMPC, "check_in_done", finish)
    local = simulate(build(), load_all(parts), rng=6, batch_size=sizes)
    _same_release(local, got)


def test_serializability_check_keeps_no_copy_of_the_state(monkeypatch):
    # The gathered mode checks that a batch's state can move between workers by pickling
    # it into a sink that keeps nothing, not into bytes (a second copy of the state).
    import cloudpickle as cp

    from fedustat.runtime.engine import driver

    def refuse(*args, **kwargs):
        raise AssertionError("the check built a pickled copy of the state")

    monkeypatch.setattr(cp, "dumps", refuse)
    parts = generated_partitions(small_values, [6], seed=3)
    protocol = _umpc("fss").configure(6)
    batch = driver._init_batch(protocol, parts[0], 0, np.random.SeedSequence(1))
    stepped = driver._party_round_relay(protocol, batch)
    assert stepped.outbox.fields["ready"].size == 6
