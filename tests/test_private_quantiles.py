"""Private quantiles (protocols/ecdf/private_quantiles.py): exact privacy on small inputs,
exact answers at eps = inf, seeded Monte Carlo against the predicted error, bad inputs."""

from __future__ import annotations

import math
from itertools import combinations_with_replacement

import numpy as np
import pytest

from fedustat.privacy import DeploymentNoise
from fedustat.privacy.noise import SimulationNoise
from fedustat.privacy.verify import verify_ldp
from fedustat.protocols.ecdf.private_quantiles import (
    MODEL_LEVELS,
    dp_quantiles,
    expected_errors,
    joint_exponential,
    joint_output_distribution,
    model_counts,
    permute_and_flip,
    permute_and_flip_distribution,
    predict_quantile_errors,
    rank_costs,
    target_ranks,
)
from fedustat.stats.ecdf import ecdf_counts

GRID = np.arange(1.0, 5.0)  # 4 candidates


def _datasets(n: int, k: int) -> list[tuple[int, ...]]:
    return list(combinations_with_replacement(range(1, k + 1), n))


def _neighbours(data: tuple[int, ...], k: int) -> list[tuple[int, ...]]:
    """Every data set with one record of ``data`` replaced (n stays the same)."""
    out = set()
    for i in range(len(data)):
        for v in range(1, k + 1):
            if v != data[i]:
                out.add(tuple(sorted((*data[:i], v, *data[i + 1:]))))
    return sorted(out)


def _worst_epsilon(law, n: int, k: int) -> float:
    """max over neighbouring data sets and outputs of log P(o|D) / P(o|D'), checked by
    the project's exact checker (verify_ldp on each pair)."""
    worst = 0.0
    for data in _datasets(n, k):
        for other in _neighbours(data, k):
            if other < data:
                continue
            check = verify_ldp(law, inputs=[data, other], epsilon=50.0)
            worst = max(worst, check.observed_epsilon)
    return worst


def _pf_law(level: float, eps: float):
    def law(data: tuple[int, ...]) -> np.ndarray:
        counts = ecdf_counts(np.array(data, dtype=float), GRID)
        rank = int(target_ranks(np.array([level]), len(data))[0])
        return permute_and_flip_distribution(rank_costs(counts, rank), eps / 2.0)
    return law


@pytest.mark.parametrize("level", [0.5, 0.9, 0.2])
def test_permute_and_flip_is_eps_dp_exactly(level: float) -> None:
    eps = 1.0
    worst = _worst_epsilon(_pf_law(level, eps), 3, 4)
    assert worst <= eps * (1 + 1e-9)
    # Not slack: the bound is nearly attained, and a larger beta breaks it.
    assert worst > 0.5 * eps
    assert _worst_epsilon(_pf_law(level, 2.5 * eps), 3, 4) > eps


def _joint_law(levels: list[float], eps: float):
    def law(data: tuple[int, ...]) -> np.ndarray:
        counts = ecdf_counts(np.array(data, dtype=float), GRID)
        return joint_output_distribution(counts, len(data), np.array(levels), eps)[1]
    return law


@pytest.mark.parametrize("levels", [[0.3, 0.7], [0.25, 0.5, 0.9]])
def test_joint_exponential_is_eps_dp_exactly(levels: list[float]) -> None:
    eps = 1.0
    worst = _worst_epsilon(_joint_law(levels, eps), 3, 4)
    assert worst <= eps * (1 + 1e-9)
    assert worst > 0.5 * eps
    # Sensitivity 1 (half the noise) would not be private: the gap utility moves by 2.
    assert _worst_epsilon(_joint_law(levels, 2 * eps), 3, 4) > eps * (1 + 1e-6)


def _chi_bound(law: np.ndarray, draws: np.ndarray, size: int) -> None:
    """Each frequency within 5 standard deviations sqrt(p (1 - p) / size) of its law."""
    freq = np.bincount(draws, minlength=law.size) / size
    sd = np.sqrt(law * (1 - law) / size)
    assert np.all(np.abs(freq - law) <= 5 * sd + 1e-12), (freq, law)


def test_permute_and_flip_sampler_follows_its_law() -> None:
    costs = np.array([3.0, 1.0, 0.0, 0.0, 2.0, 5.0])
    law = permute_and_flip_distribution(costs, 0.7)
    noise = SimulationNoise(7)
    size = 20000
    draws = np.array([permute_and_flip(costs, 0.7, noise) for _ in range(size)])
    _chi_bound(law, draws, size)
    # Two best candidates tie; permute-and-flip puts more mass on them than the
    # exponential mechanism (McKenna and Sheldon 2020, Thm 2).
    em = np.exp(-0.7 * costs) / np.exp(-0.7 * costs).sum()
    assert law[2] + law[3] > em[2] + em[3]


def test_joint_sampler_follows_its_law() -> None:
    data = np.array([1, 2, 2, 3, 4, 4, 4], dtype=float)
    counts = ecdf_counts(data, GRID)
    levels = np.array([0.3, 0.8])
    tuples, law = joint_output_distribution(counts, data.size, levels, 1.5)
    index = {t: i for i, t in enumerate(tuples)}
    noise = SimulationNoise(11)
    size = 20000
    draws = np.array([index[tuple(joint_exponential(counts, data.size, levels, 1.5, noise))]
                      for _ in range(size)])
    _chi_bound(law, draws, size)


@pytest.mark.parametrize("levels", [[0.5], [0.25, 0.5, 0.75, 0.9], [j / 17 for j in range(1, 17)]])
def test_exact_answers_at_infinite_and_huge_epsilon(levels: list[float]) -> None:
    rng = np.random.default_rng(3)
    x = rng.poisson(20.0, size=500).astype(float)
    tau = np.arange(0.0, 60.0)
    truth = np.quantile(x, levels, method="inverted_cdf")
    exact = dp_quantiles(x, levels, epsilon=math.inf, thresholds=tau)
    np.testing.assert_array_equal(exact.values, truth)
    assert exact.privacy.model.value == "none"
    huge = dp_quantiles(x, levels, epsilon=1e5, thresholds=tau, method="exponential", rng=1)
    np.testing.assert_array_equal(huge.values, truth)
    curve = dp_quantiles(x, levels, epsilon=1e7, thresholds=tau, method="curve", rng=1)
    np.testing.assert_array_equal(curve.values, truth)


def test_joint_is_exact_without_ties_at_huge_epsilon() -> None:
    # One record per grid point: every candidate's block is one rank, and the joint
    # utility's maximum is the exact answer.
    x = np.arange(1.0, 201.0)
    levels = [0.1, 0.25, 0.5, 0.9]
    res = dp_quantiles(x, levels, epsilon=1e5, thresholds=x, method="joint", rng=2)
    np.testing.assert_array_equal(res.values, np.quantile(x, levels, method="inverted_cdf"))


@pytest.mark.parametrize(("method", "levels", "eps"), [
    ("exponential", [0.5], 0.3),
    ("joint", [0.25, 0.5, 0.75, 0.9], 0.5),
    ("joint", [j / 9 for j in range(1, 9)], 1.0),
])
def test_prediction_is_the_exact_error_on_the_model_data(method: str, levels: list[float],
                                                         eps: float) -> None:
    k, n = 200, 600
    predicted = predict_quantile_errors(levels, n, k, eps)[method]
    tau = np.arange(1.0, k + 1)
    replicates = -(-MODEL_LEVELS // len(levels))
    exact = []
    for i in range(replicates):
        counts = model_counts(n, k, i)
        x = np.repeat(tau, np.diff(counts, prepend=0))
        exact.append(expected_errors(x, levels, epsilon=eps, thresholds=tau, method=method))
    np.testing.assert_allclose(predicted.steps, np.mean(exact, axis=0), rtol=1e-9)
    # Seeded Monte Carlo of the release on the first model data set: within 4 standard
    # errors of the exact expected error.
    counts = model_counts(n, k, 0)
    x = np.repeat(tau, np.diff(counts, prepend=0))
    truth = np.quantile(x, levels, method="inverted_cdf")
    reps = 400
    rng = np.random.default_rng(5)
    errs = np.array([np.mean(np.abs(dp_quantiles(x, levels, epsilon=eps, thresholds=tau,
                                                 method=method, rng=rng).values - truth))
                     for _ in range(reps)])
    assert abs(errs.mean() - np.mean(exact[0])) <= 4 * errs.std(ddof=1) / math.sqrt(reps)


@pytest.mark.parametrize(("method", "levels"), [("exponential", [0.5]),
                                                ("joint", [0.2, 0.5, 0.6])])
def test_expected_errors_match_monte_carlo_on_uneven_data(method: str,
                                                          levels: list[float]) -> None:
    rng = np.random.default_rng(9)
    x = rng.gamma(2.0, 10.0, size=300).round()
    tau = np.arange(0.0, 120.0)
    exact = expected_errors(x, levels, epsilon=0.8, thresholds=tau, method=method)
    truth = np.quantile(x, levels, method="inverted_cdf")
    reps = 600
    errs = np.array([np.abs(dp_quantiles(x, levels, epsilon=0.8, thresholds=tau,
                                         method=method, rng=rng).values - truth)
                     for _ in range(reps)])
    sd = errs.std(axis=0, ddof=1) / math.sqrt(reps)
    assert np.all(np.abs(errs.mean(axis=0) - exact) <= 4 * sd + 1e-12)


def test_auto_picks_by_prediction_and_reports_it() -> None:
    x = np.repeat(np.arange(1.0, 513.0), 3)
    tau = np.arange(1.0, 513.0)
    one = dp_quantiles(x, 0.5, epsilon=1.0, thresholds=tau, rng=0)
    assert one.method == "exponential" and np.ndim(one.values) == 0
    many = dp_quantiles(x, [j / 17 for j in range(1, 17)], epsilon=1.0, thresholds=tau, rng=0)
    assert many.method == "joint"
    assert many.predicted_error == pytest.approx(many.predictions["joint"].mean_steps)
    assert many.predicted_error < many.predictions["exponential"].mean_steps
    assert many.privacy.epsilon == 1.0 and many.privacy.adjacency.startswith("replace one")
    assert np.all(np.diff(many.values) >= 0)


def test_deployment_noise_runs_every_method() -> None:
    x = np.repeat(np.arange(1.0, 65.0), 2)
    for method in ("exponential", "joint", "curve"):
        res = dp_quantiles(x, [0.25, 0.75], epsilon=2.0, bounds=(1, 64), grid_points=64,
                           method=method, noise=DeploymentNoise())
        assert res.noise_kind == "deployment"
        assert np.all(np.isin(res.values, np.linspace(1, 64, 64)))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"levels": [0.0, 0.5]}, "levels must be in \\(0, 1\\]"),
    ({"levels": []}, "levels is empty"),
    ({"values": []}, "values is empty"),
    ({"thresholds": None}, "exactly one of thresholds"),
    ({"bounds": (0, 10)}, "exactly one of thresholds"),
    ({"method": "median"}, "method must be 'auto' or one of"),
    ({"epsilon": -1.0}, "epsilon"),
    ({"thresholds": [3.0, 1.0]}, "strictly increasing"),
    ({"thresholds": None, "bounds": (5, 5)}, "bounds must be finite with lower < upper"),
    ({"thresholds": None, "bounds": "ab"}, "bounds must be a pair"),
    ({"grid_points": 1}, "grid_points must be an integer >= 2"),
])
def test_bad_inputs(kwargs: dict, message: str) -> None:
    args = {"values": [1.0, 2.0, 3.0], "levels": [0.5], "epsilon": 1.0,
            "thresholds": [1.0, 2.0, 3.0]}
    args.update(kwargs)
    values, levels = args.pop("values"), args.pop("levels")
    with pytest.raises((ValueError, TypeError), match=message):  # "ab": a TypeError
        dp_quantiles(values, levels, **args)


def test_advisor_reports_the_pick_and_its_predicted_error() -> None:
    from fedustat.advisor import ADVISED_QUANTILE_LEVELS, advise

    advice = advise("quantile", n=5000, epsilon=1.0, domain_size=256)
    pred = advice.prediction("dp-quantiles")
    expected = predict_quantile_errors(ADVISED_QUANTILE_LEVELS, 5000, 256, 1.0)
    pick = min(("exponential", "joint", "curve"), key=lambda m: expected[m].mean_steps)
    assert pred.parameters["method"] == pick == pred.run_params["method"]
    assert pred.mse == pytest.approx(float(np.mean(expected[pick].level_mse)))
    assert pred.parameters["steps"] == pytest.approx(expected[pick].mean_steps, abs=1e-4)
    assert pred.registered and pred.eligible


class _CountingNoise(SimulationNoise):
    """Simulation noise that records how many uniforms each call asked for."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.sizes: list[int] = []

    def uniform(self, size):  # type: ignore[no-untyped-def]
        self.sizes.append(int(np.prod(size)))
        return super().uniform(size)


@pytest.mark.parametrize("method", ["exponential", "joint"])
def test_draws_do_not_depend_on_the_data(method: str) -> None:
    # Fixed work: the same number and sizes of draws for very different data sets.
    tau = np.arange(1.0, 101.0)
    seen = []
    for data in (np.full(50, 3.0), np.arange(1.0, 101.0), np.repeat([10.0, 90.0], 40)):
        noise = _CountingNoise(0)
        dp_quantiles(data, [0.2, 0.5, 0.9], epsilon=1.0, thresholds=tau, method=method,
                     noise=noise)
        seen.append(noise.sizes)
    assert seen[0] == seen[1] == seen[2]
    assert seen[0] == ([100, 100] * 3 if method == "exponential" else [1, 1, 1])


def test_rng_and_noise_together_are_refused() -> None:
    with pytest.raises(ValueError, match="either rng or noise"):
        dp_quantiles([1.0, 2.0], 0.5, epsilon=1.0, thresholds=[1.0, 2.0], rng=0,
                     noise=SimulationNoise(0))
