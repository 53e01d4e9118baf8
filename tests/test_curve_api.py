"""The one-call curve functions (fedustat.curves): exact answers, the protocol layer
underneath, budgets, the quantile's error bar, bad inputs and the old names."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats as sps
from sklearn.metrics import roc_curve as sklearn_roc_curve

import fedustat
import fedustat.api as api
import fedustat.curves as curves
from fedustat.curves import PublicRangeIntervalWarning
from fedustat.privacy import BudgetAccountant, BudgetExceededError
from fedustat.protocols.ecdf import (
    dp_ecdf,
    dp_hosmer_lemeshow,
    dp_prefix_sums,
    dp_quantiles,
    dp_roc_curve,
    fss_ecdf,
    pointwise_ecdf,
)
from fedustat.protocols.ecdf.smoothing import project_to_cdf

SEED = 20261128


@pytest.fixture(scope="module")
def values() -> np.ndarray:
    return np.random.default_rng(SEED).integers(0, 50, 400).astype(float)


@pytest.fixture(scope="module")
def labelled() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED + 1)
    y = rng.integers(0, 2, 300)
    score = np.clip(np.round(rng.normal(4.5, 2.0, 300) + y), 0, 9)
    return y, score


def _hl_exact(y: np.ndarray, p: np.ndarray, n_groups: int, gamma: float) -> float:
    """Hosmer-Lemeshow by its definition (003 Sec. 5.2): groups (t_{q-1}, t_q] with t_q the
    grid's generalized inverse of the predictions' ECDF at q / Q."""
    grid = gamma * np.arange(1, round(1 / gamma) + 1)
    cuts = [grid[np.searchsorted(grid, np.quantile(p, q / n_groups, method="inverted_cdf"))]
            for q in range(1, n_groups)]
    group = np.searchsorted(np.asarray(cuts), p, side="left")
    h = 0.0
    for g in range(n_groups):
        members = group == g
        for observed, expected in ((y[members].sum(), p[members].sum()),
                                   ((1 - y[members]).sum(), (1 - p[members]).sum())):
            h += (observed - expected) ** 2 / expected
    return h


# ------------------------------------------------------------ epsilon = inf: the exact answer

def test_ecdf_exact_equals_scipy(values: np.ndarray) -> None:
    grid = np.arange(0.0, 50.0, 0.5)
    res = fedustat.ecdf(values, epsilon=math.inf, thresholds=grid)
    expected = sps.ecdf(values).cdf.evaluate(grid)
    np.testing.assert_array_equal(np.asarray(res), expected)
    np.testing.assert_array_equal(res.evaluate([10.25, 60.0]),
                                  sps.ecdf(values).cdf.evaluate([10.25, 60.0]))
    by_bounds = fedustat.ecdf(values, epsilon=math.inf, bounds=(0, 49), grid_points=50)
    np.testing.assert_array_equal(np.asarray(by_bounds),
                                  sps.ecdf(values).cdf.evaluate(np.arange(50.0)))
    assert res.noise == "none" and np.all(res.std_error == 0.0)


def test_quantile_and_median_exact_equal_numpy_inverted_cdf(values: np.ndarray) -> None:
    levels = [0.01, 0.1, 0.25, 0.5, 0.9, 1.0]
    res = fedustat.quantile(values, levels, epsilon=math.inf, bounds=(0, 49), grid_points=50)
    np.testing.assert_array_equal(np.asarray(res),
                                  np.quantile(values, levels, method="inverted_cdf"))
    med = fedustat.median(values, epsilon=math.inf, bounds=(0, 49), grid_points=50)
    assert isinstance(med, fedustat.Estimate)
    assert med == np.quantile(values, 0.5, method="inverted_cdf")
    assert med.level_interval() == (0.5, 0.5) and med.level_std_error == 0.0


def test_roc_curve_exact_equals_sklearn_on_the_grid(labelled: tuple) -> None:
    y, score = labelled
    # Every grid point is a score, so the grid curve holds all of scikit-learn's points.
    fpr, tpr, _ = fedustat.roc_curve(y, score, epsilon=math.inf, thresholds=np.arange(10))
    fpr_sk, tpr_sk, _ = sklearn_roc_curve(y, score, drop_intermediate=False)
    np.testing.assert_allclose(fpr, fpr_sk, rtol=0, atol=1e-15)
    np.testing.assert_allclose(tpr, tpr_sk, rtol=0, atol=1e-15)


def test_roc_curve_reads_pos_label_and_predict_proba(labelled: tuple) -> None:
    y, score = labelled
    names = np.where(y == 1, "sick", "well")
    proba = np.column_stack([9 - score, score])  # columns in sorted label order
    named = fedustat.roc_curve(names, proba, pos_label="well", epsilon=math.inf,
                               thresholds=np.arange(10))
    # "well" is column 1 of the sorted labels ("sick", "well"): the negatives' scores.
    fpr_sk, tpr_sk, _ = sklearn_roc_curve(1 - y, score, drop_intermediate=False)
    np.testing.assert_allclose(named.fpr, fpr_sk, atol=1e-15)
    np.testing.assert_allclose(named.tpr, tpr_sk, atol=1e-15)


def test_hosmer_lemeshow_exact_equals_the_definition() -> None:
    rng = np.random.default_rng(SEED + 2)
    p = np.round(rng.uniform(0.05, 0.95, 2000), 3)
    y = (rng.uniform(size=2000) < p).astype(int)
    res = fedustat.hosmer_lemeshow(y, p, epsilon=math.inf, n_groups=10, gamma=2.0**-10)
    statistic, pvalue = res
    assert statistic == pytest.approx(_hl_exact(y, p, 10, 2.0**-10), rel=1e-12)
    assert pvalue == pytest.approx(sps.chi2.sf(statistic, 8), rel=1e-12)
    assert res.df == 8 and np.asarray(res).shape == (2, 2, 10)


# ------------------------------------------------------------ the protocol layer underneath

def test_seeded_releases_equal_the_protocol_layer(values: np.ndarray, labelled: tuple) -> None:
    grid = np.arange(50.0)
    released = fedustat.ecdf(values, epsilon=1.0, thresholds=grid, rng=3)
    layer = dp_ecdf(values, grid, epsilon=1.0, rng=3).values
    np.testing.assert_array_equal(released.raw_values, layer)
    np.testing.assert_array_equal(np.asarray(released), project_to_cdf(layer))
    for method in ("exponential", "curve"):
        np.testing.assert_array_equal(
            np.asarray(fedustat.quantile(values, [0.2, 0.7], epsilon=1.0, thresholds=grid,
                                         method=method, rng=4)),
            dp_quantiles(values, [0.2, 0.7], epsilon=1.0, thresholds=grid, method=method,
                         rng=4).values)
    assert float(fedustat.median(values, epsilon=1.0, thresholds=grid, method="exponential",
                                 rng=5)) == float(dp_quantiles(values, 0.5, epsilon=1.0,
                                                               thresholds=grid,
                                                               method="exponential",
                                                               rng=5).values)
    y, score = labelled
    ours = fedustat.roc_curve(y, score, epsilon=1.0, thresholds=np.arange(10), rng=6)
    theirs = dp_roc_curve(y, score, epsilon=1.0, thresholds=np.arange(10), rng=6)
    np.testing.assert_array_equal(ours.tpr, theirs.tpr)
    assert ours.auc == theirs.auc
    prob = score / 10.0 + 0.05
    hl = fedustat.hosmer_lemeshow(y, prob, epsilon=2.0, rng=7)
    hl_layer = dp_hosmer_lemeshow(y, prob, epsilon=2.0, rng=7)
    assert hl.statistic == hl_layer.statistic.value
    np.testing.assert_array_equal(hl.observed, hl_layer.observed)


@pytest.mark.parametrize(("protocol", "layer"), [("ecdf-secagg", pointwise_ecdf),
                                                 ("ecdf-fss", fss_ecdf)])
def test_federated_ecdf_by_name(values: np.ndarray, protocol: str, layer) -> None:
    grid = np.arange(0.0, 52.0, 2.0)  # up to 50, above every value
    res = fedustat.ecdf(values, epsilon=1.0, thresholds=grid, protocol=protocol, rng=8)
    layered = layer(values, grid, epsilon=1.0, rng=8).values
    np.testing.assert_array_equal(res.raw_values, layered)
    # The one-call release is the layer's curve clipped into [0, 1].
    np.testing.assert_array_equal(np.asarray(res), np.clip(layered, 0.0, 1.0))
    assert res.protocol == protocol and res.privacy.epsilon == 1.0


# ------------------------------------------------------------ budgets

def _refuse_to_run(*args, **kwargs):
    raise AssertionError("the protocol ran although the budget should have refused it")


@pytest.mark.parametrize("call", ["ecdf", "median", "roc_curve", "hosmer_lemeshow",
                                  "roc_auc_score"])
def test_budget_refuses_before_the_protocol_runs(monkeypatch, values: np.ndarray,
                                                 labelled: tuple, call: str) -> None:
    for name in ("dp_ecdf", "dp_quantiles", "dp_roc_curve", "dp_hosmer_lemeshow"):
        monkeypatch.setattr(curves, name, _refuse_to_run)
    monkeypatch.setattr(api, "_release", _refuse_to_run)
    acct = BudgetAccountant(1.0, adjacency="score")
    acct.spend(fedustat.PrivacyGuarantee(0.7))
    y, score = labelled
    runs = {
        "ecdf": lambda: fedustat.ecdf(values, epsilon=0.5, bounds=(0, 49), budget=acct),
        "median": lambda: fedustat.median(values, epsilon=0.5, bounds=(0, 49), budget=acct),
        "roc_curve": lambda: fedustat.roc_curve(y, score, epsilon=0.5, bounds=(0, 9),
                                                budget=acct),
        "hosmer_lemeshow": lambda: fedustat.hosmer_lemeshow(y, score / 10, epsilon=0.5,
                                                            budget=acct),
        "roc_auc_score": lambda: fedustat.roc_auc_score(y, score, epsilon=0.5, budget=acct),
    }
    with pytest.raises(BudgetExceededError, match="refused and nothing was spent"):
        runs[call]()
    assert acct.spent == (0.7, 0.0) and len(acct.ledger) == 1


def test_curves_and_u_statistics_compose_in_one_budget(values: np.ndarray,
                                                       labelled: tuple) -> None:
    y, score = labelled
    acct = BudgetAccountant(2.0, adjacency="score")
    auc = fedustat.roc_auc_score(y, score, epsilon=0.5, rng=1, budget=acct)
    tau = fedustat.kendalltau(score, y, epsilon=0.5, rng=2, budget=acct)
    med = fedustat.median(score, epsilon=0.5, bounds=(0, 9), grid_points=10, rng=3,
                          budget=acct)
    roc = fedustat.roc_curve(y, score, epsilon=0.5, bounds=(0, 9), grid_points=10, rng=4,
                             budget=acct)
    assert acct.spent == pytest.approx((2.0, 0.0), rel=1e-12)
    assert [e.guarantee for e in acct.ledger] == [auc.privacy, tau.privacy, med.privacy,
                                                  roc.privacy]
    with pytest.raises(BudgetExceededError):
        fedustat.ecdf(values, epsilon=0.1, bounds=(0, 49), budget=acct)


# ------------------------------------------------------------ the quantile's error bar

@pytest.mark.parametrize("method", ["exponential", "curve"])
def test_quantile_level_interval_covers_at_its_rate(method: str) -> None:
    rng = np.random.default_rng(SEED + 3)
    x = np.round(rng.gamma(2.0, 6.0, 150))  # skewed, with ties
    grid = np.arange(0.0, 60.0)
    x = np.clip(x, grid[0], grid[-1])
    levels = np.array([0.1, 0.5, 0.8])
    counts = np.searchsorted(np.sort(x), grid, side="right") / x.size  # F on the grid
    level, runs = 0.8, 300
    covered, errors = 0, []
    for seed in range(runs):
        res = fedustat.quantile(x, levels, epsilon=0.5, thresholds=grid, method=method,
                                rng=seed)
        delta = res.level_error(level)
        idx = np.searchsorted(grid, np.asarray(res))
        f_at = counts[idx]
        f_before = np.where(idx > 0, counts[np.maximum(idx - 1, 0)], 0.0)
        covered += bool(np.all((f_before < levels + delta) & (f_at > levels - delta)))
        errors.append(np.maximum(0.0, np.maximum(f_before - levels, levels - f_at)))
    # One-sided: the rate is a lower bound (the bound is conservative); 3 binomial SDs.
    assert covered / runs >= level - 3 * math.sqrt(level * (1 - level) / runs)
    rms = np.sqrt(np.mean(np.square(errors), axis=0))
    # The RMS bound holds in expectation; the sample RMS of 300 runs of an error bounded
    # by 1 is within 3 SDs of sqrt(E X^2) <= bound (SD of X^2 at most the bound's square).
    bound = res.level_std_error
    assert np.all(rms**2 <= bound**2 + 3 * bound**2 / math.sqrt(runs))


def test_level_error_bound_matches_its_formula() -> None:
    grid = np.arange(100.0)
    res = fedustat.quantile(np.arange(100.0), [0.25, 0.75], epsilon=2.0, thresholds=grid,
                            method="exponential", rng=0)
    # Permute-and-flip: ln(N m / alpha) / (eps / (2 m)) ranks, over n.
    assert res.level_error(0.9) == pytest.approx(math.log(100 * 2 / 0.1) / (2.0 / 4) / 100,
                                                 rel=1e-12)
    low, high = res.level_interval(0.9)
    np.testing.assert_allclose(high - low, 2 * res.level_error(0.9), rtol=1e-12)


# ------------------------------------------------------------ results

def test_results_serialise_released_and_public_fields_only(values: np.ndarray,
                                                           labelled: tuple) -> None:
    y, score = labelled
    results = [fedustat.ecdf(values, epsilon=1.0, bounds=(0, 49), rng=1),
               fedustat.quantile(values, [0.5, 0.9], epsilon=1.0, bounds=(0, 49), rng=1),
               fedustat.quantile(values, [0.5, 0.9], epsilon=1.0, bounds=(0, 49),
                                 interval_share=0.3, rng=1),
               fedustat.roc_curve(y, score, epsilon=1.0, bounds=(0, 9), rng=1),
               fedustat.hosmer_lemeshow(y, score / 10, epsilon=1.0, rng=1)]
    for res in results:
        out = json.loads(res.to_json())
        # value_interval: a quantile's data-unit intervals, read from its private curve.
        # The quantiles' level error bar and how their interval is made: functions of
        # the released quantities, n, the grid and epsilon.
        fields = {k for k in out if k not in ("kind", "std_error", "confidence_level",
                                              "interval", "value_interval", "guarantee",
                                              "noise", "interval_method", "level_interval",
                                              "level_std_error")}
        allowed = {f for f in (*res.released_fields, *res.public_fields) if "." not in f}
        assert fields == allowed
        with warnings.catch_warnings():  # the default quantiles' public range
            warnings.simplefilter("ignore", PublicRangeIntervalWarning)
            low, high = res.confidence_interval(0.9)
        assert np.shape(low) == np.shape(res.std_error)
        assert np.all(low <= high)
        assert out["guarantee"]["epsilon"] == 1.0
    med = fedustat.median(values, epsilon=1.0, bounds=(0, 49), rng=1)
    assert med.to_dict()["level_interval"] == list(med.level_interval())
    with pytest.warns(PublicRangeIntervalWarning,
                      match=r"public range of the grid.*pass interval_share"):
        assert med.confidence_interval() == (0.0, 49.0)


def test_data_by_column_name(values: np.ndarray) -> None:
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"age": values})
    by_name = fedustat.median("age", data=df, epsilon=1.0, bounds=(0, 49), rng=2)
    by_series = fedustat.median(df["age"], epsilon=1.0, bounds=(0, 49), rng=2)
    assert by_name.same_release(by_series)  # every field, not only the value


# ------------------------------------------------------------ bad inputs

@pytest.mark.parametrize(("call", "message"), [
    (lambda x: fedustat.median(x, epsilon=1.0), r"needs public bounds=\(low, high\)"),
    (lambda x: fedustat.ecdf(x, epsilon=1.0), r"fedustat.ecdf\(\) needs public bounds"),
    (lambda x: fedustat.quantile(x, 0.0, epsilon=1.0, bounds=(0, 1)), r"q must be in \(0, 1\]"),
    (lambda x: fedustat.quantile(x, [0.5, 1.5], epsilon=1.0, bounds=(0, 1)),
     r"q must be in \(0, 1\]"),
    (lambda x: fedustat.median(x, epsilon=1.0, bounds=(0, 1), weights=x),
     r"fedustat.median\(\) got an unexpected keyword argument 'weights'"),
    (lambda x: fedustat.ecdf(x, epsilon=1.0, bounds=(0, 1), sample_weight=x),
     "weights have no private meaning"),
    (lambda x: fedustat.quantile(x, 0.5, epsilon=1.0, bounds=(1, 0)), "lower < upper"),
    (lambda x: fedustat.median(x, epsilon=1.0, bounds=(0, 1), method="gaps"),
     "method must be one of 'auto', 'exponential'"),
    (lambda x: fedustat.ecdf(x, epsilon=1.0, bounds=(0, 1), protocol="umpc"),
     "protocol must be None .* ecdf-secagg, ecdf-fss"),
    (lambda x: fedustat.median("age", epsilon=1.0, bounds=(0, 1)), "pass the table too"),
    (lambda x: fedustat.median(x, epsilon=1.0, bounds=(0, 1), noise="deployment", rng=1),
     "deployment noise cannot be seeded"),
])
def test_bad_inputs_are_refused_with_a_clear_message(call, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        call(np.linspace(0.0, 1.0, 20))


def test_roc_curve_bad_labels_name_the_function() -> None:
    with pytest.raises(ValueError, match=r"fedustat.roc_curve\(\): y_true's label must be "
                                         "binary"):
        fedustat.roc_curve(["a", "b"], [0.1, 0.2], epsilon=1.0, bounds=(0, 1))


# ------------------------------------------------------------ names

@pytest.mark.parametrize(("old", "new"), [("dp_ecdf", "fedustat.ecdf"),
                                          ("dp_quantiles", "fedustat.quantile"),
                                          ("dp_quantile", "fedustat.protocols.ecdf.dp_quantile"),
                                          ("dp_roc_curve", "fedustat.roc_curve"),
                                          ("dp_hosmer_lemeshow", "fedustat.hosmer_lemeshow"),
                                          ("dp_prefix_sums", "fedustat.cumsum")])
def test_old_top_level_names_warn_and_still_work(old: str, new: str) -> None:
    import fedustat.protocols.ecdf as layer

    with pytest.warns(DeprecationWarning, match=f"fedustat.{old} is deprecated; use .*{new}"):
        function = getattr(fedustat, old)
    assert function is getattr(layer, old)
    assert old not in fedustat.__all__


def test_new_names_are_exported_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("ecdf", "quantile", "median", "roc_curve", "hosmer_lemeshow", "cumsum"):
            assert name in fedustat.__all__ and callable(getattr(fedustat, name))
    with pytest.raises(AttributeError, match="has no attribute 'dp_nothing'"):
        fedustat.dp_nothing  # noqa: B018


def test_curve_adjacencies_are_in_the_record_class(values: np.ndarray,
                                                   labelled: tuple) -> None:
    # A budget under "replace one record" takes the curves (record class), not the AUC,
    # whose guarantee keeps the labels public (docs/budget.md, adjacency table).
    y, score = labelled
    acct = BudgetAccountant(1.0, adjacency="record")
    fedustat.ecdf(values, epsilon=0.25, bounds=(0, 49), rng=1, budget=acct)
    fedustat.roc_curve(y, score, epsilon=0.25, bounds=(0, 9), rng=1, budget=acct)
    fedustat.hosmer_lemeshow(y, score / 10, epsilon=0.25, rng=1, budget=acct)
    assert acct.spent == pytest.approx((0.75, 0.0), rel=1e-12)
    with pytest.raises(fedustat.privacy.IncomparableGuaranteeError, match="says nothing"):
        fedustat.roc_auc_score(y, score, epsilon=0.1, budget=acct)


def test_deployment_noise_is_recorded(values: np.ndarray, labelled: tuple) -> None:
    y, score = labelled
    releases = [fedustat.ecdf(values, epsilon=1.0, bounds=(0, 49), noise="deployment"),
                fedustat.ecdf(values, epsilon=1.0, thresholds=np.arange(0.0, 52.0, 4.0),
                              protocol="ecdf-secagg", noise="deployment"),
                fedustat.quantile(values, [0.5], epsilon=1.0, bounds=(0, 49),
                                  noise="deployment"),
                fedustat.median(values, epsilon=1.0, bounds=(0, 49), noise="deployment"),
                fedustat.roc_curve(y, score, epsilon=1.0, bounds=(0, 9), noise="deployment"),
                fedustat.hosmer_lemeshow(y, score / 10, epsilon=1.0, noise="deployment")]
    assert [r.noise for r in releases] == ["deployment"] * len(releases)


def test_cumsum_exact_seeded_and_budgeted() -> None:
    stream = np.random.default_rng(SEED + 4).integers(0, 2, 100).astype(float)
    res = fedustat.cumsum(stream, epsilon=1.0, rng=9)
    np.testing.assert_array_equal(np.asarray(res),
                                  dp_prefix_sums(stream, epsilon=1.0, rng=9).values)
    # The noise law of 003 Thm 3: L + 1 = 8 Laplace nodes of scale ceil(8 / 2) / eps.
    assert res.std_error[0] == pytest.approx(math.sqrt(8 * 2 * 4.0**2), rel=1e-12)
    low, high = res.confidence_interval(0.9)
    np.testing.assert_allclose(high - low, 2 * res.release.error.half_width(0.9))
    # Clipped into the bounds: a value above them counts as the upper bound.
    clipped = fedustat.cumsum([0.5, 3.0], epsilon=1.0, bounds=(0, 1), rng=1)
    assert clipped.release.privacy.adjacency == "replace one stream element (values in [0, 1])"
    acct = BudgetAccountant(1.0, adjacency="score")  # composes: a record-class relation
    fedustat.cumsum(stream, epsilon=0.6, rng=1, budget=acct)
    with pytest.raises(BudgetExceededError):
        fedustat.cumsum(stream, epsilon=0.6, rng=2, budget=acct)
    assert acct.spent == pytest.approx((0.6, 0.0))


def test_every_u_statistic_one_call_function_takes_budget() -> None:
    rng = np.random.default_rng(SEED + 5)
    x = rng.uniform(0.0, 1.0, 200)
    y = rng.integers(0, 3, 200)
    proba = np.eye(3)[y] + rng.uniform(0.0, 2.0, (200, 3))
    acct = BudgetAccountant(1.0, adjacency="record")
    releases = [
        fedustat.gini_mean_difference(x, bounds=(0, 1), epsilon=0.2, rng=1, budget=acct),
        fedustat.duplicate_pair_ratio(np.round(x, 1), epsilon=0.2, rng=2, budget=acct),
        fedustat.rand_score(y, np.round(x * 2), epsilon=0.2, rng=3, budget=acct),
        fedustat.kendalltau(x, y, epsilon=0.2, rng=4, budget=acct)]
    assert [e.guarantee for e in acct.ledger] == [r.privacy for r in releases]
    assert acct.spent == pytest.approx((0.8, 0.0), rel=1e-12)
    # A multiclass AUC (3 one-vs-rest releases at epsilon / 3) is charged its total.
    score_budget = BudgetAccountant(1.0, adjacency="score")
    macro = fedustat.roc_auc_score(y, proba, multi_class="ovr", epsilon=0.9, rng=5,
                                   budget=score_budget)
    assert score_budget.spent == pytest.approx((0.9, 0.0)) and macro.privacy.epsilon == 0.9


def test_printed_quantile_states_its_level_error_bar(values: np.ndarray) -> None:
    private = fedustat.median(values, epsilon=1.0, bounds=(0.0, 50.0), rng=3)
    low, high = private.level_interval(0.95)
    assert f"at a level in [{low:.3g}, {high:.3g}] with 95% probability" in str(private)
    exact = fedustat.median(values, epsilon=math.inf, bounds=(0.0, 50.0))
    assert "level in" not in str(exact)
