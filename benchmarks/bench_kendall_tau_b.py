"""Private tau-b (``fedustat.kendalltau``'s default): is its delta-method error bar the
spread of its releases?

One data set of two 1-5 ratings (heavily tied) per n; ``--runs`` seeded releases with
central-laplace at each epsilon. Columns: the exact tau-b (SciPy), the mean raw release,
the standard deviation of the releases, the mean reported standard error, and the share
of 95% intervals holding the exact value.

    .venv/bin/python benchmarks/bench_kendall_tau_b.py [--runs 400]
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from scipy import stats

import fedustat


def _ratings(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(1, 6, n).astype(float)
    return x, np.clip(x + rng.integers(-1, 2, n), 1, 5).astype(float)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    args = parser.parse_args()
    print("| n | epsilon | exact tau-b | mean raw | sd of releases | mean s.e. | 95% coverage |")
    print("|---|---|---|---|---|---|---|")
    for n in (200, 2000):
        x, y = _ratings(n, seed=n)
        exact = float(stats.kendalltau(x, y).statistic)
        for epsilon in (0.5, 2.0):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # degenerate-denominator flags are counted
                rel = [fedustat.kendalltau(x, y, epsilon=epsilon, rng=s, clip=False)
                       for s in range(args.runs)]
            raw = np.array([r.value for r in rel])
            se = np.array([r.std_error for r in rel])
            cover = np.mean([r.confidence_interval(0.95).low <= exact
                             <= r.confidence_interval(0.95).high for r in rel])
            print(f"| {n} | {epsilon:g} | {exact:.4f} | {raw.mean():.4f} | "
                  f"{raw.std(ddof=1):.4f} | {se.mean():.4f} | {cover:.3f} |")


if __name__ == "__main__":
    main()
