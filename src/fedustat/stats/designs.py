"""Designs: which index tuples an incomplete U-statistic averages over.

A design is an (m, k) array of k-subsets of the n parties (rows sorted). Its maximal party
degree (how many tuples one party is in) multiplies the sensitivity of the sum of kernel
values, so every design reports it.

* :func:`permutation_pairs` -- P random permutations, consecutive elements paired
  (000 Sec. 5, "Subsampling").
* :func:`balanced_sample` -- BalancedSamp (002 App. F, Algorithm 1): degrees at most
  ``ceil(k m / n)``.
* :func:`uniform_sample` -- m distinct k-subsets uniformly without replacement
  (002 App. D.1.2, Claim D.1).
* :func:`bernoulli_sample` -- every k-subset kept independently with probability p.
* :func:`complete_design` -- all k-subsets.

Every constructor's distribution is invariant under relabelling the parties, so each
tuple is marginally uniform and the incomplete U-statistic is unbiased for the complete one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fedustat._validation import RandomLike, as_rng, check_positive_int, check_probability
from fedustat.stats.tuples import DEFAULT_MAX_TUPLES, combination_blocks

__all__ = [
    "Design",
    "balanced_sample",
    "bernoulli_sample",
    "complete_design",
    "permutation_pairs",
    "uniform_sample",
]


@dataclass(frozen=True, eq=False)
class Design:
    """Index tuples of an incomplete U-statistic.

    Parameters
    ----------
    tuples : ndarray of int64, shape (m, k)
        Each row is k distinct party indices in ``[0, n_parties)``.
    n_parties : int
    name : str
        How the design was drawn (e.g. ``"permutation_pairs(P=2)"``).
    """

    tuples: np.ndarray
    n_parties: int
    name: str = "custom"
    _degrees: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = check_positive_int(self.n_parties, "n_parties")
        idx = np.asarray(self.tuples)
        if idx.ndim != 2 or idx.shape[1] < 1:
            raise ValueError(f"tuples must have shape (m, k) with k >= 1, got {idx.shape}")
        if idx.size and not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"tuples must hold integer indices, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=True)  # own copy: it is made read-only below
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"tuples has indices outside [0, {n})")
        if idx.shape[1] > 1 and idx.size:
            srt = np.sort(idx, axis=1)
            if np.any(srt[:, 1:] == srt[:, :-1]):
                raise ValueError("tuples has a row with a repeated party")
        idx.setflags(write=False)
        object.__setattr__(self, "tuples", idx)
        object.__setattr__(self, "n_parties", n)
        object.__setattr__(self, "_degrees", np.bincount(idx.ravel(), minlength=n))

    @property
    def size(self) -> int:
        """Number of tuples m."""
        return int(self.tuples.shape[0])

    @property
    def k(self) -> int:
        """Tuple size (the kernel degree)."""
        return int(self.tuples.shape[1])

    @property
    def degrees(self) -> np.ndarray:
        """Number of tuples each party is in (length n_parties)."""
        return self._degrees.copy()

    @property
    def max_degree(self) -> int:
        """Largest party degree: the factor on the kernel sensitivity of the tuple sum."""
        return int(self._degrees.max()) if self.size else 0

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (f"Design({self.name!r}, size={self.size}, k={self.k}, "
                f"n_parties={self.n_parties}, max_degree={self.max_degree})")


def permutation_pairs(n: int, P: int, rng: RandomLike = None) -> Design:
    """P independent uniform permutations of the n parties, consecutive elements paired.

    000 Sec. 5, step 1: pairs ``(sigma_p(2i-1), sigma_p(2i))`` for ``p = 1..P``,
    ``i = 1..floor(n/2)``; ``P floor(n/2)`` pairs. Each party is in exactly P pairs when n is
    even; for odd n the last element of each permutation is left out, so one (random) party
    per permutation misses that round. The same pair may come from two permutations and
    then appears twice.
    """
    n = check_positive_int(n, "n", minimum=2)
    P = check_positive_int(P, "P")
    gen = as_rng(rng)
    perms = gen.permuted(np.tile(np.arange(n, dtype=np.int64), (P, 1)), axis=1)
    h = n // 2
    pairs = np.sort(perms[:, : 2 * h].reshape(P * h, 2), axis=1)
    return Design(pairs, n, f"permutation_pairs(P={P})")


def balanced_sample(
    m: int,
    k: int,
    n: int,
    rng: RandomLike = None,
    *,
    distinct: bool = True,
    max_restarts: int = 1000,
) -> Design:
    """BalancedSamp (002 App. F, Algorithm 1): m k-subsets with party degrees <= ceil(k m / n).

    Every party starts with capacity ``M = ceil(k m / n)`` (Alg. 1 lines 2-3). Each edge takes
    k distinct parties drawn one after another with probability proportional to their
    remaining capacity (line 8, successive sampling without replacement), and each chosen
    party loses one unit (lines 10-14). When fewer than k parties have capacity left before m
    edges exist, the procedure restarts from scratch (lines 5-6).

    Implementation: a flat array of "slots" holds each party once per unit of remaining
    capacity, so a uniformly drawn live slot gives a party with probability proportional to
    its capacity; a party already in the current edge is redrawn, which is exactly sampling
    proportionally to capacity among the remaining parties. A used slot is removed by
    moving the last live slot into its place. O(1) per draw; uniforms are drawn in bulk.

    Parameters
    ----------
    m : int
        Number of edges (tuples).
    k : int
        Edge size (kernel degree), ``k <= n``.
    n : int
        Number of parties.
    rng : seed or numpy.random.Generator, optional
    distinct : bool, default True
        Alg. 1 builds a *set* E of edges. With True an edge already in E is redrawn without
        consuming capacity (the literal reading, decrementing capacity for an edge that
        the set does not grow by, wastes capacity and forces restarts whenever
        ``k m / n`` is an integer); needs ``m <= C(n, k)``. With False, repeated edges are
        kept (a multiset), which is the algorithm without the set semantics.
    max_restarts : int
        Give up (RuntimeError) after this many restarts.
    """
    m = check_positive_int(m, "m")
    k = check_positive_int(k, "k")
    n = check_positive_int(n, "n")
    max_restarts = check_positive_int(max_restarts, "max_restarts", minimum=0)
    if k > n:
        raise ValueError(f"k={k} exceeds the number of parties n={n}")
    if distinct and m > math.comb(n, k):
        raise ValueError(f"m={m} exceeds the number of distinct {k}-subsets "
                         f"C({n}, {k}) = {math.comb(n, k)}; use distinct=False or a smaller m")
    gen = as_rng(rng)
    capacity = -(-k * m // n)  # ceil(k m / n), Alg. 1 line 2
    for _ in range(max_restarts + 1):
        edges = _balanced_attempt(m, k, n, capacity, gen, distinct)
        if edges is not None:
            return Design(np.sort(edges, axis=1), n, f"balanced_sample(m={m}, k={k})")
    raise RuntimeError(f"BalancedSamp restarted {max_restarts} times without completing "
                       f"m={m} edges of size k={k} over n={n} parties; m is too close to "
                       "C(n, k) for capacity-balanced sampling: use uniform_sample, or "
                       "raise max_restarts")


def _balanced_attempt(m: int, k: int, n: int, capacity: int, gen: np.random.Generator,
                      distinct: bool) -> np.ndarray | None:
    """One run of Alg. 1; None when it must restart (fewer than k parties with capacity)."""
    if k == 2:
        return _balanced_attempt_pairs(m, n, capacity, gen, distinct)
    return _balanced_attempt_any(m, k, n, capacity, gen, distinct)


def _balanced_attempt_any(m: int, k: int, n: int, capacity: int, gen: np.random.Generator,
                          distinct: bool) -> np.ndarray | None:
    """:func:`_balanced_attempt` for any k."""
    slots: list[int] = np.repeat(np.arange(n), capacity).tolist()
    cap = [capacity] * n
    live = n * capacity
    live_parties = n
    flat: list[int] = []
    seen: set[object] = set()
    batch = max(1024, 2 * k * m)
    uniforms: list[float] = gen.random(batch).tolist()
    pos = 0
    rejected = 0
    chosen: list[int] = []
    chosen_slots: list[int] = []
    while len(flat) < k * m:
        if live_parties < k:  # Alg. 1 lines 5-6
            return None
        chosen.clear()
        chosen_slots.clear()
        while len(chosen) < k:
            if pos == len(uniforms):
                uniforms = gen.random(batch).tolist()
                pos = 0
            s = int(uniforms[pos] * live)
            pos += 1
            v = slots[s]
            if v in chosen:
                continue
            chosen.append(v)
            chosen_slots.append(s)
        if distinct:
            key = _edge_key(chosen, n, k)
            if key in seen:
                rejected += 1
                if rejected % 32 == 0 and not _free_edge_exists(flat, cap, k, live_parties):
                    return None
                continue
            seen.add(key)
        rejected = 0
        for s in sorted(chosen_slots, reverse=True):
            live -= 1
            slots[s] = slots[live]
        for v in chosen:
            cap[v] -= 1
            if cap[v] == 0:
                live_parties -= 1
        flat.extend(chosen)
    return np.asarray(flat, dtype=np.int64).reshape(m, k)


def _balanced_attempt_pairs(m: int, n: int, capacity: int, gen: np.random.Generator,
                            distinct: bool) -> np.ndarray | None:
    """:func:`_balanced_attempt_any` for k = 2 (the degree of AUC, Kendall's tau, Gini,
    ...), written out for two draws per edge: the same draws from the same uniforms in
    the same order, so the same design for a seed, in about 0.8 of the time."""
    slots: list[int] = np.repeat(np.arange(n), capacity).tolist()
    cap = [capacity] * n
    live = n * capacity
    live_parties = n
    flat: list[int] = []
    seen: set[int] = set()
    batch = max(1024, 4 * m)
    uniforms: list[float] = gen.random(batch).tolist()
    pos = 0
    rejected = 0
    made = 0
    while made < m:
        if live_parties < 2:  # Alg. 1 lines 5-6
            return None
        if pos == len(uniforms):
            uniforms = gen.random(batch).tolist()
            pos = 0
        s0 = int(uniforms[pos] * live)
        pos += 1
        v0 = slots[s0]
        while True:     # the second member: redrawn until it is not the first
            if pos == len(uniforms):
                uniforms = gen.random(batch).tolist()
                pos = 0
            s1 = int(uniforms[pos] * live)
            pos += 1
            v1 = slots[s1]
            if v1 != v0:
                break
        if distinct:
            key = v0 * n + v1 if v0 < v1 else v1 * n + v0
            if key in seen:
                rejected += 1
                if rejected % 32 == 0 and not _free_edge_exists(flat, cap, 2, live_parties):
                    return None
                continue
            seen.add(key)
        rejected = 0
        # The used slots leave, the higher one first (as sorted(..., reverse=True)).
        hi, lo = (s0, s1) if s0 > s1 else (s1, s0)
        live -= 1
        slots[hi] = slots[live]
        live -= 1
        slots[lo] = slots[live]
        cap[v0] -= 1
        if cap[v0] == 0:
            live_parties -= 1
        cap[v1] -= 1
        if cap[v1] == 0:
            live_parties -= 1
        flat.append(v0)
        flat.append(v1)
        made += 1
    return np.asarray(flat, dtype=np.int64).reshape(m, 2)


def _edge_key(chosen: list[int], n: int, k: int) -> int | tuple[int, ...]:
    if k == 2:
        a, b = chosen
        return a * n + b if a < b else b * n + a
    return tuple(sorted(chosen))


def _free_edge_exists(flat: list[int], cap: list[int], k: int, live_parties: int) -> bool:
    """Whether some k-subset of the parties with capacity left is not yet an edge."""
    if not flat:
        return True
    edges = np.asarray(flat, dtype=np.int64).reshape(-1, k)
    alive = np.asarray(cap) > 0
    inside = int(np.count_nonzero(np.all(alive[edges], axis=1)))
    return inside < math.comb(live_parties, k)


def _comb_table(n: int, j: int, cap: int) -> np.ndarray:
    """``min(C(c, j), cap)`` for c = 0..n-1 (Pascal: C(c, j) = sum_{t<c} C(t, j-1))."""
    col = np.ones(n, dtype=np.int64)
    for _ in range(j):
        nxt = np.zeros(n, dtype=np.int64)
        np.cumsum(col[:-1], out=nxt[1:])
        col = np.minimum(nxt, cap)
    return col


def _unrank_colex(ranks: np.ndarray, n: int, k: int, total: int) -> np.ndarray:
    """k-subsets with the given colexicographic ranks (rows sorted ascending).

    Colex: the subset ``c_1 < ... < c_k`` has rank ``sum_j C(c_j, j)``; ``c_j`` is the largest
    c with ``C(c, j) <= remaining rank``, found by binary search in a column of Pascal's
    triangle (capped at C(n, k), which keeps it exact and within int64).
    """
    out = np.empty((ranks.size, k), dtype=np.int64)
    rest = ranks.astype(np.int64, copy=True)
    for j in range(k, 0, -1):
        table = _comb_table(n, j, total)
        c = np.searchsorted(table, rest, side="right") - 1
        out[:, j - 1] = c
        rest -= table[c]
    return out


def _random_subsets(count: int, k: int, n: int, gen: np.random.Generator) -> np.ndarray:
    """``count`` i.i.d. uniform k-subsets (sorted rows)."""
    if k * k > n:  # collisions are likely: take the head of random permutations
        step = max(1, 2**22 // n)  # bounds the (rows, n) matrix of uniforms
        return np.concatenate([
            np.sort(np.argsort(gen.random((min(step, count - s), n)), axis=1)[:, :k], axis=1)
            for s in range(0, count, step)])
    rows = gen.integers(0, n, size=(count, k))
    while True:
        rows.sort(axis=1)
        bad = np.flatnonzero(np.any(rows[:, 1:] == rows[:, :-1], axis=1))
        if bad.size == 0:
            return rows
        rows[bad] = gen.integers(0, n, size=(bad.size, k))


def _first_distinct(rows: np.ndarray, n: int) -> np.ndarray:
    """Indices of the first occurrence of each distinct row, in order of first occurrence."""
    k = rows.shape[1]
    if k * math.log2(max(n, 2)) < 62:
        key = np.zeros(rows.shape[0], dtype=np.int64)
        for j in range(k):
            key = key * n + rows[:, j]
        _, first = np.unique(key, return_index=True)
    else:
        _, first = np.unique(rows, axis=0, return_index=True)
    return np.sort(first)


def _check_subset_size(k: int, n: int) -> tuple[int, int]:
    """``(k, n)`` for designs of k-subsets of n parties: both >= 1 and ``k <= n``."""
    k = check_positive_int(k, "k")
    n = check_positive_int(n, "n")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of parties n={n}")
    return k, n


def uniform_sample(m: int, k: int, n: int, rng: RandomLike = None) -> Design:
    """m distinct k-subsets of the n parties, uniformly without replacement.

    Every m-set of k-subsets is equally likely (the sampling of 002 App. D.1.2, Claim D.1).
    When ``C(n, k)`` is small or m is a large fraction of it, m distinct ranks are drawn and
    unranked (colex); otherwise i.i.d. uniform k-subsets are drawn and the first m distinct
    ones kept, which is a uniform m-set too.
    """
    m = check_positive_int(m, "m", minimum=0)
    k, n = _check_subset_size(k, n)
    total = math.comb(n, k)
    if m > total:
        raise ValueError(f"m={m} exceeds the number of distinct {k}-subsets "
                         f"C({n}, {k}) = {total}")
    gen = as_rng(rng)
    name = f"uniform_sample(m={m}, k={k})"
    if m == 0:
        return Design(np.empty((0, k), dtype=np.int64), n, name)
    if total <= max(4 * m, 1 << 22):
        ranks = gen.choice(total, size=m, replace=False)
        return Design(_unrank_colex(ranks, n, k, total), n, name)
    rows = np.empty((0, k), dtype=np.int64)
    while True:
        need = m - rows.shape[0]
        fresh = _random_subsets(need + need // 3 + 16, k, n, gen)
        rows = np.concatenate([rows, fresh])
        keep = _first_distinct(rows, n)
        rows = rows[keep]
        if rows.shape[0] >= m:
            return Design(rows[:m], n, name)


def bernoulli_sample(p: float, k: int, n: int, rng: RandomLike = None) -> Design:
    """Each k-subset of the n parties kept independently with probability p.

    The number kept is drawn Binomial(C(n, k), p) and then that many distinct subsets
    uniformly (the same law, without enumerating the C(n, k) subsets). The design may be
    empty.
    """
    p = check_probability(p, "p")
    k, n = _check_subset_size(k, n)
    gen = as_rng(rng)
    total = math.comb(n, k)
    chunk = 2**62
    count = 0
    remaining = total
    while remaining > 0:  # numpy's binomial takes int64 trial counts
        trials = min(remaining, chunk)
        count += int(gen.binomial(trials, p))
        remaining -= trials
    design = uniform_sample(count, k, n, gen)
    return Design(design.tuples, n, f"bernoulli_sample(p={p:g}, k={k})")


def complete_design(n: int, k: int, *, max_size: int = DEFAULT_MAX_TUPLES) -> Design:
    """All C(n, k) k-subsets (lexicographic order), refused beyond ``max_size`` tuples."""
    n = check_positive_int(n, "n")
    k = check_positive_int(k, "k")
    max_size = check_positive_int(max_size, "max_size")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of parties n={n}")
    total = math.comb(n, k)
    if total > max_size:
        raise ValueError(f"the complete design has C({n}, {k}) = {total:.3g} tuples, more than "
                         f"max_size={max_size}; raise max_size or sample a design")
    blocks = list(combination_blocks(n, k, max(total, 1)))
    tuples = np.concatenate(blocks) if blocks else np.empty((0, k), dtype=np.int64)
    return Design(tuples, n, f"complete_design(k={k})")
