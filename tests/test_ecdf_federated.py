"""Federated evaluation of the tree-noise DP ECDF (003 Sec. 4.1 and 4.2).

Checked here: both evaluations return the central curve of ``dp_ecdf`` for the same noise
draw (up to the fixed-point rounding for a continuous draw, exactly for a discrete one);
without noise the opened counts are the exact ECDF counts; the measured bits equal the
cost formulas ``n |B| (w + m l) + m |B| l`` (pointwise) and ``2 n K_DCF + 2 |B| (w + l)``
(FSS); a single server's shares and keys look uniform whatever the data (chi-square at
significance 1e-6, all seeded); the distributed noise has the discrete Laplace law it
claims and the discrete tree mechanism is eps-DP on a small grid (exact computation).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from fedustat.privacy.guarantee import PrivacyModel
from fedustat.protocols.ecdf import (
    FssECDF,
    PointwiseECDF,
    SharedTreeNoise,
    TreeNoise,
    distributed_tree_noise,
    dp_ecdf,
    dp_quantile,
    draw_tree_noise,
    ecdf_noise_scale,
    fss_ecdf,
    fss_ecdf_setup,
    index_bits,
    pointwise_ecdf,
    share_tree_noise,
)
from fedustat.protocols.ecdf.shared_noise import DEALER_FRAC_BITS
from fedustat.protocols.ecdf.smoothing import smooth
from fedustat.runtime.simulate import simulate
from fedustat.secure.dcf import dcf_eval, dcf_gen, dcf_sum_at
from fedustat.secure.ring import Ring
from fedustat.stats.ecdf import DyadicTree, absolute_grid, ecdf_counts

ALPHA = 1e-6  # significance of the uniformity tests
GRID = absolute_grid(0.0, 12.0, 0.5)  # 25 thresholds: L = 5, 49 nodes
EPS = 1.0


def poisson_data(n: int = 200, seed: int = 0) -> np.ndarray:
    """Poisson(3) values (many exactly on thresholds) plus one above and one below the grid."""
    x = np.random.default_rng(seed).poisson(3.0, n - 2).astype(np.float64)
    return np.concatenate([x, [20.0, -1.0]])


def central_with(values: np.ndarray, noise: SharedTreeNoise):
    """dp_ecdf with the node noise the servers hold (dp_ecdf checks only the scale and
    the label of a TreeNoise; the values are added as they are)."""
    draw = TreeNoise(noise.tree, noise.reconstruct(), "laplace", noise.scale, "simulation")
    return dp_ecdf(values, GRID, epsilon=noise.epsilon, tree_noise=draw)


# ------------------------------------------------------------- same draw, same curve


@pytest.mark.parametrize("n_servers", [2, 3])
@pytest.mark.parametrize("query", [None, [0, 3, 4, 11, 24]])
def test_pointwise_equals_central_for_the_same_laplace_draw(n_servers, query):
    x = poisson_data()
    draw = draw_tree_noise(GRID.size, ecdf_noise_scale(GRID.size, EPS), rng=11)
    central = dp_ecdf(x, GRID, epsilon=EPS, tree_noise=draw)
    fed = pointwise_ecdf(x, GRID, query, epsilon=EPS, n_servers=n_servers, tree_noise=draw,
                         rng=1)
    idx = np.arange(GRID.size) if query is None else np.asarray(query)
    # Each of the L + 1 nodes of a point is rounded to 2^-c: |error| <= (L+1) 2^-(c+1) / n.
    bound = draw.tree.n_levels * 2.0 ** -(DEALER_FRAC_BITS + 1) / x.size
    np.testing.assert_allclose(fed.values, central.values[idx], rtol=0, atol=bound)
    assert not np.array_equal(fed.values, central.values[idx])  # the rounding is real
    assert fed.privacy == central.privacy
    assert fed.distribution == "laplace" and fed.scale == draw.scale


@pytest.mark.parametrize("query", [None, np.array([24, 2, 2, 9])])
def test_fss_equals_central_for_the_same_laplace_draw(query):
    x = poisson_data()
    draw = draw_tree_noise(GRID.size, ecdf_noise_scale(GRID.size, EPS), rng=12)
    central = dp_ecdf(x, GRID, epsilon=EPS, tree_noise=draw)
    fed = fss_ecdf(x, GRID, query, epsilon=EPS, tree_noise=draw, rng=2)
    idx = np.arange(GRID.size) if query is None else np.unique(query)
    bound = draw.tree.n_levels * 2.0 ** -(DEALER_FRAC_BITS + 1) / x.size
    np.testing.assert_allclose(fed.values, central.values[idx], rtol=0, atol=bound)
    np.testing.assert_array_equal(fed.thresholds, GRID[idx])


@pytest.mark.parametrize("frac_bits", [0, 6])
def test_both_equal_central_exactly_for_the_same_discrete_draw(frac_bits):
    x = poisson_data()
    noise = distributed_tree_noise(GRID.size, EPS, frac_bits=frac_bits, rng=3)
    central = central_with(x, noise)
    a = pointwise_ecdf(x, GRID, epsilon=EPS, noise=noise, rng=4)
    b = fss_ecdf(x, GRID, epsilon=EPS, noise=noise, rng=5)
    # Node noise is a multiple of 2^-c: every sum is exact in floating point.
    np.testing.assert_array_equal(a.values, central.values)
    np.testing.assert_array_equal(b.values, central.values)
    assert a.distribution == "discrete-laplace" and a.resolution == 2.0**-frac_bits


def test_dealer_shares_reconstruct_to_the_rounded_draw():
    draw = draw_tree_noise(GRID.size, ecdf_noise_scale(GRID.size, EPS), rng=13)
    shared = share_tree_noise(draw, n_servers=3, frac_bits=10, rng=1)
    np.testing.assert_array_equal(shared.reconstruct(), np.rint(draw.values * 2**10) / 2**10)
    assert shared.epsilon == pytest.approx(EPS) and shared.contributors == 1


# ----------------------------------------------------------------- exact counts, eps=inf


@settings(deadline=None, max_examples=25, derandomize=True)
@given(data=st.lists(st.integers(-3, 30), min_size=1, max_size=60),
       shift=st.sampled_from([0.0, 0.25]),
       query=st.lists(st.integers(0, GRID.size - 1), min_size=1, max_size=12),
       n_servers=st.integers(2, 4), ring_bits=st.sampled_from([16, 64]))
def test_counts_without_noise_are_exact(data, shift, query, n_servers, ring_bits):
    # Halves land exactly on thresholds, quarters between them; -3 and 30 off the grid.
    x = np.asarray(data, dtype=np.float64) / 2.0 + shift
    exact = ecdf_counts(x, GRID)[np.unique(query)]
    a = pointwise_ecdf(x, GRID, query, epsilon=math.inf, n_servers=n_servers,
                       ring_bits=ring_bits, batch_size=7, rng=0)
    b = fss_ecdf(x, GRID, query, epsilon=math.inf, ring_bits=ring_bits, batch_size=7, rng=0)
    np.testing.assert_array_equal(a.counts, exact)
    np.testing.assert_array_equal(b.counts, exact)
    assert a.privacy.model is PrivacyModel.NONE and b.node_variance == 0.0


def test_deployment_randomness_gives_the_same_counts():
    x = poisson_data(50)
    exact = ecdf_counts(x, GRID)
    a = pointwise_ecdf(x, GRID, epsilon=math.inf, randomness="os")
    b = fss_ecdf(x, GRID, epsilon=math.inf, randomness="os")
    np.testing.assert_array_equal(a.counts, exact)
    np.testing.assert_array_equal(b.counts, exact)
    noisy = pointwise_ecdf(x, GRID, epsilon=EPS, randomness="os")
    assert noisy.noise_kind == "deployment"


# ------------------------------------------------------------------ measured bit counts


def test_pointwise_bits_equal_the_formula():
    n, m, ring_bits, k_contrib = 37, 3, 48, 4
    x = poisson_data(n, seed=5)
    query = [1, 5, 6, 7, 8, 20, 24]
    b, w = len(query), index_bits(GRID.size)
    fed = pointwise_ecdf(x, GRID, query, epsilon=EPS, n_servers=m, ring_bits=ring_bits,
                         contributors=k_contrib, batch_size=10, rng=7)
    assert w == 5
    cost = fed.cost
    assert cost.bits_per_party == cost.max_bits_per_party == m * b * ring_bits
    assert cost.bits_received_per_party == b * w
    assert cost.total_bits == n * b * (w + m * ring_bits) + m * b * ring_bits
    assert cost.rounds == 3 and cost.server_operations == m * n * b
    n_nodes = DyadicTree(GRID.size).n_nodes
    assert fed.setup_cost.total_bits == k_contrib * m * n_nodes * ring_bits
    # The same protocol through the generic transport: uploads measured from the messages.
    noise = distributed_tree_noise(GRID.size, EPS, n_servers=m, ring_bits=ring_bits, rng=8)
    by_batch = [simulate(PointwiseECDF(GRID, query, epsilon=EPS, n_servers=m, noise=noise,
                                       ring_bits=ring_bits), x, rng=9, batch_size=size)
                for size in (None, 4)]
    for est in by_batch:
        # Relayed: m |B| l peer bits per party to the computing parties 0..m-1, each of
        # which uploads |B| l bits to the querier.
        assert est.cost.peer_bits_per_party == m * b * ring_bits
        assert est.cost.bits_per_party == m * b * ring_bits * (n + 1) / n
        assert est.cost.max_bits_per_party == (m + 1) * b * ring_bits
        assert est.cost.total_bits == n * m * b * ring_bits + m * b * ring_bits
        assert (est.cost.rounds, est.cost.peer_rounds) == (2, 1)
        assert est.cost.offline_bits == noise.setup_bits
    np.testing.assert_array_equal(by_batch[0].diagnostics["curve"].values,
                                  by_batch[1].diagnostics["curve"].values)


def test_fss_bits_equal_the_formula_and_queries_do_not_depend_on_n():
    ring_bits = 64
    query = np.arange(3, 19)
    b, w = query.size, index_bits(GRID.size)
    d = GRID.size.bit_length()  # positions 0..N need 2^d > N
    key_bits = 128 + d * (128 + 2 + ring_bits) + ring_bits
    query_costs = []
    for n in (20, 300):
        servers = fss_ecdf_setup(poisson_data(n, seed=n), GRID, epsilon=EPS, rng=n,
                                 method="003-tree")
        assert servers.keys[0].bits_per_key == key_bits == servers.keys[1].bits_per_key
        setup = servers.setup_cost
        assert setup.bits_per_party == setup.max_bits_per_party == 2 * key_bits
        noise_bits = 2 * 2 * DyadicTree(GRID.size).n_nodes * ring_bits
        assert setup.total_bits == n * 2 * key_bits + noise_bits
        assert setup.offline_bits == noise_bits
        curve = servers.query(query)
        assert curve.cost.total_bits == 2 * b * (w + ring_bits)
        assert curve.cost.rounds == 2 and curve.cost.bits_per_party == 0
        assert curve.diagnostics["dcf_evaluations_per_server"] == n * b
        query_costs.append(curve.cost.total_bits)
    assert query_costs[0] == query_costs[1]
    est = simulate(FssECDF(GRID, query, epsilon=EPS), poisson_data(40), rng=1, batch_size=9)
    # Relayed: every party sends one key to each computing party; the K = 2 contributors
    # (parties 0 and 1) send each of them a share of their noise at the |B| points; the
    # computing parties upload |B| l bits each.
    assert est.cost.peer_bits_per_party * 40 == 40 * 2 * key_bits + 2 * 2 * b * ring_bits
    assert est.cost.total_bits == 40 * 2 * key_bits + 2 * 2 * b * ring_bits + 2 * b * ring_bits
    assert (est.cost.rounds, est.cost.peer_rounds) == (3, 2)


# ------------------------------------------------------- what a single server sees


def _uniform_bins(words: np.ndarray, ring_bits: int) -> list[np.ndarray]:
    """Counts of the top and the bottom 4 bits: 16 equiprobable cells each if uniform."""
    w = np.asarray(words, dtype=np.uint64).ravel()
    top = np.right_shift(w, np.uint64(ring_bits - 4)) & np.uint64(15)
    low = w & np.uint64(15)
    return [np.bincount(top.astype(np.int64), minlength=16),
            np.bincount(low.astype(np.int64), minlength=16)]


def _looks_uniform_and_data_free(view_a: np.ndarray, view_b: np.ndarray, bits: int) -> None:
    for counts_a, counts_b in zip(_uniform_bins(view_a, bits), _uniform_bins(view_b, bits),
                                  strict=True):
        assert stats.chisquare(counts_a).pvalue > ALPHA
        assert stats.chisquare(counts_b).pvalue > ALPHA
        assert stats.chi2_contingency(np.vstack([counts_a, counts_b]))[1] > ALPHA


@pytest.mark.parametrize("server", [0, 2])
def test_a_single_aggregation_server_sees_uniform_shares(server):
    # All indicators 1 (values below the grid) against all 0 (values above it).
    protocol = PointwiseECDF(GRID, epsilon=math.inf, n_servers=3).configure(400)
    views = []
    for value in (-5.0, 50.0):
        parties = protocol.init_parties(np.full((400, 1), value), np.arange(400))
        _, message = protocol.party_step(parties, None, np.random.default_rng(21))
        # What computing party `server` receives in the relay round.
        mine = message.fields["to"] == server
        assert np.count_nonzero(mine) == 400
        views.append(message.fields["shares"][mine])
    _looks_uniform_and_data_free(views[0], views[1], 64)


def test_a_single_fss_server_sees_uniform_keys():
    protocol = FssECDF(GRID, epsilon=math.inf).configure(3000)
    views = []
    for value in (-5.0, 50.0):  # alpha = 0 for every key, against alpha = N
        parties = protocol.init_parties(np.full((3000, 1), value), np.arange(3000))
        _, message = protocol.party_step(parties, None, np.random.default_rng(22))
        mine = message.fields["to"] == 0  # the keys computing party 0 receives
        views.append({name: np.asarray(arr)[mine] for name, arr in message.fields.items()})
    a, b = views
    for name in ("key_cw_value", "key_cw_out"):
        _looks_uniform_and_data_free(a[name], b[name], 64)
    for name in ("key_seed", "key_cw_seed"):  # 128-bit seeds: the high word is uniform
        _looks_uniform_and_data_free(a[name][..., 1], b[name][..., 1], 64)
    for name in ("key_cw_t",):
        ones = [int(np.count_nonzero(v[name])) for v in (a, b)]
        total = a[name].size
        for k in ones:
            assert stats.binomtest(k, total, 0.5).pvalue > ALPHA
        assert stats.chi2_contingency([[ones[0], total - ones[0]],
                                       [ones[1], total - ones[1]]])[1] > ALPHA


def test_a_single_server_share_of_the_noise_is_uniform():
    noise = distributed_tree_noise(2048, EPS, n_servers=2, rng=4)
    zero = distributed_tree_noise(2048, 1e6, n_servers=2, rng=5)  # noise almost always 0
    for server in (0, 1):
        _looks_uniform_and_data_free(noise.shares[server], zero.shares[server], 64)


# ---------------------------------------------------------------- the noise's law


def _dlap_pmf(k: np.ndarray, t: float) -> np.ndarray:
    return (1.0 - t) / (1.0 + t) * t ** np.abs(k)


def test_distributed_noise_is_one_discrete_laplace_when_all_contributors_are_needed():
    # K = h = 3: Pólya(1/3) parts add up to exactly DLap(t), t = exp(-1/b).
    noise = distributed_tree_noise(4096, 2.0, n_servers=2, contributors=3, min_honest=3, rng=6)
    k = noise.reconstruct().astype(np.int64)
    t = math.exp(-1.0 / noise.scale)
    edges = np.arange(-8, 10)  # cells (-inf,-8], -7, ..., 8, [9, inf)
    cells = np.clip(k, edges[0], edges[-1])
    observed = np.array([np.count_nonzero(cells == e) for e in edges])
    inner = _dlap_pmf(edges[1:-1], t)
    tail = t ** 8 / (1.0 + t)  # P(X <= -8) = P(X >= 8) ... the last cell is X >= 9
    probs = np.concatenate([[tail], inner, [t ** 9 / (1.0 + t)]])
    assert probs.sum() == pytest.approx(1.0)
    assert stats.chisquare(observed, probs * k.size).pvalue > ALPHA


@pytest.mark.parametrize(("contributors", "min_honest"), [(2, 1), (3, 1), (4, 2)])
def test_distributed_noise_variance(contributors, min_honest):
    # Sum of K Pólya(1/h) differences: X - Y with X, Y ~ NB(R = K/h, t). Cumulants of NB:
    # k2 = R t/(1-t)^2, k4 = R t (1 + 4t + t^2)/(1-t)^4; for X - Y double them.
    draws = np.concatenate([
        distributed_tree_noise(4096, 2.0, contributors=contributors, min_honest=min_honest,
                               rng=seed).reconstruct() for seed in range(3)])
    tree = DyadicTree(4096)
    b = tree.n_levels / 2.0
    t = math.exp(-1.0 / b)
    r = contributors / min_honest
    k2 = 2 * r * t / (1 - t) ** 2
    k4 = 2 * r * t * (1 + 4 * t + t * t) / (1 - t) ** 4
    mu4 = k4 + 3 * k2**2
    se = math.sqrt((mu4 - k2**2) / draws.size)  # of the mean of X^2 (the mean is 0)
    assert abs(np.mean(draws**2) - k2) < 5 * se
    noise = distributed_tree_noise(4096, 2.0, contributors=contributors, min_honest=min_honest,
                                   rng=0)
    assert noise.node_variance == pytest.approx(k2, rel=1e-12)
    assert noise.tolerated_colluders == contributors - min_honest


def test_discrete_tree_mechanism_is_epsilon_dp_on_two_points():
    # N = 2: leaves e0, e1 and the root r; the release is (c0 + e0 + r, c1 + e1 + r) with
    # i.i.d. DLap(t), t = exp(-eps/(L+1)). One record gives counts (1,1), (0,1) or (0,0)
    # (value <= tau_0, in (tau_0, tau_1], above); replacing it moves between any two.
    eps = 0.7
    tree = DyadicTree(2)
    t = math.exp(-eps / tree.n_levels)
    roots = np.arange(-300, 301)
    y = np.arange(-25, 26)

    def pmf(c0: int, c1: int) -> np.ndarray:
        p_root = _dlap_pmf(roots, t)
        a = _dlap_pmf(y[:, None] - c0 - roots[None, :], t) * p_root  # (y0, root)
        bb = _dlap_pmf(y[:, None] - c1 - roots[None, :], t)  # (y1, root)
        return a @ bb.T

    outputs = {c: pmf(*c) for c in ((1, 1), (0, 1), (0, 0))}
    worst = max(float(np.max(outputs[u] / outputs[v])) for u in outputs for v in outputs)
    assert worst <= math.exp(eps) * (1 + 1e-9)
    # On two points every change is one node ([0,1), [1,2) or the root [0,2)), so the worst
    # ratio is that of one node shifted by one count, t^-1 = e^(eps/(L+1)), reached in the
    # tails (the root is summed out, so it is approached, not met exactly).
    one_node = 1.0 / t
    assert one_node * (1 - 1e-3) < worst <= one_node * (1 + 1e-9)


# ----------------------------------------------------------------- the DCF evaluator


@pytest.mark.parametrize("ring_bits", [8, 64])
@pytest.mark.parametrize("domain_bits", [1, 4, 7])
def test_dcf_sum_at_equals_summed_dcf_eval(ring_bits, domain_bits):
    ring = Ring(ring_bits)
    rng = np.random.default_rng(domain_bits)
    alpha = rng.integers(0, 2**domain_bits, 90)
    keys = dcf_gen(alpha, rng.integers(0, 2**ring_bits - 1, 90, dtype=np.uint64),
                   domain_bits=domain_bits, ring=ring, rng=3)
    every = np.arange(2**domain_bits, dtype=np.uint64)
    some = rng.integers(0, 2**domain_bits, 9).astype(np.uint64)  # unsorted, repeats
    for points in (every, some):
        grid = np.broadcast_to(points, (alpha.size, points.size))
        for party in (0, 1):
            expected = ring.sum(dcf_eval(party, keys[party], grid), axis=0)
            got = dcf_sum_at(party, keys[party], points, chunk=37)
            np.testing.assert_array_equal(got, expected)


def test_dcf_sum_at_counts_thresholds_above_each_point():
    ring = Ring(64)
    alpha = np.array([0, 1, 5, 5, 9, 16, 16, 3])
    keys = dcf_gen(alpha, 1, domain_bits=5, ring=ring, rng=4)
    points = np.arange(32)
    total = ring.add(dcf_sum_at(0, keys[0], points), dcf_sum_at(1, keys[1], points))
    np.testing.assert_array_equal(total, (points[:, None] < alpha[None, :]).sum(axis=1))


# --------------------------------------------------- queries, transports, post-processing


def test_fss_servers_answer_later_queries_from_the_same_curve():
    x = poisson_data()
    servers = fss_ecdf_setup(x, GRID, epsilon=EPS, rng=31, method="003-tree")
    full = servers.query()
    first = servers.query([2, 4, 6])
    second = servers.query(np.array([6, 7, 24]))
    np.testing.assert_array_equal(first.values, full.values[[2, 4, 6]])
    np.testing.assert_array_equal(second.values, full.values[[6, 7, 24]])
    assert servers.queries == 3 and second.privacy.epsilon == EPS
    np.testing.assert_array_equal(central_with(x, servers.noise).values, full.values)


@pytest.mark.parametrize("make", [PointwiseECDF, FssECDF])
def test_simulate_returns_the_curve_and_its_exact_standard_error(make):
    x = poisson_data(120)
    query = np.array([0, 1, 2, 3, 10, 17])
    noise = distributed_tree_noise(GRID.size, EPS, rng=41)
    est = simulate(make(GRID, query, epsilon=EPS, noise=noise), x, rng=42, batch_size=50)
    curve = est.diagnostics["curve"]
    np.testing.assert_array_equal(curve.values, central_with(x, noise).values[query])
    assert est.value == pytest.approx(np.mean(curve.values), rel=1e-15)
    # Var(mean_B F_hat) = 1^T A_B A_B^T 1 var_node / (|B| n)^2, from the point-node matrix.
    a_b = noise.tree.matrix(query)
    expected = float(np.ones(query.size) @ (a_b @ (a_b.T @ np.ones(query.size))))
    expected *= noise.node_variance / (query.size * x.size) ** 2
    assert est.std_error == pytest.approx(math.sqrt(expected), rel=1e-12)
    assert est.privacy.epsilon == EPS and est.quantity == "ecdf"


def test_smoothing_and_quantiles_match_the_central_curve():
    x = poisson_data(400)
    noise = distributed_tree_noise(GRID.size, 0.5, rng=51)
    central = central_with(x, noise)
    subset = np.array([1, 2, 3, 5, 8, 13, 21])
    fed = pointwise_ecdf(x, GRID, subset, epsilon=0.5, noise=noise, rng=52)
    np.testing.assert_allclose(fed.smooth(2).values, smooth(central, 2, subset).values,
                               rtol=0, atol=1e-12)
    whole = fss_ecdf(x, GRID, epsilon=0.5, noise=noise, rng=53).to_private_ecdf()
    np.testing.assert_array_equal(whole.values, central.values)
    assert whole.variance == pytest.approx(central_with(x, noise).tree.n_levels
                                           * noise.node_variance / x.size**2)
    ours = dp_quantile(whole, [0.25, 0.5, 0.9])
    theirs = dp_quantile(central, [0.25, 0.5, 0.9])
    np.testing.assert_array_equal(ours.value, theirs.value)
    assert fed(GRID[subset]).tolist() == fed.values.tolist()
    with pytest.raises(ValueError, match="every grid point"):
        fed.to_private_ecdf()


# ---------------------------------------------------------------------------- bad input


def _draw() -> TreeNoise:
    return draw_tree_noise(GRID.size, ecdf_noise_scale(GRID.size, EPS), rng=0)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: pointwise_ecdf([1.0, 2.0], GRID, epsilon=0.0), ValueError, "epsilon"),
    (lambda: pointwise_ecdf([1.0, np.nan], GRID, epsilon=EPS), ValueError, "values"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, n_servers=1), ValueError, "n_servers"),
    (lambda: FssECDF(GRID, epsilon=EPS, n_servers=3), ValueError, "two-party"),
    (lambda: pointwise_ecdf([1.0], GRID, [0, 25], epsilon=EPS), ValueError, "query"),
    (lambda: pointwise_ecdf([1.0], GRID, [], epsilon=EPS), ValueError, "query"),
    (lambda: pointwise_ecdf([1.0], GRID, [0.5], epsilon=EPS), ValueError, "query"),
    (lambda: fss_ecdf([1.0], GRID, np.ones(3, bool), epsilon=EPS), ValueError, "mask"),
    (lambda: pointwise_ecdf([1.0], GRID[::-1], epsilon=EPS), ValueError, "increasing"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, tree_noise=_draw(),
                            noise=distributed_tree_noise(GRID.size, EPS, rng=0)),
     ValueError, "not both"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=2.0, tree_noise=_draw()), ValueError, "scale"),
    (lambda: fss_ecdf([1.0], GRID[:10], epsilon=EPS, tree_noise=_draw()), ValueError,
     "10 points"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, noise=_draw()), TypeError,
     "SharedTreeNoise"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, n_servers=3,
                            noise=distributed_tree_noise(GRID.size, EPS, rng=0)),
     ValueError, "2 servers"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=math.inf, tree_noise=_draw()), ValueError,
     "infinite"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, contributors=1), ValueError,
     "contributors"),
    (lambda: distributed_tree_noise(25, EPS, contributors=2, min_honest=3), ValueError,
     "min_honest"),
    (lambda: share_tree_noise(draw_tree_noise(25, 6.0, distribution="gaussian", rng=0)),
     ValueError, "Laplace"),
    (lambda: pointwise_ecdf(np.zeros(200), GRID, epsilon=math.inf, ring_bits=8),
     OverflowError, "ring_bits"),
    (lambda: fss_ecdf(np.zeros(10), GRID, epsilon=EPS, ring_bits=16, frac_bits=8),
     OverflowError, "ring_bits"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, frac_bits=63), ValueError, "frac_bits"),
    (lambda: pointwise_ecdf([1.0], GRID, epsilon=EPS, randomness="urandom"), ValueError,
     "randomness"),
    (lambda: dcf_sum_at(1, dcf_gen([3], domain_bits=4, rng=0)[0], [1]), ValueError, "party"),
    (lambda: dcf_sum_at(0, dcf_gen([3], domain_bits=4, rng=0)[0], [16]), ValueError,
     "4-bit domain"),
    (lambda: distributed_tree_noise(25, EPS, rng="seed"), ValueError, "'os'"),
])
def test_bad_inputs_are_refused(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_servers_refuse_a_query_before_every_party_took_part():
    protocol = PointwiseECDF(GRID, epsilon=math.inf)
    server = protocol.init_server(10)
    parties = protocol.init_parties(np.zeros((4, 1)), np.arange(4))
    message = protocol.shares_for_servers(parties, None, np.random.default_rng(0))
    server = protocol.absorb(server, message)
    with pytest.raises(ValueError, match="4 of 10 parties"):
        protocol.finish(server, np.random.default_rng(0))


def test_parties_refuse_a_broadcast_query_the_servers_do_not_aggregate_for():
    protocol = PointwiseECDF(GRID, [1, 2, 3], epsilon=math.inf).configure(3)
    other = PointwiseECDF(GRID, [1, 2, 4], epsilon=math.inf).query_message()
    parties = protocol.init_parties(np.zeros((3, 1)), np.arange(3))
    with pytest.raises(ValueError, match="broadcast query differs"):
        protocol.party_step(parties, other, np.random.default_rng(0))


def test_the_grid_comes_from_public_bounds_and_precision() -> None:
    x = poisson_data(60)
    x = x[(x >= 0.0) & (x <= 12.0)]
    for make in (PointwiseECDF, FssECDF):
        proto = make(bounds=(0.0, 12.0), precision=0.5, epsilon=math.inf)
        assert np.array_equal(proto.thresholds, GRID)
        est = simulate(proto, x, rng=1)
        curve = est.diagnostics["curve"]
        assert np.array_equal(curve.values, np.mean(x[:, None] <= GRID[None, :], axis=0))
        # Default precision: 2^10 intervals over the bounds.
        assert make(bounds=(0.0, 1.0), epsilon=1.0).thresholds.size == 1025
    with pytest.raises(ValueError, match=r"1 value\(s\) outside the declared bounds \[0, 12\]"):
        simulate(PointwiseECDF(bounds=(0.0, 12.0), epsilon=1.0), np.r_[x, 13.0], rng=1)
    with pytest.raises(ValueError, match="give the public grid"):
        PointwiseECDF(epsilon=1.0)
    with pytest.raises(ValueError, match="pass either thresholds or bounds"):
        FssECDF(GRID, epsilon=1.0, precision=0.5)
    with pytest.raises(ValueError, match="precision must be a finite number > 0"):
        FssECDF(bounds=(0, 1), epsilon=1.0, precision=-1.0)
