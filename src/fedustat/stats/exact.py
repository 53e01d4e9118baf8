"""Exact statistics in O(n log n): AUC, Mann-Whitney, Kendall's tau, Gini mean difference,
duplicate-pair ratio, Rényi-2 entropy, Rand index, volume under the ROC surface.

These are the fast paths of the built-in kernels (``kernels``) and the reference every
private protocol is tested against (ARCHITECTURE.md, principle 3). Each returns the same
number as evaluating the kernel on every pair (000 eq. 2, eq. 4-7; 002 App. A.5) and matches
scikit-learn / SciPy where they overlap. The row sums ``R_i = sum_j f(x_i, x_j)`` and
``Q_i = sum_j f(x_i, x_j)^2`` feed the Hoeffding components (``ustat.hoeffding_components``).
Functions named ``*_unchecked`` take arrays already validated by the caller.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedustat._validation import (
    as_binary_labels,
    as_float_array,
    check_consistent_length,
)

__all__ = [
    "duplicate_pair_ratio",
    "gini_mean_difference",
    "kendall_tau",
    "mann_whitney_u",
    "rand_index",
    "renyi2_entropy",
    "roc_auc",
    "volume_under_surface",
]


def n_pairs(n: int) -> int:
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


def tie_pairs(counts: np.ndarray) -> int:
    """Number of tied pairs sum_g C(c_g, 2) for group sizes c_g."""
    c = counts.astype(np.int64, copy=False)
    return int((c * (c - 1) // 2).sum())


def auc_twice_numerator(scores: np.ndarray, labels: np.ndarray) -> tuple[int, int, int]:
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
    twice, n_pos, n_neg = auc_twice_numerator(s, y)
    return twice / (2 * n_pos * n_neg)


def mann_whitney_u(scores: Any, labels: Any) -> float:
    """Mann-Whitney U of the positive class: ``#{s_pos > s_neg} + #{s_pos = s_neg} / 2``.

    Equals ``scipy.stats.mannwhitneyu(scores[labels == 1], scores[labels == 0]).statistic``
    and ``n+ n- AUC``.
    """
    s, y = _check_scores_labels(scores, labels)
    twice, _, _ = auc_twice_numerator(s, y)
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


def kendall_counts(x: np.ndarray, y: np.ndarray) -> tuple[int, int, int, int]:
    """(C - D, tot, x-tied pairs, y-tied pairs) with tot = C(n, 2).

    C and D are concordant and discordant pair counts; pairs tied in x or y count in
    neither. D is counted from a contingency table when x and y take few distinct values,
    otherwise as inversions of the y-ranks in (x, y)-sorted order (ties in x are sorted by
    y, so they never count as inversions).
    """
    n = x.size
    rx, dx = _dense_rank(x)
    ry, dy = _dense_rank(y)
    tot = n_pairs(n)
    xtie = tie_pairs(np.bincount(rx, minlength=dx))
    ytie = tie_pairs(np.bincount(ry, minlength=dy))
    cells = rx * dy + ry
    if dx * dy <= max(4 * n, 1 << 16):
        table = np.bincount(cells, minlength=dx * dy).reshape(dx, dy)
        ntie = tie_pairs(table)
        # below_right[a, b] = #records with x-rank > a and y-rank < b
        later = np.cumsum(table[::-1], axis=0)[::-1]
        later = np.vstack([later[1:], np.zeros((1, dy), dtype=later.dtype)])
        below_right = np.cumsum(later, axis=1) - later
        dis = int(np.sum(table * below_right))
    else:
        cells.sort()
        run_ends = np.flatnonzero(cells[1:] != cells[:-1])
        runs = np.diff(np.concatenate([[-1], run_ends, [n - 1]]))
        ntie = tie_pairs(runs)
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
    cmd, tot, xtie, ytie = kendall_counts(xa, ya)
    if variant == "a":
        return cmd / tot
    for name, ties in (("x", xtie), ("y", ytie)):
        if ties == tot:
            raise ValueError(f"{name} is constant; Kendall's tau-b is undefined "
                             "(use variant='a', which is 0 here)")
    # same operation order as scipy.stats.kendalltau so results agree to the last bits
    return float(cmd / np.sqrt(tot - xtie) / np.sqrt(tot - ytie))


def gini_mean_difference_unchecked(x: np.ndarray) -> float:
    """``C(n,2)^-1 sum_{i<j} |x_i - x_j|`` (000 eq. 4, 002 eq. 9) by sorting.

    In sorted order the gap ``x_(t) - x_(t-1)`` lies between ``t (n - t)`` pairs, so the sum
    is ``sum_t t (n - t) gap_t``: non-negative terms, hence no cancellation.
    """
    n = x.size
    gaps = np.diff(np.sort(x))
    t = np.arange(1, n, dtype=np.float64)
    return float(np.sum(t * (n - t) * gaps)) / n_pairs(n)


def gini_mean_difference(x: Any) -> float:
    """Gini mean difference ``2 / (n (n-1)) sum_{i<j} |x_i - x_j|`` in O(n log n) (000 eq. 4)."""
    xa = as_float_array(x, "x")
    if xa.size < 2:
        raise ValueError("x needs at least 2 values for the Gini mean difference")
    return gini_mean_difference_unchecked(xa)


def duplicate_pair_ratio_unchecked(x: np.ndarray) -> float:
    """``C(n,2)^-1 sum_{i<j} I[x_i = x_j]`` from value counts (000 eq. 5, inside the log)."""
    _, counts = np.unique(x, return_counts=True)
    return tie_pairs(counts) / n_pairs(x.size)


def duplicate_pair_ratio(x: Any) -> float:
    """Fraction of pairs with equal values (the U-statistic of 000 eq. 5), in O(n log n)."""
    xa = as_float_array(x, "x")
    if xa.size < 2:
        raise ValueError("x needs at least 2 values for the duplicate-pair ratio")
    return duplicate_pair_ratio_unchecked(xa)


def renyi2_entropy(x: Any) -> float:
    """Rényi-2 (collision) entropy ``-ln(duplicate_pair_ratio(x))`` (000 eq. 5).

    Returns ``inf`` when no two values are equal.
    """
    ratio = duplicate_pair_ratio(x)
    return math.inf if ratio == 0.0 else -math.log(ratio)


def rand_index_unchecked(a: np.ndarray, b: np.ndarray) -> float:
    """Fraction of pairs on which two clusterings agree (same-same or different-different).

    From the contingency table n_uv: agreements = C(n,2) + 2 sum C(n_uv,2) - sum_u C(a_u,2)
    - sum_v C(b_v,2). (002 eq. 11 is garbled: it compares C_1(x_i) with C_2(x_j); this is
    the standard definition of Rand, 1971.)
    """
    n = a.size
    _, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    _, joint = np.unique(ia.astype(np.int64) * ub.size + ib, return_counts=True)
    same_both = tie_pairs(joint)
    same_a = tie_pairs(np.bincount(ia))
    same_b = tie_pairs(np.bincount(ib))
    tot = n_pairs(n)
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
    return rand_index_unchecked(a, b)


def vus_twelve_numerator(scores: np.ndarray, classes: np.ndarray) -> tuple[float, int, int, int]:
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


def check_ordinal_values(classes: Any, name: str) -> np.ndarray:
    """Every value is one of the ordinal classes 0, 1, 2 (a record-level check)."""
    c = as_float_array(classes, name)
    bad = ~np.isin(c, (0.0, 1.0, 2.0))
    if np.any(bad):
        shown = sorted(set(np.unique(c[bad]).tolist()))[:5]
        raise ValueError(f"{name} must contain the ordinal classes 0, 1, 2; found {shown}")
    return c


def check_ordinal_classes(classes: Any, name: str) -> np.ndarray:
    """Ordinal classes 0, 1, 2, each present at least once."""
    c = check_ordinal_values(classes, name)
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
    c = check_ordinal_classes(classes, "classes")
    check_consistent_length(scores=s, classes=c)
    twelve, n0, n1, n2 = vus_twelve_numerator(s, c)
    return twelve / (12 * n0 * n1 * n2)


# --------------------------------------------------------------------------------------
# Row sums R_i = sum_{j != i} f(x_i, x_j) and Q_i = sum_{j != i} f(x_i, x_j)^2 in O(n log n)
# (the projection h_1(x_i) is estimated by R_i / (n - 1); used by hoeffding_components)
# --------------------------------------------------------------------------------------


def auc_row_sums(scores: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def gini_row_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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


def variance_row_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kernel (x_i - x_j)^2 / 2: second and fourth power sums."""
    sums = _power_sums_about(x, 4)
    return 0.5 * sums[2], 0.25 * sums[4]


def duplicate_row_sums(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kernel I[x_i = x_j]: each record's number of equal partners."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    R = (counts[inverse] - 1).astype(np.float64)
    return R, R


def rand_row_sums(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rand kernel: partners with a_j = a_i and b_j = b_i (n_ab - 1) plus partners differing
    in both (n - n_a - n_b + n_ab, by inclusion-exclusion)."""
    n = a.size
    _, ia, ca = np.unique(a, return_inverse=True, return_counts=True)
    ub, ib, cb = np.unique(b, return_inverse=True, return_counts=True)
    _, ij, cj = np.unique(ia.astype(np.int64) * ub.size + ib, return_inverse=True,
                          return_counts=True)
    R = (2 * cj[ij] - 1 + n - ca[ia] - cb[ib]).astype(np.float64)
    return R, R
