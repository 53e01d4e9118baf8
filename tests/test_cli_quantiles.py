"""``fedustat estimate --statistic quantile|median --bounds LO,HI`` runs what
``fedustat.quantile(x, q, bounds=(LO, HI))`` runs: the continuous default, not a grid of
candidates made from the bounds."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

import fedustat
from fedustat.cli import main
from fedustat.cli._options import curve_grid_points
from fedustat.curve_dispatch import release_curve

BOUNDS = (0.0, 50.0)


@pytest.fixture(scope="module")
def skewed_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, np.ndarray]:
    x = np.random.default_rng(21).lognormal(2.0, 0.6, 400)  # skewed, a few above 50
    path = tmp_path_factory.mktemp("cliq") / "values.csv"
    pd.DataFrame({"x": x}).to_csv(path, index=False)
    return str(path), pd.read_csv(path)["x"].to_numpy()


def _row(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["estimate", "--format", "json", *argv]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    return row


def test_cli_median_with_bounds_is_the_python_default(capsys, skewed_file) -> None:
    path, x = skewed_file
    row = _row(capsys, "--statistic", "median", "--file", path, "--columns", "x",
               "--bounds", "0,50", "--epsilon", "1", "--seed", "5")
    python = fedustat.median(x, epsilon=1.0, bounds=BOUNDS, rng=5)
    assert python.method == "continuous"
    assert row["values"] == [python.value]
    assert row["level_intervals"] == [list(python.level_interval(0.95))]
    # Not a point of the even grid of the bounds (the continuous default answers anywhere).
    grid = np.linspace(*BOUNDS, curve_grid_points("median"))
    assert np.min(np.abs(grid - row["values"][0])) > 0


def test_cli_quantiles_with_bounds_are_the_python_default(capsys, skewed_file) -> None:
    path, x = skewed_file
    row = _row(capsys, "--statistic", "quantile", "--file", path, "--columns", "x",
               "--bounds", "0,50", "--epsilon", "2", "--seed", "6", "--param",
               "levels=0.1,0.5,0.9", "--param", "grid_points=512")
    python = fedustat.quantile(x, [0.1, 0.5, 0.9], epsilon=2.0, bounds=BOUNDS,
                               grid_points=512, rng=6)
    assert python.method == "continuous-joint"
    assert row["values"] == [float(v) for v in python.values]
    # JointExp has no data-independent level bound: no interval rather than NaN.
    assert row["level_intervals"] is None
    assert main(["estimate", "--statistic", "quantile", "--file", path, "--columns", "x",
                 "--bounds", "0,50", "--epsilon", "2", "--seed", "6", "--param",
                 "levels=0.1,0.5,0.9"]) == 0
    table = capsys.readouterr().out
    assert "an exact quantile at levels (95%)" in table and " -" in table


def test_cli_other_quantile_releases_and_thresholds_keep_their_grid(capsys,
                                                                     skewed_file) -> None:
    path, _ = skewed_file
    grid = np.linspace(*BOUNDS, curve_grid_points("median"))
    inverted = _row(capsys, "--statistic", "median", "--protocol", "dp-ecdf", "--file",
                    path, "--columns", "x", "--bounds", "0,50", "--seed", "7")
    assert np.min(np.abs(grid - inverted["values"][0])) < 1e-9
    given = _row(capsys, "--statistic", "median", "--file", path, "--columns", "x",
                 "--param", "thresholds=10,20,30,40", "--seed", "7")
    assert given["values"][0] in (10.0, 20.0, 30.0, 40.0)


def test_release_curve_takes_bounds_for_quantiles_only() -> None:
    x = np.random.default_rng(22).uniform(0, 10, 200)
    out = release_curve("median", [x], epsilon=1.0, bounds=(0, 10), rng=1)
    assert out.value == fedustat.median(x, epsilon=1.0, bounds=(0, 10), rng=1).value
    with pytest.raises(ValueError, match="bounds= and grid_points= are for quantile"):
        release_curve("ecdf", [x], epsilon=1.0, bounds=(0, 10))
    with pytest.raises(ValueError, match="pass bounds= or thresholds=, not both"):
        release_curve("median", [x], epsilon=1.0, bounds=(0, 10), thresholds=[1, 2])
    with pytest.raises(ValueError, match="grid_points= goes with bounds"):
        release_curve("median", [x], epsilon=1.0, grid_points=64, thresholds=[1, 2])
    exact = release_curve("quantile", [x], epsilon=math.inf, bounds=(0, 10), levels=[0.5])
    assert exact.values.tolist() == [float(np.quantile(x, 0.5, method="inverted_cdf"))]



def test_estimate_with_bounds_runs_the_continuous_default_like_quantile() -> None:
    x = np.random.default_rng(4).lognormal(2.0, 0.6, (400, 1))
    through_estimate = fedustat.estimate("median", x, bounds=BOUNDS, epsilon=1.0, rng=3)
    direct = fedustat.median(x[:, 0], bounds=BOUNDS, epsilon=1.0, rng=3)
    assert through_estimate.method == direct.method == "continuous"
    assert float(through_estimate.value) == float(direct.value)
    several = fedustat.estimate("quantile", x, bounds=BOUNDS, levels=[0.25, 0.75],
                                epsilon=1.0, rng=3)
    assert several.method == "continuous-joint"
    with pytest.raises(ValueError, match="pass bounds= or thresholds=, not both"):
        fedustat.estimate("median", x, bounds=BOUNDS, thresholds=[1.0, 2.0], epsilon=1.0)
