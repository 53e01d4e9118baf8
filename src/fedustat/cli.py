"""The ``fedustat`` command line.

``fedustat estimate`` releases statistics of a CSV/Parquet file with a private protocol
(the exact value only with ``--evaluate``), or of a bundled demo data set beside their
exact value; ``fedustat advise`` predicts every protocol's error
and cost and recommends one; ``fedustat compare`` runs every applicable protocol side by
side and writes a report; ``fedustat datasets`` and ``fedustat protocols`` list what is
available.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import math
import re
import resource
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedustat import __version__, catalogue, datasets
from fedustat._inputs import noise_source
from fedustat._validation import check_budget
from fedustat.advisor import TRUST_MODELS, advise
from fedustat.api import DEFAULT_PROTOCOL, NOISE_CHOICES, estimate
from fedustat.catalogue import STATISTICS, Statistic
from fedustat.compare import (
    COMPARED_STATISTICS,
    DEFAULT_DELTA,
    DEFAULT_EPSILONS,
    DEFAULT_PRESET,
    PRESETS,
    run_comparison,
    write_report,
)
from fedustat.curve_dispatch import release_curve
from fedustat.curves import ROC_GRID_LIMIT
from fedustat.privacy.budget import (
    BudgetAccountant,
    BudgetExceededError,
    BudgetFile,
    FileBudget,
    IncomparableGuaranteeError,
    LedgerEntry,
    LedgerError,
)
from fedustat.privacy.noise import DeploymentNoise
from fedustat.protocols import registry
from fedustat.protocols.ecdf.federated import FEDERATED_GRID_LIMIT
from fedustat.protocols.ecdf.private_quantiles import (
    DEFAULT_GRID_POINTS as QUANTILE_GRID_POINTS,
)
from fedustat.protocols.ecdf.private_quantiles import QUANTILE_GRID_LIMIT
from fedustat.protocols.ecdf.release import ECDF_GRID_LIMIT, GridLimit
from fedustat.runtime import network
from fedustat.runtime.network import run_journal
from fedustat.stats.kernels import Kernel


def _bundled_description(spec: Statistic) -> tuple[dict[str, tuple[float, float]],
                                                 dict[str, list[float]]]:
    """Public bounds and value lists of the default columns, by kernel column, for
    protocols that quantize or randomize records (e.g. ldp-quantized); never derived from
    the data. Gini and variance carry their bounds in the kernel; a binary label needs no
    value list."""
    bounds, values = catalogue.public_description(spec, spec.data, spec.data_columns)
    if spec.needs_bounds:
        bounds = {}
    values.pop("label", None)
    return bounds, values


def _parse_pair(text: str, what: str) -> tuple[float, float]:
    """Public bounds ``LO,HI``: two finite numbers with LO < HI."""
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise SystemExit(f"error: {what} must be two numbers separated by a comma, "
                         f"got {text!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise SystemExit(f"error: {what} must be finite numbers, got {text!r}")
    if not lo < hi:
        raise SystemExit(f"error: {what} must satisfy LO < HI, got {text!r}")
    return lo, hi


def _parse_value(text: str) -> Any:
    """A ``--param`` value: an int, a float, true/false, none, else the string itself.

    The protocol's factory then checks the type (``registry.check_parameters``), so a
    string where a number is expected is refused with the parameter's name.
    """
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            continue
    words: dict[str, Any] = {"true": True, "false": False, "none": None}
    return words.get(text.strip().lower(), text)


def _parse_params(items: Sequence[str] | None) -> dict[str, Any]:
    """``key=value`` pairs for protocol parameters (see :func:`_parse_value`)."""
    params: dict[str, Any] = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"error: --param must look like key=value, got {item!r}")
        key = key.strip()
        if key == "noise":
            raise SystemExit("error: choose the noise with --noise simulation|deployment, "
                             "not --param noise=...")
        if key in ("bounds", "precision"):
            raise SystemExit(f"error: give {key} with --{key}, not --param {key}=...")
        params[key] = _parse_value(text)
    return params


def _load_columns(args: argparse.Namespace, spec: Statistic) -> tuple[str, list[np.ndarray]]:
    columns = tuple(args.columns.split(",")) if args.columns else None
    if args.file:
        if columns is None:
            raise SystemExit(f"error: --file needs --columns naming the file's columns for "
                             f"{spec.name} (in order: {', '.join(spec.data_columns)})")
        _check_file(args.file)
        try:
            table = datasets.read_table(args.file, columns=list(columns))
        except (OSError, ValueError, ImportError) as exc:
            raise SystemExit(f"error: {exc}") from None
        return f"{args.file}:{','.join(columns)}", [table[c] for c in columns]
    name = args.data or spec.data
    try:
        data = datasets.load(name)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    columns = columns or spec.data_columns
    try:
        return f"{name}:{','.join(columns)}", [data[c] for c in columns]
    except KeyError as exc:
        raise SystemExit(f"error: {exc.args[0]}") from None


def _check_file(path: str) -> None:
    """A readable regular file, or a one-line error saying what is wrong with it."""
    where = Path(path)
    if where.is_dir():
        raise SystemExit(f"error: --file {path} is a directory; give a CSV or Parquet file")
    if where.exists() and not where.is_file():
        raise SystemExit(f"error: --file {path} is not a regular file")


class ProtocolRefusedError(Exception):
    """The chosen protocol cannot compute this statistic (or its parameters are wrong)."""


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


def _column_domain(args: argparse.Namespace, spec: Statistic,
                   kernel: Kernel) -> dict[str, Any]:
    """``bounds`` / ``domain`` keyword arguments for protocols whose factory takes them."""
    accepted = inspect.signature(registry.factory(args.protocol)).parameters
    # Bundled data come with public descriptions of their columns; a networked role never
    # uses them (each side must state the same public bounds explicitly).
    uses_defaults = (getattr(args, "bundled_defaults", True) and not args.file
                     and not args.columns and not args.data)
    bounds, values = _bundled_description(spec) if uses_defaults else ({}, {})
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


def _natural_options(args: argparse.Namespace, spec: Statistic) -> dict[str, Any]:
    """``--bounds`` and ``--precision`` for protocols whose factory takes them.

    Found by introspecting the factory, so a protocol that gains a ``bounds`` or
    ``precision`` parameter is served without a change here. An option the chosen
    protocol does not take is an error naming the protocol, except ``--bounds`` for a
    statistic whose kernel itself needs bounds (gini, variance): the kernel uses them.
    """
    params: dict[str, Any] = {}
    # With every statistic, --bounds is meant for gini and variance only.
    applies = bool(args.bounds) and (spec.needs_bounds or args.statistic != "all")
    if applies and args.column_bounds and not spec.needs_bounds:
        raise SystemExit("error: give the public bounds either with --bounds LO,HI or per "
                         "column with --column-bounds, not both")
    if applies and not args.column_bounds:
        if registry.takes(args.protocol, "bounds"):
            params["bounds"] = _parse_pair(args.bounds, "--bounds")
        elif not spec.needs_bounds:
            raise ProtocolRefusedError(
                f"{spec.name} with protocol {args.protocol}: --bounds is used by protocols "
                f"that take public bounds, and {args.protocol} takes none (its parameters: "
                f"{', '.join(registry.parameters(args.protocol)) or 'none'})")
    if args.precision is not None:
        if not registry.takes(args.protocol, "precision"):
            raise ProtocolRefusedError(
                f"{spec.name} with protocol {args.protocol}: --precision is not a parameter "
                f"of {args.protocol} (its parameters: "
                f"{', '.join(registry.parameters(args.protocol)) or 'none'})")
        params["precision"] = _parse_value(args.precision)
    return params


def _kernel(spec: Statistic, args: argparse.Namespace) -> Kernel:
    bounds = _parse_pair(args.bounds, "--bounds") if args.bounds else spec.default_bounds
    if args.file and spec.needs_bounds and not args.bounds:
        raise SystemExit(f"error: {spec.name} on a file needs --bounds LO,HI (public bounds)")
    try:
        return spec.kernel(bounds)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {spec.name}: {exc}") from None


def _records(spec: Statistic, kernel: Kernel, args: argparse.Namespace
             ) -> tuple[str, np.ndarray]:
    source, cols = _load_columns(args, spec)
    if len(cols) != kernel.n_columns:
        raise SystemExit(f"error: {spec.name} needs {kernel.n_columns} column(s) "
                         f"({', '.join(kernel.columns)}), got {len(cols)}")
    try:
        return source, kernel.pack(*cols)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {spec.name} on {source}: {exc}") from None


def _party_records(spec: Statistic, kernel: Kernel, args: argparse.Namespace) -> np.ndarray:
    """A networked party's rows, as numbers in the kernel's column order.

    Their public domain (bounds, labels) is checked by the protocol's own party step in
    the run, not here: a failure then stays with this party in full while the server and
    the others learn which check failed, instead of waiting out the stage for a party that
    left without a word. Whole-data-set checks (both classes present, two records) do not
    apply to one party's share of the data.
    """
    source, cols = _load_columns(args, spec)
    if len(cols) != kernel.n_columns:
        raise SystemExit(f"error: {spec.name} needs {kernel.n_columns} column(s) "
                         f"({', '.join(kernel.columns)}), got {len(cols)}")
    try:
        rows = np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {spec.name} on {source}: the columns must be numbers "
                         f"({exc})") from None
    if rows.size == 0 or not np.all(np.isfinite(rows)):
        raise SystemExit(f"error: {spec.name} on {source}: every row must hold finite "
                         "numbers (remove or impute NaN and infinite values)")
    return rows


def _protocol_params(spec: Statistic, kernel: Kernel, args: argparse.Namespace
                     ) -> dict[str, Any]:
    """The protocol parameters the options describe (public descriptions only)."""
    return (_column_domain(args, spec, kernel) | _natural_options(args, spec)
            | _parse_params(args.param))


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


def _evaluates(args: argparse.Namespace) -> bool:
    """Whether to compute the exact (non-private) value beside the release.

    A user's own data (``--file``, ``--partitions``) gets the release only, its interval and
    guarantee: the exact value is a non-private function of the raw rows, so it is shown
    only when ``--evaluate`` asks for it. Bundled data sets are public demo data; their
    exact value is shown so that the release's error can be seen.
    """
    user_data = bool(args.file) or args.partitions is not None
    return args.evaluate or not user_data


def _resolve_randomness(args: argparse.Namespace) -> None:
    """``args.noise`` and ``args.seed`` as the release will use them.

    A user's own data (``--file``, ``--partitions``) gets deployment randomness unless a
    ``--seed`` (or ``--noise simulation``) asks for a study explicitly; the bundled data
    sets are public demo data, seeded by default (seed 0) so their tables reproduce.
    """
    user_data = bool(args.file) or args.partitions is not None
    if args.noise is None:
        args.noise = ("simulation" if args.seed is not None or not user_data
                      else "deployment")
    if args.noise == "simulation" and args.seed is None and not user_data:
        args.seed = 0


def _randomness_text(args: argparse.Namespace) -> str:
    """How a release's randomness is described beside it."""
    if args.noise == "deployment":
        return ""
    seed = "fresh entropy" if args.seed is None else f"seed={args.seed}"
    return f", {seed}: a simulation study, not a protection"


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


NOISE_DESCRIPTIONS = {
    "simulation": "simulation noise: seeded NumPy draws, a study, NOT a protection of "
                  "the people in the data",
    "deployment": "deployment noise: OS CSPRNG for shares, masks and keys, fixed-work "
                  "samplers for the noise; not reproducible",
    "none": "no noise",
}


def _budget_file(path: Path) -> BudgetFile:
    """The budget file of ``--budget``: held under its lock from the check of the first
    release to the commit of the last (docs/budget.md, "Budget file")."""
    if not path.is_file():
        raise SystemExit(f"error: no budget file {str(path)!r}; create one with "
                         f"`fedustat budget {path} --epsilon E`")

    def announce() -> None:
        print(f"waiting for budget file {str(path)!r}: another release holds its lock "
              f"({path!s}.lock)", file=sys.stderr, flush=True)

    return BudgetFile(path, on_wait=announce)


def _hold_budget(stack: contextlib.ExitStack, budget_file: BudgetFile) -> FileBudget:
    """Take the file's lock and read its ledger as it is now; a reservation left by a run
    that never committed stays counted, and is named on stderr."""
    try:
        budget = stack.enter_context(budget_file)
    except LedgerError as exc:
        raise SystemExit(f"error: {exc}") from None
    for entry in budget.stale:
        who = entry.process.describe() if entry.process is not None else "an unknown process"
        print(f"warning: budget file {str(budget_file.path)!r}: {entry.name!r} (epsilon "
              f"{entry.cost.epsilon:g}, delta {entry.cost.delta:g}) was reserved by {who} "
              "and never committed (that run ended before it finished); it stays counted as "
              "spent", file=sys.stderr)
    return budget


def _ledger_line(entry: LedgerEntry, busy: bool) -> str:
    line = f"  {entry.name}: epsilon {entry.cost.epsilon:g}, delta {entry.cost.delta:g}"
    if entry.status == "reserved":
        who = entry.process.describe() if entry.process is not None else "an unknown process"
        state = ("another process holds the file's lock now, so this run may still be going "
                 "on" if busy else "never committed: that run ended before it finished")
        return f"{line} [reserved by {who}; {state}; counted as spent]"
    if entry.status == "withheld":
        return (f"{line} [withheld: its run delivered more than it reserved; not released, "
                "charged]")
    return line


def cmd_budget(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if args.epsilon is None:
        if not path.is_file():
            raise SystemExit(f"error: no budget file {str(path)!r}; create one with "
                             f"`fedustat budget {path} --epsilon E`")
        try:
            acct, busy = BudgetFile.read(path)
        except LedgerError as exc:
            raise SystemExit(f"error: {exc}") from None
        eps, delta = acct.remaining
        spent_eps, spent_delta = acct.spent
        print(f"budget {path}: epsilon {acct.epsilon:g}, delta {acct.delta:g}, rule "
              f"{acct.rule}, adjacency {acct.adjacency!r}")
        print(f"spent: epsilon {spent_eps:g}, delta {spent_delta:g}; remaining: epsilon "
              f"{eps:g}, delta {delta:g}")
        for entry in acct.ledger:
            print(_ledger_line(entry, busy))
        return 0
    if path.exists() and not args.force:
        raise SystemExit(f"error: {str(path)!r} exists; add --force to replace it (its "
                         "ledger would be lost)")
    try:
        acct = BudgetAccountant(args.epsilon, args.delta, rule=args.rule,
                                delta_slack=args.delta_slack, adjacency=args.adjacency)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    try:
        BudgetFile.create(path, acct, replace=args.force,
                          on_wait=lambda: print(f"waiting for budget file {str(path)!r}: "
                                                "another release holds its lock",
                                                file=sys.stderr, flush=True))
    except (FileExistsError, LedgerError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"created {path}: epsilon {acct.epsilon:g}, delta {acct.delta:g}, rule {acct.rule}")
    return 0


def cmd_estimate(args: argparse.Namespace) -> int:
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
                         f"{', '.join(known)}")
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
    budget_file = None if args.budget is None else _budget_file(Path(args.budget))
    rows, refused = [], []
    # With --budget the file stays locked from here to the last commit: each release is
    # checked against the ledger as it is now, reserved in it before any party runs, and
    # committed after; a release that fails has its reservation removed (attempt()).
    with contextlib.ExitStack() as held:
        args.accountant = None if budget_file is None else _hold_budget(held, budget_file)
        for name in names:
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
    if not rows:
        raise SystemExit("error: the protocol computed none of the statistics:\n  "
                         + "\n  ".join(refused))
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    elif rows[0]["statistic"] in catalogue.names("curve"):
        _print_curve(rows[0], args)
    else:
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
    return 0


def _all_protocols() -> list[str]:
    """Every protocol name: U-statistic protocols, curve releases of the registry and the
    central curve releases, sorted."""
    return sorted({entry.name for entry in registry.available()}
                  | {entry.name for entry in registry.available_curves()}
                  | set(catalogue.CURVE_RELEASES))


#: Statistics of two public classes given by their sizes (advise --n-pos / --n-neg).
_TWO_CLASS = [s.name for s in STATISTICS.values() if s.columns[-1] == "label"]
#: Grid points of a curve's public grid when --param thresholds=... is not given.
CURVE_GRID_POINTS = 256
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
        if "thresholds" in params or "grid_points" in params or args.bounds:
            raise ProtocolRefusedError(
                "hl with protocol dp-ecdf-hl: its grid is fixed by 003 Alg. 2 (probabilities "
                "in [0, 1]); it takes no --bounds, thresholds or grid_points")
        return options
    if "thresholds" in params:
        options["thresholds"] = _parse_floats(str(params["thresholds"]), "--param thresholds")
        return options
    if args.bounds:
        bounds = _parse_pair(args.bounds, "--bounds")
    elif args.file or args.data or args.columns:
        raise SystemExit(f"error: {spec.name} on your own columns needs their public bounds "
                         "for the grid: --bounds LO,HI (or --param thresholds=T1,T2,...)")
    else:
        bounds = spec.default_bounds
    points = params.get("grid_points", CURVE_GRID_POINTS)
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise SystemExit(f"error: --param grid_points must be an integer >= 2, got {points!r}")
    try:  # before the grid is built
        _curve_grid_limit(spec, args.protocol).check(points, "--param grid_points")
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    if spec.curve in ("quantile", "median") and args.protocol == "dp-quantiles":
        # The bounds themselves, as in fedustat.quantile(x, q, bounds=...): its default
        # answers anywhere in them (the exponential mechanism over the gaps between the
        # records, or JointExp on a fine grid); grid_points only places the error bar's
        # atoms (fedustat.quantile's default unless given).
        options["bounds"] = bounds
        options["grid_points"] = params.get("grid_points", QUANTILE_GRID_POINTS)
        return options
    options["thresholds"] = np.linspace(bounds[0], bounds[1], points)
    return options


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
    if hasattr(release, "level_interval"):  # one level
        out = [list(map(float, release.level_interval(0.95)))]
    elif hasattr(release, "level_error"):  # several levels, one bound for all
        low, high = release.confidence_interval(0.95)
        out = [[float(a), float(b)] for a, b in zip(low, high, strict=True)]
    else:
        return None
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


def cmd_datasets(args: argparse.Namespace) -> int:
    for name in datasets.available():
        ds = datasets.load(name)
        print(f"{name}  ({ds.n} rows; task: {ds.task})")
        print(f"    columns: {', '.join(ds.column_names)}")
        print(f"    {ds.description.splitlines()[0] if ds.description else ''}")
    return 0


def _protocol_listing() -> list[dict[str, Any]]:
    """Every protocol: name, kind, privacy model, statistics served, summary, source."""
    listing = []
    for kind, entries in (("u-statistic", registry.available()),
                          ("federated curve release", registry.available_curves()),
                          ("central curve release", catalogue.CURVE_RELEASES.values())):
        for entry in entries:
            listing.append({"name": entry.name, "kind": kind, "model": entry.model.value,
                            "statistics": catalogue.statistics_served(entry.name),
                            "summary": entry.summary, "source": entry.source})
    return sorted(listing, key=lambda item: item["name"])


def cmd_protocols(args: argparse.Namespace) -> int:
    listing = _protocol_listing()
    if args.format == "json":
        print(json.dumps(listing, indent=2))
        return 0
    for item in listing:
        kind = "" if item["kind"] == "u-statistic" else f"{item['kind']}: "
        served = ", ".join(item["statistics"]) or "none"
        print(f"{item['name']:<22} {item['model']:<13} {kind}{item['summary']} "
              f"(statistics: {served})  [{item['source']}]")
    return 0


def _parse_floats(text: str, what: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"error: {what} must be numbers separated by commas, got {text!r}"
                         ) from None
    if not values:
        raise SystemExit(f"error: {what} is empty")
    return values


def _parse_domain_size(text: str | None) -> int | list[int] | None:
    if text is None:
        return None
    try:
        sizes = [int(v) for v in text.split(",")]
    except ValueError:
        raise SystemExit(f"error: --domain-size must be an integer (or one per column, "
                         f"e.g. 6,6), got {text!r}") from None
    return sizes[0] if len(sizes) == 1 else sizes


def cmd_advise(args: argparse.Namespace) -> int:
    bounds: Any = None
    if args.bounds:
        pairs = args.bounds.split(";")
        bounds = (_parse_pair(pairs[0], "--bounds") if len(pairs) == 1
                  else [_parse_pair(p, "--bounds") for p in pairs])
    zeta = _parse_pair(args.zeta, "--zeta") if args.zeta else None
    try:
        advice = advise(args.statistic, n=args.n, n_pos=args.n_pos, n_neg=args.n_neg,
                        epsilon=args.epsilon, delta=args.delta,
                        trust=None if args.trust == "any" else args.trust,
                        max_bits_per_party=args.max_bits, bounds=bounds,
                        domain_size=_parse_domain_size(args.domain_size), zeta=zeta,
                        auc=args.auc, silos=args.silos,
                        records_per_silo=args.records_per_silo)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.format == "json":
        print(json.dumps(advice.to_dict(), indent=2, default=float))
    else:
        print(advice.table())
    return 0


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
                         f"{', '.join(sorted(allowed))} or all")
    return list(dict.fromkeys(names))


def _simulation_only(args: argparse.Namespace, command: str) -> None:
    """compare and reproduce are studies: repeated seeded runs measured against the exact
    value, which only simulation noise makes possible (and affordable)."""
    if args.noise == "deployment":
        raise SystemExit(f"error: fedustat {command} runs seeded simulations to measure "
                         "errors and supports --noise simulation only; release a statistic "
                         "with deployment noise with `fedustat estimate --noise deployment`")


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


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows an option's default only when there is one to show.

    A default of None (the option is simply absent), False (a switch), a required option
    or a help text that already says what happens by default gets no "(default: ...)".
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (action.default is None or action.default is False or action.required
                or action.default is argparse.SUPPRESS or "default" in text.lower()):
            return text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedustat",
        description="Private statistics over data held by many parties.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)

    est = sub.add_parser(
        "estimate", help="compute a statistic exactly and with a private protocol",
        description="Release a statistic of a CSV/Parquet file with a private protocol "
                    "(the release, its 95%% interval and its guarantee; --evaluate adds the "
                    "exact value), or of a bundled demo data set, where the exact value is "
                    "shown beside the release.",
        formatter_class=_HelpFormatter)
    est.add_argument("--statistic", choices=["all", *STATISTICS], default="all",
                     help="which statistic: " + "; ".join(
                         f"{s.name} = {s.description}" for s in STATISTICS.values())
                     + "; all = every U-statistic (" + ", ".join(catalogue.names("u-statistic"))
                     + ")")
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
    est.add_argument("--epsilon", type=float, default=1.0, help="privacy budget epsilon > 0")
    est.add_argument("--delta", type=float, default=0.0, help="privacy parameter delta in [0, 1)")
    est.add_argument("--protocol", default=None,
                     help="protocol name (see `fedustat protocols`); default: "
                          f"{DEFAULT_PROTOCOL} for the U-statistics, and for the curves "
                          + ", ".join(f"{k}: {v}" for k, v in
                                      catalogue.DEFAULT_CURVE_RELEASE.items()))
    est.add_argument("--param", action="append", metavar="KEY=VALUE",
                     help="a protocol parameter (repeatable), e.g. --param k=32 for "
                          "ldp-quantized or --param d=64 for ldp-tree; see the "
                          "protocol's page in docs/protocols/")
    est.add_argument("--column-bounds", action="append", metavar="COLUMN=LO,HI",
                     help="public bounds of a continuous kernel column (repeatable), for "
                          "protocols that quantize records, e.g. --column-bounds score=0,1; "
                          "bundled defaults are used when --data/--file/--columns are not "
                          "given")
    est.add_argument("--column-values", action="append", metavar="COLUMN=V1,V2,...",
                     help="public list of the values of a discrete kernel column "
                          "(repeatable), e.g. --column-values x=0,1,2; bundled defaults are "
                          "used when --data/--file/--columns are not given")
    est.add_argument("--bounds", default=None,
                     help="public bounds LO,HI of the values for gini and variance, and of "
                          "the grid of ecdf, quantile, median and roc")
    est.add_argument("--precision", default=None,
                     help="fixed-point precision, for protocols whose constructor takes "
                          "'precision' (an error for the others); default: the protocol's "
                          "own")
    est.add_argument("--noise", choices=list(NOISE_CHOICES), default=None,
                     help="deployment (the default on --file and --partitions): OS CSPRNG "
                          "for shares, masks and keys, fixed-work exact samplers for the "
                          "noise (running time independent of the value; refuses --seed); "
                          "simulation (the default on bundled data, and with --seed): "
                          "seeded NumPy draws, fast and reproducible, a study, NOT a "
                          "protection")
    est.add_argument("--seed", type=int, default=None,
                     help="seed of a simulation study (asks for simulation noise; default: "
                          "0 on bundled data, none on your own data; not allowed with "
                          "--noise deployment)")
    est.add_argument("--format", choices=["table", "json"], default="table",
                     help="output format")
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
    est.set_defaults(func=cmd_estimate)

    adv = sub.add_parser(
        "advise", help="predict each protocol's error and cost, and recommend one",
        description="Predict, from the papers' analytic formulas, the MSE of every protocol "
                    "that can compute the statistic, with its bits per party and rounds, "
                    "and recommend the most accurate one that meets the trust model and the "
                    "communication budget (docs/compare.md lists the formulas).",
        formatter_class=_HelpFormatter)
    adv.add_argument("--statistic", required=True, choices=list(STATISTICS),
                     help="the statistic: " + "; ".join(
                         f"{s.name} = {s.description}" for s in STATISTICS.values()))
    adv.add_argument("--n", type=int, default=None,
                     help="number of parties (devices holding one record each)")
    adv.add_argument("--silos", type=int, default=None,
                     help="cross-silo setting: number K of silos (with --records-per-silo)")
    adv.add_argument("--records-per-silo", type=int, default=None,
                     help="records m each silo holds (with --silos; n = K m)")
    adv.add_argument("--n-pos", type=int, default=None,
                     help="positives (public class size) for " + ", ".join(_TWO_CLASS))
    adv.add_argument("--n-neg", type=int, default=None,
                     help="negatives (public class size) for " + ", ".join(_TWO_CLASS))
    adv.add_argument("--epsilon", type=float, required=True, help="privacy budget > 0")
    adv.add_argument("--delta", type=float, default=0.0,
                     help="delta; protocols that need delta > 0 are considered only with it")
    adv.add_argument("--trust", choices=["any", *TRUST_MODELS], default="any",
                     help="who may be trusted: local = nobody; secure = secure computation "
                          "with a DP output; label = the server may see scores but not labels; "
                          "curator = a trusted aggregator; any = consider every protocol")
    adv.add_argument("--max-bits", type=float, default=None,
                     help="communication budget: most bits a party (with --silos: a silo) "
                          "may send (default: no limit)")
    adv.add_argument("--bounds", default=None,
                     help="public bounds LO,HI of the values (required for gini and variance); "
                          "for kendall one pair per column separated by ';'")
    adv.add_argument("--domain-size", default=None,
                     help="number of public values of a discrete column (required for "
                          "duplicate; 6,6 for kendall on two 6-point scales; one per "
                          "clustering for rand, e.g. 2,3), or the number of "
                          "grid thresholds for ecdf, quantile and roc")
    adv.add_argument("--zeta", default=None,
                     help="zeta_1,zeta_2 of the Hoeffding decomposition for the subsampling "
                          "protocols (default: data-free worst case)")
    adv.add_argument("--auc", type=float, default=None,
                     help="a public guess of the AUC for the FedAUC predictions (default: "
                          "their worst case over [0, 1])")
    adv.add_argument("--format", choices=["table", "json"], default="table")
    adv.set_defaults(func=cmd_advise)

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

    rep = sub.add_parser(
        "reproduce", help="reproduce an experiment of the papers (--list to see them)",
        description="Run one experiment of the papers at the paper's axes and repetitions "
                    "(or reduced with --quick), print our numbers beside the paper's and "
                    "write report.md and figures to --out.",
        formatter_class=_HelpFormatter)
    rep.add_argument("names", nargs="*", metavar="NAME",
                     help="experiment name(s) (see --list), or all")
    rep.add_argument("--list", action="store_true", help="list the experiments and exit")
    rep.add_argument("--quick", action="store_true",
                     help="reduced grid and repetitions (seconds instead of minutes)")
    rep.add_argument("--seed", type=int, default=0, help="root seed of every run")
    rep.add_argument("--noise", choices=list(NOISE_CHOICES), default="simulation",
                     help="only simulation: the papers' experiments are seeded studies")
    rep.add_argument("--out", default=None,
                     help="report folder (default fedustat-reproduce/NAME; OUT/NAME for "
                          "several experiments; '' = none)")
    rep.add_argument("--format", choices=["table", "json"], default="table",
                     help="table: each experiment's table and notes as it finishes; json: "
                          "one list of experiments (name, paper, target, data, title, "
                          "headers, rows, notes, quick, seed, seconds, report) at the end")
    rep.add_argument("--json", dest="format", action="store_const", const="json",
                     help="the same as --format json")
    rep.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="a progress bar over the experiments on stderr (default: only "
                          "when stderr is a terminal)")
    rep.set_defaults(func=cmd_reproduce)

    bud = sub.add_parser("budget", help="create or show a privacy budget file",
                         description="With --epsilon, create FILE holding a privacy budget "
                                     "for one data set; without, show what FILE has spent "
                                     "and what remains. `fedustat estimate --budget FILE` "
                                     "spends it (docs/budget.md).")
    bud.add_argument("file", metavar="FILE", help="the budget file (JSON)")
    bud.add_argument("--epsilon", type=float, default=None,
                     help="total epsilon of a new budget")
    bud.add_argument("--delta", type=float, default=0.0, help="total delta of a new budget")
    bud.add_argument("--rule", choices=("basic", "advanced", "zcdp"), default="basic",
                     help="composition rule of a new budget")
    bud.add_argument("--delta-slack", type=float, default=None,
                     help="delta' of advanced composition (needed with --rule advanced)")
    bud.add_argument("--adjacency", default="replace one record",
                     help="what the budget protects: 'replace one record', 'score', "
                          "'label' or 'add/remove one record' (docs/budget.md)")
    bud.add_argument("--force", action="store_true",
                     help="overwrite an existing budget file")
    bud.set_defaults(func=cmd_budget)

    ds = sub.add_parser("datasets", help="list the bundled data sets")
    ds.set_defaults(func=cmd_datasets)
    pr = sub.add_parser("protocols", help="list the available protocols",
                        description="Every protocol by name: the U-statistic protocols, the "
                                    "federated curve releases and the central curve "
                                    "releases, with their privacy model and the statistics "
                                    "each computes.", formatter_class=_HelpFormatter)
    pr.add_argument("--format", choices=["table", "json"], default="table")
    pr.set_defaults(func=cmd_protocols)
    _add_network_commands(sub)
    _add_enrollment_commands(sub)
    return parser


# ---------------------------------------------------------------- enrollment (docs/enrollment.md)
def cmd_enroll_tokens(args: argparse.Namespace) -> int:
    from fedustat.runtime.network import enroll

    out = Path(args.out)
    if out.exists():
        raise SystemExit(f"error: --out {out} exists; tokens are never overwritten (give a new "
                         "file name)")
    tokens = enroll.mint_tokens(args.count)
    store = enroll.TokenStore(args.store)
    try:
        store.add(tokens)
        unused, used = store.counts()
    finally:
        store.close()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.touch(mode=0o600)
    out.write_text("\n".join(tokens) + "\n")
    print(f"wrote {len(tokens)} one-time enrollment tokens to {out} (one per line, "
          f"owner-readable only); their SHA-256 digests are in {args.store} "
          f"({unused} unused, {used} used in all)")
    print("give each device one token; the store keeps no token itself")
    return 0


def cmd_enroll_server(args: argparse.Namespace) -> int:
    import datetime as dt

    from fedustat.runtime.network import enroll

    if not (args.validity_hours > 0 and math.isfinite(args.validity_hours)):
        raise SystemExit(f"error: --validity-hours must be a positive number of hours, got "
                         f"{args.validity_hours}")
    if not Path(args.store).is_file():
        raise SystemExit(f"error: --store {args.store} is not a file; mint tokens into it "
                         "first with `fedustat enroll-tokens --store`")
    if args.first_index is not None and args.first_index < 0:
        raise SystemExit(f"error: --first-index must be >= 0, got {args.first_index}")

    def ready(port: int) -> None:
        store = enroll.TokenStore(args.store)
        unused, used = store.counts()
        store.close()
        print(f"enrollment service listening on port {port} ({unused} unused tokens, "
              f"{used} used)", flush=True)

    enroll.serve_enrollment(args.certs, args.store, address=args.address,
                            validity=dt.timedelta(hours=args.validity_hours),
                            first_index=args.first_index, on_ready=ready)
    return 0


def cmd_enroll(args: argparse.Namespace) -> int:
    from fedustat.runtime.network import enroll

    token = Path(args.token_file).read_text().strip() if args.token_file else args.token
    try:
        credentials = enroll.enroll(args.server, args.ca, token, args.out,
                                    timeout=args.timeout)
    except enroll.EnrollmentError as exc:
        raise SystemExit(f"error: {exc}") from None
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(credentials.certificate)
    print(json.dumps({"identity": credentials.identity,
                      "certificate": str(Path(args.out) / f"{credentials.identity}.pem"),
                      "key": str(Path(args.out) / f"{credentials.identity}.key"),
                      "not_after": cert.not_valid_after_utc.isoformat()}, indent=2))
    return 0


def _add_enrollment_commands(sub: Any) -> None:
    tok = sub.add_parser("enroll-tokens", help="mint one-time enrollment tokens for devices",
                         formatter_class=_HelpFormatter)
    tok.add_argument("--count", type=_positive_int, required=True, help="how many tokens")
    tok.add_argument("--out", required=True,
                     help="file to write the tokens to, one per line (for distribution)")
    tok.add_argument("--store", required=True,
                     help="the enrollment service's token store (SQLite; created or "
                          "added to): holds only the tokens' SHA-256 digests")
    tok.set_defaults(func=cmd_enroll_tokens)

    esrv = sub.add_parser("enroll-server",
                          help="run the enrollment service: devices trade a token and a CSR "
                               "for a short-lived party certificate",
                          formatter_class=_HelpFormatter)
    esrv.add_argument("--certs", required=True,
                      help="deployment directory: ca.pem, ca.key, server.pem, server.key")
    esrv.add_argument("--store", required=True,
                      help="the token store written by `fedustat enroll-tokens`")
    esrv.add_argument("--address", default="127.0.0.1:50052",
                      help="HOST:PORT to listen on (port 0: a free port)")
    esrv.add_argument("--validity-hours", type=float, default=24.0,
                      help="how long an issued certificate is valid")
    esrv.add_argument("--first-index", type=int, default=None,
                      help="smallest party index to assign (default: after the "
                           "deployment's party-<i>.pem files)")
    esrv.set_defaults(func=cmd_enroll_server)

    dev = sub.add_parser("enroll", help="enroll this device: make its key, get its "
                                        "certificate", formatter_class=_HelpFormatter)
    dev.add_argument("--server", required=True, help="HOST:PORT of the enrollment service")
    dev.add_argument("--ca", required=True, help="the deployment's ca.pem")
    which = dev.add_mutually_exclusive_group(required=True)
    which.add_argument("--token", help="the one-time enrollment token")
    which.add_argument("--token-file", help="a file holding the token (keeps it out of "
                                            "the process list)")
    dev.add_argument("--out", required=True,
                     help="directory for <identity>.pem, <identity>.key and ca.pem")
    dev.add_argument("--timeout", type=float, default=30.0,
                     help="seconds to wait for the service's answer")
    dev.set_defaults(func=cmd_enroll)
# ---------------------------------------------------------------- end of enrollment


def _network_protocol(args: argparse.Namespace
                      ) -> tuple[Statistic | None, Kernel | None, Any]:
    """The protocol a networked role runs, built from the same options on every side.

    A curve release (``registry.is_curve``) has no statistic nor kernel: (None, None, it).
    """
    if args.epsilon <= 0 or math.isnan(args.epsilon):
        raise SystemExit(f"error: --epsilon must be > 0, got {args.epsilon}")
    if registry.is_curve(args.protocol):
        return None, None, _network_curve(args)
    known = [entry.name for entry in registry.available()]
    if args.protocol not in known:
        curves = [entry.name for entry in registry.available_curves()]
        raise SystemExit(f"error: unknown protocol {args.protocol!r}; available protocols: "
                         f"{', '.join(known)}; curve releases: {', '.join(curves)}")
    if args.statistic is None:
        raise SystemExit(f"error: protocol {args.protocol} needs --statistic (one of "
                         f"{', '.join(catalogue.names('u-statistic'))})")
    spec = STATISTICS[args.statistic]
    if spec.needs_bounds and not args.bounds:
        raise SystemExit(f"error: {spec.name} needs --bounds LO,HI (public bounds, the same "
                         "on every side of the run)")
    kernel = _kernel(spec, args)
    params = _protocol_params(spec, kernel, args)
    registry.check_parameters(args.protocol, params)
    if args.seed is None:
        # Deployment randomness unless a seed asks for simulation streams explicitly.
        params["noise"] = DeploymentNoise()
    protocol = registry.make(args.protocol, kernel, epsilon=args.epsilon, delta=args.delta,
                             **params)
    return spec, kernel, protocol


#: Curve parameters given as comma-separated lists, and the type of their entries.
_CURVE_LISTS: dict[str, type] = {"thresholds": float, "query": int}


def _network_curve(args: argparse.Namespace) -> Any:
    """A curve release (``ecdf-secagg``, ``ecdf-fss``) from the networked roles' options.

    The grid is ``--bounds LO,HI`` (with ``--precision``, its spacing) or
    ``--param thresholds=t1,t2,...``; ``--param query=i,j,...`` picks grid positions. No
    seed means deployment randomness (``randomness="os"``: shares, masks and noise).
    """
    name = args.protocol
    if args.statistic is not None:
        raise SystemExit(f"error: {name} releases a curve of one column; it takes no "
                         f"--statistic (give the grid with --bounds or --param thresholds=...)")
    if args.column_bounds or args.column_values:
        raise SystemExit(f"error: {name} takes the public bounds of its one column with "
                         "--bounds LO,HI, not --column-bounds/--column-values")
    if args.delta:
        raise SystemExit(f"error: {name} is pure epsilon-DP; it takes no --delta")
    params = _parse_params(args.param)
    for key, kind in _CURVE_LISTS.items():
        if key in params and params[key] is not None:
            text = str(params[key])
            try:
                params[key] = [kind(v) for v in text.split(",")]
            except ValueError:
                raise SystemExit(f"error: --param {key} must be comma-separated "
                                 f"{'numbers' if kind is float else 'grid positions'}, "
                                 f"got {text!r}") from None
    if args.bounds:
        params["bounds"] = _parse_pair(args.bounds, "--bounds")
    if args.precision is not None:
        params["precision"] = _parse_value(args.precision)
    if args.seed is None:
        params.setdefault("randomness", "os")
    try:
        return registry.make_curve(name, epsilon=args.epsilon, **params)
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"error: {name}: {exc}") from None


def _curve_records(args: argparse.Namespace) -> np.ndarray:
    """A curve party's own values: one column of its file, as ``(rows, 1)``."""
    columns = [c for c in args.columns.split(",") if c]
    if len(columns) != 1:
        raise SystemExit(f"error: {args.protocol} needs one column (--columns NAME), got "
                         f"{len(columns)}")
    _check_file(args.file)
    try:
        table = datasets.read_table(args.file, columns=columns)
    except (OSError, ValueError, ImportError) as exc:
        raise SystemExit(f"error: {exc}") from None
    return np.asarray(table[columns[0]], dtype=np.float64)[:, None]


def _curve_summary(est: Any) -> dict[str, Any]:
    """The released curve (public fields only): grid points, values, guarantee, cost."""
    curve = est.diagnostics["curve"]
    guarantee = curve.privacy
    return {"thresholds": [float(t) for t in curve.thresholds],
            "values": [float(v) for v in curve.values],
            "indices": [int(i) for i in curve.indices],
            "guarantee": {"text": str(guarantee),
                          "epsilon": "inf" if math.isinf(guarantee.epsilon)
                          else float(guarantee.epsilon),
                          "delta": float(guarantee.delta),
                          "assumptions": [str(a) for a in guarantee.assumptions]},
            "cost": {name: getattr(est.cost, name) for name in (
                "bits_per_party", "max_bits_per_party", "bits_received_per_party",
                "total_bits", "rounds", "server_operations", "offline_bits",
                "peer_bits_per_party", "peer_rounds")}}


def cmd_certs(args: argparse.Namespace) -> int:
    hosts = tuple(h for h in args.host.split(",") if h) if args.host else ("localhost",
                                                                            "127.0.0.1")
    services = tuple(r for r in (args.services or "").split(",") if r)
    bad = [r for r in services if r not in SERVICE_ROLES]
    if bad:
        raise SystemExit(f"error: unknown service role {bad[0]!r} in --services; service "
                         f"roles are {', '.join(SERVICE_ROLES)}")
    out = network.create_deployment(args.out, args.parties, server_hosts=hosts,
                                    extra_roles=services)
    extra = f" and services {', '.join(services)}" if services else ""
    print(f"wrote a CA and certificates for server (hosts {', '.join(hosts)}), "
          f"party-0 .. party-{args.parties - 1}{extra} to {out}")
    print("give each role only its own .key file (and ca.pem); keys are owner-readable only; "
          "ca.key stays with the operator (it signs enrolled devices' certificates)")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    _, _, protocol = _network_protocol(args)
    credentials = network.load_credentials(args.certs, "server")
    observer = _operations(args)

    # Named now, so that the operator knows where to restart a killed server from.
    run_dir = args.run_dir or str(run_journal.default_run_root() / run_journal.new_run_id())

    def ready(port: int) -> None:
        print(f"listening on port {port} for {args.parties} parties"
              + _metrics_note(observer), flush=True)
        print(f"run directory {run_dir} (restart with --run-dir {run_dir} to resume)",
              flush=True)

    try:
        run = network.serve(protocol, args.parties, credentials, address=args.listen,
                            rng=args.seed, timeout=args.timeout,
                            min_silos=args.min_parties, on_ready=ready,
                            run_dir=run_dir, observer=observer)
    except (network.NetworkRunError, ValueError, OSError) as exc:
        raise SystemExit(f"error: {exc}") from None
    finally:
        observer.stop()
    if run.read_back:
        print(f"run {run.run_id} had finished: its release is read back from {run.run_dir}, "
              "not computed again", flush=True)
    else:
        print(f"run {run.run_id}{' (resumed)' if run.resumed else ''}: run directory "
              f"{run.run_dir}", flush=True)
    est = run.estimate
    curve = _curve_summary(est) if registry.is_curve(args.protocol) else {}
    summary = network.release_summary(est) | curve | {
        "protocol": est.protocol, "quantity": est.quantity, "privacy": str(est.privacy),
        "parties": run.parties, "absent": run.absent, "dropped": run.dropped,
        "n_parties": run.n_parties, "services": run.services,
        "rounds": run.rounds, "seconds": run.seconds,
        "bits_per_party": est.cost.bits_per_party, "total_bits": est.cost.total_bits,
        "wire_bytes": run.wire_bytes, "server_peak_rss_mib": _peak_rss_mib(),
        "run_id": run.run_id, "run_dir": run.run_dir, "resumed": run.resumed,
        "read_back": run.read_back}
    return _publish(est, summary, args.output)


def _publish(est: Any, summary: dict[str, Any], output: str | None) -> int:
    """A server's release: the estimate's line and its summary (JSON), also to ``output``."""
    text = json.dumps(summary, indent=2)
    if output:
        Path(output).write_text(text + "\n")
    print(est)
    print(text)
    return 0


def _peak_rss_mib() -> float:
    """This process's peak resident memory in MiB.

    Linux's ``VmHWM`` belongs to the process image, whereas ``ru_maxrss`` carries over the
    high-water mark of the parent that forked it, so the former is read where it exists.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cmd_party(args: argparse.Namespace) -> int:
    spec, kernel, protocol = _network_protocol(args)
    if not args.file:
        raise SystemExit("error: a party needs its own data: --file FILE --columns ...")
    if spec is None or kernel is None:
        records = _curve_records(args)
    else:
        records = _party_records(spec, kernel, args)
    credentials = network.load_credentials(args.certs, args.identity)
    try:
        result = network.run_party(protocol, records, credentials, args.server,
                                   rng=args.seed, timeout=args.timeout,
                                   state_dir=args.state_dir)
    except (network.NetworkRunError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(json.dumps(result.release | {"identity": args.identity,
                                       "rounds": result.rounds}, indent=2))
    return 0


def cmd_collect(args: argparse.Namespace) -> int:
    if args.no_durable and (args.run_dir is not None or args.partitions):
        raise SystemExit("error: --no-durable keeps nothing on disk: drop --run-dir and "
                         "--partitions, or drop --no-durable")
    if args.engine is not None and not args.partitions:
        raise SystemExit("error: --engine releases from partitions: give --partitions too")
    _, _, protocol = _network_protocol(args)
    credentials = network.load_credentials(args.certs, "server")
    try:
        window = network.Window(args.window, args.quorum, args.linger)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    from fedustat.runtime.network.collect import new_run_directory

    run_dir = (None if args.no_durable else Path(args.run_dir) if args.run_dir is not None
               else new_run_directory())
    where = "no run directory (not durable)" if run_dir is None else f"run directory {run_dir}"

    observer = _operations(args)

    def ready(port: int) -> None:
        print(f"listening on port {port}; {where}; the window closes in "
              f"{args.window:g} s" + (f" or at {args.quorum} reports" if args.quorum else "")
              + _metrics_note(observer), flush=True)

    try:
        run = network.collect(protocol, credentials, window, address=args.listen,
                              rng=args.seed, on_ready=ready, run_dir=run_dir,
                              durable=not args.no_durable, partitions=args.partitions,
                              engine=args.engine, observer=observer)
    except (network.NetworkRunError, ValueError, OSError) as exc:
        raise SystemExit(f"error: {exc}") from None
    finally:
        observer.stop()
    if run.read_back:
        print(f"the run in {run_dir} had finished: its stored release is read back",
              flush=True)
    est = run.estimate
    summary = network.release_summary(est) | {
        "protocol": est.protocol, "quantity": est.quantity, "privacy": str(est.privacy),
        "n_reports": run.n_reports, "closed_by": run.closed_by, "seconds": run.seconds,
        "late": list(run.late), "refused": run.refused, "resent": run.resent,
        "wire_bytes": run.wire_bytes, "payload_bytes": run.payload_bytes,
        "run_directory": None if run.run_directory is None else str(run.run_directory),
        "read_back": run.read_back, "server_peak_rss_mib": _peak_rss_mib()}
    return _publish(est, summary, args.output)


def cmd_report(args: argparse.Namespace) -> int:
    spec, kernel, protocol = _network_protocol(args)
    if spec is None or kernel is None:
        raise SystemExit("error: report sends one record of a statistic (--statistic); "
                         "curve releases run in rounds (fedustat party)")
    records = _party_records(spec, kernel, args)
    credentials = network.load_credentials(args.certs, args.identity)
    try:
        sent = network.report(protocol, records, credentials, args.server, rng=args.seed,
                              timeout=args.timeout, keep=args.keep)
    except (network.NetworkRunError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(json.dumps({"identity": sent.identity, "run": sent.run,
                      "wire_bytes": sent.wire_bytes}, indent=2))
    return 0


def _add_operations_options(cmd: argparse.ArgumentParser) -> None:
    """A server's metrics endpoint and event log (docs/deployment-guide.md, "Operating a
    run")."""
    cmd.add_argument("--metrics-address", default=None, metavar="HOST:PORT",
                     help="serve Prometheus metrics (/metrics) and a health check (/health) "
                          "here while the server runs; port 0 picks a free one (default: "
                          "off; bind to 127.0.0.1 unless a scraper elsewhere needs it)")
    cmd.add_argument("--log-format", choices=("json", "text", "none"), default="none",
                     help="write the server's events (start, join, refusal, round end, "
                          "window close, release, failure) to standard error: one JSON "
                          "object per line, or text")
    cmd.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                     default="info",
                     help="the least level logged (debug adds one line per device report)")


def _operations(args: argparse.Namespace) -> Any:
    """The server's observer (metrics, health) and its event log, from the options."""
    from fedustat.runtime.network.observe import Observer, configure_logging, parse_address

    configure_logging(args.log_format, args.log_level)
    try:
        if args.metrics_address is not None:
            parse_address(args.metrics_address, "--metrics-address")
        observer = Observer(args.metrics_address)
        observer.start()  # bound before the run, so a taken port fails here, in one line
    except (ValueError, ImportError, OSError) as exc:
        raise SystemExit(f"error: {exc}") from None
    return observer


def _metrics_note(observer: Any) -> str:
    return f"; metrics on http://{observer.address}/metrics" if observer.address else ""


#: Service roles a protocol may need (``Protocol.service_roles``); each has a certificate.
SERVICE_ROLES = ("shuffler", "dealer")


def cmd_service(args: argparse.Namespace) -> int:
    _, _, protocol = _network_protocol(args)
    roles = protocol.service_roles()
    if args.role not in roles:
        raise SystemExit(f"error: protocol {args.protocol!r} as configured has no "
                         f"{args.role} role (its service roles: "
                         f"{', '.join(roles) or 'none'}); e.g. ghazi-shuffle needs "
                         "--param shuffler=service")
    credentials = network.load_credentials(args.certs, args.role)
    try:
        result = network.run_service(protocol, args.role, credentials, args.server,
                                     rng=args.seed, timeout=args.timeout)
    except network.NetworkRunError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(json.dumps(result.release | {"identity": args.role, "service_id": result.service_id,
                                       "rounds": result.rounds}, indent=2))
    return 0


def _add_protocol_options(cmd: argparse.ArgumentParser) -> None:
    """Options that fix the protocol; server and parties must give the same ones."""
    cmd.add_argument("--statistic", choices=catalogue.names("u-statistic"), default=None,
                     help="which statistic (none for a curve release such as ecdf-fss)")
    cmd.add_argument("--protocol", required=True, help="protocol name (`fedustat protocols`)")
    cmd.add_argument("--epsilon", type=float, required=True, help="privacy budget epsilon > 0")
    cmd.add_argument("--delta", type=float, default=0.0, help="privacy parameter delta")
    cmd.add_argument("--param", action="append", metavar="KEY=VALUE",
                     help="a protocol parameter (repeatable)")
    cmd.add_argument("--column-bounds", action="append", metavar="COLUMN=LO,HI",
                     help="public bounds of a continuous kernel column (repeatable)")
    cmd.add_argument("--column-values", action="append", metavar="COLUMN=V1,V2,...",
                     help="public list of the values of a discrete kernel column")
    cmd.add_argument("--bounds", default=None, help="public bounds LO,HI of the values")
    cmd.add_argument("--precision", default=None,
                     help="fixed-point precision (default: the protocol's own)")
    cmd.add_argument("--certs", required=True,
                     help="directory with ca.pem and this role's certificate and key")
    cmd.add_argument("--timeout", type=float, default=60.0,
                     help="the stage timeout: seconds joining and each round may last; "
                          "give every role the same number (a party waits a margin "
                          "longer for each answer, so the server decides first)")
    cmd.add_argument("--seed", type=int, default=None,
                     help="simulation randomness with this seed (to compare with the "
                          "simulator); default: deployment randomness")
    cmd.set_defaults(data=None, file=None, columns=None, bundled_defaults=False)


def _add_member_options(cmd: argparse.ArgumentParser, member: str, server: str) -> None:
    """The protocol's options and where a data-holding member's rows and server are."""
    _add_protocol_options(cmd)
    cmd.add_argument("--server", required=True, help=f"HOST:PORT of {server}")
    cmd.add_argument("--identity", required=True,
                     help=f"this {member}'s certificate name, e.g. party-0")
    cmd.add_argument("--file", required=True, help=f"this {member}'s CSV or Parquet file")
    cmd.add_argument("--columns", required=True,
                     help="comma-separated column names in the kernel's order")


def _add_network_commands(sub: Any) -> None:
    certs = sub.add_parser("certs", help="create a CA and certificates for a test deployment",
                           formatter_class=_HelpFormatter)
    certs.add_argument("--out", required=True, help="directory to write them to")
    certs.add_argument("--parties", type=_positive_int, required=True,
                       help="number of party certificates (party-0 ...)")
    certs.add_argument("--host", default=None,
                       help="comma-separated host names or addresses of the server "
                            "(default: localhost,127.0.0.1)")
    certs.add_argument("--services", default=None,
                       help="comma-separated service roles to certify too "
                            f"({', '.join(SERVICE_ROLES)})")
    certs.set_defaults(func=cmd_certs)

    srv = sub.add_parser("serve", help="run the aggregator of a networked run",
                         formatter_class=_HelpFormatter)
    _add_protocol_options(srv)
    srv.add_argument("--parties", type=_positive_int, required=True,
                     help="number of party processes (certificates party-0 ...)")
    srv.add_argument("--min-parties", type=_positive_int, default=None,
                     help="go on without parties that have not joined when joining times "
                          "out, if at least this many have (default: all must join)")
    srv.add_argument("--listen", default="127.0.0.1:50051", help="HOST:PORT to listen on")
    srv.add_argument("--output", default=None, help="also write the release (JSON) here")
    srv.add_argument("--run-dir", default=None, metavar="DIR",
                     help="the run directory (its database: members, accepted frames, "
                          "the state after each round, the release). A directory holding "
                          "a run of the same options resumes it (a restarted server); a "
                          "finished run's release is read back. Default: a new directory "
                          "under $FEDUSTAT_RUN_ROOT or ~/.local/share/fedustat/runs, "
                          "printed at the end")
    _add_operations_options(srv)
    srv.set_defaults(func=cmd_serve)

    party = sub.add_parser("party", help="take part in a networked run with your own data",
                           formatter_class=_HelpFormatter)
    _add_member_options(party, "party", "the server")
    party.add_argument("--state-dir", default=None, metavar="DIR",
                       help="this party's own state directory: a process restarted with "
                            "it rejoins under the same identity and resends the same "
                            "frame (one directory per party and run)")
    party.set_defaults(func=cmd_party)

    col = sub.add_parser("collect", help="serve a collection window: devices send one report "
                                         "each, whenever they are online",
                         formatter_class=_HelpFormatter)
    _add_protocol_options(col)
    col.add_argument("--window", type=float, required=True,
                     help="seconds until the window closes")
    col.add_argument("--quorum", type=_positive_int, default=None,
                     help="close as soon as this many reports are in (default: at the "
                          "deadline only)")
    col.add_argument("--linger", type=float, default=1.0,
                     help="seconds to keep telling late devices that the window closed")
    col.add_argument("--listen", default="127.0.0.1:50051", help="HOST:PORT to listen on")
    col.add_argument("--output", default=None, help="also write the release (JSON) here")
    col.add_argument("--run-dir", default=None, metavar="DIR",
                     help="run directory (made if missing; default: a new one under "
                          "$FEDUSTAT_RUN_ROOT or ~/.local/share/fedustat/runs, printed): "
                          "every accepted report is committed "
                          "there before its device is acknowledged; the same directory "
                          "resumes the window after a restart and reads back a finished "
                          "run's release (docs/collection.md)")
    col.add_argument("--partitions", action="store_true",
                     help="also write the reports to Parquet partitions in the run "
                          "directory and release from them on a Dask engine, so this "
                          "process never holds them")
    col.add_argument("--engine", default=None,
                     help="with --partitions: 'local' (default: a local cluster of 2 "
                          "workers started at the close) or a scheduler address "
                          "tcp://host:port")
    col.add_argument("--no-durable", action="store_true",
                     help="keep the reports in memory only (a crash loses them): for "
                          "comparison, not for deployments")
    _add_operations_options(col)
    col.set_defaults(func=cmd_collect)

    rpt = sub.add_parser("report", help="send this device's one report to a collection "
                                        "window", formatter_class=_HelpFormatter)
    _add_member_options(rpt, "device", "the collection server")
    rpt.add_argument("--keep", default=None, metavar="FILE",
                     help="keep the report in FILE before sending it: run again after a "
                          "crash, the device resends that same report (counted once) "
                          "instead of randomizing its record again")
    rpt.set_defaults(func=cmd_report)

    svc = sub.add_parser("service", help="run a record-less service role of a networked run "
                                         "(e.g. the shuffler of ghazi-shuffle)",
                         formatter_class=_HelpFormatter)
    _add_protocol_options(svc)
    svc.add_argument("--role", choices=SERVICE_ROLES, required=True,
                     help="which service (its certificate carries this name)")
    svc.add_argument("--server", required=True, help="HOST:PORT of the server")
    svc.set_defaults(func=cmd_service)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def cmd_reproduce(args: argparse.Namespace) -> int:
    from fedustat import reproduce

    _simulation_only(args, "reproduce")
    if args.list and args.format == "json":
        print(json.dumps([{"name": e.name, "paper": e.paper, "target": e.target,
                           "data": e.data, "summary": e.summary}
                          for e in reproduce.available()], indent=2))
        return 0
    if args.list:
        for exp in reproduce.available():
            print(f"{exp.name:<14} {exp.paper}, {exp.target}")
            print(f"{'':<14} data: {exp.data}")
        return 0
    if not args.names:
        raise SystemExit("error: name an experiment or pass --list; available: "
                         + ", ".join(e.name for e in reproduce.available()) + ", or all")
    if args.seed < 0:
        raise SystemExit(f"error: --seed must be non-negative, got {args.seed}")
    if "all" in args.names:
        experiments = reproduce.available()
    else:
        try:
            experiments = [reproduce.get_experiment(n) for n in dict.fromkeys(args.names)]
        except ValueError as exc:
            raise SystemExit(f"error: {exc}") from None
    show = sys.stderr.isatty() if args.progress is None else args.progress
    done: list[dict[str, Any]] = []
    with _Progress(len(experiments), show) as bar:
        for exp in experiments:
            bar.describe(exp.name)
            result = exp.run(quick=args.quick, seed=args.seed)
            report = _reproduce_report(reproduce, result, exp.name, args.out,
                                       several=len(experiments) > 1)
            if args.format == "json":
                done.append(_reproduce_json(exp, result, report))
            else:
                bar.write_above(_reproduce_text(exp, result, report))
            bar.advance()
    if args.format == "json":
        print(json.dumps(done, indent=2, default=_json_scalar))
    return 0


def _reproduce_report(reproduce: Any, result: Any, name: str, out: str | None,
                      several: bool) -> str | None:
    """Write the report to ``out`` (``out/NAME`` for several experiments; '' = none)."""
    if out == "":
        return None
    folder = (Path("fedustat-reproduce") / name if out is None
              else Path(out) / name if several else Path(out))
    try:
        return str(reproduce.write_report(result, folder))
    except ImportError as exc:
        raise SystemExit(f"error: the report's figures need matplotlib ({exc}); install "
                         "fedustat[plot] or pass --out ''") from None


def _reproduce_text(exp: Any, result: Any, report: str | None) -> str:
    lines = [f"{exp.paper}, {exp.target}: {result.title}", result.table()]
    lines += [f"- {note}" for note in result.notes]
    message = f"wall time {result.seconds:.1f} s"
    if report is not None:
        message += f"; report written to {report}"
    return "\n".join([*lines, message])


def _reproduce_json(exp: Any, result: Any, report: str | None) -> dict[str, Any]:
    """One experiment's result as JSON: its table (the paper's numbers in the columns named
    ``paper ...``), notes, how it was run and where its report is."""
    return {"name": exp.name, "paper": exp.paper, "target": exp.target, "data": exp.data,
            "title": result.title, "headers": list(result.headers),
            "rows": [list(row) for row in result.rows], "notes": list(result.notes),
            "quick": result.quick, "seed": result.seed, "seconds": result.seconds,
            "report": report}


def _json_scalar(value: Any) -> Any:
    """NumPy scalars as Python numbers; anything else JSON cannot hold as its text."""
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


class _Progress:
    """A progress bar over experiments on stderr, its elapsed time ticking while one runs.

    The experiments report no intermediate steps, so the bar counts finished experiments
    and a background thread refreshes it once a second (the elapsed time stays current
    during a long one). Disabled, it prints the text it is given and nothing else.
    """

    def __init__(self, total: int, show: bool) -> None:
        self.show = show
        self.bar: Any = None
        self._stop: Any = None
        self._thread: Any = None
        if show:
            import threading

            from tqdm import tqdm

            self.bar = tqdm(total=total, file=sys.stderr, unit="experiment",
                            dynamic_ncols=True)
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self.bar.refresh()

    def __enter__(self) -> _Progress:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self._stop.set()
            self._thread.join()
            self.bar.close()

    def describe(self, name: str) -> None:
        if self.bar is not None:
            self.bar.set_description(name)

    def advance(self) -> None:
        if self.bar is not None:
            self.bar.update(1)

    def write_above(self, text: str) -> None:
        """Print to stdout without breaking the bar on stderr."""
        if self.bar is not None:
            self.bar.clear()
        print(text, flush=True)
        if self.bar is not None:
            self.bar.refresh()


#: Python keyword spellings in the library's messages, and the flags a CLI user types
#: instead. ``{column}`` is the column the message names (or COLUMN). Applied by
#: :func:`flag_hint` to every message that reaches the command line.
_FLAG_SPELLINGS: tuple[tuple[str, str], ...] = (
    # A column's bounds: per column when the message names one, else the single --bounds.
    (r"(?<![\w-])bounds=\((?:lo|low), ?(?:hi|high)\)", "{bounds}"),
    (r"(?<![\w-])domain=(?:\[\.\.\.\])?", "--column-values {column}=V1,V2,..."),
    (r"(?<![\w-])precision=(?!\w)", "--precision P"),
    (r"(?<![\w-])column_bounds\b", "--column-bounds"),
    (r"(?<![\w-])column_values\b", "--column-values"),
    (r"(?<![\w-])thresholds=(?!\w)", "--param thresholds=T1,T2,..."),
    # The curve releases' grid: "one of thresholds (...)", "the public grid: thresholds,".
    (r"(?<=one of )thresholds\b|(?<=grid: )thresholds\b", "--param thresholds=T1,T2,..."),
    (r"public score domain size d\b", "public score domain size d (--param d=D)"),
    # The advisor's keyword arguments (``fedustat advise``): the snake_case names are the
    # options' own, so they are rewritten wherever they stand alone.
    (r"(?<![\w-])n_pos(?![\w\[])", "--n-pos"),
    (r"(?<![\w-])n_neg(?![\w\[])", "--n-neg"),
    (r"(?<![\w-])domain_size(?![\w\[])", "--domain-size"),
    (r"(?<![\w-])max_bits_per_party(?![\w\[])", "--max-bits"),
    (r"(?<=error: )bounds (?=is required|names unknown|for \w+ must)", "--bounds "),
    (r"public \(lo, hi\)", "public LO,HI"),
)


def flag_hint(message: str) -> str:
    """A library message with its Python keyword hints spelled as command-line flags.

    The library speaks to Python callers (``bounds=(lo, hi)``, ``domain=[...]``); at the
    command line the same advice is ``--column-bounds x=LO,HI`` or ``--bounds LO,HI``,
    ``--column-values x=V1,V2,...``, ``--precision P``. One mapping here rather than
    CLI-specific wording inside the library.
    """
    named = (re.search(r"column '([^']+)'", message)
             or re.search(r"(\w+) has values that are not in the declared domain", message))
    column = named.group(1) if named else "COLUMN"
    bounds = f"--column-bounds {column}=LO,HI" if named else "--bounds LO,HI"
    for pattern, flag in _FLAG_SPELLINGS:
        replacement = flag.format(column=column, bounds=bounds)
        message = re.sub(pattern, lambda _m, r=replacement: r, message)
    return re.sub(r"(?<![\w-])(\w+)=('[^']*'|True|False|(?=[\s),;]|$))", _keyword_flag,
                  message)


#: Keyword arguments with an option of their own (``protocol='exact'`` is --protocol exact).
_OWN_OPTIONS = ("protocol", "noise", "engine")


def _keyword_flag(match: re.Match[str]) -> str:
    """``name='value'``, ``name=True`` or a bare ``name=`` as the option that sets it:
    its own option, or ``--param`` for a protocol parameter; anything else unchanged."""
    name, value = match.group(1), match.group(2)
    value = value.strip("'").lower() if value in ("True", "False") else value.strip("'")
    if name in _OWN_OPTIONS and value:
        return f"--{name} {value}"
    if name not in _protocol_parameter_names():
        return match.group(0)
    return f"--param {name}={value or name.upper()}"


def _protocol_parameter_names() -> frozenset[str]:
    """Every registered protocol's keyword parameters (given with ``--param``)."""
    names: set[str] = set()
    for entry in registry.available():
        names.update(registry.parameters(entry.name))
    return frozenset(names - {"bounds", "domain", "precision", "noise"})


def _warning_printer() -> Callable[..., None]:
    """A ``warnings.showwarning`` that prints each distinct warning once per command.

    Commands that run many repetitions (``compare``) enter ``warnings.catch_warnings``
    per run, which resets Python's own once-per-location bookkeeping; one line per
    distinct message is what the reader needs."""
    shown: set[str] = set()

    def show(message: Warning | str, category: type[Warning], filename: str,
             lineno: int, file: Any = None, line: str | None = None) -> None:
        text = f"warning: {flag_hint(str(message))}"
        if text not in shown:
            shown.add(text)
            print(text, file=sys.stderr)
    return show


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; a bad input ends with one ``error: ...`` line on stderr and
    exit status 1 (argparse's own usage errors: status 2), never a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "seed", None) is not None and args.seed < 0:
        # NumPy's seeds are non-negative; said here, before any command runs.
        raise SystemExit(f"error: --seed must be a non-negative integer, got {args.seed}")
    try:
        with warnings.catch_warnings():
            # The library's warnings, one line each, their hints in flags too.
            warnings.showwarning = _warning_printer()
            return int(args.func(args))
    except SystemExit as exc:
        # Messages of the library reach the user through SystemExit("error: ..."): say
        # their hints in flags.
        if isinstance(exc.code, str):
            raise SystemExit(flag_hint(exc.code)) from None
        raise
    except (ValueError, TypeError, OverflowError, MemoryError, OSError, ImportError) as exc:
        # Every command checks its input with a specific message; this is the last line of
        # defence so that an unforeseen bad input still reads as one line, not a traceback.
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SystemExit(flag_hint(f"error: {message}")) from None


if __name__ == "__main__":
    sys.exit(main())
