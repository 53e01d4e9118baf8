"""Error laws of releases (``fedustat.privacy.errors``) and the intervals built from them.

Monte Carlo checks draw R = 400,000 seeded samples: an empirical probability p_hat has
standard deviation sqrt(p (1 - p) / R) <= 7.9e-4, so a tolerance of 5e-3 is more than six
standard deviations.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedustat.privacy.errors import (
    DiscreteLaplaceError,
    LaplaceError,
    NormalError,
    ScaledError,
    SumOfErrors,
    error_sum,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.protocols.base import Estimate

R = 400_000
TOL = 5e-3


def _dlap(rng: np.random.Generator, scale: float, size: int) -> np.ndarray:
    p = -math.expm1(-1.0 / scale)
    return (rng.geometric(p, size) - rng.geometric(p, size)).astype(float)


def test_laplace_interval_is_exact() -> None:
    law = LaplaceError(2.0)
    assert law.half_width(0.95) == pytest.approx(2.0 * math.log(20.0), rel=1e-15)
    assert law.variance == 8.0
    z = np.random.default_rng(0).laplace(0.0, 2.0, R)
    for level in (0.5, 0.9, 0.95, 0.99):
        assert np.mean(np.abs(z) <= law.half_width(level)) == pytest.approx(level, abs=TOL)
    for x in (-3.0, 0.0, 1.0, 5.0):
        assert law.cdf(x) == pytest.approx(stats.laplace.cdf(x, scale=2.0), abs=1e-15)


def test_normal_interval_matches_scipy() -> None:
    law = NormalError(0.3)
    assert law.half_width(0.95) == pytest.approx(0.3 * stats.norm.ppf(0.975), rel=1e-15)
    assert law.characteristic(np.array([0.0, 1.0]))[1] == pytest.approx(math.exp(-0.045))


def test_discrete_laplace_law_and_lattice_interval() -> None:
    law = DiscreteLaplaceError(3.0, unit=0.5)
    z = 0.5 * _dlap(np.random.default_rng(1), 3.0, R)
    assert law.variance == pytest.approx(np.var(z), rel=0.02)
    half = law.half_width(0.95)
    assert half / 0.5 == int(half / 0.5)  # a lattice point
    covered = np.mean(np.abs(z) <= half + 1e-12)
    assert covered >= 0.95 - TOL
    # One lattice step less no longer covers: the interval is the smallest one.
    assert np.mean(np.abs(z) <= half - 0.5 + 1e-12) < 0.95 + TOL
    for x in (-1.0, -0.25, 0.0, 0.7, 2.0):
        assert law.cdf(x) == pytest.approx(np.mean(z <= x), abs=TOL)


def test_sum_by_characteristic_functions_matches_monte_carlo() -> None:
    rng = np.random.default_rng(2)
    law = LaplaceError(1.0) + NormalError(0.7)
    assert isinstance(law, SumOfErrors)
    z = rng.laplace(0.0, 1.0, R) + rng.normal(0.0, 0.7, R)
    for x in (0.3, 1.0, 2.5):
        assert law.cdf(x) == pytest.approx(np.mean(z <= x), abs=TOL)
    assert np.mean(np.abs(z) <= law.half_width(0.95)) == pytest.approx(0.95, abs=TOL)
    scales = [0.1, 0.2, 0.3, 0.5]
    many = error_sum([LaplaceError(b) for b in scales])
    z = sum(rng.laplace(0.0, b, R) for b in scales)
    assert np.mean(np.abs(z) <= many.half_width(0.9)) == pytest.approx(0.9, abs=TOL)
    mixed = DiscreteLaplaceError(2.0, 0.5) + NormalError(0.4)
    z = 0.5 * _dlap(rng, 2.0, R) + rng.normal(0.0, 0.4, R)
    assert np.mean(np.abs(z) <= mixed.half_width(0.95)) == pytest.approx(0.95, abs=TOL)


def test_sum_of_lattice_laws_uses_a_conservative_bound() -> None:
    law = DiscreteLaplaceError(3.0) + DiscreteLaplaceError(3.0)
    rng = np.random.default_rng(3)
    z = _dlap(rng, 3.0, R) + _dlap(rng, 3.0, R)
    assert np.mean(np.abs(z) <= law.half_width(0.95)) >= 0.95
    with pytest.raises(ValueError, match="union bound"):
        law.cdf(1.0)


def test_error_sum_simplifies_and_scaling_scales() -> None:
    assert error_sum([NormalError(3.0), NormalError(4.0)]) == NormalError(5.0)
    assert error_sum([LaplaceError(1.0), NormalError(0.0)]) == LaplaceError(1.0)
    assert error_sum([]).variance == 0.0
    scaled = ScaledError(LaplaceError(1.0), -2.0)
    assert scaled.half_width(0.95) == pytest.approx(2.0 * math.log(20.0))
    assert scaled.variance == pytest.approx(8.0)
    with pytest.raises(TypeError, match="ErrorDistribution"):
        error_sum([1.0])  # type: ignore[list-item]


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.1, float("nan"), True])
def test_bad_levels_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="confidence_level must be a number in"):
        LaplaceError(1.0).half_width(bad)


@pytest.mark.parametrize("bad", [-1.0, float("inf"), float("nan")])
def test_bad_scales_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="scale must be a finite number >= 0"):
        LaplaceError(bad)


def test_estimate_interval_uses_its_error_law() -> None:
    guarantee = PrivacyGuarantee(1.0, 0.0, PrivacyModel.CENTRAL)
    est = Estimate(0.5, "auc", "central-laplace", guarantee, error=LaplaceError(0.01))
    assert est.std_error == pytest.approx(0.01 * math.sqrt(2.0))
    low, high = est.confidence_interval(0.95)
    assert high - 0.5 == pytest.approx(0.01 * math.log(20.0))
    assert 0.5 - low == pytest.approx(0.01 * math.log(20.0))
    assert "Laplace" in est.interval_method
    normal = Estimate(0.5, "auc", "x", guarantee, std_error=0.01)
    assert normal.interval_method == "normal approximation"
    assert "simulation noise" in str(est)
    exact = Estimate(0.5, "auc", "exact", PrivacyGuarantee.none(), noise="simulation")
    assert exact.noise == "none" and "no noise" in str(exact)
    with pytest.raises(ValueError, match="noise must be one of"):
        Estimate(0.5, "auc", "x", guarantee, noise="secure")


# ------------------------------------------------------- bias bounds, CLT rule, the series


def test_bounded_bias_widens_by_its_bound_and_covers_the_worst_case() -> None:
    from fedustat.privacy.errors import BoundedBias

    law = BoundedBias(NormalError(1.0), 0.5)
    assert law.half_width(0.95) == pytest.approx(stats.norm.ppf(0.975) + 0.5)
    assert law.variance == pytest.approx(1.25)
    # The worst bias, +0.5: the interval still covers 95% (and more for any smaller bias).
    z = np.random.default_rng(4).normal(0.0, 1.0, R) + 0.5
    assert np.mean(np.abs(z) <= law.half_width(0.95)) >= 0.95 - TOL
    assert law.cdf(1.0) == pytest.approx(stats.norm.cdf(0.5))
    assert law.scaled(-2.0).half_width(0.9) == pytest.approx(2.0 * law.half_width(0.9))
    combined = error_sum([law, LaplaceError(1.0)])
    assert isinstance(combined, BoundedBias) and combined.bound == 0.5
    assert combined.half_width(0.95) == pytest.approx(
        error_sum([NormalError(1.0), LaplaceError(1.0)]).half_width(0.95) + 0.5)
    with pytest.raises(ValueError, match="bound must be a finite number >= 0"):
        BoundedBias(NormalError(1.0), -1.0)


def test_noise_sum_is_normal_only_without_a_dominant_term() -> None:
    from fedustat.privacy.errors import laplace_sum, noise_sum

    # Ten equal Laplace terms: each carries 10% of the variance (excess kurtosis 0.3).
    assert isinstance(laplace_sum([1.0] * 10), NormalError)
    assert laplace_sum([1.0] * 10).variance == pytest.approx(20.0)
    dominated = laplace_sum([5.0] + [1.0] * 10)
    assert isinstance(dominated, SumOfErrors)
    assert isinstance(noise_sum([LaplaceError(1.0), NormalError(0.1)]), SumOfErrors)
    assert noise_sum([NormalError(0.0)]).variance == 0.0
    assert laplace_sum([0.0, 0.0]).variance == 0.0
    with pytest.raises(ValueError, match="scales must be finite"):
        laplace_sum([1.0, math.inf])


def test_series_cdf_matches_adaptive_quadrature() -> None:
    from scipy import integrate

    law = error_sum([LaplaceError(3.0), LaplaceError(0.5), NormalError(0.2)])
    assert isinstance(law, SumOfErrors)

    def gil_pelaez(x: float) -> float:
        value, _ = integrate.quad(lambda w: math.sin(w * x) * float(
            law.characteristic(np.array(w))) / w, 0.0, np.inf, limit=2000)
        return 0.5 + value / math.pi

    for x in (0.1, 1.0, 4.0, 15.0):
        assert law.cdf(x) == pytest.approx(gil_pelaez(x), abs=1e-6)
        assert law.cdf(-x) == pytest.approx(1.0 - law.cdf(x), abs=1e-12)
