"""Private quantiles released directly from the data, on a public grid of candidates.

Three mechanisms answer ``m`` quantile levels at a total budget epsilon under the
replace-one-record adjacency (n public, as for :func:`~fedustat.protocols.ecdf.dp_ecdf`):

``"exponential"``
    One permute-and-flip selection per level at ``eps / m`` (basic composition).
    Permute-and-flip (McKenna and Sheldon 2020, "Permute-and-flip: a new mechanism for
    differentially private selection", NeurIPS, Alg. 1) visits the candidates in a random
    order and accepts candidate ``t`` with probability ``exp(eps (u(t) - u*) / (2 Delta))``;
    its expected utility is never below the exponential mechanism's (their Thm 2), and it
    is the report-noisy-max mechanism with exponential noise (Ding et al. 2021). The
    utility is minus the signed distance, in ranks, from the target rank to the block of
    ranks the candidate holds (:func:`rank_costs`), whose exact replace-one sensitivity is 1
    for every level (OpenDP's ``make_private_quantile`` bounds the sensitivity of its own
    score by ``d_in max(alpha, 1 - alpha)``, 1.8 at ``alpha = 0.9`` and ``d_in = 2``).
``"joint"``
    JointExp (Gillenwater, Joseph and Kulesza 2021, "Differentially private quantiles",
    ICML, Sec. 3) on the grid: one exponential mechanism over all non-decreasing tuples
    of candidates with the utility minus the sum over the ``m + 1`` gaps of
    ``|count in the gap - target count|``, sensitivity 2 whatever ``m``, sampled exactly by
    a forward pass and backward sampling in ``O(m N log N)``.
``"curve"``
    Inverting the default private CDF (003 Alg. 1, :func:`dp_quantile` on
    :func:`dp_ecdf`): every level from one eps-DP curve.

:func:`dp_quantiles` with ``method="auto"`` picks the one with the smallest predicted
error (:func:`predict_quantile_errors`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_float_array,
    check_bounds_pair,
    check_epsilon,
)
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, trusted_curator
from fedustat.privacy.noise import NoiseSource, resolve_noise
from fedustat.protocols.ecdf.quantiles import dp_quantile
from fedustat.protocols.ecdf.release import (
    ECDF_ADJACENCY,
    GridLimit,
    dp_ecdf,
    dp_ecdf_from_counts,
)
from fedustat.stats.ecdf import check_thresholds, ecdf_counts

__all__ = [
    "ALL_QUANTILE_METHODS",
    "CONTINUOUS_ATOM_WEIGHT",
    "CONTINUOUS_METHODS",
    "MAX_QUANTILE_WORK",
    "QUANTILE_GRID_LIMIT",
    "QUANTILE_METHODS",
    "PrivateQuantiles",
    "QuantileErrorPrediction",
    "continuous_joint_quantiles",
    "continuous_level_error",
    "continuous_quantiles",
    "curve_level_mse",
    "default_method",
    "dp_quantiles",
    "expected_errors",
    "joint_exponential",
    "joint_output_distribution",
    "model_counts",
    "permute_and_flip",
    "permute_and_flip_distribution",
    "predict_quantile_errors",
    "prefers_split",
    "rank_costs",
    "split_budget_units",
    "split_depth",
    "split_quantiles",
    "target_ranks",
]

QuantileMethod = Literal["auto", "exponential", "joint", "curve", "split", "continuous",
                         "continuous-joint", "continuous-split"]
QUANTILE_METHODS: tuple[str, ...] = ("exponential", "joint", "curve")
#: Grid points of ``bounds`` when no thresholds are given.
DEFAULT_GRID_POINTS = 1024
#: The largest grid of candidates: the predicted error of every method (which picks the
#: method and is reported) holds 2048 quadrature nodes per candidate in the worst case.
QUANTILE_GRID_LIMIT = GridLimit(
    2**14, "the quantile release",
    "the predicted error of each method, which picks the method and is reported, holds "
    "2048 quadrature nodes per grid point (48 KiB; 770 MiB and 7 s measured at 2^14 points)")
#: The largest ``max(m, MODEL_LEVELS) * N`` (levels times candidates): each level's
#: predicted error is a quadrature over the whole grid, about 38 ns per node and candidate
#: (18.6 s measured for 256 levels on 1024 points, at the smallest budgets).
MAX_QUANTILE_WORK = 2**18
# The joint mechanism places a candidate at C(t-1) + cnt(t)/2 in rank (the middle of its
# block of ranks) and aims at r - 1/2 (the middle of the target record's unit of rank).
_JOINT_LAMBDA = 0.5


# ------------------------------------------------------------------------ ranks and costs


def target_ranks(levels: np.ndarray, n: int) -> np.ndarray:
    """``r_j = ceil(q_j n)``: the q-quantile ``min{t : F(t) >= q}`` is the value of the
    record of rank ``r_j`` (the generalized inverse, numpy's ``inverted_cdf``). A
    relative slack of 1e-12 keeps ``q n`` that is an integer up to float rounding (e.g.
    0.1 * 30) at that integer."""
    r = np.ceil(levels * n - 1e-12 * n)
    return np.clip(r, 1, n).astype(np.int64)


def rank_costs(counts: np.ndarray, rank: int) -> np.ndarray:
    """Signed distance in ranks from ``rank`` to each candidate's block of ranks.

    Candidate ``t_k`` holds the ranks ``C(t_{k-1}) + 1 .. C(t_k)`` (``C`` the counts of
    records ``<= t``, ``C(t_{-1}) = 0``): it is the generalized-inverse answer exactly
    when its cost is at most 0. The cost is ``max(C(t_{k-1}) + 1 - r, r - C(t_k))``: the
    distance from rank ``r`` to the block outside it and, inside it, minus the depth of
    ``r`` in the block (how many ranks it is from the block's nearer end). Not clamping at
    0 rewards the answer by the depth of its block, so a wide block of tied records stands
    further above its neighbours; every other candidate's cost is unchanged. The cost is
    a maximum of two terms that each move by at most one when one record is replaced
    (every ``C`` moves by at most one), so the replace-one sensitivity stays 1.
    """
    c = np.asarray(counts, dtype=np.int64)
    prev = np.concatenate([[0], c[:-1]])
    return np.maximum(prev + 1 - rank, rank - c)


# ------------------------------------------------------------------------ permute-and-flip


def permute_and_flip(costs: np.ndarray, beta: float, noise: NoiseSource) -> int:
    """Index chosen by permute-and-flip with utility ``-costs`` and ``beta = eps/(2 Delta)``.

    McKenna and Sheldon 2020, Alg. 1: in a uniformly random order, accept candidate ``t``
    with probability ``p_t = exp(-beta (cost_t - min cost))``. Here every candidate gets
    an independent uniform arrival time and a coin, and the output is the earliest
    accepted candidate: the same law, with work that does not depend on the data (two
    uniforms per candidate, always; the best candidate accepts surely). Probabilities are
    floats: a ``p_t`` below ``2^-53`` is compared with a 53-bit uniform, so the realized
    ``p_t`` departs from the ideal one by at most ``2^-53`` (see docs/protocols/quantiles.md).
    """
    cost = np.asarray(costs, dtype=np.float64)
    accept = np.exp(-beta * (cost - cost.min())) if math.isfinite(beta) else (
        (cost == cost.min()).astype(np.float64))
    arrival = noise.uniform(cost.size)
    coins = noise.uniform(cost.size) < accept
    return int(np.argmin(np.where(coins, arrival, 2.0)))


def permute_and_flip_distribution(costs: np.ndarray, beta: float) -> np.ndarray:
    """The exact output law of :func:`permute_and_flip`, by quadrature.

    With independent uniform arrival times, candidate ``r`` is the output when it
    accepts and every candidate arriving before it rejects:
    ``P(r) = p_r int_0^1 prod_{j != r} (1 - p_j t) dt``. The integrand is a polynomial
    of degree ``N - 1`` in t; for the small inputs of the privacy check
    (``N <= 64``) Gauss-Legendre with ``N`` nodes integrates it exactly; larger inputs
    use composite Gauss-Legendre (256 panels of 8 nodes; a smooth positive integrand,
    the sum is renormalized). Candidates with ``p_j < 1e-18`` get 0 (together less than
    ``N 1e-18`` of the mass).
    """
    cost = np.asarray(costs, dtype=np.float64)
    p = np.exp(-beta * (cost - cost.min())) if math.isfinite(beta) else (
        (cost == cost.min()).astype(np.float64))
    live = np.flatnonzero(p > 1e-18)
    pl = p[live]
    if pl.size <= 64:
        nodes, weights = np.polynomial.legendre.leggauss(max(pl.size, 1))
        t, w = (nodes + 1) / 2, weights / 2
    else:
        nodes, weights = np.polynomial.legendre.leggauss(8)
        edges = np.linspace(0.0, 1.0, 257) ** 2  # finer near 0, where the mass is
        width = np.diff(edges)
        t = (edges[:-1, None] + width[:, None] * (nodes[None, :] + 1) / 2).ravel()
        w = (width[:, None] * weights[None, :] / 2).ravel()
    # log prod_{j != r} (1 - p_j t) = log prod_j - log(1 - p_r t); the 1 - p_r t = 0
    # case (p_r = 1 at t = 1) never occurs at interior nodes.
    factors = np.log1p(-np.outer(t, pl))
    total = factors.sum(axis=1)
    integrand = np.exp(total[:, None] - factors)
    out = np.zeros(cost.size)
    out[live] = pl * (w @ integrand)
    return out / out.sum()


# ------------------------------------------------------------------------ JointExp


def _positions(counts: np.ndarray) -> np.ndarray:
    """Rank position of each candidate: ``C(t_{k-1}) + lambda cnt(t_k)``, non-decreasing.

    Replacing one record moving from ``v`` to ``w`` shifts these by 0, ``-lambda``, -1,
    ``-(1 - lambda)`` (or the opposite signs) along the grid, a unimodal pattern of size at
    most one, which makes the gap utility's sensitivity 2 (:func:`joint_exponential`)."""
    c = np.asarray(counts, dtype=np.float64)
    prev = np.concatenate([[0.0], c[:-1]])
    return prev + _JOINT_LAMBDA * (c - prev)


def _joint_targets(levels: np.ndarray, n: int) -> np.ndarray:
    return target_ranks(levels, n) - 0.5


def _range_logsumexp(values: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``log sum exp(values[lo_i:hi_i])`` for every i, by a bottom-up segment tree
    (O(N) to build, O(log N) vectorized steps per query); -inf for an empty range.
    Range sums are not differences of prefix sums, which would cancel catastrophically
    in log space."""
    size = 1 << max(values.size - 1, 0).bit_length()
    tree = np.full(2 * size, -np.inf)
    tree[size:size + values.size] = values
    width = size // 2
    while width >= 1:
        tree[width:2 * width] = np.logaddexp(tree[2 * width:4 * width:2],
                                             tree[2 * width + 1:4 * width:2])
        width //= 2
    acc = np.full(lo.size, -np.inf)
    left, right = lo + size, hi + size
    while True:
        active = left < right
        if not active.any():
            return acc
        take = active & (left % 2 == 1)
        acc[take] = np.logaddexp(acc[take], tree[left[take]])
        left = left + take
        take = active & (right % 2 == 1)
        right = right - take
        acc[take] = np.logaddexp(acc[take], tree[right[take]])
        left, right = left // 2, right // 2


def _transition(log_prev: np.ndarray, pos: np.ndarray, gap: float, beta: float
                ) -> np.ndarray:
    """``log sum_{a <= b} exp(log_prev[a] - beta |pos[b] - pos[a] - gap|)`` for every b.

    ``pos`` is non-decreasing, so the ``a`` with ``pos[a] <= pos[b] - gap`` (the gap is
    too wide: cost ``pos[b] - gap - pos[a]``) form a prefix, handled by a running
    log-sum-exp of ``log_prev + beta pos``; the rest, ``a`` up to b, is a range of
    ``log_prev - beta pos``.
    """
    k = pos.size
    idx = np.arange(k)
    split = np.minimum(np.searchsorted(pos, pos - gap, side="right"), idx + 1)
    prefix = np.logaddexp.accumulate(log_prev + beta * pos)
    wide = np.where(split > 0, prefix[np.maximum(split - 1, 0)], -np.inf)
    wide = wide - beta * (pos - gap)
    narrow = _range_logsumexp(log_prev - beta * pos, split, idx + 1) + beta * (pos - gap)
    return np.logaddexp(wide, narrow)


def _forward(pos: np.ndarray, rho: np.ndarray, n: float, beta: float) -> list[np.ndarray]:
    """Forward messages: ``fwd[j][b]`` sums the weights of the first j + 1 gaps over the
    tuples ending with ``o_j = b``."""
    fwd = [-beta * np.abs(pos - rho[0])]
    for j in range(1, rho.size):
        fwd.append(_transition(fwd[-1], pos, float(rho[j] - rho[j - 1]), beta))
    return fwd


def _last_gap(pos: np.ndarray, rho: np.ndarray, n: float, beta: float) -> np.ndarray:
    return -beta * np.abs((n - pos) - (n - rho[-1]))


def _sample_index(log_weights: np.ndarray, noise: NoiseSource) -> int:
    """Inverse-CDF draw from ``exp(log_weights)`` with one uniform (fixed work)."""
    w = np.exp(log_weights - log_weights.max())
    cdf = np.cumsum(w)
    u = float(noise.uniform(1)[0]) * cdf[-1]
    return int(min(np.searchsorted(cdf, u, side="right"), w.size - 1))


def joint_exponential(counts: np.ndarray, n: int, levels: np.ndarray, epsilon: float,
                      noise: NoiseSource) -> np.ndarray:
    """JointExp (Gillenwater, Joseph and Kulesza 2021, Sec. 3) on the candidate grid.

    Samples ``o_1 <= ... <= o_m`` (grid indices) with probability proportional to
    ``exp(-(eps/4) sum_{j=1}^{m+1} |P(o_j) - P(o_{j-1}) - (rho_j - rho_{j-1})|)``, with
    ``P`` the rank positions (:func:`_positions`), ``rho_j = r_j - 1/2``,
    ``P(o_0) = rho_0 = 0`` and ``P(o_{m+1}) = rho_{m+1} = n``. Replacing one record changes
    the ``P(o_j)`` by a unimodal pattern of size at most 1, so the sum moves by at most 2
    (the paper's Lemma 3.2 for our adjacency); the exponential mechanism with sensitivity
    2 (McSherry and Talwar 2007) is eps-DP at ``exp(eps u / (2 * 2))``. The forward pass
    sums over monotone tuples with :func:`_transition`; the tuple is then drawn backwards,
    one level at a time from its exact conditional law.
    """
    pos = _positions(counts)
    rho = _joint_targets(levels, n)
    beta = epsilon / 4.0
    fwd = _forward(pos, rho, float(n), beta)
    out = np.empty(rho.size, dtype=np.int64)
    b = _sample_index(fwd[-1] + _last_gap(pos, rho, float(n), beta), noise)
    out[-1] = b
    for j in range(rho.size - 2, -1, -1):
        gap = float(rho[j + 1] - rho[j])
        log_w = fwd[j][:b + 1] - beta * np.abs(pos[b] - pos[:b + 1] - gap)
        b = _sample_index(log_w, noise)
        out[j] = b
    return out


def joint_output_distribution(counts: np.ndarray, n: int, levels: np.ndarray,
                              epsilon: float) -> tuple[list[tuple[int, ...]], np.ndarray]:
    """Every non-decreasing tuple of grid indices and its probability under
    :func:`joint_exponential`, by enumeration (small grids only: the exact privacy check)."""
    from itertools import combinations_with_replacement

    pos = _positions(counts)
    rho = np.concatenate([[0.0], _joint_targets(levels, n), [float(n)]])
    tuples = list(combinations_with_replacement(range(pos.size), rho.size - 2))
    log_w = np.empty(len(tuples))
    for i, tup in enumerate(tuples):
        p = np.concatenate([[0.0], pos[list(tup)], [float(n)]])
        log_w[i] = -(epsilon / 4.0) * np.abs(np.diff(p) - np.diff(rho)).sum()
    w = np.exp(log_w - log_w.max())
    return tuples, w / w.sum()


# ------------------------------------------------------------------------ prediction


@dataclass(frozen=True)
class QuantileErrorPrediction:
    """Predicted error of one method on the model data of :func:`model_counts` (about
    ``n / N`` records per grid point, Poisson), which is what it depends on besides
    (m, n, N, eps).

    ``steps``: expected ``|o_j - x_j|`` in grid steps, per level; ``level_mse``: expected
    square of the level error per level (the advisor's unit): the distance from ``q_j`` to
    the levels ``(F(t_{o-1}), F(t_o)]`` at which the released ``t_o`` is an exact grid
    quantile of the data, 0 for the exact answer (what ``fedustat compare`` measures);
    ``source`` names the computation.
    """

    method: str
    steps: np.ndarray
    level_mse: np.ndarray
    source: str

    @property
    def mean_steps(self) -> float:
        return float(np.mean(self.steps))


#: Seed of the public model data the predictions are computed on.
MODEL_SEED = 20210
_model_cache: dict[tuple[int, int, int], np.ndarray] = {}
#: Model data sets averaged over for m levels: ``ceil(MODEL_LEVELS / m)`` (errors vary
#: from one data set to the next mostly through the ties around each quantile).
MODEL_LEVELS = 8


def model_counts(n: int, grid_points: int, replicate: int = 0) -> np.ndarray:
    """The model data of the predictions: cumulative counts of ``Poisson(n / N)`` records
    at each of the N grid points, drawn once from the public seed :data:`MODEL_SEED`.

    Data spread over the grid with random ties, 003 Sec. 6.2's X_pois model; ties matter:
    JointExp's midpoint positions and the exact block costs behave differently on them,
    which evenly spread counts would hide. Nothing here depends on private data.
    """
    key = (int(n), int(grid_points), int(replicate))
    if key not in _model_cache:
        rng = np.random.default_rng([MODEL_SEED, *key])
        per_point = rng.poisson(n / grid_points, size=grid_points)
        per_point[per_point.size // 2] += int(per_point.sum() == 0)  # at least one record
        _model_cache[key] = np.cumsum(per_point).astype(np.int64)
    return _model_cache[key]


def _truth_index(counts: np.ndarray, n: int, levels: np.ndarray) -> np.ndarray:
    return np.minimum(np.searchsorted(counts, target_ranks(levels, n), side="left"),
                      counts.size - 1)


def _level_errors_of_points(counts: np.ndarray, n: int, level: float) -> np.ndarray:
    """The level error of answering ``level`` with each grid point ``t_k``: the distance
    from the level to ``(C(t_{k-1}) / n, C(t_k) / n]``, the levels at which ``t_k`` is the
    generalized-inverse quantile (``C(t_{-1}) = 0``)."""
    hi = np.asarray(counts, dtype=np.float64) / n
    lo = np.concatenate([[0.0], hi[:-1]])
    return np.maximum(0.0, np.maximum(lo - level, level - hi))


def _law_errors(law: np.ndarray, truth: int, counts: np.ndarray, n: int, level: float
                ) -> tuple[float, float]:
    """(expected |steps from the truth|, expected squared level error) under ``law``."""
    idx = np.arange(law.size)
    steps = float(law @ np.abs(idx - truth))
    return steps, float(law @ _level_errors_of_points(counts, n, level) ** 2)


#: Nodes of the normal integral in :func:`curve_level_mse` (standard deviations).
_NORMAL_NODES = np.linspace(-8.0, 8.0, 4001)
_NORMAL_WEIGHTS = np.exp(-0.5 * _NORMAL_NODES**2) / np.sum(np.exp(-0.5 * _NORMAL_NODES**2))


def _curve_level_mse_on(counts: np.ndarray, n: int, levels: np.ndarray, variance: Any
                        ) -> np.ndarray:
    """Expected squared level error per level of inverting a curve ``F + e`` on these
    counts, with ``e ~ N(0, variance)`` (one variance, or one per level) the same at the
    crossing point and the one below.

    003 Alg. 1 returns the first ``t_k`` with ``F(t_k) + e_k >= q``; with ``e_{k-1} =
    e_k = e`` that is the point whose cell ``(F(t_{k-1}), F(t_k)]`` holds ``q - e``, and
    its level error the distance from q to that cell: about ``|e|`` less what the cell
    absorbs (0 when ``q - e`` stays in q's own cell). The normal integral is a sum over
    :data:`_NORMAL_NODES`; ``q - e`` outside ``(0, 1]`` is answered by the first or last
    point, as Alg. 1 does.
    """
    var = np.broadcast_to(np.asarray(variance, dtype=np.float64), levels.shape)
    per_point = np.asarray(counts, dtype=np.float64) / n
    out = np.zeros(levels.size)
    for j, q in enumerate(levels):
        if var[j] <= 0.0:
            continue
        shifted = q - math.sqrt(var[j]) * _NORMAL_NODES
        k = np.minimum(np.searchsorted(per_point, shifted, side="left"), per_point.size - 1)
        err = _level_errors_of_points(counts, n, float(q))[k]
        out[j] = float(_NORMAL_WEIGHTS @ err**2)
    return out


def curve_level_mse(levels: Any, n: int, grid_points: int, variance: float) -> float:
    """Predicted mean square level error of quantiles read from a private curve.

    The curve's error at a point is modelled as ``N(0, variance)`` (``variance`` its point
    variance, e.g. 003 Thm 1's), the same at the crossing and the point below (003 Alg.
    1's answer is then the grid point whose cell holds ``q - e``), on the public model
    data of :func:`model_counts` averaged over ``ceil(MODEL_LEVELS / m)`` data sets. The
    level error is the distance from q to the levels at which the answer is an exact
    grid quantile (:class:`QuantileErrorPrediction`): ``|e|`` less what the data's grid
    cell at the quantile absorbs, so it is below ``variance`` when cells hold much mass.

    Parameters
    ----------
    levels:
        The levels q, in (0, 1].
    n, grid_points:
        Records and grid points (public).
    variance:
        The curve's point variance at the quantiles.

    Returns
    -------
    float
        The mean over levels of the expected squared level error.

    Examples
    --------
    >>> from fedustat.protocols.ecdf.private_quantiles import curve_level_mse
    >>> curve_level_mse([0.5], 1000, 64, 0.0)
    0.0
    >>> 0.0 < curve_level_mse([0.5], 1000, 64, 1e-4) < 1e-4
    True
    """
    q = np.atleast_1d(as_float_array(levels, "levels", ndim=(0, 1)))
    replicates = -(-MODEL_LEVELS // q.size)
    parts = []
    for i in range(replicates):
        counts = model_counts(int(n), int(grid_points), i)
        parts.append(_curve_level_mse_on(counts, int(counts[-1]), q, float(variance)))
    return float(np.mean(parts))


def predict_quantile_errors(levels: Any, n: int, grid_points: int, epsilon: float
                            ) -> dict[str, QuantileErrorPrediction]:
    """Predicted error of every method at (m levels, n records, N grid points, eps).

    The data are modelled by :func:`model_counts` (Poisson(n / N) records per grid point
    from a public seed, 003 Sec. 6.2's X_pois model), averaged over
    ``ceil(MODEL_LEVELS / m)`` model data sets; the error laws on them are exact:
    permute-and-flip's by :func:`permute_and_flip_distribution` per level at ``eps / m``,
    JointExp's marginals by forward-backward messages, and the curve's from its Thm 1
    point error (003): the inverse moves by ``|e| N`` grid steps for a CDF error ``e``,
    ``E|e|`` by the normal approximation, plus half a step for the grid.
    """
    q = tuple(float(v) for v in np.atleast_1d(as_float_array(levels, "levels", ndim=(0, 1))))
    check_quantile_size(len(q), int(grid_points), grid_name="grid_points")
    return dict(_predict(q, int(n), int(grid_points), check_epsilon(epsilon, "epsilon",
                                                                    allow_inf=True)))


@functools.lru_cache(maxsize=256)
def _predict(levels: tuple[float, ...], n: int, grid_points: int, eps: float
             ) -> dict[str, QuantileErrorPrediction]:
    """:func:`predict_quantile_errors` for validated, hashable arguments (cached: the
    benchmark asks again for every run)."""
    q = np.asarray(levels)
    m = q.size
    replicates = -(-MODEL_LEVELS // m)
    parts = [_predict_one(q, model_counts(n, grid_points, i), eps) for i in range(replicates)]
    out: dict[str, QuantileErrorPrediction] = {}
    for name in QUANTILE_METHODS:
        out[name] = QuantileErrorPrediction(
            name, np.mean([p[name][0] for p in parts], axis=0),
            np.mean([p[name][1] for p in parts], axis=0),
            parts[0][name][2] + f"; mean over {replicates} model data set(s)")
    return out


def _predict_one(q: np.ndarray, counts: np.ndarray, eps: float
                 ) -> dict[str, tuple[np.ndarray, np.ndarray, str]]:
    """(steps, rank MSE, source) of every method on one model data set."""
    grid_points = counts.size
    n = int(counts[-1])  # the model's own number of records
    ranks = target_ranks(q, n)
    truth = _truth_index(counts, n, q)
    m = q.size
    out: dict[str, tuple[np.ndarray, np.ndarray, str]] = {}

    steps, mse = np.empty(m), np.empty(m)
    for j in range(m):
        law = permute_and_flip_distribution(rank_costs(counts, int(ranks[j])), eps / m / 2.0)
        steps[j], mse[j] = _law_errors(law, int(truth[j]), counts, n, float(q[j]))
    out["exponential"] = (steps, mse, "permute-and-flip law (McKenna and Sheldon 2020) at "
                          "eps/m per level, sensitivity 1")

    if math.isinf(eps):
        out["joint"] = (np.zeros(m), np.zeros(m), "exact at eps = inf")
    else:
        pos = _positions(counts)
        rho = _joint_targets(np.sort(q), n)
        order = np.argsort(q, kind="stable")
        marg = _joint_marginals_exact(pos, rho, float(n), eps / 4.0)
        steps_j, mse_j = np.empty(m), np.empty(m)
        for j in range(m):
            steps_j[order[j]], mse_j[order[j]] = _law_errors(
                marg[j], int(truth[order[j]]), counts, n, float(q[order[j]]))
        out["joint"] = (steps_j, mse_j, "JointExp marginals (Gillenwater et al. 2021), "
                        "forward-backward")

    curve = dp_ecdf_from_counts(counts, n, np.arange(grid_points, dtype=np.float64),
                                epsilon=eps, rng=0)
    if curve.privacy.model is PrivacyModel.NONE:
        e_abs, variance = 0.0, np.zeros(m)
    else:
        e_abs = float(np.sqrt(2.0 / np.pi) * curve.std_error)  # normal approximation
        # The curve's own variance at each level's true quantile (it varies by point).
        variance = np.asarray(curve.point_variances)[truth]
    step_err = e_abs * grid_points + 0.5
    out["curve"] = (np.full(m, step_err), _curve_level_mse_on(counts, n, q, variance),
                    "003 Thm 1 point error of dp_ecdf, |e| N grid steps (normal "
                    "approximation); level error: the cell of q - e (curve_level_mse)")
    return out


def _joint_marginals_exact(pos: np.ndarray, rho: np.ndarray, n: float, beta: float
                           ) -> np.ndarray:
    """Marginals of JointExp: ``fwd[j] + bwd[j]`` with ``bwd[j][a]`` the log-weight of the
    gaps after level j given ``o_j = a`` (a backward recursion of the same transition on
    the mirrored grid)."""
    m = rho.size
    fwd = _forward(pos, rho, n, beta)
    # Mirrored grid: index k' = K-1-k, position n - P (non-decreasing), so "a >= b" on the
    # grid becomes "a' <= b'" and the gap P(b) - P(a) is (n - P)(a') - (n - P)(b').
    mpos = (n - pos)[::-1]
    bwd = [None] * m
    bwd[m - 1] = _last_gap(pos, rho, n, beta)
    for j in range(m - 2, -1, -1):
        gap = float(rho[j + 1] - rho[j])
        bwd[j] = _transition(bwd[j + 1][::-1], mpos, gap, beta)[::-1]
    out = np.empty((m, pos.size))
    for j in range(m):
        log_m = fwd[j] + bwd[j]
        w = np.exp(log_m - log_m.max())
        out[j] = w / w.sum()
    return out


def expected_errors(values: Any, levels: Any, *, epsilon: float, thresholds: Any,
                    method: Literal["exponential", "joint"]) -> np.ndarray:
    """Expected ``|released - true|`` per level, in grid steps, on these data: exact.

    From the mechanisms' exact laws on the data's own counts (no sampling):
    :func:`permute_and_flip_distribution` per level at ``eps / m`` (for ``m > 1`` an
    upper bound on the total: the release sorts its answers, which never increases it),
    or JointExp's marginals by forward-backward messages. The truth is the grid's
    generalized inverse (the last point if no grid point reaches q). For benchmarks and
    tests: it reads the data, so it is not a private release.
    """
    x = as_float_array(values, "values")
    q = np.atleast_1d(as_float_array(levels, "levels", ndim=(0, 1)))
    eps = check_epsilon(epsilon, "epsilon")
    tau = check_thresholds(thresholds)
    counts = ecdf_counts(x, tau)
    n = int(x.size)
    ranks = target_ranks(q, n)
    truth = np.minimum(np.searchsorted(counts, ranks, side="left"), tau.size - 1)
    idx = np.arange(tau.size)
    if method == "exponential":
        return np.array([permute_and_flip_distribution(rank_costs(counts, int(r)),
                                                       eps / q.size / 2.0)
                         @ np.abs(idx - t) for r, t in zip(ranks, truth, strict=True)])
    if method != "joint":
        raise ValueError(f"method must be 'exponential' or 'joint', got {method!r}")
    order = np.argsort(q, kind="stable")
    marg = _joint_marginals_exact(_positions(counts), _joint_targets(q[order], n), float(n),
                                  eps / 4.0)
    out = np.empty(q.size)
    for j, o in enumerate(order):
        out[o] = marg[j] @ np.abs(idx - truth[o])
    return out


# ------------------------------------------------------------------------ continuous output

#: Methods whose answers are not points of the user's grid: the exponential mechanism
#: over the gaps between the sorted records (``"continuous"``, one draw per level at
#: eps/m), JointExp on a fine grid of the bounds (``"continuous-joint"``) and the
#: recursive split over the gaps (``"continuous-split"``).
CONTINUOUS_METHODS: tuple[str, ...] = ("continuous", "continuous-joint", "continuous-split")
#: Points of the fine grid of ``"continuous-joint"`` (a function of the bounds only): the
#: discrete JointExp approaches its continuous form (Gillenwater et al. 2021, Sec. 3, over
#: the intervals between records) as the grid gets finer; 2^14 points keep one draw of 16
#: levels near 0.2 s.
FINE_GRID_POINTS = 2**14
#: Every method :func:`dp_quantiles` runs.
ALL_QUANTILE_METHODS: tuple[str, ...] = (*QUANTILE_METHODS, "split", *CONTINUOUS_METHODS)


def split_depth(levels: int) -> int:
    """Depth of the recursive split over ``levels`` distinct levels when every node
    answers its middle level (``len // 2``) and hands the rest to two children:
    ``ceil(log2(levels + 1))``."""
    depth = 0
    while levels > 0:
        depth += 1
        levels //= 2
    return depth


def _split_nodes(levels: np.ndarray) -> list[list[float]]:
    """Per depth, the rescaled level ``p = (q - q_a) / (q_b - q_a)`` of every node of the
    split over the sorted distinct ``levels`` (public: no data involved)."""
    out: list[list[float]] = []
    frontier = [(0, levels.size, 0.0, 1.0)]
    while frontier:
        out.append([])
        nxt = []
        for start, end, q_a, q_b in frontier:
            mid = start + (end - start) // 2
            q = float(levels[mid])
            out[-1].append((q - q_a) / (q_b - q_a))
            if start < mid:
                nxt.append((start, mid, q_a, q))
            if mid + 1 < end:
                nxt.append((mid + 1, end, q, q_b))
        frontier = nxt
    return out


def split_budget_units(levels: Any) -> float:
    """``U = sum over depths of U_d``: the split runs every node at ``beta = eps / (2 U)``.

    Kaplan, Schnapp and Stemmer 2022 ("Differentially private approximate quantiles",
    ICML, Alg. 1, Thm 3.3) pay one share per depth: a record sits in one node per depth.
    Under replace-one the removed and the added record may sit in two nodes of one depth,
    each of which then sees one record removed or added. A node aiming at
    ``rho = p n_s`` has a cost that moves by at most ``max(p, 1 - p)`` when one record is
    added or removed and by at most 1 when one is replaced (:func:`_local_cost`), and the
    exponential mechanism at ``beta`` loses at most ``2 beta`` times that (McSherry and
    Talwar 2007). So depth d loses at most ``2 beta U_d`` with
    ``U_d = max(1, s_1 + s_2)``, ``s_1 >= s_2`` the two largest ``max(p, 1 - p)`` among
    its nodes (``s_2 = 0`` for one node; the root: 1), and the whole release, by
    sequential composition over the depths, ``2 beta U = eps``."""
    uniq = np.unique(np.atleast_1d(np.asarray(levels, dtype=np.float64)))
    total = 0.0
    for depth in _split_nodes(uniq):
        s = [*sorted((max(p, 1.0 - p) for p in depth), reverse=True), 0.0]
        total += 1.0 if len(depth) == 1 else max(1.0, s[0] + s[1])
    return total


def prefers_split(levels: Any) -> bool:
    """True when the split gives every node a larger ``beta`` than eps/m gives each level
    alone (``split_budget_units < m``, m distinct levels)."""
    m = int(np.unique(np.atleast_1d(np.asarray(levels, dtype=np.float64))).size)
    return split_budget_units(levels) < m - 1e-9


def _local_cost(below: np.ndarray, upto: np.ndarray, rho: float) -> np.ndarray:
    """``max(#{x < t} - rho, rho - #{x <= t})``: how many ranks ``rho`` lies outside the
    block ``[#{x < t}, #{x <= t}]`` of an output ``t`` (negative inside: the depth).

    ``t`` is an exact q-quantile (``F(t^-) < q <= F(t)``) when ``rho = q n`` lies in that
    block. With ``rho = p n_s`` (a fraction of a node's own count) adding or removing one
    record moves both counts by 0 or 1 together and ``rho`` by ``p``, so each term, and
    their maximum, moves by at most ``max(p, 1 - p) <= 1``; a replacement moves each count
    by at most 1 and ``rho`` not at all: sensitivity 1 in both cases."""
    return np.maximum(below - rho, rho - upto)


#: Mass of the atom the continuous mechanism puts at each public grid point, in grid
#: steps. The atoms exist for the error bar: the grid point that is the exact grid
#: quantile always has cost 0, so the output's cost exceeds d with probability at most
#: ``(total mass / atom mass) exp(-beta d)``, a bound free of the data
#: (:func:`continuous_level_error`); so small that they are almost never the answer.
CONTINUOUS_ATOM_WEIGHT = 2.0**-20


def continuous_level_error(levels: int, n: int, grid_points: int, epsilon: float,
                           alpha: float) -> float:
    """``delta`` with ``P(some level's cost >= delta n) <= alpha`` for ``"continuous"``.

    The base measure is Lebesgue on ``[tau_0, tau_last]`` plus ``w h`` at each of the N
    grid points (``h`` the mean grid step, ``w`` :data:`CONTINUOUS_ATOM_WEIGHT`): total
    mass ``h ((N - 1) + w N)``. The grid point that is the exact grid quantile has cost 0
    (:func:`_gap_draw`), so the normalizer is at least ``w h`` and
    ``P(cost >= d) <= ((N - 1) / w + N) exp(-beta d)`` (the exponential mechanism's
    bound, Dwork and Roth 2014 Thm 3.11, for a general base measure), with
    ``beta = eps / (2 m)``; the union bound over the m levels gives
    ``d = ln(m ((N - 1)/w + N) / alpha) / beta`` and ``delta = d / n``. Cost below d means
    ``F(t^-) < q + delta`` and ``F(t) > q - delta`` (``t^-``: just below t, or the grid
    point below for an answer on the grid). Sorting keeps it."""
    beta = epsilon / levels / 2.0
    ratio = (grid_points - 1) / CONTINUOUS_ATOM_WEIGHT + grid_points
    return math.log(levels * ratio / alpha) / beta / n


def _gap_draw(local: np.ndarray, low: float, high: float, rho: float, beta: float,
              noise: NoiseSource, atoms: np.ndarray | None = None) -> float:
    """The exponential mechanism over ``[low, high]`` (Lebesgue base measure, plus an
    atom of mass ``CONTINUOUS_ATOM_WEIGHT`` grid steps at each of the public ``atoms``).

    Density ``exp(-beta cost(t))`` (McSherry and Talwar 2007; the continuous form used by
    Smith 2011 and diffprivlib's ``tools.quantile``): between consecutive sorted records
    (with ``low`` and ``high`` at the ends) the cost is constant, ``|i - rho|`` in the
    gap above ``i`` records, so gap ``i`` is chosen with probability proportional to
    ``length_i exp(-beta |i - rho|)`` (log space: no overflow, a zero-length gap between
    tied records has weight 0) and the answer is uniform inside it. An atom ``tau_k``
    costs ``max(0, C(tau_{k-1}) - rho, rho - C(tau_k))`` (its cell of ranks from the
    atom below, ``C(tau_{-1}) = 0``; clamped at 0 so that a wide cell never outweighs
    the records' own gaps): each moves by at most 1 when one record is replaced, so the
    cost of every output has sensitivity 1. Records are the node's own, sorted, within
    ``[low, high]``. Two uniforms, whatever the data."""
    edges = np.concatenate([[low], local, [high]])
    lengths = np.diff(edges)
    with np.errstate(divide="ignore"):
        log_w = np.log(lengths) - beta * np.abs(np.arange(lengths.size) - rho)
    if atoms is not None and atoms.size:
        step = (atoms[-1] - atoms[0]) / max(atoms.size - 1, 1) if atoms.size > 1 else 1.0
        upto = np.searchsorted(local, atoms, side="right").astype(np.float64)
        prev = np.concatenate([[0.0], upto[:-1]])
        atom_cost = np.maximum(0.0, np.maximum(prev - rho, rho - upto))
        log_w = np.concatenate([log_w, math.log(CONTINUOUS_ATOM_WEIGHT * step)
                                - beta * atom_cost])
    if not np.isfinite(log_w.max()):  # every gap empty: low == high, no atom
        noise.uniform(1)  # the same draws as any other node
        noise.uniform(1)
        return float(low)
    pick = _sample_index(log_w, noise)
    u = float(noise.uniform(1)[0])
    if pick >= lengths.size:
        return float(atoms[pick - lengths.size])  # type: ignore[index]
    return float(min(edges[pick] + u * lengths[pick], edges[pick + 1]))


def _candidate_draw(local: np.ndarray, candidates: np.ndarray, rho: float, beta: float,
                    noise: NoiseSource) -> int:
    """Permute-and-flip (:func:`permute_and_flip`) over public candidates, with the cost
    of :func:`_local_cost` on the node's own sorted records; the index chosen."""
    below = np.searchsorted(local, candidates, side="left")
    upto = np.searchsorted(local, candidates, side="right")
    return permute_and_flip(_local_cost(below, upto, rho), beta, noise)


def continuous_quantiles(sorted_values: np.ndarray, levels: np.ndarray,
                         grid: np.ndarray, epsilon: float, noise: NoiseSource) -> np.ndarray:
    """``"continuous"``: one exponential-mechanism draw over the gaps per level.

    Each level ``q`` gets eps/m (basic composition) and the cost ``|i - q n|`` of the gap
    above ``i`` records (sensitivity 1 under replace-one, n public): ``beta = eps/(2m)``;
    the output lies in ``[grid_0, grid_last]``, with the small atoms of
    :func:`_gap_draw` at the grid points (for :func:`continuous_level_error`). The
    answers of the sorted levels are sorted (post-processing). ``sorted_values`` lie in
    ``[grid_0, grid_last]``."""
    n = sorted_values.size
    beta = epsilon / levels.size / 2.0
    low, high = float(grid[0]), float(grid[-1])
    out = np.array([_gap_draw(sorted_values, low, high, float(q) * n, beta, noise, grid)
                    for q in levels])
    order = np.argsort(levels, kind="stable")
    out[order] = np.sort(out[order])
    return out


def continuous_joint_quantiles(sorted_values: np.ndarray, levels: np.ndarray,
                               low: float, high: float, epsilon: float,
                               noise: NoiseSource) -> np.ndarray:
    """``"continuous-joint"``: :func:`joint_exponential` (JointExp, sensitivity 2 under
    replace-one, eps for all levels together) on :data:`FINE_GRID_POINTS` even points of
    ``[low, high]``. On a fine grid a monotone tuple with k levels in one stretch between
    records has weight ``~ L^k / k!`` (the number of such tuples), as the continuous
    mechanism's volume of ordered k-tuples, so the answer is close to Gillenwater et al.'s
    continuous JointExp. ``m`` uniforms, whatever the data."""
    fine = np.linspace(low, high, FINE_GRID_POINTS)
    counts = ecdf_counts(sorted_values, fine)
    order = np.argsort(levels, kind="stable")
    out = np.empty(levels.size)
    out[order] = fine[joint_exponential(counts, sorted_values.size, levels[order], epsilon,
                                        noise)]
    return out


def split_quantiles(sorted_values: np.ndarray, levels: np.ndarray, epsilon: float,
                    noise: NoiseSource, *, low: float, high: float,
                    candidates: np.ndarray | None = None) -> np.ndarray:
    """The recursive split (Kaplan, Schnapp and Stemmer 2022, Alg. 1), replace-one.

    The distinct levels are sorted; the root answers the middle one on all records; its
    answer ``v`` splits the records (``x <= v`` left, ``x > v`` right) and the levels,
    and each side recurses on its own records in ``[a, v]`` / ``[v, b]``. A node whose
    levels lie between the answered levels ``q_a < q_b`` aims at the rank
    ``rho = n_s (q - q_a) / (q_b - q_a)`` among its ``n_s`` records (the paper's rescaled
    level), a cost of sensitivity 1 (:func:`_local_cost`). Every node runs at
    ``beta = eps / (2 split_budget_units(levels))``: over gaps (:func:`_gap_draw`,
    continuous output) or over the public ``candidates`` inside ``[a, b]``
    (:func:`_candidate_draw`). Answers are non-decreasing in the level by construction."""
    uniq, inverse = np.unique(levels, return_inverse=True)
    beta = epsilon / split_budget_units(uniq) / 2.0
    answers = np.empty(uniq.size)
    # Nodes: (first level index, end level index, records, a, b, q_a, q_b).
    stack = [(0, uniq.size, sorted_values, low, high, 0.0, 1.0)]
    while stack:
        start, end, local, a, b, q_a, q_b = stack.pop()
        if start >= end:
            continue
        mid = start + (end - start) // 2
        rho = local.size * (float(uniq[mid]) - q_a) / (q_b - q_a)
        if candidates is None:
            v = _gap_draw(local, a, b, rho, beta, noise)
        else:
            inside = candidates[(candidates >= a) & (candidates <= b)]
            v = float(inside[_candidate_draw(local, inside, rho, beta, noise)])
        answers[mid] = v
        cut = int(np.searchsorted(local, v, side="right"))
        stack.append((start, mid, local[:cut], a, v, q_a, float(uniq[mid])))
        stack.append((mid + 1, end, local[cut:], v, b, float(uniq[mid]), q_b))
    return answers[inverse]


# ------------------------------------------------------------------------ the release


@dataclass(frozen=True)
class PrivateQuantiles:
    """Result of :func:`dp_quantiles`: the released quantiles, one per requested level.

    ``values[j]`` is the private q_j-quantile (a grid point, except for the continuous
    methods); ``method`` the mechanism that ran (``"auto"`` resolved);
    ``predicted_error`` the mean over levels of the expected ``|error|`` in grid steps
    that the choice was made by (NaN for split and continuous), and ``predictions``
    every method's (:func:`predict_quantile_errors`); ``privacy`` the guarantee.
    """

    released_fields: ClassVar[tuple[str, ...]] = ("values",)

    levels: np.ndarray
    values: np.ndarray
    method: str
    predicted_error: float
    privacy: PrivacyGuarantee
    predictions: dict[str, QuantileErrorPrediction] = field(repr=False)
    noise_kind: str = "simulation"


def check_quantile_size(levels: int, grid_points: int, *, levels_name: str = "levels",
                        grid_name: str = "thresholds") -> None:
    """Refuse a grid above :data:`QUANTILE_GRID_LIMIT`, or more levels than
    :data:`MAX_QUANTILE_WORK` allows on it, before anything is computed."""
    QUANTILE_GRID_LIMIT.check(grid_points, grid_name)
    work = max(levels, MODEL_LEVELS) * grid_points
    if work > MAX_QUANTILE_WORK:
        most = max(1, MAX_QUANTILE_WORK // grid_points)
        raise ValueError(
            f"{levels_name}: {levels} levels on a grid of {grid_points} points are more than "
            f"one release answers: max(levels, {MODEL_LEVELS}) x grid points must be at most "
            f"{MAX_QUANTILE_WORK} (2^18), because each level's predicted error is a "
            "quadrature over the whole grid (18.6 s measured for 256 levels on 1024 points); "
            f"ask for at most {most} levels on this grid, or use a coarser grid")


def _grid(thresholds: Any, bounds: Any, grid_points: int) -> np.ndarray:
    if (thresholds is None) == (bounds is None):
        raise ValueError("pass exactly one of thresholds (the public candidate grid) or "
                         "bounds=(low, high) (public bounds for an even grid)")
    if thresholds is not None:
        tau = check_thresholds(thresholds)
        if tau.size < 1:
            raise ValueError("thresholds must hold at least one candidate")
        return tau
    low, high = check_bounds_pair(bounds, "bounds")
    return np.linspace(low, high, grid_points)


def dp_quantiles(values: Any, levels: Any, *, epsilon: float, thresholds: Any = None,
                 bounds: tuple[float, float] | None = None,
                 grid_points: int = DEFAULT_GRID_POINTS, method: QuantileMethod = "auto",
                 rng: RandomLike = None, noise: NoiseSource | None = None
                 ) -> PrivateQuantiles:
    """eps-DP quantiles of ``values`` at ``levels``, chosen among grid candidates.

    Parameters
    ----------
    values:
        The data, one number per record (n is public: replace-one adjacency).
    levels:
        One level or a sequence of levels in (0, 1].
    epsilon:
        Total budget for all levels (> 0; ``math.inf`` gives the exact grid quantiles).
    thresholds, bounds:
        The public candidates: a strictly increasing grid, or ``(low, high)`` for
        ``grid_points`` evenly spaced points. Never derive them from the data.
    method:
        ``"exponential"`` (permute-and-flip per level at eps/m), ``"joint"`` (JointExp),
        ``"curve"`` (invert :func:`dp_ecdf`) or ``"auto"``: the smallest predicted error
        (:func:`predict_quantile_errors`; ties go to the earlier of that list), all on
        the grid; ``"split"`` (the recursive split over the grid,
        :func:`split_quantiles`). Answers anywhere in ``[grid_0, grid_last]``:
        ``"continuous"`` (exponential mechanism over the gaps between records, per level,
        :func:`continuous_quantiles`), ``"continuous-joint"`` (JointExp on a fine grid,
        :func:`continuous_joint_quantiles`) and ``"continuous-split"``
        (:func:`split_quantiles` over the gaps). :func:`fedustat.quantile`'s default is
        :func:`default_method`.
    rng, noise:
        Seed / Generator for simulation, or a :class:`NoiseSource` (``DeploymentNoise()``
        for real people: CSPRNG uniforms with fixed work).

    Returns
    -------
    PrivateQuantiles
        ``values`` are grid points for the grid methods; with ``epsilon = inf`` exactly
        the grid's generalized inverse ``min{t : F(t) >= q}`` (the last point if none),
        or for the continuous methods the data's own (numpy's ``inverted_cdf``, records
        clipped into the grid's range). ``predicted_error`` is NaN for the methods
        without a prediction (split and continuous).

    Examples
    --------
    >>> x = np.random.default_rng(0).uniform(size=1000)
    >>> fedustat.protocols.ecdf.dp_quantiles(x, [0.25, 0.5, 0.75], epsilon=math.inf, bounds=(0, 1),
    ...                       grid_points=101).values
    array([0.28, 0.53, 0.77])
    >>> fedustat.protocols.ecdf.dp_quantiles(x, [0.5], epsilon=1.0, bounds=(0, 1), grid_points=101,
    ...                       rng=0).values
    array([0.54])
    """
    x = as_float_array(values, "values")
    if x.size == 0:
        raise ValueError("values is empty: quantiles need at least one record")
    q = as_float_array(levels, "levels", ndim=(0, 1))
    scalar = q.ndim == 0
    q = np.atleast_1d(q)
    if q.size == 0:
        raise ValueError("levels is empty: ask for at least one quantile level")
    if q.min() <= 0.0 or q.max() > 1.0:
        raise ValueError("levels must be in (0, 1]: the q-quantile min{t : F(t) >= q} is "
                         "defined for levels above 0 and up to 1")
    eps = check_epsilon(epsilon, "epsilon", allow_inf=True)
    if method not in ("auto", *ALL_QUANTILE_METHODS):
        raise ValueError(f"method must be 'auto' or one of {ALL_QUANTILE_METHODS}, got "
                         f"{method!r}")
    if isinstance(grid_points, bool) or not isinstance(grid_points, int) or grid_points < 2:
        raise ValueError(f"grid_points must be an integer >= 2, got {grid_points!r}")
    if thresholds is None:  # before the grid is built
        check_quantile_size(q.size, grid_points, grid_name="grid_points")
    tau = _grid(thresholds, bounds, grid_points)
    check_quantile_size(q.size, tau.size)
    n = int(x.size)
    preds = predict_quantile_errors(q, n, tau.size, eps)
    chosen = method
    if method == "auto":  # the grid methods; fedustat.quantile's default: default_method
        chosen = min(QUANTILE_METHODS, key=lambda name: preds[name].mean_steps)
    predicted = preds[chosen].mean_steps if chosen in preds else math.nan
    counts = ecdf_counts(x, tau)
    if math.isinf(eps):  # an exact release: no noise, no guarantee
        source, guarantee, kind = None, PrivacyGuarantee.none(), "none"
    else:
        source = resolve_noise(rng, noise)
        guarantee, kind = (PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, ECDF_ADJACENCY,
                                            assumptions=(trusted_curator(),)), source.kind)

    if chosen in CONTINUOUS_METHODS:
        # Outputs in [tau_0, tau_last]; a record outside moves to the nearer end (a function
        # of that record alone: the adjacency is unchanged).
        inside = np.sort(np.clip(x, tau[0], tau[-1]))
        if source is None:
            out = np.quantile(inside, q, method="inverted_cdf").astype(np.float64)
        elif chosen == "continuous":
            out = continuous_quantiles(inside, q, tau, eps, source)
        elif chosen == "continuous-joint":
            out = continuous_joint_quantiles(inside, q, float(tau[0]), float(tau[-1]),
                                             eps, source)
        else:
            out = split_quantiles(inside, q, eps, source, low=float(tau[0]),
                                  high=float(tau[-1]))
    elif source is None:
        ranks = target_ranks(q, n)
        idx = np.minimum(np.searchsorted(counts, ranks, side="left"), tau.size - 1)
        out = tau[idx]
    elif chosen == "exponential":
        ranks = target_ranks(q, n)
        idx = np.array([permute_and_flip(rank_costs(counts, int(r)), eps / q.size / 2.0,
                                         source) for r in ranks])
        # Sorting the answers of sorted levels never increases the total |error|
        # against sorted truths; post-processing.
        order = np.argsort(q, kind="stable")
        idx[order] = np.sort(idx[order])
        out = tau[idx]
    elif chosen == "split":
        out = split_quantiles(np.sort(np.clip(x, tau[0], tau[-1])), q, eps, source,
                              low=float(tau[0]), high=float(tau[-1]), candidates=tau)
    elif chosen == "joint":
        order = np.argsort(q, kind="stable")
        idx = np.empty(q.size, dtype=np.int64)
        idx[order] = joint_exponential(counts, n, q[order], eps, source)
        out = tau[idx]
    else:
        curve = dp_ecdf(x, tau, epsilon=eps, noise=source)
        out = np.asarray(dp_quantile(curve, q).upper, dtype=np.float64)
    result_values = out[0] if scalar else out
    return PrivateQuantiles(q[0] if scalar else q, result_values, chosen, predicted,
                            guarantee, preds, kind)


def default_method(levels: np.ndarray, n: int, grid_points: int, epsilon: float, *,
                   continuous: bool) -> str:
    """The method ``"auto"`` runs; a function of public quantities only.

    ``continuous`` (the candidates are ``bounds``, not a given set of values): one level
    by the exponential mechanism over the gaps between the records (``"continuous"``,
    which carries a data-independent level bound), several by JointExp on a fine grid of
    the bounds (``"continuous-joint"``: measured ahead of the per-level draws and of the
    recursive split at every m, eps and data set of the peer benchmark). Given
    ``thresholds`` (the values the data take): ``"exponential"`` or ``"curve"``, the one
    with the smaller predicted error (:func:`predict_quantile_errors`); both carry a
    data-independent level bound. JointExp is not a default on a lattice: tied records
    put several levels on one value, which its gap utility charges as if they were wrong.
    """
    if continuous:
        return "continuous" if np.unique(levels).size == 1 else "continuous-joint"
    preds = predict_quantile_errors(levels, n, grid_points, epsilon)
    return min(("exponential", "curve"), key=lambda name: preds[name].mean_steps)
