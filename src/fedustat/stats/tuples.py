"""Index tuples of a U-statistic: all k-subsets of the records, enumerated in bounded blocks.

The complete U-statistic (000 eq. 2) averages a kernel over every k-subset; enumerating
them in blocks keeps memory bounded whatever n is. Designs (``designs``) and the generic
U-statistics (``ustat``) both draw on this.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

import numpy as np

__all__ = ["DEFAULT_BLOCK_SIZE", "DEFAULT_MAX_TUPLES", "check_tuple_limit", "combination_blocks",
           "pair_blocks"]

#: Largest number of index tuples a complete U-statistic evaluates by brute force
#: (``ustatistic(..., max_tuples=...)`` overrides it per call).
DEFAULT_MAX_TUPLES = 10**8
#: Number of kernel evaluations done at once (bounds the memory of blocked evaluation).
DEFAULT_BLOCK_SIZE = 2**18


def pair_blocks(n: int, block_size: int) -> Iterator[np.ndarray]:
    """All pairs i < j of range(n) as (m, 2) arrays of at most ~block_size rows.

    Blocks are runs of consecutive rows of the upper triangle, so memory stays bounded
    whatever n is.
    """
    counts = np.arange(n - 1, -1, -1, dtype=np.int64)  # row i has n - 1 - i pairs
    cum = np.cumsum(counts)
    start = 0
    done = 0
    while start < n - 1:
        stop = int(np.searchsorted(cum, done + block_size, side="right"))
        stop = min(max(stop, start + 1), n)
        rows = np.arange(start, stop, dtype=np.int64)
        c = counts[start:stop]
        total = int(c.sum())
        first = np.repeat(rows, c)
        offsets = np.repeat(np.cumsum(c) - c, c)
        second = np.arange(total, dtype=np.int64) - offsets + first + 1
        yield np.stack([first, second], axis=1)
        done = int(cum[stop - 1])
        start = stop


def combination_blocks(n: int, k: int, block_size: int) -> Iterator[np.ndarray]:
    """All k-subsets of range(n) (sorted rows, lexicographic order) in blocks.

    The first k - 2 indices are enumerated in Python; the last two come vectorized from
    an upper triangle, so the Python loop runs C(n, k - 2) times, not C(n, k) times.
    """
    if k == 1:
        for start in range(0, n, block_size):
            yield np.arange(start, min(n, start + block_size), dtype=np.int64)[:, None]
        return
    if k == 2:
        yield from pair_blocks(n, block_size)
        return
    triu_cache: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    pending: list[np.ndarray] = []
    pending_rows = 0
    for prefix in itertools.combinations(range(n), k - 2):
        rest = n - prefix[-1] - 1
        if rest < 2:
            continue
        if rest not in triu_cache:
            triu_cache[rest] = np.triu_indices(rest, 1)
        a, b = triu_cache[rest]
        block = np.empty((a.size, k), dtype=np.int64)
        block[:, : k - 2] = prefix
        block[:, k - 2] = a + prefix[-1] + 1
        block[:, k - 1] = b + prefix[-1] + 1
        pending.append(block)
        pending_rows += a.size
        if pending_rows >= block_size:
            yield np.concatenate(pending)
            pending, pending_rows = [], 0
    if pending:
        yield np.concatenate(pending)


def check_tuple_limit(n: int, k: int, max_tuples: int) -> int:
    total = math.comb(n, k)
    if total > max_tuples:
        raise ValueError(
            f"the complete U-statistic needs C({n}, {k}) = {total:.3g} kernel evaluations, "
            f"more than max_tuples={max_tuples}; raise max_tuples, use the kernel's exact "
            "fast path, or estimate it with incomplete_ustatistic on a sampled design"
        )
    return total
