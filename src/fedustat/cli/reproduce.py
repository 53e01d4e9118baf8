"""``fedustat reproduce``: the papers' experiments, beside the papers' numbers."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fedustat.api import NOISE_CHOICES
from fedustat.cli._data import _simulation_only
from fedustat.cli._options import _HelpFormatter
from fedustat.cli._progress import _Progress


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



def add_parser(sub: Any) -> None:
    """``fedustat reproduce``."""
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
