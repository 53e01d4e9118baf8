"""scikit-learn parity: random_state= wherever rng= is taken, multiclass roc_auc_score
(average=None, "micro", labels=) and binary pos_label inference, against
sklearn.metrics.roc_auc_score."""

from __future__ import annotations

import inspect
import math
from contextlib import nullcontext

import numpy as np
import pytest
from sklearn import metrics
from sklearn.exceptions import UndefinedMetricWarning

import fedustat

INF = math.inf
TAKES_RNG = sorted(name for name in fedustat.__all__
                   if callable(getattr(fedustat, name))
                   and not inspect.isclass(getattr(fedustat, name))
                   and "rng" in inspect.signature(getattr(fedustat, name)).parameters)


def test_the_one_call_functions_are_all_covered() -> None:
    assert {"roc_auc_score", "kendalltau", "estimate", "ecdf", "quantile", "median",
            "roc_curve", "hosmer_lemeshow", "cumsum", "gini_mean_difference",
            "duplicate_pair_ratio", "rand_score"} <= set(TAKES_RNG)


@pytest.mark.parametrize("name", TAKES_RNG)
def test_every_function_with_rng_takes_random_state(name: str) -> None:
    parameters = inspect.signature(getattr(fedustat, name)).parameters
    assert parameters["random_state"].kind is inspect.Parameter.KEYWORD_ONLY
    assert list(parameters).index("random_state") == list(parameters).index("rng") + 1


def _auc_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 200)
    return y, rng.uniform(size=200) + 0.5 * y


def test_random_state_int_and_generator_are_rng() -> None:
    y, s = _auc_data()
    by_rng = fedustat.roc_auc_score(y, s, epsilon=1.0, rng=3)
    assert fedustat.roc_auc_score(y, s, epsilon=1.0, random_state=3).value == by_rng.value
    assert fedustat.roc_auc_score(y, s, epsilon=1.0, random_state=np.int64(3)) == by_rng.value
    assert (fedustat.roc_auc_score(y, s, epsilon=1.0,
                                   random_state=np.random.default_rng(3)).value
            == fedustat.roc_auc_score(y, s, epsilon=1.0, rng=np.random.default_rng(3)).value)
    # None: as without it, deployment noise.
    assert fedustat.roc_auc_score(y, s, epsilon=1.0, random_state=None).noise == "deployment"


def test_random_state_legacy_randomstate_is_a_reproducible_study() -> None:
    y, s = _auc_data()
    first = fedustat.roc_auc_score(y, s, epsilon=1.0, random_state=np.random.RandomState(5))
    again = fedustat.roc_auc_score(y, s, epsilon=1.0, random_state=np.random.RandomState(5))
    assert first.value == again.value and first.noise == "simulation"
    state = np.random.RandomState(5)
    one = fedustat.roc_auc_score(y, s, epsilon=1.0, random_state=state)
    two = fedustat.roc_auc_score(y, s, epsilon=1.0, random_state=state)  # it advanced
    assert one.value == first.value and two.value != one.value
    with pytest.raises(ValueError, match="deployment noise cannot be seeded"):
        fedustat.roc_auc_score(y, s, epsilon=1.0, noise="deployment",
                               random_state=np.random.RandomState(5))


def test_random_state_reaches_the_curve_functions() -> None:
    x = np.random.default_rng(1).uniform(0, 10, 300)
    a = fedustat.ecdf(x, epsilon=1.0, bounds=(0, 10), random_state=4)
    b = fedustat.ecdf(x, epsilon=1.0, bounds=(0, 10), rng=4)
    assert np.array_equal(a.values, b.values)
    q = fedustat.median(x, epsilon=1.0, bounds=(0, 10), random_state=np.random.RandomState(2))
    assert q.value == fedustat.median(x, epsilon=1.0, bounds=(0, 10),
                                      random_state=np.random.RandomState(2)).value


def test_random_state_and_rng_together_or_of_a_wrong_type_are_refused() -> None:
    y, s = _auc_data()
    with pytest.raises(TypeError, match=r"^fedustat\.roc_auc_score\(\): pass rng= or "
                                        r"random_state= .*not both"):
        fedustat.roc_auc_score(y, s, epsilon=1.0, rng=1, random_state=1)
    with pytest.raises(TypeError, match=r"fedustat\.kendalltau\(\): random_state must be None, "
                                        r"an int seed.*got str"):
        fedustat.kendalltau(s, s, epsilon=1.0, random_state="7")


# ------------------------------------------------------------------ multiclass AUC

def _multiclass(seed: int, k: int = 3, n: int = 300, columns: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    width = columns or k
    proba = np.eye(width)[y] + rng.uniform(0.0, 2.0, (n, width))
    return y, proba / proba.sum(1, keepdims=True)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("average", [None, "micro", "macro", "weighted"])
def test_ovr_averages_equal_sklearn(seed: int, average: str | None) -> None:
    y, proba = _multiclass(seed, k=3 + seed % 2)
    mine = fedustat.roc_auc_score(y, proba, multi_class="ovr", average=average, epsilon=INF)
    ref = metrics.roc_auc_score(y, proba, multi_class="ovr", average=average)
    assert np.asarray(mine, dtype=float) == pytest.approx(ref, rel=1e-12)
    if average is None:
        assert len(mine) == proba.shape[1]


@pytest.mark.parametrize("average", [None, "micro", "weighted"])
def test_labels_list_classes_absent_from_y_true_as_sklearn(average: str | None) -> None:
    y, proba = _multiclass(7, k=3, columns=4)  # class 3 listed, never observed
    mine = fedustat.roc_auc_score(y, proba, multi_class="ovr", average=average,
                                  labels=[0, 1, 2, 3], epsilon=INF)
    with pytest.warns(UndefinedMetricWarning) if average is None else nullcontext():
        ref = metrics.roc_auc_score(y, proba, multi_class="ovr", average=average,
                                    labels=[0, 1, 2, 3])
    assert np.asarray(mine, dtype=float) == pytest.approx(ref, rel=1e-12, nan_ok=True)


def test_labels_reorder_the_columns_and_unknown_labels_are_refused() -> None:
    y, proba = _multiclass(8)
    ordered = fedustat.roc_auc_score(y, proba, multi_class="ovr", average=None, epsilon=INF)
    shuffled = fedustat.roc_auc_score(y, proba[:, [2, 0, 1]], multi_class="ovr",
                                      average=None, labels=[2, 0, 1], epsilon=INF)
    assert [float(v) for v in shuffled] == [float(ordered[2]), float(ordered[0]),
                                           float(ordered[1])]
    with pytest.raises(ValueError, match=r"y_true holds 2, which is not in labels \[0, 1, 3\]"):
        fedustat.roc_auc_score(y, proba, multi_class="ovr", labels=[0, 1, 3], epsilon=INF)
    with pytest.raises(ValueError, match=r"class 3 of labels does not occur in y_true.*"
                                         r"'weighted'"):
        fedustat.roc_auc_score(y, _multiclass(8, columns=4)[1], multi_class="ovr",
                               labels=[0, 1, 2, 3], epsilon=INF)
    with pytest.raises(ValueError, match=r"average must be 'macro' or 'weighted' with "
                                         r"multi_class='ovo', got 'micro'"):
        fedustat.roc_auc_score(y, proba, multi_class="ovo", average="micro", epsilon=INF)


@pytest.mark.parametrize("labels", [(0, 1), (-1, 1), (False, True)])
def test_pos_label_is_inferred_where_sklearn_infers_it(labels: tuple) -> None:
    rng = np.random.default_rng(9)
    y = np.array(labels)[rng.integers(0, 2, 100)]
    s = rng.normal(size=100) + (y == labels[1])
    assert fedustat.roc_auc_score(y, s, epsilon=INF).value == pytest.approx(
        metrics.roc_auc_score(y, s), rel=1e-12)


@pytest.mark.parametrize("labels", [(1, 2), ("no", "yes")])
def test_other_labels_need_pos_label_named(labels: tuple) -> None:
    rng = np.random.default_rng(10)
    y = np.array(labels)[rng.integers(0, 2, 100)]
    s = rng.normal(size=100)
    with pytest.raises(ValueError, match=r"name the positive class with pos_label="):
        fedustat.roc_auc_score(y, s, epsilon=INF)
    assert metrics.roc_curve((y == labels[1]).astype(int), s)  # what pos_label gives
    assert fedustat.roc_auc_score(y, s, pos_label=labels[1], epsilon=INF).value == \
        pytest.approx(metrics.roc_auc_score(y == labels[1], s), rel=1e-12)


# ------------------------------------------------------------------ private multiclass

def test_private_micro_is_unbiased() -> None:
    # The raw micro release averages to the exact micro AUC within 4 s.e. / sqrt(R).
    y, proba = _multiclass(11, n=150)
    exact = metrics.roc_auc_score(y, proba, multi_class="ovr", average="micro")
    runs = 300
    rel = [fedustat.roc_auc_score(y, proba, multi_class="ovr", average="micro",
                                  epsilon=1.0, rng=s, clip=False) for s in range(runs)]
    se = rel[0].std_error
    assert abs(np.mean([r.value for r in rel]) - exact) <= 4 * se / math.sqrt(runs)
    # Noise at epsilon / K on the n K rows: the group of a record's K rows is covered.
    assert rel[0].privacy.epsilon == 1.0 and rel[0].diagnostics["epsilon_each_row"] == 1 / 3


def test_private_per_class_releases_cover() -> None:
    # Each class's 95% interval holds its exact AUC in at least 95% - 4 binomial s.d.
    y, proba = _multiclass(12, n=150)
    exact = metrics.roc_auc_score(y, proba, multi_class="ovr", average=None)
    runs = 200
    hits = np.zeros(3)
    for s in range(runs):
        releases = fedustat.roc_auc_score(y, proba, multi_class="ovr", average=None,
                                          epsilon=1.0, rng=s, clip=False)
        hits += [r.confidence_interval(0.95).low <= e <= r.confidence_interval(0.95).high
                 for r, e in zip(releases, exact, strict=True)]
    assert np.all(hits / runs >= 0.95 - 4 * math.sqrt(0.95 * 0.05 / runs))
    assert releases[0].privacy.epsilon == pytest.approx(1.0 / 3)


def test_private_per_class_releases_are_one_budget_charge() -> None:
    y, proba = _multiclass(13, n=150)
    acct = fedustat.BudgetAccountant(1.0, adjacency="score")
    fedustat.roc_auc_score(y, proba, multi_class="ovr", average=None, epsilon=0.6, rng=0,
                           budget=acct)
    assert acct.spent[0] == pytest.approx(0.6)
    with pytest.raises(fedustat.BudgetExceededError):
        fedustat.roc_auc_score(y, proba, multi_class="ovr", average="micro", epsilon=0.6,
                               rng=1, budget=acct)
