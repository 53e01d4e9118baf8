"""Durable collection windows: nothing accepted is lost, nothing is counted twice.

The kill test runs ``fedustat collect`` as an OS process on a free port, SIGKILLs it by
process id at seeded random points of a seeded window and restarts it on the same run
directory and port, while a few hundred async devices (each its own certificate and TLS
connection) keep resending their one frame; the release must equal the simulator's (the
uninterrupted window's number, ``test_collection.py``). The other tests run the server
in a thread of this process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
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
from fedustat.runtime.network.collect import REPORT, _prepared
from fedustat.runtime.report_store import DATABASE, StoreError
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel
from test_collection import CollectionServer

SEED = 13
DEVICES = 240
KILLS = 10
WINDOW = 600.0  # a hang guard: every window here closes at its quorum
HANG_GUARD = 240.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return create_deployment(tmp_path_factory.mktemp("durable-devices"), DEVICES)


def make() -> Any:
    return registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8, bounds=(0.0, 1.0))


def _records(n: int) -> np.ndarray:
    rng = np.random.default_rng(8)
    return np.column_stack([rng.random(n), np.arange(n) % 2])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _committed(database: Path) -> int:
    """Reports the server process has committed (read-only; 0 before the table exists)."""
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as reader:
            return int(reader.execute("SELECT COUNT(*) FROM reports").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_a_server_killed_at_ten_random_points_releases_the_uninterrupted_number(tmp_path,
                                                                                certs):
    rows = _records(DEVICES)
    port = _free_port()
    run_dir = tmp_path / "run"
    output = tmp_path / "release.json"
    command = [sys.executable, "-m", "fedustat.cli", "collect", "--statistic", "auc",
               "--protocol", "ldp-quantized", "--epsilon", "1", "--param", "k=8",
               "--bounds", "0,1", "--certs", str(certs), "--seed", str(SEED), "--window",
               str(WINDOW), "--quorum", str(DEVICES), "--linger", "0", "--listen",
               f"127.0.0.1:{port}", "--run-dir", str(run_dir), "--output", str(output)]
    plan = np.random.default_rng(SEED)
    # Kill points: after a seeded number of committed reports (1 .. DEVICES: the last
    # ones fall between the quorum and the stored release), plus a seeded delay.
    thresholds = np.sort(plan.choice(np.arange(1, DEVICES + 1), KILLS, replace=False))
    delays = plan.uniform(0.0, 0.05, KILLS)
    sent: list[Any] = []

    async def every() -> list[Any]:
        gate = asyncio.Semaphore(40)

        async def device(i: int) -> Any:
            async with gate:
                return await report_async(make(), rows[i:i + 1],
                                          load_credentials(certs, f"party-{i}"),
                                          f"127.0.0.1:{port}", rng=SEED, timeout=HANG_GUARD)
        return await asyncio.gather(*(device(i) for i in range(DEVICES)),
                                    return_exceptions=True)

    devices = threading.Thread(target=lambda: sent.extend(asyncio.run(every())), daemon=True)
    servers: list[subprocess.Popen] = []
    logs = tmp_path / "server.log"
    killed_at: list[int] = []

    def start() -> subprocess.Popen:
        with open(logs, "a") as log:
            proc = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)
        servers.append(proc)
        return proc

    try:
        server = start()
        devices.start()
        for threshold, delay in zip(thresholds, delays, strict=True):
            guard = time.monotonic() + HANG_GUARD
            while (server.poll() is None and _committed(run_dir / DATABASE) < threshold
                   and time.monotonic() < guard):
                time.sleep(0.005)
            time.sleep(delay)
            if server.poll() is None:
                killed_at.append(_committed(run_dir / DATABASE))
                os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
            server = start()  # the same run directory, the same port
        server.wait(timeout=HANG_GUARD)
        devices.join(timeout=HANG_GUARD)
        assert server.returncode == 0, logs.read_text()[-3000:]
    finally:
        for proc in servers:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    failed = [s for s in sent if isinstance(s, Exception)]
    assert not failed and len(sent) == DEVICES, failed[:3]
    assert len(killed_at) >= KILLS // 2, killed_at  # most kills hit a live server

    release = json.loads(output.read_text())
    expected = simulate(make(), rows, rng=SEED, batch_size=[1] * DEVICES)
    assert release["raw_value"] == expected.raw_value
    assert release["std_error"] == expected.std_error
    assert release["n_reports"] == DEVICES and _committed(run_dir / DATABASE) == DEVICES
    # The run finished: one more start reads its release back, drawing nothing.
    again = subprocess.run(command, capture_output=True, text=True, timeout=HANG_GUARD)
    assert again.returncode == 0, again.stderr
    assert "its stored release is read back" in again.stdout
    assert json.loads(output.read_text()) | {"server_peak_rss_mib": 0, "read_back": True} \
        == release | {"server_peak_rss_mib": 0, "read_back": True}


def test_the_same_frame_resent_is_acknowledged_and_counted_once(certs):
    import grpc

    rows = _records(3)
    server = CollectionServer(make(), certs, Window(WINDOW, quorum=3, linger=0.0), rng=SEED)
    credentials = load_credentials(certs, "party-0")
    _, frame = _prepared(make().for_run(SEED), rows[:1], "party-0", SEED)
    _, other = _prepared(make().for_run(SEED), rows[1:2], "party-0", SEED)
    tls = grpc.ssl_channel_credentials(credentials.ca, credentials.key,
                                       credentials.certificate)
    with grpc.secure_channel(server.address, tls) as channel:
        call = channel.unary_unary(REPORT)
        assert call(frame, timeout=60, wait_for_ready=True) == b"A"
        assert call(frame, timeout=60) == b"A"  # its acknowledgement was lost: again
        with pytest.raises(grpc.RpcError) as refused:
            call(other, timeout=60)
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert refused.value.details() == "party-0 has already reported in this run"
    for i in (1, 2):
        report(make(), rows[i:i + 1], load_credentials(certs, f"party-{i}"),
               server.address, rng=SEED)
    run = server.result()
    assert run.n_reports == 3 and run.resent == 1 and run.refused == {"duplicate": 1}
    expected = simulate(make(), rows, rng=SEED, batch_size=[1] * 3)
    np.testing.assert_equal(run.estimate.value, expected.value)


def test_a_finished_run_directory_reads_back_its_release(tmp_path, certs):
    # Deployment noise: a release drawn again would differ; the stored one is returned.
    rows = _records(4)
    window = Window(WINDOW, quorum=4, linger=0.0)
    server = CollectionServer(make(), certs, window, rng=None, run_dir=tmp_path / "run")
    for i in range(4):
        report(make(), rows[i:i + 1], load_credentials(certs, f"party-{i}"),
               server.address)
    first = server.result()
    assert first.run_directory == tmp_path / "run" and not first.read_back
    listened: list[int] = []
    again = collect(make(), load_credentials(certs, "server"), window,
                    run_dir=tmp_path / "run", on_ready=listened.append)
    assert again.read_back and not listened  # nothing listened, nothing was drawn
    assert again.estimate == first.estimate and again.n_reports == 4
    with pytest.raises(StoreError, match=r"holds this run with other options \(quorum = 5 "
                                         r"\(given\) vs 4 \(run directory\)\)"):
        collect(make(), load_credentials(certs, "server"), Window(WINDOW, quorum=5),
                run_dir=tmp_path / "run")


def test_a_window_without_a_named_directory_makes_one(tmp_path, certs, monkeypatch):
    monkeypatch.setenv("FEDUSTAT_RUN_ROOT", str(tmp_path / "runs"))
    server = CollectionServer(make(), certs, Window(WINDOW, quorum=2, linger=0.0),
                              run_dir=None)
    for i in range(2):
        report(make(), _records(2)[i:i + 1], load_credentials(certs, f"party-{i}"),
               server.address, rng=SEED)
    run = server.result()
    assert run.run_directory.parent == tmp_path / "runs"
    assert (run.run_directory / DATABASE).is_file()


def test_without_durability_nothing_is_kept(certs):
    rows = _records(4)
    server = CollectionServer(make(), certs, Window(WINDOW, quorum=4, linger=0.0),
                              durable=False)
    for i in range(4):
        report(make(), rows[i:i + 1], load_credentials(certs, f"party-{i}"),
               server.address, rng=SEED)
    run = server.result()
    assert run.run_directory is None and run.n_reports == 4
    expected = simulate(make(), rows, rng=SEED, batch_size=[1] * 4)
    np.testing.assert_equal(run.estimate.value, expected.value)


def test_a_device_gives_up_at_its_own_deadline_naming_it(certs):
    # Nothing listens: the device resends with backoff, then says so within its deadline.
    address = f"127.0.0.1:{_free_port()}"
    with pytest.raises(NetworkRunError, match=rf"^party-0: the collection server {address} "
                                              r"did not acknowledge the report within 1.5 s "
                                              r"\(last: .+\); the same report may be sent "
                                              r"again, it is counted once$"):
        report(make(), _records(1), load_credentials(certs, "party-0"), address,
               rng=SEED, timeout=1.5)


def test_a_second_server_on_a_run_directory_in_use_is_refused(tmp_path, certs):
    window = Window(WINDOW, quorum=2, linger=0.0)
    server = CollectionServer(make(), certs, window, rng=SEED, run_dir=tmp_path / "run")
    with pytest.raises(StoreError, match=r"^run directory '.+' is in use by another server; "
                                         r"one server per run directory$"):
        collect(make(), load_credentials(certs, "server"), window, rng=SEED,
                run_dir=tmp_path / "run")
    for i in range(2):
        report(make(), _records(2)[i:i + 1], load_credentials(certs, f"party-{i}"),
               server.address, rng=SEED)
    assert server.result().n_reports == 2


def test_a_second_server_on_a_port_in_use_fails_to_listen(tmp_path, certs):
    # Servers bind without SO_REUSEPORT: a stale server and its restart never split the
    # devices' connections between them.
    window = Window(WINDOW, quorum=2, linger=0.0)
    server = CollectionServer(make(), certs, window, rng=SEED, run_dir=tmp_path / "first")
    with pytest.raises(OSError, match=rf"^cannot listen on 127\.0\.0\.1:{server.port}: "
                                      r"give a HOST:PORT of this machine whose port no "
                                      r"other process holds"):
        collect(make(), load_credentials(certs, "server"), window, rng=SEED,
                run_dir=tmp_path / "second", address=f"127.0.0.1:{server.port}")
    for i in range(2):
        report(make(), _records(2)[i:i + 1], load_credentials(certs, f"party-{i}"),
               server.address, rng=SEED)
    run = server.result()
    assert not isinstance(run, Exception), run
    assert run.n_reports == 2


def test_a_restarted_device_resends_its_kept_report(tmp_path, certs):
    # Deployment randomness: a second randomization would make another frame (refused as
    # a second report); the kept one is the same frame, acknowledged and counted once.
    rows = _records(2)
    kept = tmp_path / "party-0.report"
    server = CollectionServer(make(), certs, Window(WINDOW, quorum=2, linger=0.0),
                              rng=None)
    first = report(make(), rows[:1], load_credentials(certs, "party-0"), server.address,
                   keep=kept)
    assert kept.stat().st_mode & 0o777 == 0o600
    again = report(make(), rows[:1], load_credentials(certs, "party-0"), server.address,
                   keep=kept)
    assert again == first
    # Another frame (its label differs: the frames must differ, whatever was drawn).
    with pytest.raises(NetworkRunError, match="party-0 has already reported in this run"):
        report(make(), rows[1:], load_credentials(certs, "party-0"), server.address)
    other = registry.make("ldp-quantized", auc_kernel(), epsilon=2.0, k=8, bounds=(0.0, 1.0))
    with pytest.raises(NetworkRunError, match=r"^party-0: the kept report '.+' is not this "
                                              r"device's report for this configuration"):
        report(other, rows[:1], load_credentials(certs, "party-0"), server.address,
               keep=kept)
    report(make(), rows[1:], load_credentials(certs, "party-1"), server.address)
    run = server.result()
    assert run.n_reports == 2 and run.resent == 1 and run.refused == {"duplicate": 1}
