"""Readable figures: a colour-blind-safe style per series and axes fitted to the data.

Colours are Paul Tol's "muted" qualitative scheme (nine colours that stay apart under
the common colour-vision deficiencies; Tol, *Colour Schemes*, SRON/EPS/TN/09-002, 2021,
Fig. 4) plus black; every series also gets its own marker, so series stay apart in
grey-scale print and beyond ten series. A protocol keeps one style in every figure
(:func:`protocol_style`).

The user-facing helpers :func:`plot_roc`, :func:`plot_ecdf` and :func:`plot_estimates`
(also ``fedustat.plot_roc``, ...) draw a release on a matplotlib ``Axes``; matplotlib is
the optional ``plot`` extra (``pip install '.[plot]'``), imported only when they run.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MARKERS", "PALETTE", "PROTOCOL_STYLES", "AxisFit", "fit_axis", "plot_ecdf",
           "plot_estimates", "plot_roc", "protocol_style", "series_style"]

#: Tol's muted scheme (without its pale grey for bad data), then black.
PALETTE: tuple[str, ...] = ("#332288", "#88CCEE", "#44AA99", "#117733", "#999933",
                            "#DDCC77", "#CC6677", "#882255", "#AA4499", "#000000")
#: Filled markers, each distinct in shape.
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<")

#: One (colour, marker) per protocol, the same in every figure. Colours are distinct
#: among the protocols that compute the same statistic (the AUC's ten; the U-statistics'
#: six; the curves'); protocols that never share a figure may share a colour, never a
#: (colour, marker) pair.
PROTOCOL_STYLES: dict[str, tuple[str, str]] = {
    "central-laplace": (PALETTE[9], "o"),
    "exact": (PALETTE[9], "*"),
    "umpc": (PALETTE[0], "s"),
    "pairs-2pc": (PALETTE[6], "D"),
    "ghazi-shuffle": (PALETTE[4], "P"),
    "ldp-quantized": (PALETTE[1], "o"),
    "ldp-ghazi": (PALETTE[3], "^"),
    "ldp-tree": (PALETTE[7], "v"),
    "fedauc-rr": (PALETTE[2], "X"),
    "fedauc-laplace": (PALETTE[5], "h"),
    "fedauc-laplace-local": (PALETTE[5], "<"),
    "fedauc-laplace-global": (PALETTE[8], "s"),
    "fedauc-adaptive": (PALETTE[3], "D"),
    "fedauc-gaussian": (PALETTE[4], "^"),
    "dp-ecdf": (PALETTE[9], "s"),
    "dp-ecdf-smoothed": (PALETTE[4], "o"),
    "dp-roc": (PALETTE[9], "^"),
    "dp-roc-smoothed": (PALETTE[4], "v"),
    "dp-ecdf-hl": (PALETTE[9], "D"),
    "dp-quantiles": (PALETTE[8], "P"),
    "ecdf-secagg": (PALETTE[2], "^"),
    "ecdf-fss": (PALETTE[1], "X"),
}

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


def protocol_style(name: str) -> tuple[str, str]:
    """The colour and marker of a protocol, the same in every figure.

    Parameters
    ----------
    name
        The protocol's name (``Estimate.protocol``, a registry name).

    Returns
    -------
    tuple of str
        ``(colour, marker)`` from :data:`PROTOCOL_STYLES`; a protocol not listed there
        (one registered by a user) gets a style fixed by its name's CRC-32, so it too
        keeps it across figures and runs.

    Examples
    --------
    >>> from fedustat.plotting import protocol_style
    >>> protocol_style("pairs-2pc")
    ('#CC6677', 'D')
    >>> protocol_style("my-protocol") == protocol_style("my-protocol")
    True
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a protocol name (a non-empty str), got {name!r}")
    if name in PROTOCOL_STYLES:
        return PROTOCOL_STYLES[name]
    return series_style(zlib.crc32(name.encode()) % (len(PALETTE) * len(MARKERS)))


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


# --------------------------------------------------------------------------- helpers


def _pyplot(caller: str) -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(f"{caller}() needs matplotlib, the optional plot extra: pip "
                          "install '.[plot]' from a checkout (or pip install matplotlib)"
                          ) from None
    return plt


def _axes(ax: Any, caller: str) -> Any:
    plt = _pyplot(caller)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 4.0))
    return ax


def _privacy_text(release: Any) -> str:
    privacy = getattr(release, "privacy", None)
    if privacy is None:
        return ""
    eps = getattr(privacy, "epsilon", math.nan)
    return f"eps={eps:g}" + (f", delta={privacy.delta:g}" if privacy.delta else "")


def plot_roc(curve: Any, *, ax: Any = None, label: str | None = None,
             chance: bool = True) -> Any:
    """Draw a released ROC curve (:func:`fedustat.roc_curve`'s result).

    Parameters
    ----------
    curve
        A ``ROCCurveResult`` (anything with ``fpr``, ``tpr`` and ``protocol``-free
        ``privacy``).
    ax
        A matplotlib ``Axes`` to draw on; default a new figure's.
    label
        The legend entry; default the released AUC and the budget.
    chance
        Draw the diagonal of a classifier without skill.

    Returns
    -------
    matplotlib.axes.Axes
        The axes, both limited to [0, 1] (rates), square.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np, fedustat
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 500); s = rng.random(500) + 0.3 * y
    >>> curve = fedustat.roc_curve(y, s, epsilon=1.0, bounds=(0, 1.3), rng=1)
    >>> ax = fedustat.plot_roc(curve)
    >>> [float(v) for v in (*ax.get_xlim(), *ax.get_ylim())]
    [0.0, 1.0, 0.0, 1.0]
    """
    ax = _axes(ax, "plot_roc")
    try:
        fpr, tpr = (list(map(float, v)) for v in (curve.fpr, curve.tpr))
    except AttributeError:
        raise TypeError(f"curve must be a released ROC curve (fedustat.roc_curve), got "
                        f"{type(curve).__name__}") from None
    colour = PALETTE[0]
    if label is None:
        auc = getattr(curve, "auc", None)
        parts = [f"AUC {float(auc):.3f}" if auc is not None else "", _privacy_text(curve)]
        label = "released ROC" + (f" ({'; '.join(p for p in parts if p)})"
                                  if any(parts) else "")
    ax.plot(fpr, tpr, color=colour, linewidth=1.6, label=label)
    if chance:
        ax.plot([0, 1], [0, 1], color="0.6", linestyle=":", linewidth=1.0,
                label="chance")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.0)
    ax.set_aspect("equal")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return ax


def plot_ecdf(result: Any, *, ax: Any = None, confidence_level: float = 0.95,
              simultaneous: bool = True, label: str | None = None) -> Any:
    """Draw a released ECDF (:func:`fedustat.ecdf`'s result) with its confidence band.

    Parameters
    ----------
    result
        An ``ECDFResult``: ``thresholds``, ``values`` and ``confidence_interval``.
    ax
        A matplotlib ``Axes``; default a new figure's.
    confidence_level
        The band's coverage, in (0, 1).
    simultaneous
        The band covers the whole curve at once (default) or each threshold alone.
    label
        The legend entry of the curve; default the budget.

    Returns
    -------
    matplotlib.axes.Axes
        The axes: the curve as a step function, the band shaded, y in [0, 1].

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np, fedustat
    >>> x = np.random.default_rng(0).normal(50, 10, 2000)
    >>> res = fedustat.ecdf(x, epsilon=1.0, bounds=(0, 100), rng=1)
    >>> ax = fedustat.plot_ecdf(res)
    >>> [c.get_label() for c in ax.collections]
    ['95% simultaneous band']
    """
    ax = _axes(ax, "plot_ecdf")
    try:
        grid = [float(t) for t in result.thresholds]
        values = [float(v) for v in result.values]
        band = result.confidence_interval(confidence_level, simultaneous=simultaneous)
    except AttributeError:
        raise TypeError(f"result must be a released ECDF (fedustat.ecdf), got "
                        f"{type(result).__name__}") from None
    colour = PALETTE[0]
    kind = "simultaneous" if simultaneous else "pointwise"
    ax.fill_between(grid, band.low, band.high, step="post", color=colour, alpha=0.2,
                    linewidth=0, label=f"{100 * confidence_level:g}% {kind} band")
    text = _privacy_text(result)
    ax.step(grid, values, where="post", color=colour, linewidth=1.6,
            label=label or ("released ECDF" + (f" ({text})" if text else "")))
    ax.set_ylim(-0.02, 1.02)
    x_fit = fit_axis(grid, allow_log=False)
    ax.set_xlim(x_fit.lower, x_fit.upper)
    ax.set_xlabel("threshold t (units of the data)")
    ax.set_ylabel("F(t): share of records <= t")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return ax


def plot_estimates(estimates: Sequence[Any], *, labels: Sequence[str] | None = None,
                   confidence_level: float = 0.95, ax: Any = None,
                   limits: tuple[float, float] | None = None) -> Any:
    """Error bars for released numbers: each ``Estimate`` with its confidence interval.

    Parameters
    ----------
    estimates
        ``Estimate`` objects (:func:`fedustat.estimate`, :func:`fedustat.roc_auc_score`,
        ...), one row each.
    labels
        One label per row; default each release's protocol and budget.
    confidence_level
        The intervals' coverage, in (0, 1).
    ax
        A matplotlib ``Axes``; default a new figure's.
    limits
        The value axis' limits, e.g. the statistic's range (0, 1) for the AUC; an
        interval reaching beyond them is cut at the edge and marked with an arrow.
        Default: fitted to the intervals.

    Returns
    -------
    matplotlib.axes.Axes
        One point per release in its protocol's colour (:func:`protocol_style`), its
        interval as a horizontal bar.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import numpy as np, fedustat
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 400); s = rng.random(400) + 0.4 * y
    >>> releases = [fedustat.roc_auc_score(y, s, epsilon=e, rng=1) for e in (0.5, 2.0)]
    >>> ax = fedustat.plot_estimates(releases, limits=(0, 1))
    >>> [t.get_text() for t in ax.get_yticklabels()]
    ['central-laplace, eps=0.5', 'central-laplace, eps=2']
    """
    items = list(estimates)
    if not items:
        raise ValueError("estimates must hold at least one Estimate")
    if labels is not None and len(labels) != len(items):
        raise ValueError(f"labels must give one label per estimate ({len(items)}), got "
                         f"{len(labels)}")
    if limits is not None:
        lo_lim, hi_lim = (float(v) for v in limits)
        if not lo_lim < hi_lim:
            raise ValueError(f"limits must be (low, high) with low < high, got {limits!r}")
    ax = _axes(ax, "plot_estimates")
    ends: list[float] = []
    names = []
    for row, est in enumerate(items):
        try:
            value = float(est)
            protocol = str(est.protocol)
        except (AttributeError, TypeError):
            raise TypeError(f"estimates[{row}] must be an Estimate, got "
                            f"{type(est).__name__}") from None
        colour, marker = protocol_style(protocol)
        names.append(labels[row] if labels is not None
                     else f"{protocol}, {_privacy_text(est)}".rstrip(", "))
        try:
            low, high = (float(v) for v in est.confidence_interval(confidence_level))
        except (ValueError, TypeError, AttributeError, NotImplementedError):
            low = high = math.nan  # no interval: the point alone
        if limits is not None and math.isfinite(low):
            for end, edge, arrow in ((low, lo_lim, "<"), (high, hi_lim, ">")):
                if (end < edge) if arrow == "<" else (end > edge):
                    ax.plot([edge], [row], marker=arrow, color=colour, markersize=7,
                            clip_on=False, zorder=3)
            low, high = max(low, lo_lim), min(high, hi_lim)
        if math.isfinite(low):
            ax.errorbar([value], [row], xerr=[[value - low], [high - value]], fmt=marker,
                        color=colour, capsize=4, markersize=6)
            ends += [low, high]
        else:
            ax.plot([value], [row], marker=marker, color=colour, linestyle="none")
        ends.append(value)
    ax.set_yticks(range(len(items)))
    ax.set_yticklabels(names)
    ax.set_ylim(len(items) - 0.5, -0.5)
    if limits is not None:
        ax.set_xlim(lo_lim, hi_lim)
    else:
        fit = fit_axis(ends, allow_log=False)
        ax.set_xlim(fit.lower, fit.upper)
    ax.set_xlabel(f"release and its {100 * confidence_level:g}% interval")
    ax.grid(True, axis="x", alpha=0.3)
    return ax
