"""Generic LDP protocol for degree-2 U-statistics: quantize, then k-ary randomized response.

Sources
-------
* 000 (Bell, Bellet, Gascón, Kulkarni, AISTATS 2020) Sec. 3, Alg. 1, Theorems 1-2 and
  Corollary 1; 001 (arXiv version) App. A.1 (the estimator, Lemma 1, Corollary 2) and
  App. A.2 (quantized kernels A^Mid eq. 14, A^Avg eq. 15, Remark 4).

Protocol (one round, or two when k must be derived from the number of parties)
-------------------------------------------------------------------------------
1. Each party quantizes its record on a public grid of k cells (000 Alg. 1 line 2; see
   :mod:`fedustat.protocols.local.quantization`) and applies k-ary randomized response
   (line 3) with ``beta = k / (k + e^eps - 1)``, sending one code of ceil(log2 k) bits.
   Public columns (the labels of AUC) are sent as they are.
2. The aggregator estimates the U-statistic of the quantized kernel A from the reports.

Randomized response. 000 eq. 9 as printed keeps the true cell with probability 1 - beta
and gives every other cell beta/k, which does not sum to one. We use
:class:`~fedustat.privacy.randomizers.KaryRandomizedResponse`, the correct k-RR: the true
cell with probability ``e^eps / (k + e^eps - 1)``, every other cell with
``1 / (k + e^eps - 1)``. Then ``P(report = j) = (1 - beta) 1[j = x] + beta / k``, which is
the model of 001 App. A.1, so ``g(r) = (e_r - b) / (1 - beta)`` with ``b = (beta/k) 1`` has
``E g(R(x)) = e_x`` exactly and the estimator below is exactly unbiased for the
U-statistic of A on the quantized data.

The estimator in O(n + k^2) (000 Sec. 3 states O(n^2 k^2))
-----------------------------------------------------------
001 App. A.1 averages ``f_hat(R_i, R_j) = g(R_i)^T A g(R_j)`` over all pairs i < j. With
A symmetric and ``G = sum_i g(R_i)``,

    G^T A G = sum_{i,j} g(R_i)^T A g(R_j) = 2 sum_{i<j} g(R_i)^T A g(R_j)
              + sum_i g(R_i)^T A g(R_i).

``g(R_i)`` depends on party i only through its report, so with the histogram ``c`` of the
reports ``G = sum_r c_r g(r) = (c - n b) / (1 - beta)`` and
``sum_i g(R_i)^T A g(R_i) = sum_r c_r g(r)^T A g(r)``, where
``g(r)^T A g(r) = (A_rr - 2 b (A 1)_r + b^2 1^T A 1) / (1 - beta)^2``. Hence

    sum_{i<j} g(R_i)^T A g(R_j) = (G^T A G - sum_r c_r g(r)^T A g(r)) / 2,

and ``U_hat`` is that divided by C(n, 2): one pass over the reports (the histogram) and
O(k^2) arithmetic. With public groups (a = 0..m-1, e.g. labels) the kernel between a
record of group a and one of group b is the block ``A^{ab}``; pairs across groups add
``G_a^T A^{ab} G_b`` and pairs within a group the expression above with ``A^{aa}``:
O(n + m^2 k^2).

Variance and standard error
---------------------------
Given the parties' quantized cells (the data), the reports are independent and
``g(R_i) = e_{x_i} + xi_i`` with ``E xi_i = 0`` and
``Cov xi_i = (diag(p_x) - p_x p_x^T) / (1 - beta)^2``, ``p_x = b + (1 - beta) e_x``. Writing
``W = sum_{i<j} g_i^T A g_j``,

    W - E W = sum_i xi_i^T w_i + sum_{i<j} xi_i^T A xi_j,   w_i = sum_{j != i} A e_{x_j},

and the two sums are uncorrelated (every cross moment has an odd number of independent
zero-mean factors), so

    Var W = sum_i w_i^T Cov(xi_i) w_i + sum_{i<j} tr(A Cov(xi_j) A Cov(xi_i)).

:func:`pair_sum_variance` evaluates this exactly from the histogram of the true cells in
O(m^2 k^2): ``Cov(xi)`` summed over a group is a diagonal plus a rank-two matrix, which
turns every trace into vector products. The released ``std_error`` plugs the debiased
report histogram (negative counts clipped to 0, rescaled to n) into this formula: it is
computed from the reports only (post-processing, no privacy cost) and estimates the
standard deviation of the estimate around the U-statistic of the quantized data. The
Theorem 1 bound, which also covers sampling, is in the diagnostics.

Quantization error (Remark 4)
-----------------------------
``Delta = C(n,2)^-1 sum_{i<j} Delta_{pi(x_i) pi(x_j)}`` with
``Delta_ij = (sup - inf)^2 / 4`` of f over the cell pair (001 App. A.2.1) bounds
``(U_f - U_A)^2`` for the midpoint kernel (4 Delta for the others). It is itself a
U-statistic of the quantized data, so the aggregator estimates it from the same reports
with the same estimator (Remark 4): ``diagnostics["quantization_delta_estimate"]``. The
exact Delta needs the true data, which the aggregator never sees; it is computed only by
:func:`evaluate_quantization`, an evaluation tool outside the protocol.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_int_array,
    check_epsilon,
    check_positive_int,
)
from fedustat.privacy.errors import NormalError
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, local_only
from fedustat.privacy.noise import NoiseSource, SimulationNoise, as_noise
from fedustat.privacy.randomizers import KaryRandomizedResponse
from fedustat.protocols.base import (
    Cost,
    DropoutRule,
    Estimate,
    Message,
    Protocol,
    Role,
    statistic_release,
)
from fedustat.protocols.local.quantization import (
    AUC_BINS_FACTOR,
    DEFAULT_AVG_TOL,
    DEFAULT_MAX_EVALUATIONS,
    ProductGrid,
    QuantizationPlan,
    QuantizedKernel,
    corollary1_k,
    plan_for_kernel,
    quantize_kernel,
)
from fedustat.protocols.registry import register
from fedustat.stats.kernels import LABELS_PUBLIC, Kernel, PublicData
from fedustat.stats.ustat import ustatistic

__all__ = [
    "QuantizedLocalProtocol",
    "QuantizedRandomizedResponse",
    "corollary1_k",
    "debiased_histogram",
    "evaluate_quantization",
    "ldp_adjacency",
    "pair_sum",
    "pair_sum_variance",
    "theorem1_variance_bound",
    "theorem2_mse_bound",
]

BINS_BITS = 16  # wire size of one bin count in the negotiation broadcast
JOIN_BITS = 1  # a party's check-in when the aggregator must first count the parties


# --------------------------------------------------------------------------------------
# Theory: Theorem 1, Theorem 2 (000 Sec. 3)
# --------------------------------------------------------------------------------------


def _beta(k: int, epsilon: float) -> float:
    """``beta = k / (k + e^eps - 1)`` (000 Alg. 1 line 3), written to avoid overflow."""
    em = math.exp(-epsilon)
    return k * em / (1.0 + (k - 1) * em)


def _output_width(output_range: Any) -> float:
    lo, hi = (float(v) for v in output_range)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"output_range must be finite with lo < hi, got {output_range!r}")
    return hi - lo


def theorem1_variance_bound(n: int, k: int, epsilon: float,
                            output_range: tuple[float, float] = (0.0, 1.0)) -> float:
    """Theorem 1 of 000 (001 Corollary 2): the variance of the generic estimator.

    ``Var <= width^2 [1 / (n (1-beta)^2) + (1+beta)^2 / (2 n (n-1) (1-beta)^4)]`` with
    ``beta = k / (k + e^eps - 1)``. The theorem assumes f in [0, 1]; since
    ``g(r)^T J g(r') = 1`` for the all-ones matrix J, a constant shift of the kernel
    shifts the estimate exactly, so for f in [lo, hi] the bound scales by
    ``width^2 = (hi - lo)^2``. It covers the randomization and the sampling of i.i.d.
    data (population variance).
    """
    n = check_positive_int(n, "n", minimum=2)
    k = check_positive_int(k, "k", minimum=2)
    eps = check_epsilon(epsilon)
    width = _output_width(output_range)
    beta = _beta(k, eps)
    s = 1.0 - beta
    return width**2 * (1.0 / (n * s**2) + (1.0 + beta) ** 2 / (2.0 * n * (n - 1) * s**4))


def theorem2_mse_bound(n: int, k: int, epsilon: float, *, lipschitz: float | None = None,
                       density_lipschitz: float | None = None,
                       output_range: tuple[float, float] = (0.0, 1.0)) -> float:
    """Theorem 2 of 000: MSE of Alg. 1 with simple rounding on X = [0, 1], f in [0, 1].

    With ``lipschitz`` = L_f (f L_f-Lipschitz in each argument) the quantization term is
    ``L_f^2 / (2 k^2)`` (001 Lemma 2); with ``density_lipschitz`` = L_mu (Lipschitz data
    density) it is ``4 L_mu^2 / k^2 + 4 L_mu^4 / k^4`` (001 Lemma 3). Both constants are
    on the unit-rescaled domain and output; the result is scaled by ``width^2`` of
    ``output_range`` like :func:`theorem1_variance_bound`.
    """
    if (lipschitz is None) == (density_lipschitz is None):
        raise ValueError("give exactly one of lipschitz (kernel) or density_lipschitz (data)")
    width = _output_width(output_range)
    variance = theorem1_variance_bound(n, k, epsilon, output_range) / width**2
    if lipschitz is not None:
        lip = float(lipschitz)
        if not (math.isfinite(lip) and lip >= 0):
            raise ValueError(f"lipschitz must be finite and >= 0, got {lipschitz!r}")
        quant = lip**2 / (2.0 * k**2)
    else:
        lip = float(density_lipschitz)  # type: ignore[arg-type]
        if not (math.isfinite(lip) and lip >= 0):
            raise ValueError(f"density_lipschitz must be finite and >= 0, got "
                             f"{density_lipschitz!r}")
        quant = 4.0 * lip**2 / k**2 + 4.0 * lip**4 / k**4
    return width**2 * (variance + quant)


# --------------------------------------------------------------------------------------
# The estimator and its variance
# --------------------------------------------------------------------------------------


def _check_beta(beta: Any) -> float:
    """The uniform-report probability of k-ary randomized response, in [0, 1)."""
    beta = float(beta)
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    return beta


def _check_counts(counts: Any, matrices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mats = np.asarray(matrices, dtype=np.float64)
    if mats.ndim == 2:
        mats = mats[None, None]
    if mats.ndim != 4 or mats.shape[0] != mats.shape[1] or mats.shape[2] != mats.shape[3]:
        raise ValueError(f"matrices must be (k, k) or (m, m, k, k), got shape {mats.shape}")
    c = np.asarray(counts, dtype=np.float64)
    if c.ndim == 1:
        c = c[None]
    if c.shape != mats.shape[1:3]:
        raise ValueError(f"counts must have shape (m, k) = {mats.shape[1:3]}, got {c.shape}")
    if not np.all(np.isfinite(c)):
        raise ValueError("counts must be finite")
    return c, mats


def pair_sum(counts: Any, matrices: Any, beta: float) -> float:
    """``sum_{i<j} g(R_i)^T A^{a_i a_j} g(R_j)`` from the report histogram, in O(m^2 k^2).

    See the module docstring for the derivation. ``beta = 0`` gives the exact pair sum
    of the quantized kernel over the cells themselves (no randomization).

    Parameters
    ----------
    counts:
        ``(k,)`` histogram of reports, or ``(m, k)`` with one row per public group.
    matrices:
        ``(k, k)`` symmetric quantized kernel, or ``(m, m, k, k)`` blocks.
    beta:
        Probability of reporting a uniform draw, in [0, 1).
    """
    c, mats = _check_counts(counts, matrices)
    beta = _check_beta(beta)
    m, k = c.shape
    b = beta / k
    s = 1.0 - beta
    n_group = c.sum(axis=1)
    G = (c - n_group[:, None] * b) / s
    total = 0.0
    for a in range(m):
        for bb in range(a + 1, m):
            total += float(G[a] @ mats[a, bb] @ G[bb])
        A = mats[a, a]
        row = A.sum(axis=1)
        self_terms = (np.diag(A) - 2.0 * b * row + b * b * row.sum()) / s**2
        total += 0.5 * (float(G[a] @ A @ G[a]) - float(c[a] @ self_terms))
    return total


def pair_sum_variance(true_counts: Any, matrices: Any, beta: float) -> float:
    """Exact variance of :func:`pair_sum` of the reports, given the parties' true cells.

    Parameters
    ----------
    true_counts:
        Histogram of the true (quantized) cells, ``(k,)`` or ``(m, k)``; real-valued
        counts are accepted (plug-in use).
    matrices, beta:
        As in :func:`pair_sum`.

    Notes
    -----
    See :func:`_variance_terms` for the formula; each of its two terms is a variance
    and is clipped at 0 against rounding.
    """
    var_lin, var_quad = _variance_terms(true_counts, matrices, beta)
    return max(var_lin, 0.0) + max(var_quad, 0.0)


def _variance_terms(true_counts: Any, matrices: Any, beta: float) -> tuple[float, float]:
    """The two terms (one per party, one per pair) of the exact variance of
    :func:`pair_sum` given the parties' true cells, unclipped: a polynomial in the counts.

    Parameters
    ----------
    true_counts:
        Histogram of the true (quantized) cells, ``(k,)`` or ``(m, k)``; real-valued
        counts are accepted (plug-in use).
    matrices, beta:
        As in :func:`pair_sum`.

    Notes
    -----
    ``Var W = sum_i w_i^T S_{x_i} w_i + sum_{i<j} tr(A^{ab} S_{x_j} A^{ba} S_{x_i})``
    (module docstring) with ``(1-beta)^2 S_v = diag(p_v) - p_v p_v^T``. Summed over a
    group with counts h, ``(1-beta)^2 sum_v h_v S_v = diag(n b + beta (1-beta) h)
    + U M U^T`` with ``U = [1, h]`` and ``M = [[-n b^2, -b(1-beta)], [-b(1-beta), 0]]``
    (b = beta/k), so every trace is a handful of O(k^2) products.
    """
    h, mats = _check_counts(true_counts, matrices)
    beta = _check_beta(beta)
    m, k = h.shape
    b = beta / k
    s = 1.0 - beta
    n_group = h.sum(axis=1)
    ones = np.ones(k)

    # Linear term: sum over parties of w^T S w, w = c_a - A^{aa}[:, v] for a party (a, v).
    c = np.einsum("abij,bj->ai", mats, h)
    var_lin = 0.0
    for a in range(m):
        A = mats[a, a]
        Ac = A @ c[a]
        col_norm2 = np.einsum("ij,ij->j", A, A)
        w_norm2 = c[a] @ c[a] - 2.0 * Ac + col_norm2
        w_sum = c[a].sum() - A.sum(axis=0)
        w_own = c[a] - np.diag(A)
        quad = b * w_norm2 + s * w_own**2 - (b * w_sum + s * w_own) ** 2
        var_lin += float(h[a] @ quad) / s**2

    # Quadratic term: (1/2) [sum_{a,b} tr(A^{ab} S_b A^{ba} S_a) - sum_{a,v} h tr(A S_v A S_v)].
    d = n_group[:, None] * b + beta * s * h
    U = np.stack([np.broadcast_to(ones, h.shape), h], axis=-1)  # (m, k, 2)
    M = np.array([[[-na * b * b, -b * s], [-b * s, 0.0]] for na in n_group])
    cross = 0.0
    for a in range(m):
        for bb in range(m):
            X = mats[a, bb]
            t1 = d[a] @ (X * X) @ d[bb]
            Y = X.T @ U[a]
            t2 = np.trace(M[a] @ (Y.T * d[bb]) @ Y)
            Z = X @ U[bb]
            t3 = np.trace(M[bb] @ (Z.T * d[a]) @ Z)
            N = U[a].T @ X @ U[bb]
            t4 = np.trace(M[bb] @ N.T @ M[a] @ N)
            cross += t1 + t2 + t3 + t4
    own = 0.0
    for a in range(m):
        A = mats[a, a]
        row = A.sum(axis=1)
        diag = np.diag(A)
        col_norm2 = np.einsum("ij,ij->j", A, A)
        # D_v = diag(b + (1-beta) e_v), p_v = b 1 + (1-beta) e_v.
        tr_adad = b * b * np.sum(A * A) + 2.0 * b * s * col_norm2 + s * s * diag**2
        y_norm2 = b * b * (row @ row) + 2.0 * b * s * (A @ row) + s * s * col_norm2
        y_own = b * row + s * diag
        p_adap = b * y_norm2 + s * y_own**2
        p_ap = b * b * row.sum() + 2.0 * b * s * row + s * s * diag
        own += float(h[a] @ (tr_adad - 2.0 * p_adap + p_ap**2))
    var_quad = 0.5 * (cross - own) / s**4
    return var_lin, var_quad


def histogram_covariance(true_counts: Any, beta: float) -> np.ndarray:
    """``Cov`` of the debiased report histogram of each group, ``(m, k, k)``, given the
    true cell counts ``h`` (real-valued accepted: a plug-in).

    The reports of a group are independent with ``P(report = j) = p_x = b + (1 - beta)
    e_x`` (module docstring), so the report counts have covariance ``sum_x h_x (diag(p_x)
    - p_x p_x^T)``; the debiased histogram divides by ``1 - beta``. Multiplied out:
    ``(diag(n b + s h) - n b b^T - s (b h^T + h b^T) - s^2 diag(h)) / s^2``, ``s = 1 -
    beta``, ``n`` the group's count (000 Sec. 3; 001 App. A.1).
    """
    h = np.atleast_2d(np.asarray(true_counts, dtype=np.float64))
    beta = _check_beta(beta)
    m, k = h.shape
    b = np.full(k, beta / k)
    s = 1.0 - beta
    out = np.empty((m, k, k))
    for a in range(m):
        n = float(h[a].sum())
        cov = np.diag(n * b + s * h[a] - s * s * h[a]) - n * np.outer(b, b) \
            - s * (np.outer(b, h[a]) + np.outer(h[a], b))
        out[a] = cov / (s * s)
    return out


def variance_plug_in_bias(true_counts: Any, matrices: Any, beta: float) -> float:
    """``E V(h_hat) - V(h)`` for :func:`pair_sum_variance`'s polynomial ``V`` at an
    unbiased histogram ``h_hat``, to second order: ``(1/2) tr(H Cov(h_hat))``, evaluated
    at ``true_counts`` (a plug-in: the debiased histogram).

    ``V`` is a cubic polynomial in the counts, so its second derivative along a direction
    ``u`` is exactly the central difference ``(V(h + t u) - 2 V(h) + V(h - t u)) / t^2``
    (the cubic term cancels); ``Cov(h_hat)`` is block-diagonal over the groups
    (:func:`histogram_covariance`) and ``tr(H Cov) = sum_j lambda_j u_j^T H u_j`` over
    each block's eigenpairs. The groups' reports are independent, so there are no cross
    terms. O(m k) evaluations of ``V``, each O(m^2 k^2).
    """
    h = np.atleast_2d(np.asarray(true_counts, dtype=np.float64))

    def poly(x: np.ndarray) -> float:
        lin, quad = _variance_terms(x, matrices, beta)
        return lin + quad

    center = poly(h)
    total = 0.0
    for a, block in enumerate(histogram_covariance(h, beta)):
        values, vectors = np.linalg.eigh(block)
        step = max(1.0, float(h[a].sum())) * 1e-3
        for value, vector in zip(values, vectors.T, strict=True):
            if abs(value) <= 1e-12 * max(1.0, float(np.abs(values).max())):
                continue
            shift = np.zeros_like(h)
            shift[a] = step * vector
            curvature = (poly(h + shift) - 2.0 * center + poly(h - shift)) / step**2
            total += value * curvature
    return 0.5 * total


def debiased_histogram(counts: Any, beta: float, *, clip: bool = True) -> np.ndarray:
    """Unbiased cell counts ``(c - n b) / (1 - beta)`` per group (000 Sec. 3).

    With ``clip`` the negative entries are set to 0 and each group rescaled to its number
    of reports: a plug-in histogram for :func:`pair_sum_variance` (post-processing).
    """
    c = np.asarray(counts, dtype=np.float64)
    squeeze = c.ndim == 1
    c = np.atleast_2d(c)
    k = c.shape[1]
    n_group = c.sum(axis=1, keepdims=True)
    est = (c - n_group * beta / k) / (1.0 - beta)
    if clip:
        est = np.maximum(est, 0.0)
        total = est.sum(axis=1, keepdims=True)
        uniform = np.broadcast_to(n_group / k, est.shape)
        est = np.where(total > 0, est * n_group / np.where(total > 0, total, 1.0), uniform)
    return est[0] if squeeze else est


# --------------------------------------------------------------------------------------
# The protocol
# --------------------------------------------------------------------------------------


def ldp_adjacency(kernel: Kernel, grid: ProductGrid | QuantizationPlan) -> str:
    """The neighbouring relation of the local guarantee: any two private inputs of a party."""
    public = [c.name for c in grid.public]
    if not public:
        return "any two inputs of one party"
    if kernel.adjacency == LABELS_PUBLIC:
        return "any two scores of one party; labels and class sizes public"
    return f"any two values of one party's private columns; columns {public} are public"


@dataclass
class _PartyState:
    records: np.ndarray
    parties: np.ndarray
    setup: Any | None  # the public per-grid objects a party needs, once the bins are known


@dataclass
class _ServerState:
    n_parties: int
    bins: dict[str, int] | None
    k_rule: str


class QuantizedLocalProtocol(Protocol):
    """Shared machinery of the one-message LDP protocols on a quantization grid.

    Holds the public grid (:func:`~fedustat.protocols.local.quantization.plan_for_kernel`), the
    quantized kernel, and the optional first round in which the parties check in so that
    the aggregator can fix k from Corollary 1 and the number of parties. Subclasses say
    what a party sends (:meth:`_party_setup`, :meth:`_party_fields`) and how the
    aggregator estimates (:meth:`_estimate`).
    """

    name = "quantized-local"
    released_fields = (*Protocol.released_fields, *Protocol.statistic_map_fields,
                       "diagnostics.u_statistic", "diagnostics.u_std_error")

    def __init__(self, kernel: Kernel, epsilon: float, *, k: Any = None, bounds: Any = None,
                 domain: Any = None, public_columns: Any = None, quantizer: str = "round",
                 quantized_kernel: str | None = None, n_parties: int | None = None,
                 lipschitz: float | None = None, noise: NoiseSource | None = None,
                 max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
                 avg_tol: float = DEFAULT_AVG_TOL) -> None:
        try:
            self.epsilon = check_epsilon(epsilon)
        except ValueError as exc:
            raise ValueError(f"{exc}; the LDP protocol {self.name!r} needs a finite budget "
                             "(use protocol='exact' for the non-private value)") from None
        self.kernel = kernel
        self.plan = plan_for_kernel(kernel, k=k, bounds=bounds, domain=domain,
                                    public_columns=public_columns, quantizer=quantizer)
        self.quantized_kernel = quantized_kernel if quantized_kernel is not None else (
            "center" if quantizer == "randomized" else "mid")
        if noise is not None and not isinstance(noise, NoiseSource):
            raise TypeError(f"noise must be a NoiseSource, got {type(noise).__name__}")
        self.noise = noise
        self.lipschitz = None if lipschitz is None else check_epsilon(lipschitz, "lipschitz")
        self.max_evaluations = check_positive_int(max_evaluations, "max_evaluations")
        self.avg_tol = check_epsilon(avg_tol, "avg_tol")
        self.n_parties = (None if n_parties is None
                          else check_positive_int(n_parties, "n_parties", minimum=2))
        self._fixed_bins: dict[str, int] | None = None
        self._fixed_kernel: QuantizedKernel | None = None
        if self.plan.resolved:
            self._fixed_bins, self.k_rule = self.plan.bins_for(2, self.epsilon), "given"
        elif self.n_parties is not None:
            self._fixed_bins = self.plan.bins_for(self.n_parties, self.epsilon, self.lipschitz)
            self.k_rule = self._corollary_rule(self.n_parties)
        else:
            self.k_rule = "corollary 1 after counting the parties"
        if self._fixed_bins is not None:
            # The quantized kernel is public and fixed before any data (an offline step).
            self._fixed_kernel = self._quantize(self.plan.grid(self._fixed_bins))

    # ---------------------------------------------------------------- public helpers
    def _corollary_rule(self, n: int) -> str:
        if self.lipschitz is None and self.plan.auc_rule_applies:
            return (f"AUC rule: the smallest k with k^2 (k + e^eps - 1) >= "
                    f"{AUC_BINS_FACTOR:g} sqrt(n) (e^eps - 1) with n = {n} (quantization gap "
                    "under a tenth of the noise), at least corollary 1's k")
        lip = self.lipschitz if self.lipschitz is not None else self.plan.unit_lipschitz()
        lip_s = "1 (default)" if lip is None else f"{lip:g}"
        return f"corollary 1: k = n^(1/4) sqrt(L eps) with n = {n}, L = {lip_s}"

    def _quantize(self, grid: ProductGrid) -> QuantizedKernel:
        return quantize_kernel(self.kernel, grid, self.quantized_kernel,
                               max_evaluations=self.max_evaluations, avg_tol=self.avg_tol)

    def bins_for(self, n_parties: int) -> dict[str, int]:
        """Bins per continuous column used with ``n_parties`` parties."""
        if self._fixed_bins is not None:
            return dict(self._fixed_bins)
        return self.plan.bins_for(n_parties, self.epsilon, self.lipschitz)

    def grid_for(self, n_parties: int) -> ProductGrid:
        """The public grid used with ``n_parties`` parties."""
        return self.plan.grid(self.bins_for(n_parties))

    def quantized_kernel_for(self, grid: ProductGrid) -> QuantizedKernel:
        """The quantized kernel matrices on ``grid`` (public)."""
        if self._fixed_kernel is not None and self._fixed_bins == grid.continuous_bins:
            return self._fixed_kernel
        return self._quantize(grid)

    def _fixed_grid(self, n_parties: int | None) -> ProductGrid:
        if self._fixed_bins is None and n_parties is None:
            raise ValueError("k is not fixed yet: pass n_parties (or build the protocol with "
                             "k= or n_parties=)")
        return self.grid_for(n_parties or 2)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(self.epsilon, 0.0, PrivacyModel.LOCAL,
                                ldp_adjacency(self.kernel, self.plan),
                                assumptions=(local_only(),))

    # ---------------------------------------------------------------- subclass hooks
    @abstractmethod
    def _party_setup(self, grid: ProductGrid) -> Any:
        """Public objects a party needs on ``grid`` (built once per batch)."""

    @abstractmethod
    def _party_fields(self, setup: Any, records: np.ndarray, source: NoiseSource
                      ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """The fields (one row per party) and their wire sizes."""

    @abstractmethod
    def _estimate(self, fields: dict[str, np.ndarray], grid: ProductGrid,
                  k_rule: str) -> Estimate:
        """The aggregator's estimate from the parties' fields."""

    # ---------------------------------------------------------------- protocol steps
    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _PartyState:
        records = np.asarray(data, dtype=np.float64)
        if records.ndim == 1:
            records = records[:, None]
        setup = (None if self._fixed_bins is None
                 else self._party_setup(self.plan.grid(self._fixed_bins)))
        return _PartyState(records, np.asarray(parties), setup)

    def init_server(self, n_parties: int) -> _ServerState:
        return _ServerState(n_parties, self._fixed_bins, self.k_rule)

    def party_step(self, state: _PartyState, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_PartyState, Message]:
        if state.setup is None:
            if inbox is None:
                # k depends on n: check in first, so the aggregator can count the parties.
                ones = np.ones(state.parties.size, dtype=np.uint8)
                return state, Message(Role.PARTY, Role.SERVER, {"join": ones},
                                      {"join": JOIN_BITS}, state.parties)
            names = [c.name for c in self.plan.continuous]
            counts = as_int_array(inbox.fields["bins"], "bins")
            bins = dict(zip(names, counts.tolist(), strict=True))
            state = replace(state, setup=self._party_setup(self.plan.grid(bins)))
        source = self.noise if self.noise is not None else SimulationNoise(rng)
        fields, bits = self._party_fields(state.setup, state.records, source)
        return state, Message(Role.PARTY, Role.SERVER, fields, bits, state.parties)

    def _fix_bins(self, state: _ServerState, n: int) -> tuple[_ServerState, Message]:
        """The check-in round's reply: the bins (and k rule) fixed from the n who joined."""
        bins = self.plan.bins_for(n, self.epsilon, self.lipschitz)
        state = replace(state, bins=bins, k_rule=self._corollary_rule(n))
        names = [c.name for c in self.plan.continuous]
        payload = np.array([bins[c] for c in names], dtype=np.int64)
        return state, Message(Role.SERVER, Role.PARTY, {"bins": payload}, {"bins": BINS_BITS})

    def server_step(self, state: _ServerState, inbox: Message,
                    rng: np.random.Generator) -> tuple[_ServerState, Message | Estimate]:
        if "join" in inbox.fields:
            n = len(inbox.parties) if inbox.parties is not None else state.n_parties
            return self._fix_bins(state, n)
        if state.bins is None:
            raise RuntimeError("reports arrived before the number of bins was fixed")
        fields = {name: np.asarray(v) for name, v in inbox.fields.items()}
        return state, self._estimate(fields, self.plan.grid(state.bins), state.k_rule)

    def collection_rule(self) -> DropoutRule:
        # With the bins fixed before any data (k given, or Corollary 1's k from a planned
        # n_parties) the report is the party's first and only message; dropout_rule says
        # why the estimate over the reports received is this protocol's release.
        if self._fixed_bins is None:
            return DropoutRule(False, f"{self.name} fixes its bins from a check-in round "
                                      "that counts the parties; give k= (or the planned "
                                      "n_parties=) to collect one-shot reports")
        return DropoutRule(True, "one-shot epsilon-LDP reports; the estimator's n is the "
                                 "number of reports received")

    def dropout_rule(self, state: _ServerState, round_index: int) -> DropoutRule:
        # Each report is epsilon-LDP on its own (000 Thm 1; Ghazi et al.'s projection
        # likewise), and both estimators take n from the reports they receive
        # (estimate_from_counts: n = histogram total; estimate_from_projections: n =
        # rows), so the release over the reports that arrived is this protocol's release
        # over those parties. The check-in round only counts parties to pick k
        # (Corollary 1), a public choice that the reports do not depend on otherwise.
        if state.bins is None:
            return DropoutRule(True, "check-in round: k is chosen from the parties that "
                                     "checked in")
        return DropoutRule(True, "one-shot epsilon-LDP reports; the estimator's n is the "
                                 "number of reports received")


@dataclass(frozen=True)
class _KrrSetup:
    grid: ProductGrid
    krr: KaryRandomizedResponse


class QuantizedRandomizedResponse(QuantizedLocalProtocol):
    """000 Alg. 1: quantize each record, k-ary randomized response, unbiased U estimate.

    Parameters
    ----------
    kernel:
        A degree-2 kernel (Gini, Kendall tau-a, AUC with public labels, duplicate-pair
        ratio, Rényi-2, Rand index, variance, user kernels).
    epsilon:
        Local privacy budget of each party (> 0, finite).
    k:
        Bins per continuous column (int, sequence or mapping by column). None derives
        them from Corollary 1, ``k = n^{1/4} sqrt(L eps)`` (see ``n_parties``); for the
        AUC of continuous scores (and no ``lipschitz``) from
        :func:`~fedustat.protocols.local.quantization.auc_bins`, which makes the
        quantization gap negligible against the noise so that the interval covers the
        exact AUC. With a given k the interval is for the AUC of the quantized scores.
    bounds, domain, public_columns, quantizer:
        The public grid (:func:`~fedustat.protocols.local.quantization.plan_for_kernel`).
    quantized_kernel:
        ``"mid"`` (001 eq. 14), ``"avg"`` (eq. 15) or ``"center"``; default ``"mid"``,
        and ``"center"`` with randomized rounding.
    n_parties:
        Public number of parties, used for Corollary 1 when ``k`` is None. If it is also
        None the protocol first counts the parties (each sends a 1-bit check-in and the
        aggregator broadcasts the bins): one more round.
    lipschitz:
        L of Corollary 1 on the unit-rescaled domain; defaults to the kernel's Lipschitz
        constant rescaled, or 1. Given for the AUC, it asks for Corollary 1's k instead
        of the AUC rule.
    noise:
        The parties' randomness: ``None`` uses each batch's seeded generator; pass a
        :class:`~fedustat.privacy.noise.DeploymentNoise` to protect real people.
    max_evaluations, avg_tol:
        Budget and accuracy target of numerically quantized user kernels.
    """

    name = "ldp-quantized"
    released_fields = (*Protocol.released_fields, *Protocol.statistic_map_fields,
                       "diagnostics.u_statistic",
                       "diagnostics.u_std_error", "diagnostics.quantization_delta_estimate",
                       "diagnostics.quantization_error_bound_estimate",
                       "diagnostics.std_error_method")

    def randomizer_for(self, grid: ProductGrid) -> KaryRandomizedResponse:
        """k-ary randomized response on the grid's cells (000 Alg. 1 line 3)."""
        return KaryRandomizedResponse(grid.size, self.epsilon)

    def report_distribution(self, record: Any, n_parties: int | None = None) -> np.ndarray:
        """Exact distribution of a party's report given its record (quantize, then k-RR).

        With randomized rounding it mixes the k-RR rows of the two nearest cells. Used to
        verify epsilon-LDP exactly (:func:`fedustat.privacy.verify.verify_ldp`).
        """
        grid = self._fixed_grid(n_parties)
        return grid.code_probabilities(record) @ self.randomizer_for(grid).output_distribution(
            np.arange(grid.size))

    def _party_setup(self, grid: ProductGrid) -> _KrrSetup:
        return _KrrSetup(grid, self.randomizer_for(grid))

    def _party_fields(self, setup: _KrrSetup, records: np.ndarray, source: NoiseSource
                      ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        grid = setup.grid
        reports = setup.krr.randomize(grid.encode(records, source), source)
        fields = {"report": reports}
        bits = {"report": max(1, (grid.size - 1).bit_length())}
        if grid.has_public:
            fields["public"] = grid.groups(records)
            bits["public"] = max(1, (grid.n_groups - 1).bit_length())
        return fields, bits

    def _estimate(self, fields: dict[str, np.ndarray], grid: ProductGrid,
                  k_rule: str) -> Estimate:
        reports = fields["report"]
        groups = fields.get("public", np.zeros(reports.size, dtype=np.int64))
        return self.estimate_from_reports(reports, groups, grid, k_rule=k_rule)

    def estimate_from_reports(self, reports: Any, groups: Any, grid: ProductGrid, *,
                              k_rule: str | None = None) -> Estimate:
        """The aggregator's computation (O(n + m^2 k^2)) from the reports alone."""
        k, m = grid.size, grid.n_groups
        reports = as_int_array(reports, "reports")
        groups = as_int_array(groups, "groups")
        if reports.min() < 0 or reports.max() >= k:
            raise ValueError(f"reports must be cell codes in 0..{k - 1}")
        if groups.size != reports.size or groups.min() < 0 or groups.max() >= m:
            raise ValueError(f"groups must hold one public group in 0..{m - 1} per report")
        if reports.size < 2:
            raise ValueError("at least two parties must report")
        counts = np.bincount(groups * k + reports, minlength=m * k).reshape(m, k)
        return self.estimate_from_counts(counts, grid, k_rule=k_rule)

    def estimate_from_counts(self, counts: Any, grid: ProductGrid, *,
                             k_rule: str | None = None) -> Estimate:
        """The aggregator's computation from the ``(m, k)`` histogram of (group, report).

        Everything the estimator needs from the reports is this histogram (module
        docstring), a sum over parties: a distributed server adds the batches' histograms
        and calls this with the total.
        """
        k, m = grid.size, grid.n_groups
        counts = as_int_array(np.asarray(counts).reshape(-1), "counts")
        if counts.size != m * k or counts.min() < 0:
            raise ValueError(f"counts must be {m * k} non-negative report counts (m = {m} "
                             f"groups x k = {k} cells)")
        counts = counts.reshape(m, k)
        n = int(counts.sum())
        if n < 2:
            raise ValueError("at least two parties must report")
        qk = self.quantized_kernel_for(grid)
        krr = self.randomizer_for(grid)
        beta = krr.beta
        pairs = n * (n - 1) / 2.0
        u = pair_sum(counts, qk.matrices, beta) / pairs
        # The variance is the exact formula of 001 App. A.1 (pair_sum_variance) at the
        # parties' true histogram h, a cubic polynomial V(h). At the unbiased report
        # histogram h_hat, E V(h_hat) = V(h) + (1/2) tr(H Cov(h_hat)) to second order (H
        # its Hessian; the cubic's third-order term is small), a positive term of order
        # 1 / (n eps^2): the plain plug-in leans high (tied scores on 12 cells, n = 4000,
        # eps = 0.25: s.e. 0.25 against 0.20, coverage 0.99). That term is subtracted
        # (variance_plug_in_bias, itself at h_hat): mean s.e. 0.198 against 0.198 there,
        # 0.409 against 0.414 at n = 300, eps = 0.5. In the rare run where the
        # correction leaves no positive variance (4% at n = 300, eps = 0.5; none at
        # n = 4000), the plain plug-in (the larger of its values at the unbiased and the
        # clipped histogram) is used.
        unbiased = debiased_histogram(counts, beta, clip=False)
        linear, pair = _variance_terms(unbiased, qk.matrices, beta)
        corrected = linear + pair - variance_plug_in_bias(unbiased, qk.matrices, beta)
        if corrected > 0.0:
            var_u = corrected / pairs**2
            variance_method = "bias-corrected"
        else:
            clipped = debiased_histogram(counts, beta)
            var_u = max(pair_sum_variance(unbiased, qk.matrices, beta),
                        pair_sum_variance(clipped, qk.matrices, beta)) / pairs**2
            variance_method = "plain plug-in"
        u_se = math.sqrt(max(var_u, 0.0))

        group_counts = counts.sum(axis=1)
        public = _grouped_public(grid, group_counts)
        # U_hat - U is a sum over the n parties of independent report terms plus a
        # degenerate pair term (001 App. A.1); the normal law is the CLT for that sum
        # (Hoeffding 1948 for the U-statistic form). The interval is for the U-statistic
        # of the quantized data; the quantization error is bounded apart (Thm 2), and for
        # the AUC of continuous scores the default k makes it negligible (auc_bins). Renyi-2's
        # -ln U clips U into [1/C(n,2), 1] first and maps U's interval (statistic_release).
        release = statistic_release(self.kernel, u, NormalError(u_se), public)

        diagnostics: dict[str, Any] = {
            "k": k, "bins": grid.bins, "k_rule": k_rule or self.k_rule,
            "beta": beta, "keep_probability": krr.keep_probability,
            "quantizer": grid.quantizer, "quantized_kernel": qk.method,
            "quantized_kernel_exact": qk.exact, "u_statistic": u, "u_std_error": u_se,
            "std_error_method": ("exact variance given the quantized data (001 App. A.1) at "
                                 "the unbiased report histogram, less its second-order "
                                 f"plug-in bias ({variance_method})"),
            "party_noise": self.noise.kind if self.noise is not None else "simulation",
        }
        if qk.accuracy is not None:
            diagnostics["quantized_kernel_accuracy"] = qk.accuracy
        if grid.has_public:
            diagnostics["group_counts"] = group_counts.tolist()
        else:
            diagnostics["theorem1_variance_bound"] = theorem1_variance_bound(
                n, k, self.epsilon, self.kernel.output_range)
            lip = self.plan.unit_lipschitz()
            if lip is not None and grid.quantizer == "round" and not grid.is_discrete:
                diagnostics["theorem2_mse_bound"] = theorem2_mse_bound(
                    n, k, self.epsilon, lipschitz=lip, output_range=self.kernel.output_range)
        if qk.spread is not None:
            # Remark 4: Delta is a U-statistic of the quantized data, estimated from the
            # same reports (post-processing); exact 0 on discrete cells.
            delta = pair_sum(counts, qk.spread, beta) / pairs if not grid.is_discrete else 0.0
            diagnostics["quantization_delta_estimate"] = delta
            diagnostics["quantization_error_bound_estimate"] = (
                qk.error_factor * math.sqrt(max(delta, 0.0)))
        operations = n + m * m * k * k
        # In range on every transport: the clip is part of the server's release step.
        return release.estimate(self.kernel, public, protocol=self.name,
                                privacy=self.guarantee,
                                cost=Cost(server_operations=int(operations)),
                                diagnostics=diagnostics)


    # ------------------------------------------------ distributed server step (hooks)
    # The server's work on a round's messages is a sum over parties (the number of
    # check-ins, then the (group, report) histogram), so a distributed engine reduces the
    # batches' summaries and runs the last step on the total (fedustat.runtime.engine).

    def distributed_round(self, state: _ServerState) -> tuple[str, Any]:
        """How the server step on this round's messages splits: a reduction, with the
        public bins the batches need to summarize their reports (None before they are
        fixed)."""
        return "reduce", None if state.bins is None else dict(state.bins)

    def summarize_batch(self, message: Message, context: Any, memory: Any = None) -> Any:
        """A batch's share of the server's work: its number of check-ins, or its
        ``(m, k)`` histogram of (public group, report), validated as the server would."""
        if "join" in message.fields:
            return {"join": np.int64(len(message.parties if message.parties is not None
                                         else message.fields["join"]))}
        if context is None:
            raise RuntimeError("reports arrived before the number of bins was fixed")
        grid = self.plan.grid(context)
        k, m = grid.size, grid.n_groups
        reports = as_int_array(message.fields["report"], "reports")
        groups = as_int_array(message.fields.get("public", np.zeros(reports.size)), "groups")
        if reports.size and (reports.min() < 0 or reports.max() >= k):
            raise ValueError(f"reports must be cell codes in 0..{k - 1}")
        if groups.size != reports.size or (groups.size and (groups.min() < 0
                                                           or groups.max() >= m)):
            raise ValueError(f"groups must hold one public group in 0..{m - 1} per report")
        return {"counts": np.bincount(groups * k + reports, minlength=m * k).reshape(m, k)}

    @staticmethod
    def combine_summaries(left: Any, right: Any) -> Any:
        """Sum of two batches' summaries (associative and commutative: integer sums)."""
        if left.keys() != right.keys():
            raise ValueError("summaries of different rounds cannot be combined")
        return {key: left[key] + right[key] for key in left}

    def server_step_reduced(self, state: _ServerState, summary: Any,
                            rng: np.random.Generator) -> tuple[_ServerState, Message | Estimate]:
        """:meth:`server_step` from the combined summary of all batches."""
        if "join" in summary:
            n = int(summary["join"])
            return self._fix_bins(state, n)
        if state.bins is None:
            raise RuntimeError("reports arrived before the number of bins was fixed")
        return state, self.estimate_from_counts(summary["counts"], self.plan.grid(state.bins),
                                                k_rule=state.k_rule)


def _grouped_public(grid: ProductGrid, group_counts: np.ndarray) -> PublicData:
    """n and the public columns as (value of each group, number of its parties): the
    server's histogram already holds them, so a server of 10^9 parties needs no n-entry
    label column (``grid.public_data`` repeats each group's values by its count)."""
    counts = np.asarray(group_counts, dtype=np.int64)
    if not grid.has_public:
        return PublicData(int(counts.sum()))
    values = grid.group_values()
    grouped = {col.name: values[:, j] for j, col in enumerate(grid.public)}
    return PublicData(int(counts.sum()), grouped=grouped, weights=counts)


def evaluate_quantization(protocol: QuantizedRandomizedResponse, data: Any, *,
                          rng: RandomLike = None) -> dict[str, float]:
    """Quantization error on the parties' true data: an evaluation tool, not a protocol step.

    The aggregator never sees these numbers (they need every party's true record). For a
    simulation it reports the exact U-statistic ``u_exact`` of f, the U-statistic
    ``u_quantized`` of the quantized kernel on the quantized data (what the protocol
    estimates without bias), their difference, and Remark 4's empirical Delta with the
    bound ``factor * sqrt(Delta)`` on the difference (001 eq. 13; factor 1 for A^Mid).
    Randomized rounding is drawn once with ``rng``.
    """
    if not isinstance(protocol, QuantizedRandomizedResponse):
        raise TypeError("protocol must be a QuantizedRandomizedResponse")
    records = protocol.kernel.check_data(data)
    n = records.shape[0]
    grid = protocol.grid_for(n)
    qk = protocol.quantized_kernel_for(grid)
    cells = grid.encode(records, as_noise(rng))
    groups = grid.groups(records)
    k, m = grid.size, grid.n_groups
    counts = np.bincount(groups * k + cells, minlength=m * k).reshape(m, k)
    pairs = n * (n - 1) / 2.0
    u_exact = ustatistic(protocol.kernel, records)
    u_quant = pair_sum(counts, qk.matrices, 0.0) / pairs
    out = {"u_exact": u_exact, "u_quantized": u_quant, "quantization_error": u_quant - u_exact}
    if qk.spread is not None:
        delta = pair_sum(counts, qk.spread, 0.0) / pairs
        out["delta"] = delta
        out["quantization_error_bound"] = qk.error_factor * math.sqrt(max(delta, 0.0))
    return out


def _ldp_quantized(kernel: Kernel, *, epsilon: float, delta: float = 0.0, k: Any = None,
                   bounds: Any = None, domain: Any = None, public_columns: Any = None,
                   quantizer: str = "round", quantized_kernel: str | None = None,
                   n_parties: int | None = None, lipschitz: float | None = None,
                   noise: NoiseSource | None = None,
                   max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
                   avg_tol: float = DEFAULT_AVG_TOL) -> QuantizedRandomizedResponse:
    # k-ary randomized response is pure epsilon-LDP; an allowed delta is not used.
    return QuantizedRandomizedResponse(
        kernel, epsilon, k=k, bounds=bounds, domain=domain, public_columns=public_columns,
        quantizer=quantizer, quantized_kernel=quantized_kernel, n_parties=n_parties,
        lipschitz=lipschitz, noise=noise, max_evaluations=max_evaluations, avg_tol=avg_tol)


register("ldp-quantized", _ldp_quantized, model=PrivacyModel.LOCAL,
         summary="quantize each record, k-ary randomized response, unbiased O(n + k^2) "
                 "estimate of the quantized U-statistic",
         source="000 Sec. 3, Alg. 1, Thm 1-2, Cor. 1; 001 App. A")
