"""Tests for fedustat.privacy.randomizers and fedustat.privacy.verify.

Privacy is checked exactly (every output probability of every input, small domains).
Monte Carlo checks of the estimators use R independent replications: a mean within
5 standard errors sqrt(Var/R), and a sample variance within 5 sqrt((mu4 - sigma^4)/R),
where mu4 is the exact fourth central moment of a sum of independent two-point
variables (fourth cumulant plus 3 sigma^4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import linalg, stats

from fedustat.privacy import (
    BinaryRandomizedResponse,
    DeploymentNoise,
    HadamardResponse,
    KaryRandomizedResponse,
    PrivacyModel,
    fwht,
    verify_ldp,
)

ALPHA = 1e-6


def bernoulli_sum_mu4_minus_var2(probs: np.ndarray, scale: float) -> tuple[float, float]:
    """Variance and mu4 - variance^2 of sum_i scale * B_i, B_i ~ Bernoulli(probs_i)."""
    v = probs * (1 - probs)
    kappa4 = v * (1 - 6 * v)  # fourth cumulant of a Bernoulli
    variance = scale**2 * v.sum()
    mu4 = scale**4 * kappa4.sum() + 3 * variance**2
    return variance, mu4 - variance**2


def check_mean_and_variance(estimates: np.ndarray, truth: np.ndarray, variance: np.ndarray,
                            mu4_minus_var2: np.ndarray) -> None:
    reps = estimates.shape[0]
    mean_se = np.sqrt(variance / reps)
    np.testing.assert_array_less(np.abs(estimates.mean(axis=0) - truth), 5 * mean_se)
    var_se = np.sqrt(mu4_minus_var2 / reps)
    np.testing.assert_array_less(np.abs(estimates.var(axis=0) - variance), 5 * var_se)


# ------------------------------------------------------------ exact LDP verification


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_binary_rr_passes_exact_ldp_check(epsilon):
    rr = BinaryRandomizedResponse(epsilon)
    result = verify_ldp(rr)
    assert result.passed
    assert result.observed_epsilon == pytest.approx(epsilon, rel=1e-12)
    assert result.n_inputs == 2 and result.n_outputs == 2


@pytest.mark.parametrize("k", [2, 3, 5, 10])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_kary_rr_passes_exact_ldp_check(k, epsilon):
    rr = KaryRandomizedResponse(k, epsilon)
    result = verify_ldp(rr, rr.input_domain, epsilon)
    assert result.passed, str(result)
    # The bound is attained: k-RR spends exactly its budget.
    assert result.observed_epsilon == pytest.approx(epsilon, rel=1e-12)


@pytest.mark.parametrize("d", [8, 16])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_hadamard_passes_exact_ldp_check(d, epsilon):
    hr = HadamardResponse(d, epsilon)
    result = verify_ldp(hr)
    assert result.passed, str(result)
    assert result.n_outputs == 2 * d
    assert result.observed_epsilon == pytest.approx(epsilon, rel=1e-12)


@settings(deadline=None, max_examples=30, derandomize=True)
@given(k=st.integers(2, 12), epsilon=st.floats(0.01, 8.0))
def test_kary_rr_ldp_property(k, epsilon):
    assert verify_ldp(KaryRandomizedResponse(k, epsilon)).passed


def test_binary_rr_probabilities_reused_for_k_values_fails():
    """A classic mistake: keep with e^eps/(1+e^eps), spread the rest over k - 1 values."""
    k, eps = 4, 1.0
    keep = math.exp(eps) / (1 + math.exp(eps))

    def miscalibrated(x: int) -> np.ndarray:
        probs = np.full(k, (1 - keep) / (k - 1))
        probs[x] = keep
        return probs

    result = verify_ldp(miscalibrated, range(k), eps)
    assert not result.passed
    assert result.observed_epsilon == pytest.approx(eps + math.log(k - 1), rel=1e-12)
    assert result.worst_ratio_pair[0] != result.worst_ratio_pair[1]


def test_understated_epsilon_fails():
    assert not verify_ldp(KaryRandomizedResponse(5, 1.2), epsilon=1.0).passed
    assert not verify_ldp(HadamardResponse(8, 1.2), epsilon=1.0).passed


def test_papers_printed_eq9_renormalized_is_over_private_and_biased():
    """000 Eq. 9 as printed (true value 1 - beta, others beta/k), renormalized.

    It is not the mechanism the paper analyses: it is ln(e^eps - 1)-LDP (more private
    than claimed) and the paper's debiasing (e_R - b)/(1 - beta) is biased for it.
    """
    k, eps = 4, 1.5
    rr = KaryRandomizedResponse(k, eps)
    beta = rr.beta

    def printed(x: int) -> np.ndarray:
        probs = np.full(k, beta / k)
        probs[x] = 1 - beta
        return probs / probs.sum()

    result = verify_ldp(printed, range(k), eps)
    assert result.passed
    assert result.observed_epsilon == pytest.approx(math.log(math.expm1(eps)), rel=1e-12)
    # Expected debiased one-hot under the printed law: (P - b)/(1 - beta), not e_x.
    expected = (printed(0) - beta / k) / (1 - beta)
    assert abs(expected[0] - 1.0) > 0.05
    # Under the implemented law it is exactly e_x.
    exact = (rr.output_distribution(0) - beta / k) / (1 - beta)
    np.testing.assert_allclose(exact, np.eye(k)[0], atol=1e-12)


def test_hadamard_with_doubled_budget_fails():
    d, eps = 8, 1.0
    hr = HadamardResponse(d, 2 * eps)

    result = verify_ldp(hr.output_distribution, range(d), eps)
    assert not result.passed
    assert result.observed_epsilon == pytest.approx(2 * eps, rel=1e-12)


def test_approximate_dp_hockey_stick_is_exact():
    """k-RR at eps1 checked at eps < eps1: worst divergence is p - e^eps q exactly."""
    k, eps1, eps = 3, 2.0, 1.0
    rr = KaryRandomizedResponse(k, eps1)
    exact = (math.exp(eps1) - math.exp(eps)) / (k + math.exp(eps1) - 1)
    ok = verify_ldp(rr, epsilon=eps, delta=exact * (1 + 1e-9))
    assert ok.passed
    assert ok.worst_divergence == pytest.approx(exact, rel=1e-12)
    assert not verify_ldp(rr, epsilon=eps, delta=exact * 0.99).passed
    assert not verify_ldp(rr, epsilon=eps).passed


def test_zero_probability_outputs_give_infinite_ratio():
    def leaky(x: int) -> np.ndarray:
        return np.eye(2)[x]

    result = verify_ldp(leaky, [0, 1], 5.0)
    assert not result.passed and math.isinf(result.observed_epsilon)
    assert result.worst_divergence == pytest.approx(1.0)
    assert "FAILED" in str(result)


def test_verify_rejects_bad_arguments():
    with pytest.raises(ValueError, match="inputs and epsilon are required"):
        verify_ldp(lambda x: np.array([0.5, 0.5]))
    with pytest.raises(ValueError, match="sums to"):
        verify_ldp(lambda x: np.array([0.5, 0.6]), [0, 1], 1.0)
    with pytest.raises(ValueError, match="at least two values"):
        verify_ldp(KaryRandomizedResponse(3, 1.0), [0])
    with pytest.raises(ValueError, match="different lengths"):
        verify_ldp(lambda x: np.ones(x + 1) / (x + 1), [0, 1], 1.0)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        verify_ldp(KaryRandomizedResponse(3, 1.0), epsilon=0.0)
    with pytest.raises(ValueError, match=r"delta must be in \[0, 1\)"):
        verify_ldp(KaryRandomizedResponse(3, 1.0), delta=1.5)
    with pytest.raises(TypeError, match="output_distribution method or be callable"):
        verify_ldp(42, [0, 1], 1.0)


# ------------------------------------------------------------------ k-ary RR


def test_kary_rr_probabilities():
    k, eps = 6, 1.3
    rr = KaryRandomizedResponse(k, eps)
    assert rr.beta == pytest.approx(k / (k + math.exp(eps) - 1), rel=1e-14)
    assert rr.keep_probability == pytest.approx(1 - rr.beta + rr.beta / k, rel=1e-14)
    assert rr.keep_probability == pytest.approx(math.exp(eps) / (k + math.exp(eps) - 1))
    assert rr.other_probability == pytest.approx(1 / (k + math.exp(eps) - 1))
    dist = rr.output_distribution([0, 5])
    assert dist.shape == (2, k)
    np.testing.assert_allclose(dist.sum(axis=1), 1.0, rtol=1e-14)
    assert rr.input_size == rr.output_size == k
    np.testing.assert_array_equal(rr.input_domain, np.arange(k))
    # Huge budgets do not overflow.
    assert KaryRandomizedResponse(3, 800.0).keep_probability == 1.0


def test_kary_rr_guarantee_is_local():
    g = KaryRandomizedResponse(4, 0.7).guarantee
    assert g.model is PrivacyModel.LOCAL and g.epsilon == 0.7 and g.delta == 0.0
    assert g.adjacency == "any two inputs"


def test_kary_rr_sampling_matches_output_distribution():
    k, eps, n = 5, 1.0, 60_000
    rr = KaryRandomizedResponse(k, eps)
    for x in (0, 3):
        reports = rr.randomize(np.full(n, x), rng=x + 1)
        counts = np.bincount(reports, minlength=k)
        assert stats.chisquare(counts, n * rr.output_distribution(x)).pvalue > ALPHA


def test_kary_rr_histogram_unbiased_with_theoretical_variance():
    k, eps, reps = 4, 1.0, 3000
    rr = KaryRandomizedResponse(k, eps)
    true_counts = np.array([150, 90, 60, 0])
    x = np.repeat(np.arange(k), true_counts)
    gen = np.random.default_rng(2024)
    estimates = np.array([rr.estimate_counts(rr.randomize(x, gen)) for _ in range(reps)])
    variance = rr.count_variance(true_counts)
    p, q = rr.keep_probability, rr.other_probability
    mu4_minus = np.empty(k)
    for v in range(k):
        probs = np.where(x == v, p, q)
        var_c, extra = bernoulli_sum_mu4_minus_var2(probs, 1.0 / (p - q))
        assert var_c == pytest.approx(variance[v], rel=1e-12)
        mu4_minus[v] = extra
    check_mean_and_variance(estimates, true_counts, variance, mu4_minus)


def test_kary_rr_debias_one_hot_sums_to_histogram():
    rr = KaryRandomizedResponse(5, 0.8)
    reports = rr.randomize(np.arange(200) % 5, rng=3)
    one_hot = rr.debias_one_hot(reports)
    assert one_hot.shape == (200, 5)
    np.testing.assert_allclose(one_hot.sum(axis=0), rr.estimate_counts(reports), rtol=1e-12)
    np.testing.assert_allclose(rr.estimate_counts(reports, normalize=True),
                               rr.estimate_counts(reports) / 200, rtol=1e-14)


def test_binary_rr_debias_unbiased():
    eps, n, reps = 0.7, 400, 3000
    rr = BinaryRandomizedResponse(eps)
    assert rr.flip_probability == pytest.approx(1 / (1 + math.exp(eps)))
    bits = (np.arange(n) < 130).astype(bool)
    gen = np.random.default_rng(5)
    means = np.array([rr.estimate_mean(rr.randomize(bits, gen)) for _ in range(reps)])
    p, q = rr.keep_probability, rr.other_probability
    probs = np.where(bits, p, q)
    var, extra = bernoulli_sum_mu4_minus_var2(probs, 1.0 / ((p - q) * n))
    check_mean_and_variance(means[:, None], np.array([130 / n]), np.array([var]),
                            np.array([extra]))


def test_binary_rr_flips_bits():
    rr = BinaryRandomizedResponse(1.0)
    out = rr.randomize([True, False, True], rng=0)
    assert set(out.tolist()) <= {0, 1}
    certain = BinaryRandomizedResponse(60.0).randomize(np.array([0, 1, 1, 0]), rng=0)
    np.testing.assert_array_equal(certain, [0, 1, 1, 0])


# ------------------------------------------------------------- Hadamard response


def test_fwht_matches_scipy_hadamard():
    gen = np.random.default_rng(0)
    for d in (1, 2, 8, 64):
        a = gen.normal(size=(3, d))
        np.testing.assert_allclose(fwht(a), a @ linalg.hadamard(d), rtol=1e-12, atol=1e-12)
    ints = np.arange(16)
    np.testing.assert_array_equal(fwht(ints), ints @ linalg.hadamard(16))
    assert fwht(ints).dtype == np.int64


@settings(deadline=None, max_examples=30, derandomize=True)
@given(log_d=st.integers(0, 8), seed=st.integers(0, 2**32 - 1))
def test_fwht_is_its_own_inverse_up_to_d(log_d, seed):
    d = 2**log_d
    a = np.random.default_rng(seed).integers(-1000, 1000, size=d)
    np.testing.assert_array_equal(fwht(fwht(a)), d * a)


def test_fwht_rejects_bad_lengths():
    with pytest.raises(ValueError, match="power-of-two length, got 6"):
        fwht(np.ones(6))
    with pytest.raises(ValueError, match="non-empty array"):
        fwht(3.0)


def test_hadamard_output_distribution_layout():
    hr = HadamardResponse(8, 1.0)
    dist = hr.output_distribution(5)
    assert dist.shape == (16,)
    assert dist.sum() == pytest.approx(1.0)
    h = linalg.hadamard(8)
    for j in range(8):
        true_bit = 0 if h[j, 5] == 1 else 1
        assert dist[2 * j + true_bit] == pytest.approx(hr.keep_probability / 8)
        assert dist[2 * j + 1 - true_bit] == pytest.approx((1 - hr.keep_probability) / 8)
    assert hr.debias_factor == pytest.approx((math.e + 1) / (math.e - 1))


def test_hadamard_sampling_matches_output_distribution():
    hr = HadamardResponse(8, 1.5)
    n = 80_000
    for x in (0, 6):
        j, bits = hr.randomize(np.full(n, x), rng=10 + x)
        assert j.dtype == np.int64 and bits.dtype == np.uint8
        counts = np.bincount(2 * j + bits, minlength=16)
        assert stats.chisquare(counts, n * hr.output_distribution(x)).pvalue > ALPHA


def test_hadamard_estimates_unbiased_with_exact_variance():
    d, eps, reps = 8, 1.0, 3000
    hr = HadamardResponse(d, eps)
    true_counts = np.array([100, 50, 0, 30, 20, 0, 0, 200])
    x = np.repeat(np.arange(d), true_counts)
    n = x.size
    gen = np.random.default_rng(77)
    estimates = np.array([hr.estimate_frequencies(*hr.randomize(x, gen)) for _ in range(reps)])
    variance = hr.count_variance(true_counts)
    c = hr.debias_factor
    assert variance == pytest.approx(n * c**2 - true_counts)
    mu4_minus = np.empty(d)
    for q in range(d):
        # Each party contributes c (2B - 1) with mean 1[x_i = q]: B ~ Bernoulli((1 + m/c)/2).
        probs = (1 + (x == q) / c) / 2
        var_q, extra = bernoulli_sum_mu4_minus_var2(probs, 2 * c)
        assert var_q == pytest.approx(variance[q], rel=1e-12)
        mu4_minus[q] = extra
    check_mean_and_variance(estimates, true_counts, variance, mu4_minus)
    # 001 Lemma 6: estimates of distinct values are uncorrelated (5 SE of a correlation).
    corr = np.corrcoef(estimates[:, 0], estimates[:, 7])[0, 1]
    assert abs(corr) <= 5 / math.sqrt(reps)


def test_hadamard_lemma5_bound_omits_the_n_term():
    """001 Lemma 5's MSE bound 4 n e^eps/(e^eps-1)^2 is below the exact variance."""
    d, eps, n, reps = 4, 3.0, 200, 2000
    hr = HadamardResponse(d, eps)
    x = np.zeros(n, dtype=int)  # value 3 has count 0
    gen = np.random.default_rng(8)
    est = np.array([hr.estimate_frequency(*hr.randomize(x, gen), 3) for _ in range(reps)])
    lemma5 = 4 * n * math.exp(eps) / math.expm1(eps) ** 2
    exact = float(hr.count_variance(0, n_reports=n))
    assert exact == pytest.approx(n + lemma5)
    mse = np.mean(est**2)
    # The estimate has mean 0, so Var(est^2) = mu4 - sigma^4 (exact, from the +-c terms).
    var, extra = bernoulli_sum_mu4_minus_var2(np.full(n, 0.5), 2 * hr.debias_factor)
    assert var == pytest.approx(exact)
    se = math.sqrt(extra / reps)
    assert abs(mse - exact) <= 5 * se
    assert mse > lemma5 + 5 * se


def test_hadamard_single_value_queries_match_full_transform():
    hr = HadamardResponse(16, 0.9)
    x = np.random.default_rng(1).integers(0, 16, size=500)
    j, bits = hr.randomize(x, rng=2)
    full = hr.estimate_frequencies(j, bits)
    np.testing.assert_allclose(hr.estimate_frequency(j, bits, np.arange(16)), full, rtol=1e-12)
    assert isinstance(hr.estimate_frequency(j, bits, 4), float)
    assert hr.estimate_frequency(j, bits, 4) == pytest.approx(full[4])
    np.testing.assert_allclose(hr.estimate_frequencies(j, bits, normalize=True), full / 500)
    assert hr.estimate_frequency(j, bits, 4, normalize=True) == pytest.approx(full[4] / 500)


# ------------------------------------------------------- shared behaviour and errors


@pytest.mark.parametrize("randomizer", [BinaryRandomizedResponse(1.0),
                                        KaryRandomizedResponse(7, 1.0),
                                        HadamardResponse(16, 1.0)])
def test_same_seed_same_output(randomizer):
    x = np.arange(100) % randomizer.input_size
    a = randomizer.randomize(x, rng=123)
    b = randomizer.randomize(x, rng=123)
    np.testing.assert_equal(a, b)
    assert randomizer.guarantee.model is PrivacyModel.LOCAL


def test_randomizers_run_on_deployment_noise():
    pytest.importorskip("opendp")
    noise = DeploymentNoise()
    reports = KaryRandomizedResponse(4, 1.0).randomize(np.arange(40) % 4, noise)
    assert reports.min() >= 0 and reports.max() < 4
    j, bits = HadamardResponse(8, 1.0).randomize(np.arange(40) % 8, noise)
    assert j.max() < 8 and set(bits.tolist()) <= {0, 1}


@pytest.mark.parametrize(("factory", "exc", "match"), [
    (lambda: KaryRandomizedResponse(1, 1.0), ValueError, "k must be >= 2"),
    (lambda: KaryRandomizedResponse(2.5, 1.0), TypeError, "k must be an integer"),
    (lambda: KaryRandomizedResponse(3, 0.0), ValueError, "epsilon must be > 0"),
    (lambda: BinaryRandomizedResponse(-1.0), ValueError, "epsilon must be > 0"),
    (lambda: HadamardResponse(12, 1.0), ValueError, "d must be a power of two"),
    (lambda: HadamardResponse(1, 1.0), ValueError, "d must be >= 2"),
    (lambda: HadamardResponse(8, math.inf), ValueError, "epsilon must be finite"),
    (lambda: KaryRandomizedResponse(3, 1.0).randomize([0, 3], 0), ValueError,
     r"x has values outside the input domain \{0, ..., 2\}"),
    (lambda: KaryRandomizedResponse(3, 1.0).randomize([-1], 0), ValueError,
     "outside the input domain"),
    (lambda: KaryRandomizedResponse(3, 1.0).randomize([0.5], 0), ValueError, "whole numbers"),
    (lambda: BinaryRandomizedResponse(1.0).randomize([2], 0), ValueError,
     r"outside the input domain \{0, ..., 1\}"),
    (lambda: HadamardResponse(8, 1.0).randomize([8], 0), ValueError,
     r"outside the input domain \{0, ..., 7\}"),
    (lambda: KaryRandomizedResponse(3, 1.0).estimate_counts([0, 5]), ValueError,
     "reports has values outside"),
    (lambda: KaryRandomizedResponse(3, 1.0).count_variance([1, 2]), ValueError,
     "true_counts must hold 3 non-negative counts"),
    (lambda: HadamardResponse(8, 1.0).estimate_frequencies([0, 1], [0, 2]), ValueError,
     "bits has values outside"),
    (lambda: HadamardResponse(8, 1.0).estimate_frequencies([0, 1], [0]), ValueError,
     "inconsistent lengths"),
    (lambda: HadamardResponse(8, 1.0).estimate_frequency([0], [0], 9), ValueError,
     "value has values outside"),
    (lambda: HadamardResponse(8, 1.0).count_variance([-1.0]), ValueError,
     "true_counts must be non-negative"),
])
def test_bad_inputs_raise(factory, exc, match):
    with pytest.raises(exc, match=match):
        factory()
