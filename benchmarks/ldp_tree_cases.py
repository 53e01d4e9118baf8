"""Benchmark cases of the LDP AUC protocol on hierarchical histograms (``"ldp-tree"``).

Usage::

    .venv/bin/python benchmarks/ldp_tree_cases.py [--quick]

``rows(quick)`` returns one dict per case with the columns ``protocol, case, n, d,
epsilon, runs, seconds, mean_abs_error, bound, notes``:

* timing: 10^6 parties per class, d = 2^20, end to end through
  :func:`fedustat.runtime.simulate.simulate` (target: under 10 s);
* error: the mean absolute error over ``runs`` runs on the synthetic data sets of 001
  App. D.1 (``auc_one``, ``ur``, ``ithdigit``) for epsilon in {0.5, 1, 2, 4} and several
  d, the shape of 001 Fig. 5 (the paper uses 10^6 inputs per class and 20 runs);
* the splitting strategies of 001 Table 1 side by side.

Every case runs 000 eq. 10's pruned recursion (``recursion="pruned"``), the paper's
estimator; the unbiased full recursion, the default for ``d <= 2^12``, is measured by
``bench_inference.py --only ldp_tree``.

``n`` is the total number of parties (both classes). ``seconds`` is the mean wall time
of one run (data generation excluded). The error is measured against the exact AUC of
the discretized scores the protocol receives. ``bound`` is the square root of Theorem 3's
MSE bound (000 Thm 3 with the node variances derived in
:mod:`fedustat.protocols.local.auc_tree`), an upper bound on the RMSE and therefore on the
mean absolute error; with users split across levels 001 App. B.2.2 proves it only up to
a factor alpha for this (sample) error.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np

from fedustat.datasets.bundled import Dataset
from fedustat.datasets.synthetic import auc_one, ithdigit, ur
from fedustat.protocols.local import auc_tree as ldp_auc_tree
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, roc_auc

KERNEL = auc_kernel()
EPSILONS = (0.5, 1.0, 2.0, 4.0)


def _dataset(name: str, alpha: int, n_per_class: int, seed: int) -> Dataset:
    if name == "auc_one":
        return auc_one(alpha, n_per_class, rng=seed)
    if name == "ur":
        return ur(alpha, n_per_class, rng=seed)
    return ithdigit(n_per_class, alpha=alpha, rng=seed)


def run_case(name: str, alpha: int, n_per_class: int, epsilon: float, runs: int, *,
             split: str = "users", delta: float = 0.0, seed: int = 0) -> dict[str, Any]:
    """Run the protocol ``runs`` times on one data set; one benchmark row."""
    ds = _dataset(name, alpha, n_per_class, seed)
    scores, labels = ds.columns["score"], ds.columns["label"]
    data = KERNEL.pack(scores, labels)
    exact = roc_auc(scores, labels)
    # 000 eq. 10's pruned recursion, the estimator of 001 Fig. 5 and of Theorem 3's bound.
    proto = ldp_auc_tree.LdpAucTree(KERNEL, epsilon, d=1 << alpha, split=split, delta=delta,
                                    recursion="pruned")
    values, std_errors, seconds = [], [], []
    for r in range(runs):
        start = time.perf_counter()
        est = simulate(proto, data, rng=seed * 1000 + r)
        seconds.append(time.perf_counter() - start)
        values.append(est.raw_value)
        std_errors.append(est.std_error)
    values_arr = np.asarray(values)
    diag = est.diagnostics
    notes = [f"split={split}", f"composition={diag['composition']}",
             f"eps_level={diag['level_epsilon']:.4g}", f"a={diag['a']:.3g}",
             f"mean std_error={np.mean(std_errors):.3g}",
             f"bits/party={est.cost.bits_per_party:g}"]
    if delta:
        notes.append(f"delta={delta:g}")
    if name == "ithdigit":
        notes.append(f"quantized AUC={exact:g}; mean |est - 1| (continuous AUC)="
                     f"{np.mean(np.abs(values_arr - 1.0)):.3g}")
    case = name if split == "users" else f"{name} [{split}]"
    return {
        "protocol": "ldp-tree",
        "case": case,
        "n": int(scores.size),
        "d": f"2^{alpha}",
        "epsilon": epsilon,
        "runs": runs,
        "seconds": float(np.mean(seconds)),
        "mean_abs_error": float(np.mean(np.abs(values_arr - exact))),
        "bound": math.sqrt(diag["mse_bound"]),
        "notes": "; ".join(notes),
    }


def rows(quick: bool = False) -> list[dict[str, Any]]:
    """All benchmark rows; ``quick=True`` runs a reduced set in well under a minute."""
    out: list[dict[str, Any]] = []
    # Timing at the paper's scale (001 App. D.1: 10^6 inputs per class), d = 2^20.
    timing_runs = 1 if quick else 3
    for name in ("ur", "auc_one"):
        row = run_case(name, 20, 10**6, 1.0, timing_runs, seed=1)
        row["case"] = f"{name} (timing)"
        row["notes"] += "; target under 10 s end to end"
        out.append(row)
    if not quick:
        row = run_case("auc_one", 20, 10**6, 1.0, 1, split="budget-basic", seed=1)
        row["case"] += " (timing)"
        out.append(row)

    # Error against epsilon and d (the shape of 001 Fig. 5).
    n_per_class = 10**4 if quick else 10**6
    runs = 5 if quick else 20
    alphas = (8, 16) if quick else (8, 12, 16, 20)
    epsilons = (1.0, 4.0) if quick else EPSILONS
    for name in ("auc_one", "ur", "ithdigit"):
        for alpha in alphas:
            for eps in epsilons:
                out.append(run_case(name, alpha, n_per_class, eps, runs, seed=2))

    # Splitting strategies (001 Table 1).
    n_split = 10**4 if quick else 10**5
    split_runs = 5 if quick else 20
    for name in ("auc_one", "ur"):
        for eps in ((1.0,) if quick else (1.0, 4.0)):
            for split, delta in (("users", 0.0), ("budget-basic", 0.0),
                                 ("budget-advanced", 1e-3)):
                out.append(run_case(name, 16, n_split, eps, split_runs, split=split,
                                    delta=delta, seed=3))
    return out


def _format(table: list[dict[str, Any]]) -> str:
    header = (f"{'protocol':<9} {'case':<28} {'n':>8} {'d':>5} {'eps':>4} {'runs':>4} "
              f"{'seconds':>8} {'mean|err|':>10} {'bound':>8}  notes")
    lines = [header, "-" * len(header)]
    for r in table:
        lines.append(f"{r['protocol']:<9} {r['case']:<28} {r['n']:>8} {r['d']:>5} "
                     f"{r['epsilon']:>4g} {r['runs']:>4} {r['seconds']:>8.3f} "
                     f"{r['mean_abs_error']:>10.4f} {r['bound']:>8.4f}  {r['notes']}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced set (< 60 s)")
    args = parser.parse_args()
    print(_format(rows(quick=args.quick)))
