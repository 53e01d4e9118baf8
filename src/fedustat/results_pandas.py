"""A pandas column of releases: the ``.dp`` Series accessor.

``pd.Series(releases, dtype=float)`` already gives the released values (each
:class:`~fedustat.protocols.base.Estimate` converts with ``float``); the accessor gives the
rest of each release as columns: ``s.dp.value``, ``s.dp.std_error``,
``s.dp.confidence_interval(level)`` and ``s.dp.to_frame(level)``.

pandas stays optional: importing fedustat never imports it. :func:`install` (run by
``import fedustat``) registers the accessor at once when pandas is already imported, and
otherwise right after pandas' own import finishes (a one-shot import hook), so the accessor
is there whichever of the two a program imports first.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import math
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from fedustat.protocols.base import Estimate

__all__ = ["ReleaseSeriesAccessor", "install"]

#: The accessor's name: ``series.dp``.
ACCESSOR = "dp"

_registered = False


class ReleaseSeriesAccessor:
    """``series.dp``: the fields of a pandas Series of releases, as float columns.

    Every element must be an :class:`~fedustat.protocols.base.Estimate` (a column of
    releases, object dtype); the results keep the Series' index.

    Examples
    --------
    >>> import pandas as pd
    >>> releases = [fedustat.roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8],
    ...                                    epsilon=50.0, rng=seed) for seed in range(3)]
    >>> s = pd.Series(releases)
    >>> s.dp.value.round(3).tolist()
    [0.772, 0.755, 0.771]
    >>> s.dp.confidence_interval(0.9).columns.tolist()
    ['low', 'high']
    >>> pd.Series(releases, dtype=float).dtype
    dtype('float64')
    """

    def __init__(self, series: Any) -> None:
        bad = [i for i, item in enumerate(series.array) if not isinstance(item, Estimate)]
        if bad:
            first = series.array[bad[0]]
            raise AttributeError(
                f"the .dp accessor is for a Series of fedustat releases (Estimate objects); "
                f"element {bad[0]} is {type(first).__name__} {first!r:.60}: build the "
                "Series from releases only (pd.Series([est1, est2, ...]))")
        self._series = series

    def _column(self, values: Sequence[float], name: str) -> Any:
        import pandas as pd

        return pd.Series(list(values), index=self._series.index, dtype="float64",
                         name=name)

    @property
    def value(self) -> Any:
        """The released values, a float64 Series (``series.astype(float)``)."""
        return self._column([float(est) for est in self._series.array], "value")

    @property
    def std_error(self) -> Any:
        """Each release's standard error, a float64 Series (NaN where none is known)."""
        return self._column([math.nan if est.std_error is None else float(est.std_error)
                             for est in self._series.array], "std_error")

    def confidence_interval(self, confidence_level: float = 0.95) -> Any:
        """Each release's :meth:`~fedustat.protocols.base.Estimate.confidence_interval`,
        a DataFrame with float columns ``low`` and ``high`` (NaN where none is known).

        Parameters
        ----------
        confidence_level:
            The coverage of each interval, in (0, 1).

        Returns
        -------
        pandas.DataFrame
        """
        import pandas as pd

        if isinstance(confidence_level, bool) or not isinstance(confidence_level, int | float) \
                or not 0.0 < confidence_level < 1.0:
            raise ValueError(f"confidence_level must be a number in (0, 1), got "
                             f"{confidence_level!r}")
        lows, highs = [], []
        for est in self._series.array:
            try:
                low, high = est.confidence_interval(confidence_level)
            except ValueError:  # a release without an error bar
                low = high = math.nan
            lows.append(float(low))
            highs.append(float(high))
        return pd.DataFrame({"low": lows, "high": highs}, index=self._series.index,
                            dtype="float64")

    def to_frame(self, confidence_level: float = 0.95) -> Any:
        """One row per release: ``value``, ``std_error``, ``low``, ``high`` (floats),
        ``quantity``, ``protocol``, ``epsilon``, ``delta`` and ``noise``.

        Parameters
        ----------
        confidence_level:
            The coverage of the intervals, in (0, 1).

        Returns
        -------
        pandas.DataFrame
        """
        frame = self.confidence_interval(confidence_level)
        frame.insert(0, "value", self.value)
        frame.insert(1, "std_error", self.std_error)
        releases = self._series.array
        frame["quantity"] = [est.quantity for est in releases]
        frame["protocol"] = [est.protocol for est in releases]
        frame["epsilon"] = [float(est.privacy.epsilon) for est in releases]
        frame["delta"] = [float(est.privacy.delta) for est in releases]
        frame["noise"] = [est.noise for est in releases]
        return frame


def register(pandas: ModuleType | None = None) -> None:
    """Register :class:`ReleaseSeriesAccessor` as ``pandas.Series.dp`` (once)."""
    global _registered
    if _registered:
        return
    module = pandas if pandas is not None else sys.modules["pandas"]
    module.api.extensions.register_series_accessor(ACCESSOR)(ReleaseSeriesAccessor)
    _registered = True


class _RegisterAfterPandas(importlib.abc.MetaPathFinder):
    """A one-shot finder: on the first ``import pandas`` it steps aside, lets the real
    finders locate pandas, and registers the accessor once pandas' module has run."""

    def find_spec(self, fullname: str, path: Any, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "pandas":
            return None
        _uninstall_hook()
        spec = importlib.util.find_spec("pandas")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        run_module = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run_module(module)
            register(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


_HOOK = _RegisterAfterPandas()


def _uninstall_hook() -> None:
    if _HOOK in sys.meta_path:
        sys.meta_path.remove(_HOOK)


def install() -> None:
    """Make ``Series.dp`` available: now if pandas is imported, else after its import
    (nothing happens, and nothing is imported, when pandas is not installed)."""
    if _registered:
        return
    if "pandas" in sys.modules:
        register()
    elif _HOOK not in sys.meta_path and importlib.util.find_spec("pandas") is not None:
        sys.meta_path.insert(0, _HOOK)
