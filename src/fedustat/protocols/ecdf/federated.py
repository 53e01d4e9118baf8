"""Federated evaluation of the tree-noise DP ECDF: the released curve, shared by both evaluations.

The two evaluations live in :mod:`~fedustat.protocols.ecdf.secagg` and
:mod:`~fedustat.protocols.ecdf.fss`, the shared noise in
:mod:`~fedustat.protocols.ecdf.shared_noise`.

Source: 003 (DP empirical CDFs), Sec. 4 (Eq. 4), Sec. 4.1 (pointwise evaluation through
secure aggregation) and Sec. 4.2 (function secret sharing); the mechanism itself is
Sec. 3.1 (Eq. 2, Thm 1), implemented centrally in :mod:`fedustat.protocols.ecdf.release`.

003 Eq. (4) writes the private ECDF at a grid point as a noisy U-statistic of degree one:
``F_hat(tau_i) = U_{phi <= tau_i}(X, eta : I[L, i])`` — the count of values ``<= tau_i``
plus the ``L + 1`` node noises of the dyadic intervals that cover point ``i``. Both
evaluations below compute exactly that, with the count aggregated in secret and the node
noise held as secret shares by the servers, so the servers open ``count + noise`` and
nothing else.

* **Pointwise secure aggregation (Sec. 4.1).** For a query ``B`` of grid positions,
  every party secret-shares its indicator vector ``1[x_i <= tau_b]`` (``b in B``) among
  ``m >= 2`` servers, additively over Z_{2^l}. Each server sums the shares it received,
  scales the sum to fixed point, adds its share of the noise of each queried point and
  sends the result to the querier, who adds the ``m`` shares. Every party takes part in
  every query: ``m |B| l`` bits per party (003: O(n |B|) in total).
* **Function secret sharing (Sec. 4.2).** Once, each party turns its value into a grid
  position ``g_i = #{tau < x_i}`` and gives the two servers the two keys of a
  distributed comparison function (DCF, :func:`fedustat.secure.dcf.dcf_gen`) for
  ``f_i(b) = 1[b < g_i] = 1[x_i > tau_b]`` — 003's ``phi_{>}`` — on ``d = bitlen(N)``
  bits. Afterwards the servers answer any query alone: server ``j`` evaluates all ``n``
  keys at the queried positions and sums (its share of ``#{x_i > tau_b}``); the count is
  ``n`` minus that. The DCF of :mod:`fedustat.secure.dcf` (Boyle et al., Eurocrypt 2021,
  Fig. 3) is two-party, so ``m = 2`` here (003 mentions ``m > 2``; not implemented).
  Upload ``2 K_DCF(d)`` bits per party once; each query costs ``2 |B| (w + l)`` bits
  between the querier and the servers, independent of n (003: O(n + m |B|)).

The noise (both evaluations)
----------------------------
The tree noise is drawn **once** per grid and kept by the servers as additive shares of
one value per dyadic node (:class:`SharedTreeNoise`). A query opens ``count_b +
sum_l eta_(l, b >> l)`` for ``b in B``; every answer, to any number of queries, is an
entry of the same eps-DP curve of 003 Thm 1, so further queries cost no privacy. Two
ways to create the shares:

* :func:`distributed_tree_noise` — 002 Protocol B.1 with the servers as recipients:
  ``K >= 2`` independent contributors each draw ``Polya(1/h, t) - Polya(1/h, t)`` per
  node and secret-share it among the servers; the sum over contributors of ``h`` of them
  is one discrete Laplace variable ``P(k) ~ t^|k|`` on the grid ``2^-c Z`` with
  ``t = exp(-2^-c / b)``, ``b = (L + 1) / eps``. It is eps-DP by Thm 1's coupling: a
  replaced record shifts at most ``L + 1`` node noises by one count, i.e. by ``2^c`` grid
  units, which changes the probability by ``t^(-2^c) = e^(1/b)`` per node. With
  ``min_honest = h`` the release stays eps-DP against anyone who knows the parts of up
  to ``K - h`` contributors (the default ``h = 1``: each contributor's part alone is a
  full discrete Laplace, so the servers may be the contributors; the variance is ``K/h``
  times that of one discrete Laplace).
* :func:`share_tree_noise` — a noise dealer secret-shares a given :class:`TreeNoise`
  (e.g. from :func:`~fedustat.protocols.ecdf.draw_tree_noise`) after rounding each node
  to the fixed-point grid ``2^-c``. Still eps-DP: the rounded noise takes the value
  ``k 2^-c`` with the Laplace mass of the cell around it, and a shift by ``2^c`` cells
  maps cells onto cells with a mass ratio at most ``e^(1/b)``. This is how the "same
  noise draw, same curve" check against :func:`~fedustat.protocols.ecdf.dp_ecdf` is
  made: the curves agree to ``(L + 1) 2^-(c+1) / n`` (the rounding of ``L + 1`` nodes).
  The dealer knows the noise, so it must be independent of the servers and never see a
  release (the trust placed in the secure layer's dealer).

The hierarchical tree (``method="hierarchical"``, the default for the whole grid)
------------------------------------------------------------------------------------
The central default (:mod:`~fedustat.protocols.ecdf.hierarchical`: a b-ary histogram tree,
Laplace ``2 / (eps w_l)`` per level, least squares, Hay et al. 2010 Sec. 4) fits the same
evaluations: a node over the bins ``[s, e)`` holds ``c_{e-1} - c_{s-1}``, linear in the
prefix counts, so each server forms its share of every node from its shares of the counts
at every grid point (:func:`node_shares`), adds its share of the node's noise (one scale
per level, :func:`~fedustat.protocols.ecdf.shared_noise.distributed_node_noise`) and the
querier opens the noisy node vector, the central mechanism's output (eps-DP by the same
argument, with the discrete Laplace's shift ratio ``e^(1/s_l)`` per node); the least squares
in the clear (:func:`nodes_to_counts`) is post-processing.

Nothing is opened but the noisy counts at the queried points (or the noisy nodes):
individual values are information-theoretically hidden from any ``m - 1`` servers in the
pointwise protocol, and computationally (AES-based PRG of the DCF) from either single
server in the FSS protocol; the FSS servers must not collude.

Run as protocol steps (:class:`~fedustat.protocols.ecdf.PointwiseECDF`,
:class:`~fedustat.protocols.ecdf.FssECDF`, simulated or networked), the servers are the
parties ``0..m-1`` (*computing parties*) and the aggregator is the querier: the shares or
keys travel to them in relay rounds (end-to-end encrypted through the aggregator in a
networked run), the contributors of distributed noise are the parties ``0..K-1`` and send
their noise at the queried points only, and the computing parties upload their opened
shares. Every party step uses its own value and the rows it received, so the noise-free
release does not depend on how parties are grouped.

Costs are measured: party uploads from the :class:`~fedustat.protocols.base.Message`
objects the party steps emit, server traffic from a
:class:`~fedustat.secure.transcript.Transcript`.
:func:`fedustat.secure.dcf.dcf_sum_at` evaluates all keys at a shared, sorted set of
points by walking the trie of the points once per key (``~2 |B|`` PRG nodes instead of
``d |B|``), which makes the FSS servers practical at ``n = 10^5``, ``|B| = 1024``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from fedustat._validation import (
    RecordCheckError,
    as_float_array,
    check_bounds_pair,
)
from fedustat.privacy.errors import (
    ErrorDistribution,
    LaplaceError,
    NormalError,
    error_sum,
    laplace_sum,
)
from fedustat.privacy.guarantee import (
    PrivacyGuarantee,
    PrivacyModel,
    computational,
    honest_noise,
    non_colluding_servers,
    semi_honest,
    trusted_dealer,
)
from fedustat.protocols.base import PEER_FROM, Cost, Estimate, Message, Role, normal_std_error
from fedustat.protocols.ecdf.hierarchical import (
    HierarchicalPlan,
    default_plan,
    estimate_with_variances,
    linear_node_weights,
    node_intervals,
    point_variances_with,
    split_levels,
)
from fedustat.protocols.ecdf.release import ECDF_ADJACENCY, GridLimit, PrivateECDF
from fedustat.protocols.ecdf.shared_noise import NoiseLaw, SharedTreeNoise
from fedustat.protocols.ecdf.smoothing import SmoothedECDF, smooth_counts
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.noise import PolyaDifferenceError
from fedustat.secure.sharing import reconstruct
from fedustat.secure.transcript import Transcript
from fedustat.stats.ecdf import DyadicTree, absolute_grid, check_thresholds, step_at

__all__ = [
    "DEFAULT_BATCH",
    "FEDERATED_METHODS",
    "FederatedECDF",
    "index_bits",
]

#: The federated releases' methods (as the central ``ECDF_METHODS``).
FEDERATED_METHODS = ("hierarchical", "003-tree")

DEFAULT_BATCH = 4096  # parties per batch in the in-process runners (memory, not results)
#: The largest grid of the federated releases run in one process: a batch of
#: DEFAULT_BATCH parties' shares of every point is held at once.
FEDERATED_GRID_LIMIT = GridLimit(
    2**12, "a federated ECDF release run in one process",
    "a batch of 4096 parties' shares of every point is held at once, about 220 KiB per "
    "point (896 MiB measured at 2^12 points)")


# ----------------------------------------------------------------------------- helpers


def query_indices(query: Any, n_points: int) -> np.ndarray:
    """Grid positions of a query: None (all), a boolean mask, or integer positions."""
    if query is None:
        return np.arange(n_points, dtype=np.int64)
    arr = np.asarray(query)
    if arr.dtype == bool:
        if arr.shape != (n_points,):
            raise ValueError(f"query as a boolean mask must have shape ({n_points},), "
                             f"got {arr.shape}")
        idx = np.flatnonzero(arr).astype(np.int64)
    else:
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError("query must be None, a boolean mask over the thresholds or a "
                             "1-D array of integer grid positions")
        idx = np.unique(arr.astype(np.int64))
        if idx.size and (idx[0] < 0 or idx[-1] >= n_points):
            raise ValueError(f"query positions must be in [0, {n_points - 1}], got "
                             f"{int(idx[0])}..{int(idx[-1])}")
    if idx.size == 0:
        raise ValueError("query selects no threshold; ask for at least one grid position")
    return idx


def resolve_federated_method(method: Any, query: np.ndarray, n_points: int,
                             noise: Any = None, tree_noise: Any = None
                             ) -> tuple[str, HierarchicalPlan | None]:
    """The release method and, for ``"hierarchical"``, its tree. None: the method of the
    noise given (003's ``TreeNoise`` or shares of it: ``"003-tree"``; a ``NodeNoise`` or
    shares of one: ``"hierarchical"`` on its plan); without noise, ``"hierarchical"`` when
    the query covers every grid point (the tree needs every bin) and ``"003-tree"`` for a
    subset query (each queried point then costs its ``L + 1`` nodes only). An explicit
    ``"hierarchical"`` with a subset query evaluates every point and returns the queried
    ones (post-processing of the full release). The tree is the noise's plan, else
    :func:`~fedustat.protocols.ecdf.hierarchical.default_plan` (the central default's)."""
    given_plan = getattr(noise, "plan", None) if noise is not None else None
    if tree_noise is not None:
        given_plan = getattr(tree_noise, "plan", None)
    if method is None:
        if noise is not None or tree_noise is not None:
            method = "003-tree" if given_plan is None else "hierarchical"
        else:
            method = "hierarchical" if query.size == n_points else "003-tree"
    if method not in FEDERATED_METHODS:
        raise ValueError(f"method must be one of {FEDERATED_METHODS}, got {method!r}")
    if method == "003-tree":
        return method, None
    if isinstance(given_plan, HierarchicalPlan) and given_plan.n_points == n_points:
        return method, given_plan
    return method, default_plan(n_points)


def index_bits(n_points: int) -> int:
    """``w``: bits to name one of ``N`` grid positions in a query (at least 1)."""
    return max(1, (int(n_points) - 1).bit_length())




def grid_positions(thresholds: np.ndarray, data: Any) -> np.ndarray:
    """``g = #{tau < x}``: ``x <= tau_b`` iff ``g <= b``; ``g = N`` above the grid."""
    arr = np.asarray(data)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    x = as_float_array(arr, "values")
    return np.searchsorted(thresholds, x, side="left").astype(np.int64)




# ------------------------------------------------------------------------ the release


@dataclass(frozen=True)
class FederatedECDF:
    """The private ECDF at the queried thresholds, released by a federated evaluation.

    Shaped like :class:`~fedustat.protocols.ecdf.PrivateECDF` (``thresholds`` and
    ``values`` aligned, ``n``, ``tree``, ``scale``, ``privacy``, ``counts``,
    ``variance``, step evaluation), so :func:`~fedustat.protocols.ecdf.dp_quantile`
    accepts it; plus the query, the measured costs and the noise's description.

    Attributes
    ----------
    thresholds, values:
        The queried thresholds ``tau_B`` and ``F_hat`` there (003 Eq. 2).
    counts:
        The opened noisy counts ``n F_hat`` (``values = counts / n``).
    indices, grid:
        Their positions in the public grid, and the grid.
    n:
        Number of parties (public).
    tree:
        The dyadic tree over the whole grid.
    scale:
        ``b = (L + 1) / eps`` per node in counts (0 for an exact curve).
    distribution:
        ``"laplace"`` (a continuous draw rounded to ``resolution``),
        ``"discrete-laplace"`` or ``"none"``.
    resolution:
        ``2^-c``: the fixed-point step of the noise in counts.
    node_variance:
        Variance of one node's noise in counts squared (see :class:`SharedTreeNoise`).
    privacy:
        eps-DP, central model, replace-one adjacency (as :func:`dp_ecdf`).
    noise_kind, protocol:
        ``"simulation"``/``"deployment"``/``"none"``; ``"ecdf-pointwise-secagg"`` or
        ``"ecdf-fss"``.
    cost:
        This query's traffic (measured).
    setup_cost:
        One-time traffic: the noise shares, and for FSS the key upload (measured).
    diagnostics:
        Bits by message kind, timings, evaluation counts, the trust statement.
    method, plan:
        ``"003-tree"`` (003 Eq. 2 at the queried points) or ``"hierarchical"`` (the
        opened noisy node vector of ``plan``'s tree and its least-squares estimate, the
        central ``dp_ecdf(method="hierarchical")`` mechanism); ``plan`` is None for 003.
    level_variances:
        Hierarchical: one node's noise variance per level, ``l = 0 .. H`` (counts squared).
    """

    #: Fields that depend on the data: the noisy counts at the queried points and the curve
    #: from them.
    released_fields: ClassVar[tuple[str, ...]] = ("values", "counts")

    thresholds: np.ndarray
    values: np.ndarray
    counts: np.ndarray
    indices: np.ndarray
    grid: np.ndarray
    n: int
    tree: DyadicTree
    scale: float
    distribution: str
    resolution: float
    node_variance: float
    privacy: PrivacyGuarantee
    noise_kind: str
    protocol: str
    cost: Cost
    setup_cost: Cost
    diagnostics: dict[str, Any] = field(default_factory=dict)
    method: str = "003-tree"
    plan: HierarchicalPlan | None = None
    level_variances: tuple[float, ...] = ()

    @property
    def point_variances(self) -> np.ndarray:
        """Noise variance of ``F_hat`` at each queried point (exact).

        003: ``(L + 1)`` node variances / n^2 everywhere (Eq. 2). Hierarchical: the
        effective resistance of the point with the actual per-level node variances
        (:func:`~fedustat.protocols.ecdf.hierarchical.point_variances_with`) / n^2.
        """
        if self.distribution == "none":
            return np.zeros(self.indices.size)
        if self.plan is not None:
            full = point_variances_with(self.plan, np.asarray(self.level_variances))
            return full[self.indices] / self.n**2
        return np.full(self.indices.size, self.tree.n_levels * self.node_variance / self.n**2)

    @property
    def variance(self) -> float:
        """Noise variance of ``F_hat``: ``(L + 1)`` node variances / n^2 (003, every
        point); the largest of :attr:`point_variances` (hierarchical)."""
        if self.plan is not None:
            return float(np.max(self.point_variances))
        return self.tree.n_levels * self.node_variance / self.n**2

    def _node_laws(self, weights: np.ndarray) -> ErrorDistribution:
        """Hierarchical: the law of ``sum_k weights_k eta_k`` over the noisy nodes.

        Each node's noise is replaced by a Laplace law of the same variance
        (:func:`~fedustat.privacy.errors.laplace_sum`: normal when no node carries more
        than 10% of the variance, the exact Laplace sum otherwise). Exact for a dealer's
        Laplace draw (up to the ``2^-c`` rounding); for ``K / h > 1`` discrete Laplace
        parts per node the true law has lighter tails than that Laplace, so its
        intervals are conservative.
        """
        _, _, levels = node_intervals(self.plan)
        var = np.asarray(self.level_variances)[levels]
        return laplace_sum(weights * np.sqrt(var / 2.0))

    @property
    def std_error(self) -> float:
        return math.sqrt(self.variance)

    def node_error(self, weight: float = 1.0, copies: int = 1) -> ErrorDistribution:
        """The law of the sum of ``copies`` independent node noises, times ``weight``, in
        counts.

        Distributed noise (002 Protocol B.1): one node is ``X - Y``, ``X, Y ~ NB(K/h, t)``
        on the grid ``2^-c``, so ``copies`` of them are ``NB(copies K/h, t)`` differences,
        exactly (:class:`~fedustat.secure.PolyaDifferenceError`). Dealer-shared draw: a
        Laplace(b) per node (its rounding to ``2^-c``, at most ``2^-(c+1)`` per node, is
        neglected; c = 20 by default).
        """
        if self.distribution == "none":
            return NormalError(0.0)
        if self.distribution == "laplace":
            one = LaplaceError(self.scale * abs(weight))
            # Gil-Pelaez over many Laplace terms is slow; beyond 64 the CLT is accurate.
            if copies > 64:
                return NormalError(math.sqrt(copies * one.variance))
            return error_sum([one] * copies)
        shape = (self.diagnostics.get("noise_contributors", 1)
                 / self.diagnostics.get("noise_min_honest", 1))
        t = math.exp(-self.resolution / self.scale)
        return PolyaDifferenceError(copies * shape, t, self.resolution * abs(weight))

    def point_error(self) -> ErrorDistribution:
        """The law of ``F_hat(tau) - F_n(tau)`` at any one grid point: the ``L + 1``
        covering nodes' noise (003 Eq. 2) divided by ``n``. Hierarchical: at the queried
        point of largest variance, ``sum_k w_k eta_k / n`` with the least-squares weights
        of every node (:meth:`_node_laws`)."""
        if self.plan is not None and self.distribution != "none":
            worst = int(self.indices[int(np.argmax(self.point_variances))])
            e = np.zeros(self.grid.size)
            e[worst] = 1.0
            weights = linear_node_weights(self.plan, e, np.asarray(self.level_variances))
            return self._node_laws(weights / self.n)
        return self.node_error(1.0 / self.n, self.tree.n_levels)

    def confidence_band(self, confidence_level: float = 0.95, *,
                        simultaneous: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise intervals ``(low, high)`` at the queried thresholds from
        :meth:`point_error` (each point covers at ``confidence_level``; hierarchical: the
        worst point's law scaled to each point's standard deviation). ``simultaneous=True``:
        every queried point at once, by the union bound (each at
        ``1 - (1 - confidence_level) / N``; a query is not always the whole tree, so the
        max-t band of :meth:`PrivateECDF.confidence_band` does not apply)."""
        if simultaneous:
            confidence_level = 1.0 - (1.0 - confidence_level) / self.values.size
        half: Any = self.point_error().half_width(confidence_level)
        if self.plan is not None and self.distribution != "none":
            sd = np.sqrt(self.point_variances)
            half = half * sd / np.max(sd)
        return self.values - half, self.values + half

    def __call__(self, t: Any) -> np.ndarray:
        """Right-continuous step evaluation on the queried thresholds (0 below them)."""
        return step_at(self.thresholds, self.values, t)

    def to_private_ecdf(self) -> PrivateECDF:
        """The release as a :class:`~fedustat.protocols.ecdf.PrivateECDF` (query = grid).

        ``PrivateECDF.variance`` assumes ``2 scale^2`` per node; the scale given is the
        Laplace scale with this noise's variance, ``sqrt(node_variance / 2)`` (equal to
        ``b`` for a rounded Laplace draw, slightly below it for one discrete Laplace).
        """
        if self.indices.size != self.grid.size:
            raise ValueError(f"to_private_ecdf needs the curve at every grid point; this "
                             f"query has {self.indices.size} of {self.grid.size} (query=None "
                             f"evaluates them all)")
        if self.plan is not None:
            eps = self.privacy.epsilon
            central = self.plan.level_variances(eps)
            # Integer discrete Laplace (c = 0) is up to ~2% less variable than Laplace at
            # the root's scale 2/eps; beyond 5% (K/h > 1) PrivateECDF would misstate it.
            if self.distribution != "none" and not np.allclose(
                    self.level_variances, central, rtol=0.05):
                raise ValueError("this hierarchical release's node variances differ from the "
                                 "central release's (several contributors' parts per node, "
                                 "min_honest < contributors); PrivateECDF would misstate its "
                                 "error: use this FederatedECDF's variances")
            return PrivateECDF(self.grid, self.values, self.n, self.tree, self.scale,
                               "laplace", self.privacy, self.noise_kind, "hierarchical",
                               self.plan, eps if self.distribution != "none" else math.inf)
        return PrivateECDF(self.grid, self.values, self.n, self.tree,
                           math.sqrt(self.node_variance / 2.0), "laplace", self.privacy,
                           self.noise_kind)

    def smooth(self, p: int = 2, *, method: Literal["auto", "active-set", "highs",
                                                    "cvxopt"] = "auto") -> SmoothedECDF:
        """003 Eq. 3 on the queried points (post-processing, same guarantee)."""
        if self.plan is not None:
            raise ValueError("003's smoothing (Eq. 3) corrects 003's tree noise; this release "
                             "is hierarchical: release with method='003-tree' to smooth it, or "
                             "use isotonic_projection(curve.to_private_ecdf())")
        full = np.zeros(self.grid.size)
        full[self.indices] = self.counts
        idx, smoothed, nu, info = smooth_counts(full, self.tree, self.n, p=p,
                                                subset=self.indices, method=method)
        return SmoothedECDF(
            thresholds=self.grid[idx], values=smoothed / self.n, raw_values=self.values,
            indices=idx, n=self.n, p=p, estimator="tree-noise", correction=nu,
            objective=info["objective"], method=info["method"],
            iterations=info["iterations"], seconds=info["seconds"], privacy=self.privacy,
            diagnostics={"max_violation_removed": info["max_violation_removed"] / self.n},
            noise_kind=self.noise_kind)


#: Default grid from public bounds: 2^10 intervals of (hi - lo) / 2^10.
DEFAULT_GRID_LEVELS_LOG2 = 10


def grid_from_bounds(thresholds: Any, bounds: Any, precision: float | None
                     ) -> tuple[np.ndarray, tuple[float, float] | None]:
    """The public grid: ``thresholds`` as given, or from ``bounds=(lo, hi)`` on
    ``precision Z`` (:func:`~fedustat.stats.ecdf.absolute_grid`, 003 Sec. 3.1; default
    precision ``(hi - lo) / 2^10``). The curve's resolution is the grid spacing: values
    between two thresholds count at the next one. Returns the grid and the bounds."""
    declared: tuple[float, float] | None = None
    if bounds is not None:
        declared = check_bounds_pair(bounds, "bounds")
    if thresholds is not None:
        if precision is not None:
            raise ValueError("precision sets the spacing of a grid built from bounds; pass "
                             "either thresholds or bounds=(lo, hi) with precision")
        tau = check_thresholds(thresholds)
        FEDERATED_GRID_LIMIT.check(tau.size, "thresholds")
        return tau, declared
    if declared is None:
        raise ValueError("give the public grid: thresholds, or bounds=(lo, hi) (and "
                         "precision=, the grid spacing)")
    lo, hi = declared
    if precision is None:
        gamma = (hi - lo) / 2.0**DEFAULT_GRID_LEVELS_LOG2
    else:
        if isinstance(precision, bool) or not isinstance(precision, int | float) \
                or not math.isfinite(precision) or precision <= 0:
            raise ValueError(f"precision must be a finite number > 0, got {precision!r}")
        gamma = float(precision)
        if gamma >= hi - lo:
            # A spacing as wide as the range leaves one or two thresholds: every value
            # counts at the same point and the curve says nothing about the data.
            raise ValueError(f"precision={precision!r} is not below the width {hi - lo:g} of "
                             f"the bounds [{lo:g}, {hi:g}]: the grid would hold every value "
                             "at one or two points; declare the grid spacing that matters, "
                             "well below the width (default: the width / 2^10)")
        # Counted before the grid is built (absolute_grid's first and last multiples).
        FEDERATED_GRID_LIMIT.check(math.ceil(hi / gamma) - math.ceil(lo / gamma) + 1,
                                   "precision")
    return check_thresholds(absolute_grid(lo, hi, gamma)), declared


def check_in_bounds(values: np.ndarray, bounds: tuple[float, float] | None) -> None:
    """Each party checks its own value against the public bounds (if declared)."""
    if bounds is None:
        return
    lo, hi = bounds
    bad = (values < lo) | (values > hi)
    if np.any(bad):
        raise RecordCheckError("values outside the declared bounds of the column",
                               f"data: {int(bad.sum())} value(s) outside the declared bounds "
                               f"[{lo:g}, {hi:g}]; declare bounds that hold every value")


def _guarantee(epsilon: float, protocol: str = "", n_servers: int = 2,
               noise: SharedTreeNoise | NoiseLaw | None = None,
               relayed: bool = False) -> PrivacyGuarantee:
    if math.isinf(epsilon):
        return PrivacyGuarantee.none()
    # 003 Sec. 4: parties share with servers that must not all collude; the noise is
    # drawn by contributors (Protocol B.1) or shared by a dealer.
    servers = "parties and servers"
    if relayed:
        # Run as a protocol, the m servers are the parties 0..m-1 (computing parties).
        servers = f"parties, of which parties 0..{n_servers - 1} compute as the servers,"
    assumptions = [semi_honest(servers), non_colluding_servers(n_servers)]
    if noise is not None and noise.distribution == "laplace":
        assumptions.append(trusted_dealer("the tree noise shares (it knows the noise)"))
    elif noise is not None:
        assumptions.append(honest_noise(noise.contributors, noise.min_honest))
    model = PrivacyModel.CENTRAL
    if protocol == "ecdf-fss":
        # The DCF keys hide a party's value only from bounded servers: the same model
        # the curve registry states for ecdf-fss (and pairs-2pc for its garbled circuits).
        assumptions.append(computational("the AES-128 based PRG of the DCF keys"))
        model = PrivacyModel.COMPUTATIONAL
    return PrivacyGuarantee(epsilon, 0.0, model, ECDF_ADJACENCY,
                            assumptions=tuple(assumptions))


def open_counts(count_shares: np.ndarray, indices: np.ndarray,
                 noise: SharedTreeNoise | None, fixed_point: FixedPoint,
                 transcript: Transcript) -> np.ndarray:
    """Servers: scale their count shares to fixed point, add their noise shares and send
    them to the querier, who adds them up (one round, ``m |B| l`` bits). Returns counts."""
    ring = fixed_point.ring
    units = ring.mul(count_shares, np.uint64(1 << fixed_point.frac_bits))
    if noise is not None:
        units = ring.add(units, noise.point_shares(indices))
    transcript.record_to_server("ecdf.release", ring.bits * indices.size)
    return fixed_point.decode(reconstruct(units, ring=ring))


def node_shares(units: np.ndarray, tree_plan: HierarchicalPlan, fixed_point: FixedPoint
                ) -> np.ndarray:
    """Shares of every noisy node from shares of the prefix counts (..., N), locally: a
    node over bins ``[s, e)`` is ``c_{e-1} - c_{s-1}`` (``c_{-1} = 0``), linear, so each
    server applies it to its own share (mod 2^l). Shape (..., #nodes)."""
    ring = fixed_point.ring
    starts, ends, _ = node_intervals(tree_plan)
    arr = np.asarray(units, dtype=np.uint64)
    ext = np.concatenate([np.zeros((*arr.shape[:-1], 1), np.uint64), arr], axis=-1)
    return ring.sub(ext[..., ends], ext[..., starts])


def open_nodes(count_shares: np.ndarray, tree_plan: HierarchicalPlan,
               noise: SharedTreeNoise | None, fixed_point: FixedPoint,
               transcript: Transcript) -> np.ndarray:
    """Servers: their shares of the counts at every grid point to fixed point, to node
    shares (:func:`node_shares`), plus their node-noise shares; sent to the querier, who
    adds them (one round, ``m #nodes l`` bits). Returns the noisy nodes in counts."""
    ring = fixed_point.ring
    units = node_shares(ring.mul(count_shares, np.uint64(1 << fixed_point.frac_bits)),
                        tree_plan, fixed_point)
    if noise is not None:
        units = ring.add(units, noise.shares)
    transcript.record_to_server("ecdf.release", ring.bits * units.shape[-1])
    return fixed_point.decode(reconstruct(units, ring=ring))


def nodes_to_counts(nodes: np.ndarray, tree_plan: HierarchicalPlan,
                    noise: SharedTreeNoise | NoiseLaw | None) -> np.ndarray:
    """The querier's least squares in the clear (post-processing of the opened node
    vector): prefix counts at every grid point, weighted by the noise's per-level
    variances (the central release's when they are Laplace of the plan's scales)."""
    if noise is None:
        # Exact nodes: the leaves are the bins, their prefix sums the exact counts.
        return np.cumsum(np.asarray(nodes, dtype=np.float64)[:tree_plan.n_points])
    var = np.asarray(noise.level_variances)
    return estimate_with_variances(tree_plan, split_levels(tree_plan, nodes), var)


def release_curve(protocol: str, grid: np.ndarray, tree: DyadicTree, indices: np.ndarray,
             counts: np.ndarray, n: int, epsilon: float, fixed_point: FixedPoint,
             noise: SharedTreeNoise | NoiseLaw | None, cost: Cost, setup_cost: Cost,
             diagnostics: dict[str, Any], relayed: bool = False,
             tree_plan: HierarchicalPlan | None = None) -> FederatedECDF:
    """The released curve at ``indices``; hierarchical (``tree_plan``): ``counts`` are
    the opened noisy nodes, turned into prefix counts here."""
    levels: tuple[float, ...] = ()
    if tree_plan is not None:
        counts = nodes_to_counts(counts, tree_plan, noise)[indices]
        if noise is not None:
            levels = tuple(float(v) for v in noise.level_variances)
    if noise is None:
        scale, dist, kind, node_var = 0.0, "none", "none", 0.0
    else:
        scale, dist, kind, node_var = (noise.scale, noise.distribution, noise.kind,
                                       noise.node_variance)
        diagnostics = {**diagnostics, "noise_contributors": noise.contributors,
                       "noise_min_honest": noise.min_honest,
                       "noise_tolerated_colluders": noise.tolerated_colluders}
    servers = 2 if noise is None else noise.n_servers
    if tree_plan is not None:
        diagnostics = {**diagnostics, "method": "hierarchical",
                       "branching": tree_plan.branching, "height": tree_plan.height,
                       "noisy_nodes": tree_plan.n_noisy_nodes}
    return FederatedECDF(grid[indices], counts / n, counts, indices, grid, n, tree, scale, dist,
                         fixed_point.resolution, node_var,
                         _guarantee(epsilon, protocol, servers, noise, relayed), kind,
                         protocol, cost, setup_cost, diagnostics,
                         "003-tree" if tree_plan is None else "hierarchical", tree_plan,
                         levels)


def curve_estimate(curve: FederatedECDF) -> Estimate:
    """The scalar face of a released curve, for the Protocol contract.

    ``value`` is the mean of ``F_hat`` over the queried points (``F_hat(tau)`` itself for a
    single threshold); its standard error counts each node once per queried point it
    covers: ``Var = sum_nodes w_node^2 var_node / (|B| n)^2``. The curve is
    ``diagnostics["curve"]``. Hierarchical: the mean's node weights by one least-squares
    pass (:func:`~fedustat.protocols.ecdf.hierarchical.linear_node_weights`),
    ``Var = sum_k weight_k^2 v_k``, the law as :meth:`FederatedECDF.point_error`.
    """
    if curve.plan is not None:
        return _hierarchical_estimate(curve)
    weights = np.bincount(curve.tree.point_nodes(curve.indices).ravel(),
                          minlength=curve.tree.n_nodes).astype(np.float64)
    var = float(np.sum(weights**2)) * curve.node_variance / (curve.indices.size * curve.n) ** 2
    # The error law: node noises grouped by their weight, each group's sum exact
    # (FederatedECDF.node_error); the groups add (a union bound for lattice laws).
    denom = curve.indices.size * curve.n
    used, counts = np.unique(weights[weights > 0], return_counts=True)
    parts = [curve.node_error(float(w) / denom, int(c)) for w, c in zip(used, counts,
                                                                         strict=True)]
    error = error_sum(parts) if parts else NormalError(0.0)
    return Estimate(value=float(np.mean(curve.values)), quantity="ecdf",
                    protocol=curve.protocol, privacy=curve.privacy,
                    std_error=normal_std_error(var), error=error, cost=curve.cost,
                    diagnostics={**curve.diagnostics, "curve": curve},
                    noise=curve.noise_kind)


def _hierarchical_estimate(curve: FederatedECDF) -> Estimate:
    if curve.distribution == "none":
        var, error = 0.0, NormalError(0.0)
    else:
        w = np.zeros(curve.grid.size)
        w[curve.indices] = 1.0 / (curve.indices.size * curve.n)
        weights = linear_node_weights(curve.plan, w, np.asarray(curve.level_variances))
        _, _, levels = node_intervals(curve.plan)
        var = float(np.sum(weights**2 * np.asarray(curve.level_variances)[levels]))
        error = curve._node_laws(weights)
    return Estimate(value=float(np.mean(curve.values)), quantity="ecdf",
                    protocol=curve.protocol, privacy=curve.privacy,
                    std_error=normal_std_error(var), error=error, cost=curve.cost,
                    diagnostics={**curve.diagnostics, "curve": curve},
                    noise=curve.noise_kind)


# ------------------------------------------------- relay rounds: computing parties


#: Wire size of the routing field ``to`` (party ids below 2^32; not payload).
ROUTE_BITS = 32


def check_run_size(n: int, n_servers: int, contributors: int = 0) -> int:
    """A run needs the computing parties ``0..m-1`` and the contributors ``0..K-1``."""
    need = max(n_servers, contributors)
    if n < need:
        raise ValueError(f"the run has {n} parties, but parties 0..{n_servers - 1} compute "
                         f"as the {n_servers} servers" + (f" and parties 0..{contributors - 1} "
                                                          f"contribute noise" if contributors
                                                          else "")
                         + f"; it needs at least {need} parties")
    return n


def rows_to_servers(fields: dict[str, np.ndarray], bits: dict[str, int],
                    parties: np.ndarray) -> Message:
    """A relay-round message: ``fields[name][r, j]`` goes from party ``parties[r]`` to
    computing party ``j`` (one row per pair, origin-major)."""
    parties = np.asarray(parties, dtype=np.int64)
    m = next(iter(fields.values())).shape[1] if fields else 0
    flat = {name: np.ascontiguousarray(np.asarray(v).reshape(parties.size * m,
                                                             *np.shape(v)[2:]))
            for name, v in fields.items()}
    flat["to"] = np.tile(np.arange(m, dtype=np.int64), parties.size)
    return Message(Role.PARTY, Role.PARTY, flat, {**bits, "to": ROUTE_BITS},
                   np.repeat(parties, m))


def rows_for(inbox: Message | None, party: int, origins: np.ndarray,
             what: str) -> dict[str, np.ndarray]:
    """The rows computing party ``party`` received, checked to come from exactly
    ``origins`` (in order): a missing, extra or foreign row stops the run."""
    if inbox is None or not inbox.is_peer:
        raise ValueError(f"party {party} expected the relayed {what} and got no relay rows")
    mine = np.asarray(inbox.parties) == party
    got = np.asarray(inbox.fields[PEER_FROM])[mine]
    if not np.array_equal(got, origins):
        missing = np.setdiff1d(origins, got)
        detail = (f"nothing from party {int(missing[0])}" if missing.size
                  else f"{got.size} rows for {origins.size} senders")
        raise ValueError(f"party {party} received {what} from {np.unique(got).size} of "
                         f"{origins.size} parties ({detail}); every party must take part")
    return {name: np.asarray(v)[mine] for name, v in inbox.fields.items() if name != PEER_FROM}


def check_no_rows_for(inbox: Message | None, n_servers: int) -> None:
    """A party that is not a computing party receives no relayed rows."""
    if inbox is None or not inbox.is_peer:
        return
    strays = np.asarray(inbox.parties)[np.asarray(inbox.parties) >= n_servers]
    if strays.size:
        raise ValueError(f"party {int(strays[0])} is not a computing party (0..{n_servers - 1}) "
                         f"but received relayed rows")


def upload_sums(sums: list[np.ndarray], servers: list[int], width: int,
                fixed_point: FixedPoint) -> Message:
    """Each computing party's opened share (``|B|`` ring elements) to the querier; a batch
    without a computing party sends no rows."""
    array = np.asarray(sums, dtype=np.uint64).reshape(len(servers), width)
    return Message(Role.PARTY, Role.SERVER, {"sums": array}, {"sums": fixed_point.bits},
                   np.asarray(servers, dtype=np.int64))


def open_sums(inbox: Message, n_servers: int, width: int, fixed_point: FixedPoint
              ) -> np.ndarray:
    """The querier adds the ``m`` computing parties' shares: ``count + noise`` in counts."""
    senders = np.asarray(inbox.parties)
    if not np.array_equal(senders, np.arange(n_servers)) or "sums" not in inbox.fields:
        raise ValueError(f"the querier expects one share of the counts from each of the "
                         f"computing parties 0..{n_servers - 1}, got rows from parties "
                         f"{senders.tolist()}")
    sums = np.asarray(inbox.fields["sums"], dtype=np.uint64)
    if sums.shape != (n_servers, width):
        raise ValueError(f"sums must have shape ({n_servers}, {width}), got {sums.shape}")
    return fixed_point.decode(reconstruct(sums, ring=fixed_point.ring))
