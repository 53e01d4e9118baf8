"""How ``fedustat compare`` schedules its runs: the sequential stopping rule, worker
processes, presets, the Monte Carlo error it reports and the library's defaults."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import fedustat
from fedustat import compare
from fedustat.cli import main
from fedustat.compare import (
    PRESETS,
    REPETITION_STEP,
    Preset,
    _planned,
    _resolved,
    rmse_mc_error,
    run_comparison,
)

CHEAP = {"statistics": ["duplicate"], "epsilons": [0.5, 4.0], "progress": False,
         "protocols": ["central-laplace", "ldp-quantized"]}


def _numbers(result: compare.ComparisonResult) -> list[tuple]:
    return [(r.protocol, r.epsilon, r.repetitions, r.rmse, r.rmse_mc_se, r.mean_estimate,
             r.coverage, r.resolved) for r in result.rows]


def test_results_do_not_depend_on_the_worker_count() -> None:
    one = run_comparison(**CHEAP, preset="quick", workers=1)
    two = run_comparison(**CHEAP, preset="quick", workers=2)
    assert _numbers(one) == _numbers(two)
    assert one.settings["workers"] == 1 and two.settings["workers"] == 2


def test_stopping_rule_by_hand() -> None:
    target = 0.1
    # Normal errors: the squared errors' relative s.d. is sqrt(2), so the RMSE's
    # relative s.e. is sqrt(2 / m) / 2 and crosses 10% at m = 50.
    rng = np.random.default_rng(3)
    sq = rng.normal(size=400) ** 2
    assert not _resolved(sq[:10], target)
    assert _resolved(sq[:400], target)
    assert _resolved(np.zeros(5), target)  # exact every time: nothing to resolve
    assert not _resolved(sq[:1], target)  # one repetition has no error estimate
    rule = Preset("t", 10, 50, target, 64)
    assert _planned(rule, "auc", None) == 50  # scalar prior: m = 1 / (2 target^2)
    assert _planned(rule, "ecdf", None) == 10  # a curve pools its grid
    assert _planned(rule, "auc", sq[:400]) == 400  # resolved: what it has
    assert 10 <= _planned(rule, "auc", sq[:10]) <= 50


def test_rmse_mc_error_matches_the_spread_over_runs() -> None:
    # 4000 independent runs of m = 40 normal errors: the s.d. of their RMSEs against the
    # mean of the per-run estimates. The s.d. from R runs has relative s.e.
    # 1/sqrt(2(R-1)) (1.1%); the delta method is first order, its bias O(1/m) (2.5%).
    runs, m = 4000, 40
    errors = np.random.default_rng(11).normal(0.0, 0.3, size=(runs, m))
    rmse = np.sqrt((errors**2).mean(axis=1))
    estimates = np.array([rmse_mc_error(e**2) for e in errors])
    tolerance = 4 / math.sqrt(2 * (runs - 1)) + 1 / m
    assert estimates.mean() / rmse.std(ddof=1) == pytest.approx(1.0, abs=tolerance)


def test_a_row_stops_by_the_rule_with_its_monte_carlo_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rule = Preset("test", 4, 24, 0.2, 64)
    monkeypatch.setitem(PRESETS, "test", rule)
    result = run_comparison(**CHEAP, preset="test", workers=1)
    counts = {r.repetitions for r in result.rows}
    allowed = set(range(rule.min_repetitions, rule.max_repetitions, REPETITION_STEP))
    assert counts <= allowed | {rule.max_repetitions}
    for r in result.rows:
        assert math.isfinite(r.rmse_mc_se)
        if r.resolved:
            assert r.rmse_mc_se <= rule.target * r.rmse + 1e-15
        else:  # unresolved only after the most repetitions, and listed for --full
            assert r.repetitions == rule.max_repetitions
            assert r in result.unresolved()
    assert len(counts) > 1  # some row needed more than the minimum, some did not
    text = result.table("duplicate")
    assert "MC s.e." in text and "reps" in text
    assert "4-24 repetitions per row" in result.header("duplicate")


def test_fixed_repetitions_still_report_the_monte_carlo_error() -> None:
    result = run_comparison(**CHEAP, repetitions=6, workers=1)
    assert {r.repetitions for r in result.rows} == {6}
    assert all(math.isfinite(r.rmse_mc_se) for r in result.rows)
    assert "6 repetitions per row" in result.header("duplicate")


def test_presets_and_the_library_defaults() -> None:
    # One default in one place: the library's delta and curve grid, not restated.
    assert compare.DEFAULT_DELTA == inspect.signature(fedustat.estimate).parameters[
        "delta"].default == 0.0
    grid_default = inspect.signature(fedustat.ecdf).parameters["grid_points"].default
    assert grid_default == compare.DEFAULT_GRID_POINTS
    assert PRESETS["default"].grid_points == PRESETS["full"].grid_points == grid_default
    quick, default, full = PRESETS["quick"], PRESETS["default"], PRESETS["full"]
    assert quick.max_repetitions < default.max_repetitions < full.max_repetitions
    assert quick.target > default.target > full.target
    result = run_comparison(["ecdf"], epsilons=[1.0], preset="quick", workers=1,
                            protocols=["dp-ecdf"], progress=False)
    assert result.cases["ecdf"].grid.size == quick.grid_points
    assert f"coarser than the library's default {grid_default}" in result.header("ecdf")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"preset": "fast"}, "preset must be one of quick, default, full"),
    ({"workers": 0}, "workers"),
])
def test_bad_schedule_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        run_comparison(**CHEAP, **kwargs)


def test_cli_presets_workers_and_estimate(tmp_path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    assert main(["compare", "--statistic", "duplicate", "--epsilons", "1", "--quick",
                 "--workers", "2", "--protocols", "central-laplace,ldp-quantized",
                 "--out", ""]) == 0
    captured = capsys.readouterr()
    # The estimate is printed once, before the runs, with the preset it stands for.
    assert captured.err.count("estimated") == 1
    assert "preset quick" in captured.err and "2 worker(s)" in captured.err
    assert "MC s.e." in captured.out and "5-10 repetitions per row" in captured.out
    with pytest.raises(SystemExit):
        main(["compare", "--quick", "--full"])
    assert "not allowed with argument" in capsys.readouterr().err
