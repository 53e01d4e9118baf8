"""The central DP ECDF on a threshold grid: counts plus tree noise (003 Sec. 3.1, Eq. 2, Thm 1).

Central model: a curator (or a secure aggregation emulating one) sees the exact counts and
adds the noise of :mod:`fedustat.protocols.ecdf.tree_noise`; ``dp_ecdf`` accepts a
pre-drawn ``tree_noise`` so that a federated evaluation can be checked against it.
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
from fedustat.privacy.errors import ErrorDistribution, LaplaceError, NormalError, error_sum
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, trusted_curator
from fedustat.privacy.noise import NoiseSource, resolve_noise
from fedustat.protocols.ecdf.tree_noise import Distribution, TreeNoise, noisy_counts
from fedustat.stats.ecdf import (
    DyadicTree,
    check_thresholds,
    ecdf_counts,
    step_at,
)

__all__ = [
    "ECDF_ADJACENCY",
    "PrivateECDF",
    "dp_ecdf",
    "dp_ecdf_from_counts",
]


ECDF_ADJACENCY = "replace one record (n public)"


# --------------------------------------------------------------------------- DP ECDF


@dataclass(frozen=True)
class PrivateECDF:
    """A released ECDF ``F_hat`` on a threshold grid (003 Eq. 2).

    Attributes
    ----------
    thresholds, values:
        The grid and the noisy curve (not necessarily monotone or inside [0, 1]).
    n:
        Number of records (public under the replace-one adjacency).
    tree:
        The dyadic tree of the noise (public structure; smoothing needs it).
    scale, distribution:
        Noise per node, in counts (0 for an exact curve).
    privacy:
        The guarantee delivered.
    noise_kind:
        ``"simulation"``, ``"deployment"`` or ``"none"``.
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

    @property
    def counts(self) -> np.ndarray:
        """The noisy counts ``n F_hat``."""
        return self.values * self.n

    @property
    def variance(self) -> float:
        """Noise variance of ``F_hat`` at each point: ``2 (L+1)^3 / (eps^2 n^2)`` (Thm 1)."""
        node = 2.0 * self.scale**2 if self.distribution == "laplace" else self.scale**2
        return self.tree.n_levels * node / self.n**2

    @property
    def std_error(self) -> float:
        return math.sqrt(self.variance)

    @property
    def error(self) -> ErrorDistribution:
        """Law of ``F_hat(tau_i) - F(tau_i)``, the same at every grid point.

        Each point's noise is the sum of one node per level, ``L + 1`` independent
        Laplace(b) (or Gaussian) variables divided by n (003 Eq. 2): with about ten
        levels no term is small, so the Laplace sum is kept exact
        (:func:`~fedustat.privacy.errors.error_sum`, a numerical convolution) rather than
        approximated by a normal law.
        """
        return _point_error(self.tree.n_levels, self.scale / self.n, self.distribution)

    def confidence_band(self, confidence_level: float = 0.95, *,
                        simultaneous: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` arrays bracketing the exact ECDF at the grid points.

        Pointwise (default): each point's interval covers its exact value with
        probability ``confidence_level``, from the exact law :attr:`error`.
        ``simultaneous=True``: all N points at once, by the union bound over the points
        (each at level ``1 - (1 - confidence_level) / N``), a conservative band.
        """
        level = confidence_level
        if not (isinstance(level, int | float) and not isinstance(level, bool)
                and 0.0 < level < 1.0):
            raise ValueError(f"confidence_level must be a number in (0, 1), got {level!r}")
        if simultaneous:
            level = 1.0 - (1.0 - level) / self.values.size
        half = self.error.half_width(level) if self.scale > 0 else 0.0
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
            noise: NoiseSource | None = None,
            tree_noise: TreeNoise | None = None) -> PrivateECDF:
    """The eps-DP ECDF of 003 Sec. 3.1: tree noise on the counts at every threshold.

    ``F_hat(tau_i) = F(tau_i) + (1/n) sum_{l=0}^{L} eta_{(l, i >> l)}`` with one
    ``eta ~ Lap((L + 1) / eps)`` per dyadic node, ``L = ceil(log2 N)``. Publishing all N
    values is eps-DP (003 Thm 1) under the replace-one-record adjacency (n public): a
    replaced record moves the count vector by ``±1`` on an interval of grid points, which
    a signed sum of at most ``L + 1`` nodes explains
    (:meth:`~fedustat.stats.ecdf.DyadicTree.cover`). Each point's error has variance
    ``2 (L + 1)^3 / (eps^2 n^2)``; the curve is unbiased.

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
        of drawing; the federated evaluation passes the same draw.
    """
    x = as_float_array(values, "values")
    tau = check_thresholds(thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    return dp_ecdf_from_counts(ecdf_counts(x, tau), x.size, tau, epsilon=eps, rng=rng,
                               noise=noise, tree_noise=tree_noise)


def dp_ecdf_from_counts(counts: Any, n: int, thresholds: Any, *, epsilon: float,
                        rng: RandomLike = None, noise: NoiseSource | None = None,
                        tree_noise: TreeNoise | None = None) -> PrivateECDF:
    """:func:`dp_ecdf` from the exact counts ``|{j : x_j <= tau_i}|`` of ``n`` records.

    The curator's work splits into a sum (the counts are sums over records, so a
    distributed server adds its batches' counts, see ``fedustat.runtime.engine``) and
    the tree noise drawn here; with the same ``rng`` the release is :func:`dp_ecdf`'s.
    """
    tau = check_thresholds(thresholds)
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
    n = int(n)
    tree = DyadicTree(tau.size)
    counts = c.astype(np.float64)
    if math.isinf(eps):
        if tree_noise is not None:
            raise ValueError("tree_noise was given but epsilon is infinite (exact curve)")
        return PrivateECDF(tau, counts / n, n, tree, 0.0, "laplace", PrivacyGuarantee.none(),
                           "none")
    scale = tree.n_levels / eps
    source = resolve_noise(rng, noise)
    noisy = noisy_counts(counts, tau.size, scale, source, tree_noise)
    kind = tree_noise.kind if tree_noise is not None else source.kind
    return PrivateECDF(tau, noisy / n, n, tree, scale, "laplace",
                       PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, ECDF_ADJACENCY,
                                        assumptions=(trusted_curator(),)), kind)
