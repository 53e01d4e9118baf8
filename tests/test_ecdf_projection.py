"""The one-call ECDF is a valid CDF by default: the raw release projected (L2) on the
non-decreasing curves in [0, 1], the raw release kept, the bands inside [0, 1]."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

import fedustat
from fedustat.protocols.ecdf.smoothing import project_to_cdf


def _data(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "lognormal":
        return rng.lognormal(0.0, 1.0, n)
    if kind == "pareto":
        return rng.pareto(1.5, n) + 1.0
    return np.minimum(np.floor(rng.exponential(2.0, n)), 11.0)  # heavily tied


BOUNDS = {"lognormal": (0.0, 15.0), "pareto": (1.0, 30.0), "tied": (0.0, 11.0)}


@pytest.mark.parametrize("kind", ["lognormal", "pareto", "tied"])
@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_default_curve_is_a_cdf_and_the_raw_release_is_kept(kind, epsilon):
    rng = np.random.default_rng(3)
    x = _data(kind, 2000, rng)
    res = fedustat.ecdf(x, epsilon=epsilon, bounds=BOUNDS[kind], grid_points=256, rng=4)
    assert np.all(np.diff(res.values) >= 0.0)
    assert res.values.min() >= 0.0 and res.values.max() <= 1.0
    np.testing.assert_array_equal(res.raw_values, res.release.values)
    assert np.any(np.diff(res.raw_values) < 0.0)  # the raw release is not a CDF here
    np.testing.assert_array_equal(res.values, project_to_cdf(res.raw_values))
    np.testing.assert_array_equal(np.asarray(res), res.values)
    # evaluate() is the projected step function.
    t = np.array([BOUNDS[kind][0] - 1.0, *res.thresholds[[3, 100, 255]]])
    np.testing.assert_array_equal(res.evaluate(t), [0.0, *res.values[[3, 100, 255]]])


def test_federated_release_is_projected_too():
    rng = np.random.default_rng(5)
    x = rng.lognormal(0.0, 1.0, 400)
    res = fedustat.ecdf(x, epsilon=0.5, bounds=(0.0, 15.0), grid_points=64,
                        protocol="ecdf-secagg", rng=2)
    np.testing.assert_array_equal(res.values, project_to_cdf(res.raw_values))
    assert np.all(np.diff(res.values) >= 0.0)


def test_projection_is_the_l2_projection():
    # Against a general solver on small curves: min ||g - f||^2, g non-decreasing in [0, 1].
    rng = np.random.default_rng(8)
    for _ in range(20):
        f = np.sort(rng.uniform(-0.1, 1.1, 8)) + rng.normal(0.0, 0.15, 8)
        steps = [{"type": "ineq", "fun": lambda g, i=i: g[i + 1] - g[i]} for i in range(7)]
        solved = optimize.minimize(lambda g, f=f: np.sum((g - f) ** 2), np.full(8, 0.5),
                                   jac=lambda g, f=f: 2.0 * (g - f), bounds=[(0, 1)] * 8,
                                   constraints=steps, method="SLSQP",
                                   options={"ftol": 1e-14, "maxiter": 500})
        got = project_to_cdf(f)
        assert np.sum((got - f) ** 2) <= solved.fun + 1e-9
        np.testing.assert_allclose(got, solved.x, atol=1e-5)


def test_projection_never_increases_l2_or_sup_error():
    # Theorems (see project_to_cdf): checked release by release, on skewed, heavy-tailed
    # and tied data; the L1 error (no theorem) is checked on average.
    rng = np.random.default_rng(9)
    l1_raw, l1_projected = [], []
    for run in range(60):
        kind = ("lognormal", "pareto", "tied")[run % 3]
        x = _data(kind, 1000, rng)
        exact = fedustat.ecdf(x, epsilon=math.inf, bounds=BOUNDS[kind], grid_points=128)
        res = fedustat.ecdf(x, epsilon=(0.1, 0.5, 2.0)[(run // 3) % 3], bounds=BOUNDS[kind],
                            grid_points=128, rng=run)
        raw_error = res.raw_values - exact.values
        projected_error = res.values - exact.values
        assert np.abs(projected_error).max() <= np.abs(raw_error).max() + 1e-12
        assert np.sum(projected_error**2) <= np.sum(raw_error**2) + 1e-12
        l1_raw.append(np.abs(raw_error).mean())
        l1_projected.append(np.abs(projected_error).mean())
    assert np.mean(l1_projected) < np.mean(l1_raw)


def test_bands_stay_in_the_unit_interval_and_the_simultaneous_band_is_monotone():
    rng = np.random.default_rng(10)
    x = _data("pareto", 500, rng)
    exact = fedustat.ecdf(x, epsilon=math.inf, bounds=BOUNDS["pareto"], grid_points=128).values
    covered_raw = covered = 0
    runs = 200
    for seed in range(runs):
        res = fedustat.ecdf(x, epsilon=0.2, bounds=BOUNDS["pareto"], grid_points=128, rng=seed)
        low, high = res.confidence_interval(0.9)
        assert low.min() >= 0.0 and high.max() <= 1.0
        slow, shigh = res.confidence_interval(0.9, simultaneous=True)
        assert slow.min() >= 0.0 and shigh.max() <= 1.0
        assert np.all(np.diff(slow) >= 0.0) and np.all(np.diff(shigh) >= 0.0)
        raw_low, raw_high = res.release.confidence_band(1.0 - 0.1 / 128)
        raw_low, raw_high = np.clip(raw_low, 0.0, 1.0), np.clip(raw_high, 0.0, 1.0)
        assert np.all(slow >= raw_low) and np.all(shigh <= raw_high)
        # Tightening loses no coverage: the band covers the whole ECDF exactly when the
        # clipped, untightened one does.
        covered_raw += bool(np.all((exact >= raw_low) & (exact <= raw_high)))
        covered += bool(np.all((exact >= slow) & (exact <= shigh)))
    assert covered == covered_raw
    assert covered / runs >= 0.9 - 3.0 * math.sqrt(0.9 * 0.1 / runs)


def test_project_to_cdf_refuses_a_table():
    with pytest.raises(ValueError, match="values must be a 1-d curve"):
        project_to_cdf(np.zeros((2, 3)))


def test_cli_prints_the_projected_curve_and_intervals_in_the_unit_interval(capsys):
    from fedustat.cli import main

    assert main(["estimate", "--statistic", "ecdf", "--epsilon", "0.2", "--seed", "1"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.rstrip().endswith("]")]
    assert lines
    released, lows, highs = [], [], []
    for line in lines:
        cells = line.split()
        released.append(float(cells[2]))
        lows.append(float(cells[3].strip("[,")))
        highs.append(float(cells[4].strip("]")))
    assert min(lows) >= 0.0 and max(highs) <= 1.0
    assert np.all(np.diff(released) >= 0.0)
