"""Tests for fedustat.privacy.frequency_oracles (subset selection, the chooser) and the
FrequencyOracle interface of the one-bit Hadamard response.

Privacy is checked exactly (every output probability of every input, small domains).
Monte Carlo checks use R seeded replications: a mean within 5 standard errors
sqrt(Var/R) and a sample variance within 5 sqrt((mu4 - Var^2)/R), with mu4 the exact
fourth central moment of a sum of independent two-point variables. The sampler's law is
compared subset by subset with the exact distribution, within 5 binomial standard errors.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedustat.privacy import DeploymentNoise, HadamardResponse, verify_ldp
from fedustat.privacy.frequency_oracles import (
    ORACLES,
    LocalHashing,
    SubsetSelection,
    best_frequency_oracle,
    frequency_oracle,
    subset_selection_moments,
)
from fedustat.privacy.randomizers import OracleSummary


def bernoulli_sum_moments(probs: np.ndarray, scale: float) -> tuple[float, float]:
    """Variance and mu4 - variance^2 of sum_i scale * B_i, B_i ~ Bernoulli(probs_i)."""
    v = probs * (1 - probs)
    kappa4 = v * (1 - 6 * v)  # fourth cumulant of a Bernoulli
    variance = scale**2 * v.sum()
    mu4 = scale**4 * kappa4.sum() + 3 * variance**2
    return variance, mu4 - variance**2


# ------------------------------------------------------------ exact LDP verification


@pytest.mark.parametrize(("d", "k"), [(2, 1), (4, 1), (4, 2), (5, 2), (6, 3), (8, 5)])
@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_subset_selection_passes_exact_ldp_check(d, k, epsilon):
    ss = SubsetSelection(d, epsilon, k)
    result = verify_ldp(ss)
    assert result.passed, str(result)
    # The ratio e^eps is attained (a subset holding x vs one without it).
    assert result.observed_epsilon == pytest.approx(epsilon, rel=1e-9)
    assert result.n_outputs == math.comb(d, k)
    # A smaller claim fails: the check can fail.
    assert not verify_ldp(ss, epsilon=0.9 * epsilon).passed


def test_subset_selection_output_distribution_matches_the_formulas():
    d, eps, k = 7, 1.3, 3
    ss = SubsetSelection(d, eps, k)
    probs = ss.output_distribution(np.arange(d))
    subsets = list(itertools.combinations(range(d), k))
    member = np.array([[v in s for s in subsets] for v in range(d)], dtype=float)
    # P(v in S | x = v) = p and P(v in S | x = u != v) = q for every pair.
    inclusion = probs @ member.T
    np.testing.assert_allclose(np.diag(inclusion), ss.include_probability, rtol=1e-12)
    off = inclusion[~np.eye(d, dtype=bool)]
    np.testing.assert_allclose(off, ss.other_probability, rtol=1e-12)


@pytest.mark.parametrize("noise", ["simulation", "deployment"])
def test_subset_selection_sampler_has_the_stated_law(noise):
    d, eps, k, x = 6, 0.8, 2, 4
    ss = SubsetSelection(d, eps, k)
    reps = 100_000 if noise == "simulation" else 20_000
    source = DeploymentNoise() if noise == "deployment" else np.random.default_rng(11)
    reports = ss.randomize(np.full(reps, x), source)
    subsets = list(itertools.combinations(range(d), k))
    index = {s: i for i, s in enumerate(subsets)}
    freq = np.bincount([index[tuple(r)] for r in reports], minlength=len(subsets)) / reps
    exact = ss.output_distribution(x)
    se = np.sqrt(exact * (1 - exact) / reps)
    np.testing.assert_array_less(np.abs(freq - exact), 5 * se)


@pytest.mark.parametrize(("d", "k"), [(40, 3), (40, 30)])
def test_floyd_paths_give_distinct_sorted_subsets_with_uniform_others(d, k):
    # k^2 <= d - 1 tests membership by compares, k^2 > d - 1 by a bitmap.
    ss = SubsetSelection(d, 0.5, k)
    reps = 20_000
    reports = ss.randomize(np.zeros(reps, dtype=np.int64), 3)
    assert reports.shape == (reps, k)
    assert np.all(np.diff(reports, axis=1) > 0)
    # Every value other than the input is in the subset with probability q.
    freq = np.bincount(reports.ravel(), minlength=d)[1:] / reps
    q = ss.other_probability
    np.testing.assert_array_less(np.abs(freq - q), 5 * math.sqrt(q * (1 - q) / reps))


@pytest.mark.parametrize(("d", "g"), [(2, 2), (4, 3), (5, 2), (9, 3), (6, 5)])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_local_hashing_passes_exact_ldp_check(d, g, epsilon):
    olh = LocalHashing(d, epsilon, g=g)
    # The joint law of (hash, report), every hash enumerated.
    result = verify_ldp(olh)
    assert result.passed, str(result)
    assert result.observed_epsilon == pytest.approx(epsilon, rel=1e-9)
    assert not verify_ldp(olh, epsilon=0.9 * epsilon).passed
    # Given any hash (drawn independently of the input), the report is randomized
    # response over g values: each conditional law is epsilon-LDP too.
    for coefficients in itertools.product(range(g), repeat=olh.n_digits + 1):
        check = verify_ldp(lambda x, c=coefficients: olh.conditional_distribution(x, c),
                           list(range(d)), epsilon)
        assert check.passed


@pytest.mark.parametrize(("d", "g"), [(9, 3), (10, 5), (7, 2)])
def test_local_hashing_family_is_exactly_pairwise_uniform(d, g):
    # For x != v, h(x) - h(v) is uniform on Z_g over the whole family: P(collision) = 1/g,
    # which makes the estimator exactly unbiased.
    olh = LocalHashing(d, 1.0, g=g)
    family = np.array(list(itertools.product(range(g), repeat=olh.n_digits + 1)))
    values = np.arange(d)
    hashes = np.array([olh._hash(np.repeat(c[None, :], d, 0), values) for c in family])
    for x in range(d):
        for v in range(d):
            if x != v:
                diff = np.bincount((hashes[:, x] - hashes[:, v]) % g, minlength=g)
                assert np.all(diff == len(family) // g)


@pytest.mark.parametrize("noise", ["simulation", "deployment"])
def test_local_hashing_sampler_has_the_stated_law(noise):
    olh = LocalHashing(3, 1.0, g=2)  # 2 digits: 2^4 = 16 outputs
    reps = 64_000 if noise == "simulation" else 16_000
    source = DeploymentNoise() if noise == "deployment" else np.random.default_rng(12)
    reports = olh.randomize(np.full(reps, 2), source)
    codes = (reports * (2 ** np.arange(reports.shape[1] - 1, -1, -1))).sum(axis=1)
    freq = np.bincount(codes, minlength=olh.output_size) / reps
    exact = olh.output_distribution(2)
    np.testing.assert_array_less(np.abs(freq - exact), 5 * np.sqrt(exact * (1 - exact) / reps))


@pytest.mark.parametrize(("d", "eps"), [(16, 1.0), (40, 3.0)])
def test_local_hashing_counts_are_unbiased_with_the_exact_variance(d, eps):
    olh = LocalHashing(d, eps)
    rng = np.random.default_rng([9, d])
    data = rng.integers(0, d, 300)
    counts = np.bincount(data, minlength=d)
    reps = 2000
    est = np.array([olh.estimate_counts(olh.randomize(data, rng)) for _ in range(reps)])
    p, q = olh.include_probability, olh.other_probability
    variance = olh.count_variance(counts)
    for v in range(d):
        # Each report supports v independently: w.p. p if it holds v, q = 1/g otherwise.
        var_v, spread = bernoulli_sum_moments(np.where(data == v, p, q), 1.0 / (p - q))
        assert var_v == pytest.approx(variance[v], rel=1e-9)
        assert abs(est[:, v].mean() - counts[v]) < 5 * math.sqrt(var_v / reps)
        assert abs(est[:, v].var() - var_v) < 5 * math.sqrt(spread / reps)


def test_local_hashing_wins_under_a_bit_budget():
    # 64 bits: subset selection keeps k <= 6 values of 10 bits, the one-bit oracle has
    # variance c^2; local hashing (g = 3, 18 bits) is within 2.4% of OUE.
    pick = best_frequency_oracle(1024, 1.0, max_report_bits=64)
    assert isinstance(pick, LocalHashing) and pick.g == 3 and pick.report_bits == 18
    assert pick.mean_count_variance(1) < 0.81 * HadamardResponse(1024, 1.0).mean_count_variance(1)
    assert pick.mean_count_variance(1) < 1.024 * (4 * math.e / (math.e - 1) ** 2 + 1 / 1024)


# ------------------------------------------------------- unbiasedness and variance


@pytest.mark.parametrize(("d", "eps", "k"), [(8, 1.0, 3), (16, 4.0, 1), (12, 0.5, 5)])
def test_subset_selection_counts_are_unbiased_with_the_exact_variance(d, eps, k):
    ss = SubsetSelection(d, eps, k)
    rng = np.random.default_rng([7, d, k])
    data = rng.integers(0, d, 400)
    counts = np.bincount(data, minlength=d)
    reps = 2000
    est = np.array([ss.estimate_counts(ss.randomize(data, rng)) for _ in range(reps)])
    variance = ss.count_variance(counts)
    p, q = ss.include_probability, ss.other_probability
    for v in range(d):
        probs = np.where(data == v, p, q)
        var_v, spread = bernoulli_sum_moments(probs, 1.0 / (p - q))
        assert var_v == pytest.approx(variance[v], rel=1e-9)
        assert abs(est[:, v].mean() - counts[v]) < 5 * math.sqrt(var_v / reps)
        assert abs(est[:, v].var() - var_v) < 5 * math.sqrt(spread / reps)


def test_hadamard_as_frequency_oracle_has_the_exact_variance():
    d, eps = 16, 1.5
    hr = HadamardResponse(d, eps)
    rng = np.random.default_rng(3)
    data = rng.integers(0, d, 300)
    counts = np.bincount(data, minlength=d)
    reps = 2000
    est = np.array([hr.estimate_counts(hr.randomize(data, rng)) for _ in range(reps)])
    m1, m0 = hr.report_moments
    assert m1 == m0 == pytest.approx(hr.debias_factor**2)
    variance = hr.count_variance(counts)
    keep = hr.keep_probability
    for v in range(d):
        # Each report adds c (2B - 1) with B ~ Bernoulli(keep) for holders, 1/2 else.
        var_v, spread = bernoulli_sum_moments(np.where(data == v, keep, 0.5),
                                              2 * hr.debias_factor)
        assert var_v == pytest.approx(variance[v], rel=1e-9)
        assert abs(est[:, v].mean() - counts[v]) < 5 * math.sqrt(var_v / reps)
        assert abs(est[:, v].var() - var_v) < 5 * math.sqrt(spread / reps)


def test_mean_and_max_variance_match_count_variance():
    for oracle in (SubsetSelection(10, 1.0, 3), SubsetSelection(64, 4.0, 1),
                   HadamardResponse(32, 0.7)):
        d, n = oracle.d, 1000
        counts = np.full(d, n // d)
        counts[0] += n - counts.sum()
        assert oracle.mean_count_variance(n) == pytest.approx(
            oracle.count_variance(counts).mean(), rel=1e-12)
        worst = max(oracle.count_variance(np.array([n] + [0] * (d - 1)))[[0, 1]])
        assert oracle.max_count_variance(n) == pytest.approx(worst, rel=1e-12)


# --------------------------------------------------------------- summaries and wire


@pytest.mark.parametrize("oracle", [SubsetSelection(32, 2.0, 4), HadamardResponse(32, 2.0)],
                         ids=["subset", "hadamard"])
def test_summaries_add_up_and_answer_node_queries(oracle):
    rng = np.random.default_rng(5)
    data = rng.integers(0, 32, 500)
    reports = oracle.randomize(data, rng)
    encoded = oracle.encode(reports)
    assert encoded.shape == (500, oracle.report_width)
    assert encoded.max() < 1 << oracle.element_bits
    whole = oracle.summarize(oracle.decode(encoded))
    left = oracle.summarize(oracle.decode(encoded[:200]))
    right = oracle.summarize(oracle.decode(encoded[200:]))
    both = left.combine(right)
    np.testing.assert_array_equal(both.keys, whole.keys)
    np.testing.assert_array_equal(both.sums, whole.sums)
    assert both.n == whole.n == 500
    full = oracle.estimate_from_summary(whole)
    nodes = np.array([0, 5, 31, 7])
    np.testing.assert_allclose(oracle.estimate_from_summary(whole, nodes), full[nodes],
                               rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(oracle.estimate_counts(reports), full, rtol=1e-12)


def test_hadamard_summary_estimates_equal_algorithm_3():
    hr = HadamardResponse(64, 1.0)
    j, bits = hr.randomize(np.random.default_rng(1).integers(0, 64, 300), 2)
    np.testing.assert_allclose(hr.estimate_from_summary(hr.summarize((j, bits))),
                               hr.estimate_frequencies(j, bits), rtol=1e-12, atol=1e-9)


def test_summary_dense_and_sparse_paths_agree():
    # A dense key range is summed by bincount, a sparse one by sorting: same result,
    # keys kept even when their sum is 0.
    keys = np.array([5, 9, 5, 7, 9])
    weights = np.array([1, 1, -1, 2, 1])
    dense = OracleSummary.from_contributions(keys, weights, 5)
    assert dense.keys.tolist() == [5, 7, 9] and dense.sums.tolist() == [0, 2, 2]
    far = OracleSummary.from_contributions(np.append(keys, 10**12), np.append(weights, 3), 6)
    assert far.keys.tolist() == [5, 7, 9, 10**12] and far.sums.tolist() == [0, 2, 2, 3]
    assert far.combine(dense).sums.tolist() == [0, 4, 4, 3]
    assert far.at(np.array([7, 8, 10**12])).tolist() == [2, 0, 3]


def test_empty_summary_estimates_zero_counts():
    ss = SubsetSelection(8, 1.0, 2)
    empty = ss.summarize(np.zeros((0, 2), np.int64))
    assert empty.n == 0
    np.testing.assert_array_equal(ss.estimate_from_summary(empty), np.zeros(8))
    assert OracleSummary.empty().at(np.array([3])).tolist() == [0]


# ----------------------------------------------------------------------- the chooser


def _peer_variances(d: int, eps: float) -> dict[str, float]:
    """Mean per-report variance of pure-ldp's oracles (Wang et al. 2017, Eq. 2 with
    each oracle's p and q): direct encoding, OUE, OLH with g = round(e^eps) + 1, and the
    one-bit Hadamard response."""
    e = math.exp(eps)

    def pure(p: float, q: float) -> float:
        return ((p * (1 - p)) / d + (1 - 1 / d) * q * (1 - q)) / (p - q) ** 2

    g = round(e) + 1
    c = (e + 1) / (e - 1)
    return {"de": pure(e / (e + d - 1), 1 / (e + d - 1)), "oue": pure(0.5, 1 / (e + 1)),
            "olh": pure(e / (e + g - 1), 1 / g), "hr": c * c - 1 / d}


@pytest.mark.parametrize("d", [64, 1024])
@pytest.mark.parametrize("eps", [0.25, 1.0, 2.0, 4.0, 8.0])
def test_chooser_is_at_most_the_peers_best_and_the_true_minimum(d, eps):
    best = best_frequency_oracle(d, eps)
    ours = best.mean_count_variance(1)
    assert ours <= min(_peer_variances(d, eps).values()) * (1 + 1e-12)
    # The minimum over every candidate, by brute force.
    candidates = ([SubsetSelection(d, eps, k) for k in range(1, d)]
                  + [HadamardResponse(d, eps), LocalHashing(d, eps)])
    assert ours == pytest.approx(min(o.mean_count_variance(1) for o in candidates), rel=1e-12)


def test_chooser_worst_criterion_and_bit_budget():
    d, eps = 64, 4.0
    two = ("subset-selection", "hadamard")
    worst = best_frequency_oracle(d, eps, criterion="worst", candidates=two)
    ks = np.arange(1, d)
    _, _, m1, m0 = subset_selection_moments(d, eps, ks)
    assert worst.max_count_variance(1) == pytest.approx(
        min(np.maximum(m0, m1 - 1).min(), HadamardResponse(d, eps).max_count_variance(1)))
    # 10-bit values: 40 bits allow k <= 4, where the Hadamard response (11 bits) wins.
    capped = best_frequency_oracle(1024, 1.0, max_report_bits=40, candidates=two)
    assert isinstance(capped, HadamardResponse) and capped.report_bits == 11
    # At eps = 4 subset selection with k <= 4 beats it.
    capped = best_frequency_oracle(1024, 4.0, max_report_bits=40, candidates=two)
    assert isinstance(capped, SubsetSelection) and capped.k == 4
    # 7 bits: k = 1 (direct encoding, variance about 22 per report) or the Hadamard
    # response (about 4.7): the latter.
    only_hr = best_frequency_oracle(64, 1.0, max_report_bits=7, candidates=two)
    assert isinstance(only_hr, HadamardResponse)
    # Not a power of two: subset selection only.
    assert isinstance(best_frequency_oracle(10, 0.1), SubsetSelection)


def test_factory_names():
    assert set(ORACLES) == {"subset-selection", "local-hashing", "hadamard"}
    assert frequency_oracle("local-hashing", 8, 1.0, g=5).g == 5
    assert isinstance(frequency_oracle("hadamard", 8, 1.0), HadamardResponse)
    assert frequency_oracle("subset-selection", 8, 1.0, k=2).k == 2


# ---------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: SubsetSelection(1, 1.0), ValueError, "d must be >= 2"),
    (lambda: SubsetSelection(8, 1.0, k=8), ValueError, r"k must be in 1..d-1 = 1..7"),
    (lambda: SubsetSelection(8, 1.0, k=0), ValueError, "k must be >= 1"),
    (lambda: SubsetSelection(8, -1.0), ValueError, "epsilon must be > 0"),
    (lambda: SubsetSelection(8, 1.0, criterion="median"), ValueError, "criterion must be"),
    (lambda: SubsetSelection(8, 1.0, 2).randomize([8], 0), ValueError,
     "outside the input domain"),
    (lambda: SubsetSelection(8, 1.0, 2).decode([[3, 1]]), ValueError,
     "distinct values in increasing order"),
    (lambda: SubsetSelection(8, 1.0, 2).decode([[1, 9]]), ValueError,
     "outside the input domain"),
    (lambda: SubsetSelection(8, 1.0, 2).decode([[1, 2, 3]]), ValueError, r"shape \(n, 2\)"),
    (lambda: SubsetSelection(40, 1.0, 20).output_distribution(0), ValueError,
     "exact enumeration is limited"),
    (lambda: HadamardResponse(8, 1.0).decode([[0, 2]]), ValueError, "bits has values"),
    (lambda: frequency_oracle("olh", 8, 1.0), ValueError, "oracle must be one of"),
    (lambda: LocalHashing(8, 1.0, g=4), ValueError, "g must be a prime"),
    (lambda: LocalHashing(8, 1.0, g=3).decode([[0, 1, 2, 3]]), ValueError,
     r"entries outside 0\.\.2"),
    (lambda: LocalHashing(8, 1.0, g=3).decode([[0, 1]]), ValueError, r"shape \(n, 4\)"),
    (lambda: LocalHashing(1024, 4.0).output_distribution(0), ValueError,
     "exact enumeration is limited"),
    (lambda: frequency_oracle("hadamard", 8, 1.0, k=2), TypeError, "takes no parameters"),
    (lambda: best_frequency_oracle(8, 1.0, candidates=["rappor"]), ValueError,
     "candidates must be"),
    (lambda: best_frequency_oracle(1024, 1.0, max_report_bits=5), ValueError,
     "no oracle among"),
])
def test_bad_inputs(make, error, match):
    with pytest.raises(error, match=match):
        make()
