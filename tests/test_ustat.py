"""U-statistics: fast exact functions vs scikit-learn / SciPy, incomplete U-statistics over
designs, and the variance formulas (000 eq. 3, 000 Thm 5, with-replacement sampling)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn.metrics import rand_score, roc_auc_score

from fedustat.stats import (
    auc_kernel,
    balanced_sample,
    bernoulli_sample,
    complete_design,
    duplicate_pair_kernel,
    duplicate_pair_ratio,
    gini_kernel,
    gini_mean_difference,
    hoeffding_components,
    incomplete_ustat_variance,
    incomplete_ustatistic,
    kendall_tau,
    kendall_tau_kernel,
    mann_whitney_u,
    permutation_design_variance,
    permutation_pairs,
    rand_index,
    rand_index_kernel,
    renyi2_entropy,
    roc_auc,
    uniform_sample,
    user_kernel,
    ustat_variance,
    ustatistic,
    volume_under_surface,
    vus_kernel,
)
from fedustat.stats.exact import _inversions

TOL = 1e-12
HYP = settings(deadline=None, max_examples=80, derandomize=True)
Z = 5.0  # Monte Carlo checks allow 5 standard errors


def mean_within(draws: np.ndarray, target: float) -> None:
    """The mean of i.i.d. draws is within Z standard errors (measured) of target."""
    se = np.std(draws, ddof=1) / math.sqrt(draws.size)
    assert abs(np.mean(draws) - target) <= Z * se + 1e-12, (np.mean(draws), target, se)


def variance_within(draws: np.ndarray, target: float) -> None:
    """The sample variance is within Z standard errors of target.

    Var(s^2) = (mu_4 - sigma^4 (R - 3) / (R - 1)) / R, with the moments measured.
    """
    r = draws.size
    centered = draws - draws.mean()
    s2 = np.mean(centered**2) * r / (r - 1)
    mu4 = np.mean(centered**4)
    se = math.sqrt(max(mu4 - s2**2 * (r - 3) / (r - 1), 0.0) / r)
    assert abs(s2 - target) <= Z * se, (s2, target, se)


# ----------------------------------------------------------------------------- AUC


@HYP
@given(scores=st.one_of(st.lists(st.integers(0, 5), min_size=2, max_size=80),
                        st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=2,
                                 max_size=80, unique=True)),
       data=st.data())
def test_roc_auc_equals_sklearn(scores, data):
    labels = data.draw(st.lists(st.sampled_from([-1, 1]), min_size=len(scores),
                                max_size=len(scores)))
    assume(len(set(labels)) == 2)
    assert roc_auc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), abs=TOL)


@pytest.mark.parametrize("tied", [False, True])
def test_roc_auc_and_mann_whitney_large(tied):
    rng = np.random.default_rng(7)
    n = 200_000
    s = rng.integers(0, 50, n).astype(float) if tied else rng.normal(size=n)
    y = (rng.random(n) < 0.3).astype(int)
    assert roc_auc(s, y) == pytest.approx(roc_auc_score(y, s), abs=TOL)
    ref_u = scipy.stats.mannwhitneyu(s[y == 1], s[y == 0]).statistic
    assert mann_whitney_u(s, y) == ref_u


# ----------------------------------------------------------------------------- Kendall


def kendall_brute(x, y) -> tuple[float, float]:
    """(tau-a, tau-b) by direct pair counting."""
    n = len(x)
    con = dis = tx = ty = 0
    for i, j in itertools.combinations(range(n), 2):
        s = np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
        con += s > 0
        dis += s < 0
        tx += x[i] == x[j]
        ty += y[i] == y[j]
    tot = n * (n - 1) // 2
    tau_b = (con - dis) / math.sqrt((tot - tx) * (tot - ty)) if tx < tot and ty < tot else np.nan
    return (con - dis) / tot, tau_b


@HYP
@given(pairs=st.one_of(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6)), min_size=2, max_size=70),
    st.lists(st.tuples(st.floats(-1e3, 1e3, allow_nan=False),
                       st.floats(-1e3, 1e3, allow_nan=False)), min_size=2, max_size=70)))
def test_kendall_tau_equals_scipy_and_brute_force(pairs):
    x = np.array([p[0] for p in pairs], dtype=float)
    y = np.array([p[1] for p in pairs], dtype=float)
    tau_a, tau_b = kendall_brute(x, y)
    assert kendall_tau(x, y, variant="a") == pytest.approx(tau_a, abs=TOL)
    assume(np.unique(x).size > 1 and np.unique(y).size > 1)
    assert kendall_tau(x, y) == pytest.approx(scipy.stats.kendalltau(x, y).statistic, abs=TOL)
    assert kendall_tau(x, y) == pytest.approx(tau_b, abs=TOL)


@pytest.mark.parametrize(("n", "levels"), [(300_001, None), (50_000, 40), (70_000, 400)])
def test_kendall_tau_large_matches_scipy(n, levels):
    # continuous (inversion path, 64-bit and 32-bit keys), few levels (contingency table),
    # many levels (inversion path with ties)
    rng = np.random.default_rng(11)
    if levels is None:
        x = rng.normal(size=n)
        y = x + rng.normal(size=n)
    else:
        x = rng.integers(0, levels, n).astype(float)
        y = (x + rng.integers(0, levels, n)).astype(float)
    assert kendall_tau(x, y) == pytest.approx(scipy.stats.kendalltau(x, y).statistic, abs=TOL)


@pytest.mark.parametrize("n", [1, 2, 3, 15, 16, 17, 33, 64, 100, 257, 1000])
def test_inversion_count_equals_brute_force(n):
    rng = np.random.default_rng(n)
    for n_values in (2, 5, 1000):
        seq = rng.integers(0, n_values, n)
        expected = int(np.count_nonzero(np.triu(seq[:, None] > seq[None, :], 1)))
        assert _inversions(seq, n_values) == expected


def test_kendall_bad_input():
    with pytest.raises(ValueError, match="x is constant"):
        kendall_tau([1, 1, 1], [1, 2, 3])
    assert kendall_tau([1, 1, 1], [1, 2, 3], variant="a") == 0.0
    with pytest.raises(ValueError, match="variant must be 'a' or 'b'"):
        kendall_tau([1, 2], [1, 2], variant="c")
    with pytest.raises(ValueError, match="inconsistent lengths: x=3, y=2"):
        kendall_tau([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="y contains 1 NaN"):
        kendall_tau([1, 2, 3], [1, np.nan, 2])


# ----------------------------------------------------------------------------- others


def test_other_exact_statistics_match_references():
    rng = np.random.default_rng(5)
    x = np.round(rng.normal(size=400), 1)
    diffs = np.abs(x[:, None] - x[None, :])
    assert gini_mean_difference(x) == pytest.approx(diffs.sum() / (400 * 399), abs=TOL)
    eq = (x[:, None] == x[None, :]).sum() - 400
    assert duplicate_pair_ratio(x) == pytest.approx(eq / (400 * 399), abs=TOL)
    assert renyi2_entropy(x) == pytest.approx(-math.log(eq / (400 * 399)), abs=TOL)
    assert renyi2_entropy([1.0, 2.0]) == math.inf
    a, b = rng.integers(0, 5, 400), rng.integers(0, 3, 400)
    assert rand_index(a, b) == pytest.approx(rand_score(a, b), abs=TOL)
    assert rand_index(np.arange(50), np.arange(50)) == 1.0


def test_volume_under_surface_matches_brute_force():
    rng = np.random.default_rng(9)
    s = rng.integers(0, 5, 40).astype(float)
    c = rng.integers(0, 3, 40)
    k = vus_kernel()
    packed = k.pack(s, c)
    brute = k.statistic(ustatistic(k, packed, use_fast_path=False), packed)
    assert volume_under_surface(s, c) == pytest.approx(brute, abs=TOL)
    # perfectly separated classes
    assert volume_under_surface([0.1, 0.5, 0.9, 0.2], [0, 1, 2, 0]) == 1.0
    with pytest.raises(ValueError, match=r"classes has no record of class \[1\]"):
        volume_under_surface([0.1, 0.9], [0, 2])


def test_exact_functions_bad_input():
    with pytest.raises(ValueError, match="labels must be binary"):
        roc_auc([0.1, 0.2, 0.3], [0, 1, 2])
    with pytest.raises(ValueError, match="labels has no positive example"):
        roc_auc([0.1, 0.2], [0, 0])
    with pytest.raises(ValueError, match="inconsistent lengths: scores=2, labels=3"):
        roc_auc([0.1, 0.2], [0, 1, 1])
    with pytest.raises(ValueError, match="scores contains 1 NaN"):
        mann_whitney_u([0.1, np.nan], [0, 1])
    with pytest.raises(ValueError, match="at least 2 values"):
        gini_mean_difference([1.0])
    with pytest.raises(ValueError, match="inconsistent lengths: labels_a=2, labels_b=3"):
        rand_index([1, 2], [1, 2, 3])


# ----------------------------------------------------------------------------- ustatistic


def test_ustatistic_blocks_and_limit():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, 101)
    k = gini_kernel((0.0, 1.0))
    exact = ustatistic(k, x)
    for block in (1, 7, 1000, 10**6):
        assert ustatistic(k, x, use_fast_path=False, block_size=block) == pytest.approx(exact,
                                                                                        abs=TOL)
    with pytest.raises(ValueError, match=r"C\(101, 2\) = 5.05e\+03 .* max_tuples=1000"):
        ustatistic(k, x, use_fast_path=False, max_tuples=1000)
    assert ustatistic(k, x, max_tuples=1000) == exact  # the fast path needs no tuples


def test_incomplete_ustatistic_on_complete_design_is_complete():
    rng = np.random.default_rng(4)
    k = vus_kernel()
    c = rng.integers(0, 3, 20)
    c[:3] = [0, 1, 2]
    data = k.pack(rng.normal(size=20), c)
    design = complete_design(20, 3)
    assert incomplete_ustatistic(k, data, design) == pytest.approx(ustatistic(k, data), abs=TOL)
    assert incomplete_ustatistic(k, data, design.tuples, block_size=100) == pytest.approx(
        ustatistic(k, data), abs=TOL)
    with pytest.raises(ValueError, match="tuples is empty"):
        incomplete_ustatistic(k, data, np.empty((0, 3), dtype=np.int64))
    with pytest.raises(ValueError, match=r"tuples must have shape \(m, 3\)"):
        incomplete_ustatistic(k, data, complete_design(20, 2))


DESIGNS = {
    "permutation_pairs": lambda n, rng: permutation_pairs(n, 2, rng),
    "balanced_k2": lambda n, rng: balanced_sample(n, 2, n, rng),
    "uniform": lambda n, rng: uniform_sample(n // 2, 2, n, rng),
    "bernoulli": lambda n, rng: bernoulli_sample(0.05, 2, n, rng),
}


@pytest.mark.parametrize("design_name", sorted(DESIGNS))
def test_incomplete_ustatistic_is_unbiased_over_designs(design_name):
    rng = np.random.default_rng(21)
    n = 41
    k = kendall_tau_kernel("a")
    data = k.pack(rng.normal(size=n), rng.normal(size=n))
    target = ustatistic(k, data)
    draws = np.array([incomplete_ustatistic(k, data, DESIGNS[design_name](n, rng))
                      for _ in range(400)])
    mean_within(draws, target)


def test_balanced_degree3_incomplete_ustatistic_is_unbiased():
    rng = np.random.default_rng(22)
    n = 24
    k = user_kernel(lambda a, b, c: np.median(np.hstack([a, b, c]), axis=1), 3, "x", (0.0, 1.0))
    data = rng.uniform(0, 1, n)
    target = ustatistic(k, data)
    draws = np.array([incomplete_ustatistic(k, data, balanced_sample(16, 3, n, rng))
                      for _ in range(400)])
    mean_within(draws, target)


# ----------------------------------------------------------------------------- variances

POPULATION = np.array([0.0, 0.0, 1.0, 2.0, 5.0])  # records drawn uniformly, with replacement
GINI = gini_kernel((0.0, 5.0))


def all_pairs_gini(samples: np.ndarray) -> np.ndarray:
    """Gini mean difference of each row."""
    n = samples.shape[1]
    i, j = np.triu_indices(n, 1)
    return np.abs(samples[:, i] - samples[:, j]).mean(axis=1)


def test_population_components_by_hand():
    # h1(x) = E|x - X|, theta = E|X - X'| over the 5-point population
    h1 = np.abs(POPULATION[:, None] - POPULATION[None, :]).mean(axis=1)
    theta = h1.mean()
    zeta1, zeta2 = hoeffding_components(GINI, POPULATION, estimator="population")
    assert zeta1 == pytest.approx(np.mean((h1 - theta) ** 2), abs=TOL)
    diffs = np.abs(POPULATION[:, None] - POPULATION[None, :])
    assert zeta2 == pytest.approx(np.mean((diffs - theta) ** 2), abs=TOL)


def test_ustat_variance_equals_exact_finite_population_variance():
    # 000 eq. 3 against the exact variance over all 5^6 equally likely samples of n = 6
    n = 6
    zeta1, zeta2 = hoeffding_components(GINI, POPULATION, estimator="population")
    index = np.indices((POPULATION.size,) * n).reshape(n, -1).T
    u = all_pairs_gini(POPULATION[index])
    assert ustat_variance(zeta1, zeta2, n) == pytest.approx(np.var(u), rel=1e-12)


def test_ustat_variance_by_monte_carlo():
    rng = np.random.default_rng(31)
    n, reps = 9, 20_000
    zeta1, zeta2 = hoeffding_components(GINI, POPULATION, estimator="population")
    u = all_pairs_gini(rng.choice(POPULATION, size=(reps, n)))
    variance_within(u, ustat_variance(zeta1, zeta2, n))


def test_incomplete_variance_with_replacement_by_monte_carlo():
    rng = np.random.default_rng(32)
    n, m, reps = 8, 5, 40_000
    zeta1, zeta2 = hoeffding_components(GINI, POPULATION, estimator="population")
    samples = rng.choice(POPULATION, size=(reps, n))
    i, j = np.triu_indices(n, 1)
    pick = rng.integers(0, i.size, size=(reps, m))  # m pairs uniformly with replacement
    rows = np.arange(reps)[:, None]
    u_m = np.abs(samples[rows, i[pick]] - samples[rows, j[pick]]).mean(axis=1)
    target = incomplete_ustat_variance(ustat_variance(zeta1, zeta2, n), zeta2, m)
    variance_within(u_m, target)


@pytest.mark.parametrize(("n", "P"), [(8, 1), (8, 3), (7, 2), (9, 4)])
def test_permutation_design_variance_by_monte_carlo(n, P):
    rng = np.random.default_rng(33 + n + P)
    reps = 30_000
    zeta1, zeta2 = hoeffding_components(GINI, POPULATION, estimator="population")
    samples = rng.choice(POPULATION, size=(reps, n))
    perms = np.argsort(rng.random((reps, P, n)), axis=2)[:, :, : 2 * (n // 2)]
    a, b = perms[..., 0::2].reshape(reps, -1), perms[..., 1::2].reshape(reps, -1)
    rows = np.arange(reps)[:, None]
    u_p = np.abs(samples[rows, a] - samples[rows, b]).mean(axis=1)
    variance_within(u_p, permutation_design_variance(zeta1, zeta2, n, P))


def test_permutation_design_variance_matches_thm5_for_even_n():
    zeta1, zeta2, n, P = 0.3, 1.1, 20, 3
    thm5 = 2 / (P * n) * (2 * (P - 1) * (1 - 1 / (n - 1)) * zeta1
                          + (1 + (P - 1) / (n - 1)) * zeta2)
    assert permutation_design_variance(zeta1, zeta2, n, P) == pytest.approx(thm5, rel=1e-14)
    # one permutation, even n: n/2 disjoint pairs, variance zeta2 / (n/2)
    assert permutation_design_variance(zeta1, zeta2, n, 1) == pytest.approx(zeta2 / (n / 2))


def test_variance_bad_input():
    with pytest.raises(ValueError, match="zeta1 must be a finite variance >= 0"):
        ustat_variance(-0.1, 1.0, 10)
    with pytest.raises(ValueError, match="n must be >= 2"):
        ustat_variance(0.1, 1.0, 1)
    with pytest.raises(ValueError, match="m must be >= 1"):
        incomplete_ustat_variance(0.1, 1.0, 0)
    with pytest.raises(ValueError, match="P must be >= 1"):
        permutation_design_variance(0.1, 1.0, 10, 0)


# ----------------------------------------------------------------------------- zeta estimates


def test_unbiased_components_over_samples():
    # the exact all-pairs estimator is unbiased for the population zetas
    rng = np.random.default_rng(41)
    target1, target2 = hoeffding_components(GINI, POPULATION, estimator="population")
    estimates = np.array([_raw_components(rng.choice(POPULATION, size=12))
                          for _ in range(600)])
    mean_within(estimates[:, 0], target1)
    mean_within(estimates[:, 1], target2)


def _raw_components(x: np.ndarray) -> tuple[float, float]:
    """The exact unbiased estimator, recomputed from the full matrix (no clipping)."""
    n = x.size
    F = np.abs(x[:, None] - x[None, :])
    R, Q = F.sum(1), (F**2).sum(1)
    S, T, W = R.sum(), Q.sum(), (R**2 - Q).sum()
    D = S**2 - 2 * T - 4 * W
    ff3, ff4 = n * (n - 1) * (n - 2), n * (n - 1) * (n - 2) * (n - 3)
    return W / ff3 - D / ff4, T / (n * (n - 1)) - D / ff4


def test_exact_components_match_matrix_formula():
    rng = np.random.default_rng(42)
    x = rng.choice(POPULATION, size=30)
    got = hoeffding_components(GINI, x)
    expected = _raw_components(x)
    assert got[0] == pytest.approx(max(expected[0], 0.0), abs=TOL)
    assert got[1] == pytest.approx(max(expected[1], 0.0), abs=TOL)


@pytest.mark.parametrize("make", [
    lambda rng: (auc_kernel(), auc_kernel().pack(rng.integers(0, 9, 80), rng.integers(0, 2, 80))),
    lambda rng: (GINI, rng.choice(POPULATION, 80)),
    lambda rng: (rand_index_kernel(), rand_index_kernel().pack(rng.integers(0, 3, 80),
                                                               rng.integers(0, 4, 80))),
])
def test_components_row_sum_fast_path_equals_all_pairs(make):
    kernel, data = make(np.random.default_rng(45))
    fast = hoeffding_components(kernel, data)
    slow = hoeffding_components(kernel, data, use_fast_path=False)
    assert fast == pytest.approx(slow, abs=TOL)


def test_components_fast_path_at_large_n():
    rng = np.random.default_rng(46)
    n = 200_000
    s = rng.normal(size=n)
    y = (rng.random(n) < 0.4).astype(int)
    kernel = auc_kernel()
    zeta1, zeta2 = hoeffding_components(kernel, kernel.pack(s, y), max_pairs=10)
    # kernel values are 0/1 (no ties): zeta_2 = theta (1 - theta) with theta = U
    theta = ustatistic(kernel, kernel.pack(s, y))
    assert zeta2 == pytest.approx(theta * (1 - theta), rel=1e-4)
    assert 0 < zeta1 < zeta2 / 2 + 1e-3


def test_monte_carlo_components_center_on_exact_estimator():
    # given the data, the Monte Carlo path averages to the exact estimator
    rng = np.random.default_rng(43)
    x = rng.uniform(0, 5, 300)
    exact = hoeffding_components(GINI, x)
    runs = np.array([hoeffding_components(GINI, x, rng=seed, max_pairs=30_000)
                     for seed in range(40)])
    mean_within(runs[:, 0], exact[0])
    mean_within(runs[:, 1], exact[1])
    again = hoeffding_components(GINI, x, rng=3, max_pairs=30_000)
    assert again == tuple(runs[3])


def test_degree3_components_monte_carlo_vs_population():
    rng = np.random.default_rng(44)
    k = user_kernel(lambda a, b, c: np.median(np.hstack([a, b, c]), axis=1), 3, "x", (0.0, 5.0))
    target = hoeffding_components(k, POPULATION, estimator="population")
    runs = np.array([hoeffding_components(k, rng.choice(POPULATION, size=200), rng=rng,
                                          max_pairs=9_000) for _ in range(60)])
    mean_within(runs[:, 0], target[0])
    mean_within(runs[:, 1], target[1])


def test_components_bad_input():
    with pytest.raises(ValueError, match="estimator must be 'unbiased' or 'population'"):
        hoeffding_components(GINI, POPULATION, estimator="plugin")
    with pytest.raises(ValueError, match="at least 4 records"):
        hoeffding_components(GINI, [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="n\\^k = 25 tuples, more than max_pairs=10"):
        hoeffding_components(GINI, POPULATION, estimator="population", max_pairs=10)
    with pytest.raises(ValueError, match="needs at least 8 records for degree 3"):
        hoeffding_components(vus_kernel(), vus_kernel().pack([0.1, 0.2, 0.3], [0, 1, 2]))
    with pytest.raises(ValueError, match="data contains 1 NaN"):
        hoeffding_components(duplicate_pair_kernel(), [1.0, np.nan, 1.0, 2.0])
