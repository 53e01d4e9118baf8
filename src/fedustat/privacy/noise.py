"""Where randomness comes from: simulation or deployment (ARCHITECTURE.md, principle 4).

Every mechanism and randomizer in :mod:`fedustat.privacy` draws through a
:class:`NoiseSource`, so the choice between the two kinds of randomness is explicit:

* :class:`SimulationNoise` wraps a seeded ``numpy.random.Generator``. It is fast and
  reproducible (same seed, same output) and is what tests, benchmarks and the in-process
  simulator use. It is **not** fit for protecting real people: NumPy's generators are not
  cryptographically secure and its floating-point Laplace/Gaussian samplers are open to
  the floating-point attacks of Mironov (CCS 2012).
* :class:`DeploymentNoise` draws every value from the operating system's CSPRNG
  (:mod:`secrets`) through the fixed-work samplers of :mod:`fedustat.privacy.samplers`:
  exact integer thresholds (secure against floating-point attacks) and a running time
  that does not depend on the value drawn. It is slower than NumPy (tens of microseconds
  per Gaussian or Pólya draw): it suits one party's few values, never a simulation of
  millions of parties.

:func:`as_noise` turns the usual ``rng`` argument into a source: a seed or a Generator
into a :class:`SimulationNoise` (a study asked for explicitly), ``None`` into a
:class:`DeploymentNoise` (no seed: the draw may protect someone's record, so it comes
from the CSPRNG), and passes a :class:`NoiseSource` through unchanged.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, Literal

import numpy as np

from fedustat._validation import RandomLike, as_rng, check_epsilon, check_probability
from fedustat.privacy import samplers

Size = int | tuple[int, ...]
NoiseKind = Literal["simulation", "deployment"]

__all__ = ["DeploymentNoise", "NoiseSource", "SimulationNoise", "Size", "as_noise",
           "resolve_noise"]


def _shape(size: Size) -> tuple[int, ...]:
    """Normalize ``size`` (an int or a tuple of ints) to a shape tuple."""
    dims = (size,) if isinstance(size, int | np.integer) else tuple(size)
    for dim in dims:
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 0:
            raise ValueError(
                f"size must be a non-negative integer or a tuple of them, got {size!r}")
    return tuple(int(d) for d in dims)


def _check_scale(value: Any, name: str) -> float:
    # A noise scale is a positive finite number, exactly like a privacy budget.
    return check_epsilon(value, name)


def _check_high(high: Any) -> int:
    if isinstance(high, bool) or not isinstance(high, int | np.integer) or high < 1:
        raise ValueError(f"high must be an integer >= 1, got {high!r}")
    return int(high)


class NoiseSource(ABC):
    """A source of the random draws the privacy primitives need.

    All methods are vectorized: they return an array of shape ``size``.
    """

    @property
    @abstractmethod
    def kind(self) -> NoiseKind:
        """``"simulation"`` or ``"deployment"``; recorded in a release's diagnostics."""

    @abstractmethod
    def laplace(self, scale: float, size: Size) -> np.ndarray:
        """Centered Laplace noise with density ``exp(-|z|/scale) / (2 scale)`` (floats)."""

    @abstractmethod
    def gaussian(self, sigma: float, size: Size) -> np.ndarray:
        """Centered Gaussian noise with standard deviation ``sigma`` (floats)."""

    @abstractmethod
    def discrete_laplace(self, scale: float, size: Size) -> np.ndarray:
        """Two-sided geometric noise on the integers, ``P(z) ∝ exp(-|z|/scale)`` (int64)."""

    @abstractmethod
    def uniform(self, size: Size) -> np.ndarray:
        """Uniform floats in ``[0, 1)``."""

    @abstractmethod
    def integers(self, high: int, size: Size) -> np.ndarray:
        """Uniform integers in ``{0, ..., high - 1}`` (int64)."""

    @abstractmethod
    def bernoulli(self, p: float, size: Size) -> np.ndarray:
        """Booleans that are ``True`` with probability ``p``."""

    @abstractmethod
    def polya(self, r: float, alpha: float, size: Size) -> np.ndarray:
        """Pólya (negative binomial with real ``r``) draws, ``P(k) ∝ Γ(k+r)/k! alpha^k``.

        Mean ``r alpha / (1 - alpha)``; see :func:`fedustat.privacy.mechanisms.polya`.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r})"

    def public_description(self) -> str:
        """What a protocol's configuration records of its noise source: its kind,
        ``"deployment"`` or ``"simulation"`` (a generator's state is no setting)."""
        return self.kind


class SimulationNoise(NoiseSource):
    """Fast, reproducible noise from a seeded ``numpy.random.Generator``.

    For simulations, tests and benchmarks only: NumPy's bit generators are not
    cryptographically secure and its floating-point samplers leak through their low-order
    bits (Mironov 2012). Use :class:`DeploymentNoise` to protect real people.

    Parameters
    ----------
    rng:
        None (fresh entropy), an integer seed, a ``SeedSequence`` or a ``Generator``.
        A Generator is used (and advanced) in place.
    """

    def __init__(self, rng: RandomLike = None) -> None:
        self.rng = as_rng(rng)

    @property
    def kind(self) -> NoiseKind:
        return "simulation"

    def laplace(self, scale: float, size: Size) -> np.ndarray:
        return np.asarray(self.rng.laplace(0.0, _check_scale(scale, "scale"), _shape(size)))

    def gaussian(self, sigma: float, size: Size) -> np.ndarray:
        return np.asarray(self.rng.normal(0.0, _check_scale(sigma, "sigma"), _shape(size)))

    def discrete_laplace(self, scale: float, size: Size) -> np.ndarray:
        # The difference of two i.i.d. geometric variables on {0, 1, ...} with
        # P(k) = (1 - t) t^k is DLap(t), t = exp(-1/scale) (002 App. B.1.1: the n = 1
        # case of the Pólya construction, Pólya(1, t) being geometric);
        # NumPy's geometric lives on {1, 2, ...}, and the shifts cancel in the difference.
        success = -math.expm1(-1.0 / _check_scale(scale, "scale"))
        shape = _shape(size)
        return np.asarray(self.rng.geometric(success, shape) - self.rng.geometric(success, shape),
                          dtype=np.int64)

    def uniform(self, size: Size) -> np.ndarray:
        return np.asarray(self.rng.random(_shape(size)))

    def integers(self, high: int, size: Size) -> np.ndarray:
        return np.asarray(self.rng.integers(0, _check_high(high), _shape(size), dtype=np.int64))

    def bernoulli(self, p: float, size: Size) -> np.ndarray:
        p = check_probability(p, "p")
        return np.asarray(self.rng.random(_shape(size)) < p)

    def polya(self, r: float, alpha: float, size: Size) -> np.ndarray:
        r = _check_scale(r, "r")
        alpha = check_probability(alpha, "alpha", open_right=True)
        shape = _shape(size)
        if alpha == 0.0:
            return np.zeros(shape, dtype=np.int64)
        # Pólya(r, alpha) of 002 Protocol B.1 (Balle et al. 2020) as a Gamma-Poisson
        # mixture: lambda ~ Gamma(shape r, scale alpha/(1-alpha)),
        # k ~ Poisson(lambda) has P(k) = Γ(k+r)/(k! Γ(r)) alpha^k (1-alpha)^r.
        lam = self.rng.gamma(r, alpha / (1.0 - alpha), shape)
        return np.asarray(self.rng.poisson(lam), dtype=np.int64)

    def __repr__(self) -> str:
        return f"SimulationNoise({self.rng!r})"


class DeploymentNoise(NoiseSource):
    """Noise for protecting real people: fixed-work samplers on the OS CSPRNG.

    Every method draws from :mod:`fedustat.privacy.samplers`: randomness from the
    operating system's CSPRNG (:mod:`secrets`) only, probabilities as exact integer
    thresholds (no floating-point sampling, Mironov 2012), and a running time that does
    not depend on the value drawn (a public number of CSPRNG words and the same
    operations for every value; ``benchmarks/bench_samplers.py`` measures it).

    * ``laplace``: discrete Laplace on the grid ``2^e``, ``scale / 2^e`` in
      ``[2^39, 2^40)``; ``discrete_laplace``: difference of two geometrics, each from a
      public number of independent binary digits.
    * ``gaussian``: discrete Gaussian on the grid ``2^e``, ``sigma / 2^e`` in
      ``[2^10, 2^11)``, by inversion of a full CDF table; ``polya``: the same inversion of
      a Pólya table.
    * ``bernoulli``, ``uniform``, ``integers``: one or two CSPRNG words per draw.

    Tails are cut at probability ``2^-64`` and thresholds rounded to ``2^-64``; the
    resulting statistical distance from the ideal laws is bounded in docs/secure.md
    ("Deployment samplers"). No seed is accepted on purpose: deployment noise must not
    be reproducible. No optional dependency is needed.
    """

    @property
    def kind(self) -> NoiseKind:
        return "deployment"

    def laplace(self, scale: float, size: Size) -> np.ndarray:
        scale = _check_scale(scale, "scale")
        shape = _shape(size)
        return samplers.laplace(scale, math.prod(shape)).reshape(shape)

    def gaussian(self, sigma: float, size: Size) -> np.ndarray:
        sigma = _check_scale(sigma, "sigma")
        shape = _shape(size)
        return samplers.gaussian(sigma, math.prod(shape)).reshape(shape)

    def discrete_laplace(self, scale: float, size: Size) -> np.ndarray:
        scale = _check_scale(scale, "scale")
        shape = _shape(size)
        return samplers.discrete_laplace(scale, math.prod(shape)).reshape(shape)

    def uniform(self, size: Size) -> np.ndarray:
        shape = _shape(size)
        return samplers.uniform(math.prod(shape)).reshape(shape)

    def integers(self, high: int, size: Size) -> np.ndarray:
        high = _check_high(high)
        if high >= 1 << 63:
            raise ValueError(f"high must be below 2^63 for int64 draws, got {high!r}")
        shape = _shape(size)
        return samplers.integers(high, math.prod(shape)).reshape(shape)

    def bernoulli(self, p: float, size: Size) -> np.ndarray:
        p = check_probability(p, "p")
        shape = _shape(size)
        return samplers.bernoulli(p, math.prod(shape)).reshape(shape)

    def polya(self, r: float, alpha: float, size: Size) -> np.ndarray:
        r = _check_scale(r, "r")
        alpha = check_probability(alpha, "alpha", open_right=True)
        shape = _shape(size)
        if alpha == 0.0:  # public parameter: Pólya(r, 0) is the point mass at 0
            return np.zeros(shape, dtype=np.int64)
        return samplers.polya(r, alpha, math.prod(shape)).reshape(shape)


def as_noise(rng: RandomLike | NoiseSource | str = None) -> NoiseSource:
    """Turn an ``rng`` argument into a :class:`NoiseSource`.

    Parameters
    ----------
    rng:
        A :class:`NoiseSource` (returned unchanged); an integer seed, a ``SeedSequence``
        or a ``numpy.random.Generator`` (wrapped in :class:`SimulationNoise`: a
        reproducible study); None or the string ``"deployment"`` (a new
        :class:`DeploymentNoise`: without a seed, randomness is deployment-grade).
    """
    if isinstance(rng, NoiseSource):
        return rng
    if rng is None:
        return DeploymentNoise()
    if isinstance(rng, str):
        if rng == "deployment":
            return DeploymentNoise()
        raise ValueError(f"rng must be a seed, a Generator, a NoiseSource or 'deployment', "
                         f"got the string {rng!r}")
    return SimulationNoise(rng)


def resolve_noise(rng: RandomLike | NoiseSource, noise: NoiseSource | None) -> NoiseSource:
    """The source for functions taking both ``rng`` and its alias ``noise`` (one at most)."""
    if noise is not None:
        if rng is not None:
            raise ValueError("pass either rng or noise, not both")
        if not isinstance(noise, NoiseSource):
            raise TypeError(f"noise must be a NoiseSource, got {type(noise).__name__}")
        return noise
    return as_noise(rng)
