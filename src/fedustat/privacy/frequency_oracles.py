"""Multi-bit frequency oracles and a chooser by exact variance.

* :class:`SubsetSelection`: the k-subset mechanism (Wang et al.
  2016, "Mutual information optimally local private discrete distribution estimation";
  Ye and Barg 2018, "Optimal schemes for discrete distribution estimation under locally
  differential privacy", IEEE Trans. IT 64(8)). A party with input ``x`` reports a
  subset ``S`` of ``k`` values with ``P(S) ∝ e^eps`` if ``x ∈ S`` and ``∝ 1`` otherwise.
  ``k = 1`` is k-ary randomized response (direct encoding).
* :class:`LocalHashing`: optimal local hashing (Wang, Blocki, Li and Jha 2017, "Locally
  differentially private protocols for frequency estimation", USENIX Security, Sec. 4.4):
  the party hashes its input into ``g`` values with a hash function it draws itself and
  reports the function and a randomized-response report of the hash, ``O(log d)`` bits.
  The hash family here is exactly pairwise uniform (a linear form over the prime field
  ``Z_g`` of the input's base-``g`` digits), so the estimator is exactly unbiased and its
  variance exact; ``g`` is the prime of least exact variance near ``e^eps + 1``.
* The one-bit :class:`~fedustat.privacy.randomizers.HadamardResponse` (001 App. B.2.1):
  ``log2 d + 1`` bits per report whatever epsilon.

:func:`best_frequency_oracle` picks, for a domain size and epsilon, the oracle (and
``k``) of least exact variance among those whose report fits a bit budget.

Exact variance (both oracles are :class:`~fedustat.privacy.randomizers.FrequencyOracle`):
with ``p = P(v ∈ S | x = v)`` and ``q = P(v ∈ S | x != v)`` the count estimate
``(C_v - n q) / (p - q)`` (``C_v``: reports whose subset holds ``v``) is unbiased and,
``C_v`` being a sum of independent Bernoulli variables,
``Var = (n_v p(1-p) + (n - n_v) q(1-q)) / (p - q)^2`` exactly (Wang et al. 2017,
"Locally differentially private protocols for frequency estimation", USENIX Security,
Sec. 4, Eq. 2, for any "pure" protocol). For the k-subset mechanism, with ``Z =
C(d-1, k-1) e^eps + C(d-1, k)`` the normalizer,

    p = k e^eps / (k e^eps + d - k),
    q = k ((k - 1) e^eps + d - k) / ((d - 1)(k e^eps + d - k))

(the subsets holding two given values number ``C(d-2, k-2)``; Ye and Barg 2018, Sec. III).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_int_array,
    check_epsilon,
    check_positive_int,
)
from fedustat.privacy.noise import NoiseSource, as_noise
from fedustat.privacy.randomizers import (
    FrequencyOracle,
    HadamardResponse,
    OracleSummary,
    _as_codes,
    _is_power_of_two,
)

__all__ = [
    "CRITERIA",
    "ORACLES",
    "LocalHashing",
    "SubsetSelection",
    "best_frequency_oracle",
    "frequency_oracle",
    "subset_selection_moments",
]

#: Names accepted by :func:`frequency_oracle` and :func:`best_frequency_oracle`.
ORACLES = ("subset-selection", "local-hashing", "hadamard")
#: What the chooser minimizes: the variance averaged over the domain ("mean") or its
#: largest value over all data sets ("worst").
CRITERIA = ("mean", "worst")
# Exact enumeration of the k-subsets is for small domains only.
MAX_ENUMERATED_SUBSETS = 1 << 20
# Cells of the (parties x domain) membership table the sampler fills at once (16 MB).
_CHUNK_CELLS = 1 << 24


def _bits(d: int) -> int:
    """Bits of one value in ``0..d-1``."""
    return max(1, (d - 1).bit_length())


def subset_selection_moments(d: int, epsilon: float, k: Any) -> tuple[np.ndarray, np.ndarray,
                                                                      np.ndarray, np.ndarray]:
    """``(p, q, m1, m0)`` of the k-subset mechanism for each ``k`` (vectorized).

    ``p, q`` as in the module docstring, written with ``e^-eps`` so that large budgets do
    not overflow; ``m1 = (p(1-p) + (p-q)^2)/(p-q)^2`` and ``m0 = q(1-q)/(p-q)^2`` are the
    second moments of a report's contribution ``(1[v ∈ S] - q)/(p - q)`` when its input
    is ``v`` and when it is not.
    """
    k = np.asarray(k, dtype=np.float64)
    em = math.exp(-epsilon)
    denom = k + (d - k) * em  # (k e^eps + d - k) e^-eps
    p = k / denom
    q = k * ((k - 1.0) + (d - k) * em) / ((d - 1.0) * denom)
    # p - q in a form without cancellation: k (d - k)(1 - e^-eps) / ((d - 1) denom).
    gap = k * (d - k) * -math.expm1(-epsilon) / ((d - 1.0) * denom)
    m1 = p * (1.0 - p) / gap**2 + 1.0
    m0 = q * (1.0 - q) / gap**2
    return p, q, m1, m0


def _criterion_value(m1: Any, m0: Any, d: int, criterion: str) -> Any:
    """Per-report variance the chooser minimizes (times ``n`` it is the count variance)."""
    if criterion == "mean":
        return (np.asarray(m1) - 1.0) / d + (1.0 - 1.0 / d) * np.asarray(m0)
    return np.maximum(m0, np.asarray(m1) - 1.0)


def _check_criterion(criterion: Any) -> str:
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {', '.join(map(repr, CRITERIA))}, got "
                         f"{criterion!r}")
    return str(criterion)


def _best_k(d: int, epsilon: float, criterion: str, max_k: int) -> int:
    ks = np.arange(1, min(d - 1, max_k) + 1)
    _, _, m1, m0 = subset_selection_moments(d, epsilon, ks)
    return int(ks[int(np.argmin(_criterion_value(m1, m0, d, criterion)))])


class _SupportOracle(FrequencyOracle):
    """An oracle whose report supports the party's input with probability ``p`` and any
    other value with probability ``q`` (Wang et al. 2017's pure protocols, Sec. 3): the
    count of value ``v`` is estimated from the number of reports supporting ``v``."""

    _p: float
    _q: float
    _moments: tuple[float, float]

    @property
    def include_probability(self) -> float:
        """``p``: the probability that a report supports the party's own input."""
        return self._p

    @property
    def other_probability(self) -> float:
        """``q``: the probability that a report supports a value other than the input."""
        return self._q

    @property
    def report_moments(self) -> tuple[float, float]:
        return self._moments

    def encode(self, reports: Any) -> np.ndarray:
        return np.asarray(reports, dtype=np.int64).reshape(-1, self.report_width)

    def _report_rows(self, encoded: Any, what: str) -> np.ndarray:
        """Encoded reports as an integer (n, report_width) array, the shape checked."""
        arr = np.asarray(encoded)
        if arr.ndim != 2 or arr.shape[1] != self.report_width:
            raise ValueError(f"{what} reports must have shape (n, {self.report_width}), got "
                             f"{arr.shape}")
        if arr.shape[0] == 0:
            return np.zeros((0, self.report_width), np.int64)
        return as_int_array(arr, "reports", ndim=2)


class SubsetSelection(_SupportOracle):
    """The k-subset mechanism (Wang et al. 2016; Ye and Barg 2018), pure epsilon-LDP.

    A party with input ``x`` reports a set ``S`` of ``k`` distinct values of
    ``0..d-1`` with ``P(S | x) = e^eps / Z`` if ``x ∈ S`` and ``1 / Z`` otherwise: any
    two inputs' probabilities of one set differ by a factor ``e^eps`` at most.
    Sampling: draw a uniform ``k``-subset of the ``d - 1`` other values (Floyd's
    algorithm, Bentley and Floyd 1987: ``k`` uniform integers), and with probability
    ``p`` replace one of its ``k`` elements, chosen uniformly, by ``x`` (removing a
    uniform element of a uniform ``k``-subset leaves a uniform ``(k-1)``-subset). The
    set is reported sorted, so nothing but the set leaves the party.

    Parameters
    ----------
    d:
        Domain size (>= 2).
    epsilon:
        Privacy budget (> 0).
    k:
        Subset size in ``1..d-1``; ``None`` (default) takes the ``k`` of least exact
        variance averaged over the domain (``criterion="mean"``) or of least worst-case
        variance (``"worst"``), with ``k <= max_k``.
    criterion, max_k:
        How ``k`` is chosen when not given.

    Outputs (for :meth:`output_distribution`) are the ``k``-subsets in the
    lexicographic order of :func:`itertools.combinations`.
    """

    name = "subset-selection"

    def __init__(self, d: int, epsilon: float, k: int | None = None, *,
                 criterion: str = "mean", max_k: int | None = None) -> None:
        self.d = check_positive_int(d, "d", minimum=2)
        self.epsilon = check_epsilon(epsilon, "epsilon")
        if k is None:
            cap = self.d - 1 if max_k is None else check_positive_int(max_k, "max_k")
            k = _best_k(self.d, self.epsilon, _check_criterion(criterion), cap)
        k = check_positive_int(k, "k")
        if k > self.d - 1:
            raise ValueError(f"k must be in 1..d-1 = 1..{self.d - 1} (a subset of all d "
                             f"values tells nothing), got {k}")
        self.k = k
        p, q, m1, m0 = subset_selection_moments(self.d, self.epsilon, k)
        self._p, self._q = float(p), float(q)
        self._gap = float(k * (self.d - k) * -math.expm1(-self.epsilon)
                          / ((self.d - 1.0) * (k + (self.d - k) * math.exp(-self.epsilon))))
        self._moments = (float(m1), float(m0))

    def __repr__(self) -> str:
        return f"SubsetSelection(d={self.d}, epsilon={self.epsilon:g}, k={self.k})"

    @property
    def output_size(self) -> int:
        return math.comb(self.d, self.k)

    @property
    def report_width(self) -> int:
        return self.k

    @property
    def element_bits(self) -> int:
        return _bits(self.d)

    # ------------------------------------------------------------------ party side
    def randomize(self, x: Any, rng: RandomLike | NoiseSource = None) -> np.ndarray:
        """Randomize a batch of inputs; returns an ``(n, k)`` int64 array, each row the
        reported subset in increasing order."""
        codes = _as_codes(x, self.d)
        source = as_noise(rng)
        n, k = codes.size, self.k
        others = _floyd(self.d - 1, k, n, source)
        # Values 0..d-2 stand for the d - 1 values other than x.
        subset = others + (others >= codes[:, None])
        include = source.bernoulli(self._p, n)
        slot = source.integers(k, n)
        rows = np.arange(n)
        subset[rows, slot] = np.where(include, codes, subset[rows, slot])
        return np.sort(subset, axis=1)

    def output_distribution(self, x: Any) -> np.ndarray:
        if self.output_size > MAX_ENUMERATED_SUBSETS:
            raise ValueError(f"there are C({self.d}, {self.k}) = {self.output_size} subsets; "
                             f"exact enumeration is limited to {MAX_ENUMERATED_SUBSETS}")
        scalar = np.ndim(x) == 0
        codes = _as_codes(x, self.d)
        subsets = np.array(list(itertools.combinations(range(self.d), self.k)), dtype=np.int64)
        holds = (subsets[None, :, :] == codes[:, None, None]).any(axis=2)
        # P(S) = e^eps/Z or 1/Z; scaled by e^-eps: 1/Z' or e^-eps/Z'.
        em = math.exp(-self.epsilon)
        z = math.comb(self.d - 1, self.k - 1) + math.comb(self.d - 1, self.k) * em
        probs = np.where(holds, 1.0 / z, em / z)
        return probs[0] if scalar else probs

    # ------------------------------------------------------------------ wire
    def decode(self, encoded: Any) -> np.ndarray:
        """Check that every row is ``k`` distinct values of ``0..d-1`` in increasing order."""
        items = self._report_rows(encoded, "subset-selection")
        if items.shape[0] == 0:
            return items
        if items.min() < 0 or items.max() >= self.d:
            raise ValueError(f"reports have values outside the input domain "
                             f"{{0, ..., {self.d - 1}}} (min {items.min()}, max {items.max()})")
        if self.k > 1 and not np.all(np.diff(items, axis=1) > 0):
            raise ValueError("each report must list k distinct values in increasing order")
        return items

    # ------------------------------------------------------------------ server side
    def summarize(self, reports: Any) -> OracleSummary:
        """Support counts ``C_v`` (reports whose subset holds ``v``) and the count."""
        items = self.decode(reports)
        return OracleSummary.from_contributions(items.ravel(), np.ones(items.size, np.int64),
                                                items.shape[0])

    def estimate_from_summary(self, summary: OracleSummary, nodes: Any = None) -> np.ndarray:
        """``(C_v - n q) / (p - q)`` for each queried value (default: all of them)."""
        support = (summary.dense(self.d) if nodes is None
                   else summary.at(_as_codes(nodes, self.d, "nodes")
                                   if np.size(nodes) else np.zeros(0, np.int64)))
        return (support - summary.n * self._q) / self._gap


def _floyd(m: int, k: int, n: int, source: NoiseSource) -> np.ndarray:
    """``n`` independent uniform ``k``-subsets of ``0..m-1`` (rows, unsorted).

    Floyd's algorithm (Bentley and Floyd 1987): for ``j = m-k, ..., m-1`` draw ``t``
    uniform in ``0..j`` and add ``t``, or ``j`` if ``t`` is already in. Every step draws
    one integer per party whatever the values (the same work for every input).
    Membership is tested against the row (``k^2`` compares) or a row bitmap (``m``
    cells), whichever is smaller.
    """
    out = np.empty((n, k), dtype=np.int64)
    rows_per_chunk = max(1, _CHUNK_CELLS // max(1, min(k * k, m)))
    for start in range(0, n, rows_per_chunk):
        rows = min(rows_per_chunk, n - start)
        block = out[start:start + rows]
        idx = np.arange(rows)
        bitmap = np.zeros((rows, m), dtype=bool) if k * k > m else None
        for step, j in enumerate(range(m - k, m)):
            t = source.integers(j + 1, rows)
            if bitmap is not None:
                taken = bitmap[idx, t]
            else:
                taken = (block[:, :step] == t[:, None]).any(axis=1)
            pick = np.where(taken, j, t)
            block[:, step] = pick
            if bitmap is not None:
                bitmap[idx, pick] = True
    return out


def _primes_upto(limit: int) -> np.ndarray:
    sieve = np.ones(limit + 1, dtype=bool)
    sieve[:2] = False
    for i in range(2, math.isqrt(limit) + 1):
        if sieve[i]:
            sieve[i * i::i] = False
    return np.flatnonzero(sieve)


def local_hashing_moments(epsilon: float, g: Any) -> tuple[np.ndarray, np.ndarray,
                                                           np.ndarray, np.ndarray]:
    """``(p, q, m1, m0)`` of local hashing into ``g`` values (vectorized over ``g``).

    ``p = e^eps / (e^eps + g - 1)`` (the report equals the input's hash), ``q = 1/g``
    (any other value's hash equals the report: the family is pairwise uniform); the
    moments as for :func:`subset_selection_moments`.
    """
    g = np.asarray(g, dtype=np.float64)
    em = math.exp(-epsilon)
    p = 1.0 / (1.0 + (g - 1.0) * em)
    q = 1.0 / g
    gap = p - q
    return p, q, p * (1.0 - p) / gap**2 + 1.0, q * (1.0 - q) / gap**2


def _digits_count(d: int, g: int) -> int:
    """Base-``g`` digits of the values ``0..d-1``."""
    n_digits, span = 1, g
    while span < d:
        n_digits, span = n_digits + 1, span * g
    return n_digits


class LocalHashing(_SupportOracle):
    """Optimal local hashing (Wang, Blocki, Li and Jha 2017, Sec. 4.4), pure epsilon-LDP.

    A party with input ``x`` draws a hash function ``h`` of the family
    ``h_{a,b}(x) = (a_1 x_1 + ... + a_L x_L + b) mod g``, with ``x_1..x_L`` the base-``g``
    digits of ``x`` and ``a``, ``b`` uniform in ``Z_g`` (``g`` prime), and reports
    ``(a, b, y)``: ``y = h(x)`` with probability ``p = e^eps/(e^eps + g - 1)``, otherwise
    one of the ``g - 1`` other values uniformly. For ``x != v`` some digit differs and
    ``a_i (x_i - v_i)`` is uniform on ``Z_g`` (``g`` prime), so ``h(v) - h(x)`` is uniform:
    a value other than the input is supported (``h(v) = y``) with probability exactly
    ``q = 1/g``, and ``(C_v - n/g)/(p - 1/g)`` is exactly unbiased.

    Privacy: ``(a, b)`` is drawn independently of the input, so
    ``P(a, b, y | x) = P(a, b) P(y | x, a, b)`` and the ratio of two inputs' probabilities
    of an output is that of the conditional law given the hash, randomized response over
    ``g`` values: at most ``e^eps``. :meth:`output_distribution` enumerates the joint law
    (small ``d`` and ``g``) and :meth:`conditional_distribution` the law given a hash.

    Parameters
    ----------
    d:
        Domain size (>= 2).
    epsilon:
        Privacy budget (> 0).
    g:
        Hash range, a prime; ``None`` takes the prime of least exact variance
        (``criterion``) up to ``4 (e^eps + 1)``.

    Outputs: ``(a_1..a_L, b, y)`` in mixed radix ``g``, ``a_1`` most significant.
    """

    name = "local-hashing"

    def __init__(self, d: int, epsilon: float, g: int | None = None, *,
                 criterion: str = "mean") -> None:
        self.d = check_positive_int(d, "d", minimum=2)
        self.epsilon = check_epsilon(epsilon, "epsilon")
        if g is None:
            limit = int(min(4.0 * (math.exp(min(self.epsilon, 30.0)) + 1.0), 1 << 20)) + 3
            primes = _primes_upto(limit)
            _, _, m1, m0 = local_hashing_moments(self.epsilon, primes)
            g = int(primes[int(np.argmin(_criterion_value(
                m1, m0, self.d, _check_criterion(criterion))))])
        g = check_positive_int(g, "g", minimum=2)
        if len(_primes_upto(g)) == 0 or _primes_upto(g)[-1] != g:
            raise ValueError(f"g must be a prime (the hash family is linear over Z_g), "
                             f"got {g}")
        self.g = g
        self.n_digits = _digits_count(self.d, g)
        p, q, m1, m0 = local_hashing_moments(self.epsilon, g)
        self._p, self._q = float(p), float(q)
        self._moments = (float(m1), float(m0))
        self._weights = g ** np.arange(self.n_digits - 1, -1, -1, dtype=np.int64)

    def __repr__(self) -> str:
        return f"LocalHashing(d={self.d}, epsilon={self.epsilon:g}, g={self.g})"

    @property
    def output_size(self) -> int:
        return self.g ** (self.n_digits + 2)

    @property
    def report_width(self) -> int:
        return self.n_digits + 2

    @property
    def element_bits(self) -> int:
        return _bits(self.g)

    def _digits(self, values: np.ndarray) -> np.ndarray:
        """Base-``g`` digits (most significant first), shape ``(len(values), L)``."""
        return (values[:, None] // self._weights[None, :]) % self.g

    def _hash(self, coefficients: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``h_{a,b}(v)`` for each row ``(a, b)`` and its value ``v`` (same length)."""
        a, b = coefficients[:, :-1], coefficients[:, -1]
        return ((a * self._digits(values)).sum(axis=1) + b) % self.g

    def randomize(self, x: Any, rng: RandomLike | NoiseSource = None) -> np.ndarray:
        """Randomize a batch; returns ``(n, L + 2)`` rows ``(a_1..a_L, b, y)``."""
        codes = _as_codes(x, self.d)
        source = as_noise(rng)
        n = codes.size
        coefficients = source.integers(self.g, (n, self.n_digits + 1))
        hashed = self._hash(coefficients, codes)
        keep = source.bernoulli(self._p, n)
        other = source.integers(self.g - 1, n)
        report = np.where(keep, hashed, (hashed + 1 + other) % self.g)
        return np.column_stack([coefficients, report]).astype(np.int64)

    def conditional_distribution(self, x: Any, coefficients: Any) -> np.ndarray:
        """Law of ``y`` given the hash ``(a, b)`` (randomized response over ``g`` values)."""
        scalar = np.ndim(x) == 0
        codes = _as_codes(x, self.d)
        coeffs = np.broadcast_to(np.asarray(coefficients, np.int64),
                                 (codes.size, self.n_digits + 1))
        hashed = self._hash(coeffs, codes)
        probs = np.full((codes.size, self.g), (1.0 - self._p) / (self.g - 1))
        probs[np.arange(codes.size), hashed] = self._p
        return probs[0] if scalar else probs

    def output_distribution(self, x: Any) -> np.ndarray:
        if self.output_size > MAX_ENUMERATED_SUBSETS:
            raise ValueError(f"local hashing has {self.output_size} outputs; exact "
                             f"enumeration is limited to {MAX_ENUMERATED_SUBSETS}")
        scalar = np.ndim(x) == 0
        codes = _as_codes(x, self.d)
        hashes = np.array(list(itertools.product(range(self.g), repeat=self.n_digits + 1)),
                          dtype=np.int64)
        rows = []
        for code in codes:  # small enumerated domains only
            cond = self.conditional_distribution(np.full(len(hashes), code), hashes)
            rows.append((cond / len(hashes)).ravel())
        probs = np.vstack(rows)
        return probs[0] if scalar else probs

    def decode(self, encoded: Any) -> np.ndarray:
        """Check every entry is in ``0..g-1``."""
        rows = self._report_rows(encoded, "local-hashing")
        if rows.shape[0] == 0:
            return rows
        if rows.min() < 0 or rows.max() >= self.g:
            raise ValueError(f"reports have entries outside 0..{self.g - 1}")
        return rows

    def summarize(self, reports: Any) -> OracleSummary:
        """Support counts ``C_v = #{reports with h(v) = y}`` for every value (``n d L``
        work: each report's hash is evaluated on the whole domain, in blocks)."""
        rows = self.decode(reports)
        support = np.zeros(self.d, dtype=np.int64)
        digits = self._digits(np.arange(self.d, dtype=np.int64))  # (d, L)
        step = max(1, _CHUNK_CELLS // (self.d * self.n_digits))
        for start in range(0, rows.shape[0], step):
            block = rows[start:start + step]
            hashed = (digits @ block[:, :self.n_digits].T + block[:, self.n_digits]) % self.g
            support += (hashed == block[:, -1]).sum(axis=1)
        keys = np.flatnonzero(support)
        return OracleSummary(keys, support[keys], rows.shape[0])

    def estimate_from_summary(self, summary: OracleSummary, nodes: Any = None) -> np.ndarray:
        """``(C_v - n/g) / (p - 1/g)`` for each queried value (default: all of them)."""
        support = (summary.dense(self.d) if nodes is None
                   else summary.at(_as_codes(nodes, self.d, "nodes")
                                   if np.size(nodes) else np.zeros(0, np.int64)))
        return (support - summary.n * self._q) / (self._p - self._q)


def frequency_oracle(name: str, d: int, epsilon: float, **params: Any) -> FrequencyOracle:
    """The oracle ``name`` (one of :data:`ORACLES`) over ``0..d-1`` at ``epsilon``.

    ``params`` go to its constructor (``k``, ``criterion``, ``max_k`` for subset
    selection).
    """
    if name == "subset-selection":
        return SubsetSelection(d, epsilon, **params)
    if name == "local-hashing":
        return LocalHashing(d, epsilon, **params)
    if name == "hadamard":
        if params:
            raise TypeError(f"the Hadamard oracle takes no parameters, got {sorted(params)}")
        return HadamardResponse(d, epsilon)
    raise ValueError(f"oracle must be one of {', '.join(map(repr, ORACLES))}, got {name!r}")


def best_frequency_oracle(d: int, epsilon: float, *, criterion: str = "mean",
                          max_report_bits: int | None = None,
                          candidates: Sequence[str] = ORACLES) -> FrequencyOracle:
    """The oracle of least exact count variance over ``0..d-1`` at ``epsilon``.

    Compares, by :attr:`FrequencyOracle.report_moments`, the one-bit Hadamard response
    (if ``d`` is a power of two), local hashing with its best prime ``g`` (if its report,
    ``(L + 2) ceil(log2 g)`` bits, fits) and subset selection with every ``k`` whose
    report (``k ceil(log2 d)`` bits) fits ``max_report_bits``. Ties go to the earlier
    candidate. The variance is linear in the counts, so the comparison holds for every
    ``n`` (``"mean"``: averaged over the domain; ``"worst"``: the largest over all data).

    Parameters
    ----------
    d:
        Domain size (>= 2).
    epsilon:
        Privacy budget (> 0).
    criterion:
        ``"mean"`` (default) or ``"worst"``.
    max_report_bits:
        Largest report a party may send (``None``: no limit). The Hadamard response needs
        ``log2 d + 1`` bits.
    candidates:
        Oracle names to consider (a subset of :data:`ORACLES`).
    """
    d = check_positive_int(d, "d", minimum=2)
    epsilon = check_epsilon(epsilon, "epsilon")
    criterion = _check_criterion(criterion)
    unknown = [c for c in candidates if c not in ORACLES]
    if unknown or not candidates:
        raise ValueError(f"candidates must be a non-empty subset of {ORACLES}, got "
                         f"{list(candidates)}")
    if max_report_bits is not None:
        max_report_bits = check_positive_int(max_report_bits, "max_report_bits")
    best: tuple[float, FrequencyOracle] | None = None
    for name in candidates:
        if name == "hadamard":
            if not _is_power_of_two(d):
                continue
            oracle: FrequencyOracle = HadamardResponse(d, epsilon)
            if max_report_bits is not None and oracle.report_bits > max_report_bits:
                continue
        elif name == "local-hashing":
            oracle = LocalHashing(d, epsilon, criterion=criterion)
            if max_report_bits is not None and oracle.report_bits > max_report_bits:
                continue
        else:
            cap = d - 1 if max_report_bits is None else max_report_bits // _bits(d)
            if cap < 1:
                continue
            oracle = SubsetSelection(d, epsilon, criterion=criterion, max_k=cap)
        value = float(_criterion_value(*oracle.report_moments, d, criterion))
        if best is None or value < best[0]:
            best = (value, oracle)
    if best is None:
        raise ValueError(f"no oracle among {list(candidates)} fits a report of "
                         f"{max_report_bits} bits over a domain of {d} values")
    return best[1]
