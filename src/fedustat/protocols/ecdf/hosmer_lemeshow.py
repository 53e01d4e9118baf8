"""The Hosmer-Lemeshow statistic, exact and differentially private (003 Sec. 5.2, Alg. 2, Thm 2).

Alg. 2: ``eps' = eps / (L + 9)``; the ECDF of the predictions uses ``Lap(1 / eps')`` per
node, i.e. it is ``(L + 1) eps'``-DP, and the ``4Q`` group statistics get ``Lap(1/eps')``
each (Thm 2 proof: 8 of them change, by at most 1 each).

The private test's statistic and p-value (:func:`noise_aware_statistic`,
:func:`bootstrap_pvalue`) are post-processing of that release: a Pearson statistic whose
per-group variance includes the known noise variance, and a parametric bootstrap of its
null law from the released table and the public noise law (docs/protocols/ecdf.md,
"Hosmer-Lemeshow").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from fedustat._lazy import lazy_module
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

sps = lazy_module("scipy.stats")

__all__ = [
    "HL_ADJACENCY",
    "HL_BOOTSTRAP_DRAWS",
    "DPHosmerLemeshow",
    "bootstrap_pvalue",
    "check_grid_spacing",
    "check_groups",
    "dp_hosmer_lemeshow",
    "hosmer_lemeshow",
    "noise_aware_statistic",
]


HL_ADJACENCY = "replace one record (prediction and label; n public)"
#: Draws of the private test's parametric bootstrap: the p-value ``(1 + k) / (1 + B)`` has
#: Monte Carlo standard deviation ``sqrt(p (1 - p) / B)``, 0.0022 at p = 0.05 and 0.0010 at
#: p = 0.01 (a few milliseconds for Q = 10).
HL_BOOTSTRAP_DRAWS = 9999
#: Bootstrap draws simulated at once (bounds the memory at ``4 Q`` floats per draw).
_BOOTSTRAP_BLOCK = 1000


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


# ------------------------------------------------------------------ the private test


def noise_aware_statistic(observed: np.ndarray, expected: np.ndarray, noise_scale: float
                          ) -> np.ndarray:
    """The private test's statistic ``T`` from noisy tables of shape (..., 2, Q).

    Per group q, ``Z_q = ((O_1q - E_1q) - (O_0q - E_0q)) / 2``: without noise it is
    ``O_1q - E_1q`` (``O_0q + O_1q = E_0q + E_1q = n_q``), and averaging the two rows halves
    the noise, which adds ``Lap(b)`` to four cells: ``Var = 4 * 2 b^2 / 4 = 2 b^2``. Under
    calibration ``O_1q - E_1q`` has variance ``sum p (1 - p) <= E_1q E_0q / n_q``, the
    variance of 003 Eq. 5's term: ``(O_1 - E_1)^2 / E_1 + (O_0 - E_0)^2 / E_0
    = (O_1 - E_1)^2 n_q / (E_1 E_0)``. So

        ``T = sum_q Z_q^2 / (W_q + 2 b^2)``,  ``W_q = E_1q+ E_0q+ / (E_1q+ + E_0q+)``

    with the noisy expected counts clipped at 0 (``W_q = 0`` for an empty group). With
    ``b = 0`` it is 003 Eq. 5's H; with noise, each denominator is at least the known noise
    variance ``2 b^2``, so a noisy expected count near or below 0 cannot blow a term up (the
    Alg. 2 statistic's failure, 003 Sec. 6.6). Post-processing of the release only.
    """
    obs = np.asarray(observed, dtype=np.float64)
    exp = np.asarray(expected, dtype=np.float64)
    diff = 0.5 * ((obs[..., 1, :] - exp[..., 1, :]) - (obs[..., 0, :] - exp[..., 0, :]))
    pos = np.maximum(exp[..., 1, :], 0.0)
    neg = np.maximum(exp[..., 0, :], 0.0)
    size = pos + neg
    variance = np.divide(pos * neg, size, out=np.zeros_like(size), where=size > 0)
    return np.sum(diff**2 / (variance + 2.0 * noise_scale**2), axis=-1)


def _null_groups(observed: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group sizes and expected positives for the bootstrap's null, from the released
    table: ``n_q`` is the mean of its four noisy estimates (``O_0 + O_1``, ``E_0 + E_1``),
    rounded, at least 0; ``E_1q`` averages ``E_1``, ``O_1`` (equal in mean under the null)
    and ``n_q - E_0``, ``n_q - O_0``, clipped to ``[0, n_q]``."""
    sizes = np.maximum(np.rint(0.5 * (observed.sum(axis=0) + expected.sum(axis=0))), 0.0)
    positives = 0.25 * (observed[1] + expected[1] - observed[0] - expected[0]) + 0.5 * sizes
    return sizes.astype(np.int64), np.clip(positives, 0.0, sizes)


def bootstrap_pvalue(observed: np.ndarray, expected: np.ndarray, noise_scale: float,
                     gen: np.random.Generator, draws: int = HL_BOOTSTRAP_DRAWS
                     ) -> tuple[float, float]:
    """``(T, p)``: the private test's statistic and its parametric-bootstrap p-value.

    The null hypothesis: given the predictions (and so the released cut points, which the
    labels do not affect), the labels are independent ``Bernoulli(M(x))``. Then ``O_1q`` is
    a sum of independent Bernoullis with mean ``E_1q``, whose law is not public (the
    per-record probabilities are private); the bootstrap draws it as
    ``Binomial(n_q, E_1q / n_q)``, which dominates every such sum in the convex order
    (Hoeffding 1956, Ann. Math. Statist. 27, Thm 3) and has the largest variance,
    ``E_1q E_0q / n_q``: the test errs on the conservative side. ``n_q`` and ``E_1q`` are
    read off the released table (:func:`_null_groups`), so the simulated null is a
    plug-in approximation: its size is measured by Monte Carlo (benchmarks/inference_hl.py,
    tests/test_hl_private_pvalue.py), not proved. Each draw then adds ``Lap(b)`` to
    the four cells of every group exactly as 003 Alg. 2 does and recomputes
    :func:`noise_aware_statistic`. ``p = (1 + #{T* >= T}) / (1 + B)`` (Davison and Hinkley
    1997, Bootstrap Methods, Sec. 4.2.1): counting the observed statistic among the draws
    keeps the p-value valid for any number of draws ``B``.

    Inputs are the released table, the public noise scale and the bootstrap's own
    generator: post-processing, no privacy cost.
    """
    observed = np.asarray(observed, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if observed.ndim != 2 or observed.shape[0] != 2 or expected.shape != observed.shape:
        raise ValueError(f"observed and expected must be released tables of shape (2, Q) "
                         f"(rows label 0, label 1), got {observed.shape} and {expected.shape}")
    if not (np.all(np.isfinite(observed)) and np.all(np.isfinite(expected))):
        raise ValueError("observed and expected must be finite (a released table has no "
                         "NaN or infinity)")
    noise_scale = check_positive_float(noise_scale, "noise_scale")
    draws = check_positive_int(draws, "draws")
    statistic = float(noise_aware_statistic(observed, expected, noise_scale))
    sizes, positives = _null_groups(observed, expected)
    rate = np.divide(positives, sizes, out=np.zeros_like(positives), where=sizes > 0)
    null_expected = np.stack([sizes - positives, positives])
    exceed, done = 0, 0
    while done < draws:
        block = min(_BOOTSTRAP_BLOCK, draws - done)
        pos = gen.binomial(sizes, rate, size=(block, sizes.size)).astype(np.float64)
        obs = np.stack([sizes - pos, pos], axis=1) + gen.laplace(0.0, noise_scale,
                                                                 (block, 2, sizes.size))
        exp = null_expected + gen.laplace(0.0, noise_scale, (block, 2, sizes.size))
        exceed += int(np.count_nonzero(noise_aware_statistic(obs, exp, noise_scale)
                                       >= statistic))
        done += block
    return statistic, (1.0 + exceed) / (1.0 + draws)


def _bootstrap_generator(source: NoiseSource) -> np.random.Generator:
    """The bootstrap's generator, seeded by 128 bits drawn from the release's source: a
    study's seeded ``rng`` makes the p-value reproducible; a deployment source seeds it
    from the OS CSPRNG. NumPy's fast generator suffices here (no record is protected by
    these draws: they only simulate the public noise law around public numbers), and a
    per-release seed keeps the Monte Carlo error independent across releases."""
    return np.random.default_rng(np.random.SeedSequence(
        [int(w) for w in source.integers(2**32, 4)]))


@dataclass(frozen=True)
class DPHosmerLemeshow:
    """Result of :func:`dp_hosmer_lemeshow` (003 Alg. 2).

    Attributes
    ----------
    statistic:
        The test statistic as an :class:`Estimate` (value, guarantee, diagnostics): with
        ``epsilon = inf`` 003 Eq. 5's H; with noise, :func:`noise_aware_statistic` (H with
        each group's variance increased by the known noise variance; 003 Alg. 2's floored
        H is kept in ``diagnostics["alg2_statistic"]``).
    pvalue:
        With ``epsilon = inf``, the chi-square p-value of H with ``Q - 2`` degrees of
        freedom; with noise, the parametric-bootstrap p-value of the noisy statistic under
        calibration (:func:`bootstrap_pvalue`), valid under the DP noise.
    df:
        ``Q - 2`` (the exact test's degrees of freedom).
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

        The statistic is a nonlinear function of the 4Q noisy cells; it is released with
        its p-value, without an interval.
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
    4. The test, post-processing of the noisy table: the statistic
       :func:`noise_aware_statistic` (H's Pearson terms with each group's variance plus the
       known noise variance ``2 / eps'^2``, so a noisy expected count near 0 cannot make a
       term unbounded, the blow-up 003 Sec. 6.6 reports) and its p-value from a parametric
       bootstrap of its null law (:func:`bootstrap_pvalue`: binomial group counts, the
       conservative choice, plus the release's Laplace noise drawn again;
       :data:`HL_BOOTSTRAP_DRAWS` draws from a generator seeded by ``rng``). Comparing a
       noisy H with the noiseless chi-square law instead rejects a calibrated model almost
       always at small eps. 003 Alg. 2's own H (noisy counts clipped at 0, expected counts
       raised to ``1/eps'``) is in ``statistic.diagnostics["alg2_statistic"]``.

    With ``epsilon = inf`` no noise is added: H is the exact statistic for the exact cut
    points on the grid, with its chi-square p-value on ``Q - 2`` degrees of freedom.

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
    df = n_groups - 2
    if source is None:
        h = _hl_value(observed, expected)
        pvalue = float(sps.chi2.sf(h, df))
        guarantee = PrivacyGuarantee.none()
    else:
        noise_scale = 1.0 / eps_prime
        observed = observed + source.laplace(noise_scale, observed.shape)
        expected = expected + source.laplace(noise_scale, expected.shape)
        h, pvalue = bootstrap_pvalue(observed, expected, noise_scale,
                                     _bootstrap_generator(source), HL_BOOTSTRAP_DRAWS)
        # 003 Alg. 2's own statistic, floored as 003 Sec. 6.6 needs: a diagnostic only.
        alg2 = float(np.sum((np.maximum(observed, 0.0) - np.maximum(expected, 0.0)) ** 2
                            / np.maximum(expected, noise_scale)))
        diagnostics.update(noise_scale=noise_scale,
                           floored_expected=int(np.count_nonzero(expected < noise_scale)),
                           noise_source=source.kind, alg2_statistic=alg2,
                           bootstrap_draws=HL_BOOTSTRAP_DRAWS)
        guarantee = PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, HL_ADJACENCY,
                                     assumptions=(trusted_curator(),))
    estimate = Estimate(value=h, quantity="hosmer_lemeshow", protocol="dp-ecdf-hl",
                        privacy=guarantee, diagnostics=diagnostics,
                        noise="none" if source is None else source.kind)
    return DPHosmerLemeshow(estimate, pvalue, df, cuts, observed,
                            expected, eps_prime, curve, guarantee, diagnostics)
