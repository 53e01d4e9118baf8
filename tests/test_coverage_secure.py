"""Monte Carlo coverage of the secure protocols' intervals (umpc, pairs-2pc, ECDF).

Each run draws fresh noise, shares, design and dealer material from its seed; the data
are fixed, so the interval must contain the exact statistic of the data (the complete
U-statistic, the empirical CDF) in at least ``level`` of the runs, up to the binomial
tolerance of :mod:`coverage_check`. Runs are few and small to keep this file fast; the
tolerance follows from the number of runs.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from coverage_check import assert_covers, measure_coverage
from fedustat.protocols.ecdf import FssECDF, PointwiseECDF
from fedustat.protocols.mpc.pairs_2pc import PairsTwoParty
from fedustat.protocols.mpc.umpc import UMPC
from fedustat.runtime.simulate import simulate
from fedustat.stats.ecdf import absolute_grid
from fedustat.stats.kernels import auc_kernel, gini_kernel

EPSILONS = (0.5, 4.0)
RUNS = 150


def _gini_data(n: int) -> tuple[object, np.ndarray, float]:
    kernel = gini_kernel((0.0, 1.0))
    data = kernel.pack(np.random.default_rng(3).uniform(0.0, 1.0, n))
    return kernel, data, float(kernel.statistic(kernel.exact(data), data))


def _auc_data(n: int) -> tuple[object, np.ndarray, float]:
    rng = np.random.default_rng(5)
    labels = np.arange(n) % 2
    scores = rng.uniform(0.0, 1.0, n) + 0.4 * labels
    kernel = auc_kernel()
    data = kernel.pack(np.clip(scores, 0.0, 1.0), labels)
    # exact() is the U-statistic over all pairs; the statistic maps it to the AUC.
    return kernel, data, float(kernel.statistic(kernel.exact(data), data))


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_umpc_interval_covers(epsilon: float, request: pytest.FixtureRequest) -> None:
    # Noise (an exact Pólya difference, 002 App. B) plus the design's sampling error.
    kernel, data, exact = _gini_data(40)
    protocol = UMPC(kernel, epsilon, precision=1e-3)
    result = measure_coverage(lambda s: simulate(protocol, data, rng=s), exact, RUNS)
    print(f"{request.node.name}: {result}")  # shown with pytest -s
    assert_covers(result)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_pairs_2pc_interval_covers(epsilon: float, request: pytest.FixtureRequest) -> None:
    # Noise of the computed pairs (exact) plus the permutation subsampling error.
    kernel, data, exact = _auc_data(80)
    protocol = PairsTwoParty(kernel, epsilon, P=2, bounds=(0.0, 1.0))
    result = measure_coverage(lambda s: simulate(protocol, data, rng=s), exact, 2 * RUNS)
    print(f"{request.node.name}: {result}")  # shown with pytest -s
    assert_covers(result)


GRID = absolute_grid(0.0, 12.0, 0.5)   # 25 thresholds: L + 1 = 6 levels


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize("make", [PointwiseECDF, FssECDF], ids=["secagg", "fss"])
def test_federated_ecdf_interval_covers(make: type, epsilon: float,
                                        request: pytest.FixtureRequest) -> None:
    # One point: the L + 1 covering nodes' distributed discrete Laplace noise, exact law.
    x = np.random.default_rng(0).poisson(3.0, 60).astype(np.float64)
    point = 7   # tau = 3.5
    exact = float(np.mean(x <= GRID[point]))
    protocol = make(GRID, [point], epsilon=epsilon, contributors=3)
    result = measure_coverage(lambda s: simulate(protocol, x, rng=s), exact, 2 * RUNS)
    print(f"{request.node.name}: {result}")  # shown with pytest -s
    assert_covers(result)


def test_federated_ecdf_point_law_is_the_sum_of_the_covering_nodes() -> None:
    x = np.random.default_rng(1).poisson(3.0, 50).astype(np.float64)
    est = simulate(PointwiseECDF(GRID, [4], epsilon=1.0, contributors=3), x, rng=2)
    curve = est.diagnostics["curve"]
    law = curve.point_error()
    # 6 nodes, each the sum of 3 contributors' Polya(1, t) differences: shape 18.
    assert law.total_shape == 18 and law.unit == pytest.approx(curve.resolution / 50)
    assert est.error.variance == pytest.approx(6 * curve.node_variance / 50**2, rel=1e-12)
    low, high = curve.confidence_band(0.9)
    half = law.half_width(0.9)
    assert high[0] - low[0] == pytest.approx(2 * half)
    assert math.isclose(est.confidence_interval(0.9)[1] - est.value, half, rel_tol=1e-9)
