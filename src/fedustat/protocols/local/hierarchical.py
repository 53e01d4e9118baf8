"""Hierarchical histograms and the UAUC recursion of 000 Sec. 4 (exact and pruned).

Tree notation (000 Sec. 4, "Notation on trees", Definition 3): scores are integers in
``[0..d-1]`` with ``d = 2^alpha``. Level ``l`` (``0 <= l <= alpha``) has ``2^l`` nodes;
node ``q`` of level ``l`` is the ``l``-bit prefix of the scores below it, i.e. it covers
the scores ``s`` with ``s >> (alpha - l) == q``. Its children are ``2q`` (prefix
``p·0``, the lower half) and ``2q + 1`` (prefix ``p·1``, the upper half). The root is
node 0 of level 0 and its count is the class size; the leaves (level ``alpha``) are the
scores themselves.

Ties. 000 Sec. 4 sets ``UAUC(h+, h-, p) = 0`` at a leaf, so its UAUC counts only
strictly ordered (positive above negative) pairs. ``sklearn.metrics.roc_auc_score``
(and :func:`fedustat.stats.exact.roc_auc`) count a tied pair 1/2; the tied pairs are
exactly the pairs sharing a leaf, so adding ``h+_leaf h-_leaf / 2`` at every leaf makes
``UAUC / (n+ n-)`` equal to that AUC. Both the exact and the pruned recursion here add
this leaf term (``tie_term=True``, the default); ``tie_term=False`` gives the paper's
strict count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import as_float_array, check_positive_int

__all__ = [
    "MAX_ALPHA",
    "HierarchicalHistogram",
    "PrunedRecursion",
    "check_domain",
    "check_scores",
    "pruned_uauc",
    "uauc_exact",
]

# Scores travel as float64 rows (``fedustat.runtime.simulate``); integers are exact in a
# float64 only up to 2^53, so the domain stops there.
MAX_ALPHA = 53

NodeEstimator = Callable[[int, np.ndarray], np.ndarray]
NodeVariance = Callable[[int, np.ndarray], np.ndarray]


def check_domain(d: Any, name: str = "d") -> int:
    """Validate the public domain size ``d = 2^alpha`` (``2 <= d <= 2^53``); return alpha."""
    if isinstance(d, bool) or not isinstance(d, int | np.integer):
        raise TypeError(f"{name} must be an integer power of two (the score domain "
                        f"[0, d-1] of 000 Sec. 4 has d = 2^alpha), got {d!r}")
    d = int(d)
    if d < 2 or d & (d - 1):
        hint = f"; the next power of two is {1 << max(1, d.bit_length())}" if d > 1 else ""
        raise ValueError(f"{name} must be a power of two >= 2 (000 Sec. 4 assumes "
                         f"d = 2^alpha), got {d}{hint}")
    alpha = d.bit_length() - 1
    if alpha > MAX_ALPHA:
        raise ValueError(f"{name} must be <= 2^{MAX_ALPHA} so that every score is an exact "
                         f"float64 integer, got 2^{alpha}")
    return alpha


def check_scores(scores: Any, d: int, name: str = "score") -> np.ndarray:
    """Scores as int64 codes in ``[0, d-1]``, refusing anything else with the fix to apply."""
    arr = as_float_array(scores, name)
    codes = arr.astype(np.int64)
    if not np.array_equal(codes, arr):
        raise ValueError(
            f"{name} must hold integers in [0, {d - 1}] (the protocol works on the discrete "
            f"domain of 000 Sec. 4); quantize first, e.g. np.minimum(np.floor(s * {d}), "
            f"{d - 1}) for scores s in [0, 1] (the discretization fp of 000 Sec. 6)")
    lo, hi = int(codes.min()), int(codes.max())
    if lo < 0 or hi > d - 1:
        raise ValueError(
            f"{name} has values outside the declared domain [0, {d - 1}] (min {lo}, max "
            f"{hi}); quantize the scores into [0, d-1] first or declare a larger d")
    return codes


class HierarchicalHistogram:
    """Exact hierarchical histogram of a multiset of scores (000 Definition 3).

    Stores the sorted scores, so that the count of any node is two binary searches and no
    O(d) array is ever built (the domain may be as large as 2^53).

    Parameters
    ----------
    scores:
        Integer scores in ``[0, d-1]``.
    d:
        Domain size, a power of two.
    """

    def __init__(self, scores: Any, d: int) -> None:
        self.alpha = check_domain(d)
        self.d = int(d)
        self.sorted_scores = np.sort(check_scores(scores, self.d))
        self.n = int(self.sorted_scores.size)

    def __repr__(self) -> str:
        return f"HierarchicalHistogram(n={self.n}, d=2^{self.alpha})"

    def count(self, level: int, nodes: Any) -> np.ndarray:
        """``h_p`` for the given nodes of ``level`` (int64 counts)."""
        level = _check_level(level, self.alpha)
        q = np.asarray(nodes, dtype=np.int64)
        if q.size and (q.min() < 0 or q.max() >= (1 << level)):
            raise ValueError(f"nodes of level {level} must be in [0, {(1 << level) - 1}]")
        shift = self.alpha - level
        lo = np.searchsorted(self.sorted_scores, q << shift, side="left")
        hi = np.searchsorted(self.sorted_scores, (q + 1) << shift, side="left")
        return (hi - lo).astype(np.int64)

    def level_counts(self, level: int) -> np.ndarray:
        """All ``2^level`` counts of one level (dense; only for small levels)."""
        level = _check_level(level, self.alpha)
        if level > 24:
            raise ValueError(f"level {level} has 2^{level} nodes; query nodes with count()")
        return np.bincount(self.sorted_scores >> (self.alpha - level),
                           minlength=1 << level).astype(np.int64)

    def estimator(self) -> NodeEstimator:
        """The exact counts as a node estimator for :func:`pruned_uauc`."""
        return lambda level, nodes: self.count(level, nodes).astype(np.float64)


def _check_level(level: Any, alpha: int) -> int:
    level = check_positive_int(level, "level", minimum=0)
    if level > alpha:
        raise ValueError(f"level must be in [0, {alpha}], got {level}")
    return level


def uauc_exact(pos_scores: Any, neg_scores: Any, d: int, *, tie_term: bool = True) -> float:
    """Non-private UAUC over the exact hierarchical histograms (000 Sec. 4).

    Unrolls the recursion ``UAUC(p) = h+_{p·1} h-_{p·0} + UAUC(p·0) + UAUC(p·1)`` level by
    level: the total is the sum over every internal node ``p`` of ``h+_{p·1} h-_{p·0}``
    (pairs first separated at ``p``, positive in the upper half), plus the leaf tie term
    ``h+_b h-_b / 2`` unless ``tie_term=False``. Only occupied nodes are visited, so the
    work is O(n alpha log n) whatever ``d``; integer arithmetic keeps it exact, and
    ``uauc_exact(...) / (n+ n-)`` equals ``sklearn.metrics.roc_auc_score``.

    Parameters
    ----------
    pos_scores, neg_scores:
        Integer scores in ``[0, d-1]`` of the positive and of the negative class.
    d:
        Domain size, a power of two.
    tie_term:
        Count pairs tied at a leaf 1/2 (scikit-learn's AUC) or 0 (000 Sec. 4).
    """
    alpha = check_domain(d)
    pos = check_scores(pos_scores, d, "pos_scores")
    neg = check_scores(neg_scores, d, "neg_scores")
    strict = 0
    for level in range(1, alpha + 1):
        shift = alpha - level
        pos_nodes, pos_counts = np.unique(pos >> shift, return_counts=True)
        neg_nodes, neg_counts = np.unique(neg >> shift, return_counts=True)
        # A positive in an upper child 2p+1 is above every negative in its sibling 2p.
        upper = (pos_nodes & 1) == 1
        strict += _matched_product(pos_nodes[upper] - 1, pos_counts[upper],
                                   neg_nodes, neg_counts)
    ties = 0
    if tie_term:
        pos_nodes, pos_counts = np.unique(pos, return_counts=True)
        neg_nodes, neg_counts = np.unique(neg, return_counts=True)
        ties = _matched_product(pos_nodes, pos_counts, neg_nodes, neg_counts)
    return float(strict) + ties / 2.0


def _matched_product(keys: np.ndarray, counts: np.ndarray, other_keys: np.ndarray,
                     other_counts: np.ndarray) -> int:
    """``sum_k counts[k] * other_counts[k]`` over the keys present in both (sorted) arrays."""
    if keys.size == 0 or other_keys.size == 0:
        return 0
    idx = np.searchsorted(other_keys, keys)
    idx_clipped = np.minimum(idx, other_keys.size - 1)
    hit = other_keys[idx_clipped] == keys
    return int(np.sum(counts[hit].astype(np.int64) * other_counts[idx_clipped[hit]]))


@dataclass(frozen=True)
class PrunedRecursion:
    """Outcome of :func:`pruned_uauc`.

    Attributes
    ----------
    uauc:
        The estimate of UAUC (divide by ``n+ n-`` for the AUC).
    variance:
        Plug-in estimate of the variance of the randomization error (see
        :func:`pruned_uauc`).
    recursed, discarded, queried:
        Per level ``m = 0..alpha-1``: nodes recursed on, nodes discarded, and nodes of
        level ``m + 1`` whose estimate was requested (the children of level ``m``'s
        active nodes).
    leaves:
        Active leaves (level ``alpha``), whose tie term was added.
    a, tau, floor_pos, floor_neg:
        The parameter ``a``, the threshold ``tau = a sqrt(v+ v-)`` and the floors
        ``sqrt(a v+-)/2`` of ``h~`` (000 Sec. 4).
    discard_bias:
        Estimated bound on the discarding bias ``|E^G|`` (see :func:`pruned_uauc`).
    """

    uauc: float
    variance: float
    recursed: list[int]
    discarded: list[int]
    queried: list[int]
    leaves: int
    a: float
    tau: float
    floor_pos: float
    floor_neg: float
    discard_bias: float = 0.0


def _interleave(even: np.ndarray, odd: np.ndarray) -> np.ndarray:
    out = np.empty(even.size + odd.size, dtype=np.result_type(even, odd))
    out[0::2] = even
    out[1::2] = odd
    return out


def pruned_uauc(estimate_pos: NodeEstimator, estimate_neg: NodeEstimator, *, alpha: int,
                n_pos: float, n_neg: float, v_pos: float, v_neg: float, a: float,
                tie_term: bool = True, variance_pos: NodeVariance | None = None,
                variance_neg: NodeVariance | None = None) -> PrunedRecursion:
    """The private UAUC recursion of 000 Sec. 4 (eq. 10), one tree level at a time.

    With ``h~+- = max(h^+-, sqrt(a v+-)/2)`` and ``tau = a sqrt(v+ v-)``, a non-leaf node
    ``p`` is *discarded* if ``h~+_p h~-_p < tau`` and contributes
    ``(1/2) (h^+_{p·0} + h^+_{p·1}) (h^-_{p·0} + h^-_{p·1})``; otherwise it is *recursed*
    on and contributes ``h^+_{p·1} h^-_{p·0}`` plus the contributions of its two
    children. The root's counts are the public class sizes. Each level's frontier of
    active nodes is processed as arrays: the estimates of all children of the active
    nodes are requested in one call per class and level. With ``tie_term`` the active
    leaves add ``h^+ h^- / 2`` (see the module docstring).

    The returned ``variance`` is a plug-in estimate, from the released estimates only, of
    the variance of the randomization error ``E^R + E^F`` of 001 App. B.1: for each
    recursed node ``h+_{p·1}^2 v- + h-_{p·0}^2 v+ + v+ v-``, for each discarded node
    ``(h+_p^2 2v- + h-_p^2 2v+ + 4 v+ v-)/4`` (its children's sums have variance
    ``2 v``), for each active leaf ``(h+^2 v- + h-^2 v+ + v+ v-)/4``, with every squared
    count estimated without bias by ``max(h^2 - Var(h^), 0)``. It leaves out the
    discarding bias ``E^G`` (zero when no discarded interval holds pairs of both
    classes), so it is an estimate, not a bound; Theorem 3 gives the bound.

    ``discard_bias`` bounds ``|E^G|``: a discarded node p counts its ``h+_p h-_p``
    within-node pairs as one half each, while their true contribution lies in
    ``[0, h+_p h-_p]``, so its bias is at most ``h+_p h-_p / 2`` (001 App. B.1). The true
    counts are replaced by the floored estimates ``h~`` the discarding test used (their
    product is below tau, so each node adds less than ``tau / 2``).

    Parameters
    ----------
    estimate_pos, estimate_neg:
        ``estimator(level, nodes) -> estimates`` for levels ``1..alpha`` (unbiased node
        counts of each class; exact counts give the non-private recursion).
    alpha:
        Tree depth (``d = 2^alpha``).
    n_pos, n_neg:
        Class sizes (the root counts; public).
    v_pos, v_neg:
        Bounds on the variance of the node estimates (``0`` for exact counts, which
        turns the pruning off: every node is recursed on).
    a:
        The pruning parameter (``a > 1`` in Theorem 3; any ``a >= 0`` runs).
    tie_term:
        Add the leaf tie term.
    variance_pos, variance_neg:
        Optional ``variance(level, estimates)``: an estimate of each node estimate's own
        variance from its value (for oracles whose variance is linear in the count, the
        plug-in is unbiased). The plug-in ``variance`` then uses it in place of the
        bounds ``v+-``; the pruning still uses the bounds.
    """
    alpha = check_positive_int(alpha, "alpha")
    if not (math.isfinite(a) and a >= 0):
        raise ValueError(f"a must be a finite number >= 0, got {a!r}")
    if v_pos < 0 or v_neg < 0:
        raise ValueError(f"v_pos and v_neg must be >= 0, got {v_pos!r}, {v_neg!r}")
    floor_pos = math.sqrt(a * v_pos) / 2.0
    floor_neg = math.sqrt(a * v_neg) / 2.0
    tau = a * math.sqrt(v_pos * v_neg)

    active = np.zeros(1, dtype=np.int64)
    h_pos = np.array([float(n_pos)])
    h_neg = np.array([float(n_neg)])
    parts: list[float] = []
    var_parts: list[float] = []
    bias_parts: list[float] = []
    recursed: list[int] = []
    discarded: list[int] = []
    queried: list[int] = []

    def sq(h: np.ndarray, var: Any) -> np.ndarray:
        # Unbiased-by-construction estimate of h^2 from an estimate with variance var.
        return np.maximum(h * h - var, 0.0)

    def var_of(which: NodeVariance | None, bound: float, level: int,
               h: np.ndarray) -> np.ndarray:
        if which is None:
            return np.full(h.shape, bound)
        return np.asarray(which(level, h), dtype=np.float64)

    for m in range(alpha):
        if active.size == 0:
            recursed.append(0)
            discarded.append(0)
            queried.append(0)
            continue
        floored = np.maximum(h_pos, floor_pos) * np.maximum(h_neg, floor_neg)
        recurse = floored >= tau
        bias_parts.append(0.5 * math.fsum(floored[~recurse]))
        children = _interleave(2 * active, 2 * active + 1)
        c_pos = np.asarray(estimate_pos(m + 1, children), dtype=np.float64)
        c_neg = np.asarray(estimate_neg(m + 1, children), dtype=np.float64)
        lo_pos, hi_pos = c_pos[0::2], c_pos[1::2]
        lo_neg, hi_neg = c_neg[0::2], c_neg[1::2]
        n_rec = int(np.count_nonzero(recurse))
        recursed.append(n_rec)
        discarded.append(int(active.size - n_rec))
        queried.append(int(children.size))
        # Recursed nodes: h^+_{p·1} h^-_{p·0} (eq. 10).
        up, down = hi_pos[recurse], lo_neg[recurse]
        parts.append(math.fsum(up * down))
        var_up = var_of(variance_pos, v_pos, m + 1, up)
        var_down = var_of(variance_neg, v_neg, m + 1, down)
        var_parts.append(math.fsum(sq(up, var_up) * var_down + sq(down, var_down) * var_up
                                   + var_up * var_down))
        # Discarded nodes: (1/2)(sum of children)(sum of children) (000 Sec. 4).
        keep = ~recurse
        s_pos = lo_pos[keep] + hi_pos[keep]
        s_neg = lo_neg[keep] + hi_neg[keep]
        parts.append(0.5 * math.fsum(s_pos * s_neg))
        # Siblings of one level are uncorrelated (001 Lemma 6), so the variances add.
        var_s_pos = (var_of(variance_pos, v_pos, m + 1, lo_pos[keep])
                     + var_of(variance_pos, v_pos, m + 1, hi_pos[keep]))
        var_s_neg = (var_of(variance_neg, v_neg, m + 1, lo_neg[keep])
                     + var_of(variance_neg, v_neg, m + 1, hi_neg[keep]))
        var_parts.append(0.25 * math.fsum(sq(s_pos, var_s_pos) * var_s_neg
                                          + sq(s_neg, var_s_neg) * var_s_pos
                                          + var_s_pos * var_s_neg))
        # The children of recursed nodes are the next level's active nodes.
        active = children.reshape(-1, 2)[recurse].ravel()
        h_pos = c_pos.reshape(-1, 2)[recurse].ravel()
        h_neg = c_neg.reshape(-1, 2)[recurse].ravel()

    leaves = int(active.size)
    if tie_term and leaves:
        parts.append(0.5 * math.fsum(h_pos * h_neg))
        var_leaf_pos = var_of(variance_pos, v_pos, alpha, h_pos)
        var_leaf_neg = var_of(variance_neg, v_neg, alpha, h_neg)
        var_parts.append(0.25 * math.fsum(sq(h_pos, var_leaf_pos) * var_leaf_neg
                                          + sq(h_neg, var_leaf_neg) * var_leaf_pos
                                          + var_leaf_pos * var_leaf_neg))
    return PrunedRecursion(
        uauc=math.fsum(parts), variance=math.fsum(var_parts), recursed=recursed,
        discarded=discarded, queried=queried, leaves=leaves, a=float(a), tau=tau,
        floor_pos=floor_pos, floor_neg=floor_neg, discard_bias=math.fsum(bias_parts))
