"""One call that releases a curve statistic of the catalogue with a named release.

``fedustat estimate`` (Python and command line) hands every curve statistic (``ecdf``,
``quantile``, ``median``, ``roc``, ``hl``) and every curve release (``dp-ecdf``,
``dp-quantiles``, ``dp-roc``, ``dp-ecdf-hl``, ``ecdf-secagg``, ``ecdf-fss``, ...) to
:func:`release_curve`, which calls the release function of
:mod:`fedustat.protocols.ecdf`. The functions' own checks (grids, labels, budgets) apply.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedustat import catalogue
from fedustat.privacy.budget import BudgetAccountant
from fedustat.privacy.guarantee import PrivacyGuarantee
from fedustat.privacy.noise import NoiseSource
from fedustat.protocols import registry
from fedustat.protocols.ecdf import (
    dp_ecdf,
    dp_hosmer_lemeshow,
    dp_quantile,
    dp_quantiles,
    dp_roc_curve,
    fss_ecdf,
    pointwise_ecdf,
    smooth,
)
from fedustat.protocols.ecdf.hosmer_lemeshow import HL_ADJACENCY
from fedustat.protocols.ecdf.release import ECDF_ADJACENCY
from fedustat.protocols.ecdf.roc import ROC_ADJACENCY

__all__ = ["DEFAULT_LEVELS", "release_curve"]

#: Quantile levels released when none are given (``fedustat compare`` measures these).
DEFAULT_LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9)

_ADJACENCY = {"ecdf": ECDF_ADJACENCY, "quantile": ECDF_ADJACENCY, "median": ECDF_ADJACENCY,
              "roc": ROC_ADJACENCY, "hl": HL_ADJACENCY}


def release_curve(statistic: str, columns: Sequence[Any], *, epsilon: float,
                  protocol: str | None = None, thresholds: Any = None,
                  levels: Any = None, rng: Any = None, noise: NoiseSource | None = None,
                  budget: BudgetAccountant | None = None) -> Any:
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

    Returns
    -------
    Any
        The release function's own result: a ``PrivateECDF`` / ``SmoothedECDF`` /
        ``FederatedECDF`` (ecdf), ``PrivateQuantiles`` or ``Quantiles`` (quantile,
        median), ``DPROCCurve`` (roc) or ``DPHosmerLemeshow`` (hl).

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
    if budget is not None and not math.isinf(epsilon):
        model = (catalogue.CURVE_RELEASES[name].model if name in catalogue.CURVE_RELEASES
                 else next(e.model for e in registry.available_curves() if e.name == name))
        budget.check(PrivacyGuarantee(epsilon, 0.0, model, _ADJACENCY[statistic]))
    release = _release(stat, name, columns, epsilon=epsilon, thresholds=thresholds,
                       levels=levels, rng=rng, noise=noise)
    if budget is not None:
        budget.spend(_guarantee(release), name=f"{statistic} ({name})")
    return release


def _guarantee(release: Any) -> PrivacyGuarantee:
    privacy = getattr(release, "privacy", None)
    return privacy if privacy is not None else release.statistic.privacy


def _quantile_levels(statistic: str, levels: Any) -> Any:
    if statistic == "median":
        if levels is not None:
            raise ValueError("median is the 0.5 quantile; give levels to quantile instead")
        return 0.5
    return list(DEFAULT_LEVELS) if levels is None else levels


def _release(stat: catalogue.Statistic, name: str, columns: Sequence[Any], *,
             epsilon: float, thresholds: Any, levels: Any, rng: Any,
             noise: NoiseSource | None) -> Any:
    if stat.curve == "hl":
        score, label = columns
        return dp_hosmer_lemeshow(label, score, epsilon=epsilon, rng=rng, noise=noise)
    if thresholds is None:
        raise ValueError(f"{stat.name} needs a public grid: thresholds=[t1, t2, ...] "
                         "(strictly increasing; never taken from the data)")
    if stat.curve == "roc":
        score, label = columns
        estimator = "smoothed" if name == "dp-roc-smoothed" else None
        return dp_roc_curve(label, score, epsilon=epsilon, thresholds=thresholds,
                            estimator=estimator, rng=rng, noise=noise)
    x = np.asarray(columns[0], dtype=np.float64)
    if name == "dp-quantiles":
        return dp_quantiles(x, _quantile_levels(stat.name, levels), epsilon=epsilon,
                            thresholds=thresholds, rng=rng, noise=noise)
    curve = _ecdf(name, x, thresholds, epsilon=epsilon, rng=rng, noise=noise)
    if stat.curve == "ecdf":
        if levels is not None:
            raise ValueError("levels are for quantile releases, not ecdf")
        return curve
    # Quantiles read from a private curve: 003 Alg. 1, post-processing.
    return dp_quantile(curve, _quantile_levels(stat.name, levels))


def _ecdf(name: str, x: np.ndarray, thresholds: Any, *, epsilon: float, rng: Any,
          noise: NoiseSource | None) -> Any:
    if name in ("ecdf-secagg", "ecdf-fss"):
        # Deployment: shares, masks and noise from the OS CSPRNG.
        deployment = noise is not None and noise.kind == "deployment"
        randomness = "os" if deployment else "simulation"
        evaluate = pointwise_ecdf if name == "ecdf-secagg" else fss_ecdf
        return evaluate(x, thresholds, epsilon=epsilon, rng=None if randomness == "os"
                        else rng, randomness=randomness)
    if name == "dp-ecdf-smoothed":
        # 003's smoothing (Eq. 3) corrects 003's tree noise.
        return smooth(dp_ecdf(x, thresholds, epsilon=epsilon, rng=rng, noise=noise,
                              method="003-tree"), p=2)
    return dp_ecdf(x, thresholds, epsilon=epsilon, rng=rng, noise=noise)
