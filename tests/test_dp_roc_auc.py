"""The DP ROC curve's AUC: the bilinear estimate from the unsmoothed class curves (issue 24,
items 3 and 6; docs/protocols/roc-curve.md).

Monte Carlo checks through the one-call ``fedustat.roc_curve`` against the exact AUC of a
fixed data set on the grid (the release's randomness only): unbiasedness within 4 Monte
Carlo standard errors, the reported standard error within 15% of the spread (the sample
sd's relative sd is about ``sqrt((kurtosis - 1) / (4 R))``, below 4% here), coverage of the
95% interval within the binomial tolerance of ``coverage_check.py``; intervals inside
[0, 1] with the unclipped release kept.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedustat
from coverage_check import Coverage, assert_covers
from fedustat.datasets import classifier_scores
from fedustat.protocols.ecdf.roc import (
    _area_matrix,
    _bilinear_auc,
    _DenseCovariance,
    _isotonic_pair,
    _roc_from_ecdfs,
)


def _lognormal_scores(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Skewed scores: a lognormal law, the positives' shifted on the log scale."""
    rng = np.random.default_rng(seed)
    labels = (rng.random(n) < 0.3).astype(np.int64)
    return rng.lognormal(0.0, 1.0, n) * np.exp(0.8 * labels), labels


def _check_unbiased_and_covering(labels, scores, bounds, epsilon, runs):
    exact = fedustat.roc_curve(labels, scores, epsilon=math.inf, bounds=bounds).auc.value
    releases = [fedustat.roc_curve(labels, scores, epsilon=epsilon, bounds=bounds,
                                   rng=seed).auc for seed in range(runs)]
    values = np.array([a.raw_value for a in releases])
    ses = np.array([a.std_error for a in releases])
    sd = values.std(ddof=1)
    assert abs(values.mean() - exact) <= 4.0 * sd / math.sqrt(runs)
    assert ses.mean() == pytest.approx(sd, rel=0.15)
    intervals = [a.confidence_interval(0.95) for a in releases]
    covered = sum(low <= exact <= high for low, high in intervals)
    assert_covers(Coverage(int(covered), runs, 0.95))
    assert all(0.0 <= low <= high <= 1.0 for low, high in intervals)
    return exact, releases


def test_one_call_auc_is_unbiased_and_covers_on_skewed_data():
    """n = 500 at eps = 0.5: the isotonic curve's area, the AUC released before, is biased
    low here (z = -4.1 over these 300 runs); the released AUC is not (z = -0.15)."""
    scores, labels = _lognormal_scores(500, 3)
    _, releases = _check_unbiased_and_covering(labels, scores, (0.0, 20.0), 0.5, 300)
    areas = np.array([a.diagnostics["curve_area"] for a in releases])
    values = np.array([a.raw_value for a in releases])
    # What the default released before (the isotonic curve's area) is lower on average.
    assert areas.mean() < values.mean()


def test_auc_near_one_is_unbiased_unclipped_and_its_interval_is_in_range():
    """An AUC of about 0.995 at eps = 1: the unclipped release is unbiased and often above
    1; the value and the interval are clipped into [0, 1] (item 6), and the clipped
    interval still covers."""
    data = classifier_scores(200, 400, 0.995, rng=2)
    labels, scores = data.columns["label"], data.columns["score"]
    exact, releases = _check_unbiased_and_covering(labels, scores, (-8.0, 8.0), 1.0, 300)
    assert exact > 0.99
    assert all(0.0 <= a.value <= 1.0 for a in releases)
    above = [a for a in releases if a.raw_value > 1.0]
    assert len(above) > 30  # the clipping is exercised
    for a in above:
        assert a.value == 1.0 and a.confidence_interval(0.95)[1] == 1.0
        assert a.raw_interval(0.95)[1] > 1.0


def test_003_tree_class_curves_give_the_same_unbiased_auc():
    """The sparse tree factor's path (003's tree, curve_method="003-tree")."""
    data = classifier_scores(800, 1200, 0.8, rng=0)
    labels, scores = data.columns["label"], data.columns["score"]
    tau = np.linspace(-5.0, 5.0, 64)
    exact = fedustat.protocols.ecdf.dp_roc_curve(labels, scores, epsilon=math.inf,
                                                 thresholds=tau).auc.value
    runs = 300
    releases = [fedustat.protocols.ecdf.dp_roc_curve(
        labels, scores, epsilon=2.0, thresholds=tau, curve_method="003-tree", rng=seed).auc
        for seed in range(runs)]
    values = np.array([a.raw_value for a in releases])
    sd = values.std(ddof=1)
    assert abs(values.mean() - exact) <= 4.0 * sd / math.sqrt(runs)
    assert np.mean([a.std_error for a in releases]) == pytest.approx(sd, rel=0.15)
    covered = sum(low <= exact <= high for low, high in
                  (a.confidence_interval(0.95) for a in releases))
    assert_covers(Coverage(int(covered), runs, 0.95))


def test_bilinear_auc_without_noise_is_the_exact_area():
    """With (almost) no noise the estimate is the trapezoid area of the exact curve, for a
    consistent pair (x_N + y_N = 1) whatever the covariances."""
    rng = np.random.default_rng(1)
    n, n_points = 1000, 9
    pos = np.cumsum(rng.integers(0, 40, n_points)).astype(float)
    neg = np.cumsum(rng.integers(0, 80, n_points)).astype(float)
    neg[-1] += n - pos[-1] - neg[-1]
    x, y = pos / n, neg / n
    fpr, tpr, _ = _roc_from_ecdfs(x, y, n, np.arange(n_points, dtype=float))
    a = rng.normal(size=(n_points, n_points))
    law_x = _DenseCovariance(1e-14 * (a @ a.T + np.eye(n_points)))
    law_y = _DenseCovariance(1e-14 * np.eye(n_points))
    out = _bilinear_auc(x, y, law_x, law_y, n)
    assert out.value == pytest.approx(np.trapezoid(tpr, fpr), abs=1e-9)
    assert out.positive_share == pytest.approx(x[-1], abs=1e-12)
    assert out.std_error < 1e-5
    assert 1.0 - x @ (_area_matrix(n_points) @ y) / (2 * x[-1] * y[-1]) == pytest.approx(
        out.value, abs=1e-9)


def test_the_curve_is_still_the_isotonic_fit_of_the_release():
    """Only the AUC changed: the released curve is the isotonic fit of the two raw class
    curves (so its L1 error is the one of before), monotone from (0, 0) to (1, 1)."""
    scores, labels = _lognormal_scores(800, 4)
    res = fedustat.roc_curve(labels, scores, epsilon=1.0, bounds=(0.0, 20.0), rng=7)
    rel = res.release
    fit_pos, fit_neg, _ = _isotonic_pair(rel.positives.values, rel.negatives.values, 800)
    fpr, tpr, _ = _roc_from_ecdfs(fit_pos, fit_neg, 800, rel.positives.thresholds)
    np.testing.assert_array_equal(res.fpr, fpr)
    np.testing.assert_array_equal(res.tpr, tpr)
    assert rel.auc.diagnostics["curve_area"] == pytest.approx(np.trapezoid(tpr, fpr))
    assert rel.auc.diagnostics["auc_method"] == "bilinear"
    assert np.all(np.diff(res.fpr) >= 0) and np.all(np.diff(res.tpr) >= 0)
