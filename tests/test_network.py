"""Networked runs over mutually authenticated gRPC: same numbers as the simulator, and faults.

The server and the parties run in threads of this process here (each with its own TLS
channel over loopback); tests/test_network_processes.py runs them as separate processes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")

from fedustat.privacy.noise import DeploymentNoise
from fedustat.protocols import registry
from fedustat.protocols.base import Message, Protocol, Role
from fedustat.runtime.network.certs import create_deployment, load_credentials
from fedustat.runtime.network.party import run_party
from fedustat.runtime.network.server import serve
from fedustat.runtime.network.service import NetworkRunError, fingerprint
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, gini_kernel

SEED = 5
TIMEOUT = 10.0


def labelled(n: int, seed: int = 0, integer: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 16, n).astype(float) if integer else rng.random(n)
    return np.column_stack([scores, (rng.random(n) < 0.4).astype(float)])


def run_deployment(certs: Any, make: Callable[[], Protocol], silos: list[np.ndarray], *,
                   rng: Any = SEED, n_silos: int | None = None,
                   party_make: Callable[[int], Protocol] | None = None,
                   timeout: float = TIMEOUT) -> tuple[Any, list[Any]]:
    """Server and parties in threads; (server result or exception, party results or exceptions)."""
    expected = len(silos) if n_silos is None else n_silos
    ready, port = threading.Event(), {}
    outcome: dict[str, Any] = {}

    def server() -> None:
        try:
            outcome["server"] = serve(make(), expected, load_credentials(certs, "server"),
                                      rng=rng, timeout=timeout,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:  # the test inspects it
            outcome["server"] = exc
            ready.set()

    parties: list[Any] = [None] * len(silos)

    def party(i: int) -> None:
        protocol = make() if party_make is None else party_make(i)
        try:
            parties[i] = run_party(protocol, silos[i], load_credentials(certs, f"party-{i}"),
                                   f"127.0.0.1:{port['p']}", rng=rng,
                                   timeout=3 * timeout)  # the server's deadlines come first
        except Exception as exc:
            parties[i] = exc

    server_thread = threading.Thread(target=server)
    server_thread.start()
    assert ready.wait(30)
    threads = [threading.Thread(target=party, args=(i,)) for i in range(len(silos))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(6 * timeout)
    server_thread.join(4 * timeout)
    assert not server_thread.is_alive(), "the server must never hang"
    return outcome["server"], parties


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return create_deployment(tmp_path_factory.mktemp("certs"), 4)


GINI = gini_kernel((0.0, 1.0))
STAR = [
    ("central-laplace", auc_kernel(), {}, False),
    ("ldp-quantized", auc_kernel(), {"k": 8, "bounds": (0.0, 1.0)}, False),
    ("ldp-quantized", GINI, {"k": 8}, False),
    ("ldp-tree", auc_kernel(), {"d": 16}, True),
    ("ldp-ghazi", GINI, {"k": 8}, False),
    ("ghazi-shuffle", GINI, {"k": 8}, False),
    ("fedauc-rr", auc_kernel(), {"n_clients": 3}, False),
    ("fedauc-laplace-local", auc_kernel(), {"n_clients": 3}, False),
    ("fedauc-gaussian", auc_kernel(), {"n_clients": 3, "delta": 1e-5}, False),
]


@pytest.mark.parametrize(("name", "kernel", "params", "integer"), STAR,
                         ids=[f"{s[0]}-{s[1].name}" for s in STAR])
def test_networked_release_equals_the_simulation(certs, name, kernel, params, integer):
    data = labelled(60, integer=integer)
    if kernel is GINI:
        data = data[:, :1]

    def make() -> Protocol:
        return registry.make(name, kernel, epsilon=1.0, **params)

    silos = np.array_split(data, 3)
    server, parties = run_deployment(certs, make, silos)
    assert not isinstance(server, Exception), server
    if make().silo_is_one_party:
        owner = np.repeat(np.arange(3), [len(s) for s in silos])
        expected = simulate(make(), data, rng=SEED, parties=owner, batch_size=[1, 1, 1])
    else:
        expected = simulate(make(), data, rng=SEED, batch_size=[len(s) for s in silos])
    np.testing.assert_equal(server.estimate.value, expected.value)
    assert server.estimate.cost == expected.cost
    np.testing.assert_equal([p.release["value"] for p in parties], [expected.value] * 3)


def test_a_party_with_another_configuration_is_refused(certs):
    data = np.array_split(labelled(30), 2)
    server, parties = run_deployment(
        certs, lambda: registry.make("central-laplace", auc_kernel(), epsilon=1.0), data,
        party_make=lambda i: registry.make("central-laplace", auc_kernel(),
                                           epsilon=1.0 if i == 0 else 5.0),
        timeout=2.0)
    assert isinstance(parties[1], NetworkRunError)
    assert "party-1 runs protocol configuration" in str(parties[1])
    assert isinstance(server, NetworkRunError)
    assert "joining: no answer within 2 s from party-1" in str(server)


def test_a_party_outside_the_run_is_refused_and_the_missing_one_named(certs):
    # Certificates exist for party-0..party-3; this run expects two parties, and
    # party-2 (a valid certificate of the deployment) tries to take the place of party-1.
    silos = np.array_split(labelled(30), 3)
    server, parties = run_deployment(
        certs, lambda: registry.make("central-laplace", auc_kernel(), epsilon=1.0), silos,
        n_silos=2, timeout=2.0)
    assert "party-2 is not one of this run's parties" in str(parties[2])
    assert server.parties == ["party-0", "party-1"]
    assert [p.release["value"] for p in parties[:2]] == [server.estimate.value] * 2


def test_a_certificate_from_another_deployment_cannot_connect(certs, tmp_path):
    other = create_deployment(tmp_path / "other", 1)
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            serve(registry.make("central-laplace", auc_kernel(), epsilon=1.0), 1,
                  load_credentials(certs, "server"), rng=1, timeout=2.0,
                  on_ready=lambda p: (port.update(p=p), ready.set()))
        except NetworkRunError as exc:
            outcome["server"] = exc

    thread = threading.Thread(target=server)
    thread.start()
    ready.wait(10)
    with pytest.raises(NetworkRunError, match="party-0 could not join"):
        run_party(registry.make("central-laplace", auc_kernel(), epsilon=1.0), labelled(10),
                  load_credentials(other, "party-0"), f"127.0.0.1:{port['p']}", rng=1,
                  timeout=1.5)
    thread.join(20)
    assert "joining: no answer within 2 s from party-0" in str(outcome["server"])


def test_a_silent_party_stops_the_run_with_its_name(certs):
    silos = np.array_split(labelled(30), 3)
    server, parties = run_deployment(
        certs, lambda: registry.make("central-laplace", auc_kernel(), epsilon=1.0),
        silos[:2], n_silos=3, timeout=1.5)
    assert isinstance(server, NetworkRunError)
    assert str(server) == "joining: no answer within 1.5 s from party-2; no release"
    assert all("party-2" in str(p) for p in parties), parties


def test_a_record_outside_the_bounds_is_refused_in_its_own_party(certs):
    silos = np.array_split(labelled(30)[:, :1], 2)
    silos[1][0, 0] = 1000.0

    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0, k=8)

    server, parties = run_deployment(certs, make, silos, timeout=1.5)
    assert isinstance(parties[1], ValueError) and "1000" in str(parties[1])
    assert isinstance(server, NetworkRunError)
    assert "round 0: no answer within 1.5 s from party-1" in str(server)


class SpeaksForOthers(Protocol):
    """A party step that claims a row of another party: the server must refuse it."""

    name = "forger"

    def __init__(self) -> None:
        self.inner = registry.make("central-laplace", auc_kernel(), epsilon=1.0)

    def encode_parties(self, records, parties):
        return self.inner.init_parties(records, parties)

    def init_server(self, n_parties):
        return self.inner.init_server(n_parties)

    def party_step(self, state, inbox, rng):
        state, message = self.inner.party_step(state, inbox, rng)
        forged = np.asarray(message.parties).copy()
        forged[0] = 0
        return state, Message(Role.PARTY, Role.SERVER, dict(message.fields),
                              dict(message.bits_per_value), forged)

    def server_step(self, state, inbox, rng):
        return self.inner.server_step(state, inbox, rng)


def test_a_forged_message_is_refused_naming_the_sender_and_field(certs):
    silos = np.array_split(labelled(30), 2)
    server, _parties = run_deployment(certs, SpeaksForOthers, silos, timeout=3.0)
    assert isinstance(server, NetworkRunError)
    assert "party 'party-1': parties: speaks for party 0" in str(server)
    assert "no release" in str(server)
    assert fingerprint(SpeaksForOthers()).startswith("forger:")


def test_deployment_randomness_is_the_default(certs):
    # Without a seed, a protocol holding simulation noise is refused before connecting ...
    with pytest.raises(ValueError, match=r"noise=fedustat\.privacy\.DeploymentNoise"):
        serve(registry.make("ldp-quantized", GINI, epsilon=1.0, k=8), 2,
              load_credentials(certs, "server"))
    with pytest.raises(ValueError, match="pass a seed to ask for simulation randomness"):
        run_party(registry.make("ldp-quantized", GINI, epsilon=1.0, k=8), labelled(5)[:, :1],
                  load_credentials(certs, "party-0"), "127.0.0.1:1")

    # ... and with deployment noise the run releases a deployment-grade value.
    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0, k=8, noise=DeploymentNoise())

    server, parties = run_deployment(certs, make, np.array_split(labelled(40)[:, :1], 2),
                                     rng=None)
    assert server.estimate.noise == "deployment"
    assert np.isfinite(server.estimate.value)
    assert [p.release["noise"] for p in parties] == ["deployment", "deployment"]
