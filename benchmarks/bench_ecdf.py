"""Smoothing of private ECDFs (003 Eq. 3): our solvers vs 003's CVXOPT approach, and Thm 1.

Usage::

    .venv/bin/python benchmarks/bench_ecdf.py [--min-exp 10] [--max-exp 16] [--eps 1.0]
                                              [--reps 2000] [--png runtime.png]

Prints one table. For N = 2^min-exp .. 2^max-exp on the Poisson data of 003 Sec. 6.2
(lambda = 3) released at the given epsilon, the time and the objective of Eq. 3 for
p = 1 (the exact dynamic program over the dyadic tree vs CVXOPT ``solvers.lp`` on Eq. 3
as written, 003 Sec. 6.7) and p = 2 (the exact active-set algorithm vs CVXOPT
``solvers.qp``), with the speed-up and the relative difference of the optima; then the
p = 1 flow LP by HiGHS's dual simplex (``method="highs"``, the earlier default) and the
pointwise isotonic projection's time (a different, cheaper estimator). Below the table:
Thm 1's expected squared error by Monte Carlo next to ``2 (L+1)^3 / (eps^2 n^2)``.

CVXOPT is an optional dependency (``pip install cvxopt``); without it the CVXOPT columns
show "-". ``--png`` also writes the runtime-vs-N figure (003 Fig. 7's shape).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from fedustat.datasets import poisson_ecdf
from fedustat.protocols.ecdf import dp_ecdf
from fedustat.protocols.ecdf.smoothing import isotonic_projection, smooth
from fedustat.stats.ecdf import ecdf, tree_depth


def _has_cvxopt() -> bool:
    try:
        import cvxopt  # noqa: F401
    except ImportError:
        return False
    return True


def _timed(func, *args, **kwargs):
    start = time.perf_counter()
    out = func(*args, **kwargs)
    return time.perf_counter() - start, out


def thm1_lines(eps: float, reps: int, seed: int) -> list[str]:
    """Monte Carlo mean squared error per point vs 003 Thm 1, with 5-s.e. bands."""
    rng = np.random.default_rng(seed)
    lines = [f"Thm 1 check (eps = {eps:g}, {reps} releases; band = 5 s.e. from the exact "
             "variance of the squared error)",
             f"{'N':>7} {'n':>7} {'MC mean sq. error':>18} {'2(L+1)^3/(eps n)^2':>19} "
             f"{'ratio':>7} {'within band':>11}"]
    for n_points, n in ((64, 1000), (1024, 5000)):
        values = rng.normal(size=n)
        tau = np.linspace(-3.0, 3.0, n_points)
        exact = ecdf(values, tau)
        sq = np.empty((reps, n_points))
        for r in range(reps):
            sq[r] = (dp_ecdf(values, tau, epsilon=eps, rng=rng,
                             method="003-tree").values - exact) ** 2
        m = tree_depth(n_points) + 1
        b = m / eps
        theory = 2.0 * m**3 / (eps**2 * n**2)
        # Points within one release are dependent; the band uses one point per release.
        var_sq = (12 * m * b**4 + 8 * m**2 * b**4) / n**4
        point_mean = sq[:, n_points // 3].mean()
        ok = abs(point_mean - theory) <= 5 * math.sqrt(var_sq / reps)
        lines.append(f"{n_points:>7} {n:>7} {sq.mean():>18.4e} {theory:>19.4e} "
                     f"{sq.mean() / theory:>7.3f} {'yes' if ok else 'NO':>11}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--min-exp", type=int, default=10)
    parser.add_argument("--max-exp", type=int, default=16)
    parser.add_argument("--eps", type=float, default=1.0)
    parser.add_argument("--lam", type=float, default=3.0)
    parser.add_argument("--reps", type=int, default=2000, help="Monte Carlo releases (Thm 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--png", default=None, help="write the runtime figure here")
    args = parser.parse_args(argv)
    cvx = _has_cvxopt()

    header = (f"{'N':>7} {'p':>2} {'ours':<11} {'ours (s)':>9} {'iters':>6} "
              f"{'CVXOPT (s)':>10} {'iters':>6} {'speed-up':>8} {'objective (ours)':>17} "
              f"{'rel. diff':>10}")
    lines = [f"Smoothing (003 Eq. 3), Poisson data lambda = {args.lam:g}, eps = {args.eps:g}",
             header, "-" * len(header)]
    timings: dict[str, list[float]] = {"LP ours": [], "LP CVXOPT": [], "LP HiGHS": [],
                                       "QP ours": [], "QP CVXOPT": [], "isotonic": []}
    sizes = [2**k for k in range(args.min_exp, args.max_exp + 1)]
    iso_line, highs_line = [], []
    for n_points in sizes:
        x = poisson_ecdf(n_points, args.lam, rng=args.seed).columns["x"]
        tau = np.arange(1, n_points + 1, dtype=float)
        curve = dp_ecdf(x, tau, epsilon=args.eps, rng=args.seed + 1,
                        method="003-tree")
        for p, name in ((1, "dyadic DP"), (2, "active set")):
            t_ours, ours = _timed(smooth, curve, p=p)
            if p == 1:
                t_highs, highs = _timed(smooth, curve, p=1, method="highs")
                timings["LP HiGHS"].append(t_highs)
                rel_highs = (highs.objective - ours.objective) / max(abs(ours.objective),
                                                                      1e-300)
                highs_line.append(f"{n_points:>7} {t_highs:>10.3f} {t_highs / t_ours:>13.1f}x "
                                  f"{rel_highs:>+10.1e}")
            key = "LP" if p == 1 else "QP"
            timings[f"{key} ours"].append(t_ours)
            if cvx:
                t_ref, ref = _timed(smooth, curve, p=p, method="cvxopt")
                timings[f"{key} CVXOPT"].append(t_ref)
                rel = (ref.objective - ours.objective) / max(abs(ours.objective), 1e-300)
                ref_cols = (f"{t_ref:>10.3f} {ref.iterations:>6d} {t_ref / t_ours:>7.1f}x",
                            f"{rel:>+10.1e}")
            else:
                ref_cols = (f"{'-':>10} {'-':>6} {'-':>8}", f"{'-':>10}")
            lines.append(f"{n_points:>7} {p:>2} {name:<11} {t_ours:>9.3f} "
                         f"{ours.iterations:>6d} {ref_cols[0]} {ours.objective:>17.6e} "
                         f"{ref_cols[1]}")
        t_iso, _ = _timed(isotonic_projection, curve)
        timings["isotonic"].append(t_iso)
        iso_line.append(f"{n_points}: {t_iso * 1e3:.2f} ms")
        print(f"  done N = {n_points}", file=sys.stderr, flush=True)
    lines.append("-" * len(header))
    lines.append("rel. diff = (CVXOPT objective - ours) / ours; CVXOPT stops at a relative "
                 "gap of 1e-6.")
    lines.append("p = 1 flow LP by HiGHS dual simplex (method='highs') on the same noisy curves; "
                 "rel. diff = (HiGHS objective - ours) / ours:")
    lines.append(f"{'N':>7} {'HiGHS (s)':>10} {'HiGHS / ours':>14} {'rel. diff':>10}")
    lines.extend(highs_line)
    lines.append("pointwise isotonic projection (a different estimator): "
                 + ", ".join(iso_line))
    lines.append("")
    lines.extend(thm1_lines(args.eps, args.reps, args.seed + 7))
    print("\n".join(lines))

    if args.png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for key, series in timings.items():
            if series:
                ax.loglog(sizes, series, marker="o", label=key)
        ax.set_xlabel("N (grid points)")
        ax.set_ylabel("smoothing time (s)")
        ax.set_title(f"003 Eq. 3 smoothing, eps = {args.eps:g}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
