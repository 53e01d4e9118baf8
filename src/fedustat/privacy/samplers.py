"""Fixed-work samplers for deployment noise: running time does not depend on the draw.

A sampler whose running time tracks the value it returns leaks that value to anyone who
can time the party (a loop that counts arrivals, a rejection loop that retries on large
values). Every sampler here does the same operations, on arrays of the same size, for
every value it can return; the only inputs to the amount of work are public (the
parameters and the number of draws). All randomness comes from one entry point,
:func:`random_words` (64-bit words from the operating system's CSPRNG through
:mod:`secrets`), and every sampler asks it for a number of words fixed by its public
parameters. Probabilities are held as exact integer thresholds out of ``2^64`` (tables:
``2^128``) and compared with whole CSPRNG words, so no floating-point sampling step is
involved (the attacks of Mironov, CCS 2012, exploit floating-point samplers).

Constructions (see docs/secure.md, "Deployment samplers"):

* Bernoulli(p): one word ``u``, output ``u < floor(p 2^64)``.
* Geometric ``P(G = k) ∝ q^k``: the binary digits of G are independent, digit ``j`` is
  Bernoulli(``q^(2^j) / (1 + q^(2^j))``) (factor ``q^k = prod_j (q^(2^j))^(b_j)``).
  Drawing a public number ``B`` of digits gives exactly G conditioned on ``G < 2^B``;
  ``B`` is the least with ``q^(2^B) <= 2^-64``.
* Discrete Laplace: the difference of two i.i.d. geometrics (Inusah & Kozubowski 2006;
  002 App. B.1.1 with n = 1).
* Laplace: discrete Laplace on the public grid ``2^e`` with ``scale / 2^e`` in
  ``[2^39, 2^40)``, so outputs are exact multiples of the grid.
* Gaussian and Pólya: inversion of a 128-bit integer CDF table over the whole truncated
  support: two words per draw, compared with every entry of the table.
* Pólya with ``alpha`` so close to 1 that its table would be too long (the fine
  fixed-point noise of U-MPC and the shuffle protocol): a geometric by binary digits for
  ``r = 1``, else a compound Poisson sum of a fixed number of logarithmic variables.

The tables and thresholds are computed once per parameter with :mod:`decimal` at 50
significant digits, so the only departures from the ideal laws are the stated tail cuts
and the rounding of each threshold to an integer out of ``2^64`` (tables: ``2^128``).
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import lru_cache
from itertools import pairwise

import numpy as np

__all__ = ["GAUSSIAN_GRID_BITS", "LAPLACE_GRID_BITS", "MAX_TABLE_SIZE", "TAIL_BITS",
           "InversionTable", "bernoulli", "csprng_bytes", "discrete_laplace", "gaussian",
           "gaussian_grid", "gaussian_table", "geometric", "geometric_bits",
           "geometric_thresholds", "integers", "laplace", "laplace_grid", "poisson_table",
           "polya", "polya_table", "random_words", "replayable_source", "uniform"]

#: Every truncated tail has probability at most ``2^-TAIL_BITS``.
TAIL_BITS = 64
#: Laplace noise lives on the grid ``2^e`` with ``scale / 2^e`` in ``[2^39, 2^40)``.
LAPLACE_GRID_BITS = 40
#: Gaussian noise lives on the grid ``2^e`` with ``sigma / 2^e`` in ``[2^10, 2^11)``.
GAUSSIAN_GRID_BITS = 10
#: The largest CDF table (entries) a Gaussian or Pólya sampler may build.
MAX_TABLE_SIZE = 1 << 20
# The largest number of geometric digits: the difference of two geometrics stays in int64.
_MAX_DIGITS = 62
# Words compared per chunk of a table inversion (bounds memory, not work per draw).
_CHUNK_CELLS = 1 << 22
_TWO_64 = 1 << 64
_TWO_128 = 1 << 128


# Where deployment randomness comes from: the OS CSPRNG, or inside `replayable_source`
# a stream a process can draw again (a Flower node replaying its steps).
_SOURCE: ContextVar[Callable[[int], bytes]] = ContextVar("fedustat_csprng",
                                                         default=secrets.token_bytes)


def csprng_bytes(count: int) -> bytes:
    """``count`` bytes of deployment randomness: the OS CSPRNG (:mod:`secrets`), unless
    :func:`replayable_source` is active in this context."""
    return _SOURCE.get()(count)


@contextmanager
def replayable_source(key: bytes) -> Iterator[None]:
    """Deployment randomness drawn from a CSPRNG keyed by ``key`` (32 secret bytes from
    the OS) while the block runs: the same key gives the same bytes in the same order.

    For a process that must repeat its steps exactly (a Flower ClientApp is a new
    process per message and replays its party's steps), with the key kept as secret as
    the party's state. Request ``i`` of ``n`` bytes is SHAKE256(domain | key | i) cut to
    ``n`` bytes (FIPS 202; SHAKE256 keyed by 256 secret bits as a PRF, each request
    domain-separated by its counter), so the stream is indistinguishable from the OS's
    to anyone without the key.
    """
    if not isinstance(key, bytes) or len(key) != 32:
        raise ValueError("a replayable source needs a 32-byte key from the OS CSPRNG")
    counter = 0

    def draw(count: int) -> bytes:
        nonlocal counter
        block = hashlib.shake_256(b"fedustat replayable csprng v1|" + key
                                  + counter.to_bytes(8, "big")).digest(count)
        counter += 1
        return block

    token = _SOURCE.set(draw)
    try:
        yield
    finally:
        _SOURCE.reset(token)


def random_words(count: int) -> np.ndarray:
    """``count`` independent uniform 64-bit words from the OS CSPRNG (:mod:`secrets`).

    The only source of randomness of this module: tests count the words asked for.
    """
    return np.frombuffer(csprng_bytes(8 * count), dtype="<u8").astype(np.uint64)


def _threshold(probability: Fraction | Decimal) -> int:
    """``floor(probability 2^64)`` clipped to a word: ``u < T`` has probability ``T / 2^64``.

    A Decimal is multiplied at the caller's context precision (50 digits here).
    """
    return min(max(int(probability * _TWO_64), 0), _TWO_64 - 1)


def bernoulli(p: float, count: int) -> np.ndarray:
    """``count`` booleans, True with probability ``floor(p 2^64) / 2^64`` (``p`` in [0, 1]).

    One word per draw whatever ``p`` and the outcome; ``p = 1`` is exact (all True).
    """
    words = random_words(count)
    if p >= 1.0:
        return np.ones(count, dtype=bool)
    # Fraction(p) is the float's exact value, so the threshold is exact.
    return words < np.uint64(_threshold(Fraction(p)))


def uniform(count: int) -> np.ndarray:
    """``count`` uniform floats in ``[0, 1)``: the top 53 bits of a word times ``2^-53``."""
    return np.ldexp((random_words(count) >> np.uint64(11)).astype(np.float64), -53)


def integers(high: int, count: int) -> np.ndarray:
    """``count`` integers in ``{0, ..., high - 1}`` (int64), ``1 <= high < 2^63``.

    ``floor(u high / 2^128)`` for a 128-bit CSPRNG integer ``u`` (two words), computed
    with 32-bit limbs in ``uint64`` arithmetic: multiplications, shifts and masks only (no
    rejection loop, no division, no Python integers whose size follows the value). Each
    value gets ``floor`` or ``ceil`` of ``2^128 / high`` of the ``u``, so its probability
    is within ``2^-128`` of ``1 / high`` (Lemire 2019 uses the same map on 64 bits).
    """
    words = random_words(2 * count).reshape(count, 2)
    mask, shift = np.uint64(0xFFFFFFFF), np.uint64(32)
    # u = words[:, 0] 2^64 + words[:, 1], as four 32-bit limbs, least significant first.
    u = [words[:, 1] & mask, words[:, 1] >> shift, words[:, 0] & mask, words[:, 0] >> shift]
    h = [np.uint64(high & 0xFFFFFFFF), np.uint64(high >> 32)]
    # Schoolbook product u h in columns of 32 bits; a column holds at most four 32-bit
    # halves plus a carry below 2^35, so nothing overflows 64 bits.
    columns = [np.zeros(count, dtype=np.uint64) for _ in range(7)]
    for i, ui in enumerate(u):
        for j, hj in enumerate(h):
            product = ui * hj
            columns[i + j] += product & mask
            columns[i + j + 1] += product >> shift
    carry = np.zeros(count, dtype=np.uint64)
    limbs = []
    for column in columns[:6]:
        total = column + carry
        limbs.append(total & mask)
        carry = total >> shift
    # Limbs 4 and 5 are bits 128..191 of u high: floor(u high / 2^128) < high < 2^63.
    return (limbs[4] | (limbs[5] << shift)).astype(np.int64)


# ----------------------------------------------------------------------------------
# Geometric and (discrete) Laplace: independent binary digits
# ----------------------------------------------------------------------------------
def geometric_bits(scale: float) -> int:
    """Public number ``B`` of digits: the least ``B >= 1`` with ``q^(2^B) <= 2^-64``.

    ``q = exp(-1/scale)``, so ``q^(2^B) = exp(-2^B / scale)`` and the condition is
    ``2^B >= 64 ln(2) scale``.
    """
    need = TAIL_BITS * math.log(2.0) * scale
    digits = max(1, math.ceil(math.log2(need))) if need > 1.0 else 1
    while 2.0 ** digits < need:  # guard the float ceil of the logarithm
        digits += 1
    if digits > _MAX_DIGITS:
        raise ValueError(f"scale {scale!r} is too large for the fixed-work geometric sampler "
                         f"(needs {digits} > {_MAX_DIGITS} binary digits)")
    return digits


@lru_cache(maxsize=256)
def geometric_thresholds(scale: float) -> np.ndarray:
    """Integer thresholds of the digits of a geometric with ``q = exp(-1/scale)``.

    Digit ``j`` is 1 with probability ``q^(2^j) / (1 + q^(2^j)) = 1 / (1 + exp(2^j /
    scale))``: for ``P(G = k) ∝ q^k`` and ``k = sum_j b_j 2^j``, the pmf factorizes as
    ``prod_j (q^(2^j))^(b_j)``, so the digits are independent with these odds.
    """
    digits = geometric_bits(scale)
    with localcontext() as ctx:
        # q^(2^j) by repeated squaring of q = exp(-1/scale): one exponential instead of
        # one per digit (5x faster; a simulation of many clients with distinct scales
        # computes a table per client). Each squaring at most doubles the relative error,
        # so after j <= 62 squarings at 60 digits it stays below 2^62 10^-60 < 10^-41,
        # far below the 2^-64 resolution of the thresholds (identical to one exponential
        # per digit on the scales tests/test_deployment_samplers.py checks).
        ctx.prec = 60
        power = (-1 / Decimal(scale)).exp()
        thresholds = []
        for _ in range(digits):
            thresholds.append(_threshold(power / (1 + power)))
            power = power * power
        return np.array(thresholds, dtype=np.uint64)


def geometric(scale: float, count: int) -> np.ndarray:
    """``count`` draws of ``P(G = k) ∝ exp(-k/scale)``, ``k`` in ``{0, ..., 2^B - 1}``.

    ``B = geometric_bits(scale)`` words per draw, one per binary digit, whatever the value.
    """
    thresholds = geometric_thresholds(float(scale))
    digits = thresholds.size
    bits = random_words(count * digits).reshape(count, digits) < thresholds
    return (bits.astype(np.int64) << np.arange(digits, dtype=np.int64)).sum(axis=1)


def discrete_laplace(scale: float, count: int) -> np.ndarray:
    """``count`` draws of ``P(z) ∝ exp(-|z|/scale)`` on the integers (int64).

    The difference of two i.i.d. geometrics with ``q = exp(-1/scale)`` is discrete
    Laplace (002 App. B.1.1, the n = 1 case of the Pólya construction); ``|z| < 2^B``.
    """
    both = geometric(scale, 2 * count)
    return both[:count] - both[count:]


def laplace_grid(scale: float) -> float:
    """The grid ``2^e`` of :func:`laplace`: ``scale / 2^e`` in ``[2^39, 2^40)``.

    Laplace outputs are multiples of it; a mechanism that rounds its statistic to this
    grid before adding the noise releases grid multiples only (as OpenDP does).
    """
    _, exponent = math.frexp(scale)  # scale = m 2^exponent, m in [0.5, 1)
    return math.ldexp(1.0, exponent - LAPLACE_GRID_BITS)


def laplace(scale: float, count: int) -> np.ndarray:
    """``count`` Laplace draws of scale ``scale`` on the grid ``2^e`` (floats).

    Discrete Laplace of scale ``scale / 2^e`` in grid units, times ``2^e``: every output is
    an exact float multiple of the grid (no floating-point sampling step), and the grid is
    ``2^-40`` to ``2^-39`` of the scale.
    """
    grid = laplace_grid(scale)
    return discrete_laplace(scale / grid, count).astype(np.float64) * grid


# ----------------------------------------------------------------------------------
# Table inversion: Gaussian and Pólya
# ----------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class InversionTable:
    """A law on ``{offset, ..., offset + N}`` given by ``N`` integer CDF thresholds.

    Threshold ``i`` is ``floor(F(offset + i) 2^128)``, held as its upper and lower 64-bit
    words (``high``, ``low``). A draw is ``offset + #{i : threshold_i <= u}`` for one
    128-bit CSPRNG integer ``u`` (two words): it compares ``u`` with every entry, so the
    work is the table length for every value. 128 bits keep each probability within
    ``2^-128`` of the table's law however long the table. ``tail_mass`` bounds the
    probability of the ideal law outside the support.
    """

    offset: int
    high: np.ndarray
    low: np.ndarray
    tail_mass: float

    @property
    def support(self) -> tuple[int, int]:
        """Smallest and largest value a draw can take."""
        return self.offset, self.offset + int(self.high.size)

    def thresholds(self) -> list[int]:
        """The 128-bit thresholds as Python integers."""
        return [(int(h) << 64) | int(lo) for h, lo in zip(self.high, self.low, strict=True)]

    def pmf(self) -> np.ndarray:
        """Exact probabilities of the sampler over its support (floats)."""
        edges = [0, *self.thresholds(), _TWO_128]
        return np.array([float(Fraction(b - a, _TWO_128)) for a, b in pairwise(edges)])

    def sample(self, count: int) -> np.ndarray:
        """``count`` draws (int64)."""
        words = random_words(2 * count).reshape(count, 2)
        out = np.empty(count, dtype=np.int64)
        step = max(1, _CHUNK_CELLS // max(1, self.high.size))
        for start in range(0, count, step):
            hi, lo = words[start:start + step, 0:1], words[start:start + step, 1:2]
            # threshold <= u on 128 bits, compared word by word over the whole table.
            below = (self.high < hi) | ((self.high == hi) & (self.low <= lo))
            out[start:start + step] = below.sum(axis=1)
        return out + self.offset


def _table(offset: int, weights: list[Decimal], tail_mass: float) -> InversionTable:
    # Thresholds are the rounded CDF of the renormalized (truncated) weights; 50 digits
    # (166 bits) of Decimal precision cover the 128-bit rounding.
    thresholds = []
    with localcontext() as ctx:
        ctx.prec = 50
        total = sum(weights, Decimal(0))
        cumulative = Decimal(0)
        for weight in weights[:-1]:
            cumulative += weight
            thresholds.append(min(max(int(cumulative / total * _TWO_128), 0), _TWO_128 - 1))
    high = np.array([t >> 64 for t in thresholds], dtype=np.uint64)
    low = np.array([t & (_TWO_64 - 1) for t in thresholds], dtype=np.uint64)
    return InversionTable(offset, high, low, tail_mass)


def _too_large(what: str) -> ValueError:
    return ValueError(f"the {what} table would exceed {MAX_TABLE_SIZE} entries for a tail "
                      f"below 2^-{TAIL_BITS}")


@lru_cache(maxsize=64)
def polya_table(r: float, alpha: float) -> InversionTable:
    """CDF table of Pólya(r, alpha) on ``{0, ..., K}``, ``P(k) = C(k+r-1, k) (1-alpha)^r alpha^k``.

    002 Protocol B.1 (Balle et al. 2020). ``K`` is the least with a tail bound
    ``P(X > K) <= 2^-64``: the pmf ratio ``P(k+1)/P(k) = alpha (k+r)/(k+1)`` is at most
    ``rho = alpha max(1, (K+1+r)/(K+2))`` beyond ``K``, so ``P(X > K) <= P(K+1)/(1-rho)``.
    ``0 < r``, ``0 < alpha < 1``.
    """
    bound = Decimal(2) ** -TAIL_BITS
    with localcontext() as ctx:
        ctx.prec = 50
        a, rr = Decimal(alpha), Decimal(r)
        weights = [(1 - a) ** rr]
        while True:
            k = len(weights) - 1
            nxt = weights[-1] * a * (k + rr) / (k + 1)
            rho = a * max(Decimal(1), (k + 1 + rr) / (k + 2))
            if rho < 1 and nxt / (1 - rho) <= bound:
                return _table(0, weights, float(nxt / (1 - rho)))
            if len(weights) >= MAX_TABLE_SIZE:
                raise _too_large(f"Pólya(r={r!r}, alpha={alpha!r})")
            weights.append(nxt)


def gaussian_grid(sigma: float) -> float:
    """The grid ``2^e`` of :func:`gaussian`: ``sigma / 2^e`` in ``[2^10, 2^11)``."""
    _, exponent = math.frexp(sigma)
    return math.ldexp(1.0, exponent - 1 - GAUSSIAN_GRID_BITS)


@lru_cache(maxsize=64)
def gaussian_table(units: float) -> InversionTable:
    """CDF table of the discrete Gaussian ``P(k) ∝ exp(-k²/(2 units²))`` on ``{-K, ..., K}``.

    Canonne, Kamath & Steinke (2020), Def. 1. Weights by the recurrence ``w(k+1) = w(k)
    exp(-(2k+1)/(2 units²))``; ``K`` is the least with a two-sided tail bound below
    ``2^-64``: the ratio decreases in ``k``, so ``sum_{k>K} w(k) <= w(K+1)/(1 - rho)`` with
    ``rho = exp(-(2K+3)/(2 units²))``, and the normalizer is at least the table's weight.
    """
    bound = Decimal(2) ** -TAIL_BITS
    with localcontext() as ctx:
        ctx.prec = 50
        inv = 1 / (2 * Decimal(units) ** 2)
        first, step = (-inv).exp(), (-2 * inv).exp()  # ratio w(k+1)/w(k) = first step^k
        side = [Decimal(1)]
        ratio = first
        mass = Decimal(1)
        while True:
            nxt = side[-1] * ratio
            rho = ratio * step
            tail = 2 * nxt / (1 - rho) / mass
            if tail <= bound:
                break
            if 2 * len(side) + 1 > MAX_TABLE_SIZE:
                raise _too_large(f"Gaussian({units!r} grid units)")
            side.append(nxt)
            mass += 2 * nxt
            ratio = rho
        return _table(1 - len(side), side[:0:-1] + side, float(tail))


def gaussian(sigma: float, count: int) -> np.ndarray:
    """``count`` Gaussian draws of standard deviation about ``sigma``, on the grid ``2^e``.

    A discrete Gaussian of parameter ``sigma / 2^e`` (between 1024 and 2048 grid units)
    times ``2^e``, by table inversion: exact float multiples of the grid. The discrete
    Gaussian's variance is below ``sigma²`` by a term of order ``exp(-2 pi² units²)``
    (Canonne, Kamath & Steinke 2020, Sec. 2), nil at 1024 units or more.
    """
    grid = gaussian_grid(sigma)
    return gaussian_table(sigma / grid).sample(count).astype(np.float64) * grid


def _table_fits(r: float, alpha: float) -> bool:
    """Whether the Pólya(r, alpha) table stays well inside :data:`MAX_TABLE_SIZE`.

    Beyond its mean the pmf falls by about ``alpha`` per step, so a 2^-64 tail needs about
    ``64 ln 2 / (1 - alpha)`` entries past ``r alpha / (1 - alpha)``; a public decision.
    """
    spread = (r * alpha + TAIL_BITS * math.log(2.0) + 8.0) / (1.0 - alpha)
    return spread < MAX_TABLE_SIZE / 2


@lru_cache(maxsize=64)
def poisson_table(lam: float) -> InversionTable:
    """CDF table of Poisson(lam) on ``{0, ..., K}`` with ``P(X > K) <= 2^-64``.

    Weights by ``w(k+1) = w(k) lam / (k + 1)``; beyond ``K >= lam`` the ratio is at most
    ``rho = lam / (K + 2)``, so the tail is at most ``w(K+1) / (1 - rho)``.
    """
    bound = Decimal(2) ** -TAIL_BITS
    with localcontext() as ctx:
        ctx.prec = 50
        mean = Decimal(lam)
        weights = [(-mean).exp()]
        while True:
            k = len(weights) - 1
            nxt = weights[-1] * mean / (k + 1)
            rho = mean / (k + 2)
            if rho < 1 and nxt / (1 - rho) <= bound:
                return _table(0, weights, float(nxt / (1 - rho)))
            if len(weights) >= MAX_TABLE_SIZE:
                raise _too_large(f"Poisson({lam!r})")
            weights.append(nxt)


def _compound_polya(r: float, alpha: float, count: int) -> np.ndarray:
    """Pólya(r, alpha) as a Poisson sum of logarithmic variables, with fixed work.

    The negative binomial is compound Poisson (Quenouille 1949): with
    ``N ~ Poisson(-r ln(1 - alpha))`` and ``L_i`` i.i.d. logarithmic,
    ``P(L = k) = alpha^k / (k (-ln(1 - alpha)))``, ``sum_{i <= N} L_i`` has the pgf
    ``((1 - alpha) / (1 - alpha z))^r``. A logarithmic variable is ``1 + G`` with ``G``
    geometric of parameter ``Q = 1 - (1 - alpha)^U``, ``U`` uniform (Kemp 1981: the integral
    of ``(1 - Q) Q^(k-1)`` over ``U`` is the logarithmic pmf), and ``G`` is drawn by its
    binary digits as in :func:`geometric`. Every draw makes ``K`` logarithmic variables
    (``K`` the Poisson table's largest value, public) and adds the first ``N``: the work
    does not depend on ``N`` or on the value. Unlike the table samplers, the digit
    thresholds come from floating-point ``Q`` (53-bit), so each probability is within
    about ``2^-50`` of the ideal; docs/secure.md states this.
    """
    table = poisson_table(-r * math.log1p(-alpha))
    many = table.support[1]
    digits = geometric_bits(-1.0 / math.log(alpha))
    n_terms = table.sample(count)
    u = uniform(count * many).reshape(count, many)
    # ln Q with Q = 1 - (1 - alpha)^U = -expm1(U ln(1 - alpha)); Q = 0 (U = 0) gives G = 0.
    with np.errstate(divide="ignore"):
        log_q = np.log(-np.expm1(u * math.log1p(-alpha)))
    powers = np.exp(log_q[..., None] * np.ldexp(1.0, np.arange(digits)))  # Q^(2^j)
    thresholds = np.floor(np.ldexp(powers / (1.0 + powers), 64))
    thresholds = np.minimum(thresholds, float(_TWO_64 - 2048)).astype(np.uint64)
    words = random_words(count * many * digits).reshape(count, many, digits)
    geometric_values = ((words < thresholds).astype(np.int64)
                        << np.arange(digits, dtype=np.int64)).sum(axis=2)
    used = np.arange(many) < n_terms[:, None]
    return ((1 + geometric_values) * used).sum(axis=1)


def polya(r: float, alpha: float, count: int) -> np.ndarray:
    """``count`` Pólya(r, alpha) draws (int64) with fixed work.

    By table inversion (:func:`polya_table`) where the table is small; otherwise, for
    ``r = 1`` (a geometric) by binary digits (:func:`geometric`), and for other ``r`` as a
    compound Poisson sum (:func:`_compound_polya`). Which construction is used depends on
    the public ``r`` and ``alpha`` only.
    """
    r, alpha = float(r), float(alpha)
    if _table_fits(r, alpha):
        return polya_table(r, alpha).sample(count)
    if r == 1.0:
        return geometric(-1.0 / math.log(alpha), count)
    return _compound_polya(r, alpha, count)
