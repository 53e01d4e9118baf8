"""Section ``pvalues`` of ``bench_inference.py``: Kendall's tau p-value under H0.

Each run draws independent x and y (skewed, heavy-tailed or heavily tied, generated here)
and releases tau-a, ``fedustat.kendalltau(x, y, epsilon=..., variant="a", rng=seed)``;
under independence the p-value must satisfy ``P(p <= a) <= a`` up to Monte Carlo error
(``a + 3 sd`` of a binomial proportion with the run count). The accuracy row compares the
issue's case (n = 20, epsilon = 0.1, a release of 8.6) with the exact value computed here
in integers.

(The Hosmer-Lemeshow p-value is measured by section ``hl``.)
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

import fedustat
from fedustat.api import kendall_tau_pvalue
from fedustat.privacy.errors import LaplaceError
from fedustat.privacy.guarantee import PrivacyGuarantee
from fedustat.protocols.base import Estimate
from inference_common import SAMPLES, Row, binomial_tolerance

LEVELS = (0.05, 0.01, 0.001)


def _size_rows(kind: str, n: int, epsilon: float, runs: int, seed: int) -> list[Row]:
    draw = SAMPLES[kind]
    rng = np.random.default_rng(seed)
    pvalues = np.array([fedustat.kendalltau(draw(n, rng), draw(n, rng), epsilon=epsilon,
                                            variant="a", rng=seed * 1_000_003 + run).pvalue
                        for run in range(runs)])
    out = []
    for level in LEVELS:
        rate = float(np.mean(pvalues <= level))
        bound = level + binomial_tolerance(level, runs)
        out.append(Row("2 Kendall size", f"{kind}, n={n}, eps={epsilon:g}",
                       f"P(p <= {level:g}) under H0 ({runs} runs)", f"{rate:.4f}",
                       f"<= {bound:.4f}", rate <= bound))
    return out


def _exact_issue_case() -> float:
    """2 sum_k P(I = k) P(Lap(2) >= 8.6 - tau_k) with the Mahonian numbers in integers."""
    n, b, t = 20, 2.0, 8.6
    counts = [1]
    for m in range(2, n + 1):
        nxt = [0] * (len(counts) + m - 1)
        for i, c in enumerate(counts):
            for j in range(m):
                nxt[i + j] += c
        counts = nxt
    pairs = n * (n - 1) // 2
    total = math.factorial(n)
    return float(2 * sum(Fraction(c, total) * 0.5 * math.exp(-(t - (1 - 2 * k / pairs)) / b)
                         for k, c in enumerate(counts)))


def rows(quick: bool, seed: int) -> list[Row]:
    """The measured figures of this section beside their goals."""
    exact = _exact_issue_case()
    release = Estimate(8.6, "kendall_tau_a", "central-laplace", PrivacyGuarantee(0.1),
                       std_error=LaplaceError(2.0).std, error=LaplaceError(2.0))
    got = kendall_tau_pvalue(release, 20)
    out = [Row("2 Kendall accuracy", "n=20, eps=0.1, release 8.6 (the issue's case)",
               "p-value (exact in integers: " f"{exact:.6g})", f"{got:.6g}",
               "relative error < 1e-6", abs(got / exact - 1.0) < 1e-6)]
    runs = 1500 if quick else 20_000
    out += _size_rows("lognormal", 20, 0.1, runs, seed)
    small = 1000 if quick else 5000
    for index, (kind, n, epsilon) in enumerate([("pareto", 10, 0.1), ("tied", 20, 0.5),
                                                ("lognormal", 30, 0.5), ("tied", 12, 8.0),
                                                ("beta-mixture", 25, 50.0)]):
        out += _size_rows(kind, n, epsilon, small, seed + index + 1)
    return out
