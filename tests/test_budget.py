"""The privacy budget accountant (fedustat.privacy.budget) and estimate(..., budget=)."""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import fedustat
import fedustat.api as api
from fedustat.privacy import (
    BudgetAccountant,
    BudgetExceededError,
    IncomparableGuaranteeError,
    PrivacyBudget,
    PrivacyGuarantee,
    PrivacyModel,
)
from fedustat.privacy.accounting import advanced_composition, basic_composition
from fedustat.privacy.budget import (
    ADJACENCY_CLASSES,
    BudgetFile,
    LedgerError,
    ReleaseProcess,
    ReleaseWithheldError,
    adjacency_class,
    gaussian_rho,
)
from fedustat.privacy.mechanisms import GaussianMechanism

SCORE = "replace one record's score; labels and class sizes public"


def g(eps: float, delta: float = 0.0, adjacency: str = "replace one record",
      model: PrivacyModel = PrivacyModel.CENTRAL) -> PrivacyGuarantee:
    return PrivacyGuarantee(eps, delta, model, adjacency)


# -- rules against their formulas -----------------------------------------------------------

def test_basic_rule_adds_epsilons_and_deltas() -> None:
    acct = BudgetAccountant(1.0, 1e-5)
    parts = [g(0.25, 1e-6), g(0.1), g(0.3, 2e-6)]
    for p in parts:
        acct.spend(p)
    expected = basic_composition(*parts)  # Dwork & Roth Thm 3.16
    assert acct.spent == (expected.epsilon, expected.delta)
    assert acct.spent == pytest.approx((0.65, 3e-6), rel=1e-15)
    assert acct.remaining == pytest.approx((0.35, 7e-6), rel=1e-12)
    assert PrivacyBudget is BudgetAccountant


def test_basic_rule_ten_tenths_fill_a_budget_of_one() -> None:
    acct = BudgetAccountant(1.0)
    for _ in range(10):
        acct.spend(g(0.1))
    assert acct.spent[0] == pytest.approx(1.0, rel=1e-15)
    with pytest.raises(BudgetExceededError, match="refused and nothing was spent"):
        acct.spend(g(1e-6))


def test_advanced_rule_matches_drv_for_equal_steps() -> None:
    # 200 steps of 0.01: DRV gives ~0.76 where basic composition gives 2.
    acct = BudgetAccountant(1.0, 1e-5, rule="advanced", delta_slack=1e-6)
    for _ in range(200):
        acct.spend(g(0.01))
    drv = advanced_composition(0.01, 0.0, 200, 1e-6)
    assert acct.spent == pytest.approx((drv.epsilon, drv.delta), rel=1e-12)
    assert drv.epsilon < 1.0 < 200 * 0.01


def test_advanced_rule_heterogeneous_formula_and_basic_fallback() -> None:
    acct = BudgetAccountant(5.0, 1e-5, rule="advanced", delta_slack=1e-6)
    eps = [0.02] * 50 + [0.05] * 30
    for e in eps:
        acct.spend(g(e, 1e-8))
    # DRV 2010 Thm III.3 with per-step ranges.
    adv = (math.sqrt(2 * math.log(1e6) * sum(e * e for e in eps))
           + sum(e * math.expm1(e) for e in eps))
    assert adv < sum(eps)
    assert acct.spent == pytest.approx((adv, 80e-8 + 1e-6), rel=1e-12)
    # Few large steps: basic composition is the smaller valid bound.
    few = BudgetAccountant(5.0, 1e-5, rule="advanced", delta_slack=1e-6)
    few.spend(g(1.0))
    few.spend(g(1.5))
    assert few.spent == (2.5, 0.0)


def test_advanced_remaining_is_the_largest_release_that_fits() -> None:
    acct = BudgetAccountant(1.0, 1e-5, rule="advanced", delta_slack=1e-6)
    assert acct.remaining == (1.0, pytest.approx(9e-6, rel=1e-12))
    for _ in range(100):
        acct.spend(g(0.01))
    left, delta_left = acct.remaining
    assert delta_left == pytest.approx(1e-5 - 1e-6, rel=1e-12)
    acct.check(g(left))
    with pytest.raises(BudgetExceededError):
        acct.check(g(left * (1 + 1e-9)))
    acct.spend(g(left))
    # Full: the sqrt term grows like x^2 in one more small x, so only a sliver is left.
    assert acct.remaining[0] < 1e-5
    with pytest.raises(BudgetExceededError):
        acct.check(g(1e-4))


def test_zcdp_rule_pure_and_gaussian_releases() -> None:
    delta = 1e-6
    acct = BudgetAccountant(3.0, delta, rule="zcdp")
    acct.spend(g(0.3))
    acct.spend(g(0.5, 1e-7), gaussian=True)
    acct.spend(g(0.2, 1e-7), rho=0.01)
    sigma = GaussianMechanism(1.0, 0.5, 1e-7).sigma
    rho = 0.3**2 / 2 + 1 / (2 * sigma**2) + 0.01  # Bun & Steinke Props 1.4, 1.6
    assert acct.spent_rho == pytest.approx(rho, rel=1e-12)
    # Bun & Steinke Prop 1.3.
    assert acct.spent == pytest.approx(
        (rho + 2 * math.sqrt(rho * math.log(1 / delta)), delta), rel=1e-12)
    # remaining: the largest pure release; its rho fills the budget exactly.
    left, _ = acct.remaining
    acct.check(g(left * (1 - 1e-9)))
    with pytest.raises(BudgetExceededError):
        acct.check(g(left * (1 + 1e-6)))


def test_zcdp_group_privacy_multiplies_rho_by_k_squared() -> None:
    acct = BudgetAccountant(5.0, 1e-6, rule="zcdp", adjacency="record")
    acct.spend(g(0.3, adjacency="add or remove one record"))
    acct.spend(g(0.5, 1e-8, adjacency="add or remove one record"), gaussian=True)
    # Bun & Steinke Prop 1.9: k = 2 steps of add/remove make one replacement.
    assert acct.spent_rho == pytest.approx(4 * (0.3**2 / 2 + gaussian_rho(0.5, 1e-8)),
                                           rel=1e-12)
    back = BudgetAccountant.from_json(acct.to_json())
    assert back.spent_rho == pytest.approx(acct.spent_rho, rel=1e-15)


def test_gaussian_rho_does_not_depend_on_the_sensitivity() -> None:
    for sens in (0.1, 1.0, 7.0):
        sigma = GaussianMechanism(sens, 0.8, 1e-6).sigma
        assert gaussian_rho(0.8, 1e-6) == pytest.approx(sens**2 / (2 * sigma**2), rel=1e-9)


def test_zcdp_beats_basic_for_many_small_releases() -> None:
    basic, zcdp = BudgetAccountant(1.0, 1e-6), BudgetAccountant(1.0, 1e-6, rule="zcdp")
    for _ in range(150):
        zcdp.spend(g(0.01))
    assert zcdp.spent[0] < 1.0
    with pytest.raises(BudgetExceededError):
        for _ in range(150):
            basic.spend(g(0.01))


# -- refusal before spending --------------------------------------------------------------

@pytest.mark.parametrize("rule,kwargs", [("basic", {}), ("advanced", {"delta_slack": 1e-7}),
                                         ("zcdp", {})])
def test_refusal_leaves_the_state_unchanged(rule: str, kwargs: dict) -> None:
    acct = BudgetAccountant(3.0, 1e-6, rule=rule, **kwargs)
    acct.spend(g(0.3), name="first")
    before = acct.to_json()
    with pytest.raises(BudgetExceededError, match="over the total"):
        acct.spend(g(5.0), name="too much")
    with pytest.raises(BudgetExceededError):
        acct.check(g(5.0))
    assert acct.to_json() == before
    assert [e.name for e in acct.ledger] == ["first"]


# -- adjacency and model table ------------------------------------------------------------

@pytest.mark.parametrize("release,budget,factor", [
    ("replace one record", SCORE, 1),
    ("replace one record (n public)", SCORE, 1),
    ("replace one record (score and label; n public)", "replace one record", 1),
    ("replace one record", "label", 1),
    ("add or remove one record", "replace one record", 2),
    ("add or remove one record", SCORE, 2),
    ("some new relation", "some new relation", 1),
])
def test_comparable_adjacencies_compose_with_their_factor(release: str, budget: str,
                                                          factor: int) -> None:
    acct = BudgetAccountant(1.0, 1e-3, adjacency=budget)
    cost = acct.spend(g(0.2, 1e-5, adjacency=release))
    # Group privacy (Vadhan 2017, Lemma 2.2).
    assert cost.epsilon == pytest.approx(factor * 0.2, rel=1e-15)
    assert cost.delta == pytest.approx(factor * math.exp((factor - 1) * 0.2) * 1e-5, rel=1e-12)
    assert cost.adjacency == budget


@pytest.mark.parametrize("release,budget,why", [
    (SCORE, "label", "does not protect the labels"),
    ("label", SCORE, "does not protect the scores"),
    (SCORE, "replace one record", "labels are public"),
    ("replace one record", "add or remove one record", "n is public"),
    ("some new relation", "replace one record", "not in the table"),
])
def test_incomparable_adjacencies_are_refused_with_the_reason(release: str, budget: str,
                                                              why: str) -> None:
    acct = BudgetAccountant(1.0, adjacency=budget)
    with pytest.raises(IncomparableGuaranteeError, match=why):
        acct.spend(g(0.1, adjacency=release))
    assert acct.ledger == ()


def test_protocol_adjacencies_are_in_the_table() -> None:
    from fedustat.privacy.randomizers import _LDP_ADJACENCY
    from fedustat.protocols.ecdf.hosmer_lemeshow import HL_ADJACENCY
    from fedustat.protocols.ecdf.release import ECDF_ADJACENCY
    from fedustat.protocols.ecdf.roc import ROC_ADJACENCY
    from fedustat.protocols.fedauc.protocol import LABEL_ADJACENCY
    from fedustat.protocols.local.auc_tree import ADJACENCY as TREE_ADJACENCY
    from fedustat.stats import kernels

    expected = {ROC_ADJACENCY: "record", HL_ADJACENCY: "record", ECDF_ADJACENCY: "record",
                _LDP_ADJACENCY: "record", kernels.LABELS_PUBLIC: "score",
                TREE_ADJACENCY: "score", LABEL_ADJACENCY: "label",
                kernels.kendall_tau_kernel("a").adjacency: "record"}
    stream = fedustat.protocols.ecdf.dp_prefix_sums([0.5, 1.0], epsilon=1.0, bounds=(0, 2),
                                                    rng=0).privacy.adjacency
    expected[stream] = "record"  # the Laplace running sums, bounds in the relation
    for adjacency, cls in expected.items():
        assert adjacency_class(adjacency) == cls, adjacency
    # The zCDP running sums state an (eps, delta) conversion: not in the table.
    assert adjacency_class(stream + "; 0.5-zCDP") is None
    assert set(ADJACENCY_CLASSES.values()) == {"record", "score", "label", "add-remove"}


def test_models_weaker_than_the_budget_are_refused() -> None:
    acct = BudgetAccountant(1.0)
    acct.spend(g(0.1, model=PrivacyModel.LOCAL))
    with pytest.raises(IncomparableGuaranteeError, match="computational guarantee is weaker"):
        acct.spend(g(0.1, model=PrivacyModel.COMPUTATIONAL))
    with pytest.raises(IncomparableGuaranteeError, match="non-private release"):
        acct.spend(PrivacyGuarantee.none())
    comp = BudgetAccountant(1.0, model="computational")
    comp.spend(g(0.1, model=PrivacyModel.COMPUTATIONAL))
    comp.spend(g(0.1))
    assert comp.spent == (0.2, 0.0)


# -- JSON ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rule,kwargs", [("basic", {}), ("advanced", {"delta_slack": 1e-7}),
                                         ("zcdp", {})])
def test_json_round_trip(rule: str, kwargs: dict) -> None:
    acct = BudgetAccountant(6.0, 1e-6, rule=rule, adjacency=SCORE, **kwargs)
    acct.spend(g(0.3, adjacency=SCORE), name="auc")
    acct.spend(g(0.2, adjacency="add or remove one record"), name="tau")
    if rule == "zcdp":
        acct.spend(g(0.4, 1e-8), name="gauss", gaussian=True)
    back = BudgetAccountant.from_json(acct.to_json())
    assert back.to_dict() == acct.to_dict()
    assert back.spent == acct.spent
    assert back.remaining == acct.remaining
    assert [e.name for e in back.ledger] == [e.name for e in acct.ledger]
    json.loads(acct.to_json())  # plain JSON


def test_tampered_budget_file_is_refused() -> None:
    acct = BudgetAccountant(1.0)
    acct.spend(g(0.5))
    data = acct.to_dict()
    data["ledger"].append(dict(data["ledger"][0], epsilon=0.9))
    with pytest.raises(LedgerError, match=r"spends more than its total: ledger row 2"):
        BudgetAccountant.from_dict(data)
    with pytest.raises(ValueError, match="not valid JSON"):
        BudgetAccountant.from_json("{not json")
    with pytest.raises(ValueError, match="misses the field"):
        BudgetAccountant.from_dict({"epsilon": 1.0})


# -- bad inputs ---------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,exc,msg", [
    ({"epsilon": 0.0}, ValueError, "epsilon must be > 0"),
    ({"epsilon": math.inf}, ValueError, "epsilon"),
    ({"epsilon": 1.0, "delta": 1.0}, ValueError, r"delta must be in \[0, 1\)"),
    ({"epsilon": 1.0, "rule": "renyi"}, ValueError, "rule must be one of basic"),
    ({"epsilon": 1.0, "delta": 1e-5, "rule": "advanced"}, ValueError, "needs delta_slack"),
    ({"epsilon": 1.0, "delta": 1e-5, "rule": "advanced", "delta_slack": 1e-4}, ValueError,
     r"delta_slack must be in \(0, delta"),
    ({"epsilon": 1.0, "delta_slack": 1e-6}, ValueError, "takes none"),
    ({"epsilon": 1.0, "rule": "zcdp"}, ValueError, "needs delta > 0"),
    ({"epsilon": 1.0, "model": "quantum"}, ValueError, "model must be one of"),
    ({"epsilon": 1.0, "model": "none"}, ValueError, "non-private model"),
    ({"epsilon": 1.0, "adjacency": ""}, TypeError, "non-empty string"),
])
def test_bad_budgets(kwargs: dict, exc: type, msg: str) -> None:
    with pytest.raises(exc, match=msg):
        BudgetAccountant(**kwargs)


def test_bad_spends() -> None:
    acct = BudgetAccountant(1.0)
    with pytest.raises(TypeError, match="must be a PrivacyGuarantee, got tuple"):
        acct.spend((0.1, 0.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rho is a zCDP cost"):
        acct.spend(g(0.1), rho=0.01)
    zcdp = BudgetAccountant(1.0, 1e-6, rule="zcdp")
    with pytest.raises(IncomparableGuaranteeError, match="does not determine a zCDP rho"):
        zcdp.spend(g(0.1, 1e-7))
    with pytest.raises(ValueError, match="rho must be > 0"):
        zcdp.spend(g(0.1), rho=-1.0)
    assert acct.ledger == () and zcdp.ledger == ()


# -- fedustat.estimate(..., budget=) --------------------------------------------------------

def _auc_data(seed: int = 0, n: int = 120) -> tuple[np.ndarray, np.ndarray]:
    gen = np.random.default_rng(seed)
    y = gen.integers(0, 2, n)
    return gen.normal(size=n) + y, y


def test_estimate_spends_the_release_guarantee() -> None:
    s, y = _auc_data()
    kernel = fedustat.stats.auc_kernel()
    acct = BudgetAccountant(1.0, adjacency=SCORE)
    rel = fedustat.estimate(kernel, kernel.pack(s, y), epsilon=0.4,
                            protocol="central-laplace", rng=1, budget=acct)
    assert acct.spent == (0.4, 0.0)
    assert acct.ledger[0].guarantee == rel.privacy
    assert acct.ledger[0].name == "auc (central-laplace)"
    # Kendall's tau (replace one record) composes into the same budget.
    tau = fedustat.stats.kendall_tau_kernel("a")
    fedustat.estimate(tau, tau.pack(s, s * 2 + 1), epsilon=0.5, protocol="central-laplace",
                      rng=2, budget=acct)
    assert acct.spent[0] == pytest.approx(0.9, rel=1e-15)


def test_estimate_over_budget_never_runs_the_protocol(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    s, y = _auc_data()
    kernel = fedustat.stats.auc_kernel()
    acct = BudgetAccountant(1.0, adjacency=SCORE)
    acct.spend(g(0.8, adjacency=SCORE), name="earlier")
    calls: list[str] = []
    real = api._release

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(str(kwargs.get("protocol")))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "_release", spy)
    with pytest.raises(BudgetExceededError, match="refused"):
        fedustat.estimate(kernel, kernel.pack(s, y), epsilon=0.5,
                          protocol="central-laplace", rng=1, budget=acct)
    # A label-DP release says nothing about scores: refused before it runs too.
    with pytest.raises(IncomparableGuaranteeError, match="does not protect the scores"):
        fedustat.estimate(kernel, kernel.pack(s, y), epsilon=0.1,
                          protocol="fedauc-laplace", rng=1, budget=acct)
    with pytest.raises(IncomparableGuaranteeError, match="non-private"):
        fedustat.estimate(kernel, kernel.pack(s, y), epsilon=math.inf, protocol="exact",
                          budget=acct)
    assert calls == []
    assert [e.name for e in acct.ledger] == ["earlier"]
    fedustat.estimate(kernel, kernel.pack(s, y), epsilon=0.2, protocol="central-laplace",
                      rng=1, budget=acct)
    assert calls == ["central-laplace"]


def test_estimate_gaussian_release_spends_rho() -> None:
    s, y = _auc_data(3, 200)
    kernel = fedustat.stats.auc_kernel()
    acct = BudgetAccountant(3.0, 1e-5, rule="zcdp", adjacency="label")
    fedustat.estimate(kernel, kernel.pack(s, y), epsilon=1.0, delta=1e-6,
                      protocol="fedauc-gaussian", rng=4, budget=acct)
    assert acct.spent_rho == pytest.approx(gaussian_rho(1.0, 1e-6), rel=1e-12)


def test_docs_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "budget.md").read_text()
    blocks = [b.split("```")[0] for b in text.split("```python\n")[1:]]
    assert len(blocks) == 2
    exec(compile(blocks[0], "docs/budget.md", "exec"), {})
    out = capsys.readouterr().out
    assert "refused:" in out and "nothing was spent" in out
    # The one-call function spent through budget= under its statistic's name.
    assert "['auc (central-laplace)', 'kendall_tau_a (central-laplace)', " \
           "'auc (central-laplace)']" in out
    # One data set: AUC, tau unpacked, a median and a ROC curve under one budget, then the
    # refusal; the page quotes its output, which must be what it prints.
    exec(compile(blocks[1], "docs/budget.md", "exec"), {})
    out = capsys.readouterr().out
    quoted = text.split("prints\n\n", 1)[1].split("\n\n", 1)[0]
    assert out.splitlines() == [line[4:] for line in quoted.splitlines()]


# The secure protocols warn that undeclared bounds mean the fixed-point encoding.
@pytest.mark.filterwarnings("ignore:auc. no bounds declared:UserWarning")
@pytest.mark.parametrize("kernel_name,protocol,params", [
    ("auc", "central-laplace", {}),
    ("auc", "fedauc-adaptive", {}),
    ("auc", "fedauc-gaussian", {}),
    ("auc", "fedauc-laplace", {}),
    ("auc", "fedauc-laplace-global", {}),
    ("auc", "fedauc-laplace-local", {}),
    ("auc", "fedauc-rr", {}),
    ("auc", "ldp-quantized", {"bounds": (0.0, 1.0)}),
    ("auc", "ldp-tree", {"bounds": (0.0, 1.0)}),
    ("auc", "pairs-2pc", {}),
    ("auc", "umpc", {}),
    ("gini", "ghazi-shuffle", {}),
    ("gini", "ldp-ghazi", {}),
])
def test_predicted_guarantee_matches_the_release(kernel_name: str, protocol: str,
                                                 params: dict) -> None:
    # estimate() checks a predicted guarantee before the run; the release's own guarantee
    # must then be accepted by spend (else the check would have let a refused release run).
    gen = np.random.default_rng(5)
    y = gen.integers(0, 2, 64)
    s = gen.uniform(size=64)
    if kernel_name == "auc":
        kernel = fedustat.stats.auc_kernel()
        data = kernel.pack(s, y)
    else:
        kernel = fedustat.stats.gini_kernel((0.0, 1.0))
        data = kernel.pack(s)
    model = {entry.name: entry.model for entry in fedustat.protocols.registry.available()}
    adjacency = "label" if model[protocol] is PrivacyModel.LABEL else kernel.adjacency
    acct = BudgetAccountant(10.0, 1e-3, adjacency=adjacency, model="computational")
    # A pure epsilon-DP protocol refuses a delta it would not use.
    delta = 1e-6 if protocol in ("fedauc-gaussian", "ghazi-shuffle") else 0.0
    rel = fedustat.estimate(kernel, data, epsilon=1.0, delta=delta, protocol=protocol,
                            rng=1, budget=acct, **params)
    assert acct.ledger[-1].guarantee == rel.privacy
    assert acct.spent[0] == pytest.approx(1.0, rel=1e-15)



# -- the planned guarantee: what estimate checks before any party runs -----------------------

@pytest.mark.filterwarnings("ignore:auc. no bounds declared:UserWarning")
@pytest.mark.parametrize("protocol", [e.name for e in fedustat.protocols.registry.available()
                                      if e.name != "exact"])
def test_every_protocol_plans_the_guarantee_it_delivers(protocol: str) -> None:
    # The check before a run uses Protocol.planned_guarantee; it must be the release's own
    # (epsilon, delta, model, relation), e.g. ghazi-shuffle's delta ~1e-13 at delta=0.
    gen = np.random.default_rng(7)
    y = gen.integers(0, 2, 48)
    s = gen.uniform(size=48)
    auc = fedustat.stats.auc_kernel()
    gini = fedustat.stats.gini_kernel((0.0, 1.0))
    kernel, data = (gini, gini.pack(s)) if protocol in ("ghazi-shuffle", "ldp-ghazi") \
        else (auc, auc.pack(s, y))
    params = {"bounds": (0.0, 1.0)} if protocol in ("ldp-quantized", "ldp-tree") else {}
    delta = 1e-6 if protocol == "fedauc-gaussian" else 0.0
    planned = fedustat.protocols.registry.make(protocol, kernel, epsilon=0.7, delta=delta,
                                               **params).planned_guarantee(len(data))
    release = fedustat.estimate(kernel, data, epsilon=0.7, delta=delta, protocol=protocol,
                                rng=3, **params)
    assert planned == release.privacy
    if protocol == "ghazi-shuffle":
        assert 0.0 < planned.delta < 1e-9


def test_ghazi_shuffle_delta_is_refused_before_it_runs(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    # Before: the check used the caller's delta = 0, the protocol ran, and spend refused
    # its delta ~1e-13 after the run.
    calls: list[str] = []
    real = api._release

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(str(kwargs.get("protocol")))
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "_release", spy)
    x = np.random.default_rng(2).uniform(size=60)
    pure = BudgetAccountant(1.0)
    with pytest.raises(BudgetExceededError, match=r"this release \(0\.5, [0-9.]+e-1[0-9]\)"):
        fedustat.gini_mean_difference(x, bounds=(0, 1), epsilon=0.5, protocol="ghazi-shuffle",
                                      rng=1, budget=pure)
    assert calls == [] and pure.ledger == ()
    approximate = BudgetAccountant(1.0, 1e-9)
    release = fedustat.gini_mean_difference(x, bounds=(0, 1), epsilon=0.5,
                                            protocol="ghazi-shuffle", rng=1, budget=approximate)
    assert calls == ["ghazi-shuffle"]
    assert approximate.ledger[0].guarantee == release.privacy
    assert approximate.spent == (0.5, release.privacy.delta)


@pytest.mark.parametrize("statistic,protocol,options", [
    ("ecdf", "dp-ecdf", {}), ("ecdf", "dp-ecdf-smoothed", {}), ("ecdf", "ecdf-secagg", {}),
    ("ecdf", "ecdf-fss", {}), ("quantile", "dp-quantiles", {}), ("median", "dp-ecdf", {}),
    ("quantile", "ecdf-secagg", {}), ("roc", "dp-roc", {}), ("roc", "dp-roc-smoothed", {}),
    ("hl", "dp-ecdf-hl", {}),
])
def test_curve_releases_are_checked_with_what_they_deliver(statistic: str, protocol: str,
                                                           options: dict) -> None:
    from fedustat.curve_dispatch import release_curve

    gen = np.random.default_rng(4)
    score = gen.uniform(size=200)
    label = (gen.uniform(size=200) < score).astype(int)
    columns = [score, label] if statistic in ("roc", "hl") else [score]
    thresholds = None if statistic == "hl" else np.linspace(0.0, 1.0, 16)
    acct = BudgetAccountant(5.0, model="computational")
    release = release_curve(statistic, columns, epsilon=0.5, protocol=protocol,
                            thresholds=thresholds, rng=2, budget=acct, **options)
    # after_release would raise ReleaseWithheldError had the check been below the release.
    assert [e.status for e in acct.ledger] == ["spent"]
    assert acct.ledger[0].guarantee == release.privacy


# -- reservations -------------------------------------------------------------------------------

def test_reservations_count_until_committed_or_cancelled() -> None:
    acct = BudgetAccountant(1.0, 1e-6)
    held = acct.reserve(g(0.6, 1e-7), name="auc")
    assert acct.spent == (0.6, 1e-7) and held.status == "reserved"
    with pytest.raises(BudgetExceededError):
        acct.reserve(g(0.5))  # the reservation counts
    assert acct.commit(held, g(0.5), name="auc (central-laplace)").epsilon == 0.5
    assert [(e.name, e.status) for e in acct.ledger] == [("auc (central-laplace)", "spent")]
    assert acct.spent == (0.5, 0.0)
    with pytest.raises(ValueError, match="not an open reservation"):
        acct.commit(held, g(0.5))
    second = acct.reserve(g(0.5))
    acct.cancel(second)
    assert acct.spent == (0.5, 0.0)
    with pytest.raises(ValueError, match="not an open reservation"):
        acct.cancel(second)


@pytest.mark.parametrize("delivered,charged", [
    (g(0.4, 1e-8), (0.4, 1e-8)),       # a delta it did not reserve
    (g(0.45), (0.45, 0.0)),             # a larger epsilon
    (g(0.25, adjacency="add or remove one record"), (0.5, 0.0)),  # group privacy: k = 2
])
def test_a_release_that_delivers_more_than_reserved_is_withheld_and_charged(
        delivered: PrivacyGuarantee, charged: tuple[float, float]) -> None:
    acct = BudgetAccountant(1.0, 1e-6)
    held = acct.reserve(g(0.4), name="tau")
    with pytest.raises(ReleaseWithheldError, match=r"^tau delivered .* withheld"):
        acct.commit(held, delivered)
    assert [e.status for e in acct.ledger] == ["withheld"]
    assert acct.spent == pytest.approx(charged, rel=1e-12)


def test_an_unpriceable_delivered_guarantee_charges_the_whole_budget() -> None:
    acct = BudgetAccountant(1.0, adjacency="score")
    held = acct.reserve(g(0.3, adjacency="score"), name="auc")
    with pytest.raises(ReleaseWithheldError, match=r"cannot price .*whole budget"):
        acct.commit(held, g(0.3, adjacency="label"))
    assert acct.remaining == (0.0, 0.0)
    back = BudgetAccountant.from_json(acct.to_json())  # a withheld row past the total loads
    assert back.to_dict() == acct.to_dict()


def test_one_call_release_over_its_checked_guarantee_is_never_returned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A protocol that plans less than it delivers: the release is withheld, and charged.
    from fedustat.protocols.central import CentralLaplace

    monkeypatch.setattr(CentralLaplace, "planned_guarantee",
                        lambda self, n_rows=None: replace(self.guarantee, epsilon=0.1))
    s, y = _auc_data()
    acct = BudgetAccountant(1.0, adjacency=SCORE)
    with pytest.raises(ReleaseWithheldError, match=r"epsilon=0\.4.*checked before it ran"):
        fedustat.roc_auc_score(y, s, epsilon=0.4, rng=1, budget=acct)
    assert [(e.status, e.cost.epsilon) for e in acct.ledger] == [("withheld", 0.4)]


def test_budget_file_reserves_before_the_run_and_releases_a_failed_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "b.json"
    BudgetFile.create(path, BudgetAccountant(1.0, adjacency="score"))
    seen: list[list[str]] = []
    real = api._release

    def spy(*args: object, **kwargs: object) -> object:
        # What the file says while the parties run.
        seen.append([row["status"] for row in json.loads(path.read_text())["ledger"]])
        if kwargs.get("epsilon") == 0.2:
            raise ValueError("the run failed")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(api, "_release", spy)
    s, y = _auc_data()
    with BudgetFile(path) as budget:
        with budget.attempt():
            fedustat.roc_auc_score(y, s, epsilon=0.4, rng=1, budget=budget)
        with pytest.raises(ValueError, match="the run failed"), budget.attempt():
            fedustat.roc_auc_score(y, s, epsilon=0.2, rng=1, budget=budget)
        with pytest.raises(BudgetExceededError), budget.attempt():
            fedustat.roc_auc_score(y, s, epsilon=0.7, rng=1, budget=budget)
    assert seen == [["reserved"], ["spent", "reserved"]]  # the third never ran
    rows = json.loads(path.read_text())["ledger"]
    assert [(r["name"], r["epsilon"], r["status"]) for r in rows] == [
        ("auc (central-laplace)", 0.4, "spent")]
    assert rows[0]["process"]["pid"] == os.getpid()


def test_budget_file_lock_makes_a_second_holder_wait_and_read_afresh(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    BudgetFile.create(path, BudgetAccountant(1.0))
    first_in, waiting, second_done = (threading.Event() for _ in range(3))
    outcome: list[object] = []

    def second() -> None:
        first_in.wait(60)
        try:
            with BudgetFile(path, on_wait=waiting.set) as budget:
                budget.before_release(g(0.6), name="second")
        except BudgetExceededError as exc:
            outcome.append(exc)
        finally:
            second_done.set()

    worker = threading.Thread(target=second)
    worker.start()
    try:
        with BudgetFile(path) as budget:
            first_in.set()
            assert waiting.wait(60), "the second holder did not wait for the lock"
            budget.before_release(g(0.6), name="first")
            # The second holder is still waiting: it has not read or written anything.
            assert not second_done.is_set()
            budget.after_release(g(0.6), name="first")
    finally:
        worker.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], BudgetExceededError)
    acct, busy = BudgetFile.read(path)
    assert [(e.name, e.status) for e in acct.ledger] == [("first", "spent")] and not busy


def test_a_killed_process_leaves_its_reservation_counted(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    BudgetFile.create(path, BudgetAccountant(1.0))
    script = (
        "import os, signal, sys\n"
        "from fedustat import PrivacyGuarantee\n"
        "from fedustat.privacy.budget import BudgetFile\n"
        "with BudgetFile(sys.argv[1]) as budget:\n"
        "    budget.before_release(PrivacyGuarantee(0.7), name='auc (central-laplace)')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)  # killed during its run\n")
    child = subprocess.run([sys.executable, "-c", script, str(path)], timeout=120,
                           capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL, child.stderr
    acct, busy = BudgetFile.read(path)
    assert not busy  # the kernel released the dead process's lock
    (row,) = acct.ledger
    assert (row.status, row.cost.epsilon, row.name) == ("reserved", 0.7,
                                                        "auc (central-laplace)")
    assert row.process is not None and row.process.pid > 0
    with BudgetFile(path) as budget:
        assert budget.stale == budget.ledger
        assert budget.remaining == pytest.approx((0.3, 0.0))  # counted (conservative)
        with pytest.raises(BudgetExceededError):
            budget.before_release(g(0.5))
    assert BudgetFile.read(path)[0].ledger == acct.ledger  # nothing removed it


# -- ledgers edited by hand or corrupted -------------------------------------------------------

def _valid_ledger(rule: str) -> dict:
    kwargs = {"delta_slack": 1e-7} if rule == "advanced" else {}
    acct = BudgetAccountant(4.0, 1e-5, rule=rule, adjacency=SCORE, **kwargs)
    acct.spend(g(0.3, adjacency=SCORE), name="auc")
    if rule == "zcdp":
        acct.spend(g(0.4, 1e-8), name="gauss", gaussian=True)
    else:
        acct.spend(g(0.2, 1e-7, adjacency="add or remove one record"), name="tau")
    held = acct.reserve(g(0.25), name="median",
                        process=ReleaseProcess(4242, "host", "2024-05-01T10:00:00+00:00"))
    assert held.status == "reserved"
    return acct.to_dict()


@pytest.mark.parametrize("edit,message", [
    (lambda d: d.pop("rule"), r"the budget misses the field\(s\) rule"),
    (lambda d: d["ledger"].__setitem__(0, None), r"ledger row 1 must be an object, got null"),
    (lambda d: d["ledger"][0].pop("epsilon"), r"ledger row 1 misses the field\(s\) epsilon"),
    (lambda d: d["ledger"][1].__setitem__("epsilon", "0.2"),
     r"ledger row 2 \('gauss'\): epsilon must be a number, got str '0.2'"),
    (lambda d: d["ledger"][0].__setitem__("epsilon", -0.3),
     r"ledger row 1 \('auc'\): epsilon must be > 0"),
    (lambda d: d["ledger"][0].__setitem__("rho", 0.001),
     r"ledger row 1 \('auc'\): rho 0.001 does not match its epsilon 0.3"),
    (lambda d: d["ledger"][1].__setitem__("rho", 0.001),
     r"ledger row 2 \('gauss'\): rho 0.001 does not match its epsilon 0.4 and delta 1e-08"),
    (lambda d: d["ledger"][2].pop("process"), r"a reserved row must name the process"),
    (lambda d: d["ledger"][2]["process"].__setitem__("pid", True),
     r"process pid must be a positive integer, got True"),
    (lambda d: d["ledger"][0].__setitem__("status", "done"), r"status must be one of spent"),
    (lambda d: d.__setitem__("epsilon", True), r"the budget's total: epsilon must be a number"),
    (lambda d: d.__setitem__("ledger", {}), r"field 'ledger' must be a list of rows, got dict"),
    (lambda d: d["ledger"][0].__setitem__("model", "quantum"), r"model must be one of local"),
    (lambda d: d.__setitem__("epsilom", 1.0), r"the budget has unknown field\(s\) epsilom"),
    (lambda d: d["ledger"].append(dict(d["ledger"][0], epsilon=3.9, rho=3.9**2 / 2)),
     r"the ledger spends more than its total: ledger row 4 \('auc'\)"),
])
def test_edited_ledgers_are_refused_with_one_line_naming_the_row(edit: Any,
                                                                 message: str) -> None:
    data = _valid_ledger("zcdp")
    edit(data)
    with pytest.raises(LedgerError, match=message) as info:
        BudgetAccountant.from_dict(data)
    assert "\n" not in str(info.value)


def test_truncated_and_non_json_files_are_refused() -> None:
    text = json.dumps(_valid_ledger("basic"))
    for cut in (0, 1, len(text) // 2, len(text) - 1):
        with pytest.raises(LedgerError, match="not valid JSON"):
            BudgetAccountant.from_json(text[:cut])
    with pytest.raises(LedgerError, match="NaN is not a number a budget can hold"):
        BudgetAccountant.from_json(text.replace('"epsilon": 4.0', '"epsilon": NaN', 1))
    with pytest.raises(LedgerError, match="a budget must be a JSON object, got list"):
        BudgetAccountant.from_json("[]")


def _paths(data: dict) -> list[tuple]:
    """Every (container, key) of a ledger dict, nested rows and processes included."""
    found: list[tuple] = [(data, k) for k in data]
    for row in data["ledger"]:
        found += [(row, k) for k in row]
        if isinstance(row.get("process"), dict):
            found += [(row["process"], k) for k in row["process"]]
    return found


_JSON_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 10**400),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(1e-9, 10.0),
    st.sampled_from(["", "basic", "zcdp", "advanced", "central", "local", "label", "none",
                     "computational", "spent", "reserved", "withheld", "epsilon", "gaussian",
                     "given", "score", "record", "add or remove one record", SCORE, "x"]),
    st.text(max_size=5), st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["pid", "host", "started", "epsilon"]),
                    st.one_of(st.integers(-1, 5), st.text(max_size=3)), max_size=3))


@st.composite
def _mutated(draw: st.DrawFn) -> dict:
    data = copy.deepcopy(_valid_ledger(draw(st.sampled_from(["basic", "advanced", "zcdp"]))))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["set", "delete", "add", "row", "scale"]))
        paths = _paths(data) if isinstance(data.get("ledger"), list) and all(
            isinstance(r, dict) for r in data["ledger"]) else [(data, k) for k in data]
        if not paths:
            break
        where, key = draw(st.sampled_from(paths))
        if kind == "set":
            where[key] = draw(_JSON_VALUES)
        elif kind == "delete":
            del where[key]
        elif kind == "add":
            where[draw(st.sampled_from(["extra", "rho", "rho_from", "status", "process",
                                        "delta_slack"]))] = draw(_JSON_VALUES)
        elif kind == "scale" and isinstance(where[key], float) and not isinstance(
                where[key], bool):
            where[key] = where[key] * draw(st.sampled_from([0.5, 1.0 + 1e-6, 2.0, 100.0]))
        elif kind == "row" and isinstance(data.get("ledger"), list) and data["ledger"]:
            i = draw(st.integers(0, len(data["ledger"]) - 1))
            action = draw(st.sampled_from(["drop", "copy", "null"]))
            if action == "drop":
                del data["ledger"][i]
            elif action == "copy":
                data["ledger"].append(copy.deepcopy(data["ledger"][i]))
            else:
                data["ledger"][i] = None
    return data


def _without_rho() -> dict:
    """A zCDP row written before rho was stored: read with rho = epsilon^2 / 2."""
    data = _valid_ledger("zcdp")
    for key in ("rho", "rho_from"):
        del data["ledger"][0][key]
    return data


@settings(deadline=None, max_examples=400, derandomize=True, database=None)
@given(_mutated())
@example(_without_rho())
def test_a_mutated_ledger_loads_faithfully_or_is_refused_with_a_message(data: dict) -> None:
    original = copy.deepcopy(data)
    try:
        acct = BudgetAccountant.from_dict(data)
    except ValueError as exc:  # LedgerError; any other exception fails the test
        assert isinstance(exc, LedgerError)
        assert str(exc) and "\n" not in str(exc)
        return
    assert data == original  # reading does not change its input
    written = acct.to_dict()
    # Loaded as it was written: no field coerced, dropped or invented.
    for key in ("epsilon", "delta", "rule", "adjacency", "model"):
        assert written[key] == data[key]
    assert written["delta_slack"] == data.get("delta_slack")
    assert len(written["ledger"]) == len(data["ledger"])
    for got, given_row in zip(written["ledger"], data["ledger"], strict=True):
        for key, value in given_row.items():
            if key == "rho" and value is not None:
                assert got[key] == pytest.approx(value, rel=1e-12)
            elif key == "rho_from" and value is None:
                # A row without its rho's source (written before it was recorded) is
                # read with the source its epsilon and delta imply, and written with it.
                assert got.get(key) in (None, "epsilon", "given")
            else:
                assert got.get(key) == value  # null and absent are the same
    # And it reads back to the same budget, within its total unless a row was withheld.
    again = BudgetAccountant.from_dict(written)
    assert again.to_dict() == written
    if all(e.status != "withheld" for e in acct.ledger):
        assert acct._fits(*acct.spent)


@settings(deadline=None, max_examples=150, derandomize=True, database=None)
@given(st.data())
def test_a_damaged_ledger_text_loads_or_is_refused_with_a_message(data: st.DataObject
                                                                  ) -> None:
    text = json.dumps(_valid_ledger(data.draw(st.sampled_from(["basic", "zcdp"]))), indent=2)
    cut = data.draw(st.integers(0, len(text)))
    at = data.draw(st.integers(0, len(text) - 1))
    damaged = data.draw(st.sampled_from([
        text[:cut], text[:at] + data.draw(st.characters(codec="ascii")) + text[at + 1:],
        text[:at] + text[at + 1:]]))
    try:
        acct = BudgetAccountant.from_json(damaged)
    except ValueError as exc:
        assert isinstance(exc, LedgerError) and str(exc) and "\n" not in str(exc)
    else:
        assert acct.to_dict() == BudgetAccountant.from_dict(json.loads(damaged)).to_dict()
