"""Shamir's threshold secret sharing over the prime field F_p, p = 2^31 - 1.

Shamir (1979), "How to share a secret": a secret ``s`` is the constant term of a random
polynomial ``f`` of degree ``t - 1``; holder ``x`` (a non-zero field element) receives
``f(x)``. Any ``t`` shares give ``s = f(0)`` by Lagrange interpolation at 0; any ``t - 1``
shares are uniformly distributed whatever ``s`` is (perfect secrecy).

The field is the Mersenne prime ``2^31 - 1`` so that a product of two elements fits in an
unsigned 64-bit word and every step is a vectorized NumPy operation. Byte strings (keys,
seeds) are shared as 16-bit chunks, one field element each (:func:`bytes_to_chunks`).
Coefficients are 64-bit words reduced mod p: their law is within ``p / 2^64 < 2^-32`` of
uniform in statistical distance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedustat.secure.ring import random_words

__all__ = [
    "CHUNK_BITS",
    "PRIME",
    "PRIME_BITS",
    "bytes_to_chunks",
    "chunks_to_bytes",
    "lagrange_at_zero",
    "reconstruct",
    "share",
]

PRIME = (1 << 31) - 1
PRIME_BITS = 31
#: Bits of a secret byte string carried by one field element.
CHUNK_BITS = 16
_P = np.uint64(PRIME)


def _check_holders(holders: Any) -> np.ndarray:
    xs = np.asarray(holders, dtype=np.int64)
    if xs.ndim != 1 or xs.size == 0:
        raise ValueError(f"holders must be a non-empty 1-D array of field points, got shape "
                         f"{xs.shape}")
    if np.any(xs <= 0) or np.any(xs >= PRIME):
        raise ValueError(f"holders must be field points in 1..{PRIME - 1} (0 is the secret's "
                         f"own point), got {xs.min()}..{xs.max()}")
    if np.unique(xs).size != xs.size:
        raise ValueError("holders must be distinct field points")
    return xs.astype(np.uint64)


def share(secrets: Any, holders: Any, threshold: int, rng: Any) -> np.ndarray:
    """Shares of every secret for every holder: ``out[..., j, :]`` is holder ``j``'s.

    ``secrets``: field elements, shape ``(..., c)`` (``c`` chunks); ``holders``: distinct
    field points, shape ``(H,)`` or one row per secret, ``(..., H)``; ``threshold`` ``t``
    (``1 <= t``): the polynomial has degree ``t - 1``. Returns shape ``(..., H, c)``.
    ``rng``: a seeded Generator (a study) or ``'os'``.
    """
    s = np.asarray(secrets, dtype=np.uint64)
    if s.ndim < 1 or np.any(s >= _P):
        raise ValueError(f"secrets must be field elements below {PRIME} with a chunk axis")
    t = int(threshold)
    if t < 1:
        raise ValueError(f"threshold must be >= 1, got {threshold!r}")
    xs = np.asarray(holders)
    rows = xs.reshape(-1, xs.shape[-1]) if xs.ndim > 1 else xs[None]
    for row in rows:
        _check_holders(row)
    xs = np.broadcast_to(xs.astype(np.uint64), (*s.shape[:-1], xs.shape[-1]))
    if xs.shape[-1] < t:
        raise ValueError(f"threshold {t} exceeds the {xs.shape[-1]} holders: no set of "
                         "holders could reconstruct")
    coefficients = random_words((t - 1, *s.shape), rng) % _P  # (t-1, ..., c)
    x = xs[..., :, None]  # (..., H, 1)
    acc = np.zeros((*s.shape[:-1], xs.shape[-1], s.shape[-1]), dtype=np.uint64)
    # Horner from the highest coefficient down: f(x) = (..(a_{t-1} x + a_{t-2}) x ..) x + s.
    for a in coefficients[::-1]:
        acc = (acc + a[..., None, :]) % _P
        acc = (acc * x) % _P
    return (acc + s[..., None, :]) % _P


def lagrange_at_zero(holders: Any) -> np.ndarray:
    """Lagrange coefficients ``lambda_j = prod_{m != j} x_m / (x_m - x_j)`` mod p, so that
    ``f(0) = sum_j lambda_j f(x_j)`` for any polynomial of degree below the number of
    holders."""
    xs = [int(x) for x in _check_holders(holders)]
    out = np.empty(len(xs), dtype=np.uint64)
    for j, xj in enumerate(xs):
        num, den = 1, 1
        for m, xm in enumerate(xs):
            if m != j:
                num = num * xm % PRIME
                den = den * (xm - xj) % PRIME
        out[j] = num * pow(den, PRIME - 2, PRIME) % PRIME
    return out


def reconstruct(shares: Any, holders: Any, threshold: int) -> np.ndarray:
    """The secret from the shares of at least ``threshold`` holders.

    ``shares``: shape ``(H, c)``, row ``j`` held by field point ``holders[j]``. Fewer than
    ``threshold`` shares are refused (they determine nothing). Returns ``(c,)``.
    """
    y = np.asarray(shares, dtype=np.uint64)
    xs = np.asarray(holders)
    if y.ndim != 2 or y.shape[0] != xs.size:
        raise ValueError(f"shares must have shape (holders, chunks) with one row per holder; "
                         f"got {y.shape} for {xs.size} holders")
    if xs.size < int(threshold):
        raise ValueError(f"{xs.size} shares cannot reconstruct a secret shared with "
                         f"threshold {int(threshold)}: at least {int(threshold)} are needed")
    used = slice(0, int(threshold))  # any t shares determine the polynomial
    lam = lagrange_at_zero(xs[used])
    acc = np.zeros(y.shape[1], dtype=np.uint64)
    for coefficient, row in zip(lam, y[used], strict=True):
        acc = (acc + (row % _P) * coefficient) % _P
    return acc


def bytes_to_chunks(data: Any) -> np.ndarray:
    """Byte strings (shape ``(..., nbytes)``, uint8, nbytes even) as 16-bit field
    elements ``(..., nbytes / 2)``, little-endian."""
    b = np.ascontiguousarray(np.asarray(data, dtype=np.uint8))
    if b.shape[-1] % 2:
        raise ValueError(f"byte strings must have an even length, got {b.shape[-1]}")
    return b.view("<u2").astype(np.uint64)


def chunks_to_bytes(chunks: Any) -> np.ndarray:
    """The inverse of :func:`bytes_to_chunks`; every chunk must be below 2^16."""
    c = np.asarray(chunks, dtype=np.uint64)
    if np.any(c >> np.uint64(CHUNK_BITS)):
        raise ValueError("a reconstructed chunk exceeds 16 bits: the shares are not of a "
                         "byte string (wrong holders or corrupted shares)")
    return np.ascontiguousarray(c.astype("<u2")).view(np.uint8)
