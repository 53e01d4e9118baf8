"""Collection windows: devices send one report each, whenever they are online.

The papers' local protocols are one message per party (000's users, 003's clients): a
device randomizes its own record and sends the report once. :func:`collect` runs the
server of such a run on an event loop (gRPC's asyncio API, no thread per device): the
window opens when it starts and closes at its deadline or as soon as a quorum of reports
is in; the release is the protocol's release over the reports it accepted, and it states
their number and the window (``diagnostics["collection"]``). Which protocols may collect
this way is theirs to say (:meth:`~fedustat.protocols.base.Protocol.collection_rule`):
ldp-quantized with its bins fixed, ldp-ghazi likewise, ldp-tree and central-laplace.

Every device connects with its own certificate (mutual TLS; the name in it is its
identity, ``party-<i>``) and calls two methods, both raw bytes:

* ``Open``: the run's public terms (run id, the configuration and its fingerprint, the
  seconds left). The device compares the configuration with its own before any data step
  and names each option that differs.
* ``Report``: its wire frame (:mod:`fedustat.runtime.wire`, round 0) with the report its
  own step made from its record (the record is checked there, by the protocol's party
  step; a failure stays on the device). The server accepts one report per identity per
  run (a second is refused), refuses one after the close (and names that device in the
  result), and validates the frame against the identity the channel authenticated.

For protocols whose server step is a sum over parties (``distributed_round`` says
``"reduce"``: ldp-quantized's histogram, ldp-tree's), each accepted report is folded into
a running summary at once (``summarize_batch`` / ``combine_summaries``), so the server
holds the aggregate, not the reports; the identities that reported are kept in an SQLite
table on disk. Other protocols keep the accepted messages until the close.

With a ``store`` (a run directory, :mod:`fedustat.runtime.report_store`), every accepted
report is appended to Parquet partitions there instead (in batches, by a writer thread),
and the release is computed from them by the distributed engine
(:func:`fedustat.runtime.engine.stored.release_stored`): the server holds neither the
reports nor, for a reduction protocol, their sum.

With a seed (a study), device ``party-<i>`` draws from the simulator's stream of batch
``i`` and the server from stream 0, so a window in which devices ``0 .. n-1`` all report
releases the simulator's number for one record per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sqlite3
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedustat._validation import RandomLike, RecordCheckError, as_float_array, as_seed_sequence
from fedustat.protocols.base import Estimate, Message, Protocol, Role
from fedustat.runtime import report_store
from fedustat.runtime.network.certs import Credentials, party_index
from fedustat.runtime.network.observe import Observer, observed_by
from fedustat.runtime.network.service import (
    DEVICE_CHANNEL_OPTIONS,
    SERVER_OPTIONS,
    NetworkRunError,
    configuration_differences,
    configuration_hash,
    limit_heap_arenas,
    load_grpc,
    public_configuration,
    resolve_randomness,
)
from fedustat.runtime.simulate import merge_round
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

__all__ = ["CollectionRun", "DeviceReport", "Window", "collect", "report", "report_async"]

SERVICE = "fedustat.Collect"
OPEN = f"/{SERVICE}/Open"
REPORT = f"/{SERVICE}/Report"

#: How the server refuses a report of another run or configuration.
OTHER_CONFIGURATION = "the report was made for another run or configuration"
#: Most rows one device's report may carry (a device is one record; a small silo may
#: report a few in one frame).
MAX_DEVICE_ROWS = 1024


def _grpc() -> Any:
    return load_grpc("collection windows")


@dataclass(frozen=True)
class Window:
    """When a collection closes: ``seconds`` after it opens, or at ``quorum`` reports.

    ``linger``: seconds the server keeps answering after the close, telling late devices
    that the window closed (they are named in :attr:`CollectionRun.late`).
    """

    seconds: float
    quorum: int | None = None
    linger: float = 1.0

    def __post_init__(self) -> None:
        if not (isinstance(self.seconds, int | float) and 0 < float(self.seconds) < 1e7):
            raise ValueError(f"seconds must be a positive number of seconds, got "
                             f"{self.seconds!r}")
        if self.quorum is not None and (isinstance(self.quorum, bool)
                                        or not isinstance(self.quorum, int)
                                        or self.quorum < 1):
            raise ValueError(f"quorum must be a positive integer or None, got {self.quorum!r}")
        if not (isinstance(self.linger, int | float) and 0 <= float(self.linger) <= 3600):
            raise ValueError(f"linger must be 0 to 3600 seconds, got {self.linger!r}")


@dataclass(frozen=True)
class CollectionRun:
    """A closed window: the release and what happened at the door.

    ``refused`` counts refusals by their public reason; ``late`` names the devices that
    reported after the close (while the server lingered). ``wire_bytes`` are the report
    frames' bytes and ``payload_bytes`` the reports' bit-packed fields, over the accepted
    reports.
    """

    estimate: Estimate
    n_reports: int
    closed_by: str
    seconds: float
    late: tuple[str, ...]
    refused: dict[str, int]
    wire_bytes: int
    payload_bytes: int

    @property
    def framing_bytes_per_report(self) -> float:
        """Frame bytes beyond the payload, per accepted report."""
        return (self.wire_bytes - self.payload_bytes) / max(self.n_reports, 1)


def window_run(fingerprint: str) -> str:
    """The run id of a window, derived from its public configuration's fingerprint.

    A device computes it from its own configuration, so it reports in one call without
    asking first; a device configured otherwise names another run (and protocol) and its
    frame is refused. Replay needs no run-unique id here: the server accepts one report per
    authenticated identity, and only the device holds its key.
    """
    return "window-" + hashlib.sha256(fingerprint.encode()).hexdigest()[:16]


def _stream(rng: RandomLike, child: int) -> np.random.SeedSequence:
    """OS entropy without a seed; with one, the simulator's stream ``child`` (0: the
    server, ``1 + b``: batch ``b``), made without spawning from (mutating) the caller's."""
    if rng is None:
        return np.random.SeedSequence()
    root = as_seed_sequence(rng)
    return np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, child),
                                  pool_size=root.pool_size)


def _payload_bytes(message: Message) -> int:
    # The declared bits the cost accounting counts, per field rounded up to bytes, from the
    # message alone (wire.field_bytes re-packs the body: a second encoding per report).
    return sum((int(np.asarray(v).size) * int(message.bits_per_value[k]) + 7) // 8
               for k, v in message.fields.items())


class _Collector:
    """The window's state, touched only from the event loop (no locks)."""

    def __init__(self, protocol: Protocol, grade: str, window: Window, rng: RandomLike,
                 identities: Path, writer: report_store.ReportWriter | None = None) -> None:
        self.protocol = protocol
        self.grade = grade
        self.window = window
        self.configuration = public_configuration(protocol)
        self.fingerprint = configuration_hash(protocol.name, self.configuration)
        self.run = window_run(self.fingerprint)
        self.server_rng = np.random.default_rng(_stream(rng, 0))
        self.reduces, self.context = report_store.reduction_context(protocol)
        # With a store the accepted reports go to its partitions (the engine releases
        # from them); without one, a reduction keeps their running sum and any other
        # protocol the reports.
        self.writer = writer
        self.summary: Any = None
        self.messages: list[tuple[int, Message]] = []
        self.n_rows = 0
        self.wire_bytes = 0
        self.payload_bytes = 0
        self.refused: dict[str, int] = {}
        self.late: list[str] = []
        self.opened = time.monotonic()
        self.closed_by: str | None = None
        self.closed = asyncio.Event()
        # Metrics, health and event log (observe.py); collect gives it the window's.
        self.observer = Observer()
        self.store = sqlite3.connect(identities, isolation_level=None)
        self.store.execute("PRAGMA journal_mode=WAL")
        self.store.execute("CREATE TABLE IF NOT EXISTS reported "
                           "(identity TEXT PRIMARY KEY) WITHOUT ROWID")
        # A reopened run directory: its earlier reports count towards the quorum.
        self.n_reports = int(self.store.execute("SELECT COUNT(*) FROM reported"
                                                ).fetchone()[0])

    def close(self, why: str) -> None:
        if self.closed_by is None:
            self.closed_by = why
            self.closed.set()
            self.observer.event("window_close", closed_by=why, reports=self.n_reports,
                                rows=self.n_rows, refused=sum(self.refused.values()))

    def progress(self) -> dict[str, Any]:
        """The window's public progress for its metrics and health check (observe.py):
        read from the metrics listener's thread, so only numbers."""
        return {"state": "closed" if self.closed_by else "collecting", "round": 0,
                "arrived": self.n_reports, "expected": self.window.quorum or 0,
                "joined": self.n_reports, "rows": self.n_rows,
                "stage_seconds": time.monotonic() - self.opened,
                "stage_timeout": float(self.window.seconds)}

    def _refuse(self, context: Any, code: Any, reason: str, key: str) -> Any:
        self.refused[key] = self.refused.get(key, 0) + 1
        names = context.auth_context().get("x509_common_name") or [b""]
        self.observer.refused(key, names[0].decode("utf-8", errors="replace"), reason)
        return context.abort(code, reason)

    async def open(self, request: bytes, context: Any) -> bytes:
        left = max(0.0, float(self.window.seconds) - (time.monotonic() - self.opened))
        return json.dumps({"run": self.run, "fingerprint": self.fingerprint,
                           "configuration": self.configuration,
                           "closes_in": 0.0 if self.closed_by else left}).encode()

    async def report(self, request: bytes, context: Any) -> bytes:
        grpc = _grpc()
        names = context.auth_context().get("x509_common_name") or [b""]
        identity = names[0].decode("utf-8", errors="replace")
        if self.closed_by is not None:
            if len(self.late) < 100_000:
                self.late.append(identity)
            await self._refuse(context, grpc.StatusCode.FAILED_PRECONDITION,
                               f"{identity}: the collection window closed "
                               f"({self.closed_by}); the report was not counted", "late")
        index = party_index(identity)
        if index is None:
            await self._refuse(context, grpc.StatusCode.PERMISSION_DENIED,
                               f"{identity!r} is not a device identity of this deployment",
                               "identity")
        try:
            message = decode(request, Expectation(
                self.fingerprint, self.run, 0, "party", identity, Role.SERVER,
                party_ids=np.array([index], dtype=np.int64),
                max_elements=MAX_DEVICE_ROWS * 64)).message
            rows = len(np.asarray(message.parties))
            if not 1 <= rows <= MAX_DEVICE_ROWS or message.is_peer:
                raise WireError(identity, "parties", f"a report carries 1 to "
                                                     f"{MAX_DEVICE_ROWS} rows of its own")
            summary = (self.protocol.summarize_batch(message, self.context)
                       if self.reduces else None)
        except WireError as exc:
            if exc.field in ("run", "protocol"):  # a device configured otherwise
                await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT,
                                   f"{identity}: {OTHER_CONFIGURATION} ({exc})",
                                   "configuration")
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT,
                               f"{identity}: its report was refused: {exc}", "invalid")
        except (ValueError, TypeError) as exc:
            await self._refuse(context, grpc.StatusCode.INVALID_ARGUMENT,
                               f"{identity}: its report was refused: {exc}", "invalid")
        try:
            self.store.execute("INSERT INTO reported VALUES (?)", (identity,))
        except sqlite3.IntegrityError:
            await self._refuse(context, grpc.StatusCode.ALREADY_EXISTS,
                               f"{identity} has already reported in this run", "duplicate")
        if self.writer is not None:
            self.writer.append(message)
        elif self.reduces:
            self.summary = (summary if self.summary is None
                            else self.protocol.combine_summaries(self.summary, summary))
        else:
            self.messages.append((index, message))
        self.n_reports += 1
        self.n_rows += rows
        self.wire_bytes += len(request)
        self.observer.reported(identity, len(request))
        self.payload_bytes += _payload_bytes(message)
        if self.window.quorum is not None and self.n_reports >= self.window.quorum:
            self.close("quorum")
        return b"A"

    def _release_stored(self, engine: Any) -> tuple[Any, int]:
        from fedustat.runtime.engine.driver import EngineError
        from fedustat.runtime.engine.stored import release_stored

        try:
            return release_stored(self.protocol, self.writer.directory.parent, engine,
                                  server_rng=self.server_rng)
        except EngineError as exc:
            raise NetworkRunError(f"the engine could not release the stored reports "
                                  f"({exc}); they stay in {self.writer.directory.parent}"
                                  ) from None

    def release(self, engine: Any = None) -> Estimate:
        """The release over the accepted reports: from the running sum or the kept
        messages, or, with a store, computed by ``engine`` from its partitions."""
        if self.n_reports == 0:
            raise NetworkRunError(f"the collection window closed ({self.closed_by}) with no "
                                  "report; no release")
        n = self.n_rows
        protocol = self.protocol.configure(n)
        state = protocol.init_server(n)
        try:
            if self.writer is not None:
                out, n = self._release_stored(engine)
            elif self.reduces:
                _, out = protocol.server_step_reduced(state, self.summary, self.server_rng)
            else:
                merged = merge_round([m for _, m in sorted(self.messages,
                                                           key=lambda pair: pair[0])], [])
                _, out = protocol.server_step(state, merged, self.server_rng)
        except NetworkRunError:
            raise
        except (ValueError, TypeError, RuntimeError, ArithmeticError) as exc:
            told = exc.check if isinstance(exc, RecordCheckError) else exc
            raise NetworkRunError(f"the server step refused the reports: {told}; "
                                  "no release") from None
        if not isinstance(out, Estimate):
            raise NetworkRunError(f"protocol {protocol.name!r} answered the reports with "
                                  "another round; it cannot collect in a window")
        if out.noise != "none":
            out = replace(out, noise=self.grade)
        seconds = time.monotonic() - self.opened
        return replace(out, diagnostics={**out.diagnostics, "collection": {
            "n_reports": self.n_reports, "n_parties": n, "closed_by": self.closed_by,
            "window_seconds": float(self.window.seconds), "quorum": self.window.quorum,
            "open_seconds": round(seconds, 3)}})


def _release_stored(collector: _Collector, engine: Any) -> Estimate:
    """Close the store's writer and release from its partitions on ``engine`` (started
    here when it names a local cluster, and closed after)."""
    from fedustat.runtime.engine.driver import EngineError, resolve_engine

    collector.writer.close()
    try:
        dask_engine, owned = resolve_engine("local" if engine is None else engine)
    except (ImportError, ValueError, EngineError) as exc:
        raise NetworkRunError(f"cannot start the engine that releases the stored reports "
                              f"({exc}); they stay in {collector.writer.directory.parent}"
                              ) from None
    try:
        return collector.release(dask_engine)
    finally:
        if owned:
            dask_engine.close()


async def _collect(protocol: Protocol, grade: str, credentials: Credentials, window: Window,
                   address: str, rng: RandomLike, on_ready: Any, identities: Path,
                   writer: report_store.ReportWriter | None, engine: Any,
                   observed: tuple[Observer, bool]) -> CollectionRun:
    grpc = _grpc()
    limit_heap_arenas()
    collector = _Collector(protocol, grade, window, rng, identities, writer)
    observer, owned = observed
    collector.observer = observer
    # The store: the run directory, or the identities' database without one.
    observer.bind("collect", collector.run, protocol.name, collector.progress,
                  store=identities.parent)
    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Open": grpc.unary_unary_rpc_method_handler(collector.open),
        "Report": grpc.unary_unary_rpc_method_handler(collector.report),
    })
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    port = server.add_secure_port(address, grpc.ssl_server_credentials(
        [(credentials.key, credentials.certificate)], root_certificates=credentials.ca,
        require_client_auth=True))
    if port == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    try:
        collector.opened = time.monotonic()
        observer.start()
        observer.event("start", protocol=protocol.name, address=f"{address.rpartition(':')[0]}"
                       f":{port}", metrics_address=observer.address,
                       window_seconds=float(window.seconds), quorum=window.quorum,
                       reports=collector.n_reports)
        if on_ready is not None:
            on_ready(port)
        try:
            await asyncio.wait_for(collector.closed.wait(), timeout=float(window.seconds))
        except TimeoutError:
            collector.close("deadline")
        if writer is None:
            estimate = collector.release()
        else:  # off the loop, which keeps telling late devices that the window closed
            estimate = await asyncio.to_thread(_release_stored, collector, engine)
        seconds = time.monotonic() - collector.opened
        observer.released(reports=collector.n_reports, rows=collector.n_rows,
                          seconds=round(seconds, 3), refused=sum(collector.refused.values()))
        await asyncio.sleep(float(window.linger))
    except Exception as exc:
        # A refusal's reasons are public; another error is named by its kind only.
        observer.failed(str(exc) if isinstance(exc, NetworkRunError) else type(exc).__name__)
        raise
    finally:
        await server.stop(grace=0.5)
        observer.serving = False
        if owned:
            observer.stop()
        collector.store.close()
        if writer is not None:
            writer.close()  # a failed run still leaves its accepted reports on disk
    return CollectionRun(estimate, collector.n_reports, str(collector.closed_by), seconds,
                         tuple(collector.late), dict(collector.refused),
                         collector.wire_bytes, collector.payload_bytes)


def collect(protocol: Protocol, credentials: Credentials, window: Window, *,
            address: str = "127.0.0.1:0", rng: RandomLike = None, on_ready: Any = None,
            store: str | Path | None = None, engine: Any = None,
            rows_per_partition: int = report_store.DEFAULT_ROWS_PER_PARTITION,
            metrics_address: str | None = None, observer: Observer | None = None
            ) -> CollectionRun:
    """Serve a collection window of ``protocol``; return its release when it closes.

    Parameters
    ----------
    protocol:
        A protocol whose :meth:`~fedustat.protocols.base.Protocol.collection_rule` allows
        one-shot reports, configured exactly as the devices configure theirs.
    credentials:
        The server's certificate, key and the deployment CA (``load_credentials``).
    window:
        When the window closes (:class:`Window`).
    address:
        ``host:port`` to listen on; port 0 picks a free port (``on_ready`` gets it).
    rng:
        ``None`` (default): deployment randomness. A seed asks for the simulator's streams
        explicitly (a study).
    store:
        ``None`` (default): the reports are held in memory (a reduction protocol's
        running sum, or the messages), and the identities that reported in an SQLite
        file removed at the end. A directory: the run directory
        (:mod:`fedustat.runtime.report_store`), made if missing: the identities' table
        (``reported.sqlite``) and the accepted reports in Parquet partitions of
        ``rows_per_partition`` rows, written as they arrive; the release is computed from
        them by ``engine``. A directory holding another run is refused.
    engine:
        With a store, the Dask engine that releases from it: ``None`` or ``"local"`` (a
        local cluster of 2 worker processes, started at the close), a scheduler address
        ``"tcp://host:port"``, a ``DaskEngine`` or a ``distributed.Client``.
    rows_per_partition:
        With a store, report rows per partition file (the rest is written at the close).
    metrics_address:
        ``host:port`` to serve ``/metrics`` (Prometheus) and ``/health`` on while the
        window is open (off by default; port 0 picks a free port, named in the ``start``
        log event); see docs/deployment-guide.md, "Operating a run".
    observer:
        Instead of ``metrics_address``: an :class:`~fedustat.runtime.network.observe.
        Observer` the caller owns (its endpoint outlives the run; ``observer.port``).

    Examples
    --------
    >>> from fedustat.runtime.network.collect import Window
    >>> Window(seconds=60, quorum=10_000).quorum
    10000
    """
    rule = protocol.collection_rule()
    if not rule.proceed:
        raise ValueError(f"{protocol.name} cannot collect one-shot reports in a window: "
                         f"{rule.reason}")
    if not isinstance(window, Window):
        raise TypeError(f"window must be a Window, got {type(window).__name__}")
    if store is None and engine is not None:
        raise ValueError("engine= releases a stored collection: give store= too (a run "
                         "directory)")
    protocol, grade = resolve_randomness(protocol, rng)
    observed = observed_by(metrics_address, observer)
    writer = None
    if store is not None:
        configuration = public_configuration(protocol)
        fingerprint = configuration_hash(protocol.name, configuration)
        run = window_run(fingerprint)
        directory = report_store.open_store(store, run, protocol.name, fingerprint,
                                            configuration)
        writer = report_store.ReportWriter(directory, run,
                                           rows_per_partition=rows_per_partition)
    with tempfile.TemporaryDirectory(prefix="fedustat-collect-") as scratch:
        identities = (writer.directory.parent if writer is not None else Path(scratch)
                      ) / report_store.IDENTITIES
        return asyncio.run(_collect(protocol, grade, credentials, window, address, rng,
                                    on_ready, identities, writer, engine, observed))


@dataclass(frozen=True)
class DeviceReport:
    """What a device learns: its identity, the run it reported in, the frame's bytes."""

    identity: str
    run: str
    wire_bytes: int


def _prepared(protocol: Protocol, records: Any, identity: str, rng: RandomLike
              ) -> tuple[str, bytes]:
    """The device's run id and report frame, made by its own step from its records."""
    mark = configuration_hash(protocol.name, public_configuration(protocol))
    index = party_index(identity)
    if index is None:
        raise NetworkRunError(f"{identity!r} is not a device identity (party-<i>)")
    rows = as_float_array(records, "records", ndim=(1, 2))
    rows = rows[:, None] if rows.ndim == 1 else rows
    if not 1 <= rows.shape[0] <= MAX_DEVICE_ROWS:
        raise ValueError(f"a device reports 1 to {MAX_DEVICE_ROWS} rows, got {rows.shape[0]}")
    owner = np.full(rows.shape[0], index, dtype=np.int64)
    party_rng = np.random.default_rng(_stream(rng, index + 1))
    try:
        state = protocol.init_parties(rows, owner)
        _, message = protocol.party_step(state, None, party_rng)
    except RecordCheckError as exc:  # stays on the device: nothing is sent
        raise NetworkRunError(f"{identity}: its records failed validation ({exc.check}): "
                              f"{exc}") from None
    if message.is_peer or message.receiver is not Role.SERVER:
        raise NetworkRunError(f"protocol {protocol.name!r} does not report to the server "
                              "in one message")
    run = window_run(mark)
    return run, encode(Envelope(mark, run, 0, "party", identity, message))


def _refusal(protocol: Protocol, identity: str, details: str, terms: Any) -> NetworkRunError:
    """Why the server refused a report; for a frame of another run, the options that
    differ (from the server's public terms, fetched after the refusal)."""
    if terms is not None:
        mine = public_configuration(protocol)
        differing = configuration_differences(mine, terms.get("configuration") or {})
        if differing:
            return NetworkRunError(f"{identity}: the collection runs another configuration "
                                   f"({'; '.join(differing)}); the server refused its report")
    return NetworkRunError(f"{identity}: {details}")


def _other_run(code: Any, details: str, grpc: Any) -> bool:
    return code == grpc.StatusCode.INVALID_ARGUMENT and OTHER_CONFIGURATION in details


def _device_protocol(protocol: Protocol, rng: RandomLike) -> Protocol:
    rule = protocol.collection_rule()
    if not rule.proceed:
        raise ValueError(f"{protocol.name} cannot report one-shot in a window: {rule.reason}")
    return resolve_randomness(protocol, rng)[0]


def _channel_credentials(grpc: Any, credentials: Credentials) -> Any:
    return grpc.ssl_channel_credentials(credentials.ca, credentials.key,
                                        credentials.certificate)


def report(protocol: Protocol, records: Any, credentials: Credentials, server: str, *,
           rng: RandomLike = None, timeout: float = 60.0) -> DeviceReport:
    """Send this device's one report to the collection window served at ``server``.

    ``records`` (usually one record) are checked by the protocol's own party step here;
    a failure raises here and nothing is sent. The report goes in one call: its run id
    comes from the device's own configuration (:func:`window_run`); a server running
    another configuration refuses it, and the error names each option that differs.
    ``rng=None``: deployment randomness; a seed asks for the simulator's stream of this
    device's batch (a study). The call waits up to ``timeout`` seconds for the server.
    """
    grpc = _grpc()
    protocol = _device_protocol(protocol, rng)
    identity = credentials.identity
    run, frame = _prepared(protocol, records, identity, rng)
    with grpc.secure_channel(server, _channel_credentials(grpc, credentials),
                             options=DEVICE_CHANNEL_OPTIONS) as channel:
        try:
            channel.unary_unary(REPORT)(frame, timeout=timeout, wait_for_ready=True)
        except grpc.RpcError as exc:
            details = str(exc.details() or exc.code().name)
            terms = None
            if _other_run(exc.code(), details, grpc):
                with contextlib.suppress(grpc.RpcError, ValueError):
                    terms = json.loads(channel.unary_unary(OPEN)(b"", timeout=timeout))
            raise _refusal(protocol, identity, details, terms) from None
    return DeviceReport(identity, run, len(frame))


async def report_async(protocol: Protocol, records: Any, credentials: Credentials,
                       server: str, *, rng: RandomLike = None, timeout: float = 60.0
                       ) -> DeviceReport:
    """:func:`report` on the caller's event loop (many devices from one process)."""
    grpc = _grpc()
    protocol = _device_protocol(protocol, rng)
    identity = credentials.identity
    run, frame = _prepared(protocol, records, identity, rng)
    async with grpc.aio.secure_channel(server, _channel_credentials(grpc, credentials),
                                       options=DEVICE_CHANNEL_OPTIONS) as channel:
        try:
            await channel.unary_unary(REPORT)(frame, timeout=timeout, wait_for_ready=True)
        except grpc.RpcError as exc:
            details = str(exc.details() or exc.code().name)
            terms = None
            if _other_run(exc.code(), details, grpc):
                with contextlib.suppress(grpc.RpcError, ValueError):
                    terms = json.loads(await channel.unary_unary(OPEN)(b"",
                                                                       timeout=timeout))
            raise _refusal(protocol, identity, details, terms) from None
    return DeviceReport(identity, run, len(frame))
