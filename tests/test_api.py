"""The public entry points (``fedustat.api``): results, privacy models, exact values against
scikit-learn / SciPy, and the errors bad input gives."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics

import fedustat
from fedustat import api
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.protocols.base import Estimate
from fedustat.stats import (
    auc_kernel,
    balanced_sample,
    gini_kernel,
    incomplete_ustatistic,
    user_kernel,
    vus_kernel,
)

TOL = 1e-12


def data(seed: int = 0, n: int = 60) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, n)
    labels[:2] = [0, 1]
    return {
        "labels": labels,
        "scores": rng.normal(size=n).round(1) + labels,  # rounded: ties
        "x": rng.integers(0, 6, n).astype(float),
        "y": rng.integers(0, 4, n).astype(float),
        "bounded": rng.uniform(0.0, 10.0, n),
        "categories": rng.integers(0, 5, n),
        "clusters": rng.integers(0, 3, n),
    }


D = data()


def brute_tau_a(x: np.ndarray, y: np.ndarray) -> float:
    i, j = np.triu_indices(len(x), 1)
    return float(np.mean(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])))


def brute_pairs(x: np.ndarray, f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> float:
    i, j = np.triu_indices(len(x), 1)
    return float(np.mean(f(x[i], x[j])))


CALLS = {
    "roc_auc_score": lambda **kw: fedustat.roc_auc_score(D["labels"], D["scores"], **kw),
    "kendalltau": lambda **kw: fedustat.kendalltau(D["x"], D["y"], **kw),
    "gini_mean_difference": lambda **kw: fedustat.gini_mean_difference(
        D["bounded"], bounds=(0.0, 10.0), **kw),
    "duplicate_pair_ratio": lambda **kw: fedustat.duplicate_pair_ratio(D["categories"], **kw),
    "rand_score": lambda **kw: fedustat.rand_score(D["categories"], D["clusters"], **kw),
}

REFERENCES = {
    "roc_auc_score": metrics.roc_auc_score(D["labels"], D["scores"]),
    # SciPy's default variant (tau-b) is the default here too.
    "kendalltau": stats.kendalltau(D["x"], D["y"]).statistic,
    "gini_mean_difference": brute_pairs(D["bounded"], lambda a, b: np.abs(a - b)),
    "duplicate_pair_ratio": brute_pairs(D["categories"], lambda a, b: a == b),
    "rand_score": metrics.rand_score(D["categories"], D["clusters"]),
}


# ------------------------------------------------------------------ results


@pytest.mark.parametrize("name", sorted(CALLS))
def test_private_call_returns_a_central_dp_estimate(name: str) -> None:
    est = CALLS[name](epsilon=0.5, rng=3)
    assert isinstance(est, Estimate)
    assert est.protocol == "central-laplace"
    assert est.privacy.model is PrivacyModel.CENTRAL
    assert est.privacy.epsilon == 0.5 and est.privacy.delta == 0.0
    assert est.std_error is not None and est.std_error > 0
    assert math.isfinite(float(est))
    # Seeded: the same call gives the same release.
    assert CALLS[name](epsilon=0.5, rng=3).value == est.value


@pytest.mark.parametrize("name", sorted(CALLS))
def test_infinite_epsilon_is_exact_and_not_private(name: str) -> None:
    est = CALLS[name](epsilon=math.inf)
    assert est.protocol == "exact"
    assert est.privacy.model is PrivacyModel.NONE
    assert str(est.privacy) == "not private"
    assert est.value == pytest.approx(REFERENCES[name], rel=TOL, abs=TOL)
    assert est.std_error == 0.0
    # The explicit protocol name gives the same.
    assert CALLS[name](epsilon=1.0, protocol="exact").value == est.value


def test_roc_auc_score_accepts_minus_one_plus_one_and_boolean_labels() -> None:
    labels, scores = D["labels"], D["scores"]
    reference = metrics.roc_auc_score(labels, scores)
    signed = 2 * labels - 1
    assert fedustat.roc_auc_score(signed, scores, epsilon=math.inf).value == pytest.approx(
        metrics.roc_auc_score(signed, scores), rel=TOL)
    booleans = labels.astype(bool)
    assert fedustat.roc_auc_score(booleans, scores, epsilon=math.inf).value == pytest.approx(
        reference, rel=TOL)
    assert fedustat.roc_auc_score(list(labels), list(scores),
                                  epsilon=math.inf).value == pytest.approx(reference, rel=TOL)


def test_kendalltau_variant_b_exact_equals_scipy() -> None:
    x, y = D["x"], D["y"]  # many ties: tau-b differs from tau-a
    tau_b = fedustat.kendalltau(x, y, epsilon=math.inf, variant="b")
    assert tau_b.value == pytest.approx(stats.kendalltau(x, y).statistic, rel=TOL)
    assert tau_b.value != pytest.approx(brute_tau_a(x, y), rel=1e-3)
    assert tau_b.quantity == "kendall_tau_b"


def test_kendalltau_variant_a_exact_is_the_u_statistic() -> None:
    tau_a = fedustat.kendalltau(D["x"], D["y"], epsilon=math.inf, variant="a")
    assert tau_a.value == pytest.approx(brute_tau_a(D["x"], D["y"]), rel=TOL, abs=TOL)
    assert tau_a.quantity == "kendall_tau_a"


def test_kendalltau_unknown_variant() -> None:
    with pytest.raises(ValueError, match=r"variant must be one of 'a', 'b', 'c'; got 'd'"):
        fedustat.kendalltau(D["x"], D["y"], epsilon=1.0, variant="d")


def test_estimate_with_a_kernel_and_protocol_parameters() -> None:
    kernel = auc_kernel()
    packed = kernel.pack(D["scores"], D["labels"])
    design = balanced_sample(80, 2, packed.shape[0], rng=2)
    est = fedustat.estimate(kernel, packed, epsilon=math.inf, design=design)
    n_pos = int(D["labels"].sum())
    n = packed.shape[0]
    u = incomplete_ustatistic(kernel, packed, design.tuples)
    assert est.value == pytest.approx(u * n * (n - 1) / 2 / (n_pos * (n - n_pos)), rel=TOL)
    # A user kernel of degree 3 through the generic entry point.
    spread = user_kernel(lambda a, b, c: np.ptp(np.stack([a[:, 0], b[:, 0], c[:, 0]]), axis=0),
                         3, "x", (0.0, 10.0), name="range3")
    x = D["bounded"][:20]
    est3 = fedustat.estimate(spread, x, epsilon=math.inf, protocol="exact")
    i, j, k = np.array(list(itertools.combinations(range(20), 3))).T
    brute = np.mean(np.max([x[i], x[j], x[k]], axis=0) - np.min([x[i], x[j], x[k]], axis=0))
    assert est3.value == pytest.approx(brute, rel=TOL)


def test_estimate_does_not_depend_on_batch_size() -> None:
    kernel = vus_kernel()
    rng = np.random.default_rng(1)
    packed = kernel.pack(rng.normal(size=30), np.repeat([0, 1, 2], 10))
    ref = fedustat.estimate(kernel, packed, epsilon=1.0, rng=4)
    for batch_size in (1, 7, 30):
        assert fedustat.estimate(kernel, packed, epsilon=1.0, rng=4,
                                 batch_size=batch_size).value == ref.value


def test_estimate_reports_measured_cost() -> None:
    est = fedustat.roc_auc_score(D["labels"], D["scores"], epsilon=1.0, rng=0)
    assert est.cost.bits_per_party == 128.0
    assert est.cost.total_bits == 128 * D["labels"].size
    assert est.cost.rounds == 1


def test_api_module_exports() -> None:
    assert set(api.__all__) <= set(fedustat.__all__)
    for name in api.__all__:
        assert getattr(fedustat, name) is getattr(api, name)


# ------------------------------------------------------------------ bad input


def test_nan_scores() -> None:
    scores = D["scores"].copy()
    scores[5] = np.nan
    with pytest.raises(ValueError, match=r"score contains 1 NaN or infinite value"):
        fedustat.roc_auc_score(D["labels"], scores, epsilon=1.0)


def test_non_binary_labels() -> None:
    labels = D["labels"].copy()
    labels[3] = 2
    with pytest.raises(ValueError, match=r"label must be binary \(0/1, -1/1 or booleans\); "
                                         r"found values \[0.0, 1.0, 2.0\]"):
        fedustat.roc_auc_score(labels, D["scores"], epsilon=1.0)


@pytest.mark.parametrize("label", [0, 1])
def test_single_class(label: int) -> None:
    kind = "positive" if label == 0 else "negative"
    with pytest.raises(ValueError, match=rf"label has no {kind} example; the statistic needs "
                                         r"both classes"):
        fedustat.roc_auc_score(np.full(10, label), np.arange(10.0), epsilon=1.0)


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize(("epsilon", "match"), [
    (0.0, r"epsilon must be > 0, got 0.0"),
    (-1.0, r"epsilon must be > 0, got -1.0"),
    (math.nan, r"epsilon must be > 0, got nan"),
])
def test_bad_epsilon(name: str, epsilon: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CALLS[name](epsilon=epsilon)


@pytest.mark.parametrize("epsilon", ["big", None])
def test_epsilon_that_is_not_a_number(epsilon: object) -> None:
    with pytest.raises(TypeError, match=rf"epsilon must be a positive number, got {epsilon!r}"):
        fedustat.duplicate_pair_ratio(D["categories"], epsilon=epsilon)  # type: ignore


@pytest.mark.parametrize("delta", [-0.1, 1.0, 2.0, math.nan])
def test_delta_outside_unit_interval(delta: float) -> None:
    with pytest.raises(ValueError, match=r"delta must be in \[0, 1\)"):
        fedustat.roc_auc_score(D["labels"], D["scores"], epsilon=1.0, delta=delta)


def test_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match=r"inputs have inconsistent lengths: score=59, label=60"):
        fedustat.roc_auc_score(D["labels"], D["scores"][:-1], epsilon=1.0)
    with pytest.raises(ValueError, match=r"inputs have inconsistent lengths: x=60, y=10"):
        fedustat.kendalltau(D["x"], D["y"][:10], epsilon=1.0)
    with pytest.raises(ValueError, match=r"inputs have inconsistent lengths: labels_true=60, "
                                         r"labels_pred=59"):
        fedustat.rand_score(D["categories"], D["clusters"][1:], epsilon=1.0)


def test_values_outside_gini_bounds() -> None:
    with pytest.raises(ValueError, match=r"x has values outside the declared bounds \[0.0, 5.0\]"
                                         r".*clip the data or widen the bounds"):
        fedustat.gini_mean_difference(D["bounded"], bounds=(0.0, 5.0), epsilon=1.0)


@pytest.mark.parametrize(("bounds", "error", "match"), [
    ((5.0, 1.0), ValueError, r"bounds must be finite with lower < upper"),
    ((0.0, math.inf), ValueError, r"bounds must be finite with lower < upper"),
    (3.0, TypeError, r"bounds must be a pair \(lower, upper\)"),
])
def test_bad_gini_bounds(bounds: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        fedustat.gini_mean_difference(D["bounded"], bounds=bounds, epsilon=1.0)  # type: ignore


def test_unknown_protocol_lists_the_available_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown protocol 'ldp-magic'; available protocols: "
                                         r".*central-laplace.*exact"):
        fedustat.roc_auc_score(D["labels"], D["scores"], epsilon=1.0, protocol="ldp-magic")


@pytest.mark.parametrize("kernel", [b"auc", auc_kernel, None, gini_kernel])
def test_kernel_that_is_not_a_kernel(kernel: object) -> None:
    with pytest.raises(TypeError, match=r"kernel must be a fedustat Kernel, got "):
        fedustat.estimate(kernel, np.zeros((4, 2)), epsilon=1.0)  # type: ignore[arg-type]


def test_data_with_the_wrong_number_of_columns() -> None:
    with pytest.raises(ValueError, match=r"data has 3 column\(s\) but kernel 'auc' needs 2"):
        fedustat.estimate(auc_kernel(), np.zeros((5, 3)), epsilon=1.0)


def test_too_few_records_for_the_kernel() -> None:
    with pytest.raises(ValueError, match=r"data has 1 record\(s\); a kernel of degree 2 needs"):
        fedustat.duplicate_pair_ratio([1.0], epsilon=1.0)


def test_non_numeric_values() -> None:
    with pytest.raises(TypeError, match=r"x must be numeric"):
        fedustat.duplicate_pair_ratio(["a", "b", "a"], epsilon=1.0)


# ------------------------------------------------------------------ noise grade


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_public_function_takes_deployment_noise(name: str) -> None:
    pytest.importorskip("opendp")
    release = CALLS[name](epsilon=1.0, noise="deployment")
    assert release.noise == "deployment"
    assert "deployment noise" in str(release)
    # A seed would make deployment noise reproducible by whoever knows it.
    with pytest.raises(ValueError, match=r"deployment noise cannot be seeded"):
        CALLS[name](epsilon=1.0, noise="deployment", rng=0)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_every_public_function_names_itself_for_an_unknown_keyword(name: str) -> None:
    with pytest.raises(TypeError, match=rf"^fedustat\.{name}\(\) got an unexpected keyword "
                                        r"argument 'bogus'"):
        CALLS[name](epsilon=1.0, bogus=1)


def test_exact_release_has_no_noise_whatever_was_asked() -> None:
    release = CALLS["roc_auc_score"](epsilon=math.inf, noise="simulation")
    assert release.noise == "none" and "no noise" in str(release)
