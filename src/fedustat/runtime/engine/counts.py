"""DP ECDF releases from partitioned data: the counts as a distributed sum.

The curator of the central tree ECDF (003 Sec. 3.1, :func:`fedustat.protocols.ecdf.dp_ecdf`)
and of the DP ROC curve (003 Sec. 5.1) does two things: it counts the records at or
below each threshold (a sum over records) and adds tree noise to the counts. Here each
partition counts its own records on a worker, a tree of tasks adds the integer count
vectors, and the driver draws the noise with the same release code and the same random
stream as the in-process call (``dp_ecdf_from_counts``, ``dp_roc_curve_from_counts``), so
for the same seed the release equals ``dp_ecdf(all values, ...)`` exactly. The driver
holds O(N) numbers for N thresholds, whatever the number of records.

The secure-aggregation ECDF (003 Sec. 4.1, :func:`fedustat.protocols.ecdf.pointwise_ecdf`)
splits the same way: each batch of parties shares its fixed-point indicators among the m
servers, and server j's work is the sum (mod 2^l) of the shares addressed to it, so a
batch's column sums reduce by a tree of tasks; the servers' noise and the opening run on
the driver with the in-process call's stream (:func:`pointwise_ecdf_distributed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_binary_labels,
    as_seed_sequence,
    check_epsilon,
)
from fedustat.privacy.noise import NoiseSource
from fedustat.protocols.ecdf.federated import FederatedECDF
from fedustat.protocols.ecdf.hierarchical import NodeNoise
from fedustat.protocols.ecdf.release import PrivateECDF, dp_ecdf_from_counts
from fedustat.protocols.ecdf.roc import DPROCCurve, dp_roc_curve_from_counts, roc_class_counts
from fedustat.protocols.ecdf.secagg import PointwiseECDF
from fedustat.protocols.ecdf.shared_noise import Randomness, SharedTreeNoise, run_randomness
from fedustat.protocols.ecdf.tree_noise import TreeNoise
from fedustat.runtime.engine.driver import DaskEngine
from fedustat.runtime.engine.partitions import Partition
from fedustat.stats.ecdf import check_thresholds, ecdf_counts

__all__ = [
    "distributed_ecdf_counts",
    "dp_ecdf_distributed",
    "dp_roc_curve_distributed",
    "pointwise_ecdf_distributed",
]


def _value_counts(partition: Partition, tau: np.ndarray, column: int) -> tuple[Any, ...]:
    rows = partition.load()
    if not 0 <= column < rows.shape[1]:
        raise ValueError(f"column {column} is not a column of the partition's "
                         f"{rows.shape[1]} columns")
    return ecdf_counts(rows[:, column], tau), rows.shape[0]


def _roc_counts(partition: Partition, tau: np.ndarray) -> tuple[Any, ...]:
    rows = partition.load()
    if rows.shape[1] != 2:
        raise ValueError(f"ROC partitions must have 2 columns (score, label), got "
                         f"{rows.shape[1]}")
    scores = rows[:, 0]
    labels = as_binary_labels(rows[:, 1], "label", require_both=False)
    if scores.size and scores.max() > tau[-1]:
        raise ValueError(f"y_score has values above the last threshold {tau[-1]:g}; the "
                         "grid must end at a public upper bound of the scores")
    pos, neg = roc_class_counts(labels, scores, tau)
    return pos, neg, rows.shape[0]


def _add(*parts: tuple[Any, ...]) -> tuple[Any, ...]:
    # Integer vectors and counts: the sum is exact in any grouping.
    return tuple(sum(items[1:], items[0]) for items in zip(*parts, strict=True))


def _reduce(engine: DaskEngine, futures: list[Any]) -> tuple[Any, ...]:
    level = list(futures)
    while len(level) > 1:
        level = [engine._submit(_add, *level[i:i + engine.fan_in])
                 for i in range(0, len(level), engine.fan_in)]
    return engine._gather(level[0])


def _run(engine: DaskEngine | None, job: Any) -> Any:
    if engine is not None:
        return job(engine)
    with DaskEngine() as own:
        return job(own)


def _check_partitions(partitions: Sequence[Partition]) -> list[Partition]:
    parts = list(partitions)
    if not parts or not all(isinstance(p, Partition) for p in parts):
        raise TypeError("partitions must be a non-empty sequence of Partition objects "
                        "(see fedustat.runtime.engine.partitions)")
    return parts


def distributed_ecdf_counts(engine: DaskEngine, partitions: Sequence[Partition],
                            thresholds: Any, *, column: int = 0) -> tuple[np.ndarray, int]:
    """``(|{j : x_j <= tau_i}| for every threshold, n)`` over all partitions' records
    (column ``column``), summed by a tree of tasks.


    Parameters
    ----------
    engine:
        The :class:`DaskEngine` to run on.
    partitions:
        The parties' rows (:class:`Partition` objects).
    thresholds:
        Public, strictly increasing grid.
    column:
        The column holding the values.

    Returns
    -------
    tuple of (numpy.ndarray, int)
        The exact counts at every threshold, and the number of records.

    Examples
    --------
    >>> from distributed import Client
    >>> from fedustat.runtime.engine import DaskEngine, array_partitions
    >>> client = Client(processes=False, n_workers=1, threads_per_worker=1,
    ...                 dashboard_address=":0")
    >>> engine = DaskEngine(client)
    >>> from fedustat.runtime.engine import distributed_ecdf_counts
    >>> rows = np.array([[0.1], [0.4], [0.5], [0.9], [0.3]])
    >>> distributed_ecdf_counts(engine, array_partitions(rows, [2, 3]), [0.25, 0.5, 1.0])
    (array([1, 4, 5]), 5)
    >>> client.close()
    """
    tau = check_thresholds(thresholds)
    parts = _check_partitions(partitions)
    counts, n = _reduce(engine, [engine._submit(_value_counts, p, tau, int(column))
                                 for p in parts])
    return np.asarray(counts, dtype=np.int64), int(n)


def dp_ecdf_distributed(partitions: Sequence[Partition], thresholds: Any, *,
                        epsilon: float, rng: RandomLike = None,
                        noise: NoiseSource | None = None, column: int = 0,
                        engine: DaskEngine | None = None) -> PrivateECDF:
    """:func:`~fedustat.protocols.ecdf.dp_ecdf` of the values in ``column`` of every
    partition: counts summed on the cluster, tree noise drawn on the driver with ``rng``
    (the same release as ``dp_ecdf(all values, thresholds, epsilon=..., rng=rng)``).
    ``engine``: a :class:`DaskEngine` (default: a local cluster for this call).


    Parameters
    ----------
    partitions:
        The parties' rows (:class:`Partition` objects).
    thresholds:
        Public, strictly increasing grid.
    epsilon:
        Budget (> 0), or ``math.inf`` for the exact curve.
    rng, noise:
        Seed / Generator, or a :class:`NoiseSource`, as in ``dp_ecdf``.
    column:
        The column holding the values.
    engine:
        A :class:`DaskEngine`, or None for a local cluster made for this call.

    Returns
    -------
    PrivateECDF
        The release, equal to the in-process one.

    Examples
    --------
    >>> from distributed import Client
    >>> from fedustat.runtime.engine import DaskEngine, array_partitions
    >>> client = Client(processes=False, n_workers=1, threads_per_worker=1,
    ...                 dashboard_address=":0")
    >>> engine = DaskEngine(client)
    >>> from fedustat.runtime.engine import dp_ecdf_distributed
    >>> rows = np.random.default_rng(0).uniform(size=(100, 1))
    >>> grid = [0.25, 0.5, 0.75, 1.0]
    >>> curve = dp_ecdf_distributed(array_partitions(rows, [40, 60]), grid, epsilon=1.0,
    ...                             rng=0, engine=engine)
    >>> from fedustat.protocols.ecdf import dp_ecdf
    >>> in_process = dp_ecdf(rows[:, 0], grid, epsilon=1.0, rng=0)
    >>> bool(np.all(curve.values == in_process.values))
    True
    >>> client.close()
    """
    tau = check_thresholds(thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    parts = _check_partitions(partitions)
    counts, n = _run(engine, lambda e: distributed_ecdf_counts(e, parts, tau, column=column))
    return dp_ecdf_from_counts(counts, n, tau, epsilon=eps, rng=rng, noise=noise)


def dp_roc_curve_distributed(partitions: Sequence[Partition], *, epsilon: float,
                             thresholds: Any, estimator: str | None = None,
                             smooth: bool | None = None, p: int = 2,
                             n_bootstrap: int | None = None,
                             rng: RandomLike = None, noise: NoiseSource | None = None,
                             curve_method: str | None = None,
                             engine: DaskEngine | None = None) -> DPROCCurve:
    """:func:`~fedustat.protocols.ecdf.dp_roc_curve` of partitions holding rows
    ``(score, label)``: the two classes' counts summed on the cluster, the release on the
    driver with ``rng`` (the same release as the in-process call on all rows).


    Parameters
    ----------
    partitions:
        The parties' rows ``(score, label)`` (:class:`Partition` objects).
    epsilon, thresholds, estimator, smooth, p, n_bootstrap, rng, noise, curve_method:
        As in :func:`~fedustat.protocols.ecdf.dp_roc_curve`.
    engine:
        A :class:`DaskEngine`, or None for a local cluster made for this call.

    Returns
    -------
    DPROCCurve
        The release, equal to the in-process one.

    Examples
    --------
    >>> from distributed import Client
    >>> from fedustat.runtime.engine import DaskEngine, array_partitions
    >>> client = Client(processes=False, n_workers=1, threads_per_worker=1,
    ...                 dashboard_address=":0")
    >>> engine = DaskEngine(client)
    >>> from fedustat.runtime.engine import dp_roc_curve_distributed
    >>> rows = np.column_stack([[0.1, 0.4, 0.35, 0.8, 0.2, 0.9], [0, 0, 1, 1, 0, 1]])
    >>> roc = dp_roc_curve_distributed(array_partitions(rows, [3, 3]), epsilon=math.inf,
    ...                                thresholds=np.linspace(0.1, 1.0, 10), engine=engine)
    >>> round(roc.auc.value, 4)
    0.9444
    >>> client.close()
    """
    tau = check_thresholds(thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    parts = _check_partitions(partitions)

    def job(e: DaskEngine) -> tuple[Any, ...]:
        return _reduce(e, [e._submit(_roc_counts, part, tau) for part in parts])

    pos, neg, n = _run(engine, job)
    return dp_roc_curve_from_counts(np.asarray(pos, np.int64), np.asarray(neg, np.int64),
                                    int(n), epsilon=eps, thresholds=tau, estimator=estimator,
                                    smooth=smooth, p=p, n_bootstrap=n_bootstrap, rng=rng,
                                    noise=noise, curve_method=curve_method)


def _batch_shares(protocol: PointwiseECDF, partition: Partition, column: int, offset: int,
                  seed: np.random.SeedSequence) -> dict[str, Any]:
    """One batch's share upload (as ``pointwise_ecdf`` makes it), summed per server."""
    rows = partition.load()
    if not 0 <= column < rows.shape[1]:
        raise ValueError(f"column {column} is not a column of the partition's "
                         f"{rows.shape[1]} columns")
    values = rows[:, column]
    parties = protocol.init_parties(values, offset + np.arange(values.size, dtype=np.int64))
    upload = protocol.shares_for_servers(parties, protocol.query_message(),
                                         np.random.default_rng(seed))
    shares = np.asarray(upload.fields["shares"])
    bits = np.asarray(upload.bits_per_row())
    return {"sums": protocol.ring.sum(shares, axis=0), "received": int(shares.shape[0]),
            "upload_bits": int(bits.sum()), "max_upload_bits": int(bits.max(initial=0))}


def _add_shares(protocol: PointwiseECDF, *parts: dict[str, Any]) -> dict[str, Any]:
    out = dict(parts[0])
    for part in parts[1:]:
        # Sums of additive shares mod 2^l: associative, so any tree gives the same sums.
        out = {"sums": protocol.ring.add(out["sums"], part["sums"]),
               "received": out["received"] + part["received"],
               "upload_bits": out["upload_bits"] + part["upload_bits"],
               "max_upload_bits": max(out["max_upload_bits"], part["max_upload_bits"])}
    return out


def pointwise_ecdf_distributed(partitions: Sequence[Partition], thresholds: Any,
                               query: Any = None, *, epsilon: float, n_servers: int = 2,
                               noise: SharedTreeNoise | None = None,
                               tree_noise: TreeNoise | NodeNoise | None = None,
                               contributors: int | None = None, min_honest: int = 1,
                               frac_bits: int | None = None, ring_bits: int = 64,
                               rng: RandomLike = None, randomness: Randomness | None = None,
                               column: int = 0, engine: DaskEngine | None = None,
                               method: str | None = None) -> FederatedECDF:
    """:func:`~fedustat.protocols.ecdf.pointwise_ecdf` with one batch per partition.

    Batch i shares its parties' indicators with ``SeedSequence(rng).spawn(B + 1)[1 + i]``
    and the servers finish with ``[0]``, as in process: with partitions of
    ``batch_size`` rows (the last may be smaller) the release equals
    ``pointwise_ecdf(all values, ..., batch_size=batch_size, rng=rng)``. The servers'
    column sums (mod 2^l) reduce on the cluster; the driver holds ``m |B|`` ring
    elements. Parameters as in :func:`pointwise_ecdf`; ``column`` picks the values;
    ``method`` as there (default: the hierarchical tree for the whole grid, where the
    servers hold ``m N`` ring elements and open the noisy nodes).

    Parameters
    ----------
    partitions:
        The parties' rows (:class:`Partition` objects), one batch each.
    thresholds, query, epsilon, n_servers, noise, tree_noise, contributors, min_honest:
        As in :func:`~fedustat.protocols.ecdf.pointwise_ecdf`.
    frac_bits, ring_bits, rng, randomness, method:
        As in :func:`~fedustat.protocols.ecdf.pointwise_ecdf`.
    column:
        The column holding the values.
    engine:
        A :class:`DaskEngine`, or None for a local cluster made for this call.

    Returns
    -------
    FederatedECDF
        The release of the secure-aggregation protocol.

    Examples
    --------
    >>> from distributed import Client
    >>> from fedustat.runtime.engine import DaskEngine, array_partitions
    >>> client = Client(processes=False, n_workers=1, threads_per_worker=1,
    ...                 dashboard_address=":0")
    >>> engine = DaskEngine(client)
    >>> from fedustat.runtime.engine import pointwise_ecdf_distributed
    >>> rows = np.array([[0.1], [0.4], [0.5], [0.9], [0.3], [0.7]])
    >>> curve = pointwise_ecdf_distributed(array_partitions(rows, [3, 3]),
    ...                                    [0.25, 0.5, 0.75, 1.0], epsilon=math.inf,
    ...                                    engine=engine)
    >>> curve.values
    array([0.16666667, 0.66666667, 0.83333333, 1.        ])
    >>> client.close()
    """
    protocol = PointwiseECDF(thresholds, query, epsilon=epsilon, n_servers=n_servers,
                             noise=noise, tree_noise=tree_noise, contributors=contributors,
                             min_honest=min_honest, frac_bits=frac_bits, ring_bits=ring_bits,
                             randomness=run_randomness(randomness, rng), method=method)
    parts = _check_partitions(partitions)
    root = as_seed_sequence(rng)

    def job(e: DaskEngine) -> tuple[int, dict[str, Any]]:
        sizes = e._gather([e._submit(_partition_rows, part) for part in parts])
        n = int(sum(sizes))
        offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist()
        seeds = root.spawn(1 + len(parts))
        shared = e._submit(_same, protocol)
        level = [e._submit(_batch_shares, shared, part, int(column), int(o), seed)
                 for part, o, seed in zip(parts, offsets, seeds[1:], strict=True)]
        while len(level) > 1:
            level = [e._submit(_add_shares, shared, *level[i:i + e.fan_in])
                     for i in range(0, len(level), e.fan_in)]
        return n, e._gather(level[0]) | {"server_seed": seeds[0]}

    n, total = _run(engine, job)
    server = protocol.init_server(n)
    server.query_bits_per_party = int(protocol.query_message().bits_per_row())
    server.sums = total["sums"]
    server.received = total["received"]
    server.upload_bits = total["upload_bits"]
    server.max_upload_bits = total["max_upload_bits"]
    return protocol.finish(server, np.random.default_rng(total["server_seed"]))


def _partition_rows(partition: Partition) -> int:
    return int(partition.n_rows_stored())


def _same(thing: Any) -> Any:
    return thing
