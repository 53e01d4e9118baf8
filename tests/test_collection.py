"""Collection windows: one-record devices report once to an asyncio server (mutual TLS).

In-process tests run the server in a thread and the devices on one event loop (each with
its own certificate and TLS connection); the process tests start ``fedustat collect`` and
``fedustat report`` as OS processes, stop them by process group and use a free port.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")

from fedustat.protocols import registry
from fedustat.runtime.network import (
    NetworkRunError,
    Window,
    collect,
    create_deployment,
    load_credentials,
    report,
    report_async,
)
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, gini_kernel

SEED = 5
DEVICES = 24
# Generous hang guards, never a pass/fail deadline: the windows below close at a quorum.
WINDOW = 120.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return create_deployment(tmp_path_factory.mktemp("devices"), 500)


def _records(n: int, integer: bool = False) -> np.ndarray:
    rng = np.random.default_rng(3)
    scores = rng.integers(0, 16, n).astype(float) if integer else rng.random(n)
    return np.column_stack([scores, np.arange(n) % 2])


class CollectionServer:
    """A collection server in a thread; ``address`` once it listens, ``run`` when done."""

    def __init__(self, protocol: Any, certs: Path, window: Window, rng: Any = SEED,
                 **options: Any) -> None:
        self.ready = threading.Event()
        self.port: int | None = None
        self.outcome: Any = None
        if options.get("durable", True) and "run_dir" not in options:
            # Every window keeps a run directory: a fresh one per server here.
            self.scratch = tempfile.TemporaryDirectory(prefix="fedustat-window-")
            options["run_dir"] = Path(self.scratch.name) / "run"

        def serve() -> None:
            try:
                self.outcome = collect(protocol, load_credentials(certs, "server"), window,
                                       rng=rng, on_ready=self._listening, **options)
            except Exception as exc:  # the test inspects it
                self.outcome = exc
            finally:
                self.ready.set()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert self.ready.wait(60), "the collection server did not start"

    def _listening(self, port: int) -> None:
        self.port = port
        self.ready.set()

    @property
    def address(self) -> str:
        return f"localhost:{self.port}"

    def result(self) -> Any:
        self.thread.join(timeout=WINDOW + 60)
        assert not self.thread.is_alive(), "the collection server did not stop"
        return self.outcome


def _devices(make: Any, rows: np.ndarray, certs: Path, address: str, first: int = 0,
             rng: Any = SEED) -> list[Any]:
    """Devices ``first ..`` report ``rows`` (one each) at once; every one must succeed."""
    async def every() -> list[Any]:
        return await asyncio.gather(*(
            report_async(make(), rows[i:i + 1], load_credentials(certs, f"party-{first + i}"),
                         address, rng=rng, timeout=60.0)
            for i in range(rows.shape[0])), return_exceptions=True)
    sent = asyncio.run(every())
    failed = [s for s in sent if isinstance(s, Exception)]
    assert not failed, failed[:3]
    return sent


def ldp_quantized() -> Any:
    """The windows' default protocol: ldp-quantized AUC with its bins fixed (k = 8)."""
    return registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8, bounds=(0.0, 1.0))


GINI = gini_kernel((0.0, 1.0))
ONE_SHOT = [
    ("ldp-quantized", auc_kernel(), {"k": 8, "bounds": (0.0, 1.0)}, False),
    ("ldp-quantized", GINI, {"k": 8}, False),
    ("ldp-tree", auc_kernel(), {"d": 16}, True),
    ("ldp-ghazi", GINI, {"k": 8}, False),
    ("central-laplace", auc_kernel(), {}, False),
]


@pytest.mark.parametrize(("name", "kernel", "params", "integer"), ONE_SHOT,
                         ids=[f"{c[0]}-{c[1].name}" for c in ONE_SHOT])
def test_one_record_devices_release_the_simulators_number(certs, name, kernel, params,
                                                          integer):
    rows = _records(DEVICES, integer)
    if kernel is GINI:
        rows = rows[:, :1]

    def make() -> Any:
        return registry.make(name, kernel, epsilon=1.0, **params)

    server = CollectionServer(make(), certs, Window(WINDOW, quorum=DEVICES, linger=0.0))
    _devices(make, rows, certs, server.address)
    run = server.result()
    assert not isinstance(run, Exception), run
    expected = simulate(make(), rows, rng=SEED, batch_size=[1] * DEVICES)
    np.testing.assert_equal(run.estimate.value, expected.value)
    np.testing.assert_equal(run.estimate.std_error, expected.std_error)
    assert run.n_reports == DEVICES and run.closed_by == "quorum"
    collection = run.estimate.diagnostics["collection"]
    assert collection["n_reports"] == DEVICES and collection["closed_by"] == "quorum"
    assert run.estimate.noise == "simulation"  # a seed was asked for


def test_five_hundred_async_devices_equal_the_simulator(certs):
    n = 500

    make = ldp_quantized

    rows = _records(n)
    server = CollectionServer(make(), certs, Window(WINDOW, quorum=n, linger=0.0))
    sent = _devices(make, rows, certs, server.address)
    run = server.result()
    expected = simulate(make(), rows, rng=SEED, batch_size=[1] * n)
    np.testing.assert_equal(run.estimate.value, expected.value)
    assert run.n_reports == n and run.refused == {}
    # The histogram protocol's server keeps its running sum, not the reports.
    assert run.wire_bytes == sum(s.wire_bytes for s in sent)


def test_the_window_closes_at_its_deadline_and_names_the_late_devices(certs):
    make = ldp_quantized

    rows = _records(8)
    # No quorum: the deadline closes it. The on-time devices report as soon as it listens.
    server = CollectionServer(make(), certs, Window(6.0, linger=15.0))
    _devices(make, rows[:5], certs, server.address)

    async def late() -> list[Any]:
        import grpc

        async with grpc.aio.secure_channel(
                server.address, grpc.ssl_channel_credentials(
                    *(lambda c: (c.ca, c.key, c.certificate))(
                        load_credentials(certs, "party-5")))) as channel:
            while True:  # wait until the server says the window has closed
                terms = json.loads(await channel.unary_unary("/fedustat.Collect/Open")(
                    b"", timeout=60.0, wait_for_ready=True))
                if terms["closes_in"] == 0.0:
                    break
                await asyncio.sleep(0.2)
        return await asyncio.gather(*(
            report_async(make(), rows[i:i + 1], load_credentials(certs, f"party-{i}"),
                         server.address, rng=SEED, timeout=60.0) for i in (5, 6, 7)),
            return_exceptions=True)

    refused = asyncio.run(late())
    run = server.result()
    assert all(isinstance(r, NetworkRunError) and "collection window closed (deadline)"
               in str(r) for r in refused), refused
    assert run.closed_by == "deadline" and run.n_reports == 5
    assert sorted(run.late) == ["party-5", "party-6", "party-7"]
    assert run.refused == {"late": 3}
    assert run.estimate.diagnostics["collection"]["n_parties"] == 5


def test_an_identity_that_reports_twice_is_refused(certs):
    def make() -> Any:
        return registry.make("ldp-tree", auc_kernel(), epsilon=1.0, d=16)

    rows = _records(4, integer=True)
    server = CollectionServer(make(), certs, Window(WINDOW, quorum=4, linger=0.0))
    credentials = load_credentials(certs, "party-0")
    report(make(), rows[:1], credentials, server.address, rng=SEED)
    with pytest.raises(NetworkRunError, match="party-0 has already reported in this run"):
        report(make(), rows[1:2], credentials, server.address, rng=SEED)
    _devices(make, rows[1:], certs, server.address, first=1)
    run = server.result()
    assert run.n_reports == 4 and run.refused == {"duplicate": 1}


def test_a_device_with_another_configuration_is_refused_naming_the_options(certs):
    # The run id comes from the configuration, so a device reports in one call; one
    # configured otherwise is refused and then told which options differ.
    server = CollectionServer(ldp_quantized(),
                              certs, Window(WINDOW, quorum=2, linger=0.0))
    other = registry.make("ldp-quantized", auc_kernel(), epsilon=2.0, k=8, bounds=(0.0, 1.0))
    with pytest.raises(NetworkRunError, match=r"^party-0: the collection runs another "
                                              r"configuration \(epsilon = 2.0 \(party\) vs "
                                              r"1.0 \(server\)\); the server refused its "
                                              r"report$"):
        report(other, _records(1), load_credentials(certs, "party-0"), server.address,
               rng=SEED)
    _devices(ldp_quantized, _records(2), certs, server.address, first=1)
    run = server.result()
    assert run.n_reports == 2 and run.refused == {"configuration": 1}


def test_a_forged_frame_is_refused_naming_the_field(certs):
    import grpc

    server = CollectionServer(ldp_quantized(),
                              certs, Window(WINDOW, quorum=2, linger=0.0))
    credentials = load_credentials(certs, "party-0")
    tls = grpc.ssl_channel_credentials(credentials.ca, credentials.key,
                                       credentials.certificate)
    with grpc.secure_channel(server.address, tls) as channel, \
            pytest.raises(grpc.RpcError) as refused:
        channel.unary_unary("/fedustat.Collect/Report")(b"FDSTgarbage", timeout=60,
                                                        wait_for_ready=True)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert refused.value.details().startswith("party-0: its report was refused: message from "
                                              "party 'party-0': ")
    _devices(ldp_quantized, _records(2), certs, server.address, first=1)
    assert server.result().refused == {"invalid": 1}


@pytest.mark.parametrize(("name", "params", "labels", "why"), [
    ("ldp-quantized", {"k": 8, "bounds": (0.0, 1.0)}, [1.0],
     "at least two parties must report"),
    ("ldp-quantized", {"k": 8, "bounds": (0.0, 1.0)}, [0.0, 0.0, 0.0],
     "no positive example among the parties; the AUC needs both classes"),
    ("ldp-tree", {"d": 16}, [1.0, 1.0], "no negative party reported; the AUC needs both "
                                       "classes"),
])
def test_a_whole_run_check_refuses_the_release_naming_no_device(certs, name, params, labels,
                                                                why):
    # Whole-run checks (n >= the kernel's degree, both classes) are made on the public
    # counts at the close: each device alone (one record, one class) is a valid party.
    def make() -> Any:
        return registry.make(name, auc_kernel(), epsilon=1.0, **params)

    # Integer scores in [0, 1]: inside both protocols' public domains.
    rows = np.column_stack([np.arange(len(labels)) % 2, labels]).astype(float)
    server = CollectionServer(make(), certs, Window(WINDOW, quorum=len(labels), linger=0.0))
    _devices(make, rows, certs, server.address)
    run = server.result()
    assert isinstance(run, NetworkRunError)
    assert str(run) == f"the server step refused the reports: {why}; no release"


def test_a_record_outside_the_bounds_stays_on_the_device(certs):
    make = ldp_quantized
    server = CollectionServer(make(), certs, Window(WINDOW, quorum=2, linger=0.0))
    with pytest.raises(NetworkRunError, match=r"party-0: its records failed validation"):
        report(make(), np.array([[7.5, 1.0]]), load_credentials(certs, "party-0"),
               server.address, rng=SEED)
    _devices(make, _records(2), certs, server.address, first=1)
    run = server.result()
    assert run.n_reports == 2 and run.refused == {}


@pytest.mark.parametrize(("name", "params", "why"), [
    ("fedauc-rr", {"n_clients": 3}, "runs in rounds"),
    ("ldp-quantized", {"bounds": (0.0, 1.0)}, "give k= (or the planned n_parties=)"),
])
def test_a_protocol_that_needs_rounds_cannot_collect(certs, name, params, why):
    protocol = registry.make(name, auc_kernel(), epsilon=1.0, **params)
    with pytest.raises(ValueError, match=re.escape(why)):
        collect(protocol, load_credentials(certs, "server"), Window(1.0))
    with pytest.raises(ValueError, match=re.escape(why)):
        report(protocol, _records(1), load_credentials(certs, "party-0"), "localhost:1")


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"seconds": 0}, "seconds must be a positive number"),
    ({"seconds": 5, "quorum": 0}, "quorum must be a positive integer"),
    ({"seconds": 5, "linger": -1}, "linger must be 0 to 3600 seconds"),
])
def test_a_bad_window_is_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Window(**kwargs)


def test_an_unseeded_window_draws_deployment_noise(certs):
    make = ldp_quantized
    server = CollectionServer(make(), certs, Window(WINDOW, quorum=4, linger=0.0), rng=None)
    _devices(make, _records(4), certs, server.address, rng=None)
    assert server.result().estimate.noise == "deployment"


# ------------------------------------------------------------------ OS processes (the CLI)
def test_one_record_devices_as_processes_equal_the_simulator(tmp_path, certs):
    from test_network_processes import Processes

    n = 6
    rows = _records(n)
    options = ["--statistic", "auc", "--protocol", "ldp-quantized", "--epsilon", "1",
               "--param", "k=8", "--bounds", "0,1", "--certs", str(certs), "--seed",
               str(SEED)]
    group = Processes()
    try:
        server = group.start("collect", *options, "--window", str(WINDOW), "--quorum",
                             str(n), "--linger", "0", "--listen", "127.0.0.1:0",
                             "--run-dir", str(tmp_path / "run"),
                             "--output", str(tmp_path / "release.json"))
        line = server.stdout.readline()
        match = re.search(r"listening on port (\d+)", line)
        assert match, f"the server did not start: {line!r}"
        devices = []
        for i in range(n):
            path = tmp_path / f"device-{i}.csv"
            np.savetxt(path, rows[i:i + 1], delimiter=",", header="score,label",
                       comments="")
            devices.append(group.start("report", *options, "--server",
                                       f"127.0.0.1:{match.group(1)}", "--identity",
                                       f"party-{i}", "--file", str(path), "--columns",
                                       "score,label"))
        for device in devices:
            out, err = device.communicate(timeout=120)
            assert device.returncode == 0, err
            assert json.loads(out)["wire_bytes"] > 0
        _, err = server.communicate(timeout=120)
        assert server.returncode == 0, err
    finally:
        group.stop_all()
    release = json.loads((tmp_path / "release.json").read_text())
    expected = simulate(ldp_quantized(), rows, rng=SEED, batch_size=[1] * n)
    assert release["raw_value"] == expected.raw_value
    assert release["n_reports"] == n and release["closed_by"] == "quorum"
    assert release["run_directory"] == str(tmp_path / "run") and not release["read_back"]
