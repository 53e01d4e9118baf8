"""The b-ary hierarchical histogram CDF with least-squares consistency (the default release).

The counts ``c_i = |{x <= tau_i}|`` are prefix sums of the histogram ``h_j = c_j - c_{j-1}``
(bins ``j = 0 .. N-1``; records above ``tau_{N-1}`` fall in an overflow bin that is never
released). A b-ary tree over the bins (padded to ``b^H`` leaves; padding bins are known
zeros and carry no noise) gets Laplace noise on every node, the least-squares estimate of
the bins given all noisy nodes is computed in O(N), and its prefix sums divided by the
public n are the released CDF.

Sources:

* Hierarchical histograms and consistency: Hay, Rastogi, Miklau and Suciu 2010, "Boosting
  the accuracy of differentially private histograms through consistency" (PVLDB 3), Sec. 4:
  the O(N) two-pass least-squares estimate of a tree of noisy counts; Qardaji, Yang and Li
  2013, "Understanding hierarchical methods for differentially private histograms"
  (PVLDB 6): the branching factor and consistency for range/prefix queries.
* Unequal noise per level (the generalized two-pass estimate used here): the best linear
  unbiased estimate on a tree of observations with per-node variances ``v_k``, derived here
  as Gaussian belief propagation (bottom-up: a node's subtree estimate
  ``z = (y S + s v) / (v + S)`` with variance ``u = v S / (v + S)``, where ``s`` and ``S``
  sum the children's ``z`` and ``u``; top-down: a child gets ``z_c + (u_c / S)(F - s)``
  from its parent's final value ``F``). With equal variances it is Hay et al.'s estimate.
* Exact variances (derived here): the estimate's covariance of the prefix counts is
  ``(D^T G D)^{-1}`` with ``G = A^T W A``, a grounded graph Laplacian in which node k is a
  resistor ``v_k`` between points ``start - 1`` and ``end - 1`` (point -1 is the ground,
  ``c_{-1} = 0``). So ``Var(c_hat_i)`` is the effective resistance from point i to the
  ground, computed top-down over the series-parallel tree in O(N)
  (:meth:`HierarchicalPlan.point_variances`), and ``w^T Cov w = q^T G^{-1} q`` with
  ``q`` the suffix sums of ``w`` is one more least-squares pass
  (:meth:`HierarchicalPlan.linear_variance`).

Privacy (replace one record, n public). Moving a record from bin a to bin b changes the
nodes strictly below their lowest common ancestor: at most two nodes per level below the
root, by 1 each. Moving it to or from the overflow bin changes one node per level
including the root. With per-node Laplace scales ``s_l = 2 / (eps w_l)`` on levels
``l = 0 .. H-1`` (``sum w_l = 1``) and ``s_root = 2 / eps``, both changes cost at most
``2 sum_l 1/s_l = eps`` and ``sum_l 1/s_l + 1/s_root = eps``: eps-DP (Laplace mechanism
on the node vector, Dwork et al. 2006). The root costs nothing beyond the lower levels.

Private total (``public_total=False``, for a curve over a subset of the records whose size
is private, e.g. one class of a ROC curve). The root gets its own budget share: weights
``w_0 .. w_{H-1}, w_root`` sum to 1 and every level, the root included, has scale
``s_l = 1 / (eps w_l)``. Adding or removing one record changes one node per level, the
root included, by 1: ``sum_l 1/s_l = eps`` (eps-DP, add/remove one record). Moving a
record inside the tree changes two nodes per level below the root: ``2 eps (1 - w_root)``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import check_positive_int
from fedustat.privacy.noise import NoiseSource

_optimize = lazy_module("scipy.optimize")

__all__ = [
    "MAX_COVARIANCE_POINTS",
    "HierarchicalPlan",
    "NodeNoise",
    "default_plan",
    "hierarchical_noisy_counts",
    "private_total_plan",
    "sup_critical_value",
]

#: :meth:`HierarchicalPlan.covariance` builds a dense N x N matrix; beyond this it refuses.
MAX_COVARIANCE_POINTS = 8192

# Batched passes work on (k, b^H) arrays; rows are processed in chunks of this many cells.
_CHUNK_CELLS = 1 << 22


@dataclass(frozen=True)
class HierarchicalPlan:
    """A b-ary tree over N bins and its budget split per level (public structure).

    Attributes
    ----------
    n_points:
        N, the number of thresholds (bins).
    branching:
        b >= 2.
    weights:
        ``w_l`` for the levels ``l = 0 .. H-1`` below the root (leaves first), positive,
        summing to 1: level l's nodes get Laplace scale ``2 / (eps w_l)``. With
        ``public_total=False`` one more entry, the root's, last: every level, the root
        included, gets scale ``1 / (eps w_l)`` (module docstring).
    public_total:
        True (the ECDF over all n records): the root's noise costs nothing beyond the
        lower levels. False: the tree's total is private and the root has its own share.
    """

    n_points: int
    branching: int
    weights: tuple[float, ...]
    public_total: bool = True

    def __post_init__(self) -> None:
        n = check_positive_int(self.n_points, "n_points")
        b = self.branching
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or b < 2:
            raise ValueError(f"branching must be an integer >= 2, got {b!r}")
        if not isinstance(self.public_total, bool | np.bool_):
            raise ValueError(f"public_total must be True or False, got {self.public_total!r}")
        height = _height(n, int(b))
        w = tuple(float(x) for x in self.weights)
        if self.public_total and len(w) != height:
            raise ValueError(f"weights must have one entry per level below the root "
                             f"({height} for N={n}, b={b}), got {len(w)}")
        if not self.public_total and len(w) != height + 1:
            raise ValueError(f"weights must have one entry per level, the root last "
                             f"({height + 1} for N={n}, b={b}, private total), got {len(w)}")
        if w and (min(w) <= 0 or not math.isclose(sum(w), 1.0, rel_tol=1e-9)):
            raise ValueError(f"weights must be positive and sum to 1, got {w}")
        object.__setattr__(self, "n_points", n)
        object.__setattr__(self, "branching", int(b))
        object.__setattr__(self, "weights", w)
        object.__setattr__(self, "public_total", bool(self.public_total))

    # ------------------------------------------------------------------ structure

    @property
    def height(self) -> int:
        """H: levels below the root; the root is level H."""
        return len(self.weights) - (0 if self.public_total else 1)

    @property
    def padded(self) -> int:
        """``b^H`` leaf slots."""
        return self.branching ** self.height

    def level_nodes(self, level: int) -> int:
        """Real nodes on a level (they cover at least one of the N bins)."""
        return -(-self.n_points // self.branching**level)

    @property
    def n_noisy_nodes(self) -> int:
        return sum(self.level_nodes(lev) for lev in range(self.height)) + 1

    def scales(self, epsilon: float) -> np.ndarray:
        """Laplace scale per level in counts, ``l = 0 .. H`` (the last is the root).

        Two nodes per level change when a record moves inside the grid, one node per
        level (root included) when it moves past the last threshold (module docstring).
        Private total: ``1 / (eps w_l)`` on every level, the root included.
        """
        if not self.public_total:
            # One node per level, the root included, per added or removed record.
            return np.array([1.0 / (epsilon * w) for w in self.weights])
        if self.height == 0:
            return np.array([1.0 / epsilon])  # a single bin: one count, sensitivity 1
        return np.array([2.0 / (epsilon * w) for w in self.weights] + [2.0 / epsilon])

    def level_variances(self, epsilon: float) -> np.ndarray:
        return 2.0 * self.scales(epsilon) ** 2  # Laplace(s) has variance 2 s^2

    # ------------------------------------------------------------------ node values

    def node_values(self, counts: np.ndarray) -> list[np.ndarray]:
        """Exact node sums per level (padded slots; the last entry is the root) from the
        prefix counts ``c``: a node over bins ``[s, e)`` holds ``c_{e-1} - c_{s-1}``."""
        c = np.asarray(counts, dtype=np.float64)
        leaves = np.zeros(self.padded)
        leaves[:self.n_points] = np.diff(c, prepend=0.0)
        out = [leaves]
        for _ in range(self.height):
            out.append(out[-1].reshape(-1, self.branching).sum(axis=1))
        return out

    def sensitivity(self, epsilon: float, a: int, b: int) -> float:
        """Privacy loss of moving one record from bin a to bin b (``N`` is the overflow
        bin): ``sum_k |change of node k| / s_k`` (the Laplace mechanism's bound)."""
        scales = self.scales(epsilon)
        loss = 0.0
        diffs = self.node_values(_moved_counts(self.n_points, a, b))
        for lev, d in enumerate(diffs):
            loss += float(np.abs(d).sum()) / scales[lev]
        return loss

    # ------------------------------------------------------------------ estimation

    def estimate(self, observations: list[np.ndarray], epsilon: float) -> np.ndarray:
        """Least-squares prefix counts from noisy node values (per level, real nodes only,
        the last entry the root); batched over leading axes."""
        return _gls_prefix(self, observations, self.level_variances(epsilon))

    def point_variances(self, epsilon: float) -> np.ndarray:
        """``Var(c_hat_i)`` in counts for every point (exact; effective resistance to
        the ground, module docstring)."""
        return _point_resistances(self, self.level_variances(epsilon))

    def linear_variance(self, weights: Any, epsilon: float) -> np.ndarray | float:
        """``w^T Cov(c_hat) w`` for ``w`` of shape (N,) or (k, N), in counts squared."""
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim not in (1, 2) or w.shape[-1] != self.n_points:
            raise ValueError(f"weights must have shape ({self.n_points},) or "
                             f"(k, {self.n_points}), got {w.shape}")
        var = self.level_variances(epsilon)
        w2 = w.reshape(-1, self.n_points)
        q = np.cumsum(w2[:, ::-1], axis=1)[:, ::-1]  # q = C^T w: suffix sums
        out = np.empty(w2.shape[0])
        step = max(1, _CHUNK_CELLS // self.padded)
        for lo in range(0, w2.shape[0], step):
            qq = q[lo:lo + step]
            # G^{-1} q is the estimate from leaf observations v_0 q, all others zero.
            obs = [qq * var[0]] + [np.zeros((qq.shape[0], self.level_nodes(lev)))
                                   for lev in range(1, self.height)]
            if self.height:
                obs.append(np.zeros((qq.shape[0], 1)))
            x = _gls_leaves(self, obs, var)
            out[lo:lo + step] = np.einsum("ij,ij->i", qq, x)
        return float(out[0]) if w.ndim == 1 else out

    def covariance_times(self, vectors: Any, epsilon: float) -> np.ndarray:
        """``V Cov(c_hat)`` for ``V`` of shape (k, N), without the dense matrix: each row
        ``v`` gives ``C G^{-1} C^T v`` (suffix sums, one least-squares pass, prefix sums;
        module docstring), O(k b^H) time and memory per chunk of rows."""
        v = np.asarray(vectors, dtype=np.float64)
        if v.ndim != 2 or v.shape[1] != self.n_points:
            raise ValueError(f"vectors must have shape (k, {self.n_points}), got {v.shape}")
        var = self.level_variances(epsilon)
        out = np.empty_like(v)
        step = max(1, _CHUNK_CELLS // self.padded)
        for lo in range(0, v.shape[0], step):
            q = np.cumsum(v[lo:lo + step, ::-1], axis=1)[:, ::-1]  # C^T v
            obs = [q * var[0]] + [np.zeros((q.shape[0], self.level_nodes(lev)))
                                  for lev in range(1, self.height)]
            if self.height:
                obs.append(np.zeros((q.shape[0], 1)))
            out[lo:lo + step] = np.cumsum(_gls_leaves(self, obs, var), axis=1)
        return out

    def node_weights(self, epsilon: float, index: int) -> np.ndarray:
        """Weight of every noisy node's noise in ``c_hat_index`` (levels in order, real
        nodes only, the root last): ``W A G^{-1} C^T e_i``, one least-squares pass (the
        adjoint of the estimate, module docstring)."""
        if not 0 <= index < self.n_points:
            raise ValueError(f"index must be in [0, {self.n_points - 1}], got {index}")
        var = self.level_variances(epsilon)
        q = (np.arange(self.n_points) <= index).astype(np.float64)  # C^T e_i
        if self.height == 0:
            return q.copy()
        obs = [q * var[0]] + [np.zeros(self.level_nodes(lev)) for lev in range(1, self.height)]
        obs.append(np.zeros(1))
        x = _gls_leaves(self, obs, var)
        sums = self.node_values(np.cumsum(x))
        return np.concatenate([sums[lev][:self.level_nodes(lev)] / var[lev]
                               for lev in range(self.height + 1)])

    def node_scales(self, epsilon: float) -> np.ndarray:
        """Laplace scale of every noisy node (the order of :meth:`node_weights`)."""
        scales = self.scales(epsilon)
        return np.concatenate([np.full(self.level_nodes(lev), scales[lev])
                               for lev in range(self.height + 1)])

    def covariance(self, epsilon: float) -> np.ndarray:
        """Dense ``Cov(c_hat)`` (N x N, counts squared)."""
        n = self.n_points
        if n > MAX_COVARIANCE_POINTS:
            raise ValueError(f"a dense covariance of {n} points is too large (limit "
                             f"{MAX_COVARIANCE_POINTS}); use linear_variance(weights)")
        var = self.level_variances(epsilon)
        out = np.empty((n, n))
        step = max(1, _CHUNK_CELLS // self.padded)
        for lo in range(0, n, step):
            rows = np.arange(lo, min(n, lo + step))
            # Column i of C G^{-1} C^T: leaf observations v_0 * 1[j <= i].
            q = (np.arange(n)[None, :] <= rows[:, None]).astype(np.float64)
            obs = [q * var[0]] + [np.zeros((rows.size, self.level_nodes(lev)))
                                  for lev in range(1, self.height)]
            if self.height:
                obs.append(np.zeros((rows.size, 1)))
            out[lo:lo + rows.size] = np.cumsum(_gls_leaves(self, obs, var), axis=1)
        return out

    def mean_variance(self) -> float:
        """Mean of ``Var(c_hat_i)`` over the points at eps = 1 (counts squared); variances
        scale as ``1 / eps^2``."""
        return float(np.mean(self.point_variances(1.0)))


def _moved_counts(n_points: int, a: int, b: int) -> np.ndarray:
    """Change of the prefix counts when one record moves from bin a to bin b."""
    c = np.zeros(n_points)
    if a < n_points:
        c[a:] -= 1.0
    if b < n_points:
        c[b:] += 1.0
    return c


def _height(n_points: int, branching: int) -> int:
    h, size = 0, 1
    while size < n_points:
        size *= branching
        h += 1
    return h


def _real_masks(plan: HierarchicalPlan) -> list[np.ndarray]:
    out = []
    for lev in range(plan.height + 1):
        slots = plan.branching ** (plan.height - lev)
        out.append(np.arange(slots) < plan.level_nodes(lev))
    return out


def _pad(obs: np.ndarray, slots: int) -> np.ndarray:
    out = np.zeros((*obs.shape[:-1], slots))
    out[..., :obs.shape[-1]] = obs
    return out


def _gls_leaves(plan: HierarchicalPlan, observations: list[np.ndarray],
                var: np.ndarray) -> np.ndarray:
    """Best linear unbiased leaf estimates (shape (..., N)) from noisy node values.

    Two passes over the levels (Hay et al. 2010 Sec. 4, with per-level variances; module
    docstring). Padding slots are known zeros (variance 0).
    """
    b, h = plan.branching, plan.height
    masks = _real_masks(plan)
    if h == 0:
        return np.asarray(observations[0], dtype=np.float64)[..., :plan.n_points]
    z = _pad(np.asarray(observations[0], dtype=np.float64), plan.padded)
    u = np.where(masks[0], var[0], 0.0)
    zs, us, ss, big_s = [z], [u], [], []
    for lev in range(1, h + 1):
        slots = b ** (h - lev)
        s = zs[-1].reshape((*z.shape[:-1], slots, b)).sum(axis=-1)
        tot = us[-1].reshape(slots, b).sum(axis=-1)
        y = _pad(np.asarray(observations[lev], dtype=np.float64), slots)
        v = var[lev]
        real = masks[lev]
        # Both sides exact (variance 0: node noise below the count unit, e.g. discrete
        # noise at epsilon >= 1e4) agree; the node's own count is the estimate.
        exact = (v + tot) == 0.0
        denom = np.where(real & ~exact, v + tot, 1.0)
        z_new = np.where(real, np.where(exact, y, (y * tot + s * v) / denom), 0.0)
        u_new = np.where(real & ~exact, v * tot / denom, 0.0)
        zs.append(z_new)
        us.append(u_new)
        ss.append(s)
        big_s.append(tot)
    final = zs[-1]  # the root's estimate
    for lev in range(h, 0, -1):
        s, tot = ss[lev - 1], big_s[lev - 1]
        child_u = us[lev - 1]
        share = child_u / np.repeat(np.where(tot > 0, tot, 1.0), b)
        final = zs[lev - 1] + share * np.repeat(final - s, b, axis=-1)
    return final[..., :plan.n_points]


def _gls_prefix(plan: HierarchicalPlan, observations: list[np.ndarray],
                var: np.ndarray) -> np.ndarray:
    return np.cumsum(_gls_leaves(plan, observations, var), axis=-1)


def _par(zaa: np.ndarray, zab: np.ndarray, zbb: np.ndarray, r: np.ndarray
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Resistance matrix of terminals (A, B) to the ground after a resistor r joins A and
    B (Sherman-Morrison on the conductance matrix; r = 0 merges A and B)."""
    da, db = zaa - zab, zab - zbb
    den = r + zaa + zbb - 2.0 * zab
    inv = np.where(den > 0, 1.0 / np.where(den > 0, den, 1.0), 0.0)
    return zaa - da * da * inv, zab - da * db * inv, zbb - db * db * inv


def _point_resistances(plan: HierarchicalPlan, var: np.ndarray) -> np.ndarray:
    """Effective resistance from every point to the ground: ``Var(c_hat_i)`` (derived in
    the module docstring). Top-down, each block carries the 2x2 resistance matrix of the
    network outside it seen from its two end points; its children see the same network
    plus the block's own resistor, with their left and right siblings in series."""
    b, h = plan.branching, plan.height
    if h == 0:
        return np.array([var[0]])
    masks = _real_masks(plan)
    # Bottom-up block resistances u (the subtree's two-terminal resistance).
    us = [np.where(masks[0], var[0], 0.0)]
    for lev in range(1, h + 1):
        slots = b ** (h - lev)
        tot = us[-1].reshape(slots, b).sum(axis=-1)
        v = var[lev]
        # Two resistors of 0 (exact nodes, as in _gls_leaves) in parallel give 0.
        joined = masks[lev] & ((v + tot) > 0.0)
        us.append(np.where(joined, v * tot / np.where(joined, v + tot, 1.0), 0.0))
    # Root: A is the ground; B reaches the ground only through the root's own resistor.
    zaa, zab, zbb = np.zeros(1), np.zeros(1), np.array([float(var[h])])
    for lev in range(h - 1, -1, -1):
        u = us[lev].reshape(-1, b)
        left = np.cumsum(u, axis=1) - u
        right = u.sum(axis=1, keepdims=True) - left - u
        zaa = (np.repeat(zaa, b).reshape(-1, b) + left).ravel()
        zab = np.repeat(zab, b)
        zbb = (np.repeat(zbb, b).reshape(-1, b) + right).ravel()
        own = np.where(masks[lev], var[lev], 0.0)
        zaa, zab, zbb = _par(zaa, zab, zbb, own)
    return zbb[:plan.n_points]


# ------------------------------------------------------------------ choosing the plan


def _top_weighted(n_points: int, b: int, ratio: float) -> HierarchicalPlan:
    """Equal budgets on the levels below the top one, ``ratio`` times that on the top
    level (whose few nodes matter less when the padded tree leaves it sparse)."""
    h = _height(n_points, b)
    w = np.ones(h)
    w[-1] = ratio
    return HierarchicalPlan(n_points, b, tuple(w / w.sum()))


def _tuned_top(n_points: int, b: int) -> HierarchicalPlan:
    """The top level's budget ratio minimizing the exact mean prefix variance."""
    if _height(n_points, b) <= 1:
        return _top_weighted(n_points, b, 1.0)
    res = _optimize.minimize_scalar(lambda r: _top_weighted(n_points, b, r).mean_variance(),
                          bounds=(0.05, 2.0), method="bounded", options={"xatol": 1e-2})
    plan = _top_weighted(n_points, b, float(res.x))
    flat = _top_weighted(n_points, b, 1.0)
    return plan if plan.mean_variance() < flat.mean_variance() else flat


@functools.lru_cache(maxsize=32)
def default_plan(n_points: int) -> HierarchicalPlan:
    """The plan used by default, chosen by the exact mean variance of the N prefix counts
    (the CDF workload; :meth:`HierarchicalPlan.mean_variance`, which does not depend on
    eps or n). Branching factors ``b`` in 2..64 with equal budgets per level are compared
    (Qardaji, Yang and Li 2013 choose b by the same kind of variance count, for range
    queries); for the best two, the top level's share is then tuned (one parameter).
    """
    n_points = check_positive_int(n_points, "n_points")
    if n_points == 1:
        return HierarchicalPlan(1, 2, ())
    ranked = sorted((_top_weighted(n_points, b, 1.0).mean_variance(), b)
                    for b in _candidate_branchings(n_points))
    # Tuning costs ~15 passes per b: the best two, or the best one on large grids.
    keep = 2 if n_points <= _LARGE_GRID else 1
    plans = [_tuned_top(n_points, b) for _, b in ranked[:keep]]
    return min(plans, key=lambda plan: plan.mean_variance())


def _with_root(n_points: int, b: int, root_share: float) -> HierarchicalPlan:
    """Private total: equal budgets on the levels below the root, ``root_share`` on it."""
    h = _height(n_points, b)
    lower = np.full(h, (1.0 - root_share) / h) if h else np.zeros(0)
    return HierarchicalPlan(n_points, b, (*lower.tolist(), root_share), public_total=False)


def _tuned_root(n_points: int, b: int) -> HierarchicalPlan:
    """The root's share minimizing the exact mean prefix variance (private total)."""
    if _height(n_points, b) == 0:
        return HierarchicalPlan(n_points, b, (1.0,), public_total=False)
    # Not convex in the share (measured: two local minima at b = 16): a coarse grid,
    # then a bounded search between the best point's neighbours.
    grid = (1e-3, 0.01, 0.03, 0.1, 0.2, 0.3, 0.45, 0.6)
    scores = [_with_root(n_points, b, r).mean_variance() for r in grid]
    k = int(np.argmin(scores))
    lo, hi = grid[max(k - 1, 0)], grid[min(k + 1, len(grid) - 1)]
    res = _optimize.minimize_scalar(lambda r: _with_root(n_points, b, r).mean_variance(),
                          bounds=(lo, hi), method="bounded", options={"xatol": 1e-4})
    best = float(res.x) if res.fun < scores[k] else grid[k]
    return _with_root(n_points, b, best)


@functools.lru_cache(maxsize=32)
def private_total_plan(n_points: int) -> HierarchicalPlan:
    """A plan whose total is private (``public_total=False``), chosen like
    :func:`default_plan` by the exact mean variance of the N prefix counts: for each
    branching factor, equal budgets below the root and the root's share tuned (the
    total is every prefix count's largest term, so its share matters most); the best b.

    Used for the class curves of the DP ROC curve (:mod:`fedustat.protocols.ecdf.roc`),
    whose totals, the class sizes, are private under replace-one.
    """
    n_points = check_positive_int(n_points, "n_points")
    if n_points == 1:
        return HierarchicalPlan(1, 2, (1.0,), public_total=False)
    ranked = sorted((_with_root(n_points, b, 0.2).mean_variance(), b)
                    for b in _candidate_branchings(n_points))
    keep = 3 if n_points <= _LARGE_GRID else 1
    plans = [_tuned_root(n_points, b) for _, b in ranked[:keep]]
    return min(plans, key=lambda plan: plan.mean_variance())


# Above this many points the plan search is narrowed (each pass costs O(b^H)).
_LARGE_GRID = 1 << 16


def _candidate_branchings(n_points: int) -> list[int]:
    if n_points > _LARGE_GRID:
        # Every optimum measured from N = 64 to 2^20 had b between 8 and 24.
        out = [8, 12, 16, 20, 24, 32]
        limit = 4 * n_points
    else:
        out = [b for b in (2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
               if b <= max(2, n_points)]
        limit = 8 * n_points
    # Padding wider than that makes a pass slow for little gain.
    return [b for b in out if b ** _height(n_points, b) <= limit] or [2]


def hierarchical_noisy_counts(counts: np.ndarray, plan: HierarchicalPlan, epsilon: float,
                              source: NoiseSource) -> np.ndarray:
    """The released prefix counts: Laplace noise on every real node (levels 0 .. H-1 and
    the root, drawn level by level), then the least-squares estimate."""
    exact = plan.node_values(counts)
    scales = plan.scales(epsilon)
    observations = []
    for lev in range(plan.height + 1):
        m = plan.level_nodes(lev)
        noise = np.asarray(source.laplace(float(scales[lev]), m), dtype=np.float64)
        observations.append(exact[lev][:m] + noise)
    return plan.estimate(observations, epsilon)


# Draws of the whole noise vector behind :func:`sup_critical_value`: the coverage of the
# band it gives is then within about 2 sqrt(0.05 x 0.95 / 8000) = 0.005 of the level at 95%.
SUP_DRAWS = 8000


@functools.lru_cache(maxsize=32)
def _studentized_sup_draws(plan: HierarchicalPlan) -> np.ndarray:
    """Sorted draws of ``max_i |c_hat_i - c_i| / sd_i`` over the N points.

    The released prefix counts are the exact ones plus a linear function of the node
    noise (the least-squares estimate is linear), so their error is the estimate applied
    to the noise alone, whatever the data. Every scale is proportional to 1/eps, so the
    studentized maximum does not depend on eps (drawn at eps = 1). The draws are a
    computation on the public plan only (no record enters), so a fixed seed makes the
    band reproducible and protects nothing that needs protecting.
    """
    rng = np.random.default_rng(20240611)
    scales = plan.scales(1.0)
    sd = np.sqrt(plan.point_variances(1.0))
    safe = np.where(sd > 0.0, sd, 1.0)
    batch = max(1, min(SUP_DRAWS, _CHUNK_CELLS // max(plan.padded, 1)))
    out = []
    done = 0
    while done < SUP_DRAWS:
        rows = min(batch, SUP_DRAWS - done)
        observations = [rng.laplace(0.0, float(scales[lev]), (rows, plan.level_nodes(lev)))
                        for lev in range(plan.height + 1)]
        error = plan.estimate(observations, 1.0)
        out.append(np.max(np.abs(error) / safe, axis=-1))
        done += rows
    return np.sort(np.concatenate(out))


def sup_critical_value(plan: HierarchicalPlan, confidence_level: float) -> float:
    """``c`` with ``P(|c_hat_i - c_i| <= c sd_i for every point i) = confidence_level``.

    The whole-curve band ``c_hat_i +- c sd_i`` then covers the exact curve at that level:
    the quantile of the studentized maximum of the error (the max-t construction of a
    simultaneous band, e.g. Westfall and Young 1993, Ch. 2), computed from the exact noise
    law by Monte Carlo (:data:`SUP_DRAWS` draws; :func:`_studentized_sup_draws`). A union
    bound over the points with the worst point's law scaled to each point under-covers
    where one node carries most of a point's variance (its error is then close to a
    Laplace variable, heavier-tailed than the scaled law), and over-covers elsewhere.
    """
    draws = _studentized_sup_draws(plan)
    # The smallest order statistic at or above the level: conservative by at most 1/draws.
    index = min(draws.size - 1, math.ceil(confidence_level * draws.size) - 1)
    return float(draws[max(index, 0)])


# ------------------------------------------------- the tree as a node vector (federated)


def node_intervals(plan: HierarchicalPlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(start, end, level)`` of every noisy node, in the order of
    :meth:`HierarchicalPlan.node_weights` (levels 0 .. H-1, real nodes only, the root
    last): node k covers the bins ``[start_k, end_k)``, so its exact value is
    ``c_{end_k - 1} - c_{start_k - 1}`` with ``c_{-1} = 0`` (linear in the prefix counts,
    which is what lets servers holding shares of the counts form shares of the nodes)."""
    starts, ends, levels = [], [], []
    for lev in range(plan.height + 1):
        width = plan.branching**lev
        s = np.arange(plan.level_nodes(lev), dtype=np.int64) * width
        starts.append(s)
        ends.append(np.minimum(s + width, plan.n_points))
        levels.append(np.full(s.size, lev, dtype=np.int64))
    return np.concatenate(starts), np.concatenate(ends), np.concatenate(levels)


def split_levels(plan: HierarchicalPlan, flat: np.ndarray) -> list[np.ndarray]:
    """A flat node vector (order of :func:`node_intervals`) as one array per level, the
    layout :meth:`HierarchicalPlan.estimate` takes; leading axes are kept."""
    arr = np.asarray(flat, dtype=np.float64)
    sizes = [plan.level_nodes(lev) for lev in range(plan.height + 1)]
    if arr.shape[-1] != sum(sizes):
        raise ValueError(f"the node vector must have {sum(sizes)} entries, got "
                         f"{arr.shape[-1]}")
    return np.split(arr, np.cumsum(sizes)[:-1], axis=-1)


@dataclass(frozen=True, eq=False)
class NodeNoise:
    """A Laplace draw for every noisy node of a hierarchical plan (a dealer's draw for the
    federated releases; the hierarchical counterpart of 003's ``TreeNoise``).

    Attributes
    ----------
    plan, epsilon:
        The tree and the budget: node k carries ``Lap(plan.scales(epsilon)[level_k])``.
    values:
        The noise, flat in the order of :func:`node_intervals`, in counts.
    kind:
        ``"simulation"`` or ``"deployment"`` (the source it came from).
    """

    plan: HierarchicalPlan
    epsilon: float
    values: np.ndarray
    kind: str

    def __post_init__(self) -> None:
        if not isinstance(self.plan, HierarchicalPlan):
            raise TypeError(f"plan must be a HierarchicalPlan, got {type(self.plan).__name__}")
        v = np.asarray(self.values, dtype=np.float64)
        if v.shape != (self.plan.n_noisy_nodes,) or not np.all(np.isfinite(v)):
            raise ValueError(f"values must hold {self.plan.n_noisy_nodes} finite node noises, "
                             f"got shape {v.shape}")
        object.__setattr__(self, "values", v)


def draw_node_noise(plan: HierarchicalPlan, epsilon: float, source: NoiseSource) -> NodeNoise:
    """Laplace noise for every noisy node, drawn level by level from ``source`` exactly as
    :func:`hierarchical_noisy_counts` draws it (so the same seed gives the same noise as
    the central release), flat in the order of :func:`node_intervals`."""
    scales = plan.scales(epsilon)
    values = np.concatenate([np.asarray(source.laplace(float(scales[lev]),
                                                       plan.level_nodes(lev)),
                                        dtype=np.float64) for lev in range(plan.height + 1)])
    return NodeNoise(plan, float(epsilon), values, source.kind)


def estimate_with_variances(plan: HierarchicalPlan, observations: list[np.ndarray],
                            level_variances: np.ndarray) -> np.ndarray:
    """Least-squares prefix counts for noise of the given variance per level (``l = 0 ..
    H``): :meth:`HierarchicalPlan.estimate` when the node noise is not exactly Laplace of
    the plan's scales (e.g. discrete Laplace with several contributors)."""
    return _gls_prefix(plan, observations, np.asarray(level_variances, dtype=np.float64))


def point_variances_with(plan: HierarchicalPlan, level_variances: np.ndarray) -> np.ndarray:
    """``Var(c_hat_i)`` of :func:`estimate_with_variances` for every point (exact; the
    effective resistance of the module docstring with these variances)."""
    return _point_resistances(plan, np.asarray(level_variances, dtype=np.float64))


def linear_node_weights(plan: HierarchicalPlan, weights: Any,
                        level_variances: np.ndarray) -> np.ndarray:
    """Weight of every noisy node's noise in ``w^T c_hat`` (order of
    :func:`node_intervals`) for the estimate of :func:`estimate_with_variances`: ``W A
    G^{-1} C^T w``, one least-squares pass (as :meth:`HierarchicalPlan.node_weights`, for
    any ``w`` of shape (N,)). ``sum_k weight_k^2 v_k`` is then ``Var(w^T c_hat)``."""
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (plan.n_points,):
        raise ValueError(f"weights must have shape ({plan.n_points},), got {w.shape}")
    var = np.asarray(level_variances, dtype=np.float64)
    q = np.cumsum(w[::-1])[::-1]  # C^T w: suffix sums
    if plan.height == 0:
        return q.copy()
    obs = [q * var[0]] + [np.zeros(plan.level_nodes(lev)) for lev in range(1, plan.height)]
    obs.append(np.zeros(1))
    x = _gls_leaves(plan, obs, var)
    sums = plan.node_values(np.cumsum(x))
    return np.concatenate([sums[lev][:plan.level_nodes(lev)] / var[lev]
                           for lev in range(plan.height + 1)])
