"""``fedustat.plotting``: series styles and axes fitted to the data."""

from __future__ import annotations

import math

import pytest

from fedustat.plotting import MARKERS, PALETTE, fit_axis, series_style


def test_styles_are_distinct() -> None:
    styles = [series_style(i) for i in range(len(PALETTE) * len(MARKERS))]
    assert len(set(styles)) == len(styles)
    assert len({c for c, _ in styles[:len(PALETTE)]}) == len(PALETTE)
    with pytest.raises(ValueError, match="index must be >= 0"):
        series_style(-1)


def test_log_axis_for_values_spanning_decades() -> None:
    fit = fit_axis([2e-4, 3e-3, math.nan, 5e-1, math.inf])
    assert fit.scale == "log"
    lo, hi = math.log10(2e-4), math.log10(5e-1)
    margin = 0.08 * (hi - lo)
    assert math.log10(fit.lower) == pytest.approx(lo - margin)
    assert math.log10(fit.upper) == pytest.approx(hi + margin)


def test_linear_axis_otherwise() -> None:
    assert fit_axis([1.0, 9.0]).scale == "linear"
    assert fit_axis([1.0, 9.0], log_ratio=4.0).scale == "log"
    assert fit_axis([0.0, 100.0]).scale == "linear"  # zero cannot go on a log axis
    assert fit_axis([1.0, 100.0], allow_log=False).scale == "linear"
    fit = fit_axis([-1.0, 3.0])
    assert (fit.lower, fit.upper) == pytest.approx((-1.32, 3.32))
    assert (fit_axis([0.0]).lower, fit_axis([0.0]).upper) == (-1.0, 1.0)


def test_no_finite_value_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one finite number"):
        fit_axis([math.nan, math.inf])
