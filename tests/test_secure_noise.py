"""Tests for fedustat.secure.noise: secret-shared distributed discrete Laplace noise.

The reconstructed noise is compared with its exact law by chi-square tests at
significance 1e-6, with the tails pooled so that every expected count is at least 5.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from fedustat.privacy.mechanisms import DiscreteLaplaceMechanism
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.noise import distributed_noise, local_noise, mhf_noise, subgroup_size
from fedustat.secure.ring import Ring
from fedustat.secure.transcript import Transcript

ALPHA = 1e-6


def chi_square_pvalue(samples: np.ndarray, pmf: np.ndarray, support: np.ndarray) -> float:
    """Chi-square of integer samples against ``pmf`` on ``support`` (the mass outside it
    is one more bin); bins with expected count < 5 are pooled into the outside bin."""
    n = samples.size
    counts = np.array([(samples == k).sum() for k in support], dtype=float)
    expected = pmf * n
    keep = expected >= 5
    outside_count = n - counts[keep].sum()
    outside_expected = n - expected[keep].sum()
    obs = np.r_[counts[keep], outside_count]
    exp = np.r_[expected[keep], outside_expected]
    if outside_expected < 5:
        obs, exp = obs[:-1], exp[:-1] * (obs[:-1].sum() / exp[:-1].sum())
    return float(stats.chisquare(obs, exp).pvalue)


def dlap_pvalue(samples: np.ndarray, sensitivity: int, epsilon: float) -> float:
    mech = DiscreteLaplaceMechanism(sensitivity, epsilon)
    support = np.arange(-200, 201)
    return chi_square_pvalue(samples, mech.pmf(support), support)


def test_protocol_b1_sum_is_discrete_laplace() -> None:
    ns = distributed_noise(5, 1.0, 2, size=60_000, rng=1)
    assert ns.shares.shape == (5, 60_000)
    assert ns.polya_shape == 0.2 and ns.tolerated_colluders == 0 and ns.shared
    assert dlap_pvalue(ns.reconstruct(), 2, 1.0) > ALPHA
    assert ns.variance == pytest.approx(DiscreteLaplaceMechanism(2, 1.0).variance)


def test_a_single_partys_share_of_the_noise_is_uniform() -> None:
    ns = distributed_noise(3, 0.5, 1, size=40_000, rng=2)
    for j in range(3):
        for chunk in (np.bitwise_and(ns.shares[j], np.uint64(0xFF)),
                      np.right_shift(ns.shares[j], np.uint64(56))):
            counts = np.bincount(chunk.astype(np.int64), minlength=256)
            assert stats.chisquare(counts).pvalue > ALPHA


def test_mhf_subgroup_noise_is_discrete_laplace_and_linear_in_n() -> None:
    n = 50
    t = Transcript(2)
    ns = mhf_noise(n, 1.0, 3, f_honest=0.5, fail_prob=2.0**-10, size=20_000, rng=3,
                   ring=Ring(64), transcript=t)
    assert ns.contributors.size == subgroup_size(0.5, 2.0**-10) == 10
    assert len(set(ns.contributors.tolist())) == 10 and ns.contributors.max() < n
    assert ns.polya_shape == pytest.approx(0.1)
    assert dlap_pvalue(ns.reconstruct(), 3, 1.0) > ALPHA
    # One round: each member of Z sends a 64-bit share per value to the n - 1 others.
    bits = t.party_bits(n)
    member = np.zeros(n, dtype=bool)
    member[ns.contributors] = True
    assert np.all(bits.online_sent[member] == (n - 1) * 64 * 20_000)
    assert np.all(bits.online_sent[~member] == 0)
    assert np.all(bits.online_received == (10 - member) * 64 * 20_000)
    assert t.rounds == 1


def test_min_honest_gives_robust_noise_with_the_exact_law() -> None:
    # Four contributors with min_honest = 1: each draws Polya(1, t) = geometric
    # differences, so eta = X - Y with X, Y ~ NB(4, t).
    eps, s = 1.0, 2
    ns = distributed_noise(6, eps, s, contributors=[0, 2, 3, 5], min_honest=1, size=60_000,
                           rng=4)
    assert ns.tolerated_colluders == 3 and ns.polya_shape == 1.0
    assert ns.variance == pytest.approx(4 * DiscreteLaplaceMechanism(s, eps).variance)
    t = math.exp(-eps / s)
    j = np.arange(0, 400)
    nb = stats.nbinom.pmf(j, 4, 1 - t)
    support = np.arange(-150, 151)
    pmf = np.array([np.sum(nb[max(0, -k): 400 - max(0, k)] * nb[max(0, k): 400 - max(0, -k)])
                    for k in support])
    assert chi_square_pvalue(ns.reconstruct(), pmf, support) > ALPHA


def test_local_variant_rows_sum_to_discrete_laplace() -> None:
    ns = local_noise(8, 0.7, 1, size=60_000, rng=5)
    assert not ns.shared and ns.shares.shape == (8, 60_000)
    assert dlap_pvalue(ns.reconstruct(), 1, 0.7) > ALPHA


def test_fixed_point_sensitivity_is_rounded_up_to_integer_units() -> None:
    fp = FixedPoint()        # c = 14
    ns = distributed_noise(4, 1.0, 0.5, fixed_point=fp, rng=6)
    assert ns.sensitivity == 8192 and ns.ring == fp.ring
    ns = distributed_noise(4, 1.0, 1e-9, fixed_point=fp, rng=6)
    assert ns.sensitivity == 1
    assert ns.t == pytest.approx(math.exp(-1.0))


def test_noise_that_could_wrap_the_ring_is_refused() -> None:
    with pytest.raises(OverflowError, match="ring of l=16 bits is too small"):
        distributed_noise(4, 0.01, 100.0, fixed_point=FixedPoint(16, 8), rng=7)


def test_same_seed_same_noise_and_deployment_randomness() -> None:
    a = distributed_noise(4, 1.0, 1, size=10, rng=8)
    b = distributed_noise(4, 1.0, 1, size=10, rng=8)
    assert np.array_equal(a.shares, b.shares)
    live = distributed_noise(3, 1.0, 1, size=2, rng="os")
    assert live.shares.shape == (3, 2) and live.reconstruct().dtype == np.int64


def test_subgroup_size() -> None:
    assert subgroup_size(0.5, 2.0**-40) == 40
    assert subgroup_size(0.1, 1e-9) == math.ceil(math.log(1e-9) / math.log(0.9)) == 197
    assert subgroup_size(1.0, 1e-9) == 1
    with pytest.raises(ValueError, match=r"f_honest must be in \(0, 1\]"):
        subgroup_size(0.0, 0.1)
    with pytest.raises(ValueError, match=r"fail_prob must be in \(0, 1\)"):
        subgroup_size(0.5, 1.0)


def test_validation() -> None:
    with pytest.raises(ValueError, match="contributors must be a non-empty set"):
        distributed_noise(4, 1.0, 1, contributors=[4])
    with pytest.raises(ValueError, match=r"min_honest \(5\) cannot exceed"):
        distributed_noise(4, 1.0, 1, min_honest=5)
    with pytest.raises(TypeError, match="sensitivity must be an integer"):
        distributed_noise(4, 1.0, 0.5)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        distributed_noise(4, 0.0, 1)
    with pytest.raises(ValueError, match="pass either fixed_point or ring"):
        distributed_noise(4, 1.0, 1.0, fixed_point=FixedPoint(), ring=Ring(64))
    with pytest.raises(ValueError, match="party_ids must have one id per party"):
        distributed_noise(4, 1.0, 1, transcript=Transcript(2), party_ids=[0, 1])
