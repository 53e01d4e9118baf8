"""Coverage of the 95% intervals, per protocol and budget (Monte Carlo).

Usage::

    .venv/bin/python benchmarks/bench_coverage.py [--runs 2000] [--quick]

For each protocol and epsilon in {0.5, 4} the release is run ``runs`` times on one fixed
data set (a fresh seed per run) and the table gives the share of 95% intervals that
contain the exact statistic, the tolerance of a correct interval
(``4 sqrt(0.95 x 0.05 / runs)``, ``tests/coverage_check.py``), the mean reported standard
error and the empirical standard deviation of the released value. ``tests/test_coverage.py``
runs the same cases with fewer runs.

The data are small on purpose (a few hundred records): that is where normal
approximations fail. The quantized LDP protocols run on a public 11-value domain, so
there is no quantization error and the exact statistic is the one their interval is for.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedustat.protocols import registry
from fedustat.protocols.ecdf.quantiles import dp_quantile, quantile_interval
from fedustat.protocols.ecdf.release import dp_ecdf
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, gini_kernel
from fedustat.stats.ecdf import ecdf_counts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from coverage_check import Coverage

LEVEL = 0.95
EPSILONS = (0.5, 4.0)


@dataclass(frozen=True)
class Release:
    """What one run gives: the value, its reported s.e. (nan if none) and the interval."""

    value: float
    std_error: float
    low: float
    high: float


@dataclass(frozen=True)
class Case:
    """A protocol on fixed data: ``run(epsilon, seed)`` and the exact statistic."""

    name: str
    exact: float
    run: Callable[[float, int], Release]
    exact_interval: bool = False  # the interval is exact (Laplace alone): check both ways
    half_open: bool = False  # the interval is (low, high]


@dataclass(frozen=True)
class Result:
    case: str
    epsilon: float
    coverage: Coverage
    mean_std_error: float
    empirical_sd: float


# ------------------------------------------------------------------------------- data


def _discrete_values(n: int, seed: int = 3) -> tuple[np.ndarray, list[float]]:
    """n draws from a skewed law on the public domain {0, 0.1, ..., 1}."""
    domain = [i / 10 for i in range(11)]
    weights = np.array([1, 3, 5, 6, 6, 5, 4, 3, 2, 1, 1], dtype=np.float64)
    x = np.random.default_rng(seed).choice(domain, size=n, p=weights / weights.sum())
    return x, domain


def _scores_labels(n: int, seed: int = 3) -> np.ndarray:
    """(score, label) rows: binormal scores, labels Bernoulli(0.4), AUC about 0.76."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.4).astype(np.float64)
    return np.column_stack([rng.normal(size=n) + y, y])


def _estimate_release(protocol: Any, data: np.ndarray) -> Callable[[float, int], Release]:
    def run(epsilon: float, seed: int) -> Release:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # projected counts (fedauc)
            est = simulate(protocol(epsilon), data, rng=seed)
        low, high = est.confidence_interval(LEVEL)
        se = math.nan if est.std_error is None else float(est.std_error)
        return Release(float(est.value), se, float(low), float(high))
    return run


def _exact(kernel: Any, data: np.ndarray) -> float:
    return float(simulate(registry.make("exact", kernel, epsilon=math.inf), data,
                          rng=0).value)


# ------------------------------------------------------------------------------ cases


def central_laplace_case(n: int = 200) -> Case:
    x = np.random.default_rng(3).beta(2.0, 5.0, size=n)
    kernel = gini_kernel((0.0, 1.0))
    return Case("central-laplace", _exact(kernel, x), _estimate_release(
        lambda eps: registry.make("central-laplace", kernel, epsilon=eps), x),
        exact_interval=True)


def quantized_case(name: str, n: int = 300) -> Case:
    x, domain = _discrete_values(n)
    kernel = gini_kernel((0.0, 1.0))
    return Case(name, _exact(kernel, x), _estimate_release(
        lambda eps: registry.make(name, kernel, epsilon=eps, domain=domain), x))


def tree_case(n: int = 2000, d: int = 64) -> Case:
    rng = np.random.default_rng(3)
    y = (rng.random(n) < 0.5).astype(np.float64)
    scores = np.clip(np.round(8.0 * rng.normal(size=n) + 8.0 * y + d / 2), 0, d - 1)
    data = np.column_stack([scores, y])
    kernel = auc_kernel()
    return Case("ldp-tree", _exact(kernel, data), _estimate_release(
        lambda eps: registry.make("ldp-tree", kernel, epsilon=eps, d=d), data))


def fedauc_case(name: str, n: int = 200, n_clients: int | None = 10) -> Case:
    data = _scores_labels(n)
    kernel = auc_kernel()
    extra = {"delta": 1e-5} if name == "fedauc-gaussian" else {}
    label = name if n_clients is not None else f"{name} (1 sample/client)"
    return Case(label, _exact(kernel, data), _estimate_release(
        lambda eps: registry.make(name, kernel, epsilon=eps, n_clients=n_clients, **extra),
        data))


def _ecdf_data(n: int, n_points: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(3).beta(2.0, 5.0, size=n)
    return x, np.linspace(1.0 / n_points, 1.0, n_points)


def ecdf_point_case(n: int = 500, n_points: int = 64, point: int = 20) -> Case:
    """The pointwise band of the central ECDF at one grid point (about its median)."""
    x, tau = _ecdf_data(n, n_points)
    exact = float(ecdf_counts(x, tau)[point] / n)

    def run(epsilon: float, seed: int) -> Release:
        curve = dp_ecdf(x, tau, epsilon=epsilon, rng=seed)
        low, high = curve.confidence_band(LEVEL)
        return Release(float(curve.values[point]), curve.std_error, float(low[point]),
                       float(high[point]))
    return Case("ecdf-central (one point)", exact, run, exact_interval=True)


def ecdf_quantile_case(n: int = 500, n_points: int = 64, q: float = 0.5) -> Case:
    """The median's interval from the simultaneous band (conservative by design)."""
    x, tau = _ecdf_data(n, n_points)
    exact = float(np.sort(x)[math.ceil(q * n) - 1])

    def run(epsilon: float, seed: int) -> Release:
        curve = dp_ecdf(x, tau, epsilon=epsilon, rng=seed)
        low, high = quantile_interval(curve, q, LEVEL)
        value = float(dp_quantile(curve, q).value)
        return Release(value, math.nan, float(low), float(high))
    return Case("ecdf-central (median)", exact, run, half_open=True)


def all_cases() -> list[Case]:
    return [central_laplace_case(), quantized_case("ldp-quantized"),
            quantized_case("ldp-ghazi"), quantized_case("ghazi-shuffle"), tree_case(),
            *(fedauc_case(name) for name in ("fedauc-rr", "fedauc-laplace-local",
                                              "fedauc-laplace-global", "fedauc-gaussian",
                                              "fedauc-adaptive")),
            fedauc_case("fedauc-gaussian", n=400, n_clients=None),
            ecdf_point_case(), ecdf_quantile_case()]


# --------------------------------------------------------------------------- measuring


def measure(case: Case, epsilon: float, runs: int, first_seed: int = 0) -> Result:
    covered = 0
    values, errors = [], []
    for seed in range(first_seed, first_seed + runs):
        r = case.run(epsilon, seed)
        inside = (r.low < case.exact <= r.high) if case.half_open \
            else (r.low <= case.exact <= r.high)
        covered += int(inside)
        values.append(r.value)
        errors.append(r.std_error)
    # A run without a value (fedauc-rr when the noisy counts leave no positives) counts
    # as not covered; the mean s.e. and the s.d. are over the runs with a value.
    se = np.asarray(errors)
    v = np.asarray(values)
    return Result(case.name, epsilon, Coverage(covered, runs, LEVEL),
                  float(np.nanmean(se)) if np.any(np.isfinite(se)) else math.nan,
                  float(np.nanstd(v, ddof=1)))


def table(results: list[Result]) -> str:
    lines = ["| protocol | eps | runs | coverage | tolerance | mean reported s.e. | "
             "empirical s.d. |", "|---|---|---|---|---|---|---|"]
    for r in results:
        se = "-" if math.isnan(r.mean_std_error) else f"{r.mean_std_error:.4g}"
        lines.append(f"| {r.case} | {r.epsilon:g} | {r.coverage.runs} | "
                     f"{r.coverage.share:.3f} | {r.coverage.tolerance:.3f} | {se} | "
                     f"{r.empirical_sd:.4g} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="200 runs per row")
    args = parser.parse_args(argv)
    runs = 200 if args.quick else args.runs
    results = []
    for case in all_cases():
        for eps in EPSILONS:
            # The shuffle protocol's exact error law is a numerical convolution per run.
            n_runs = min(runs, 500) if case.name == "ghazi-shuffle" else runs
            results.append(measure(case, eps, n_runs))
            print(table(results[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(results))


if __name__ == "__main__":
    main()
