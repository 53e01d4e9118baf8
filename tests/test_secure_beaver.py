"""Tests for fedustat.secure.beaver and fedustat.secure.dealer (Beaver products, AND gates,
B2A), with the transcript counts checked against hand counts."""

from __future__ import annotations

import numpy as np
import pytest

from fedustat.protocols.base import Cost
from fedustat.secure.beaver import and_gates, b2a, mul, mul_many
from fedustat.secure.dealer import AndTriples, BeaverTriples, Dealer
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.ring import Ring
from fedustat.secure.sharing import reconstruct, share, xor_reconstruct, xor_share
from fedustat.secure.transcript import Transcript


def signed_values(ring: Ring, n: int, rng: np.random.Generator) -> np.ndarray:
    """Random signed values plus the boundaries of the signed range."""
    lo, hi = ring.min_signed, ring.max_signed
    edges = np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi], dtype=np.int64)
    return np.concatenate([rng.integers(lo, hi, n, endpoint=True), edges])


@pytest.mark.parametrize("p", [2, 3, 5])
@pytest.mark.parametrize("bits", [8, 40, 64])
def test_product_is_correct_on_random_negative_and_boundary_values(p: int, bits: int) -> None:
    ring = Ring(bits)
    rng = np.random.default_rng(bits + p)
    x = signed_values(ring, 2000, rng)
    y = np.concatenate([signed_values(ring, 2000, rng)[:-7], x[-7:][::-1]])
    dealer = Dealer(p, ring=ring, rng=rng)
    z = mul(share(x, p, rng, ring=ring), share(y, p, rng, ring=ring), dealer)
    expected = [(int(a) * int(b)) % ring.modulus for a, b in zip(x, y, strict=True)]
    assert reconstruct(z, ring=ring).tolist() == expected


def test_triples_are_correct_and_single_use() -> None:
    ring = Ring(64)
    dealer = Dealer(3, ring=ring, rng=1)
    tri = dealer.beaver_triples((100,))
    a, b, c = (reconstruct(v, ring=ring) for v in (tri.a, tri.b, tri.c))
    assert np.array_equal(c, ring.mul(a, b))
    x = share(np.arange(100), 3, 2, ring=ring)
    mul(x, x, tri)
    with pytest.raises(RuntimeError, match="must be used once"):
        mul(x, x, tri)
    with pytest.raises(ValueError, match="dealt for 2"):
        mul(x, x, Dealer(2, ring=ring, rng=1).beaver_triples((100,)))
    with pytest.raises(TypeError, match="BeaverTriples or a Dealer"):
        mul(x, x, "triples")  # type: ignore[arg-type]


def test_products_broadcast_and_batch_in_one_round() -> None:
    ring = Ring(32)
    t = Transcript(2, 50)
    dealer = Dealer(2, ring=ring, rng=3, transcript=t)
    rng = np.random.default_rng(3)
    x = rng.integers(-1000, 1000, (50, 4))
    y = rng.integers(-1000, 1000, (50, 1))
    w = rng.integers(-1000, 1000, 50)
    xs, ys, ws = (share(v, 2, rng, ring=ring) for v in (x, y, w))
    z1, z2 = mul_many([(xs, ys, dealer), (ws, ws, dealer)], transcript=t)
    assert np.array_equal(ring.to_signed(reconstruct(z1, ring=ring)), x * y)
    assert np.array_equal(ring.to_signed(reconstruct(z2, ring=ring)), w * w)
    assert t.rounds == 1
    # Per member: (4 + 1) products, 2 opened elements of 32 bits each, to 1 other member.
    assert np.all(t.member_bits("online") == 5 * 2 * 32)
    assert np.all(t.member_bits("offline", "received") == 5 * 3 * 32)


def test_multiplication_transcript_equals_the_hand_count() -> None:
    # 4 groups of 3 parties, 16-bit ring, one product per group.
    ring = Ring(16)
    ids = np.array([[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]])
    t = Transcript(party_ids=ids)
    dealer = Dealer(3, ring=ring, rng=0, transcript=t)
    x = share(np.array([3, -4, 5, 32767]), 3, 1, ring=ring)
    y = share(np.array([-7, -8, 0, -32768]), 3, 2, ring=ring)
    z = mul(x, y, dealer, transcript=t)
    assert ring.to_signed(reconstruct(z, ring=ring)).tolist() == [-21, 32, 0, -32768]
    # Online: each member broadcasts d and e (2 x 16 bits) to its 2 partners: 64 bits sent,
    # 64 received; one round. Offline: each member receives a, b, c: 48 bits; the dealer
    # sends 12 x 48 bits.
    assert t.rounds == 1
    assert t.cost(12) == Cost(bits_per_party=64.0, max_bits_per_party=64,
                              bits_received_per_party=64.0, total_bits=12 * 64, rounds=1,
                              offline_bits=12 * 48)


@pytest.mark.parametrize("p", [2, 4])
def test_and_gates_on_packed_words(p: int) -> None:
    rng = np.random.default_rng(p)
    dealer = Dealer(p, rng=rng)
    active = 0x0F0F_0000_FFFF_0001
    x = rng.integers(0, 2**63, 500, dtype=np.uint64)
    y = rng.integers(0, 2**63, 500, dtype=np.uint64)
    xs, ys = xor_share(x, p, rng), xor_share(y, p, rng)
    t = Transcript(p)
    (z,) = and_gates([(xs, ys, dealer)], active=[active], transcript=t)
    assert np.array_equal(xor_reconstruct(z), x & y & np.uint64(active))
    # 2 opened bits per active bit per word, to p - 1 members.
    assert t.member_bits()[0, 0] == (p - 1) * 2 * 500 * bin(active).count("1")
    tri = dealer.and_triples((3,), 0b1011)
    assert isinstance(tri, AndTriples) and tri.bits_per_word == 3
    a, b, c = (xor_reconstruct(v) for v in (tri.a, tri.b, tri.c))
    assert np.array_equal(c, a & b) and int((a | b).max()) <= 0b1011
    with pytest.raises(ValueError, match="active masks are needed"):
        and_gates([(xs, ys, dealer)])


@pytest.mark.parametrize("p", [2, 3])
def test_b2a_converts_xor_bits_to_additive_shares(p: int) -> None:
    ring = Ring(64)
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2, 1000, dtype=np.uint64)
    xs = xor_share(bits, p, rng, width=1)
    t = Transcript(p)
    out = b2a(xs, Dealer(p, ring=ring, rng=rng), transcript=t)
    assert np.array_equal(reconstruct(out, ring=ring), bits)
    assert t.rounds == 1 and t.member_bits()[0, 0] == (p - 1) * 1000


def test_fixed_point_product_decodes_with_the_product_format() -> None:
    fp = FixedPoint(64, 14)
    rng = np.random.default_rng(8)
    x = np.round(rng.uniform(-100, 100, 300), 3)
    y = np.round(rng.uniform(-100, 100, 300), 3)
    fp.check_product(100, 100)
    xs = share(fp.encode(x), 2, rng, ring=fp.ring)
    ys = share(fp.encode(y), 2, rng, ring=fp.ring)
    z = mul(xs, ys, Dealer(2, ring=fp.ring, rng=rng))
    exact = fp.decode(fp.encode(x)) * fp.decode(fp.encode(y))
    assert np.array_equal(fp.product_format().decode(reconstruct(z, ring=fp.ring)), exact)


def test_a_comparison_bit_times_a_fixed_point_value_needs_no_rescaling() -> None:
    fp = FixedPoint()
    rng = np.random.default_rng(9)
    x = np.array([-2.5, 0.75, 1000.125])
    bit = np.array([1, 0, 1])
    z = mul(share(fp.encode(x), 2, rng, ring=fp.ring), share(bit, 2, rng, ring=fp.ring),
            Dealer(2, ring=fp.ring, rng=rng))
    assert np.array_equal(fp.decode(reconstruct(z, ring=fp.ring)), x * bit)


def test_dealer_validation_and_randomness_sources() -> None:
    with pytest.raises(ValueError, match="group_size=3"):
        Dealer(2, transcript=Transcript(3))
    with pytest.raises(TypeError, match="ring must be a Ring"):
        Dealer(2, ring=64)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty 64-bit mask"):
        Dealer(2).and_triples((3,), 0)
    # The OS CSPRNG deals valid triples too.
    tri = Dealer(2, rng="os").beaver_triples(10)
    assert isinstance(tri, BeaverTriples)
    ring = tri.ring
    assert np.array_equal(reconstruct(tri.c, ring=ring),
                          ring.mul(reconstruct(tri.a, ring=ring), reconstruct(tri.b, ring=ring)))
    # Same seed, same triples.
    t1, t2 = Dealer(2, rng=5).beaver_triples(4), Dealer(2, rng=5).beaver_triples(4)
    assert np.array_equal(t1.c, t2.c)
