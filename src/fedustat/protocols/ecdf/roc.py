"""DP ROC curves from two private ECDFs (003 Sec. 5.1); the L1 distance of two curves (Sec. 6.5).

Two ``eps/2``-DP ECDFs (scores of the positives and of the negatives) compose to ``eps``-DP
(the text's "2e" is an OCR slip). Each class curve is a hierarchical histogram tree whose
total (the class size) is private (default, ``curve_method="hierarchical"``; privacy
derived at :func:`_hierarchical_class_curve`) or 003's tree (Eq. 2, ``"003-tree"``, the
paper as written and the only one 003's smoothing applies to). The curve and its AUC are
post-processing of the two:
the estimators of the curve (isotonic by default, a bias-corrected variant, 003's Eq. 3
smoothing, the raw curve); the AUC of the default and of the raw curve, estimated from the
unsmoothed class curves without bias (:func:`_bilinear_auc`) with its standard error from
the noise covariance; and their measured comparison: docs/protocols/roc-curve.md.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import (
    RandomLike,
    as_binary_labels,
    as_float_array,
    check_consistent_length,
    check_epsilon,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, trusted_curator
from fedustat.privacy.noise import NoiseSource, resolve_noise
from fedustat.protocols.base import Estimate, in_statistic_range
from fedustat.protocols.ecdf.hierarchical import (
    MAX_COVARIANCE_POINTS,
    hierarchical_noisy_counts,
    private_total_plan,
)
from fedustat.protocols.ecdf.release import PrivateECDF
from fedustat.protocols.ecdf.smoothing import smooth_counts
from fedustat.protocols.ecdf.tree_noise import noisy_counts
from fedustat.stats.ecdf import (
    DyadicTree,
    check_thresholds,
    ecdf_counts,
)
from fedustat.stats.kernels import auc_kernel

sp = lazy_module("scipy.sparse")
_optimize = lazy_module("scipy.optimize")

__all__ = [
    "DEFAULT_ROC_CURVE_METHOD",
    "DEFAULT_ROC_ESTIMATOR",
    "ROC_ADJACENCY",
    "ROC_CURVE_METHODS",
    "ROC_ESTIMATORS",
    "DPROCCurve",
    "dp_roc_curve",
    "dp_roc_curve_from_counts",
    "roc_class_counts",
    "roc_curve_on_grid",
    "roc_l1_distance",
]


ROC_ADJACENCY = "replace one record (score and label; n public)"
_AUC = auc_kernel()  # the range of the released area, [0, 1]


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
        The released curve (from the estimator's fitted class curves), thresholds
        decreasing; predicted positive when ``score > threshold``.
    raw_fpr, raw_tpr:
        The curve from the unsmoothed private ECDFs (may cross itself).
    positives, negatives:
        The two eps/2-DP ECDFs ``F_TP``, ``F_FP`` (counts over all n records).
    p:
        Smoothing norm (1, 2) of ``estimator="smoothed"``, else None.
    auc:
        The estimate of the area under the exact ROC curve of the records on the grid,
        an :class:`Estimate` with ``std_error`` and ``confidence_interval(level)`` (clipped
        into [0, 1]; ``raw_value`` and ``raw_interval`` unclipped). ``"isotonic"`` and
        ``"raw"``: the bilinear estimate from the unsmoothed class curves, unbiased up to
        third-order noise moments, its standard error from the noise covariance
        (:func:`_bilinear_auc`); ``"smoothed"``: the area under ``(fpr, tpr)``;
        ``"debiased"``: that area minus its bootstrap bias.
        ``diagnostics["curve_area"]`` is the area under ``(fpr, tpr)``, ``["raw_auc"]``
        the area under ``(raw_fpr, raw_tpr)``.
    privacy:
        eps-DP in total, adjacency: replace one record (score and label), n public.
    estimator:
        One of :data:`ROC_ESTIMATORS` (``"none"`` for the exact curve, eps = inf).
    """

    #: Fields that depend on the data: the two noisy ECDFs and what is computed from them.
    released_fields: ClassVar[tuple[str, ...]] = ("fpr", "tpr", "thresholds", "raw_fpr", "raw_tpr",
                                                  "positives.values", "negatives.values",
                                                  "auc.value", "auc.std_error", "auc.error",
                                                  "auc.error.*", "auc.unclipped",
                                                  "auc.diagnostics.*")

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
    estimator: str = "smoothed"

    def tpr_band(self, confidence_level: float = 0.95, *, simultaneous: bool = False
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` for the exact TPR at each point of ``raw_tpr``.

        Pointwise by default; ``simultaneous=True`` covers the whole TPR curve at once."""
        return _rate_band(self.positives, confidence_level, simultaneous)

    def fpr_band(self, confidence_level: float = 0.95, *, simultaneous: bool = False
                 ) -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` for the exact FPR at each point of ``raw_fpr``.

        Pointwise by default; ``simultaneous=True`` covers the whole FPR curve at once."""
        return _rate_band(self.negatives, confidence_level, simultaneous)

    def auc_interval(self, confidence_level: float = 0.95) -> tuple[float, float]:
        """Normal interval ``auc ± z std_error`` for the exact AUC on the grid."""
        low, high = self.auc.confidence_interval(confidence_level)
        return float(low), float(high)

    def l1_distance(self, y_true: Any, y_score: Any) -> float:
        """003 Sec. 6.5: L1 distance to the exact ROC curve on the same thresholds.

        An evaluation for whoever holds the data (the exact curve is not private)."""
        fpr, tpr, _ = roc_curve_on_grid(y_true, y_score, self.positives.thresholds)
        return roc_l1_distance(self.fpr, self.tpr, fpr, tpr)


def _rate_band(curve: PrivateECDF, confidence_level: float, simultaneous: bool = False
               ) -> tuple[np.ndarray, np.ndarray]:
    """Interval for ``1 - F(t) / F(tau_N)`` (a TPR or FPR, :func:`_roc_from_ecdfs`).

    With ``|F_hat(t) - F(t)| <= a`` and ``|F_hat(tau_N) - F(tau_N)| <= a``, each failing
    with probability at most ``(1 - level) / 2`` under the exact per-point law
    (:attr:`PrivateECDF.error`; union bound over the two points), the ratio lies in
    ``[(F_hat(t) - a) / (F_hat(tau_N) + a), (F_hat(t) + a) / (F_hat(tau_N) - a)]``, and in
    [0, 1] since ``0 <= F(t) <= F(tau_N)``. Simultaneous: the union bound over all N
    points instead (each failing with probability ``(1 - level) / N``; ``tau_N`` is one
    of them), so the intervals hold at every threshold at once. Listed like ``raw_tpr``:
    from the highest threshold down, then the exact end point (1, 1).
    """
    alpha = 1.0 - confidence_level
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
    per_point = alpha / curve.values.size if simultaneous else alpha / 2.0
    a = curve.error.half_width(1.0 - per_point) if curve.scale > 0 else 0.0
    f = curve.values[::-1]
    top = float(curve.values[-1])
    ratio_low = np.clip((f - a) / (top + a), 0.0, 1.0) if top + a > 0 else np.zeros_like(f)
    ratio_high = (np.clip((f + a) / (top - a), 0.0, 1.0) if top - a > 0
                  else np.ones_like(f))
    return (np.concatenate([1.0 - ratio_high, [1.0]]),
            np.concatenate([1.0 - ratio_low, [1.0]]))


# ------------------------------------------------------------------ estimators of the curve

#: The estimators of :func:`dp_roc_curve`, default first (chosen by the measurements in
#: docs/protocols/roc-curve.md: the smallest L1 error of the curve, monotone; its AUC is
#: the unbiased bilinear estimate, :data:`BILINEAR_AUC_ESTIMATORS`).
ROC_ESTIMATORS: tuple[str, ...] = ("isotonic", "debiased", "smoothed", "raw")
DEFAULT_ROC_ESTIMATOR = "isotonic"
#: How each class curve is released, default first (the measurements in
#: docs/protocols/roc-curve.md); 003's smoothing (``estimator="smoothed"``) needs 003's tree.
ROC_CURVE_METHODS: tuple[str, ...] = ("hierarchical", "003-tree")
DEFAULT_ROC_CURVE_METHOD = "hierarchical"
#: The estimators whose ``auc`` is the bilinear estimate from the unsmoothed class curves
#: (:func:`_bilinear_auc`) rather than the area under their fitted curve.
BILINEAR_AUC_ESTIMATORS: tuple[str, ...] = ("isotonic", "raw")
#: Draws of the parametric bootstrap (seeded by the released ECDFs, :func:`_bootstrap_seed`).
DEFAULT_BOOTSTRAP = 200
_BOOTSTRAP_SEED = 20260415
_BOOTSTRAP_BLOCK = 16


def _bootstrap_seed(pos: np.ndarray, neg: np.ndarray) -> np.random.SeedSequence:
    """A seed that is a function of the two released curves: the bias correction and the
    standard error are then post-processing of the release (reproducible, no privacy
    cost), and their Monte Carlo error differs between releases instead of being one
    shared offset (a single fixed seed would make it systematic across releases)."""
    digest = hashlib.sha256(np.ascontiguousarray(pos, dtype=np.float64).tobytes()
                            + np.ascontiguousarray(neg, dtype=np.float64).tobytes()).digest()
    return np.random.SeedSequence([_BOOTSTRAP_SEED,
                                   *np.frombuffer(digest[:16], dtype=np.uint32).tolist()])


def _noise_factor(curve: PrivateECDF) -> Any:
    """``G`` with ``G G^T`` the covariance of the noise of ``curve.values`` (CDF units).

    003's dyadic tree (Eq. 2) has point noise ``A eta / n`` with ``A`` the point-by-node 0/1
    matrix and i.i.d. node noise of variance ``v``: ``G = sqrt(v) A / n`` (sparse), i.e.
    :func:`_dyadic_covariance`. Any other curve that knows its covariance
    (``curve.covariance()``, dense N x N) is factored by its eigen-decomposition.
    """
    covariance = getattr(curve, "covariance", None)
    if getattr(curve, "method", "003-tree") != "003-tree" and callable(covariance):
        cov = np.asarray(covariance(), dtype=np.float64)
        w, u = np.linalg.eigh(0.5 * (cov + cov.T))
        return u * np.sqrt(np.clip(w, 0.0, None))
    return curve.tree.matrix() * (math.sqrt(_node_variance(curve)) / curve.n)


@dataclass(frozen=True)
class _DenseCovariance:
    """A class curve's noise covariance ``S`` (CDF units), used as is."""

    matrix: np.ndarray

    def times(self, rows: np.ndarray) -> np.ndarray:
        """``V S`` for rows ``V`` (k, N)."""
        return rows @ self.matrix


@dataclass(frozen=True)
class _PlanCovariance:
    """A hierarchical class curve's noise covariance, applied without the dense matrix:
    ``Cov(c_hat) / n^2`` (:meth:`HierarchicalPlan.covariance_times`)."""

    plan: Any
    epsilon: float
    n: int

    def times(self, rows: np.ndarray) -> np.ndarray:
        return self.plan.covariance_times(rows, self.epsilon) / float(self.n) ** 2


def _noise_law(curve: PrivateECDF) -> Any:
    """What :func:`_raw_auc_std_error` takes for a released class curve: 003's sparse
    factor (:func:`_noise_factor`), a hierarchical plan's covariance operator, or the dense
    covariance of any other curve that has one (None if that is larger than
    :data:`MAX_COVARIANCE_POINTS` points: no exact standard error)."""
    if getattr(curve, "method", "003-tree") == "003-tree":
        return _noise_factor(curve)
    plan = getattr(curve, "plan", None)
    if plan is not None:
        return _PlanCovariance(plan, float(curve.epsilon), int(curve.n))
    if curve.values.size > MAX_COVARIANCE_POINTS:
        return None
    return _DenseCovariance(np.asarray(curve.covariance(), dtype=np.float64))


def _node_variance(curve: PrivateECDF) -> float:
    # Laplace(b) has variance 2 b^2; the Gaussian option's scale is its sigma.
    return 2.0 * curve.scale**2 if curve.distribution == "laplace" else curve.scale**2


def _dyadic_covariance(curve: PrivateECDF) -> np.ndarray:
    """Dense ``Cov(F_hat_i, F_hat_j)`` of 003's tree: the number of levels at which points
    i and j share a node (``i >> l == j >> l``, DyadicTree) times the node variance / n^2."""
    idx = np.arange(curve.values.size)
    shared = sum((idx[:, None] >> lev) == (idx[None, :] >> lev)
                 for lev in range(curve.tree.n_levels))
    return np.asarray(shared, dtype=np.float64) * _node_variance(curve) / curve.n**2


def _area_matrix(n_points: int) -> sp.csr_matrix:
    """``M`` with ``AUC = 1 - x^T M y / (2 x_N y_N)`` for the raw curve (derived here).

    From :func:`_roc_from_ecdfs` with ``x = F_TP``, ``y = F_FP`` on the grid and
    ``x_{-1} = y_{-1} = 0``: going down from ``tau_i`` to ``tau_{i-1}`` the FPR grows by
    ``(y_i - y_{i-1}) / y_N`` and the trapezoid's mean height is
    ``1 - (x_{i-1} + x_i) / (2 x_N)``, so the area is
    ``1 - sum_i (y_i - y_{i-1}) (x_{i-1} + x_i) / (2 x_N y_N)``: ``M = E^T D`` with
    ``(D y)_i = y_i - y_{i-1}`` and ``(E x)_i = x_i + x_{i-1}``.
    """
    eye = sp.eye(n_points, format="csr")
    below = sp.eye(n_points, k=-1, format="csr")
    return ((eye + below).T @ (eye - below)).tocsr()


def _bilinear_cov(x: np.ndarray, y: np.ndarray, a: Any, c: Any, gx: Any, gy: Any,
                  probes: np.ndarray | None = None) -> float:
    """Unbiased estimate of ``Cov(x^T A y, x^T C y)`` for independent noisy x, y.

    With ``x = mu_x + xi``, ``y = mu_y + zeta`` (zero-mean, covariances ``S_x = G_x G_x^T``,
    ``S_y``), the three parts ``mu_x^T A zeta``, ``xi^T A mu_y``, ``xi^T A zeta`` are
    uncorrelated, so (e.g. Mathai and Provost 1992, Sec. 3.2, quadratic forms)
    ``Cov = mu_x^T A S_y C^T mu_x + mu_y^T A^T S_x C mu_y + tr(A S_y C^T S_x)``.
    The means are unknown: plugging in ``x`` for ``mu_x`` adds ``tr(A S_y C^T S_x)`` in
    expectation (``E[x^T Q x] = mu^T Q mu + tr(Q S_x)``), and so does plugging in ``y``,
    so one trace is subtracted instead of added.
    """
    if _is_operator(gx) or _is_operator(gy):
        sx, sy = _as_operator(gx), _as_operator(gy)
        term_x = float(sy.times((a.T @ x)[None, :])[0] @ (c.T @ x))
        term_y = float(sx.times((a @ y)[None, :])[0] @ (c @ y))
        return term_x + term_y - _operator_trace(a, c, sx, sy, probes)
    term_x = (gy.T @ (a.T @ x)) @ (gy.T @ (c.T @ x))
    term_y = (gx.T @ (a @ y)) @ (gx.T @ (c @ y))
    # tr(A S_y C^T S_x) = <G_x^T A G_y, G_x^T C G_y> (Frobenius).
    left = gx.T @ (a @ gy)
    right = gx.T @ (c @ gy)
    trace = (left.multiply(right).sum() if sp.issparse(left)
             else float(np.sum(np.asarray(left) * np.asarray(right))))
    return float(term_x + term_y - trace)


def _is_operator(law: Any) -> bool:
    return isinstance(law, _DenseCovariance | _PlanCovariance)


def _as_operator(law: Any) -> Any:
    """A factor ``G`` as the covariance ``G G^T`` it stands for (mixed laws)."""
    if _is_operator(law):
        return law
    product = law @ law.T
    return _DenseCovariance(product.toarray() if sp.issparse(product) else np.asarray(product))


# Rows of the trace's blocks: k x N arrays of this many cells at most.
_TRACE_BLOCK_CELLS = 1 << 21
#: Up to this many thresholds the trace is exact (O(N^2)); above, a seeded estimate.
EXACT_TRACE_POINTS = 2048
_TRACE_PROBES = 256


def _operator_trace(a: Any, c: Any, sx: Any, sy: Any,
                    probes: np.ndarray | None = None) -> float:
    """``tr(A S_y C^T S_x) = sum_j (e_j^T A S_y) . (e_j^T S_x C)`` (symmetric S_x, S_y),
    over blocks of rows j: N products with each covariance, O(block N) memory. With
    ``probes`` (k x N, independent +-1 entries) the unbiased estimate
    ``mean_k (z_k^T A S_y) . (z_k^T S_x C)`` instead (Hutchinson 1989, Commun. Stat.
    Simul. Comput. 18(3); its variance is ``2 (||P_s||_F^2 - sum_i P_ii^2) / k``,
    ``P_s`` the symmetric part of ``P = A S_y C^T S_x``)."""
    n_points = a.shape[0]
    a_rows = sp.csr_matrix(a)
    rows = probes
    count = rows.shape[0] if rows is not None else n_points
    step = max(1, _TRACE_BLOCK_CELLS // max(n_points, 1))
    total = 0.0
    for lo in range(0, count, step):
        hi = min(count, lo + step)
        if rows is None:
            unit = np.zeros((hi - lo, n_points))
            unit[np.arange(hi - lo), np.arange(lo, hi)] = 1.0
            left = sy.times(a_rows[lo:hi].toarray())  # rows e_j^T A S_y
        else:
            unit = rows[lo:hi]
            left = sy.times(np.asarray((a_rows.T @ unit.T).T))  # rows z^T A S_y
        right = np.asarray((c.T @ sx.times(unit).T).T)  # rows z^T S_x C
        total += float(np.sum(left * right))
    return total / count if rows is not None else total


def _trace_probes(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """Rademacher probes for grids above :data:`EXACT_TRACE_POINTS`, seeded by the
    released curves (post-processing, like the bootstrap); None: exact trace."""
    if x.size <= EXACT_TRACE_POINTS:
        return None
    gen = np.random.default_rng(_bootstrap_seed(x, y))
    return gen.choice(np.array([-1.0, 1.0]), size=(_TRACE_PROBES, x.size))


def _raw_auc_std_error(x: np.ndarray, y: np.ndarray, gx: Any, gy: Any,
                       n: int | None = None) -> float:
    """Standard error of the raw curve's area ``1 - Z / W``, ``Z = x^T M y``,
    ``W = 2 x_N y_N`` (:func:`_area_matrix`); both are bilinear in the two independent
    noisy class curves, so their variances and covariance are exact
    (:func:`_bilinear_cov`) and the ratio's follows by the delta method
    (``Var(Z/W) ~ (Var Z - 2 R Cov(Z, W) + R^2 Var W) / W^2``, ``R = Z / W``; Kendall and
    Stuart, Advanced Theory of Statistics Vol. 1, Sec. 10.6). Where noise drives a class's
    normalizer ``x_N`` or ``y_N`` to or below 0, the release floors it at one record,
    ``1/n`` (:func:`_roc_from_ecdfs`); ``W`` takes the same floor (given ``n``), so the
    error bar of the released area stays finite (without ``n``: NaN there)."""
    n_points = x.size
    m = _area_matrix(n_points)
    last = sp.csr_matrix(([2.0], ([n_points - 1], [n_points - 1])), shape=(n_points,) * 2)
    z = float(x @ (m @ y))
    floor = 0.0 if n is None else 1.0 / n
    w = 2.0 * max(float(x[-1]), floor) * max(float(y[-1]), floor)
    if w <= 0:
        return math.nan
    # Covariance operators (hierarchical curves) above EXACT_TRACE_POINTS: the trace of
    # the noise-by-noise term is estimated (_operator_trace); 003's factor is exact.
    probes = (_trace_probes(x, y) if _is_operator(gx) or _is_operator(gy) else None)
    var_z = _bilinear_cov(x, y, m, m, gx, gy, probes)
    var_w = _bilinear_cov(x, y, last, last, gx, gy, probes)
    cov_zw = _bilinear_cov(x, y, m, last, gx, gy, probes)
    r = z / w
    return math.sqrt(max(var_z - 2.0 * r * cov_zw + r * r * var_w, 0.0)) / abs(w)


def _covariance_times(law: Any, v: np.ndarray) -> np.ndarray:
    """``S v`` for a class curve's noise covariance ``S``: a sparse factor ``G``
    (``S = G G^T``) or a covariance operator (:func:`_noise_law`)."""
    if _is_operator(law):
        return np.asarray(law.times(v[None, :])[0], dtype=np.float64)
    return np.asarray(law @ (law.T @ v), dtype=np.float64).ravel()


def _noise_trace(m: Any, law_x: Any, law_y: Any, probes: np.ndarray | None) -> float:
    """``tr(M S_y M^T S_x)``: exact (:func:`_operator_trace`, or ``||G_x^T M G_y||_F^2``
    for two sparse factors), or Hutchinson's estimate with ``probes``."""
    if _is_operator(law_x) or _is_operator(law_y):
        return _operator_trace(m, m, _as_operator(law_x), _as_operator(law_y), probes)
    inner = law_x.T @ (m @ law_y)
    return float(inner.multiply(inner).sum() if sp.issparse(inner)
                 else np.sum(np.asarray(inner) ** 2))


@dataclass(frozen=True)
class _BilinearAUC:
    """The AUC estimated from the released class curves (:func:`_bilinear_auc`)."""

    value: float
    std_error: float
    positive_share: float
    positive_share_variance: float


def _bilinear_auc(x: np.ndarray, y: np.ndarray, law_x: Any, law_y: Any, n: int
                  ) -> _BilinearAUC:
    """The AUC from the two unsmoothed class curves, unbiased to second order in the noise,
    with its standard error (derived here).

    ``AUC = 1 - Z0 / W0`` with ``Z0 = x0^T M y0`` (:func:`_area_matrix`; ``x0``, ``y0`` the
    exact class curves, CDF units over n) and ``W0 = 2 p (1 - p)``, ``p = n_1 / n`` the
    positives' share. The released ``x = x0 + xi``, ``y = y0 + zeta`` have independent
    zero-mean noise of known covariances ``S_x``, ``S_y`` (:func:`_noise_law`).

    1. The public constraint: every record lies at or below the last threshold, so
       ``x0_N + y0_N = 1`` (n public). The generalized-least-squares projection on it,
       ``x' = x - a s``, ``y' = y - b s`` with ``s = x_N + y_N - 1``,
       ``a = S_x e_N / V``, ``b = S_y e_N / V``, ``V = S_x[N, N] + S_y[N, N]`` (the
       best linear unbiased estimate under the constraint; e.g. Rao, Linear Statistical
       Inference, 2nd ed., Sec. 4a.9), is linear: ``x'``, ``y'`` stay unbiased, and
       ``t = x'_N = 1 - y'_N`` estimates ``p`` with variance
       ``v = S_x[N, N] S_y[N, N] / V``. It correlates the two curves:
       ``Cov(zeta', xi') = -V b a^T``.
    2. Numerator: ``E[x'^T M y'] = Z0 + tr(M Cov(y', x')) = Z0 - V a^T M b``, so
       ``Z = x'^T M y' + V a^T M b`` is unbiased.
    3. Denominator: ``E[t (1 - t)] = p (1 - p) - v``, so ``W = 2 (t (1 - t) + v)`` is
       unbiased for ``W0``.
    4. The ratio: ``E[Z / W] = Z0 / W0 - Cov(Z, W) / W0^2 + Z0 Var(W) / W0^3`` up to
       third moments (second-order delta method; Kendall and Stuart, Advanced Theory of
       Statistics Vol. 1, Sec. 10.6); both terms are estimated by plug-in and removed, as
       ``(Z + Cov(Z, W) / W) / (W + Var(W) / W)`` (the same to second order, with a
       denominator that stays above ``W``).
       ``Var(W) = 4 ((1 - 2t)^2 v + 2 v^2)`` (``t - t^2`` of a normal ``t``),
       ``Cov(Z, W) = 2 (1 - 2t) Cov(Z, t)``.
    5. ``Z - Z0 = g_x^T xi + g_y^T zeta + (xi'^T M zeta' - E)`` with
       ``g_x = M y0 - k e_N``, ``g_y = M^T x0 - k e_N``, ``k = x0^T M b + a^T M y0``. The
       linear part has variance ``g_x^T S_x g_x + g_y^T S_y g_y`` and covariance
       ``(S_y[N, N] g_x^T S_x e_N - S_x[N, N] g_y^T S_y e_N) / V`` with ``t``; the
       quadratic part (symmetric noise: uncorrelated with the linear one) has, for
       Gaussian noise (Isserlis), variance
       ``tr(M S_y M^T S_x) - V (M b)^T S_x (M b) - V (M^T a)^T S_y (M^T a) + 2 V^2 (a^T M b)^2``.
       The exact curves are replaced by ``x'``, ``y'``; that adds the quadratic part's
       variance once in expectation (as in :func:`_bilinear_cov`), so it is subtracted
       instead of added.
    6. Standard error: ``sqrt(Var Z - 2 R Cov(Z, W) + R^2 Var W) / D`` with ``R`` the
       corrected ratio and ``D = W + Var(W) / W`` its denominator (first-order delta
       method; equal to the one at ``R = Z/W``, ``D = W`` to second order, and it follows
       the released ratio where ``W`` is noisy): the release's noise only, the target being
       the AUC of the records on the grid.

    ``t`` is kept in ``[1/n, 1 - 1/n]`` (both classes present), so ``W > 0``.
    """
    n_points = x.size
    m = _area_matrix(n_points)
    last = np.zeros(n_points)
    last[-1] = 1.0
    sx_last, sy_last = _covariance_times(law_x, last), _covariance_times(law_y, last)
    var_x, var_y = float(sx_last[-1]), float(sy_last[-1])
    total_var = var_x + var_y
    a, b = sx_last / total_var, sy_last / total_var
    excess = float(x[-1] + y[-1] - 1.0)
    xp, yp = x - a * excess, y - b * excess
    mb, mta = m @ b, m.T @ a
    amb = float(a @ mb)
    z = float(xp @ (m @ yp)) + total_var * amb
    lo = 1.0 / n
    share = min(max(float(xp[-1]), lo), 1.0 - lo)
    share_var = var_x * var_y / total_var
    w = 2.0 * (share * (1.0 - share) + share_var)
    k = float(xp @ mb) + float(mta @ yp)
    g_x, g_y = m @ yp, m.T @ xp
    g_x[-1] -= k
    g_y[-1] -= k
    linear = float(g_x @ _covariance_times(law_x, g_x) + g_y @ _covariance_times(law_y, g_y))
    probes = _trace_probes(x, y) if _is_operator(law_x) or _is_operator(law_y) else None
    quadratic = (_noise_trace(m, law_x, law_y, probes)
                 - total_var * float(mb @ _covariance_times(law_x, mb))
                 - total_var * float(mta @ _covariance_times(law_y, mta))
                 + 2.0 * total_var**2 * amb**2)
    var_z = max(linear - quadratic, 0.0)
    cov_z_share = (var_y * float(g_x @ sx_last) - var_x * float(g_y @ sy_last)) / total_var
    var_w = 4.0 * ((1.0 - 2.0 * share) ** 2 * share_var + 2.0 * share_var**2)
    cov_zw = 2.0 * (1.0 - 2.0 * share) * cov_z_share
    # (Z + Cov(Z, W) / W) / (W + Var(W) / W) equals Z/W - (Z/W) Var(W)/W^2 + Cov(Z, W)/W^2
    # to second order, and keeps its denominator above W where W's noise is large.
    denominator = w + var_w / w
    corrected = (z + cov_zw / w) / denominator
    # Its delta-method variance, linearised at its own denominator (the same as at W to
    # second order; where W's relative noise is large, the released ratio moves with Z
    # by 1 / denominator, not 1 / W).
    variance = (max(var_z - 2.0 * corrected * cov_zw + corrected**2 * var_w, 0.0)
                / denominator**2)
    return _BilinearAUC(1.0 - corrected, math.sqrt(variance), share, share_var)


def _isotonic_pair(pos: np.ndarray, neg: np.ndarray, n: int
                   ) -> tuple[np.ndarray, np.ndarray, float]:
    """Monotone class curves for the ROC: each projected on non-decreasing curves in
    [0, 1] (isotonic regression then clipping, the Euclidean projection), and one total
    for both classes.

    Every record lies at or below the last threshold, so ``F_TP(tau_N) + F_FP(tau_N) = 1``
    exactly (n public): the positives' share is estimated by the mean of its two noisy
    versions, ``T = (F_TP(tau_N) + 1 - F_FP(tau_N)) / 2`` (half the variance of either),
    kept in ``[1/n, 1 - 1/n]`` (both classes present). Each curve is capped at its total
    and ends there, so the ROC curve runs from (0, 0) to (1, 1)."""
    lo = 1.0 / n
    fit_pos = np.clip(_optimize.isotonic_regression(pos).x, 0.0, 1.0)
    fit_neg = np.clip(_optimize.isotonic_regression(neg).x, 0.0, 1.0)
    total = min(max(0.5 * (fit_pos[-1] + 1.0 - fit_neg[-1]), lo), 1.0 - lo)
    fit_pos = np.minimum(fit_pos, total)
    fit_neg = np.minimum(fit_neg, 1.0 - total)
    fit_pos[-1], fit_neg[-1] = total, 1.0 - total
    return fit_pos, fit_neg, total


def _fitted_class_curves(estimator: str, pos: np.ndarray, neg: np.ndarray, n: int,
                         trees: tuple[DyadicTree, DyadicTree], p: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The estimator's class curves ``(F_TP, F_FP)`` from the noisy ones."""
    if estimator == "smoothed":
        return (smooth_counts(pos * n, trees[0], n, p=p)[1] / n,
                smooth_counts(neg * n, trees[1], n, p=p)[1] / n)
    if estimator in ("isotonic", "debiased"):
        fit_pos, fit_neg, _ = _isotonic_pair(pos, neg, n)
        return fit_pos, fit_neg
    return pos, neg


def _fitted_area(estimator: str, pos: np.ndarray, neg: np.ndarray, n: int, tau: np.ndarray,
                 trees: tuple[DyadicTree, DyadicTree], p: int
                 ) -> tuple[float, np.ndarray, np.ndarray]:
    """``(area, fpr, tpr)`` of the estimator's curve from noisy class curves."""
    fpr, tpr, _ = _roc_from_ecdfs(*_fitted_class_curves(estimator, pos, neg, n, trees, p),
                                  n, tau)
    return float(np.trapezoid(tpr, fpr)), fpr, tpr


def _bootstrap_areas(estimator: str, base_pos: np.ndarray, base_neg: np.ndarray,
                     positives: PrivateECDF, negatives: PrivateECDF, tau: np.ndarray, p: int,
                     draws: int) -> np.ndarray:
    """The estimator's area on ``draws`` parametric-bootstrap releases: the fitted class
    curves plus fresh noise of the release's own law (Efron and Tibshirani 1993, An
    Introduction to the Bootstrap, Ch. 6 and Sec. 10.6 for the bias). Noise per tree node
    as in 003 Eq. 2, summed over the nodes covering each point; for a hierarchical curve,
    Laplace noise on every node of its plan, then its least-squares estimate (linear, so
    the estimate of the noise alone is the noise of the released curve)."""
    gen = np.random.default_rng(_bootstrap_seed(positives.values, negatives.values))
    n = positives.n
    trees = (positives.tree, negatives.tree)
    matrices = [curve.tree.matrix() if curve.plan is None else None
                for curve in (positives, negatives)]
    areas = np.empty(draws)
    # Blocks of draws keep the memory at O(block N) for any grid.
    for start in range(0, draws, _BOOTSTRAP_BLOCK):
        size = min(_BOOTSTRAP_BLOCK, draws - start)
        noise = []
        for curve, a in zip((positives, negatives), matrices, strict=True):
            if curve.plan is not None:
                plan, eps = curve.plan, curve.epsilon
                scales = plan.scales(eps)
                nodes = [gen.laplace(0.0, scales[lev], (size, plan.level_nodes(lev)))
                         for lev in range(plan.height + 1)]
                noise.append(plan.estimate(nodes, eps) / n)
                continue
            shape = (size, curve.tree.n_nodes)
            eta = (gen.laplace(0.0, curve.scale, shape) if curve.distribution == "laplace"
                   else gen.normal(0.0, curve.scale, shape))
            noise.append(np.asarray((a @ eta.T).T) / n)
        for b in range(size):
            areas[start + b] = _fitted_area(estimator, base_pos + noise[0][b],
                                            base_neg + noise[1][b], n, tau, trees, p)[0]
    return areas


def _resolve_estimator(smooth: bool | None, estimator: str | None) -> str:
    if smooth is not None and estimator is not None:
        raise ValueError("pass either estimator or the older smooth flag, not both "
                         "(smooth=True is estimator='smoothed', smooth=False 'raw')")
    if smooth is not None:
        if not isinstance(smooth, bool | np.bool_):
            raise ValueError(f"smooth must be True or False, got {smooth!r}")
        return "smoothed" if smooth else "raw"
    if estimator is None:
        return DEFAULT_ROC_ESTIMATOR
    if estimator not in ROC_ESTIMATORS:
        raise ValueError(f"estimator must be one of {ROC_ESTIMATORS}, got {estimator!r}")
    return estimator


def _resolve_curve_method(curve_method: str | None, estimator: str) -> str:
    """The class curves' release: 003's tree for 003's smoothing (its Eq. 3 is written for
    that tree's noise), else the default."""
    if curve_method is None:
        return "003-tree" if estimator == "smoothed" else DEFAULT_ROC_CURVE_METHOD
    if curve_method not in ROC_CURVE_METHODS:
        raise ValueError(f"curve_method must be one of {ROC_CURVE_METHODS}, got "
                         f"{curve_method!r}")
    if estimator == "smoothed" and curve_method != "003-tree":
        raise ValueError("estimator='smoothed' (003 Eq. 3) smooths 003's tree: it needs "
                         "curve_method='003-tree'")
    return curve_method


def _hierarchical_class_curve(counts: np.ndarray, n: int, tau: np.ndarray, half: float,
                              source: NoiseSource, guarantee: PrivacyGuarantee
                              ) -> PrivateECDF:
    """One class curve: a hierarchical tree over the bins whose total is private
    (:func:`~fedustat.protocols.ecdf.hierarchical.private_total_plan`) at ``half = eps/2``.

    Privacy (replace one record, score and label; derived here, Laplace mechanism, Dwork
    et al. 2006): with per-level scales ``s_l = 1 / (e w_l)`` (root included, ``e`` the
    class's budget), a record changing its label leaves one tree and joins the other, one
    node per level and the root in each: ``e_pos + e_neg``; a record keeping its label moves
    inside its tree, two nodes per level below the root: ``2 e (1 - w_root)``. So any
    split with ``e_pos + e_neg <= eps`` and each ``e <= eps / (2 (1 - w_root))`` is eps-DP;
    eps/2 each is the symmetric one, and the class sizes that would favour another are
    private. The root's share is chosen by the exact variance and comes out near 0, where
    both constraints bind: no budget is left unused."""
    plan = private_total_plan(tau.size)
    noisy = hierarchical_noisy_counts(counts, plan, half, source)
    return PrivateECDF(tau, noisy / n, n, DyadicTree(tau.size), float(plan.scales(half)[0]),
                       "laplace", guarantee, source.kind, "hierarchical", plan, half)


def _check_roc_options(p: Any, n_bootstrap: Any) -> None:
    if p not in (1, 2) or isinstance(p, bool):
        raise ValueError(f"p must be 1 or 2 (the norms of 003 Eq. 3), got {p!r}")
    if n_bootstrap is not None and (isinstance(n_bootstrap, bool)
                                    or not isinstance(n_bootstrap, int | np.integer)
                                    or n_bootstrap < 2):
        raise ValueError(f"n_bootstrap must be None or an integer >= 2, got {n_bootstrap!r}")


def dp_roc_curve(y_true: Any, y_score: Any, *, epsilon: float, thresholds: Any,
                 estimator: str | None = None, smooth: bool | None = None, p: int = 2,
                 n_bootstrap: int | None = None, rng: RandomLike = None,
                 noise: NoiseSource | None = None,
                 curve_method: str | None = None) -> DPROCCurve:
    """An eps-DP ROC curve from two private ECDFs with eps/2 each (003 Sec. 5.1).

    ``F_TP(t) = |{x : label 1, score <= t}| / n`` and ``F_FP`` likewise for label 0 are
    released at ``eps/2`` each (a hierarchical tree with a private total, or 003's tree,
    ``curve_method``); together eps-DP under "replace one record (score and label)".
    Everything after is post-processing:
    the estimator turns the two noisy curves into ``TPR = 1 - F_TP / F_TP(tau_N)`` and
    ``FPR`` likewise, and :attr:`DPROCCurve.auc` estimates the area under the exact ROC
    curve on the grid, with a standard error (docs/protocols/roc-curve.md).

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
    estimator:
        ``"isotonic"`` (default): each class curve projected on monotone curves in
        [0, 1], one total for both classes (the smallest L1 error as a curve by
        measurement); its ``auc`` is the bilinear estimate from the unsmoothed curves,
        not the fitted curve's area (which the projection pulls down).
        ``"debiased"``: the same curve, its area corrected by the parametric-bootstrap
        estimate of its bias. ``"smoothed"``: 003 Eq. 3 with norm ``p`` (the paper's
        estimator; its area is biased low). ``"raw"``: the noisy curves as released (may
        cross itself), with the bilinear ``auc``.
    smooth:
        The older switch: ``True`` is ``estimator="smoothed"``, ``False`` ``"raw"``.
    p:
        Norm of the smoothing of ``"smoothed"``, 1 or 2.
    n_bootstrap:
        Parametric-bootstrap draws for the bias and the standard error of the fitted
        curve's area (seeded by the released ECDFs: post-processing). None: 200 for
        ``"debiased"``; none for ``"smoothed"`` (its solver is slower and its area is
        biased, so its ``std_error`` stays None unless draws are asked for);
        ``"isotonic"`` and ``"raw"`` release the bilinear AUC with its standard error
        from the noise covariance and ignore it.
    rng, noise:
        Seed / Generator, or a :class:`NoiseSource`.
    curve_method:
        ``"hierarchical"`` (default except for ``"smoothed"``): each class curve is a
        b-ary histogram tree with least-squares consistency whose total is private
        (:func:`_hierarchical_class_curve`); ``"003-tree"``: 003's tree (Eq. 2), the
        paper as written and what ``"smoothed"`` uses (None picks it for ``"smoothed"``).

    Returns
    -------
    DPROCCurve
        ``fpr``, ``tpr`` and ``thresholds`` (as ``sklearn.metrics.roc_curve`` orders them),
        the raw curves, and ``auc``: an :class:`~fedustat.protocols.base.Estimate`.

    Examples
    --------
    >>> y = [0, 0, 1, 1, 0, 1]
    >>> s = [0.1, 0.4, 0.35, 0.8, 0.2, 0.9]
    >>> roc = fedustat.protocols.ecdf.dp_roc_curve(y, s, epsilon=math.inf,
    ...                             thresholds=np.linspace(0.1, 1.0, 10))
    >>> round(roc.auc.value, 4)
    0.9444
    >>> roc.tpr[:4].round(3)
    array([0.   , 0.   , 0.333, 0.667])
    """
    labels, scores, tau = _check_roc_inputs(y_true, y_score, thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    _check_roc_options(p, n_bootstrap)
    chosen = _resolve_estimator(smooth, estimator)
    method = _resolve_curve_method(curve_method, chosen)
    return dp_roc_curve_from_counts(*roc_class_counts(labels, scores, tau), scores.size,
                                    epsilon=eps, thresholds=tau, estimator=chosen, p=p,
                                    n_bootstrap=n_bootstrap, rng=rng, noise=noise,
                                    curve_method=method)


def roc_class_counts(labels: np.ndarray, scores: np.ndarray, tau: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """``|{label 1, score <= tau_i}|`` and ``|{label 0, score <= tau_i}|`` (int64): the
    counts behind ``F_TP`` and ``F_FP``, sums over records."""
    # Records of the other class enter as values above the grid: they count in n but
    # never below a threshold, exactly F_TP / F_FP over all n records.
    return tuple(np.searchsorted(np.sort(np.where(labels == cls, scores, np.inf)), tau,
                                 side="right").astype(np.int64) for cls in (1, 0))


def dp_roc_curve_from_counts(pos_counts: Any, neg_counts: Any, n: int, *, epsilon: float,
                             thresholds: Any, estimator: str | None = None,
                             smooth: bool | None = None, p: int = 2,
                             n_bootstrap: int | None = None, rng: RandomLike = None,
                             noise: NoiseSource | None = None,
                             curve_method: str | None = None) -> DPROCCurve:
    """:func:`dp_roc_curve` from the class counts of :func:`roc_class_counts` over ``n``
    records (a distributed server adds its batches' counts); with the same ``rng`` the
    release is :func:`dp_roc_curve`'s."""
    tau = check_thresholds(thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    _check_roc_options(p, n_bootstrap)
    chosen = _resolve_estimator(smooth, estimator)
    method = _resolve_curve_method(curve_method, chosen)
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
    source = None if math.isinf(eps) else resolve_noise(rng, noise)
    curves = []
    for class_count in class_counts:
        counts = class_count.astype(np.float64)
        if math.isinf(eps):
            curves.append(PrivateECDF(tau, counts / n, n, DyadicTree(tau.size), 0.0,
                                      "laplace", PrivacyGuarantee.none(), "none"))
            continue
        half = eps / 2.0
        class_guarantee = PrivacyGuarantee(half, 0.0, PrivacyModel.CENTRAL, ROC_ADJACENCY,
                                           assumptions=(trusted_curator(),))
        if method == "hierarchical":
            curves.append(_hierarchical_class_curve(counts, n, tau, half, source,
                                                    class_guarantee))
            continue
        tree = DyadicTree(tau.size)
        scale = tree.n_levels / half
        noisy = noisy_counts(counts, tau.size, scale, source, None)
        curves.append(PrivateECDF(tau, noisy / n, n, tree, scale, "laplace",
                                  class_guarantee, source.kind, "003-tree", None, half))
    positives, negatives = curves
    raw_fpr, raw_tpr, thr = _roc_from_ecdfs(positives.values, negatives.values, n, tau)
    if math.isinf(eps):
        guarantee = PrivacyGuarantee.none()
        auc = Estimate(value=float(np.trapezoid(raw_tpr, raw_fpr)), quantity="auc",
                       protocol="dp-ecdf-roc", privacy=guarantee, std_error=0.0,
                       diagnostics={"estimator": "none", "n_thresholds": int(tau.size)})
        return DPROCCurve(raw_fpr, raw_tpr, thr, raw_fpr, raw_tpr, positives, negatives,
                          None, auc, guarantee, "none")
    guarantee = PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, ROC_ADJACENCY,
                                 assumptions=(trusted_curator(),))
    x, y = positives.values, negatives.values
    trees = (positives.tree, negatives.tree)
    laws = (_noise_law(positives), _noise_law(negatives))
    area, fpr, tpr = _fitted_area(chosen, x, y, n, tau, trees, p)
    raw_area = float(np.trapezoid(raw_tpr, raw_fpr))
    diagnostics: dict[str, Any] = {"estimator": chosen, "curve_method": method,
                                   "n_thresholds": int(tau.size),
                                   "noise_scale_per_node": positives.scale,
                                   "smoothing_p": p if chosen == "smoothed" else None,
                                   "curve_area": area, "raw_auc": raw_area}
    value: float = area
    std_error: float | None = None
    if chosen in BILINEAR_AUC_ESTIMATORS and laws[0] is not None and laws[1] is not None:
        # The AUC is released from the unsmoothed counts (unbiased), not from the fitted
        # curve: the isotonic fit is monotone and has the smaller L1 error as a curve, but
        # its area is pulled down by the projection (a non-linear map of the noise).
        bilinear = _bilinear_auc(x, y, *laws, n)
        value, std_error = bilinear.value, bilinear.std_error
        diagnostics |= {"auc_method": "bilinear", "positive_share": bilinear.positive_share,
                        "positive_share_variance": bilinear.positive_share_variance}
        if chosen == "raw":
            # The standard error of the raw curve's own area (its diagnostic above).
            diagnostics["raw_std_error"] = _raw_auc_std_error(x, y, *laws, n=n)
    else:
        diagnostics["auc_method"] = "curve area"
        draws = n_bootstrap if n_bootstrap is not None else (
            DEFAULT_BOOTSTRAP if chosen == "debiased" else None)
        if draws is not None:
            base_pos, base_neg = _fitted_class_curves(chosen, x, y, n, trees, p)
            base_area = _fitted_area("raw", base_pos, base_neg, n, tau, trees, p)[0]
            boot = _bootstrap_areas(chosen, base_pos, base_neg, positives, negatives, tau, p,
                                    int(draws))
            # The bias at the fitted curve estimates the bias at the truth (Efron and
            # Tibshirani 1993, Sec. 10.6); the spread of the draws is the standard error.
            bias = float(boot.mean() - base_area)
            std_error = float(boot.std(ddof=1))
            if chosen == "debiased":
                value = area - bias
            diagnostics |= {"bootstrap_bias": bias, "n_bootstrap": int(draws)}
    # An AUC is a probability: the value and its interval are clipped into [0, 1] (post-
    # processing), the unclipped, unbiased value kept (Estimate.raw_value, raw_interval).
    auc = in_statistic_range(Estimate(value=float(value), quantity="auc",
                                      protocol="dp-ecdf-roc", privacy=guarantee,
                                      std_error=std_error, diagnostics=diagnostics,
                                      noise=positives.noise_kind), _AUC)
    return DPROCCurve(fpr, tpr, thr, raw_fpr, raw_tpr, positives, negatives,
                      p if chosen == "smoothed" else None, auc, guarantee, chosen)
