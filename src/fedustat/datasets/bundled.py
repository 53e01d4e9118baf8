"""The ``Dataset`` container and real data sets that load with no network access.

Every loader here reads only files shipped inside an installed hard dependency
(scikit-learn's ``sklearn/datasets/data`` directory), so a new user sees a meaningful
result at once, offline. ``fetch_*`` loaders are deliberately not used: they download.

Licences: scikit-learn is distributed under the BSD-3-Clause licence and redistributes
these tables inside its package. Upstream, the UCI Machine Learning Repository lists the
Breast Cancer Wisconsin (Diagnostic) and Wine data under CC BY 4.0 (attribution: cite the
creators named in each loader). The diabetes table (Efron et al., 2004) and the Linnerud
table (Tenenhaus, 1998) state no licence of their own beyond scikit-learn's redistribution.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from fedustat._validation import check_positive_int, check_probability

__all__ = [
    "Dataset",
    "available",
    "load",
    "load_breast_cancer_scores",
    "load_diabetes_pairs",
    "load_linnerud_exercise",
    "load_wine_cultivars",
]


@dataclass(frozen=True, eq=False, repr=False)
class Dataset:
    """A named table of equal-length one-dimensional columns.

    Parameters
    ----------
    name : str
        Short identifier (the registry name for bundled data).
    columns : mapping of str to array-like
        Column name to values; every column must be one-dimensional and all must have
        the same length. The arrays are copied and made read-only, so a ``Dataset`` is
        immutable in practice, not only in its attributes.
    description : str
        What a row is and what each column means.
    source : str
        Where the data come from (paper section for synthetic data, upstream data set
        and licence for real data).
    task : str
        The statistic the data set is meant for: ``"auc"``, ``"kendall"``,
        ``"categorical"`` (duplicate-pair ratio), ``"gini"`` or ``"ecdf"``.
    params : mapping, optional
        Generator or loader parameters a protocol may need (e.g. the domain size ``d``
        of an integer score, the target AUC of simulated scores).

    Examples
    --------
    >>> ds = load_breast_cancer_scores()
    >>> ds.n, ds.column_names
    (285, ('score', 'label'))
    >>> ds["label"].sum()
    np.int64(106)
    """

    name: str
    columns: Mapping[str, np.ndarray]
    description: str
    source: str
    task: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.columns, Mapping) or len(self.columns) == 0:
            raise ValueError("columns must be a non-empty mapping of column name to array")
        frozen: dict[str, np.ndarray] = {}
        for key, values in self.columns.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"column names must be non-empty strings, got {key!r}")
            arr = np.array(values)  # a private copy: later edits to the input cannot leak in
            if arr.ndim != 1:
                raise ValueError(f"column {key!r} must be one-dimensional, got shape {arr.shape}")
            arr.setflags(write=False)
            frozen[key] = arr
        lengths = {key: arr.shape[0] for key, arr in frozen.items()}
        if len(set(lengths.values())) > 1:
            shown = ", ".join(f"{k}={v}" for k, v in lengths.items())
            raise ValueError(f"all columns of data set {self.name!r} must have the same "
                             f"length; got {shown}")
        # object.__setattr__ is the documented way to normalise fields of a frozen dataclass.
        object.__setattr__(self, "columns", MappingProxyType(frozen))
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def n(self) -> int:
        """Number of rows (parties, in the federated reading of the data)."""
        return int(next(iter(self.columns.values())).shape[0])

    @property
    def column_names(self) -> tuple[str, ...]:
        """Column names in their stored order."""
        return tuple(self.columns)

    def __len__(self) -> int:
        return self.n

    def __contains__(self, key: object) -> bool:
        return key in self.columns

    def __iter__(self) -> Iterator[str]:
        return iter(self.columns)

    def __getitem__(self, key: str) -> np.ndarray:
        try:
            return self.columns[key]
        except KeyError:
            raise KeyError(f"data set {self.name!r} has no column {key!r}; "
                           f"its columns are {list(self.columns)}") from None

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}:{v.dtype}" for k, v in self.columns.items())
        return f"Dataset(name={self.name!r}, n={self.n}, task={self.task!r}, columns=[{cols}])"

    def to_frame(self) -> Any:
        """The columns as a ``pandas.DataFrame`` (pandas is an optional dependency).

        Raises
        ------
        ImportError
            If pandas is not installed.
        """
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("Dataset.to_frame() needs pandas, which fedustat does not "
                              "require; install it with `pip install pandas`, or use the "
                              "NumPy columns directly (dataset.columns)") from exc
        return pd.DataFrame({k: np.asarray(v) for k, v in self.columns.items()})


_SKLEARN_LICENCE = "redistributed inside scikit-learn (BSD-3-Clause)"


def load_breast_cancer_scores(test_size: float = 0.5, seed: int = 0) -> Dataset:
    """Held-out logistic-regression scores on the Wisconsin breast cancer data (task ``auc``).

    A realistic classifier score for AUC and ROC protocols, in the way the papers use
    real data (001 Sec. 6 and 003 Sec. 6.1 score a test set with a logistic regression
    trained on the rest): the 569 patients of scikit-learn's bundled copy of the UCI
    Breast Cancer Wisconsin (Diagnostic) data are split, stratified by class, into a
    training and a test part; a logistic regression on standardised features (all 30)
    is fitted on the training part; the data set holds the test part.

    Parameters
    ----------
    test_size : float, default 0.5
        Fraction of the 569 rows held out, in (0, 1); the test set has
        ``ceil(569 * test_size)`` rows (285 at the default).
    seed : int, default 0
        Seed of the train/test split (the lbfgs fit itself is deterministic), so the same
        seed gives the same scores.

    Returns
    -------
    Dataset
        Columns ``score`` (float64 in [0, 1], the predicted probability of malignancy)
        and ``label`` (int8; 1 = malignant, 0 = benign). scikit-learn codes malignant
        as 0; the label is flipped so that the positive class is the condition the score
        is meant to detect (212 malignant, 357 benign in the full data; 106 malignant of
        285 in the default test set).

    Notes
    -----
    Source: W. N. Street, W. H. Wolberg, O. L. Mangasarian (1993), UCI Machine Learning
    Repository "Breast Cancer Wisconsin (Diagnostic)" (CC BY 4.0 there), as shipped by
    ``sklearn.datasets.load_breast_cancer``.
    """
    from sklearn.datasets import load_breast_cancer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    test_size = check_probability(test_size, "test_size", open_left=True, open_right=True)
    seed = check_positive_int(seed, "seed", minimum=0)
    bunch = load_breast_cancer()
    n_total = bunch.target.shape[0]
    n_test = math.ceil(test_size * n_total)
    # A stratified split needs at least one row of each of the 2 classes on each side.
    if n_test < 2 or n_total - n_test < 2:
        raise ValueError(f"test_size={test_size} leaves {n_test} test and "
                         f"{n_total - n_test} training rows of {n_total}; both need at least 2 "
                         "(one per class), choose test_size between 0.004 and 0.996")
    label = (bunch.target == 0).astype(np.int8)  # sklearn: 0 = malignant
    X_train, X_test, y_train, y_test = train_test_split(
        bunch.data, label, test_size=test_size, random_state=seed, stratify=label)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000))
    model.fit(X_train, y_train)
    score = model.predict_proba(X_test)[:, 1]
    return Dataset(
        name="breast_cancer_scores",
        columns={"score": score.astype(np.float64), "label": y_test.astype(np.int8)},
        description=("Test-set predicted probability of malignancy from a logistic regression "
                     "(standardised 30 features) and the true diagnosis (1 = malignant)."),
        source=("UCI Breast Cancer Wisconsin (Diagnostic), Street, Wolberg & Mangasarian "
                f"(1993), CC BY 4.0 at UCI; {_SKLEARN_LICENCE}"),
        task="auc",
        params={"test_size": test_size, "seed": seed, "n_train": int(y_train.shape[0])},
    )


_DIABETES_NAMES = {
    "age": "age in years",
    "sex": "sex, coded 1 or 2 as in the source (which code is which is not documented)",
    "bmi": "body mass index, kg/m^2",
    "bp": "average blood pressure, mm Hg",
    "tc": "total serum cholesterol (s1)",
    "ldl": "low-density lipoproteins (s2)",
    "hdl": "high-density lipoproteins (s3)",
    "tch": "total cholesterol / HDL (s4)",
    "ltg": "log of serum triglycerides (s5)",
    "glu": "blood sugar level (s6)",
}


def load_diabetes_pairs() -> Dataset:
    """Diabetes patients' baseline measurements and disease progression (task ``kendall``).

    The 442 patients of Efron, Hastie, Johnstone & Tibshirani (2004), "Least Angle
    Regression", Annals of Statistics 32(2), in original units
    (``sklearn.datasets.load_diabetes(scaled=False)``, not the centred/scaled version).
    The natural Kendall pair is (``bmi``, ``progression``): heavier patients progress
    faster (tau-b 0.391). ``age`` (whole years) and ``bp`` carry many ties, which
    exercises the tau-b tie correction; every column also suits the Gini mean difference.

    Returns
    -------
    Dataset
        442 rows, float64 columns ``age``, ``sex``, ``bmi``, ``bp``, ``tc``, ``ldl``,
        ``hdl``, ``tch``, ``ltg``, ``glu`` (the ten baseline variables s1..s6 renamed by
        their meaning), ``progression`` (a quantitative measure of disease progression
        one year after baseline, 25 to 346) and ``progression_class`` (0: progression
        below 100, 1: 100 to 199, 2: 200 and above — fixed, public cut points, so the
        three ordered classes suit the volume under the ROC surface).

    Notes
    -----
    Source: https://www4.stat.ncsu.edu/~boos/var.select/diabetes.html as shipped by
    scikit-learn (BSD-3-Clause package); no separate upstream licence is stated.
    """
    from sklearn.datasets import load_diabetes

    bunch = load_diabetes(scaled=False)
    columns = {name: bunch.data[:, j].astype(np.float64)
               for j, name in enumerate(_DIABETES_NAMES)}
    columns["progression"] = bunch.target.astype(np.float64)
    # Cut points are fixed numbers, not data quantiles, so the classes leak nothing.
    columns["progression_class"] = np.digitize(columns["progression"], [100.0, 200.0]
                                               ).astype(np.float64)
    described = "; ".join(f"{k}: {v}" for k, v in _DIABETES_NAMES.items())
    return Dataset(
        name="diabetes_pairs",
        columns=columns,
        description=("One row per diabetes patient. " + described
                     + "; progression: disease progression one year after baseline"
                     + "; progression_class: 0 (< 100), 1 (100-199), 2 (>= 200)."),
        source=("Efron, Hastie, Johnstone & Tibshirani (2004), Least Angle Regression, "
                f"Annals of Statistics; {_SKLEARN_LICENCE}"),
        task="kendall",
    )


def load_linnerud_exercise() -> Dataset:
    """Exercise counts and body measurements of 20 men (task ``kendall``, discrete data).

    A small, all-integer table with many ties, for Kendall's tau-b on discrete data (a
    stand-in, in kind, for the integer rating pairs of 000 Sec. 6; those TripAdvisor
    ratings are not available offline). Classic pairs: ``waist`` with ``situps``
    (negative association) and ``weight`` with ``waist`` (positive).

    Returns
    -------
    Dataset
        20 rows, float64 columns (all whole numbers) ``chins``, ``situps``, ``jumps``
        (exercise repetitions) and ``weight`` (lb), ``waist`` (in), ``pulse`` (beats/min).

    Notes
    -----
    Source: Tenenhaus, M. (1998), La régression PLS: théorie et pratique, Technip; the
    Linnerud data as shipped by ``sklearn.datasets.load_linnerud`` (BSD-3-Clause
    package); no separate upstream licence is stated.
    """
    from sklearn.datasets import load_linnerud

    bunch = load_linnerud()
    columns: dict[str, np.ndarray] = {}
    for j, name in enumerate(bunch.feature_names):
        columns[name.lower()] = bunch.data[:, j].astype(np.float64)
    for j, name in enumerate(bunch.target_names):
        columns[name.lower()] = bunch.target[:, j].astype(np.float64)
    return Dataset(
        name="linnerud_exercise",
        columns=columns,
        description=("One row per middle-aged man in a fitness club: chins, situps, jumps "
                     "(repetitions) and weight (lb), waist (in), pulse (beats per minute)."),
        source=f"Tenenhaus (1998), Linnerud data; {_SKLEARN_LICENCE}",
        task="kendall",
    )


def load_wine_cultivars() -> Dataset:
    """Wine samples with their cultivar, a categorical column (task ``categorical``).

    For the duplicate-pair ratio (Rényi-2 entropy) and other statistics of a category
    code: ``cultivar`` has three levels of unequal size (59, 71, 48), so its
    duplicate-pair ratio is (59·58 + 71·70 + 48·47) / (178·177) ≈ 0.3380.
    ``magnesium`` (whole mg/l, 53 distinct values) is a many-level discrete column, and
    ``alcohol``, ``flavanoids`` and ``proline`` are continuous measurements.

    Returns
    -------
    Dataset
        178 rows: ``cultivar`` (int64 codes 0, 1, 2) and float64 ``alcohol`` (% vol),
        ``magnesium`` (mg/l), ``flavanoids`` and ``proline``.

    Notes
    -----
    Source: Forina, M. et al., PARVUS; UCI Machine Learning Repository "Wine" (CC BY 4.0
    there), as shipped by ``sklearn.datasets.load_wine`` (BSD-3-Clause package).
    """
    from sklearn.datasets import load_wine

    bunch = load_wine()
    index = {name: j for j, name in enumerate(bunch.feature_names)}
    columns: dict[str, np.ndarray] = {"cultivar": bunch.target.astype(np.int64)}
    for name in ("alcohol", "magnesium", "flavanoids", "proline"):
        columns[name] = bunch.data[:, index[name]].astype(np.float64)
    return Dataset(
        name="wine_cultivars",
        columns=columns,
        description=("One row per wine from three cultivars of one Italian region: cultivar "
                     "code and four chemical measurements."),
        source=f"Forina et al., UCI Wine data, CC BY 4.0 at UCI; {_SKLEARN_LICENCE}",
        task="categorical",
    )


def load_digits_images() -> Dataset:
    """scikit-learn's handwritten digits, one row per 8x8 image (1,797 rows).

    Columns: ``digit`` (0-9, the public categories of the duplicate-pair ratio), ``ink``
    (sum of the 64 pixel intensities; each pixel is 0..16, so ``[0, 1024]`` is a public
    bound), ``ink_top`` and ``ink_bottom`` (the sums over the upper and lower four rows,
    each in ``[0, 512]``).

    Source: UCI "Optical Recognition of Handwritten Digits" (Alpaydin & Kaynak, 1998;
    CC BY 4.0 at UCI), the test part shipped as ``sklearn.datasets.load_digits``.
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    pixels = bunch.data.astype(np.float64)
    return Dataset(
        name="digits_images",
        columns={"digit": bunch.target.astype(np.float64), "ink": pixels.sum(axis=1),
                 "ink_top": pixels[:, :32].sum(axis=1),
                 "ink_bottom": pixels[:, 32:].sum(axis=1)},
        description=("One row per handwritten digit image (8x8 pixels, intensities 0..16): "
                     "the digit and its total ink."),
        source=("UCI Optical Recognition of Handwritten Digits, Alpaydin & Kaynak (1998), "
                "CC BY 4.0 at UCI; redistributed inside scikit-learn (BSD-3-Clause)"),
        task="categorical")


def load_digits_scores(seed: int = 0) -> Dataset:
    """Held-out classifier scores on the digits: is the digit 5-9 (label 1) or 0-4?

    A logistic regression on the standardised 64 pixels is trained on a stratified half
    of the 1,797 images (split seed ``seed``); the data set holds the other half (899
    images: score = predicted probability of 5-9, label). As 000 Sec. 6 and 003 Sec. 6.1
    do with their (unavailable offline) data sets, the scores come from a model fitted
    on separate data. The classes are balanced (448 / 451), which gives the local
    protocols, whose error depends on the smaller class, their best case at this size.
    """
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    seed = check_positive_int(seed, "seed", minimum=0)
    bunch = load_digits()
    label = (bunch.target >= 5).astype(np.int8)
    x_train, x_test, y_train, y_test = train_test_split(
        bunch.data, label, test_size=0.5, random_state=seed, stratify=label)
    model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    model.fit(x_train, y_train)
    return Dataset(
        name="digits_scores",
        columns={"score": model.predict_proba(x_test)[:, 1].astype(np.float64),
                 "label": y_test.astype(np.float64)},
        description=("Held-out predicted probability that a handwritten digit is 5-9 "
                     "(logistic regression on the other half of the images) and the truth."),
        source=("UCI Optical Recognition of Handwritten Digits, Alpaydin & Kaynak (1998), "
                "CC BY 4.0 at UCI; redistributed inside scikit-learn (BSD-3-Clause); model "
                f"trained inside the loader (split seed {seed})"),
        task="auc", params={"seed": seed, "n_train": int(y_train.size)})


_REGISTRY: dict[str, Callable[..., Dataset]] = {
    "breast_cancer_scores": load_breast_cancer_scores,
    "diabetes_pairs": load_diabetes_pairs,
    "digits_images": load_digits_images,
    "digits_scores": load_digits_scores,
    "linnerud_exercise": load_linnerud_exercise,
    "wine_cultivars": load_wine_cultivars,
}


def available() -> list[str]:
    """Names of the bundled real data sets, for :func:`load`."""
    return sorted(_REGISTRY)


def load(name: str, **kwargs: Any) -> Dataset:
    """Load a bundled real data set by name.

    Parameters
    ----------
    name : str
        One of :func:`available`.
    **kwargs
        Passed to the loader (e.g. ``test_size`` and ``seed`` for
        ``"breast_cancer_scores"``).

    Raises
    ------
    ValueError
        If ``name`` is not a bundled data set; the message lists the available ones.
    """
    try:
        loader = _REGISTRY[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown data set {name!r}; available data sets: "
                         f"{', '.join(available())}") from None
    return loader(**kwargs)
