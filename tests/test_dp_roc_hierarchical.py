"""The DP ROC curve on hierarchical class curves with a private total (issue 15, item 4):
exact privacy over all replacements, the plans' variance formulas, the release's noise
law, the bootstrap's noise, and the 003 path kept as written."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedustat.datasets import classifier_scores
from fedustat.protocols.ecdf import dp_roc_curve
from fedustat.protocols.ecdf.hierarchical import (
    HierarchicalPlan,
    default_plan,
    private_total_plan,
)
from fedustat.protocols.ecdf.roc import (
    DEFAULT_ROC_CURVE_METHOD,
    _area_matrix,
    _bootstrap_areas,
    _DenseCovariance,
    _noise_law,
    _operator_trace,
    _raw_auc_std_error,
    roc_class_counts,
)

PRIVATE_PLANS = [
    HierarchicalPlan(1, 2, (1.0,), public_total=False),
    HierarchicalPlan(2, 2, (0.6, 0.4), public_total=False),
    HierarchicalPlan(7, 2, (0.3, 0.3, 0.3, 0.1), public_total=False),
    HierarchicalPlan(10, 3, (0.3, 0.3, 0.2, 0.2), public_total=False),
    HierarchicalPlan(9, 16, (0.9, 0.1), public_total=False),
    private_total_plan(5),
    private_total_plan(13),
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


def _node_counts(plan: HierarchicalPlan, hist: np.ndarray) -> np.ndarray:
    return np.array([hist[lo:hi].sum() for _, lo, hi in _nodes(plan)])


def _dense(plan: HierarchicalPlan, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """The node matrix A (nodes x bins) and the node variances, built from scratch."""
    nodes = _nodes(plan)
    scales = plan.scales(eps)
    a = np.zeros((len(nodes), plan.n_points))
    for k, (_, lo, hi) in enumerate(nodes):
        a[k, lo:hi] = 1.0
    var = np.array([2.0 * scales[lev] ** 2 for lev, _, _ in nodes])
    return a, var


# ------------------------------------------------------------------------------ privacy


@pytest.mark.parametrize("plan", PRIVATE_PLANS, ids=lambda p: f"N{p.n_points}b{p.branching}")
def test_roc_replace_one_costs_at_most_epsilon_over_all_pairs(plan: HierarchicalPlan) -> None:
    """Every replacement of one record (score bin and label; labels may change) moves the
    two class trees' node vectors by at most eps in units of each node's Laplace scale
    (eps/2 per class), and a label change reaches eps exactly. Each tree's histogram has
    the N bins of its class; a record of the other class is in neither (roc.py)."""
    eps = 0.9
    half = eps / 2.0
    scales = np.array([plan.scales(half)[lev] for lev, _, _ in _nodes(plan)])
    n_bins = plan.n_points
    records = [(label, b) for label in (0, 1) for b in range(n_bins)]
    worst, worst_cross, worst_inside = 0.0, 0.0, 0.0
    for (l1, a), (l2, b) in itertools.product(records, records):
        loss = 0.0
        for cls in (0, 1):
            hist = np.zeros(n_bins)
            if l1 == cls:
                hist[a] -= 1.0
            if l2 == cls:
                hist[b] += 1.0
            loss += float(np.sum(np.abs(_node_counts(plan, hist)) / scales))
        if l1 == l2:
            # The module's own bound for a move inside one tree (bin N: outside it).
            assert plan.sensitivity(half, a, b) == pytest.approx(loss, abs=1e-12)
            worst_inside = max(worst_inside, loss)
        else:
            assert (plan.sensitivity(half, a, n_bins) + plan.sensitivity(half, n_bins, b)
                    == pytest.approx(loss, abs=1e-12))
            worst_cross = max(worst_cross, loss)
        worst = max(worst, loss)
    assert worst <= eps * (1.0 + 1e-12)
    assert worst_cross == pytest.approx(eps, rel=1e-12)
    # A move inside a tree costs 2 (eps/2) (1 - w_root) (module docstring), reached when
    # the two bins' lowest common ancestor is the root (there is one when H >= 1).
    if plan.height:
        assert worst_inside == pytest.approx(eps * (1.0 - plan.weights[-1]), rel=1e-12)


def test_private_total_plan_costs_epsilon_per_added_record() -> None:
    """Standalone: adding or removing one record (bin <-> outside) costs exactly eps."""
    eps = 1.3
    for plan in PRIVATE_PLANS:
        for a in range(plan.n_points):
            assert plan.sensitivity(eps, a, plan.n_points) == pytest.approx(eps, rel=1e-12)
            assert plan.sensitivity(eps, plan.n_points, a) == pytest.approx(eps, rel=1e-12)


# ------------------------------------------------------------------------------ variances


@pytest.mark.parametrize("plan", PRIVATE_PLANS, ids=lambda p: f"N{p.n_points}b{p.branching}")
def test_private_total_estimate_and_variances_are_exact(plan: HierarchicalPlan) -> None:
    """The two-pass estimate equals the weighted least squares from scratch, and the
    covariance, point variances, linear variances, covariance products and node weights
    equal
    ``C (A^T W A)^{-1} C^T``."""
    eps = 0.8
    a, var = _dense(plan, eps)
    w = np.diag(1.0 / var)
    gram_inv = np.linalg.inv(a.T @ w @ a)
    c = np.tril(np.ones((plan.n_points,) * 2))
    cov = c @ gram_inv @ c.T
    np.testing.assert_allclose(plan.covariance(eps), cov, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(plan.point_variances(eps), np.diag(cov), rtol=1e-9)
    rng = np.random.default_rng(1)
    weights = rng.normal(size=(3, plan.n_points))
    np.testing.assert_allclose(plan.linear_variance(weights, eps),
                               np.einsum("ij,jk,ik->i", weights, cov, weights), rtol=1e-9)
    np.testing.assert_allclose(plan.covariance_times(weights, eps), weights @ cov,
                               rtol=1e-9, atol=1e-9)
    y = a @ rng.integers(0, 5, plan.n_points) + rng.normal(0.0, 3.0, a.shape[0])
    split, pos = [], 0
    for lev in range(plan.height + 1):
        m = plan.level_nodes(lev)
        split.append(y[pos:pos + m])
        pos += m
    wls = c @ gram_inv @ a.T @ w @ y
    np.testing.assert_allclose(plan.estimate(split, eps), wls, rtol=1e-9, atol=1e-9)
    for i in range(plan.n_points):
        weights_i = plan.node_weights(eps, i)
        np.testing.assert_allclose(weights_i, (c @ gram_inv @ a.T @ w)[i], atol=1e-12)


def test_private_total_plan_is_chosen_by_the_exact_variance() -> None:
    """The chosen plan has a private root and no larger mean variance than any branching
    factor with equal budgets below a root of 1%, 10% or 30%."""
    for n_points in (5, 64, 256):
        plan = private_total_plan(n_points)
        assert not plan.public_total and len(plan.weights) == plan.height + 1
        for b in (2, 4, 8, 16):
            for share in (0.01, 0.1, 0.3):
                h = next(k for k in range(n_points + 1) if b**k >= n_points)
                other = HierarchicalPlan(n_points, b, (*[(1 - share) / h] * h, share),
                                         public_total=False)
                assert plan.mean_variance() <= other.mean_variance() * (1.0 + 1e-9)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"n_points": 7, "branching": 2, "weights": (0.5, 0.3, 0.2), "public_total": False},
     r"one entry per level, the root last \(4 for N=7, b=2, private total\), got 3"),
    ({"n_points": 7, "branching": 2, "weights": (0.5, 0.3, 0.2, 0.1), "public_total": False},
     "weights must be positive and sum to 1"),
    ({"n_points": 7, "branching": 2, "weights": (0.5, 0.3, 0.2), "public_total": "no"},
     "public_total must be True or False, got 'no'"),
])
def test_private_total_plan_bad_inputs(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        HierarchicalPlan(**kwargs)


def test_public_total_plans_are_unchanged() -> None:
    """The default ECDF's plans keep their structure and scales (the flag is additive)."""
    plan = default_plan(256)
    assert plan.public_total and plan.height == len(plan.weights)
    eps = 1.0
    np.testing.assert_array_equal(plan.scales(eps)[:-1],
                                  [2.0 / (eps * w) for w in plan.weights])
    assert plan.scales(eps)[-1] == 2.0 / eps


# ------------------------------------------------------------------------------ the release


@pytest.fixture(scope="module")
def small():
    data = classifier_scores(60, 90, 0.8, rng=1)
    s = np.clip((data.columns["score"] + 4.0) / 10.0, 0.0, 1.0)
    return data.columns["label"], s, np.linspace(0.0, 1.0, 11)


def test_release_noise_has_the_plan_covariance(small) -> None:
    """The class curves are the exact ones plus noise of covariance plan.covariance / n^2
    at eps/2 (sample covariance of R draws: sd sqrt((s_ii s_jj + s_ij^2) / R) for normal
    noise; 5 sd allow for the Laplace tails)."""
    y, s, tau = small
    assert DEFAULT_ROC_CURVE_METHOD == "hierarchical"
    eps, runs, n = 2.0, 2000, y.size
    pos_counts, _ = roc_class_counts(np.asarray(y), np.asarray(s), tau)
    draws = np.empty((runs, tau.size))
    for r in range(runs):
        curve = dp_roc_curve(y, s, epsilon=eps, thresholds=tau, estimator="raw", rng=r)
        draws[r] = curve.positives.values - pos_counts / n
    first = dp_roc_curve(y, s, epsilon=eps, thresholds=tau, estimator="raw", rng=0)
    plan = first.positives.plan
    assert first.positives.method == "hierarchical" and not plan.public_total
    assert first.positives.privacy.epsilon == eps / 2.0
    cov = plan.covariance(eps / 2.0) / n**2
    np.testing.assert_allclose(first.positives.covariance(), cov, rtol=1e-12)
    assert np.abs(draws.mean(axis=0)).max() <= 5.0 * np.sqrt(np.diag(cov).max() / runs)
    empirical = np.cov(draws, rowvar=False)
    sd = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / runs)
    assert np.all(np.abs(empirical - cov) <= 5.0 * sd)


def test_bootstrap_draws_the_hierarchical_noise(small) -> None:
    """The parametric bootstrap's raw areas around the exact class curves have the law of
    the release's raw area: equal means and spreads within 5 Monte Carlo sd (the sd of a
    sample sd of R draws is about sd / sqrt(2 R) for near-normal areas; doubled for the
    difference of two). 003's tree has about 4 times the spread here, so the check fails
    if the bootstrap drew 003's noise."""
    y, s, tau = small
    eps, runs, n = 2.0, 1500, y.size
    pos_counts, neg_counts = roc_class_counts(np.asarray(y), np.asarray(s), tau)
    releases = [dp_roc_curve(y, s, epsilon=eps, thresholds=tau, estimator="raw", rng=r)
                for r in range(runs)]
    direct = np.array([c.auc.diagnostics["raw_auc"] for c in releases])
    one = releases[0]
    boot = _bootstrap_areas("raw", pos_counts / n, neg_counts / n, one.positives,
                            one.negatives, tau, 2, runs)
    sd_direct, sd_boot = direct.std(ddof=1), boot.std(ddof=1)
    tol = 5.0 * math.sqrt(sd_direct**2 / (2 * runs) + sd_boot**2 / (2 * runs))
    assert abs(sd_direct - sd_boot) <= tol
    assert abs(direct.mean() - boot.mean()) <= 5.0 * math.sqrt(
        (sd_direct**2 + sd_boot**2) / runs)
    tree = dp_roc_curve(y, s, epsilon=eps, thresholds=tau, estimator="raw",
                        curve_method="003-tree", rng=0).auc.std_error
    assert tree > sd_direct + tol
    # The exact SE of the raw area (dense covariance) matches the spread, within 15%.
    ses = [_raw_auc_std_error(c.positives.values, c.negatives.values,
                              _noise_law(c.positives), _noise_law(c.negatives))
           for c in releases[:200]]
    assert float(np.mean(ses)) == pytest.approx(sd_direct, rel=0.15)


def test_trace_without_the_dense_matrices(small) -> None:
    """The raw SE's noise-by-noise trace from the plans' covariance operators equals the
    dense ``tr(M S_y M^T S_x)``; the probe estimate used above EXACT_TRACE_POINTS is
    within 5 of its standard deviations ``sqrt(2 (||P_s||_F^2 - sum P_ii^2) / k)``
    (Hutchinson 1989) of it, and the SE with operators equals the dense one."""
    y, s, _ = small
    tau = np.linspace(0.0, 1.0, 40)
    c = dp_roc_curve(y, s, epsilon=0.7, thresholds=tau, estimator="raw", rng=2)
    sx, sy = _noise_law(c.positives), _noise_law(c.negatives)
    dx, dy = (_DenseCovariance(c.positives.covariance()),
              _DenseCovariance(c.negatives.covariance()))
    m = _area_matrix(tau.size)
    p = (m @ (m @ dy.matrix).T).T @ dx.matrix  # M S_y M^T S_x
    exact = float(np.trace(p))
    assert _operator_trace(m, m, sx, sy) == pytest.approx(exact, rel=1e-9)
    probes_k = 400
    probes = np.random.default_rng(0).choice([-1.0, 1.0], size=(probes_k, tau.size))
    sym = 0.5 * (p + p.T)
    sd = math.sqrt(2.0 * (np.sum(sym**2) - np.sum(np.diag(p) ** 2)) / probes_k)
    assert abs(_operator_trace(m, m, sx, sy, probes) - exact) <= 5.0 * sd
    x, z = c.positives.values, c.negatives.values
    assert _raw_auc_std_error(x, z, sx, sy) == pytest.approx(
        _raw_auc_std_error(x, z, dx, dy), rel=1e-9)


def test_smoothed_stays_on_003s_tree(small) -> None:
    """003's smoothing (what reproduce runs, smooth=True) releases 003's tree as before:
    the same release as curve_method='003-tree'."""
    y, s, tau = small
    a = dp_roc_curve(y, s, epsilon=1.0, thresholds=tau, smooth=True, rng=3)
    b = dp_roc_curve(y, s, epsilon=1.0, thresholds=tau, estimator="smoothed",
                     curve_method="003-tree", rng=3)
    assert a.positives.method == "003-tree" and a.positives.plan is None
    np.testing.assert_array_equal(a.tpr, b.tpr)
    assert a.auc.value == b.auc.value
    assert a.auc.diagnostics["curve_method"] == "003-tree"
    default = dp_roc_curve(y, s, epsilon=1.0, thresholds=tau, rng=3)
    assert default.auc.diagnostics["curve_method"] == "hierarchical"


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"curve_method": "dyadic"}, r"curve_method must be one of \('hierarchical', '003-tree'\)"),
    ({"curve_method": "hierarchical", "smooth": True},
     "estimator='smoothed' .* needs curve_method='003-tree'"),
    ({"curve_method": "hierarchical", "estimator": "smoothed"},
     "estimator='smoothed' .* needs curve_method='003-tree'"),
])
def test_curve_method_bad_inputs(small, kwargs, match) -> None:
    y, s, tau = small
    with pytest.raises(ValueError, match=match):
        dp_roc_curve(y, s, epsilon=1.0, thresholds=tau, rng=0, **kwargs)
