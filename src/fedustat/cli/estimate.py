"""``fedustat estimate``: release U-statistics (and, through :mod:`.curve_release`, the
curves) of a bundled data set or a user's file, with its interval and guarantee."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
from pathlib import Path
from typing import Any

from fedustat import catalogue
from fedustat._validation import check_budget
from fedustat.api import DEFAULT_PROTOCOL, estimate
from fedustat.catalogue import STATISTICS, Statistic
from fedustat.cli._data import (
    NOISE_DESCRIPTIONS,
    ProtocolRefusedError,
    _all_protocols,
    _evaluates,
    _kernel,
    _protocol_params,
    _randomness_text,
    _records,
    _resolve_randomness,
)
from fedustat.cli._messages import did_you_mean, flag_hint
from fedustat.cli._options import (
    _HelpFormatter,
    add_bounds,
    add_column_domain,
    add_delta,
    add_epsilon,
    add_format,
    add_grid_points,
    add_noise,
    add_precision,
    add_protocol_parameters,
    add_seed,
)
from fedustat.cli._progress import _Progress
from fedustat.cli.budget import _budget_file, _hold_budget
from fedustat.cli.curve_release import _curve_row, _print_curve
from fedustat.privacy.budget import (
    BudgetExceededError,
    IncomparableGuaranteeError,
)
from fedustat.protocols import registry
from fedustat.stats.kernels import Kernel

#: The entries of an output row that are the release (or computed from it alone): each
#: must be a finite number (or None where the release has no such part).
RELEASE_KEYS = ("estimate", "std_error", "ci95_low", "ci95_high", "values", "fpr", "tpr",
                "pvalue", "level_intervals")


def _no_finite_release(row: dict[str, Any], protocol: str) -> ProtocolRefusedError | None:
    """The error to stop with when ``row`` holds a non-finite release value, else None.

    Protocols release finite values (clipped into the statistic's range, or refused
    before they run); this is the last check before anything is printed, so a NaN or an
    infinity is never printed as a release and the command never reports success on it.
    """
    def flat(value: Any) -> list[Any]:
        return [x for v in value for x in flat(v)] if isinstance(value, list) else [value]

    for key in RELEASE_KEYS:
        for value in flat(row.get(key)):
            number = float(value) if isinstance(value, (int, float, str)) else None
            if value is not None and not (number is not None and math.isfinite(number)):
                return ProtocolRefusedError(
                    f"{row['statistic']} with protocol {protocol}: the run gave no finite "
                    f"release ({key} is {value}); nothing is released")
    return None


def _engine_options(spec: Statistic, kernel: Kernel, args: argparse.Namespace
                    ) -> dict[str, Any]:
    """``--engine``, ``--workers`` and ``--partitions`` as estimate() arguments."""
    if args.engine is None:
        return {}
    options: dict[str, Any] = {"engine": args.engine}
    if args.workers is not None:
        options["workers"] = args.workers
    if args.partitions is not None:
        from fedustat.runtime.engine import parquet_directory  # no Dask import here

        columns = ([c.strip() for c in args.columns.split(",")] if args.columns
                   else list(kernel.columns))
        if len(columns) != kernel.n_columns:
            raise SystemExit(f"error: {spec.name} needs {kernel.n_columns} column(s) "
                             f"({', '.join(kernel.columns)}), --columns names {len(columns)}")
        options["partitions"] = parquet_directory(args.partitions, columns)
    return options


def _row(spec: Statistic, args: argparse.Namespace) -> dict[str, Any]:
    kernel = _kernel(spec, args)
    engine_options = _engine_options(spec, kernel, args)
    stored = engine_options.get("partitions")
    exact: float | None = None
    if stored is None:
        source, data = _records(spec, kernel, args)
        n = int(data.shape[0])
        if _evaluates(args):
            exact = estimate(kernel, data, epsilon=math.inf, protocol="exact").value
    else:
        # The rows stay in the partitions, read by the workers: no exact value here.
        source, data = str(args.partitions), None
        n = sum(part.n_rows_stored() for part in stored)
    params = _protocol_params(spec, kernel, args)
    try:
        registry.check_parameters(args.protocol, params)
        private = estimate(kernel, data, epsilon=args.epsilon, delta=args.delta,
                           protocol=args.protocol, noise=args.noise, rng=args.seed,
                           budget=getattr(args, "accountant", None), **engine_options, **params)
    except (BudgetExceededError, IncomparableGuaranteeError) as exc:
        raise ProtocolRefusedError(f"{spec.name} refused before any party sent anything: "
                                   f"{exc}") from None
    except (TypeError, ValueError, OverflowError, MemoryError) as exc:
        raise ProtocolRefusedError(f"{spec.name} with protocol {args.protocol}: {exc}") from None
    except (ImportError, RuntimeError) as exc:  # the engine's EngineError is a RuntimeError
        raise SystemExit(f"error: {exc}") from None
    low: float | None
    high: float | None
    try:
        low, high = private.confidence_interval(0.95)
    except ValueError:  # no error bar: no interval (None in JSON, "-" in the table)
        low = high = None
    row = {
        "statistic": spec.name, "data": source,
        "n": n, "exact": exact, "estimate": private.value,
        "std_error": private.std_error, "ci95_low": low, "ci95_high": high,
        "error": None if exact is None else private.value - exact,
        "protocol": private.protocol,
        "privacy": str(private.privacy), "bits_per_party": private.cost.bits_per_party,
        "noise": private.noise,
        "trust": [str(a) for a in private.privacy.assumptions],
    }
    if args.engine is not None:
        row["engine"] = dict(private.diagnostics["engine"])
        row["partitions"] = row["engine"]["partitions"]
    return row








def _format_table(rows: list[dict[str, Any]]) -> str:
    # The exact and error columns appear only when some row has an exact value (release-only
    # mode on a user's file leaves them out rather than printing dashes).
    with_exact = any(r["exact"] is not None for r in rows)
    headers = ["statistic", "data", "n", "exact", "estimate", "std_error", "95% CI",
               "error", "protocol", "bits/party"]
    if not with_exact:
        headers = [h for h in headers if h not in ("exact", "error")]
    lines = []
    for r in rows:
        se = "-" if r["std_error"] is None else f"{r['std_error']:.4f}"
        ci = "-" if r["ci95_low"] is None else f"[{r['ci95_low']:.4f}, {r['ci95_high']:.4f}]"
        exact = "-" if r["exact"] is None else f"{r['exact']:.4f}"
        error = "-" if r["error"] is None else f"{r['error']:+.4f}"
        cells = [r["statistic"], r["data"], str(r["n"]), exact, f"{r['estimate']:.4f}", se,
                 ci, error, r["protocol"], f"{r['bits_per_party']:g}"]
        lines.append(cells if with_exact else [c for i, c in enumerate(cells) if i not in (3, 7)])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(out)




def cmd_estimate(args: argparse.Namespace) -> int:
    names = _checked_statistics(args)
    rows, refused = _release_rows(args, names)
    if not rows:
        raise SystemExit("error: the protocol computed none of the statistics:\n  "
                         + "\n  ".join(refused))
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    elif rows[0]["statistic"] in catalogue.names("curve"):
        _print_curve(rows[0], args)
    else:
        _print_table(rows, refused, args)
    return 0


def _checked_statistics(args: argparse.Namespace) -> list[str]:
    """The statistics to release, after every check of the options that needs no data
    (and ``args.protocol``, ``args.noise`` and ``args.seed`` as the release uses them)."""
    if args.epsilon <= 0 or math.isnan(args.epsilon):
        raise SystemExit(f"error: --epsilon must be > 0, got {args.epsilon}")
    try:
        check_budget(args.epsilon, "--epsilon", allow_inf=True)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}".replace("math.inf", "inf")) from None
    if args.noise == "deployment" and args.seed is not None:
        raise SystemExit("error: --seed cannot be used with --noise deployment: deployment "
                         "noise comes from the operating system's CSPRNG and cannot be "
                         "seeded (drop --seed, or use --noise simulation)")
    if not 0 <= args.delta < 1:
        raise SystemExit(f"error: --delta must be in [0, 1), got {args.delta}")
    _resolve_randomness(args)
    if args.budget is not None and args.evaluate:
        raise SystemExit("error: --evaluate computes the exact value of your data from the raw "
                         "rows, a non-private number that no privacy budget can account for; "
                         "drop --evaluate to spend --budget on the release alone, or drop "
                         "--budget to evaluate")
    names = (catalogue.names("u-statistic") if args.statistic == "all"
             else [args.statistic])
    if args.protocol is None:
        args.protocol = (catalogue.DEFAULT_CURVE_RELEASE[args.statistic]
                         if STATISTICS[names[0]].kind == "curve" else DEFAULT_PROTOCOL)
    known = _all_protocols()
    if args.protocol not in known:
        raise SystemExit(f"error: unknown protocol {args.protocol!r}; available protocols: "
                         f"{', '.join(known)}{did_you_mean(args.protocol, known)}")
    if args.grid_points is not None and all(STATISTICS[n].kind != "curve" for n in names):
        raise SystemExit("error: --grid-points sets the grid of ecdf, quantile, median and "
                         "roc; the U-statistics have no grid")
    if args.file and len(names) > 1:
        raise SystemExit("error: with --file choose one --statistic")
    if args.engine is None and (args.workers is not None or args.partitions is not None):
        raise SystemExit("error: --workers and --partitions are for the distributed engine: "
                         "add --engine local (or --engine tcp://HOST:PORT)")
    if args.workers is not None and args.engine != "local":
        raise SystemExit("error: --workers sets the size of a local cluster (--engine "
                         "local); a scheduler at an address has the workers it has")
    if args.workers is not None and args.workers < 1:
        raise SystemExit(f"error: --workers must be at least 1, got {args.workers}")
    if args.partitions is not None and (len(names) > 1 or args.file or args.data):
        raise SystemExit("error: with --partitions choose one --statistic, and give no "
                         "--file or --data (the partitions are the data)")
    if args.evaluate and args.partitions is not None:
        raise SystemExit("error: --evaluate computes the exact value from the rows in this "
                         "process; with --partitions the rows stay with the workers (use "
                         "--file to evaluate)")
    if not _evaluates(args) and (math.isinf(args.epsilon) or args.protocol == "exact"):
        # epsilon = inf and the exact protocol release the exact value itself: on a user's
        # own data that is evaluation, not a release, and must be asked for by name.
        confirm = ("it is not computed on --partitions" if args.partitions is not None
                   else "add --evaluate to confirm that this is an evaluation, not a release")
        raise SystemExit("error: --epsilon inf and --protocol exact print the exact, "
                         f"non-private value of your data; {confirm}")
    return names


def _release_rows(args: argparse.Namespace, names: list[str]
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """One output row per statistic released, and why each other one was refused."""
    budget_file = None if args.budget is None else _budget_file(Path(args.budget))
    rows, refused = [], []
    # With --budget the file stays locked from here to the last commit: each release is
    # checked against the ledger as it is now, reserved in it before any party runs, and
    # committed after; a release that fails has its reservation removed (attempt()).
    # Progress goes to stderr, on a terminal or with --progress only: stdout (a table or
    # JSON) stays the release alone.
    show = sys.stderr.isatty() if args.progress is None else args.progress
    with contextlib.ExitStack() as held:
        args.accountant = None if budget_file is None else _hold_budget(held, budget_file)
        bar = held.enter_context(_Progress(len(names), show, unit="statistic"))
        for name in names:
            bar.describe(name)
            try:
                spec = STATISTICS[name]
                # A U-statistic protocol refuses a kernel itself, after checking its
                # parameters; a curve and a U-statistic protocol (or the reverse) are
                # refused here.
                curves = spec.kind == "curve" or catalogue.is_curve_protocol(args.protocol)
                refusal = catalogue.protocol_refusal(name, args.protocol) if curves else None
                if refusal is not None:
                    raise ProtocolRefusedError(f"{name} with protocol {args.protocol}: "
                                               f"{refusal}")
                with (contextlib.nullcontext() if args.accountant is None
                      else args.accountant.attempt()):
                    row = _curve_row(spec, args) if spec.kind == "curve" else _row(spec, args)
                # Checked after the budget's attempt: a release the parties' data went into
                # stays charged even when it is not printed.
                failed = _no_finite_release(row, args.protocol)
                if failed is not None:
                    raise failed
                rows.append(row)
            except ProtocolRefusedError as exc:
                if len(names) == 1:
                    raise SystemExit(f"error: {exc}") from None
                refused.append(str(exc))
            bar.advance()
    return rows, refused


def _print_table(rows: list[dict[str, Any]], refused: list[str],
                 args: argparse.Namespace) -> None:
    """U-statistic releases as a table, with their noise, guarantee and trust."""
    what = ("Exact statistics and the" if any(r["exact"] is not None for r in rows)
            else "The")
    print(f"{what} {args.protocol} release "
          f"(epsilon={args.epsilon:g}, delta={args.delta:g}{_randomness_text(args)})")
    print(_format_table(rows))
    print("std_error and the 95% CI describe the error the protocol adds to the exact "
          "value of these data; they are computed from public quantities only.")
    for kind in dict.fromkeys(r["noise"] for r in rows):
        print(f"noise: {NOISE_DESCRIPTIONS[kind]}")
    for text in dict.fromkeys(r["privacy"] for r in rows):
        print(f"privacy: {text}")
    trust = list(dict.fromkeys(a for r in rows for a in r["trust"]))
    if trust:
        print("trust assumptions: " + "; ".join(trust))
    elif any(r["noise"] != "none" for r in rows):
        print("trust assumptions: none stated by the protocol beyond its privacy model")
    for info in dict.fromkeys(json.dumps(r["engine"]) for r in rows if "engine" in r):
        e = json.loads(info)
        print(f"engine: {e['kind']} at {e['scheduler']}, {e['workers']} worker(s), "
              f"{e['partitions']} partition(s)")
    if args.partitions is not None:
        print("exact: not computed (the rows stay in the partitions, read by the "
              "workers only)")
    elif not _evaluates(args):
        print("exact: not shown (release only, for your own data); --evaluate also "
              "computes the exact value from the raw rows, which is not private")
    for reason in refused:
        print(f"not computed: {flag_hint(reason)}")


def add_parser(sub: Any) -> None:
    """``fedustat estimate``."""
    est = sub.add_parser(
        "estimate", help="compute a statistic exactly and with a private protocol",
        description="Release a statistic of a CSV/Parquet file with a private protocol "
                    "(the release, its 95% interval and its guarantee; --evaluate adds the "
                    "exact value), or of a bundled demo data set, where the exact value is "
                    "shown beside the release.",
        formatter_class=_HelpFormatter)
    est.add_argument("--statistic", choices=["all", *STATISTICS], default="all",
                     help="which statistic: " + "; ".join(
                         f"{s.name} = {s.description}" for s in STATISTICS.values())
                     + "; all = every U-statistic (" + ", ".join(catalogue.names("u-statistic"))
                     + ")")
    _add_data_options(est)
    add_epsilon(est)
    add_delta(est)
    est.add_argument("--protocol", default=None,
                     help="protocol name (see `fedustat protocols`); default: "
                          f"{DEFAULT_PROTOCOL} for the U-statistics, and for the curves "
                          + ", ".join(f"{k}: {v}" for k, v in
                                      catalogue.DEFAULT_CURVE_RELEASE.items()))
    add_protocol_parameters(est, what="a protocol parameter (repeatable), e.g. --param k=32 "
                                      "for ldp-quantized or --param d=64 for ldp-tree; see "
                                      "the protocol's page in docs/protocols/")
    add_column_domain(
        est, bounds_help="public bounds of a continuous kernel column (repeatable), for "
                         "protocols that quantize records, e.g. --column-bounds score=0,1; "
                         "bundled defaults are used when --data/--file/--columns are not "
                         "given",
        values_help="public list of the values of a discrete kernel column (repeatable), "
                    "e.g. --column-values x=0,1,2; bundled defaults are used when "
                    "--data/--file/--columns are not given")
    add_bounds(est, what="public bounds LO,HI of the values for gini and variance, and of "
                         "the grid of ecdf, quantile, median and roc")
    add_grid_points(est)
    add_precision(est, what="fixed-point precision, for protocols whose constructor takes "
                            "'precision' (an error for the others); default: the protocol's "
                            "own")
    _add_randomness_options(est)
    add_format(est)
    est.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="a progress bar over the statistics on stderr (default: only when "
                          "stderr is a terminal; never in the JSON on stdout)")
    _add_engine_options(est)
    est.set_defaults(func=cmd_estimate)


def _add_data_options(est: argparse.ArgumentParser) -> None:
    """Where estimate's rows come from, and whether the exact value is shown."""
    est.add_argument("--data", default=None,
                     help="bundled data set (see `fedustat datasets`); default: the "
                          "statistic's own bundled set")
    est.add_argument("--file", default=None,
                     help="a CSV (header row) or Parquet file instead of bundled data; only "
                          "the release, its interval and guarantee are printed (see "
                          "--evaluate)")
    est.add_argument("--budget", default=None, metavar="FILE",
                     help="a privacy budget file (made by `fedustat budget FILE --epsilon "
                          "E`): each release is checked against it before any party sends "
                          "anything, refused if it would exceed the budget, and recorded in "
                          "the file when released")
    est.add_argument("--evaluate", action="store_true",
                     help="evaluation only: also compute the exact (non-private) value of "
                          "--file's raw rows and the release's error. The output then "
                          "reveals the raw data's statistic and is NOT private; never share "
                          "it. Bundled data sets are public demo data and always show the "
                          "exact value")
    est.add_argument("--columns", default=None,
                     help="comma-separated column names in the kernel's order, e.g. "
                          "score,label for auc or x,y for kendall (default: the bundled "
                          "set's columns for the statistic)")


def _add_randomness_options(est: argparse.ArgumentParser) -> None:
    add_noise(est, default=None,
              what="deployment (the default on --file and --partitions): OS CSPRNG for "
                   "shares, masks and keys, fixed-work exact samplers for the noise "
                   "(running time independent of the value; refuses --seed); simulation "
                   "(the default on bundled data, and with --seed): seeded NumPy draws, "
                   "fast and reproducible, a study, NOT a protection")
    add_seed(est, default=None,
             what="seed of a simulation study (asks for simulation noise; default: 0 on "
                  "bundled data, none on your own data; not allowed with --noise "
                  "deployment)")


def _add_engine_options(est: argparse.ArgumentParser) -> None:
    est.add_argument("--engine", default=None, metavar="local|tcp://HOST:PORT",
                     help="run the protocol's batches of parties on a Dask cluster: 'local' "
                          "starts one for this run, an address uses a running scheduler "
                          "(needs pip install 'fedustat[engine]'; see docs/engine.md); default: "
                          "every party simulated in this process")
    est.add_argument("--workers", type=int, default=None,
                     help="worker processes of --engine local (default 2)")
    est.add_argument("--partitions", default=None, metavar="DIR",
                     help="with --engine: a directory of Parquet files, one partition of "
                          "parties each (columns named as the statistic's, or --columns); "
                          "the rows are read by the workers only, so no exact value is "
                          "computed")
