"""Kendall's tau p-value: accurate far in its tails and valid under independence.

Validity (``P(p <= a) <= a`` under H0) is checked by Monte Carlo with tolerances from the
number of runs. Since the p-value decreases in ``|t|``, ``P(p <= a) = P(|t| >= t_a)`` with
``t_a`` the release at which the p-value crosses ``a``: many null releases are then counted
against ``t_a`` directly, and some runs also go through ``fedustat.kendalltau``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import integrate, optimize
from scipy import stats as sps

import fedustat
from fedustat.kendall import _kendall_null_tail, kendall_tau_pvalue
from fedustat.privacy.errors import (
    BoundedBias,
    DiscreteLaplaceError,
    LaplaceError,
    NormalError,
    ScaledError,
    SumOfErrors,
    normal_laplace_upper_tail,
    upper_tail,
)
from fedustat.privacy.guarantee import PrivacyGuarantee
from fedustat.protocols.base import Estimate
from fedustat.secure.noise import PolyaDifferenceError

LEVELS = (0.05, 0.01, 0.001)


def _tolerance(level: float, runs: int) -> float:
    """3-sigma binomial band of a rejection rate estimated from ``runs`` runs."""
    return 3.0 * math.sqrt(level * (1.0 - level) / runs)


def _inversion_counts(n: int) -> list[int]:
    """Exact Mahonian numbers by integer polynomial products (an independent reference)."""
    counts = [1]
    for m in range(2, n + 1):
        out = [0] * (len(counts) + m - 1)
        for i, c in enumerate(counts):
            for j in range(m):
                out[i + j] += c
        counts = out
    return counts


def _release(value: float, error) -> Estimate:
    return Estimate(value, "kendall_tau_a", "central-laplace", PrivacyGuarantee(1.0),
                    std_error=error.std, error=error)


def _null_taus(n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """tau-a of independent continuous x, y: a uniform permutation's inversion count is a
    sum of independent uniforms on {0, .., m-1}, m = 1..n (its Lehmer code)."""
    inversions = np.zeros(draws)
    for m in range(2, n + 1):
        inversions += rng.integers(0, m, draws)
    return 1.0 - 4.0 * inversions / (n * (n - 1))


def _crossing(n: int, error, level: float) -> float:
    """The release ``t_a`` at which the two-sided p-value first reaches ``level``."""
    def pvalue(t: float) -> float:
        return min(1.0, 2.0 * float(_kendall_null_tail(np.array(t), n, error)))
    hi = 1.0 + 60.0 * (error.std if error is not None else 0.0)
    return float(optimize.brentq(lambda t: pvalue(t) - level, 0.0, hi, xtol=1e-10))


def test_issue_case_large_noise_small_n():
    # n = 20, epsilon = 0.1: Laplace(2) noise on a tau whose null sd is 0.17. At a release
    # of 8.6 the old integration printed 1.4e-10; the exact value is
    # 2 sum_k P(I = k) Lap-tail(8.6 - tau_k) (every 8.6 - tau_k > 0), here in exact integers.
    n, b, t = 20, 2.0, 8.6
    counts = _inversion_counts(n)
    total = math.factorial(n)
    pairs = n * (n - 1) // 2
    exact = 2.0 * sum(Fraction(c, total) * 0.5 * math.exp(-(t - (1 - 2 * k / pairs)) / b)
                      for k, c in enumerate(counts))
    got = kendall_tau_pvalue(_release(t, ScaledError(LaplaceError(b), 1.0)), n)
    assert got == pytest.approx(float(exact), rel=1e-10)
    assert got == pytest.approx(0.0136, abs=5e-4)


def test_issue_case_through_the_one_call_function():
    rng = np.random.default_rng(5)
    x, y = rng.lognormal(size=20), rng.lognormal(size=20)
    result = fedustat.kendalltau(x, y, epsilon=0.1, rng=3, variant="a")
    law = result.error
    t = abs(result.raw_value)
    # Independent reference: integrate over the normal-free exact law's atoms, term by term.
    counts = _inversion_counts(20)
    total = math.factorial(20)
    reference = 2.0 * sum(c / total * float(upper_tail(law, t - (1 - 2 * k / 190)))
                          for k, c in enumerate(counts))
    assert result.pvalue == pytest.approx(min(1.0, reference), rel=1e-9)


@pytest.mark.parametrize("n", [5, 10, 17, 25])
def test_noiseless_release_is_kendalls_exact_test(n):
    rng = np.random.default_rng(n)
    for _ in range(5):
        x, y = rng.permutation(n), rng.permutation(n)
        y[: n // 2] = np.sort(y[: n // 2])  # some strong associations too
        mine = fedustat.kendalltau(x, y, epsilon=math.inf)
        theirs = sps.kendalltau(x, y, method="exact")
        assert mine.pvalue == pytest.approx(theirs.pvalue, rel=1e-9, abs=1e-300)


def test_normal_laplace_tail_is_accurate_far_out():
    sigma, b = 0.17, 2.0
    for x in (0.0, 0.3, 1.0, 5.0, 20.0, -1.0):
        reference, _ = integrate.quad(
            lambda u, x=x: sps.norm.pdf(u, scale=sigma) * float(upper_tail(LaplaceError(b),
                                                                           x - u)),
            -14 * sigma, 14 * sigma, points=[x] if abs(x) < 14 * sigma else None,
            epsabs=0.0, epsrel=1e-12, limit=400)
        assert float(normal_laplace_upper_tail(x, sigma, b)) == pytest.approx(reference,
                                                                             rel=1e-9)
    # Far in the tail the Laplace part dominates: P ~ exp(sigma^2 / (2 b^2) - x / b) / 2.
    far = float(normal_laplace_upper_tail(200.0, sigma, b))
    assert far == pytest.approx(0.5 * math.exp(sigma**2 / (2 * b * b) - 100.0), rel=1e-9)
    # Narrow Laplace, wide normal: the normal tail dominates and the result stays finite.
    assert float(normal_laplace_upper_tail(30.0, 1.0, 0.01)) == pytest.approx(
        sps.norm.sf(30.0), rel=1e-3)


def test_upper_tail_matches_each_law_cdf():
    laws = [NormalError(0.3), LaplaceError(0.5), DiscreteLaplaceError(3.0, 0.1),
            ScaledError(LaplaceError(1.0), 2.0), SumOfErrors((NormalError(0.3), LaplaceError(0.5)))]
    xs = np.array([-2.0, -0.31, 0.0, 0.05, 0.3, 1.7, 4.0])
    for law in laws:
        got = upper_tail(law, xs)
        want = np.array([law.cdf(-v) for v in xs])  # P(Z >= x) = P(Z <= -x) by symmetry
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-12, err_msg=str(law))
    # An unknown bias |d| <= 0.2: the worst case for an upper tail, at every x.
    biased = upper_tail(BoundedBias(LaplaceError(1.0), 0.2), xs)
    np.testing.assert_allclose(biased, upper_tail(LaplaceError(1.0), xs - 0.2), rtol=1e-12)


# (n, epsilon): small n with large noise (the issue's case), small n with small noise
# (where tau's exact discrete law matters), and n above the exact-law range.
SETTINGS = [(10, 0.1), (20, 0.1), (20, 0.5), (30, 0.5), (12, 8.0), (20, 20.0), (400, 1.0),
            (400, 50.0)]


@pytest.mark.parametrize(("n", "epsilon"), SETTINGS)
def test_size_under_independence(n, epsilon):
    rng = np.random.default_rng(1000 + n)
    scale = 4.0 / (n * epsilon)  # central-laplace: tau-a's sensitivity 4/n (checked below)
    error = ScaledError(LaplaceError(scale), 1.0)
    draws = 200_000
    released = np.abs(_null_taus(n, draws, rng) + rng.laplace(0.0, scale, draws))
    for level in LEVELS:
        rate = float(np.mean(released >= _crossing(n, error, level)))
        assert rate <= level + _tolerance(level, draws), (n, epsilon, level, rate)
    # Not conservative beyond reason where the law is exact (small n): the 5% test rejects
    # at least 3.5% of the time.
    if n <= 30:
        assert float(np.mean(released >= _crossing(n, error, 0.05))) > 0.035


def test_laplace_scale_is_the_one_the_release_carries():
    result = fedustat.kendalltau(np.arange(20.0), np.arange(20.0)[::-1], epsilon=0.1, rng=1,
                                variant="a")
    assert result.error.std == pytest.approx(math.sqrt(2.0) * 4.0 / (20 * 0.1))


@pytest.mark.parametrize("error", [
    SumOfErrors((LaplaceError(0.5), LaplaceError(0.3))),      # no closed form: Gil-Pelaez
    DiscreteLaplaceError(4.0, 0.05),                            # a lattice law
    SumOfErrors((NormalError(0.05), LaplaceError(0.4))),        # normal-Laplace closed form
    SumOfErrors((NormalError(0.05), PolyaDifferenceError(3.0, 0.9, 0.05))),  # umpc's law
], ids=["laplace+laplace", "discrete-laplace", "normal+laplace", "normal+polya"])
def test_size_for_other_error_laws(error):
    n, draws = 15, 100_000
    rng = np.random.default_rng(7)
    if isinstance(error, DiscreteLaplaceError):
        t = math.exp(-1.0 / error.scale)
        noise = error.unit * (rng.geometric(1 - t, draws) - rng.geometric(1 - t, draws))
    else:
        noise = np.zeros(draws)
        for part in error.parts:
            if isinstance(part, PolyaDifferenceError):
                noise += part.unit * (rng.negative_binomial(part.total_shape, 1 - part.t, draws)
                                      - rng.negative_binomial(part.total_shape, 1 - part.t,
                                                              draws))
            elif isinstance(part, LaplaceError):
                noise += rng.laplace(0.0, part.scale, draws)
            else:
                noise += rng.normal(0.0, part.sigma, draws)
    released = np.abs(_null_taus(n, draws, rng) + noise)
    for level in LEVELS:
        rate = float(np.mean(released >= _crossing(n, error, level)))
        assert rate <= level + _tolerance(level, draws), (str(error), level, rate)
    assert float(np.mean(released >= _crossing(n, error, 0.05))) > 0.035


@pytest.mark.parametrize("kind", ["lognormal", "tied"])
def test_size_through_the_one_call_function(kind):
    # Independent skewed or heavily tied x and y; every run is a full release.
    rng = np.random.default_rng(11)
    runs, n = 3000, 20

    def sample() -> np.ndarray:
        if kind == "tied":
            return np.minimum(np.floor(rng.exponential(2.0, n)), 11.0)
        return rng.lognormal(0.0, 1.0, n)

    for epsilon in (0.1, 5.0):
        pvalues = np.array([fedustat.kendalltau(sample(), sample(), epsilon=epsilon,
                                                variant="a", rng=seed).pvalue
                            for seed in range(runs)])
        for level in LEVELS:
            rate = float(np.mean(pvalues <= level))
            assert rate <= level + _tolerance(level, runs), (kind, epsilon, level, rate)


def test_tau_b_uses_the_tie_corrected_test():
    # Binary x and y: |tau-b| > |tau-a|, so tau-a's no-tie law would reject far too often
    # (18% at the 5% level before); SciPy's tie-corrected test is used instead.
    rng = np.random.default_rng(2)
    runs = 2000
    pvalues = []
    for _ in range(runs):
        x, y = rng.integers(0, 2, 30).astype(float), rng.integers(0, 2, 30).astype(float)
        result = fedustat.kendalltau(x, y, epsilon=math.inf, variant="b")
        assert result.pvalue == pytest.approx(sps.kendalltau(x, y).pvalue, nan_ok=True)
        pvalues.append(result.pvalue)
    rate = float(np.mean(np.nan_to_num(pvalues, nan=1.0) <= 0.05))
    assert rate <= 0.05 + _tolerance(0.05, runs)


def test_release_without_error_bar_has_no_pvalue():
    private = Estimate(0.3, "kendall_tau_a", "x", PrivacyGuarantee(1.0), noise="simulation")
    assert math.isnan(kendall_tau_pvalue(private, 20))
