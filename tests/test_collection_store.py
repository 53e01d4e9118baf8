"""A collection window with a store: reports in Parquet partitions, released on the engine.

The server runs in a thread, the devices on one event loop (each its own certificate and
TLS connection); the engine is an in-process Dask cluster (one worker thread, no
dashboard), so the tests start no extra processes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("pyarrow")
pytest.importorskip("distributed")

from fedustat.cli import main
from fedustat.protocols import registry
from fedustat.runtime.engine import DaskEngine
from fedustat.runtime.network import (
    Window,
    collect,
    create_deployment,
    load_credentials,
    report_async,
)
from fedustat.runtime.report_store import (
    REPORTS,
    StoreError,
    read_manifest,
    stored_partitions,
    stored_rows,
)
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel
from test_collection import CollectionServer

SEED = 11
DEVICES = 23
ROWS_PER_PARTITION = 5
WINDOW = 120.0  # a hang guard: the windows close at their quorum


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    return create_deployment(tmp_path_factory.mktemp("store-devices"), 40)


@pytest.fixture(scope="module")
def engine():
    import distributed

    client = distributed.Client(processes=False, n_workers=1, threads_per_worker=1,
                                dashboard_address=":0")
    try:
        yield DaskEngine(client)
    finally:
        client.close()


def _records(n: int, integer: bool = False) -> np.ndarray:
    rng = np.random.default_rng(4)
    scores = rng.integers(0, 16, n).astype(float) if integer else rng.random(n)
    return np.column_stack([scores, np.arange(n) % 2])


class Server(CollectionServer):
    """``collect`` in a thread, closing at ``quorum`` reports; ``report`` drives devices."""

    def __init__(self, protocol: Any, certs: Path, quorum: int, **options: Any) -> None:
        super().__init__(protocol, certs, Window(WINDOW, quorum=quorum, linger=0.0),
                         rng=SEED, **options)
        assert self.port is not None, self.outcome

    def report(self, make: Any, rows: np.ndarray, certs: Path, first: int = 0) -> None:
        async def every() -> list[Any]:
            return await asyncio.gather(*(
                report_async(make(), rows[i:i + 1],
                             load_credentials(certs, f"party-{first + i}"),
                             f"localhost:{self.port}", rng=SEED, timeout=60.0)
                for i in range(rows.shape[0])), return_exceptions=True)
        failed = [s for s in asyncio.run(every()) if isinstance(s, Exception)]
        assert not failed, failed[:3]

    def result(self) -> Any:
        outcome = super().result()
        assert not isinstance(outcome, Exception), outcome
        return outcome


CASES = [
    ("ldp-quantized", {"k": 8, "bounds": (0.0, 1.0)}, False),  # a reduction
    ("ldp-tree", {"d": 16}, True),  # a reduction; a report is a row of bits
    ("central-laplace", {}, False),  # gathered: the curator's step needs every record
]


@pytest.mark.parametrize(("name", "params", "integer"), CASES, ids=[c[0] for c in CASES])
def test_a_stored_collection_released_on_the_engine_equals_the_in_memory_one(
        tmp_path, certs, engine, name, params, integer):
    rows = _records(DEVICES, integer)

    def make() -> Any:
        return registry.make(name, auc_kernel(), epsilon=1.0, **params)

    stored = Server(make(), certs, DEVICES, run_dir=tmp_path / "run", partitions=True,
                    engine=engine,
                    rows_per_partition=ROWS_PER_PARTITION)
    stored.report(make, rows, certs)
    from_store = stored.result()
    in_memory = Server(make(), certs, DEVICES)
    in_memory.report(make, rows, certs)
    held = in_memory.result()
    expected = simulate(make(), rows, rng=SEED, batch_size=[1] * DEVICES)
    for run in (from_store, held):
        np.testing.assert_equal(run.estimate.value, expected.value)
        np.testing.assert_equal(run.estimate.std_error, expected.std_error)
    assert from_store.estimate.diagnostics == held.estimate.diagnostics | {
        "collection": from_store.estimate.diagnostics["collection"]}
    assert from_store.estimate.diagnostics["collection"]["n_parties"] == DEVICES
    # Written in batches: full partitions of 5 rows, the rest at the close.
    paths = stored_partitions(tmp_path / "run")
    assert len(paths) == -(-DEVICES // ROWS_PER_PARTITION) == 5
    assert stored_rows(paths) == [5, 5, 5, 5, 3]
    assert not list((tmp_path / "run" / REPORTS).glob("*.tmp"))


def test_partitions_are_written_while_the_window_is_open(tmp_path, certs, engine):
    def make() -> Any:
        return registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8,
                             bounds=(0.0, 1.0))

    rows = _records(12)
    server = Server(make(), certs, 12, run_dir=tmp_path / "run", partitions=True,
                    engine=engine,
                    rows_per_partition=ROWS_PER_PARTITION)
    server.report(make, rows[:11], certs)
    # 11 of 12 reports are in: two full partitions are written by the writer thread
    # before the close (polled; the hang guard is generous).
    deadline = time.monotonic() + 60
    while len(stored_partitions(tmp_path / "run")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stored_rows(stored_partitions(tmp_path / "run")) == [5, 5]
    assert server.thread.is_alive()  # still open: the quorum is 12
    server.report(make, rows[11:], certs, first=11)
    run = server.result()
    assert stored_rows(stored_partitions(tmp_path / "run")) == [5, 5, 2]
    assert run.n_reports == 12
    assert read_manifest(tmp_path / "run").protocol == "ldp-quantized"


def test_a_store_holding_another_run_is_refused_by_name(tmp_path, certs, engine):
    def make(epsilon: float) -> Any:
        return registry.make("ldp-quantized", auc_kernel(), epsilon=epsilon, k=8,
                             bounds=(0.0, 1.0))

    server = Server(make(1.0), certs, 2, run_dir=tmp_path / "run", partitions=True,
                    engine=engine)
    server.report(lambda: make(1.0), _records(2), certs)
    held = read_manifest(tmp_path / "run").run
    assert server.result().n_reports == 2
    with pytest.raises(StoreError, match=rf"holds another run \({held}, protocol "
                                         r"ldp-quantized; this window is window-\w+, "
                                         r"ldp-quantized\) with other options \(epsilon = "
                                         r"2.0 \(given\) vs 1.0 \(run directory\)\); "
                                         r"resume it with its own options, or give a new "
                                         r"directory, one per run$"):
        collect(make(2.0), load_credentials(certs, "server"),
                Window(WINDOW, quorum=2, linger=0.0), rng=SEED,
                run_dir=tmp_path / "run", partitions=True,
                    engine=engine)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="is not empty and holds no collection run"):
        collect(make(1.0), load_credentials(certs, "server"), Window(5.0),
                run_dir=tmp_path / "other", partitions=True,
                engine=engine)


def test_engine_without_partitions_is_refused(certs, engine):
    protocol = registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8,
                             bounds=(0.0, 1.0))
    with pytest.raises(ValueError, match="engine= releases from partitions: give "
                                         "partitions=True too"):
        collect(protocol, load_credentials(certs, "server"), Window(5.0), engine=engine)
    with pytest.raises(ValueError, match="durable=False keeps nothing on disk: drop "
                                         "run_dir= and partitions="):
        collect(protocol, load_credentials(certs, "server"), Window(5.0), durable=False,
                partitions=True)


@pytest.mark.parametrize("where", ["file", "under-a-file"])
def test_a_bad_run_directory_fails_with_one_line(tmp_path, certs, capsys, where):
    blocker = tmp_path / "taken"
    blocker.write_text("x")
    store = blocker if where == "file" else blocker / "run"
    with pytest.raises(SystemExit) as stopped:
        main(["collect", "--statistic", "auc", "--protocol", "ldp-quantized", "--param",
              "k=8", "--bounds", "0,1", "--epsilon", "1", "--certs", str(certs),
              "--window", "5", "--listen", "127.0.0.1:0", "--run-dir", str(store)])
    message = str(stopped.value.code)
    expected = (f"error: run directory {str(store)!r} is a file; give a directory (it is "
                "made if missing)" if where == "file" else
                f"error: run directory {str(store)!r}: cannot make it (Not a "
                "directory); give a writable directory")
    assert message == expected


def test_partitions_behind_the_database_are_completed_from_it(tmp_path, certs, engine):
    # The state a crash leaves: six reports committed to the run's database, only the
    # first three in complete partitions. The restarted window writes the other three
    # again from the database (none lost, none twice) and releases the simulator's number.
    from fedustat.protocols.base import Role
    from fedustat.runtime import report_store as rs
    from fedustat.runtime.network.collect import _prepared, _terms
    from fedustat.runtime.network.service import configuration_hash, public_configuration
    from fedustat.runtime.wire import Expectation, decode

    def make() -> Any:
        return registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8,
                             bounds=(0.0, 1.0))

    rows = _records(6)
    protocol = make().for_run(SEED)
    configuration = public_configuration(protocol)
    fingerprint = configuration_hash(protocol.name, configuration)
    window = Window(WINDOW, quorum=6, linger=0.0)
    frames = [_prepared(protocol, rows[i:i + 1], f"party-{i}", SEED) for i in range(6)]
    run = frames[0][0]
    rs.open_store(tmp_path / "run", run, protocol.name, fingerprint, configuration,
                  _terms(window, SEED, True), opened_at=time.time(), partitions=True)
    ledger = rs.ReportLedger(tmp_path / "run" / rs.DATABASE)
    numbers = ledger.commit([(f"party-{i}", rs.frame_digest(f), f)
                             for i, (_, f) in enumerate(frames)])
    ledger.close()
    writer = rs.ReportWriter(tmp_path / "run", run, rows_per_partition=2)
    for i, (number, (_, frame)) in enumerate(zip(numbers[:3], frames[:3], strict=True)):
        writer.append(decode(frame, Expectation(fingerprint, run, 0, "party", f"party-{i}",
                                                Role.SERVER, party_ids=np.array([i]))
                             ).message, number)
    writer.close()
    assert stored_rows(stored_partitions(tmp_path / "run")) == [2, 1]
    resumed = collect(make(), load_credentials(certs, "server"), window, rng=SEED,
                      run_dir=tmp_path / "run", partitions=True, engine=engine,
                      rows_per_partition=2)
    assert resumed.n_reports == 6 and resumed.closed_by == "quorum"
    assert stored_rows(stored_partitions(tmp_path / "run")) == [2, 1, 2, 1]
    expected = simulate(make(), rows, rng=SEED, batch_size=[1] * 6)
    np.testing.assert_equal(resumed.estimate.value, expected.value)
    np.testing.assert_equal(resumed.estimate.std_error, expected.std_error)


def test_both_servers_cap_the_heap_arenas_before_they_start(monkeypatch, certs, tmp_path):
    # A server's resident size grew with the devices served through buffers gRPC's
    # threads freed into glibc's per-thread arenas; each server caps the arenas first.
    import importlib

    from fedustat.runtime.network import serve
    from fedustat.runtime.network.service import limit_heap_arenas

    assert limit_heap_arenas() is True  # glibc, as on the machines measured

    class CappedError(Exception):
        pass

    def refuse() -> bool:
        raise CappedError

    for name in ("collect", "server"):
        monkeypatch.setattr(importlib.import_module(f"fedustat.runtime.network.{name}"),
                            "limit_heap_arenas", refuse)
    protocol = registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=4,
                             bounds=(0.0, 1.0))
    with pytest.raises(CappedError):
        collect(protocol, load_credentials(certs, "server"), Window(5.0), rng=SEED,
                run_dir=tmp_path / "run")
    with pytest.raises(CappedError):
        serve(protocol, 2, load_credentials(certs, "server"), rng=SEED)


def test_engine_without_store_on_the_command_line_fails_with_one_line(certs):
    with pytest.raises(SystemExit) as stopped:
        main(["collect", "--statistic", "auc", "--protocol", "ldp-quantized", "--param",
              "k=8", "--bounds", "0,1", "--epsilon", "1", "--certs", str(certs),
              "--window", "5", "--engine", "tcp://127.0.0.1:1"])
    assert str(stopped.value.code) == ("error: --engine releases from partitions: give "
                                       "--partitions too")
