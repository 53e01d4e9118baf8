"""Distributed discrete Laplace noise, secret-shared among the parties (002 App. B).

Protocol B.1 of paper 002 (after Balle, Bell, Gascón & Nissim 2020): each contributor
``i`` draws ``X_i, Y_i ~ Polya(r, t)`` with ``t = exp(-epsilon / s)``; since Pólya
shapes add, ``sum_i (X_i - Y_i)`` over ``1/r`` contributors is exactly
``DLap(t)`` — the discrete Laplace mechanism for an integer query of sensitivity ``s``.
Each contributor secret-shares its difference among all ``n`` parties (one
(n, n)-sharing per contributor; steps 2-4 of Protocol B.1 share ``a_i`` and ``b_i``
separately, we share ``a_i - b_i``, which reveals the same and matches the
``n^2 l`` bits 002 App. B.1.2 counts), and party ``j`` keeps the sum of the shares it
received: its share ``[eta]_j`` of the noise.

Units: the noise is an integer in units of the fixed-point resolution ``2^{-c}`` (the
quantity it protects is a fixed-point encoded sum). A real sensitivity ``Delta`` becomes
``s = ceil(Delta 2^c)`` integer units; rounding up keeps the guarantee.

Variants
--------
* :func:`distributed_noise` — Protocol B.1 over all ``n`` parties (threat model M_Dis
  of 002 Sec. 3), or over any set of contributors. ``O(contributors * n)`` shares are
  computed and sent: ``(n - 1) l`` bits per contributor.
* :func:`mhf_noise` — the M_HF variant of 002 Sec. 4 ("Communication complexity") and
  App. D.2.1: a random subgroup ``Z`` of ``|Z| = ceil(log(fail_prob) / log(1 - f_H))``
  parties draws the noise and shares it with everybody; with probability
  ``1 - fail_prob`` ``Z`` contains an honest party. Cost linear in ``n``.
* :func:`local_noise` — Remark B.1: each party draws its Pólya difference and adds it
  to a value that is already uniformly masked (its ``z_i`` in Protocol 3.1); no
  sharing, no messages.

What the noise guarantees (read this)
-------------------------------------
A contributor knows its own ``X_i - Y_i``. Colluding contributors can subtract theirs
from the release, leaving only the honest contributors' noise. With the paper's
parameter ``r = 1 / (number of contributors)`` the release is epsilon-DP against the
aggregator and against parties that are not contributors, but **not** against an
aggregator colluding with contributors: their knowledge shrinks the effective noise.
``min_honest = h`` sets ``r = 1/h`` instead: the honest contributors' noise alone is
then ``Polya(>= 1)`` differences, i.e. ``DLap(t)`` plus independent noise, so the
release stays epsilon-DP against the aggregator colluding with up to
``contributors - h`` contributors; the noise variance grows by ``contributors / h``.
For M_HF with "at least one honest member of Z", ``min_honest=1`` is the setting that
matches the threat model (variance ``|Z|`` times that of one DLap).
:attr:`NoiseShares.tolerated_colluders` records which case a run is in.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import (
    InputRangeError,
    RandomLike,
    as_rng,
    check_epsilon,
    check_positive_int,
    check_probability,
)
from fedustat.privacy.errors import ErrorDistribution
from fedustat.privacy.mechanisms import polya
from fedustat.privacy.noise import DeploymentNoise, NoiseSource, SimulationNoise, Size, _shape
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.ring import DEFAULT_RING, Ring, as_share_rng
from fedustat.secure.transcript import Transcript

integrate = lazy_module("scipy.integrate")
optimize = lazy_module("scipy.optimize")
sps = lazy_module("scipy.stats")

__all__ = ["NoiseShares", "PolyaDifferenceError", "contributor_noise", "distributed_noise",
           "local_noise",
           "mhf_noise", "noise_magnitude_bound", "subgroup_size"]

_TAIL_LOG2 = -40.0   # the noise may exceed the ring's headroom with probability < 2^-40
_BLOCK_ELEMENTS = 1 << 22


@dataclass(frozen=True, eq=False)
class NoiseShares:
    """The parties' shares of one (or ``size``) discrete Laplace noise draw(s).

    Attributes
    ----------
    shares:
        ``(n_parties, *size)`` uint64: row ``j`` is party ``j``'s share of ``eta``; the
        rows sum to ``eta`` modulo ``2^l`` (two's complement).
    contributors:
        Indices (rows of ``shares``) of the parties that drew Pólya noise.
    polya_shape:
        ``r`` of every contributor's Pólya draws.
    t:
        The discrete Laplace ratio ``exp(-epsilon / sensitivity)``.
    sensitivity:
        Integer sensitivity ``s`` in units of the fixed-point resolution.
    epsilon:
        The budget the noise is calibrated to.
    tolerated_colluders:
        How many contributors may collude with the aggregator while the release stays
        epsilon-DP (``contributors - min_honest``).
    shared:
        False for the local variant (Remark B.1): the rows are the parties' own noise,
        not uniform shares, and must be added to already-masked values.
    ring:
        The ring of the shares.
    """

    shares: np.ndarray
    contributors: np.ndarray
    polya_shape: float
    t: float
    sensitivity: int
    epsilon: float
    tolerated_colluders: int
    shared: bool
    ring: Ring

    @property
    def variance(self) -> float:
        """Variance of ``eta`` in integer units: ``contributors * 2 r t / (1 - t)^2``."""
        t = self.t
        return float(self.contributors.size * 2.0 * self.polya_shape * t
                     / (-math.expm1(math.log(t))) ** 2)

    def reconstruct(self) -> np.ndarray:
        """``eta`` as signed integers (sum of the rows); for tests and audits only."""
        return self.ring.to_signed(self.ring.sum(self.shares, axis=0))


def subgroup_size(f_honest: float, fail_prob: float) -> int:
    """``|Z| = ceil(log(fail_prob) / log(1 - f_H))``: the smallest random subgroup that
    contains an honest party with probability ``>= 1 - fail_prob`` when at most a
    fraction ``1 - f_H`` of the parties is corrupted (002 Sec. 4)."""
    f = check_probability(f_honest, "f_honest", open_left=True)
    fail = check_probability(fail_prob, "fail_prob", open_left=True, open_right=True)
    if f == 1.0:
        return 1
    return max(1, math.ceil(math.log(fail) / math.log1p(-f)))


def _integer_sensitivity(sensitivity: Any, fixed_point: FixedPoint | None) -> int:
    if fixed_point is None:
        if isinstance(sensitivity, bool) or not isinstance(sensitivity, int | np.integer):
            raise TypeError("sensitivity must be an integer (ring units) when no fixed_point "
                            f"is given, got {sensitivity!r}")
        return check_positive_int(sensitivity, "sensitivity")
    value = check_epsilon(sensitivity, "sensitivity")
    return max(1, math.ceil(value * fixed_point.scale))


def _sources(rng: Any) -> tuple[NoiseSource, Any]:
    """Pólya source and share randomness from one ``rng`` (one stream, never two copies of
    the same seed)."""
    if isinstance(rng, NoiseSource):
        return rng, as_share_rng(rng)
    if isinstance(rng, str) and rng == "os":
        return DeploymentNoise(), as_share_rng("os")
    gen = as_rng(rng)
    return SimulationNoise(gen), gen


def _log_tail_bound(t: float, total_shape: float, bound: int) -> float:
    """Natural log of a Chernoff bound on ``P(|X - Y| >= bound)``, ``X, Y ~ NB(R, t)`` iid.

    ``E exp(lam (X - Y)) = ((1 - t)^2 / ((1 - t e^lam)(1 - t e^-lam)))^R`` for
    ``0 <= lam < -log t``; the bound is twice ``min_lam exp(-lam bound) E exp(lam (X - Y))``
    (the law is symmetric).
    """
    log_t = math.log(t)

    def log1mexp(x: float) -> float:
        # log(1 - e^x) for x < 0, accurate near 0 and far from it.
        if x >= 0.0:
            return -math.inf
        return math.log(-math.expm1(x)) if x > -math.log(2.0) else math.log1p(-math.exp(x))

    def log_bound(lam: float) -> float:
        mgf = 2.0 * log1mexp(log_t) - log1mexp(log_t + lam) - log1mexp(log_t - lam)
        return -lam * bound + total_shape * mgf

    upper = -log_t * (1.0 - 1e-9)
    best = optimize.minimize_scalar(log_bound, bounds=(0.0, upper), method="bounded",
                                    options={"xatol": upper * 1e-9})
    return math.log(2.0) + min(0.0, float(best.fun))


def noise_magnitude_bound(t: float, total_shape: float) -> int:
    """The smallest power of two ``B`` with ``P(|eta| >= B) < 2^-40`` (the bound of
    :func:`_log_tail_bound`), for ``eta = X - Y``, ``X, Y ~ NB(total_shape, t)``.

    A ring of ``l`` bits holds the noise when ``B <= 2^(l-2)`` (the same rule as
    :func:`_check_tail`); the encodings of :mod:`fedustat.protocols.mpc.encoding` size
    their rings with it. Public parameters only.
    """
    if t == 0.0:
        return 1
    if t >= 1.0:
        raise InputRangeError("the noise ratio t rounds to 1 (epsilon / sensitivity below "
                            "float resolution): no ring holds this noise")
    bound = 1
    while _log_tail_bound(t, total_shape, bound) / math.log(2.0) > _TAIL_LOG2:
        bound <<= 1
        if bound > 1 << 80:
            raise InputRangeError(f"the noise (ratio t={t:.6g}, shape {total_shape:g}) has no "
                                "tail bound below 2^80")
    return bound


def _check_tail(ring: Ring, t: float, total_shape: float, max_abs: int) -> None:
    """Refuse parameters for which ``|eta| >= max_abs`` is not negligible (< 2^-40).

    ``eta = X - Y`` with ``X, Y ~ NB(total_shape, t)`` (Pólya shapes add); the bound is
    :func:`_log_tail_bound`. Only public parameters are used, never data.
    """
    if t == 0.0:
        return
    log2_tail = _log_tail_bound(t, total_shape, max_abs) / math.log(2.0)
    if log2_tail > _TAIL_LOG2:
        raise InputRangeError(
            f"the noise (discrete Laplace ratio t={t:.6g}, total Pólya shape "
            f"{total_shape:g}) may exceed {max_abs} in absolute value with probability up to "
            f"2^{log2_tail:.1f}; the ring of l={ring.bits} bits is too small for this "
            f"sensitivity/epsilon — use more bits or fewer fractional bits")


def _draw_differences(n_contrib: int, r: float, t: float, shape: tuple[int, ...],
                      source: NoiseSource, ring: Ring, max_abs: int) -> np.ndarray:
    size = (n_contrib, *shape)
    diff = polya(r, t, size, rng=source) - polya(r, t, size, rng=source)
    diff = np.asarray(diff, dtype=np.int64)
    if diff.size and int(np.abs(diff).max()) >= max_abs:
        raise InputRangeError(f"a contributor's noise {int(np.abs(diff).max())} does not fit the "
                            f"ring headroom (|noise| < {max_abs}, l={ring.bits} bits)")
    return diff


def _prepare(n_parties: int, epsilon: float, sensitivity: Any, fixed_point: FixedPoint | None,
             ring: Ring | None, contributors: Any, min_honest: int | None, size: Size | None
             ) -> tuple[int, float, int, Ring, np.ndarray, int, tuple[int, ...], int]:
    n = check_positive_int(n_parties, "n_parties")
    eps = check_epsilon(epsilon)
    s_int = _integer_sensitivity(sensitivity, fixed_point)
    if fixed_point is not None and ring is not None and ring != fixed_point.ring:
        raise ValueError("pass either fixed_point or ring (the fixed point fixes the ring)")
    the_ring = fixed_point.ring if fixed_point is not None else (ring or DEFAULT_RING)
    if contributors is None:
        contrib = np.arange(n, dtype=np.int64)
    else:
        contrib = np.unique(np.asarray(contributors, dtype=np.int64))
        if contrib.size == 0 or contrib.min() < 0 or contrib.max() >= n:
            raise ValueError(f"contributors must be a non-empty set of party indices in "
                             f"[0, {n}), got {contributors!r}")
    h = contrib.size if min_honest is None else check_positive_int(min_honest, "min_honest")
    if h > contrib.size:
        raise ValueError(f"min_honest ({h}) cannot exceed the number of contributors "
                         f"({contrib.size})")
    shape = () if size is None else _shape(size)
    max_abs = 1 << (the_ring.bits - 2) if the_ring.bits >= 2 else 1
    return n, eps, s_int, the_ring, contrib, h, shape, max_abs


def distributed_noise(n_parties: int, epsilon: float, sensitivity: Any, *,
                      fixed_point: FixedPoint | None = None, ring: Ring | None = None,
                      contributors: Any = None, min_honest: int | None = None,
                      size: Size | None = None, rng: RandomLike | NoiseSource | str = None,
                      transcript: Transcript | None = None,
                      party_ids: Any = None) -> NoiseShares:
    """Protocol B.1 of 002: secret-shared discrete Laplace noise among ``n`` parties.

    Parameters
    ----------
    n_parties:
        Number of parties ``n`` that receive shares.
    epsilon:
        Budget of the noise (> 0).
    sensitivity:
        Sensitivity of the protected sum: a real number with ``fixed_point`` (converted
        to ``ceil(Delta 2^c)`` units), else a positive integer in ring units.
    fixed_point, ring:
        The encoding (fixes the ring) or, for integer queries, the ring (default 64 bits).
    contributors:
        Indices of the parties that draw noise (default: all, as in Protocol B.1).
    min_honest:
        Honest contributors the guarantee must survive with (default: all contributors,
        the paper's ``r = 1/|contributors|``); see the module docstring.
    size:
        Shape of the noise vector (default: one value).
    rng:
        Seed, Generator or NoiseSource for the Pólya draws and the shares; ``"os"`` for
        the OS CSPRNG with fixed-work sampling (:class:`DeploymentNoise`).
    transcript:
        Where the sharing round is recorded (layout: one group of all ``n`` parties).
    party_ids:
        Global ids of the ``n`` parties for the transcript (default ``0..n-1``).

    Returns
    -------
    NoiseShares
    """
    n, eps, s_int, ring_, contrib, h, shape, max_abs = _prepare(
        n_parties, epsilon, sensitivity, fixed_point, ring, contributors, min_honest, size)
    t = math.exp(-eps / s_int)
    r = 1.0 / h
    _check_tail(ring_, t, contrib.size * r, max_abs)
    source, share_rng = _sources(rng)
    diffs = ring_.reduce(_draw_differences(contrib.size, r, t, shape, source, ring_, max_abs))
    per_secret = int(np.prod(shape, dtype=np.int64))
    totals = np.zeros((n, *shape), dtype=np.uint64)
    # Contributor k sends party j a uniform share; it keeps the completing one. Blocks
    # of contributors bound the memory to about _BLOCK_ELEMENTS ring elements.
    block = max(1, _BLOCK_ELEMENTS // max(1, n * per_secret))
    for lo in range(0, contrib.size, block):
        ids = contrib[lo: lo + block]
        shares = ring_.random((ids.size, n, *shape), share_rng)
        rows = np.arange(ids.size)
        shares[rows, ids] = 0
        shares[rows, ids] = ring_.sub(diffs[lo: lo + ids.size], ring_.sum(shares, axis=1))
        totals = ring_.add(totals, ring_.sum(shares, axis=0))
    if transcript is not None:
        _record_sharing(transcript, n, contrib, ring_.bits * per_secret, party_ids)
    return NoiseShares(totals, contrib, r, t, s_int, eps, contrib.size - h, True, ring_)


def _record_sharing(transcript: Transcript, n: int, contrib: np.ndarray, bits: int,
                    party_ids: Any) -> None:
    ids = np.arange(n, dtype=np.int64) if party_ids is None else np.asarray(party_ids)
    if ids.shape != (n,):
        raise ValueError(f"party_ids must have one id per party ({n}), got shape {ids.shape}")
    view = transcript.view(party_ids=ids.reshape(n, 1))
    is_contrib = np.zeros(n, dtype=bool)
    is_contrib[contrib] = True
    sent = np.where(is_contrib, (n - 1) * bits, 0)
    received = (contrib.size - is_contrib.astype(np.int64)) * bits
    view.record(phase="online", kind="noise.share", sent=sent[:, None],
                received=received[:, None])


def mhf_noise(n_parties: int, epsilon: float, sensitivity: Any, *, f_honest: float,
              fail_prob: float = 2.0**-40, min_honest: int | None = None,
              fixed_point: FixedPoint | None = None, ring: Ring | None = None,
              size: Size | None = None, rng: RandomLike | NoiseSource | str = None,
              transcript: Transcript | None = None, party_ids: Any = None) -> NoiseShares:
    """The M_HF variant: a uniformly random subgroup ``Z`` draws the noise (002 Sec. 4).

    ``|Z| = subgroup_size(f_honest, fail_prob)`` (all parties if that exceeds ``n``),
    chosen with ``rng`` — in a deployment a public coin the parties generate jointly.
    Each member of ``Z`` draws ``Polya(1/min_honest, t)`` differences (default
    ``min_honest = |Z|``, the paper's ``1/|Z|``; ``min_honest=1`` protects against an
    aggregator colluding with all but one member of ``Z``) and shares them among all
    ``n`` parties: ``|Z| (n - 1) l`` bits in one round. Other parameters as in
    :func:`distributed_noise`.
    """
    n = check_positive_int(n_parties, "n_parties")
    z_size = min(n, subgroup_size(f_honest, fail_prob))
    source, share_rng = _sources(rng)
    if isinstance(share_rng, np.random.Generator):
        members = share_rng.choice(n, size=z_size, replace=False)
    else:
        members = np.asarray(random.SystemRandom().sample(range(n), z_size), dtype=np.int64)
    return distributed_noise(n, epsilon, sensitivity, fixed_point=fixed_point, ring=ring,
                             contributors=np.sort(members), min_honest=min_honest, size=size,
                             rng=source, transcript=transcript, party_ids=party_ids)


def contributor_noise(count: int, epsilon: float, sensitivity: int, *, contributors: int,
                      min_honest: int | None, ring: Ring,
                      rng: RandomLike | NoiseSource | str = None) -> tuple[np.ndarray, Any]:
    """The Pólya differences of ``count`` contributors of Protocol B.1 (002 App. B.1), drawn
    where they live (one party, or a silo's parties), and the randomness for sharing them.

    Each difference is ``X - Y`` with ``X, Y ~ Polya(1/h, t)``, ``t = exp(-epsilon / s)``,
    ``h = min_honest`` (``contributors`` for None): the same law as in
    :func:`distributed_noise`, whose ``c = contributors`` parts sum to ``NB(c / h, t)``
    differences. The tail check uses the total over all contributors.

    Returns the differences reduced into ``ring`` and the share randomness (one stream
    with the Pólya draws: never two copies of one seed).
    """
    n_count = check_positive_int(count, "count", minimum=0)
    total = check_positive_int(contributors, "contributors")
    eps = check_epsilon(epsilon)
    s_int = check_positive_int(sensitivity, "sensitivity")
    h = total if min_honest is None else check_positive_int(min_honest, "min_honest")
    if h > total:
        raise ValueError(f"min_honest ({h}) cannot exceed the number of contributors "
                         f"({total})")
    t = math.exp(-eps / s_int)
    r = 1.0 / h
    max_abs = 1 << (ring.bits - 2) if ring.bits >= 2 else 1
    _check_tail(ring, t, total * r, max_abs)
    source, share_rng = _sources(rng)
    diffs = _draw_differences(n_count, r, t, (), source, ring, max_abs)
    return ring.reduce(diffs), share_rng


def local_noise(n_parties: int, epsilon: float, sensitivity: Any, *,
                fixed_point: FixedPoint | None = None, ring: Ring | None = None,
                min_honest: int | None = None, size: Size | None = None,
                rng: RandomLike | NoiseSource | str = None) -> NoiseShares:
    """Remark B.1: every party draws ``Polya(1/min_honest, t)`` differences and keeps them.

    No shares are exchanged; row ``j`` of the result is party ``j``'s own noise, which
    it adds to a value that is already uniform to everybody else (its ``z_i`` in
    Protocol 3.1, a sum that contains a fresh share). The rows sum to ``DLap(t)`` noise
    (with ``min_honest = n``, the default). ``shared`` is False to mark that the rows
    are not uniform on their own.
    """
    n, eps, s_int, ring_, contrib, h, shape, max_abs = _prepare(
        n_parties, epsilon, sensitivity, fixed_point, ring, None, min_honest, size)
    t = math.exp(-eps / s_int)
    r = 1.0 / h
    _check_tail(ring_, t, n * r, max_abs)
    source, _ = _sources(rng)
    diffs = ring_.reduce(_draw_differences(n, r, t, shape, source, ring_, max_abs))
    return NoiseShares(diffs, contrib, r, t, s_int, eps, n - h, False, ring_)


_EXACT_SUPPORT = 2_000_000   # beyond this many lattice points, use the continuum limit


@dataclass(frozen=True)
class PolyaDifferenceError(ErrorDistribution):
    """The law of ``unit * (X - Y)`` with ``X, Y ~ NB(total_shape, t)`` independent.

    This is the noise of Protocol B.1 (002 App. B.1): contributors' Pólya(r, t) shapes add,
    so ``c`` contributors with shape ``r`` give ``NB(c r, t)`` differences; ``c r = 1`` is
    exactly the discrete Laplace ``DLap(t)``, ``c r = c`` (``min_honest = 1``) the sum of
    ``c`` independent ``DLap(t)``. Its characteristic function is
    ``((1 - t)^2 / (1 - 2 t cos(w unit) + t^2))^R`` (product of the two NB laws, real by
    symmetry); variance ``2 R t / (1 - t)^2`` units^2.

    The cdf is exact (``P(X - Y <= k) = sum_y P(Y = y) P(X <= k + y)``) when the lattice
    part that matters has at most 2 million points; otherwise (``-log t`` tiny, a fine
    fixed-point grid) it uses the continuum limit, the symmetric variance-gamma law with
    characteristic function ``(1 + theta^2 w^2)^-R``, ``theta = unit sqrt(t) / (1 - t)``
    (same variance), by Gil-Pelaez inversion, and widens intervals by one lattice unit to
    stay conservative.
    """

    total_shape: float
    t: float
    unit: float = 1.0

    @property
    def is_lattice(self) -> bool:
        # On a fine lattice the continuum law stands in (see the class docstring).
        return self._exact()

    @property
    def variance(self) -> float:
        if self.t == 0.0:
            return 0.0
        return self.unit**2 * 2.0 * self.total_shape * self.t / (1.0 - self.t) ** 2

    def characteristic(self, w: np.ndarray) -> np.ndarray:
        t = self.t
        w = np.asarray(w, dtype=np.float64)
        if not self._exact():
            theta = self.unit * math.sqrt(t) / (1.0 - t)
            return (1.0 + (theta * w) ** 2) ** (-self.total_shape)
        base = (1.0 - t) ** 2 / (1.0 - 2.0 * t * np.cos(w * self.unit) + t * t)
        return base**self.total_shape

    @functools.cached_property
    def _support_points(self) -> float:
        if self.t == 0.0:
            return 0.0
        return float(sps.nbinom.isf(1e-17, self.total_shape, 1.0 - self.t))

    def _support(self) -> float:
        return self._support_points

    def _exact(self) -> bool:
        return self._support() <= _EXACT_SUPPORT

    def cdf(self, x: float) -> float:
        if self.t == 0.0 or self.unit == 0.0:
            return 1.0 if x >= 0 else 0.0
        if self._exact():
            # Z = X - Y with X, Y iid negative binomial: P(Z <= k) = sum_y P(Y = y) P(X <= k + y),
            # P(X <= j) = 1 beyond the tabulated support (its tail is below 1e-17).
            k = math.floor(x / self.unit + 1e-9)
            pmf, cdf = self._lattice_law
            if k >= 0:
                inside = cdf.size - k
                total = float(pmf[:inside] @ cdf[k:]) + float(pmf[inside:].sum()) if inside > 0 \
                    else float(pmf.sum())
            else:
                total = float(pmf[-k:] @ cdf[:cdf.size + k]) if -k < cdf.size else 0.0
            return float(np.clip(total, 0.0, 1.0))
        return self._continuum_cdf(x)

    @functools.cached_property
    def _lattice_law(self) -> tuple[np.ndarray, np.ndarray]:
        """The one-sided negative binomial's pmf and cdf on its support, tabulated once."""
        ys = np.arange(int(self._support()) + 1)
        law = sps.nbinom(self.total_shape, 1.0 - self.t)
        return law.pmf(ys), law.cdf(ys)

    def _continuum_cdf(self, x: float) -> float:
        if x == 0.0:
            return 0.5
        theta = self.unit * math.sqrt(self.t) / (1.0 - self.t)
        r = self.total_shape

        def phi(w: float) -> float:
            return (1.0 + (theta * w) ** 2) ** (-r)

        # Gil-Pelaez (1951): F(x) = 1/2 + (1/pi) int_0^inf sin(w x) phi(w) / w dw; the
        # tail beyond 1/theta by QUADPACK's Fourier-integral rule.
        a = 1.0 / theta
        head, _ = integrate.quad(lambda w: math.sin(w * x) * phi(w) / w, 0.0, a, limit=200)
        tail, _ = integrate.quad(lambda w: phi(w) / w, a, math.inf, weight="sin", wvar=x)
        return float(min(1.0, max(0.0, 0.5 + (head + tail) / math.pi)))

    def half_width(self, confidence_level: float = 0.95) -> float:
        if self.variance == 0.0:
            return 0.0
        exact = self._exact()
        target = 0.5 + float(confidence_level) / 2.0
        if not 0.0 < float(confidence_level) < 1.0:
            raise ValueError(f"confidence_level must be a number in (0, 1), "
                             f"got {confidence_level!r}")
        if exact:
            # Smallest lattice point k with P(Z <= k unit) >= target.
            lo, hi = 0, max(1, int(self._support()))
            while lo < hi:
                mid = (lo + hi) // 2
                if self.cdf(mid * self.unit) >= target:
                    hi = mid
                else:
                    lo = mid + 1
            return lo * self.unit
        hi = self.std
        while self._continuum_cdf(hi) < target:
            hi *= 2.0
        a = float(optimize.brentq(lambda v: self._continuum_cdf(v) - target, 0.0, hi,
                                  xtol=1e-12 * hi))
        return a + self.unit

    def __str__(self) -> str:
        return (f"Pólya difference(shape={self.total_shape:g}, t={self.t:.4g}) "
                f"x {self.unit:.3g}")
