"""Tests for fedustat.secure.dcf: DCF and DPF keys (Gen/Eval) and the FSS gates.

Eval is checked exhaustively on 8-bit domains for several thresholds, and on random
and boundary points of 63- and 64-bit domains. Key secrecy is checked statistically:
one server's output share is uniform (chi-square on 256 bins, significance 1e-6)
whatever the function value, and keys for the same threshold differ.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedustat.secure.dcf import (
    LAMBDA,
    FssKey,
    FssMsbMaterial,
    dcf_eval,
    dcf_gen,
    dpf_eval,
    dpf_gen,
)
from fedustat.secure.dealer import Dealer
from fedustat.secure.fss_gates import fss_is_zero, fss_msb
from fedustat.secure.ring import Ring
from fedustat.secure.sharing import reconstruct, share
from fedustat.secure.transcript import Transcript

ALPHA = 1e-6
ALPHAS_8 = np.array([0, 1, 2, 77, 127, 128, 129, 200, 254, 255], dtype=np.uint64)


def both(kind: str, k0, k1, x, ring: Ring) -> np.ndarray:  # type: ignore[no-untyped-def]
    ev = dcf_eval if kind == "dcf" else dpf_eval
    return ring.add(ev(0, k0, x), ev(1, k1, x))


@pytest.mark.parametrize("out_bits", [8, 64])
def test_dcf_exhaustive_on_an_8_bit_domain(out_bits: int) -> None:
    ring = Ring(out_bits)
    beta = ring.reduce(np.array([1, 5, -1, 0, 3, 2**7, -(2**7), 9, 1, 255]))
    k0, k1 = dcf_gen(ALPHAS_8, beta, domain_bits=8, ring=ring, rng=1)
    x = np.tile(np.arange(256, dtype=np.uint64), (ALPHAS_8.size, 1))
    expected = np.where(x < ALPHAS_8[:, None], beta[:, None], np.uint64(0))
    assert np.array_equal(both("dcf", k0, k1, x, ring), expected)


def test_dpf_exhaustive_on_an_8_bit_domain() -> None:
    ring = Ring(64)
    k0, k1 = dpf_gen(ALPHAS_8, 7, domain_bits=8, ring=ring, rng=2)
    x = np.tile(np.arange(256, dtype=np.uint64), (ALPHAS_8.size, 1))
    expected = np.where(x == ALPHAS_8[:, None], 7, 0).astype(np.uint64)
    assert np.array_equal(both("dpf", k0, k1, x, ring), expected)


@pytest.mark.parametrize("n", [1, 5, 10])
def test_small_domains_exhaustive(n: int) -> None:
    ring = Ring(16)
    # Every point of the domain; every threshold for small n, every 7th plus the ends for 10.
    alphas = np.unique(np.r_[np.arange(0, 2**n, 1 if n < 10 else 7), 2**n - 1]).astype(np.uint64)
    x = np.tile(np.arange(2**n, dtype=np.uint64), (alphas.size, 1))
    k0, k1 = dcf_gen(alphas, 3, domain_bits=n, ring=ring, rng=n)
    assert np.array_equal(both("dcf", k0, k1, x, ring), np.where(x < alphas[:, None], 3, 0))
    k0, k1 = dpf_gen(alphas, 3, domain_bits=n, ring=ring, rng=n)
    assert np.array_equal(both("dpf", k0, k1, x, ring), np.where(x == alphas[:, None], 3, 0))


@pytest.mark.parametrize("n", [63, 64])
def test_wide_domains_on_random_and_boundary_points(n: int) -> None:
    ring = Ring(64)
    top = (1 << n) - 1
    rng = np.random.default_rng(n)
    edges = [0, 1, 2, 1 << (n - 1), (1 << (n - 1)) - 1, top - 1, top]
    alphas = np.array(edges + [int(v) for v in rng.integers(0, 2**63, 200)], dtype=np.uint64)
    alphas &= np.uint64(top)
    cols = [np.zeros_like(alphas), alphas - np.minimum(alphas, 1), alphas,
            np.minimum(alphas, np.uint64(top - 1)) + np.uint64(1), np.full_like(alphas, top),
            rng.integers(0, 2**63, alphas.size, dtype=np.uint64) & np.uint64(top)]
    x = np.stack(cols, axis=1)
    k0, k1 = dcf_gen(alphas, 1, domain_bits=n, ring=ring, rng=rng)
    assert np.array_equal(both("dcf", k0, k1, x, ring), (x < alphas[:, None]).astype(np.uint64))
    k0, k1 = dpf_gen(alphas, 1, domain_bits=n, ring=ring, rng=rng)
    assert np.array_equal(both("dpf", k0, k1, x, ring), (x == alphas[:, None]).astype(np.uint64))


def test_keys_are_not_the_input() -> None:
    ring = Ring(64)
    alpha = np.full(3, 12345, dtype=np.uint64)
    a0, a1 = dcf_gen(alpha, 1, domain_bits=32, ring=ring, rng=1)
    b0, _ = dcf_gen(alpha, 1, domain_bits=32, ring=ring, rng=2)
    # Two keys for the same alpha share no seed or correction word at any level, and the
    # three keys for one alpha within a call differ from each other too.
    assert np.all(a0.seed != b0.seed)
    assert np.all(np.any(a0.cw_seed != b0.cw_seed, axis=-1))
    assert np.all(a0.cw_value != b0.cw_value)
    assert np.all(a0.cw_out != b0.cw_out)
    assert len({tuple(a0.seed[i]) for i in range(3)}) == 3
    assert np.all(a0.seed != a1.seed)
    # Same seed, same keys (reproducible simulation).
    c0, _ = dcf_gen(alpha, 1, domain_bits=32, ring=ring, rng=1)
    assert np.array_equal(c0.cw_seed, a0.cw_seed) and np.array_equal(c0.cw_out, a0.cw_out)


@pytest.mark.parametrize("kind", ["dcf", "dpf"])
def test_one_servers_output_share_is_uniform(kind: str) -> None:
    ring = Ring(64)
    n_keys = 40_000
    alpha = np.full(n_keys, 100, dtype=np.uint64)
    gen, ev = (dcf_gen, dcf_eval) if kind == "dcf" else (dpf_gen, dpf_eval)
    k0, k1 = gen(alpha, 1, domain_bits=8, ring=ring, rng=3)
    for x in (50, 100, 200):     # f = 1 and f = 0 for the DCF; on and off the point
        for party, key in ((0, k0), (1, k1)):
            out = ev(party, key, np.full(n_keys, x, dtype=np.uint64))
            for chunk in (np.bitwise_and(out, np.uint64(0xFF)), np.right_shift(out, np.uint64(56))):
                counts = np.bincount(chunk.astype(np.int64), minlength=256)
                assert stats.chisquare(counts).pvalue > ALPHA


def test_key_sizes() -> None:
    ring = Ring(64)
    k0, _ = dcf_gen(np.array([5], dtype=np.uint64), 1, domain_bits=63, ring=ring, rng=0)
    assert k0.bits_per_key == LAMBDA + 63 * (LAMBDA + 2 + 64) + 64 == 12_414
    # 002 App. A.5.1 quotes 4 l (lambda + 1) = 33,024 bits per key for l = 64.
    assert k0.bits_per_key < 4 * 64 * (LAMBDA + 1)
    d0, _ = dpf_gen(np.array([5], dtype=np.uint64), 1, domain_bits=64, ring=ring, rng=0)
    assert d0.bits_per_key == LAMBDA + 64 * (LAMBDA + 2) + 64 == 8_512
    assert len(k0) == 1


def test_fss_msb_is_right_with_and_without_wrap_around() -> None:
    ring = Ring(8)
    z = np.repeat(np.arange(256, dtype=np.uint64), 40)
    rng = np.random.default_rng(4)
    mat = Dealer(2, ring=ring, rng=rng).fss_msb(z.shape)
    r = reconstruct(mat.mask, ring=ring).astype(np.int64)
    wraps = z.astype(np.int64) + r >= 256
    assert 0.3 < wraps.mean() < 0.7          # both cases well represented
    assert np.array_equal(reconstruct(mat.mask_msb, ring=ring), ring.msb(r))
    out = reconstruct(fss_msb(share(z, 2, rng, ring=ring), mat), ring=ring)
    expected = ring.msb(z)
    assert np.array_equal(out[wraps], expected[wraps])
    assert np.array_equal(out[~wraps], expected[~wraps])


def test_fss_is_zero_and_its_transcript() -> None:
    ring = Ring(64)
    rng = np.random.default_rng(5)
    z = np.concatenate([np.zeros(50, dtype=np.int64), rng.integers(-3, 4, 200),
                        [ring.min_signed, ring.max_signed, 1, -1]])
    t = Transcript(2, z.size)
    dealer = Dealer(2, ring=ring, rng=rng, transcript=t)
    out = fss_is_zero(share(z, 2, rng, ring=ring), dealer, transcript=t)
    assert np.array_equal(reconstruct(out, ring=ring), (z == 0).astype(np.uint64))
    assert t.rounds == 1 and np.all(t.member_bits() == 64)
    dpf_bits = LAMBDA + 64 * (LAMBDA + 2) + 64
    assert np.all(t.member_bits("offline", "received") == dpf_bits + 64)


def test_validation() -> None:
    ring = Ring(16)
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 2\^8\)"):
        dcf_gen(np.array([256]), 1, domain_bits=8, ring=ring)
    with pytest.raises(ValueError, match="negative"):
        dcf_gen(np.array([-1]), 1, domain_bits=8, ring=ring)
    with pytest.raises(ValueError, match="domain_bits must be <= 64"):
        dcf_gen(np.array([1]), 1, domain_bits=65, ring=ring)
    with pytest.raises(ValueError, match="beta must be a scalar or have one value per alpha"):
        dcf_gen(np.array([1, 2]), np.array([1, 2, 3]), domain_bits=8, ring=ring)
    k0, _ = dcf_gen(np.array([1, 2]), 1, domain_bits=8, ring=ring, rng=0)
    with pytest.raises(ValueError, match="belongs to party 0"):
        dcf_eval(1, k0, np.array([0, 0]))
    with pytest.raises(ValueError, match="key axis first"):
        dcf_eval(0, k0, np.array([0, 0, 0]))
    with pytest.raises(ValueError, match="needs a DPF key"):
        dpf_eval(0, k0, np.array([0, 0]))
    with pytest.raises(TypeError, match="integers"):
        dcf_eval(0, k0, np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="two-party construction"):
        Dealer(3, ring=ring).fss_msb((2,))
    mat = Dealer(2, ring=ring, rng=0).fss_msb((2,))
    assert isinstance(mat, FssMsbMaterial)
    with pytest.raises(TypeError, match="FssZeroMaterial or a Dealer"):
        fss_is_zero(share(np.arange(2), 2, 0, ring=ring), mat)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["dcf", "dpf"])
def test_an_indexed_key_is_its_rows_without_a_copy(kind: str) -> None:
    # A receiver may keep every row it was sent and name its keys by index (U-MPC's
    # members): evaluation, dcf_sum_at, copies and pickles see exactly those keys.
    import copy
    import dataclasses
    import pickle

    from fedustat.secure.dcf import dcf_sum_at

    ring = Ring(16)
    gen, ev = (dcf_gen, dcf_eval) if kind == "dcf" else (dpf_gen, dpf_eval)
    alphas = np.random.default_rng(3).integers(0, 2**10, 40).astype(np.uint64)
    k0, k1 = gen(alphas, 5, domain_bits=10, ring=ring, rng=4)
    index = np.array([31, 2, 2, 17, 39, 0], dtype=np.int64)
    x = np.random.default_rng(5).integers(0, 2**10, (index.size, 3)).astype(np.uint64)
    for party, key in enumerate((k0, k1)):
        indexed = dataclasses.replace(key, index=index)
        plain = FssKey(party, key.kind, key.domain_bits, ring, key.seed[index],
                       key.cw_seed[:, index], key.cw_t[:, index],
                       None if key.cw_value is None else key.cw_value[:, index],
                       key.cw_out[index])
        assert len(indexed) == index.size and np.shares_memory(indexed.seed, key.seed)
        np.testing.assert_array_equal(ev(party, indexed, x), ev(party, plain, x))
        for moved in (copy.deepcopy(indexed), pickle.loads(pickle.dumps(indexed))):
            assert moved.index is None and moved.seed.shape[0] == index.size
            np.testing.assert_array_equal(ev(party, moved, x), ev(party, plain, x))
        assert len(pickle.dumps(indexed)) < len(pickle.dumps(key))
        if kind == "dcf":
            points = np.arange(0, 2**10, 37, dtype=np.uint64)
            np.testing.assert_array_equal(dcf_sum_at(party, indexed, points),
                                          dcf_sum_at(party, plain, points))
