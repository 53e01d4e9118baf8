"""Smoothing a private ECDF into a non-decreasing curve in [0, 1] (003 Sec. 3.2, Eq. 3).

Two different estimators live here; they answer different questions.

* :func:`smooth` is 003's estimator. Among all curves ``G`` that are non-decreasing on
  the chosen points ``B`` with ``0 <= G <= 1``, it finds the one that differs from the
  noisy curve ``F_hat`` by the *smallest tree noise*: ``G = F_hat + A nu / n`` for a
  vector ``nu`` with one entry per dyadic node (``A`` the point-by-node 0/1 matrix of
  :class:`~fedustat.stats.ecdf.DyadicTree`), minimizing ``||nu||_p``. ``p = 1`` is the
  most likely Laplace noise (its log-density is ``-||eta||_1 / b``), ``p = 2`` the least
  squares version. The distance is measured in the noise variables, not pointwise.
* :func:`isotonic_projection` is the cheaper pointwise estimator: the Euclidean
  projection of ``F_hat`` on non-decreasing curves in ``[0, 1]``
  (``scipy.optimize.isotonic_regression`` then clipping, which is that projection exactly).

Reformulation used by both solvers of Eq. 3 (derived here; 003 states the problem only).
Work in counts, ``c_hat = n F_hat`` with the bounds ``0 <= g <= n``, on the points
``b_0 < ... < b_{m-1}`` of ``B``. Write the curve by its increments ``d_k = g(b_k) -
g(b_{k-1})`` for ``k = 0 .. m`` with the fixed ends ``g(b_{-1}) = 0`` and ``g(b_m) = n``;
Eq. 3's constraints (monotone on B, ``G(min B) >= 0``, ``G(max B) <= 1``) say exactly
``d >= 0``. A node covering grid points ``[s, e)`` covers the contiguous run of points
of ``B`` with ``u = #{b in B : b < s}`` and ``v = #{b in B : b < e}``; adding ``nu`` to it
raises ``d_u`` by ``nu`` and lowers ``d_v`` by ``nu``. So the node is an *edge* ``(u, v)``
of a graph on the ``m + 1`` increments and ``nu`` a flow on it (nodes with ``u = v``
cover no point of ``B`` and drop out: their optimal ``nu`` is 0). With ``M`` the
vertex-edge incidence matrix, Eq. 3 reads

    minimize ||nu||_p   subject to   d_hat + M nu >= 0.

* ``p = 1`` is an uncapacitated min-cost transshipment on the node graph. Its dual
  labels the increments with integers ``mu >= 0`` that change by at most 1 along each
  node; the node graph is the dyadic series-parallel graph (each node is an edge in
  parallel with its two children's path), so a dynamic program over the tree finds
  optimal labels and a flow meeting the complementary-slackness conditions with them,
  exactly, in O(N T) for a small label bound T (:func:`_solve_lp_dyadic`, with the
  proof). HiGHS on the LP (``scipy.optimize.linprog``) remains as ``method="highs"``.
* ``p = 2``: the KKT conditions are ``nu = M^T mu`` with ``mu >= 0`` and
  ``w = d_hat + Lap mu >= 0``, ``mu^T w = 0``, where ``Lap = M M^T`` is the graph
  Laplacian of the node graph. This is a linear complementarity problem LCP(d_hat, Lap)
  whose matrix is a Z-matrix (off-diagonals <= 0). See :func:`_solve_qp_active_set` for
  the exact finite algorithm used and its proof.

Is the ``p = 2`` problem a weighted isotonic regression after a change of variables? No.
In curve coordinates it is ``min (g - c_hat)^T K^{-1} (g - c_hat)`` over the monotone
box, ``K = A A^T`` with ``K_{ii'}`` the number of nodes covering both points; ``K^{-1}`` is
not diagonal, and the linear maps that send the monotone cone onto a monotone cone only
rescale and shift (``g -> a g + b 1``, ``a > 0``) or permute the increments, so they
cannot make the metric diagonal. Equivalently: weighted isotonic regression is this flow
problem on a *path* graph (the leaves alone, conductance = weight), and the node graph is
not a path (it has the dyadic long edges). Concretely (N = 4, no bounds active), fixing a
single violation between points 1 and 2 moves points 0 and 3 as well, through the nodes
shared with them, which no weighted isotonic regression does; the test suite checks a
case of this. What carries over from isotonic regression is the M-matrix structure,
which gives the monotone active-set algorithm below.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import check_positive_int
from fedustat.privacy.guarantee import PrivacyGuarantee
from fedustat.protocols.ecdf.release import PrivateECDF
from fedustat.stats.ecdf import DyadicTree, step_at

sp = lazy_module("scipy.sparse")
_optimize = lazy_module("scipy.optimize")
_sparse_linalg = lazy_module("scipy.sparse.linalg")

__all__ = [
    "SmoothedECDF",
    "isotonic_projection",
    "project_to_cdf",
    "smooth",
    "smooth_counts",
]

Method = Literal["auto", "active-set", "dyadic-dp", "highs", "cvxopt"]

# Feasibility slack accepted from a solver, relative to the largest |increment|.
_FEAS_RTOL = 1e-9


@dataclass(frozen=True)
class SmoothedECDF:
    """A private ECDF made non-decreasing in ``[0, 1]`` on the points ``indices``.

    Attributes
    ----------
    thresholds, values:
        The thresholds of ``B`` and the smoothed curve there.
    raw_values:
        The noisy curve ``F_hat`` at the same thresholds.
    indices:
        Positions of ``B`` in the original threshold grid.
    n:
        Number of records (public).
    p:
        Norm of Eq. 3 (1 or 2); ``None`` for :func:`isotonic_projection`.
    estimator:
        ``"tree-noise"`` (003 Eq. 3) or ``"isotonic-projection"`` (pointwise).
    correction:
        The node corrections ``nu`` (in counts), indexed by ``tree`` node; zero for nodes
        that cover no point of ``B``. ``None`` for the pointwise projection.
    objective:
        ``sum |nu|^p`` in counts (Eq. 3's objective to the power p); for the pointwise
        projection ``sum (G - F_hat)^2`` in counts.
    method, iterations, seconds:
        Solver used, its iteration count (active-set rounds, passes of the p = 1 dynamic
        program, simplex or interior-point iterations) and wall time.
    privacy:
        The guarantee of the curve it came from (smoothing is post-processing).
    """

    #: Fields that depend on the data: computed from the private curve alone (including the
    #: solver's time).
    released_fields: ClassVar[tuple[str, ...]] = ("values", "raw_values", "objective",
                                                  "correction", "iterations", "seconds",
                                                  "diagnostics.*")

    thresholds: np.ndarray
    values: np.ndarray
    raw_values: np.ndarray
    indices: np.ndarray
    n: int
    p: int | None
    estimator: str
    correction: np.ndarray | None
    objective: float
    method: str
    iterations: int
    seconds: float
    privacy: PrivacyGuarantee
    diagnostics: dict[str, Any] = field(default_factory=dict)
    #: Where the smoothed curve's noise came from (post-processing keeps the label).
    noise_kind: str = "simulation"

    def __call__(self, t: Any) -> np.ndarray:
        """Right-continuous step evaluation: the value at the largest threshold ``<= t``
        (0 below the first threshold)."""
        return step_at(self.thresholds, self.values, t)

    @property
    def linear(self) -> bool:
        """False: a projection is not a linear function of the noise (and is biased)."""
        return False

    def covariance(self) -> np.ndarray:
        raise ValueError("a smoothed curve is not linear in the noise, so it has no noise "
                         "covariance; use the raw PrivateECDF (unbiased) for variances")

    def linear_variance(self, weights: Any) -> np.ndarray | float:
        raise ValueError("a smoothed curve is not linear in the noise, so w^T Cov w is not "
                         "its variance; use the raw PrivateECDF (unbiased) for variances")


def _subset_indices(subset: Any, n_points: int) -> np.ndarray:
    if subset is None:
        return np.arange(n_points, dtype=np.int64)
    arr = np.asarray(subset)
    if arr.dtype == bool:
        if arr.shape != (n_points,):
            raise ValueError(f"subset as a boolean mask must have shape ({n_points},), "
                             f"got {arr.shape}")
        idx = np.flatnonzero(arr)
    else:
        if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError("subset must be a boolean mask or a non-empty 1-D array of "
                             "integer grid positions")
        idx = np.unique(arr.astype(np.int64))
        if idx[0] < 0 or idx[-1] >= n_points:
            raise ValueError(f"subset positions must be in [0, {n_points - 1}]")
    if idx.size == 0:
        raise ValueError("subset selects no point; choose at least one grid position")
    return idx


@dataclass(frozen=True)
class _FlowProblem:
    """Eq. 3 as a flow problem on the increments (see the module docstring)."""

    d_hat: np.ndarray  # m + 1 increments of the noisy counts (may be negative)
    tail: np.ndarray  # edge (u, v) per kept node: nu raises d_u ...
    head: np.ndarray  # ... and lowers d_v
    nodes: np.ndarray  # flat tree index of each kept node
    n_nodes: int
    full_grid: bool  # B is every grid point: the graph is the full dyadic one

    @property
    def n_vertices(self) -> int:
        return self.d_hat.size

    def incidence(self) -> sp.csr_matrix:
        n_edges = self.tail.size
        rows = np.concatenate([self.tail, self.head])
        cols = np.concatenate([np.arange(n_edges), np.arange(n_edges)])
        data = np.concatenate([np.ones(n_edges), -np.ones(n_edges)])
        return sp.csr_matrix((data, (rows, cols)), shape=(self.n_vertices, n_edges))

    def increments(self, flow: np.ndarray) -> np.ndarray:
        d = self.d_hat.copy()
        np.add.at(d, self.tail, flow)
        np.subtract.at(d, self.head, flow)
        return d


def _flow_problem(counts: np.ndarray, tree: DyadicTree, n: int,
                  idx: np.ndarray) -> _FlowProblem:
    _, start, stop = tree.node_bounds()
    u = np.searchsorted(idx, start, side="left")
    v = np.searchsorted(idx, stop, side="left")
    keep = u < v
    c_b = counts[idx]
    d_hat = np.diff(np.concatenate([[0.0], c_b, [float(n)]]))
    return _FlowProblem(d_hat, u[keep], v[keep], np.flatnonzero(keep), tree.n_nodes,
                        idx.size == tree.n_points)


def _solve_qp_active_set(problem: _FlowProblem) -> tuple[np.ndarray, int]:
    """Exact p = 2 solution by the block principal-pivoting (Chandrasekaran) method.

    Solves LCP(q, Lap): find ``mu >= 0`` with ``w = Lap mu + q >= 0`` and ``mu^T w = 0``,
    ``q = d_hat``, ``Lap = M M^T`` (a graph Laplacian: a symmetric Z-matrix, positive
    definite on every proper principal submatrix of a connected graph). Then
    ``nu = M^T mu`` is the unique minimizer of ``||nu||^2`` s.t. ``d_hat + M nu >= 0``.

    Algorithm: ``S_0 = {}``, ``mu^0 = 0``; repeat: ``V = {i not in S : w_i(mu^k) < 0}``;
    stop if empty; ``S_{k+1} = S_k ∪ V``; ``mu^{k+1}`` solves ``Lap_SS mu_S = -q_S``,
    zero elsewhere.

    Proof of exactness and finiteness. Let ``mu*`` solve the LCP, ``w* = Lap mu* + q`` and
    ``J = {i : w*_i = 0}`` (so ``supp mu* ⊆ J``). ``J`` is a proper subset: ``1^T Lap = 0``
    gives ``1^T w* = 1^T q = n > 0``. Claim: ``S_k ⊆ J`` and ``0 <= mu^k <= mu*``.
    (i) If ``S ⊆ J``: ``Lap_SS mu*_S = -q_S - Lap_{S,S^c} mu*_{S^c} >= -q_S`` because
    off-diagonals are ``<= 0`` and ``mu* >= 0``; ``Lap_SS`` is a non-singular M-matrix
    (proper principal submatrix of a connected Laplacian), so ``Lap_SS^{-1} >= 0``
    entrywise and ``mu*_S >= Lap_SS^{-1}(-q_S) = mu^S_S``; outside S, ``mu^S = 0 <= mu*``.
    (ii) If ``i`` is not in S and ``w_i(mu^S) < 0``: since ``mu^S_i = 0`` and
    ``Lap_ij <= 0``, ``mu*_j >= mu^S_j`` for ``j != i``,
    ``w*_i <= Lap_ii mu*_i + w_i(mu^S) < Lap_ii mu*_i``; ``w*_i >= 0`` forces
    ``mu*_i > 0``, so ``i ∈ supp mu* ⊆ J``. Hence every ``S_k ⊆ J``.
    (iii) Non-negativity: ``Lap_{S'S'}(mu^{S'} - mu^S)_{S'} = -w_{S'}(mu^S)``, which is 0 on
    S and ``> 0`` on V, so ``mu^{S'} >= mu^S >= ... >= mu^0 = 0``.
    S grows strictly each round and stays inside the proper subset J, so the loop stops
    after at most ``m`` rounds; at the stop ``mu >= 0``, ``w >= 0``, ``w_S = 0`` and
    ``mu_{S^c} = 0``: the LCP solution, and by convexity the optimum. Each round is one
    direct solve: :func:`_dyadic_solve` in O(N) when B is the whole grid, SuperLU on the
    contracted graph of a subset. In practice 4-8 rounds suffice (measured in
    benchmarks/bench_ecdf.py).
    """
    q = problem.d_hat
    n_vertices = problem.n_vertices
    incidence = problem.incidence()
    incidence_t = incidence.T.tocsr()
    degree = np.bincount(problem.tail, minlength=n_vertices) + np.bincount(
        problem.head, minlength=n_vertices)
    lap = None if problem.full_grid else (incidence @ incidence_t).tocsr()
    scale = max(1.0, float(np.abs(q).max()))
    tol = _FEAS_RTOL * scale
    active = np.zeros(n_vertices, dtype=bool)
    mu = np.zeros(n_vertices)
    w = q.copy()
    rounds = 0
    while True:
        violated = (w < -tol) & ~active
        if not violated.any():
            break
        rounds += 1
        active |= violated
        idx = np.flatnonzero(active)
        if idx.size == n_vertices:  # impossible in exact arithmetic (J is proper)
            raise RuntimeError("active-set smoothing lost feasibility; the noisy curve has "
                               "inconsistent values")
        if problem.full_grid:
            mu = _dyadic_solve(n_vertices - 1, active, -q, degree)
        else:
            sub = lap[idx][:, idx].tocsc()
            lu = _sparse_linalg.splu(sub, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                      options={"SymmetricMode": True})
            mu = np.zeros(n_vertices)
            mu[idx] = lu.solve(-q[idx])
        w = incidence @ (incidence_t @ mu) + q
    flow = incidence_t @ mu
    return np.asarray(flow), rounds


def _dyadic_solve(n_points: int, free: np.ndarray, rhs: np.ndarray,
                  degree: np.ndarray) -> np.ndarray:
    """Solve ``Lap_SS x_S = rhs_S`` exactly in O(N) on the full dyadic node graph.

    Vertices are the increments ``0 .. N``; node ``(l, j)`` is the edge
    ``(j 2^l, min((j+1) 2^l, N))``. Gaussian elimination in the order of the vertices'
    2-adic valuation (odd vertices first, then odd multiples of 2, ...; 0 and N last)
    creates no fill beyond the existing edges: when the odd multiples of ``2^r`` are
    eliminated, each is joined only to its two lattice neighbours ``v ± 2^r`` (every edge
    of a level ``<= r`` joins consecutive multiples of ``2^l``, and those of lower levels
    were folded into these couplings in earlier rounds), and the fill edge between
    ``v - 2^r`` and ``v + 2^r`` runs parallel to the level ``r + 1`` edge there. So every
    round is one vectorized cyclic-reduction step (vertices eliminated in a round are
    never adjacent). Vertices outside S are grounded (``x = 0``): their couplings are
    zero and their own equation is ``x = 0``; edges to them stay in the diagonal.
    Elimination without pivoting is stable here because ``Lap_SS`` is symmetric
    positive definite.
    """
    diag = np.where(free, degree, 1.0).astype(np.float64)
    b = np.where(free, rhs, 0.0).astype(np.float64)
    pts = np.arange(n_points + 1)
    link = np.where(free[:-1] & free[1:], -1.0, 0.0)  # level-0 edges (k, k + 1)
    eliminated = []
    while pts.size > 2:
        size = pts.size
        odd = np.arange(1, size - 1, 2)  # odd multiples of 2^r below N
        left, right = link[odd - 1], link[odd]
        d = diag[pts[odd]]
        bv = b[pts[odd]]
        a_pts, c_pts = pts[odd - 1], pts[odd + 1]
        diag[a_pts] -= left * left / d
        diag[c_pts] -= right * right / d
        b[a_pts] -= left * bv / d
        b[c_pts] -= right * bv / d
        eliminated.append((pts[odd], a_pts, c_pts, left, right, d))
        fill = -left * right / d
        keep = np.arange(0, size, 2)
        if keep[-1] != size - 1:  # N sits at an odd position: it is kept, not eliminated
            keep = np.append(keep, size - 1)
        gap = np.diff(keep)
        carried = np.where(gap == 2, fill[np.minimum(keep[:-1] // 2, fill.size - 1)],
                           link[keep[:-1]]) if fill.size else link[keep[:-1]]
        pts = pts[keep]
        # The next level's edges join consecutive points of the coarser lattice.
        link = carried + np.where(free[pts[:-1]] & free[pts[1:]], -1.0, 0.0)
    x = np.zeros(n_points + 1)
    p0, p1 = pts
    det = diag[p0] * diag[p1] - link[0] ** 2
    x[p0] = (diag[p1] * b[p0] - link[0] * b[p1]) / det
    x[p1] = (diag[p0] * b[p1] - link[0] * b[p0]) / det
    for v, a_pts, c_pts, left, right, d in reversed(eliminated):
        x[v] = (b[v] - left * x[a_pts] - right * x[c_pts]) / d
    return np.where(free, x, 0.0)


# First label bound of the p = 1 dynamic program (doubled while the optimum reaches it).
# Largest optimal label measured on 003's Poisson data, N = 2^16, eps = 0.05 .. 50: 9.
_DP_FIRST_BOUND = 12


@dataclass(frozen=True)
class _PaddedGraph:
    """The p = 1 flow graph embedded in the full dyadic graph on ``0 .. 2^L``.

    Edge ``(l, j)`` joins ``j 2^l`` and ``(j + 1) 2^l``; it costs 1 when it is a kept node
    of :class:`_FlowProblem` and 0 otherwise (it then lies inside one group of grid
    vertices that B merges, or beyond N). ``supply`` puts ``d_hat_u`` on the first vertex
    of group ``u`` and 0 elsewhere.
    """

    supply: np.ndarray
    unit: list[np.ndarray]  # per level l: which edges (l, j) cost 1

    @property
    def depth(self) -> int:
        return len(self.unit) - 1


def _padded_graph(problem: _FlowProblem, tree: DyadicTree, idx: np.ndarray) -> _PaddedGraph:
    size = 1 << tree.depth
    # Grid vertex k (the increment between points k - 1 and k) lies in group
    # #{b in B : b < k}; vertices beyond N join the last group.
    group = np.searchsorted(idx, np.arange(size + 1), side="left")
    supply = np.zeros(size + 1)
    supply[np.concatenate([[0], idx + 1])] = problem.d_hat
    unit = []
    for lev in range(tree.depth + 1):
        start = np.arange(size >> lev) << lev
        unit.append(group[start] < group[start + (1 << lev)])
    return _PaddedGraph(supply, unit)


def _dp_tables(graph: _PaddedGraph, bound: int
               ) -> tuple[list[np.ndarray | None], np.ndarray]:
    """Bottom-up pass: ``tables[l][delta + 1, x + 1, j] = g_S(x, x + delta)`` for the
    level-l segments ``S = [j 2^l, (j + 1) 2^l]``, labels ``x`` in ``-1 .. bound + 1``.

    ``g_S(x, z)`` is the least ``sum D_k mu_k`` over the labels ``mu_k`` in
    ``0 .. bound`` of the vertices strictly inside S, given the end labels ``x`` and
    ``z``, with ``|mu_u - mu_v| <= w_e`` on the edges inside S (``+inf`` if none exist).
    Returns the tables and the root's. Leaves (level 0, one edge) are not kept, as their
    ``g`` is 0 on the strip ``|x - z| <= w_e`` (see :func:`_g_at`); this saves a third of
    the memory.
    """
    n_labels = bound + 3
    label = np.arange(n_labels, dtype=np.float64) - 1.0
    leaf = np.zeros((3, n_labels, graph.unit[0].size))
    leaf[0, 0] = np.inf  # z = x - 1 = -2 is off the table
    leaf[2, -1] = np.inf  # z = x + 1 = bound + 2 is off the table
    leaf[0][:, ~graph.unit[0]] = np.inf
    leaf[2][:, ~graph.unit[0]] = np.inf
    tables: list[np.ndarray | None] = [None]
    child = leaf
    for lev in range(graph.depth):
        left, right = child[:, :, 0::2], child[:, :, 1::2]
        n_seg = left.shape[2]
        mid = graph.supply[(2 * np.arange(n_seg) + 1) << lev]
        table = np.full((3, n_labels, n_seg), np.inf)
        # g_S(x, z) = [|x - z| <= w_S] + min_y g_L(x, y) + D_c y + g_R(y, z), with
        # y = x + dy in 0 .. bound and z - y = delta - dy in {-1, 0, 1}.
        for delta in (-1, 0, 1):
            for dy in (-1, 0, 1):
                dz = delta - dy
                if abs(dz) > 1:
                    continue
                lo, hi = max(0, 1 - dy), min(n_labels, bound + 2 - dy)
                term = (left[dy + 1, lo:hi] + right[dz + 1, lo + dy:hi + dy]
                        + label[lo + dy:hi + dy, None] * mid)
                np.minimum(table[delta + 1, lo:hi], term, out=table[delta + 1, lo:hi])
        table[0][:, ~graph.unit[lev + 1]] = np.inf
        table[2][:, ~graph.unit[lev + 1]] = np.inf
        tables.append(table)
        child = table
    return tables, child


def _g_at(table: np.ndarray | None, unit: np.ndarray, n_labels: int, seg: np.ndarray,
          x: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``g_S(x, z)`` at label indices ``x``, ``z`` (label + 1) of segments ``seg``."""
    delta = z - x
    ok = (np.abs(delta) <= unit[seg]) & (x >= 0) & (x < n_labels) & (z >= 0) & (z < n_labels)
    out = np.full(seg.shape, np.inf)
    out[ok] = 0.0 if table is None else table[delta[ok] + 1, x[ok], seg[ok]]
    return out


def _hexagon(table: np.ndarray | None, unit: np.ndarray, n_labels: int, seg: np.ndarray,
             x: np.ndarray, z: np.ndarray) -> list[np.ndarray]:
    """Bounds ``[lo_x, hi_x, lo_z, hi_z, lo_sum, hi_sum]`` of the subdifferential of
    ``G_S`` at the integer point ``(x, z)``: ``s`` is a subgradient iff
    ``s . r <= g(p + r) - g(p)`` for the six rays ``r = ±e_x, ±e_z, ±(e_x + e_z)``."""
    g0 = _g_at(table, unit, n_labels, seg, x, z)

    def g(dx: int, dz: int) -> np.ndarray:
        return _g_at(table, unit, n_labels, seg, x + dx, z + dz)

    return [g0 - g(-1, 0), g(1, 0) - g0, g0 - g(0, -1), g(0, 1) - g0,
            g0 - g(-1, -1), g(1, 1) - g0]


def _pick(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """A point of ``[lo, hi]`` (the one nearest 0; ``hi`` if round-off crossed them)."""
    return np.minimum(np.maximum(0.0, lo), hi)


def _dp_flows(graph: _PaddedGraph, tables: list[np.ndarray | None], root: np.ndarray,
              bound: int) -> tuple[list[np.ndarray], int, float]:
    """Top-down pass: optimal labels and a flow satisfying the KKT conditions with them.

    Returns the flow on every padded edge (per level), the largest label used and the
    optimal value ``min D^T mu``.
    """
    n_labels = bound + 3
    label = np.arange(n_labels, dtype=np.float64) - 1.0
    depth = graph.depth
    supply = graph.supply
    # Root: the labels of vertices 0 and 2^L minimize g_root(x, z) + D_0 x + D_top z.
    z_label = label[None, :] + np.arange(-1, 2)[:, None]
    inside = (label >= 0) & (label <= bound) & (z_label >= 0) & (z_label <= bound)
    value = np.where(inside, root[:, :, 0] + supply[0] * label + supply[-1] * z_label,
                     np.inf)
    d_root, x_root = np.unravel_index(int(np.argmin(value)), value.shape)
    optimum = float(value[d_root, x_root])
    x = np.array([x_root], dtype=np.int64)
    z = x + (d_root - 1)
    seg = np.zeros(1, dtype=np.int64)
    # Deliveries (alpha, beta) to the two ends: a subgradient of g_root with
    # D_0 + alpha >= 0 (= 0 if the label is positive), likewise at the top vertex.
    lo1, hi1, lo2, hi2, lo3, hi3 = _hexagon(root, graph.unit[depth], n_labels, seg, x, z)
    a_lo = np.maximum(lo1, -supply[0])
    a_hi = np.where(x > 1, np.minimum(hi1, -supply[0]), hi1)
    b_lo = np.maximum(lo2, -supply[-1])
    b_hi = np.where(z > 1, np.minimum(hi2, -supply[-1]), hi2)
    total = _pick(np.maximum(lo3, a_lo + b_lo), np.minimum(hi3, a_hi + b_hi))
    alpha = _pick(np.maximum(a_lo, total - b_hi), np.minimum(a_hi, total - b_lo))
    beta = total - alpha
    top_label = int(max(x.max(), z.max()))
    flows: list[np.ndarray] = [np.zeros(0)] * (depth + 1)
    for lev in range(depth, 0, -1):
        child, unit_c = tables[lev - 1], graph.unit[lev - 1]
        n_seg = x.size
        left = 2 * np.arange(n_seg)
        right = left + 1
        mid = supply[(2 * np.arange(n_seg) + 1) << (lev - 1)]
        # The midpoint label: an argmin of the recurrence (any one will do).
        y = np.zeros(n_seg, dtype=np.int64)
        best = np.full(n_seg, np.inf)
        for dy in (-1, 0, 1):
            cand = x + dy
            val = (_g_at(child, unit_c, n_labels, left, x, cand)
                   + _g_at(child, unit_c, n_labels, right, cand, z) + mid * label[
                       np.clip(cand, 0, n_labels - 1)])
            val[(cand < 1) | (cand > bound + 1)] = np.inf
            better = val < best
            best[better], y[better] = val[better], cand[better]
        top_label = max(top_label, int(y.max()))
        l1, u1, l2, u2, l3, u3 = _hexagon(child, unit_c, n_labels, left, x, y)
        r1, s1, r2, s2, r3, s3 = _hexagon(child, unit_c, n_labels, right, y, z)
        unit = graph.unit[lev]
        # The edge's normal cone: a cost-1 edge carries flow only towards the end whose
        # label is higher by 1 (f > 0 raises a); a cost-0 edge carries any flow.
        f_lo = np.where(~unit | (z - x == 1), -np.inf, 0.0)
        f_hi = np.where(~unit | (x - z == 1), np.inf, 0.0)
        t_lo = -mid
        t_hi = np.where(y > 1, -mid, np.inf)  # the midpoint ends at 0 if its label is > 0
        a, b = alpha, beta
        # Unknowns f, beta_L, alpha_R with alpha_L = a - f and beta_R = b + f; every
        # condition is an interval in f once beta_L and alpha_R are eliminated.
        f_lo = np.max([f_lo, a - u1, r2 - b, l2 + a - u3, r3 - b - s1,
                       l2 + r3 - b - t_hi, t_lo - u3 + a - s1], axis=0)
        f_hi = np.min([f_hi, a - l1, s2 - b, u2 + a - l3, s3 - b - r1,
                       t_hi - l3 + a - r1, u2 + s3 - b - t_lo], axis=0)
        f = _pick(f_lo, f_hi)
        p_l, q_l = np.maximum(l2, l3 - a + f), np.minimum(u2, u3 - a + f)
        p_r, q_r = np.maximum(r1, r3 - b - f), np.minimum(s1, s3 - b - f)
        into_mid = np.maximum(t_lo, p_l + p_r)
        beta_l = _pick(np.maximum(p_l, into_mid - q_r), np.minimum(q_l, into_mid - p_r))
        flows[lev] = f
        x = np.stack([x, y], axis=1).ravel()
        z = np.stack([y, z], axis=1).ravel()
        alpha = np.stack([a - f, into_mid - beta_l], axis=1).ravel()
        beta = np.stack([beta_l, b + f], axis=1).ravel()
    flows[0] = alpha  # a leaf edge delivers (f, -f)
    return flows, top_label - 1, optimum


def _solve_lp_dyadic(problem: _FlowProblem, tree: DyadicTree, idx: np.ndarray
                     ) -> tuple[np.ndarray, int, float]:
    """Exact p = 1 solution of Eq. 3 (003 Sec. 3.2) by dynamic programming over the tree.

    Returns the flow on the kept nodes, the number of passes and the optimal value.
    Time and memory O(N' T), ``N' = 2^L`` (L = ``tree.depth``), T the label bound
    (``_DP_FIRST_BOUND``; optimal labels are small, see 4).

    Problem and dual. ``(P) min sum_e w_e |f_e|`` s.t. every vertex ends non-negative,
    ``D + M f >= 0``; its LP dual is ``(D) min D^T mu`` over ``mu >= 0`` with
    ``|mu_u - mu_v| <= w_e`` on every edge ``e = (u, v)``, and ``min (P) = -min (D)``.

    1. Embedding (:class:`_PaddedGraph`). Vertex ``k`` of the full dyadic graph on
       ``0 .. N'`` belongs to group ``#{b in B : b < k}``: a run of consecutive vertices
       joined by level-0 edges of cost 0. Contracting the groups gives exactly the graph
       of :class:`_FlowProblem` (edges of cost 0 become the dropped loops ``u = v``), and
       flows correspond with equal cost: summing a padded flow's vertex values over a
       group gives the contracted increments; conversely a group's non-negative total
       can be moved onto one vertex along cost-0 edges. So both optima are equal, and
       the cost-1 edges of a padded optimum are an optimum of Eq. 3.
    2. Integer labels. For a feasible real ``mu`` and ``t`` in ``[0, 1)``, ``floor(mu +
       t)`` is feasible (the ``w_e`` are integers and ``floor(a + t) - floor(b + t) <=
       ceil(a - b)``) and ``integral_0^1 floor(mu + t) dt = mu``. So (D) has an integer
       optimum, and the same holds with the extra bound ``mu <= T`` (T an integer).
    3. Segments. A level-l segment ``S = [a, b]``, ``b = a + 2^l``, holds the edges
       inside it; for l >= 1 it is its edge ``(a, b)`` plus its halves L = ``[a, c]`` and
       R = ``[c, b]``. ``G_S(x, z)`` = least ``sum D_k mu_k`` over the vertices strictly
       inside S, labels in ``[0, T]``, the ends fixed at ``x``, ``z``; then
       ``G_S(x, z) = [|x - z| <= w_S] + min_y (G_L(x, y) + D_c y + G_R(y, z))``
       (``[.]`` is 0 or ``+inf``). By 2 (rounding inside S, the ends being integers)
       the minimum over integer ``y`` gives ``G_S`` at integer ends:
       :func:`_dp_tables`, three values of ``z - x`` per label ``x``, O(T) per segment.
       The root adds ``D_0 x + D_N' z``; its minimum is ``min (D)`` under ``mu <= T``.
    4. Label bound. An optimal ``mu`` has ``min mu = 0`` (else ``mu - 1`` is better by
       ``sum D = n >= 1``) and is 1-Lipschitz in the graph distance, which is at most
       ``2 max(L, 1)`` (vertex k reaches 0 along ``k -> k - lowbit(k)``, at most
       ``popcount(k)`` edges). With ``T`` above every label of the solution found, the
       bound is inactive and by convexity the solution is optimal without it; else T is
       doubled (at ``T = 2 max(L, 1) + 1`` the bound is never reached).
    5. Flow. ``G_S`` is convex and linear on each triangle ``{p, p + e_i, p + e_x +
       e_z}`` of the integer grid: for ``(x, z)`` in one, rounding (2) an optimal
       labelling with ends ``(x, z)`` puts the ends at the triangle's corners for the
       fractions of ``t`` given by the barycentric weights, so ``G_S(x, z) >=`` the
       linear interpolation, and convexity gives ``<=``. Hence ``∂G_S(p)`` at an integer
       ``p`` is the hexagon of :func:`_hexagon`, read off the table. Top-down
       (:func:`_dp_flows`): the root's optimality gives a subgradient ``(alpha, beta)``
       with ``D_0 + alpha >= 0``, equality if ``x > 0`` (and likewise at ``N'``). If
       ``(alpha, beta) ∈ ∂G_S(x, z)`` and ``y`` attains the minimum in 3, then
       ``(alpha, 0, beta) ∈ ∂H(x, y, z)`` for ``H = [|x - z| <= w_S] + G_L(x, y) +
       D_c y + G_R(y, z) + [0 <= y <= T]`` (``H >= G_S`` everywhere, with equality at
       ``(x, y, z)``); the sum rule for polyhedral convex
       functions splits it into a flow ``f`` on the edge ``(a, b)`` in the normal cone of
       ``|x - z| <= w_S`` (``f > 0`` only if ``x - z = w_S``, ``f < 0`` only if
       ``z - x = w_S``), ``(alpha - f, beta_L) ∈ ∂G_L(x, y)``, ``(alpha_R, beta + f) ∈
       ∂G_R(y, z)`` and ``D_c + beta_L + alpha_R >= 0``, with equality if ``y > 0``
       (``y < T`` by 4). Once ``beta_L``, ``alpha_R`` are eliminated every condition is an
       interval for ``f``, solved in closed form. At a leaf ``∂G = {(f, -f)}`` with ``f``
       in the same normal cone: the leaf's flow.
    6. Certificate. The result is a flow with every vertex ``>= 0`` and ``= 0`` where
       ``mu > 0``, and ``w_e |f_e| = f_e (mu_a - mu_b)`` on every edge; hence
       ``sum_e w_e |f_e| = sum_k mu_k (M f)_k = -D^T mu``: a feasible flow whose cost
       equals a dual feasible value, so both are optimal (weak duality). The caller checks
       this numerically (:func:`_lp_certificate_failure`); the tests compare the optimum
       with HiGHS on random instances, subsets and ties included.
    """
    graph = _padded_graph(problem, tree, idx)
    cap = 2 * max(graph.depth, 1) + 1
    bound = min(_DP_FIRST_BOUND, cap)
    passes = 0
    while True:
        passes += 1
        tables, root = _dp_tables(graph, bound)
        flows, top, optimum = _dp_flows(graph, tables, root, bound)
        if top < bound or bound >= cap:
            break
        bound = min(2 * bound + 1, cap)
    nu = np.concatenate([np.where(graph.unit[lev][:size], flows[lev][:size], 0.0)
                         for lev, size in enumerate(tree.level_sizes)])
    return nu[problem.nodes], passes, -optimum


def _lp_certificate_failure(problem: _FlowProblem, flow: np.ndarray,
                            optimum: float) -> str | None:
    """Why ``flow`` is not certified optimal for p = 1, or None if it is.

    Certificate (weak duality): the flow is feasible, ``d_hat + M nu >= 0``, and its cost
    equals the dual value ``-D^T mu`` of the labels the dynamic program found, both up
    to round-off (``_FEAS_RTOL`` of the data's scale).
    """
    feas_tol = _FEAS_RTOL * max(1.0, float(np.abs(problem.d_hat).max()))
    low = float(problem.increments(flow).min())
    if low < -feas_tol:
        return f"flow infeasible by {-low:.3g} (tolerance {feas_tol:.3g})"
    gap = abs(float(np.abs(flow).sum()) - optimum)
    gap_tol = _FEAS_RTOL * max(1.0, float(np.abs(problem.d_hat).sum()))
    if gap > gap_tol:
        return f"duality gap {gap:.3g} above {gap_tol:.3g}"
    return None


def _solve_lp_highs(problem: _FlowProblem) -> tuple[np.ndarray, int]:
    """p = 1: min sum |nu| s.t. d_hat + M nu >= 0, as an LP in (nu+, nu-) >= 0.

    HiGHS dual simplex ("highs-ds"): measured fastest of HiGHS's methods on this
    network LP; it returns a vertex solution. The default is :func:`_solve_lp_dyadic`
    (far faster, benchmarks/bench_ecdf.py); this path is kept for comparison and as its
    fallback.
    """
    incidence = problem.incidence()
    n_edges = incidence.shape[1]
    a_ub = sp.hstack([-incidence, incidence], format="csr")
    res = _optimize.linprog(np.ones(2 * n_edges), A_ub=a_ub, b_ub=problem.d_hat, bounds=(0, None),
                  method="highs-ds")
    if res.status != 0:
        raise RuntimeError(f"HiGHS failed on the p = 1 smoothing LP: {res.message}")
    return res.x[:n_edges] - res.x[n_edges:], int(res.nit)


def _import_cvxopt() -> Any:
    try:
        import cvxopt
        from cvxopt import solvers
    except ImportError as exc:
        raise ImportError("method='cvxopt' (003 Sec. 6.7's solver, for comparison) needs "
                          "cvxopt; install it with `pip install '.[bench]'` in the fedustat "
                          "checkout") from exc
    return cvxopt, solvers


def _to_cvxopt(matrix: sp.spmatrix, cvxopt: Any) -> Any:
    coo = matrix.tocoo()
    return cvxopt.spmatrix(coo.data.tolist(), coo.row.tolist(), coo.col.tolist(),
                           size=coo.shape)


def _solve_cvxopt(counts: np.ndarray, tree: DyadicTree, n: int, idx: np.ndarray,
                  p: int) -> tuple[np.ndarray, int]:
    """003 Sec. 6.7's approach: Eq. 3 as written, in the curve, solved by CVXOPT.

    Variables are the node corrections ``nu`` (and ``t >= |nu|`` for p = 1); the
    constraints are the curve's: ``g = c_hat_B + A_B nu`` non-decreasing on consecutive
    points of B, ``g(min B) >= 0``, ``g(max B) <= n``. Sparse matrices throughout (the
    fastest form of this formulation we could build; the paper does not say which).
    """
    cvxopt, solvers = _import_cvxopt()
    a_b = tree.matrix(idx)
    m = idx.size
    n_nodes = tree.n_nodes
    c_b = counts[idx]
    diff = sp.diags([-np.ones(m - 1), np.ones(m - 1)], [0, 1], shape=(m - 1, m))
    g_mat = sp.vstack([-(diff @ a_b), -a_b[:1], a_b[m - 1:]], format="csr")
    h_vec = np.concatenate([diff @ c_b, [c_b[0]], [n - c_b[-1]]])
    options = {"show_progress": False}
    if p == 2:
        eye = cvxopt.spmatrix(1.0, range(n_nodes), range(n_nodes))
        res = solvers.qp(eye, cvxopt.matrix(np.zeros(n_nodes)), _to_cvxopt(g_mat, cvxopt),
                         cvxopt.matrix(h_vec), options=options)
        nu = np.asarray(res["x"]).ravel()
    else:
        ident = sp.identity(n_nodes, format="csr")
        g_lp = sp.vstack([sp.hstack([ident, -ident]), sp.hstack([-ident, -ident]),
                          sp.hstack([g_mat, sp.csr_matrix((g_mat.shape[0], n_nodes))])],
                         format="csr")
        h_lp = np.concatenate([np.zeros(2 * n_nodes), h_vec])
        cost = np.concatenate([np.zeros(n_nodes), np.ones(n_nodes)])
        res = solvers.lp(cvxopt.matrix(cost), _to_cvxopt(g_lp, cvxopt), cvxopt.matrix(h_lp),
                         options=options)
        nu = np.asarray(res["x"]).ravel()[:n_nodes]
    if res["status"] != "optimal":
        raise RuntimeError(f"CVXOPT did not converge on the smoothing problem: {res['status']}")
    return nu, int(res["iterations"])


def smooth_counts(counts: Any, tree: DyadicTree, n: int, *, p: int = 2,
                  subset: Any = None, method: Method = "auto"
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    """Eq. 3 on noisy counts ``c_hat`` (length ``tree.n_points``) with the bounds [0, n].

    Returns ``(indices, smoothed counts at B, node corrections nu, info)``. The building
    block of :func:`smooth`, also usable on securely aggregated noisy counts. ``info``
    has ``method``, ``iterations``, ``seconds``, ``objective`` and
    ``max_violation_removed``; for ``p = 1`` by ``"dyadic-dp"`` whose optimality
    certificate failed (not observed; a guard against round-off) the solve is redone by
    HiGHS, ``method`` says ``"highs"`` and ``fallback`` gives the reason.
    """
    c_hat = np.asarray(counts, dtype=np.float64)
    if c_hat.shape != (tree.n_points,) or not np.all(np.isfinite(c_hat)):
        raise ValueError(f"counts must be {tree.n_points} finite numbers, got shape "
                         f"{c_hat.shape}")
    n = check_positive_int(n, "n")
    if p not in (1, 2) or isinstance(p, bool):
        raise ValueError(f"p must be 1 or 2 (the norms of 003 Eq. 3), got {p!r}")
    if method == "auto":
        method = "active-set" if p == 2 else "dyadic-dp"
    if method not in ("active-set", "dyadic-dp", "highs", "cvxopt"):
        raise ValueError(f"method must be 'auto', 'active-set', 'dyadic-dp', 'highs' or "
                         f"'cvxopt', got {method!r}")
    if method == "active-set" and p != 2:
        raise ValueError("method='active-set' solves p = 2 only; use 'dyadic-dp' or "
                         "'highs' for p = 1")
    if method in ("dyadic-dp", "highs") and p != 1:
        raise ValueError(f"method={method!r} solves p = 1 only; use 'active-set' for p = 2")
    idx = _subset_indices(subset, tree.n_points)
    start = time.perf_counter()
    fallback = None
    if method == "cvxopt":
        nu, iterations = _solve_cvxopt(c_hat, tree, n, idx, p)
        smoothed = c_hat[idx] + tree.matrix(idx) @ nu
    else:
        problem = _flow_problem(c_hat, tree, n, idx)
        if method == "active-set":
            flow, iterations = _solve_qp_active_set(problem)
        elif method == "dyadic-dp":
            flow, iterations, optimum = _solve_lp_dyadic(problem, tree, idx)
            fallback = _lp_certificate_failure(problem, flow, optimum)
            if fallback is not None:
                method = "highs"
                flow, iterations = _solve_lp_highs(problem)
        else:
            flow, iterations = _solve_lp_highs(problem)
        nu = np.zeros(tree.n_nodes)
        nu[problem.nodes] = flow
        smoothed = np.cumsum(problem.increments(flow))[:-1]
    seconds = time.perf_counter() - start
    # Remove solver round-off (at most _FEAS_RTOL of the data's scale) so that the
    # released curve is exactly monotone and inside the bounds.
    violation = float(max(0.0, -np.min(np.diff(smoothed)) if smoothed.size > 1 else 0.0,
                          -smoothed.min(), smoothed.max() - n))
    smoothed = np.clip(np.maximum.accumulate(smoothed), 0.0, float(n))
    objective = float(np.sum(np.abs(nu) ** p))
    info = {"method": method, "iterations": iterations, "seconds": seconds,
            "objective": objective, "max_violation_removed": violation}
    if fallback is not None:
        info["fallback"] = fallback
    return idx, smoothed, nu, info


def smooth(curve: PrivateECDF, p: int = 2, subset: Any = None, *,
           method: Method = "auto") -> SmoothedECDF:
    """The non-decreasing curve in [0, 1] closest to a private ECDF in the noise (003 Eq. 3).

    Solves ``min ||nu||_p`` over node corrections ``nu`` such that ``F_hat + A nu / n`` is
    non-decreasing on the points ``B`` with values in ``[0, 1]`` (see the module
    docstring for the flow reformulation). Post-processing: the result keeps the curve's
    privacy guarantee.

    Parameters
    ----------
    curve:
        A :class:`~fedustat.protocols.ecdf.release.PrivateECDF` (it carries the dyadic tree and n).
    p:
        1 (least absolute noise, the Laplace maximum-likelihood choice) or 2 (least
        squares; its solution is unique).
    subset:
        The points B: a boolean mask over the thresholds or integer positions; None for
        all points.
    method:
        ``"auto"``: the exact active-set algorithm for p = 2, the exact dynamic program
        over the dyadic tree (``"dyadic-dp"``) for p = 1. ``"highs"``: the p = 1 flow LP
        by HiGHS's dual simplex (slower; kept for comparison). ``"cvxopt"``: 003's own
        approach (Sec. 6.7), for comparison; needs cvxopt.

    Returns
    -------
    SmoothedECDF
        ``estimator="tree-noise"``.


    Examples
    --------
    >>> x = np.random.default_rng(0).uniform(size=1000)
    >>> curve = fedustat.protocols.ecdf.dp_ecdf(x, np.linspace(0.1, 1.0, 10), epsilon=1.0, rng=0,
    ...                          method="003-tree")
    >>> np.round(fedustat.smooth(curve).values, 2)
    array([0.07, 0.17, 0.22, 0.31, 0.47, 0.59, 0.66, 0.77, 0.89, 1.  ])
    """
    _check_curve(curve, "smooth")
    if getattr(curve, "method", "003-tree") != "003-tree" and curve.scale > 0:
        raise ValueError(f"smooth (003 Eq. 3) corrects 003's dyadic tree noise; this curve "
                         f"was released with method={curve.method!r}. Release it with "
                         "dp_ecdf(..., method='003-tree'), or use isotonic_projection(curve)")
    n = int(curve.n)
    idx, smoothed, nu, info = smooth_counts(np.asarray(curve.values) * n, curve.tree, n,
                                            p=p, subset=subset, method=method)
    return SmoothedECDF(
        thresholds=np.asarray(curve.thresholds)[idx], values=smoothed / n,
        raw_values=np.asarray(curve.values)[idx], indices=idx, n=n, p=p,
        estimator="tree-noise", correction=nu, objective=info["objective"],
        method=info["method"], iterations=info["iterations"], seconds=info["seconds"],
        privacy=curve.privacy,
        diagnostics={"max_violation_removed": info["max_violation_removed"] / n,
                     **({"fallback": info["fallback"]} if "fallback" in info else {})},
        noise_kind=str(getattr(curve, "noise_kind", "simulation")))


def _check_curve(curve: Any, caller: str) -> None:
    """A released curve (its values, grid, n and tree), not an array: the correction works
    on the curve's noise structure, which an array does not carry."""
    if not all(hasattr(curve, key) for key in ("values", "thresholds", "n", "tree")):
        hint = (" (the .release of a fedustat.ecdf result)" if hasattr(curve, "release")
                else "")
        raise TypeError(f"{caller}(): curve must be a private ECDF release, a PrivateECDF"
                        f"{hint}, got {type(curve).__name__}")


def project_to_cdf(values: Any) -> np.ndarray:
    """The Euclidean (L2) projection of a curve on the non-decreasing curves in [0, 1].

    ``argmin_G sum_i (G_i - F_i)^2`` over non-decreasing ``G`` with ``0 <= G <= 1``:
    isotonic regression (pool adjacent violators, Barlow et al. 1972, Statistical Inference
    under Order Restrictions, Ch. 1; ``scipy.optimize.isotonic_regression``) then clipping
    to [0, 1], which is that projection exactly (see :func:`isotonic_projection`).

    Why this projection for a released ECDF: the exact ECDF on the grid is itself a
    non-decreasing curve in [0, 1], i.e. a point of the convex set projected on, so

    * the L2 error never grows: a projection on a closed convex set is non-expansive and
      fixes the set's points, ``||P(F_hat) - F|| <= ||F_hat - F||`` (every release);
    * the sup error never grows: isotonic regression is order-preserving and commutes
      with adding a constant, hence non-expansive in the sup norm, and so is clipping;
      both fix F (so ``max_i |P(F_hat)_i - F_i| <= max_i |F_hat_i - F_i|``, every release).

    The L1 error has no such guarantee; ``benchmarks/bench_inference.py --only curves``
    measures it. Post-processing: no privacy is spent.

    Parameters
    ----------
    values:
        The curve at increasing grid points (1-d).

    Returns
    -------
    numpy.ndarray
        The projected curve (a new float array).

    Examples
    --------
    >>> from fedustat.protocols.ecdf.smoothing import project_to_cdf
    >>> project_to_cdf([-0.02, 0.3, 0.25, 0.7, 1.04]).round(3).tolist()
    [0.0, 0.275, 0.275, 0.7, 1.0]
    """
    raw = np.asarray(values, dtype=np.float64)
    if raw.ndim != 1:
        raise ValueError(f"values must be a 1-d curve, got shape {raw.shape}")
    if raw.size == 0:
        return raw.copy()
    return np.clip(_optimize.isotonic_regression(raw).x, 0.0, 1.0)


def isotonic_projection(curve: PrivateECDF, subset: Any = None) -> SmoothedECDF:
    """The pointwise estimator: Euclidean projection on non-decreasing curves in [0, 1].

    ``argmin_G sum_{i in B} (G_i - F_hat_i)^2`` over non-decreasing ``G`` with
    ``0 <= G <= 1``: isotonic regression followed by clipping (clipping an isotonic fit
    to a box gives the projection on the box-constrained cone, because clipping preserves
    the pooled blocks' optimality conditions). It ignores that the noise is shared along
    the dyadic tree, so it is *not* 003's Eq. 3; it is much cheaper (linear time) and
    often close in accuracy. Post-processing: the privacy guarantee is kept.

    Parameters
    ----------
    curve:
        A :class:`~fedustat.protocols.ecdf.release.PrivateECDF`.
    subset:
        The points B: a boolean mask over the thresholds or integer positions; None for
        all points.

    Returns
    -------
    SmoothedECDF
        The projected curve, with the curve's guarantee.

    Examples
    --------
    >>> x = np.random.default_rng(0).uniform(size=1000)
    >>> curve = fedustat.protocols.ecdf.dp_ecdf(x, np.linspace(0.1, 1.0, 10), epsilon=1.0, rng=0)
    >>> np.round(fedustat.isotonic_projection(curve).values, 2)
    array([0.09, 0.19, 0.27, 0.36, 0.46, 0.58, 0.67, 0.78, 0.9 , 1.  ])
    """
    _check_curve(curve, "isotonic_projection")
    n = int(curve.n)
    idx = _subset_indices(subset, np.asarray(curve.values).size)
    raw = np.asarray(curve.values, dtype=np.float64)[idx]
    start = time.perf_counter()
    fitted = project_to_cdf(raw)
    seconds = time.perf_counter() - start
    return SmoothedECDF(
        thresholds=np.asarray(curve.thresholds)[idx], values=fitted, raw_values=raw,
        indices=idx, n=n, p=None, estimator="isotonic-projection", correction=None,
        objective=float(np.sum(((fitted - raw) * n) ** 2)), method="isotonic_regression",
        iterations=1, seconds=seconds, privacy=curve.privacy,
        noise_kind=str(getattr(curve, "noise_kind", "simulation")))

