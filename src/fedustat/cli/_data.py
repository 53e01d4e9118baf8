"""What several subcommands read from their options: the rows of a statistic (bundled,
file, or a networked party's own), its kernel, and the protocol's public parameters
(bounds, value lists, precision, --param); the randomness a release uses."""

from __future__ import annotations

import argparse
import inspect
from typing import Any

import numpy as np

from fedustat import catalogue, datasets
from fedustat.catalogue import Statistic
from fedustat.cli._parsing import _check_file, _parse_pair, _parse_params, _parse_value
from fedustat.protocols import registry
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


class ProtocolRefusedError(Exception):
    """The chosen protocol cannot compute this statistic (or its parameters are wrong)."""


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


def _all_protocols() -> list[str]:
    """Every protocol name: U-statistic protocols, curve releases of the registry and the
    central curve releases, sorted."""
    return sorted({entry.name for entry in registry.available()}
                  | {entry.name for entry in registry.available_curves()}
                  | set(catalogue.CURVE_RELEASES))


def _simulation_only(args: argparse.Namespace, command: str) -> None:
    """compare and reproduce are studies: repeated seeded runs measured against the exact
    value, which only simulation noise makes possible (and affordable)."""
    if args.noise == "deployment":
        raise SystemExit(f"error: fedustat {command} runs seeded simulations to measure "
                         "errors and supports --noise simulation only; release a statistic "
                         "with deployment noise with `fedustat estimate --noise deployment`")


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


NOISE_DESCRIPTIONS = {
    "simulation": "simulation noise: seeded NumPy draws, a study, NOT a protection of "
                  "the people in the data",
    "deployment": "deployment noise: OS CSPRNG for shares, masks and keys, fixed-work "
                  "samplers for the noise; not reproducible",
    "none": "no noise",
}

