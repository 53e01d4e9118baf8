"""Exact empirical CDFs on a threshold grid, the grids, and the dyadic tree over the grid.

Sources: 003 (DP empirical CDFs), Def. 3 (the ECDF), Sec. 3.1 (threshold grids and the
dyadic intervals ``I[L]`` whose noise variables make the private ECDF), App. A.1
(Lemma 1: an interval of grid points as a signed sum of few dyadic intervals).

Everything here is exact and non-private; :mod:`fedustat.protocols.ecdf` adds the noise.

Indexing: thresholds ``tau_0 < ... < tau_{N-1}`` are 0-based here (the paper writes
``tau_1 .. tau_N``). The dyadic tree has levels ``l = 0 .. L`` with ``L = ceil(log2 N)``;
node ``(l, j)`` covers the grid points ``j 2^l .. min((j+1) 2^l, N) - 1``, i.e. the paper's
``eta_{j+1, l}``. Only nodes that cover at least one of the N points exist (the paper pads
the grid to ``2^L`` points with copies of the last threshold; nodes over the padding
change no released value and are dropped).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import as_float_array, check_positive_float, check_positive_int

sp = lazy_module("scipy.sparse")

__all__ = [
    "MAX_GRID_POINTS",
    "DyadicTree",
    "absolute_grid",
    "check_thresholds",
    "ecdf",
    "ecdf_counts",
    "log_grid",
    "tree_depth",
]

# A grid of 2^26 thresholds already needs ~1.5 GB for the tree noise and its matrix.
MAX_GRID_POINTS = 2**26


def check_thresholds(thresholds: Any, name: str = "thresholds") -> np.ndarray:
    """A finite, strictly increasing, one-dimensional float array of thresholds."""
    tau = as_float_array(thresholds, name)
    if tau.size > MAX_GRID_POINTS:
        raise ValueError(f"{name} has {tau.size} points, more than the supported "
                         f"{MAX_GRID_POINTS}; use a coarser grid")
    if tau.size > 1 and not np.all(np.diff(tau) > 0):
        raise ValueError(f"{name} must be strictly increasing (sorted, no duplicates)")
    return tau


def ecdf_counts(values: Any, thresholds: Any) -> np.ndarray:
    """Number of values ``<= tau_i`` for every threshold (003 Def. 3, times n).

    Sorting once and a binary search per threshold: O((n + N) log n).

    Parameters
    ----------
    values : array-like, shape (n,)
        The data (finite numbers).
    thresholds : array-like, shape (N,)
        Strictly increasing thresholds.

    Returns
    -------
    ndarray of int64, shape (N,)
    """
    x = as_float_array(values, "values")
    tau = check_thresholds(thresholds)
    return np.searchsorted(np.sort(x), tau, side="right").astype(np.int64)


def ecdf(values: Any, thresholds: Any) -> np.ndarray:
    """The exact ECDF ``F(tau_i) = |{j : x_j <= tau_i}| / n`` (003 Def. 3).

    Agrees with ``scipy.stats.ecdf(values).cdf.evaluate(thresholds)``.
    """
    x = as_float_array(values, "values")
    return ecdf_counts(x, thresholds) / x.size


def step_at(thresholds: np.ndarray, values: np.ndarray, t: Any) -> np.ndarray:
    """A curve given at sorted thresholds, read as a right-continuous step function at
    ``t``: the value at the largest threshold ``<= t``, 0 below the first (003 Def. 3)."""
    pos = np.searchsorted(thresholds, np.asarray(t, dtype=np.float64), side="right")
    return np.concatenate([[0.0], values])[pos]


def _grid_bounds(lower: Any, upper: Any) -> tuple[float, float]:
    try:
        lo, hi = float(lower), float(upper)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"lower and upper must be numbers, got {lower!r} and {upper!r}") from exc
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"lower and upper must be finite, got {lower!r} and {upper!r}")
    if not lo < hi:
        raise ValueError(f"lower must be < upper, got lower={lower!r}, upper={upper!r}")
    return lo, hi


def _integer_grid(k_lo: int, k_hi: int, name: str) -> np.ndarray:
    count = k_hi - k_lo + 1
    if count > MAX_GRID_POINTS:
        raise ValueError(f"the grid would have {count} points, more than the supported "
                         f"{MAX_GRID_POINTS}; increase {name}")
    return np.arange(k_lo, k_hi + 1, dtype=np.float64)


def absolute_grid(lower: float, upper: float, gamma: float) -> np.ndarray:
    """Thresholds on ``gamma Z`` covering the public range ``[lower, upper]`` (003 Sec. 3.1).

    The paper takes ``tau = {t in gamma Z : phi_min <= t <= phi_max}`` with
    ``tau_1 = phi_min`` and ``tau_N = phi_max``. The data's own minimum and maximum are
    private, so public bounds take their place: the grid runs from the first multiple of
    ``gamma`` that is ``>= lower`` to the first that is ``>= upper``. Every value in
    ``[lower, upper]`` is then ``<= tau_N`` (so ``F(tau_N) = 1``), and the next grid point
    below ``tau_1`` lies below ``lower``, where ``F = 0``. Any ``t`` in the range is within
    ``gamma`` of the next threshold: the absolute precision of the released curve.

    Parameters
    ----------
    lower, upper : float
        Public bounds of the data (lower < upper).
    gamma : float
        Grid spacing (> 0).
    """
    lo, hi = _grid_bounds(lower, upper)
    gamma = check_positive_float(gamma, "gamma")
    k = _integer_grid(math.ceil(lo / gamma), math.ceil(hi / gamma), "gamma")
    return k * gamma


def log_grid(lower: float, upper: float, nu: float) -> np.ndarray:
    """Thresholds ``e^{nu z}`` covering ``[lower, upper]``, for relative error (003 Sec. 3.1).

    The paper's ``tau = {e^{nu z} : z in Z, phi_min <= e^{nu z} <= phi_max}``: consecutive
    thresholds differ by the factor ``e^nu``, so a value is located to a relative precision
    of ``e^nu - 1``. As in :func:`absolute_grid`, the range is the public ``[lower,
    upper]`` and the grid extends to the first point ``>= upper``.

    Parameters
    ----------
    lower, upper : float
        Public bounds, ``0 < lower < upper``.
    nu : float
        Step of ``log(tau)`` (> 0).
    """
    lo, hi = _grid_bounds(lower, upper)
    if lo <= 0:
        raise ValueError(f"lower must be > 0 for a logarithmic grid, got {lower!r}")
    nu = check_positive_float(nu, "nu")
    z = _integer_grid(math.ceil(math.log(lo) / nu), math.ceil(math.log(hi) / nu), "nu")
    return np.exp(nu * z)


def tree_depth(n_points: int) -> int:
    """``L = ceil(log2 N)`` (003 Sec. 3.1); the tree has ``L + 1`` levels."""
    n_points = check_positive_int(n_points, "n_points")
    return (n_points - 1).bit_length()


@dataclass(frozen=True)
class DyadicTree:
    """The dyadic intervals over N grid points that carry the ECDF noise (003 Sec. 3.1).

    Nodes are stored level by level: level ``l`` holds ``ceil(N / 2^l)`` nodes, node
    ``(l, j)`` at flat index ``offsets[l] + j`` covers points ``[j 2^l, min((j+1) 2^l, N))``.
    The point ``i`` is covered by exactly one node per level, ``(l, i >> l)``.
    """

    n_points: int
    depth: int = field(init=False)
    level_sizes: np.ndarray = field(init=False, repr=False)
    offsets: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        n = check_positive_int(self.n_points, "n_points")
        if n > MAX_GRID_POINTS:
            raise ValueError(f"n_points={n} exceeds the supported {MAX_GRID_POINTS}")
        depth = tree_depth(n)
        sizes = np.array([-(-n // 2**lev) for lev in range(depth + 1)], dtype=np.int64)
        object.__setattr__(self, "n_points", n)
        object.__setattr__(self, "depth", depth)
        object.__setattr__(self, "level_sizes", sizes)
        object.__setattr__(self, "offsets", np.concatenate([[0], np.cumsum(sizes)]))

    @property
    def n_levels(self) -> int:
        """``L + 1``: the number of noise variables each point receives."""
        return self.depth + 1

    @property
    def n_nodes(self) -> int:
        return int(self.offsets[-1])

    def node_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(level, start, stop)`` of every node: it covers points ``start .. stop - 1``."""
        level = np.repeat(np.arange(self.n_levels), self.level_sizes)
        j = np.arange(self.n_nodes) - self.offsets[level]
        start = j << level
        stop = np.minimum((j + 1) << level, self.n_points)
        return level, start, stop

    def point_nodes(self, indices: np.ndarray | None = None) -> np.ndarray:
        """Flat node indices covering each point, shape ``(len(indices), L + 1)``."""
        idx = self._indices(indices)
        levels = np.arange(self.n_levels)
        return self.offsets[levels][None, :] + (idx[:, None] >> levels[None, :])

    def sum_at(self, node_values: np.ndarray, indices: np.ndarray | None = None) -> np.ndarray:
        """``sum_l node_values[(l, i >> l)]`` for each point i: the noise of Eq. (2)."""
        vals = np.asarray(node_values)
        if vals.shape != (self.n_nodes,):
            raise ValueError(f"node_values must have shape ({self.n_nodes},), got {vals.shape}")
        idx = self._indices(indices)
        out = np.zeros(idx.size, dtype=np.result_type(vals.dtype, np.float64))
        for lev in range(self.n_levels):  # L + 1 vectorized gathers
            out += vals[self.offsets[lev] + (idx >> lev)]
        return out

    def matrix(self, indices: np.ndarray | None = None) -> sp.csr_matrix:
        """Sparse 0/1 matrix ``A`` (points x nodes): the per-point noise is ``A @ eta``."""
        idx = self._indices(indices)
        cols = self.point_nodes(idx).ravel()
        rows = np.repeat(np.arange(idx.size), self.n_levels)
        data = np.ones(cols.size)
        return sp.csr_matrix((data, (rows, cols)), shape=(idx.size, self.n_nodes))

    def cover(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Signed dyadic nodes whose indicators sum to the indicator of ``[start, stop)``.

        The coupling witness of 003 Thm 1: a change of one record moves the count vector
        by ``±1`` on an interval of grid points, and the noise vector shifted by the
        returned signs on the returned nodes explains exactly that change.

        Construction (003 App. A.1, Lemma 1 and the proof of Thm 1, re-derived). Let
        ``x = start``, ``y = stop - 1`` and ``h`` the highest bit where they differ. If ``x``
        is a multiple of ``2^(h+1)``, ``[x, stop)`` is a prefix of the aligned block of
        ``2^(h+1)`` points starting at ``x``. Otherwise ``d = y`` with its low ``h`` bits
        cleared is the multiple of the largest power of two inside the interval, and
        ``[x, d)`` is a suffix, ``[d, stop)`` a prefix, of aligned blocks of ``2^h`` points.
        A prefix of length ``t`` is built from the non-adjacent form (NAF) of ``t``: digits
        ``±1`` at powers ``2^l``, no two neighbours non-zero, read from the top; each digit
        adds or removes the aligned block of ``2^l`` points at the current end (a suffix is
        the mirror image). A NAF of ``t <= 2^h`` has at most ``ceil((h + 1) / 2)`` non-zero
        digits. As ``h <= L - 1``, the split case uses at most ``2 ceil(L / 2) <= L + 1``
        nodes and the prefix case at most ``ceil((L + 1) / 2)``. Blocks that lie wholly
        beyond the last grid point are dropped (they change no released value); blocks that
        reach past it are the truncated nodes at the right end.

        Parameters
        ----------
        start, stop : int
            ``0 <= start < stop <= N``.

        Returns
        -------
        nodes, signs : ndarray of int64
            Flat node indices and their signs (+1 or -1).
        """
        start, stop = int(start), int(stop)
        if not 0 <= start < stop <= self.n_points:
            raise ValueError(f"need 0 <= start < stop <= {self.n_points}, got [{start}, {stop})")
        pieces: list[tuple[int, int, int]] = []  # (level, first point, sign)
        x, y = start, stop - 1
        if x == y:
            pieces.append((0, x, 1))
        else:
            h = (x ^ y).bit_length() - 1
            if x & ((1 << (h + 1)) - 1) == 0:
                _prefix(x, stop, pieces)
            else:
                d = (y >> h) << h
                _suffix(d, d - x, pieces)
                _prefix(d, stop, pieces)
        kept = [(lev, first, s) for lev, first, s in pieces if first < self.n_points]
        nodes = np.array([self.offsets[lev] + (first >> lev) for lev, first, _ in kept],
                         dtype=np.int64)
        signs = np.array([s for _, _, s in kept], dtype=np.int64)
        return nodes, signs

    def suffix_cover(self, start: int) -> tuple[np.ndarray, np.ndarray]:
        """Signed dyadic nodes whose indicators sum to the indicator of ``[start, N)``.

        The witness for continual observation (003 Thm 3): changing stream element
        ``start`` moves every later prefix sum. On the padded grid of ``2^L`` points,
        ``[start, 2^L)`` is a suffix of the root block, built from the NAF of its length
        (003 App. A.1, Lemma 1), so at most ``ceil((L + 1) / 2)`` nodes are used.
        """
        start = int(start)
        if not 0 <= start < self.n_points:
            raise ValueError(f"need 0 <= start < {self.n_points}, got {start}")
        pieces: list[tuple[int, int, int]] = []
        padded = 1 << self.depth
        _suffix(padded, padded - start, pieces)
        kept = [(lev, first, s) for lev, first, s in pieces if first < self.n_points]
        nodes = np.array([self.offsets[lev] + (first >> lev) for lev, first, _ in kept],
                         dtype=np.int64)
        signs = np.array([s for _, _, s in kept], dtype=np.int64)
        return nodes, signs

    def _indices(self, indices: np.ndarray | None) -> np.ndarray:
        if indices is None:
            return np.arange(self.n_points, dtype=np.int64)
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= self.n_points)):
            raise ValueError(f"indices must be a 1-D array of grid positions in "
                             f"[0, {self.n_points - 1}]")
        return idx


def _naf(t: int) -> list[int]:
    """Non-adjacent form of t >= 0: digits in {-1, 0, 1}, least significant first."""
    digits = []
    while t:
        if t & 1:
            digit = 2 - (t & 3)  # +1 if t = 1 mod 4, -1 if t = 3 mod 4
            t -= digit
        else:
            digit = 0
        digits.append(digit)
        t >>= 1
    return digits


def _prefix(base: int, stop: int, pieces: list[tuple[int, int, int]]) -> None:
    """Signed aligned blocks summing to the indicator of ``[base, stop)`` (base aligned)."""
    pos = base
    digits = _naf(stop - base)
    for lev in range(len(digits) - 1, -1, -1):
        if digits[lev] == 1:
            pieces.append((lev, pos, 1))
            pos += 1 << lev
        elif digits[lev] == -1:
            pos -= 1 << lev
            pieces.append((lev, pos, -1))


def _suffix(end: int, length: int, pieces: list[tuple[int, int, int]]) -> None:
    """Signed aligned blocks summing to the indicator of ``[end - length, end)``."""
    pos = end
    digits = _naf(length)
    for lev in range(len(digits) - 1, -1, -1):
        if digits[lev] == 1:
            pos -= 1 << lev
            pieces.append((lev, pos, 1))
        elif digits[lev] == -1:
            pieces.append((lev, pos, -1))
            pos += 1 << lev
