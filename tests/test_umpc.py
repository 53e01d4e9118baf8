"""U-MPC (``fedustat.protocols.mpc.umpc``, 002 Protocol 3.1) and its secure kernel circuits.

Sources: Protocol 3.1 (phases), Lemma C.1 (correctness: U_hat = U_{f,E} + eta / |E|),
App. C.2.3 (sensitivity delta_G^max Delta f / |E|), Lemma C.3 (communication), Protocol B.1
and Sec. 4 (noise, |Z|), Claim D.1 / Lemma D.3 (error), App. F (BalancedSamp).

Monte Carlo tolerances (5 standard errors, derived from the theory): the noise on the
integer sum is the sum of c i.i.d. differences X - Y of Pólya(r, t) variables, whose
cumulants are kappa_2 = 2 c r t / (1 - t)^2 and kappa_4 = 2 c r t (1 + 4 t + t^2) / (1 - t)^4
(negative binomial cumulants; odd ones cancel in the difference). Over R runs the mean is
compared within 5 sqrt(kappa_2 / R) and the sample variance within
5 sqrt((kappa_4 + 2 kappa_2^2) / R) (Var(s^2) ~ (mu_4 - sigma^4) / R with
mu_4 = kappa_4 + 3 kappa_2^2). Chi-square uniformity tests use significance 1e-6.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import fedustat
from fedustat._validation import RecordCheckError
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.privacy.noise import DeploymentNoise
from fedustat.protocols import registry
from fedustat.protocols.base import Message
from fedustat.protocols.mpc.kernel_circuits import SUPPORTED_KERNELS, KernelCircuit, circuit_for
from fedustat.protocols.mpc.umpc import (
    DEFAULT_FIXED_POINT,
    MAX_DIS_PARTIES,
    UMPC,
    collusion_guarantee,
    incomplete_variance_bound,
    lemma_c3,
    share_records,
)
from fedustat.runtime.simulate import simulate, simulate_run
from fedustat.secure import Dealer, FixedPoint, Transcript, comparison_cost, reconstruct
from fedustat.stats import (
    Design,
    auc_kernel,
    balanced_sample,
    duplicate_pair_kernel,
    gini_kernel,
    incomplete_ustatistic,
    kendall_tau_kernel,
    mann_whitney_kernel,
    rand_index_kernel,
    renyi2_entropy_kernel,
    user_kernel,
    ustatistic,
    variance_kernel,
    vus_kernel,
)
from fedustat.stats.kernels import Kernel

ALPHA = 1e-6
Z = 5.0
WIDE = FixedPoint(64, 14, headroom=1)  # the variance kernel's squares need 2c fractional bits


def _data(name: str, n: int, rng: np.random.Generator) -> tuple[Kernel, np.ndarray]:
    """Small integer grids, so that ties occur in every kernel."""
    if name == "gini_mean_difference":
        k = gini_kernel((0.0, 5.0))
        return k, k.pack(rng.integers(0, 21, n) / 4)
    if name == "variance":
        k = variance_kernel((0.0, 5.0))
        return k, k.pack(rng.integers(0, 21, n) / 4)
    if name == "kendall_tau_a":
        k = kendall_tau_kernel("a")
        return k, k.pack(rng.integers(-3, 4, n), rng.integers(0, 5, n) / 2)
    if name in ("auc", "mann_whitney"):
        k = auc_kernel() if name == "auc" else mann_whitney_kernel()
        return k, k.pack(rng.integers(-4, 5, n) / 8, np.arange(n) % 2)
    if name in ("duplicate_pair_ratio", "renyi2_entropy"):
        k = duplicate_pair_kernel() if name == "duplicate_pair_ratio" else renyi2_entropy_kernel()
        return k, k.pack(rng.integers(0, 4, n))
    if name == "rand_index":
        k = rand_index_kernel()
        return k, k.pack(rng.integers(0, 3, n), rng.integers(0, 3, n))
    k = vus_kernel()
    return k, k.pack(rng.integers(0, 4, n), np.arange(n) % 3)


def _fp(name: str) -> FixedPoint:
    # An explicit format: the legacy 002 Sec. 6.1 ring (test_encoding_* cover bounds).
    return WIDE if name == "variance" else DEFAULT_FIXED_POINT


def _ratio(kernel: Kernel, data: np.ndarray, design: Design) -> tuple[float, float]:
    """(factor from Lemma C.1's U to the released U, share p of active k-subsets):
    with public labels the release averages the active edges and scales by p."""
    n, k = data.shape[0], kernel.degree
    if kernel.name not in ("auc", "mann_whitney", "vus"):
        return 1.0, 1.0
    labels = data[:, -1].astype(np.int64)
    p = float(np.prod(np.bincount(labels, minlength=k)[:k])) / math.comb(n, k)
    active = np.sort(labels[design.tuples], axis=1)
    m_active = int(np.count_nonzero(np.all(active == np.arange(k), axis=1)))
    return design.size / m_active * p, p


CASES = [(name, method) for name in SUPPORTED_KERNELS
         for method in (("circuit",) if name == "vus" else ("fss", "circuit"))]


# ------------------------------------------------------------------------- correctness
@pytest.mark.parametrize(("name", "method"), CASES)
def test_noise_free_run_reproduces_the_incomplete_ustatistic(name: str, method: str) -> None:
    rng = np.random.default_rng(11)
    n = 30
    kernel, data = _data(name, n, rng)
    design = balanced_sample(3 * n, kernel.degree, n, rng=12)
    protocol = UMPC(kernel, math.inf, design=design, comparison=method, fixed_point=_fp(name))
    est = simulate(protocol, data, rng=13)
    exact = incomplete_ustatistic(kernel, data, design.tuples)
    # Integer arithmetic in the ring: the data lie on the fixed-point grid, so U is exact.
    assert est.diagnostics["lemma_c1_u"] == exact
    factor, p = _ratio(kernel, data, design)
    exact = exact * factor
    assert est.value == pytest.approx(kernel.statistic(exact, data), rel=1e-12)
    assert est.privacy.model is PrivacyModel.NONE
    # No noise: the error bar is the edge-sampling variance (002 Claim D.1), over the
    # active edges' pool with public labels, with the kernel values' variance bounded by
    # Bhatia-Davis at the released mean, (hi - mu)(mu - lo) <= (Delta f)^2 / 4.
    lo, hi = kernel.output_range
    mu = min(max(exact / p, lo), hi)
    share = min((hi - mu) * (mu - lo), kernel.sensitivity**2 / 4) / (kernel.sensitivity**2 / 4)
    if p == 1.0:
        design_sd = math.sqrt(incomplete_variance_bound(n, kernel.degree, design.size,
                                                        kernel.sensitivity) * share)
    else:
        pool, m = round(p * math.comb(n, kernel.degree)), round(design.size * p / factor)
        design_sd = p * kernel.sensitivity / 2 * math.sqrt((pool - m) / (m * (pool - 1))
                                                           * share)
    assert est.std_error == pytest.approx(
        design_sd * abs(kernel.statistic(exact + 1e-6, data)
                        - kernel.statistic(exact - 1e-6, data)) / 2e-6, rel=1e-4)
    # Check-in, broadcast, upload: 3 exchanges with the aggregator. Between the last two,
    # the relay rounds: dealing, sharing, then the circuit's rounds (Lemma C.3 counts
    # sharing + circuit + upload, so the same number without noise).
    assert est.cost.peer_rounds == est.diagnostics["lemma_c3_rounds"]
    assert est.cost.rounds == 3 + est.cost.peer_rounds


def test_gini_with_real_values_is_within_the_fixed_point_resolution() -> None:
    rng = np.random.default_rng(3)
    kernel = gini_kernel((0.0, 1.0))
    data = kernel.pack(rng.uniform(0, 1, 200))
    est = simulate(UMPC(kernel, math.inf, design="uniform"), data, rng=4)
    protocol = UMPC(kernel, math.inf, design="uniform")
    coin = np.asarray(est.diagnostics["public_coin"], dtype=np.uint64)
    design = protocol.draw_design(200, coin)
    exact = incomplete_ustatistic(kernel, data, design.tuples)
    # Each value is rounded by at most h/2, so each |x_i - x_j| moves by at most h and so
    # does their average over |E| edges: |E| h / |E| = h.
    h = protocol.fixed_point.resolution
    assert abs(est.diagnostics["lemma_c1_u"] - exact) <= h
    assert est.diagnostics["lemma_c1_u"] != exact  # the data are not on the grid


@pytest.mark.parametrize("design", ["balanced", "uniform", "bernoulli"])
def test_string_designs_are_drawn_from_the_public_coin(design: str) -> None:
    rng = np.random.default_rng(5)
    kernel, data = _data("kendall_tau_a", 40, rng)
    protocol = UMPC(kernel, math.inf, design=design, edges=60)
    est = simulate(protocol, data, rng=6)
    drawn = protocol.draw_design(40, np.asarray(est.diagnostics["public_coin"], dtype=np.uint64))
    assert est.diagnostics["edges"] == drawn.size
    assert est.diagnostics["lemma_c1_u"] == incomplete_ustatistic(kernel, data, drawn.tuples)
    if design == "balanced":
        assert drawn.size == 60 and drawn.max_degree == 3  # ceil(k m / n), 002 App. F
    if design == "uniform":
        assert drawn.size == 60


def test_default_design_has_2n_edges_and_same_seed_same_release() -> None:
    rng = np.random.default_rng(7)
    kernel, data = _data("gini_mean_difference", 50, rng)
    a = fedustat.estimate(kernel, data, protocol="umpc", epsilon=1.0, rng=8)
    b = fedustat.estimate(kernel, data, protocol="umpc", epsilon=1.0, rng=8)
    c = fedustat.estimate(kernel, data, protocol="umpc", epsilon=1.0, rng=9)
    assert a.value == b.value and a.value != c.value
    assert a.diagnostics["edges"] == 100 and a.protocol == "umpc"


def _run_circuit(circuit: KernelCircuit, values: list[np.ndarray], order: np.ndarray | None,
                 method: str, fp: FixedPoint, seed: int) -> tuple[np.ndarray, Transcript]:
    ring = fp.ring
    m = values[0].shape[0]
    log = Transcript(circuit.degree, m)
    dealer = Dealer(circuit.degree, ring=ring, rng=seed, transcript=log)
    full = circuit.full_range(fp)
    material = circuit.deal(dealer, m, method=method, full_range=full)  # type: ignore[arg-type]
    shares = share_records([ring.reduce(v) for v in values], ring, seed + 1, log)
    out = circuit.evaluate(shares, material, ring=ring, method=method,  # type: ignore[arg-type]
                           full_range=full, order=order, transcript=log)
    return ring.to_signed(reconstruct(out, ring=ring)), log


@pytest.mark.parametrize(("name", "method"), CASES)
@pytest.mark.parametrize("headroom", [1, 0])
def test_circuits_on_random_negative_and_boundary_values(name: str, method: str,
                                                         headroom: int) -> None:
    """Every circuit against the same arithmetic in the clear, on the whole encodable range
    (with headroom 0 the comparisons run on the full signed range)."""
    kernel = _data(name, 6, np.random.default_rng(0))[0]
    circuit = circuit_for(kernel)
    fp = FixedPoint(40, 14, headroom=headroom)
    rng = np.random.default_rng(100 * CASES.index((name, method)) + headroom)
    m = 300
    lo, hi = fp.min_int, fp.max_int
    if name in ("gini_mean_difference", "variance"):
        # Differences must not wrap (Gini) and squares must fit (variance).
        lo, hi = (lo // 2, hi // 2) if name == "gini_mean_difference" else (-2**12, 2**12)
    edge = np.array([lo, hi, 0, -1, 1, lo + 1, hi - 1])
    values = []
    for _ in range(circuit.degree):
        cols = []
        for _ in circuit.secret_columns:
            col = rng.integers(lo, hi, m, endpoint=True)
            col[: m // 3] = rng.choice(edge, m // 3)           # boundaries and ties
            col[m // 3: m // 2] = rng.integers(-2, 3, m // 2 - m // 3)
            cols.append(col)
        values.append(np.stack(cols, axis=1))
    order = None
    if circuit.public_column is not None:
        order = np.stack([rng.permutation(circuit.degree) for _ in range(m)])
    got, log = _run_circuit(circuit, values, order, method, fp, seed=int(rng.integers(1000)))
    want = circuit.evaluate_clear(values, order, fp).astype(np.int64)
    np.testing.assert_array_equal(got, want)
    cost = circuit.cost(ring_bits=40, method=method, full_range=circuit.full_range(fp))  # type: ignore[arg-type]
    sharing = (circuit.degree - 1) * 40 * len(circuit.secret_columns)
    np.testing.assert_array_equal(log.member_bits("online"), sharing + cost.online_bits)
    np.testing.assert_array_equal(log.member_bits("offline", "received"), cost.offline_bits)
    assert log.rounds == 1 + cost.rounds


def test_protocol_with_full_range_comparisons() -> None:
    rng = np.random.default_rng(21)
    kernel, data = _data("auc", 40, rng)
    design = balanced_sample(80, 2, 40, rng=1)
    est = simulate(UMPC(kernel, math.inf, design=design, fixed_point=FixedPoint(40, 14)),
                   data, rng=2)
    assert est.diagnostics["full_range_comparisons"] is True
    assert est.diagnostics["lemma_c1_u"] == incomplete_ustatistic(kernel, data, design.tuples)


# ------------------------------------------------------------------------- noise
def _polya_cumulants(c: int, r: float, t: float) -> tuple[float, float]:
    k2 = r * t / (1 - t) ** 2
    k4 = r * t * (1 + 4 * t + t * t) / (1 - t) ** 4
    return 2 * c * k2, 2 * c * k4


@pytest.mark.parametrize(("threat_model", "min_honest"), [("hf", 1), ("hf", None), ("dis", 1),
                                                          ("dis", 3)])
def test_noise_is_unbiased_with_the_discrete_laplace_variance(threat_model: str,
                                                             min_honest: int | None) -> None:
    n, eps, R = 12, 2.0, 1500
    kernel = duplicate_pair_kernel()
    data = kernel.pack(np.random.default_rng(1).integers(0, 3, n))
    design = balanced_sample(24, 2, n, rng=2)
    protocol = UMPC(kernel, eps, design=design, comparison="circuit", threat_model=threat_model,
                    f_honest=0.8, fail_prob=1e-6, min_honest=min_honest)
    exact = incomplete_ustatistic(kernel, data, design.tuples)
    units = np.array([simulate(protocol, data, rng=s).diagnostics["lemma_c1_u"]
                      for s in range(R)]) * design.size - exact * design.size
    assert np.allclose(units, np.round(units))  # noise is an integer number of ring units
    c = protocol.contributors(n)
    assert c == (9 if threat_model == "hf" else n)  # |Z| = ceil(log 1e-6 / log 0.2) = 9
    h = c if min_honest is None else min_honest
    s = design.max_degree  # delta_G^max * Delta f * D = 4 * 1 * 1
    t = math.exp(-eps / s)
    k2, k4 = _polya_cumulants(c, 1.0 / h, t)
    assert protocol.noise_variance(n, design) * design.size**2 == pytest.approx(k2)
    assert abs(units.mean()) <= Z * math.sqrt(k2 / R)
    assert abs(units.var(ddof=1) - k2) <= Z * math.sqrt((k4 + 2 * k2**2) / R)
    # 002 Lemma D.3 / Claim D.2 use the Laplace variance 2 (delta Delta f / (eps |E|))^2 per
    # full draw; the discrete Laplace is at most that (1 / (2 sinh^2(eps / 2s)) <= 2 (s/eps)^2).
    laplace = c / h * 2 * (s / eps) ** 2
    assert 0.95 * laplace <= k2 <= laplace


def test_mse_against_the_complete_ustatistic_within_lemma_d3() -> None:
    """Random BalancedSamp designs plus noise: unbiased for the complete U-statistic, with
    MSE at most Claim D.1's incomplete-sampling bound plus the noise variance (Lemma D.3)."""
    n, eps, R = 40, 1.0, 600
    kernel = kendall_tau_kernel("a")
    rng = np.random.default_rng(31)
    x = rng.normal(size=n)
    data = kernel.pack(np.round(x * 8) / 8, np.round((x + rng.normal(size=n)) * 8) / 8)
    complete = ustatistic(kernel, data)
    protocol = UMPC(kernel, eps, comparison="circuit", min_honest=None)
    errors = np.array([simulate(protocol, data, rng=s).value for s in range(R)]) - complete
    design = protocol.draw_design(n, np.array([1, 2], dtype=np.uint64))
    bound = incomplete_variance_bound(n, 2, 2 * n, kernel.sensitivity) \
        + protocol.noise_variance(n, design)
    # Errors are bounded by |f| <= 1 plus the noise; 5 standard errors of the mean of
    # squares use the bound's square root as a scale for the spread.
    mse = float(np.mean(errors**2))
    assert mse <= bound + Z * float(np.std(errors**2)) / math.sqrt(R)
    assert abs(errors.mean()) <= Z * math.sqrt(bound / R)


# ------------------------------------------------------------------------- communication
def _hand_count(circuit: KernelCircuit, n: int, m: int, method: str, full_range: bool,
                contributors: int, l_bits: int) -> tuple[int, int, int, int]:
    """Lemma C.3 written out from the secure layer's primitive costs."""
    k = circuit.degree
    per_member = rounds = offline = 0
    if circuit.comparisons:
        c = comparison_cost("less_than", bits=l_bits, group_size=k, method=method,  # type: ignore[arg-type]
                            full_range=full_range)
        per_member += circuit.comparisons * c.online_bits
        offline += circuit.comparisons * c.offline_bits
        rounds = c.rounds
    if circuit.equalities:
        e = comparison_cost("equal", bits=l_bits, group_size=k, method=method)  # type: ignore[arg-type]
        per_member += circuit.equalities * e.online_bits
        offline += circuit.equalities * e.offline_bits
        rounds = e.rounds
    if circuit.products:
        per_member += circuit.products * 2 * (k - 1) * l_bits
        offline += circuit.products * 3 * l_bits
        rounds += 1
    d = len(circuit.secret_columns)
    bits = (m * k * (k - 1) * l_bits * d + m * k * per_member
            + contributors * (n - 1) * l_bits + n * l_bits)
    noise_rounds = 1 if contributors else 0
    return bits, 1 + max(rounds, noise_rounds) + 1, m * k * offline, rounds


@pytest.mark.parametrize(("name", "method", "threat_model", "epsilon"), [
    ("gini_mean_difference", "fss", "hf", 1.0),
    ("kendall_tau_a", "circuit", "hf", 1.0),
    ("kendall_tau_a", "fss", "dis", 0.5),
    ("auc", "fss", "hf", 1.0),
    ("vus", "circuit", "dis", 1.0),
    ("rand_index", "fss", "hf", math.inf),
    ("duplicate_pair_ratio", "circuit", "hf", 2.0),
])
def test_measured_bits_equal_lemma_c3(name: str, method: str, threat_model: str,
                                      epsilon: float) -> None:
    n = 45
    kernel, data = _data(name, n, np.random.default_rng(4))
    protocol = UMPC(kernel, epsilon, comparison=method, threat_model=threat_model,
                    f_honest=0.9, fixed_point=_fp(name))
    est = simulate(protocol, data, rng=5)
    d = est.diagnostics
    circuit = circuit_for(kernel)
    contributors = 0 if math.isinf(epsilon) else protocol.contributors(n)
    bits, rounds, offline, circuit_rounds = _hand_count(circuit, n, d["active_edges"], method,
                                                        protocol.full_range, contributors, 40)
    assert d["lemma_c3_bits"] == bits
    assert d["lemma_c3_rounds"] == rounds
    assert d["expected_offline_bits"] == offline
    # Lemma C.3 counts phases 1-4 (peers, then z_i to the aggregator). The runtime also
    # carries round 1: a check-in (or the public label) up, and n, the 128-bit coin (and
    # the public labels) broadcast down.
    public = 2 if name == "vus" else 1
    # Round 1 down: n and the coin; with public labels also the active-edge count and a
    # row of labels per party, as long as the longest list a party needs (co-members of
    # its edges and members of the edges it deals), counted here by hand from the design.
    broadcast = 64 + 128
    if name in ("auc", "vus"):
        coin = np.array(d["public_coin"], dtype=np.uint64)
        facts = protocol._coin_facts(n, coin)
        needs: list[set[int]] = [set() for _ in range(n)]
        for edge, dealer in zip(facts.design.tuples.tolist(), facts.dealers.tolist(),
                                strict=True):
            for member in edge:
                needs[member] |= set(edge) - {member}
            needs[dealer] |= set(edge)
        broadcast += 64 + max(len(x) for x in needs) * public
        assert d["expected_download_bits"] == n * broadcast
    # The dealt material travels in a relay round from each edge's dealing party, so it
    # is peer traffic (Lemma C.3's offline count, to the bit) and nothing is offline.
    c = est.cost
    assert c.total_bits == bits + offline + n * public + n * broadcast
    assert c.bits_per_party == pytest.approx((bits + offline + n * public) / n, rel=1e-12)
    assert c.peer_bits_per_party == pytest.approx((bits - n * 40 + offline) / n, rel=1e-12)
    # Every peer bit sent is received by a peer.
    assert c.bits_received_per_party == pytest.approx(
        (n * broadcast + bits - n * 40 + offline) / n, rel=1e-12)
    # Relay rounds: dealing, sharing, the circuit's rounds, then the noise shares (a relay
    # round carries one kind of row, so the noise no longer overlaps the circuit).
    noise_rounds = 0 if math.isinf(epsilon) else 1
    assert c.peer_rounds == 2 + circuit_rounds + noise_rounds
    assert c.rounds == 3 + c.peer_rounds
    assert rounds == 2 + max(circuit_rounds, noise_rounds)
    assert c.offline_bits == 0 and c.offline_bits_per_party == 0
    if name in ("auc", "vus"):
        assert d["active_edges"] < d["edges"]  # same-class edges are neither shared nor computed


@pytest.mark.parametrize("name", ["auc", "vus"])
def test_label_download_grows_with_edges_per_party_not_n_squared(name: str) -> None:
    """Each party receives only the labels of its edges' co-members and of the members of
    the edges it deals (issue 14, point 4): the round-1 download is n (192 + 64 + w b)
    bits with w bounded by the design's degrees, not n (192 + n b) as with a broadcast.
    Measured from the run's costs (total minus every other counted bit)."""
    per_party = {}
    for n in (200, 400):
        kernel, data = _data(name, n, np.random.default_rng(n))
        protocol = UMPC(kernel, math.inf, comparison="circuit", fixed_point=DEFAULT_FIXED_POINT)
        est = simulate(protocol, data, rng=3)
        d, c = est.diagnostics, est.cost
        public = protocol.circuit.public_bits()
        download = c.total_bits - d["lemma_c3_bits"] - d["expected_offline_bits"] - n * public
        assert download == d["expected_download_bits"]
        labels = download - n * (64 + 128 + 64)
        width = labels // (n * public)
        assert labels == n * width * public
        # The bound of label_row_width: k (k - 1) deg_max co-members and k members per
        # dealt edge, with the design's largest degree and the busiest dealer.
        facts = protocol._coin_facts(n, np.array(d["public_coin"], dtype=np.uint64))
        k = kernel.degree
        dealt = int(np.bincount(facts.dealers, minlength=n).max())
        assert width <= k * (k - 1) * facts.design.max_degree + k * dealt
        per_party[n] = labels / n
        assert labels < n * n * public / 5   # a broadcast would cost n^2 b
    # Per party the labels stay about constant (the busiest dealer grows like log n), while
    # a broadcast's would double.
    assert per_party[400] < 1.5 * per_party[200]


def test_lemma_c3_hand_count_on_a_tiny_run() -> None:
    """Gini, FSS, l = 40, 4 parties, 2 edges, all 4 parties in Z:
    sharing 2 * 2 * 1 * 40 = 160; computing per member and edge 40 (comparison) + 80
    (product), times 4 slots = 480; noise 4 * 3 * 40 = 480; aggregation 4 * 40 = 160."""
    kernel = gini_kernel((0.0, 1.0))
    design = Design(np.array([[0, 1], [2, 3]]), 4)
    est = simulate(UMPC(kernel, 1.0, design=design, fixed_point=DEFAULT_FIXED_POINT),
                   kernel.pack([0.1, 0.5, 0.9, 0.2]), rng=1)
    assert est.diagnostics["lemma_c3_bits"] == 160 + 480 + 480 + 160 == 1280
    assert est.diagnostics["lemma_c3_rounds"] == 1 + max(1 + 1, 1) + 1 == 4
    # Measured: plus a 1-bit check-in per party up and a 192-bit broadcast (n, coin) down;
    # every party is in one edge and in Z, so all send 1 + 1280 / 4 bits, and each edge's
    # dealer (a member of the other edge) sends the material of 2 members: one DCF key plus
    # 2l for the comparison and a Beaver triple (3l), 6,998 bits each (docs/protocols/umpc.md).
    material = 2 * 2 * 6998
    assert est.cost.total_bits == 1280 + material + 4 * 1 + 4 * 192
    assert est.cost.bits_per_party == (4 + 1280 + material) / 4
    assert est.cost.max_bits_per_party == 1 + 1280 // 4 + 2 * 6998
    assert est.cost.peer_bits_per_party == (1280 - 4 * 40 + material) / 4
    # Relay rounds: dealing, sharing, comparison, product, noise shares.
    assert est.cost.peer_rounds == 5 and est.cost.rounds == 3 + 5
    assert est.cost.offline_bits == 0
    count = lemma_c3(n_parties=4, n_edges=2, degree=2, ring_bits=40, kernel_bits=2 * 120,
                     kernel_rounds=2, noise_bits=480, noise_rounds=1)
    assert count == (1280, 4)


# ------------------------------------------------------------------------- secrecy
def test_the_aggregator_sees_uniform_ring_elements() -> None:
    """Each z_i is masked by uniform noise shares: the top and bottom bytes of the n
    messages are uniform (the data are constant, so any structure would show)."""
    n = 4000
    kernel = duplicate_pair_kernel()
    protocol = UMPC(kernel, 1.0, comparison="circuit", edges=n)
    uploads: list[np.ndarray] = []

    def watch(msg: Message) -> Message:
        if "z" in msg.fields:
            uploads.append(np.asarray(msg.fields["z"]))
        return msg

    simulate_run(protocol, kernel.pack(np.zeros(n)), rng=3, relay=watch)
    (z,) = uploads
    for byte in (np.bitwise_and(z, np.uint64(0xFF)), np.right_shift(z, np.uint64(32))):
        counts = np.bincount(byte.astype(np.int64), minlength=256)
        assert stats.chisquare(counts).pvalue > ALPHA


@pytest.mark.parametrize("k", [2, 3])
def test_a_partys_received_shares_are_uniform(k: int) -> None:
    ring = FixedPoint().ring
    m = 30_000
    secret = [np.full((m, 1), 12345, dtype=np.uint64) for _ in range(k)]
    shares = share_records(secret, ring, 9)
    for owner in range(k):
        for holder in range(k):
            if holder == owner:
                continue
            got = shares[owner][holder, :, 0]
            for byte in (np.bitwise_and(got, np.uint64(0xFF)), np.right_shift(got, np.uint64(32))):
                counts = np.bincount(byte.astype(np.int64), minlength=256)
                assert stats.chisquare(counts).pvalue > ALPHA


# ------------------------------------------------------------------------- guarantee
def test_guarantee_diagnostics_and_standard_error() -> None:
    rng = np.random.default_rng(8)
    kernel, data = _data("auc", 60, rng)
    protocol = UMPC(kernel, 0.5)
    est = simulate(protocol, data, rng=1)
    assert est.privacy.model is PrivacyModel.CENTRAL and est.privacy.epsilon == 0.5
    assert est.privacy.delta == 0.0 and est.privacy.adjacency == kernel.adjacency
    d = est.diagnostics
    assert d["noise_contributors"] == 40 and d["tolerated_colluders"] == 39
    assert "honest member" in d["collusion_guarantee"]
    assert "computational" in d["secrecy"] and "dealing party outside the edge" in d["secrecy"]
    assert any("a party outside it" in a.detail for a in est.privacy.assumptions)
    design = protocol.draw_design(60, np.asarray(d["public_coin"], dtype=np.uint64))
    n_pos = int(data[:, 1].sum())
    slope = math.comb(60, 2) / (n_pos * (60 - n_pos))   # AUC = U C(n,2) / (n+ n-)
    factor, p = _ratio(kernel, data, design)
    pool, m = round(p * math.comb(60, 2)), round(design.size * p / factor)
    # The kernel values' variance: Bhatia-Davis at the released mean AUC (<= 1/4).
    mean = min(max(d["u_statistic"] / p, 0.0), 1.0)
    design_var = p**2 * (pool - m) / (m * (pool - 1)) * mean * (1.0 - mean)
    noise_var = protocol.noise_variance(60, design) * factor**2
    assert d["design_variance_bound"] == pytest.approx(design_var, rel=1e-12)
    assert est.std_error == pytest.approx(math.sqrt(noise_var + design_var) * slope, rel=1e-6)
    assert d["u_sensitivity"] == design.max_degree / design.size
    # The protocol's own release is clipped into [0, 1] (on every transport); the raw
    # ratio estimate stays in raw_value.
    assert est.raw_value == pytest.approx(d["u_statistic"] * slope)
    assert est.value == min(max(est.raw_value, 0.0), 1.0) and est.clip_range == (0.0, 1.0)


def test_collusion_guarantee_wording() -> None:
    paper = collusion_guarantee("hf", 1000, 40, None, 1.0, 0.5, 2.0**-40)
    assert "aggregator colluding with any contributor can subtract" in paper
    robust = collusion_guarantee("dis", 50, 50, 1, 1.0, 0.5, 1e-9)
    assert "up to 49 of the 50" in robust
    partial = collusion_guarantee("hf", 1000, 40, 5, 1.0, 0.5, 1e-9)
    assert "up to 35 of the 40" in partial


def test_deployment_noise_uses_the_os_csprng() -> None:
    # An integer-valued kernel: the Pólya draws of DeploymentNoise take time linear in their
    # mean, which is large for fixed-point sensitivities (s = delta Delta f 2^c).
    kernel, data = _data("duplicate_pair_ratio", 10, np.random.default_rng(1))
    est = simulate(UMPC(kernel, 1.0, noise=DeploymentNoise()), data, rng=1)
    assert est.diagnostics["noise_source"] == "deployment"
    assert math.isfinite(est.value) and est.privacy.epsilon == 1.0


def test_registered_and_reachable_through_the_api() -> None:
    entry = {e.name: e for e in registry.available()}["umpc"]
    assert entry.model is PrivacyModel.CENTRAL
    kernel, data = _data("rand_index", 30, np.random.default_rng(2))
    protocol = registry.make("umpc", kernel, epsilon=1.0, design="uniform", edges=40,
                             comparison="circuit", threat_model="dis", min_honest=None)
    assert isinstance(protocol, UMPC) and protocol.method == "circuit"
    est = fedustat.estimate(kernel, data, protocol="umpc", epsilon=1.0, rng=3, edges=40)
    assert est.diagnostics["edges"] == 40 and "umpc" in str(est)


# ------------------------------------------------------------------------- bad input
def test_unsupported_kernels_are_refused_with_the_list() -> None:
    own = user_kernel(lambda a, b: np.abs(a[:, 0] - b[:, 0]), 2, "x", (0.0, 1.0))
    with pytest.raises(ValueError, match="built-in kernels: auc, mann_whitney, kendall_tau_a"):
        UMPC(own, 1.0)
    fake = user_kernel(lambda a, b: np.abs(a[:, 0] - b[:, 0]), 2, "x", (0.0, 1.0), name="auc")
    with pytest.raises(ValueError, match="only for the built-in kernels"):
        UMPC(fake, 1.0)
    with pytest.raises(ValueError, match=r"kendall_tau_kernel\('a'\)"):
        UMPC(kendall_tau_kernel("b"), 1.0)


def test_values_outside_the_fixed_point_range_raise_overflow() -> None:
    kernel = kendall_tau_kernel("a")
    data = kernel.pack([1.0, 2.0, 3e7], [0.0, 1.0, 2.0])
    # A record outside the public range is the party's own records check (a ValueError
    # whose text stays on that party).
    with pytest.raises(RecordCheckError, match=r"data column\(s\) x, y .* outside the fixed-point"):
        simulate(UMPC(kernel, 1.0), data, rng=1)
    # Ring too small for the sum of the variance kernel's squares (2c fractional bits).
    kernel = variance_kernel((0.0, 10.0))
    with pytest.raises(OverflowError, match="does not fit the ring"):
        simulate(UMPC(kernel, 1.0, fixed_point=DEFAULT_FIXED_POINT),
                 kernel.pack(np.linspace(0, 10, 20)), rng=1)
    with pytest.raises(OverflowError, match="do not fit the fixed-point range"):
        UMPC(gini_kernel((0.0, 1e8)), 1.0, fixed_point=DEFAULT_FIXED_POINT)


def test_bad_parameters_are_refused() -> None:
    kernel = gini_kernel((0.0, 1.0))
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        UMPC(kernel, 0.0)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        UMPC(kernel, -1.0)
    with pytest.raises(ValueError, match="threat_model must be 'hf'"):
        UMPC(kernel, 1.0, threat_model="honest-majority")
    with pytest.raises(ValueError, match="design must be one of"):
        UMPC(kernel, 1.0, design="random")
    with pytest.raises(ValueError, match="comparison must be one of"):
        UMPC(kernel, 1.0, comparison="garbled")
    with pytest.raises(ValueError, match="comparison='fss' is a two-party construction"):
        UMPC(vus_kernel(), 1.0, comparison="fss")
    with pytest.raises(ValueError, match="tuples of size 3"):
        UMPC(kernel, 1.0, design=balanced_sample(10, 3, 10, rng=1))
    with pytest.raises(ValueError, match="edges cannot be combined"):
        UMPC(kernel, 1.0, design=balanced_sample(10, 2, 10, rng=1), edges=10)
    with pytest.raises(ValueError, match="edges must be >= 1"):
        UMPC(kernel, 1.0, edges=0)
    with pytest.raises(ValueError, match="f_honest must be in"):
        UMPC(kernel, 1.0, f_honest=0.0)
    with pytest.raises(ValueError, match="fail_prob must be in"):
        UMPC(kernel, 1.0, fail_prob=1.0)
    with pytest.raises(ValueError, match="min_honest must be >= 1"):
        UMPC(kernel, 1.0, min_honest=0)
    with pytest.raises(TypeError, match="fixed_point must be a FixedPoint"):
        UMPC(kernel, 1.0, fixed_point=40)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="noise must be None or a NoiseSource"):
        UMPC(kernel, 1.0, noise="os")  # type: ignore[arg-type]


def test_run_time_refusals() -> None:
    kernel = duplicate_pair_kernel()
    data = kernel.pack(np.arange(10) % 3)
    with pytest.raises(ValueError, match="edges=50 exceeds the C\\(10, 2\\) = 45"):
        simulate(UMPC(kernel, 1.0, edges=50), data, rng=1)
    with pytest.raises(ValueError, match="design is for 12 parties, data has 10"):
        simulate(UMPC(kernel, 1.0, design=balanced_sample(12, 2, 12, rng=1)), data, rng=1)
    with pytest.raises(ValueError, match="a party outside each group of 2 deals its "
                                         "material; with n=2 parties there is none"):
        simulate(UMPC(kernel, 1.0, design=Design(np.array([[0, 1]]), 2)), data[:2], rng=1)
    with pytest.raises(ValueError, match="min_honest \\(20\\) cannot exceed"):
        simulate(UMPC(kernel, 1.0, min_honest=20), data, rng=1)
    big = kernel.pack(np.arange(MAX_DIS_PARTIES + 1) % 5)
    with pytest.raises(ValueError, match="refused above 10000 parties: use threat_model='hf'"):
        simulate(UMPC(kernel, 1.0, threat_model="dis", comparison="circuit", edges=10), big,
                 rng=1)
    auc = auc_kernel()
    with pytest.raises(ValueError, match="label must be binary"):
        simulate(UMPC(auc, 1.0), np.array([[0.1, 0.0], [0.2, 2.0], [0.3, 1.0]]), rng=1)
    with pytest.raises(ValueError, match="no positive example"):
        simulate(UMPC(auc, 1.0), np.column_stack([np.arange(6) / 8, np.zeros(6)]), rng=1)


# ------------------------------------------------------------------------- encoding
def _tie_data() -> np.ndarray:
    # 25 positives at 0.5 + 1e-5, 25 negatives at 0.5: the exact AUC is 1.
    scores = np.r_[np.full(25, 0.5 + 1e-5), np.full(25, 0.5)]
    return auc_kernel().pack(scores, np.r_[np.ones(25), np.zeros(25)])


def test_declared_bounds_resolve_scores_closer_than_the_old_resolution() -> None:
    est = fedustat.estimate(auc_kernel(), _tie_data(), epsilon=math.inf, protocol="umpc",
                            rng=1, bounds=(0.0, 1.0), precision=1e-6)
    assert est.value == 1.0
    enc = est.diagnostics["encoding"]
    assert enc["resolution"] == 2.0**-20 and enc["declared_precision"] == 1e-6
    # Default precision (hi - lo) / 2^20 resolves them as well.
    est = fedustat.estimate(auc_kernel(), _tie_data(), epsilon=math.inf, protocol="umpc",
                            rng=1, bounds=(0.0, 1.0))
    assert est.value == 1.0 and est.diagnostics["encoding"]["declared_precision"] is None


def test_a_coarse_resolution_makes_ties_and_says_so() -> None:
    # Declared precision 1e-3 > 1e-5: every cross pair ties (kernel 1/2), AUC 1/2.
    est = fedustat.estimate(auc_kernel(), _tie_data(), epsilon=math.inf, protocol="umpc",
                            rng=1, bounds=(0.0, 1.0), precision=1e-3)
    assert est.value == 0.5
    ties = est.diagnostics["encoding"]["ties"]
    assert ties == "values closer than 0.000977 encode equally (ties)"
    # Nothing declared: the 002 Sec. 6.1 format (2^-14), with a warning naming the fix.
    with pytest.warns(UserWarning, match=r"no bounds declared.*resolution 2\^-14.*ties"):
        est = fedustat.estimate(auc_kernel(), _tie_data(), epsilon=math.inf, protocol="umpc",
                                rng=1)
    assert est.value == 0.5


def test_the_readme_income_example_runs_in_natural_units() -> None:
    kernel = gini_kernel((0.0, 200_000.0))
    x = np.random.default_rng(2).uniform(0.0, 200_000.0, 60)
    data = kernel.pack(x)
    est = fedustat.estimate(kernel, data, epsilon=1.0, protocol="umpc", rng=3,
                            bounds=(0.0, 200_000.0))
    enc = est.diagnostics["encoding"]
    assert enc["resolution"] == 0.125 and 30 <= enc["ring_bits"] <= 64
    low, high = est.confidence_interval()
    assert low < est.value < high
    # Without noise the ring sum is exact on the grid: within the rounding of the data.
    exact = kernel.statistic(kernel.exact(data), data)
    free = fedustat.estimate(kernel, data, epsilon=math.inf, protocol="umpc", rng=3,
                             bounds=(0.0, 200_000.0), edges=math.comb(60, 2))
    assert abs(free.value - exact) <= 0.125


def test_bounds_are_checked_and_the_ring_refuses_what_it_cannot_hold() -> None:
    kernel = gini_kernel((0.0, 1.0))
    auc = auc_kernel()
    with pytest.raises(ValueError, match=r"1 value\(s\) outside the declared bounds \[0, 1\]"):
        simulate(UMPC(auc, 1.0, bounds=(0.0, 1.0)), auc.pack([0.2, 1.5, 0.3], [0, 1, 1]),
                 rng=1)
    with pytest.raises(ValueError, match="either fixed_point"):
        UMPC(kernel, 1.0, fixed_point=DEFAULT_FIXED_POINT, precision=1e-3)
    with pytest.raises(ValueError, match="precision needs bounds"):
        UMPC(auc_kernel(), 1.0, precision=1e-3)
    with pytest.raises(ValueError, match="bounds must be finite with lower < upper"):
        UMPC(kernel, 1.0, bounds=(1.0, 0.0))
    with pytest.raises(OverflowError, match="more than the largest supported"):
        simulate(UMPC(kernel, 1e-5, precision=2.0**-40), kernel.pack(np.linspace(0, 1, 30)),
                 rng=1)


def test_the_ring_grows_with_edges_and_noise() -> None:
    kernel = gini_kernel((0.0, 1.0))
    design_small = balanced_sample(20, 2, 20, rng=1)
    design_big = balanced_sample(150, 2, 20, rng=1)
    exact = UMPC(kernel, math.inf)
    noisy = UMPC(kernel, 0.01)
    assert exact.run_fixed_point(20, design_small, None).bits \
        < exact.run_fixed_point(20, design_big, None).bits
    assert exact.run_fixed_point(20, design_small, None).bits \
        < noisy.run_fixed_point(20, design_small, None).bits


def test_the_error_law_is_the_exact_noise_plus_the_design_term() -> None:
    kernel = gini_kernel((0.0, 1.0))
    protocol = UMPC(kernel, 1.0, min_honest=None)
    design = balanced_sample(60, 2, 30, rng=1)
    law = protocol.error_law(30, design, 0.0)
    # min_honest=None: the contributors' shapes add to exactly one discrete Laplace.
    dlap = fedustat.privacy.errors.DiscreteLaplaceError(
        protocol.integer_sensitivity(design) / 1.0, 1.0 / (protocol.scale() * design.size))
    assert law.total_shape == pytest.approx(1.0)
    assert law.variance == pytest.approx(dlap.variance, rel=1e-12)
    assert law.half_width(0.9) == pytest.approx(dlap.half_width(0.9))
    assert protocol.guarantee.assumptions and any(
        "dealer" in str(a) for a in protocol.guarantee.assumptions)


# ------------------------------------------------------------ member circuits, run once
def test_each_member_circuit_runs_once_across_the_relay_rounds(monkeypatch) -> None:
    """A member's circuit waits at each opening for the next relay round instead of being
    replayed from the start: one evaluation per member and batch, however many rounds
    (the boolean-circuit AUC has 8), and the same release as one batch at epsilon = inf."""
    kernel, data = _data("auc", 12, np.random.default_rng(7))
    protocol = UMPC(kernel, math.inf, comparison="circuit", fixed_point=DEFAULT_FIXED_POINT)
    calls: list[int] = []
    evaluate = type(protocol.circuit).evaluate

    def counting(self, *args, **kwargs):
        calls.append(1)
        return evaluate(self, *args, **kwargs)

    monkeypatch.setattr(type(protocol.circuit), "evaluate", counting)
    est = simulate(protocol, data, rng=2, batch_size=1)
    assert est.cost.peer_rounds == 2 + 8      # dealing, sharing, 8 circuit rounds
    # A batch of one party runs one circuit per member position it holds on some edge.
    coin = np.array(est.diagnostics["public_coin"], dtype=np.uint64)
    tuples = protocol._coin_facts(12, coin).design.tuples
    labels = data[:, 1].astype(np.int64)
    active = tuples[protocol.circuit.active(labels[tuples])]
    held = {(int(party), j) for edge in active for j, party in enumerate(edge)}
    assert len(calls) == len(held)
    calls.clear()
    assert est.value == simulate(protocol, data, rng=2).value
    # One batch holding every member of its edges: one vectorized circuit (rows =
    # members), evaluated once.
    assert len(calls) == 1


def test_an_aborted_run_ends_its_waiting_member_circuits() -> None:
    """A run that fails mid-circuit (here: a dropped opening row) leaves no thread
    waiting once it is collected."""
    import gc
    import threading
    import time

    from fedustat.protocols.base import PEER_FROM

    kernel, data = _data("auc", 10, np.random.default_rng(8))
    rounds: list[int] = []
    # Only this run's circuits count (other tests' runs may still await collection).
    earlier = set(threading.enumerate())

    def drop_in_the_circuit(msg: Message) -> Message:
        if msg.is_peer and PEER_FROM in msg.fields:
            rounds.append(1)
            if len(rounds) == 4:       # dealing, sharing, then the second opening round
                keep = np.arange(1, len(msg.parties))
                return Message(msg.sender, msg.receiver,
                               {k: np.asarray(v)[keep] for k, v in msg.fields.items()},
                               msg.bits_per_value, np.asarray(msg.parties)[keep])
        return msg

    with pytest.raises(ValueError, match="exactly one row of openings per group"):
        simulate_run(UMPC(kernel, math.inf, comparison="circuit",
                          fixed_point=DEFAULT_FIXED_POINT), data, rng=1, batch_size=2,
                     relay=drop_in_the_circuit)
    gc.collect()
    deadline = time.monotonic() + 10
    def waiting() -> list[str]:
        return [t.name for t in threading.enumerate()
                if t.name.startswith("umpc-member-") and t not in earlier]

    while time.monotonic() < deadline and waiting():
        time.sleep(0.05)
    assert not waiting()


@pytest.mark.parametrize("comparison", ["fss", "circuit"])
@pytest.mark.parametrize("batch_size", [None, 1])
def test_a_step_on_the_copied_state_leaves_the_original_able_to_take_it_again(
        monkeypatch, comparison, batch_size):
    # The engine steps copy_party_state(state) so that a retried task starts from its
    # input. U-MPC's copy shares the dealt material (no second copy of it) and takes the
    # live circuits: stepping the original again (a retry) must replay to the very same
    # message, and the run must release what it releases without copies.
    import copy
    import dataclasses

    def arrays(obj):
        if isinstance(obj, np.ndarray):
            return [obj]
        if isinstance(obj, dict):
            obj = list(obj.values())
        if isinstance(obj, list | tuple):
            return [a for item in obj for a in arrays(item)]
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return [a for f in dataclasses.fields(obj) for a in arrays(getattr(obj, f.name))]
        return []

    rng = np.random.default_rng(12)
    data = rng.uniform(0.0, 1.0, size=(10, 1))
    build = lambda: registry.make("umpc", gini_kernel((0.0, 1.0)), epsilon=1.0,  # noqa: E731
                                  comparison=comparison, bounds=(0.0, 1.0), precision=1 / 16)
    plain = simulate(build(), data, rng=4, batch_size=batch_size)
    original_step = UMPC.party_step
    shared = []

    def step_a_copy_then_retry(self, state, inbox, step_rng):
        retry_rng = copy.deepcopy(step_rng)
        copied = self.copy_party_state(state)
        if state.run is not None and state.run.material:
            pairs = list(zip(arrays(state.run.material), arrays(copied.run.material),
                             strict=True))
            shared.append(bool(pairs) and all(np.shares_memory(a, b) for a, b in pairs
                                              if a.size))
        new_state, message = original_step(self, copied, inbox, step_rng)
        _, again = original_step(self, state, inbox, retry_rng)
        assert sorted(again.fields) == sorted(message.fields)
        for name in message.fields:
            np.testing.assert_array_equal(np.asarray(again.fields[name]),
                                          np.asarray(message.fields[name]))
        return new_state, message

    monkeypatch.setattr(UMPC, "party_step", step_a_copy_then_retry)
    got = simulate(build(), data, rng=4, batch_size=batch_size)
    assert got.same_release(plain)
    assert shared and all(shared)


def test_dealing_in_chunks_of_edges_releases_the_same(monkeypatch):
    # A dealing party deals a chunk of its edges at a time into its message rows: rows
    # written to the wrong place would break the circuits and change the release.
    from fedustat.protocols.mpc import umpc as umpc_module

    rng = np.random.default_rng(8)
    y = rng.integers(0, 2, 60)
    data = np.c_[rng.normal(size=60) + y, y]

    def release():
        return fedustat.estimate(auc_kernel(), data, protocol="umpc", epsilon=1.0, rng=3,
                                 comparison="fss", bounds=(-6.0, 7.0), batch_size=25)

    whole = release()
    monkeypatch.setattr(umpc_module, "_DEAL_CHUNK", 3)
    assert release().same_release(whole)


@pytest.mark.parametrize("comparison", ["fss", "circuit"])
def test_a_batch_never_holds_the_material_and_the_noise_shares_at_once(monkeypatch,
                                                                        comparison):
    # The two largest receipts of a party: the dealt material (kept until the circuit
    # ends) and the noise shares (Protocol B.1, |Z| rows per party). The noise round
    # comes after the circuit; FSS keys stay views of the rows received.
    receive = UMPC._receive
    seen: list[tuple[str, bool]] = []

    def spy(self, run, inbox):
        receive(self, run, inbox)
        kind = ("noise" if "eta" in inbox.fields else
                "material" if any(name.startswith("m_") for name in inbox.fields) else
                "other")
        seen.append((kind, bool(run.material)))
        if kind == "material" and comparison == "fss":
            keys = [key for material in run.material.values()
                    for key in _fss_keys(material)]
            assert keys and all(key.index is not None for key in keys)
            fields = [np.asarray(v) for v in inbox.fields.values()]
            assert all(any(np.shares_memory(key.seed, f) for f in fields) for key in keys)

    monkeypatch.setattr(UMPC, "_receive", spy)
    rng = np.random.default_rng(9)
    fedustat.estimate(gini_kernel((0.0, 1.0)), rng.uniform(size=(30, 1)), protocol="umpc",
                      epsilon=1.0, rng=5, comparison=comparison, threat_model="hf")
    kinds = [kind for kind, _ in seen]
    assert kinds[0] == "material" and kinds[-1] == "noise" and kinds.count("noise") == 1
    assert seen[-1] == ("noise", False)


def _fss_keys(obj):
    from fedustat.secure.dcf import FssKey

    if isinstance(obj, FssKey):
        return [obj]
    if isinstance(obj, list | tuple):
        return [key for item in obj for key in _fss_keys(item)]
    import dataclasses
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [key for f in dataclasses.fields(obj) for key in _fss_keys(getattr(obj, f.name))]
    return []


@pytest.mark.parametrize("mask", [0x0, 0x1, 0x10000, 0x101010101, 0x1555555555,
                                  0x8000000000000001, 0xFFFFFFFFFFFFFFFF])
def test_and_triple_words_pack_to_their_active_bits_and_back(mask):
    # Only an AND triple's active bits travel: _compress packs them to the low bits
    # (one table lookup per byte of the mask), _expand puts them back.
    from fedustat.protocols.mpc.umpc import _compress, _expand

    words = np.random.default_rng(mask % 1000).integers(0, 2**63, (50, 7), dtype=np.uint64)
    words = words * np.uint64(2) + np.uint64(1)
    expected = np.zeros_like(words)
    for j, position in enumerate(i for i in range(64) if mask >> i & 1):
        expected |= ((words >> np.uint64(position)) & np.uint64(1)) << np.uint64(j)
    packed = _compress(words, mask)
    np.testing.assert_array_equal(packed, expected)
    np.testing.assert_array_equal(_expand(packed, mask), words & np.uint64(mask))


def test_lexsort_of_the_relay_rows_is_numpys():
    from fedustat.protocols.mpc.umpc import _lexsort

    rng = np.random.default_rng(14)
    for rows in (0, 1, 7, 2000):
        for high in (1, 3, 1000, 10**7):
            keys = tuple(rng.integers(0, high, rows) for _ in range(3))
            np.testing.assert_array_equal(_lexsort(keys), np.lexsort(keys))
    wide = (rng.integers(0, 2**40, 300), rng.integers(0, 2**40, 300))   # past int64
    np.testing.assert_array_equal(_lexsort(wide), np.lexsort(wide))
