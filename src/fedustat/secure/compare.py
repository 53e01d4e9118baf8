"""Secure comparison ``[x < y]``, sign bit and equality ``[x == y]`` on additive shares.

Two methods, same interface and same output (additive shares of a 0/1 value in the
ring of the inputs):

``method="circuit"`` — any group size ``p >= 1``
    Bit decomposition of a masked value with a dealt edaBit, then a boolean circuit on
    XOR shares with AND triples (GMW-style, as suggested in 002 Sec. 3 "Functionalities"
    and 001 App. C.2 for comparisons), then B2A with a dealt daBit.

    * ``msb(z)``: open ``c = z + r`` (``r`` from an edaBit, so ``z = c - r`` with the
      bits of ``r`` XOR-shared). ``msb(z) = c_{l-1} xor r_{l-1} xor borrow`` where
      ``borrow = [c_low < r_low]`` compares the public low ``l - 1`` bits of ``c`` with
      the shared ones of ``r``: a parallel-prefix (tree) comparator with generate
      ``G_i = r_i and not c_i`` and propagate ``P_i = not (c_i xor r_i)``, both local,
      combined by ``(G, P)_hi o (G, P)_lo = (G_hi xor P_hi G_lo, P_hi P_lo)``
      (the two terms are exclusive, so OR is XOR). ``ceil(log2(l - 1))`` AND rounds.
    * ``equal``: ``z = x - y``, open ``c = z + r``; ``z = 0`` iff every bit of
      ``not (c xor r)`` is 1: an AND tree over ``l`` bits, ``ceil(log2 l)`` rounds.

``method="fss"`` — groups of two
    The function-secret-sharing gates of :mod:`fedustat.secure.dcf` (one DCF or DPF key
    per secret, one online round), as 002 App. A.5.1 / E.1.2 uses them.

Signed range
------------
``less_than(..., full_range=True)`` is exact for all ``x, y`` in the signed range
``[-2^{l-1}, 2^{l-1})``: with ``m_x, m_y, m_z`` the sign bits of ``x``, ``y`` and
``z = x - y mod 2^l``, ``[x < y] = m_z xor ((m_x xor m_y) and (m_x xor m_z))`` (the
second term is the overflow of the subtraction). It evaluates the three sign bits side
by side. ``full_range=False`` evaluates ``msb(x - y)`` only and is exact when
``x - y`` does not overflow, e.g. when both values were encoded with
``FixedPoint(headroom=1)`` (``|x|, |y| < 2^{l-2}``); it is about three times cheaper.

Costs per secret and per member (``p`` members, ``l`` ring bits, ``lambda = 128``);
:func:`comparison_cost` computes them and the tests check them against transcripts.
With ``w = l - 1``, ``L = ceil(log2 w)`` and ``A = 2 (w - 1) - L`` AND gates in the
borrow circuit (every combine needs ``G_hi xor P_hi G_lo``; every combine except the
lowest also needs ``P_hi P_lo``):

============================  ===============  ===============================================
primitive                     online rounds    online bits sent per member
============================  ===============  ===============================================
msb, circuit                  ``L + 2``        ``(p - 1)(l + 2 A + 1)``
less_than, circuit, half      ``L + 2``        ``(p - 1)(l + 2 A + 1)``
less_than, circuit, full      ``L + 3``        ``(p - 1)(3 l + 6 A + 3)``
equal, circuit                ``ceil(log2 l) + 2``  ``(p - 1)(l + 2 (l - 1) + 1)``
msb / less_than half, fss     ``1``            ``l``
less_than, fss, full          ``3``            ``7 l`` (3 openings, then 2 Beaver products)
equal, fss                    ``1``            ``l``
============================  ===============  ===============================================

For ``l = 64``, ``p = 2``: the circuit ``msb`` takes 8 rounds and 301 bits, the full
``less_than`` 9 rounds and 903 bits, ``equal`` 8 rounds and 191 bits; the FSS gate
1 round and 64 bits online against 12,542 bits of key material offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from fedustat.secure.beaver import and_gates, b2a, mul
from fedustat.secure.dcf import LAMBDA
from fedustat.secure.dealer import AndTriples, DaBits, Dealer, EdaBits, popcount
from fedustat.secure.fss_gates import fss_is_zero, fss_msb
from fedustat.secure.ring import Ring, full_mask
from fedustat.secure.sharing import Material, as_shares, open_shares
from fedustat.secure.transcript import Transcript

__all__ = [
    "ComparisonMaterial",
    "PrimitiveCost",
    "TreeLevel",
    "comparison_cost",
    "deal_equal",
    "deal_less_than",
    "deal_msb",
    "equal",
    "greater_than",
    "less_than",
    "msb",
    "tree_levels",
]

Method = Literal["circuit", "fss"]
Op = Literal["msb", "less_than", "equal"]


@dataclass(frozen=True)
class TreeLevel:
    """One level of a reduction tree over the bits of a word.

    ``combine``: positions ``i`` combined with ``i + step``; ``keep_p``: the combines
    whose propagate bit is needed later (all but position 0); ``passthrough``: live
    positions without a partner at this level.
    """

    step: int
    combine: int
    keep_p: int
    passthrough: int


def tree_levels(width: int) -> tuple[TreeLevel, ...]:
    """The ``ceil(log2 width)`` levels of a binary reduction tree over ``width`` bits."""
    levels = []
    step = 1
    while step < width:
        combine = passthrough = 0
        for i in range(0, width, 2 * step):
            if i + step < width:
                combine |= 1 << i
            else:
                passthrough |= 1 << i
        levels.append(TreeLevel(step, combine, combine & ~1, passthrough))
        step *= 2
    return tuple(levels)


@dataclass(frozen=True)
class PrimitiveCost:
    """Per secret and per group member: online rounds, online bits sent, offline bits
    received from the dealer."""

    rounds: int
    online_bits: int
    offline_bits: int


def _dcf_key_bits(domain: int, l_bits: int) -> int:
    return LAMBDA + domain * (LAMBDA + 2 + l_bits) + l_bits


def _dpf_key_bits(domain: int, l_bits: int) -> int:
    return LAMBDA + domain * (LAMBDA + 2) + l_bits


def comparison_cost(op: Op, *, bits: int, group_size: int = 2, method: Method = "circuit",
                    full_range: bool = True) -> PrimitiveCost:
    """Rounds and bits of :func:`msb`, :func:`less_than` or :func:`equal` (see the module
    docstring for the formulas)."""
    p, l_bits = int(group_size), int(bits)
    if method == "fss":
        msb_off = _dcf_key_bits(l_bits - 1, l_bits) + 2 * l_bits
        if op == "equal":
            return PrimitiveCost(1, l_bits, _dpf_key_bits(l_bits, l_bits) + l_bits)
        if op == "msb" or not full_range:
            return PrimitiveCost(1, l_bits, msb_off)
        return PrimitiveCost(3, 7 * l_bits, 3 * msb_off + 2 * 3 * l_bits)
    if method != "circuit":
        raise ValueError(f"method must be 'circuit' or 'fss', got {method!r}")
    dabit = l_bits + 1
    if op == "equal":
        levels = tree_levels(l_bits)
        ands = sum(popcount(v.combine) for v in levels)
        return PrimitiveCost(len(levels) + 2, (p - 1) * (l_bits + 2 * ands + 1),
                             2 * l_bits + 3 * ands + dabit)
    levels = tree_levels(l_bits - 1)
    ands = sum(popcount(v.combine) + popcount(v.keep_p) for v in levels)
    core_online = l_bits + 2 * ands
    core_offline = 2 * l_bits + 3 * ands
    if op == "msb" or not full_range:
        return PrimitiveCost(len(levels) + 2, (p - 1) * (core_online + 1), core_offline + dabit)
    return PrimitiveCost(len(levels) + 3, (p - 1) * (3 * core_online + 2 + 1),
                         3 * core_offline + 3 + dabit)


# -- materials ------------------------------------------------------------------------
@dataclass(eq=False)
class _MsbCircuit(Material):
    shape: tuple[int, ...]
    ring: Ring
    n_shares: int
    edabits: EdaBits
    g_triples: list[AndTriples]
    p_triples: list[AndTriples | None]


@dataclass(eq=False)
class _ZeroCircuit(Material):
    shape: tuple[int, ...]
    ring: Ring
    n_shares: int
    edabits: EdaBits
    triples: list[AndTriples]


@dataclass(eq=False)
class ComparisonMaterial(Material):
    """Everything one :func:`msb`, :func:`less_than` or :func:`equal` call consumes."""

    shape: tuple[int, ...]
    ring: Ring
    n_shares: int
    op: Op
    method: Method
    full_range: bool
    core: Any
    combine: list[Any]
    dabits: DaBits | None


def _deal_msb_circuit(dealer: Dealer, shape: tuple[int, ...]) -> _MsbCircuit:
    levels = tree_levels(dealer.ring.bits - 1)
    return _MsbCircuit(shape, dealer.ring, dealer.n_parties, dealer.edabits(shape),
                       [dealer.and_triples(shape, v.combine) for v in levels],
                       [dealer.and_triples(shape, v.keep_p) if v.keep_p else None
                        for v in levels])


def _deal_zero_circuit(dealer: Dealer, shape: tuple[int, ...]) -> _ZeroCircuit:
    levels = tree_levels(dealer.ring.bits)
    return _ZeroCircuit(shape, dealer.ring, dealer.n_parties, dealer.edabits(shape),
                        [dealer.and_triples(shape, v.combine) for v in levels])


def _check_method(method: str) -> Method:
    if method not in ("circuit", "fss"):
        raise ValueError(f"method must be 'circuit' or 'fss', got {method!r}")
    return method  # type: ignore[return-value]


def _deal(dealer: Dealer, shape: Any, op: Op, method: str, full_range: bool
          ) -> ComparisonMaterial:
    if not isinstance(dealer, Dealer):
        raise TypeError(f"dealer must be a Dealer, got {type(dealer).__name__}")
    method = _check_method(method)
    shape = tuple(int(d) for d in ((shape,) if isinstance(shape, int | np.integer) else shape))
    if dealer.ring.bits < 2 and op != "equal":
        raise ValueError("sign comparisons need a ring of at least 2 bits")
    wide = (*shape, 3)  # x, y and x - y side by side for the full-range comparison
    full = op == "less_than" and full_range
    combine: list[Any] = []
    dabits = None
    if method == "fss":
        if op == "equal":
            core: Any = dealer.fss_zero(shape)
        else:
            core = dealer.fss_msb(wide if full else shape)
            if full:
                combine = [dealer.beaver_triples(shape), dealer.beaver_triples(shape)]
    else:
        if op == "equal":
            core = _deal_zero_circuit(dealer, shape)
        else:
            core = _deal_msb_circuit(dealer, wide if full else shape)
            if full:
                combine = [dealer.and_triples(shape, 1)]
        dabits = dealer.dabits(shape)
    return ComparisonMaterial(shape, dealer.ring, dealer.n_parties, op, method,
                              bool(full_range) if op == "less_than" else True, core, combine,
                              dabits)


def deal_msb(dealer: Dealer, shape: Any, *, method: Method = "circuit") -> ComparisonMaterial:
    """Offline material for one :func:`msb` call on secrets of ``shape``."""
    return _deal(dealer, shape, "msb", method, True)


def deal_less_than(dealer: Dealer, shape: Any, *, method: Method = "circuit",
                   full_range: bool = True) -> ComparisonMaterial:
    """Offline material for one :func:`less_than` call on secrets of ``shape``."""
    return _deal(dealer, shape, "less_than", method, full_range)


def deal_equal(dealer: Dealer, shape: Any, *, method: Method = "circuit") -> ComparisonMaterial:
    """Offline material for one :func:`equal` call on secrets of ``shape``."""
    return _deal(dealer, shape, "equal", method, True)


def _material(source: ComparisonMaterial | Dealer, shape: tuple[int, ...], op: Op,
              method: str, full_range: bool) -> ComparisonMaterial:
    method = _check_method(method)
    if isinstance(source, Dealer):
        return _deal(source, shape, op, method, full_range)
    if not isinstance(source, ComparisonMaterial):
        raise TypeError(f"source must be a ComparisonMaterial or a Dealer, got "
                        f"{type(source).__name__}")
    want_full = bool(full_range) if op == "less_than" else True
    if (source.op, source.method, source.full_range) != (op, method, want_full):
        raise ValueError(f"material was dealt for {source.op} (method={source.method!r}, "
                         f"full_range={source.full_range}), not for {op} "
                         f"(method={method!r}, full_range={want_full})")
    return source


# -- boolean cores ----------------------------------------------------------------------
def _borrow(c_low: np.ndarray, r_low: np.ndarray, width: int, mat: _MsbCircuit,
            transcript: Transcript | None) -> np.ndarray:
    """XOR shares (bit 0) of ``[c < r]`` for public ``c`` and XOR-shared ``r`` on
    ``width`` bits: the parallel-prefix comparator of the module docstring."""
    low = full_mask(width)
    g = np.bitwise_and(r_low, np.bitwise_and(np.invert(c_low), low))      # r_i and not c_i
    p = r_low.copy()
    p[0] = np.bitwise_xor(p[0], np.bitwise_and(np.invert(c_low), low))    # not (c_i xor r_i)
    for level, tg, tp in zip(tree_levels(width), mat.g_triples, mat.p_triples, strict=True):
        step, comb = np.uint64(level.step), np.uint64(level.combine)
        g_hi = np.bitwise_and(np.right_shift(g, step), comb)
        p_hi = np.bitwise_and(np.right_shift(p, step), comb)
        gates: list[tuple[np.ndarray, np.ndarray, AndTriples]] = [
            (p_hi, np.bitwise_and(g, comb), tg)]
        if tp is not None:
            keep = np.uint64(level.keep_p)
            gates.append((np.bitwise_and(p_hi, keep), np.bitwise_and(p, keep), tp))
        outs = and_gates(gates, transcript=transcript, kind="msb.and")
        through = np.uint64(level.passthrough)
        g = np.bitwise_xor(np.bitwise_xor(np.bitwise_and(g, through), g_hi), outs[0])
        p = np.bitwise_and(p, through)
        if tp is not None:
            p = np.bitwise_xor(p, outs[1])
    return np.bitwise_and(g, np.uint64(1))


def _msb_bits(z: np.ndarray, mat: _MsbCircuit, transcript: Transcript | None) -> np.ndarray:
    """XOR shares (bit 0) of ``msb(z)`` (edaBit bit decomposition + borrow circuit)."""
    ring = mat.ring
    l_bits = ring.bits
    eda = mat.edabits
    eda.consume(z.shape[1:])
    (c,) = open_shares(ring.add(z, eda.arith), ring=ring, transcript=transcript,
                       kind="msb.open")
    top = np.uint64(l_bits - 1)
    low = full_mask(l_bits - 1)
    borrow = _borrow(np.bitwise_and(c, low), np.bitwise_and(eda.bits, low), l_bits - 1, mat,
                     transcript)
    out = np.bitwise_xor(np.bitwise_and(np.right_shift(eda.bits, top), np.uint64(1)), borrow)
    out[0] = np.bitwise_xor(out[0], np.right_shift(c, top))
    return out


def _zero_bits(z: np.ndarray, mat: _ZeroCircuit, transcript: Transcript | None) -> np.ndarray:
    """XOR shares (bit 0) of ``[z == 0]``: AND of the bits of ``not (c xor r)``."""
    ring = mat.ring
    eda = mat.edabits
    eda.consume(z.shape[1:])
    (c,) = open_shares(ring.add(z, eda.arith), ring=ring, transcript=transcript,
                       kind="equal.open")
    full = full_mask(ring.bits)
    t = eda.bits.copy()
    t[0] = np.bitwise_xor(t[0], np.bitwise_and(np.invert(c), full))
    for level, tri in zip(tree_levels(ring.bits), mat.triples, strict=True):
        step, comb = np.uint64(level.step), np.uint64(level.combine)
        hi = np.bitwise_and(np.right_shift(t, step), comb)
        (anded,) = and_gates([(hi, np.bitwise_and(t, comb), tri)], transcript=transcript,
                             kind="equal.and")
        t = np.bitwise_xor(np.bitwise_and(t, np.uint64(level.passthrough)), anded)
    return np.bitwise_and(t, np.uint64(1))


# -- public online functions -------------------------------------------------------------
def _inputs(arrays: Sequence[Any], names: Sequence[str], ring: Ring | None = None
            ) -> list[np.ndarray]:
    shares = [as_shares(a, n) for a, n in zip(arrays, names, strict=True)]
    shape = np.broadcast_shapes(*(s.shape for s in shares))
    out = [np.broadcast_to(s, shape) for s in shares]
    return [ring.reduce(s) for s in out] if ring is not None else out


def _source_ring(source: ComparisonMaterial | Dealer) -> Ring:
    if isinstance(source, ComparisonMaterial | Dealer):
        return source.ring
    raise TypeError(f"source must be a ComparisonMaterial or a Dealer, got "
                    f"{type(source).__name__}")


def _check_members(shares: np.ndarray, mat: ComparisonMaterial) -> None:
    if shares.shape[0] != mat.n_shares:
        raise ValueError(f"inputs have {shares.shape[0]} shares per secret but the material "
                         f"was dealt for groups of {mat.n_shares}")


def msb(z: Any, source: ComparisonMaterial | Dealer, *, method: Method = "circuit",
        transcript: Transcript | None = None) -> np.ndarray:
    """Additive shares of the sign bit ``msb(z)`` (``[z < 0]`` in two's complement).

    Parameters
    ----------
    z:
        Additive shares ``(p, *s)``.
    source:
        Material from :func:`deal_msb` (same ``method``), or a Dealer that deals it now.
    method:
        ``"circuit"`` (any ``p``) or ``"fss"`` (``p = 2``).
    transcript:
        Where the online messages are recorded.
    """
    (zs,) = _inputs([z], ["z"], _source_ring(source))
    mat = _material(source, zs.shape[1:], "msb", method, True)
    _check_members(zs, mat)
    mat.consume(zs.shape[1:])
    if mat.method == "fss":
        return fss_msb(zs, mat.core, transcript=transcript)
    bits = _msb_bits(zs, mat.core, transcript)
    return b2a(bits, mat.dabits, transcript=transcript)


def less_than(x: Any, y: Any, source: ComparisonMaterial | Dealer, *,
              method: Method = "circuit", full_range: bool = True,
              transcript: Transcript | None = None) -> np.ndarray:
    """Additive shares of ``[x < y]`` for signed ``x, y`` (two's complement in Z_{2^l}).

    Parameters
    ----------
    x, y:
        Additive shares ``(p, *s)`` (broadcast against each other).
    source:
        Material from :func:`deal_less_than` (same ``method`` and ``full_range``), or a
        Dealer that deals it now.
    method:
        ``"circuit"`` (any ``p``) or ``"fss"`` (``p = 2``).
    full_range:
        True: exact on the whole signed range. False: exact when ``x - y`` does not
        overflow (inputs with one bit of headroom); about three times cheaper.
    transcript:
        Where the online messages are recorded.
    """
    ring = _source_ring(source)
    xs, ys = _inputs([x, y], ["x", "y"], ring)
    mat = _material(source, xs.shape[1:], "less_than", method, full_range)
    _check_members(xs, mat)
    mat.consume(xs.shape[1:])
    diff = ring.sub(xs, ys)
    if not mat.full_range:
        if mat.method == "fss":
            return fss_msb(diff, mat.core, transcript=transcript)
        return b2a(_msb_bits(diff, mat.core, transcript), mat.dabits, transcript=transcript)
    stacked = np.stack([xs, ys, diff], axis=-1)
    if mat.method == "fss":
        signs = fss_msb(stacked, mat.core, transcript=transcript)
        mx, my, mz = signs[..., 0], signs[..., 1], signs[..., 2]
        both = mul(mx, my, mat.combine[0], transcript=transcript)
        # [m_x = m_y] = 1 - m_x - m_y + 2 m_x m_y; [x < y] = m_x (1 - m_y) + m_z [m_x = m_y].
        same = ring.add(ring.sub(ring.sub(np.zeros_like(mx), mx), my),
                        ring.mul(np.uint64(2), both))
        same[0] = ring.add(same[0], np.uint64(1))
        tail = mul(same, mz, mat.combine[1], transcript=transcript)
        return ring.add(ring.sub(mx, both), tail)
    signs = _msb_bits(stacked, mat.core, transcript)
    mx, my, mz = signs[..., 0], signs[..., 1], signs[..., 2]
    (overflow,) = and_gates([(np.bitwise_xor(mx, my), np.bitwise_xor(mx, mz), mat.combine[0])],
                            transcript=transcript, kind="less_than.and")
    return b2a(np.bitwise_xor(mz, overflow), mat.dabits, transcript=transcript)


def greater_than(x: Any, y: Any, source: ComparisonMaterial | Dealer, *,
                 method: Method = "circuit", full_range: bool = True,
                 transcript: Transcript | None = None) -> np.ndarray:
    """Additive shares of ``[x > y]`` (:func:`less_than` with the arguments swapped)."""
    return less_than(y, x, source, method=method, full_range=full_range, transcript=transcript)


def equal(x: Any, y: Any, source: ComparisonMaterial | Dealer, *, method: Method = "circuit",
          transcript: Transcript | None = None) -> np.ndarray:
    """Additive shares of ``[x == y]`` (exact for all ring elements).

    ``source`` is material from :func:`deal_equal` (same ``method``) or a Dealer.
    """
    ring = _source_ring(source)
    xs, ys = _inputs([x, y], ["x", "y"], ring)
    mat = _material(source, xs.shape[1:], "equal", method, True)
    _check_members(xs, mat)
    mat.consume(xs.shape[1:])
    diff = ring.sub(xs, ys)
    if mat.method == "fss":
        return fss_is_zero(diff, mat.core, transcript=transcript)
    return b2a(_zero_bits(diff, mat.core, transcript), mat.dabits, transcript=transcript)

