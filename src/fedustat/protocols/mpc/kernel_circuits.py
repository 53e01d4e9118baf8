"""Secure kernel circuits: the built-in kernels evaluated on additive shares (002 App. A.5).

U-MPC (002 Protocol 3.1, :mod:`fedustat.protocols.mpc.umpc`) calls a functionality
``F_f`` that turns the members' shares of the ``k`` records of an edge into shares of
``f(x_e)``. This module implements ``F_f`` for every built-in kernel with the primitives
of :mod:`fedustat.secure` (comparisons and equalities as boolean circuits or FSS gates,
Beaver products), vectorized over all edges at once. Every circuit outputs shares of an
*integer* ``D f(x_e)`` with a public scale ``D`` (:meth:`KernelCircuit.scale`), so the sum
over edges is exact in the ring and ``U = Rec(sum) / (D |E|)``.

Circuits per edge (``l`` ring bits; ``sign(d) = [d > 0] - [d < 0]``, so ties give 0):

=====================  ==================================================  =====  ====  ====
kernel                 circuit (002 section)                               cmp    eq    mul
=====================  ==================================================  =====  ====  ====
gini_mean_difference   ``(2 [x0 > x1] - 1)(x0 - x1)`` (A.5.2), D = 2^c     1      -     1
variance               ``(x0 - x1)(x0 - x1)``, D = 2^(2c+1)                -      -     1
kendall_tau_a          ``sign(u1 - u0) sign(v1 - v0)`` (A.5.1), D = 1       4      -     1
auc, mann_whitney      ``1 + [s- < s+] - [s+ < s-]`` = 2 f, D = 2           2      -     -
duplicate_pair_ratio,  ``[x0 == x1]``, D = 1                                -      1     -
renyi2_entropy
rand_index             ``1 - e_a - e_b + 2 e_a e_b`` = ``1 - (e_a xor e_b)``   -      2     1
vus (degree 3)         ``3 (1 + s01)(1 + s12) - t01 t12`` = 12 f, D = 12      4      -     2
=====================  ==================================================  =====  ====  ====

Notes on the choices:

* **Kendall** needs two comparisons per sign to give ties the value 0 (002 A.5.1 counts
  "two FSS instantiations", i.e. ``sign(d) = 2 [d > 0] - 1``, which is wrong on ties).
* **AUC** with public labels (the project's model, ``LABELS_PUBLIC``): the class
  pattern of each edge is public, so same-class edges have the public value 0 and are
  skipped (no sharing, no computation), and on the others the members know which record
  is the positive one: two comparisons and no product, against 002 A.5.3's four
  comparisons and two products for private labels. Ties count 1/2, as
  :func:`~fedustat.stats.kernels.auc_kernel`.
* **VUS** (degree 3): only triples with one record of each class count, and the class of
  each member is public. With ``s01 = sign(s1 - s0)``, ``s12 = sign(s2 - s1)`` and the tie
  indicators ``t01 = 1 - [s0 < s1] - [s1 < s0]`` (same for ``t12``),
  ``12 f = 3 (1 + s01)(1 + s12) - t01 t12`` reproduces
  :func:`~fedustat.stats.kernels.vus_kernel` exactly: 12 if strictly ordered, 6 if one
  adjacent pair ties and the other is ordered, 2 (= 12/6) if all three tie, else 0.
  Groups of three need the boolean-circuit comparisons (FSS gates are two-party).
* **Rand index** is the standard one (both clusterings agree on "together"), not the
  garbled 002 eq. 11.

Comparisons run with ``full_range=False`` (one sign bit of the difference, about three
times cheaper) when the fixed-point encoding has at least one bit of headroom, which
makes every difference of two encodings overflow-free; otherwise with ``full_range=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from fedustat._validation import as_binary_labels
from fedustat.secure import (
    BeaverTriples,
    ComparisonMaterial,
    Dealer,
    FixedPoint,
    Ring,
    Transcript,
    add_public,
    comparison_cost,
    deal_equal,
    deal_less_than,
    equal,
    less_than,
    mul_many,
    mul_public,
)
from fedustat.stats import kernels as _k
from fedustat.stats.kernels import Kernel

__all__ = [
    "SUPPORTED_KERNELS",
    "CircuitCost",
    "CircuitMaterial",
    "KernelCircuit",
    "circuit_for",
]

Method = Literal["circuit", "fss"]

#: Kernel names U-MPC has secure circuits for.
SUPPORTED_KERNELS = ("auc", "mann_whitney", "kendall_tau_a", "gini_mean_difference", "variance",
                     "duplicate_pair_ratio", "renyi2_entropy", "rand_index", "vus")


@dataclass(frozen=True)
class CircuitCost:
    """Per edge: online rounds, online bits sent per member, offline bits per member."""

    rounds: int
    online_bits: int
    offline_bits: int


@dataclass(eq=False)
class CircuitMaterial:
    """Offline material for one evaluation over ``m`` edges (used once)."""

    comparisons: ComparisonMaterial | None
    equalities: ComparisonMaterial | None
    triples: list[BeaverTriples]


# An evaluator gets the owners' shares ``S[j]`` (shape (k, m, secret columns): row r is
# what member r holds of member j's record), the public order of the members (see
# ``_public_order``), the material and helpers; it returns shares (k, m) of D f.
Evaluator = Callable[["_Ctx", list[np.ndarray]], np.ndarray]


@dataclass
class _Ctx:
    ring: Ring
    method: Method
    full_range: bool
    material: CircuitMaterial
    transcript: Transcript | None
    order: np.ndarray | None  # (m, k): member index holding class 0, 1, ... (labelled kernels)

    def lt(self, a: list[np.ndarray], b: list[np.ndarray]) -> list[np.ndarray]:
        """``[a_i < b_i]`` for all pairs at once (one comparison call, one set of rounds)."""
        out = less_than(np.stack(a, axis=-1), np.stack(b, axis=-1), self.material.comparisons,
                        method=self.method, full_range=self.full_range,
                        transcript=self.transcript)
        return [out[..., i] for i in range(len(a))]

    def eq(self, a: list[np.ndarray], b: list[np.ndarray]) -> list[np.ndarray]:
        out = equal(np.stack(a, axis=-1), np.stack(b, axis=-1), self.material.equalities,
                    method=self.method, transcript=self.transcript)
        return [out[..., i] for i in range(len(a))]

    def mul(self, pairs: list[tuple[np.ndarray, np.ndarray]]) -> list[np.ndarray]:
        """Beaver products, all in one round."""
        return mul_many([(x, y, t) for (x, y), t in zip(pairs, self.material.triples,
                                                        strict=True)],
                        transcript=self.transcript)

    def add(self, *xs: np.ndarray) -> np.ndarray:
        out = xs[0]
        for x in xs[1:]:
            out = self.ring.add(out, x)
        return out

    def sub(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.ring.sub(a, b)

    def plus(self, x: np.ndarray, c: int) -> np.ndarray:
        """Shares of ``x + c`` for a public integer ``c`` (member 0 adds it)."""
        return add_public(x, c, ring=self.ring)

    def times(self, x: np.ndarray, c: int) -> np.ndarray:
        return mul_public(x, c, ring=self.ring)

    def by_class(self, shares: list[np.ndarray], cls: int) -> np.ndarray:
        """Shares of the record of the member whose public class is ``cls`` (per edge).

        The selection is public (the class pattern is public), so every member picks the
        same owner's shares locally.
        """
        assert self.order is not None
        owners = np.stack([s[..., 0] for s in shares], axis=-1)  # (k rows, m, owners)
        pick = self.order[:, cls][None, :, None]
        return np.take_along_axis(owners, np.broadcast_to(pick, (*owners.shape[:2], 1)),
                                  axis=-1)[..., 0]


def _gini(c: _Ctx, S: list[np.ndarray]) -> np.ndarray:
    # 002 A.5.2: |x0 - x1| = (2 [x0 > x1] - 1)(x0 - x1); the sign is an integer, so the
    # product keeps the c fractional bits of the difference (no rescaling).
    x0, x1 = S[0][..., 0], S[1][..., 0]
    (gt,) = c.lt([x1], [x0])
    (out,) = c.mul([(c.plus(c.times(gt, 2), -1), c.sub(x0, x1))])
    return out


def _variance(c: _Ctx, S: list[np.ndarray]) -> np.ndarray:
    d = c.sub(S[0][..., 0], S[1][..., 0])
    (out,) = c.mul([(d, d)])  # 2 f with 2c fractional bits
    return out


def _kendall(c: _Ctx, S: list[np.ndarray]) -> np.ndarray:
    # 002 eq. 8 with sign(d) = [d > 0] - [d < 0] (ties 0): four comparisons in one call.
    u0, v0, u1, v1 = S[0][..., 0], S[0][..., 1], S[1][..., 0], S[1][..., 1]
    u10, u01, v10, v01 = c.lt([u1, u0, v1, v0], [u0, u1, v0, v1])
    (out,) = c.mul([(c.sub(u01, u10), c.sub(v01, v10))])  # sign(u1 - u0) sign(v1 - v0)
    return out


def _auc(c: _Ctx, S: list[np.ndarray]) -> np.ndarray:
    # 2 f = 2 [s+ > s-] + [s+ == s-] = 1 + [s- < s+] - [s+ < s-] (kernels._auc_func).
    neg, pos = c.by_class(S, 0), c.by_class(S, 1)
    below, above = c.lt([neg, pos], [pos, neg])
    return c.plus(c.sub(below, above), 1)


def _duplicate(c: _Ctx, S: list[np.ndarray]) -> np.ndarray:
    (out,) = c.eq([S[0][..., 0]], [S[1][..., 0]])
    return out


def _rand(c: _Ctx, S: list[np.ndarray]) -> np.ndarray:
    # f = [e_a == e_b] = 1 - (e_a xor e_b) = 1 - e_a - e_b + 2 e_a e_b.
    ea, eb = c.eq([S[0][..., 0], S[0][..., 1]], [S[1][..., 0], S[1][..., 1]])
    (both,) = c.mul([(ea, eb)])
    return c.plus(c.sub(c.times(both, 2), c.add(ea, eb)), 1)


def _vus(c: _Ctx, S: list[np.ndarray]) -> np.ndarray:
    # 12 f = 3 (1 + s01)(1 + s12) - t01 t12 (module docstring; kernels._vus_func).
    s0, s1, s2 = (c.by_class(S, q) for q in range(3))
    l01, l10, l12, l21 = c.lt([s0, s1, s1, s2], [s1, s0, s2, s1])
    up01 = c.plus(c.sub(l01, l10), 1)                    # 1 + sign(s1 - s0)
    up12 = c.plus(c.sub(l12, l21), 1)                    # 1 + sign(s2 - s1)
    tie01 = c.plus(c.times(c.add(l01, l10), -1), 1)      # [s0 == s1]
    tie12 = c.plus(c.times(c.add(l12, l21), -1), 1)      # [s1 == s2]
    ordered, ties = c.mul([(up01, up12), (tie01, tie12)])
    return c.sub(c.times(ordered, 3), ties)


@dataclass(frozen=True)
class KernelCircuit:
    """The secure circuit of one built-in kernel (see the module table).

    Attributes
    ----------
    name:
        Kernel name.
    degree:
        Group size ``k``.
    secret_columns:
        Columns of a record that are secret-shared (the others are public).
    public_column:
        The public class/label column of labelled kernels (AUC, VUS), else None.
    comparisons, equalities, products:
        Secure operations per edge.
    denominator:
        Integer factor of the output: the circuit computes ``denominator * f`` times
        ``2^(frac_factor * c)``.
    frac_factor:
        0 for integer outputs, 1 for outputs in fixed point, 2 for products of two
        fixed-point values.
    """

    name: str
    degree: int
    secret_columns: tuple[int, ...]
    public_column: int | None
    comparisons: int
    equalities: int
    products: int
    denominator: int
    frac_factor: int
    evaluator: Evaluator

    # ---------------------------------------------------------------- public parts
    def public_values(self, records: np.ndarray) -> np.ndarray | None:
        """The public column as small integers (labels 0/1, classes 0/1/2), checked per
        record (no global condition such as "both classes present")."""
        if self.public_column is None:
            return None
        col = records[:, self.public_column]
        if self.name == "vus":
            if not np.all(np.isin(col, (0.0, 1.0, 2.0))):
                raise ValueError("class must hold the ordinal classes 0, 1, 2")
            return col.astype(np.int64)
        return as_binary_labels(col, "label", require_both=False).astype(np.int64)

    def public_bits(self) -> int:
        """Wire size of one public value."""
        return 2 if self.name == "vus" else 1

    def active(self, public_of_members: np.ndarray | None) -> np.ndarray | None:
        """Edges whose kernel value is not fixed by public information, or None (all).

        ``public_of_members`` is (m, k): the public value of each member of each edge.
        """
        if public_of_members is None:
            return None
        srt = np.sort(public_of_members, axis=1)
        if self.name == "vus":
            return np.all(srt == np.arange(3), axis=1)
        return srt[:, 0] != srt[:, 1]

    def order(self, public_of_members: np.ndarray | None) -> np.ndarray | None:
        """(m, k): for class q, the member index holding it (active edges only)."""
        if public_of_members is None:
            return None
        return np.argsort(public_of_members, axis=1, kind="stable")

    # ---------------------------------------------------------------- scaling
    def scale(self, fixed_point: FixedPoint) -> int:
        """``D``: the circuit outputs ``D f`` (an integer in ring units)."""
        return self.denominator << (self.frac_factor * fixed_point.frac_bits)

    def full_range(self, fixed_point: FixedPoint) -> bool:
        """Half-range comparisons are exact when one bit of headroom keeps differences of
        encodings from overflowing."""
        return fixed_point.headroom == 0

    # ---------------------------------------------------------------- costs
    def cost(self, *, ring_bits: int, method: Method, full_range: bool) -> CircuitCost:
        """Rounds and bits per edge and per member (sums of the primitives' costs from
        :func:`fedustat.secure.comparison_cost`; a Beaver product opens two values:
        ``2 (k - 1) l`` bits sent, ``3 l`` dealt)."""
        k, l_bits = self.degree, ring_bits
        rounds = online = offline = 0
        if self.comparisons:
            c = comparison_cost("less_than", bits=l_bits, group_size=k, method=method,
                                full_range=full_range)
            rounds = c.rounds
            online += self.comparisons * c.online_bits
            offline += self.comparisons * c.offline_bits
        if self.equalities:
            e = comparison_cost("equal", bits=l_bits, group_size=k, method=method)
            rounds = max(rounds, e.rounds)
            online += self.equalities * e.online_bits
            offline += self.equalities * e.offline_bits
        if self.products:
            rounds += 1
            online += self.products * 2 * (k - 1) * l_bits
            offline += self.products * 3 * l_bits
        return CircuitCost(rounds, online, offline)

    # ---------------------------------------------------------------- offline / online
    def deal(self, dealer: Dealer, n_edges: int, *, method: Method,
             full_range: bool) -> CircuitMaterial:
        """Offline phase: the dealer's material for ``n_edges`` evaluations."""
        cmp = deal_less_than(dealer, (n_edges, self.comparisons), method=method,
                             full_range=full_range) if self.comparisons else None
        eq = deal_equal(dealer, (n_edges, self.equalities), method=method) \
            if self.equalities else None
        triples = [dealer.beaver_triples((n_edges,)) for _ in range(self.products)]
        return CircuitMaterial(cmp, eq, triples)

    def evaluate(self, shares: list[np.ndarray], material: CircuitMaterial, *, ring: Ring,
                 method: Method, full_range: bool, order: np.ndarray | None = None,
                 transcript: Transcript | None = None) -> np.ndarray:
        """Online phase: shares ``(k, m)`` of ``D f(x_e)`` for all ``m`` edges.

        Parameters
        ----------
        shares:
            ``shares[j]`` of shape ``(k, m, len(secret_columns))``: member ``r`` of edge
            ``g`` holds ``shares[j][r, g]``, its share of member ``j``'s secret columns.
        material:
            From :meth:`deal` (same ``m``, method and range).
        order:
            From :meth:`order` (labelled kernels).
        transcript:
            Where the openings are recorded (layout: the edges).
        """
        if len(shares) != self.degree:
            raise ValueError(f"need the shares of {self.degree} records per edge, "
                             f"got {len(shares)}")
        ctx = _Ctx(ring, method, full_range, material, transcript, order)
        return self.evaluator(ctx, shares)

    def evaluate_clear(self, records: list[np.ndarray], order: np.ndarray | None,
                       fixed_point: FixedPoint) -> np.ndarray:
        """The same arithmetic on encoded values in the clear (``D f`` as integers).

        Used by the tests to check the circuits against the kernels: ``records[j]`` holds
        the signed integer encodings (m, columns) of member ``j``'s secret columns.
        """
        x = [np.asarray(r, dtype=object) for r in records]
        sign = np.vectorize(lambda v: (v > 0) - (v < 0), otypes=[object])
        if order is not None:
            stacked = np.stack([r[:, 0] for r in x], axis=-1)
            by = [stacked[np.arange(stacked.shape[0]), order[:, q]] for q in range(self.degree)]
        if self.name == "gini_mean_difference":
            return np.abs(x[0][:, 0] - x[1][:, 0])
        if self.name == "variance":
            return (x[0][:, 0] - x[1][:, 0]) ** 2
        if self.name == "kendall_tau_a":
            return sign(x[1][:, 0] - x[0][:, 0]) * sign(x[1][:, 1] - x[0][:, 1])
        if self.name in ("auc", "mann_whitney"):
            return 1 + sign(by[1] - by[0])
        if self.name in ("duplicate_pair_ratio", "renyi2_entropy"):
            return (x[0][:, 0] == x[1][:, 0]).astype(object)
        if self.name == "rand_index":
            return ((x[0][:, 0] == x[1][:, 0]) == (x[0][:, 1] == x[1][:, 1])).astype(object)
        s01, s12 = sign(by[1] - by[0]), sign(by[2] - by[1])
        return 3 * (1 + s01) * (1 + s12) - (s01 == 0) * (s12 == 0)


def _spec(name: str, degree: int, secret: tuple[int, ...], public: int | None, cmp: int,
          eq: int, mul: int, denominator: int, frac: int, fn: Evaluator) -> KernelCircuit:
    return KernelCircuit(name, degree, secret, public, cmp, eq, mul, denominator, frac, fn)


_CIRCUITS: dict[str, tuple[Callable[[], Any], KernelCircuit]] = {
    "gini_mean_difference": (lambda: _k.gini_kernel((0.0, 1.0)).func,
                             _spec("gini_mean_difference", 2, (0,), None, 1, 0, 1, 1, 1, _gini)),
    "variance": (lambda: _k.variance_kernel((0.0, 1.0)).func,
                 _spec("variance", 2, (0,), None, 0, 0, 1, 2, 2, _variance)),
    "kendall_tau_a": (lambda: _k.kendall_tau_kernel("a").func,
                      _spec("kendall_tau_a", 2, (0, 1), None, 4, 0, 1, 1, 0, _kendall)),
    "auc": (lambda: _k.auc_kernel().func, _spec("auc", 2, (0,), 1, 2, 0, 0, 2, 0, _auc)),
    "mann_whitney": (lambda: _k.mann_whitney_kernel().func,
                     _spec("mann_whitney", 2, (0,), 1, 2, 0, 0, 2, 0, _auc)),
    "duplicate_pair_ratio": (lambda: _k.duplicate_pair_kernel().func,
                             _spec("duplicate_pair_ratio", 2, (0,), None, 0, 1, 0, 1, 0,
                                   _duplicate)),
    "renyi2_entropy": (lambda: _k.renyi2_entropy_kernel().func,
                       _spec("renyi2_entropy", 2, (0,), None, 0, 1, 0, 1, 0, _duplicate)),
    "rand_index": (lambda: _k.rand_index_kernel().func,
                   _spec("rand_index", 2, (0, 1), None, 0, 2, 1, 1, 0, _rand)),
    "vus": (lambda: _k.vus_kernel().func, _spec("vus", 3, (0,), 1, 4, 0, 2, 12, 0, _vus)),
}


def circuit_for(kernel: Kernel) -> KernelCircuit:
    """The secure circuit of a built-in kernel.

    Raises
    ------
    ValueError
        For kernels without a secure circuit (user kernels, tau-b), naming the supported
        ones.
    """
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a fedustat Kernel, got {type(kernel).__name__}")
    supported = ", ".join(SUPPORTED_KERNELS)
    if kernel.name == "kendall_tau_b":
        raise ValueError("kernel 'kendall_tau_b' maps U to its statistic with private tie "
                         "counts; U-MPC releases tau-a: use kendall_tau_kernel('a')")
    entry = _CIRCUITS.get(kernel.name)
    # A user kernel that borrows a built-in name has no circuit: the function must match.
    if entry is None or kernel.func is not entry[0]():
        raise ValueError(f"U-MPC evaluates kernels with secure circuits, which exist only for "
                         f"the built-in kernels: {supported}; got kernel {kernel.name!r}")
    return entry[1]
