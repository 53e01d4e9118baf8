"""Secure protocols: U-MPC (002 Protocol 3.1) and the two-party protocol (000 Sec. 5), one table.

Run:  .venv/bin/python benchmarks/bench_secure.py [--quick]

U-MPC rows (``fedustat.estimate(..., protocol="umpc")``, real shares, real comparisons,
real dealer material, Pólya noise shared among the parties):

* timing: Gini mean difference on U[0, 1] data (002 Sec. 6.2.1) and Kendall's tau-a on
  correlated Gaussian data (002 Sec. 6.2.2 used the Bank Marketing data, not available
  offline) with n = 10^5 parties and |E| = 2n (BalancedSamp), epsilon = 1, M_HF with the
  defaults (f_H = 0.5, fail_prob = 2^-40, |Z| = 40, min_honest = 1), FSS and boolean-
  circuit comparisons. ``seconds`` is the wall time of one run end to end (design,
  dealer, sharing, circuits, noise, aggregation, release); the notes give the rounds
  and the largest per-party online traffic (a member of Z sends n - 1 noise shares).
  Online and offline bits per party are the means in ``Estimate.cost``, measured by the
  runtime (messages to and from the aggregator, plus the peer and dealer traffic each
  party step reports from its transcript); every row checks the secure part against
  Lemma C.3 (``lemma=ok``);
* error: MSE over 50 runs against the *complete* U-statistic (the MSE of 002 Table 1,
  E_tot - E_sample) at n = 10^4 (10^5 takes 3-10 s per run; the error terms scale as
  stated there). Each run draws a fresh BalancedSamp design and fresh noise. The
  comparisons use the boolean circuit (the released value does not depend on the
  comparison method). Two noise settings: min_honest = 1 (robust to collusion within Z:
  |Z| full discrete Laplace draws) and 002's r = 1/|Z| (one draw in total, DP against the
  aggregator alone). ``theory MSE`` is Claim D.1's variance for uniformly sampled edges,
  (N - m) / (m (N - 1)) Var_pairs(f) with the data's exact variance of f over all pairs
  (002 argues BalancedSamp does no worse), plus the noise variance; the notes give
  Table 1's rate 1/|E| + 1/(n^2 eps^2) (constants dropped) and Lemma D.3's bound;
* baselines: the trusted curator (``CentralLaplace``) with Laplace noise on the same kind
  of design (theory: Claim D.1 + 2 (delta_G^max Delta f / (eps |E|))^2) and on the complete
  U-statistic (theory: 2 (k Delta f / (n eps))^2).

Data are rounded to the fixed-point grid (2^-14) so that every protocol sees the same
values. Two-party protocol rows come from ``pairs_2pc_cases.rows(quick)`` when that module
is present in this folder.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fedustat
from fedustat.protocols.central import CentralLaplace
from fedustat.protocols.mpc.umpc import UMPC, incomplete_variance_bound
from fedustat.runtime.simulate import simulate
from fedustat.stats import balanced_sample, gini_kernel, kendall_tau_kernel, ustatistic
from fedustat.stats.kernels import Kernel

try:
    import pairs_2pc_cases
except ImportError:  # the two-party protocol's cases are written separately
    pairs_2pc_cases = None

COLUMNS = ["protocol", "kernel", "n", "|E| or P", "epsilon", "runs", "seconds",
           "online bits/party", "offline bits/party", "MSE", "theory MSE", "notes"]
# Keys accepted for each column (rows from other case modules may spell them differently).
ALIASES = {
    "|E| or P": ("|E| or P", "edges_or_P", "E_or_P", "edges", "P"),
    "online bits/party": ("online bits/party", "online_bits_per_party", "online_bits",
                          "bits_per_party"),
    "offline bits/party": ("offline bits/party", "offline_bits_per_party", "offline_bits"),
    "MSE": ("MSE", "mse"),
    "theory MSE": ("theory MSE", "theory/reference MSE", "theory_mse", "reference_mse",
                   "theory"),
}

GRID = 2.0**-14
GINI = gini_kernel((0.0, 1.0))
KENDALL = kendall_tau_kernel("a")


def _gini_data(n: int, rng: np.random.Generator) -> np.ndarray:
    return GINI.pack(np.round(rng.uniform(0, 1, n) / GRID) * GRID)


def _kendall_data(n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(size=n)
    y = 0.6 * x + 0.8 * rng.normal(size=n)
    return KENDALL.pack(np.round(x / GRID) * GRID, np.round(y / GRID) * GRID)


def _pair_variance(kernel: Kernel, data: np.ndarray) -> float:
    """Variance of f over all C(n, 2) pairs (exact), for Claim D.1."""
    n = data.shape[0]
    pairs = math.comb(n, 2)
    mean = ustatistic(kernel, data)
    if kernel is GINI:
        # mean over pairs of (x_i - x_j)^2 is twice the sample variance.
        second = 2.0 * float(np.var(data[:, 0], ddof=1))
    else:
        # f^2 = 1 unless the pair ties in x or in y (inclusion-exclusion on tie counts).
        def tied(*cols: np.ndarray) -> int:
            _, counts = np.unique(np.column_stack(cols), axis=0, return_counts=True)
            return int(np.sum(counts * (counts - 1) // 2))
        second = 1.0 - (tied(data[:, 0]) + tied(data[:, 1])
                        - tied(data[:, 0], data[:, 1])) / pairs
    return second - mean**2


def _mse(errors: list[float]) -> tuple[float, str]:
    """MSE and its standard error (of the mean of the squared errors)."""
    sq = np.square(errors)
    return float(sq.mean()), f"mse s.e. {float(sq.std(ddof=1)) / math.sqrt(sq.size):.2g}"


def _timing_rows(n: int) -> list[dict[str, Any]]:
    rows = []
    for kernel, make in ((GINI, _gini_data), (KENDALL, _kendall_data)):
        data = make(n, np.random.default_rng(1))
        for method in ("fss", "circuit"):
            start = time.perf_counter()
            est = fedustat.estimate(kernel, data, protocol="umpc", epsilon=1.0, rng=2,
                                    comparison=method)
            seconds = time.perf_counter() - start
            d, c = est.diagnostics, est.cost
            # Lemma C.3 counts the peers' traffic plus z_i (l bits per party) to the
            # aggregator, and the peer rounds plus that upload's round.
            ring_bits = d["fixed_point"]["bits"]
            # The dealt material travels as peer rows; the noise takes its own relay round.
            ok = (round(c.peer_bits_per_party * n) + n * ring_bits
                  == d["lemma_c3_bits"] + d["expected_offline_bits"]
                  and c.peer_rounds == d["lemma_c3_rounds"] + 1 and c.offline_bits == 0)
            rows.append({
                "protocol": f"umpc ({method})", "kernel": kernel.name, "n": n,
                "|E| or P": d["edges"], "epsilon": 1.0, "runs": 1, "seconds": seconds,
                "online bits/party": c.bits_per_party,
                "offline bits/party": c.offline_bits_per_party,
                "notes": (f"{c.rounds} rounds ({c.peer_rounds} among parties); max "
                          f"{c.max_bits_per_party:,} bits/party (Z); lemma="
                          f"{'ok' if ok else 'MISMATCH'}"),
            })
    return rows


def _mse_rows(n: int, runs: int) -> list[dict[str, Any]]:
    rows = []
    eps = 1.0
    m = 2 * n
    for kernel, make in ((GINI, _gini_data), (KENDALL, _kendall_data)):
        data = make(n, np.random.default_rng(3))
        complete = ustatistic(kernel, data)
        var_f = _pair_variance(kernel, data)
        pairs = math.comb(n, 2)
        e_inc = (pairs - m) / (m * (pairs - 1)) * var_f
        rate = 1.0 / m + 1.0 / (n * eps) ** 2
        for min_honest, label in ((1, "min_honest=1: robust within Z"),
                                  (None, "r=1/|Z| (002): DP vs aggregator only")):
            errors, seconds, protocol = [], [], None
            for r in range(runs):
                start = time.perf_counter()
                est = fedustat.estimate(kernel, data, protocol="umpc", epsilon=eps,
                                        rng=100 + r, comparison="circuit",
                                        min_honest=min_honest)
                seconds.append(time.perf_counter() - start)
                errors.append(est.raw_value - complete)  # the lemma's (unclipped) estimator
                protocol = protocol or UMPC(kernel, eps, min_honest=min_honest)
            design = balanced_sample(m, 2, n, rng=0)
            noise = protocol.noise_variance(n, design) if protocol else math.nan
            lemma = incomplete_variance_bound(n, 2, m, kernel.sensitivity) + noise
            mse, se = _mse(errors)
            rows.append({
                "protocol": "umpc", "kernel": kernel.name, "n": n, "|E| or P": m,
                "epsilon": eps, "runs": runs, "seconds": float(np.mean(seconds)),
                "MSE": mse, "theory MSE": e_inc + noise,
                "notes": (f"{se}; {label}; Table 1 rate {rate:.2g}; Lemma D.3 bound "
                          f"{lemma:.2g}; noise {noise:.2g}"),
            })
        # Trusted curator, Laplace noise, on a BalancedSamp design drawn per run.
        errors, seconds = [], []
        for r in range(runs):
            design = balanced_sample(m, 2, n, rng=500 + r)
            start = time.perf_counter()
            est = simulate(CentralLaplace(kernel, eps, design=design), data, rng=600 + r)
            seconds.append(time.perf_counter() - start)
            errors.append(est.raw_value - complete)
        scale = design.max_degree * kernel.sensitivity / (eps * m)
        mse, se = _mse(errors)
        rows.append({
            "protocol": "central-laplace", "kernel": kernel.name, "n": n, "|E| or P": m,
            "epsilon": eps, "runs": runs, "seconds": float(np.mean(seconds)),
            "MSE": mse, "theory MSE": e_inc + 2 * scale**2,
            "notes": f"{se}; trusted curator, same design kind (BalancedSamp)",
        })
        errors, seconds = [], []
        for r in range(runs):
            start = time.perf_counter()
            est = simulate(CentralLaplace(kernel, eps), data, rng=700 + r)
            seconds.append(time.perf_counter() - start)
            errors.append(est.raw_value - complete)
        scale = 2 * kernel.sensitivity / (n * eps)
        mse, se = _mse(errors)
        rows.append({
            "protocol": "central-laplace", "kernel": kernel.name, "n": n,
            "|E| or P": pairs, "epsilon": eps, "runs": runs,
            "seconds": float(np.mean(seconds)), "MSE": mse, "theory MSE": 2 * scale**2,
            "notes": f"{se}; trusted curator, complete U-statistic",
        })
    return rows


def umpc_rows(quick: bool = False) -> list[dict[str, Any]]:
    """The U-MPC and trusted-curator rows (see the module docstring)."""
    timing_n = 10_000 if quick else 100_000
    mse_n, runs = (1_000, 10) if quick else (10_000, 50)
    return _timing_rows(timing_n) + _mse_rows(mse_n, runs)


def _value(row: dict[str, Any], column: str) -> Any:
    for key in ALIASES.get(column, (column,)):
        if key in row:
            return row[key]
    return None


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.3g}"
        return f"{value:.4g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def format_table(rows: list[dict[str, Any]]) -> str:
    known = {k for c in COLUMNS for k in ALIASES.get(c, (c,))}
    cells = []
    for row in rows:
        line = [_cell(_value(row, c)) for c in COLUMNS]
        extra = [f"{k}={_cell(v)}" for k, v in row.items() if k not in known]
        if extra:
            line[-1] = "; ".join(x for x in (line[-1] if line[-1] != "-" else "", *extra) if x)
        cells.append(line)
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="n = 10^4 timing, MSE at n = 1000 over 10 runs")
    args = parser.parse_args()
    rows = umpc_rows(quick=args.quick)
    if pairs_2pc_cases is not None:
        rows += pairs_2pc_cases.rows(quick=args.quick)
    else:
        print("(benchmarks/pairs_2pc_cases.py not found: two-party rows omitted)")
    print(format_table(rows))


if __name__ == "__main__":
    main()
