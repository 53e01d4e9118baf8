"""The 95% intervals cover: Monte Carlo per protocol at a small and a large budget.

Each case runs a protocol on one fixed, small data set with a fresh seed per run and
counts the intervals that contain the exact statistic. ``coverage_check.assert_covers``
fails when the share falls more than 4 binomial standard deviations below 0.95 (and,
for exact intervals, above it). The cases are those of ``benchmarks/bench_coverage.py``,
which prints the same table with more runs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from coverage_check import assert_covers

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_coverage.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_coverage", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_coverage"] = module
    spec.loader.exec_module(module)
    return module


bench = _load()
EPSILONS = (0.5, 4.0)
# Runs from what the check must catch: an interval that misses twice as often as it
# should (true coverage 0.90). At R runs the check fails below 0.95 - 4 sqrt(0.0475 / R);
# a 0.90 interval stays under that with probability 0.99 when
# 0.05 >= (4 sqrt(0.95 * 0.05) + 2.33 sqrt(0.90 * 0.10)) / sqrt(R), i.e. R >= 987.
# (A correct interval still fails with probability below 4e-5 at any R: coverage_check.)
RUNS = 1000
# A run of the shuffle protocol splits, shuffles and sums every coordinate (10 ms).
SLOW = {"ghazi-shuffle": 600}

CASES = {
    "central-laplace": bench.central_laplace_case,
    "ldp-quantized": lambda: bench.quantized_case("ldp-quantized"),
    "ldp-ghazi": lambda: bench.quantized_case("ldp-ghazi"),
    "ghazi-shuffle": lambda: bench.quantized_case("ghazi-shuffle"),
    "ldp-tree": bench.tree_case,
    "fedauc-rr": lambda: bench.fedauc_case("fedauc-rr"),
    "fedauc-laplace-local": lambda: bench.fedauc_case("fedauc-laplace-local"),
    "fedauc-laplace-global": lambda: bench.fedauc_case("fedauc-laplace-global"),
    "fedauc-gaussian": lambda: bench.fedauc_case("fedauc-gaussian"),
    "fedauc-adaptive": lambda: bench.fedauc_case("fedauc-adaptive"),
    "fedauc-gaussian-one-sample-clients":
        lambda: bench.fedauc_case("fedauc-gaussian", n=400, n_clients=None),
    "ecdf-central-point": bench.ecdf_point_case,
    "ecdf-central-median": bench.ecdf_quantile_case,
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request: pytest.FixtureRequest) -> object:
    return CASES[request.param]()


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_interval_covers(case: object, epsilon: float) -> None:
    runs = SLOW.get(case.name, RUNS)  # type: ignore[attr-defined]
    result = bench.measure(case, epsilon, runs)
    assert_covers(result.coverage, exact_interval=case.exact_interval)  # type: ignore[attr-defined]


def test_every_registry_protocol_of_the_issue_has_a_case() -> None:
    names = {c().name.split(" ")[0] for c in CASES.values()}
    assert {"central-laplace", "ldp-quantized", "ldp-tree", "ldp-ghazi", "ghazi-shuffle",
            "fedauc-rr", "fedauc-laplace-local", "fedauc-laplace-global", "fedauc-gaussian",
            "fedauc-adaptive", "ecdf-central"} <= names


def test_the_table_has_one_row_per_result() -> None:
    result = bench.measure(bench.central_laplace_case(), 1.0, 20)
    text = bench.table([result, result])
    assert text.count("| central-laplace | 1 | 20 |") == 2
    assert text.splitlines()[0].startswith("| protocol | eps | runs | coverage")
