"""Tests for fedustat.datasets: container, bundled data, synthetic generators, file reading."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import kendalltau, multivariate_normal, norm
from sklearn.metrics import roc_auc_score

from fedustat.datasets import (
    Dataset,
    auc_one,
    available,
    classifier_scores,
    ithdigit,
    load,
    load_breast_cancer_scores,
    load_diabetes_pairs,
    load_linnerud_exercise,
    load_wine_cultivars,
    poisson_ecdf,
    read_table,
    uniform_unit,
    ur,
)

Z = 5.0  # Monte Carlo checks allow 5 standard errors (two-sided p about 6e-7 under normality)


# --------------------------------------------------------------------------- Dataset


def _small() -> Dataset:
    return Dataset(name="t", columns={"a": [1.0, 2.0, 3.0], "b": np.array([0, 1, 0])},
                   description="d", source="s", task="auc", params={"k": 1})


def test_dataset_basic_properties() -> None:
    ds = _small()
    assert ds.n == 3 == len(ds)
    assert ds.column_names == ("a", "b")
    assert list(ds) == ["a", "b"]
    assert "a" in ds and "z" not in ds
    np.testing.assert_array_equal(ds["a"], [1.0, 2.0, 3.0])
    assert ds.params["k"] == 1
    assert "n=3" in repr(ds) and "task='auc'" in repr(ds)


def test_dataset_is_immutable_and_copies_input() -> None:
    source = np.array([1.0, 2.0, 3.0])
    ds = Dataset(name="t", columns={"a": source}, description="", source="", task="gini")
    source[0] = 99.0
    assert ds["a"][0] == 1.0
    with pytest.raises(ValueError, match="read-only"):
        ds["a"][0] = 5.0
    with pytest.raises(TypeError):
        ds.columns["b"] = np.zeros(3)  # type: ignore[index]
    with pytest.raises(AttributeError):
        ds.name = "other"  # type: ignore[misc]


def test_dataset_rejects_bad_columns() -> None:
    with pytest.raises(ValueError, match=r"same length; got a=3, b=2"):
        Dataset(name="t", columns={"a": [1, 2, 3], "b": [1, 2]}, description="", source="",
                task="auc")
    with pytest.raises(ValueError, match="column 'a' must be one-dimensional"):
        Dataset(name="t", columns={"a": np.zeros((2, 2))}, description="", source="", task="auc")
    with pytest.raises(ValueError, match="non-empty mapping"):
        Dataset(name="t", columns={}, description="", source="", task="auc")
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        Dataset(name="", columns={"a": [1]}, description="", source="", task="auc")


def test_dataset_unknown_column_names_the_columns() -> None:
    with pytest.raises(KeyError, match=r"no column 'c'; its columns are \['a', 'b'\]"):
        _small()["c"]


def test_to_frame_without_pandas_raises_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"needs pandas.*pip install pandas"):
        _small().to_frame()


def test_to_frame_with_pandas() -> None:
    pd = pytest.importorskip("pandas")
    frame = _small().to_frame()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["a", "b"]
    np.testing.assert_array_equal(frame["a"].to_numpy(), [1.0, 2.0, 3.0])


# --------------------------------------------------------------------------- bundled data

EXPECTED = {
    "breast_cancer_scores": (285, ("score", "label"), "auc"),
    "diabetes_pairs": (442, ("age", "sex", "bmi", "bp", "tc", "ldl", "hdl", "tch", "ltg",
                             "glu", "progression", "progression_class"), "kendall"),
    "digits_images": (1797, ("digit", "ink", "ink_top", "ink_bottom"), "categorical"),
    "digits_scores": (899, ("score", "label"), "auc"),
    "linnerud_exercise": (20, ("chins", "situps", "jumps", "weight", "waist", "pulse"),
                          "kendall"),
    "wine_cultivars": (178, ("cultivar", "alcohol", "magnesium", "flavanoids", "proline"),
                       "categorical"),
}


def test_available_lists_the_bundled_sets() -> None:
    assert available() == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_loader_shape_and_finiteness(name: str) -> None:
    n, columns, task = EXPECTED[name]
    ds = load(name)
    assert ds.name == name
    assert ds.n == n
    assert ds.column_names == columns
    assert ds.task == task
    assert "scikit-learn" in ds.source and "BSD-3-Clause" in ds.source
    for col in ds.column_names:
        values = ds[col]
        assert values.shape == (n,)
        assert np.issubdtype(values.dtype, np.number)
        assert np.all(np.isfinite(values))


def test_breast_cancer_scores_are_a_good_deterministic_classifier() -> None:
    ds = load_breast_cancer_scores()
    score, label = ds["score"], ds["label"]
    assert np.all((score >= 0) & (score <= 1))
    assert set(np.unique(label).tolist()) == {0, 1}
    # The stratified split keeps the 212/569 malignant share: 106 of 285 test rows.
    assert int(label.sum()) == 106
    assert roc_auc_score(label, score) > 0.9
    # Malignant (label 1) must score high: the label is sklearn's target flipped.
    assert score[label == 1].mean() > score[label == 0].mean()
    again = load_breast_cancer_scores(seed=0)
    np.testing.assert_array_equal(again["score"], score)
    np.testing.assert_array_equal(again["label"], label)
    other = load_breast_cancer_scores(seed=1)
    assert not np.array_equal(other["score"], score)


def test_breast_cancer_test_size_and_kwargs_through_load() -> None:
    ds = load("breast_cancer_scores", test_size=0.3, seed=3)
    assert ds.n == math.ceil(569 * 0.3)
    assert ds.params == {"test_size": 0.3, "seed": 3, "n_train": 569 - ds.n}


@pytest.mark.parametrize("bad", [0.0, 1.0, 1.5, -0.1])
def test_breast_cancer_rejects_bad_test_size(bad: float) -> None:
    with pytest.raises(ValueError, match=r"test_size must be in \(0, 1\)"):
        load_breast_cancer_scores(test_size=bad)


def test_breast_cancer_rejects_degenerate_split_and_bad_seed() -> None:
    with pytest.raises(ValueError, match=r"test_size=0\.001 leaves 1 test"):
        load_breast_cancer_scores(test_size=0.001)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        load_breast_cancer_scores(seed=-1)
    with pytest.raises(TypeError, match="seed must be an integer"):
        load_breast_cancer_scores(seed=1.5)  # type: ignore[arg-type]


def test_diabetes_pairs_documented_values() -> None:
    ds = load_diabetes_pairs()
    tau = kendalltau(ds["bmi"], ds["progression"]).statistic
    assert round(float(tau), 3) == 0.391
    assert ds["progression"].min() == 25 and ds["progression"].max() == 346
    assert set(np.unique(ds["sex"]).tolist()) == {1.0, 2.0}
    np.testing.assert_array_equal(ds["age"], np.round(ds["age"]))


def test_linnerud_is_discrete_with_documented_associations() -> None:
    ds = load_linnerud_exercise()
    for col in ds.column_names:
        np.testing.assert_array_equal(ds[col], np.round(ds[col]))
    assert kendalltau(ds["waist"], ds["situps"]).statistic < 0
    assert kendalltau(ds["weight"], ds["waist"]).statistic > 0


def test_wine_cultivar_counts_and_duplicate_pair_ratio() -> None:
    ds = load_wine_cultivars()
    counts = np.bincount(ds["cultivar"])
    np.testing.assert_array_equal(counts, [59, 71, 48])
    ratio = (counts * (counts - 1)).sum() / (ds.n * (ds.n - 1))
    assert round(float(ratio), 4) == 0.3380
    assert len(np.unique(ds["magnesium"])) == 53


def test_load_unknown_name_lists_available() -> None:
    with pytest.raises(ValueError, match=r"unknown data set 'adult'; available data sets: "
                                         r"breast_cancer_scores, diabetes_pairs"):
        load("adult")


# --------------------------------------------------------------------------- 001 App. D.1


@pytest.mark.parametrize("alpha", [1, 5, 20])
def test_auc_one_matches_paper(alpha: int) -> None:
    ds = auc_one(alpha, n_per_class=1000, rng=0)
    d = 2**alpha
    score, label = ds["score"], ds["label"]
    assert ds.n == 2000 and int(label.sum()) == 1000
    assert score.dtype == np.int64
    np.testing.assert_array_equal(score[label == 1], d - 1)
    np.testing.assert_array_equal(score[label == 0], 0)
    assert ds.params["d"] == d
    assert roc_auc_score(label, score) == 1.0 == ds.params["auc"]


def test_auc_one_shuffle_is_seeded() -> None:
    a, b = auc_one(4, 50, rng=7), auc_one(4, 50, rng=7)
    np.testing.assert_array_equal(a["label"], b["label"])
    assert not np.array_equal(a["label"], auc_one(4, 50, rng=8)["label"])
    blocks = auc_one(4, 50, shuffle=False)["label"]
    np.testing.assert_array_equal(blocks, np.repeat([1, 0], 50))


def test_ur_is_uniform_on_the_domain_and_class_blind() -> None:
    alpha, m = 20, 20_000
    d = 2**alpha
    ds = ur(alpha, n_per_class=m, rng=1)
    score, label = ds["score"], ds["label"]
    assert ds.n == 2 * m and int(label.sum()) == m
    assert score.min() >= 0 and score.max() <= d - 1
    # Discrete uniform on [0..d-1]: mean (d-1)/2, variance (d^2-1)/12.
    se_mean = math.sqrt((d**2 - 1) / 12 / (2 * m))
    assert abs(score.mean() - (d - 1) / 2) < Z * se_mean
    # Class-blind scores: AUC 1/2 with null variance (n1+n2+1)/(12 n1 n2) (no ties;
    # ties only lower it, so the bound stays valid).
    se_auc = math.sqrt((2 * m + 1) / (12 * m * m))
    assert abs(roc_auc_score(label, score) - 0.5) < Z * se_auc
    np.testing.assert_array_equal(ur(alpha, 100, rng=3)["score"], ur(alpha, 100, rng=3)["score"])


def test_ur_covers_small_domain() -> None:
    ds = ur(2, n_per_class=500, rng=0)
    assert set(np.unique(ds["score"]).tolist()) == {0, 1, 2, 3}


def test_ithdigit_matches_paper() -> None:
    ds = ithdigit(1000, rng=0)
    score, label = ds["score"], ds["label"]
    assert score.dtype == np.float64
    np.testing.assert_array_equal(score[label == 1], 1e-4)
    np.testing.assert_array_equal(score[label == 0], 0.0)
    assert int(label.sum()) == 1000 and ds.n == 2000


def test_ithdigit_discretization_threshold_of_the_paper() -> None:
    # 001 App. D.1: nothing is learnt for d <= 2^13, low error from d >= 2^14.
    coarse = ithdigit(100, alpha=13, rng=0)
    np.testing.assert_array_equal(coarse["score"], 0)
    assert coarse.params["auc"] == 0.5
    fine = ithdigit(100, alpha=14, rng=0)
    np.testing.assert_array_equal(fine["score"][fine["label"] == 1], 1)
    np.testing.assert_array_equal(fine["score"][fine["label"] == 0], 0)
    assert fine.params == {"digit": 4, "alpha": 14, "d": 2**14, "auc": 1.0}
    assert ithdigit(10, digit=2, alpha=7, rng=0)["score"].max() == 1  # floor(0.01 * 128)


# --------------------------------------------------------------------------- 002, 003


def test_uniform_unit_distribution() -> None:
    n = 50_000
    x = uniform_unit(n, rng=11)["x"]
    assert x.shape == (n,) and x.min() >= 0 and x.max() < 1
    assert abs(x.mean() - 0.5) < Z * math.sqrt(1 / 12 / n)
    # Dvoretzky-Kiefer-Wolfowitz: P(sup |F_n - F| > t) <= 2 exp(-2 n t^2) = 1e-6.
    t = math.sqrt(math.log(2 / 1e-6) / (2 * n))
    xs = np.sort(x)
    upper = np.arange(1, n + 1) / n - xs
    lower = xs - np.arange(n) / n
    assert max(upper.max(), lower.max()) < t
    np.testing.assert_array_equal(uniform_unit(5, 2)["x"], uniform_unit(5, 2)["x"])


def test_poisson_ecdf_counts() -> None:
    n_bins, lam = 4096, 3.0
    ds = poisson_ecdf(n_bins, lam, rng=5)
    x = ds["x"]
    assert x.min() >= 1 and x.max() <= n_bins and x.dtype == np.int64
    # The row count is a sum of n_bins independent Pois(lam): mean and variance n_bins*lam.
    assert abs(x.size - n_bins * lam) < Z * math.sqrt(n_bins * lam)
    counts = np.bincount(x, minlength=n_bins + 1)[1:]
    # Pois(lam) has equal mean and variance; the sample variance's SE is about
    # sqrt((mu4 - sigma^4) / n) with mu4 = lam(1 + 3 lam) for Poisson.
    se_var = math.sqrt((lam * (1 + 3 * lam) - lam**2) / n_bins)
    assert abs(counts.var(ddof=1) - lam) < Z * se_var
    sorted_ds = poisson_ecdf(n_bins, lam, rng=5, shuffle=False)
    np.testing.assert_array_equal(sorted_ds["x"], np.sort(x))
    assert ds.params == {"n_bins": n_bins, "lam": lam}


def test_poisson_ecdf_all_zero_counts_is_an_error() -> None:
    with pytest.raises(ValueError, match="Poisson counts with lam=1e-12 were zero"):
        poisson_ecdf(3, 1e-12, rng=0)


# --------------------------------------------------------------------------- binormal scores


def _binormal_auc_se(auc: float, n_pos: int, n_neg: int) -> float:
    """Exact SE of the Mann-Whitney AUC under the binormal model.

    Var = [A(1-A) + (n_pos-1)(Q1-A^2) + (n_neg-1)(Q2-A^2)] / (n_pos n_neg), with
    Q1 = P(X1 > Y, X2 > Y) and Q2 = P(X > Y1, X > Y2). Both differences share one score,
    so they are N(mu, 2) with correlation 1/2 and Q1 = Q2 = Phi_2(a, a; 1/2), a = mu/sqrt 2.
    """
    a = norm.ppf(auc)
    q = float(multivariate_normal(mean=[0, 0], cov=[[1, 0.5], [0.5, 1]]).cdf([a, a]))
    var = (auc * (1 - auc) + (n_pos - 1) * (q - auc**2) + (n_neg - 1) * (q - auc**2)) / (
        n_pos * n_neg)
    return math.sqrt(var)


@pytest.mark.parametrize(("n_pos", "n_neg", "auc"),
                         [(2000, 2000, 0.6), (500, 5000, 0.8), (3000, 300, 0.95)])
def test_classifier_scores_hit_target_auc(n_pos: int, n_neg: int, auc: float) -> None:
    ds = classifier_scores(n_pos, n_neg, auc, rng=42)
    score, label = ds["score"], ds["label"]
    assert int(label.sum()) == n_pos and ds.n == n_pos + n_neg
    assert ds.params["mu"] == pytest.approx(math.sqrt(2) * norm.ppf(auc), rel=1e-12)
    empirical = roc_auc_score(label, score)
    assert abs(empirical - auc) < Z * _binormal_auc_se(auc, n_pos, n_neg)
    neg = score[label == 0]
    assert abs(neg.mean()) < Z / math.sqrt(n_neg)


def test_binormal_se_formula_against_simulation() -> None:
    # The SE used above, checked on 400 replicates: the sample variance of the AUCs is
    # within 5 of its own SEs (var * sqrt(2/(R-1)) for near-normal AUCs) of the formula.
    reps, n_pos, n_neg, auc = 400, 60, 80, 0.75
    gen = np.random.default_rng(123)
    aucs = np.empty(reps)
    for r in range(reps):
        ds = classifier_scores(n_pos, n_neg, auc, rng=gen)
        aucs[r] = roc_auc_score(ds["label"], ds["score"])
    var = _binormal_auc_se(auc, n_pos, n_neg) ** 2
    assert abs(aucs.var(ddof=1) - var) < Z * var * math.sqrt(2 / (reps - 1))
    assert abs(aucs.mean() - auc) < Z * math.sqrt(var / reps)


def test_classifier_scores_seeded() -> None:
    a = classifier_scores(10, 20, 0.7, rng=1)
    b = classifier_scores(10, 20, 0.7, rng=np.random.default_rng(1))
    np.testing.assert_array_equal(a["score"], b["score"])
    np.testing.assert_array_equal(a["label"], b["label"])


@settings(deadline=None, max_examples=30, derandomize=True)
@given(n_pos=st.integers(1, 200), n_neg=st.integers(1, 200), seed=st.integers(0, 2**32 - 1),
       auc=st.floats(0.01, 0.99))
def test_two_class_generators_sizes_property(n_pos: int, n_neg: int, seed: int,
                                              auc: float) -> None:
    ds = classifier_scores(n_pos, n_neg, auc, rng=seed)
    assert ds.n == n_pos + n_neg and int(ds["label"].sum()) == n_pos
    for gen in (auc_one(3, n_pos, rng=seed), ur(3, n_pos, rng=seed), ithdigit(n_pos, rng=seed)):
        assert gen.n == 2 * n_pos and int(gen["label"].sum()) == n_pos


# --------------------------------------------------------------------------- generator errors


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: uniform_unit(0), ValueError, "n must be >= 1, got 0"),
    (lambda: uniform_unit(-3), ValueError, "n must be >= 1"),
    (lambda: uniform_unit(2.5), TypeError, "n must be an integer"),
    (lambda: uniform_unit(True), TypeError, "n must be an integer"),
    (lambda: uniform_unit(5, rng="abc"), TypeError, "rng must be None"),
    (lambda: auc_one(0), ValueError, "alpha must be >= 1"),
    (lambda: auc_one(63), ValueError, "alpha must be <= 62"),
    (lambda: auc_one(3, n_per_class=0), ValueError, "n_per_class must be >= 1"),
    (lambda: ur(3, n_per_class=1.0), TypeError, "n_per_class must be an integer"),
    (lambda: ithdigit(10, digit=0), ValueError, "digit must be >= 1"),
    (lambda: ithdigit(10, digit=400), ValueError, "digit must be <= 300"),
    (lambda: ithdigit(10, alpha=0), ValueError, "alpha must be >= 1"),
    (lambda: poisson_ecdf(0, 3.0), ValueError, "n_bins must be >= 1"),
    (lambda: poisson_ecdf(10, 0.0), ValueError, "lam must be a finite number > 0"),
    (lambda: poisson_ecdf(10, float("nan")), ValueError, "lam must be a finite number > 0"),
    (lambda: poisson_ecdf(10, "x"), TypeError, "lam must be a positive number"),
    (lambda: classifier_scores(10, 10, 1.0), ValueError, r"auc must be in \(0, 1\)"),
    (lambda: classifier_scores(10, 10, 0.0), ValueError, r"auc must be in \(0, 1\)"),
    (lambda: classifier_scores(0, 10, 0.7), ValueError, "n_pos must be >= 1"),
    (lambda: classifier_scores(10, 0, 0.7), ValueError, "n_neg must be >= 1"),
])
def test_generators_reject_bad_arguments(call: Callable[[], object], exc: type[Exception],
                                          match: str) -> None:
    with pytest.raises(exc, match=match):
        call()


# --------------------------------------------------------------------------- read_table


def _write_csv(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def test_read_table_csv_round_trip(tmp_path: Path) -> None:
    ds = classifier_scores(40, 60, 0.8, rng=0)
    path = tmp_path / "scores.csv"
    lines = ["score,label,group"]
    lines += [f"{s!r},{lab},g{lab}" for s, lab in zip(ds["score"].tolist(),
                                                    ds["label"].tolist(), strict=True)]
    _write_csv(path, "\n".join(lines) + "\n")
    data = read_table(path, columns=["label", "score"])
    assert list(data) == ["label", "score"]
    np.testing.assert_array_equal(data["score"], ds["score"])
    np.testing.assert_array_equal(data["label"], ds["label"])
    assert data["score"].dtype == np.float64
    everything = read_table(str(path), categorical=["group"])
    assert list(everything) == ["score", "label", "group"]
    assert everything["group"][0] in {"g0", "g1"}


def test_read_table_csv_tolerates_bom_blank_lines_and_tsv(tmp_path: Path) -> None:
    path = tmp_path / "x.csv"
    path.write_text("\ufeffa, b\n1, 2\n\n3,4\n", encoding="utf-8")
    data = read_table(path)
    np.testing.assert_array_equal(data["a"], [1, 3])
    np.testing.assert_array_equal(data["b"], [2, 4])
    tsv = tmp_path / "x.tsv"
    tsv.write_text("a\tb\n1.5\t-2e3\n", encoding="utf-8")
    np.testing.assert_array_equal(read_table(tsv)["b"], [-2000.0])
    odd = tmp_path / "data.txt"
    odd.write_text("a;b\n1;2\n", encoding="utf-8")
    np.testing.assert_array_equal(read_table(odd, file_format="csv", delimiter=";")["a"], [1])


@settings(deadline=None, max_examples=25, derandomize=True)
@given(values=st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1,
                       max_size=50))
def test_read_table_csv_round_trips_any_float(tmp_path_factory: pytest.TempPathFactory,
                                              values: list[float]) -> None:
    path = tmp_path_factory.mktemp("rt") / "v.csv"
    path.write_text("v\n" + "\n".join(repr(v) for v in values) + "\n", encoding="utf-8")
    np.testing.assert_array_equal(read_table(path)["v"], np.array(values))


def test_read_table_parquet_round_trip(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    ds = classifier_scores(30, 30, 0.7, rng=1)
    table = pa.table({"score": ds["score"], "label": ds["label"],
                      "flag": pa.array([True, False] * 30),
                      "job": pa.array(["admin", "nurse", "chef"] * 20)})
    path = tmp_path / "scores.parquet"
    pq.write_table(table, path)
    data = read_table(path, columns=["score", "label", "flag"])
    np.testing.assert_array_equal(data["score"], ds["score"])
    np.testing.assert_array_equal(data["label"], ds["label"])
    assert data["label"].dtype == np.float64
    np.testing.assert_array_equal(data["flag"][:2], [1.0, 0.0])
    text = read_table(path, columns=["job"], categorical=["job"])
    assert text["job"][:3].tolist() == ["admin", "nurse", "chef"]
    with pytest.raises(ValueError, match=r"scores.parquet, column 'job': type string is not "
                                         r"numeric; pass the column in categorical"):
        read_table(path)


def test_read_table_parquet_nulls_and_missing_column(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "n.pq"
    pq.write_table(pa.table({"x": pa.array([1.0, None, 3.0])}), path)
    with pytest.raises(ValueError, match=r"n.pq, column 'x': 1 missing \(null\) value"):
        read_table(path)
    with pytest.raises(ValueError, match=r"n.pq: no column\(s\) \['y'\]; the file has columns "
                                         r"\['x'\]"):
        read_table(path, columns=["y"])


def test_read_table_parquet_without_pyarrow(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a.parquet"
    path.write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(ImportError, match=r"needs pyarrow; install it with "
                                          r"`pip install '\.\[parquet\]'` in the fedustat "
                                          r"checkout"):
        read_table(path)


@pytest.mark.parametrize(("text", "kwargs", "match"), [
    ("a,b\n1,2\n", {"columns": ["a", "c"]},
     r"bad.csv: no column\(s\) \['c'\]; the file has columns \['a', 'b'\]"),
    ("a,b\n1,2\n3,x\n", {}, r"bad.csv, line 3, column 'b': the non-numeric value 'x'"),
    ("a,b\n1,\n", {}, r"bad.csv, line 2, column 'b': a missing \(empty\) value"),
    ("a,b\n1,2,3\n", {}, r"bad.csv, line 2: 3 field\(s\) but the header has 2"),
    ("a,b\n", {}, "bad.csv has a header but no data rows"),
    ("", {}, "bad.csv is empty; expected a header row"),
    ("a,a\n1,2\n", {}, r"header names column\(s\) \['a'\] more than once"),
    ("a,b\n1,2\n", {"columns": ["a", "a"]}, "columns lists a name more than once"),
    ("a,b\n1,2\n", {"categorical": ["b"], "columns": ["a"]},
     r"categorical names column\(s\) \['b'\] that are not being read"),
])
def test_read_table_csv_errors(tmp_path: Path, text: str, kwargs: dict[str, Any],
                               match: str) -> None:
    path = tmp_path / "bad.csv"
    _write_csv(path, text)
    with pytest.raises(ValueError, match=match):
        read_table(path, **kwargs)


def test_read_table_csv_non_numeric_ok_when_not_requested(tmp_path: Path) -> None:
    path = tmp_path / "mixed.csv"
    _write_csv(path, "name,x\nann,1\nbob,2\n")
    np.testing.assert_array_equal(read_table(path, columns=["x"])["x"], [1.0, 2.0])


def test_read_table_bad_path_and_format(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no such file: .*missing\.csv"):
        read_table(tmp_path / "missing.csv")
    with pytest.raises(ValueError, match=r"cannot tell the format of .*data\.xlsx"):
        read_table(tmp_path / "data.xlsx")
    with pytest.raises(ValueError, match="file_format must be 'csv', 'tsv' or 'parquet'"):
        read_table(tmp_path / "a.csv", file_format="json")
    with pytest.raises(TypeError, match=r"columns must be a list of column names.*\['x'\]"):
        read_table(tmp_path / "a.csv", columns="x")
