"""Run a protocol's batches of parties as tasks on a Dask cluster.

The driver (this process) holds the server's state and only small things: each round's
combined summary, the splitters and bucket counts of a distributed sort, the public
reply. Each batch of parties (its records, state, random stream and bit counters) lives
on a worker as the result of a task; its messages go from worker to worker. Per batch
and per round:

* **party step** on the worker (:meth:`Protocol.party_step`), with the batch's stream
  ``SeedSequence(seed).spawn(B + 1)[1 + i]`` as in :func:`fedustat.runtime.simulate`;
* **server step**, as the protocol declares with ``distributed_round(state)``:
  ``"reduce"``: every batch summarizes its message (``summarize_batch``), a tree of
  tasks combines the summaries (``combine_summaries``, associative) and the driver runs
  ``server_step_reduced`` on the total with the server stream ``[0]``; a broadcast reply
  goes to every batch. ``"rank"``: the engine computes every row's mid-rank across all
  batches (:mod:`fedustat.runtime.engine.ranks`), the driver runs
  ``server_step_ranked`` on totals, and every batch writes its own addressed reply
  (``rank_reply``). Without kept states (the default) a batch is rebuilt by each
  round's task and the ranking's intermediate arrays go to files of a per-run spill
  directory, so a worker holds one batch or one bucket at a time.

Every task is a pure function of its inputs (states are copied, never changed in place,
the random generator is copied before it draws), so when a worker dies Dask recomputes
the lost results from their inputs and the run gives the same numbers; when it cannot
(too many deaths), the run stops with :class:`EngineError`, never with a partial sum.
"""

from __future__ import annotations

import copy
import math
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import reduce
from pathlib import Path
from typing import Any

import numpy as np

from fedustat._validation import RandomLike, as_seed_sequence, check_positive_int
from fedustat.protocols.base import PEER_TO, Cost, Estimate, Message, Protocol, Role
from fedustat.runtime.engine import ranks as rk
from fedustat.runtime.engine.partitions import Partition
from fedustat.runtime.simulate import (
    MAX_ROUNDS,
    _message_for_batch,
    deliver_peer_rows,
    merge_party_messages,
)

#: Values per bucket the default bucket count aims at in a distributed sort (16 MiB of
#: float64 per bucket task).
BUCKET_TARGET = 2**21

#: The scheduler's HTTP server of a cluster the engine starts: any free port. (Dask's
#: ``dashboard_address=None`` still binds the default 8787, and warns when another cluster
#: holds it; a library must not claim a fixed port.)
LOCAL_DASHBOARD_ADDRESS = ":0"


class EngineError(RuntimeError):
    """A distributed run that could not finish (a worker lost for good, a protocol step
    the engine cannot split)."""


# ------------------------------------------------------------------ worker-side tasks


@dataclass(frozen=True)
class _Bits:
    """Bits sent and received by each of a batch's parties (local ids 0..n-1), and by the
    server to them: :class:`~fedustat.runtime.simulate.MessageLog`'s counters for one
    batch, updated by returning new arrays (a task never changes its inputs)."""

    sent: np.ndarray
    received: np.ndarray
    broadcast_received: int = 0  # bits every party of the batch downloaded
    server_sent: int = 0
    peer_sent: np.ndarray | None = None  # relay rows, counted by their sender ...
    peer_received: np.ndarray | None = None  # ... and their recipient

    @classmethod
    def zeros(cls, n: int) -> _Bits:
        return cls(np.zeros(n, np.int64), np.zeros(n, np.int64),
                   peer_sent=np.zeros(n, np.int64), peer_received=np.zeros(n, np.int64))

    def _local_bits(self, ids: np.ndarray, bits: np.ndarray, offset: int) -> np.ndarray:
        local = np.asarray(ids, dtype=np.int64) - offset
        return np.bincount(local, weights=np.asarray(bits, dtype=np.int64),
                           minlength=self.sent.size).astype(np.int64)

    def record_relay_sent(self, message: Message, offset: int) -> _Bits:
        """A relay round's rows from this batch: their payload, routing fields left out
        (as ``MessageLog.record_relay``)."""
        add = self._local_bits(message.parties, message.payload_bits_per_row(), offset)
        return replace(self, peer_sent=self.peer_sent + add)

    def record_relay_received(self, delivered: Message, offset: int) -> _Bits:
        add = self._local_bits(delivered.parties, delivered.payload_bits_per_row(), offset)
        return replace(self, peer_received=self.peer_received + add)

    def _per_party(self, message: Message, offset: int) -> np.ndarray:
        local = np.asarray(message.parties, dtype=np.int64) - offset
        bits = np.asarray(message.bits_per_row(), dtype=np.int64)
        # Integer weights below 2^53 add exactly in float64.
        return np.bincount(local, weights=bits, minlength=self.sent.size).astype(np.int64)

    def record(self, message: Message, offset: int) -> _Bits:
        if message.sender is Role.PARTY:
            if message.parties is None:
                raise ValueError("a message from parties must say which party sent each row")
            return replace(self, sent=self.sent + self._per_party(message, offset))
        if message.parties is None:  # a broadcast: each party downloads it
            bits = int(message.bits_per_row())
            return replace(self, broadcast_received=self.broadcast_received + bits,
                           server_sent=self.server_sent + bits * self.sent.size)
        per_party = self._per_party(message, offset)
        return replace(self, received=self.received + per_party,
                       server_sent=self.server_sent + int(per_party.sum()))


@dataclass(frozen=True)
class _Batch:
    """What a worker keeps of one batch of parties between rounds."""

    state: Any
    rng: np.random.Generator
    bits: _Bits
    offset: int  # global id of the batch's first party
    outbox: Message | None = None
    inbox: Message | None = None
    memory: Any = None  # what the server keeps of this batch between rounds


def _same(protocol: Protocol) -> Protocol:
    return protocol


def _count_rows(partition: Partition) -> int:
    return int(partition.n_rows_stored())


def _init_batch(protocol: Protocol, partition: Partition, offset: int,
                seed: np.random.SeedSequence) -> _Batch:
    records = partition.load()
    n = records.shape[0]
    state = protocol.init_parties(records, offset + np.arange(n, dtype=np.int64))
    return _Batch(state, np.random.default_rng(seed), _Bits.zeros(n), offset)


def _party_round(protocol: Protocol, batch: _Batch) -> _Batch:
    rng = copy.deepcopy(batch.rng)  # the input stays as it was, for a recomputation
    state, message = protocol.party_step(batch.state, batch.inbox, rng)
    if message.is_peer or message.peer is not None:
        raise EngineError(f"{protocol.name}: traffic among parties (relay rounds, peer "
                          "exchanges) is not carried by the distributed engine yet")
    return replace(batch, state=state, rng=rng, bits=batch.bits.record(message, batch.offset),
                   outbox=message, inbox=None)


def _replay(protocol: Protocol, partition: Partition, offset: int,
            seed: np.random.SeedSequence, replies: tuple[Any, ...]) -> _Batch:
    """The batch after this round's party step, rebuilt from its partition, its seed and
    the server's replies so far (broadcasts, or a ranking's reply that each batch
    writes from its ranks on disk, :class:`_SpilledRanks`): the party steps draw from
    the batch's own stream in the same order, so the state is the one a kept batch
    would have."""
    batch = _init_batch(protocol, partition, offset, seed)
    for reply in replies:
        batch = _party_round(protocol, batch)
        batch = (_receive_spilled(protocol, batch, reply) if isinstance(reply, _SpilledRanks)
                 else _receive(batch, reply))
    return _party_round(protocol, batch)


def _replay_summary(protocol: Any, partition: Partition, offset: int,
                    seed: np.random.SeedSequence, replies: tuple[Any, ...],
                    context: Any) -> tuple[Any, dict[str, int]]:
    """A replayed batch's summary for this round and its bit counts so far; the batch
    itself is dropped when the task ends, so a worker holds one batch at a time."""
    batch = _replay(protocol, partition, offset, seed, replies)
    return _summarize(protocol, batch, context), _batch_costs(batch)


def _item(pair: tuple[Any, Any], i: int) -> Any:
    return pair[i]


def _summarize(protocol: Any, batch: _Batch, context: Any) -> Any:
    return protocol.summarize_batch(batch.outbox, context, batch.memory)


def _combine(protocol: Any, *summaries: Any) -> Any:
    return reduce(protocol.combine_summaries, summaries)


def _receive(batch: _Batch, message: Message) -> _Batch:
    return replace(batch, bits=batch.bits.record(message, batch.offset), outbox=None,
                   inbox=message)


def _sort(batch: _Batch, field: str) -> rk.SortedBatch:
    return rk.sort_batch(np.asarray(batch.outbox.fields[field]))


def _sample(batch: rk.SortedBatch, size: int) -> tuple[np.ndarray, int]:
    return rk.batch_sample(batch, size), int(batch.values.size)


def _counts(pieces: rk.BatchPieces) -> tuple[np.ndarray, np.ndarray]:
    return np.array([p.size for p in pieces.open], dtype=np.int64), pieces.point


def _piece(pieces: rk.BatchPieces, j: int) -> np.ndarray:
    return pieces.open[j]


def _rank_bucket(*pieces: np.ndarray) -> tuple[list[np.ndarray], bool]:
    return rk.rank_bucket(list(pieces))


def _bucket_ties(result: tuple[list[np.ndarray], bool]) -> bool:
    return result[1]


def _bucket_piece(result: tuple[list[np.ndarray], bool], i: int) -> np.ndarray:
    return result[0][i]


def _assemble(batch: rk.SortedBatch, pieces: rk.BatchPieces, bucket_ranks: list[np.ndarray],
              open_offsets: np.ndarray, point_offsets: np.ndarray,
              point_totals: np.ndarray) -> np.ndarray:
    return rk.assemble_ranks(batch, pieces, bucket_ranks, open_offsets, point_offsets,
                             point_totals)


def _rank_totals(doubled: np.ndarray) -> dict[str, int]:
    return {"n": int(doubled.size), "doubled_sum": int(doubled.sum()),
            "doubled_sq_sum": rk.exact_square_sum(doubled)}


def _rank_reply(protocol: Any, batch: _Batch, doubled: np.ndarray,
                public: dict[str, Any]) -> _Batch:
    reply, memory = protocol.rank_reply(batch.outbox, doubled, public)
    return replace(batch, bits=batch.bits.record(reply, batch.offset), outbox=None,
                   inbox=reply, memory=memory)


def _batch_costs(batch: _Batch) -> dict[str, int]:
    b = batch.bits
    # As MessageLog.cost: a party's bits are its uploads plus the relay rows it sent.
    sent = b.sent + b.peer_sent
    return {"n": int(b.sent.size), "sent": int(sent.sum()),
            "max_sent": int(sent.max()) if b.sent.size else 0,
            "received": int(b.received.sum()) + int(b.peer_received.sum())
            + b.broadcast_received * int(b.sent.size),
            "server_sent": int(b.server_sent), "peer_sent": int(b.peer_sent.sum())}


# ---- a ranking without kept batch states: sorted runs and ranks spilled to disk
#
# Each task below holds one batch or one bucket and leaves what later tasks need in
# files of the run's spill directory (written under a temporary name, then renamed, so
# a reader never sees half a file and a recomputed task rewrites the same bytes); it
# returns only O(J) numbers. The driver removes the files once they are no longer read
# and the directory when the run ends.


@dataclass(frozen=True)
class _SpilledRanks:
    """A ranking round's reply as a replayed batch rebuilds it: the batch's doubled
    mid-ranks in its message order (``ranks-<offset>.npy`` in ``directory``) and the
    ranking's public facts for :meth:`rank_reply`."""

    directory: str
    public: dict[str, Any]

    def path(self, offset: int) -> str:
        return _spill_path(self.directory, "ranks", offset)


def _spill_path(directory: str, kind: str, key: int) -> str:
    return str(Path(directory) / f"{kind}-{key}.npy")


def _spill_save(path: str, values: np.ndarray) -> None:
    directory = Path(path).parent
    if not directory.is_dir():
        raise EngineError(f"the ranking's spill directory {directory} does not exist on "
                          "this worker: give DaskEngine(spill_dir=...) a directory every "
                          "worker shares (one machine, or a shared file system), or "
                          "keep_states=True")
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as fh:
        np.save(fh, values)
    os.replace(tmp, path)


def _spill_load(path: str) -> np.ndarray:
    return np.load(path, mmap_mode="r")


def _receive_spilled(protocol: Any, batch: _Batch, reply: _SpilledRanks) -> _Batch:
    doubled = np.asarray(_spill_load(reply.path(batch.offset)))
    return _rank_reply(protocol, batch, doubled, reply.public)


def _spill_sort(protocol: Protocol, partition: Partition, offset: int,
                seed: np.random.SeedSequence, replies: tuple[Any, ...], field: str,
                directory: str) -> int:
    """Replays the batch to this round's message, sorts the field to rank and writes the
    sorted values and their order; returns the number of values."""
    batch = _replay(protocol, partition, offset, seed, replies)
    ordered = rk.sort_batch(np.asarray(batch.outbox.fields[field]))
    del batch
    _spill_save(_spill_path(directory, "sorted", offset), ordered.values)
    _spill_save(_spill_path(directory, "order", offset), ordered.order)
    return int(ordered.values.size)


def _spill_sample(directory: str, offset: int, size: int) -> np.ndarray:
    values = _spill_load(_spill_path(directory, "sorted", offset))
    return rk.batch_sample(rk.SortedBatch(values, np.empty(0, np.int64)), size)


def _spill_cut(directory: str, offset: int, splitters: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """The batch's cut positions at the splitters (``left``, ``right``)."""
    return rk.cut_positions(_spill_load(_spill_path(directory, "sorted", offset)), splitters)


def _spill_rank_bucket(directory: str, bucket: int, offsets: list[int], starts: np.ndarray,
                       stops: np.ndarray) -> bool:
    """Open bucket ``bucket``: every batch's piece (``starts[i]:stops[i]`` of its sorted
    values), ranked together; their ranks written one after the other in batch order.
    Returns whether any two values tie."""
    pieces = [np.array(_spill_load(_spill_path(directory, "sorted", o))[a:b])
              for o, a, b in zip(offsets, starts.tolist(), stops.tolist(), strict=True)]
    ranked, ties = rk.rank_bucket(pieces)
    del pieces
    _spill_save(_spill_path(directory, "bucket", bucket),
                np.concatenate(ranked) if ranked else np.empty(0, np.int64))
    return ties


def _spill_assemble(directory: str, offset: int, n: int, left: np.ndarray,
                    right: np.ndarray, bucket_starts: np.ndarray, open_offsets: np.ndarray,
                    point_offsets: np.ndarray, point_totals: np.ndarray) -> dict[str, int]:
    """The batch's global doubled mid-ranks in its message order, written for its replay
    (:class:`_SpilledRanks`); returns their exact totals. ``bucket_starts[k]``: where the
    batch's piece begins in bucket k's file."""
    piece_sizes = np.concatenate((left, [n])) - np.concatenate(([0], right))
    bucket_ranks = [np.asarray(_spill_load(_spill_path(directory, "bucket", k))[a:a + size])
                    for k, (a, size) in enumerate(zip(bucket_starts.tolist(),
                                                      piece_sizes.tolist(), strict=True))]
    ranks = rk.sorted_ranks(n, left, right, bucket_ranks, open_offsets, point_offsets,
                            point_totals)
    del bucket_ranks
    doubled = np.empty_like(ranks)
    doubled[_spill_load(_spill_path(directory, "order", offset))] = ranks
    del ranks
    _spill_save(_spill_path(directory, "ranks", offset), doubled)
    return _rank_totals(doubled)


# ---- gathered server steps and relay rounds (DaskEngine.run(..., server_steps="gathered"))


def _party_round_relay(protocol: Protocol, batch: _Batch) -> _Batch:
    """:func:`_party_round` that lets the step address its rows to parties (a relay
    round: the engine routes them between batches, :func:`_route`)."""
    rng = copy.deepcopy(batch.rng)
    # Some steps change their state in place: copy it, so that a retried task starts
    # from the same input.
    state, message = protocol.party_step(protocol.copy_party_state(batch.state), batch.inbox,
                                         rng)
    if message.peer is not None:
        raise EngineError(f"{protocol.name}: peer traffic measured inside a party step "
                          "(PeerTraffic) is not carried by the distributed engine")
    bits = (batch.bits.record_relay_sent(message, batch.offset) if message.is_peer
            else batch.bits.record(message, batch.offset))
    import cloudpickle  # comes with distributed

    try:  # Dask moves batch states between workers; fail clearly rather than retry
        # Into a sink that keeps nothing: the check costs no copy of the state (arrays are
        # written from their own buffers).
        cloudpickle.dump(state, _Discard())
    except (TypeError, AttributeError, cloudpickle.pickle.PicklingError) as exc:
        raise EngineError(f"{protocol.name}: a batch's party state cannot be serialized "
                          f"({exc}), so it cannot move between workers; the engine needs "
                          "picklable states (e.g. circuits replayed from the openings "
                          "received rather than suspended Python generators)") from None
    return replace(batch, state=state, rng=rng, bits=bits, outbox=message, inbox=None)


class _Discard:
    """A binary file that drops what is written to it."""

    def write(self, data: Any) -> int:
        return len(memoryview(data).cast("B"))


def _is_relay(batch: _Batch) -> bool:
    return bool(batch.outbox.is_peer)


def _outbox(batch: _Batch) -> Message:
    return batch.outbox


def _route(batch: _Batch, starts: np.ndarray) -> tuple[Message, ...]:
    """A batch's relay rows split by the batch holding each recipient (``starts``: the
    first party id of every batch), each piece in the batch's own row order."""
    message = batch.outbox
    if PEER_TO not in message.fields:
        raise ValueError("a relay-round message must give each row's recipient ('to')")
    target = np.asarray(message.fields[PEER_TO], dtype=np.int64)
    dest = np.searchsorted(starts, target, side="right") - 1
    parties = np.asarray(message.parties)
    return tuple(Message(message.sender, message.receiver,
                         {k: np.asarray(v)[dest == d] for k, v in message.fields.items()},
                         message.bits_per_value, parties[dest == d])
                 for d in range(starts.size))


def _piece_for(pieces: tuple[Message, ...], d: int) -> Message:
    return pieces[d]


def _deliver(batch: _Batch, *pieces: Message) -> _Batch:
    """The rows addressed to this batch's parties, ordered by (recipient, origin) as
    ``simulate.deliver_peer_rows`` orders all rows, so each party receives what it
    receives in process."""
    delivered = deliver_peer_rows(merge_party_messages(list(pieces)))
    return replace(batch, bits=batch.bits.record_relay_received(delivered, batch.offset),
                   outbox=None, inbox=delivered)


# ---- U-MPC's check-in routed between workers (the labels never reach the driver)


def _check_in_summary(protocol: Any, batch: _Batch) -> dict[str, Any]:
    return protocol.check_in_summary(batch.outbox)


def _design_summary(protocol: Any, n: int, coin: np.ndarray) -> dict[str, Any]:
    return protocol.design_summary(n, coin)


def _route_labels(protocol: Any, batch: _Batch, n: int, coin: np.ndarray,
                  starts: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    return protocol.route_labels(batch.outbox, n, coin, starts)


def _labels_known(protocol: Any, batch: _Batch,
                  *pieces: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return protocol.labels_known(batch.outbox, *pieces)


def _count_active(protocol: Any, known: tuple[np.ndarray, np.ndarray], n: int,
                  coin: np.ndarray, first: int, stop: int) -> int:
    return protocol.count_active(known, n, coin, first, stop)


def _check_in_reply(protocol: Any, batch: _Batch, n: int, coin: np.ndarray, active: int,
                    width: int, first: int, stop: int,
                    known: tuple[np.ndarray, np.ndarray] | None) -> _Batch:
    return _receive(batch, protocol.check_in_reply(n, coin, active, width, first, stop,
                                                   known))


def _add_costs(*parts: dict[str, int]) -> dict[str, int]:
    out = dict(parts[0])
    for part in parts[1:]:
        for key, value in part.items():
            out[key] = max(out[key], value) if key == "max_sent" else out[key] + value
    return out


# ------------------------------------------------------------------ the driver


class DaskEngine:
    """Runs protocols on a Dask cluster: a local one by default, or any scheduler.

    Parameters
    ----------
    client:
        An existing ``distributed.Client`` (the engine does not close it).
    address:
        A scheduler address (``"tcp://host:8786"``) to connect to, when ``client`` is None.
    n_workers:
        Workers of the local cluster started when neither is given (one thread each, in
        separate processes). Start it under ``if __name__ == "__main__":`` in scripts.
    fan_in:
        Summaries combined per task in the reduction tree (depth log_fan_in(B)).
    retries:
        Times a task that raised is tried again (a lost worker's results are recomputed
        by Dask whatever this is).
    keep_states:
        False (default): while every round so far is a reduction answered by a broadcast
        (ldp-quantized), no batch state is kept between rounds: each round's task rebuilds
        its batch from the partition, its seed and the replies so far, summarizes it and
        drops it, so a worker's memory is one batch's working set whatever the number of
        parties (the cost: earlier party steps run again, and the partition is read once
        per round). True keeps every batch's state on the workers (one party step per
        round; memory O(n / workers)). A ranking round (FedAUC) is replayed too: each
        batch's sorted values, the buckets' ranks and the batch's ranks in its message
        order go to files in ``spill_dir`` (about 32 B per value on disk, removed once
        read), and the next round's replay writes the batch's reply from its ranks, so
        a worker holds one batch or one bucket at a time. A protocol whose parties draw
        from a noise source other than the batch's seeded stream (deployment noise: a
        replay would draw anew) keeps its states.
    spill_dir:
        Where a replayed ranking writes its files: a new directory made inside it for
        each run and removed when the run ends (default: the system's temporary
        directory). Every worker must see it: one machine, or a shared file system.
    timeout:
        Seconds to wait for the scheduler at ``address``.
    """

    def __init__(self, client: Any = None, *, address: str | None = None, n_workers: int = 2,
                 fan_in: int = 8, retries: int = 1, keep_states: bool = False,
                 spill_dir: str | os.PathLike[str] | None = None,
                 timeout: float = 10.0) -> None:
        try:
            from distributed import Client, LocalCluster  # the engine extra
        except ImportError as exc:
            raise ImportError("the distributed engine needs Dask: install fedustat's "
                              "engine extra (pip install '.[engine]' in the fedustat "
                              "checkout)") from exc

        self.keep_states = bool(keep_states)
        if spill_dir is not None and not Path(spill_dir).is_dir():
            raise ValueError(f"spill_dir must be an existing directory (every worker's "
                             f"files of a ranking go there), got {str(spill_dir)!r}")
        self.spill_dir = None if spill_dir is None else str(Path(spill_dir).resolve())
        self.fan_in = check_positive_int(fan_in, "fan_in", minimum=2)
        self.retries = check_positive_int(retries, "retries", minimum=0)
        self._own: list[Any] = []
        if client is not None:
            self.client = client
        elif address is not None:
            check_address(address)
            try:
                self.client = Client(address, timeout=timeout)
            except (OSError, TimeoutError) as exc:
                raise EngineError(f"could not reach a Dask scheduler at {address} within "
                                  f"{timeout:g} s ({exc}); is one running there "
                                  "(`dask scheduler`)?") from None
            self._own = [self.client]
        else:
            cluster = LocalCluster(n_workers=check_positive_int(n_workers, "n_workers"),
                                   threads_per_worker=1, processes=True,
                                   dashboard_address=LOCAL_DASHBOARD_ADDRESS)
            self.client = Client(cluster)
            self._own = [self.client, cluster]

    def close(self) -> None:
        for thing in self._own:
            thing.close()
        self._own = []

    def __enter__(self) -> DaskEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def n_workers(self) -> int:
        return max(1, len(self.client.scheduler_info().get("workers", {})))

    # ---------------------------------------------------------------- plumbing
    def _submit(self, fn: Any, *args: Any) -> Any:
        return self.client.submit(fn, *args, pure=False, retries=self.retries)

    def _gather(self, futures: Any) -> Any:
        from distributed.client import FutureCancelledError
        from distributed.scheduler import KilledWorker

        try:
            return self.client.gather(futures)
        except KilledWorker as exc:
            raise EngineError(f"a task kept losing its worker ({exc}); the run is abandoned "
                              "and no partial result is released") from exc
        except FutureCancelledError as exc:
            raise EngineError(f"a task was cancelled ({exc}); the run is abandoned and no "
                              "partial result is released") from exc

    def _tree(self, protocol: Any, futures: list[Any]) -> Any:
        level = list(futures)
        while len(level) > 1:
            level = [self._submit(_combine, protocol, *level[i:i + self.fan_in])
                     for i in range(0, len(level), self.fan_in)]
        return self._gather(level[0])

    # ---------------------------------------------------------------- a run
    def run(self, protocol: Protocol, partitions: Sequence[Partition], *,
            rng: RandomLike = None, n_buckets: int | None = None,
            server_steps: str = "distributed") -> Estimate:
        """The release of ``protocol`` on the parties of ``partitions`` (one batch each).

        Same seed, same partition sizes: the same release as
        ``simulate(protocol, all_rows, rng=seed, batch_size=[sizes])`` (exact integer
        sums on the server side: equal whenever the in-process float sums are exact).
        ``n_buckets``: buckets of a distributed sort (default: about 2^21 values each,
        at least one per worker).

        ``server_steps="gathered"`` runs a protocol without a distributed server step
        (e.g. ``umpc``): the party steps run on the workers, rows the parties address to
        each other (relay rounds) move between the batches' workers, and each server
        step runs as in process on the driver with all the round's messages gathered
        there (the driver then holds O(n) per round: use it where the server's input is
        small per party), except the rounds a protocol splits: a reduction
        (``gathered_reduction``) or U-MPC's check-in routed between the batches
        (``routed_check_in``), which never reach the driver.
        """
        if server_steps not in ("distributed", "gathered"):
            raise ValueError(f"server_steps must be 'distributed' or 'gathered', got "
                             f"{server_steps!r}")
        if server_steps == "gathered" and not isinstance(protocol, Protocol):
            raise TypeError(f"protocol must be a fedustat Protocol, got "
                            f"{type(protocol).__name__}")
        if isinstance(protocol, Protocol):
            # No seed: private draws come from the OS CSPRNG on every worker.
            protocol = protocol.for_run(rng)
        release = (self._run_gathered(protocol, partitions, rng) if server_steps == "gathered"
                   else self._run_distributed(protocol, partitions, rng, n_buckets))
        if release.noise != "none" and isinstance(protocol, Protocol):
            release = replace(release, noise=protocol.randomness_grade)
        return release

    def _run_distributed(self, protocol: Protocol, partitions: Sequence[Partition],
                         rng: RandomLike, n_buckets: int | None) -> Estimate:
        """:meth:`run` with the server steps as reductions (``server_steps="distributed"``)."""
        check_supported(protocol)
        parts = list(partitions)
        if not parts or not all(isinstance(p, Partition) for p in parts):
            raise TypeError("partitions must be a non-empty sequence of Partition objects "
                            "(see fedustat.runtime.engine.partitions)")
        sizes = self._gather([self._submit(_count_rows, p) for p in parts])
        empty = [i for i, s in enumerate(sizes) if s == 0]
        if empty:
            raise ValueError(f"partition {empty[0]} holds no rows; every batch needs a party")
        n = int(sum(sizes))
        protocol = protocol.configure(n)
        root = as_seed_sequence(rng)
        seeds = root.spawn(len(parts) + 1)
        server_rng = np.random.default_rng(seeds[0])
        offsets = [int(o) for o in np.concatenate(([0], np.cumsum(sizes)[:-1]))]
        # The protocol (public kernel matrices: megabytes at k = 256) travels once, as a
        # task result that every batch task reads and Dask can recompute if it is lost.
        shared = self._submit(_same, protocol)
        # Replaying a batch redraws its party steps: the same draws only when they come
        # from the batch's seeded stream, so a protocol drawing from another source (OS
        # entropy: deployment noise) keeps its states.
        replay = not self.keep_states and protocol.randomness_grade != "deployment"
        spill: list[str] = []  # a replayed ranking's directory, removed however the run ends
        try:
            return self._rounds(protocol, parts, offsets, seeds, server_rng, n, shared,
                                replay, n_buckets, spill)
        finally:
            for directory in spill:
                shutil.rmtree(directory, ignore_errors=True)

    def _rounds(self, protocol: Any, parts: list[Partition], offsets: list[int],
                seeds: list[np.random.SeedSequence], server_rng: np.random.Generator,
                n: int, shared: Any, replay: bool, n_buckets: int | None,
                spill: list[str]) -> Estimate:
        server_state = protocol.init_server(n)
        replies: list[Any] = []  # replies so far, while no batch state is kept
        batches: list[Any] | None = None  # futures of the kept batch states, once kept
        rounds = 0
        for _ in range(MAX_ROUNDS):
            try:
                kind, context = protocol.distributed_round(server_state)
            except NotImplementedError as exc:
                raise EngineError(str(exc)) from None
            rounds += 1
            if kind not in ("reduce", "rank"):
                raise EngineError(f"{protocol.name}: unknown distributed round {kind!r}")
            if batches is None and kind == "reduce" and replay:
                pairs = [self._submit(_replay_summary, shared, p, o, s, tuple(replies),
                                      context)
                         for p, o, s in zip(parts, offsets, seeds[1:], strict=True)]
                summary = self._tree(shared, [self._submit(_item, r, 0) for r in pairs])
                try:
                    server_state, out = protocol.server_step_reduced(server_state, summary,
                                                                     server_rng)
                except NotImplementedError as exc:  # a release the totals cannot give
                    raise EngineError(str(exc)) from None
                if isinstance(out, Estimate):
                    costs = self._gather([self._submit(_item, r, 1) for r in pairs])
                    return out.with_cost(_cost_of(costs, rounds, out))
                replies.append(_broadcast(protocol, out))
                rounds += 1
                continue
            if batches is None and kind == "rank" and replay:
                if not spill:
                    spill.append(tempfile.mkdtemp(prefix="fedustat-ranks-",
                                                  dir=self.spill_dir))
                server_state, reply = self._spilled_rank_round(
                    protocol, shared, parts, offsets, seeds[1:], tuple(replies),
                    server_state, context, server_rng, n_buckets, spill[0])
                replies.append(reply)
                rounds += 1
                continue
            if batches is None:
                batches = [self._submit(_replay, shared, p, o, s, tuple(replies))
                           for p, o, s in zip(parts, offsets, seeds[1:], strict=True)]
            else:
                batches = [self._submit(_party_round, shared, b) for b in batches]
            if kind == "rank":
                batches, server_state = self._rank_round(protocol, shared, batches, server_state,
                                                         context, server_rng, n_buckets)
                rounds += 1
                continue
            summary = self._tree(shared, [self._submit(_summarize, shared, b, context)
                                            for b in batches])
            try:
                server_state, out = protocol.server_step_reduced(server_state, summary,
                                                                 server_rng)
            except NotImplementedError as exc:  # a release the totals cannot give
                raise EngineError(str(exc)) from None
            if isinstance(out, Estimate):
                costs = self._gather([self._submit(_batch_costs, b) for b in batches])
                return out.with_cost(_cost_of(costs, rounds, out))
            reply = _broadcast(protocol, out)
            batches = [self._submit(_receive, b, reply) for b in batches]
            rounds += 1
        raise EngineError(f"protocol {protocol.name!r} did not finish within {MAX_ROUNDS} "
                          "rounds")

    def _run_gathered(self, protocol: Protocol, partitions: Sequence[Partition],
                      rng: RandomLike) -> Estimate:
        """:meth:`run` with relay rounds routed between workers and every server step on
        the driver (``server_steps="gathered"``); streams and costs as in process."""
        parts = list(partitions)
        if not parts or not all(isinstance(p, Partition) for p in parts):
            raise TypeError("partitions must be a non-empty sequence of Partition objects "
                            "(see fedustat.runtime.engine.partitions)")
        sizes = self._gather([self._submit(_count_rows, p) for p in parts])
        if any(s == 0 for s in sizes):
            raise ValueError(f"partition {sizes.index(0)} holds no rows; every batch needs "
                             "a party")
        n = int(sum(sizes))
        protocol = protocol.configure(n)
        roles = list(protocol.service_roles())
        if roles:
            # The simulator steps record-less services after the parties each round; the
            # engine does not (yet): their rows would have nowhere to go.
            raise EngineError(f"{protocol.name}: the service roles {roles} do not run on "
                              "the engine; run it in process or over the network, or with "
                              "the parties in those roles (dealer='party', "
                              "shuffler='server')")
        seeds = as_seed_sequence(rng).spawn(len(parts) + 1)
        server_rng = np.random.default_rng(seeds[0])
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        shared = self._submit(_same, protocol)
        batches = [self._submit(_init_batch, shared, p, int(o), s)
                   for p, o, s in zip(parts, offsets.tolist(), seeds[1:], strict=True)]
        server_state = protocol.init_server(n)
        rounds = peer_rounds = 0
        for _ in range(MAX_ROUNDS):
            batches = [self._submit(_party_round_relay, shared, b) for b in batches]
            relay = self._gather([self._submit(_is_relay, b) for b in batches])
            if all(relay):  # routed worker to worker; no server step (as in process)
                routed = [self._submit(_route, b, offsets) for b in batches]
                batches = [self._submit(_deliver, b, *[self._submit(_piece_for, r, d)
                                                       for r in routed])
                           for d, b in enumerate(batches)]
                peer_rounds += 1
                continue
            if any(relay):
                raise EngineError(f"{protocol.name}: in one round batch {relay.index(True)} "
                                  f"sent its message to parties and batch "
                                  f"{relay.index(False)} to the server")
            rounds += 1
            routed = getattr(protocol, "routed_check_in", None)
            if routed is not None and routed(server_state):
                batches = self._routed_check_in(protocol, shared, batches, server_state,
                                                server_rng, n, offsets, sizes)
                rounds += 1
                continue
            # A protocol may declare this round's server work a reduction (U-MPC's
            # aggregation, a ring sum): the batches' summaries are combined by a tree of
            # tasks and the driver never holds the round's per-party rows.
            hook = getattr(protocol, "gathered_reduction", None)
            context = hook(server_state) if hook is not None else None
            if context is not None:
                summary = self._tree(shared, [self._submit(_summarize, shared, b, context)
                                              for b in batches])
                server_state, out = protocol.server_step_reduced(server_state, summary,
                                                                 server_rng)
            else:
                inbox = merge_party_messages(self._gather([self._submit(_outbox, b)
                                                           for b in batches]))
                server_state, out = protocol.server_step(server_state, inbox, server_rng)
            if isinstance(out, Estimate):
                costs = self._gather([self._submit(_batch_costs, b) for b in batches])
                return out.with_cost(_cost_of(costs, rounds, out, peer_rounds))
            rounds += 1
            batches = [self._submit(_receive, b, _message_for_batch(
                out, slice(int(o), int(o) + int(size))))
                for b, o, size in zip(batches, offsets, sizes, strict=True)]
        raise EngineError(f"protocol {protocol.name!r} did not finish within {MAX_ROUNDS} "
                          "rounds")

    def _routed_check_in(self, protocol: Any, shared: Any, batches: list[Any],
                         server_state: Any, server_rng: np.random.Generator, n: int,
                         offsets: np.ndarray, sizes: list[int]) -> list[Any]:
        """U-MPC's round 0 without the parties' labels on the driver: it holds the
        batches' counts and the public coin; each batch routes its labels to the batches
        whose parties need them (a shuffle keyed by edge, like the relay rounds), counts
        the active edges it leads and writes its own parties' round-1 rows."""
        summaries = self._gather([self._submit(_check_in_summary, shared, b)
                                  for b in batches])
        coin = protocol.check_in_coin(server_state, summaries, server_rng)
        design = self._gather(self._submit(_design_summary, shared, n, coin))
        bounds = [(int(o), int(o) + int(size)) for o, size in zip(offsets, sizes, strict=True)]
        known: list[Any] = [None] * len(batches)
        active = int(design["size"])
        if "counts" in summaries[0]:  # public labels: route them, count the active edges
            routed = [self._submit(_route_labels, shared, b, n, coin, offsets)
                      for b in batches]
            known = [self._submit(_labels_known, shared, b,
                                  *[self._submit(_piece_for, r, d) for r in routed])
                     for d, b in enumerate(batches)]
            active = sum(self._gather([self._submit(_count_active, shared, kn, n, coin, lo, hi)
                                       for kn, (lo, hi) in zip(known, bounds, strict=True)]))
        protocol.check_in_done(server_state, design, active)
        width = int(design["label_row_width"])
        return [self._submit(_check_in_reply, shared, b, n, coin, active, width, lo, hi, kn)
                for b, kn, (lo, hi) in zip(batches, known, bounds, strict=True)]

    def _spilled_rank_round(self, protocol: Any, shared: Any, parts: list[Partition],
                            offsets: list[int], seeds: list[np.random.SeedSequence],
                            replies: tuple[Any, ...], server_state: Any, field: str,
                            server_rng: np.random.Generator, n_buckets: int | None,
                            directory: str) -> tuple[Any, _SpilledRanks]:
        """:meth:`_rank_round` without kept batch states: the same splitters, buckets and
        exact ranks, each task holding one batch or one bucket and passing the rest on
        in files (the tasks above); the ranks stay on disk for the next round's replay."""
        sizes = self._gather([self._submit(_spill_sort, shared, p, o, s, replies, field,
                                           directory)
                              for p, o, s in zip(parts, offsets, seeds, strict=True)])
        m = int(sum(sizes))
        j = n_buckets if n_buckets is not None else max(
            self.n_workers, math.ceil(m / BUCKET_TARGET))
        j = check_positive_int(j, "n_buckets")
        samples = self._gather([self._submit(_spill_sample, directory, o, 16 * j + 1)
                                for o in offsets])
        splitters = rk.choose_splitters(samples, sizes, j)
        cuts = self._gather([self._submit(_spill_cut, directory, o, splitters)
                             for o in offsets])
        left = np.array([c[0] for c in cuts], dtype=np.int64).reshape(len(offsets), -1)
        right = np.array([c[1] for c in cuts], dtype=np.int64).reshape(len(offsets), -1)
        size_col = np.array(sizes, dtype=np.int64)[:, None]
        starts = np.hstack([np.zeros_like(size_col), right])  # (B, J + 1) open pieces
        stops = np.hstack([left, size_col])
        open_totals = (stops - starts).sum(axis=0)
        point_totals = (right - left).sum(axis=0).astype(np.int64)
        ties = self._gather([self._submit(_spill_rank_bucket, directory, k, offsets,
                                          starts[:, k], stops[:, k])
                             for k in range(open_totals.size)])
        for o in offsets:
            os.remove(_spill_path(directory, "sorted", o))
        open_off, point_off = rk.bucket_offsets(open_totals, point_totals)
        # Where each batch's piece begins in each bucket's file (batch order).
        bucket_starts = np.cumsum(stops - starts, axis=0) - (stops - starts)
        totals = _add_rank_totals(self._gather([
            self._submit(_spill_assemble, directory, o, size, left[i], right[i],
                         bucket_starts[i], open_off, point_off, point_totals)
            for i, (o, size) in enumerate(zip(offsets, sizes, strict=True))]))
        for o in offsets:
            os.remove(_spill_path(directory, "order", o))
        for k in range(open_totals.size):
            os.remove(_spill_path(directory, "bucket", k))
        totals["ties"] = bool(np.any(point_totals > 1)) or any(ties)
        server_state, public = protocol.server_step_ranked(server_state, totals, server_rng)
        return server_state, _SpilledRanks(directory, dict(public))

    def _rank_round(self, protocol: Any, shared: Any, batches: list[Any], server_state: Any,
                    field: str, server_rng: np.random.Generator, n_buckets: int | None
                    ) -> tuple[list[Any], Any]:
        sorted_f = [self._submit(_sort, b, field) for b in batches]
        samples = self._gather([self._submit(_sample, s, 0) for s in sorted_f])
        m = sum(size for _, size in samples)
        j = n_buckets if n_buckets is not None else max(
            self.n_workers, math.ceil(m / BUCKET_TARGET))
        j = check_positive_int(j, "n_buckets")
        sample_size = 16 * j + 1
        samples = self._gather([self._submit(_sample, s, sample_size) for s in sorted_f])
        splitters = rk.choose_splitters([s for s, _ in samples], [w for _, w in samples], j)
        cut_f = [self._submit(rk.cut_batch, s, splitters) for s in sorted_f]
        counts = self._gather([self._submit(_counts, c) for c in cut_f])
        open_totals = np.sum([c[0] for c in counts], axis=0)
        point_totals = np.sum([c[1] for c in counts], axis=0).astype(np.int64)
        n_open = open_totals.size
        bucket_f = [self._submit(_rank_bucket, *[self._submit(_piece, c, k) for c in cut_f])
                    for k in range(n_open)]
        ties = bool(np.any(point_totals > 1)) or any(
            self._gather([self._submit(_bucket_ties, b) for b in bucket_f]))
        open_off, point_off = rk.bucket_offsets(open_totals, point_totals)
        doubled_f = [self._submit(_assemble, sorted_f[i], cut_f[i],
                                  [self._submit(_bucket_piece, b, i) for b in bucket_f],
                                  open_off, point_off, point_totals)
                     for i in range(len(batches))]
        totals = _add_rank_totals(self._gather([self._submit(_rank_totals, d)
                                                for d in doubled_f]))
        totals["ties"] = ties
        server_state, public = protocol.server_step_ranked(server_state, totals, server_rng)
        replies = [self._submit(_rank_reply, shared, b, d, public)
                   for b, d in zip(batches, doubled_f, strict=True)]
        return replies, server_state


def _broadcast(protocol: Protocol, out: Message) -> Message:
    if out.parties is not None:
        raise EngineError(f"{protocol.name}: a reduced server step must reply with a "
                          "broadcast")
    return out


def _cost_of(parts: list[dict[str, int]], rounds: int, out: Estimate,
             peer_rounds: int = 0) -> Cost:
    t = _add_costs(*parts)
    n = t["n"]
    # As MessageLog.cost, from per-batch totals (every party lives in one batch; relay
    # rows counted by sender and recipient; no dealer material measured inside a step:
    # the engine refuses steps that report any).
    return Cost(bits_per_party=t["sent"] / n, max_bits_per_party=t["max_sent"],
                bits_received_per_party=t["received"] / n,
                total_bits=t["sent"] + t["server_sent"], rounds=rounds + peer_rounds,
                server_operations=int(out.cost.server_operations),
                offline_bits=out.cost.offline_bits,
                peer_bits_per_party=t["peer_sent"] / n, peer_rounds=peer_rounds)


def check_supported(protocol: Any) -> None:
    """Raise :class:`EngineError` naming ``protocol`` and why, if the engine cannot run
    it (checked before any cluster work, so a refusal is immediate).


    Parameters
    ----------
    protocol:
        A built protocol (:func:`fedustat.protocols.registry.make`).

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> from fedustat.runtime.engine import check_supported
    >>> from fedustat.stats.kernels import auc_kernel
    >>> check_supported(registry.make("fedauc-rr", auc_kernel(), epsilon=1.0))
    >>> central = registry.make("central-laplace", auc_kernel(), epsilon=1.0)
    >>> check_supported(central)  # doctest: +IGNORE_EXCEPTION_DETAIL
    Traceback (most recent call last):
        ...
    EngineError: protocol 'central-laplace' has no distributed server step: ...
    """
    if not isinstance(protocol, Protocol):
        raise TypeError(f"protocol must be a fedustat Protocol, got "
                        f"{type(protocol).__name__}")
    if not hasattr(protocol, "distributed_round"):
        raise EngineError(f"protocol {protocol.name!r} has no distributed server step: it "
                          "does not declare its server step as a reduction or a sort the "
                          "engine can split (distributed_round), so it cannot run on the "
                          "distributed engine; run it in process (engine=None)")
    if hasattr(protocol, "check_distributed"):
        try:
            protocol.check_distributed()
        except NotImplementedError as exc:
            raise EngineError(f"protocol {protocol.name!r} cannot run on the distributed "
                              f"engine: {exc}") from None


_ADDRESS = re.compile(r"^(tcp|tls|inproc|ucx|ws|wss)://\[?[\w.:-]+\]?:\d{1,5}$")


def check_address(address: Any) -> str:
    """A scheduler address ``scheme://host:port``, or a ValueError saying what is wrong.

    Parameters
    ----------
    address:
        The address to check.

    Returns
    -------
    str
        ``address``, unchanged.

    Examples
    --------
    >>> from fedustat.runtime.engine import check_address
    >>> check_address("tcp://127.0.0.1:8786")
    'tcp://127.0.0.1:8786'
    >>> check_address("localhost:8786")
    Traceback (most recent call last):
        ...
    ValueError: a Dask scheduler address looks like 'tcp://host:8786' (scheme tcp, ...
    """
    if not isinstance(address, str) or not _ADDRESS.match(address):
        raise ValueError(f"a Dask scheduler address looks like 'tcp://host:8786' (scheme "
                         f"tcp, tls, inproc, ucx, ws or wss, then host:port), got {address!r}")
    if not 0 < int(address.rsplit(":", 1)[1]) < 65536:
        raise ValueError(f"port of scheduler address {address!r} must be in 1..65535")
    return address


def resolve_engine(engine: Any, *, workers: int | None = None) -> tuple[DaskEngine, bool]:
    """The :class:`DaskEngine` that ``engine`` names and whether the caller owns (must
    close) it: ``"local"`` (a LocalCluster of ``workers`` processes, default 2), a
    scheduler address ``"tcp://host:port"``, a DaskEngine, or a ``distributed.Client``.


    Parameters
    ----------
    engine:
        ``"local"``, a scheduler address, a :class:`DaskEngine` or a ``distributed.Client``.
    workers:
        Worker processes of ``"local"`` (refused with any other ``engine``).

    Returns
    -------
    tuple of (DaskEngine, bool)
        The engine, and True if the caller made it and must close it.

    Examples
    --------
    >>> from distributed import Client
    >>> from fedustat.runtime.engine import resolve_engine
    >>> client = Client(processes=False, n_workers=1, threads_per_worker=1,
    ...                 dashboard_address=":0")
    >>> engine, owned = resolve_engine(client)
    >>> type(engine).__name__, owned
    ('DaskEngine', False)
    >>> client.close()
    """
    if workers is not None and not (isinstance(engine, str) and engine == "local"):
        raise ValueError("workers= sets the size of a local cluster: use it with "
                         "engine='local' (a remote cluster has the workers it has)")
    if isinstance(engine, DaskEngine):
        return engine, False
    if isinstance(engine, str):
        if engine == "local":
            return DaskEngine(n_workers=2 if workers is None else workers), True
        if "://" in engine:
            return DaskEngine(address=engine), True
    elif type(engine).__module__.split(".")[0] == "distributed" and \
            type(engine).__name__ == "Client":
        return DaskEngine(engine), False
    raise ValueError(f"engine must be None (in process), 'local', a scheduler address "
                     f"'tcp://host:port', a DaskEngine or a distributed.Client; got "
                     f"{engine!r}")


def _add_rank_totals(parts: list[dict[str, int]]) -> dict[str, Any]:
    return {key: sum(p[key] for p in parts) for key in ("n", "doubled_sum", "doubled_sq_sum")}


def run_distributed(protocol: Protocol, partitions: Sequence[Partition], *,
                    rng: RandomLike = None, engine: DaskEngine | None = None,
                    **engine_options: Any) -> Estimate:
    """Run ``protocol`` on ``partitions`` with ``engine`` (default: a local cluster made
    for this run and closed after it; ``engine_options`` go to :class:`DaskEngine`).


    Parameters
    ----------
    protocol:
        A built protocol the engine can run (:func:`check_supported`).
    partitions:
        The parties' rows, in party order (:class:`Partition` objects).
    rng:
        Seed or Generator of the run.
    engine:
        A :class:`DaskEngine`, or None for a local cluster made for this run.
    **engine_options:
        Options of that local :class:`DaskEngine`.

    Returns
    -------
    Estimate
        The release, as the in-process run with batches of the partitions' sizes.

    Examples
    --------
    >>> from distributed import Client
    >>> from fedustat.protocols import registry
    >>> from fedustat.runtime.engine import DaskEngine, array_partitions, run_distributed
    >>> from fedustat.stats.kernels import auc_kernel
    >>> kernel = auc_kernel()
    >>> rows = kernel.pack(np.tile([0.1, 0.4, 0.35, 0.8, 0.2, 0.9], 10),
    ...                    np.tile([0, 0, 1, 1, 0, 1], 10))
    >>> protocol = registry.make("fedauc-rr", kernel, epsilon=1.0)
    >>> client = Client(processes=False, n_workers=1, threads_per_worker=1,
    ...                 dashboard_address=":0")
    >>> est = run_distributed(protocol, array_partitions(rows, [30, 30]), rng=0,
    ...                       engine=DaskEngine(client))
    >>> round(est.value, 3)
    0.752
    >>> client.close()
    """
    if engine is not None:
        return engine.run(protocol, partitions, rng=rng)
    with DaskEngine(**engine_options) as own:
        return own.run(protocol, partitions, rng=rng)
