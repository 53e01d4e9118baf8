"""Private ROC curves (003 Sec. 5.1, 6.5) and the Hosmer-Lemeshow statistic (003 Alg. 2)."""

from __future__ import annotations

import builtins
import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from sklearn.metrics import roc_auc_score, roc_curve

from fedustat.datasets import classifier_scores, load_breast_cancer_scores
from fedustat.protocols.ecdf import (
    dp_hosmer_lemeshow,
    dp_roc_curve,
    hosmer_lemeshow,
    roc_curve_on_grid,
    roc_l1_distance,
)
from fedustat.stats.ecdf import absolute_grid


@pytest.fixture(scope="module")
def scores():
    data = classifier_scores(400, 600, 0.8, rng=3)
    return data.columns["label"], data.columns["score"]


# ----------------------------------------------------------------------------- ROC


def test_exact_roc_matches_sklearn(scores):
    y, s = scores
    s = np.round(s, 1)  # ties
    tau = np.unique(s)
    fpr, tpr, thr = roc_curve_on_grid(y, s, tau)
    ref_fpr, ref_tpr, _ = roc_curve(y, s, drop_intermediate=False)
    np.testing.assert_allclose(fpr, ref_fpr, atol=1e-15)
    np.testing.assert_allclose(tpr, ref_tpr, atol=1e-15)
    assert thr[0] == tau[-1] and thr[-1] == -np.inf
    exact = dp_roc_curve(y, s, epsilon=math.inf, thresholds=tau)
    assert exact.auc.value == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert exact.privacy.model.value == "none"


@pytest.mark.parametrize("p", [1, 2])
def test_private_roc_is_a_monotone_curve(scores, p):
    y, s = scores
    tau = absolute_grid(-4.0, 6.0, 0.05)
    res = dp_roc_curve(y, s, epsilon=1.0, thresholds=tau, p=p, rng=7)
    assert np.all(np.diff(res.fpr) >= 0) and np.all(np.diff(res.tpr) >= 0)
    assert (res.fpr[0], res.tpr[0]) == (0.0, 0.0) and (res.fpr[-1], res.tpr[-1]) == (1.0, 1.0)
    assert res.privacy.epsilon == 1.0
    assert res.positives.privacy.epsilon == res.negatives.privacy.epsilon == 0.5
    assert res.auc.privacy == res.privacy and 0.0 <= res.auc.value <= 1.0
    again = dp_roc_curve(y, s, epsilon=1.0, thresholds=tau, p=p, rng=7)
    np.testing.assert_array_equal(res.tpr, again.tpr)


def test_roc_error_shrinks_with_epsilon(scores):
    """Sec. 6.5: the L1 error falls as epsilon grows (eps 0.5 vs 20, 5 seeds each)."""
    y, s = scores
    tau = absolute_grid(-4.0, 6.0, 0.05)
    low = [dp_roc_curve(y, s, epsilon=0.5, thresholds=tau, rng=k).l1_distance(y, s)
           for k in range(5)]
    high = [dp_roc_curve(y, s, epsilon=20.0, thresholds=tau, rng=k).l1_distance(y, s)
            for k in range(5)]
    assert max(high) < min(low)
    raw = dp_roc_curve(y, s, epsilon=0.5, thresholds=tau, smooth=False, rng=0)
    assert raw.p is None and np.array_equal(raw.fpr, raw.raw_fpr)


def test_l1_distance_against_numeric_integration():
    rng = np.random.default_rng(1)
    fa = np.concatenate([[0.0], np.sort(rng.random(7)), [1.0]])
    ta = np.concatenate([[0.0], np.sort(rng.random(7)), [1.0]])
    fb = np.array([0.0, 0.2, 0.2, 0.7, 1.0])  # a vertical segment at 0.2
    tb = np.array([0.0, 0.1, 0.6, 0.65, 1.0])
    grid = np.linspace(0.0, 1.0, 400_001)
    # np.interp needs increasing x: open the vertical segment by 1e-12 (area change ~1e-12).
    fb_open = fb + np.array([0.0, 0.0, 1e-12, 0.0, 0.0])
    numeric = np.trapezoid(np.abs(np.interp(grid, fa, ta) - np.interp(grid, fb_open, tb)),
                           grid)
    assert roc_l1_distance(fa, ta, fb, tb) == pytest.approx(numeric, abs=1e-6)
    assert roc_l1_distance(fb, tb, fa, ta) == pytest.approx(roc_l1_distance(fa, ta, fb, tb))
    assert roc_l1_distance([0, 1], [0, 1], [0, 0, 1], [0, 1, 1]) == pytest.approx(0.5)
    assert roc_l1_distance(fa, ta, fa[::-1], ta[::-1]) == 0.0
    with pytest.raises(ValueError, match="not monotone"):
        roc_l1_distance([0, 0.5, 0.4, 1], [0, 0.2, 0.3, 1], fa, ta)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"y_true": [0, 1, 2], "y_score": [0.1, 0.2, 0.3]}, "binary"),
    ({"y_true": [1, 1, 1], "y_score": [0.1, 0.2, 0.3]}, "no negative"),
    ({"y_true": [0, 1], "y_score": [0.1, 0.2, 0.3]}, "inconsistent lengths"),
    ({"y_true": [0, 1, 1], "y_score": [0.1, 0.2, 3.0]}, "above the last threshold"),
    ({"y_true": [0, 1, 1], "y_score": [0.1, 0.2, 0.3], "epsilon": -1.0}, "epsilon"),
    ({"y_true": [0, 1, 1], "y_score": [0.1, 0.2, 0.3], "p": 3}, "p must be 1 or 2"),
])
def test_roc_bad_inputs(kwargs, match):
    args = {"epsilon": 1.0, "thresholds": [0.0, 0.5, 1.0], "rng": 0} | kwargs
    with pytest.raises(ValueError, match=match):
        dp_roc_curve(args.pop("y_true"), args.pop("y_score"), **args)


def test_plot_roc(scores):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from fedustat.protocols.ecdf.plots import plot_roc

    y, s = scores
    res = dp_roc_curve(y, s, epsilon=1.0, thresholds=absolute_grid(-4.0, 6.0, 0.1), rng=0)
    fig = plot_roc(res, y_true=y, y_score=s)
    labels = [line.get_label() for line in fig.axes[0].get_lines()]
    assert "true ROC" in labels and "private, isotonic" in labels
    smoothed = dp_roc_curve(y, s, epsilon=1.0, thresholds=absolute_grid(-4.0, 6.0, 0.1),
                            estimator="smoothed", rng=0)
    labels = [line.get_label() for line in plot_roc(smoothed).axes[0].get_lines()]
    assert "private, smoothed (p = 2)" in labels and "private, unsmoothed" in labels
    with pytest.raises(ValueError, match="both y_true and y_score"):
        plot_roc(res, y_true=y)


def test_plot_needs_matplotlib(monkeypatch, scores):
    from fedustat.protocols.ecdf import plots as ecdf_plots

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("no matplotlib")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    y, s = scores
    res = dp_roc_curve(y, s, epsilon=math.inf, thresholds=absolute_grid(-4.0, 6.0, 0.5))
    with pytest.raises(ImportError, match=r"pip install '\.\[plot\]'` in the fedustat checkout"):
        ecdf_plots.plot_roc(res)


# ---------------------------------------------------------------- Hosmer-Lemeshow


def _classical_hl(y: np.ndarray, p: np.ndarray, q: int) -> tuple[float, float]:
    """Deciles of risk by order statistics, groups (t_{k-1}, t_k], with pandas."""
    sorted_p = np.sort(p)
    cuts = sorted_p[np.ceil(len(p) * np.arange(1, q) / q).astype(int) - 1]
    frame = pd.DataFrame({"y": y, "p": p,
                          "g": np.searchsorted(cuts, p, side="left")})
    agg = frame.groupby("g").agg(o1=("y", "sum"), e1=("p", "sum"), size=("y", "size"))
    o0, e0 = agg["size"] - agg["o1"], agg["size"] - agg["e1"]
    h = float((((agg["o1"] - agg["e1"]) ** 2) / agg["e1"] + ((o0 - e0) ** 2) / e0).sum())
    return h, float(scipy.stats.chi2.sf(h, q - 2))


def test_hl_infinite_epsilon_is_the_exact_statistic():
    gamma = 2.0**-10
    rng = np.random.default_rng(0)
    p = np.round(rng.beta(2, 5, 2000) / gamma) * gamma  # predictions on the grid
    p = np.clip(p, gamma, 1.0)
    y = (rng.random(2000) < p).astype(int)
    res = dp_hosmer_lemeshow(y, p, epsilon=math.inf, Q=10, gamma=gamma)
    h, pvalue = _classical_hl(y, p, 10)
    assert res.statistic.value == pytest.approx(h, rel=1e-12)
    assert res.pvalue == pytest.approx(pvalue, rel=1e-10)
    table = hosmer_lemeshow(y, p, res.cuts)
    assert table.statistic == pytest.approx(h, rel=1e-12) and table.df == 8
    np.testing.assert_allclose(res.observed, table.observed)
    assert res.privacy.model.value == "none"


def test_hl_exact_on_real_scores_matches_its_cuts():
    data = load_breast_cancer_scores()
    y, p = data.columns["label"], data.columns["score"]
    res = dp_hosmer_lemeshow(y, p, epsilon=math.inf)
    assert res.statistic.value == pytest.approx(hosmer_lemeshow(y, p, res.cuts).statistic)


def test_hl_private_budget_and_reproducibility():
    data = classifier_scores(3000, 7000, 0.8, rng=1)
    p = 1.0 / (1.0 + np.exp(-(data.columns["score"] - 1.0)))
    y = data.columns["label"]
    res = dp_hosmer_lemeshow(y, p, epsilon=2.0, Q=10, rng=4)
    assert res.epsilon_prime == pytest.approx(2.0 / 19.0)  # N = 1024 grid points, L = 10
    assert res.ecdf.privacy.epsilon == pytest.approx(11 * res.epsilon_prime)
    assert res.privacy.epsilon == 2.0 and res.statistic.privacy == res.privacy
    assert np.all(np.diff(res.cuts) >= 0) and res.df == 8
    assert res.observed.shape == res.expected.shape == (2, 10)
    again = dp_hosmer_lemeshow(y, p, epsilon=2.0, Q=10, rng=4)
    assert again.statistic.value == res.statistic.value and again.pvalue == res.pvalue
    # The private p-value is the bootstrap's (1 + k) / (1 + B), not a chi-square tail.
    draws = res.statistic.diagnostics["bootstrap_draws"]
    k = res.pvalue * (draws + 1) - 1
    assert k == pytest.approx(round(k), abs=1e-6) and 0 <= round(k) <= draws


def test_hl_group_statistics_move_by_at_most_eight():
    """Thm 2's second part: with the cut points fixed, replacing one record (prediction
    and label) changes the 4Q released sums by at most 1 each in at most 8 of them."""
    rng = np.random.default_rng(2)
    p = rng.random(12)
    y = (rng.random(12) < p).astype(float)
    cuts = np.array([0.25, 0.5, 0.75])
    base = hosmer_lemeshow(y, p, cuts)
    for i in range(12):
        for new_p in (0.0, 0.1, 0.3, 0.6, 0.9, 1.0):
            for new_y in (0.0, 1.0):
                p2, y2 = p.copy(), y.copy()
                p2[i], y2[i] = new_p, new_y
                other = hosmer_lemeshow(y2, p2, cuts)
                delta = np.abs(np.concatenate([(other.observed - base.observed).ravel(),
                                               (other.expected - base.expected).ravel()]))
                assert delta.max() <= 1.0 + 1e-12
                assert np.count_nonzero(delta > 1e-12) <= 8
                assert delta.sum() <= 4.0 + 1e-12  # tighter than Thm 2 needs


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"y_prob": [0.1, 1.2, 0.5]}, "outside the declared bounds"),
    ({"Q": 2}, "Q must be >= 3"),
    ({"y_true": [0, 2, 1]}, "binary"),
    ({"epsilon": 0.0}, "epsilon must be > 0"),
])
def test_hl_bad_inputs(kwargs, match):
    args = {"y_true": [0, 1, 1], "y_prob": [0.1, 0.7, 0.5], "epsilon": 1.0, "rng": 0} | kwargs
    with pytest.raises(ValueError, match=match):
        dp_hosmer_lemeshow(args.pop("y_true"), args.pop("y_prob"), **args)


# ------------------------------------------------------------------- error laws (issue 12)


def test_roc_rate_bands_cover_the_exact_rates():
    """Per point, the band of the raw TPR covers the exact TPR in at least 95% of runs
    (a union bound over two points: conservative). Checked at one interior threshold."""
    from coverage_check import Coverage, assert_covers
    from fedustat.privacy.guarantee import Trust

    data = classifier_scores(160, 240, 0.8, rng=3)
    y, s = data.columns["label"], data.columns["score"]
    tau = absolute_grid(-5.0, 7.0, 0.25)  # public bounds of the scores
    exact_fpr, exact_tpr, _ = roc_curve_on_grid(y, s, tau)
    runs, tpr_ok, fpr_ok, point = 400, 0, 0, 22  # a threshold near the middle
    for seed in range(runs):
        curve = dp_roc_curve(y, s, epsilon=2.0, thresholds=tau, smooth=False, rng=seed)
        t_low, t_high = curve.tpr_band()
        f_low, f_high = curve.fpr_band()
        tpr_ok += int(t_low[point] <= exact_tpr[point] <= t_high[point])
        fpr_ok += int(f_low[point] <= exact_fpr[point] <= f_high[point])
    assert_covers(Coverage(tpr_ok, runs, 0.95))
    assert_covers(Coverage(fpr_ok, runs, 0.95))
    assert [a.kind for a in curve.privacy.assumptions] == [Trust.CURATOR]
    with pytest.raises(ValueError, match="confidence_level must be in"):
        curve.tpr_band(1.0)


def test_hosmer_lemeshow_cells_carry_their_laplace_law():
    from fedustat.privacy.errors import LaplaceError

    data = classifier_scores(120, 180, 0.8, rng=4)
    y, s = data.columns["label"], data.columns["score"]
    prob = 1.0 / (1.0 + np.exp(-s))
    hl = dp_hosmer_lemeshow(y, prob, epsilon=2.0, rng=0)
    assert hl.cell_error == LaplaceError(1.0 / hl.epsilon_prime)
    exact = dp_hosmer_lemeshow(y, prob, epsilon=math.inf)
    assert exact.cell_error.variance == 0.0
