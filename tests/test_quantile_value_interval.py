"""The opt-in interval in the data's units of fedustat.quantile / fedustat.median.

``interval_share=s`` spends ``s * epsilon`` on a private ECDF of the grid and reads from its
whole-curve band an interval ``[low, high]`` that holds the exact quantile of every level
at once. Coverage is checked by Monte Carlo with the binomial tolerance of
tests/coverage_check.py (the interval is conservative, so only the lower side is tested).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedustat
from coverage_check import Coverage, assert_covers
from fedustat.curves import PublicRangeIntervalWarning
from fedustat.privacy.budget import BudgetAccountant

RUNS = 200


def _joint_coverage(x: np.ndarray, levels: list[float], level: float, **kwargs: object
                    ) -> tuple[Coverage, float]:
    """Runs whose intervals hold every level's exact quantile at once, and the mean width
    (over runs and levels)."""
    clipped = np.clip(x, *kwargs.get("bounds", (-math.inf, math.inf)))  # type: ignore[misc]
    exact = np.quantile(clipped, levels, method="inverted_cdf")
    covered, widths = 0, []
    for seed in range(RUNS):
        res = fedustat.quantile(x, levels, rng=seed, **kwargs)  # type: ignore[arg-type]
        low, high = res.value_interval(level)
        covered += int(np.all((low <= exact) & (exact <= high)))
        widths.append(np.mean(high - low))
    return Coverage(covered, RUNS, level), float(np.mean(widths))


def test_value_interval_covers_every_level_at_once_on_skewed_data() -> None:
    x = np.random.default_rng(11).lognormal(1.0, 1.0, 2000)  # heavy right tail
    result, width = _joint_coverage(x, [0.1, 0.5, 0.9], 0.9, epsilon=1.0, bounds=(0, 30),
                                    grid_points=256, interval_share=0.3)
    assert_covers(result)
    # Informative, not the whole range: the typical width is a small part of the bounds
    # (measured 3.7 of 30 here, mostly at the 0.9 level in the thin tail).
    assert width < 6.0, width


def test_value_interval_covers_the_median_of_tied_data() -> None:
    # Heavily tied: a handful of values, answered on their own thresholds.
    x = np.random.default_rng(12).geometric(0.3, 1500).astype(float)
    exact = float(np.quantile(np.clip(x, 1, 20), 0.5, method="inverted_cdf"))
    covered = 0
    for seed in range(RUNS):
        med = fedustat.median(x, epsilon=0.5, thresholds=np.arange(1.0, 21.0),
                              interval_share=0.5, rng=seed)
        low, high = med.confidence_interval(0.8)  # the Estimate interval is the value one
        covered += int(low <= exact <= high)
    assert_covers(Coverage(covered, RUNS, 0.8))


def test_value_interval_at_the_grid_resolution_is_tight_when_noise_is_small() -> None:
    # A large budget: the band is thin, so the interval is the grid cell around the truth.
    x = np.random.default_rng(13).uniform(0, 10, 5000)
    med = fedustat.median(x, epsilon=50.0, bounds=(0, 10), grid_points=101,
                          interval_share=0.5, rng=0)
    low, high = med.value_interval(0.95)
    exact = float(np.quantile(x, 0.5, method="inverted_cdf"))
    assert low <= exact <= high
    assert high - low <= 0.3 + 1e-9  # at most three grid steps of 0.1


def test_default_release_gives_the_public_range_and_says_how_to_do_better() -> None:
    x = np.random.default_rng(14).uniform(0, 10, 500)
    med = fedustat.median(x, epsilon=1.0, bounds=(0, 10), rng=0)
    assert med.interval_share == 0.0 and med.interval_curve is None
    with pytest.raises(ValueError, match="interval_share"):
        med.value_interval(0.95)  # the strict accessor still says there is none
    for call in (med.confidence_interval, med.raw_interval):
        with pytest.warns(PublicRangeIntervalWarning, match="interval_share=s"):
            assert call(0.95) == (0.0, 10.0)  # valid (it always covers), not informative
    assert med.std_error is None
    assert med.to_dict()["interval"] == [0.0, 10.0]  # no warning: interval_method says it
    assert med.to_dict()["interval_method"].startswith("the grid's public range")
    assert not math.isnan(med.level_interval(0.95).low)  # the level error bar stays
    res = fedustat.quantile(x, [0.25, 0.75], epsilon=1.0, bounds=(0, 10), rng=0)
    with pytest.raises(ValueError, match="interval_share"):
        res.value_interval(0.95)
    out = res.to_dict()
    assert out["value_interval"] is None and out["interval"] == [[0.0, 0.0], [10.0, 10.0]]
    with pytest.warns(PublicRangeIntervalWarning):
        low, high = res.confidence_interval(0.95)
    assert low.tolist() == [0.0, 0.0] and high.tolist() == [10.0, 10.0]
    assert np.isnan(res.std_error).all()
    low, high = res.level_interval(0.95)  # levels (NaN: JointExp has no bound)
    assert low.shape == high.shape == (2,)
    exp = fedustat.quantile(x, [0.25, 0.75], epsilon=1.0, bounds=(0, 10),
                            method="continuous", rng=0)
    low, high = exp.level_interval(0.95)
    assert np.all((low >= 0) & (low < [0.25, 0.75]) & (high > [0.25, 0.75]) & (high <= 1))


@pytest.mark.parametrize("share", [-0.1, 1.0, 1.5, math.nan, math.inf, True, "0.3", None])
def test_bad_interval_share_is_refused_by_name(share: object) -> None:
    with pytest.raises(ValueError, match=r"fedustat.median\(\): interval_share must be a "
                                         r"number in \[0, 1\)"):
        fedustat.median([1.0, 2.0, 3.0], epsilon=1.0, bounds=(0, 10), interval_share=share,
                        rng=0)


def test_the_guarantee_is_the_whole_budget_split_by_the_share() -> None:
    x = np.random.default_rng(15).uniform(0, 10, 500)
    budget = BudgetAccountant(epsilon=2.0)
    res = fedustat.quantile(x, [0.25, 0.5], epsilon=2.0, bounds=(0, 10),
                            interval_share=0.25, rng=0, budget=budget)
    assert res.privacy.epsilon == pytest.approx(2.0)
    assert res.point_epsilon == pytest.approx(1.5)
    assert res.interval_curve is not None
    assert res.interval_curve.privacy.epsilon == pytest.approx(0.5)
    assert budget.spent[0] == pytest.approx(2.0)
    assert res.privacy.assumptions  # the trusted curator stays stated
    # The level bound is the point's: with 1.5 of the 2.0 it is wider than at 2.0.
    full = fedustat.quantile(x, [0.25, 0.5], epsilon=2.0, bounds=(0, 10), rng=0)
    assert res.level_error(0.95) >= full.level_error(0.95) or math.isnan(full.level_error())


def test_randomness_is_recorded_for_both_parts() -> None:
    x = np.random.default_rng(16).uniform(0, 10, 300)
    deployed = fedustat.median(x, epsilon=1.0, bounds=(0, 10), interval_share=0.3)
    assert deployed.noise == "deployment"
    assert deployed.interval_curve is not None
    assert deployed.interval_curve.noise_kind == "deployment"
    first = fedustat.median(x, epsilon=1.0, bounds=(0, 10), interval_share=0.3, rng=4)
    again = fedustat.median(x, epsilon=1.0, bounds=(0, 10), interval_share=0.3, rng=4)
    assert first.noise == "simulation"
    assert first.value == again.value
    assert first.value_interval() == again.value_interval()


def test_an_exact_release_is_its_own_interval() -> None:
    med = fedustat.median([1, 2, 3, 4, 5], epsilon=math.inf, bounds=(0, 10),
                          interval_share=0.3)
    assert med.value_interval(0.9) == (3.0, 3.0)
    assert med.interval_share == 0.0  # nothing was spent on it
