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
# The stage timeout of the fault tests (joining lasts this long from the first join):
# long enough for the honest parties' processes to start on a loaded machine.
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
    # Told that the TLS handshake failed and why (not that the server did not answer).
    assert code == 1
    # (gRPC's own log lines may come first on stderr.)
    assert re.search(r"^error: party-2: the TLS handshake with the server at "
                     r"127\.0\.0\.1:\d+ failed: the server's certificate is not signed by "
                     r"this party's CA \(ca\.pem from another deployment\?\)$", err, re.M), err
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
    channel.unary_unary("/fedustat.Exchange/Round")(b"FDST\\x00\\x02garbage", timeout=30)
except grpc.RpcError as exc:
    print(exc.details())
"""


def test_a_malformed_message_stops_the_run_naming_its_sender(processes, deployment):
    certs, files, _ = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "central-laplace",
              "--seed", "1"]
    # The run stops at the malformed message, never at a stage timeout: the timeout is only
    # a hang guard, long enough for three processes to start and join on a loaded machine
    # (5 s was not at load 13: the forger's Join came after the joining stage had ended).
    server, address = start_server(processes, certs, common, timeout=60.0)
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


# ------------------------------------------------ faults named quickly and truly (issue 23)

#: A party process that joins with the protocol the command line builds for
#: ``--statistic auc --protocol central-laplace --epsilon 1 --seed 1`` and then holds its
#: first step (as a party busy computing would), printing ``stepping`` when it starts it.
HELD_PARTY = """
import sys, time
import numpy as np
from fedustat.protocols import registry
from fedustat.runtime.network.certs import load_credentials
from fedustat.runtime.network.party import run_party
from fedustat.stats import auc_kernel
protocol = registry.make("central-laplace", auc_kernel(), epsilon=1.0)
step = protocol.party_step
def held(state, inbox, rng):
    print("stepping", flush=True)
    time.sleep(600)
    return step(state, inbox, rng)
protocol.party_step = held  # instrumentation, not configuration
rows = np.loadtxt(sys.argv[3], delimiter=",", skiprows=1, ndmin=2)
run_party(protocol, rows, load_credentials(sys.argv[1], "party-1"), sys.argv[2], rng=1,
          timeout=float(sys.argv[4]))
"""

#: A stage timeout far longer than any of these runs: a fault reported with it would
#: read "no answer within 120 s", so the reasons asserted below show it was not waited.
LONG_STAGE = 120.0


def test_a_killed_party_is_named_when_its_connection_drops(processes, deployment):
    # party-1 joins, starts its step and is SIGKILLed while the others wait in round 0:
    # the server notices the dropped connection at once, stops naming party-1 and why,
    # and the surviving parties are told that reason.
    certs, files, _ = deployment
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "central-laplace",
              "--seed", "1"]
    server, address = start_server(processes, certs, common, timeout=LONG_STAGE)
    honest = [processes.start("party", *common, "--certs", str(certs), "--server", address,
                              "--identity", f"party-{i}", "--file", str(files[i]),
                              "--columns", "score,label", "--timeout", str(LONG_STAGE))
              for i in (0, 2)]
    held = subprocess.Popen([sys.executable, "-c", HELD_PARTY, str(certs), address,
                             str(files[1]), str(LONG_STAGE)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    processes.running.append(held)
    assert held.stdout.readline().strip() == "stepping", held.stderr.read()
    os.killpg(held.pid, signal.SIGKILL)
    code, _, err = finish(server, 4 * LONG_STAGE)  # a hang guard only
    # On a loaded machine an honest party may still be computing its round-0 answer when
    # the drop stops the run: it is then named as not having answered yet, never as
    # silent for the stage timeout (which was not waited).
    pattern = (r"round 0: the connection of party-1 dropped \(its process ended or its "
               r"network failed\)(; no answer yet from party-[02](, party-[02])?)?; "
               r"no release")
    assert code == 1 and re.fullmatch(f"error: {pattern}", err.strip()), err
    reason = err.strip().removeprefix("error: ")
    for party in honest:
        code, _, err = finish(party)
        assert code == 1 and reason in err, err


def test_a_party_with_the_wrong_host_name_is_told_so(processes, tmp_path):
    # The server's certificate names only server.example: a party dialing 127.0.0.1
    # fails the TLS host name check and is told that, not that the server was silent.
    certs = tmp_path / "certs"
    subprocess.run([*FEDUSTAT, "certs", "--out", str(certs), "--parties", "1", "--host",
                    "server.example"], check=True, capture_output=True, timeout=60)
    data = tmp_path / "party-0.csv"
    np.savetxt(data, np.column_stack([np.linspace(0, 1, 10), np.arange(10) % 2]),
               delimiter=",", header="score,label", comments="")
    common = ["--statistic", "auc", "--epsilon", "1", "--protocol", "central-laplace",
              "--seed", "1"]
    server, address = start_server(processes, certs, common, parties=1, timeout=STAGE)
    party = start_party(processes, certs, address, 0, data, common)
    code, _, err = finish(party)
    assert code == 1
    assert re.search(r"^error: party-0: the TLS handshake with the server at "
                     r"127\.0\.0\.1:\d+ failed: the server's certificate does not name the "
                     r"host this party connects to ", err, re.M), err
    assert finish(server)[0] == 1


@pytest.mark.parametrize(("option", "server_value", "party_value", "named"), [
    ("--param", "k=8", "k=4", "k = 4 (party-1) vs 8 (server)"),
    ("--bounds", "0,100", "0,50", "bounds = [0.0, 50.0] (party-1) vs [0.0, 100.0] (server)"),
], ids=["k", "bounds"])
def test_a_party_with_another_option_is_refused_at_join(processes, tmp_path, deployment,
                                                         option, server_value, party_value,
                                                         named):
    # The Gini of incomes with ldp-quantized: party-1 gives another k, or other bounds.
    # It is refused when it joins (before any data step), the option named in words.
    certs = deployment[0]
    incomes = np.random.default_rng(3).uniform(0, 50, (3, 10))
    files = []
    for i, rows in enumerate(incomes):
        path = tmp_path / f"income-{i}.csv"
        np.savetxt(path, rows[:, None], delimiter=",", header="income", comments="")
        files.append(path)
    base = ["--statistic", "gini", "--protocol", "ldp-quantized", "--epsilon", "1",
            "--seed", "1", "--param", "k=8", "--bounds", "0,100"]

    def options(value: str) -> list[str]:
        flag = base.index(option) + (1 if option == "--bounds" else 3)
        if option == "--param":
            flag = base.index("k=8")
        return [*base[:flag], value, *base[flag + 1:]]

    server, address = start_server(processes, certs, options(server_value), timeout=STAGE)
    parties = [start_party(processes, certs, address, i, files[i],
                           options(party_value if i == 1 else server_value), "income")
               for i in range(SILOS)]
    code, _, err = finish(parties[1])
    refusal = f"party-1's protocol configuration differs from the server's: {named}"
    assert code == 1 and err.startswith(f"error: party-1 could not join: {refusal}"), err
    code, _, err = finish(server)
    assert code == 1 and f"party-1 (refused: {refusal}" in err, err


def test_an_out_of_bounds_party_tells_the_others_only_which_check_failed(processes,
                                                                          tmp_path,
                                                                          deployment):
    # party-1's incomes leave the declared bounds [0, 100] (min -17.25, max 1234.5): its
    # own error says so in full; the server and the other parties learn only that it
    # failed the bounds check of the column, none of its values.
    certs = deployment[0]
    incomes = np.random.default_rng(4).uniform(0, 100, (3, 10))
    incomes[1, 2], incomes[1, 7] = 1234.5, -17.25
    files = []
    for i, rows in enumerate(incomes):
        path = tmp_path / f"income-{i}.csv"
        np.savetxt(path, rows[:, None], delimiter=",", header="income", comments="")
        files.append(path)
    common = ["--statistic", "gini", "--protocol", "central-laplace", "--epsilon", "1",
              "--seed", "1", "--bounds", "0,100"]
    server, address = start_server(processes, certs, common, timeout=LONG_STAGE)
    parties = [start_party(processes, certs, address, i, files[i], common, "income")
               for i in range(SILOS)]
    code, out, err = finish(parties[1])
    assert code == 1 and "1234.5" in err and "-17.25" in err, err
    told = ("round 0: party-1 failed validation: values outside the declared bounds of "
            "column 'x'; no release")
    code, out, err = finish(server, 4 * LONG_STAGE)
    assert code == 1 and err.strip() == f"error: {told}", err
    seen = [out, err]
    for i in (0, 2):
        code, party_out, party_err = finish(parties[i])
        assert code == 1 and told in party_err, party_err
        seen += [party_out, party_err]
    for text in seen:
        for value in ("1234.5", "1234", "-17.25", "17.25", "min ", "max "):
            assert value not in text, (value, text)
