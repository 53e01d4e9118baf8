"""Dropout-tolerant secure summation: SecAgg+ as pure, vectorized steps.

Bell, Bonawitz, Gascón, Lepoint, Raykova (2020), "Secure single-server aggregation with
(poly)logarithmic overhead" (CCS), Sec. 3 (the semi-honest protocol), built on Bonawitz et
al. (2017), "Practical secure aggregation for privacy-preserving machine learning" (CCS),
Fig. 4 (the semi-honest rounds). Each party ``u`` masks its input vector ``x_u`` over
Z_{2^l}:

    y_u = x_u + PRG(b_u) + sum_{v in N(u), v < u} PRG(s_uv) - sum_{v in N(u), v > u} PRG(s_uv)

with ``N(u)`` its ``k`` neighbours in a sparse graph the server draws (Bell et al. 2020
replace Bonawitz et al.'s complete graph by a k-regular graph of logarithmic degree; the
one used here is the Harary graph ``H(n, k)``, which is k-connected, with the nodes placed
by a random permutation), ``s_uv`` the key both ends derive from an X25519 agreement of
``u``'s masking key with ``v``'s public key, and ``b_u`` a fresh self-mask seed. ``u``
sends each neighbour a Shamir share (threshold ``t``, :mod:`fedustat.secure.shamir`) of its
masking secret key and of ``b_u``. The server adds the masked inputs of the parties that
reached the upload (``U3``); for each of them it reconstructs ``b_u``, and for each party
that shared its keys but dropped before the upload it reconstructs the masking key and
recomputes its pairwise masks with the survivors, from ``t`` shares the surviving
neighbours send. The pairwise masks of two survivors cancel in the sum.

The steps here do no I/O; a protocol moves their arrays (the rounds of Bonawitz et al.
Fig. 4: AdvertiseKeys, ShareKeys, MaskedInputCollection, Unmasking; the consistency
round is for a malicious server and is not run). The share round travels as relayed rows
between parties, sealed end to end by the transport, so the server sees only who sends
to whom (the public graph) and the rows' sizes; Bonawitz et al.'s encryption of the shares
under a second agreed key is the transport's seal here.

PRG: ChaCha20 (``cryptography``), a 256-bit key, an all-zero nonce (every key is used for
one run's vector only). Pairwise key: SHA-256 over a domain label and the X25519 shared
secret.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from fedustat.privacy.samplers import csprng_bytes
from fedustat.secure import shamir
from fedustat.secure.ring import Ring, as_share_rng

__all__ = [
    "KEY_BYTES",
    "SecAggPlus",
    "harary_neighbours",
    "prg_mask",
]

KEY_BYTES = 32
#: Field elements per shared 32-byte secret (16-bit chunks).
SECRET_CHUNKS = KEY_BYTES * 8 // shamir.CHUNK_BITS
_PAIR_LABEL = b"fedustat secagg+ pairwise mask key v1"
_NONCE = bytes(16)


def random_bytes(shape: tuple[int, ...], rng: Any) -> np.ndarray:
    """Uniform bytes: from a seeded Generator (a study) or the OS CSPRNG (``'os'``)."""
    count = int(np.prod(shape, dtype=np.int64))
    if isinstance(rng, str) and rng == "os":
        return np.frombuffer(csprng_bytes(count), dtype=np.uint8).copy().reshape(shape)
    source = as_share_rng(rng)
    words = source.integers(0, 1 << 64, size=(count + 7) // 8, dtype=np.uint64)
    return words.view(np.uint8)[:count].copy().reshape(shape)


def prg_mask(seed: bytes, width: int, ring: Ring) -> np.ndarray:
    """``width`` ring elements expanded from a 32-byte seed by ChaCha20 (Bonawitz et al.
    2017 Sec. 4, "PRG"): the keystream's 64-bit little-endian words, reduced to l bits."""
    stream = Cipher(algorithms.ChaCha20(seed, _NONCE), mode=None).encryptor()
    words = np.frombuffer(stream.update(bytes(8 * width)), dtype="<u8").astype(np.uint64)
    return ring.reduce(words)


def harary_neighbours(members: np.ndarray, degree: int, permutation: np.ndarray) -> np.ndarray:
    """The neighbours of each member in the Harary graph ``H(n, k)`` relabelled by a
    permutation (a k-regular graph for Bell et al. 2020): position ``i`` is joined
    to ``i +- 1, ..., i +- k/2`` mod n (``k`` even), or to every other position when
    ``k = n - 1``; member ``members[permutation[i]]`` sits at position ``i``. ``H(n, k)``
    is k-connected: removing fewer than ``k`` nodes leaves it connected. Returns shape
    ``(n, k)``: row ``r`` the ids of ``members[r]``'s neighbours."""
    ids = np.asarray(members, dtype=np.int64)
    n = ids.size
    position = np.empty(n, dtype=np.int64)
    position[np.asarray(permutation, dtype=np.int64)] = np.arange(n)
    if degree == n - 1:
        offsets = np.arange(1, n)
    else:
        half = np.arange(1, degree // 2 + 1)
        offsets = np.concatenate([half, -half])
    at = (position[:, None] + offsets[None, :]) % n  # positions of each member's neighbours
    return ids[np.asarray(permutation, dtype=np.int64)[at]]


def _pair_key(secret: X25519PrivateKey, public: bytes) -> bytes:
    shared = secret.exchange(X25519PublicKey.from_public_bytes(public))
    return hashlib.sha256(_PAIR_LABEL + shared).digest()


@dataclass(frozen=True)
class SecAggPlus:
    """One run's SecAgg+ parameters: ``degree`` k, ``threshold`` t, the ring, the width.

    Party steps take a batch (rows = parties) and return arrays with the party first;
    server steps take what the parties sent. Correctness: every secret the server needs
    (``b_u`` of a survivor, the key of a party that shared and then dropped) must have
    ``t`` surviving holders among the owner's neighbours, else :meth:`unmask` refuses.
    Secrecy (semi-honest server): a party's two secrets are never both revealed, and a
    secret stays hidden from the server with fewer than ``t`` of the owner's neighbours.
    """

    degree: int
    threshold: int
    ring: Ring
    width: int

    def __post_init__(self) -> None:
        if self.threshold < 1 or self.threshold > self.degree:
            raise ValueError(f"threshold must be in 1..degree = {self.degree}, got "
                             f"{self.threshold}")

    # ------------------------------------------------- round 0: AdvertiseKeys (Fig. 4)
    def advertise(self, rows: int, rng: Any) -> tuple[np.ndarray, np.ndarray]:
        """Each party's masking key pair (X25519): secret keys and public keys, both
        ``(rows, 32)`` uint8. ``rng``: a Generator (a study) or ``'os'``."""
        secrets = random_bytes((rows, KEY_BYTES), rng)
        public = np.empty_like(secrets)
        for r in range(rows):
            key = X25519PrivateKey.from_private_bytes(secrets[r].tobytes())
            public[r] = np.frombuffer(key.public_key().public_bytes_raw(), dtype=np.uint8)
        return secrets, public

    def graph(self, members: np.ndarray, rng: Any) -> np.ndarray:
        """Server: the neighbour graph over the parties that advertised keys (Bell et al.
        2020 Sec. 3, the server samples the graph): ``(len(members), k)`` ids. The
        permutation comes from ``rng`` (a Generator, or ``'os'``)."""
        n = len(members)
        k = self.graph_degree(n)
        words = as_share_rng(rng).integers(0, 1 << 64, size=n, dtype=np.uint64)
        return harary_neighbours(np.asarray(members), k, np.argsort(words, kind="stable"))

    def graph_degree(self, members: int) -> int:
        """The degree over ``members`` parties: ``k``, or the complete graph's ``n - 1``
        when fewer than ``k + 1`` parties advertised keys; refused when that is below the
        threshold (no secret could be reconstructed)."""
        k = min(self.degree, members - 1)
        if k < self.threshold:
            raise ValueError(f"{members} parties advertised keys: each has at most {k} "
                             f"neighbours, fewer than the threshold t = {self.threshold}; "
                             "no release")
        return k

    # ---------------------------------------------------- round 1: ShareKeys (Fig. 4)
    def share_secrets(self, neighbours: np.ndarray, secret_keys: np.ndarray, rng: Any
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each party draws its self-mask seed ``b_u`` and Shamir-shares it and its
        masking secret key among its neighbours (holder point: the neighbour's id + 1).
        Returns ``seeds (rows, 32)``, ``key_shares`` and ``seed_shares`` ``(rows, k,
        16)``: row ``r``, slot ``j`` goes to ``neighbours[r, j]``."""
        rows = secret_keys.shape[0]
        seeds = random_bytes((rows, KEY_BYTES), rng)
        holders = np.asarray(neighbours, dtype=np.int64) + 1
        source = "os" if isinstance(rng, str) else rng
        key_shares = shamir.share(shamir.bytes_to_chunks(secret_keys), holders, self.threshold,
                                  source)
        seed_shares = shamir.share(shamir.bytes_to_chunks(seeds), holders, self.threshold,
                                   source)
        return seeds, key_shares, seed_shares

    # ------------------------------------------ round 2: MaskedInputCollection (Fig. 4)
    def mask(self, parties: np.ndarray, inputs: np.ndarray, secret_keys: np.ndarray,
             seeds: np.ndarray, neighbours: np.ndarray, neighbour_keys: np.ndarray,
             masked_with: np.ndarray) -> np.ndarray:
        """``y_u = x_u + PRG(b_u) + sum_v sign(u, v) PRG(s_uv)`` over the neighbours ``v``
        whose shares ``u`` received (``masked_with``; Bonawitz et al. Fig. 4 round 2: the
        parties of U2), ``sign = +1`` if ``v < u`` else ``-1``."""
        out = self.ring.reduce(np.asarray(inputs, dtype=np.uint64))
        for r, u in enumerate(np.asarray(parties, dtype=np.int64)):
            secret = X25519PrivateKey.from_private_bytes(secret_keys[r].tobytes())
            total = self.ring.add(out[r], prg_mask(seeds[r].tobytes(), self.width, self.ring))
            for j in np.flatnonzero(masked_with[r]):
                v = int(neighbours[r, j])
                pad = prg_mask(_pair_key(secret, neighbour_keys[r, j].tobytes()), self.width,
                               self.ring)
                total = self.ring.add(total, pad) if v < u else self.ring.sub(total, pad)
            out[r] = total
        return out

    # ------------------------------------------------------ round 3: Unmasking (Fig. 4)
    @staticmethod
    def unmasking_shares(held_key_shares: np.ndarray, held_seed_shares: np.ndarray,
                         held: np.ndarray, survived: np.ndarray) -> np.ndarray:
        """A survivor's shares for the server: for each neighbour whose shares it holds,
        the share of ``b_v`` if ``v`` survived, of ``v``'s masking key if ``v`` dropped —
        never both for one ``v`` (Bonawitz et al. Fig. 4 round 4). Slots without a held
        share are zero (``held`` says which travel)."""
        out = np.where(survived[..., None], held_seed_shares, held_key_shares)
        return np.where(held[..., None], out, 0).astype(np.uint64)

    def public_key_of(self, secret: np.ndarray) -> np.ndarray:
        key = X25519PrivateKey.from_private_bytes(np.asarray(secret, np.uint8).tobytes())
        return np.frombuffer(key.public_key().public_bytes_raw(), dtype=np.uint8)

    def unmask(self, masked_sum: np.ndarray, survivors: np.ndarray,
               masked_with: dict[int, np.ndarray], public_keys: dict[int, np.ndarray],
               shares: dict[int, list[tuple[int, np.ndarray]]]) -> np.ndarray:
        """Server: remove every mask from the survivors' masked sum (Bonawitz et al. Fig. 4
        round 4, the server's part).

        ``survivors``: the parties whose masked inputs were added; ``masked_with[u]``: the
        neighbours ``u`` masked with; ``public_keys[v]``: advertised keys; ``shares[v]``:
        ``(holder id, share)`` pairs received for ``v``'s secret (``b_v`` for a survivor,
        the masking key for a party that dropped). A secret with fewer than ``t`` shares,
        or a reconstructed key that does not match ``v``'s public key, is refused.
        """
        alive = {int(u) for u in survivors}
        total = self.ring.reduce(np.asarray(masked_sum, dtype=np.uint64))
        dropped = sorted({int(v) for u in alive for v in masked_with[u]} - alive)
        for v in sorted(alive):
            seed = self._reconstruct(v, shares.get(v, []), "self-mask seed b_u")
            total = self.ring.sub(total, prg_mask(seed.tobytes(), self.width, self.ring))
        for v in dropped:
            secret = self._reconstruct(v, shares.get(v, []), "masking key")
            if not np.array_equal(self.public_key_of(secret), public_keys[v]):
                raise ValueError(f"the shares of party {v}'s masking key do not reconstruct "
                                 "the public key it advertised: no release")
            key = X25519PrivateKey.from_private_bytes(secret.tobytes())
            for u in sorted(alive):
                if v in masked_with[u]:
                    pad = prg_mask(_pair_key(key, public_keys[u].tobytes()), self.width,
                                   self.ring)
                    # u added +pad if v < u, -pad otherwise: take it out again.
                    total = self.ring.sub(total, pad) if v < u else self.ring.add(total, pad)
        return total

    def _reconstruct(self, owner: int, pairs: list[tuple[int, np.ndarray]], what: str
                     ) -> np.ndarray:
        if len(pairs) < self.threshold:
            raise ValueError(f"only {len(pairs)} surviving neighbours sent shares of party "
                             f"{owner}'s {what}, fewer than the threshold t = "
                             f"{self.threshold}: too many parties dropped; no release")
        holders = np.array([h + 1 for h, _ in pairs], dtype=np.int64)
        values = np.stack([s for _, s in pairs])
        return shamir.chunks_to_bytes(shamir.reconstruct(values, holders, self.threshold))


def failure_probability(degree: int, threshold: int, dropout: float, parties: int) -> float:
    """An upper bound on the probability that some secret lacks ``t`` holders when each
    party drops independently with probability ``dropout``: a union over the ``n``
    parties of ``P[Bin(k, 1 - dropout) < t]`` (the binomial tail of Bell et al. 2020
    bound for their random graphs; a Harary graph relabelled at random gives each party
    ``k`` distinct neighbours)."""
    from scipy.stats import binom  # scipy is a dependency; imported where used

    return min(1.0, parties * float(binom.cdf(threshold - 1, degree, 1.0 - dropout)))


def default_parameters(parties: int, dropout: float, degree: int | None = None,
                       threshold: int | None = None, failure: float = 2.0**-20
                       ) -> tuple[int, int]:
    """``(k, t)`` for ``n`` parties tolerating a fraction ``dropout`` of dropouts.

    Given neither: the smallest even degree (or ``n - 1``) that (a) keeps a party from
    losing all its neighbours, ``n q^k <= failure`` with ``q = max(dropout, 1/3)`` (so
    at least ``k = O(log n)``, Bell et al. 2020: a survivor whose neighbours all
    dropped would be unmasked alone; the floor of 1/3 also covers neighbours colluding
    with the server), and (b) admits a threshold above ``k / 2`` that keeps
    :func:`failure_probability` below ``failure`` (t > k/2: the condition of Bonawitz et
    al. 2017 and Bell et al. 2020 under which the server cannot obtain both
    secrets of a party from the honest ones); then the largest such t. Given ``degree``
    only: the largest t with that failure bound (at least 1).
    """
    n = int(parties)
    if n < 3:
        raise ValueError(f"secure aggregation needs at least 3 parties, got {n}")
    lost = max(float(dropout), 1.0 / 3.0)
    smallest = math.ceil((math.log2(n) - math.log2(failure)) / -math.log2(lost))

    def best_threshold(k: int) -> int:
        t = k
        while t > 1 and failure_probability(k, t, dropout, n) > failure:
            t -= 1
        return t

    if degree is not None:
        k = int(degree)
        return k, (int(threshold) if threshold is not None else best_threshold(k))
    candidates = [*range(max(2, smallest + smallest % 2), n - 1, 2), n - 1]
    for k in candidates:
        t = best_threshold(k)
        if 2 * t > k and failure_probability(k, t, dropout, n) <= failure:
            return k, (int(threshold) if threshold is not None else t)
    k = n - 1
    return k, (int(threshold) if threshold is not None else best_threshold(k))


def connected(members: np.ndarray, neighbours: np.ndarray, alive: np.ndarray) -> bool:
    """Whether the survivors' induced subgraph is connected (the server checks it
    before unmasking: a survivor cut off from the others would have its own sum, and
    its noise share alone, revealed)."""
    ids = [int(v) for v in np.asarray(alive)]
    if len(ids) <= 1:
        return True
    keep = set(ids)
    adjacency = {int(u): [int(v) for v in row if int(v) in keep]
                 for u, row in zip(members, neighbours, strict=True) if int(u) in keep}
    seen, stack = {ids[0]}, [ids[0]]
    while stack:
        for v in adjacency.get(stack.pop(), []):
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return len(seen) == len(keep)


def tolerated_dropout(degree: int, threshold: int, parties: int,
                      failure: float = 2.0**-20) -> float:
    """The largest fraction of independent dropouts (to 0.01) whose failure bound stays
    below ``failure``."""
    best = 0.0
    for step in range(1, 100):
        p = step / 100
        if failure_probability(degree, threshold, p, parties) > failure:
            break
        best = p
    return best if math.isfinite(best) else 0.0
