"""The hierarchical (b-ary tree, least-squares) CDF release: privacy, exactness of its
variance formulas, unbiasedness, bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedustat.privacy.noise import SimulationNoise
from fedustat.protocols.ecdf import dp_ecdf, isotonic_projection, smooth
from fedustat.protocols.ecdf.hierarchical import (
    MAX_COVARIANCE_POINTS,
    HierarchicalPlan,
    default_plan,
)
from fedustat.protocols.ecdf.release import dp_ecdf_from_counts
from fedustat.stats.ecdf import ecdf, ecdf_counts

PLANS = [
    HierarchicalPlan(1, 2, ()),
    HierarchicalPlan(2, 2, (1.0,)),
    HierarchicalPlan(7, 2, (0.2, 0.5, 0.3)),
    HierarchicalPlan(10, 3, (0.6, 0.3, 0.1)),
    HierarchicalPlan(16, 4, (0.5, 0.5)),
    HierarchicalPlan(17, 4, (0.3, 0.3, 0.4)),
    HierarchicalPlan(9, 16, (1.0,)),
]


def _nodes(plan: HierarchicalPlan) -> list[tuple[int, int, int]]:
    """(level, start, stop) of every noisy node, enumerated independently of the module:
    level l's nodes cover bins [j b^l, min((j+1) b^l, N)); the root is level H."""
    out = []
    for lev in range(plan.height + 1):
        width = plan.branching**lev
        for j in range(-(-plan.n_points // width)):
            out.append((lev, j * width, min((j + 1) * width, plan.n_points)))
    return out


def _dense(plan: HierarchicalPlan, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The node matrix A (nodes x bins) and the node variances, built from scratch."""
    nodes = _nodes(plan)
    scales = plan.scales(eps)
    a = np.zeros((len(nodes), plan.n_points))
    var = np.empty(len(nodes))
    for k, (lev, lo, hi) in enumerate(nodes):
        a[k, lo:hi] = 1.0
        var[k] = 2.0 * scales[lev] ** 2
    return a, var


def _split(plan: HierarchicalPlan, flat: np.ndarray) -> list[np.ndarray]:
    out, pos = [], 0
    for lev in range(plan.height + 1):
        m = plan.level_nodes(lev)
        out.append(flat[..., pos:pos + m])
        pos += m
    return out


# ------------------------------------------------------------------------------ privacy


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"N{p.n_points}b{p.branching}")
def test_replace_one_sensitivity_is_exactly_epsilon(plan: HierarchicalPlan) -> None:
    """Every replacement (bin a -> bin b, bin N being 'above the last threshold') moves
    the node vector by an L1 distance, in units of each node's Laplace scale, of at most
    eps (the Laplace mechanism's bound), and some replacement reaches it."""
    eps = 0.7
    scales = plan.scales(eps)
    nodes = _nodes(plan)
    worst = 0.0
    for a in range(plan.n_points + 1):
        for b in range(plan.n_points + 1):
            hist = np.zeros(plan.n_points + 1)
            hist[a] -= 1.0
            hist[b] += 1.0
            loss = sum(abs(hist[lo:hi].sum()) / scales[lev] for lev, lo, hi in nodes)
            assert plan.sensitivity(eps, a, b) == pytest.approx(loss, abs=1e-12)
            worst = max(worst, loss)
    assert worst == pytest.approx(eps, rel=1e-12)


def test_default_plan_is_a_valid_split() -> None:
    for n_points in (1, 2, 5, 64, 1000, 4096):
        plan = default_plan(n_points)
        assert plan.n_points == n_points
        assert math.isclose(sum(plan.weights), 1.0) or plan.height == 0
        assert plan.branching ** plan.height >= n_points


# ---------------------------------------------------------------- exact linear algebra


@pytest.mark.parametrize("plan", PLANS[1:], ids=lambda p: f"N{p.n_points}b{p.branching}")
def test_estimate_and_variances_match_dense_least_squares(plan: HierarchicalPlan) -> None:
    """The O(N) passes against the textbook weighted least squares
    ``x_hat = (A^T W A)^{-1} A^T W y`` and its covariance ``C (A^T W A)^{-1} C^T``."""
    eps = 1.3
    a, var = _dense(plan, eps)
    gram = a.T @ (a / var[:, None])
    prefix = np.tril(np.ones((plan.n_points, plan.n_points)))
    cov = prefix @ np.linalg.inv(gram) @ prefix.T
    y = np.random.default_rng(3).normal(size=(2, a.shape[0])) * 5.0
    expected = (prefix @ np.linalg.solve(gram, (a / var[:, None]).T @ y.T)).T
    np.testing.assert_allclose(plan.estimate(_split(plan, y), eps), expected, atol=1e-9)
    np.testing.assert_allclose(plan.covariance(eps), cov, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(plan.point_variances(eps), np.diag(cov), rtol=1e-10)
    w = np.random.default_rng(4).normal(size=(3, plan.n_points))
    np.testing.assert_allclose(plan.linear_variance(w, eps),
                               np.einsum("ij,jk,ik->i", w, cov, w), rtol=1e-9)
    assert plan.linear_variance(w[0], eps) == pytest.approx(w[0] @ cov @ w[0], rel=1e-9)


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: f"N{p.n_points}b{p.branching}")
def test_node_weights_reproduce_the_estimate(plan: HierarchicalPlan) -> None:
    """The adjoint pass: ``c_hat_i = sum_k w_k y_k`` for any node observations y, and
    ``sum_k w_k^2 2 s_k^2`` is the point's variance."""
    eps = 0.8
    y = np.random.default_rng(7).normal(size=plan.n_noisy_nodes) * 3.0
    est = plan.estimate(_split(plan, y), eps)
    var = plan.point_variances(eps)
    for i in range(plan.n_points):
        w = plan.node_weights(eps, i)
        assert w @ y == pytest.approx(est[i], abs=1e-9)
        assert np.sum(w**2 * 2 * plan.node_scales(eps) ** 2) == pytest.approx(var[i],
                                                                              rel=1e-10)
    with pytest.raises(ValueError, match="index must be in"):
        plan.node_weights(eps, plan.n_points)


def test_error_law_is_the_worst_points_laplace_sum() -> None:
    from fedustat.privacy.errors import laplace_sum

    x = np.random.default_rng(8).normal(size=400)
    tau = np.linspace(-2.0, 2.0, 40)
    curve = dp_ecdf(x, tau, epsilon=1.0, rng=0)
    assert curve.error.variance == pytest.approx(curve.variance, rel=1e-10)
    worst = int(np.argmax(curve.point_variances))
    law = laplace_sum(curve.plan.node_weights(1.0, worst) * curve.plan.node_scales(1.0)
                      / x.size)
    assert curve.error.half_width(0.9) == pytest.approx(law.half_width(0.9), rel=1e-12)
    low, high = curve.confidence_band(0.9)
    sd = np.sqrt(curve.point_variances)
    np.testing.assert_allclose(high - curve.values, law.half_width(0.9) * sd / sd.max())
    np.testing.assert_allclose(curve.values - low, high - curve.values)


def test_private_ecdf_covariance_for_both_methods() -> None:
    x = np.random.default_rng(5).normal(size=500)
    tau = np.linspace(-2.0, 2.0, 23)
    w = np.random.default_rng(6).normal(size=(4, tau.size))
    for method in ("hierarchical", "003-tree"):
        curve = dp_ecdf(x, tau, epsilon=0.9, rng=1, method=method)
        cov = curve.covariance()
        assert cov.shape == (23, 23)
        np.testing.assert_allclose(np.diag(cov), curve.point_variances, rtol=1e-10)
        np.testing.assert_allclose(curve.linear_variance(w),
                                   np.einsum("ij,jk,ik->i", w, cov, w), rtol=1e-9)
        assert curve.variance == pytest.approx(np.max(np.diag(cov)), rel=1e-12)
    # 003's tree from its own node matrix: Cov = node variance A A^T / n^2 (003 Eq. 2).
    curve = dp_ecdf(x, tau, epsilon=0.9, rng=1, method="003-tree")
    a = curve.tree.matrix().toarray()
    np.testing.assert_allclose(curve.covariance(),
                               2 * curve.scale**2 * (a @ a.T) / x.size**2, rtol=1e-12)


def test_default_beats_003_tree_by_the_exact_variances() -> None:
    """The default plan's mean variance is below 003's Thm 1 value (for N = 4096 it is
    about 0.12 of it); both exact formulas, no simulation."""
    for n_points in (64, 1024, 4096):
        depth = (n_points - 1).bit_length()
        assert default_plan(n_points).mean_variance() < 0.3 * 2 * (depth + 1) ** 3


# ---------------------------------------------------------------------- Monte Carlo


def test_unbiased_with_the_exact_variance_monte_carlo() -> None:
    """4000 seeded releases on N = 12 points. Mean: within 5 standard errors of 0 at every
    point. Variance: the sample variance within 5 of its standard deviations, from the
    exact fourth moment of a weighted Laplace sum (kappa_4 of Lap(s) is 12 s^4)."""
    rng = np.random.default_rng(21)
    n, eps, reps = 300, 1.0, 4000
    x = rng.normal(size=n)
    tau = np.linspace(-2.0, 2.0, 12)
    exact = ecdf(x, tau)
    plan = HierarchicalPlan(12, 3, (0.5, 0.3, 0.2))
    gen = np.random.default_rng(22)
    err = np.array([dp_ecdf(x, tau, epsilon=eps, rng=gen, plan=plan).values - exact
                    for _ in range(reps)])
    var = plan.point_variances(eps) / n**2
    assert np.all(np.abs(err.mean(axis=0)) <= 5 * np.sqrt(var / reps))
    # Weights of each node's noise on each point: the estimate of unit observations.
    n_nodes = plan.n_noisy_nodes
    m = plan.estimate(_split(plan, np.eye(n_nodes)), eps).T / n  # points x nodes
    scales = np.concatenate([np.full(plan.level_nodes(lev), plan.scales(eps)[lev])
                             for lev in range(plan.height + 1)]) / 1.0
    kappa4 = np.sum(m**4 * 12.0 * scales**4, axis=1)
    mu4 = kappa4 + 3.0 * var**2
    sd_of_var = np.sqrt((mu4 - var**2) / reps)
    np.testing.assert_allclose(np.sum(m**2 * 2 * scales**2, axis=1), var, rtol=1e-10)
    assert np.all(np.abs(err.var(axis=0) - var) <= 5 * sd_of_var)


def test_exact_at_infinite_epsilon_and_seeded() -> None:
    x = np.random.default_rng(2).exponential(size=200)
    tau = np.linspace(0.1, 5.0, 40)
    exact = dp_ecdf(x, tau, epsilon=math.inf)
    np.testing.assert_array_equal(exact.values, ecdf(x, tau))
    assert exact.variance == 0.0 and np.all(exact.point_variances == 0.0)
    assert exact.linear_variance(np.ones(40)) == 0.0
    a = dp_ecdf(x, tau, epsilon=0.5, rng=42)
    b = dp_ecdf_from_counts(ecdf_counts(x, tau), x.size, tau, epsilon=0.5,
                            noise=SimulationNoise(42))
    np.testing.assert_array_equal(a.values, b.values)
    assert a.method == "hierarchical" and a.plan == default_plan(40)
    assert a.privacy.epsilon == 0.5 and a.privacy.adjacency.startswith("replace one record")


def test_records_above_the_grid_are_handled() -> None:
    """Records above the last threshold (overflow bin): the release stays unbiased, and
    at eps = inf the curve ends below 1."""
    x = np.concatenate([np.full(50, 0.5), np.full(50, 10.0)])
    tau = np.array([0.0, 1.0, 2.0])
    assert dp_ecdf(x, tau, epsilon=math.inf).values[-1] == pytest.approx(0.5)
    gen = np.random.default_rng(9)
    reps = 3000
    vals = np.array([dp_ecdf(x, tau, epsilon=2.0, rng=gen).values for _ in range(reps)])
    sd = np.sqrt(dp_ecdf(x, tau, epsilon=2.0, rng=0).point_variances / reps)
    assert np.all(np.abs(vals.mean(axis=0) - [0.0, 0.5, 0.5]) <= 5 * sd)


def test_deployment_noise_path() -> None:
    pytest.importorskip("opendp")
    from fedustat.privacy.noise import DeploymentNoise

    curve = dp_ecdf(np.arange(20.0), np.arange(0.0, 20.0, 2.5), epsilon=1.0,
                    noise=DeploymentNoise())
    assert curve.noise_kind == "deployment" and curve.method == "hierarchical"
    assert np.all(np.isfinite(curve.values))


# --------------------------------------------------------------------------- bad inputs


def test_bad_inputs_name_the_problem() -> None:
    x, tau = [1.0, 2.0], [1.0, 2.0, 3.0]
    with pytest.raises(ValueError, match="method must be one of"):
        dp_ecdf(x, tau, epsilon=1.0, rng=0, method="quadtree")
    with pytest.raises(ValueError, match="plan is for 5 points, the grid has 3"):
        dp_ecdf(x, tau, epsilon=1.0, rng=0, plan=default_plan(5))
    with pytest.raises(ValueError, match="plan is for method='hierarchical'"):
        dp_ecdf(x, tau, epsilon=1.0, rng=0, plan=default_plan(3), method="003-tree")
    with pytest.raises(TypeError, match="plan must be a HierarchicalPlan"):
        dp_ecdf(x, tau, epsilon=1.0, rng=0, plan="b=4")
    from fedustat.protocols.ecdf import draw_tree_noise

    draw = draw_tree_noise(3, 2.0, rng=0)
    with pytest.raises(ValueError, match="needs method='003-tree'"):
        dp_ecdf(x, tau, epsilon=1.0, tree_noise=draw, method="hierarchical")
    with pytest.raises(ValueError, match="branching must be an integer >= 2"):
        HierarchicalPlan(8, 1, ())
    with pytest.raises(ValueError, match="one entry per level below the root"):
        HierarchicalPlan(8, 2, (0.5, 0.5))
    with pytest.raises(ValueError, match="positive and sum to 1"):
        HierarchicalPlan(4, 2, (0.7, 0.7))
    curve = dp_ecdf(x, tau, epsilon=1.0, rng=0)
    with pytest.raises(ValueError, match=r"weights must have shape \(3,\) or \(k, 3\)"):
        curve.linear_variance(np.ones(4))
    with pytest.raises(ValueError, match="weights must be finite"):
        curve.linear_variance([1.0, np.nan, 0.0])
    with pytest.raises(ValueError, match=r"smooth \(003 Eq\. 3\) corrects 003's dyadic"):
        smooth(curve)
    projected = isotonic_projection(curve)
    with pytest.raises(ValueError, match="not linear in the noise"):
        projected.covariance()
    with pytest.raises(ValueError, match="not linear in the noise"):
        projected.linear_variance(np.ones(3))
    big = MAX_COVARIANCE_POINTS + 1
    wide = dp_ecdf(np.zeros(3), np.arange(big, dtype=float), epsilon=1.0, rng=0)
    with pytest.raises(ValueError, match="too large"):
        wide.covariance()
