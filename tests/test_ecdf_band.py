"""The whole-curve band of the hierarchical DP ECDF covers the exact curve at its level.

The band is ``+- c sd_i`` with ``c`` the quantile of the studentized maximum error
(``hierarchical.sup_critical_value``). Before it, the worst point's law scaled to every
point gave 0.90 at nominal 0.95 on this setting. Tolerance: 3 binomial standard deviations
of the number of runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedustat.protocols.ecdf.hierarchical import default_plan, sup_critical_value
from fedustat.protocols.ecdf.release import dp_ecdf

RUNS = 400
LEVEL = 0.95


@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_whole_curve_band_covers_at_its_level(epsilon: float) -> None:
    rng = np.random.default_rng(5)
    x = rng.lognormal(0.0, 1.0, 2000)
    grid = np.quantile(rng.lognormal(0.0, 1.0, 50_000), np.linspace(0.001, 0.999, 1024))
    exact = np.searchsorted(np.sort(x), grid, side="right") / x.size
    covered = 0
    for run in range(RUNS):
        release = dp_ecdf(x, grid, epsilon=epsilon, rng=1000 + run)
        low, high = release.confidence_band(LEVEL, simultaneous=True)
        covered += bool(np.all((low <= exact) & (exact <= high)))
    tolerance = 3.0 * math.sqrt(LEVEL * (1.0 - LEVEL) / RUNS)
    assert abs(covered / RUNS - LEVEL) <= tolerance, covered / RUNS


def test_critical_value_grows_with_the_level_and_exceeds_the_pointwise_one() -> None:
    plan = default_plan(1024)
    values = [sup_critical_value(plan, level) for level in (0.8, 0.9, 0.95, 0.99)]
    assert values == sorted(values)
    # A band over 1024 points is wider than one point's normal 95% interval (1.96 sd) and
    # narrower than the union bound's normal quantile at 0.05 / 1024.
    assert 1.96 < values[2] < 4.3
