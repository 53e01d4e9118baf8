"""GhaziSM: Ghazi et al.'s projections summed in the shuffle model (002's baseline).

Source: 002 (Sinh & Ramon) Sec. 5 ("GhaziSM: the non-interactive protocol from (Ghazi et
al., 2024) in the shuffled model, with r servers to shuffle/anonymize messages, following
the implementation of (Balle et al., 2020, Sect. 5)"), Table 1 (MSE
``1/t^2 + t^2 log t / (eps^2 n^2)``), App. D.1.3 (the estimator) and D.2.1-D.2.3 (costs,
``r = O(log n + kappa)`` messages). The summation is the split-and-mix protocol of Ishai,
Kushilevitz, Ostrovsky & Sahai (FOCS 2006) with the distributed discrete Laplace noise of
Balle, Bell, Gascón & Nissim ("Private summation in the multi-message shuffle model",
CCS 2020), which 002 App. B.1.1 also describes. 002 gives no pseudo-code; every choice
below that 002 leaves open is recorded in the estimate's diagnostics.

Protocol
--------
Public set-up (no data): the grid of t cells and the quantized kernel A of
``ldp-ghazi`` (:mod:`fedustat.protocols.local.quantization`), its balanced factorization
``A = L^T R`` (:func:`~fedustat.protocols.local.ghazi.balanced_factorization`, optional JL
to ``dim``), and the fixed-point table ``z_x = round(2^c [L e_x; R e_x])`` (integers, D = 2d
coordinates per cell) plus the diagonal code ``g_x = round(<z^L_x, z^R_x> / 2^c)``.

1. Party i with cell x_i forms ``w_i = [z_{x_i}; g_{x_i}]`` and adds per-coordinate noise
   ``X - Y`` with ``X, Y ~ Polya(1/h, t_j)`` (002 App. B.1.1, Balle et al. Sect. 5;
   ``h = min_honest``, default n). The h honest parties' noise alone sums to at least
   ``DLap(t_j)`` (Pólya shapes add), so the sum is epsilon-DP whatever the others add.
2. It splits ``y_i = w_i + noise`` (mod q = 2^l) into r additive shares (the first r-1
   uniform, :func:`fedustat.secure.sharing.share`) and sends each share of each
   coordinate as one anonymous message to the shuffler: r x (D + 1) ring elements.
3. The shuffler forwards, for each coordinate, the n r messages in a uniformly random
   order (:func:`shuffle_messages`). With ``shuffler="service"`` it is a role of its own
   (its own process in a networked run): each party's messages are relayed to it sealed
   end to end, and it sends the server only the permuted multiset; with
   ``shuffler="server"`` (the default) the aggregator's step permutes them, so the
   aggregator must be trusted not to look at who sent what. The analyzer adds them modulo q
   (:func:`analyze_messages`) and obtains ``S = sum_i w_i + N`` exactly, N the noise.
4. It releases (002 App. D.1.3, pairs i != j only)

       U_hat = (<S_L, S_R> / 4^c - S_g / 2^c) / (n (n - 1)),

   in exact integer arithmetic (one rounding at the end).

What we inferred
----------------
* **Grid, kernel, factorization** exactly as ``ldp-ghazi`` (same parameters), so the two
  baselines differ only in how they privatize. Default bins: 002 Table 1's trade-off
  ``1/t^2 + t^2/(eps^2 n^2)`` is balanced at ``t = sqrt(L eps n)`` cells (the log t
  dropped), capped at :data:`MAX_DEFAULT_CELLS` because a message grows linearly in t.
* **The diagonal.** ``<S_L, S_R>`` contains every party's own term ``A_{x_i x_i}``;
  without it the estimate would be the V-statistic, biased by O(1/n), as large as the
  O(1/(eps n)) noise of a central protocol. The analyzer only sees sums, so each party
  adds ``g_x`` as one more summed coordinate. It gets a share of the budget that
  minimizes the data-free variance bound (:meth:`GhaziShuffle.diagonal_share_for`; its
  noise enters U_hat divided by n(n-1), not multiplied by ||s||, so the share is small),
  the vector coordinates the rest; when ``g`` is constant (e.g. the duplicate kernel) it
  is public and the whole budget goes to the vector.
* **Fixed point.** ``c = frac_bits`` (default 24) fractional bits in the ring
  Z_{2^l} (``ring_bits``, default 64). Balle et al. encode a real input by randomized
  rounding; our inputs are the columns of a public table, so deterministic rounding of
  the table is exact for the *encoded* kernel ``A_enc = Z_L^T Z_R / 4^c``. The noise-free
  release equals the U-statistic of ``A_enc`` up to the diagonal code's rounding
  (at most ``2^{-c-1} / (n-1)``); ``max |A_enc - A|`` is reported as ``encoding_error``.
* **Noise scale.** Integer L1 sensitivities ``Delta_v = max_{x,x'} ||z_x - z_x'||_1`` and
  ``Delta_g = max g - min g`` (replace-one adjacency), ``t_v = exp(-eps_v / Delta_v)``,
  ``t_g = exp(-eps_g / Delta_g)``; ``eps_v + eps_g = eps``. The discrete Laplace ratio
  for a neighbouring pair is at most ``exp(eps_v ||dz||_1 / Delta_v + eps_g |dg| /
  Delta_g) <= e^eps``.
* **One shuffle per coordinate.** Each message carries one ring element of one
  coordinate (its coordinate is its channel); the coordinates are D + 1 independent
  split-and-mix instances.

Number of messages and the shuffle-model guarantee
--------------------------------------------------
Split-and-mix is sigma-secure (any two input tuples with the same sum give views at
statistical distance <= 2^-sigma) when, as we read Balle et al. 2020 (Sect. 4, the
improved analysis of Ishai et al.'s reduction),

    r >= (2 sigma + log2 q) / (log2 h - log2 e) + 1,

h being the number of parties whose messages are mixed (002 App. D.2.1 quotes only
``r = O(log n + kappa)``). Parties colluding with the analyzer can remove their own
messages, so we use the honest count h = ``min_honest`` (h >= 3 for the bound to mean
anything). :func:`split_and_mix_messages` returns the smallest such r and
:func:`split_and_mix_security` the sigma an r achieves. Over D + 1 independent coordinates
the distance adds up (hybrid argument): ``eta = (D + 1) 2^-sigma``. The view is then within
eta of a function of the noisy sums, which are eps-DP, so for neighbours x, x' and any event
O: ``P[V(x) in O] <= P[Sim(x) in O] + eta <= e^eps P[Sim(x') in O] + eta <=
e^eps P[V(x') in O] + (1 + e^eps) eta``: the view is ``(eps, (1 + e^eps) eta)``-DP
(:func:`shuffle_delta`). The default sigma per coordinate is
``kappa + ceil(log2(D + 1))`` with ``kappa`` = ``security_bits``, or, when the caller
allows ``delta > 0``, the smallest kappa with ``(1 + e^eps) 2^-kappa <= delta``; with
``delta = 0`` kappa = 40. A finite number of messages never gives delta = 0.

Variance
--------
Given the cells, with ``s_L = S_L^true / 2^c``, ``s_R``, and independent zero-mean noise of
variance ``tau_v^2 = V_v / 4^c`` per vector coordinate and ``tau_g^2 = V_g / 4^c`` on the
diagonal (``V = 2 (n/h) t / (1 - t)^2``, the Pólya-difference variance with total shape
n/h), the error is ``(s_L . nu_R + nu_L . s_R + nu_L . nu_R - nu_g) / (n (n-1))``: zero
mean, its four terms pairwise uncorrelated, so

    Var(U_hat) = [tau_v^2 (||s_L||^2 + ||s_R||^2) + d tau_v^4 + tau_g^2] / (n (n-1))^2

exactly (:meth:`GhaziShuffle.variance`). ``||s_L||^2 + ||s_R||^2 <= n^2 max_x ||z_x||^2 /
4^c`` by convexity gives the data-free bound (:meth:`GhaziShuffle.variance_bound`); the
released standard error plugs in ``||S||^2 / 4^c - 2 d tau_v^2`` (unbiased, clipped at 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import (
    InputRangeError,
    RandomLike,
    as_int_array,
    check_delta,
    check_epsilon,
    check_positive_int,
    check_probability,
)
from fedustat.privacy.errors import (
    BoundedBias,
    DiscreteLaplaceError,
    ErrorDistribution,
    LaplaceError,
    NormalError,
    noise_sum,
)
from fedustat.privacy.guarantee import (
    PrivacyGuarantee,
    PrivacyModel,
    honest_noise,
    trusted_shuffler,
)
from fedustat.privacy.mechanisms import polya
from fedustat.privacy.noise import NoiseSource, SimulationNoise
from fedustat.protocols.base import (
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
from fedustat.protocols.local.ghazi import (
    Factorization,
    balanced_factorization,
    factorization_diagnostics,
)
from fedustat.protocols.local.quantization import (
    DEFAULT_AVG_TOL,
    DEFAULT_MAX_EVALUATIONS,
    ProductGrid,
    QuantizationPlan,
    QuantizedKernel,
    plan_for_kernel,
    quantize_kernel,
)
from fedustat.protocols.registry import register
from fedustat.secure.ring import MAX_RING_BITS, Ring, random_words
from fedustat.secure.sharing import share
from fedustat.stats.kernels import Kernel

distance = lazy_module("scipy.spatial.distance")

__all__ = [
    "DEFAULT_FRAC_BITS",
    "DEFAULT_RING_BITS",
    "DEFAULT_SECURITY_BITS",
    "GhaziShuffle",
    "ShuffleEncoding",
    "ShuffleParameters",
    "analyze_messages",
    "shuffle_delta",
    "shuffle_messages",
    "split_and_mix",
    "split_and_mix_messages",
    "split_and_mix_security",
    "table1_bins",
]

DEFAULT_RING_BITS = 64
DEFAULT_FRAC_BITS = 24
DEFAULT_SECURITY_BITS = 40  # kappa of 002 App. D.2.1 when no delta is allowed
MAX_DEFAULT_CELLS = 256
MIN_RING_BITS = 16
JOIN_BITS = 1
BINS_BITS = 16
SETUP_BITS = 32
SHUFFLERS = ("server", "service")
SHUFFLER_ROLE = "shuffler"
_TAIL_LOG2 = 40  # the decoded sums may wrap with probability at most 2^-40
_LOG2_E = math.log2(math.e)


# --------------------------------------------------------------------------------------
# Split-and-mix (Ishai et al. 2006; Balle et al. 2020)
# --------------------------------------------------------------------------------------


def _check_honest(n_honest: int) -> int:
    h = check_positive_int(n_honest, "n_honest")
    if h < 3:
        raise ValueError(f"n_honest must be >= 3: the split-and-mix bound needs log2 h > "
                         f"log2 e (Balle et al. 2020), got {h}")
    return h


def _check_ring_bits(ring_bits: int) -> int:
    bits = check_positive_int(ring_bits, "ring_bits", minimum=MIN_RING_BITS)
    if bits > MAX_RING_BITS:
        raise ValueError(f"ring_bits must be <= {MAX_RING_BITS}, got {bits}")
    return bits


def split_and_mix_messages(n_honest: int, ring_bits: int, sigma: float) -> int:
    """Smallest r with ``r >= (2 sigma + log2 q) / (log2 h - log2 e) + 1`` (at least 2).

    The sufficient condition for sigma-secure split-and-mix summation over Z_q,
    ``q = 2^ring_bits``, with h parties, as we read Balle et al. 2020 Sect. 4 (module
    docstring).
    """
    h = _check_honest(n_honest)
    bits = _check_ring_bits(ring_bits)
    sig = float(sigma)
    if not (math.isfinite(sig) and sig > 0):
        raise ValueError(f"sigma must be finite and > 0, got {sigma!r}")
    need = (2.0 * sig + bits) / (math.log2(h) - _LOG2_E) + 1.0
    return max(2, math.ceil(need - 1e-12))


def split_and_mix_security(n_honest: int, ring_bits: int, n_messages: int) -> float:
    """sigma reached by r messages: ``((r - 1)(log2 h - log2 e) - log2 q) / 2`` (may be <= 0)."""
    h = _check_honest(n_honest)
    bits = _check_ring_bits(ring_bits)
    r = check_positive_int(n_messages, "n_messages", minimum=2)
    return ((r - 1) * (math.log2(h) - _LOG2_E) - bits) / 2.0


def shuffle_delta(epsilon: float, n_coordinates: int, sigma: float) -> float:
    """``(1 + e^eps) (D + 1) 2^-sigma``: the delta of the view (module docstring).

    Computed through its base-2 logarithm (:func:`_log2_delta`), so a large epsilon gives
    ``inf`` (no guarantee) instead of overflowing.
    """
    eps = check_epsilon(epsilon)
    m = check_positive_int(n_coordinates, "n_coordinates")
    log2_delta = _log2_delta(eps, m, float(sigma))
    return math.inf if log2_delta >= 1024.0 else 2.0**log2_delta


def _log2_delta(epsilon: float, n_coordinates: int, sigma: float) -> float:
    """``log2((1 + e^eps) m 2^-sigma)``, with ``log2(1 + e^eps) = eps log2 e +
    log2(1 + e^-eps)`` (no overflow)."""
    return (epsilon * _LOG2_E + math.log2(1.0 + math.exp(-epsilon))
            + math.log2(n_coordinates) - sigma)


def _log2_one_plus_exp(eps: float) -> float:
    """``log2(1 + e^eps)`` without forming e^eps."""
    return (max(eps, 0.0) + math.log1p(math.exp(-abs(eps)))) / math.log(2.0)


def split_and_mix(values: Any, n_messages: int, rng: RandomLike | NoiseSource | Any = None,
                  *, ring: Ring | None = None) -> np.ndarray:
    """Each party's r additive shares of its vector: ``(n, r, m)`` from ``(n, m)`` values.

    ``values`` are integers (signed, two's complement) or ring elements; the shares of row
    i sum to it modulo 2^l (:func:`fedustat.secure.sharing.share`).
    """
    ring_ = ring if ring is not None else Ring(DEFAULT_RING_BITS)
    r = check_positive_int(n_messages, "n_messages", minimum=2)
    arr = np.asarray(values)
    if arr.ndim != 2:
        raise ValueError(f"values must have shape (n_parties, n_coordinates), got {arr.shape}")
    return np.moveaxis(share(arr, r, rng, ring=ring_), 0, 1)


def shuffle_messages(shares: Any, rng: RandomLike = None) -> np.ndarray:
    """The shuffler: all parties' messages of each coordinate in a uniformly random order.

    ``shares`` is ``(n, r, m)`` (party, message, coordinate); the result is ``(n r, m)``
    where each column is an independent uniform permutation of that coordinate's n r
    messages, so a row no longer belongs to any party.
    """
    arr = np.asarray(shares)
    if arr.ndim != 3:
        raise ValueError(f"shares must have shape (n_parties, n_messages, n_coordinates), "
                         f"got {arr.shape}")
    gen = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    return gen.permuted(arr.reshape(-1, arr.shape[2]), axis=0)


def _os_permuted(messages: np.ndarray) -> np.ndarray:
    """Each column in an independent uniform order drawn from the OS CSPRNG (deployment).

    Sorting by two independent 64-bit random keys per message: the order is uniform unless
    two keys coincide, which has probability below ``N^2 / 2^129`` for N messages (a
    birthday bound), far beneath the protocol's delta.
    """
    keys = random_words((2, *messages.shape), "os")
    order = np.lexsort((keys[1], keys[0]), axis=0)
    return np.take_along_axis(messages, order, axis=0)


def analyze_messages(messages: Any, ring: Ring | None = None) -> np.ndarray:
    """The analyzer: the sum of each coordinate's messages mod 2^l, as signed integers.

    It depends on the multiset of messages only (a sum is permutation invariant).
    """
    ring_ = ring if ring is not None else Ring(DEFAULT_RING_BITS)
    arr = np.asarray(messages)
    if arr.ndim != 2 or arr.dtype.kind not in "iu":
        raise ValueError(f"messages must be an integer array (n_messages, n_coordinates), "
                         f"got dtype {arr.dtype} and shape {arr.shape}")
    return ring_.to_signed(ring_.sum(ring_.reduce(arr), axis=0))


def table1_bins(plan: QuantizationPlan, n_parties: int, epsilon: float,
                lipschitz: float | None = None) -> dict[str, int]:
    """Bins per continuous column: ``sqrt(L eps n)`` cells in all (002 Table 1, GhaziSM).

    002's MSE ``1/t^2 + t^2 log t / (eps^2 n^2)`` is balanced at ``t ~ sqrt(eps n)``
    (log t dropped; L scales the quantization term as in 000 Thm 2), capped at
    :data:`MAX_DEFAULT_CELLS`. Like Corollary 1's rule in
    :meth:`~fedustat.protocols.local.quantization.QuantizationPlan.bins_for`, the total is divided
    by the discrete cells and split evenly over the continuous columns (>= 2 bins each).
    """
    out = {c.name: int(c.bins) for c in plan.continuous if c.bins is not None}
    missing = [c for c in plan.continuous if c.bins is None]
    if not missing:
        return out
    n = check_positive_int(n_parties, "n_parties")
    eps = check_epsilon(epsilon)
    lip = plan.unit_lipschitz() if lipschitz is None else float(lipschitz)
    total = min(MAX_DEFAULT_CELLS, max(2.0, math.sqrt((1.0 if lip is None else lip) * eps * n)))
    per_column = (total / plan.discrete_size) ** (1.0 / len(plan.continuous))
    for col in missing:
        out[col.name] = max(2, round(per_column))
    return out


# --------------------------------------------------------------------------------------
# Public set-up
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ShuffleEncoding:
    """The public integer table the parties sum (everything here is data-free).

    Attributes
    ----------
    grid, quantized, factorization:
        The grid, the quantized kernel A and ``A ~ L^T R`` (shared with ``ldp-ghazi``).
    table:
        ``(D + 1, t)`` int64 (``(D, t)`` when the diagonal is public): column x is
        ``[z^L_x; z^R_x; g_x]``.
    half:
        d, the length of each projection (D = 2d).
    diagonal:
        ``(t,)`` Python-int codes ``g_x``; ``diagonal_public`` when they are all equal.
    frac_bits, ring:
        The fixed point.
    encoded_kernel:
        ``A_enc = Z_L^T Z_R / 4^c`` (t x t), what the protocol estimates.
    encoding_error:
        ``max |A_enc - A|``.
    sensitivity_vector, sensitivity_diagonal:
        Integer L1 sensitivities ``Delta_v`` and ``Delta_g``.
    """

    grid: ProductGrid
    quantized: QuantizedKernel
    factorization: Factorization
    table: np.ndarray
    half: int
    diagonal: tuple[int, ...]
    diagonal_public: bool
    frac_bits: int
    ring: Ring
    encoded_kernel: np.ndarray
    encoding_error: float
    sensitivity_vector: int
    sensitivity_diagonal: int

    @property
    def n_coordinates(self) -> int:
        """Coordinates each party sends: D + 1, or D when the diagonal is public."""
        return int(self.table.shape[0])

    @property
    def max_sq_norm(self) -> float:
        """``max_x ||z_x||^2 / 4^c`` over the vector coordinates (real units)."""
        vec = self.table[: 2 * self.half].astype(np.float64) / 2.0**self.frac_bits
        return float((vec**2).sum(axis=0).max())


@dataclass(frozen=True)
class ShuffleParameters:
    """Run parameters fixed once n is known (all public)."""

    n_parties: int
    n_honest: int
    n_messages: int
    epsilon_vector: float
    epsilon_diagonal: float
    t_vector: float
    t_diagonal: float
    noise_var_vector: float  # total noise variance per coordinate, integer units
    noise_var_diagonal: float
    security: float  # sigma per coordinate
    delta: float


def _dlap_rate(epsilon: float, sensitivity: int) -> float:
    """``a = eps / Delta`` with ``t = e^-a`` (0 when no noise is needed)."""
    if sensitivity == 0 or math.isinf(epsilon) or epsilon == 0.0:
        return 0.0
    return epsilon / sensitivity


def _dlap_with_variance(variance: float, unit: float) -> ErrorDistribution:
    """The discrete Laplace on ``unit * Z`` whose variance (in integer units) is
    ``variance``: ``2 t / (1 - t)^2 = V`` gives ``t = (V + 1 - sqrt(2 V + 1)) / V``.

    On a lattice much finer than its scale (``2^-c`` with c = 24 bits, scales of
    thousands of units) its cdf is within one lattice step of the Laplace law of equal
    variance, ``Lap(sqrt(V / 2))``, which is returned then: a sum of lattice laws has no
    density for the Gil-Pelaez inversion of :class:`~fedustat.privacy.errors.SumOfErrors`.
    """
    if variance >= 2.0 * FINE_LATTICE**2:
        return LaplaceError(math.sqrt(variance / 2.0) * unit)
    t = (variance + 1.0 - math.sqrt(2.0 * variance + 1.0)) / variance
    return DiscreteLaplaceError(-1.0 / math.log(t), unit)


# A discrete Laplace of scale above this many lattice units is treated as continuous.
FINE_LATTICE = 1000.0


def _polya_diff_variance(rate: float, total_shape: float) -> float:
    """``Var(X - Y) = 2 R t / (1 - t)^2`` for ``X, Y ~ Polya(R, t)``, ``t = e^-rate``
    (002 App. B.1.1), written with expm1 so that tiny rates stay accurate."""
    if rate == 0.0:
        return 0.0
    return 2.0 * total_shape * math.exp(-rate) / math.expm1(-rate) ** 2


# --------------------------------------------------------------------------------------
# The protocol
# --------------------------------------------------------------------------------------


@dataclass
class _PartyState:
    records: np.ndarray
    parties: np.ndarray
    encoding: ShuffleEncoding | None
    params: ShuffleParameters | None
    # With a shuffler service: whether the messages went to it (the party then waits).
    sent: bool = False
    # The shuffler's id when parties fell silent at the check-in (else n, after them).
    shuffler_id: int | None = None


@dataclass
class _ServerState:
    n_parties: int | None
    encoding: ShuffleEncoding | None
    params: ShuffleParameters | None
    k_rule: str
    run_parties: int = 0


class GhaziShuffle(Protocol):
    """GhaziSM (002 Sec. 5, Table 1): projections summed by split-and-mix with Pólya noise.

    Parameters
    ----------
    kernel:
        A degree-2 kernel on one grid (no public columns: AUC is refused, as in
        ``ldp-ghazi``).
    epsilon:
        Budget (> 0; ``inf`` runs the summation without noise and releases no guarantee).
    delta:
        The delta the caller allows; > 0 fixes the statistical security (module
        docstring), 0 uses ``security_bits``.
    k, bounds, domain, quantizer, quantized_kernel, lipschitz, rank, dim, projection_seed,
    max_evaluations, avg_tol:
        The grid, quantized kernel and factorization, as for ``ldp-ghazi``; default k from
        :func:`table1_bins` (needs a finite epsilon).
    n_parties:
        Public number of parties; None adds a check-in round in which the aggregator
        counts them and broadcasts k, n and r.
    n_messages:
        r, messages per coordinate and party; default :func:`split_and_mix_messages`.
    min_honest:
        h, parties assumed to follow the protocol (default n): each draws
        ``Polya(1/h, t)`` differences, and r is computed for h parties.
    security_bits:
        kappa: the view's statistical distance target ``2^-kappa`` (default from delta, or
        40).
    frac_bits, ring_bits:
        Fixed point: c fractional bits in Z_{2^l} (defaults 24 and 64).
    diagonal_share:
        Share of epsilon spent on the diagonal coordinate; default
        :meth:`diagonal_share_for` (minimizes the data-free variance bound).
    noise:
        The parties' randomness (None: each batch's seeded generator; a
        :class:`~fedustat.privacy.noise.DeploymentNoise` for real people).
    shuffler:
        Who shuffles. ``"server"`` (default): the aggregator's step permutes the messages
        with its generator, so the aggregator is the shuffler and must be trusted not to
        look at senders (fine for studies). ``"service"``: a separate ``shuffler`` role
        (:meth:`service_roles`; its own process in a networked run) receives every
        party's messages sealed end to end and sends the aggregator only the shuffled
        multiset, the shuffle model's trust split. The release is the same for a seed
        (the analyzer's sums do not depend on the order); the cost moves the parties'
        messages to peer bits and adds the shuffler's upload and one round.
    """

    name = "ghazi-shuffle"
    released_fields = (*Protocol.released_fields, *Protocol.statistic_map_fields,
                       "diagnostics.u_statistic", "diagnostics.u_std_error")

    def __init__(self, kernel: Kernel, epsilon: float, *, delta: float = 0.0, k: Any = None,
                 bounds: Any = None, domain: Any = None, quantizer: str = "round",
                 quantized_kernel: str | None = None, n_parties: int | None = None,
                 n_messages: int | None = None, min_honest: int | None = None,
                 security_bits: int | None = None, frac_bits: int = DEFAULT_FRAC_BITS,
                 ring_bits: int = DEFAULT_RING_BITS,
                 diagonal_share: float | None = None,
                 lipschitz: float | None = None, rank: int | None = None,
                 dim: int | None = None, projection_seed: int = 0,
                 noise: NoiseSource | None = None,
                 max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
                 avg_tol: float = DEFAULT_AVG_TOL, shuffler: str = "server") -> None:
        if shuffler not in SHUFFLERS:
            raise ValueError(f"shuffler must be one of {SHUFFLERS}, got {shuffler!r}")
        self.shuffler = shuffler
        self.kernel = kernel
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.delta = check_delta(delta)
        self.plan = plan_for_kernel(kernel, k=k, bounds=bounds, domain=domain,
                                    public_columns=None, quantizer=quantizer)
        if self.plan.public:
            raise ValueError(
                f"kernel {kernel.name!r} has public columns {[c.name for c in self.plan.public]}; "
                "the projection baseline (002 App. D.1.3) is implemented for kernels on one "
                "grid only; use protocol='umpc' or 'ldp-quantized'")
        if math.isinf(self.epsilon) and not self.plan.resolved:
            raise ValueError("k must be given when epsilon is inf: the default number of bins "
                             "(002 Table 1, t = sqrt(eps n)) needs a finite epsilon")
        self.quantized_kernel = quantized_kernel if quantized_kernel is not None else (
            "center" if quantizer == "randomized" else "mid")
        self.n_parties = (None if n_parties is None
                          else check_positive_int(n_parties, "n_parties", minimum=3))
        self.n_messages = (None if n_messages is None
                           else check_positive_int(n_messages, "n_messages", minimum=2))
        self.min_honest = (None if min_honest is None
                           else check_positive_int(min_honest, "min_honest", minimum=3))
        if self.min_honest is not None and self.n_parties is not None \
                and self.min_honest > self.n_parties:
            raise ValueError(f"min_honest ({self.min_honest}) cannot exceed n_parties "
                             f"({self.n_parties})")
        self.security_bits = (None if security_bits is None
                              else check_positive_int(security_bits, "security_bits"))
        self.ring = Ring(_check_ring_bits(ring_bits))
        self.frac_bits = check_positive_int(frac_bits, "frac_bits", minimum=0)
        if self.frac_bits >= self.ring.bits - 2:
            raise ValueError(f"frac_bits must be < ring_bits - 2 = {self.ring.bits - 2}, "
                             f"got {self.frac_bits}")
        self.diagonal_share = (None if diagonal_share is None else check_probability(
            diagonal_share, "diagonal_share", open_left=True, open_right=True))
        self.lipschitz = None if lipschitz is None else check_epsilon(lipschitz, "lipschitz")
        self.rank = None if rank is None else check_positive_int(rank, "rank")
        self.dim = None if dim is None else check_positive_int(dim, "dim")
        if isinstance(projection_seed, bool) or not isinstance(projection_seed, int):
            raise TypeError(f"projection_seed must be an integer, got {projection_seed!r}")
        self.projection_seed = projection_seed
        if noise is not None and not isinstance(noise, NoiseSource):
            raise TypeError(f"noise must be a NoiseSource, got {type(noise).__name__}")
        self.noise = noise
        self.max_evaluations = check_positive_int(max_evaluations, "max_evaluations")
        self.avg_tol = check_epsilon(avg_tol, "avg_tol")
        self._cache: dict[tuple[tuple[str, int], ...], ShuffleEncoding] = {}
        if self.plan.resolved:
            self.k_rule = "given"
        elif self.n_parties is not None:
            self.k_rule = self._rule_text(self.n_parties)
        else:
            self.k_rule = "002 Table 1 (t = sqrt(L eps n)) after counting the parties"
        self._fixed: tuple[ShuffleEncoding, ShuffleParameters] | None = None
        if self.n_parties is not None:
            # Everything is public and data-free: fix it (and check it fits) up front.
            enc = self.encoding_for(self.grid_for(self.n_parties))
            self._fixed = (enc, self.parameters_for(self.n_parties, enc))

    # ---------------------------------------------------------------- public set-up
    def _rule_text(self, n: int) -> str:
        lip = self.lipschitz if self.lipschitz is not None else self.plan.unit_lipschitz()
        return (f"002 Table 1: t = sqrt(L eps n) cells with n = {n}, "
                f"L = {'1 (default)' if lip is None else f'{lip:g}'}")

    def bins_for(self, n_parties: int) -> dict[str, int]:
        """Bins per continuous column with ``n_parties`` parties."""
        if self.plan.resolved:
            return {c.name: int(c.bins) for c in self.plan.continuous}  # type: ignore[misc]
        return table1_bins(self.plan, n_parties, self.epsilon, self.lipschitz)

    def grid_for(self, n_parties: int) -> ProductGrid:
        """The public grid with ``n_parties`` parties."""
        return self.plan.grid(self.bins_for(n_parties))

    def encoding_for(self, grid: ProductGrid) -> ShuffleEncoding:
        """Quantized kernel, factorization and fixed-point table on ``grid`` (public)."""
        key = tuple(sorted(grid.bins.items()))
        if key in self._cache:
            return self._cache[key]
        qk = quantize_kernel(self.kernel, grid, self.quantized_kernel,
                             max_evaluations=self.max_evaluations, avg_tol=self.avg_tol)
        fac = balanced_factorization(qk.matrices[0, 0], rank=self.rank, dim=self.dim,
                                     projection_seed=self.projection_seed)
        c = self.frac_bits
        vectors = np.vstack([fac.left, fac.right])
        limit = 2.0 ** (self.ring.bits - 2)
        scaled = np.rint(vectors * 2.0**c)
        if np.abs(scaled).max() >= limit:
            raise InputRangeError(f"the projections (max |v| = {np.abs(vectors).max():.3g}) do not "
                                f"fit {self.ring.bits}-bit ring elements with frac_bits={c}; "
                                "use fewer fractional bits")
        z = scaled.astype(np.int64)
        d = fac.left.shape[0]
        # g_x = round(<z^L_x, z^R_x> / 2^c), in exact integers (the products exceed 2^53).
        dots = (z[:d].astype(object) * z[d:].astype(object)).sum(axis=0)
        diag = tuple(int((int(v) + (1 << (c - 1))) >> c) if c > 0 else int(v) for v in dots)
        diag_public = len(set(diag)) == 1
        rows = [z] if diag_public else [z, np.asarray(diag, dtype=object)[None, :]]
        table = np.vstack(rows)
        if not diag_public and max(abs(g) for g in diag) >= limit:
            raise InputRangeError(f"the diagonal codes do not fit {self.ring.bits}-bit ring "
                                f"elements with frac_bits={c}; use fewer fractional bits")
        table = table.astype(np.int64)
        encoded = (z[:d].T.astype(np.float64) @ z[d:].astype(np.float64)) / 4.0**c
        enc_err = float(np.abs(encoded - qk.matrices[0, 0]).max())
        # Integer L1 sensitivity over every pair of cells (exact in float64: < 2^53).
        sens_v = int(distance.cdist(z.T.astype(np.float64), z.T.astype(np.float64),
                                    "cityblock").max())
        sens_g = 0 if diag_public else int(max(diag) - min(diag))
        enc = ShuffleEncoding(grid, qk, fac, table, d, diag, diag_public, c, self.ring,
                              encoded, enc_err, sens_v, sens_g)
        self._cache[key] = enc
        return enc

    def _kappa(self) -> float:
        if self.security_bits is not None:
            return float(self.security_bits)
        if self.delta > 0 and math.isfinite(self.epsilon):
            return max(1.0, math.ceil(_log2_one_plus_exp(self.epsilon)
                                      - math.log2(self.delta)))
        return float(DEFAULT_SECURITY_BITS)

    def parameters_for(self, n_parties: int, encoding: ShuffleEncoding) -> ShuffleParameters:
        """r, noise ratios and the guarantee's delta with ``n_parties`` parties (public).

        Raises if the decoded sums could wrap around the ring (probability > 2^-40 by
        Chebyshev), or if ``n_messages`` gives no (or not the requested) guarantee.
        """
        n = check_positive_int(n_parties, "n_parties", minimum=3)
        if self.n_parties is not None and n != self.n_parties:
            raise ValueError(f"the protocol was set up for n_parties={self.n_parties}, but "
                             f"{n} parties reported")
        h = n if self.min_honest is None else self.min_honest
        if h > n:
            raise ValueError(f"min_honest ({h}) cannot exceed the number of parties ({n})")
        m = encoding.n_coordinates
        sigma_target = self._kappa() + math.ceil(math.log2(m)) if m > 1 else self._kappa()
        r = (self.n_messages if self.n_messages is not None
             else split_and_mix_messages(h, self.ring.bits, sigma_target))
        sigma = split_and_mix_security(h, self.ring.bits, r)
        if math.isfinite(self.epsilon):
            delta = shuffle_delta(self.epsilon, m, sigma)
            if delta >= 1.0:
                # delta < 1 needs sigma > log2((1 + e^eps) m): the number of messages
                # grows with epsilon (and e^eps would overflow a float beyond eps ~ 709).
                needed = _log2_delta(self.epsilon, m, 0.0) + self._kappa()
                raise ValueError(
                    f"n_messages={r} gives no shuffle-model guarantee at epsilon="
                    f"{self.epsilon:g} for {h} honest parties and a {self.ring.bits}-bit ring "
                    f"(sigma = {sigma:.3g} bits; delta = (1 + e^eps) {m} 2^-sigma is >= 1); "
                    f"use n_messages >= "
                    f"{split_and_mix_messages(h, self.ring.bits, needed)} or a smaller "
                    "epsilon")
            if 0.0 < self.delta < delta:
                raise ValueError(
                    f"n_messages={r} reaches delta = {delta:.3g} > the allowed delta "
                    f"{self.delta:g}; use more messages or leave n_messages=None")
        else:
            delta = 0.0
        eps = self.epsilon
        has_v, has_g = encoding.sensitivity_vector > 0, encoding.sensitivity_diagonal > 0
        if has_v and has_g:
            share_g = self.diagonal_share_for(n, encoding)
            eps_g, eps_v = eps * share_g, eps * (1.0 - share_g)
        else:
            eps_g, eps_v = (eps, 0.0) if has_g else (0.0, eps)
        a_v = _dlap_rate(eps_v, encoding.sensitivity_vector) if has_v else 0.0
        a_g = _dlap_rate(eps_g, encoding.sensitivity_diagonal) if has_g else 0.0
        shape = n / h
        var_v, var_g = _polya_diff_variance(a_v, shape), _polya_diff_variance(a_g, shape)
        # The signed sums must decode: n max|w| plus the noise (Chebyshev at 2^-40).
        half_ring = 2.0 ** (self.ring.bits - 1)
        tails = np.full(m, math.sqrt(var_v * 2.0**_TAIL_LOG2))
        if not encoding.diagonal_public:
            tails[-1] = math.sqrt(var_g * 2.0**_TAIL_LOG2)
        peak = n * np.abs(encoding.table).max(axis=1).astype(np.float64) + tails
        if np.any(peak >= half_ring):
            raise InputRangeError(
                f"the noisy sums may exceed the {self.ring.bits}-bit ring (up to "
                f"{peak.max():.3g} >= 2^{self.ring.bits - 1}) with n = {n}, "
                f"frac_bits = {self.frac_bits}, epsilon = {eps:g}; use fewer fractional bits")
        t_v = math.exp(-a_v) if a_v > 0 else 0.0
        t_g = math.exp(-a_g) if a_g > 0 else 0.0
        return ShuffleParameters(n, h, r, eps_v, eps_g, t_v, t_g, var_v, var_g, sigma, delta)

    def diagonal_share_for(self, n_parties: int, encoding: ShuffleEncoding) -> float:
        """Share of epsilon for the diagonal coordinate (public, data-free).

        The given ``diagonal_share``, or the minimizer of the variance bound's two noise
        terms ``a / eps_v^2 + b / eps_g^2`` (``a = Delta_v^2 n^2 max_x ||z_x||^2``,
        ``b = Delta_g^2``, the d tau^4 term left out): ``eps_g / eps_v = (b / a)^{1/3}``.
        """
        if self.diagonal_share is not None:
            return self.diagonal_share
        a = (float(encoding.sensitivity_vector) * n_parties) ** 2 * encoding.max_sq_norm
        b = float(encoding.sensitivity_diagonal) ** 2
        if b == 0.0:
            return 0.0
        ra, rb = a ** (1.0 / 3.0), b ** (1.0 / 3.0)
        return rb / (ra + rb)

    def _survivor_parameters(self, params: ShuffleParameters, *, enc_of: ShuffleEncoding,
                             received: int) -> ShuffleParameters:
        """``params`` of a run set up for ``params.n_parties`` parties, of whom
        ``received`` sent their messages (at least ``h``, checked by the caller).

        What the parties drew is unchanged (the Pólya shape ``1/h`` and rates ``t``, r,
        sigma, hence delta); the total shape of the noise in the sums is ``received / h``
        (Pólya shapes add, 002 App. B.1.1), so its variance is
        ``2 (n'/h) t / (1 - t)^2`` per coordinate, and the n of the estimator is n'.
        """
        if received == params.n_parties:
            return params
        shape = received / params.n_honest
        rate_v = (_dlap_rate(params.epsilon_vector, enc_of.sensitivity_vector)
                  if enc_of.sensitivity_vector > 0 else 0.0)
        rate_g = (_dlap_rate(params.epsilon_diagonal, enc_of.sensitivity_diagonal)
                  if enc_of.sensitivity_diagonal > 0 else 0.0)
        return replace(params, n_parties=received,
                       noise_var_vector=_polya_diff_variance(rate_v, shape),
                       noise_var_diagonal=_polya_diff_variance(rate_g, shape))

    def dropout_rule(self, state: _ServerState, round_index: int) -> DropoutRule:
        """Which rounds may go on without parties that fell silent (docs/network.md).

        * The check-in (without ``n_parties``): n, the grid, r and the parties' noise
          shares are set from the parties that checked in; a silent one sent nothing.
        * The sharing round: each party adds ``Polya(1/h, t)`` differences (002 App.
          B.1.1, Balle et al. 2020 Sect. 5). With ``min_honest`` h set, the survivors'
          noise is still at least ``DLap(t)`` when h of them are honest (shapes add) and
          the split-and-mix bound holds with h honest messages mixed, so the analyzer
          releases over the n' parties whose messages arrived; below h the server step
          refuses. With ``min_honest`` left to its default n, each party's ``1/n`` share
          is needed.
        * With a shuffler service, the round after the sharing: the silent party's
          messages are already in the shuffled multiset, so a release would count a
          party the run no longer has.
        """
        sharing = 0 if self._fixed is not None else 1
        if round_index < sharing:
            return DropoutRule(True, "check-in round: n, the grid, the number of messages "
                                     "and each party's share of the noise are set from the "
                                     "parties that checked in")
        if round_index == sharing:
            if self.min_honest is None:
                return DropoutRule(False, "each party adds a 1/n share of the discrete-"
                                          "Laplace noise (min_honest defaults to n): without "
                                          "a party the sum carries less noise than the "
                                          "guarantee needs; set min_honest below n to "
                                          "tolerate dropouts")
            return DropoutRule(True, f"each party adds a 1/h share of the discrete-Laplace "
                                     f"noise (h = min_honest = {self.min_honest}): the sums of "
                                     f"at least h parties, h of them honest, still carry the "
                                     f"whole noise; the analyzer's n is the number of parties "
                                     f"whose messages arrived (at least h, else no release)")
        return DropoutRule(False, "the parties' messages are already in the shuffler's "
                                  "multiset: a release would count a party the run no "
                                  "longer has")

    def guarantee_for(self, params: ShuffleParameters) -> PrivacyGuarantee:
        """Shuffle-model DP of the analyzer's view (see the module docstring)."""
        if math.isinf(self.epsilon):
            return PrivacyGuarantee.none()
        return PrivacyGuarantee(self.epsilon, params.delta, PrivacyModel.CENTRAL,
                                self.kernel.adjacency,
                                assumptions=(self._shuffler_assumption(),
                                             honest_noise(params.n_parties, params.n_honest)))

    def planned_guarantee(self, n_rows: int | None = None) -> PrivacyGuarantee:
        """The guarantee of a run with ``n_rows`` parties (public): its delta follows from
        the number of messages and the ring (:func:`shuffle_delta`), which depend on n."""
        n = self.n_parties if n_rows is None else n_rows
        if n is None:
            raise ValueError("ghazi-shuffle's delta depends on the number of parties: give "
                             "the data, or n_parties=, before checking a budget")
        return self.guarantee_for(self._setup(n)[1])

    def _shuffler_assumption(self) -> Any:
        if self.shuffler == "service":
            return replace(trusted_shuffler(), detail=(
                "the shuffler service (its own role, apart from the aggregator) mixes the "
                "messages, hides who sent them and does not collude with the aggregator"))
        return replace(trusted_shuffler(), detail=(
            "the aggregator runs the shuffler: it mixes the messages and must not look at "
            "who sent them"))

    def _setup(self, n: int) -> tuple[ShuffleEncoding, ShuffleParameters]:
        if self._fixed is not None:
            self.parameters_for(n, self._fixed[0])  # checks that the count matches n_parties
            return self._fixed
        enc = self.encoding_for(self.grid_for(n))
        return enc, self.parameters_for(n, enc)

    # ---------------------------------------------------------------- variance
    def _taus(self, enc: ShuffleEncoding, params: ShuffleParameters) -> tuple[float, float]:
        scale = 4.0**enc.frac_bits
        return params.noise_var_vector / scale, params.noise_var_diagonal / scale

    def _error_law(self, enc: ShuffleEncoding, params: ShuffleParameters, vec: np.ndarray,
                   norm2: float, n: int) -> ErrorDistribution:
        """Law of ``U_hat - U`` from the released sums (module docstring, Variance).

        The error is ``(s_L . nu_R + nu_L . s_R + nu_L . nu_R - nu_g) / (n (n-1))``: 2d
        coordinate noises weighted by the (estimated) sums, d products and the diagonal
        noise. Each coordinate's noise is the sum of the parties' Polya differences, a
        discrete Laplace exactly when every party is counted honest (total shape 1, 002
        App. B.1.1); with total shape n/h > 1 it is a sum of n/h of them, given here the
        discrete Laplace of equal variance (heavier tails: conservative). The products
        are taken as normal. With few coordinates one noise may dominate, so the terms
        are added by :func:`~fedustat.privacy.errors.noise_sum` (exact where a few
        discrete Laplace terms dominate, normal when many comparable terms add up).
        """
        d, c = enc.half, enc.frac_bits
        tv2, tg2 = self._taus(enc, params)
        unit = 2.0**-c
        scale = n * (n - 1.0)
        parts: list[ErrorDistribution] = []
        if tv2 > 0:
            dlap = _dlap_with_variance(params.noise_var_vector, unit)
            # Per-coordinate plug-in weights |s_j| (unbiased s_j^2 = S_j^2 - tv2), rescaled
            # so that their squares add up to the variance formula's ||s||^2.
            w2 = np.maximum(vec * vec - tv2, 0.0)
            total = float(w2.sum())
            weights = np.sqrt(w2 * (norm2 / total)) if total > 0 else w2
            parts.extend(dlap.scaled(float(w) / scale) for w in weights if w > 0)
            parts.append(NormalError(math.sqrt(d) * tv2 / scale))
        if tg2 > 0:
            parts.append(_dlap_with_variance(params.noise_var_diagonal, unit).scaled(1 / scale))
        return noise_sum(parts)

    def variance(self, counts: Any, n_parties: int | None = None) -> float:
        """Exact variance of U_hat given the histogram ``counts`` of the parties' cells."""
        h = as_int_array(counts, "counts")
        if np.any(h < 0):
            raise ValueError("counts must be >= 0")
        n = int(h.sum()) if n_parties is None else n_parties
        enc, params = self._setup(n)
        if h.size != enc.grid.size or int(h.sum()) != n:
            raise ValueError(f"counts must have {enc.grid.size} cells summing to n = {n}")
        d = enc.half
        s = enc.table[: 2 * d].astype(np.float64) @ h.astype(np.float64) / 2.0**enc.frac_bits
        tv2, tg2 = self._taus(enc, params)
        return (tv2 * float(s @ s) + d * tv2 * tv2 + tg2) / (n * (n - 1.0)) ** 2

    def variance_bound(self, n_parties: int) -> float:
        """Data-free bound: ``||s_L||^2 + ||s_R||^2 <= n^2 max_x ||z_x||^2 / 4^c``."""
        n = check_positive_int(n_parties, "n_parties", minimum=3)
        enc, params = self._setup(n)
        tv2, tg2 = self._taus(enc, params)
        return (tv2 * n * n * enc.max_sq_norm + enc.half * tv2 * tv2 + tg2) \
            / (n * (n - 1.0)) ** 2

    # ---------------------------------------------------------------- party side
    def party_noise(self, params: ShuffleParameters, enc: ShuffleEncoding, n_rows: int,
                    source: NoiseSource) -> np.ndarray:
        """Each party's ``Polya(1/h, t) - Polya(1/h, t)`` per coordinate, ``(n_rows, D+1)``."""
        shape_r = 1.0 / params.n_honest
        m, d2 = enc.n_coordinates, 2 * enc.half
        out = np.zeros((n_rows, m), dtype=np.int64)
        if params.t_vector > 0:
            size = (n_rows, d2)
            out[:, :d2] = (polya(shape_r, params.t_vector, size, rng=source)
                           - polya(shape_r, params.t_vector, size, rng=source))
        if not enc.diagonal_public and params.t_diagonal > 0:
            out[:, d2] = (polya(shape_r, params.t_diagonal, n_rows, rng=source)
                          - polya(shape_r, params.t_diagonal, n_rows, rng=source))
        return out

    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _PartyState:
        records = np.asarray(data, dtype=np.float64)
        if records.ndim == 1:
            records = records[:, None]
        enc, params = self._fixed if self._fixed is not None else (None, None)
        return _PartyState(records, np.asarray(parties), enc, params)

    def init_server(self, n_parties: int) -> _ServerState:
        enc, params = self._fixed if self._fixed is not None else (None, None)
        return _ServerState(None, enc, params, self.k_rule, int(n_parties))

    # ---------------------------------------------------------------- shuffler service
    def service_roles(self) -> tuple[str, ...]:
        return (SHUFFLER_ROLE,) if self.shuffler == "service" else ()

    def init_service(self, role: str, n_parties: int) -> int:
        """The shuffler's state: its public id (it holds nothing else between rounds)."""
        return service_id(n_parties, self.service_roles(), role)

    def service_step(self, role: str, state: int, inbox: Message | None,
                     rng: np.random.Generator) -> tuple[int, Message | None]:
        """The shuffler: once the parties' messages arrive, permute each coordinate's
        messages (:func:`shuffle_messages`, its own coins) and send the multiset on."""
        service_id(0, self.service_roles(), role)  # refuses another role, naming it
        if inbox is None or "shares" not in inbox.fields or not inbox.is_peer:
            return state, None
        shares = np.asarray(inbox.fields["shares"])
        if shares.ndim != 3 or shares.dtype.kind not in "iu":
            raise ValueError(f"the shuffler expects integer shares (n, r, m), got dtype "
                             f"{shares.dtype} and shape {shares.shape}")
        if self.noise is not None and self.noise.kind == "deployment":
            mixed = _os_permuted(shares.reshape(-1, shares.shape[2]))
        else:
            mixed = shuffle_messages(shares, rng)
        # One row: the shuffled multiset, which no longer belongs to any party.
        return state, Message(Role.PARTY, Role.SERVER, {"messages": mixed[None]},
                              {"messages": self.ring.bits},
                              np.array([state], dtype=np.int64))

    def party_step(self, state: _PartyState, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_PartyState, Message]:
        if state.params is None:
            if inbox is None:
                # n (for the Pólya shape, r and k) is public but not yet known: check in.
                ones = np.ones(state.parties.size, dtype=np.uint8)
                return state, Message(Role.PARTY, Role.SERVER, {"join": ones},
                                      {"join": JOIN_BITS}, state.parties)
            setup = [int(v) for v in as_int_array(inbox.fields["setup"], "setup")]
            n, r = setup[:2]
            enc, params = self._setup(n)
            if len(setup) > 2:
                # Parties fell silent at the check-in: the shuffler keeps its id of the
                # start (after every party that joined), which n no longer gives.
                state = replace(state, shuffler_id=setup[2])
            if params.n_messages != r:
                raise ValueError(f"the aggregator announced r = {r} messages, but the public "
                                 f"parameters give {params.n_messages}")
            state = replace(state, encoding=enc, params=params)
        enc, params = state.encoding, state.params
        assert enc is not None and params is not None
        if state.sent:
            # The shuffler speaks for everyone this round; a waiting party sends no row.
            return state, Message(Role.PARTY, Role.SERVER,
                                  {"messages": np.zeros((0, 0, enc.n_coordinates), np.int64)},
                                  {"messages": self.ring.bits},
                                  np.zeros(0, dtype=np.int64))
        source = self.noise if self.noise is not None else SimulationNoise(rng)
        cells = enc.grid.encode(state.records, source)
        ring = self.ring
        values = ring.add(ring.reduce(enc.table[:, cells].T),
                          ring.reduce(self.party_noise(params, enc, cells.size, source)))
        shares = split_and_mix(values, params.n_messages, source, ring=ring)
        if self.shuffler == "service":
            # Relayed to the shuffler sealed end to end: the aggregator routes, never reads.
            shuffler_id = (state.shuffler_id if state.shuffler_id is not None else
                           service_id(params.n_parties, self.service_roles(), SHUFFLER_ROLE))
            to = np.full(state.parties.size, shuffler_id, dtype=np.int64)
            return replace(state, sent=True), Message(
                Role.PARTY, Role.PARTY, {"shares": shares, PEER_TO: to},
                {"shares": ring.bits, PEER_TO: 64}, state.parties)
        # One row per party: its r messages per coordinate, each a ring element.
        return state, Message(Role.PARTY, Role.SERVER, {"shares": shares},
                              {"shares": ring.bits}, state.parties)

    # ---------------------------------------------------------------- server side
    def server_step(self, state: _ServerState, inbox: Message,
                    rng: np.random.Generator) -> tuple[_ServerState, Message | Estimate]:
        if "join" in inbox.fields:
            n = len(inbox.parties) if inbox.parties is not None else 0
            if self.min_honest is not None and n < self.min_honest:
                raise ValueError(f"only {n} parties checked in, fewer than min_honest = "
                                 f"{self.min_honest}: the noise shares of fewer than h "
                                 "parties cannot carry the noise the guarantee needs")
            enc, params = self._setup(n)
            rule = self.k_rule if self.plan.resolved else self._rule_text(n)
            state = replace(state, n_parties=n, encoding=enc, params=params, k_rule=rule)
            setup = [n, params.n_messages]
            if self.shuffler == "service" and n != state.run_parties:
                # The shuffler's id is that of the start, after the parties that joined.
                setup.append(service_id(state.run_parties, self.service_roles(),
                                        SHUFFLER_ROLE))
            fields = {"setup": np.array(setup, dtype=np.int64)}
            bits = {"setup": SETUP_BITS}
            if not self.plan.resolved and self.plan.continuous:
                bins = enc.grid.continuous_bins
                fields["bins"] = np.array([bins[c.name] for c in self.plan.continuous],
                                          dtype=np.int64)
                bits["bins"] = BINS_BITS
            return state, Message(Role.SERVER, Role.PARTY, fields, bits)
        if "messages" in inbox.fields:
            return state, self._analyze_shuffled(state, inbox)
        shares = np.asarray(inbox.fields["shares"])
        n = shares.shape[0]
        if state.params is None:
            state = replace(state, n_parties=n)
        setup = self._run_setup(state, n)
        enc, params = setup
        if shares.ndim != 3 or shares.shape[1:] != (params.n_messages, enc.n_coordinates):
            raise ValueError(f"shares must have shape (n, {params.n_messages}, "
                             f"{enc.n_coordinates}), got {shares.shape}")
        # The shuffler (a separate, trusted component) mixes each coordinate's messages;
        # the server step's generator stands in for its randomness. The analyzer below
        # sees only the shuffled multiset.
        messages = shuffle_messages(shares, rng)
        sums = analyze_messages(messages, self.ring)
        return state, self.estimate_from_sums(sums, n, k_rule=state.k_rule, setup=setup)

    def _run_setup(self, state: _ServerState, received: int
                   ) -> tuple[ShuffleEncoding, ShuffleParameters]:
        """The public set-up the parties used (fixed before their messages, from the n
        of the start or of the check-in), checked against the ``received`` contributions.

        Fewer contributions than that n: parties fell silent before sending theirs
        (:meth:`dropout_rule`). Each party drew a ``1/h`` share of the noise, so the
        survivors' noise is still at least ``DLap(t)`` when at least ``h = min_honest`` of
        them are honest (002 App. B.1.1: Pólya shapes add); fewer than h survivors cannot
        carry it, and the run stops before anything is analyzed.
        """
        if state.params is None or state.encoding is None:
            return self._setup(received)
        enc, params = state.encoding, state.params
        if self._fixed is not None and state.run_parties:
            self._setup(state.run_parties)  # a run of another n than n_parties is refused
        if received > params.n_parties:
            raise ValueError(f"{received} parties' messages arrived, but the run was set up "
                             f"for {params.n_parties} parties")
        if received < params.n_honest:
            raise ValueError(
                f"only {received} of the {params.n_parties} parties sent their messages, "
                f"fewer than min_honest = {params.n_honest}: each party adds a "
                f"1/{params.n_honest} share of the discrete-Laplace noise, so the "
                "survivors' noise would be less than the guarantee needs")
        return enc, params

    def _analyze_shuffled(self, state: _ServerState, inbox: Message) -> Estimate:
        """The analyzer's step behind a shuffler service: only the shuffled multiset."""
        rows = np.asarray(inbox.fields["messages"])
        n = state.n_parties if state.n_parties is not None else state.run_parties
        enc, params = (state.encoding, state.params) if state.params is not None \
            else self._setup(n)
        assert enc is not None
        r, m = params.n_messages, enc.n_coordinates
        # The multiset holds r messages per coordinate from each party whose messages
        # reached the shuffler: parties silent in the sharing round sent none.
        if rows.ndim != 3 or rows.shape[0] != 1 or rows.shape[2] != m \
                or rows.shape[1] % r or not 0 < rows.shape[1] <= n * r \
                or rows.dtype.kind not in "iu":
            raise ValueError(f"the shuffler's message must be one integer row of shape "
                             f"(n' * {r}, {m}) with n' <= {n}, got dtype {rows.dtype} and "
                             f"shape {rows.shape[1:]} in {rows.shape[0]} rows")
        received = rows.shape[1] // r
        setup = self._run_setup(state, received)
        sums = analyze_messages(rows[0], self.ring)
        return self.estimate_from_sums(sums, received, k_rule=state.k_rule, setup=setup)

    def estimate_from_sums(self, sums: Any, n_parties: int, *,
                           k_rule: str | None = None,
                           setup: tuple[ShuffleEncoding, ShuffleParameters] | None = None
                           ) -> Estimate:
        """The analyzer's release from the decoded per-coordinate sums (002 App. D.1.3).

        ``n_parties`` is the number of parties whose messages the sums hold; ``setup``
        the public encoding and parameters they used (default: those for ``n_parties``).
        With fewer contributions than the setup's n (parties silent before sending), the
        grid, r and the noise rates stay the setup's, the estimator divides by
        ``n'(n' - 1)`` and the noise's total Pólya shape is ``n' / h``.
        """
        n = check_positive_int(n_parties, "n_parties", minimum=3)
        if setup is None:
            enc, params = self._setup(n)
        else:
            enc, params = setup[0], self._survivor_parameters(setup[1], enc_of=setup[0],
                                                               received=n)
        s = np.asarray(sums)
        if s.shape != (enc.n_coordinates,) or s.dtype.kind not in "iu":
            raise ValueError(f"sums must be {enc.n_coordinates} integers, got dtype "
                             f"{s.dtype} and shape {s.shape}")
        d, c = enc.half, enc.frac_bits
        big = [int(v) for v in s.tolist()]
        inner = sum(a * b for a, b in zip(big[:d], big[d:2 * d], strict=True))
        s_g = n * enc.diagonal[0] if enc.diagonal_public else big[2 * d]
        # Exact integers to the end: one correctly rounded division.
        u = (inner - s_g * (1 << c)) / ((1 << (2 * c)) * n * (n - 1))

        tv2, tg2 = self._taus(enc, params)
        vec = np.asarray(big[: 2 * d], dtype=np.float64) / 2.0**c
        norm2 = max(float(vec @ vec) - 2 * d * tv2, 0.0)
        u_var = (tv2 * norm2 + d * tv2 * tv2 + tg2) / (n * (n - 1.0)) ** 2
        u_se = math.sqrt(u_var)
        grid = enc.grid
        public = grid.public_data(np.array([n]))
        u_law = self._error_law(enc, params, vec, norm2, n) if u_se > 0 else NormalError(0.0)
        # The release estimates the U-statistic of the encoded kernel, within
        # encoding_error of the kernel's (a public bound): part of the stated error once
        # it is not negligible (1% of the noise's standard deviation).
        if u_se > 0 and enc.encoding_error >= 0.01 * u_law.std:
            u_law = BoundedBias(u_law, enc.encoding_error)
        # Renyi-2's -ln U clips U into [1/C(n,2), 1] first and maps U's interval
        # (statistic_release); an affine map carries U's law scaled.
        release = statistic_release(self.kernel, u, u_law, public)
        fac = enc.factorization
        diagnostics: dict[str, Any] = {
            **factorization_diagnostics(grid, k_rule or self.k_rule, self.quantized_kernel,
                                        fac, d, self.dim, self.projection_seed),
            "n_messages": params.n_messages, "n_coordinates": enc.n_coordinates,
            "ring_bits": self.ring.bits, "frac_bits": c, "encoding_error": enc.encoding_error,
            "diagonal": "public (constant)" if enc.diagonal_public else "summed",
            "min_honest": params.n_honest, "security_bits_per_coordinate": params.security,
            "shuffle_delta": params.delta, "epsilon_vector": params.epsilon_vector,
            "epsilon_diagonal": params.epsilon_diagonal,
            "sensitivity_vector": enc.sensitivity_vector,
            "sensitivity_diagonal": enc.sensitivity_diagonal,
            "noise_variance_vector": params.noise_var_vector,
            "noise_variance_diagonal": params.noise_var_diagonal,
            "u_statistic": u, "u_std_error": u_se,
            "std_error_method": "exact variance given the data with ||s||^2 estimated "
                                "without bias from the sums (ghazi_shuffle docstring)",
            "trust": "a shuffler that hides each message's sender and does not collude with "
                     "the analyzer; at least min_honest parties follow the protocol",
            "shuffler": self.shuffler,
            "party_noise": self.noise.kind if self.noise is not None else "simulation",
        }
        operations = n * params.n_messages * enc.n_coordinates + d
        # In range on every transport: the clip is part of the server's release step.
        return release.estimate(self.kernel, public, protocol=self.name,
                                privacy=self.guarantee_for(params),
                                cost=Cost(server_operations=int(operations)),
                                diagnostics=diagnostics)


def _ghazi_shuffle(kernel: Kernel, *, epsilon: float, delta: float = 0.0, k: Any = None,
                   bounds: Any = None, domain: Any = None, n_messages: int | None = None,
                   quantizer: str = "round", quantized_kernel: str | None = None,
                   n_parties: int | None = None, min_honest: int | None = None,
                   security_bits: int | None = None, frac_bits: int = DEFAULT_FRAC_BITS,
                   ring_bits: int = DEFAULT_RING_BITS,
                   diagonal_share: float | None = None,
                   lipschitz: float | None = None, rank: int | None = None,
                   dim: int | None = None, projection_seed: int = 0,
                   noise: NoiseSource | None = None,
                   max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
                   avg_tol: float = DEFAULT_AVG_TOL, shuffler: str = "server") -> GhaziShuffle:
    return GhaziShuffle(kernel, epsilon, delta=delta, k=k, bounds=bounds, domain=domain,
                        quantizer=quantizer, quantized_kernel=quantized_kernel,
                        n_parties=n_parties, n_messages=n_messages, min_honest=min_honest,
                        security_bits=security_bits, frac_bits=frac_bits,
                        ring_bits=ring_bits, diagonal_share=diagonal_share,
                        lipschitz=lipschitz, rank=rank, dim=dim,
                        projection_seed=projection_seed, noise=noise,
                        max_evaluations=max_evaluations, avg_tol=avg_tol,
                        shuffler=shuffler)


register("ghazi-shuffle", _ghazi_shuffle, model=PrivacyModel.CENTRAL,
         summary="baseline GhaziSM: projections of the factorized kernel summed by "
                 "split-and-mix through a shuffler with distributed discrete Laplace noise; "
                 "(eps, delta)-DP of the analyzer's view",
         source="002 Sec. 5, Table 1, App. D.1.3, D.2 (Ghazi et al. 2024; Balle et al. "
                "2020 Sect. 5)")
