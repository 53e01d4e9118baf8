"""Durable lockstep runs: a server killed and restarted on its run directory, parties
restarted with their own state directory (docs/network.md, "Durability").

The server always runs as its own process (``fedustat serve``), started in its own
session on a free port and stopped by process group in a ``finally``; the parties that are
not killed run as threads of the test. No test passes or fails on a wall-clock deadline:
every wait has a generous bound that only guards against a hang.
"""

from __future__ import annotations

import asyncio
import hashlib
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

import numpy as np
import pytest

pytest.importorskip("grpc")

from fedustat.protocols import registry
from fedustat.runtime.network.certs import create_deployment, load_credentials
from fedustat.runtime.network.party import _hello, run_party, run_party_async, run_service
from fedustat.runtime.network.run_journal import PartyJournal
from fedustat.runtime.network.server import serve
from fedustat.runtime.network.service import CHANNEL_OPTIONS, JOIN, ROUND, NetworkRunError
from fedustat.runtime.simulate import simulate
from fedustat.runtime.wire import Envelope, encode
from fedustat.stats import auc_kernel, gini_kernel

FEDUSTAT = [sys.executable, "-m", "fedustat.cli"]
SILOS = 3
SEED = 5
#: The stage timeout: long enough for a killed server to be restarted on a loaded machine
#: (the parties wait 1.25 T + 1 s for it to come back).
STAGE = 30.0
#: Bound on any one wait (a hang guard, not a pass/fail criterion).
HANG = 240.0

LDP = (["--protocol", "ldp-quantized", "--column-bounds", "score=0,1"],
       lambda: registry.make("ldp-quantized", auc_kernel(), epsilon=1.0,
                             bounds={"score": (0.0, 1.0)}))
PAIRS = (["--protocol", "pairs-2pc", "--param", "P=2"],
         lambda: registry.make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2))
# Gini of the scores (the later --statistic wins over common()'s).
SHUFFLE = (["--statistic", "gini", "--bounds", "0,1", "--protocol", "ghazi-shuffle",
            "--param", "k=4", "--param", "shuffler=service"],
           lambda: registry.make("ghazi-shuffle", gini_kernel((0, 1)), epsilon=1.0, k=4,
                                 shuffler="service", bounds=(0.0, 1.0)))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> tuple[Path, list[Path], np.ndarray]:
    base = tmp_path_factory.mktemp("durable")
    certs = create_deployment(base / "certs", SILOS, extra_roles=("shuffler",))
    rng = np.random.default_rng(26)
    data = np.column_stack([rng.random(36), (rng.random(36) < 0.4).astype(float)])
    files = []
    for i, rows in enumerate(np.array_split(data, SILOS)):
        path = base / f"party-{i}.csv"
        np.savetxt(path, rows, delimiter=",", header="score,label", comments="")
        files.append(path)
    return Path(certs), files, data


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Processes:
    """This test's processes, each in its own session, stopped by process group."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen] = []

    def start(self, *args: str) -> subprocess.Popen:
        proc = subprocess.Popen([*FEDUSTAT, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.running.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for proc in self.running:
            self.kill(proc)
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


def common(options: list[str]) -> list[str]:
    return ["--statistic", "auc", "--epsilon", "1", "--seed", str(SEED), *options]


def start_server(processes: Processes, certs: Path, options: list[str], port: int,
                 run_dir: Path) -> subprocess.Popen:
    return processes.start("serve", *common(options), "--certs", str(certs), "--parties",
                           str(SILOS), "--listen", f"127.0.0.1:{port}", "--timeout",
                           str(STAGE), "--run-dir", str(run_dir))


def progress(run_dir: Path) -> int:
    """How far the run's database is: accepted frames plus the rounds checkpointed (both
    only grow during a run), -1 before it exists."""
    path = run_dir / "run.sqlite"
    if not path.exists():
        return -1
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
            frames = db.execute("SELECT COUNT(*) FROM frames").fetchone()[0]
            last = db.execute("SELECT MAX(round) FROM checkpoint").fetchone()[0]
            done = db.execute("SELECT COUNT(*) FROM release").fetchone()[0]
    except sqlite3.OperationalError:
        return -1  # tables not made yet
    return int(frames) + int(last or 0) + int(done)


def wait_for(check, what: str) -> None:
    until = time.monotonic() + HANG
    while not check():
        assert time.monotonic() < until, f"hang guard: {what}"
        time.sleep(0.005)


def release_of(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("{"):])


def party_threads(certs: Path, data: np.ndarray, make, address: str, results: dict,
                  skip: tuple[int, ...] = (), hold: float | None = None
                  ) -> list[threading.Thread]:
    """One thread per party; the last on an event loop (detached with ``hold``)."""
    threads = []
    for i, rows in enumerate(np.array_split(data, SILOS)):
        if i in skip:
            continue

        def work(i: int = i, rows: np.ndarray = rows) -> None:
            credentials = load_credentials(certs, f"party-{i}")
            try:
                if i == SILOS - 1:
                    # The last party on an event loop: its link reconnects the same way.
                    results[i] = asyncio.run(run_party_async(
                        make(), rows, credentials, address, rng=SEED, timeout=STAGE,
                        hold=hold))
                else:
                    results[i] = run_party(make(), rows, credentials, address, rng=SEED,
                                           timeout=STAGE)
            except Exception as exc:  # reported by the test
                results[i] = exc

        threads.append(threading.Thread(target=work, daemon=True))
        threads[-1].start()
    return threads


def expected(make, data: np.ndarray):
    sizes = [len(part) for part in np.array_split(data, SILOS)]
    return simulate(make(), data, rng=SEED, batch_size=sizes)


def run_killed(processes: Processes, certs: Path, data: np.ndarray, options, make,
               run_dir: Path, points: list[int], service: str | None = None,
               hold: float | None = None) -> dict:
    """One seeded run whose server is SIGKILLed as soon as its database has reached each
    of ``points`` (in order) and restarted on the same run directory; the last server's
    release. ``service``: a service role of the protocol, run as a thread too."""
    port = free_port()
    server = start_server(processes, certs, options, port, run_dir)
    results: dict = {}
    threads = party_threads(certs, data, make, f"127.0.0.1:{port}", results, hold=hold)
    if service is not None:
        def serving() -> None:
            try:
                results[service] = run_service(make(), service,
                                               load_credentials(certs, service),
                                               f"127.0.0.1:{port}", rng=SEED, timeout=STAGE)
            except Exception as exc:  # reported by the test
                results[service] = exc

        threads.append(threading.Thread(target=serving, daemon=True))
        threads[-1].start()
    for point in points:
        wait_for(lambda p=point, s=server: progress(run_dir) >= p or s.poll() is not None,
                 f"progress {point}")
        if server.poll() not in (None, 0):
            raise AssertionError(f"the server stopped: {server.communicate()[1]} {results}")
        processes.kill(server)
        server = start_server(processes, certs, options, port, run_dir)
    out, err = server.communicate(timeout=HANG)
    assert server.returncode == 0, f"{err} {results}"
    for thread in threads:
        thread.join(timeout=HANG)
    for i, result in results.items():
        assert not isinstance(result, Exception), f"party-{i}: {result}"
    released = release_of(out)
    values = {result.release["value"] for result in results.values()}
    assert values == {released["value"]}
    return released


# ``events``: the progress of an uninterrupted run (frames: rounds x silos; rounds
# checkpointed; the release): ldp-quantized's check-in and report rounds 6 + 2 + 1,
# pairs-2pc's four rounds (relay rounds among them) 12 + 4 + 1.
# ``hold``: party-2 runs on an event loop, attached (None) or detached (it comes back
# for each answer on a new connection).
@pytest.mark.parametrize(("options", "make", "events", "kills", "hold"),
                         [(*LDP, 9, 6, None), (*PAIRS, 17, 4, 1.0)],
                         ids=["ldp-quantized", "pairs-2pc"])
def test_a_server_killed_at_random_points_resumes_the_same_run(processes, deployment,
                                                               tmp_path, options, make,
                                                               events, kills, hold):
    # Ten points in all (6 + 4), drawn with a seed from the run's progress (frames
    # accepted, rounds committed, the release); the runs together restart the server
    # at each one. Every run releases the simulator's numbers: no frame counted twice,
    # no round's randomness drawn again.
    certs, _, data = deployment
    simulated = expected(make, data)
    points = sorted(np.random.default_rng(2026).choice(np.arange(1, events + 1), kills,
                                                        replace=kills > events).tolist())
    # Two or three kills per run: each run is restarted at its points in order.
    for index, group in enumerate([points[i:i + 3] for i in range(0, kills, 3)]):
        run_dir = tmp_path / f"run-{index}"
        released = run_killed(processes, certs, data, options, make, run_dir, group,
                              hold=hold)
        assert released["value"] == simulated.value
        assert released["n_parties"] == len(data)
        assert released["total_bits"] == simulated.cost.total_bits
        assert released["bits_per_party"] == simulated.cost.bits_per_party
        assert released["resumed"] is True
        # Every frame was written once: a run's events, however often it was killed.
        assert progress(run_dir) == events
    # A finished run's directory reads its release back; it is not computed again.
    again = start_server(processes, certs, options, free_port(), run_dir)
    out, err = again.communicate(timeout=HANG)
    assert again.returncode == 0, err
    assert "had finished: its release is read back" in out
    assert release_of(out)["value"] == simulated.value
    assert release_of(out)["read_back"] is True


def test_a_server_killed_with_a_service_role_resumes_with_it(processes, deployment,
                                                            tmp_path):
    # ghazi-shuffle's shuffler is a record-less service: it resends its frames (and its
    # passes, which name their round) to the restarted server like a party.
    certs, _, data = deployment
    data = data[:, :1]  # the scores
    options, make = SHUFFLE
    simulated = expected(make, data)
    events = 16  # 3 rounds x 4 members (the shuffler too) + 3 checkpoints + the release
    points = sorted(np.random.default_rng(26).choice(np.arange(1, events + 1), 2,
                                                      replace=False).tolist())
    released = run_killed(processes, certs, data, options, make, tmp_path / "run", points,
                          service="shuffler")
    assert released["value"] == simulated.value
    assert released["total_bits"] == simulated.cost.total_bits
    assert released["services"] == ["shuffler"]
    assert progress(tmp_path / "run") == events


@pytest.mark.parametrize(("options", "make", "held_round"), [(*LDP, 1), (*PAIRS, 2)],
                         ids=["ldp-quantized", "pairs-2pc"])
def test_a_party_killed_mid_run_resumes_from_its_state_directory(processes, deployment,
                                                                 tmp_path, options, make,
                                                                 held_round):
    # party-1 (a process with its own state directory) sends its frame of round
    # `held_round` (the report round of ldp-quantized; for pairs-2pc a round after which
    # its state holds a circuit in flight, saved as the openings it received and replayed
    # on them when it goes on) and is SIGKILLed while the run waits for party-2, whose
    # step is held; restarted with the same directory it rejoins as party-1, resends
    # the same bytes, goes on from its state and gets the release, which is the
    # simulator's (its frame counted once).
    certs, files, data = deployment
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = start_server(processes, certs, options, port, tmp_path / "run")
    state = tmp_path / "party-1-state"

    def party(index: int, state_dir: Path | None = None) -> subprocess.Popen:
        extra = ["--state-dir", str(state_dir)] if state_dir else []
        return processes.start("party", *common(options), "--certs", str(certs),
                               "--server", address, "--identity", f"party-{index}",
                               "--file", str(files[index]), "--columns", "score,label",
                               "--timeout", str(STAGE), *extra)

    first = party(1, state)
    others = [party(0)]
    protocol, steps, go_on = make(), [], threading.Event()
    step = protocol.party_step

    def held(state, inbox, rng):
        steps.append(1)
        if len(steps) == held_round + 1:  # wait until party-1 is back
            go_on.wait(HANG)
        return step(state, inbox, rng)

    protocol.party_step = held  # instrumentation, not configuration
    results: dict = {}
    rows = np.array_split(data, SILOS)[2]
    holder = threading.Thread(target=lambda: results.update(two=run_party(
        protocol, rows, load_credentials(certs, "party-2"), address, rng=SEED,
        timeout=STAGE)), daemon=True)
    holder.start()
    journal = PartyJournal(state, "party-1", _hello(make())[0])
    wait_for(lambda: (journal.round() or {}).get("round") == held_round,
             "party-1's held round")
    written = journal.round()
    sent = written["frame"]
    # Both states are saved (pairs-2pc's without its suspended member programs).
    assert written["state"] is not None
    processes.kill(first)
    again = party(1, state)
    time.sleep(0.5)
    go_on.set()
    out, err = server.communicate(timeout=HANG)
    if server.returncode != 0:
        processes.kill(again)
    assert server.returncode == 0, (err, again.communicate(timeout=HANG)[1])
    simulated = expected(make, data)
    released = release_of(out)
    assert released["value"] == simulated.value
    assert released["total_bits"] == simulated.cost.total_bits
    assert released["n_parties"] == len(data) and released["dropped"] == []
    party_out, party_err = again.communicate(timeout=HANG)
    assert again.returncode == 0, party_err
    assert release_of(party_out)["value"] == simulated.value
    # The frame counted for party-1's held round is the one sent before the kill (the same
    # bytes, not a new report), and every (round, slot) was counted once.
    with sqlite3.connect(tmp_path / "run" / "run.sqlite") as db:
        counted = db.execute("SELECT digest FROM frames WHERE round = ? AND slot = 1",
                             (held_round,)).fetchone()[0]
        rounds = db.execute("SELECT MAX(round) + 1 FROM frames").fetchone()[0]
        assert db.execute("SELECT COUNT(*) FROM frames").fetchone()[0] == rounds * SILOS
    assert counted == hashlib.sha256(sent).hexdigest()
    holder.join(timeout=HANG)
    assert results["two"].release["value"] == simulated.value
    for proc in others:
        assert release_of(proc.communicate(timeout=HANG)[0])["value"] == simulated.value


def test_a_frame_resent_with_other_bytes_is_refused_and_the_same_bytes_count_once(
        deployment, tmp_path):
    # A raw member sends its report twice with the same bytes (as after a lost
    # connection) and once with other bytes: the other bytes are refused naming the
    # round, the same bytes are answered as the first, and the release counts the
    # report once (the simulator's number and bits).
    grpc = pytest.importorskip("grpc")
    certs, _, data = deployment
    make = lambda: registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8,  # noqa: E731
                                 bounds={"score": (0.0, 1.0)})
    port = free_port()
    address = f"127.0.0.1:{port}"
    outcome: dict = {}

    def server() -> None:
        try:
            outcome["run"] = serve(make(), SILOS, load_credentials(certs, "server"),
                                   address=address, rng=SEED, timeout=STAGE,
                                   run_dir=tmp_path / "run")
        except Exception as exc:
            outcome["run"] = exc

    serving = threading.Thread(target=server, daemon=True)
    serving.start()
    own = load_credentials(certs, "party-0")
    channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(
        own.ca, own.key, own.certificate), options=CHANNEL_OPTIONS)
    results: dict = {}
    try:
        rows = np.array_split(data, SILOS)[0]
        mark, hello = _hello(make(), rows=len(rows))
        joined = channel.unary_unary(JOIN).future(hello, timeout=HANG, wait_for_ready=True)
        threads = party_threads(certs, data, make, address, results, skip=(0,))
        assignment = json.loads(joined.result())
        first, stop = assignment["ids"]
        from fedustat._validation import as_seed_sequence
        stream = as_seed_sequence(SEED).spawn(SILOS + 1)[1]
        protocol = make().configure(int(assignment["n_rows"]))
        state = protocol.init_parties(rows, np.arange(first, stop, dtype=np.int64))
        _, message = protocol.party_step(state, None, np.random.default_rng(stream))
        frame = encode(Envelope(mark, assignment["run"], 0, "party", "party-0", message))
        _, other = protocol.party_step(state, None, np.random.default_rng(99))
        other_frame = encode(Envelope(mark, assignment["run"], 0, "party", "party-0", other))
        assert other_frame != frame
        call = channel.unary_unary(ROUND)
        original = call.future(frame, timeout=HANG)
        wait_for(lambda: sqlite3.connect(tmp_path / "run" / "run.sqlite").execute(
            "SELECT COUNT(*) FROM frames WHERE slot = 0").fetchone()[0] == 1,
            "party-0's frame committed")
        with pytest.raises(grpc.RpcError) as refused:
            call(other_frame, timeout=HANG)
        assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "party-0 sent other bytes for round 0, whose frame was accepted" in \
            refused.value.details()
        # A frame of another run (a party of an earlier run retrying) is refused by its
        # run id, and the run goes on.
        stale = encode(Envelope(mark, "run-earlier", 0, "party", "party-0", message))
        with pytest.raises(grpc.RpcError) as refused:
            call(stale, timeout=HANG)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert refused.value.details() == (
            f"party-0 sent a frame of run 'run-earlier', but this server's run is "
            f"{assignment['run']!r}")
        resent = call.future(frame, timeout=HANG)
        for thread in threads:
            thread.join(timeout=HANG)
        assert resent.result() == original.result()
    finally:
        channel.close()
        serving.join(timeout=HANG)
    run = outcome["run"]
    assert not isinstance(run, Exception), run
    simulated = expected(make, data)
    assert run.estimate.value == simulated.value
    assert run.estimate.cost.total_bits == simulated.cost.total_bits
    assert run.n_parties == len(data)
    with sqlite3.connect(Path(run.run_dir) / "run.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM frames").fetchone()[0] == SILOS
    assert (Path(run.run_dir) / "run.sqlite").stat().st_mode & 0o777 == 0o600


def test_a_run_directory_of_another_configuration_is_refused_by_option(deployment,
                                                                       tmp_path):
    certs, _, _ = deployment
    run_dir = tmp_path / "run"
    with pytest.raises(NetworkRunError):
        serve(LDP[1](), SILOS, load_credentials(certs, "server"), rng=SEED, timeout=0.5,
              run_dir=run_dir)
    other = registry.make("ldp-quantized", auc_kernel(), epsilon=2.0,
                          bounds={"score": (0.0, 1.0)})
    with pytest.raises(ValueError) as refused:
        serve(other, SILOS + 1, load_credentials(certs, "server"), rng=SEED,
              timeout=0.5, run_dir=run_dir)
    message = str(refused.value)
    assert f"run_dir {str(run_dir)!r} holds run run-" in message
    assert "epsilon = 2.0 (this server) vs 1.0 (the run directory)" in message
    assert "n_silos (--parties) = 4 (this server) vs 3 (the run directory)" in message


def test_a_run_dir_that_is_a_file_or_holds_other_files_is_refused(deployment, tmp_path):
    certs, _, _ = deployment
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ValueError, match=r"run_dir .* is a file, not a directory"):
        serve(LDP[1](), SILOS, load_credentials(certs, "server"), rng=SEED, run_dir=afile)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="holds files but no run database"):
        serve(LDP[1](), SILOS, load_credentials(certs, "server"), rng=SEED, run_dir=other)


def test_a_state_directory_of_another_party_is_refused(tmp_path):
    mark = _hello(LDP[1]())[0]
    PartyJournal(tmp_path, "party-0", mark).joined({"run": "run-1", "ids": [0, 1]})
    # Its own secrets: readable by its owner only.
    assert (tmp_path / "assignment.json").stat().st_mode & 0o777 == 0o600
    with pytest.raises(ValueError, match=r"belongs to party-0 .* not party-1"):
        PartyJournal(tmp_path, "party-1", mark).assignment()
    with pytest.raises(ValueError, match="give each party and run its own state directory"):
        PartyJournal(tmp_path, "party-0", "ldp-quantized:0000").assignment()


def test_a_party_whose_steps_cannot_be_replayed_refuses_to_resume():
    # A state that could not be saved is rebuilt by replaying the party's steps; a step
    # drawing randomness outside the party's generator sends something else the second
    # time, and the party refuses to go on from a state that is not the one it had.
    from fedustat.runtime.network.party import _replayed

    protocol = registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8,
                             bounds={"score": (0.0, 1.0)}).configure(12)
    rows = np.random.default_rng(1).random((12, 2)).round()  # scores and labels in {0, 1}
    owner = np.arange(12, dtype=np.int64)
    party_rng = np.random.default_rng(3)
    history = {"rng": party_rng.bit_generator.state, "inboxes": [None], "messages": []}
    _, sent = protocol.party_step(protocol.init_parties(rows, owner), None, party_rng)
    history["messages"].append(sent)
    # Replayed from the same rng state: the same message, the same state.
    assert _replayed(protocol, rows, owner, history, np.random.default_rng(0),
                     "party-0") is not None
    step = protocol.party_step
    protocol.party_step = lambda s, i, r: step(s, i, np.random.default_rng())
    with pytest.raises(NetworkRunError, match="running its steps again gave another "
                                              "message in round 0"):
        _replayed(protocol, rows, owner, history, np.random.default_rng(0), "party-0")
