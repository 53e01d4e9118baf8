"""One call per curve question: ECDF, quantiles and median, ROC curve, Hosmer-Lemeshow.

The functions are named like the libraries people know (``scipy.stats.ecdf``,
``numpy.quantile`` / ``numpy.median``, ``sklearn.metrics.roc_curve``) and take the same
arguments as the U-statistic functions of :mod:`fedustat.api`: data positionally (arrays,
pandas/polars Series, or column names of ``data=``), a keyword-only ``epsilon``, ``rng``,
``noise="simulation"|"deployment"``, and ``budget=`` (a
:class:`~fedustat.privacy.budget.BudgetAccountant`, checked before the release runs and
spent after). Underneath they call the protocol layer, :mod:`fedustat.protocols.ecdf`,
which implements the mechanisms (paper 003; McKenna and Sheldon 2020).

Every curve result shares :class:`CurveRelease`: ``privacy``, a per-point ``std_error``,
``confidence_interval(level)``, ``to_dict()`` / ``to_json()`` of released and public fields
only, and ``np.asarray(result)``. A single quantile is an :class:`QuantileEstimate`, an
:class:`~fedustat.protocols.base.Estimate`; several a :class:`QuantilesResult`, which
behaves like their array. A quantile's ``std_error`` and ``confidence_interval`` are in
the data's units (a private curve's band inverted at the level); the mechanism's error in
levels (ranks) is ``level_interval``.
"""

from __future__ import annotations

import functools
import json
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar

import numpy as np

from fedustat._inputs import (
    accepts_random_state,
    binary_score,
    binary_target,
    column_inputs,
    noise_source,
)
from fedustat._validation import (
    RandomLike,
    as_float_array,
    check_bounds_pair,
    check_budget,
    check_consistent_length,
    check_positive_int,
)
from fedustat.privacy.accounting import basic_composition
from fedustat.privacy.budget import BudgetAccountant
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.noise import DeploymentNoise, NoiseSource, resolve_noise
from fedustat.protocols import registry
from fedustat.protocols.base import ConfidenceInterval, Estimate, _plain
from fedustat.protocols.ecdf.continual import PrivatePrefixSums, dp_prefix_sums
from fedustat.protocols.ecdf.federated import FEDERATED_GRID_LIMIT, FederatedECDF
from fedustat.protocols.ecdf.fss import fss_ecdf
from fedustat.protocols.ecdf.hosmer_lemeshow import (
    HL_ADJACENCY,
    DPHosmerLemeshow,
    check_grid_spacing,
    check_groups,
    dp_hosmer_lemeshow,
)
from fedustat.protocols.ecdf.private_quantiles import (
    ALL_QUANTILE_METHODS,
    DEFAULT_GRID_POINTS,
    QUANTILE_GRID_LIMIT,
    check_quantile_size,
    continuous_level_error,
    default_method,
    dp_quantiles,
)
from fedustat.protocols.ecdf.quantiles import dp_quantile, quantile_interval
from fedustat.protocols.ecdf.release import (
    ECDF_ADJACENCY,
    ECDF_GRID_LIMIT,
    GridLimit,
    PrivateECDF,
    dp_ecdf,
    dp_ecdf_from_counts,
)
from fedustat.protocols.ecdf.roc import ROC_ADJACENCY, DPROCCurve, dp_roc_curve
from fedustat.protocols.ecdf.secagg import pointwise_ecdf
from fedustat.protocols.ecdf.smoothing import SmoothedECDF, project_to_cdf
from fedustat.stats.ecdf import absolute_grid, check_thresholds, step_at

__all__ = [
    "CumsumResult",
    "CurveRelease",
    "ECDFResult",
    "HosmerLemeshowResult",
    "QuantileEstimate",
    "QuantilesResult",
    "ROCCurveResult",
    "cumsum",
    "curve_quantiles",
    "default_grid_points",
    "ecdf",
    "hosmer_lemeshow",
    "median",
    "quantile",
    "roc_curve",
]

#: The mechanisms :func:`quantile` runs ("auto":
#: :func:`~fedustat.protocols.ecdf.private_quantiles.default_method`). "exponential" and
#: "curve" have a data-independent error bound in levels (:func:`level_error_bound`).
QUANTILE_METHODS = ALL_QUANTILE_METHODS
#: The ROC curve's grid: its two class curves, with private totals, hold about 5 KiB per
#: point (328 MiB and 8.6 s measured at 2^16 points, 1 GiB and 21 s at 2^18).
ROC_GRID_LIMIT = GridLimit(
    2**16, "the ROC curve release",
    "its two class curves with private totals hold about 5 KiB per point (328 MiB and "
    "8.6 s measured at 2^16 points)")
#: :func:`roc_curve`'s grid on ``bounds`` when no ``grid_points`` is given (its two class
#: curves cost twice an ECDF's per point; see ROC_GRID_LIMIT).
ROC_GRID_POINTS = 256


def default_grid_points(curve: str) -> int:
    """Points of the even grid a curve gets from ``bounds=(lo, hi)`` alone.

    The default of the one-call function that releases it (:func:`ecdf`,
    :func:`quantile`, :func:`median`: ``DEFAULT_GRID_POINTS``; :func:`roc_curve`:
    ``ROC_GRID_POINTS``). ``fedustat.estimate``, the command line, ``advise`` and
    ``compare`` take it from here, so the same question gets the same grid everywhere.

    Parameters
    ----------
    curve:
        The curve statistic's name: ``"ecdf"``, ``"quantile"``, ``"median"`` or ``"roc"``.

    Returns
    -------
    int
        The number of evenly spaced grid points.

    Examples
    --------
    >>> from fedustat.curves import default_grid_points
    >>> default_grid_points("ecdf"), default_grid_points("roc")
    (1024, 256)
    """
    return ROC_GRID_POINTS if curve == "roc" else DEFAULT_GRID_POINTS


#: The federated ECDF releases of the curve registry (by name) and the protocol-layer
#: functions that run them in one process.
_FEDERATED_ECDF: dict[str, Callable[..., FederatedECDF]] = {
    "ecdf-secagg": pointwise_ecdf, "ecdf-fss": fss_ecdf}


# ------------------------------------------------------------------ arguments


def _refuse_unknown(caller: str, params: dict[str, Any]) -> None:
    """An argument the function does not take, refused with its name (scikit-learn
    arguments without a private meaning get their reason from ``column_inputs``)."""
    if params:
        raise TypeError(f"{caller}() got an unexpected keyword argument "
                        f"{next(iter(params))!r}")


def _grid(caller: str, thresholds: Any, bounds: Any, grid_points: int, limit: GridLimit
          ) -> np.ndarray:
    """The public grid: ``thresholds``, or ``grid_points`` evenly spaced in ``bounds``; its
    size is checked against ``limit`` before the grid is built."""
    if thresholds is None and bounds is None:
        raise ValueError(f"{caller}() needs public bounds=(low, high) or thresholds= (a "
                         "grid fixed without looking at the data): bounds taken from the "
                         "data's own minimum and maximum would leak them")
    if thresholds is not None and bounds is not None:
        raise ValueError(f"{caller}(): pass bounds= or thresholds=, not both")
    points = _grid_points(caller, grid_points)
    if thresholds is not None:
        tau = check_thresholds(thresholds)
        limit.check(tau.size, "thresholds")
        return tau
    limit.check(points, "grid_points")
    low, high = _bounds(caller, bounds)
    return np.linspace(low, high, points)


def _grid_points(caller: str, grid_points: Any) -> int:
    if isinstance(grid_points, bool) or not isinstance(grid_points, int | np.integer) \
            or grid_points < 2:
        raise ValueError(f"{caller}(): grid_points must be an integer >= 2, got "
                         f"{grid_points!r}")
    return int(grid_points)


def _bounds(caller: str, bounds: Any) -> tuple[float, float]:
    """Public bounds, refused with the caller's name (:func:`check_bounds_pair`)."""
    try:
        return check_bounds_pair(bounds, "bounds")
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{caller}(): {exc}") from None


def check_levels(caller: str, q: Any, name: str = "q") -> np.ndarray:
    """Quantile levels: a real number or a non-empty 1-D sequence of them, each in (0, 1]
    (booleans, text, complex numbers and None are refused by name)."""
    if q is None or isinstance(q, str | bytes | bool | np.bool_):
        raise TypeError(f"{caller}(): {name} must be a level or a sequence of levels in "
                        f"(0, 1], got {q!r}")
    try:
        raw = np.asarray(q)
    except (TypeError, ValueError):
        raw = np.asarray(q, dtype=object)
    if raw.dtype.kind in "bcUSa":
        raise TypeError(f"{caller}(): {name} must hold real numbers in (0, 1], got {q!r}"[:300])
    try:
        levels = raw.astype(np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{caller}(): {name} must hold numbers in (0, 1], got "
                        f"{q!r}"[:300]) from None
    if levels.ndim > 1 or levels.size == 0:
        raise ValueError(f"{caller}(): {name} must be a level or a non-empty sequence of "
                         f"levels in (0, 1], got shape {levels.shape}")
    if not np.all((levels > 0.0) & (levels <= 1.0)):
        raise ValueError(f"{caller}(): {name} must be in (0, 1] (the q-quantile "
                         f"min{{t : F(t) >= q}} is defined there), got {q!r}"[:300])
    return levels


def _into_grid(values: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Values moved into ``[tau[0], tau[-1]]`` (as diffprivlib clips to its bounds): a
    record above the grid would otherwise be counted nowhere. Clipping one record is a
    function of that record alone, so the adjacency is unchanged."""
    return np.clip(values, tau[0], tau[-1])


def _check_budget(budget: BudgetAccountant | None, epsilon: float, adjacency: str,
                  model: PrivacyModel = PrivacyModel.CENTRAL) -> None:
    """Check the guarantee the release will carry (pure epsilon-DP under ``adjacency``)
    before it runs; a budget file reserves it (docs/budget.md)."""
    if budget is not None:
        budget.before_release(PrivacyGuarantee(epsilon, 0.0, model, adjacency))


def _spend(budget: BudgetAccountant | None, privacy: PrivacyGuarantee, name: str) -> None:
    """Charge the release's own guarantee; one that delivered more than was checked is
    withheld (ReleaseWithheldError) and charged."""
    if budget is not None:
        budget.after_release(privacy, name=name)


def _check_level(confidence_level: float) -> float:
    if not (isinstance(confidence_level, int | float) and not isinstance(confidence_level, bool)
            and 0.0 < confidence_level < 1.0):
        raise ValueError(f"confidence_level must be a number in (0, 1), got "
                         f"{confidence_level!r}")
    return float(confidence_level)


# ------------------------------------------------------------------ the shared interface


class CurveRelease:
    """What every curve result offers (a mixin of the frozen result dataclasses).

    Subclasses name their data-dependent fields in ``released_fields`` (DP outputs and what
    is computed from them, checked by tests/test_release_privacy.py) and their public
    configuration in ``public_fields``; :meth:`to_dict` serialises exactly these, the
    guarantee and the error bars (functions of public quantities), nothing else.

    Examples
    --------
    >>> res = fedustat.ecdf([1, 2, 2, 4], epsilon=math.inf, thresholds=[1, 2, 3, 4])
    >>> isinstance(res, fedustat.curves.CurveRelease), np.asarray(res).tolist()
    (True, [0.25, 0.75, 0.75, 1.0])
    """

    released_fields: ClassVar[tuple[str, ...]] = ()
    public_fields: ClassVar[tuple[str, ...]] = ()
    privacy: PrivacyGuarantee
    noise: str

    # Each subclass defines ``values`` and ``std_error`` (per point, the shape of
    # ``values``) and ``confidence_interval(level)`` (arrays of that shape).

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        values = np.asarray(self.values, dtype=dtype)
        return values.copy() if copy else values

    def to_dict(self, confidence_level: float = 0.95) -> dict[str, Any]:
        """Released and public fields, the guarantee and the error bars, as plain values.

        Parameters
        ----------
        confidence_level:
            Level of the ``interval`` entry, in (0, 1).

        Returns
        -------
        dict
            ``kind`` (the class name), the public and released fields, ``std_error``,
            ``confidence_level``, ``interval`` ([low, high]), ``guarantee`` and ``noise``.

        Examples
        --------
        >>> res = fedustat.ecdf([1, 2, 2, 4], epsilon=math.inf, thresholds=[1, 2, 3, 4])
        >>> out = res.to_dict()
        >>> out["kind"], out["curve"], out["interval"][0]
        ('ECDFResult', [0.25, 0.75, 0.75, 1.0], [0.25, 0.75, 0.75, 1.0])
        """
        low, high = self.confidence_interval(confidence_level)
        # Dotted names are inside ``release``, the protocol layer's object, which stays out:
        # its released parts are the top-level fields.
        out = {name: _plain(getattr(self, name))
               for name in (*self.public_fields, *self.released_fields) if "." not in name}
        return {"kind": type(self).__name__, **out,
                "std_error": _plain(np.asarray(self.std_error)),
                "confidence_level": float(confidence_level),
                "interval": [_plain(np.asarray(low)), _plain(np.asarray(high))],
                "guarantee": _plain(self.privacy), "noise": self.noise}

    def to_json(self, confidence_level: float = 0.95, **kwargs: Any) -> str:
        """:meth:`to_dict` as a JSON string; ``kwargs`` go to :func:`json.dumps`.

        Parameters
        ----------
        confidence_level:
            As for :meth:`to_dict`.
        **kwargs:
            Passed to :func:`json.dumps` (``indent``, ``sort_keys``, ...).

        Returns
        -------
        str

        Examples
        --------
        >>> res = fedustat.ecdf([1, 2, 2, 4], epsilon=math.inf, thresholds=[1, 2, 3, 4])
        >>> res.to_json()[:45]
        '{"kind": "ECDFResult", "thresholds": [1.0, 2.'
        """
        return json.dumps(self.to_dict(confidence_level), **kwargs)


# ------------------------------------------------------------------ ECDF


@dataclass(frozen=True, eq=False)  # arrays: compare fields, not results
class ECDFResult(CurveRelease):
    """A private ECDF on a public grid, like ``scipy.stats.ecdf(x).cdf`` evaluated there.

    ``thresholds`` and ``values`` are the grid and the released curve **projected to a
    valid CDF**: non-decreasing and in [0, 1], the Euclidean (L2) projection of the noisy
    ``F_hat`` (isotonic regression, then clipping:
    :func:`~fedustat.protocols.ecdf.smoothing.project_to_cdf`). Post-processing, so it
    costs no privacy; since the exact ECDF is such a curve, the projection never
    increases the L2 or the sup error of any release. The raw release (unbiased, not
    necessarily monotone or in [0, 1]: the one to average over releases) stays in
    :attr:`raw_values`; ``np.clip(res.raw_values, 0, 1)`` is the clipped-only curve.
    ``std_error`` is the exact noise standard deviation at each point and
    :meth:`confidence_interval` the pointwise (or, ``simultaneous=True``, whole-curve)
    band from the noise law (:meth:`~fedustat.protocols.ecdf.PrivateECDF.confidence_band`),
    intersected with [0, 1]. ``release`` is the protocol layer's curve, for its further
    post-processing (``smooth``, ``dp_quantile``).

    Parameters
    ----------
    thresholds:
        The public grid.
    curve:
        The released curve at the grid points, projected to a valid CDF.
    n:
        The number of records.
    protocol:
        The release's name (``"dp-ecdf"``, ``"ecdf-secagg"``, ``"ecdf-fss"``).
    privacy:
        The guarantee the release carries.
    noise:
        ``"simulation"``, ``"deployment"`` or ``"none"``.
    release:
        The protocol layer's curve.

    Examples
    --------
    >>> res = fedustat.ecdf([1, 2, 2, 4], epsilon=math.inf, thresholds=[1, 2, 3, 4])
    >>> res.thresholds.tolist(), res.curve.tolist(), res.n, res.noise
    ([1.0, 2.0, 3.0, 4.0], [0.25, 0.75, 0.75, 1.0], 4, 'none')
    """

    released_fields: ClassVar[tuple[str, ...]] = ("curve", "release.values")
    public_fields: ClassVar[tuple[str, ...]] = ("thresholds", "n", "protocol")

    thresholds: np.ndarray
    curve: np.ndarray
    n: int
    protocol: str
    privacy: PrivacyGuarantee
    noise: str
    release: PrivateECDF | FederatedECDF = field(repr=False)

    @property
    def values(self) -> np.ndarray:
        """The released curve at :attr:`thresholds`, projected to a valid CDF
        (``np.asarray(result)``; the raw release is :attr:`raw_values`).

        Examples
        --------
        >>> res = fedustat.ecdf([1, 2, 2, 4], epsilon=math.inf, thresholds=[1, 2, 3, 4])
        >>> res.values.tolist()
        [0.25, 0.75, 0.75, 1.0]
        """
        return self.curve

    @property
    def std_error(self) -> np.ndarray:
        """The exact noise standard deviation of the curve at each grid point.

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> res = fedustat.ecdf(x, epsilon=1.0, bounds=(0, 10), grid_points=5, rng=1)
        >>> res.std_error.round(4).tolist()
        [0.0026, 0.0033, 0.0035, 0.0033, 0.0026]
        """
        return np.sqrt(self.release.point_variances)

    def confidence_interval(self, confidence_level: float = 0.95, *,
                            simultaneous: bool = False) -> ConfidenceInterval:
        """Pointwise intervals for the exact ECDF at the grid points; ``simultaneous=True``
        covers all N points at once (the release's whole-curve band: the max-t band of the
        hierarchical release, the union bound on 003's tree; docs/protocols/ecdf.md).

        Both are intersected with [0, 1], where the exact ECDF lies. A simultaneous band
        is also made monotone (the lower edge's running maximum, the upper edge's running
        minimum from the right): when it covers the whole non-decreasing ECDF, so does
        the tightened band. (A pointwise interval covers one point at a time, so it is not
        tightened.)

        Parameters
        ----------
        confidence_level:
            The coverage, in (0, 1).
        simultaneous:
            Cover every grid point at once rather than each on its own.

        Returns
        -------
        ConfidenceInterval
            ``(low, high)``, arrays of the grid's shape.

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> res = fedustat.ecdf(x, epsilon=1.0, bounds=(0, 10), grid_points=5, rng=1)
        >>> low, high = res.confidence_interval(0.9)
        >>> low.round(3).tolist(), high.round(3).tolist()
        ([0.0, 0.228, 0.466, 0.73, 0.996], [0.003, 0.239, 0.478, 0.741, 1.0])
        >>> bool(np.all(res.confidence_interval(0.9, simultaneous=True).low <= low))
        True
        """
        level = _check_level(confidence_level)
        low, high = self.release.confidence_band(level, simultaneous=simultaneous)
        # Intersected with [0, 1], where the exact ECDF lies (Estimate.clipped's rule).
        low = np.clip(np.asarray(low, dtype=np.float64), 0.0, 1.0)
        high = np.clip(np.asarray(high, dtype=np.float64), 0.0, 1.0)
        if simultaneous:
            low = np.maximum.accumulate(low)
            high = np.minimum.accumulate(high[::-1])[::-1]
        return ConfidenceInterval(low, high)

    @property
    def raw_values(self) -> np.ndarray:
        """The raw released curve, neither projected nor clipped (unbiased: average these
        over many releases).

        Examples
        --------
        >>> res = fedustat.ecdf([1, 2, 2, 4], epsilon=math.inf, thresholds=[1, 2, 3, 4])
        >>> res.raw_values.tolist()
        [0.25, 0.75, 0.75, 1.0]
        """
        return np.asarray(self.release.values, dtype=np.float64)

    def evaluate(self, t: Any) -> np.ndarray:
        """The released (projected) step function at ``t`` (0 below the first
        threshold), as ``scipy.stats.ecdf(x).cdf.evaluate``.

        Parameters
        ----------
        t:
            A point or an array of points.

        Returns
        -------
        numpy.ndarray
            The released curve at the largest grid point ``<= t``.

        Examples
        --------
        >>> res = fedustat.ecdf([1, 2, 2, 4], epsilon=math.inf, thresholds=[1, 2, 3, 4])
        >>> res.evaluate([0, 2.5, 5]).tolist()
        [0.0, 0.75, 1.0]
        """
        return np.asarray(step_at(self.thresholds, self.curve, t), dtype=np.float64)


@accepts_random_state
def ecdf(x: Any, *, epsilon: float, bounds: tuple[float, float] | None = None,
         thresholds: Any = None, grid_points: int = DEFAULT_GRID_POINTS,
         method: str | None = None, protocol: str | None = None, data: Any = None,
         rng: RandomLike = None, noise: str | NoiseSource | None = None,
         budget: BudgetAccountant | None = None, **params: Any) -> ECDFResult:
    """Private empirical CDF on a public grid; mirrors ``scipy.stats.ecdf``.

    Parameters
    ----------
    x:
        One value per record: an array, a pandas/polars Series or a column name of ``data``.
    epsilon:
        The budget (> 0); ``math.inf`` gives the exact ECDF on the grid.
    bounds, thresholds:
        The public grid: ``grid_points`` evenly spaced points in ``bounds=(low, high)``, or
        the strictly increasing ``thresholds``. Never derive them from the data. Values
        outside are moved to the grid's nearest end.
    grid_points:
        Points of the grid made from ``bounds``.
    method:
        The central release: ``"hierarchical"`` (default: b-ary tree with least squares)
        or ``"003-tree"`` (003 Sec. 3.1 as written); see :func:`fedustat.protocols.ecdf.dp_ecdf`.
    protocol:
        None (default): the central release. ``"ecdf-secagg"`` (secure aggregation among
        computing parties, 003 Sec. 4.1) or ``"ecdf-fss"`` (two servers with DCF keys, 003
        Sec. 4.2): the federated releases of the curve registry, run in simulation.
    data, rng, noise, budget:
        As for :func:`fedustat.roc_auc_score`; ``budget`` is checked before the release
        runs and charged with its guarantee after.

    Returns
    -------
    ECDFResult
        ``np.asarray(result)`` is the released curve at ``result.thresholds``, projected
        to a valid CDF (non-decreasing, in [0, 1]: the L2 projection, which never
        increases the L2 or sup error); ``result.raw_values`` is the raw release.

    Examples
    --------
    >>> import math
    >>> import numpy as np
    >>> import fedustat
    >>> res = fedustat.ecdf([1, 2, 2, 4], epsilon=math.inf, thresholds=[1, 2, 3, 4])
    >>> np.asarray(res).tolist()
    [0.25, 0.75, 0.75, 1.0]
    """
    caller = "fedustat.ecdf"
    values = column_inputs(caller, params, data, x=x)["x"]
    _refuse_unknown(caller, params)
    tau = _grid(caller, thresholds, bounds, grid_points,
                FEDERATED_GRID_LIMIT if protocol in _FEDERATED_ECDF else ECDF_GRID_LIMIT)
    eps = check_budget(epsilon, allow_inf=True)
    source = noise_source(noise, rng)
    records = _into_grid(as_float_array(values, "x"), tau)
    if protocol is None:
        _check_budget(budget, eps, ECDF_ADJACENCY)
        curve: PrivateECDF | FederatedECDF = dp_ecdf(records, tau, epsilon=eps, rng=rng,
                                                     noise=source, method=method)
        name = "dp-ecdf"
    elif protocol in _FEDERATED_ECDF:
        if math.isinf(eps):
            raise ValueError(f"{caller}(): protocol={protocol!r} is a private release; for "
                             "the exact ECDF pass epsilon=math.inf without a protocol")
        if isinstance(noise, NoiseSource) and not isinstance(noise, DeploymentNoise):
            raise ValueError(f"{caller}(): protocol={protocol!r} draws its own shares; "
                             "noise must be 'simulation' or 'deployment'")
        models = {entry.name: entry.model for entry in registry.available_curves()}
        _check_budget(budget, eps, ECDF_ADJACENCY, models[protocol])
        curve = _FEDERATED_ECDF[protocol](
            records, tau, epsilon=eps, rng=rng, method=method,
            randomness="os" if source is not None and source.kind == "deployment"
            else "simulation")
        name = protocol
    else:
        names = ", ".join(_FEDERATED_ECDF)
        raise ValueError(f"{caller}(): protocol must be None (the central release) or one of "
                         f"{names}, got {protocol!r}")
    _spend(budget, curve.privacy, f"ecdf ({name})")
    # A CDF is non-decreasing in [0, 1]: the released curve is projected there
    # (post-processing, never a larger L2 or sup error); the raw curve stays in
    # raw_values (release.values).
    return ECDFResult(tau, project_to_cdf(curve.values), int(records.size), name,
                      curve.privacy, curve.noise_kind, curve)


# ------------------------------------------------------------------ quantiles


def _alpha(confidence_level: float) -> float:
    return 1.0 - _check_level(confidence_level)


@functools.lru_cache(maxsize=16)
def _zero_curve(n: int, grid: tuple[float, ...], epsilon: float) -> PrivateECDF:
    """A release on zero counts: the same noise law as any other with this n, grid and
    eps (the law depends on nothing else), so its band's width is the release's."""
    return dp_ecdf_from_counts(np.zeros(len(grid), dtype=np.int64), n, np.asarray(grid),
                               epsilon=epsilon, rng=0)


def _level_error(method: str, levels: int, n: int, grid: np.ndarray, epsilon: float,
                 alpha: float) -> float:
    if math.isinf(epsilon):
        return 0.0
    if method == "exponential":
        beta = epsilon / levels / 2.0
        return math.log(len(grid) * levels / alpha) / beta / n
    if method == "continuous":
        return continuous_level_error(levels, n, len(grid), epsilon, alpha)
    if method != "curve":
        # The splits' errors add up along the recursion and, on tied data, a split at an
        # atom moves its children's targets by the atom's private size; JointExp's bound
        # is not derived here: no data-independent bound (NaN).
        return math.nan
    curve = _zero_curve(n, tuple(np.asarray(grid, dtype=np.float64).tolist()), epsilon)
    low, high = curve.confidence_band(1.0 - alpha, simultaneous=True)
    return float(np.max(high - low) / 2.0)


def level_error_bound(method: str, levels: int, n: int, grid: np.ndarray, epsilon: float,
                      confidence_level: float) -> float:
    """A data-independent ``delta``: with probability at least ``confidence_level`` every
    released grid point ``t_j`` holds ``F(t_j^-) < q_j + delta`` and ``F(t_j) > q_j - delta``,
    i.e. it is an exact (grid) quantile at some level within ``delta`` of ``q_j``.

    ``F`` is the data's ECDF and ``t^-`` the grid point below ``t`` (``F = 0`` there for the
    first point); data are inside the grid (the public functions clip them).

    * ``"exponential"``: permute-and-flip (McKenna and Sheldon 2020, Alg. 1) outputs
      candidate r only if r's own coin accepts, with probability
      ``exp(-beta (cost_r - cost_min))``, ``beta = eps / (2 m)`` (sensitivity 1, budget
      eps/m per level). So ``P(cost >= cost_min + d) <= N exp(-beta d)`` (the exponential
      mechanism's bound, Dwork and Roth 2014 Thm 3.11). The exact answer has cost
      ``<= 0``, and cost < d means ``C(t^-) < r - 1 + d`` and ``C(t) > r - d`` for the
      target rank ``r = ceil(q n)``: ``delta = d / n`` with ``d = ln(N m / alpha) / beta``
      (union bound over the m levels). Sorting the answers keeps every one inside its
      level's interval of grid points (their ends are non-decreasing in q).
    * ``"curve"``: Alg. 1 of 003 returns ``t`` with ``F_hat(t^-) < q <= F_hat(t)``; on the
      event that the whole-curve band ``|F_hat - F| <= h`` holds (probability
      ``confidence_level``, :meth:`PrivateECDF.confidence_band` with
      ``simultaneous=True``), ``delta = h`` for all levels at once. The band's width is a
      function of n, the grid and eps only.
    """
    return _level_error(method, levels, n, grid, epsilon, _alpha(confidence_level))


def _band_level_error(curve: Any, alpha: float) -> float:
    """``delta`` of :func:`level_error_bound`'s ``"curve"`` case read from ``curve``'s own
    whole-curve band (a federated curve's law is not the central curve's)."""
    low, high = curve.confidence_band(1.0 - alpha, simultaneous=True)
    return float(np.max(np.asarray(high) - np.asarray(low)) / 2.0)


def _rms_level_error(delta: Callable[[float], float]) -> float:
    """:func:`level_std_error_bound`'s quadrature for a bound ``delta(alpha)``."""
    alphas = np.logspace(-12, 0, 97)
    deltas = np.array([min(delta(a), 1.0) for a in alphas[:-1]])
    return math.sqrt(alphas[0] + float(np.sum(np.diff(alphas) * deltas**2)))


def level_std_error_bound(method: str, levels: int, n: int, grid: np.ndarray,
                          epsilon: float) -> float:
    """A bound on the root mean square of the level error ``X`` of one level.

    ``E X^2 = int_0^1 Q(1 - a)^2 da`` with ``Q`` the quantile function of ``X``, and
    ``Q(1 - a) <= min(delta(a), 1)`` (:func:`level_error_bound`; a level error is at most
    1). ``delta`` decreases in ``a``, so the sum over ``a_k`` (log-spaced from 1e-12, below
    which ``delta`` is replaced by 1) of ``(a_{k+1} - a_k) min(delta(a_k), 1)^2`` bounds it.
    """
    if math.isinf(epsilon):
        return 0.0
    if method not in ("exponential", "curve", "continuous"):
        return math.nan  # no data-independent bound (see level_error_bound)
    return _rms_level_error(lambda a: _level_error(method, levels, n, grid, epsilon, a))


def check_interval_share(caller: str, interval_share: Any) -> float:
    """The share of epsilon spent on the data-unit interval: a number in [0, 1) (0: none)."""
    if isinstance(interval_share, bool) or not isinstance(interval_share, int | float) \
            or not 0.0 <= interval_share < 1.0:
        raise ValueError(f"{caller}(): interval_share must be a number in [0, 1) (the share "
                         "of epsilon spent on an interval in the data's units; 0: none), "
                         f"got {interval_share!r}")
    return float(interval_share)


#: A quantile's ``std_error`` in the data's units is half the width of its interval at
#: this level, the probability of a normal law's ``mean +- 1 s.d.`` (erf(1/sqrt(2))).
STD_ERROR_LEVEL = 0.6826894921370859

#: What a release without private information around its quantile says when an interval in
#: the data's units is asked for.
NO_VALUE_INTERVAL = ("this private quantile was released without private information about "
                     "the data around it (its error bar is in levels: level_interval), so "
                     "the only interval in the data's units it can give is the public "
                     "range of the grid, which always covers and says nothing; for an "
                     "informative one pass interval_share=s (0 < s < 1) to "
                     "fedustat.quantile / fedustat.median, or read the quantile from a "
                     "private curve (method='curve' with thresholds) "
                     "(docs/protocols/quantiles.md)")


class PublicRangeIntervalWarning(UserWarning):
    """A quantile's interval in the data's units is the grid's whole public range (the
    release holds no private information around the quantile): valid, not informative."""


def _value_interval(curve: Any, levels: Any, grid: np.ndarray,
                    confidence_level: float) -> tuple[np.ndarray, np.ndarray]:
    """``[low, high]`` holding the exact quantile of every level at once with probability
    at least ``confidence_level``: ``curve``'s whole-curve band inverted at each level.

    As :func:`~fedustat.protocols.ecdf.quantiles.quantile_interval` (for any raw private
    curve with a band: a :class:`PrivateECDF` or a federated curve): inside a band
    ``|F_hat - F| <= a`` holding at every grid point at once, ``F_hat(t) + a < q`` gives
    ``x_q > t`` and ``F_hat(t) - a >= q`` gives ``x_q <= t``. So ``low`` is the largest
    grid point with ``F_hat + a < q`` and ``high`` the smallest with ``F_hat - a >= q``;
    the open ends close at the grid's ends (the records are clipped into the grid, so
    every quantile lies there). Post-processing of the curve only."""
    if isinstance(curve, PrivateECDF):
        low, high = quantile_interval(curve, levels, _check_level(confidence_level))
    else:
        tau = np.asarray(curve.thresholds, dtype=np.float64)
        q = np.atleast_1d(np.asarray(levels, dtype=np.float64))
        band_low, band_high = curve.confidence_band(_check_level(confidence_level),
                                                    simultaneous=True)
        idx = np.arange(tau.size)
        last_below = np.where(np.asarray(band_high)[None, :] < q[:, None], idx, -1).max(axis=1)
        first_above = np.where(np.asarray(band_low)[None, :] >= q[:, None], idx,
                               tau.size).min(axis=1)
        low = np.where(last_below >= 0, tau[np.maximum(last_below, 0)], -np.inf)
        high = np.where(first_above < tau.size, tau[np.minimum(first_above, tau.size - 1)],
                        np.inf)
        if np.ndim(levels) == 0:
            low, high = low[0], high[0]
    return (np.clip(low, grid[0], grid[-1]).astype(np.float64),
            np.clip(high, grid[0], grid[-1]).astype(np.float64))


def _reads_own_curve(method: str, interval_curve: Any, interval_share: float) -> bool:
    """Whether the points were read from :attr:`interval_curve` itself (method "curve",
    no budget of its own): the level error is then that curve's band."""
    return method == "curve" and interval_curve is not None and interval_share == 0.0


def _warn_public_range(stacklevel: int = 3) -> None:
    warnings.warn(NO_VALUE_INTERVAL, PublicRangeIntervalWarning, stacklevel=stacklevel)


def _interval_method(noise: str, interval_curve: Any, interval_share: float,
                     method: str) -> str:
    """How a quantile's interval in the data's units is made, in words."""
    if noise == "none":
        return "exact: the release is the quantile"
    if interval_curve is None:
        return ("the grid's public range (no private information around the quantile; "
                "interval_share buys an informative one)")
    source = (f"a private ECDF bought with interval_share={interval_share:g}"
              if interval_share > 0 else "the private curve the quantile was read from")
    return f"the whole-curve band of {source}, inverted at each level ({method})"


@dataclass(frozen=True, eq=False)
class QuantileEstimate(Estimate):
    """A private quantile: the :class:`~fedustat.protocols.base.Estimate` of one level.

    A number like any release (``float(med)``, arithmetic, ``statistics.mean``), with its
    error bars in the data's units: :meth:`confidence_interval` (and :meth:`value_interval`)
    covers the exact quantile of the records (clipped into the grid) with at least the
    stated probability, and ``std_error`` is half the width of that interval at
    :data:`STD_ERROR_LEVEL` (68.27%, a normal law's ``+- 1 s.d.``; a conservative scale,
    not a formula's standard deviation). Both are read from a private ECDF's whole-curve
    band, inverted at the level: the curve the quantile was read from (``method="curve"``,
    and the quantiles of federated or smoothed curves that ``fedustat.estimate`` releases)
    or one bought with ``interval_share=s`` (``s * epsilon``). A release made without
    either (the exponential and continuous mechanisms with ``interval_share=0``, the
    default) holds no private information around its quantile: its interval is the grid's
    whole public range, with a :class:`PublicRangeIntervalWarning` saying how to get an
    informative one, and ``std_error`` is None.

    The mechanism errs in rank: :meth:`level_interval` is the interval of levels ``q'``
    for which, with the stated probability, the release is an exact q'-quantile of the
    data on the grid (:func:`level_error_bound`), and :attr:`level_std_error` bounds the
    root mean square of that level error.

    Parameters
    ----------
    value, quantity, protocol, privacy, std_error, cost, diagnostics, error:
        The fields of :class:`~fedustat.protocols.base.Estimate`, as are ``noise``,
        ``clip_range`` and ``unclipped``; ``value`` is the released quantile.
    level:
        The level q in (0, 1].
    method:
        The mechanism (:data:`QUANTILE_METHODS`; with ``bounds`` the default is
        ``"continuous"``, whose level bound is
        :func:`~fedustat.protocols.ecdf.private_quantiles.continuous_level_error`).
    n:
        The number of records.
    grid:
        The public grid of candidates.
    levels_released:
        How many levels shared the budget (the level error grows with it).
    interval_share:
        The share of epsilon spent on the data-unit interval (0: none).
    interval_curve:
        The private ECDF the data-unit interval is read from: bought with
        ``interval_share``, or the curve the quantile was read from (then
        ``interval_share`` is 0); None without one.

    Examples
    --------
    >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
    >>> med = fedustat.median(x, epsilon=1.0, bounds=(0, 10), grid_points=101, rng=1)
    >>> round(float(med), 2), med.level, med.method, med.n, med.std_error
    (5.31, 0.5, 'continuous', 1000, None)
    >>> ranged = fedustat.median(x, epsilon=1.0, bounds=(0, 10), grid_points=101,
    ...                          interval_share=0.3, rng=1)
    >>> low, high = ranged.confidence_interval(0.95)
    >>> round(low, 2), round(high, 2), round(ranged.std_error, 2)
    (3.9, 6.6, 0.85)
    """

    #: Fields that depend on the data: the released grid point (everything else, the level
    #: error bar included, is a function of n, the grid and epsilon).
    released_fields: ClassVar[tuple[str, ...]] = ("value", "std_error",
                                                  "interval_curve.values")

    level: float = math.nan
    method: str = ""
    n: int = 0
    grid: tuple[float, ...] = field(default=(), repr=False)
    levels_released: int = 1
    interval_share: float = 0.0
    interval_curve: PrivateECDF | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.std_error is None and self.noise != "none" and self.interval_curve is not None:
            low, high = self.value_interval(STD_ERROR_LEVEL)
            object.__setattr__(self, "std_error", (high - low) / 2.0)

    def __str__(self) -> str:
        # The error bar is in levels (the value has none): print it where Estimate prints
        # its standard error.
        text = super().__str__()
        if self.noise == "none":
            return text
        low, high = self.level_interval(0.95)
        if math.isnan(low):
            return text
        head, sep, rest = text.partition(" [")
        values = ""
        if self.interval_curve is not None:
            value_low, value_high = self.value_interval(0.95)
            values = f", the exact quantile in [{value_low:.6g}, {value_high:.6g}] (95%)"
        return (f"{head}, an exact quantile of the data at a level in [{low:.3g}, "
                f"{high:.3g}] with 95% probability{values}{sep}{rest}")

    def level_error(self, confidence_level: float = 0.95) -> float:
        """The bound ``delta`` of :func:`level_error_bound` for this release.

        Parameters
        ----------
        confidence_level:
            The probability, in (0, 1), with which the bound holds.

        Returns
        -------
        float
            ``delta`` (0 for an exact release).

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> med = fedustat.median(x, epsilon=1.0, bounds=(0, 10), grid_points=101, rng=1)
        >>> round(med.level_error(0.95), 4)
        0.0429
        """
        if self.noise == "none":
            return 0.0
        if _reads_own_curve(self.method, self.interval_curve, self.interval_share):
            return _band_level_error(self.interval_curve, _alpha(confidence_level))
        return level_error_bound(self.method, self.levels_released, self.n, self.grid,
                                 self.point_epsilon, confidence_level)

    @property
    def point_epsilon(self) -> float:
        """The budget the point spent: ``(1 - interval_share) * epsilon``.

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> med = fedustat.median(x, epsilon=1.0, bounds=(0, 10), interval_share=0.25,
        ...                       rng=1)
        >>> med.privacy.epsilon, med.point_epsilon
        (1.0, 0.75)
        """
        return self.privacy.epsilon * (1.0 - self.interval_share)

    @property
    def level_std_error(self) -> float:
        """:func:`level_std_error_bound` for this release (0 for an exact one).

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> med = fedustat.median(x, epsilon=1.0, bounds=(0, 10), grid_points=101, rng=1)
        >>> round(med.level_std_error, 4)
        0.0393
        """
        if self.noise == "none":
            return 0.0
        if _reads_own_curve(self.method, self.interval_curve, self.interval_share):
            return _rms_level_error(partial(_band_level_error, self.interval_curve))
        return level_std_error_bound(self.method, self.levels_released, self.n, self.grid,
                                     self.point_epsilon)

    def level_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """``(q - delta, q + delta)`` within [0, 1]: the levels the release answers.

        Parameters
        ----------
        confidence_level:
            The coverage, in (0, 1).

        Returns
        -------
        ConfidenceInterval
            ``(low, high)`` levels; ``delta`` is :meth:`level_error`.

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> med = fedustat.median(x, epsilon=1.0, bounds=(0, 10), grid_points=101, rng=1)
        >>> low, high = med.level_interval(0.95)
        >>> round(low, 4), round(high, 4)
        (0.4571, 0.5429)
        """
        half = self.level_error(confidence_level)
        if math.isnan(half):  # a method without a data-independent bound
            return ConfidenceInterval(math.nan, math.nan)
        return ConfidenceInterval(max(0.0, self.level - half), min(1.0, self.level + half))

    def value_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """``(low, high)`` in the data's units holding the exact quantile of the records
        (clipped into the grid) with probability at least ``confidence_level``.

        Read from :attr:`interval_curve` (post-processing: asking at several levels
        costs nothing more); conservative, and at the grid's resolution (its ends are grid
        points). Without one this raises (:meth:`confidence_interval` then gives the
        public range).

        Parameters
        ----------
        confidence_level:
            The coverage, in (0, 1).

        Returns
        -------
        ConfidenceInterval
            ``(low, high)``; ``(value, value)`` for an exact release; ValueError for a
            private one without :attr:`interval_curve`.

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> med = fedustat.median(x, epsilon=1.0, bounds=(0, 10), grid_points=101,
        ...                       interval_share=0.3, rng=1)
        >>> low, high = med.value_interval(0.95)
        >>> round(low, 2), round(high, 2)
        (3.9, 6.6)
        """
        if self.noise == "none":
            return ConfidenceInterval(self.value, self.value)
        if self.interval_curve is None:
            raise ValueError(NO_VALUE_INTERVAL)
        low, high = _value_interval(self.interval_curve, self.level, np.asarray(self.grid),
                                    confidence_level)
        return ConfidenceInterval(float(low), float(high))

    def raw_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """The interval in the data's units (:meth:`confidence_interval` is this one):
        :meth:`value_interval` when the release has an :attr:`interval_curve`; otherwise
        the grid's public range ``(grid[0], grid[-1])``, which always holds the quantile,
        with a :class:`PublicRangeIntervalWarning` (never an error).

        Parameters
        ----------
        confidence_level:
            The coverage, in (0, 1) (the exact release's interval is a point).

        Returns
        -------
        ConfidenceInterval

        Examples
        --------
        >>> exact = fedustat.median([1, 2, 3, 4, 5], epsilon=math.inf, bounds=(0, 10),
        ...                         grid_points=11)
        >>> exact.raw_interval()
        ConfidenceInterval(low=3.0, high=3.0)
        >>> private = fedustat.median([1, 2, 3, 4, 5], epsilon=1.0, bounds=(0, 10),
        ...                           grid_points=11, rng=0)
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     private.confidence_interval()
        ConfidenceInterval(low=0.0, high=10.0)
        >>> caught[0].category.__name__
        'PublicRangeIntervalWarning'
        """
        _check_level(confidence_level)
        if self.noise == "none" or self.interval_curve is not None:
            return self.value_interval(confidence_level)
        _warn_public_range(4)  # the caller of confidence_interval, which calls this
        return ConfidenceInterval(float(self.grid[0]), float(self.grid[-1]))

    @property
    def interval_method(self) -> str:
        """How :meth:`confidence_interval` is made, in words.

        Examples
        --------
        >>> med = fedustat.median([1, 2, 3, 4, 5], epsilon=1.0, bounds=(0, 10), rng=0)
        >>> med.interval_method[:24]
        "the grid's public range "
        """
        return _interval_method(self.noise, self.interval_curve, self.interval_share,
                                self.method)

    def to_dict(self, confidence_level: float = 0.95) -> dict[str, Any]:
        """:meth:`Estimate.to_dict` with the level, method and level error bar.

        Parameters
        ----------
        confidence_level:
            Level of the intervals, in (0, 1).

        Returns
        -------
        dict
            :meth:`Estimate.to_dict`'s entries (``interval``: :meth:`confidence_interval`,
            in the data's units; the public range, without a warning, when the release
            has no :attr:`interval_curve`) plus ``level``, ``method``, ``n``,
            ``level_interval``, ``level_std_error`` and ``interval_share``.

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> med = fedustat.median(x, epsilon=1.0, bounds=(0, 10), grid_points=101, rng=1)
        >>> out = med.to_dict()
        >>> out["level"], out["method"], out["interval"]
        (0.5, 'continuous', [0.0, 10.0])
        >>> [round(v, 4) for v in out["level_interval"]]
        [0.4571, 0.5429]
        """
        with warnings.catch_warnings():  # interval_method says what the interval is
            warnings.simplefilter("ignore", PublicRangeIntervalWarning)
            base = super().to_dict(confidence_level)
        return {**base, "level": float(self.level),
                "method": self.method, "n": int(self.n),
                "level_interval": list(self.level_interval(confidence_level)),
                "level_std_error": self.level_std_error,
                "interval_share": float(self.interval_share)}


@dataclass(frozen=True, eq=False)  # arrays: compare fields, not results
class QuantilesResult(CurveRelease):
    """Private quantiles at several levels; behaves like the array of released values.

    ``len(res)``, ``res[i]``, ``res[1:]``, ``list(res)`` and ``np.asarray(res)`` are those
    of :attr:`quantiles` (``res[i]`` a NumPy float, as indexing an array gives). The error
    bars are in the data's units: :meth:`confidence_interval` covers every level's exact
    quantile at once (records clipped into the grid) with at least the stated
    probability, and ``std_error`` is half the width of each level's interval at
    :data:`STD_ERROR_LEVEL` (68.27%; a conservative scale). They are read from a private
    ECDF's whole-curve band inverted at each level (:attr:`interval_curve`: the curve the
    quantiles were read from, or one bought with ``interval_share``); without one the
    interval is the grid's public range (:class:`PublicRangeIntervalWarning`) and
    ``std_error`` NaN. The mechanism's own error bar, in levels, stays available:
    :meth:`level_interval` (``(q - delta, q + delta)`` for every level at once,
    :func:`level_error_bound`), :meth:`level_error` and :attr:`level_std_error`.

    Parameters
    ----------
    levels:
        The levels q, each in (0, 1].
    quantiles:
        The released quantile of each level.
    method:
        The mechanism (:data:`QUANTILE_METHODS`); the levels' bound is NaN for those
        without one (``"continuous-joint"``, the default with ``bounds``, and the splits).
    n:
        The number of records.
    privacy:
        The guarantee of the whole release (all levels).
    noise:
        ``"simulation"``, ``"deployment"`` or ``"none"``.
    grid:
        The public grid of candidates.
    interval_share:
        The share of epsilon spent on the data-unit interval (0: none).
    interval_curve:
        The private ECDF the data-unit intervals are read from: bought with
        ``interval_share``, or the curve the quantiles were read from (then
        ``interval_share`` is 0); None without one.
    protocol:
        The release's name (``"dp-quantile-<method>"``, or the curve release the
        quantiles were read from: ``"ecdf-secagg"``, ``"ecdf-fss"``,
        ``"dp-ecdf-smoothed"``).

    Examples
    --------
    >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
    >>> res = fedustat.quantile(x, [0.25, 0.5, 0.75], epsilon=1.0, bounds=(0, 10),
    ...                         grid_points=101, rng=1)
    >>> res.quantiles.round(2).tolist(), res.method, res.n
    ([2.74, 5.4, 7.65], 'continuous-joint', 1000)
    >>> len(res), round(float(res[1]), 2), [round(float(v), 2) for v in res[1:]]
    (3, 5.4, [5.4, 7.65])
    """

    released_fields: ClassVar[tuple[str, ...]] = ("quantiles", "interval_curve.values")
    public_fields: ClassVar[tuple[str, ...]] = ("levels", "method", "n", "interval_share",
                                                "protocol")

    levels: np.ndarray
    quantiles: np.ndarray
    method: str
    n: int
    privacy: PrivacyGuarantee
    noise: str
    grid: np.ndarray = field(repr=False)
    interval_share: float = 0.0
    interval_curve: PrivateECDF | FederatedECDF | None = field(default=None, repr=False)
    protocol: str = ""

    def __post_init__(self) -> None:
        if not self.protocol:
            object.__setattr__(self, "protocol", f"dp-quantile-{self.method}")

    # ------------------------------------------------ the array of released quantiles

    def __len__(self) -> int:
        return int(self.quantiles.size)

    def __getitem__(self, index: Any) -> Any:
        return self.quantiles[index]

    def __iter__(self) -> Iterator[np.float64]:
        return iter(self.quantiles)

    @property
    def point_epsilon(self) -> float:
        """The budget the points spent: ``(1 - interval_share) * epsilon``.

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> res = fedustat.quantile(x, [0.1, 0.9], epsilon=2.0, bounds=(0, 10),
        ...                         interval_share=0.5, rng=1)
        >>> res.privacy.epsilon, res.point_epsilon
        (2.0, 1.0)
        """
        return self.privacy.epsilon * (1.0 - self.interval_share)

    def value_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """``(low, high)`` arrays in the data's units holding every level's exact quantile
        (records clipped into the grid) at once, with probability at least
        ``confidence_level``; conservative, at the grid's resolution.

        Parameters
        ----------
        confidence_level:
            The coverage of all levels together, in (0, 1).

        Returns
        -------
        ConfidenceInterval
            Arrays, one entry per level; the released values twice for an exact release;
            ValueError for a private one without :attr:`interval_curve`
            (:meth:`confidence_interval` then gives the public range).

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> res = fedustat.quantile(x, [0.25, 0.5, 0.75], epsilon=1.0, bounds=(0, 10),
        ...                         grid_points=101, interval_share=0.3, rng=1)
        >>> low, high = res.value_interval(0.9)
        >>> low.round(2).tolist(), high.round(2).tolist()
        ([1.9, 4.0, 5.9], [4.1, 5.7, 8.1])
        """
        if self.noise == "none":
            return ConfidenceInterval(self.quantiles.copy(), self.quantiles.copy())
        if self.interval_curve is None:
            raise ValueError(NO_VALUE_INTERVAL)
        low, high = _value_interval(self.interval_curve, self.levels, self.grid,
                                    confidence_level)
        return ConfidenceInterval(low, high)

    def to_dict(self, confidence_level: float = 0.95) -> dict[str, Any]:
        """:meth:`CurveRelease.to_dict` (``std_error`` and ``interval`` in the data's
        units; the public range, without a warning, when there is no
        :attr:`interval_curve`) with ``interval_method``, the level error bar
        (``level_interval``, ``level_std_error``) and ``value_interval`` (the data-unit
        intervals, None without an :attr:`interval_curve`).

        Parameters
        ----------
        confidence_level:
            Level of the intervals, in (0, 1).

        Returns
        -------
        dict

        Examples
        --------
        >>> res = fedustat.quantile([1, 2, 3, 4, 5], [0.2, 0.6], epsilon=math.inf,
        ...                         bounds=(0, 10), grid_points=11)
        >>> out = res.to_dict()
        >>> out["interval"], out["value_interval"], out["protocol"]
        ([[1.0, 3.0], [1.0, 3.0]], [[1.0, 3.0], [1.0, 3.0]], 'dp-quantile-continuous-joint')
        """
        with warnings.catch_warnings():  # interval_method says what the interval is
            warnings.simplefilter("ignore", PublicRangeIntervalWarning)
            out = super().to_dict(confidence_level)
        value_interval: list[Any] | None = None
        if self.noise == "none" or self.interval_curve is not None:
            value_interval = out["interval"]
        level_low, level_high = self.level_interval(confidence_level)
        return {**out, "interval_method": self.interval_method,
                "level_interval": [_plain(np.asarray(level_low)),
                                   _plain(np.asarray(level_high))],
                "level_std_error": _plain(np.asarray(self.level_std_error)),
                "value_interval": value_interval}

    @property
    def interval_method(self) -> str:
        """How :meth:`confidence_interval` is made, in words.

        Examples
        --------
        >>> res = fedustat.quantile([1, 2, 3, 4, 5], [0.2, 0.6], epsilon=1.0,
        ...                         bounds=(0, 10), interval_share=0.5, rng=0)
        >>> res.interval_method.startswith('the whole-curve band of a private ECDF bought')
        True
        """
        return _interval_method(self.noise, self.interval_curve, self.interval_share,
                                self.method)

    @property
    def values(self) -> np.ndarray:
        """The released quantiles (``np.asarray(result)``), one per level.

        Examples
        --------
        >>> res = fedustat.quantile([1, 2, 3, 4, 5], [0.2, 0.6], epsilon=math.inf,
        ...                         bounds=(0, 10), grid_points=11)
        >>> res.values.tolist()
        [1.0, 3.0]
        """
        return self.quantiles

    def level_error(self, confidence_level: float = 0.95) -> float:
        """The bound ``delta`` of :func:`level_error_bound` (all levels at once).

        Parameters
        ----------
        confidence_level:
            The probability, in (0, 1), with which the bound holds for every level.

        Returns
        -------
        float
            ``delta`` (0 for an exact release).

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> res = fedustat.quantile(x, [0.25, 0.5, 0.75], epsilon=1.0, bounds=(0, 10),
        ...                         grid_points=101, method="exponential", rng=1)
        >>> round(res.level_error(0.95), 4)
        0.0523
        """
        if self.noise == "none":
            return 0.0
        if _reads_own_curve(self.method, self.interval_curve, self.interval_share):
            return _band_level_error(self.interval_curve, _alpha(confidence_level))
        return level_error_bound(self.method, self.levels.size, self.n, self.grid,
                                 self.point_epsilon, confidence_level)

    @property
    def std_error(self) -> np.ndarray:
        """Per level, half the width of its interval in the data's units at
        :data:`STD_ERROR_LEVEL` (68.27%; zeros for an exact release, NaN without an
        :attr:`interval_curve`). The level error's bound is :attr:`level_std_error`.

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> res = fedustat.quantile(x, [0.25, 0.5, 0.75], epsilon=1.0, bounds=(0, 10),
        ...                         grid_points=101, interval_share=0.3, rng=1)
        >>> res.std_error.round(2).tolist()
        [1.0, 0.7, 1.05]
        """
        if self.noise == "none":
            return np.zeros(self.levels.size)
        if self.interval_curve is None:
            return np.full(self.levels.size, math.nan)
        low, high = self.value_interval(STD_ERROR_LEVEL)
        return (high - low) / 2.0

    @property
    def level_std_error(self) -> np.ndarray:
        """A bound on the root mean square level error of each level
        (:func:`level_std_error_bound`; zeros for an exact release).

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> res = fedustat.quantile(x, [0.25, 0.5, 0.75], epsilon=1.0, bounds=(0, 10),
        ...                         grid_points=101, method="exponential", rng=1)
        >>> res.level_std_error.round(4).tolist()
        [0.0416, 0.0416, 0.0416]
        """
        if self.noise == "none":
            return np.zeros(self.levels.size)
        if _reads_own_curve(self.method, self.interval_curve, self.interval_share):
            return np.full(self.levels.size,
                           _rms_level_error(partial(_band_level_error, self.interval_curve)))
        return np.full(self.levels.size, level_std_error_bound(
            self.method, self.levels.size, self.n, self.grid, self.point_epsilon))

    def confidence_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """Intervals in the data's units holding every level's exact quantile at once.

        :meth:`value_interval` when the release has an :attr:`interval_curve`; otherwise
        the grid's public range for every level (always covers, says nothing) with a
        :class:`PublicRangeIntervalWarning`. The level intervals are
        :meth:`level_interval`.

        Parameters
        ----------
        confidence_level:
            The coverage, in (0, 1), of all levels together.

        Returns
        -------
        ConfidenceInterval
            ``(low, high)``: arrays, one entry per level.

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> res = fedustat.quantile(x, [0.25, 0.5, 0.75], epsilon=1.0,
        ...                         thresholds=np.linspace(0, 10, 101), method="curve",
        ...                         rng=1)
        >>> low, high = res.confidence_interval(0.9)
        >>> low.round(2).tolist(), high.round(2).tolist()
        ([2.3, 4.9, 7.3], [3.3, 5.7, 8.0])
        """
        _check_level(confidence_level)
        if self.noise == "none" or self.interval_curve is not None:
            return self.value_interval(confidence_level)
        _warn_public_range()
        return ConfidenceInterval(np.full(self.levels.size, float(self.grid[0])),
                                  np.full(self.levels.size, float(self.grid[-1])))

    def level_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """Level intervals ``(q - delta, q + delta)`` holding for all levels at once: the
        levels at which each released value is an exact quantile of the data on the grid.

        Parameters
        ----------
        confidence_level:
            The coverage, in (0, 1), of all levels together.

        Returns
        -------
        ConfidenceInterval
            ``(low, high)``: arrays of levels, clipped to [0, 1] (NaN for a mechanism
            without a data-independent bound).

        Examples
        --------
        >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
        >>> res = fedustat.quantile(x, [0.25, 0.5, 0.75], epsilon=1.0, bounds=(0, 10),
        ...                         grid_points=101, method="exponential", rng=1)
        >>> low, high = res.level_interval(0.9)
        >>> low.round(3).tolist(), high.round(3).tolist()
        ([0.202, 0.452, 0.702], [0.298, 0.548, 0.798])
        """
        half = self.level_error(confidence_level)
        return ConfidenceInterval(np.clip(self.levels - half, 0.0, 1.0),
                                  np.clip(self.levels + half, 0.0, 1.0))


@accepts_random_state
def quantile(x: Any, q: Any, *, epsilon: float, bounds: tuple[float, float] | None = None,
             thresholds: Any = None, grid_points: int = DEFAULT_GRID_POINTS,
             method: str = "auto", interval_share: float = 0.0, data: Any = None,
             rng: RandomLike = None, noise: str | NoiseSource | None = None,
             budget: BudgetAccountant | None = None,
             **params: Any) -> QuantileEstimate | QuantilesResult:
    """Private quantile(s) on a public grid; mirrors ``numpy.quantile(x, q,
    method="inverted_cdf")``.

    Parameters
    ----------
    x:
        One value per record: an array, a pandas/polars Series or a column name of ``data``.
    q:
        A level or a sequence of levels in (0, 1].
    epsilon:
        The total budget for all levels (> 0); ``math.inf`` gives the exact grid quantile
        ``min{t : F(t) >= q}``, numpy's ``inverted_cdf`` for data on the grid.
    bounds, thresholds, grid_points:
        The public range or candidates, as for :func:`ecdf` (values outside are clipped
        into them). Give ``thresholds`` for data that take few values (a tied value can
        then be answered exactly); with ``bounds`` the grid places the error bar's atoms.
    method:
        ``"auto"``
        (:func:`~fedustat.protocols.ecdf.private_quantiles.default_method`, public
        quantities only): with ``bounds``, ``"continuous"`` for one level (the
        exponential mechanism over the gaps between the records: any point of the
        bounds) and ``"continuous-joint"`` for several (JointExp on a 2^14-point grid of
        the bounds); with ``thresholds`` (the values the data take), ``"exponential"``
        (permute-and-flip per level at eps/m) or ``"curve"`` (invert the private ECDF,
        003 Alg. 1), the smaller predicted error. Any of :data:`QUANTILE_METHODS` by
        name (docs/protocols/quantiles.md).
    interval_share:
        The share ``s`` of ``epsilon`` spent on an interval in the data's units, in
        [0, 1). 0 (the default): none, the whole budget goes to the point and the error
        bar is in levels only. ``s > 0``: the point gets ``(1 - s) epsilon`` and a private
        ECDF on the grid ``s epsilon`` (basic composition: the guarantee is ``epsilon``
        for the whole), and ``value_interval(level)`` brackets the exact quantile of every
        level at once (conservatively, at the grid's resolution).
    data, rng, noise, budget:
        As for :func:`ecdf`.

    Returns
    -------
    QuantileEstimate or QuantilesResult
        A scalar ``q`` gives a :class:`QuantileEstimate` (an Estimate), a sequence a
        :class:`QuantilesResult` (a sequence of the values). Their
        ``confidence_interval`` is in the data's units when the release holds a private
        curve (``method="curve"`` or ``interval_share``), else the grid's public range
        with a warning; ``level_interval`` is the error bar in levels.

    Examples
    --------
    >>> import math
    >>> import fedustat
    >>> float(fedustat.quantile([1, 2, 3, 4, 5], 0.5, epsilon=math.inf, bounds=(0, 10),
    ...                         grid_points=11))
    3.0
    """
    return _quantile("fedustat.quantile", x, q, epsilon=epsilon, bounds=bounds,
                     thresholds=thresholds, grid_points=grid_points, method=method,
                     interval_share=interval_share, data=data, rng=rng, noise=noise,
                     budget=budget, params=params)


@accepts_random_state
def median(x: Any, *, epsilon: float, bounds: tuple[float, float] | None = None,
           thresholds: Any = None, grid_points: int = DEFAULT_GRID_POINTS,
           method: str = "auto", interval_share: float = 0.0, data: Any = None,
           rng: RandomLike = None, noise: str | NoiseSource | None = None,
           budget: BudgetAccountant | None = None, **params: Any) -> QuantileEstimate:
    """Private median: :func:`quantile` at level 0.5 (the lower median, numpy's
    ``inverted_cdf``); mirrors ``numpy.median``.

    Parameters
    ----------
    x, epsilon, bounds, thresholds, grid_points, method, interval_share, data, rng, noise, \
budget:
        As for :func:`quantile`.

    Returns
    -------
    QuantileEstimate

    Examples
    --------
    >>> import math
    >>> import fedustat
    >>> ages = [23, 35, 41, 52, 67, 30, 45]
    >>> med = fedustat.median(ages, epsilon=math.inf, bounds=(0, 100), grid_points=101)
    >>> float(med), med.level_interval()
    (41.0, ConfidenceInterval(low=0.5, high=0.5))
    """
    out = _quantile("fedustat.median", x, 0.5, epsilon=epsilon, bounds=bounds,
                    thresholds=thresholds, grid_points=grid_points, method=method,
                    interval_share=interval_share, data=data, rng=rng, noise=noise,
                    budget=budget, params=params)
    assert isinstance(out, QuantileEstimate)
    return out


def _quantile(caller: str, x: Any, q: Any, *, epsilon: float, bounds: Any, thresholds: Any,
              grid_points: int, method: str, data: Any, rng: RandomLike, noise: Any,
              budget: BudgetAccountant | None, params: dict[str, Any],
              levels_name: str = "q", interval_share: float = 0.0
              ) -> QuantileEstimate | QuantilesResult:
    values = column_inputs(caller, params, data, x=x)["x"]
    _refuse_unknown(caller, params)
    levels = check_levels(caller, q, levels_name)
    if thresholds is None and bounds is not None:  # before the grid is built
        check_quantile_size(levels.size, _grid_points(caller, grid_points),
                            levels_name=levels_name, grid_name="grid_points")
    tau = _grid(caller, thresholds, bounds, grid_points, QUANTILE_GRID_LIMIT)
    check_quantile_size(levels.size, tau.size, levels_name=levels_name)
    if method not in ("auto", *ALL_QUANTILE_METHODS):
        names = ", ".join(repr(name) for name in ("auto", *ALL_QUANTILE_METHODS))
        raise ValueError(f"{caller}(): method must be one of {names}, got {method!r}")
    eps = check_budget(epsilon, allow_inf=True)
    share = check_interval_share(caller, interval_share)
    source = noise_source(noise, rng)
    records = _into_grid(as_float_array(values, "x"), tau)
    if records.size == 0:
        raise ValueError(f"{caller}(): x is empty: a quantile needs at least one record")
    chosen = method
    if method == "auto":  # public: the levels, n, the grid's size, eps and bounds/thresholds
        chosen = default_method(np.atleast_1d(levels), records.size, tau.size, eps,
                                continuous=thresholds is None)
    _check_budget(budget, eps, ECDF_ADJACENCY)
    interval_curve = None
    if share > 0.0 and not math.isinf(eps):
        # One source for both parts, so that a seed gives two independent draws.
        shared = resolve_noise(rng, source)
        release = dp_quantiles(records, levels, epsilon=(1.0 - share) * eps, thresholds=tau,
                               method=chosen, noise=shared)
        # The interval's own release: the hierarchical ECDF on the same grid, whose
        # whole-curve band brackets every quantile at once (quantile_interval).
        interval_curve = dp_ecdf(records, tau, epsilon=share * eps, noise=shared)
        privacy = replace(basic_composition(release.privacy, interval_curve.privacy),
                          assumptions=release.privacy.assumptions)
    elif chosen == "curve" and not math.isinf(eps):
        # dp_quantiles' "curve" method (003 Alg. 1 on dp_ecdf: the smallest grid point
        # whose private CDF reaches q, the same draws for the same seed), run here to keep
        # the curve: its whole-curve band gives the interval in the data's units at no
        # further cost (post-processing).
        interval_curve = dp_ecdf(records, tau, epsilon=eps, noise=resolve_noise(rng, source))
        answers = np.asarray(dp_quantile(interval_curve, levels).upper, dtype=np.float64)
        privacy, noise_kind = interval_curve.privacy, interval_curve.noise_kind
    else:
        share = 0.0 if math.isinf(eps) else share  # an exact release is its own interval
        release = dp_quantiles(records, levels, epsilon=eps, thresholds=tau, method=chosen,
                               rng=rng, noise=source)
        privacy = release.privacy
    if chosen != "curve" or math.isinf(eps) or share > 0.0:
        answers, noise_kind = np.asarray(release.values, dtype=np.float64), release.noise_kind
    _spend(budget, privacy, f"{caller.removeprefix('fedustat.')} ({chosen})")
    return _quantile_result(levels, answers, chosen, int(records.size), privacy, noise_kind,
                            tau, share, interval_curve, f"dp-quantile-{chosen}")


def _quantile_result(levels: np.ndarray, answers: np.ndarray, method: str, n: int,
                     privacy: PrivacyGuarantee, noise_kind: str, grid: np.ndarray,
                     share: float, interval_curve: Any, protocol: str
                     ) -> QuantileEstimate | QuantilesResult:
    """A :class:`QuantileEstimate` for one level (a 0-d ``levels``), else a
    :class:`QuantilesResult`."""
    if levels.ndim == 0:
        level = float(levels)
        return QuantileEstimate(
            value=float(answers), quantity=f"quantile({level:g})", protocol=protocol,
            privacy=privacy, noise=noise_kind, level=level, method=method, n=n,
            grid=tuple(np.asarray(grid, dtype=np.float64).tolist()),
            diagnostics={"grid_points": int(np.size(grid))}, interval_share=share,
            interval_curve=interval_curve)
    return QuantilesResult(levels, np.asarray(answers, dtype=np.float64), method, n, privacy,
                           noise_kind, np.asarray(grid, dtype=np.float64), share,
                           interval_curve, protocol)


def curve_quantiles(curve: ECDFResult, q: Any, *, smoothed: SmoothedECDF | None = None
                    ) -> QuantileEstimate | QuantilesResult:
    """Quantiles read from a released ECDF: post-processing, no budget of its own.

    003 Alg. 1 (:func:`~fedustat.protocols.ecdf.dp_quantile`): the smallest grid point
    whose private CDF reaches q, as :func:`quantile` with ``method="curve"``. The result is
    :func:`quantile`'s: a :class:`QuantileEstimate` for one level, a
    :class:`QuantilesResult` for several, its interval in the data's units read from the
    curve's whole-curve band. ``smoothed``, a smoothed version of ``curve``'s raw release
    (:func:`~fedustat.protocols.ecdf.smooth`), is read instead of the raw curve; its
    interval stays the raw curve's band (valid whatever is read), and its level error has
    no data-independent bound (method ``"smoothed-curve"``, NaN).

    Parameters
    ----------
    curve:
        An :class:`ECDFResult` (central or federated: ``fedustat.ecdf``).
    q:
        A level or a sequence of levels in (0, 1].
    smoothed:
        Read this smoothed curve rather than the raw one (optional).

    Returns
    -------
    QuantileEstimate or QuantilesResult

    Examples
    --------
    >>> x = np.random.default_rng(0).uniform(0, 10, 1000)
    >>> res = fedustat.ecdf(x, epsilon=1.0, thresholds=np.linspace(0, 10, 101), rng=1)
    >>> med = fedustat.curves.curve_quantiles(res, 0.5)
    >>> round(float(med), 2), med.protocol, med.method
    (5.3, 'dp-ecdf', 'curve')
    """
    levels = check_levels("fedustat.curves.curve_quantiles", q)
    source = curve.release if smoothed is None else smoothed
    answers = np.asarray(dp_quantile(source, levels).upper, dtype=np.float64)
    method = "curve" if smoothed is None else "smoothed-curve"
    return _quantile_result(levels, answers, method, int(curve.n), curve.privacy,
                            curve.noise, curve.thresholds, 0.0, curve.release,
                            curve.protocol)


# ------------------------------------------------------------------ ROC curve


@dataclass(frozen=True, eq=False)  # arrays: compare fields, not results
class ROCCurveResult(CurveRelease):
    """A private ROC curve that unpacks like scikit-learn's: ``fpr, tpr, thresholds = res``.

    ``np.asarray(res)`` stacks the three rows. ``auc`` is the area's
    :class:`~fedustat.protocols.base.Estimate` (with its standard error); ``std_error``
    and :meth:`confidence_interval` are per point, rows (FPR, TPR), for the rates of the
    unsmoothed private curve at each threshold (``release.raw_fpr``, ``release.raw_tpr``;
    the band of :meth:`~fedustat.protocols.ecdf.DPROCCurve.fpr_band`). ``release`` is the
    protocol layer's :class:`~fedustat.protocols.ecdf.DPROCCurve`.

    Parameters
    ----------
    fpr, tpr:
        The released false and true positive rates, thresholds downwards, ending at (1, 1).
    thresholds:
        The grid's thresholds, downwards, then ``-inf`` (as scikit-learn's last point).
    n:
        The number of records.
    privacy:
        The guarantee the release carries.
    noise:
        ``"simulation"``, ``"deployment"`` or ``"none"``.
    release:
        The protocol layer's curve.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y = rng.integers(0, 2, 2000)
    >>> score = np.clip(rng.normal(0.4 + 0.2 * y, 0.15), 0, 1)
    >>> res = fedustat.roc_curve(y, score, epsilon=2.0, bounds=(0, 1), grid_points=5, rng=1)
    >>> fpr, tpr, thresholds = res
    >>> fpr.round(3).tolist(), tpr.round(3).tolist(), res.n
    ([0.0, 0.005, 0.227, 0.82, 0.995, 1.0], [0.0, 0.163, 0.737, 0.992, 1.0, 1.0], 2000)
    """

    released_fields: ClassVar[tuple[str, ...]] = (
        "fpr", "tpr", "thresholds", *(f"release.{f}" for f in DPROCCurve.released_fields))
    public_fields: ClassVar[tuple[str, ...]] = ("n",)

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray
    n: int
    privacy: PrivacyGuarantee
    noise: str
    release: DPROCCurve = field(repr=False)

    @property
    def values(self) -> np.ndarray:
        """Rows (FPR, TPR, thresholds) stacked (``np.asarray(result)``).

        Examples
        --------
        >>> res = fedustat.roc_curve([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], epsilon=math.inf,
        ...                          thresholds=[0.1, 0.35, 0.4, 0.8])
        >>> res.values.tolist()
        [[0.0, 0.0, 0.5, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0, 1.0], [0.8, 0.4, 0.35, 0.1, -inf]]
        """
        return np.vstack([self.fpr, self.tpr, self.thresholds])

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.fpr, self.tpr, self.thresholds))

    @property
    def auc(self) -> Estimate:
        """The estimate of the area under the exact ROC curve of the records on the grid.

        Estimated from the unsmoothed class curves without bias (not the area under the
        plotted isotonic curve, which is ``auc.diagnostics["curve_area"]``), with its
        standard error from the noise; ``value`` and ``confidence_interval()`` are clipped
        into [0, 1], ``raw_value`` and ``raw_interval()`` are not (docs/protocols/
        roc-curve.md).

        Examples
        --------
        >>> rng = np.random.default_rng(0)
        >>> y = rng.integers(0, 2, 2000)
        >>> score = np.clip(rng.normal(0.4 + 0.2 * y, 0.15), 0, 1)
        >>> res = fedustat.roc_curve(y, score, epsilon=2.0, bounds=(0, 1), grid_points=5, rng=1)
        >>> round(float(res.auc), 3), round(res.auc.std_error, 4)
        (0.792, 0.0017)
        """
        return self.release.auc

    @property
    def std_error(self) -> np.ndarray:
        """Rows (FPR, TPR): a first-order (delta-method) bound on the noise standard
        deviation of each rate ``1 - F_hat(t) / F_hat(tau_N)`` of the unsmoothed curve,
        ``(sd(t) + r sd(tau_N)) / F_hat(tau_N)`` (the covariance bounded by
        Cauchy-Schwarz), listed like ``raw_fpr``: thresholds downwards, then (1, 1).

        Examples
        --------
        >>> rng = np.random.default_rng(0)
        >>> y = rng.integers(0, 2, 2000)
        >>> score = np.clip(rng.normal(0.4 + 0.2 * y, 0.15), 0, 1)
        >>> res = fedustat.roc_curve(y, score, epsilon=2.0, bounds=(0, 1), grid_points=5, rng=1)
        >>> res.std_error.round(3).tolist()
        [[0.007, 0.006, 0.005, 0.003, 0.001, 0.0], [0.006, 0.005, 0.003, 0.002, 0.001, 0.0]]
        """
        return np.vstack([_rate_std_error(self.release.negatives),
                          _rate_std_error(self.release.positives)])

    def confidence_interval(self, confidence_level: float = 0.95, *,
                            simultaneous: bool = False) -> ConfidenceInterval:
        """Rows (FPR, TPR) of the bands for the exact rates at each threshold (003 Sec.
        5.1; :meth:`~fedustat.protocols.ecdf.DPROCCurve.tpr_band`).

        Parameters
        ----------
        confidence_level:
            The coverage, in (0, 1).
        simultaneous:
            Cover every threshold at once rather than each on its own.

        Returns
        -------
        ConfidenceInterval
            ``(low, high)``, each with rows (FPR, TPR).

        Examples
        --------
        >>> rng = np.random.default_rng(0)
        >>> y = rng.integers(0, 2, 2000)
        >>> score = np.clip(rng.normal(0.4 + 0.2 * y, 0.15), 0, 1)
        >>> res = fedustat.roc_curve(y, score, epsilon=2.0, bounds=(0, 1), grid_points=5, rng=1)
        >>> low, high = res.confidence_interval(0.9)
        >>> low[1].round(3).tolist(), high[1].round(3).tolist()
        ([0.0, 0.153, 0.729, 0.986, 0.994, 1.0], [0.012, 0.175, 0.745, 0.998, 1.0, 1.0])
        """
        level = _check_level(confidence_level)
        fpr_low, fpr_high = self.release.fpr_band(level, simultaneous=simultaneous)
        tpr_low, tpr_high = self.release.tpr_band(level, simultaneous=simultaneous)
        return ConfidenceInterval(np.vstack([fpr_low, tpr_low]),
                                  np.vstack([fpr_high, tpr_high]))


def _rate_std_error(curve: PrivateECDF) -> np.ndarray:
    """See :attr:`ROCCurveResult.std_error`."""
    sd = np.sqrt(curve.point_variances)[::-1]
    f = curve.values[::-1]
    # The release floors the normalizer at one record, 1/n (roc._roc_from_ecdfs), where
    # noise pushes it to or below 0; so does its error bar, which stays finite.
    top = max(float(curve.values[-1]), 1.0 / curve.n)
    ratio = np.clip(f / top, 0.0, 1.0)
    return np.concatenate([(sd + ratio * sd[0]) / top, [0.0]])


@accepts_random_state
def roc_curve(y_true: Any, y_score: Any, *, epsilon: float,
              bounds: tuple[float, float] | None = None, thresholds: Any = None,
              grid_points: int = ROC_GRID_POINTS, pos_label: Any = None,
              estimator: str | None = None,
              data: Any = None, rng: RandomLike = None,
              noise: str | NoiseSource | None = None, budget: BudgetAccountant | None = None,
              **params: Any) -> ROCCurveResult:
    """Private ROC curve on a public grid of thresholds; mirrors ``sklearn.metrics.roc_curve``.

    Parameters
    ----------
    y_true, y_score:
        Labels and scores as for :func:`fedustat.roc_auc_score` (``pos_label``, a
        ``predict_proba`` array, pandas/polars Series or column names of ``data``).
    epsilon:
        The total budget (> 0; eps/2 for each class's ECDF, 003 Sec. 5.1), or ``math.inf``
        for the exact curve on the grid.
    bounds, thresholds, grid_points:
        The public grid of score thresholds, as for :func:`ecdf` (scores outside are
        clipped into it).
    estimator:
        How the curve is fitted from the two private ECDFs (default ``"isotonic"``; see
        :func:`fedustat.protocols.ecdf.dp_roc_curve`).
    data, rng, noise, budget:
        As for :func:`ecdf`.

    Returns
    -------
    ROCCurveResult

    Examples
    --------
    >>> import math
    >>> import fedustat
    >>> fpr, tpr, thr = fedustat.roc_curve([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8],
    ...                                    epsilon=math.inf, thresholds=[0.1, 0.35, 0.4, 0.8])
    >>> [float(v) for v in fpr], [float(v) for v in tpr]
    ([0.0, 0.0, 0.5, 0.5, 1.0], [0.0, 0.5, 0.5, 1.0, 1.0])
    """
    caller = "fedustat.roc_curve"
    cols = column_inputs(caller, params, data, y_true=y_true, y_score=y_score)
    labels, column = binary_target(cols["y_true"], pos_label, caller)
    score = binary_score(cols["y_score"], column, len(np.unique(cols["y_true"])), caller)
    _refuse_unknown(caller, params)
    tau = _grid(caller, thresholds, bounds, grid_points, ROC_GRID_LIMIT)
    eps = check_budget(epsilon, allow_inf=True)
    source = noise_source(noise, rng)
    scores = _into_grid(as_float_array(score, "y_score"), tau)
    _check_budget(budget, eps, ROC_ADJACENCY)
    release = dp_roc_curve(labels, scores, epsilon=eps, thresholds=tau, estimator=estimator,
                           rng=rng, noise=source)
    _spend(budget, release.privacy, "roc_curve")
    return ROCCurveResult(release.fpr, release.tpr, release.thresholds, int(labels.size),
                          release.privacy, release.positives.noise_kind, release)


# ------------------------------------------------------------------ Hosmer-Lemeshow


@dataclass(frozen=True, eq=False)  # arrays: compare fields, not results
class HosmerLemeshowResult(CurveRelease):
    """A private Hosmer-Lemeshow test that unpacks like SciPy's results:
    ``statistic, pvalue = res``.

    ``np.asarray(res)`` is the released table, shape (2, 2, Q): ``[observed, expected]``,
    each with rows (label 0, label 1); ``std_error`` and :meth:`confidence_interval` are per
    cell, from its exact noise law ``Lap(1 / eps')`` (003 Alg. 2) around the exact cell on
    the released cuts. The statistic itself, a nonlinear function of the cells, has no
    interval. ``release`` is the protocol layer's result.

    With noise, the statistic is H with each group's variance increased by the known noise
    variance and the p-value comes from a parametric bootstrap of its null law under the
    DP noise (:func:`fedustat.protocols.ecdf.hosmer_lemeshow.bootstrap_pvalue`); with
    ``epsilon = inf`` they are the exact H and its chi-square p-value on ``df`` degrees of
    freedom.

    Parameters
    ----------
    statistic, pvalue:
        The released statistic and its p-value: valid under the DP noise (parametric
        bootstrap) for a private release, chi-squared with ``df`` degrees of freedom for
        ``epsilon = inf``.
    df:
        Degrees of freedom of the exact test, ``n_groups - 2``.
    n_groups:
        The number of risk groups Q.
    cuts:
        The released cut points between the groups.
    observed, expected:
        The released observed and expected counts, rows (label 0, label 1), one column per
        group.
    privacy:
        The guarantee the release carries.
    noise:
        ``"simulation"``, ``"deployment"`` or ``"none"``.
    release:
        The protocol layer's result.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.05, 0.95, 5000)
    >>> y = rng.uniform(size=5000) < p
    >>> res = fedustat.hosmer_lemeshow(y, p, epsilon=4.0, rng=1)
    >>> round(res.statistic, 2), round(res.pvalue, 2), res.df, res.cuts.round(2).tolist()
    (5.36, 0.86, 8, [0.13, 0.23, 0.33, 0.41, 0.51, 0.6, 0.69, 0.78, 0.86])
    """

    released_fields: ClassVar[tuple[str, ...]] = (
        "statistic", "pvalue", "cuts", "observed", "expected",
        *(f"release.{f}" for f in DPHosmerLemeshow.released_fields))
    public_fields: ClassVar[tuple[str, ...]] = ("df", "n_groups")

    statistic: float
    pvalue: float
    df: int
    n_groups: int
    cuts: np.ndarray
    observed: np.ndarray
    expected: np.ndarray
    privacy: PrivacyGuarantee
    noise: str
    release: DPHosmerLemeshow = field(repr=False)

    @property
    def values(self) -> np.ndarray:
        """The released table ``[observed, expected]``, shape (2, 2, Q).

        Examples
        --------
        >>> rng = np.random.default_rng(0)
        >>> p = rng.uniform(0.05, 0.95, 5000)
        >>> y = rng.uniform(size=5000) < p
        >>> res = fedustat.hosmer_lemeshow(y, p, epsilon=4.0, rng=1)
        >>> res.values.shape, res.values[:, :, 0].round(1).tolist()
        ((2, 2, 10), [[450.6, 34.6], [444.6, 39.9]])
        """
        return np.stack([self.observed, self.expected])

    def __iter__(self) -> Iterator[float]:
        return iter((self.statistic, self.pvalue))

    @property
    def std_error(self) -> np.ndarray:
        """The exact noise standard deviation of each released cell, shape (2, 2, Q).

        Examples
        --------
        >>> rng = np.random.default_rng(0)
        >>> p = rng.uniform(0.05, 0.95, 5000)
        >>> y = rng.uniform(size=5000) < p
        >>> res = fedustat.hosmer_lemeshow(y, p, epsilon=4.0, rng=1)
        >>> res.std_error.shape, round(float(res.std_error[0, 0, 0]), 3)
        ((2, 2, 10), 6.718)
        """
        return np.full(self.values.shape, self.release.cell_error.std)

    def confidence_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """Per cell: the released cell ± the half-width of ``Lap(1 / eps')``.

        Parameters
        ----------
        confidence_level:
            The coverage of each cell, in (0, 1).

        Returns
        -------
        ConfidenceInterval
            ``(low, high)``, arrays of shape (2, 2, Q) like :attr:`values`.

        Examples
        --------
        >>> rng = np.random.default_rng(0)
        >>> p = rng.uniform(0.05, 0.95, 5000)
        >>> y = rng.uniform(size=5000) < p
        >>> res = fedustat.hosmer_lemeshow(y, p, epsilon=4.0, rng=1)
        >>> low, high = res.confidence_interval(0.9)
        >>> low[0, :, 0].round(1).tolist(), high[0, :, 0].round(1).tolist()
        ([439.6, 23.6], [461.5, 45.5])
        """
        half = self.release.cell_error.half_width(_check_level(confidence_level))
        return ConfidenceInterval(self.values - half, self.values + half)


@accepts_random_state
def hosmer_lemeshow(y_true: Any, y_prob: Any, *, epsilon: float, n_groups: int = 10,
                    pos_label: Any = None, gamma: float = 2.0**-10, data: Any = None,
                    rng: RandomLike = None, noise: str | NoiseSource | None = None,
                    budget: BudgetAccountant | None = None,
                    **params: Any) -> HosmerLemeshowResult:
    """Private Hosmer-Lemeshow goodness-of-fit test (003 Sec. 5.2, Alg. 2, Thm 2).

    The p-value of a private release is valid under the DP noise: a parametric bootstrap
    of the noisy statistic's null law from the released table and the public noise law
    (:func:`fedustat.protocols.ecdf.hosmer_lemeshow.bootstrap_pvalue`; its own draws come
    from ``rng``). With ``epsilon = inf`` it is the exact test (chi-square, ``Q - 2``
    degrees of freedom).

    Parameters
    ----------
    y_true, y_prob:
        Labels and predicted probabilities of the positive class (in [0, 1]; a
        ``predict_proba`` array is read as for :func:`fedustat.roc_auc_score`), arrays,
        pandas/polars Series or column names of ``data``.
    epsilon:
        The total budget (> 0) or ``math.inf`` for the exact statistic with the exact cut
        points on the grid.
    n_groups:
        Number of risk groups Q (>= 3); the test has Q - 2 degrees of freedom.
    gamma:
        Grid spacing of the predictions' ECDF that the cut points come from.
    data, rng, noise, budget:
        As for :func:`ecdf`.

    Returns
    -------
    HosmerLemeshowResult

    Examples
    --------
    >>> import numpy as np
    >>> import fedustat
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(0.05, 0.95, 5000)
    >>> y = rng.uniform(size=5000) < p                  # a calibrated model
    >>> statistic, pvalue = fedustat.hosmer_lemeshow(y, p, epsilon=4.0, rng=1)
    >>> round(statistic, 2), round(pvalue, 2)
    (5.36, 0.86)
    """
    caller = "fedustat.hosmer_lemeshow"
    for grid_argument in ("thresholds", "bounds", "grid_points"):
        if grid_argument in params:
            raise TypeError(f"{caller}() takes no {grid_argument}=: the cut points come from "
                            "the predictions' private ECDF on the grid gamma, 2 gamma, ..., 1 "
                            "(003 Alg. 2); set its spacing with gamma= and the number of "
                            "groups with n_groups=")
    cols = column_inputs(caller, params, data, y_true=y_true, y_prob=y_prob)
    labels, column = binary_target(cols["y_true"], pos_label, caller)
    prob = binary_score(cols["y_prob"], column, len(np.unique(cols["y_true"])), caller,
                        name="y_prob")
    _refuse_unknown(caller, params)
    records = as_float_array(prob, "y_prob")  # empty or non-finite: refused by name first
    check_consistent_length(y_true=labels, y_prob=records)
    groups = check_positive_int(n_groups, "n_groups", minimum=1)
    if groups < 3:
        raise ValueError(f"{caller}(): n_groups must be at least 3 (the test has n_groups - 2 "
                         f"degrees of freedom; 10 is customary), got {groups}")
    spacing = check_grid_spacing(gamma, "gamma")
    check_groups(groups, int(labels.size), absolute_grid(spacing, 1.0, spacing).size,
                 "n_groups")
    eps = check_budget(epsilon, allow_inf=True)
    source = noise_source(noise, rng)
    _check_budget(budget, eps, HL_ADJACENCY)
    release = dp_hosmer_lemeshow(labels, prob, epsilon=eps, Q=groups, gamma=spacing, rng=rng,
                                 noise=source)
    _spend(budget, release.privacy, "hosmer_lemeshow")
    return HosmerLemeshowResult(float(release.statistic.value), release.pvalue, release.df,
                                int(release.observed.shape[1]), release.cuts,
                                release.observed, release.expected, release.privacy,
                                release.ecdf.noise_kind, release)


# ------------------------------------------------------------------ running sums


@dataclass(frozen=True, eq=False)  # arrays: compare fields, not results
class CumsumResult(CurveRelease):
    """Private running sums of a stream, like ``numpy.cumsum``: ``np.asarray(res)``.

    ``std_error`` and :meth:`confidence_interval` come from each sum's exact noise law,
    ``L + 1`` independent Laplace node noises (003 Thm 3), the same at every position.
    ``release`` is the protocol layer's
    :class:`~fedustat.protocols.ecdf.PrivatePrefixSums`.

    Parameters
    ----------
    sums:
        The released running sums, one per stream element.
    bounds:
        The public range of one element.
    privacy:
        The guarantee the release carries.
    noise:
        ``"simulation"``, ``"deployment"`` or ``"none"``.
    release:
        The protocol layer's release.

    Examples
    --------
    >>> res = fedustat.cumsum([1, 0, 1, 1, 0, 1, 1, 1], epsilon=1.0, rng=0)
    >>> res.sums.round(2).tolist(), res.bounds
    ([5.56, 3.69, 4.82, 4.0, 2.8, 5.32, -9.11, -7.36], (0.0, 1.0))
    """

    released_fields: ClassVar[tuple[str, ...]] = ("sums", "release.values")
    public_fields: ClassVar[tuple[str, ...]] = ("bounds",)

    sums: np.ndarray
    bounds: tuple[float, float]
    privacy: PrivacyGuarantee
    noise: str
    release: PrivatePrefixSums = field(repr=False)

    @property
    def values(self) -> np.ndarray:
        """The released running sums (``np.asarray(result)``).

        Examples
        --------
        >>> res = fedustat.cumsum([1, 0, 1, 1, 0, 1, 1, 1], epsilon=1.0, rng=0)
        >>> res.values.round(2).tolist()
        [5.56, 3.69, 4.82, 4.0, 2.8, 5.32, -9.11, -7.36]
        """
        return self.sums

    @property
    def std_error(self) -> np.ndarray:
        """The exact noise standard deviation of each sum (the same at every position).

        Examples
        --------
        >>> res = fedustat.cumsum([1, 0, 1, 1, 0, 1, 1, 1], epsilon=1.0, rng=0)
        >>> res.std_error.round(2).tolist()
        [5.66, 5.66, 5.66, 5.66, 5.66, 5.66, 5.66, 5.66]
        """
        return np.full(self.sums.size, math.sqrt(self.release.variance))

    def confidence_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """Pointwise: each sum ± the half-width of its exact noise law.

        Parameters
        ----------
        confidence_level:
            The coverage of each sum, in (0, 1).

        Returns
        -------
        ConfidenceInterval
            ``(low, high)``, arrays with one entry per sum.

        Examples
        --------
        >>> res = fedustat.cumsum([1, 0, 1, 1, 0, 1, 1, 1], epsilon=1.0, rng=0)
        >>> low, high = res.confidence_interval(0.9)
        >>> (high - low).round(2).tolist()
        [18.53, 18.53, 18.53, 18.53, 18.53, 18.53, 18.53, 18.53]
        """
        half = self.release.error.half_width(_check_level(confidence_level))
        return ConfidenceInterval(self.sums - half, self.sums + half)


@accepts_random_state
def cumsum(x: Any, *, epsilon: float, bounds: tuple[float, float] = (0.0, 1.0),
           data: Any = None, rng: RandomLike = None, noise: str | NoiseSource | None = None,
           budget: BudgetAccountant | None = None, **params: Any) -> CumsumResult:
    """Private running sums of a stream under continual observation (003 App. A.1,
    Thm 3); mirrors ``numpy.cumsum``.

    Parameters
    ----------
    x:
        The stream, one element per record in order (an array, a pandas/polars Series or a
        column name of ``data``); elements are clipped into ``bounds``.
    epsilon:
        The budget (> 0): Laplace tree noise of scale ``ceil((L + 1) / 2) (high - low) /
        epsilon`` per node. For the Gaussian (zCDP) variant use
        :func:`fedustat.protocols.ecdf.dp_prefix_sums`.
    bounds:
        Public range of one element (default [0, 1]: a 0/1 event stream).
    data, rng, noise, budget:
        As for :func:`ecdf`.

    Returns
    -------
    CumsumResult

    Examples
    --------
    >>> import fedustat
    >>> res = fedustat.cumsum([1, 0, 1, 1, 0, 1, 1, 1], epsilon=1.0, rng=0)
    >>> res.sums.shape, round(float(res.std_error[0]), 2)
    ((8,), 5.66)
    """
    caller = "fedustat.cumsum"
    stream = column_inputs(caller, params, data, x=x)["x"]
    _refuse_unknown(caller, params)
    low, high = _bounds(caller, bounds)
    eps = check_budget(epsilon)
    source = noise_source(noise, rng)
    values = np.clip(as_float_array(stream, "x"), low, high)
    adjacency = f"replace one stream element (values in [{low:g}, {high:g}])"
    _check_budget(budget, eps, adjacency)
    release = dp_prefix_sums(values, epsilon=eps, bounds=(low, high), rng=rng, noise=source)
    _spend(budget, release.privacy, "cumsum")
    return CumsumResult(release.values, (low, high), release.privacy,
                        source.kind if source is not None else "simulation", release)
