"""Synthetic data sets from the papers' experiments, and simulated classifier scores.

Papers are named by their file in ``/work/shared/papers``: "001" is the arXiv version
of Bell, Bellet, Gascón & Kulkarni (with the appendix), "002" is Sinh & Ramon, "003" the
DP-ECDF paper, "004" Sun et al. (FedAUC).

Label convention: 001 writes classes as 1 / -1; here ``label`` is 1 for the positive
class and 0 for the negative class (what ``fedustat`` and scikit-learn expect).

Every generator takes ``rng`` (a seed or a ``numpy.random.Generator``); the same seed
gives the same data set. The generators whose multiset of rows is fixed by the paper
(``auc_one``, ``ithdigit``) use ``rng`` only to shuffle the row order, so that a
simulation which assigns rows to parties or batches by position sees no class blocks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import (
    RandomLike,
    as_rng,
    check_positive_float,
    check_positive_int,
    check_probability,
)
from fedustat.datasets.bundled import Dataset

_special = lazy_module("scipy.special")

__all__ = [
    "auc_one",
    "classifier_scores",
    "ithdigit",
    "poisson_ecdf",
    "uniform_unit",
    "ur",
]

_PAPER_N_PER_CLASS = 10**6  # 001 App. D.1: "10^6 inputs in each class"
_MAX_ALPHA = 62  # integer scores up to 2^62 - 1 still fit in int64


def _check_alpha(alpha: Any) -> int:
    alpha = check_positive_int(alpha, "alpha", minimum=1)
    if alpha > _MAX_ALPHA:
        raise ValueError(f"alpha must be <= {_MAX_ALPHA} so that scores in [0, 2^alpha - 1] "
                         f"fit in 64-bit integers, got {alpha}")
    return alpha


def _two_class(score_pos: np.ndarray, score_neg: np.ndarray, gen: np.random.Generator,
               shuffle: bool) -> dict[str, np.ndarray]:
    """Stack the two classes into ``score``/``label`` columns, optionally in random order."""
    score = np.concatenate([score_pos, score_neg])
    label = np.concatenate([np.ones(score_pos.shape[0], dtype=np.int8),
                            np.zeros(score_neg.shape[0], dtype=np.int8)])
    if shuffle:
        order = gen.permutation(score.shape[0])
        score, label = score[order], label[order]
    return {"score": score, "label": label}


def auc_one(alpha: int, n_per_class: int = _PAPER_N_PER_CLASS, *, rng: RandomLike = None,
            shuffle: bool = True) -> Dataset:
    """The ``auc_one`` data set of 001 App. D.1: perfectly separated integer scores.

    On the domain [0..d-1] with d = 2^alpha (001 Sec. 4 assumes d = 2^alpha), every
    positive has score d - 1 and every negative score 0, so the AUC is exactly 1. This is
    the worst case for the hierarchical-histogram AUC protocol (001 Sec. 4): the recursion
    error is incurred at every level of the tree.

    Parameters
    ----------
    alpha : int
        Tree depth; the score domain is [0, 2^alpha - 1]. 1 <= alpha <= 62.
    n_per_class : int, default 10**6
        Number of positives and of negatives (the paper uses 10^6 each).
    rng : int, Generator or None
        Used only to shuffle the row order.
    shuffle : bool, default True
        Whether to shuffle the rows (if False, positives come first).

    Returns
    -------
    Dataset
        Columns ``score`` (int64) and ``label`` (int8, 1 = positive); ``params`` holds
        ``alpha``, ``d`` and the exact ``auc`` (1.0).
    """
    alpha = _check_alpha(alpha)
    n_per_class = check_positive_int(n_per_class, "n_per_class")
    gen = as_rng(rng)
    d = 2**alpha
    columns = _two_class(np.full(n_per_class, d - 1, dtype=np.int64),
                         np.zeros(n_per_class, dtype=np.int64), gen, shuffle)
    return Dataset(
        name="auc_one",
        columns=columns,
        description=f"Positives at score d-1 = {d - 1}, negatives at 0, {n_per_class} each.",
        source="001 (Bell et al., arXiv version), App. D.1, data set auc_one",
        task="auc",
        params={"alpha": alpha, "d": d, "auc": 1.0},
    )


def ur(alpha: int, n_per_class: int = _PAPER_N_PER_CLASS, *, rng: RandomLike = None) -> Dataset:
    """The ``ur`` data set of 001 App. D.1: uniform integer scores, independent of class.

    Each score is drawn independently and uniformly from [0..d-1], d = 2^alpha,
    regardless of the class, so the population AUC (ties counted 1/2) is 1/2.

    Parameters
    ----------
    alpha : int
        Tree depth; the score domain is [0, 2^alpha - 1]. 1 <= alpha <= 62.
    n_per_class : int, default 10**6
        Number of positives and of negatives (the paper uses 10^6 each).
    rng : int, Generator or None
        Seed or generator for the scores and the row order.

    Returns
    -------
    Dataset
        Columns ``score`` (int64) and ``label`` (int8, 1 = positive); ``params`` holds
        ``alpha``, ``d`` and the population ``auc`` (0.5).
    """
    alpha = _check_alpha(alpha)
    n_per_class = check_positive_int(n_per_class, "n_per_class")
    gen = as_rng(rng)
    d = 2**alpha
    scores = gen.integers(0, d, size=2 * n_per_class, dtype=np.int64)  # [0, d), i.e. [0..d-1]
    # Scores are i.i.d. and independent of the class, so a random class split suffices.
    label = np.zeros(2 * n_per_class, dtype=np.int8)
    label[gen.permutation(2 * n_per_class)[:n_per_class]] = 1
    return Dataset(
        name="ur",
        columns={"score": scores, "label": label},
        description=f"Scores uniform on [0, {d - 1}] regardless of class, {n_per_class} each.",
        source="001 (Bell et al., arXiv version), App. D.1, data set ur",
        task="auc",
        params={"alpha": alpha, "d": d, "auc": 0.5},
    )


def ithdigit(n_per_class: int = _PAPER_N_PER_CLASS, *, digit: int = 4, alpha: int | None = None,
             rng: RandomLike = None, shuffle: bool = True) -> Dataset:
    """The ``ithdigit`` data set of 001 App. D.1: classes differ only in one decimal digit.

    Every positive has score 10^-digit (10^-4 in the paper) and every negative score 0,
    on the unit interval. The AUC is exactly 1, but only a quantization finer than
    10^digit bins separates the classes.

    Parameters
    ----------
    n_per_class : int, default 10**6
        Number of positives and of negatives (the paper uses 10^6 each).
    digit : int, default 4
        The positives' score is 10^-digit; 1 <= digit <= 300.
    alpha : int or None, default None
        If given, scores are discretized into [0..d-1], d = 2^alpha, as
        ``min(floor(score * d), d - 1)`` — the discretization ``fp`` of 001 Sec. 6. With
        this floor rule the paper's observation holds: for digit 4 all inputs fall into
        bin 0 when d <= 2^13 (10^-4 · 2^13 < 1) and positives reach bin 1 from d = 2^14.
    rng : int, Generator or None
        Used only to shuffle the row order.
    shuffle : bool, default True
        Whether to shuffle the rows (if False, positives come first).

    Returns
    -------
    Dataset
        Columns ``score`` (float64 in [0, 1], or int64 in [0, d-1] when ``alpha`` is
        given) and ``label`` (int8, 1 = positive); ``params`` holds ``digit``,
        ``alpha``, ``d`` (None without ``alpha``) and the exact ``auc`` of the returned
        scores (1.0, or 0.5 when the discretization merges the classes).
    """
    n_per_class = check_positive_int(n_per_class, "n_per_class")
    digit = check_positive_int(digit, "digit")
    if digit > 300:
        raise ValueError(f"digit must be <= 300 so that 10^-digit is a normal float, got {digit}")
    gen = as_rng(rng)
    pos_value = 10.0**-digit
    d: int | None = None
    if alpha is None:
        pos = np.full(n_per_class, pos_value, dtype=np.float64)
        neg = np.zeros(n_per_class, dtype=np.float64)
        auc = 1.0
    else:
        alpha = _check_alpha(alpha)
        d = 2**alpha
        pos_bin = min(math.floor(pos_value * d), d - 1)  # 001 Sec. 6, fp(s, d)
        pos = np.full(n_per_class, pos_bin, dtype=np.int64)
        neg = np.zeros(n_per_class, dtype=np.int64)
        auc = 1.0 if pos_bin > 0 else 0.5
    return Dataset(
        name="ithdigit",
        columns=_two_class(pos, neg, gen, shuffle),
        description=(f"Positives at score 10^-{digit}, negatives at 0, {n_per_class} each"
                     + ("." if d is None else f", discretized into [0, {d - 1}].")),
        source="001 (Bell et al., arXiv version), App. D.1, data set ithdigit",
        task="auc",
        params={"digit": digit, "alpha": alpha, "d": d, "auc": auc},
    )


def uniform_unit(n: int, rng: RandomLike = None) -> Dataset:
    """Values drawn uniformly from [0, 1], the synthetic data of 002 Sec. 6.1.

    002 uses x_i ~ Uni([0, 1]) for i in [n] to measure how the Gini mean difference
    protocols scale with the number of parties (002 Sec. 6.2.1, Figs. 1-2). The
    population Gini mean difference E|X - Y| of this distribution is 1/3.

    Parameters
    ----------
    n : int
        Number of values (parties), >= 1.
    rng : int, Generator or None
        Seed or generator.

    Returns
    -------
    Dataset
        Column ``x`` (float64 in [0, 1)); ``params`` holds ``gini`` = 1/3.
    """
    n = check_positive_int(n, "n")
    gen = as_rng(rng)
    return Dataset(
        name="uniform_unit",
        columns={"x": gen.random(n)},
        description=f"{n} values uniform on [0, 1].",
        source="002 (Sinh & Ramon), Sec. 6.1, synthetic data set",
        task="gini",
        params={"gini": 1.0 / 3.0},
    )


def poisson_ecdf(n_bins: int, lam: float = 3.0, rng: RandomLike = None, *,
                 shuffle: bool = True) -> Dataset:
    """The X_pois(lambda) data set of 003 Sec. 6.2, for ECDF experiments.

    For every value i in [N] = {1, ..., N}, the number of instances with phi(x) = i
    follows Pois(lambda), independently across i. The ECDF therefore rises steadily over
    [1, N] but with local variation in its slope. The number of rows is random, with
    mean N·lambda.

    The extracted text of 003 garbles N ("N = 2%", an exponent of 2 lost); the figures
    use lambda = 3 (Fig. 2) and vary lambda at epsilon = 1 (Fig. 3). Pass the N you need.

    Parameters
    ----------
    n_bins : int
        N, the number of distinct values (the ECDF's evaluation grid); >= 1.
    lam : float, default 3.0
        Poisson mean of each value's count; finite and > 0.
    rng : int, Generator or None
        Seed or generator for the counts and the row order.
    shuffle : bool, default True
        Whether to shuffle the rows (if False, values come sorted).

    Returns
    -------
    Dataset
        Column ``x`` (int64 in [1, N]); ``params`` holds ``n_bins`` and ``lam``.

    Raises
    ------
    ValueError
        If every drawn count is zero (probability exp(-N·lambda)): there is no data.
    """
    n_bins = check_positive_int(n_bins, "n_bins")
    lam = check_positive_float(lam, "lam")
    gen = as_rng(rng)
    counts = gen.poisson(lam, size=n_bins)  # 003 Sec. 6.2: count of value i ~ Pois(lambda)
    x = np.repeat(np.arange(1, n_bins + 1, dtype=np.int64), counts)
    if x.size == 0:
        raise ValueError(f"all {n_bins} Poisson counts with lam={lam} were zero, so the data set "
                         "is empty; increase n_bins or lam, or use another seed")
    if shuffle:
        x = gen.permutation(x)
    return Dataset(
        name="poisson_ecdf",
        columns={"x": x},
        description=f"Values 1..{n_bins}, each repeated Pois({lam}) times ({x.size} rows).",
        source="003 (DP empirical CDFs), Sec. 6.2, synthetic data set X_pois(lambda)",
        task="ecdf",
        params={"n_bins": n_bins, "lam": lam},
    )


def classifier_scores(n_pos: int, n_neg: int, auc: float, rng: RandomLike = None, *,
                      shuffle: bool = True) -> Dataset:
    """Binormal classifier scores with a chosen population AUC.

    Negatives' scores are N(0, 1) and positives' N(mu, 1) with
    mu = sqrt(2) · Phi^{-1}(auc): the difference of a positive and a negative score is
    N(mu, 2), so P(positive > negative) = Phi(mu / sqrt(2)) = auc (the binormal ROC model).
    Unequal class counts let experiments follow 004's imbalanced data sets.

    Parameters
    ----------
    n_pos, n_neg : int
        Number of positives and negatives, each >= 1.
    auc : float
        Target population AUC, in (0, 1).
    rng : int, Generator or None
        Seed or generator.
    shuffle : bool, default True
        Whether to shuffle the rows (if False, positives come first).

    Returns
    -------
    Dataset
        Columns ``score`` (float64) and ``label`` (int8, 1 = positive); ``params`` holds
        ``auc`` (the population value) and ``mu``.
    """
    n_pos = check_positive_int(n_pos, "n_pos")
    n_neg = check_positive_int(n_neg, "n_neg")
    auc = check_probability(auc, "auc", open_left=True, open_right=True)
    gen = as_rng(rng)
    mu = math.sqrt(2.0) * float(_special.ndtri(auc))
    pos = gen.normal(mu, 1.0, size=n_pos)
    neg = gen.normal(0.0, 1.0, size=n_neg)
    return Dataset(
        name="classifier_scores",
        columns=_two_class(pos, neg, gen, shuffle),
        description=(f"Binormal scores: {n_neg} negatives N(0, 1), {n_pos} positives "
                     f"N({mu:.4g}, 1); population AUC {auc}."),
        source="binormal ROC model; mu = sqrt(2) * Phi^-1(AUC)",
        task="auc",
        params={"auc": auc, "mu": mu},
    )
