"""The two-party subsampling protocol ``pairs-2pc`` (000 Sec. 5, Thm 5; 001 App. C).

Every test is seeded. Monte Carlo tolerances are five standard errors computed from the
variance of the averaged quantity (theoretical where it is known, else the sample
variance of the squared errors), never guessed.
"""

from __future__ import annotations

import copy
import itertools
import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import fedustat
from fedustat.privacy.accounting import advanced_composition, per_step_budget_advanced
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.privacy.mechanisms import DiscreteLaplaceMechanism
from fedustat.protocols import registry
from fedustat.protocols.base import Message, Role
from fedustat.protocols.mpc import pairs_2pc
from fedustat.protocols.mpc.pairs_2pc import (
    DEFAULT_FIXED_POINT,
    PairsTwoParty,
    all_pairs_budget,
    all_pairs_mse,
    pair_noise_variance,
    permutation_conditional_variance,
    recommend_P,
    secure_pair_values,
    theorem5_mse,
)
from fedustat.runtime.simulate import deliver_peer_rows, simulate
from fedustat.secure import FixedPoint, comparison_cost
from fedustat.stats import (
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    incomplete_ustatistic,
    kendall_tau_kernel,
    mann_whitney_kernel,
    permutation_design_variance,
    rand_index_kernel,
    renyi2_entropy_kernel,
    ustatistic,
    variance_kernel,
    vus_kernel,
)

KENDALL = kendall_tau_kernel("a")
GINI = gini_kernel((0.0, 1.0))
AUC = auc_kernel()
DUPLICATE = duplicate_pair_kernel()
FP = DEFAULT_FIXED_POINT
L_BITS = FP.bits


def _ratings(n: int, seed: int) -> np.ndarray:
    """Correlated 1-6 ratings (x, y): y is x moved by -1, 0 or +1 step, clipped."""
    rng = np.random.default_rng(seed)
    x = rng.integers(1, 7, n)
    return KENDALL.pack(x, np.clip(x + rng.integers(-1, 2, n), 1, 6))


def _auc_data(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    labels = np.tile([0, 1], n // 2 + 1)[:n]
    return AUC.pack(np.round(rng.normal(size=n) + labels, 1), labels)


def _data(kernel_name: str, n: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    if kernel_name == "kendall":
        return KENDALL, _ratings(n, seed)
    if kernel_name == "auc":
        return AUC, _auc_data(n, seed)
    if kernel_name == "gini":
        return GINI, GINI.pack(rng.random(n))
    return DUPLICATE, DUPLICATE.pack(rng.integers(0, 4, n))


def _rounded(data: np.ndarray) -> np.ndarray:
    return FP.decode(FP.encode(data))


# ----------------------------------------------------------------------------------
# Noise-free runs reproduce the incomplete U-statistic exactly
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel_name", ["kendall", "auc", "gini", "duplicate"])
@pytest.mark.parametrize("comparison", ["fss", "circuit"])
@pytest.mark.parametrize(("n", "P"), [(40, 1), (41, 3)])
def test_noise_free_run_is_the_incomplete_ustatistic(kernel_name, comparison, n, P):
    kernel, data = _data(kernel_name, n, seed=n + P)
    # The explicit 002 Sec. 6.1 format (the bounds encoding is tested below).
    est = simulate(PairsTwoParty(kernel, math.inf, P=P, comparison=comparison, fixed_point=FP),
                   data, rng=7)
    design = est.diagnostics["design"]
    assert design.size == P * (n // 2)
    # Comparisons and differences see the fixed-point encodings (resolution 2^-14);
    # on the encoded data the result is exact.
    u = incomplete_ustatistic(kernel, _rounded(data) if kernel_name == "gini" else data, design)
    assert est.diagnostics["u_statistic"] == pytest.approx(u, rel=1e-15, abs=1e-15)
    assert est.value == pytest.approx(kernel.statistic(u, data), rel=1e-13)
    if kernel_name == "gini":
        assert abs(est.value - incomplete_ustatistic(kernel, data, design)) <= FP.resolution
    assert est.privacy.model is PrivacyModel.NONE


def test_noise_free_all_pairs_is_the_complete_ustatistic():
    data = _ratings(60, seed=3)
    est = simulate(PairsTwoParty(KENDALL, math.inf, all_pairs=True), data, rng=1)
    assert est.value == pytest.approx(ustatistic(KENDALL, data), rel=1e-15)
    assert est.std_error == 0.0
    assert est.diagnostics["n_pairs"] == math.comb(60, 2)


def test_auc_same_label_pairs_are_public_zeros_and_skip_the_2pc():
    data = _auc_data(50, seed=4)
    est = simulate(PairsTwoParty(AUC, 1.0, P=4), data, rng=2)
    design = est.diagnostics["design"].tuples
    labels = data[:, 1]
    cross = labels[design[:, 0]] != labels[design[:, 1]]
    assert est.diagnostics["n_computed_pairs"] == int(cross.sum())
    assert np.all(est.diagnostics["pair_values"][~cross] == 0.0)
    # Mann-Whitney is the same kernel reported as U C(n, 2).
    mw = simulate(PairsTwoParty(mann_whitney_kernel(), math.inf, P=2), data, rng=2)
    au = simulate(PairsTwoParty(AUC, math.inf, P=2), data, rng=2)
    n_pos = int(labels.sum())
    assert mw.value == pytest.approx(au.value * n_pos * (50 - n_pos), rel=1e-12)


def test_renyi2_is_minus_log_of_the_duplicate_ratio():
    data = DUPLICATE.pack(np.random.default_rng(2).integers(0, 3, 30))
    dup = simulate(PairsTwoParty(DUPLICATE, math.inf, P=2), data, rng=3)
    ren = simulate(PairsTwoParty(renyi2_entropy_kernel(), math.inf, P=2), data, rng=3)
    assert ren.value == pytest.approx(-math.log(dup.value), rel=1e-12)


# ----------------------------------------------------------------------------------
# Theorem 5 by Monte Carlo
# ----------------------------------------------------------------------------------
def _population_zetas(points: np.ndarray, probs: np.ndarray, kernel) -> tuple[float, float,
                                                                              float]:
    """theta, zeta_1, zeta_2 of 000 eq. 3 for a finite distribution, by enumeration."""
    k = len(probs)
    i, j = np.meshgrid(np.arange(k), np.arange(k), indexing="ij")
    F = kernel.func(points[i.ravel()], points[j.ravel()]).reshape(k, k)
    theta = probs @ F @ probs
    h1 = F @ probs
    return theta, probs @ h1**2 - theta**2, probs @ (F**2) @ probs - theta**2


def _replicated_pairs(rng: np.random.Generator, R: int, n: int, P: int) -> np.ndarray:
    """R independent permutation designs (000 Sec. 5) over R blocks of n parties."""
    h = n // 2
    perms = rng.permuted(np.tile(np.arange(n), (R * P, 1)), axis=1)[:, : 2 * h]
    pairs = perms.reshape(R, P * h, 2) + (np.arange(R) * n)[:, None, None]
    return pairs.reshape(-1, 2)


CASES = {
    # Gini on U(0, 1): theta = 1/3, zeta_1 = Var(x^2 - x) = 1/180, zeta_2 = 1/18.
    "gini-split": ("gini", 40, 2, 0.5, "split"),
    "gini-independent": ("gini", 40, 2, 0.5, "independent"),
    "kendall-independent": ("kendall", 30, 3, 2.0, "independent"),
    "duplicate-split": ("duplicate", 30, 2, 3.0, "split"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_theorem5_mse_matches_monte_carlo(case):
    kernel_name, n, P, eps, split = CASES[case]
    R = 2500
    rng = np.random.default_rng(11)
    if kernel_name == "gini":
        kernel, theta, z1, z2 = GINI, 1 / 3, 1 / 180, 1 / 18
        data = GINI.pack(rng.random(R * n))
    elif kernel_name == "kendall":
        kernel = KENDALL
        pts = np.array(list(itertools.product([1.0, 2.0, 3.0], repeat=2)))
        probs = np.array([4, 2, 1, 2, 4, 2, 1, 2, 4], dtype=float)
        probs /= probs.sum()
        theta, z1, z2 = _population_zetas(pts, probs, kernel)
        data = pts[rng.choice(len(probs), R * n, p=probs)]
    else:
        kernel = DUPLICATE
        probs = np.array([0.5, 0.3, 0.2])
        theta, z1, z2 = _population_zetas(np.arange(3.0)[:, None], probs, kernel)
        data = rng.choice(3, R * n, p=probs).astype(float)[:, None]
    pairs = _replicated_pairs(rng, R, n, P)
    release = secure_pair_values(kernel, data, pairs, pair_epsilon=eps / P, noise_split=split,
                                 comparison="circuit", rng=5)
    errors2 = (release.values.reshape(R, -1).mean(axis=1) - theta) ** 2
    predicted = PairsTwoParty(kernel, eps, P=P, noise_split=split).theoretical_mse(n, z1, z2)
    tolerance = 5 * errors2.std(ddof=1) / math.sqrt(R)
    assert errors2.mean() == pytest.approx(predicted, abs=tolerance)
    if case == "gini-split":
        # The noise term printed in 000 Thm 5, 2P/(n eps^2), is half of the truth.
        printed = permutation_design_variance(z1, z2, n, P) + 2 * P / (n * eps**2)
        assert abs(errors2.mean() - printed) > tolerance


def test_theorem5_laplace_noise_term_and_design_term():
    n, P, eps = 100, 3, 0.7
    design = permutation_design_variance(0.02, 0.1, n, P)
    assert theorem5_mse(n, P, eps, 0.02, 0.1) == pytest.approx(
        design + 4 * P / (n * eps**2), rel=1e-12)
    # Even n: the first term of 000 Thm 5 as printed.
    printed = 2 / (P * n) * (2 * (P - 1) * (1 - 1 / (n - 1)) * 0.02 + (1 + (P - 1) / (n - 1)) * 0.1)
    assert design == pytest.approx(printed, rel=1e-12)
    assert theorem5_mse(n, P, eps, 0.02, 0.1, noise_split="independent") == pytest.approx(
        design + 8 * P / (n * eps**2), rel=1e-12)
    assert theorem5_mse(n, P, math.inf, 0.02, 0.1) == design
    assert all_pairs_mse(n, math.inf, 0.0, 0.02, 0.1) == pytest.approx(
        2 / (n * (n - 1)) * (2 * (n - 2) * 0.02 + 0.1), rel=1e-12)


def test_randomized_response_variance_formula():
    eps = 0.9
    q = 1 / (1 + math.exp(eps))
    assert pair_noise_variance(eps, mechanism="randomized_response") == pytest.approx(
        math.exp(eps) / math.expm1(eps) ** 2, rel=1e-12)
    q2 = 2 * q * (1 - q)
    assert pair_noise_variance(eps, mechanism="randomized_response",
                               noise_split="independent") == pytest.approx(
        q2 * (1 - q2) / (1 - 2 * q2) ** 2, rel=1e-12)


# ----------------------------------------------------------------------------------
# The two noise variants: law, variance, unbiasedness, what each party contributes
# ----------------------------------------------------------------------------------
def _dlap_moments(t: float) -> tuple[float, float]:
    """Variance and fourth moment of DLap(t), by summing the pmf."""
    z = np.arange(-4000, 4001)
    pmf = (1 - t) / (1 + t) * t ** np.abs(z)
    return float(pmf @ z**2), float(pmf @ z**4)


def _chi2_against_dlap(sample: np.ndarray, t: float) -> float:
    mech_pmf = DiscreteLaplaceMechanism(1, -math.log(t)).pmf
    edges = np.arange(-12, 13)
    observed = np.array([np.sum(sample < -12)] + [np.sum(sample == e) for e in edges]
                        + [np.sum(sample > 12)])
    inner = mech_pmf(edges)
    tail = (1 - inner.sum()) / 2
    expected = np.concatenate([[tail], inner, [tail]]) * sample.size
    return float(stats.chisquare(observed, expected).pvalue)


@pytest.mark.parametrize("split", ["independent", "split"])
def test_discrete_laplace_variants_have_the_stated_law(split):
    m, pair_eps = 40_000, 0.8
    data = _ratings(2 * m, seed=21)
    pairs = np.arange(2 * m).reshape(m, 2)
    exact = KENDALL.evaluate(data, pairs)
    rel = secure_pair_values(KENDALL, data, pairs, pair_epsilon=pair_eps, noise_split=split,
                             comparison="circuit", rng=8)
    t = math.exp(-pair_eps / 2)   # Kendall: Delta f = 2 units of 1
    var1, mu4 = _dlap_moments(t)
    copies = 2 if split == "independent" else 1
    var = copies * var1
    fourth = copies * mu4 + (6 * var1**2 if copies == 2 else 0.0)
    err = rel.values - exact
    assert rel.pair_noise_variance == pytest.approx(var, rel=1e-9)
    assert abs(err.mean()) < 5 * math.sqrt(var / m)
    assert abs(err.var() - var) < 5 * math.sqrt((fourth - var**2) / m)
    assert np.array_equal(err, rel.noise.sum(axis=0))
    if split == "independent":
        # Each party's own part is a full DLap(t): it alone protects the party.
        assert _chi2_against_dlap(rel.noise[1], t) > 1e-3
        assert _chi2_against_dlap(rel.noise[0], t) > 1e-3
    else:
        # The two Polya(1/2, t) halves sum to exactly one DLap(t); one half is not one.
        assert _chi2_against_dlap(rel.noise.sum(axis=0), t) > 1e-3
        half = rel.noise[0].astype(float)
        assert abs(half.var() - var1 / 2) < 5 * math.sqrt(2 * (var1 / 2) ** 2 * 3 / m)
        assert _chi2_against_dlap(rel.noise[0], t) < 1e-6


@pytest.mark.parametrize("split", ["independent", "split"])
def test_randomized_response_variants_flip_at_the_stated_rate(split):
    m, pair_eps = 40_000, 1.0
    rng = np.random.default_rng(4)
    data = DUPLICATE.pack(rng.integers(0, 2, 2 * m))
    pairs = np.arange(2 * m).reshape(m, 2)
    exact = DUPLICATE.evaluate(data, pairs)
    rel = secure_pair_values(DUPLICATE, data, pairs, pair_epsilon=pair_eps, noise_split=split,
                             comparison="fss", rng=9)
    q = 1 / (1 + math.exp(pair_eps))
    q_coin = q if split == "independent" else (1 - math.sqrt(1 - 2 * q)) / 2
    q_release = 2 * q_coin * (1 - q_coin)
    assert rel.flip_probability == pytest.approx(q_release if split == "independent" else q)
    released_bits = np.rint(rel.values * (1 - 2 * q_release) + q_release)
    flips = released_bits != exact
    assert abs(flips.mean() - q_release) < 5 * math.sqrt(q_release * (1 - q_release) / m)
    assert np.array_equal(flips, (rel.noise[0] ^ rel.noise[1]).astype(bool))
    for coin in rel.noise:
        assert abs(coin.mean() - q_coin) < 5 * math.sqrt(q_coin * (1 - q_coin) / m)
    # Debiased values are unbiased with the stated variance.
    var = rel.pair_noise_variance
    assert abs((rel.values - exact).mean()) < 5 * math.sqrt(var / m)


def test_output_shares_are_uniform_for_each_member():
    data = _ratings(4000, seed=5)
    rel = secure_pair_values(KENDALL, data, np.arange(4000).reshape(2000, 2),
                             pair_epsilon=1.0, comparison="circuit", rng=3)
    for member in rel.shares:
        top = (member >> np.uint64(L_BITS - 4)).astype(np.int64)
        assert stats.chisquare(np.bincount(top, minlength=16)).pvalue > 1e-3


# ----------------------------------------------------------------------------------
# Budgets: all pairs by advanced composition; P by basic composition
# ----------------------------------------------------------------------------------
def test_all_pairs_per_pair_budget_is_the_advanced_composition_inversion():
    n, eps, delta = 120, 1.0, 1e-8
    data = _ratings(n, seed=6)
    est = simulate(PairsTwoParty(KENDALL, eps, delta=delta, all_pairs=True,
                                 comparison="circuit"), data, rng=4)
    pair_eps = est.diagnostics["pair_epsilon"]
    assert pair_eps == per_step_budget_advanced(eps, delta, n - 1)[0]
    assert pair_eps > eps / (n - 1)
    composed = advanced_composition(pair_eps, 0.0, n - 1, delta)
    assert composed.epsilon == pytest.approx(eps, rel=1e-12) and composed.epsilon <= eps
    assert composed.delta == delta
    assert (est.privacy.epsilon, est.privacy.delta) == (eps, delta)
    assert est.privacy.model is PrivacyModel.COMPUTATIONAL
    # No subsampling: the standard error is the noise's, exactly.
    var = est.diagnostics["pair_noise_variance"]
    assert est.std_error == pytest.approx(math.sqrt(var / math.comb(n, 2)), rel=1e-12)


def test_all_pairs_budget_falls_back_to_basic_composition():
    # Few pairs per party and a large budget: basic composition is the better split.
    assert all_pairs_budget(4, 3.0, 1e-6) == (
        1.0, 0.0, "basic composition over 3 pairs per party (beats advanced here)")
    eps, dlt, rule = all_pairs_budget(50, 1.0, 0.0)
    assert (eps, dlt) == (1.0 / 49, 0.0) and rule.startswith("basic")


def test_permutation_budget_is_epsilon_over_p():
    est = simulate(PairsTwoParty(KENDALL, 2.0, P=4, delta=1e-5), _ratings(20, 1), rng=1)
    assert est.diagnostics["pair_epsilon"] == 0.5
    assert (est.privacy.epsilon, est.privacy.delta) == (2.0, 0.0)
    assert "independent" in est.diagnostics["noise_split"]
    assert "colluding with any other parties" in est.diagnostics["threat_model"]
    assert "dealt by a third party" in est.diagnostics["dealer"]
    assert "must collude with neither member nor the aggregator" in est.diagnostics["dealer"]
    assert "the collusions below exclude it" in est.diagnostics["threat_model"]
    split = simulate(PairsTwoParty(KENDALL, 2.0, P=4, noise_split="split"), _ratings(20, 1),
                     rng=1)
    assert "aggregator alone" in split.diagnostics["threat_model"]


# ----------------------------------------------------------------------------------
# The optimal P (001 App. C.1)
# ----------------------------------------------------------------------------------
@settings(deadline=None, max_examples=60, derandomize=True)
@given(n=st.integers(4, 300), eps=st.floats(0.05, 20.0), z1=st.floats(0.0, 0.25),
       ratio=st.floats(2.0, 40.0), mechanism=st.sampled_from(
           ["laplace", "discrete_laplace", "randomized_response"]),
       split=st.sampled_from(["independent", "split"]))
def test_recommend_p_minimizes_the_mse_by_brute_force(n, eps, z1, ratio, mechanism, split):
    z2 = min(1.0, ratio * z1) if z1 > 0 else ratio / 40
    kwargs = {"mechanism": mechanism, "noise_split": split}
    if mechanism == "discrete_laplace":
        kwargs.update(resolution=0.5, sensitivity=1.0)
    choice = recommend_P(n, eps, z1, z2, max_P=120, **kwargs)
    brute = [theorem5_mse(n, P, eps, z1, z2, **kwargs) for P in range(1, 121)]
    assert choice.mse == pytest.approx(min(brute), rel=1e-12)
    assert brute[choice.P - 1] == choice.mse


def test_recommend_p_closed_form_and_paper_remarks():
    n, eps, z1, z2 = 1000, 4.0, 0.01, 0.5
    choice = recommend_P(n, eps, z1, z2)
    a = (n - 2) / (n - 1) * (z2 - 2 * z1)
    assert choice.continuous == pytest.approx(eps * math.sqrt(a / 2), rel=1e-12)
    assert choice.P in (math.floor(choice.continuous), math.ceil(choice.continuous))
    # zeta_2 = 2 zeta_1 (a sum of univariate functions): P = 1 (001 App. C.1).
    assert recommend_P(n, 50.0, 0.1, 0.2).P == 1
    # Stronger privacy pushes P down; independent noise shares likewise.
    assert recommend_P(n, 0.5, z1, z2).P == 1
    assert recommend_P(n, eps, z1, z2, noise_split="independent").P < choice.P


# ----------------------------------------------------------------------------------
# Exact subsampling variance given the data
# ----------------------------------------------------------------------------------
def _perfect_matchings(items: list[int]):
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for k, partner in enumerate(rest):
        for tail in _perfect_matchings(rest[:k] + rest[k + 1:]):
            yield [(first, partner), *tail]


@pytest.mark.parametrize("n", [4, 6, 8])
def test_conditional_variance_by_enumerating_all_matchings(n):
    data = _ratings(n, seed=n)
    means = [KENDALL.evaluate(data, np.array(m)).mean() for m in _perfect_matchings(list(range(n)))]
    assert permutation_conditional_variance(KENDALL, data, 1) == pytest.approx(
        np.var(means), rel=1e-10, abs=1e-15)
    assert permutation_conditional_variance(KENDALL, data, 3) == pytest.approx(
        np.var(means) / 3, rel=1e-10, abs=1e-15)


# ----------------------------------------------------------------------------------
# Costs measured from the transcript
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("comparison", ["fss", "circuit"])
def test_measured_costs_are_the_rows_that_travel(comparison):
    n, P = 30, 2
    est = simulate(PairsTwoParty(KENDALL, 1.0, P=P, comparison=comparison), _ratings(n, 2),
                   rng=3)
    lt = comparison_cost("less_than", bits=L_BITS, method=comparison, full_range=False)
    # A member's package (from its pair's dealer): the material of four comparisons (FSS:
    # key, mask and mask sign bit; circuit: edaBit, AND triples on the active bits, daBit)
    # and a Beaver triple of 3 l; to its partner: four comparisons' openings, then the
    # product's d, e (2 l). No input is shared beforehand: a member's record is its
    # share of the difference.
    package = 4 * lt.offline_bits + 3 * L_BITS
    online = 4 * lt.online_bits + 2 * L_BITS
    c = est.cost
    n_pairs = P * (n // 2)
    # Dealing: every pair sends two packages, from a party outside it; the mean over
    # parties is then P packages sent per party (who deals varies, so the maximum does).
    assert c.peer_bits_per_party == P * (online + package)
    upload = 1 + P * L_BITS
    assert c.bits_per_party == upload + P * (online + package)
    assert c.max_bits_per_party > c.bits_per_party
    # Down: a member row per pair and party, a dealer row per pair (pair id, two party
    # ids, a 2-bit slot each); from peers what they sent.
    row = math.ceil(math.log2(n_pairs)) + 2 * math.ceil(math.log2(n)) + 2
    assert c.bits_received_per_party == pytest.approx(
        (2 * n_pairs + n_pairs) * row / n + P * (online + package), rel=1e-12)
    assert c.total_bits == n * (upload + P * (online + package)) + 3 * n_pairs * row
    # The dealing is a relay round of the run: peer traffic, no separate offline figure.
    assert c.offline_bits == c.offline_bits_per_party == 0
    # Deal; the comparisons' rounds; the product. Join, assignment and upload via the
    # server.
    assert c.peer_rounds == 1 + lt.rounds + 1
    assert c.rounds == 3 + c.peer_rounds
    assert c.server_operations == n_pairs


@pytest.mark.parametrize("comparison", ["fss", "circuit"])
def test_randomized_response_costs_two_products_beside_the_equality(comparison):
    est = simulate(PairsTwoParty(DUPLICATE, 1.0, P=1, comparison=comparison),
                   DUPLICATE.pack(np.arange(10) % 3), rng=1)
    eq = comparison_cost("equal", bits=L_BITS, method=comparison)
    # To the partner: the equality's openings, with the coins' product (2 l) beside its
    # first round, then the xor product (2 l); from the dealer: one equality's material
    # and two Beaver triples.
    online = eq.online_bits + 2 * L_BITS + 2 * L_BITS
    package = eq.offline_bits + 2 * 3 * L_BITS
    assert est.cost.peer_bits_per_party == online + package
    assert est.cost.bits_per_party == 1 + L_BITS + online + package
    # Deal; the equality (the coin product beside it); the xor.
    assert est.cost.peer_rounds == 1 + eq.rounds + 1


# ----------------------------------------------------------------------------------
# Protocol plumbing
# ----------------------------------------------------------------------------------
def test_same_seed_same_estimate_and_registry():
    data = _ratings(40, seed=8)
    proto = registry.make("pairs-2pc", KENDALL, epsilon=1.0, P=2)
    assert isinstance(proto, PairsTwoParty)
    entry = {e.name: e for e in registry.available()}["pairs-2pc"]
    assert entry.model is PrivacyModel.COMPUTATIONAL
    a = simulate(proto, data, rng=5)
    b = simulate(proto, data, rng=5)
    c = simulate(proto, data, rng=6)
    assert a.value == b.value and a.value != c.value
    api = fedustat.estimate(KENDALL, data, protocol="pairs-2pc", epsilon=1.0, P=2, rng=5)
    assert api.value == a.value


def test_deployment_noise_runs_without_a_seed():
    pytest.importorskip("opendp")
    from fedustat.privacy.noise import DeploymentNoise

    data = _ratings(8, seed=1)
    est = simulate(PairsTwoParty(KENDALL, 1.0, P=1, comparison="circuit",
                                 noise=DeploymentNoise()), data, rng=0)
    assert math.isfinite(est.value) and est.diagnostics["n_pairs"] == 4


@pytest.mark.parametrize("kernel_name", ["kendall", "auc", "gini", "duplicate"])
@pytest.mark.parametrize(("all_pairs", "comparison"),
                         [(False, "fss"), (True, "fss"), (False, "circuit")])
def test_relayed_release_does_not_depend_on_batching(kernel_name, all_pairs, comparison):
    kernel, data = _data(kernel_name, 21, 4)
    P = 1 if all_pairs else 3
    # Noise-free, the release is the exact statistic of the design the aggregator drew,
    # whichever way parties are batched; pairs cross batches through relay rounds.
    runs = [simulate(PairsTwoParty(kernel, math.inf, P=P, all_pairs=all_pairs, fixed_point=FP,
                                   comparison=comparison),
                     data, rng=2, batch_size=b) for b in (None, 1, 5, [4, 9, 8])]
    assert {r.value for r in runs} == {runs[0].value}
    assert all(r.cost == runs[0].cost for r in runs)
    design = runs[0].diagnostics["design"]
    encoded = _rounded(data) if kernel_name == "gini" else data
    assert runs[0].diagnostics["u_statistic"] == pytest.approx(
        incomplete_ustatistic(kernel, encoded, design), rel=1e-15, abs=1e-15)
    # With noise, each batch draws from its own stream; the costs follow the design only.
    noisy = [simulate(PairsTwoParty(kernel, 1.0, P=P, all_pairs=all_pairs,
                                    comparison=comparison), data, rng=2, batch_size=b)
             for b in (None, 5)]
    assert noisy[0].cost == noisy[1].cost


@pytest.mark.parametrize("kernel_name", ["kendall", "auc", "gini", "duplicate"])
@pytest.mark.parametrize(("all_pairs", "comparison"),
                         [(False, "fss"), (False, "circuit"), (True, "circuit")])
def test_a_pickled_and_restored_party_state_continues_identically(kernel_name, all_pairs,
                                                                  comparison):
    # A state that moves between engine workers or into a party's journal is pickled:
    # the members' suspended programs are left behind and rebuilt from the openings
    # received so far. Every step here starts from such a copy; the run must release
    # exactly the numbers of a run whose states never left memory.
    kernel, data = _data(kernel_name, 21, 6)
    P = 1 if all_pairs else 3

    def protocol() -> PairsTwoParty:
        return PairsTwoParty(kernel, 2.0, P=P, all_pairs=all_pairs, comparison=comparison)

    batches = [4, 9, 8]
    kept = simulate(protocol(), data, rng=5, batch_size=batches)
    restored_proto, replayed = protocol(), []
    step = restored_proto.party_step

    def from_a_pickle(state, inbox, rng):
        copy = pickle.loads(pickle.dumps(state))
        if copy.run is not None:
            assert copy.run.programs == {}  # nothing suspended travels
            replayed.append(len(copy.run.opened))
        return step(copy, inbox, rng)

    restored_proto.party_step = from_a_pickle  # instrumentation, not configuration
    restored = simulate(restored_proto, data, rng=5, batch_size=batches)
    assert restored.value == kept.value
    assert restored.std_error == kept.std_error
    assert restored.error == kept.error
    assert restored.cost == kept.cost
    np.testing.assert_array_equal(restored.diagnostics["design"].tuples,
                                  kept.diagnostics["design"].tuples)
    # The copies were taken mid-circuit, after openings had been received (the circuit
    # and the Beaver products take more than one round of openings).
    if comparison == "circuit" or kernel_name != "auc":
        assert max(replayed) >= 1


@pytest.mark.parametrize("comparison", ["fss", "circuit"])
def test_a_copied_state_and_its_original_both_continue_identically(comparison):
    # The engine copies a state before each step (a retried task starts from its input):
    # the copy takes over the running programs, and the original, run again as a retry
    # would, replays them from its openings. Both must send the same message; the run
    # goes on from the copy and releases the numbers of a run without copies.
    kernel, data = _data("kendall", 21, 7)

    def protocol() -> PairsTwoParty:
        return PairsTwoParty(kernel, 2.0, P=2, comparison=comparison)

    kept = simulate(protocol(), data, rng=4, batch_size=[8, 13])
    copied_proto, retried = protocol(), []
    step = copied_proto.party_step

    def copy_then_retry(state, inbox, rng):
        retry_rng = copy.deepcopy(rng)
        new_state, message = step(copy.deepcopy(state), inbox, rng)
        if state.run is not None and state.phase == 3:
            assert state.run.programs == {}  # handed over to the copy
            _, again = step(state, inbox, retry_rng)
            assert again.parties.tolist() == message.parties.tolist()
            assert again.fields.keys() == message.fields.keys()
            for name, values in message.fields.items():
                np.testing.assert_array_equal(again.fields[name], values)
            retried.append(len(state.run.opened))
        return new_state, message

    copied_proto.party_step = copy_then_retry  # instrumentation, not configuration
    got = simulate(copied_proto, data, rng=4, batch_size=[8, 13])
    assert (got.value, got.std_error, got.cost) == (kept.value, kept.std_error, kept.cost)
    assert retried and max(retried) >= 1


def test_relayed_steps_need_a_third_party_to_deal():
    with pytest.raises(ValueError, match="a third party deals each pair's correlated "
                                         "randomness, so the run needs at least 3 parties"):
        simulate(PairsTwoParty(KENDALL, 1.0), _ratings(2, 1), rng=1)


def test_a_package_from_another_party_than_the_dealer_is_refused():
    proto = PairsTwoParty(KENDALL, 1.0).configure(6)
    rng = np.random.default_rng(0)
    parties = proto.init_parties(_ratings(6, 1), np.arange(6))
    parties, join = proto.party_step(parties, None, rng)
    _, assignment = proto.server_step(proto.init_server(6), join, rng)
    parties, deal = proto.party_step(parties, assignment, rng)
    delivered = deliver_peer_rows(deal)
    forged = dict(delivered.fields)
    forged["from"] = (np.asarray(forged["from"]) + 1) % 6
    with pytest.raises(ValueError, match="exactly one row per pair from its dealer"):
        proto.party_step(parties, Message(Role.PARTY, Role.PARTY, forged,
                                          delivered.bits_per_value, delivered.parties), rng)


def test_split_noise_keeps_pair_values_and_their_spread_unreleased():
    est = simulate(PairsTwoParty(KENDALL, 1.0, P=2, noise_split="split"), _ratings(40, 2),
                   rng=1)
    assert est.diagnostics["pair_values"] is None
    m = 40
    noise = est.diagnostics["pair_noise_variance"] / m
    # Data-free bound: Kendall values lie in [-1, 1], so Var(f) <= 1.
    assert est.std_error == pytest.approx(math.sqrt(noise + 1.0 / m), rel=1e-12)


def test_std_error_covers_the_error_around_the_data_ustatistic():
    # Over seeds, the reported (conservative) s.e. is at least the RMSE around U_n.
    data = _ratings(200, seed=9)
    u_n = ustatistic(KENDALL, data)
    runs = [simulate(PairsTwoParty(KENDALL, 2.0, P=2, comparison="circuit"), data, rng=s)
            for s in range(60)]
    rmse = math.sqrt(np.mean([(r.value - u_n) ** 2 for r in runs]))
    mean_se = np.mean([r.std_error for r in runs])
    predicted = math.sqrt(permutation_conditional_variance(KENDALL, data, 2)
                          + runs[0].diagnostics["pair_noise_variance"] / 200)
    # The RMSE over 60 runs is within 5 standard errors of its prediction
    # (relative s.e. of an RMSE estimate ~ 1 / sqrt(2 * 60) for near-Gaussian errors).
    assert rmse == pytest.approx(predicted, rel=5 / math.sqrt(2 * 60))
    assert mean_se >= predicted * (1 - 5 / math.sqrt(2 * 60))


# ----------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", [vus_kernel(), variance_kernel((0, 1)), rand_index_kernel()])
def test_unsupported_kernels_are_refused(kernel):
    with pytest.raises(ValueError, match="pairs-2pc has two-party circuits for"):
        PairsTwoParty(kernel, 1.0)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="tau-b"):
        PairsTwoParty(kendall_tau_kernel("b"), 1.0)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        PairsTwoParty(KENDALL, 0.0)
    with pytest.raises(ValueError, match="P must be >= 1"):
        PairsTwoParty(KENDALL, 1.0, P=0)
    with pytest.raises(ValueError, match="does not apply with all_pairs=True"):
        PairsTwoParty(KENDALL, 1.0, P=2, all_pairs=True)
    with pytest.raises(ValueError, match="noise_split must be one of"):
        PairsTwoParty(KENDALL, 1.0, noise_split="both")
    with pytest.raises(ValueError, match="comparison must be one of"):
        PairsTwoParty(KENDALL, 1.0, comparison="garbled")
    with pytest.raises(TypeError, match="fixed_point must be"):
        PairsTwoParty(KENDALL, 1.0, fixed_point=(40, 14))
    with pytest.raises(TypeError, match="noise must be a NoiseSource"):
        PairsTwoParty(KENDALL, 1.0, noise=3)
    with pytest.raises(TypeError, match="all_pairs must be True or False"):
        PairsTwoParty(KENDALL, 1.0, all_pairs="yes")
    with pytest.raises(OverflowError, match="leaves no room for the noise"):
        PairsTwoParty(gini_kernel((0, 2.0**30)), 1.0, fixed_point=FP)
    with pytest.raises(ValueError, match=r"either fixed_point .* or bounds/precision"):
        PairsTwoParty(KENDALL, 1.0, fixed_point=FP, bounds=(0, 1))
    with pytest.raises(ValueError, match="precision needs bounds"):
        PairsTwoParty(KENDALL, 1.0, precision=1e-3)
    with pytest.raises(ValueError, match="precision must be a finite number > 0"):
        PairsTwoParty(KENDALL, 1.0, bounds=(0, 1), precision=0.0)
    with pytest.raises(ValueError, match="bounds has 3 pairs"):
        PairsTwoParty(KENDALL, 1.0, bounds=[(0, 1), (0, 1), (0, 1)])
    with pytest.raises(OverflowError, match="more than 64"):
        PairsTwoParty(gini_kernel((0, 1.0)), 1.0, precision=2.0**-50).run_fixed_point(1e-6)


def test_too_many_pairs_and_overflowing_data_are_refused():
    with pytest.raises(ValueError, match=r"all C\(30, 2\) = 435 pairs exceed max_pairs=100"):
        simulate(PairsTwoParty(KENDALL, 1.0, all_pairs=True, max_pairs=100), _ratings(30, 1))
    big = KENDALL.pack([1e9, 2e9, 3e9, 4e9], [1, 2, 3, 4])
    with pytest.raises(OverflowError, match="fixed-point range"):
        simulate(PairsTwoParty(KENDALL, 1.0), big, rng=0)
    small = FixedPoint(40, 14, headroom=1)
    assert simulate(PairsTwoParty(KENDALL, math.inf, fixed_point=small),
                    big / 1e3, rng=0).value == pytest.approx(1.0)
    with pytest.raises(ValueError, match="only one class"):
        simulate(PairsTwoParty(AUC, 1.0), np.column_stack([np.arange(6.0), np.ones(6)]),
                 rng=0)


def test_noise_that_cannot_fit_the_ring_is_refused():
    tiny = FixedPoint(16, 2, headroom=1)
    with pytest.raises(OverflowError, match="too small for this budget"):
        secure_pair_values(KENDALL, _ratings(10, 1), np.arange(10).reshape(5, 2),
                           pair_epsilon=1e-3, fixed_point=tiny, rng=0)


def test_bad_theory_inputs_are_refused():
    with pytest.raises(ValueError, match="zeta1 must be a finite variance"):
        theorem5_mse(10, 1, 1.0, -0.1, 0.2)
    with pytest.raises(ValueError, match="epsilon must be finite"):
        recommend_P(10, math.inf, 0.1, 0.3)
    with pytest.raises(ValueError, match="resolution is required"):
        pair_noise_variance(1.0, mechanism="discrete_laplace")
    with pytest.raises(ValueError, match="sensitivity must be 1"):
        pair_noise_variance(1.0, mechanism="randomized_response", sensitivity=2.0)
    with pytest.raises(ValueError, match="mechanism must be one of"):
        pair_noise_variance(1.0, mechanism="gaussian")
    with pytest.raises(ValueError, match="n must be even"):
        permutation_conditional_variance(KENDALL, _ratings(7, 1), 1)
    with pytest.raises(ValueError, match="pairs has a pair of a party with itself"):
        secure_pair_values(KENDALL, _ratings(4, 1), [[0, 0]], pair_epsilon=1.0)
    with pytest.raises(ValueError, match=r"pairs must have shape \(m, 2\)"):
        secure_pair_values(KENDALL, _ratings(4, 1), [0, 1], pair_epsilon=1.0)


def test_module_is_registered_under_its_name():
    assert registry.factory("pairs-2pc") is pairs_2pc._pairs_2pc


def test_declared_precision_decides_whether_close_scores_tie() -> None:
    # 25 positives at 0.5 + 1e-5, 25 negatives at 0.5: the exact AUC is 1.
    kernel = auc_kernel()
    data = kernel.pack(np.r_[np.full(25, 0.5 + 1e-5), np.full(25, 0.5)],
                       np.r_[np.ones(25), np.zeros(25)])
    fine = simulate(PairsTwoParty(kernel, math.inf, all_pairs=True, bounds=(0.0, 1.0),
                                  precision=1e-6), data, rng=1)
    assert fine.value == 1.0 and fine.diagnostics["encoding"]["resolution"] == 2.0**-20
    coarse = simulate(PairsTwoParty(kernel, math.inf, all_pairs=True, bounds=(0.0, 1.0),
                                    precision=1e-3), data, rng=1)
    assert coarse.value == 0.5
    assert coarse.diagnostics["encoding"]["ties"] == (
        "values closer than 0.000977 encode equally (ties)")
    # The 002 Sec. 6.1 format (2^-14) is coarser than 1e-5 too.
    assert simulate(PairsTwoParty(kernel, math.inf, all_pairs=True), data, rng=1).value == 0.5


@pytest.mark.parametrize("kernel_name", ["kendall", "duplicate", "auc"])
def test_relayed_per_pair_noise_has_the_stated_law(kernel_name):
    # Independent noise: each released pair value is public; against the noise-free run
    # with the same seed (same design: the aggregator's stream) the per-pair errors are
    # independent with mean 0 and variance pair_noise_variance (pairs cross batches).
    kernel, data = _data(kernel_name, 400, 5)
    noisy = simulate(PairsTwoParty(kernel, 2.0, P=2, fixed_point=FP), data, rng=8,
                     batch_size=7)
    exact = simulate(PairsTwoParty(kernel, math.inf, P=2, fixed_point=FP), data, rng=8,
                     batch_size=7)
    tuples = noisy.diagnostics["design"].tuples
    # AUC: pairs of one label are public zeros, computed by no one.
    computed = data[tuples[:, 0], 1] != data[tuples[:, 1], 1] if kernel_name == "auc" \
        else np.ones(len(tuples), dtype=bool)
    assert computed.sum() == noisy.diagnostics["n_computed_pairs"]
    err = (noisy.diagnostics["pair_values"] - exact.diagnostics["pair_values"])[computed]
    var = noisy.diagnostics["pair_noise_variance"]
    m = err.size
    assert abs(err.mean()) <= 5 * math.sqrt(var / m)
    assert (err**2).mean() == pytest.approx(var, abs=5 * (err**2).std(ddof=1) / math.sqrt(m))


def test_relayed_split_noise_sums_to_one_draw_per_pair():
    # Split noise: the two members' parts sum to one DLap per pair; over replicated runs
    # U_hat - U(design) (exact on the encoded data) has mean 0 and the stated variance.
    kernel, data = _data("gini", 9, 2)
    R = 150
    errors = []
    for seed in range(R):
        noisy = simulate(PairsTwoParty(kernel, 3.0, P=3, noise_split="split", fixed_point=FP),
                         data, rng=seed)
        exact = incomplete_ustatistic(kernel, _rounded(data), noisy.diagnostics["design"])
        errors.append(noisy.diagnostics["u_statistic"] - exact)
    err = np.array(errors)
    predicted = noisy.diagnostics["noise_std_error"] ** 2
    assert abs(err.mean()) <= 5 * math.sqrt(predicted / R)
    assert (err**2).mean() == pytest.approx(predicted, abs=5 * (err**2).std(ddof=1) / math.sqrt(R))
