"""Tree noise held as secret shares by the servers of a federated ECDF evaluation.

003 Sec. 4 evaluates the tree-noise ECDF (Sec. 3.1, Thm 1) with the count aggregated in
secret and the node noise held as additive shares by the servers, so the servers open
``count + noise`` and nothing else. The noise is drawn once per grid
(:class:`SharedTreeNoise`) either by independent contributors (002 Protocol B.1,
:func:`distributed_tree_noise`) or by a noise dealer that shares a given draw
(:func:`share_tree_noise`); :mod:`fedustat.protocols.ecdf.federated` states why each is
eps-DP. The helpers here also size the ring so that counts plus noise never wrap.

The hierarchical release (the central default, :mod:`~fedustat.protocols.ecdf.hierarchical`)
needs one noise per node of its b-ary tree with one scale per level (``2 / (eps w_l)``, the
root ``2 / eps``): :func:`distributed_node_noise` and :func:`share_node_noise` give the same
promises level by level (additive shares: no server's share says anything about a node's
noise; an observer who knows up to ``K - h`` contributors' parts still faces one discrete
Laplace of the level's scale per node), and the ring check bounds one node's noise at the
largest level scale (the opened values are nodes, not sums of ``L + 1`` nodes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from fedustat._validation import (
    InputRangeError,
    RandomLike,
    as_rng,
    check_epsilon,
    check_positive_int,
)
from fedustat.privacy.mechanisms import polya
from fedustat.privacy.noise import DeploymentNoise, NoiseSource, SimulationNoise
from fedustat.protocols.base import PEER_FROM, DropoutRule, Message
from fedustat.protocols.ecdf.hierarchical import HierarchicalPlan, NodeNoise, node_intervals
from fedustat.protocols.ecdf.tree_noise import TreeNoise, check_tree_noise
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.ring import Ring, as_share_rng
from fedustat.secure.sharing import share
from fedustat.stats.ecdf import DyadicTree

__all__ = [
    "DEALER_FRAC_BITS",
    "NoiseLaw",
    "Randomness",
    "SharedTreeNoise",
    "distributed_node_noise",
    "distributed_tree_noise",
    "share_node_noise",
    "share_tree_noise",
]


Randomness = Literal["simulation", "os"]

DEALER_FRAC_BITS = 20  # rounding of a continuous draw: 2^-21 counts per node at most
_TAIL_LOG2 = 40  # the noise exceeds the ring's capacity with probability < 2^-40


def check_servers(n_servers: Any) -> int:
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


def check_randomness(randomness: Any) -> Randomness | None:
    """``"simulation"``, ``"os"``, or None: decided by the run (the OS CSPRNG unless a
    seed asks for a reproducible simulation, :meth:`Protocol.for_run`)."""
    if randomness is not None and randomness not in ("simulation", "os"):
        raise ValueError(f"randomness must be 'simulation' (seeded NumPy) or 'os' (the "
                         f"operating system's CSPRNG), got {randomness!r}")
    return randomness


def run_randomness(randomness: Any, rng: Any) -> Randomness:
    """The source of a one-process run: as given, or (None) the OS CSPRNG without a seed
    and the seeded generators with one."""
    chosen = check_randomness(randomness)
    if chosen is None:
        return "os" if rng is None else "simulation"
    return chosen


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
        raise InputRangeError(
            f"ring_bits={fixed_point.bits} with frac_bits={fixed_point.frac_bits} holds counts "
            f"below 2^{fixed_point.bits - 1 - fixed_point.frac_bits} = {limit:.6g}, but n = {n} "
            f"plus the noise bound gives {bound:.6g}; use more ring_bits or fewer frac_bits")


def _node_capacity(fixed_point: FixedPoint, n: int, plan: HierarchicalPlan,
                   scales: np.ndarray | None, shape_ratio: float = 1.0) -> None:
    """:func:`_check_capacity` for the hierarchical release: the opened values are the
    nodes, each an exact count in ``0..n`` plus one node noise, so the bound is ``n`` plus
    :func:`_noise_bound`'s per-node term at the largest of the per-level scales."""
    bound = float(n)
    if scales is not None:
        bound += 2.0 * float(np.max(scales)) * ((_TAIL_LOG2 + 1 + shape_ratio) * math.log(2.0)
                                                + math.log(plan.n_noisy_nodes))
    limit = 2.0 ** (fixed_point.bits - 1 - fixed_point.frac_bits)
    if bound >= limit:
        raise InputRangeError(
            f"ring_bits={fixed_point.bits} with frac_bits={fixed_point.frac_bits} holds counts "
            f"below 2^{fixed_point.bits - 1 - fixed_point.frac_bits} = {limit:.6g}, but n = {n} "
            f"plus the bound on the noise of the tree's nodes (largest level scale "
            f"{float(np.max(scales)) if scales is not None else 0.0:.6g}) gives {bound:.6g}; "
            f"use more ring_bits or fewer frac_bits")


def check_ring(fixed_point: FixedPoint, n: int, tree: DyadicTree, epsilon: float,
                noise: SharedTreeNoise | None, plan: dict[str, Any]) -> None:
    """:func:`_check_capacity` for the noise given or planned."""
    hplan = plan.get("tree_plan")
    if hplan is not None:
        if plan["mode"] == "none":
            _node_capacity(fixed_point, n, hplan, None)
            return
        ratio = 1.0
        if noise is not None:
            ratio = noise.contributors / noise.min_honest
        elif plan["mode"] == "distributed":
            ratio = plan["contributors"] / plan["min_honest"]
        _node_capacity(fixed_point, n, hplan, hplan.scales(epsilon), ratio)
        return
    if plan["mode"] == "none":
        _check_capacity(fixed_point, n, tree, None)
    elif noise is not None:
        _check_capacity(fixed_point, n, tree, noise.scale, noise.contributors / noise.min_honest)
    else:
        ratio = plan["contributors"] / plan["min_honest"] if plan["mode"] == "distributed" \
            else 1.0
        _check_capacity(fixed_point, n, tree, tree.n_levels / epsilon, ratio)




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
    plan:
        None for 003's dyadic tree; for the hierarchical release the
        :class:`~fedustat.protocols.ecdf.hierarchical.HierarchicalPlan` whose noisy nodes
        (order of :func:`~fedustat.protocols.ecdf.hierarchical.node_intervals`) the shares
        cover, each with its level's scale; ``scale`` is then the leaf level's.
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
    plan: HierarchicalPlan | None = None

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

    @property
    def level_scales(self) -> np.ndarray:
        """Laplace scale per level in counts (hierarchical: ``2 / (eps w_l)`` and the
        root's ``2 / eps``; 003's tree: ``(L + 1) / eps`` on every level)."""
        if self.plan is not None:
            return self.plan.scales(self.epsilon)
        return np.full(self.tree.n_levels, self.scale)

    @property
    def level_variances(self) -> np.ndarray:
        """Variance of one node's noise on each level, in counts squared (as
        :attr:`node_variance`, level by level)."""
        return np.array([_node_variance(float(b), self.distribution,
                                        self.contributors / self.min_honest,
                                        self.fixed_point.resolution)
                         for b in self.level_scales])

    def point_shares(self, indices: np.ndarray) -> np.ndarray:
        """Each server's share of the noise at the grid points ``indices``: the sum of the
        ``L + 1`` covering nodes (003 Eq. 2), computed locally, shape ``(m, |B|)``."""
        nodes = self.tree.point_nodes(np.asarray(indices, dtype=np.int64))
        return self.ring.sum(self.shares[:, nodes], axis=-1)

    def law(self) -> NoiseLaw:
        """The noise's law and origin, without the shares."""
        return NoiseLaw(self.scale, self.distribution, self.contributors, self.min_honest,
                        self.kind, self.n_servers, self.fixed_point.resolution,
                        None if self.plan is None else tuple(self.level_scales))

    def reconstruct(self) -> np.ndarray:
        """The node noise in counts (float): for tests and audits only — publishing it
        next to a release reveals the exact counts."""
        units = self.ring.to_signed(self.ring.sum(self.shares, axis=0))
        return units.astype(np.float64) / self.fixed_point.scale


@dataclass(frozen=True)
class NoiseLaw:
    """The law of the tree noise and who drew it, without any share of it.

    What the querier (the aggregator) knows when the computing parties hold the noise:
    enough for the release's error law and its trust statement. Attributes as in
    :class:`SharedTreeNoise`; ``resolution`` is ``2^-c``.
    """

    scale: float
    distribution: str
    contributors: int
    min_honest: int
    kind: str
    n_servers: int
    resolution: float
    level_scales_: tuple[float, ...] | None = None

    @property
    def tolerated_colluders(self) -> int:
        return self.contributors - self.min_honest

    @property
    def level_variances(self) -> np.ndarray:
        """Variance of one node's noise per level (hierarchical; 003's tree: one level
        per tree level, all equal)."""
        scales = (self.level_scales_ if self.level_scales_ is not None else (self.scale,))
        return np.array([_node_variance(float(b), self.distribution,
                                        self.contributors / self.min_honest, self.resolution)
                         for b in scales])

    @property
    def node_variance(self) -> float:
        """As :attr:`SharedTreeNoise.node_variance` (discrete Laplace variance ``2 t / (1 -
        t)^2`` per unit, times the total Pólya shape ``K / h``; ``2 b^2`` for Laplace)."""
        if self.distribution == "laplace":
            return 2.0 * self.scale**2
        unit = self.resolution
        t = math.exp(-unit / self.scale)
        one_minus_t = -math.expm1(-unit / self.scale)
        return self.contributors / self.min_honest * unit**2 * 2.0 * t / one_minus_t**2


def _node_variance(scale: float, distribution: str, shape_ratio: float,
                   resolution: float) -> float:
    """One node's noise variance in counts squared: ``2 b^2`` (Laplace), or ``(K / h)
    2^-2c 2 t / (1 - t)^2`` with ``t = exp(-2^-c / b)`` (Pólya shapes add; ``2 t / (1 -
    t)^2`` is the discrete Laplace variance per unit)."""
    if distribution == "laplace":
        return 2.0 * scale**2
    t = math.exp(-resolution / scale)
    one_minus_t = -math.expm1(-resolution / scale)
    return shape_ratio * resolution**2 * 2.0 * t / one_minus_t**2


def noise_law(plan: dict[str, Any], tree: DyadicTree, epsilon: float, n_servers: int,
              fixed_point: FixedPoint, noise: SharedTreeNoise | None,
              randomness: Randomness) -> NoiseLaw | None:
    """The law of the noise a run adds under ``plan`` (None: no noise)."""
    if plan["mode"] == "none":
        return None
    if noise is not None:
        return noise.law()
    hplan = plan.get("tree_plan")
    levels = None if hplan is None else tuple(float(b) for b in hplan.scales(epsilon))
    if plan["mode"] == "dealer":
        draw = plan["tree_noise"]
        if hplan is not None:
            return NoiseLaw(levels[0], "laplace", 1, 1, draw.kind, n_servers,
                            fixed_point.resolution, levels)
        return NoiseLaw(draw.scale, "laplace", 1, 1, draw.kind, n_servers,
                        fixed_point.resolution)
    kind = "deployment" if randomness == "os" else "simulation"
    if hplan is not None:
        return NoiseLaw(levels[0], "discrete-laplace", plan["contributors"],
                        plan["min_honest"], kind, n_servers, fixed_point.resolution, levels)
    return NoiseLaw(tree.n_levels / epsilon, "discrete-laplace", plan["contributors"],
                    plan["min_honest"], kind, n_servers, fixed_point.resolution)


def contributor_point_units(plan: dict[str, Any], tree: DyadicTree, epsilon: float,
                            fixed_point: FixedPoint, indices: np.ndarray,
                            rng: np.random.Generator | str) -> np.ndarray:
    """One contributor's part of the tree noise at the queried points, in ring units.

    002 Protocol B.1: the contributor draws ``Polya(1/h, t) - Polya(1/h, t)`` per dyadic
    node (``t = exp(-2^-c / b)``, ``b = (L + 1) / eps``, as :func:`distributed_tree_noise`)
    and adds up the ``L + 1`` nodes covering each queried point (003 Eq. 2). Only the
    queried points travel; the sum over the ``K`` contributors is the tree noise there.
    ``rng``: the contributor's own generator, or ``'os'``.
    """
    scale = tree.n_levels / epsilon
    t = math.exp(-fixed_point.resolution / scale)
    source, _ = _noise_sources(rng)
    h = plan["min_honest"]
    parts = (polya(1.0 / h, t, tree.n_nodes, rng=source)
             - polya(1.0 / h, t, tree.n_nodes, rng=source)).astype(np.int64)
    return fixed_point.ring.reduce(parts[tree.point_nodes(indices)].sum(axis=-1))


def held_point_units(plan: dict[str, Any], noise: SharedTreeNoise | None,
                     fixed_point: FixedPoint, tree: DyadicTree, indices: np.ndarray,
                     server: int) -> np.ndarray:
    """Computing party ``server``'s share of noise it holds before the run, at the points.

    Shares held by the servers (``noise``): row ``server`` (:meth:`SharedTreeNoise.
    point_shares`). A dealer's draw given as a protocol parameter (``plan['tree_noise']``)
    is public to every role that holds the configuration, so computing party 0 adds it
    whole (each node rounded to ``2^-c`` as :func:`share_tree_noise` does). Otherwise
    zeros (distributed noise travels from the contributors during the run).
    """
    ring = fixed_point.ring
    if noise is not None:
        return noise.point_shares(indices)[server]
    if plan["mode"] == "dealer" and server == 0:
        units = fixed_point.encode(plan["tree_noise"].values, "tree_noise.values")
        return ring.sum(units[tree.point_nodes(indices)], axis=-1)
    return np.zeros(np.asarray(indices).size, dtype=np.uint64)


def _noise_sources(rng: RandomLike | str) -> tuple[NoiseSource, Any]:
    """Pólya source and share randomness: seeded NumPy, or the OS CSPRNG for ``'os'``."""
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
    m = check_servers(n_servers)
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
    m = check_servers(n_servers)
    fp = _fixed_point(ring_bits, frac_bits)
    units = fp.encode(tree_noise.values, "tree_noise.values")
    share_rng = as_share_rng(rng)
    tree = tree_noise.tree
    return SharedTreeNoise(share(units, m, share_rng, ring=fp.ring), tree, fp,
                           tree.n_levels / tree_noise.scale, tree_noise.scale, "laplace", 1, 1,
                           tree_noise.kind, m * tree.n_nodes * fp.bits)



def _check_noise_ring(noise: SharedTreeNoise, frac_bits: int | None, ring_bits: int) -> None:
    """Shares of given noise live in their own fixed-point ring: the evaluation must use it."""
    if frac_bits is not None and frac_bits != noise.fixed_point.frac_bits:
        raise ValueError(f"frac_bits={frac_bits} differs from the noise's "
                         f"{noise.fixed_point.frac_bits}")
    if ring_bits != noise.fixed_point.bits:
        raise ValueError(f"ring_bits={ring_bits} differs from the noise's ring "
                         f"({noise.fixed_point.bits} bits)")

def resolve_noise_plan(tree: DyadicTree, epsilon: float, n_servers: int,
                   noise: SharedTreeNoise | None, tree_noise: TreeNoise | NodeNoise | None,
                   contributors: int | None, min_honest: int, frac_bits: int | None,
                   ring_bits: int, tree_plan: HierarchicalPlan | None = None
                   ) -> tuple[FixedPoint, SharedTreeNoise | None, dict[str, Any]]:
    """Check the noise arguments; return the fixed point, a ready noise (if given) and
    the plan for drawing it later. ``tree_plan``: the hierarchical release's tree (None:
    003's dyadic tree); the plan dict carries it as ``"tree_plan"``."""
    if noise is not None and tree_noise is not None:
        raise ValueError("pass either noise (shares already held by the servers) or "
                         "tree_noise (a draw for the dealer to share), not both")
    if tree_plan is not None:
        fp, ready, plan = _resolve_node_plan(tree_plan, epsilon, n_servers, noise, tree_noise,
                                             contributors, min_honest, frac_bits, ring_bits)
        return fp, ready, {**plan, "tree_plan": tree_plan}
    if isinstance(tree_noise, NodeNoise):
        raise ValueError("tree_noise is a hierarchical NodeNoise: it needs "
                         "method='hierarchical'")
    if isinstance(noise, SharedTreeNoise) and noise.plan is not None:
        raise ValueError("noise holds shares of hierarchical node noise: it needs "
                         "method='hierarchical'")
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
        _check_noise_ring(noise, frac_bits, ring_bits)
        return noise.fixed_point, noise, {"mode": "given"}
    if tree_noise is not None:
        check_tree_noise(tree_noise, tree.n_points, scale)
        c = DEALER_FRAC_BITS if frac_bits is None else frac_bits
        return _fixed_point(ring_bits, c), None, {"mode": "dealer", "tree_noise": tree_noise}
    k, h = _check_contributors(contributors, n_servers, min_honest)
    c = 0 if frac_bits is None else frac_bits
    return _fixed_point(ring_bits, c), None, {"mode": "distributed", "contributors": k,
                                              "min_honest": h}


def draw_noise(plan: dict[str, Any], tree: DyadicTree, epsilon: float, n_servers: int,
                fixed_point: FixedPoint, rng: Any) -> SharedTreeNoise | None:
    if plan["mode"] == "none":
        return None
    hplan = plan.get("tree_plan")
    if hplan is not None:
        if plan["mode"] == "dealer":
            return share_node_noise(plan["tree_noise"], n_servers=n_servers,
                                    frac_bits=fixed_point.frac_bits,
                                    ring_bits=fixed_point.bits, rng=rng)
        return distributed_node_noise(hplan, epsilon, n_servers=n_servers,
                                      contributors=plan["contributors"],
                                      min_honest=plan["min_honest"],
                                      frac_bits=fixed_point.frac_bits,
                                      ring_bits=fixed_point.bits, rng=rng)
    if plan["mode"] == "dealer":
        return share_tree_noise(plan["tree_noise"], n_servers=n_servers,
                                frac_bits=fixed_point.frac_bits, ring_bits=fixed_point.bits,
                                rng=rng)
    return distributed_tree_noise(tree.n_points, epsilon, n_servers=n_servers,
                                  contributors=plan["contributors"],
                                  min_honest=plan["min_honest"],
                                  frac_bits=fixed_point.frac_bits, ring_bits=fixed_point.bits,
                                  rng=rng)


# ----------------------------------------------- the hierarchical release's node noise


def _same_plan(a: HierarchicalPlan, b: HierarchicalPlan) -> bool:
    return (a.n_points == b.n_points and a.branching == b.branching
            and np.allclose(a.weights, b.weights, rtol=1e-12, atol=0.0))


def _resolve_node_plan(tree_plan: HierarchicalPlan, epsilon: float, n_servers: int,
                       noise: SharedTreeNoise | None, tree_noise: Any,
                       contributors: int | None, min_honest: int, frac_bits: int | None,
                       ring_bits: int) -> tuple[FixedPoint, SharedTreeNoise | None,
                                                dict[str, Any]]:
    """:func:`resolve_noise_plan` for the hierarchical release's node noise."""
    if math.isinf(epsilon):
        if noise is not None or tree_noise is not None:
            raise ValueError("epsilon is infinite (the exact curve) but noise was given")
        return _fixed_point(ring_bits, 0 if frac_bits is None else frac_bits), None, \
            {"mode": "none"}
    if noise is not None:
        if not isinstance(noise, SharedTreeNoise):
            raise TypeError(f"noise must be a SharedTreeNoise, got {type(noise).__name__}")
        if noise.plan is None:
            raise ValueError("noise holds shares of 003's tree noise: it needs "
                             "method='003-tree' (or share hierarchical node noise with "
                             "distributed_node_noise / share_node_noise)")
        if not _same_plan(noise.plan, tree_plan) or noise.n_servers != n_servers:
            raise ValueError(f"noise is shared among {noise.n_servers} servers for the tree "
                             f"(N={noise.plan.n_points}, b={noise.plan.branching}); this "
                             f"evaluation has {n_servers} servers and the tree "
                             f"(N={tree_plan.n_points}, b={tree_plan.branching})")
        if not math.isclose(noise.epsilon, epsilon, rel_tol=1e-12):
            raise ValueError(f"noise was drawn for epsilon={noise.epsilon:g}, this evaluation "
                             f"has epsilon={epsilon:g}")
        _check_noise_ring(noise, frac_bits, ring_bits)
        return noise.fixed_point, noise, {"mode": "given"}
    if tree_noise is not None:
        if not isinstance(tree_noise, NodeNoise):
            raise TypeError(f"with method='hierarchical', tree_noise must be a NodeNoise "
                            f"(hierarchical.draw_node_noise), got {type(tree_noise).__name__}")
        if not _same_plan(tree_noise.plan, tree_plan):
            raise ValueError(f"tree_noise is for the tree (N={tree_noise.plan.n_points}, "
                             f"b={tree_noise.plan.branching}); this evaluation's tree is "
                             f"(N={tree_plan.n_points}, b={tree_plan.branching})")
        if not math.isclose(tree_noise.epsilon, epsilon, rel_tol=1e-12):
            raise ValueError(f"tree_noise was drawn for epsilon={tree_noise.epsilon:g}, this "
                             f"evaluation has epsilon={epsilon:g}")
        c = DEALER_FRAC_BITS if frac_bits is None else frac_bits
        return _fixed_point(ring_bits, c), None, {"mode": "dealer", "tree_noise": tree_noise}
    k, h = _check_contributors(contributors, n_servers, min_honest)
    c = 0 if frac_bits is None else frac_bits
    return _fixed_point(ring_bits, c), None, {"mode": "distributed", "contributors": k,
                                              "min_honest": h}


def _node_parts(tree_plan: HierarchicalPlan, epsilon: float, fixed_point: FixedPoint,
                min_honest: int, rows: int, source: NoiseSource) -> np.ndarray:
    """``rows`` contributors' Pólya parts ``Polya(1/h, t_l) - Polya(1/h, t_l)`` for every
    noisy node, ``t_l = exp(-2^-c / s_l)`` with the node's level scale ``s_l`` (002
    Protocol B.1 per level), in units of ``2^-c``: shape ``(rows, #nodes)``."""
    scales = tree_plan.scales(epsilon)
    _, _, levels = node_intervals(tree_plan)
    out = np.empty((rows, levels.size), dtype=np.int64)
    for lev, scale in enumerate(scales):
        cols = np.flatnonzero(levels == lev)
        t = math.exp(-fixed_point.resolution / float(scale))
        size = (rows, cols.size)
        out[:, cols] = (polya(1.0 / min_honest, t, size, rng=source)
                        - polya(1.0 / min_honest, t, size, rng=source)).astype(np.int64)
    return out


def distributed_node_noise(tree_plan: HierarchicalPlan, epsilon: float, *, n_servers: int = 2,
                           contributors: int | None = None, min_honest: int = 1,
                           frac_bits: int = 0, ring_bits: int = 64,
                           rng: RandomLike | str = None) -> SharedTreeNoise:
    """The hierarchical release's node noise, drawn by ``K >= 2`` contributors and shared
    among the servers.

    :func:`distributed_tree_noise` per level: contributor k draws ``X - Y``, ``X, Y ~
    Polya(1/h, t_l)``, ``t_l = exp(-2^-c / s_l)``, for every noisy node of ``tree_plan``
    on level ``l`` (``s_l = 2 / (eps w_l)``, the root ``2 / eps``, as
    :meth:`HierarchicalPlan.scales`) and sends each server an additive share. ``h`` parts
    add up to one discrete Laplace ``P(k 2^-c) ~ t_l^|k|`` per node, the discrete analogue
    of the central release's ``Lap(s_l)``: a replaced record shifts at most two nodes per
    level (one per level and the root when it crosses the last threshold) by one count,
    ``2^c`` units, a probability ratio ``e^(1/s_l)`` each, so the loss is at most
    ``2 sum_l 1/s_l = eps`` (hierarchical module docstring). Each contributor's part
    alone (``h = 1``) is a full discrete Laplace per node; no single server's share tells
    anything about the noise. Parameters as in :func:`distributed_tree_noise`.
    """
    if not isinstance(tree_plan, HierarchicalPlan):
        raise TypeError(f"tree_plan must be a HierarchicalPlan, got {type(tree_plan).__name__}")
    eps = check_epsilon(epsilon)
    m = check_servers(n_servers)
    k, h = _check_contributors(contributors, m, min_honest)
    fp = _fixed_point(ring_bits, frac_bits)
    source, share_rng = _noise_sources(rng)
    parts = _node_parts(tree_plan, eps, fp, h, k, source)
    ring = fp.ring
    shares = share(ring.reduce(parts), m, share_rng, ring=ring)  # (m, K, nodes)
    tree = DyadicTree(tree_plan.n_points)
    return SharedTreeNoise(ring.sum(shares, axis=1), tree, fp, eps,
                           float(tree_plan.scales(eps)[0]), "discrete-laplace", k, h,
                           source.kind, k * m * parts.shape[1] * ring.bits, tree_plan)


def share_node_noise(node_noise: NodeNoise, *, n_servers: int = 2,
                     frac_bits: int = DEALER_FRAC_BITS, ring_bits: int = 64,
                     rng: RandomLike | str = None) -> SharedTreeNoise:
    """A noise dealer rounds a hierarchical Laplace draw to ``2^-c`` and shares it.

    :func:`share_tree_noise` for :class:`~fedustat.protocols.ecdf.hierarchical.NodeNoise`
    (e.g. :func:`~fedustat.protocols.ecdf.hierarchical.draw_node_noise`, which draws what
    ``dp_ecdf(method="hierarchical")`` adds for the same seed). Rounding keeps eps-DP
    (each node's rounded law is the Laplace mass of the cell around each lattice point; a
    shift by one count maps cells onto cells, ratio at most ``e^(1/s_l)``). The dealer
    knows the noise: it must be independent of the servers and never see a release.
    """
    if not isinstance(node_noise, NodeNoise):
        raise TypeError(f"node_noise must be a NodeNoise, got {type(node_noise).__name__}")
    m = check_servers(n_servers)
    fp = _fixed_point(ring_bits, frac_bits)
    units = fp.encode(node_noise.values, "node_noise.values")
    plan = node_noise.plan
    return SharedTreeNoise(share(units, m, as_share_rng(rng), ring=fp.ring),
                           DyadicTree(plan.n_points), fp, node_noise.epsilon,
                           float(plan.scales(node_noise.epsilon)[0]), "laplace", 1, 1,
                           node_noise.kind, m * units.size * fp.bits, plan)


def contributor_node_units(plan: dict[str, Any], epsilon: float, fixed_point: FixedPoint,
                           rng: np.random.Generator | str) -> np.ndarray:
    """One contributor's Pólya part of every node's noise (:func:`distributed_node_noise`),
    in ring units, shape ``(#nodes,)``; ``rng``: its own generator, or ``'os'``."""
    source, _ = _noise_sources(rng)
    parts = _node_parts(plan["tree_plan"], epsilon, fixed_point, plan["min_honest"], 1, source)
    return fixed_point.ring.reduce(parts[0])


def held_node_units(plan: dict[str, Any], noise: SharedTreeNoise | None,
                    fixed_point: FixedPoint, server: int) -> np.ndarray:
    """Computing party ``server``'s share of node noise held before the run (as
    :func:`held_point_units`, per node): its row of ``noise``; a dealer's
    :class:`NodeNoise` given as a parameter is added whole by party 0; else zeros."""
    if noise is not None:
        return noise.shares[server]
    size = plan["tree_plan"].n_noisy_nodes
    if plan["mode"] == "dealer" and server == 0:
        return fixed_point.encode(plan["tree_noise"].values, "tree_noise.values")
    return np.zeros(size, dtype=np.uint64)


# ------------------------------------------------- parties silent in the sharing round


#: The upload field that lists, after a dropout, the parties a computing party summed.
SUMMED = "summed"


def surviving_rows(inbox: Message | None, party: int, n: int, what: str
                   ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The rows computing party ``party`` received and the ids they came from.

    Parties silent in a relay round sent nothing (the transport delivers the rows that
    arrived, :meth:`~fedustat.protocols.base.Protocol.dropout_rule`), so the origins are
    any increasing subset of ``0..n-1``; a repeated, foreign or unordered row stops it.
    """
    if inbox is None or not inbox.is_peer:
        raise ValueError(f"party {party} expected the relayed {what} and got no relay rows")
    mine = np.asarray(inbox.parties) == party
    got = np.asarray(inbox.fields[PEER_FROM])[mine].astype(np.int64)
    if got.size == 0 or np.any(np.diff(got) <= 0) or got[0] < 0 or got[-1] >= n:
        raise ValueError(f"party {party} received {what} from {got.size} rows that are not "
                         f"one row per party of 0..{n - 1}")
    rows = {name: np.asarray(v)[mine] for name, v in inbox.fields.items() if name != PEER_FROM}
    return rows, got


def withheld_reason(plan: dict[str, Any], present: np.ndarray, n_servers: int) -> str | None:
    """Why the computing parties must not open their sums over the ``present`` parties,
    or None. A silent computing party held a share of every count (the others' shares
    alone are uniformly random: nothing to open); fewer than ``min_honest`` of the noise
    contributors ``0..K-1`` leave less noise than the guarantee needs (002 Protocol B.1:
    each contributor draws a ``1/h`` share of the Pólya shape)."""
    silent_servers = np.setdiff1d(np.arange(n_servers), present)
    if silent_servers.size:
        names = ", ".join(str(int(j)) for j in silent_servers)
        return (f"computing party {names} fell silent in the sharing round: it holds a "
                f"share of every count, which the others cannot open without it")
    if plan["mode"] == "distributed":
        k, h = plan["contributors"], plan["min_honest"]
        got = int(np.count_nonzero(present < k))
        if got < h:
            return (f"only {got} of the {k} noise contributors (parties 0..{k - 1}) took "
                    f"part, fewer than min_honest = {h}: their noise is less than the "
                    f"guarantee needs")
    return None


def with_summed(upload: Message, present: np.ndarray, n: int, withhold: bool) -> Message:
    """A computing party's upload after a dropout: its sums (zeros when it withholds
    them, :func:`withheld_reason`) and the mask of the parties it summed (1 bit each),
    which the querier needs for n and checks equal across computing parties.

    A batch without computing parties sends an empty mask (no rows, no bits) in every
    run, so that a round's messages merge whichever of them carry one (the merge takes
    the fields of its first message, which holds party 0).
    """
    rows = np.asarray(upload.parties).size
    mask = np.zeros((rows, n), dtype=np.uint8)
    mask[:, present] = 1
    fields = dict(upload.fields)
    if withhold:
        fields = {name: np.zeros_like(v) for name, v in fields.items()}
    return Message(upload.sender, upload.receiver, {**fields, SUMMED: mask},
                   {**upload.bits_per_value, SUMMED: 1}, upload.parties)


def survivors_at_querier(inbox: Message, plan: dict[str, Any], n: int, n_servers: int
                         ) -> np.ndarray | None:
    """The querier's view of who was summed: None when every party was, else the ids.

    Refuses (with the reason) a silent computing party, computing parties that summed
    different parties, and too few noise contributors (the computing parties then
    withheld their sums, so nothing was opened).
    """
    senders = np.asarray(inbox.parties)
    silent = np.setdiff1d(np.arange(n_servers), senders)
    if silent.size:
        names = ", ".join(str(int(j)) for j in silent)
        raise ValueError(f"computing party {names} fell silent: it holds a share of every "
                         f"count, which the others cannot open without it")
    if SUMMED not in inbox.fields:
        return None
    masks = np.asarray(inbox.fields[SUMMED])
    if masks.shape != (senders.size, n) or np.any(masks != masks[:1]):
        raise ValueError("the computing parties summed different sets of parties")
    present = np.flatnonzero(masks[0])
    reason = withheld_reason(plan, present, n_servers)
    if reason is not None:
        raise ValueError(f"{reason}; the computing parties withheld their sums")
    return present


def sums_only(inbox: Message) -> Message:
    """The computing parties' upload without the mask of whom they summed."""
    if SUMMED not in inbox.fields:
        return inbox
    return Message(inbox.sender, inbox.receiver,
                   {k: v for k, v in inbox.fields.items() if k != SUMMED},
                   {k: v for k, v in inbox.bits_per_value.items() if k != SUMMED},
                   inbox.parties)


def survivor_law(law: NoiseLaw | None, plan: dict[str, Any],
                 present: np.ndarray | None) -> NoiseLaw | None:
    """The noise law over the contributors that took part: ``K'`` of them, each a ``1/h``
    share of the Pólya shape (002 Protocol B.1), so a total shape ``K' / h`` (the
    guarantee then states "at least h of the K' noise contributors")."""
    if law is None or present is None or plan["mode"] != "distributed":
        return law
    return replace(law, contributors=int(np.count_nonzero(present < plan["contributors"])))


def dropout_rule_for(protocol: str, noise: SharedTreeNoise | None, round_index: int,
                     later: str) -> DropoutRule:
    """:meth:`~fedustat.protocols.base.Protocol.dropout_rule` of the relayed federated
    ECDFs (ecdf-pointwise-secagg, ecdf-fss): a party silent in the sharing round (round
    0) sent nothing, so the computing parties sum the rows that arrived; ``later`` says
    why a later round cannot go on."""
    if round_index > 0:
        return DropoutRule(False, later)
    if noise is not None:
        return DropoutRule(False, "the noise shares given (noise=) answer queries over the "
                                  "same parties only: two answers with the same noise over "
                                  "different parties differ by exactly the missing "
                                  "parties' indicators")
    return DropoutRule(True, f"{protocol}: a party silent in the sharing round sent "
                             "nothing; the computing parties sum the rows that arrived (n = "
                             "those parties) if every computing party and at least "
                             "min_honest noise contributors took part, else they withhold "
                             "their sums and the run stops saying which")
