"""The ``fedustat`` command line.

``fedustat estimate`` computes statistics from a CSV/Parquet file or a bundled data set,
exactly and with a private protocol; ``fedustat datasets`` and ``fedustat protocols``
list what is available.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedustat import datasets
from fedustat.api import estimate
from fedustat.protocols import registry
from fedustat.stats import kernels
from fedustat.stats.kernels import Kernel


@dataclass(frozen=True)
class StatisticSpec:
    """How the command line builds a statistic: its kernel and default bundled data."""

    name: str
    help: str
    make_kernel: Callable[[tuple[float, float] | None], Kernel]
    default_data: str
    default_columns: tuple[str, ...]
    default_bounds: tuple[float, float] | None = None
    needs_bounds: bool = False
    # Public description of the default columns' values, by kernel column, for protocols
    # that quantize or randomize records (e.g. ldp-quantized): bounds of continuous
    # columns and the value lists of discrete ones. Never derived from the data.
    column_bounds: dict[str, tuple[float, float]] = field(default_factory=dict)
    column_values: dict[str, list[float]] = field(default_factory=dict)


def _bounded(factory: Callable[[tuple[float, float]], Kernel]):
    def make(bounds: tuple[float, float] | None) -> Kernel:
        if bounds is None:
            raise SystemExit("error: this statistic needs --bounds LO,HI: public bounds on the "
                             "values (they fix the sensitivity; taking them from the data "
                             "would leak it)")
        return factory(bounds)
    return make


# Bounds for bundled columns are physiologically plausible public ranges, not the data's
# own minimum and maximum (which would leak information about the parties).
STATISTICS: dict[str, StatisticSpec] = {
    spec.name: spec for spec in [
        StatisticSpec("auc", "area under the ROC curve of a score for a binary label",
                      lambda b: kernels.auc_kernel(), "breast_cancer_scores",
                      ("score", "label"), column_bounds={"score": (0.0, 1.0)}),
        StatisticSpec("kendall", "Kendall's tau-a between two variables",
                      lambda b: kernels.kendall_tau_kernel("a"), "diabetes_pairs",
                      ("bmi", "progression"),
                      column_bounds={"x": (10.0, 60.0), "y": (0.0, 400.0)}),
        StatisticSpec("gini", "Gini mean difference of a bounded variable",
                      _bounded(kernels.gini_kernel), "diabetes_pairs", ("bmi",),
                      default_bounds=(10.0, 60.0), needs_bounds=True),
        StatisticSpec("variance", "sample variance of a bounded variable",
                      _bounded(kernels.variance_kernel), "diabetes_pairs", ("bmi",),
                      default_bounds=(10.0, 60.0), needs_bounds=True),
        StatisticSpec("duplicate", "duplicate-pair ratio of a categorical variable",
                      lambda b: kernels.duplicate_pair_kernel(), "wine_cultivars", ("cultivar",),
                      column_values={"x": [0.0, 1.0, 2.0]}),
        StatisticSpec("renyi2", "Rényi-2 (collision) entropy of a categorical variable",
                      lambda b: kernels.renyi2_entropy_kernel(), "wine_cultivars", ("cultivar",),
                      column_values={"x": [0.0, 1.0, 2.0]}),
        StatisticSpec("vus", "volume under the ROC surface of a score for 3 ordered classes",
                      lambda b: kernels.vus_kernel(), "diabetes_pairs",
                      ("bmi", "progression_class"), column_bounds={"score": (10.0, 60.0)},
                      column_values={"class": [0.0, 1.0, 2.0]}),
    ]
}


def _parse_pair(text: str, what: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"error: {what} must be two numbers separated by a comma, "
                         f"got {text!r}") from None
    return lo, hi


def _parse_params(items: Sequence[str] | None) -> dict[str, Any]:
    """``key=value`` pairs for protocol parameters; numbers become int or float."""
    params: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --param must look like key=value, got {item!r}")
        value: Any = text
        for convert in (int, float):
            try:
                value = convert(text)
                break
            except ValueError:
                continue
        params[key.strip()] = value
    return params


def _load_columns(args: argparse.Namespace, spec: StatisticSpec) -> tuple[str, list[np.ndarray]]:
    columns = tuple(args.columns.split(",")) if args.columns else None
    if args.file:
        if columns is None:
            raise SystemExit(f"error: --file needs --columns naming the file's columns for "
                             f"{spec.name} (in order: {', '.join(spec.default_columns)})")
        try:
            table = datasets.read_table(args.file, columns=list(columns))
        except (OSError, ValueError, ImportError) as exc:
            raise SystemExit(f"error: {exc}") from None
        return f"{args.file}:{','.join(columns)}", [table[c] for c in columns]
    name = args.data or spec.default_data
    try:
        data = datasets.load(name)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    columns = columns or spec.default_columns
    try:
        return f"{name}:{','.join(columns)}", [data[c] for c in columns]
    except KeyError as exc:
        raise SystemExit(f"error: {exc.args[0]}") from None


class ProtocolRefusedError(Exception):
    """The chosen protocol cannot compute this statistic (or its parameters are wrong)."""


def _column_domain(args: argparse.Namespace, spec: StatisticSpec,
                   kernel: Kernel) -> dict[str, Any]:
    """``bounds`` / ``domain`` keyword arguments for protocols whose factory takes them."""
    accepted = inspect.signature(registry.factory(args.protocol)).parameters
    uses_defaults = not args.file and not args.columns and not args.data
    bounds = dict(spec.column_bounds) if uses_defaults else {}
    values = dict(spec.column_values) if uses_defaults else {}
    for item in args.column_bounds or []:
        name, _, text = item.partition("=")
        bounds[name] = _parse_pair(text, "--column-bounds")
    for item in args.column_values or []:
        name, _, text = item.partition("=")
        try:
            values[name] = [float(v) for v in text.split(",")]
        except ValueError:
            raise SystemExit(f"error: --column-values must look like column=v1,v2,...; "
                             f"got {item!r}") from None
    unknown = (set(bounds) | set(values)) - set(kernel.columns)
    if unknown:
        raise SystemExit(f"error: {spec.name}'s columns are {', '.join(kernel.columns)}; "
                         f"--column-bounds/--column-values name {', '.join(sorted(unknown))}")
    params: dict[str, Any] = {}
    if bounds and "bounds" in accepted:
        params["bounds"] = bounds
    if values and "domain" in accepted:
        params["domain"] = values
    return params


def _row(spec: StatisticSpec, args: argparse.Namespace) -> dict[str, Any]:
    bounds = _parse_pair(args.bounds, "--bounds") if args.bounds else spec.default_bounds
    if args.file and spec.needs_bounds and not args.bounds:
        raise SystemExit(f"error: {spec.name} on a file needs --bounds LO,HI (public bounds)")
    kernel = spec.make_kernel(bounds)
    source, cols = _load_columns(args, spec)
    if len(cols) != kernel.n_columns:
        raise SystemExit(f"error: {spec.name} needs {kernel.n_columns} column(s) "
                         f"({', '.join(kernel.columns)}), got {len(cols)}")
    try:
        data = kernel.pack(*cols)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {spec.name} on {source}: {exc}") from None
    exact = estimate(kernel, data, epsilon=math.inf, protocol="exact")
    params = _column_domain(args, spec, kernel) | _parse_params(args.param)
    try:
        private = estimate(kernel, data, epsilon=args.epsilon, delta=args.delta,
                           protocol=args.protocol, rng=args.seed, **params)
    except (TypeError, ValueError) as exc:
        raise ProtocolRefusedError(f"{spec.name} with protocol {args.protocol}: {exc}") from None
    try:
        low, high = private.confidence_interval(0.95)
    except ValueError:
        low = high = math.nan
    return {
        "statistic": spec.name, "data": source,
        "n": int(data.shape[0]), "exact": exact.value, "estimate": private.value,
        "std_error": private.std_error, "ci95_low": low, "ci95_high": high,
        "error": private.value - exact.value, "protocol": private.protocol,
        "privacy": str(private.privacy), "bits_per_party": private.cost.bits_per_party,
    }


def _format_table(rows: list[dict[str, Any]]) -> str:
    headers = ["statistic", "data", "n", "exact", "estimate", "std_error", "95% CI",
               "error", "protocol", "bits/party"]
    lines = []
    for r in rows:
        se = "-" if r["std_error"] is None else f"{r['std_error']:.4f}"
        ci = "-" if math.isnan(r["ci95_low"]) else f"[{r['ci95_low']:.4f}, {r['ci95_high']:.4f}]"
        lines.append([r["statistic"], r["data"], str(r["n"]),
                      f"{r['exact']:.4f}", f"{r['estimate']:.4f}", se, ci,
                      f"{r['error']:+.4f}", r["protocol"], f"{r['bits_per_party']:g}"])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(out)


def cmd_estimate(args: argparse.Namespace) -> int:
    if args.epsilon <= 0 or math.isnan(args.epsilon):
        raise SystemExit(f"error: --epsilon must be > 0, got {args.epsilon}")
    if not 0 <= args.delta < 1:
        raise SystemExit(f"error: --delta must be in [0, 1), got {args.delta}")
    known = [entry.name for entry in registry.available()]
    if args.protocol not in known:
        raise SystemExit(f"error: unknown protocol {args.protocol!r}; available protocols: "
                         f"{', '.join(known)}")
    names = list(STATISTICS) if args.statistic == "all" else [args.statistic]
    if args.file and len(names) > 1:
        raise SystemExit("error: with --file choose one --statistic")
    rows, refused = [], []
    for name in names:
        try:
            rows.append(_row(STATISTICS[name], args))
        except ProtocolRefusedError as exc:
            if len(names) == 1:
                raise SystemExit(f"error: {exc}") from None
            refused.append(str(exc))
    if not rows:
        raise SystemExit("error: the protocol computed none of the statistics:\n  "
                         + "\n  ".join(refused))
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        print(f"Exact statistics and the {args.protocol} release "
              f"(epsilon={args.epsilon:g}, delta={args.delta:g}, seed={args.seed})")
        print(_format_table(rows))
        print("std_error and the 95% CI describe the error the protocol adds to the exact "
              "value of these data; they are computed from public quantities only.")
        for reason in refused:
            print(f"not computed: {reason}")
    return 0


def cmd_datasets(args: argparse.Namespace) -> int:
    for name in datasets.available():
        ds = datasets.load(name)
        print(f"{name}  ({ds.n} rows; task: {ds.task})")
        print(f"    columns: {', '.join(ds.column_names)}")
        print(f"    {ds.description.splitlines()[0] if ds.description else ''}")
    return 0


def cmd_protocols(args: argparse.Namespace) -> int:
    for entry in registry.available():
        print(f"{entry.name:<22} {entry.model.value:<8} {entry.summary}  [{entry.source}]")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedustat",
        description="Private statistics over data held by many parties.")
    sub = parser.add_subparsers(dest="command", required=True)

    est = sub.add_parser(
        "estimate", help="compute a statistic exactly and with a private protocol",
        description="Compute a statistic from a bundled data set or a CSV/Parquet file, "
                    "exactly and with a private protocol, and print a table.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    est.add_argument("--statistic", choices=["all", *STATISTICS], default="all",
                     help="which statistic: " + "; ".join(
                         f"{s.name} = {s.help}" for s in STATISTICS.values()))
    est.add_argument("--data", default=None,
                     help="bundled data set (see `fedustat datasets`); default: the "
                          "statistic's own bundled set")
    est.add_argument("--file", default=None,
                     help="a CSV (header row) or Parquet file instead of bundled data")
    est.add_argument("--columns", default=None,
                     help="comma-separated column names in the kernel's order, e.g. "
                          "score,label for auc or x,y for kendall")
    est.add_argument("--epsilon", type=float, default=1.0, help="privacy budget epsilon > 0")
    est.add_argument("--delta", type=float, default=0.0, help="privacy parameter delta in [0, 1)")
    est.add_argument("--protocol", default="central-laplace",
                     help="protocol name (see `fedustat protocols`)")
    est.add_argument("--param", action="append", metavar="KEY=VALUE",
                     help="a protocol parameter (repeatable), e.g. --param k=32 for "
                          "ldp-quantized or --param d=1024 for ldp-tree; see the "
                          "protocol's page in docs/protocols/")
    est.add_argument("--column-bounds", action="append", metavar="COLUMN=LO,HI",
                     help="public bounds of a continuous kernel column (repeatable), for "
                          "protocols that quantize records, e.g. --column-bounds score=0,1; "
                          "bundled defaults are used when --data/--file/--columns are not "
                          "given")
    est.add_argument("--column-values", action="append", metavar="COLUMN=V1,V2,...",
                     help="public list of the values of a discrete kernel column "
                          "(repeatable), e.g. --column-values x=0,1,2")
    est.add_argument("--bounds", default=None,
                     help="public bounds LO,HI of the values for gini and variance")
    est.add_argument("--seed", type=int, default=0, help="seed of the simulation's randomness")
    est.add_argument("--format", choices=["table", "json"], default="table",
                     help="output format")
    est.set_defaults(func=cmd_estimate)

    ds = sub.add_parser("datasets", help="list the bundled data sets")
    ds.set_defaults(func=cmd_datasets)
    pr = sub.add_parser("protocols", help="list the available protocols")
    pr.set_defaults(func=cmd_protocols)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
