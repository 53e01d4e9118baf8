"""AUC intervals from the law of the error (issue 24, item 4): the test inversion of a
law that depends on the parameter, and the coverage and bias of the AUC protocols'
releases, by Monte Carlo with tolerances from the number of runs (coverage_check)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize
from scipy import stats as sps

import fedustat
from coverage_check import assert_covers, measure_coverage
from fedustat.privacy.errors import NormalError, inverted_error_law


def _skewed_scores(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.3).astype(np.int64)
    return rng.lognormal(0.0, 1.0, n) * np.exp(0.8 * labels), labels


# ------------------------------------------------------------------ test inversion


def _spread(theta: float) -> float:
    # A standard deviation that grows with the parameter, as dA/dP grows with the AUC.
    return 0.05 + 0.4 * theta


def test_inversion_ends_solve_the_test() -> None:
    law = inverted_error_law(0.3, lambda t: NormalError(0.05 + 0.1 * t))
    half = law.half_width(0.95)
    z = sps.norm.ppf(0.975)
    # The inversion's ends: 0.3 - lo = z s(lo), hi - 0.3 = z s(hi) (s linear, and both
    # ends inside [0, 1] where it is evaluated).
    lo = (0.3 - 0.05 * z) / (1.0 + 0.1 * z)
    hi = (0.3 + 0.05 * z) / (1.0 - 0.1 * z)
    assert half == pytest.approx((hi - lo) / 2.0, rel=1e-9)


def test_inversion_covers_where_the_plug_in_law_does_not() -> None:
    # theta_hat = theta + s(theta) e: the plug-in half-width z s(theta_hat) grows with the
    # error itself (and the range clips it), so it misses 95%; the inversion covers at 95%.
    rng = np.random.default_rng(7)
    theta, runs = 0.5, 2000
    estimates = theta + _spread(theta) * rng.standard_normal(runs)
    z = sps.norm.ppf(0.975)
    plug_in = np.mean(np.abs(estimates - theta)
                      <= z * np.array([_spread(min(max(e, 0.0), 1.0)) for e in estimates]))
    inverted = np.mean([abs(e - theta) <= inverted_error_law(
        e, lambda t: NormalError(_spread(t))).half_width(0.95) for e in estimates])
    tolerance = 4.0 * math.sqrt(0.95 * 0.05 / runs)
    assert abs(plug_in - 0.95) > tolerance
    assert abs(inverted - 0.95) <= tolerance


# ------------------------------------------------------------------ FedAUC


def test_fedauc_laplace_interval_is_the_inversion() -> None:
    """The released half-width is half the width of the test inversion over the AUC
    (one client per sample: many comparable Laplace terms, a normal law)."""
    scores, labels = _skewed_scores(2000, 3)
    est = fedustat.roc_auc_score(labels, scores, epsilon=0.5, protocol="fedauc-laplace",
                                 rng=1)
    d = est.diagnostics
    p, n = d["noisy_pos"], d["noisy_neg"]
    value = est.raw_value

    def half(auc: float) -> float:
        # dA/dG = 1/(PN), dA/dP = -((P - 1/2) + A (N - P)) / (PN) (004 eq. 1); the fixed
        # allocation's G and P noises are independent.
        auc = min(max(auc, 0.0), 1.0)
        g_pos = -((p - 0.5) + auc * (n - p)) / (p * n)
        sd = math.sqrt(d["sum_noise_var"] / (p * n) ** 2 + g_pos**2 * d["pos_noise_var"])
        return float(sps.norm.ppf(0.975) * sd)

    hi = optimize.brentq(lambda a: a - value - half(a), value, value + 10.0)
    lo = optimize.brentq(lambda a: value - a - half(a), value - 10.0, value)
    released = est.error.half_width(0.95)
    assert released == pytest.approx((hi - lo) / 2.0, rel=1e-6)
    # The plug-in half-width at the released AUC (the former interval) differs.
    assert abs(half(value) - released) > 1e-3 * released


@pytest.mark.parametrize(("protocol", "params", "epsilon"), [
    ("fedauc-laplace", {"n_clients": 4}, 1.0),
    ("fedauc-laplace", {"n_clients": 4}, 0.25),
    ("fedauc-gaussian", {"n_clients": 4, "delta": 1e-5}, 1.0),
])
def test_fedauc_coverage_and_bias(protocol: str, params: dict, epsilon: float) -> None:
    scores, labels = _skewed_scores(2000, 11)
    exact = fedustat.roc_auc_score(labels, scores, epsilon=math.inf).value
    params = dict(params)
    delta = params.pop("delta", 0.0)
    releases = []

    def release(seed: int) -> fedustat.Estimate:
        est = fedustat.roc_auc_score(labels, scores, epsilon=epsilon, delta=delta,
                                     protocol=protocol, rng=seed, **params)
        releases.append(est.raw_value)
        return est

    result = measure_coverage(release, exact, runs=400)
    assert_covers(result, exact_interval=True)
    values = np.array(releases)
    z = (values.mean() - exact) / (values.std(ddof=1) / math.sqrt(values.size))
    assert abs(z) < 4.0, f"bias z = {z:.2f}"


# ------------------------------------------------------------------ ldp-quantized


def _report_counts(true_counts: np.ndarray, keep: float, rng: np.random.Generator
                   ) -> np.ndarray:
    """One draw of the k-RR report histogram per group given the true cell counts."""
    m, k = true_counts.shape
    probs = np.full((k, k), (1.0 - keep) / (k - 1))
    np.fill_diagonal(probs, keep)
    return np.stack([rng.multinomial(true_counts[a].astype(np.int64), probs).sum(axis=0)
                     for a in range(m)])


def test_quantized_variance_estimate_is_unbiased_at_small_n_epsilon() -> None:
    """The plain plug-in variance leans high at small n eps^2 (its second-order term):
    the released one subtracts that term, so its mean over report draws is V(h)."""
    from fedustat.protocols.local import quantized_rr as qrr
    from fedustat.protocols.registry import make
    from fedustat.stats import auc_kernel

    rng = np.random.default_rng(5)
    n, eps = 300, 0.5
    labels = (rng.random(n) < 0.3).astype(np.int64)
    cells = np.minimum(np.floor(rng.exponential(2.0, n)) + labels * rng.integers(0, 3, n), 11)
    kernel = auc_kernel()
    protocol = make("ldp-quantized", kernel, epsilon=eps, domain=list(range(12)))
    grid = protocol.grid_for(n)
    matrices = protocol.quantized_kernel_for(grid).matrices
    krr = protocol.randomizer_for(grid)
    true = np.stack([np.bincount(cells[labels == a].astype(np.int64), minlength=12)
                     for a in (0, 1)]).astype(np.float64)
    target = qrr.pair_sum_variance(true, matrices, krr.beta)
    plain, corrected = [], []
    runs = 300
    for _ in range(runs):
        counts = _report_counts(true, krr.keep_probability, rng)
        unbiased = qrr.debiased_histogram(counts, krr.beta, clip=False)
        lin, quad = qrr._variance_terms(unbiased, matrices, krr.beta)
        plain.append(lin + quad)
        corrected.append(lin + quad - qrr.variance_plug_in_bias(unbiased, matrices, krr.beta))
    for values, ok in ((corrected, True), (plain, False)):
        values = np.asarray(values)
        z = (values.mean() - target) / (values.std(ddof=1) / math.sqrt(runs))
        assert bool(abs(z) < 4.0) == ok, f"z = {z:.2f}"


def test_quantized_coverage_on_tied_scores() -> None:
    """Tied scores on their own 12 values (no quantization error): the interval covers
    the AUC at 95% and the raw release is unbiased."""
    rng = np.random.default_rng(2)
    n = 2000
    labels = (rng.random(n) < 0.3).astype(np.int64)
    scores = np.minimum(np.floor(rng.exponential(2.0, n)) + labels * rng.integers(0, 3, n),
                        11.0)
    exact = fedustat.roc_auc_score(labels, scores, epsilon=math.inf).value
    raw = []

    def release(seed: int) -> fedustat.Estimate:
        est = fedustat.roc_auc_score(labels, scores, epsilon=0.5, protocol="ldp-quantized",
                                     domain=list(range(12)), rng=seed)
        raw.append(est.raw_value)
        return est

    assert_covers(measure_coverage(release, exact, runs=300), exact_interval=True)
    values = np.asarray(raw)
    assert abs((values.mean() - exact) / (values.std(ddof=1) / math.sqrt(values.size))) < 4
