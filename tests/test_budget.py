"""The privacy budget accountant (fedustat.privacy.budget) and estimate(..., budget=)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

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
from fedustat.privacy.budget import ADJACENCY_CLASSES, adjacency_class, gaussian_rho
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
    with pytest.raises(BudgetExceededError):
        BudgetAccountant.from_dict(data)
    with pytest.raises(ValueError, match="must be JSON"):
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
    # central-laplace is pure epsilon-DP and refuses a delta it would not use.
    delta = 0.0 if protocol == "central-laplace" else 1e-6
    rel = fedustat.estimate(kernel, data, epsilon=1.0, delta=delta, protocol=protocol,
                            rng=1, budget=acct, **params)
    assert acct.ledger[-1].guarantee == rel.privacy
    assert acct.spent[0] == pytest.approx(1.0, rel=1e-15)

