"""Inputs people pass to scikit-learn: string labels with pos_label, predict_proba arrays,
pandas columns (or column names of a DataFrame), and clear refusals of arguments that have
no private meaning. Exact answers (epsilon = inf) are compared with scikit-learn / SciPy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedustat

pd = pytest.importorskip("pandas")
skm = pytest.importorskip("sklearn.metrics")
sps = pytest.importorskip("scipy.stats")

INF = math.inf


@pytest.fixture
def binary() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(16)
    y = rng.integers(0, 2, size=60)
    score = np.round(rng.normal(size=60) + 0.8 * y, 1)  # rounded: ties count one half
    return y, score


# ---------------------------------------------------------------- pos_label


def test_string_labels_need_pos_label_and_match_sklearn(binary):
    y, score = binary
    names = np.where(y == 1, "spam", "ham")
    with pytest.raises(ValueError, match=r"y_true's label must be binary \(0/1, -1/1 or "
                                         r"booleans\); found values \['ham', 'spam'\]: for "
                                         r"other labels, name the positive class with "
                                         r"pos_label="):
        fedustat.roc_auc_score(names, score, epsilon=INF)
    got = fedustat.roc_auc_score(names, score, pos_label="spam", epsilon=INF)
    # sklearn's roc_auc_score takes the greater label ('spam') as the positive class
    assert got.value == pytest.approx(skm.roc_auc_score(names, score), abs=1e-12)
    flipped = fedustat.roc_auc_score(names, score, pos_label="ham", epsilon=INF)
    assert flipped.value == pytest.approx(skm.roc_auc_score(names == "ham", score),
                                          abs=1e-12)
    assert flipped.value == pytest.approx(1.0 - got.value, abs=1e-12)


@pytest.mark.parametrize("codes", [(0, 1), (-1, 1), (False, True)])
def test_standard_labels_need_no_pos_label(binary, codes):
    y, score = binary
    labels = np.where(y == 1, codes[1], codes[0])
    got = fedustat.roc_auc_score(labels, score, epsilon=INF)
    assert got.value == pytest.approx(skm.roc_auc_score(labels, score), abs=1e-12)


def test_other_numeric_labels_need_pos_label(binary):
    y, score = binary
    labels = y + 1  # {1, 2}: sklearn's roc_curve also asks for pos_label
    with pytest.raises(ValueError, match=r"found values \[1.0, 2.0\]: for other labels, "
                                         r"name the positive class with pos_label="):
        fedustat.roc_auc_score(labels, score, epsilon=INF)
    got = fedustat.roc_auc_score(labels, score, pos_label=2, epsilon=INF)
    assert got.value == pytest.approx(skm.roc_auc_score(y, score), abs=1e-12)


def test_pos_label_must_be_a_label(binary):
    y, score = binary
    with pytest.raises(ValueError, match=r"pos_label='eggs' is not among y_true's labels "
                                         r"\['ham', 'spam'\]"):
        fedustat.roc_auc_score(np.where(y == 1, "spam", "ham"), score, pos_label="eggs",
                               epsilon=INF)


def test_nan_label_refused(binary):
    y, score = binary
    labels = y.astype(float)
    labels[3] = np.nan
    with pytest.raises(ValueError, match="y_true contains NaN"):
        fedustat.roc_auc_score(labels, score, epsilon=INF)


# ---------------------------------------------------------------- predict_proba


def test_predict_proba_uses_the_positive_column(binary):
    y, score = binary
    p1 = 1.0 / (1.0 + np.exp(-score))
    proba = np.column_stack([1.0 - p1, p1])
    got = fedustat.roc_auc_score(y, proba, epsilon=INF)
    assert got.value == pytest.approx(skm.roc_auc_score(y, proba[:, 1]), abs=1e-12)
    # with pos_label the lesser label, its column (0) is the one to use
    names = np.where(y == 1, "b", "a")
    low = fedustat.roc_auc_score(names, proba, pos_label="a", epsilon=INF)
    assert low.value == pytest.approx(skm.roc_auc_score(names == "a", proba[:, 0]),
                                      abs=1e-12)


def test_predict_proba_of_another_shape_refused(binary):
    y, _ = binary
    with pytest.raises(ValueError, match=r"y_score has shape \(60, 3\); expected a 1-D score "
                                         r"or an \(n, 2\) predict_proba array"):
        fedustat.roc_auc_score(y, np.ones((60, 3)) / 3, epsilon=INF)


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(("key", "why"), [("sample_weight", "weighted U-statistic has "
                                                            "another sensitivity"),
                                          ("max_fpr", "negatives' score quantile")])
def test_arguments_without_private_meaning(binary, key, why):
    y, score = binary
    with pytest.raises(TypeError, match=rf"fedustat.roc_auc_score\(\) does not take "
                                        rf"{key}=: .*{why}"):
        fedustat.roc_auc_score(y, score, epsilon=1.0, rng=0, **{key: 0.5})


def test_sample_weight_refused_by_every_one_call_function():
    x = np.arange(10.0)
    calls = [lambda: fedustat.kendalltau(x, x, epsilon=1, sample_weight=x),
             lambda: fedustat.gini_mean_difference(x, bounds=(0, 10), epsilon=1,
                                                   sample_weight=x),
             lambda: fedustat.duplicate_pair_ratio(x, epsilon=1, sample_weight=x),
             lambda: fedustat.rand_score(x, x, epsilon=1, sample_weight=x)]
    names = ["kendalltau", "gini_mean_difference", "duplicate_pair_ratio", "rand_score"]
    for call, name in zip(calls, names, strict=True):
        with pytest.raises(TypeError, match=rf"fedustat.{name}\(\) does not take "
                                            r"sample_weight="):
            call()


def test_unknown_keyword_names_the_public_function(binary):
    y, score = binary
    with pytest.raises(TypeError, match=r"^fedustat.roc_auc_score\(\) got an unexpected "
                                        r"keyword argument 'foo'"):
        fedustat.roc_auc_score(y, score, epsilon=1.0, rng=0, foo=1)
    with pytest.raises(TypeError, match=r"^fedustat.kendalltau\(\) got an unexpected "
                                        r"keyword argument 'foo'"):
        fedustat.kendalltau(score, score, epsilon=1.0, rng=0, foo=1)


# ---------------------------------------------------------------- pandas


@pytest.fixture
def frame(binary) -> pd.DataFrame:
    y, score = binary
    rng = np.random.default_rng(61)
    return pd.DataFrame({"label": np.where(y == 1, "yes", "no"), "score": score,
                         "age": rng.uniform(20, 80, size=60).round(0),
                         "cluster": rng.choice(["a", "b", "c"], size=60),
                         "truth": rng.choice(["u", "v"], size=60)})


def test_series_and_column_names_give_the_same_exact_values(frame):
    df = frame
    auc_series = fedustat.roc_auc_score(df["label"], df["score"], pos_label="yes",
                                        epsilon=INF)
    auc_names = fedustat.roc_auc_score("label", "score", data=df, pos_label="yes",
                                       epsilon=INF)
    expected = skm.roc_auc_score(df["label"] == "yes", df["score"])
    assert auc_series.value == pytest.approx(expected, abs=1e-12)
    assert auc_names.value == pytest.approx(expected, abs=1e-12)

    tau = fedustat.kendalltau("age", "score", data=df, variant="b", epsilon=INF)
    assert tau.statistic == pytest.approx(sps.kendalltau(df["age"], df["score"]).statistic,
                                          abs=1e-12)
    tau_series = fedustat.kendalltau(df["age"], df["score"], variant="b", epsilon=INF)
    assert tau_series.statistic == pytest.approx(tau.statistic, abs=1e-15)

    gmd = fedustat.gini_mean_difference("age", data=df, bounds=(0, 100), epsilon=INF)
    a = df["age"].to_numpy()
    n = len(a)
    expected_gmd = np.abs(a[:, None] - a[None, :]).sum() / (n * (n - 1))  # 000 eq. 4
    assert gmd.value == pytest.approx(expected_gmd, rel=1e-12)

    rand = fedustat.rand_score("truth", "cluster", data=df, epsilon=INF)
    assert rand.value == pytest.approx(skm.rand_score(df["truth"], df["cluster"]),
                                       abs=1e-12)
    dup = fedustat.duplicate_pair_ratio(df["age"], epsilon=INF)
    counts = df["age"].value_counts().to_numpy()
    assert dup.value == pytest.approx((counts * (counts - 1)).sum() / (n * (n - 1)),
                                      abs=1e-12)


def test_a_dict_of_columns_is_a_table(binary):
    y, score = binary
    got = fedustat.roc_auc_score("y", "s", data={"y": y, "s": score}, epsilon=INF)
    assert got.value == pytest.approx(skm.roc_auc_score(y, score), abs=1e-12)


def test_column_name_errors(frame):
    with pytest.raises(ValueError, match=r"data has no column 'lable' \(its columns: label, "
                                         r"score, age, cluster, truth\)"):
        fedustat.roc_auc_score("lable", "score", data=frame, pos_label="yes", epsilon=INF)
    with pytest.raises(TypeError, match=r"y_true='label' is a column name; pass the table "
                                        r"too \(data=df\)"):
        fedustat.roc_auc_score("label", "score", pos_label="yes", epsilon=INF)


def test_private_release_from_series_equals_the_array_release(frame):
    df = frame
    from_series = fedustat.roc_auc_score(df["label"], df["score"], pos_label="yes",
                                         epsilon=1.0, rng=7)
    from_arrays = fedustat.roc_auc_score((df["label"] == "yes").to_numpy(dtype=int),
                                         df["score"].to_numpy(), epsilon=1.0, rng=7)
    assert from_series.value == from_arrays.value


def test_polars_series_and_tables(binary):
    import polars as pl
    from scipy import stats

    y, score = binary
    got = fedustat.roc_auc_score(pl.Series(y), pl.Series(score), epsilon=INF)
    assert got.value == pytest.approx(skm.roc_auc_score(y, score), abs=1e-12)
    table = pl.DataFrame({"label": y, "score": score, "other": score[::-1]})
    by_name = fedustat.roc_auc_score("label", "score", data=table, epsilon=INF)
    assert by_name.value == pytest.approx(skm.roc_auc_score(y, score), abs=1e-12)
    tau = fedustat.kendalltau("score", "other", data=table, epsilon=INF, variant="b")
    assert tau.statistic == pytest.approx(stats.kendalltau(score, score[::-1]).statistic,
                                          abs=1e-12)
    grid = np.unique(score)
    median = fedustat.median("score", data=table, epsilon=INF, thresholds=grid)
    assert median.value == np.quantile(score, 0.5, method="inverted_cdf")
    # The same seeded release from a polars table as from the arrays.
    seeded = fedustat.roc_auc_score("label", "score", data=table, epsilon=1.0, rng=7)
    assert seeded.value == fedustat.roc_auc_score(y, score, epsilon=1.0, rng=7).value


# ---------------------------------------------------------------- multiclass


@pytest.fixture
def three_classes() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1616)
    y = rng.integers(0, 3, size=45)
    proba = rng.dirichlet([1.0, 1.0, 1.0], size=45)
    proba[np.arange(45), y] += 0.4  # informative scores
    return y, proba / proba.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("multi_class", ["ovr", "ovo"])
@pytest.mark.parametrize("average", ["macro", "weighted"])
def test_multiclass_matches_sklearn_exactly(three_classes, multi_class, average):
    y, proba = three_classes
    got = fedustat.roc_auc_score(y, proba, multi_class=multi_class, average=average,
                                 epsilon=INF)
    expected = skm.roc_auc_score(y, proba, multi_class=multi_class, average=average)
    assert got.value == pytest.approx(expected, abs=1e-12)
    names = np.array(["cat", "dog", "eel"])[y]  # string classes, columns in sorted order
    by_name = fedustat.roc_auc_score(names, proba, multi_class=multi_class,
                                     average=average, epsilon=INF)
    assert by_name.value == pytest.approx(expected, abs=1e-12)


def test_sklearn_toy_multiclass():
    # a 4-record, 3-class example (one record of class 2): every pair AUC is defined
    y = np.array([0, 1, 0, 2])
    proba = np.array([[0.1, 0.8, 0.1], [0.3, 0.4, 0.3], [0.35, 0.5, 0.15], [0, 0.2, 0.8]])
    for mc in ("ovr", "ovo"):
        got = fedustat.roc_auc_score(y, proba, multi_class=mc, epsilon=INF)
        assert got.value == pytest.approx(skm.roc_auc_score(y, proba, multi_class=mc),
                                          abs=1e-12)


def test_multiclass_budget_is_split(three_classes):
    y, proba = three_classes
    ovr = fedustat.roc_auc_score(y, proba, multi_class="ovr", epsilon=1.5, rng=3)
    ovo = fedustat.roc_auc_score(y, proba, multi_class="ovo", epsilon=1.5, rng=3)
    assert ovr.privacy.epsilon == 1.5 and ovo.privacy.epsilon == 1.5
    assert ovr.diagnostics["releases"] == 3 and ovr.diagnostics["epsilon_each"] == 0.5
    assert ovo.diagnostics["releases"] == 6 and ovo.diagnostics["epsilon_each"] == 0.25
    assert 0.0 <= ovr.value <= 1.0 and 0.0 <= ovo.value <= 1.0


def test_multiclass_error_bar_matches_the_spread(three_classes):
    y, proba = three_classes
    exact = skm.roc_auc_score(y, proba, multi_class="ovr")
    rng = np.random.default_rng(77)
    runs = [fedustat.roc_auc_score(y, proba, multi_class="ovr", epsilon=2.0, rng=rng,
                                   clip=False) for _ in range(400)]
    values = np.array([r.value for r in runs])
    sd = runs[0].std_error
    n = len(values)
    # unbiased: the mean is within 4 standard errors of the exact value
    assert abs(values.mean() - exact) < 4 * sd / math.sqrt(n)
    # a weighted sum of independent Laplace terms has excess kurtosis <= 3, so
    # Var(s^2) / sd^4 <= (2 + 3) / n; 4 standard deviations of the sample variance
    assert abs(values.var(ddof=1) / sd**2 - 1.0) < 4 * math.sqrt(5.0 / n)


def test_multiclass_refusals(three_classes):
    y, proba = three_classes
    with pytest.raises(ValueError, match=r"y_true has 3 classes and y_score 3 columns: pass "
                                         r"multi_class='ovr' \(one class against the rest\) "
                                         r"or 'ovo'"):
        fedustat.roc_auc_score(y, proba, epsilon=INF)
    with pytest.raises(ValueError, match=r"average must be 'macro', 'weighted', 'micro' or "
                                         r"None with multi_class='ovr', got 'samples'"):
        fedustat.roc_auc_score(y, proba, multi_class="ovr", average="samples", epsilon=INF)
    with pytest.raises(ValueError, match=r"multi_class must be 'raise', 'ovr' or 'ovo', "
                                         r"got 'ova'"):
        fedustat.roc_auc_score(y, proba, multi_class="ova", epsilon=INF)
    with pytest.raises(ValueError, match=r"y_score has 4 columns but there are 3 classes"):
        fedustat.roc_auc_score(y, np.ones((45, 4)) / 4, multi_class="ovo", epsilon=INF)
    with pytest.raises(ValueError, match=r"found values \[0.0, 1.0, 2.0\]: for other labels, "
                                         r"name the positive class with pos_label=; for a "
                                         r"multiclass AUC, give one y_score column per class "
                                         r"and multi_class='ovr' or 'ovo'"):
        fedustat.roc_auc_score(y, proba[:, 0], epsilon=INF)
    with pytest.raises(ValueError, match=r"pos_label is for binary labels"):
        fedustat.roc_auc_score(y, proba, multi_class="ovr", pos_label=1, epsilon=INF)


# ---------------------------------------------------------------- estimate


def test_estimate_reads_the_kernel_columns_of_a_dataframe(frame):
    df = frame.assign(label=(frame["label"] == "yes").astype(int))
    kernel = fedustat.stats.auc_kernel()
    got = fedustat.estimate(kernel, df, epsilon=INF, protocol="exact")
    assert got.value == pytest.approx(skm.roc_auc_score(df["label"], df["score"]),
                                      abs=1e-12)
    with pytest.raises(ValueError, match=r"data has no column 'score'; kernel 'auc' reads "
                                         r"the columns score, label \(data's columns: "):
        fedustat.estimate(kernel, df.drop(columns="score"), epsilon=INF, protocol="exact")
    with pytest.raises(TypeError, match=r"fedustat.estimate\(\) does not take "
                                        r"sample_weight=: a weighted U-statistic"):
        fedustat.estimate(kernel, df, epsilon=1.0, sample_weight=np.ones(len(df)))
