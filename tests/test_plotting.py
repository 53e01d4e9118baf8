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


# --------------------------------------------------------------------------- styles


def test_every_protocol_keeps_one_style_distinct_within_its_statistic() -> None:
    from fedustat.compare import COMPARED_STATISTICS, _advice_for, _build_case
    from fedustat.plotting import PROTOCOL_STYLES, protocol_style

    assert len(set(PROTOCOL_STYLES.values())) == len(PROTOCOL_STYLES)
    for statistic in COMPARED_STATISTICS:
        case = _build_case(statistic, data=None, file=None, columns=None, bounds=None,
                           column_bounds=None, column_values=None, grid_points=16)
        names = [p.protocol for p in _advice_for(case, 1.0, 1e-6).predictions]
        colours = [protocol_style(n)[0] for n in names]
        assert len(set(colours)) == len(colours), (statistic, names)
    assert protocol_style("someone-elses") == protocol_style("someone-elses")
    with pytest.raises(ValueError, match="name must be a protocol name"):
        protocol_style("")


# --------------------------------------------------------------------------- helpers

mpl = pytest.importorskip("matplotlib")
mpl.use("Agg")


@pytest.fixture(scope="module")
def releases():
    import numpy as np

    import fedustat

    rng = np.random.default_rng(5)
    y = rng.integers(0, 2, 600)
    s = np.clip(rng.normal(0.4 + 0.25 * y, 0.15), 0, 1)
    return {
        "roc": fedustat.roc_curve(y, s, epsilon=1.0, bounds=(0, 1), grid_points=64, rng=2),
        "ecdf": fedustat.ecdf(s, epsilon=1.0, bounds=(0, 1), grid_points=64, rng=2),
        "aucs": [fedustat.roc_auc_score(y, s, epsilon=e, rng=3) for e in (0.2, 1.0, 4.0)],
    }


def test_plot_roc(releases) -> None:
    import numpy as np

    import fedustat

    curve = releases["roc"]
    ax = fedustat.plot_roc(curve)
    released, chance = ax.get_lines()
    assert np.array_equal(released.get_xdata(), curve.fpr)
    assert np.array_equal(released.get_ydata(), curve.tpr)
    assert list(chance.get_xdata()) == [0, 1] and chance.get_linestyle() == ":"
    assert ax.get_xlim() == (0.0, 1.0) and ax.get_ylim() == (0.0, 1.0)
    assert "AUC" in released.get_label() and "eps=1" in released.get_label()
    assert ax.get_xlabel() == "false positive rate"
    with pytest.raises(TypeError, match="curve must be a released ROC curve"):
        fedustat.plot_roc(releases["aucs"][0])


def test_plot_ecdf_draws_the_band(releases) -> None:
    import numpy as np

    import fedustat

    result = releases["ecdf"]
    ax = fedustat.plot_ecdf(result, confidence_level=0.9)
    (curve,) = ax.get_lines()
    assert np.array_equal(curve.get_ydata(), result.values)
    assert curve.get_drawstyle() == "steps-post"
    (band,) = ax.collections
    assert band.get_label() == "90% simultaneous band"
    low, high = result.confidence_interval(0.9, simultaneous=True)
    vertices = np.concatenate([p.vertices for p in band.get_paths()])
    assert vertices[:, 1].min() == pytest.approx(float(np.min(low)))
    assert vertices[:, 1].max() == pytest.approx(float(np.max(high)))
    assert ax.get_ylim() == pytest.approx((-0.02, 1.02))
    pointwise = fedustat.plot_ecdf(result, simultaneous=False)
    assert pointwise.collections[0].get_label() == "95% pointwise band"


def test_plot_estimates_error_bars_in_protocol_colours(releases) -> None:
    from matplotlib.colors import to_hex

    import fedustat
    from fedustat.plotting import protocol_style

    aucs = releases["aucs"]
    ax = fedustat.plot_estimates(aucs, limits=(0, 1))
    points = [bars.lines[0] for bars in ax.containers]  # one error bar per release
    assert [float(ln.get_xdata()[0]) for ln in points] == [float(a) for a in aucs]
    colour = protocol_style(aucs[0].protocol)[0]
    assert {to_hex(ln.get_color()).upper() for ln in points} == {colour.upper()}
    assert ax.get_xlim() == (0.0, 1.0)
    # The loosest interval (eps = 0.2) reaches past 1: cut at the edge, an arrow there.
    hi = aucs[0].confidence_interval(0.95)[1]
    arrows = [ln for ln in ax.get_lines() if ln.get_marker() == ">"]
    assert (hi > 1) == bool(arrows)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [f"{a.protocol}, eps={e:g}" for a, e in zip(aucs, (0.2, 1, 4),
                                                                 strict=True)]
    with pytest.raises(ValueError, match="labels must give one label per estimate"):
        fedustat.plot_estimates(aucs, labels=["a"])
    with pytest.raises(ValueError, match="estimates must hold at least one"):
        fedustat.plot_estimates([])
    with pytest.raises(TypeError, match=r"estimates\[0\] must be an Estimate"):
        fedustat.plot_estimates(["0.5"])


def test_helpers_say_how_to_get_matplotlib(monkeypatch: pytest.MonkeyPatch,
                                           releases) -> None:
    import sys

    import fedustat

    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"plot_roc\(\) needs matplotlib.*\[plot\]"):
        fedustat.plot_roc(releases["roc"])
