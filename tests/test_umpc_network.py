"""U-MPC (002 Protocol 3.1) run party by party: relay rounds, batching, the real transport.

Every party step computes on its own record, its own shares and the rows it received, so
the noise-free release cannot depend on how parties are batched, and a networked run over
mutually authenticated gRPC (server and silos in threads over loopback TLS, as in
tests/test_network.py) gives the simulator's release and costs for a seed.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
import pytest

from fedustat.privacy.noise import DeploymentNoise
from fedustat.protocols import registry
from fedustat.protocols.base import PEER_FROM, Message, Protocol
from fedustat.protocols.mpc.umpc import UMPC
from fedustat.runtime.simulate import simulate, simulate_run
from fedustat.secure import (
    Ring,
    contributor_noise,
    member_openings,
    open_shares,
    open_xor,
    share,
)
from fedustat.secure.sharing import evaluating_members
from fedustat.stats import (
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    incomplete_ustatistic,
    kendall_tau_kernel,
    rand_index_kernel,
    vus_kernel,
)
from network_deployment import run_deployment as run_threads

SEED = 5
TIMEOUT = 20.0


def _data(name: str, n: int, seed: int) -> tuple[Any, np.ndarray]:
    """Data on a coarse grid (exact in fixed point, with ties) for each kernel."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 8, n) / 8
    y = np.clip(x + rng.integers(-2, 3, n) / 8, 0, 1)
    if name == "kendall":
        return kendall_tau_kernel("a"), np.column_stack([x, y])
    if name == "auc":
        labels = (rng.random(n) < 0.4).astype(float)
        labels[:2] = [0.0, 1.0]
        return auc_kernel(), np.column_stack([x, labels])
    if name == "vus":
        cls = rng.integers(0, 3, n).astype(float)
        cls[:3] = [0.0, 1.0, 2.0]
        return vus_kernel(), np.column_stack([x, cls])
    if name == "gini":
        return gini_kernel((0.0, 1.0)), x[:, None]
    if name == "rand":
        return rand_index_kernel(), np.column_stack([np.floor(x * 3), np.floor(y * 3)])
    return duplicate_pair_kernel(), np.floor(x * 4)[:, None]


CASES = [("kendall", "fss"), ("kendall", "circuit"), ("auc", "fss"), ("vus", "circuit"),
         ("gini", "fss"), ("rand", "circuit"), ("duplicate", "fss")]


# ------------------------------------------------------------------------- batching
@pytest.mark.parametrize(("name", "method"), CASES)
def test_noise_free_release_does_not_depend_on_batching(name: str, method: str) -> None:
    n = 17
    kernel, data = _data(name, n, 3)
    protocol = UMPC(kernel, math.inf, comparison=method, bounds=(0.0, 4.0), precision=1 / 8)
    runs = [simulate(protocol, data, rng=SEED, batch_size=b)
            for b in (None, 1, 2, 5, [3, 9, 5])]
    design = protocol.draw_design(n, np.asarray(runs[0].diagnostics["public_coin"],
                                                dtype=np.uint64))
    # The design's exact statistic (the data lie on the fixed-point grid), in every batching.
    assert runs[0].diagnostics["lemma_c1_u"] == pytest.approx(
        incomplete_ustatistic(kernel, data, design.tuples), rel=1e-15, abs=1e-15)
    for est in runs[1:]:
        assert est.value == runs[0].value
        assert est.diagnostics["u_statistic"] == runs[0].diagnostics["u_statistic"]
        # Costs count rows per party, whatever the batch holds.
        assert est.cost == runs[0].cost


def test_noisy_releases_in_other_batchings_keep_the_noise_law() -> None:
    """With noise each batch draws from its own stream, so values differ between batchings,
    but the noise stays an integer number of ring units with the Protocol B.1 law."""
    n, eps, reps = 8, 2.0, 150
    kernel, data = _data("duplicate", n, 1)
    protocol = UMPC(kernel, eps, comparison="circuit", threat_model="dis")
    units = []
    for s in range(reps):
        est = simulate(protocol, data, rng=s, batch_size=3)
        d = protocol.draw_design(n, np.asarray(est.diagnostics["public_coin"],
                                               dtype=np.uint64))
        units.append(est.diagnostics["lemma_c1_u"] * d.size
                     - incomplete_ustatistic(kernel, data, d.tuples) * d.size)
    u = np.array(units)
    assert np.allclose(u, np.round(u))
    # X - Y with X, Y ~ NB(R, t), R = c / min_honest (002 App. B): even cumulants add,
    # NB's are kappa2 = R t / (1 - t)^2, kappa4 = R t (1 + 4 t + t^2) / (1 - t)^4.
    t = math.exp(-eps / protocol.integer_sensitivity(d))   # the same max degree every draw
    assert protocol.min_honest == 1
    big_r = protocol.contributors(n) / protocol.min_honest
    k2 = 2 * big_r * t / (1 - t) ** 2
    k4 = 2 * big_r * t * (1 + 4 * t + t * t) / (1 - t) ** 4
    assert protocol.noise_variance(n, d) * d.size**2 == pytest.approx(k2)
    assert abs(u.mean()) <= 5 * math.sqrt(k2 / reps)
    assert abs(u.var(ddof=1) - k2) <= 5 * math.sqrt((k4 + 2 * k2**2) / reps)


def test_a_party_refuses_rows_that_do_not_match_the_design() -> None:
    """A dropped (or extra) relayed row is refused by the receiving party's step."""
    kernel, data = _data("gini", 8, 2)
    seen: list[int] = []

    def drop_first_row(msg: Message) -> Message:
        if msg.is_peer and PEER_FROM in msg.fields and not seen:
            seen.append(1)
            keep = np.arange(1, len(msg.parties))
            return Message(msg.sender, msg.receiver,
                           {k: np.asarray(v)[keep] for k, v in msg.fields.items()},
                           msg.bits_per_value, np.asarray(msg.parties)[keep])
        return msg

    with pytest.raises(ValueError, match="exactly one row of dealt material per group"):
        simulate_run(UMPC(kernel, 1.0, comparison="fss"), data, rng=1, relay=drop_first_row)


def test_the_upload_is_one_ring_element_per_party_and_material_is_peer_traffic() -> None:
    kernel, data = _data("kendall", 12, 4)
    est = simulate(UMPC(kernel, 1.0, comparison="fss", bounds=(0.0, 1.0), precision=1 / 8),
                   data, rng=2, batch_size=4)
    d = est.diagnostics
    assert est.cost.offline_bits == 0
    # Peer bits = Lemma C.3's peer part + the dealt material (002 App. A.3's offline phase).
    ring = d["fixed_point"]["bits"]
    assert est.cost.peer_bits_per_party * 12 == pytest.approx(
        d["lemma_c3_bits"] - 12 * ring + d["expected_offline_bits"], rel=1e-12)


# ------------------------------------------------------------------------- secure hooks
def test_member_openings_hand_each_opening_to_the_hook() -> None:
    ring = Ring(16)
    shares = share(np.array([5, 7], dtype=np.uint64), 3, 1, ring=ring)
    calls: list[tuple[str, list[int | None]]] = []

    class Hook:
        member = 1

        def __call__(self, op, arrays, active, ring_):
            calls.append((op, list(active)))
            return [np.asarray(a[self.member]) for a in arrays]   # this member's row only

    with member_openings(Hook()):
        (opened,) = open_shares(shares, ring=ring)
        (bit,) = open_xor(np.array([[1], [0], [1]], dtype=np.uint64), bits_per_element=1)
        assert tuple(evaluating_members(3)) == (1,)
    np.testing.assert_array_equal(opened, shares[1])
    np.testing.assert_array_equal(bit, [0])
    assert calls == [("add", [None]), ("xor", [1])]
    # Outside the block the members' rows are summed again.
    np.testing.assert_array_equal(open_shares(shares, ring=ring)[0], [5, 7])
    assert tuple(evaluating_members(3)) == (0, 1, 2)


def test_a_hook_holding_several_members_evaluates_their_rows() -> None:
    """A batch holding members 0 and 2 of its groups runs their rows side by side: the
    local steps compute both rows (and only them); the hook gets every row and answers
    with the opened values."""
    ring = Ring(16)
    shares = share(np.array([5, 7], dtype=np.uint64), 3, 1, ring=ring)

    class Hook:
        members = (0, 2)

        def __call__(self, op, arrays, active, ring_):
            return [ring.sum(a, axis=0) for a in arrays]

    with member_openings(Hook()):
        assert tuple(evaluating_members(3)) == (0, 2)
        np.testing.assert_array_equal(open_shares(shares, ring=ring)[0], [5, 7])

    class All:
        members = (0, 1, 2)

    with member_openings(All()):
        assert tuple(evaluating_members(3)) == (0, 1, 2)


def test_contributor_noise_checks_its_parameters() -> None:
    ring = Ring(32)
    with pytest.raises(ValueError, match=r"min_honest \(5\) cannot exceed the number of "
                                         r"contributors \(3\)"):
        contributor_noise(1, 1.0, 4, contributors=3, min_honest=5, ring=ring, rng=0)
    with pytest.raises(ValueError, match="epsilon"):
        contributor_noise(1, -1.0, 4, contributors=3, min_honest=1, ring=ring, rng=0)
    diffs, _ = contributor_noise(4, 1.0, 4, contributors=3, min_honest=1, ring=ring, rng=0)
    assert diffs.shape == (4,) and diffs.dtype == np.uint64


# ------------------------------------------------------------------------- network
grpc = pytest.importorskip("grpc")

from fedustat.runtime.network.certs import create_deployment  # noqa: E402

#: Server and silos in threads (tests/network_deployment.py), with this file's seed and
#: timeout.
run_deployment = functools.partial(run_threads, rng=SEED, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return create_deployment(tmp_path_factory.mktemp("certs"), 4)


NETWORKED = [
    ("kendall", "fss", {"threat_model": "hf", "f_honest": 0.8}),
    ("auc", "fss", {"threat_model": "dis"}),
    ("vus", "circuit", {"threat_model": "hf", "f_honest": 0.8}),
    ("duplicate", "circuit", {"threat_model": "dis", "min_honest": None}),
]


@pytest.mark.parametrize(("name", "method", "params"), NETWORKED,
                         ids=[f"{c[0]}-{c[1]}-{c[2]['threat_model']}" for c in NETWORKED])
def test_networked_umpc_equals_the_simulation(certs, name, method, params):
    kernel, data = _data(name, 19, 6)

    def make() -> Protocol:
        return registry.make("umpc", kernel, epsilon=1.0, comparison=method,
                             bounds=(0.0, 4.0), precision=1 / 8, **params)

    # Silos of unequal sizes: most groups and their dealers span processes.
    silos = np.split(data, [5, 7, 15])
    server, parties = run_deployment(certs, make, silos)
    assert not isinstance(server, Exception), server
    assert not any(isinstance(p, Exception) for p in parties), parties
    expected = simulate(make(), data, rng=SEED, batch_size=[len(s) for s in silos])
    np.testing.assert_equal(server.estimate.value, expected.value)
    assert server.estimate.cost == expected.cost
    assert server.estimate.cost.peer_rounds >= 4   # dealing, sharing, circuit, noise
    np.testing.assert_equal([p.release["value"] for p in parties], [expected.value] * 4)


def test_unseeded_networked_umpc_computes_its_design_exactly(certs):
    # Without a seed every coin (public coin, shares, dealt material) comes from the OS;
    # with epsilon = inf the release is the exact statistic of the design drawn.
    kernel, data = _data("kendall", 15, 8)

    def make() -> Protocol:
        return registry.make("umpc", kernel, epsilon=math.inf, comparison="circuit",
                             bounds=(0.0, 1.0), precision=1 / 8, noise=DeploymentNoise())

    server, parties = run_deployment(certs, make, np.array_split(data, 3), rng=None)
    assert not isinstance(server, Exception), server
    est = server.estimate
    design = make().draw_design(15, np.asarray(est.diagnostics["public_coin"],
                                               dtype=np.uint64))
    assert est.diagnostics["u_statistic"] == pytest.approx(
        incomplete_ustatistic(kernel, data, design.tuples), rel=1e-15, abs=1e-15)
    assert [p.release["value"] for p in parties] == [est.value] * 3


def test_networked_deployment_noise_releases_a_deployment_grade_value(certs):
    kernel, data = _data("gini", 12, 9)

    def make() -> Protocol:
        return registry.make("umpc", kernel, epsilon=1.0, comparison="fss",
                             noise=DeploymentNoise())

    server, parties = run_deployment(certs, make, np.array_split(data, 2), rng=None)
    assert not isinstance(server, Exception), server
    assert server.estimate.noise == "deployment"
    assert np.isfinite(server.estimate.value)
    assert all(p.release["noise"] == "deployment" for p in parties)
