"""FSS gates on two-party additive shares: the sign bit and the zero test.

The FSS-gate construction of Boyle, Gilboa & Ishai (TCC 2019), used by 002 App. A.5.1 and
E.1.2 for comparisons: the dealer masks the input with a random ``r``, the two servers open
``x + r`` and each evaluates its key (:mod:`fedustat.secure.dcf`) at the opened value.

* :func:`fss_msb`: the top bit of a shared ``z`` with one DCF on ``l - 1`` bits
  (BCG+21, Sec. 4, the DReLU gate; the derivation is in :mod:`fedustat.secure.dcf`).
* :func:`fss_is_zero`: ``[z == 0] = [z + r == r]`` with one DPF on ``l`` bits.

Material comes pre-dealt or from a :class:`~fedustat.secure.dealer.Dealer` that deals it now.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedustat.secure.dcf import FssMsbMaterial, FssZeroMaterial, dcf_eval, dpf_eval
from fedustat.secure.dealer import Dealer
from fedustat.secure.sharing import as_shares, evaluating_members, open_shares
from fedustat.secure.transcript import Transcript

__all__ = ["fss_is_zero", "fss_msb"]


def _material(source: Any, cls: type, method: str, shape: tuple[int, ...]) -> Any:
    if isinstance(source, cls):
        return source
    deal = getattr(source, method, None)
    if deal is None:
        raise TypeError(f"source must be a {cls.__name__} or a Dealer, got {type(source).__name__}")
    return deal(shape)


def fss_msb(z: np.ndarray, source: FssMsbMaterial | Dealer, *,
            transcript: Transcript | None = None) -> np.ndarray:
    """Shares of ``msb(z)`` (the sign bit) for 2-party shares ``z`` of shape ``(2, *s)``.

    One online round: each server sends ``l`` bits per secret (its share of ``z + r``),
    then evaluates its DCF key locally. Correct for every ``z`` in Z_{2^l}.

    Parameters
    ----------
    z:
        Additive shares, shape ``(2, *s)``.
    source:
        Pre-dealt :class:`FssMsbMaterial`, or a :class:`~fedustat.secure.dealer.Dealer`
        that deals it now.
    transcript:
        Where the opening is recorded.
    """
    zs = as_shares(z, "z", n_shares=2)
    mat = _material(source, FssMsbMaterial, "fss_msb", zs.shape[1:])
    ring = mat.ring
    zs = ring.reduce(zs)
    mat.consume(zs.shape[1:])
    (masked,) = open_shares(ring.add(zs, mat.mask), ring=ring, transcript=transcript,
                            kind="fss_msb.open")
    low = np.bitwise_and(masked, np.uint64((1 << (ring.bits - 1)) - 1)).ravel()
    top = ring.msb(masked)
    out = np.zeros_like(zs)
    for b in evaluating_members(2):
        # w = msb(r) xor borrow, as beta [zh_low < r_low] + msb(r) with beta = 1 - 2 msb(r).
        w = ring.add(dcf_eval(b, mat.keys[b], low).reshape(masked.shape), mat.mask_msb[b])
        # msb(z) = msb(zh) xor w = a + (1 - 2a) w with a = msb(zh) public.
        out[b] = ring.mul(ring.sub(np.uint64(1), ring.mul(np.uint64(2), top)), w)
    out[0] = ring.add(out[0], top)
    return out


def fss_is_zero(z: np.ndarray, source: FssZeroMaterial | Dealer, *,
                transcript: Transcript | None = None) -> np.ndarray:
    """Shares of ``[z == 0]`` for 2-party shares ``z``: open ``z + r``, evaluate the DPF
    at the opened value (one round, ``l`` bits per secret per server)."""
    zs = as_shares(z, "z", n_shares=2)
    mat = _material(source, FssZeroMaterial, "fss_zero", zs.shape[1:])
    ring = mat.ring
    zs = ring.reduce(zs)
    mat.consume(zs.shape[1:])
    (masked,) = open_shares(ring.add(zs, mat.mask), ring=ring, transcript=transcript,
                            kind="fss_zero.open")
    flat = masked.ravel()
    out = np.zeros_like(zs)
    for b in evaluating_members(2):
        out[b] = dpf_eval(b, mat.keys[b], flat).reshape(masked.shape)
    return out
