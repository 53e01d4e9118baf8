"""Complete and incomplete U-statistics and their variances.

Sources (papers in ``shared/papers``):

* "000": Bell, Bellet, Gascón, Kulkarni, *Private Protocols for U-Statistics in the Local
  Model and Beyond* (AISTATS 2020). Sec. 2.1: the U-statistic (eq. 2), its variance
  (eq. 3) and the examples (eq. 4-7); Sec. 5, Thm 5: the P-permutation pair design.
* "001": the arXiv version of 000, App. C.1 (proof of Thm 5 through Blom's formula, eq. 25).
* "002": Sinh & Ramon, *Accurate, private, secure, federated U-statistics with higher
  degree*, App. A.5 (examples) and App. D.1 (incomplete U-statistics).

A U-statistic of degree ``k`` with a symmetric kernel ``f`` over records ``x_1..x_n`` is
``U_n = C(n, k)^-1 * sum_{i_1 < ... < i_k} f(x_{i_1}, ..., x_{i_k})`` (000 eq. 2 for k = 2).
"""


from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_rng,
    check_positive_int,
)
from fedustat.stats.designs import Design
from fedustat.stats.exact import n_pairs
from fedustat.stats.kernels import Kernel
from fedustat.stats.tuples import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_TUPLES,
    check_tuple_limit,
    combination_blocks,
    pair_blocks,
)

__all__ = [
    "DEFAULT_MAX_PAIRS",
    "hoeffding_components",
    "incomplete_ustat_variance",
    "incomplete_ustatistic",
    "permutation_design_variance",
    "ustat_variance",
    "ustatistic",
]

#: Kernel-evaluation budget of :func:`hoeffding_components`.
DEFAULT_MAX_PAIRS = 4 * 10**6


# --------------------------------------------------------------------------------------
# Generic U-statistics
# --------------------------------------------------------------------------------------


def ustatistic(
    kernel: Kernel,
    data: Any,
    *,
    use_fast_path: bool = True,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_tuples: int = DEFAULT_MAX_TUPLES,
) -> float:
    """Complete U-statistic ``C(n, k)^-1 sum_{i_1<...<i_k} f(x_{i_1}, ..., x_{i_k})``.

    000 eq. 2 for degree 2; the same average over all k-subsets for degree k.

    Parameters
    ----------
    kernel : Kernel
        The symmetric kernel ``f`` of degree ``k``.
    data : array_like of shape (n, len(kernel.columns))
        One row per record (see ``kernel.pack``); a 1-D array is accepted for
        one-column kernels.
    use_fast_path : bool, default True
        Use the kernel's exact O(n log n) path when it has one. With False, every
        k-subset is evaluated (blocked, so memory stays bounded).
    block_size : int
        Kernel evaluations per block on the brute-force path.
    max_tuples : int
        Refuse the brute-force path when ``C(n, k)`` exceeds this number.

    Returns
    -------
    float
        The U-statistic (not the reported statistic: see ``kernel.statistic``).
    """
    arr = kernel.check_data(data)
    block_size = check_positive_int(block_size, "block_size")
    max_tuples = check_positive_int(max_tuples, "max_tuples")
    if use_fast_path and kernel.exact is not None:
        return float(kernel.exact(arr))
    n, k = arr.shape[0], kernel.degree
    total = check_tuple_limit(n, k, max_tuples)
    partial = [float(np.sum(kernel._evaluate_unchecked(arr, block)))
               for block in combination_blocks(n, k, block_size)]
    return math.fsum(partial) / total


def incomplete_ustatistic(
    kernel: Kernel,
    data: Any,
    tuples: Design | Any,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> float:
    """Incomplete U-statistic: the mean of the kernel over the given index tuples.

    ``U_E = |E|^-1 sum_{(i_1..i_k) in E} f(x_{i_1}, ..., x_{i_k})`` (002 App. D.1.2,
    step 2; 000 Thm 5 without noise). For a design whose distribution is invariant under
    relabelling of the records (all constructors in :mod:`fedustat.stats.designs`),
    ``E[U_E | data]`` is the complete U-statistic.

    Parameters
    ----------
    kernel : Kernel
    data : array_like of shape (n, len(kernel.columns))
    tuples : Design or array_like of shape (m, kernel.degree)
        Index tuples (rows of distinct indices in ``[0, n)``); repeated rows count as
        many times as they appear.
    block_size : int
        Kernel evaluations per block.
    """
    arr = kernel.check_data(data)
    block_size = check_positive_int(block_size, "block_size")
    idx = tuples.tuples if isinstance(tuples, Design) else tuples
    idx = kernel.check_tuples(idx, arr.shape[0])
    if idx.shape[0] == 0:
        raise ValueError("tuples is empty; an incomplete U-statistic needs at least one tuple")
    partial = [float(np.sum(kernel._evaluate_unchecked(arr, idx[s:s + block_size])))
               for s in range(0, idx.shape[0], block_size)]
    return math.fsum(partial) / idx.shape[0]


# --------------------------------------------------------------------------------------
# Variances (Hoeffding decomposition, incomplete U-statistics)
# --------------------------------------------------------------------------------------


def ustat_variance(zeta1: float, zeta2: float, n: int) -> float:
    """Variance of a degree-2 U-statistic of n i.i.d. records (000 eq. 3, Hoeffding 1948).

    ``Var(U_n) = 2 / (n (n-1)) * (2 (n-2) zeta_1 + zeta_2)`` with
    ``zeta_1 = Var(E[f(x_1, X_2) | x_1])`` (000 writes ``Var(f(x_1, X_2) | x_1)``, which reads
    as a conditional variance; the projection variance is what Hoeffding's formula needs,
    as 002 App. D.1.2 states with sigma_1) and ``zeta_2 = Var(f(X_1, X_2))``.
    """
    n = check_positive_int(n, "n", minimum=2)
    _check_zetas(zeta1, zeta2)
    return 2.0 / (n * (n - 1)) * (2.0 * (n - 2) * zeta1 + zeta2)


def _check_zetas(zeta1: float, zeta2: float) -> None:
    for name, z in (("zeta1", zeta1), ("zeta2", zeta2)):
        if not (math.isfinite(z) and z >= 0):
            raise ValueError(f"{name} must be a finite variance >= 0, got {z!r}")


def incomplete_ustat_variance(ustat_var: float, zeta_k: float, m: int) -> float:
    """Variance of an incomplete U-statistic over m tuples drawn uniformly *with replacement*.

    ``Var(U_m) = (1 - 1/m) Var(U_n) + zeta_k / m`` (Blom 1976; cf. 002 App. D.1, where the
    without-replacement case is bounded), ``zeta_k = Var(f(X_1..X_k))``. Derivation: given
    the data, the m kernel values are i.i.d. draws from the C(n,k) values, so
    ``E[U_m | data] = U_n`` and ``Var(U_m | data) = (mean f^2 - U_n^2) / m``; taking the
    expectation, ``E[mean f^2] = zeta_k + theta^2`` and ``E[U_n^2] = Var(U_n) + theta^2``, and
    the law of total variance gives ``Var(U_n) + (zeta_k - Var(U_n)) / m``.

    Parameters
    ----------
    ustat_var : float
        ``Var(U_n)`` of the complete U-statistic (e.g. :func:`ustat_variance`).
    zeta_k : float
        Variance of one kernel value.
    m : int
        Number of sampled tuples.
    """
    m = check_positive_int(m, "m")
    _check_zetas(ustat_var, zeta_k)
    return (1.0 - 1.0 / m) * ustat_var + zeta_k / m


def permutation_design_variance(zeta1: float, zeta2: float, n: int, P: int) -> float:
    """Variance of the noise-free estimate of the P-permutation pair design (000 Thm 5).

    ``U_P`` averages ``f`` over the ``P * floor(n/2)`` pairs of P independent random
    permutations, consecutive elements paired (000 Sec. 5). By Blom's formula (001 eq. 25)
    ``Var(U_P) = N^-2 (E[f_1] zeta_1 + E[f_2] zeta_2)``, ``N = P h``, ``h = floor(n/2)``,
    with f_c the number of ordered pairs of design pairs sharing c indices:
    ``E[f_2] = N (1 + (P-1) h / C(n,2))`` and ``E[f_1] = N (P-1) (4h/n - 2h / C(n,2))``.
    For even n this is the first term of 000 Thm 5,
    ``2/(Pn) (2 (P-1)(1 - 1/(n-1)) zeta_1 + (1 + (P-1)/(n-1)) zeta_2)``; odd n (one record
    left out of each permutation) is our extension of the same count.
    """
    n = check_positive_int(n, "n", minimum=2)
    P = check_positive_int(P, "P")
    _check_zetas(zeta1, zeta2)
    h = n // 2
    N = P * h
    pairs = n_pairs(n)
    f2 = N * (1.0 + (P - 1) * h / pairs)
    f1 = N * (P - 1) * (4.0 * h / n - 2.0 * h / pairs)
    return (f1 * zeta1 + f2 * zeta2) / N**2


def _distinct_index_rows(n: int, width: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` rows of ``width`` distinct indices in [0, n), each row uniform."""
    if width * width > n:  # collisions are likely: take the head of random permutations
        step = max(1, 2**22 // n)  # bounds the (rows, n) matrix of uniforms
        return np.concatenate([np.argsort(rng.random((min(step, count - s), n)), axis=1)[:, :width]
                               for s in range(0, count, step)])
    rows = rng.integers(0, n, size=(count, width))
    while True:
        srt = np.sort(rows, axis=1)
        bad = np.flatnonzero(np.any(srt[:, 1:] == srt[:, :-1], axis=1))
        if bad.size == 0:
            return rows
        rows[bad] = rng.integers(0, n, size=(bad.size, width))


def hoeffding_components(
    kernel: Kernel,
    data: Any,
    *,
    rng: RandomLike = None,
    max_pairs: int = DEFAULT_MAX_PAIRS,
    estimator: str = "unbiased",
    use_fast_path: bool = True,
) -> tuple[float, float]:
    """Estimate ``(zeta_1, zeta_k)`` of the Hoeffding decomposition (000 eq. 3).

    ``zeta_1 = Var(h_1(X))`` with ``h_1(x) = E f(x, X_2, ..., X_k)``, and
    ``zeta_k = Var(f(X_1, ..., X_k))`` (``zeta_2`` for degree 2).

    With ``estimator="unbiased"`` the records are an i.i.d. sample and the estimates are
    unbiased:

    * degree 2, when the kernel has O(n log n) row sums (``kernel.row_sums``: AUC,
      Mann-Whitney, Gini, variance, duplicate pairs, Rényi-2, Rand index) and
      ``use_fast_path``, or when ``C(n, 2) <= max_pairs``: exact computation from all pairs.
      With ``F_ij = f(x_i, x_j)``, row sums ``R_i = sum_j F_ij`` (so ``h_1(x_i)`` is estimated by
      ``R_i / (n-1)``), ``Q_i = sum_j F_ij^2``, ``S = sum_i R_i``, ``T = sum_i Q_i``:
      ``W = sum_i (R_i^2 - Q_i)`` sums f(x_i,x_j) f(x_i,x_l) over distinct i, j, l and
      ``D = S^2 - 2T - 4W`` sums f(x_i,x_j) f(x_l,x_o) over four distinct indices, so
      ``zeta_1 = W/(n)_3 - D/(n)_4`` and ``zeta_2 = T/(n)_2 - D/(n)_4`` with ``(n)_r`` the
      falling factorial. (The plug-in variance of ``R_i/(n-1)`` would be biased upwards by
      about ``E Var(f(x, X) | x) / (n-1)``.) Needs n >= 4.
    * otherwise (larger n or degree k >= 3): Monte Carlo over ``max_pairs // 3`` random sets
      of ``3k - 1`` distinct records ``a, B, C, D`` (|B| = |C| = k-1, |D| = k):
      ``zeta_1 = mean f(a,B) (f(a,C) - f(D))`` and ``zeta_k = mean f(a,B) (f(a,B) - f(D))``,
      unbiased because ``E f(a,B) f(a,C) = zeta_1 + theta^2`` and
      ``E f(a,B) f(D) = theta^2``; their standard error is O(max_pairs^-1/2).

    With ``estimator="population"`` the records *are* the population and X_1, ..., X_k are drawn
    from them uniformly with replacement (as in a finite-population check of eq. 3); exact
    over all ``n^k`` index tuples, which must not exceed ``max_pairs``.

    Unbiased estimates can fall slightly below zero by chance; they are clipped at 0, which
    adds a small upward bias only when the true value is near 0.

    Parameters
    ----------
    kernel : Kernel
    data : array_like of shape (n, len(kernel.columns))
    rng : seed or numpy.random.Generator, optional
        Used on the Monte Carlo path only.
    max_pairs : int
        Budget of kernel evaluations.
    estimator : {"unbiased", "population"}
    use_fast_path : bool, default True
        Use ``kernel.row_sums`` when the kernel has it.
    """
    arr = kernel.check_data(data)
    max_pairs = check_positive_int(max_pairs, "max_pairs")
    n, k = arr.shape[0], kernel.degree
    if estimator == "population":
        return _population_components(kernel, arr, max_pairs)
    if estimator != "unbiased":
        raise ValueError(f"estimator must be 'unbiased' or 'population', got {estimator!r}")
    fast = use_fast_path and kernel.row_sums is not None
    if k == 2 and (fast or n_pairs(n) <= max_pairs):
        if n < 4:
            raise ValueError(f"the unbiased estimator needs at least 4 records, got n={n}")
        if fast:
            return _components_from_row_sums(*kernel.row_sums(arr), n)
        return _components_from_row_sums(*_row_sums_by_pairs(kernel, arr), n)
    if n < 3 * k - 1:
        raise ValueError(f"the Monte Carlo estimator needs at least {3 * k - 1} records for "
                         f"degree {k}, got n={n}")
    gen = as_rng(rng)
    draws = max(1, max_pairs // 3)
    acc1: list[float] = []
    acc2: list[float] = []
    chunk = 2**16
    for start in range(0, draws, chunk):
        count = min(chunk, draws - start)
        idx = _distinct_index_rows(n, 3 * k - 1, count, gen)
        first = kernel._evaluate_unchecked(arr, idx[:, :k])
        second = kernel._evaluate_unchecked(arr, np.concatenate([idx[:, :1], idx[:, k:2 * k - 1]],
                                                                 axis=1))
        disjoint = kernel._evaluate_unchecked(arr, idx[:, 2 * k - 1:])
        acc1.append(float(np.sum(first * (second - disjoint))))
        acc2.append(float(np.sum(first * (first - disjoint))))
    zeta1 = math.fsum(acc1) / draws
    zeta_k = math.fsum(acc2) / draws
    return max(zeta1, 0.0), max(zeta_k, 0.0)


def _row_sums_by_pairs(kernel: Kernel, arr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """R_i and Q_i by evaluating every pair (blocked)."""
    n = arr.shape[0]
    R = np.zeros(n)
    Q = np.zeros(n)
    for block in pair_blocks(n, DEFAULT_BLOCK_SIZE):
        v = kernel._evaluate_unchecked(arr, block)
        R += np.bincount(block[:, 0], weights=v, minlength=n)
        R += np.bincount(block[:, 1], weights=v, minlength=n)
        Q += np.bincount(block[:, 0], weights=v * v, minlength=n)
        Q += np.bincount(block[:, 1], weights=v * v, minlength=n)
    return R, Q


def _components_from_row_sums(R: np.ndarray, Q: np.ndarray, n: int) -> tuple[float, float]:
    """Unbiased (zeta_1, zeta_2) from row sums (formulas in hoeffding_components)."""
    S = float(np.sum(R))
    T = float(np.sum(Q))
    W = float(np.sum(R * R - Q))
    D = S * S - 2.0 * T - 4.0 * W
    ff3 = n * (n - 1) * (n - 2)
    ff4 = ff3 * (n - 3)
    theta2 = D / ff4
    zeta1 = W / ff3 - theta2
    zeta2 = T / (n * (n - 1)) - theta2
    return max(zeta1, 0.0), max(zeta2, 0.0)


def _population_components(kernel: Kernel, arr: np.ndarray, max_pairs: int) -> tuple[float, float]:
    n, k = arr.shape[0], kernel.degree
    total = n**k
    if total > max_pairs:
        raise ValueError(f"estimator='population' evaluates all n^k = {total} tuples, more "
                         f"than max_pairs={max_pairs}; raise max_pairs")
    grids = np.indices((n,) * k).reshape(k, -1).T
    values = kernel._evaluate_unchecked(arr, grids)
    theta = float(np.mean(values))
    h1 = values.reshape(n, -1).mean(axis=1)
    zeta1 = float(np.mean((h1 - theta) ** 2))
    zeta_k = float(np.mean((values - theta) ** 2))
    return zeta1, zeta_k
