"""``fedustat compare``: every applicable protocol side by side on one real data set.

For each statistic (AUC, Kendall's tau, Gini mean difference, duplicate-pair ratio,
ECDF, quantiles, ROC curve), every protocol the advisor (:mod:`fedustat.advisor`) lists
for it is run over a grid of epsilon with repetitions, each with the parameters the
advisor chose (so the predicted error belongs to exactly the run measured). One table
per statistic gives the exact value, the mean estimate, the RMSE against the exact value
of the data, the advisor's predicted RMSE, the coverage of the 95% confidence interval,
the privacy model and (epsilon, delta), bits per party and wall time;
:func:`write_report` adds error-vs-epsilon figures and a self-contained Markdown report
(:mod:`fedustat.report`).

Default data (all offline, shipped inside scikit-learn): the largest real table that
fits each statistic. scikit-learn's handwritten digits (1,797 images) give a categorical
column (the digit, 10 public categories), a bounded count (ink: the sum of the 64 pixel
intensities, public bounds [0, 1024] since each pixel is 0..16) and, for AUC and ROC,
held-out scores of a logistic regression separating digits 0-4 from 5-9 (899 test
images, classes 448 / 451). Kendall's tau uses the diabetes data (bmi, progression;
442 patients), the natural real pair available offline. Other bundled data sets and
CSV/Parquet files can be given instead.
"""

from __future__ import annotations

import inspect
import json
import math
import os
import sys
import textwrap
import time
import warnings
import zlib
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedustat import catalogue, datasets
from fedustat._validation import check_delta, check_epsilon, check_positive_int
from fedustat.advisor import (
    APPROX,
    BOUND,
    CURVE_RELEASES,
    EXACT,
    NO_PREDICTION,
    PARTIAL,
    STATISTICS,
    Advice,
    Prediction,
    advise,
    format_table,
    predicted_statistics,
)
from fedustat.api import estimate
from fedustat.catalogue import PUBLIC_BOUNDS, PUBLIC_VALUES
from fedustat.comparison_summary import summarize, summary_rows
from fedustat.datasets.bundled import Dataset
from fedustat.plotting import fit_axis, protocol_style, series_style
from fedustat.protocols import registry
from fedustat.protocols.ecdf import (
    dp_ecdf,
    dp_hosmer_lemeshow,
    dp_quantile,
    dp_roc_curve,
    roc_curve_on_grid,
    roc_l1_distance,
)
from fedustat.protocols.ecdf.private_quantiles import (
    DEFAULT_GRID_POINTS as LIBRARY_GRID_POINTS,
)
from fedustat.protocols.ecdf.smoothing import smooth
from fedustat.report import MarkdownReport
from fedustat.stats.ecdf import ecdf as exact_ecdf
from fedustat.stats.kernels import Kernel

__all__ = [
    "COMPARED_STATISTICS",
    "DEFAULT_DELTA",
    "DEFAULT_EPSILONS",
    "DEFAULT_GRID_POINTS",
    "DEFAULT_PRESET",
    "DEFAULT_REPETITIONS",
    "PRESETS",
    "PUBLIC_BOUNDS",
    "PUBLIC_VALUES",
    "ComparisonResult",
    "Preset",
    "RunRow",
    "available_data",
    "level_errors",
    "load_data",
    "run_comparison",
    "write_report",
]

DEFAULT_EPSILONS = (0.5, 1.0, 2.0, 4.0)
#: The library's defaults, read from where they are defined (never restated here): the
#: delta of :func:`fedustat.estimate` (0: protocols that need delta > 0 are listed under
#: "Not run" unless a delta is given) and the grid of the curve functions
#: (:func:`fedustat.ecdf`, :func:`fedustat.roc_curve`, ...).
DEFAULT_DELTA: float = inspect.signature(estimate).parameters["delta"].default
DEFAULT_GRID_POINTS: int = LIBRARY_GRID_POINTS


@dataclass(frozen=True)
class Preset:
    """How many repetitions a (statistic, protocol, epsilon) cell gets, and on which grid.

    The sequential stopping rule: a cell runs ``min_repetitions`` repetitions, then more
    in steps of :data:`REPETITION_STEP` until the Monte Carlo standard error of its RMSE
    is at most ``target`` times the RMSE, or ``max_repetitions`` are done. A cell that
    stops at the maximum above the target is reported as needing ``--full``.
    """

    name: str
    min_repetitions: int
    max_repetitions: int
    target: float  # relative Monte Carlo standard error of the RMSE at which a cell stops
    grid_points: int  # thresholds of the ECDF and ROC grids

    def describe(self) -> str:
        return (f"{self.name}: {self.min_repetitions}-{self.max_repetitions} repetitions per "
                f"cell, stopping once the RMSE's Monte Carlo s.e. is <= "
                f"{100 * self.target:g}% of it; grid of {self.grid_points} thresholds")


#: Repetitions added at a time once a cell's first ``min_repetitions`` are in.
REPETITION_STEP = 5
PRESETS: dict[str, Preset] = {
    # quick: a first look; a coarser curve grid than the library's (said in the report).
    "quick": Preset("quick", 5, 10, 0.30, 256),
    "default": Preset("default", 10, 50, 0.20, DEFAULT_GRID_POINTS),
    "full": Preset("full", 50, 400, 0.05, DEFAULT_GRID_POINTS),
}
DEFAULT_PRESET = "default"
DEFAULT_REPETITIONS = PRESETS[DEFAULT_PRESET].max_repetitions
QUANTILE_LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9)
#: The statistics compared when none are named: those the advisor predicts an error for
#: (``fedustat compare`` takes every statistic of :mod:`fedustat.catalogue` by name).
COMPARED_STATISTICS = tuple(predicted_statistics())

_KIND_CODE = {EXACT: "exact", BOUND: "bound", PARTIAL: "bound*", APPROX: "approx",
              NO_PREDICTION: "none"}
_METRIC: dict[str, str] = {
    "auc": "error of the released AUC against the exact AUC of the data",
    "mann-whitney": "error of the released Mann-Whitney U against its exact value",
    "kendall": "error of the released tau-a against the exact tau-a of the data",
    "kendall-b": "error of the released tau-b against the exact tau-b of the data",
    "gini": "error of the released Gini mean difference against its exact value",
    "variance": "error of the released sample variance against its exact value",
    "duplicate": "error of the released duplicate-pair ratio against its exact value",
    "renyi2": "error of the released Renyi-2 entropy against its exact value",
    "rand": "error of the released Rand index against its exact value",
    "vus": "error of the released volume under the ROC surface against its exact value",
    "ecdf": ("error of the released ECDF at each grid threshold (pooled over thresholds "
             "and repetitions); exact / mean columns: the curve at the exact median"),
    "quantile": ("level error of the released quantiles, pooled over "
                 f"q = {', '.join(f'{q:g}' for q in QUANTILE_LEVELS)}: the distance from q "
                 "to the levels (F(t^-), F(t)] at which the release t is an exact quantile "
                 "of the data on the grid (t^- the grid point below t; 0 for the exact grid "
                 "quantile); exact / mean columns: the median in the data's units; median "
                 "RMSE in those units"),
    "median": ("level error of the released median: the distance from 0.5 to the levels "
               "(F(t^-), F(t)] at which the release t is an exact quantile of the data on "
               "the grid; exact / mean columns: the median in the data's units; median RMSE "
               "in those units"),
    "hl": "error of the released Hosmer-Lemeshow statistic H against its exact value",
    "roc": ("error of the released TPR and FPR at each grid threshold (pooled); exact / "
            "mean columns: the area under the curve; L1: 003 Sec. 6.5's area between the "
            "released and the exact curve (smoothed curves only)"),
}


# --------------------------------------------------------------------------- data


def available_data() -> list[str]:
    """Data sets ``compare`` can load by name (the bundled ones)."""
    return datasets.available()


def load_data(name: str) -> Dataset:
    """Load a bundled data set by name."""
    return datasets.load(name)


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One statistic on one data set, with the public description of its columns."""

    statistic: str
    source: str  # "<data set>:<col>,<col>" or "<file>:<col>,..."
    arrays: tuple[np.ndarray, ...]
    bounds: Mapping[str, tuple[float, float]]  # by kernel column
    values: Mapping[str, list[float]]  # by kernel column
    grid: np.ndarray | None = None  # thresholds of the curve statistics

    @property
    def n(self) -> int:
        return int(self.arrays[0].size)


def _kernel(case: Case) -> Kernel | None:
    stat = catalogue.get(case.statistic)
    if stat.kind == "curve":
        return None
    return stat.kernel(case.bounds.get(stat.value_column) if stat.needs_bounds else None)


def _two_classes(statistic: str) -> bool:
    """A binary public label as the last column (auc, roc, hl)."""
    return catalogue.get(statistic).columns[-1] == "label"


def _public_column(statistic: str) -> str | None:
    """The column of public labels or classes (never quantized nor bounded), or None."""
    stat = catalogue.get(statistic)
    return stat.columns[-1] if stat.labelled else None


def _pair(value: Any, what: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a pair (lo, hi) of numbers, got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"{what} must be finite with lo < hi, got {value!r}")
    return lo, hi


def _build_case(statistic: str, *, data: str | None, file: str | None,
                columns: Sequence[str] | None, bounds: Any,
                column_bounds: Mapping[str, Any] | None,
                column_values: Mapping[str, Sequence[float]] | None,
                grid_points: int) -> Case:
    stat = catalogue.get(statistic)
    kcols = stat.columns
    if file is not None:
        if not columns:
            raise ValueError(f"file needs columns naming the file's columns for {statistic} "
                             f"(in order: {', '.join(kcols)})")
        table = datasets.read_table(file, columns=list(columns))
        arrays = [np.asarray(table[c], dtype=np.float64) for c in columns]
        source = f"{file}:{','.join(columns)}"
        name = None
    else:
        default_name, default_cols = stat.study_data, stat.study_columns
        name = data or default_name
        ds = load_data(name)
        if columns is None:
            # Another data set with the same column names (e.g. score, label) needs none.
            if not all(c in ds for c in default_cols):
                raise ValueError(f"data {name!r} has no columns {', '.join(default_cols)}; "
                                 f"give columns for {statistic} (in order: {', '.join(kcols)})")
            columns = default_cols
        try:
            arrays = [np.asarray(ds[c], dtype=np.float64) for c in columns]
        except KeyError as exc:
            raise ValueError(exc.args[0]) from None
        source = f"{name}:{','.join(columns)}"
    if len(arrays) != len(kcols):
        raise ValueError(f"{statistic} needs {len(kcols)} column(s) ({', '.join(kcols)}), "
                         f"got {len(arrays)}")
    # Public description: the bundled tables' declared bounds/values, then overrides.
    bnds: dict[str, tuple[float, float]] = {}
    vals: dict[str, list[float]] = {}
    if name is not None:
        for kc, c in zip(kcols, columns, strict=True):
            if c in PUBLIC_BOUNDS.get(name, {}):
                bnds[kc] = PUBLIC_BOUNDS[name][c]
            if c in PUBLIC_VALUES.get(name, {}):
                vals[kc] = list(PUBLIC_VALUES[name][c])
    if bounds is not None:
        continuous = [c for c in kcols if c != _public_column(statistic)]
        if len(continuous) != 1:
            raise ValueError(f"bounds applies to statistics of one continuous column; give "
                             f"column_bounds for {statistic}'s columns {list(kcols)}")
        bnds[continuous[0]] = _pair(bounds, "bounds")
        vals.pop(continuous[0], None)
    for c, b in (column_bounds or {}).items():
        if c not in kcols:
            raise ValueError(f"column_bounds names {c!r}; {statistic}'s columns are "
                             f"{list(kcols)}")
        bnds[c] = _pair(b, f"column_bounds[{c!r}]")
        vals.pop(c, None)
    for c, v in (column_values or {}).items():
        if c not in kcols:
            raise ValueError(f"column_values names {c!r}; {statistic}'s columns are "
                             f"{list(kcols)}")
        vals[c] = sorted(float(x) for x in v)
        bnds.pop(c, None)
    if _two_classes(statistic):
        vals.setdefault("label", [0.0, 1.0])
    for c, (lo, hi) in bnds.items():
        col = arrays[kcols.index(c)]
        if col.size and (col.min() < lo or col.max() > hi):
            raise ValueError(f"column {c!r} of {source} has values outside its public bounds "
                             f"[{lo:g}, {hi:g}]")
    for c, v in vals.items():
        col = arrays[kcols.index(c)]
        if not np.all(np.isin(col, v)):
            raise ValueError(f"column {c!r} of {source} has values outside its declared "
                             f"values {v[:10]}")
    if (stat.needs_bounds or (stat.kind == "curve" and not stat.labelled)) \
            and "x" not in bnds:
        raise ValueError(f"{statistic} needs public bounds of the values (bounds=(lo, hi)); "
                         "taking them from the data would leak it")
    if statistic == "duplicate" and "x" not in vals:
        raise ValueError("duplicate needs the public list of categories (column_values "
                         "{'x': [...]})")
    grid = None
    if stat.kind == "curve":
        key = stat.value_column
        if key not in bnds:
            raise ValueError(f"{statistic} needs public bounds of the {key} column for its "
                             "threshold grid")
        lo, hi = bnds[key]
        grid = np.linspace(lo, hi, grid_points)
    return Case(statistic, source, tuple(arrays), bnds, vals, grid)


# --------------------------------------------------------------------------- runs


@dataclass(frozen=True)
class RunRow:
    """The outcome of one protocol at one epsilon over the repetitions."""

    statistic: str
    protocol: str
    epsilon: float
    delta: float
    model: str
    exact: float | None
    mean_estimate: float | None
    rmse: float
    predicted_rmse: float
    prediction_kind: str
    coverage: float | None
    bits_per_party: float | None
    seconds_per_run: float
    repetitions: int
    failed: int = 0
    extra: Mapping[str, float] = field(default_factory=dict)
    note: str = ""
    #: Monte Carlo standard error of ``rmse`` (delta method on the repetitions' squared
    #: errors) and of ``coverage`` (binomial); nan when not estimable.
    rmse_mc_se: float = math.nan
    coverage_mc_se: float = math.nan
    #: Whether the stopping rule's target was met (False: more repetitions, ``--full``).
    resolved: bool = True

    @property
    def rmse_mc_relative(self) -> float:
        """The RMSE's Monte Carlo standard error as a share of it."""
        if not math.isfinite(self.rmse_mc_se) or not self.rmse > 0:
            return math.nan
        return self.rmse_mc_se / self.rmse

    @property
    def ratio(self) -> float:
        """Measured RMSE / predicted RMSE."""
        if not (math.isfinite(self.rmse) and math.isfinite(self.predicted_rmse)) \
                or self.predicted_rmse == 0:
            return math.nan
        return self.rmse / self.predicted_rmse

    def to_dict(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "protocol": self.protocol,
                "epsilon": self.epsilon, "delta": self.delta, "model": self.model,
                "exact": self.exact, "mean_estimate": self.mean_estimate, "rmse": self.rmse,
                "predicted_rmse": self.predicted_rmse,
                "prediction_kind": self.prediction_kind, "rmse_over_predicted": self.ratio,
                "ci95_coverage": self.coverage, "bits_per_party": self.bits_per_party,
                "seconds_per_run": self.seconds_per_run, "repetitions": self.repetitions,
                "failed": self.failed, **{f"extra_{k}": v for k, v in self.extra.items()},
                "rmse_mc_se": self.rmse_mc_se, "ci95_coverage_mc_se": self.coverage_mc_se,
                "resolved": self.resolved, "note": self.note}


@dataclass
class ComparisonResult:
    """Rows of a comparison, the cases they ran on and the advisor's answers."""

    rows: list[RunRow]
    cases: dict[str, Case]
    advice: dict[tuple[str, float], Advice]
    settings: dict[str, Any]
    wall_time: float
    skipped: list[str] = field(default_factory=list)
    report_path: Path | None = None

    @property
    def statistics(self) -> list[str]:
        return list(self.cases)

    def rows_for(self, statistic: str) -> list[RunRow]:
        """The statistic's rows, grouped by protocol (in the order they first ran) and
        sorted by epsilon within a protocol."""
        mine = [r for r in self.rows if r.statistic == statistic]
        order = {name: i for i, name in enumerate(dict.fromkeys(r.protocol for r in mine))}
        return sorted(mine, key=lambda r: (order[r.protocol], r.epsilon))

    def header(self, statistic: str) -> str:
        case = self.cases[statistic]
        sizes = f"n={case.n}"
        if _two_classes(statistic):
            n_pos = int(np.sum(case.arrays[1] == 1))
            sizes += f"; n+={n_pos}, n-={case.n - n_pos}"
        grid = ""
        if case.grid is not None:
            grid = f"; grid of {case.grid.size} thresholds"
            if case.grid.size < self.settings.get("library_grid_points", case.grid.size):
                grid += (f" (coarser than the library's default "
                         f"{self.settings['library_grid_points']}, for speed)")
        return (f"{statistic.upper()} ({STATISTICS[statistic]}) on {case.source} "
                f"({sizes}{grid}); {self.repetitions_text()}. "
                f"Metric: {_METRIC[statistic]}.")

    def repetitions_text(self) -> str:
        """How many repetitions each row had, and the rule that chose them."""
        s = self.settings
        lo, hi = s.get("min_repetitions", s["repetitions"]), s["repetitions"]
        if lo == hi:
            return f"{hi} repetitions per row"
        return (f"{lo}-{hi} repetitions per row (column reps): a row stops once its RMSE's "
                f"Monte Carlo s.e. is at most {100 * s['target']:g}% of the RMSE")

    def unresolved(self) -> list[RunRow]:
        """Rows whose RMSE's Monte Carlo error is above the stopping rule's target after
        the preset's largest number of repetitions: those need ``--full``."""
        return [r for r in self.rows if not r.resolved]

    def table_rows(self, statistic: str) -> tuple[list[str], list[list[str]]]:
        headers = ["protocol", "model", "eps", "delta", "exact", "mean est.", "RMSE",
                   "MC s.e.", "reps", "pred. RMSE", "kind", "RMSE/pred", "CI95 cover",
                   "bits/party", "ms/run"]
        extra_keys = sorted({k for r in self.rows_for(statistic) for k in r.extra})
        headers += extra_keys
        rows = []
        for r in self.rows_for(statistic):
            line = [r.protocol, r.model, f"{r.epsilon:g}", f"{r.delta:g}", _num(r.exact),
                    _num(r.mean_estimate), _num(r.rmse), _mc_text(r),
                    str(r.repetitions), _num(r.predicted_rmse),
                    _KIND_CODE.get(r.prediction_kind, r.prediction_kind), _num(r.ratio, 2),
                    "-" if r.coverage is None
                    else f"{r.coverage:.2f}±{r.coverage_mc_se:.2f}",
                    _bits_text(r.bits_per_party),
                    f"{1000 * r.seconds_per_run:.2f}"]
            line += [_num(r.extra.get(k)) for k in extra_keys]
            if r.failed:
                line[0] += f" ({r.failed} failed)"
            rows.append(line)
        return headers, rows

    def table(self, statistic: str) -> str:
        headers, rows = self.table_rows(statistic)
        return self.header(statistic) + "\n" + format_table(headers, rows)

    def summary(self) -> str:
        """Which protocol to use under each trust model, from the measured table.

        Returns
        -------
        str
            A plain-text table (:func:`fedustat.comparison_summary.summarize`).

        Examples
        --------
        >>> from fedustat.compare import run_comparison
        >>> result = run_comparison(["duplicate"], epsilons=[1.0], repetitions=2,
        ...                         protocols=["central-laplace"], progress=False)
        >>> print(result.summary().splitlines()[0])
        Which protocol under each trust model (lowest measured RMSE):
        """
        headers, rows = summary_rows(summarize(self))
        return ("Which protocol under each trust model (lowest measured RMSE):\n"
                + format_table(headers, rows))

    def tables(self) -> str:
        parts = [self.table(s) for s in self.statistics]
        parts.append(KIND_LEGEND)
        return "\n\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "wall_time_seconds": self.wall_time,
                "cases": {s: {"source": c.source, "n": c.n,
                              "bounds": {k: list(v) for k, v in c.bounds.items()},
                              "values": dict(c.values)} for s, c in self.cases.items()},
                "rows": [r.to_dict() for r in self.rows], "skipped": self.skipped}


KIND_LEGEND = ("MC s.e.: the Monte Carlo standard error of the RMSE (delta method on the "
               "repetitions' squared errors) and its share of the RMSE; † = above the "
               "stopping rule's target after the most repetitions the preset allows "
               "(`--full` resolves it); CI95 cover ± the binomial s.e. of a 95% coverage over "
               "that many repetitions; reps = the "
               "repetitions the row ran. "
               "kind of prediction: exact = the protocol's exact MSE; bound = a proven upper "
               "bound; bound* = an upper bound on the randomization error only (the "
               "quantization error of a non-Lipschitz kernel on continuous data is not "
               "covered); approx = first-order (delta-method) value. RMSE/pred < 1 is "
               "expected for bounds; CI95 cover is the fraction of repetitions whose 95% "
               "interval (the release's own: its error law where it has one, else +- 1.96 "
               "s.e.) contains the exact value. none = no error formula: the protocol is "
               "run and measured.")


def _mc_text(row: RunRow) -> str:
    """The RMSE's Monte Carlo s.e., its share of the RMSE, and a mark when unresolved."""
    if not math.isfinite(row.rmse_mc_se):
        return "-"
    rel = row.rmse_mc_relative
    text = _num(row.rmse_mc_se, 2) + (f" ({100 * rel:.0f}%)" if math.isfinite(rel) else "")
    return text if row.resolved else text + " †"


def _bits_text(bits: float | None) -> str:
    if bits is None or not math.isfinite(bits):
        return "-"
    return f"{bits:.0f}" if bits >= 100 else f"{bits:.4g}"


def _num(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.{digits}g}"


def _seed(seed: int, *parts: Any) -> np.random.SeedSequence:
    # Stable across runs and independent of which other protocols are selected.
    key = [zlib.crc32(str(p).encode()) for p in parts]
    return np.random.SeedSequence([seed, *key])


def _accepted(name: str, params: dict[str, Any]) -> dict[str, Any]:
    """Only the parameters the protocol's factory takes (new protocols may differ)."""
    sig = inspect.signature(registry.factory(name))
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return params
    return {k: v for k, v in params.items() if k in sig.parameters}


def _column_params(case: Case, pred: Prediction) -> dict[str, Any]:
    """Public bounds / domain of the record columns, for the protocols that take them.

    Every protocol is offered the case's public column bounds and discrete domains;
    :func:`_accepted` keeps what its factory takes (those that quantize the records).
    """
    params = dict(pred.run_params)
    public = _public_column(case.statistic)
    private = {c: b for c, b in case.bounds.items() if c != public}
    domain = {c: v for c, v in case.values.items() if c != public}
    if catalogue.get(case.statistic).needs_bounds:
        private = {}  # the kernel carries its bounds
    if private:
        params["bounds"] = private
    if domain:
        params["domain"] = domain
    return _accepted(pred.protocol, params)


def _advice_for(case: Case, epsilon: float, delta: float) -> Advice:
    st = case.statistic
    kw: dict[str, Any] = {"epsilon": epsilon, "delta": delta}
    if _two_classes(st):
        n_pos = int(np.sum(case.arrays[1] == 1))
        kw.update(n_pos=n_pos, n_neg=case.n - n_pos)
    else:
        kw["n"] = case.n
    if catalogue.get(st).kind == "curve":
        assert case.grid is not None
        kw["domain_size"] = int(case.grid.size)
        return advise(st, **kw)
    cols = catalogue.get(st).columns
    private = [c for c in cols if c != _public_column(st)]
    bnds = {c: case.bounds[c] for c in private if c in case.bounds}
    dom = {c: len(case.values[c]) for c in private if c in case.values}
    if catalogue.get(st).needs_bounds:
        kw["bounds"] = bnds["x"]
    elif bnds:
        kw["bounds"] = bnds
    if dom:
        kw["domain_size"] = dom
    return advise(st, **kw)


@dataclass
class _Outcome:
    values: list[float] = field(default_factory=list)
    covered: list[bool] = field(default_factory=list)
    sq_errors: list[float] = field(default_factory=list)  # pooled squared errors
    extra: dict[str, list[float]] = field(default_factory=dict)
    failed: int = 0
    bits: list[float] = field(default_factory=list)
    model: str = ""
    delta: float = 0.0
    seconds: float = 0.0
    note: str = ""


def _run_ustat(case: Case, kernel: Kernel, data: np.ndarray, exact: float, pred: Prediction,
               eps: float, delta: float, seeds: list[np.random.SeedSequence],
               out: _Outcome, tick: Any) -> None:
    params = _column_params(case, pred)
    for ss in seeds:
        start = time.perf_counter()
        with warnings.catch_warnings():
            # An undefined release (e.g. FedAUC_RR with noisy counts outside (0, M)) is
            # NaN with a warning; it is counted as failed.
            warnings.simplefilter("ignore", RuntimeWarning)
            # A protocol the advisor predicts at delta = 0 is pure epsilon-DP: it gets no
            # delta (central-laplace refuses one it would not use).
            est = estimate(kernel, data, epsilon=eps, delta=delta if pred.delta > 0 else 0.0,
                           protocol=pred.protocol, rng=ss, **params)
        out.seconds += time.perf_counter() - start
        out.model = est.privacy.model.value
        out.delta = est.privacy.delta
        out.bits.append(_bits_sent(est))
        tick()
        if not math.isfinite(est.value):
            out.failed += 1
            continue
        out.values.append(est.value)
        out.sq_errors.append((est.value - exact) ** 2)
        if est.std_error is not None and math.isfinite(est.std_error):
            lo, hi = est.confidence_interval(0.95)
            out.covered.append(lo <= exact <= hi)


def _bits_sent(est: Any) -> float:
    """Online bits a party sends: its messages to the aggregator and, for secure
    computation, what it sends its peers. Offline (dealer) bits are not included.

    The transport counts peer traffic in ``Cost.bits_per_party`` when the protocol
    reports it (``Cost.peer_bits_per_party``); protocols that report it in their
    diagnostics instead are read from there.
    """
    cost, diag = est.cost, est.diagnostics
    if getattr(cost, "peer_bits_per_party", 0):
        return float(cost.bits_per_party)
    if "online_bits_per_party" in diag:  # the whole online protocol, from its transcript
        return float(diag["online_bits_per_party"])
    if "peer_bits_per_party" in diag:  # aggregator link + the exchanges with peers
        return float(cost.bits_per_party) + float(diag["peer_bits_per_party"])
    return float(cost.bits_per_party)


def level_errors(sorted_x: np.ndarray, grid: np.ndarray, released: Any,
                 levels: Sequence[float]) -> np.ndarray:
    """The level error of released quantiles: how far each level q is from the levels at
    which its release is an exact quantile of the data on the grid.

    A grid point ``v`` is the exact (generalized-inverse) q'-quantile on the grid for
    every ``q'`` in ``(lo, hi]`` with ``lo = F(largest grid point < v)`` (0 if none) and
    ``hi = F(v)``, ``F`` the data's ECDF (the event of
    :func:`fedustat.curves.level_error_bound`). The error is the distance from q to that
    interval, ``max(0, lo - q, q - hi)``: 0 for the exact grid quantile, which an error in
    rank ``F(v) - q`` charges up to one grid cell's mass.

    Parameters
    ----------
    sorted_x:
        The data, sorted.
    grid:
        The public grid, strictly increasing.
    released:
        One released value per level.
    levels:
        The levels q, in (0, 1].

    Returns
    -------
    numpy.ndarray
        The level error per level, in [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> x = np.array([1.0, 2.0, 2.0, 4.0])
    >>> grid = np.array([1.0, 2.0, 3.0, 4.0])
    >>> np.round(level_errors(x, grid, [2.0, 2.0, 4.0], [0.5, 0.9, 0.5]), 4).tolist()
    [0.0, 0.15, 0.25]
    """
    v = np.asarray(released, dtype=np.float64)
    q = np.asarray(levels, dtype=np.float64)
    n = sorted_x.size
    hi = np.searchsorted(sorted_x, v, side="right") / n
    below = np.searchsorted(grid, v, side="left") - 1  # the largest grid point < v
    lo = np.where(below >= 0,
                  np.searchsorted(sorted_x, grid[np.maximum(below, 0)], side="right") / n,
                  0.0)
    return np.maximum(0.0, np.maximum(lo - q, q - hi))


def _exact_quantiles(x: np.ndarray, levels: Sequence[float]) -> np.ndarray:
    return np.quantile(x, levels, method="inverted_cdf")


def _run_curve(case: Case, pred: Prediction, eps: float,
               seeds: list[np.random.SeedSequence], out: _Outcome, tick: Any) -> None:
    st = case.statistic
    assert case.grid is not None
    tau = case.grid
    smoothed = bool(pred.run_params.get("smooth", pred.protocol.endswith("-smoothed")))
    levels = (0.5,) if st == "median" else QUANTILE_LEVELS
    if st == "hl":
        _run_hl(case, eps, seeds, out, tick)
        return
    if st == "roc":
        scores, labels = case.arrays
        fpr0, tpr0, _ = roc_curve_on_grid(labels, scores, tau)
    else:
        x = case.arrays[0]
        f0 = exact_ecdf(x, tau)
        sorted_x = np.sort(x)
        median = float(_exact_quantiles(x, [0.5])[0])
        at = int(np.searchsorted(tau, median))
        at = min(at, tau.size - 1)
    for ss in seeds:
        rng = np.random.default_rng(ss)
        start = time.perf_counter()
        if st == "roc":
            curve = dp_roc_curve(labels, scores, epsilon=eps, thresholds=tau,
                                 smooth=smoothed, p=2, rng=rng)
            out.seconds += time.perf_counter() - start
            err = np.concatenate([curve.fpr[:-1] - fpr0[:-1], curve.tpr[:-1] - tpr0[:-1]])
            out.sq_errors.extend((err**2).tolist())
            out.values.append(curve.auc.value)
            guarantee = curve.privacy
            if smoothed:
                out.extra.setdefault("L1", []).append(
                    roc_l1_distance(curve.fpr, curve.tpr, fpr0, tpr0))
        else:
            if pred.protocol == "dp-quantiles":
                from fedustat.protocols.ecdf.private_quantiles import dp_quantiles

                direct = dp_quantiles(x, list(levels), epsilon=eps, thresholds=tau,
                                      method=pred.run_params.get("method", "auto"), rng=rng)
                out.seconds += time.perf_counter() - start
                guarantee = direct.privacy
                err = level_errors(sorted_x, tau, direct.values, levels)
                out.sq_errors.extend((err**2).tolist())
                mid = list(levels).index(0.5)
                out.values.append(float(direct.values[mid]))
                out.extra.setdefault("median RMSE", []).append(
                    (float(direct.values[mid]) - median) ** 2)
                out.bits.append(pred.bits_per_party or math.nan)
                out.model = guarantee.model.value
                out.delta = guarantee.delta
                tick()
                continue
            if pred.protocol in ("ecdf-secagg", "ecdf-fss"):
                from fedustat.protocols.ecdf import fss_ecdf, pointwise_ecdf

                evaluate = pointwise_ecdf if pred.protocol == "ecdf-secagg" else fss_ecdf
                released = evaluate(x, tau, epsilon=eps, rng=rng)
                # What a party sends: its shares (secagg's query) or its keys (fss' setup).
                out.bits.append(released.cost.bits_per_party
                                + released.setup_cost.bits_per_party)
            else:
                # 003's smoothing (Eq. 3) corrects 003's tree noise.
                released = dp_ecdf(x, tau, epsilon=eps, rng=rng,
                                   method="003-tree" if smoothed else None)
            guarantee = released.privacy
            values = smooth(released, p=2).values if smoothed else released.values
            if st == "ecdf":
                out.seconds += time.perf_counter() - start
                err = values - f0
                out.sq_errors.extend((err**2).tolist())
                out.values.append(float(values[at]))
                if not smoothed:
                    # Each point's own variance (the default release's varies by point).
                    var = getattr(released, "point_variances", released.variance)
                    half = 1.959963984540054 * np.sqrt(var)
                    out.covered.extend((np.abs(err) <= half).tolist())
            else:
                source = smooth(released, p=2) if smoothed else released
                # The grid point ending Alg. 1's last bracket (F_hat(t^-) < q <= F_hat(t)),
                # as dp_quantiles(method="curve") and fedustat.quantile release it; the
                # bracket's midpoint sits inside a cell, an exact quantile at no level
                # when records lie between it and the grid point.
                answers = dp_quantile(source, list(levels)).upper
                out.seconds += time.perf_counter() - start
                err = level_errors(sorted_x, tau, answers, levels)
                out.sq_errors.extend((err**2).tolist())
                mid = list(levels).index(0.5)
                out.values.append(float(answers[mid]))
                out.extra.setdefault("median RMSE", []).append(
                    (float(answers[mid]) - median) ** 2)
        if pred.protocol not in ("ecdf-secagg", "ecdf-fss"):  # measured above
            out.bits.append(pred.bits_per_party or math.nan)
        out.model = guarantee.model.value
        out.delta = guarantee.delta
        tick()


def _run_hl(case: Case, eps: float, seeds: list[np.random.SeedSequence], out: _Outcome,
            tick: Any) -> None:
    """The private Hosmer-Lemeshow statistic of 003 Alg. 2 against its exact value.

    The release's own ``statistic`` is the noise-aware statistic its p-value is computed
    from (docs/protocols/ecdf.md), which is not an estimate of H; Alg. 2's plug-in H is
    kept in its diagnostics and is what this comparison measures."""
    scores, labels = case.arrays
    exact = _curve_exact(case)
    for ss in seeds:
        start = time.perf_counter()
        released = dp_hosmer_lemeshow(labels, scores, epsilon=eps,
                                      rng=np.random.default_rng(ss))
        out.seconds += time.perf_counter() - start
        value = float(released.statistic.diagnostics["alg2_statistic"])
        out.values.append(value)
        out.sq_errors.append((value - exact) ** 2)
        out.model = released.privacy.model.value
        out.delta = released.privacy.delta
        tick()


def _curve_exact(case: Case) -> float:
    st = case.statistic
    assert case.grid is not None
    if st == "hl":
        scores, labels = case.arrays
        return float(dp_hosmer_lemeshow(labels, scores, epsilon=math.inf).statistic.value)
    if st == "roc":
        fpr, tpr, _ = roc_curve_on_grid(case.arrays[1], case.arrays[0], case.grid)
        return float(np.trapezoid(tpr, fpr))
    x = case.arrays[0]
    median = float(_exact_quantiles(x, [0.5])[0])
    if st in ("quantile", "median"):
        return median
    at = min(int(np.searchsorted(case.grid, median)), case.grid.size - 1)
    return float(exact_ecdf(x, case.grid)[at])


def rmse_mc_error(rep_mse: Sequence[float]) -> float:
    """Monte Carlo standard error of an RMSE from the repetitions' own mean squared errors.

    With ``m`` independent repetitions of mean squared errors ``s_r`` (a curve's pooled
    over its grid), MSE = mean(s) has the standard error ``sd(s) / sqrt(m)`` and, by the
    delta method (``d sqrt(x) = dx / (2 sqrt(x))``), RMSE = sqrt(MSE) has
    ``sd(s) / (2 sqrt(m) RMSE)``. nan with fewer than two repetitions; 0 when every
    repetition was exact.

    Examples
    --------
    >>> round(rmse_mc_error([1.0, 1.0, 1.0]), 6)
    0.0
    >>> round(rmse_mc_error([0.0, 2.0]), 4)  # sd 1.414, m 2, RMSE 1
    0.5
    """
    s = np.asarray(rep_mse, dtype=np.float64)
    if s.size < 2:
        return math.nan
    mse = float(s.mean())
    if mse == 0.0:
        return 0.0
    return float(s.std(ddof=1) / (2.0 * math.sqrt(s.size) * math.sqrt(mse)))


def _resolved(rep_mse: Sequence[float], target: float) -> bool:
    """The stopping rule: the RMSE's Monte Carlo s.e. is at most ``target`` of it."""
    s = np.asarray(rep_mse, dtype=np.float64)
    if s.size and float(s.mean()) == 0.0:
        return True  # exact in every repetition: nothing left to resolve
    se = rmse_mc_error(s)
    return math.isfinite(se) and se <= target * math.sqrt(float(s.mean()))


def _merge(outcomes: Sequence[_Outcome]) -> tuple[_Outcome, list[float]]:
    """One cell's repetitions (in index order) as one outcome, and each one's MSE."""
    out = _Outcome()
    rep_mse: list[float] = []
    for o in outcomes:
        out.values += o.values
        out.covered += o.covered
        out.sq_errors += o.sq_errors
        for k, v in o.extra.items():
            out.extra.setdefault(k, []).extend(v)
        out.failed += o.failed
        out.bits += o.bits
        out.seconds += o.seconds
        out.model = o.model or out.model
        out.delta = o.delta
        out.note = o.note or out.note
        if o.sq_errors:
            rep_mse.append(float(np.mean(o.sq_errors)))
    return out, rep_mse


def _row(case: Case, pred: Prediction, eps: float, out: _Outcome, exact: float,
         repetitions: int, rep_mse: Sequence[float] | None = None,
         resolved: bool = True) -> RunRow:
    sq = np.asarray(out.sq_errors, dtype=np.float64)
    rmse = float(math.sqrt(sq.mean())) if sq.size else math.nan
    extra = {}
    for k, v in out.extra.items():
        arr = np.asarray(v)
        extra[k] = float(math.sqrt(arr.mean())) if k.endswith("RMSE") else float(arr.mean())
    bits = np.asarray(out.bits, dtype=np.float64)
    note = out.note
    if out.failed:
        note = (note + "; " if note else "") + (f"{out.failed} of {repetitions} releases "
                                                "undefined (NaN)")
    coverage = float(np.mean(out.covered)) if out.covered else None
    # The binomial s.e. at the nominal 95%: what a coverage check is judged against (the
    # plug-in p(1-p) would claim no error at all for a coverage of 1.00 from 5 runs).
    coverage_se = (math.sqrt(0.95 * 0.05 / len(out.covered))
                   if coverage is not None else math.nan)
    return RunRow(
        statistic=case.statistic, protocol=pred.protocol, epsilon=eps, delta=out.delta,
        model=out.model or pred.model.value, exact=exact,
        mean_estimate=float(np.mean(out.values)) if out.values else None, rmse=rmse,
        predicted_rmse=pred.rmse, prediction_kind=pred.kind,
        coverage=coverage,
        bits_per_party=float(np.nanmean(bits)) if bits.size and np.isfinite(bits).any()
        else None,
        seconds_per_run=out.seconds / max(repetitions, 1), repetitions=repetitions,
        failed=out.failed, extra=extra, note=note,
        rmse_mc_se=rmse_mc_error(rep_mse) if rep_mse is not None else math.nan,
        coverage_mc_se=coverage_se, resolved=resolved)


def run_comparison(statistics: Sequence[str] | None = None, *, data: str | None = None,
                   file: str | None = None, columns: Sequence[str] | None = None,
                   bounds: Any = None, column_bounds: Mapping[str, Any] | None = None,
                   column_values: Mapping[str, Sequence[float]] | None = None,
                   epsilons: Sequence[float] = DEFAULT_EPSILONS,
                   repetitions: int | None = None, delta: float = DEFAULT_DELTA,
                   protocols: Sequence[str] | None = None,
                   grid_points: int | None = None, seed: int = 0,
                   progress: bool = True, preset: str = DEFAULT_PRESET,
                   workers: int | None = None) -> ComparisonResult:
    """Run every applicable protocol on each statistic over ``epsilons``.

    Parameters
    ----------
    statistics:
        Names from :data:`COMPARED_STATISTICS` (plus ``"variance"``); default all of those.
    data, file, columns:
        A data set of :func:`available_data` or a CSV/Parquet ``file``, and the columns
        in the statistic's order (score, label for auc/roc; x, y for kendall). Default:
        each statistic's own real data set (module docstring).
    bounds, column_bounds, column_values:
        Public description of the columns: ``bounds=(lo, hi)`` of the single continuous
        column, or per statistic column (``{"x": (lo, hi)}``, ``{"x": [values...]}``).
        Bundled columns have declared defaults (:data:`PUBLIC_BOUNDS`,
        :data:`PUBLIC_VALUES`).
    epsilons, delta:
        The grid of budgets and the delta of protocols that need one (default: the
        library's, 0; pure-DP protocols deliver delta = 0 whatever is given).
    preset:
        ``"quick"``, ``"default"`` or ``"full"`` (:data:`PRESETS`): the sequential stopping
        rule (minimum and maximum repetitions per cell, target relative Monte Carlo
        error of the RMSE) and the curve grid.
    repetitions:
        A fixed number of runs per protocol and budget instead of the stopping rule.
    workers:
        Processes running repetitions (default: the CPUs this process may use). Every
        repetition's seed is fixed by its index, so the results do not depend on it.
    protocols:
        Run only these protocols (default: every one the advisor lists and this
        installation provides).
    grid_points:
        Thresholds N of the ECDF and ROC grids (evenly spaced over the public bounds);
        default: the preset's (the library's :data:`DEFAULT_GRID_POINTS` except for
        ``"quick"``).
    seed:
        Root seed; every (statistic, protocol, epsilon, repetition) has its own stream.
    progress:
        Show a progress bar on stderr.

    Returns
    -------
    ComparisonResult
        One :class:`RunRow` per (statistic, protocol, epsilon) with the measured and
        predicted RMSE and costs, the advisor's answers, and :meth:`ComparisonResult.summary`
        (which protocol to use under each trust model, from the measured table).

    Examples
    --------
    >>> from fedustat.compare import run_comparison
    >>> result = run_comparison(["duplicate"], epsilons=[1.0], repetitions=2,
    ...                         protocols=["central-laplace", "ldp-quantized"],
    ...                         progress=False)
    >>> [(row.protocol, row.epsilon) for row in result.rows]
    [('central-laplace', 1.0), ('ldp-quantized', 1.0)]
    >>> all(row.rmse < 0.05 for row in result.rows)
    True
    """
    names = list(COMPARED_STATISTICS if statistics is None else statistics)
    if not names:
        raise ValueError("statistics must name at least one statistic")
    for st in names:
        if st not in catalogue.STATISTICS:
            raise ValueError(f"unknown statistic {st!r}; choose from "
                             f"{', '.join(catalogue.STATISTICS)}")
    eps_grid = [check_epsilon(e, "epsilons") for e in epsilons]
    if not eps_grid:
        raise ValueError("epsilons must hold at least one budget")
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    rule = PRESETS[preset]
    if repetitions is not None:
        repetitions = check_positive_int(repetitions, "repetitions")
        rule = Preset(f"{preset}, fixed repetitions", repetitions, repetitions, rule.target,
                      rule.grid_points)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
    workers = check_positive_int(workers, "workers")
    delta = check_delta(delta)
    grid_points = check_positive_int(rule.grid_points if grid_points is None else grid_points,
                                     "grid_points", minimum=2)
    seed = check_positive_int(seed, "seed", minimum=0)
    if file is not None and columns is not None:
        widths = {len(catalogue.get(st).columns) for st in names}
        if widths != {len(columns)}:
            raise ValueError(f"columns gives {len(columns)} column(s), but the statistics "
                             f"{names} take {sorted(widths)}; compare one kind at a time")
    started = time.perf_counter()
    cases = {st: _build_case(st, data=data, file=file, columns=columns, bounds=bounds,
                             column_bounds=column_bounds, column_values=column_values,
                             grid_points=grid_points) for st in names}
    registered = {e.name for e in registry.available()}
    wanted = None if protocols is None else set(protocols)
    if wanted is not None:
        known = (registered | set(CURVE_RELEASES)
                 | {e.name for e in registry.available_curves()})
        unknown = wanted - known
        if unknown:
            raise ValueError(f"unknown protocols {sorted(unknown)}; available: "
                             f"{', '.join(sorted(known))}")

    plan: list[tuple[str, float, Advice, list[Prediction]]] = []
    skipped: list[str] = []
    for st in names:
        for eps in eps_grid:
            adv = _advice_for(cases[st], eps, delta)
            runnable = []
            for pred in adv.predictions:
                if wanted is not None and pred.protocol not in wanted:
                    continue
                if pred.kind == NO_PREDICTION:
                    # No error formula: run what computes the statistic and measure it.
                    if pred.registered:
                        runnable.append(pred)
                    elif wanted is not None and eps == eps_grid[0]:
                        refusal = catalogue.protocol_refusal(st, pred.protocol)
                        skipped.append(f"{st}: {pred.protocol} ({refusal})")
                    continue
                if not pred.registered:
                    if eps == eps_grid[0]:
                        skipped.append(f"{st}: {pred.protocol} (predicted, not registered "
                                       "in this installation)")
                    continue
                if pred.reason and (not math.isfinite(pred.mse)
                                    or pred.reason.startswith("the protocol refuses")):
                    if eps == eps_grid[0]:
                        skipped.append(f"{st}: {pred.protocol} ({pred.reason})")
                    continue
                runnable.append(pred)
            plan.append((st, eps, adv, runnable))
        listed = {p.protocol for p in plan[-1][2].predictions}
        if wanted is None and not any(r for name, _, _, r in plan if name == st):
            # No private protocol computes it (tau-b): say why, protocol by protocol.
            skipped.extend(f"{st}: {name} ({catalogue.protocol_refusal(st, name)})"
                           for name in sorted(listed)
                           if catalogue.protocol_refusal(st, name) is not None)
        for name in sorted((wanted or set()) - listed):
            refusal = catalogue.protocol_refusal(st, name)
            if refusal is not None:
                skipped.append(f"{st}: {name} ({refusal})")
    advice: dict[tuple[str, float], Advice] = {}
    for st, eps, adv, _ in plan:
        advice[(st, eps)] = adv
    exact_of: dict[str, float] = {}
    cells: list[_Cell] = []
    for st, eps, _, runnable in plan:
        if st not in exact_of:
            exact_of[st] = _exact_value(cases[st])
        cells += [_Cell(cases[st], pred, eps, delta, exact_of[st], seed) for pred in runnable]
    rows, failures = _run_cells(cells, rule, workers, progress)
    skipped += failures
    settings = {"statistics": names, "epsilons": eps_grid, "preset": rule.name,
                "repetitions": rule.max_repetitions,
                "min_repetitions": rule.min_repetitions, "target": rule.target,
                "workers": workers, "delta": delta, "seed": seed, "grid_points": grid_points,
                "library_grid_points": DEFAULT_GRID_POINTS,
                "protocols": sorted(wanted) if wanted is not None else "all applicable",
                "data": data, "file": file}
    return ComparisonResult(rows, cases, advice, settings, time.perf_counter() - started,
                            skipped)


# --------------------------------------------------------------------------- scheduling


@dataclass(frozen=True)
class _Cell:
    """One (statistic, protocol, epsilon): what a worker needs to run its repetitions."""

    case: Case
    pred: Prediction
    epsilon: float
    delta: float
    exact: float
    seed: int

    @property
    def label(self) -> str:
        return f"{self.case.statistic} {self.pred.protocol} eps={self.epsilon:g}"


def _exact_value(case: Case) -> float:
    kernel = _kernel(case)
    if kernel is None:
        return _curve_exact(case)
    packed = kernel.pack(*case.arrays)
    return float(estimate(kernel, packed, epsilon=math.inf, protocol="exact").value)


_PACKED: dict[tuple[str, str], tuple[Kernel | None, np.ndarray | None]] = {}


def _run_repetitions(cell: _Cell, indices: Sequence[int]
                     ) -> tuple[list[tuple[int, _Outcome]], str | None,
                                list[tuple[type[Warning], str]]]:
    """Run repetitions ``indices`` of a cell, each seeded by its own index (so a result
    never depends on which process ran it). Runs in a worker process; the library's
    warnings come back to the caller (distinct ones, once each), which issues them where
    the user sees them."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done, error = _run_indices(cell, indices)
    distinct = list(dict.fromkeys((w.category, str(w.message)) for w in caught))
    return done, error, distinct


def _run_indices(cell: _Cell, indices: Sequence[int]
                 ) -> tuple[list[tuple[int, _Outcome]], str | None]:
    case = cell.case
    key = (case.statistic, case.source)
    if key not in _PACKED:
        kernel = _kernel(case)
        _PACKED[key] = (kernel, None if kernel is None else kernel.pack(*case.arrays))
    kernel, packed = _PACKED[key]
    done: list[tuple[int, _Outcome]] = []
    for r in indices:
        ss = _seed(cell.seed, case.statistic, cell.pred.protocol, cell.epsilon, r)
        out = _Outcome()
        try:
            if kernel is not None:
                assert packed is not None
                _run_ustat(case, kernel, packed, cell.exact, cell.pred, cell.epsilon,
                           cell.delta, [ss], out, _no_tick)
            else:
                _run_curve(case, cell.pred, cell.epsilon, [ss], out, _no_tick)
        except (ValueError, TypeError, OverflowError) as exc:
            return done, str(exc)
        done.append((r, out))
    return done, None


def _reissue(caught: Sequence[tuple[type[Warning], str]]) -> None:
    """A worker's warnings, issued in this process (once per distinct message under the
    default filter, and under the command line's one-line printer)."""
    for category, message in caught:
        warnings.warn(message, category, stacklevel=2)


def _no_tick() -> None:
    return None


class _InProcess:
    """The executor of one worker: runs each task when it is submitted."""

    def submit(self, fn: Any, *args: Any) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:  # handed to the caller as a pool would
            fut.set_exception(exc)
        return fut

    def shutdown(self, **_: Any) -> None:
        return None


def _executor(workers: int) -> Any:
    if workers == 1:
        return _InProcess()
    import multiprocessing

    # fork: the workers inherit the imported library instead of importing it again
    # (seconds per worker); elsewhere the platform's default start method.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    return ProcessPoolExecutor(max_workers=workers, mp_context=context)


def _planned(rule: Preset, statistic: str, rep_mse: Sequence[float] | None) -> int:
    """Repetitions a cell is expected to take, for the time estimate only.

    Before any result: a curve pools its grid (resolved at the minimum); a scalar's
    squared error of a normal error has relative variance 2, so its RMSE's relative
    s.e. is ``sqrt(2 / m) / 2`` and reaches the target at ``m = 1 / (2 target^2)``.
    After a batch: the measured relative s.e. scaled by ``1 / sqrt(m)``."""
    lo, hi = rule.min_repetitions, rule.max_repetitions
    if rep_mse is None or len(rep_mse) < 2:
        if catalogue.get(statistic).kind == "curve":
            return lo
        need = math.ceil(1.0 / (2.0 * rule.target**2))
    elif _resolved(rep_mse, rule.target):
        return len(rep_mse)
    else:
        rel = rmse_mc_error(rep_mse) / math.sqrt(float(np.mean(rep_mse)))
        need = math.ceil(len(rep_mse) * (rel / rule.target) ** 2)
        lo = len(rep_mse) + REPETITION_STEP  # the next batch runs whatever the estimate
    # Batches come in steps of REPETITION_STEP after the minimum.
    steps = max(0, math.ceil((need - rule.min_repetitions) / REPETITION_STEP))
    return int(min(max(rule.min_repetitions + steps * REPETITION_STEP, lo), hi))


def _chunks(indices: list[int], seconds_each: float) -> list[list[int]]:
    """Repetitions in tasks of about half a second (fewer round trips for fast cells)."""
    size = max(1, min(len(indices), int(0.5 / max(seconds_each, 1e-6))))
    return [indices[i:i + size] for i in range(0, len(indices), size)]


def _run_cells(cells: list[_Cell], rule: Preset, workers: int, progress: bool
               ) -> tuple[list[RunRow], list[str]]:
    """Run every cell under the stopping rule on ``workers`` processes.

    First one repetition of every cell (the calibration: each cell's time per run), then
    an estimate of the whole run printed once, then the cells' batches, largest first.
    The stopping rule sees a cell's repetitions 0..m-1 only, so which repetitions run,
    and every number, are the same for any number of workers."""
    from tqdm.auto import tqdm

    results: dict[int, dict[int, _Outcome]] = {i: {} for i in range(len(cells))}
    errors: dict[int, str] = {}
    started = time.perf_counter()
    pool = _executor(workers)
    try:
        # 1. calibration: repetition 0 of every cell.
        futures = {pool.submit(_run_repetitions, c, [0]): i for i, c in enumerate(cells)}
        for fut in as_completed(futures):
            i = futures[fut]
            done, error, caught = fut.result()
            _reissue(caught)
            results[i].update(done)
            if error is not None:
                errors[i] = error
        calibration = time.perf_counter() - started
        cost = [max(results[i][0].seconds, 1e-4) if 0 in results[i] else 0.0
                for i in range(len(cells))]
        plan = {i: _planned(rule, cells[i].case.statistic, None)
                for i in range(len(cells)) if i not in errors}
        effective = max(1, min(workers, len(plan)))
        estimate_s = sum(cost[i] * (plan[i] - 1) for i in plan) / effective
        upper_s = sum(cost[i] * (rule.max_repetitions - 1) for i in plan) / effective
        if progress:
            print(f"fedustat compare: {len(cells)} cells (statistic, protocol, epsilon), "
                  f"preset {rule.describe()}; {workers} worker(s); calibration "
                  f"{calibration:.0f} s; estimated {estimate_s:.0f} s more (at most "
                  f"{upper_s:.0f} s if no cell stops before {rule.max_repetitions})",
                  file=sys.stderr, flush=True)
        # 2. batches; the bar counts calibrated work-seconds, so its ETA is stable.
        bar = tqdm(total=round(sum(cost[i] * (plan[i] - 1) for i in plan), 1),
                   file=sys.stderr, disable=not progress, unit="s", unit_scale=False,
                   desc="fedustat compare (work)", leave=False, smoothing=0.0,
                   bar_format="{l_bar}{bar}| {elapsed}<{remaining}")
        pending: dict[Future, tuple[int, list[int]]] = {}
        waiting: dict[int, int] = {}  # cell -> tasks still out in its batch

        def submit_batch(i: int, start: int, stop: int) -> None:
            tasks = _chunks(list(range(start, stop)), cost[i])
            waiting[i] = len(tasks)
            for t in tasks:
                pending[pool.submit(_run_repetitions, cells[i], t)] = (i, t)

        first = min(rule.min_repetitions, rule.max_repetitions)
        for i in sorted(plan, key=lambda i: -cost[i] * plan[i]):
            if first > 1:
                submit_batch(i, 1, first)
        while pending:
            finished, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for fut in finished:
                i, t = pending.pop(fut)
                done, error, caught = fut.result()
                _reissue(caught)
                results[i].update(done)
                bar.update(round(cost[i] * len(t), 4))
                if error is not None:
                    errors[i] = error
                waiting[i] -= 1
                if waiting[i] or i in errors:
                    continue
                m = len(results[i])
                _, rep_mse = _merge([results[i][r] for r in sorted(results[i])])
                if m >= rule.max_repetitions or _resolved(rep_mse, rule.target):
                    continue
                # Re-plan this cell from what it measured; the bar's total follows.
                new_plan = _planned(rule, cells[i].case.statistic, rep_mse)
                bar.total = round(bar.total + cost[i] * (new_plan - plan[i]), 1)
                plan[i] = new_plan
                bar.refresh()
                submit_batch(i, m, min(m + REPETITION_STEP, rule.max_repetitions))
        bar.close()
    finally:
        pool.shutdown(cancel_futures=True)
    rows: list[RunRow] = []
    failures: list[str] = []
    for i, cell in enumerate(cells):
        if i in errors:
            failures.append(f"{cell.case.statistic}: {cell.pred.protocol} at "
                            f"eps={cell.epsilon:g} failed: {errors[i]}")
            continue
        out, rep_mse = _merge([results[i][r] for r in sorted(results[i])])
        m = len(results[i])
        resolved = _resolved(rep_mse, rule.target)
        rows.append(_row(cell.case, cell.pred, cell.epsilon, out, cell.exact, m, rep_mse,
                         resolved))
    return rows, failures


# --------------------------------------------------------------------------- report


# What the error axis measures, with its unit, per statistic.
_ERROR_AXIS: dict[str, str] = {
    "auc": "RMSE of the AUC (AUC units, 0-1)",
    "kendall": "RMSE of tau-a (tau units, -1 to 1)",
    "gini": "RMSE of the Gini mean difference (units of the data)",
    "variance": "RMSE of the variance (squared units of the data)",
    "duplicate": "RMSE of the duplicate-pair ratio (0-1)",
    "rand": "RMSE of the Rand index (0-1)",
    "ecdf": "RMSE of F per threshold (probability)",
    "quantile": "RMSE of the level error, distance from q to (F(t^-), F(t)] (probability)",
    "roc": "RMSE of TPR and FPR per threshold (rate)",
}


#: Panels of the error figure, one per privacy model, in this order (then any other).
_PANEL_ORDER = ("local", "computational", "label", "central")
#: Series per panel at most; a model with more protocols takes several panels.
MAX_SERIES_PER_PANEL = 6


def _error_ceiling(result: ComparisonResult, statistic: str) -> float | None:
    """The largest RMSE a release can have: the width of the statistic's range (a
    release is clipped into it), 1 for curves and levels (probabilities); None if
    unknown. A prediction above it says nothing the axis needs to show."""
    case = result.cases[statistic]
    kernel = _kernel(case)
    if kernel is None:
        return None if statistic == "hl" else 1.0
    bounds = kernel.statistic_range()
    if bounds is None or not all(math.isfinite(v) for v in bounds):
        return None
    return float(bounds[1] - bounds[0])


def _panels(rows: Sequence[RunRow]) -> list[tuple[str, list[str]]]:
    """(title, protocols) per panel: one per privacy model, at most
    :data:`MAX_SERIES_PER_PANEL` protocols each."""
    by_model: dict[str, list[str]] = {}
    for r in rows:
        names = by_model.setdefault(r.model, [])
        if r.protocol not in names:
            names.append(r.protocol)
    order = sorted(by_model, key=lambda m: (_PANEL_ORDER.index(m) if m in _PANEL_ORDER
                                            else len(_PANEL_ORDER), m))
    panels = []
    for model in order:
        names = by_model[model]
        parts = [names[i:i + MAX_SERIES_PER_PANEL]
                 for i in range(0, len(names), MAX_SERIES_PER_PANEL)]
        for k, part in enumerate(parts):
            suffix = f" ({k + 1}/{len(parts)})" if len(parts) > 1 else ""
            panels.append((f"{model} DP{suffix}", part))
    return panels


def _error_figure(result: ComparisonResult, statistic: str) -> Any:
    """Measured RMSE (solid, with its Monte Carlo s.e. as error bars) and predicted RMSE
    (dashed) against epsilon: one panel per privacy model (at most
    :data:`MAX_SERIES_PER_PANEL` series each), one style per protocol in every figure
    (:func:`fedustat.plotting.protocol_style`), a shared y axis fitted to the plotted
    values and cut at the statistic's range: a prediction above it (a vacuous bound) is
    drawn as an arrow at the top edge with its value, not by stretching the axis."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    rows = result.rows_for(statistic)
    panels = _panels(rows)
    ceiling = _error_ceiling(result, statistic)
    fig = Figure(figsize=(3.4 * max(len(panels), 1) + 0.6, 4.2))
    axes = fig.subplots(1, max(len(panels), 1), sharey=True, squeeze=False)[0]
    plotted: list[float] = []
    over: list[tuple[Any, float, float, str]] = []  # (axes, eps, predicted, colour)
    for r in rows:
        plotted += [v for v in (r.rmse, r.rmse - r.rmse_mc_se, r.rmse + r.rmse_mc_se)
                    if math.isfinite(v) and v > 0]
        if math.isfinite(r.predicted_rmse) and r.predicted_rmse > 0 and (
                ceiling is None or r.predicted_rmse <= ceiling):
            plotted.append(r.predicted_rmse)
    eps_grid = result.settings["epsilons"]
    # A budget grid usually doubles: log spacing from a 4-fold spread keeps it even.
    x_fit = fit_axis(eps_grid, log_ratio=4.0)
    y_fit = fit_axis(plotted) if plotted else None
    if y_fit is not None and ceiling is not None and y_fit.upper > ceiling:
        y_fit = type(y_fit)(y_fit.scale, y_fit.lower, ceiling)
    for ax, (title, names) in zip(axes, panels, strict=False):
        handles = []
        for name in names:
            colour, marker = protocol_style(name)
            mine = sorted((r for r in rows if r.protocol == name), key=lambda r: r.epsilon)
            eps = [r.epsilon for r in mine]
            measured = [r.rmse for r in mine]
            spread = [r.rmse_mc_se if math.isfinite(r.rmse_mc_se) else 0.0 for r in mine]
            bars = ax.errorbar(eps, measured, yerr=spread, marker=marker, color=colour,
                               linewidth=1.6, markersize=6, capsize=3, label=name)
            handles.append(bars)
            shown = [(r.epsilon, r.predicted_rmse) for r in mine
                     if math.isfinite(r.predicted_rmse)]
            inside = [(e, p) for e, p in shown if ceiling is None or p <= ceiling]
            if inside:
                ax.plot([e for e, _ in inside], [p for _, p in inside], linestyle="--",
                        marker=marker, markerfacecolor="none", color=colour,
                        linewidth=1.2, markersize=6)
            over += [(ax, e, p, colour) for e, p in shown if ceiling is not None
                     and p > ceiling]
        ax.set_xscale(x_fit.scale)
        ax.set_xlim(x_fit.lower, x_fit.upper)
        ax.set_xticks(eps_grid)
        ax.set_xticklabels([f"{e:g}" for e in eps_grid])
        ax.minorticks_off()
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("privacy budget epsilon")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(handles=handles, fontsize=7, loc="best")
    if y_fit is not None:
        axes[0].set_yscale(y_fit.scale)
        axes[0].set_ylim(y_fit.lower, y_fit.upper)
        if y_fit.scale == "log":
            from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

            # Plain numbers at 1, 2 and 5 of each decade: readable without exponents.
            axes[0].yaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0),
                                                       numticks=30))
            axes[0].yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            axes[0].yaxis.set_minor_locator(NullLocator())
    for ax, e, p, colour in over:
        # A prediction above the statistic's range: an arrow at the top edge, its value.
        top = ax.get_ylim()[1]
        ax.annotate(f"pred. {p:.3g}", xy=(e, top), xytext=(0, -22),
                    textcoords="offset points", ha="center", fontsize=6, color=colour,
                    arrowprops={"arrowstyle": "->", "color": colour})
    axes[0].set_ylabel("\n".join(textwrap.wrap(_ERROR_AXIS.get(statistic, "RMSE"), 42)))
    case = result.cases[statistic]
    keys = [Line2D([], [], color="0.2", linestyle="-", label="solid: measured (± MC s.e.)"),
            Line2D([], [], color="0.2", linestyle="--", label="dashed: predicted")]
    if over:
        keys.append(Line2D([], [], color="0.2", marker=r"$\uparrow$", linestyle="none",
                           label=f"arrow: predicted above {ceiling:g}, the range"))
    fig.legend(handles=keys, fontsize=7, loc="lower center", ncol=len(keys),
               frameon=False)
    fig.suptitle(f"{statistic}: error against epsilon ({case.source}, n={case.n}; "
                 f"{result.repetitions_text().split(' (')[0]})", fontsize=9)
    fig.subplots_adjust(bottom=0.2, top=0.86, wspace=0.08)
    return fig


def _curve_figure(result: ComparisonResult, statistic: str) -> Any | None:
    """Exact curve and one release per epsilon (first repetition's seed)."""
    from matplotlib.figure import Figure

    case = result.cases[statistic]
    if case.grid is None or statistic in ("quantile", "median", "hl"):
        return None
    eps_grid = result.settings["epsilons"]
    seed = result.settings["seed"]
    smoothed_name = "dp-roc-smoothed" if statistic == "roc" else "dp-ecdf-smoothed"
    if not any(r.protocol == smoothed_name for r in result.rows_for(statistic)):
        return None
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    if statistic == "roc":
        scores, labels = case.arrays
        fpr, tpr, _ = roc_curve_on_grid(labels, scores, case.grid)
        ax.plot(fpr, tpr, color="black", linewidth=1.8, label="exact (grid)")
        for i, eps in enumerate(eps_grid):
            rng = np.random.default_rng(_seed(seed, statistic, smoothed_name, eps, 0))
            curve = dp_roc_curve(labels, scores, epsilon=eps, thresholds=case.grid,
                                 smooth=True, p=2, rng=rng)
            ax.plot(curve.fpr, curve.tpr, color=series_style(i)[0], linewidth=1.2,
                    label=f"smoothed release, eps={eps:g}")
        ax.set_xlabel("false positive rate")
        ax.set_ylabel("true positive rate")
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
    else:
        x = case.arrays[0]
        exact_curve = exact_ecdf(x, case.grid)
        ax.step(case.grid, exact_curve, where="post", color="black",
                linewidth=1.8, label="exact")
        for i, eps in enumerate(eps_grid):
            rng = np.random.default_rng(_seed(seed, statistic, smoothed_name, eps, 0))
            released = dp_ecdf(x, case.grid, epsilon=eps, rng=rng, method="003-tree")
            ax.step(case.grid, smooth(released, p=2).values, where="post",
                    color=series_style(i)[0], linewidth=1.2,
                    label=f"smoothed release, eps={eps:g}")
        column = case.source.rsplit(":", 1)[-1]
        ax.set_xlabel(f"threshold on {column} (units of the data)")
        ax.set_ylabel("F(threshold): share of records <= threshold")
        # The public grid may be much wider than the data: show where the exact curve
        # rises (one grid step either side), not flat stretches at 0 and 1.
        rising = np.flatnonzero((exact_curve > 0) & (exact_curve < 1))
        if rising.size:
            first = max(int(rising[0]) - 1, 0)
            last = min(int(rising[-1]) + 1, case.grid.size - 1)
            x_fit = fit_axis([float(case.grid[first]), float(case.grid[last])],
                             allow_log=False)
            ax.set_xlim(x_fit.lower, x_fit.upper)
        ax.set_ylim(-0.03, 1.03)
    ax.set_title(f"{statistic}: exact and private curves ({case.source})", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, alpha=0.3)
    return fig


def write_report(result: ComparisonResult, out_dir: str | Path) -> Path:
    """Write ``report.md``, its figures, ``results.json`` and ``results.csv`` to ``out_dir``.

    The folder is self-contained: the Markdown links its PNG figures by relative paths.
    """
    out = Path(out_dir)
    rep = MarkdownReport("fedustat compare: private protocols side by side")
    s = result.settings
    rep.heading("Summary: which protocol under each trust model")
    rep.paragraph(
        "For each statistic and trust model, the protocol meeting that trust model with the "
        "lowest measured RMSE (geometric mean over the budgets) on this data, and why: its "
        "measured error and bits per party against the runner-up. A protocol meeting a "
        "stricter model also meets a weaker one (a local-DP protocol is acceptable under a "
        "curator). '-': no protocol meeting the trust model computes the statistic or ran.")
    headers, rows = summary_rows(summarize(result))
    rep.table(headers, rows)
    grid_note = ""
    if s["grid_points"] < s.get("library_grid_points", s["grid_points"]):
        grid_note = (f" Curves on a grid of {s['grid_points']} thresholds, coarser than the "
                     f"library's default {s['library_grid_points']}, for speed.")
    rep.paragraph(
        f"Preset {s.get('preset', 'default')}: {result.repetitions_text()}. Budgets epsilon "
        f"= {', '.join(f'{e:g}' for e in s['epsilons'])}; delta = {s['delta']:g} for "
        f"protocols that need one; seed {s['seed']}; {s.get('workers', 1)} worker "
        f"process(es) (the numbers do not depend on it). Total wall time "
        f"{result.wall_time:.1f} s.{grid_note} Every protocol runs with the parameters the "
        "advisor "
        "(`fedustat advise`) chose, so each row's predicted RMSE belongs to that exact "
        "run. Errors are against the exact statistic of the data (the error the protocol "
        "adds), not against a population value. How to read the tables and which formula "
        "each prediction uses: docs/compare.md.")
    rep.paragraph(KIND_LEGEND)
    unresolved = result.unresolved()
    if unresolved:
        rep.heading("Figures that need `--full`")
        rep.paragraph(
            "These rows' RMSE has a Monte Carlo s.e. above the target after this preset's "
            "largest number of repetitions (marked † in the tables); their points in the "
            "figures of these statistics carry error bars that wide. `fedustat compare "
            "--full` runs them until the target or 400 repetitions.")
        rep.bullets([f"{r.statistic} ({r.statistic}_error.png): {r.protocol} at eps = "
                     f"{r.epsilon:g}: RMSE {_num(r.rmse)} ± {_num(r.rmse_mc_se, 2)} "
                     f"({100 * r.rmse_mc_relative:.0f}%, {r.repetitions} repetitions)"
                     for r in unresolved])
    for st in result.statistics:
        rep.heading(f"{st}: {STATISTICS[st]}")
        rep.paragraph(result.header(st))
        headers, rows = result.table_rows(st)
        if rows:
            align = ["l", "l"] + ["r"] * (len(headers) - 2)
            rep.table(headers, rows, align)
        else:
            rep.paragraph("No protocol ran.")
        first = result.advice.get((st, s["epsilons"][0]))
        if first is not None and first.recommended is not None:
            rep.paragraph(f"Advisor at epsilon = {s['epsilons'][0]:g}: recommends "
                          f"{first.recommended.protocol} ({first.recommended.model.value} "
                          f"DP). Notes from the advisor:")
            notes = sorted({f"{p.protocol}: {n}" for p in first.predictions for n in p.notes}
                           | set(first.notes))
            rep.bullets(notes)
        notes = sorted({r.note for r in result.rows_for(st) if r.note})
        if notes:
            rep.bullets(notes)
        if rows:
            rep.figure(_error_figure(result, st), f"{st}_error",
                       f"{st}: measured RMSE (solid) and the advisor's prediction (dashed) "
                       "against epsilon")
            curve = _curve_figure(result, st)
            if curve is not None:
                rep.figure(curve, f"{st}_curves", f"{st}: the exact curve and one smoothed "
                           "release per epsilon")
    if result.skipped:
        rep.heading("Not run")
        rep.bullets(result.skipped)
    path = rep.write(out)
    (out / "results.json").write_text(json.dumps(result.to_dict(), indent=2, default=float),
                                      encoding="utf-8")
    _write_csv(result, out / "results.csv")
    result.report_path = path
    return path


def _write_csv(result: ComparisonResult, path: Path) -> None:
    import csv

    dicts = [r.to_dict() for r in result.rows]
    keys: list[str] = []
    for d in dicts:
        keys += [k for k in d if k not in keys]
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        for d in dicts:
            writer.writerow(d)
