"""The ``fedustat`` command line.

``fedustat estimate`` releases statistics of a CSV/Parquet file with a private protocol
(the exact value only with ``--evaluate``), or of a bundled demo data set beside their
exact value; ``fedustat advise`` predicts every protocol's error
and cost and recommends one; ``fedustat compare`` runs every applicable protocol side by
side and writes a report; ``fedustat datasets`` and ``fedustat protocols`` list what is
available.

One module per subcommand (or small family of them): :mod:`.estimate` (with
:mod:`.curve_release` for the curves), :mod:`.advise`, :mod:`.budget`, :mod:`.compare`,
:mod:`.reproduce`, :mod:`.listings` (datasets, protocols), :mod:`.network` (certs, serve,
party, collect, report, service) and :mod:`.enroll`. The options they share are defined
once in :mod:`._options`, the parsing of their values in :mod:`._parsing`, and the
rewriting of library messages into flags in :mod:`._messages`.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from collections.abc import Sequence
from typing import NoReturn

from fedustat import __version__
from fedustat.cli import (
    advise,
    budget,
    compare,
    enroll,
    estimate,
    listings,
    network,
    reproduce,
)
from fedustat.cli._data import _all_protocols
from fedustat.cli._messages import _warning_printer, did_you_mean, flag_hint

__all__ = ["_all_protocols", "build_parser", "flag_hint", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors also suggest the nearest spelling: of an
    option (``--epsilom``), a subcommand or a choice (``--statistic acu``)."""

    words: Sequence[str] = ()

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        self.words = list(sys.argv[1:] if args is None else args)
        return super().parse_args(self.words, namespace)

    def error(self, message: str) -> NoReturn:
        super().error(message + _usage_suggestion(self, message))


def _options_in_use(parser: _Parser) -> list[str]:
    """The options of the subcommand named on the command line (all of them when none is),
    with the top-level ones."""
    options = [flag for action in parser._actions for flag in action.option_strings]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            named = [action.choices[w] for w in parser.words if w in action.choices]
            for command in named[:1] or list(action.choices.values()):
                options += [flag for a in command._actions for flag in a.option_strings]
    return list(dict.fromkeys(options))


def _usage_suggestion(parser: _Parser, message: str) -> str:
    """"; did you mean '--epsilon'?" after argparse's "unrecognized arguments: --epsilom 1",
    "; did you mean 'auc'?" after its "invalid choice: 'acu'", or ''."""
    if message.startswith("unrecognized arguments: "):
        options = _options_in_use(parser)
        for word in message.removeprefix("unrecognized arguments: ").split():
            hint = did_you_mean(word.partition("=")[0], options) if word.startswith("-") \
                else ""
            if hint:
                return hint
        return ""
    found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if found:
        # Choices are quoted up to Python 3.12 and bare after it; none holds a comma.
        choices = [c.strip().strip("'") for c in found.group(2).split(",")]
        return did_you_mean(found.group(1), choices)
    return ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fedustat",
                     description="Private statistics over data held by many parties.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    estimate.add_parser(sub)
    advise.add_parser(sub)
    compare.add_parser(sub)
    reproduce.add_parser(sub)
    budget.add_parser(sub)
    listings.add_parsers(sub)
    network.add_parsers(sub)
    enroll.add_parsers(sub)
    return parser


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

