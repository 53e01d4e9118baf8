"""Federated evaluation of the tree-noise DP ECDF: secure aggregation and FSS servers.

Source: 003 (DP empirical CDFs), Sec. 4 (Eq. 4), Sec. 4.1 (pointwise evaluation through
secure aggregation) and Sec. 4.2 (function secret sharing); the mechanism itself is
Sec. 3.1 (Eq. 2, Thm 1), implemented centrally in :mod:`fedustat.protocols.ecdf`.

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

Nothing is opened but the noisy counts at the queried points: individual values are
information-theoretically hidden from any ``m - 1`` servers in the pointwise protocol,
and computationally (AES-based PRG of the DCF) from either single server in the FSS
protocol; the FSS servers must not collude.

Costs are measured: party uploads from the :class:`~fedustat.protocols.base.Message`
objects the party steps emit, server traffic from a
:class:`~fedustat.secure.transcript.Transcript`.
:func:`fedustat.secure.dcf.dcf_sum_at` evaluates all keys at a shared, sorted set of
points by walking the trie of the points once per key (``~2 |B|`` PRG nodes instead of
``d |B|``), which makes the FSS servers practical at ``n = 10^5``, ``|B| = 1024``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_float_array,
    as_rng,
    as_seed_sequence,
    check_epsilon,
    check_positive_int,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.mechanisms import polya
from fedustat.privacy.noise import DeploymentNoise, NoiseSource, SimulationNoise
from fedustat.protocols.base import Cost, Estimate, Message, Protocol, Role, normal_std_error
from fedustat.protocols.ecdf import ECDF_ADJACENCY, PrivateECDF, TreeNoise, _check_tree_noise
from fedustat.protocols.ecdf_smoothing import SmoothedECDF, smooth_counts
from fedustat.secure.dcf import FssKey, dcf_gen, dcf_sum_at
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.ring import Ring, as_share_rng
from fedustat.secure.sharing import reconstruct, share
from fedustat.secure.transcript import Transcript
from fedustat.stats.ecdf import DyadicTree, _step_at, check_thresholds

__all__ = [
    "FederatedECDF",
    "FssECDF",
    "FssECDFServers",
    "PointwiseECDF",
    "SharedTreeNoise",
    "distributed_tree_noise",
    "fss_ecdf",
    "fss_ecdf_setup",
    "index_bits",
    "pointwise_ecdf",
    "share_tree_noise",
]

Randomness = Literal["simulation", "os"]

DEALER_FRAC_BITS = 20  # rounding of a continuous draw: 2^-21 counts per node at most
DEFAULT_BATCH = 4096  # parties per batch in the in-process runners (memory, not results)
_TAIL_LOG2 = 40  # the noise exceeds the ring's capacity with probability < 2^-40


# ----------------------------------------------------------------------------- helpers


def _query_indices(query: Any, n_points: int) -> np.ndarray:
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


def index_bits(n_points: int) -> int:
    """``w``: bits to name one of ``N`` grid positions in a query (at least 1)."""
    return max(1, (int(n_points) - 1).bit_length())


def _check_servers(n_servers: Any) -> int:
    m = check_positive_int(n_servers, "n_servers")
    if m < 2:
        raise ValueError(f"n_servers must be >= 2: with one server it holds every share "
                         f"and sees the parties' indicators, got {n_servers!r}")
    return m


def _fixed_point(ring_bits: Any, frac_bits: Any) -> FixedPoint:
    bits = check_positive_int(ring_bits, "ring_bits", minimum=2)
    frac = check_positive_int(frac_bits, "frac_bits", minimum=0)
    if bits > 64:
        raise ValueError(f"ring_bits must be <= 64, got {bits}")
    if frac >= bits - 1:
        raise ValueError(f"frac_bits must be < ring_bits - 1 = {bits - 1}, got {frac}")
    return FixedPoint(bits, frac)


def _check_contributors(contributors: Any, n_servers: int, min_honest: Any) -> tuple[int, int]:
    """``(K, h)`` of the distributed noise: K contributors (default: the m servers) of
    whom at least h are honest."""
    k = n_servers if contributors is None else check_positive_int(contributors, "contributors")
    if k < 2:
        raise ValueError(f"contributors must be >= 2: a single contributor knows the whole "
                         f"noise and could remove it from the release, got {contributors!r}")
    h = check_positive_int(min_honest, "min_honest")
    if h > k:
        raise ValueError(f"min_honest ({h}) cannot exceed the number of contributors ({k})")
    return k, h


def _randomness(randomness: Any) -> Randomness:
    if randomness not in ("simulation", "os"):
        raise ValueError(f"randomness must be 'simulation' (seeded NumPy) or 'os' (the "
                         f"operating system's CSPRNG), got {randomness!r}")
    return randomness


def _noise_bound(tree: DyadicTree, scale: float, shape_ratio: float) -> float:
    """A public bound (in counts) on ``|sum of the L + 1 node noises|`` at every point.

    For ``X, Y ~ NB(R, t)`` i.i.d. (the sum of the contributors' Pólya parts, ``R =
    K / h``), Chernoff with ``lambda = ln(1/t) / 2`` gives ``E e^(lambda X) = (1 +
    sqrt t)^R <= 2^R``, so ``P(|X - Y| >= x) <= 2^(R+1) t^(x/2)``. With ``ln(1/t) = 2^-c / b``
    and a union over the nodes, ``x = 2 b ((41 + R) ln 2 + ln(#nodes))`` counts bounds every
    node with probability ``>= 1 - 2^-40``; it also bounds a continuous Laplace(b) draw
    (``R = 1``), whose tail ``e^(-x/b)`` is lighter. A point carries ``L + 1`` nodes.
    """
    per_node = 2.0 * scale * ((_TAIL_LOG2 + 1 + shape_ratio) * math.log(2.0)
                              + math.log(tree.n_nodes))
    return tree.n_levels * per_node


def _check_capacity(fixed_point: FixedPoint, n: int, tree: DyadicTree, scale: float | None,
                    shape_ratio: float = 1.0) -> None:
    """Refuse rings whose signed range cannot hold ``count + noise`` at every point.

    Only the opened values must fit: shares and partial sums wrap modulo ``2^l`` by
    design. ``scale`` is the noise's ``b`` (None: no noise) and ``shape_ratio`` its total
    Pólya shape ``K / h``; the bound uses these public parameters only
    (:func:`_noise_bound`), never data.
    """
    bound = float(n)
    if scale is not None:
        bound += _noise_bound(tree, scale, shape_ratio)
    limit = 2.0 ** (fixed_point.bits - 1 - fixed_point.frac_bits)
    if bound >= limit:
        raise OverflowError(
            f"ring_bits={fixed_point.bits} with frac_bits={fixed_point.frac_bits} holds counts "
            f"below 2^{fixed_point.bits - 1 - fixed_point.frac_bits} = {limit:.6g}, but n = {n} "
            f"plus the noise bound gives {bound:.6g}; use more ring_bits or fewer frac_bits")


def _check_ring(fixed_point: FixedPoint, n: int, tree: DyadicTree, epsilon: float,
                noise: SharedTreeNoise | None, plan: dict[str, Any]) -> None:
    """:func:`_check_capacity` for the noise given or planned."""
    if plan["mode"] == "none":
        _check_capacity(fixed_point, n, tree, None)
    elif noise is not None:
        _check_capacity(fixed_point, n, tree, noise.scale, noise.contributors / noise.min_honest)
    else:
        ratio = plan["contributors"] / plan["min_honest"] if plan["mode"] == "distributed" \
            else 1.0
        _check_capacity(fixed_point, n, tree, tree.n_levels / epsilon, ratio)


def _positions(thresholds: np.ndarray, data: Any) -> np.ndarray:
    """``g = #{tau < x}``: ``x <= tau_b`` iff ``g <= b``; ``g = N`` above the grid."""
    arr = np.asarray(data)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    x = as_float_array(arr, "values")
    return np.searchsorted(thresholds, x, side="left").astype(np.int64)


# ------------------------------------------------------------------------ shared noise


@dataclass(frozen=True, eq=False)
class SharedTreeNoise:
    """The tree noise of 003 Thm 1 as additive shares held by the servers.

    Attributes
    ----------
    shares:
        ``(m, n_nodes)`` ring elements: row ``j`` is server ``j``'s share of every node's
        noise, in fixed-point units ``2^-c`` of a count (nodes as in
        :class:`~fedustat.stats.ecdf.DyadicTree`).
    tree:
        The dyadic tree over the grid.
    fixed_point:
        Ring ``Z_{2^l}`` and resolution ``2^-c``.
    epsilon, scale:
        The budget and the Laplace scale ``b = (L + 1) / eps`` per node, in counts.
    distribution:
        ``"discrete-laplace"`` (:func:`distributed_tree_noise`) or ``"laplace"`` (a
        continuous draw rounded to ``2^-c``, :func:`share_tree_noise`).
    contributors, min_honest:
        Who drew it: ``K`` contributors, each a ``1/h`` share of the Pólya shape; the
        dealer path has ``K = h = 1``.
    kind:
        ``"simulation"`` or ``"deployment"``.
    setup_bits:
        Bits the contributors sent to the servers (one share per server and node each).
    """

    shares: np.ndarray
    tree: DyadicTree
    fixed_point: FixedPoint
    epsilon: float
    scale: float
    distribution: str
    contributors: int
    min_honest: int
    kind: str
    setup_bits: int

    @property
    def n_servers(self) -> int:
        return int(self.shares.shape[0])

    @property
    def ring(self) -> Ring:
        return self.fixed_point.ring

    @property
    def tolerated_colluders(self) -> int:
        """Contributors whose parts may be known to an observer of the release while it
        stays eps-DP (``K - h``)."""
        return self.contributors - self.min_honest

    @property
    def node_variance(self) -> float:
        """Variance of one node's noise, in counts squared.

        Discrete: ``(K / h) 2^-2c * 2 t / (1 - t)^2`` (Pólya shapes add; ``2 t / (1-t)^2``
        is the variance of the discrete Laplace ``t^|k|``), which is at most ``(K / h) 2
        b^2``. Rounded continuous draw: ``2 b^2`` (the rounding adds ``O(2^-c b)``).
        """
        if self.distribution == "laplace":
            return 2.0 * self.scale**2
        unit = self.fixed_point.resolution
        t = math.exp(-unit / self.scale)
        one_minus_t = -math.expm1(-unit / self.scale)
        return self.contributors / self.min_honest * unit**2 * 2.0 * t / one_minus_t**2

    def point_shares(self, indices: np.ndarray) -> np.ndarray:
        """Each server's share of the noise at the grid points ``indices``: the sum of the
        ``L + 1`` covering nodes (003 Eq. 2), computed locally, shape ``(m, |B|)``."""
        nodes = self.tree.point_nodes(np.asarray(indices, dtype=np.int64))
        return self.ring.sum(self.shares[:, nodes], axis=-1)

    def reconstruct(self) -> np.ndarray:
        """The node noise in counts (float): for tests and audits only — publishing it
        next to a release reveals the exact counts."""
        units = self.ring.to_signed(self.ring.sum(self.shares, axis=0))
        return units.astype(np.float64) / self.fixed_point.scale


def _noise_sources(rng: RandomLike | str) -> tuple[NoiseSource, Any]:
    """Pólya source and share randomness: seeded NumPy, or OpenDP/OS CSPRNG for ``'os'``."""
    if isinstance(rng, str):
        if rng != "os":
            raise ValueError(f"rng must be a seed, a Generator or 'os', got {rng!r}")
        return DeploymentNoise(), as_share_rng("os")
    gen = as_rng(rng)
    return SimulationNoise(gen), gen


def distributed_tree_noise(n_points: int, epsilon: float, *, n_servers: int = 2,
                           contributors: int | None = None, min_honest: int = 1,
                           frac_bits: int = 0, ring_bits: int = 64,
                           rng: RandomLike | str = None) -> SharedTreeNoise:
    """Tree noise drawn by ``K >= 2`` independent contributors and shared among servers.

    002 Protocol B.1 with the servers as recipients: contributor ``k`` draws
    ``X_k - Y_k``, ``X_k, Y_k ~ Polya(1/h, t)``, for every dyadic node and sends each
    server an additive share. With ``h = min_honest`` contributors the Pólya shapes add
    up to one discrete Laplace ``P(k) ~ t^|k|`` on the grid ``2^-c Z``, ``t = exp(-2^-c /
    b)``, ``b = (L + 1) / eps``: the discrete analogue of 003 Thm 1's ``Lap(b)`` per node,
    eps-DP by the same coupling (a shift of one count is ``2^c`` grid units, a probability
    ratio ``e^(1/b)`` per node, at most ``L + 1`` nodes).

    Parameters
    ----------
    n_points:
        N, the number of thresholds of the grid.
    epsilon:
        Budget of the whole curve (> 0).
    n_servers:
        m >= 2 servers that receive shares.
    contributors:
        K >= 2 contributors (default: m, e.g. the servers themselves).
    min_honest:
        h in [1, K]: the release stays eps-DP against an observer who knows the parts of
        up to ``K - h`` contributors. The default 1 makes each part a full discrete
        Laplace (safe when the contributors are the servers, which see the release) at
        ``K`` times the variance; ``h = K`` gives exactly one discrete Laplace per node
        but needs contributors that never learn the release.
    frac_bits:
        c: resolution ``2^-c`` of the noise (0: integer discrete Laplace). With
        ``rng='os'`` keep it small: the deployment Pólya sampler takes time linear in
        its mean, about ``b 2^c`` per draw.
    ring_bits:
        l: the ring Z_{2^l} of the shares.
    rng:
        Seed or Generator (simulation), or ``'os'`` (OS CSPRNG and the deployment
        sampler of :class:`~fedustat.privacy.noise.DeploymentNoise`).
    """
    tree = DyadicTree(check_positive_int(n_points, "n_points"))
    eps = check_epsilon(epsilon)
    m = _check_servers(n_servers)
    k, h = _check_contributors(contributors, m, min_honest)
    fp = _fixed_point(ring_bits, frac_bits)
    scale = tree.n_levels / eps
    t = math.exp(-fp.resolution / scale)
    source, share_rng = _noise_sources(rng)
    size = (k, tree.n_nodes)
    parts = polya(1.0 / h, t, size, rng=source) - polya(1.0 / h, t, size, rng=source)
    ring = fp.ring
    # Contributor k's part, shared among the m servers: shape (m, K, nodes).
    shares = share(ring.reduce(np.asarray(parts, dtype=np.int64)), m, share_rng, ring=ring)
    return SharedTreeNoise(ring.sum(shares, axis=1), tree, fp, eps, scale, "discrete-laplace",
                           k, h, source.kind, k * m * tree.n_nodes * ring.bits)


def share_tree_noise(tree_noise: TreeNoise, *, n_servers: int = 2,
                     frac_bits: int = DEALER_FRAC_BITS, ring_bits: int = 64,
                     rng: RandomLike | str = None) -> SharedTreeNoise:
    """A noise dealer rounds a given Laplace tree-noise draw to ``2^-c`` and shares it.

    The draw (e.g. :func:`~fedustat.protocols.ecdf.draw_tree_noise` with scale
    ``(L + 1)/eps``) is the one :func:`~fedustat.protocols.ecdf.dp_ecdf` would add, so the
    federated curve equals the central one up to the rounding, at most ``(L + 1)
    2^-(c+1)`` counts per point. Rounding keeps eps-DP (module docstring). The dealer
    knows the noise: it must be independent of the servers and never see a release.

    Parameters
    ----------
    tree_noise:
        A Laplace :class:`~fedustat.protocols.ecdf.TreeNoise`.
    n_servers:
        m >= 2.
    frac_bits, ring_bits:
        Fixed point ``c`` and ring ``l``; a node outside the range raises OverflowError.
    rng:
        Share randomness: seed, Generator or ``'os'``.
    """
    if not isinstance(tree_noise, TreeNoise):
        raise TypeError(f"tree_noise must be a TreeNoise, got {type(tree_noise).__name__}")
    if tree_noise.distribution != "laplace":
        raise ValueError(f"tree_noise must be Laplace noise (003 Thm 1), got "
                         f"{tree_noise.distribution!r}")
    m = _check_servers(n_servers)
    fp = _fixed_point(ring_bits, frac_bits)
    units = fp.encode(tree_noise.values, "tree_noise.values")
    share_rng = as_share_rng(rng)
    tree = tree_noise.tree
    return SharedTreeNoise(share(units, m, share_rng, ring=fp.ring), tree, fp,
                           tree.n_levels / tree_noise.scale, tree_noise.scale, "laplace", 1, 1,
                           tree_noise.kind, m * tree.n_nodes * fp.bits)


def _resolve_noise(tree: DyadicTree, epsilon: float, n_servers: int,
                   noise: SharedTreeNoise | None, tree_noise: TreeNoise | None,
                   contributors: int | None, min_honest: int, frac_bits: int | None,
                   ring_bits: int) -> tuple[FixedPoint, SharedTreeNoise | None, dict[str, Any]]:
    """Check the noise arguments; return the fixed point, a ready noise (if given) and
    the plan for drawing it later."""
    if noise is not None and tree_noise is not None:
        raise ValueError("pass either noise (shares already held by the servers) or "
                         "tree_noise (a draw for the dealer to share), not both")
    if math.isinf(epsilon):
        if noise is not None or tree_noise is not None:
            raise ValueError("epsilon is infinite (the exact curve) but noise was given")
        c = 0 if frac_bits is None else frac_bits
        return _fixed_point(ring_bits, c), None, {"mode": "none"}
    scale = tree.n_levels / epsilon
    if noise is not None:
        if not isinstance(noise, SharedTreeNoise):
            raise TypeError(f"noise must be a SharedTreeNoise, got {type(noise).__name__}")
        if noise.tree.n_points != tree.n_points or noise.n_servers != n_servers:
            raise ValueError(f"noise is shared among {noise.n_servers} servers for "
                             f"{noise.tree.n_points} points; this evaluation has {n_servers} "
                             f"servers and {tree.n_points} points")
        if not math.isclose(noise.scale, scale, rel_tol=1e-12):
            raise ValueError(f"noise has scale {noise.scale:g} but epsilon requires "
                             f"(L+1)/epsilon = {scale:g}")
        if frac_bits is not None and frac_bits != noise.fixed_point.frac_bits:
            raise ValueError(f"frac_bits={frac_bits} differs from the noise's "
                             f"{noise.fixed_point.frac_bits}")
        if ring_bits != noise.fixed_point.bits:
            raise ValueError(f"ring_bits={ring_bits} differs from the noise's ring "
                             f"({noise.fixed_point.bits} bits)")
        return noise.fixed_point, noise, {"mode": "given"}
    if tree_noise is not None:
        _check_tree_noise(tree_noise, tree.n_points, scale)
        c = DEALER_FRAC_BITS if frac_bits is None else frac_bits
        return _fixed_point(ring_bits, c), None, {"mode": "dealer", "tree_noise": tree_noise}
    k, h = _check_contributors(contributors, n_servers, min_honest)
    c = 0 if frac_bits is None else frac_bits
    return _fixed_point(ring_bits, c), None, {"mode": "distributed", "contributors": k,
                                              "min_honest": h}


def _draw_noise(plan: dict[str, Any], tree: DyadicTree, epsilon: float, n_servers: int,
                fixed_point: FixedPoint, rng: Any) -> SharedTreeNoise | None:
    if plan["mode"] == "none":
        return None
    if plan["mode"] == "dealer":
        return share_tree_noise(plan["tree_noise"], n_servers=n_servers,
                                frac_bits=fixed_point.frac_bits, ring_bits=fixed_point.bits,
                                rng=rng)
    return distributed_tree_noise(tree.n_points, epsilon, n_servers=n_servers,
                                  contributors=plan["contributors"],
                                  min_honest=plan["min_honest"],
                                  frac_bits=fixed_point.frac_bits, ring_bits=fixed_point.bits,
                                  rng=rng)


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
    """

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

    @property
    def variance(self) -> float:
        """Noise variance of ``F_hat`` at each point: ``(L + 1)`` node variances / n^2."""
        return self.tree.n_levels * self.node_variance / self.n**2

    @property
    def std_error(self) -> float:
        return math.sqrt(self.variance)

    def __call__(self, t: Any) -> np.ndarray:
        """Right-continuous step evaluation on the queried thresholds (0 below them)."""
        return _step_at(self.thresholds, self.values, t)

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
        return PrivateECDF(self.grid, self.values, self.n, self.tree,
                           math.sqrt(self.node_variance / 2.0), "laplace", self.privacy,
                           self.noise_kind)

    def smooth(self, p: int = 2, *, method: Literal["auto", "active-set", "highs",
                                                    "cvxopt"] = "auto") -> SmoothedECDF:
        """003 Eq. 3 on the queried points (post-processing, same guarantee)."""
        full = np.zeros(self.grid.size)
        full[self.indices] = self.counts
        idx, smoothed, nu, info = smooth_counts(full, self.tree, self.n, p=p,
                                                subset=self.indices, method=method)
        return SmoothedECDF(
            thresholds=self.grid[idx], values=smoothed / self.n, raw_values=self.values,
            indices=idx, n=self.n, p=p, estimator="tree-noise", correction=nu,
            objective=info["objective"], method=info["method"],
            iterations=info["iterations"], seconds=info["seconds"], privacy=self.privacy,
            diagnostics={"max_violation_removed": info["max_violation_removed"] / self.n})


def _guarantee(epsilon: float) -> PrivacyGuarantee:
    if math.isinf(epsilon):
        return PrivacyGuarantee.none()
    return PrivacyGuarantee(epsilon, 0.0, PrivacyModel.CENTRAL, ECDF_ADJACENCY)


def _open_counts(count_shares: np.ndarray, indices: np.ndarray,
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


def _release(protocol: str, grid: np.ndarray, tree: DyadicTree, indices: np.ndarray,
             counts: np.ndarray, n: int, epsilon: float, fixed_point: FixedPoint,
             noise: SharedTreeNoise | None, cost: Cost, setup_cost: Cost,
             diagnostics: dict[str, Any]) -> FederatedECDF:
    if noise is None:
        scale, dist, kind, node_var = 0.0, "none", "none", 0.0
    else:
        scale, dist, kind, node_var = (noise.scale, noise.distribution, noise.kind,
                                       noise.node_variance)
        diagnostics = {**diagnostics, "noise_contributors": noise.contributors,
                       "noise_min_honest": noise.min_honest,
                       "noise_tolerated_colluders": noise.tolerated_colluders}
    return FederatedECDF(grid[indices], counts / n, counts, indices, grid, n, tree, scale, dist,
                         fixed_point.resolution, node_var, _guarantee(epsilon), kind,
                         protocol, cost, setup_cost, diagnostics)


def _estimate(curve: FederatedECDF) -> Estimate:
    """The scalar face of a released curve, for the Protocol contract.

    ``value`` is the mean of ``F_hat`` over the queried points (``F_hat(tau)`` itself for a
    single threshold); its standard error counts each node once per queried point it
    covers: ``Var = sum_nodes w_node^2 var_node / (|B| n)^2``. The curve is
    ``diagnostics["curve"]``.
    """
    weights = np.bincount(curve.tree.point_nodes(curve.indices).ravel(),
                          minlength=curve.tree.n_nodes).astype(np.float64)
    var = float(np.sum(weights**2)) * curve.node_variance / (curve.indices.size * curve.n) ** 2
    return Estimate(value=float(np.mean(curve.values)), quantity="ecdf",
                    protocol=curve.protocol, privacy=curve.privacy,
                    std_error=normal_std_error(var), cost=curve.cost,
                    diagnostics={**curve.diagnostics, "curve": curve})


# -------------------------------------------------------- Sec. 4.1: secure aggregation


@dataclass
class _PointwiseParties:
    positions: np.ndarray
    parties: np.ndarray


@dataclass
class _PointwiseServers:
    n: int
    sums: np.ndarray  # (m, |B|): each server's sum of the shares it received
    indices: np.ndarray
    received: int = 0
    upload_bits: int = 0
    max_upload_bits: int = 0
    query_bits_per_party: int = 0
    seconds: float = 0.0


class PointwiseECDF(Protocol):
    """003 Sec. 4.1: the private ECDF at a query ``B`` through secure aggregation.

    Party step (one round): party ``i`` computes ``1[x_i <= tau_b]`` for ``b in B`` (the
    U-statistic kernel of 003 Eq. 4) and sends server ``j`` the ``j``-th additive share of
    that vector over Z_{2^l} (002 App. A.2): a message field ``shares`` of shape
    ``(rows, m, |B|)``, ``l`` bits per element, so ``m |B| l`` bits per party. The query
    is a protocol parameter or arrives as a server broadcast ``{"query": B}``.

    Server step: each server sums its column of shares; once all ``n`` parties are in,
    the servers scale to fixed point, add their shares of the point noise (the ``L + 1``
    node shares covering each point, :class:`SharedTreeNoise`) and send their ``|B|``
    shares to the querier, who adds them. The result is an :class:`Estimate` (see
    :func:`_estimate`) whose ``diagnostics["curve"]`` is the :class:`FederatedECDF`.
    ``server_operations`` counts ring additions of shares, ``m n |B|``. Under
    :func:`~fedustat.runtime.simulate.simulate` the measured cost is the party uploads;
    the servers' bits are in the curve's ``cost``.

    Parameters
    ----------
    thresholds:
        Public, strictly increasing grid (N points).
    query:
        Grid positions to evaluate (None: all), a boolean mask or integer positions.
    epsilon:
        Budget (> 0) or ``math.inf`` for the exact counts.
    n_servers:
        m >= 2 aggregation servers.
    noise:
        Noise shares the servers already hold (:class:`SharedTreeNoise`), reused across
        queries so that all answers come from one eps-DP curve. Only for the same data:
        if a party joined, left or changed its value in between, two answers with the same
        noise differ by the exact change — draw new noise then (a new eps). Without
        ``noise``, every run draws fresh noise and is its own eps-DP release.
    tree_noise:
        A Laplace draw for a dealer to share (:func:`share_tree_noise`): the curve then
        equals ``dp_ecdf(..., tree_noise=tree_noise)`` up to fixed-point rounding.
    contributors, min_honest:
        With neither ``noise`` nor ``tree_noise``, :func:`distributed_tree_noise` draws
        the noise in the first server step with these parameters.
    frac_bits:
        c (default 0 for distributed noise, 20 for a dealer-shared continuous draw).
    ring_bits:
        l (default 64).
    randomness:
        ``"simulation"`` (the steps' seeded generators) or ``"os"`` (OS CSPRNG).
    """

    name = "ecdf-pointwise-secagg"

    def __init__(self, thresholds: Any, query: Any = None, *, epsilon: float,
                 n_servers: int = 2, noise: SharedTreeNoise | None = None,
                 tree_noise: TreeNoise | None = None, contributors: int | None = None,
                 min_honest: int = 1, frac_bits: int | None = None, ring_bits: int = 64,
                 randomness: Randomness = "simulation") -> None:
        self.thresholds = check_thresholds(thresholds)
        self.tree = DyadicTree(self.thresholds.size)
        self.query = _query_indices(query, self.thresholds.size)
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.n_servers = _check_servers(n_servers)
        self.fixed_point, self.noise, self._plan = _resolve_noise(
            self.tree, self.epsilon, self.n_servers, noise, tree_noise, contributors,
            min_honest, frac_bits, ring_bits)
        self.randomness = _randomness(randomness)

    @property
    def ring(self) -> Ring:
        return self.fixed_point.ring

    def query_message(self) -> Message:
        """The querier's broadcast of ``B`` to the parties: ``|B| w`` bits (``w`` =
        :func:`index_bits`)."""
        return Message(Role.SERVER, Role.PARTY, {"query": self.query},
                       {"query": index_bits(self.thresholds.size)})

    def init_parties(self, data: np.ndarray, parties: np.ndarray) -> _PointwiseParties:
        return _PointwiseParties(_positions(self.thresholds, data),
                                 np.asarray(parties, dtype=np.int64))

    def init_server(self, n_parties: int) -> _PointwiseServers:
        n = check_positive_int(n_parties, "n_parties")
        _check_ring(self.fixed_point, n, self.tree, self.epsilon, self.noise, self._plan)
        return _PointwiseServers(n, np.zeros((self.n_servers, self.query.size), np.uint64),
                                 self.query)

    def party_step(self, state: _PointwiseParties, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_PointwiseParties, Message]:
        idx = self.query
        if inbox is not None and "query" in inbox.fields:
            idx = _query_indices(np.asarray(inbox.fields["query"]), self.thresholds.size)
            if not np.array_equal(idx, self.query):
                raise ValueError("the broadcast query differs from the query the servers "
                                 "aggregate for; build one PointwiseECDF per query")
        indicators = (state.positions[:, None] <= idx[None, :]).astype(np.uint64)
        source = as_share_rng("os") if self.randomness == "os" else rng
        shares = share(indicators, self.n_servers, source, ring=self.ring)  # (m, rows, |B|)
        message = Message(Role.PARTY, Role.SERVER, {"shares": np.moveaxis(shares, 0, 1)},
                          {"shares": self.ring.bits}, state.parties)
        return state, message

    def absorb(self, state: _PointwiseServers, inbox: Message) -> _PointwiseServers:
        """Servers add the shares of one batch of parties (server ``j`` sums column j)."""
        start = time.perf_counter()
        shares = np.asarray(inbox.fields["shares"])
        if shares.ndim != 3 or shares.shape[1:] != state.sums.shape:
            raise ValueError(f"shares must have shape (rows, {self.n_servers}, "
                             f"{state.indices.size}) for this query, got {shares.shape}")
        state.sums = self.ring.add(state.sums, self.ring.sum(shares, axis=0))
        bits = np.asarray(inbox.bits_per_row())
        state.received += int(shares.shape[0])
        state.upload_bits += int(bits.sum())
        state.max_upload_bits = max(state.max_upload_bits, int(bits.max(initial=0)))
        state.seconds += time.perf_counter() - start
        return state

    def finish(self, state: _PointwiseServers, rng: Any) -> FederatedECDF:
        """Servers: draw or take the noise, open ``count + noise`` to the querier."""
        if state.received != state.n:
            raise ValueError(f"the servers received shares from {state.received} of "
                             f"{state.n} parties; every party must take part in a query")
        noise = self.noise
        if noise is None:
            noise_rng = "os" if self.randomness == "os" else rng
            noise = _draw_noise(self._plan, self.tree, self.epsilon, self.n_servers,
                                self.fixed_point, noise_rng)
        _check_ring(self.fixed_point, state.n, self.tree, self.epsilon, noise, self._plan)
        transcript = Transcript(self.n_servers)
        counts = _open_counts(state.sums, state.indices, noise, self.fixed_point, transcript)
        n, m, b = state.n, self.n_servers, state.indices.size
        online = transcript.total_bits("online")
        query_rounds = 1 if state.query_bits_per_party else 0
        cost = Cost(bits_per_party=state.upload_bits / n, max_bits_per_party=state.max_upload_bits,
                    bits_received_per_party=float(state.query_bits_per_party),
                    total_bits=state.upload_bits + n * state.query_bits_per_party + online,
                    rounds=query_rounds + 1 + transcript.rounds, server_operations=m * n * b)
        setup_bits = 0 if noise is None else noise.setup_bits
        setup = Cost(total_bits=setup_bits, rounds=int(setup_bits > 0),
                     offline_bits=setup_bits)
        diagnostics = {"bits_upload": state.upload_bits,
                       "bits_query": n * state.query_bits_per_party,
                       "bits_servers_to_querier": online, "noise_setup_bits": setup_bits,
                       "n_servers": m, "ring_bits": self.ring.bits,
                       "frac_bits": self.fixed_point.frac_bits,
                       "seconds_servers": state.seconds,
                       "secrecy": f"information-theoretic against any {m - 1} of the {m} "
                                  f"servers (additive shares)"}
        return _release(self.name, self.thresholds, self.tree, state.indices, counts, n,
                        self.epsilon, self.fixed_point, noise, cost, setup, diagnostics)

    def server_step(self, state: _PointwiseServers, inbox: Message,
                    rng: np.random.Generator) -> tuple[_PointwiseServers, Estimate]:
        state = self.absorb(state, inbox)
        curve = self.finish(state, rng)
        estimate = _estimate(curve)
        return state, estimate.with_cost(Cost(server_operations=curve.cost.server_operations,
                                              offline_bits=curve.setup_cost.offline_bits))


def pointwise_ecdf(values: Any, thresholds: Any, query: Any = None, *, epsilon: float,
                   n_servers: int = 2, noise: SharedTreeNoise | None = None,
                   tree_noise: TreeNoise | None = None, contributors: int | None = None,
                   min_honest: int = 1, frac_bits: int | None = None, ring_bits: int = 64,
                   batch_size: int = DEFAULT_BATCH, rng: RandomLike = None,
                   randomness: Randomness = "simulation") -> FederatedECDF:
    """003 Sec. 4.1 in one process: the private ECDF at ``query`` by secure aggregation.

    Runs :class:`PointwiseECDF` batch by batch (the servers add each batch's shares as it
    arrives, so memory stays bounded): the querier broadcasts ``B`` (``|B| w`` bits per
    party), every party uploads ``m |B| l`` bits of shares, the servers send ``m |B| l``
    bits to the querier. ``cost`` is measured from those messages:
    ``total_bits = n |B| (w + m l) + m |B| l`` and 3 rounds; ``setup_cost`` is the noise
    sharing. Parameters as in :class:`PointwiseECDF`; ``values`` one per party; ``rng``
    seeds the shares, the batches and (for distributed noise) the contributors.

    Returns
    -------
    FederatedECDF
    """
    protocol = PointwiseECDF(thresholds, query, epsilon=epsilon, n_servers=n_servers,
                             noise=noise, tree_noise=tree_noise, contributors=contributors,
                             min_honest=min_honest, frac_bits=frac_bits, ring_bits=ring_bits,
                             randomness=randomness)
    x = as_float_array(values, "values")
    size = check_positive_int(batch_size, "batch_size")
    root = as_seed_sequence(rng)
    n = x.size
    seeds = root.spawn(1 + (n + size - 1) // size)
    server = protocol.init_server(n)
    ask = protocol.query_message()
    server.query_bits_per_party = int(ask.bits_per_row())
    for i, lo in enumerate(range(0, n, size)):
        rows = slice(lo, min(lo + size, n))
        parties = protocol.init_parties(x[rows], np.arange(rows.start, rows.stop))
        _, upload = protocol.party_step(parties, ask, np.random.default_rng(seeds[1 + i]))
        server = protocol.absorb(server, upload)
    return protocol.finish(server, np.random.default_rng(seeds[0]))


# --------------------------------------------------------------- Sec. 4.2: FSS servers


@dataclass(eq=False)
class FssECDFServers:
    """The two FSS servers after the key upload: they answer threshold queries alone.

    Server ``j`` holds ``keys[j]`` (one DCF key per party for ``f_i(b) = 1[x_i > tau_b]``)
    and its row of the noise shares. :meth:`query` is 003 Sec. 4.2's evaluation phase.
    """

    keys: tuple[FssKey, FssKey]
    grid: np.ndarray
    tree: DyadicTree
    n: int
    epsilon: float
    fixed_point: FixedPoint
    noise: SharedTreeNoise | None
    setup_cost: Cost
    diagnostics: dict[str, Any] = field(default_factory=dict)
    queries: int = 0

    protocol: str = "ecdf-fss"

    def query(self, query: Any = None) -> FederatedECDF:
        """Evaluate the private ECDF at the grid positions ``query`` (None: all).

        The querier sends ``B`` to both servers (``2 |B| w`` bits); server ``j`` computes
        ``Y_j(b) = sum_i Eval(j, k_i^j, b)`` (:func:`dcf_sum_at`), its count share
        (``n - Y_0`` and ``-Y_1``: the count of ``x_i <= tau_b`` is ``n`` minus that of
        ``x_i > tau_b``), scales it to fixed point, adds its noise share and sends it to
        the querier (``2 |B| l`` bits). Independent of n: 2 rounds, ``2 |B| (w + l)`` bits.
        Every answer is an entry of the same eps-DP curve, whatever the number of queries.
        """
        idx = _query_indices(query, self.grid.size)
        transcript = Transcript(2)
        w = index_bits(self.grid.size)
        transcript.view(1).record(phase="online", kind="ecdf.query",
                                  sent=np.array([[2 * idx.size * w]]),
                                  received=np.zeros((1, 1), np.int64))
        ring = self.fixed_point.ring
        seconds = []
        count_shares = np.empty((2, idx.size), dtype=np.uint64)
        for j in (0, 1):
            start = time.perf_counter()
            above = dcf_sum_at(j, self.keys[j], idx.astype(np.uint64))
            base = np.uint64(self.n) if j == 0 else np.uint64(0)
            count_shares[j] = ring.sub(ring.reduce(base), above)
            seconds.append(time.perf_counter() - start)
        counts = _open_counts(count_shares, idx, self.noise, self.fixed_point, transcript)
        self.queries += 1
        online = transcript.total_bits("online")
        cost = Cost(total_bits=online, rounds=transcript.rounds,
                    server_operations=2 * self.n * idx.size)
        diagnostics = {**self.diagnostics, "bits_query": 2 * idx.size * w,
                       "bits_servers_to_querier": online - 2 * idx.size * w,
                       "dcf_evaluations_per_server": self.n * idx.size,
                       "seconds_eval_per_server": seconds, "query_number": self.queries}
        return _release(self.protocol, self.grid, self.tree, idx, counts, self.n,
                        self.epsilon, self.fixed_point, self.noise, cost, self.setup_cost,
                        diagnostics)


@dataclass
class _FssParties:
    positions: np.ndarray
    parties: np.ndarray


@dataclass
class _FssServerState:
    n: int
    batches: list[dict[str, np.ndarray]] = field(default_factory=list)
    received: int = 0
    upload_bits: int = 0
    max_upload_bits: int = 0


_KEY_FIELDS = ("key_seed", "key_cw_seed", "key_cw_t", "key_cw_value", "key_cw_out")


class FssECDF(Protocol):
    """003 Sec. 4.2: each party uploads DCF keys once; the servers answer queries alone.

    Party step (one round, once): party ``i`` computes ``g_i = #{tau < x_i}`` and runs
    ``dcf_gen`` for ``f(b) = 1[b < g_i]`` (``= 1[x_i > tau_b]``, 003's ``phi_>``) on
    ``d = bitlen(N)`` bits with payload 1, and sends key ``j`` to server ``j``. The message
    carries both keys' real fields (``key_seed`` 2 x 128 bits, ``key_cw_seed`` 2 x d x 128,
    ``key_cw_t`` 2 x 2d, ``key_cw_value`` 2 x d l, ``key_cw_out`` 2 x l): ``2 K_DCF(d)``
    bits per party, ``K_DCF(d) = 128 + d (130 + l) + l`` = ``FssKey.bits_per_key``.

    Server step: the servers assemble the keys, set up the noise shares (as
    :class:`PointwiseECDF`) and answer the protocol's ``query``; the :class:`Estimate`
    carries the curve (``diagnostics["curve"]``) and the servers, ready for more
    queries (``diagnostics["servers"]``, a :class:`FssECDFServers`). Parameters as in
    :class:`PointwiseECDF`; ``n_servers`` must be 2 (the DCF is a two-party FSS scheme).
    """

    name = "ecdf-fss"

    def __init__(self, thresholds: Any, query: Any = None, *, epsilon: float,
                 n_servers: int = 2, noise: SharedTreeNoise | None = None,
                 tree_noise: TreeNoise | None = None, contributors: int | None = None,
                 min_honest: int = 1, frac_bits: int | None = None, ring_bits: int = 64,
                 randomness: Randomness = "simulation") -> None:
        if n_servers != 2:
            raise ValueError(f"n_servers must be 2: the comparison keys (DCF, Boyle et al. "
                             f"2021) are a two-party FSS scheme, got {n_servers!r}")
        self.thresholds = check_thresholds(thresholds)
        self.tree = DyadicTree(self.thresholds.size)
        self.query = _query_indices(query, self.thresholds.size)
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.n_servers = 2
        self.fixed_point, self.noise, self._plan = _resolve_noise(
            self.tree, self.epsilon, 2, noise, tree_noise, contributors, min_honest,
            frac_bits, ring_bits)
        self.randomness = _randomness(randomness)
        # Positions run over 0..N (N: above the grid), so d bits with 2^d > N.
        self.domain_bits = int(self.thresholds.size).bit_length()

    @property
    def ring(self) -> Ring:
        return self.fixed_point.ring

    def key_bits(self) -> int:
        """``K_DCF(d) = 128 + d (128 + 2 + l) + l``: one key's wire size."""
        return 128 + self.domain_bits * (128 + 2 + self.ring.bits) + self.ring.bits

    def init_parties(self, data: np.ndarray, parties: np.ndarray) -> _FssParties:
        return _FssParties(_positions(self.thresholds, data), np.asarray(parties, np.int64))

    def init_server(self, n_parties: int) -> _FssServerState:
        n = check_positive_int(n_parties, "n_parties")
        _check_ring(self.fixed_point, n, self.tree, self.epsilon, self.noise, self._plan)
        return _FssServerState(n)

    def party_step(self, state: _FssParties, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_FssParties, Message]:
        source = as_share_rng("os") if self.randomness == "os" else rng
        k0, k1 = dcf_gen(state.positions, 1, domain_bits=self.domain_bits, ring=self.ring,
                         rng=source)
        rows, d = state.positions.size, self.domain_bits
        # Correction words are common to both keys but travel to both servers.
        fields = {
            "key_seed": np.stack([k0.seed, k1.seed], axis=1),
            "key_cw_seed": np.broadcast_to(np.moveaxis(k0.cw_seed, 0, 1)[:, None],
                                           (rows, 2, d, 2)),
            "key_cw_t": np.broadcast_to(np.moveaxis(k0.cw_t, 0, 1)[:, None], (rows, 2, d, 2)),
            "key_cw_value": np.broadcast_to(np.moveaxis(k0.cw_value, 0, 1)[:, None],
                                            (rows, 2, d)),
            "key_cw_out": np.broadcast_to(k0.cw_out[:, None], (rows, 2)),
        }
        bits = {"key_seed": 64, "key_cw_seed": 64, "key_cw_t": 1,
                "key_cw_value": self.ring.bits, "key_cw_out": self.ring.bits}
        return state, Message(Role.PARTY, Role.SERVER, fields, bits, state.parties)

    def absorb(self, state: _FssServerState, inbox: Message) -> _FssServerState:
        """Servers store one batch of keys (server ``j`` keeps slot ``j`` of each field)."""
        missing = set(_KEY_FIELDS) - set(inbox.fields)
        if missing:
            raise ValueError(f"the key upload lacks the fields {sorted(missing)}")
        state.batches.append({name: np.asarray(inbox.fields[name]) for name in _KEY_FIELDS})
        bits = np.asarray(inbox.bits_per_row())
        state.received += int(bits.size)
        state.upload_bits += int(bits.sum())
        state.max_upload_bits = max(state.max_upload_bits, int(bits.max(initial=0)))
        return state

    def _server_key(self, batches: list[dict[str, np.ndarray]], j: int) -> FssKey:
        def cat(name: str) -> np.ndarray:
            return np.concatenate([b[name][:, j] for b in batches], axis=0)

        return FssKey(j, "dcf", self.domain_bits, self.ring, np.ascontiguousarray(cat("key_seed")),
                      np.ascontiguousarray(np.moveaxis(cat("key_cw_seed"), 1, 0)),
                      np.ascontiguousarray(np.moveaxis(cat("key_cw_t"), 1, 0)),
                      np.ascontiguousarray(np.moveaxis(cat("key_cw_value"), 1, 0)),
                      np.ascontiguousarray(cat("key_cw_out")))

    def servers(self, state: _FssServerState, rng: Any) -> FssECDFServers:
        """The servers once every key is in: keys assembled, noise shares set up."""
        if state.received != state.n:
            raise ValueError(f"the servers received keys from {state.received} of "
                             f"{state.n} parties")
        keys = (self._server_key(state.batches, 0), self._server_key(state.batches, 1))
        noise = self.noise
        if noise is None:
            noise_rng = "os" if self.randomness == "os" else rng
            noise = _draw_noise(self._plan, self.tree, self.epsilon, 2, self.fixed_point,
                                noise_rng)
        _check_ring(self.fixed_point, state.n, self.tree, self.epsilon, noise, self._plan)
        noise_bits = 0 if noise is None else noise.setup_bits
        setup = Cost(bits_per_party=state.upload_bits / state.n,
                     max_bits_per_party=state.max_upload_bits,
                     total_bits=state.upload_bits + noise_bits, rounds=1,
                     offline_bits=noise_bits)
        diagnostics = {"bits_key_upload": state.upload_bits,
                       "key_bits_per_server": keys[0].bits_per_key,
                       "domain_bits": self.domain_bits, "noise_setup_bits": noise_bits,
                       "n_servers": 2, "ring_bits": self.ring.bits,
                       "frac_bits": self.fixed_point.frac_bits,
                       "secrecy": "computational (AES-128 PRG of the DCF keys) against either "
                                  "server alone; the two servers must not collude"}
        return FssECDFServers(keys, self.thresholds, self.tree, state.n, self.epsilon,
                              self.fixed_point, noise, setup, diagnostics)

    def server_step(self, state: _FssServerState, inbox: Message,
                    rng: np.random.Generator) -> tuple[_FssServerState, Estimate]:
        state = self.absorb(state, inbox)
        servers = self.servers(state, rng)
        curve = servers.query(self.query)
        estimate = _estimate(curve)
        estimate = replace(estimate, cost=Cost(server_operations=curve.cost.server_operations,
                                               offline_bits=curve.setup_cost.offline_bits),
                           diagnostics={**estimate.diagnostics, "servers": servers})
        return state, estimate


def fss_ecdf_setup(values: Any, thresholds: Any, *, epsilon: float,
                   noise: SharedTreeNoise | None = None, tree_noise: TreeNoise | None = None,
                   contributors: int | None = None, min_honest: int = 1,
                   frac_bits: int | None = None, ring_bits: int = 64,
                   batch_size: int = DEFAULT_BATCH, rng: RandomLike = None,
                   randomness: Randomness = "simulation") -> FssECDFServers:
    """003 Sec. 4.2's preprocessing: every party uploads its two DCF keys, once.

    Runs the party steps of :class:`FssECDF` batch by batch; the returned servers answer
    any later query with :meth:`FssECDFServers.query`. ``setup_cost`` is measured from
    the key messages (``2 K_DCF(d)`` bits per party) plus the noise shares.
    """
    protocol = FssECDF(thresholds, None, epsilon=epsilon, noise=noise, tree_noise=tree_noise,
                       contributors=contributors, min_honest=min_honest, frac_bits=frac_bits,
                       ring_bits=ring_bits, randomness=randomness)
    x = as_float_array(values, "values")
    size = check_positive_int(batch_size, "batch_size")
    root = as_seed_sequence(rng)
    n = x.size
    seeds = root.spawn(1 + (n + size - 1) // size)
    state = protocol.init_server(n)
    start = time.perf_counter()
    for i, lo in enumerate(range(0, n, size)):
        rows = slice(lo, min(lo + size, n))
        parties = protocol.init_parties(x[rows], np.arange(rows.start, rows.stop))
        _, upload = protocol.party_step(parties, None, np.random.default_rng(seeds[1 + i]))
        state = protocol.absorb(state, upload)
    keygen = time.perf_counter() - start
    servers = protocol.servers(state, np.random.default_rng(seeds[0]))
    servers.diagnostics["seconds_keygen_all_parties"] = keygen
    return servers


def fss_ecdf(values: Any, thresholds: Any, query: Any = None, *, epsilon: float,
             noise: SharedTreeNoise | None = None, tree_noise: TreeNoise | None = None,
             contributors: int | None = None, min_honest: int = 1,
             frac_bits: int | None = None, ring_bits: int = 64,
             batch_size: int = DEFAULT_BATCH, rng: RandomLike = None,
             randomness: Randomness = "simulation") -> FederatedECDF:
    """003 Sec. 4.2 in one call: key upload (:func:`fss_ecdf_setup`), then one query.

    Parameters as in :class:`PointwiseECDF` (two servers). ``cost`` is the query's
    (``2 |B| (w + l)`` bits, 2 rounds, independent of n); ``setup_cost`` the key upload
    and the noise shares.
    """
    servers = fss_ecdf_setup(values, thresholds, epsilon=epsilon, noise=noise,
                             tree_noise=tree_noise, contributors=contributors,
                             min_honest=min_honest, frac_bits=frac_bits, ring_bits=ring_bits,
                             batch_size=batch_size, rng=rng, randomness=randomness)
    return servers.query(query)
