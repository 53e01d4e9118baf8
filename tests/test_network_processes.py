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
from fedustat.stats.ecdf import ecdf_counts

FEDUSTAT = [sys.executable, "-m", "fedustat.cli"]
SILOS = 3
# Seconds a stage may go without progress in the fault tests: long enough for the honest
# parties' processes to start on a loaded machine.
STAGE = 8.0


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
                protocol_options: list[str], columns: str = "score,label") -> subprocess.Popen:
    return processes.start("party", *protocol_options, "--certs", str(certs), "--server",
                           address, "--identity", f"party-{index}", "--file", str(path),
                           "--columns", columns, "--timeout", "60")


def finish(proc: subprocess.Popen, seconds: float = 90.0) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=seconds)
    return proc.returncode, out, err


def release_of(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{"):])


def run_every_silo(processes: Processes, certs: Path, files: list[Path],
                   common: list[str], columns: str = "score,label", timeout: float = 20.0
                   ) -> tuple[str, list[subprocess.Popen]]:
    """A server and one party process per file; the server's output once it succeeded.

    ``timeout`` is the server's stage timeout (``--timeout``)."""
    server, address = start_server(processes, certs, common, parties=len(files),
                                   timeout=timeout)
    parties = [start_party(processes, certs, address, i, path, common, columns)
               for i, path in enumerate(files)]
    code, out, err = finish(server, max(90.0, 4 * timeout))
    assert code == 0, err
    return out, parties


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
    out, parties = run_every_silo(processes, certs, files, common)
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
    out, _ = run_every_silo(processes, certs, files, common)
    assert "deployment noise" in out
    assert release_of(out)["noise"] == "deployment"


def test_a_missing_party_stops_the_server_with_its_name(processes, deployment):
    certs, files, _ = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "central-laplace",
              "--seed", "1"]
    server, address = start_server(processes, certs, common, timeout=STAGE)
    first = start_party(processes, certs, address, 0, files[0], common)
    second = start_party(processes, certs, address, 1, files[1], common)
    started = time.monotonic()
    code, _, err = finish(server)
    assert code == 1
    assert err.strip() == f"error: joining: no answer within {STAGE:g} s from party-2; no release"
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
    server, address = start_server(processes, certs, common, timeout=STAGE)
    parties = [start_party(processes, certs, address, i, path, common)
               for i, path in enumerate(files[:2])]
    time.sleep(1.0)  # both wait in Join for party-2
    os.killpg(parties[1].pid, signal.SIGKILL)
    start_party(processes, certs, address, 2, files[2], common)
    code, _, err = finish(server)
    assert code == 1
    assert f"no answer within {STAGE:g} s from party-1; no release" in err, err


def test_pairs_2pc_between_processes(processes, deployment):
    # The secure family: pairs of parties run 2PC, their messages relayed end-to-end
    # encrypted through the server.
    certs, files, data = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "pairs-2pc",
              "--param", "P=2", "--seed", "4"]
    out, parties = run_every_silo(processes, certs, files, common)
    sizes = [len(part) for part in np.array_split(data, SILOS)]
    expected = simulate(registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2), data,
                        rng=4, batch_size=sizes)
    released = release_of(out)
    assert released["value"] == expected.value
    assert released["wire_bytes"] * 8 >= expected.cost.total_bits
    for party in parties:
        assert finish(party)[0] == 0


def test_wrong_credentials_are_refused_and_named(processes, deployment, tmp_path):
    certs, files, _ = deployment
    other = tmp_path / "other-certs"
    subprocess.run([*FEDUSTAT, "certs", "--out", str(other), "--parties", str(SILOS)],
                   check=True, capture_output=True, timeout=60)
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "central-laplace",
              "--seed", "1"]
    server, address = start_server(processes, certs, common, timeout=STAGE)
    honest = [start_party(processes, certs, address, i, files[i], common) for i in (0, 1)]
    intruder = start_party(processes, other, address, 2, files[2], common)
    code, _, err = finish(intruder)
    assert code == 1 and "party-2 could not join" in err
    code, _, err = finish(server)
    assert code == 1
    assert err.strip() == f"error: joining: no answer within {STAGE:g} s from party-2; no release"
    for party in honest:
        assert finish(party)[0] == 1


MALFORMED = """
import json, sys, grpc
from fedustat.runtime.network.certs import load_credentials
creds = load_credentials(sys.argv[1], "party-2")
channel = grpc.secure_channel(sys.argv[2], grpc.ssl_channel_credentials(
    creds.ca, creds.key, creds.certificate))
hello = json.dumps({"rows": 30, "fingerprint": sys.argv[3]}).encode()
channel.unary_unary("/fedustat.Exchange/Join")(hello, timeout=30, wait_for_ready=True)
try:
    channel.unary_unary("/fedustat.Exchange/Round")(b"FDST\\x00\\x01garbage", timeout=30)
except grpc.RpcError as exc:
    print(exc.details())
"""


def test_a_malformed_message_stops_the_run_naming_its_sender(processes, deployment):
    certs, files, _ = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "central-laplace",
              "--seed", "1"]
    server, address = start_server(processes, certs, common, timeout=5.0)
    honest = [start_party(processes, certs, address, i, files[i], common) for i in (0, 1)]
    from fedustat.runtime.network.service import fingerprint

    mark = fingerprint(registry.make("central-laplace", auc_kernel(), epsilon=1.0))
    forger = subprocess.Popen([sys.executable, "-c", MALFORMED, str(certs), address, mark],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    processes.running.append(forger)
    out, _ = forger.communicate(timeout=60)
    assert "message from party 'party-2': header" in out
    code, _, err = finish(server)
    assert code == 1
    assert "round 0: message from party 'party-2': header" in err and "no release" in err
    for party in honest:
        code, _, err = finish(party)
        assert code == 1 and "party-2" in err


def test_umpc_between_processes(processes, deployment):
    # U-MPC: dealing parties, shares, noise shares and circuit openings as relay rounds.
    certs, files, data = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "umpc",
              "--column-bounds", "score=0,1", "--seed", "6"]
    out, parties = run_every_silo(processes, certs, files, common)
    sizes = [len(part) for part in np.array_split(data, SILOS)]
    expected = simulate(registry.make("umpc", auc_kernel(), epsilon=1.0,
                                      bounds={"score": (0.0, 1.0)}),
                        data, rng=6, batch_size=sizes)
    released = release_of(out)
    assert released["value"] == expected.value
    assert released["total_bits"] == expected.cost.total_bits
    for party in parties:
        assert finish(party)[0] == 0


# ------------------------------------------------ the federated ECDF releases by name

ECDF_SILOS = 4
# Stage timeout of the ECDF runs: four party processes start together, and on a heavily
# loaded machine one took more than 20 s to join.
ECDF_STAGE = 90.0
ECDF_GRID = np.arange(0.0, 13.0)  # --bounds 0,12 --precision 1: 13 thresholds


@pytest.fixture(scope="module")
def ecdf_deployment(tmp_path_factory) -> tuple[Path, list[Path], np.ndarray]:
    """Four silos of one column (x): silos 0 and 1 hold one party each, parties 0 and 1,
    the computing parties; silos 2 and 3 hold the other 28."""
    base = tmp_path_factory.mktemp("ecdf-deployment")
    subprocess.run([*FEDUSTAT, "certs", "--out", str(base / "certs"), "--parties",
                    str(ECDF_SILOS)], check=True, capture_output=True, timeout=60)
    x = np.minimum(np.random.default_rng(2).poisson(3.0, 30), 12).astype(np.float64)
    files = []
    for i, rows in enumerate(np.split(x, [1, 2, 10])):
        path = base / f"silo-{i}.csv"
        np.savetxt(path, rows, delimiter=",", header="x", comments="")
        files.append(path)
    return base / "certs", files, x


@pytest.mark.parametrize(("options", "params"), [
    (["--protocol", "ecdf-secagg", "--param", "contributors=3"], {"contributors": 3}),
    (["--protocol", "ecdf-fss", "--param", "query=0,3,5,12", "--param", "contributors=3"],
     {"query": [0, 3, 5, 12], "contributors": 3}),
], ids=["ecdf-secagg", "ecdf-fss"])
def test_federated_ecdf_between_processes_by_name(processes, ecdf_deployment, options,
                                                  params):
    # Server and four silos from the command line; parties 0 and 1 (silos 0 and 1) are
    # the computing parties, parties 0..2 contribute noise, every row crosses silos
    # through relay rounds sealed end to end.
    certs, files, x = ecdf_deployment
    common = [*options, "--epsilon", "1", "--bounds", "0,12", "--precision", "1",
              "--seed", "8"]
    out, parties = run_every_silo(processes, certs, files, common, columns="x",
                                  timeout=ECDF_STAGE)
    released = release_of(out)
    name = options[1]
    expected = simulate(registry.make_curve(name, epsilon=1.0, bounds=(0.0, 12.0),
                                            precision=1.0, **params),
                        x[:, None], rng=8, batch_size=[1, 1, 8, 20])
    curve = expected.diagnostics["curve"]
    assert released["protocol"] == expected.protocol
    assert released["thresholds"] == curve.thresholds.tolist()
    assert released["values"] == curve.values.tolist()
    assert released["value"] == expected.value
    for field in ("bits_per_party", "total_bits", "rounds", "peer_rounds"):
        assert released["cost"][field] == getattr(expected.cost, field), field
    assert released["wire_bytes"] * 8 >= expected.cost.total_bits
    assert released["guarantee"]["epsilon"] == 1.0
    # The noise is not zero: the released curve is not the exact one.
    exact = ecdf_counts(x, ECDF_GRID)[curve.indices] / x.size
    assert not np.array_equal(curve.values, exact)
    for party in parties:
        code, party_out, err = finish(party)
        assert code == 0, err
        assert release_of(party_out)["value"] == expected.value


def test_an_unseeded_federated_ecdf_between_processes_draws_from_the_os(processes,
                                                                        ecdf_deployment):
    # No seed: shares and noise from the OS (randomness="os"), and the release says so;
    # at epsilon 1000 the curve is the exact ECDF up to its own noise.
    certs, files, x = ecdf_deployment
    common = ["--protocol", "ecdf-secagg", "--epsilon", "1000", "--bounds", "0,12",
              "--precision", "1"]
    out, parties = run_every_silo(processes, certs, files, common, columns="x",
                                  timeout=ECDF_STAGE)
    released = release_of(out)
    assert released["noise"] == "deployment"
    curve = registry.make_curve("ecdf-secagg", epsilon=1000.0, bounds=(0.0, 12.0),
                                precision=1.0, randomness="os")
    exact = ecdf_counts(x, curve.thresholds) / x.size
    # The release's own per-point standard error: sqrt(L + 1 node variances) / n.
    simulated = simulate(curve, x[:, None], batch_size=[1, 1, 8, 20])
    bound = 6 * np.sqrt(simulated.diagnostics["curve"].variance)
    assert np.all(np.abs(np.asarray(released["values"]) - exact) <= bound)
    for party in parties:
        assert finish(party)[0] == 0


def test_protocols_lists_the_curve_releases():
    listed = subprocess.run([*FEDUSTAT, "protocols"], capture_output=True, text=True,
                            check=True, timeout=60).stdout
    assert re.search(r"^ecdf-fss\s+computational\s+federated curve release: .*"
                     r"\(statistics: ecdf, quantile, median\).*003 Sec\. 4\.2", listed, re.M)
    assert re.search(r"^ecdf-secagg\s+central\s+federated curve release: .*"
                     r"\(statistics: ecdf, quantile, median\).*003 Sec\. 4\.1", listed, re.M)
    assert re.search(r"^dp-ecdf\s+central\s+central curve release: ", listed, re.M)


def test_the_curve_registry_shares_one_name_space_with_the_protocols():
    # A name picks one protocol: a curve release cannot take a U-statistic protocol's
    # name, nor the other way round; the curve registry refuses an unknown name by name.
    entry = registry.available_curves()[0]
    with pytest.raises(ValueError, match="a protocol named 'umpc' is already registered"):
        registry.register_curve("umpc", entry.factory, model=entry.model, summary="",
                                source="")
    protocol = registry.available()[0]
    with pytest.raises(ValueError, match=f"a protocol named {entry.name!r} is already "
                                         "registered"):
        registry.register(entry.name, protocol.factory, model=protocol.model, summary="",
                          source="")
    with pytest.raises(ValueError, match=r"unknown curve release 'ecdf'; available curve "
                                         r"releases: ecdf-fss, ecdf-secagg"):
        registry.make_curve("ecdf", epsilon=1.0)
    assert not registry.is_curve("umpc") and registry.is_curve("ecdf-fss")


@pytest.mark.parametrize(("extra", "message"), [
    (["--statistic", "auc", "--bounds", "0,12"],
     "error: ecdf-fss releases a curve of one column; it takes no --statistic"),
    ([], "error: ecdf-fss: give the public grid: --param thresholds=T1,T2,..., or --bounds "
         "LO,HI (and --precision P"),
    (["--param", "thresholds=0,1,x"],
     "error: --param thresholds must be comma-separated numbers, got '0,1,x'"),
    (["--bounds", "0,12", "--param", "n_servers=3"],
     "error: ecdf-fss: n_servers"),
    (["--bounds", "0,12", "--param", "grid=3"],
     "error: ecdf-fss: protocol 'ecdf-fss' has no parameter 'grid'"),
    (["--bounds", "0,12", "--delta", "0.1"], "error: ecdf-fss is pure epsilon-DP"),
], ids=["statistic", "no-grid", "bad-thresholds", "servers", "unknown", "delta"])
def test_a_curve_release_with_bad_options_is_refused_by_name(ecdf_deployment, extra,
                                                             message, capsys):
    from fedustat.cli import main

    certs = ecdf_deployment[0]
    with pytest.raises(SystemExit) as stop:
        main(["serve", "--protocol", "ecdf-fss", "--epsilon", "1", "--certs", str(certs),
              "--parties", "4", *extra])
    assert str(stop.value).startswith(message), stop.value


def test_a_statistic_protocol_without_statistic_is_refused(ecdf_deployment):
    from fedustat.cli import main

    with pytest.raises(SystemExit, match=r"error: protocol fedauc-rr needs --statistic"):
        main(["serve", "--protocol", "fedauc-rr", "--epsilon", "1", "--certs",
              str(ecdf_deployment[0]), "--parties", "4"])
