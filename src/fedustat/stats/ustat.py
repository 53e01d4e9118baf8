"""Complete and incomplete U-statistics, fast exact statistics and U-statistic variances.

Sources (papers in ``shared/papers``):

* "000": Bell, Bellet, Gascón, Kulkarni, *Private Protocols for U-Statistics in the Local
  Model and Beyond* (AISTATS 2020). Sec. 2.1: the U-statistic (eq. 2), its variance
  (eq. 3) and the examples (eq. 4-7); Sec. 5, Thm 5: the P-permutation pair design.
* "001": the arXiv version of 000, App. C.1 (proof of Thm 5 through Blom's formula, eq. 25).
* "002": Sinh & Ramon, *Accurate, private, secure, federated U-statistics with higher
  degree*, App. A.5 (examples) and App. D.1 (incomplete U-statistics).

A U-statistic of degree ``k`` with a symmetric kernel ``f`` over records ``x_1..x_n`` is
``U_n = C(n, k)^-1 * sum_{i_1 < ... < i_k} f(x_{i_1}, ..., x_{i_k})`` (000 eq. 2 for k = 2).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_binary_labels,
    as_float_array,
    as_rng,
    check_consistent_length,
    check_positive_int,
)

if TYPE_CHECKING:
    from fedustat.stats.designs import Design
    from fedustat.stats.kernels import Kernel

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MAX_TUPLES",
    "duplicate_pair_ratio",
    "gini_mean_difference",
    "hoeffding_components",
    "incomplete_ustat_variance",
    "incomplete_ustatistic",
    "kendall_tau",
    "mann_whitney_u",
    "permutation_design_variance",
    "rand_index",
    "renyi2_entropy",
    "roc_auc",
    "ustat_variance",
    "ustatistic",
    "volume_under_surface",
]

#: Largest number of index tuples a complete U-statistic evaluates by brute force
#: (``ustatistic(..., max_tuples=...)`` overrides it per call).
DEFAULT_MAX_TUPLES = 10**8
#: Number of kernel evaluations done at once (bounds the memory of blocked evaluation).
DEFAULT_BLOCK_SIZE = 2**18
#: Kernel-evaluation budget of :func:`hoeffding_components`.
DEFAULT_MAX_PAIRS = 4 * 10**6


# --------------------------------------------------------------------------------------
# Index tuples
# --------------------------------------------------------------------------------------


def _pair_blocks(n: int, block_size: int) -> Iterator[np.ndarray]:
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


def _combination_blocks(n: int, k: int, block_size: int) -> Iterator[np.ndarray]:
    """All k-subsets of range(n) (sorted rows, lexicographic order) in blocks.

    The first k - 2 indices are enumerated in Python; the last two come vectorized from
    an upper triangle, so the Python loop runs C(n, k - 2) times, not C(n, k) times.
    """
    if k == 1:
        for start in range(0, n, block_size):
            yield np.arange(start, min(n, start + block_size), dtype=np.int64)[:, None]
        return
    if k == 2:
        yield from _pair_blocks(n, block_size)
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


def _check_tuple_limit(n: int, k: int, max_tuples: int) -> int:
    total = math.comb(n, k)
    if total > max_tuples:
        raise ValueError(
            f"the complete U-statistic needs C({n}, {k}) = {total:.3g} kernel evaluations, "
            f"more than max_tuples={max_tuples}; raise max_tuples, use the kernel's exact "
            "fast path, or estimate it with incomplete_ustatistic on a sampled design"
        )
    return total


# --------------------------------------------------------------------------------------
# Generic U-statistics
# --------------------------------------------------------------------------------------


def ustatistic(
    kernel: Kernel,
    data: Any,
    *,
    use_fast_path: bool = True,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_tuples: int = DEFAULT_MAX_TUPLES,
) -> float:
    """Complete U-statistic ``C(n, k)^-1 sum_{i_1<...<i_k} f(x_{i_1}, ..., x_{i_k})``.

    000 eq. 2 for degree 2; the same average over all k-subsets for degree k.

    Parameters
    ----------
    kernel : Kernel
        The symmetric kernel ``f`` of degree ``k``.
    data : array_like of shape (n, len(kernel.columns))
        One row per record (see ``kernel.pack``); a 1-D array is accepted for
        one-column kernels.
    use_fast_path : bool, default True
        Use the kernel's exact O(n log n) path when it has one. With False, every
        k-subset is evaluated (blocked, so memory stays bounded).
    block_size : int
        Kernel evaluations per block on the brute-force path.
    max_tuples : int
        Refuse the brute-force path when ``C(n, k)`` exceeds this number.

    Returns
    -------
    float
        The U-statistic (not the reported statistic: see ``kernel.statistic``).
    """
    arr = kernel.check_data(data)
    block_size = check_positive_int(block_size, "block_size")
    max_tuples = check_positive_int(max_tuples, "max_tuples")
    if use_fast_path and kernel.exact is not None:
        return float(kernel.exact(arr))
    n, k = arr.shape[0], kernel.degree
    total = _check_tuple_limit(n, k, max_tuples)
    partial = [float(np.sum(kernel._evaluate_unchecked(arr, block)))
               for block in _combination_blocks(n, k, block_size)]
    return math.fsum(partial) / total


def incomplete_ustatistic(
    kernel: Kernel,
    data: Any,
    tuples: Design | Any,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> float:
    """Incomplete U-statistic: the mean of the kernel over the given index tuples.

    ``U_E = |E|^-1 sum_{(i_1..i_k) in E} f(x_{i_1}, ..., x_{i_k})`` (002 App. D.1.2,
    step 2; 000 Thm 5 without noise). For a design whose distribution is invariant under
    relabelling of the records (all constructors in :mod:`fedustat.stats.designs`),
    ``E[U_E | data]`` is the complete U-statistic.

    Parameters
    ----------
    kernel : Kernel
    data : array_like of shape (n, len(kernel.columns))
    tuples : Design or array_like of shape (m, kernel.degree)
        Index tuples (rows of distinct indices in ``[0, n)``); repeated rows count as
        many times as they appear.
    block_size : int
        Kernel evaluations per block.
    """
    from fedustat.stats.designs import Design  # local import: designs imports this module

    arr = kernel.check_data(data)
    block_size = check_positive_int(block_size, "block_size")
    idx = tuples.tuples if isinstance(tuples, Design) else tuples
    idx = kernel.check_tuples(idx, arr.shape[0])
    if idx.shape[0] == 0:
        raise ValueError("tuples is empty; an incomplete U-statistic needs at least one tuple")
    partial = [float(np.sum(kernel._evaluate_unchecked(arr, idx[s:s + block_size])))
               for s in range(0, idx.shape[0], block_size)]
    return math.fsum(partial) / idx.shape[0]


# --------------------------------------------------------------------------------------
# Exact fast paths: counts (internal) and public statistics
# --------------------------------------------------------------------------------------


def _n_pairs(n: int) -> int:
    return n * (n - 1) // 2


def _dense_rank(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ranks 0..d-1 of a 1-D array (equal values share a rank) and d."""
    order = np.argsort(values)
    ranks_sorted = np.empty(values.size, dtype=np.int64)
    ranks_sorted[0] = 0
    s = values[order]
    np.not_equal(s[1:], s[:-1], out=ranks_sorted[1:])
    np.cumsum(ranks_sorted, out=ranks_sorted)
    ranks = np.empty_like(ranks_sorted)
    ranks[order] = ranks_sorted
    return ranks, int(ranks_sorted[-1]) + 1


def _tie_pairs(counts: np.ndarray) -> int:
    """Number of tied pairs sum_g C(c_g, 2) for group sizes c_g."""
    c = counts.astype(np.int64, copy=False)
    return int((c * (c - 1) // 2).sum())


def _auc_twice_numerator(scores: np.ndarray, labels: np.ndarray) -> tuple[int, int, int]:
    """``2 * sum_{pos i, neg j} (I[s_i > s_j] + I[s_i = s_j] / 2)``, n_pos, n_neg.

    Sorting and counting per tie group (mid-rank form of the Mann-Whitney statistic):
    a tie group with p positives and q negatives above c lower negatives adds
    p * c + p * q / 2. Integers throughout, so the AUC is one correctly rounded division.
    """
    order = np.argsort(scores)
    s = scores[order]
    y = labels[order].astype(np.int64)
    n = s.size
    ends = np.flatnonzero(s[1:] != s[:-1])
    ends = np.append(ends, n - 1)
    pos_cum = np.cumsum(y)[ends]
    pos = np.diff(pos_cum, prepend=0)
    size = np.diff(ends, prepend=-1)
    neg = size - pos
    neg_below = np.cumsum(neg) - neg
    twice = int(np.sum(pos * (2 * neg_below + neg)))
    n_pos = int(pos_cum[-1])
    return twice, n_pos, n - n_pos


def _check_scores_labels(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    s = as_float_array(scores, "scores")
    y = as_binary_labels(labels, "labels")
    check_consistent_length(scores=s, labels=y)
    return s, y


def roc_auc(scores: Any, labels: Any) -> float:
    """Area under the ROC curve, exactly, in O(n log n).

    ``AUC = (n+ n-)^-1 sum_{pos i, neg j} (I[s_i > s_j] + I[s_i = s_j] / 2)`` (000 eq. 7
    with ties counted 1/2, which is what ``sklearn.metrics.roc_auc_score`` computes
    through the trapezoidal rule).

    Parameters
    ----------
    scores : array_like of shape (n,)
        Classifier scores (higher means "more positive").
    labels : array_like of shape (n,)
        Binary labels: 0/1, -1/1 or booleans; both classes must be present.
    """
    s, y = _check_scores_labels(scores, labels)
    twice, n_pos, n_neg = _auc_twice_numerator(s, y)
    return twice / (2 * n_pos * n_neg)


def mann_whitney_u(scores: Any, labels: Any) -> float:
    """Mann-Whitney U of the positive class: ``#{s_pos > s_neg} + #{s_pos = s_neg} / 2``.

    Equals ``scipy.stats.mannwhitneyu(scores[labels == 1], scores[labels == 0]).statistic``
    and ``n+ n- AUC``.
    """
    s, y = _check_scores_labels(scores, labels)
    twice, _, _ = _auc_twice_numerator(s, y)
    return twice / 2


def _inversions(seq: np.ndarray, n_values: int) -> int:
    """Number of pairs i < j with seq[i] > seq[j] (ties are not inversions).

    ``seq`` holds integers in [0, n_values). Vectorized divide and conquer over the bits of
    the position (a merge sort without merging): the pairs whose positions first differ at
    bit l lie in one block of 2^(l+1) positions, i in its left half and j in its right half.
    One sort of the keys (block, value, half) puts each block's elements in value order with
    left-half elements first among equal values; a right-half element is then inverted with
    exactly the left-half elements of its block that come after it. Pairs inside aligned
    blocks of 16 positions are compared directly. O(n log n): about log2(n) sorts of
    machine integers and a few linear passes.
    """
    n = seq.size
    if n < 2:
        return 0
    total = 0
    low = 4  # pairs inside aligned blocks of 2**low positions are counted directly
    width = 1 << low
    n_blocks = n >> low
    head = seq[: n_blocks << low].reshape(n_blocks, width)
    for d in range(1, width):
        total += int(np.count_nonzero(head[:, : width - d] > head[:, d:]))
    tail = seq[n_blocks << low:]
    total += int(np.count_nonzero(np.triu(tail[:, None] > tail[None, :], 1)))
    levels = int(n - 1).bit_length()
    if levels <= low:
        return total
    value_bits = max(1, int(n_values - 1).bit_length())
    pos64 = np.arange(n, dtype=np.int64)
    val64 = seq.astype(np.int64) << 1
    key64 = np.empty(n, dtype=np.int64)
    tmp64 = np.empty(n, dtype=np.int64)
    small: tuple[np.ndarray, ...] | None = None
    for level in range(low, levels):
        if n <= 2**32 and (levels - level - 1) + value_bits + 1 <= 32:
            # the key fits 32 bits on the upper levels: half the memory traffic to sort
            if small is None:
                small = (pos64.astype(np.uint32), val64.astype(np.uint32),
                         np.empty(n, dtype=np.uint32), np.empty(n, dtype=np.uint32))
            pos, val, key, tmp = small
        else:
            pos, val, key, tmp = pos64, val64, key64, tmp64
        np.right_shift(pos, level + 1, out=key)
        np.left_shift(key, value_bits + 1, out=key)
        np.bitwise_or(key, val, out=key)
        np.right_shift(pos, level, out=tmp)
        np.bitwise_and(tmp, 1, out=tmp)
        np.bitwise_or(key, tmp, out=key)
        key.sort()
        np.bitwise_and(key, 1, out=key)
        # For a right-half element at sorted position j (the t-th one, 0-based), the
        # left-half elements before it number j - t; over all right-half elements that
        # is sum(j) - K(K-1)/2. Each block b has Z_b left-half and O_b right-half
        # elements and sits after the left-half elements of earlier blocks, so the
        # inverted pairs are sum_b O_b * Zincl_b - (sum(j) - K(K-1)/2), with Zincl_b the
        # left-half elements of blocks <= b.
        ones = int(np.count_nonzero(key))
        before = int(np.sum(key * pos, dtype=np.int64)) - ones * (ones - 1) // 2
        half = 1 << level
        n_groups = (n + 2 * half - 1) // (2 * half)
        group = np.arange(n_groups, dtype=np.int64)
        size = np.minimum(2 * half, n - group * 2 * half)
        zeros = np.minimum(half, size)
        total += int(np.sum((size - zeros) * np.cumsum(zeros))) - before
    return total


def _kendall_counts(x: np.ndarray, y: np.ndarray) -> tuple[int, int, int, int]:
    """(C - D, tot, x-tied pairs, y-tied pairs) with tot = C(n, 2).

    C and D are concordant and discordant pair counts; pairs tied in x or y count in
    neither. D is counted from a contingency table when x and y take few distinct values,
    otherwise as inversions of the y-ranks in (x, y)-sorted order (ties in x are sorted by
    y, so they never count as inversions).
    """
    n = x.size
    rx, dx = _dense_rank(x)
    ry, dy = _dense_rank(y)
    tot = _n_pairs(n)
    xtie = _tie_pairs(np.bincount(rx, minlength=dx))
    ytie = _tie_pairs(np.bincount(ry, minlength=dy))
    cells = rx * dy + ry
    if dx * dy <= max(4 * n, 1 << 16):
        table = np.bincount(cells, minlength=dx * dy).reshape(dx, dy)
        ntie = _tie_pairs(table)
        # below_right[a, b] = #records with x-rank > a and y-rank < b
        later = np.cumsum(table[::-1], axis=0)[::-1]
        later = np.vstack([later[1:], np.zeros((1, dy), dtype=later.dtype)])
        below_right = np.cumsum(later, axis=1) - later
        dis = int(np.sum(table * below_right))
    else:
        cells.sort()
        run_ends = np.flatnonzero(cells[1:] != cells[:-1])
        runs = np.diff(np.concatenate([[-1], run_ends, [n - 1]]))
        ntie = _tie_pairs(runs)
        dis = _inversions(cells % dy, dy)
    # tot = C + D + xtie + ytie - ntie (pairs tied in both are in xtie and ytie)
    return tot - xtie - ytie + ntie - 2 * dis, tot, xtie, ytie


def kendall_tau(x: Any, y: Any, variant: str = "b") -> float:
    """Kendall's rank correlation, exactly, in O(n log n).

    ``tau_a = (C - D) / C(n, 2)`` is the U-statistic with kernel
    ``sign(x_i - x_j) sign(y_i - y_j)`` (000 eq. 6, 002 eq. 8);
    ``tau_b = (C - D) / sqrt((C(n,2) - T_x)(C(n,2) - T_y))`` with ``T_x``, ``T_y`` the pairs
    tied in x, in y (``scipy.stats.kendalltau(x, y, variant="b")``).

    Parameters
    ----------
    x, y : array_like of shape (n,)
    variant : {"b", "a"}

    Raises
    ------
    ValueError
        If tau-b is requested and x or y is constant (the coefficient is undefined).
    """
    if variant not in ("a", "b"):
        raise ValueError(f"variant must be 'a' or 'b', got {variant!r}")
    xa = as_float_array(x, "x")
    ya = as_float_array(y, "y")
    check_consistent_length(x=xa, y=ya)
    if xa.size < 2:
        raise ValueError("x and y need at least 2 observations for Kendall's tau")
    cmd, tot, xtie, ytie = _kendall_counts(xa, ya)
    if variant == "a":
        return cmd / tot
    for name, ties in (("x", xtie), ("y", ytie)):
        if ties == tot:
            raise ValueError(f"{name} is constant; Kendall's tau-b is undefined "
                             "(use variant='a', which is 0 here)")
    # same operation order as scipy.stats.kendalltau so results agree to the last bits
    return float(cmd / np.sqrt(tot - xtie) / np.sqrt(tot - ytie))


def _gini_mean_difference(x: np.ndarray) -> float:
    """``C(n,2)^-1 sum_{i<j} |x_i - x_j|`` (000 eq. 4, 002 eq. 9) by sorting.

    In sorted order the gap ``x_(t) - x_(t-1)`` lies between ``t (n - t)`` pairs, so the sum
    is ``sum_t t (n - t) gap_t``: non-negative terms, hence no cancellation.
    """
    n = x.size
    gaps = np.diff(np.sort(x))
    t = np.arange(1, n, dtype=np.float64)
    return float(np.sum(t * (n - t) * gaps)) / _n_pairs(n)


def gini_mean_difference(x: Any) -> float:
    """Gini mean difference ``2 / (n (n-1)) sum_{i<j} |x_i - x_j|`` in O(n log n) (000 eq. 4)."""
    xa = as_float_array(x, "x")
    if xa.size < 2:
        raise ValueError("x needs at least 2 values for the Gini mean difference")
    return _gini_mean_difference(xa)


def _duplicate_pair_ratio(x: np.ndarray) -> float:
    """``C(n,2)^-1 sum_{i<j} I[x_i = x_j]`` from value counts (000 eq. 5, inside the log)."""
    _, counts = np.unique(x, return_counts=True)
    return _tie_pairs(counts) / _n_pairs(x.size)


def duplicate_pair_ratio(x: Any) -> float:
    """Fraction of pairs with equal values (the U-statistic of 000 eq. 5), in O(n log n)."""
    xa = as_float_array(x, "x")
    if xa.size < 2:
        raise ValueError("x needs at least 2 values for the duplicate-pair ratio")
    return _duplicate_pair_ratio(xa)


def renyi2_entropy(x: Any) -> float:
    """Rényi-2 (collision) entropy ``-ln(duplicate_pair_ratio(x))`` (000 eq. 5).

    Returns ``inf`` when no two values are equal.
    """
    ratio = duplicate_pair_ratio(x)
    return math.inf if ratio == 0.0 else -math.log(ratio)


def _rand_index(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of pairs on which two clusterings agree (same-same or different-different).

    From the contingency table n_uv: agreements = C(n,2) + 2 sum C(n_uv,2) - sum_u C(a_u,2)
    - sum_v C(b_v,2). (002 eq. 11 is garbled: it compares C_1(x_i) with C_2(x_j); this is
    the standard definition of Rand, 1971.)
    """
    n = a.size
    _, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    _, joint = np.unique(ia.astype(np.int64) * ub.size + ib, return_counts=True)
    same_both = _tie_pairs(joint)
    same_a = _tie_pairs(np.bincount(ia))
    same_b = _tie_pairs(np.bincount(ib))
    tot = _n_pairs(n)
    return (tot + 2 * same_both - same_a - same_b) / tot


def rand_index(labels_a: Any, labels_b: Any) -> float:
    """Rand index of two clusterings of the same records (equals ``sklearn.metrics.rand_score``).

    Parameters
    ----------
    labels_a, labels_b : array_like of shape (n,)
        Cluster labels (any numbers; only equality matters).
    """
    a = as_float_array(labels_a, "labels_a")
    b = as_float_array(labels_b, "labels_b")
    check_consistent_length(labels_a=a, labels_b=b)
    if a.size < 2:
        raise ValueError("the Rand index needs at least 2 records")
    return _rand_index(a, b)


def _vus_twelve_numerator(scores: np.ndarray, classes: np.ndarray) -> tuple[float, int, int, int]:
    """``12 * sum over (c0, c1, c2) triples of P(tie-broken s0 < s1 < s2)``, and n0, n1, n2.

    For each class-1 record with score s: L = #{s0 < s} + #{s0 = s}/2 and
    R = #{s2 > s} + #{s2 = s}/2. ``sum L R`` weighs a triple with s0 = s1 = s2 by 1/4; the
    uniform tie-breaking convention gives it 1/6, so ``e0 e2 / 12`` is subtracted per
    class-1 record (e0, e2 = class-0 / class-2 scores equal to s).
    """
    s0 = np.sort(scores[classes == 0])
    s1 = scores[classes == 1]
    s2 = np.sort(scores[classes == 2])
    lt0 = np.searchsorted(s0, s1, side="left")
    le0 = np.searchsorted(s0, s1, side="right")
    lt2 = np.searchsorted(s2, s1, side="left")
    le2 = np.searchsorted(s2, s1, side="right")
    eq0, eq2 = le0 - lt0, le2 - lt2
    twice_left = 2 * lt0 + eq0
    twice_right = 2 * (s2.size - le2) + eq2
    n0, n1, n2 = s0.size, s1.size, s2.size
    if 12 * n0 * n1 * n2 < 2**62:
        twelve = int(np.sum(3 * twice_left * twice_right - eq0 * eq2))
        return float(twelve), n0, n1, n2
    terms = 3.0 * twice_left.astype(np.float64) * twice_right - eq0.astype(np.float64) * eq2
    return float(math.fsum(terms.tolist())), n0, n1, n2


def _check_ordinal_classes(classes: Any, name: str) -> np.ndarray:
    c = as_float_array(classes, name)
    bad = ~np.isin(c, (0.0, 1.0, 2.0))
    if np.any(bad):
        shown = sorted(set(np.unique(c[bad]).tolist()))[:5]
        raise ValueError(f"{name} must contain the ordinal classes 0, 1, 2; found {shown}")
    missing = [k for k in (0, 1, 2) if not np.any(c == k)]
    if missing:
        raise ValueError(f"{name} has no record of class {missing}; "
                         "the volume under the ROC surface needs all three classes")
    return c


def volume_under_surface(scores: Any, classes: Any) -> float:
    """Volume under the ROC surface for three ordered classes, exactly, in O(n log n).

    ``VUS = P(S_0 < S_1 < S_2)`` for scores of a random record of each class, estimated by
    the average over all (class 0, class 1, class 2) triples of the probability that
    breaking ties uniformly at random orders them correctly: 1 if s0 < s1 < s2, 1/2 if
    exactly one adjacent pair is tied and the other strictly ordered (s0 = s1 < s2 or
    s0 < s1 = s2), 1/6 if s0 = s1 = s2, 0 otherwise.

    Parameters
    ----------
    scores : array_like of shape (n,)
    classes : array_like of shape (n,)
        Ordinal class of each record in {0, 1, 2}; each class must be present.
    """
    s = as_float_array(scores, "scores")
    c = _check_ordinal_classes(classes, "classes")
    check_consistent_length(scores=s, classes=c)
    twelve, n0, n1, n2 = _vus_twelve_numerator(s, c)
    return twelve / (12 * n0 * n1 * n2)


# --------------------------------------------------------------------------------------
# Row sums R_i = sum_{j != i} f(x_i, x_j) and Q_i = sum_{j != i} f(x_i, x_j)^2 in O(n log n)
# (the projection h_1(x_i) is estimated by R_i / (n - 1); used by hoeffding_components)
# --------------------------------------------------------------------------------------


def _auc_row_sums(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """AUC kernel: a record's opposite-class partners ordered correctly (1) or tied (1/2).

    One sort; per tie group, a positive sees the negatives of lower groups (1 each) and of
    its own group (1/2 each), a negative the positives of higher groups and of its own.
    """
    order = np.argsort(scores)
    s = scores[order]
    y = labels[order].astype(np.int64)
    n = s.size
    starts = np.concatenate([[0], np.flatnonzero(s[1:] != s[:-1]) + 1])
    new_group = np.zeros(n, dtype=np.int64)
    new_group[starts[1:]] = 1
    group = np.cumsum(new_group)
    size = np.diff(np.append(starts, n))
    pos = np.add.reduceat(y, starts)
    neg = size - pos
    neg_below = np.cumsum(neg) - neg
    pos_above = pos.sum() - np.cumsum(pos)
    is_pos = y == 1
    below = np.where(is_pos, neg_below[group], pos_above[group]).astype(np.float64)
    ties = np.where(is_pos, neg[group], pos[group])
    R = np.empty(n)
    Q = np.empty(n)
    R[order] = below + 0.5 * ties
    Q[order] = below + 0.25 * ties
    return R, Q


def _power_sums_about(x: np.ndarray, powers: int) -> list[np.ndarray]:
    """``sum_j (x_i - x_j)^p`` for p = 0..powers, by the binomial expansion on centred data."""
    c = x - np.mean(x)
    moments = [float(np.sum(c**q)) for q in range(powers + 1)]
    out = []
    for p in range(powers + 1):
        total = np.zeros_like(c)
        for q in range(p + 1):
            total += math.comb(p, q) * c ** (p - q) * (-1) ** q * moments[q]
        out.append(total)
    return out


def _gini_row_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``sum_j |x_i - x_j|`` from sorted prefix sums; squares by the binomial expansion."""
    n = x.size
    order = np.argsort(x)
    xs = x[order] - x[order[0]]
    prefix = np.concatenate([[0.0], np.cumsum(xs)])
    rank = np.arange(n)
    sorted_sums = xs * rank - prefix[:-1] + (prefix[-1] - prefix[1:]) - xs * (n - 1 - rank)
    R = np.empty(n)
    R[order] = sorted_sums
    return R, _power_sums_about(x, 2)[2]


def _variance_row_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kernel (x_i - x_j)^2 / 2: second and fourth power sums."""
    sums = _power_sums_about(x, 4)
    return 0.5 * sums[2], 0.25 * sums[4]


def _duplicate_row_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kernel I[x_i = x_j]: each record's number of equal partners."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    R = (counts[inverse] - 1).astype(np.float64)
    return R, R


def _rand_row_sums(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rand kernel: partners with a_j = a_i and b_j = b_i (n_ab - 1) plus partners differing
    in both (n - n_a - n_b + n_ab, by inclusion-exclusion)."""
    n = a.size
    _, ia, ca = np.unique(a, return_inverse=True, return_counts=True)
    ub, ib, cb = np.unique(b, return_inverse=True, return_counts=True)
    _, ij, cj = np.unique(ia.astype(np.int64) * ub.size + ib, return_inverse=True,
                          return_counts=True)
    R = (2 * cj[ij] - 1 + n - ca[ia] - cb[ib]).astype(np.float64)
    return R, R


# --------------------------------------------------------------------------------------
# Variances (Hoeffding decomposition, incomplete U-statistics)
# --------------------------------------------------------------------------------------


def ustat_variance(zeta1: float, zeta2: float, n: int) -> float:
    """Variance of a degree-2 U-statistic of n i.i.d. records (000 eq. 3, Hoeffding 1948).

    ``Var(U_n) = 2 / (n (n-1)) * (2 (n-2) zeta_1 + zeta_2)`` with
    ``zeta_1 = Var(E[f(x_1, X_2) | x_1])`` (000 writes ``Var(f(x_1, X_2) | x_1)``, which reads
    as a conditional variance; the projection variance is what Hoeffding's formula needs,
    as 002 App. D.1.2 states with sigma_1) and ``zeta_2 = Var(f(X_1, X_2))``.
    """
    n = check_positive_int(n, "n", minimum=2)
    _check_zetas(zeta1, zeta2)
    return 2.0 / (n * (n - 1)) * (2.0 * (n - 2) * zeta1 + zeta2)


def _check_zetas(zeta1: float, zeta2: float) -> None:
    for name, z in (("zeta1", zeta1), ("zeta2", zeta2)):
        if not (math.isfinite(z) and z >= 0):
            raise ValueError(f"{name} must be a finite variance >= 0, got {z!r}")


def incomplete_ustat_variance(ustat_var: float, zeta_k: float, m: int) -> float:
    """Variance of an incomplete U-statistic over m tuples drawn uniformly *with replacement*.

    ``Var(U_m) = (1 - 1/m) Var(U_n) + zeta_k / m`` (Blom 1976; cf. 002 App. D.1, where the
    without-replacement case is bounded), ``zeta_k = Var(f(X_1..X_k))``. Derivation: given
    the data, the m kernel values are i.i.d. draws from the C(n,k) values, so
    ``E[U_m | data] = U_n`` and ``Var(U_m | data) = (mean f^2 - U_n^2) / m``; taking the
    expectation, ``E[mean f^2] = zeta_k + theta^2`` and ``E[U_n^2] = Var(U_n) + theta^2``, and
    the law of total variance gives ``Var(U_n) + (zeta_k - Var(U_n)) / m``.

    Parameters
    ----------
    ustat_var : float
        ``Var(U_n)`` of the complete U-statistic (e.g. :func:`ustat_variance`).
    zeta_k : float
        Variance of one kernel value.
    m : int
        Number of sampled tuples.
    """
    m = check_positive_int(m, "m")
    _check_zetas(ustat_var, zeta_k)
    return (1.0 - 1.0 / m) * ustat_var + zeta_k / m


def permutation_design_variance(zeta1: float, zeta2: float, n: int, P: int) -> float:
    """Variance of the noise-free estimate of the P-permutation pair design (000 Thm 5).

    ``U_P`` averages ``f`` over the ``P * floor(n/2)`` pairs of P independent random
    permutations, consecutive elements paired (000 Sec. 5). By Blom's formula (001 eq. 25)
    ``Var(U_P) = N^-2 (E[f_1] zeta_1 + E[f_2] zeta_2)``, ``N = P h``, ``h = floor(n/2)``,
    with f_c the number of ordered pairs of design pairs sharing c indices:
    ``E[f_2] = N (1 + (P-1) h / C(n,2))`` and ``E[f_1] = N (P-1) (4h/n - 2h / C(n,2))``.
    For even n this is the first term of 000 Thm 5,
    ``2/(Pn) (2 (P-1)(1 - 1/(n-1)) zeta_1 + (1 + (P-1)/(n-1)) zeta_2)``; odd n (one record
    left out of each permutation) is our extension of the same count.
    """
    n = check_positive_int(n, "n", minimum=2)
    P = check_positive_int(P, "P")
    _check_zetas(zeta1, zeta2)
    h = n // 2
    N = P * h
    pairs = _n_pairs(n)
    f2 = N * (1.0 + (P - 1) * h / pairs)
    f1 = N * (P - 1) * (4.0 * h / n - 2.0 * h / pairs)
    return (f1 * zeta1 + f2 * zeta2) / N**2


def _distinct_index_rows(n: int, width: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` rows of ``width`` distinct indices in [0, n), each row uniform."""
    if width * width > n:  # collisions are likely: take the head of random permutations
        step = max(1, 2**22 // n)  # bounds the (rows, n) matrix of uniforms
        return np.concatenate([np.argsort(rng.random((min(step, count - s), n)), axis=1)[:, :width]
                               for s in range(0, count, step)])
    rows = rng.integers(0, n, size=(count, width))
    while True:
        srt = np.sort(rows, axis=1)
        bad = np.flatnonzero(np.any(srt[:, 1:] == srt[:, :-1], axis=1))
        if bad.size == 0:
            return rows
        rows[bad] = rng.integers(0, n, size=(bad.size, width))


def hoeffding_components(
    kernel: Kernel,
    data: Any,
    *,
    rng: RandomLike = None,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    estimator: str = "unbiased",
    use_fast_path: bool = True,
) -> tuple[float, float]:
    """Estimate ``(zeta_1, zeta_k)`` of the Hoeffding decomposition (000 eq. 3).

    ``zeta_1 = Var(h_1(X))`` with ``h_1(x) = E f(x, X_2, ..., X_k)``, and
    ``zeta_k = Var(f(X_1, ..., X_k))`` (``zeta_2`` for degree 2).

    With ``estimator="unbiased"`` the records are an i.i.d. sample and the estimates are
    unbiased:

    * degree 2, when the kernel has O(n log n) row sums (``kernel.row_sums``: AUC,
      Mann-Whitney, Gini, variance, duplicate pairs, Rényi-2, Rand index) and
      ``use_fast_path``, or when ``C(n, 2) <= max_pairs``: exact computation from all pairs.
      With ``F_ij = f(x_i, x_j)``, row sums ``R_i = sum_j F_ij`` (so ``h_1(x_i)`` is estimated by
      ``R_i / (n-1)``), ``Q_i = sum_j F_ij^2``, ``S = sum_i R_i``, ``T = sum_i Q_i``:
      ``W = sum_i (R_i^2 - Q_i)`` sums f(x_i,x_j) f(x_i,x_l) over distinct i, j, l and
      ``D = S^2 - 2T - 4W`` sums f(x_i,x_j) f(x_l,x_o) over four distinct indices, so
      ``zeta_1 = W/(n)_3 - D/(n)_4`` and ``zeta_2 = T/(n)_2 - D/(n)_4`` with ``(n)_r`` the
      falling factorial. (The plug-in variance of ``R_i/(n-1)`` would be biased upwards by
      about ``E Var(f(x, X) | x) / (n-1)``.) Needs n >= 4.
    * otherwise (larger n or degree k >= 3): Monte Carlo over ``max_pairs // 3`` random sets
      of ``3k - 1`` distinct records ``a, B, C, D`` (|B| = |C| = k-1, |D| = k):
      ``zeta_1 = mean f(a,B) (f(a,C) - f(D))`` and ``zeta_k = mean f(a,B) (f(a,B) - f(D))``,
      unbiased because ``E f(a,B) f(a,C) = zeta_1 + theta^2`` and
      ``E f(a,B) f(D) = theta^2``; their standard error is O(max_pairs^-1/2).

    With ``estimator="population"`` the records *are* the population and X_1, ..., X_k are drawn
    from them uniformly with replacement (as in a finite-population check of eq. 3); exact
    over all ``n^k`` index tuples, which must not exceed ``max_pairs``.

    Unbiased estimates can fall slightly below zero by chance; they are clipped at 0, which
    adds a small upward bias only when the true value is near 0.

    Parameters
    ----------
    kernel : Kernel
    data : array_like of shape (n, len(kernel.columns))
    rng : seed or numpy.random.Generator, optional
        Used on the Monte Carlo path only.
    max_pairs : int
        Budget of kernel evaluations.
    estimator : {"unbiased", "population"}
    use_fast_path : bool, default True
        Use ``kernel.row_sums`` when the kernel has it.
    """
    arr = kernel.check_data(data)
    max_pairs = check_positive_int(max_pairs, "max_pairs")
    n, k = arr.shape[0], kernel.degree
    if estimator == "population":
        return _population_components(kernel, arr, max_pairs)
    if estimator != "unbiased":
        raise ValueError(f"estimator must be 'unbiased' or 'population', got {estimator!r}")
    fast = use_fast_path and kernel.row_sums is not None
    if k == 2 and (fast or _n_pairs(n) <= max_pairs):
        if n < 4:
            raise ValueError(f"the unbiased estimator needs at least 4 records, got n={n}")
        if fast:
            return _components_from_row_sums(*kernel.row_sums(arr), n)
        return _components_from_row_sums(*_row_sums_by_pairs(kernel, arr), n)
    if n < 3 * k - 1:
        raise ValueError(f"the Monte Carlo estimator needs at least {3 * k - 1} records for "
                         f"degree {k}, got n={n}")
    gen = as_rng(rng)
    draws = max(1, max_pairs // 3)
    acc1: list[float] = []
    acc2: list[float] = []
    chunk = 2**16
    for start in range(0, draws, chunk):
        count = min(chunk, draws - start)
        idx = _distinct_index_rows(n, 3 * k - 1, count, gen)
        first = kernel._evaluate_unchecked(arr, idx[:, :k])
        second = kernel._evaluate_unchecked(arr, np.concatenate([idx[:, :1], idx[:, k:2 * k - 1]],
                                                                 axis=1))
        disjoint = kernel._evaluate_unchecked(arr, idx[:, 2 * k - 1:])
        acc1.append(float(np.sum(first * (second - disjoint))))
        acc2.append(float(np.sum(first * (first - disjoint))))
    zeta1 = math.fsum(acc1) / draws
    zeta_k = math.fsum(acc2) / draws
    return max(zeta1, 0.0), max(zeta_k, 0.0)


def _row_sums_by_pairs(kernel: Kernel, arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """R_i and Q_i by evaluating every pair (blocked)."""
    n = arr.shape[0]
    R = np.zeros(n)
    Q = np.zeros(n)
    for block in _pair_blocks(n, DEFAULT_BLOCK_SIZE):
        v = kernel._evaluate_unchecked(arr, block)
        R += np.bincount(block[:, 0], weights=v, minlength=n)
        R += np.bincount(block[:, 1], weights=v, minlength=n)
        Q += np.bincount(block[:, 0], weights=v * v, minlength=n)
        Q += np.bincount(block[:, 1], weights=v * v, minlength=n)
    return R, Q


def _components_from_row_sums(R: np.ndarray, Q: np.ndarray, n: int) -> tuple[float, float]:
    """Unbiased (zeta_1, zeta_2) from row sums (formulas in hoeffding_components)."""
    S = float(np.sum(R))
    T = float(np.sum(Q))
    W = float(np.sum(R * R - Q))
    D = S * S - 2.0 * T - 4.0 * W
    ff3 = n * (n - 1) * (n - 2)
    ff4 = ff3 * (n - 3)
    theta2 = D / ff4
    zeta1 = W / ff3 - theta2
    zeta2 = T / (n * (n - 1)) - theta2
    return max(zeta1, 0.0), max(zeta2, 0.0)


def _population_components(kernel: Kernel, arr: np.ndarray, max_pairs: int) -> tuple[float, float]:
    n, k = arr.shape[0], kernel.degree
    total = n**k
    if total > max_pairs:
        raise ValueError(f"estimator='population' evaluates all n^k = {total} tuples, more "
                         f"than max_pairs={max_pairs}; raise max_pairs")
    grids = np.indices((n,) * k).reshape(k, -1).T
    values = kernel._evaluate_unchecked(arr, grids)
    theta = float(np.mean(values))
    h1 = values.reshape(n, -1).mean(axis=1)
    zeta1 = float(np.mean((h1 - theta) ** 2))
    zeta_k = float(np.mean((values - theta) ** 2))
    return zeta1, zeta_k
