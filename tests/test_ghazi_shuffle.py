"""GhaziSM (002 Sec. 5, Table 1): split-and-mix summation of Ghazi et al.'s projections with
distributed discrete Laplace noise.

Checked here: the shares reconstruct and each message is uniform on Z_q (chi-square); the
shuffler permutes and the analyzer's sum ignores the order; the message-count bound and
its inversion; the noise-free release equals the U-statistic of the encoded kernel (and of
ldp-ghazi's quantized kernel up to the encoding); unbiasedness and the exact variance by
Monte Carlo with tolerances derived from the second and fourth moments; costs measured
from the messages; the guarantee; the advisor's prediction; bad input.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

import fedustat
from fedustat.advisor import advise
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.privacy.noise import DeploymentNoise, SimulationNoise
from fedustat.protocols import registry
from fedustat.protocols.local import ghazi as ldp_ghazi
from fedustat.protocols.local import ghazi_shuffle as gs
from fedustat.protocols.local.quantized_rr import pair_sum
from fedustat.runtime.simulate import simulate
from fedustat.secure.ring import Ring
from fedustat.stats import (
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
)

GINI = gini_kernel((0, 1))


def _counts(proto: gs.GhaziShuffle, data: np.ndarray, n: int) -> np.ndarray:
    grid = proto.grid_for(n)
    cells = grid.encode(np.asarray(data, dtype=float).reshape(n, -1))
    return np.bincount(cells, minlength=grid.size)


# ------------------------------------------------------------------ split-and-mix pieces


@settings(deadline=None, max_examples=40, derandomize=True)
@given(bits=st.integers(16, 64), r=st.integers(2, 12), n=st.integers(1, 20),
       m=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_shares_reconstruct_the_value(bits: int, r: int, n: int, m: int, seed: int) -> None:
    ring = Ring(bits)
    rng = np.random.default_rng(seed)
    values = rng.integers(-(2**40), 2**40, size=(n, m))
    shares = gs.split_and_mix(values, r, rng, ring=ring)
    assert shares.shape == (n, r, m)
    assert np.all(shares <= ring.mask)
    np.testing.assert_array_equal(ring.sum(shares, axis=1), ring.reduce(values))


def test_every_message_is_uniform_on_the_ring() -> None:
    # One fixed input shared many times: every message (first, middle, last share, and a
    # message drawn from the shuffled multiset) must be uniform on Z_{2^64}. The top 4
    # bits give 16 equiprobable classes under uniformity.
    ring = Ring(64)
    parties, r = 16_000, 3
    values = np.full((parties, 1), 123_456_789)
    shares = gs.split_and_mix(values, r, 7, ring=ring)
    shuffled = gs.shuffle_messages(shares, 8)[: parties, 0]
    for sample in (shares[:, 0, 0], shares[:, 1, 0], shares[:, r - 1, 0], shuffled):
        top = (sample >> np.uint64(60)).astype(np.int64)
        observed = np.bincount(top, minlength=16)
        assert sps.chisquare(observed).pvalue > 1e-4


def test_shuffle_permutes_each_coordinate_and_the_sum_ignores_the_order() -> None:
    ring = Ring(64)
    rng = np.random.default_rng(3)
    values = rng.integers(-1000, 1000, size=(50, 4))
    shares = gs.split_and_mix(values, 5, rng, ring=ring)
    mixed = gs.shuffle_messages(shares, 4)
    assert mixed.shape == (250, 4)
    flat = shares.reshape(-1, 4)
    np.testing.assert_array_equal(np.sort(mixed, axis=0), np.sort(flat, axis=0))
    assert not np.array_equal(mixed, flat)
    np.testing.assert_array_equal(gs.analyze_messages(mixed, ring), values.sum(axis=0))
    np.testing.assert_array_equal(gs.analyze_messages(flat, ring), values.sum(axis=0))


@pytest.mark.parametrize("h", [3, 50, 1000, 10**6])
@pytest.mark.parametrize("sigma", [10, 40, 80])
def test_message_count_is_the_smallest_meeting_the_bound(h: int, sigma: int) -> None:
    r = gs.split_and_mix_messages(h, 64, sigma)
    assert gs.split_and_mix_security(h, 64, r) >= sigma - 1e-9
    if r > 2:
        assert gs.split_and_mix_security(h, 64, r - 1) < sigma
    # O(1 + (sigma + log q) / log h) (Balle et al. 2020); 002 D.2.1's O(log n + kappa).
    assert r == max(2, math.ceil((2 * sigma + 64) / (math.log2(h) - math.log2(math.e)) + 1
                                 - 1e-12))


def test_shuffle_delta_formula() -> None:
    assert gs.shuffle_delta(1.0, 5, 40) == pytest.approx((1 + math.e) * 5 * 2.0**-40)


# ------------------------------------------------------------------ noise-free correctness


def _encoded_ustat(proto: gs.GhaziShuffle, counts: np.ndarray, n: int,
                   bounds: object) -> tuple[float, float]:
    """U of A_enc = Z_L^T Z_R / 4^c with the diagonal code g_x, from an independent
    encoding of ldp-ghazi's factorization, and U of ldp-ghazi's quantized kernel A."""
    grid = proto.grid_for(n)
    ref = ldp_ghazi.GhaziProjection(proto.kernel, 1.0, k=proto.bins_for(n), bounds=bounds)
    setup = ref.setup_for(ref.plan.grid(proto.bins_for(n)))
    c = proto.frac_bits
    z = np.rint(setup.vectors * 2.0**c).astype(np.int64)
    d = setup.half
    zl, zr = z[:d].astype(object), z[d:].astype(object)
    h = [int(v) for v in counts]
    sl = [sum(zl[j, x] * h[x] for x in range(grid.size)) for j in range(d)]
    sr = [sum(zr[j, x] * h[x] for x in range(grid.size)) for j in range(d)]
    inner = sum(a * b for a, b in zip(sl, sr, strict=True))
    diag = [int((int((zl[:, x] * zr[:, x]).sum()) + (1 << (c - 1))) >> c)
            for x in range(grid.size)]
    s_g = sum(g * hx for g, hx in zip(diag, h, strict=True))
    u_enc = (inner - s_g * (1 << c)) / ((1 << (2 * c)) * n * (n - 1))
    a = ref.quantized_kernel_for(setup.grid).matrices[0, 0]
    u_a = pair_sum(counts, a, 0.0) / (n * (n - 1) / 2.0)
    return u_enc, u_a


KENDALL_BOUNDS = [(0.0, 1.0), (0.0, 1.0)]


@pytest.mark.parametrize("kernel, data_fn, k, bounds", [
    (GINI, lambda r, n: r.uniform(size=n), 12, None),
    (kendall_tau_kernel("a"), lambda r, n: r.uniform(size=(n, 2)), 4, KENDALL_BOUNDS),
])
def test_noise_free_release_is_the_encoded_ustatistic(kernel, data_fn, k, bounds) -> None:
    n = 300
    rng = np.random.default_rng(11)
    data = data_fn(rng, n)
    proto = gs.GhaziShuffle(kernel, math.inf, k=k, bounds=bounds, n_messages=3)
    est = simulate(proto, data, rng=5)
    counts = _counts(proto, data, n)
    u_enc, u_a = _encoded_ustat(proto, counts, n, bounds)
    assert est.value == pytest.approx(u_enc, rel=1e-15, abs=1e-15)
    # Against ldp-ghazi's target: the encoding error plus the diagonal code's rounding.
    enc = proto.encoding_for(proto.grid_for(n))
    tol = enc.encoding_error + 2.0 ** (-proto.frac_bits - 1) / (n - 1)
    assert abs(est.value - u_a) <= tol + 1e-15
    assert est.privacy.model is PrivacyModel.NONE and est.std_error == 0.0
    # The batch split changes the coins, never the noise-free sum.
    assert simulate(proto, data, rng=6, batch_size=37).value == est.value


def test_constant_diagonal_is_public_and_not_sent() -> None:
    kernel = duplicate_pair_kernel()
    proto = gs.GhaziShuffle(kernel, math.inf, domain=list(range(5)), n_messages=2)
    rng = np.random.default_rng(2)
    data = rng.integers(0, 5, size=200).astype(float)
    enc = proto.encoding_for(proto.grid_for(200))
    assert enc.diagonal_public and enc.n_coordinates == 2 * enc.half
    est = simulate(proto, data, rng=1)
    exact = fedustat.stats.ustat.ustatistic(kernel, data)
    assert abs(est.value - exact) <= enc.encoding_error + 2.0 ** (-proto.frac_bits - 1) / 199


# ------------------------------------------------------------------ noise: Monte Carlo


def _fourth_moment_bound(proto: gs.GhaziShuffle, counts: np.ndarray, n: int) -> float:
    """E (U_hat - U)^4 <= (||W||_4 + ||Q||_4 + ||nu_g||_4)^4 / (n(n-1))^4 (Minkowski) with
    W = s_L.nu_R + s_R.nu_L, Q = nu_L.nu_R; E W^4 <= (3 + g) Var(W)^2, E Q^4 = d mu4^2 +
    3 d (d-1) tau^8, mu4 = (3 + g) tau^4, g the excess kurtosis of a Pólya difference
    with total shape R: (3 + p^2 / (2(1-p))) / R, p = 1 - t (at most its R = 1 value)."""
    enc, params = proto._setup(n)
    d, c = enc.half, enc.frac_bits
    tv2 = params.noise_var_vector / 4.0**c
    tg2 = params.noise_var_diagonal / 4.0**c

    def kurt(t: float) -> float:
        p = 1.0 - t
        return 3.0 + p * p / (2.0 * t) if t > 0 else 0.0

    g_v, g_g = kurt(params.t_vector), kurt(params.t_diagonal)
    s = enc.table[: 2 * d].astype(float) @ counts / 2.0**c
    var_w = tv2 * float(s @ s)
    w4 = (3 + g_v) * var_w**2
    mu4 = (3 + g_v) * tv2**2
    q4 = d * mu4**2 + 3 * d * (d - 1) * tv2**4
    n4 = (3 + g_g) * tg2**2
    return (w4**0.25 + q4**0.25 + n4**0.25) ** 4 / (n * (n - 1.0)) ** 4


@pytest.mark.parametrize("min_honest", [None, 10])
def test_unbiased_with_the_derived_variance(min_honest: int | None) -> None:
    n, draws = 40, 5000
    rng = np.random.default_rng(21)
    data = rng.beta(2, 5, size=n)
    proto = gs.GhaziShuffle(GINI, 1.0, k=6, n_parties=n, min_honest=min_honest)
    enc, params = proto._setup(n)
    counts = _counts(proto, data, n)
    true_sums = enc.table @ counts
    u_true = proto.estimate_from_sums(true_sums, n).raw_value
    # The parties' own noise draws (the party step's function), summed by the analyzer.
    noise = proto.party_noise(params, enc, draws * n, SimulationNoise(22))
    sums = true_sums + noise.reshape(draws, n, -1).sum(axis=1)
    # The raw estimator (unclipped at Gini 0) is the unbiased one.
    values = np.array([proto.estimate_from_sums(s, n).raw_value for s in sums])
    var = proto.variance(counts)
    err = values - u_true
    assert abs(err.mean()) <= 5 * math.sqrt(var / draws)
    mu4 = _fourth_moment_bound(proto, counts, n)
    assert abs(np.mean(err**2) - var) <= 5 * math.sqrt(mu4 / draws)
    # The data-free bound holds, and fewer honest parties means more noise (R = n/h).
    assert var <= proto.variance_bound(n)
    if min_honest is not None:
        base = gs.GhaziShuffle(GINI, 1.0, k=6, n_parties=n)
        assert params.noise_var_vector == pytest.approx(
            base._setup(n)[1].noise_var_vector * n / min_honest, rel=1e-12)


def test_full_pipeline_is_unbiased() -> None:
    n, runs = 30, 150
    rng = np.random.default_rng(31)
    data = rng.uniform(size=(n, 2))
    proto = gs.GhaziShuffle(kendall_tau_kernel("a"), 2.0, k=3, bounds=KENDALL_BOUNDS,
                            n_parties=n, delta=1e-6)
    clean = simulate(gs.GhaziShuffle(kendall_tau_kernel("a"), math.inf, k=3,
                                     bounds=KENDALL_BOUNDS, n_parties=n, n_messages=3),
                       data, rng=0).value
    values = np.array([simulate(proto, data, rng=s).raw_value for s in range(runs)])
    var = proto.variance(_counts(proto, data, n))
    assert abs(values.mean() - clean) <= 5 * math.sqrt(var / runs)


def test_standard_error_is_the_plug_in_of_the_exact_variance() -> None:
    n = 200
    data = np.random.default_rng(41).uniform(size=n)
    proto = gs.GhaziShuffle(GINI, 1.0, k=8, n_parties=n)
    est = simulate(proto, data, rng=3)
    enc, params = proto._setup(n)
    c, d = enc.frac_bits, enc.half
    tv2 = params.noise_var_vector / 4.0**c
    counts = _counts(proto, data, n)
    s = enc.table[: 2 * d].astype(float) @ counts / 2.0**c
    # The released variance replaces ||s||^2 by X = ||s + nu||^2 - 2 d tau^2 (clipped at
    # 0), E X = ||s||^2, Var X = 4 tau^2 ||s||^2 + 2d (2 + g) tau^4 (g: excess kurtosis,
    # at most 3 + p^2 / (2t)); so it is within 6 sd(X) tau^2 / (n(n-1))^2 of the exact
    # variance except with probability <= 1/36 (Chebyshev).
    p = 1.0 - params.t_vector
    g = 3.0 + p * p / (2.0 * params.t_vector)
    sd_x = math.sqrt(4 * tv2 * float(s @ s) + 2 * d * (2 + g) * tv2**2)
    exact = proto.variance(counts)
    assert est.std_error is not None and est.std_error > 0
    assert abs(est.std_error**2 - exact) <= 6 * sd_x * tv2 / (n * (n - 1.0)) ** 2


# ------------------------------------------------------------------ costs and guarantee


def test_costs_are_r_times_coordinates_ring_elements() -> None:
    n = 120
    data = np.random.default_rng(5).uniform(size=n)
    proto = gs.GhaziShuffle(GINI, 1.0, k=5, n_parties=n, delta=1e-8)
    est = simulate(proto, data, rng=1)
    r = est.diagnostics["n_messages"]
    m = est.diagnostics["n_coordinates"]
    assert m == 2 * est.diagnostics["dim"] + 1
    assert est.cost.bits_per_party == r * m * 64
    assert est.cost.max_bits_per_party == r * m * 64
    assert est.cost.rounds == 1
    # Without n_parties: a 1-bit check-in and the broadcast of (n, r, bins) first.
    counted = simulate(gs.GhaziShuffle(GINI, 1.0, delta=1e-8), data, rng=1)
    enc, params = gs.GhaziShuffle(GINI, 1.0, delta=1e-8)._setup(n)
    assert counted.cost.bits_per_party == params.n_messages * enc.n_coordinates * 64 + 1
    assert counted.cost.rounds == 3
    assert counted.cost.bits_received_per_party == 2 * gs.SETUP_BITS + gs.BINS_BITS


def test_guarantee_is_shuffle_model_dp_with_the_derived_delta() -> None:
    n = 500
    data = np.random.default_rng(6).uniform(size=n)
    est = fedustat.estimate(GINI, data, protocol="ghazi-shuffle", epsilon=1.0, delta=1e-9,
                            k=6, rng=2)
    d = est.diagnostics
    assert est.privacy.model is PrivacyModel.CENTRAL
    expected = gs.shuffle_delta(1.0, d["n_coordinates"], gs.split_and_mix_security(
        n, 64, d["n_messages"]))
    assert est.privacy.delta == pytest.approx(expected, rel=1e-12)
    assert 0 < est.privacy.delta <= 1e-9
    # delta = 0 asks for the default kappa = 40 bits per coordinate and reports its delta.
    pure = gs.GhaziShuffle(GINI, 1.0, k=6, n_parties=n)
    params = pure._setup(n)[1]
    assert params.security >= 40 + math.ceil(math.log2(d["n_coordinates"]))
    assert pure.guarantee_for(params).delta == pytest.approx(params.delta)
    entry = {e.name: e for e in registry.available()}["ghazi-shuffle"]
    assert entry.model is PrivacyModel.CENTRAL


def test_deployment_noise_runs() -> None:
    # OS randomness for shares and noise (small fixed point: the deployment Pólya sampler
    # counts Poisson arrivals one by one).
    n = 12
    data = np.linspace(0.05, 0.95, n)
    proto = gs.GhaziShuffle(GINI, 1.0, k=3, n_parties=n, frac_bits=4, ring_bits=32,
                            security_bits=5, noise=DeploymentNoise())
    est = simulate(proto, data, rng=0)
    assert math.isfinite(est.value) and est.diagnostics["party_noise"] == "deployment"


def test_advisor_prediction_matches_the_protocol() -> None:
    n = 400
    adv = advise("gini", n=n, epsilon=1.0, delta=1e-6, bounds=(0, 1))
    pred = adv.prediction("ghazi-shuffle")
    assert pred.eligible and pred.model is PrivacyModel.CENTRAL
    proto = gs.GhaziShuffle(GINI, 1.0, delta=1e-6, k=pred.run_params["k"], n_parties=n)
    assert pred.components["noise"] == pytest.approx(proto.variance_bound(n), rel=1e-12)
    data = np.random.default_rng(8).uniform(size=n)
    est = fedustat.estimate(GINI, data, protocol="ghazi-shuffle", epsilon=1.0, delta=1e-6,
                            rng=1, **pred.run_params)
    assert est.cost.bits_per_party == pred.bits_per_party
    assert est.cost.rounds == pred.rounds
    assert est.privacy.delta == pytest.approx(pred.delta, rel=1e-12)
    # With delta = 0 the protocol cannot deliver pure DP: listed but not eligible.
    assert not advise("gini", n=n, epsilon=1.0, bounds=(0, 1)).prediction(
        "ghazi-shuffle").eligible


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("kwargs, error, match", [
    ({"epsilon": 0.0}, ValueError, "epsilon"),
    ({"epsilon": 1.0, "delta": 1.0}, ValueError, "delta"),
    ({"epsilon": 1.0, "n_messages": 1}, ValueError, "n_messages"),
    ({"epsilon": 1.0, "min_honest": 2}, ValueError, "min_honest"),
    ({"epsilon": 1.0, "n_parties": 10, "min_honest": 20}, ValueError, "min_honest"),
    ({"epsilon": 1.0, "diagonal_share": 1.0}, ValueError, "diagonal_share"),
    ({"epsilon": 1.0, "ring_bits": 65}, ValueError, "ring_bits"),
    ({"epsilon": 1.0, "frac_bits": 62}, ValueError, "frac_bits"),
    ({"epsilon": 1.0, "n_parties": 100, "n_messages": 2}, ValueError,
     "no shuffle-model guarantee"),
    ({"epsilon": 1.0, "n_parties": 100, "n_messages": 30, "delta": 1e-30}, ValueError,
     "allowed delta"),
    ({"epsilon": 1.0, "n_parties": 10**6, "frac_bits": 60, "ring_bits": 64}, OverflowError,
     "ring"),
    ({"epsilon": math.inf, "k": None}, ValueError, "k must be given"),
])
def test_bad_parameters(kwargs, error, match) -> None:
    kwargs = {"k": 4, **kwargs}
    with pytest.raises(error, match=match):
        gs.GhaziShuffle(GINI, **kwargs)


def test_refused_kernels_and_data() -> None:
    with pytest.raises(ValueError, match="public columns"):
        gs.GhaziShuffle(auc_kernel(), 1.0, k=4, bounds=(0, 1))
    proto = gs.GhaziShuffle(GINI, 1.0, k=4, n_parties=50)
    with pytest.raises(ValueError, match="n_parties=50"):
        simulate(proto, np.linspace(0, 1, 40), rng=0)
    with pytest.raises(ValueError, match="sums must be"):
        proto.estimate_from_sums(np.zeros(3, dtype=np.int64), 50)
    with pytest.raises(ValueError, match="n_honest"):
        gs.split_and_mix_messages(2, 64, 40)
    with pytest.raises(ValueError, match="shares must have shape"):
        gs.shuffle_messages(np.zeros((4, 2)), 0)
    with pytest.raises(ValueError, match="values must have shape"):
        gs.split_and_mix(np.zeros(4, dtype=np.int64), 3, 0)
    with pytest.raises(ValueError, match="outside"):
        fedustat.estimate(GINI, np.array([0.1, 0.5, 1.5]), protocol="ghazi-shuffle",
                          epsilon=1.0, k=4, rng=0)


# ------------------------------------------------------------------- error law (issue 12)


def test_error_law_and_trust_assumptions() -> None:
    from fedustat.privacy.guarantee import Trust
    from fedustat.stats import gini_kernel

    domain = [i / 10 for i in range(11)]
    x = np.random.default_rng(3).choice(domain, size=200)
    est = simulate(registry.make("ghazi-shuffle", gini_kernel((0.0, 1.0)), epsilon=1.0,
                                 domain=domain), x, rng=0)
    # The law's variance is the released variance formula (the weights are rescaled to
    # its ||s||^2), so the two agree.
    assert est.error is not None
    assert est.error.std == pytest.approx(est.std_error, rel=1e-9)
    kinds = [a.kind for a in est.privacy.assumptions]
    assert kinds == [Trust.SHUFFLER, Trust.HONEST_NOISE]
    assert "at least 200 of the 200" in str(est.privacy)
