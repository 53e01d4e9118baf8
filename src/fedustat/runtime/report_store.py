"""A collection's run directory: its terms, its accepted reports (SQLite), its release.

A collection window (:mod:`fedustat.runtime.network.collect`) always works in a run
directory; it holds one run::

    run.json            the run id, protocol, public configuration and the window's terms
                        (deadline, quorum, randomness, partitions), and the wall-clock time
                        the window opened: written once, flushed and renamed
    run.sqlite          SQLite in WAL mode: every accepted report (its sequence number, the
                        device's identity, the SHA-256 digest and the bytes of its frame)
                        and, once the window has closed, its release
    run.lock            locked (flock) by the one server working in the directory
    reports/part-000000.parquet, ...   with partitions: the accepted reports, one file per
                        batch, for the engine (each names the last report it holds)

Every accepted report is committed to ``run.sqlite`` (``synchronous=FULL``) before the
device is acknowledged, by :class:`ReportLedger` in group commits (one writer, batches of
about 10 ms: ``../shared/DEPENDENCIES.md``, third probe, ~10k reports/s); the identity is
its primary key, so one report per identity per run holds on disk. The database is the
record of the run: a restarted server rebuilds its running summary from it, and
partitions are made consistent with it (the reports after the last complete partition
are written again from the database). A partition has one row per report row: ``party``
(the device's index) and one column per field of the protocol's message (a field of
width w per row is a fixed-size list column of w values); its Parquet metadata keeps the
fields' declared bits per value, the run id and the sequence number of its last report.
Partitions are written in batches (``rows_per_partition`` rows, and the rest at the
close) by a thread of their own, off the event loop; each is written to a temporary
name, flushed to disk and renamed, so a partition that exists is complete.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import hashlib
import json
import os
import pickle
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedustat.protocols.base import Message, Protocol, Role

__all__ = ["DEFAULT_ROWS_PER_PARTITION", "ReportLedger", "ReportWriter", "StoreError",
           "StoredRun", "frame_digest", "hold_directory", "open_store", "read_manifest",
           "read_reports", "reduction_context", "stored_partitions", "stored_rows",
           "stored_through"]

#: Report rows per partition file: a few thousand reports, so a file is a few tens of
#: kilobytes written about every ten seconds at the server's ~400 reports/s.
DEFAULT_ROWS_PER_PARTITION = 4096
MANIFEST = "run.json"
DATABASE = "run.sqlite"
LOCK = "run.lock"
REPORTS = "reports"
_FORMAT = 2
_BITS_KEY = b"fedustat.bits_per_value"
_RUN_KEY = b"fedustat.run"
_LAST_KEY = b"fedustat.last_report"


class StoreError(ValueError):
    """A run directory that cannot hold this collection (another run's, not writable)."""


@dataclass(frozen=True)
class StoredRun:
    """What a run directory says about its run (``run.json``): the run id, protocol and
    fingerprint, the public configuration, the window's terms and when it opened (Unix
    time)."""

    run: str
    protocol: str
    fingerprint: str
    configuration: dict[str, Any]
    terms: dict[str, Any]
    opened_at: float


def frame_digest(frame: bytes) -> bytes:
    """The SHA-256 digest of a report frame: a resent frame is recognised by it."""
    return hashlib.sha256(frame).digest()


def reduction_context(protocol: Protocol) -> tuple[bool, Any]:
    """Whether the protocol's collection release is a reduction, and its context.

    A reduction protocol's context is public configuration (its fixed bins), the same
    whatever n the server state is made for, so it is read from a state for one party:
    the collecting server and the engine summarize each report with the same context.
    """
    rounds = getattr(protocol, "distributed_round", None)
    if rounds is None:
        return False, None
    kind, context = rounds(protocol.init_server(1))
    return kind == "reduce", context


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        raise ImportError("a collection store writes Parquet: install fedustat's parquet "
                          "extra (pip install '.[parquet]' in the fedustat checkout)"
                          ) from exc
    return pyarrow


def open_store(directory: str | Path, run: str, protocol: str, fingerprint: str,
               configuration: dict[str, Any], terms: dict[str, Any], *,
               opened_at: float, partitions: bool = False) -> StoredRun:
    """Make (or reopen) ``directory`` as the run directory of ``run``; return its record.

    A new directory records the run, its ``terms`` and ``opened_at`` in ``run.json``
    (flushed and renamed). An existing one is returned as recorded: the caller compares
    its run, configuration and terms (one run per directory: the identities and reports
    of two runs must not mix; a resumed window keeps its original deadline). A non-empty
    directory that holds no run is refused, and so is a path that is not a writable
    directory.
    """
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise StoreError(f"run directory {str(path)!r} is a file; give a directory (it is "
                         "made if missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        if partitions:
            (path / REPORTS).mkdir(exist_ok=True)
    except OSError as exc:
        raise StoreError(f"run directory {str(path)!r}: cannot make it "
                         f"({exc.strerror or exc}); give a writable directory") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise StoreError(f"run directory {str(path)!r} is not writable; give a writable "
                         "directory")
    manifest = path / MANIFEST
    if manifest.exists():
        return read_manifest(path)
    others = sorted(p.name for p in path.iterdir() if p.name not in (REPORTS, LOCK))
    if others or ((path / REPORTS).exists() and any((path / REPORTS).iterdir())):
        raise StoreError(f"run directory {str(path)!r} is not empty and holds no collection "
                         f"run ({', '.join(others[:3]) or REPORTS + '/ has files'}); give a "
                         "new or empty directory")
    record = {"format": _FORMAT, "run": run, "protocol": protocol,
              "fingerprint": fingerprint, "configuration": configuration, "terms": terms,
              "opened_at": float(opened_at)}
    _write_durably(manifest, json.dumps(record, indent=2, default=str).encode())
    return read_manifest(path)


def hold_directory(directory: str | Path) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock on a run directory while one server works in it: a second
    server on the same directory (two writers of one run) is refused by name. The lock
    is the kernel's (``flock``), so it goes with the process, even on SIGKILL."""
    path = Path(directory) / LOCK

    @contextlib.contextmanager
    def held() -> Any:
        with open(path, "a") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise StoreError(f"run directory {str(Path(directory))!r} is in use by "
                                 "another server; one server per run directory") from None
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    return held()


def read_manifest(directory: str | Path) -> StoredRun:
    """The run a run directory holds (``run.json``)."""
    path = Path(directory) / MANIFEST
    try:
        data = json.loads(path.read_text())
        if data.get("format") != _FORMAT:
            raise ValueError(f"format {data.get('format')!r}, this version reads {_FORMAT}")
        return StoredRun(str(data["run"]), str(data["protocol"]), str(data["fingerprint"]),
                         dict(data["configuration"]), dict(data["terms"]),
                         float(data["opened_at"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"run directory {str(Path(directory))!r} has no readable "
                         f"{MANIFEST} ({exc}); is it a collection's run directory?") from None


def _write_durably(path: Path, data: bytes) -> None:
    scratch = path.with_name(path.name + ".tmp")
    with open(scratch, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(scratch, path)
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    # The rename is durable once the directory entry is on disk (POSIX).
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def stored_partitions(directory: str | Path) -> list[Path]:
    """The complete partitions of a run directory, in the order they were written."""
    return sorted((Path(directory) / REPORTS).glob("part-*.parquet"))


def stored_rows(paths: Sequence[Path]) -> list[int]:
    """Rows of each partition, from the Parquet footers (the rows are not read)."""
    pa = _pyarrow()
    return [int(pa.parquet.ParquetFile(p).metadata.num_rows) for p in paths]


def stored_through(paths: Sequence[Path]) -> int:
    """The sequence number of the last report the complete partitions hold (0: none)."""
    pa = _pyarrow()
    last = 0
    for path in paths:
        meta = pa.parquet.ParquetFile(path).schema_arrow.metadata or {}
        last = max(last, int(meta.get(_LAST_KEY, b"0")))
    return last


def _write_partition(path: Path, run: str, parties: np.ndarray,
                     fields: dict[str, np.ndarray], bits: dict[str, int],
                     last_report: int) -> None:
    pa = _pyarrow()
    columns = {"party": pa.array(parties, type=pa.int64())}
    for name, values in fields.items():
        if values.ndim == 1:
            columns[name] = pa.array(values)
        else:  # one fixed-width row per party (e.g. ldp-tree's path of bits)
            width = int(np.prod(values.shape[1:]))
            columns[name] = pa.FixedSizeListArray.from_arrays(
                pa.array(values.reshape(-1)), width)
    table = pa.table(columns).replace_schema_metadata({
        _BITS_KEY: json.dumps(bits).encode(), _RUN_KEY: run.encode(),
        _LAST_KEY: str(int(last_report)).encode(),
        b"fedustat.shapes": json.dumps({k: list(v.shape[1:]) for k, v in fields.items()
                                        }).encode()})
    scratch = path.with_name(path.name + ".tmp")
    pa.parquet.write_table(table, scratch)
    with open(scratch, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(scratch, path)
    _sync_directory(path.parent)


def read_reports(path: str | Path, run: str | None = None) -> Message:
    """One partition's reports as the message of its parties (rows in stored order)."""
    pa = _pyarrow()
    table = pa.parquet.read_table(path)
    meta = table.schema.metadata or {}
    if _BITS_KEY not in meta:
        raise StoreError(f"{path} is not a partition of a collection store")
    if run is not None and meta.get(_RUN_KEY, b"").decode() != run:
        raise StoreError(f"{path} holds reports of run {meta.get(_RUN_KEY, b'').decode()}, "
                         f"not {run}")
    bits = json.loads(meta[_BITS_KEY])
    shapes = json.loads(meta[b"fedustat.shapes"])
    fields: dict[str, np.ndarray] = {}
    for name in bits:
        column = table.column(name).combine_chunks()
        if shapes[name]:
            flat = column.flatten().to_numpy(zero_copy_only=False)
            fields[name] = flat.reshape(len(column), *shapes[name])
        else:
            fields[name] = column.to_numpy(zero_copy_only=False)
    parties = table.column("party").to_numpy()
    return Message(Role.PARTY, Role.SERVER, fields, {k: int(v) for k, v in bits.items()},
                   parties)


class ReportWriter:
    """Appends accepted reports to a run directory's partitions, in batches.

    :meth:`append` is called on the event loop, after the report's commit, and only
    buffers (a few array references per report); every ``rows_per_partition`` rows the
    buffer is handed to a writer thread, which joins the arrays and writes the partition.
    :meth:`close` writes the rest and waits for every partition to be on disk. A write
    that failed raises at the next :meth:`append` or at :meth:`close` (a collection must
    not release over partitions it could not write). :attr:`through` is the sequence
    number of the last report the existing partitions hold: a reopened run appends the
    database's reports after it again.
    """

    def __init__(self, directory: str | Path, run: str, *,
                 rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION) -> None:
        if isinstance(rows_per_partition, bool) or not isinstance(rows_per_partition, int) \
                or rows_per_partition < 1:
            raise ValueError(f"rows_per_partition must be a positive integer, got "
                             f"{rows_per_partition!r}")
        _pyarrow()
        self.directory = Path(directory) / REPORTS
        self.directory.mkdir(exist_ok=True)
        for scratch in self.directory.glob("*.tmp"):  # a write a crash interrupted
            scratch.unlink()
        self.run = run
        self.rows_per_partition = rows_per_partition
        existing = stored_partitions(directory)
        self._next = 1 + max((int(p.stem.split("-")[1]) for p in existing), default=-1)
        self.through = stored_through(existing)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="fedustat-store")
        self._pending: list[concurrent.futures.Future[None]] = []
        self._buffer: list[Message] = []
        self._buffered_rows = 0
        self._last = self.through
        self.partitions_written = 0

    def append(self, message: Message, report: int) -> None:
        """Buffer one committed report (``report``: its sequence number in the database)."""
        self._raise_failed()
        if report <= self._last:
            raise StoreError(f"report {report} appended after report {self._last}: the "
                             "partitions follow the database's order")
        self._buffer.append(message)
        self._last = report
        self._buffered_rows += len(message.parties)
        if self._buffered_rows >= self.rows_per_partition:
            self._hand_off()

    def _hand_off(self) -> None:
        if not self._buffer:
            return
        batch, self._buffer, self._buffered_rows = self._buffer, [], 0
        path = self.directory / f"part-{self._next:06d}.parquet"
        self._next += 1
        self._pending.append(self._pool.submit(self._write, path, batch, self._last))

    def _write(self, path: Path, batch: list[Message], last_report: int) -> None:
        first = batch[0]
        names = list(first.fields)
        if any(list(m.fields) != names for m in batch):
            raise StoreError("the reports of one partition carry different fields")
        parties = np.concatenate([np.asarray(m.parties, dtype=np.int64) for m in batch])
        fields = {k: np.concatenate([np.asarray(m.fields[k]) for m in batch]) for k in names}
        bits = {k: int(first.bits_per_value[k]) for k in names}
        _write_partition(path, self.run, parties, fields, bits, last_report)

    def _raise_failed(self) -> None:
        done = [f for f in self._pending if f.done()]
        for future in done:
            self._pending.remove(future)
            future.result()  # raises the writer thread's error here
            self.partitions_written += 1

    def close(self) -> None:
        """Write the buffered reports and wait until every partition is on disk."""
        try:
            self._hand_off()
            for future in self._pending:
                future.result()
                self.partitions_written += 1
            self._pending = []
        finally:
            self._pool.shutdown(wait=True)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS reports (
    seq INTEGER PRIMARY KEY,
    identity TEXT NOT NULL UNIQUE,
    digest BLOB NOT NULL,
    frame BLOB);
CREATE TABLE IF NOT EXISTS release (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    outcome BLOB NOT NULL);
"""


class ReportLedger:
    """A run's SQLite database (WAL): the accepted reports and, at the end, the release.

    ``durable=True``: ``synchronous=FULL``; :meth:`commit` returns once the batch is on
    disk, and each report's frame is kept (a restart rebuilds the run from them).
    ``durable=False`` (a run without durability, for comparison): ``synchronous=OFF`` and
    no frames, only each identity and its frame's digest (one report per identity).

    Two connections: one for reads on the event loop (lookups never wait for a commit in
    WAL mode) and one for :meth:`commit`, which the one writer calls from its thread.
    """

    def __init__(self, path: str | Path, *, durable: bool = True) -> None:
        self.path = Path(path)
        self.durable = durable
        try:
            self._reader = self._connect()
            self._reader.executescript(_SCHEMA)
            self._writer = self._connect()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the run database {str(self.path)!r} ({exc})"
                             ) from None
        self._next = 1 + int(self._reader.execute(
            "SELECT COALESCE(MAX(seq), 0) FROM reports").fetchone()[0])

    def _connect(self) -> sqlite3.Connection:
        # check_same_thread=False: the writer connection is used by the one writer's
        # thread; each connection is used by one thread at a time.
        connection = sqlite3.connect(self.path, isolation_level=None,
                                     check_same_thread=False)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'OFF'}")
        return connection

    def digest_of(self, identity: str) -> bytes | None:
        """The digest of the report ``identity`` committed, or None."""
        row = self._reader.execute("SELECT digest FROM reports WHERE identity = ?",
                                   (identity,)).fetchone()
        return None if row is None else bytes(row[0])

    def count(self) -> int:
        """Committed reports."""
        return int(self._reader.execute("SELECT COUNT(*) FROM reports").fetchone()[0])

    def reports(self, after: int = 0) -> Iterator[tuple[int, str, bytes]]:
        """The committed reports after sequence number ``after``, in commit order:
        ``(seq, identity, frame)``."""
        cursor = self._reader.execute("SELECT seq, identity, frame FROM reports WHERE seq > ? "
                                      "ORDER BY seq", (after,))
        while rows := cursor.fetchmany(1024):
            for seq, identity, frame in rows:
                yield int(seq), str(identity), bytes(frame)

    def commit(self, batch: Sequence[tuple[str, bytes, bytes]]) -> list[int]:
        """Commit ``(identity, digest, frame)`` rows in one transaction; return their
        sequence numbers. Raises (and commits none of them) on any failure."""
        first = self._next
        rows = [(first + i, identity, digest, frame if self.durable else None)
                for i, (identity, digest, frame) in enumerate(batch)]
        try:
            self._writer.execute("BEGIN IMMEDIATE")
            self._writer.executemany("INSERT INTO reports VALUES (?, ?, ?, ?)", rows)
            self._writer.execute("COMMIT")
        except sqlite3.Error:
            if self._writer.in_transaction:
                self._writer.execute("ROLLBACK")
            raise
        self._next = first + len(rows)
        return [row[0] for row in rows]

    def store_release(self, outcome: Any) -> None:
        """Keep the run's outcome (its release), so a finished run is read back."""
        blob = pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL)
        self._writer.execute("INSERT INTO release VALUES (1, ?)", (blob,))

    def stored_release(self) -> Any:
        """The outcome :meth:`store_release` kept, or None. The run directory is the
        server's own (like its key), so its own pickle is read back."""
        row = self._reader.execute("SELECT outcome FROM release WHERE id = 1").fetchone()
        return None if row is None else pickle.loads(row[0])

    def close(self) -> None:
        self._reader.close()
        self._writer.close()
