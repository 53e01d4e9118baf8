"""The federated ECDF releases on the hierarchical tree (the central default's mechanism).

Checked here: with a dealer's draw made from the same seed, both evaluations (in process
and as protocol steps) equal ``dp_ecdf(method="hierarchical")`` up to the fixed-point
rounding, bounded through the least-squares weights; with distributed noise every path
returns the same curve, the least squares of the exact nodes plus the reconstructed
noise; the standard errors equal a dense weighted least-squares computation; the
discrete node noise has each level's law and its privacy loss is exactly eps over every
single-record move; the measured bits equal the formulas; the ring check is per node at
the largest level scale; the RMSE over seeds matches the exact variance; bad inputs are
refused with their messages.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedustat.privacy.noise import SimulationNoise
from fedustat.protocols.ecdf import (
    FssECDF,
    PointwiseECDF,
    distributed_tree_noise,
    dp_ecdf,
    dp_quantile,
    draw_tree_noise,
    ecdf_noise_scale,
    fss_ecdf,
    fss_ecdf_setup,
    index_bits,
    pointwise_ecdf,
)
from fedustat.protocols.ecdf.federated import curve_estimate
from fedustat.protocols.ecdf.hierarchical import (
    NodeNoise,
    default_plan,
    draw_node_noise,
    estimate_with_variances,
    linear_node_weights,
    node_intervals,
    split_levels,
)
from fedustat.protocols.ecdf.shared_noise import (
    DEALER_FRAC_BITS,
    distributed_node_noise,
    share_node_noise,
)
from fedustat.runtime.simulate import simulate
from fedustat.stats.ecdf import absolute_grid, ecdf_counts

GRID = absolute_grid(0.0, 12.0, 0.5)  # 25 thresholds
EPS = 1.0
PLAN = default_plan(GRID.size)


def poisson_data(n: int = 200, seed: int = 0) -> np.ndarray:
    """Poisson(3) values plus one above and one below the grid."""
    x = np.random.default_rng(seed).poisson(3.0, n - 2).astype(np.float64)
    return np.concatenate([x, [20.0, -1.0]])


def exact_nodes(x: np.ndarray, plan=PLAN, grid=GRID) -> np.ndarray:
    """Every noisy node's exact count, from the bins directly (not from prefix counts)."""
    starts, ends, _ = node_intervals(plan)
    bins = np.searchsorted(grid, x, side="left")  # bin j: tau_{j-1} < x <= tau_j
    hist = np.bincount(bins, minlength=grid.size + 1)[:grid.size]
    return np.array([hist[s:e].sum() for s, e in zip(starts, ends, strict=True)], float)


def least_squares_curve(x: np.ndarray, noise_values: np.ndarray, level_variances) -> np.ndarray:
    nodes = exact_nodes(x) + noise_values
    return estimate_with_variances(PLAN, split_levels(PLAN, nodes), level_variances) / x.size


def dense_covariance(level_variances: np.ndarray) -> np.ndarray:
    """Cov of the prefix-count estimate by dense weighted least squares: nodes A (rows:
    node indicator over the bins), W = diag(1 / v), Cov(c_hat) = C (A^T W A)^-1 C^T."""
    starts, ends, levels = node_intervals(PLAN)
    a = np.zeros((starts.size, PLAN.n_points))
    for k, (s, e) in enumerate(zip(starts, ends, strict=True)):
        a[k, s:e] = 1.0
    w = 1.0 / np.asarray(level_variances)[levels]
    c = np.tril(np.ones((PLAN.n_points, PLAN.n_points)))
    return c @ np.linalg.inv(a.T @ (w[:, None] * a)) @ c.T


# ------------------------------------------------------------ same noise, same curve


@pytest.mark.parametrize("path", ["pointwise", "fss", "pointwise-steps", "fss-steps"])
def test_dealer_release_equals_central_dp_ecdf_for_the_same_seed(path):
    x = poisson_data(300, seed=3)
    seed = 11
    central = dp_ecdf(x, GRID, epsilon=EPS, rng=seed)
    assert central.method == "hierarchical" and central.plan == PLAN
    draw = draw_node_noise(PLAN, EPS, SimulationNoise(np.random.default_rng(seed)))
    if path == "pointwise":
        fed = pointwise_ecdf(x, GRID, epsilon=EPS, tree_noise=draw, rng=1, batch_size=64)
    elif path == "fss":
        fed = fss_ecdf(x, GRID, epsilon=EPS, tree_noise=draw, rng=1, batch_size=64)
    else:
        make = PointwiseECDF if path == "pointwise-steps" else FssECDF
        fed = simulate(make(GRID, epsilon=EPS, tree_noise=draw), x, rng=2,
                       batch_size=70).diagnostics["curve"]
    assert fed.method == "hierarchical" and fed.plan == PLAN
    # Exactly the least squares of the exact nodes plus the draw rounded to 2^-c ...
    unit = 2.0**-DEALER_FRAC_BITS
    rounded = np.rint(draw.values / unit) * unit
    np.testing.assert_allclose(fed.values, least_squares_curve(
        x, rounded, PLAN.level_variances(EPS)), rtol=0, atol=1e-12)
    # ... so it is the central curve up to sum_k |w_ik| 2^-(c+1) / n at each point.
    bound = np.array([np.abs(linear_node_weights(PLAN, np.eye(GRID.size)[i],
                                                 PLAN.level_variances(EPS))).sum()
                      for i in range(GRID.size)]) * unit / 2 / x.size
    diff = np.abs(fed.values - central.values)
    assert np.all(diff <= bound + 1e-13) and diff.max() > 0
    # The same variance as the central release (Laplace of the same scales).
    np.testing.assert_allclose(fed.point_variances, central.point_variances, rtol=1e-12)


def test_distributed_noise_gives_one_curve_on_every_path():
    x = poisson_data(150, seed=4)
    noise = distributed_node_noise(PLAN, EPS, contributors=3, min_honest=3, rng=41)
    reference = least_squares_curve(x, noise.reconstruct(), noise.level_variances)
    curves = [pointwise_ecdf(x, GRID, epsilon=EPS, noise=noise, rng=1, batch_size=40),
              fss_ecdf(x, GRID, epsilon=EPS, noise=noise, rng=2, batch_size=40),
              simulate(PointwiseECDF(GRID, epsilon=EPS, noise=noise), x, rng=3,
                       batch_size=33).diagnostics["curve"],
              simulate(FssECDF(GRID, epsilon=EPS, noise=noise), x, rng=4,
                       batch_size=None).diagnostics["curve"]]
    for curve in curves:
        np.testing.assert_array_equal(curve.values, curves[0].values)
        assert curve.method == "hierarchical"
    np.testing.assert_allclose(curves[0].values, reference, rtol=0, atol=1e-12)
    # Integer noise (c = 0) on integer counts: the opened nodes are exact integers, and
    # with h = K the per-level variances are within 3% of the central Laplace ones (the
    # root, scale 2/eps, is the furthest: integer discrete Laplace is 2% less variable).
    np.testing.assert_allclose(noise.level_variances, PLAN.level_variances(EPS), rtol=0.03)


def test_exact_release_without_noise():
    x = poisson_data(90, seed=5)
    for curve in (pointwise_ecdf(x, GRID, epsilon=math.inf, rng=0),
                  fss_ecdf(x, GRID, epsilon=math.inf, rng=0),
                  simulate(PointwiseECDF(GRID, epsilon=math.inf), x, rng=0).diagnostics["curve"]):
        assert curve.method == "hierarchical"
        np.testing.assert_array_equal(curve.counts, ecdf_counts(x, GRID))
        assert curve.variance == 0.0


def test_subset_queries():
    x = poisson_data(120, seed=6)
    noise = distributed_node_noise(PLAN, EPS, rng=9)
    full = pointwise_ecdf(x, GRID, epsilon=EPS, noise=noise, rng=1)
    sub = pointwise_ecdf(x, GRID, [2, 3, 17], epsilon=EPS, noise=noise, rng=1)
    np.testing.assert_array_equal(sub.values, full.values[[2, 3, 17]])
    np.testing.assert_array_equal(sub.point_variances, full.point_variances[[2, 3, 17]])
    # Without noise given, a subset query keeps 003's pointwise evaluation by default.
    assert pointwise_ecdf(x, GRID, [2, 3], epsilon=EPS, rng=1).method == "003-tree"
    assert pointwise_ecdf(x, GRID, [2, 3], epsilon=EPS, rng=1,
                          method="hierarchical").method == "hierarchical"
    # FSS: the first query opens the nodes; later ones are the released curve's entries.
    servers = fss_ecdf_setup(x, GRID, epsilon=EPS, rng=31)
    first = servers.query([4, 5])
    later = servers.query()
    again = servers.query(np.array([5, 24]))
    np.testing.assert_array_equal(first.values, later.values[[4, 5]])
    np.testing.assert_array_equal(again.values, later.values[[5, 24]])
    w, ring_bits = index_bits(GRID.size), 64
    assert first.cost.total_bits == 2 * w + 2 * PLAN.n_noisy_nodes * ring_bits
    assert later.cost.total_bits == 0 and again.cost.total_bits == 0
    assert servers.queries == 3


# ---------------------------------------------------------------- error and variance


@pytest.mark.parametrize("make", [PointwiseECDF, FssECDF])
def test_standard_errors_equal_dense_least_squares(make):
    x = poisson_data(120, seed=7)
    noise = distributed_node_noise(PLAN, EPS, contributors=2, min_honest=1, rng=12)
    est = simulate(make(GRID, epsilon=EPS, noise=noise), x, rng=13, batch_size=50)
    curve = est.diagnostics["curve"]
    cov = dense_covariance(noise.level_variances)
    np.testing.assert_allclose(curve.point_variances, np.diag(cov) / x.size**2, rtol=1e-9)
    ones = np.ones(GRID.size)
    expected = ones @ cov @ ones / (GRID.size * x.size) ** 2
    assert est.std_error == pytest.approx(math.sqrt(expected), rel=1e-9)
    assert est.value == pytest.approx(np.mean(curve.values), rel=1e-15)
    assert est.privacy.epsilon == EPS
    # Two contributors' parts per node (h = 1): twice the central variance.
    np.testing.assert_allclose(curve.point_variances,
                               2 * dp_ecdf(x, GRID, epsilon=EPS, rng=0).point_variances,
                               rtol=0.03)
    lo, hi = curve.confidence_band(0.9)
    assert np.all(hi - lo > 0)


def test_rmse_over_seeds_matches_the_exact_variance():
    """Mean over seeds of sum_i (F_hat_i - F_i)^2: tolerance from its own sample spread."""
    x = poisson_data(200, seed=8)
    exact = ecdf_counts(x, GRID) / x.size
    runs = 300
    sq = np.empty(runs)
    for r in range(runs):
        curve = pointwise_ecdf(x, GRID, epsilon=EPS, contributors=2, min_honest=2, rng=1000 + r)
        sq[r] = np.sum((curve.values - exact) ** 2)
    expected = float(np.sum(curve.point_variances))
    tol = 5.0 * sq.std(ddof=1) / math.sqrt(runs)
    assert abs(sq.mean() - expected) < tol
    central = float(np.sum(dp_ecdf(x, GRID, epsilon=EPS, rng=0).point_variances))
    assert expected == pytest.approx(central, rel=0.03)


@pytest.mark.parametrize(("contributors", "min_honest", "dealer"),
                         [(1, 1, True), (2, 2, False), (2, 1, False)])
def test_confidence_band_covers(contributors, min_honest, dealer):
    """Pointwise 90% bands: the mean fraction of covered points over seeded runs, with a
    tolerance of 5 standard errors of that mean (from the runs' own spread). A dealer's
    Laplace draw has the exact law; K/h > 1 discrete parts per node have lighter tails
    than the Laplace law used, so their bands may only over-cover."""
    x = poisson_data(60, seed=11)
    exact = ecdf_counts(x, GRID) / x.size
    covered = []
    for r in range(1000):
        if dealer:
            draw = draw_node_noise(PLAN, EPS, SimulationNoise(np.random.default_rng(r)))
            curve = pointwise_ecdf(x, GRID, epsilon=EPS, tree_noise=draw, rng=r)
        else:
            curve = pointwise_ecdf(x, GRID, epsilon=EPS, contributors=contributors,
                                   min_honest=min_honest, rng=r)
        lo, hi = curve.confidence_band(0.9)
        covered.append(float(np.mean((lo <= exact) & (exact <= hi))))
    mean = float(np.mean(covered))
    tol = 5.0 * float(np.std(covered, ddof=1)) / math.sqrt(len(covered))
    assert mean >= 0.9 - tol
    if contributors == min_honest:
        assert mean <= 0.9 + tol


@pytest.mark.parametrize(("contributors", "min_honest"), [(3, 3), (2, 1)])
def test_distributed_node_noise_has_each_levels_law(contributors, min_honest):
    draws = np.stack([distributed_node_noise(PLAN, EPS, contributors=contributors,
                                             min_honest=min_honest, rng=500 + r).reconstruct()
                      for r in range(300)])
    _, _, levels = node_intervals(PLAN)
    law = distributed_node_noise(PLAN, EPS, contributors=contributors, min_honest=min_honest,
                                 rng=0).level_variances
    for lev in range(PLAN.height + 1):
        v = draws[:, levels == lev].ravel()
        # Sample variance's standard error from the fourth moment (no normality assumed).
        se = math.sqrt((np.mean(v**4) - np.mean(v**2) ** 2) / v.size)
        assert abs(np.mean(v**2) - law[lev]) < 5.0 * se
        assert abs(v.mean()) < 5.0 * math.sqrt(law[lev] / v.size)
    expect = (contributors / min_honest) * PLAN.level_variances(EPS)
    np.testing.assert_allclose(law, expect, rtol=0.03)  # c = 0: the root is ~2% below


@pytest.mark.parametrize("n_points", [1, 2, 5, 25, 40])
def test_discrete_node_noise_is_exactly_epsilon_dp(n_points):
    """Privacy loss of the discrete node noise for every single-record move between bins
    (bin N is above the grid): a shift of one count is 2^c lattice units, ratio
    t_l^(-2^c) = e^(1/s_l) per unit change of a node on level l."""
    plan = default_plan(n_points)
    noise = distributed_node_noise(plan, EPS, frac_bits=3, rng=0)
    starts, ends, levels = node_intervals(plan)
    t = np.exp(-noise.fixed_point.resolution / plan.scales(EPS))
    per_count = -np.log(t[levels]) * 2**noise.fixed_point.frac_bits
    worst = 0.0
    for a in range(n_points + 1):
        for b in range(n_points + 1):
            hist = np.zeros(n_points + 1)
            hist[a] -= 1
            hist[b] += 1
            change = np.array([hist[s:e].sum() for s, e in zip(starts, ends, strict=True)])
            worst = max(worst, float(np.sum(np.abs(change) * per_count)))
    assert worst == pytest.approx(EPS, rel=1e-9)


# ---------------------------------------------------------------------- costs, ring


def test_bits_equal_the_formulas():
    n, m, ring_bits = 40, 2, 64
    x = poisson_data(n, seed=9)
    nodes, N, w = PLAN.n_noisy_nodes, GRID.size, index_bits(GRID.size)
    fed = pointwise_ecdf(x, GRID, epsilon=EPS, rng=1, batch_size=9)
    assert fed.cost.bits_per_party == m * N * ring_bits
    assert fed.cost.total_bits == n * N * (w + m * ring_bits) + m * nodes * ring_bits
    assert fed.setup_cost.total_bits == 2 * m * nodes * ring_bits  # K = m contributors
    est = simulate(PointwiseECDF(GRID, epsilon=EPS), x, rng=1, batch_size=9)
    # Indicators at all N points to the m computing parties, then the K = 2 contributors'
    # node parts (second relay round), then #nodes ring elements up from each.
    assert est.cost.peer_bits_per_party * n == n * m * N * ring_bits + 2 * m * nodes * ring_bits
    assert est.cost.total_bits == (n * m * N * ring_bits + 2 * m * nodes * ring_bits
                                   + m * nodes * ring_bits)
    assert (est.cost.rounds, est.cost.peer_rounds) == (3, 2)


def test_ring_capacity_is_checked_per_node_at_the_largest_level_scale():
    x = np.zeros(10)
    # n + 2 s_max ((41 + K/h) ln 2 + ln #nodes) must stay below 2^(l - 1 - c).
    bound = 10 + 2 * PLAN.scales(EPS).max() * ((41 + 2) * math.log(2)
                                               + math.log(PLAN.n_noisy_nodes))
    c_ok = 15 - math.ceil(math.log2(bound))  # 2^(15 - c_ok) >= bound
    curve = pointwise_ecdf(x, GRID, epsilon=EPS, ring_bits=16, frac_bits=c_ok, rng=0)
    assert curve.method == "hierarchical"
    with pytest.raises(OverflowError, match="largest level scale"):
        pointwise_ecdf(x, GRID, epsilon=EPS, ring_bits=16, frac_bits=c_ok + 1, rng=0)
    # 003's check sums L + 1 nodes of scale (L + 1)/eps: the same ring is too small there.
    with pytest.raises(OverflowError, match="ring_bits=16"):
        pointwise_ecdf(x, GRID, epsilon=EPS, ring_bits=16, frac_bits=c_ok, rng=0,
                       method="003-tree")


def test_to_private_ecdf_and_quantiles():
    x = poisson_data(400, seed=10)
    noise = distributed_node_noise(PLAN, EPS, contributors=2, min_honest=2, rng=3)
    fed = pointwise_ecdf(x, GRID, epsilon=EPS, noise=noise, rng=4)
    private = fed.to_private_ecdf()
    assert private.method == "hierarchical"
    np.testing.assert_array_equal(private.values, fed.values)
    assert private.variance == pytest.approx(fed.variance, rel=0.03)
    np.testing.assert_array_equal(dp_quantile(private, [0.5]).value,
                                  dp_quantile(fed, [0.5]).value)
    assert curve_estimate(fed).std_error > 0


# ---------------------------------------------------------------------------- bad input


def _tree_draw():
    return draw_tree_noise(GRID.size, ecdf_noise_scale(GRID.size, EPS), rng=0)


def _node_draw(eps=EPS, n_points=GRID.size):
    return draw_node_noise(default_plan(n_points), eps, SimulationNoise(np.random.default_rng(0)))


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, method="tree"), ValueError,
     "method must be one of"),
    (lambda: fss_ecdf([1.0], GRID, epsilon=EPS, method="opendp"), ValueError,
     "method must be one of"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, tree_noise=_node_draw(),
                            method="003-tree"), ValueError, "needs method='hierarchical'"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, tree_noise=_tree_draw(),
                            method="hierarchical"), TypeError, "must be a NodeNoise"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, method="hierarchical",
                            noise=distributed_tree_noise(GRID.size, EPS, rng=0)),
     ValueError, "003's tree noise"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, method="003-tree",
                            noise=distributed_node_noise(PLAN, EPS, rng=0)),
     ValueError, "needs method='hierarchical'"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS,
                            noise=distributed_node_noise(PLAN, 2.0, rng=0)),
     ValueError, "epsilon=2"),
    (lambda: fss_ecdf([1.0], GRID, epsilon=EPS, tree_noise=_node_draw(2.0)), ValueError,
     "epsilon=2"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, method="hierarchical",
                            tree_noise=_node_draw(n_points=10)), ValueError, "N=10"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, n_servers=3,
                            noise=distributed_node_noise(PLAN, EPS, rng=0)),
     ValueError, "2 servers"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=math.inf, tree_noise=_node_draw()),
     ValueError, "infinite"),
    (lambda: NodeNoise(PLAN, EPS, np.zeros(3), "simulation"), ValueError,
     f"{PLAN.n_noisy_nodes} finite node noises"),
    (lambda: share_node_noise(_tree_draw()), TypeError, "must be a NodeNoise"),
    (lambda: distributed_node_noise(25, EPS), TypeError, "HierarchicalPlan"),
    (lambda: distributed_node_noise(PLAN, EPS, contributors=1), ValueError, "contributors"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, rng=0).smooth(), ValueError,
     "method='003-tree'"),
    (lambda: pointwise_ecdf(poisson_data(30), GRID, epsilon=EPS, rng=0).to_private_ecdf(),
     ValueError, "node variances differ"),
])
def test_bad_inputs_are_refused(call, error, match):
    with pytest.raises(error, match=match):
        call()
