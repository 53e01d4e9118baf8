"""Where randomness comes from: simulation or deployment (ARCHITECTURE.md, principle 4).

Every mechanism and randomizer in :mod:`fedustat.privacy` draws through a
:class:`NoiseSource`, so the choice between the two kinds of randomness is explicit:

* :class:`SimulationNoise` wraps a seeded ``numpy.random.Generator``. It is fast and
  reproducible (same seed, same output) and is what tests, benchmarks and the in-process
  simulator use. It is **not** fit for protecting real people: NumPy's generators are not
  cryptographically secure and its floating-point Laplace/Gaussian samplers are open to
  the floating-point attacks of Mironov (CCS 2012).
* :class:`DeploymentNoise` draws continuous and discrete Laplace, Gaussian and Bernoulli
  noise from OpenDP's vetted samplers (exact discrete sampling, secure against
  floating-point attacks) and the remaining uniform draws from the operating system's
  CSPRNG (:mod:`secrets`). OpenDP crosses a Python/Rust boundary on every call and is
  slow (about 35 s for 10^6 Laplace floats, see DEPENDENCIES.md): it suits one party's
  few values, never a simulation of millions of parties.

:func:`as_noise` turns the usual ``rng`` argument (None, a seed, a Generator) into a
:class:`SimulationNoise`, and passes a :class:`NoiseSource` through unchanged.
"""

from __future__ import annotations

import math
import random
import secrets
from abc import ABC, abstractmethod
from typing import Any, Literal

import numpy as np

from fedustat._validation import RandomLike, as_rng, check_epsilon, check_probability

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


def _import_opendp() -> Any:
    try:
        import opendp.prelude as dp
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "DeploymentNoise needs OpenDP's vetted samplers; install them with "
            "`pip install fedustat[deploy]`"
        ) from exc
    dp.enable_features("contrib")
    return dp


class DeploymentNoise(NoiseSource):
    """Noise for protecting real people: OpenDP's vetted samplers and the OS CSPRNG.

    * ``laplace``, ``gaussian``, ``discrete_laplace``: OpenDP ``make_laplace`` /
      ``make_gaussian`` measurements on vectors (exact discrete samplers, immune to
      floating-point attacks; float outputs are rounded to OpenDP's noise granularity).
    * ``bernoulli``: OpenDP ``make_randomized_response_bool`` (exact Bernoulli sampling).
    * ``uniform``, ``integers``: the operating system's CSPRNG through :mod:`secrets`.
    * ``polya``: OpenDP has no Pólya sampler; draws use ``random.SystemRandom`` (the OS
      CSPRNG) for a Gamma rate and count exponential arrivals for the Poisson, so the
      output is an exact integer count but the Gamma step is floating point.

    No seed is accepted on purpose: deployment noise must not be reproducible.
    OpenDP is slow per call (DEPENDENCIES.md); this class is meant for a party's few
    values. Requires the optional extra: ``pip install fedustat[deploy]``.
    """

    def __init__(self) -> None:
        self._dp = _import_opendp()
        self._system = random.SystemRandom()
        self._measurements: dict[tuple[str, float], Any] = {}

    @property
    def kind(self) -> NoiseKind:
        return "deployment"

    def _measurement(self, name: str, parameter: float) -> Any:
        key = (name, parameter)
        if key not in self._measurements:
            dp = self._dp
            if name == "laplace":
                space = (dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                         dp.l1_distance(T=float))
                meas = dp.m.make_laplace(*space, scale=parameter)
            elif name == "gaussian":
                space = (dp.vector_domain(dp.atom_domain(T=float, nan=False)),
                         dp.l2_distance(T=float))
                meas = dp.m.make_gaussian(*space, scale=parameter)
            elif name == "discrete_laplace":
                space = (dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int))
                meas = dp.m.make_laplace(*space, scale=parameter)
            else:  # "bernoulli": randomized response on True keeps it with probability p
                meas = dp.m.make_randomized_response_bool(prob=parameter)
            self._measurements[key] = meas
        return self._measurements[key]

    def _vector_noise(self, name: str, parameter: float, size: Size, zero: float | int,
                      dtype: type) -> np.ndarray:
        shape = _shape(size)
        count = math.prod(shape)
        if count == 0:
            return np.zeros(shape, dtype=dtype)
        # Noise on a vector of zeros is the noise itself.
        draws = self._measurement(name, parameter)([zero] * count)
        return np.asarray(draws, dtype=dtype).reshape(shape)

    def laplace(self, scale: float, size: Size) -> np.ndarray:
        return self._vector_noise("laplace", _check_scale(scale, "scale"), size, 0.0, np.float64)

    def gaussian(self, sigma: float, size: Size) -> np.ndarray:
        return self._vector_noise("gaussian", _check_scale(sigma, "sigma"), size, 0.0,
                                  np.float64)

    def discrete_laplace(self, scale: float, size: Size) -> np.ndarray:
        return self._vector_noise("discrete_laplace", _check_scale(scale, "scale"), size, 0,
                                  np.int64)

    def uniform(self, size: Size) -> np.ndarray:
        shape = _shape(size)
        draws = [self._system.random() for _ in range(math.prod(shape))]
        return np.asarray(draws, dtype=np.float64).reshape(shape)

    def integers(self, high: int, size: Size) -> np.ndarray:
        high = _check_high(high)
        shape = _shape(size)
        draws = [secrets.randbelow(high) for _ in range(math.prod(shape))]
        return np.asarray(draws, dtype=np.int64).reshape(shape)

    def bernoulli(self, p: float, size: Size) -> np.ndarray:
        p = check_probability(p, "p")
        shape = _shape(size)
        count = math.prod(shape)
        if p in (0.0, 1.0):
            return np.full(shape, p == 1.0, dtype=bool)
        # OpenDP's randomized response accepts keep probabilities in [0.5, 1]; a smaller p
        # is the complement of keeping with probability 1 - p.
        keep = max(p, 1.0 - p)
        meas = self._measurement("bernoulli", keep)
        draws = np.fromiter((meas(True) for _ in range(count)), dtype=bool, count=count)
        if p < 0.5:
            draws = ~draws
        return draws.reshape(shape)

    def _poisson(self, lam: float) -> int:
        # Count arrivals of a unit-rate Poisson process before time lam: exact, O(1 + lam).
        k = 0
        t = self._system.expovariate(1.0)
        while t < lam:
            k += 1
            t += self._system.expovariate(1.0)
        return k

    def polya(self, r: float, alpha: float, size: Size) -> np.ndarray:
        r = _check_scale(r, "r")
        alpha = check_probability(alpha, "alpha", open_right=True)
        shape = _shape(size)
        count = math.prod(shape)
        if alpha == 0.0:
            return np.zeros(shape, dtype=np.int64)
        theta = alpha / (1.0 - alpha)
        draws = [self._poisson(self._system.gammavariate(r, theta)) for _ in range(count)]
        return np.asarray(draws, dtype=np.int64).reshape(shape)


def as_noise(rng: RandomLike | NoiseSource | str = None) -> NoiseSource:
    """Turn an ``rng`` argument into a :class:`NoiseSource`.

    Parameters
    ----------
    rng:
        A :class:`NoiseSource` (returned unchanged); None, an integer seed, a
        ``SeedSequence`` or a ``numpy.random.Generator`` (wrapped in
        :class:`SimulationNoise`); or the string ``"deployment"`` (a new
        :class:`DeploymentNoise`).
    """
    if isinstance(rng, NoiseSource):
        return rng
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
