"""Tests for fedustat.secure.compare: [x < y], msb and [x == y] on additive shares.

Correctness is exhaustive on an 8-bit ring (all 65,536 pairs) for both methods and for
2 and 3 parties, and random plus boundary values on 64 bits. Transcript totals are
compared with hand counts for an 8-bit ring.
"""

from __future__ import annotations

import numpy as np
import pytest

from fedustat.secure.compare import (
    ComparisonMaterial,
    PrimitiveCost,
    comparison_cost,
    deal_equal,
    deal_less_than,
    deal_msb,
    equal,
    greater_than,
    less_than,
    msb,
    tree_levels,
)
from fedustat.secure.dealer import Dealer
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.ring import Ring
from fedustat.secure.sharing import reconstruct, share
from fedustat.secure.transcript import Transcript

CASES = [(2, "circuit"), (2, "fss"), (3, "circuit")]
RING8 = Ring(8)


def all_pairs(ring: Ring) -> tuple[np.ndarray, np.ndarray]:
    values = np.arange(ring.min_signed, ring.max_signed + 1, dtype=np.int64)
    x, y = np.meshgrid(values, values, indexing="ij")
    return x.ravel(), y.ravel()


def opened(shares: np.ndarray, ring: Ring) -> np.ndarray:
    return reconstruct(shares, ring=ring).astype(np.int64)


@pytest.mark.parametrize(("p", "method"), CASES)
def test_less_than_exhaustive_on_8_bits(p: int, method: str) -> None:
    x, y = all_pairs(RING8)
    rng = np.random.default_rng(p)
    xs, ys = share(x, p, rng, ring=RING8), share(y, p, rng, ring=RING8)
    out = less_than(xs, ys, Dealer(p, ring=RING8, rng=rng), method=method)  # type: ignore[arg-type]
    assert np.array_equal(opened(out, RING8), (x < y).astype(np.int64))


@pytest.mark.parametrize(("p", "method"), CASES)
def test_equal_exhaustive_on_8_bits(p: int, method: str) -> None:
    x, y = all_pairs(RING8)
    rng = np.random.default_rng(10 + p)
    xs, ys = share(x, p, rng, ring=RING8), share(y, p, rng, ring=RING8)
    out = equal(xs, ys, Dealer(p, ring=RING8, rng=rng), method=method)  # type: ignore[arg-type]
    assert np.array_equal(opened(out, RING8), (x == y).astype(np.int64))


@pytest.mark.parametrize(("p", "method"), [*CASES, (4, "circuit")])
def test_msb_exhaustive_on_8_bits(p: int, method: str) -> None:
    z = np.repeat(np.arange(-128, 128), 20)      # each value under 20 different masks
    rng = np.random.default_rng(20 + p)
    out = msb(share(z, p, rng, ring=RING8), Dealer(p, ring=RING8, rng=rng),
              method=method)  # type: ignore[arg-type]
    assert np.array_equal(opened(out, RING8), (z < 0).astype(np.int64))


@pytest.mark.parametrize(("p", "method"), CASES)
def test_half_range_comparison_with_headroom_inputs(p: int, method: str) -> None:
    # FixedPoint(headroom=1) keeps |x|, |y| < 2^(l-2), so x - y never overflows.
    fp = FixedPoint(8, 0, headroom=1)
    values = np.arange(fp.min_int, fp.max_int + 1)
    x, y = (v.ravel() for v in np.meshgrid(values, values, indexing="ij"))
    rng = np.random.default_rng(30 + p)
    xs = share(fp.encode(x), p, rng, ring=fp.ring)
    ys = share(fp.encode(y), p, rng, ring=fp.ring)
    out = less_than(xs, ys, Dealer(p, ring=fp.ring, rng=rng), method=method,  # type: ignore[arg-type]
                    full_range=False)
    assert np.array_equal(opened(out, fp.ring), (x < y).astype(np.int64))


def boundary_pairs(ring: Ring, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = ring.min_signed, ring.max_signed
    edges = np.array([lo, lo + 1, lo + 2, -2, -1, 0, 1, 2, hi - 2, hi - 1, hi], dtype=np.int64)
    ex, ey = (v.ravel() for v in np.meshgrid(edges, edges, indexing="ij"))
    rx = rng.integers(lo, hi, n, endpoint=True)
    ry = rng.integers(lo, hi, n, endpoint=True)
    near = np.clip(rx[: n // 4], lo + 1, hi - 1)
    x = np.concatenate([ex, rx, near, near, near])
    y = np.concatenate([ey, ry, near, near + 1, near - 1])     # x = y and |x - y| = 1
    return x, y


@pytest.mark.parametrize(("p", "method"), [*CASES, (5, "circuit")])
def test_64_bit_comparisons_on_random_and_boundary_values(p: int, method: str) -> None:
    ring = Ring(64)
    rng = np.random.default_rng(40 + p)
    x, y = boundary_pairs(ring, rng, 2000)
    xs, ys = share(x, p, rng, ring=ring), share(y, p, rng, ring=ring)
    dealer = Dealer(p, ring=ring, rng=rng)
    kw = {"method": method}
    assert np.array_equal(opened(less_than(xs, ys, dealer, **kw), ring), (x < y))  # type: ignore[arg-type]
    assert np.array_equal(opened(greater_than(xs, ys, dealer, **kw), ring), (x > y))  # type: ignore[arg-type]
    assert np.array_equal(opened(equal(xs, ys, dealer, **kw), ring), (x == y))  # type: ignore[arg-type]
    assert np.array_equal(opened(msb(xs, dealer, **kw), ring), (x < 0))  # type: ignore[arg-type]


def test_half_range_is_wrong_only_where_documented() -> None:
    # Without headroom, x - y overflows for x = max, y = -1: the cheap path must not be
    # used there, and the full-range path gets it right.
    ring = Ring(16)
    x, y = np.array([ring.max_signed]), np.array([-1])
    xs, ys = share(x, 2, 1, ring=ring), share(y, 2, 2, ring=ring)
    dealer = Dealer(2, ring=ring, rng=3)
    assert opened(less_than(xs, ys, dealer, full_range=False), ring).tolist() == [1]
    assert opened(less_than(xs, ys, dealer, full_range=True), ring).tolist() == [0]


def test_predealt_material_and_groups() -> None:
    ring = Ring(32)
    m = 300
    t = Transcript(2, m)
    dealer = Dealer(2, ring=ring, rng=5, transcript=t)
    mat = deal_less_than(dealer, (m, 2), method="fss", full_range=False)
    assert isinstance(mat, ComparisonMaterial)
    rng = np.random.default_rng(5)
    x = rng.integers(-(2**29), 2**29, (m, 2))
    y = rng.integers(-(2**29), 2**29, (m, 2))
    out = less_than(share(x, 2, rng, ring=ring), share(y, 2, rng, ring=ring), mat,
                    method="fss", full_range=False, transcript=t)
    assert out.shape == (2, m, 2)
    assert np.array_equal(opened(out, ring), x < y)
    assert np.all(t.member_bits() == 2 * 32)       # 2 secrets per group, one opening each
    with pytest.raises(RuntimeError, match="must be used once"):
        less_than(share(x, 2, rng, ring=ring), share(y, 2, rng, ring=ring), mat,
                  method="fss", full_range=False)


def test_material_mismatch_and_bad_sources_are_refused() -> None:
    ring = Ring(16)
    dealer = Dealer(2, ring=ring, rng=1)
    xs = share(np.arange(4), 2, 1, ring=ring)
    with pytest.raises(ValueError, match="dealt for equal"):
        less_than(xs, xs, deal_equal(dealer, (4,)))
    with pytest.raises(ValueError, match="method='fss'"):
        msb(xs, deal_msb(dealer, (4,), method="fss"), method="circuit")
    with pytest.raises(TypeError, match="ComparisonMaterial or a Dealer"):
        equal(xs, xs, "dealer")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="method must be"):
        equal(xs, xs, dealer, method="garbled")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two-party construction"):
        less_than(share(np.arange(4), 3, 1, ring=ring), xs[:1].repeat(3, 0),
                  Dealer(3, ring=ring), method="fss")
    with pytest.raises(ValueError, match="groups of 2"):
        msb(share(np.arange(4), 3, 1, ring=ring), deal_msb(dealer, (4,)))
    with pytest.raises(ValueError, match="at least 2 bits"):
        msb(share(np.arange(2), 2, 1, ring=Ring(1)), Dealer(2, ring=Ring(1)))


def test_tree_levels() -> None:
    levels = tree_levels(7)
    assert [lv.step for lv in levels] == [1, 2, 4]
    assert [lv.combine for lv in levels] == [0b0010101, 0b0010001, 0b1]
    assert [lv.keep_p for lv in levels] == [0b0010100, 0b0010000, 0]
    assert [lv.passthrough for lv in levels] == [0b1000000, 0, 0]
    assert tree_levels(1) == ()


def record_and_count(p: int, method: str, op: str, full_range: bool = True
                     ) -> tuple[int, int, int]:
    """Run one comparison per group on 8 bits; return (rounds, online sent, offline
    received) per member from the transcript."""
    m = 5
    t = Transcript(p, m)
    dealer = Dealer(p, ring=RING8, rng=0, transcript=t)
    xs = share(np.arange(m), p, 1, ring=RING8)
    ys = share(np.arange(m)[::-1], p, 2, ring=RING8)
    kw = {"method": method, "transcript": t}
    if op == "msb":
        msb(xs, dealer, **kw)  # type: ignore[arg-type]
    elif op == "equal":
        equal(xs, ys, dealer, **kw)  # type: ignore[arg-type]
    else:
        less_than(xs, ys, dealer, full_range=full_range, **kw)  # type: ignore[arg-type]
    sent, received = t.member_bits("online"), t.member_bits("offline", "received")
    assert np.all(sent == sent[0, 0]) and np.all(received == received[0, 0])
    return t.rounds, int(sent[0, 0]), int(received[0, 0])


def test_transcripts_equal_hand_counts_on_8_bits() -> None:
    # Circuit, l = 8, p = 3. The borrow tree over w = 7 bits has levels with
    # 3 + 2, 2 + 1 and 1 + 0 (G + P) AND gates: A = 9, L = 3.
    # msb: open c (8 bits) + 3 AND rounds (2 bits per gate: 18) + B2A (1 bit), each sent
    # to 2 partners -> 2 * 27 = 54 bits, 1 + 3 + 1 = 5 rounds. Offline: edaBit 16,
    # 9 AND triples 27, daBit 9 -> 52 bits.
    assert record_and_count(3, "circuit", "msb") == (5, 54, 52)
    # Full-range less_than: three msb cores side by side (3 * 26 bits), one overflow AND
    # (2 bits), B2A (1 bit): 2 * 81 = 162 bits in 6 rounds; offline 3 * 43 + 3 + 9 = 141.
    assert record_and_count(3, "circuit", "less_than") == (6, 162, 141)
    # equal: the AND tree over 8 bits has 4 + 2 + 1 = 7 gates in 3 rounds:
    # 2 * (8 + 14 + 1) = 46 bits in 5 rounds; offline 16 + 21 + 9 = 46.
    assert record_and_count(3, "circuit", "equal") == (5, 46, 46)
    # FSS, p = 2: one opening of 8 bits. DCF key on 7 bits: 128 + 7 * (128 + 2 + 8) + 8
    # = 1102 bits, plus shares of r and msb(r): 1118 bits.
    assert record_and_count(2, "fss", "less_than", full_range=False) == (1, 8, 1118)
    # Full range: 3 openings (24 bits) + 2 Beaver rounds (2 * 16 bits) = 56 bits, 3 rounds;
    # offline 3 * 1118 + 2 * 24 = 3402.
    assert record_and_count(2, "fss", "less_than") == (3, 56, 3402)
    # DPF key on 8 bits: 128 + 8 * 130 + 8 = 1176, plus the mask share: 1184.
    assert record_and_count(2, "fss", "equal") == (1, 8, 1184)


@pytest.mark.parametrize("p", [2, 3])
@pytest.mark.parametrize("op", ["msb", "less_than", "equal"])
def test_comparison_cost_matches_the_transcript(p: int, op: str) -> None:
    for method in (["circuit", "fss"] if p == 2 else ["circuit"]):
        for full in (True, False):
            cost = comparison_cost(op, bits=8, group_size=p, method=method,  # type: ignore[arg-type]
                                   full_range=full)
            assert (cost.rounds, cost.online_bits, cost.offline_bits) == record_and_count(
                p, method, op, full)


def test_documented_64_bit_costs() -> None:
    assert comparison_cost("msb", bits=64) == PrimitiveCost(8, 301, 547)
    assert comparison_cost("less_than", bits=64).rounds == 9
    assert comparison_cost("less_than", bits=64).online_bits == 903
    assert comparison_cost("equal", bits=64).online_bits == 191
    fss = comparison_cost("less_than", bits=64, method="fss", full_range=False)
    assert fss == PrimitiveCost(1, 64, 12_414 + 128)
