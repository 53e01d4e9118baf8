"""The law of a release's error, for intervals that cover.

A private release is ``released = exact + Z``. Its interval should use the law of ``Z``,
not a normal approximation: for the Laplace mechanism (002 App. A.4, Lemma A.5) the
normal interval ``value ± 1.96 sd`` covers only ``1 - exp(-1.96 sqrt 2) = 93.7%``, while
the Laplace quantile ``b ln(1 / (1 - level))`` covers exactly ``level``.

Every law here is symmetric about 0 and is computed from public quantities only (noise
scales, the public sample-size terms of a variance), so an interval built from it is
post-processing of the release.

* :class:`NormalError`: Gaussian noise, or a CLT approximation of a sum of many small
  terms (randomized response counts, sampled designs).
* :class:`LaplaceError`: the Laplace mechanism, exactly.
* :class:`DiscreteLaplaceError`: the discrete Laplace (two-sided geometric) mechanism on
  a lattice ``unit * Z`` (002 App. B.1.1), exactly; its intervals are lattice points, so
  they cover at least ``level``.
* :class:`ScaledError`: ``c Z`` (a statistic that is a linear map of U, or the delta
  method's slope).
* :class:`BoundedBias`: a law plus an unknown bias bounded by a public (or released)
  quantity, e.g. the discarding bias of a pruned tree: the half-width grows by the bound.
* :func:`inverted_error_law`: for an estimate whose error law depends on the unknown
  parameter (a ratio estimator with noisy counts), the law whose interval is that of the
  test inversion ``{theta : |estimate - theta| <= a(theta)}``.
* :class:`SumOfErrors`: independent terms added (Laplace noise plus a design's sampling
  error, K clients' Laplace noises): its cdf by the Gil-Pelaez inversion of the product of
  the characteristic functions (Gil-Pelaez 1951: for a symmetric law with real
  characteristic function ``phi``, ``F(x) = 1/2 + (1/pi) int_0^inf sin(w x) phi(w) / w dw``).
  When every term is a lattice law the integral does not converge; the sum then uses the
  conservative union bound ``P(|sum Z_i| > sum a_i) <= sum P(|Z_i| > a_i)``.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedustat._lazy import lazy_module

integrate = lazy_module("scipy.integrate")
optimize = lazy_module("scipy.optimize")
signal = lazy_module("scipy.signal")
special = lazy_module("scipy.special")
sps = lazy_module("scipy.stats")


__all__ = [
    "BoundedBias",
    "DiscreteLaplaceError",
    "ErrorDistribution",
    "LaplaceError",
    "NormalError",
    "ScaledError",
    "SumOfErrors",
    "error_sum",
    "has_closed_tail",
    "inverted_error_law",
    "laplace_sum",
    "noise_sum",
    "normal_laplace_upper_tail",
    "upper_tail",
]

# A sum is given a normal law when no single term carries more than this share of its
# variance; see :func:`noise_sum`.
NORMAL_SHARE = 0.1


def _check_level(level: float) -> float:
    if isinstance(level, bool) or not isinstance(level, int | float | np.floating) \
            or not 0.0 < float(level) < 1.0:
        raise ValueError(f"confidence_level must be a number in (0, 1), got {level!r}")
    return float(level)


def _check_scale(value: float, name: str) -> float:
    value = float(value)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


class ErrorDistribution(ABC):
    """The law of ``Z = released - exact``: symmetric about 0, from public quantities."""

    @property
    @abstractmethod
    def variance(self) -> float:
        """``Var Z``."""

    @property
    def std(self) -> float:
        return math.sqrt(self.variance)

    @abstractmethod
    def cdf(self, x: float) -> float:
        """``P(Z <= x)``."""

    @property
    def is_lattice(self) -> bool:
        """True for a law on a lattice (no density); sums of such laws need a bound."""
        return False

    def characteristic(self, w: np.ndarray) -> np.ndarray:
        """``E cos(w Z)`` (the characteristic function, real for a symmetric law)."""
        raise NotImplementedError

    def half_width(self, confidence_level: float = 0.95) -> float:
        """The smallest ``a`` with ``P(|Z| <= a) >= confidence_level``."""
        level = _check_level(confidence_level)
        if self.variance == 0.0:
            return 0.0
        target = 0.5 + level / 2.0
        hi = max(self.std, 1e-300)
        while self.cdf(hi) < target:
            hi *= 2.0
        return float(optimize.brentq(lambda a: self.cdf(a) - target, 0.0, hi, xtol=1e-14 * hi,
                                     rtol=1e-12))

    def interval(self, confidence_level: float = 0.95) -> tuple[float, float]:
        """``(lo, hi)`` with ``P(lo <= Z <= hi) >= confidence_level`` (symmetric)."""
        a = self.half_width(confidence_level)
        return -a, a

    def scaled(self, factor: float) -> ErrorDistribution:
        """The law of ``factor * Z``."""
        return ScaledError(self, factor)

    def __add__(self, other: ErrorDistribution) -> ErrorDistribution:
        return error_sum([self, other])


@dataclass(frozen=True)
class NormalError(ErrorDistribution):
    """``Z ~ N(0, sigma^2)``."""

    sigma: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", _check_scale(self.sigma, "sigma"))

    @property
    def variance(self) -> float:
        return self.sigma**2

    def cdf(self, x: float) -> float:
        if self.sigma == 0.0:
            return 1.0 if x >= 0 else 0.0
        return float(sps.norm.cdf(x / self.sigma))

    def half_width(self, confidence_level: float = 0.95) -> float:
        level = _check_level(confidence_level)
        return float(self.sigma * sps.norm.ppf(0.5 + level / 2.0))

    def characteristic(self, w: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * (self.sigma * np.asarray(w)) ** 2)

    def __str__(self) -> str:
        return f"normal(sd={self.sigma:.3g})"


@dataclass(frozen=True)
class LaplaceError(ErrorDistribution):
    """``Z ~ Laplace(0, b)``, density ``exp(-|z|/b) / (2b)`` (002 App. A.4, Lemma A.5)."""

    scale: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _check_scale(self.scale, "scale"))

    @property
    def variance(self) -> float:
        return 2.0 * self.scale**2

    def cdf(self, x: float) -> float:
        if self.scale == 0.0:
            return 1.0 if x >= 0 else 0.0
        z = x / self.scale
        return 1.0 - 0.5 * math.exp(-z) if z >= 0 else 0.5 * math.exp(z)

    def half_width(self, confidence_level: float = 0.95) -> float:
        # P(|Z| <= a) = 1 - exp(-a/b).
        level = _check_level(confidence_level)
        return self.scale * math.log(1.0 / (1.0 - level))

    def characteristic(self, w: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + (self.scale * np.asarray(w)) ** 2)

    def __str__(self) -> str:
        return f"Laplace(b={self.scale:.3g})"


@dataclass(frozen=True)
class DiscreteLaplaceError(ErrorDistribution):
    """``Z = unit * K`` with ``P(K = k) = (1 - t)/(1 + t) t^|k|``, ``t = exp(-1/scale)``
    (the discrete Laplace of 002 App. B.1.1; ``scale`` in lattice units)."""

    scale: float
    unit: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", _check_scale(self.scale, "scale"))
        object.__setattr__(self, "unit", _check_scale(self.unit, "unit"))

    @property
    def _t(self) -> float:
        return math.exp(-1.0 / self.scale) if self.scale > 0 else 0.0

    @property
    def is_lattice(self) -> bool:
        return True

    @property
    def variance(self) -> float:
        t = self._t
        return self.unit**2 * 2.0 * t / (1.0 - t) ** 2

    def _abs_tail(self, k: int) -> float:
        """``P(|K| > k)`` for k >= 0: ``2 t^(k+1) / (1 + t)``."""
        t = self._t
        return 2.0 * t ** (k + 1) / (1.0 + t)

    def cdf(self, x: float) -> float:
        if self.unit == 0.0 or self.scale == 0.0:
            return 1.0 if x >= 0 else 0.0
        k = math.floor(x / self.unit + 1e-12)
        if k >= 0:
            return 1.0 - 0.5 * self._abs_tail(k)
        return 0.5 * self._abs_tail(-k - 1)

    def half_width(self, confidence_level: float = 0.95) -> float:
        level = _check_level(confidence_level)
        if self.unit == 0.0 or self.scale == 0.0:
            return 0.0
        t = self._t
        # Smallest k with 2 t^(k+1) / (1 + t) <= 1 - level.
        k = math.ceil(math.log((1.0 - level) * (1.0 + t) / 2.0) / math.log(t) - 1.0 - 1e-12)
        return max(k, 0) * self.unit

    def characteristic(self, w: np.ndarray) -> np.ndarray:
        t = self._t
        return (1.0 - t) ** 2 / (1.0 - 2.0 * t * np.cos(np.asarray(w) * self.unit) + t * t)

    def __str__(self) -> str:
        return f"discrete Laplace(scale={self.scale:.3g} x {self.unit:.3g})"


@dataclass(frozen=True)
class ScaledError(ErrorDistribution):
    """``factor * Z`` for a base law ``Z``."""

    base: ErrorDistribution
    factor: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "factor", abs(_finite(self.factor, "factor")))

    @property
    def variance(self) -> float:
        return self.factor**2 * self.base.variance

    @property
    def is_lattice(self) -> bool:
        return self.base.is_lattice

    def cdf(self, x: float) -> float:
        if self.factor == 0.0:
            return 1.0 if x >= 0 else 0.0
        return self.base.cdf(x / self.factor)

    def half_width(self, confidence_level: float = 0.95) -> float:
        return self.factor * self.base.half_width(confidence_level)

    def characteristic(self, w: np.ndarray) -> np.ndarray:
        return self.base.characteristic(self.factor * np.asarray(w))

    def __str__(self) -> str:
        return f"{self.factor:.3g} x {self.base}"


def _finite(value: float, name: str) -> float:
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


@dataclass(frozen=True)
class SumOfErrors(ErrorDistribution):
    """The sum of independent symmetric terms (see the module docstring for the method)."""

    parts: tuple[ErrorDistribution, ...]

    @property
    def variance(self) -> float:
        return math.fsum(p.variance for p in self.parts)

    @property
    def is_lattice(self) -> bool:
        return all(p.is_lattice for p in self.parts)

    def characteristic(self, w: np.ndarray) -> np.ndarray:
        out = np.ones_like(np.asarray(w, dtype=np.float64))
        for p in self.parts:
            out = out * p.characteristic(w)
        return out

    def cdf(self, x: float) -> float:
        if self.is_lattice:
            raise ValueError("the cdf of a sum of lattice laws is not computed; "
                             "use half_width (a union bound)")
        if x == 0.0:
            return 0.5
        sd = self.std
        if abs(x) <= _SERIES_RANGE * sd:
            h, w, weight = _series_grid(self)
            # Gil-Pelaez by the trapezoid rule (see _series_grid); the w = 0 term is x.
            total = h * (0.5 * x + float(np.dot(np.sin(w * x), weight)))
            return float(min(1.0, max(0.0, 0.5 + total / math.pi)))

        def integrand(w: float) -> float:
            return math.sin(w * x) * float(self.characteristic(np.array(w))) / w

        # The characteristic function of a law with a density decays; integrate it on
        # growing windows (in units of 1/sd) until the window adds nothing.
        total, start, width = 0.0, 0.0, 10.0 / sd
        for _ in range(60):
            part, _ = integrate.quad(integrand, start, start + width, limit=400)
            total += part
            start += width
            if abs(part) < 1e-13 and float(abs(self.characteristic(np.array(start)))) < 1e-12:
                break
            width *= 2.0
        return float(min(1.0, max(0.0, 0.5 + total / math.pi)))

    def half_width(self, confidence_level: float = 0.95) -> float:
        level = _check_level(confidence_level)
        if not self.is_lattice:
            # A numerical inversion: cached, since one law serves many points (an ECDF).
            return _sum_half_width(self, level)
        # Union bound: split the miss probability in proportion to each part's variance.
        alpha = 1.0 - level
        total = self.variance
        if total == 0.0:
            return 0.0
        return math.fsum(p.half_width(1.0 - alpha * max(p.variance / total, 1e-300))
                         if p.variance > 0 else 0.0 for p in self.parts)

    def __str__(self) -> str:
        return " + ".join(str(p) for p in self.parts)


@dataclass(frozen=True)
class BoundedBias(ErrorDistribution):
    """``Z = Y + d`` with Y of law ``base`` and an unknown constant ``|d| <= bound``.

    Conservative: ``P(|Z| <= a + bound) >= P(|Y| <= a)``, so the half-width is the base's
    plus the bound, and :meth:`cdf` is the worst case over d (``F_Y(x - bound)`` for
    ``x >= 0``, ``F_Y(x + bound)`` below 0). ``variance`` bounds ``E Z^2``.
    """

    base: ErrorDistribution
    bound: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "bound", _check_scale(self.bound, "bound"))

    @property
    def variance(self) -> float:
        return self.base.variance + self.bound**2

    def cdf(self, x: float) -> float:
        return self.base.cdf(x - self.bound) if x >= 0 else self.base.cdf(x + self.bound)

    def half_width(self, confidence_level: float = 0.95) -> float:
        return self.base.half_width(confidence_level) + self.bound

    def scaled(self, factor: float) -> ErrorDistribution:
        return BoundedBias(self.base.scaled(factor), abs(factor) * self.bound)

    def __str__(self) -> str:
        return f"{self.base} + bias within ±{self.bound:.3g}"


# The trapezoid series serves |x| <= _SERIES_RANGE sd; its step puts the first alias at
# _SERIES_ALIAS sd beyond that, and it stops where |phi| < _SERIES_PHI_TAIL.
_SERIES_RANGE = 20.0
_SERIES_ALIAS = 40.0
_SERIES_PHI_TAIL = 1e-7
_SERIES_MAX_TERMS = 2_000_000


@functools.lru_cache(maxsize=256)
def _series_grid(law: SumOfErrors) -> tuple[float, np.ndarray, np.ndarray]:
    """Nodes ``w_k = k h`` and weights ``phi(w_k) / w_k`` of the trapezoid rule for the
    Gil-Pelaez integral (cached per law: a half-width needs many cdf values).

    By Poisson summation the trapezoid rule with step h gives the cdf of the law
    periodized with period ``2 pi / h`` (Abate & Whitt 1992, "The Fourier-series method
    for inverting transforms of probability distributions", Sec. 5), so its error at x is
    at most ``P(|Z| > 2 pi / h - |x|)``: with ``2 pi / h = 60 sd`` and ``|x| <= 20 sd``
    that is a tail beyond 40 sd, below 1e-15 for sums of Laplace, discrete Laplace and
    normal terms. The series stops at the first w with ``|phi(w)| < 1e-7``; the
    oscillating remainder is then of order ``1e-7 / (w x)``.
    """
    sd = law.std
    h = 2.0 * math.pi / ((_SERIES_RANGE + _SERIES_ALIAS) * sd)
    top = 10.0 / sd
    while float(abs(law.characteristic(np.array(top)))) > _SERIES_PHI_TAIL \
            and top / h < _SERIES_MAX_TERMS:
        top *= 2.0
    w = h * np.arange(1, int(top / h) + 2)
    return h, w, law.characteristic(w) / w


@functools.lru_cache(maxsize=256)
def _sum_half_width(law: SumOfErrors, level: float) -> float:
    return ErrorDistribution.half_width(law, level)


def error_sum(parts: Sequence[ErrorDistribution]) -> ErrorDistribution:
    """The law of a sum of independent terms; zero-variance terms are dropped and a single
    remaining term is returned as it is."""
    flat: list[ErrorDistribution] = []
    bias = 0.0
    for p in parts:
        if not isinstance(p, ErrorDistribution):
            raise TypeError(f"parts must be ErrorDistribution objects, got {type(p).__name__}")
        if isinstance(p, BoundedBias):  # biases add up; the random parts are convolved
            bias += p.bound
            p = p.base
        flat.extend(p.parts if isinstance(p, SumOfErrors) else (p,))
    if bias > 0.0:
        return BoundedBias(error_sum(flat), bias)
    flat = [p for p in flat if p.variance > 0.0]
    if not flat:
        return NormalError(0.0)
    if len(flat) == 1:
        return flat[0]
    if all(isinstance(p, NormalError) for p in flat):
        return NormalError(math.sqrt(math.fsum(p.variance for p in flat)))
    return SumOfErrors(tuple(flat))


def noise_sum(parts: Sequence[ErrorDistribution], *,
              max_share: float = NORMAL_SHARE) -> ErrorDistribution:
    """The law of a sum of independent symmetric terms, normal where the CLT applies.

    With many comparable terms the sum is normal (Lindeberg's CLT): its excess kurtosis
    is ``sum_i kappa_i v_i^2 / (sum_i v_i)^2 <= max_i kappa_i * (largest variance share)``
    (cumulants add), at most 3 x 0.1 = 0.3 for Laplace terms when no term carries more
    than ``max_share`` of the variance. Otherwise (few terms, or one dominant Laplace
    term) the exact sum of :func:`error_sum` is used.
    """
    flat = [p for p in parts if p.variance > 0.0]
    total = math.fsum(p.variance for p in flat)
    if total == 0.0:
        return NormalError(0.0)
    if max(p.variance for p in flat) <= max_share * total:
        return NormalError(math.sqrt(total))
    return error_sum(flat)


def laplace_sum(scales: Sequence[float] | np.ndarray, *,
                max_share: float = NORMAL_SHARE) -> ErrorDistribution:
    """The law of ``sum_i Lap(b_i)`` for independent Laplace terms of scales ``b_i``.

    Normal when no term carries more than ``max_share`` of the variance (see
    :func:`noise_sum`), else the exact sum of :func:`error_sum`.
    """
    b = np.abs(np.asarray(scales, dtype=np.float64).ravel())
    if not np.all(np.isfinite(b)):
        raise ValueError("scales must be finite")
    b = b[b > 0]
    if b.size == 0:
        return NormalError(0.0)
    total = float(np.sum(2.0 * b * b))
    if float(2.0 * b.max() ** 2) <= max_share * total:
        return NormalError(math.sqrt(total))
    return error_sum([LaplaceError(float(v)) for v in b])


def normal_laplace_upper_tail(x: np.ndarray | float, sigma: float,
                              scale: float) -> np.ndarray:
    """``P(N + L >= x)`` for independent ``N ~ N(0, sigma^2)`` and ``L ~ Laplace(0, scale)``.

    The normal-Laplace law's closed form (Reed and Jorgensen 2004, "The double Pareto-
    lognormal distribution", Commun. Stat. Theory Methods 33(8), eq. 3):
    ``P(N + L > x) = Q(z) + phi(z) [R(a - z) - R(a + z)] / 2`` with ``z = x / sigma``,
    ``a = sigma / scale``, ``Q`` the normal upper tail and ``R = Q / phi`` Mills' ratio.
    Each term is computed in logs (``log Q`` by ``scipy.special.log_ndtr``), so the tail
    keeps its relative accuracy far out (no ``1 - cdf`` cancellation); ``x < 0`` by
    symmetry. Vectorised over ``x``.
    """
    x = np.asarray(x, dtype=np.float64)
    if sigma == 0.0:
        return upper_tail(LaplaceError(scale), x)
    if scale == 0.0:
        return upper_tail(NormalError(sigma), x)
    a = sigma / scale
    z = np.abs(x) / sigma

    def log_phi(u: np.ndarray) -> np.ndarray:
        return -0.5 * u * u - 0.5 * math.log(2.0 * math.pi)

    # log phi(z) + log R(u) = log phi(z) - log phi(u) + log Q(u), log Q(u) = log_ndtr(-u).
    near = np.exp(log_phi(z) - log_phi(a - z) + special.log_ndtr(z - a))
    far = np.exp(log_phi(z) - log_phi(a + z) + special.log_ndtr(-(a + z)))
    tail = np.exp(special.log_ndtr(-z)) + 0.5 * (near - far)
    tail = np.clip(tail, 0.0, 1.0)
    return np.where(x >= 0.0, tail, 1.0 - tail)


def _normal_laplace_parts(law: ErrorDistribution) -> tuple[float, float] | None:
    """``(sigma, b)`` when ``law`` is one normal plus one Laplace term (either may be
    scaled), else None."""
    if not isinstance(law, SumOfErrors) or len(law.parts) != 2:
        return None
    sigma = scale = None
    for part in law.parts:
        factor = 1.0
        while isinstance(part, ScaledError):
            factor *= part.factor
            part = part.base
        if isinstance(part, NormalError) and sigma is None:
            sigma = factor * part.sigma
        elif isinstance(part, LaplaceError) and scale is None:
            scale = factor * part.scale
        else:
            return None
    return None if sigma is None or scale is None else (sigma, scale)


def _unwrap(law: ErrorDistribution) -> ErrorDistribution:
    while isinstance(law, ScaledError | BoundedBias):
        law = law.base
    return law


def has_closed_tail(law: ErrorDistribution) -> bool:
    """True when :func:`upper_tail` evaluates ``law`` vectorised: in closed form (normal,
    Laplace, discrete Laplace, normal plus Laplace, scaled or biased), or, for a sum of
    such terms, from their exact convolution on a grid. False when it falls back to
    ``law.cdf`` point by point (other laws, or sums with another law in them)."""
    law = _unwrap(law)
    if isinstance(law, SumOfErrors):
        return all(_closed_form(part) for part in law.parts)
    return _closed_form(law)


def _closed_form(law: ErrorDistribution) -> bool:
    law = _unwrap(law)
    return (isinstance(law, NormalError | LaplaceError | DiscreteLaplaceError)
            or _normal_laplace_parts(law) is not None)


# The grid of a sum's convolution: each term is cut at this many of its standard
# deviations (the mass beyond, at most 1e-24 for these laws, is counted as exceeding every
# point), and the grid step is the sum's standard deviation over _SUM_GRID_PER_SD.
_SUM_GRID_REACH = 40.0
_SUM_GRID_PER_SD = 1000.0


@functools.lru_cache(maxsize=64)
def _sum_tail_grid(law: SumOfErrors) -> tuple[float, float, np.ndarray, float]:
    """``(start, step, tails, beyond)``: ``P(S >= start + i step) <= tails[i] + beyond`` for
    the sum S of ``law``'s terms, each term's mass on ``(g - step, g]`` moved up to the grid
    point g (so the result only overstates an upper tail: conservative, by at most one
    step per term), the terms' grid laws convolved exactly (FFT; absolute error about
    1e-15). ``beyond`` bounds the mass the cut drops above the grid (a union bound)."""
    step = law.std / _SUM_GRID_PER_SD
    start, masses, beyond = 0.0, np.ones(1), 0.0
    for part in law.parts:
        half = max(1, math.ceil(_SUM_GRID_REACH * part.std / step)) * step
        edges = np.linspace(-half, half, round(2.0 * half / step) + 1)
        cdf = upper_tail(part, -edges)  # P(Z <= e) = P(Z >= -e) by symmetry
        part_mass = np.diff(cdf, prepend=0.0)  # the lowest point holds everything below it
        beyond += float(1.0 - cdf[-1])
        masses = signal.fftconvolve(masses, np.clip(part_mass, 0.0, None))
        start -= half
    masses = np.clip(masses, 0.0, None)
    tails = np.cumsum(masses[::-1])[::-1]
    return start, step, tails, beyond


def _inverted_sum_upper_tail(law: SumOfErrors, x: np.ndarray) -> np.ndarray:
    """A sum with a term that has no closed form: ``cdf(-x)`` (Gil-Pelaez inversion)
    within ``_SERIES_RANGE`` standard deviations, where it is a cached series; beyond,
    the union bound ``P(sum Z_i >= x) <= sum P(Z_i >= x sd_i / sum sd_j)`` (a tail of at
    most about 1e-8 there, overstated: conservative)."""
    flat = x.ravel()
    sd = law.std
    shares = np.array([part.std for part in law.parts])
    shares = shares / shares.sum()
    out = np.empty_like(flat)
    for i, v in enumerate(flat):
        if abs(v) <= _SERIES_RANGE * sd:
            out[i] = law.cdf(-float(v))
        elif v > 0.0:
            out[i] = min(1.0, sum(float(upper_tail(part, v * share))
                                  for part, share in zip(law.parts, shares, strict=True)))
        else:
            out[i] = 1.0
    return out.reshape(x.shape)


def _sum_upper_tail(law: SumOfErrors, x: np.ndarray) -> np.ndarray:
    start, step, tails, beyond = _sum_tail_grid(law)
    # The first grid point at or above x (within rounding of a point counts as on it).
    index = np.ceil((x - start) / step - 1e-9)
    inside = np.clip(index, 0, len(tails) - 1).astype(np.int64)
    out = np.where(index >= len(tails), 0.0, tails[inside]) + beyond
    return np.clip(np.where(index <= 0, 1.0, out), 0.0, 1.0)


def upper_tail(law: ErrorDistribution, x: np.ndarray | float) -> np.ndarray:
    """``P(Z >= x)`` for the error ``Z`` of law ``law``, vectorised over ``x``.

    By the symmetry of every law here, ``P(Z >= x) = P(Z <= -x) = cdf(-x)``, atoms
    included; the closed forms below keep relative accuracy far in the tail (a p-value
    of 1e-12 is computed as such, not as ``1 - cdf``). For a :class:`BoundedBias` it is the
    worst case over the bias, ``P(Y >= x - bound)`` (conservative for an upper tail). Laws
    without a closed form use their ``cdf`` (see :func:`has_closed_tail`); a sum of
    closed-form terms uses their convolution on a fine grid (``_sum_tail_grid``).
    """
    x = np.asarray(x, dtype=np.float64)
    if law.variance == 0.0 and not isinstance(law, BoundedBias):
        return (x <= 0.0).astype(np.float64)
    if isinstance(law, NormalError):
        return sps.norm.sf(x / law.sigma)
    if isinstance(law, LaplaceError):
        z = np.abs(x) / law.scale
        half = 0.5 * np.exp(-z)
        return np.where(x >= 0.0, half, 1.0 - half)
    if isinstance(law, DiscreteLaplaceError):
        t = law._t
        # P(Z >= x) = P(K >= m), m the least integer >= x / unit (a point within
        # rounding of a lattice point counts as on it: the larger, conservative tail).
        m = np.ceil(x / law.unit - 1e-9)
        above = np.power(t, np.maximum(m, 1.0)) / (1.0 + t)    # P(K >= m), m >= 1
        below = np.power(t, np.maximum(1.0 - m, 1.0)) / (1.0 + t)  # P(K <= m - 1), m <= 0
        return np.where(m >= 1.0, above, 1.0 - below)
    if isinstance(law, ScaledError):
        if law.factor == 0.0:
            return (x <= 0.0).astype(np.float64)
        return upper_tail(law.base, x / law.factor)
    if isinstance(law, BoundedBias):
        return upper_tail(law.base, x - law.bound)
    parts = _normal_laplace_parts(law)
    if parts is not None:
        return normal_laplace_upper_tail(x, *parts)
    if isinstance(law, SumOfErrors) and has_closed_tail(law):
        return _sum_upper_tail(law, x)
    if isinstance(law, SumOfErrors) and not law.is_lattice:
        return _inverted_sum_upper_tail(law, x)
    flat = x.ravel()
    return np.array([law.cdf(-float(v)) for v in flat], dtype=np.float64).reshape(x.shape)


#: The level at which :func:`inverted_error_law` inverts its test.
INVERSION_LEVEL = 0.95


def inverted_error_law(estimate: float, law_at: Callable[[float], ErrorDistribution], *,
                       parameter_range: tuple[float, float] = (0.0, 1.0),
                       confidence_level: float = INVERSION_LEVEL) -> ErrorDistribution:
    """The error law of ``estimate`` when that law depends on the unknown parameter.

    ``law_at(theta)`` is the law of ``estimate - theta`` if the parameter were ``theta``
    (e.g. a delta-method law whose slope involves theta). Plugging in ``theta = estimate``
    correlates the half-width with the error (a large error widens its own interval, an
    over-coverage). The test inversion ``{theta : |estimate - theta| <= a(theta)}``, with
    ``a(theta)`` the half-width of ``law_at(theta)`` at ``confidence_level`` and theta
    held in ``parameter_range`` where ``law_at`` is evaluated, covers at the level of the
    law at the true parameter (Casella & Berger 2002, Sec. 9.2.1). Its ends ``lo, hi``
    solve ``estimate - lo = a(lo)`` and ``hi - estimate = a(hi)``; the law returned is
    ``law_at(theta*)`` with ``a(theta*) = (hi - lo) / 2``: a symmetric interval about
    the estimate as wide as the inversion's, at ``confidence_level`` exactly (other
    levels use the same law). Everything reads the estimate and public scales only.
    """
    level = _check_level(confidence_level)
    low, high = float(parameter_range[0]), float(parameter_range[1])
    estimate = float(estimate)

    def clip(theta: float) -> float:
        return min(max(theta, low), high)

    def half(theta: float) -> float:
        return law_at(clip(theta)).half_width(level)

    def end(sign: float) -> float:
        # The root of |theta - estimate| = a(theta) on the side ``sign``: a(theta) is
        # bounded on the clipped range, so doubling the step brackets it.
        step = half(estimate)
        if step == 0.0:
            return estimate

        def gap(theta: float) -> float:
            return abs(theta - estimate) - half(theta)

        for _ in range(200):
            if gap(estimate + sign * step) >= 0.0:
                break
            step *= 2.0
        return float(optimize.brentq(gap, estimate, estimate + sign * step,
                                     xtol=1e-12 * max(1.0, abs(estimate)) + 1e-15 * step))

    lo, hi = end(-1.0), end(1.0)
    target = (hi - lo) / 2.0
    below, above = half(lo) - target, half(hi) - target
    if below == 0.0 or below * above > 0.0:
        return law_at(clip(lo))
    if above == 0.0:
        return law_at(clip(hi))
    theta = optimize.brentq(lambda t: half(t) - target, lo, hi, xtol=1e-12 + 1e-9 * target)
    return law_at(clip(theta))
