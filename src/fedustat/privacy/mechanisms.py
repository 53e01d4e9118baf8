"""Central (output-perturbation) mechanisms and distributed discrete Laplace noise.

Sources
-------
* Laplace mechanism: paper 002 (Sinh & Ramon), App. A.4, Lemma A.5 (scale ``b = Δ1/ε``).
* Gaussian mechanism: 002 App. A.4, Lemma A.6 (classic ``σ² = 2 ln(1.25/δ) Δ2² / ε²``,
  valid for ``ε < 1``, Dwork & Roth 2014 Thm A.1) and the analytic calibration of
  Balle & Wang (ICML 2018), Theorem 8.
* Discrete Laplace and its distributed generation from Pólya variables: 002 App. B.1.1
  and Protocol B.1 (after Balle, Bell, Gascón & Nissim, CCS 2020).

Each mechanism carries its guarantee as data (``.guarantee``), its noise law (``.pdf`` or
``.pmf``, used by audits) and its variance. ``release`` is vectorized over arrays and
draws through a :class:`~fedustat.privacy.noise.NoiseSource`, so the same code serves a
seeded simulation and a deployment with vetted samplers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import (
    RandomLike,
    as_float_array,
    check_delta,
    check_epsilon,
    check_positive_int,
    check_probability,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.noise import NoiseSource, Size, _shape, as_noise, resolve_noise

optimize = lazy_module("scipy.optimize")
special = lazy_module("scipy.special")

__all__ = [
    "DiscreteLaplaceMechanism",
    "GaussianMechanism",
    "LaplaceMechanism",
    "classic_gaussian_sigma",
    "distributed_discrete_laplace_shares",
    "gaussian_delta",
    "polya",
]

_ANY_NDIM = tuple(range(33))


def _check_model(model: Any) -> PrivacyModel:
    try:
        return PrivacyModel(model)
    except ValueError as exc:
        names = ", ".join(m.value for m in PrivacyModel)
        raise ValueError(f"model must be one of {names}, got {model!r}") from exc


class _PureDPMechanism:
    """What the Laplace and discrete Laplace mechanisms share: the noise's standard
    deviation, from the subclass's ``variance``, and a pure ``epsilon``-DP guarantee
    (delta = 0) built from its ``epsilon``, ``model`` and ``adjacency`` fields."""

    @property
    def std(self) -> float:
        """Standard deviation of the added noise."""
        return math.sqrt(self.variance)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(self.epsilon, 0.0, self.model, self.adjacency)


@dataclass(frozen=True)
class LaplaceMechanism(_PureDPMechanism):
    """The Laplace mechanism: ``f(x) + Lap(b)`` with ``b = sensitivity / epsilon``.

    Pure ``epsilon``-DP for a query with L1 sensitivity ``sensitivity``
    (002 App. A.4, Lemma A.5).

    Parameters
    ----------
    sensitivity:
        L1 sensitivity of the released query under the adjacency relation (> 0).
    epsilon:
        Privacy budget (> 0).
    model, adjacency:
        Recorded in :attr:`guarantee` (central DP, replace-one adjacency by default).
    """

    sensitivity: float
    epsilon: float
    model: PrivacyModel = PrivacyModel.CENTRAL
    adjacency: str = "replace one record"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sensitivity", check_epsilon(self.sensitivity, "sensitivity"))
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, "epsilon"))
        object.__setattr__(self, "model", _check_model(self.model))

    @property
    def scale(self) -> float:
        """Laplace scale ``b = sensitivity / epsilon``."""
        return self.sensitivity / self.epsilon

    @property
    def variance(self) -> float:
        """Noise variance ``2 b²``."""
        return 2.0 * self.scale**2

    def pdf(self, z: Any) -> np.ndarray:
        """Noise density at ``z``; ``release(v)`` has density ``pdf(z - v)``."""
        z = np.asarray(z, dtype=np.float64)
        return np.exp(-np.abs(z) / self.scale) / (2.0 * self.scale)

    def release(self, value: Any, rng: RandomLike | NoiseSource = None, *,
                noise: NoiseSource | None = None) -> np.ndarray:
        """Add independent Laplace noise to every entry of ``value``.

        Parameters
        ----------
        value:
            A number or an array of numbers (each entry gets its own noise draw; the
            sensitivity must then bound the L1 change of the whole array).
        rng:
            A seed or a Generator (a simulation study), a :class:`NoiseSource`, or None
            (deployment noise: the OS CSPRNG); ``noise`` is an alias.
        """
        arr = as_float_array(value, "value", ndim=_ANY_NDIM)
        source = resolve_noise(rng, noise)
        return arr + source.laplace(self.scale, arr.shape)


def classic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """``σ = sqrt(2 ln(1.25/δ)) Δ2 / ε`` (002 App. A.4, Lemma A.6; valid for ``ε < 1``)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) * sensitivity / epsilon


def gaussian_delta(sigma: float, sensitivity: float, epsilon: float) -> float:
    """Smallest ``δ`` for which ``N(0, σ²)`` noise is ``(ε, δ)``-DP (exact).

    Balle & Wang (ICML 2018), Theorem 8: with ``a = Δ/(2σ)`` and ``b = εσ/Δ``,
    ``δ = Φ(a - b) - e^ε Φ(-a - b)``; this is the hockey-stick divergence between
    ``N(0, σ²)`` and ``N(Δ, σ²)``.
    """
    sigma = check_epsilon(sigma, "sigma")
    sensitivity = check_epsilon(sensitivity, "sensitivity")
    epsilon = check_epsilon(epsilon, "epsilon")
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    # e^eps Φ(-a-b) in log space: Φ underflows long before the product does.
    return float(special.ndtr(a - b) - math.exp(epsilon + special.log_ndtr(-a - b)))


def _analytic_gaussian_sigma(sensitivity: float, epsilon: float, delta: float) -> float:
    """Smallest σ with ``gaussian_delta(σ) <= delta`` (δ decreases in σ), by brentq."""

    def excess(sigma: float) -> float:
        return gaussian_delta(sigma, sensitivity, epsilon) - delta

    lo = hi = sensitivity / epsilon
    while excess(lo) <= 0.0:
        lo /= 2.0
    while excess(hi) > 0.0:
        hi *= 2.0
    # xtol relative to the bracket's low end (below the root): relative to hi it was an
    # absolute 1e-3 when hi started at 1/epsilon = 1e12.
    sigma = optimize.brentq(excess, lo, hi, xtol=1e-15 * lo, rtol=4 * np.finfo(float).eps)
    # brentq may land a hair below the root; step up so the guarantee holds as stated.
    # The steps double: where delta(sigma) is flat (a tiny epsilon with a large delta) a
    # fixed step of 1e-12 took millions of evaluations; doubling ends within ~40.
    step = 1e-12
    while excess(sigma) > 0.0:
        sigma *= 1.0 + step
        step *= 2.0
    return float(sigma)


@dataclass(frozen=True)
class GaussianMechanism:
    """The Gaussian mechanism: ``f(x) + N(0, σ²)``, ``(epsilon, delta)``-DP.

    Parameters
    ----------
    sensitivity:
        L2 sensitivity of the released query (> 0).
    epsilon, delta:
        Target budget; ``delta`` must be in ``(0, 1)``.
    calibration:
        ``"analytic"`` (default): the smallest σ that is ``(ε, δ)``-DP, found by solving
        Balle & Wang (2018) Theorem 8 with brentq; valid for every ``ε > 0`` and never
        larger than the classic σ. ``"classic"``: ``σ = sqrt(2 ln(1.25/δ)) Δ/ε`` as in
        002 App. A.4, Lemma A.6; its proof needs ``ε < 1``, so larger ε raises.
    model, adjacency:
        Recorded in :attr:`guarantee`.
    """

    sensitivity: float
    epsilon: float
    delta: float
    calibration: Literal["analytic", "classic"] = "analytic"
    model: PrivacyModel = PrivacyModel.CENTRAL
    adjacency: str = "replace one record"
    sigma: float = field(init=False)

    def __post_init__(self) -> None:
        sensitivity = check_epsilon(self.sensitivity, "sensitivity")
        epsilon = check_epsilon(self.epsilon, "epsilon")
        delta = check_delta(self.delta, "delta")
        if delta == 0.0:
            raise ValueError("delta must be > 0 for the Gaussian mechanism; use "
                             "LaplaceMechanism for pure epsilon-DP")
        if self.calibration == "classic":
            if epsilon >= 1.0:
                raise ValueError(
                    f"calibration='classic' (002 Lemma A.6) is proven only for epsilon < 1, "
                    f"got epsilon={epsilon}; use calibration='analytic'")
            sigma = classic_gaussian_sigma(sensitivity, epsilon, delta)
        elif self.calibration == "analytic":
            sigma = _analytic_gaussian_sigma(sensitivity, epsilon, delta)
        else:
            raise ValueError(f"calibration must be 'analytic' or 'classic', "
                             f"got {self.calibration!r}")
        object.__setattr__(self, "sensitivity", sensitivity)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "model", _check_model(self.model))
        object.__setattr__(self, "sigma", sigma)

    @property
    def scale(self) -> float:
        """Alias of :attr:`sigma`."""
        return self.sigma

    @property
    def variance(self) -> float:
        return self.sigma**2

    @property
    def std(self) -> float:
        """Standard deviation of the added noise."""
        return math.sqrt(self.variance)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        return PrivacyGuarantee(self.epsilon, self.delta, self.model, self.adjacency)

    def pdf(self, z: Any) -> np.ndarray:
        """Noise density at ``z``; ``release(v)`` has density ``pdf(z - v)``."""
        z = np.asarray(z, dtype=np.float64)
        return np.exp(-0.5 * (z / self.sigma) ** 2) / (self.sigma * math.sqrt(2.0 * math.pi))

    def release(self, value: Any, rng: RandomLike | NoiseSource = None, *,
                noise: NoiseSource | None = None) -> np.ndarray:
        """Add independent ``N(0, σ²)`` noise to every entry of ``value``."""
        arr = as_float_array(value, "value", ndim=_ANY_NDIM)
        source = resolve_noise(rng, noise)
        return arr + source.gaussian(self.sigma, arr.shape)


def _as_integer_values(value: Any) -> np.ndarray:
    raw = np.asarray(value)
    if raw.dtype.kind in "iu":
        # Keep integers exact (fixed-point encodings exceed float64's 53-bit mantissa).
        if raw.size == 0:
            raise ValueError("value is empty; at least one value is needed")
        return raw.astype(np.int64)
    arr = as_float_array(value, "value", ndim=_ANY_NDIM)
    as_int = arr.astype(np.int64)
    if not np.array_equal(as_int, arr):
        raise ValueError("value must contain whole numbers for the discrete Laplace "
                         "mechanism; encode it in fixed point first")
    return as_int


@dataclass(frozen=True)
class DiscreteLaplaceMechanism(_PureDPMechanism):
    """The discrete Laplace (two-sided geometric) mechanism on integer-valued queries.

    Adds ``Z`` with ``P(Z = z) = (1 - t)/(1 + t) t^|z|``, ``t = exp(-epsilon /
    sensitivity)``; pure ``epsilon``-DP for an integer query with L1 sensitivity
    ``sensitivity`` (002 App. B.1.1, DLap(e^{-1/b}) with ``b = Δ/ε``).

    Parameters
    ----------
    sensitivity:
        Integer L1 sensitivity (>= 1).
    epsilon:
        Privacy budget (> 0).
    """

    sensitivity: int
    epsilon: float
    model: PrivacyModel = PrivacyModel.CENTRAL
    adjacency: str = "replace one record"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sensitivity", check_positive_int(self.sensitivity,
                                                                   "sensitivity"))
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, "epsilon"))
        object.__setattr__(self, "model", _check_model(self.model))

    @property
    def scale(self) -> float:
        """``b = sensitivity / epsilon``: ``P(z) ∝ exp(-|z| / b)``."""
        return self.sensitivity / self.epsilon

    @property
    def t(self) -> float:
        """Geometric ratio ``t = exp(-epsilon / sensitivity)``."""
        return math.exp(-self.epsilon / self.sensitivity)

    @property
    def variance(self) -> float:
        """``2 t / (1 - t)²``."""
        t = self.t
        return 2.0 * t / (-math.expm1(-self.epsilon / self.sensitivity)) ** 2

    def pmf(self, z: Any) -> np.ndarray:
        """Noise probability mass at ``z`` (zero off the integers)."""
        z = np.asarray(z, dtype=np.float64)
        t = self.t
        mass = (1.0 - t) / (1.0 + t) * np.power(t, np.abs(z))
        return np.where(z == np.round(z), mass, 0.0)

    def release(self, value: Any, rng: RandomLike | NoiseSource = None, *,
                noise: NoiseSource | None = None) -> np.ndarray:
        """Add independent discrete Laplace noise to every entry of an integer ``value``."""
        arr = _as_integer_values(value)
        source = resolve_noise(rng, noise)
        return arr + source.discrete_laplace(self.scale, arr.shape)


def polya(r: float, p: float, size: Size | None = None,
          rng: RandomLike | NoiseSource = None) -> np.ndarray:
    """Draw Pólya(r, p) variables: the negative binomial with a real ``r``.

    Parameterization of 002 Protocol B.1 and Balle et al. (2020):
    ``P(k) = Γ(k + r) / (k! Γ(r)) p^k (1 - p)^r`` for ``k = 0, 1, ...``, with mean
    ``r p / (1 - p)`` and variance ``r p / (1 - p)²``. (In SciPy's terms this is
    ``scipy.stats.nbinom(r, 1 - p)``.) Drawn as a Gamma-Poisson mixture:
    ``λ ~ Gamma(shape r, scale p / (1 - p))``, ``k ~ Poisson(λ)``.

    Parameters
    ----------
    r:
        Shape (> 0, need not be an integer; ``1/n`` in Protocol B.1).
    p:
        Ratio in ``[0, 1)`` (``e^{-ε/Δ}`` in Protocol B.1).
    size:
        Output shape (None: a single draw, returned as a 0-d array).
    rng:
        A seed or a Generator (a simulation study), a :class:`NoiseSource`, or None
        (deployment noise: the OS CSPRNG).
    """
    r = check_epsilon(r, "r")
    p = check_probability(p, "p", open_right=True)
    shape = () if size is None else _shape(size)
    return as_noise(rng).polya(r, p, shape)


def distributed_discrete_laplace_shares(n_parties: int, epsilon: float, sensitivity: int = 1,
                                        size: Size | None = None,
                                        rng: RandomLike | NoiseSource = None) -> np.ndarray:
    """Per-party integer noise shares whose sum is exactly discrete Laplace.

    002 App. B.1.1 / Protocol B.1 step 1 (Balle et al. 2020): each party ``i`` draws
    ``X_i, Y_i ~ Pólya(1/n, t)`` with ``t = e^{-ε/Δ}`` and keeps ``X_i - Y_i``. Since
    ``sum_i X_i ~ Pólya(1, t)`` is geometric, ``sum_i (X_i - Y_i) ~ DLap(t)``, the noise of
    :class:`DiscreteLaplaceMechanism` ``(sensitivity, epsilon)``. The sum is ε-DP noise
    only if every share enters it; a coalition that knows its own shares removes them
    (the protocol's threat model bounds this).

    Parameters
    ----------
    n_parties:
        Number of parties ``n`` (>= 1).
    epsilon, sensitivity:
        Budget (> 0) and integer L1 sensitivity (>= 1) of the summed query.
    size:
        Shape of each party's noise vector (None: one value per party).
    rng:
        A seed, a Generator or a :class:`NoiseSource` (a party in deployment passes
        :class:`~fedustat.privacy.noise.DeploymentNoise`).

    Returns
    -------
    ndarray of int64, shape ``(n_parties, *size)``; summing over axis 0 gives DLap noise.
    """
    n_parties = check_positive_int(n_parties, "n_parties")
    mech = DiscreteLaplaceMechanism(sensitivity, epsilon)
    shape = (n_parties,) + (() if size is None else _shape(size))
    source = as_noise(rng)
    r = 1.0 / n_parties
    return source.polya(r, mech.t, shape) - source.polya(r, mech.t, shape)
