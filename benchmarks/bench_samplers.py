"""Timing side channels of the deployment noise samplers: does run time track the draw?

Run:  .venv/bin/python benchmarks/bench_samplers.py [--quick] [--draws N] [--markdown]

Every sampler of ``DeploymentNoise`` is called once per draw, each call timed with
``time.perf_counter_ns``; the table reports the median time per draw and the Pearson and
Spearman correlations between ``|draw|`` and the call's time (Pearson on times clipped
to their 1st-99th percentiles, so rare scheduler pauses do not dominate it). A sampler
whose work does not depend on the value has correlations within the noise band
``3/sqrt(draws)`` (three standard errors of a correlation of independent variables).
For comparison the table also times the previous Pólya sampler (a CSPRNG Gamma rate,
then a count of exponential arrivals, reimplemented here) and the OpenDP samplers that
``DeploymentNoise`` used before (``make_laplace`` on floats and integers,
``make_gaussian``, ``make_randomized_response_bool``), when OpenDP is installed.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import time
from collections.abc import Callable

import numpy as np
from scipy import stats

from fedustat.privacy.noise import DeploymentNoise

COLUMNS = ["sampler", "parameters", "draws", "median us/draw", "pearson", "spearman",
           "noise band"]


class OldPolya:
    """The arrival-counting Pólya sampler ``DeploymentNoise`` had before (for comparison)."""

    def __init__(self) -> None:
        self.system = random.SystemRandom()

    def poisson(self, lam: float) -> int:
        # A unit-rate Poisson process: O(1 + lam) exponential arrivals, so time grows with k.
        k = 0
        t = self.system.expovariate(1.0)
        while t < lam:
            k += 1
            t += self.system.expovariate(1.0)
        return k

    def draw(self, r: float, alpha: float) -> int:
        return self.poisson(self.system.gammavariate(r, alpha / (1.0 - alpha)))


def time_draws(draw: Callable[[], object], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Values and per-call times (ns) of ``n`` calls, after a warm-up that builds tables."""
    for _ in range(20):
        draw()
    values = np.empty(n)
    times = np.empty(n)
    gc.disable()
    try:
        for i in range(n):
            start = time.perf_counter_ns()
            value = draw()
            times[i] = time.perf_counter_ns() - start
            values[i] = abs(float(np.asarray(value).reshape(-1)[0]))
    finally:
        gc.enable()
    return values, times


def correlations(values: np.ndarray, times: np.ndarray) -> tuple[float, float]:
    if np.ptp(values) == 0:
        return math.nan, math.nan  # a constant draw has no correlation to report
    # Pearson on times clipped to their 1st-99th percentiles: a few scheduler pauses of
    # milliseconds would otherwise dominate it; Spearman (ranks) needs no clipping.
    clipped = np.clip(times, *np.percentile(times, [1, 99]))
    return (float(stats.pearsonr(values, clipped)[0]),
            float(stats.spearmanr(values, times)[0]))


def deployment_cases() -> list[tuple[str, str, Callable[[], object]]]:
    noise = DeploymentNoise()
    t1 = math.exp(-1.0)  # Pólya ratio of a distributed discrete Laplace at epsilon = 1
    t01 = math.exp(-0.1)
    return [
        ("deployment laplace", "scale=1", lambda: noise.laplace(1.0, 1)),
        ("deployment gaussian", "sigma=1", lambda: noise.gaussian(1.0, 1)),
        ("deployment discrete_laplace", "scale=10", lambda: noise.discrete_laplace(10.0, 1)),
        ("deployment uniform", "-", lambda: noise.uniform(1)),
        ("deployment integers", "high=1000", lambda: noise.integers(1000, 1)),
        ("deployment bernoulli", "p=0.3", lambda: noise.bernoulli(0.3, 1)),
        ("deployment polya", "r=1, alpha=e^-0.1", lambda: noise.polya(1.0, t01, 1)),
        ("deployment polya", "r=1/100, alpha=e^-1", lambda: noise.polya(0.01, t1, 1)),
        # alpha near 1 (U-MPC / shuffle noise at a fine fixed-point resolution): digits
        # for r = 1, the compound Poisson-logarithmic construction otherwise.
        ("deployment polya (digits)", "r=1, alpha=e^-2^-20",
         lambda: noise.polya(1.0, math.exp(-2.0**-20), 1)),
        ("deployment polya (compound)", "r=1/100, alpha=e^-2^-20",
         lambda: noise.polya(0.01, math.exp(-2.0**-20), 1)),
    ]


def old_cases() -> list[tuple[str, str, Callable[[], object]]]:
    old = OldPolya()
    return [
        ("OLD polya (arrival count)", "r=1, alpha=e^-0.1",
         lambda: old.draw(1.0, math.exp(-0.1))),
        ("OLD polya (arrival count)", "r=1/100, alpha=e^-1",
         lambda: old.draw(0.01, math.exp(-1.0))),
    ]


def opendp_cases() -> list[tuple[str, str, Callable[[], object]]]:
    try:
        import opendp.prelude as dp
    except ImportError:
        return []
    dp.enable_features("contrib")
    lap_f = dp.m.make_laplace(dp.atom_domain(T=float, nan=False),
                              dp.absolute_distance(T=float), scale=1.0)
    lap_i = dp.m.make_laplace(dp.atom_domain(T=int), dp.absolute_distance(T=int), scale=10.0)
    gau_f = dp.m.make_gaussian(dp.atom_domain(T=float, nan=False),
                               dp.absolute_distance(T=float), scale=1.0)
    rr = dp.m.make_randomized_response_bool(prob=0.7)
    return [
        ("OpenDP make_laplace (float)", "scale=1", lambda: lap_f(0.0)),
        ("OpenDP make_laplace (int)", "scale=10", lambda: lap_i(0)),
        ("OpenDP make_gaussian (float)", "sigma=1", lambda: gau_f(0.0)),
        ("OpenDP randomized_response_bool", "p=0.7", lambda: rr(True)),
    ]


def rows(draws: int) -> list[dict]:
    out = []
    for name, params, draw in deployment_cases() + old_cases() + opendp_cases():
        values, times = time_draws(draw, draws)
        pearson, spearman = correlations(values, times)
        out.append({"sampler": name, "parameters": params, "draws": draws,
                    "median us/draw": float(np.median(times)) / 1e3, "pearson": pearson,
                    "spearman": spearman, "noise band": 3.0 / math.sqrt(draws)})
    return out


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.3g}"
    return str(value)


def format_table(table: list[dict], markdown: bool = False) -> str:
    cells = [[_cell(r[c]) for c in COLUMNS] for r in table]
    if markdown:
        lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3,000 draws per sampler")
    parser.add_argument("--draws", type=int, default=None,
                        help="draws per sampler (default 50,000; 3,000 with --quick)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    draws = args.draws or (3000 if args.quick else 50_000)
    print(format_table(rows(draws), markdown=args.markdown))


if __name__ == "__main__":
    main()
