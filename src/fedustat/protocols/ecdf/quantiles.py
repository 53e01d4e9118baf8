"""Quantiles by inverting a private ECDF (003 Sec. 4.3, Alg. 1); post-processing only.

To release quantiles from the data directly (usually far more accurate at the same
epsilon), see :func:`fedustat.protocols.ecdf.private_quantiles.dp_quantiles`, which keeps
this inversion as its ``"curve"`` method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedustat._validation import (
    as_float_array,
)
from fedustat.privacy.guarantee import PrivacyGuarantee
from fedustat.protocols.ecdf.release import PrivateECDF
from fedustat.protocols.ecdf.smoothing import SmoothedECDF

__all__ = [
    "MAX_INTERVAL_PAIRS",
    "Quantiles",
    "dp_quantile",
    "quantile_interval",
]


#: The most (level, grid point) pairs :func:`quantile_interval` compares in one call.
MAX_INTERVAL_PAIRS = 2**26

# ------------------------------------------------------------------------- quantiles


@dataclass(frozen=True)
class Quantiles:
    """Result of :func:`dp_quantile` (003 Alg. 1), one entry per requested level.

    ``value`` is Alg. 1's answer ``(a + b)/2``; ``lower`` (``a``) and ``upper`` (``b``)
    bracket it with ``curve(a) < q <= curve(b)`` whenever ``bracketed`` is True, and
    ``upper - lower <= nu`` unless the grid is coarser. ``upper`` is the smallest
    threshold found whose private CDF reaches q: the usual generalized inverse.
    """

    #: Fields that depend on the data: computed from the private curve alone.
    released_fields: ClassVar[tuple[str, ...]] = ("value", "lower", "upper", "bracketed",
                                                  "evaluations")

    q: np.ndarray
    value: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    bracketed: np.ndarray
    evaluations: int
    privacy: PrivacyGuarantee
    #: Where the curve's noise came from (``"simulation"``, ``"deployment"``, ``"none"``).
    noise_kind: str = "simulation"


def _noise_kind(curve: Any) -> str:
    """The randomness label of a private curve (post-processing keeps it)."""
    return str(getattr(curve, "noise_kind", "simulation"))


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

    Returns
    -------
    Quantiles
        ``value`` (the midpoint of the final bracket), ``lower``/``upper`` (the bracket),
        and the curve's guarantee.

    Examples
    --------
    >>> curve = fedustat.protocols.ecdf.dp_ecdf([0.1, 0.4, 0.5, 0.9], [0.25, 0.5, 0.75, 1.0],
    ...                          epsilon=math.inf)
    >>> q = fedustat.protocols.ecdf.dp_quantile(curve, 0.5)
    >>> float(q.lower), float(q.upper), float(q.value)
    (0.25, 0.5, 0.375)
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
                     evaluations, curve.privacy, _noise_kind(curve))


def quantile_interval(curve: PrivateECDF, q: Any, confidence_level: float = 0.95, *,
                      lower: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` with the exact q-quantile of the data in ``(low, high]``.

    The quantile ``x_q = min{x : F(x) >= q}`` satisfies ``x_q > t`` wherever
    ``F(t) < q`` and ``x_q <= t`` wherever ``F(t) >= q``. Inside a band
    ``|F_hat - F| <= a`` holding at every grid point at once, ``F_hat(t) + a < q`` implies
    the first and ``F_hat(t) - a >= q`` the second, so ``low`` is the largest grid point
    with ``F_hat + a < q`` (else ``lower``, where F = 0) and ``high`` the smallest with
    ``F_hat - a >= q`` (else +inf). The band is :meth:`PrivateECDF.confidence_band` with
    ``simultaneous=True`` (hierarchical curve: the max-t band at the level itself; 003's
    tree: the union bound over the N points), so the intervals of all levels hold at once
    with probability at least ``confidence_level`` (point-wise ``a_i`` for the
    hierarchical band); conservative, at the grid's resolution. Post-processing of the
    curve only. :func:`fedustat.quantile` with ``interval_share`` releases such a curve
    next to its point.

    Parameters
    ----------
    curve:
        The raw private ECDF (a smoothed curve has no simple error law).
    q:
        Level(s) in (0, 1].
    confidence_level:
        In (0, 1).
    lower:
        A public point below the grid where the CDF is 0; defaults to one grid step below
        the first threshold, as in :func:`dp_quantile`.
    """
    if not isinstance(curve, PrivateECDF):
        raise TypeError(f"curve must be a PrivateECDF (the raw private curve), got "
                        f"{type(curve).__name__}")
    tau = np.asarray(curve.thresholds, dtype=np.float64)
    levels = as_float_array(q, "q", ndim=(0, 1))
    scalar = levels.ndim == 0
    levels = np.atleast_1d(levels)
    if levels.min() <= 0.0 or levels.max() > 1.0:
        raise ValueError("q must be in (0, 1]: the inverse ECDF is defined for levels "
                         "above 0 and up to 1")
    step = tau[1] - tau[0] if tau.size > 1 else 1.0
    start = tau[0] - step if lower is None else float(lower)
    if not start < tau[0]:
        raise ValueError(f"lower must be below the first threshold {tau[0]:g}, got {lower!r}")
    pairs = levels.size * tau.size
    if pairs > MAX_INTERVAL_PAIRS:
        raise ValueError(f"q: {levels.size} levels on a grid of {tau.size} points are "
                         f"{pairs} level-point pairs, above {MAX_INTERVAL_PAIRS} (2^26), the "
                         "most one call compares, to keep it under about 1 GiB of memory "
                         "(about 10 bytes per pair: 160 MiB measured at 2^24); ask for "
                         f"at most {MAX_INTERVAL_PAIRS // tau.size} levels at a time")
    band_low, band_high = curve.confidence_band(confidence_level, simultaneous=True)
    below = band_high[None, :] < levels[:, None]  # F(t) < q for sure
    above = band_low[None, :] >= levels[:, None]  # F(t) >= q for sure
    idx = np.arange(tau.size)
    last_below = np.where(below, idx, -1).max(axis=1)
    first_above = np.where(above, idx, tau.size).min(axis=1)
    low = np.where(last_below >= 0, tau[np.maximum(last_below, 0)], start)
    high = np.where(first_above < tau.size, tau[np.minimum(first_above, tau.size - 1)],
                    np.inf)
    if scalar:
        return low[0], high[0]
    return low, high
