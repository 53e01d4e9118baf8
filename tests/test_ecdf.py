"""Exact ECDFs, grids, the dyadic tree, the tree-noise DP ECDF (003 Thm 1), continual
observation (003 Thm 3) and the inverse ECDF (003 Alg. 1)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate

from fedustat.privacy.noise import SimulationNoise
from fedustat.protocols.ecdf import (
    PrivateECDF,
    TreeNoise,
    apply_tree_noise,
    dp_ecdf,
    dp_prefix_sums,
    dp_quantile,
    draw_tree_noise,
    ecdf_noise_scale,
)
from fedustat.stats.ecdf import (
    DyadicTree,
    absolute_grid,
    ecdf,
    ecdf_counts,
    log_grid,
    tree_depth,
)

# --------------------------------------------------------------------- exact ECDF, grids


def test_ecdf_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, 500).astype(float)
    tau = np.linspace(-1.0, 21.0, 57)
    expected = scipy.stats.ecdf(x).cdf.evaluate(tau)
    np.testing.assert_allclose(ecdf(x, tau), expected, rtol=0, atol=1e-15)
    assert ecdf_counts(x, tau).dtype == np.int64


def test_absolute_grid_covers_public_range():
    tau = absolute_grid(0.13, 2.71, 0.25)
    np.testing.assert_allclose(np.diff(tau), 0.25)
    assert tau[0] >= 0.13 > tau[0] - 0.25  # the point below the grid is below the range
    assert tau[-1] >= 2.71 > tau[-2]
    np.testing.assert_allclose(tau / 0.25, np.round(tau / 0.25))


def test_log_grid_has_constant_ratio():
    tau = log_grid(1.0, 1000.0, 0.1)
    np.testing.assert_allclose(tau[1:] / tau[:-1], math.exp(0.1))
    assert tau[0] >= 1.0 - 1e-12 and tau[-1] >= 1000.0 > tau[-2]


@pytest.mark.parametrize(("call", "match"), [
    (lambda: absolute_grid(0.0, 1.0, 0.0), "gamma must be a finite number > 0"),
    (lambda: absolute_grid(1.0, 1.0, 0.1), "lower must be < upper"),
    (lambda: absolute_grid(0.0, 1.0, 1e-12), "increase gamma"),
    (lambda: log_grid(0.0, 1.0, 0.1), "lower must be > 0"),
    (lambda: log_grid(1.0, 2.0, -1.0), "nu must be a finite number > 0"),
    (lambda: ecdf([1.0, 2.0], [1.0, 0.5]), "strictly increasing"),
    (lambda: ecdf([1.0, np.nan], [1.0]), "values contains 1 NaN"),
])
def test_grid_and_ecdf_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------- dyadic tree


@pytest.mark.parametrize("n_points", [1, 2, 3, 5, 8, 13, 64, 100])
def test_tree_covers_each_point_once_per_level(n_points):
    tree = DyadicTree(n_points)
    assert tree.depth == tree_depth(n_points) == math.ceil(math.log2(n_points))
    a = tree.matrix().toarray()
    np.testing.assert_array_equal(a.sum(axis=1), tree.n_levels)
    level, start, stop = tree.node_bounds()
    for lev in range(tree.n_levels):  # the nodes of one level partition the grid
        cols = a[:, level == lev]
        np.testing.assert_array_equal(cols.sum(axis=1), 1)
    assert np.all(stop - start >= 1) and np.all(stop <= n_points)
    values = np.random.default_rng(1).normal(size=tree.n_nodes)
    np.testing.assert_allclose(tree.sum_at(values), a @ values, rtol=1e-13)


@pytest.mark.parametrize("n_points", [*range(1, 34), 64, 100])
def test_cover_witness_is_exact_and_small(n_points):
    """003 Lemma 1 / Thm 1 proof: every interval is a signed sum of <= L + 1 nodes."""
    tree = DyadicTree(n_points)
    a = tree.matrix().toarray()
    depth = tree.depth
    worst = 0
    for start in range(n_points):
        for stop in range(start + 1, n_points + 1):
            nodes, signs = tree.cover(start, stop)
            x = np.zeros(tree.n_nodes)
            np.add.at(x, nodes, signs)
            target = np.zeros(n_points)
            target[start:stop] = 1.0
            np.testing.assert_array_equal(a @ x, target)
            worst = max(worst, int(np.abs(x).sum()))
        # Add/remove adjacency or continual observation: a suffix needs ceil((L+1)/2).
        nodes, signs = tree.suffix_cover(start)
        x = np.zeros(tree.n_nodes)
        np.add.at(x, nodes, signs)
        target = np.zeros(n_points)
        target[start:] = 1.0
        np.testing.assert_array_equal(a @ x, target)
        assert np.abs(x).sum() <= -(-(depth + 1) // 2)
    assert worst <= max(2 * -(-depth // 2), -(-(depth + 1) // 2)) <= depth + 1


# ------------------------------------------------------------------- privacy (Thm 1)


def _adjacent_count_changes(domain: np.ndarray, data: np.ndarray, tau: np.ndarray):
    base = ecdf_counts(data, tau)
    for i in range(data.size):
        for new in domain:
            other = data.copy()
            other[i] = new
            yield base, ecdf_counts(other, tau)


@pytest.mark.parametrize("n_points", [1, 2, 5, 8, 11])
def test_coupling_bounds_density_ratio_for_every_replacement(n_points):
    """For every single-record replacement the count change is A x with ||x||_1 <= L + 1,
    so the Laplace((L+1)/eps) node densities at eta and eta + x differ by <= e^eps."""
    eps = 0.7
    tau = np.arange(n_points, dtype=float)
    domain = np.arange(-1.0, n_points + 1.0)  # below, on and above the grid
    data = np.array([0.0, 2.0, 2.0, float(n_points - 1), -1.0])
    tree = DyadicTree(n_points)
    a = tree.matrix().toarray()
    b = ecdf_noise_scale(n_points, eps)
    rng = np.random.default_rng(3)
    etas = rng.laplace(0.0, b, size=(200, tree.n_nodes))
    for base, other in _adjacent_count_changes(domain, data, tau):
        diff = other - base
        if not diff.any():
            continue
        changed = np.flatnonzero(diff)
        assert np.all(np.diff(changed) == 1) and len(set(np.sign(diff[changed]))) == 1
        nodes, signs = tree.cover(int(changed[0]), int(changed[-1]) + 1)
        x = np.zeros(tree.n_nodes)
        np.add.at(x, nodes, signs * np.sign(diff[changed[0]]))
        np.testing.assert_array_equal(a @ x, diff)
        # max over eta of log p(eta) - log p(eta + x) is exactly ||x||_1 / b.
        assert np.abs(x).sum() / b <= eps + 1e-12
        log_ratio = (np.abs(etas + x).sum(axis=1) - np.abs(etas).sum(axis=1)) / b
        assert log_ratio.max() <= eps + 1e-12


def _laplace_pdf(z, b):
    return np.exp(-np.abs(z) / b) / (2.0 * b)


def _density_two_points(y, c, b):
    """Exact density of (c_0 + e_0 + r, c_1 + e_1 + r): leaves e_0, e_1 and root r."""
    def integrand(r):
        return (_laplace_pdf(y[0] - c[0] - r, b) * _laplace_pdf(y[1] - c[1] - r, b)
                * _laplace_pdf(r, b))
    kinks = sorted({0.0, y[0] - c[0], y[1] - c[1]})
    pieces = [-np.inf, *kinks, np.inf]
    return sum(integrate.quad(integrand, lo, hi, epsabs=0, epsrel=1e-11)[0]
               for lo, hi in itertools.pairwise(pieces))


def test_output_density_ratio_two_point_grid():
    """Direct check of Def. 1 on N = 2: integrate out the root noise exactly and compare
    the densities of the released counts for adjacent data at many outputs."""
    eps = 1.0
    b = ecdf_noise_scale(2, eps)
    c = np.array([3.0, 5.0])
    worst = 0.0
    for change in ([1, 0], [0, 1], [1, 1], [-1, 0], [0, -1], [-1, -1]):
        c2 = c + np.array(change, dtype=float)
        for y0 in np.linspace(-6.0, 12.0, 10):
            for y1 in np.linspace(-6.0, 12.0, 10):
                y = (y0, y1)
                ratio = _density_two_points(y, c, b) / _density_two_points(y, c2, b)
                worst = max(worst, abs(math.log(ratio)))
    assert worst <= eps + 1e-7
    assert worst > 0.3 * eps  # the check is not vacuous


# ------------------------------------------------------- error and unbiasedness (Thm 1)


def test_thm1_error_and_unbiasedness_monte_carlo():
    """E (F_hat - F)^2 = 2 (L+1)^3 / (eps^2 n^2) per point, E F_hat = F (003 Thm 1).

    Tolerance: 5 standard errors from the exact variance. The per-point error is a sum
    S of m = L + 1 Laplace(b) variables: Var S^2 = 12 m b^4 + 8 m^2 b^4."""
    rng = np.random.default_rng(11)
    n, n_points, eps, reps = 400, 40, 0.8, 3000
    values = rng.normal(size=n)
    tau = np.linspace(-2.5, 2.5, n_points)
    exact = ecdf(values, tau)
    errors = np.empty((reps, n_points))
    gen = np.random.default_rng(12)
    for r in range(reps):
        errors[r] = dp_ecdf(values, tau, epsilon=eps, rng=gen, method="003-tree").values - exact
    m = tree_depth(n_points) + 1
    b = m / eps
    mse_theory = 2.0 * m**3 / (eps**2 * n**2)
    var_sq = (12 * m * b**4 + 8 * m**2 * b**4) / n**4
    point = 17
    assert abs(np.mean(errors[:, point] ** 2) - mse_theory) <= 5 * math.sqrt(var_sq / reps)
    se_mean = math.sqrt(mse_theory / reps)
    assert np.all(np.abs(errors.mean(axis=0)) <= 5 * se_mean)
    curve = dp_ecdf(values, tau, epsilon=eps, rng=0, method="003-tree")
    assert curve.variance == pytest.approx(mse_theory, rel=1e-12)


# ---------------------------------------------------------- noise separable from counts


def test_same_draw_added_to_any_counts():
    rng = np.random.default_rng(5)
    values = rng.normal(size=300)
    tau = np.linspace(-2, 2, 50)
    draw = draw_tree_noise(tau.size, ecdf_noise_scale(tau.size, 1.0), rng=9)
    curve = dp_ecdf(values, tau, epsilon=1.0, tree_noise=draw)
    counts = ecdf_counts(values, tau)
    np.testing.assert_allclose(curve.values, (counts + draw.at()) / values.size, rtol=1e-14)
    subset = np.array([3, 17, 18, 49])
    np.testing.assert_allclose(apply_tree_noise(counts[subset], draw, subset),
                               curve.counts[subset], rtol=1e-12)
    with pytest.raises(ValueError, match="scale"):
        dp_ecdf(values, tau, epsilon=2.0, tree_noise=draw)
    with pytest.raises(ValueError, match="for 4 points"):
        apply_tree_noise(counts[:5], draw, subset)


def test_seeded_reproducible_and_guarantee():
    values = np.arange(100.0)
    tau = np.arange(0.0, 100.0, 3.0)
    a = dp_ecdf(values, tau, epsilon=0.5, rng=42)
    b = dp_ecdf(values, tau, epsilon=0.5, noise=SimulationNoise(42))
    np.testing.assert_array_equal(a.values, b.values)
    assert a.privacy.epsilon == 0.5 and a.privacy.adjacency.startswith("replace one record")
    assert a.noise_kind == "simulation"
    exact = dp_ecdf(values, tau, epsilon=math.inf)
    np.testing.assert_array_equal(exact.values, ecdf(values, tau))
    assert exact.privacy.model.value == "none"
    assert isinstance(a, PrivateECDF)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"epsilon": 0.0}, "epsilon must be > 0"),
    ({"epsilon": 1.0, "rng": 1, "noise": SimulationNoise(1)}, "either rng or noise"),
    ({"epsilon": 1.0, "tree_noise": "x"}, "tree_noise must be a TreeNoise"),
])
def test_dp_ecdf_bad_inputs(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        dp_ecdf([1.0, 2.0], [1.0, 2.0], **kwargs)


# ------------------------------------------------------ continual observation (Thm 3)


def test_prefix_sums_error_laplace_and_gaussian():
    """Variance of each released sum: (L+1) node variances, with k = ceil((L+1)/2)."""
    stream = (np.arange(30) % 3 == 0).astype(float)
    depth = tree_depth(30)
    k = -(-(depth + 1) // 2)
    reps = 3000
    gen = np.random.default_rng(21)
    lap = np.array([dp_prefix_sums(stream, epsilon=0.5, rng=gen).values for _ in range(reps)])
    gau = np.array([dp_prefix_sums(stream, rho=0.5, delta=1e-6, rng=gen).values
                    for _ in range(reps)])
    exact = np.cumsum(stream)
    b = k / 0.5
    var_lap = (depth + 1) * 2 * b**2
    # Var of the squared error: Laplace sum as in Thm 1; Gaussian: 2 var^2.
    var_sq_lap = 12 * (depth + 1) * b**4 + 8 * (depth + 1) ** 2 * b**4
    err = lap[:, 7] - exact[7]
    assert abs(np.mean(err**2) - var_lap) <= 5 * math.sqrt(var_sq_lap / reps)
    var_gau = (depth + 1) * k / (2 * 0.5)
    err = gau[:, 7] - exact[7]
    assert abs(np.mean(err**2) - var_gau) <= 5 * math.sqrt(2 * var_gau**2 / reps)
    res = dp_prefix_sums(stream, rho=0.5, delta=1e-6, rng=0)
    assert res.variance == pytest.approx(var_gau)
    assert res.privacy.epsilon == pytest.approx(0.5 + 2 * math.sqrt(0.5 * math.log(1e6)))
    assert res.rho == 0.5 and res.privacy.delta == 1e-6


@pytest.mark.parametrize(("kwargs", "match"), [
    ({}, "exactly one of epsilon"),
    ({"epsilon": 1.0, "rho": 1.0}, "exactly one of epsilon"),
    ({"rho": 1.0}, "delta is required"),
    ({"epsilon": 1.0, "delta": 1e-5}, "Gaussian"),
    ({"epsilon": 1.0, "bounds": (0.0, 0.5)}, "outside the declared bounds"),
])
def test_prefix_sums_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dp_prefix_sums([0.0, 1.0, 1.0], **kwargs)


# ------------------------------------------------------------------- Alg. 1 quantiles


def test_quantile_exact_matches_inverted_cdf():
    rng = np.random.default_rng(2)
    x = rng.integers(0, 50, 301).astype(float)
    tau = np.arange(0.0, 50.0)
    curve = dp_ecdf(x, tau, epsilon=math.inf)
    q = np.array([0.01, 0.1, 0.25, 0.5, 0.9, 1.0])
    res = dp_quantile(curve, q)
    np.testing.assert_array_equal(res.upper, np.quantile(x, q, method="inverted_cdf"))
    assert np.all(res.bracketed)


def test_quantile_brackets_on_noisy_curve_and_precision():
    rng = np.random.default_rng(4)
    x = rng.exponential(size=2000)
    tau = absolute_grid(0.0, 10.0, 0.01)
    curve = dp_ecdf(x, tau, epsilon=0.3, rng=5)
    q = np.linspace(0.02, 0.98, 49)
    res = dp_quantile(curve, q, nu=0.05)
    assert np.all(res.bracketed)
    assert np.all(curve(res.lower) < q) and np.all(curve(res.upper) >= q)
    assert np.all(res.upper - res.lower <= 0.05 + 1e-12)
    np.testing.assert_allclose(res.value, (res.lower + res.upper) / 2)
    assert res.privacy == curve.privacy


@settings(deadline=None, max_examples=60, derandomize=True)
@given(st.lists(st.floats(-0.5, 1.5), min_size=3, max_size=40),
       st.floats(0.01, 1.0))
def test_quantile_bracket_property(values, level):
    """For any curve (monotone or not) the search ends at curve(a) < q <= curve(b) when
    the last value reaches q."""
    vals = np.array(values)
    tau = np.arange(vals.size, dtype=float)
    curve = PrivateECDF(tau, vals, 10, DyadicTree(vals.size), 1.0, "laplace",
                        dp_ecdf([0.0], [0.0], epsilon=1.0, rng=0).privacy, "simulation")
    res = dp_quantile(curve, level)
    assert bool(res.bracketed) == bool(curve(res.upper) >= level)
    assert curve(res.lower) < level
    assert res.upper - res.lower == pytest.approx(1.0)


@pytest.mark.parametrize(("q", "kwargs", "match"), [
    (0.0, {}, "q must be in"),
    (1.5, {}, "q must be in"),
    (0.5, {"nu": -1.0}, "nu must be"),
    (0.5, {"lower": 5.0}, "lower must be below"),
])
def test_quantile_bad_inputs(q, kwargs, match):
    curve = dp_ecdf([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], epsilon=math.inf)
    with pytest.raises(ValueError, match=match):
        dp_quantile(curve, q, **kwargs)


def test_tree_noise_type():
    draw = draw_tree_noise(7, 2.0, distribution="gaussian", rng=0)
    assert isinstance(draw, TreeNoise) and draw.point_variance == pytest.approx(4 * 4.0)
    with pytest.raises(ValueError, match="distribution must be"):
        draw_tree_noise(7, 2.0, distribution="cauchy", rng=0)


def test_deployment_noise_path():
    pytest.importorskip("opendp")
    from fedustat.privacy.noise import DeploymentNoise

    curve = dp_ecdf(np.arange(20.0), np.arange(0.0, 20.0, 2.5), epsilon=1.0,
                    noise=DeploymentNoise())
    assert curve.noise_kind == "deployment" and np.all(np.isfinite(curve.values))


# ------------------------------------------------------------------- error law (issue 12)


def test_point_error_law_is_the_exact_laplace_sum_over_levels():
    from fedustat.privacy.errors import SumOfErrors
    from fedustat.privacy.guarantee import Trust

    rng = np.random.default_rng(7)
    x = rng.beta(2.0, 5.0, size=300)
    tau = np.linspace(1 / 50, 1.0, 50)
    curve = dp_ecdf(x, tau, epsilon=1.0, rng=0, method="003-tree")
    law = curve.error
    assert isinstance(law, SumOfErrors) and len(law.parts) == curve.tree.n_levels
    assert law.variance == pytest.approx(curve.variance, rel=1e-12)
    assert [a.kind for a in curve.privacy.assumptions] == [Trust.CURATOR]
    # Its quantile against 200,000 simulated sums of L + 1 Laplace(b / n) draws: the
    # share inside +-half is binomial, so 5 of its standard deviations bound the gap.
    draws = rng.laplace(0.0, curve.scale / curve.n, (200_000, curve.tree.n_levels)).sum(1)
    half = law.half_width(0.95)
    assert np.mean(np.abs(draws) <= half) == pytest.approx(0.95, abs=5 * math.sqrt(
        0.95 * 0.05 / draws.size))
    low, high = curve.confidence_band(0.95)
    np.testing.assert_allclose(high - curve.values, half)
    np.testing.assert_allclose(curve.values - low, half)
    wide_low, _ = curve.confidence_band(0.95, simultaneous=True)
    # The simultaneous band is the pointwise one at level 1 - 0.05 / N.
    assert curve.values[0] - wide_low[0] == pytest.approx(law.half_width(1 - 0.05 / 50))
    exact = dp_ecdf(x, tau, epsilon=math.inf)
    assert exact.confidence_band()[0] == pytest.approx(exact.values)


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, "0.9", True])
def test_confidence_band_refuses_bad_levels(bad):
    curve = dp_ecdf([0.1, 0.2], [0.5, 1.0], epsilon=1.0, rng=0)
    with pytest.raises(ValueError, match="confidence_level must be a number in"):
        curve.confidence_band(bad)


def test_simultaneous_band_and_quantile_interval_cover():
    """All N points at once, and the median, over 400 runs: both are conservative
    (union bound), so they must cover at least 95% up to the binomial tolerance."""
    from coverage_check import Coverage, assert_covers
    from fedustat.protocols.ecdf.quantiles import quantile_interval

    rng = np.random.default_rng(8)
    x = rng.beta(2.0, 5.0, size=400)
    tau = np.linspace(1 / 40, 1.0, 40)
    exact = ecdf_counts(x, tau) / x.size
    median = np.sort(x)[199]
    runs, band_ok, median_ok = 400, 0, 0
    for seed in range(runs):
        curve = dp_ecdf(x, tau, epsilon=2.0, rng=seed)
        low, high = curve.confidence_band(0.95, simultaneous=True)
        band_ok += int(np.all((low <= exact) & (exact <= high)))
        q_low, q_high = quantile_interval(curve, 0.5)
        median_ok += int(q_low < median <= q_high)
    assert_covers(Coverage(band_ok, runs, 0.95))
    assert_covers(Coverage(median_ok, runs, 0.95))


def test_quantile_interval_bad_input():
    from fedustat.protocols.ecdf.quantiles import quantile_interval

    curve = dp_ecdf([0.1, 0.2, 0.7], [0.25, 0.5, 0.75, 1.0], epsilon=1.0, rng=0)
    with pytest.raises(ValueError, match=r"q must be in \(0, 1\]"):
        quantile_interval(curve, 0.0)
    with pytest.raises(ValueError, match="lower must be below the first threshold"):
        quantile_interval(curve, 0.5, lower=0.3)
    with pytest.raises(TypeError, match="curve must be a PrivateECDF"):
        quantile_interval(curve.values, 0.5)
    low, high = quantile_interval(curve, [0.5, 1.0])
    assert low.shape == high.shape == (2,)
    assert np.all(low < high)


def test_continual_sums_error_law():
    from fedustat.privacy.errors import NormalError, SumOfErrors

    stream = np.random.default_rng(9).integers(0, 2, 64)
    laplace = dp_prefix_sums(stream, epsilon=1.0, rng=0)
    assert isinstance(laplace.error, SumOfErrors)
    assert laplace.error.variance == pytest.approx(laplace.variance)
    gauss = dp_prefix_sums(stream, rho=0.5, delta=1e-6, rng=0)
    assert isinstance(gauss.error, NormalError)
    assert gauss.error.variance == pytest.approx(gauss.variance)
