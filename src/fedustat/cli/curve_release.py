"""``fedustat estimate`` for a curve statistic (ecdf, quantile, median, roc, hl): the
grid, the release and its text or JSON."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np

from fedustat._inputs import noise_source
from fedustat.catalogue import Statistic
from fedustat.cli._data import (
    NOISE_DESCRIPTIONS,
    ProtocolRefusedError,
    _evaluates,
    _load_columns,
    _randomness_text,
)
from fedustat.cli._options import curve_grid_points
from fedustat.cli._parsing import _parse_floats, _parse_pair, _parse_params
from fedustat.curve_dispatch import release_curve
from fedustat.curves import ROC_GRID_LIMIT
from fedustat.privacy.budget import (
    BudgetExceededError,
    IncomparableGuaranteeError,
)
from fedustat.protocols.ecdf.federated import FEDERATED_GRID_LIMIT
from fedustat.protocols.ecdf.private_quantiles import QUANTILE_GRID_LIMIT
from fedustat.protocols.ecdf.release import ECDF_GRID_LIMIT, GridLimit

#: Grid points shown in the table of an ECDF or ROC release (JSON has them all).
SHOWN_POINTS = 9


def _curve_options(spec: Statistic, args: argparse.Namespace) -> dict[str, Any]:
    """The grid (thresholds) and quantile levels of a curve release, from --bounds and
    --param; options that belong to U-statistic protocols are refused by name."""
    for flag, given in (("--column-bounds", args.column_bounds),
                        ("--column-values", args.column_values),
                        ("--precision", args.precision), ("--engine", args.engine),
                        ("--delta", args.delta)):
        if given:
            raise ProtocolRefusedError(
                f"{spec.name} with protocol {args.protocol}: {flag} is not an option of the "
                "curve releases (pure epsilon-DP; the grid is --bounds LO,HI or --param "
                "thresholds=T1,T2,...)")
    params = _parse_params(args.param)
    grid_flag = _grid_points_spelling(params, args)
    unknown = set(params) - {"thresholds", "levels", "grid_points"}
    if unknown:
        raise ProtocolRefusedError(
            f"{spec.name} with protocol {args.protocol}: unknown --param "
            f"{', '.join(sorted(unknown))}; curve releases take thresholds=T1,T2,..., "
            "grid_points=N and (quantile) levels=Q1,Q2,...")
    options: dict[str, Any] = {}
    if "levels" in params:
        options["levels"] = _parse_floats(str(params["levels"]), "--param levels")
    if spec.curve == "hl":
        if "thresholds" in params or grid_flag or args.bounds:
            raise ProtocolRefusedError(
                "hl with protocol dp-ecdf-hl: its grid is fixed by 003 Alg. 2 (probabilities "
                "in [0, 1]); it takes no --bounds, thresholds or grid_points")
        return options
    if "thresholds" in params:
        if grid_flag:
            raise SystemExit(f"error: {grid_flag} places points on --bounds; with --param "
                             "thresholds=T1,T2,... the grid is given point by point (drop one)")
        options["thresholds"] = _parse_floats(str(params["thresholds"]), "--param thresholds")
        return options
    if args.bounds:
        bounds = _parse_pair(args.bounds, "--bounds")
    elif args.file or args.data or args.columns:
        raise SystemExit(f"error: {spec.name} on your own columns needs their public bounds "
                         "for the grid: --bounds LO,HI (or --param thresholds=T1,T2,...)")
    else:
        bounds = spec.default_bounds
    # The default is the Python function's own (fedustat.ecdf, roc_curve, quantile,
    # median), so the same question gets the same grid from both.
    points = params.get("grid_points", curve_grid_points(spec.curve))
    flag = grid_flag or "--grid-points"
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise SystemExit(f"error: {flag} must be an integer >= 2, got {points!r}")
    try:  # before the grid is built
        _curve_grid_limit(spec, args.protocol).check(points, flag)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    if spec.curve in ("quantile", "median") and args.protocol == "dp-quantiles":
        # The bounds themselves, as in fedustat.quantile(x, q, bounds=...): its default
        # answers anywhere in them (the exponential mechanism over the gaps between the
        # records, or JointExp on a fine grid); grid_points only places the error bar's
        # atoms (fedustat.quantile's default unless given).
        options["bounds"] = bounds
        options["grid_points"] = points
        return options
    options["thresholds"] = np.linspace(bounds[0], bounds[1], points)
    return options


def _grid_points_spelling(params: dict[str, Any], args: argparse.Namespace) -> str | None:
    """Move --grid-points N into ``params`` (as ``grid_points``) and say how the grid size
    was spelled: "--grid-points", "--param grid_points" (its documented alias) or None."""
    given = getattr(args, "grid_points", None)
    if given is not None and "grid_points" in params:
        raise SystemExit("error: give the grid's size once: --grid-points N (--param "
                         "grid_points=N is the same option)")
    if given is not None:
        params["grid_points"] = given
        return "--grid-points"
    return "--param grid_points" if "grid_points" in params else None


def _curve_grid_limit(spec: Statistic, protocol: str) -> GridLimit:
    """The largest grid the release that serves ``spec`` with ``protocol`` takes."""
    if protocol in ("ecdf-secagg", "ecdf-fss"):
        return FEDERATED_GRID_LIMIT
    if spec.curve in ("quantile", "median"):
        return QUANTILE_GRID_LIMIT
    return ROC_GRID_LIMIT if spec.curve == "roc" else ECDF_GRID_LIMIT


def _curve_row(spec: Statistic, args: argparse.Namespace) -> dict[str, Any]:
    """A curve statistic released by a curve release (``fedustat.curve_dispatch``)."""
    options = _curve_options(spec, args)
    source, columns = _load_columns(args, spec)
    if len(columns) != len(spec.columns):
        raise SystemExit(f"error: {spec.name} needs {len(spec.columns)} column(s) "
                         f"({', '.join(spec.columns)}), got {len(columns)}")
    try:
        release = release_curve(spec.name, columns, epsilon=args.epsilon,
                                protocol=args.protocol, rng=args.seed,
                                noise=noise_source(args.noise, args.seed),
                                budget=getattr(args, "accountant", None), **options)
        # The exact curve: the central release at epsilon = inf (the federated releases
        # are private only).
        exact = (release_curve(spec.name, columns, epsilon=math.inf, **options)
                 if _evaluates(args) else None)
    except (BudgetExceededError, IncomparableGuaranteeError) as exc:
        raise ProtocolRefusedError(f"{spec.name} refused before any party sent anything: "
                                   f"{exc}") from None
    except (TypeError, ValueError, OverflowError, MemoryError) as exc:
        raise ProtocolRefusedError(f"{spec.name} with protocol {args.protocol}: {exc}") from None
    privacy = release.privacy
    # Curve results name it ``noise``; the protocol-layer curves ``noise_kind``.
    noise_kind = ("none" if math.isinf(args.epsilon)
                  else getattr(release, "noise", None) or release.noise_kind)
    row: dict[str, Any] = {
        "statistic": spec.name, "data": source, "n": int(np.asarray(columns[0]).size),
        "protocol": args.protocol, "privacy": str(privacy), "noise": noise_kind,
        "trust": [str(a) for a in privacy.assumptions]}
    return row | _curve_values(spec, release, exact)


def _floats(values: Any) -> list[float | str]:
    """Numbers for JSON: finite ones as floats, the ROC grid's -inf as the text "-inf"."""
    return [float(v) if math.isfinite(v) else str(float(v))
            for v in np.atleast_1d(np.asarray(values, dtype=np.float64))]


def _curve_values(spec: Statistic, release: Any, exact: Any) -> dict[str, Any]:
    """The released curve (and the exact one) as JSON-ready lists, and one summary value
    (median, the AUC, H) where the statistic has one."""
    def quantiles(result: Any) -> tuple[list[float | str], list[float | str]]:
        """(levels, values) of a QuantilesResult, QuantileEstimate or Quantiles."""
        if hasattr(result, "levels"):
            return _floats(result.levels), _floats(result.values)
        return _floats(getattr(result, "level", getattr(result, "q", None))), \
            _floats(result.value)

    if spec.curve == "ecdf":
        std_error = getattr(release, "std_error", None)
        return {"thresholds": _floats(release.thresholds), "values": _floats(release.values),
                "exact_values": None if exact is None else _floats(exact.values),
                "std_error": None if std_error is None else _floats(std_error),
                "estimate": None, "exact": None}
    if spec.curve in ("quantile", "median"):
        levels, values = quantiles(release)
        exact_values = None if exact is None else quantiles(exact)[1]
        single = spec.curve == "median"
        return {"levels": levels, "values": values, "exact_values": exact_values,
                "level_intervals": _level_intervals(release),
                "estimate": values[0] if single else None,
                "exact": exact_values[0] if single and exact_values else None}
    if spec.curve == "roc":
        low, high = release.auc.confidence_interval(0.95) if release.auc.std_error else (
            None, None)
        return {"thresholds": _floats(release.thresholds), "fpr": _floats(release.fpr),
                "tpr": _floats(release.tpr),
                "exact_fpr": None if exact is None else _floats(exact.fpr),
                "exact_tpr": None if exact is None else _floats(exact.tpr),
                "estimate": float(release.auc.value), "std_error": release.auc.std_error,
                "ci95_low": None if low is None else float(low),
                "ci95_high": None if high is None else float(high),
                "exact": None if exact is None else float(exact.auc.value)}
    return {"estimate": float(release.statistic), "pvalue": float(release.pvalue),
            "df": int(release.df), "cuts": _floats(release.cuts),
            "exact": None if exact is None else float(exact.statistic),
            "exact_pvalue": None if exact is None else float(exact.pvalue)}


def _level_intervals(release: Any) -> list[list[float]] | None:
    """Per level, the 95% interval of levels at which the release is an exact quantile
    (``fedustat.curves.level_error_bound``); None for a release without one (also
    JointExp's, the default for several levels on bounds, which has no data-independent
    bound)."""
    if not hasattr(release, "level_interval"):
        return None
    # One level (floats) or several (arrays, one bound for all).
    low, high = release.level_interval(0.95)
    out = [[float(a), float(b)]
           for a, b in zip(np.atleast_1d(low), np.atleast_1d(high), strict=True)]
    return None if any(math.isnan(v) for pair in out for v in pair) else out


def _threshold_text(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:g}"


def _print_curve(row: dict[str, Any], args: argparse.Namespace) -> None:
    """A curve release as text: a few points of the curve beside the exact ones."""
    print(f"{row['statistic']} on {row['data']} (n={row['n']}): the {row['protocol']} "
          f"release (epsilon={args.epsilon:g}{_randomness_text(args)})")
    statistic = row["statistic"]

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.4f}"

    if statistic in ("ecdf", "roc"):
        size = len(row["thresholds"])
        shown = sorted({round(i * (size - 1) / (SHOWN_POINTS - 1))
                        for i in range(SHOWN_POINTS)})
        if statistic == "ecdf":
            headers = ["threshold", "exact F", "released F", "95% CI"]
            half = [None if row["std_error"] is None else 1.959963984540054 * row["std_error"][i]
                    for i in range(size)]
            lines = [[_threshold_text(row["thresholds"][i]),
                      cell(row["exact_values"][i] if row["exact_values"] else None),
                      cell(row["values"][i]),
                      "-" if half[i] is None else  # a CDF's interval lies in [0, 1]
                      f"[{max(0.0, row['values'][i] - half[i]):.4f}, "
                      f"{min(1.0, row['values'][i] + half[i]):.4f}]"]
                     for i in shown]
        else:
            headers = ["threshold", "exact FPR", "exact TPR", "released FPR", "released TPR"]
            lines = [[_threshold_text(row["thresholds"][i]),
                      cell(row["exact_fpr"][i] if row["exact_fpr"] else None),
                      cell(row["exact_tpr"][i] if row["exact_tpr"] else None),
                      cell(row["fpr"][i]), cell(row["tpr"][i])] for i in shown]
        print(f"{len(shown)} of its {size} grid points (--format json gives all):")
    elif statistic in ("quantile", "median"):
        # A quantile errs in level, not in value: its error bar is the levels it answers.
        headers = ["level", "exact", "released", "an exact quantile at levels (95%)"]
        intervals = row["level_intervals"]
        lines = [[f"{q:g}", cell(row["exact_values"][i] if row["exact_values"] else None),
                  cell(row["values"][i]),
                  "-" if intervals is None else
                  f"[{intervals[i][0]:.3f}, {intervals[i][1]:.3f}]"]
                 for i, q in enumerate(row["levels"])]
    else:
        headers = ["", "exact", "released"]
        lines = [["H", cell(row["exact"]), cell(row["estimate"])],
                 ["p-value", cell(row["exact_pvalue"]), cell(row["pvalue"])]]
    if not _evaluates(args):  # release only: no exact columns (as for the U-statistics)
        keep = [i for i, h in enumerate(headers) if not h.startswith("exact")]
        headers = [headers[i] for i in keep]
        lines = [[line[i] for i in keep] for line in lines]
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    print("  ".join("-" * w for w in widths))
    for line in lines:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    if statistic == "roc":
        exact = f"; exact: {cell(row['exact'])}" if _evaluates(args) else ""
        interval = ("" if row["ci95_low"] is None else
                    f" (95% CI [{row['ci95_low']:.4f}, {row['ci95_high']:.4f}])")
        print(f"AUC of the released curve: {row['estimate']:.4f}{interval}{exact}")
    print(f"noise: {NOISE_DESCRIPTIONS[row['noise']]}")
    print(f"privacy: {row['privacy']}")
    if row["trust"]:
        print("trust assumptions: " + "; ".join(row["trust"]))
    if not _evaluates(args):
        print("exact: not shown (release only, for your own data); --evaluate also "
              "computes the exact value from the raw rows, which is not private")

