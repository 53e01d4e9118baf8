"""``fedustat compare``: every applicable protocol side by side, with a report."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from fedustat._validation import check_budget
from fedustat.api import NOISE_CHOICES
from fedustat.catalogue import STATISTICS
from fedustat.cli._data import _simulation_only
from fedustat.cli._messages import did_you_mean
from fedustat.cli._options import _HelpFormatter
from fedustat.cli._parsing import _parse_floats, _parse_pair
from fedustat.compare import (
    COMPARED_STATISTICS,
    DEFAULT_DELTA,
    DEFAULT_EPSILONS,
    DEFAULT_PRESET,
    PRESETS,
    run_comparison,
    write_report,
)
from fedustat.protocols.ecdf.federated import FEDERATED_GRID_LIMIT


def _statistics_arg(items: Sequence[str] | None) -> list[str]:
    names: list[str] = []
    for item in items or []:
        names += [s.strip() for s in item.split(",") if s.strip()]
    if not names or names == ["all"]:
        return list(COMPARED_STATISTICS)
    allowed = set(STATISTICS)
    unknown = [s for s in names if s not in allowed]
    if unknown:
        raise SystemExit(f"error: unknown statistic(s) {', '.join(unknown)}; choose from "
                         f"{', '.join(sorted(allowed))} or all"
                         f"{did_you_mean(unknown[0], allowed)}")
    return list(dict.fromkeys(names))


def cmd_compare(args: argparse.Namespace) -> int:
    _simulation_only(args, "compare")
    preset = args.preset or DEFAULT_PRESET
    if args.grid_points is not None and args.grid_points > FEDERATED_GRID_LIMIT.points:
        # The curve statistics run every release on this grid, the federated ones too.
        raise SystemExit(f"error: --grid-points {args.grid_points} is above "
                         f"{FEDERATED_GRID_LIMIT.points}, the largest grid every curve "
                         "release of the comparison takes (the federated ECDF releases, "
                         f"run in this process: {FEDERATED_GRID_LIMIT.reason})")
    names = _statistics_arg(args.statistic)
    epsilons = _parse_floats(args.epsilons, "--epsilons")
    try:  # the range every release takes, before any run
        for value in epsilons:
            check_budget(value, "--epsilons")
    except ValueError as exc:
        raise SystemExit(f"error: {exc}".replace("math.inf", "inf")) from None
    column_bounds = {}
    for item in args.column_bounds or []:
        name, _, text = item.partition("=")
        column_bounds[name] = _parse_pair(text, "--column-bounds")
    column_values = {}
    for item in args.column_values or []:
        name, _, text = item.partition("=")
        column_values[name] = _parse_floats(text, "--column-values")
    if args.file and not args.columns:
        raise SystemExit("error: --file needs --columns naming the file's columns in the "
                         "statistic's order (score,label for auc and roc; x,y for kendall)")
    try:
        result = run_comparison(
            names, data=args.data, file=args.file,
            columns=args.columns.split(",") if args.columns else None,
            bounds=_parse_pair(args.bounds, "--bounds") if args.bounds else None,
            column_bounds=column_bounds or None, column_values=column_values or None,
            epsilons=epsilons, repetitions=args.repetitions, delta=args.delta,
            protocols=args.protocols.split(",") if args.protocols else None,
            grid_points=args.grid_points, seed=args.seed, progress=not args.no_progress,
            preset=preset, workers=args.workers)
    except (OSError, TypeError, ValueError, ImportError) as exc:
        raise SystemExit(f"error: {exc}") from None
    report = None
    if args.out:
        try:
            report = write_report(result, args.out)
        except ImportError as exc:
            raise SystemExit(f"error: the report's figures need matplotlib ({exc}); install "
                             "fedustat[plot] or pass --out ''") from None
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2, default=float))
        return 0
    print(result.summary())
    print()
    print(result.tables())
    for line in result.skipped:
        print(f"not run: {line}")
    for row in result.unresolved():
        print(f"needs --full: {row.statistic} {row.protocol} eps={row.epsilon:g} (RMSE's "
              f"Monte Carlo s.e. {100 * row.rmse_mc_relative:.0f}% after {row.repetitions} "
              "repetitions)")
    print(f"wall time {result.wall_time:.1f} s"
          + (f"; report written to {report}" if report is not None else ""))
    return 0



def add_parser(sub: Any) -> None:
    """``fedustat compare`` (its options as compare.run_comparison takes them)."""
    cmp_ = sub.add_parser(
        "compare", help="run every applicable protocol side by side and write a report",
        description="Run every protocol the advisor lists for each statistic over a grid of "
                    "epsilon with repetitions, on a bundled real data set (or a CSV/Parquet "
                    "file), print one table per statistic and write a self-contained report "
                    "(report.md, figures, results.csv/json) to --out. Without --quick "
                    f"or --full: preset {PRESETS[DEFAULT_PRESET].describe()}.",
        formatter_class=_HelpFormatter)
    cmp_.add_argument("--statistic", action="append", metavar="NAME",
                      help="statistic(s) to compare, repeatable or comma-separated: "
                           f"{', '.join(STATISTICS)}, or all (default: "
                           f"{', '.join(COMPARED_STATISTICS)})")
    cmp_.add_argument("--data", default=None,
                      help="data set name (bundled, or digits_images / digits_scores); "
                           "needs --columns unless it is the statistic's default")
    cmp_.add_argument("--file", default=None, help="a CSV (header row) or Parquet file")
    cmp_.add_argument("--columns", default=None,
                      help="comma-separated columns in the statistic's order "
                           "(score,label for auc and roc; x,y for kendall; x otherwise); "
                           "default: the bundled data set's columns for the statistic")
    cmp_.add_argument("--bounds", default=None,
                      help="public bounds LO,HI of the single continuous column")
    cmp_.add_argument("--column-bounds", action="append", metavar="COLUMN=LO,HI",
                      help="public bounds of a statistic column (score, x, y), repeatable")
    cmp_.add_argument("--column-values", action="append", metavar="COLUMN=V1,V2,...",
                      help="public values of a discrete statistic column, repeatable")
    cmp_.add_argument("--epsilons", default=",".join(f"{e:g}" for e in DEFAULT_EPSILONS),
                      help="comma-separated grid of epsilon")
    speed = cmp_.add_mutually_exclusive_group()
    for name in ("quick", "full"):
        speed.add_argument(f"--{name}", dest="preset", action="store_const", const=name,
                           help=f"preset {PRESETS[name].describe()}".replace("%", "%%"))
    cmp_.add_argument("--repetitions", type=int, default=None,
                      help="a fixed number of runs per protocol and epsilon instead of the "
                           "preset's stopping rule")
    cmp_.add_argument("--workers", type=int, default=None,
                      help="processes running repetitions (default: the CPU count; the "
                           "results do not depend on it)")
    cmp_.add_argument("--delta", type=float, default=DEFAULT_DELTA,
                      help="delta for the protocols that need one (the others deliver 0; "
                           "with 0, those are listed as not run)")
    cmp_.add_argument("--protocols", default=None,
                      help="comma-separated protocols to run (default: all applicable)")
    cmp_.add_argument("--grid-points", type=int, default=None,
                      help="thresholds of the ECDF and ROC grids (default: the preset's, "
                           "the library's for the default and --full)")
    cmp_.add_argument("--seed", type=int, default=0, help="root seed of every run")
    cmp_.add_argument("--noise", choices=list(NOISE_CHOICES), default="simulation",
                      help="only simulation: a comparison is a seeded study (use `fedustat "
                           "estimate --noise deployment` for a release)")
    cmp_.add_argument("--out", default="fedustat-report",
                      help="folder for report.md, figures/ and results.csv/json ('' = none)")
    cmp_.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    cmp_.add_argument("--format", choices=["table", "json"], default="table")
    cmp_.set_defaults(func=cmd_compare)
