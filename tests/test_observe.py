"""Operating a run: the servers' health check, Prometheus metrics and JSON event logs.

Real servers (the lockstep ``serve`` and the collection window ``collect``) run in threads
with their parties or devices, each over its own mutual-TLS channel, and are scraped over
HTTP during and after the run. Their records hold a recognisable secret digit string that
must appear in no log line and no metric. The waits are bounded hang guards, never
pass/fail deadlines.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families

from fedustat.protocols import registry
from fedustat.runtime.network import (
    NetworkRunError,
    Window,
    collect,
    create_deployment,
    load_credentials,
    report_async,
    run_party,
    serve,
)
from fedustat.runtime.network.observe import (
    LOG_FIELDS,
    LOGGER,
    MAX_REASON_CHARS,
    Observer,
    configure_logging,
    parse_address,
)
from fedustat.stats import auc_kernel

SEED = 5
#: Every record's score carries these digits: they must never reach a log or a metric.
SECRET = "7351946"
#: Hang guard of every bounded wait (seconds); a loaded machine passes well within it.
GUARD = 90.0
#: What every log line holds besides the declared public fields.
ENVELOPE = {"time", "level", "event", "server", "run"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return create_deployment(tmp_path_factory.mktemp("observe"), 8)


@pytest.fixture
def log_lines():
    """The servers' events as JSON lines, captured for one test."""
    stream = io.StringIO()
    handler = configure_logging("json", "debug", stream=stream)
    try:
        yield lambda: [line for line in stream.getvalue().splitlines() if line]
    finally:
        logger = logging.getLogger(LOGGER)
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def secret_records(n: int, first: int = 0) -> np.ndarray:
    """Scores 0.7351946..., each printed with the secret digits; labels alternate."""
    scores = np.array([float(f"0.{SECRET}{first + i:04d}") for i in range(n)])
    return np.column_stack([scores, (np.arange(first, first + n) % 2).astype(float)])


def scrape(observer: Observer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The metrics endpoint over HTTP, parsed: (sample name, labels) -> value."""
    text = fetch(observer, "/metrics")[1]
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def fetch(observer: Observer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{observer.address}{path}", timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def value(metrics: dict, name: str, **labels: str) -> float:
    for (sample, sample_labels), number in metrics.items():
        if sample == name and all(dict(sample_labels).get(k) == v for k, v in labels.items()):
            return number
    return 0.0


def until(condition: Any, what: str) -> None:
    """Wait (bounded) until ``condition()`` holds."""
    stop = time.monotonic() + GUARD
    while not condition():
        assert time.monotonic() < stop, f"never happened: {what}"
        time.sleep(0.05)


def assert_no_data(lines: list[str], metrics_text: str) -> list[dict]:
    """Every line is one JSON object of public fields; the secret is nowhere."""
    events = [json.loads(line) for line in lines]
    for event in events:
        assert set(event) >= ENVELOPE, event
        assert set(event) - ENVELOPE <= LOG_FIELDS, event
        assert all(len(str(v)) <= MAX_REASON_CHARS for v in event.values()), event
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", event["time"])
    for text in (*lines, metrics_text):
        assert SECRET not in text
    return events


# ------------------------------------------------------------------ lockstep server
def central(epsilon: float = 1.0) -> Any:
    # The trusted curator receives the records themselves: the strictest case for "no
    # data in logs or metrics".
    return registry.make("central-laplace", auc_kernel(), epsilon=epsilon)


def test_a_lockstep_run_is_scraped_during_and_after_and_its_logs_hold_no_data(certs,
                                                                             log_lines):
    silos = [secret_records(10, 10 * i) for i in range(3)]
    observer = Observer("127.0.0.1:0")
    ready, outcome = threading.Event(), {}

    def server() -> None:
        try:
            outcome["run"] = serve(central(), 3, load_credentials(certs, "server"), rng=SEED,
                                   timeout=GUARD, observer=observer,
                                   on_ready=lambda port: (outcome.update(port=port),
                                                          ready.set()))
        except Exception as exc:  # the test inspects it
            outcome["run"] = exc
            ready.set()

    threads: list[threading.Thread] = []
    results: dict[str, Any] = {}

    def party(name: str, records: np.ndarray, protocol: Any,
              identity: str) -> threading.Thread:
        def run() -> None:
            try:
                results[name] = run_party(protocol, records, load_credentials(certs, identity),
                                          f"127.0.0.1:{outcome['port']}", rng=SEED,
                                          timeout=GUARD)
            except Exception as exc:
                results[name] = exc
        thread = threading.Thread(target=run)
        thread.start()
        threads.append(thread)
        return thread

    # party-2 is held inside its own step, so round 0 is seen in progress.
    step_may_go = threading.Event()
    held = central()
    step = held.party_step

    def held_step(state: Any, inbox: Any, rng: Any) -> Any:
        assert step_may_go.wait(GUARD)
        return step(state, inbox, rng)

    held.party_step = held_step  # instrumentation: not part of the configuration

    server_thread = threading.Thread(target=server)
    server_thread.start()
    try:
        assert ready.wait(GUARD) and "port" in outcome, outcome
        status, body = fetch(observer, "/health")
        assert status == 200 and json.loads(body)["state"] == "joining"

        party("0", silos[0], central(), "party-0")
        party("1", silos[1], central(), "party-1")
        until(lambda: value(scrape(observer), "fedustat_parties_joined") == 2, "two joins")
        # A second party-0 and a party-2 configured otherwise are refused at the door.
        party("dup", silos[0], central(), "party-0").join(GUARD)
        party("other", silos[2], central(epsilon=2.0), "party-2").join(GUARD)
        assert isinstance(results["dup"], NetworkRunError), results["dup"]
        assert isinstance(results["other"], NetworkRunError), results["other"]

        during = scrape(observer)
        assert value(during, "fedustat_reports_refused_total", reason="duplicate") == 1
        assert value(during, "fedustat_reports_refused_total", reason="configuration") == 1
        assert value(during, "fedustat_run_state", fedustat_run_state="joining") == 1
        assert value(during, "fedustat_up") == 1 and value(during, "fedustat_released") == 0
        assert value(during, "fedustat_parties_expected") == 3

        party("2", silos[2], held, "party-2")

        def two_frames_in() -> bool:
            metrics = scrape(observer)
            return value(metrics, "fedustat_run_state", fedustat_run_state="running") == 1 \
                and value(metrics, "fedustat_round_arrived") == 2

        until(two_frames_in, "round 0 with two frames in")
        in_round = scrape(observer)
        assert value(in_round, "fedustat_run_state", fedustat_run_state="running") == 1
        assert value(in_round, "fedustat_round") == 0
        assert value(in_round, "fedustat_parties_joined") == 3
        assert value(in_round, "fedustat_reports_accepted_total") == 2
        status, body = fetch(observer, "/health")
        health = json.loads(body)
        assert status == 200 and health["serving"] is True
        assert (health["state"], health["round"], health["arrived"], health["expected"]) == (
            "running", 0, 2, 3)
        step_may_go.set()
        server_thread.join(GUARD)
        assert not server_thread.is_alive(), "the server must never hang"
    finally:
        step_may_go.set()
        for thread in threads:
            thread.join(GUARD)
        server_thread.join(GUARD)
    run = outcome["run"]
    assert not isinstance(run, Exception), run
    assert all(not isinstance(results[k], Exception) for k in "012"), results

    # After the run the caller's observer still answers: the final counts.
    after = scrape(observer)
    text = fetch(observer, "/metrics")[1]
    try:
        assert value(after, "fedustat_released") == 1 and value(after, "fedustat_up") == 0
        assert value(after, "fedustat_parties_joined") == 3
        assert value(after, "fedustat_reports_accepted_total") == 3 * run.rounds
        assert value(after, "fedustat_rounds_total") == run.rounds
        assert value(after, "fedustat_reports_refused_total", reason="duplicate") == 1
        assert value(after, "fedustat_reports_refused_total", reason="configuration") == 1
        # Received plus sent is the run's own count of round frames and replies.
        assert value(after, "fedustat_received_bytes_total") + value(
            after, "fedustat_sent_bytes_total") == run.wire_bytes
        assert value(after, "process_resident_memory_bytes") > 0
        assert value(after, "fedustat_run_info", run=observer.run,
                     protocol="central-laplace") == 1
        status, body = fetch(observer, "/health")
        assert status == 200 and json.loads(body)["state"] == "released"
    finally:
        observer.stop()

    events = assert_no_data(log_lines(), text)
    assert {e["run"] for e in events} == {observer.run}
    names = [e["event"] for e in events]
    assert names[0] == "start" and names[-1] == "release"
    assert sorted(e["identity"] for e in events if e["event"] == "join") == [
        "party-0", "party-1", "party-2"]
    refusals = {e["reason"]: e for e in events if e["event"] == "refused"}
    assert set(refusals) == {"duplicate", "configuration"}
    assert refusals["duplicate"]["identity"] == "party-0"
    assert "epsilon" in refusals["configuration"]["detail"]  # the option that differs
    assert names.count("round_end") == run.rounds
    release = events[-1]
    assert release["n_parties"] == 30 and release["rounds"] == run.rounds
    assert "value" not in release and "estimate" not in release


# ------------------------------------------------------------------ collection window
def ldp_quantized(epsilon: float = 1.0) -> Any:
    return registry.make("ldp-quantized", auc_kernel(), epsilon=epsilon, k=8,
                         bounds=(0.0, 1.0))


def send(certs: Path, address: str, identities: list[str], rows: np.ndarray,
         make: Any = ldp_quantized) -> list[Any]:
    """Devices report one row each, at once; returns each outcome (or its error)."""
    async def every() -> list[Any]:
        return await asyncio.gather(*(
            report_async(make(), rows[i:i + 1], load_credentials(certs, name), address,
                         rng=SEED, timeout=GUARD)
            for i, name in enumerate(identities)), return_exceptions=True)
    return asyncio.run(every())


def test_a_collection_window_is_scraped_during_and_after_and_logs_hold_no_data(certs,
                                                                              log_lines):
    n = 6
    rows = secret_records(n)
    observer = Observer("127.0.0.1:0")
    ready, outcome = threading.Event(), {}

    def server() -> None:
        try:
            outcome["run"] = collect(ldp_quantized(), load_credentials(certs, "server"),
                                     Window(GUARD, quorum=n, linger=0.0), rng=SEED,
                                     observer=observer,
                                     on_ready=lambda port: (outcome.update(port=port),
                                                            ready.set()))
        except Exception as exc:
            outcome["run"] = exc
            ready.set()

    thread = threading.Thread(target=server)
    thread.start()
    try:
        assert ready.wait(GUARD) and "port" in outcome, outcome
        address = f"127.0.0.1:{outcome['port']}"
        first = send(certs, address, [f"party-{i}" for i in range(3)], rows[:3])
        assert not any(isinstance(s, Exception) for s in first), first
        refused = [
            # A second report of another record (the same frame again would be
            # acknowledged: a resend after a lost answer counts once).
            *send(certs, address, ["party-0"], rows[1:2]),
            *send(certs, address, ["party-3"], rows[3:4],
                  make=lambda: ldp_quantized(epsilon=2.0))]  # another configuration
        assert all(isinstance(s, NetworkRunError) for s in refused), refused

        during = scrape(observer)
        assert value(during, "fedustat_parties_joined") == 3
        assert value(during, "fedustat_reports_accepted_total") == 3
        assert value(during, "fedustat_rows") == 3
        for reason in ("duplicate", "configuration"):
            assert value(during, "fedustat_reports_refused_total", reason=reason) == 1, reason
        assert value(during, "fedustat_run_state", fedustat_run_state="collecting") == 1
        assert value(during, "fedustat_parties_expected") == n  # the quorum
        assert value(during, "fedustat_store_bytes") > 0  # the identities' database
        assert value(during, "fedustat_stage_timeout_seconds") == GUARD
        status, body = fetch(observer, "/health")
        assert status == 200 and json.loads(body)["state"] == "collecting"

        rest = send(certs, address, [f"party-{i}" for i in range(3, n)], rows[3:])
        assert not any(isinstance(s, Exception) for s in rest), rest
        thread.join(GUARD)
        assert not thread.is_alive(), "the collection server did not stop"
    finally:
        thread.join(GUARD)
    run = outcome["run"]
    assert not isinstance(run, Exception), run

    after = scrape(observer)
    text = fetch(observer, "/metrics")[1]
    try:
        assert value(after, "fedustat_released") == 1
        assert value(after, "fedustat_reports_accepted_total") == run.n_reports == n
        assert value(after, "fedustat_received_bytes_total") == run.wire_bytes
        assert {reason: value(after, "fedustat_reports_refused_total", reason=reason)
                for reason in run.refused} == run.refused
        status, body = fetch(observer, "/health")
        assert status == 200 and json.loads(body)["state"] == "released"
    finally:
        observer.stop()

    events = assert_no_data(log_lines(), text)
    names = [e["event"] for e in events]
    assert names[0] == "start" and names[-1] == "release"
    assert sorted(e["identity"] for e in events if e["event"] == "report") == sorted(
        f"party-{i}" for i in range(n))
    assert sorted(e["reason"] for e in events if e["event"] == "refused") == [
        "configuration", "duplicate"]
    close = next(e for e in events if e["event"] == "window_close")
    assert (close["closed_by"], close["reports"], close["refused"]) == ("quorum", n, 2)


def test_a_failed_window_is_logged_and_its_health_says_so(certs, log_lines):
    observer = Observer("127.0.0.1:0")
    try:
        with pytest.raises(NetworkRunError, match="with no report"):
            collect(ldp_quantized(), load_credentials(certs, "server"),
                    Window(0.5, linger=0.0), observer=observer)
        status, body = fetch(observer, "/health")
        assert status == 503 and json.loads(body)["state"] == "failed"
        metrics = scrape(observer)
        assert value(metrics, "fedustat_failed") == 1
        assert value(metrics, "fedustat_released") == 0
    finally:
        observer.stop()
    events = assert_no_data(log_lines(), "")
    failure = events[-1]
    assert failure["event"] == "failure" and failure["level"] == "error"
    assert "with no report" in failure["reason"]
    assert [e["closed_by"] for e in events if e["event"] == "window_close"] == ["deadline"]


# ------------------------------------------------------------------ the CLI
def test_fedustat_collect_serves_metrics_and_json_logs(tmp_path, certs):
    from test_network_processes import Processes

    n = 2
    rows = secret_records(n)
    options = ["--statistic", "auc", "--protocol", "ldp-quantized", "--epsilon", "1",
               "--param", "k=8", "--bounds", "0,1", "--certs", str(certs), "--seed",
               str(SEED)]
    group = Processes()
    try:
        server = group.start("collect", *options, "--window", str(GUARD), "--quorum", str(n),
                             "--linger", "0", "--listen", "127.0.0.1:0",
                             "--metrics-address", "127.0.0.1:0", "--log-format", "json")
        line = server.stdout.readline()
        match = re.search(r"listening on port (\d+).*metrics on http://([\d.:]+)/metrics",
                          line)
        assert match, f"the server did not start: {line!r}"
        with urllib.request.urlopen(f"http://{match.group(2)}/health", timeout=30) as answer:
            assert json.loads(answer.read())["state"] == "collecting"
        sent = send(certs, f"127.0.0.1:{match.group(1)}", ["party-0", "party-1"], rows)
        assert not any(isinstance(s, Exception) for s in sent), sent
        out, err = server.communicate(timeout=GUARD)
        assert server.returncode == 0, err
    finally:
        group.stop_all()
    # gRPC may print its own lines first; ours are the JSON objects.
    lines = [x for x in err.splitlines() if x.startswith("{")]
    events = assert_no_data(lines, out)
    assert [e["event"] for e in events] == ["start", "window_close", "release"]
    assert events[0]["metrics_address"] == match.group(2)


def test_a_bad_metrics_address_is_named(tmp_path, certs):
    import subprocess

    from test_network_processes import FEDUSTAT

    done = subprocess.run([*FEDUSTAT, "serve", "--statistic", "auc", "--protocol",
                           "central-laplace", "--epsilon", "1", "--certs", str(certs),
                           "--parties", "2", "--metrics-address", "localhost"],
                          capture_output=True, text=True, timeout=GUARD)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "error: --metrics-address must be HOST:PORT with a port 0-65535 (0 picks a free "
        "one), e.g. 127.0.0.1:9464; got 'localhost'")


# ------------------------------------------------------------------ units
def test_addresses_default_to_localhost_and_bad_ones_are_named():
    assert parse_address(":9464") == ("127.0.0.1", 9464)
    assert parse_address("0.0.0.0:0") == ("0.0.0.0", 0)
    assert parse_address("[::1]:9464") == ("::1", 9464)
    for bad in ("9464", "host:port", "127.0.0.1:70000"):
        with pytest.raises(ValueError, match=r"^metrics_address must be HOST:PORT"):
            parse_address(bad)
    with pytest.raises(ValueError, match="give metrics_address or observer, not both"):
        serve(central(), 1, None, metrics_address="127.0.0.1:0", observer=Observer())


def test_an_undeclared_log_field_is_refused():
    # A new field must be declared public in LOG_FIELDS before any event may carry it.
    with pytest.raises(ValueError, match=r"\['records'\] are not declared public"):
        Observer().event("join", identity="party-0", records=[0.1])


def test_text_logs_are_one_line_per_event():
    stream = io.StringIO()
    handler = configure_logging("text", "info", stream=stream)
    try:
        observer = Observer()
        observer.bind("collect", "window-1", "ldp-quantized", dict)
        observer.refused("duplicate", "party-3", "party-3 has already reported in this run")
        observer.reported("party-4", 100)  # debug: not at info
    finally:
        logging.getLogger(LOGGER).removeHandler(handler)
        logging.getLogger(LOGGER).setLevel(logging.NOTSET)
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(' warning refused server=collect run=window-1 identity=party-3 '
                         'reason=duplicate detail="party-3 has already reported in this run"')
    assert observer.counts()["refused"] == {"duplicate": 1}
    assert observer.counts()["accepted"] == 1
