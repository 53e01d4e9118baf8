"""Figures for private ECDF releases: the private ROC curve beside the true one (003 Fig. 1).

matplotlib is an optional dependency (the ``plot`` extra: ``pip install '.[plot]'`` in the
checkout); it is imported only when a figure is drawn.
"""

from __future__ import annotations

from typing import Any

from fedustat.protocols.ecdf.roc import DPROCCurve, roc_curve_on_grid

__all__ = ["plot_roc"]


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError("plotting needs matplotlib; install it with "
                          "`pip install '.[plot]'` in the fedustat checkout") from exc
    return plt


def plot_roc(curve: DPROCCurve, *, y_true: Any = None, y_score: Any = None, ax: Any = None,
             show_raw: bool = True, title: str | None = None) -> Any:
    """Draw a private ROC curve, its unsmoothed version and, given the data, the true curve.

    The true curve is computed on the same thresholds from ``y_true`` and ``y_score``;
    pass them only where the data are held locally (the true curve is not private).

    Parameters
    ----------
    curve:
        The result of :func:`~fedustat.protocols.ecdf.dp_roc_curve`.
    y_true, y_score:
        Labels and scores for the true curve (both or neither).
    ax:
        A matplotlib Axes to draw on; a new figure is made when None.
    show_raw:
        Also draw the curve from the unsmoothed private ECDFs (for a fitted estimator).
    title:
        Axes title; by default the budget and the AUC estimate with its standard error.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if (y_true is None) != (y_score is None):
        raise ValueError("pass both y_true and y_score to draw the true curve, or neither")
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.0, 5.0))
    else:
        fig = ax.figure
    ax.plot([0, 1], [0, 1], color="0.8", linestyle=":", linewidth=1)
    if y_true is not None:
        fpr, tpr, _ = roc_curve_on_grid(y_true, y_score, curve.positives.thresholds)
        ax.plot(fpr, tpr, color="black", linewidth=1.5, label="true ROC")
    if show_raw and curve.estimator not in ("raw", "none"):
        ax.plot(curve.raw_fpr, curve.raw_tpr, color="tab:orange", linewidth=1, alpha=0.7,
                label="private, unsmoothed")
    label = {"raw": "private, raw", "none": "exact (eps = inf)",
             "smoothed": f"private, smoothed (p = {curve.p})"}.get(
        curve.estimator, f"private, {curve.estimator}")
    ax.plot(curve.fpr, curve.tpr, color="tab:blue", linewidth=1.5, label=label)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_aspect("equal")
    if title is None:
        se = curve.auc.std_error
        title = f"{curve.privacy}: AUC {curve.auc.value:.3f}" + (
            f" (SE {se:.3f})" if se else "")
    ax.set_title(title, fontsize=8)
    ax.legend(loc="lower right", fontsize=8)
    return fig
