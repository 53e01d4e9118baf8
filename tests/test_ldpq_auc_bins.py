"""The default number of bins of ``ldp-quantized`` for the AUC of continuous scores
(issue 24, item 4): the quantization gap negligible against the noise, so the interval
covers the records' exact AUC; bias and coverage by Monte Carlo with tolerances from the
number of runs (coverage_check)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedustat
from coverage_check import assert_covers, measure_coverage
from fedustat.protocols.local.quantization import AUC_BINS_FACTOR, auc_bins, corollary1_k


@pytest.mark.parametrize("n", [2, 500, 4000, 10**6, 10**9])
@pytest.mark.parametrize("eps", [0.1, 0.25, 1.0, 4.0, 30.0, 1000.0])
def test_auc_bins_is_the_smallest_k_of_its_rule(n: int, eps: float) -> None:
    k = auc_bins(n, eps)
    gain = math.expm1(min(eps, 700.0))

    def enough(bins: int) -> bool:
        return bins * bins * (bins / gain + 1.0) >= AUC_BINS_FACTOR * math.sqrt(n)

    assert k >= corollary1_k(n, eps)
    assert enough(k)
    assert k == 2 or not enough(k - 1) or k == corollary1_k(n, eps)


def test_auc_bins_refuses_a_bad_epsilon() -> None:
    with pytest.raises(ValueError, match="epsilon must be finite and > 0"):
        auc_bins(100, 0.0)


def _log_scores(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    # Log of lognormal scores, positives shifted by 0.8 (the AUC is rank-invariant).
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.3).astype(np.int64)
    return np.clip(rng.normal(0.0, 1.0, n) + 0.8 * labels, -3.0, 4.0), labels


def test_default_k_for_the_auc_follows_the_auc_rule() -> None:
    scores, labels = _log_scores(4000, 1)
    est = fedustat.roc_auc_score(labels, scores, epsilon=1.0, protocol="ldp-quantized",
                                 bounds=(-3, 4), rng=0)
    assert est.diagnostics["k"] == auc_bins(4000, 1.0) == 16
    assert est.diagnostics["k_rule"].startswith("AUC rule")
    # A declared Lipschitz constant asks for Corollary 1; a given k is used as it is.
    cor = fedustat.roc_auc_score(labels, scores, epsilon=1.0, protocol="ldp-quantized",
                                 bounds=(-3, 4), lipschitz=1.0, rng=0)
    assert cor.diagnostics["k"] == corollary1_k(4000, 1.0) == 8
    given = fedustat.roc_auc_score(labels, scores, epsilon=1.0, protocol="ldp-quantized",
                                   bounds=(-3, 4), k=5, rng=0)
    assert given.diagnostics["k"] == 5 and given.diagnostics["k_rule"] == "given"


def _heavy_tailed_scores(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    # log of Pareto(1.5) scores: exponential, positives shifted by 0.8 (a density jump
    # inside the range), in the law's 0.1% / 99.9% bounds (0, 5).
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.3).astype(np.int64)
    return np.clip(rng.exponential(1 / 1.5, n) + 0.8 * labels, 0.0, 5.0), labels


@pytest.mark.parametrize("make_data, bounds, eps, lipschitz", [
    (_heavy_tailed_scores, (0.0, 5.0), 4.0, None),
    (_log_scores, (-3.0, 4.0), 0.25, None),
    # Corollary 1's k (asked for through lipschitz=1) leaves a gap of about the noise's
    # standard deviation here: the same check fails.
    pytest.param(_heavy_tailed_scores, (0.0, 5.0), 4.0, 1.0,
                 marks=pytest.mark.xfail(strict=True, reason="Corollary 1's k: biased")),
])
def test_interval_covers_the_exact_auc_of_continuous_scores(make_data, bounds, eps,
                                                            lipschitz) -> None:
    """Bias |z| < 4 and 95% coverage within 4 binomial s.d. against the records' own
    AUC (not the AUC of the quantized scores) with the default k."""
    scores, labels = make_data(4000, 3)
    exact = fedustat.roc_auc_score(labels, scores, epsilon=math.inf).value
    raw = []

    def release(seed: int) -> fedustat.Estimate:
        est = fedustat.roc_auc_score(labels, scores, epsilon=eps, protocol="ldp-quantized",
                                     bounds=bounds, lipschitz=lipschitz, rng=seed)
        raw.append(est.raw_value)
        return est

    coverage = measure_coverage(release, exact, runs=150)
    values = np.asarray(raw)
    z = (values.mean() - exact) / (values.std(ddof=1) / math.sqrt(values.size))
    assert abs(z) < 4.0, f"bias z = {z:.2f}"
    assert_covers(coverage, exact_interval=True)
