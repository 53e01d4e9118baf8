"""Tests for fedustat.secure.sharing (additive and XOR sharing) and the transcript.

Uniformity is checked with chi-square tests on 256 bins (the low 8 bits and the high 8
bits of a share) at significance 1e-6; every test is seeded.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedustat.protocols.base import Cost
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.ring import Ring
from fedustat.secure.sharing import (
    Material,
    add_public,
    mul_public,
    open_shares,
    open_xor,
    public_shares,
    reconstruct,
    share,
    xor_public,
    xor_reconstruct,
    xor_share,
)
from fedustat.secure.transcript import Transcript

ALPHA = 1e-6
N_DRAWS = 40_000


def chi_square_uniform_pvalue(values: np.ndarray, n_bins: int = 256) -> float:
    counts = np.bincount(values.astype(np.int64), minlength=n_bins)
    return float(stats.chisquare(counts).pvalue)


@pytest.mark.parametrize("p", [1, 2, 3, 7])
@pytest.mark.parametrize("bits", [8, 40, 64])
def test_share_reconstruct_round_trip(p: int, bits: int) -> None:
    ring = Ring(bits)
    rng = np.random.default_rng(bits * 10 + p)
    secrets = ring.random(500, rng)
    shares = share(secrets, p, rng, ring=ring)
    assert shares.shape == (p, 500) and shares.dtype == np.uint64
    assert np.array_equal(reconstruct(shares, ring=ring), secrets)


@pytest.mark.parametrize("p", [2, 3, 5])
def test_fixed_point_values_survive_sharing(p: int) -> None:
    fp = FixedPoint()
    values = np.array([fp.min_value, -1.5, -fp.resolution, 0.0, fp.resolution, 3.25,
                       fp.max_value])
    shares = share(fp.encode(values), p, p, ring=fp.ring)
    assert np.array_equal(fp.decode(reconstruct(shares, ring=fp.ring)), values)


def test_groups_one_secret_per_group_and_several_per_group() -> None:
    ring = Ring(64)
    rng = np.random.default_rng(2)
    per_group = ring.from_signed(rng.integers(-(2**40), 2**40, 1000))      # m = 1000 groups
    shares = share(per_group, 2, rng, ring=ring)
    assert shares.shape == (2, 1000)
    assert np.array_equal(ring.to_signed(reconstruct(shares, ring=ring)),
                          ring.to_signed(per_group))
    block = ring.from_signed(rng.integers(-5, 5, (1000, 4)))                # 4 per group
    shares = share(block, 3, rng, ring=ring)
    assert shares.shape == (3, 1000, 4)
    assert np.array_equal(reconstruct(shares, ring=ring), block)


@settings(deadline=None, max_examples=100, derandomize=True)
@given(values=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=20),
       p=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_share_round_trip_property(values: list[int], p: int, seed: int) -> None:
    ring = Ring(64)
    secrets = np.array(values, dtype=np.int64)
    shares = share(secrets, p, seed, ring=ring)
    assert np.array_equal(ring.to_signed(reconstruct(shares, ring=ring)), secrets)


@pytest.mark.parametrize("bits", [40, 64])
@pytest.mark.parametrize("secret", ["zero", "max"])
def test_every_single_share_is_uniform(bits: int, secret: str) -> None:
    ring = Ring(bits)
    value = 0 if secret == "zero" else ring.max_signed
    shares = share(np.full(N_DRAWS, value, dtype=np.int64), 3, 11, ring=ring)
    for j in range(3):
        low = np.bitwise_and(shares[j], np.uint64(0xFF))
        high = np.right_shift(shares[j], np.uint64(bits - 8))
        assert chi_square_uniform_pvalue(low) > ALPHA
        assert chi_square_uniform_pvalue(high) > ALPHA


def test_xor_share_round_trip_and_uniformity() -> None:
    rng = np.random.default_rng(4)
    words = np.full(N_DRAWS, 0xDEADBEEF, dtype=np.uint64)
    shares = xor_share(words, 3, rng, width=40)
    assert np.array_equal(xor_reconstruct(shares), words)
    assert int(shares.max()) < 1 << 40
    for j in range(3):
        assert chi_square_uniform_pvalue(np.bitwise_and(shares[j], np.uint64(0xFF))) > ALPHA
        assert chi_square_uniform_pvalue(np.right_shift(shares[j], np.uint64(32))) > ALPHA


def test_local_operations_with_public_values() -> None:
    ring = Ring(16)
    x = np.array([5, -7, 300], dtype=np.int64)
    s = share(x, 3, 1, ring=ring)
    assert np.array_equal(ring.to_signed(reconstruct(add_public(s, -10, ring=ring), ring=ring)),
                          x - 10)
    assert np.array_equal(ring.to_signed(reconstruct(mul_public(s, -3, ring=ring), ring=ring)),
                          x * -3)
    b = xor_share(np.array([0b1010, 0b0110], dtype=np.uint64), 3, 2, width=4)
    assert np.array_equal(xor_reconstruct(xor_public(b, np.uint64(0b1111))), [0b0101, 0b1001])
    pub = public_shares(7, 4, (3,), ring=ring)
    assert pub.shape == (4, 3) and np.array_equal(reconstruct(pub, ring=ring), [7, 7, 7])


def test_open_records_one_round_and_the_bits() -> None:
    ring = Ring(32)
    t = Transcript(3, 10)
    x = share(np.arange(10), 3, 1, ring=ring)
    y = share(np.arange(10, 20), 3, 2, ring=ring)
    ox, oy = open_shares(x, y, ring=ring, transcript=t)
    assert np.array_equal(ox, np.arange(10)) and np.array_equal(oy, np.arange(10, 20))
    assert t.rounds == 1
    # Each member sends its two 32-bit shares to the 2 other members of its group.
    assert np.all(t.member_bits("online", "sent") == 2 * 2 * 32)
    assert np.all(t.member_bits("online", "received") == 2 * 2 * 32)
    assert t.total_bits("online") == 3 * 10 * 128
    bits = xor_share(np.full(10, 0b101, dtype=np.uint64), 3, 3, width=3)
    (opened,) = open_xor(bits, bits_per_element=3, transcript=t)
    assert np.all(opened == 0b101) and t.rounds == 2
    assert np.all(t.member_bits("online", "sent") == 128 + 2 * 3)


def test_shares_must_match_the_transcript_layout() -> None:
    ring = Ring(32)
    with pytest.raises(ValueError, match="group_size=2"):
        open_shares(share(np.arange(4), 3, 1, ring=ring), ring=ring, transcript=Transcript(2, 4))
    with pytest.raises(ValueError, match="must have length 5"):
        open_shares(share(np.arange(4), 2, 1, ring=ring), ring=ring, transcript=Transcript(2, 5))


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(TypeError, match="integer array of ring elements"):
        reconstruct(np.array([[1.5, 2.0]]))
    with pytest.raises(ValueError, match="n_shares must be >= 1"):
        share([1, 2], 0)
    with pytest.raises(TypeError, match="integers to enter the ring"):
        share([1.5], 2)
    with pytest.raises(ValueError, match="width must be <= 64"):
        xor_share([1], 2, width=65)


def test_material_is_single_use() -> None:
    class Dummy(Material):
        def __init__(self) -> None:
            self.shape, self.ring, self.n_shares = (3,), Ring(8), 2

    mat = Dummy()
    with pytest.raises(ValueError, match=r"dealt for secrets of shape \(3,\), got \(4,\)"):
        mat.consume((4,))
    mat.consume((3,))
    with pytest.raises(RuntimeError, match="must be used once"):
        mat.consume((3,))


# -- transcript -------------------------------------------------------------------------
def test_transcript_views_parallel_rounds_and_cost() -> None:
    # Groups {0,1}, {1,2}, {2,0}: party 1 is in two groups.
    ids = np.array([[0, 1, 2], [1, 2, 0]])
    t = Transcript(party_ids=ids)
    with t.parallel() as par:
        with par.branch():
            t.record_open("a", 10)                   # every member sends 10 bits, 1 round
        with par.branch():
            t.record_open("b", 1)
            t.record_open("c", 1)                    # 2 rounds: the longest branch
    assert t.rounds == 2
    t.record_deal("deal", 7)
    everyone = t.view(party_ids=np.arange(3).reshape(3, 1))
    everyone.record_to_server("agg", 40)
    assert t.rounds == 3
    bits = t.party_bits(3)
    # Each party is in two groups: 2 * (10 + 1 + 1) within groups, plus 40 to the server.
    assert np.array_equal(bits.online_sent, [64, 64, 64])
    assert np.array_equal(bits.online_received, [24, 24, 24])
    assert np.array_equal(bits.offline_received, [14, 14, 14])
    cost = t.cost(3, server_operations=5)
    assert cost == Cost(bits_per_party=64.0, max_bits_per_party=64,
                        bits_received_per_party=24.0, total_bits=3 * 64, rounds=3,
                        server_operations=5, offline_bits=6 * 7)
    assert t.bits_by_kind()[("offline", "deal")] == 42
    assert everyone.member_bits("online").ravel().tolist() == [40, 40, 40]


def test_a_message_can_join_the_previous_round() -> None:
    t = Transcript(2)
    t.record(phase="online", kind="first", sent=8, received=8, new_round=False)
    assert t.rounds == 1          # the very first message always opens a round
    t.record(phase="online", kind="alongside", sent=8, received=8, new_round=False)
    assert t.rounds == 1 and [r.round for r in t.records] == [0, 0]
    assert t.total_bits("online") == 4 * 8


def test_transcript_validation() -> None:
    with pytest.raises(ValueError, match="2-d integer array"):
        Transcript(party_ids=np.arange(3))
    t = Transcript(2, 3)
    with pytest.raises(ValueError, match="does not broadcast"):
        t.record(phase="online", kind="x", sent=np.ones(4), received=0)
    with pytest.raises(ValueError, match="phase must be"):
        t.record(phase="later", kind="x", sent=0, received=0)  # type: ignore[arg-type]
    t.record_open("x", 1)
    with pytest.raises(ValueError, match="n_parties=2"):
        t.party_bits(2)
