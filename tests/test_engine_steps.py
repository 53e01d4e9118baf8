"""Distributed server steps on the engine beyond ldp-quantized and fedauc-rr.

For each protocol whose server work the engine splits (ldp-tree's per-level Hadamard
sums, ...), a run on a small local Dask cluster must release what the in-process
simulator releases for the same seed and the same batches
(``simulate(..., batch_size=[partition sizes])``).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (comes with distributed)

from fedustat.protocols.local.auc_tree import LevelEstimates, _signed_sums  # noqa: E402
from fedustat.protocols.registry import make  # noqa: E402
from fedustat.runtime.engine import (  # noqa: E402
    DaskEngine,
    generated_partitions,
    load_all,
)
from fedustat.runtime.simulate import simulate  # noqa: E402
from fedustat.stats.kernels import auc_kernel  # noqa: E402

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
    "budget-advanced": ({"d": 16, "split": "budget-advanced", "delta": 1e-6},
                        integer_scores(16)),
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
    protocol = make("ldp-tree", auc_kernel(), epsilon=1.0, d=8, split="budget-basic")
    from fedustat.protocols.base import Message, Role
    fields = {"label": np.array([0, 1]), "bit": np.zeros((2, 3), np.uint8),
              "j1": np.array([0, 1]), "j2": np.array([0, 4]), "j3": np.array([0, 7])}
    msg = Message(Role.PARTY, Role.SERVER, fields, dict.fromkeys(fields, 1), np.arange(2))
    with pytest.raises(ValueError, match=r"j has values outside the input domain \{0, \.\.\., 3\}"):
        protocol.summarize_batch(msg, None)
