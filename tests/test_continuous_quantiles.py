"""Continuous-output quantiles and the recursive split (protocols/ecdf/private_quantiles.py):
exact privacy of the split's budget on small inputs (its output law or density computed
exactly), the gap sampler against its law, exact answers at eps = inf, and the one-call
default that runs them."""

from __future__ import annotations

import math
from itertools import combinations_with_replacement, product

import numpy as np
import pytest

import fedustat
from fedustat.privacy import DeploymentNoise
from fedustat.privacy.noise import SimulationNoise
from fedustat.protocols.ecdf.private_quantiles import (
    default_method,
    dp_quantiles,
    permute_and_flip_distribution,
    prefers_split,
    split_budget_units,
    split_depth,
)


def _neighbours(data: tuple[float, ...], values: list[float]) -> list[tuple[float, ...]]:
    """Every data set with one record of ``data`` replaced by another value."""
    out = set()
    for i in range(len(data)):
        for v in values:
            if v != data[i]:
                out.add(tuple(sorted((*data[:i], v, *data[i + 1:]))))
    return sorted(out)


def _node_cost(local: np.ndarray, points: np.ndarray, rho: float) -> np.ndarray:
    """The cost of the mechanism's docstring, recomputed here from its definition."""
    below = np.searchsorted(local, points, side="left")
    upto = np.searchsorted(local, points, side="right")
    return np.maximum(below - rho, rho - upto)


def _split_law(data: tuple[float, ...], levels: list[float], eps: float,
               cands: np.ndarray) -> dict[tuple[float, ...], float]:
    """The exact output law of the split over candidates: every node's permute-and-flip
    law (by quadrature, exact for few candidates), multiplied along the recursion."""
    beta = eps / split_budget_units(levels) / 2.0
    x = np.sort(np.asarray(data, dtype=np.float64))

    def node(start: int, end: int, local: np.ndarray, a: float, b: float, q_a: float,
             q_b: float) -> list[tuple[dict[int, float], float]]:
        if start >= end:
            return [({}, 1.0)]
        mid = start + (end - start) // 2
        q = levels[mid]
        rho = local.size * (q - q_a) / (q_b - q_a)
        inside = cands[(cands >= a) & (cands <= b)]
        law = permute_and_flip_distribution(_node_cost(local, inside, rho), beta)
        out = []
        for v, p in zip(inside, law, strict=True):
            if p == 0:
                continue
            cut = int(np.searchsorted(local, v, side="right"))
            for left, pl in node(start, mid, local[:cut], a, float(v), q_a, q):
                for right, pr in node(mid + 1, end, local[cut:], float(v), b, q, q_b):
                    out.append(({**left, **right, mid: float(v)}, p * pl * pr))
        return out

    law: dict[tuple[float, ...], float] = {}
    for answers, p in node(0, len(levels), x, float(cands[0]), float(cands[-1]), 0.0, 1.0):
        key = tuple(answers[j] for j in range(len(levels)))
        law[key] = law.get(key, 0.0) + p
    return law


@pytest.mark.parametrize("levels", [[0.25, 0.5, 0.75], [0.2, 0.4, 0.6, 0.9]])
def test_split_over_candidates_is_eps_dp_exactly(levels: list[float]) -> None:
    # Every data set of 3 records on 4 values, every replace-one neighbour, every output:
    # the worst log-ratio of the exact laws stays within epsilon, and is not far below it
    # (the accounting is not vacuous).
    eps = 1.0
    values = [1.0, 2.0, 3.0, 4.0]
    cands = np.array(values)
    worst = 0.0
    for data in combinations_with_replacement(values, 3):
        p = _split_law(data, levels, eps, cands)
        for other in _neighbours(data, values):
            p2 = _split_law(other, levels, eps, cands)
            for key in set(p) | set(p2):
                a, b = p.get(key, 0.0), p2.get(key, 0.0)
                assert (a > 0) == (b > 0)
                if a > 0:
                    worst = max(worst, abs(math.log(a / b)))
    assert worst <= eps * (1 + 1e-6)
    assert worst > 0.3 * eps


def _continuous_log_density(data: tuple[float, ...], levels: list[float], eps: float,
                            out: tuple[float, ...], low: float, high: float,
                            split: bool) -> float:
    """Log density of the answers ``out`` (one per level, sorted levels) under the
    continuous mechanisms, from the definition: each node's density
    ``exp(-beta cost(t)) / sum_gaps length exp(-beta cost)``, multiplied over the nodes."""
    x = np.sort(np.asarray(data, dtype=np.float64))

    def node_log_density(local: np.ndarray, a: float, b: float, rho: float, beta: float,
                         t: float) -> float:
        edges = np.concatenate([[a], local, [b]])
        lengths = np.diff(edges)
        z = float(np.sum(lengths * np.exp(-beta * np.abs(np.arange(lengths.size) - rho))))
        cost = float(_node_cost(local, np.array([t]), rho)[0])
        return -beta * cost - math.log(z)

    if not split:
        beta = eps / len(levels) / 2.0
        return sum(node_log_density(x, low, high, q * x.size, beta, t)
                   for q, t in zip(levels, out, strict=True))
    beta = eps / split_budget_units(levels) / 2.0
    total = 0.0
    stack = [(0, len(levels), x, low, high, 0.0, 1.0)]
    while stack:
        start, end, local, a, b, q_a, q_b = stack.pop()
        if start >= end:
            continue
        mid = start + (end - start) // 2
        q = levels[mid]
        v = out[mid]
        total += node_log_density(local, a, b, local.size * (q - q_a) / (q_b - q_a), beta, v)
        cut = int(np.searchsorted(local, v, side="right"))
        stack.append((start, mid, local[:cut], a, v, q_a, q))
        stack.append((mid + 1, end, local[cut:], v, b, q, q_b))
    return total


def _worst_density_ratio(levels: list[float], eps: float, records: int,
                         units: float | None = None) -> float:
    """Worst |log density ratio| of the continuous split over every data set of
    ``records`` records on the values 1, 2, 3 (inside [0, 4]), every replace-one
    neighbour and every sorted output tuple probed in each region where the costs are
    constant (at and between the values). ``units`` overrides the budget's units."""
    values = [1.0, 2.0, 3.0]
    probes = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    # The density runs at beta = eps / (2 split_budget_units); for other units scale eps.
    scale = 1.0 if units is None else split_budget_units(levels) / units
    worst = 0.0
    for data in combinations_with_replacement(values, records):
        for other in _neighbours(data, values):
            if other < data:
                continue
            for out in product(probes, repeat=len(levels)):
                if list(out) != sorted(out):
                    continue
                d1 = _continuous_log_density(data, levels, eps * scale, out, 0.0, 4.0, True)
                d2 = _continuous_log_density(other, levels, eps * scale, out, 0.0, 4.0, True)
                worst = max(worst, abs(d1 - d2))
    return worst


@pytest.mark.parametrize(("levels", "eps", "records"), [([0.3, 0.5, 0.8], 10.0, 9),
                                                        ([0.2, 0.4, 0.6, 0.9], 1.0, 3)])
def test_continuous_split_density_ratio_is_within_epsilon(levels: list[float], eps: float,
                                                          records: int) -> None:
    # The density ratio of any output tuple between replace-one neighbours is at most
    # exp(eps), and not far below it.
    worst = _worst_density_ratio(levels, eps, records)
    assert 0.3 * eps < worst <= eps * (1 + 1e-9)


def test_one_share_per_depth_is_not_enough_under_replacement() -> None:
    # Kaplan et al.'s add/remove accounting (one share per depth: 2 for these 3 levels,
    # against split_budget_units = 1 + 2 * 0.6 = 2.2) loses more than eps on these data:
    # the extra units are needed.
    levels = [0.3, 0.5, 0.8]
    assert split_budget_units(levels) == pytest.approx(2.2)
    assert _worst_density_ratio(levels, 10.0, 9, units=2.0) > 10.0 * 1.02


def test_split_budget_units() -> None:
    assert [split_depth(m) for m in (1, 2, 3, 4, 7, 8, 16)] == [1, 2, 2, 3, 3, 4, 5]
    assert split_budget_units([0.5]) == 1.0
    # Root 0.75 (1); depth 2: 0.5 in (0, 0.75), p = 2/3, and 0.9 in (0.75, 1), p = 0.6:
    # max(1, 2/3 + 0.6); depth 3: 0.25 in (0, 0.5) alone: 1.
    assert split_budget_units([0.25, 0.5, 0.75, 0.9]) == pytest.approx(1 + (2 / 3 + 0.6) + 1)
    assert not prefers_split([0.5]) and not prefers_split([1 / 3, 2 / 3])
    assert prefers_split([0.25, 0.5, 0.75, 0.9])
    assert prefers_split([j / 17 for j in range(1, 17)])


def test_gap_sampler_follows_its_law() -> None:
    # Records with a tie; gap i is drawn with probability ~ length_i exp(-beta |i - q n|),
    # and never a zero-length gap; checked per gap within 4.5 binomial s.e. of the runs.
    x = np.array([1.0, 2.0, 2.0, 3.5, 7.0])
    eps, q, runs = 2.0, 0.5, 4000
    edges = np.concatenate([[0.0], x, [10.0]])
    lengths = np.diff(edges)
    w = lengths * np.exp(-eps / 2 * np.abs(np.arange(lengths.size) - q * x.size))
    law = w / w.sum()
    draws = np.array([dp_quantiles(x, q, epsilon=eps, bounds=(0, 10), method="continuous",
                                   rng=k).values for k in range(runs)])
    gap = np.searchsorted(x, draws, side="right")
    freq = np.bincount(gap, minlength=lengths.size) / runs
    tol = 4.5 * np.sqrt(law * (1 - law) / runs) + 1e-12
    assert np.all(np.abs(freq - law) <= tol)
    assert freq[2] == 0.0  # the gap between the tied records
    # Uniform inside the chosen gap: the position within gap 3 ([2, 3.5]).
    inside = (draws[gap == 3] - 2.0) / 1.5
    assert abs(inside.mean() - 0.5) < 4.5 * math.sqrt(1 / 12 / inside.size)


@pytest.mark.parametrize("method", ["continuous", "continuous-joint", "continuous-split",
                                    "split"])
def test_exact_at_infinite_epsilon_and_sorted(method: str) -> None:
    x = np.random.default_rng(3).lognormal(0, 1, 501)
    levels = [0.9, 0.1, 0.5, 0.25]
    if method != "split":
        exact = dp_quantiles(x, levels, epsilon=math.inf, bounds=(0, 20), method=method)
        assert np.array_equal(exact.values, np.quantile(np.clip(x, 0, 20), levels,
                                                        method="inverted_cdf"))
        res = dp_quantiles(x, levels, epsilon=1.0, bounds=(0, 20), method=method, rng=1)
    else:
        res = dp_quantiles(x, levels, epsilon=1.0, bounds=(0, 20), method=method, rng=1)
    order = np.argsort(levels)
    assert np.all(np.diff(res.values[order]) >= 0)
    assert np.all((res.values >= 0) & (res.values <= 20))
    assert res.method == method and res.privacy.epsilon == 1.0


def test_joint_and_split_beat_per_level_draws_at_sixteen_levels() -> None:
    # Monte Carlo, 40 seeded runs each: the split's mean level error is below the per-level
    # draws', and the fine-grid JointExp's (the default) below the split's, each by more
    # than 3 standard errors of the difference.
    x = np.random.default_rng(0).normal(50, 15, 2000)
    levels = [j / 17 for j in range(1, 17)]
    s = np.sort(x)

    def level_error(values: np.ndarray) -> float:
        f = np.searchsorted(s, values, side="right") / s.size
        return float(np.mean(np.abs(f - np.asarray(levels))))

    errs = {m: [level_error(dp_quantiles(x, levels, epsilon=1.0, bounds=(0, 100), method=m,
                                         rng=k).values) for k in range(40)]
            for m in ("continuous", "continuous-split", "continuous-joint")}
    for worse, better in (("continuous", "continuous-split"),
                          ("continuous-split", "continuous-joint")):
        diff = np.mean(errs[worse]) - np.mean(errs[better])
        se = math.sqrt(np.var(errs[worse], ddof=1) / 40 + np.var(errs[better], ddof=1) / 40)
        assert diff > 3 * se


def test_one_call_default_is_continuous_on_bounds() -> None:
    x = np.random.default_rng(0).uniform(0, 10, 1000)
    med = fedustat.median(x, epsilon=1.0, bounds=(0, 10), rng=1)
    assert med.method == "continuous"
    grid = np.linspace(0, 10, 1024)
    assert not np.isclose(grid, float(med)).any()  # not a grid point
    assert abs(float(med) - np.median(x)) < 0.2
    many = fedustat.quantile(x, [j / 17 for j in range(1, 17)], epsilon=1.0, bounds=(0, 10),
                             rng=1)
    assert many.method == "continuous-joint"
    assert not np.isin(np.asarray(many), grid).any()
    # The per-level draws carry a data-independent level bound; JointExp has none here:
    # NaN, never a made-up number.
    assert 0 < med.level_error(0.95) < 0.05
    assert "exact quantile of the data at a level" in str(med)
    assert math.isnan(many.level_error(0.95)) and np.isnan(many.std_error).all()
    # Given thresholds (the values the data take), the grid methods stay the default.
    on_grid = fedustat.median(np.round(x), epsilon=1.0, thresholds=np.arange(0.0, 11.0),
                              rng=1)
    assert on_grid.method in ("exponential", "curve")
    assert math.isfinite(on_grid.level_error(0.95))
    assert float(on_grid) in np.arange(0.0, 11.0)
    assert default_method(np.array([0.5]), 1000, 11, 1.0, continuous=False) == on_grid.method


def test_deployment_noise_and_bad_method() -> None:
    x = np.random.default_rng(0).uniform(0, 10, 200)
    for method in ("continuous", "continuous-joint", "continuous-split", "split"):
        res = dp_quantiles(x, [0.2, 0.5, 0.8], epsilon=1.0, bounds=(0, 10), method=method,
                           noise=DeploymentNoise())
        assert res.noise_kind == "deployment"
    with pytest.raises(ValueError, match=r"fedustat.quantile\(\): method must be one of "
                                         r"'auto', .*'continuous-split', got 'gaps'"):
        fedustat.quantile(x, 0.5, epsilon=1.0, bounds=(0, 10), method="gaps")


class _CountingNoise(SimulationNoise):
    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.sizes: list[int] = []

    def uniform(self, size):  # type: ignore[no-untyped-def]
        self.sizes.append(int(np.prod(size)))
        return super().uniform(size)


@pytest.mark.parametrize("method", ["continuous", "continuous-joint", "continuous-split"])
def test_gap_draws_do_not_depend_on_the_data(method: str) -> None:
    # Fixed work: two uniforms per answer (JointExp: one) whatever the records (ties, one
    # value, spread).
    seen = []
    for data in (np.full(50, 3.0), np.linspace(0, 10, 50), np.repeat([1.0, 9.0], 25)):
        noise = _CountingNoise(0)
        dp_quantiles(data, [0.2, 0.5, 0.9], epsilon=1.0, bounds=(0, 10), method=method,
                     noise=noise)
        seen.append(noise.sizes)
    assert seen[0] == seen[1] == seen[2] == ([1] if method == "continuous-joint" else [1, 1]) * 3


@pytest.mark.parametrize("kind", ["tied off the grid", "spread"])
def test_continuous_level_bound_holds(kind: str) -> None:
    # The data-independent bound of level_error: with probability >= 0.9 every answer t
    # has F(t^-) < q + delta and F(t) > q - delta (t^-: just below t, or the grid point
    # below for an answer on the grid). All records tied at a value between grid points
    # leave no gap near the target: the grid point above them (an atom) is the answer.
    # Failures over 200 seeded runs stay within the binomial tolerance of 10%.
    rng = np.random.default_rng(5)
    x = np.full(400, 0.33) if kind == "tied off the grid" else rng.beta(2, 5, 400)
    levels = [0.25, 0.5, 0.75]
    grid = np.linspace(0, 1, 11)
    s = np.sort(x)
    failures = 0
    for k in range(200):
        res = fedustat.quantile(x, levels, epsilon=1.0, bounds=(0, 1), grid_points=11,
                                method="continuous", rng=k)
        delta = res.level_error(0.9)
        for q, t in zip(levels, np.asarray(res), strict=True):
            on_grid = np.isclose(grid, t, rtol=0, atol=1e-12)
            if on_grid.any():
                j = int(np.flatnonzero(on_grid)[0])
                below = np.searchsorted(s, grid[j - 1], side="right") if j else 0
            else:
                below = np.searchsorted(s, t, side="left")
            upto = np.searchsorted(s, t, side="right")
            if not (below / s.size < q + delta and upto / s.size > q - delta):
                failures += 1
                break
    assert failures <= 200 * 0.1 + 3 * math.sqrt(200 * 0.1 * 0.9)
    if kind == "tied off the grid":  # the atom at 0.4 answers every level
        res = fedustat.quantile(x, levels, epsilon=1.0, bounds=(0, 1), grid_points=11,
                                method="continuous", rng=0)
        assert np.allclose(np.asarray(res), 0.4)
