"""fedustat.kendalltau against scipy.stats.kendalltau: variants, alternative, method,
nan_policy, and the private tau-b / tau-c (error bar, p-value size, refusals)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import fedustat
from fedustat import catalogue
from fedustat.kendall import TAU_B_BUDGET_SPLIT

INF = math.inf


def brute_tau_a(x: np.ndarray, y: np.ndarray) -> float:
    i, j = np.triu_indices(len(x), 1)
    return float(np.mean(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])))


tied_pairs = st.integers(min_value=3, max_value=40).flatmap(
    lambda n: st.tuples(st.lists(st.integers(0, 4), min_size=n, max_size=n),
                        st.lists(st.integers(-2, 2), min_size=n, max_size=n)))


@settings(max_examples=60, deadline=None)
@given(tied_pairs)
def test_exact_variants_equal_scipy_on_tied_data(pair: tuple[list[int], list[int]]) -> None:
    x, y = (np.asarray(v, dtype=np.float64) for v in pair)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SciPy warns on a constant input (NaN result)
        for variant in ("b", "c"):
            mine = fedustat.kendalltau(x, y, epsilon=INF, variant=variant)
            ref = stats.kendalltau(x, y, variant=variant)
            assert mine.statistic == pytest.approx(ref.statistic, rel=1e-12, abs=1e-14,
                                                   nan_ok=True)
            assert mine.pvalue == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-14, nan_ok=True)
    assert fedustat.kendalltau(x, y, epsilon=INF, variant="a").statistic == pytest.approx(
        brute_tau_a(x, y), rel=1e-12, abs=1e-14)


def test_issue_case_default_is_scipy_tau_b() -> None:
    # Before: the default was tau-a (0.447 where SciPy gives 0.583 on tied data).
    x = np.array([1, 1, 2, 2, 3, 3, 4, 4.0])
    y = np.array([1, 2, 1, 2, 3, 4, 3, 4.0])
    tau = fedustat.kendalltau(x, y, epsilon=INF)
    assert tau.statistic == pytest.approx(stats.kendalltau(x, y).statistic, rel=1e-12)
    assert tau.statistic != pytest.approx(brute_tau_a(x, y), rel=1e-3)


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
@pytest.mark.parametrize("method", ["auto", "asymptotic", "exact"])
def test_exact_alternative_and_method_as_scipy(alternative: str, method: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=25)
    y = 0.3 * x + rng.normal(size=25)  # no ties: SciPy's exact method applies
    mine = fedustat.kendalltau(x, y, epsilon=INF, alternative=alternative, method=method)
    ref = stats.kendalltau(x, y, alternative=alternative, method=method)
    assert mine.pvalue == pytest.approx(ref.pvalue, rel=1e-9)
    tau_a = fedustat.kendalltau(x, y, epsilon=INF, variant="a", alternative=alternative,
                                method=method)
    if method != "asymptotic":  # without ties, Kendall's exact law is SciPy's exact test
        assert tau_a.pvalue == pytest.approx(
            stats.kendalltau(x, y, alternative=alternative, method="exact").pvalue, rel=1e-9)


def test_nan_policy_as_scipy() -> None:
    x = np.array([1.0, 2.0, np.nan, 4.0, 5.0, 6.0, 7.0])
    y = np.array([2.0, 1.0, 3.0, 5.0, 4.0, np.nan, 8.0])
    propagated = fedustat.kendalltau(x, y, epsilon=1.0, rng=0, nan_policy="propagate")
    assert math.isnan(propagated.statistic) and math.isnan(propagated.pvalue)
    assert math.isnan(stats.kendalltau(x, y).statistic)
    assert propagated.diagnostics["nan_policy"] == "propagate"
    # The default refuses, naming the column (SciPy's default propagates: see parity.md).
    with pytest.raises(ValueError, match=r"x and y contain NaN \(nan_policy='raise', the "
                                         r"default\)"):
        fedustat.kendalltau(x, y, epsilon=1.0, rng=0)
    with pytest.raises(ValueError, match=r"\): y contains NaN"):
        fedustat.kendalltau(x[:2], y[4:6], epsilon=1.0, rng=0)
    omitted = fedustat.kendalltau(x, y, epsilon=INF, nan_policy="omit")
    assert omitted.statistic == pytest.approx(
        stats.kendalltau(x, y, nan_policy="omit").statistic, rel=1e-12)
    # Privately: the release of the kept pairs, as if only they had been given.
    keep = ~(np.isnan(x) | np.isnan(y))
    private = fedustat.kendalltau(x, y, epsilon=1.0, rng=4, nan_policy="omit", variant="a")
    assert private.value == fedustat.kendalltau(x[keep], y[keep], epsilon=1.0, rng=4,
                                                variant="a").value
    with pytest.raises(ValueError, match=r"nan_policy must be one of 'propagate', 'raise', "
                                         r"'omit'; got 'drop'"):
        fedustat.kendalltau(x, y, epsilon=1.0, nan_policy="drop")


def _related(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rng.integers(0, 5, n).astype(float)
    return x, np.minimum(x + rng.integers(0, 3, n), 5).astype(float)


def test_private_tau_b_is_unbiased_with_the_delta_method_error_bar() -> None:
    # R seeded releases of one data set: the raw mean is the exact tau-b within
    # 4 sd / sqrt(R) (the ratio's second-order bias is far below that here), and the
    # spread of the releases matches the mean delta-method s.e. within 4 / sqrt(2 (R - 1))
    # (the relative s.d. of a sample s.d. of R normal draws).
    x, y = _related(200, np.random.default_rng(1))
    runs = 200
    rel = [fedustat.kendalltau(x, y, epsilon=2.0, rng=s, clip=False) for s in range(runs)]
    raw = np.array([r.value for r in rel])
    se = float(np.mean([r.std_error for r in rel]))
    assert abs(raw.mean() - stats.kendalltau(x, y).statistic) <= 4 * se / math.sqrt(runs)
    assert abs(raw.std(ddof=1) / se - 1.0) <= 4.0 / math.sqrt(2 * (runs - 1))
    first = rel[0]
    assert first.quantity == "kendall_tau_b" and first.privacy.epsilon == 2.0
    split = first.diagnostics["budget_split"]
    assert tuple(split.values()) == TAU_B_BUDGET_SPLIT and sum(split.values()) == 1.0


def test_private_tau_b_budget_is_one_composed_charge() -> None:
    x, y = _related(60, np.random.default_rng(2))
    acct = fedustat.BudgetAccountant(1.0)
    fedustat.kendalltau(x, y, epsilon=0.6, rng=0, budget=acct)
    assert acct.spent[0] == pytest.approx(0.6)
    with pytest.raises(fedustat.BudgetExceededError):
        fedustat.kendalltau(x, y, epsilon=0.6, rng=1, budget=acct)


@pytest.mark.parametrize("variant", ["b", "c"])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_private_pvalue_size_under_independence(variant: str, alternative: str) -> None:
    # Independent, heavily tied x and y: P(p <= a) <= a + 4 binomial s.d. over the runs.
    rng = np.random.default_rng(12)
    runs, n, level = 300, 30, 0.05
    levels = ([0, 1, 2, 3, 4], [0, 1, 2, 3, 4])
    pvalues = np.array([
        fedustat.kendalltau(rng.integers(0, 5, n), rng.integers(0, 5, n), epsilon=1.0,
                            rng=s, variant=variant, alternative=alternative,
                            levels=levels if variant == "c" else None).pvalue
        for s in range(runs)])
    assert np.mean(pvalues <= level) <= level + 4 * math.sqrt(level * (1 - level) / runs)


def test_private_pvalue_rejects_under_strong_dependence() -> None:
    x, y = _related(200, np.random.default_rng(5))
    assert fedustat.kendalltau(x, y, epsilon=2.0, rng=0).pvalue < 1e-3
    assert fedustat.kendalltau(x, y, epsilon=2.0, rng=0, alternative="less").pvalue > 0.5


def test_private_method_exact_is_refused_where_the_permutation_law_is_not_computed() -> None:
    x, y = _related(301, np.random.default_rng(6))
    with pytest.raises(ValueError, match=r"method='exact'.*up to n = 300.*n = 301.*"
                                         r"'asymptotic'"):
        fedustat.kendalltau(x, y, epsilon=1.0, rng=0, method="exact")
    # Above n = 300 "auto" is the asymptotic law; below it, the exact one.
    asymptotic = fedustat.kendalltau(x, y, epsilon=1.0, rng=0, method="asymptotic").pvalue
    assert asymptotic == fedustat.kendalltau(x, y, epsilon=1.0, rng=0).pvalue
    x, y = x[:40], np.random.default_rng(7).permutation(y[:40])
    exact = fedustat.kendalltau(x, y, epsilon=1.0, rng=0, method="exact", variant="a")
    auto = fedustat.kendalltau(x, y, epsilon=1.0, rng=0, variant="a")
    normal = fedustat.kendalltau(x, y, epsilon=1.0, rng=0, method="asymptotic", variant="a")
    assert exact.pvalue == auto.pvalue != normal.pvalue
    assert normal.pvalue == pytest.approx(exact.pvalue, abs=0.05)


def test_private_tau_c_needs_public_levels() -> None:
    x, y = _related(80, np.random.default_rng(7))
    with pytest.raises(ValueError, match=r"private tau-c needs its number of categories m.*"
                                         r"levels=\(x_levels, y_levels\)"):
        fedustat.kendalltau(x, y, epsilon=1.0, rng=0, variant="c")
    levels = (range(6), range(6))
    tau_c = fedustat.kendalltau(x, y, epsilon=1.0, rng=0, variant="c", levels=levels,
                                clip=False)
    tau_a = fedustat.kendalltau(x, y, epsilon=1.0, rng=0, variant="a", clip=False)
    n, m = 80, 6
    assert tau_c.value == pytest.approx(tau_a.value * (n - 1) * m / (n * (m - 1)), rel=1e-12)
    assert tau_c.std_error == pytest.approx(tau_a.std_error * (n - 1) * m / (n * (m - 1)))
    # SciPy's tau-c when every level occurs (m is then the observed one).
    exact = fedustat.kendalltau(x, y, epsilon=INF, variant="c")
    assert exact.statistic == pytest.approx(stats.kendalltau(x, y, variant="c").statistic)
    with pytest.raises(ValueError, match=r"values outside its declared levels"):
        fedustat.kendalltau(x, y, epsilon=1.0, rng=0, variant="c", levels=(range(3), range(6)))


@pytest.mark.parametrize("protocol", catalogue.protocols_for("kendall"))
def test_every_tau_a_protocol_releases_tau_b_or_refuses_naming_itself(protocol: str) -> None:
    x, y = _related(40, np.random.default_rng(8))
    params: dict = {}
    if protocol in ("ldp-quantized", "ldp-ghazi", "ghazi-shuffle"):
        params["domain"] = {"x": list(range(6)), "y": list(range(6))}
    delta = 1e-6 if protocol == "ghazi-shuffle" else 0.0
    refused = protocol in ("pairs-2pc", "umpc")
    if refused:
        with pytest.raises(ValueError, match=rf"protocol {protocol!r} releases tau-a but not "
                                             r"the fraction of pairs tied in x.*"
                                             r"variant='a', and variant='c'"):
            fedustat.kendalltau(x, y, epsilon=4.0, delta=delta, rng=0, protocol=protocol,
                                **params)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tau = fedustat.kendalltau(x, y, epsilon=4.0, delta=delta, rng=0, protocol=protocol,
                                  **params)
    assert tau.quantity == "kendall_tau_b" and tau.protocol == protocol
    assert -1.0 <= tau.value <= 1.0
    assert tau.privacy.epsilon == (INF if protocol == "exact" else 4.0)


def test_degenerate_denominator_is_flagged() -> None:
    x = np.zeros(30)
    x[0] = 1.0  # all but 29 of the 435 pairs tied in x
    y = np.arange(30.0)
    with pytest.warns(RuntimeWarning, match=r"tied in x( and y)? is within its error of 1"):
        tau = fedustat.kendalltau(x, y, epsilon=0.5, rng=0)
    assert tau.diagnostics["degenerate_denominator"] is True
    assert -1.0 <= tau.value <= 1.0


def test_old_names_keep_working() -> None:
    from fedustat import api

    assert api.kendalltau is fedustat.kendalltau
    assert api.KendallTauResult is fedustat.KendallTauResult
    assert api.kendall_tau_pvalue is fedustat.kendall_tau_pvalue
