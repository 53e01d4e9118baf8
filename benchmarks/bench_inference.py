"""Validity of what a statistician reads off a release: p-values, intervals, curves.

Usage::

    .venv/bin/python benchmarks/bench_inference.py [--quick] [--only hl,pvalues,...]
                                                   [--seed 0] [--markdown]

Every row is one figure measured by Monte Carlo through the one-call functions a user types
(``fedustat.hosmer_lemeshow``, ``fedustat.kendalltau``, ``fedustat.roc_curve``,
``fedustat.auc``, ``fedustat.ecdf``, ...) on data generated here (skewed, heavy-tailed and
tied: ``inference_common.py``), next to its goal, and whether the goal is met. Tolerances
come from the number of runs. The sections (one module each, ``inference_<name>.py``):

``hl``: size and power of the private Hosmer-Lemeshow test; ``pvalues``: every p-value's
tails under H0; ``roc``: bias, standard error and coverage of the DP ROC curve's AUC, and
the curve's L1 error; ``auc``: bias and coverage of every AUC protocol's interval
(``ldp_tree``: that of ``ldp-tree``); ``curves``: released ECDF and ROC curves in range and
monotone.

``--quick`` runs fewer Monte Carlo runs (a smoke run: its tolerances are wider); the exit
status is 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from inference_common import Row

SECTIONS = ("hl", "pvalues", "roc", "auc", "ldp_tree", "curves")


def _table(rows: list[Row], markdown: bool) -> str:
    header = ("item", "setting", "measure", "figure", "goal", "met")
    cells = [header] + [(r.item, r.setting, r.measure, r.figure, r.goal,
                         "yes" if r.met else "NO") for r in rows]
    if markdown:
        lines = ["| " + " | ".join(c) + " |" for c in cells]
        lines.insert(1, "|" + "---|" * len(header))
        return "\n".join(lines)
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer Monte Carlo runs")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help=f"comma-separated sections of {', '.join(SECTIONS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        parser.error(f"--only: unknown section(s) {', '.join(unknown)}; "
                     f"choose from {', '.join(SECTIONS)}")
    missed = 0
    for name in chosen:
        module = importlib.import_module(f"inference_{name}")
        start = time.perf_counter()
        rows = module.rows(quick=args.quick, seed=args.seed)
        seconds = time.perf_counter() - start
        print(f"\n## {name} ({seconds:.0f} s)\n")
        print(_table(rows, args.markdown))
        if not rows:
            print("(no figures: the section measured nothing)")
            missed += 1
        missed += sum(not r.met for r in rows)
    print(f"\n{'all goals met' if missed == 0 else f'{missed} goal(s) missed'}")
    return 0 if missed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
