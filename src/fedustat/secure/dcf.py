"""Two-party function secret sharing: distributed comparison and point functions.

Paper 002 evaluates comparisons with function secret sharing (FSS) in the
preprocessing model (002 App. A.5.1 and E.1.2, after Boyle, Gilboa & Ishai 2016/2019):
a dealer gives the two servers keys ``k0, k1`` for a function ``f`` such that
``Eval(0, k0, x) + Eval(1, k1, x) = f(x)`` in an output group, while each key alone
is pseudorandom and hides ``f``.

What is implemented
-------------------
* **DCF** (distributed comparison function) ``f_{alpha,beta}(x) = beta if x < alpha
  else 0`` on an ``n``-bit domain with output in Z_{2^l}: the tree construction of
  Boyle, Chandran, Gilboa, Gupta, Ishai, Kumar & Rathee, "Function Secret Sharing for
  Mixed-Mode and Fixed-Point Secure Computation" (Eurocrypt 2021), Fig. 3 (``Gen^<``
  and ``Eval^<``): one GGM-style tree with a seed correction word, two control-bit
  corrections and a value correction word ``V_CW`` per level, and a final output
  correction word.
* **DPF** (distributed point function) ``f(x) = beta if x == alpha else 0``:
  Boyle, Gilboa & Ishai, "Function Secret Sharing: Improvements and Extensions"
  (CCS 2016), Fig. 1 — the same tree without value corrections.
* **Gates** on 2-party additive shares (the FSS-gate construction of Boyle, Gilboa &
  Ishai, TCC 2019): the dealer masks the input with a random ``r``, the servers open
  ``x + r`` and each evaluates its key at the opened value.

  - :func:`fss_msb`: the top bit of a shared ``z`` with **one** DCF on ``l - 1`` bits:
    with ``zh = z + r`` opened, ``msb(z) = msb(zh) xor msb(r) xor [zh_low < r_low]``
    (the borrow out of the low ``l - 1`` bits), so the key is for
    ``alpha = r_low`` and ``beta = 1 - 2 msb(r)`` and the servers add shares of
    ``msb(r)``; the wrap-around of ``z + r`` modulo ``2^l`` is exactly the borrow
    term, so the result is right for every ``z`` in Z_{2^l} (BCG+21, Sec. 4, the DReLU
    gate).
  - :func:`fss_is_zero`: ``[z == 0] = [zh == r]`` with one DPF on ``l`` bits.

The PRG
-------
Seeds have ``lambda = 128`` bits. ``G(s)`` is fixed-key AES-128 in Matyas-Meyer-Oseas
form, ``H_j(s) = AES_K(s xor c_j) xor s xor c_j`` with a public key ``K`` and public
tweaks ``c_0..c_3`` (the fixed-key construction used throughout the FSS literature,
secure when AES is modelled as a random permutation): ``H_0``/``H_1`` give the left and
right child seed (its lowest bit is the control bit ``t`` and is then cleared), ``H_2``
the two value words ``v^L, v^R`` and ``H_3`` the leaf conversion ``Convert(s)``. Every
level of every key is one AES-ECB call on a buffer of all seeds (the ``cryptography``
package; OpenSSL with AES-NI).

Key size
--------
A DCF key on ``n`` bits with ``l``-bit outputs is ``lambda + n (lambda + 2 + l) + l``
bits (:attr:`FssKey.bits_per_key`); for the comparison gate on a 64-bit ring
(``n = 63``) that is 12,414 bits, against ``4 l (lambda + 1) = 33,024`` quoted in 002
App. A.5.1. A DPF key is ``lambda + n (lambda + 2) + l`` bits.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from fedustat._validation import RandomLike, check_positive_int
from fedustat.secure.ring import DEFAULT_RING, Ring, random_words
from fedustat.secure.sharing import Material, share

__all__ = [
    "LAMBDA",
    "FssKey",
    "FssMsbMaterial",
    "FssZeroMaterial",
    "dcf_eval",
    "dcf_gen",
    "dcf_sum_at",
    "dpf_eval",
    "dpf_gen",
]

LAMBDA = 128  # seed length in bits (the security parameter)

_FIXED_KEY = hashlib.sha256(b"fedustat.secure.dcf: fixed AES-128 key").digest()[:16]
# Four public tweaks c_j, one per PRG output (left child, right child, values, leaf).
_TWEAKS = np.frombuffer(b"".join(
    hashlib.sha256(b"fedustat.secure.dcf: tweak %d" % j).digest()[:16] for j in range(4)),
    dtype=np.uint64).reshape(4, 2)
_LEFT, _RIGHT, _VALUE, _LEAF = 0, 1, 2, 3
_LSB = np.uint64(1)
_CLEAR_LSB = np.array([~np.uint64(1), ~np.uint64(0)], dtype=np.uint64)


class _Prg:
    """Fixed-key AES-128 in MMO form on reusable buffers: ``H(u) = AES_K(u) xor u``.

    The caller writes blocks ``u`` (already tweaked) into :attr:`inbuf` and calls
    :meth:`hash`, which overwrites them with ``H(u)`` using one ECB call for all blocks.
    """

    def __init__(self, max_blocks: int) -> None:
        self._enc = Cipher(algorithms.AES(_FIXED_KEY), modes.ECB()).encryptor()
        self.inbuf = np.empty((max(max_blocks, 1), 2), dtype=np.uint64)
        self._out = np.empty(16 * max(max_blocks, 1) + 15, dtype=np.uint8)

    def hash(self, n_blocks: int) -> np.ndarray:
        blocks = self.inbuf[:n_blocks]
        self._enc.update_into(memoryview(blocks).cast("B"), self._out)
        cipher = self._out[: 16 * n_blocks].view(np.uint64).reshape(n_blocks, 2)
        return np.bitwise_xor(cipher, blocks, out=blocks)


def _select(bit_mask: np.ndarray, if_one: np.ndarray, if_zero: np.ndarray) -> np.ndarray:
    """Branch-free select on words: ``bit_mask`` is all ones where the choice is 1."""
    return np.bitwise_xor(if_zero, np.bitwise_and(np.bitwise_xor(if_one, if_zero), bit_mask))


def _split_seed(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A PRG output block -> (seed with the lowest bit cleared, control bit)."""
    t = np.bitwise_and(block[:, 0], _LSB).astype(bool)
    return np.bitwise_and(block, _CLEAR_LSB), t


def _cond_neg(flag: np.ndarray, value: np.ndarray, ring: Ring) -> np.ndarray:
    """``(-1)^flag * value`` in the ring."""
    return np.where(flag, ring.neg(value), value)


def _leaf_convert(prg: _Prg, seeds: np.ndarray, ring: Ring) -> np.ndarray:
    """``Convert(s)``: ``l`` pseudorandom bits from ``H_3(s)``."""
    n = seeds.shape[0]
    np.bitwise_xor(seeds, _TWEAKS[_LEAF], out=prg.inbuf[:n])
    return np.bitwise_and(prg.hash(n)[:, 0], ring.mask)


@dataclass(frozen=True, eq=False)
class FssKey:
    """One server's keys for ``N`` functions (DCF or DPF), arrays over the key axis.

    Correction words are indexed level-major (level first, then key); freshly generated
    ones are views of key-major storage (:func:`_gen`). They are the same
    in both servers' keys (the arrays are shared between the two :class:`FssKey`
    objects of a pair); only ``seed`` differs.

    ``index``, when given, says which entries of the key axis of the arrays are the
    keys: key ``i`` is entry ``index[i]``. A receiver then keeps the rows it was sent as
    they arrived, without gathering a copy of its keys; evaluation gathers a chunk at a
    time. A copy or a pickle holds only the keys (:meth:`compact`).
    """

    party: int
    kind: Literal["dcf", "dpf"]
    domain_bits: int
    ring: Ring
    seed: np.ndarray                # (N, 2) uint64: the root seed s^(0)
    cw_seed: np.ndarray             # (n, N, 2) uint64: s_CW per level
    cw_t: np.ndarray                # (n, N, 2) bool: (t_CW^L, t_CW^R) per level
    cw_value: np.ndarray | None     # (n, N) uint64: V_CW per level (DCF only)
    cw_out: np.ndarray              # (N,) uint64: CW^(n+1)
    index: np.ndarray | None = None  # (N,) int64: the keys' entries of the arrays

    def __len__(self) -> int:
        return int(self.seed.shape[0] if self.index is None else self.index.size)

    def compact(self) -> FssKey:
        """The same keys with their own arrays (no ``index``)."""
        return self if self.index is None else self.entries(self.index)

    def entries(self, which: np.ndarray) -> FssKey:
        """Entries ``which`` of the key axis of the arrays as keys with their own
        contiguous level-major arrays. Taken as whole key rows (each key's levels lie
        together in the rows a receiver keeps), then laid out level by level."""

        def rows(arr: np.ndarray) -> np.ndarray:   # arr: (levels, keys, ...)
            return np.ascontiguousarray(np.moveaxis(np.moveaxis(arr, 1, 0)[which], 0, 1))

        return FssKey(self.party, self.kind, self.domain_bits, self.ring, self.seed[which],
                      rows(self.cw_seed), rows(self.cw_t),
                      None if self.cw_value is None else rows(self.cw_value),
                      self.cw_out[which])

    def __reduce__(self) -> tuple[Any, ...]:
        # An indexed key's arrays are views of every row its holder received: a copy or
        # a pickle carries only its own keys.
        k = self.compact()
        return (FssKey, (k.party, k.kind, k.domain_bits, k.ring, k.seed, k.cw_seed, k.cw_t,
                         k.cw_value, k.cw_out))

    @property
    def bits_per_key(self) -> int:
        """Wire size of one key: ``lambda + n (lambda + 2 [+ l]) + l`` bits."""
        per_level = LAMBDA + 2 + (self.ring.bits if self.kind == "dcf" else 0)
        return LAMBDA + self.domain_bits * per_level + self.ring.bits


def _check_domain(domain_bits: int) -> int:
    n = check_positive_int(domain_bits, "domain_bits", minimum=0)
    if n > 64:
        raise ValueError(f"domain_bits must be <= 64, got {n}")
    return n


def _domain_values(values: Any, n: int, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers in [0, 2^{n}), got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be in [0, 2^{n}), got negative values")
    out = arr.astype(np.uint64)
    if n < 64 and out.size and out.max() >= np.uint64(1 << n):
        raise ValueError(f"{name} must be in [0, 2^{n}) for a {n}-bit domain, "
                         f"got {int(out.max())}")
    return out


def _bit_masks(values: np.ndarray, shift: int) -> tuple[np.ndarray, np.ndarray]:
    """Bit ``shift`` of each value as booleans and as all-ones/all-zeros words."""
    bit = np.bitwise_and(np.right_shift(values, np.uint64(shift)), _LSB)
    return bit.astype(bool), np.subtract(np.uint64(0), bit)


_CHUNK = 1 << 14  # keys per chunk: the working arrays stay in the CPU cache


def _gen(kind: Literal["dcf", "dpf"], alpha: Any, beta: Any, domain_bits: int, ring: Ring,
         rng: RandomLike | Any) -> tuple[FssKey, FssKey]:
    n = _check_domain(domain_bits)
    a = _domain_values(alpha, n, "alpha").ravel()
    N = a.size
    b = np.broadcast_to(ring.reduce(beta), a.shape) if np.ndim(beta) == 0 else \
        ring.reduce(beta).ravel()
    if b.shape != a.shape:
        raise ValueError(f"beta must be a scalar or have one value per alpha ({N}), "
                         f"got shape {np.shape(beta)}")
    seeds = np.bitwise_and(random_words((2, N, 2), rng), _CLEAR_LSB)
    # Stored key-major (one key's levels together, as a key travels: a dealer sends each
    # key whole) and handed out level-major as views: a key's rows need no transposed copy.
    cw_seed = np.empty((N, n, 2), dtype=np.uint64).transpose(1, 0, 2)
    cw_t = np.empty((N, n, 2), dtype=bool).transpose(1, 0, 2)
    cw_value = np.empty((N, n), dtype=np.uint64).T if kind == "dcf" else None
    cw_out = np.empty(N, dtype=np.uint64)
    prg = _Prg(2 * 3 * min(N, _CHUNK))
    # Keys are independent: build them in cache-sized chunks.
    for lo in range(0, N, _CHUNK):
        part = slice(lo, min(lo + _CHUNK, N))
        cw_out[part] = _gen_chunk(kind, a[part], b[part], seeds[:, part], n, ring, prg,
                                  cw_seed[:, part], cw_t[:, part],
                                  None if cw_value is None else cw_value[:, part])
    keys = tuple(FssKey(party, kind, n, ring, seeds[party], cw_seed, cw_t, cw_value, cw_out)
                 for party in (0, 1))
    return keys[0], keys[1]


def _gen_chunk(kind: str, a: np.ndarray, b: np.ndarray, seeds: np.ndarray, n: int, ring: Ring,
               prg: _Prg, cw_seed: np.ndarray, cw_t: np.ndarray,
               cw_value: np.ndarray | None) -> np.ndarray:
    """Gen for one chunk of keys; fills the correction words, returns ``CW^(n+1)``."""
    N = a.size
    s0, s1 = seeds[0].copy(), seeds[1].copy()
    t0 = np.zeros(N, dtype=bool)
    t1 = np.ones(N, dtype=bool)
    v_alpha = np.zeros(N, dtype=np.uint64)
    tweaks = (_LEFT, _RIGHT, _VALUE) if kind == "dcf" else (_LEFT, _RIGHT)
    k = len(tweaks)
    staged = prg.inbuf[: 2 * k * N].reshape(2, k, N, 2)
    for level in range(n):
        bit, bit_mask = _bit_masks(a, n - 1 - level)
        wide = bit_mask[:, None]
        # One AES call expands both servers' seeds: blocks [server, tweak, key].
        for j, tw in enumerate(tweaks):
            np.bitwise_xor(s0, _TWEAKS[tw], out=staged[0, j])
            np.bitwise_xor(s1, _TWEAKS[tw], out=staged[1, j])
        out = prg.hash(2 * k * N).reshape(2, k, N, 2)
        sl0, tl0 = _split_seed(out[0, 0])
        sr0, tr0 = _split_seed(out[0, 1])
        sl1, tl1 = _split_seed(out[1, 0])
        sr1, tr1 = _split_seed(out[1, 1])
        # alpha_i = 1: keep the right child and lose the left one (BCG+21 Fig. 3 step 5).
        s_lose0 = _select(wide, sl0, sr0)
        s_lose1 = _select(wide, sl1, sr1)
        s_keep0 = np.bitwise_xor(np.bitwise_xor(sl0, sr0), s_lose0)
        s_keep1 = np.bitwise_xor(np.bitwise_xor(sl1, sr1), s_lose1)
        s_cw = np.bitwise_xor(s_lose0, s_lose1)
        if kind == "dcf":
            v0 = np.bitwise_and(out[0, 2], ring.mask)  # columns: v^L, v^R
            v1 = np.bitwise_and(out[1, 2], ring.mask)
            v_lose0 = _select(bit_mask, v0[:, 0], v0[:, 1])
            v_lose1 = _select(bit_mask, v1[:, 0], v1[:, 1])
            v_keep0 = _select(bit_mask, v0[:, 1], v0[:, 0])
            v_keep1 = _select(bit_mask, v1[:, 1], v1[:, 0])
            # V_CW, plus beta when the lost child is the left one (all its x are < alpha),
            # then the running V_alpha (BCG+21 Fig. 3 step 5).
            v_cw = _cond_neg(t1, ring.sub(ring.sub(v_lose1, v_lose0), v_alpha), ring)
            v_cw = ring.add(v_cw, np.bitwise_and(_cond_neg(t1, b, ring), bit_mask))
            v_alpha = ring.add(ring.add(ring.sub(v_alpha, v_keep1), v_keep0),
                               _cond_neg(t1, v_cw, ring))
            assert cw_value is not None
            cw_value[level] = v_cw
        t_cw_left = tl0 ^ tl1 ^ bit ^ True
        t_cw_right = tr0 ^ tr1 ^ bit
        t_keep_cw = np.where(bit, t_cw_right, t_cw_left)
        t_keep0 = np.where(bit, tr0, tl0)
        t_keep1 = np.where(bit, tr1, tl1)
        cw_seed[level] = s_cw
        cw_t[level, :, 0] = t_cw_left
        cw_t[level, :, 1] = t_cw_right
        s0 = np.bitwise_xor(s_keep0, np.bitwise_and(s_cw, -t0.astype(np.uint64)[:, None]))
        s1 = np.bitwise_xor(s_keep1, np.bitwise_and(s_cw, -t1.astype(np.uint64)[:, None]))
        t0, t1 = t_keep0 ^ (t0 & t_keep_cw), t_keep1 ^ (t1 & t_keep_cw)
    conv0 = _leaf_convert(prg, s0, ring)
    conv1 = _leaf_convert(prg, s1, ring)
    if kind == "dcf":
        # BCG+21 Fig. 3, step 6: CW^(n+1) = (-1)^t1 [Convert(s1) - Convert(s0) - V_alpha].
        cw_out = _cond_neg(t1, ring.sub(ring.sub(conv1, conv0), v_alpha), ring)
    else:
        # BGI16 Fig. 1: CW^(n+1) = (-1)^t1 [beta - Convert(s0) + Convert(s1)].
        cw_out = _cond_neg(t1, ring.add(ring.sub(b, conv0), conv1), ring)
    return cw_out


def _eval(party: int, key: FssKey, x: Any) -> np.ndarray:
    if party not in (0, 1):
        raise ValueError(f"party must be 0 or 1, got {party!r}")
    if key.party != party:
        raise ValueError(f"key belongs to party {key.party}, not {party}")
    n = key.domain_bits
    pts = _domain_values(x, n, "x")
    N = len(key)
    if pts.ndim == 0 or pts.shape[0] != N:
        raise ValueError(f"x must have the key axis first (length {N}), got shape {pts.shape}")
    out_shape = pts.shape
    per_key = int(np.prod(pts.shape[1:], dtype=np.int64))
    # With one point per key, chunk rows are slices (views, no gathering).
    all_rows = None if per_key == 1 else np.repeat(np.arange(N), per_key)
    pts = pts.ravel()
    total = np.empty(pts.size, dtype=np.uint64)
    prg = _Prg(2 * min(pts.size, _CHUNK))
    for lo in range(0, pts.size, _CHUNK):
        part = slice(lo, min(lo + _CHUNK, pts.size))
        rows = part if all_rows is None else all_rows[part]
        total[part] = _eval_chunk(party, key, pts[part], rows, prg)
    return total.reshape(out_shape)


def _eval_chunk(party: int, key: FssKey, pts: np.ndarray, rows: slice | np.ndarray,
                prg: _Prg) -> np.ndarray:
    """Eval of the keys ``rows`` at the points ``pts`` (one chunk)."""
    n, ring = key.domain_bits, key.ring
    M = pts.size

    if key.index is not None:
        # This chunk's keys gathered as whole rows first: each level is then read in
        # sequence, not one scattered entry per key and level.
        key, rows = key.entries(key.index[rows]), slice(None)

    def take(arr: np.ndarray) -> np.ndarray:
        return arr[rows]

    dcf = key.kind == "dcf"
    child_in = prg.inbuf[:M]
    value_in = prg.inbuf[M: 2 * M]
    s = take(key.seed)
    t = np.full(M, bool(party))
    acc = np.zeros(M, dtype=np.uint64)
    for level in range(n):
        bit, bit_mask = _bit_masks(pts, n - 1 - level)
        np.bitwise_xor(s, _select(bit_mask[:, None], _TWEAKS[_RIGHT], _TWEAKS[_LEFT]),
                       out=child_in)
        if dcf:
            np.bitwise_xor(s, _TWEAKS[_VALUE], out=value_in)
            hashed = prg.hash(2 * M)
            vblock = hashed[M:]
            v = np.bitwise_and(_select(bit_mask, vblock[:, 1], vblock[:, 0]), ring.mask)
            assert key.cw_value is not None
            # BCG+21 Fig. 3, Eval^<: V += (-1)^b [Convert(v) + t V_CW], t before the step.
            corr = np.bitwise_and(take(key.cw_value[level]), -t.astype(np.uint64))
            acc = ring.add(acc, ring.add(v, corr))
        else:
            hashed = prg.hash(M)
        s_next, t_next = _split_seed(hashed[:M])
        cw_t = take(key.cw_t[level])
        s = np.bitwise_xor(s_next, np.bitwise_and(take(key.cw_seed[level]),
                                                  -t.astype(np.uint64)[:, None]))
        t = t_next ^ (t & np.where(bit, cw_t[:, 1], cw_t[:, 0]))
    leaf = ring.add(_leaf_convert(prg, s, ring),
                    np.bitwise_and(take(key.cw_out), -t.astype(np.uint64)))
    total = ring.add(acc, leaf)
    return ring.neg(total) if party == 1 else total


def dcf_gen(alpha: Any, beta: Any = 1, *, domain_bits: int, ring: Ring = DEFAULT_RING,
            rng: RandomLike | Any = None) -> tuple[FssKey, FssKey]:
    """DCF keys for ``f(x) = beta if x < alpha else 0`` (BCG+21 Fig. 3), vectorized.

    Parameters
    ----------
    alpha:
        Thresholds in ``[0, 2^n)``, one per key (any shape; flattened to ``N`` keys).
    beta:
        Payload in Z_{2^l}: a scalar or one per key.
    domain_bits:
        ``n``, the input length (0..64).
    ring:
        The output group Z_{2^l}.
    rng:
        Randomness for the root seeds (see :mod:`fedustat.secure.ring`).

    Returns
    -------
    (k0, k1): the two servers' keys.
    """
    return _gen("dcf", alpha, beta, domain_bits, ring, rng)


def dcf_eval(party: int, key: FssKey, x: Any) -> np.ndarray:
    """``Eval(b, k_b, x)``: server ``party``'s additive share of ``f(x)``.

    ``x`` has the key axis first: shape ``(N,)`` (one point per key) or ``(N, K...)``
    (several points per key). Shares of the two servers sum to ``f(x)`` modulo ``2^l``.
    """
    if key.kind != "dcf":
        raise ValueError("dcf_eval needs a DCF key; use dpf_eval for a DPF key")
    return _eval(party, key, x)


def dpf_gen(alpha: Any, beta: Any = 1, *, domain_bits: int, ring: Ring = DEFAULT_RING,
            rng: RandomLike | Any = None) -> tuple[FssKey, FssKey]:
    """DPF keys for ``f(x) = beta if x == alpha else 0`` (BGI16 Fig. 1), vectorized."""
    return _gen("dpf", alpha, beta, domain_bits, ring, rng)


def dpf_eval(party: int, key: FssKey, x: Any) -> np.ndarray:
    """Server ``party``'s additive share of the point function at ``x`` (see
    :func:`dcf_eval` for shapes)."""
    if key.kind != "dpf":
        raise ValueError("dpf_eval needs a DPF key; use dcf_eval for a DCF key")
    return _eval(party, key, x)


# -- gates on 2-party additive shares ------------------------------------------------
@dataclass(eq=False)
class FssMsbMaterial(Material):
    """Dealt for :func:`fss_msb`: shares of the mask ``r``, of ``msb(r)`` and the DCF keys
    for ``alpha = r mod 2^{l-1}``, ``beta = 1 - 2 msb(r)`` on ``l - 1`` bits."""

    shape: tuple[int, ...]
    ring: Ring
    n_shares: int
    mask: np.ndarray
    mask_msb: np.ndarray
    keys: tuple[FssKey, FssKey]

    @property
    def bits_per_member(self) -> int:
        """Offline bits a server receives per secret: key + two ring elements."""
        return self.keys[0].bits_per_key + 2 * self.ring.bits


@dataclass(eq=False)
class FssZeroMaterial(Material):
    """Dealt for :func:`fss_is_zero`: shares of the mask ``r`` and DPF keys at ``r``."""

    shape: tuple[int, ...]
    ring: Ring
    n_shares: int
    mask: np.ndarray
    keys: tuple[FssKey, FssKey]

    @property
    def bits_per_member(self) -> int:
        return self.keys[0].bits_per_key + self.ring.bits


def deal_fss_msb(shape: tuple[int, ...], ring: Ring, rng: RandomLike | Any = None
                 ) -> FssMsbMaterial:
    """Offline: mask, mask-msb shares and DCF keys for :func:`fss_msb` on secrets of
    ``shape`` (2 servers). Normally called through :meth:`Dealer.fss_msb`."""
    shape = tuple(int(d) for d in shape)
    r = ring.random(shape, rng)
    top = ring.msb(r)
    low = np.bitwise_and(r, np.uint64((1 << (ring.bits - 1)) - 1))
    beta = ring.sub(np.uint64(1), ring.mul(np.uint64(2), top))
    keys = dcf_gen(low.ravel(), beta.ravel(), domain_bits=ring.bits - 1, ring=ring, rng=rng)
    return FssMsbMaterial(shape, ring, 2, share(r, 2, rng, ring=ring),
                          share(top, 2, rng, ring=ring), keys)


def deal_fss_zero(shape: tuple[int, ...], ring: Ring, rng: RandomLike | Any = None
                  ) -> FssZeroMaterial:
    """Offline: mask shares and DPF keys for :func:`fss_is_zero` (2 servers)."""
    shape = tuple(int(d) for d in shape)
    r = ring.random(shape, rng)
    keys = dpf_gen(r.ravel(), 1, domain_bits=ring.bits, ring=ring, rng=rng)
    return FssZeroMaterial(shape, ring, 2, share(r, 2, rng, ring=ring), keys)


_ONE = np.uint64(1)
_CLEAR_LSB = np.array([~np.uint64(1), ~np.uint64(0)], dtype=np.uint64)
_CHILD_TWEAKS = np.stack([_TWEAKS[_LEFT], _TWEAKS[_RIGHT]])  # rows: direction 0 / 1
_EVAL_CHUNK = 1 << 16  # key x point pairs per chunk of dcf_sum_at


def dcf_sum_at(party: int, key: FssKey, points: Any, *,
               chunk: int = _EVAL_CHUNK) -> np.ndarray:
    """Server ``party``'s share of ``sum_i f_i(x)`` at every point x, over all DCF keys.

    The same result as summing ``dcf_eval(party, key, x)`` over the key axis with every
    key evaluated at every point, computed by walking, for each key, the binary trie of
    the (sorted, distinct) points once: a trie node's seed, control bit and running value
    are shared by all points below it. Per key that is one value block per inner trie
    node and one seed block per trie node (about ``3 |B|`` AES blocks for a contiguous
    query) instead of ``2 d |B|``. The per-level step is BCG+21 Fig. 3, ``Eval^<``:
    ``V += (-1)^b [Convert(v^{x_i}) + t V_CW]``, ``s = s^{x_i} xor t s_CW``,
    ``t = t^{x_i} xor t t_CW^{x_i}``; the leaf adds ``Convert(s) + t CW^{(n+1)}``.
    Additions are modulo 2^64 and reduced to 2^l once at the end (2^l divides 2^64).

    Parameters
    ----------
    party:
        0 or 1, the server holding ``key``.
    key:
        A DCF :class:`~fedustat.secure.dcf.FssKey` for N functions.
    points:
        Points of the domain ``[0, 2^d)`` (any order, repeats allowed).
    chunk:
        Key x point pairs processed together (memory only).

    Returns
    -------
    ndarray of uint64, one ring element per entry of ``points``.
    """
    if party not in (0, 1):
        raise ValueError(f"party must be 0 or 1, got {party!r}")
    if not isinstance(key, FssKey) or key.kind != "dcf":
        raise TypeError("key must be a DCF FssKey (from dcf_gen)")
    if key.party != party:
        raise ValueError(f"key belongs to party {key.party}, not {party}")
    key = key.compact()
    d, ring = key.domain_bits, key.ring
    pts = np.asarray(points)
    if pts.ndim != 1 or pts.size == 0 or pts.dtype.kind not in "iu":
        raise ValueError("points must be a non-empty 1-D array of integers")
    if (pts.dtype.kind == "i" and pts.min() < 0) or (d < 64 and int(pts.max()) >= 1 << d):
        raise ValueError(f"points must be in [0, 2^{d}) for a {d}-bit domain")
    uniq, inverse = np.unique(pts.astype(np.uint64), return_inverse=True)
    # Trie of the points: prefixes of length k, each child's parent and direction bit.
    levels = [np.unique(uniq >> np.uint64(d - k)) for k in range(d + 1)]
    plan = []
    for k in range(d):
        parent = np.searchsorted(levels[k], levels[k + 1] >> _ONE)
        direction = (levels[k + 1] & _ONE).astype(np.intp)
        plan.append((parent, direction, levels[k + 1].size == 2 * levels[k].size))
    n_keys = len(key)
    per_chunk = max(1, int(chunk) // uniq.size)
    widest = max(level.size for level in levels)
    # Two PRG buffers used in turn: the seeds of a level live in the buffer just hashed.
    prgs = (_Prg(3 * per_chunk * widest), _Prg(3 * per_chunk * widest))
    cw_t = key.cw_t.astype(np.uint64)
    total = np.zeros(uniq.size, dtype=np.uint64)
    for lo in range(0, n_keys, per_chunk):
        rows = slice(lo, min(lo + per_chunk, n_keys))
        k = rows.stop - rows.start
        seeds = key.seed[rows][:, None, :]  # (keys, trie nodes, 2 words)
        t = np.full((k, 1), np.uint64(party))
        acc = np.zeros((k, 1), dtype=np.uint64)
        width = 1
        for level, (parent, direction, full) in enumerate(plan):
            prg = prgs[level & 1]
            width_next = parent.size
            buf = prg.inbuf
            np.bitwise_xor(seeds, _TWEAKS[_VALUE], out=buf[: k * width].reshape(k, width, 2))
            child_in = buf[k * width: k * (width + width_next)]
            if full:  # every node has both children: no gathers, broadcast instead
                np.bitwise_xor(seeds[:, :, None, :], _CHILD_TWEAKS,
                               out=child_in.reshape(k, width, 2, 2))
            else:
                np.bitwise_xor(seeds[:, parent], _CHILD_TWEAKS[direction],
                               out=child_in.reshape(k, width_next, 2))
            hashed = prg.hash(k * (width + width_next))
            value_words = hashed[: k * width].reshape(k, width, 2)  # (v^L, v^R) per node
            t_mask = np.subtract(np.uint64(0), t)
            corr = np.bitwise_and(key.cw_value[level, rows][:, None], t_mask)
            np.add(corr, acc, out=corr)
            seed_corr = np.bitwise_and(key.cw_seed[level, rows][:, None, :], t_mask[..., None])
            cw_t_level = cw_t[level, rows]
            if full:
                acc = np.add(value_words, corr[:, :, None]).reshape(k, width_next)
                child = hashed[k * width:].reshape(k, width, 2, 2)
                t_next = np.bitwise_and(child[..., 0], _ONE)
                np.bitwise_xor(t_next, np.bitwise_and(t[:, :, None], cw_t_level[:, None, :]),
                               out=t_next)
                np.bitwise_and(child, _CLEAR_LSB, out=child)
                np.bitwise_xor(child, seed_corr[:, :, None, :], out=child)
                t = t_next.reshape(k, width_next)
                seeds = child.reshape(k, width_next, 2)
            else:
                acc = np.add(value_words[:, parent, direction], corr[:, parent])
                child = hashed[k * width:].reshape(k, width_next, 2)
                t_next = np.bitwise_and(child[..., 0], _ONE)
                np.bitwise_xor(t_next, np.bitwise_and(t[:, parent], cw_t_level[:, direction]),
                               out=t_next)
                np.bitwise_and(child, _CLEAR_LSB, out=child)
                np.bitwise_xor(child, seed_corr[:, parent], out=child)
                t = t_next
                seeds = child
            width = width_next
        prg = prgs[d & 1]
        np.bitwise_xor(seeds, _TWEAKS[_LEAF], out=prg.inbuf[: k * width].reshape(k, width, 2))
        convert = prg.hash(k * width)[:, 0].reshape(k, width)
        np.add(acc, convert, out=acc)
        np.add(acc, np.bitwise_and(key.cw_out[rows][:, None], np.subtract(np.uint64(0), t)),
               out=acc)
        part = np.add.reduce(acc, axis=0, dtype=np.uint64)
        total = np.subtract(total, part) if party == 1 else np.add(total, part)
    return np.bitwise_and(total, ring.mask)[inverse]
