"""Local-DP protocols: speed at scale and error next to the papers' bounds, in one table.

Run:  .venv/bin/python benchmarks/bench_ldp.py [--quick]

Rows come from ``ldp_generic_cases.rows`` (quantization + k-ary randomized response,
000 Alg. 1, and the Ghazi et al. baseline of 002) and ``ldp_tree_cases.rows`` (AUC on
hierarchical histograms, 000 Sec. 4): wall time end to end through the simulator, mean
absolute error over repeated runs, and the theoretical bound beside it.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ldp_generic_cases
import ldp_tree_cases

COLUMNS = ["protocol", "case", "n", "k or d", "epsilon", "runs", "seconds",
           "mean_abs_error", "bound", "notes"]


def _cell(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def format_table(rows: list[dict]) -> str:
    cells = [[_cell(r.get(c if c != "k or d" else "k_or_d", r.get("k", r.get("d"))))
              for c in COLUMNS] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (about a minute)")
    args = parser.parse_args()
    rows = ldp_generic_cases.rows(quick=args.quick) + ldp_tree_cases.rows(quick=args.quick)
    print(format_table(rows))


if __name__ == "__main__":
    main()
