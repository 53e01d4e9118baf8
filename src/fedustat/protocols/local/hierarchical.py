"""Hierarchical histograms and the UAUC recursion of 000 Sec. 4 (exact, full and pruned).

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
    "FullRecursion",
    "HierarchicalHistogram",
    "LevelNoise",
    "PrunedRecursion",
    "check_domain",
    "check_scores",
    "full_uauc",
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
    count estimated without bias by ``h^2 - Var(h^)`` (the total clipped at 0). It leaves out the
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
        # Unbiased estimate of h^2 from an estimate with variance var; not clipped per
        # node (that inflates the sum over the many nearly empty nodes), the total is.
        return h * h - var

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
        uauc=math.fsum(parts), variance=max(math.fsum(var_parts), 0.0), recursed=recursed,
        discarded=discarded, queried=queried, leaves=leaves, a=float(a), tau=tau,
        floor_pos=floor_pos, floor_neg=floor_neg, discard_bias=math.fsum(bias_parts))


# --------------------------------------------------------------- unpruned recursion


@dataclass(frozen=True)
class LevelNoise:
    """Second moments of one report's contribution ``R`` to a level's node estimates.

    A frequency oracle estimates the count of node ``q`` as the sum over reports of
    ``R_q`` with ``E[R_q] = 1[x = q]`` (001 Alg. 3; :class:`~fedustat.privacy.randomizers.
    FrequencyOracle`). For a report of input ``x``: ``E[R_x^2] = m1``, ``E[R_q^2] = m0``
    (``q != x``), ``E[R_x R_q] = c1`` and ``E[R_q R_q'] = c0`` (``q, q'`` distinct and
    both ``!= x``). The one-bit Hadamard response has ``m1 = m0 = c^2`` and
    ``c1 = c0 = 0`` (its nodes are uncorrelated, 001 Lemma 6); subset selection has
    non-zero cross moments (its reports hold exactly ``k`` values).
    """

    m1: float
    m0: float
    c1: float = 0.0
    c0: float = 0.0


@dataclass(frozen=True)
class FullRecursion:
    """Outcome of :func:`full_uauc`: the estimate of UAUC and its variance estimate
    (both in pair units; divide by ``n+ n-`` and its square for the AUC), and the parts
    of the variance (``linear_pos``, ``linear_neg``: the noise of one class's estimates
    times the other's counts; ``noise_product``: the product of the two noises)."""

    uauc: float
    variance: float
    linear_pos: float
    linear_neg: float
    noise_product: float


def full_uauc(levels_pos: list[np.ndarray], levels_neg: list[np.ndarray], *,
              n_pos: int, n_neg: int, noise_pos: list[LevelNoise],
              noise_neg: list[LevelNoise], one_level_per_party: bool,
              tie_term: bool = True) -> FullRecursion:
    """The UAUC recursion of 000 eq. 10 without pruning, and its exact variance.

    Unrolled over every internal node ``p`` (as :func:`uauc_exact`):
    ``U^ = sum_p A_{p·1} B_{p·0} + (1/2) sum_b A_b B_b`` with ``A``/``B`` the two classes'
    node estimates (``levels_*[l - 1]``: all ``2^l`` nodes of level ``l``) and the leaf tie
    term (module docstring). The estimates of the two classes come from different parties
    and each is unbiased, so ``E[U^] = UAUC`` exactly: nothing is discarded (no ``E^G``
    of 001 App. B.1), and ``U^ / (n+ n-)`` is unbiased for the AUC of the scores on the
    tree's domain (ties within a leaf counted 1/2).

    Variance. ``U^ = A' M B`` with ``A`` independent of ``B``, so
    ``Var = (M b)' S_A (M b) + a' M S_B M' a + tr(M S_B M' S_A)`` (``a, b`` the true
    counts, ``S`` the covariances of the estimates). The quadratic forms are computed
    exactly from the report moments (:class:`LevelNoise`), per level
    ``sum_x E[(w . R)^2 | x] = n (m0 S2 + c0 (S1^2 - S2)) + (m1 - m0 - 2 (c1 - c0))
    sum_q h_q w_q^2 + 2 (c1 - c0) S1 sum_q h_q w_q`` (``S1 = sum_q w_q``,
    ``S2 = sum_q w_q^2``), with the covariance between levels:

    * ``one_level_per_party`` (users split: a party reports at one level drawn uniformly,
      its contribution scaled by ``alpha``): a party's part of ``w . A`` has variance
      ``alpha sum_l E[(w_l . R_l)^2] - P(x)^2`` with ``P(x) = sum_l w_l[x_l]``, its
      coefficients summed along its path: the other class's count below ``x`` (plus half
      its leaf). ``sum_x P(x)^2`` is evaluated at level ``min(alpha, 6)`` (below it the
      other class's count inside the node is taken as spread evenly); it is a small
      part of the variance (at most ``1/c^2`` of the linear term).
    * otherwise (every party reports at every level, independently):
      ``sum_l (E[(w_l . R_l)^2] - w_l[x_l]^2)``.

    Every unknown is replaced by an unbiased estimate: a count by its estimate, a
    product of the two classes' counts by the product of their (independent) estimates,
    a squared count by ``h^2 - Var(h^)``; the node variances, linear in the counts, by
    their plug-in. The noise product uses the nodes' variances (exact for the Hadamard
    response; subset selection's small cross moments are left out of that term only).
    """
    alpha = len(levels_pos)
    if alpha != len(levels_neg) or alpha == 0:
        raise ValueError("levels_pos and levels_neg must hold one array per level (alpha)")
    uauc_parts: list[float] = []
    for level in range(alpha):
        uauc_parts.append(math.fsum(levels_pos[level][1::2] * levels_neg[level][0::2]))
    if tie_term:
        uauc_parts.append(0.5 * math.fsum(levels_pos[-1] * levels_neg[-1]))
    var_pos = [_node_variance(h, n_pos, noise, alpha, one_level_per_party)
               for h, noise in zip(levels_pos, noise_pos, strict=True)]
    var_neg = [_node_variance(h, n_neg, noise, alpha, one_level_per_party)
               for h, noise in zip(levels_neg, noise_neg, strict=True)]
    # Coefficients of each class's estimates (the other class's estimates through M).
    scale = alpha if one_level_per_party else 1
    coef_pos = [_coefficients(levels_neg[level], var_neg[level], n_neg, noise_neg[level],
                              scale, upper=True, leaf=tie_term and level == alpha - 1)
                for level in range(alpha)]
    coef_neg = [_coefficients(levels_pos[level], var_pos[level], n_pos, noise_pos[level],
                              scale, upper=False, leaf=tie_term and level == alpha - 1)
                for level in range(alpha)]
    linear_pos = _linear_variance(levels_pos, n_pos, noise_pos, coef_pos, levels_neg,
                                  var_neg, one_level_per_party)
    linear_neg = _linear_variance(levels_neg, n_neg, noise_neg, coef_neg, levels_pos,
                                  var_pos, one_level_per_party)
    product_parts = [math.fsum(var_pos[level][1::2] * var_neg[level][0::2])
                     for level in range(alpha)]
    if tie_term:
        product_parts.append(0.25 * math.fsum(var_pos[-1] * var_neg[-1]))
    for level in range(alpha):
        # Oracles with correlated nodes (subset selection): the exact within-level term
        # in place of its diagonal, on levels small enough for dense matrices.
        correlated = any(x[level].c0 or x[level].c1 for x in (noise_pos, noise_neg))
        if correlated and levels_pos[level].size <= DENSE_PRODUCT_NODES:
            leaf = tie_term and level == alpha - 1
            product_parts.append(_dense_product_correction(
                levels_pos[level], var_pos[level], n_pos, noise_pos[level],
                levels_neg[level], var_neg[level], n_neg, noise_neg[level], leaf,
                alpha if one_level_per_party else 1))
    noise_product = math.fsum(product_parts)
    return FullRecursion(math.fsum(uauc_parts), max(linear_pos + linear_neg + noise_product,
                                                    0.0),
                         linear_pos, linear_neg, noise_product)


# Largest level whose within-level covariance enters the noise product as a dense matrix.
DENSE_PRODUCT_NODES = 1 << 9


def _level_covariance(h: np.ndarray, var: np.ndarray, n: int, noise: LevelNoise,
                      scale: int) -> np.ndarray:
    """Covariance matrix of one level's node estimates: ``var`` on the diagonal and, for
    ``q != q'``, ``scale (c0 (n - h_q - h_q') + c1 (h_q + h_q'))`` (a party in neither
    node contributes ``c0``, one in either ``c1``; ``scale = alpha`` when a party
    reports at one level with weight ``alpha``, which also scales the second moment)."""
    cov = scale * (noise.c0 * (n - h[:, None] - h[None, :])
                   + noise.c1 * (h[:, None] + h[None, :]))
    np.fill_diagonal(cov, var)
    return cov


def _dense_product_correction(h_pos: np.ndarray, var_pos: np.ndarray, n_pos: int,
                              noise_pos: LevelNoise, h_neg: np.ndarray, var_neg: np.ndarray,
                              n_neg: int, noise_neg: LevelNoise, leaf: bool,
                              scale: int) -> float:
    """``tr(M S_B M' S_A) - (its diagonal part)`` on one level (see :func:`full_uauc`).
    The entries of the two covariance matrices are linear in one class's counts each,
    so with the estimates plugged in the product is unbiased."""
    cov_pos = _level_covariance(h_pos, var_pos, n_pos, noise_pos, scale)
    cov_neg = _level_covariance(h_neg, var_neg, n_neg, noise_neg, scale)
    size = h_pos.size
    pairing = np.zeros((size, size))
    pairing[np.arange(1, size, 2), np.arange(0, size, 2)] = 1.0
    if leaf:
        pairing += 0.5 * np.eye(size)
    exact = float(np.sum((pairing @ cov_neg @ pairing.T) * cov_pos))
    diagonal = float(np.sum((pairing * pairing) @ var_neg * var_pos))
    return exact - diagonal


def _node_variance(h: np.ndarray, n: int, noise: LevelNoise, alpha: int,
                   one_level_per_party: bool) -> np.ndarray:
    """Exact variance of each node estimate given its count ``h`` (linear in ``h``, so
    with the estimate plugged in it is unbiased); see auc_tree's module docstring."""
    if one_level_per_party:
        return alpha * (h * noise.m1 + (n - h) * noise.m0) - h
    return h * (noise.m1 - 1.0) + (n - h) * noise.m0


@dataclass(frozen=True)
class _Coefficients:
    """One level's coefficients ``w = M h^`` of a class's estimates, computed from the
    other class's estimates ``h^``, with the moments needed to square them without bias:
    ``var[q] = Var(w_q)``, ``var_sum = Var(sum_q w_q)``, ``cov_sum[q] = Cov(sum w, w_q)``."""

    w: np.ndarray
    var: np.ndarray
    var_sum: float
    cov_sum: np.ndarray


def _coefficients(other: np.ndarray, other_var: np.ndarray, n_other: int,
                  noise: LevelNoise, scale: int, *, upper: bool,
                  leaf: bool) -> _Coefficients:
    """Coefficients of the positive class (``upper``: ``w_{p1} = B_{p0}``) or of the
    negative class (``w_{p0} = A_{p1}``) on one level, plus half the other class's count
    at a leaf (the tie term)."""
    size = other.size
    rows = np.arange(1, size, 2) if upper else np.arange(0, size, 2)
    cols = rows - 1 if upper else rows + 1
    entries = [(rows, cols, 1.0)]
    if leaf:
        every = np.arange(size)
        entries.append((every, every, 0.5))
    w = np.zeros(size)
    for r, c, k in entries:
        w[r] += k * other[c]
    correlated = bool(noise.c0 or noise.c1)
    if correlated and size <= DENSE_PRODUCT_NODES:
        mix = np.zeros((size, size))
        for r, c, k in entries:
            mix[r, c] += k
        cov_w = mix @ _level_covariance(other, other_var, n_other, noise, scale) @ mix.T
        cov_sum = cov_w.sum(axis=0)
        return _Coefficients(w, np.diag(cov_w).copy(), float(cov_sum.sum()), cov_sum)
    # Uncorrelated nodes (the Hadamard response; subset selection's small cross moments
    # are left out on levels above DENSE_PRODUCT_NODES).
    var = np.zeros(size)
    weight = np.zeros(size)  # each estimate's weight in sum_q w_q
    for r, c, k in entries:
        var[r] += k * k * other_var[c]
        weight[c] += k
    cov_sum = np.zeros(size)
    for r, c, k in entries:
        cov_sum[r] += k * weight[c] * other_var[c]
    return _Coefficients(w, var, float(math.fsum(weight * weight * other_var)), cov_sum)


def _linear_variance(own: list[np.ndarray], n: int, noise: list[LevelNoise],
                     coef: list[_Coefficients], other: list[np.ndarray],
                     other_var: list[np.ndarray], one_level_per_party: bool) -> float:
    """``w' S w`` for one class (see :func:`full_uauc`), every unknown estimated without
    bias."""
    alpha = len(own)
    parts: list[float] = []
    for level in range(alpha):
        h, cf, ln = own[level], coef[level], noise[level]
        w = cf.w
        w_sq = w * w - cf.var  # unbiased for the squared coefficients
        s1 = math.fsum(w)
        s2 = math.fsum(w_sq)
        s1_sq = s1 * s1 - cf.var_sum
        h_w_sq = math.fsum(h * w_sq)
        s1_h_w = s1 * math.fsum(h * w) - math.fsum(h * cf.cov_sum)
        k1 = ln.m1 - ln.m0 - 2.0 * (ln.c1 - ln.c0)
        k2 = 2.0 * (ln.c1 - ln.c0)
        second = n * (ln.m0 * s2 + ln.c0 * (s1_sq - s2)) + k1 * h_w_sq + k2 * s1_h_w
        parts.append(alpha * second if one_level_per_party else second - h_w_sq)
    if one_level_per_party:
        parts.append(-_path_square(own, coef, other, other_var))
    return math.fsum(parts)


# Level at which sum_x P(x)^2 is evaluated (see full_uauc).
PATH_LEVEL = 6


def _path_square(own: list[np.ndarray], coef: list[_Coefficients],
                 other: list[np.ndarray], other_var: list[np.ndarray]) -> float:
    """Estimate of ``sum_x P(x)^2`` over one class's parties, ``P(x)`` the sum of its
    coefficients along its path (see :func:`full_uauc`)."""
    alpha = len(own)
    depth = min(alpha, PATH_LEVEL)
    nodes = np.arange(1 << depth)
    path = np.zeros(nodes.size)
    path_var = np.zeros(nodes.size)
    for level in range(1, depth + 1):
        anc = nodes >> (depth - level)
        path += coef[level - 1].w[anc]
        path_var += coef[level - 1].var[anc]
    h = own[depth - 1]
    if depth == alpha:
        # Leaves: P is constant on the node.
        return math.fsum(h * (path * path - path_var))
    # Inside a node, the part of P from deeper levels runs over [0, b] (b: the other
    # class's count in the node), taken as spread evenly: mean b/2, mean square b^2/3.
    b = other[depth - 1]
    b_sq = b * b - other_var[depth - 1]
    return math.fsum(h * (path * path - path_var + path * b + b_sq / 3.0))
