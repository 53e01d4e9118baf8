"""Readable figures: a colour-blind-safe style per series and axes fitted to the data.

Colours are Paul Tol's "muted" qualitative scheme (nine colours that stay apart under
the common colour-vision deficiencies; Tol, *Colour Schemes*, SRON/EPS/TN/09-002, 2021,
Fig. 4) plus black; every series also gets its own marker, so series stay apart in
grey-scale print and beyond ten series.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MARKERS", "PALETTE", "AxisFit", "fit_axis", "series_style"]

#: Tol's muted scheme (without its pale grey for bad data), then black.
PALETTE: tuple[str, ...] = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933",
                            "#DDCC77", "#CC6677", "#882255", "#AA4499", "#000000")
#: Filled markers, each distinct in shape.
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<")

# A log axis spans decades when its largest value is at least this many times its
# smallest; below that a linear axis reads better.
_LOG_RATIO = 10.0
_MARGIN = 0.08  # share of the span (in the axis' own scale) left free on each side


def series_style(index: int) -> tuple[str, str]:
    """The colour and marker of the ``index``-th series of a figure.

    Parameters
    ----------
    index
        Position of the series (0, 1, ...).

    Returns
    -------
    tuple of str
        ``(colour, marker)``: distinct colours for the first ten series, and a distinct
        (colour, marker) pair for the first hundred.

    Examples
    --------
    >>> from fedustat.plotting import series_style
    >>> series_style(0), series_style(10)
    (('#332288', 'o'), ('#332288', 's'))
    """
    if index < 0:
        raise ValueError(f"index must be >= 0, got {index}")
    colour = PALETTE[index % len(PALETTE)]
    marker = MARKERS[(index + index // len(PALETTE)) % len(MARKERS)]
    return colour, marker


@dataclass(frozen=True)
class AxisFit:
    """Scale and limits of an axis fitted to its values.

    Attributes
    ----------
    scale
        ``"log"`` when the positive values span a decade or more, else ``"linear"``.
    lower, upper
        The limits: the values' range plus a margin of 8% of the span on each side
        (in log space for a log axis).
    """

    scale: str
    lower: float
    upper: float


def fit_axis(values: Iterable[float], *, allow_log: bool = True,
             log_ratio: float = _LOG_RATIO) -> AxisFit:
    """Fit an axis to ``values`` (non-finite values are left out).

    Parameters
    ----------
    values
        The data the axis shows.
    allow_log
        Whether a log scale may be chosen (it is, when every value is positive and the
        largest is at least ``log_ratio`` times the smallest).
    log_ratio
        The spread from which a log scale is chosen (default 10: a decade).

    Returns
    -------
    AxisFit
        The scale and the limits.

    Examples
    --------
    >>> from fedustat.plotting import fit_axis
    >>> fit = fit_axis([0.001, 0.01, 0.1])
    >>> fit.scale, round(fit.lower, 6), round(fit.upper, 4)
    ('log', 0.000692, 0.1445)
    >>> fit_axis([2.0, 3.0])
    AxisFit(scale='linear', lower=1.92, upper=3.08)
    """
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        raise ValueError("values must hold at least one finite number to fit an axis to")
    lo, hi = min(finite), max(finite)
    if allow_log and lo > 0 and hi / lo >= log_ratio:
        a, b = math.log10(lo), math.log10(hi)
        pad = _MARGIN * (b - a)
        return AxisFit("log", 10.0 ** (a - pad), 10.0 ** (b + pad))
    if hi == lo:
        # One value: a window of +-10% around it (or +-1 around zero).
        pad = 0.1 * abs(lo) if lo != 0 else 1.0
        return AxisFit("linear", lo - pad, hi + pad)
    pad = _MARGIN * (hi - lo)
    return AxisFit("linear", lo - pad, hi + pad)
