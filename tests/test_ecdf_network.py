"""The federated ECDF evaluations (003 Sec. 4.1 and 4.2) as per-party steps with relay rounds.

Checked here: the computing parties (parties 0..m-1) and the noise contributors (parties
0..K-1) act on their own values and the rows they received only, so the noise-free release
does not depend on how parties are batched, and neither does a release with noise the
servers already hold; a networked run over mutually authenticated gRPC (server and silos
in threads over loopback TLS, as in tests/test_network.py) equals the simulator with the
same seed, value and costs; a computing party refuses rows missing from a party; the
distributed noise sent by the contributors has the mean and variance of its law.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

import numpy as np
import pytest

from fedustat.protocols.base import PEER_FROM, Message, Role
from fedustat.protocols.ecdf import (
    FssECDF,
    PointwiseECDF,
    distributed_tree_noise,
    dp_ecdf,
    draw_tree_noise,
    ecdf_noise_scale,
)
from fedustat.protocols.ecdf.shared_noise import DEALER_FRAC_BITS
from fedustat.runtime.simulate import simulate
from fedustat.stats.ecdf import absolute_grid, ecdf_counts
from network_deployment import run_deployment as run_threads

GRID = absolute_grid(0.0, 12.0, 0.5)  # 25 thresholds: L = 5, 49 nodes
EPS = 1.0
SEED = 5
TIMEOUT = 10.0
BATCHINGS = [None, 1, 3, [2, 5, 1, 12]]


def poisson_data(n: int = 20, seed: int = 0) -> np.ndarray:
    """Poisson(3) values (many exactly on thresholds) plus one above and one below the grid."""
    x = np.random.default_rng(seed).poisson(3.0, n - 2).astype(np.float64)
    return np.concatenate([x, [20.0, -1.0]])


def curve(est: Any) -> Any:
    return est.diagnostics["curve"]


# --------------------------------------------------------------- batch independence


@pytest.mark.parametrize("make", [
    lambda q: PointwiseECDF(GRID, q, epsilon=math.inf),
    lambda q: PointwiseECDF(GRID, q, epsilon=math.inf, n_servers=3, ring_bits=16),
    lambda q: FssECDF(GRID, q, epsilon=math.inf),
], ids=["secagg-m2", "secagg-m3", "fss"])
@pytest.mark.parametrize("query", [None, [0, 6, 7, 24]])
def test_the_noise_free_release_does_not_depend_on_batching(make, query):
    x = poisson_data()
    idx = np.arange(GRID.size) if query is None else np.asarray(query)
    exact = ecdf_counts(x, GRID)[idx]
    costs = set()
    for batch_size in BATCHINGS:
        est = simulate(make(query), x, rng=SEED, batch_size=batch_size)
        np.testing.assert_array_equal(curve(est).counts, exact)
        costs.add(est.cost)
    assert len(costs) == 1  # the rows that travel do not depend on batching either


@pytest.mark.parametrize("cls", [PointwiseECDF, FssECDF])
def test_noise_held_by_the_servers_gives_one_release_for_every_batching(cls):
    x = poisson_data()
    noise = distributed_tree_noise(GRID.size, EPS, rng=3)
    central = dp_ecdf(x, GRID, epsilon=EPS, tree_noise=_as_tree_noise(noise))
    for batch_size in BATCHINGS:
        est = simulate(cls(GRID, epsilon=EPS, noise=noise), x, rng=batch_size and 7,
                       batch_size=batch_size)
        # Node noise is a multiple of 2^-c = 1: every sum is exact in floating point.
        np.testing.assert_array_equal(curve(est).values, central.values)


def _as_tree_noise(noise):
    from fedustat.protocols.ecdf import TreeNoise

    return TreeNoise(noise.tree, noise.reconstruct(), "laplace", noise.scale, "simulation")


@pytest.mark.parametrize("cls", [PointwiseECDF, FssECDF])
def test_a_dealer_draw_added_by_computing_party_0_equals_the_central_curve(cls):
    x = poisson_data(30)
    draw = draw_tree_noise(GRID.size, ecdf_noise_scale(GRID.size, EPS), rng=11)
    central = dp_ecdf(x, GRID, epsilon=EPS, tree_noise=draw)
    est = simulate(cls(GRID, epsilon=EPS, tree_noise=draw), x, rng=1, batch_size=4)
    bound = draw.tree.n_levels * 2.0 ** -(DEALER_FRAC_BITS + 1) / x.size
    np.testing.assert_allclose(curve(est).values, central.values, rtol=0, atol=bound)
    assert curve(est).distribution == "laplace"


# ------------------------------------------------ the distributed noise, relayed


@pytest.mark.parametrize("cls", [PointwiseECDF, FssECDF])
def test_relayed_distributed_noise_is_unbiased_with_the_variance_of_its_law(cls):
    # K = 3 contributors (parties 0..2), min_honest 1; a point carries L + 1 = 6 nodes.
    x = poisson_data(12, seed=4)
    point = 7
    exact = float(ecdf_counts(x, GRID)[point])
    protocol = cls(GRID, [point], epsilon=EPS, contributors=3)
    runs = 400
    errors = np.array([curve(simulate(protocol, x, rng=s, batch_size=5)).counts[0] - exact
                       for s in range(runs)])
    first = curve(simulate(protocol, x, rng=0, batch_size=5))
    # One contributor's node part is Polya(1, t) - Polya(1, t): a discrete Laplace t^|k|
    # (c = 0), t = exp(-1/b); a node is 3 of them, a point 6 nodes (moments of i.i.d.
    # sums: E S^4 = k m4 + 3 k (k - 1) sigma^4 for k zero-mean terms).
    t = math.exp(-1.0 / first.scale)
    k = np.arange(-4000, 4001, dtype=np.float64)
    pmf = t ** np.abs(k) * (1 - t) / (1 + t)
    s2, m4 = float(np.sum(pmf * k**2)), float(np.sum(pmf * k**4))
    assert first.node_variance == pytest.approx(3 * s2, rel=1e-9)
    v_node, m4_node = 3 * s2, 3 * m4 + 3 * 3 * 2 * s2**2
    var = 6 * v_node
    mu4 = 6 * m4_node + 3 * 6 * 5 * v_node**2
    # Mean within 5 standard errors; the sample variance within 5 of its standard errors
    # sqrt((mu4 - var^2) / runs).
    assert abs(errors.mean()) < 5 * math.sqrt(var / runs)
    assert abs(errors.var(ddof=1) - var) < 5 * math.sqrt((mu4 - var**2) / runs)
    assert first.variance == pytest.approx(var / x.size**2, rel=1e-9)


# ------------------------------------------------------------ refusals at the parties


def test_a_computing_party_names_whom_it_summed_and_refuses_repeated_rows():
    protocol = PointwiseECDF(GRID, [3, 4], epsilon=math.inf).configure(4)
    states = [protocol.init_parties(np.full((1, 1), 2.0), np.array([i])) for i in range(4)]
    rows = [protocol.party_step(s, None, np.random.default_rng(i))[1]
            for i, s in enumerate(states)]

    def inbox_of(senders: list[int]) -> Message:
        kept = [rows[i] for i in senders]
        fields = {name: np.concatenate([np.asarray(m.fields[name]) for m in kept])
                  for name in ("shares", "to")}
        origin = np.concatenate([m.parties for m in kept])
        to_zero = fields["to"] == 0
        return Message(Role.PARTY, Role.PARTY,
                       {"shares": fields["shares"][to_zero], PEER_FROM: origin[to_zero]},
                       {"shares": 64, PEER_FROM: 32}, np.zeros(int(to_zero.sum()), np.int64))

    # Party 2 fell silent in the sharing round (sent nothing): computing party 0 sums the
    # other three and says so (the mask of whom it summed goes with its upload).
    _, upload = protocol.party_step(copy.deepcopy(states[0]), inbox_of([0, 1, 3]),
                                    np.random.default_rng(9))
    assert np.asarray(upload.fields["summed"]).tolist() == [[1, 1, 0, 1]]
    with pytest.raises(ValueError, match=r"party 0 received indicator shares from 4 rows "
                                         r"that are not one row per party of 0\.\.3"):
        protocol.party_step(states[0], inbox_of([0, 1, 1, 3]), np.random.default_rng(9))


def test_a_party_that_is_not_a_computing_party_refuses_relayed_rows():
    protocol = FssECDF(GRID, epsilon=math.inf).configure(3)
    state = protocol.init_parties(np.ones((1, 1)), np.array([2]))
    state, _ = protocol.party_step(state, None, np.random.default_rng(0))
    inbox = Message(Role.PARTY, Role.PARTY, {"x": np.zeros(1), PEER_FROM: np.array([0])},
                    {"x": 8, PEER_FROM: 32}, np.array([2]))
    with pytest.raises(ValueError, match=r"party 2 is not a computing party \(0\.\.1\)"):
        protocol.party_step(state, inbox, np.random.default_rng(0))


@pytest.mark.parametrize(("make", "n", "match"), [
    (lambda: PointwiseECDF(GRID, epsilon=EPS, n_servers=3), 2,
     r"the run has 2 parties, but parties 0\.\.2 compute as the 3 servers and parties "
     r"0\.\.2 contribute noise; it needs at least 3 parties"),
    (lambda: FssECDF(GRID, epsilon=EPS, contributors=5), 4,
     r"parties 0\.\.4 contribute noise; it needs at least 5 parties"),
    (lambda: PointwiseECDF(GRID, epsilon=math.inf), 1,
     r"the run has 1 parties, but parties 0\.\.1 compute as the 2 servers; it needs at "
     r"least 2"),
])
def test_a_run_too_small_for_its_computing_parties_is_refused(make, n, match):
    with pytest.raises(ValueError, match=match):
        simulate(make(), poisson_data(max(n, 2))[:n], rng=1)


def test_a_party_step_before_configure_is_refused():
    protocol = PointwiseECDF(GRID, epsilon=EPS)
    state = protocol.init_parties(np.ones((2, 1)), np.arange(2))
    with pytest.raises(ValueError, match=r"configure\(n_rows\) gives the evaluation"):
        protocol.party_step(state, None, np.random.default_rng(0))


# ------------------------------------------------------------------ networked runs


#: Server and silos in threads (tests/network_deployment.py), with this file's seed and
#: timeout.
run_deployment = functools.partial(run_threads, rng=SEED, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    pytest.importorskip("grpc")
    from fedustat.runtime.network.certs import create_deployment

    return create_deployment(tmp_path_factory.mktemp("certs"), 3)


NETWORKED = [
    ("secagg", lambda: PointwiseECDF(GRID, [0, 5, 6, 7, 24], epsilon=EPS, contributors=3)),
    ("secagg-m3-all-points", lambda: PointwiseECDF(GRID, epsilon=EPS, n_servers=3)),
    ("secagg-exact", lambda: PointwiseECDF(GRID, epsilon=math.inf, ring_bits=16)),
    ("fss", lambda: FssECDF(GRID, [2, 9, 13], epsilon=EPS, contributors=3)),
    ("fss-exact", lambda: FssECDF(GRID, epsilon=math.inf)),
    ("fss-held-noise", lambda: FssECDF(GRID, [1, 4], epsilon=EPS,
                                       noise=distributed_tree_noise(GRID.size, EPS, rng=2))),
]


@pytest.mark.parametrize("make", [c[1] for c in NETWORKED], ids=[c[0] for c in NETWORKED])
def test_networked_release_equals_the_simulation(certs, make):
    x = poisson_data(21, seed=6)
    # Silos of 1, 2 and 18 parties: the computing parties and contributors 0..2 sit in
    # different processes, and most rows cross between silos.
    silos = np.split(x[:, None], [1, 3])
    server, parties = run_deployment(certs, make, silos)
    assert not isinstance(server, Exception), server
    assert not any(isinstance(p, Exception) for p in parties), parties
    expected = simulate(make(), x, rng=SEED, batch_size=[len(s) for s in silos])
    np.testing.assert_array_equal(curve(server.estimate).counts, curve(expected).counts)
    np.testing.assert_equal(server.estimate.value, expected.value)
    assert server.estimate.cost == expected.cost
    assert server.estimate.cost.peer_rounds >= 1
    np.testing.assert_equal([p.release["value"] for p in parties], [expected.value] * 3)
    if math.isinf(make().epsilon):
        idx = curve(expected).indices
        np.testing.assert_array_equal(curve(server.estimate).counts,
                                      ecdf_counts(x, GRID)[idx])


@pytest.mark.parametrize("make", [
    lambda: PointwiseECDF(GRID, epsilon=EPS, contributors=3, randomness="os"),
    lambda: FssECDF(GRID, [2, 9], epsilon=EPS, contributors=3, randomness="os"),
], ids=["secagg", "fss"])
def test_an_unseeded_networked_run_draws_from_the_os(certs, make):
    # Without a seed a networked run needs deployment randomness: randomness="os" gives
    # it (shares, masks and noise from the OS), and the release says so.
    x = poisson_data(21, seed=6)
    server, parties = run_deployment(certs, make, np.split(x[:, None], [1, 3]), rng=None)
    assert not isinstance(server, Exception), server
    assert not any(isinstance(p, Exception) for p in parties), parties
    assert server.estimate.noise == "deployment"
    assert np.all(np.isfinite(curve(server.estimate).values))


def test_an_unseeded_run_with_simulation_randomness_is_refused(certs):
    x = poisson_data(21, seed=6)
    server, _ = run_deployment(
        certs, lambda: PointwiseECDF(GRID, epsilon=EPS, randomness="simulation"),
        np.split(x[:, None], [1, 3]), rng=None)
    assert isinstance(server, ValueError) and "pass a seed" in str(server)
    # Left unset, the randomness of an unseeded run is the OS CSPRNG's.
    server, parties = run_deployment(certs, lambda: PointwiseECDF(GRID, epsilon=EPS),
                                     np.split(x[:, None], [1, 3]), rng=None)
    assert server.estimate.noise == "deployment"
    assert {p.release["noise"] for p in parties} == {"deployment"}
