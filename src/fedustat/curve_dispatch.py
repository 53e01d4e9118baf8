"""One call that releases a curve statistic of the catalogue with a named release.

``fedustat estimate`` (Python and command line) hands every curve statistic (``ecdf``,
``quantile``, ``median``, ``roc``, ``hl``) and every curve release (``dp-ecdf``,
``dp-quantiles``, ``dp-roc``, ``dp-ecdf-hl``, ``ecdf-secagg``, ``ecdf-fss``, ...) to
:func:`release_curve`, which calls the one-call functions of :mod:`fedustat.curves`
(``ecdf``, ``quantile``, ``median``, ``roc_curve``, ``hosmer_lemeshow``) and, for what
they do not offer (003's smoothed ECDF, quantiles read from a smoothed or federated
curve), the protocol layer :mod:`fedustat.protocols.ecdf`. The functions' own checks
(grids, labels, budgets) apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from fedustat import catalogue, curves
from fedustat._validation import check_bounds_pair
from fedustat.privacy.budget import BudgetAccountant
from fedustat.privacy.noise import NoiseSource
from fedustat.protocols.ecdf import smooth
from fedustat.protocols.ecdf.private_quantiles import DEFAULT_GRID_POINTS, check_quantile_size
from fedustat.stats.ecdf import check_thresholds

__all__ = ["DEFAULT_LEVELS", "release_curve"]

#: Quantile levels released when none are given (``fedustat compare`` measures these).
DEFAULT_LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9)

def release_curve(statistic: str, columns: Sequence[Any], *, epsilon: float,
                  protocol: str | None = None, thresholds: Any = None,
                  levels: Any = None, rng: Any = None, noise: NoiseSource | None = None,
                  budget: BudgetAccountant | None = None, bounds: Any = None,
                  grid_points: int | None = None) -> Any:
    """Release the curve statistic ``statistic`` of ``columns`` with ``protocol``.

    Parameters
    ----------
    statistic:
        A curve statistic of :data:`fedustat.catalogue.STATISTICS`.
    columns:
        Its columns in order: the values (ecdf, quantile, median), or score and 0/1
        label (roc, hl).
    epsilon:
        The budget (pure epsilon-DP; ``math.inf``: the exact curve).
    protocol:
        A release serving the statistic (:func:`fedustat.catalogue.protocols_for`);
        None: :data:`fedustat.catalogue.DEFAULT_CURVE_RELEASE`.
    thresholds:
        The public grid (strictly increasing); not used by ``hl``, whose grid is its own.
    levels:
        Quantile levels (``quantile``; default :data:`DEFAULT_LEVELS`; ``median``: 0.5).
    rng, noise:
        Seed or Generator of a simulation, or a deployment :class:`NoiseSource`.
    budget:
        A :class:`~fedustat.privacy.budget.BudgetAccountant`: checked before the release,
        spent after.
    bounds, grid_points:
        ``quantile`` and ``median`` only, instead of ``thresholds``: public bounds
        ``(low, high)``, so that ``dp-quantiles`` runs :func:`fedustat.quantile`'s default
        with bounds (answers anywhere in them; ``grid_points`` places its error bar's
        atoms, default :data:`~fedustat.protocols.ecdf.private_quantiles.
        DEFAULT_GRID_POINTS`); the other quantile releases take ``grid_points`` even
        points of the bounds as their grid.

    Returns
    -------
    Any
        The one-call functions' result types, whatever the release:
        :class:`~fedustat.curves.ECDFResult` (for dp-ecdf-smoothed its values are the
        smoothed curve, its error bars the raw tree's), ``QuantilesResult`` /
        ``QuantileEstimate`` (also when read from a smoothed or federated curve:
        :func:`fedustat.curves.curve_quantiles`), ``ROCCurveResult`` or
        ``HosmerLemeshowResult``.

    Examples
    --------
    >>> import math
    >>> import numpy as np
    >>> from fedustat.curve_dispatch import release_curve
    >>> curve = release_curve("ecdf", [np.array([1.0, 2.0, 2.0, 4.0])],
    ...                       epsilon=math.inf, thresholds=[1.0, 2.0, 3.0, 4.0])
    >>> [float(v) for v in curve.values]
    [0.25, 0.75, 0.75, 1.0]
    """
    stat = catalogue.get(statistic)
    if stat.kind != "curve":
        raise ValueError(f"{statistic} is a U-statistic, not a curve release; give its kernel "
                         "(or its name) to fedustat.estimate with a U-statistic protocol")
    name = protocol or catalogue.DEFAULT_CURVE_RELEASE[statistic]
    refusal = catalogue.protocol_refusal(statistic, name)
    if refusal is not None:
        raise ValueError(refusal)
    if len(columns) != len(stat.columns):
        raise ValueError(f"{statistic} needs {len(stat.columns)} column(s) "
                         f"({', '.join(stat.columns)}), got {len(columns)}")
    if bounds is not None or grid_points is not None:
        if stat.curve not in ("quantile", "median"):
            raise ValueError(f"{statistic} takes its grid as thresholds=[t1, t2, ...]; "
                             "bounds= and grid_points= are for quantile and median")
        if bounds is None:
            raise ValueError(f"{statistic}: grid_points= goes with bounds=(low, high)")
        if thresholds is not None:
            raise ValueError(f"{statistic}: pass bounds= or thresholds=, not both")
    points = DEFAULT_GRID_POINTS if grid_points is None else grid_points
    if bounds is not None and name != "dp-quantiles":
        # A release on a grid of candidates (003's inversion, federated curves): the
        # bounds' even grid.
        low, high = check_bounds_pair(bounds, "bounds")
        if isinstance(points, bool) or not isinstance(points, int | np.integer) or points < 2:
            raise ValueError(f"grid_points must be an integer >= 2, got {points!r}")
        thresholds, bounds = np.linspace(low, high, int(points)), None
    return _release(stat, name, columns, epsilon=epsilon, thresholds=thresholds,
                    levels=levels, rng=rng, noise=noise, budget=budget, bounds=bounds,
                    grid_points=points)


def _quantile_levels(statistic: str, levels: Any, thresholds: Any = None) -> Any:
    """The levels of a quantile release, checked under their own name (``levels``) and
    against the grid's size before anything runs."""
    if statistic == "median":
        if levels is not None:
            raise ValueError("median is the 0.5 quantile; give levels to quantile instead")
        return 0.5
    if levels is None:
        return list(DEFAULT_LEVELS)
    checked = curves.check_levels("fedustat.estimate('quantile')", levels, "levels")
    if thresholds is not None:
        check_quantile_size(checked.size, check_thresholds(thresholds).size,
                            levels_name="levels")
    return checked


def _release(stat: catalogue.Statistic, name: str, columns: Sequence[Any], *,
             epsilon: float, thresholds: Any, levels: Any, rng: Any,
             noise: NoiseSource | None, budget: BudgetAccountant | None,
             bounds: Any = None, grid_points: int = DEFAULT_GRID_POINTS) -> Any:
    """The one-call functions of :mod:`fedustat.curves` where they serve ``name``; the
    protocol layer for the rest (003's smoothing, quantiles read from a federated curve).
    Budgets are checked and charged by the one-call functions."""
    common = {"epsilon": epsilon, "rng": rng, "noise": noise, "budget": budget}
    if stat.curve == "hl":
        # Its grid of predicted probabilities is fixed by 003 Alg. 2: refuse one that
        # would be ignored.
        for key, value in (("thresholds", thresholds), ("levels", levels)):
            if value is not None:
                raise ValueError(f"hl takes no {key}: its grid of predicted probabilities is "
                                 "fixed by 003 Alg. 2 (set its spacing and groups with "
                                 "fedustat.hosmer_lemeshow(..., gamma=, n_groups=))")
        score, label = columns
        return curves.hosmer_lemeshow(label, score, **common)
    if bounds is not None:  # dp-quantiles on public bounds (release_curve checked)
        x = np.asarray(columns[0], dtype=np.float64)
        common |= {"bounds": bounds, "grid_points": grid_points}
        if stat.curve == "median":
            if levels is not None:
                raise ValueError("median is the 0.5 quantile; give levels to quantile "
                                 "instead")
            return curves.median(x, **common)
        return curves.quantile(x, _quantile_levels(stat.name, levels), **common)
    if thresholds is None:
        raise ValueError(f"{stat.name} needs a public grid: thresholds=[t1, t2, ...] "
                         "(strictly increasing; never taken from the data)")
    if levels is not None and stat.curve not in ("quantile", "median"):
        raise ValueError(f"levels are for quantile releases, not {stat.name}")
    if stat.curve == "roc":
        score, label = columns
        estimator = "smoothed" if name == "dp-roc-smoothed" else None
        return curves.roc_curve(label, score, thresholds=thresholds, estimator=estimator,
                                **common)
    x = np.asarray(columns[0], dtype=np.float64)
    if stat.curve == "ecdf":
        if levels is not None:
            raise ValueError("levels are for quantile releases, not ecdf")
        if name == "dp-ecdf-smoothed":
            # 003's smoothing (Eq. 3) corrects 003's tree noise: post-processing. The
            # result is fedustat.ecdf's, its values the smoothed curve; its error bars
            # stay the raw tree's (release, raw_values), which hold for the exact ECDF.
            tree = curves.ecdf(x, thresholds=thresholds, method="003-tree", **common)
            smoothed = smooth(tree.release, p=2)
            return replace(tree, curve=np.asarray(smoothed.values, dtype=np.float64),
                           protocol=name)
        return curves.ecdf(x, thresholds=thresholds, protocol=_federated(name), **common)
    if name in ("dp-quantiles", "dp-ecdf"):
        # dp-ecdf: the curve inverted (dp_quantiles' method "curve", 003 Alg. 1).
        method = "auto" if name == "dp-quantiles" else "curve"
        if stat.curve == "median":
            if levels is not None:
                raise ValueError("median is the 0.5 quantile; give levels to quantile "
                                 "instead")
            return curves.median(x, thresholds=thresholds, method=method, **common)
        return curves.quantile(x, _quantile_levels(stat.name, levels, thresholds),
                               thresholds=thresholds, method=method, **common)
    # Quantiles read from a smoothed or federated curve: 003 Alg. 1, post-processing;
    # fedustat.quantile's result types, their intervals from the raw curve's band.
    curve = curves.ecdf(x, thresholds=thresholds, protocol=_federated(name),
                        method="003-tree" if name == "dp-ecdf-smoothed" else None, **common)
    if name == "dp-ecdf-smoothed":
        curve = replace(curve, protocol=name)
    smoothed = smooth(curve.release, p=2) if name == "dp-ecdf-smoothed" else None
    return curves.curve_quantiles(curve, _quantile_levels(stat.name, levels, thresholds),
                                  smoothed=smoothed)


def _federated(name: str) -> str | None:
    """The ``protocol`` argument of :func:`fedustat.curves.ecdf` (None: the central one)."""
    return name if name in ("ecdf-secagg", "ecdf-fss") else None

