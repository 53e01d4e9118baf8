"""Smoothing a private ECDF (003 Sec. 3.2, Eq. 3) and the pointwise isotonic projection."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize
from scipy.sparse.linalg import spsolve

import fedustat.protocols.ecdf.smoothing as smoothing_module
from fedustat.datasets import poisson_ecdf
from fedustat.protocols.ecdf import PrivateECDF, dp_ecdf
from fedustat.protocols.ecdf.smoothing import (
    _dyadic_solve,
    _flow_problem,
    _padded_graph,
    _solve_lp_dyadic,
    _subset_indices,
    isotonic_projection,
    smooth,
    smooth_counts,
)
from fedustat.stats.ecdf import DyadicTree, ecdf


def _poisson_curve(n_points: int, eps: float, seed: int) -> tuple[PrivateECDF, np.ndarray]:
    x = poisson_ecdf(n_points, 3.0, rng=seed).columns["x"]
    tau = np.arange(1, n_points + 1, dtype=float)
    return dp_ecdf(x, tau, epsilon=eps, rng=1000 + seed,
                   method="003-tree"), ecdf(x, tau)


def _reference(curve: PrivateECDF, p: int, subset: np.ndarray | None = None) -> float:
    """Eq. 3 solved directly in the node variables by SLSQP (small N only)."""
    n = curve.n
    idx = np.arange(curve.values.size) if subset is None else subset
    a = curve.tree.matrix(idx).toarray()
    c = curve.counts[idx]
    cons = [{"type": "ineq", "fun": lambda v: np.diff(c + a @ v),
             "jac": lambda v: np.diff(a, axis=0)},
            {"type": "ineq", "fun": lambda v: np.array([c[0] + a[0] @ v, n - c[-1] - a[-1] @ v]),
             "jac": lambda v: np.vstack([a[0], -a[-1]])}]
    k = a.shape[1]
    if p == 2:
        res = minimize(lambda v: v @ v, np.zeros(k), jac=lambda v: 2 * v, constraints=cons,
                       method="SLSQP", options={"ftol": 1e-14, "maxiter": 500})
        return float(res.fun)
    # p = 1 as a smooth problem in (v+, v-) >= 0.
    cons1 = [{"type": "ineq", "fun": (lambda f: (lambda z: f(z[:k] - z[k:])))(g["fun"]),
              "jac": (lambda j: (lambda z: np.hstack([j(z[:k] - z[k:]),
                                                      -j(z[:k] - z[k:])])))(g["jac"])}
             for g in cons]
    res = minimize(lambda z: z.sum(), np.zeros(2 * k), jac=lambda z: np.ones(2 * k),
                   bounds=[(0, None)] * (2 * k), constraints=cons1, method="SLSQP",
                   options={"ftol": 1e-14, "maxiter": 1000})
    return float(res.fun)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("n_points", [6, 8, 13])
def test_optimum_matches_direct_formulation(p, n_points):
    curve, _ = _poisson_curve(n_points, 0.3, seed=n_points)
    res = smooth(curve, p=p)
    assert res.objective == pytest.approx(_reference(curve, p), rel=1e-6, abs=1e-6)
    # The released curve is the noisy one plus the tree correction.
    np.testing.assert_allclose(res.values * curve.n,
                               np.clip(curve.counts + curve.tree.sum_at(res.correction), 0,
                                       curve.n), atol=1e-7 * curve.n)


@pytest.mark.parametrize("p", [1, 2])
def test_subset_optimum_matches_direct_formulation(p):
    curve, _ = _poisson_curve(16, 0.5, seed=3)
    subset = np.array([1, 2, 5, 9, 10, 15])
    res = smooth(curve, p=p, subset=subset)
    np.testing.assert_array_equal(res.indices, subset)
    assert res.objective == pytest.approx(_reference(curve, p, subset), rel=1e-6, abs=1e-6)
    mask = np.zeros(16, dtype=bool)
    mask[subset] = True
    np.testing.assert_allclose(smooth(curve, p=p, subset=mask).values, res.values)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("eps", [0.2, 1.0, 5.0])
def test_smoothed_is_monotone_and_bounded(p, eps):
    curve, _ = _poisson_curve(300, eps, seed=7)
    for subset in (None, np.arange(0, 300, 7)):
        res = smooth(curve, p=p, subset=subset)
        assert np.all(np.diff(res.values) >= 0)
        assert res.values.min() >= 0.0 and res.values.max() <= 1.0
        assert res.privacy == curve.privacy and res.estimator == "tree-noise"
        assert res.diagnostics["max_violation_removed"] < 1e-9


def test_smoothing_reduces_error_on_poisson_data():
    """003 Sec. 6.3 / Fig. 2: at lambda = 3 the ratio ||F_tilde - F|| / ||F_hat - F|| is
    below 1 for p = 2 (and p = 1) at eps = 1. Checked as mean + 5 standard errors < 1,
    the standard error estimated from the replicates."""
    ratios = {1: [], 2: []}
    for seed in range(12):
        curve, exact = _poisson_curve(512, 1.0, seed)
        den = np.linalg.norm(curve.values - exact)
        for p in (1, 2):
            ratios[p].append(np.linalg.norm(smooth(curve, p=p).values - exact) / den)
    for p in (1, 2):
        r = np.array(ratios[p])
        assert r.mean() + 5 * r.std(ddof=1) / math.sqrt(r.size) < 1.0


def test_cvxopt_paper_formulation_agrees():
    pytest.importorskip("cvxopt")
    curve, _ = _poisson_curve(256, 1.0, seed=2)
    for p, rtol in ((2, 1e-6), (1, 1e-6)):
        ours = smooth(curve, p=p)
        paper = smooth(curve, p=p, method="cvxopt")
        assert ours.objective == pytest.approx(paper.objective, rel=rtol)
        assert np.all(np.diff(paper.values) >= 0)
    # CVXOPT stops at a relative gap of 1e-6 (its default); ours is exact, so the unique
    # p = 2 curves agree to the interior-point tolerance only.
    np.testing.assert_allclose(smooth(curve, p=2).values,
                               smooth(curve, p=2, method="cvxopt").values, atol=5e-4)


@pytest.mark.parametrize("n_points", [1, 2, 3, 7, 16, 33, 1000, 1023])
def test_dyadic_solver_matches_sparse_direct_solve(n_points):
    tree = DyadicTree(n_points)
    _, start, stop = tree.node_bounds()
    edges = start.size
    inc = sp.csr_matrix((np.r_[np.ones(edges), -np.ones(edges)],
                         (np.r_[start, stop], np.r_[np.arange(edges), np.arange(edges)])),
                        shape=(n_points + 1, edges))
    lap = (inc @ inc.T).tocsc()
    rng = np.random.default_rng(n_points)
    for _ in range(3):
        free = rng.random(n_points + 1) < 0.7
        free[rng.integers(0, n_points + 1)] = False  # a proper subset, as in the LCP
        rhs = rng.normal(size=n_points + 1)
        got = _dyadic_solve(n_points, free, rhs, lap.diagonal())
        idx = np.flatnonzero(free)
        want = np.zeros(n_points + 1)
        if idx.size:
            want[idx] = spsolve(lap[idx][:, idx].tocsc(), rhs[idx])
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_tree_qp_is_not_an_isotonic_regression():
    """A single violation between points 1 and 2 (N = 4): the tree-noise solution also
    moves points 0 and 3 through the nodes they share; any weighted isotonic regression,
    in particular the pointwise projection, leaves those singleton blocks unchanged."""
    tree = DyadicTree(4)
    counts = np.array([10.0, 30.0, 20.0, 40.0])
    _, smoothed, nu, _ = smooth_counts(counts, tree, 100, p=2)
    # Closed form: only increment 2 is active, Lap_22 = degree 4, mu = 10 / 4.
    np.testing.assert_allclose(smoothed, [7.5, 25.0, 25.0, 42.5])
    assert np.sum(nu**2) == pytest.approx(4 * 2.5**2)
    curve = PrivateECDF(np.arange(4.0), counts / 100, 100, tree, 1.0, "laplace",
                        dp_ecdf([0.0], [0.0], epsilon=1.0, rng=0).privacy, "simulation")
    iso = isotonic_projection(curve)
    np.testing.assert_allclose(iso.values * 100, [10.0, 25.0, 25.0, 40.0])
    assert iso.estimator == "isotonic-projection" and iso.correction is None


def test_isotonic_projection_is_the_box_projection():
    rng = np.random.default_rng(8)
    vals = np.cumsum(rng.normal(0.05, 0.2, 12)) - 0.3
    tree = DyadicTree(vals.size)
    curve = PrivateECDF(np.arange(12.0), vals, 50, tree, 1.0, "laplace",
                        dp_ecdf([0.0], [0.0], epsilon=1.0, rng=0).privacy, "simulation")
    res = isotonic_projection(curve)
    ref = minimize(lambda g: np.sum((g - vals) ** 2), np.clip(np.sort(vals), 0, 1),
                   jac=lambda g: 2 * (g - vals), bounds=[(0, 1)] * 12,
                   constraints=[{"type": "ineq", "fun": np.diff,
                                 "jac": lambda g: np.diff(np.eye(12), axis=0)}],
                   method="SLSQP", options={"ftol": 1e-15, "maxiter": 500})
    np.testing.assert_allclose(res.values, ref.x, atol=1e-6)


def test_exact_curve_is_unchanged_and_deterministic():
    x = poisson_ecdf(64, 3.0, rng=1).columns["x"]
    tau = np.arange(1, 65, dtype=float)
    exact = dp_ecdf(x, tau, epsilon=math.inf)
    res = smooth(exact, p=2)
    np.testing.assert_allclose(res.values, exact.values, atol=1e-15)
    assert res.objective == 0.0 and res.iterations == 0
    curve, _ = _poisson_curve(64, 1.0, seed=4)
    np.testing.assert_array_equal(smooth(curve, 1).values, smooth(curve, 1).values)
    assert curve(0.5) == 0.0 and res(64.0) == pytest.approx(1.0)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"p": 3}, "p must be 1 or 2"),
    ({"p": 1, "method": "active-set"}, "solves p = 2 only"),
    ({"p": 2, "method": "highs"}, "solves p = 1 only"),
    ({"p": 2, "method": "dyadic-dp"}, "solves p = 1 only"),
    ({"p": 2, "method": "gurobi"}, "method must be"),
    ({"p": 2, "subset": np.array([], dtype=int)}, "subset"),
    ({"p": 2, "subset": np.array([0, 99])}, "subset positions must be in"),
    ({"p": 2, "subset": np.ones(3, dtype=bool)}, "boolean mask must have shape"),
])
def test_smooth_bad_inputs(kwargs, match):
    curve, _ = _poisson_curve(10, 1.0, seed=0)
    with pytest.raises(ValueError, match=match):
        smooth(curve, **kwargs)


# ---- p = 1: the exact dynamic program over the dyadic tree vs HiGHS on the flow LP ----

def _random_instance(rng: np.random.Generator, max_points: int
                     ) -> tuple[np.ndarray, DyadicTree, int, np.ndarray | None]:
    """Noisy counts of several kinds (continuous noise, integer noise with many ties,
    a lone negative step), N not only powers of two, and B the whole grid, integer
    positions or a boolean mask."""
    n_points = int(rng.integers(1, max_points + 1))
    n = int(rng.integers(1, 200))
    kind = rng.integers(0, 3)
    if kind == 0:
        counts = np.sort(rng.uniform(0, n, n_points)) + rng.laplace(
            0, rng.uniform(0.1, 50), n_points)
    elif kind == 1:
        counts = (np.sort(rng.integers(0, n + 1, n_points))
                  + rng.integers(-10, 11, n_points)).astype(float)
    else:
        counts = np.full(n_points, float(n))
        counts[rng.integers(0, n_points)] = -rng.uniform(1, 3 * n)
    subset: np.ndarray | None = None
    draw = rng.random()
    if draw < 0.3:
        subset = rng.integers(0, n_points, rng.integers(1, n_points + 1))
    elif draw < 0.5:
        subset = rng.random(n_points) < 0.5
        subset[rng.integers(0, n_points)] = True
    return counts, DyadicTree(n_points), n, subset


def test_p1_dynamic_program_matches_highs_on_random_instances():
    """Same optimum as HiGHS (dual simplex, a vertex of the LP) to 1e-9 relative, on 400
    seeded instances; the p = 1 optimum need not be unique, so objectives are compared.
    The solver's own certificate (dual value = primal cost) holds on each."""
    rng = np.random.default_rng(2024)
    for _ in range(400):
        counts, tree, n, subset = _random_instance(rng, 70)
        idx, dp_curve, _, info = smooth_counts(counts, tree, n, p=1, subset=subset)
        _, _, _, ref = smooth_counts(counts, tree, n, p=1, subset=subset,
                                     method="highs")
        assert info["method"] == "dyadic-dp" and "fallback" not in info
        scale = max(1.0, ref["objective"])
        assert abs(info["objective"] - ref["objective"]) <= 1e-9 * scale
        assert info["max_violation_removed"] <= 1e-9 * max(1.0, np.abs(counts).max(), n)
        assert np.all(np.diff(dp_curve) >= 0) and dp_curve.min() >= 0 and dp_curve.max() <= n
        problem = _flow_problem(counts, tree, n, idx)
        flow, _, optimum = _solve_lp_dyadic(problem, tree, idx)
        assert abs(optimum - np.abs(flow).sum()) <= 1e-9 * scale


@settings(deadline=None, max_examples=80, derandomize=True)
@given(st.lists(st.integers(-6, 12), min_size=1, max_size=24), st.integers(1, 15),
       st.lists(st.booleans(), min_size=24, max_size=24))
def test_p1_dynamic_program_property_integer_counts(steps, n, mask):
    """Integer data (degenerate LPs with many optimal vertices) and arbitrary subsets."""
    counts = np.cumsum(np.asarray(steps, dtype=float))
    tree = DyadicTree(counts.size)
    subset = np.asarray(mask[:counts.size])
    subset = subset if subset.any() else None
    _, _, _, info = smooth_counts(counts, tree, n, p=1, subset=subset)
    _, _, _, ref = smooth_counts(counts, tree, n, p=1, subset=subset, method="highs")
    assert info["method"] == "dyadic-dp"
    assert info["objective"] == pytest.approx(ref["objective"], rel=1e-9, abs=1e-9)


def test_p1_larger_grids_match_highs():
    """N = 1000 and 2^11 + 3 (padding beyond N), whole grid and a sparse subset."""
    rng = np.random.default_rng(11)
    for n_points in (1000, 2**11 + 3):
        curve, _ = _poisson_curve(n_points, 0.5, seed=n_points)
        for subset in (None, np.sort(rng.choice(n_points, n_points // 10, replace=False))):
            ours = smooth(curve, p=1, subset=subset)
            ref = smooth(curve, p=1, subset=subset, method="highs")
            assert ours.method == "dyadic-dp"
            assert ours.objective == pytest.approx(ref.objective, rel=1e-9)
            assert ours.diagnostics["max_violation_removed"] < 1e-9


def test_p1_closed_form_single_violation():
    """N = 4, counts 10, 30, 20, 40 of n = 100: increments (10, 20, -10, 20, 60). The
    deficit of 10 at increment 2 has supplies one node away (nodes [1, 2), [2, 3),
    [0, 2), [2, 4) all touch it), so the optimum is 10."""
    _, smoothed, nu, info = smooth_counts(np.array([10.0, 30.0, 20.0, 40.0]), DyadicTree(4),
                                          100, p=1)
    assert info["objective"] == pytest.approx(10.0, abs=1e-12)
    assert np.abs(nu).sum() == pytest.approx(10.0, abs=1e-12)
    assert np.all(np.diff(smoothed) >= 0)


def test_p1_exact_curve_is_unchanged():
    x = poisson_ecdf(100, 3.0, rng=5).columns["x"]
    exact = dp_ecdf(x, np.arange(1, 101, dtype=float), epsilon=math.inf)
    res = smooth(exact, p=1)
    assert res.objective == 0.0 and res.method == "dyadic-dp"
    np.testing.assert_allclose(res.values, exact.values, atol=1e-15)


def test_p1_label_bound_is_raised_until_inactive(monkeypatch):
    """With a first label bound of 1 the program must enlarge it (the optimum uses
    labels >= 1 here); the result is still HiGHS's optimum."""
    curve, _ = _poisson_curve(512, 0.2, seed=9)
    ref = smooth(curve, p=1, method="highs")
    monkeypatch.setattr(smoothing_module, "_DP_FIRST_BOUND", 1)
    res = smooth(curve, p=1)
    assert res.method == "dyadic-dp" and res.iterations >= 2
    assert res.objective == pytest.approx(ref.objective, rel=1e-9)


def test_p1_falls_back_to_highs_when_certificate_fails(monkeypatch):
    curve, _ = _poisson_curve(64, 0.5, seed=1)
    ref = smooth(curve, p=1, method="highs")

    def wrong(problem, tree, idx):  # a zero flow is infeasible on this noisy curve
        return np.zeros(problem.nodes.size), 1, 0.0

    monkeypatch.setattr(smoothing_module, "_solve_lp_dyadic", wrong)
    res = smooth(curve, p=1)
    assert res.method == "highs" and "infeasible" in res.diagnostics["fallback"]
    assert res.objective == pytest.approx(ref.objective, rel=1e-12)


def test_padded_graph_embeds_the_flow_problem():
    """Cost-1 edges of the padded graph are exactly the kept nodes, the supplies add up
    to n, and vertices beyond N or inside a group carry none."""
    tree = DyadicTree(11)
    counts = np.arange(1.0, 12.0)
    for subset in (None, np.array([0, 3, 4, 9])):
        idx = _subset_indices(subset, 11)
        problem = _flow_problem(counts, tree, 20, idx)
        graph = _padded_graph(problem, tree, idx)
        assert graph.depth == tree.depth and graph.supply.size == 2**tree.depth + 1
        assert graph.supply.sum() == pytest.approx(20.0)
        assert np.count_nonzero(graph.supply) <= idx.size + 1
        assert sum(int(u.sum()) for u in graph.unit) == problem.nodes.size
        assert not graph.unit[0][11:].any()


def test_p1_matches_cvxopt_paper_solver_at_4096_points():
    """003 Sec. 6.7's CVXOPT LP on Eq. 3 as written: same optimum to its 1e-6 gap."""
    pytest.importorskip("cvxopt")
    curve, _ = _poisson_curve(4096, 1.0, seed=12)
    ours = smooth(curve, p=1)
    paper = smooth(curve, p=1, method="cvxopt")
    assert ours.objective == pytest.approx(paper.objective, rel=1e-6)
