"""Data for fedustat: bundled real data sets, the papers' synthetic generators, file reading.

- :class:`Dataset`: a named, immutable table of equal-length columns with its source,
  licence and intended statistic (``task``).
- Bundled real data (no network): :func:`load_breast_cancer_scores` (AUC),
  :func:`load_diabetes_pairs` and :func:`load_linnerud_exercise` (Kendall's tau),
  :func:`load_wine_cultivars` (categorical), :func:`load_digits_images` (categorical and
  bounded counts) and :func:`load_digits_scores` (AUC, classifier scores);
  :func:`available` and :func:`load` by name.
- Synthetic generators: :func:`auc_one`, :func:`ur`, :func:`ithdigit` (001 App. D.1),
  :func:`uniform_unit` (002 Sec. 6.1), :func:`poisson_ecdf` (003 Sec. 6.2),
  :func:`classifier_scores` (binormal scores with a target AUC).
- :func:`read_table`: columns of a CSV/TSV or Parquet file as NumPy arrays.
"""

from fedustat.datasets.bundled import (
    Dataset,
    available,
    load,
    load_breast_cancer_scores,
    load_diabetes_pairs,
    load_digits_images,
    load_digits_scores,
    load_linnerud_exercise,
    load_wine_cultivars,
)
from fedustat.datasets.files import read_table
from fedustat.datasets.synthetic import (
    auc_one,
    classifier_scores,
    ithdigit,
    poisson_ecdf,
    uniform_unit,
    ur,
)

__all__ = [
    "Dataset",
    "auc_one",
    "available",
    "classifier_scores",
    "ithdigit",
    "load",
    "load_breast_cancer_scores",
    "load_diabetes_pairs",
    "load_digits_images",
    "load_digits_scores",
    "load_linnerud_exercise",
    "load_wine_cultivars",
    "poisson_ecdf",
    "read_table",
    "uniform_unit",
    "ur",
]
