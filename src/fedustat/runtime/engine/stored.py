"""The release of a stored collection, computed by the engine from its partitions.

A collection window with partitions (:mod:`fedustat.runtime.report_store`) leaves its
accepted reports in Parquet partitions of its run directory (consistent with the run's
database: a restarted server writes again the reports after the last complete
partition); the server step runs here, as the protocol declares it:

* **a reduction** (``distributed_round`` says ``"reduce"``: ldp-quantized's histogram,
  ldp-tree's counts): each task reads a few partitions on its worker, summarizes each
  (``summarize_batch``, the collecting server's context) and combines them; a tree of
  tasks combines those (``combine_summaries``: exact integer sums, so the order does not
  matter) and this process runs ``server_step_reduced`` on the total. It holds one
  summary, never the reports.
* **any other server step** (ldp-ghazi's projections, central-laplace's records): the
  step needs every message at once, so the workers read the partitions and this process
  **gathers** them (O(n) here, as a collection held in memory) and runs ``server_step``
  on the rows in party order.

Either way the release is the one the in-memory collection gives on the same reports
with the same server stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np

from fedustat.protocols.base import Estimate, Message, Protocol, Role
from fedustat.runtime import report_store as rs
from fedustat.runtime.engine.driver import DaskEngine, EngineError
from fedustat.runtime.engine.partitions import absolute_path

__all__ = ["ROWS_PER_TASK", "release_stored"]

#: Report rows one task reads (partition by partition: one partition in memory at a
#: time); a 10^7-report store is about 40 tasks.
ROWS_PER_TASK = 2**18


def _summarize_partitions(protocol: Any, paths: list[str], run: str, context: Any) -> Any:
    summaries = (protocol.summarize_batch(rs.read_reports(p, run), context) for p in paths)
    return reduce(protocol.combine_summaries, summaries)


def _read_partitions(paths: list[str], run: str) -> list[Message]:
    return [rs.read_reports(p, run) for p in paths]



def _same(protocol: Protocol) -> Protocol:
    return protocol


def _tasks(paths: Sequence[Path], rows: Sequence[int], rows_per_task: int) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    filled = 0
    for path, n in zip(paths, rows, strict=True):
        if groups[-1] and filled + n > rows_per_task:
            groups.append([])
            filled = 0
        # Absolute: the workers of an external cluster read from their own directories.
        groups[-1].append(absolute_path(path))
        filled += n
    return groups


def release_stored(protocol: Protocol, store: str | Path, engine: DaskEngine, *,
                   server_rng: np.random.Generator, through: int | None = None,
                   rows_per_task: int = ROWS_PER_TASK) -> tuple[Estimate, int]:
    """The server step over the reports stored in ``store``'s partitions; return it and n.

    ``protocol`` is configured as the collection's (its randomness resolved);
    ``server_rng`` is the server's stream (the in-memory collection's). ``through``: the
    last report the run's database holds; the partitions must end there (no report
    missing from them). The result is the protocol's output of the step, without the
    collection's diagnostics.
    """
    manifest = rs.read_manifest(store)
    paths = rs.stored_partitions(store)
    if not paths:
        raise EngineError(f"run directory {str(store)!r} holds no partition; no release")
    if through is not None and rs.stored_through(paths) != through:
        raise EngineError(f"the partitions of {str(store)!r} hold the reports through "
                          f"{rs.stored_through(paths)}, the run's database through "
                          f"{through}; no release")
    rows = rs.stored_rows(paths)
    n = int(sum(rows))
    reduces, context = rs.reduction_context(protocol)
    configured = protocol.configure(n)
    state = configured.init_server(n)
    groups = _tasks(paths, rows, rows_per_task)
    shared = engine._submit(_same, protocol)
    if reduces:
        summary = engine._tree(shared, [
            engine._submit(_summarize_partitions, shared, g, manifest.run, context)
            for g in groups])
        _, out = configured.server_step_reduced(state, summary, server_rng)
    else:
        messages = [m for part in engine._gather([
            engine._submit(_read_partitions, g, manifest.run) for g in groups]) for m in part]
        _, out = configured.server_step(state, _in_party_order(messages), server_rng)
    return out, n


def _in_party_order(messages: list[Message]) -> Message:
    """The stored rows as one message, ordered by party (a device's own rows keep their
    order), as the in-memory collection merges its reports."""
    parties = np.concatenate([np.asarray(m.parties, dtype=np.int64) for m in messages])
    order = np.argsort(parties, kind="stable")
    first = messages[0]
    fields = {k: np.concatenate([np.asarray(m.fields[k]) for m in messages])[order]
              for k in first.fields}
    return Message(Role.PARTY, Role.SERVER, fields, dict(first.bits_per_value),
                   parties[order])
