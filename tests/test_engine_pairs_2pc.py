"""pairs-2pc on the engine (``server_steps="gathered"``).

Its party states hold each pair's 2PC in flight. On the engine a state is copied before
each step and moves between workers, so the members' running programs are rebuilt from
the openings received so far (``_MemberRun.opened``). A run on a two-worker local
cluster must release exactly what the in-process simulator releases for the same seed
and the same batches (``simulate(..., batch_size=[partition sizes])``): value, standard
error, error law, diagnostics and cost, bit for bit (the server's sums are integers on
the ring).
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
import cloudpickle  # noqa: E402  (comes with distributed)

from fedustat.protocols.registry import make  # noqa: E402
from fedustat.runtime.engine import (  # noqa: E402
    DaskEngine,
    EngineError,
    generated_partitions,
    load_all,
)
from fedustat.runtime.simulate import simulate  # noqa: E402
from fedustat.stats.kernels import (  # noqa: E402
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
)

# Workers import fedustat but not this test module: ship its generators by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def scores_and_labels(n: int, rng: np.random.Generator) -> np.ndarray:
    labels = rng.integers(0, 2, n)
    return np.column_stack([np.clip(rng.normal(0.45 + 0.15 * labels, 0.2, n), 0, 1), labels])


def related_pairs(n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.random(n)
    return np.column_stack([x, x + 0.5 * rng.random(n)])


def unit_values(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.random(n)


def coarse_values(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, 6, n).astype(np.float64)[:, None]


# name: (kernel, data, parameters, partition sizes). Sizes unequal, so that most pairs
# and their dealers sit in different batches (different workers).
CASES = {
    "auc-fss": (auc_kernel(), scores_and_labels, {"P": 2, "bounds": (0, 1)}, [17, 9, 14]),
    "auc-circuit-split": (auc_kernel(), scores_and_labels,
                          {"P": 1, "comparison": "circuit", "noise_split": "split",
                           "bounds": (0, 1)}, [11, 12]),
    "kendall-fss": (kendall_tau_kernel("a"), related_pairs, {"P": 3}, [13, 8, 19]),
    "kendall-circuit": (kendall_tau_kernel("a"), related_pairs,
                        {"P": 2, "comparison": "circuit"}, [10, 15, 9]),
    "kendall-all-pairs": (kendall_tau_kernel("a"), related_pairs,
                          {"all_pairs": True, "delta": 1e-6}, [6, 5, 7]),
    "gini-circuit": (gini_kernel((0.0, 1.0)), unit_values, {"P": 2, "comparison": "circuit"},
                     [12, 12]),
    "duplicate-fss": (duplicate_pair_kernel(), coarse_values, {"P": 2}, [9, 14]),
}


@pytest.fixture(scope="module")
def engine():
    with DaskEngine(n_workers=2) as eng:
        yield eng


def _assert_same_release(a, b) -> None:
    assert b.value == a.value
    assert b.std_error == a.std_error
    assert b.error == a.error
    assert b.cost == a.cost
    assert b.privacy == a.privacy
    da, db = dict(a.diagnostics), dict(b.diagnostics)
    design_a, design_b = da.pop("design"), db.pop("design")
    np.testing.assert_array_equal(design_b.tuples, design_a.tuples)
    values_a, values_b = da.pop("pair_values"), db.pop("pair_values")
    if values_a is None:
        assert values_b is None
    else:
        np.testing.assert_array_equal(values_b, values_a)
    assert db == da


@pytest.mark.parametrize("case", sorted(CASES))
def test_pairs_2pc_on_the_engine_equals_in_process(engine, case):
    kernel, generator, params, sizes = CASES[case]
    parts = generated_partitions(generator, sizes, seed=41)
    local = simulate(make("pairs-2pc", kernel, epsilon=2.0, **params), load_all(parts),
                     rng=8, batch_size=sizes)
    got = engine.run(make("pairs-2pc", kernel, epsilon=2.0, **params), parts, rng=8,
                     server_steps="gathered")
    _assert_same_release(local, got)
    assert got.cost.peer_rounds >= 2  # dealing, then the members' openings
    # Not a trivial release: the pairs were computed and the noise drawn.
    assert got.diagnostics["n_computed_pairs"] > 0 and math.isfinite(got.value)


def test_noise_free_engine_run_is_the_designs_exact_statistic(engine):
    # Without noise the release is the incomplete U-statistic of the drawn pairs,
    # computed here from the records in the clear.
    parts = generated_partitions(related_pairs, [14, 9, 11], seed=5)
    got = engine.run(make("pairs-2pc", kendall_tau_kernel("a"), epsilon=math.inf, P=2,
                          comparison="circuit"), parts, rng=3, server_steps="gathered")
    data = load_all(parts)
    pairs = got.diagnostics["design"].tuples
    want = kendall_tau_kernel("a").evaluate(data, pairs).mean()
    assert got.value == pytest.approx(want, abs=1e-12)


def test_a_dealer_service_is_refused_on_the_engine(engine):
    # The engine steps no service role: the dealer service's packages would reach nobody.
    parts = generated_partitions(scores_and_labels, [10, 13], seed=2)
    protocol = make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2, dealer="service",
                    bounds=(0, 1))
    with pytest.raises(EngineError, match=r"pairs-2pc: the service roles \['dealer'\] do "
                                          r"not run on the engine; .*\(dealer='party'"):
        engine.run(protocol, parts, rng=1, server_steps="gathered")
