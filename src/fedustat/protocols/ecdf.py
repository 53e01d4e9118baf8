"""Differentially private ECDFs, quantiles, ROC curves and the Hosmer-Lemeshow statistic.

Source: 003 (DP empirical CDFs), Sec. 3.1 (Eq. 2, Thm 1), App. A.1 (Thm 3, continual
observation), Sec. 4.3 (Alg. 1, inverse ECDF), Sec. 5.1 (ROC), Sec. 5.2 (Alg. 2, Thm 2,
Hosmer-Lemeshow), Sec. 6.5 (ROC L1 error). Central model: a curator (or a secure
aggregation emulating one) sees the exact counts and adds the noise.

The tree noise is kept separate from the counts so that a federated evaluation can add
the *same* draw to securely aggregated counts: :func:`draw_tree_noise` draws one variable
per dyadic node, :func:`apply_tree_noise` adds it to any count vector (or to the counts
at a subset of grid points), and :func:`dp_ecdf` accepts a pre-drawn ``tree_noise``.

Formulas re-derived from the OCR text (which garbles them):

* Sec. 3.1: ``I[L] = {(j, l) : l in [0, L], j in [2^(L-l)]}``; Eq. (2) reads
  ``F_hat(X, tau_i) = F(X, tau_i) + (1/n) sum_{l=0}^{L} eta_{ceil(i / 2^l), l}`` with
  ``eta ~ Lap((L + 1) / eps)``: the noise is in counts, hence the ``1/n``.
* Thm 1: the expected squared error per point is ``2 (L + 1)^3 / (eps^2 n^2)`` (the text
  drops the ``n^2``; with the ``1/n`` of Eq. 2 each of the ``L + 1`` terms has variance
  ``2 ((L + 1) / eps)^2 / n^2``).
* Thm 3: the Gaussian variant is ``eta ~ N(0, ceil((L + 1) / 2) sigma^2)`` and is
  ``1 / (2 sigma^2)``-zCDP: the shift that explains a changed element has at most
  ``k = ceil((L + 1) / 2)`` entries ``±Delta`` (Lemma 1), so its squared L2 norm is at most
  ``k Delta^2``, and ``N(0, s^2)`` noise on a shift of squared norm ``k Delta^2`` is
  ``k Delta^2 / (2 s^2)``-zCDP (Bun & Steinke 2016, Prop. 1.6).
* Sec. 5.1: two ``eps/2``-DP ECDFs compose to ``eps``-DP (the text's "2e" is an OCR slip).
* Alg. 2: ``eps' = eps / (L + 9)``; the ECDF of the predictions uses ``Lap(1 / eps')`` per
  node, i.e. it is ``(L + 1) eps'``-DP, and the ``4Q`` group statistics get ``Lap(1/eps')``
  each (Thm 2 proof: 8 of them change, by at most 1 each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from scipy import stats as sps

from fedustat._validation import (
    RandomLike,
    as_binary_labels,
    as_float_array,
    check_bounds,
    check_consistent_length,
    check_delta,
    check_epsilon,
    check_positive_int,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.noise import NoiseSource, resolve_noise
from fedustat.protocols import ecdf_smoothing as _smoothing
from fedustat.protocols.base import Estimate
from fedustat.protocols.ecdf_smoothing import SmoothedECDF
from fedustat.stats.ecdf import (
    DyadicTree,
    _step_at,
    absolute_grid,
    check_thresholds,
    ecdf_counts,
)

__all__ = [
    "DPHosmerLemeshow",
    "DPROCCurve",
    "PrivateECDF",
    "PrivatePrefixSums",
    "Quantiles",
    "TreeNoise",
    "apply_tree_noise",
    "dp_ecdf",
    "dp_hosmer_lemeshow",
    "dp_prefix_sums",
    "dp_quantile",
    "dp_roc_curve",
    "draw_tree_noise",
    "ecdf_noise_scale",
    "hosmer_lemeshow",
    "roc_curve_on_grid",
    "roc_l1_distance",
]

Distribution = Literal["laplace", "gaussian"]
ECDF_ADJACENCY = "replace one record (n public)"
ROC_ADJACENCY = "replace one record (score and label; n public)"
HL_ADJACENCY = "replace one record (prediction and label; n public)"


# --------------------------------------------------------------------------- tree noise


@dataclass(frozen=True)
class TreeNoise:
    """One draw of the tree noise: a variable per dyadic node (003 Sec. 3.1).

    Kept apart from any count vector so that the same draw can be added to counts
    computed centrally or aggregated securely (:func:`apply_tree_noise`). The values are
    secret: publishing them together with the noisy curve reveals the exact counts.

    Attributes
    ----------
    tree:
        The dyadic intervals over the grid.
    values:
        Noise per node, in counts (flat, level by level, see
        :class:`~fedustat.stats.ecdf.DyadicTree`).
    distribution, scale:
        ``"laplace"`` with scale ``b`` or ``"gaussian"`` with standard deviation ``sigma``.
    kind:
        ``"simulation"`` or ``"deployment"`` (the :class:`NoiseSource` used).
    """

    tree: DyadicTree
    values: np.ndarray
    distribution: Distribution
    scale: float
    kind: str

    @property
    def node_variance(self) -> float:
        return 2.0 * self.scale**2 if self.distribution == "laplace" else self.scale**2

    @property
    def point_variance(self) -> float:
        """Variance of the noise on one point: ``(L + 1)`` node variances."""
        return self.tree.n_levels * self.node_variance

    def at(self, indices: Any = None) -> np.ndarray:
        """Noise of each grid point (or of the points ``indices``), in counts."""
        return self.tree.sum_at(self.values, indices)


def ecdf_noise_scale(n_points: int, epsilon: float) -> float:
    """Laplace scale per node for an eps-DP ECDF on N points: ``(L + 1) / eps`` (003 Thm 1)."""
    tree = DyadicTree(n_points)
    return tree.n_levels / check_epsilon(epsilon)


def draw_tree_noise(n_points: int, scale: float, *, distribution: Distribution = "laplace",
                    rng: RandomLike | NoiseSource = None,
                    noise: NoiseSource | None = None) -> TreeNoise:
    """Draw one noise variable per dyadic node over ``n_points`` grid points.

    Parameters
    ----------
    n_points:
        N, the number of thresholds.
    scale:
        Laplace scale ``b`` (``(L + 1) / eps`` for 003 Thm 1, see
        :func:`ecdf_noise_scale`) or Gaussian ``sigma``.
    distribution:
        ``"laplace"`` or ``"gaussian"``.
    rng, noise:
        A seed or Generator (simulation) or a :class:`NoiseSource` (``noise``,
        e.g. ``DeploymentNoise()``).
    """
    tree = DyadicTree(n_points)
    scale = check_epsilon(scale, "scale")
    source = resolve_noise(rng, noise)
    if distribution == "laplace":
        values = source.laplace(scale, tree.n_nodes)
    elif distribution == "gaussian":
        values = source.gaussian(scale, tree.n_nodes)
    else:
        raise ValueError(f"distribution must be 'laplace' or 'gaussian', got {distribution!r}")
    return TreeNoise(tree, np.asarray(values, dtype=np.float64), distribution, scale,
                     source.kind)


def apply_tree_noise(counts: Any, tree_noise: TreeNoise, indices: Any = None) -> np.ndarray:
    """``counts + noise``: add a tree-noise draw to counts at all points or at ``indices``.

    ``counts`` has one entry per grid point (``indices=None``) or per entry of
    ``indices``; the result is Eq. (2) of 003 in counts. A federated evaluation adds the
    same :class:`TreeNoise` to its securely aggregated counts.
    """
    if not isinstance(tree_noise, TreeNoise):
        raise TypeError(f"tree_noise must be a TreeNoise, got {type(tree_noise).__name__}")
    c = as_float_array(counts, "counts")
    expected = tree_noise.tree.n_points if indices is None else np.asarray(indices).size
    if c.size != expected:
        raise ValueError(f"counts has {c.size} entries but the noise is for {expected} points")
    return c + tree_noise.at(indices)


# --------------------------------------------------------------------------- DP ECDF


@dataclass(frozen=True)
class PrivateECDF:
    """A released ECDF ``F_hat`` on a threshold grid (003 Eq. 2).

    Attributes
    ----------
    thresholds, values:
        The grid and the noisy curve (not necessarily monotone or inside [0, 1]).
    n:
        Number of records (public under the replace-one adjacency).
    tree:
        The dyadic tree of the noise (public structure; smoothing needs it).
    scale, distribution:
        Noise per node, in counts (0 for an exact curve).
    privacy:
        The guarantee delivered.
    noise_kind:
        ``"simulation"``, ``"deployment"`` or ``"none"``.
    """

    thresholds: np.ndarray
    values: np.ndarray
    n: int
    tree: DyadicTree
    scale: float
    distribution: Distribution
    privacy: PrivacyGuarantee
    noise_kind: str

    @property
    def counts(self) -> np.ndarray:
        """The noisy counts ``n F_hat``."""
        return self.values * self.n

    @property
    def variance(self) -> float:
        """Noise variance of ``F_hat`` at each point: ``2 (L+1)^3 / (eps^2 n^2)`` (Thm 1)."""
        node = 2.0 * self.scale**2 if self.distribution == "laplace" else self.scale**2
        return self.tree.n_levels * node / self.n**2

    @property
    def std_error(self) -> float:
        return math.sqrt(self.variance)

    def __call__(self, t: Any) -> np.ndarray:
        """Right-continuous step evaluation at ``t`` (0 below the first threshold)."""
        return _step_at(self.thresholds, self.values, t)


def _check_tree_noise(tree_noise: Any, n_points: int, scale: float) -> None:
    """A caller's draw must be Laplace noise over this grid at the budget's scale
    ``(L + 1) / eps`` (003 Thm 1), or the release would not be the one promised."""
    if not isinstance(tree_noise, TreeNoise):
        raise TypeError(f"tree_noise must be a TreeNoise, got {type(tree_noise).__name__}")
    if tree_noise.tree.n_points != n_points or tree_noise.distribution != "laplace":
        raise ValueError(f"tree_noise must be Laplace noise for {n_points} points, got "
                         f"{tree_noise.distribution} noise for "
                         f"{tree_noise.tree.n_points} points")
    if not math.isclose(tree_noise.scale, scale, rel_tol=1e-12):
        raise ValueError(f"tree_noise has scale {tree_noise.scale:g} but epsilon requires "
                         f"(L+1)/epsilon = {scale:g}")


def _release_counts(counts: np.ndarray, n_points: int, scale: float, source: NoiseSource,
                    tree_noise: TreeNoise | None) -> np.ndarray:
    if tree_noise is None:
        tree_noise = draw_tree_noise(n_points, scale, noise=source)
    else:
        _check_tree_noise(tree_noise, n_points, scale)
    return apply_tree_noise(counts, tree_noise)


def dp_ecdf(values: Any, thresholds: Any, *, epsilon: float, rng: RandomLike = None,
            noise: NoiseSource | None = None,
            tree_noise: TreeNoise | None = None) -> PrivateECDF:
    """The eps-DP ECDF of 003 Sec. 3.1: tree noise on the counts at every threshold.

    ``F_hat(tau_i) = F(tau_i) + (1/n) sum_{l=0}^{L} eta_{(l, i >> l)}`` with one
    ``eta ~ Lap((L + 1) / eps)`` per dyadic node, ``L = ceil(log2 N)``. Publishing all N
    values is eps-DP (003 Thm 1) under the replace-one-record adjacency (n public): a
    replaced record moves the count vector by ``±1`` on an interval of grid points, which
    a signed sum of at most ``L + 1`` nodes explains
    (:meth:`~fedustat.stats.ecdf.DyadicTree.cover`). Each point's error has variance
    ``2 (L + 1)^3 / (eps^2 n^2)``; the curve is unbiased.

    Parameters
    ----------
    values:
        The data, one value per record (any finite numbers; no bounds are needed because a
        record moves each count by at most one).
    thresholds:
        Strictly increasing grid (e.g. :func:`~fedustat.stats.ecdf.absolute_grid` or
        :func:`~fedustat.stats.ecdf.log_grid` on public bounds; never the data's own
        minimum and maximum, which would leak).
    epsilon:
        Budget > 0; ``math.inf`` returns the exact ECDF.
    rng, noise:
        Seed / Generator, or a :class:`NoiseSource` (``DeploymentNoise()`` for people).
    tree_noise:
        A pre-drawn :class:`TreeNoise` (Laplace, scale ``(L + 1) / eps``) to use instead
        of drawing; the federated evaluation passes the same draw.
    """
    x = as_float_array(values, "values")
    tau = check_thresholds(thresholds)
    eps = check_epsilon(epsilon, allow_inf=True)
    tree = DyadicTree(tau.size)
    counts = ecdf_counts(x, tau).astype(np.float64)
    n = x.size
    if math.isinf(eps):
        if tree_noise is not None:
            raise ValueError("tree_noise was given but epsilon is infinite (exact curve)")
        return PrivateECDF(tau, counts / n, n, tree, 0.0, "laplace", PrivacyGuarantee.none(),
                           "none")
    scale = tree.n_levels / eps
    source = resolve_noise(rng, noise)
    noisy = _release_counts(counts, tau.size, scale, source, tree_noise)
    kind = tree_noise.kind if tree_noise is not None else source.kind
    return PrivateECDF(tau, noisy / n, n, tree, scale, "laplace",
                       PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, ECDF_ADJACENCY), kind)


# ------------------------------------------------------------ continual observation


@dataclass(frozen=True)
class PrivatePrefixSums:
    """Private running sums of a stream, 003 Thm 3 (continual observation).

    Attributes
    ----------
    values:
        ``s_hat_t = sum_{i <= t} x_i + sum_l eta_{(l, t >> l)}`` for every t.
    tree, distribution, scale:
        Noise structure; ``scale`` is the Laplace ``b`` or the Gaussian ``sigma`` per node.
    rho:
        The zCDP parameter for Gaussian noise, else None.
    privacy:
        The (eps, delta) guarantee (for Gaussian noise converted from rho-zCDP).
    """

    values: np.ndarray
    tree: DyadicTree
    distribution: Distribution
    scale: float
    rho: float | None
    privacy: PrivacyGuarantee

    @property
    def variance(self) -> float:
        """Noise variance of each released sum: ``L + 1`` node variances."""
        node = 2.0 * self.scale**2 if self.distribution == "laplace" else self.scale**2
        return self.tree.n_levels * node


def dp_prefix_sums(stream: Any, *, epsilon: float | None = None, rho: float | None = None,
                   delta: float | None = None, bounds: tuple[float, float] = (0.0, 1.0),
                   rng: RandomLike = None, noise: NoiseSource | None = None
                   ) -> PrivatePrefixSums:
    """All prefix sums of a stream with tree noise: 003 Thm 3 (continual observation).

    Two streams are adjacent if one element differs (values within ``bounds``, width
    ``Delta``). The change moves every later prefix sum by at most ``Delta``: a suffix,
    which a signed sum of at most ``k = ceil((L + 1) / 2)`` dyadic nodes explains (003
    Lemma 1; :meth:`~fedustat.stats.ecdf.DyadicTree.suffix_cover`) — half the ``L + 1``
    of an interval, hence the constant-factor gain over the binary mechanism.

    * Laplace (``epsilon``): ``eta ~ Lap(k Delta / eps)`` per node, pure eps-DP.
    * Gaussian (``rho``): ``eta ~ N(0, k Delta^2 / (2 rho))`` per node, ``rho``-zCDP
      (003 writes ``N(0, ceil((L+1)/2) sigma^2)`` and ``1/(2 sigma^2)``-zCDP with
      ``Delta = 1``). The returned guarantee converts it to ``(rho + 2 sqrt(rho
      ln(1/delta)), delta)``-DP (Bun & Steinke 2016, Prop. 1.3), so ``delta`` is required.

    Parameters
    ----------
    stream:
        The stream ``x_1 .. x_N`` (finite numbers inside ``bounds``).
    epsilon, rho:
        Exactly one: the Laplace budget or the zCDP parameter (both > 0).
    delta:
        With ``rho``: the delta of the (eps, delta) statement of the guarantee.
    bounds:
        Public range of one element (default [0, 1], e.g. a 0/1 event stream).
    rng, noise:
        Seed / Generator, or a :class:`NoiseSource`.
    """
    x = as_float_array(stream, "stream")
    lo, hi = float(bounds[0]), float(bounds[1])
    check_bounds(x, (lo, hi), "stream")
    width = hi - lo
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (Laplace, eps-DP) or rho (Gaussian, "
                         "zCDP)")
    tree = DyadicTree(x.size)
    k = -(-tree.n_levels // 2)  # ceil((L + 1) / 2)
    source = resolve_noise(rng, noise)
    adjacency = f"replace one stream element (values in [{lo:g}, {hi:g}])"
    if epsilon is not None:
        if delta is not None:
            raise ValueError("delta applies to the Gaussian (rho) variant only")
        eps = check_epsilon(epsilon)
        draw = draw_tree_noise(x.size, k * width / eps, noise=source)
        guarantee = PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, adjacency)
        rho_value = None
    else:
        rho_value = check_epsilon(rho, "rho")
        if delta is None:
            raise ValueError("delta is required with rho, to state the zCDP guarantee as "
                             "(epsilon, delta)-DP")
        delta = check_delta(delta)
        if delta == 0.0:
            raise ValueError("delta must be > 0 to convert zCDP to (epsilon, delta)-DP")
        sigma = math.sqrt(k / (2.0 * rho_value)) * width
        draw = draw_tree_noise(x.size, sigma, distribution="gaussian", noise=source)
        eps_conv = rho_value + 2.0 * math.sqrt(rho_value * math.log(1.0 / delta))
        guarantee = PrivacyGuarantee(eps_conv, delta, PrivacyModel.CENTRAL,
                                     f"{adjacency}; {rho_value:g}-zCDP")
    values = apply_tree_noise(np.cumsum(x), draw)
    return PrivatePrefixSums(values, tree, draw.distribution, draw.scale, rho_value, guarantee)


# ------------------------------------------------------------------------- quantiles


@dataclass(frozen=True)
class Quantiles:
    """Result of :func:`dp_quantile` (003 Alg. 1), one entry per requested level.

    ``value`` is Alg. 1's answer ``(a + b)/2``; ``lower`` (``a``) and ``upper`` (``b``)
    bracket it with ``curve(a) < q <= curve(b)`` whenever ``bracketed`` is True, and
    ``upper - lower <= nu`` unless the grid is coarser. ``upper`` is the smallest
    threshold found whose private CDF reaches q: the usual generalized inverse.
    """

    q: np.ndarray
    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    bracketed: np.ndarray
    evaluations: int
    privacy: PrivacyGuarantee


def dp_quantile(curve: PrivateECDF | SmoothedECDF, q: Any, *, nu: float | None = None,
                lower: float | None = None) -> Quantiles:
    """Inverse ECDF by binary search on a private curve (003 Sec. 4.3, Alg. 1).

    Alg. 1 keeps ``a`` with ``F_hat(a) < q`` and ``b`` with ``F_hat(b) >= q`` and halves
    ``[a, b]`` until ``b - a <= nu``, returning ``(a + b)/2``. The curve is known on its
    grid only, so the search halves grid *positions*: ``O(log N)`` evaluations for any grid
    (also logarithmic ones); on the paper's grid ``nu Z`` the brackets are the same grid
    points. A noisy curve need not be monotone; the search still ends at a bracket
    ``F_hat(a) < q <= F_hat(b)`` (003 Sec. 6.4 finds this harmless). Post-processing: no
    privacy cost, whatever the number of evaluations.

    Parameters
    ----------
    curve:
        A :class:`PrivateECDF` or a smoothed curve.
    q:
        Level(s) in (0, 1].
    nu:
        Precision: stop when ``b - a <= nu``. None (default) searches down to adjacent
        grid points.
    lower:
        A public point below the grid where the CDF is 0 (the start ``a`` of Alg. 1).
        Defaults to one grid step below the first threshold.
    """
    tau = np.asarray(curve.thresholds, dtype=np.float64)
    values = np.asarray(curve.values, dtype=np.float64)
    levels = as_float_array(q, "q", ndim=(0, 1))
    scalar = levels.ndim == 0
    levels = np.atleast_1d(levels)
    if levels.min() <= 0.0 or levels.max() > 1.0:
        raise ValueError("q must be in (0, 1]: the inverse ECDF is defined for levels "
                         "above 0 and up to 1")
    precision = 0.0 if nu is None else float(nu)
    if not math.isfinite(precision) or precision < 0:
        raise ValueError(f"nu must be a finite number >= 0, got {nu!r}")
    step = tau[1] - tau[0] if tau.size > 1 else 1.0
    start = tau[0] - step if lower is None else float(lower)
    if not start < tau[0]:
        raise ValueError(f"lower must be below the first threshold {tau[0]:g}, got {lower!r}")
    positions = np.concatenate([[start], tau])  # position 0: the virtual point with F = 0
    curve_at = np.concatenate([[0.0], values])
    lo = np.zeros(levels.size, dtype=np.int64)
    hi = np.full(levels.size, tau.size, dtype=np.int64)
    evaluations = 0
    while True:
        active = (hi - lo > 1) & (positions[hi] - positions[lo] > precision)
        if not active.any():
            break
        mid = (lo + hi) // 2
        below = curve_at[mid] < levels
        evaluations += 1
        lo = np.where(active & below, mid, lo)
        hi = np.where(active & ~below, mid, hi)
    a, b = positions[lo], positions[hi]
    bracketed = curve_at[hi] >= levels

    def out(arr: np.ndarray) -> np.ndarray:
        return arr[0] if scalar else arr

    return Quantiles(out(levels), out((a + b) / 2.0), out(a), out(b), out(bracketed),
                     evaluations, curve.privacy)


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

    def l1_distance(self, y_true: Any, y_score: Any) -> float:
        """003 Sec. 6.5: L1 distance to the exact ROC curve on the same thresholds.

        An evaluation for whoever holds the data (the exact curve is not private)."""
        fpr, tpr, _ = roc_curve_on_grid(y_true, y_score, self.positives.thresholds)
        return roc_l1_distance(self.fpr, self.tpr, fpr, tpr)


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
    smooth_p = p if smooth else None
    n = scores.size
    source = None if math.isinf(eps) else resolve_noise(rng, noise)
    curves = []
    for cls in (1, 0):
        # Records of the other class enter as values above the grid: they count in n
        # but never below a threshold, exactly F_TP / F_FP over all n records.
        vals = np.where(labels == cls, scores, np.inf)
        counts = np.searchsorted(np.sort(vals), tau, side="right").astype(np.float64)
        if math.isinf(eps):
            curves.append(PrivateECDF(tau, counts / n, n, DyadicTree(tau.size), 0.0,
                                      "laplace", PrivacyGuarantee.none(), "none"))
            continue
        half = eps / 2.0
        tree = DyadicTree(tau.size)
        scale = tree.n_levels / half
        noisy = _release_counts(counts, tau.size, scale, source, None)
        curves.append(PrivateECDF(tau, noisy / n, n, tree, scale, "laplace",
                                  PrivacyGuarantee(half, 0.0, PrivacyModel.CENTRAL,
                                                   ROC_ADJACENCY), source.kind))
    positives, negatives = curves
    raw_fpr, raw_tpr, thr = _roc_from_ecdfs(positives.values, negatives.values, n, tau)
    if smooth_p is None or math.isinf(eps):
        fpr, tpr = raw_fpr, raw_tpr
    else:
        sm_pos = _smoothing.smooth(positives, p=smooth_p).values
        sm_neg = _smoothing.smooth(negatives, p=smooth_p).values
        fpr, tpr, _ = _roc_from_ecdfs(sm_pos, sm_neg, n, tau)
    guarantee = (PrivacyGuarantee.none() if math.isinf(eps)
                 else PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, ROC_ADJACENCY))
    # The area in threshold order; for a self-crossing raw curve it is a signed area.
    area = float(np.trapezoid(tpr, fpr))
    auc = Estimate(value=area, quantity="auc", protocol="dp-ecdf-roc", privacy=guarantee,
                   diagnostics={"smoothing_p": smooth_p, "n_thresholds": int(tau.size),
                                "noise_scale_per_node": positives.scale})
    return DPROCCurve(fpr, tpr, thr, raw_fpr, raw_tpr, positives, negatives,
                      None if math.isinf(eps) else smooth_p, auc, guarantee)


# ------------------------------------------------------------------ Hosmer-Lemeshow


def _hl_table(labels: np.ndarray, probs: np.ndarray, cuts: np.ndarray, n_groups: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Observed and expected counts per group, rows (negatives, positives) (003 Eq. 5).

    Group q (1-based) holds the records with ``t_{q-1} < M(x) <= t_q``, ``t_0 = -inf``.
    """
    group = np.searchsorted(cuts, probs, side="left")
    observed = np.vstack([np.bincount(group, weights=1.0 - labels, minlength=n_groups),
                          np.bincount(group, weights=labels, minlength=n_groups)])
    expected = np.vstack([np.bincount(group, weights=1.0 - probs, minlength=n_groups),
                          np.bincount(group, weights=probs, minlength=n_groups)])
    return observed, expected


def _hl_value(observed: np.ndarray, expected: np.ndarray) -> float:
    """``H = sum_q sum_s (O_sq - E_sq)^2 / E_sq`` (003 Eq. 5); an empty term (0/0) is 0."""
    num = (observed - expected) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(num == 0.0, 0.0, num / expected)
    return float(np.sum(terms))


@dataclass(frozen=True)
class HosmerLemeshowTable:
    """The exact Hosmer-Lemeshow statistic for given group cut points."""

    statistic: float
    pvalue: float
    df: int
    cuts: np.ndarray
    observed: np.ndarray
    expected: np.ndarray


def _check_hl_inputs(y_true: Any, y_prob: Any, n_groups: Any) -> tuple[np.ndarray,
                                                                        np.ndarray, int]:
    labels = as_binary_labels(y_true, "y_true", require_both=False).astype(np.float64)
    probs = as_float_array(y_prob, "y_prob")
    check_consistent_length(y_true=labels, y_prob=probs)
    check_bounds(probs, (0.0, 1.0), "y_prob")
    n_groups = check_positive_int(n_groups, "Q", minimum=3)
    return labels, probs, n_groups


def hosmer_lemeshow(y_true: Any, y_prob: Any, cuts: Any) -> HosmerLemeshowTable:
    """The exact Hosmer-Lemeshow statistic for the groups cut at ``cuts`` (003 Eq. 5).

    ``Q = len(cuts) + 1`` groups: ``(-inf, t_1], (t_1, t_2], ..., (t_{Q-1}, 1]``;
    ``H = sum_q (O_1q - E_1q)^2 / E_1q + (O_0q - E_0q)^2 / E_0q`` with observed (O) and
    predicted (E) numbers of positives (1) and negatives (0); p-value from the chi-square
    distribution with ``Q - 2`` degrees of freedom. Empty groups add nothing.
    """
    t = as_float_array(cuts, "cuts")
    if np.any(np.diff(t) < 0):
        raise ValueError("cuts must be non-decreasing")
    labels, probs, n_groups = _check_hl_inputs(y_true, y_prob, t.size + 1)
    observed, expected = _hl_table(labels, probs, t, n_groups)
    h = _hl_value(observed, expected)
    return HosmerLemeshowTable(h, float(sps.chi2.sf(h, n_groups - 2)), n_groups - 2, t,
                               observed, expected)


@dataclass(frozen=True)
class DPHosmerLemeshow:
    """Result of :func:`dp_hosmer_lemeshow` (003 Alg. 2).

    Attributes
    ----------
    statistic:
        H as an :class:`Estimate` (value, guarantee, diagnostics).
    pvalue, df:
        Chi-square p-value of H with ``Q - 2`` degrees of freedom.
    cuts:
        The private group boundaries ``t_1 .. t_{Q-1}``.
    observed, expected:
        The released noisy ``O_{s,q}``, ``E_{s,q}`` (rows s = 0, 1), shape (2, Q).
    epsilon_prime:
        ``eps / (L + 9)``.
    ecdf:
        The private ECDF of the predictions the cuts came from.
    privacy:
        eps-DP in total (003 Thm 2).
    """

    statistic: Estimate
    pvalue: float
    df: int
    cuts: np.ndarray
    observed: np.ndarray
    expected: np.ndarray
    epsilon_prime: float
    ecdf: PrivateECDF
    privacy: PrivacyGuarantee
    diagnostics: dict[str, Any] = field(default_factory=dict)


def dp_hosmer_lemeshow(y_true: Any, y_prob: Any, *, epsilon: float, Q: int = 10,
                       gamma: float = 2.0**-10, rng: RandomLike = None,
                       noise: NoiseSource | None = None) -> DPHosmerLemeshow:
    """An eps-DP Hosmer-Lemeshow statistic (003 Sec. 5.2, Alg. 2, Thm 2).

    1. The predictions' ECDF on the grid ``gamma, 2 gamma, ..., 1`` (N points,
       ``L = ceil(log2 N)``) with ``Lap(1/eps')`` per node, ``eps' = eps / (L + 9)``: it is
       ``(L + 1) eps'``-DP.
    2. Cut points ``t_q = F_hat^{-1}(q / Q)`` by Alg. 1 (:func:`dp_quantile`, the upper end
       of its final bracket: the smallest grid point whose private CDF reaches q/Q, so the
       groups are ``(t_{q-1}, t_q]`` as in the exact statistic; Alg. 1's midpoint differs by
       at most half a grid step). A noisy curve can give decreasing cuts; they are made
       non-decreasing (post-processing).
    3. The ``4Q`` group sums ``O_{1,q}`` (positives), ``O_{0,q}``, ``E_{1,q} = sum M(x)``,
       ``E_{0,q} = sum (1 - M(x))``, each plus ``Lap(1/eps')``. A replaced record leaves one
       group and joins one: 8 statistics change by at most 1 each, so they are
       ``8 eps'``-DP together, and the total is ``(L + 1) eps' + 8 eps' = eps`` (Thm 2).
    4. ``H`` from the noisy table. Post-processing for stability: counts are clipped at 0
       and expected counts below the noise scale ``1/eps'`` are raised to it before
       dividing (a denominator the noise can produce from nothing makes a term unbounded;
       003 Sec. 6.6 reports this blow-up on unbalanced data). p-value with ``Q - 2``
       degrees of freedom.

    With ``epsilon = inf`` no noise is added and H is the exact statistic for the exact
    cut points on the grid.

    Parameters
    ----------
    y_true:
        Binary labels.
    y_prob:
        Predicted probabilities of the positive class, in [0, 1].
    epsilon:
        Total budget (> 0) or ``math.inf``.
    Q:
        Number of groups (>= 3; 10 is customary).
    gamma:
        Grid spacing for the predictions' ECDF (precision of the cut points).
    rng, noise:
        Seed / Generator, or a :class:`NoiseSource`.
    """
    labels, probs, n_groups = _check_hl_inputs(y_true, y_prob, Q)
    eps = check_epsilon(epsilon, allow_inf=True)
    tau = absolute_grid(gamma, 1.0, gamma)
    tree = DyadicTree(tau.size)
    eps_prime = eps / (tree.depth + 9)
    source = None if math.isinf(eps) else resolve_noise(rng, noise)
    curve = dp_ecdf(probs, tau, epsilon=tree.n_levels * eps_prime,
                    noise=source) if source is not None else dp_ecdf(probs, tau,
                                                                      epsilon=math.inf)
    levels = np.arange(1, n_groups) / n_groups
    cuts = np.maximum.accumulate(dp_quantile(curve, levels, lower=0.0).upper)
    observed, expected = _hl_table(labels, probs, cuts, n_groups)
    diagnostics: dict[str, Any] = {"grid_points": int(tau.size), "L": tree.depth}
    if source is None:
        h = _hl_value(observed, expected)
        guarantee = PrivacyGuarantee.none()
    else:
        noise_scale = 1.0 / eps_prime
        observed = observed + source.laplace(noise_scale, observed.shape)
        expected = expected + source.laplace(noise_scale, expected.shape)
        obs_c = np.maximum(observed, 0.0)
        exp_c = np.maximum(expected, noise_scale)
        diagnostics.update(noise_scale=noise_scale,
                           floored_expected=int(np.count_nonzero(expected < noise_scale)),
                           noise_source=source.kind)
        h = float(np.sum((obs_c - np.maximum(expected, 0.0)) ** 2 / exp_c))
        guarantee = PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, HL_ADJACENCY)
    df = n_groups - 2
    estimate = Estimate(value=h, quantity="hosmer_lemeshow", protocol="dp-ecdf-hl",
                        privacy=guarantee, diagnostics=diagnostics)
    return DPHosmerLemeshow(estimate, float(sps.chi2.sf(h, df)), df, cuts, observed,
                            expected, eps_prime, curve, guarantee, diagnostics)
