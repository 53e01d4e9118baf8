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
    assert math.isnan(no_bar.dp.std_error[0]) and math.isnan(no_bar.dp.confidence_interval().low[0])
    with pytest.raises(AttributeError, match=r"element 1 is float .*releases only"):
        _ = pd.Series([releases[0], 0.5]).dp
    with pytest.raises(ValueError, match=r"confidence_level must be a number in \(0, 1\)"):
        s.dp.confidence_interval(95)


@pytest.mark.parametrize("first", ["fedustat", "pandas"])
def test_the_accessor_is_registered_whichever_import_comes_first(first: str) -> None:
    pytest.importorskip("pandas")
    second = "pandas" if first == "fedustat" else "fedustat"
    code = (f"import sys; import {first}; assert ('pandas' in sys.modules) == "
            f"({first!r} == 'pandas'); import {second}; import pandas as pd; "
            "e = fedustat.Estimate(0.5, 'auc', 'exact', fedustat.PrivacyGuarantee.none()); "
            "print(pd.Series([e]).dp.value.tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    assert out.stdout.strip() == "[0.5]"
