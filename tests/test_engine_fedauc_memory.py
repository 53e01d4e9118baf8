"""FedAUC's ranking on the engine without kept batch states (the default).

Each round's task rebuilds its batch from its partition, its seed stream and the replies
so far; the ranking passes its sorted values, bucket ranks and each batch's ranks on in
files of a per-run spill directory. The release must be the one the kept states give and
the in-process one; between rounds the workers must hold no batch (only O(buckets)
numbers), and the files must be gone when the run ends, however it ends.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (comes with distributed)

from fedustat.protocols.fedauc.protocol import FedAUC, FedAUCRR  # noqa: E402
from fedustat.protocols.registry import make  # noqa: E402
from fedustat.runtime.engine import (  # noqa: E402
    DaskEngine,
    EngineError,
    driver,
    generated_partitions,
    load_all,
)
from fedustat.runtime.simulate import simulate  # noqa: E402
from fedustat.stats.kernels import auc_kernel  # noqa: E402

# Workers import fedustat but not this test module: ship its functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def tied_scores(n: int, rng: np.random.Generator) -> np.ndarray:
    # Scores on a coarse grid (many ties), one value held by about half the samples.
    s = np.where(rng.random(n) < 0.5, 0.3, np.round(rng.normal(0.0, 1.0, n), 1))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-2.0 * s))).astype(float)
    return np.column_stack([s, y])


def distinct_scores(n: int, rng: np.random.Generator) -> np.ndarray:
    s = rng.normal(0.0, 1.0, n)
    return np.column_stack([s, (rng.random(n) < 1.0 / (1.0 + np.exp(-s))).astype(float)])


@pytest.fixture(scope="module")
def engine():
    with DaskEngine(n_workers=2) as eng:
        yield eng


def _identical(a, b) -> None:
    assert b.value == a.value
    assert b.std_error == a.std_error
    assert b.diagnostics == a.diagnostics
    assert b.cost == a.cost
    assert b.privacy == a.privacy
    assert type(b.error) is type(a.error)
    if a.error is not None:
        assert b.error.variance == a.error.variance


VARIANTS = {
    "rr": ("fedauc-rr", {"epsilon": 1.0}),
    "rr-exact": ("fedauc-rr", {"epsilon": math.inf}),
    "laplace-global": ("fedauc-laplace-global", {"epsilon": 1.0}),
    "gaussian": ("fedauc-gaussian", {"epsilon": 1.0, "delta": 1e-6}),
    "adaptive": ("fedauc-adaptive", {"epsilon": 1.0}),
}


@pytest.mark.parametrize("case", sorted(VARIANTS))
def test_replayed_ranking_gives_the_kept_states_release_and_in_process(engine, tmp_path,
                                                                       case):
    name, options = VARIANTS[case]
    protocol = make(name, auc_kernel(), **options)
    sizes = [300, 450, 250, 120]
    parts = generated_partitions(tied_scores, sizes, seed=3)
    replayed = DaskEngine(engine.client, spill_dir=tmp_path).run(protocol, parts, rng=9,
                                                                  n_buckets=3)
    kept = DaskEngine(engine.client, keep_states=True).run(protocol, parts, rng=9,
                                                          n_buckets=3)
    _identical(kept, replayed)  # the same exact sums, wherever the batches live
    local = simulate(protocol, load_all(parts), rng=9, batch_size=sizes)
    if isinstance(protocol, FedAUCRR):
        _identical(local, replayed)
    else:  # in process, pairwise float sums (tests/test_engine_steps.py, REL)
        assert replayed.value == pytest.approx(local.value, rel=1e-12, abs=0)
        assert replayed.std_error == pytest.approx(local.std_error, rel=1e-12, abs=0)
        assert replayed.cost == local.cost
    assert replayed.diagnostics["n_samples"] == sum(sizes)
    assert list(tmp_path.iterdir()) == []  # the run's files are gone


# ------------------------------------------------------------------ what workers hold


def _held(dask_worker) -> list[tuple[str, int]]:
    """(type name, bytes) of every result a worker holds."""
    from dask.sizeof import sizeof

    return [(type(value).__name__, int(sizeof(value))) for value in
            dask_worker.data.values()]


def _probe(monkeypatch, engine: DaskEngine, spill: Path) -> dict[str, list]:
    """Records, on the driver, what the workers hold and which spill files exist when the
    ranking ends (server_step_ranked) and at the release (server_step_reduced)."""
    seen: dict[str, list] = {"ranked": [], "released": []}

    def snapshot(where: str) -> None:
        held = [item for items in engine.client.run(_held).values() for item in items]
        files = sorted(p.name.split("-")[0] for p in spill.rglob("*.npy"))
        seen[where].append((held, files))

    ranked, reduced = FedAUC.server_step_ranked, FedAUCRR.server_step_reduced

    def server_step_ranked(self, state, summary, rng):
        snapshot("ranked")
        return ranked(self, state, summary, rng)

    def server_step_reduced(self, state, summary, rng):
        snapshot("released")
        return reduced(self, state, summary, rng)

    # Only the driver's class changes: workers unpickle the protocol from fedustat.
    monkeypatch.setattr(FedAUC, "server_step_ranked", server_step_ranked)
    monkeypatch.setattr(FedAUCRR, "server_step_reduced", server_step_reduced)
    return seen


def test_no_batch_is_held_between_rounds(engine, tmp_path, monkeypatch):
    protocol = make("fedauc-rr", auc_kernel(), epsilon=1.0)
    batch = 20_000  # 160 KB per float64 column of a batch
    parts = generated_partitions(distinct_scores, [batch, batch], seed=5)
    largest = {}
    for keep in (False, True):
        spill = tmp_path / f"keep-{keep}"
        spill.mkdir()
        seen = _probe(monkeypatch, engine, spill)
        DaskEngine(engine.client, keep_states=keep, spill_dir=spill).run(
            protocol, parts, rng=1, n_buckets=3)
        (ranked_held, ranked_files), = seen["ranked"]
        (released_held, _), = seen["released"]
        names = {name for name, _ in ranked_held + released_held}
        largest[keep] = max(size for _, size in ranked_held + released_held)
        if keep:  # the probe sees kept batches: each a batch's state, O(batch)
            assert "_Batch" in names
        else:
            # Nothing per batch stays in memory: no state, sorted run or piece; what the
            # workers hold is O(buckets) (the protocol, cut positions, totals) ...
            assert not names & {"_Batch", "SortedBatch", "BatchPieces", "ndarray"}, names
            # ... and on disk, once ranked, only each batch's ranks for its replay.
            assert ranked_files == ["ranks", "ranks"]
        assert list(spill.iterdir()) == []
    assert largest[True] >= 8 * batch  # a batch's scores or ranks at least
    assert largest[False] < 8 * batch // 4


def test_replay_without_ranks_does_not_grow_with_the_batch(engine, tmp_path, monkeypatch):
    # The same probe at two batch sizes: what the workers hold is the same size.
    protocol = make("fedauc-rr", auc_kernel(), epsilon=1.0)
    totals = []
    for batch in (500, 20_000):
        seen = _probe(monkeypatch, engine, tmp_path)
        DaskEngine(engine.client, spill_dir=tmp_path).run(
            protocol, generated_partitions(distinct_scores, [batch, batch], seed=5),
            rng=1, n_buckets=3)
        (held, _), = seen["ranked"]
        totals.append(sum(size for _, size in held))
    assert totals[1] < totals[0] + 4096  # a few bytes of larger integers at most


# ------------------------------------------------------------------ files and errors


@pytest.mark.filterwarnings("ignore:.*the AUC is mostly noise")
def test_spill_files_are_removed_when_the_run_fails(engine, tmp_path):
    # Nine samples: the Laplace release is refused after the ranking (its law needs every
    # client's scale), when the batches' ranks are on disk.
    parts = generated_partitions(distinct_scores, [4, 5], seed=1)
    with pytest.raises(EngineError, match="a few clients' Laplace noise dominates"):
        DaskEngine(engine.client, spill_dir=tmp_path).run(
            make("fedauc-laplace", auc_kernel(), epsilon=1.0), parts, rng=1)
    assert list(tmp_path.iterdir()) == []


def test_spill_dir_is_checked(engine, tmp_path):
    with pytest.raises(ValueError, match="spill_dir must be an existing directory"):
        DaskEngine(engine.client, spill_dir=tmp_path / "missing")
    with pytest.raises(EngineError, match=r"spill directory .* does not exist on this "
                                          r"worker: give DaskEngine\(spill_dir=\.\.\.\)"):
        driver._spill_save(str(tmp_path / "gone" / "ranks-0.npy"), np.arange(3))

