"""A collection's store: its accepted reports in Parquet partitions of a run directory.

A collection window (:mod:`fedustat.runtime.network.collect`) given a store appends every
report it accepts here instead of keeping it; the release is then computed from the
partitions by the distributed engine (:func:`fedustat.runtime.engine.release_stored`),
so the collecting process never holds the reports. A run directory holds one run::

    run.json            the run id, protocol and public configuration (fingerprint)
    reported.sqlite     the identities that reported (one report per identity per run)
    reports/part-000000.parquet, ...   the accepted reports, one file per batch

A partition has one row per report row: ``party`` (the device's index) and one column
per field of the protocol's message (a field of width w per row is a fixed-size list
column of w values); its Parquet metadata keeps the fields' declared bits per value and
the run id. Partitions are written in batches (``rows_per_partition`` rows, and the rest
at the close) by a thread of their own, off the event loop; each is written to a
temporary name, flushed to disk and renamed, so a partition that exists is complete.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedustat.protocols.base import Message, Protocol, Role

__all__ = ["DEFAULT_ROWS_PER_PARTITION", "ReportWriter", "StoreError", "open_store",
           "read_reports", "reduction_context", "stored_partitions", "stored_rows"]

#: Report rows per partition file: a few thousand reports, so a file is a few tens of
#: kilobytes written about every ten seconds at the server's ~400 reports/s, and a crash
#: loses at most that many accepted reports.
DEFAULT_ROWS_PER_PARTITION = 4096
MANIFEST = "run.json"
IDENTITIES = "reported.sqlite"
REPORTS = "reports"
_FORMAT = 1
_BITS_KEY = b"fedustat.bits_per_value"
_RUN_KEY = b"fedustat.run"


class StoreError(ValueError):
    """A run directory that cannot hold this collection (another run's, not writable)."""


@dataclass(frozen=True)
class StoredRun:
    """What a run directory says about its run (``run.json``)."""

    run: str
    protocol: str
    fingerprint: str


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
        raise ImportError("a collection store writes Parquet: pip install "
                          "'fedustat[parquet]'") from exc
    return pyarrow


def open_store(directory: str | Path, run: str, protocol: str, fingerprint: str,
               configuration: dict[str, Any]) -> Path:
    """Make (or reopen) ``directory`` as the run directory of ``run``; return it.

    A directory that already holds another run is refused by name (one run per store:
    the identities and reports of two runs must not mix); so is a non-empty directory
    that holds no run, and a path that is not a writable directory. The same run's
    directory is reopened: its identities still count (a device that reported before
    is refused) and its partitions stay part of the release.
    """
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise StoreError(f"store {str(path)!r} is a file; give a directory (it is made if "
                         "missing)")
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / REPORTS).mkdir(exist_ok=True)
    except OSError as exc:
        raise StoreError(f"store {str(path)!r}: cannot make the run directory "
                         f"({exc.strerror or exc}); give a writable directory") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise StoreError(f"store {str(path)!r} is not writable; give a writable directory")
    manifest = path / MANIFEST
    if manifest.exists():
        held = read_manifest(path)
        if held.run != run:
            raise StoreError(f"store {str(path)!r} holds another run ({held.run}, protocol "
                             f"{held.protocol}); this window is {run} ({protocol}): give a "
                             "new directory, one per run")
        return path
    others = sorted(p.name for p in path.iterdir() if p.name != REPORTS)
    if others or any((path / REPORTS).iterdir()):
        raise StoreError(f"store {str(path)!r} is not empty and holds no collection run "
                         f"({', '.join(others[:3]) or REPORTS + '/ has files'}); give a new "
                         "or empty directory")
    text = json.dumps({"format": _FORMAT, "run": run, "protocol": protocol,
                       "fingerprint": fingerprint, "configuration": configuration},
                      indent=2, default=str)
    _write_durably(manifest, text.encode())
    return path


def read_manifest(directory: str | Path) -> StoredRun:
    """The run a run directory holds (``run.json``)."""
    path = Path(directory) / MANIFEST
    try:
        data = json.loads(path.read_text())
        return StoredRun(str(data["run"]), str(data["protocol"]), str(data["fingerprint"]))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"store {str(Path(directory))!r} has no readable {MANIFEST} "
                         f"({exc}); is it a collection's run directory?") from None


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


def _write_partition(path: Path, run: str, parties: np.ndarray,
                     fields: dict[str, np.ndarray], bits: dict[str, int]) -> None:
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

    :meth:`append` is called on the event loop and only buffers (a few array references
    per report); every ``rows_per_partition`` rows the buffer is handed to a writer
    thread, which joins the arrays and writes the partition. :meth:`close` writes the rest
    and waits for every partition to be on disk. A write that failed raises at the next
    :meth:`append` or at :meth:`close` (a collection must not release over a store it
    could not write).
    """

    def __init__(self, directory: str | Path, run: str, *,
                 rows_per_partition: int = DEFAULT_ROWS_PER_PARTITION) -> None:
        if isinstance(rows_per_partition, bool) or not isinstance(rows_per_partition, int) \
                or rows_per_partition < 1:
            raise ValueError(f"rows_per_partition must be a positive integer, got "
                             f"{rows_per_partition!r}")
        _pyarrow()
        self.directory = Path(directory) / REPORTS
        self.run = run
        self.rows_per_partition = rows_per_partition
        existing = stored_partitions(directory)
        self._next = 1 + max((int(p.stem.split("-")[1]) for p in existing), default=-1)
        self.rows_before = sum(stored_rows(existing))
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="fedustat-store")
        self._pending: list[concurrent.futures.Future[None]] = []
        self._buffer: list[Message] = []
        self._buffered_rows = 0
        self.partitions_written = 0

    def append(self, message: Message) -> None:
        """Buffer one accepted report (a message from one or more parties' rows)."""
        self._raise_failed()
        self._buffer.append(message)
        self._buffered_rows += len(message.parties)
        if self._buffered_rows >= self.rows_per_partition:
            self._hand_off()

    def _hand_off(self) -> None:
        if not self._buffer:
            return
        batch, self._buffer, self._buffered_rows = self._buffer, [], 0
        path = self.directory / f"part-{self._next:06d}.parquet"
        self._next += 1
        self._pending.append(self._pool.submit(self._write, path, batch))

    def _write(self, path: Path, batch: list[Message]) -> None:
        first = batch[0]
        names = list(first.fields)
        if any(list(m.fields) != names for m in batch):
            raise StoreError("the reports of one partition carry different fields")
        parties = np.concatenate([np.asarray(m.parties, dtype=np.int64) for m in batch])
        fields = {k: np.concatenate([np.asarray(m.fields[k]) for m in batch]) for k in names}
        bits = {k: int(first.bits_per_value[k]) for k in names}
        _write_partition(path, self.run, parties, fields, bits)

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
