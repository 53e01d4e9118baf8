"""Tests for fedustat.secure.ring (Z_{2^l} on uint64) and fedustat.secure.fixedpoint."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedustat.privacy.noise import SimulationNoise
from fedustat.secure.fixedpoint import DEFAULT_BITS, DEFAULT_FRAC_BITS, FixedPoint
from fedustat.secure.ring import DEFAULT_RING, Ring, SystemRandomness, as_share_rng, random_words

BITS = [1, 2, 8, 31, 40, 63, 64]


@settings(deadline=None, max_examples=200, derandomize=True)
@given(bits=st.sampled_from(BITS), a=st.integers(-(2**70), 2**70), b=st.integers(-(2**70), 2**70))
def test_ring_arithmetic_matches_python_integers(bits: int, a: int, b: int) -> None:
    ring = Ring(bits)
    mod = 1 << bits
    ea, eb = ring.reduce(np.array([a], dtype=object)), ring.reduce(np.array([b], dtype=object))
    assert int(ea[0]) == a % mod
    assert int(ring.add(ea, eb)[0]) == (a + b) % mod
    assert int(ring.sub(ea, eb)[0]) == (a - b) % mod
    assert int(ring.mul(ea, eb)[0]) == (a * b) % mod
    assert int(ring.neg(ea)[0]) == (-a) % mod
    signed = (a % mod) - mod if a % mod >= mod // 2 else a % mod
    assert int(ring.to_signed(ea)[0]) == signed
    assert int(ring.msb(ea)[0]) == int(signed < 0)


@pytest.mark.parametrize("bits", BITS)
def test_signed_round_trip_at_the_boundaries(bits: int) -> None:
    ring = Ring(bits)
    values = np.array([ring.min_signed, ring.min_signed + 1, -1, 0, 1, ring.max_signed - 1,
                       ring.max_signed], dtype=np.int64)
    values = np.clip(values, ring.min_signed, ring.max_signed)
    assert np.array_equal(ring.to_signed(ring.from_signed(values)), values)
    assert ring.reduce(values).dtype == np.uint64
    assert int(ring.reduce(values).max()) < ring.modulus


def test_ring_sum_wraps_modulo_two_to_the_l() -> None:
    ring = Ring(8)
    assert int(ring.sum(np.array([200, 100, 10], dtype=np.uint64))) == 310 % 256
    full = DEFAULT_RING.sum(np.array([2**63, 2**63, 5], dtype=np.uint64))
    assert int(full) == 5


def test_ring_keeps_python_integers_exact() -> None:
    # NumPy turns [2**63, -1] into float64; the ring keeps the integers exact.
    assert DEFAULT_RING.reduce([2**63, -1]).tolist() == [2**63, 2**64 - 1]
    assert DEFAULT_RING.reduce(2**64 + 5).tolist() == 5
    assert int(Ring(8).to_signed(np.uint64(200))) == -56


def test_ring_refuses_floats_and_bad_sizes() -> None:
    with pytest.raises(TypeError, match="encode real numbers with FixedPoint"):
        Ring(16).reduce(np.array([1.5]))
    with pytest.raises(ValueError, match="bits must be <= 64"):
        Ring(65)
    with pytest.raises(ValueError, match="bits must be >= 1"):
        Ring(0)


def test_random_elements_are_in_the_ring_and_reproducible() -> None:
    ring = Ring(12)
    a = ring.random(1000, 3)
    b = ring.random(1000, 3)
    assert np.array_equal(a, b)
    assert int(a.max()) < 4096
    assert random_words((2, 3), 1).shape == (2, 3)


def test_share_randomness_sources() -> None:
    gen = np.random.default_rng(5)
    assert as_share_rng(gen) is gen
    assert as_share_rng(SimulationNoise(gen)) is gen
    assert isinstance(as_share_rng("os"), SystemRandomness)
    words = SystemRandomness().integers(0, 1 << 64, size=(3, 4), dtype=np.uint64)
    assert words.shape == (3, 4) and words.dtype == np.uint64
    with pytest.raises(ValueError, match="uniform 64-bit words"):
        SystemRandomness().integers(0, 10, size=3)
    with pytest.raises(ValueError, match="rng must be a seed"):
        as_share_rng("secrets")


# -- fixed point ---------------------------------------------------------------------------
def test_fixed_point_defaults_follow_paper_002() -> None:
    fp = FixedPoint()
    assert (fp.bits, fp.frac_bits) == (DEFAULT_BITS, DEFAULT_FRAC_BITS) == (40, 14)
    # 002 Sec. 6.1: l = 40, c = 14 represents [-2^25, 2^25).
    assert fp.min_value == -(2.0**25)
    assert fp.max_value == 2.0**25 - 2.0**-14
    assert fp.ring == Ring(40)


@pytest.mark.parametrize("fp", [FixedPoint(), FixedPoint(64, 16), FixedPoint(16, 4),
                                FixedPoint(40, 14, headroom=1)])
def test_fixed_point_round_trip_including_boundaries(fp: FixedPoint) -> None:
    rng = np.random.default_rng(0)
    grid = rng.integers(fp.min_int, fp.max_int, 1000, endpoint=True) / fp.scale
    boundary = np.array([fp.min_value, fp.min_value + fp.resolution, -fp.resolution, 0.0,
                         fp.resolution, fp.max_value - fp.resolution, fp.max_value])
    values = np.concatenate([grid, boundary])
    assert np.array_equal(fp.decode(fp.encode(values)), values)


def test_fixed_point_rounds_to_the_nearest_grid_point() -> None:
    fp = FixedPoint(32, 8)
    x = np.random.default_rng(1).uniform(-1000, 1000, 5000)
    err = np.abs(fp.decode(fp.encode(x)) - x)
    assert err.max() <= fp.resolution / 2


@pytest.mark.parametrize("value", [2.0**25, -(2.0**25) - 2.0**-14, 1e30, -1e30])
def test_fixed_point_overflow_raises_and_names_the_range(value: float) -> None:
    with pytest.raises(OverflowError, match=r"outside the fixed-point range \[-33554432, "):
        FixedPoint().encode([0.0, value])


def test_fixed_point_headroom_halves_the_range() -> None:
    fp = FixedPoint(40, 14, headroom=1)
    assert fp.max_value == 2.0**24 - 2.0**-14
    with pytest.raises(OverflowError, match="headroom=1"):
        fp.encode(2.0**24)


def test_fixed_point_rejects_nan_and_bad_parameters() -> None:
    with pytest.raises(ValueError, match="NaN or infinite"):
        FixedPoint().encode([np.nan])
    with pytest.raises(ValueError, match="frac_bits must be < bits"):
        FixedPoint(8, 8)
    with pytest.raises(ValueError, match="headroom must be < bits - frac_bits"):
        FixedPoint(8, 4, headroom=4)
    with pytest.raises(ValueError, match="bits must be <= 64"):
        FixedPoint(80, 4)


def test_encode_int_checks_the_range() -> None:
    fp = FixedPoint(16, 4)
    assert np.array_equal(fp.ring.to_signed(fp.encode_int(np.array([-32768, 32767]))),
                          [-32768, 32767])
    with pytest.raises(OverflowError, match="integer units"):
        fp.encode_int(np.array([32768]))
    with pytest.raises(TypeError, match="must be integers"):
        fp.encode_int(np.array([1.0]))


def test_product_format_and_check() -> None:
    fp = FixedPoint(64, 14)
    ring = fp.ring
    x, y = np.array([3.25, -2.5, 1000.0]), np.array([-1.5, -4.0, 0.125])
    prod = ring.mul(fp.encode(x), fp.encode(y))
    assert np.array_equal(fp.product_format().decode(prod), x * y)
    fp.check_product(2.0**17, 2.0**17)
    with pytest.raises(OverflowError, match="do not fit the product range"):
        fp.check_product(2.0**18, 2.0**17)
    with pytest.raises(OverflowError, match="does not fit in l=16 bits"):
        FixedPoint(16, 8).product_format()
