"""The DP ROC curve's estimators, AUC standard error and bands (003 Sec. 5.1; issue 15).

Setting of the Monte Carlo checks (docs/protocols/roc-curve.md): binormal scores of 800
positives and 1,200 negatives (population AUC 0.8, seed 0; exact AUC 0.8012), 256
thresholds evenly spaced on the public bounds [-5, 5].
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from coverage_check import Coverage, assert_covers
from fedustat.datasets import classifier_scores
from fedustat.protocols.ecdf import dp_roc_curve, roc_curve_on_grid
from fedustat.protocols.ecdf.roc import (
    ROC_ESTIMATORS,
    _area_matrix,
    _bilinear_auc,
    _bootstrap_seed,
    _DenseCovariance,
    _dyadic_covariance,
    _noise_factor,
    _raw_auc_std_error,
    _roc_from_ecdfs,
    dp_roc_curve_from_counts,
)
from fedustat.protocols.ecdf.tree_noise import draw_tree_noise

TAU = np.linspace(-5.0, 5.0, 256)


@pytest.fixture(scope="module")
def issue_setting():
    data = classifier_scores(800, 1200, 0.8, rng=0)
    y, s = data.columns["label"], data.columns["score"]
    fpr, tpr, _ = roc_curve_on_grid(y, s, TAU)
    return y, s, float(np.trapezoid(tpr, fpr))


def test_area_is_the_bilinear_form():
    """The trapezoid area of the raw curve is 1 - x^T M y / (2 x_N y_N)."""
    rng = np.random.default_rng(0)
    for n_points in (1, 2, 7, 64):
        x = np.cumsum(rng.random(n_points)) + rng.normal(0.0, 0.3, n_points)
        y = np.cumsum(rng.random(n_points)) + rng.normal(0.0, 0.3, n_points)
        x[-1], y[-1] = abs(x[-1]) + 1.0, abs(y[-1]) + 1.0  # no floor of the normalizers
        n = 10**6
        fpr, tpr, _ = _roc_from_ecdfs(x, y, n, np.arange(n_points, dtype=float))
        area = 1.0 - x @ (_area_matrix(n_points) @ y) / (2.0 * x[-1] * y[-1])
        assert area == pytest.approx(np.trapezoid(tpr, fpr), abs=1e-12)


def test_grid_area_counts_half_of_the_ties_inside_a_cell(issue_setting):
    """At eps = inf the area is the AUC of the scores rounded up to their grid cell (pairs
    inside one cell count one half); with all distinct scores as the grid it is the exact
    AUC (sklearn)."""
    y, s, _ = issue_setting
    coarse = np.linspace(-5.0, 5.0, 16)
    exact = dp_roc_curve(y, s, epsilon=math.inf, thresholds=coarse)
    cell = np.searchsorted(coarse, s, side="left")
    assert exact.auc.value == pytest.approx(roc_auc_score(y, cell), abs=1e-12)
    assert exact.auc.value != pytest.approx(roc_auc_score(y, s), abs=1e-3)
    for estimator in ROC_ESTIMATORS:
        full = dp_roc_curve(y, s, epsilon=math.inf, thresholds=np.unique(s),
                            estimator=estimator)
        assert full.auc.value == pytest.approx(roc_auc_score(y, s), abs=1e-12)
        assert full.auc.std_error == 0.0 and full.estimator == "none"


def test_dyadic_covariance_is_the_tree_noise_covariance():
    """G G^T equals the shared-levels formula, and both match the simulated noise (the
    sample covariance of R draws has sd sqrt((s_ii s_jj + s_ij^2) / R) for normal noise;
    5 sd allow for the Laplace tails)."""
    curve = dp_roc_curve(*_small(), epsilon=2.0, thresholds=np.linspace(0, 1, 11),
                         estimator="raw", curve_method="003-tree", rng=0).positives
    cov = _dyadic_covariance(curve)
    g = _noise_factor(curve)
    np.testing.assert_allclose((g @ g.T).toarray(), cov, rtol=1e-12, atol=0.0)
    runs = 20_000
    draws = np.array([draw_tree_noise(11, curve.scale, rng=seed).at() for seed in range(runs)])
    draws /= curve.n
    empirical = np.cov(draws, rowvar=False)
    sd = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / runs)
    assert np.all(np.abs(empirical - cov) <= 5.0 * sd)
    assert cov[0, 1] > cov[0, 10] > 0.0  # neighbours share more levels


def test_a_curve_with_its_own_covariance_is_used():
    """A class curve that carries ``covariance()`` is factored from it (any noise design)."""
    curve = dp_roc_curve(*_small(), epsilon=2.0, thresholds=np.linspace(0, 1, 11),
                         estimator="raw", curve_method="003-tree", rng=0).positives
    target = 0.5 * _dyadic_covariance(curve) + 1e-6 * np.eye(11)

    class WithCovariance:
        method = "another-design"  # not 003's tree, whose sparse factor is used directly

        def __getattr__(self, name):
            return getattr(curve, name)

        def covariance(self):
            return target

    g = _noise_factor(WithCovariance())
    np.testing.assert_allclose(g @ g.T, target, rtol=1e-9, atol=1e-15)
    # The AUC's SE from a dense covariance equals the sparse tree factor's.
    release = dp_roc_curve(*_small(), epsilon=2.0, thresholds=np.linspace(0, 1, 11),
                           estimator="raw", curve_method="003-tree", rng=0)
    x, y = release.positives.values, release.negatives.values
    dense = np.linalg.cholesky(_dyadic_covariance(curve))
    sparse = _noise_factor(curve)
    assert _raw_auc_std_error(x, y, dense, dense) == pytest.approx(
        _raw_auc_std_error(x, y, sparse, sparse), rel=1e-10)
    # The covariance itself (what hierarchical curves pass) gives the same value.
    as_cov = _DenseCovariance(_dyadic_covariance(curve))
    assert _raw_auc_std_error(x, y, as_cov, as_cov) == pytest.approx(
        _raw_auc_std_error(x, y, sparse, sparse), rel=1e-10)
    assert _raw_auc_std_error(x, y, as_cov, sparse) == pytest.approx(
        _raw_auc_std_error(x, y, sparse, sparse), rel=1e-10)
    assert release.auc.diagnostics["raw_std_error"] == _raw_auc_std_error(x, y, sparse, sparse)
    # The released AUC's (bilinear) SE is the same from the dense factor, the covariance
    # operator and the sparse tree factor.
    reference = _bilinear_auc(x, y, sparse, sparse, 150)
    assert release.auc.std_error == reference.std_error
    assert release.auc.raw_value == reference.value
    for law in (dense, as_cov):
        other = _bilinear_auc(x, y, law, law, 150)
        assert other.std_error == pytest.approx(reference.std_error, rel=1e-10)
        assert other.value == pytest.approx(reference.value, rel=1e-10)


def _small():
    data = classifier_scores(60, 90, 0.8, rng=1)
    s = np.clip((data.columns["score"] + 4.0) / 10.0, 0.0, 1.0)
    return data.columns["label"], s


def _unbiased_and_covering(curves, grid_auc):
    values = np.array([c.auc.value for c in curves])
    ses = np.array([c.auc.std_error for c in curves])
    runs = values.size
    # Unbiased: the mean of R runs lies within 4 standard errors of the mean.
    assert abs(values.mean() - grid_auc) <= 4.0 * values.std(ddof=1) / math.sqrt(runs)
    covered = sum(low <= grid_auc <= high for low, high in (c.auc_interval() for c in curves))
    assert_covers(Coverage(int(covered), runs, 0.95))
    return values, ses


def test_raw_area_is_unbiased_with_the_exact_standard_error(issue_setting):
    y, s, grid_auc = issue_setting
    curves = [dp_roc_curve(y, s, epsilon=1.0, thresholds=TAU, estimator="raw", rng=seed)
              for seed in range(400)]
    values, ses = _unbiased_and_covering(curves, grid_auc)
    # The reported SE matches the spread: the sample sd of 400 runs is within 15% of its
    # value (its relative sd is about sqrt((kurtosis - 1) / (4 R)) < 4%).
    assert values.std(ddof=1) == pytest.approx(ses.mean(), rel=0.15)


def test_default_auc_is_unbiased_its_se_matches_and_it_covers(issue_setting):
    """The default (isotonic curve on hierarchical class curves) releases the AUC from the
    unsmoothed class curves (bilinear, ratio bias removed): unbiased within 4 Monte Carlo
    SE at eps = 0.5, where the isotonic curve's own area is biased (z about -6 over 400
    runs, docs/protocols/roc-curve.md), with its SE within 15% of the spread and its interval
    covering; the curve stays the isotonic one, monotone from (0, 0) to (1, 1)."""
    y, s, grid_auc = issue_setting
    runs = 300
    curves = [dp_roc_curve(y, s, epsilon=0.5, thresholds=TAU, rng=seed) for seed in range(runs)]
    assert {c.estimator for c in curves} == {"isotonic"}
    assert {c.auc.diagnostics["curve_method"] for c in curves} == {"hierarchical"}
    assert {c.auc.diagnostics["auc_method"] for c in curves} == {"bilinear"}
    values = np.array([c.auc.raw_value for c in curves])
    ses = np.array([c.auc.std_error for c in curves])
    sd = values.std(ddof=1)
    assert abs(values.mean() - grid_auc) <= 4.0 * sd / math.sqrt(runs)
    assert sd == pytest.approx(ses.mean(), rel=0.15)
    covered = sum(low <= grid_auc <= high for low, high in (c.auc_interval() for c in curves))
    assert_covers(Coverage(int(covered), runs, 0.95))
    # The curve's own area (kept as a diagnostic) is the biased one this replaces.
    areas = np.array([c.auc.diagnostics["curve_area"] for c in curves])
    assert areas.mean() < grid_auc - 3.0 * areas.std(ddof=1) / math.sqrt(runs)
    c = curves[0]
    assert np.all(np.diff(c.fpr) >= 0) and np.all(np.diff(c.tpr) >= 0)
    assert (c.fpr[0], c.tpr[0], c.fpr[-1], c.tpr[-1]) == (0.0, 0.0, 1.0, 1.0)
    assert c.auc.diagnostics["curve_area"] == pytest.approx(np.trapezoid(c.tpr, c.fpr))


def test_debiased_area_is_unbiased(issue_setting):
    y, s, grid_auc = issue_setting
    runs = 300
    # 100 draws: the bias correction's Monte Carlo error differs per release (seeded by
    # it), so it only adds to the spread that the tolerance is taken from.
    curves = [dp_roc_curve(y, s, epsilon=1.0, thresholds=TAU, estimator="debiased",
                           n_bootstrap=100, rng=seed) for seed in range(runs)]
    values = np.array([c.auc.value for c in curves])
    assert abs(values.mean() - grid_auc) <= 4.0 * values.std(ddof=1) / math.sqrt(runs)
    c = curves[0]
    assert c.auc.value == pytest.approx(c.auc.diagnostics["curve_area"]
                                        - c.auc.diagnostics["bootstrap_bias"])
    isotonic = dp_roc_curve(y, s, epsilon=1.0, thresholds=TAU, rng=0)
    np.testing.assert_array_equal(c.tpr, isotonic.tpr)  # the same curve


def test_smoothed_is_003_and_biased_on_this_setting(issue_setting):
    """The paper's estimator stays available; its area is biased down here (the issue's
    report), by far more than its bootstrap standard error."""
    y, s, grid_auc = issue_setting
    values = [dp_roc_curve(y, s, epsilon=1.0, thresholds=TAU, smooth=True, rng=seed).auc.value
              for seed in range(40)]
    one = dp_roc_curve(y, s, epsilon=1.0, thresholds=TAU, estimator="smoothed", rng=0,
                       n_bootstrap=20)
    assert one.auc.value == values[0] and one.p == 2
    assert np.mean(values) < grid_auc - 4.0 * one.auc.std_error / math.sqrt(40)


def test_release_is_post_processing_of_the_two_ecdfs(issue_setting):
    """Same seed, same release; the counts entry point gives the same release; the
    bootstrap's seed is a function of the released curves (changes with them)."""
    y, s, _ = issue_setting
    a = dp_roc_curve(y, s, epsilon=1.0, thresholds=TAU, rng=np.random.default_rng(5))
    b = dp_roc_curve(y, s, epsilon=1.0, thresholds=TAU, rng=5)
    assert a.auc == b.auc
    counts = dp_roc_curve_from_counts(
        np.searchsorted(np.sort(np.where(y == 1, s, np.inf)), TAU, side="right"),
        np.searchsorted(np.sort(np.where(y == 0, s, np.inf)), TAU, side="right"),
        y.size, epsilon=1.0, thresholds=TAU, rng=5)
    np.testing.assert_array_equal(counts.tpr, a.tpr)
    assert counts.auc == a.auc
    x, z = a.positives.values, a.negatives.values
    assert _bootstrap_seed(x, z).entropy == _bootstrap_seed(x.copy(), z.copy()).entropy
    assert _bootstrap_seed(x, z).entropy != _bootstrap_seed(z, x).entropy


def test_simultaneous_band_covers_the_whole_curve():
    """All thresholds at once in at least 95% of runs (binomial tolerance)."""
    y, s = _small()
    tau = np.linspace(0.0, 1.0, 32)
    _, exact_tpr, _ = roc_curve_on_grid(y, s, tau)
    runs, ok = 300, 0
    for seed in range(runs):
        curve = dp_roc_curve(y, s, epsilon=2.0, thresholds=tau, estimator="raw", rng=seed)
        low, high = curve.tpr_band(simultaneous=True)
        ok += int(np.all((low <= exact_tpr + 1e-12) & (exact_tpr <= high + 1e-12)))
        p_low, p_high = curve.tpr_band()
        assert np.all(low <= p_low) and np.all(high >= p_high)
    assert_covers(Coverage(ok, runs, 0.95))


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"estimator": "kernel"}, "estimator must be one of"),
    ({"estimator": "raw", "smooth": False}, "not both"),
    ({"smooth": "yes"}, "smooth must be True or False"),
    ({"n_bootstrap": 1}, "n_bootstrap must be None or an integer >= 2"),
    ({"n_bootstrap": 2.5}, "n_bootstrap must be None or an integer >= 2"),
])
def test_estimator_bad_inputs(kwargs, match):
    y, s = _small()
    with pytest.raises(ValueError, match=match):
        dp_roc_curve(y, s, epsilon=1.0, thresholds=np.linspace(0, 1, 11), rng=0, **kwargs)
