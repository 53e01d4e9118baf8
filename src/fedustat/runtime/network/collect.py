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

**Nothing accepted is lost.** Every window works in a run directory
(:mod:`fedustat.runtime.report_store`; a new one is made and named in the result when
the caller names none). Each accepted report (the device's identity, its frame and the
frame's digest) is committed to the run's SQLite database by one writer in group commits
of about 10 ms, and the device is acknowledged only after its commit; one report per
identity per run is enforced there. A device that resends the same frame (after a lost
acknowledgement) is acknowledged again and counted once; another frame from an identity
that reported is refused. A server restarted on the same run directory resumes the
window: the same run, its original deadline (the wall-clock time it opened is recorded)
and quorum, the running summary rebuilt from the stored reports; a finished run's
release is stored and read back, not drawn again. ``durable=False`` keeps the reports
in memory only (a crash loses them): for comparison, not for deployments.

For protocols whose server step is a sum over parties (``distributed_round`` says
``"reduce"``: ldp-quantized's histogram, ldp-tree's), each committed report is folded
into a running summary (``summarize_batch`` / ``combine_summaries``), so the server's
memory holds the aggregate, not the reports. Other protocols keep the accepted messages
until the close. With ``partitions=True`` the committed reports are also appended to
Parquet partitions in the run directory (in batches, by a writer thread) and the
release is computed from them by the distributed engine
(:func:`fedustat.runtime.engine.stored.release_stored`): the server holds neither the
reports nor, for a reduction protocol, their sum.

Devices (:func:`report`, :func:`report_async`) resend the same frame with jittered
backoff while the server is unreachable or restarting, within their own deadline; the
record is randomized once (a second randomization of one record would spend its budget
again).

With a seed (a study), device ``party-<i>`` draws from the simulator's stream of batch
``i`` and the server from stream 0, so a window in which devices ``0 .. n-1`` all report
releases the simulator's number for one record per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import random
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedustat._lazy import warm_up
from fedustat._validation import RandomLike, RecordCheckError, as_float_array, as_seed_sequence
from fedustat.protocols.base import Estimate, Message, Protocol, Role
from fedustat.runtime import report_store
from fedustat.runtime.network.certs import Credentials, party_index
from fedustat.runtime.network.observe import Observer, observed_by
from fedustat.runtime.network.run_journal import default_run_root
from fedustat.runtime.network.service import (
    DEVICE_CHANNEL_OPTIONS,
    SERVER_OPTIONS,
    NetworkRunError,
    configuration_differences,
    configuration_hash,
    limit_heap_arenas,
    listen,
    load_grpc,
    public_configuration,
    resolve_randomness,
)
from fedustat.runtime.simulate import merge_round
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

__all__ = ["CollectionRun", "DeviceReport", "Window", "collect", "new_run_directory", "report",
           "report_async"]

SERVICE = "fedustat.Collect"
OPEN = f"/{SERVICE}/Open"
REPORT = f"/{SERVICE}/Report"

#: How the server refuses a report of another run or configuration.
OTHER_CONFIGURATION = "the report was made for another run or configuration"
#: Most rows one device's report may carry (a device is one record; a small silo may
#: report a few in one frame).
MAX_DEVICE_ROWS = 1024
#: Seconds the writer gathers reports before one group commit (``../shared/
#: DEPENDENCIES.md``, third probe: ~10k reports/s with 10 ms batches in WAL mode).
COMMIT_SECONDS = 0.01
#: A device's backoff between attempts while the server is unreachable: from
#: ``RETRY_FIRST`` seconds, doubling up to ``RETRY_MOST``, each drawn uniformly from its
#: upper half (jitter, so devices cut off together do not come back together).
RETRY_FIRST = 0.2
RETRY_MOST = 5.0
#: Where a window without a named run directory makes one (under the working directory).


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
    reports. ``run_directory`` is where the run is kept (None without durability);
    ``read_back``: the run had finished before and its stored release was returned.
    ``late``, ``refused`` and ``resent`` (frames acknowledged again, counted once) are
    this server process's own; the other counts are the run's.
    """

    estimate: Estimate
    n_reports: int
    closed_by: str
    seconds: float
    late: tuple[str, ...]
    refused: dict[str, int]
    wire_bytes: int
    payload_bytes: int
    run_directory: Path | None = None
    read_back: bool = False
    resent: int = 0

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


@dataclass
class _Admitted:
    """A validated report waiting for its group commit."""

    identity: str
    index: int
    digest: bytes
    frame: bytes
    message: Message
    summary: Any
    committed: asyncio.Future[None] = field(default_factory=asyncio.Future)


class _Collector:
    """The window's state, touched only from the event loop (no locks); the database
    commits run in a thread, one batch at a time."""

    def __init__(self, protocol: Protocol, grade: str, window: Window, rng: RandomLike,
                 ledger: report_store.ReportLedger, opened_at: float,
                 writer: report_store.ReportWriter | None = None) -> None:
        self.protocol = protocol
        self.grade = grade
        self.window = window
        self.configuration = public_configuration(protocol)
        self.fingerprint = configuration_hash(protocol.name, self.configuration)
        self.run = window_run(self.fingerprint)
        self.server_rng = np.random.default_rng(_stream(rng, 0))
        self.reduces, self.context = report_store.reduction_context(protocol)
        # With partitions the committed reports go to them (the engine releases from
        # them); without, a reduction keeps their running sum and any other protocol the
        # reports.
        self.writer = writer
        self.ledger = ledger
        self.summary: Any = None
        self.messages: list[tuple[int, Message]] = []
        self.n_reports = 0  # committed
        self.n_admitted = 0  # committed or waiting for their commit
        self.n_rows = 0
        self.wire_bytes = 0
        self.payload_bytes = 0
        self.resent = 0
        self.refused: dict[str, int] = {}
        self.late: list[str] = []
        self.opened_at = opened_at  # wall clock: the deadline survives a restart
        self.closed_by: str | None = None
        self.closed = asyncio.Event()
        self.waiting: dict[str, _Admitted] = {}
        self.queue: list[_Admitted] = []
        self.wake = asyncio.Event()
        self.failure: BaseException | None = None

    def seconds_left(self) -> float:
        return max(0.0, self.opened_at + float(self.window.seconds) - time.time())
        # Metrics, health and event log (observe.py); collect gives it the window's.
        self.observer = Observer()

    def close(self, why: str) -> None:
        if self.closed_by is None:
            self.closed_by = why
            self.closed.set()
            # The reports the window took: committed, or admitted and being committed.
            self.observer.event("window_close", closed_by=why, reports=self.n_admitted,
                                refused=sum(self.refused.values()))

    def progress(self) -> dict[str, Any]:
        """The window's public progress for its metrics and health check (observe.py):
        read from the metrics listener's thread, so only numbers."""
        return {"state": "closed" if self.closed_by else "collecting", "round": 0,
                "arrived": self.n_reports, "expected": self.window.quorum or 0,
                "joined": self.n_reports, "rows": self.n_rows,
                "stage_seconds": time.time() - self.opened_at,
                "stage_timeout": float(self.window.seconds)}

    def _refuse(self, context: Any, code: Any, reason: str, key: str) -> Any:
        self.refused[key] = self.refused.get(key, 0) + 1
        names = context.auth_context().get("x509_common_name") or [b""]
        self.observer.refused(key, names[0].decode("utf-8", errors="replace"), reason)
        return context.abort(code, reason)

    def _validated(self, request: bytes, identity: str, index: int
                   ) -> tuple[Message, Any]:
        """The frame's report and its summary; raises WireError, ValueError, TypeError."""
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
        return message, summary

    def _fold(self, report: int, index: int, message: Message, summary: Any,
              frame_bytes: int) -> None:
        """Count a committed report in (``report``: its sequence number)."""
        if self.writer is not None:
            if report > self.writer.through:  # not yet in a complete partition
                self.writer.append(message, report)
        elif self.reduces:
            self.summary = (summary if self.summary is None
                            else self.protocol.combine_summaries(self.summary, summary))
        else:
            self.messages.append((index, message))
        self.n_reports += 1
        self.n_rows += len(np.asarray(message.parties))
        self.wire_bytes += frame_bytes
        self.payload_bytes += _payload_bytes(message)

    def rebuild(self) -> None:
        """Count in the reports a run directory already holds (a restarted server), in
        commit order, and close the window if its quorum or deadline has passed."""
        for report, identity, frame in self.ledger.reports():
            index = party_index(identity)
            try:
                message, summary = self._validated(frame, identity, int(index))
            except (WireError, ValueError, TypeError) as exc:
                raise NetworkRunError(f"the run directory's report {report} ({identity}) "
                                      f"no longer decodes ({exc}); the run cannot resume"
                                      ) from None
            self._fold(report, int(index), message, summary, len(frame))
        self.n_admitted = self.n_reports
        if self.window.quorum is not None and self.n_reports >= self.window.quorum:
            self.close("quorum")
        elif self.seconds_left() == 0.0:
            self.close("deadline")

    async def commits(self) -> None:
        """The one writer: every ~10 ms, the reports admitted since commit in one
        transaction (in a thread, off the loop); then they are counted and acknowledged."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            await asyncio.sleep(COMMIT_SECONDS)
            batch, self.queue = self.queue, []
            if not batch:
                continue
            try:
                numbers = await asyncio.to_thread(
                    self.ledger.commit, [(a.identity, a.digest, a.frame) for a in batch])
            except Exception as exc:  # the disk refused: nothing of the batch counts
                self.failure = exc
                for admitted in batch:
                    self.waiting.pop(admitted.identity, None)
                    admitted.committed.set_exception(exc)
                self.close("failure")
                continue
            for admitted, number in zip(batch, numbers, strict=True):
                self._fold(number, admitted.index, admitted.message, admitted.summary,
                           len(admitted.frame))
                self.observer.reported(admitted.identity, len(admitted.frame))
                del self.waiting[admitted.identity]
                admitted.committed.set_result(None)

    async def drained(self) -> None:
        """Wait until every admitted report is committed (or has failed)."""
        while self.queue or self.waiting:
            self.wake.set()
            await asyncio.sleep(COMMIT_SECONDS)
        if self.failure is not None:
            raise NetworkRunError(f"the run database refused a commit ({self.failure}); "
                                  f"the reports committed before stay in "
                                  f"{self.ledger.path.parent}") from None

    async def open(self, request: bytes, context: Any) -> bytes:
        return json.dumps({"run": self.run, "fingerprint": self.fingerprint,
                           "configuration": self.configuration,
                           "closes_in": 0.0 if self.closed_by else self.seconds_left()
                           }).encode()

    async def report(self, request: bytes, context: Any) -> bytes:
        grpc = _grpc()
        names = context.auth_context().get("x509_common_name") or [b""]
        identity = names[0].decode("utf-8", errors="replace")
        digest = report_store.frame_digest(request)
        waiting = self.waiting.get(identity)
        held = waiting.digest if waiting is not None else self.ledger.digest_of(identity)
        if held is not None:
            if held != digest:
                await self._refuse(context, grpc.StatusCode.ALREADY_EXISTS,
                                   f"{identity} has already reported in this run",
                                   "duplicate")
            # The same frame again (its acknowledgement was lost): counted once.
            self.resent += 1
            if waiting is not None:
                await self._acknowledged(waiting, context)
            return b"A"
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
            message, summary = self._validated(request, identity, index)
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
        admitted = _Admitted(identity, index, digest, request, message, summary)
        self.n_admitted += 1
        if self.window.quorum is not None and self.n_admitted >= self.window.quorum:
            self.close("quorum")  # later reports are late; this one is committed first
        if not self.ledger.durable:  # no durability: counted at once, on the loop
            (number,) = self.ledger.commit([(identity, digest, request)])
            self._fold(number, index, message, summary, len(request))
            self.observer.reported(identity, len(request))
            return b"A"
        self.waiting[identity] = admitted
        self.queue.append(admitted)
        self.wake.set()
        await self._acknowledged(admitted, context)
        return b"A"

    async def _acknowledged(self, admitted: _Admitted, context: Any) -> None:
        """Return once ``admitted`` is committed (a device that hangs up does not stop
        its commit); abort the call if the commit failed."""
        try:
            await asyncio.shield(admitted.committed)
        except Exception as exc:
            grpc = _grpc()
            await context.abort(grpc.StatusCode.INTERNAL,
                                f"{admitted.identity}: the server could not store the "
                                f"report ({type(exc).__name__}); it was not counted")

    def _release_stored(self, engine: Any) -> tuple[Any, int]:
        from fedustat.runtime.engine.driver import EngineError
        from fedustat.runtime.engine.stored import release_stored

        try:
            return release_stored(self.protocol, self.writer.directory.parent, engine,
                                  server_rng=self.server_rng,
                                  through=self.ledger.count())
        except EngineError as exc:
            raise NetworkRunError(f"the engine could not release the stored reports "
                                  f"({exc}); they stay in {self.writer.directory.parent}"
                                  ) from None

    def release(self, engine: Any = None) -> Estimate:
        """The release over the accepted reports: from the running sum or the kept
        messages, or, with partitions, computed by ``engine`` from them."""
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
        seconds = time.time() - self.opened_at
        return replace(out, diagnostics={**out.diagnostics, "collection": {
            "n_reports": self.n_reports, "n_parties": n, "closed_by": self.closed_by,
            "window_seconds": float(self.window.seconds), "quorum": self.window.quorum,
            "open_seconds": round(seconds, 3)}})


def _release_stored(collector: _Collector, engine: Any) -> Estimate:
    """Close the partitions' writer and release from them on ``engine`` (started here
    when it names a local cluster, and closed after)."""
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
                   address: str, rng: RandomLike, on_ready: Any,
                   ledger: report_store.ReportLedger, opened_at: float,
                   writer: report_store.ReportWriter | None, engine: Any,
                   run_directory: Path | None,
                   observed: tuple[Observer, bool]) -> CollectionRun:
    grpc = _grpc()
    limit_heap_arenas()
    collector = _Collector(protocol, grade, window, rng, ledger, opened_at, writer)
    observer, owned = observed
    collector.observer = observer
    # The store: the run directory, or the database of a window without one.
    observer.bind("collect", collector.run, protocol.name, collector.progress,
                  store=run_directory if run_directory is not None else ledger.path)
    collector.rebuild()  # a restarted server: what its run directory already holds
    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Open": grpc.unary_unary_rpc_method_handler(collector.open),
        "Report": grpc.unary_unary_rpc_method_handler(collector.report),
    })
    server = grpc.aio.server(options=SERVER_OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    port = listen(server, address, grpc.ssl_server_credentials(
        [(credentials.key, credentials.certificate)], root_certificates=credentials.ca,
        require_client_auth=True))
    committing = asyncio.create_task(collector.commits())
    await server.start()
    try:
        observer.start()
        observer.event("start", protocol=protocol.name, address=f"{address.rpartition(':')[0]}"
                       f":{port}", metrics_address=observer.address,
                       window_seconds=float(window.seconds), quorum=window.quorum,
                       reports=collector.n_reports)
        if on_ready is not None:
            on_ready(port)
        try:
            await asyncio.wait_for(collector.closed.wait(),
                                   timeout=collector.seconds_left())
        except TimeoutError:
            collector.close("deadline")
        await collector.drained()
        if writer is None:
            estimate = collector.release()
        else:  # off the loop, which keeps telling late devices that the window closed
            estimate = await asyncio.to_thread(_release_stored, collector, engine)
        outcome = CollectionRun(estimate, collector.n_reports, str(collector.closed_by),
                                time.time() - opened_at, tuple(collector.late),
                                dict(collector.refused), collector.wire_bytes,
                                collector.payload_bytes, run_directory, False,
                                collector.resent)
        if ledger.durable:  # drawn once: a restart reads it back
            await asyncio.to_thread(ledger.store_release, outcome)
        observer.released(reports=collector.n_reports, rows=collector.n_rows,
                          seconds=round(outcome.seconds, 3),
                          refused=sum(collector.refused.values()))
        await asyncio.sleep(float(window.linger))
    except Exception as exc:
        # A refusal's reasons are public; another error is named by its kind only.
        observer.failed(str(exc) if isinstance(exc, NetworkRunError) else type(exc).__name__)
        raise
    finally:
        await server.stop(grace=0.5)
        committing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await committing
        observer.serving = False
        if owned:
            observer.stop()
        if writer is not None:
            writer.close()  # a failed run still leaves its accepted reports on disk
    return replace(outcome, late=tuple(collector.late), refused=dict(collector.refused),
                   resent=collector.resent)


def new_run_directory(base: str | Path | None = None) -> Path:
    """A new, unused run directory's path under ``base`` (default: where lockstep servers
    keep theirs, :func:`~fedustat.runtime.network.run_journal.default_run_root`), named
    by the UTC time it is made (not created here)."""
    root = default_run_root() if base is None else Path(base)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for suffix in range(1000):
        path = root / (stamp if suffix == 0 else f"{stamp}-{suffix}")
        if not path.exists():
            return path
    raise OSError(f"no free run directory name under {root}")


def _terms(window: Window, rng: RandomLike, partitions: bool) -> dict[str, Any]:
    """The window's terms a resumed run must keep: the deadline, the quorum, the
    randomness (a seed by its digest only) and whether partitions are written."""
    if rng is None:
        randomness = "deployment"
    else:
        stream = _stream(rng, 0)
        randomness = "seed " + hashlib.sha256(
            repr((stream.entropy, tuple(stream.spawn_key))).encode()).hexdigest()[:16]
    return {"window_seconds": float(window.seconds), "quorum": window.quorum,
            "randomness": randomness, "partitions": bool(partitions)}


def _check_resumed(held: report_store.StoredRun, directory: Path, run: str,
                   protocol: str, configuration: dict[str, Any],
                   terms: dict[str, Any]) -> None:
    """Refuse a run directory of another run, or of this run under other options,
    naming each option that differs."""
    given = json.loads(json.dumps(configuration, default=str))
    differing = configuration_differences(given, held.configuration, me="given",
                                          them="run directory")
    differing += [f"{key} = {terms.get(key)!r} (given) vs {held.terms.get(key)!r} "
                  f"(run directory)" for key in sorted(set(terms) | set(held.terms))
                  if terms.get(key) != held.terms.get(key)]
    if held.run != run or differing:
        which = (f"another run ({held.run}, protocol {held.protocol}; this window is {run}, "
                 f"{protocol})" if held.run != run else "this run")
        raise report_store.StoreError(
            f"run directory {str(directory)!r} holds {which} with other options "
            f"({'; '.join(differing) or 'its configuration'}); resume it with its own "
            "options, or give a new directory, one per run")


def collect(protocol: Protocol, credentials: Credentials, window: Window, *,
            address: str = "127.0.0.1:0", rng: RandomLike = None, on_ready: Any = None,
            run_dir: str | Path | None = None, durable: bool = True,
            partitions: bool = False, engine: Any = None,
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
    run_dir:
        The run directory (:mod:`fedustat.runtime.report_store`), made if missing; None
        (default): a new one (:func:`new_run_directory`, under ``$FEDUSTAT_RUN_ROOT`` or
        ``~/.local/share/fedustat/runs`` as for ``serve``), named in the result. Every
        accepted report is committed to its database before the
        device is acknowledged. A directory of this run (a restarted server) resumes it:
        its reports, deadline and quorum; one whose run finished returns the stored
        release (``read_back``) without listening. A directory of another run, or of
        this run under other options, is refused naming them.
    durable:
        ``False``: no run directory; the identities that reported are kept in a
        temporary database and the reports in memory only, so a crash loses the accepted
        reports (for comparison with the durable default; not for deployments).
    partitions:
        Also write the committed reports to Parquet partitions of ``rows_per_partition``
        rows in the run directory and compute the release from them on ``engine``.
    engine:
        With partitions, the Dask engine that releases from them: ``None`` or ``"local"``
        (a local cluster of 2 worker processes, started at the close), a scheduler
        address ``"tcp://host:port"``, a ``DaskEngine`` or a ``distributed.Client``.
    rows_per_partition:
        With partitions, report rows per partition file (the rest is written at the
        close).
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
    warm_up()  # SciPy's modules import while the window is open, not at its close
    if not isinstance(window, Window):
        raise TypeError(f"window must be a Window, got {type(window).__name__}")
    if not durable and (run_dir is not None or partitions):
        raise ValueError("durable=False keeps nothing on disk: drop run_dir= and "
                         "partitions=, or keep durable=True")
    if engine is not None and not partitions:
        raise ValueError("engine= releases from partitions: give partitions=True too")
    protocol, grade = resolve_randomness(protocol, rng)
    configuration = public_configuration(protocol)
    fingerprint = configuration_hash(protocol.name, configuration)
    run = window_run(fingerprint)
    observed = observed_by(metrics_address, observer)
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="fedustat-collect-"))
        if not durable:
            ledger = report_store.ReportLedger(Path(scratch) / report_store.DATABASE,
                                               durable=False)
            directory, opened_at, writer = None, time.time(), None
        else:
            directory = Path(run_dir) if run_dir is not None else new_run_directory()
            terms = _terms(window, rng, partitions)
            held = report_store.open_store(directory, run, protocol.name, fingerprint,
                                           configuration, terms, opened_at=time.time(),
                                           partitions=partitions)
            _check_resumed(held, directory, run, protocol.name, configuration, terms)
            stack.enter_context(report_store.hold_directory(directory))
            opened_at = held.opened_at
            ledger = report_store.ReportLedger(directory / report_store.DATABASE)
            finished = ledger.stored_release()
            if finished is not None:  # the noise was drawn once; it is not drawn again
                ledger.close()
                return replace(finished, read_back=True, run_directory=directory)
            writer = (report_store.ReportWriter(directory, run,
                                                rows_per_partition=rows_per_partition)
                      if partitions else None)
        try:
            return asyncio.run(_collect(protocol, grade, credentials, window, address, rng,
                                        on_ready, ledger, opened_at, writer, engine,
                                        directory, observed))
        finally:
            ledger.close()


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


def _pause(attempt: int, left: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: the backoff's upper half, jittered
    (timing only; no data depends on it), never past the device's deadline."""
    ceiling = min(RETRY_MOST, RETRY_FIRST * 2.0 ** attempt)
    return max(0.0, min(left, ceiling * (0.5 + 0.5 * random.random())))


def _unreachable(identity: str, server: str, timeout: float, details: str
                 ) -> NetworkRunError:
    return NetworkRunError(f"{identity}: the collection server {server} did not acknowledge "
                           f"the report within {timeout:g} s (last: {details}); the same "
                           "report may be sent again, it is counted once")


def _kept(protocol: Protocol, records: Any, identity: str, rng: RandomLike,
          keep: str | Path | None) -> tuple[str, bytes]:
    """The device's frame: the one kept at ``keep`` if it exists (a restarted device
    resends the report it made, never a new randomization), else a new one, kept there
    (flushed and renamed, readable by its owner only) before it is sent."""
    if keep is None:
        return _prepared(protocol, records, identity, rng)
    path = Path(keep)
    if path.exists():
        mark = configuration_hash(protocol.name, public_configuration(protocol))
        run = window_run(mark)
        frame = path.read_bytes()
        try:
            decode(frame, Expectation(mark, run, 0, "party", identity, Role.SERVER,
                                      party_ids=np.array([party_index(identity) or 0]),
                                      max_elements=MAX_DEVICE_ROWS * 64))
        except WireError as exc:
            raise NetworkRunError(f"{identity}: the kept report {str(path)!r} is not this "
                                  f"device's report for this configuration ({exc}); keep "
                                  "each run's report in its own file") from None
        return run, frame
    run, frame = _prepared(protocol, records, identity, rng)
    scratch = path.with_name(path.name + ".tmp")
    with open(os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(frame)
        out.flush()
        os.fsync(out.fileno())
    os.replace(scratch, path)
    return run, frame


def _failed_send(exc: Any, grpc: Any, attempt: int, deadline: float, identity: str,
                 server: str, timeout: float) -> tuple[float | None, str]:
    """What a device does after a failed send (the same for ``report`` and
    ``report_async``): the pause before resending the same frame while the server is
    unreachable, or None for a refusal the caller explains; raises once the device's
    own deadline leaves no time to wait. Also the call's details."""
    details = str(exc.details() or exc.code().name)
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        pause = _pause(attempt, deadline - time.monotonic())
        if pause <= 0.0:
            raise _unreachable(identity, server, timeout, details) from None
        return pause, details
    if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        raise _unreachable(identity, server, timeout, details) from None
    return None, details


def report(protocol: Protocol, records: Any, credentials: Credentials, server: str, *,
           rng: RandomLike = None, timeout: float = 60.0,
           keep: str | Path | None = None) -> DeviceReport:
    """Send this device's one report to the collection window served at ``server``.

    ``records`` (usually one record) are checked by the protocol's own party step here;
    a failure raises here and nothing is sent. The report goes in one call: its run id
    comes from the device's own configuration (:func:`window_run`); a server running
    another configuration refuses it, and the error names each option that differs.
    ``rng=None``: deployment randomness; a seed asks for the simulator's stream of this
    device's batch (a study). The report is made once; while the server is unreachable
    or restarting (or the connection drops before the acknowledgement), the same frame
    is sent again after a jittered backoff, until it is acknowledged or ``timeout``
    seconds have passed (the server counts a resent frame once). ``keep``: a file for
    the frame, so that a device restarted after a crash resends the same report (it is
    written before the first send, and read instead of ``records`` when it exists).
    """
    grpc = _grpc()
    protocol = _device_protocol(protocol, rng)
    identity = credentials.identity
    run, frame = _kept(protocol, records, identity, rng, keep)
    deadline = time.monotonic() + timeout
    for attempt in range(1_000_000):
        with grpc.secure_channel(server, _channel_credentials(grpc, credentials),
                                 options=DEVICE_CHANNEL_OPTIONS) as channel:
            left = deadline - time.monotonic()
            try:
                channel.unary_unary(REPORT)(frame, timeout=max(left, 0.001))
                break
            except grpc.RpcError as exc:
                pause, details = _failed_send(exc, grpc, attempt, deadline, identity,
                                              server, timeout)
                if pause is not None:
                    time.sleep(pause)
                    continue
                terms = None
                if _other_run(exc.code(), details, grpc):
                    with contextlib.suppress(grpc.RpcError, ValueError):
                        terms = json.loads(channel.unary_unary(OPEN)(b"", timeout=timeout))
                raise _refusal(protocol, identity, details, terms) from None
    return DeviceReport(identity, run, len(frame))


async def report_async(protocol: Protocol, records: Any, credentials: Credentials,
                       server: str, *, rng: RandomLike = None, timeout: float = 60.0,
                       keep: str | Path | None = None) -> DeviceReport:
    """:func:`report` on the caller's event loop (many devices from one process)."""
    grpc = _grpc()
    protocol = _device_protocol(protocol, rng)
    identity = credentials.identity
    run, frame = _kept(protocol, records, identity, rng, keep)
    deadline = time.monotonic() + timeout
    for attempt in range(1_000_000):
        async with grpc.aio.secure_channel(server, _channel_credentials(grpc, credentials),
                                           options=DEVICE_CHANNEL_OPTIONS) as channel:
            left = deadline - time.monotonic()
            try:
                await channel.unary_unary(REPORT)(frame, timeout=max(left, 0.001))
                break
            except grpc.RpcError as exc:
                pause, details = _failed_send(exc, grpc, attempt, deadline, identity,
                                              server, timeout)
                if pause is not None:
                    await asyncio.sleep(pause)
                    continue
                terms = None
                if _other_run(exc.code(), details, grpc):
                    with contextlib.suppress(grpc.RpcError, ValueError):
                        terms = json.loads(await channel.unary_unary(OPEN)(
                            b"", timeout=timeout))
                raise _refusal(protocol, identity, details, terms) from None
    return DeviceReport(identity, run, len(frame))
