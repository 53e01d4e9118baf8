"""Section ``hl`` of ``bench_inference.py``: size and power of the private Hosmer-Lemeshow
test (issue 24, item 1), through ``fedustat.hosmer_lemeshow(y, p, epsilon=..., rng=...)``.

Size: a calibrated model (labels Bernoulli(p) given the predictions p); goal: P(p-value <
alpha) at most alpha + 0.01 at alpha 0.05 and 0.01, for eps 0.5-10 and n 500-20000. A
setting meets it when the measured share is at most ``alpha + 0.01`` plus three binomial
standard deviations of the runs (``binomial_tolerance``); the last rows pool every setting's
runs (a tighter tolerance). Power: a miscalibrated model (true risk p^3, the model says p),
at alpha 0.05, next to the non-private test's (``epsilon=inf``: exact H, chi-square with
Q - 2 degrees of freedom) on the same data; reported, no goal.

Predictions: uniform on [0.05, 0.95], skewed Beta(0.5, 3) (most risks small, the low groups
with few expected positives), tied (uniform rounded to multiples of 0.05: 19 distinct values
for 10 groups). The nine settings cover each n with each data kind and each eps from 0.5 to
10 with each n.
"""

from __future__ import annotations

import math

import numpy as np

import fedustat
from inference_common import Row, binomial_tolerance

#: (predictions, n, epsilon): every n meets every data kind; eps 0.5, 1, 4, 10 spread over n.
SETTINGS = (("uniform", 500, 0.5), ("uniform", 2000, 1.0), ("uniform", 20000, 10.0),
            ("skewed", 500, 10.0), ("skewed", 2000, 4.0), ("skewed", 20000, 0.5),
            ("tied", 500, 1.0), ("tied", 2000, 10.0), ("tied", 20000, 4.0))
ALPHAS = (0.05, 0.01)
SIZE_MARGIN = 0.01  # the goal: nominal + 1 point


def predictions(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Predicted risks: uniform, skewed (Beta(0.5, 3)) or tied (rounded to 0.05)."""
    if kind == "uniform":
        return rng.uniform(0.05, 0.95, n)
    if kind == "skewed":
        return rng.beta(0.5, 3.0, n)
    return np.round(rng.uniform(0.05, 0.95, n) / 0.05) * 0.05


def labelled(kind: str, n: int, rng: np.random.Generator, miscalibrated: bool
             ) -> tuple[np.ndarray, np.ndarray]:
    """Labels Bernoulli(p) (calibrated) or Bernoulli(p^3) (miscalibrated), and p."""
    prob = predictions(kind, n, rng)
    risk = prob**3 if miscalibrated else prob
    return (rng.random(n) < risk).astype(np.int64), prob


def _size_row(setting: str, pvalues: np.ndarray, alpha: float, what: str) -> Row:
    runs = pvalues.size
    share = float(np.mean(pvalues < alpha))
    bound = alpha + SIZE_MARGIN
    tolerance = binomial_tolerance(bound, runs)
    return Row("1 HL size", setting, f"{what}P(p < {alpha:g}) ({runs} runs)", f"{share:.4f}",
               f"<= {bound:.3f} (+{tolerance:.3f} MC)", share <= bound + tolerance)


def rows(quick: bool, seed: int) -> list[Row]:
    """Size per setting and pooled, then power next to the non-private test's."""
    null_runs, alt_runs = (100, 30) if quick else (400, 100)
    out: list[Row] = []
    pooled: list[np.ndarray] = []
    power_rows: list[Row] = []
    for index, (kind, n, eps) in enumerate(SETTINGS):
        setting = f"{kind} p, n={n}, eps={eps:g}"
        pvalues = np.empty(null_runs)
        for r in range(null_runs):
            y, p = labelled(kind, n, np.random.default_rng([seed, index, r, 0]), False)
            pvalues[r] = fedustat.hosmer_lemeshow(
                y, p, epsilon=eps, rng=np.random.default_rng([seed, index, r, 1])).pvalue
        pooled.append(pvalues)
        out.extend(_size_row(setting, pvalues, alpha, "") for alpha in ALPHAS)
        private, exact = np.empty(alt_runs), np.empty(alt_runs)
        for r in range(alt_runs):
            y, p = labelled(kind, n, np.random.default_rng([seed, index, r, 2]), True)
            private[r] = fedustat.hosmer_lemeshow(
                y, p, epsilon=eps, rng=np.random.default_rng([seed, index, r, 3])).pvalue
            exact[r] = fedustat.hosmer_lemeshow(y, p, epsilon=math.inf).pvalue
        power_rows.append(Row(
            "1 HL power", setting, f"P(p < 0.05), risk p^3 ({alt_runs} runs)",
            f"private {np.mean(private < 0.05):.2f}, non-private {np.mean(exact < 0.05):.2f}",
            "reported (no goal)", True))
    every = np.concatenate(pooled)
    out.extend(_size_row("all settings pooled", every, alpha, "") for alpha in ALPHAS)
    return out + power_rows
