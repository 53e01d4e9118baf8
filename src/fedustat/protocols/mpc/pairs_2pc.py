"""The two-party subsampling protocol of 000 Sec. 5 (``"pairs-2pc"``), run with real 2PC.

Sources: "000" = Bell, Bellet, Gascón & Kulkarni, *Private Protocols for U-Statistics in
the Local Model and Beyond* (AISTATS 2020), Sec. 5 and Theorem 5; "001" = its arXiv
version, App. C.1 (proof of Theorem 5, optimal P, optimality of the scheme) and App. C.2
(2PC circuits for the kernels and the local randomizers).

Protocol (000 Sec. 5, steps 1-3)
--------------------------------
1. *Subsampling.* The aggregator draws P independent permutations of the n parties and
   pairs consecutive elements: ``P floor(n/2)`` pairs, each party in P of them
   (:func:`fedustat.stats.designs.permutation_pairs`). The all-pairs variant uses every
   pair ``i < j`` (000 Sec. 5, first paragraph, and its Kendall experiment in Sec. 6).
2. *Perturbation.* The two parties of each pair compute ``f(x_i, x_j) + noise`` by
   secure two-party computation, so that neither of them (nor the aggregator) sees the
   un-noised value, and each sends its **share** of the result to the aggregator.
3. *Aggregation.* The aggregator adds the two shares of every pair (it sees only
   ``f + noise``) and releases the mean ``(2 / (P n)) sum f~`` (``1 / #pairs`` for odd
   n), debiased for randomized response.

The two-party computation, per pair (vectorized over all pairs)
---------------------------------------------------------------
Both parties encode their records in fixed point (``FixedPoint(40, 14, headroom=1)`` by
default, 002 Sec. 6.1 sizes), each keeps one additive share of its own record and sends
the other (uniform) share to its partner. They evaluate the kernel on shares with
:mod:`fedustat.secure`: comparisons by function secret sharing (``comparison="fss"``,
one DCF key per comparison, one round) or by a boolean circuit
(``comparison="circuit"``), products by Beaver triples:

==========================  =============================================  ================
kernel                      circuit on shares                              output unit
==========================  =============================================  ================
Kendall's tau-a             ``([y<x]-[x<y])_1 ([y<x]-[x<y])_2``: 4 comparisons  1
                            in one round, one product
AUC / Mann-Whitney          ``1 + [s+ > s-] - [s+ < s-]`` (labels public: the  1/2
                            pair is oriented positive first); same-label
                            pairs are 0 by public information and skipped
Gini mean difference        ``(2 [x > y] - 1)(x - y)`` (001 App. C.2)        ``2^-c``
duplicate pair / Rényi-2    ``[x == y]`` (one DPF key or an AND tree)        1
==========================  =============================================  ================

Other kernels are refused with a message listing these. The offline material (Beaver
triples, FSS keys, edaBits) comes from a **trusted dealer**
(:class:`fedustat.secure.Dealer`): it never sees an input, but it knows every mask, so
it must not collude with a party or see the pair's online messages. 000 assumes
garbled circuits between the two parties instead (001 App. C.2), which need no dealer:
this is an additional trust assumption, stated in every estimate's diagnostics.

The noise, generated inside the 2PC (on the ring, in output units)
------------------------------------------------------------------
Each pair is released with budget ``eps_pair = eps / P`` (every party is in at most P
pairs; basic composition, 001 App. C.1), or, for all pairs, the per-pair budget whose
``n - 1``-fold advanced composition is ``(eps, delta)``. Noise for real-valued kernels
is discrete Laplace ``DLap(t)``, ``t = exp(-eps_pair / s)``, ``s`` = ``Delta f`` in output
units (the integer version of 000 Thm 5's ``Lap(P/eps)``; 002 App. B.1.1). Each party
adds its part to its **own output share** before sending it, so the aggregator only
ever sees the sum:

* ``noise_split="independent"`` — each party adds its own full-scale ``DLap(t)``.
  Guarantee: every party's own noise covers every pair it is in, so the released
  per-pair values are ``eps``-DP for each party even if the aggregator colludes with
  any of the other parties (e.g. its partners). Price: twice the noise variance.
* ``noise_split="split"`` — each party adds ``X - Y`` with ``X, Y ~ Polya(1/2, t)``;
  the two parts sum to exactly one ``DLap(t)`` (002 Protocol B.1 with two
  contributors; :func:`fedustat.secure.local_noise`). Guarantee: ``eps``-DP against the
  aggregator alone. An aggregator that colludes with a party subtracts that party's
  half and the partner's values are then not DP; for the same reason the per-pair
  values must not be shown to the parties, and the estimate withholds them (and their
  spread: its standard error then uses a data-free bound).

Binary kernels (duplicate pair) use randomized response inside the 2PC: each party
draws a private coin ``b_j`` with its own randomness; the circuit computes
``[x == y] xor b_0 xor b_1`` with two Beaver products (``u xor v = u + v - 2 u v``).
``"independent"``: ``b_j ~ Bern(q)``, ``q = 1 / (1 + e^eps_pair)``, so each party's own
coin is a full ``eps_pair`` randomized response (safe under collusion with the other
party), at flip probability ``2 q (1 - q)``; ``"split"``: ``b_j ~ Bern(q0)`` with
``2 q0 (1 - q0) = q``, exactly ``eps_pair`` randomized response against the aggregator
alone. The dealer never learns a coin: it only deals uniform Beaver masks.

Privacy model: the per-pair values are noisy and each party's data influences P of
them (n - 1 for all pairs); the guarantee holds against computationally bounded
adversaries (FSS keys use an AES-based PRG) — computational DP (CDP, Mironov et al.
2009) as 000 Sec. 5 says: :attr:`PrivacyModel.COMPUTATIONAL`.

Accuracy (000 Thm 5, corrected)
-------------------------------
:func:`theorem5_mse`: ``MSE = Var_design(zeta_1, zeta_2, n, P) + Var(noise) / #pairs``
with the design variance of 001 eq. 25
(:func:`fedustat.stats.ustat.permutation_design_variance`). 000 Thm 5 prints the noise
term as ``2P / (n eps^2)``; an average of ``Pn/2`` independent ``Lap(P/eps)`` variables
(variance ``2 P^2 / eps^2`` each) has variance ``4P / (n eps^2)`` — the printed term
is half of that (001 App. C.1 takes ``Var(Lap(b)) = b^2``). We follow the derivation,
and the Monte Carlo test confirms ``4P / (n eps^2)``. :func:`recommend_P` minimizes it
over P (001 App. C.1 "Optimal value of P").

Transport
---------
Every party step is one member's side (or one dealer's), computed on the party's own
record, its own shares and the rows it received; the peer messages are real messages,
carried by the runtime in *relay rounds* (rows addressed to parties: routed between
batches by the simulator, forwarded end-to-end encrypted by the networked server,
:mod:`fedustat.runtime.network.relay`):

0. each party joins (AUC: its public label);
1. the aggregator draws the design and, per pair, a **dealer**: a third party, uniform
   among the others (all pairs: a public rule); each party learns its pairs (partner,
   member slot, dealer) and the pairs it deals for. With ``dealer="service"`` every pair's
   dealer is instead the ``dealer`` service role (its own process in a networked run,
   public id n, :func:`fedustat.protocols.base.service_id`), which gets the rows naming
   both members of each pair (all pairs: the broadcast);
2. *relay*: each dealer sends each member its package, drawn from the dealer's own
   coins: FSS keys and mask shares (``comparison="fss"``) or edaBits, the AND triples of
   every tree level (only the active bits travel) and daBits (``"circuit"``), plus the
   Beaver triples;
3. *relay rounds*: the members' programs (:func:`_member_program`) open, round by round,
   the masked gate inputs (a member's own encoded record is its share of the pair's
   difference, member 0 holding ``xa`` and member 1 ``-xb``, so no input is shared
   beforehand; the masks make the openings uniform, 002 App. A.3), the circuit's AND
   levels and B2A bit, and the product's Beaver masks (the coins' product beside the
   equality for randomized response);
4. each member adds its own noise part to its output share and uploads it.

A party silent in step 0 (a networked run with ``min_silos``, :meth:`PairsTwoParty.dropout_rule`)
has contributed nothing: the aggregator draws the design and the dealers over the parties
that joined, renumbered in id order, and writes their real ids in the assignment. From
step 1 on a silent party stops the run (its pairs need both members).

Pairs thus run across batches and silos, and the release does not depend on how parties
are batched (noise-free it is the design's exact statistic; with noise each batch draws
from its own stream). The dealing round replaces the separate offline dealer of earlier
versions: it is counted as peer traffic, and the dealer, now one of the parties, must
collude with neither member nor the aggregator (see ``assumptions``). Randomness is laid
out per party (dealer, member coins, noise), so seeded numbers differ from versions
that ran a pair's 2PC in one place. :func:`secure_pair_values` (tests, benchmarks and
analyses with their own pairs) still computes both members side by side with an offline
:class:`fedustat.secure.Dealer` and a :class:`fedustat.secure.Transcript`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from fedustat._validation import (
    InputRangeError,
    RandomLike,
    RecordCheckError,
    as_rng,
    check_delta,
    check_epsilon,
    check_positive_int,
    check_probability,
)
from fedustat.privacy.accounting import per_step_budget_advanced
from fedustat.privacy.errors import ErrorDistribution, NormalError, error_sum
from fedustat.privacy.guarantee import (
    Assumption,
    PrivacyGuarantee,
    PrivacyModel,
    Trust,
    computational,
    semi_honest,
    trusted_dealer,
)
from fedustat.privacy.mechanisms import DiscreteLaplaceMechanism
from fedustat.privacy.noise import DeploymentNoise, NoiseSource, SimulationNoise
from fedustat.protocols.base import (
    PEER_FROM,
    PEER_TO,
    Cost,
    DropoutRule,
    Estimate,
    Message,
    Protocol,
    Role,
    service_id,
    statistic_release,
)
from fedustat.protocols.mpc.encoding import (
    ColumnEncoding,
    bounds_by_column,
    declared_bounds,
    with_rounding_bias,
)
from fedustat.protocols.registry import register
from fedustat.secure import (
    Dealer,
    FixedPoint,
    FssKey,
    PolyaDifferenceError,
    Transcript,
    add_public,
    dcf_eval,
    dpf_eval,
    equal,
    greater_than,
    less_than,
    local_noise,
    mul,
    share,
)
from fedustat.secure.compare import TreeLevel, tree_levels
from fedustat.secure.dcf import FssMsbMaterial
from fedustat.secure.dealer import popcount
from fedustat.secure.ring import full_mask
from fedustat.stats.designs import Design, permutation_pairs
from fedustat.stats.kernels import (
    Kernel,
    PublicData,
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
)
from fedustat.stats.ustat import permutation_design_variance, ustat_variance

__all__ = [
    "DEFAULT_FIXED_POINT",
    "DEFAULT_MAX_PAIRS",
    "PChoice",
    "PairRelease",
    "PairsTwoParty",
    "all_pairs_budget",
    "all_pairs_mse",
    "pair_noise_variance",
    "permutation_conditional_variance",
    "recommend_P",
    "secure_pair_values",
    "theorem5_mse",
]

NoiseSplit = Literal["independent", "split"]
ComparisonMethod = Literal["fss", "circuit"]
Mechanism = Literal["laplace", "discrete_laplace", "randomized_response"]

#: Input encoding: 002 Sec. 6.1's l = 40, c = 14, one bit of headroom so that ``x - y``
#: never overflows and the cheap half-range comparisons are exact.
DEFAULT_FIXED_POINT = FixedPoint(40, 14, headroom=1)
#: Largest number of pairs (two-party computations) one run accepts. Kendall's tau costs
#: about 30 microseconds per pair with FSS (4 DCF keys) and 3 with the circuit.
DEFAULT_MAX_PAIRS = 2_000_000
#: Pairs per block of the vectorized 2PC (bounds the memory of the dealt FSS keys).
BLOCK_PAIRS = 8192
#: A party's noise may exceed the ring's headroom with probability below 2^-40.
_TAIL_LOG2 = -40.0

_SPLITS = ("independent", "split")
_METHODS = ("fss", "circuit")
_MECHANISMS = ("laplace", "discrete_laplace", "randomized_response")

_DEALERS = ("party", "service")
DEALER_ROLE = "dealer"

SERVICE_DEALER_ASSUMPTION = (
    "every pair's correlated randomness (FSS keys, or edaBits, daBits and AND triples; "
    "Beaver triples) is dealt by the dealer service, a role of its own apart from the "
    "parties and the aggregator, from its own coins, sealed end to end to the two members; "
    "it sees none of the pairs' online messages, but it knows every mask, so it must "
    "collude with no party nor the aggregator; 000 assumes garbled circuits between the "
    "two parties instead (001 App. C.2)")

DEALER_ASSUMPTION = (
    "each pair's correlated randomness (FSS keys, or edaBits, daBits and AND triples; "
    "Beaver triples) is dealt by a third party drawn by the aggregator (public), from its "
    "own coins, sealed end to end to the two members; it "
    "sees none of the pair's online messages, but it knows the masks, so it must collude "
    "with neither member nor the aggregator; 000 assumes garbled circuits between the two "
    "parties instead (001 App. C.2)")


# ----------------------------------------------------------------------------------
# Which kernels have a two-party circuit
# ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Spec:
    """How a supported kernel is computed on shares and released.

    ``unit`` is the real value of one output unit (the kernel value is an integer
    number of units, so the noise lives on the ring); ``sensitivity_units`` is
    ``Delta f`` in those units.
    """

    kind: Literal["kendall", "auc", "gini", "equal"]
    unit: float
    sensitivity_units: int
    columns: tuple[int, ...]
    mechanism: Literal["discrete_laplace", "randomized_response"]

    @property
    def labelled(self) -> bool:
        return self.kind == "auc"


_KENDALL_FUNC = kendall_tau_kernel("a").func
_AUC_FUNC = auc_kernel().func
_GINI_FUNC = gini_kernel((0.0, 1.0)).func
_EQUAL_FUNC = duplicate_pair_kernel().func

SUPPORTED_KERNELS = (
    "Kendall's tau-a (kendall_tau_kernel('a')), AUC and Mann-Whitney (auc_kernel, "
    "mann_whitney_kernel; labels public), the Gini mean difference (gini_kernel) and the "
    "duplicate-pair ratio or Rényi-2 entropy (duplicate_pair_kernel, renyi2_entropy_kernel)")


def _pair_spec(kernel: Kernel, fixed_point: FixedPoint) -> _Spec:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a fedustat Kernel, got {type(kernel).__name__}")
    func = kernel.func
    if kernel.degree == 2 and func is _KENDALL_FUNC:
        if not kernel.statistic_is_public:
            raise ValueError(
                f"kernel {kernel.name!r}: Kendall's tau-b rescales U by tie counts of the "
                "private values, which the aggregator does not have; use "
                "kendall_tau_kernel('a') with pairs-2pc")
        return _Spec("kendall", 1.0, 2, (0, 1), "discrete_laplace")
    if kernel.degree == 2 and func is _AUC_FUNC:
        # Kernel values 0, 1/2, 1: twice the value is an integer, Delta f = 1 = 2 units.
        return _Spec("auc", 0.5, 2, (0,), "discrete_laplace")
    if kernel.degree == 2 and func is _GINI_FUNC:
        # |round(a) - round(b)| <= floor(|a - b|) + 1 for the encodings a = x 2^c, b = y 2^c.
        units = math.floor(kernel.sensitivity * fixed_point.scale) + 1
        limit = 1 << (fixed_point.bits - 2)
        if units >= limit:
            raise InputRangeError(
                f"the Gini kernel's range {kernel.sensitivity:g} is {units} units of "
                f"2^-{fixed_point.frac_bits}, which leaves no room for the noise in a "
                f"{fixed_point.bits}-bit ring (limit {limit}); use more bits or fewer "
                "fractional bits in fixed_point")
        return _Spec("gini", fixed_point.resolution, units, (0,), "discrete_laplace")
    if kernel.degree == 2 and func is _EQUAL_FUNC:
        return _Spec("equal", 1.0, 1, (0,), "randomized_response")
    raise ValueError(f"pairs-2pc has two-party circuits for {SUPPORTED_KERNELS}; kernel "
                     f"{kernel.name!r} is not supported")


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        shown = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {shown}, got {value!r}")
    return str(value)


def _check_fixed_point(fixed_point: Any) -> FixedPoint:
    if fixed_point is None:
        return DEFAULT_FIXED_POINT
    if not isinstance(fixed_point, FixedPoint):
        raise TypeError(f"fixed_point must be a fedustat.secure.FixedPoint, "
                        f"got {type(fixed_point).__name__}")
    if fixed_point.bits < 8:
        raise ValueError(f"fixed_point must have at least 8 bits, got {fixed_point.bits}")
    return fixed_point


# ----------------------------------------------------------------------------------
# Accuracy: Theorem 5, the all-pairs variant, the optimal P (001 App. C.1)
# ----------------------------------------------------------------------------------
def _rr_flip(pair_epsilon: float, noise_split: str) -> tuple[float, float]:
    """(flip probability of one party's coin, flip probability of the release)."""
    if math.isinf(pair_epsilon):
        return 0.0, 0.0
    # 1 / (1 + e^eps) written with e^-eps, so a large budget gives a tiny q instead of
    # overflowing (e^eps exceeds a float beyond eps ~ 709).
    tail = math.exp(-pair_epsilon)
    q = tail / (1.0 + tail)
    if noise_split == "independent":
        return q, 2.0 * q * (1.0 - q)
    # 2 q0 (1 - q0) = q; written to stay accurate for tiny q.
    q0 = q / (1.0 + math.sqrt(1.0 - 2.0 * q))
    return q0, q


def pair_noise_variance(pair_epsilon: float, *, mechanism: Mechanism = "laplace",
                        sensitivity: float = 1.0, resolution: float | None = None,
                        noise_split: NoiseSplit = "split") -> float:
    """Variance of the privacy error of one released pair value (kernel units squared).

    Parameters
    ----------
    pair_epsilon:
        Budget of one pair (``eps / P`` in 000 Thm 5); ``inf`` gives 0.
    mechanism:
        ``"laplace"``: ``Lap(Delta / eps_pair)``, variance ``2 (Delta / eps_pair)^2``
        (000 Thm 5). ``"discrete_laplace"``: ``DLap(t)`` in units of ``resolution``,
        ``t = exp(-eps_pair / s)`` with ``s = ceil(Delta / resolution)``, variance
        ``2 t / (1 - t)^2`` units^2 (002 App. B.1.1). ``"randomized_response"``: kernel
        values in {0, 1}, released bit flipped with probability ``q``, debiased as
        ``(b - q) / (1 - 2 q)``: variance ``q (1 - q) / (1 - 2 q)^2``.
    sensitivity:
        ``Delta f``, the width of the kernel's range (1 for randomized response).
    resolution:
        Output unit of the discrete Laplace mechanism (required for it).
    noise_split:
        ``"split"``: one noise draw per pair (the paper's setting). ``"independent"``:
        each party adds a full draw (Laplace: twice the variance; randomized response:
        flip probability ``2 q (1 - q)``).
    """
    eps = check_epsilon(pair_epsilon, "pair_epsilon", allow_inf=True)
    mech = _check_choice(mechanism, "mechanism", _MECHANISMS)
    split = _check_choice(noise_split, "noise_split", _SPLITS)
    delta_f = check_epsilon(sensitivity, "sensitivity")
    if math.isinf(eps):
        return 0.0
    copies = 2.0 if split == "independent" else 1.0
    if mech == "laplace":
        return copies * 2.0 * (delta_f / eps) ** 2
    if mech == "discrete_laplace":
        if resolution is None:
            raise ValueError("resolution is required for the discrete Laplace mechanism")
        unit = check_epsilon(resolution, "resolution")
        units = max(1, math.ceil(delta_f / unit - 1e-9))
        return copies * DiscreteLaplaceMechanism(units, eps).variance * unit**2
    if delta_f != 1.0:
        raise ValueError(f"randomized response releases a kernel in {{0, 1}}: sensitivity "
                         f"must be 1, got {sensitivity!r}")
    _, q = _rr_flip(eps, split)
    # q (1 - q) / (1 - 2 q)^2 = e^e / (e^e - 1)^2 for q = 1 / (1 + e^e).
    return q * (1.0 - q) / (1.0 - 2.0 * q) ** 2


def theorem5_mse(n: int, P: int, epsilon: float, zeta1: float, zeta2: float, *,
                 mechanism: Mechanism = "laplace", sensitivity: float = 1.0,
                 resolution: float | None = None, noise_split: NoiseSplit = "split",
                 noisy_fraction: float = 1.0) -> float:
    """MSE of the subsampling protocol around ``U_f = E f`` (000 Thm 5, corrected).

    ``MSE = Var(U_P) + noisy_fraction * Var(eta) / N`` with ``N = P floor(n/2)`` pairs,
    ``Var(U_P)`` of 001 eq. 25 (:func:`permutation_design_variance`: for even n
    ``2/(Pn) (2(P-1)(1 - 1/(n-1)) zeta_1 + (1 + (P-1)/(n-1)) zeta_2)``, odd n by the
    same count) and ``Var(eta)`` from :func:`pair_noise_variance` at ``eps / P``. With
    ``mechanism="laplace"`` and even n the noise term is ``4 P Delta^2 / (n eps^2)``;
    000 Thm 5 prints ``2P / (n eps^2)`` (see the module docstring).

    Parameters
    ----------
    n, P:
        Parties (>= 2) and permutations (>= 1).
    epsilon:
        Total budget of each party (``inf``: no noise).
    zeta1, zeta2:
        Hoeffding components of 000 eq. 3 (:func:`fedustat.stats.hoeffding_components`).
    mechanism, sensitivity, resolution, noise_split:
        The per-pair noise (:func:`pair_noise_variance`).
    noisy_fraction:
        Fraction of pairs that carry noise (AUC with public labels: pairs of one class
        are 0 by public information and carry none; ``2 n+ n- / (n (n-1))`` in
        expectation).
    """
    n = check_positive_int(n, "n", minimum=2)
    P = check_positive_int(P, "P")
    eps = check_epsilon(epsilon, allow_inf=True)
    frac = check_probability(noisy_fraction, "noisy_fraction")
    design = permutation_design_variance(zeta1, zeta2, n, P)
    noise = pair_noise_variance(eps / P, mechanism=mechanism, sensitivity=sensitivity,
                                resolution=resolution, noise_split=noise_split)
    return design + frac * noise / (P * (n // 2))


def all_pairs_budget(n: int, epsilon: float, delta: float) -> tuple[float, float, str]:
    """Per-pair ``(eps, delta)`` of the all-pairs variant and the rule used.

    Every party is in ``n - 1`` pairs. With ``delta > 0`` the per-pair budget is the
    largest whose ``(n-1)``-fold advanced composition (Dwork, Rothblum & Vadhan 2010;
    000 Sec. 5 and its Kendall experiment with ``delta = 1e-8``) is ``(epsilon, delta)``
    (:func:`fedustat.privacy.accounting.per_step_budget_advanced`, pure per-pair steps),
    unless basic composition ``epsilon / (n - 1)`` is larger; with ``delta = 0``, basic
    composition.

    Returns
    -------
    (pair_epsilon, pair_delta, rule)
    """
    n = check_positive_int(n, "n", minimum=2)
    eps = check_epsilon(epsilon, allow_inf=True)
    dlt = check_delta(delta)
    k = n - 1
    if math.isinf(eps):
        return math.inf, 0.0, "none (epsilon = inf)"
    basic = eps / k
    if dlt == 0.0:
        return basic, 0.0, f"basic composition over {k} pairs per party"
    advanced, step_delta = per_step_budget_advanced(eps, dlt, k)
    if advanced > basic:
        return advanced, step_delta, (f"advanced composition over {k} pairs per party "
                                      f"(delta' = {dlt:g})")
    return basic, 0.0, f"basic composition over {k} pairs per party (beats advanced here)"


def all_pairs_mse(n: int, epsilon: float, delta: float, zeta1: float, zeta2: float, *,
                  mechanism: Mechanism = "laplace", sensitivity: float = 1.0,
                  resolution: float | None = None, noise_split: NoiseSplit = "split",
                  noisy_fraction: float = 1.0) -> float:
    """MSE of the all-pairs variant around ``U_f``: ``Var(U_n) + Var(eta) / C(n, 2)``.

    ``Var(U_n)`` is Hoeffding's (000 eq. 3, :func:`ustat_variance`); the per-pair noise
    uses the budget of :func:`all_pairs_budget`. Parameters as :func:`theorem5_mse`.
    """
    n = check_positive_int(n, "n", minimum=2)
    frac = check_probability(noisy_fraction, "noisy_fraction")
    pair_eps, _, _ = all_pairs_budget(n, epsilon, delta)
    noise = pair_noise_variance(pair_eps, mechanism=mechanism, sensitivity=sensitivity,
                                resolution=resolution, noise_split=noise_split)
    return ustat_variance(zeta1, zeta2, n) + frac * noise / math.comb(n, 2)


class PChoice(NamedTuple):
    """The recommended number of permutations and its predicted MSE."""

    P: int
    mse: float
    continuous: float


def recommend_P(n: int, epsilon: float, zeta1: float, zeta2: float, *,  # noqa: N802 (000's P)
                mechanism: Mechanism = "laplace", sensitivity: float = 1.0,
                resolution: float | None = None, noise_split: NoiseSplit = "split",
                noisy_fraction: float = 1.0, max_P: int | None = None) -> PChoice:
    """The P that minimizes :func:`theorem5_mse` (001 App. C.1, "Optimal value of P").

    For even n and the Laplace mechanism, Thm 5's MSE is ``C + A / P + B P`` with
    ``A = 2 (n-2)/(n-1) (zeta_2 - 2 zeta_1) / n`` (the subsampling term; ``>= 0`` since
    ``zeta_2 >= 2 zeta_1``) and ``B = 4 k Delta^2 / (n eps^2)`` (the noise term, ``k = 2``
    for independent noise shares, times ``noisy_fraction``), so the continuous minimizer
    is ``P* = sqrt(A / B) = eps sqrt((n-2)/(n-1) (zeta_2 - 2 zeta_1) / (2 k Delta^2))``.
    As 001 App. C.1 says, ``P > 1`` pays off only when ``zeta_2`` is large compared to
    ``1/eps^2``, and ``P = 1`` is optimal when ``zeta_2 = 2 zeta_1``. The integer answer is
    found by descending the exact MSE from the rounded ``P*`` (the MSE is unimodal in
    P), so it also holds for odd n, the discrete mechanisms and ``noisy_fraction``.

    Parameters
    ----------
    n, epsilon, zeta1, zeta2, mechanism, sensitivity, resolution, noise_split,
    noisy_fraction:
        As :func:`theorem5_mse`; ``epsilon`` must be finite.
    max_P:
        Largest P considered (default ``n - 1``).
    """
    n = check_positive_int(n, "n", minimum=2)
    eps = check_epsilon(epsilon)
    delta_f = check_epsilon(sensitivity, "sensitivity")
    frac = check_probability(noisy_fraction, "noisy_fraction")
    limit = max(1, n - 1) if max_P is None else check_positive_int(max_P, "max_P")
    copies = 2.0 if _check_choice(noise_split, "noise_split", _SPLITS) == "independent" else 1.0
    gap = max(0.0, float(zeta2) - 2.0 * float(zeta1))
    a = 2.0 * (n - 2) / (n - 1) * gap / n if n > 2 else 0.0
    b = 4.0 * copies * frac * delta_f**2 / (n * eps**2)
    continuous = math.sqrt(a / b) if b > 0 else math.inf

    def mse(P: int) -> float:
        return theorem5_mse(n, P, eps, zeta1, zeta2, mechanism=mechanism,
                            sensitivity=delta_f, resolution=resolution,
                            noise_split=noise_split, noisy_fraction=frac)

    best = int(min(limit, max(1, round(continuous)))) if math.isfinite(continuous) else limit
    best_mse = mse(best)
    for step in (-1, 1):
        while 1 <= best + step <= limit:
            candidate = mse(best + step)
            if candidate >= best_mse:
                break
            best, best_mse = best + step, candidate
    return PChoice(best, best_mse, continuous)


def permutation_conditional_variance(kernel: Kernel, data: Any, P: int) -> float:
    """``Var(U_P | data)``: the subsampling error of the P-permutation design on fixed data.

    The expected squared distance between the design's mean and the complete
    U-statistic ``U_n`` of ``data`` (the error of a noise-free run). The P permutations
    are independent given the data, so this is ``Var(mean over one random perfect
    matching) / P``. For one matching (n even, ``p = 1/(n-1)``), with ``F_ij`` centred
    by ``U_n``, ``Q = sum_{i<j} F_ij^2``, ``S1 = sum_i R_i^2 - 2Q`` (ordered pairs of pairs
    sharing an index, ``R_i = sum_j F_ij``) and ``D = -Q - S1`` (disjoint ones):
    ``Var(sum_M F) = p(1-p) Q - p^2 S1 + (p/(n-3) - p^2) D``, because two pairs sharing
    an index are never both in M and two disjoint pairs are with probability
    ``p / (n-3)``. Needs all ``C(n, 2)`` kernel values (computed in blocks of rows).
    """
    arr = kernel.check_data(data)
    P = check_positive_int(P, "P")
    n = arr.shape[0]
    if kernel.degree != 2:
        raise ValueError(f"the permutation design pairs records; kernel {kernel.name!r} has "
                         f"degree {kernel.degree}")
    if n % 2:
        raise ValueError(f"n must be even for the exact conditional variance, got n={n} "
                         "(odd n leaves a random party out of each permutation)")
    if n == 2:
        return 0.0
    rows = np.zeros(n)
    squares = np.zeros(n)
    block = max(1, (1 << 22) // n)
    for start in range(0, n, block):
        stop = min(n, start + block)
        i = np.repeat(np.arange(start, stop), n)
        j = np.tile(np.arange(n), stop - start)
        keep = i != j
        values = kernel.evaluate(arr, np.column_stack([i[keep], j[keep]]))
        owner = i[keep] - start
        rows[start:stop] = np.bincount(owner, weights=values, minlength=stop - start)
        squares[start:stop] = np.bincount(owner, weights=values**2, minlength=stop - start)
    pairs = n * (n - 1) / 2.0
    theta = rows.sum() / (2.0 * pairs)
    # Centre F by U_n: the matching sum shifts by a constant, its variance does not.
    centred_rows = rows - (n - 1) * theta
    q = squares.sum() / 2.0 - 2.0 * theta * rows.sum() / 2.0 + pairs * theta**2
    s1 = float(np.sum(centred_rows**2)) - 2.0 * q
    d = -q - s1
    p = 1.0 / (n - 1)
    var_sum = p * (1 - p) * q - p * p * s1 + (p / (n - 3) - p * p) * d
    h = n // 2
    return max(0.0, var_sum) / (h * h) / P


# ----------------------------------------------------------------------------------
# The two-party computation of the pairs (both members, vectorized over pairs)
# ----------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _Coins:
    """Where the members' and the dealer's randomness comes from."""

    shares: Any
    dealer: Any
    noise: NoiseSource

    @classmethod
    def make(cls, rng: RandomLike, noise: NoiseSource | None) -> _Coins:
        if isinstance(noise, DeploymentNoise):
            # Deployment: shares, masks and keys from the OS CSPRNG, noise from vetted
            # samplers; no seed enters.
            return cls("os", "os", noise)
        gen = as_rng(rng)
        share_rng, dealer_rng, noise_rng = gen.spawn(3)
        return cls(share_rng, dealer_rng,
                   noise if noise is not None else SimulationNoise(noise_rng))


def _check_noise_room(spec: _Spec, fp: FixedPoint, t: float) -> None:
    """Refuse parameters for which a party's noise part may not fit the ring.

    Each part must stay below ``2^(l-3)`` so that ``f + part_0 + part_1`` cannot wrap
    (``|f| < 2^(l-2)``). ``P(|part| >= B) <= 2 t^B`` for a ``DLap(t)`` draw and for a
    difference of two ``Polya(1/2, t)`` (stochastically smaller than ``Polya(1, t)``,
    the geometric law); required below ``2^-40``.
    """
    bound = 1 << (fp.bits - 3)
    if t > 0.0 and 1.0 + bound * math.log2(t) > _TAIL_LOG2:
        raise InputRangeError(
            f"the per-pair noise (DLap ratio t={t:.6g} in units of {spec.unit:g}) may exceed "
            f"2^{fp.bits - 3} units with probability above 2^-40; the {fp.bits}-bit ring is "
            "too small for this budget: use more bits in fixed_point")


def _add_noise(spec: _Spec, out: np.ndarray, pair_epsilon: float, split: str, fp: FixedPoint,
               source: NoiseSource) -> tuple[np.ndarray, np.ndarray]:
    """Each member adds its noise part to its own output share (no message)."""
    ring = fp.ring
    m = out.shape[1]
    t = math.exp(-pair_epsilon / spec.sensitivity_units)
    _check_noise_room(spec, fp, t)
    # min_honest=1: each member draws Polya(1, t) differences = a full DLap(t)
    # ("independent"); min_honest=2: Polya(1/2, t) each, summing to one DLap(t) ("split").
    parts = local_noise(2, pair_epsilon, spec.sensitivity_units, ring=ring,
                        min_honest=1 if split == "independent" else 2, size=m, rng=source)
    signed = ring.to_signed(parts.shares)
    bound = 1 << (fp.bits - 3)
    if signed.size and int(np.abs(signed).max()) >= bound:
        raise InputRangeError(f"a party's noise part {int(np.abs(signed).max())} does not fit "
                            f"the ring headroom (< 2^{fp.bits - 3} units)")
    return ring.add(out, parts.shares), signed


def _kernel_shares(spec: _Spec, xa: np.ndarray, xb: np.ndarray, dealer: Dealer,
                   method: str, full_range: bool, log: Transcript) -> np.ndarray:
    """Shares (2, m) of the kernel value in output units; ``xa`` is member 0's record."""
    ring = dealer.ring
    if spec.kind == "kendall":
        # One call, four comparisons per pair: [xa_c < xb_c] and [xb_c < xa_c], c = 1, 2.
        lt = less_than(np.concatenate([xa, xb], axis=-1), np.concatenate([xb, xa], axis=-1),
                       dealer, method=method, full_range=full_range, transcript=log)
        sign = ring.sub(lt[..., 2:], lt[..., :2])          # sign(xa_c - xb_c)
        return mul(sign[..., 0], sign[..., 1], dealer, transcript=log)
    if spec.kind == "auc":
        pos, neg = xa[..., 0], xb[..., 0]                  # member 0 holds the positive
        lt = less_than(np.stack([neg, pos], axis=-1), np.stack([pos, neg], axis=-1),
                       dealer, method=method, full_range=full_range, transcript=log)
        # 2 f = 1 + [pos > neg] - [pos < neg]: units of 1/2.
        return add_public(ring.sub(lt[..., 0], lt[..., 1]), 1, ring=ring)
    if spec.kind == "gini":
        x, y = xa[..., 0], xb[..., 0]
        gt = greater_than(x, y, dealer, method=method, full_range=full_range, transcript=log)
        sign = add_public(ring.mul(np.uint64(2), gt), -1, ring=ring)
        # (2 [x > y] - 1)(x - y) = |x - y| (002 App. A.5.2; 001 App. C.2).
        return mul(sign, ring.sub(x, y), dealer, transcript=log)
    return equal(xa[..., 0], xb[..., 0], dealer, method=method, transcript=log)


def _coin_flip(coins: np.ndarray, dealer: Dealer, log: Transcript) -> np.ndarray:
    """Shares of ``b_0 xor b_1``: member j's coin ``b_j`` enters as the trivial sharing in
    which j holds the coin and its partner 0 (no message); ``u xor v = u + v - 2 u v``
    (one Beaver product)."""
    ring = dealer.ring
    zero = np.zeros_like(coins[0])
    b0, b1 = np.stack([coins[0], zero]), np.stack([zero, coins[1]])
    prod = mul(b0, b1, dealer, transcript=log)
    return ring.sub(ring.add(b0, b1), ring.mul(np.uint64(2), prod))


def _xor_shares(u: np.ndarray, v: np.ndarray, dealer: Dealer, log: Transcript) -> np.ndarray:
    """Shares of ``u xor v`` for shared bits (one Beaver product)."""
    ring = dealer.ring
    both = mul(u, v, dealer, transcript=log)
    return ring.sub(ring.add(u, v), ring.mul(np.uint64(2), both))


def _party_side(spec: _Spec, rec_a: np.ndarray, rec_b: np.ndarray, ids: np.ndarray, *,
                pair_epsilon: float, split: str, method: str, fp: FixedPoint, coins: _Coins,
                transcript: Transcript) -> tuple[np.ndarray, np.ndarray]:
    """Member 0 holds ``rec_a``, member 1 ``rec_b`` (rows = pairs); ``ids`` (2, m) are
    their global party ids, under which ``transcript`` records every bit.

    Returns the output shares (2, m) and the members' noise parts in output units (for
    randomized response their coins), for audits only.
    """
    ring = fp.ring
    m = rec_a.shape[0]
    shares_out = np.zeros((2, m), dtype=np.uint64)
    audit = np.zeros((2, m), dtype=np.int64)
    full_range = fp.headroom == 0
    noisy = math.isfinite(pair_epsilon)
    with transcript.parallel() as par:
        for start in range(0, m, BLOCK_PAIRS):
            rows = slice(start, min(m, start + BLOCK_PAIRS))
            with par.branch():
                view = transcript.view(party_ids=ids[:, rows])
                dealer = Dealer(2, ring=ring, rng=coins.dealer, transcript=view)
                enc_a = fp.encode(rec_a[rows][:, list(spec.columns)], "data")
                enc_b = fp.encode(rec_b[rows][:, list(spec.columns)], "data")
                # Each member keeps one share of its own record and sends its partner the
                # other, uniform one: (columns x l) bits each, in one round.
                xa = share(enc_a, 2, coins.shares, ring=ring)[::-1]
                xb = share(enc_b, 2, coins.shares, ring=ring)
                view.record_open("pairs.share_inputs", len(spec.columns) * ring.bits)
                if spec.mechanism == "randomized_response":
                    q_coin, _ = _rr_flip(pair_epsilon, split)
                    bits = np.asarray(coins.noise.bernoulli(q_coin, (2, enc_a.shape[0])),
                                      dtype=np.uint64)
                    # The coins' product needs no input: it runs beside the equality test.
                    with transcript.parallel() as inner:
                        with inner.branch():
                            eq = _kernel_shares(spec, xa, xb, dealer, method, full_range, view)
                        with inner.branch():
                            flip = _coin_flip(bits, dealer, view)
                    out = _xor_shares(eq, flip, dealer, view)
                    audit[:, rows] = bits.astype(np.int64)
                else:
                    out = _kernel_shares(spec, xa, xb, dealer, method, full_range, view)
                    if noisy:
                        out, parts = _add_noise(spec, out, pair_epsilon, split, fp, coins.noise)
                        audit[:, rows] = parts
                shares_out[:, rows] = out
    return shares_out, audit


def _release(spec: _Spec, totals: np.ndarray, fp: FixedPoint, pair_epsilon: float,
             split: str) -> np.ndarray:
    """The aggregator's side: reconstructed ring elements -> released kernel values
    (debiased for randomized response)."""
    signed = fp.ring.to_signed(totals)
    if spec.mechanism == "randomized_response":
        if signed.size and (signed.min() < 0 or signed.max() > 1):
            raise RuntimeError("a reconstructed randomized-response output is not a bit; "
                               "the two shares do not belong to the same pair")
        _, q = _rr_flip(pair_epsilon, split)
        return (signed.astype(np.float64) - q) / (1.0 - 2.0 * q)
    return signed.astype(np.float64) * spec.unit


def _orient(spec: _Spec, data: np.ndarray, pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pairs to compute by 2PC, oriented member 0 first; mask of those pairs).

    For AUC (labels public) only pairs with different labels are computed, the positive
    party first; every other kernel computes every pair.
    """
    if not spec.labelled:
        return pairs, np.ones(pairs.shape[0], dtype=bool)
    labels = data[:, 1]
    la, lb = labels[pairs[:, 0]], labels[pairs[:, 1]]
    active = la != lb
    chosen = pairs[active]
    swap = labels[chosen[:, 0]] < labels[chosen[:, 1]]
    chosen = np.where(swap[:, None], chosen[:, ::-1], chosen)
    return chosen, active


@dataclass(frozen=True, eq=False)
class PairRelease:
    """What :func:`secure_pair_values` computed.

    Attributes
    ----------
    values:
        The released value of every pair (kernel units; debiased for randomized
        response; 0 for AUC pairs of one class, fixed by the public labels).
    computed:
        Which pairs went through the 2PC (all but AUC's same-label pairs).
    pairs:
        The computed pairs as (member 0, member 1) party ids (AUC: positive first).
    shares:
        The two output shares of each computed pair, shape (2, m): what the members
        send the aggregator.
    noise:
        Each member's noise part in output units (Laplace-type kernels) or its coin
        (randomized response), shape (2, m). For audits and tests only: the parties
        never send it.
    pair_noise_variance:
        Variance of the privacy error of one computed pair value (kernel units^2).
    flip_probability:
        Randomized response: probability that a released bit is flipped (else 0).
    transcript:
        Every bit the partners and the dealer sent.
    """

    values: np.ndarray
    computed: np.ndarray
    pairs: np.ndarray
    shares: np.ndarray
    noise: np.ndarray
    pair_noise_variance: float
    flip_probability: float
    transcript: Transcript = field(repr=False)


def _pair_noise_variance(spec: _Spec, pair_epsilon: float, split: str) -> float:
    if spec.mechanism == "randomized_response":
        return pair_noise_variance(pair_epsilon, mechanism="randomized_response",
                                   noise_split=split)  # type: ignore[arg-type]
    return pair_noise_variance(pair_epsilon, mechanism="discrete_laplace",
                               sensitivity=spec.sensitivity_units * spec.unit,
                               resolution=spec.unit, noise_split=split)  # type: ignore[arg-type]


def _as_pairs(pairs: Any, n: int) -> np.ndarray:
    idx = pairs.tuples if isinstance(pairs, Design) else np.asarray(pairs)
    if idx.ndim != 2 or idx.shape[1] != 2:
        raise ValueError(f"pairs must have shape (m, 2), got {idx.shape}")
    if idx.size and not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"pairs must hold integer party indices, got dtype {idx.dtype}")
    idx = idx.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"pairs has party indices outside [0, {n})")
    if np.any(idx[:, 0] == idx[:, 1]):
        raise ValueError("pairs has a pair of a party with itself")
    return idx


def secure_pair_values(kernel: Kernel, data: Any, pairs: Design | Any, *,
                       pair_epsilon: float, noise_split: NoiseSplit = "independent",
                       comparison: ComparisonMethod = "fss",
                       fixed_point: FixedPoint | None = None, rng: RandomLike = None,
                       noise: NoiseSource | None = None,
                       transcript: Transcript | None = None) -> PairRelease:
    """Run the noisy two-party computation of ``kernel`` on every pair and reconstruct.

    Both sides of steps 2-3 of 000 Sec. 5 for given pairs: each pair's two members
    compute output shares of ``f + noise`` (module docstring), and the aggregator adds
    them. :class:`PairsTwoParty` runs the same code, split between the party step and
    the aggregator step; this function serves tests, benchmarks and analyses that bring
    their own pairs.

    Parameters
    ----------
    kernel:
        A supported kernel (see the module docstring).
    data:
        One row per party, columns as ``kernel.columns``.
    pairs:
        A :class:`~fedustat.stats.designs.Design` or an (m, 2) array of party indices.
    pair_epsilon:
        Budget of one pair (``inf``: no noise, the exact kernel values of the
        fixed-point encoded data).
    noise_split, comparison, fixed_point, noise:
        As :class:`PairsTwoParty`.
    rng:
        Seed or Generator for the members' and the dealer's coins (simulation).
    transcript:
        Where the messages are recorded (a new one by default).
    """
    arr = kernel.check_data(data)
    fp = _check_fixed_point(fixed_point)
    spec = _pair_spec(kernel, fp)
    eps = check_epsilon(pair_epsilon, "pair_epsilon", allow_inf=True)
    split = _check_choice(noise_split, "noise_split", _SPLITS)
    method = _check_choice(comparison, "comparison", _METHODS)
    if noise is not None and not isinstance(noise, NoiseSource):
        raise TypeError(f"noise must be a NoiseSource, got {type(noise).__name__}")
    idx = _as_pairs(pairs, arr.shape[0])
    log = transcript if transcript is not None else Transcript(2, 1)
    chosen, active = _orient(spec, arr, idx)
    coins = _Coins.make(rng, noise)
    out, audit = _party_side(spec, arr[chosen[:, 0]], arr[chosen[:, 1]], chosen.T,
                                pair_epsilon=eps, split=split, method=method, fp=fp,
                                coins=coins, transcript=log)
    values = np.zeros(idx.shape[0])
    values[active] = _release(spec, fp.ring.sum(out, axis=0), fp, eps, split)
    _, q = _rr_flip(eps, split) if spec.mechanism == "randomized_response" else (0.0, 0.0)
    return PairRelease(values, active, chosen, out, audit,
                       _pair_noise_variance(spec, eps, split), q, log)


# ----------------------------------------------------------------------------------
# One member's side of a pair's 2PC, on its own record, its shares and what it received
# (the party steps; relay rounds carry the peer messages)
# ----------------------------------------------------------------------------------
#: What a member's program yields each round: the shares it opens to its partner, as
#: ("add" | "xor", values, bits per value); it is sent back the opened values.
Openings = list[tuple[str, np.ndarray, int]]
Program = Generator[Openings, list[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class _Layout:
    """Per pair: the comparison gate ("msb": the sign of a difference, "zero": equality),
    how many run side by side, the comparison method and the Beaver triples."""

    gate: Literal["msb", "zero"]
    gates: int
    triples: int
    method: str


def _layout(spec: _Spec, method: str) -> _Layout:
    # Kendall: [xa_c < xb_c], [xb_c < xa_c] for c = 1, 2, then the product of the signs;
    # AUC: [neg < pos], [pos < neg]; Gini: [x > y], then sign * (x - y); duplicate: [x == y]
    # beside the coins' product, then the xor product (module docstring table).
    gate, gates, triples = {"kendall": ("msb", 4, 1), "auc": ("msb", 2, 0),
                            "gini": ("msb", 1, 1), "equal": ("zero", 1, 2)}[spec.kind]
    return _Layout(gate, gates, triples, method)  # type: ignore[arg-type]


def _domain_bits(gate: str, ring_bits: int) -> int:
    # fss_msb tests the low l - 1 bits with a DCF; fss_is_zero a DPF on all l bits.
    return ring_bits - 1 if gate == "msb" else ring_bits


def _tree(lay: _Layout, ring_bits: int) -> tuple[TreeLevel, ...]:
    # The circuit's reduction tree: the borrow of the low l - 1 bits (msb), or the AND of
    # all l bits (zero), as in fedustat.secure.compare.
    return tree_levels(ring_bits - 1 if lay.gate == "msb" else ring_bits)


def _package_fields(lay: _Layout, fp: FixedPoint) -> dict[str, tuple[tuple[int, ...], Any, int]]:
    """Field -> (shape per pair, dtype, bits per value) of one member's offline package.

    FSS: its share of each gate's mask (and of the mask's sign bit) and its key (seed and
    correction words, 002 App. A.3 / BCG+21 Fig. 3). Circuit: its shares of an edaBit
    (the mask and its bits), of the AND triples of every tree level (only the active
    bits travel) and of a daBit. Both: its shares of the Beaver triples. The sizes are
    those :class:`fedustat.secure.Dealer` records for the same material.
    """
    g, ell = lay.gates, fp.bits
    out: dict[str, tuple[tuple[int, ...], Any, int]] = {}
    if lay.method == "fss":
        d = _domain_bits(lay.gate, ell)
        out.update(mask=((g,), np.uint64, ell), key_seed=((g, 2), np.uint64, 64),
                   key_cw_seed=((g, d, 2), np.uint64, 64), key_cw_t=((g, d, 2), np.bool_, 1),
                   key_cw_out=((g,), np.uint64, ell))
        if lay.gate == "msb":
            out.update(mask_msb=((g,), np.uint64, ell), key_cw_value=((g, d), np.uint64, ell))
    else:
        out.update(eda_arith=((g,), np.uint64, ell), eda_bits=((g,), np.uint64, ell),
                   dab_arith=((g,), np.uint64, ell), dab_bit=((g,), np.uint64, 1))
        for i, level in enumerate(_tree(lay, ell)):
            out[f"and{i}"] = ((g, 3), np.uint64, popcount(level.combine))
            if lay.gate == "msb" and level.keep_p:
                out[f"and{i}_p"] = ((g, 3), np.uint64, popcount(level.keep_p))
    if lay.triples:
        out["triple"] = ((lay.triples, 3), np.uint64, ell)
    return out


def _and_triple_masks(lay: _Layout, ring_bits: int) -> dict[str, int]:
    """The circuit's AND-triple fields and the active bits of each (what travels)."""
    if lay.method == "fss":
        return {}
    out = {}
    for i, level in enumerate(_tree(lay, ring_bits)):
        out[f"and{i}"] = level.combine
        if lay.gate == "msb" and level.keep_p:
            out[f"and{i}_p"] = level.keep_p
    return out


def _active_positions(active: int) -> list[int]:
    return [i for i in range(64) if (active >> i) & 1]


def _move_bits(words: np.ndarray, moves: list[tuple[int, int]]) -> np.ndarray:
    """Bit ``src`` of each word to bit ``dst`` of the result, for each (src, dst) move.

    In place on two buffers: a temporary array per bit moved (up to 64 per call, each the
    size of the input) costs a page-faulting allocation each under an allocator that
    returns freed memory to the system at once (a Dask worker sets
    ``MALLOC_TRIM_THRESHOLD_``), which made the members' steps several times slower there.
    """
    words = np.asarray(words, dtype=np.uint64)
    out = np.zeros(words.shape, dtype=np.uint64)
    bit = np.empty_like(out)
    one = np.uint64(1)
    for src, dst in moves:
        np.right_shift(words, np.uint64(src), out=bit)
        np.bitwise_and(bit, one, out=bit)
        np.left_shift(bit, np.uint64(dst), out=bit)
        np.bitwise_or(out, bit, out=out)
    return out


def _compress(words: np.ndarray, active: int) -> np.ndarray:
    """The ``active`` bits of each word, packed into the low bits (what travels)."""
    return _move_bits(words, [(pos, k) for k, pos in enumerate(_active_positions(active))])


def _expand(packed: np.ndarray, active: int) -> np.ndarray:
    """Inverse of :func:`_compress`: the packed bits back at their ``active`` positions."""
    return _move_bits(packed, [(k, pos) for k, pos in enumerate(_active_positions(active))])


def _deal_packages(lay: _Layout, fp: FixedPoint, n_deals: int, source: Any
                   ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A dealing party's packages for ``n_deals`` pairs: (member 0's, member 1's)."""
    shapes = _package_fields(lay, fp)
    if n_deals == 0:
        empty = {k: np.zeros((0, *shape), dtype=dt) for k, (shape, dt, _) in shapes.items()}
        return empty, {k: v.copy() for k, v in empty.items()}
    dealer = Dealer(2, ring=fp.ring, rng=source)
    g, shape = lay.gates, (n_deals, lay.gates)
    packages: list[dict[str, np.ndarray]] = [{}, {}]
    if lay.method == "fss":
        d = _domain_bits(lay.gate, fp.bits)
        mat = dealer.fss_msb(shape) if lay.gate == "msb" else dealer.fss_zero(shape)
        for b, pkg in enumerate(packages):
            key = mat.keys[b]
            # Keys are stored level-major over the flattened (pair, gate) axis.
            pkg.update(mask=mat.mask[b], key_seed=key.seed.reshape(n_deals, g, 2),
                       key_cw_seed=key.cw_seed.reshape(d, n_deals, g, 2).transpose(1, 2, 0, 3),
                       key_cw_t=key.cw_t.reshape(d, n_deals, g, 2).transpose(1, 2, 0, 3),
                       key_cw_out=key.cw_out.reshape(n_deals, g))
            if isinstance(mat, FssMsbMaterial):
                assert key.cw_value is not None
                pkg.update(mask_msb=mat.mask_msb[b],
                           key_cw_value=key.cw_value.reshape(d, n_deals, g).transpose(1, 2, 0))
    else:
        eda = dealer.edabits(shape)
        triples = {}
        for i, level in enumerate(_tree(lay, fp.bits)):
            triples[f"and{i}"] = dealer.and_triples(shape, level.combine)
            if lay.gate == "msb" and level.keep_p:
                triples[f"and{i}_p"] = dealer.and_triples(shape, level.keep_p)
        dab = dealer.dabits(shape)
        for b, pkg in enumerate(packages):
            pkg.update(eda_arith=eda.arith[b], eda_bits=eda.bits[b], dab_arith=dab.arith[b],
                       dab_bit=np.bitwise_and(dab.bits[b], np.uint64(1)))
            for name, tri in triples.items():
                pkg[name] = np.stack([_compress(v[b], tri.active) for v in (tri.a, tri.b, tri.c)],
                                     axis=-1)
    if lay.triples:
        beaver = dealer.beaver_triples((n_deals, lay.triples))
        for b, pkg in enumerate(packages):
            pkg["triple"] = np.stack([beaver.a[b], beaver.b[b], beaver.c[b]], axis=-1)
    first, second = ({k: np.ascontiguousarray(v, dtype=shapes[k][1]) for k, v in p.items()}
                     for p in packages)
    return first, second


def _member_key(member: int, lay: _Layout, fp: FixedPoint, pkg: Mapping[str, np.ndarray]
                ) -> FssKey:
    """Member ``member``'s FSS keys for its slots' gates, from its received packages."""
    k, g, d = pkg["mask"].shape[0], lay.gates, _domain_bits(lay.gate, fp.bits)
    value = None
    if lay.gate == "msb":
        value = np.ascontiguousarray(pkg["key_cw_value"].transpose(2, 0, 1).reshape(d, k * g))
    return FssKey(member, "dcf" if lay.gate == "msb" else "dpf", d, fp.ring,
                  np.ascontiguousarray(pkg["key_seed"].reshape(k * g, 2)),
                  np.ascontiguousarray(pkg["key_cw_seed"].transpose(2, 0, 1, 3)
                                       .reshape(d, k * g, 2)),
                  np.ascontiguousarray(pkg["key_cw_t"].transpose(2, 0, 1, 3)
                                       .reshape(d, k * g, 2)),
                  value, np.ascontiguousarray(pkg["key_cw_out"].reshape(k * g)))


def _gate_inputs(spec: _Spec, fp: FixedPoint, member: int, enc: np.ndarray) -> np.ndarray:
    """A member's share of every gate's input, shape (slots, gates).

    Its own encoded record is its share of the pair's difference ``xa - xb`` (member 0
    holds ``xa``, member 1 ``-xb``; the partner's share is the other term), so no input
    is shared before the gates: the masked openings hide them (the masks are uniform).
    """
    ring = fp.ring
    own = enc if member == 0 else ring.neg(enc)                      # share of xa - xb
    if spec.kind == "kendall":
        # [xa_c < xb_c] = msb(xa_c - xb_c); [xb_c < xa_c] = msb(xb_c - xa_c).
        return np.concatenate([own, ring.neg(own)], axis=1)
    if spec.kind == "auc":
        # [neg < pos] = msb(xb - xa), [pos < neg] = msb(xa - xb) (member 0 is positive).
        return np.concatenate([ring.neg(own), own], axis=1)
    if spec.kind == "gini":
        return ring.neg(own)                                         # [x > y] = msb(y - x)
    return own                                                       # [x == y]: zero(x - y)


def _fss_gates(lay: _Layout, fp: FixedPoint, member: int, inputs: np.ndarray,
               pkg: Mapping[str, np.ndarray]) -> Program:
    """fss_msb / fss_is_zero of :mod:`fedustat.secure.fss_gates`, one member's side: open
    ``z + r`` (one round), evaluate the key at the opened value."""
    ring = fp.ring
    (opened,) = yield [("add", ring.add(inputs, pkg["mask"]), fp.bits)]
    if opened.size == 0:
        return np.zeros_like(opened)
    key = _member_key(member, lay, fp, pkg)
    flat = opened.ravel()
    if lay.gate == "zero":
        return dpf_eval(member, key, flat).reshape(opened.shape)
    low = np.bitwise_and(flat, np.uint64((1 << (ring.bits - 1)) - 1))
    top = ring.msb(opened)
    # w = msb(r) xor borrow = beta [low(z + r) < low(r)] + msb(r); msb(z) = a + (1 - 2a) w
    # with a = msb(z + r) public.
    w = ring.add(dcf_eval(member, key, low).reshape(opened.shape), pkg["mask_msb"])
    out = ring.mul(ring.sub(np.uint64(1), ring.mul(np.uint64(2), top)), w)
    return ring.add(out, top) if member == 0 else out


def _and_gates(member: int, gates: list[tuple[np.ndarray, np.ndarray, np.ndarray, int]]
               ) -> Generator[Openings, list[np.ndarray], list[np.ndarray]]:
    """AND gates on XOR-shared words in one round (secure.and_gates, one member's side):
    open ``x ^ a`` and ``y ^ b`` on the active bits, ``z = c ^ d b ^ e a (^ d e)``."""
    items: Openings = []
    for x, y, tri, active in gates:
        items += [("xor", _compress(np.bitwise_xor(x, tri[..., 0]), active), popcount(active)),
                  ("xor", _compress(np.bitwise_xor(y, tri[..., 1]), active), popcount(active))]
    opened = yield items
    outs = []
    for k, (_, _, tri, active) in enumerate(gates):
        d, e = _expand(opened[2 * k], active), _expand(opened[2 * k + 1], active)
        a, b, c = (tri[..., i] for i in range(3))
        z = np.bitwise_xor(c, np.bitwise_xor(np.bitwise_and(d, b), np.bitwise_and(e, a)))
        outs.append(np.bitwise_xor(z, np.bitwise_and(d, e)) if member == 0 else z)
    return outs


def _circuit_gates(lay: _Layout, fp: FixedPoint, member: int, inputs: np.ndarray,
                   pkg: Mapping[str, np.ndarray]) -> Program:
    """The boolean comparison circuits of :mod:`fedustat.secure.compare` (msb by the
    parallel-prefix borrow of ``c - r`` with an edaBit ``r``; zero by an AND tree), one
    member's side: open ``c = z + r``, one round per tree level, then B2A with a daBit."""
    ring, ell = fp.ring, fp.bits
    (c,) = yield [("add", ring.add(inputs, pkg["eda_arith"]), ell)]
    bits = pkg["eda_bits"]
    levels = _tree(lay, ell)
    if lay.gate == "msb":
        low = full_mask(ell - 1)
        c_low, r_low = np.bitwise_and(c, low), np.bitwise_and(bits, low)
        not_c = np.bitwise_and(np.invert(c_low), low)
        g = np.bitwise_and(r_low, not_c)                     # r_i and not c_i
        p = np.bitwise_xor(r_low, not_c) if member == 0 else r_low   # not (c_i xor r_i)
        for i, level in enumerate(levels):
            step, comb = np.uint64(level.step), np.uint64(level.combine)
            g_hi = np.bitwise_and(np.right_shift(g, step), comb)
            p_hi = np.bitwise_and(np.right_shift(p, step), comb)
            gates = [(p_hi, np.bitwise_and(g, comb), pkg[f"and{i}"], level.combine)]
            if level.keep_p:
                keep = np.uint64(level.keep_p)
                gates.append((np.bitwise_and(p_hi, keep), np.bitwise_and(p, keep),
                              pkg[f"and{i}_p"], level.keep_p))
            outs = yield from _and_gates(member, gates)
            through = np.uint64(level.passthrough)
            g = np.bitwise_xor(np.bitwise_xor(np.bitwise_and(g, through), g_hi), outs[0])
            p = np.bitwise_and(p, through)
            if level.keep_p:
                p = np.bitwise_xor(p, outs[1])
        top = np.uint64(ell - 1)
        bit = np.bitwise_xor(np.bitwise_and(np.right_shift(bits, top), np.uint64(1)),
                             np.bitwise_and(g, np.uint64(1)))
        if member == 0:
            bit = np.bitwise_xor(bit, np.right_shift(c, top))
    else:
        full = full_mask(ell)
        t = np.bitwise_xor(bits, np.bitwise_and(np.invert(c), full)) if member == 0 else bits
        for i, level in enumerate(levels):
            step, comb = np.uint64(level.step), np.uint64(level.combine)
            hi = np.bitwise_and(np.right_shift(t, step), comb)
            (anded,) = yield from _and_gates(member, [(hi, np.bitwise_and(t, comb),
                                                       pkg[f"and{i}"], level.combine)])
            t = np.bitwise_xor(np.bitwise_and(t, np.uint64(level.passthrough)), anded)
        bit = np.bitwise_and(t, np.uint64(1))
    # B2A (secure.b2a): open v = bit xor b (1 bit), [bit] = v + (1 - 2 v) [b].
    (v,) = yield [("xor", np.bitwise_xor(bit, pkg["dab_bit"]), 1)]
    out = ring.mul(ring.sub(np.uint64(1), ring.mul(np.uint64(2), v)), pkg["dab_arith"])
    return ring.add(out, v) if member == 0 else out


def _beaver(fp: FixedPoint, member: int, x: np.ndarray, y: np.ndarray, triple: np.ndarray
            ) -> Program:
    """Beaver (1991) with a dealt triple, one member's side: open ``d = x - a`` and
    ``e = y - b``; ``[x y] = [c] + d [b] + e [a] + d e`` (``d e`` added by member 0)."""
    ring = fp.ring
    d, e = yield [("add", ring.sub(x, triple[:, 0]), fp.bits),
                  ("add", ring.sub(y, triple[:, 1]), fp.bits)]
    z = ring.add(triple[:, 2], ring.add(ring.mul(d, triple[:, 1]), ring.mul(e, triple[:, 0])))
    return ring.add(z, ring.mul(d, e)) if member == 0 else z


def _side_by_side(*programs: Program) -> Generator[Openings, list[np.ndarray], list[np.ndarray]]:
    """Run programs in the same rounds: each round carries the openings of every one that
    has not finished; the results in order."""
    results: list[Any] = [None] * len(programs)
    pending: dict[int, Openings] = {}
    for i, prog in enumerate(programs):
        try:
            pending[i] = next(prog)
        except StopIteration as stop:
            results[i] = stop.value
    while pending:
        order = sorted(pending)
        opened = yield [item for i in order for item in pending[i]]
        position, following = 0, {}
        for i in order:
            count = len(pending[i])
            try:
                following[i] = programs[i].send(opened[position:position + count])
            except StopIteration as stop:
                results[i] = stop.value
            position += count
        pending = following
    return results


def _member_program(spec: _Spec, lay: _Layout, fp: FixedPoint, member: int, own: np.ndarray,
                    pkg: Mapping[str, np.ndarray], coins: np.ndarray) -> Program:
    """Member ``member``'s side of its pairs (rows: its slots), from its own encoded record
    ``own``, its packages and, for the duplicate kernel, its randomized-response coins;
    returns its output shares of the kernel value in output units (noise not yet added)."""
    ring = fp.ring
    inputs = _gate_inputs(spec, fp, member, own)
    gates = (_fss_gates if lay.method == "fss" else _circuit_gates)(lay, fp, member, inputs,
                                                                       pkg)
    one = np.uint64(1 if member == 0 else 0)
    tri = pkg.get("triple")
    if spec.kind == "equal":
        assert tri is not None
        # Member j's coin enters as the sharing in which j holds it and its partner 0; the
        # coins' product needs no input, so it runs beside the equality test.
        zero = np.zeros_like(coins)
        x, y = (coins, zero) if member == 0 else (zero, coins)
        eq, prod = yield from _side_by_side(gates, _beaver(fp, member, x, y, tri[:, 0]))
        eq = eq[:, 0]
        flip = ring.sub(ring.add(x, y), ring.mul(np.uint64(2), prod))
        both = yield from _beaver(fp, member, eq, flip, tri[:, 1])
        # u xor v = u + v - 2 u v.
        return ring.sub(ring.add(eq, flip), ring.mul(np.uint64(2), both))
    out = yield from gates
    if spec.kind == "auc":
        # 2 f = 1 + [pos > neg] - [pos < neg], the 1 added by member 0.
        return ring.add(ring.sub(out[:, 0], out[:, 1]), one)
    assert tri is not None
    if spec.kind == "kendall":
        sign = ring.sub(out[:, 2:], out[:, :2])                         # sign(xa_c - xb_c)
        return (yield from _beaver(fp, member, sign[:, 0], sign[:, 1], tri[:, 0]))
    # Gini: (2 [x > y] - 1)(x - y); a member's own record is its share of x - y.
    sign = ring.sub(ring.mul(np.uint64(2), out[:, 0]), one)
    diff = own[:, 0] if member == 0 else ring.neg(own[:, 0])
    return (yield from _beaver(fp, member, sign, diff, tri[:, 0]))


def _member_noise(spec: _Spec, fp: FixedPoint, pair_epsilon: float, split: str,
                  member: np.ndarray, source: NoiseSource) -> np.ndarray:
    """Each slot's own noise part on the ring (what :func:`_add_noise` adds per member)."""
    ring = fp.ring
    m = member.size
    t = math.exp(-pair_epsilon / spec.sensitivity_units)
    _check_noise_room(spec, fp, t)
    if m == 0:
        return np.zeros(0, dtype=np.uint64)
    # local_noise draws both contributors' parts (row j: member j's law); a member keeps
    # the row of its own slot. min_honest=1: a full DLap(t) each; 2: Polya(1/2, t)
    # differences whose two parts sum to one DLap(t) (002 Protocol B.1).
    parts = local_noise(2, pair_epsilon, spec.sensitivity_units, ring=ring,
                        min_honest=1 if split == "independent" else 2, size=m, rng=source)
    own = parts.shares[member, np.arange(m)]
    signed = ring.to_signed(own)
    bound = 1 << (fp.bits - 3)
    if int(np.abs(signed).max()) >= bound:
        raise InputRangeError(f"a party's noise part {int(np.abs(signed).max())} does not fit "
                            f"the ring headroom (< 2^{fp.bits - 3} units)")
    return own


def _third_party(pairs: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """A dealer for each pair, uniform among the n - 2 parties outside it."""
    lo, hi = np.sort(pairs, axis=1).T
    d = rng.integers(0, n - 2, size=pairs.shape[0])
    d = d + (d >= lo)
    return d + (d >= hi)


def _all_pairs_dealers(pairs: np.ndarray, n: int) -> np.ndarray:
    """All pairs: a public dealer per pair ``i < j`` (no message needed): ``j + 1``, or
    ``j + 2`` where that wraps to ``i`` (needs n >= 3)."""
    i, j = pairs.min(axis=1), pairs.max(axis=1)
    d = (j + 1) % n
    return np.where(d == i, (j + 2) % n, d)


# ----------------------------------------------------------------------------------
# The protocol: party and aggregator steps
# ----------------------------------------------------------------------------------
def _id_bits(count: int) -> int:
    return max(1, math.ceil(math.log2(max(count, 2))))


@dataclass
class _MemberRun:
    """What a batch's parties hold during the pairwise 2PC. Slots (one per pair a party is
    in) are in canonical order: by party, partner, pair id; ``package`` holds each slot's
    offline material once received; ``programs`` each member slot's running side of the
    2PC (:func:`_member_program`), ``pending`` what they open next, ``sent`` this batch's
    shares of the openings in flight.

    ``coin_bits`` (the members' randomized-response coins, drawn once at the launch) and
    ``opened`` (every round's opened values, in order) are what the programs consumed:
    the programs are deterministic in them, the records and the packages. A pickle (a
    state moving between engine workers, a party's journal) leaves the suspended
    generators behind, which cannot be serialized; its programs are started again and
    replayed on ``opened`` when they next run (:meth:`PairsTwoParty._live_programs`),
    which brings them to the same point with the same values. A deep copy in the same
    process takes them over (:meth:`__deepcopy__`)."""

    fp: FixedPoint
    pair_epsilon: float
    coins: _Coins
    owner: np.ndarray
    pair: np.ndarray
    member: np.ndarray
    partner: np.ndarray
    dealer: np.ndarray
    own: np.ndarray
    deals: np.ndarray
    package: dict[str, np.ndarray] = field(default_factory=dict)
    programs: dict[int, Program] = field(default_factory=dict)
    pending: dict[int, Openings] = field(default_factory=dict)
    sent: Openings = field(default_factory=list)
    output: np.ndarray | None = None
    coin_bits: np.ndarray | None = None
    opened: list[list[np.ndarray]] = field(default_factory=list)

    def __getstate__(self) -> dict[str, Any]:
        # Suspended generators cannot be copied or pickled; ``opened`` rebuilds them.
        return {**self.__dict__, "programs": {}}

    def __deepcopy__(self, memo: dict[int, Any]) -> _MemberRun:
        # A copy in the same process (the engine copies a state before each step, so
        # that a retried task starts from its input) takes the running programs over
        # instead of replaying them; the original keeps its ``opened`` and replays them
        # if it ever runs again. Only a pickle (a state moving to another worker, a
        # journal) then costs a replay.
        programs, self.programs = self.programs, {}
        try:
            copied = copy.deepcopy(self.__getstate__(), memo)
        except BaseException:
            self.programs = programs
            raise
        clone = object.__new__(type(self))
        clone.__dict__.update(copied)
        clone.programs = programs
        return clone


@dataclass
class _PartyState:
    records: np.ndarray
    parties: np.ndarray
    phase: int = 0
    run: _MemberRun | None = None


@dataclass
class _ServerState:
    n_parties: int
    phase: int = 0
    labels: np.ndarray | None = None
    design: Design | None = None
    chosen: np.ndarray | None = None
    active: np.ndarray | None = None
    # Ids of the parties that joined the assignment round, when some fell silent in it
    # (None: all of 0..n-1). The design and the dealers are drawn over them, renumbered
    # 0..n'-1 in id order; ``chosen`` holds their real ids, ``design`` the renumbered.
    members: np.ndarray | None = None


def _upload_order(parties: np.ndarray, pair_ids: np.ndarray) -> np.ndarray:
    """Rows grouped by party, each party's pairs in increasing id: the order in which a
    party sends its shares, so that no pair id travels with them."""
    return np.lexsort((pair_ids, parties))


class PairsTwoParty(Protocol):
    """The two-party subsampling protocol of 000 Sec. 5, with real 2PC per pair.

    Messages through the runtime: (1) each party joins (AUC: sends its public label,
    1 bit); (2) the aggregator draws the design and tells each party its pairs (session
    id, partner id, member slot and the pair's dealer; the dealer gets a row naming both
    members; for all pairs a broadcast of n, and of the labels for AUC); (3) relay rounds
    among parties: packages from the dealers, then the members' openings (module
    docstring, "Transport"); (4) each party sends one ring element (its output share)
    per computed pair, in increasing pair order. The runtime counts every bit in the
    estimate's ``cost``.

    Parameters
    ----------
    kernel:
        Kendall's tau-a, AUC / Mann-Whitney (labels public), Gini mean difference, or
        duplicate-pair ratio / Rényi-2 entropy.
    epsilon:
        Each party's total budget (``inf``: no noise, a test hook).
    delta:
        Used by the all-pairs variant (advanced composition); the permutation design is
        pure ``epsilon``-DP and ignores it.
    P:
        Number of permutations (000 Sec. 5); each party is in P pairs. See
        :func:`recommend_P`.
    noise_split:
        ``"independent"`` (each party adds a full noise draw: DP even if the aggregator
        colludes with other parties; twice the variance) or ``"split"`` (the parts sum
        to one draw: DP against the aggregator alone). See the module docstring.
    comparison:
        ``"fss"`` (DCF/DPF keys, one round per comparison) or ``"circuit"`` (boolean
        circuit with AND triples).
    all_pairs:
        Use every pair ``i < j`` with the per-pair budget of :func:`all_pairs_budget`.
    fixed_point:
        An explicit input format (no offset, fixed ring); excludes ``bounds``/``precision``.
        Without any of the three: :data:`DEFAULT_FIXED_POINT`. Comparisons see the encoded
        values, so values closer than the resolution tie.
    bounds:
        Public ``(lo, hi)`` of the secret column(s) (one pair or one per column; default:
        the kernel's declared bounds, e.g. Gini): values are encoded as
        ``round((x - lo) / h)`` and the ring is sized from the bounds, the resolution and
        the per-pair noise (:mod:`fedustat.protocols.mpc.encoding`).
    precision:
        The smallest difference that matters (default ``(hi - lo) / 2^20``); ``h`` is the
        largest power of two ``<= precision``.
    noise:
        ``None`` (seeded simulation) or a ``NoiseSource``; ``DeploymentNoise()`` also
        draws shares, masks and keys from the OS CSPRNG.
    max_pairs:
        Refuse designs with more pairs (two-party computations) than this.
    dealer:
        Who deals each pair's correlated randomness. ``"party"`` (default): a third party
        per pair, drawn by the aggregator. ``"service"``: the ``dealer`` service role
        (:meth:`service_roles`; its own process in a networked run) deals every pair from
        its own coins (its own seed stream in a simulation), so no data party holds
        another pair's masks. A seed gives the same release either way (the members'
        coins and noise keep their streams; masks cancel). Its rows count as peer traffic
        the members receive (sent by the service, in ``total_bits``).
    """

    name = "pairs-2pc"
    released_fields = (*Protocol.released_fields, *Protocol.statistic_map_fields,
                       "diagnostics.u_statistic", "diagnostics.pair_values",
                       "diagnostics.noise_std_error", "diagnostics.design_variance")
    # The pairs come from public permutations; with public labels (AUC) only the pairs of
    # opposite labels are computed, so the costs follow the design too.
    public_coin_fields = ("diagnostics.design.*", "diagnostics.n_computed_pairs", "cost.*")

    def __init__(self, kernel: Kernel, epsilon: float, *, delta: float = 0.0, P: int = 1,
                 noise_split: NoiseSplit = "independent", comparison: ComparisonMethod = "fss",
                 all_pairs: bool = False, fixed_point: FixedPoint | None = None,
                 noise: NoiseSource | None = None,
                 max_pairs: int = DEFAULT_MAX_PAIRS, bounds: Any = None,
                 precision: float | None = None, dealer: str = "party") -> None:
        self.dealer = _check_choice(dealer, "dealer", _DEALERS)
        self.kernel = kernel
        self.encoding = self._declare_encoding(kernel, fixed_point, bounds, precision)
        if self.encoding is not None:
            # The nominal (widest) format; each run uses the ring sized for its budget.
            fixed_point = self.encoding.fixed_point(64)
        self.fixed_point = _check_fixed_point(fixed_point)
        self.spec = _pair_spec(kernel, self.fixed_point)
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.delta = check_delta(delta)
        if not isinstance(all_pairs, bool | np.bool_):
            raise TypeError(f"all_pairs must be True or False, got {all_pairs!r}")
        self.all_pairs = bool(all_pairs)
        self.P = check_positive_int(P, "P")
        if self.all_pairs and self.P != 1:
            raise ValueError(f"P={self.P} does not apply with all_pairs=True (every pair is "
                             "used); leave P at 1")
        self.noise_split = _check_choice(noise_split, "noise_split", _SPLITS)
        self.comparison = _check_choice(comparison, "comparison", _METHODS)
        if noise is not None and not isinstance(noise, NoiseSource):
            raise TypeError(f"noise must be a NoiseSource, got {type(noise).__name__}")
        self.noise = noise
        self.max_pairs = check_positive_int(max_pairs, "max_pairs")

    # -- encoding -----------------------------------------------------------------------
    @staticmethod
    def _declare_encoding(kernel: Kernel, fixed_point: FixedPoint | None, bounds: Any,
                          precision: float | None) -> ColumnEncoding | None:
        """The bounds encoding of :mod:`fedustat.protocols.mpc.encoding`, or None (an
        explicit ``fixed_point``, or nothing declared: the 002 Sec. 6.1 format)."""
        if fixed_point is not None:
            if bounds is not None or precision is not None:
                raise ValueError("pass either fixed_point (an explicit ring format) or "
                                 "bounds/precision (the ring is then sized for you), not both")
            return None
        columns = 2 if kernel.degree == 2 and kernel.func is _KENDALL_FUNC else 1
        bounds = bounds_by_column(bounds, kernel.columns[:columns])
        declared = bounds if bounds is not None else declared_bounds(kernel)
        if declared is None:
            if precision is not None:
                raise ValueError("precision needs bounds=(lo, hi): the ring is sized from "
                                 "the declared range and the precision")
            return None
        return ColumnEncoding.declare(declared, precision, columns)

    def run_fixed_point(self, pair_epsilon: float) -> FixedPoint:
        """The ring of one run (public quantities only): the explicit ``fixed_point``, or
        the encoding's ``c`` in the smallest ring holding (1) the codes with one bit of
        headroom, (2) a kernel output, and (3) each member's noise part below
        ``2^(l-3)`` except with probability ``2^-40`` (:func:`_check_noise_room`)."""
        if self.encoding is None:
            return self.fixed_point
        need = [self.encoding.max_code.bit_length() + 2,
                self.spec.sensitivity_units.bit_length() + 2, 16]
        if self.spec.mechanism == "discrete_laplace" and math.isfinite(pair_epsilon):
            log2_t = -pair_epsilon / self.spec.sensitivity_units / math.log(2.0)
            # 1 + 2^(l-3) log2 t <= -40  <=>  2^(l-3) >= 41 / -log2 t.
            need.append(math.ceil(math.log2(41.0 / -log2_t)) + 3)
        bits = max(need)
        if bits > 64:
            raise InputRangeError(f"pairs-2pc ({self.kernel.name}): the codes, outputs and noise "
                                f"need a ring of {bits} bits, more than 64; declare a coarser "
                                "precision or a larger epsilon")
        return self.encoding.fixed_point(bits)

    def _shifted(self, records: np.ndarray) -> np.ndarray:
        """Each party checks its record against the public bounds and shifts it by lo."""
        if self.encoding is None:
            return records
        cols = list(self.spec.columns)
        out = records.copy()
        for j, (lo, hi) in zip(cols, self.encoding.bounds, strict=True):
            bad = (out[:, j] < lo) | (out[:, j] > hi)
            if np.any(bad):
                column = self.kernel.columns[j]
                raise RecordCheckError(
                    f"values outside the declared bounds of column {column!r}",
                    f"data column {column!r}: {int(bad.sum())} value(s) outside the "
                    f"declared bounds [{lo:g}, {hi:g}]; declare bounds that hold every value")
            out[:, j] = out[:, j] - lo
        return out

    # -- budget, guarantee, theory ------------------------------------------------------
    def pair_budget(self, n: int) -> tuple[float, float, str]:
        """``(eps, delta)`` of one pair and the composition rule, for n parties."""
        if self.all_pairs:
            return all_pairs_budget(n, self.epsilon, self.delta)
        if math.isinf(self.epsilon):
            return math.inf, 0.0, "none (epsilon = inf)"
        return (self.epsilon / self.P, 0.0,
                f"basic composition over the P={self.P} pairs of each party (000 Thm 5)")

    @property
    def guarantee(self) -> PrivacyGuarantee:
        if math.isinf(self.epsilon):
            return PrivacyGuarantee.none()
        delta = self.delta if self.all_pairs else 0.0
        return PrivacyGuarantee(self.epsilon, delta, PrivacyModel.COMPUTATIONAL,
                                self.kernel.adjacency, assumptions=tuple(self.assumptions()))

    def assumptions(self) -> list[Assumption]:
        """What the guarantee rests on (000 Sec. 5; the dealer replaces 001 App. C.2's
        garbled circuits)."""
        out = [semi_honest("parties and the aggregator"),
               trusted_dealer("every pair's FSS keys or edaBits, daBits and AND triples, "
                              "and its Beaver triples, as the dealer service (a role of its "
                              "own, apart from the parties and the aggregator)")
               if self.dealer == "service" else
               trusted_dealer("for each pair a party outside it, drawn by the aggregator, "
                              "that deals the pair's FSS keys or edaBits, daBits and AND "
                              "triples, and its Beaver triples")]
        if self.noise_split == "split":
            out.append(Assumption(Trust.HONEST_NOISE, "both members of a pair keep their "
                                                      "noise part secret from the aggregator"))
        if self.comparison == "fss":
            out.append(computational("the AES-128 based PRG of the FSS keys (computational DP)"))
        else:
            out.append(computational("nothing beyond the dealer: the circuit is information-"
                                     "theoretic; the model is stated as computational DP as "
                                     "in 000 Sec. 5"))
        return out

    def threat_model(self) -> str:
        """The collusion statement of this configuration, in words."""
        if math.isinf(self.epsilon):
            return "no noise: the aggregator learns every pair's exact kernel value"
        dealer = ("the dealer service knows every pair's masks and must collude with no "
                  "party nor the aggregator" if self.dealer == "service" else
                  "each pair's dealer, a third party, knows its masks and must collude with "
                  "neither member nor the aggregator")
        base = ("semi-honest parties and aggregator; a party sees only uniform shares and "
                f"masked openings of its partner's data; {dealer} "
                "(the collusions below exclude it); ")
        if self.spec.mechanism == "randomized_response":
            if self.noise_split == "independent":
                return base + ("each party's own coin is a full randomized response of its "
                               "pairs: DP against the aggregator colluding with any other "
                               "parties")
            return base + ("the two coins together are one randomized response: DP against "
                           "the aggregator alone, not against the aggregator colluding with "
                           "a party of the pair")
        if self.noise_split == "independent":
            return base + ("each party adds a full-scale discrete Laplace draw to its share: "
                           "DP against the aggregator colluding with any other parties "
                           "(twice the noise variance)")
        return base + ("the two parts sum to one discrete Laplace draw: DP against the "
                       "aggregator alone, not against the aggregator colluding with a party "
                       "of the pair; per-pair values must not be shown to the parties")

    def theoretical_mse(self, n: int, zeta1: float, zeta2: float, *,
                        noisy_fraction: float = 1.0) -> float:
        """Predicted MSE around ``U_f`` of this configuration (:func:`theorem5_mse` with
        this protocol's mechanism, or :func:`all_pairs_mse`)."""
        kwargs: dict[str, Any] = {"noise_split": self.noise_split,
                                  "noisy_fraction": noisy_fraction}
        if self.spec.mechanism == "randomized_response":
            kwargs["mechanism"] = "randomized_response"
        else:
            kwargs.update(mechanism="discrete_laplace", resolution=self.spec.unit,
                          sensitivity=self.spec.sensitivity_units * self.spec.unit)
        if self.all_pairs:
            return all_pairs_mse(n, self.epsilon, self.delta, zeta1, zeta2, **kwargs)
        return theorem5_mse(n, self.P, self.epsilon, zeta1, zeta2, **kwargs)

    # -- party steps --------------------------------------------------------------------
    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _PartyState:
        return _PartyState(np.asarray(data, dtype=np.float64), np.asarray(parties, np.int64))

    def init_server(self, n_parties: int) -> _ServerState:
        return _ServerState(check_positive_int(n_parties, "n_parties", minimum=2))

    def party_step(self, state: _PartyState, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_PartyState, Message]:
        if state.phase == 0:
            state.phase = 1
            if self.spec.labelled:
                # The labels are public in this setting (000 Sec. 4): one bit each.
                labels = state.records[:, 1].astype(np.int64)
                return state, Message(Role.PARTY, Role.SERVER, {"label": labels},
                                      {"label": 1}, state.parties)
            return state, Message(Role.PARTY, Role.SERVER,
                                  {"join": np.ones(state.parties.size, dtype=np.int64)},
                                  {"join": 1}, state.parties)
        return self._pair_step(state, inbox, rng)

    # -- the pairwise 2PC: one member's side per slot, peer messages in relay rounds ---
    def _pair_step(self, state: _PartyState, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_PartyState, Message]:
        """After joining: deal (phase 1), start the members' programs on the received
        packages (phase 2), advance them on each round's openings (phase 3) until they
        return the output shares, then upload (module docstring, "Transport")."""
        if inbox is None:
            raise ValueError("pairs-2pc: after joining, every step of a party answers a "
                             "message (the assignment or its peers' rows)")
        phase = state.phase
        if phase == 1:
            state.run = self._start(state, inbox, rng)
            state.phase = 2
            return state, self._deal(state.run)
        run = state.run
        if run is None or phase not in (2, 3):
            raise ValueError("pairs-2pc: a party has nothing more to send after its upload")
        if phase == 2:
            self._receive_packages(run, inbox)
            self._launch(run)
            state.phase = 3
        else:
            self._advance(run, self._receive_openings(run, inbox))
        if run.output is not None:
            state.phase = 4
            return state, self._upload(run, run.output)
        return state, self._openings(run)

    def _start(self, state: _PartyState, inbox: Message, rng: np.random.Generator
               ) -> _MemberRun:
        """The batch's slots and deals from the assignment; its coins and ring."""
        if self.all_pairs:
            n = int(np.asarray(inbox.fields["n_parties"]).ravel()[0])
            labels = np.asarray(inbox.fields["labels"], dtype=np.float64) \
                if self.spec.labelled else np.zeros(n)
            chosen, active = _orient(self.spec, np.column_stack([np.zeros(n), labels]),
                                     _all_pairs(n))
            pair_ids = np.flatnonzero(active)
            dealers = self._dealers(chosen, n, None)
            mine = np.isin(chosen, state.parties)
            slot_pair = np.concatenate([pair_ids[mine[:, 0]], pair_ids[mine[:, 1]]])
            slot_member = np.repeat([0, 1], [int(mine[:, 0].sum()), int(mine[:, 1].sum())])
            slot_owner = np.concatenate([chosen[mine[:, 0], 0], chosen[mine[:, 1], 1]])
            slot_partner = np.concatenate([chosen[mine[:, 0], 1], chosen[mine[:, 1], 0]])
            slot_dealer = np.concatenate([dealers[mine[:, 0]], dealers[mine[:, 1]]])
            dealt = np.isin(dealers, state.parties)
            deals = np.column_stack([pair_ids[dealt], dealers[dealt], chosen[dealt, 0],
                                     chosen[dealt, 1]])
        else:
            n = 2
            pair = np.asarray(inbox.fields["pair"], dtype=np.int64)
            member = np.asarray(inbox.fields["member"], dtype=np.int64)
            partner = np.asarray(inbox.fields["partner"], dtype=np.int64)
            helper = np.asarray(inbox.fields["helper"], dtype=np.int64)
            who = np.asarray(inbox.parties, dtype=np.int64)
            slot = member < 2
            slot_pair, slot_member, slot_owner = pair[slot], member[slot], who[slot]
            slot_partner, slot_dealer = partner[slot], helper[slot]
            deals = np.column_stack([pair[~slot], who[~slot], partner[~slot], helper[~slot]])
        if not np.all(np.isin(slot_owner, state.parties)) or \
                not np.all(np.isin(deals[:, 1], state.parties)):
            raise ValueError("pairs-2pc: the assignment names a party that is not in this "
                             "batch")
        order = np.lexsort((slot_pair, slot_partner, slot_owner))
        pair_eps, _, _ = self.pair_budget(n)
        fp = self.run_fixed_point(pair_eps)
        records = self._shifted(state.records)
        sorter = np.argsort(state.parties, kind="stable")
        rows = sorter[np.searchsorted(state.parties, slot_owner[order], sorter=sorter)]
        columns = list(self.spec.columns)
        own = fp.encode(records[rows][:, columns], "data") if rows.size else \
            np.zeros((0, len(columns)), dtype=np.uint64)
        deals = deals[np.lexsort((deals[:, 0], deals[:, 1]))]
        return _MemberRun(fp, pair_eps, _Coins.make(rng, self.noise), slot_owner[order],
                          slot_pair[order], slot_member[order], slot_partner[order],
                          slot_dealer[order], own.reshape(order.size, len(columns)), deals)

    def _dealers(self, chosen: np.ndarray, n: int, rng: np.random.Generator | None
                 ) -> np.ndarray:
        """Each pair's dealer: the dealer service's id, or a party outside the pair (all
        pairs: the public rule; else drawn from the aggregator's ``rng``)."""
        if self.dealer == "service":
            return np.full(chosen.shape[0], service_id(n, self.service_roles(), DEALER_ROLE),
                           dtype=np.int64)
        if rng is None:
            return _all_pairs_dealers(chosen, n)
        return _third_party(chosen, n, rng)

    # -- parties that fall silent -------------------------------------------------------
    def dropout_rule(self, state: _ServerState, round_index: int) -> DropoutRule:
        """Round 0 (joins, public labels) may go on without silent parties: nothing of
        theirs is used yet and the aggregator draws the design and the dealers after it,
        over the parties that joined. Once the design is drawn every round is part of the
        pairwise 2PC (dealing, openings, output shares) and stops."""
        if state.phase == 0:
            if self.all_pairs:
                return DropoutRule(False, "with all pairs every party derives the pairs "
                                          "from n alone (ids 0..n-1), so the assignment "
                                          "cannot leave a party out")
            return DropoutRule(True, "no share has been sent yet: the aggregator draws the "
                                     "P permutations (000 Sec. 5, step 1) and each pair's "
                                     "dealer over the parties that joined (renumbered), and "
                                     "the release is the protocol's over them")
        if round_index == 1:
            return DropoutRule(False, "round 1 deals each pair's correlated randomness: the "
                                      "silent party's packages (as a dealer) and its own "
                                      "pairs are needed by both members of each pair it is "
                                      "in, and the design drawn for the others names it")
        return DropoutRule(False, "the pairwise 2PC is under way: each of the silent "
                                  "party's pairs needs both members' shares (every opening "
                                  "and the two output shares that sum to the noisy value), "
                                  "and releasing without its pairs would not be the "
                                  "design's estimate")

    # -- the dealer service -------------------------------------------------------------
    def service_roles(self) -> tuple[str, ...]:
        return (DEALER_ROLE,) if self.dealer == "service" else ()

    def init_service(self, role: str, n_parties: int) -> dict[str, Any]:
        """The dealer's state: its public id, and whether it has dealt."""
        return {"id": service_id(n_parties, self.service_roles(), role), "dealt": False}

    def service_step(self, role: str, state: dict[str, Any], inbox: Message | None,
                     rng: np.random.Generator) -> tuple[dict[str, Any], Message | None]:
        """The dealer service: on the assignment (its rows naming both members of each
        pair; all pairs: the broadcast), deal every pair from its own coins; then idle."""
        service_id(0, self.service_roles(), role)  # refuses another role, naming it
        if state["dealt"] or inbox is None or inbox.is_peer:
            return state, None
        own = state["id"]
        if self.all_pairs:
            n = int(np.asarray(inbox.fields["n_parties"]).ravel()[0])
            labels = np.asarray(inbox.fields["labels"], dtype=np.float64) \
                if self.spec.labelled else np.zeros(n)
            chosen, active = _orient(self.spec, np.column_stack([np.zeros(n), labels]),
                                     _all_pairs(n))
            pair_ids = np.flatnonzero(active)
            deals = np.column_stack([pair_ids, np.full(pair_ids.size, own),
                                     chosen[:, 0], chosen[:, 1]])
        else:
            n = 2
            who = np.asarray(inbox.parties, dtype=np.int64)
            member = np.asarray(inbox.fields["member"], dtype=np.int64)
            if np.any(who != own) or np.any(member != 2):
                raise ValueError("pairs-2pc: the dealer service expects only the rows of the "
                                 "pairs it deals for")
            deals = np.column_stack([np.asarray(inbox.fields[k], dtype=np.int64)
                                     for k in ("pair", "partner", "helper")])
            deals = np.column_stack([deals[:, 0], who, deals[:, 1], deals[:, 2]])
        deals = deals[np.argsort(deals[:, 0], kind="stable")]
        fp = self.run_fixed_point(self.pair_budget(n)[0])
        # Deployment: masks and keys from the OS CSPRNG; simulation: the service's stream.
        source = "os" if isinstance(self.noise, DeploymentNoise) else rng
        return {**state, "dealt": True}, self._deal_rows(deals, fp, source)

    def _deal(self, run: _MemberRun) -> Message:
        """Phase 1: each party deals the packages of the pairs it deals for (both members'
        shares of the gates' material and of the triples, from its own coins)."""
        return self._deal_rows(run.deals, run.fp, run.coins.dealer)

    def _deal_rows(self, deals: np.ndarray, fp: FixedPoint, source: Any) -> Message:
        """The rows dealing ``deals`` (pair id, dealer, member 0, member 1) from ``source``:
        one package per member, addressed to it."""
        lay = _layout(self.spec, self.comparison)
        shapes = _package_fields(lay, fp)
        first, second = _deal_packages(lay, fp, deals.shape[0], source)
        senders = np.concatenate([deals[:, 1], deals[:, 1]])
        targets = np.concatenate([deals[:, 2], deals[:, 3]])
        pairs = np.concatenate([deals[:, 0], deals[:, 0]])
        # Rows to one member in increasing pair id: the order it expects them in.
        order = np.lexsort((pairs, targets, senders))
        fields = {k: np.concatenate([first[k], second[k]])[order] for k in shapes}
        fields[PEER_TO] = targets[order]
        bits = {k: b for k, (_, _, b) in shapes.items()}
        bits[PEER_TO] = 32
        return Message(Role.PARTY, Role.PARTY, fields, bits, senders[order])

    @staticmethod
    def _canonical(run: _MemberRun, inbox: Message, expected_from: np.ndarray, who: str
                   ) -> np.ndarray:
        """Where each received row goes in slot order, after checking the rows: one per
        slot, from the party the slot expects (``who``), in increasing pair id."""
        if not inbox.is_peer:
            raise ValueError(f"pairs-2pc: expected the rows of {who}, got a message from the "
                             f"{inbox.sender}")
        order = np.lexsort((run.pair, expected_from, run.owner))
        origin = np.asarray(inbox.fields[PEER_FROM], dtype=np.int64)
        if not (np.array_equal(np.asarray(inbox.parties), run.owner[order])
                and np.array_equal(origin, expected_from[order])):
            raise ValueError(f"pairs-2pc: each party must receive exactly one row per pair "
                             f"from {who}; the rows received do not match the assignment")
        return order

    def _receive_packages(self, run: _MemberRun, inbox: Message) -> None:
        order = self._canonical(run, inbox, run.dealer, "its dealer")
        lay = _layout(self.spec, self.comparison)
        triples = _and_triple_masks(lay, run.fp.bits)
        for name in _package_fields(lay, run.fp):
            values = np.asarray(inbox.fields[name])
            canonical = np.empty_like(values)
            canonical[order] = values
            # AND triples travel as their active bits; kept at their positions, once.
            run.package[name] = (_expand(canonical, triples[name]) if name in triples
                                 else canonical)

    def _launch(self, run: _MemberRun) -> None:
        """Start each member slot's program (both run the same circuit, so they open the
        same things in the same rounds)."""
        coins = np.zeros(run.member.size, dtype=np.uint64)
        if self.spec.kind == "equal":
            # Each member's own randomized-response coin for each of its pairs.
            q_coin, _ = _rr_flip(run.pair_epsilon, self.noise_split)
            coins = np.asarray(run.coins.noise.bernoulli(q_coin, run.member.size),
                               dtype=np.uint64)
        run.coin_bits = coins
        run.opened = []
        for b in (0, 1):
            run.programs[b] = self._member_side(run, b)
            run.pending[b] = next(run.programs[b])

    def _member_side(self, run: _MemberRun, b: int) -> Program:
        """Member slot ``b``'s program, not yet started."""
        assert run.coin_bits is not None
        sel = run.member == b
        return _member_program(self.spec, _layout(self.spec, self.comparison), run.fp, b,
                               run.own[sel], {k: v[sel] for k, v in run.package.items()},
                               run.coin_bits[sel])

    def _live_programs(self, run: _MemberRun) -> dict[int, Program]:
        """The members' running programs; in a copied or unpickled run (which has none),
        started again and sent the openings received so far, in order: they are
        deterministic in their inputs, so each stops where the original stood, about to
        be sent the next round's openings. The replay repeats the members' local work
        of the rounds before (at most R (R - 1) / 2 rounds' worth over a run of R rounds
        copied at every step)."""
        if len(run.programs) == 2:
            return run.programs
        for b in (0, 1):
            sel = run.member == b
            program = self._member_side(run, b)
            pending = next(program)
            for opened in run.opened:
                pending = program.send([o[sel] for o in opened])
            run.programs[b] = program
            run.pending[b] = pending
        return run.programs

    def _openings(self, run: _MemberRun) -> Message:
        """This round's openings of every slot, to the slot's partner: field ``open{i}``
        is the i-th thing opened (rows to one partner in increasing pair id)."""
        items = []
        for i, (op, _, bits) in enumerate(run.pending[0]):
            values = [np.asarray(run.pending[b][i][1]) for b in (0, 1)]
            rows = np.zeros((run.member.size, *values[0].shape[1:]), dtype=np.uint64)
            for b in (0, 1):
                rows[run.member == b] = values[b]
            items.append((op, rows, bits))
        run.sent = items
        fields = {f"open{i}": rows for i, (_, rows, _) in enumerate(items)}
        bits = {f"open{i}": b for i, (_, _, b) in enumerate(items)}
        fields[PEER_TO], bits[PEER_TO] = run.partner, 32
        return Message(Role.PARTY, Role.PARTY, fields, bits, run.owner)

    def _receive_openings(self, run: _MemberRun, inbox: Message) -> list[np.ndarray]:
        """The opened values: this batch's shares plus (or xor) the partners' ones."""
        order = self._canonical(run, inbox, run.partner, "its partner")
        ring = run.fp.ring
        opened = []
        for i, (op, mine, _) in enumerate(run.sent):
            received = np.asarray(inbox.fields[f"open{i}"], dtype=np.uint64)
            theirs = np.empty_like(received)
            theirs[order] = received
            opened.append(ring.add(mine, theirs) if op == "add"
                          else np.bitwise_xor(mine, theirs))
        return opened

    def _advance(self, run: _MemberRun, opened: list[np.ndarray]) -> None:
        """Send each member program its opened values; collect the output shares once
        both have returned."""
        results: dict[int, np.ndarray] = {}
        programs = self._live_programs(run)
        for b in (0, 1):
            sel = run.member == b
            try:
                run.pending[b] = programs[b].send([o[sel] for o in opened])
            except StopIteration as stop:
                results[b] = stop.value
        if len(results) == 1:
            raise RuntimeError("pairs-2pc: the two member programs ran different circuits")
        if results:
            out = np.zeros(run.member.size, dtype=np.uint64)
            for b, values in results.items():
                out[run.member == b] = values
            run.output = out
            # Finished: nothing is replayed any more.
            run.programs, run.pending, run.opened = {}, {}, []
        else:
            run.opened.append(opened)

    def _upload(self, run: _MemberRun, out: np.ndarray) -> Message:
        """Each member adds its own noise part to its output share and uploads it, rows by
        party and increasing pair id (as the aggregator expects them)."""
        if self.spec.mechanism != "randomized_response" and math.isfinite(run.pair_epsilon):
            out = run.fp.ring.add(out, _member_noise(self.spec, run.fp, run.pair_epsilon,
                                                     self.noise_split, run.member,
                                                     run.coins.noise))
        order = _upload_order(run.owner, run.pair)
        return Message(Role.PARTY, Role.SERVER, {"share": out[order]},
                       {"share": run.fp.bits}, run.owner[order])

    # -- aggregator steps ---------------------------------------------------------------
    def server_step(self, state: _ServerState, inbox: Message,
                    rng: np.random.Generator) -> tuple[_ServerState, Message | Estimate]:
        if state.phase == 0:
            return self._assign(state, inbox, rng)
        if state.phase == 1:
            state.phase = 2
            return state, self._aggregate(state, inbox)
        raise ValueError("pairs-2pc: the aggregator has already released its estimate")

    def _assign(self, state: _ServerState, inbox: Message,
                rng: np.random.Generator) -> tuple[_ServerState, Message]:
        n_start = state.n_parties
        who = np.asarray(inbox.parties, dtype=np.int64)
        ordered = np.sort(who)
        if ordered.size and not self.all_pairs and ordered.size < n_start and \
                ordered[0] >= 0 and ordered[-1] < n_start and np.all(np.diff(ordered) > 0):
            # Some parties fell silent before the sharing (a transport goes on only where
            # dropout_rule allows it): nothing of theirs is used yet, so the run is this
            # protocol's run over the others, renumbered 0..n'-1 in id order; the real ids
            # are put back in the assignment (_real_ids).
            state.members = ordered
            state.n_parties = ordered.size
        n = state.n_parties
        if n < 3 and self.dealer == "party":
            raise ValueError(f"pairs-2pc: a third party deals each pair's correlated "
                             f"randomness, so the run needs at least 3 parties, got {n}")
        own_ids = np.arange(n) if state.members is None else state.members
        if not np.array_equal(ordered, own_ids):
            raise ValueError(f"pairs-2pc: expected one join message from each of the {n} "
                             "parties")
        labels = np.zeros(n)
        if self.spec.labelled:
            labels[np.searchsorted(own_ids, who)] = np.asarray(inbox.fields["label"],
                                                               dtype=np.float64)
            if labels.min() == labels.max():
                raise ValueError("label has only one class; AUC needs both classes")
        n_pairs = math.comb(n, 2) if self.all_pairs else self.P * (n // 2)
        if n_pairs > self.max_pairs:
            what = (f"all C({n}, 2) = {n_pairs} pairs" if self.all_pairs
                    else f"P * floor(n/2) = {n_pairs} pairs")
            raise ValueError(f"pairs-2pc: {what} exceed max_pairs={self.max_pairs} two-party "
                             "computations; use fewer permutations (P), the permutation "
                             "design instead of all pairs, or raise max_pairs")
        if self.all_pairs:
            design = Design(_all_pairs(n), n, "all_pairs")
        else:
            # 000 Sec. 5, step 1: the aggregator samples P permutations.
            design = permutation_pairs(n, self.P, rng)
        chosen, active = _orient(self.spec, np.column_stack([np.zeros(n), labels]),
                                 design.tuples)
        state.labels, state.design, state.active = labels, design, active
        state.chosen = self._real_ids(state, chosen, n_start)
        state.phase = 1
        if self.all_pairs:
            # Every pair i < j, numbered in that order: n (and the public labels) suffice.
            fields: dict[str, np.ndarray] = {"n_parties": np.array([n], dtype=np.int64)}
            bits = {"n_parties": 32}
            if self.spec.labelled:
                fields["labels"] = labels.astype(np.int64)
                bits["labels"] = 1
            return state, Message(Role.SERVER, Role.PARTY, fields, bits)
        pair_ids = np.flatnonzero(active)
        # A dealer per pair, uniform among the other parties (public, drawn after the
        # design so the design keeps its stream). Each member learns its pair, partner,
        # slot and dealer; the dealer gets a row (slot 2) naming both members.
        dealers = self._real_ids(state, self._dealers(chosen, n, rng), n_start)
        chosen = state.chosen
        parties = np.concatenate([chosen[:, 0], chosen[:, 1], dealers])
        fields = {"pair": np.concatenate([pair_ids, pair_ids, pair_ids]),
                  "partner": np.concatenate([chosen[:, 1], chosen[:, 0], chosen[:, 0]]),
                  "member": np.repeat(np.array([0, 1, 2], dtype=np.int64), pair_ids.size),
                  "helper": np.concatenate([dealers, dealers, chosen[:, 1]])}
        # Ids up to n (of the start): the dealer service's id follows the parties'.
        ids = n_start + len(self.service_roles())
        bits = {"pair": _id_bits(n_pairs), "partner": _id_bits(ids), "member": 2,
                "helper": _id_bits(ids)}
        return state, Message(Role.SERVER, Role.PARTY, fields, bits, parties)

    @staticmethod
    def _real_ids(state: _ServerState, ids: np.ndarray, n_start: int) -> np.ndarray:
        """Renumbered ids (parties 0..n'-1, then the services) as the run's real ids: the
        members' own, and the services' after the n parties of the start."""
        if state.members is None:
            return ids
        n = state.members.size
        return np.where(ids < n, state.members[np.minimum(ids, n - 1)], ids - n + n_start)

    def _aggregate(self, state: _ServerState, inbox: Message) -> Estimate:
        assert state.design is not None and state.active is not None
        assert state.chosen is not None and state.labels is not None
        n = state.n_parties
        pair_eps, pair_delta, rule = self.pair_budget(n)
        fp = self.run_fixed_point(pair_eps)
        ring = fp.ring
        # Rows arrive grouped by party in increasing pair order (batches keep each
        # party's rows together); the aggregator knows every party's pairs.
        pair_ids = np.flatnonzero(state.active)
        exp_party = np.concatenate([state.chosen[:, 0], state.chosen[:, 1]])
        exp_pair = np.concatenate([pair_ids, pair_ids])
        expected = _upload_order(exp_party, exp_pair)
        order = np.argsort(np.asarray(inbox.parties), kind="stable")
        senders = np.asarray(inbox.parties)[order]
        if not np.array_equal(senders, exp_party[expected]):
            raise ValueError("pairs-2pc: the aggregator needs one share from each party of "
                             "every computed pair")
        row_pair = exp_pair[expected]
        by_pair = np.argsort(row_pair, kind="stable")
        received = np.asarray(inbox.fields["share"], dtype=np.uint64)[order][by_pair]
        totals = ring.add(received[0::2], received[1::2])
        values = np.zeros(state.design.size)
        values[state.active] = _release(self.spec, totals, fp, pair_eps, self.noise_split)
        m = values.size
        u_hat = float(values.mean())
        noise_var = _pair_noise_variance(self.spec, pair_eps, self.noise_split)
        noise_part = pair_ids.size * noise_var / m**2
        # Per-pair values may be published only if each is DP against everyone who could
        # see it: with "split" noise a partner knows its half, so they stay with the
        # aggregator and nothing released is computed from them but the mean.
        values_public = self.noise_split == "independent" or math.isinf(pair_eps)
        if self.all_pairs:
            design_var = 0.0    # no subsampling: the error around U_n is the noise
        elif values_public and m > 1:
            # Plug-in variance of a mean of dependent terms: pairs that share a party are
            # correlated (each party is in P pairs), so with d_e = v_e - mean,
            # Var ~ (sum_e d_e^2 + sum_{e != e' sharing a party} d_e d_e') / m^2
            #     = (sum_i S_i^2 - sum_e d_e^2) / m^2,   S_i = sum_{e ∋ i} d_e,
            # scaled by m / (m - 1); for P = 1 it is the sample variance / m (an upper
            # bound on the subsampling error given the data, docs/protocols/pairs-2pc.md).
            # The noise is independent across pairs: its part, noise_part, is removed.
            dev = values - values.mean()
            per_party = np.bincount(state.design.tuples.ravel(),
                                    weights=np.repeat(dev, 2), minlength=n)
            spread = (float(np.sum(per_party**2)) - float(np.sum(dev**2))) / (m * (m - 1))
            design_var = max(spread - noise_part, 0.0)
        else:
            # Data-free bound: a kernel with range width Delta f has variance <= Delta^2 / 4.
            width = self.spec.sensitivity_units * self.spec.unit
            design_var = width**2 / (4.0 * m)
        # The statistic at the released U: an affine map carries U's law scaled; Renyi-2's
        # -ln U clips U into [1/C(n,2), 1] first and maps U's interval (statistic_release).
        public = self._public(state.labels)
        u_law = self._error_law(pair_ids.size, m, pair_eps, noise_part, design_var)
        if self.encoding is not None:  # the codes' rounding, a public bound (encoding.py)
            u_law = with_rounding_bias(u_law, self.encoding.rounding_bias(self.kernel.name))
        release = statistic_release(self.kernel, u_hat, u_law, public)
        slope = release.slope
        diagnostics: dict[str, Any] = {
            "design": state.design, "n_pairs": m, "n_computed_pairs": int(pair_ids.size),
            "P": None if self.all_pairs else self.P, "all_pairs": self.all_pairs,
            "u_statistic": u_hat, "pair_values": values if values_public else None,
            "pair_epsilon": pair_eps, "pair_delta": pair_delta, "composition": rule,
            "mechanism": self.spec.mechanism, "noise_split": self.noise_split,
            "pair_noise_variance": noise_var,
            "noise_std_error": math.sqrt(noise_part) * slope,
            "threat_model": self.threat_model(),
            "dealer": SERVICE_DEALER_ASSUMPTION if self.dealer == "service"
            else DEALER_ASSUMPTION,
            "comparison": self.comparison, "fixed_point": fp,
            "output_unit": self.spec.unit, "design_variance": design_var,
            "encoding": (self.encoding.describe(fp, self.kernel.name)
                         if self.encoding is not None else
                         {"bounds": None, "resolution": fp.resolution, "ring_bits": fp.bits,
                          "ties": f"values closer than {fp.resolution:.3g} encode equally "
                                  "(ties)"}),
        }
        # Bits and rounds, with the peers and the dealer, are measured by the runtime
        # from the messages and their PeerTraffic.
        cost = Cost(server_operations=m)
        # In range on every transport: the clip is part of the server's release step.
        return release.estimate(self.kernel, public, protocol=self.name,
                                privacy=self.guarantee, cost=cost, diagnostics=diagnostics)

    def _error_law(self, computed: int, m: int, pair_eps: float, noise_part: float,
                   design_var: float) -> ErrorDistribution:
        """The law of ``U_hat - U_n``: the mean of ``m`` released pair values carries the
        noise of the ``computed`` pairs and the subsampling error (000 Thm 5's two terms).

        Discrete Laplace noise: the sum of ``computed`` ``DLap(t)`` draws per copy (2 copies
        with ``"independent"``, one with ``"split"``, whose halves sum to one draw, 002
        Protocol B.1) is ``X - Y`` with ``X, Y ~ NB(copies * computed, t)`` — exactly
        :class:`~fedustat.secure.PolyaDifferenceError` in units of ``unit / m``.
        Randomized response: a sum of many independent debiased bits, normal (CLT).
        Subsampling: normal with ``design_var``.
        """
        parts: list[ErrorDistribution] = [NormalError(math.sqrt(design_var))]
        if math.isfinite(pair_eps) and computed > 0:
            if self.spec.mechanism == "discrete_laplace":
                copies = 2.0 if self.noise_split == "independent" else 1.0
                t = math.exp(-pair_eps / self.spec.sensitivity_units)
                parts.append(PolyaDifferenceError(copies * computed, t, self.spec.unit / m))
            else:
                parts.append(NormalError(math.sqrt(noise_part)))
        return error_sum(parts)

    def _public(self, labels: np.ndarray) -> PublicData:
        """What the map from U to the statistic may read: n and, for AUC, the public
        labels."""
        return PublicData(labels.size, {"label": labels} if self.spec.labelled else {})


def _all_pairs(n: int) -> np.ndarray:
    i, j = np.triu_indices(n, k=1)
    return np.column_stack([i, j]).astype(np.int64)


def _pairs_2pc(kernel: Kernel, *, epsilon: float, delta: float = 0.0, P: int = 1,
               noise_split: NoiseSplit = "independent", comparison: ComparisonMethod = "fss",
               all_pairs: bool = False, fixed_point: FixedPoint | None = None,
               noise: NoiseSource | None = None,
               max_pairs: int = DEFAULT_MAX_PAIRS, bounds: Any = None,
               precision: float | None = None, dealer: str = "party") -> PairsTwoParty:
    return PairsTwoParty(kernel, epsilon, delta=delta, P=P, noise_split=noise_split,
                         comparison=comparison, all_pairs=all_pairs, fixed_point=fixed_point,
                         noise=noise, max_pairs=max_pairs, bounds=bounds, precision=precision,
                         dealer=dealer)


register("pairs-2pc", _pairs_2pc, model=PrivacyModel.COMPUTATIONAL,
         summary="pairs of parties compute the noisy kernel by 2PC (P permutations or all "
                 "pairs); the aggregator averages",
         source="000 Sec. 5, Thm 5; 001 App. C")

