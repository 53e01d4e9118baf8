"""A release behaves like a number, serialises to JSON, stays in range, and Kendall's tau
unpacks like SciPy's (issue 16, items 1 and 2)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

import fedustat
import release_cases as rc
from fedustat import api
from fedustat.privacy.errors import LaplaceError
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.protocols.base import Estimate
from fedustat.stats import kernels

GUARANTEE = PrivacyGuarantee(1.0, 0.0, PrivacyModel.CENTRAL)


def _release(value: float = 0.79, **kwargs: object) -> Estimate:
    return Estimate(value, "auc", "central-laplace", GUARANTEE, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- a number's behaviour


def test_format_applies_the_spec_to_the_value_and_keeps_str() -> None:
    est = _release(0.79123, std_error=0.01)
    assert f"{est:.3f}" == "0.791"
    assert f"{est:8.2e}" == format(0.79123, "8.2e")
    assert f"{est}" == str(est)
    assert str(est).startswith("auc = 0.79123 ± 0.01 (s.e.) [central-laplace;")
    assert repr(est).startswith("Estimate(value=0.79123, quantity='auc'")


def test_comparisons_with_numbers_and_releases() -> None:
    est, other = _release(0.79), _release(0.5)
    assert est > 0.5 and est >= 0.79 and est < 1 and est <= 0.79
    assert not est > 0.79 and not est < 0.79
    assert est == 0.79 and est != 0.8
    assert 0.79 == est  # noqa: SIM300 (the reflected comparison)
    assert est == np.float64(0.79) and est > np.float32(0.5)
    assert other < est and est > other and other <= est and est >= other
    # Between releases == is numeric too (as for floats); same_release is every field.
    assert est == _release(0.79) and est != other
    assert est == replace(est, protocol="other")
    assert not est.same_release(replace(est, protocol="other"))
    assert est.same_release(_release(0.79)) and not est.same_release(0.79)
    assert est != "0.79"
    with pytest.raises(TypeError, match="not supported between"):
        _ = est < "1"


def test_round_and_arithmetic_give_plain_floats() -> None:
    est = _release(0.79)
    assert round(est, 1) == 0.8 and type(round(est, 1)) is float
    assert round(_release(2.6)) == 3 and type(round(_release(2.6))) is int
    for result, expected in [(est + 0, 0.79), (0 + est, 0.79), (est - 0.29, 0.79 - 0.29),
                             (1 - est, 1 - 0.79), (est * 2, 1.58), (3 * est, 3 * 0.79),
                             (est / 2, 0.395), (1 / est, 1 / 0.79), (-est, -0.79),
                             (+est, 0.79), (abs(_release(-0.25)), 0.25),
                             (est + _release(0.5), 1.29), (float(est), 0.79)]:
        assert type(result) is float
        assert result == expected
    assert sum([est, est]) == 0.79 + 0.79
    with pytest.raises(TypeError, match="unsupported operand"):
        _ = est + "1"


def test_numpy_sees_a_float() -> None:
    est = _release(0.79)
    assert np.isclose(est, 0.79)
    arr = np.asarray(est)
    assert arr.shape == () and arr.dtype == np.float64 and float(arr) == 0.79
    assert np.asarray(est, dtype=np.float32).dtype == np.float32
    assert np.array(est, copy=True) == 0.79
    assert np.mean([est, _release(0.21)]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="copy=False is impossible"):
        np.array(est, copy=False)


def test_a_release_hashes_as_its_value() -> None:
    # Equal numbers hash alike: a release's hash is its value's, consistent with ==.
    assert hash(_release(0.79)) == hash(0.79) == hash(_release(0.79, std_error=0.1))
    assert hash(_release(2.0)) == hash(2)
    tau = fedustat.kendalltau([1, 2, 3, 4], [1, 3, 2, 4], epsilon=math.inf)
    assert hash(tau) == hash(tau.value)
    assert len({_release(0.79), 0.79, _release(0.5)}) == 2
    nan = _release(math.nan)
    assert nan != nan and hash(nan) == hash(nan)  # a NaN value: stable, by identity


# ---------------------------------------------------------------------- serialisation


def test_to_dict_is_json_ready_and_round_trips() -> None:
    x, y = rc.labelled(n=80)[0].T
    est = fedustat.roc_auc_score(y, x, epsilon=1.0, rng=3)
    out = est.to_dict()
    back = json.loads(json.dumps(out))
    assert back == out
    assert json.loads(est.to_json()) == out
    assert out["value"] == est.value and out["quantity"] == "auc"
    assert out["protocol"] == "central-laplace" and out["std_error"] == est.std_error
    assert out["interval"] == list(est.confidence_interval())
    assert out["raw_interval"] == list(est.raw_interval())
    assert out["guarantee"]["epsilon"] == 1.0 and out["guarantee"]["model"] == "central"
    assert out["guarantee"]["assumptions"][0]["kind"] == "trusted curator"
    assert out["cost"]["bits_per_party"] == est.cost.bits_per_party
    assert est.to_dict(0.5)["interval"] == list(est.confidence_interval(0.5))
    with pytest.raises(ValueError, match=r"confidence_level must be in \(0, 1\)"):
        est.to_dict(1.5)


def test_to_dict_converts_numpy_diagnostics_and_infinite_epsilon() -> None:
    est = _release(0.5, std_error=None, diagnostics={
        "counts": np.arange(3), "share": np.float32(0.25), 7: (np.int64(2), "a"),
        "nested": {"flag": np.bool_(True)}})
    out = est.to_dict()
    assert out["diagnostics"] == {"counts": [0, 1, 2], "share": 0.25, "7": [2, "a"],
                                  "nested": {"flag": True}}
    assert out["interval"] is None and out["std_error"] is None  # no error bar known
    json.dumps(out)
    exact = fedustat.kendalltau([1, 2, 3, 4, 5], [2, 1, 4, 3, 5], epsilon=math.inf)
    assert json.loads(exact.to_json())["guarantee"]["epsilon"] == math.inf


def test_to_dict_of_neighbours_differs_only_in_released_fields() -> None:
    # The privacy rule of tests/test_release_privacy.py, applied to the serialised form.
    data, neighbour = rc.labelled()
    moved = False
    for seed in range(5):
        first = fedustat.roc_auc_score(data[:, 1], data[:, 0], epsilon=1.0, rng=seed)
        second = fedustat.roc_auc_score(neighbour[:, 1], neighbour[:, 0], epsilon=1.0,
                                        rng=seed)
        released = ("value", "std_error", "raw_value", "interval", "interval.*",
                    "raw_interval", "raw_interval.*", "interval_method")
        assert rc.leaked_fields(first.to_dict(), second.to_dict(), released) == []
        moved = moved or rc.leaked_fields(first.to_dict(), second.to_dict(), ()) != []
    assert moved


# ----------------------------------------------------------------------- valid range


def test_clipped_keeps_the_raw_release_and_intersects_the_interval() -> None:
    law = LaplaceError(0.05)
    raw = _release(1.02, error=law)
    est = raw.clipped(0.0, 1.0)
    half = law.half_width(0.95)
    assert est.value == 1.0 and est.raw_value == 1.02 and est.unclipped == 1.02
    assert est.clip_range == (0.0, 1.0)
    assert est.raw_interval() == (1.02 - half, 1.02 + half) == raw.confidence_interval()
    assert est.confidence_interval() == (1.02 - half, 1.0)
    assert raw.raw_value == 1.02 and raw.unclipped is None  # nothing clipped: raw is value
    # An interval wholly outside the range shrinks to the nearest end.
    far = _release(1.5, error=law).clipped(0.0, 1.0)
    assert far.confidence_interval() == (1.0, 1.0)
    # Clipping again starts from the raw release, not from the clipped value.
    assert est.clipped(-1.0, 1.01).value == 1.01
    inside = _release(0.3, std_error=0.01).clipped(0.0, 1.0)
    assert inside.value == 0.3 and inside.confidence_interval() == inside.raw_interval()


@pytest.mark.parametrize(("bounds", "error", "message"), [
    ((1.0, 0.0), ValueError, r"valid range needs low <= high, got \(1.0, 0.0\)"),
    ((0.0, math.nan), ValueError, "valid range needs low <= high"),
    (("a", 1.0), TypeError, "a valid range must be a pair"),
])
def test_clipped_refuses_a_bad_range(bounds: tuple, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        _release().clipped(*bounds)


def test_statistic_ranges_of_the_built_in_kernels() -> None:
    assert api.statistic_range(kernels.auc_kernel()) == (0.0, 1.0)
    assert api.statistic_range(kernels.kendall_tau_kernel("a")) == (-1.0, 1.0)
    assert api.statistic_range(kernels.gini_kernel((0.0, 3.0))) == (0.0, 3.0)
    assert api.statistic_range(kernels.variance_kernel((0.0, 2.0))) == (0.0, 2.0)
    assert api.statistic_range(kernels.duplicate_pair_kernel()) == (0.0, 1.0)
    assert api.statistic_range(kernels.vus_kernel()) == (0.0, 1.0)
    # Without n: the widest ranges (with n, [0, ln C(n,2)] and [0, n+ n-]).
    assert api.statistic_range(kernels.renyi2_entropy_kernel()) == (0.0, math.inf)
    assert api.statistic_range(kernels.mann_whitney_kernel()) == (0.0, math.inf)
    public = kernels.PublicData(5, {"label": np.array([0, 1, 1, 0, 1])})
    assert kernels.renyi2_entropy_kernel().statistic_range(public) == (0.0, math.log(10))
    assert kernels.mann_whitney_kernel().statistic_range(public) == (0.0, 6.0)
    user = kernels.user_kernel(lambda a, b: a[:, 0] * b[:, 0], 2, "x", (0.0, 1.0),
                               statistic_fn=lambda u, public: 2.0 * u)
    assert api.statistic_range(user) is None  # a user map: no range known


def _separated(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    """Perfectly separated scores: exact AUC 1, so noise pushes half the releases above."""
    labels = np.arange(n) % 2
    return labels, labels + np.linspace(0.0, 0.5, n)


def test_one_call_functions_clip_by_default_and_keep_the_raw_release() -> None:
    labels, scores = _separated()
    reps = 200
    clipped = [fedustat.roc_auc_score(labels, scores, epsilon=0.5, rng=s) for s in range(reps)]
    raw = [fedustat.roc_auc_score(labels, scores, epsilon=0.5, rng=s, clip=False)
           for s in range(reps)]
    assert all(0.0 <= e.value <= 1.0 for e in clipped)
    assert all(0.0 <= e.confidence_interval().low <= e.confidence_interval().high <= 1.0
               for e in clipped)
    assert any(e.raw_value > 1.0 for e in clipped)
    # The raw release is the protocol's own: the same seed gives it with clip=False.
    assert [e.raw_value for e in clipped] == [e.value for e in raw]
    assert all(e.unclipped is None and e.clip_range is None for e in raw)
    # Averaging raw releases is unbiased (exact AUC 1): the mean is within 4 standard
    # errors of the mean (std_error / sqrt(reps)); the clipped mean is biased below by
    # E|Z|/2 for the symmetric error Z (half the releases clip to 1), here b/2 for Laplace.
    se = clipped[0].std_error
    assert se is not None
    mean_raw = float(np.mean([e.raw_value for e in clipped]))
    assert abs(mean_raw - 1.0) <= 4.0 * se / math.sqrt(reps)
    mean_clipped = float(np.mean([e.value for e in clipped]))
    assert 1.0 - mean_clipped > 4.0 * se / math.sqrt(reps)


def test_estimate_and_kendalltau_take_clip() -> None:
    x = np.arange(12.0)
    tau = fedustat.kendalltau(x, x, epsilon=0.5, rng=1, variant="a")
    assert -1.0 <= tau.value <= 1.0 and tau.raw_value != tau.value  # exact tau 1 + noise
    kernel = kernels.kendall_tau_kernel("a")
    raw = fedustat.estimate(kernel, kernel.pack(x, x), epsilon=0.5, rng=1, clip=False)
    assert raw.value == tau.raw_value
    gini = fedustat.gini_mean_difference(np.zeros(10), bounds=(0.0, 1.0), epsilon=0.5, rng=2)
    assert gini.value >= 0.0
    with pytest.raises(TypeError, match=r"fedustat.estimate\(\): clip must be True or False, "
                                        r"got 'no'"):
        fedustat.estimate(kernel, kernel.pack(x, x), epsilon=1.0, clip="no")
    with pytest.raises(TypeError, match=r"fedustat.rand_score\(\): clip must be True or False"):
        fedustat.rand_score([0, 1, 0], [0, 1, 1], epsilon=1.0, clip=1)


# ------------------------------------------------------------------------ kendalltau


def test_kendalltau_unpacks_like_scipy_and_is_the_full_release() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=200)
    y = x + rng.normal(size=200)
    result = fedustat.kendalltau(x, y, epsilon=math.inf)
    tau, p = result
    expected = sps.kendalltau(x, y, method="asymptotic")
    # At epsilon = inf the test is Kendall's asymptotic one, as SciPy's (no ties here).
    assert tau == pytest.approx(expected.statistic, rel=1e-12)
    assert p == pytest.approx(expected.pvalue, rel=1e-9)
    assert (result.statistic, result.pvalue) == (tau, p) == (result[0], result[1])
    assert len(result) == 2 and list(result) == [tau, p]
    assert isinstance(result, Estimate) and result.value == tau
    assert str(result).startswith("kendall_tau_b = ")  # SciPy's default variant
    assert result.to_dict()["pvalue"] == p and json.loads(result.to_json())["pvalue"] == p
    assert result.confidence_interval() == (tau, tau)


def test_kendalltau_pvalue_is_small_for_strongly_dependent_data() -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(size=300)
    tau, p = fedustat.kendalltau(x, x + 0.5 * rng.normal(size=300), epsilon=1.0, rng=7)
    assert tau > 0.5 and p < 1e-8


@pytest.mark.parametrize("epsilon", [1.0, 50.0])
def test_kendalltau_pvalue_is_uniform_under_independence(epsilon: float) -> None:
    # Under H0 the p-value is (close to) uniform: the rejection rate at 5% is 0.05 with
    # binomial standard deviation sqrt(0.05 * 0.95 / reps); the mean is 1/2 with standard
    # deviation sqrt(1/12 / reps). Both are checked at 4 standard deviations; at
    # epsilon = 1 the noise (s.e. ~ 0.1) is as large as tau's null spread, so the test is
    # only valid because the p-value accounts for it.
    rng = np.random.default_rng(8)
    reps, n = 400, 60
    pvalues = np.array([fedustat.kendalltau(rng.normal(size=n), rng.normal(size=n),
                                            epsilon=epsilon, rng=int(r)).pvalue
                        for r in range(reps)])
    rate = float(np.mean(pvalues < 0.05))
    assert abs(rate - 0.05) <= 4.0 * math.sqrt(0.05 * 0.95 / reps)
    assert abs(float(pvalues.mean()) - 0.5) <= 4.0 * math.sqrt(1.0 / 12.0 / reps)


def test_kendall_pvalue_ignoring_the_noise_would_reject_too_often() -> None:
    # The same null data with p-values from tau's null variance alone: the noise inflates
    # the rejection rate far above 5% (so the test above can fail).
    rng = np.random.default_rng(9)
    reps, n = 200, 60
    null_sd = math.sqrt(2.0 * (2 * n + 5) / (9.0 * n * (n - 1)))
    naive = [2 * sps.norm.sf(abs(fedustat.kendalltau(rng.normal(size=n), rng.normal(size=n),
                                                     epsilon=1.0, rng=r).raw_value) / null_sd)
             for r in range(reps)]
    assert float(np.mean(np.array(naive) < 0.05)) > 0.05 + 4 * math.sqrt(0.05 * 0.95 / reps)


def test_kendall_pvalue_uses_the_raw_release_and_the_error_law() -> None:
    n = 30
    # A noiseless release: Kendall's exact test (SciPy's, on a permutation with that tau).
    inversions = round((1 - 0.2) * n * (n - 1) / 4)  # tau = 1 - 4 I / (n (n - 1))
    y, rest = [], list(range(n))
    for i in range(n):  # the greedy Lehmer code with `inversions` inversions
        skip = min(inversions, n - 1 - i)
        inversions -= skip
        y.append(rest.pop(skip))
    scipy_exact = sps.kendalltau(np.arange(n), y, method="exact")
    assert scipy_exact.statistic == pytest.approx(0.2)
    exact = Estimate(0.2, "kendall_tau_a", "exact", PrivacyGuarantee.none())
    assert api.kendall_tau_pvalue(exact, n) == pytest.approx(scipy_exact.pvalue, rel=1e-9)
    # With a standard error only (a normal Z) or a Laplace error law: 2 P(T + Z >= t), T
    # Kendall's null tau (a uniform permutation's inversions: independent uniforms on
    # {0..m-1}), checked by Monte Carlo (2e5 draws: the binomial standard deviation of the
    # frequency is below 1.2e-3; 4 of them allowed).
    draws = np.random.default_rng(10)
    taus = 1.0 - 4.0 * sum(draws.integers(0, m, 200_000) for m in range(1, n + 1)) / (
        n * (n - 1))
    law = LaplaceError(0.1)
    for release, noise in ((_release(0.2, std_error=0.1), draws.normal(0.0, 0.1, 200_000)),
                           (_release(0.2, error=law), draws.laplace(0.0, 0.1, 200_000))):
        freq = float(np.mean(np.abs(taus + noise) >= 0.2))
        assert abs(api.kendall_tau_pvalue(release, n) - freq) <= 4 * math.sqrt(
            freq * (1 - freq) / noise.size)
    normal = _release(0.2, std_error=0.1)
    # Clipping does not change the test: it uses the raw release.
    assert api.kendall_tau_pvalue(_release(1.3, error=law).clipped(-1, 1), n) == \
        api.kendall_tau_pvalue(_release(1.3, error=law), n)
    assert math.isnan(api.kendall_tau_pvalue(_release(0.2), n))  # private, no error bar
    with pytest.raises(ValueError, match="n must be >= 2, got 1"):
        api.kendall_tau_pvalue(normal, 1)
    with pytest.raises(TypeError, match=r"n must be an integer, got 2\.5"):
        api.kendall_tau_pvalue(normal, 2.5)  # type: ignore[arg-type]
