"""The private Hosmer-Lemeshow test's p-value is valid under the DP noise (issue 24, item 1).

Size is checked by Monte Carlo: over R runs of a calibrated model the number of p-values
below alpha is Binomial(R, s); a valid test has s <= alpha, so the test fails when the share
exceeds alpha by more than Z = 4 binomial standard deviations (a valid test fails with
probability below 4e-5; tests/coverage_check.py uses the same Z).
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

import fedustat
from coverage_check import Z

hl_module = importlib.import_module("fedustat.protocols.ecdf.hosmer_lemeshow")

# Fewer bootstrap draws keep the Monte Carlo fast; (1 + k) / (1 + B) is valid for any B.
FAST_DRAWS = 499


def _calibrated(kind: str, n: int, rng: np.random.Generator, miscalibrated: bool = False
                ) -> tuple[np.ndarray, np.ndarray]:
    """Predictions (uniform on [0.05, 0.95], skewed Beta(0.5, 3), or tied: rounded to 0.05)
    and labels Bernoulli(p), or Bernoulli(p^3) for the miscalibrated model."""
    if kind == "uniform":
        prob = rng.uniform(0.05, 0.95, n)
    elif kind == "skewed":
        prob = rng.beta(0.5, 3.0, n)
    else:
        prob = np.round(rng.uniform(0.05, 0.95, n) / 0.05) * 0.05
    truth = prob**3 if miscalibrated else prob
    return (rng.random(n) < truth).astype(int), prob


def _pvalues(kind: str, n: int, epsilon: float, runs: int, seed: int,
             miscalibrated: bool = False) -> np.ndarray:
    out = np.empty(runs)
    for r in range(runs):
        y, p = _calibrated(kind, n, np.random.default_rng([seed, r]), miscalibrated)
        seeded = np.random.default_rng([seed, r, 1])
        out[r] = fedustat.hosmer_lemeshow(y, p, epsilon=epsilon, rng=seeded).pvalue
    return out


@pytest.mark.parametrize(("kind", "n", "epsilon"), [("uniform", 400, 1.0),
                                                    ("skewed", 400, 4.0),
                                                    ("tied", 600, 0.5)])
def test_private_hl_size_is_at_most_nominal(monkeypatch, kind, n, epsilon):
    """Under calibration, P(p < alpha) <= alpha at alpha 0.05 and 0.01 (the chi-square
    p-value of the noisy statistic rejected 40 of 40 calibrated runs at n = 2000, eps 1)."""
    monkeypatch.setattr(hl_module, "HL_BOOTSTRAP_DRAWS", FAST_DRAWS)
    runs = 500
    pvalues = _pvalues(kind, n, epsilon, runs, seed=11)
    for alpha in (0.05, 0.01):
        share = float(np.mean(pvalues < alpha))
        tolerance = Z * math.sqrt(alpha * (1.0 - alpha) / runs)
        assert share <= alpha + tolerance, (kind, n, epsilon, alpha, share, tolerance)
    # p-values on the bootstrap's lattice (1 + k) / (1 + B), never 0.
    assert np.all(pvalues >= 1.0 / (FAST_DRAWS + 1)) and np.all(pvalues <= 1.0)


def test_private_hl_has_power_against_a_miscalibrated_model(monkeypatch):
    """Labels Bernoulli(p^3) while the model predicts p: at n = 2000, eps = 1 the test
    rejects in almost every run (measured 200 of 200 at alpha 0.05; the floored Alg. 2
    statistic with the same bootstrap: 84%); at least 34 of 40 here."""
    monkeypatch.setattr(hl_module, "HL_BOOTSTRAP_DRAWS", FAST_DRAWS)
    pvalues = _pvalues("uniform", 2000, 1.0, 40, seed=12, miscalibrated=True)
    assert np.count_nonzero(pvalues < 0.05) >= 34


def test_the_issue_case_no_longer_rejects_a_calibrated_model():
    """The issue's reproduction: n = 2000, uniform predictions, eps = 1, 40 runs; with the
    default number of bootstrap draws. Rejections ~ Binomial(40, <= 0.05): 10 or more has
    probability below 1e-4 for a valid test."""
    pvalues = _pvalues("uniform", 2000, 1.0, 40, seed=13)
    assert np.count_nonzero(pvalues < 0.05) < 10


def test_noise_aware_statistic_without_noise_is_hosmer_lemeshow():
    """With noise scale 0 the statistic is 003 Eq. 5's H on the same table."""
    rng = np.random.default_rng(3)
    y, p = _calibrated("skewed", 3000, rng)
    cuts = np.quantile(p, np.arange(1, 10) / 10)
    table = hl_module.hosmer_lemeshow(y, p, cuts)
    value = hl_module.noise_aware_statistic(table.observed, table.expected, 0.0)
    assert float(value) == pytest.approx(table.statistic, rel=1e-12)


def test_bootstrap_pvalue_is_reproducible_and_post_processing():
    """Same seed, same p-value; the p-value is a function of the released table and the
    bootstrap generator only (recomputed from them, it is the same)."""
    y, p = _calibrated("uniform", 1000, np.random.default_rng(4))
    res = fedustat.hosmer_lemeshow(y, p, epsilon=2.0, rng=5)
    again = fedustat.hosmer_lemeshow(y, p, epsilon=2.0, rng=5)
    assert res.pvalue == again.pvalue and res.statistic == again.statistic
    release = res.release
    assert release.statistic.diagnostics["bootstrap_draws"] == hl_module.HL_BOOTSTRAP_DRAWS
    stat_a, p_a = hl_module.bootstrap_pvalue(release.observed, release.expected,
                                             1.0 / release.epsilon_prime,
                                             np.random.default_rng(6), 999)
    assert stat_a == pytest.approx(res.statistic, rel=1e-12)
    stat_b, p_b = hl_module.bootstrap_pvalue(release.observed, release.expected,
                                             1.0 / release.epsilon_prime,
                                             np.random.default_rng(6), 999)
    assert (stat_a, p_a) == (stat_b, p_b)
    # The Monte Carlo error of the p-value is small: 999 draws vs the default.
    assert abs(p_a - res.pvalue) < 4 * math.sqrt(0.25 / 999)


def test_exact_test_is_unchanged():
    """epsilon = inf: 003 Eq. 5's H with its chi-square p-value on Q - 2 degrees of freedom."""
    import scipy.stats

    y, p = _calibrated("uniform", 1000, np.random.default_rng(7))
    res = fedustat.hosmer_lemeshow(y, p, epsilon=math.inf)
    table = hl_module.hosmer_lemeshow(y, p, res.cuts)
    assert res.statistic == pytest.approx(table.statistic, rel=1e-12)
    assert res.pvalue == pytest.approx(scipy.stats.chi2.sf(table.statistic, 8), rel=1e-12)
    assert "bootstrap_draws" not in res.release.statistic.diagnostics


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"noise_scale": 0.0}, ValueError, r"^noise_scale must be a finite number > 0, got 0.0$"),
    ({"draws": 0}, ValueError, r"^draws must be >= 1, got 0$"),
    ({"draws": 9.5}, TypeError, r"^draws must be an integer, got 9.5$"),
    ({"observed": np.zeros((3, 4))}, ValueError,
     r"^observed and expected must be released tables of shape \(2, Q\)"),
    ({"expected": np.full((2, 4), np.nan)}, ValueError,
     r"^observed and expected must be finite"),
])
def test_bootstrap_pvalue_refuses_bad_arguments_by_name(kwargs, error, match):
    args = {"observed": np.ones((2, 4)), "expected": np.ones((2, 4)), "noise_scale": 1.0,
            "gen": np.random.default_rng(0), "draws": 99} | kwargs
    with pytest.raises(error, match=match):
        hl_module.bootstrap_pvalue(**args)
