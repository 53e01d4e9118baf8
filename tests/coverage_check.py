"""Monte Carlo coverage of a release's confidence interval, with a tolerance from the runs.

Over R independent runs, the number of intervals that contain the exact statistic is
Binomial(R, c). A correct interval at level ``level`` has c >= level, so the test fails
when the observed share falls more than ``Z`` binomial standard deviations,
``Z sqrt(level (1 - level) / R)``, below ``level``: a correct interval fails with
probability below 4e-5 (Z = 4, one-sided normal tail). Where the interval is exact
(Laplace noise alone) the share must also stay within ``Z`` standard deviations above.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Z = 4.0


@dataclass(frozen=True)
class Coverage:
    covered: int
    runs: int
    level: float

    @property
    def share(self) -> float:
        return self.covered / self.runs

    @property
    def tolerance(self) -> float:
        return Z * math.sqrt(self.level * (1.0 - self.level) / self.runs)

    def __str__(self) -> str:
        return (f"coverage {self.share:.4f} over {self.runs} runs at level {self.level} "
                f"(tolerance {self.tolerance:.4f})")


def measure_coverage(release: Callable[[int], Any], exact: float, runs: int,
                     level: float = 0.95, first_seed: int = 0) -> Coverage:
    """Run ``release(seed)`` for ``runs`` seeds; count intervals containing ``exact``."""
    covered = 0
    for seed in range(first_seed, first_seed + runs):
        low, high = release(seed).confidence_interval(level)
        covered += int(low <= exact <= high)
    return Coverage(covered, runs, level)


def assert_covers(result: Coverage, *, exact_interval: bool = False) -> None:
    """The interval covers at its level (and, if exact, not much more)."""
    assert result.share >= result.level - result.tolerance, f"too low: {result}"
    if exact_interval:
        assert result.share <= result.level + result.tolerance, f"too high: {result}"
