"""Section ``curves`` of ``bench_inference.py``: the released ECDF is a valid CDF.

Each run releases ``fedustat.ecdf(x, epsilon=..., bounds=..., rng=seed)`` (the default:
the release projected on non-decreasing curves in [0, 1]) on skewed, heavy-tailed or
tied data generated here, and compares it with the exact ECDF on the same grid. Rows:
the share of releases in [0, 1] and monotone (goal: all; the raw release's share beside
it); the intervals and the simultaneous band inside [0, 1], with the clipped pointwise 95%
intervals' coverage of the exact ECDF (averaged over the grid points); and the projected
curve's mean sup and L1 errors against the raw release's (``raw_values``; goal: no
worse). Each L1 comparison also states the paired z of the difference (mean over runs /
its s.e.).

(The ROC curve's rows are in section ``roc``.)
"""

from __future__ import annotations

import math

import numpy as np

import fedustat
from inference_common import SAMPLES, Row, binomial_tolerance

BOUNDS = {"lognormal": (0.0, 15.0), "pareto": (1.0, 40.0), "tied": (0.0, 11.0),
          "beta-mixture": (0.0, 1.0)}


def _setting_rows(kind: str, n: int, epsilon: float, runs: int, seed: int) -> list[Row]:
    rng = np.random.default_rng(seed)
    valid = raw_valid = bands_in_range = 0
    covered = 0.0
    band_covered = 0
    sup_raw, sup_projected, l1_raw, l1_projected = [], [], [], []
    for run in range(runs):
        x = SAMPLES[kind](n, rng)
        exact = fedustat.ecdf(x, epsilon=math.inf, bounds=BOUNDS[kind]).values
        res = fedustat.ecdf(x, epsilon=epsilon, bounds=BOUNDS[kind], rng=seed * 10_007 + run)
        values = res.values
        valid += bool(values.min() >= 0.0 and values.max() <= 1.0
                      and np.all(np.diff(values) >= 0.0))
        raw = res.raw_values
        raw_valid += bool(raw.min() >= 0.0 and raw.max() <= 1.0 and np.all(np.diff(raw) >= 0.0))
        low, high = res.confidence_interval(0.95)
        band_low, band_high = res.confidence_interval(0.95, simultaneous=True)
        bands_in_range += bool(min(low.min(), band_low.min()) >= 0.0
                               and max(high.max(), band_high.max()) <= 1.0)
        covered += float(np.mean((exact >= low) & (exact <= high)))
        band_covered += bool(np.all((exact >= band_low) & (exact <= band_high)))
        sup_raw.append(np.abs(res.raw_values - exact).max())
        sup_projected.append(np.abs(values - exact).max())
        l1_raw.append(np.abs(res.raw_values - exact).mean())
        l1_projected.append(np.abs(values - exact).mean())
    setting = f"{kind}, n={n}, eps={epsilon:g}"
    diff = np.asarray(l1_projected) - np.asarray(l1_raw)
    se = diff.std(ddof=1) / math.sqrt(runs) if runs > 1 else 0.0
    z = float(diff.mean() / se) if se > 0 else 0.0
    mean_sup_raw, mean_sup = float(np.mean(sup_raw)), float(np.mean(sup_projected))
    mean_l1_raw, mean_l1 = float(np.mean(l1_raw)), float(np.mean(l1_projected))
    coverage_goal = 0.95 - binomial_tolerance(0.95, runs)
    return [
        Row("6 ECDF valid", setting, f"in [0, 1] and monotone ({runs} runs; raw release)",
            f"{valid}/{runs} ({raw_valid}/{runs})", f"{runs}/{runs}", valid == runs),
        Row("6 ECDF bands", setting,
            "95% intervals and band in [0, 1]; intervals' mean coverage",
            f"{bands_in_range}/{runs}; {covered / runs:.3f}",
            f"{runs}/{runs}; >= {coverage_goal:.3f}",
            bands_in_range == runs and covered / runs >= coverage_goal),
        Row("6 ECDF band", setting, "95% whole-curve band: coverage of the exact curve",
            f"{band_covered / runs:.3f}",
            f"0.95 +- {binomial_tolerance(0.95, runs):.3f}",
            abs(band_covered / runs - 0.95) <= binomial_tolerance(0.95, runs)),
        Row("6 ECDF sup error", setting, "mean sup|F - exact|: projected (raw)",
            f"{mean_sup:.2e} ({mean_sup_raw:.2e})", "<= raw",
            mean_sup <= mean_sup_raw and all(p <= r + 1e-12 for p, r in
                                             zip(sup_projected, sup_raw, strict=True))),
        Row("6 ECDF L1 error", setting, "mean L1 |F - exact|: projected (raw), paired z",
            f"{mean_l1:.2e} ({mean_l1_raw:.2e}), z {z:+.1f}", "<= raw", mean_l1 <= mean_l1_raw),
    ]


def rows(quick: bool, seed: int) -> list[Row]:
    """The measured figures of this section beside their goals."""
    runs = 15 if quick else 300
    out: list[Row] = []
    settings = [("lognormal", 2000, 0.1), ("lognormal", 2000, 1.0), ("pareto", 500, 0.5),
                ("pareto", 5000, 4.0), ("tied", 1000, 0.25), ("tied", 1000, 2.0),
                ("beta-mixture", 300, 1.0)]
    for index, (kind, n, epsilon) in enumerate(settings):
        out += _setting_rows(kind, n, epsilon, runs, seed + index)
    return out
