"""Time the exact fast paths of fedustat.stats against scikit-learn / SciPy.

Usage::

    .venv/bin/python benchmarks/bench_exact.py [--n 1000000] [--repeats 3] [--brute-n 2000]

Prints one table: for AUC (vs ``sklearn.metrics.roc_auc_score``) and Kendall's tau-b (vs
``scipy.stats.kendalltau``) on continuous and on heavily tied data, our median time, the
reference's, their ratio and the largest absolute difference of the values; timings of the
Gini mean difference and the duplicate-pair ratio; and, at a small n, the brute-force
complete U-statistic next to the fast path.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.stats
from sklearn.metrics import roc_auc_score

from fedustat.stats import (
    auc_kernel,
    duplicate_pair_kernel,
    duplicate_pair_ratio,
    gini_kernel,
    gini_mean_difference,
    kendall_tau,
    kendall_tau_kernel,
    roc_auc,
    ustatistic,
)


def median_time(func: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``repeats`` calls after one warm-up call, and the last value."""
    value = func()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        value = func()
        times.append(time.perf_counter() - start)
    return statistics.median(times), value


def row(name: str, data: str, n: int, ours: float, ref: float | None,
        diff: float | None) -> str:
    ref_s = f"{ref:10.4f}" if ref is not None else f"{'-':>10}"
    ratio = f"{ours / ref:7.2f}" if ref is not None else f"{'-':>7}"
    diff_s = f"{diff:10.2e}" if diff is not None else f"{'-':>10}"
    return f"{name:<26} {data:<12} {n:>9} {ours:10.4f} {ref_s} {ratio} {diff_s}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="records (default 10^6)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (median)")
    parser.add_argument("--brute-n", type=int, default=2000,
                        help="records for the brute-force comparison (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    n, reps = args.n, args.repeats
    rng = np.random.default_rng(args.seed)

    x_cont = rng.normal(size=n)
    y_cont = 0.5 * x_cont + rng.normal(size=n)
    x_tied = rng.integers(0, 10, size=n).astype(np.float64)
    y_tied = np.minimum(x_tied + rng.integers(0, 6, size=n), 12).astype(np.float64)
    labels = (rng.random(n) < 1.0 / (1.0 + np.exp(-x_cont))).astype(np.int64)

    header = (f"{'statistic':<26} {'data':<12} {'n':>9} {'ours (s)':>10} {'ref (s)':>10} "
              f"{'ratio':>7} {'max |diff|':>10}")
    lines = [header, "-" * len(header)]

    for data_name, scores in (("continuous", x_cont), ("tied (10)", x_tied)):
        t_ours, v_ours = median_time(lambda s=scores: roc_auc(s, labels), reps)
        t_ref, v_ref = median_time(lambda s=scores: roc_auc_score(labels, s), reps)
        lines.append(row("AUC vs sklearn", data_name, n, t_ours, t_ref, abs(v_ours - v_ref)))

    for data_name, (x, y) in (("continuous", (x_cont, y_cont)), ("tied (10x13)", (x_tied, y_tied))):
        t_ours, v_ours = median_time(lambda x=x, y=y: kendall_tau(x, y), reps)
        t_ref, v_ref = median_time(lambda x=x, y=y: scipy.stats.kendalltau(x, y).statistic, reps)
        lines.append(row("Kendall tau-b vs SciPy", data_name, n, t_ours, t_ref,
                         abs(v_ours - v_ref)))

    t_gini, _ = median_time(lambda: gini_mean_difference(x_cont), reps)
    lines.append(row("Gini mean difference", "continuous", n, t_gini, None, None))
    t_dup, _ = median_time(lambda: duplicate_pair_ratio(x_tied), reps)
    lines.append(row("duplicate-pair ratio", "tied (10)", n, t_dup, None, None))

    m = args.brute_n
    lines.append("")
    lines.append(f"fast path vs brute force (ustatistic(..., use_fast_path=False)) at n = {m}; "
                 f"the last column scales the brute-force time by (n / {m})^2 to n = {n}")
    head2 = (f"{'U-statistic':<26} {'n':>9} {'fast (s)':>10} {'brute (s)':>10} "
             f"{'speedup':>9} {'max |diff|':>10} {'brute at n (s)':>15}")
    lines.append(head2)
    lines.append("-" * len(head2))
    small = slice(0, m)
    cases = [
        ("AUC", auc_kernel(), auc_kernel().pack(x_cont[small], labels[small])),
        ("Kendall tau", kendall_tau_kernel("b"),
         kendall_tau_kernel("b").pack(x_tied[small], y_cont[small])),
        ("Gini mean difference", gini_kernel((-10.0, 10.0)),
         gini_kernel((-10.0, 10.0)).pack(np.clip(x_cont[small], -10, 10))),
        ("duplicate-pair ratio", duplicate_pair_kernel(),
         duplicate_pair_kernel().pack(x_tied[small])),
    ]
    for name, kernel, data in cases:
        t_fast, v_fast = median_time(lambda k=kernel, d=data: ustatistic(k, d), reps)
        t_brute, v_brute = median_time(
            lambda k=kernel, d=data: ustatistic(k, d, use_fast_path=False), 1)
        lines.append(f"{name:<26} {m:>9} {t_fast:10.5f} {t_brute:10.4f} "
                     f"{t_brute / t_fast:9.0f} {abs(v_fast - v_brute):10.2e} "
                     f"{t_brute * (n / m) ** 2:15.0f}")

    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
