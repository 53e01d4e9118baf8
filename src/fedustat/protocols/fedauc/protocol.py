"""FedAUC: label-DP AUC in vertical federated learning (FedAUC_RR and FedAUC_Lap).

Source "004": Sun et al., *Differentially Private AUC Computation in Vertical Federated
Learning* (file ``004_50b83c7ff644f2ca.txt``). K clients each hold the private labels of
many samples; the model's scores are shared with one server, which ranks them. The
message flow is the paper's (Sec. 4.2 and 5.1, Alg. 2 and 4):

1. **clients -> server**: each client sends the scores of its samples, shuffled
   (a 64-bit float per sample);
2. **server -> clients**: the server sorts all M scores and returns each sample's rank
   0..M-1 (App. H.2) to the client that sent it, in the order received
   (``ceil(log2 M)`` bits per rank; with tied scores the ranks are mid-ranks, sent
   doubled as integers in 0..2M-2, ``ceil(log2(2M-1))`` bits);
3. **clients -> server**: each client returns ``localSum = sum r_i y_i``, ``localP`` and
   ``localN`` (three 64-bit values) computed on randomized-response labels (FedAUC_RR)
   or perturbed with Laplace / Gaussian noise (FedAUC_Lap);
4. the server aggregates and releases ``AUC = (globalSum - P(P-1)/2) / (P N)`` (eq. 1),
   debiased for RR (eq. 3-4, Alg. 3, App. P).

Ties: mid-ranks make ``sum_{pos} r_i - P(P-1)/2`` the Mann-Whitney U with ties counted
1/2, so the non-private protocol returns the AUC of ``sklearn.metrics.roc_auc_score``
(exactly the correctly rounded rational value, as :func:`fedustat.stats.roc_auc`).

**Parties are clients holding many samples.** Party state is a batch of clients: flat
per-sample arrays (score, label, owning client) grouped by client, with per-client sums
by ``np.bincount`` and per-client maxima by ``np.maximum.reduceat``, so K = M clients
cost the same as K = 10. Every message row names the client it belongs to
(``Message.parties`` = client id; per-sample rows repeat it), so bits are counted per
client. ``fedustat.runtime.simulate.simulate(protocol, data, parties=client_of_sample)``
runs them in process (or, without ``parties``, with the split the protocol's
``assign_parties`` makes from ``n_clients`` and ``partition``); the steps do no I/O.

Privacy: label DP (004 Def. 2.1): neighbouring data sets differ in one sample's label;
scores, client sizes and the ranks are known to the server (004 Sec. 3 and App. R).
Each label is held by one client, so a client-level epsilon-DP release of its
statistics makes the whole transcript epsilon-LabelDP (parallel composition).
"""

from __future__ import annotations

import copy
import math
import warnings
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from fedustat._validation import (
    RecordCheck,
    RecordCheckError,
    as_float_array,
    as_int_array,
    check_delta,
    check_epsilon,
    check_positive_int,
    check_probability,
)
from fedustat.datasets.partitions import (
    PARTITIONS,
    check_client_assignment,
    partition_clients,
)
from fedustat.privacy.errors import (
    NORMAL_SHARE,
    ErrorDistribution,
    NormalError,
    inverted_error_law,
    laplace_sum,
)
from fedustat.privacy.guarantee import (
    Assumption,
    PrivacyGuarantee,
    PrivacyModel,
    Trust,
    semi_honest,
)
from fedustat.privacy.mechanisms import GaussianMechanism
from fedustat.privacy.noise import NoiseSource, SimulationNoise
from fedustat.privacy.randomizers import BinaryRandomizedResponse
from fedustat.protocols.base import (
    Cost,
    DropoutRule,
    Estimate,
    Message,
    Protocol,
    Role,
    in_statistic_range,
)
from fedustat.protocols.fedauc.variance import (
    auc_gradient,
    flip_probability,
    laplace_linearized_std,
    rr_debiased_auc,
    rr_linearized_std,
)
from fedustat.protocols.registry import register
from fedustat.stats.kernels import Kernel, auc_kernel

__all__ = [
    "LABEL_ADJACENCY",
    "FedAUC",
    "FedAUCLap",
    "FedAUCRR",
    "ReleasePlan",
    "adaptive_split",
    "rank_scores",
]

FLOAT_BITS = 64  # scores and noisy statistics travel as IEEE doubles
INT_BITS = 64  # RR's exact local statistics travel as 64-bit integers
_AUC = auc_kernel()  # its statistic range, [0, 1], is where every release is clipped
LABEL_ADJACENCY = ("change one sample's label; scores, ranks and client sizes are known to "
                   "the server")

Mechanism = Literal["laplace", "gaussian"]
Sensitivity = Literal["local", "global"]
Allocation = Literal["fixed", "orthogonal", "adaptive"]


# --------------------------------------------------------------------------- ranking


def _doubled_mid_ranks(scores: np.ndarray) -> tuple[np.ndarray, bool]:
    """Twice the mid-rank of each score (int64) and whether any scores tie.

    Ranks count from 0 for the lowest score to M - 1 for the highest (004 App. H.2). A
    tie group occupying sorted positions start..end shares the mid-rank
    (start + end) / 2, stored doubled as the integer start + end.
    """
    m = scores.size
    order = np.argsort(scores)
    s = scores[order]
    new_group = np.empty(m, dtype=bool)
    new_group[0] = True
    np.not_equal(s[1:], s[:-1], out=new_group[1:])
    starts = np.flatnonzero(new_group)
    ends = np.append(starts[1:], m) - 1
    doubled = np.empty(m, dtype=np.int64)
    doubled[order] = np.repeat(starts + ends, ends - starts + 1)
    return doubled, bool(starts.size < m)


def rank_scores(scores: Any) -> np.ndarray:
    """Ranks 0..M-1 of the scores in increasing order, tied scores sharing their mid-rank.

    004 App. H.2 assigns 0 to the lowest score and M - 1 to the highest; with ties, the
    average position keeps ``sum_{pos} r_i - P(P-1)/2`` equal to the Mann-Whitney U with
    ties counted 1/2 (the AUC of ``sklearn.metrics.roc_auc_score``).

    Parameters
    ----------
    scores : array_like of shape (M,)
        Finite scores.

    Returns
    -------
    numpy.ndarray of float64
        Rank of each score (a multiple of 1/2).
    """
    s = as_float_array(scores, "scores")
    return _doubled_mid_ranks(s)[0] / 2.0


# --------------------------------------------------------------------------- allocation


def adaptive_split(parallel_norm: Any, orthogonal_norm: Any,
                   mechanism: Mechanism = "laplace") -> np.ndarray:
    """Per-client share beta of the budget for the count, minimizing localSum's noise.

    004 Sec. 5.3: a client with ranks r writes r = u' + v' (u' = mean(r) * 1, the part
    parallel to the all-one vector u; v' orthogonal to it) and releases
    ``localP' = <u, y> + s1``, ``localSum' = <u', y> + a s1 + <v', y> + b s2`` with
    ``a = ||u'||_inf`` and ``b = ||v'||_inf``; beta is chosen to minimize the variance of
    ``a s1 + b s2``:

    * Laplace, ``s1 ~ Lap(1/(beta eps))``, ``s2 ~ Lap(1/((1-beta) eps))``: minimize
      ``a^2 / beta^2 + b^2 / (1-beta)^2``; setting the derivative
      ``-2a^2/beta^3 + 2b^2/(1-beta)^3`` to zero gives
      ``beta = a^(2/3) / (a^(2/3) + b^(2/3))`` and the minimum
      ``Var = 2 (a^(2/3) + b^(2/3))^3 / eps^2``;
    * Gaussian (one Gaussian mechanism on the pair, see :class:`FedAUCLap`), noise
      ``sigma^2 / beta`` on the count and ``b^2 sigma^2 / (1-beta)`` on ``<v', y>``:
      minimize ``a^2 / beta + b^2 / (1-beta)``, giving ``beta = a / (a + b)`` and
      ``Var = (a + b)^2 sigma^2``.

    ``b = 0`` (all ranks equal, e.g. one sample per client) gives beta = 1: the paper's
    special case ``localSum' = r localP'`` (Sec. 5.3).

    Parameters
    ----------
    parallel_norm, orthogonal_norm : array_like
        ``a = ||u'||_inf`` (the client's mean rank) and ``b = ||v'||_inf`` per client, >= 0.
    mechanism : {"laplace", "gaussian"}

    Returns
    -------
    numpy.ndarray
        beta in (0, 1] per client.
    """
    a = np.asarray(parallel_norm, dtype=np.float64)
    b = np.asarray(orthogonal_norm, dtype=np.float64)
    if np.any(~np.isfinite(a)) or np.any(~np.isfinite(b)) or np.any(a < 0) or np.any(b < 0):
        raise ValueError("parallel_norm and orthogonal_norm must be finite and >= 0")
    if mechanism not in ("laplace", "gaussian"):
        raise ValueError(f"mechanism must be 'laplace' or 'gaussian', got {mechanism!r}")
    a, b = np.broadcast_arrays(a, b)
    beta = np.ones(a.shape)
    split = b > 0  # elsewhere beta = 1
    a_s, b_s = a[split], b[split]
    if mechanism == "laplace":
        a_s, b_s = np.cbrt(a_s * a_s), np.cbrt(b_s * b_s)
    beta[split] = a_s / (a_s + b_s)
    return beta


@dataclass(frozen=True)
class ReleasePlan:
    """What the clients of a batch release: two noisy linear statistics of their labels.

    Client k releases ``X_0 = sum_{i in k} y_i + noise_0`` and
    ``X_1 = sum_{i in k} c_i y_i + noise_1`` (``c = sum_coefficients``) with noise of
    scale ``scales[j, k]`` (Laplace scale b, or Gaussian sigma), and reports
    ``localP' = X_0``, ``localSum' = lam[k] X_0 + X_1``, ``localN' = |Y_k| - localP'``
    (004 Sec. 5.2: ``c_i = r_i``, ``lam = 0``; Sec. 5.3: ``c_i = r_i - mean_k(r)``,
    ``lam = ||u'||_inf = mean_k(r)``). Changing label i moves (X_0, X_1) by (1, c_i), so
    the pair is epsilon-DP per client when, for every sample i of client k,
    ``1 / scales[0, k] + |c_i| / scales[1, k] <= epsilon`` (Laplace), or
    ``(1 / scales[0, k])^2 + (c_i / scales[1, k])^2 <= 1 / sigma_1^2`` with sigma_1 the
    (epsilon, delta) Gaussian scale for sensitivity 1 (Gaussian). A zero scale comes
    with zero coefficients: that statistic does not depend on the labels.
    """

    sum_coefficients: np.ndarray
    scales: np.ndarray
    lam: np.ndarray
    beta: np.ndarray | None = None


# --------------------------------------------------------------------------- states


@dataclass(frozen=True)
class ClientBatch:
    """State of a batch of clients: per-sample arrays grouped by client.

    ``owner`` is the global client id of each sample, ``local`` its client's index
    0..k-1 in this batch (``clients[local] == owner``), ``starts`` the first sample of
    each client. ``upload_order`` is the shuffled order in which the scores were sent;
    ``noisy_labels`` are RR's flipped labels (drawn once, then kept).
    """

    scores: np.ndarray
    labels: np.ndarray
    owner: np.ndarray
    local: np.ndarray
    clients: np.ndarray
    sizes: np.ndarray
    starts: np.ndarray
    phase: int = 0
    upload_order: np.ndarray | None = None
    noisy_labels: np.ndarray | None = None


@dataclass(frozen=True)
class ServerState:
    """The server's state: after ranking, public per-client summaries of the ranks.

    ``n_clients`` counts the clients of the run: those fixed at the start until the
    ranking, then those whose scores were ranked. ``clients`` holds their ids when some
    client fell silent in the score round (``None``: every id 0..n_clients-1); the
    per-client arrays follow that order.
    """

    n_clients: int
    phase: int = 0
    n_samples: int = 0
    rank_sum: float = 0.0
    rank_sq_sum: float = 0.0
    sizes: np.ndarray | None = None
    max_rank: np.ndarray | None = None
    mean_rank: np.ndarray | None = None
    spread: np.ndarray | None = None
    noise_moments: tuple[float, float, float] | None = None
    beta: np.ndarray | None = None
    noise_scales: np.ndarray | None = None  # (2, K): each client's scales of (X_0, X_1)
    lam: np.ndarray | None = None
    clients: np.ndarray | None = None


def _segment_summaries(ranks: np.ndarray, starts: np.ndarray,
                       sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-client max rank, mean rank and ``||r - mean||_inf`` over contiguous segments."""
    if starts.size == ranks.size:  # one sample per client
        return ranks.copy(), ranks.copy(), np.zeros(ranks.size)
    max_r = np.maximum.reduceat(ranks, starts)
    min_r = np.minimum.reduceat(ranks, starts)
    mean_r = np.add.reduceat(ranks, starts) / sizes
    spread = np.maximum(max_r - mean_r, mean_r - min_r)
    return max_r, mean_r, np.maximum(spread, 0.0)


def _client_sums(values: np.ndarray, state: ClientBatch) -> np.ndarray:
    """Per-client sums of a per-sample array (samples are grouped by client)."""
    k = state.clients.size
    if 8 * k <= values.size:  # long segments: a sequential pass per segment is fastest
        # Accumulate in float64: int8 labels would overflow (integers stay exact < 2^53).
        return np.add.reduceat(values, state.starts, dtype=np.float64)
    return np.bincount(state.local, weights=values, minlength=k)


def _scaled_noise(source: NoiseSource, mechanism: Mechanism, scales: np.ndarray) -> np.ndarray:
    """Independent noise with an entry-wise scale (0 where the scale is 0)."""
    if isinstance(source, SimulationNoise):
        # A unit draw times the scale has the right law and keeps the batch vectorized.
        unit = (source.laplace(1.0, scales.shape) if mechanism == "laplace"
                else source.gaussian(1.0, scales.shape))
        return unit * scales
    # Other sources (vetted samplers) draw at each distinct scale itself; in a deployment
    # a batch is one client, so this loop is over its two statistics.
    out = np.zeros(scales.shape)
    flat = scales.ravel()
    positive = np.flatnonzero(flat > 0)
    values, inverse, counts = np.unique(flat[positive], return_inverse=True,
                                        return_counts=True)
    # Entries grouped by scale (one sort, not one pass over all entries per scale).
    order = positive[np.argsort(inverse, kind="stable")]
    draws = [source.laplace(float(v), int(c)) if mechanism == "laplace"
             else source.gaussian(float(v), int(c)) for v, c in zip(values, counts,
                                                                     strict=True)]
    if draws:
        out.ravel()[order] = np.concatenate(draws)
    return out


# Exact sums of floats, for a distributed server: every double is an integer multiple of
# 2^-1074, so a sum of doubles is an integer at the scale 2^-EXACT_SHIFT (a few spare bits
# for subnormals); batches' integers add exactly in any order and the total is rounded
# once (correctly: int / int true division), whatever the batching.
EXACT_SHIFT = 1126
_HALF = 26  # a 53-bit mantissa in two halves; a half sums exactly over 2^26 terms in float64


def exact_sum(values: Any) -> int:
    """``sum(values)`` exactly, as an integer multiple of ``2^-EXACT_SHIFT``."""
    x = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError("values to sum must be finite")
    total = 0
    for start in range(0, x.size, 1 << _HALF):
        mant, expo = np.frexp(x[start:start + (1 << _HALF)])
        ints = np.ldexp(mant, 53).astype(np.int64)  # x = ints * 2^(expo - 53), exactly
        shift = expo.astype(np.int64) - 53 + EXACT_SHIFT
        keys, inverse = np.unique(shift, return_inverse=True)
        high = ints >> _HALF
        low = ints - (high << _HALF)
        # Partial sums of integers below 2^53 are exact in float64.
        high_sums = np.bincount(inverse, weights=high, minlength=keys.size)
        low_sums = np.bincount(inverse, weights=low, minlength=keys.size)
        for k, h, lo in zip(keys.tolist(), high_sums.tolist(), low_sums.tolist(),
                            strict=True):
            total += ((int(h) << _HALF) + int(lo)) << k
    return total


def exact_to_float(total: int) -> float:
    """The double nearest to ``total * 2^-EXACT_SHIFT`` (round half to even)."""
    return total / (1 << EXACT_SHIFT)


# --------------------------------------------------------------------------- protocols


class FedAUC(Protocol):
    """Common steps of the FedAUC protocols: shuffled score upload and server ranking.

    Subclasses define the clients' local statistics (:meth:`_local_message`) and the
    server's final estimate (:meth:`_estimate`).

    Parameters
    ----------
    epsilon:
        Label-DP budget (> 0), or ``math.inf`` for the exact, non-private protocol.
    delta:
        (epsilon, delta)-LabelDP slack; used by the Gaussian mechanism only.
    n_clients:
        Number of clients K when :meth:`run` splits the samples (``partition``). ``None``
        (default) gives every sample its own client (K = M).
    partition:
        ``"iid"`` or ``"by-score"`` (004 Sec. 6.2.2), see
        :mod:`fedustat.datasets.partitions`.
    client_of_sample:
        Explicit client id per sample (overrides ``n_clients`` / ``partition``).
    noise:
        Randomness of the clients: ``None`` uses each batch's seeded generator
        (simulation); pass ``DeploymentNoise()`` when protecting real people.
    """

    name = "fedauc"
    # The noisy global statistics and what the server computes from them alone.
    released_fields = (*Protocol.released_fields, "diagnostics.global_sum",
                       "diagnostics.noisy_pos", "diagnostics.noisy_neg", "diagnostics.noisy_auc",
                       "diagnostics.estimated_pos", "diagnostics.base_rate", "diagnostics.alpha",
                       "diagnostics.beta", "diagnostics.std_error_exact_counts",
                       "diagnostics.projected_pos")
    # The simulated split of the samples into clients is public; the noise each client
    # adds (and the adaptive budget split) follows from it.
    public_coin_fields = ("diagnostics.sum_noise_var", "diagnostics.pos_noise_var",
                          "diagnostics.sum_pos_noise_cov", "diagnostics.beta_*")

    def __init__(self, epsilon: float, *, delta: float = 0.0, n_clients: int | None = None,
                 partition: str = "iid", client_of_sample: Any = None,
                 noise: NoiseSource | None = None) -> None:
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.delta = check_delta(delta)
        if n_clients is not None:
            n_clients = check_positive_int(n_clients, "n_clients")
        if partition not in PARTITIONS:
            raise ValueError(f"partition must be one of {', '.join(map(repr, PARTITIONS))}, "
                             f"got {partition!r}")
        self.partition = partition
        self.client_of_sample: np.ndarray | None = None
        if client_of_sample is not None:
            ids, k = check_client_assignment(client_of_sample, n_clients=n_clients)
            self.client_of_sample, n_clients = ids, k
        self.n_clients = n_clients
        if noise is not None and not isinstance(noise, NoiseSource):
            raise TypeError(f"noise must be a NoiseSource, got {type(noise).__name__}")
        self.noise = noise

    # ------------------------------------------------------------- guarantee
    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        if not self.private:
            return PrivacyGuarantee.none()
        return PrivacyGuarantee(self.epsilon, self._delta_used, PrivacyModel.LABEL,
                                LABEL_ADJACENCY, assumptions=self._assumptions())

    def _assumptions(self) -> tuple[Assumption, ...]:
        # Each client perturbs its own labels' statistics (004 Sec. 3): no one is trusted
        # with the labels; the scores and ranks are public to the server by the model.
        return (Assumption(Trust.LOCAL, "each client perturbs its own labels' statistics; "
                                        "the server and the other clients may be "
                                        "adversarial (scores and ranks are known to the "
                                        "server)"),)

    @property
    def _delta_used(self) -> float:
        return 0.0

    def _source(self, rng: np.random.Generator) -> NoiseSource:
        return self.noise if self.noise is not None else SimulationNoise(rng)

    # ------------------------------------------------------------- contract
    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> ClientBatch:
        """A batch of clients from rows (score, label) and the owning client of each row.

        Rows of one client may come in any order; they are grouped here.
        """
        with RecordCheck("records that are not finite numbers"):
            arr = as_float_array(data, "data", ndim=2)
        if arr.shape[1] != 2:
            raise RecordCheckError(f"data must have 2 columns (score, label), got "
                                   f"{arr.shape[1]}")
        labels = arr[:, 1]
        if not np.all((labels == 0) | (labels == 1)):
            raise RecordCheckError("labels that are not binary in column 'label'",
                                   "data's label column must be 0/1; convert the labels with "
                                   "fedustat._validation.as_binary_labels first")
        owner = np.asarray(parties)
        if owner.shape != (arr.shape[0],) or owner.dtype.kind not in "iu":
            raise ValueError("parties must give an integer client id for every row of data")
        owner = owner.astype(np.int64)
        if owner.size > 1 and np.any(owner[1:] < owner[:-1]):
            order = np.argsort(owner, kind="stable")
            arr, owner = arr[order], owner[order]
        first = np.empty(owner.size, dtype=bool)
        first[0] = True
        np.not_equal(owner[1:], owner[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        local = np.cumsum(first) - 1
        sizes = np.diff(np.append(starts, owner.size))
        return ClientBatch(scores=arr[:, 0].copy(), labels=arr[:, 1].astype(np.int8),
                           owner=owner, local=local, clients=owner[starts], sizes=sizes,
                           starts=starts)

    def init_server(self, n_parties: int) -> ServerState:
        k = check_positive_int(n_parties, "n_parties")
        if self.n_clients is not None and k != self.n_clients:
            raise ValueError(
                f"{self.name} was configured for {self.n_clients} clients but the transport "
                f"reports {k} parties. Its parties are clients holding many samples: give "
                "the transport each sample's client (simulate(..., parties=...)) or let it "
                "use the protocol's assign_parties")
        return ServerState(n_clients=k)

    def party_step(self, state: ClientBatch, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[ClientBatch, Message]:
        if state.phase == 0:
            if inbox is not None:
                raise ValueError("clients expect no message before they upload their scores")
            return self._upload_scores(state, rng)
        if state.phase == 1:
            if inbox is None or not {"rank", "rank2"} & set(inbox.fields):
                raise ValueError("clients expect the server's ranks in their second step")
            return self._receive_ranks(state, inbox, rng)
        raise RuntimeError(f"{self.name}: the clients have already sent their statistics")

    def server_step(self, state: ServerState, inbox: Message,
                    rng: np.random.Generator) -> tuple[ServerState, Message | Estimate]:
        if state.phase == 0:
            return self._rank(state, inbox)
        if state.phase == 1:
            return state, self._estimate(state, self._collect(state, inbox))
        raise RuntimeError(f"{self.name}: the server has already released its estimate")

    def dropout_rule(self, state: ServerState, round_index: int) -> DropoutRule:
        if state.phase == 0:
            # Nothing is fixed before the ranking but the clients' ids: ranking the scores
            # that arrived is this protocol's run over the clients that answered (the
            # server renumbers them, _rank), and each one's statistics are label-DP on
            # their own, calibrated to the ranks it receives among them.
            return DropoutRule(True, "the server ranks the scores that arrived: a run over "
                                     "the clients that answered (renumbered), "
                                     + self._survivors_noise())
        # The ranks were taken over every client's scores, the silent client's included:
        # the others' rank sums without its labels are not the Mann-Whitney U of any set
        # of samples (004 eq. 1), so the release would be biased.
        return DropoutRule(False, "the ranks include the silent client's scores, so the "
                                  "other clients' rank sums would give a biased AUC")

    def _survivors_noise(self) -> str:
        """How the clients' privacy is calibrated when the server ranks the scores of
        the clients that answered: said by each variant (its formula in 004)."""
        return ("each client's randomized labels are epsilon-LabelDP on their own (004 "
                "Alg. 1) and the debiasing takes M, P and N from the ranked clients' "
                "statistics (eq. 3-4)")

    # ------------------------------------------------------------- round 1: scores
    def _upload_scores(self, state: ClientBatch,
                       rng: np.random.Generator) -> tuple[ClientBatch, Message]:
        # 004 Sec. 4.2 step 1: each client sends its scores shuffled. Sorting by
        # (client index + uniform) permutes within clients and keeps clients contiguous.
        n = state.scores.size
        if state.clients.size == n:  # one sample per client: nothing to shuffle
            order = np.arange(n)
        else:
            order = np.argsort(state.local + self._source(rng).uniform(n))
        msg = Message(Role.PARTY, Role.SERVER, {"score": state.scores[order]},
                      {"score": FLOAT_BITS}, state.owner[order])
        return replace(state, phase=1, upload_order=order), msg

    # ------------------------------------------------------------- round 2: ranks
    def _rank(self, state: ServerState, inbox: Message) -> tuple[ServerState, Message]:
        # 004 Sec. 4.2 step 2 / App. H.2: rank all scores, return each rank to its sender.
        if inbox.parties is None or "score" not in inbox.fields:
            raise ValueError("the server expects the clients' scores in the first round")
        owner = np.asarray(inbox.parties, dtype=np.int64)
        k = state.n_clients
        if owner.size and (owner.min() < 0 or owner.max() >= k):
            raise ValueError(f"score rows name clients outside 0..{k - 1}")
        sizes = np.bincount(owner, minlength=k)
        clients = None
        if np.any(sizes == 0):
            # A client that sent no scores fell silent in this round (a transport goes on
            # only where dropout_rule allows it; every client holds at least one sample):
            # the run continues over the clients that answered, renumbered 0..K'-1 in id
            # order. Every per-client quantity below is over them.
            clients = np.flatnonzero(sizes)
            sizes = sizes[clients]
        scores = np.asarray(inbox.fields["score"], dtype=np.float64)
        m = scores.size
        if m < 2:
            raise ValueError("the AUC needs at least 2 samples")
        doubled, ties = _doubled_mid_ranks(scores)
        # Without ties every rank is an integer in 0..M-1 and travels as such; mid-ranks
        # travel doubled (integers in 0..2M-2), one more bit.
        if ties:
            bits, name, sent = (2 * m - 2).bit_length(), "rank2", doubled
        else:
            bits, name, sent = (m - 1).bit_length(), "rank", doubled // 2
        reply = Message(Role.SERVER, Role.PARTY, {name: sent}, {name: bits}, owner)
        ranks = doubled / 2.0
        if np.any(owner[1:] < owner[:-1]):
            order = np.argsort(owner, kind="stable")
            ranks_by_client = ranks[order]
        else:
            ranks_by_client = ranks
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        max_r, mean_r, spread = _segment_summaries(ranks_by_client, starts, sizes)
        new_state = replace(state, phase=1, n_samples=m, rank_sum=float(ranks.sum()),
                            rank_sq_sum=float(np.dot(ranks, ranks)), sizes=sizes,
                            max_rank=max_r, mean_rank=mean_r, spread=spread,
                            n_clients=int(sizes.size), clients=clients)
        return self._after_ranking(new_state), reply

    def _after_ranking(self, state: ServerState) -> ServerState:
        """Public quantities the server derives from the ranks before the last round."""
        return state

    def _receive_ranks(self, state: ClientBatch, inbox: Message,
                       rng: np.random.Generator) -> tuple[ClientBatch, Message]:
        order = state.upload_order
        received = (np.asarray(inbox.fields["rank2"], dtype=np.int64) if "rank2" in inbox.fields
                    else 2 * np.asarray(inbox.fields["rank"], dtype=np.int64))
        if order is None or received.shape != order.shape:
            raise ValueError(f"clients expected {state.scores.size} ranks, got {received.size}")
        if inbox.parties is not None and not np.array_equal(inbox.parties, state.owner[order]):
            raise ValueError("the ranks are not addressed in the order the scores were sent")
        doubled = np.empty_like(received)
        doubled[order] = received  # undo the client's shuffle
        return self._local_message(replace(state, phase=2), doubled, rng)

    # ------------------------------------------------------------- round 3
    @abstractmethod
    def _local_message(self, state: ClientBatch, doubled_ranks: np.ndarray,
                       rng: np.random.Generator) -> tuple[ClientBatch, Message]:
        """The clients' (localSum, localP, localN) from their ranks (doubled mid-ranks)."""

    @abstractmethod
    def _estimate(self, state: ServerState, stats: dict[str, np.ndarray]) -> Estimate:
        """The server's release from the aggregated client statistics."""

    def _collect(self, state: ServerState, inbox: Message) -> dict[str, np.ndarray]:
        """The clients' (localSum, localP, localN), one row per client in id order."""
        if inbox.parties is None:
            raise ValueError("the server expects one row of statistics per client")
        owner = np.asarray(inbox.parties, dtype=np.int64)
        k = state.n_clients
        # The clients whose scores were ranked (all of 0..K-1 unless some fell silent).
        ids = np.arange(k) if state.clients is None else state.clients
        order = None if np.array_equal(owner, ids) else np.argsort(owner)
        if owner.size != k or (order is not None and not np.array_equal(owner[order], ids)):
            raise ValueError(f"the server expects exactly one row of statistics from each of "
                             f"the {k} clients, got {owner.size} rows")
        stats = {}
        for name in ("local_sum", "local_pos", "local_neg"):
            values = np.asarray(inbox.fields[name], dtype=np.float64)
            stats[name] = values if order is None else values[order]
        return stats

    def _cost(self, state: ServerState) -> Cost:
        # Sorting M scores (M ceil(log2 M) comparisons) plus one addition per client row.
        m = state.n_samples
        return Cost(server_operations=int(m * max(1, (m - 1).bit_length()) + state.n_clients))

    # ------------------------------------------------- distributed server step (hooks)
    # The server's ranking is a sort of all M scores: a distributed engine sorts them
    # across workers (fedustat.runtime.engine) and hands the server only public totals.
    # The last round is a sum of the clients' statistics: FedAUC_RR sums integers; the
    # Laplace / Gaussian variants also sum the noise moments the server derives from the
    # ranks it assigned (FedAUCLap.rank_reply). A subclass without such hooks is refused.

    def distributed_round(self, state: ServerState) -> tuple[str, Any]:
        """How this round's server step splits: ``("rank", field)``, a distributed
        mid-ranking of the field ``score``, then (FedAUC_RR) ``("reduce", None)``."""
        if state.phase == 0:
            return "rank", "score"
        raise NotImplementedError(self._UNSPLIT_LAST_STEP.format(name=self.name))

    _UNSPLIT_LAST_STEP = (
        "{name}: its last server step has no distributed form (distributed_round, "
        "summarize_batch, combine_summaries, server_step_reduced); run it in process")

    def check_distributed(self) -> None:
        """Refuse, before any work, what the distributed path does not run: a last step
        that is not a sum, or a client split that needs all samples at once."""
        if type(self).distributed_round is FedAUC.distributed_round:
            raise NotImplementedError(self._UNSPLIT_LAST_STEP.format(name=self.name))
        if self.n_clients is not None or self.client_of_sample is not None:
            raise NotImplementedError(
                f"{self.name}: the distributed engine runs one client per sample (the "
                "default, K = M); a split into n_clients or client_of_sample clients needs "
                "all scores in one place to draw")

    def server_step_ranked(self, state: ServerState, summary: Any,
                           rng: np.random.Generator) -> tuple[ServerState, dict[str, Any]]:
        """The ranking round from the engine's totals: ``n`` scores, whether any tie,
        ``doubled_sum`` = sum of doubled mid-ranks and ``doubled_sq_sum`` = sum of their
        squares (exact integers). Returns the new state and the public facts every batch
        needs to write its reply (:meth:`rank_reply`)."""
        if state.phase != 0:
            raise RuntimeError(f"{self.name}: the server has already ranked the scores")
        m = int(summary["n"])
        if m < 2:
            raise ValueError("the AUC needs at least 2 samples")
        # Halving and quartering are exact: the same numbers as float(ranks.sum()) and
        # np.dot(ranks, ranks) in _rank whenever those sums are exact (M < 1.9e5), else
        # correctly rounded.
        new_state = replace(state, phase=1, n_samples=m,
                            rank_sum=float(int(summary["doubled_sum"])) / 2.0,
                            rank_sq_sum=float(int(summary["doubled_sq_sum"])) / 4.0)
        return new_state, {"n": m, "ties": bool(summary["ties"])}

    def rank_reply(self, message: Message, doubled: np.ndarray, public: Mapping[str, Any]
                   ) -> tuple[Message, Any]:
        """A batch's reply of the ranking round, as :meth:`_rank` writes it, and what the
        server keeps of that batch (its clients and their sizes) to check the next round."""
        if message.parties is None or "score" not in message.fields:
            raise ValueError("the server expects the clients' scores in the first round")
        owner = np.asarray(message.parties, dtype=np.int64)
        k = self.n_clients
        if owner.size and (owner.min() < 0 or (k is not None and owner.max() >= k)):
            raise ValueError(f"score rows name clients outside 0..{(k or 1) - 1}")
        m = int(public["n"])
        if public["ties"]:
            bits, name, sent = (2 * m - 2).bit_length(), "rank2", doubled
        else:
            bits, name, sent = (m - 1).bit_length(), "rank", doubled // 2
        clients, sizes = np.unique(owner, return_counts=True)
        return Message(Role.SERVER, Role.PARTY, {name: sent}, {name: bits}, owner), \
            {"clients": clients, "sizes": sizes}

    # ------------------------------------------------------------- driver hook
    silo_is_one_party = True

    def assign_parties(self, records: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Client id of each sample (row) from this protocol's client configuration."""
        scores = np.asarray(records)[:, 0]
        m = scores.size
        if self.client_of_sample is not None:
            ids, _ = check_client_assignment(self.client_of_sample, n_samples=m,
                                             n_clients=self.n_clients)
            return ids
        if self.n_clients is None:
            return np.arange(m, dtype=np.int64)
        return partition_clients(scores, self.n_clients, self.partition, rng)

    def configure(self, n_rows: int) -> FedAUC:
        """This protocol configured for a run on ``n_rows`` samples (public M)."""
        return self


class FedAUCRR(FedAUC):
    """FedAUC_RR: randomized-response labels, debiased AUC (004 Sec. 4, Alg. 1-3, App. P).

    Each client flips every label once with probability ``rho = 1/(1+e^eps)`` (Alg. 1,
    eq. 2: epsilon-LabelDP), computes localSum, localP, localN on the flipped labels
    (Alg. 2) and the server debiases the noisy AUC with eq. 3 and alpha, beta of eq. 4
    at the estimated base rate pi' (App. P eq. 11-12; Alg. 3 line 6 prints ``pi`` where
    ``pi'`` is meant). The flipped labels are drawn when the clients first use them and
    kept in their state, so repeated evaluations reuse them (Sec. 4.1).

    The standard error is the delta-method one of
    :func:`~fedustat.protocols.fedauc.variance.rr_linearized_std` (noisy counts and the
    division by 1 - alpha - beta included), evaluated at the released values.
    """

    name = "fedauc-rr"

    def _local_message(self, state: ClientBatch, doubled_ranks: np.ndarray,
                       rng: np.random.Generator) -> tuple[ClientBatch, Message]:
        noisy = state.noisy_labels
        if noisy is None:
            if self.private:
                flips = BinaryRandomizedResponse(self.epsilon)
                noisy = flips.randomize(state.labels, self._source(rng)).astype(np.int8)
            else:
                noisy = state.labels
        # Alg. 2 lines 14-22, with the rank sum kept doubled (an integer) until the end.
        twice_sum = _client_sums(doubled_ranks * noisy, state)
        local_pos = _client_sums(noisy, state)
        fields = {"local_sum": twice_sum / 2.0, "local_pos": local_pos,
                  "local_neg": state.sizes - local_pos}
        msg = Message(Role.PARTY, Role.SERVER, fields, dict.fromkeys(fields, INT_BITS),
                      state.clients)
        return replace(state, noisy_labels=noisy), msg

    def distributed_round(self, state: ServerState) -> tuple[str, Any]:
        """Ranking (as :class:`FedAUC`), then a sum of the clients' statistics."""
        if state.phase == 1:
            return "reduce", None
        return super().distributed_round(state)

    def summarize_batch(self, message: Message, context: Any, memory: Any = None) -> Any:
        """A batch's exact integer totals of (2 localSum, localP, localN), after the checks
        of :meth:`_collect` and :meth:`_estimate` on its clients (``memory`` from
        :meth:`rank_reply`: the batch's clients and sizes)."""
        if message.parties is None or memory is None:
            raise ValueError("the server expects one row of statistics per client")
        owner = np.asarray(message.parties, dtype=np.int64)
        order = np.argsort(owner, kind="stable")
        if not np.array_equal(owner[order], memory["clients"]):
            raise ValueError(f"the server expects exactly one row of statistics from each of "
                             f"the batch's {memory['clients'].size} clients, got "
                             f"{owner.size} rows")
        pos = np.asarray(message.fields["local_pos"], dtype=np.float64)[order]
        neg = np.asarray(message.fields["local_neg"], dtype=np.float64)[order]
        if not np.array_equal(pos + neg, memory["sizes"]):
            raise ValueError("a client's localP + localN differs from its number of samples")
        # RR's statistics are whole (localSum a multiple of 1/2): integer sums are exact.
        twice = as_int_array(2.0 * np.asarray(message.fields["local_sum"], np.float64),
                             "2 localSum")
        return {"sum2": int(twice.sum()), "pos": int(as_int_array(pos, "localP").sum()),
                "neg": int(as_int_array(neg, "localN").sum())}

    @staticmethod
    def combine_summaries(left: Any, right: Any) -> Any:
        """Sum of two batches' totals (exact integers: associative)."""
        return {key: left[key] + right[key] for key in left}

    def server_step_reduced(self, state: ServerState, summary: Any,
                            rng: np.random.Generator) -> tuple[ServerState, Estimate]:
        """The last server step (Alg. 3) from the engine's totals."""
        if state.phase != 1:
            raise RuntimeError(f"{self.name}: the server expects the ranking round first")
        pos, neg = int(summary["pos"]), int(summary["neg"])
        if pos + neg != state.n_samples:
            raise ValueError(f"the clients' localP + localN add up to {pos + neg}, but "
                             f"{state.n_samples} scores were ranked")
        return state, self._release(state, float(summary["sum2"]) / 2.0, float(pos),
                                    float(neg))

    def _estimate(self, state: ServerState, stats: dict[str, np.ndarray]) -> Estimate:
        if not np.array_equal(stats["local_pos"] + stats["local_neg"], state.sizes):
            raise ValueError("a client's localP + localN differs from its number of samples")
        return self._release(state, float(stats["local_sum"].sum()),
                             float(stats["local_pos"].sum()), float(stats["local_neg"].sum()))

    def _release(self, state: ServerState, global_sum: float, p_bar: float,
                 n_bar: float) -> Estimate:
        """The release from the global sums ``globalSum``, ``P-bar``, ``N-bar`` (Alg. 3)."""
        m = state.n_samples
        diagnostics: dict[str, Any] = {"global_sum": global_sum, "noisy_pos": p_bar,
                                       "noisy_neg": n_bar, "n_samples": m,
                                       "n_clients": state.n_clients}
        # Alg. 2 line 30 (eq. 1) on the noisy labels (undefined when they hold one class).
        noisy_auc = ((global_sum - p_bar * (p_bar - 1.0) / 2.0) / (p_bar * n_bar)
                     if 0 < p_bar < m else None)
        diagnostics["noisy_auc"] = noisy_auc
        error: ErrorDistribution | None = None
        if not self.private:
            value, std_error = noisy_auc, 0.0
        else:
            # Alg. 3 line 8 (eq. 3) with alpha, beta of eq. 4 at pi', in the form of
            # rr_debiased_auc: defined at every noisy count, with the estimated positives
            # P' projected onto [1, M - 1] (both classes are present: the AUC needs them).
            debiased = rr_debiased_auc(global_sum, p_bar, m, self.epsilon)
            value = debiased.value
            rho = flip_probability(self.epsilon)
            if debiased.projected_pos != debiased.estimated_pos or not 0 < p_bar < m:
                warnings.warn(
                    f"{self.name}: the randomized labels estimate {debiased.estimated_pos:.4g} "
                    f"positives of {m} (noisy positives {p_bar:g}); the estimate is "
                    f"projected to {debiased.projected_pos:g} and the AUC is mostly noise. "
                    "Use a larger epsilon or more samples.", RuntimeWarning, stacklevel=2)
                diagnostics["projected_pos"] = debiased.projected_pos
            std_error = rr_linearized_std(global_sum, p_bar, m, state.rank_sum,
                                          state.rank_sq_sum, self.epsilon)
            # Linearized, the error is a weighted sum of the M independent label
            # flips (variance.rr_linearized_std): normal by Lyapunov's CLT, the
            # weights (ranks) being bounded by M.
            error = NormalError(std_error)
            pi = debiased.projected_pos / m
            # eq. 4 at pi' (App. P): the denominators are P_bar / M and N_bar / M.
            diagnostics.update(
                flip_probability=rho, estimated_pos=debiased.estimated_pos, base_rate=pi,
                alpha=(1.0 - pi) * rho * m / p_bar if p_bar > 0 else None,
                beta=pi * rho * m / n_bar if n_bar > 0 else None)
        estimate = Estimate(value=float(value), quantity="auc", protocol=self.name,
                            privacy=self.guarantee, std_error=float(std_error), error=error,
                            cost=self._cost(state), diagnostics=diagnostics)
        # In range on every transport: the clip is part of the server's release step.
        return in_statistic_range(estimate, _AUC)


class FedAUCLap(FedAUC):
    """FedAUC_Lap: clients perturb localSum and localP (004 Sec. 5, Alg. 4).

    Parameters
    ----------
    epsilon, delta, n_clients, partition, client_of_sample, noise:
        As for :class:`FedAUC`.
    sensitivity:
        ``"local"`` (LocalLaplace, Sec. 5.2: client k's localSum sensitivity is its largest
        rank) or ``"global"`` (GlobalLaplace, App. N: M - 1 for every client).
    allocation:
        ``"fixed"``: ``epsilon_localSum = alpha eps``, ``epsilon_localP = (1 - alpha) eps``
        (Sec. 5.2). ``"orthogonal"``: orthogonalization (Sec. 5.3) with one budget share
        ``beta`` for the count at every client ("Orthogonal" of Sec. 6.2.2 and Fig. 1c;
        beta needs tuning, e.g. on validation data). ``"adaptive"``: orthogonalization
        and per-client beta (Sec. 5.3, :func:`adaptive_split`). In both the sensitivity
        of ``<v', y>`` is ``||v'||_inf``.
    alpha:
        Budget share of localSum for ``"fixed"``, in (0, 1); the paper uses 0.5.
    beta:
        Budget share of the count ``<u, y>`` for ``"orthogonal"``, in (0, 1).
    mechanism:
        ``"laplace"`` (pure epsilon-LabelDP) or ``"gaussian"`` ((epsilon, delta)-LabelDP,
        ``delta > 0``). The Gaussian variant releases the pair of statistics with one
        Gaussian mechanism: noise ``sigma_j`` on statistic j with
        ``sum_j (Delta_j / sigma_j)^2 = 1 / sigma_1^2``, sigma_1 the analytic Gaussian
        scale for sensitivity 1 (Balle & Wang 2018), and alpha (or beta) the share of
        ``1 / sigma_1^2`` given to localSum (or to the count). This is tighter than
        splitting epsilon and delta between two mechanisms.
    n_samples:
        The public number of samples M; GlobalLaplace's sensitivity M - 1 needs it.
        The transport sets it from the data (``configure``) when it is ``None``.

    Each client adds noise to two linear statistics of its labels (a
    :class:`ReleasePlan`); the standard error is
    :func:`~fedustat.protocols.fedauc.variance.laplace_linearized_std` with the noise
    variances the server can compute from the ranks it assigned.
    """

    def __init__(self, epsilon: float, *, delta: float = 0.0,
                 sensitivity: Sensitivity = "local", allocation: Allocation = "fixed",
                 alpha: float = 0.5, mechanism: Mechanism = "laplace",
                 n_samples: int | None = None, n_clients: int | None = None,
                 partition: str = "iid", client_of_sample: Any = None,
                 noise: NoiseSource | None = None, beta: float = 0.5) -> None:
        super().__init__(epsilon, delta=delta, n_clients=n_clients, partition=partition,
                         client_of_sample=client_of_sample, noise=noise)
        if sensitivity not in ("local", "global"):
            raise ValueError(f"sensitivity must be 'local' or 'global', got {sensitivity!r}")
        if allocation not in ("fixed", "orthogonal", "adaptive"):
            raise ValueError("allocation must be 'fixed', 'orthogonal' or 'adaptive', got "
                             f"{allocation!r}")
        if allocation != "fixed" and sensitivity != "local":
            raise ValueError(f"allocation={allocation!r} uses each client's own ranks; it "
                             "needs sensitivity='local'")
        if mechanism not in ("laplace", "gaussian"):
            raise ValueError(f"mechanism must be 'laplace' or 'gaussian', got {mechanism!r}")
        self.sensitivity = sensitivity
        self.allocation = allocation
        self.alpha = check_probability(alpha, "alpha", open_left=True, open_right=True)
        self.beta = check_probability(beta, "beta", open_left=True, open_right=True)
        self.mechanism = mechanism
        self.n_samples = (None if n_samples is None
                          else check_positive_int(n_samples, "n_samples", minimum=2))
        self._unit_sigma = 0.0
        if mechanism == "gaussian" and self.private:
            if self.delta == 0.0:
                raise ValueError("mechanism='gaussian' needs delta > 0 ((epsilon, delta)-"
                                 "LabelDP); use mechanism='laplace' for pure epsilon")
            self._unit_sigma = GaussianMechanism(1.0, self.epsilon, self.delta).sigma
        if allocation != "fixed":
            self.name = f"fedauc-{allocation}" + ("-gaussian" if mechanism == "gaussian" else "")
        elif mechanism == "gaussian":
            self.name = "fedauc-gaussian" + ("-global" if sensitivity == "global" else "")
        else:
            self.name = f"fedauc-laplace-{sensitivity}"

    @property
    def _delta_used(self) -> float:
        return self.delta if self.mechanism == "gaussian" else 0.0

    def _assumptions(self) -> tuple[Assumption, ...]:
        base = super()._assumptions()
        if self.sensitivity == "global":
            # The noise is calibrated to M - 1, not to the ranks a client receives: a
            # server sending larger ranks would break the guarantee (App. N).
            return (*base, semi_honest("server (it returns the true ranks 0..M-1)"))
        return base

    def _survivors_noise(self) -> str:
        mechanism = "Laplace" if self.mechanism == "laplace" else "Gaussian"
        if self.allocation != "fixed":
            return (f"each client's {mechanism} noise calibrated to its own ranks among them "
                    "(004 Sec. 5.3: ||u'||_inf, ||v'||_inf and the budget split beta), the "
                    "server's noise variances to the same ranks and the estimator's M to "
                    "the scores ranked")
        if self.sensitivity == "local":
            return (f"each client's {mechanism} noise on localSum calibrated to its largest "
                    "rank among them (004 Sec. 5.2, LocalLaplace) and on localP to 1, the "
                    "server's noise variances to the same ranks and the estimator's M to "
                    "the scores ranked")
        # The clients cannot learn the survivors' count M' (no message carries it): they
        # keep M - 1, the bound of App. N for the M samples fixed at the start, which
        # bounds every rank of the survivors' ranking (at most M' - 1 <= M - 1).
        return (f"each client's {mechanism} noise on localSum calibrated to M - 1 for the "
                "public M fixed at the start (004 App. N, GlobalLaplace), which bounds every "
                "rank among them: the guarantee holds, with the noise of M samples; the "
                "server's noise variances use the same M - 1 and the estimator's M the "
                "scores ranked")

    def configure(self, n_rows: int) -> FedAUCLap:
        # A declared n_samples that the data contradict is refused whatever the
        # sensitivity (with the local one it would otherwise be ignored silently).
        if self.n_samples is not None and self.n_samples != n_rows:
            raise ValueError(f"the protocol was configured for n_samples={self.n_samples} but "
                             f"the data have {n_rows} samples")
        if self.sensitivity != "global" or self.n_samples is not None:
            return self
        prepared = copy.copy(self)
        prepared.n_samples = n_rows
        return prepared

    # ------------------------------------------------------------- noise scales
    def _scales(self, max_rank: np.ndarray, mean_rank: np.ndarray, spread: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Per-client noise scales of (X_0, X_1), the factor lam and beta (adaptive)."""
        k = max_rank.size
        if not self.private:
            lam = mean_rank.copy() if self.allocation != "fixed" else np.zeros(k)
            return np.zeros((2, k)), lam, None
        laplace = self.mechanism == "laplace"
        if self.allocation != "fixed":
            # Sec. 5.3: X_0 = <u, y> + s1, X_1 = <v', y> + ||v'||_inf s2.
            beta = (adaptive_split(mean_rank, spread, self.mechanism)
                    if self.allocation == "adaptive" else np.full(k, self.beta))
            rest = 1.0 - beta
            with np.errstate(divide="ignore", invalid="ignore"):
                if laplace:
                    s0 = 1.0 / (beta * self.epsilon)
                    s1 = np.where(spread > 0, spread / (rest * self.epsilon), 0.0)
                else:
                    s0 = self._unit_sigma / np.sqrt(beta)
                    s1 = np.where(spread > 0, spread * self._unit_sigma / np.sqrt(rest), 0.0)
            return np.vstack([s0, s1]), mean_rank.copy(), beta
        if self.sensitivity == "global":
            if self.n_samples is None:
                raise ValueError("GlobalLaplace needs the public number of samples M "
                                 "(n_samples); run it through a transport or set n_samples")
            delta_sum = np.full(k, float(self.n_samples - 1))
        else:
            delta_sum = max_rank  # Sec. 5.2 item 1: the client's largest rank
        if laplace:
            s0 = np.full(k, 1.0 / ((1.0 - self.alpha) * self.epsilon))
            s1 = delta_sum / (self.alpha * self.epsilon)
        else:
            s0 = np.full(k, self._unit_sigma / math.sqrt(1.0 - self.alpha))
            s1 = delta_sum * self._unit_sigma / math.sqrt(self.alpha)
        return np.vstack([s0, s1]), np.zeros(k), None

    def release_plan(self, ranks: np.ndarray, local: np.ndarray, starts: np.ndarray,
                     sizes: np.ndarray) -> ReleasePlan:
        """The statistics and noise scales of a batch of clients (see :class:`ReleasePlan`).

        ``ranks`` are the samples' ranks grouped by client (``local`` the client index of
        each sample, ``starts`` / ``sizes`` the client segments).
        """
        max_r, mean_r, spread = _segment_summaries(ranks, starts, sizes)
        scales, lam, beta = self._scales(max_r, mean_r, spread)
        coefficients = ranks - mean_r[local] if self.allocation != "fixed" else ranks
        return ReleasePlan(sum_coefficients=coefficients, scales=scales, lam=lam, beta=beta)

    def _local_message(self, state: ClientBatch, doubled_ranks: np.ndarray,
                       rng: np.random.Generator) -> tuple[ClientBatch, Message]:
        ranks = doubled_ranks / 2.0
        plan = self.release_plan(ranks, state.local, state.starts, state.sizes)
        y = state.labels
        x0 = _client_sums(y, state)
        x1 = _client_sums(plan.sum_coefficients * y, state)
        if self.private:
            noise = _scaled_noise(self._source(rng), self.mechanism, plan.scales)
            x0, x1 = x0 + noise[0], x1 + noise[1]
        # Alg. 4 lines 23-25 (Sec. 5.3 for the adaptive post-processing of localSum').
        local_pos = x0
        local_sum = plan.lam * x0 + x1
        fields = {"local_sum": local_sum, "local_pos": local_pos,
                  "local_neg": state.sizes - local_pos}
        msg = Message(Role.PARTY, Role.SERVER, fields, dict.fromkeys(fields, FLOAT_BITS),
                      state.clients)
        return state, msg

    def _after_ranking(self, state: ServerState) -> ServerState:
        """``Var(globalSum noise)``, ``Var(P-bar noise)``, their covariance, and beta.

        The server computes them from the ranks it assigned (public), per client:
        ``localSum' - localSum = lam s_0 + s_1``, ``localP' - localP = s_0``.
        """
        if state.max_rank is None or state.mean_rank is None or state.spread is None:
            raise RuntimeError("the server has not ranked the scores yet")
        scales, lam, beta = self._scales(state.max_rank, state.mean_rank, state.spread)
        var = 2.0 * scales**2 if self.mechanism == "laplace" else scales**2
        var_pos = float(var[0].sum())
        cov = float(np.dot(lam, var[0]))
        var_sum = float(np.dot(lam * lam, var[0]) + var[1].sum())
        return replace(state, noise_moments=(var_sum, var_pos, cov), beta=beta,
                       noise_scales=scales, lam=lam)

    # ------------------------------------------------- distributed server step (hooks)
    # The server's noise moments (_after_ranking) are sums over clients of functions of
    # each client's ranks, and the release needs the sums of the clients' statistics: the
    # engine computes a batch's moments where its ranks are (rank_reply, kept with the
    # batch), reduces them with the statistics in the last round, and the driver
    # releases from the totals. Sums of doubles are exact (exact_sum), so the totals do
    # not depend on the batching; in process they are pairwise float sums, equal to
    # within their rounding (about log2(K) * 2^-53 relative).

    def distributed_round(self, state: ServerState) -> tuple[str, Any]:
        """Ranking (as :class:`FedAUC`), then a sum of the clients' statistics and of
        the server's per-client noise moments."""
        if state.phase == 1:
            return "reduce", None
        return super().distributed_round(state)

    def rank_reply(self, message: Message, doubled: np.ndarray, public: Mapping[str, Any]
                   ) -> tuple[Message, Any]:
        """As :meth:`FedAUC.rank_reply`, and the batch's share of :meth:`_after_ranking`:
        exact sums over its clients of the noise variances ``v_0``, ``lam v_0``,
        ``lam^2 v_0``, ``v_1`` (v = 2 s^2 for Laplace, s^2 for Gaussian), the range of
        lam, the largest scales, and the sum and range of beta (adaptive)."""
        reply, memory = super().rank_reply(message, doubled, public)
        owner = np.asarray(message.parties, dtype=np.int64)
        ranks = np.asarray(doubled)[np.argsort(owner, kind="stable")] / 2.0
        sizes = memory["sizes"]
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        scales, lam, beta = self._scales(*_segment_summaries(ranks, starts, sizes))
        var = 2.0 * scales**2 if self.mechanism == "laplace" else scales**2
        memory["noise"] = {
            "var_pos": exact_sum(var[0]), "cov": exact_sum(lam * var[0]),
            "var_sum": exact_sum(lam * lam * var[0]) + exact_sum(var[1]),
            "lam_min": float(lam.min()), "lam_max": float(lam.max()),
            "s0_max": float(scales[0].max()), "s1_max": float(scales[1].max()),
            "beta": None if beta is None else (exact_sum(beta), float(beta.min()),
                                               float(beta.max()))}
        return reply, memory

    def summarize_batch(self, message: Message, context: Any, memory: Any = None) -> Any:
        """A batch's exact sums of (localSum, localP, localN) after the check of
        :meth:`_collect` on its clients, with its noise moments from :meth:`rank_reply`."""
        if message.parties is None or memory is None:
            raise ValueError("the server expects one row of statistics per client")
        owner = np.asarray(message.parties, dtype=np.int64)
        if not np.array_equal(np.sort(owner), memory["clients"]):
            raise ValueError(f"the server expects exactly one row of statistics from each of "
                             f"the batch's {memory['clients'].size} clients, got "
                             f"{owner.size} rows")
        sums = {name: exact_sum(np.asarray(message.fields[name], dtype=np.float64))
                for name in ("local_sum", "local_pos", "local_neg")}
        return {**sums, **memory["noise"]}

    @staticmethod
    def combine_summaries(left: Any, right: Any) -> Any:
        """Two batches' totals: exact integer sums, minima and maxima (associative)."""
        out = {key: left[key] + right[key] for key in
               ("local_sum", "local_pos", "local_neg", "var_pos", "cov", "var_sum")}
        out.update(lam_min=min(left["lam_min"], right["lam_min"]),
                   lam_max=max(left["lam_max"], right["lam_max"]),
                   s0_max=max(left["s0_max"], right["s0_max"]),
                   s1_max=max(left["s1_max"], right["s1_max"]))
        a, b = left["beta"], right["beta"]
        out["beta"] = None if a is None else (a[0] + b[0], min(a[1], b[1]), max(a[2], b[2]))
        return out

    def server_step_reduced(self, state: ServerState, summary: Any,
                            rng: np.random.Generator) -> tuple[ServerState, Estimate]:
        """The last server step (Alg. 4 lines 30-33) from the engine's totals."""
        if state.phase != 1:
            raise RuntimeError(f"{self.name}: the server expects the ranking round first")
        var_sum, var_pos, cov = (exact_to_float(summary[key])
                                 for key in ("var_sum", "var_pos", "cov"))
        state = replace(state, noise_moments=(var_sum, var_pos, cov))
        beta = summary["beta"]
        beta_stats = (None if beta is None
                      else (exact_to_float(beta[0]) / state.n_clients, beta[1], beta[2]))

        def laplace_law(g_sum: float, g_pos: float) -> ErrorDistribution:
            # laplace_sum of the coefficients b of the in-process law without the
            # coefficients themselves: sum 2 b^2 = g_G^2 Var(G) + 2 g_G g_P Cov + g_P^2
            # Var(P) (the noise variances are 2 s^2), and the largest b is at an end of
            # lam's range (|g_G lam + g_P| is convex in lam).
            top0 = max(abs(g_sum * summary["lam_min"] + g_pos),
                       abs(g_sum * summary["lam_max"] + g_pos)) * summary["s0_max"]
            top = max(top0, abs(g_sum) * summary["s1_max"])
            total = max(g_sum**2 * var_sum + 2.0 * g_sum * g_pos * cov + g_pos**2 * var_pos,
                        0.0)
            if top == 0.0:
                return NormalError(0.0)
            if 2.0 * top**2 <= NORMAL_SHARE * total:
                return NormalError(math.sqrt(total))
            raise NotImplementedError(
                f"{self.name}: a few clients' Laplace noise dominates this release's error "
                f"(one carries more than {NORMAL_SHARE:g} of its variance), so its law is "
                "the exact sum of every client's Laplace term, which needs every client's "
                "noise scale in one place; run it in process (fedustat.runtime.simulate)")

        return state, self._release(state, exact_to_float(summary["local_sum"]),
                                    exact_to_float(summary["local_pos"]),
                                    exact_to_float(summary["local_neg"]), laplace_law,
                                    beta_stats)

    def _estimate(self, state: ServerState, stats: dict[str, np.ndarray]) -> Estimate:
        if state.noise_moments is None or state.noise_scales is None or state.lam is None:
            raise RuntimeError("the server has not ranked the scores yet")
        scales, lam = state.noise_scales, state.lam
        beta = state.beta
        beta_stats = (None if beta is None
                      else (float(beta.mean()), float(beta.min()), float(beta.max())))

        def laplace_law(g_sum: float, g_pos: float) -> ErrorDistribution:
            # A_hat - A ~= g_G e_G + g_P e_P with e_G = sum_k (lam_k s0_k + s1_k) and
            # e_P = sum_k s0_k, i.e. sum_k (g_G lam_k + g_P) s0_k + g_G s1_k over the
            # clients' independent noises: normal when many comparable clients add up
            # (CLT), the exact Laplace sum when a few clients dominate (laplace_sum).
            coef0 = np.abs(g_sum * lam + g_pos) * scales[0]
            coef1 = abs(g_sum) * scales[1]
            return laplace_sum(np.concatenate([coef0, coef1]))

        return self._release(state, float(stats["local_sum"].sum()),
                             float(stats["local_pos"].sum()), float(stats["local_neg"].sum()),
                             laplace_law, beta_stats)

    def _release(self, state: ServerState, global_sum: float, p_bar: float, n_bar: float,
                 laplace_law: Any, beta_stats: tuple[float, float, float] | None) -> Estimate:
        """The release from the global sums (Alg. 4 lines 30-33); ``laplace_law(g_G, g_P)``
        gives the error law of the Laplace noise at the gradient of eq. 1,
        ``beta_stats`` the mean, min and max of the adaptive split (None when fixed)."""
        m = state.n_samples
        diagnostics: dict[str, Any] = {"global_sum": global_sum, "noisy_pos": p_bar,
                                       "noisy_neg": n_bar, "n_samples": m,
                                       "n_clients": state.n_clients}
        if not 0.0 < p_bar < m:
            # With one client per sample the noise on P is a sum of M client noises and
            # can push P outside (0, M) (fedauc-gaussian, M = 400, eps = 1: 6% of runs),
            # where eq. 1 is undefined. Both classes are present (the AUC needs it), so
            # 1 <= P <= M - 1: projecting the noisy count onto that interval is
            # post-processing and moves it no farther from the true P. The interval below
            # is then very wide, as it should be.
            clamped = min(max(p_bar, 1.0), m - 1.0)
            warnings.warn(
                f"{self.name}: the noisy positive count {p_bar:g} is outside (0, {m}); it "
                f"is projected to {clamped:g} and the AUC is mostly noise. Use a larger "
                "epsilon or fewer, larger clients.", RuntimeWarning, stacklevel=2)
            diagnostics["projected_pos"] = clamped
            p_bar, n_bar = clamped, m - clamped
        # Alg. 4 line 33 (eq. 1) with the noisy counts.
        value = (global_sum - p_bar * (p_bar - 1.0) / 2.0) / (p_bar * n_bar)
        if state.noise_moments is None:
            raise RuntimeError("the server has not ranked the scores yet")
        var_sum, var_pos, cov = state.noise_moments
        std_error = laplace_linearized_std(global_sum, p_bar, m, var_sum, var_pos, cov)
        g_sum, _ = auc_gradient(global_sum, p_bar, m)  # dA/dG = 1 / (P N)
        # Error law of the linearized release (delta method, 004 Sec. 5.1 step 4): a
        # weighted sum of the clients' independent noises, G's and P's. Gaussian noise:
        # that sum is normal exactly; Laplace: see laplace_law. Its weight on P's noise,
        # dA/dP = -((P - 1/2) + A (N - P)) / (P N), involves the unknown AUC A: at the
        # released A a large error would widen its own interval (95.3-98.4% coverage at
        # M = 2000-20000 samples, eps 0.25-1, one client per sample), so the law is that of
        # the test inversion over A in [0, 1] (inverted_error_law), which covers at its
        # level.
        error: ErrorDistribution | None = None
        if self.private:
            def law_at(auc: float) -> ErrorDistribution:
                # The law at dA/dP for the AUC ``auc`` and the released counts.
                grad_pos = -((p_bar - 0.5) + auc * (n_bar - p_bar)) / (p_bar * n_bar)
                if self.mechanism == "gaussian":
                    var = (g_sum**2 * var_sum + 2.0 * g_sum * grad_pos * cov
                           + grad_pos**2 * var_pos)
                    return NormalError(math.sqrt(max(var, 0.0)))
                return laplace_law(g_sum, grad_pos)

            error = inverted_error_law(float(value), law_at)
            std_error = error.std
        diagnostics.update(sum_noise_var=var_sum, pos_noise_var=var_pos,
                           sum_pos_noise_cov=cov,
                           std_error_exact_counts=abs(g_sum) * math.sqrt(var_sum))
        if self.allocation == "fixed":
            diagnostics.update(alpha=self.alpha)
        elif beta_stats is not None:
            diagnostics.update(beta_mean=beta_stats[0], beta_min=beta_stats[1],
                               beta_max=beta_stats[2])
        estimate = Estimate(value=float(value), quantity="auc", protocol=self.name,
                            privacy=self.guarantee, std_error=float(std_error), error=error,
                            cost=self._cost(state), diagnostics=diagnostics)
        # In range on every transport: the clip is part of the server's release step.
        return in_statistic_range(estimate, _AUC)


# --------------------------------------------------------------------------- driver


# --------------------------------------------------------------------------- registry


def _check_auc_kernel(kernel: Kernel) -> None:
    if not isinstance(kernel, Kernel) or kernel.name != "auc":
        name = getattr(kernel, "name", type(kernel).__name__)
        raise ValueError(f"the FedAUC protocols compute the AUC; they need the AUC kernel "
                         f"(fedustat.stats.auc_kernel()), got {name!r}")


def _rr(kernel: Kernel, *, epsilon: float, delta: float = 0.0, n_clients: int | None = None,
        partition: str = "iid", client_of_sample: Any = None,
        noise: NoiseSource | None = None) -> FedAUCRR:
    _check_auc_kernel(kernel)
    # Randomized response is pure epsilon-LabelDP; an allowed delta is not used.
    return FedAUCRR(epsilon, n_clients=n_clients, partition=partition,
                    client_of_sample=client_of_sample, noise=noise)


def _lap_factory(sensitivity: Sensitivity, allocation: Allocation) -> Any:
    def factory(kernel: Kernel, *, epsilon: float, delta: float = 0.0, alpha: float = 0.5,
                mechanism: Mechanism = "laplace", n_samples: int | None = None,
                n_clients: int | None = None, partition: str = "iid",
                client_of_sample: Any = None, noise: NoiseSource | None = None) -> FedAUCLap:
        _check_auc_kernel(kernel)
        return FedAUCLap(epsilon, delta=delta, sensitivity=sensitivity, allocation=allocation,
                         alpha=alpha, mechanism=mechanism, n_samples=n_samples,
                         n_clients=n_clients, partition=partition,
                         client_of_sample=client_of_sample, noise=noise)
    return factory


def _gaussian(kernel: Kernel, *, epsilon: float, delta: float = 0.0, alpha: float = 0.5,
              sensitivity: Sensitivity = "local", n_samples: int | None = None,
              n_clients: int | None = None, partition: str = "iid",
              client_of_sample: Any = None, noise: NoiseSource | None = None) -> FedAUCLap:
    _check_auc_kernel(kernel)
    return FedAUCLap(epsilon, delta=delta, sensitivity=sensitivity, allocation="fixed",
                     alpha=alpha, mechanism="gaussian", n_samples=n_samples,
                     n_clients=n_clients, partition=partition,
                     client_of_sample=client_of_sample, noise=noise)


_SOURCE = "004 (Sun et al., FedAUC)"
register("fedauc-rr", _rr, model=PrivacyModel.LABEL,
         summary="clients flip labels by randomized response; server debiases the AUC",
         source=f"{_SOURCE} Sec. 4, Alg. 1-3, App. P")
_local = _lap_factory("local", "fixed")
register("fedauc-laplace-local", _local, model=PrivacyModel.LABEL,
         summary="clients add Laplace noise to localSum (own max rank) and localP",
         source=f"{_SOURCE} Sec. 5.2, Alg. 4")
register("fedauc-laplace", _local, model=PrivacyModel.LABEL,
         summary="alias of fedauc-laplace-local",
         source=f"{_SOURCE} Sec. 5.2, Alg. 4")
register("fedauc-laplace-global", _lap_factory("global", "fixed"),
         model=PrivacyModel.LABEL,
         summary="clients add Laplace noise to localSum (sensitivity M - 1) and localP",
         source=f"{_SOURCE} Sec. 6.2.2, App. N")
register("fedauc-gaussian", _gaussian, model=PrivacyModel.LABEL,
         summary="clients add Gaussian noise to localSum and localP ((eps, delta)-LabelDP)",
         source=f"{_SOURCE} Sec. 5 (Gaussian variant); Balle & Wang 2018")
register("fedauc-adaptive", _lap_factory("local", "adaptive"), model=PrivacyModel.LABEL,
         summary="orthogonalized localSum with a per-client budget split beta",
         source=f"{_SOURCE} Sec. 5.3")
