"""Local randomizers: binary and k-ary randomized response, Hadamard response.

Frequency oracles (:class:`FrequencyOracle`: Hadamard response here, subset selection in
:mod:`fedustat.privacy.frequency_oracles`) also share one reducible server summary and
one exact variance formula, so a protocol can pick among them by variance.

Each randomizer is pure ``epsilon``-LDP (paper 000, Sec. 2.2, Definition 2) and exposes

* ``randomize(x, rng)``: vectorized over a batch of parties (first axis = party);
* ``output_distribution(x)``: the exact probability of every output for input ``x``,
  outputs enumerated in a documented order, so that :func:`fedustat.privacy.verify.verify_ldp`
  can check the ``e^epsilon`` ratio exactly (ARCHITECTURE.md, principle 5);
* ``input_domain``, ``output_size`` and ``guarantee`` (model LOCAL, any two inputs);
* the paper's unbiased server-side estimator and its exact variance.

Inputs are category codes ``0, ..., size - 1``; a scalar is a batch of one.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import (
    RandomLike,
    as_int_array,
    check_consistent_length,
    check_epsilon,
    check_positive_int,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.noise import NoiseSource, as_noise

special = lazy_module("scipy.special")

__all__ = [
    "BinaryRandomizedResponse",
    "FrequencyOracle",
    "HadamardResponse",
    "KaryRandomizedResponse",
    "LocalRandomizer",
    "OracleSummary",
    "fwht",
]

_LDP_ADJACENCY = "any two inputs"


def _as_codes(x: Any, size: int, name: str = "x") -> np.ndarray:
    """Category codes in ``{0, ..., size - 1}`` as a 1-d int64 array (scalar -> batch of one)."""
    arr = np.asarray(x)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.dtype == bool:
        arr = arr.astype(np.int64)
    codes = as_int_array(arr, name)
    lo, hi = int(codes.min()), int(codes.max())
    if lo < 0 or hi >= size:
        raise ValueError(f"{name} has values outside the input domain {{0, ..., {size - 1}}} "
                         f"(min {lo}, max {hi}); encode the inputs as codes 0..{size - 1}")
    return codes


def _parity(v: np.ndarray) -> np.ndarray:
    """Parity of the number of set bits of each non-negative int64 (vectorized XOR folding)."""
    v = v.astype(np.int64, copy=True)
    for shift in (32, 16, 8, 4, 2, 1):
        v ^= v >> shift
    return v & 1


def _is_power_of_two(d: int) -> bool:
    return d >= 1 and d & (d - 1) == 0


def fwht(values: Any) -> np.ndarray:
    """Fast Walsh-Hadamard transform along the last axis, in O(d log d).

    Computes ``values @ H`` for the unnormalized Sylvester-ordered Hadamard matrix
    ``H[i, j] = (-1)^popcount(i & j)`` (``scipy.linalg.hadamard(d)``), vectorized over
    any leading axes. Integer input stays integer (exact); ``fwht(fwht(a)) == d * a``.

    Parameters
    ----------
    values:
        Array whose last axis has a power-of-two length ``d``.
    """
    a = np.asarray(values)
    if a.ndim == 0 or a.size == 0:
        raise ValueError("values must be a non-empty array with at least one axis")
    a = a.astype(np.int64 if a.dtype.kind in "iub" else np.float64)
    d = a.shape[-1]
    if not _is_power_of_two(d):
        raise ValueError(f"the last axis of values must have a power-of-two length, got {d}")
    lead = a.shape[:-1]
    h = 1
    while h < d:
        # Butterflies pair entry i with i + h inside blocks of length 2h.
        blocks = a.reshape(*lead, d // (2 * h), 2, h)
        upper, lower = blocks[..., 0, :], blocks[..., 1, :]
        a = np.stack((upper + lower, upper - lower), axis=-2)
        h *= 2
    return a.reshape(*lead, d)


class LocalRandomizer(ABC):
    """A pure epsilon-LDP local randomizer over the inputs ``0, ..., input_size - 1``."""

    epsilon: float

    @property
    @abstractmethod
    def input_size(self) -> int:
        """Number of possible inputs."""

    @property
    @abstractmethod
    def output_size(self) -> int:
        """Number of possible outputs (see :meth:`output_distribution` for their order)."""

    @property
    def input_domain(self) -> np.ndarray:
        """All possible inputs, ``0, ..., input_size - 1``."""
        return np.arange(self.input_size)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        """Pure epsilon-LDP: the ratio bound holds for any two inputs (000 Definition 2)."""
        return PrivacyGuarantee(self.epsilon, 0.0, PrivacyModel.LOCAL, _LDP_ADJACENCY)

    @abstractmethod
    def randomize(self, x: Any, rng: RandomLike | NoiseSource = None) -> Any:
        """Randomize each party's input (vectorized over the batch)."""

    @abstractmethod
    def output_distribution(self, x: Any) -> np.ndarray:
        """Exact probabilities of every output for input ``x`` (rows for an array ``x``)."""


@dataclass(frozen=True)
class OracleSummary:
    """What a frequency oracle's server keeps of a batch of reports: a sparse integer
    vector over the domain and the number of reports.

    ``keys`` are distinct domain indices (sorted), ``sums`` the integer sum of the
    reports' contributions at each key (a support count for subset selection, a signed
    sum of sign bits per Hadamard index for Hadamard response) and ``n`` the number of
    reports. Every estimate is linear in it, and two batches' summaries add up
    (:meth:`combine`), so a distributed server reduces them exactly.
    """

    keys: np.ndarray
    sums: np.ndarray
    n: int

    @classmethod
    def from_contributions(cls, keys: np.ndarray, weights: np.ndarray,
                           n: int) -> OracleSummary:
        """Sum integer ``weights`` per distinct key (float sums of integers are exact
        below 2^53)."""
        keys = np.asarray(keys, dtype=np.int64).ravel()
        weights = np.asarray(weights, dtype=np.float64).ravel()
        if keys.size == 0:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), int(n))
        lo, hi = int(keys.min()), int(keys.max())
        if hi - lo <= 4 * keys.size + 1024:
            # Dense key range: two bincounts instead of a sort (same keys, same sums).
            present = np.flatnonzero(np.bincount(keys - lo))
            sums = np.bincount(keys - lo, weights=weights)[present]
            return cls(present + lo, sums.astype(np.int64), int(n))
        uniq, inverse = np.unique(keys, return_inverse=True)
        sums = np.bincount(inverse, weights=weights, minlength=uniq.size)
        return cls(uniq, sums.astype(np.int64), int(n))

    @classmethod
    def empty(cls) -> OracleSummary:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), 0)

    def combine(self, other: OracleSummary) -> OracleSummary:
        """The summary of both batches (integer sums: associative and exact)."""
        return OracleSummary.from_contributions(np.concatenate([self.keys, other.keys]),
                                                np.concatenate([self.sums, other.sums]),
                                                self.n + other.n)

    def dense(self, d: int) -> np.ndarray:
        """The sums as a dense length-``d`` vector (zero off the keys)."""
        out = np.zeros(d, dtype=np.int64)
        out[self.keys] = self.sums
        return out

    def at(self, nodes: np.ndarray) -> np.ndarray:
        """The sums at the given indices (zero where no report contributed)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        if self.keys.size == 0:
            return np.zeros(nodes.size, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.keys, nodes), self.keys.size - 1)
        return np.where(self.keys[pos] == nodes, self.sums[pos], 0)


class FrequencyOracle(LocalRandomizer):
    """A pure epsilon-LDP frequency oracle over ``0, ..., d - 1`` with an unbiased
    count estimator whose exact variance is known.

    Every oracle here estimates the count of ``v`` as a sum over reports of a
    per-report contribution ``Z_i(v)`` with ``E[Z_i(v)] = 1[x_i = v]``; the reports are
    independent, so the variance of the count estimate is exactly
    ``n_v (m1 - 1) + (n - n_v) m0`` with ``(m1, m0) = ``:attr:`report_moments`, the
    second moments of ``Z`` for a report whose input is ``v`` and one whose input is
    not. The chooser (:func:`fedustat.privacy.frequency_oracles.best_frequency_oracle`)
    compares oracles by this formula.

    Reports travel as int64 rows of ``report_width`` entries of ``element_bits`` bits
    (:meth:`encode` / :meth:`decode`), and the server reduces them to an
    :class:`OracleSummary` (:meth:`summarize`) from which :meth:`estimate_from_summary`
    computes any count.
    """

    name: str = ""
    d: int

    @property
    def input_size(self) -> int:
        return self.d

    @property
    @abstractmethod
    def report_moments(self) -> tuple[float, float]:
        """``(m1, m0)``: ``E[Z^2]`` for a report of the queried value, and for any other."""

    @property
    @abstractmethod
    def report_width(self) -> int:
        """Number of integers in one encoded report."""

    @property
    @abstractmethod
    def element_bits(self) -> int:
        """Bits of each integer of an encoded report."""

    @property
    def report_bits(self) -> int:
        """Bits one report costs on the wire."""
        return self.report_width * self.element_bits

    @abstractmethod
    def encode(self, reports: Any) -> np.ndarray:
        """Reports (as :meth:`randomize` returns them) as an ``(n, report_width)`` array."""

    @abstractmethod
    def decode(self, encoded: Any) -> Any:
        """Inverse of :meth:`encode`, checking every entry (server side)."""

    @abstractmethod
    def summarize(self, reports: Any) -> OracleSummary:
        """The reducible summary of a batch of reports."""

    @abstractmethod
    def estimate_from_summary(self, summary: OracleSummary,
                              nodes: Any = None) -> np.ndarray:
        """Unbiased count estimates of ``nodes`` (default: all ``d`` values)."""

    def estimate_counts(self, reports: Any) -> np.ndarray:
        """Unbiased estimates of all ``d`` counts from a batch of reports."""
        return self.estimate_from_summary(self.summarize(reports))

    def count_variance(self, true_counts: Any, n_reports: int | None = None) -> np.ndarray:
        """Exact variance of the count estimate of each value given its true count:
        ``n_v (m1 - 1) + (n - n_v) m0`` (see the class docstring).

        Parameters
        ----------
        true_counts:
            True count(s) of the queried value(s).
        n_reports:
            Number of reports ``n``; defaults to the sum of ``true_counts``.
        """
        counts = np.asarray(true_counts, dtype=np.float64)
        if counts.size == 0 or not np.all(np.isfinite(counts)) or counts.min() < 0:
            raise ValueError("true_counts must be non-negative finite counts")
        n = counts.sum() if n_reports is None else check_positive_int(n_reports, "n_reports")
        m1, m0 = self.report_moments
        return counts * (m1 - 1.0) + (n - counts) * m0

    def mean_count_variance(self, n: int) -> float:
        """Variance of the count estimate averaged over the ``d`` values, for ``n``
        reports: ``(n/d)(m1 - 1) + n (1 - 1/d) m0`` whatever the data (the variance is
        linear in the counts, and they sum to ``n``)."""
        m1, m0 = self.report_moments
        return n / self.d * (m1 - 1.0) + n * (1.0 - 1.0 / self.d) * m0

    def max_count_variance(self, n: int) -> float:
        """The largest variance of any count estimate over all data sets of ``n``
        reports: the variance is linear in the count, so ``max(n m0, n (m1 - 1))``."""
        m1, m0 = self.report_moments
        return n * max(m0, m1 - 1.0)


class KaryRandomizedResponse(LocalRandomizer):
    """k-ary randomized response (000 Alg. 1 line 3, Eq. 9), pure epsilon-LDP.

    With ``beta = k / (k + e^eps - 1)``, the party reports its true value with
    probability ``1 - beta + beta/k = e^eps / (k + e^eps - 1)`` and each other value with
    probability ``beta/k = 1 / (k + e^eps - 1)``: keep the value with probability
    ``1 - beta``, otherwise report a uniform draw from all ``k`` values.

    Eq. 9 as printed in 000 gives the true value probability ``1 - beta``, which together
    with ``beta/k`` for the other ``k - 1`` values does not sum to one; we implement the
    mechanism above, which is the one the paper's estimator (``(1 - beta)^{-1}(e_R - b)``
    with ``b = beta/k``) and its epsilon-LDP claim (Thm 2) are consistent with.

    Parameters
    ----------
    k:
        Number of categories (>= 2).
    epsilon:
        Privacy budget (> 0).

    Outputs are the category codes ``0, ..., k - 1`` in that order.
    """

    def __init__(self, k: int, epsilon: float) -> None:
        self.k = check_positive_int(k, "k", minimum=2)
        self.epsilon = check_epsilon(epsilon, "epsilon")
        # Written with e^{-eps} so large budgets do not overflow.
        em = math.exp(-self.epsilon)
        self._keep = 1.0 / (1.0 + (self.k - 1) * em)
        self._other = em * self._keep
        self._gap = -math.expm1(-self.epsilon) * self._keep  # keep - other = 1 - beta

    def __repr__(self) -> str:
        return f"{type(self).__name__}(k={self.k}, epsilon={self.epsilon:g})"

    @property
    def input_size(self) -> int:
        return self.k

    @property
    def output_size(self) -> int:
        return self.k

    @property
    def beta(self) -> float:
        """``beta = k / (k + e^eps - 1)``: probability of reporting a uniform draw (000 Eq. 9)."""
        return self.k * self._other

    @property
    def keep_probability(self) -> float:
        """``P[R(x) = x] = e^eps / (k + e^eps - 1)``."""
        return self._keep

    @property
    def other_probability(self) -> float:
        """``P[R(x) = v]`` for each ``v != x``: ``1 / (k + e^eps - 1)``."""
        return self._other

    def randomize(self, x: Any, rng: RandomLike | NoiseSource = None) -> np.ndarray:
        """Randomize a batch of codes ``x`` in ``{0, ..., k-1}``; returns int64 codes."""
        codes = _as_codes(x, self.k)
        source = as_noise(rng)
        keep = source.bernoulli(self._keep, codes.size)
        other = source.integers(self.k - 1, codes.size)
        # other + (other >= x) is uniform on the k - 1 values different from x.
        return np.where(keep, codes, other + (other >= codes))

    def output_distribution(self, x: Any) -> np.ndarray:
        scalar = np.ndim(x) == 0
        codes = _as_codes(x, self.k)
        probs = np.full((codes.size, self.k), self._other)
        probs[np.arange(codes.size), codes] = self._keep
        return probs[0] if scalar else probs

    def estimate_counts(self, reports: Any, *, normalize: bool = False) -> np.ndarray:
        """Unbiased histogram of the true inputs from the reports (000 Sec. 3).

        Summing the per-report estimate ``(e_R - b) / (1 - beta)`` gives
        ``n_hat_v = (C_v - n beta/k) / (1 - beta)`` where ``C_v`` counts reports of ``v``.
        Entries can be negative or exceed ``n``; that is the price of unbiasedness.

        Parameters
        ----------
        reports:
            Randomized codes of ``n`` parties.
        normalize:
            Return frequencies (divide by ``n``) instead of counts.
        """
        codes = _as_codes(reports, self.k, "reports")
        n = codes.size
        counts = np.bincount(codes, minlength=self.k).astype(np.float64)
        estimate = (counts - n * self._other) / self._gap
        return estimate / n if normalize else estimate

    def count_variance(self, true_counts: Any) -> np.ndarray:
        """Exact variance of each entry of :meth:`estimate_counts` given the true counts.

        ``C_v`` is a sum of independent Bernoulli draws (probability ``p`` for the ``n_v``
        parties holding ``v``, ``q`` for the others), so
        ``Var(n_hat_v) = (n_v p(1-p) + (n - n_v) q(1-q)) / (p - q)^2``.
        """
        counts = as_int_array(true_counts, "true_counts")
        if counts.size != self.k or counts.min() < 0:
            raise ValueError(f"true_counts must hold {self.k} non-negative counts, "
                             f"got {counts.tolist()}")
        n = counts.sum()
        p, q = self._keep, self._other
        return (counts * p * (1 - p) + (n - counts) * q * (1 - q)) / self._gap**2

    def debias_one_hot(self, reports: Any) -> np.ndarray:
        """Per-report unbiased estimate of the one-hot input, ``(e_R - b)/(1 - beta)``.

        000 Sec. 3 (the vectors the generic protocol's kernel ``f_A`` is built on).
        Returns an ``(n, k)`` float array; memory grows as ``n k``.
        """
        codes = _as_codes(reports, self.k, "reports")
        out = np.full((codes.size, self.k), -self._other / self._gap)
        out[np.arange(codes.size), codes] = (1.0 - self._other) / self._gap
        return out


class BinaryRandomizedResponse(KaryRandomizedResponse):
    """Binary randomized response (Warner 1965): k-ary randomized response with ``k = 2``.

    Each party reports its bit with probability ``e^eps / (1 + e^eps)`` and flips it
    otherwise. Inputs are 0/1 (booleans accepted); outputs are 0, 1 in that order.
    """

    def __init__(self, epsilon: float) -> None:
        super().__init__(2, epsilon)

    def __repr__(self) -> str:
        return f"BinaryRandomizedResponse(epsilon={self.epsilon:g})"

    @property
    def flip_probability(self) -> float:
        """``1 / (1 + e^eps)``."""
        return self._other

    def debias(self, reports: Any) -> np.ndarray:
        """Per-party unbiased estimates of the true bits: ``(r - q) / (p - q)``."""
        codes = _as_codes(reports, 2, "reports")
        return (codes - self._other) / self._gap

    def estimate_mean(self, reports: Any) -> float:
        """Unbiased estimate of the fraction of parties whose true bit is 1."""
        return float(self.debias(reports).mean())


class HadamardResponse(FrequencyOracle):
    """Hadamard response frequency oracle, one bit per party (001 App. B.2.1, Alg. 2-3).

    A party with input ``q`` draws ``j`` uniformly from ``{0, ..., d-1}``, computes the
    Hadamard entry ``H[j, q] = (-1)^<j, q>`` and sends ``j`` with the bit of that sign,
    kept with probability ``e^eps / (1 + e^eps)`` and flipped otherwise (Alg. 2). The
    bit is encoded as ``b`` with sign ``(-1)^b`` (``b = 0`` means ``+1``). The server's
    estimate of the count of ``q`` is (Alg. 3)
    ``z_q = (e^eps + 1)/(e^eps - 1) * sum_i H[j_i, q] (-1)^{b_i}``.

    Alg. 2-3 as printed scale the entries by ``1/sqrt(2^l)``, which would make ``z_q``
    estimate ``count(q)/2^l``; we use the ``+-1`` entries, for which ``z_q`` is unbiased
    for ``count(q)`` as Lemma 5 states. Only ``j`` and one bit leave the party: ``j``
    costs ``log2 d`` bits but carries no information about the input.

    Parameters
    ----------
    d:
        Domain size, a power of two (>= 2).
    epsilon:
        Privacy budget (> 0).

    Outputs ``(j, b)`` are enumerated as ``o = 2 j + b``, ``output_size = 2 d``.

    As a :class:`FrequencyOracle`: a report's contribution to ``z_q`` is
    ``c (-1)^{<j,q> + b}``, whose square is ``c^2`` whatever the input, so
    ``report_moments = (c^2, c^2)``; the summary is the signed sum of the sign bits per
    index ``j`` (encoded reports: ``[j, b]``).
    """

    name = "hadamard"

    def __init__(self, d: int, epsilon: float) -> None:
        d = check_positive_int(d, "d", minimum=2)
        if not _is_power_of_two(d):
            raise ValueError(f"d must be a power of two (the Hadamard matrix of 001 Alg. 2 "
                             f"has size 2^l), got {d}; pad the domain to {1 << d.bit_length()}")
        self.d = d
        self.epsilon = check_epsilon(epsilon, "epsilon")
        self._keep = float(special.expit(self.epsilon))  # e^eps / (1 + e^eps)
        self._scale = 1.0 / math.tanh(self.epsilon / 2.0)  # (e^eps + 1) / (e^eps - 1)

    def __repr__(self) -> str:
        return f"HadamardResponse(d={self.d}, epsilon={self.epsilon:g})"

    @property
    def input_size(self) -> int:
        return self.d

    @property
    def output_size(self) -> int:
        return 2 * self.d

    @property
    def report_moments(self) -> tuple[float, float]:
        return self._scale**2, self._scale**2

    @property
    def report_width(self) -> int:
        return 2

    @property
    def element_bits(self) -> int:
        return max(1, self.d.bit_length() - 1)

    @property
    def report_bits(self) -> int:
        """``log2 d`` bits for ``j`` and one for the sign."""
        return self.d.bit_length()

    def encode(self, reports: Any) -> np.ndarray:
        j, bits = reports
        return np.stack([np.asarray(j, np.int64), np.asarray(bits, np.int64)], axis=1)

    def decode(self, encoded: Any) -> tuple[np.ndarray, np.ndarray]:
        arr = np.asarray(encoded)
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise ValueError(f"encoded Hadamard reports must have shape (n, 2), got "
                             f"{arr.shape}")
        if arr.shape[0] == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.uint8)
        j, bits = self._check_reports(arr[:, 0], arr[:, 1])
        return j, bits.astype(np.uint8)

    def summarize(self, reports: Any) -> OracleSummary:
        """Signed sums ``s_j = sum_{i: j_i = j} (-1)^{b_i}`` per index and the count."""
        j, bits = reports
        if np.size(j) == 0:
            return OracleSummary.empty()
        j, bits = self._check_reports(j, bits)
        return OracleSummary.from_contributions(j, 1 - 2 * bits, j.size)

    def estimate_from_summary(self, summary: OracleSummary, nodes: Any = None) -> np.ndarray:
        """``z_q = c sum_j s_j (-1)^{<j,q>}`` (001 Alg. 3 on the signed sums): an FWHT of
        the dense sums for all values, else one signed sum per queried node."""
        if nodes is None:
            return self._scale * fwht(summary.dense(self.d).astype(np.float64))
        q = _as_codes(nodes, self.d, "nodes") if np.size(nodes) else np.zeros(0, np.int64)
        out = np.empty(q.size)
        if summary.keys.size == 0:
            out[:] = 0.0
            return out
        step = max(1, (1 << 22) // summary.keys.size)  # bounded (nodes x keys) matrix
        for start in range(0, q.size, step):
            signs = 1 - 2 * _parity(summary.keys[None, :] & q[start:start + step, None])
            out[start:start + step] = self._scale * (signs * summary.sums[None, :]).sum(axis=1)
        return out

    @property
    def keep_probability(self) -> float:
        """Probability that the sent bit is the true Hadamard sign, ``e^eps/(1+e^eps)``."""
        return self._keep

    @property
    def debias_factor(self) -> float:
        """``(e^eps + 1) / (e^eps - 1)`` (001 Alg. 3)."""
        return self._scale

    def randomize(self, x: Any, rng: RandomLike | NoiseSource = None,
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Randomize a batch of inputs; returns ``(j, bits)`` (int64 indices, uint8 bits)."""
        codes = _as_codes(x, self.d)
        source = as_noise(rng)
        j = source.integers(self.d, codes.size)
        flip = source.bernoulli(1.0 - self._keep, codes.size)
        bits = _parity(j & codes) ^ flip
        return j, bits.astype(np.uint8)

    def output_distribution(self, x: Any) -> np.ndarray:
        scalar = np.ndim(x) == 0
        codes = _as_codes(x, self.d)
        j = np.arange(self.d)
        true_bit = _parity(j[None, :] & codes[:, None])  # (n, d)
        probs = np.empty((codes.size, self.d, 2))
        # Uniform j (1/d) times randomized response on the sign bit.
        probs[:, :, 0] = np.where(true_bit == 0, self._keep, 1.0 - self._keep) / self.d
        probs[:, :, 1] = np.where(true_bit == 1, self._keep, 1.0 - self._keep) / self.d
        probs = probs.reshape(codes.size, 2 * self.d)
        return probs[0] if scalar else probs

    def _check_reports(self, j: Any, bits: Any) -> tuple[np.ndarray, np.ndarray]:
        j = _as_codes(j, self.d, "j")
        bits = _as_codes(bits, 2, "bits")
        check_consistent_length(j=j, bits=bits)
        return j, bits

    def estimate_frequencies(self, j: Any, bits: Any, *, normalize: bool = False) -> np.ndarray:
        """Unbiased estimates of the count of every value ``0..d-1`` (001 Alg. 3).

        Aggregates the signed bits per index ``j`` (O(n)), then applies all ``d`` queries
        at once with a fast Walsh-Hadamard transform (O(d log d)).

        Parameters
        ----------
        j, bits:
            The reports of ``n`` parties, as returned by :meth:`randomize`.
        normalize:
            Return frequencies (divide by ``n``) instead of counts.
        """
        j, bits = self._check_reports(j, bits)
        signed = np.bincount(j, weights=1.0 - 2.0 * bits, minlength=self.d)
        estimate = self._scale * fwht(signed)
        return estimate / j.size if normalize else estimate

    def estimate_frequency(self, j: Any, bits: Any, value: Any, *,
                           normalize: bool = False) -> np.ndarray | float:
        """Unbiased estimate of the count of each queried ``value`` (001 Alg. 3).

        O(n) time per queried value and no O(d) memory, as in the paper's server; use
        :meth:`estimate_frequencies` when most of the domain is queried.
        """
        j, bits = self._check_reports(j, bits)
        scalar = np.ndim(value) == 0
        values = _as_codes(value, self.d, "value")
        out = np.empty(values.size)
        # Chunk the (values x reports) sign matrix to keep memory bounded.
        step = max(1, (1 << 22) // j.size)
        for start in range(0, values.size, step):
            q = values[start:start + step, None]
            signs = 1 - 2 * (_parity(j[None, :] & q) ^ bits[None, :])
            out[start:start + step] = self._scale * signs.sum(axis=1)
        if normalize:
            out /= j.size
        return float(out[0]) if scalar else out

    def count_variance(self, true_counts: Any, n_reports: int | None = None) -> np.ndarray:
        """Exact variance of the count estimate of each value given its true count.

        Each party contributes ``c (-1)^{<j,q> + b}`` with ``c = (e^eps+1)/(e^eps-1)``:
        its square is ``c^2`` and its mean is ``1[x_i = q]``, so
        ``Var(z_q) = n c^2 - count(q) = n + 4 n e^eps / (e^eps - 1)^2 - count(q)``.
        001 Lemma 5 states the bound ``4 n e^eps / (e^eps - 1)^2``, which omits the
        ``n - count(q)`` term; it is the dominant part only for small epsilon.

        Parameters
        ----------
        true_counts:
            True count(s) of the queried value(s).
        n_reports:
            Number of reports ``n``; defaults to the sum of ``true_counts`` (all ``d``
            counts given).
        """
        counts = np.asarray(true_counts, dtype=np.float64)
        if counts.size == 0 or not np.all(np.isfinite(counts)) or counts.min() < 0:
            raise ValueError("true_counts must be non-negative finite counts")
        n = counts.sum() if n_reports is None else check_positive_int(n_reports, "n_reports")
        return n * self._scale**2 - counts
