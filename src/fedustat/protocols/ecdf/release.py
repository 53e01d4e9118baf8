"""The central DP ECDF on a threshold grid.

Central model: a curator (or a secure aggregation emulating one) sees the exact counts and
adds noise. Two releases, both linear (unbiased) in the noise:

* ``method="hierarchical"`` (default): a b-ary histogram tree over the bins with
  least-squares consistency and the public n (:mod:`fedustat.protocols.ecdf.hierarchical`);
  branching factor and budget split chosen by the exact mean variance of the N prefix counts.
* ``method="003-tree"``: 003 Sec. 3.1 as written, tree noise on the cumulative counts
  (Eq. 2, Thm 1; :mod:`fedustat.protocols.ecdf.tree_noise`). ``dp_ecdf`` accepts a
  pre-drawn ``tree_noise`` for it, so that a federated evaluation can be checked against it,
  and 003's smoothing (Eq. 3) needs it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_float_array,
    check_epsilon,
)
from fedustat.privacy.errors import (
    ErrorDistribution,
    LaplaceError,
    NormalError,
    error_sum,
    laplace_sum,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, trusted_curator
from fedustat.privacy.noise import NoiseSource, resolve_noise
from fedustat.protocols.ecdf.hierarchical import (
    MAX_COVARIANCE_POINTS,
    HierarchicalPlan,
    default_plan,
    hierarchical_noisy_counts,
    sup_critical_value,
)
from fedustat.protocols.ecdf.tree_noise import Distribution, TreeNoise, noisy_counts
from fedustat.stats.ecdf import (
    DyadicTree,
    check_thresholds,
    ecdf_counts,
    step_at,
)

__all__ = [
    "ECDF_ADJACENCY",
    "ECDF_GRID_LIMIT",
    "ECDF_METHODS",
    "GridLimit",
    "PrivateECDF",
    "dp_ecdf",
    "dp_ecdf_from_counts",
]


ECDF_ADJACENCY = "replace one record (n public)"

#: The central releases: the default first.
ECDF_METHODS = ("hierarchical", "003-tree")

# A dense covariance above this many points would take too much memory.
_MAX_DENSE = MAX_COVARIANCE_POINTS


@dataclass(frozen=True)
class GridLimit:
    """The largest public grid a release takes, and why: a grid's size is checked against
    it before anything is allocated, so a call stays under about 1 GiB of memory.

    Attributes
    ----------
    points:
        The largest number of grid points.
    release:
        What takes the grid (for the message).
    reason:
        What a grid point costs, as measured (peak traced memory and time on a quiet
        machine; docs/user-guide.md, "Errors").
    """

    points: int
    release: str
    reason: str

    def check(self, size: int, name: str) -> None:
        """Refuse a grid of ``size`` points above the limit, naming the argument ``name``."""
        if size > self.points:
            raise ValueError(
                f"{name}: a grid of {size} points is above {self.points} "
                f"(2^{self.points.bit_length() - 1}), the largest {self.release} takes, to "
                f"keep a call under about 1 GiB of memory: {self.reason}; use a coarser grid")


#: The central ECDF release (:func:`dp_ecdf`).
ECDF_GRID_LIMIT = GridLimit(
    2**20, "the central ECDF release",
    "its hierarchical tree and least-squares pass hold about 400 bytes per point (387 MiB "
    "and 2.2 s measured at 2^20 points; 003's tree 64 MiB)")


# --------------------------------------------------------------------------- DP ECDF


@dataclass(frozen=True)
class PrivateECDF:
    """A released ECDF ``F_hat`` on a threshold grid.

    Attributes
    ----------
    thresholds, values:
        The grid and the noisy curve (not necessarily monotone or inside [0, 1]).
    n:
        Number of records (public under the replace-one adjacency).
    tree:
        The dyadic tree over the grid (public structure; 003's smoothing needs it).
    scale, distribution:
        Laplace noise per node in counts: 003's ``(L+1)/eps`` for ``"003-tree"``, the
        leaf level's for ``"hierarchical"`` (0 for an exact curve).
    privacy:
        The guarantee delivered.
    noise_kind:
        ``"simulation"``, ``"deployment"`` or ``"none"``.
    method:
        ``"hierarchical"`` or ``"003-tree"`` (:data:`ECDF_METHODS`).
    plan:
        The hierarchical release's tree and budget split (None for 003's tree).
    epsilon:
        The budget this curve spent (``inf`` for an exact curve).
    """

    #: Fields that depend on the data: the noisy curve; everything else is public (the grid,
    #: n, the noise scale).
    released_fields: ClassVar[tuple[str, ...]] = ("values",)

    thresholds: np.ndarray
    values: np.ndarray
    n: int
    tree: DyadicTree
    scale: float
    distribution: Distribution
    privacy: PrivacyGuarantee
    noise_kind: str
    method: str = "003-tree"
    plan: HierarchicalPlan | None = None
    epsilon: float = math.inf

    @property
    def counts(self) -> np.ndarray:
        """The noisy counts ``n F_hat``."""
        return self.values * self.n

    @property
    def linear(self) -> bool:
        """Whether ``values`` is the exact curve plus a linear function of the noise
        (every :class:`PrivateECDF` is; smoothed curves are not)."""
        return True

    def _node_variance(self) -> float:
        return 2.0 * self.scale**2 if self.distribution == "laplace" else self.scale**2

    @property
    def point_variances(self) -> np.ndarray:
        """Noise variance of ``F_hat(tau_i)`` for every point (exact).

        003 tree: ``2 (L+1)^3 / (eps^2 n^2)`` everywhere (Thm 1). Hierarchical: the
        effective resistance of each point to the ground over ``n^2``
        (:meth:`HierarchicalPlan.point_variances`); it varies by point.
        """
        size = self.values.size
        if self.scale == 0.0:
            return np.zeros(size)
        if self.plan is not None:
            return self.plan.point_variances(self.epsilon) / self.n**2
        return np.full(size, self.tree.n_levels * self._node_variance() / self.n**2)

    @property
    def variance(self) -> float:
        """The largest pointwise noise variance of ``F_hat`` (:attr:`point_variances`).

        003 tree: every point has ``2 (L+1)^3 / (eps^2 n^2)`` (Thm 1).
        """
        if self.scale == 0.0:
            return 0.0
        if self.plan is None:
            return self.tree.n_levels * self._node_variance() / self.n**2
        return float(np.max(self.point_variances))

    @property
    def std_error(self) -> float:
        return math.sqrt(self.variance)

    @property
    def error(self) -> ErrorDistribution:
        """Law of ``F_hat(tau_i) - F(tau_i)`` at the point with the largest variance.

        003 tree: each point's noise is the sum of one node per level, ``L + 1``
        independent Laplace(b) (or Gaussian) variables divided by n (003 Eq. 2), the same
        at every point: with about ten levels no term is small, so the Laplace sum is kept
        exact (:func:`~fedustat.privacy.errors.error_sum`, a numerical convolution) rather
        than approximated by a normal law. Hierarchical: ``sum_k w_k Lap(s_k) / n`` over
        every node, with the weights of :meth:`HierarchicalPlan.node_weights`, by
        :func:`~fedustat.privacy.errors.laplace_sum` (normal when no node carries more
        than 10% of the variance, the exact sum otherwise).
        """
        if self.plan is not None and self.scale > 0:
            worst = int(np.argmax(self.point_variances))
            weights = self.plan.node_weights(self.epsilon, worst)
            return laplace_sum(weights * self.plan.node_scales(self.epsilon) / self.n)
        return _point_error(self.tree.n_levels, self.scale / self.n, self.distribution)

    def covariance(self) -> np.ndarray:
        """Dense N x N noise covariance of :attr:`values` (CDF units).

        003 tree: points i and j share the nodes ``(l, i >> l)`` with ``i >> l == j >> l``,
        so ``Cov = (node variance / n^2) * #{l : i >> l == j >> l}`` (003 Eq. 2).
        Hierarchical: :meth:`HierarchicalPlan.covariance` over ``n^2``.
        """
        size = self.values.size
        if size > _MAX_DENSE:
            raise ValueError(f"a dense covariance of {size} points is too large (limit "
                             f"{_MAX_DENSE}); use linear_variance(weights)")
        if self.scale == 0.0:
            return np.zeros((size, size))
        if self.plan is not None:
            return self.plan.covariance(self.epsilon) / self.n**2
        idx = np.arange(size)
        shared = np.zeros((size, size))
        for lev in range(self.tree.n_levels):
            shared += (idx[:, None] >> lev) == (idx[None, :] >> lev)
        return shared * (self._node_variance() / self.n**2)

    def linear_variance(self, weights: Any) -> np.ndarray | float:
        """``w^T Cov w`` of the noise of :attr:`values` for ``w`` of shape (N,) or (k, N)
        (a float or one value per row), without the dense matrix.

        003 tree: ``(node variance / n^2) sum_nodes (sum of w over the node's points)^2``
        (003 Eq. 2), O(N L). Hierarchical: one least-squares pass per row, O(N b)
        (:meth:`HierarchicalPlan.linear_variance`).
        """
        w = np.asarray(weights, dtype=np.float64)
        size = self.values.size
        if w.ndim not in (1, 2) or w.shape[-1] != size:
            raise ValueError(f"weights must have shape ({size},) or (k, {size}), got "
                             f"{w.shape}")
        if not np.all(np.isfinite(w)):
            raise ValueError("weights must be finite")
        rows = w.reshape(-1, size)
        if self.scale == 0.0:
            out = np.zeros(rows.shape[0])
        elif self.plan is not None:
            out = np.atleast_1d(self.plan.linear_variance(rows, self.epsilon)) / self.n**2
        else:
            out = np.zeros(rows.shape[0])
            for lev in range(self.tree.n_levels):
                starts = np.arange(0, size, 1 << lev)
                sums = np.add.reduceat(rows, starts, axis=1)
                out += np.einsum("ij,ij->i", sums, sums)
            out *= self._node_variance() / self.n**2
        return float(out[0]) if w.ndim == 1 else out

    def confidence_band(self, confidence_level: float = 0.95, *,
                        simultaneous: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` arrays bracketing the exact ECDF at the grid points.

        Pointwise (default): each point's interval covers its exact value with
        probability ``confidence_level``, from the law :attr:`error` (003's tree: the
        exact law, the same at every point; hierarchical: the worst point's law scaled to
        each point's standard deviation, normal whenever no node carries more than 10% of
        the worst point's variance).
        ``simultaneous=True``: all N points at once. Hierarchical: ``+- c sd_i`` with ``c``
        the quantile of the studentized maximum error over the points
        (:func:`~fedustat.protocols.ecdf.hierarchical.sup_critical_value`), a band at the
        level itself. 003 tree: by the union bound over the points (each at level
        ``1 - (1 - confidence_level) / N`` of the exact law every point shares), a
        conservative band.
        """
        level = confidence_level
        if not (isinstance(level, int | float) and not isinstance(level, bool)
                and 0.0 < level < 1.0):
            raise ValueError(f"confidence_level must be a number in (0, 1), got {level!r}")
        if simultaneous and self.plan is not None and self.scale > 0:
            sd = np.sqrt(self.point_variances)
            half_band = sup_critical_value(self.plan, level) * sd
            return self.values - half_band, self.values + half_band
        if simultaneous:
            level = 1.0 - (1.0 - level) / self.values.size
        if self.scale == 0:
            half: Any = 0.0
        elif self.plan is not None:
            # The worst point's law (error), scaled to each point's own standard deviation.
            sd = np.sqrt(self.point_variances)
            half = self.error.half_width(level) * sd / np.max(sd)
        else:
            half = self.error.half_width(level)
        return self.values - half, self.values + half

    def __call__(self, t: Any) -> np.ndarray:
        """Right-continuous step evaluation at ``t`` (0 below the first threshold)."""
        return step_at(self.thresholds, self.values, t)


@functools.lru_cache(maxsize=64)
def _point_error(n_levels: int, scale: float, distribution: Distribution
                 ) -> ErrorDistribution:
    """The sum of ``n_levels`` independent node noises of scale ``scale`` (cached: a
    curve's points all share it, and its quantiles are found numerically)."""
    if scale == 0.0:
        return NormalError(0.0)
    if distribution == "gaussian":
        return NormalError(math.sqrt(n_levels) * scale)
    return error_sum([LaplaceError(scale)] * n_levels)


def dp_ecdf(values: Any, thresholds: Any, *, epsilon: float, rng: RandomLike = None,
            noise: NoiseSource | None = None, tree_noise: TreeNoise | None = None,
            method: str | None = None, plan: HierarchicalPlan | None = None
            ) -> PrivateECDF:
    """The eps-DP ECDF on a public grid (replace-one adjacency, n public).

    ``method="hierarchical"`` (the default): Laplace noise on a b-ary histogram tree over
    the bins, least-squares consistency with the public n (Hay et al. 2010 Sec. 4;
    Qardaji, Yang and Li 2013), branching factor and per-level budget chosen by the exact
    mean variance of the N prefix counts (:func:`~fedustat.protocols.ecdf.hierarchical.
    default_plan`, or ``plan``). The curve is unbiased, its variance varies by point
    (:attr:`PrivateECDF.point_variances`).

    ``method="003-tree"``: 003 Sec. 3.1 as written, ``F_hat(tau_i) = F(tau_i) + (1/n)
    sum_{l=0}^{L} eta_{(l, i >> l)}`` with one ``eta ~ Lap((L + 1) / eps)`` per dyadic node,
    ``L = ceil(log2 N)`` (eps-DP by 003 Thm 1: a replaced record moves the count vector by
    ``±1`` on an interval, which a signed sum of at most ``L + 1`` nodes explains,
    :meth:`~fedustat.stats.ecdf.DyadicTree.cover`); variance ``2 (L + 1)^3 / (eps^2 n^2)``
    per point. 003's smoothing (Eq. 3) and a pre-drawn ``tree_noise`` need it.

    Parameters
    ----------
    values:
        The data, one value per record (any finite numbers; no bounds are needed because a
        record moves each count by at most one).
    thresholds:
        Strictly increasing grid (e.g. :func:`~fedustat.stats.ecdf.absolute_grid` or
        :func:`~fedustat.stats.ecdf.log_grid` on public bounds; never the data's own
        minimum and maximum, which would leak).
    epsilon:
        Budget > 0; ``math.inf`` returns the exact ECDF.
    rng, noise:
        Seed / Generator, or a :class:`NoiseSource` (``DeploymentNoise()`` for people).
    tree_noise:
        A pre-drawn :class:`TreeNoise` (Laplace, scale ``(L + 1) / eps``) to use instead
        of drawing; implies ``method="003-tree"``.
    method:
        ``"hierarchical"`` or ``"003-tree"`` (None: ``"003-tree"`` if ``tree_noise`` is
        given, else ``"hierarchical"``).
    plan:
        A :class:`HierarchicalPlan` over these thresholds (hierarchical method only).

    Returns
    -------
    PrivateECDF
        The curve on ``thresholds`` (``values``), its guarantee and its error law.

    Examples
    --------
    >>> x = np.random.default_rng(0).uniform(size=1000)
    >>> grid = np.linspace(0.1, 1.0, 10)
    >>> fedustat.protocols.ecdf.dp_ecdf([0.1, 0.4, 0.5, 0.9], [0.25, 0.5, 0.75, 1.0],
    ...                  epsilon=math.inf).values
    array([0.25, 0.75, 0.75, 1.  ])
    >>> np.round(fedustat.protocols.ecdf.dp_ecdf(x, grid, epsilon=1.0, rng=0).values, 2)
    array([0.09, 0.19, 0.27, 0.36, 0.46, 0.58, 0.67, 0.78, 0.9 , 1.  ])
    """
    x = as_float_array(values, "values")
    tau = check_thresholds(thresholds)
    ECDF_GRID_LIMIT.check(tau.size, "thresholds")
    eps = check_epsilon(epsilon, allow_inf=True)
    return dp_ecdf_from_counts(ecdf_counts(x, tau), x.size, tau, epsilon=eps, rng=rng,
                               noise=noise, tree_noise=tree_noise, method=method,
                               plan=plan)


def resolve_method(method: str | None, tree_noise: TreeNoise | None,
                   plan: HierarchicalPlan | None, n_points: int) -> str:
    """The release method, checked against the other arguments."""
    if method is None:
        method = "003-tree" if tree_noise is not None else "hierarchical"
    if method not in ECDF_METHODS:
        raise ValueError(f"method must be one of {ECDF_METHODS}, got {method!r}")
    if tree_noise is not None and method != "003-tree":
        raise ValueError("tree_noise is 003's tree noise: it needs method='003-tree'")
    if plan is not None:
        if method != "hierarchical":
            raise ValueError("plan is for method='hierarchical'")
        if not isinstance(plan, HierarchicalPlan):
            raise TypeError(f"plan must be a HierarchicalPlan, got {type(plan).__name__}")
        if plan.n_points != n_points:
            raise ValueError(f"plan is for {plan.n_points} points, the grid has {n_points}")
    return method


def dp_ecdf_from_counts(counts: Any, n: int, thresholds: Any, *, epsilon: float,
                        rng: RandomLike = None, noise: NoiseSource | None = None,
                        tree_noise: TreeNoise | None = None, method: str | None = None,
                        plan: HierarchicalPlan | None = None,
                        adjacency: str = ECDF_ADJACENCY) -> PrivateECDF:
    """:func:`dp_ecdf` from the exact counts ``|{j : x_j <= tau_i}|`` of ``n`` records.

    The curator's work splits into a sum (the counts are sums over records, so a
    distributed server adds its batches' counts, see ``fedustat.runtime.engine``) and
    the noise drawn here; with the same ``rng`` the release is :func:`dp_ecdf`'s.
    ``adjacency`` names the replace-one adjacency in the guarantee (a caller releasing
    several curves of the same records names its own).
    """
    tau = check_thresholds(thresholds)
    ECDF_GRID_LIMIT.check(tau.size, "thresholds")
    eps = check_epsilon(epsilon, allow_inf=True)
    c = np.asarray(counts)
    if c.shape != tau.shape or c.dtype.kind not in "iu":
        raise ValueError(f"counts must hold one integer count per threshold ({tau.size}), "
                         f"got shape {c.shape} and dtype {c.dtype}")
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"n must be a positive integer (the number of records), got {n!r}")
    if c.size and (c.min() < 0 or c.max() > n or np.any(np.diff(c) < 0)):
        raise ValueError("counts must be non-decreasing counts in 0..n (counts of records "
                         "at or below each threshold)")
    method = resolve_method(method, tree_noise, plan, tau.size)
    n = int(n)
    tree = DyadicTree(tau.size)
    counts = c.astype(np.float64)
    if math.isinf(eps):
        if tree_noise is not None:
            raise ValueError("tree_noise was given but epsilon is infinite (exact curve)")
        return PrivateECDF(tau, counts / n, n, tree, 0.0, "laplace", PrivacyGuarantee.none(),
                           "none", method, None, math.inf)
    source = resolve_noise(rng, noise)
    guarantee = PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, adjacency,
                                 assumptions=(trusted_curator(),))
    if method == "hierarchical":
        plan = plan if plan is not None else default_plan(tau.size)
        noisy = hierarchical_noisy_counts(counts, plan, eps, source)
        return PrivateECDF(tau, noisy / n, n, tree, float(plan.scales(eps)[0]), "laplace",
                           guarantee, source.kind, method, plan, eps)
    scale = tree.n_levels / eps
    noisy = noisy_counts(counts, tau.size, scale, source, tree_noise)
    kind = tree_noise.kind if tree_noise is not None else source.kind
    return PrivateECDF(tau, noisy / n, n, tree, scale, "laplace", guarantee, kind, method,
                       None, eps)
