"""Results that behave like numbers and sequences (issue 27, item 3).

An Estimate is a numbers.Real whose derived numbers are plain floats; a pandas column of
releases has float views; curve and quantile results share one interface (to_dict,
std_error, confidence_interval in the data's units), whichever call made them; each
interval's coverage is checked by seeded Monte Carlo with the binomial tolerance of
tests/coverage_check.py.
"""

from __future__ import annotations

import json
import math
import numbers
import statistics
import subprocess
import sys

import numpy as np
import pytest

import fedustat
import fedustat.curves as curves
from coverage_check import Coverage, assert_covers, measure_coverage
from fedustat.curves import QuantileEstimate, QuantilesResult
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.protocols.base import Estimate

GUARANTEE = PrivacyGuarantee(1.0, 0.0, PrivacyModel.CENTRAL)


def _release(value: float, std_error: float | None = 0.05) -> Estimate:
    return Estimate(value, "auc", "central-laplace", GUARANTEE, std_error=std_error)


# ------------------------------------------------------------------ Estimate as a number


def test_a_release_is_a_real_number() -> None:
    est = _release(2.75)
    assert isinstance(est, numbers.Real) and isinstance(est, numbers.Number)
    assert not isinstance(est, numbers.Integral)
    tau = fedustat.kendalltau([1, 2, 3, 4, 5], [1, 3, 2, 5, 4], epsilon=math.inf)
    assert isinstance(tau, numbers.Real)  # subclasses too
    assert est.real == 2.75 and est.imag == 0.0 and est.conjugate() == 2.75
    assert complex(est) == complex(2.75)
    assert est.as_integer_ratio() == (11, 4) and not est.is_integer()
    assert _release(3.0).is_integer()


@pytest.mark.parametrize("value", [2.75, -2.75, 0.5, -0.5, 7.0])
def test_integer_conversions_are_floats(value: float) -> None:
    est = _release(value)
    for convert in (int, math.trunc, math.floor, math.ceil, round):
        got = convert(est)
        assert got == convert(value) and type(got) is int, convert
    assert round(est, 1) == round(value, 1) and type(round(est, 1)) is float


@pytest.mark.parametrize("other", [2, 0.75, -1.5, np.float64(3.0), _release(1.25)])
def test_arithmetic_matches_floats_and_gives_plain_numbers(other: object) -> None:
    value, est = 2.75, _release(2.75)
    number = float(other)  # type: ignore[arg-type]
    pairs = [(est ** other, value ** number), (other ** est, number ** value),
             (est // other, value // number), (other // est, number // value),
             (est % other, value % number), (other % est, number % value),
             (divmod(est, other), divmod(value, number)),
             (divmod(other, est), divmod(number, value)),
             (pow(est, other), value ** number)]
    for got, expected in pairs:
        assert got == expected
        assert not isinstance(got, Estimate)
        # The float's own result type (a negative base to a fractional power: complex).
        items = got if isinstance(got, tuple) else (got,)
        wanted = expected if isinstance(expected, tuple) else (expected,)
        # (np.float64 on the left keeps NumPy's scalar, a float subclass.)
        assert [isinstance(i, complex) for i in items] == \
            [isinstance(w, complex) for w in wanted]
        assert all(isinstance(i, float | complex) for i in items)


def test_unsupported_operands_and_three_argument_pow_are_refused() -> None:
    est = _release(2.0)
    for op in (lambda: est ** "2", lambda: est // "2", lambda: est % None,
               lambda: divmod(est, "2"), lambda: pow(est, 2, 3)):
        with pytest.raises(TypeError, match="unsupported operand"):
            op()


def test_statistics_math_numpy_and_sorted_see_floats() -> None:
    releases = [_release(v) for v in (0.8, 0.6, 0.7)]
    mean = statistics.mean(releases)
    assert mean == pytest.approx(0.7) and type(mean) is float
    assert statistics.median(releases) == 0.7
    assert statistics.stdev(releases) == pytest.approx(statistics.stdev([0.8, 0.6, 0.7]))
    assert type(statistics.stdev(releases)) is float
    assert math.fsum(releases) == pytest.approx(2.1)
    assert math.isclose(releases[0], 0.8) and math.isclose(releases[0], _release(0.8))
    arr = np.asarray(releases)
    assert arr.dtype == np.float64 and arr.tolist() == [0.8, 0.6, 0.7]
    assert [float(e) for e in sorted(releases)] == [0.6, 0.7, 0.8]
    assert max(releases) is releases[0] and min(releases) is releases[1]
    # Estimate(x) with one number is how numeric code converts back: a float, no release.
    assert type(Estimate(0.25)) is float and Estimate(0.25) == 0.25


def test_equality_is_numeric_and_same_release_compares_every_field() -> None:
    a = _release(0.8)
    b = Estimate(0.8, "auc", "exact", PrivacyGuarantee.none())
    assert a == b and a == 0.8 and (a != b) is False and a <= b and a >= b
    assert hash(a) == hash(b) == hash(0.8)
    assert not a.same_release(b) and a.same_release(_release(0.8))
    assert a != _release(0.81) and a != "0.8"


def test_a_release_survives_copy_and_pickle() -> None:
    import copy
    import pickle

    est = fedustat.roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], epsilon=1.0, rng=2)
    for clone in (copy.copy(est), copy.deepcopy(est), pickle.loads(pickle.dumps(est))):
        assert type(clone) is Estimate and clone.same_release(est)


def test_json_text_and_a_dict_of_json_native_values() -> None:
    est = fedustat.roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], epsilon=1.0, rng=2)
    with pytest.raises(TypeError, match="not JSON serializable"):
        json.dumps(est)  # json cannot serialise a non-dict object by itself
    assert json.loads(json.dumps(est.to_dict())) == est.to_dict()
    assert json.loads(est.to_json())["value"] == est.value

    def native(obj: object) -> bool:
        if isinstance(obj, dict):
            return all(type(k) is str and native(v) for k, v in obj.items())
        if isinstance(obj, list):
            return all(native(v) for v in obj)
        return obj is None or type(obj) in (bool, int, float, str)

    assert native(est.to_dict())


# ------------------------------------------------------------------- pandas column


def test_a_pandas_column_of_releases() -> None:
    pd = pytest.importorskip("pandas")
    releases = [fedustat.roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], epsilon=20.0,
                                       rng=seed) for seed in range(4)]
    values = [float(e) for e in releases]
    assert pd.Series(releases, dtype=float).tolist() == values
    s = pd.Series(releases, index=list("abcd"))
    assert s.dtype == object and s.astype(float).tolist() == values
    assert s.dp.value.dtype == np.float64 and s.dp.value.tolist() == values
    assert list(s.dp.value.index) == list("abcd")
    assert s.dp.std_error.tolist() == [e.std_error for e in releases]
    ci = s.dp.confidence_interval(0.9)
    assert ci.columns.tolist() == ["low", "high"] and ci.dtypes.tolist() == [np.float64] * 2
    assert [tuple(row) for row in ci.itertuples(index=False)] == \
        [tuple(e.confidence_interval(0.9)) for e in releases]
    frame = s.dp.to_frame()
    assert frame["value"].tolist() == values and set(frame["protocol"]) == {"central-laplace"}
    assert frame["epsilon"].tolist() == [20.0] * 4
    no_bar = pd.Series([_release(0.5, std_error=None)])
    assert math.isnan(no_bar.dp.std_error[0])
    assert math.isnan(no_bar.dp.confidence_interval().low[0])
    with pytest.raises(AttributeError, match=r"element 1 is float .*releases only"):
        _ = pd.Series([releases[0], 0.5]).dp
    with pytest.raises(ValueError, match=r"confidence_level must be a number in \(0, 1\)"):
        s.dp.confidence_interval(95)


def test_the_accessor_is_registered_whichever_import_comes_first() -> None:
    pytest.importorskip("pandas")
    runs = []
    for first, second in (("fedustat", "pandas"), ("pandas", "fedustat")):
        # Importing fedustat alone never imports pandas.
        code = (f"import sys; import {first}; assert ('pandas' in sys.modules) == "
                f"({first!r} == 'pandas'); import {second}; import pandas as pd; "
                "e = fedustat.Estimate(0.5, 'auc', 'exact', fedustat.PrivacyGuarantee.none()); "
                "print(pd.Series([e]).dp.value.tolist())")
        runs.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True))
    for proc in runs:  # both at once: two interpreter starts in the time of one
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        assert out.strip() == "[0.5]"


def test_the_accessor_example_runs() -> None:
    pytest.importorskip("pandas")
    import doctest

    from fedustat import results_pandas

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(
        optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    for test in finder.find(results_pandas.ReleaseSeriesAccessor, globs={"fedustat": fedustat}):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


# ------------------------------------------------------- curve and quantile results

AGES = np.clip(np.round(np.random.default_rng(27).normal(42.0, 12.0, 400)), 18, 90)
AGE_GRID = np.arange(18.0, 91.0)
LEVELS = [0.25, 0.5, 0.75]


def _exact_quantiles(levels: list[float]) -> np.ndarray:
    return np.quantile(AGES, levels, method="inverted_cdf")


def _quartiles(protocol: str, seed: int) -> QuantilesResult:
    if protocol == "dp-quantile-curve":
        return fedustat.quantile(AGES, LEVELS, epsilon=1.0, thresholds=AGE_GRID,
                                 method="curve", rng=seed)
    return fedustat.estimate("quantile", AGES, protocol=protocol, epsilon=1.0,
                             thresholds=AGE_GRID, levels=LEVELS, rng=seed)


def test_a_quartile_of_ages_has_its_interval_in_years() -> None:
    # The case: the interval is around the age, not around the level 0.25.
    res = _quartiles("dp-quantile-curve", 3)
    low, high = res.confidence_interval()
    exact = _exact_quantiles(LEVELS)
    assert np.all((low <= exact) & (exact <= high)) and np.all(low >= 18) and np.all(high <= 90)
    assert np.all(high - low <= 10)  # years, not the width of a level interval
    assert np.all(low <= res.quantiles) and np.all(res.quantiles <= high)
    level_low, level_high = res.level_interval()  # the level error bar, by its own name
    assert np.all((level_low < LEVELS) & (np.array(LEVELS) < level_high) & (level_high < 1))
    # std_error: half the 68.27% interval, in years.
    half = np.subtract(*res.confidence_interval(curves.STD_ERROR_LEVEL)[::-1]) / 2
    assert np.array_equal(res.std_error, half) and np.all(res.std_error > 0)
    assert res.std_error.shape == (3,) and np.all(res.std_error < 5)


def test_quantiles_result_is_a_sequence_of_its_values() -> None:
    res = _quartiles("dp-quantile-curve", 4)
    values = res.quantiles
    assert len(res) == 3 and list(res) == values.tolist()
    assert res[0] == values[0] and res[-1] == values[-1] and isinstance(res[1], np.floating)
    assert res[1:].tolist() == values[1:].tolist()
    assert res[[0, 2]].tolist() == [values[0], values[2]]
    assert np.asarray(res).tolist() == values.tolist() and sorted(res) == sorted(values)
    a, b, c = res
    assert (a, b, c) == tuple(values)
    with pytest.raises(IndexError):
        _ = res[3]


@pytest.mark.parametrize("protocol", ["dp-quantile-curve", "ecdf-secagg", "ecdf-fss",
                                      "dp-ecdf-smoothed"])
def test_every_quantile_release_has_the_same_interface(protocol: str) -> None:
    res = _quartiles(protocol, 5)
    assert isinstance(res, QuantilesResult) and len(res) == 3
    assert res.protocol == protocol
    out = res.to_dict()  # (NaN level bounds for the smoothed curve: compare the text)
    assert json.dumps(json.loads(json.dumps(out))) == json.dumps(out)
    assert out["protocol"] == protocol
    assert np.shape(res.std_error) == (3,) and np.all(np.isfinite(res.std_error))
    low, high = res.confidence_interval(0.9)
    assert np.all((AGE_GRID[0] <= low) & (low <= high) & (high <= AGE_GRID[-1]))
    med = fedustat.estimate("median", AGES, protocol="dp-ecdf" if protocol ==
                            "dp-quantile-curve" else protocol, epsilon=1.0,
                            thresholds=AGE_GRID, rng=5)
    assert isinstance(med, QuantileEstimate) and isinstance(med, numbers.Real)
    low, high = med.confidence_interval()
    assert AGE_GRID[0] <= low <= high <= AGE_GRID[-1] and med.std_error > 0
    assert json.loads(med.to_json())["interval"] == [low, high]


def test_smoothed_ecdf_from_estimate_is_an_ecdf_result() -> None:
    res = fedustat.estimate("ecdf", AGES, protocol="dp-ecdf-smoothed", epsilon=1.0,
                            thresholds=AGE_GRID, rng=6)
    assert isinstance(res, curves.ECDFResult) and res.protocol == "dp-ecdf-smoothed"
    assert np.all(np.diff(res.values) >= 0) and res.values[-1] <= 1.0
    assert not np.array_equal(res.values, res.raw_values)  # smoothed, the raw tree kept
    assert res.std_error.shape == AGE_GRID.shape
    assert json.loads(res.to_json())["protocol"] == "dp-ecdf-smoothed"


# Coverage: R seeded runs, Binomial(R, c) covered; the intervals are conservative (the
# simultaneous band of the curve), so only the lower side is tested, with
# coverage_check's tolerance (4 binomial SDs). They must also be informative: a mean
# width of a few years, where the public range is 72.

@pytest.mark.parametrize(("protocol", "runs", "width"), [
    ("dp-quantile-curve", 200, 12.0), ("ecdf-secagg", 150, 12.0), ("ecdf-fss", 60, 12.0),
    # 003's tree noise, whose band is a union bound over the points: wider (measured 21).
    ("dp-ecdf-smoothed", 150, 30.0)])
def test_quantile_intervals_cover_every_level_at_once(protocol: str, runs: int,
                                                       width: float) -> None:
    exact = _exact_quantiles(LEVELS)
    level, covered, widths = 0.8, 0, []
    for seed in range(runs):
        low, high = _quartiles(protocol, 1000 + seed).confidence_interval(level)
        covered += int(np.all((low <= exact) & (exact <= high)))
        widths.append(float(np.mean(high - low)))
    assert_covers(Coverage(covered, runs, level))
    assert float(np.mean(widths)) < width, np.mean(widths)


def test_a_median_interval_covers_at_its_level() -> None:
    exact = float(np.quantile(AGES, 0.5, method="inverted_cdf"))
    result = measure_coverage(
        lambda seed: fedustat.median(AGES, epsilon=0.5, thresholds=AGE_GRID,
                                     method="curve", rng=seed), exact, runs=200, level=0.9)
    assert_covers(result)


def test_an_interval_in_levels_would_not_cover_the_age() -> None:
    # What the issue reported: the level interval (0.2-0.3) never holds an age of ~34.
    res = _quartiles("dp-quantile-curve", 7)
    low, high = res.level_interval()
    exact = _exact_quantiles(LEVELS)
    assert not np.any((low <= exact) & (exact <= high))


def test_smoothed_ecdf_band_covers_the_exact_curve() -> None:
    exact = np.searchsorted(np.sort(AGES), AGE_GRID, side="right") / AGES.size
    runs, level, covered = 150, 0.8, 0
    for seed in range(runs):
        res = fedustat.estimate("ecdf", AGES, protocol="dp-ecdf-smoothed", epsilon=1.0,
                                thresholds=AGE_GRID, rng=2000 + seed)
        low, high = res.confidence_interval(level, simultaneous=True)
        covered += int(np.all((low <= exact) & (exact <= high)))
    assert_covers(Coverage(covered, runs, level))


def test_other_curve_results_share_the_interface() -> None:
    labels = np.random.default_rng(28).integers(0, 2, 300)
    scores = np.clip(np.round(labels * 2 + np.random.default_rng(29).normal(4, 2, 300)), 0, 9)
    results = [fedustat.ecdf(AGES, epsilon=1.0, thresholds=AGE_GRID, rng=1),
               fedustat.roc_curve(labels, scores, epsilon=1.0, bounds=(0, 9), rng=1),
               fedustat.hosmer_lemeshow(labels, scores / 10, epsilon=1.0, rng=1),
               fedustat.cumsum(np.random.default_rng(30).uniform(size=64), epsilon=1.0,
                               rng=1)]
    for res in results:
        out = res.to_dict()
        assert json.loads(json.dumps(out)) == out
        low, high = res.confidence_interval(0.9)
        assert np.shape(low) == np.shape(res.std_error) and np.all(low <= high)


def test_a_release_nested_in_diagnostics_keeps_its_fields() -> None:
    inner = _release(0.25)
    outer = Estimate(0.5, "auc", "central-laplace", GUARANTEE, diagnostics={"part": inner})
    part = outer.to_dict()["diagnostics"]["part"]
    assert part["value"] == 0.25 and part["protocol"] == "central-laplace"
    assert part["privacy"]["model"] == "central"
