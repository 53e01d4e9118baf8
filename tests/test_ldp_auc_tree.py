"""Tests for the LDP AUC protocol on hierarchical histograms (``"ldp-tree"``).

Sources: 000 Sec. 4 (eq. 10, Theorem 3), 001 App. B (Alg. 2-3, Lemmas 5-6, Table 1).

Monte Carlo tolerances are derived, never guessed. A node estimate is a sum over parties
of independent contributions whose exact distribution is known (values ``+-alpha c`` or
0 with the users split, ``+-c`` with a budget split), so its mean, variance and fourth
central moment are computed exactly; with R replications a sample mean is checked within
5 sqrt(Var/R), a sample variance within 5 sqrt((mu4 - Var^2)/R), and a sample covariance
of (near-Gaussian) sums within 5 sqrt((Var_1 Var_2 + Cov^2)/R).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

import fedustat
from fedustat.datasets.synthetic import auc_one, ithdigit, ur
from fedustat.privacy import DeploymentNoise, PrivacyModel, verify_ldp
from fedustat.protocols import registry
from fedustat.protocols.base import Message, Role
from fedustat.protocols.local import auc_tree as tree
from fedustat.protocols.local.hierarchical import HierarchicalHistogram, pruned_uauc, uauc_exact
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, kendall_tau_kernel
from fedustat.stats.exact import roc_auc

KERNEL = auc_kernel()
Z = 5.0  # standard errors allowed in Monte Carlo checks


# ---------------------------------------------------------------------- exact recursion


def _strict_auc(pos: np.ndarray, neg: np.ndarray) -> float:
    return float(np.mean(pos[:, None] > neg[None, :]))


@settings(deadline=None, max_examples=40, derandomize=True)
@given(alpha=st.integers(1, 9), n=st.integers(2, 60), seed=st.integers(0, 2**32 - 1))
def test_exact_and_unpruned_recursion_equal_sklearn_auc(alpha: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = 1 << alpha
    # Few distinct values so that ties are frequent.
    scores = rng.integers(0, min(d, 1 + n // 3), n) * (d // min(d, 1 + n // 3))
    labels = np.zeros(n, dtype=int)
    labels[rng.choice(n, rng.integers(1, n), replace=False)] = 1
    pos, neg = scores[labels == 1], scores[labels == 0]
    expected = roc_auc_score(labels, scores)
    pairs = pos.size * neg.size
    assert uauc_exact(pos, neg, d) / pairs == pytest.approx(expected, abs=1e-12)
    # The paper's UAUC (leaf value 0) counts strictly ordered pairs only.
    assert uauc_exact(pos, neg, d, tie_term=False) / pairs == pytest.approx(
        _strict_auc(pos, neg), abs=1e-12)
    # The pruned recursion with exact counts and v = 0 recurses everywhere: exact AUC.
    hp, hn = HierarchicalHistogram(pos, d), HierarchicalHistogram(neg, d)
    rec = pruned_uauc(hp.estimator(), hn.estimator(), alpha=alpha, n_pos=pos.size,
                      n_neg=neg.size, v_pos=0.0, v_neg=0.0, a=2.0)
    assert rec.uauc / pairs == pytest.approx(expected, abs=1e-12)
    assert sum(rec.discarded) == 0 and rec.variance == 0.0


def test_exact_uauc_on_a_huge_sparse_domain() -> None:
    rng = np.random.default_rng(3)
    d = 1 << 50
    scores = rng.integers(0, 1 << 20, 3000) << 30  # repeated values: ties at the leaves
    labels = rng.integers(0, 2, 3000)
    pos, neg = scores[labels == 1], scores[labels == 0]
    got = uauc_exact(pos, neg, d) / (pos.size * neg.size)
    assert got == pytest.approx(roc_auc(scores, labels), abs=1e-12)


def test_hierarchical_histogram_counts() -> None:
    rng = np.random.default_rng(4)
    scores = rng.integers(0, 64, 500)
    hist = HierarchicalHistogram(scores, 64)
    for level in range(7):
        dense = np.bincount(scores >> (6 - level), minlength=1 << level)
        np.testing.assert_array_equal(hist.level_counts(level), dense)
        np.testing.assert_array_equal(hist.count(level, np.arange(1 << level)), dense)
    assert hist.count(0, [0])[0] == 500


# ---------------------------------------------------------------------- frequency oracle


def _contribution_moments(values: np.ndarray, probs: np.ndarray) -> tuple[float, float, float]:
    """Mean, variance and fourth central moment of a discrete variable (last axis)."""
    mean = np.sum(values * probs, axis=-1)
    centred = values - mean[..., None]
    return mean, np.sum(centred**2 * probs, axis=-1), np.sum(centred**4 * probs, axis=-1)


def _node_moments(scores: np.ndarray, rnd: tree.TreeReportRandomizer, level: int,
                  node: int) -> tuple[float, float, float]:
    """Exact mean, variance and mu4 of the estimate of one node (sum over parties)."""
    c = 1.0 / math.tanh(rnd.level_epsilon / 2.0)
    m = (rnd.prefix(scores, level) == node) / c  # E[sign] of each party's report
    if rnd.split == "users":
        alpha = rnd.alpha
        values = np.array([alpha * c, -alpha * c, 0.0])
        probs = np.stack([(1 + m) / (2 * alpha), (1 - m) / (2 * alpha),
                          np.full(m.shape, 1 - 1 / alpha)], axis=-1)
    else:
        values = np.array([c, -c])
        probs = np.stack([(1 + m) / 2, (1 - m) / 2], axis=-1)
    mean, var, mu4 = _contribution_moments(values, probs)
    total_var = float(var.sum())
    kappa4 = float(np.sum(mu4 - 3 * var**2))
    return float(mean.sum()), total_var, kappa4 + 3 * total_var**2


def _replicated_estimates(rnd: tree.TreeReportRandomizer, scores: np.ndarray, reps: int,
                          seed: int) -> dict[int, np.ndarray]:
    """Node estimates of every level over ``reps`` independent runs of the parties."""
    rng = np.random.default_rng(seed)
    out = {lvl: np.empty((reps, 1 << lvl)) for lvl in range(1, rnd.alpha + 1)}
    for r in range(reps):
        est = tree.LevelEstimates.from_reports(rnd, rnd.randomize(scores, rng))
        for lvl in range(1, rnd.alpha + 1):
            out[lvl][r] = est(lvl, np.arange(1 << lvl))
    return out


SCORES_8 = np.repeat(np.arange(8), [60, 0, 10, 25, 5, 70, 0, 30])  # 200 parties, d = 8


@pytest.mark.parametrize("split,epsilon", [("users", 1.0), ("budget-basic", 3.0)])
def test_node_estimates_unbiased_with_exact_variance(split: str, epsilon: float) -> None:
    rnd = tree.TreeReportRandomizer(8, epsilon, split=split, oracle="hadamard")
    reps = 1500
    est = _replicated_estimates(rnd, SCORES_8, reps, seed=11)
    n = SCORES_8.size
    for lvl, values in est.items():
        for node in range(1 << lvl):
            mean, var, mu4 = _node_moments(SCORES_8, rnd, lvl, node)
            count = int(np.count_nonzero(rnd.prefix(SCORES_8, lvl) == node))
            assert mean == pytest.approx(count)
            # The closed form derived in the module docstring: v - count.
            v = tree.node_variance_bound(n, rnd.alpha, rnd.level_epsilon, split, "hadamard")
            assert var == pytest.approx(v - count)
            x = values[:, node]
            assert abs(x.mean() - count) <= Z * math.sqrt(var / reps)
            assert abs(x.var(ddof=1) - var) <= Z * math.sqrt((mu4 - var**2) / reps)


def test_lemma5_bound_omits_n_minus_count() -> None:
    # 001 Lemma 5 bounds the MSE by 4 n e^eps / (e^eps - 1)^2; the exact variance is
    # n c^2 - count(q) = Lemma 5 + n - count(q). At eps_l = 3 an empty node's variance is
    # about 5.5 times Lemma 5's value, and the simulation shows it.
    rnd = tree.TreeReportRandomizer(8, 9.0, split="budget-basic", oracle="hadamard")
    assert rnd.level_epsilon == pytest.approx(3.0)
    n, e = SCORES_8.size, math.exp(3.0)
    lemma5 = 4 * n * e / (e - 1) ** 2
    reps = 1500
    est = _replicated_estimates(rnd, SCORES_8, reps, seed=12)
    empty = 1  # score 1 holds no party
    _, var, mu4 = _node_moments(SCORES_8, rnd, 3, empty)
    assert var == pytest.approx(lemma5 + n - 0)
    sample_var = est[3][:, empty].var(ddof=1)
    assert sample_var - lemma5 > Z * math.sqrt((mu4 - var**2) / reps)


@pytest.mark.parametrize("split", ["users", "budget-basic"])
def test_same_level_estimates_uncorrelated(split: str) -> None:
    # 001 Lemma 6: distinct nodes of one level are pairwise independent (budget split);
    # with users split the shared level draw leaves them uncorrelated.
    rnd = tree.TreeReportRandomizer(8, 1.0, split=split, oracle="hadamard")
    reps = 1500
    est = _replicated_estimates(rnd, SCORES_8, reps, seed=13)[3]
    for a, b in [(0, 5), (3, 7), (0, 1)]:
        _, var_a, _ = _node_moments(SCORES_8, rnd, 3, a)
        _, var_b, _ = _node_moments(SCORES_8, rnd, 3, b)
        cov = np.cov(est[:, a], est[:, b])[0, 1]
        assert abs(cov) <= Z * math.sqrt(var_a * var_b / reps)


@pytest.mark.parametrize("split", ["users", "budget-basic"])
def test_cross_level_covariance(split: str) -> None:
    # Users split: a party reports at one level only, so for nested nodes
    # Cov(h^_p, h^_p') = -count(p') (001 App. B.2.2: condition 4 of Theorem 3 fails).
    # Budget split: levels use independent coins, Cov = 0.
    scores = np.full(200, 5)
    rnd = tree.TreeReportRandomizer(8, 20.0 if split == "users" else 60.0, split=split,
                                    oracle="hadamard")
    reps = 2000
    est = _replicated_estimates(rnd, scores, reps, seed=14)
    top, leaf = est[1][:, 1], est[3][:, 5]  # node 1 of level 1 holds leaf 5
    _, var_top, _ = _node_moments(scores, rnd, 1, 1)
    _, var_leaf, _ = _node_moments(scores, rnd, 3, 5)
    expected = -200.0 if split == "users" else 0.0
    cov = np.cov(top, leaf)[0, 1]
    assert abs(cov - expected) <= Z * math.sqrt((var_top * var_leaf + expected**2) / reps)
    if split == "users":
        assert cov < -Z * math.sqrt(var_top * var_leaf / reps)  # clearly not independent


def test_fwht_and_per_node_estimates_agree() -> None:
    rng = np.random.default_rng(15)
    rnd = tree.TreeReportRandomizer(1 << 10, 1.0, split="users", oracle="hadamard")
    reports = rnd.randomize(rng.integers(0, 1 << 10, 3000), rng)
    fast = tree.LevelEstimates.from_reports(rnd, reports, method="fwht")
    slow = tree.LevelEstimates.from_reports(rnd, reports, method="per-node")
    for lvl in (1, 4, 10):
        nodes = np.arange(1 << lvl)
        np.testing.assert_allclose(fast(lvl, nodes), slow(lvl, nodes), atol=1e-8)
    assert fast.methods[9] == "fwht" and slow.methods[9] == "per-node"


# ---------------------------------------------------------------------- privacy


def test_users_split_randomizer_is_exactly_eps_ldp() -> None:
    rnd = tree.TreeReportRandomizer(8, 1.0, split="users", oracle="hadamard")
    check = verify_ldp(rnd)
    assert check.passed and check.observed_epsilon == pytest.approx(1.0)
    assert not verify_ldp(rnd, epsilon=0.99).passed
    # The level is public and data-independent: each level has probability 1/alpha for
    # every score.
    probs = rnd.output_distribution(np.arange(8))
    blocks = np.split(probs, np.cumsum([2 << lvl for lvl in range(1, 3)]), axis=1)
    for block in blocks:
        np.testing.assert_allclose(block.sum(axis=1), 1 / 3)
    assert rnd.guarantee.model is PrivacyModel.LOCAL and rnd.guarantee.delta == 0.0


def test_budget_basic_composed_randomizer_is_exactly_eps_ldp() -> None:
    rnd = tree.TreeReportRandomizer(8, 1.2, split="budget-basic", oracle="hadamard")
    assert rnd.output_size == 2 ** (3 + 6)
    check = verify_ldp(rnd)
    # Scores 0 and 7 differ at every level, so the alpha reports compose to exactly eps.
    assert check.passed and check.observed_epsilon == pytest.approx(1.2)


def test_budget_advanced_composed_randomizer_is_eps_delta_ldp() -> None:
    eps, delta = 0.1, 0.5
    rnd = tree.TreeReportRandomizer(8, eps, split="budget-advanced", delta=delta,
                                    oracle="hadamard")
    assert rnd.composition == "advanced" and rnd.level_epsilon > eps / 3
    assert rnd.guarantee.delta == delta
    # Not pure eps-LDP (three reports of eps_l > eps/3 each) ...
    pure = verify_ldp(rnd, epsilon=eps)
    assert not pure.passed
    assert pure.observed_epsilon == pytest.approx(3 * rnd.level_epsilon)
    # ... but (eps, delta)-LDP, checked exactly through the hockey-stick divergence.
    assert verify_ldp(rnd, epsilon=eps, delta=delta).passed


def test_budget_advanced_falls_back_to_basic_when_that_is_larger() -> None:
    rnd = tree.TreeReportRandomizer(8, 1.0, split="budget-advanced", delta=1e-6,
                                    oracle="hadamard")
    assert rnd.composition.startswith("basic") and rnd.level_epsilon == pytest.approx(1 / 3)
    assert rnd.guarantee.delta == 0.0 and verify_ldp(rnd).passed


@pytest.mark.parametrize("split", ["users", "budget-basic"])
def test_randomize_matches_the_verified_distribution(split: str) -> None:
    rnd = tree.TreeReportRandomizer(4, 1.0, split=split, oracle="hadamard")
    draws = 20000
    rep = rnd.randomize(np.full(draws, 2), np.random.default_rng(16))
    if split == "users":
        offsets = np.array([0, 4])  # level 1 has 4 outputs, level 2 has 8
        codes = offsets[rep["level"] - 1] + 2 * rep["j"] + rep["bit"]
    else:
        per_level = 2 * rep["j"] + rep["bit"]  # level 1 in 0..3, level 2 in 0..7
        codes = per_level[:, 0] * 8 + per_level[:, 1]
    probs = rnd.output_distribution(2)
    counts = np.bincount(codes, minlength=probs.size)
    tol = Z * np.sqrt(draws * probs * (1 - probs))
    assert np.all(np.abs(counts - draws * probs) <= tol)


# ---------------------------------------------------------------------- the protocol


def _data(ds) -> tuple[np.ndarray, float]:
    s, y = ds.columns["score"], ds.columns["label"]
    return KERNEL.pack(s, y), roc_auc(s, y)


CASES = [
    ("auc_one", lambda: auc_one(8, 2000, rng=1)),
    ("ur", lambda: ur(8, 2000, rng=2)),
    ("ithdigit", lambda: ithdigit(2000, alpha=16, rng=3)),
]


@pytest.mark.parametrize("name,make", CASES)
@pytest.mark.parametrize("split,delta,reps", [("users", 0.0, 40), ("budget-basic", 0.0, 15),
                                              ("budget-advanced", 0.1, 15)])
def test_mse_within_theorem3_bound(name: str, make, split: str, delta: float,
                                   reps: int) -> None:
    ds = make()
    data, exact = _data(ds)
    d = ds.params["d"]
    errors, bounds = [], set()
    for r in range(reps):
        est = simulate(tree.LdpAucTree(KERNEL, 1.0, d=d, split=split, delta=delta,
                                       recursion="pruned"), data, rng=100 + r)
        errors.append(est.value - exact)
        bounds.add(est.diagnostics["mse_bound"])
        assert est.diagnostics["theorem3_requires_alpha_le_sqrt_n"]
    if split == "budget-advanced":
        assert est.diagnostics["composition"] == "advanced"
    (bound,) = bounds
    assert bound == pytest.approx(tree.theorem3_mse_bound(
        2000, 2000, ds.params["alpha"], est.diagnostics["C"], est.diagnostics["a"]))
    assert float(np.mean(np.square(errors))) <= bound


def test_large_epsilon_error_is_the_one_bit_floor() -> None:
    # As eps grows, c -> 1 but one Hadamard bit per party still leaves
    # Var(h^_q) = alpha n - count(q) (users split): the estimate is unbiased with that
    # error, and no more.
    ds = ur(4, 20000, rng=5)
    data, exact = _data(ds)
    est = simulate(tree.LdpAucTree(KERNEL, 50.0, d=16, oracle="hadamard",
                                   recursion="pruned"), data, rng=6)
    assert est.diagnostics["v_pos"] == pytest.approx(4 * 20000)
    assert abs(est.value - exact) <= Z * est.std_error
    assert est.std_error < 0.02


def test_std_error_matches_the_spread_on_auc_one() -> None:
    # On auc_one no discarded interval holds both classes, so the plug-in standard error
    # covers the whole error. Over R runs the RMSE has relative sd about 1/sqrt(2R).
    data, exact = _data(auc_one(6, 3000, rng=7))
    reps = 200
    errors, ses = [], []
    for r in range(reps):
        est = simulate(tree.LdpAucTree(KERNEL, 1.0, d=64, recursion="pruned"), data, rng=r)
        errors.append(est.raw_value - exact)  # the raw estimator, not clipped at AUC 1
        ses.append(est.std_error)
    rmse = math.sqrt(np.mean(np.square(errors)))
    rel_sd = 1 / math.sqrt(2 * reps)
    assert abs(rmse / np.sqrt(np.mean(np.square(ses))) - 1) <= Z * rel_sd


def test_costs_guarantee_and_diagnostics() -> None:
    data, _ = _data(ur(5, 300, rng=8))
    est = simulate(tree.LdpAucTree(KERNEL, 1.0, d=32, oracle="hadamard",
                                   recursion="pruned"), data, rng=9)
    assert est.protocol == "ldp-tree" and est.quantity == "auc"
    assert est.cost.rounds == 1
    assert est.cost.bits_per_party == est.cost.max_bits_per_party == 5 + 3
    assert est.cost.total_bits == 600 * 8
    assert est.privacy.model is PrivacyModel.LOCAL and est.privacy.epsilon == 1.0
    assert est.privacy.adjacency == tree.ADJACENCY
    diag = est.diagnostics
    assert len(diag["recursed_per_level"]) == len(diag["discarded_per_level"]) == 5
    assert diag["recursed_per_level"][0] + diag["discarded_per_level"][0] == 1  # the root
    assert sum(diag["reports_per_level_pos"]) == diag["n_pos"] == 300
    assert diag["a"] > 1 and diag["tau"] == pytest.approx(
        diag["a"] * math.sqrt(diag["v_pos"] * diag["v_neg"]))
    budget = simulate(tree.LdpAucTree(KERNEL, 1.0, d=32, split="budget-basic",
                                      oracle="hadamard"), data, rng=9)
    assert budget.cost.bits_per_party == 1 + 15 + 5


def test_deep_domain_uses_per_node_queries() -> None:
    # d = 2^30: a full level would need 2^30 floats; the recursion follows the two
    # occupied paths with a few node queries per level instead.
    data, exact = _data(auc_one(30, 1000, rng=10))
    est = simulate(tree.LdpAucTree(KERNEL, 4.0, d=1 << 30, oracle="hadamard"), data, rng=11)
    methods = est.diagnostics["estimation_pos"]
    assert methods[0] == "fwht" and methods[-1] == "per-node"
    assert abs(est.value - exact) <= Z * est.std_error
    assert est.cost.bits_per_party == 33


def test_reproducible_and_batch_invariant_costs() -> None:
    data, _ = _data(ur(6, 500, rng=12))
    proto = tree.LdpAucTree(KERNEL, 1.0, d=64)
    first, again = simulate(proto, data, rng=13), simulate(proto, data, rng=13)
    assert first.value == again.value and first.std_error == again.std_error
    batched = simulate(proto, data, rng=13, batch_size=64)
    assert math.isfinite(batched.value)
    for attr in ("bits_per_party", "max_bits_per_party", "total_bits", "rounds"):
        assert getattr(batched.cost, attr) == getattr(first.cost, attr)


def test_public_api_and_registry() -> None:
    rng = np.random.default_rng(14)
    y = rng.integers(0, 2, 400)
    s = np.minimum(rng.integers(0, 64, 400) + 10 * y, 63)
    est = fedustat.roc_auc_score(y, s, epsilon=2.0, protocol="ldp-tree", d=64, rng=0)
    assert est.protocol == "ldp-tree" and math.isfinite(est.value)
    entry = {e.name: e for e in registry.available()}["ldp-tree"]
    assert entry.model is PrivacyModel.LOCAL
    proto = registry.make("ldp-tree", KERNEL, epsilon=1.0, delta=1e-3, d=64,
                          split="budget-advanced", a=2.0)
    assert isinstance(proto, tree.LdpAucTree) and proto.a == 2.0


def test_deployment_noise_on_a_few_parties() -> None:
    proto = tree.LdpAucTree(KERNEL, 1.0, d=16, noise=DeploymentNoise(), oracle="hadamard")
    state = proto.init_parties(KERNEL.pack([3, 15, 0], [1, 0, 1]), np.arange(3))
    _, msg = proto.party_step(state, None, np.random.default_rng(0))
    assert msg.sender is Role.PARTY and np.all(msg.fields["index"] >= 2)
    assert np.all(msg.bits_per_row() == 4 + 3)


def test_optimal_a_minimizes_the_theorem3_bound() -> None:
    for n_pos, n_neg, alpha, C in [(10**4, 10**4, 10, 4.7), (500, 20000, 20, 50.0)]:
        a = tree.optimal_a(n_pos, n_neg, alpha, C)
        best = tree.theorem3_mse_bound(n_pos, n_neg, alpha, C, a)
        for factor in (0.99, 1.01):
            assert best <= tree.theorem3_mse_bound(n_pos, n_neg, alpha, C, a * factor)
    # For large classes the exact root approaches 001's approximation (from below).
    n, alpha, C = 10**9, 20, 4.7
    approx = (1 + math.sqrt(21 / 8) * (2 * C * 2 * n * alpha / n**2) ** 0.25) ** 2
    a = tree.optimal_a(n, n, alpha, C)
    assert a <= approx and a == pytest.approx(approx, rel=0.01)


# ---------------------------------------------------------------------- bad inputs


def test_bad_inputs() -> None:
    good = KERNEL.pack([0, 3, 7, 2], [1, 0, 1, 0])
    with pytest.raises(ValueError, match="outside the declared domain"):
        simulate(tree.LdpAucTree(KERNEL, 1.0, d=4), good, rng=0)
    with pytest.raises(ValueError, match="quantize first"):
        simulate(tree.LdpAucTree(KERNEL, 1.0, d=8), KERNEL.pack([0.5, 3, 7, 2], [1, 0, 1, 0]),
                 rng=0)
    with pytest.raises(ValueError, match="label must be binary"):
        simulate(tree.LdpAucTree(KERNEL, 1.0, d=8), np.array([[1, 0], [2, 2], [3, 1]]), rng=0)
    with pytest.raises(ValueError, match=r"data has 3 column\(s\) but kernel 'auc' needs 2"):
        simulate(tree.LdpAucTree(KERNEL, 1.0, d=8), np.array([[1, 0, 1], [2, 1, 1]]), rng=0)
    with pytest.raises(ValueError, match="no positive party"):
        simulate(tree.LdpAucTree(KERNEL, 1.0, d=8), np.array([[1.0, 0.0], [2.0, 0.0]]), rng=0)
    for eps in (0.0, -1.0):
        with pytest.raises(ValueError, match="epsilon must be > 0"):
            tree.LdpAucTree(KERNEL, eps, d=8)
    with pytest.raises(ValueError, match="finite epsilon"):
        tree.LdpAucTree(KERNEL, math.inf, d=8)
    for d in (6, 1, 0):
        with pytest.raises(ValueError, match="power of two"):
            tree.LdpAucTree(KERNEL, 1.0, d=d)
    with pytest.raises(TypeError, match="d must be an integer"):
        tree.LdpAucTree(KERNEL, 1.0, d=8.0)
    with pytest.raises(ValueError, match=r"d must be <= 2\^53"):
        tree.LdpAucTree(KERNEL, 1.0, d=1 << 54)
    with pytest.raises(ValueError, match="needs the public score domain size d"):
        registry.make("ldp-tree", KERNEL, epsilon=1.0)
    with pytest.raises(ValueError, match="computes the AUC only"):
        tree.LdpAucTree(kendall_tau_kernel("a"), 1.0, d=8)
    with pytest.raises(ValueError, match="split must be one of"):
        tree.LdpAucTree(KERNEL, 1.0, d=8, split="levels")
    with pytest.raises(ValueError, match="needs delta > 0"):
        tree.LdpAucTree(KERNEL, 1.0, d=8, split="budget-advanced")
    with pytest.raises(ValueError, match="a must be a finite number > 1"):
        tree.LdpAucTree(KERNEL, 1.0, d=8, a=1.0)
    with pytest.raises(TypeError, match="noise must be a NoiseSource"):
        tree.LdpAucTree(KERNEL, 1.0, d=8, noise=np.random.default_rng(0))
    proto = tree.LdpAucTree(KERNEL, 1.0, d=8)
    state = proto.init_parties(np.array([[1.0, 1.0], [2.0, 0.0]]), np.arange(2))
    with pytest.raises(RuntimeError, match="single round"):
        proto.party_step(state, Message(Role.SERVER, Role.PARTY, {}, {}), np.random.default_rng())


def test_public_score_bounds_bin_real_scores_into_d_cells() -> None:
    rng = np.random.default_rng(12)
    scores = rng.uniform(0.0, 1.0, 4000)
    labels = (rng.uniform(size=4000) < scores).astype(int)
    binned = np.minimum((scores * 64).astype(int), 63)
    kernel = auc_kernel()
    via_bounds = fedustat.estimate(kernel, kernel.pack(scores, labels), epsilon=2.0,
                                   protocol="ldp-tree", bounds={"score": (0.0, 1.0)}, d=64,
                                   rng=5)
    via_integers = fedustat.estimate(kernel, kernel.pack(binned, labels), epsilon=2.0,
                                     protocol="ldp-tree", d=64, rng=5)
    assert via_bounds.value == via_integers.value
    with pytest.raises(ValueError, match="outside"):
        fedustat.estimate(kernel, kernel.pack(scores * 2, labels), epsilon=2.0,
                          protocol="ldp-tree", bounds=(0.0, 1.0), rng=5)
    with pytest.raises(ValueError, match="score only"):
        fedustat.estimate(kernel, kernel.pack(scores, labels), epsilon=2.0,
                          protocol="ldp-tree", bounds={"label": (0, 1)}, rng=5)


# ------------------------------------------------------------------- error law (issue 12)


def test_discarding_bias_bound_is_added_to_the_interval() -> None:
    from fedustat.privacy.errors import BoundedBias
    from fedustat.privacy.guarantee import Trust

    rng = np.random.default_rng(3)
    n, d = 2000, 64
    y = (rng.random(n) < 0.5).astype(np.float64)
    scores = np.clip(np.round(8.0 * rng.normal(size=n) + 8.0 * y + d / 2), 0, d - 1)
    est = simulate(registry.make("ldp-tree", KERNEL, epsilon=0.5, d=d, recursion="pruned"),
                   np.column_stack([scores, y]), rng=0)
    assert sum(est.diagnostics["discarded_per_level"]) > 0
    assert isinstance(est.error, BoundedBias) and est.error.bound > 0
    # The bound: half of tau per discarded node at most, in AUC units.
    pairs = est.diagnostics["n_pos"] * est.diagnostics["n_neg"]
    assert est.error.bound <= 0.5 * est.diagnostics["tau"] * sum(
        est.diagnostics["discarded_per_level"]) / pairs
    assert est.error.base.std == pytest.approx(est.std_error)
    assert [a.kind for a in est.privacy.assumptions] == [Trust.LOCAL]


def test_pruned_uauc_without_noise_has_no_discarding_bias() -> None:
    rng = np.random.default_rng(5)
    pos, neg = rng.integers(0, 16, 30), rng.integers(0, 16, 40)
    exact = pruned_uauc(HierarchicalHistogram(pos, 16).count,
                        HierarchicalHistogram(neg, 16).count, alpha=4, n_pos=30, n_neg=40,
                        v_pos=0.0, v_neg=0.0, a=2.0)
    assert exact.discard_bias == 0.0 and sum(exact.discarded) == 0
    # With (pretend) noise variances large enough to discard at the root, the bound is
    # half the floored product of the root counts, the public class sizes.
    pruned = pruned_uauc(HierarchicalHistogram(pos, 16).count,
                         HierarchicalHistogram(neg, 16).count, alpha=4, n_pos=30, n_neg=40,
                         v_pos=1e4, v_neg=1e4, a=2.0)
    assert pruned.discarded[0] == 1
    assert pruned.discard_bias == pytest.approx(0.5 * max(30, pruned.floor_pos)
                                                * max(40, pruned.floor_neg))
