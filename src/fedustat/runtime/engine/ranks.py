"""Distributed mid-ranks: a range-partitioned sort whose tied values never straddle buckets.

The values of all batches are split by value into buckets with splitters
``s_1 < ... < s_J`` picked from each batch's quantiles: open buckets
``(s_{j-1}, s_j)`` and point buckets ``{s_j}``. A value's bucket depends on the value
only, so a group of tied values lies in one bucket; a heavy value (more than about M/J
copies) is picked as a splitter and lands in a point bucket, which needs only counts.
With ``less`` and ``equal`` the global counts of values below and equal to x, the
doubled mid-rank of x (0-based positions start..end of its tie group, doubled
``start + end``, as :func:`fedustat.protocols.fedauc.protocol.rank_scores`) is
``2 less + equal - 1``. Within a bucket ``less = offset + less_in_bucket``, the offset
being the number of values in the buckets below (prefix sums of the bucket counts).

These functions are the pure pieces; :mod:`fedustat.runtime.engine.driver` runs them as
tasks. Each holds one batch or one bucket: O(M / B + M / J) values per task. Without
kept batch states the driver's tasks pass the sorted batches and the bucket ranks on in
files (``_spill_*`` in the driver), so :func:`cut_positions` and :func:`sorted_ranks`
take positions and memory-mapped arrays rather than the pieces themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SortedBatch:
    """One batch's values sorted, and the permutation back to its message order."""

    values: np.ndarray  # sorted
    order: np.ndarray  # values == original[order]


def sort_batch(values: np.ndarray) -> SortedBatch:
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError("scores to rank must be finite")
    order = np.argsort(arr, kind="stable")
    return SortedBatch(arr[order], order)


def batch_sample(batch: SortedBatch, size: int) -> np.ndarray:
    """``size`` evenly spaced order statistics of the batch (its empirical quantiles)."""
    n = batch.values.size
    if n == 0:
        return np.empty(0)
    return batch.values[np.linspace(0, n - 1, min(size, n)).round().astype(np.int64)]


def choose_splitters(samples: list[np.ndarray], weights: list[int], n_buckets: int
                     ) -> np.ndarray:
    """Up to ``n_buckets - 1`` distinct splitters at evenly spaced quantiles of the pooled
    samples, each batch's sample weighted by its number of values."""
    pooled = [s for s in samples if s.size]
    if n_buckets <= 1 or not pooled:
        return np.empty(0)
    vals = np.concatenate(pooled)
    w = np.concatenate([np.full(s.size, wt / s.size) for s, wt in zip(samples, weights,
                                                                     strict=True) if s.size])
    order = np.argsort(vals, kind="stable")
    cum = np.cumsum(w[order])
    targets = cum[-1] * np.arange(1, n_buckets) / n_buckets
    picks = vals[order][np.minimum(np.searchsorted(cum, targets), vals.size - 1)]
    return np.unique(picks)


@dataclass(frozen=True)
class BatchPieces:
    """A batch's values cut at the splitters: ``open[j]`` the values in open bucket j
    (j = 0..J), ``point[j]`` the count equal to splitter j (j = 0..J-1), and the cut
    positions in the sorted batch."""

    open: list[np.ndarray]
    point: np.ndarray
    left: np.ndarray
    right: np.ndarray


def cut_batch(batch: SortedBatch, splitters: np.ndarray) -> BatchPieces:
    left, right = cut_positions(batch.values, splitters)
    starts = np.concatenate(([0], right))
    stops = np.concatenate((left, [batch.values.size]))
    pieces = [batch.values[a:b] for a, b in zip(starts, stops, strict=True)]
    return BatchPieces(pieces, right - left, left, right)


def rank_bucket(pieces: list[np.ndarray]) -> tuple[list[np.ndarray], bool]:
    """Doubled mid-ranks within one open bucket of every batch's (sorted) piece, and
    whether any values tie. ``2 less + equal - 1`` with counts over the whole bucket."""
    merged = np.sort(np.concatenate(pieces)) if pieces else np.empty(0)
    ties = bool(merged.size > 1 and np.any(merged[1:] == merged[:-1]))
    out = []
    for piece in pieces:
        less = np.searchsorted(merged, piece, side="left")
        equal = np.searchsorted(merged, piece, side="right") - less
        out.append(2 * less.astype(np.int64) + equal - 1)
    return out, ties


def bucket_offsets(open_counts: np.ndarray, point_counts: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Number of values below each open bucket and each point bucket (buckets in value
    order: open_0, point_0, open_1, point_1, ..., open_J)."""
    n_points = point_counts.size
    sizes = np.empty(2 * n_points + 1, dtype=np.int64)
    sizes[0::2], sizes[1::2] = open_counts, point_counts
    below = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return below[0::2], below[1::2]


def cut_positions(sorted_values: np.ndarray, splitters: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Where the splitters cut a sorted batch: ``left[j]:right[j]`` holds the copies of
    splitter j, ``right[j-1]:left[j]`` the values of open bucket j (O(J log n): a
    memory-mapped batch is read only at the probed positions)."""
    return (np.searchsorted(sorted_values, splitters, side="left"),
            np.searchsorted(sorted_values, splitters, side="right"))


def sorted_ranks(n: int, left: np.ndarray, right: np.ndarray,
                 bucket_ranks: list[np.ndarray], open_offsets: np.ndarray,
                 point_offsets: np.ndarray, point_totals: np.ndarray) -> np.ndarray:
    """A batch's global doubled mid-ranks in its sorted order, from its cut positions
    (:func:`cut_positions`) and the ranks its open pieces got in their buckets."""
    out = np.empty(n, dtype=np.int64)
    starts = np.concatenate(([0], right))
    for j, local in enumerate(bucket_ranks):
        out[starts[j]:starts[j] + local.size] = 2 * open_offsets[j] + local
    for j in range(point_totals.size):
        # Every copy of splitter j: positions point_offsets[j] .. + total - 1.
        out[left[j]:right[j]] = 2 * point_offsets[j] + point_totals[j] - 1
    return out


def assemble_ranks(batch: SortedBatch, pieces: BatchPieces, bucket_ranks: list[np.ndarray],
                   open_offsets: np.ndarray, point_offsets: np.ndarray,
                   point_totals: np.ndarray) -> np.ndarray:
    """The batch's global doubled mid-ranks, in its original (message) order."""
    ranks = sorted_ranks(batch.values.size, pieces.left, pieces.right, bucket_ranks,
                         open_offsets, point_offsets, point_totals)
    out = np.empty_like(ranks)
    out[batch.order] = ranks
    return out


def exact_square_sum(values: np.ndarray) -> int:
    """Exact ``sum v^2`` of non-negative int64 values below 2^32 (doubled ranks up to
    M ~ 2e9), in two 16-bit limbs so that no int64 partial sum overflows for batches up
    to 2^30 values."""
    v = np.asarray(values, dtype=np.int64)
    if v.size and (v.min() < 0 or v.max() >= 2**32):
        raise ValueError("exact_square_sum takes values in 0..2^32 - 1")
    hi, lo = v >> 16, v & 0xFFFF
    return (int(np.dot(hi, hi)) << 32) + (int(np.dot(hi, lo)) << 17) + int(np.dot(lo, lo))
