"""Standard deviations of the FedAUC estimates: the paper's formulas and corrected ones.

Source "004": Sun et al., *Differentially Private AUC Computation in Vertical Federated
Learning* (file ``004_50b83c7ff644f2ca.txt``). Notation: M samples, P positives,
N = M - P negatives, ranks r_i in 0..M-1 (App. H.2; mid-ranks under ties), K clients,
``AUC = (G - P(P-1)/2) / (P N)`` with ``G = sum_i r_i y_i`` (eq. 1 / eq. 6).

The paper's formulas all assume that P and N are known exactly:

* :func:`rr_std_eq7` (App. I, eq. 7): RR, ``Var = rho(1-rho) sum r_i^2 / (P N)^2``;
* :func:`global_laplace_std_eq8` (App. N, eq. 8): GlobalLaplace, ``2 K (M-1)^2 / (P N eps)^2``;
* :func:`local_laplace_std_eq9` (App. O, eq. 9): LocalLaplace with K = M,
  ``K(K-1)(2K-1) / (3 (P N eps)^2)``.

Eq. 8-9 take ``eps`` as the budget spent on localSum (the released counts are exact).
Eq. 7 computes ``Var(G) / (P N)^2``: the variance of the noisy-label rank sum scaled by
the true counts, which is *not* the variance of the released, debiased AUC. The
released RR estimate divides by ``1 - alpha - beta`` and uses the noisy counts P-bar,
N-bar (004 Sec. 4.3, Alg. 3); :func:`rr_linearized_std` linearizes that estimator in the
flipped labels, counts included (derivation in ``docs/protocols/fedauc.md``):

    A_clean = g(S, P_bar),   S = sum_i r_i y'_i,   P_bar = sum_i y'_i,
    Var(A_clean) ~= rho(1-rho) sum_i (g_S r_i + g_P)^2
                  = rho(1-rho) (g_S^2 sum r^2 + 2 g_S g_P sum r + g_P^2 M)

because the flipped labels y'_i are independent with variance rho(1-rho) whatever y_i.
:func:`laplace_linearized_std` does the same for the Laplace / Gaussian estimates, whose
noise enters G and P-bar additively (possibly correlated, as in the adaptive allocation
of Sec. 5.3).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from fedustat._validation import check_epsilon, check_positive_int

__all__ = [
    "auc_from_sums",
    "auc_gradient",
    "flip_probability",
    "global_laplace_std_eq8",
    "laplace_linearized_std",
    "local_laplace_std_eq9",
    "rr_debias_terms",
    "rr_debiased_auc",
    "rr_linearized_std",
    "rr_std_corrected",
    "rr_std_eq7",
]


def _class_counts(n_samples: Any, n_pos: Any) -> tuple[int, int, int]:
    m = check_positive_int(n_samples, "n_samples", minimum=2)
    p = check_positive_int(n_pos, "n_pos")
    if p >= m:
        raise ValueError(f"n_pos must be < n_samples ({m}) so that both classes are present, "
                         f"got {p}")
    return m, p, m - p


def _check_count(value: Any, name: str, n_samples: int) -> float:
    x = float(value)
    if not 0.0 < x < n_samples:
        raise ValueError(f"{name} must be in (0, n_samples={n_samples}) for the AUC formula "
                         f"(both classes present), got {value!r}")
    return x


def flip_probability(epsilon: float) -> float:
    """``rho = 1 / (1 + e^eps)``: randomized response's flip probability (004 eq. 2).

    ``epsilon = inf`` gives 0 (no flipping). Written with ``e^-eps`` so large budgets do
    not overflow.
    """
    eps = check_epsilon(epsilon, allow_inf=True)
    if math.isinf(eps):
        return 0.0
    em = math.exp(-eps)
    return em / (1.0 + em)


# ------------------------------------------------------------------ paper formulas


def rr_std_eq7(n_samples: int, n_pos: int, epsilon: float) -> float:
    """004 App. I, eq. 7: ``sqrt(e^eps / (1+e^eps)^2 * M(M-1)(2M-1)/6) / (P N)``.

    Exactly the standard deviation of ``sum_i r_i y'_i / (P N)`` (flipped labels, true
    counts, no debiasing) for untied ranks 0..M-1; see the module docstring for why it
    is not the standard deviation of the released RR estimate
    (:func:`rr_std_corrected`).
    """
    m, p, n = _class_counts(n_samples, n_pos)
    rho = flip_probability(epsilon)
    sum_r2 = (m - 1) * m * (2 * m - 1) / 6.0
    return math.sqrt(rho * (1.0 - rho) * sum_r2) / (p * n)


def global_laplace_std_eq8(n_samples: int, n_pos: int, n_clients: int,
                           epsilon: float) -> float:
    """004 App. N, eq. 8: ``sqrt(2 K) (M - 1) / (P N eps)``.

    GlobalLaplace with exact counts: each of the K clients adds ``Lap((M-1)/eps)`` to its
    localSum. ``epsilon`` is the localSum budget (``alpha * eps`` in the protocol). The
    text before eq. 8 prints ``sqrt(2K(M-1))``; eq. 8 itself (variance
    ``2K(M-1)^2 / (PN eps)^2``) and Table 2 (1.10e-2 at K = M, eps = 1) give the form
    implemented here.
    """
    m, p, n = _class_counts(n_samples, n_pos)
    k = check_positive_int(n_clients, "n_clients")
    eps = check_epsilon(epsilon)
    return math.sqrt(2.0 * k) * (m - 1) / (p * n * eps)


def local_laplace_std_eq9(n_samples: int, n_pos: int, epsilon: float) -> float:
    """004 App. O, eq. 9: ``sqrt(K(K-1)(2K-1)/3) / (P N eps)`` with K = M.

    LocalLaplace with one sample per client and exact counts: the client of rank r adds
    ``Lap(r / eps)`` (its sensitivity is its rank), so ``Var(G) = sum_r 2 r^2 / eps^2``.
    ``epsilon`` is the localSum budget.
    """
    m, p, n = _class_counts(n_samples, n_pos)
    eps = check_epsilon(epsilon)
    return math.sqrt(m * (m - 1) * (2 * m - 1) / 3.0) / (p * n * eps)


# ------------------------------------------------------------------ linearization


def auc_from_sums(global_sum: float, n_pos: float, n_samples: int) -> float:
    """004 eq. 1 with a real-valued positive count: ``(G - P(P-1)/2) / (P (M - P))``."""
    m = check_positive_int(n_samples, "n_samples", minimum=2)
    p = _check_count(n_pos, "n_pos", m)
    return (float(global_sum) - p * (p - 1.0) / 2.0) / (p * (m - p))


def auc_gradient(global_sum: float, n_pos: float, n_samples: int) -> tuple[float, float]:
    """Partial derivatives ``(dA/dG, dA/dP)`` of :func:`auc_from_sums`.

    ``dA/dG = 1 / (P N)`` and ``dA/dP = -((P - 1/2) + A (N - P)) / (P N)`` with
    ``N = M - P`` (N moves with P because ``localN = |Y_k| - localP``, 004 Alg. 4 line 25).
    """
    m = check_positive_int(n_samples, "n_samples", minimum=2)
    p = _check_count(n_pos, "n_pos", m)
    n = m - p
    a = (float(global_sum) - p * (p - 1.0) / 2.0) / (p * n)
    return 1.0 / (p * n), -((p - 0.5) + a * (n - p)) / (p * n)


def rr_debias_terms(noisy_pos: float, n_samples: int, epsilon: float) -> dict[str, float]:
    """Debiasing constants of FedAUC_RR from the noisy positive count (004 Alg. 3, App. P).

    With ``rho = rho_+ = rho_- = 1/(1+e^eps)`` (Alg. 3 line 2):

    * ``P' = (P_bar (1 - rho) - N_bar rho) / (1 - 2 rho)``, ``N' = M - P'`` (App. P eq. 11);
    * ``pi' = P' / M`` (eq. 12);
    * ``alpha = (1-pi') rho / (pi' (1-rho) + (1-pi') rho)`` and
      ``beta = pi' rho / (pi' rho + (1-pi')(1-rho))`` (eq. 4 with pi', i.e. Alg. 3 lines
      6-7 with the stray ``pi`` of line 6 read as ``pi'``).

    The denominators of alpha and beta equal ``P_bar / M`` and ``N_bar / M``, so
    ``alpha = rho N' / P_bar``, ``beta = rho P' / N_bar`` and
    ``1 - alpha - beta = (1 - 2 rho) P' N' / (P_bar N_bar)``: the debiasing is defined
    exactly when ``0 < P' < M``.
    """
    m = check_positive_int(n_samples, "n_samples", minimum=2)
    p_bar = _check_count(noisy_pos, "noisy_pos", m)
    n_bar = m - p_bar
    rho = flip_probability(epsilon)
    p_est = (p_bar * (1.0 - rho) - n_bar * rho) / (1.0 - 2.0 * rho)
    n_est = m - p_est
    pi = p_est / m
    alpha = (1.0 - pi) * rho / (pi * (1.0 - rho) + (1.0 - pi) * rho)
    beta = pi * rho / (pi * rho + (1.0 - pi) * (1.0 - rho))
    return {"rho": rho, "P_est": p_est, "N_est": n_est, "pi_est": pi, "alpha": alpha,
            "beta": beta, "D": 1.0 - alpha - beta}


class RRDebiased(NamedTuple):
    """FedAUC_RR's debiased AUC at given sums (:func:`rr_debiased_auc`)."""

    value: float
    estimated_pos: float   # P' of App. P eq. 11, before projection
    projected_pos: float   # P' projected onto [1, M - 1]
    grad_sum: float        # dA / dS
    grad_pos: float        # dA / dP_bar


def rr_debiased_auc(global_sum: float, noisy_pos: float, n_samples: int,
                    epsilon: float) -> RRDebiased:
    """The debiased FedAUC_RR estimate and its gradient, defined for every noisy count.

    004 eq. 3 with alpha, beta of eq. 4 at pi' (App. P), multiplied out with the
    identities of :func:`rr_debias_terms` (``alpha P_bar N_bar = rho N' N_bar``,
    ``beta P_bar N_bar = rho P' P_bar``, ``D P_bar N_bar = (1 - 2 rho) P' N'``)::

        A = (S - P_bar (P_bar - 1) / 2 - rho (N' N_bar + P' P_bar) / 2) / ((1 - 2 rho) P' N')

    equals ``(A_noisy - (alpha + beta) / 2) / D`` wherever that is defined, and divides
    by ``P' N'`` only. The AUC needs both classes, so ``1 <= P <= M - 1``: ``P'`` is
    projected onto that interval (post-processing of the DP counts, never farther from
    P), which defines A for every ``P_bar`` in ``[0, M]``, where eq. 3 fails when P' or
    N' is <= 0 or when ``P_bar`` is 0 or M. The gradient (for
    :func:`rr_linearized_std`) is that of this form; a projected ``P'`` is constant in
    ``P_bar``.
    """
    m = check_positive_int(n_samples, "n_samples", minimum=2)
    p_bar = float(noisy_pos)
    if not 0.0 <= p_bar <= m:
        raise ValueError(f"noisy_pos must be in [0, n_samples={m}], got {noisy_pos!r}")
    n_bar = m - p_bar
    rho = flip_probability(epsilon)
    k = 1.0 - 2.0 * rho
    p_est = (p_bar - m * rho) / k    # App. P eq. 11: (P_bar (1-rho) - N_bar rho) / (1-2rho)
    p_proj = min(max(p_est, 1.0), m - 1.0)
    n_proj = m - p_proj
    dp = 1.0 / k if p_proj == p_est else 0.0   # dP'/dP_bar
    cross = n_proj * n_bar + p_proj * p_bar
    numerator = float(global_sum) - p_bar * (p_bar - 1.0) / 2.0 - rho * cross / 2.0
    denominator = k * p_proj * n_proj
    value = numerator / denominator
    dcross = dp * (p_bar - n_bar) + p_proj - n_proj
    dnumerator = -(p_bar - 0.5) - rho * dcross / 2.0
    ddenominator = k * dp * (n_proj - p_proj)
    return RRDebiased(value, p_est, p_proj, 1.0 / denominator,
                      (dnumerator - value * ddenominator) / denominator)


def rr_linearized_std(global_sum: float, noisy_pos: float, n_samples: int, rank_sum: float,
                      rank_sq_sum: float, epsilon: float) -> float:
    """Standard error of the debiased FedAUC_RR estimate, noisy counts and debiasing included.

    First-order (delta-method) expansion of ``A_clean(S, P_bar)`` (004 eq. 3-4, Alg. 2-3,
    App. P) in the flipped labels, evaluated at the given values:

    * ``g_S = 1 / (D P_bar N_bar)``;
    * ``g_P = (dA_noisy/dP_bar + (A_clean - 1/2)(dalpha/dP_bar + dbeta/dP_bar)) / D`` with
      ``dalpha/dP_bar = -c M (1-rho) / P_bar^2``, ``dbeta/dP_bar = c M (1-rho) / N_bar^2``,
      ``c = rho / (1 - 2 rho)``;
    * ``Var = rho(1-rho) (g_S^2 sum r^2 + 2 g_S g_P sum r + g_P^2 M)``.

    The gradient is taken from :func:`rr_debiased_auc`'s form of ``A_clean`` (equal to
    the above wherever ``0 < P' < M`` and ``0 < P_bar < M``), so the standard error is
    defined at every noisy count, with ``P'`` projected onto ``[1, M - 1]``.

    Parameters
    ----------
    global_sum, noisy_pos:
        ``S = sum_i r_i y'_i`` and ``P_bar = sum_i y'_i`` (released values, or their
        expectations for a theoretical value).
    n_samples:
        M.
    rank_sum, rank_sq_sum:
        ``sum_i r_i`` and ``sum_i r_i^2`` over all M samples (the server knows the ranks).
    epsilon:
        RR budget; ``inf`` gives 0.
    """
    m = check_positive_int(n_samples, "n_samples", minimum=2)
    rho = flip_probability(epsilon)
    if rho == 0.0:
        return 0.0
    debiased = rr_debiased_auc(global_sum, noisy_pos, m, epsilon)
    g_s, g_p = debiased.grad_sum, debiased.grad_pos
    quad = g_s**2 * float(rank_sq_sum) + 2.0 * g_s * g_p * float(rank_sum) + g_p**2 * m
    return math.sqrt(rho * (1.0 - rho) * max(quad, 0.0))


def rr_std_corrected(n_samples: int, n_pos: int, auc: float, epsilon: float) -> float:
    """:func:`rr_linearized_std` at the expected S and P-bar, for untied ranks 0..M-1.

    ``E[P_bar] = P (1-rho) + N rho`` and ``E[S] = rho sum r + (1 - 2 rho) sum_{pos} r``
    with ``sum_{pos} r = AUC P N + P(P-1)/2`` (eq. 1), so the standard deviation of the
    released estimate depends only on M, P, the AUC and epsilon (004 Sec. 6.2.1).
    """
    m, p, n = _class_counts(n_samples, n_pos)
    a = float(auc)
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"auc must be in [0, 1], got {auc!r}")
    rho = flip_probability(epsilon)
    rank_sum = m * (m - 1) / 2.0
    rank_sq_sum = (m - 1) * m * (2 * m - 1) / 6.0
    pos_rank_sum = a * p * n + p * (p - 1) / 2.0
    expected_sum = rho * rank_sum + (1.0 - 2.0 * rho) * pos_rank_sum
    expected_pos = p * (1.0 - rho) + n * rho
    return rr_linearized_std(expected_sum, expected_pos, m, rank_sum, rank_sq_sum, epsilon)


def laplace_linearized_std(global_sum: float, noisy_pos: float, n_samples: int,
                           var_sum: float, var_pos: float, cov_sum_pos: float = 0.0) -> float:
    """Standard error of ``A = (G - P(P-1)/2) / (P N)`` when G and P carry additive noise.

    Delta method (004 Sec. 5.1 step 4, Alg. 4 lines 30-33):
    ``Var(A) ~= g_G^2 Var(G) + 2 g_G g_P Cov(G, P) + g_P^2 Var(P)`` with the gradient of
    :func:`auc_gradient` at the given values. ``Var(G)`` is the summed variance of the
    clients' localSum noise, ``Var(P)`` that of their localP noise and ``Cov`` is non-zero
    when both reuse one draw (the adaptive allocation of Sec. 5.3).
    """
    g_g, g_p = auc_gradient(global_sum, noisy_pos, n_samples)
    for name, value in (("var_sum", var_sum), ("var_pos", var_pos)):
        if not (math.isfinite(value) and value >= 0.0):
            raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    var = g_g**2 * var_sum + 2.0 * g_g * g_p * cov_sum_pos + g_p**2 * var_pos
    return math.sqrt(max(var, 0.0))
