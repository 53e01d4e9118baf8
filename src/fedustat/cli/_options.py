"""The options several subcommands share, defined once.

Every default here is the library's own: read from the public function that answers the
same question in Python (``fedustat.estimate``, ``fedustat.ecdf``, ...), so that the
command line and a Python call give the same release for the same question. The
option help texts go through ``%``-formatting (argparse), so a literal percent sign there
is ``%%``; descriptions are printed as written (``tests/test_cli_conventions.py`` checks both).
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

from fedustat import api, catalogue, curves
from fedustat.api import NOISE_CHOICES


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


def library_default(function: Callable[..., Any], parameter: str) -> Any:
    """The default of ``parameter`` in the public function ``function``: the one place a
    default lives, read here rather than restated."""
    return inspect.signature(function).parameters[parameter].default


#: The epsilon of a release when --epsilon is not given, in every subcommand that takes
#: one (catalogue.DEFAULT_EPSILON; the Python functions take epsilon= explicitly).
DEFAULT_EPSILON: float = catalogue.DEFAULT_EPSILON
#: delta when --delta is not given: fedustat.estimate's (and every public function's).
DEFAULT_DELTA: float = library_default(api.estimate, "delta")

#: The Python function whose grid_points default a curve statistic's grid takes.
_CURVE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "ecdf": curves.ecdf, "roc": curves.roc_curve, "quantile": curves.quantile,
    "median": curves.median}


def curve_grid_points(curve: str) -> int:
    """Points of a curve's even grid on its bounds when --grid-points is not given: the
    library's one default for that curve (:func:`fedustat.curves.default_grid_points`,
    the default of ``fedustat.ecdf``, ``roc_curve``, ``quantile`` and ``median``)."""
    return curves.default_grid_points(curve)


def add_epsilon(cmd: argparse.ArgumentParser, *, what: str = "privacy budget epsilon > 0"
                ) -> None:
    """--epsilon: defaulted the same way in every subcommand that releases or predicts
    a release (docs/user-guide.md, "Command-line defaults")."""
    cmd.add_argument("--epsilon", type=float, default=DEFAULT_EPSILON, help=what)


def add_delta(cmd: argparse.ArgumentParser, *, what: str = "privacy parameter delta in "
              "[0, 1)") -> None:
    cmd.add_argument("--delta", type=float, default=DEFAULT_DELTA, help=what)


def add_format(cmd: argparse.ArgumentParser, *, what: str = "output format") -> None:
    cmd.add_argument("--format", choices=["table", "json"], default="table", help=what)


def add_seed(cmd: argparse.ArgumentParser, *, default: int | None, what: str) -> None:
    cmd.add_argument("--seed", type=int, default=default, help=what)


def add_noise(cmd: argparse.ArgumentParser, *, default: str | None, what: str) -> None:
    cmd.add_argument("--noise", choices=list(NOISE_CHOICES), default=default, help=what)


def add_protocol_parameters(cmd: argparse.ArgumentParser, *, what: str) -> None:
    """--param KEY=VALUE (repeatable), checked by the protocol's factory."""
    cmd.add_argument("--param", action="append", metavar="KEY=VALUE", help=what)


def add_column_domain(cmd: argparse.ArgumentParser, *, bounds_help: str,
                      values_help: str) -> None:
    """--column-bounds COLUMN=LO,HI and --column-values COLUMN=V1,V2,... (repeatable)."""
    cmd.add_argument("--column-bounds", action="append", metavar="COLUMN=LO,HI",
                     help=bounds_help)
    cmd.add_argument("--column-values", action="append", metavar="COLUMN=V1,V2,...",
                     help=values_help)


def add_bounds(cmd: argparse.ArgumentParser, *, what: str) -> None:
    cmd.add_argument("--bounds", default=None, metavar="LO,HI", help=what)


def add_precision(cmd: argparse.ArgumentParser, *, what: str) -> None:
    cmd.add_argument("--precision", default=None, help=what)


def add_grid_points(cmd: argparse.ArgumentParser) -> None:
    """--grid-points N of a curve's grid (also spelled --param grid_points=N)."""
    shown = ", ".join(f"{name} {curve_grid_points(name)}" for name in _CURVE_FUNCTIONS)
    cmd.add_argument("--grid-points", type=int, default=None, metavar="N",
                     help="points of the even grid of ecdf, quantile, median and roc on "
                          "--bounds (also accepted as --param grid_points=N); default: the "
                          f"Python function's own ({shown})")


def add_operations_options(cmd: argparse.ArgumentParser) -> None:
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
