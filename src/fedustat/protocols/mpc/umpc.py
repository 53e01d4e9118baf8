"""U-MPC: Protocol 3.1 of paper 002 (Sinh & Ramon), a U-statistic of degree k under central DP.

Every party ``i`` holds one record ``x_i``. A public hypergraph ``E`` of k-subsets of the
parties (BalancedSamp, 002 App. F, by default) fixes the tuples of an incomplete
U-statistic. Then (002 Protocol 3.1):

1. **Sharing phase.** For every edge ``e`` and member ``e_j``, party ``e_j`` secret-shares
   its fixed-point encoded record among the ``k`` members of ``e`` (additive (k, k)
   sharing, 002 App. A.1-A.2) and sends each other member its share.
2. **Computing phase.** The members of every edge evaluate the kernel on their shares
   with the secure circuits of :mod:`fedustat.protocols.mpc.kernel_circuits` (comparisons,
   equalities, Beaver products with dealt material), each member on its own shares;
   each member ends with a share ``[f(x_e)]_{e_j}``.
3. **Noise phase**. The parties obtain additive shares of discrete
   Laplace noise ``eta`` calibrated to the integer sensitivity ``delta_G^max * Delta f``
   (002 App. C.2.3) with Protocol B.1: every party contributes (threat model M_Dis) or a
   random subgroup ``Z`` of ``ceil(log(fail_prob) / log(1 - f_H))`` parties does (M_HF,
   002 Sec. 4).
4. **Aggregation.** Party ``i`` sends ``z_i = [eta]_i + sum_{e ∋ i} [f(x_e)]_i`` — one ring
   element — to the aggregator, who releases ``U_hat = Rec(z) / |E|`` (Lemma C.1) and the
   kernel's public transform of it (e.g. AUC = U C(n,2) / (n+ n-)).

Privacy: ``U_{f,E}`` has sensitivity ``delta_G^max Delta f / |E|`` (002 App. C.2.3), and
the noise is the discrete Laplace mechanism for the integer sum, so the release is
epsilon-DP (replace one record). Against whom depends on the noise setting
(``min_honest``, see :func:`collusion_guarantee` and ``docs/protocols/umpc.md``).

How the steps map to the protocol contract ("Transport")
--------------------------------------------------------
Every party step computes on the party's own record, its own shares and the rows it
received; the exchanges between parties are real messages in *relay rounds* (rows
addressed to parties: routed between batches by the simulator, forwarded end-to-end
encrypted by the networked server, ``docs/network.md``):

0. parties upload the public part of their record (the label of AUC, the class of VUS;
   otherwise a 1-bit check-in);
1. the aggregator sends ``n`` and a 128-bit public coin. From the coin every party
   derives the same design E (002 Sec. 3), for each design edge a **dealing party**
   (uniform among the ``n - k`` parties outside it) and, for M_HF, the subgroup Z. With
   public labels each party also gets, in its own row, the number of active edges and
   only the labels of its edges' co-members and of the members of the edges it deals
   (not all n: O(n k deg) bits in total instead of n^2), hence its active edges;
2. *relay*: each dealing party deals, from its own coins, the material of its edges
   (Beaver triples; FSS keys or edaBits, AND triples and daBits) and sends each member
   its part (002 App. A.3's offline phase, here a party). With ``dealer="service"`` the
   ``dealer`` service role (its own process in a networked run, public id n) deals every
   edge instead, from its own coins, on the same broadcast;
3. *relay*: sharing phase: member ``j`` of each edge sends member ``q`` its share ``q``;
4. *relay rounds*: the circuits of :mod:`fedustat.protocols.mpc.kernel_circuits` are
   written lockstep (row ``r`` = member ``r``, the only cross-row operation an opening).
   A batch groups its edges by the members it holds in them and runs each group as one
   vectorized circuit, rows = those members (the other rows are placeholders it never
   fills): one circuit per member position for a batch of one party (a networked silo),
   one circuit with every row filled for a batch holding whole edges (the simulator's
   default batch, the lockstep evaluation). Under :func:`fedustat.secure.member_openings`
   every opening becomes each held member's row sent to its ``k - 1`` co-members (also
   those in the same batch, so the traffic is the same in every batching), and the
   opened value is the member's own row plus (or xor) theirs. A group's circuit runs
   once, waiting at each opening for the next relay round (:class:`_MemberCircuit`)
   until it returns;
5. *relay* (with noise): each noise contributor sends every other party a share of its
   Pólya difference (Protocol B.1). It comes after the circuit, whose material is then
   spent, so that a party never holds both (its two largest receipts); the noise
   shares are drawn from their own stream, so the order changes no number;
6. upload ``z_i`` (one ring element); the aggregator reconstructs and releases.

A party silent in step 0 (a networked run with ``min_silos``, :meth:`UMPC.dropout_rule`)
has sent nothing secret and the coin is drawn after it: the aggregator draws it over the
parties present, renumbered in id order, and tells them who is present (a mask beside
the coin); every step then computes on those positions and translates to the run's ids
at the message boundary (:class:`_Seating`). From step 1 on a silent party stops the run.

A relay round carries one kind of row, so the noise round no longer overlaps the
circuit: relay rounds = 2 + C_f^R + 1 (noise), against Lemma C.3's sharing round plus
``max(C_f^R, C_eta^R)``. The dealt material is counted as peer traffic (to the bit,
Lemma C.3's offline count: AND-triple words travel as their active bits only), so
``cost.offline_bits`` is 0. Randomness is per batch (shares, dealing, noise), so the
noise-free release does not depend on batching and a networked run equals
``simulate(..., batch_size=[rows of each silo])`` for a seed; seeded noisy numbers differ
from earlier versions that ran all edges in one place. :func:`run_secure_phases` (tests,
benchmarks) still runs all edges side by side with an offline dealer and a
:class:`~fedustat.secure.Transcript`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import queue
import threading
import time
import warnings
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NamedTuple

import numpy as np

from fedustat._validation import (
    InputRangeError,
    RecordCheck,
    RecordCheckError,
    check_epsilon,
    check_positive_int,
    check_probability,
)
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
from fedustat.privacy.noise import NoiseSource
from fedustat.protocols.base import (
    PEER_FROM,
    PEER_TO,
    Cost,
    DropoutRule,
    Estimate,
    Message,
    Protocol,
    Role,
    normal_std_error,
    service_id,
    statistic_release,
)
from fedustat.protocols.mpc.encoding import (
    ColumnEncoding,
    bounds_by_column,
    declared_bounds,
    ring_bits_for,
    with_rounding_bias,
)
from fedustat.protocols.mpc.kernel_circuits import CircuitMaterial, KernelCircuit, circuit_for
from fedustat.protocols.registry import register
from fedustat.secure import (
    AndTriples,
    DaBits,
    Dealer,
    FixedPoint,
    FssKey,
    NoiseShares,
    PolyaDifferenceError,
    Ring,
    Transcript,
    contributor_noise,
    distributed_noise,
    member_openings,
    mhf_noise,
    share,
    subgroup_size,
)
from fedustat.secure.dealer import popcount
from fedustat.secure.sharing import Material
from fedustat.stats.designs import Design, balanced_sample, bernoulli_sample, uniform_sample
from fedustat.stats.kernels import Kernel, PublicData

__all__ = [
    "DEFAULT_FIXED_POINT",
    "MAX_DIS_PARTIES",
    "UMPC",
    "CommunicationCount",
    "NoisePlan",
    "SecureRun",
    "collusion_guarantee",
    "incomplete_variance_bound",
    "lemma_c3",
    "noise_contributors",
    "run_secure_phases",
    "share_records",
]

#: 002 Sec. 6.1's l = 40, c = 14, with one bit of headroom so that differences of two
#: encodings cannot overflow (the half-range comparisons need it): values in [-2^24, 2^24).
DEFAULT_FIXED_POINT = FixedPoint(40, 14, headroom=1)

#: Protocol B.1 among all n parties computes and sends n^2 shares; beyond this n the
#: M_Dis noise is refused (10^4 parties: 10^8 shares, about 0.5 s; 10^5 would be 10^10).
MAX_DIS_PARTIES = 10_000

DESIGNS = ("balanced", "uniform", "bernoulli")
THREAT_MODELS = ("hf", "dis")
COMPARISONS = ("auto", "fss", "circuit")
DEALERS = ("party", "service")
DEALER_ROLE = "dealer"
SERVER_OPS_NOTE = "n ring additions (002 App. D.2.3)"


class CommunicationCount(NamedTuple):
    """Online bits exchanged in total and online rounds."""

    bits: int
    rounds: int


def lemma_c3(*, n_parties: int, n_edges: int, degree: int, ring_bits: int, kernel_bits: int,
             kernel_rounds: int, noise_bits: int, noise_rounds: int,
             secret_columns: int = 1) -> CommunicationCount:
    """Online communication of U-MPC, 002 Lemma C.3 (with the corrections below).

    ``bits = |E| k (k - 1) l d + |E| C_f + C_eta + n l`` and
    ``rounds = max(C_f^R, C_eta^R) + 2``:

    * sharing phase: each of the ``k`` members of each edge sends ``k - 1`` shares of its
      record; one round;
    * computing phase: ``C_f`` bits per edge (all members together) in ``C_f^R`` rounds,
      in parallel with the noise phase (``C_eta`` bits, ``C_eta^R`` rounds);
    * aggregation: ``n`` ring elements to the aggregator; one round.

    Corrections to the lemma as printed (which assumes one ``l``-bit value per record and
    shares on every edge): a record with ``d`` secret columns (Kendall's (x, y), the two
    clusterings of the Rand index) costs ``d`` shares per peer, hence the factor
    ``secret_columns``; edges whose kernel value is fixed by public labels (AUC, VUS)
    are neither shared nor computed, so ``n_edges`` counts the others; with no edge to
    share (``n_edges = 0`` or ``k = 1``) the sharing round disappears.

    Parameters
    ----------
    n_parties, n_edges, degree, ring_bits:
        ``n``, ``|E|`` (edges shared and computed), ``k``, ``l``.
    kernel_bits, kernel_rounds:
        ``C_f^C`` (bits per edge, summed over its members) and ``C_f^R``.
    noise_bits, noise_rounds:
        ``C_eta^C`` and ``C_eta^R`` (0 and 0 without noise).
    secret_columns:
        ``d``, secret values per record.
    """
    n = check_positive_int(n_parties, "n_parties")
    m = check_positive_int(n_edges, "n_edges", minimum=0)
    k = check_positive_int(degree, "degree")
    sharing = m * k * (k - 1) * ring_bits * secret_columns
    shares_round = 1 if m and k > 1 else 0
    bits = sharing + m * kernel_bits + noise_bits + n * ring_bits
    return CommunicationCount(int(bits), shares_round + max(kernel_rounds, noise_rounds) + 1)


def incomplete_variance_bound(n: int, k: int, m: int, sensitivity: float) -> float:
    """002 Claim D.1: ``Var(U_{f,E} | data) <= (N - m) / (m (N - 1)) * (Delta f)^2 / 4``.

    For ``m`` tuples drawn uniformly without replacement among ``N = C(n, k)``; the
    variance of the kernel values is at most ``(Delta f)^2 / 4`` (Popoviciu). 002 argues
    BalancedSamp (a stratified sample) does no worse.
    """
    total = math.comb(n, k)
    if m <= 0 or total <= 1:
        return 0.0
    return (total - m) / (m * (total - 1)) * sensitivity**2 / 4.0


def noise_contributors(threat_model: str, n_parties: int, f_honest: float,
                       fail_prob: float) -> int:
    """Number of parties that draw noise: all ``n`` (M_Dis) or ``|Z|`` (M_HF, 002 Sec. 4)."""
    if threat_model == "dis":
        return n_parties
    return min(n_parties, subgroup_size(f_honest, fail_prob))


def collusion_guarantee(threat_model: str, n_parties: int, contributors: int,
                        min_honest: int | None, epsilon: float, f_honest: float,
                        fail_prob: float) -> str:
    """The release's DP guarantee against coalitions, in plain words.

    Protocol B.1 with shape ``r = 1/h`` makes the noise of any ``h`` contributors a full
    discrete Laplace draw; a contributor knows its own part, so the release stays
    epsilon-DP against the aggregator colluding with up to ``contributors - h`` of them
    (:mod:`fedustat.secure.noise`).
    """
    h = contributors if min_honest is None else min_honest
    tolerated = contributors - h
    if threat_model == "dis":
        who = f"all {n_parties} parties add noise (M_Dis, Protocol B.1)"
    else:
        who = (f"a random subgroup Z of {contributors} parties adds noise (M_HF: with at most "
               f"a fraction {1 - f_honest:g} of the parties corrupted, Z holds an honest party "
               f"except with probability {fail_prob:.3g})")
    if tolerated == 0:
        scope = ("against the aggregator and the parties outside the noise contributors only; "
                 "an aggregator colluding with any contributor can subtract that "
                 "contributor's noise (002's r = 1/|contributors|)")
    elif threat_model == "hf" and h == 1:
        scope = ("against the aggregator colluding with any parties, as long as Z holds an "
                 "honest member (the M_HF assumption): each member of Z adds a full discrete "
                 f"Laplace draw, so up to {tolerated} of the {contributors} may collude")
    else:
        scope = (f"against the aggregator colluding with up to {tolerated} of the "
                 f"{contributors} noise contributors: any {h} honest contributors supply a "
                 "full discrete Laplace draw")
    return f"epsilon={epsilon:g}-DP release; {who}; holds {scope}."


# ----------------------------------------------------------------------------------------
# The parties' secure phases (pure functions of the inputs and the randomness)
# ----------------------------------------------------------------------------------------


def share_records(records: list[np.ndarray], ring: Ring, rng: Any,
                  transcript: Transcript | None = None) -> list[np.ndarray]:
    """Sharing phase of 002 Protocol 3.1: member ``j`` of every edge shares its record.

    Parameters
    ----------
    records:
        ``records[j]`` of shape ``(m, d)``: the encoded secret columns of member ``j`` of
        each of the ``m`` edges (``k = len(records)`` members).
    ring:
        The ring of the encoding.
    rng:
        The parties' randomness for the shares.
    transcript:
        Layout of the edges (``k`` members, ``m`` groups): each member sends ``k - 1``
        shares of ``d`` ring elements, one round.

    Returns
    -------
    ``shares[j]`` of shape ``(k, m, d)``: row ``r`` is what member ``r`` holds of member
    ``j``'s record (row ``j`` is the share it kept).
    """
    k = len(records)
    out = [share(rec, k, rng, ring=ring) for rec in records]
    if transcript is not None and records:
        transcript.record_open("share", ring.bits * int(records[0].shape[1]))
    return out


@dataclass
class NoisePlan:
    """Parameters of the noise phase: Protocol B.1 among all parties (``"dis"``) or the
    random subgroup Z (``"hf"``); ``sensitivity`` in ring units; ``source`` the Pólya and
    share randomness (a Generator or a NoiseSource)."""

    threat_model: str
    epsilon: float
    sensitivity: int
    f_honest: float
    fail_prob: float
    min_honest: int | None
    source: Any


@dataclass(frozen=True, eq=False)
class SecureRun:
    """What the parties' round 2 produced.

    ``z``: each party's message to the aggregator; ``transcript``: every online and
    offline bit of phases 1-4; ``noise``: the noise shares (None without noise);
    ``active_edges``: edges shared and computed; seconds spent offline (dealer) and online.
    """

    z: np.ndarray
    transcript: Transcript
    noise: NoiseShares | None
    active_edges: int
    offline_seconds: float
    online_seconds: float


def run_secure_phases(circuit: KernelCircuit, encoded: np.ndarray, public: np.ndarray | None,
                      tuples: np.ndarray, *, fixed_point: FixedPoint, method: str,
                      full_range: bool, noise: NoisePlan | None, share_rng: Any,
                      dealer_rng: Any) -> SecureRun:
    """Phases 1-4 of 002 Protocol 3.1 for all ``n`` parties at once (see the module docstring).

    ``encoded`` (n, d) holds each party's encoded secret columns, ``public`` (n,) the
    public labels (labelled kernels), ``tuples`` (|E|, k) the design.
    """
    ring = fixed_point.ring
    n, k = encoded.shape[0], circuit.degree
    ids = np.arange(n, dtype=np.int64)
    root = Transcript(party_ids=ids[None, :])
    mask = None if public is None else circuit.active(public[tuples])
    edges = tuples if mask is None else tuples[mask]
    m = int(edges.shape[0])
    compute = m > 0 and k > 1
    order = None if public is None else circuit.order(public[edges])
    start = time.perf_counter()
    view = root.view(party_ids=edges.T) if compute else None
    material: CircuitMaterial | None = None
    if view is not None:
        # Offline phase: the trusted dealer deals every edge's material (002 App. A.3).
        dealer = Dealer(k, ring=ring, rng=dealer_rng, transcript=view)
        material = circuit.deal(dealer, m, method=method, full_range=full_range)
    offline_end = time.perf_counter()
    out: np.ndarray | None = None
    noise_shares: NoiseShares | None = None
    shares = [] if view is None else share_records(
        [encoded[edges[:, j]] for j in range(k)], ring, share_rng, view)
    with root.parallel() as par:
        if view is not None and material is not None:
            with par.branch():
                out = circuit.evaluate(shares, material, ring=ring, method=method,
                                       full_range=full_range, order=order, transcript=view)
        if noise is not None:
            with par.branch():
                # Phase 3 runs beside phase 2 (002 Sec. 3: "possibly in parallel"; Lemma
                # C.3 counts max(C_f^R, C_eta^R) + 2 rounds).
                noise_shares = _draw_noise(noise, n, ring, root, ids)
    z = np.zeros(n, dtype=np.uint64) if noise_shares is None else noise_shares.shares.copy()
    if out is not None:
        for j in range(k):
            # uint64 additions wrap modulo 2^64, and 2^l divides 2^64.
            np.add.at(z, edges[:, j], out[j])
    z = np.bitwise_and(z, ring.mask)
    root.record_to_server("aggregate", ring.bits)
    return SecureRun(z, root, noise_shares, m, offline_end - start,
                     time.perf_counter() - offline_end)


def _draw_noise(plan: NoisePlan, n: int, ring: Ring, transcript: Transcript,
                ids: np.ndarray) -> NoiseShares:
    if plan.threat_model == "hf":
        return mhf_noise(n, plan.epsilon, plan.sensitivity, f_honest=plan.f_honest,
                         fail_prob=plan.fail_prob, min_honest=plan.min_honest, ring=ring,
                         rng=plan.source, transcript=transcript, party_ids=ids)
    return distributed_noise(n, plan.epsilon, plan.sensitivity, ring=ring,
                             min_honest=plan.min_honest, rng=plan.source,
                             transcript=transcript, party_ids=ids)


# ----------------------------------------------------------------------------------------
# Per-party steps: each party computes on its own record, shares and received rows
# ----------------------------------------------------------------------------------------


class _OpeningNeededError(Exception):
    """A member's circuit reached an opening it has not received yet (what it opens)."""

    def __init__(self, items: list[tuple[str, np.ndarray, int]]) -> None:
        super().__init__("opening pending")
        self.items = items


class _CircuitClosedError(Exception):
    """The run ended (or failed) while a member's circuit waited for an opening."""


class _MemberCircuit:
    """The circuit of the members ``members`` a batch holds on some edges (rows =
    members, columns = those edges), run once and suspended at each opening.

    The circuit code (:mod:`fedustat.protocols.mpc.kernel_circuits`) is straight-line
    and calls the opening hook of :func:`fedustat.secure.member_openings`; the members
    cannot compute past an opening before their co-members' rows arrive (the next relay
    round). A batch of one party (a networked silo) holds one member per edge: one
    circuit per member; a batch holding every member of its edges (the simulator's
    usual batch) runs them as one vectorized circuit, the lockstep evaluation, with the
    same openings sent as rows. Earlier versions replayed the circuit from the start each
    round with the openings so far, about ``C_f^R / 2`` evaluations in all; here the
    circuit runs in a worker thread that waits at the hook for the opened values, so
    every local step runs once. The thread only hands values over (the caller waits for
    it), so the result is the replay's, bit for bit. :meth:`close` ends a waiting thread.
    """

    def __init__(self, members: tuple[int, ...], evaluate: Any) -> None:
        self.members = members          # read by fedustat.secure.evaluating_members
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, args=(evaluate,), daemon=True,
                                        name=f"umpc-members-{members}")
        self._thread.start()

    def _main(self, evaluate: Any) -> None:
        try:
            with member_openings(self):
                out = evaluate()
        except BaseException as exc:    # handed to the caller's thread, raised there
            self._outbox.put(("error", exc))
            return
        self._outbox.put(("done", out))

    def __call__(self, op: str, arrays: list[np.ndarray], active: list[int | None],
                 ring: Ring | None) -> list[np.ndarray]:
        """The opening hook (worker thread): hand the held members' rows over (member
        axis first), wait for the opened values."""
        items = []
        held = list(self.members)
        for a, mask in zip(arrays, active, strict=True):
            # Every row held (the simulator's batch): the array itself, no copy.
            mine = np.asarray(a if len(held) == a.shape[0] else a[held], dtype=np.uint64)
            if op == "add":
                assert ring is not None
                items.append(("add", mine, ring.bits))
            else:
                items.append(("xor", np.bitwise_and(mine, np.uint64(mask)), int(mask)))
        self._outbox.put(("open", items))
        opened = self._inbox.get()
        if opened is None:
            raise _CircuitClosedError
        return opened

    def resume(self, opened: list[np.ndarray] | None = None) -> tuple[str, Any]:
        """Hand over the opened values (None at the start) and wait for the circuit's next
        opening (``("open", items)``) or its output share (``("done", share)``)."""
        if opened is not None:
            self._inbox.put(opened)
        kind, value = self._outbox.get()
        if kind == "error":
            raise value
        return kind, value

    def close(self) -> None:
        if self._thread.is_alive():
            self._inbox.put(None)


def _close_circuits(circuits: dict[int, _MemberCircuit]) -> None:
    for live in circuits.values():
        live.close()
    circuits.clear()


@functools.lru_cache(maxsize=256)
def _byte_tables(mask_byte: int) -> tuple[np.ndarray, np.ndarray]:
    """For one byte of a mask: every byte value's masked bits packed low (compress), and
    every packed value's bits put back at the mask's positions (expand)."""
    positions = [i for i in range(8) if mask_byte >> i & 1]
    compress = np.zeros(256, dtype=np.uint64)
    expand = np.zeros(1 << len(positions), dtype=np.uint64)
    for value in range(256):
        compress[value] = sum((value >> p & 1) << j for j, p in enumerate(positions))
    for value in range(expand.size):
        expand[value] = sum((value >> j & 1) << p for j, p in enumerate(positions))
    compress.flags.writeable = expand.flags.writeable = False
    return compress, expand


def _mask_bytes(mask: int) -> list[tuple[int, int, int]]:
    """(byte index, mask byte, bits of the mask below it) for every non-zero byte."""
    return [(b, mask >> 8 * b & 0xFF, popcount(mask & ((1 << 8 * b) - 1)))
            for b in range(8) if mask >> 8 * b & 0xFF]


def _compress(words: np.ndarray, mask: int) -> np.ndarray:
    """The active bits of ``words`` packed to the low bits (only they travel): one table
    lookup per non-zero byte of the mask, not one pass per bit."""
    words = np.asarray(words, dtype=np.uint64)
    out = np.zeros(words.shape, dtype=np.uint64)
    for b, mask_byte, below in _mask_bytes(mask):
        byte = ((words >> np.uint64(8 * b)) & np.uint64(0xFF)).astype(np.intp)
        out |= _byte_tables(mask_byte)[0][byte] << np.uint64(below)
    return out


def _expand(packed: np.ndarray, mask: int) -> np.ndarray:
    """The inverse of :func:`_compress`: packed bits back at the mask's positions."""
    packed = np.asarray(packed, dtype=np.uint64)
    out = np.zeros(packed.shape, dtype=np.uint64)
    for b, mask_byte, below in _mask_bytes(mask):
        width = popcount(mask_byte)
        part = ((packed >> np.uint64(below)) & np.uint64((1 << width) - 1)).astype(np.intp)
        out |= _byte_tables(mask_byte)[1][part] << np.uint64(8 * b)
    return out


def _lexsort(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """``np.lexsort(keys)`` (the last key primary) for non-negative integer keys: one
    stable argsort of the keys combined into one int64 when their ranges allow it (about
    three times faster on the relay's rows), else ``np.lexsort`` itself."""
    arrays = [np.asarray(key, dtype=np.int64) for key in keys]
    if not arrays[0].size:
        return np.zeros(0, dtype=np.intp)
    spans = [int(key.max()) + 1 for key in arrays]
    if min(int(key.min()) for key in arrays) < 0 or math.prod(spans) >= 1 << 62:
        return np.lexsort(arrays)
    combined = np.zeros(arrays[0].shape, dtype=np.int64)
    for key, span in zip(reversed(arrays), reversed(spans), strict=True):
        combined *= span
        combined += key
    return np.argsort(combined, kind="stable")


_DEAL_CHUNK = 1 << 15  # edges a dealing party deals at a time (memory only)
_CHECK_BLOCK = 1 << 14  # recipients whose noise rows are checked together (memory only)


def _broadcast_rows(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``values[i]`` once for every kept column of row ``i`` of ``keep`` (row-major)."""
    return np.broadcast_to(values[:, None], keep.shape)[keep]

_KEY_FIELDS = {"seed": 0, "cw_seed": 1, "cw_t": 1, "cw_value": 1, "cw_out": 0}


class _Leaf(NamedTuple):
    """One array of dealt material a member receives: ``kind`` ``"rows"`` (member axis
    first, then the edges) or ``"key"`` (an FSS key's array, key axis ``axis``)."""

    path: tuple[Any, ...]
    kind: str
    bits: int
    mask: int          # AND-triple words: active bits (0: send whole values)
    axis: int


def _material_leaves(obj: Any, path: tuple[Any, ...] = ()) -> list[_Leaf]:
    """The arrays of a :class:`CircuitMaterial` that its members receive, with their wire
    sizes (ring elements ``l`` bits, XOR-shared bits of an AND triple only its active
    bits, a daBit's bit 1, key seeds 64 bits per word, control bits 1)."""
    out: list[_Leaf] = []
    if obj is None:
        return out
    if isinstance(obj, list | tuple) and not isinstance(obj, FssKey):
        for i, item in enumerate(obj):
            out += _material_leaves(item, (*path, i))
        return out
    if isinstance(obj, FssKey):
        for name, axis in _KEY_FIELDS.items():
            value = getattr(obj, name)
            if value is None:
                continue
            bits = 1 if value.dtype == np.bool_ else (64 if "seed" in name else obj.ring.bits)
            out.append(_Leaf((*path, name), "key", bits, 0, axis))
        return out
    if not dataclasses.is_dataclass(obj):
        return out
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if f.name == "keys" and isinstance(value, tuple):
            # Member r receives key r only: the leaves are those of one key.
            out += _material_leaves(value[0], (*path, "keys"))
        elif isinstance(value, np.ndarray):
            if isinstance(obj, AndTriples):
                out.append(_Leaf((*path, f.name), "rows", popcount(obj.active), obj.active, 0))
            elif isinstance(obj, DaBits) and f.name == "bits":
                out.append(_Leaf((*path, f.name), "rows", 1, 0, 0))
            else:
                out.append(_Leaf((*path, f.name), "rows", obj.ring.bits, 0, 0))
        elif isinstance(value, list | tuple) or dataclasses.is_dataclass(value):
            out += _material_leaves(value, (*path, f.name))
    return out


def _get(obj: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        obj = obj[step] if isinstance(step, int) else getattr(obj, step)
    return obj


def _leaf_name(leaf: _Leaf) -> str:
    return "m_" + "_".join(str(p) for p in leaf.path)


def _package(material: CircuitMaterial, member: int, edges: int) -> dict[str, np.ndarray]:
    """Member ``member``'s part of the material of ``edges`` edges, one row per edge
    (shape ``(edges, ...)``: a view of the dealt arrays where it can be, so the caller
    copies each value once, into its message rows)."""
    out = {}
    for leaf in _material_leaves(material):
        *parent, name = leaf.path
        if leaf.kind == "rows":
            value = np.asarray(_get(material, leaf.path))[member]
            rows = value.reshape(edges, *value.shape[1:]) if value.ndim else value
        else:
            key = _get(material, tuple(parent))[member]
            per = int(np.prod(_get(material, tuple(parent[:-1])).shape[1:], dtype=np.int64))
            value = np.moveaxis(np.asarray(getattr(key, name)), leaf.axis, 0)
            # (edges * per, *rest) key-major -> (edges, per, *rest): still a view.
            rows = value.reshape(edges, per, *value.shape[1:])
        # Native dtypes (a key's control bits stay booleans: 1 byte, not 8); the wire
        # size is the leaf's declared bits either way.
        out[_leaf_name(leaf)] = _compress(
            rows.reshape(edges, int(np.prod(rows.shape[1:], dtype=np.int64))).astype(
                np.uint64, copy=False), leaf.mask) \
            if leaf.mask else rows
    return out


def _unpack(template: CircuitMaterial, parts: Mapping[int, _Rows],
            edges: int) -> CircuitMaterial:
    """The material of the members ``parts`` holds (member -> its received package) for
    ``edges`` edges: ``template`` (dealt for one edge from public randomness, for its
    structure) resized, with those members' rows and keys the received ones and every
    other member's parts zero: the batch holds only what its dealers sent."""
    held = sorted(parts)
    indexes: dict[int, np.ndarray] = {}   # member -> its keys' rows among those received
    for leaf in _material_leaves(template):
        *parent, name = leaf.path
        holder = _get(template, tuple(parent))
        if leaf.kind == "rows":
            one = np.asarray(getattr(holder, name))          # (k, 1, ...)
            new = np.zeros((one.shape[0], edges, *one.shape[2:]), dtype=one.dtype)
            for member in held:
                new[member] = _received(parts[member], leaf).reshape(
                    edges, *one.shape[2:]).astype(one.dtype, copy=False)
            object.__setattr__(holder, name, new)
        else:
            keys = list(holder)
            for b, key in enumerate(keys):
                one = np.asarray(getattr(key, name))
                shape = list(one.shape)
                shape[leaf.axis] *= edges
                if b in parts:
                    # The key's level-major layout as a view of every received row
                    # (edge-major) and, in ``index``, which of them are this member's
                    # keys: evaluation gathers one level of a chunk of keys at a time,
                    # so the batch never holds a second copy of its keys.
                    per = np.moveaxis(one, leaf.axis, 0).shape
                    whole = np.asarray(parts[b].field(_leaf_name(leaf)))
                    value = np.moveaxis(whole.reshape((whole.shape[0] * per[0], *per[1:]))
                                        .astype(one.dtype, copy=False), 0, leaf.axis)
                    indexes[b] = (parts[b].rows[:, None] * per[0]
                                  + np.arange(per[0])).ravel()
                else:
                    # A key this batch does not hold: never evaluated (evaluating_members),
                    # zeros the allocator need not touch.
                    value = np.zeros(shape, dtype=one.dtype)
                keys[b] = dataclasses.replace(key, **{name: value}, index=indexes.get(b))
            object.__setattr__(_get(template, tuple(parent[:-1])) if len(parent) > 1
                               else template, parent[-1], tuple(keys))
    for part in _materials(template):
        # Every material is dealt edge-major: its secret shape starts with the edges.
        object.__setattr__(part, "shape", (edges, *tuple(part.shape)[1:]))
    return template


class _Rows(Mapping[str, np.ndarray]):
    """A member's package: the rows ``rows`` of each received field, taken when asked
    for (one field at a time, so the batch never holds a second copy of all of them)."""

    def __init__(self, fields: Mapping[str, np.ndarray], rows: np.ndarray) -> None:
        self._fields, self._rows = fields, rows

    def __getitem__(self, name: str) -> np.ndarray:
        return self._fields[name][self._rows]

    @property
    def rows(self) -> np.ndarray:
        return self._rows

    def field(self, name: str) -> np.ndarray:
        """Every received row of field ``name`` (no copy)."""
        return self._fields[name]

    def __iter__(self) -> Any:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


def _received(package: Mapping[str, np.ndarray], leaf: _Leaf) -> np.ndarray:
    rows = np.asarray(package[_leaf_name(leaf)])
    return _expand(rows.astype(np.uint64, copy=False), leaf.mask) if leaf.mask else rows


def _materials(obj: Any) -> list[Material]:
    """Every :class:`Material` inside a circuit's material (to mark it unused again before
    a replay: the replay applies the same masks to the same inputs, which reveals nothing
    new)."""
    found: list[Material] = []
    if isinstance(obj, Material):
        found.append(obj)
    if isinstance(obj, list | tuple):
        for item in obj:
            found += _materials(item)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type | FssKey):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if isinstance(value, list | tuple | Material) or dataclasses.is_dataclass(value):
                found += _materials(value)
    return found


@dataclass
class _Plan:
    """What every party derives from the aggregator's broadcast (public only)."""

    n: int
    fp: FixedPoint
    edges: np.ndarray            # (m, k) active edges, member j in column j
    order: np.ndarray | None     # (m, k) member holding class q (labelled kernels)
    dealers: np.ndarray          # (m,) the party dealing each edge's material
    contributors: np.ndarray     # noise contributors (sorted), empty without noise
    sensitivity: int
    active: int = 0              # active edges in the whole design (edges above: the batch's)


@dataclass
class _CoinFacts:
    """What follows from the public coin alone (no label): the design, every design
    edge's dealing party, the noise contributors and, with public labels, whose labels
    each party receives (CSR: ``label_of[label_ptr[i]:label_ptr[i + 1]]``, sorted)."""

    design: Design
    dealers: np.ndarray
    contributors: np.ndarray
    label_ptr: np.ndarray | None = None
    label_of: np.ndarray | None = None


def _sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` of integers by a sort (NumPy 2.4's hash-based unique took 3.6 s on
    the 8 * 10^5 label pairs of 10^5 parties, the sort 0.3 s)."""
    out = np.sort(values)
    return out[np.r_[True, out[1:] != out[:-1]]] if out.size else out


def _label_sets(tuples: np.ndarray, dealers: np.ndarray, n: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Whose public label each party needs: the co-members of its edges (to know which of
    them are active and who holds which class) and the members of the edges it deals (to
    know whether to deal them). CSR over the receiving party, sorted, without itself."""
    m, k = tuples.shape
    recv = [tuples[:, a] for a in range(k) for b in range(k) if a != b]
    about = [tuples[:, b] for a in range(k) for b in range(k) if a != b]
    recv += [dealers] * k
    about += [tuples[:, b] for b in range(k)]
    pair = _sorted_unique(np.concatenate(recv).astype(np.int64) * n
                          + np.concatenate(about).astype(np.int64)) if m \
        else np.zeros(0, np.int64)
    receiver, of = np.divmod(pair, n)
    keep = receiver != of
    receiver, of = receiver[keep], of[keep]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(receiver, minlength=n))])
    return ptr.astype(np.int64), of.astype(np.int64)


def _slot_groups(slot_edge: np.ndarray, slot_member: np.ndarray, k: int
                 ) -> list[tuple[tuple[int, ...], np.ndarray]]:
    """The batch's edges grouped by the members it holds in them; each group runs as one
    vectorized circuit (rows = those members, columns = its edges): ``(members, slots)``
    with ``slots[i, c]`` the slot of member ``members[i]`` on the group's edge ``c``.
    Slots are in (edge, member) order, so an edge's slots are consecutive. A batch with
    no slot runs one empty circuit: it takes the same relay rounds as every batch."""
    if not slot_edge.size:
        return [((), np.zeros((0, 0), dtype=np.int64))]
    starts = np.flatnonzero(np.r_[True, slot_edge[1:] != slot_edge[:-1]])
    held = np.bitwise_or.reduceat(np.left_shift(1, slot_member.astype(np.int64)), starts)
    counts = np.diff(np.r_[starts, slot_edge.size])
    out = []
    for pattern in np.unique(held):
        members = tuple(r for r in range(k) if int(pattern) >> r & 1)
        first = starts[held == pattern]
        slots = first[None, :] + np.arange(len(members))[:, None]
        assert np.all(counts[held == pattern] == len(members))
        out.append((members, slots.astype(np.int64)))
    return out


def _lead(slots: np.ndarray) -> np.ndarray:
    """A group's first held member's slot on each of its edges (none: no edge)."""
    return slots[0] if slots.shape[0] else np.zeros(slots.shape[1], dtype=np.int64)


@dataclass
class _Run:
    """A batch's part of the secure phases: its slots (party, edge, member) in edge order."""

    plan: _Plan
    parties: np.ndarray
    slot_edge: np.ndarray
    slot_member: np.ndarray
    slot_owner: np.ndarray
    own: np.ndarray               # (slots, d) the owner's encoded secret columns
    coins: tuple[Any, Any, Any]   # share, dealer and noise randomness
    # The batch's circuits: for each set of members it holds on some edges, those
    # members and their slots (members x edges), see _slot_groups.
    groups: list[tuple[tuple[int, ...], np.ndarray]] = dataclasses.field(default_factory=list)
    inputs: np.ndarray | None = None      # (slots, k, d): shares of each member's record
    material: dict[int, CircuitMaterial] = dataclasses.field(default_factory=dict)
    reusable: dict[int, list[Material]] = dataclasses.field(default_factory=dict)
    history: dict[int, list[list[np.ndarray]]] = dataclasses.field(default_factory=dict)
    circuits: dict[int, _MemberCircuit] = dataclasses.field(default_factory=dict)
    sent: list[tuple[str, np.ndarray, int]] = dataclasses.field(default_factory=list)
    # The rows to co-members (sharing, every opening) and those expected from them: the
    # same in every round, computed once (_co_member_routes).
    routes: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    noise: np.ndarray | None = None       # each own party's share of the noise
    output: np.ndarray | None = None      # (slots,) shares of D f(x_e)
    stage: str = "deal"

    def __getstate__(self) -> dict[str, Any]:
        # A copy or a pickle (a retried task, a state moving between workers) leaves the
        # live circuits behind: their threads stay with the original, and the copy's
        # members replay their openings from ``history`` when they next run (_evaluate).
        return {**self.__dict__, "circuits": {}}


# ----------------------------------------------------------------------------------------
# The protocol
# ----------------------------------------------------------------------------------------


ORDER_KERNELS = ("auc", "mann_whitney", "vus", "kendall_tau_a", "duplicate_pair_ratio",
                 "renyi2_entropy", "rand_index")


def _declare_encoding(kernel: Kernel, circuit: KernelCircuit, fixed_point: FixedPoint | None,
                      bounds: Any, precision: float | None) -> ColumnEncoding | None:
    """The bounds encoding (:mod:`fedustat.protocols.mpc.encoding`), or None for an explicit
    ``fixed_point`` or, with nothing declared, the legacy 002 Sec. 6.1 format."""
    if fixed_point is not None:
        if bounds is not None or precision is not None:
            raise ValueError("pass either fixed_point (an explicit ring format) or "
                             "bounds/precision (the ring is then sized for you), not both")
        return None
    bounds = bounds_by_column(bounds, [kernel.columns[c] for c in circuit.secret_columns])
    declared = bounds if bounds is not None else declared_bounds(kernel)
    columns = len(circuit.secret_columns)
    if declared is None:
        if precision is not None:
            raise ValueError("precision needs bounds=(lo, hi): the ring is sized from the "
                             "declared range and the precision")
        return None
    return ColumnEncoding.declare(declared, precision, columns)


@dataclass
class _PartyState:
    parties: np.ndarray
    records: np.ndarray
    encoded: np.ndarray
    public: np.ndarray | None
    stage: int = 0
    run: _Run | None = None
    # Set when some parties fell silent in round 0 (the aggregator's "present" mask):
    # from then on ``parties`` are this batch's positions among the parties present.
    seating: _Seating | None = None


@dataclass
class _ServerState:
    n_parties: int
    stage: int = 0
    coin: np.ndarray | None = None
    design: Design | _DesignFacts | None = None   # _DesignFacts: the engine's check-in
    public: np.ndarray | None = None
    seating: _Seating | None = None
    # Set instead of ``public`` when the distributed engine routed the check-in (the
    # labels never reach the aggregator): the class sizes, all the release needs.
    class_counts: np.ndarray | None = None


@dataclass(frozen=True)
class _DesignFacts:
    """A design's public numbers without its tuples: what the aggregator's release reads
    (size, largest degree, name) when the engine routed the check-in, with the number of
    active edges and the width of the label rows counted on the workers."""

    name: str
    size: int
    max_degree: int
    active: int
    label_row_width: int


@dataclass(frozen=True)
class _Seating:
    """The parties present when some fell silent in round 0: the run goes on over them
    renumbered 0..n'-1 in id order (positions), the services after them (n' + j), while
    messages carry the run's real ids (the members' own; services after the ``joined``
    parties of the start). Every step computes on positions; :meth:`real` and
    :meth:`position` translate at the message boundary, preserving order, so the
    numbers are those of a run over the present parties alone."""

    members: np.ndarray
    joined: int

    @classmethod
    def from_mask(cls, present: Any) -> _Seating:
        mask = np.asarray(present).astype(bool)
        return cls(np.flatnonzero(mask).astype(np.int64), int(mask.size))

    def mask(self) -> np.ndarray:
        out = np.zeros(self.joined, dtype=np.uint8)
        out[self.members] = 1
        return out

    def real(self, ids: Any) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        n = self.members.size
        return np.where(ids < n, self.members[np.minimum(ids, n - 1)], ids - n + self.joined)

    def position(self, ids: Any) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        n = self.members.size
        at = np.minimum(np.searchsorted(self.members, ids), n - 1)
        party = ids < self.joined
        if np.any(party & (self.members[at] != ids)):
            raise ValueError("U-MPC: a message names a party that is not in the run")
        return np.where(party, at, ids - self.joined + n)

    def outgoing(self, message: Message) -> Message:
        """``message`` (written on positions) with the real ids of its rows."""
        fields = dict(message.fields)
        if PEER_TO in fields:
            fields[PEER_TO] = self.real(fields[PEER_TO])
        parties = None if message.parties is None else self.real(message.parties)
        return dataclasses.replace(message, fields=fields, parties=parties)

    def incoming(self, message: Message) -> Message:
        """``message`` (real ids) on positions."""
        fields = dict(message.fields)
        if PEER_FROM in fields:
            fields[PEER_FROM] = self.position(fields[PEER_FROM])
        parties = None if message.parties is None else self.position(message.parties)
        return dataclasses.replace(message, fields=fields, parties=parties)


class UMPC(Protocol):
    """002 Protocol 3.1 (U-MPC): secret sharing on the edges of a public hypergraph, secure
    kernel circuits, distributed discrete Laplace noise, one ring element per party.

    Parameters
    ----------
    kernel:
        A built-in kernel with a secure circuit (see
        :data:`fedustat.protocols.mpc.kernel_circuits.SUPPORTED_KERNELS`).
    epsilon:
        Privacy budget (> 0); ``math.inf`` runs without the noise phase (exact
        incomplete U-statistic, for tests).
    design:
        ``"balanced"`` (BalancedSamp, 002 App. F), ``"uniform"`` (without replacement),
        ``"bernoulli"`` (each k-subset with probability ``edges / C(n, k)``), or a fixed
        :class:`~fedustat.stats.designs.Design`. String designs are drawn from a public
        coin the aggregator broadcasts.
    edges:
        Number of edges ``|E|`` (expected number for Bernoulli); default ``2 n`` as in
        002's experiments. Not allowed with a fixed Design.
    threat_model:
        ``"hf"`` (M_HF: a random subgroup Z draws the noise; communication linear in n)
        or ``"dis"`` (M_Dis: all parties draw noise, Protocol B.1; n^2 shares, refused
        above :data:`MAX_DIS_PARTIES`).
    f_honest, fail_prob:
        M_HF parameters: the fraction of honest parties ``f_H`` and the probability that
        Z holds no honest party; ``|Z| = ceil(log(fail_prob) / log(1 - f_H))``.
    min_honest:
        Honest noise contributors the guarantee must survive with: ``1`` (default) makes
        the release DP against the aggregator colluding with all but one contributor —
        the assumption of both threat models — at ``|contributors|`` times the noise
        variance; ``None`` is 002's ``r = 1/|contributors|`` (central-DP accuracy, DP
        against the aggregator alone). See :func:`collusion_guarantee`.
    comparison:
        ``"fss"`` (two-party function secret sharing, one round per comparison),
        ``"circuit"`` (boolean circuits, any group size) or ``"auto"`` (FSS for pairs,
        circuits for groups of three).
    fixed_point:
        An explicit ring format (no offset, fixed ring); excludes ``bounds``/``precision``.
    bounds:
        Public ``(lo, hi)`` of the secret column(s) (one pair, or one per column): values
        are encoded as ``round((x - lo) / h)`` and the ring is sized from the bounds, the
        resolution, ``|E|`` and the noise (:mod:`fedustat.protocols.mpc.encoding`).
        Default: the kernel's declared bounds (Gini, variance); without any, the 002
        Sec. 6.1 format :data:`DEFAULT_FIXED_POINT` (with a warning for order kernels).
    precision:
        The smallest difference between values that matters (default
        ``(hi - lo) / 2^20``); ``h`` is the largest power of two ``<= precision``. Values
        closer than ``h`` encode equally: ties for AUC, Kendall, duplicates.
    noise:
        ``None`` draws shares, the dealer's material and the Pólya noise from the
        simulation's seeded generators; a :class:`~fedustat.privacy.noise.DeploymentNoise`
        draws all of them from the operating system's CSPRNG (fixed-work samplers for the noise).
    dealer:
        Who deals each edge's material. ``"party"`` (default): a party outside the edge,
        drawn from the public coin. ``"service"``: the ``dealer`` service role
        (:meth:`service_roles`; its own process in a networked run) deals every edge from
        its own coins, so no data party holds another group's masks. A seed gives the same
        release either way (the coin's stream is drawn alike, the parties' streams do not
        change and masks cancel); its rows count as peer traffic the members receive.
    """

    name = "umpc"
    released_fields = (*Protocol.released_fields, *Protocol.statistic_map_fields,
                       "diagnostics.u_statistic", "diagnostics.lemma_c1_u",
                       "diagnostics.design_variance_bound")
    # BalancedSamp draws the edges from a public coin; which edges are active (with public
    # labels, the edges with both classes) and every party's traffic follow from them.
    public_coin_fields = ("diagnostics.public_coin", "diagnostics.active_edges",
                          "diagnostics.expected_offline_bits", "diagnostics.lemma_c3_bits",
                          "diagnostics.expected_download_bits", "cost.*")

    def __init__(self, kernel: Kernel, epsilon: float, *, design: str | Design = "balanced",
                 edges: int | None = None, threat_model: str = "hf", f_honest: float = 0.5,
                 fail_prob: float = 2.0**-40, min_honest: int | None = 1,
                 comparison: str = "auto", fixed_point: FixedPoint | None = None,
                 noise: NoiseSource | None = None, bounds: Any = None,
                 precision: float | None = None, dealer: str = "party") -> None:
        if dealer not in DEALERS:
            raise ValueError(f"dealer must be one of {DEALERS}, got {dealer!r}")
        self.dealer = dealer
        self.circuit = circuit_for(kernel)
        self.kernel = kernel
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        if isinstance(design, Design):
            if design.k != kernel.degree:
                raise ValueError(f"design has tuples of size {design.k} but the kernel "
                                 f"{kernel.name!r} has degree {kernel.degree}")
            if edges is not None:
                raise ValueError("edges cannot be combined with a fixed Design (its size is "
                                 "the number of edges)")
        elif design not in DESIGNS:
            raise ValueError(f"design must be one of {DESIGNS} or a Design, got {design!r}")
        self.design = design
        self.edges = None if edges is None else check_positive_int(edges, "edges")
        if threat_model not in THREAT_MODELS:
            raise ValueError(f"threat_model must be 'hf' (M_HF: a random subgroup draws the "
                             f"noise) or 'dis' (M_Dis: every party draws noise), got "
                             f"{threat_model!r}")
        self.threat_model = threat_model
        self.f_honest = check_probability(f_honest, "f_honest", open_left=True)
        self.fail_prob = check_probability(fail_prob, "fail_prob", open_left=True,
                                           open_right=True)
        self.min_honest = None if min_honest is None else check_positive_int(min_honest,
                                                                             "min_honest")
        if comparison not in COMPARISONS:
            raise ValueError(f"comparison must be one of {COMPARISONS}, got {comparison!r}")
        if comparison == "fss" and kernel.degree > 2:
            raise ValueError(f"comparison='fss' is a two-party construction; kernel "
                             f"{kernel.name!r} has groups of {kernel.degree}: use "
                             "comparison='circuit' (or 'auto')")
        self.method = ("fss" if kernel.degree == 2 else "circuit") if comparison == "auto" \
            else comparison
        self.encoding = _declare_encoding(kernel, self.circuit, fixed_point, bounds, precision)
        self._undeclared = fixed_point is None and self.encoding is None
        if self.encoding is not None:
            # The nominal (widest) format; each run uses the ring sized for its |E| and noise.
            fp = self.encoding.fixed_point(64)
        else:
            fp = DEFAULT_FIXED_POINT if fixed_point is None else fixed_point
        if not isinstance(fp, FixedPoint):
            raise TypeError(f"fixed_point must be a FixedPoint, got {type(fp).__name__}")
        self.fixed_point = fp
        self.full_range = self.circuit.full_range(fp)
        self._check_kernel_fits()
        if noise is not None and not isinstance(noise, NoiseSource):
            raise TypeError(f"noise must be None or a NoiseSource (e.g. DeploymentNoise()), "
                            f"got {type(noise).__name__}")
        self.noise = noise

    # ------------------------------------------------------------------ public numbers
    def _check_kernel_fits(self) -> None:
        """Per-edge values must fit the ring (public quantities only)."""
        fp = self.fixed_point
        if self.circuit.name in ("gini_mean_difference", "variance"):
            width = self.kernel.output_range[1] if self.circuit.name == "gini_mean_difference" \
                else math.sqrt(2.0 * self.kernel.output_range[1])
            # x0 - x1 must not wrap, and for the variance its square must fit.
            if math.ceil(width * fp.scale) >= 1 << (fp.bits - 1):
                raise InputRangeError(f"differences up to {width:g} do not fit the fixed-point "
                                    f"range of l={fp.bits} bits with c={fp.frac_bits}")
            if self.circuit.name == "variance":
                fp.check_product(width, width)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        if math.isinf(self.epsilon):
            return PrivacyGuarantee.none()
        return PrivacyGuarantee(self.epsilon, 0.0, PrivacyModel.CENTRAL, self.kernel.adjacency,
                                assumptions=tuple(self.assumptions()))

    def assumptions(self) -> list[Any]:
        """What the guarantee rests on (002 Sec. 3 and 4): semi-honest parties, the
        offline dealer, honest noise contributors, and AES for FSS comparisons."""
        out = [semi_honest("parties and the aggregator"),
               trusted_dealer("every group's (edge's) Beaver triples and comparison material "
                              "(FSS keys, or edaBits, AND triples and daBits) as the dealer "
                              "service (a role of its own, apart from the parties and the "
                              "aggregator); it must collude with no party nor the aggregator")
               if self.dealer == "service" else
               trusted_dealer("for each group (edge) a party outside it, drawn from the "
                              "public coin, that deals the group's Beaver triples and "
                              "comparison material (FSS keys, or edaBits, AND triples and "
                              "daBits); it must collude with no member of the group nor the "
                              "aggregator"),
               Assumption(Trust.SEMI_HONEST, "the public coin (design, dealers, the M_HF "
                                             "subgroup Z) is unbiased: here the aggregator "
                                             "draws it; 002 Sec. 3 generates it jointly")]
        if self.threat_model == "hf":
            who = (f"a random subgroup Z (f_H={self.f_honest:g}, failure probability "
                   f"{self.fail_prob:.3g})")
        else:
            who = "all parties (M_Dis)"
        h = "all" if self.min_honest is None else str(self.min_honest)
        out.append(Assumption(Trust.HONEST_NOISE, f"{h} of the noise contributors, {who}, "
                                                  "keep their noise secret"))
        if self.method == "fss":
            out.append(computational("the AES-128 based PRG of the FSS comparison keys"))
        return out

    def scale(self) -> int:
        """``D``: the circuits output ``D f(x_e)`` in ring units."""
        return self.circuit.scale(self.fixed_point)

    def run_fixed_point(self, n_parties: int, design: Design,
                        public: np.ndarray | None) -> FixedPoint:
        """The ring format of one run: the explicit ``fixed_point``, or the encoding's
        ``c`` in the smallest ring that holds the codes, ``|E|`` kernel outputs and the
        noise (:func:`~fedustat.protocols.mpc.encoding.ring_bits_for`; public values
        only, so every party and the aggregator derive the same ring)."""
        return self._ring_format(n_parties, design, self.active_edges(design, public))

    def _ring_format(self, n_parties: int, design: Design, active: int) -> FixedPoint:
        """:meth:`run_fixed_point` from the number of active edges (a party knows the
        count, not every label). Memoized per process: the noise tail bound behind the ring
        size is a numerical search, and every batch of a simulation asks the same."""
        if self.encoding is None:
            return self.fixed_point
        key = (n_parties, design.size, design.max_degree, active)
        cache = self.__dict__.setdefault("_ring_cache", {})
        if key not in cache:
            if len(cache) > 16:
                cache.clear()
            cache[key] = self._size_ring(n_parties, design, active)
        return cache[key]

    def _size_ring(self, n_parties: int, design: Design, active: int) -> FixedPoint:
        assert self.encoding is not None
        lo, hi = self.kernel.output_range
        most = Fraction(max(abs(lo), abs(hi))) * self.scale() * active
        noise = None
        if not math.isinf(self.epsilon):
            c = self.contributors(n_parties)
            h = c if self.min_honest is None else min(self.min_honest, c)
            noise = (math.exp(-self.epsilon / self.integer_sensitivity(design)), c / h)
        bits = ring_bits_for(max_code=self.encoding.max_code,
                             product=self.circuit.name == "variance",
                             output_total=math.ceil(most), noise=noise,
                             what=f"umpc ({self.kernel.name})")
        return self.encoding.fixed_point(bits)

    def integer_sensitivity(self, design: Design) -> int:
        """``ceil(delta_G^max * Delta f * D)``: the noise sensitivity of the summed ring
        values (002 App. C.2.3; rounding up keeps the guarantee)."""
        exact = Fraction(self.kernel.sensitivity) * design.max_degree * self.scale()
        return max(1, math.ceil(exact))

    def contributors(self, n_parties: int) -> int:
        return noise_contributors(self.threat_model, n_parties, self.f_honest, self.fail_prob)

    def noise_variance(self, n_parties: int, design: Design) -> float:
        """Variance of the noise on the released U: ``c 2 r t / (1 - t)^2 / (D |E|)^2``
        with ``c`` contributors, ``r = 1/min_honest`` (``1/c`` for None) and
        ``t = exp(-epsilon / s)`` (Pólya variance ``r t / (1 - t)^2``, 002 App. B)."""
        if math.isinf(self.epsilon):
            return 0.0
        c = self.contributors(n_parties)
        h = c if self.min_honest is None else self.min_honest
        ratio = -self.epsilon / self.integer_sensitivity(design)
        units = c * 2.0 * (1.0 / h) * math.exp(ratio) / math.expm1(ratio) ** 2
        return units / float(self.scale() * design.size) ** 2

    def active_edges(self, design: Design, public: np.ndarray | None) -> int:
        if isinstance(design, _DesignFacts):  # counted on the engine's workers
            return design.active
        mask = None if public is None else self.circuit.active(public[design.tuples])
        return design.size if mask is None else int(np.count_nonzero(mask))

    def expected_communication(self, n_parties: int, design: Design,
                               public: np.ndarray | None = None,
                               coin: np.ndarray | None = None) -> dict[str, int]:
        """Lemma C.3's online count (:func:`lemma_c3`), the dealt material's bits (002's
        offline phase, here relayed from the dealing parties), the relay rounds of one run
        and, given the public ``coin``, ``download_bits``: what the aggregator sends in
        round 1 (n and the 128-bit coin to every party; with public labels also the number
        of active edges and each party's row of labels, :meth:`label_row_width` of them)."""
        ring_bits = self.run_fixed_point(n_parties, design, public).bits
        cost = self.circuit.cost(ring_bits=ring_bits, method=self.method,  # type: ignore[arg-type]
                                 full_range=self.full_range)
        m = self.active_edges(design, public)
        k = self.circuit.degree
        noisy = not math.isinf(self.epsilon)
        c = self.contributors(n_parties) if noisy else 0
        count = lemma_c3(n_parties=n_parties, n_edges=m, degree=k, ring_bits=ring_bits,
                         kernel_bits=k * cost.online_bits, kernel_rounds=cost.rounds,
                         noise_bits=c * (n_parties - 1) * ring_bits,
                         noise_rounds=1 if noisy else 0,
                         secret_columns=len(self.circuit.secret_columns))
        # As run: dealing, sharing and the circuit's rounds, then the noise shares, each a
        # relay round (one kind of row per round), between the broadcast and the upload.
        relay = (2 + cost.rounds if m and k > 1 else 0) + (1 if noisy else 0)
        out = {"online_bits": count.bits, "rounds": count.rounds,
               "offline_bits": m * k * cost.offline_bits, "relay_rounds": relay}
        if coin is not None:
            per_party = 64 + 128                 # n and the coin
            if self.circuit.public_column is not None:
                width = n_parties if self.dealer == "service" \
                    else design.label_row_width if isinstance(design, _DesignFacts) \
                    else self.label_row_width(n_parties, coin)
                per_party += 64 + width * self.circuit.public_bits()
            out["download_bits"] = n_parties * per_party
        return out

    def label_row_width(self, n_parties: int, coin: np.ndarray) -> int:
        """Labels in each party's round-1 row (kernels with public labels): the longest
        list of :func:`_label_sets` — co-members of a party's edges and members of the
        edges it deals — at most ``k (k - 1) deg_max + k (edges dealt)_max``, so the
        download is O(n k (edges per party)) bits, not n^2 (every label to everybody)."""
        facts = self._coin_facts(n_parties, coin)
        if facts.label_ptr is None:
            return 0
        return int(np.diff(facts.label_ptr).max()) if n_parties else 0

    def draw_design(self, n_parties: int, coin: np.ndarray | None) -> Design:
        """The public design: the fixed one, or drawn from the public coin."""
        k = self.kernel.degree
        if isinstance(self.design, Design):
            if self.design.n_parties != n_parties:
                raise ValueError(f"design is for {self.design.n_parties} parties, data has "
                                 f"{n_parties}")
            return self.design
        if k > n_parties:
            raise ValueError(f"data has {n_parties} parties; the kernel needs groups of {k}")
        m = 2 * n_parties if self.edges is None else self.edges
        total = math.comb(n_parties, k)
        if m > total:
            raise ValueError(f"edges={m} exceeds the C({n_parties}, {k}) = {total} distinct "
                             f"groups of {k} parties; choose edges <= {total}")
        assert coin is not None
        gen = np.random.default_rng(np.random.SeedSequence([int(w) for w in coin]))
        if self.design == "balanced":
            return balanced_sample(m, k, n_parties, gen)
        if self.design == "uniform":
            return uniform_sample(m, k, n_parties, gen)
        return bernoulli_sample(m / total, k, n_parties, gen)

    # ------------------------------------------------------------------ steps
    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _PartyState:
        records = np.asarray(data, dtype=np.float64)
        if records.ndim != 2 or records.shape[1] != self.kernel.n_columns:
            raise RecordCheckError(f"data must have {self.kernel.n_columns} column(s) "
                                   f"{self.kernel.columns} for kernel {self.kernel.name!r}, "
                                   f"got shape {records.shape}")
        cols = list(self.circuit.secret_columns)
        names = ", ".join(self.kernel.columns[c] for c in cols)
        # Each party encodes its own record; out-of-range values raise here.
        if self.encoding is None and self._undeclared and self.circuit.name in ORDER_KERNELS:
            warnings.warn(
                f"{self.kernel.name}: no bounds declared, so the secret values are encoded in "
                f"the fixed-point format of 002 Sec. 6.1 (range [-2^24, 2^24), resolution "
                f"2^-{DEFAULT_FIXED_POINT.frac_bits} = {DEFAULT_FIXED_POINT.resolution:.3g}); "
                "values closer than that become ties. Declare bounds=(lo, hi) and "
                "precision= (the smallest difference that matters)", UserWarning,
                stacklevel=2)
        with RecordCheck(f"values outside the declared bounds of column(s) {names}"):
            if self.encoding is None:
                encoded = self.fixed_point.encode(records[:, cols],
                                                  name=f"data column(s) {names}")
            else:
                encoded = self.encoding.encode(records[:, cols], self.fixed_point,
                                               name=f"data column(s) {names}")
        public = self.circuit.public_values(records)
        return _PartyState(np.asarray(parties, dtype=np.int64), records, encoded, public)

    def init_server(self, n_parties: int) -> _ServerState:
        return _ServerState(check_positive_int(n_parties, "n_parties"))

    def party_step(self, state: _PartyState, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_PartyState, Message]:
        if state.stage == 0:
            state.stage = 1
            if state.public is None:
                # A check-in; the aggregator needs n before it draws the public coin.
                fields = {"ready": np.ones(state.parties.size, dtype=np.uint8)}
                bits = {"ready": 1}
            else:
                fields = {"public": state.public}
                bits = {"public": self.circuit.public_bits()}
            return state, Message(Role.PARTY, Role.SERVER, fields, bits, state.parties)
        if inbox is None:
            raise ValueError("U-MPC: after joining, every step of a party answers a message "
                             "(the public coin or its peers' rows)")
        if state.stage == 1 and "present" in inbox.fields:
            # Some parties fell silent in round 0: the run is over those present.
            present = np.asarray(inbox.fields["present"])
            state.seating = _Seating.from_mask(present[0] if present.ndim == 2 else present)
            state.parties = state.seating.position(state.parties)
        if state.seating is not None:
            inbox = state.seating.incoming(inbox)
        if state.stage == 1:
            state.run = self._start(state, inbox, rng)
            state.stage = 2
        elif state.stage != 2 or state.run is None:
            raise RuntimeError("U-MPC parties have no step after the aggregation")
        else:
            self._receive(state.run, inbox)
        msg = self._next(state, state.run)
        if msg.receiver is Role.SERVER:
            state.stage = 3
        return state, msg if state.seating is None else state.seating.outgoing(msg)

    def copy_party_state(self, state: _PartyState) -> _PartyState:
        """A copy the next step may change, sharing the arrays the steps never write in
        place (records, plan, slots, dealt material, openings received): only the
        containers the steps change, the two arrays they add into (``inputs``,
        ``noise``) and the seeded streams are copied, so a copy costs a few bytes per
        party, not a second set of material. The live circuits move to the copy (they
        are stepped from there); the original keeps its history and replays it if it is
        stepped again."""
        copied = dataclasses.replace(state)
        run = state.run
        if run is None:
            return copied
        fresh = dataclasses.replace(
            run, material=dict(run.material),
            reusable={g: list(parts) for g, parts in run.reusable.items()},
            history={g: list(opened) for g, opened in run.history.items()},
            circuits=dict(run.circuits), sent=list(run.sent), routes=dict(run.routes),
            inputs=None if run.inputs is None else run.inputs.copy(),
            noise=None if run.noise is None else run.noise.copy(),
            # The seeded streams advance as they are drawn from (a few hundred bytes).
            coins=copy.deepcopy(run.coins))
        run.circuits.clear()
        weakref.finalize(fresh, _close_circuits, fresh.circuits)
        copied.run = fresh
        return copied

    # -- the secure phases, one party's side (module docstring, "Transport") ------------
    def _coin_facts(self, n: int, coin: np.ndarray) -> _CoinFacts:
        """The public facts of the coin (:class:`_CoinFacts`), memoized per process: every
        batch of a simulation (and a silo's parties) derives the same from the same coin."""
        key = (n, tuple(int(w) for w in np.asarray(coin).ravel()))
        cached = self.__dict__.get("_coin_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        design = self.draw_design(n, coin)
        k = self.kernel.degree
        # A second stream of the public coin: each design edge's dealer, uniform among the
        # n - k parties outside it, and the M_HF subgroup Z (002 Sec. 4: a public random
        # choice). Dealers are drawn for every design edge (not only the active ones) so a
        # party knows the edges it deals from the coin, without every label.
        gen = np.random.default_rng(np.random.SeedSequence([*(int(w) for w in coin), 1]))
        m = design.size
        if m and n <= k and self.dealer == "party":
            raise ValueError(f"U-MPC: a party outside each group of {k} deals its material; "
                             f"with n={n} parties there is none (need n > {k}); or use "
                             "dealer='service'")
        dealers = gen.integers(0, max(n - k, 1), size=m)
        for col in np.sort(design.tuples, axis=1).T:   # skip the members: the u-th non-member
            dealers = dealers + (dealers >= col)
        if self.dealer == "service":
            # Drawn above all the same, so Z keeps its stream: the service deals every edge.
            dealers = np.full(m, service_id(n, self.service_roles(), DEALER_ROLE))
        contributors = np.zeros(0, dtype=np.int64)
        if not math.isinf(self.epsilon):
            if self.threat_model == "dis" and n > MAX_DIS_PARTIES:
                raise ValueError(f"threat_model='dis' runs Protocol B.1 among all n={n} "
                                 f"parties (n^2 shares); it is refused above "
                                 f"{MAX_DIS_PARTIES} parties: use threat_model='hf'")
            c = self.contributors(n)
            contributors = np.arange(n) if c == n else np.sort(gen.choice(n, c, replace=False))
        facts = _CoinFacts(design, dealers.astype(np.int64), contributors.astype(np.int64))
        if self.circuit.public_column is not None and self.dealer == "party":
            # With a dealer service every label goes out in the broadcast (the service must
            # know which edges are active): see server_step.
            facts.label_ptr, facts.label_of = _label_sets(design.tuples, facts.dealers, n)
        self.__dict__["_coin_cache"] = (key, facts)
        return facts

    def _plan(self, n: int, labels: np.ndarray | None, coin: np.ndarray, active: int | None,
              parties: np.ndarray) -> _Plan:
        """The run's public facts for a batch: its active edges (those it is a member of or
        deals), their dealers, the noise contributors and the ring. ``labels`` holds the
        public labels the batch knows (-1 elsewhere: only those of its edges reach it) and
        ``active`` the design's number of active edges (from the aggregator)."""
        facts = self._coin_facts(n, coin)
        design = facts.design
        if design.size == 0:
            raise ValueError("the design has no edges (a Bernoulli design can be empty); "
                             "raise edges")
        mine = np.isin(design.tuples, parties).any(axis=1) | np.isin(facts.dealers, parties)
        edges, dealers = design.tuples[mine], facts.dealers[mine]
        order = None
        if labels is not None:
            public_of = labels[edges]
            if np.any(public_of < 0):
                raise ValueError("U-MPC: the aggregator did not send the public label of "
                                 "every member of this party's groups")
            keep = self.circuit.active(public_of)
            assert keep is not None
            edges, dealers = edges[keep], dealers[keep]
            order = self.circuit.order(public_of[keep])
        m = design.size if active is None else active
        fp = self._ring_format(n, design, m)
        self._check_sum_fits(m, fp)
        return _Plan(n, fp, edges.astype(np.int64), order, dealers.astype(np.int64),
                     facts.contributors, self.integer_sensitivity(design), m)

    def _labels_received(self, state: _PartyState, inbox: Message, n: int,
                         coin: np.ndarray) -> np.ndarray:
        """The public labels this batch knows: its own and those the aggregator addressed
        to its parties (one row per party: the labels of :func:`_label_sets`, in order)."""
        assert state.public is not None
        if inbox.parties is None:
            # A broadcast of every label (dealer service): ours must be among them.
            labels = np.asarray(inbox.fields["public"], dtype=np.int64).ravel()
            if labels.size != n or not np.array_equal(labels[state.parties], state.public):
                raise ValueError("U-MPC: the aggregator's broadcast of public labels does not "
                                 "match this batch's own labels")
            return labels
        facts = self._coin_facts(n, coin)
        assert facts.label_ptr is not None and facts.label_of is not None
        labels = np.full(n, -1, dtype=np.int64)
        labels[state.parties] = state.public
        rows = np.asarray(inbox.fields["public"], dtype=np.int64)
        got = np.asarray(inbox.parties, dtype=np.int64)
        if not np.array_equal(np.sort(got), np.sort(state.parties)):
            raise ValueError("U-MPC: the aggregator must address one row of public labels to "
                             "each party of this batch")
        # Row i holds the labels of label_of[label_ptr[p]:label_ptr[p + 1]], p = got[i].
        counts = facts.label_ptr[got + 1] - facts.label_ptr[got]
        row = np.repeat(np.arange(got.size), counts)
        within = np.arange(row.size) - np.repeat(np.cumsum(counts) - counts, counts)
        of = facts.label_of[facts.label_ptr[got[row]] + within]
        values = rows[row, within] if row.size else np.zeros(0, dtype=np.int64)
        known = labels[of]
        if np.any((known >= 0) & (known != values)):
            raise ValueError("U-MPC: the aggregator sent conflicting public labels")
        labels[of] = values
        if not np.array_equal(labels[of], values):     # two rows disagree on a label
            raise ValueError("U-MPC: the aggregator sent conflicting public labels")
        return labels

    def _start(self, state: _PartyState, inbox: Message, rng: np.random.Generator) -> _Run:
        n = int(np.asarray(inbox.fields["n_parties"]).ravel()[0])
        coin = np.asarray(inbox.fields["coin"])
        coin = coin[0] if coin.ndim == 2 else coin
        if state.parties.size == n:
            self.kernel.check_data(state.records)  # global rules, e.g. both classes present
        labels, active = None, None
        if state.public is not None:
            labels = self._labels_received(state, inbox, n, coin)
            active = int(np.asarray(inbox.fields["active"]).ravel()[0])
        plan = self._plan(n, labels, coin, active, state.parties)
        mine = np.isin(plan.edges, state.parties)
        slot_edge, slot_member = np.nonzero(mine)
        slot_owner = plan.edges[slot_edge, slot_member]
        order = _lexsort((slot_member, slot_edge))
        slot_edge, slot_member, slot_owner = slot_edge[order], slot_member[order], \
            slot_owner[order]
        sorter = np.argsort(state.parties, kind="stable")
        rows = sorter[np.searchsorted(state.parties, slot_owner, sorter=sorter)]
        # Codes are non-negative below 2^(l-2): reducing the nominal 64-bit elements
        # modulo 2^l keeps them (two's complement is compatible with reduction).
        own = np.bitwise_and(state.encoded[rows], plan.fp.ring.mask)
        if self.noise is not None and self.noise.kind == "deployment":
            coins: tuple[Any, Any, Any] = ("os", "os", self.noise)
        else:
            share_rng, dealer_rng, noise_rng = rng.spawn(3)
            coins = (share_rng, dealer_rng, self.noise if self.noise is not None else noise_rng)
        run = _Run(plan, state.parties, slot_edge, slot_member, slot_owner, own, coins,
                   groups=_slot_groups(slot_edge, slot_member, self.kernel.degree))
        # A run dropped mid-circuit (an abort, a failed peer) ends its members' waiting
        # threads when it is collected.
        weakref.finalize(run, _close_circuits, run.circuits)
        return run

    def _template(self, plan: _Plan) -> CircuitMaterial:
        """The material's structure, dealt for one edge from public randomness; a member
        resizes it to its edges, fills in its own parts from what its dealer sent and
        zeroes the rest (:func:`_unpack`)."""
        # Every value is overwritten or zeroed; the OS source keeps the simulation's
        # streams out of it. Dealt once per ring and copied (:func:`_unpack` fills a copy
        # in place): dealing is the costly part and only the structure matters.
        cache = self.__dict__.setdefault("_template_cache", {})
        if plan.fp.bits not in cache:
            dealer = Dealer(self.kernel.degree, ring=plan.fp.ring, rng="os")
            cache[plan.fp.bits] = self.circuit.deal(dealer, 1, method=self.method,
                                                    full_range=self.full_range)
        return copy.deepcopy(cache[plan.fp.bits])

    def _next(self, state: _PartyState, run: _Run) -> Message:
        """The batch's next message: dealing, sharing, noise sharing, openings (relay
        rounds), then the upload."""
        plan = run.plan
        # Every batch takes the same rounds: whether any edge is computed is global.
        computes = plan.active > 0
        if run.stage == "deal":
            run.stage = "share"
            if computes:
                return self._deal(run)
        if run.stage == "share":
            run.stage = "inputs"
            if computes:
                return self._share(run)
        if run.stage == "inputs":       # the co-members' input shares are in
            run.stage = "circuit"
        if run.stage == "circuit":
            if computes:
                msg = self._openings(run)
                if msg is not None:
                    return msg
            # The noise shares travel after the circuit, when its material is spent: a
            # batch never holds both (the two largest things it receives).
            run.stage = "noise"
            if plan.contributors.size:
                return self._noise(run, state.parties)
        run.stage = "done"
        ring = plan.fp.ring
        parties = state.parties
        z = np.zeros(parties.size, dtype=np.uint64) if run.noise is None else run.noise
        if run.output is not None and run.output.size:
            where = np.searchsorted(parties, run.slot_owner, sorter=np.argsort(parties))
            where = np.argsort(parties)[where]
            np.add.at(z, where, run.output)   # uint64 wraps modulo 2^64; 2^l divides it
        z = np.bitwise_and(z, ring.mask)
        return Message(Role.PARTY, Role.SERVER, {"z": z}, {"z": plan.fp.bits}, parties)

    # -- parties that fall silent -----------------------------------------------------
    def dropout_rule(self, state: _ServerState, round_index: int) -> DropoutRule:
        """Round 0 (check-ins, public labels) may go on without silent parties: the
        aggregator draws the public coin after it, so the design, the dealers and Z are
        drawn over the parties present. Every later round is part of the secure phases,
        whose additive shares reconstruct only with every member's: it stops."""
        if state.stage == 0:
            return DropoutRule(True, "no share has been sent yet: the public coin is drawn "
                                     "after this round, so the design E (002 Sec. 3), each "
                                     "edge's dealer and the noise contributors Z are drawn "
                                     "over the parties that answered (renumbered), the "
                                     "noise is calibrated to that design (002 App. C.2.3) "
                                     "and the release is U-MPC's over them")
        if round_index == 1:
            return DropoutRule(False, "round 1 deals each edge's material (002 App. A.3): "
                                      "the design drawn from the coin names the silent "
                                      "party, and the members of its edges and of the edges "
                                      "it deals need its rows")
        return DropoutRule(False, "the secure phases are under way (002 Protocol 3.1: record "
                                  "shares, Protocol B.1 noise shares, circuit openings, then "
                                  "every party's z, Lemma C.1): each additive sharing "
                                  "reconstructs only with every member's share, so without "
                                  "the silent party there is no unbiased release")

    # -- the dealer service -----------------------------------------------------------
    def service_roles(self) -> tuple[str, ...]:
        return (DEALER_ROLE,) if self.dealer == "service" else ()

    def init_service(self, role: str, n_parties: int) -> dict[str, Any]:
        """The dealer's state: its public id and whether it has dealt."""
        return {"id": service_id(n_parties, self.service_roles(), role), "dealt": False}

    def service_step(self, role: str, state: dict[str, Any], inbox: Message | None,
                     rng: np.random.Generator) -> tuple[dict[str, Any], Message | None]:
        """The dealer service: from the aggregator's broadcast (the public coin) it derives
        the plan as every party does, deals every edge from its own coins and sends each
        member its part; then idles."""
        service_id(0, self.service_roles(), role)  # refuses another role, naming it
        if state["dealt"] or inbox is None or inbox.is_peer or "coin" not in inbox.fields:
            return state, None
        seating = (None if "present" not in inbox.fields
                   else _Seating.from_mask(inbox.fields["present"]))
        own = state["id"] if seating is None else int(seating.position([state["id"]])[0])
        n = int(np.asarray(inbox.fields["n_parties"]).ravel()[0])
        public, active = None, None
        if "public" in inbox.fields:
            public = np.asarray(inbox.fields["public"], dtype=np.int64).ravel()
            active = int(np.asarray(inbox.fields["active"]).ravel()[0])
        plan = self._plan(n, public, np.asarray(inbox.fields["coin"]), active,
                          np.array([own], dtype=np.int64))
        if not plan.edges.shape[0]:
            return {**state, "dealt": True}, None
        source = "os" if self.noise is not None and self.noise.kind == "deployment" else rng
        dealt = np.arange(plan.edges.shape[0])
        message = self._deal_edges(plan, dealt, source)
        return {**state, "dealt": True}, (message if seating is None
                                          else seating.outgoing(message))

    def _deal(self, run: _Run) -> Message:
        """Each party deals, from its own coins, the material of the edges it deals for
        and sends each member its part (002 App. A.3's dealer, here a party outside the
        edge)."""
        plan = run.plan
        dealt = np.flatnonzero(np.isin(plan.dealers, run.parties))
        return self._deal_edges(plan, dealt, run.coins[1])

    def _deal_edges(self, plan: _Plan, dealt: np.ndarray, source: Any) -> Message:
        """The rows dealing edges ``dealt`` from ``source``: each member its part."""
        k = self.kernel.degree
        dealer = Dealer(k, ring=plan.fp.ring, rng=source)
        edge = np.tile(dealt, k)
        senders = np.tile(plan.dealers[dealt], k)
        targets = plan.edges[edge, np.repeat(np.arange(k), dealt.size)]
        # In delivery order (recipient, sender, edge): the transport sorts by recipient
        # and origin, keeping each origin's order, so it need not move the rows.
        order = _lexsort((edge, senders, targets))
        # Row i of the message is member order[i] // m's part of edge order[i] % m:
        # each member's package is scattered straight to its rows (one pass).
        position = np.empty(order.size, dtype=np.int64)
        position[order] = np.arange(order.size)
        fields: dict[str, np.ndarray] = {}
        # Dealt a chunk of edges at a time, each chunk written to its rows and dropped:
        # the dealer holds its message and one chunk, not the material twice.
        for lo in range(0, dealt.size, _DEAL_CHUNK):
            hi = min(lo + _DEAL_CHUNK, dealt.size)
            material = self.circuit.deal(dealer, hi - lo, method=self.method,
                                         full_range=self.full_range)
            for r in range(k):
                part = _package(material, r, hi - lo)
                mine = position[r * dealt.size + lo:r * dealt.size + hi]
                for name, rows in part.items():
                    width = int(np.prod(rows.shape[1:], dtype=np.int64))
                    if name not in fields:
                        fields[name] = np.empty((order.size, width), dtype=rows.dtype)
                    # A contiguous copy first (a key's level-major arrays transposed to
                    # rows): scattering whole rows is a memory copy, element-wise from a
                    # strided view was ten times slower.
                    fields[name][mine] = np.ascontiguousarray(rows).reshape(hi - lo, width)
                del part
            del material
        if not fields:   # nothing to deal: the fields' layout from the template
            for name, rows in _package(self._template(plan), 0, 1).items():
                width = int(np.prod(rows.shape[1:], dtype=np.int64))
                fields[name] = np.empty((0, width), dtype=rows.dtype)
        bits = {_leaf_name(leaf): leaf.bits for leaf in _material_leaves(self._template(plan))}
        fields[PEER_TO], bits[PEER_TO] = targets[order], 32
        return Message(Role.PARTY, Role.PARTY, fields, bits, senders[order])

    def _share(self, run: _Run) -> Message:
        """Sharing phase (002 Protocol 3.1, step 1): member j of each edge splits its
        record into k additive shares and sends share q to member q."""
        plan, k = run.plan, self.kernel.degree
        ring = plan.fp.ring
        shares = share(run.own, k, run.coins[0], ring=ring)     # (k, slots, d)
        run.inputs = np.zeros((run.slot_edge.size, k, run.own.shape[1]), dtype=np.uint64)
        run.inputs[np.arange(run.slot_edge.size), run.slot_member] = \
            shares[run.slot_member, np.arange(run.slot_edge.size)]
        route = self._co_member_routes(run)
        x = shares[route["member"], route["slot"]]
        return Message(Role.PARTY, Role.PARTY, {"x": x, PEER_TO: route["to"]},
                       {"x": ring.bits, PEER_TO: 32}, route["sender"])

    def _co_member_routes(self, run: _Run) -> dict[str, np.ndarray]:
        """Each slot's rows to its ``k - 1`` co-members, in delivery order (recipient,
        sender, edge): ``slot``, co-``member``, ``to``, ``sender``; and the rows the batch
        expects from its co-members, in the order the transport delivers them:
        ``in_slot``, ``in_party``, ``in_from``."""
        if not run.routes:
            k, edges = self.kernel.degree, run.plan.edges
            slot, member = np.nonzero(np.arange(k)[None, :] != run.slot_member[:, None])
            targets = edges[run.slot_edge[slot], member]
            senders = run.slot_owner[slot]
            order = _lexsort((run.slot_edge[slot], senders, targets))
            into = _lexsort((run.slot_edge[slot], targets, senders))
            run.routes = {"slot": slot[order], "member": member[order],
                          "to": targets[order], "sender": senders[order],
                          "in_slot": slot[into], "in_party": senders[into],
                          "in_from": targets[into]}
            run.routes["by_slot"] = np.argsort(run.routes["in_slot"], kind="stable")
        return run.routes

    def _noise(self, run: _Run, parties: np.ndarray) -> Message:
        """Noise phase (002 Protocol B.1): each contributor draws its Pólya difference and
        sends every other party a uniform share of it, keeping the completing one."""
        plan = run.plan
        ring = plan.fp.ring
        mine = plan.contributors[np.isin(plan.contributors, parties)]
        diffs, share_rng = contributor_noise(
            mine.size, self.epsilon, plan.sensitivity, contributors=plan.contributors.size,
            min_honest=self.min_honest, ring=ring, rng=run.coins[2])
        shares = ring.random((mine.size, plan.n), share_rng)
        rows = np.arange(mine.size)
        shares[rows, mine] = 0
        shares[rows, mine] = ring.sub(diffs, ring.sum(shares, axis=1))
        run.noise = np.zeros(parties.size, dtype=np.uint64)
        where = np.argsort(parties)[np.searchsorted(parties, mine, sorter=np.argsort(parties))]
        run.noise[where] = shares[rows, mine]
        # Rows recipient-major (``mine`` is sorted): the delivery order, kept by the relay.
        # Each array is written once from broadcast views (|Z| n rows: no index arrays
        # beside the message's own).
        sent = mine[None, :] != np.arange(plan.n)[:, None]          # (recipient, mine)
        eta = shares.T[sent]
        del shares
        return Message(Role.PARTY, Role.PARTY,
                       {"eta": eta, PEER_TO: _broadcast_rows(np.arange(plan.n), sent)},
                       {"eta": ring.bits, PEER_TO: 32},
                       np.broadcast_to(mine, sent.shape)[sent])

    def _evaluate(self, run: _Run, group: int) -> np.ndarray:
        """Group ``group``'s circuit (:func:`_slot_groups`) on its members' own shares and
        material, resumed with the openings received since its last step
        (:class:`_MemberCircuit`); its members' output shares, or
        :class:`_OpeningNeededError` with its next opening."""
        live = run.circuits.get(group)
        if live is None:
            members = run.groups[group][0]
            live = run.circuits[group] = _MemberCircuit(members,
                                                        self._member_program(run, group))
            kind, value = live.resume()
            # A state copied or unpickled has no live circuit: replaying the openings it
            # received so far brings the new one to the same point (same values).
            for opened in run.history.get(group, []):
                if kind != "open":
                    break
                kind, value = live.resume(opened)
        else:
            kind, value = live.resume(run.history[group][-1])
        if kind == "open":
            raise _OpeningNeededError(value)
        del run.circuits[group]             # finished: its thread has ended
        return value

    def _member_program(self, run: _Run, group: int) -> Any:
        """The evaluation of group ``group``'s circuit, to run under its opening hook."""
        plan, k = run.plan, self.kernel.degree
        members, slots = run.groups[group]
        assert run.inputs is not None
        d = run.inputs.shape[2]
        held = list(members)
        shares = []
        for j in range(k):
            if len(held) == k:
                s = run.inputs[slots, j]            # (k, edges, d), a copy
            else:
                s = np.zeros((k, slots.shape[1], d), dtype=np.uint64)
                s[held] = run.inputs[slots, j]
            shares.append(s)
        material = run.material[group]
        for part in run.reusable.get(group, []):
            part._spent = False
        order = None if plan.order is None else plan.order[run.slot_edge[_lead(slots)]]
        ring, circuit, method, full_range = plan.fp.ring, self.circuit, self.method, \
            self.full_range

        def program() -> np.ndarray:
            out = circuit.evaluate(shares, material, ring=ring, method=method,
                                   full_range=full_range, order=order)
            return np.asarray(np.asarray(out)[held], dtype=np.uint64)
        return program

    def _openings(self, run: _Run) -> Message | None:
        """The members' next openings to their co-members (every member of an edge sends
        its row to the k - 1 others), or None once every group's circuit has returned."""
        pending: dict[int, list[tuple[str, np.ndarray, int]]] = {}
        outputs: dict[int, np.ndarray] = {}
        for g in range(len(run.groups)):
            try:
                outputs[g] = self._evaluate(run, g)
            except _OpeningNeededError as stop:
                pending[g] = stop.items
        if not pending:
            run.output = np.zeros(run.slot_edge.size, dtype=np.uint64)
            for g, out in outputs.items():
                run.output[run.groups[g][1]] = out
            # The circuit is over: its material and openings are spent.
            run.material.clear()
            run.reusable.clear()
            run.history.clear()
            run.inputs = None
            run.sent = []
            return None
        if outputs:
            _close_circuits(run.circuits)
            raise RuntimeError("U-MPC: the members' circuits opened different values")
        items = []
        for i, (op, first, width) in enumerate(next(iter(pending.values()))):
            if len(pending) == 1 and run.groups[0][1].size == run.slot_edge.size \
                    and np.array_equal(run.groups[0][1].T.ravel(),
                                       np.arange(run.slot_edge.size)):
                # One group holding every slot in (edge, member) order: the rows are its
                # values transposed.
                rows = np.ascontiguousarray(np.swapaxes(first, 0, 1)).reshape(
                    run.slot_edge.size, *first.shape[2:])
            else:
                rows = np.zeros((run.slot_edge.size, *first.shape[2:]), dtype=np.uint64)
                for g, got in pending.items():
                    rows[run.groups[g][1]] = got[i][1]
            items.append((op, rows, width))
        run.sent = items
        route = self._co_member_routes(run)
        fields: dict[str, np.ndarray] = {}
        bits: dict[str, int] = {}
        for i, (op, rows, width) in enumerate(items):
            sent = rows[route["slot"]]
            if op == "xor":
                sent = _compress(sent, width)
                bits[f"o{i}"] = popcount(width)
            else:
                bits[f"o{i}"] = width
            fields[f"o{i}"] = sent
        fields[PEER_TO], bits[PEER_TO] = route["to"], 32
        return Message(Role.PARTY, Role.PARTY, fields, bits, route["sender"])

    def _expected(self, run: _Run, origin_of: tuple[np.ndarray, np.ndarray] | None,
                  what: str, inbox: Message) -> np.ndarray:
        """Checks that the rows received are one per (slot, origin) in the order the
        transport delivers them (recipient, origin, edge); returns each row's slot."""
        if not inbox.is_peer:
            raise ValueError(f"U-MPC: expected {what} from parties, got a message from the "
                             f"{inbox.sender}")
        if origin_of is None:           # from the co-members: the routes computed once
            route = self._co_member_routes(run)
            slot, party, origin = route["in_slot"], route["in_party"], route["in_from"]
        else:
            slot, origin = origin_of
            order = _lexsort((run.slot_edge[slot], origin, run.slot_owner[slot]))
            slot, party, origin = slot[order], run.slot_owner[slot[order]], origin[order]
        got_from = np.asarray(inbox.fields[PEER_FROM], dtype=np.int64)
        if not (np.array_equal(np.asarray(inbox.parties), party)
                and np.array_equal(got_from, origin)):
            raise ValueError(f"U-MPC: each party must receive exactly one row of {what} per "
                             "group it is in and sender; the rows received do not match the "
                             "design")
        return slot

    def _receive(self, run: _Run, inbox: Message) -> None:
        plan, k = run.plan, self.kernel.degree
        ring = plan.fp.ring
        if "eta" in inbox.fields:
            self._receive_noise(run, inbox)
        elif run.stage == "share":      # the material has arrived
            slot = np.arange(run.slot_edge.size)
            rows = self._expected(run, (slot, plan.dealers[run.slot_edge]),
                                  "dealt material", inbox)
            row_of_slot = np.empty(rows.size, dtype=np.int64)
            row_of_slot[rows] = np.arange(rows.size)
            dealt = {name: np.asarray(v) for name, v in inbox.fields.items()
                     if name.startswith("m_")}
            for g, (members, slots) in enumerate(run.groups):
                parts = {r: _Rows(dealt, row_of_slot[slots[i]]) for i, r in enumerate(members)}
                run.material[g] = _unpack(self._template(plan), parts, slots.shape[1])
                run.reusable[g] = _materials(run.material[g])
        elif run.stage == "inputs":     # the input shares have arrived
            rows = self._expected(run, None, "input shares", inbox)
            assert run.inputs is not None
            sender_member = self._member_of(plan, run.slot_edge[rows],
                                            np.asarray(inbox.fields[PEER_FROM]))
            run.inputs[rows, sender_member] = np.asarray(inbox.fields["x"], dtype=np.uint64)
        else:
            rows = self._expected(run, None, "openings", inbox)
            # Every slot receives exactly k - 1 rows (checked above): grouped by slot they
            # reduce in one vectorized pass (ufunc.at is element by element).
            by_slot = self._co_member_routes(run)["by_slot"]
            opened = []
            for i, (op, mine, width) in enumerate(run.sent):
                got = np.asarray(inbox.fields[f"o{i}"], dtype=np.uint64)[by_slot]
                got = got.reshape(mine.shape[0], k - 1, *mine.shape[1:])
                if op == "xor":
                    total = np.bitwise_xor(mine, np.bitwise_xor.reduce(_expand(got, width),
                                                                       axis=1))
                else:
                    total = np.bitwise_and(mine + got.sum(axis=1, dtype=np.uint64), ring.mask)
                opened.append(total)
            for g, (_, slots) in enumerate(run.groups):
                # Every held member of an edge opens the same value: take the first's.
                run.history.setdefault(g, []).append([o[_lead(slots)] for o in opened])

    @staticmethod
    def _member_of(plan: _Plan, edge: np.ndarray, party: np.ndarray) -> np.ndarray:
        return np.argmax(plan.edges[edge] == party[:, None], axis=1)

    def _receive_noise(self, run: _Run, inbox: Message) -> None:
        parties = run.parties
        plan = run.plan
        ring = plan.fp.ring
        # Each party (in id order) hears from every contributor but itself, in
        # contributor order; checked a block of recipients at a time (|Z| rows each), so
        # the check holds no second copy of the rows.
        sorter = np.argsort(parties)
        ordered, contributors = parties[sorter], plan.contributors
        heard = contributors[None, :] != ordered[:, None]          # (recipient, from)
        counts = heard.sum(axis=1)
        ends = np.cumsum(counts)
        got_to = np.asarray(inbox.parties)
        got_from = np.asarray(inbox.fields[PEER_FROM])
        matches = got_to.shape == got_from.shape == (int(ends[-1]) if ends.size else 0,)
        for lo in range(0, ordered.size if matches else 0, _CHECK_BLOCK):
            hi = min(lo + _CHECK_BLOCK, ordered.size)
            a, b = int(ends[lo] - counts[lo]), int(ends[hi - 1])
            block = heard[lo:hi]
            matches = (np.array_equal(got_to[a:b], _broadcast_rows(ordered[lo:hi], block))
                       and np.array_equal(got_from[a:b],
                                          np.broadcast_to(contributors, block.shape)[block]))
            if not matches:
                break
        if not matches:
            raise ValueError("U-MPC: each party must receive one noise share from every "
                             "other noise contributor; the rows received do not match")
        if run.noise is None:
            run.noise = np.zeros(parties.size, dtype=np.uint64)
        eta = np.asarray(inbox.fields["eta"], dtype=np.uint64)
        hearing = counts > 0
        if hearing.any():
            # Rows arrive grouped by recipient (checked above): one sum per recipient.
            starts = (ends - counts)[hearing]
            run.noise[sorter[hearing]] += np.add.reduceat(eta, starts)
        run.noise = np.bitwise_and(run.noise, ring.mask)

    def _check_sum_fits(self, active: int, fp: FixedPoint) -> None:
        """``|E| max |D f| < 2^(l-2)``: with the noise below ``2^(l-2)`` (checked by the
        secure layer) the sum decodes without wrapping."""
        lo, hi = self.kernel.output_range
        most = Fraction(max(abs(lo), abs(hi))) * self.scale() * active
        limit = 1 << (fp.bits - 2)
        if most >= limit:
            raise InputRangeError(f"the sum of {active} kernel values (up to {float(most):.4g} "
                                f"ring units) does not fit the ring of l={fp.bits} bits; "
                                "declare bounds=(lo, hi) (and precision=) to size the ring "
                                "from them, or use a FixedPoint with more bits or fewer "
                                "fractional bits")

    def server_step(self, state: _ServerState, inbox: Message,
                    rng: np.random.Generator) -> tuple[_ServerState, Message | Estimate]:
        order = np.argsort(inbox.parties, kind="stable")
        if state.stage == 0:
            state.stage = 1
            who = _sorted_unique(np.asarray(inbox.parties, dtype=np.int64))
            if 0 < who.size == np.asarray(inbox.parties).size < state.n_parties and \
                    who[0] >= 0 and who[-1] < state.n_parties:
                # Some parties fell silent in round 0 (a transport goes on only where
                # dropout_rule allows it): none of their data is used yet, so the coin,
                # the design, the dealers and Z are drawn over those present, renumbered
                # (_Seating); the parties learn who is present from a mask.
                state.seating = _Seating(who, state.n_parties)
                state.n_parties = int(who.size)
            if inbox.parties is None or inbox.parties.size != state.n_parties:
                raise ValueError("every party must check in before the public coin is drawn")
            if "public" in inbox.fields:
                state.public = np.asarray(inbox.fields["public"])[order]
            # The public coin fixes the design for everybody (002 Sec. 3: a jointly
            # generated PRG seed; here the aggregator's randomness in the simulation).
            state.coin = rng.integers(0, 2**64, size=2, dtype=np.uint64)
            state.design = self._coin_facts(state.n_parties, state.coin).design
            fields: dict[str, np.ndarray] = {
                "coin": state.coin, "n_parties": np.array([state.n_parties], dtype=np.int64)}
            bits = {"coin": 64, "n_parties": 64}
            if state.seating is not None:
                # One bit per party of the start: who is present (only after a dropout).
                fields["present"], bits["present"] = state.seating.mask(), 1
            if state.public is None:
                return state, Message(Role.SERVER, Role.PARTY, fields, bits)
            if self.dealer == "service":
                # The dealer service deals only the active edges, so it needs every label;
                # one broadcast serves it and the parties alike (n labels to each: the
                # O(n^2) download that dealer="party" avoids; docs/protocols/umpc.md).
                fields |= {"active": np.array([self.active_edges(state.design, state.public)],
                                              dtype=np.int64),
                           "public": state.public}
                bits |= {"active": 64, "public": self.circuit.public_bits()}
                return state, Message(Role.SERVER, Role.PARTY, fields, bits)
            return state, self._address_labels(state, bits)
        z = np.asarray(inbox.fields["z"], dtype=np.uint64)[order]
        return state, self._release(state, int(self._ring_of(state).sum(z)))

    def _ring_of(self, state: _ServerState) -> Any:
        assert state.design is not None
        return self.run_fixed_point(state.n_parties, state.design, state.public).ring

    # The distributed engine's gathered mode (fedustat.runtime.engine): the upload round's
    # server work is Rec(sum_i z_i) (002 Lemma C.1), a sum in Z_{2^l} that splits by batch.
    def gathered_reduction(self, state: _ServerState) -> int | None:
        """The ring's bits when the next server step is the aggregation (else ``None``)."""
        return None if state.stage == 0 else int(self._ring_of(state).bits)

    def summarize_batch(self, message: Message, context: int,
                        memory: Any = None) -> dict[str, int]:
        """A batch's uploaded shares summed mod 2^l, and how many it sent."""
        z = np.asarray(message.fields["z"], dtype=np.uint64)
        return {"z": int(z.sum(dtype=np.uint64)) % (1 << context), "bits": int(context),
                "rows": int(z.size)}

    def combine_summaries(self, a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
        # Sums mod 2^l are associative: any tree of batches gives the same total.
        return {"z": (a["z"] + b["z"]) % (1 << a["bits"]), "bits": a["bits"],
                "rows": a["rows"] + b["rows"]}

    def server_step_reduced(self, state: _ServerState, summary: dict[str, int],
                            rng: np.random.Generator) -> tuple[_ServerState, Estimate]:
        if state.stage == 0 or summary["rows"] != state.n_parties:
            raise ValueError(f"U-MPC: the aggregation needs one share from each of the "
                             f"{state.n_parties} parties, got {summary['rows']}")
        return state, self._release(state, int(summary["z"]))

    # The distributed engine's routed check-in (fedustat.runtime.engine, gathered mode):
    # round 0's server work split so that the labels never reach the driver. Each batch's
    # check-in is summarized (rows, class sizes), the driver draws the coin as
    # server_step does, each batch routes its parties' labels to the batches whose
    # parties need them (_label_sets), and each batch writes its own parties' round-1
    # rows: the message _address_labels would address them, so the same release.
    def routed_check_in(self, state: _ServerState) -> bool:
        """Whether the next server step is a check-in the engine may route (round 0
        with a dealing party; the dealer service needs every label in one broadcast)."""
        return state.stage == 0 and state.seating is None and self.dealer == "party"

    def check_in_summary(self, message: Message) -> dict[str, Any]:
        """A batch's check-ins: how many, and the size of each public class."""
        out: dict[str, Any] = {"rows": int(np.asarray(message.parties).size)}
        if "public" in message.fields:
            out["counts"] = np.bincount(np.asarray(message.fields["public"], dtype=np.int64),
                                        minlength=self.kernel.degree)
        return out

    def check_in_coin(self, state: _ServerState, summaries: list[dict[str, Any]],
                      rng: np.random.Generator) -> np.ndarray:
        """server_step's round 0 on the batches' summaries: every party checked in; the
        public coin, drawn from the server's stream as in process."""
        rows = sum(part["rows"] for part in summaries)
        if rows != state.n_parties:
            raise ValueError("every party must check in before the public coin is drawn")
        state.stage = 1
        if "counts" in summaries[0]:
            state.class_counts = np.sum([part["counts"] for part in summaries], axis=0)
        state.coin = rng.integers(0, 2**64, size=2, dtype=np.uint64)
        return state.coin

    def design_summary(self, n: int, coin: np.ndarray) -> dict[str, Any]:
        """The design's public numbers, drawn from the coin (on a worker: O(|E|))."""
        facts = self._coin_facts(n, coin)
        width = 0 if facts.label_ptr is None or not n else int(np.diff(facts.label_ptr).max())
        return {"name": facts.design.name, "size": facts.design.size,
                "max_degree": facts.design.max_degree, "label_row_width": width}

    def route_labels(self, message: Message, n: int, coin: np.ndarray,
                     starts: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
        """A batch's labels split by the batch whose parties need them (``starts``: each
        batch's first party): for each batch, (party ids, labels), ids sorted."""
        facts = self._coin_facts(n, coin)
        assert facts.label_ptr is not None and facts.label_of is not None
        ids = np.asarray(message.parties, dtype=np.int64)
        labels = np.asarray(message.fields["public"], dtype=np.int64)
        order = np.argsort(ids)
        ids, labels = ids[order], labels[order]
        at = np.clip(np.searchsorted(ids, facts.label_of), 0, ids.size - 1)
        ours = np.flatnonzero(ids[at] == facts.label_of)
        receiver = np.searchsorted(facts.label_ptr, ours, side="right") - 1
        dest = np.searchsorted(starts, receiver, side="right") - 1
        key = np.unique(dest * n + facts.label_of[ours])
        dest, of = np.divmod(key, n)
        got = labels[np.searchsorted(ids, of)]
        return tuple((of[dest == d], got[dest == d]) for d in range(starts.size))

    def labels_known(self, message: Message,
                     *pieces: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """What a batch knows after the routing: its own labels and those routed to it
        (party ids sorted, labels)."""
        ids = np.concatenate([np.asarray(message.parties, dtype=np.int64),
                              *[p[0] for p in pieces]])
        labels = np.concatenate([np.asarray(message.fields["public"], dtype=np.int64),
                                 *[p[1] for p in pieces]])
        ids, first = np.unique(ids, return_index=True)
        return ids, labels[first]

    def count_active(self, known: tuple[np.ndarray, np.ndarray], n: int, coin: np.ndarray,
                     first: int, stop: int) -> int:
        """Active edges whose first member is one of parties ``first..stop-1`` (each edge
        counted by one batch; the batch knows its edges' co-members' labels)."""
        tuples = self._coin_facts(n, coin).design.tuples
        edges = tuples[(tuples[:, 0] >= first) & (tuples[:, 0] < stop)]
        ids, labels = known
        at = np.minimum(np.searchsorted(ids, edges), ids.size - 1)
        if np.any(ids[at] != edges):
            raise ValueError("U-MPC: a batch was not routed the label of every member of "
                             "the groups it leads")
        mask = self.circuit.active(labels[at])
        assert mask is not None
        return int(np.count_nonzero(mask))

    def check_in_done(self, state: _ServerState, design: dict[str, Any], active: int) -> None:
        """The aggregator's state after the routed check-in: the design's numbers (no
        tuples) and the number of active edges."""
        state.design = _DesignFacts(design["name"], int(design["size"]),
                                    int(design["max_degree"]), int(active),
                                    int(design["label_row_width"]))

    def check_in_reply(self, n: int, coin: np.ndarray, active: int, width: int,
                       first: int, stop: int,
                       known: tuple[np.ndarray, np.ndarray] | None) -> Message:
        """Round 1's message to parties ``first..stop-1``: the broadcast of n and the coin,
        or (public labels) their rows of _address_labels."""
        fields: dict[str, np.ndarray] = {"coin": coin,
                                         "n_parties": np.array([n], dtype=np.int64)}
        bits = {"coin": 64, "n_parties": 64}
        if known is None:
            return Message(Role.SERVER, Role.PARTY, fields, bits)
        facts = self._coin_facts(n, coin)
        assert facts.label_ptr is not None and facts.label_of is not None
        size = stop - first
        lo, hi = int(facts.label_ptr[first]), int(facts.label_ptr[stop])
        counts = np.diff(facts.label_ptr[first:stop + 1])
        party = np.repeat(np.arange(size), counts)
        slot = np.arange(hi - lo) - (facts.label_ptr[first:stop][party] - lo)
        ids, labels = known
        rows = np.zeros((size, width), dtype=np.int64)
        rows[party, slot] = labels[np.searchsorted(ids, facts.label_of[lo:hi])]
        out = {"coin": np.tile(coin, (size, 1)), "n_parties": np.full(size, n, np.int64),
               "active": np.full(size, active, np.int64), "public": rows}
        bits |= {"active": 64, "public": self.circuit.public_bits()}
        return Message(Role.SERVER, Role.PARTY, out, bits,
                       np.arange(first, stop, dtype=np.int64))

    def _address_labels(self, state: _ServerState, bits: dict[str, int]) -> Message:
        """Round 1 with public labels: one row per party with n, the coin, the number of
        active edges and only the labels it needs (:func:`_label_sets`: its edges'
        co-members and the members of the edges it deals), padded to the longest list
        (public: every party derives the lists from the coin), instead of all n labels to
        everybody: O(n k (edges per party)) bits in total instead of n^2."""
        n = state.n_parties
        assert state.coin is not None and state.public is not None
        facts = self._coin_facts(n, state.coin)
        assert facts.label_ptr is not None and facts.label_of is not None
        counts = np.diff(facts.label_ptr)
        width = int(counts.max()) if n else 0
        rows = np.zeros((n, width), dtype=np.int64)
        party = np.repeat(np.arange(n), counts)
        slot = np.arange(facts.label_of.size) - facts.label_ptr[party]
        rows[party, slot] = state.public[facts.label_of]
        assert state.design is not None
        out = {"coin": np.tile(state.coin, (n, 1)), "n_parties": np.full(n, n, np.int64)}
        out["active"] = np.full(n, self.active_edges(state.design, state.public), np.int64)
        out["public"] = rows
        bits = {**bits, "active": 64, "public": self.circuit.public_bits()}
        if state.seating is None:
            return Message(Role.SERVER, Role.PARTY, out, bits, np.arange(n))
        # After a dropout in round 0 each row also carries the mask of who is present,
        # and goes to the party's real id.
        out["present"] = np.tile(state.seating.mask(), (n, 1))
        return Message(Role.SERVER, Role.PARTY, out, bits,
                       state.seating.real(np.arange(n)))

    def _release(self, state: _ServerState, z_sum: int) -> Estimate:
        """The release from ``z_sum``, the parties' output shares summed in Z_{2^l}."""
        n = state.n_parties
        design = state.design
        assert design is not None
        fp = self.run_fixed_point(n, design, state.public)
        ring = fp.ring
        total = int(ring.to_signed(np.uint64(z_sum)))     # Rec(sum z_i), Lemma C.1
        public_columns = {}
        # Lemma C.1: U = Rec / (D |E|). With public labels the inactive edges are 0 by
        # public information, so the aggregator averages over the m_a active edges and
        # scales by the public share p of active k-subsets (a ratio estimator; with every
        # active edge ordered alike it returns the exact AUC at epsilon = inf).
        p_active, pool, m = 1.0, math.comb(n, self.kernel.degree), design.size
        if state.public is not None or state.class_counts is not None:
            assert self.circuit.public_column is not None
            label_name = self.kernel.columns[self.circuit.public_column]
            if state.public is not None:
                public_columns[label_name] = state.public
                counts = np.bincount(state.public, minlength=self.kernel.degree)
            else:  # the engine's routed check-in: the class sizes only
                counts = state.class_counts
            m_active = self.active_edges(design, state.public)
            if m_active > 0:
                pool = int(np.prod(counts[: self.kernel.degree], dtype=object))
                p_active, m = pool / math.comb(n, self.kernel.degree), m_active
        u = total / (self.scale() * m) * p_active
        public_data = PublicData(n, public_columns)
        if state.public is None and state.class_counts is not None:
            public_data = PublicData(n, grouped={label_name: np.arange(counts.size)},
                                     weights=counts)
        noise_var = self.noise_variance(n, design)
        # The release estimates the complete U-statistic of the parties' data, so its error
        # bar adds the edge-sampling variance of 002 Claim D.1 (m of the pool's tuples):
        # the kernel values' variance is at most (hi - mu)(mu - lo) for values in
        # [lo, hi] with mean mu (Bhatia & Davis 2000), here at the released mean, clipped
        # into the range (post-processing). Popoviciu's (Delta f)^2 / 4, its largest value,
        # overstated the spread where mu is far from the middle (AUC 0.68 on tied scores,
        # n = 500, eps = 4: s.e. 1.25x the spread, coverage 98.5% over 400 runs).
        lo, hi = (float(v) for v in self.kernel.output_range)
        mean = min(max(u / p_active, lo), hi)
        kernel_var = min((hi - mean) * (mean - lo), self.kernel.sensitivity**2 / 4.0)
        design_var = (p_active**2 * (pool - m) / (m * (pool - 1)) * kernel_var) \
            if pool > 1 and m < pool else 0.0
        # The statistic at the released U: an affine map carries U's law scaled; Renyi-2's
        # -ln U clips U into [1/C(n,2), 1] first and maps U's interval (statistic_release).
        u_law = self.error_law(n, design, design_var, unit=p_active / (self.scale() * m))
        if self.encoding is not None:  # the codes' rounding, a public bound (encoding.py)
            u_law = with_rounding_bias(u_law, self.encoding.rounding_bias(self.kernel.name))
        release = statistic_release(self.kernel, u, u_law, public_data)
        # Lemma C.3's count of the secure part (phases 1-4); the measured costs are in
        # Estimate.cost, filled by the runtime from the messages and the relayed rows.
        expected = self.expected_communication(n, design, state.public, state.coin)
        diagnostics = self._diagnostics(n, design, state.public, noise_var, fp)
        diagnostics.update({
            "design_variance_bound": design_var,
            "lemma_c3_bits": expected["online_bits"],
            "lemma_c3_rounds": expected["rounds"],
            "expected_offline_bits": expected["offline_bits"],
            "expected_download_bits": expected.get("download_bits"),
            "u_statistic": u,
            "lemma_c1_u": total / (self.scale() * design.size),
            "public_coin": None if state.coin is None else [int(w) for w in state.coin],
        })
        # In range on every transport: the clip is part of the server's release step.
        return release.estimate(self.kernel, public_data, protocol=self.name,
                                privacy=self.guarantee, cost=Cost(server_operations=n),
                                diagnostics=diagnostics)

    def error_law(self, n_parties: int, design: Design, design_variance: float,
                  unit: float | None = None) -> ErrorDistribution:
        """The law of ``U_hat - U`` (complete U-statistic), from public quantities.

        * Noise: the reconstructed sum carries ``eta = X - Y``, ``X, Y ~ NB(c r, t)``
          (Protocol B.1, 002 App. B: ``c`` contributors of Pólya shape ``r = 1/h``),
          divided by ``D |E|`` (Lemma C.1; ``unit`` for the ratio estimator): exactly
          :class:`~fedustat.secure.PolyaDifferenceError` (``c r = 1``: discrete Laplace).
        * Design: the sampled edges' error around the complete U-statistic, normal
          (a mean of ``|E|`` kernel values) with the data-free variance bound of 002
          Claim D.1 (conservative).

        The two are independent; their sum's law is :func:`~fedustat.privacy.errors.
        error_sum` (Gil-Pelaez inversion).
        """
        parts: list[ErrorDistribution] = [NormalError(normal_std_error(design_variance))]
        if not math.isinf(self.epsilon):
            c = self.contributors(n_parties)
            h = c if self.min_honest is None else min(self.min_honest, c)
            t = math.exp(-self.epsilon / self.integer_sensitivity(design))
            step = 1.0 / (self.scale() * design.size) if unit is None else unit
            parts.append(PolyaDifferenceError(c / h, t, step))
        return error_sum(parts)

    def _diagnostics(self, n: int, design: Design, public: np.ndarray | None,
                     noise_var: float, fp: FixedPoint) -> dict[str, Any]:
        out: dict[str, Any] = {
            "design": design.name,
            "edges": design.size,
            "active_edges": self.active_edges(design, public),
            "max_degree": design.max_degree,
            "u_sensitivity": design.max_degree * self.kernel.sensitivity / design.size,
            "comparison": self.method,
            "full_range_comparisons": self.full_range,
            "fixed_point": {"bits": fp.bits, "frac_bits": fp.frac_bits,
                            "headroom": fp.headroom},
            "output_scale": self.scale(),
            "encoding": (self.encoding.describe(fp, self.kernel.name)
                         if self.encoding is not None else
                         {"bounds": None, "resolution": fp.resolution, "ring_bits": fp.bits,
                          "ties": f"values closer than {fp.resolution:.3g} encode equally "
                                  "(ties)"}),
            "secure_operations_per_edge": {"comparisons": self.circuit.comparisons,
                                           "equalities": self.circuit.equalities,
                                           "products": self.circuit.products},
            "incomplete_variance_bound": incomplete_variance_bound(
                n, self.kernel.degree, design.size, self.kernel.sensitivity),
            "server_operations": SERVER_OPS_NOTE,
            "secrecy": self._secrecy_text(),
        }
        if math.isinf(self.epsilon):
            out["threat_model"] = "none (epsilon = inf: no noise phase)"
            return out
        c = self.contributors(n)
        out.update({
            "threat_model": self.threat_model,
            "noise_contributors": c,
            "min_honest": self.min_honest,
            "tolerated_colluders": c - (c if self.min_honest is None else self.min_honest),
            "noise_sensitivity_units": self.integer_sensitivity(design),
            "noise_std_u": math.sqrt(noise_var),
            "noise_source": "simulation" if self.noise is None else self.noise.kind,
            "collusion_guarantee": collusion_guarantee(
                self.threat_model, n, c, self.min_honest, self.epsilon, self.f_honest,
                self.fail_prob),
        })
        return out

    def _secrecy_text(self) -> str:
        basis = ("computational: FSS keys from a fixed-key AES-128 PRG" if self.method == "fss"
                 else "information-theoretic given the dealer")
        return ("records and intermediate values are additively shared within each edge; a "
                "coalition without every member of an edge learns nothing from that edge, "
                f"only the release ({basis}). " + (
                    "Every edge's material comes from the dealer service, which must not "
                    "collude with any party or the aggregator" if self.dealer == "service"
                    else "Each edge's material comes from a dealing party outside the edge "
                         "(drawn from the public coin) that must not collude with a member "
                         "of that edge or the aggregator") + "; parties are semi-honest "
                "(002 Sec. 3). Peer messages travel relayed by the aggregator, end-to-end "
                "encrypted and authenticated in networked runs.")


def _umpc(kernel: Kernel, *, epsilon: float, delta: float = 0.0,
          design: str | Design = "balanced", edges: int | None = None,
          threat_model: str = "hf", f_honest: float = 0.5, fail_prob: float = 2.0**-40,
          min_honest: int | None = 1, comparison: str = "auto",
          fixed_point: FixedPoint | None = None, noise: NoiseSource | None = None,
          bounds: Any = None, precision: float | None = None, dealer: str = "party") -> UMPC:
    # The discrete Laplace release is pure epsilon-DP; a delta the caller allows is unused.
    return UMPC(kernel, epsilon, design=design, edges=edges, threat_model=threat_model,
                f_honest=f_honest, fail_prob=fail_prob, min_honest=min_honest,
                comparison=comparison, fixed_point=fixed_point, noise=noise, bounds=bounds,
                precision=precision, dealer=dealer)


register("umpc", _umpc, model=PrivacyModel.CENTRAL,
         summary="secret sharing on a sampled hypergraph, secure kernel circuits and "
                 "distributed discrete Laplace noise (U-MPC)",
         source="002 Protocol 3.1, App. B (Protocol B.1), C.2.3, C.3, F")
