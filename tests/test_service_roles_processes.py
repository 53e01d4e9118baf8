"""Service roles as their own OS processes, started from the command line: the server,
three silos and the shuffler of ghazi-shuffle, each in its own process.

Each test starts its own processes (each in its own session), stops those still running by
their pid in a ``finally`` (even when the test fails), lets the server pick its port and
keeps every file under pytest's temporary directory.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("grpc")

from fedustat.protocols import registry
from fedustat.protocols.local.ghazi_shuffle import GhaziShuffle
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, gini_kernel

FEDUSTAT = [sys.executable, "-m", "fedustat.cli"]
SILOS = 3
COMMON = ["--statistic", "gini", "--bounds", "0,1", "--epsilon", "1",
          "--protocol", "ghazi-shuffle", "--param", "k=4", "--param", "shuffler=service"]


class Processes:
    """The processes one test started; each stopped by its own pid."""

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
                proc.kill()
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
    """Certificates (silos and a shuffler) and one CSV file per silo."""
    base = tmp_path_factory.mktemp("services")
    done = subprocess.run([*FEDUSTAT, "certs", "--out", str(base / "certs"), "--parties",
                           str(SILOS), "--services", "shuffler,dealer"],
                          check=True, capture_output=True, text=True, timeout=60)
    assert "services shuffler, dealer" in done.stdout
    data = np.random.default_rng(21).uniform(0, 1, 45)
    files = []
    for i, rows in enumerate(np.array_split(data, SILOS)):
        path = base / f"party-{i}.csv"
        np.savetxt(path, rows[:, None], delimiter=",", header="x", comments="")
        files.append(path)
    return base / "certs", files, data


def _server(processes: Processes, certs: Path, extra: list[str],
            timeout: float) -> tuple[subprocess.Popen, str]:
    server = processes.start("serve", *COMMON, *extra, "--certs", str(certs), "--parties",
                             str(SILOS), "--listen", "127.0.0.1:0", "--timeout", str(timeout))
    line = server.stdout.readline()
    match = re.search(r"listening on port (\d+)", line)
    assert match, f"the server did not start: {line!r} {server.stderr.read()!r}"
    return server, f"127.0.0.1:{match.group(1)}"


def _parties(processes: Processes, certs: Path, address: str, files: list[Path],
             extra: list[str]) -> list[subprocess.Popen]:
    return [processes.start("party", *COMMON, *extra, "--certs", str(certs), "--server",
                            address, "--identity", f"party-{i}", "--file", str(path),
                            "--columns", "x", "--timeout", "60")
            for i, path in enumerate(files)]


def _release(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{"):])


def test_shuffler_process_releases_the_simulators_number(processes, deployment):
    certs, files, data = deployment
    seed = ["--seed", "9"]
    server, address = _server(processes, certs, seed, timeout=30.0)
    parties = _parties(processes, certs, address, files, seed)
    shuffler = processes.start("service", *COMMON, *seed, "--role", "shuffler", "--certs",
                               str(certs), "--server", address, "--timeout", "60")
    out, err = server.communicate(timeout=120)
    assert server.returncode == 0, err
    sizes = [len(part) for part in np.array_split(data, SILOS)]
    expected = simulate(GhaziShuffle(gini_kernel((0, 1)), 1.0, k=4, shuffler="service"),
                        data, rng=9, batch_size=sizes)
    released = _release(out)
    assert released["value"] == expected.value
    assert released["total_bits"] == expected.cost.total_bits
    assert "shuffler service" in released["privacy"]
    s_out, s_err = shuffler.communicate(timeout=60)
    assert shuffler.returncode == 0, s_err
    said = _release(s_out)
    assert said["identity"] == "shuffler" and said["service_id"] == 45
    assert said["value"] == expected.value
    for party in parties:
        party.communicate(timeout=60)
        assert party.returncode == 0


def test_a_missing_shuffler_stops_the_run_naming_it(processes, deployment):
    certs, files, _ = deployment
    server, address = _server(processes, certs, ["--seed", "1"], timeout=6.0)
    parties = _parties(processes, certs, address, files, ["--seed", "1"])
    out, err = server.communicate(timeout=120)
    assert server.returncode != 0
    assert "joining: no answer within 6 s from shuffler; no release" in err
    assert "Traceback" not in err and "value" not in out
    for party in parties:
        _, party_err = party.communicate(timeout=60)
        assert party.returncode != 0 and "shuffler" in party_err


def test_service_command_refuses_a_protocol_without_that_role(processes, deployment):
    certs, _, _ = deployment
    proc = processes.start("service", "--statistic", "gini", "--bounds", "0,1", "--epsilon",
                           "1", "--protocol", "ghazi-shuffle", "--param", "k=4", "--seed", "1",
                           "--role", "shuffler", "--certs", str(certs), "--server",
                           "127.0.0.1:1")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert "has no shuffler role (its service roles: none)" in err
    assert "--param shuffler=service" in err


# ------------------------------------------------------------------ a dealer process
@pytest.fixture(scope="module")
def labelled(tmp_path_factory, deployment) -> tuple[Path, list[Path], np.ndarray]:
    """One CSV file (score,label) per silo, with the deployment's certificates."""
    certs = deployment[0]
    base = tmp_path_factory.mktemp("labelled")
    rng = np.random.default_rng(22)
    data = np.column_stack([rng.random(36), (np.arange(36) % 3 == 0).astype(float)])
    files = []
    for i, rows in enumerate(np.array_split(data, SILOS)):
        path = base / f"party-{i}.csv"
        np.savetxt(path, rows, delimiter=",", header="score,label", comments="")
        files.append(path)
    return certs, files, data


@pytest.mark.parametrize(("options", "make"), [
    (["--protocol", "pairs-2pc", "--param", "P=2", "--param", "dealer=service"],
     lambda: registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2, dealer="service")),
    (["--protocol", "umpc", "--column-bounds", "score=0,1", "--param", "dealer=service"],
     lambda: registry.make("umpc", auc_kernel(), epsilon=1.0, bounds={"score": (0.0, 1.0)},
                           dealer="service")),
], ids=["pairs-2pc", "umpc"])
def test_dealer_process_releases_the_simulators_number(processes, labelled, options, make):
    certs, files, data = labelled
    common = ["--statistic", "auc", "--epsilon", "1", *options, "--seed", "4"]
    server = processes.start("serve", *common, "--certs", str(certs), "--parties",
                             str(SILOS), "--listen", "127.0.0.1:0", "--timeout", "30")
    line = server.stdout.readline()
    match = re.search(r"listening on port (\d+)", line)
    assert match, f"the server did not start: {line!r} {server.stderr.read()!r}"
    address = f"127.0.0.1:{match.group(1)}"
    dealer = processes.start("service", *common, "--role", "dealer", "--certs", str(certs),
                             "--server", address, "--timeout", "60")
    parties = [processes.start("party", *common, "--certs", str(certs), "--server", address,
                               "--identity", f"party-{i}", "--file", str(path), "--columns",
                               "score,label", "--timeout", "60")
               for i, path in enumerate(files)]
    out, err = server.communicate(timeout=180)
    assert server.returncode == 0, err
    sizes = [len(part) for part in np.array_split(data, SILOS)]
    expected = simulate(make(), data, rng=4, batch_size=sizes)
    released = _release(out)
    assert released["value"] == expected.value
    assert released["total_bits"] == expected.cost.total_bits
    assert "as the dealer service" in released["privacy"]
    d_out, d_err = dealer.communicate(timeout=60)
    assert dealer.returncode == 0, d_err
    assert _release(d_out)["service_id"] == len(data)
    for party in parties:
        party.communicate(timeout=60)
        assert party.returncode == 0
