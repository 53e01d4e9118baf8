"""Central DP ECDF releases from partitioned data: the counts as a distributed sum.

The curator of the central tree ECDF (003 Sec. 3.1, :func:`fedustat.protocols.ecdf.dp_ecdf`)
and of the DP ROC curve (003 Sec. 5.1) does two things: it counts the records at or
below each threshold (a sum over records) and adds tree noise to the counts. Here each
partition counts its own records on a worker, a tree of tasks adds the integer count
vectors, and the driver draws the noise with the same release code and the same random
stream as the in-process call (``dp_ecdf_from_counts``, ``dp_roc_curve_from_counts``), so
for the same seed the release equals ``dp_ecdf(all values, ...)`` exactly. The driver
holds O(N) numbers for N thresholds, whatever the number of records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedustat._validation import RandomLike, as_binary_labels, check_epsilon
from fedustat.privacy.noise import NoiseSource
from fedustat.protocols.ecdf.release import PrivateECDF, dp_ecdf_from_counts
from fedustat.protocols.ecdf.roc import DPROCCurve, dp_roc_curve_from_counts, roc_class_counts
from fedustat.runtime.engine.driver import DaskEngine
from fedustat.runtime.engine.partitions import Partition
from fedustat.stats.ecdf import check_thresholds, ecdf_counts

__all__ = ["distributed_ecdf_counts", "dp_ecdf_distributed", "dp_roc_curve_distributed"]


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
    (column ``column``), summed by a tree of tasks."""
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
    ``engine``: a :class:`DaskEngine` (default: a local cluster for this call)."""
    tau = check_thresholds(thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    parts = _check_partitions(partitions)
    counts, n = _run(engine, lambda e: distributed_ecdf_counts(e, parts, tau, column=column))
    return dp_ecdf_from_counts(counts, n, tau, epsilon=eps, rng=rng, noise=noise)


def dp_roc_curve_distributed(partitions: Sequence[Partition], *, epsilon: float,
                             thresholds: Any, smooth: bool = True, p: int = 2,
                             rng: RandomLike = None, noise: NoiseSource | None = None,
                             engine: DaskEngine | None = None) -> DPROCCurve:
    """:func:`~fedustat.protocols.ecdf.dp_roc_curve` of partitions holding rows
    ``(score, label)``: the two classes' counts summed on the cluster, the release on the
    driver with ``rng`` (the same release as the in-process call on all rows)."""
    tau = check_thresholds(thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    parts = _check_partitions(partitions)

    def job(e: DaskEngine) -> tuple[Any, ...]:
        return _reduce(e, [e._submit(_roc_counts, part, tau) for part in parts])

    pos, neg, n = _run(engine, job)
    return dp_roc_curve_from_counts(np.asarray(pos, np.int64), np.asarray(neg, np.int64),
                                    int(n), epsilon=eps, thresholds=tau, smooth=smooth, p=p,
                                    rng=rng, noise=noise)
