"""Tests for fedustat.privacy.noise and fedustat.privacy.mechanisms.

Monte Carlo tolerances are derived from the sampling distribution: a sample mean of N
draws is compared within 5 standard errors sigma/sqrt(N); a sample variance within
5 sqrt((mu4 - sigma^4)/N), with the fourth central moment mu4 of the law under test
(Laplace 24 b^4, Gaussian 3 sigma^4, discrete Laplace summed from its pmf). Goodness of
fit uses chi-square / Kolmogorov-Smirnov tests at significance 1e-6.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from fedustat.privacy import (
    DeploymentNoise,
    DiscreteLaplaceMechanism,
    GaussianMechanism,
    LaplaceMechanism,
    NoiseSource,
    PrivacyModel,
    SimulationNoise,
    as_noise,
    classic_gaussian_sigma,
    distributed_discrete_laplace_shares,
    gaussian_delta,
    polya,
)

N_SIM = 200_000
ALPHA = 1e-6  # significance level of goodness-of-fit tests


def assert_mean_close(samples: np.ndarray, mean: float, variance: float) -> None:
    se = math.sqrt(variance / samples.size)
    assert abs(samples.mean() - mean) <= 5 * se, (samples.mean(), mean, se)


def assert_variance_close(samples: np.ndarray, variance: float, mu4: float) -> None:
    se = math.sqrt((mu4 - variance**2) / samples.size)
    assert abs(samples.var() - variance) <= 5 * se, (samples.var(), variance, se)


def dlap_pmf_table(t: float) -> tuple[np.ndarray, np.ndarray]:
    """Support and pmf of DLap(t), truncated where the mass is below 1e-30."""
    k_max = math.ceil(math.log(1e-30) / math.log(t))
    z = np.arange(-k_max, k_max + 1)
    return z, (1 - t) / (1 + t) * t ** np.abs(z)


def dlap_fourth_moment(t: float) -> float:
    z, pmf = dlap_pmf_table(t)
    return float(np.sum(pmf * z.astype(float) ** 4))


def chisquare_pvalue(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray,
                     tail_low: float = 0.0, tail_high: float = 0.0) -> float:
    """Chi-square goodness of fit on integer samples; bins with expected < 5 are pooled."""
    n = samples.size
    counts = np.array([np.count_nonzero(samples == v) for v in support], dtype=float)
    expected = n * pmf
    observed_tails = [np.count_nonzero(samples < support[0]),
                      np.count_nonzero(samples > support[-1])]
    counts = np.concatenate([counts, observed_tails])
    expected = np.concatenate([expected, [n * tail_low, n * tail_high]])
    small = expected < 5
    if small.any():
        counts = np.concatenate([counts[~small], [counts[small].sum()]])
        expected = np.concatenate([expected[~small], [expected[small].sum()]])
    expected *= counts.sum() / expected.sum()
    return float(stats.chisquare(counts, expected).pvalue)


# --------------------------------------------------------------------------- noise


def test_as_noise_wraps_seeds_and_passes_sources_through():
    # No seed: the draw may protect someone's record, so it is deployment-grade.
    assert isinstance(as_noise(None), DeploymentNoise)
    assert isinstance(as_noise(3), SimulationNoise)
    gen = np.random.default_rng(0)
    assert as_noise(gen).rng is gen
    source = SimulationNoise(1)
    assert as_noise(source) is source
    assert source.kind == "simulation"
    with pytest.raises(TypeError, match="rng must be None, an integer seed"):
        as_noise(1.5)
    with pytest.raises(ValueError, match="rng must be a seed, a Generator, a NoiseSource"):
        as_noise("production")


def test_simulation_noise_is_reproducible():
    a, b = SimulationNoise(11), SimulationNoise(11)
    for method, args in [("laplace", (2.0, 5)), ("gaussian", (1.5, 5)),
                         ("discrete_laplace", (3.0, 5)), ("uniform", (5,)),
                         ("integers", (7, 5)), ("bernoulli", (0.3, 5)),
                         ("polya", (0.5, 0.7, 5))]:
        np.testing.assert_array_equal(getattr(a, method)(*args), getattr(b, method)(*args))


def test_simulation_noise_shapes_and_types():
    source = SimulationNoise(0)
    assert source.laplace(1.0, (2, 3)).shape == (2, 3)
    assert source.discrete_laplace(1.0, 4).dtype == np.int64
    assert source.integers(5, 100).min() >= 0 and source.integers(5, 100).max() < 5
    assert source.bernoulli(0.5, 10).dtype == bool
    assert source.polya(1.0, 0.0, 3).tolist() == [0, 0, 0]
    assert source.laplace(1.0, 0).shape == (0,)


@pytest.mark.parametrize(("method", "args", "match"), [
    ("laplace", (0.0, 3), "scale must be > 0"),
    ("gaussian", (-1.0, 3), "sigma must be > 0"),
    ("discrete_laplace", (math.nan, 3), "scale must be > 0"),
    ("integers", (0, 3), "high must be an integer >= 1"),
    ("bernoulli", (1.5, 3), r"p must be in \[0, 1\]"),
    ("polya", (0.0, 0.5, 3), "r must be > 0"),
    ("polya", (1.0, 1.0, 3), r"alpha must be in \[0, 1\)"),
    ("laplace", (1.0, -2), "size must be a non-negative integer"),
])
def test_noise_rejects_bad_parameters(method, args, match):
    with pytest.raises(ValueError, match=match):
        getattr(SimulationNoise(0), method)(*args)


@pytest.fixture(scope="module")
def deployment() -> DeploymentNoise:
    pytest.importorskip("opendp")
    return DeploymentNoise()


N_DEPLOY = 4000


def test_deployment_laplace_variance(deployment):
    b = 2.0
    draws = deployment.laplace(b, N_DEPLOY)
    assert draws.shape == (N_DEPLOY,) and draws.dtype == np.float64
    assert_mean_close(draws, 0.0, 2 * b**2)
    assert_variance_close(draws, 2 * b**2, 24 * b**4)


def test_deployment_gaussian_variance(deployment):
    sigma = 1.5
    draws = deployment.gaussian(sigma, (40, 100))
    assert draws.shape == (40, 100)
    assert_mean_close(draws, 0.0, sigma**2)
    assert_variance_close(draws, sigma**2, 3 * sigma**4)


def test_deployment_discrete_laplace_variance(deployment):
    scale = 2.0
    t = math.exp(-1 / scale)
    draws = deployment.discrete_laplace(scale, N_DEPLOY)
    assert draws.dtype == np.int64
    variance = 2 * t / (1 - t) ** 2
    assert_mean_close(draws, 0.0, variance)
    assert_variance_close(draws, variance, dlap_fourth_moment(t))


def test_deployment_uniform_draws(deployment):
    assert deployment.kind == "deployment"
    u = deployment.uniform(N_DEPLOY)
    assert u.min() >= 0 and u.max() < 1
    assert_mean_close(u, 0.5, 1 / 12)
    ints = deployment.integers(6, N_DEPLOY)
    assert set(np.unique(ints).tolist()) <= set(range(6))
    assert_mean_close(ints, 2.5, (36 - 1) / 12)


@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_deployment_bernoulli_mean(deployment, p):
    draws = deployment.bernoulli(p, 2000)
    assert draws.dtype == bool
    assert_mean_close(draws.astype(float), p, p * (1 - p))
    assert not deployment.bernoulli(0.0, 5).any() and deployment.bernoulli(1.0, 5).all()


def test_deployment_polya_mean(deployment):
    r, alpha = 0.5, 0.6
    draws = deployment.polya(r, alpha, 1000)
    assert_mean_close(draws.astype(float), r * alpha / (1 - alpha), r * alpha / (1 - alpha) ** 2)


def test_deployment_noise_drives_mechanisms(deployment):
    out = LaplaceMechanism(1.0, 1.0).release(np.zeros(3), noise=deployment)
    assert out.shape == (3,)
    ints = DiscreteLaplaceMechanism(1, 1.0).release(np.array([5, 6]), deployment)
    assert ints.dtype == np.int64
    shares = distributed_discrete_laplace_shares(4, 1.0, 1, 2, rng=deployment)
    assert shares.shape == (4, 2) and shares.dtype == np.int64


# ---------------------------------------------------------------------- mechanisms


def test_laplace_mechanism_parameters_and_guarantee():
    mech = LaplaceMechanism(2.0, 0.5)
    assert mech.scale == 4.0 and mech.variance == 32.0 and mech.std == math.sqrt(32.0)
    g = mech.guarantee
    assert (g.epsilon, g.delta, g.model) == (0.5, 0.0, PrivacyModel.CENTRAL)
    local = LaplaceMechanism(1.0, 1.0, model="local", adjacency="any two inputs")
    assert local.guarantee.model is PrivacyModel.LOCAL
    assert local.guarantee.adjacency == "any two inputs"
    np.testing.assert_allclose(mech.pdf([0.0, 1.0, -3.0]),
                               stats.laplace(scale=4.0).pdf([0.0, 1.0, -3.0]), rtol=1e-14)


def test_laplace_release_variance_and_shape():
    mech = LaplaceMechanism(1.0, 0.8)
    values = np.full((N_SIM // 2, 2), 3.0)
    out = mech.release(values, rng=5)
    assert out.shape == values.shape
    noise = (out - values).ravel()
    b = mech.scale
    assert_mean_close(noise, 0.0, mech.variance)
    assert_variance_close(noise, mech.variance, 24 * b**4)
    assert stats.kstest(noise, stats.laplace(scale=b).cdf).pvalue > ALPHA


def test_gaussian_release_variance():
    mech = GaussianMechanism(1.0, 0.5, 1e-5)
    noise = mech.release(np.zeros(N_SIM), rng=6)
    assert_mean_close(noise, 0.0, mech.variance)
    assert_variance_close(noise, mech.variance, 3 * mech.sigma**4)
    assert stats.kstest(noise, stats.norm(scale=mech.sigma).cdf).pvalue > ALPHA
    np.testing.assert_allclose(mech.pdf([0.3, -2.0]), stats.norm(scale=mech.sigma).pdf([0.3, -2.0]),
                               rtol=1e-14)


def test_discrete_laplace_pmf_matches_scipy():
    mech = DiscreteLaplaceMechanism(3, 1.2)
    z = np.arange(-40, 41)
    # scipy.stats.dlaplace(a) has pmf tanh(a/2) exp(-a|k|): a = epsilon / sensitivity.
    ref = stats.dlaplace(1.2 / 3)
    np.testing.assert_allclose(mech.pmf(z), ref.pmf(z), rtol=1e-12)
    assert mech.pmf(0.5) == 0.0
    assert mech.t == pytest.approx(math.exp(-0.4), rel=1e-15)
    assert mech.scale == pytest.approx(2.5)
    assert mech.variance == pytest.approx(ref.var(), rel=1e-12)
    _, pmf = dlap_pmf_table(mech.t)
    assert pmf.sum() == pytest.approx(1.0, abs=1e-12)


def test_discrete_laplace_release_distribution():
    mech = DiscreteLaplaceMechanism(2, 1.0)
    values = np.arange(N_SIM) % 7
    out = mech.release(values, rng=8)
    assert out.dtype == np.int64
    noise = out - values
    assert_variance_close(noise, mech.variance, dlap_fourth_moment(mech.t))
    z = np.arange(-15, 16)
    tail = mech.t**16 / (1 + mech.t)
    assert chisquare_pvalue(noise, z, mech.pmf(z), tail, tail) > ALPHA


def test_discrete_laplace_keeps_large_integers_exact():
    big = np.array([2**60 + 1, -(2**60) - 3], dtype=np.int64)
    out = DiscreteLaplaceMechanism(1, 50.0).release(big, rng=0)
    # At epsilon = 50 the noise is 0 with probability 1 - 2e-22 / (1 + e^-50).
    np.testing.assert_array_equal(out, big)


def test_pdf_ratios_audit():
    """Exact audit: the noise density ratio at shift Δ never exceeds e^eps, and is attained."""
    z = np.linspace(-30, 30, 6001)
    lap = LaplaceMechanism(1.5, 0.7)
    ratio = lap.pdf(z) / lap.pdf(z - lap.sensitivity)
    assert ratio.max() <= math.exp(0.7) * (1 + 1e-12)
    assert ratio.max() == pytest.approx(math.exp(0.7), rel=1e-12)
    dlap = DiscreteLaplaceMechanism(2, 0.9)
    k = np.arange(-60, 61)
    ratio = dlap.pmf(k) / dlap.pmf(k - dlap.sensitivity)
    assert ratio.max() == pytest.approx(math.exp(0.9), rel=1e-12)


def test_laplace_statistical_audit():
    """Release(0) vs release(Δ) on the event {z >= Δ}: the log ratio is exactly epsilon."""
    mech = LaplaceMechanism(1.0, 1.0)
    n = N_SIM
    out0 = mech.release(np.zeros(n), rng=21)
    out1 = mech.release(np.full(n, mech.sensitivity), rng=22)
    p0 = np.mean(out0 >= mech.sensitivity)  # true 0.5 e^-eps
    p1 = np.mean(out1 >= mech.sensitivity)  # true 0.5
    true0, true1 = 0.5 * math.exp(-mech.epsilon), 0.5
    # Delta method: Var(log p_hat) = (1 - p) / (n p).
    se = math.sqrt((1 - true0) / (n * true0) + (1 - true1) / (n * true1))
    assert abs(math.log(p1 / p0) - mech.epsilon) <= 5 * se


def test_gaussian_analytic_calibration_is_exact_and_tighter():
    sens, eps, delta = 2.0, 0.5, 1e-6
    mech = GaussianMechanism(sens, eps, delta)
    assert mech.calibration == "analytic"
    assert gaussian_delta(mech.sigma, sens, eps) <= delta
    assert gaussian_delta(mech.sigma * (1 - 1e-9), sens, eps) > delta
    classic = GaussianMechanism(sens, eps, delta, calibration="classic")
    assert classic.sigma == pytest.approx(classic_gaussian_sigma(sens, eps, delta))
    assert classic.sigma == pytest.approx(math.sqrt(2 * math.log(1.25 / delta)) * sens / eps)
    assert mech.sigma < classic.sigma
    assert mech.guarantee.delta == delta and mech.scale == mech.sigma
    # Valid beyond epsilon = 1, where the classic bound has no proof.
    assert GaussianMechanism(1.0, 4.0, 1e-5).sigma > 0


def test_gaussian_delta_is_the_hockey_stick_divergence():
    sigma, sens, eps = 1.7, 1.0, 0.8

    def integrand(z: float) -> float:
        gap = stats.norm.pdf(z, 0, sigma) - math.exp(eps) * stats.norm.pdf(z, sens, sigma)
        return max(0.0, gap)

    # The integrand is positive only below the crossing point of the two densities.
    crossing = sens / 2 - eps * sigma**2 / sens
    value, _ = integrate.quad(integrand, -np.inf, crossing, epsabs=1e-13)
    assert gaussian_delta(sigma, sens, eps) == pytest.approx(value, abs=1e-10)


@settings(deadline=None, max_examples=40, derandomize=True)
@given(eps=st.floats(0.01, 0.99), log_delta=st.floats(-12.0, -1.5))
def test_analytic_sigma_never_exceeds_classic(eps, log_delta):
    delta = 10.0**log_delta
    analytic = GaussianMechanism(1.0, eps, delta).sigma
    assert analytic <= classic_gaussian_sigma(1.0, eps, delta)
    assert gaussian_delta(analytic, 1.0, eps) <= delta


def test_same_seed_same_release():
    for mech in (LaplaceMechanism(1.0, 1.0), GaussianMechanism(1.0, 0.5, 1e-5),
                 DiscreteLaplaceMechanism(1, 1.0)):
        a = mech.release(np.arange(5), rng=42)
        b = mech.release(np.arange(5), rng=42)
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(polya(0.3, 0.8, 10, 4), polya(0.3, 0.8, 10, 4))
    np.testing.assert_array_equal(distributed_discrete_laplace_shares(5, 1.0, 2, 3, 9),
                                  distributed_discrete_laplace_shares(5, 1.0, 2, 3, 9))


def test_release_accepts_a_noise_source_as_rng():
    source = SimulationNoise(3)
    assert isinstance(source, NoiseSource)
    a = LaplaceMechanism(1.0, 1.0).release([0.0, 1.0], source)
    b = LaplaceMechanism(1.0, 1.0).release([0.0, 1.0], noise=SimulationNoise(3))
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("factory", "match"), [
    (lambda: LaplaceMechanism(1.0, 0.0), "epsilon must be > 0"),
    (lambda: LaplaceMechanism(1.0, -1.0), "epsilon must be > 0"),
    (lambda: LaplaceMechanism(0.0, 1.0), "sensitivity must be > 0"),
    (lambda: LaplaceMechanism(1.0, 1.0, model="trusted"), "model must be one of"),
    (lambda: GaussianMechanism(1.0, 0.5, 1.0), r"delta must be in \[0, 1\)"),
    (lambda: GaussianMechanism(1.0, 0.5, -0.1), r"delta must be in \[0, 1\)"),
    (lambda: GaussianMechanism(1.0, 0.5, 0.0), "delta must be > 0 for the Gaussian"),
    (lambda: GaussianMechanism(1.0, 1.0, 1e-5, calibration="classic"),
     "proven only for epsilon < 1"),
    (lambda: GaussianMechanism(1.0, 0.5, 1e-5, calibration="rdp"),
     "calibration must be 'analytic' or 'classic'"),
    (lambda: DiscreteLaplaceMechanism(0, 1.0), "sensitivity must be >= 1"),
    (lambda: polya(1.0, 1.0, 3, 0), r"p must be in \[0, 1\)"),
    (lambda: polya(-1.0, 0.5, 3, 0), "r must be > 0"),
    (lambda: distributed_discrete_laplace_shares(0, 1.0), "n_parties must be >= 1"),
    (lambda: distributed_discrete_laplace_shares(3, 0.0), "epsilon must be > 0"),
    (lambda: LaplaceMechanism(1.0, 1.0).release([1.0, np.nan], 0), "value contains 1 NaN"),
    (lambda: DiscreteLaplaceMechanism(1, 1.0).release([1.5], 0), "whole numbers"),
    (lambda: LaplaceMechanism(1.0, 1.0).release([1.0], 0, noise=SimulationNoise(0)),
     "pass either rng or noise"),
])
def test_bad_inputs_raise(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


def test_bad_types_raise():
    with pytest.raises(TypeError, match="sensitivity must be an integer"):
        DiscreteLaplaceMechanism(1.5, 1.0)
    with pytest.raises(TypeError, match="noise must be a NoiseSource"):
        LaplaceMechanism(1.0, 1.0).release([1.0], noise=np.random.default_rng(0))


# ------------------------------------------------------------- Pólya and shares


def test_polya_matches_negative_binomial():
    r, p = 0.4, 0.75
    draws = polya(r, p, N_SIM, rng=13)
    assert draws.dtype == np.int64 and draws.min() >= 0
    mean, var = r * p / (1 - p), r * p / (1 - p) ** 2
    assert_mean_close(draws.astype(float), mean, var)
    ref = stats.nbinom(r, 1 - p)  # SciPy: P(k) ∝ Γ(k+r)/k! (1-p)^r p^k
    assert ref.mean() == pytest.approx(mean)
    support = np.arange(0, 30)
    assert chisquare_pvalue(draws, support, ref.pmf(support), 0.0, ref.sf(29)) > ALPHA
    assert polya(1.0, 0.5, rng=0).shape == ()


@pytest.mark.parametrize(("n_parties", "epsilon", "sensitivity"), [(10, 1.0, 1), (3, 0.5, 2)])
def test_distributed_shares_sum_to_discrete_laplace(n_parties, epsilon, sensitivity):
    shares = distributed_discrete_laplace_shares(n_parties, epsilon, sensitivity,
                                                 size=N_SIM // 2, rng=17)
    assert shares.shape == (n_parties, N_SIM // 2) and shares.dtype == np.int64
    total = shares.sum(axis=0)
    mech = DiscreteLaplaceMechanism(sensitivity, epsilon)
    assert_mean_close(total.astype(float), 0.0, mech.variance)
    assert_variance_close(total.astype(float), mech.variance, dlap_fourth_moment(mech.t))
    z = np.arange(-20, 21)
    tail = mech.t**21 / (1 + mech.t)
    assert chisquare_pvalue(total, z, mech.pmf(z), tail, tail) > ALPHA
    # One share is X - Y with X, Y ~ Pólya(1/n, t): not discrete Laplace itself. Its odd
    # cumulants cancel and its even cumulants are twice those of the negative binomial.
    var_x, kurt_x = stats.nbinom(1 / n_parties, 1 - mech.t).stats(moments="vk")
    share_var = 2 * float(var_x)
    share_mu4 = 2 * float(kurt_x) * float(var_x) ** 2 + 3 * share_var**2
    assert share_var == pytest.approx(mech.variance / n_parties)
    assert_variance_close(shares[0].astype(float), share_var, share_mu4)


@pytest.mark.parametrize(("epsilon", "delta"), [(1e-12, 0.999), (1e-6, 0.999), (1e-6, 1e-12),
                                                (1000.0, 1e-12)])
def test_analytic_gaussian_calibration_at_extreme_budgets(epsilon, delta):
    # A tiny epsilon with a large delta makes delta(sigma) flat near the root: the final
    # step-up once took millions of evaluations (a hang); the calibration still holds.
    sigma = GaussianMechanism(1.0, epsilon, delta).sigma
    assert gaussian_delta(sigma, 1.0, epsilon) <= delta
    assert gaussian_delta(sigma * (1 - 1e-6), 1.0, epsilon) > delta or sigma < 1e-300
