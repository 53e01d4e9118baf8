"""FedAUC (004, Sun et al.): RR and Laplace / Gaussian label-DP AUC over K clients.

Monte Carlo checks repeat the protocol's randomized round from the same rank round (the
steps are pure, so this is a fresh run of the randomized part) and allow 5 standard
errors, computed from the number of draws and the measured moments.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

import fedustat
from fedustat.datasets.partitions import partition_clients
from fedustat.datasets.synthetic import classifier_scores
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.privacy.mechanisms import GaussianMechanism
from fedustat.privacy.noise import NoiseSource
from fedustat.privacy.randomizers import BinaryRandomizedResponse
from fedustat.privacy.verify import verify_ldp
from fedustat.protocols import registry
from fedustat.protocols.fedauc import protocol as fedauc
from fedustat.protocols.fedauc import variance as fv
from fedustat.protocols.fedauc.protocol import (
    FedAUC,
    FedAUCLap,
    FedAUCRR,
    adaptive_split,
    rank_scores,
)
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, kendall_tau_kernel, roc_auc

Z = 5.0


def run_fedauc(protocol, scores, labels, clients, rng=None, *, batch_size=None):
    """A FedAUC run with the given client of every sample, through the simulator."""
    return simulate(protocol, auc_kernel().pack(scores, labels), parties=np.asarray(clients),
                    rng=rng, batch_size=batch_size)
HYP = settings(deadline=None, max_examples=40, derandomize=True)


# ----------------------------------------------------------------------------- helpers


def binormal(n_pos: int, n_neg: int, seed: int, auc: float = 0.75):
    data = classifier_scores(n_pos, n_neg, auc, rng=seed)
    return np.asarray(data["score"]), np.asarray(data["label"])


def after_ranking(protocol: FedAUC, scores, labels, clients, seed: int = 0):
    """Client and server states after the deterministic rank round, and the ranks."""
    data = np.column_stack([scores, np.asarray(labels, dtype=float)])
    state = protocol.init_parties(data, np.asarray(clients))
    server = protocol.init_server(int(np.max(clients)) + 1)
    rng = np.random.default_rng(seed)
    state, up = protocol.party_step(state, None, rng)
    server, ranks = protocol.server_step(server, up, rng)
    return state, server, ranks


def releases(protocol: FedAUC, scores, labels, clients, runs: int, seed: int = 0):
    """``runs`` independent releases of the randomized round."""
    state, server, ranks = after_ranking(protocol, scores, labels, clients, seed)
    out = []
    for run in range(runs):
        rng = np.random.default_rng([seed, run])
        _, stats = protocol.party_step(state, ranks, rng)
        _, est = protocol.server_step(server, stats, rng)
        out.append(est)
    return out


def mean_within(draws: np.ndarray, target: float, sd: float) -> None:
    """The mean of R draws with standard deviation sd is within Z sd / sqrt(R) of target."""
    assert abs(draws.mean() - target) <= Z * sd / math.sqrt(draws.size), (draws.mean(), target)


def variance_within(draws: np.ndarray, target: float) -> None:
    """The sample variance is within Z standard errors of target.

    Var(s^2) = (mu_4 - sigma^4 (R - 3) / (R - 1)) / R, moments measured.
    """
    r = draws.size
    centered = draws - draws.mean()
    s2 = float(np.mean(centered**2) * r / (r - 1))
    mu4 = float(np.mean(centered**4))
    se = math.sqrt(max(mu4 - s2**2 * (r - 3) / (r - 1), 0.0) / r)
    assert abs(s2 - target) <= Z * se, (s2, target, se)
    return se


def exact_auc(scores, labels) -> Fraction:
    """AUC by brute-force pair counting, ties 1/2, as an exact rational."""
    s, y = np.asarray(scores), np.asarray(labels)
    pos, neg = s[y == 1], s[y == 0]
    diff = pos[:, None] - neg[None, :]
    twice = int(2 * np.sum(diff > 0) + np.sum(diff == 0))
    return Fraction(twice, 2 * pos.size * neg.size)


class ScriptedNoise(NoiseSource):
    """Test noise: no Laplace/Gaussian noise, randomized response keeps ``keep_mask``."""

    def __init__(self, keep_mask=None) -> None:
        self.keep_mask = keep_mask
        self.rng = np.random.default_rng(0)

    @property
    def kind(self):
        return "simulation"

    def laplace(self, scale, size):
        return np.zeros(size)

    def gaussian(self, sigma, size):
        return np.zeros(size)

    def discrete_laplace(self, scale, size):
        return np.zeros(size, dtype=np.int64)

    def uniform(self, size):
        return self.rng.random(size)

    def integers(self, high, size):
        return np.zeros(size, dtype=np.int64)

    def bernoulli(self, p, size):
        if self.keep_mask is None:
            return np.ones(size, dtype=bool)
        return np.asarray(self.keep_mask, dtype=bool)

    def polya(self, r, alpha, size):
        return np.zeros(size, dtype=np.int64)


ALL_VARIANTS = [
    lambda eps: FedAUCRR(eps),
    lambda eps: FedAUCLap(eps),
    lambda eps: FedAUCLap(eps, sensitivity="global"),
    lambda eps: FedAUCLap(eps, allocation="adaptive"),
    lambda eps: FedAUCLap(eps, mechanism="gaussian", delta=1e-6),
    lambda eps: FedAUCLap(eps, allocation="adaptive", mechanism="gaussian", delta=1e-6),
]


# ----------------------------------------------------------------------------- ranks


def test_ranks_are_mid_ranks_from_zero():
    s = np.array([0.3, 0.1, 0.3, 0.7, 0.1, 0.3])
    np.testing.assert_array_equal(rank_scores(s), scipy.stats.rankdata(s) - 1)
    np.testing.assert_array_equal(rank_scores([5.0, 1.0, 3.0]), [2.0, 0.0, 1.0])


# ----------------------------------------------------------------------------- exactness


@HYP
@given(scores=st.lists(st.integers(0, 6), min_size=4, max_size=60), data=st.data())
def test_non_private_equals_the_exact_auc_with_ties(scores, data):
    s = np.asarray(scores, dtype=float)
    y = np.asarray(data.draw(st.lists(st.integers(0, 1), min_size=s.size, max_size=s.size)))
    if y.min() == y.max():
        y[0] = 1 - y[0]
    k = data.draw(st.integers(1, s.size))
    kind = data.draw(st.sampled_from(["iid", "by-score"]))
    clients = partition_clients(s, k, kind, rng=1)
    exact = float(exact_auc(s, y))  # the correctly rounded rational
    for make in ALL_VARIANTS:
        est = run_fedauc(make(math.inf), s, y, clients, rng=2)
        assert est.value == exact == roc_auc(s, y)
        assert est.std_error == 0.0
        assert est.privacy.model is PrivacyModel.NONE


@pytest.mark.parametrize("tied", [False, True])
def test_non_private_matches_sklearn(tied):
    rng = np.random.default_rng(11)
    n = 20_000
    s = rng.integers(0, 40, n).astype(float) if tied else rng.normal(size=n)
    y = (rng.random(n) < 0.3).astype(int)
    clients = partition_clients(s, 137, "iid", rng=3)
    for make in ALL_VARIANTS:
        est = run_fedauc(make(math.inf), s, y, clients, rng=4)
        assert est.value == roc_auc(s, y)
        # sklearn integrates the ROC curve with the trapezoidal rule in floating point,
        # which can differ from the correctly rounded AUC in the last bits.
        assert est.value == pytest.approx(roc_auc_score(y, s), rel=1e-14, abs=0)


# ----------------------------------------------------------------------------- costs


@pytest.mark.parametrize("tied, rank_bits", [(False, 10), (True, 11)])
def test_bits_are_counted_per_client(tied, rank_bits):
    m, k = 1000, 10
    rng = np.random.default_rng(0)
    s = rng.integers(0, 50, m).astype(float) if tied else rng.normal(size=m)
    y = (rng.random(m) < 0.4).astype(int)
    clients = partition_clients(s, k, "iid", rng=1)  # 100 samples per client
    for make in (lambda: FedAUCRR(1.0), lambda: FedAUCLap(1.0, allocation="adaptive")):
        cost = run_fedauc(make(), s, y, clients, rng=2).cost
        up = 100 * 64 + 3 * 64  # shuffled scores, then localSum, localP, localN
        down = 100 * rank_bits  # ceil(log2 M), or ceil(log2(2M - 1)) for mid-ranks
        assert cost.bits_per_party == up and cost.max_bits_per_party == up
        assert cost.bits_received_per_party == down
        assert cost.total_bits == k * (up + down)
        assert cost.rounds == 3


def test_one_sample_per_client_costs():
    s, y = binormal(30, 70, seed=1)
    cost = run_fedauc(FedAUCRR(1.0), s, y, np.arange(100), rng=0).cost
    assert cost.bits_per_party == 64 + 3 * 64 and cost.bits_received_per_party == 7


def test_same_seed_same_estimate_and_batching_keeps_costs():
    s, y = binormal(200, 300, seed=2)
    clients = partition_clients(s, 25, "by-score")
    for make in ALL_VARIANTS:
        a = run_fedauc(make(2.0), s, y, clients, rng=9)
        b = run_fedauc(make(2.0), s, y, clients, rng=9)
        assert a.value == b.value and a.std_error == b.std_error
        c = run_fedauc(make(2.0), s, y, clients, rng=9, batch_size=4)
        assert c.cost == a.cost
        exact = run_fedauc(make(math.inf), s, y, clients, batch_size=7)
        assert exact.value == roc_auc(s, y)


# ----------------------------------------------------------------------------- privacy


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
def test_rr_randomizer_is_epsilon_label_dp(eps):
    assert verify_ldp(BinaryRandomizedResponse(eps)).passed


def test_rr_transcript_is_exactly_epsilon_label_dp():
    # Enumerate every flip pattern of 5 labels held by 2 clients and the server's view
    # (per-client localSum, localP, localN), for two label vectors differing in one label.
    eps = 1.0
    scores = np.array([0.2, 0.9, 0.4, 0.1, 0.6])
    clients = np.array([0, 0, 0, 1, 1])
    noise = ScriptedNoise()
    protocol = FedAUCRR(eps, noise=noise)
    keep = math.exp(eps) / (1 + math.exp(eps))

    def view_distribution(labels):
        state, _, ranks = after_ranking(protocol, scores, labels, clients)
        dist: dict[tuple, float] = {}
        for mask in itertools.product([True, False], repeat=5):
            noise.keep_mask = np.array(mask)
            _, msg = protocol.party_step(state, ranks, np.random.default_rng(0))
            view = tuple(np.concatenate([msg.fields[f] for f in
                                         ("local_sum", "local_pos", "local_neg")]).tolist())
            prob = math.prod(keep if m else 1 - keep for m in mask)
            dist[view] = dist.get(view, 0.0) + prob
        return dist

    base = np.array([1, 0, 1, 0, 1])
    for changed in range(5):
        other = base.copy()
        other[changed] = 1 - other[changed]
        d0, d1 = view_distribution(base), view_distribution(other)
        outputs = sorted(set(d0) | set(d1))
        table = {0: [d0.get(o, 0.0) for o in outputs], 1: [d1.get(o, 0.0) for o in outputs]}
        assert verify_ldp(table.__getitem__, inputs=[0, 1], epsilon=eps).passed
        # And the bound is tight: a smaller epsilon is violated.
        assert not verify_ldp(table.__getitem__, inputs=[0, 1], epsilon=0.9 * eps).passed


@pytest.mark.parametrize("make", [
    lambda: FedAUCLap(1.5),
    lambda: FedAUCLap(1.5, alpha=0.2),
    lambda: FedAUCLap(1.5, sensitivity="global", n_samples=40),
    lambda: FedAUCLap(1.5, allocation="adaptive"),
    lambda: FedAUCLap(1.5, allocation="orthogonal", beta=0.3),
])
def test_laplace_release_plan_is_epsilon_dp_per_client(make):
    # Changing label i of client k moves (X_0, X_1) by (1, c_i); the Laplace privacy loss
    # is 1/scale_0 + |c_i|/scale_1, which must not exceed epsilon for any i.
    protocol = make()
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 15, 40).astype(float)  # ties: mid-ranks
    clients = partition_clients(scores, 6, "iid", rng=2)
    order = np.argsort(clients, kind="stable")
    ranks = rank_scores(scores)[order]
    local = clients[order]
    starts = np.flatnonzero(np.diff(np.concatenate([[-1], local])))
    sizes = np.bincount(local)
    plan = protocol.release_plan(ranks, local, starts, sizes)
    s0, s1 = plan.scales[0][local], plan.scales[1][local]
    c = plan.sum_coefficients
    assert np.all((s1 > 0) | (c == 0))
    loss = 1.0 / s0 + np.where(s1 > 0, np.abs(c) / np.where(s1 > 0, s1, 1.0), 0.0)
    assert loss.max() <= protocol.epsilon * (1 + 1e-12)
    if protocol.sensitivity == "local":
        # The client's own bound is attained by one of its samples: no budget is wasted.
        worst = np.maximum.reduceat(loss, starts)
        np.testing.assert_allclose(worst, protocol.epsilon, rtol=1e-12)


@pytest.mark.parametrize("allocation", ["fixed", "orthogonal", "adaptive"])
def test_gaussian_release_plan_sensitivity(allocation):
    eps, delta = 1.0, 1e-5
    protocol = FedAUCLap(eps, delta=delta, mechanism="gaussian", allocation=allocation)
    scores = np.random.default_rng(3).normal(size=30)
    clients = partition_clients(scores, 4, "by-score")
    ranks = rank_scores(scores)
    order = np.argsort(clients, kind="stable")
    local = clients[order]
    starts = np.flatnonzero(np.diff(np.concatenate([[-1], local])))
    plan = protocol.release_plan(ranks[order], local, starts, np.bincount(local))
    s0, s1 = plan.scales[0][local], plan.scales[1][local]
    mahalanobis = np.sqrt((1 / s0) ** 2 + (plan.sum_coefficients / s1) ** 2)
    sigma_1 = GaussianMechanism(1.0, eps, delta).sigma
    assert mahalanobis.max() == pytest.approx(1 / sigma_1, rel=1e-12)


@pytest.mark.parametrize("allocation", ["fixed", "orthogonal", "adaptive"])
def test_noise_free_release_reconstructs_local_statistics(allocation):
    # With zero noise, localP' = sum y and localSum' = sum r y (Sec. 5.3: u' <u, y> +
    # <v', y> = <r, y>), so the estimate is the exact AUC.
    s, y = binormal(40, 60, seed=4)
    clients = partition_clients(s, 7, "iid", rng=0)
    protocol = FedAUCLap(1.0, allocation=allocation, noise=ScriptedNoise())
    est = run_fedauc(protocol, s, y, clients, rng=0)
    assert est.value == pytest.approx(roc_auc(s, y), abs=1e-12)


def test_guarantees():
    assert FedAUCRR(2.0).guarantee.epsilon == 2.0
    assert FedAUCRR(2.0).guarantee.model is PrivacyModel.LABEL
    assert FedAUCLap(2.0, delta=1e-3).guarantee.delta == 0.0  # Laplace: pure
    g = FedAUCLap(2.0, delta=1e-6, mechanism="gaussian").guarantee
    assert (g.epsilon, g.delta, g.model) == (2.0, 1e-6, PrivacyModel.LABEL)
    assert "label" in g.adjacency


# ----------------------------------------------------------------------------- RR


def test_rr_debiasing_is_unbiased_and_its_std_is_the_corrected_one():
    p, n, eps, runs = 600, 1400, 1.0, 3000
    s, y = binormal(p, n, seed=3)
    truth = roc_auc(s, y)
    clients = partition_clients(s, 20, "iid", rng=0)
    est = releases(FedAUCRR(eps), s, y, clients, runs)
    values = np.array([e.value for e in est])
    corrected = fv.rr_std_corrected(p + n, p, truth, eps)
    mean_within(values, truth, corrected)
    variance_within(values, corrected**2)
    # The standard error each estimate carries (at its released values) agrees too.
    assert np.mean([e.std_error for e in est]) == pytest.approx(corrected, rel=0.02)
    # Eq. 7 is the std of S / (P N) (flipped labels, true counts, no debiasing):
    # exactly, since Var(S) = rho(1-rho) sum r^2 for untied ranks.
    scaled_sum = np.array([e.diagnostics["global_sum"] for e in est]) / (p * n)
    variance_within(scaled_sum, fv.rr_std_eq7(p + n, p, eps) ** 2)


@pytest.mark.parametrize("eps", [0.5, 4.0])
def test_eq7_is_not_the_std_of_the_released_rr_estimate(eps):
    p, n, runs = 600, 1400, 2000
    s, y = binormal(p, n, seed=5)
    clients = partition_clients(s, 10, "by-score")
    values = np.array([e.value for e in releases(FedAUCRR(eps), s, y, clients, runs)])
    corrected = fv.rr_std_corrected(p + n, p, roc_auc(s, y), eps)
    se = variance_within(values, corrected**2)
    assert abs(values.var(ddof=1) - fv.rr_std_eq7(p + n, p, eps) ** 2) > Z * se


def test_rr_linearization_matches_numerical_derivatives():
    m, eps = 5000, 1.5
    rank_sum, rank_sq_sum = m * (m - 1) / 2, (m - 1) * m * (2 * m - 1) / 6
    s_val, p_val = 4.1e6, 1900.0

    def clean(s_, p_):
        terms = fv.rr_debias_terms(p_, m, eps)
        noisy = fv.auc_from_sums(s_, p_, m)
        return (noisy - (terms["alpha"] + terms["beta"]) / 2) / terms["D"]

    hs, hp = 1.0, 1e-3
    g_s = (clean(s_val + hs, p_val) - clean(s_val - hs, p_val)) / (2 * hs)
    g_p = (clean(s_val, p_val + hp) - clean(s_val, p_val - hp)) / (2 * hp)
    rho = fv.flip_probability(eps)
    var = rho * (1 - rho) * (g_s**2 * rank_sq_sum + 2 * g_s * g_p * rank_sum + g_p**2 * m)
    assert fv.rr_linearized_std(s_val, p_val, m, rank_sum, rank_sq_sum, eps) == pytest.approx(
        math.sqrt(var), rel=1e-6)


def test_rr_debias_terms_identities():
    m, eps, p_bar = 1000, 0.7, 430.0
    t = fv.rr_debias_terms(p_bar, m, eps)
    rho = t["rho"]
    # App. P eq. 10: P'(1 - rho) + N' rho = P_bar.
    assert t["P_est"] * (1 - rho) + t["N_est"] * rho == pytest.approx(p_bar)
    assert t["alpha"] == pytest.approx(rho * t["N_est"] / p_bar)
    assert t["beta"] == pytest.approx(rho * t["P_est"] / (m - p_bar))
    assert t["D"] == pytest.approx((1 - 2 * rho) * t["P_est"] * t["N_est"] / (p_bar * (m - p_bar)))


def test_rr_flips_each_label_once_and_reuses_them():
    s, y = binormal(50, 50, seed=6)
    protocol = FedAUCRR(1.0)
    state, _, ranks = after_ranking(protocol, s, y, np.zeros(100, dtype=int))
    state2, first = protocol.party_step(state, ranks, np.random.default_rng(1))
    assert state2.noisy_labels is not None
    flipped = np.mean(state2.noisy_labels != state2.labels)
    assert abs(flipped - fv.flip_probability(1.0)) <= Z * math.sqrt(0.2 / 100)
    # A repeated evaluation from the new state reuses the flipped labels.
    again = fedauc.FedAUCRR._local_message(protocol, state2, 2 * rank_scores(
        state2.scores).astype(np.int64), np.random.default_rng(2))[1]
    assert np.array_equal(again.fields["local_pos"], first.fields["local_pos"])


def test_rr_projects_the_estimated_class_counts_and_stays_finite():
    # At eps = 0.05 on 10 samples the flipped labels often estimate P' <= 0 or >= M, and
    # sometimes hold one class only (P_bar = 0 or M), where eq. 3 divides by zero: P' is
    # projected onto [1, M - 1] and the release stays a finite AUC in [0, 1].
    s, y = binormal(3, 7, seed=0)
    with pytest.warns(RuntimeWarning, match="projected to"):
        releases_ = [run_fedauc(FedAUCRR(0.05), s, y, np.arange(10), rng=r)
                     for r in range(40)]
    assert any("projected_pos" in e.diagnostics for e in releases_)
    for e in releases_:
        low, high = e.confidence_interval()
        assert all(math.isfinite(v) for v in (e.value, e.raw_value, e.std_error, low, high))
        assert 0.0 <= low <= e.value <= high <= 1.0


def test_rr_debiased_form_matches_eq3_where_defined():
    m, eps = 50, 0.8
    rank_sum, rank_sq = m * (m - 1) / 2, (m - 1) * m * (2 * m - 1) / 6
    for p_bar, s in [(20.0, 700.0), (31.0, 500.0), (25.0, 300.0)]:  # 1 < P' < M - 1
        t = fv.rr_debias_terms(p_bar, m, eps)
        eq3 = (fv.auc_from_sums(s, p_bar, m) - (t["alpha"] + t["beta"]) / 2) / t["D"]
        debiased = fv.rr_debiased_auc(s, p_bar, m, eps)
        assert debiased.value == pytest.approx(eq3, rel=1e-12)
        # The gradient is that of eq. 3: a central difference in P_bar agrees.
        h = 1e-4
        up = fv.rr_debiased_auc(s, p_bar + h, m, eps).value
        down = fv.rr_debiased_auc(s, p_bar - h, m, eps).value
        assert debiased.grad_pos == pytest.approx((up - down) / (2 * h), rel=1e-6)
        assert fv.rr_linearized_std(s, p_bar, m, rank_sum, rank_sq, eps) > 0
    # One class among the flipped labels: eq. 3 is undefined, the projected form is not.
    for p_bar in (0.0, float(m)):
        debiased = fv.rr_debiased_auc(0.0 if p_bar == 0 else rank_sum, p_bar, m, eps)
        assert debiased.projected_pos in (1.0, m - 1.0)
        assert math.isfinite(debiased.value) and math.isfinite(debiased.grad_pos)


# ----------------------------------------------------------------------------- Laplace


@pytest.mark.parametrize("sensitivity", ["local", "global"])
def test_eq8_eq9_with_one_sample_per_client(sensitivity):
    p, n, eps, alpha, runs = 400, 800, 2.0, 0.5, 2000
    m = p + n
    s, y = binormal(p, n, seed=7)
    protocol = FedAUCLap(eps, alpha=alpha, sensitivity=sensitivity, n_samples=m)
    est = releases(protocol, s, y, np.arange(m), runs)
    # App. N/O analyse the AUC with accurate P and N: (G - P(P-1)/2) / (P N).
    accurate = (np.array([e.diagnostics["global_sum"] for e in est]) - p * (p - 1) / 2) / (p * n)
    eps_sum = alpha * eps
    target = (fv.global_laplace_std_eq8(m, p, m, eps_sum) if sensitivity == "global"
              else fv.local_laplace_std_eq9(m, p, eps_sum))
    variance_within(accurate, target**2)
    # The estimate's own exact-count error bar is eq. 8 / 9 at its noisy counts.
    d = est[0].diagnostics
    at_noisy = target * p * n / (d["noisy_pos"] * (m - d["noisy_pos"]))
    assert d["std_error_exact_counts"] == pytest.approx(at_noisy, rel=1e-9)


@pytest.mark.parametrize("make", [
    lambda: FedAUCLap(1.0),
    lambda: FedAUCLap(1.0, sensitivity="global", n_samples=3000),
    lambda: FedAUCLap(1.0, allocation="adaptive"),
    lambda: FedAUCLap(1.0, allocation="orthogonal", beta=0.7),
    lambda: FedAUCLap(1.0, mechanism="gaussian", delta=1e-5),
    lambda: FedAUCLap(1.0, allocation="adaptive", mechanism="gaussian", delta=1e-5),
])
def test_released_std_matches_the_standard_error(make):
    s, y = binormal(900, 2100, seed=8)
    clients = partition_clients(s, 30, "iid", rng=4)
    est = releases(make(), s, y, clients, 2500)
    values = np.array([e.value for e in est])
    se = float(np.mean([e.std_error for e in est]))
    mean_within(values, roc_auc(s, y), se)
    variance_within(values, se**2)


def linearized_variance(protocol: FedAUCLap, s, y, clients) -> float:
    """Variance of the release at the true G and P, from the server's noise moments."""
    _, server, _ = after_ranking(protocol, s, y, clients)
    true_sum = float(np.dot(rank_scores(s), y))
    return fv.laplace_linearized_std(true_sum, float(y.sum()), s.size,
                                     *server.noise_moments) ** 2


@pytest.mark.parametrize("kind", ["iid", "by-score"])
@pytest.mark.parametrize("k", [1, 6, 60, 600, 6000])
def test_adaptive_is_never_worse_than_the_best_fixed_alpha(kind, k):
    s, y = binormal(1800, 4200, seed=9)
    clients = partition_clients(s, k, kind, rng=1)
    for eps in (1.0, 4.0):
        adaptive = linearized_variance(FedAUCLap(eps, allocation="adaptive"), s, y, clients)
        best_fixed = min(linearized_variance(FedAUCLap(eps, alpha=a), s, y, clients)
                         for a in np.linspace(0.02, 0.98, 49))
        assert adaptive <= best_fixed


@pytest.mark.parametrize("kind", ["iid", "by-score"])
@pytest.mark.parametrize("k", [1, 60, 600])
def test_adaptive_is_the_best_split_for_exact_counts(kind, k):
    # With exact P and N (004 Table 2's setting) the AUC's noise is globalSum's noise /
    # (P N), and the adaptive beta minimizes each client's localSum' variance (Sec. 5.3),
    # so no shared beta ("orthogonal", Fig. 1c) does better.
    s, y = binormal(1800, 4200, seed=9)
    clients = partition_clients(s, k, kind, rng=1)

    def sum_noise_var(protocol: FedAUCLap) -> float:
        return after_ranking(protocol, s, y, clients)[1].noise_moments[0]

    adaptive = sum_noise_var(FedAUCLap(1.0, allocation="adaptive"))
    best_shared = min(sum_noise_var(FedAUCLap(1.0, allocation="orthogonal", beta=b))
                      for b in np.linspace(0.02, 0.98, 49))
    assert adaptive <= best_shared


def test_adaptive_beats_best_fixed_alpha_by_monte_carlo():
    s, y = binormal(600, 1400, seed=10)
    clients = partition_clients(s, 20, "iid", rng=2)
    alphas = np.linspace(0.05, 0.95, 19)
    best = alphas[np.argmin([linearized_variance(FedAUCLap(1.0, alpha=a), s, y, clients)
                             for a in alphas])]
    runs = 1500
    adaptive = np.array([e.value for e in releases(FedAUCLap(1.0, allocation="adaptive"),
                                                    s, y, clients, runs)])
    fixed = np.array([e.value for e in releases(FedAUCLap(1.0, alpha=best), s, y, clients,
                                                 runs, seed=1)])
    # F test at the 5-sigma level that the adaptive variance is the smaller one.
    assert adaptive.var(ddof=1) < fixed.var(ddof=1)
    assert scipy.stats.f.sf(fixed.var(ddof=1) / adaptive.var(ddof=1), runs - 1, runs - 1) < 3e-7


def test_adaptive_split_closed_forms():
    from scipy.optimize import minimize_scalar

    for a, b in [(1.0, 1.0), (5.0, 1.0), (0.3, 40.0), (1e3, 2.5)]:
        lap = minimize_scalar(lambda t, a=a, b=b: a * a / t**2 + b * b / (1 - t) ** 2,
                              bounds=(1e-9, 1 - 1e-9), method="bounded",
                              options={"xatol": 1e-12})
        gau = minimize_scalar(lambda t, a=a, b=b: a * a / t + b * b / (1 - t),
                              bounds=(1e-9, 1 - 1e-9), method="bounded",
                              options={"xatol": 1e-12})
        assert adaptive_split(a, b) == pytest.approx(lap.x, abs=1e-6)
        assert adaptive_split(a, b, "gaussian") == pytest.approx(gau.x, abs=1e-6)
        beta = adaptive_split(a, b)
        assert a * a / beta**2 + b * b / (1 - beta) ** 2 == pytest.approx(
            (a ** (2 / 3) + b ** (2 / 3)) ** 3)
    # One sample per client (b = 0): everything on the count, localSum' = r localP'.
    np.testing.assert_array_equal(adaptive_split([3.0, 0.0], [0.0, 0.0]), [1.0, 1.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        adaptive_split([-1.0], [1.0])


# ----------------------------------------------------------------------------- formulas


def test_paper_formulas_against_table_2():
    m, p = 458_407, 117_317
    # App. N, Table 2: GlobalLaplace at K = M, eps = 1 has std 1.10e-2 (eq. 8 exactly).
    assert fv.global_laplace_std_eq8(m, p, m, 1.0) == pytest.approx(1.10e-2, rel=5e-3)
    # Sec. 6.2.2: GlobalLaplace / LocalLaplace ~ sqrt(3) at K = M.
    ratio = fv.global_laplace_std_eq8(m, p, m, 1.0) / fv.local_laplace_std_eq9(m, p, 1.0)
    assert ratio == pytest.approx(math.sqrt(3), rel=1e-5)
    # Eq. 7 at eps = 0: r(1-r) = 1/4.
    assert fv.rr_std_eq7(10, 4, 1e-12) == pytest.approx(
        math.sqrt(0.25 * 9 * 10 * 19 / 6) / 24, rel=1e-9)


# ----------------------------------------------------------------------------- API


def test_registry_factories():
    kernel = auc_kernel()
    assert isinstance(registry.make("fedauc-rr", kernel, epsilon=1.0), FedAUCRR)
    names = {
        "fedauc-laplace-local": "fedauc-laplace-local",
        "fedauc-laplace": "fedauc-laplace-local",
        "fedauc-laplace-global": "fedauc-laplace-global",
        "fedauc-adaptive": "fedauc-adaptive",
    }
    for reg, name in names.items():
        assert registry.make(reg, kernel, epsilon=1.0, n_clients=5).name == name
    gauss = registry.make("fedauc-gaussian", kernel, epsilon=1.0, delta=1e-6, alpha=0.3)
    assert gauss.name == "fedauc-gaussian" and gauss.alpha == 0.3
    with pytest.raises(ValueError, match="need the AUC kernel"):
        registry.make("fedauc-rr", kendall_tau_kernel("a"), epsilon=1.0)
    with pytest.raises(ValueError, match="needs delta > 0"):
        registry.make("fedauc-gaussian", kernel, epsilon=1.0)


def test_simulator_assigns_clients_from_the_configuration():
    s, y = binormal(120, 180, seed=11)
    data = auc_kernel().pack(s, y)
    proto = registry.make("fedauc-adaptive", auc_kernel(), epsilon=math.inf, n_clients=12,
                          partition="by-score")
    est = simulate(proto, data, rng=3)
    assert est.value == roc_auc(s, y)
    assert est.cost.bits_per_party == 25 * 64 + 3 * 64  # 12 clients of 25 samples
    explicit = FedAUCRR(1.0, client_of_sample=partition_clients(s, 12, "by-score"))
    assert simulate(explicit, data, rng=3).cost == est.cost
    api = fedustat.roc_auc_score(y, s, epsilon=math.inf, protocol="fedauc-rr", n_clients=10,
                                 rng=1)
    assert api.value == roc_auc(s, y) and api.cost.bits_per_party == 30 * 64 + 3 * 64


def test_through_the_public_api_one_sample_per_client():
    s, y = binormal(100, 150, seed=12)
    est = fedustat.roc_auc_score(y, s, epsilon=math.inf, protocol="fedauc-rr", rng=0)
    assert est.value == roc_auc(s, y)
    private = fedustat.roc_auc_score(y, s, epsilon=2.0, protocol="fedauc-adaptive", rng=0)
    assert private.privacy.model is PrivacyModel.LABEL and private.std_error > 0
    assert private.cost.rounds == 3


def test_server_refuses_a_transport_that_ignores_the_clients():
    s, y = binormal(30, 30, seed=13)
    proto = FedAUCRR(1.0, n_clients=6)
    with pytest.raises(ValueError, match="assign_parties"):
        proto.init_server(60)
    assert proto.init_server(6).n_clients == 6
    # With one sample per client the per-row contract is exact.
    est = simulate(FedAUCRR(math.inf), auc_kernel().pack(s, y), rng=0)
    assert est.value == roc_auc(s, y) and est.cost.bits_per_party == 64 * 4


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("call, exc, match", [
    (lambda s, y: run_fedauc(FedAUCRR(1.0), s, np.where(y == 1, 2, 0), np.zeros(20, int)),
     ValueError, "label must be binary"),
    (lambda s, y: run_fedauc(FedAUCRR(1.0), s, y, np.where(np.arange(20) < 10, 0, 2)),
     ValueError, "no samples"),
    (lambda s, y: run_fedauc(FedAUCRR(1.0, n_clients=3), s, y, np.arange(20) % 2),
     ValueError, "configured for 3 clients"),
    (lambda s, y: FedAUCRR(0.0), ValueError, "epsilon must be > 0"),
    (lambda s, y: FedAUCLap(-1.0), ValueError, "epsilon must be > 0"),
    (lambda s, y: run_fedauc(FedAUCRR(1.0), np.append(s[:-1], np.nan), y, np.zeros(20, int)),
     ValueError, "score contains 1 NaN"),
    (lambda s, y: run_fedauc(FedAUCRR(1.0), s[:-1], y, np.zeros(19, int)),
     ValueError, "inconsistent lengths"),
    (lambda s, y: run_fedauc(FedAUCRR(1.0), s, np.zeros(20), np.zeros(20, int)),
     ValueError, "no positive example"),
    (lambda s, y: FedAUCLap(1.0, alpha=1.0), ValueError, r"alpha must be in \(0, 1\)"),
    (lambda s, y: FedAUCLap(1.0, sensitivity="median"), ValueError, "sensitivity must be"),
    (lambda s, y: FedAUCLap(1.0, allocation="adaptive", sensitivity="global"), ValueError,
     "needs sensitivity='local'"),
    (lambda s, y: FedAUCLap(1.0, mechanism="gaussian"), ValueError, "needs delta > 0"),
    (lambda s, y: FedAUCLap(1.0, allocation="orthogonal", beta=0.0), ValueError,
     r"beta must be in \(0, 1\)"),
    (lambda s, y: FedAUCLap(1.0, allocation="orthogonal", sensitivity="global"), ValueError,
     "allocation='orthogonal' uses each client's own ranks"),
    (lambda s, y: FedAUCLap(1.0, allocation="even"), ValueError,
     "allocation must be 'fixed', 'orthogonal' or 'adaptive'"),
    (lambda s, y: FedAUCRR(1.0, partition="random"), ValueError, "partition must be one of"),
    (lambda s, y: simulate(FedAUCRR(1.0, n_clients=30), auc_kernel().pack(s, y)), ValueError,
     "exceeds the number of samples"),
    (lambda s, y: run_fedauc(FedAUCLap(1.0, sensitivity="global", n_samples=21), s, y,
                             np.zeros(20, int)), ValueError, "configured for n_samples=21"),
    (lambda s, y: run_fedauc("fedauc-rr", s, y, np.zeros(20, int)), TypeError,
     "protocol must be a fedustat Protocol"),
])
def test_bad_inputs(call, exc, match):
    s, y = binormal(8, 12, seed=14)
    with pytest.raises(exc, match=match):
        call(s, y)


# ------------------------------------------------------------------- error laws (issue 12)


def _binormal(n: int, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(np.float64)
    return np.column_stack([rng.normal(size=n) + y, y])


def test_gaussian_with_one_client_per_sample_no_longer_returns_nan() -> None:
    # n = 400, one client per sample, eps = 1: seed 4 drew a noisy positive count of -51,
    # which used to give NaN. It is now projected onto [1, M - 1] with a warning, and the
    # (very wide) interval still holds the exact AUC.
    data = _binormal(400)
    proto = registry.make("fedauc-gaussian", auc_kernel(), epsilon=1.0, delta=1e-5)
    with pytest.warns(RuntimeWarning, match=r"noisy positive count -51.* projected to 1"):
        est = simulate(proto, data, rng=4)
    assert est.diagnostics["projected_pos"] == 1.0
    assert math.isfinite(est.value) and math.isfinite(est.std_error)
    low, high = est.confidence_interval(0.95)
    assert low <= roc_auc_score(data[:, 1], data[:, 0]) <= high


def test_laplace_error_law_is_the_sum_of_the_clients_noises() -> None:
    from fedustat.privacy.errors import NormalError, SumOfErrors

    data = _binormal(200)
    few = simulate(registry.make("fedauc-laplace-global", auc_kernel(), epsilon=1.0,
                                 n_clients=3), data, rng=0)
    # Three clients, two Laplace noises each: a few dominant terms, kept exact.
    assert isinstance(few.error, SumOfErrors) and len(few.error.parts) == 6
    assert few.error.std == pytest.approx(few.std_error, rel=1e-9)
    many = simulate(registry.make("fedauc-laplace-global", auc_kernel(), epsilon=1.0),
                    data, rng=0)
    # 200 comparable client noises: normal (CLT).
    assert isinstance(many.error, NormalError)
    assert many.error.std == pytest.approx(many.std_error, rel=1e-9)
    rr = simulate(registry.make("fedauc-rr", auc_kernel(), epsilon=2.0), data, rng=0)
    assert isinstance(rr.error, NormalError) and rr.error.std == rr.std_error


def test_fedauc_states_its_trust_assumptions() -> None:
    from fedustat.privacy.guarantee import Trust

    local = registry.make("fedauc-laplace-local", auc_kernel(), epsilon=1.0).guarantee
    assert [a.kind for a in local.assumptions] == [Trust.LOCAL]
    glob = registry.make("fedauc-laplace-global", auc_kernel(), epsilon=1.0).guarantee
    assert [a.kind for a in glob.assumptions] == [Trust.LOCAL, Trust.SEMI_HONEST]
    assert "true ranks" in str(glob)


@pytest.mark.parametrize("mechanism", ["laplace", "gaussian"])
def test_deployment_noise_draws_each_entry_at_its_own_scale(mechanism):
    # Deployment samplers draw at each distinct scale (grouped by one sort); an entry of
    # scale 0 gets no noise. The mean square per group against 2 b^2 (Laplace) or sigma^2,
    # within 5 of its standard errors, var sqrt((kurtosis - 1) / m) with the kurtosis
    # E x^4 / var^2 = 6 for Laplace and 3 for the normal (false alarm below 1e-5).
    from fedustat.privacy.noise import DeploymentNoise
    from fedustat.protocols.fedauc.protocol import _scaled_noise

    m = 4000
    scales = np.repeat([0.0, 0.5, 2.0, 7.0], m).reshape(2, -1)
    draws = _scaled_noise(DeploymentNoise(), mechanism, scales).ravel()
    flat = scales.ravel()
    assert np.all(draws[flat == 0.0] == 0.0)
    kurtosis = 6.0 if mechanism == "laplace" else 3.0
    for scale in (0.5, 2.0, 7.0):
        expected = 2 * scale**2 if mechanism == "laplace" else scale**2
        got = np.mean(draws[flat == scale] ** 2)
        assert abs(got - expected) <= 5 * expected * math.sqrt((kurtosis - 1) / m)
