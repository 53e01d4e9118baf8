"""The offline phase: a trusted dealer that deals correlated randomness.

Paper 002 (App. A.3, E.1.1) splits the protocol into an offline phase, which produces
correlated randomness independent of the inputs, and an online phase that consumes
it. Here a **trusted dealer** plays the offline phase: it draws the randomness,
secret-shares it and sends every member of every group its shares. Nothing it deals
depends on the data, so it can run before the inputs exist, and every dealt object
(:class:`~fedustat.secure.sharing.Material`) can be used once only.

Trust assumption, stated plainly: the dealer sees all the correlated randomness it
deals (the triples, the masks ``r`` of the comparison gates, the FSS keys). A dealer
that colludes with a party, or that sees an opened masked value ``x + r``, learns
``x``. It must be a separate, semi-honest entity that sees nothing of the online phase.
Deployments replace it by a protocol among the parties that generates the same
correlations (OT- or LPN-based triple generation, e.g. Boyle et al. 2020 and Abram &
Scholl 2022 as cited in 002 App. E.1.1, or distributed FSS key generation); the
offline bits reported are what a dealer sends, a lower bound on such protocols.

What is dealt (per secret, ``l`` = ring bits, bits each member receives):

=====================  ==========================================  ================
material               what                                        bits per member
=====================  ==========================================  ================
Beaver triple          ``a, b, c = a b`` in Z_{2^l}                ``3 l``
AND triple             ``a, b, c = a and b`` on the active bits    ``3`` per bit
edaBit                 ``r`` in Z_{2^l} and the XOR shares of its  ``2 l``
                       ``l`` bits
daBit                  a random bit, arithmetic and XOR shares     ``l + 1``
FSS msb gate (p = 2)   mask ``r``, ``msb(r)`` and a DCF key on     key ``+ 2 l``
                       ``l - 1`` bits (:mod:`fedustat.secure.dcf`)
FSS zero gate (p = 2)  mask ``r`` and a DPF key on ``l`` bits      key ``+ l``
=====================  ==========================================  ================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import RandomLike, check_positive_int
from fedustat.secure.dcf import (
    FssKey,
    FssMsbMaterial,
    FssZeroMaterial,
    dcf_gen,
    deal_fss_msb,
    deal_fss_zero,
    dpf_gen,
)
from fedustat.secure.ring import DEFAULT_RING, Ring, as_share_rng, random_words
from fedustat.secure.sharing import Material, share, xor_share
from fedustat.secure.transcript import Transcript

__all__ = ["AndTriples", "BeaverTriples", "DaBits", "Dealer", "EdaBits", "popcount"]


def popcount(word: int) -> int:
    """Number of set bits of a non-negative integer."""
    return int(word).bit_count()


@dataclass(eq=False)
class BeaverTriples(Material):
    """Shares of ``a, b`` uniform in Z_{2^l} and ``c = a b``, each ``(p, *shape)``."""

    shape: tuple[int, ...]
    ring: Ring
    n_shares: int
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray


@dataclass(eq=False)
class AndTriples(Material):
    """XOR shares of words ``a, b`` uniform on the ``active`` bits and ``c = a and b``.

    One word carries up to 64 independent AND triples, one per active bit.
    """

    shape: tuple[int, ...]
    ring: Ring
    n_shares: int
    active: int
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray

    @property
    def bits_per_word(self) -> int:
        return popcount(self.active)


@dataclass(eq=False)
class EdaBits(Material):
    """A random ``r`` in Z_{2^l}: additive shares ``arith`` and XOR shares ``bits`` of its
    ``l``-bit binary expansion (one word per secret)."""

    shape: tuple[int, ...]
    ring: Ring
    n_shares: int
    arith: np.ndarray
    bits: np.ndarray


@dataclass(eq=False)
class DaBits(Material):
    """A random bit ``b``: additive shares ``arith`` in Z_{2^l} and XOR shares ``bits``
    (bit 0 of a word)."""

    shape: tuple[int, ...]
    ring: Ring
    n_shares: int
    arith: np.ndarray
    bits: np.ndarray


def _shape(shape: Any) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int | np.integer) or d < 0:
            raise ValueError(f"shape must be a tuple of non-negative integers, got {shape!r}")
    return tuple(int(d) for d in dims)


class Dealer:
    """A trusted dealer for groups of ``n_parties`` parties (see the module docstring).

    Parameters
    ----------
    n_parties:
        Group size ``p`` (the number of shares of every dealt secret).
    ring:
        The ring Z_{2^l} of the arithmetic shares.
    rng:
        The dealer's randomness (see :mod:`fedustat.secure.ring`); ``"os"`` for the
        operating system's CSPRNG.
    transcript:
        Where the offline messages are recorded (its ``group_size`` must be
        ``n_parties``); the same transcript usually records the online phase.
    """

    def __init__(self, n_parties: int = 2, *, ring: Ring = DEFAULT_RING,
                 rng: RandomLike | Any = None, transcript: Transcript | None = None) -> None:
        self.n_parties = check_positive_int(n_parties, "n_parties")
        if not isinstance(ring, Ring):
            raise TypeError(f"ring must be a Ring, got {type(ring).__name__}")
        self.ring = ring
        self.rng = as_share_rng(rng)
        if transcript is not None and transcript.group_size != self.n_parties:
            raise ValueError(f"transcript has group_size={transcript.group_size} but the "
                             f"dealer serves groups of n_parties={self.n_parties}")
        self.transcript = transcript

    def _record(self, kind: str, shape: tuple[int, ...], bits_per_element: int) -> None:
        if self.transcript is not None:
            per_group = self.transcript.elements_per_group(shape)
            self.transcript.record_deal(kind, bits_per_element * per_group)

    def _share(self, values: np.ndarray) -> np.ndarray:
        return share(values, self.n_parties, self.rng, ring=self.ring)

    def beaver_triples(self, shape: Any) -> BeaverTriples:
        """Multiplication triples for secrets of ``shape``."""
        shape = _shape(shape)
        a = self.ring.random(shape, self.rng)
        b = self.ring.random(shape, self.rng)
        c = self.ring.mul(a, b)
        self._record("deal.beaver", shape, 3 * self.ring.bits)
        return BeaverTriples(shape, self.ring, self.n_parties, self._share(a), self._share(b),
                             self._share(c))

    def and_triples(self, shape: Any, active: int) -> AndTriples:
        """Boolean AND triples on the ``active`` bit positions of one word per secret."""
        shape = _shape(shape)
        active = int(active)
        if not 0 < active < 1 << 64:
            raise ValueError(f"active must be a non-empty 64-bit mask, got {active:#x}")
        mask = np.uint64(active)
        a = np.bitwise_and(random_words(shape, self.rng), mask)
        b = np.bitwise_and(random_words(shape, self.rng), mask)
        c = np.bitwise_and(a, b)
        self._record("deal.and", shape, 3 * popcount(active))
        share_ = [xor_share(v, self.n_parties, self.rng) for v in (a, b, c)]
        return AndTriples(shape, self.ring, self.n_parties, active, *share_)

    def edabits(self, shape: Any) -> EdaBits:
        """Random ring elements with XOR-shared bits (for masked bit decompositions)."""
        shape = _shape(shape)
        r = self.ring.random(shape, self.rng)
        self._record("deal.edabit", shape, 2 * self.ring.bits)
        return EdaBits(shape, self.ring, self.n_parties, self._share(r),
                       xor_share(r, self.n_parties, self.rng, width=self.ring.bits))

    def dabits(self, shape: Any) -> DaBits:
        """Random bits shared both arithmetically and by XOR (for B2A conversion)."""
        shape = _shape(shape)
        bit = np.bitwise_and(random_words(shape, self.rng), np.uint64(1))
        self._record("deal.dabit", shape, self.ring.bits + 1)
        return DaBits(shape, self.ring, self.n_parties, self._share(bit),
                      xor_share(bit, self.n_parties, self.rng, width=1))

    def _require_two(self, what: str) -> None:
        if self.n_parties != 2:
            raise ValueError(f"{what} is a two-party construction; this dealer serves groups "
                             f"of {self.n_parties} parties (use method='circuit')")

    def fss_msb(self, shape: Any) -> FssMsbMaterial:
        """Mask and DCF keys for :func:`fedustat.secure.dcf.fss_msb` (2 parties)."""
        self._require_two("the FSS comparison gate")
        shape = _shape(shape)
        mat = deal_fss_msb(shape, self.ring, self.rng)
        self._record("deal.fss_msb", shape, mat.bits_per_member)
        return mat

    def fss_zero(self, shape: Any) -> FssZeroMaterial:
        """Mask and DPF keys for :func:`fedustat.secure.dcf.fss_is_zero` (2 parties)."""
        self._require_two("the FSS equality gate")
        shape = _shape(shape)
        mat = deal_fss_zero(shape, self.ring, self.rng)
        self._record("deal.fss_zero", shape, mat.bits_per_member)
        return mat

    def dcf_keys(self, alpha: Any, beta: Any = 1, *, domain_bits: int) -> tuple[FssKey, FssKey]:
        """DCF keys for given ``alpha, beta`` (one key per element of ``alpha``)."""
        self._require_two("a DCF")
        keys = dcf_gen(alpha, beta, domain_bits=domain_bits, ring=self.ring, rng=self.rng)
        self._record("deal.dcf", np.shape(alpha), keys[0].bits_per_key)
        return keys

    def dpf_keys(self, alpha: Any, beta: Any = 1, *, domain_bits: int) -> tuple[FssKey, FssKey]:
        """DPF keys for given ``alpha, beta`` (one key per element of ``alpha``)."""
        self._require_two("a DPF")
        keys = dpf_gen(alpha, beta, domain_bits=domain_bits, ring=self.ring, rng=self.rng)
        self._record("deal.dpf", np.shape(alpha), keys[0].bits_per_key)
        return keys

    def __repr__(self) -> str:
        return f"Dealer(n_parties={self.n_parties}, ring=Ring({self.ring.bits}), rng={self.rng!r})"

