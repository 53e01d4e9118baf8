"""Server and parties as separate OS processes, started from the command line.

Each test starts its own processes in their own sessions, stops them by process group in
a ``finally`` (even when the test fails), listens on a port the server picks itself, and
keeps every file under pytest's temporary directory.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")

from fedustat.protocols import registry
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel

FEDUSTAT = [sys.executable, "-m", "fedustat.cli"]
SILOS = 3


class Processes:
    """Processes of one test, each in its own session; all stopped by process group."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen] = []

    def start(self, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen([*FEDUSTAT, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.running.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.running:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


@pytest.fixture
def processes():
    group = Processes()
    try:
        yield group
    finally:
        group.stop_all()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> tuple[Path, list[Path], np.ndarray]:
    """Certificates and one CSV file per party (score,label)."""
    base = tmp_path_factory.mktemp("deployment")
    subprocess.run([*FEDUSTAT, "certs", "--out", str(base / "certs"), "--parties", str(SILOS)],
                   check=True, capture_output=True, timeout=60)
    rng = np.random.default_rng(11)
    data = np.column_stack([rng.random(90), (rng.random(90) < 0.4).astype(float)])
    files = []
    for i, rows in enumerate(np.array_split(data, SILOS)):
        path = base / f"party-{i}.csv"
        np.savetxt(path, rows, delimiter=",", header="score,label", comments="")
        files.append(path)
    return base / "certs", files, data


def start_server(processes: Processes, certs: Path, protocol_options: list[str],
                 parties: int = SILOS, timeout: float = 20.0) -> tuple[subprocess.Popen, str]:
    server = processes.start("serve", *protocol_options, "--certs", str(certs),
                             "--parties", str(parties), "--listen", "127.0.0.1:0",
                             "--timeout", str(timeout))
    line = server.stdout.readline()
    match = re.search(r"listening on port (\d+)", line)
    assert match, f"the server did not start: {line!r} {server.stderr.read()!r}"
    return server, f"127.0.0.1:{match.group(1)}"


def start_party(processes: Processes, certs: Path, address: str, index: int, path: Path,
                protocol_options: list[str]) -> subprocess.Popen:
    return processes.start("party", *protocol_options, "--certs", str(certs), "--server",
                           address, "--identity", f"party-{index}", "--file", str(path),
                           "--columns", "score,label", "--timeout", "60")


def finish(proc: subprocess.Popen, seconds: float = 90.0) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=seconds)
    return proc.returncode, out, err


def release_of(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{"):])


@pytest.mark.parametrize(("options", "make", "grouped"), [
    (["--protocol", "fedauc-rr", "--param", "n_clients=3"],
     lambda: registry.make("fedauc-rr", auc_kernel(), epsilon=1.0, n_clients=3), True),
    (["--protocol", "ldp-quantized", "--param", "k=8", "--column-bounds", "score=0,1"],
     lambda: registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8,
                           bounds={"score": (0.0, 1.0)}), False),
], ids=["fedauc-rr", "ldp-quantized"])
def test_processes_release_the_simulators_number(processes, deployment, options, make,
                                                 grouped):
    certs, files, data = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--seed", "3", *options]
    server, address = start_server(processes, certs, common)
    parties = [start_party(processes, certs, address, i, path, common)
               for i, path in enumerate(files)]
    code, out, err = finish(server)
    assert code == 0, err
    released = release_of(out)
    sizes = [len(part) for part in np.array_split(data, SILOS)]
    if grouped:
        owner = np.repeat(np.arange(SILOS), sizes)
        expected = simulate(make(), data, rng=3, parties=owner, batch_size=[1] * SILOS)
    else:
        expected = simulate(make(), data, rng=3, batch_size=sizes)
    assert released["value"] == expected.value
    assert released["bits_per_party"] == expected.cost.bits_per_party
    for party in parties:
        code, out, err = finish(party)
        assert code == 0, err
        assert release_of(out)["value"] == expected.value


def test_deployment_randomness_by_default(processes, deployment):
    certs, files, _ = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "central-laplace"]
    server, address = start_server(processes, certs, common)
    for i, path in enumerate(files):
        start_party(processes, certs, address, i, path, common)
    code, out, err = finish(server)
    assert code == 0, err
    assert "deployment noise" in out
    assert release_of(out)["noise"] == "deployment"


def test_a_missing_party_stops_the_server_with_its_name(processes, deployment):
    certs, files, _ = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "central-laplace",
              "--seed", "1"]
    server, address = start_server(processes, certs, common, timeout=3.0)
    first = start_party(processes, certs, address, 0, files[0], common)
    second = start_party(processes, certs, address, 1, files[1], common)
    started = time.monotonic()
    code, _, err = finish(server)
    assert code == 1
    assert err.strip() == "error: joining: no answer within 3 s from party-2; no release"
    assert time.monotonic() - started < 30
    for party in (first, second):
        code, _, err = finish(party)
        assert code == 1 and "party-2" in err


def test_a_killed_party_stops_the_run_with_its_name(processes, deployment):
    # party-1 is killed while the run waits for party-2 (before or after its own join):
    # the server names it, whatever stage it stopped in, and releases nothing.
    certs, files, _ = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "fedauc-rr",
              "--param", "n_clients=3", "--seed", "1"]
    server, address = start_server(processes, certs, common, timeout=3.0)
    parties = [start_party(processes, certs, address, i, path, common)
               for i, path in enumerate(files[:2])]
    time.sleep(1.0)  # both wait in Join for party-2
    os.killpg(parties[1].pid, signal.SIGKILL)
    start_party(processes, certs, address, 2, files[2], common)
    code, _, err = finish(server)
    assert code == 1
    assert "no answer within 3 s from party-1; no release" in err, err
