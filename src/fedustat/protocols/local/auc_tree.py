"""LDP AUC on hierarchical histograms: the protocol ``"ldp-tree"`` (000 Sec. 4; 001 App. B).

Every party holds a private integer score in ``[0, d-1]`` (``d = 2^alpha``) and a public
class label (000 Sec. 4 assumes the classes public). The parties of each class build,
through Hadamard-response frequency oracles, an unbiased estimate ``h^`` of the
hierarchical histogram of their scores (001 App. B.2, Alg. 2-3), and the server runs the
UAUC recursion of 000 Sec. 4 on the two estimated trees to estimate ``UAUC``; the
released AUC is ``UAUC^ / (n+ n-)``. One round, no interaction.

Recursion (issue 24). ``recursion="full"`` sums every node of the tree
(:func:`~fedustat.protocols.local.hierarchical.full_uauc`): unbiased for the AUC of the
scores on ``[0, d-1]`` (ties 1/2), with its exact variance, so the interval is normal and
calibrated. ``recursion="pruned"`` is 000 eq. 10: nodes whose estimated cross-class pairs
fall below a threshold are discarded, which lowers the variance but counts their
within-node pairs as 1/2 each, a bias (``E^G`` of 001 App. B.1) that the interval covers
only with a bound. The full recursion's noise product grows with ``d``, so ``"auto"``
(the default) takes it for ``d <= 2^12`` and the pruned one beyond, or when ``a`` or
``oracle="hadamard"`` (the paper as written) is asked for.

Frequency oracle per level (issue 15). ``oracle="hadamard"`` runs 001's one-bit Hadamard
response at every level, as described below. ``oracle="auto"`` (the default) takes, per
level, the one-bit Hadamard response or subset selection (Wang et al. 2016; Ye and Barg
2018; :mod:`fedustat.privacy.frequency_oracles`) whose exact node variance averaged over
the level is least among those never above the one-bit oracle's for any node
(:func:`level_oracles`); reports then travel as encoded oracle rows and the server keeps
each level's reducible summary (support counts or signed sums).

Party side (one message per party, pure, vectorized over a batch). Level ``l``
(``1..alpha``) of the tree is the frequency oracle over the ``2^l`` prefixes of length
``l``; a party *reports at level l* by running Hadamard response (001 Alg. 2) on its
prefix ``score >> (alpha - l)`` over the domain ``2^l``: it draws ``j`` uniformly from
``[0, 2^l)`` and sends ``j`` with one randomized sign bit. Which levels a party reports
at depends on the splitting strategy (001 App. B.2.2, Table 1):

* ``split="users"`` (default, pure epsilon-LDP): each party reports at one level, drawn
  uniformly from ``1..alpha`` with its own coins, with the whole budget epsilon (the
  paper's variant "assign each user to a level independently and uniformly"). The level
  does not depend on the score (its distribution is the same for every score), so it
  is sent in the clear; the exact check of the whole report ``(level, j, bit)``
  (:meth:`TreeReportRandomizer.output_distribution`) confirms epsilon-LDP.
* ``split="budget-basic"`` (pure epsilon-LDP): each party reports at every level with
  ``epsilon / alpha`` (basic composition).
* ``split="budget-advanced"`` ((epsilon, delta)-LDP): each party reports at every level
  with the largest ``epsilon_l`` whose ``alpha``-fold advanced composition is at most
  epsilon with slack ``delta`` (:func:`fedustat.privacy.accounting.per_step_budget_advanced`;
  001 uses the closed form ``epsilon / (sqrt(alpha)(1 + sqrt(2 log(1/delta))))``, a
  smaller choice). When ``epsilon / alpha`` is larger (few levels, large epsilon) basic
  composition is used and the release is pure epsilon-LDP; diagnostics say which.

Wire format (what the transport counts). ``split="users"``: ``label`` (1 bit, public),
``index`` (``alpha + 1`` bits: the level and ``j`` packed as ``2^level + j``, whose
leading one bit marks the level) and ``bit`` (1 bit): ``alpha + 3`` bits per party.
The budget splits: ``label`` (1 bit), ``j1 .. j{alpha}`` (``l`` bits for level ``l``) and
``bit`` (``alpha`` one-bit signs): ``1 + alpha (alpha + 1)/2 + alpha`` bits.

Server side. Node estimates (001 Alg. 3 with +-1 Hadamard entries, see
:class:`~fedustat.privacy.randomizers.HadamardResponse`): ``z_q = c sum_i (-1)^{<j_i,q> + b_i}``
over the reports of one class at one level, ``c = (e^eps_l + 1)/(e^eps_l - 1)``; with
``split="users"`` the level's reports come from about ``n/alpha`` parties and
``h^_q = alpha z_q``. A whole level is estimated at once with a fast Walsh-Hadamard
transform (O(n_l + 2^l l)) when that is cheaper than querying the requested nodes one
by one (O(|Q_l| n_l)); the choice is made per level from the two costs (a node query
per report measured about five times an FWHT butterfly element here) and the FWHT is
never used beyond ``2^22`` nodes.

Variance of a node estimate (derived exactly; it sets ``v+-`` of Theorem 3). A party's
contribution to ``z_q`` is ``c (-1)^{<j,q>+b}``: its square is ``c^2`` and its mean is
``1[prefix = q]``.

* budget splits: ``Var(h^_q) = n c_l^2 - h_q <= v = n c_l^2``;
* users split: the party contributes ``alpha c (-1)^{<j,q>+b}`` with probability
  ``1/alpha`` (its level is ``l``) and 0 otherwise; the second moment is
  ``alpha c^2`` and the mean ``1[prefix = q]``, so
  ``Var(h^_q) = alpha n c^2 - h_q <= v = alpha n c^2``. This includes the subsampling
  error (which parties land on level ``l``).

Either way ``v = C n alpha`` as in 000 Thm 3 with ``C = c^2`` (users) or
``C = c_l^2 / alpha`` (budget). 001 Lemma 5 states ``4 n e^eps/(e^eps - 1)^2 = n(c^2 - 1)``,
which omits the ``n - h_q`` part of the exact variance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import (
    RandomLike,
    RecordCheck,
    RecordCheckError,
    as_binary_labels,
    as_float_array,
    check_delta,
    check_epsilon,
    check_positive_int,
)
from fedustat.privacy.accounting import per_step_budget_advanced
from fedustat.privacy.errors import BoundedBias, ErrorDistribution, NormalError
from fedustat.privacy.frequency_oracles import SubsetSelection, subset_selection_moments
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, local_only
from fedustat.privacy.noise import NoiseSource, SimulationNoise, as_noise
from fedustat.privacy.randomizers import (
    FrequencyOracle,
    HadamardResponse,
    LocalRandomizer,
    OracleSummary,
    fwht,
)
from fedustat.protocols.base import (
    Cost,
    DropoutRule,
    Estimate,
    Message,
    Protocol,
    Role,
    in_statistic_range,
    normal_std_error,
)
from fedustat.protocols.local.hierarchical import (
    LevelNoise,
    check_domain,
    check_scores,
    full_uauc,
    pruned_uauc,
)
from fedustat.protocols.local.quantization import ColumnGrid
from fedustat.protocols.registry import register
from fedustat.stats.kernels import Kernel

optimize = lazy_module("scipy.optimize")

__all__ = [
    "DEFAULT_MAX_REPORT_BITS",
    "FULL_RECURSION_MAX_D",
    "ORACLE_CHOICES",
    "RECURSIONS",
    "SPLITS",
    "LdpAucTree",
    "LevelEstimates",
    "TreeReportRandomizer",
    "level_budget",
    "level_noise",
    "level_oracles",
    "node_variance_bound",
    "optimal_a",
    "report_bits_per_party",
    "theorem3_mse_bound",
]

SPLITS = ("users", "budget-basic", "budget-advanced")
# "auto": per level, the frequency oracle of least exact variance (see level_oracles);
# "hadamard": 001's one-bit Hadamard response at every level (the paper as written);
# "subset-selection": the k-subset mechanism at every level.
ORACLE_CHOICES = ("auto", "hadamard", "subset-selection")
# Largest per-level report with oracle="auto" or "subset-selection": a k-subset travels as
# k entries of alpha bits, so k <= max_report_bits / alpha (the one-bit Hadamard response,
# two entries, is always allowed).
DEFAULT_MAX_REPORT_BITS = 64
ADJACENCY = "any two scores of one party; labels public"
# Bins used when real scores come with public bounds but no d. The unbiased (full)
# recursion's noise product grows with d, the binning error shrinks about as 1/d^2 on
# smooth laws: 2^6 bins measured a gap of at most 6e-4 in AUC on skewed laws (docs/
# protocols/ldp-tree.md). (000 Fig. 3 uses 2^10 with the pruned recursion.)
DEFAULT_BINNED_DOMAIN = 1 << 6
# The FWHT holds 2^l floats (and a copy per butterfly pass); past 2^22 nodes query nodes.
FWHT_MAX_LEVEL = 22
# Measured cost of one (queried node, report) sign in HadamardResponse.estimate_frequency
# relative to one element of one FWHT butterfly pass (about 1.2e-8 s vs 2.3e-9 s here).
NODE_QUERY_COST = 5.0
# Exact enumeration of a party's report distribution is for small domains only.
MAX_ENUMERATED_OUTPUTS = 1 << 22
# "full": every node of the tree, unbiased (hierarchical.full_uauc); "pruned": 000 eq. 10,
# whose discarded nodes bias the estimate (E^G of 001 App. B.1); "auto": full up to
# FULL_RECURSION_MAX_D, pruned beyond (the product of the two classes' noises grows
# with the number of nodes, d: see docs/protocols/ldp-tree.md).
RECURSIONS = ("auto", "full", "pruned")
FULL_RECURSION_MAX_D = 1 << 12


def _check_recursion(recursion: Any) -> str:
    if recursion not in RECURSIONS:
        raise ValueError(f"recursion must be one of {', '.join(map(repr, RECURSIONS))}, "
                         f"got {recursion!r}")
    return str(recursion)


def level_noise(oracle: FrequencyOracle) -> LevelNoise:
    """The report moments ``(m1, m0, c1, c0)`` of a level's oracle (:class:`LevelNoise`).

    Hadamard response: ``E[R_q R_q'] = c^2 E[(-1)^<j, q xor q'>] = 0`` for ``q != q'``
    (``j`` uniform; 001 Lemma 6). Subset selection with inclusion probabilities ``p``
    (the input) and ``q`` (any other value) and ``R_v = (1[v in S] - q)/(p - q)``:
    ``c1 = p ((k-1)/(d-1) - q) / (p-q)^2`` (``P(x, v in S) = p (k-1)/(d-1)``) and
    ``c0 = (P2 - q^2)/(p-q)^2`` with ``P2 = (p (k-1)(k-2) + (1-p) k (k-1)) / ((d-1)(d-2))``
    the probability that two given other values are both in ``S``.
    """
    m1, m0 = oracle.report_moments
    if not isinstance(oracle, SubsetSelection):
        return LevelNoise(float(m1), float(m0))
    d, k = oracle.d, oracle.k
    p, q, _, _ = (float(np.asarray(v).item())
                  for v in subset_selection_moments(d, oracle.epsilon, k))
    gap_sq = (p - q) ** 2
    c1 = p * ((k - 1) / (d - 1) - q) / gap_sq
    c0 = 0.0
    if d > 2:
        both = (p * (k - 1) * (k - 2) + (1 - p) * k * (k - 1)) / ((d - 1) * (d - 2))
        c0 = (both - q * q) / gap_sq
    return LevelNoise(float(m1), float(m0), float(c1), float(c0))


def _check_split(split: Any) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(map(repr, SPLITS))} "
                         f"(001 App. B.2.2, Table 1), got {split!r}")
    return str(split)


def _check_oracle(oracle: Any) -> str:
    if oracle not in ORACLE_CHOICES:
        raise ValueError(f"oracle must be one of {', '.join(map(repr, ORACLE_CHOICES))}, "
                         f"got {oracle!r}")
    return str(oracle)


def level_oracles(alpha: int, epsilon_level: float, oracle: str = "auto",
                  max_report_bits: int | None = DEFAULT_MAX_REPORT_BITS,
                  split: str = "users") -> list[FrequencyOracle]:
    """The frequency oracle of each level ``1..alpha`` (level ``l`` over ``2^l`` nodes).

    ``"hadamard"``: 001's one-bit Hadamard response everywhere. ``"subset-selection"``:
    the k-subset mechanism with the ``k <= max_report_bits / alpha`` of least exact node
    variance averaged over the level's nodes (:func:`_mean_per_report`; with the split's
    subsampling). ``"auto"``: per level, among the Hadamard response and subset selection
    with such a ``k`` whose report moments ``(m1, m0)`` are both at most the Hadamard
    response's ``c^2``, the one of least average exact variance. A node's variance is
    linear in its count with these moments as coefficients (:func:`_level_variance`), so
    with that restriction every node's variance is at most what 001's oracle gives, for
    any data (and so is ``v``: Theorem 3, the pruning); among those the average decides:
    subset selection on the small levels, more of them as epsilon grows, the Hadamard
    response where no such ``k`` fits the bit budget.

    (Choosing by the average alone lowers the average further but raises the variance
    of nodes holding most parties; on 001's auc_one data, where every party of a class
    sits in one leaf, that was measured to cost accuracy. docs/protocols/ldp-tree.md.)
    """
    alpha = check_positive_int(alpha, "alpha")
    epsilon_level = check_epsilon(epsilon_level, "epsilon_level")
    oracle = _check_oracle(oracle)
    split = _check_split(split)
    if max_report_bits is not None:
        max_report_bits = check_positive_int(max_report_bits, "max_report_bits")
    out: list[FrequencyOracle] = []
    for level in range(1, alpha + 1):
        d = 1 << level
        hadamard = HadamardResponse(d, epsilon_level)
        if oracle == "hadamard":
            out.append(hadamard)
            continue
        # Report entries travel with alpha bits (the deepest level's values).
        cap = d - 1 if max_report_bits is None else min(d - 1, max_report_bits // alpha)
        if cap < 1:
            if oracle == "subset-selection":
                raise ValueError(f"max_report_bits={max_report_bits} cannot hold one "
                                 f"{alpha}-bit value")
            out.append(hadamard)
            continue
        ks = np.arange(1, cap + 1)
        _, _, m1, m0 = subset_selection_moments(d, epsilon_level, ks)
        values = _mean_per_report(m1, m0, alpha, split, d)
        if oracle == "auto":
            # Both report moments at most the one-bit oracle's: every node's variance
            # (linear in its count, see _level_variance) is then at most 001's, for any data.
            c2 = hadamard.report_moments[0]
            worst_ok = (m1 <= c2) & (m0 <= c2)
            if not worst_ok.any():
                out.append(hadamard)
                continue
            values = np.where(worst_ok, values, np.inf)
        best = int(np.argmin(values))
        if oracle == "auto" and _mean_per_report(*hadamard.report_moments, alpha,
                                                 split, d) <= values[best]:
            out.append(hadamard)
        else:
            out.append(SubsetSelection(d, epsilon_level, int(ks[best])))
    return out


def _mean_per_report(m1: Any, m0: Any, alpha: int, split: str, d: int) -> Any:
    """The exact node variance of a level of ``d`` nodes averaged over its nodes, divided
    by ``n``: the variance is linear in the count and the counts sum to ``n``, so the
    average is the variance at the count ``n/d``, whatever the data (vectorized)."""
    frac = 1.0 / d
    if split == "users":
        return alpha * (frac * np.asarray(m1) + (1 - frac) * np.asarray(m0)) - frac
    return frac * (np.asarray(m1) - 1) + (1 - frac) * np.asarray(m0)


def _bound_per_report(m1: Any, m0: Any, alpha: int, split: str) -> Any:
    """:func:`_level_bound` divided by ``n`` (vectorized over oracles)."""
    if split == "users":
        return np.maximum(alpha * np.asarray(m0), alpha * np.asarray(m1) - 1.0)
    return np.maximum(m0, np.asarray(m1) - 1.0)


def _level_bound(oracle: FrequencyOracle, n: int, alpha: int, split: str) -> float:
    """Largest variance of a node estimate of this level over all data (``n`` parties).

    With ``(m1, m0)`` the oracle's report moments, a budget split gives
    ``n_v (m1 - 1) + (n - n_v) m0``; the users split, where a party reports here with
    probability ``1/alpha`` and its contribution is scaled by ``alpha``, gives
    ``alpha (n_v m1 + (n - n_v) m0) - n_v``. Both are linear in the count ``n_v``, so
    the largest is at ``n_v = 0`` or ``n_v = n``.
    """
    return n * float(_bound_per_report(*oracle.report_moments, alpha, split))


def _level_variance(oracle: FrequencyOracle, n: int, alpha: int, split: str,
                    counts: np.ndarray) -> np.ndarray:
    """Exact variance of node estimates of this level given their counts (as above)."""
    m1, m0 = oracle.report_moments
    if split == "users":
        return alpha * (counts * m1 + (n - counts) * m0) - counts
    return counts * (m1 - 1.0) + (n - counts) * m0


def level_budget(epsilon: float, delta: float, alpha: int,
                 split: str) -> tuple[float, float, str]:
    """Budget of each level's frequency oracle under a splitting strategy (001 Table 1).

    Parameters
    ----------
    epsilon, delta:
        The party's total budget (``delta`` is used by ``"budget-advanced"`` only).
    alpha:
        Number of levels.
    split:
        ``"users"``, ``"budget-basic"`` or ``"budget-advanced"``.

    Returns
    -------
    (epsilon_level, delta_total, composition)
        The epsilon of each Hadamard response, the delta of the party's guarantee, and
        how the levels compose (``"none"`` when each party reports at one level).
    """
    epsilon = check_epsilon(epsilon, "epsilon")
    delta = check_delta(delta, "delta")
    alpha = check_positive_int(alpha, "alpha")
    split = _check_split(split)
    if split == "users":
        return epsilon, 0.0, "none (one level per party)"
    basic = epsilon / alpha
    if split == "budget-basic":
        return basic, 0.0, "basic"
    if delta == 0.0:
        raise ValueError("split='budget-advanced' needs delta > 0 (advanced composition "
                         "gives (epsilon, delta)-LDP); use split='budget-basic' for pure "
                         "epsilon-LDP")
    advanced, _ = per_step_budget_advanced(epsilon, delta, alpha)
    if advanced > basic:
        return advanced, delta, "advanced"
    return basic, 0.0, "basic (advanced composition gives a smaller per-level budget here)"


def node_variance_bound(n: int, alpha: int, epsilon_level: float, split: str,
                        oracle: str = "auto",
                        max_report_bits: int | None = DEFAULT_MAX_REPORT_BITS) -> float:
    """``v`` bounding the variance of every node estimate of one class (see module doc).

    The largest, over the levels and over all data, of the exact variance of a node
    estimate with the levels' oracles (:func:`level_oracles`). For the one-bit Hadamard
    response it is ``alpha n c^2`` for ``split="users"`` and ``n c_l^2`` for the budget
    splits, with ``c = (e^eps + 1)/(e^eps - 1)`` at the level's epsilon, and the exact
    variance is ``v`` minus the node's count.
    """
    split = _check_split(split)
    if oracle == "hadamard":
        c = 1.0 / math.tanh(epsilon_level / 2.0)
        return (alpha if split == "users" else 1) * n * c * c
    return max(_level_bound(o, n, alpha, split)
               for o in level_oracles(alpha, epsilon_level, oracle, max_report_bits, split))


def report_bits_per_party(alpha: int, epsilon_level: float, split: str,
                          oracle: str = "auto",
                          max_report_bits: int | None = DEFAULT_MAX_REPORT_BITS) -> int:
    """Bits one party sends (the label included), as the protocol's message counts them.

    ``oracle="hadamard"`` (001's format): ``alpha + 3`` (users) or
    ``1 + alpha (alpha + 1)/2 + alpha`` (budget splits). Otherwise: the label, the level
    (users: ``bit_length(alpha)`` bits) and the ``report`` row, whose width is the widest
    level's report (users) or the sum over levels (budget), each entry
    ``max_l element_bits`` bits.
    """
    split = _check_split(split)
    if _check_oracle(oracle) == "hadamard":
        return alpha + 3 if split == "users" else 1 + alpha * (alpha + 1) // 2 + alpha
    oracles = level_oracles(alpha, epsilon_level, oracle, max_report_bits, split)
    widths = [o.report_width for o in oracles]
    element = max(o.element_bits for o in oracles)
    if split == "users":
        return 1 + alpha.bit_length() + max(widths) * element
    return 1 + sum(widths) * element


def _bound_terms(n_pos: int, n_neg: int, alpha: int, C: float) -> tuple[float, float]:
    n = n_pos + n_neg
    return min(n_pos, n_neg), 21.0 * math.sqrt(2.0 * n * C * alpha)


def theorem3_mse_bound(n_pos: int, n_neg: int, alpha: int, C: float, a: float) -> float:
    """Theorem 3's bound on the MSE of the AUC estimate (000 Thm 3; 001 App. B.1).

    ``MSE(UAUC^) <= C n- n+ alpha^2 (2n + (4a + 1) min(n-, n+) + 21 sqrt(2 n C alpha) /
    (sqrt(a) - 1))`` with ``n = n+ + n-`` and node variances ``v+- = C n+- alpha``; the
    AUC's MSE is that over ``(n+ n-)^2``. (000 prints ``sqrt(2nCa)`` in the last term;
    001's proof, ``2 B^R + 4 B^G + 4 B^F``, gives ``sqrt(2 n C alpha)``, used here.)
    """
    if a <= 1:
        raise ValueError(f"Theorem 3 needs a > 1, got {a!r}")
    n_min, k = _bound_terms(n_pos, n_neg, alpha, C)
    n = n_pos + n_neg
    uauc_mse = C * n_pos * n_neg * alpha**2 * (
        2 * n + (4 * a + 1) * n_min + k / (math.sqrt(a) - 1.0))
    return uauc_mse / (float(n_pos) * n_neg) ** 2


def optimal_a(n_pos: int, n_neg: int, alpha: int, C: float) -> float:
    """The ``a > 1`` minimizing Theorem 3's bound (001 App. B.1, remark after the proof).

    Setting the derivative in ``s = sqrt(a)`` of ``4 s^2 n_min + K/(s - 1)`` to zero gives
    ``s (s - 1)^2 = K / (8 n_min)`` with ``K = 21 sqrt(2 n C alpha)``; the left side
    increases on ``s > 1``, so the root is unique. Solved exactly here (the paper gives
    the approximation ``a ~ (1 + sqrt(21/8) (2 C n alpha / n_min^2)^(1/4))^2``).
    """
    n_min, k = _bound_terms(n_pos, n_neg, alpha, C)
    target = k / (8.0 * n_min)
    hi = 2.0
    while hi * (hi - 1.0) ** 2 < target:
        hi *= 2.0
    s = optimize.brentq(lambda s: s * (s - 1.0) ** 2 - target, 1.0, hi, xtol=1e-14)
    return float(s * s)


class TreeReportRandomizer(LocalRandomizer):
    """One party's local randomizer: a score in ``[0, d-1]`` -> its level reports.

    ``split="users"``: output ``(level, j, bit)``, the level uniform on ``1..alpha``
    (independent of the score) and ``(j, bit)`` Hadamard response (001 Alg. 2) of the
    score's ``level``-bit prefix over ``2^level`` values with the full epsilon.
    Budget splits: ``alpha`` independent Hadamard responses, level ``l`` on the
    ``l``-bit prefix with ``epsilon_level`` (:func:`level_budget`).

    With ``oracle="auto"`` or ``"subset-selection"`` each level runs its own
    :class:`~fedustat.privacy.randomizers.FrequencyOracle` (:func:`level_oracles`) in
    place of the Hadamard response, and reports are the oracle's encoded rows:
    ``{"level", "report"}`` (users; ``report`` has ``report_width`` columns, the level's
    oracle filling the first ``oracle.report_width`` and zeros the rest) or
    ``{"report"}`` (budget splits; the levels' rows side by side, level 1 first).

    ``output_distribution`` enumerates every output (small ``d`` only) so that
    :func:`fedustat.privacy.verify.verify_ldp` checks the composed randomizer exactly.
    Order: ``users``: level by level (level 1 first), within a level the oracle's order
    (Hadamard response: ``2 j + bit``); budget: the tuple of the ``alpha`` per-level
    outputs in mixed radix, level 1 most significant.

    Parameters
    ----------
    d:
        Domain size ``2^alpha``.
    epsilon:
        The party's budget (> 0).
    split:
        ``"users"``, ``"budget-basic"`` or ``"budget-advanced"``.
    delta:
        For ``"budget-advanced"``: the delta of the (epsilon, delta) guarantee (> 0).
    oracle:
        ``"auto"`` (default), ``"hadamard"`` (001 as written) or ``"subset-selection"``.
    max_report_bits:
        Largest per-level report of the multi-bit oracles (:func:`level_oracles`).
    """

    def __init__(self, d: int, epsilon: float, *, split: str = "users",
                 delta: float = 0.0, oracle: str = "auto",
                 max_report_bits: int | None = DEFAULT_MAX_REPORT_BITS) -> None:
        self.alpha = check_domain(d)
        self.d = int(d)
        self.epsilon = check_epsilon(epsilon, "epsilon")
        self.split = _check_split(split)
        self.level_epsilon, self.delta, self.composition = level_budget(
            self.epsilon, delta, self.alpha, self.split)
        self.oracle_name = _check_oracle(oracle)
        self.max_report_bits = max_report_bits
        self.oracles = level_oracles(self.alpha, self.level_epsilon, self.oracle_name,
                                     max_report_bits, self.split)

    def public_description(self) -> dict[str, Any]:
        """Its public settings (the constructor's), for configuration checks; the level
        oracles follow from them."""
        return {"d": self.d, "epsilon": self.epsilon, "split": self.split,
                "delta": self.delta, "oracle": self.oracle_name,
                "max_report_bits": self.max_report_bits}

    @property
    def legacy(self) -> bool:
        """Whether reports use 001's one-bit format (``oracle="hadamard"``)."""
        return self.oracle_name == "hadamard"

    @property
    def widths(self) -> list[int]:
        """Encoded width of each level's report (generic format)."""
        return [o.report_width for o in self.oracles]

    @property
    def report_width(self) -> int:
        """Columns of the ``report`` field: the widest level (users) or all levels."""
        return max(self.widths) if self.split == "users" else sum(self.widths)

    @property
    def element_bits(self) -> int:
        """Bits of one entry of the ``report`` field (the widest level's values)."""
        return max(o.element_bits for o in self.oracles)

    def node_variance(self, n: int) -> float:
        """``v``: the largest exact variance of a node estimate of a class of ``n``
        parties, over the levels and all data (see :func:`node_variance_bound`)."""
        if self.legacy:
            return node_variance_bound(n, self.alpha, self.level_epsilon, self.split,
                                       "hadamard")
        return max(_level_bound(o, n, self.alpha, self.split) for o in self.oracles)

    def describe_oracles(self) -> list[str]:
        """Each level's oracle, e.g. ``"subset-selection k=3"`` or ``"hadamard"``."""
        return [f"{o.name} k={o.k}" if isinstance(o, SubsetSelection) else o.name
                for o in self.oracles]

    def __repr__(self) -> str:
        return (f"TreeReportRandomizer(d=2^{self.alpha}, epsilon={self.epsilon:g}, "
                f"split={self.split!r})")

    @property
    def input_size(self) -> int:
        return self.d

    @property
    def output_size(self) -> int:
        sizes = [o.output_size for o in self.oracles]
        return sum(sizes) if self.split == "users" else math.prod(sizes)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        """epsilon-LDP (users, budget-basic) or (epsilon, delta)-LDP (budget-advanced)."""
        return PrivacyGuarantee(self.epsilon, self.delta, PrivacyModel.LOCAL, ADJACENCY,
                                assumptions=(local_only(),))

    def oracle(self, level: int) -> Any:
        """The frequency oracle of level ``level`` (1..alpha)."""
        return self.oracles[level - 1]

    def prefix(self, scores: np.ndarray, level: int) -> np.ndarray:
        """The node of ``level`` holding each score (its ``level``-bit prefix)."""
        return scores >> (self.alpha - level)

    def randomize(self, x: Any, rng: RandomLike | NoiseSource = None) -> dict[str, np.ndarray]:
        """Randomize a batch of scores.

        Returns ``{"level", "j", "bit"}`` (one entry per party) for ``split="users"`` and
        ``{"j", "bit"}`` with shape ``(n, alpha)`` (column ``l - 1`` is level ``l``)
        for the budget splits.
        """
        scores = check_scores(np.atleast_1d(np.asarray(x)), self.d, "x")
        source = as_noise(rng)
        n = scores.size
        if not self.legacy:
            return self._randomize_generic(scores, source)
        if self.split == "users":
            level = source.integers(self.alpha, n) + 1
            j = np.zeros(n, dtype=np.int64)
            bit = np.zeros(n, dtype=np.uint8)
            for lvl in range(1, self.alpha + 1):
                rows = np.flatnonzero(level == lvl)
                if rows.size:
                    j[rows], bit[rows] = self.oracle(lvl).randomize(
                        self.prefix(scores[rows], lvl), source)
            return {"level": level, "j": j, "bit": bit}
        j = np.empty((n, self.alpha), dtype=np.int64)
        bit = np.empty((n, self.alpha), dtype=np.uint8)
        for lvl in range(1, self.alpha + 1):
            j[:, lvl - 1], bit[:, lvl - 1] = self.oracle(lvl).randomize(
                self.prefix(scores, lvl), source)
        return {"j": j, "bit": bit}

    def _randomize_generic(self, scores: np.ndarray, source: NoiseSource
                           ) -> dict[str, np.ndarray]:
        n = scores.size
        report = np.zeros((n, self.report_width), dtype=np.int64)
        if self.split == "users":
            level = source.integers(self.alpha, n) + 1
            for lvl in range(1, self.alpha + 1):
                rows = np.flatnonzero(level == lvl)
                if rows.size:
                    oracle = self.oracle(lvl)
                    report[rows, :oracle.report_width] = oracle.encode(
                        oracle.randomize(self.prefix(scores[rows], lvl), source))
            return {"level": level, "report": report}
        start = 0
        for lvl in range(1, self.alpha + 1):
            oracle = self.oracle(lvl)
            report[:, start:start + oracle.report_width] = oracle.encode(
                oracle.randomize(self.prefix(scores, lvl), source))
            start += oracle.report_width
        return {"report": report}

    def summarize_reports(self, reports: Mapping[str, Any]
                          ) -> list[tuple[np.ndarray, np.ndarray, int]]:
        """Per level, the reducible summary ``(keys, sums, n_l)`` of a batch of generic
        reports (one class), after checking every entry (the server's decoding)."""
        report = np.asarray(reports["report"])
        if report.ndim != 2 or report.shape[1] != self.report_width:
            raise ValueError(f"reports must have {self.report_width} columns, got shape "
                             f"{report.shape}")
        if report.size and report.min() < 0:
            raise ValueError("report entries must be non-negative")
        out = []
        if self.split == "users":
            level = np.asarray(reports["level"]).astype(np.int64)
            if level.size and (level.min() < 1 or level.max() > self.alpha):
                raise ValueError(f"report levels must be in 1..{self.alpha}")
            for lvl in range(1, self.alpha + 1):
                rows = report[level == lvl]
                width = self.oracle(lvl).report_width
                if rows[:, width:].any():
                    raise ValueError(f"level {lvl} reports must leave columns {width}.. at 0")
                out.append(self._summary(lvl, rows[:, :width]))
            return out
        start = 0
        for lvl in range(1, self.alpha + 1):
            width = self.oracle(lvl).report_width
            out.append(self._summary(lvl, report[:, start:start + width]))
            start += width
        return out

    def _summary(self, level: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        oracle = self.oracle(level)
        if rows.shape[0] == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), 0
        summary = oracle.summarize(oracle.decode(rows))
        return summary.keys, summary.sums, summary.n

    def output_distribution(self, x: Any) -> np.ndarray:
        if self.output_size > MAX_ENUMERATED_OUTPUTS:
            raise ValueError(f"the report has {self.output_size} possible values; exact "
                             f"enumeration is limited to {MAX_ENUMERATED_OUTPUTS} (use a "
                             "smaller d to verify the randomizer)")
        scalar = np.ndim(x) == 0
        scores = check_scores(np.atleast_1d(np.asarray(x)), self.d, "x")
        per_level = [self.oracle(lvl).output_distribution(self.prefix(scores, lvl))
                     .reshape(scores.size, -1) for lvl in range(1, self.alpha + 1)]
        if self.split == "users":
            probs = np.concatenate(per_level, axis=1) / self.alpha
        else:
            probs = per_level[0]
            for level_probs in per_level[1:]:
                probs = (probs[:, :, None] * level_probs[:, None, :]).reshape(scores.size, -1)
        return probs[0] if scalar else probs


@dataclass
class _PartyState:
    scores: np.ndarray
    labels: np.ndarray
    parties: np.ndarray


@dataclass
class _ServerState:
    n_parties: int


class LevelEstimates:
    """One class's node estimates, level by level (001 Alg. 3), for the recursion.

    Called as ``estimates(level, nodes)``. With ``split="users"`` the counts of a level's
    report group are scaled by ``alpha`` (each party reports at one of ``alpha``
    levels). ``method`` picks how a level is estimated: ``"auto"`` (the cheaper of the
    two by the cost model in the module docstring), ``"fwht"`` (the whole level with
    :meth:`HadamardResponse.estimate_frequencies`) or ``"per-node"`` (the requested nodes
    with :meth:`HadamardResponse.estimate_frequency`); both give the same numbers. A level
    whose oracle is subset selection is estimated from its support counts (one lookup per
    node, method ``"support counts"``).

    ``methods`` and ``operations`` record, per level, what was used and the work done
    (``Cost.server_operations`` counts one unit per report aggregated, per FWHT
    butterfly element and per (queried node, report) sign).

    Parameters
    ----------
    randomizer:
        The parties' :class:`TreeReportRandomizer`.
    reports:
        For each level ``1..alpha`` (list index ``level - 1``), the ``(j, bits)`` of the
        class's reports at that level.
    method:
        ``"auto"``, ``"fwht"`` or ``"per-node"``.
    """

    def __init__(self, randomizer: TreeReportRandomizer,
                 reports: list[tuple[np.ndarray, np.ndarray]], *, method: str = "auto") -> None:
        if len(reports) != randomizer.alpha:
            raise ValueError(f"reports must hold one (j, bits) pair per level "
                             f"({randomizer.alpha}), got {len(reports)}")
        if method not in ("auto", "fwht", "per-node"):
            raise ValueError(f"method must be 'auto', 'fwht' or 'per-node', got {method!r}")
        self.randomizer = randomizer
        self.reports = reports
        self.method = method
        self.scale = float(randomizer.alpha) if randomizer.split == "users" else 1.0
        self.methods = ["unused"] * randomizer.alpha
        self.operations = [0] * randomizer.alpha
        self._signed: list[tuple[np.ndarray, np.ndarray, int]] | None = None

    @classmethod
    def from_signed_sums(cls, randomizer: TreeReportRandomizer,
                         sums: list[tuple[np.ndarray, np.ndarray, int]], *,
                         method: str = "auto") -> LevelEstimates:
        """Estimates from each level's aggregated reports ``(j, s, n_l)``: the distinct
        indices ``j``, the signed sums ``s_j = sum_{i: j_i = j} (-1)^{b_i}`` and the
        number of reports ``n_l`` (what a distributed server reduces, see
        :meth:`LdpAucTree.summarize_batch`). 001 Alg. 3's ``z_q`` is linear in the
        reports, ``z_q = c sum_j s_j (-1)^{<j,q>}``, so the estimates are the same
        numbers as from the reports themselves (integer sums, exact)."""
        est = cls(randomizer, [(np.zeros(0, np.int64), np.zeros(0, np.int64))] * randomizer.alpha,
                  method=method)
        if len(sums) != randomizer.alpha:
            raise ValueError(f"sums must hold one (j, s, n) triple per level "
                             f"({randomizer.alpha}), got {len(sums)}")
        est._signed = [(np.asarray(j, np.int64), np.asarray(s, np.int64), int(n))
                       for j, s, n in sums]
        return est

    @classmethod
    def from_reports(cls, randomizer: TreeReportRandomizer, reports: dict[str, np.ndarray],
                     *, method: str = "auto") -> LevelEstimates:
        """Estimates from the output of :meth:`TreeReportRandomizer.randomize` (one class)."""
        if not randomizer.legacy:
            return cls.from_signed_sums(randomizer, randomizer.summarize_reports(reports),
                                        method=method)
        if randomizer.split == "users":
            level = np.asarray(reports["level"])
            per_level = [(reports["j"][level == lvl], reports["bit"][level == lvl])
                         for lvl in range(1, randomizer.alpha + 1)]
        else:
            per_level = [(reports["j"][:, lvl - 1], reports["bit"][:, lvl - 1])
                         for lvl in range(1, randomizer.alpha + 1)]
        return cls(randomizer, per_level, method=method)

    def __call__(self, level: int, nodes: Any) -> np.ndarray:
        nodes = np.asarray(nodes, dtype=np.int64)
        if self._signed is not None:
            j, signed, n_l = self._signed[level - 1]
        else:
            j, bits = self.reports[level - 1]
            n_l = j.size
        if nodes.size == 0:
            return np.zeros(0)
        if n_l == 0:
            # No report at this level: the sum over no parties is 0 (still unbiased).
            self.methods[level - 1] = "no reports"
            return np.zeros(nodes.size)
        oracle = self.randomizer.oracle(level)
        if not isinstance(oracle, HadamardResponse):
            # Support counts: one lookup per node in the sorted keys.
            self.methods[level - 1] = "support counts"
            self.operations[level - 1] = nodes.size + j.size
            return self.scale * oracle.estimate_from_summary(OracleSummary(j, signed, n_l),
                                                             nodes)
        fwht_cost = n_l + (1 << level) * level
        node_cost = NODE_QUERY_COST * nodes.size * n_l
        use_fwht = (self.method == "fwht" or (
            self.method == "auto" and level <= FWHT_MAX_LEVEL and fwht_cost <= node_cost))
        if use_fwht:
            self.methods[level - 1] = "fwht"
            self.operations[level - 1] = fwht_cost
            if self._signed is not None:
                dense = np.zeros(oracle.d)
                dense[j] = signed  # integers: exactly the bincount of the reports' signs
                return self.scale * (oracle.debias_factor * fwht(dense))[nodes]
            return self.scale * oracle.estimate_frequencies(j, bits)[nodes]
        self.methods[level - 1] = "per-node"
        self.operations[level - 1] = nodes.size * n_l
        if self._signed is not None:
            return self.scale * _signed_node_estimates(oracle.debias_factor, j, signed, nodes)
        return self.scale * np.asarray(oracle.estimate_frequency(j, bits, nodes), dtype=float)


def _parity(v: np.ndarray) -> np.ndarray:
    """Parity of the set bits of each non-negative int64 (XOR folding)."""
    v = v.copy()
    for shift in (32, 16, 8, 4, 2, 1):
        v ^= v >> shift
    return v & 1


def _signed_node_estimates(c: float, j: np.ndarray, signed: np.ndarray,
                           nodes: np.ndarray) -> np.ndarray:
    """``c sum_j s_j (-1)^{<j,q>}`` for each node q (001 Alg. 3 on aggregated reports);
    the integer sum is exact, so this equals ``HadamardResponse.estimate_frequency``."""
    out = np.empty(nodes.size)
    if j.size == 0:
        out[:] = 0.0
        return out
    step = max(1, (1 << 22) // j.size)  # bounded (nodes x indices) sign matrix
    for start in range(0, nodes.size, step):
        q = nodes[start:start + step, None]
        signs = 1 - 2 * _parity(j[None, :] & q)
        out[start:start + step] = c * (signs * signed[None, :]).sum(axis=1)
    return out


class LdpAucTree(Protocol):
    """epsilon-LDP AUC from Hadamard-response hierarchical histograms (000 Sec. 4).

    Parameters
    ----------
    kernel:
        The AUC kernel (:func:`fedustat.stats.auc_kernel`); records are
        ``(score, label)`` with integer scores in ``[0, d-1]``.
    epsilon:
        Each party's budget (> 0, finite).
    d:
        Public domain size, a power of two (``2 <= d <= 2^53``); ``alpha = log2 d``.
    delta:
        Used by ``split="budget-advanced"`` only (> 0 there); the pure splits ignore it.
    split:
        ``"users"`` (default), ``"budget-basic"`` or ``"budget-advanced"`` (001 Table 1).
    a:
        Pruning parameter of eq. 10 (``a > 1``, Theorem 3). ``None`` (default) takes the
        value minimizing Theorem 3's bound for the class sizes (:func:`optimal_a`); 001
        App. D.1 does not report the ``a`` of its experiments.
    noise:
        Where the parties' coins come from: ``None`` uses the party step's seeded
        generator (simulation); pass ``DeploymentNoise()`` on real devices.
    oracle:
        Frequency oracle of each level: ``"auto"`` (default; per level the one of least
        worst-case exact variance among the one-bit Hadamard response and subset
        selection, see :func:`level_oracles`), ``"hadamard"`` (001 App. B.2.1 as
        written, its wire format) or ``"subset-selection"``.
    max_report_bits:
        Largest per-level report of the multi-bit oracles (default 64 bits: k <= 64 /
        alpha values of alpha bits).
    """

    name = "ldp-tree"
    # Everything the aggregator computes from the reports: the level each party reports
    # on is its own coin, and the per-level counts follow from the reports.
    released_fields = (*Protocol.released_fields, "diagnostics.uauc",
                       "diagnostics.reports_per_level_*", "cost.server_operations",
                       # The recursion's shape follows the (DP) node estimates.
                       "diagnostics.recursed_per_level", "diagnostics.discarded_per_level",
                       "diagnostics.queried_per_level", "diagnostics.active_leaves",
                       "diagnostics.estimation_*", "diagnostics.variance_parts.*")

    def __init__(self, kernel: Kernel, epsilon: float, *, d: int, delta: float = 0.0,
                 split: str = "users", a: float | None = None,
                 noise: NoiseSource | None = None,
                 score_bounds: tuple[float, float] | None = None, oracle: str = "auto",
                 max_report_bits: int | None = DEFAULT_MAX_REPORT_BITS,
                 recursion: str = "auto") -> None:
        _require_auc(kernel)
        try:
            eps_value = float(epsilon)
        except (TypeError, ValueError):
            eps_value = math.nan
        if math.isinf(eps_value) and eps_value > 0:
            raise ValueError("protocol 'ldp-tree' needs a finite epsilon; for the exact, "
                             "non-private AUC use protocol='exact'")
        self.kernel = kernel
        self.randomizer = TreeReportRandomizer(d, epsilon, split=split,
                                               delta=check_delta(delta, "delta"),
                                               oracle=oracle, max_report_bits=max_report_bits)
        self.oracle = self.randomizer.oracle_name
        # With public score bounds each party first maps its real score to one of the d
        # equal bins of [lo, hi] (the discretization 000 Sec. 4 assumes); without them
        # scores must already be integers in [0, d-1].
        self.score_grid = (None if score_bounds is None
                           else ColumnGrid.continuous("score", score_bounds, self.randomizer.d))
        self.epsilon = self.randomizer.epsilon
        self.split = self.randomizer.split
        self.alpha = self.randomizer.alpha
        self.d = self.randomizer.d
        if a is not None:
            try:
                a = float(a)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"a must be a number > 1 or None, got {a!r}") from exc
            if not (math.isfinite(a) and a > 1.0):
                raise ValueError(f"a must be a finite number > 1 (000 Thm 3), got {a!r}")
        self.a = a
        recursion = _check_recursion(recursion)
        if recursion == "auto":
            # The paper's estimator where the paper is asked for (its oracle as written, or
            # its pruning parameter a) and where the full tree is too large.
            paper = a is not None or self.oracle == "hadamard"
            recursion = "full" if self.d <= FULL_RECURSION_MAX_D and not paper else "pruned"
        if recursion == "full" and a is not None:
            raise ValueError("a is the pruning parameter of recursion='pruned' (000 eq. 10); "
                             "the full recursion prunes nothing: drop a or pass "
                             "recursion='pruned'")
        self.recursion = recursion
        if noise is not None and not isinstance(noise, NoiseSource):
            raise TypeError(f"noise must be a NoiseSource (e.g. DeploymentNoise()) or None, "
                            f"got {type(noise).__name__}")
        self.noise = noise

    def __repr__(self) -> str:
        return (f"LdpAucTree(epsilon={self.epsilon:g}, d=2^{self.alpha}, "
                f"split={self.split!r}, a={self.a!r}, oracle={self.oracle!r}, "
                f"recursion={self.recursion!r})")

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return self.randomizer.guarantee

    # ------------------------------------------------------------------ parties
    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _PartyState:
        with RecordCheck("records that are not finite numbers"):
            records = as_float_array(data, "data", ndim=2)
        if records.shape[1] != 2:
            raise RecordCheckError(f"data must have two columns (score, label), got "
                                   f"{records.shape[1]}; build it with "
                                   "auc_kernel().pack(scores, labels)")
        raw = records[:, 0]
        if self.score_grid is not None:
            raw = self.score_grid.encode(raw).astype(np.float64)
        with RecordCheck("values outside the declared domain of column 'score'"):
            scores = check_scores(raw, self.d, "score")
        with RecordCheck("labels that are not binary in column 'label'"):
            labels = as_binary_labels(records[:, 1], "label", require_both=False)
        return _PartyState(scores, labels, np.asarray(parties))

    def party_step(self, state: _PartyState, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_PartyState, Message]:
        if inbox is not None:
            raise RuntimeError("protocol 'ldp-tree' has a single round; parties received an "
                               "unexpected message")
        source = self.noise if self.noise is not None else SimulationNoise(rng)
        reports = self.randomizer.randomize(state.scores, source)
        labels = state.labels.astype(np.uint8)
        if not self.randomizer.legacy:
            # Generic format: the level (users split) and the encoded oracle reports.
            fields = {"label": labels, "report": reports["report"]}
            bits = {"label": 1, "report": self.randomizer.element_bits}
            if self.split == "users":
                fields["level"] = reports["level"]
                bits["level"] = self.alpha.bit_length()
            return state, Message(Role.PARTY, Role.SERVER, fields, bits, state.parties)
        if self.split == "users":
            fields = {"label": labels,
                      "index": (np.int64(1) << reports["level"]) | reports["j"],
                      "bit": reports["bit"]}
            bits = {"label": 1, "index": self.alpha + 1, "bit": 1}
        else:
            fields = {"label": labels, "bit": reports["bit"]}
            bits = {"label": 1, "bit": 1}
            for lvl in range(1, self.alpha + 1):
                fields[f"j{lvl}"] = reports["j"][:, lvl - 1]
                bits[f"j{lvl}"] = lvl
        return state, Message(Role.PARTY, Role.SERVER, fields, bits, state.parties)

    # ------------------------------------------------------------------ server
    def init_server(self, n_parties: int) -> _ServerState:
        return _ServerState(n_parties)

    def collection_rule(self) -> DropoutRule:
        return self.dropout_rule(self.init_server(1), 0)

    def dropout_rule(self, state: _ServerState, round_index: int) -> DropoutRule:
        # One round of epsilon-LDP reports (001 App. B.2); n+ and n- are counted from
        # the labels of the reports received (server_step), and the users split draws
        # each party's level independently, so the reports that arrived are a run of
        # this protocol over their parties.
        return DropoutRule(True, "one-shot epsilon-LDP reports; n+ and n- are counted "
                                 "from the reports received")

    def _decode(self, inbox: Message) -> tuple[np.ndarray, list[list[tuple[np.ndarray,
                                                                            np.ndarray]]]]:
        """Labels and, per class (0, 1) and level, the reports ``(j, bits)``."""
        labels = np.asarray(inbox.fields["label"]).astype(np.int64)
        if labels.size and (labels.min() < 0 or labels.max() > 1):
            raise ValueError("reports carry labels other than 0/1")
        alpha = self.alpha
        if not self.randomizer.legacy:
            report = np.asarray(inbox.fields["report"]).astype(np.int64)
            level = (np.asarray(inbox.fields["level"]).astype(np.int64)
                     if self.split == "users" else None)
            grouped = []
            for c in (0, 1):
                rows = labels == c
                part = {"report": report[rows]}
                if level is not None:
                    part["level"] = level[rows]
                grouped.append(self.randomizer.summarize_reports(part))
            return labels, grouped
        if self.split == "users":
            index = np.asarray(inbox.fields["index"]).astype(np.int64)
            bits = np.asarray(inbox.fields["bit"]).astype(np.int64)
            if index.size and (index.min() < 2 or index.max() >= 1 << (alpha + 1)):
                raise ValueError(f"report indices must be in [2, 2^{alpha + 1}) "
                                 "(2^level + j)")
            powers = np.int64(1) << np.arange(alpha + 2, dtype=np.int64)
            level = np.searchsorted(powers, index, side="right") - 1
            j = index - powers[level]
            key = labels * (alpha + 1) + level
            order = np.argsort(key, kind="stable")
            edges = np.searchsorted(key[order], np.arange(2 * (alpha + 1) + 1))
            j, bits = j[order], bits[order]
            grouped = [[(j[edges[c * (alpha + 1) + lvl]:edges[c * (alpha + 1) + lvl + 1]],
                         bits[edges[c * (alpha + 1) + lvl]:edges[c * (alpha + 1) + lvl + 1]])
                        for lvl in range(1, alpha + 1)] for c in (0, 1)]
            return labels, grouped
        sign_bits = np.asarray(inbox.fields["bit"]).astype(np.int64)
        grouped = []
        for c in (0, 1):
            rows = labels == c
            grouped.append([(np.asarray(inbox.fields[f"j{lvl}"])[rows].astype(np.int64),
                             sign_bits[rows, lvl - 1]) for lvl in range(1, alpha + 1)])
        return labels, grouped

    def server_step(self, state: _ServerState, inbox: Message,
                    rng: np.random.Generator) -> tuple[_ServerState, Estimate]:
        labels, grouped = self._decode(inbox)
        n_pos = int(np.count_nonzero(labels == 1))
        if not self.randomizer.legacy:
            # grouped holds each level's summary (keys, sums, n_l), as the reduced step.
            est = [LevelEstimates.from_signed_sums(self.randomizer, grouped[c])
                   for c in (0, 1)]
            return state, self._release(n_pos, int(labels.size - n_pos), est[1], est[0],
                                        [[int(g[2]) for g in grouped[c]] for c in (0, 1)])
        est_neg = LevelEstimates(self.randomizer, grouped[0])
        est_pos = LevelEstimates(self.randomizer, grouped[1])
        return state, self._release(n_pos, int(labels.size - n_pos), est_pos, est_neg,
                                    [[g[0].size for g in grouped[c]] for c in (0, 1)])

    # ------------------------------------------------ distributed server step (hooks)
    # Node estimates are linear in the reports (001 Alg. 3): per class and level, the
    # server needs only the signed sums of the sign bits per Hadamard index j and the
    # number of reports. Those are integer sums over parties, so a distributed engine
    # reduces the batches' sums and runs the recursion on the total
    # (fedustat.runtime.engine); the release is the same numbers as in one process.

    def distributed_round(self, state: _ServerState) -> tuple[str, Any]:
        """The single server step is a reduction (no public context needed)."""
        return "reduce", None

    def summarize_batch(self, message: Message, context: Any, memory: Any = None) -> Any:
        """A batch's per-class, per-level signed sums ``(distinct j, sum of (-1)^b,
        number of reports)``, after the server's checks of :meth:`_decode`. Its size is
        at most ``min(2^l, reports)`` entries per level."""
        labels, grouped = self._decode(message)
        n_pos = int(np.count_nonzero(labels == 1))
        if not self.randomizer.legacy:
            return {"n_pos": n_pos, "n_neg": int(labels.size - n_pos), "levels": grouped}
        return {"n_pos": n_pos, "n_neg": int(labels.size - n_pos),
                "levels": [[_signed_sums(j, bits, 1 << lvl)
                            for lvl, (j, bits) in enumerate(grouped[c], 1)]
                           for c in (0, 1)]}

    @staticmethod
    def combine_summaries(left: Any, right: Any) -> Any:
        """Sum of two batches' summaries (integer sums per index: associative)."""
        levels = [[_merge_signed(a, b) for a, b in zip(la, lb, strict=True)]
                  for la, lb in zip(left["levels"], right["levels"], strict=True)]
        return {"n_pos": left["n_pos"] + right["n_pos"],
                "n_neg": left["n_neg"] + right["n_neg"], "levels": levels}

    def server_step_reduced(self, state: _ServerState, summary: Any,
                            rng: np.random.Generator) -> tuple[_ServerState, Estimate]:
        """:meth:`server_step` from the combined signed sums of all batches."""
        est = [LevelEstimates.from_signed_sums(self.randomizer, summary["levels"][c])
               for c in (0, 1)]
        counts = [[int(n) for _, _, n in summary["levels"][c]] for c in (0, 1)]
        return state, self._release(int(summary["n_pos"]), int(summary["n_neg"]), est[1],
                                    est[0], counts)

    def _release(self, n_pos: int, n_neg: int, est_pos: LevelEstimates,
                 est_neg: LevelEstimates, per_level: list[list[int]]) -> Estimate:
        """The release from the two classes' node estimates (``per_level``: reports per
        level of class 0, then class 1)."""
        if n_pos == 0 or n_neg == 0:
            which = "positive" if n_pos == 0 else "negative"
            raise ValueError(f"no {which} party reported; the AUC needs both classes")
        if self.recursion == "full":
            return self._release_full(n_pos, n_neg, est_pos, est_neg, per_level)
        alpha, split = self.alpha, self.split
        eps_l = self.randomizer.level_epsilon
        v_pos = self.randomizer.node_variance(n_pos)
        v_neg = self.randomizer.node_variance(n_neg)
        C = v_pos / (n_pos * alpha)  # the same for both classes: v = C n alpha (Thm 3)
        a = self.a if self.a is not None else optimal_a(n_pos, n_neg, alpha, C)
        variances: dict[str, Any] = {}
        if not self.randomizer.legacy:
            # Each node's exact variance is linear in its count (see _level_variance), so
            # plugging in the estimate is unbiased; 001's one-bit format keeps the bound.
            def node_var(n_class: int) -> Any:
                return lambda level, h: np.maximum(_level_variance(
                    self.randomizer.oracle(level), n_class, alpha, split, h), 0.0)
            variances = {"variance_pos": node_var(n_pos), "variance_neg": node_var(n_neg)}

        rec = pruned_uauc(est_pos, est_neg, alpha=alpha, n_pos=n_pos, n_neg=n_neg,
                          v_pos=v_pos, v_neg=v_neg, a=a, **variances)
        pairs = float(n_pos) * n_neg
        mse_bound = theorem3_mse_bound(n_pos, n_neg, alpha, C, a)
        operations = sum(est_pos.operations) + sum(est_neg.operations) + n_pos + n_neg \
            + 2 * sum(rec.queried)
        diagnostics: dict[str, Any] = {
            "split": split,
            "composition": self.randomizer.composition,
            "level_epsilon": eps_l,
            "oracle": self.oracle,
            "oracle_per_level": self.randomizer.describe_oracles(),
            "alpha": alpha,
            "n_pos": n_pos,
            "n_neg": n_neg,
            "a": a,
            "a_source": "given" if self.a is not None else
            "minimizes the Theorem 3 bound (001 App. B.1)",
            "v_pos": v_pos,
            "v_neg": v_neg,
            "C": C,
            "tau": rec.tau,
            "uauc": rec.uauc,
            "recursed_per_level": rec.recursed,
            "discarded_per_level": rec.discarded,
            "queried_per_level": rec.queried,
            "active_leaves": rec.leaves,
            "reports_per_level_pos": per_level[1],
            "reports_per_level_neg": per_level[0],
            "estimation_pos": est_pos.methods,
            "estimation_neg": est_neg.methods,
            "mse_bound": mse_bound,
            "rmse_bound": math.sqrt(mse_bound),
            "theorem3_requires_alpha_le_sqrt_n": alpha <= math.sqrt(n_pos + n_neg),
            "std_error_kind": (
                "plug-in estimate of the randomization error (E^R + E^F of 001 App. B.1) "
                "from the released node estimates; it omits the discarding bias E^G. "
                "rmse_bound is Theorem 3's upper bound"),
            "noise_source": (self.noise.kind if self.noise is not None else "simulation"),
        }
        if split == "users":
            diagnostics["bound_note"] = (
                "with users split across levels 001 App. B.2.2 proves Theorem 3 only up to "
                "a factor alpha for the sample MSE (levels are not independent), and "
                "Theorem 3 itself for the error against the population AUC")
        # The node estimates are Hadamard-response frequency estimates, each a sum of
        # the +-1 reports of the many parties assigned to its level (001 App. B.2), and
        # the AUC estimate is linear in them: normal by the CLT (Lyapunov; the reports
        # are bounded), no single report weighing more than O(1/n).
        # Discarded nodes add a bias E^G that the variance leaves out; its bound
        # (hierarchical.pruned_uauc) widens the interval (at n = 2000, eps = 0.5 the
        # bias is -0.10 in AUC and the normal interval alone covers 91%).
        std_error = normal_std_error(rec.variance) / pairs
        error: ErrorDistribution = NormalError(std_error)
        if rec.discard_bias > 0:
            error = BoundedBias(error, rec.discard_bias / pairs)
        estimate = Estimate(
            value=rec.uauc / pairs, quantity=self.kernel.name, protocol=self.name,
            privacy=self.guarantee, std_error=std_error, error=error,
            cost=Cost(server_operations=int(operations)), diagnostics=diagnostics)
        # In range on every transport: the clip is part of the server's release step.
        return in_statistic_range(estimate, self.kernel)


    def _release_full(self, n_pos: int, n_neg: int, est_pos: LevelEstimates,
                      est_neg: LevelEstimates, per_level: list[list[int]]) -> Estimate:
        """The release of the unpruned recursion (:func:`~fedustat.protocols.local.
        hierarchical.full_uauc`): unbiased for the AUC of the scores on the domain
        ``[0, d-1]`` (ties within a leaf counted 1/2), with its exact variance."""
        alpha = self.alpha
        levels_pos = [est_pos(level, np.arange(1 << level)) for level in range(1, alpha + 1)]
        levels_neg = [est_neg(level, np.arange(1 << level)) for level in range(1, alpha + 1)]
        noise = [level_noise(self.randomizer.oracle(level)) for level in range(1, alpha + 1)]
        rec = full_uauc(levels_pos, levels_neg, n_pos=n_pos, n_neg=n_neg, noise_pos=noise,
                        noise_neg=noise, one_level_per_party=self.split == "users")
        pairs = float(n_pos) * n_neg
        operations = sum(est_pos.operations) + sum(est_neg.operations) + n_pos + n_neg \
            + 2 * ((2 << alpha) - 2)
        diagnostics: dict[str, Any] = {
            "recursion": "full",
            "split": self.split,
            "composition": self.randomizer.composition,
            "level_epsilon": self.randomizer.level_epsilon,
            "oracle": self.oracle,
            "oracle_per_level": self.randomizer.describe_oracles(),
            "alpha": alpha,
            "n_pos": n_pos,
            "n_neg": n_neg,
            "uauc": rec.uauc,
            "variance_parts": {"linear_pos": rec.linear_pos / pairs**2,
                               "linear_neg": rec.linear_neg / pairs**2,
                               "noise_product": rec.noise_product / pairs**2},
            "reports_per_level_pos": per_level[1],
            "reports_per_level_neg": per_level[0],
            "estimation_pos": est_pos.methods,
            "estimation_neg": est_neg.methods,
            "target": ("the AUC of the scores on the domain [0, d-1] (with bounds: of the "
                       "scores binned into the d public bins), ties counted 1/2"),
            "std_error_kind": (
                "exact variance of the unbiased estimate (hierarchical.full_uauc), every "
                "unknown replaced by an unbiased estimate from the released node estimates"),
            "noise_source": (self.noise.kind if self.noise is not None else "simulation"),
        }
        # The estimate is a sum of products of two independent sums over many bounded
        # reports (one per party): normal by the CLT for large classes.
        std_error = normal_std_error(rec.variance) / pairs
        estimate = Estimate(
            value=rec.uauc / pairs, quantity=self.kernel.name, protocol=self.name,
            privacy=self.guarantee, std_error=std_error, error=NormalError(std_error),
            cost=Cost(server_operations=int(operations)), diagnostics=diagnostics)
        return in_statistic_range(estimate, self.kernel)


def _signed_sums(j: np.ndarray, bits: np.ndarray, d: int
                 ) -> tuple[np.ndarray, np.ndarray, int]:
    """Distinct indices, the sum of the signs ``(-1)^b`` per index, and the report count,
    after the checks ``HadamardResponse`` makes on reports (j in 0..d-1, b in {0, 1})."""
    if j.size and (j.min() < 0 or j.max() >= d):
        raise ValueError(f"j has values outside the input domain {{0, ..., {d - 1}}} "
                         f"(min {j.min()}, max {j.max()})")
    if bits.size and (bits.min() < 0 or bits.max() > 1):
        raise ValueError("bits has values outside the input domain {0, 1}")
    keys, inverse = np.unique(j, return_inverse=True)
    # Float weights of +-1 sum exactly (counts below 2^53).
    signed = np.bincount(inverse, weights=1 - 2 * bits, minlength=keys.size)
    return keys, signed.astype(np.int64), int(j.size)


def _merge_signed(a: tuple[np.ndarray, np.ndarray, int], b: tuple[np.ndarray, np.ndarray, int]
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    keys, inverse = np.unique(np.concatenate([a[0], b[0]]), return_inverse=True)
    signed = np.bincount(inverse, weights=np.concatenate([a[1], b[1]]), minlength=keys.size)
    return keys, signed.astype(np.int64), a[2] + b[2]


def _require_auc(kernel: Any) -> None:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a fedustat Kernel, got {type(kernel).__name__}")
    if kernel.name != "auc":
        raise ValueError(f"protocol 'ldp-tree' computes the AUC only (000 Sec. 4); got "
                         f"kernel {kernel.name!r}. Use auc_kernel(), or a generic "
                         "protocol for other U-statistics")


def _ldp_tree(kernel: Kernel, *, epsilon: float, delta: float = 0.0, d: int | None = None,
              split: str = "users", a: float | None = None,
              noise: NoiseSource | None = None,
              bounds: Any = None, oracle: str = "auto",
              max_report_bits: int | None = DEFAULT_MAX_REPORT_BITS,
              recursion: str = "auto") -> LdpAucTree:
    """``bounds``: public score range, a pair or ``{"score": (lo, hi)}``; with it real
    scores are binned into d equal bins (default d = 2^6) by each party."""
    _require_auc(kernel)
    if isinstance(bounds, Mapping):
        unknown = set(bounds) - {"score"}
        if unknown:
            raise ValueError(f"protocol 'ldp-tree' takes bounds for the score only, got "
                             f"{sorted(unknown)}")
        bounds = bounds.get("score")
    if d is None:
        if bounds is None:
            raise ValueError("protocol 'ldp-tree' needs the public score domain size d (a "
                             "power of two) for integer scores in [0, d-1], or public score "
                             "bounds=(lo, hi) to bin real scores")
        d = DEFAULT_BINNED_DOMAIN
    return LdpAucTree(kernel, epsilon, d=d, delta=delta, split=split, a=a, noise=noise,
                      score_bounds=bounds, oracle=oracle, max_report_bits=max_report_bits,
                      recursion=recursion)


register("ldp-tree", _ldp_tree, model=PrivacyModel.LOCAL,
         summary="LDP AUC: Hadamard-response hierarchical histograms and a pruned "
                 "top-down recursion (one round)",
         source="000 Sec. 4 (eq. 10, Thm 3-4); 001 App. B (Alg. 2-3, Lemmas 4-6, Table 1)")
