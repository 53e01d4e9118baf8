"""The distributed engine (fedustat.runtime.engine) on a small local Dask cluster.

Each run on the engine must release exactly what the in-process simulator releases for
the same seed and the same batches (``batch_size=[partition sizes]``); the distributed
mid-ranks must equal the in-process ones on data with heavy ties; a worker that dies
mid-run is recomputed from its inputs (same release), and one that keeps dying stops
the run with a clear error.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (comes with distributed)
import dask  # noqa: E402

from fedustat.protocols.fedauc.protocol import FedAUCRR, _doubled_mid_ranks  # noqa: E402
from fedustat.protocols.local.quantized_rr import QuantizedRandomizedResponse  # noqa: E402
from fedustat.protocols.registry import make  # noqa: E402
from fedustat.runtime.engine import (  # noqa: E402
    DaskEngine,
    EngineError,
    generated_partitions,
    load_all,
    parquet_partitions,
)
from fedustat.runtime.engine import ranks as rk  # noqa: E402
from fedustat.runtime.simulate import simulate  # noqa: E402
from fedustat.stats.kernels import (  # noqa: E402
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
    rand_index_kernel,
    renyi2_entropy_kernel,
    variance_kernel,
)

# Workers import fedustat but not this test module: ship its generators by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SIZES = [300, 450, 250]


# ------------------------------------------------------------------ data generators


def unit(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.beta(2.0, 5.0, n)


def xy(n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.random(n)
    return np.column_stack([x, np.clip(x + rng.normal(0.0, 0.2, n), 0.0, 1.0)])


def labelled(n: int, rng: np.random.Generator) -> np.ndarray:
    labels = rng.integers(0, 2, n)
    return np.column_stack([np.clip(rng.normal(0.5, 0.15, n) + 0.1 * labels, 0, 1), labels])


def tied_scores(n: int, rng: np.random.Generator) -> np.ndarray:
    # Scores on a coarse grid (many ties), one value held by about half the samples.
    s = np.where(rng.random(n) < 0.5, 0.3, np.round(rng.normal(0.0, 1.0, n), 1))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-2.0 * s))).astype(float)
    return np.column_stack([s, y])


def categories(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 6, n).astype(float)


def constant(n: int, rng: np.random.Generator) -> np.ndarray:
    return np.full(n, 0.5)


def two_clusterings(n: int, rng: np.random.Generator) -> np.ndarray:
    a = rng.integers(0, 3, n)
    return np.column_stack([a, np.where(rng.random(n) < 0.8, a, rng.integers(0, 3, n))])


@pytest.fixture(scope="module")
def engine():
    # One failure is enough to call a task's worker lost for good (the default allows
    # three), so that the "keeps dying" test is quick.
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), \
            DaskEngine(n_workers=2) as eng:
        yield eng


def _same_release(a, b) -> None:
    assert b.value == a.value
    assert b.std_error == a.std_error
    assert b.diagnostics == a.diagnostics
    assert b.cost == a.cost
    assert b.privacy == a.privacy


# ------------------------------------------------------------------ distributed ranks


@pytest.mark.parametrize("seed", range(6))
def test_distributed_mid_ranks_equal_in_process_ranks_with_heavy_ties(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 400))
    values = np.where(rng.random(n) < rng.random(), 0.25, np.round(rng.normal(size=n), 1))
    cuts = np.sort(rng.choice(np.arange(1, n), size=int(rng.integers(0, 5)), replace=False))
    batches = [rk.sort_batch(v) for v in np.split(values, cuts)]
    n_buckets = int(rng.integers(1, 9))
    splitters = rk.choose_splitters([rk.batch_sample(b, 8) for b in batches],
                                    [b.values.size for b in batches], n_buckets)
    assert splitters.size <= n_buckets - 1 and np.all(np.diff(splitters) > 0)
    pieces = [rk.cut_batch(b, splitters) for b in batches]
    open_totals = np.sum([[p.size for p in c.open] for c in pieces], axis=0)
    point_totals = np.sum([c.point for c in pieces], axis=0).astype(np.int64)
    per_bucket = [rk.rank_bucket([c.open[j] for c in pieces]) for j in range(open_totals.size)]
    open_off, point_off = rk.bucket_offsets(open_totals, point_totals)
    got = np.concatenate([
        rk.assemble_ranks(b, c, [r[0][i] for r in per_bucket], open_off, point_off,
                          point_totals)
        for i, (b, c) in enumerate(zip(batches, pieces, strict=True))])
    want, ties = _doubled_mid_ranks(values)
    np.testing.assert_array_equal(got, want)
    assert ties == (bool(np.any(point_totals > 1)) or any(r[1] for r in per_bucket))


def test_heavy_value_becomes_a_point_bucket():
    # 90% of the values equal 0.5: it must be a splitter, so no open bucket holds it.
    values = np.concatenate([np.full(900, 0.5), np.linspace(0, 1, 100)])
    batch = rk.sort_batch(values)
    splitters = rk.choose_splitters([rk.batch_sample(batch, 65)], [1000], 4)
    assert 0.5 in splitters
    cut = rk.cut_batch(batch, splitters)
    assert max(p.size for p in cut.open) <= 100


def test_exact_square_sum_and_its_domain():
    rng = np.random.default_rng(1)
    v = rng.integers(0, 2**32, 1000)
    assert rk.exact_square_sum(v) == sum(int(x) ** 2 for x in v)
    with pytest.raises(ValueError, match=r"values in 0\.\.2\^32 - 1"):
        rk.exact_square_sum(np.array([-1]))


def test_sort_batch_refuses_nan():
    with pytest.raises(ValueError, match="scores to rank must be finite"):
        rk.sort_batch(np.array([0.1, np.nan]))


# ------------------------------------------------------------------ engine = in-process

QUANTIZED_CASES = {
    "gini-k16": (gini_kernel((0, 1)), unit, {"k": 16, "bounds": (0, 1)}),
    "gini-corollary1": (gini_kernel((0, 1)), unit, {"bounds": (0, 1)}),  # a check-in round
    "variance-randomized": (variance_kernel((0, 1)), unit,
                            {"k": 8, "bounds": (0, 1), "quantizer": "randomized"}),
    "auc-public-labels": (auc_kernel(), labelled, {"k": 8, "bounds": (0.0, 1.0)}),
    "kendall": (kendall_tau_kernel("a"), xy,
                {"k": 4, "bounds": {"x": (0.0, 1.0), "y": (0.0, 1.0)}}),
    "duplicate": (duplicate_pair_kernel(), categories, {"domain": list(range(6))}),
    "renyi2": (renyi2_entropy_kernel(), categories, {"domain": list(range(6))}),
    "rand-index": (rand_index_kernel(), two_clusterings,
                   {"domain": {"a": [0, 1, 2], "b": [0, 1, 2]}}),
}


@pytest.mark.parametrize("case", sorted(QUANTIZED_CASES))
def test_ldp_quantized_engine_equals_in_process(engine, case):
    kernel, generator, options = QUANTIZED_CASES[case]
    protocol = make("ldp-quantized", kernel, epsilon=1.0, **options)
    parts = generated_partitions(generator, SIZES, seed=11)
    local = simulate(protocol, load_all(parts), rng=5, batch_size=SIZES)
    _same_release(local, engine.run(protocol, parts, rng=5))
    assert engine.run(protocol, parts, rng=6).value != local.value  # the seed matters


@pytest.mark.parametrize(("generator", "epsilon", "n_buckets"), [
    (labelled, 1.0, None), (tied_scores, 1.0, 3), (tied_scores, 2.0, 7),
    (tied_scores, math.inf, 2)])
def test_fedauc_rr_engine_equals_in_process(engine, generator, epsilon, n_buckets):
    protocol = make("fedauc-rr", auc_kernel(), epsilon=epsilon)
    parts = generated_partitions(generator, [*SIZES, 120], seed=3)
    data = load_all(parts)
    local = simulate(protocol, data, rng=9, batch_size=[*SIZES, 120])
    _same_release(local, engine.run(protocol, parts, rng=9, n_buckets=n_buckets))
    if not math.isfinite(epsilon):  # no noise: the AUC itself, ties counted 1/2
        from sklearn.metrics import roc_auc_score
        assert local.value == pytest.approx(roc_auc_score(data[:, 1], data[:, 0]), abs=1e-12)


def test_engine_releases_in_the_statistics_range(engine):
    # The clip is part of the protocol's server step: the engine's release of a Gini mean
    # difference whose exact value is 0 is clipped at 0 like the simulator's, with the
    # protocol's raw (negative) value kept.
    protocol = make("ldp-quantized", gini_kernel((0.0, 1.0)), epsilon=1.0, k=8)
    parts = generated_partitions(constant, SIZES, seed=4)
    seed = next(s for s in range(40)
                if simulate(protocol, load_all(parts), rng=s, batch_size=SIZES).raw_value < 0)
    local = simulate(protocol, load_all(parts), rng=seed, batch_size=SIZES)
    release = engine.run(protocol, parts, rng=seed)
    _same_release(local, release)
    assert release.value == 0.0 and release.raw_value == local.raw_value < 0.0
    assert release.clip_range == (0.0, 1.0) and release.confidence_interval().low == 0.0


def test_parquet_partitions_equal_in_process(engine, tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = generated_partitions(tied_scores, SIZES, seed=8)
    paths = []
    for i, p in enumerate(parts):
        rows = p.load()
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"label": rows[:, 1], "score": rows[:, 0]}), path)
        paths.append(path)
    files = parquet_partitions(paths, columns=["score", "label"])
    protocol = make("fedauc-rr", auc_kernel(), epsilon=1.0)
    local = simulate(protocol, load_all(parts), rng=2, batch_size=SIZES)
    _same_release(local, engine.run(protocol, files, rng=2))


# ------------------------------------------------------------------ failures


class _DiesOnce(QuantizedRandomizedResponse):
    """Kills its worker the first time a batch is summarized (a marker file remembers)."""

    marker = ""

    def summarize_batch(self, message, context, memory=None):
        if not os.path.exists(self.marker):
            Path(self.marker).write_text("died")
            os._exit(1)
        return super().summarize_batch(message, context, memory)


class _RankDiesOnce(FedAUCRR):
    """Kills its worker the first time it writes a batch's ranking reply."""

    marker = ""

    def rank_reply(self, message, doubled, public):
        if not os.path.exists(self.marker):
            Path(self.marker).write_text("died")
            os._exit(1)
        return super().rank_reply(message, doubled, public)


class _AlwaysDies(QuantizedRandomizedResponse):
    def summarize_batch(self, message, context, memory=None):
        os._exit(1)


def test_worker_killed_mid_run_is_recomputed_with_the_same_release(engine, tmp_path: Path):
    protocol = _DiesOnce(gini_kernel((0, 1)), 1.0, k=16, bounds=(0, 1))
    protocol.marker = str(tmp_path / "ldp")
    parts = generated_partitions(unit, SIZES, seed=4)
    local = simulate(protocol, load_all(parts), rng=1, batch_size=SIZES)
    _same_release(local, engine.run(protocol, parts, rng=1))
    assert Path(protocol.marker).exists()  # a worker did die

    ranked = _RankDiesOnce(1.0)
    ranked.marker = str(tmp_path / "rank")
    parts = generated_partitions(tied_scores, SIZES, seed=4)
    local = simulate(make("fedauc-rr", auc_kernel(), epsilon=1.0), load_all(parts), rng=1,
                     batch_size=SIZES)
    _same_release(local, engine.run(ranked, parts, rng=1, n_buckets=3))
    assert Path(ranked.marker).exists()


def test_worker_that_keeps_dying_fails_the_run_clearly(engine):
    protocol = _AlwaysDies(gini_kernel((0, 1)), 1.0, k=16, bounds=(0, 1))
    parts = generated_partitions(unit, [50, 50], seed=4)
    with pytest.raises(EngineError, match=r"kept losing its worker.*no partial result"):
        engine.run(protocol, parts, rng=1)


def test_unsupported_protocols_and_inputs_fail_early(engine):
    parts = generated_partitions(labelled, [40, 40], seed=1)
    with pytest.raises(EngineError, match="runs one client per sample"):
        engine.run(make("fedauc-rr", auc_kernel(), epsilon=1.0, n_clients=4), parts, rng=1)
    with pytest.raises(EngineError, match="'central-laplace' has no distributed server step"):
        engine.run(make("central-laplace", auc_kernel(), epsilon=1.0), parts, rng=1)
    with pytest.raises(TypeError, match="partitions must be a non-empty sequence"):
        engine.run(make("fedauc-rr", auc_kernel(), epsilon=1.0), [], rng=1)
    with pytest.raises(ValueError, match="label column must be 0/1"):
        engine.run(make("fedauc-rr", auc_kernel(), epsilon=1.0),
                   generated_partitions(unit_pairs, [30, 30], seed=1), rng=1)


def unit_pairs(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.random((n, 2))


def test_engine_connects_to_a_scheduler_address(engine):
    # A second engine on the same cluster, by address: it closes only its own client.
    address = engine.client.scheduler.address
    protocol = make("ldp-quantized", gini_kernel((0, 1)), epsilon=1.0, k=8, bounds=(0, 1))
    parts = generated_partitions(unit, [100, 60], seed=2)
    with DaskEngine(address=address) as remote:
        got = remote.run(protocol, parts, rng=3)
    _same_release(simulate(protocol, load_all(parts), rng=3, batch_size=[100, 60]), got)
    assert engine.client.status == "running"


def test_partition_arguments_are_checked():
    with pytest.raises(ValueError, match="sizes entries must be"):
        generated_partitions(unit, [10, 0], seed=1)
    with pytest.raises(ValueError, match="parquet_partitions needs at least one file"):
        parquet_partitions([])
