"""DP ROC curves from two private ECDFs (003 Sec. 5.1); the L1 distance of two curves (Sec. 6.5).

Two ``eps/2``-DP ECDFs (scores of the positives and of the negatives) compose to ``eps``-DP
(the text's "2e" is an OCR slip).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_binary_labels,
    as_float_array,
    check_consistent_length,
    check_epsilon,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, trusted_curator
from fedustat.privacy.noise import NoiseSource, resolve_noise
from fedustat.protocols.base import Estimate
from fedustat.protocols.ecdf.release import PrivateECDF
from fedustat.protocols.ecdf.smoothing import smooth as smooth_curve
from fedustat.protocols.ecdf.tree_noise import noisy_counts
from fedustat.stats.ecdf import (
    DyadicTree,
    check_thresholds,
    ecdf_counts,
)

__all__ = [
    "ROC_ADJACENCY",
    "DPROCCurve",
    "dp_roc_curve",
    "dp_roc_curve_from_counts",
    "roc_class_counts",
    "roc_curve_on_grid",
    "roc_l1_distance",
]


ROC_ADJACENCY = "replace one record (score and label; n public)"


# ----------------------------------------------------------------------------- ROC


def _roc_from_ecdfs(pos: np.ndarray, neg: np.ndarray, n: int, tau: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(fpr, tpr, thresholds) from the two class ECDFs ``F_TP``, ``F_FP`` (003 Sec. 5.1).

    ``TPR(t) = 1 - F_TP(t) / F_TP(tau_N)``: predicted positive when ``score > t``
    (003 orders the other way, "lower score is more likely positive"; this is
    scikit-learn's orientation). The normalizer is the curve's last value, as in the paper,
    so no class size needs to be public; it is floored at one record, ``1/n``, which keeps
    the ratio finite when noise pushes it to or below zero. Points are listed from the
    highest threshold down, then the point (1, 1) for the threshold ``-inf``.
    """
    norm_pos = max(float(pos[-1]), 1.0 / n)
    norm_neg = max(float(neg[-1]), 1.0 / n)
    tpr = np.concatenate([1.0 - pos[::-1] / norm_pos, [1.0]])
    fpr = np.concatenate([1.0 - neg[::-1] / norm_neg, [1.0]])
    thresholds = np.concatenate([tau[::-1], [-np.inf]])
    return fpr, tpr, thresholds


def _check_roc_inputs(y_true: Any, y_score: Any, thresholds: Any
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    labels = as_binary_labels(y_true, "y_true")
    scores = as_float_array(y_score, "y_score")
    check_consistent_length(y_true=labels, y_score=scores)
    tau = check_thresholds(thresholds)
    if scores.max() > tau[-1]:
        raise ValueError(f"y_score has values above the last threshold {tau[-1]:g}; the "
                         "grid must end at a public upper bound of the scores")
    return labels, scores, tau


def roc_curve_on_grid(y_true: Any, y_score: Any, thresholds: Any
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact (non-private) ROC curve on a threshold grid, in the format of
    :func:`dp_roc_curve`: ``(fpr, tpr, thresholds)``, predicted positive when
    ``score > threshold``. With every distinct score as a threshold it has the points of
    ``sklearn.metrics.roc_curve(..., drop_intermediate=False)``."""
    labels, scores, tau = _check_roc_inputs(y_true, y_score, thresholds)
    n = scores.size
    pos = ecdf_counts(scores[labels == 1], tau) / n
    neg = ecdf_counts(scores[labels == 0], tau) / n
    return _roc_from_ecdfs(pos, neg, n, tau)


def _monotone_curve(fpr: np.ndarray, tpr: np.ndarray, name: str) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    f = as_float_array(fpr, f"fpr_{name}")
    t = as_float_array(tpr, f"tpr_{name}")
    check_consistent_length(**{f"fpr_{name}": f, f"tpr_{name}": t})
    if f.size > 1 and f[0] > f[-1]:
        f, t = f[::-1], t[::-1]
    if np.any(np.diff(f) < 0) or np.any(np.diff(t) < 0):
        raise ValueError(f"curve {name} is not monotone (an unsmoothed private ROC curve "
                         "can cross itself); smooth it first (smooth=True)")
    return f, t


def _limits(f: np.ndarray, t: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Left and right limits at x of the piecewise-linear curve through (f, t).

    Runs of equal fpr are vertical segments: the curve arrives at a run's lowest tpr and
    leaves from its highest."""
    run_start = np.concatenate([[True], f[1:] != f[:-1]])
    run_end = np.concatenate([f[1:] != f[:-1], [True]])
    fu, t_first, t_last = f[run_start], t[run_start], t[run_end]
    k = np.clip(np.searchsorted(fu, x, side="right") - 1, 0, fu.size - 1)
    k_next = np.minimum(k + 1, fu.size - 1)
    span = fu[k_next] - fu[k]
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(span > 0, (x - fu[k]) / span, 0.0)
    inside = t_last[k] + np.clip(frac, 0.0, 1.0) * (t_first[k_next] - t_last[k])
    at_point = fu[k] == x
    return np.where(at_point, t_first[k], inside), np.where(at_point, t_last[k], inside)


def roc_l1_distance(fpr_a: Any, tpr_a: Any, fpr_b: Any, tpr_b: Any) -> float:
    """``integral_0^1 |TPR_a(f) - TPR_b(f)| df``: 003 Sec. 6.5's ROC error.

    The area of the symmetric difference of the regions under two monotone ROC curves,
    each linearly interpolated between its points. Computed exactly: on every interval
    between consecutive breakpoints of either curve the difference is linear, and
    ``integral |linear|`` has a closed form (including a sign change).
    """
    fa, ta = _monotone_curve(np.asarray(fpr_a, dtype=float), np.asarray(tpr_a, dtype=float),
                             "a")
    fb, tb = _monotone_curve(np.asarray(fpr_b, dtype=float), np.asarray(tpr_b, dtype=float),
                             "b")
    x = np.unique(np.concatenate([fa, fb, [0.0, 1.0]]))
    x = x[(x >= 0.0) & (x <= 1.0)]
    _, right_a = _limits(fa, ta, x[:-1])
    _, right_b = _limits(fb, tb, x[:-1])
    left_a, _ = _limits(fa, ta, x[1:])
    left_b, _ = _limits(fb, tb, x[1:])
    u = right_a - right_b  # difference at the left end of each interval
    v = left_a - left_b  # and at its right end
    width = np.diff(x)
    same = u * v >= 0
    with np.errstate(invalid="ignore", divide="ignore"):
        crossing = (u * u + v * v) / (2.0 * (np.abs(u) + np.abs(v)))
    area = np.where(same, 0.5 * (np.abs(u) + np.abs(v)), np.nan_to_num(crossing))
    return float(np.sum(width * area))


@dataclass(frozen=True)
class DPROCCurve:
    """A private ROC curve (003 Sec. 5.1) as arrays, like ``sklearn.metrics.roc_curve``.

    Attributes
    ----------
    fpr, tpr, thresholds:
        The released curve (smoothed when ``p`` is not None), thresholds decreasing;
        predicted positive when ``score > threshold``.
    raw_fpr, raw_tpr:
        The curve from the unsmoothed private ECDFs (may cross itself).
    positives, negatives:
        The two eps/2-DP ECDFs ``F_TP``, ``F_FP`` (counts over all n records).
    p:
        Smoothing norm (1, 2) or None.
    auc:
        The area under the released curve, an :class:`Estimate`.
    privacy:
        eps-DP in total, adjacency: replace one record (score and label), n public.
    """

    #: Fields that depend on the data: the two noisy ECDFs and what is computed from them.
    released_fields: ClassVar[tuple[str, ...]] = ("fpr", "tpr", "thresholds", "raw_fpr", "raw_tpr",
                                                  "positives.values", "negatives.values",
                                                  "auc.value", "auc.std_error", "auc.error",
                                                  "auc.error.*", "auc.diagnostics.*")

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
    raw_fpr: np.ndarray
    raw_tpr: np.ndarray
    positives: PrivateECDF
    negatives: PrivateECDF
    p: int | None
    auc: Estimate
    privacy: PrivacyGuarantee

    def tpr_band(self, confidence_level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise ``(lower, upper)`` for the exact TPR at each point of ``raw_tpr``."""
        return _rate_band(self.positives, confidence_level)

    def fpr_band(self, confidence_level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """Pointwise ``(lower, upper)`` for the exact FPR at each point of ``raw_fpr``."""
        return _rate_band(self.negatives, confidence_level)

    def l1_distance(self, y_true: Any, y_score: Any) -> float:
        """003 Sec. 6.5: L1 distance to the exact ROC curve on the same thresholds.

        An evaluation for whoever holds the data (the exact curve is not private)."""
        fpr, tpr, _ = roc_curve_on_grid(y_true, y_score, self.positives.thresholds)
        return roc_l1_distance(self.fpr, self.tpr, fpr, tpr)


def _rate_band(curve: PrivateECDF, confidence_level: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise interval for ``1 - F(t) / F(tau_N)`` (a TPR or FPR, :func:`_roc_from_ecdfs`).

    With ``|F_hat(t) - F(t)| <= a`` and ``|F_hat(tau_N) - F(tau_N)| <= a``, each failing
    with probability at most ``(1 - level) / 2`` under the exact per-point law
    (:attr:`PrivateECDF.error`; union bound over the two points), the ratio lies in
    ``[(F_hat(t) - a) / (F_hat(tau_N) + a), (F_hat(t) + a) / (F_hat(tau_N) - a)]``, and in
    [0, 1] since ``0 <= F(t) <= F(tau_N)``. Listed like ``raw_tpr``: from the highest
    threshold down, then the exact end point (1, 1).
    """
    alpha = 1.0 - confidence_level
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
    a = curve.error.half_width(1.0 - alpha / 2.0) if curve.scale > 0 else 0.0
    f = curve.values[::-1]
    top = float(curve.values[-1])
    ratio_low = np.clip((f - a) / (top + a), 0.0, 1.0) if top + a > 0 else np.zeros_like(f)
    ratio_high = (np.clip((f + a) / (top - a), 0.0, 1.0) if top - a > 0
                  else np.ones_like(f))
    return (np.concatenate([1.0 - ratio_high, [1.0]]),
            np.concatenate([1.0 - ratio_low, [1.0]]))


def dp_roc_curve(y_true: Any, y_score: Any, *, epsilon: float, thresholds: Any,
                 smooth: bool = True, p: int = 2, rng: RandomLike = None,
                 noise: NoiseSource | None = None) -> DPROCCurve:
    """An eps-DP ROC curve from two private ECDFs with eps/2 each (003 Sec. 5.1).

    ``F_TP(t) = |{x : label 1, score <= t}| / n`` and ``F_FP`` likewise for label 0 are
    released with :func:`dp_ecdf` at ``eps/2`` each; together eps-DP by composition under
    "replace one record (score and label)". They are smoothed (003 Eq. 3, ``p = 2`` by
    default), then ``TPR = 1 - F_TP / F_TP(tau_N)`` and ``FPR`` likewise. The area under
    the released curve is reported as :attr:`DPROCCurve.auc`.

    Parameters
    ----------
    y_true:
        Binary labels (0/1, -1/1 or booleans), both classes present.
    y_score:
        Scores, higher meaning more likely positive; all ``<= thresholds[-1]``.
    epsilon:
        Total budget (> 0), or ``math.inf`` for the exact curve on the grid.
    thresholds:
        Public, strictly increasing grid ending at an upper bound of the scores.
    smooth:
        Smooth each ECDF with 003 Eq. 3 (default) or release the raw curves.
    p:
        Norm of the smoothing, 1 or 2.
    rng, noise:
        Seed / Generator, or a :class:`NoiseSource`.
    """
    labels, scores, tau = _check_roc_inputs(y_true, y_score, thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    if p not in (1, 2) or isinstance(p, bool):
        raise ValueError(f"p must be 1 or 2 (the norms of 003 Eq. 3), got {p!r}")
    return dp_roc_curve_from_counts(*roc_class_counts(labels, scores, tau), scores.size,
                                    epsilon=eps, thresholds=tau, smooth=smooth, p=p, rng=rng,
                                    noise=noise)


def roc_class_counts(labels: np.ndarray, scores: np.ndarray, tau: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``|{label 1, score <= tau_i}|`` and ``|{label 0, score <= tau_i}|`` (int64): the
    counts behind ``F_TP`` and ``F_FP``, sums over records."""
    # Records of the other class enter as values above the grid: they count in n but
    # never below a threshold, exactly F_TP / F_FP over all n records.
    return tuple(np.searchsorted(np.sort(np.where(labels == cls, scores, np.inf)), tau,
                                 side="right").astype(np.int64) for cls in (1, 0))


def dp_roc_curve_from_counts(pos_counts: Any, neg_counts: Any, n: int, *, epsilon: float,
                             thresholds: Any, smooth: bool = True, p: int = 2,
                             rng: RandomLike = None, noise: NoiseSource | None = None
                             ) -> DPROCCurve:
    """:func:`dp_roc_curve` from the class counts of :func:`roc_class_counts` over ``n``
    records (a distributed server adds its batches' counts); with the same ``rng`` the
    release is :func:`dp_roc_curve`'s."""
    tau = check_thresholds(thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    if p not in (1, 2) or isinstance(p, bool):
        raise ValueError(f"p must be 1 or 2 (the norms of 003 Eq. 3), got {p!r}")
    class_counts = [np.asarray(c) for c in (pos_counts, neg_counts)]
    for name, c in zip(("pos_counts", "neg_counts"), class_counts, strict=True):
        if c.shape != tau.shape or c.dtype.kind not in "iu":
            raise ValueError(f"{name} must hold one integer count per threshold "
                             f"({tau.size}), got shape {c.shape} and dtype {c.dtype}")
    if class_counts[0][-1] + class_counts[1][-1] != n:
        raise ValueError("the class counts at the last threshold must add up to n (every "
                         "score at or below the last threshold)")
    if class_counts[0][-1] == 0 or class_counts[1][-1] == 0:
        raise ValueError("y_true must contain both classes")
    smooth_p = p if smooth else None
    source = None if math.isinf(eps) else resolve_noise(rng, noise)
    curves = []
    for class_count in class_counts:
        counts = class_count.astype(np.float64)
        if math.isinf(eps):
            curves.append(PrivateECDF(tau, counts / n, n, DyadicTree(tau.size), 0.0,
                                      "laplace", PrivacyGuarantee.none(), "none"))
            continue
        half = eps / 2.0
        tree = DyadicTree(tau.size)
        scale = tree.n_levels / half
        noisy = noisy_counts(counts, tau.size, scale, source, None)
        curves.append(PrivateECDF(tau, noisy / n, n, tree, scale, "laplace",
                                  PrivacyGuarantee(half, 0.0, PrivacyModel.CENTRAL,
                                                   ROC_ADJACENCY,
                                                   assumptions=(trusted_curator(),)),
                                  source.kind))
    positives, negatives = curves
    raw_fpr, raw_tpr, thr = _roc_from_ecdfs(positives.values, negatives.values, n, tau)
    if smooth_p is None or math.isinf(eps):
        fpr, tpr = raw_fpr, raw_tpr
    else:
        sm_pos = smooth_curve(positives, p=smooth_p).values
        sm_neg = smooth_curve(negatives, p=smooth_p).values
        fpr, tpr, _ = _roc_from_ecdfs(sm_pos, sm_neg, n, tau)
    guarantee = (PrivacyGuarantee.none() if math.isinf(eps)
                 else PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, ROC_ADJACENCY,
                                       assumptions=(trusted_curator(),)))
    # The area in threshold order; for a self-crossing raw curve it is a signed area.
    area = float(np.trapezoid(tpr, fpr))
    auc = Estimate(value=area, quantity="auc", protocol="dp-ecdf-roc", privacy=guarantee,
                   diagnostics={"smoothing_p": smooth_p, "n_thresholds": int(tau.size),
                                "noise_scale_per_node": positives.scale})
    return DPROCCurve(fpr, tpr, thr, raw_fpr, raw_tpr, positives, negatives,
                      None if math.isinf(eps) else smooth_p, auc, guarantee)
