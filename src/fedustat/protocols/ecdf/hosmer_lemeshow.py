"""The Hosmer-Lemeshow statistic, exact and differentially private (003 Sec. 5.2, Alg. 2, Thm 2).

Alg. 2: ``eps' = eps / (L + 9)``; the ECDF of the predictions uses ``Lap(1 / eps')`` per
node, i.e. it is ``(L + 1) eps'``-DP, and the ``4Q`` group statistics get ``Lap(1/eps')``
each (Thm 2 proof: 8 of them change, by at most 1 each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from scipy import stats as sps

from fedustat._validation import (
    RandomLike,
    as_binary_labels,
    as_float_array,
    check_bounds,
    check_consistent_length,
    check_epsilon,
    check_positive_float,
    check_positive_int,
)
from fedustat.privacy.errors import ErrorDistribution, LaplaceError, NormalError
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, trusted_curator
from fedustat.privacy.noise import NoiseSource, resolve_noise
from fedustat.protocols.base import Estimate
from fedustat.protocols.ecdf.quantiles import dp_quantile
from fedustat.protocols.ecdf.release import ECDF_GRID_LIMIT, PrivateECDF, dp_ecdf
from fedustat.stats.ecdf import (
    DyadicTree,
    absolute_grid,
)

__all__ = [
    "HL_ADJACENCY",
    "DPHosmerLemeshow",
    "check_grid_spacing",
    "check_groups",
    "dp_hosmer_lemeshow",
    "hosmer_lemeshow",
]


HL_ADJACENCY = "replace one record (prediction and label; n public)"


# ------------------------------------------------------------------ Hosmer-Lemeshow


def _hl_table(labels: np.ndarray, probs: np.ndarray, cuts: np.ndarray, n_groups: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Observed and expected counts per group, rows (negatives, positives) (003 Eq. 5).

    Group q (1-based) holds the records with ``t_{q-1} < M(x) <= t_q``, ``t_0 = -inf``.
    """
    group = np.searchsorted(cuts, probs, side="left")
    observed = np.vstack([np.bincount(group, weights=1.0 - labels, minlength=n_groups),
                          np.bincount(group, weights=labels, minlength=n_groups)])
    expected = np.vstack([np.bincount(group, weights=1.0 - probs, minlength=n_groups),
                          np.bincount(group, weights=probs, minlength=n_groups)])
    return observed, expected


def _hl_value(observed: np.ndarray, expected: np.ndarray) -> float:
    """``H = sum_q sum_s (O_sq - E_sq)^2 / E_sq`` (003 Eq. 5); an empty term (0/0) is 0."""
    num = (observed - expected) ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(num == 0.0, 0.0, num / expected)
    return float(np.sum(terms))


@dataclass(frozen=True)
class HosmerLemeshowTable:
    """The exact Hosmer-Lemeshow statistic for given group cut points."""

    statistic: float
    pvalue: float
    df: int
    cuts: np.ndarray
    observed: np.ndarray
    expected: np.ndarray


def _check_hl_inputs(y_true: Any, y_prob: Any, n_groups: Any, groups_name: str = "Q"
                     ) -> tuple[np.ndarray, np.ndarray, int]:
    labels = as_binary_labels(y_true, "y_true", require_both=False).astype(np.float64)
    probs = as_float_array(y_prob, "y_prob")
    check_consistent_length(y_true=labels, y_prob=probs)
    check_bounds(probs, (0.0, 1.0), "y_prob")
    n_groups = check_positive_int(n_groups, groups_name, minimum=3)
    return labels, probs, n_groups


def check_grid_spacing(gamma: Any, name: str = "gamma") -> float:
    """The spacing of the predictions' grid ``gamma, 2 gamma, ..., 1``: a number in (0, 1]
    whose grid of ``ceil(1 / gamma)`` points is within :data:`ECDF_GRID_LIMIT`."""
    spacing = check_positive_float(gamma, name)
    if spacing > 1.0:
        raise ValueError(f"{name}={gamma!r} is above 1: it is the spacing of the grid of "
                         "predicted probabilities in (0, 1] (e.g. 2**-10)")
    ECDF_GRID_LIMIT.check(math.ceil(1.0 / spacing - 1e-9), name)
    return spacing


def check_groups(n_groups: int, n_records: int, grid_points: int, name: str = "Q") -> None:
    """At most one group per record and per grid point: more groups than records (or than
    cut points the grid offers) leave groups empty by construction, and the chi-square law
    with ``Q - 2`` degrees of freedom (003 Eq. 5) then no longer describes the statistic."""
    if n_groups > n_records:
        raise ValueError(f"{name}={n_groups} groups for {n_records} records: some groups would "
                         f"be empty whatever the data; use at most {n_records} groups (10 is "
                         "customary, with several records expected in each)")
    if n_groups > grid_points:
        raise ValueError(f"{name}={n_groups} groups on a grid of {grid_points} predicted "
                         f"probabilities: the cut points come from that grid, so use at most "
                         f"{grid_points} groups or a finer grid (a smaller gamma)")


def hosmer_lemeshow(y_true: Any, y_prob: Any, cuts: Any) -> HosmerLemeshowTable:
    """The exact Hosmer-Lemeshow statistic for the groups cut at ``cuts`` (003 Eq. 5).

    ``Q = len(cuts) + 1`` groups: ``(-inf, t_1], (t_1, t_2], ..., (t_{Q-1}, 1]``;
    ``H = sum_q (O_1q - E_1q)^2 / E_1q + (O_0q - E_0q)^2 / E_0q`` with observed (O) and
    predicted (E) numbers of positives (1) and negatives (0); p-value from the chi-square
    distribution with ``Q - 2`` degrees of freedom. Empty groups add nothing.
    """
    t = as_float_array(cuts, "cuts")
    if np.any(np.diff(t) < 0):
        raise ValueError("cuts must be non-decreasing")
    labels, probs, n_groups = _check_hl_inputs(y_true, y_prob, t.size + 1)
    observed, expected = _hl_table(labels, probs, t, n_groups)
    h = _hl_value(observed, expected)
    return HosmerLemeshowTable(h, float(sps.chi2.sf(h, n_groups - 2)), n_groups - 2, t,
                               observed, expected)


@dataclass(frozen=True)
class DPHosmerLemeshow:
    """Result of :func:`dp_hosmer_lemeshow` (003 Alg. 2).

    Attributes
    ----------
    statistic:
        H as an :class:`Estimate` (value, guarantee, diagnostics).
    pvalue, df:
        Chi-square p-value of H with ``Q - 2`` degrees of freedom.
    cuts:
        The private group boundaries ``t_1 .. t_{Q-1}``.
    observed, expected:
        The released noisy ``O_{s,q}``, ``E_{s,q}`` (rows s = 0, 1), shape (2, Q).
    epsilon_prime:
        ``eps / (L + 9)``.
    ecdf:
        The private ECDF of the predictions the cuts came from.
    privacy:
        eps-DP in total (003 Thm 2).
    """

    #: Fields that depend on the data: the noisy ECDF, its quantiles and the noisy group
    #: statistics.
    released_fields: ClassVar[tuple[str, ...]] = ("cuts", "observed", "expected",
                                                  "statistic.value", "statistic.std_error",
                                                  "statistic.error", "statistic.error.*",
                                                  "statistic.diagnostics.*", "pvalue",
                                                  "ecdf.values")

    statistic: Estimate
    pvalue: float
    df: int
    cuts: np.ndarray
    observed: np.ndarray
    expected: np.ndarray
    epsilon_prime: float
    ecdf: PrivateECDF
    privacy: PrivacyGuarantee
    diagnostics: dict[str, Any] = field(default_factory=dict)

    @property
    def cell_error(self) -> ErrorDistribution:
        """Law of each released ``O_{s,q}`` or ``E_{s,q}`` minus its exact value on the
        released cuts: ``Lap(1 / eps')`` exactly (003 Alg. 2), zero for an exact table.

        The statistic H itself is a nonlinear function of the 4Q noisy cells (with the
        floors of Alg. 2); it is released without an interval.
        """
        if not self.privacy.is_pure:
            return NormalError(0.0)
        return LaplaceError(1.0 / self.epsilon_prime)


def dp_hosmer_lemeshow(y_true: Any, y_prob: Any, *, epsilon: float, Q: int = 10,
                       gamma: float = 2.0**-10, rng: RandomLike = None,
                       noise: NoiseSource | None = None) -> DPHosmerLemeshow:
    """An eps-DP Hosmer-Lemeshow statistic (003 Sec. 5.2, Alg. 2, Thm 2).

    1. The predictions' ECDF on the grid ``gamma, 2 gamma, ..., 1`` (N points,
       ``L = ceil(log2 N)``) with ``Lap(1/eps')`` per node, ``eps' = eps / (L + 9)``: it is
       ``(L + 1) eps'``-DP.
    2. Cut points ``t_q = F_hat^{-1}(q / Q)`` by Alg. 1 (:func:`dp_quantile`, the upper end
       of its final bracket: the smallest grid point whose private CDF reaches q/Q, so the
       groups are ``(t_{q-1}, t_q]`` as in the exact statistic; Alg. 1's midpoint differs by
       at most half a grid step). A noisy curve can give decreasing cuts; they are made
       non-decreasing (post-processing).
    3. The ``4Q`` group sums ``O_{1,q}`` (positives), ``O_{0,q}``, ``E_{1,q} = sum M(x)``,
       ``E_{0,q} = sum (1 - M(x))``, each plus ``Lap(1/eps')``. A replaced record leaves one
       group and joins one: 8 statistics change by at most 1 each, so they are
       ``8 eps'``-DP together, and the total is ``(L + 1) eps' + 8 eps' = eps`` (Thm 2).
    4. ``H`` from the noisy table. Post-processing for stability: counts are clipped at 0
       and expected counts below the noise scale ``1/eps'`` are raised to it before
       dividing (a denominator the noise can produce from nothing makes a term unbounded;
       003 Sec. 6.6 reports this blow-up on unbalanced data). p-value with ``Q - 2``
       degrees of freedom.

    With ``epsilon = inf`` no noise is added and H is the exact statistic for the exact
    cut points on the grid.

    Parameters
    ----------
    y_true:
        Binary labels.
    y_prob:
        Predicted probabilities of the positive class, in [0, 1].
    epsilon:
        Total budget (> 0) or ``math.inf``.
    Q:
        Number of groups (>= 3; 10 is customary), at most the number of records and of
        grid points.
    gamma:
        Grid spacing for the predictions' ECDF (precision of the cut points), in (0, 1],
        with at most ``2^20`` grid points (:data:`ECDF_GRID_LIMIT`).
    rng, noise:
        Seed / Generator, or a :class:`NoiseSource`.

    Returns
    -------
    DPHosmerLemeshow
        ``statistic`` (an :class:`~fedustat.protocols.base.Estimate` of H), ``pvalue``,
        ``df``, the cut points and the noisy group table.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y_prob = rng.uniform(0.2, 0.8, size=400)
    >>> y_true = (rng.uniform(size=400) < y_prob).astype(int)
    >>> hl = fedustat.protocols.ecdf.dp_hosmer_lemeshow(y_true, y_prob, epsilon=math.inf)
    >>> round(hl.statistic.value, 2), hl.df, round(hl.pvalue, 2)
    (5.62, 8, 0.69)
    """
    labels, probs, n_groups = _check_hl_inputs(y_true, y_prob, Q)
    eps = check_epsilon(epsilon, allow_inf=True)
    spacing = check_grid_spacing(gamma)
    tau = absolute_grid(spacing, 1.0, spacing)
    check_groups(n_groups, labels.size, tau.size)
    tree = DyadicTree(tau.size)
    eps_prime = eps / (tree.depth + 9)
    source = None if math.isinf(eps) else resolve_noise(rng, noise)
    # Alg. 2 is analysed with 003's tree noise (Thm 2): keep that release.
    curve = dp_ecdf(probs, tau, epsilon=tree.n_levels * eps_prime, method="003-tree",
                    noise=source) if source is not None else dp_ecdf(probs, tau,
                                                                      epsilon=math.inf)
    levels = np.arange(1, n_groups) / n_groups
    cuts = np.maximum.accumulate(dp_quantile(curve, levels, lower=0.0).upper)
    observed, expected = _hl_table(labels, probs, cuts, n_groups)
    diagnostics: dict[str, Any] = {"grid_points": int(tau.size), "L": tree.depth}
    if source is None:
        h = _hl_value(observed, expected)
        guarantee = PrivacyGuarantee.none()
    else:
        noise_scale = 1.0 / eps_prime
        observed = observed + source.laplace(noise_scale, observed.shape)
        expected = expected + source.laplace(noise_scale, expected.shape)
        obs_c = np.maximum(observed, 0.0)
        exp_c = np.maximum(expected, noise_scale)
        diagnostics.update(noise_scale=noise_scale,
                           floored_expected=int(np.count_nonzero(expected < noise_scale)),
                           noise_source=source.kind)
        h = float(np.sum((obs_c - np.maximum(expected, 0.0)) ** 2 / exp_c))
        guarantee = PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, HL_ADJACENCY,
                                     assumptions=(trusted_curator(),))
    df = n_groups - 2
    estimate = Estimate(value=h, quantity="hosmer_lemeshow", protocol="dp-ecdf-hl",
                        privacy=guarantee, diagnostics=diagnostics,
                        noise="none" if source is None else source.kind)
    return DPHosmerLemeshow(estimate, float(sps.chi2.sf(h, df)), df, cuts, observed,
                            expected, eps_prime, curve, guarantee, diagnostics)
