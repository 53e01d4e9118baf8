"""ldp-tree's full recursion: unbiased for the AUC of the records, with an interval from its
exact variance (issue 24 item 4). Monte Carlo tolerances come from the number of runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coverage_check import Coverage, Z, assert_covers
from fedustat.privacy.frequency_oracles import SubsetSelection
from fedustat.protocols import registry
from fedustat.protocols.local import auc_tree as tree
from fedustat.protocols.local.hierarchical import (
    HierarchicalHistogram,
    LevelNoise,
    full_uauc,
    pruned_uauc,
    uauc_exact,
)
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, roc_auc

KERNEL = auc_kernel()


@settings(max_examples=40, deadline=None)
@given(alpha=st.integers(1, 7), n=st.integers(2, 80), seed=st.integers(0, 2**32 - 1))
def test_full_recursion_on_exact_counts_is_the_exact_uauc(alpha: int, n: int,
                                                          seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = 1 << alpha
    scores = rng.integers(0, d, n)
    labels = rng.integers(0, 2, n)
    labels[:2] = [0, 1]
    pos, neg = scores[labels == 1], scores[labels == 0]
    hist = [HierarchicalHistogram(x, d) for x in (pos, neg)]
    levels = [[h.level_counts(level).astype(float) for level in range(1, alpha + 1)]
              for h in hist]
    # Exact counts are an oracle with m1 = 1, m0 = 0 (no noise): variance 0.
    exact_counts = [LevelNoise(1.0, 0.0)] * alpha
    rec = full_uauc(levels[0], levels[1], n_pos=pos.size, n_neg=neg.size,
                    noise_pos=exact_counts, noise_neg=exact_counts, one_level_per_party=False)
    assert rec.uauc == uauc_exact(pos, neg, d)
    assert rec.uauc / (pos.size * neg.size) == pytest.approx(roc_auc(scores, labels))
    assert rec.variance == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("d,epsilon,k", [(8, 1.0, 3), (16, 4.0, 6), (4, 0.5, 1), (2, 2.0, 1)])
def test_subset_selection_cross_moments_add_up(d: int, epsilon: float, k: int) -> None:
    # A report holds exactly k values, so sum_q R_q is a constant whose mean is 1: its
    # second moment, m1 + (d-1) m0 + 2 (d-1) c1 + (d-1)(d-2) c0, is exactly 1.
    noise = tree.level_noise(SubsetSelection(d, epsilon, k))
    total = noise.m1 + (d - 1) * noise.m0 + 2 * (d - 1) * noise.c1 \
        + (d - 1) * (d - 2) * noise.c0
    assert total == pytest.approx(1.0, rel=1e-9)


def _skewed_tied(n: int, d: int, seed: int) -> tuple[np.ndarray, float]:
    """Skewed integer scores with many ties; positives shifted up."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.3).astype(np.int64)
    scores = np.minimum(np.floor(rng.exponential(d / 6, n) + labels * rng.integers(0, d // 4, n)),
                        d - 1)
    return KERNEL.pack(scores, labels), roc_auc(scores, labels)


def _overlapping(n: int, d: int, seed: int) -> tuple[np.ndarray, float]:
    """Two overlapping rounded normals in the middle of the domain: the pruned recursion
    discards nodes holding both classes there (bias about -0.065 at eps 0.5)."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.5).astype(np.int64)
    scores = np.clip(np.round(8.0 * rng.normal(size=n) + 8.0 * labels + d / 2), 0, d - 1)
    return KERNEL.pack(scores, labels), roc_auc(scores, labels)


@pytest.mark.parametrize("params,make,n,runs", [
    # The default: users split, per-level oracle (subset selection on the small levels).
    ({"epsilon": 1.0, "d": 32}, _skewed_tied, 3000, 300),
    ({"epsilon": 4.0, "d": 16}, _skewed_tied, 3000, 300),
    # Where the pruned recursion (the default before) is biased: its mean error is
    # about -5 standard errors over these runs.
    ({"epsilon": 0.5, "d": 64}, _overlapping, 2000, 400),
    # Every party at every level (independent levels), the one-bit Hadamard response.
    ({"epsilon": 2.0, "d": 16, "split": "budget-basic", "oracle": "hadamard",
      "recursion": "full"}, _skewed_tied, 3000, 200),
], ids=["users-eps1", "users-eps4", "overlapping-eps0.5", "budget-hadamard"])
def test_unbiased_with_calibrated_interval(params: dict, make, n: int, runs: int) -> None:
    data, exact = make(n, params["d"], seed=1)
    proto = registry.make("ldp-tree", KERNEL, **params)
    values, ses, covered = [], [], 0
    for r in range(runs):
        est = simulate(proto, data, rng=r)
        assert est.diagnostics["recursion"] == "full"
        values.append(est.raw_value)  # the unbiased estimator, before the clip into [0, 1]
        ses.append(est.std_error)
        low, high = est.confidence_interval(0.95)
        covered += int(low <= exact <= high)
    arr = np.asarray(values)
    sd = arr.std(ddof=1)
    # Unbiased: the mean error within Z standard errors of the mean.
    assert abs(arr.mean() - exact) <= Z * sd / math.sqrt(runs)
    # The standard error is the spread: a sample sd from R runs has relative sd about
    # 1/sqrt(2(R-1)) (normal errors), so the ratio is 1 within Z of those.
    assert abs(np.mean(ses) / sd - 1.0) <= Z / math.sqrt(2 * (runs - 1))
    # Calibrated, not loose: within Z binomial standard deviations of 95% both ways.
    assert_covers(Coverage(covered, runs, 0.95), exact_interval=True)


def test_recursion_choice_and_bad_values() -> None:
    assert tree.LdpAucTree(KERNEL, 1.0, d=64).recursion == "full"
    assert tree.LdpAucTree(KERNEL, 1.0, d=1 << 13).recursion == "pruned"
    assert tree.LdpAucTree(KERNEL, 1.0, d=64, a=2.0).recursion == "pruned"
    assert tree.LdpAucTree(KERNEL, 1.0, d=64, oracle="hadamard").recursion == "pruned"
    assert tree.LdpAucTree(KERNEL, 1.0, d=64, oracle="hadamard",
                           recursion="full").recursion == "full"
    with pytest.raises(ValueError, match="recursion must be one of 'auto', 'full', 'pruned'"):
        tree.LdpAucTree(KERNEL, 1.0, d=64, recursion="partial")
    with pytest.raises(ValueError, match="a is the pruning parameter of recursion='pruned'"):
        tree.LdpAucTree(KERNEL, 1.0, d=64, a=2.0, recursion="full")


def test_pruned_plug_in_variance_is_not_inflated_by_empty_nodes() -> None:
    # With a = 0 the pruned recursion recurses on every node, so its plug-in variance must
    # be unbiased for the spread of its estimate. Node estimates: exact counts plus
    # independent normal noise of variance v (as the budget split's nodes). Most nodes
    # are empty; clipping each node's h^2 - v at 0 inflated the estimate there.
    rng = np.random.default_rng(21)
    alpha, v = 5, 1e4
    pos = np.repeat([3, 4, 20], [30, 20, 10])
    neg = np.repeat([2, 3, 19], [25, 25, 20])
    hist = [HierarchicalHistogram(x, 1 << alpha) for x in (pos, neg)]
    exact = uauc_exact(pos, neg, 1 << alpha)
    runs = 2000
    values, variances = [], []
    for _ in range(runs):
        noisy = [{level: h.level_counts(level) + rng.normal(0.0, math.sqrt(v), 1 << level)
                  for level in range(1, alpha + 1)} for h in hist]

        def estimator(which: dict):
            return lambda depth, nodes: which[depth][nodes]

        rec = pruned_uauc(estimator(noisy[0]), estimator(noisy[1]), alpha=alpha,
                          n_pos=pos.size, n_neg=neg.size, v_pos=v, v_neg=v, a=0.0)
        assert sum(rec.discarded) == 0
        values.append(rec.uauc)
        variances.append(rec.variance)
    spread = np.var(values, ddof=1)
    assert abs(np.mean(values) - exact) <= Z * math.sqrt(spread / runs)
    # A sample variance from R runs has relative sd about sqrt(2/(R-1)) (normal errors).
    assert abs(np.mean(variances) / spread - 1.0) <= Z * math.sqrt(2.0 / (runs - 1))
