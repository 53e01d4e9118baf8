"""The generic LDP protocol (000 Alg. 1): quantizers, quantized kernels, the O(n + k^2)
estimator, its exact variance, unbiasedness, exact LDP of the party randomizer, bad input.

Monte Carlo tolerances are 5 standard errors computed from the exact variance of the
estimator (``pair_sum_variance``), never guessed.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fedustat
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.privacy.noise import SimulationNoise
from fedustat.privacy.randomizers import KaryRandomizedResponse
from fedustat.privacy.verify import verify_ldp
from fedustat.protocols import registry
from fedustat.protocols.local import quantized_rr as lg
from fedustat.protocols.local.quantization import (
    ColumnGrid,
    corollary1_k,
    plan_for_kernel,
    quantize_kernel,
)
from fedustat.runtime.simulate import simulate
from fedustat.stats import (
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
    renyi2_entropy_kernel,
    user_kernel,
    variance_kernel,
    vus_kernel,
)
from fedustat.stats.ustat import ustatistic

# ------------------------------------------------------------------------------ helpers


def _random_blocks(rng: np.random.Generator, m: int, k: int) -> np.ndarray:
    """(m, m, k, k) blocks with A^{ba} = (A^{ab})^T and symmetric diagonal blocks."""
    mats = rng.normal(size=(m, m, k, k))
    return 0.5 * (mats + mats.transpose(1, 0, 3, 2))


def _brute_pair_sum(reports: np.ndarray, groups: np.ndarray, mats: np.ndarray,
                    beta: float) -> float:
    """sum_{i<j} g(R_i)^T A^{a_i a_j} g(R_j) by the O(n^2) double loop of 001 App. A.1."""
    k = mats.shape[-1]
    b = beta / k
    g = (np.eye(k)[reports] - b) / (1.0 - beta)
    total = 0.0
    for i in range(len(reports)):
        for j in range(i + 1, len(reports)):
            total += g[i] @ mats[groups[i], groups[j]] @ g[j]
    return total


def _counts(reports: np.ndarray, groups: np.ndarray, m: int, k: int) -> np.ndarray:
    return np.bincount(groups * k + reports, minlength=m * k).reshape(m, k)


def _exact_moments(cells: np.ndarray, groups: np.ndarray, mats: np.ndarray,
                   epsilon: float) -> tuple[float, float]:
    """Mean and variance of the pair sum by enumerating every vector of reports."""
    m, k = mats.shape[0], mats.shape[-1]
    rr = KaryRandomizedResponse(k, epsilon)
    probs = rr.output_distribution(cells)
    mean = second = 0.0
    for reports in itertools.product(range(k), repeat=len(cells)):
        rep = np.array(reports)
        p = float(np.prod(probs[np.arange(len(cells)), rep]))
        w = lg.pair_sum(_counts(rep, groups, m, k), mats, rr.beta)
        mean += p * w
        second += p * w * w
    return mean, second - mean**2


def _true_pair_sum(cells: np.ndarray, groups: np.ndarray, mats: np.ndarray) -> float:
    total = 0.0
    for i in range(len(cells)):
        for j in range(i + 1, len(cells)):
            total += mats[groups[i], groups[j], cells[i], cells[j]]
    return total


# ------------------------------------------------------------------------------ estimator


@pytest.mark.parametrize(("m", "k", "n", "epsilon"), [(1, 5, 40, 1.0), (2, 4, 35, 0.5),
                                                      (3, 3, 25, 3.0), (1, 256, 60, 1.0)])
def test_histogram_estimator_equals_pairwise_sum(m: int, k: int, n: int, epsilon: float) -> None:
    rng = np.random.default_rng(11)
    mats = _random_blocks(rng, m, k)
    reports = rng.integers(0, k, n)
    groups = rng.integers(0, m, n)
    beta = KaryRandomizedResponse(k, epsilon).beta
    fast = lg.pair_sum(_counts(reports, groups, m, k), mats, beta)
    slow = _brute_pair_sum(reports, groups, mats, beta)
    assert fast == pytest.approx(slow, rel=1e-9, abs=1e-9 * max(1.0, abs(slow)))


@settings(deadline=None, max_examples=40, derandomize=True)
@given(n=st.integers(2, 25), k=st.integers(2, 7), m=st.integers(1, 3),
       epsilon=st.floats(0.1, 5.0), seed=st.integers(0, 2**31 - 1))
def test_histogram_estimator_property(n: int, k: int, m: int, epsilon: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    mats = _random_blocks(rng, m, k)
    reports = rng.integers(0, k, n)
    groups = rng.integers(0, m, n)
    beta = KaryRandomizedResponse(k, epsilon).beta
    slow = _brute_pair_sum(reports, groups, mats, beta)
    fast = lg.pair_sum(_counts(reports, groups, m, k), mats, beta)
    scale = max(1.0, float(np.abs(mats).max()) * n * n / (1.0 - beta) ** 2)
    assert abs(fast - slow) <= 1e-9 * scale


def test_pair_sum_without_randomization_is_the_quantized_u_statistic() -> None:
    rng = np.random.default_rng(3)
    mats = _random_blocks(rng, 2, 4)
    cells, groups = rng.integers(0, 4, 30), rng.integers(0, 2, 30)
    assert lg.pair_sum(_counts(cells, groups, 2, 4), mats, 0.0) == pytest.approx(
        _true_pair_sum(cells, groups, mats), rel=1e-12)


@pytest.mark.parametrize(("cells", "groups", "m", "k", "epsilon"), [
    ([0, 1, 2, 2], [0, 0, 0, 0], 1, 3, 1.0),
    ([0, 1, 1, 0], [0, 0, 1, 1], 2, 2, 0.7),
    ([1, 1, 0, 2, 2], [0, 1, 1, 0, 1], 2, 3, 2.0),
])
def test_exact_variance_and_unbiasedness_by_enumeration(cells: list[int], groups: list[int],
                                                       m: int, k: int, epsilon: float) -> None:
    rng = np.random.default_rng(5)
    mats = _random_blocks(rng, m, k)
    cells_a, groups_a = np.array(cells), np.array(groups)
    mean, var = _exact_moments(cells_a, groups_a, mats, epsilon)
    # Unbiased for the pair sum of the quantized kernel on the true cells (001 App. A.1).
    assert mean == pytest.approx(_true_pair_sum(cells_a, groups_a, mats), rel=1e-9, abs=1e-9)
    beta = KaryRandomizedResponse(k, epsilon).beta
    formula = lg.pair_sum_variance(_counts(cells_a, groups_a, m, k), mats, beta)
    assert formula == pytest.approx(var, rel=1e-9)


def test_debiased_histogram_is_unbiased_count_estimate() -> None:
    rr = KaryRandomizedResponse(4, 1.0)
    counts = np.array([10, 20, 30, 40])
    expected = counts @ rr.output_distribution(np.arange(4))
    assert lg.debiased_histogram(expected, rr.beta, clip=False) == pytest.approx(counts)
    clipped = lg.debiased_histogram(np.array([0, 0, 0, 100]), rr.beta)
    assert clipped.min() >= 0 and clipped.sum() == pytest.approx(100)


# ------------------------------------------------------------------------------ theory


def test_theorem_bounds_and_corollary() -> None:
    n, k, eps = 1000, 10, 1.0
    beta = k / (k + math.e - 1)
    thm1 = 1 / (n * (1 - beta) ** 2) + (1 + beta) ** 2 / (2 * n * (n - 1) * (1 - beta) ** 4)
    assert lg.theorem1_variance_bound(n, k, eps) == pytest.approx(thm1, rel=1e-12)
    assert lg.theorem1_variance_bound(n, k, eps, (-1, 1)) == pytest.approx(4 * thm1)
    assert lg.theorem2_mse_bound(n, k, eps, lipschitz=1.0) == pytest.approx(
        thm1 + 1 / (2 * k**2))
    assert lg.theorem2_mse_bound(n, k, eps, density_lipschitz=0.5) == pytest.approx(
        thm1 + 4 * 0.25 / k**2 + 4 * 0.0625 / k**4)
    assert corollary1_k(10**8, 1.0) == 100
    assert corollary1_k(10**4, 0.25, 4.0) == 10
    assert corollary1_k(3, 0.01) == 2
    with pytest.raises(ValueError, match="exactly one of"):
        lg.theorem2_mse_bound(n, k, eps)


# ------------------------------------------------------------------------------ kernels


def test_closed_form_quantized_kernels_match_numerical_ones() -> None:
    replicas = {
        "gini": (gini_kernel((0, 2)), user_kernel(lambda a, b: np.abs(a[:, 0] - b[:, 0]), 2,
                                                  "x", (0, 2), lipschitz=1.0), (0, 2)),
        "variance": (variance_kernel((0, 1)), user_kernel(
            lambda a, b: 0.5 * (a[:, 0] - b[:, 0]) ** 2, 2, "x", (0, 0.5)), (0, 1)),
    }
    for closed, numeric, bounds in replicas.values():
        grid = plan_for_kernel(closed, k=6).grid()
        ngrid = plan_for_kernel(numeric, k=6, bounds=bounds).grid()
        for method in ("mid", "avg"):
            exact = quantize_kernel(closed, grid, method)
            approx = quantize_kernel(numeric, ngrid, method, max_evaluations=2_000_000)
            assert exact.exact and not approx.exact
            tol = 1e-9 if method == "mid" else 2 * approx.accuracy + 1e-9
            np.testing.assert_allclose(approx.matrices, exact.matrices, atol=tol)
            np.testing.assert_allclose(approx.spread, exact.spread, atol=1e-9)
    kt = kendall_tau_kernel("a")
    sign2 = user_kernel(lambda a, b: np.sign(a[:, 0] - b[:, 0]) * np.sign(a[:, 1] - b[:, 1]),
                        2, ("x", "y"), (-1, 1))
    for method in ("mid", "avg"):
        exact = quantize_kernel(kt, plan_for_kernel(kt, k=3, bounds=[(0, 1), (0, 1)]).grid(),
                                method)
        approx = quantize_kernel(sign2, plan_for_kernel(sign2, k=3,
                                                        bounds=[(0, 1), (0, 1)]).grid(), method)
        np.testing.assert_allclose(approx.matrices, exact.matrices, atol=1e-12)


def test_gini_quantized_kernels_values() -> None:
    grid = plan_for_kernel(gini_kernel((0, 1)), k=4).grid()
    np.testing.assert_allclose(grid.representatives()[:, 0], [1 / 8, 3 / 8, 5 / 8, 7 / 8])
    mid = quantize_kernel(gini_kernel((0, 1)), grid, "mid").matrices[0, 0]
    avg = quantize_kernel(gini_kernel((0, 1)), grid, "avg").matrices[0, 0]
    # 001 eq. 14: (sup + inf)/2 = w/2 on a bin; eq. 15: E|X - Y| = w/3; off the diagonal
    # both are the distance between centres.
    np.testing.assert_allclose(np.diag(mid), 0.125)
    np.testing.assert_allclose(np.diag(avg), 0.25 / 3)
    np.testing.assert_allclose(mid[0, 3], 0.75)
    np.testing.assert_allclose(avg[0, 3], 0.75)


def test_midpoint_kernel_error_is_within_the_spread() -> None:
    kernel = gini_kernel((0, 1))
    grid = plan_for_kernel(kernel, k=5).grid()
    qk = quantize_kernel(kernel, grid, "mid")
    rng = np.random.default_rng(2)
    x, y = rng.random(5000), rng.random(5000)
    cx, cy = grid.encode(x[:, None]), grid.encode(y[:, None])
    err = np.abs(np.abs(x - y) - qk.matrices[0, 0, cx, cy])
    assert np.all(err <= np.sqrt(qk.spread[0, 0, cx, cy]) + 1e-12)


def test_auc_blocks_follow_the_labels() -> None:
    kernel = auc_kernel()
    grid = plan_for_kernel(kernel, k=3, bounds=(0, 1)).grid()
    qk = quantize_kernel(kernel, grid, "mid")
    assert grid.n_groups == 2 and grid.size == 3
    np.testing.assert_allclose(qk.matrices[1, 0], [[0.5, 0, 0], [1, 0.5, 0], [1, 1, 0.5]])
    np.testing.assert_allclose(qk.matrices[0, 1], qk.matrices[1, 0].T)
    np.testing.assert_allclose(qk.matrices[0, 0], 0.0)


def test_numerical_average_kernel_warns_when_inaccurate() -> None:
    # A symmetric, discontinuous kernel: the midpoint rule converges slowly on it.
    step = user_kernel(lambda a, b: (np.abs(a[:, 0] - b[:, 0]) < 0.1).astype(float),
                       2, "x", (0, 1))
    grid = plan_for_kernel(step, k=4, bounds=(0, 1)).grid()
    with pytest.warns(UserWarning, match="average kernel"):
        qk = quantize_kernel(step, grid, "avg", max_evaluations=4 * 4 * 36, avg_tol=1e-6)
    assert qk.accuracy > 1e-6 and qk.nodes == 6


# ------------------------------------------------------------------------------ quantizers


def test_randomized_rounding_is_unbiased_between_centres() -> None:
    col = ColumnGrid.continuous("x", (0.0, 1.0), 4)
    centres = col.representatives()
    for x in (0.2, 0.5, 0.61, 0.875):
        probs = col.code_probabilities(x, randomized=True)
        assert probs.sum() == pytest.approx(1.0)
        assert probs @ centres == pytest.approx(x)
    noise = SimulationNoise(4)
    draws = 200_000
    codes = col.encode(np.full(draws, 0.3), randomized=True, noise=noise)
    p_up = col.code_probabilities(0.3, randomized=True)[1]
    tol = 5 * math.sqrt(p_up * (1 - p_up) / draws)
    assert abs(np.mean(codes == 1) - p_up) <= tol


def test_product_grid_codes_are_mixed_radix() -> None:
    kt = kendall_tau_kernel("a")
    grid = plan_for_kernel(kt, domain=[[1, 2, 3], [10, 20]]).grid()
    rows = np.array([[1, 10], [1, 20], [3, 20], [2, 10]], dtype=float)
    np.testing.assert_array_equal(grid.encode(rows), [0, 1, 5, 2])
    np.testing.assert_allclose(grid.representatives()[5], [3, 20])


# ------------------------------------------------------------------------------ privacy


def _check_ldp(protocol: lg.QuantizedRandomizedResponse, inputs: list, epsilon: float) -> None:
    result = verify_ldp(protocol.report_distribution, inputs=inputs, epsilon=epsilon)
    assert result.passed, str(result)
    assert result.observed_epsilon == pytest.approx(epsilon, rel=1e-9)
    assert not verify_ldp(protocol.report_distribution, inputs=inputs,
                          epsilon=0.99 * epsilon).passed


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_party_randomizer_is_exactly_epsilon_ldp(epsilon: float) -> None:
    values = [[v] for v in np.linspace(0.0, 1.0, 23)]
    _check_ldp(lg.QuantizedRandomizedResponse(gini_kernel((0, 1)), epsilon, k=6), values,
               epsilon)
    _check_ldp(lg.QuantizedRandomizedResponse(gini_kernel((0, 1)), epsilon, k=6,
                                              quantizer="randomized"), values, epsilon)
    kt = kendall_tau_kernel("a")
    grid_inputs = [[y, z] for y in (1, 2, 3) for z in (1, 2, 3)]
    _check_ldp(lg.QuantizedRandomizedResponse(kt, epsilon, domain=[[1, 2, 3], [1, 2, 3]]),
               grid_inputs, epsilon)
    mixed = [[y, z] for y in (0.0, 0.4, 0.9) for z in (1, 2)]
    _check_ldp(lg.QuantizedRandomizedResponse(kt, epsilon, k=3, bounds=[(0, 1), None],
                                              domain=[None, [1, 2]]), mixed, epsilon)
    # AUC: the score is protected, the label is public (fixed here).
    auc_inputs = [[s, 1.0] for s in np.linspace(0, 1, 9)]
    _check_ldp(lg.QuantizedRandomizedResponse(auc_kernel(), epsilon, k=4, bounds=(0, 1)),
               auc_inputs, epsilon)


def test_randomized_rounding_mixes_two_rows() -> None:
    proto = lg.QuantizedRandomizedResponse(gini_kernel((0, 1)), 1.0, k=4,
                                           quantizer="randomized")
    rr = KaryRandomizedResponse(4, 1.0)
    dist = proto.report_distribution([0.5])  # halfway between centres 3/8 and 5/8
    np.testing.assert_allclose(dist, 0.5 * rr.output_distribution(1)
                               + 0.5 * rr.output_distribution(2))


def test_guarantee_and_registry() -> None:
    proto = registry.make("ldp-quantized", gini_kernel((0, 1)), epsilon=2.0, k=8)
    assert isinstance(proto, lg.QuantizedRandomizedResponse)
    g = proto.guarantee
    assert (g.epsilon, g.delta, g.model, g.adjacency) == (2.0, 0.0, PrivacyModel.LOCAL,
                                                          "any two inputs of one party")
    auc = lg.QuantizedRandomizedResponse(auc_kernel(), 1.0, k=4, bounds=(0, 1))
    assert "labels and class sizes public" in auc.guarantee.adjacency


# ------------------------------------------------------------------------------ end to end


def _monte_carlo(protocol: lg.QuantizedRandomizedResponse, data: np.ndarray,
                 runs: int, seed: int) -> np.ndarray:
    root = np.random.SeedSequence(seed)
    return np.array([simulate(protocol, data, rng=s).diagnostics["u_statistic"]
                     for s in root.spawn(runs)])


def _exact_target(protocol: lg.QuantizedRandomizedResponse, data: np.ndarray
                  ) -> tuple[float, float]:
    """U of the quantized kernel on the true cells, and the exact variance of U_hat."""
    grid = protocol.grid_for(data.shape[0])
    qk = protocol.quantized_kernel_for(grid)
    counts = _counts(grid.encode(data), grid.groups(data), grid.n_groups, grid.size)
    pairs = data.shape[0] * (data.shape[0] - 1) / 2
    beta = protocol.randomizer_for(grid).beta
    return (lg.pair_sum(counts, qk.matrices, 0.0) / pairs,
            lg.pair_sum_variance(counts, qk.matrices, beta) / pairs**2)


def _assert_mc(draws: np.ndarray, target: float, variance: float) -> None:
    runs = draws.size
    assert abs(draws.mean() - target) <= 5 * math.sqrt(variance / runs)
    # The sample variance agrees with the exact one within 5 of its standard errors.
    centred = draws - draws.mean()
    m4 = np.mean(centred**4)
    se_var = math.sqrt(max(m4 - variance**2, 0.0) / runs)
    assert abs(np.var(draws, ddof=1) - variance) <= 5 * se_var


def test_unbiased_gini_by_monte_carlo() -> None:
    rng = np.random.default_rng(21)
    data = rng.beta(2.0, 5.0, 1500)[:, None]
    proto = lg.QuantizedRandomizedResponse(gini_kernel((0, 1)), 1.0, k=8)
    target, variance = _exact_target(proto, data)
    assert variance <= lg.theorem1_variance_bound(1500, 8, 1.0)
    _assert_mc(_monte_carlo(proto, data, 300, 1), target, variance)


def test_unbiased_kendall_ratings_by_monte_carlo() -> None:
    rng = np.random.default_rng(22)
    y = rng.integers(1, 7, 1200)
    z = np.clip(y + rng.integers(-1, 2, 1200), 1, 6)
    kt = kendall_tau_kernel("a")
    data = kt.pack(y, z)
    proto = lg.QuantizedRandomizedResponse(kt, 3.0, domain=[range(1, 7), range(1, 7)])
    target, variance = _exact_target(proto, data)
    # Discrete cells: the quantized kernel is the kernel, so the target is tau-a itself.
    assert target == pytest.approx(ustatistic(kt, data), rel=1e-12)
    _assert_mc(_monte_carlo(proto, data, 300, 2), target, variance)


def test_unbiased_auc_with_public_labels_by_monte_carlo() -> None:
    rng = np.random.default_rng(23)
    labels = rng.integers(0, 2, 1500)
    scores = np.clip(rng.normal(0.4 + 0.2 * labels, 0.2), 0, 1)
    kernel = auc_kernel()
    data = kernel.pack(scores, labels)
    proto = lg.QuantizedRandomizedResponse(kernel, 2.0, k=6, bounds=(0, 1))
    target, variance = _exact_target(proto, data)
    _assert_mc(_monte_carlo(proto, data, 300, 3), target, variance)
    est = simulate(proto, data, rng=9)
    assert est.value == pytest.approx(est.diagnostics["u_statistic"] * 1500 * 1499 / 2
                                      / (labels.sum() * (1500 - labels.sum())))


def _soft_moments(q: np.ndarray, a: np.ndarray, beta: float) -> tuple[float, float]:
    """Mean and variance of the pair sum when party i's cell is drawn from q[i].

    Each report is then drawn from pi_i = q_i P (P the k-RR matrix), independently across
    parties, and E g(R_i) = q_i; the variance is sum_i w_i^T C_i w_i +
    sum_{i<j} tr(A C_j A C_i) with C_i = Cov g(R_i) and w_i = A sum_{j != i} q_j, computed
    here party by party (O(n k^2)), independently of the O(k^2) histogram formula.
    """
    k = q.shape[1]
    b = beta / k
    pi = q * (1 - beta) + b
    cov = (np.einsum("ij,jk->ijk", pi, np.eye(k)) - np.einsum("ij,ik->ijk", pi, pi)) / (
        1 - beta) ** 2
    tot = q.sum(axis=0)
    mean = 0.5 * (tot @ a @ tot - np.einsum("ik,kl,il->", q, a, q))
    w = (tot[None, :] - q) @ a
    var_lin = np.einsum("ij,ijk,ik->", w, cov, w)
    s = cov.sum(axis=0)
    acov = np.einsum("kl,ilm->ikm", a, cov)
    own = np.einsum("ikm,imk->", acov, acov)
    var_quad = 0.5 * (np.trace(a @ s @ a @ s) - own)
    return mean, var_lin + var_quad


def test_histogram_variance_matches_the_per_party_formula() -> None:
    rng = np.random.default_rng(31)
    mats = _random_blocks(rng, 1, 6)
    cells = rng.integers(0, 6, 400)
    beta = KaryRandomizedResponse(6, 0.8).beta
    mean, var = _soft_moments(np.eye(6)[cells], mats[0, 0], beta)
    counts = np.bincount(cells, minlength=6)
    assert mean == pytest.approx(lg.pair_sum(counts, mats, 0.0), rel=1e-10)
    assert var == pytest.approx(lg.pair_sum_variance(counts, mats, beta), rel=1e-10)


def test_randomized_rounding_estimates_the_expected_quantized_statistic() -> None:
    rng = np.random.default_rng(24)
    n = 1000
    x = rng.random(n)
    proto = lg.QuantizedRandomizedResponse(gini_kernel((0, 1)), 2.0, k=5,
                                           quantizer="randomized")
    grid = proto.grid_for(n)
    a = proto.quantized_kernel_for(grid).matrices[0, 0]
    q = np.array([grid.code_probabilities([v]) for v in x])
    mean, var = _soft_moments(q, a, proto.randomizer_for(grid).beta)
    pairs = n * (n - 1) / 2
    _assert_mc(_monte_carlo(proto, x[:, None], 300, 4), mean / pairs, var / pairs**2)


def _plug_in_relative_sd(counts: np.ndarray, mats: np.ndarray, beta: float) -> float:
    """Delta-method sd of sqrt(V(h_hat)) / sqrt(V(h)) for the debiased histogram h_hat.

    h_hat = (c - n b)/(1 - beta) has covariance sum_v h_v (diag(p_v) - p_v p_v^T)/(1-beta)^2;
    the gradient of V is taken by central differences (V is a cubic in h).
    """
    k = counts.size
    variance = lg.pair_sum_variance(counts, mats, beta)
    grad = np.empty(k)
    for v in range(k):
        step = np.zeros(k)
        step[v] = 0.5
        grad[v] = (lg.pair_sum_variance(counts + step, mats, beta)
                   - lg.pair_sum_variance(counts - step, mats, beta))
    p = (1 - beta) * np.eye(k) + beta / k
    cov = sum(c * (np.diag(p[v]) - np.outer(p[v], p[v])) for v, c in enumerate(counts))
    return 0.5 * math.sqrt(grad @ cov @ grad / (1 - beta) ** 2) / variance


def test_reported_std_error_tracks_the_exact_one() -> None:
    rng = np.random.default_rng(25)
    n = 20000
    data = rng.random(n)[:, None]
    proto = lg.QuantizedRandomizedResponse(gini_kernel((0, 1)), 1.0, k=10)
    grid = proto.grid_for(n)
    mats = proto.quantized_kernel_for(grid).matrices
    beta = proto.randomizer_for(grid).beta
    counts = np.bincount(grid.encode(data), minlength=10).astype(float)
    exact_se = math.sqrt(lg.pair_sum_variance(counts, mats, beta)) / (n * (n - 1) / 2)
    rel_sd = _plug_in_relative_sd(counts, mats, beta)
    est = simulate(proto, data, rng=5)
    # The plug-in is the exact formula at the debiased histogram: its relative error is
    # within 5 delta-method standard deviations.
    assert abs(est.diagnostics["u_std_error"] / exact_se - 1) <= 5 * rel_sd
    assert est.std_error == est.diagnostics["u_std_error"]
    lo, hi = est.confidence_interval(0.95)
    assert lo < est.value < hi


def test_default_k_from_corollary_counts_the_parties_first() -> None:
    rng = np.random.default_rng(26)
    x = rng.random(4096)
    est = fedustat.estimate(gini_kernel((0, 1)), x, protocol="ldp-quantized", epsilon=1.0,
                            rng=3)
    k = corollary1_k(4096, 1.0, 1.0)
    assert est.diagnostics["k"] == k == 8
    assert est.cost.rounds == 3  # check-in, bins broadcast, reports
    assert est.cost.bits_per_party == 1 + 3
    given = fedustat.estimate(gini_kernel((0, 1)), x, protocol="ldp-quantized", epsilon=1.0,
                              rng=3, n_parties=4096)
    assert given.cost.rounds == 1 and given.diagnostics["k"] == 8
    assert given.diagnostics["theorem2_mse_bound"] == pytest.approx(
        lg.theorem2_mse_bound(4096, 8, 1.0, lipschitz=1.0))


def test_public_api_and_costs() -> None:
    rng = np.random.default_rng(27)
    x = rng.integers(0, 11, 5000)
    est = fedustat.duplicate_pair_ratio(x, epsilon=1.0, protocol="ldp-quantized", k=11, rng=4)
    assert est.protocol == "ldp-quantized" and est.quantity == "duplicate_pair_ratio"
    assert est.cost.bits_per_party == 4 and est.cost.rounds == 1
    assert est.cost.server_operations == 5000 + 11 * 11
    assert est.diagnostics["quantization_delta_estimate"] == 0.0
    same = fedustat.duplicate_pair_ratio(x, epsilon=1.0, protocol="ldp-quantized", k=11, rng=4)
    assert same.value == est.value
    ren = fedustat.estimate(renyi2_entropy_kernel(), x, protocol="ldp-quantized",
                            epsilon=1.0, domain=list(range(11)), rng=4)
    assert ren.value == pytest.approx(-math.log(ren.diagnostics["u_statistic"]))
    assert ren.std_error == pytest.approx(ren.diagnostics["u_std_error"]
                                          / ren.diagnostics["u_statistic"], rel=1e-5)
    batched = fedustat.estimate(gini_kernel((0, 1)), rng.random(3000), protocol="ldp-quantized",
                                epsilon=1.0, k=16, rng=1, batch_size=700)
    assert batched.cost.bits_per_party == 4


def test_evaluate_quantization_reports_remark4() -> None:
    rng = np.random.default_rng(28)
    x = rng.random(3000)
    proto = lg.QuantizedRandomizedResponse(gini_kernel((0, 1)), 1.0, k=16)
    out = lg.evaluate_quantization(proto, x)
    assert out["u_exact"] == pytest.approx(ustatistic(gini_kernel((0, 1)), x[:, None]))
    assert abs(out["quantization_error"]) <= out["quantization_error_bound"]
    # Midpoint kernel on 16 bins of width w: Delta_ij = w^2/4 on a bin and w^2 off it.
    assert 0 < out["delta"] <= (1 / 16) ** 2
    est = simulate(proto, x[:, None], rng=2)
    delta_hat = est.diagnostics["quantization_delta_estimate"]
    # The report-based Delta is the same unbiased estimator applied to the spread matrix.
    grid = proto.grid_for(3000)
    spread = proto.quantized_kernel_for(grid).spread
    counts = _counts(grid.encode(x[:, None]), np.zeros(3000, int), 1, 16)
    var = lg.pair_sum_variance(counts, spread, proto.randomizer_for(grid).beta) / (
        3000 * 2999 / 2) ** 2
    assert abs(delta_hat - out["delta"]) <= 5 * math.sqrt(var)


# ------------------------------------------------------------------------------ bad input


def test_bad_inputs_fail_loudly() -> None:
    gini = gini_kernel((0, 1))
    with pytest.raises(ValueError, match="outside the declared bounds"):
        fedustat.estimate(user_kernel(lambda a, b: np.abs(a[:, 0] - b[:, 0]), 2, "x", (0, 1)),
                          [0.1, 0.5, 1.5], protocol="ldp-quantized", epsilon=1.0, k=4,
                          bounds=(0, 1))
    with pytest.raises(ValueError, match="outside the declared bounds"):
        simulate(lg.QuantizedRandomizedResponse(gini, 1.0, k=4), np.array([0.2, 1.2]), rng=0)
    with pytest.raises(ValueError, match="not in the declared domain: 7"):
        fedustat.duplicate_pair_ratio([1, 2, 7, 2], epsilon=1.0, protocol="ldp-quantized",
                                      domain=[1, 2, 3], rng=0)
    with pytest.raises(ValueError, match="label must be binary"):
        fedustat.roc_auc_score([0, 1, 2], [0.1, 0.2, 0.3], epsilon=1.0,
                               protocol="ldp-quantized", k=4, bounds=(0, 1))
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        lg.QuantizedRandomizedResponse(gini, 0.0, k=4)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        fedustat.estimate(gini, [0.1, 0.2], protocol="ldp-quantized", epsilon=-1.0, k=4)
    with pytest.raises(ValueError, match="needs a finite budget"):
        fedustat.estimate(gini, [0.1, 0.2], protocol="ldp-quantized", epsilon=math.inf, k=4)
    with pytest.raises(ValueError, match="needs declared bounds"):
        lg.QuantizedRandomizedResponse(user_kernel(lambda a, b: a[:, 0] * 0, 2, "x", (0, 1)),
                                       1.0)
    with pytest.raises(ValueError, match="discrete domain"):
        lg.QuantizedRandomizedResponse(duplicate_pair_kernel(), 1.0, bounds=(0, 1), k=4)
    with pytest.raises(ValueError, match="degree 3"):
        lg.QuantizedRandomizedResponse(vus_kernel(), 1.0, k=4, bounds=(0, 1))
    with pytest.raises(ValueError, match="tau-b"):
        lg.QuantizedRandomizedResponse(kendall_tau_kernel("b"), 1.0, k=4,
                                       bounds=[(0, 1), (0, 1)])
    with pytest.raises(ValueError, match="quantized_kernel='center'"):
        lg.QuantizedRandomizedResponse(gini, 1.0, k=4, quantizer="randomized",
                                       quantized_kernel="mid")
    with pytest.raises(ValueError, match="quantizer must be one of"):
        lg.QuantizedRandomizedResponse(gini, 1.0, k=4, quantizer="floor")
    with pytest.raises(ValueError, match="k for column 'x' must be >= 2"):
        lg.QuantizedRandomizedResponse(gini, 1.0, k=1)
    with pytest.raises(ValueError, match="must be given per column"):
        lg.QuantizedRandomizedResponse(kendall_tau_kernel("a"), 1.0, domain=[1, 2, 3])
    with pytest.raises(ValueError, match="lists a value more than once"):
        lg.QuantizedRandomizedResponse(duplicate_pair_kernel(), 1.0, domain=[1, 2, 2])
    with pytest.raises(ValueError, match="public only when the labels are"):
        lg.QuantizedRandomizedResponse(auc_kernel(), 1.0, k=4, bounds=(0, 1), public_columns=(),
                                       domain={"label": [0, 1]})
    with pytest.raises(ValueError, match="every private column is discrete"):
        lg.QuantizedRandomizedResponse(duplicate_pair_kernel(), 1.0, k=5, domain=[1, 2, 3])
    with pytest.raises(ValueError, match="k is not fixed yet"):
        lg.QuantizedRandomizedResponse(gini, 1.0).report_distribution([0.5])


def test_deployment_noise_path() -> None:
    pytest.importorskip("opendp")
    from fedustat.privacy.noise import DeploymentNoise

    x = np.linspace(0.0, 1.0, 30)
    for quantizer in ("round", "randomized"):
        proto = lg.QuantizedRandomizedResponse(gini_kernel((0, 1)), 1.0, k=4,
                                               quantizer=quantizer, noise=DeploymentNoise())
        est = simulate(proto, x)
        assert est.diagnostics["party_noise"] == "deployment"
        assert est.cost.bits_per_party == 2


# ------------------------------------------------------------------ standard error (issue 12)


def test_standard_error_is_right_at_small_epsilon_issue_case() -> None:
    """Gini of Beta(2,5), n = 2000, k = 16, eps = 1: the s.e. evaluated at the clipped
    histogram was 0.066 against an exact 0.082 (coverage 0.88). At the unbiased histogram
    the mean reported s.e. matches the exact s.d. and the interval covers."""
    from coverage_check import Coverage, Z, assert_covers

    rng = np.random.default_rng(1)
    x = rng.beta(2.0, 5.0, size=2000)
    kernel = gini_kernel((0.0, 1.0))
    proto = registry.make("ldp-quantized", kernel, epsilon=1.0, k=16)
    n = x.size
    grid = proto.grid_for(n)
    qk = proto.quantized_kernel_for(grid)
    krr = proto.randomizer_for(grid)
    cells = grid.encode(x[:, None], SimulationNoise(np.random.default_rng(0)))
    true_counts = np.bincount(cells, minlength=grid.size).astype(np.float64)
    pairs = n * (n - 1) / 2.0
    exact_sd = math.sqrt(lg.pair_sum_variance(true_counts, qk.matrices, krr.beta)) / pairs
    exact = ustatistic(kernel, x)
    runs = 600
    ses, covered = [], 0
    for seed in range(runs):
        est = simulate(proto, x, rng=seed)
        low, high = est.confidence_interval(0.95)
        covered += int(low <= exact <= high)
        ses.append(est.std_error)
    # The reported s.e. varies by about 0.018 from run to run (measured); its mean over
    # the runs is within Z of those standard errors of the exact s.d. or above it (the
    # plug-in leans high), never 19% below as before.
    assert np.mean(ses) >= exact_sd - Z * 0.02 / math.sqrt(runs)
    assert_covers(Coverage(covered, runs, 0.95))


def test_ldp_protocols_state_that_no_one_is_trusted() -> None:
    from fedustat.privacy.guarantee import Trust

    for name in ("ldp-quantized", "ldp-ghazi"):
        proto = registry.make(name, gini_kernel((0.0, 1.0)), epsilon=1.0, k=4)
        assert [a.kind for a in proto.guarantee.assumptions] == [Trust.LOCAL]
