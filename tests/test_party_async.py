"""Many one-record devices on one event loop (``run_party_async``) against a lockstep server.

Each device is its own identity (its own certificate and TLS channel over loopback); all of
them run in one asyncio loop of this process, the server (``serve``) in a thread. With a
seed the release is the simulator's for one record per silo, and the faults are named as
for ``run_party`` (tests/test_network.py): the party's logic is the same generator, driven
by another link.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")

from fedustat.protocols import registry
from fedustat.protocols.base import Protocol
from fedustat.runtime.network import (
    NetworkRunError,
    create_deployment,
    load_credentials,
    run_party_async,
    serve,
)
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, gini_kernel

SEED = 11
DEVICES = 16
GINI = gini_kernel((0.0, 1.0))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return create_deployment(tmp_path_factory.mktemp("certs"), DEVICES)


def labelled(n: int, seed: int = 3) -> np.ndarray:
    """Scores on a 0.01 grid (ties) and labels; both classes present in the run."""
    rng = np.random.default_rng(seed)
    data = np.column_stack([np.round(rng.random(n), 2), (rng.random(n) < 0.4).astype(float)])
    data[:2, 1] = [0.0, 1.0]
    return data


def run_devices(certs: Any, make: Callable[[], Protocol], rows: list[np.ndarray], *,
                rng: Any = SEED, timeout: float = 20.0,
                device_make: Callable[[int], Protocol] | None = None,
                identities: list[int] | None = None,
                hold: float | None = None) -> tuple[Any, list[Any]]:
    """The server in a thread, every device a task of one event loop of this thread;
    (server result or exception, device results or exceptions)."""
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            outcome["server"] = serve(make(), len(rows), load_credentials(certs, "server"),
                                      rng=rng, timeout=timeout,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:  # the test inspects it
            outcome["server"] = exc
            ready.set()

    names = list(range(len(rows))) if identities is None else identities

    async def devices() -> list[Any]:
        return await asyncio.gather(*(
            run_party_async(make() if device_make is None else device_make(i), rows[i],
                            load_credentials(certs, f"party-{names[i]}"),
                            f"127.0.0.1:{port['p']}", rng=rng, timeout=timeout, hold=hold)
            for i in range(len(rows))), return_exceptions=True)

    thread = threading.Thread(target=server)
    thread.start()
    try:
        assert ready.wait(30)
        results = asyncio.run(asyncio.wait_for(devices(), 6 * timeout))  # a hang guard
    finally:
        thread.join(4 * timeout)
    assert not thread.is_alive(), "the server must never hang"
    return outcome["server"], results


def one_record_each(data: np.ndarray) -> list[np.ndarray]:
    return [data[i:i + 1] for i in range(len(data))]


def test_one_record_fedauc_devices_release_the_simulators_number(certs):
    # Every device holds one (score, label) row, so each holds one class only: FedAUC's
    # client is the device.
    data = labelled(DEVICES)

    def make() -> Protocol:
        return registry.make("fedauc-rr", auc_kernel(), epsilon=4.0, n_clients=DEVICES)

    server, devices = run_devices(certs, make, one_record_each(data))
    assert not isinstance(server, Exception), server
    assert not any(isinstance(d, Exception) for d in devices), devices
    expected = simulate(make(), data, rng=SEED, parties=np.arange(DEVICES),
                        batch_size=[1] * DEVICES)
    assert 0.0 < expected.value < 1.0  # a number, not a clipped bound
    np.testing.assert_equal(server.estimate.value, expected.value)
    assert server.estimate.cost == expected.cost
    assert [d.release["value"] for d in devices] == [expected.value] * DEVICES
    assert [d.party_ids for d in devices] == [(i, i + 1) for i in range(DEVICES)]


@pytest.mark.parametrize("name", ["fedauc-rr", "umpc"])
def test_detached_devices_come_back_for_their_answers(certs, monkeypatch, name):
    # A detached device holds no connection while the others catch up: with a hold of
    # 0 s every join and round is answered "not yet", and each device fetches its answer
    # on a new connection; no presence call is made. The release is the simulator's.
    from fedustat.runtime.network import server as server_module

    calls = {"fetch": 0, "presence": 0}
    fetch, presence = server_module._Coordinator.fetch, server_module._Coordinator.presence

    async def counted_fetch(self, request, context):
        calls["fetch"] += 1
        return await fetch(self, request, context)

    async def counted_presence(self, request, context):
        calls["presence"] += 1
        return await presence(self, request, context)

    monkeypatch.setattr(server_module._Coordinator, "fetch", counted_fetch)
    monkeypatch.setattr(server_module._Coordinator, "presence", counted_presence)
    n = 8
    data = labelled(n) if name == "fedauc-rr" else labelled(n)[:, :1]

    def make() -> Protocol:
        if name == "fedauc-rr":
            return registry.make(name, auc_kernel(), epsilon=4.0, n_clients=n)
        return registry.make(name, GINI, epsilon=8.0)

    server, devices = run_devices(certs, make, one_record_each(data), hold=0.0)
    assert not isinstance(server, Exception), server
    assert not any(isinstance(d, Exception) for d in devices), devices
    options = {"parties": np.arange(n)} if name == "fedauc-rr" else {}
    expected = simulate(make(), data, rng=SEED, batch_size=[1] * n, **options)
    np.testing.assert_equal(server.estimate.value, expected.value)
    assert [d.release["value"] for d in devices] == [expected.value] * n
    assert calls["presence"] == 0
    assert calls["fetch"] >= n  # at least each device's assignment was fetched


def test_a_hold_outside_the_servers_range_is_refused(certs):
    with pytest.raises(ValueError, match="hold must be between 0 and 60 seconds"):
        asyncio.run(run_party_async(registry.make("fedauc-rr", auc_kernel(), epsilon=1.0),
                                    labelled(2), load_credentials(certs, "party-0"),
                                    "127.0.0.1:1", hold=-1.0))


@pytest.mark.parametrize(("name", "kernel", "params", "columns"), [
    ("umpc", GINI, {}, 1),
    ("pairs-2pc", auc_kernel(), {"P": 2}, 2),
], ids=["umpc-gini", "pairs-2pc-auc"])
def test_one_record_devices_of_a_relay_protocol_release_the_simulators_number(
        certs, name, kernel, params, columns):
    # Relay rounds: each device seals its rows for their destination devices and opens
    # what the others sealed for it, every identity on the same event loop.
    data = labelled(12)[:, :columns]

    def make() -> Protocol:
        return registry.make(name, kernel, epsilon=8.0, **params)

    server, devices = run_devices(certs, make, one_record_each(data))
    assert not isinstance(server, Exception), server
    assert not any(isinstance(d, Exception) for d in devices), devices
    expected = simulate(make(), data, rng=SEED, batch_size=[1] * len(data))
    assert 0.0 < expected.value < 1.0
    np.testing.assert_equal(server.estimate.value, expected.value)
    assert server.estimate.cost == expected.cost
    assert server.estimate.cost.peer_rounds >= 1
    assert [d.release["value"] for d in devices] == [expected.value] * len(data)


def test_a_device_with_another_configuration_is_refused_naming_the_option(certs):
    data = labelled(4)

    def make() -> Protocol:
        return registry.make("central-laplace", auc_kernel(), epsilon=1.0)

    server, devices = run_devices(
        certs, make, one_record_each(data), timeout=2.0,
        device_make=lambda i: registry.make("central-laplace", auc_kernel(),
                                            epsilon=5.0 if i == 1 else 1.0))
    refusal = ("party-1's protocol configuration differs from the server's: "
               "epsilon = 5.0 (party-1) vs 1.0 (server)")
    assert isinstance(devices[1], NetworkRunError)
    assert str(devices[1]) == f"party-1 could not join: {refusal}"
    assert isinstance(server, NetworkRunError)
    assert f"joining: no answer within 2 s from party-1 (refused: {refusal})" in str(server)


def test_a_device_whose_record_fails_its_check_tells_only_the_check(certs):
    data = labelled(6)[:, :1]
    data[2, 0] = 1000.0

    def make() -> Protocol:
        return registry.make("ldp-quantized", GINI, epsilon=1.0, k=8)

    server, devices = run_devices(certs, make, one_record_each(data), timeout=30.0)
    # party-2 sees its own error in full; the server and the other devices learn only
    # which public check failed, at once (not after the 30 s stage timeout).
    assert isinstance(devices[2], NetworkRunError) and "max 1000" in str(devices[2])
    told = ("round 0: party-2 failed validation: values outside the declared bounds of "
            "column 'x'; no release")
    assert isinstance(server, NetworkRunError) and str(server) == told
    for i in (0, 1, 3, 4, 5):
        assert isinstance(devices[i], NetworkRunError) and told in str(devices[i])
        assert "1000" not in str(devices[i])


class _PowerOff(BaseException):
    """A device that vanishes mid-step (not an error its step reports: no Abort is sent)."""


def test_a_device_that_disconnects_is_named_at_once(certs):
    # party-3 joins, then its connection closes in its round-0 step without a word (as
    # a device losing power): the server learns it from the closed presence call at once,
    # not after the 60 s stage timeout, names it, and the other devices are told why.
    data = labelled(5)

    def make() -> Protocol:
        return registry.make("fedauc-rr", auc_kernel(), epsilon=1.0, n_clients=5)

    def device_make(i: int) -> Protocol:
        protocol = make()
        if i == 3:
            def vanish(state: Any, inbox: Any, rng: Any) -> Any:
                raise _PowerOff

            protocol.party_step = vanish  # on the instance: the configuration is the same
        return protocol

    server, devices = run_devices(certs, make, one_record_each(data), timeout=60.0,
                                  device_make=device_make)
    reason = ("round 0: the connection of party-3 dropped (its process ended or its "
              "network failed); no release")
    assert isinstance(server, NetworkRunError) and str(server) == reason
    assert isinstance(devices[3], _PowerOff)
    for i in (0, 1, 2, 4):
        assert isinstance(devices[i], NetworkRunError) and reason in str(devices[i])


def test_an_unreachable_server_and_a_foreign_certificate_are_named(certs, tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{probe.getsockname()[1]}"
    protocol = registry.make("central-laplace", auc_kernel(), epsilon=1.0)
    with pytest.raises(NetworkRunError, match=rf"party-0: could not reach the server at "
                       rf"{address} within 1\.625 s \(Connection refused\)"):
        asyncio.run(run_party_async(protocol, labelled(2), load_credentials(certs, "party-0"),
                                    address, rng=1, timeout=0.5))
    # A device of another deployment (another CA) is told that the handshake failed, and
    # why, at once: the server's certificate is not signed by its CA.
    other = load_credentials(create_deployment(tmp_path / "other", 1), "party-0")
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            serve(protocol, 1, load_credentials(certs, "server"), rng=1, timeout=2.0,
                  on_ready=lambda p: (port.update(p=p), ready.set()))
        except NetworkRunError as exc:
            outcome["server"] = exc

    thread = threading.Thread(target=server)
    thread.start()
    try:
        assert ready.wait(10)
        with pytest.raises(NetworkRunError, match="party-0: the TLS handshake with the "
                           r"server at 127\.0\.0\.1:\d+ failed: the server's certificate is "
                           "not signed by this party's CA"):
            asyncio.run(run_party_async(protocol, labelled(2), other,
                                        f"127.0.0.1:{port['p']}", rng=1, timeout=1.5))
    finally:
        thread.join(20)
    assert "joining: no answer within 2 s from party-0" in str(outcome["server"])


def test_devices_of_one_process_check_each_certificate_once(certs, monkeypatch):
    # The directory of the parties' certificates is the same bytes for every device of a
    # run: each certificate is checked against the CA once per process, when a device
    # first needs its key, not once per device (n^2 checks).
    from fedustat.runtime.network import e2e, party

    checks: list[int] = []
    check = e2e.PartyDirectory._check
    monkeypatch.setattr(party, "_CHECKED_DIRECTORIES", {})
    monkeypatch.setattr(e2e.PartyDirectory, "_check",
                        lambda self, index: checks.append(index) or check(self, index))
    data = labelled(8)[:, :1]

    def make() -> Protocol:
        return registry.make("umpc", GINI, epsilon=8.0)

    server, devices = run_devices(certs, make, one_record_each(data))
    assert not isinstance(server, Exception), server
    assert not any(isinstance(d, Exception) for d in devices), devices
    assert checks and sorted(checks) == sorted(set(checks))
