"""Tests for fedustat.privacy.accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedustat.privacy import (
    PrivacyGuarantee,
    PrivacyModel,
    advanced_composition,
    basic_composition,
    per_step_budget_advanced,
    split_budget,
)


def test_basic_composition_adds_epsilons_and_deltas():
    g = basic_composition(PrivacyGuarantee(0.5, 1e-6), PrivacyGuarantee(0.25, 2e-6),
                          PrivacyGuarantee(0.25))
    assert g.epsilon == pytest.approx(1.0) and g.delta == pytest.approx(3e-6)
    assert g.model is PrivacyModel.CENTRAL and g.adjacency == "replace one record"
    local = basic_composition(*[PrivacyGuarantee(0.1, 0.0, PrivacyModel.LOCAL,
                                                 "any two inputs")] * 10)
    assert local.epsilon == pytest.approx(1.0) and local.model is PrivacyModel.LOCAL


def test_basic_composition_with_a_non_private_part_is_not_private():
    g = basic_composition(PrivacyGuarantee(1.0), PrivacyGuarantee.none())
    assert g.model is PrivacyModel.NONE and math.isinf(g.epsilon)


def test_basic_composition_rejects_bad_inputs():
    with pytest.raises(ValueError, match="needs at least one guarantee"):
        basic_composition()
    with pytest.raises(TypeError, match="must be PrivacyGuarantee objects"):
        basic_composition((1.0, 0.0))
    with pytest.raises(ValueError, match="share the privacy model and the adjacency"):
        basic_composition(PrivacyGuarantee(1.0), PrivacyGuarantee(1.0, 0.0, PrivacyModel.LOCAL))
    with pytest.raises(ValueError, match="share the privacy model and the adjacency"):
        basic_composition(PrivacyGuarantee(1.0), PrivacyGuarantee(1.0, adjacency="add/remove"))
    with pytest.raises(ValueError, match=r"composed delta is 1\.2 >= 1"):
        basic_composition(PrivacyGuarantee(1.0, 0.6), PrivacyGuarantee(1.0, 0.6))


def test_advanced_composition_formula():
    eps, delta, k, slack = 0.1, 1e-7, 50, 1e-6
    g = advanced_composition(eps, delta, k, slack)
    # Dwork, Rothblum & Vadhan 2010, Thm III.3, written out by hand.
    expected = math.sqrt(2 * k * math.log(1 / slack)) * eps + k * eps * (math.exp(eps) - 1)
    assert g.epsilon == pytest.approx(expected, rel=1e-14)
    assert g.delta == pytest.approx(k * delta + slack, rel=1e-14)
    assert g.model is PrivacyModel.CENTRAL
    local = advanced_composition(eps, 0.0, k, slack, model=PrivacyModel.LOCAL,
                                 adjacency="any two inputs")
    assert local.model is PrivacyModel.LOCAL and local.delta == slack
    # For many small steps advanced composition beats basic composition k * eps = 5.
    many = advanced_composition(0.01, 0.0, 10_000, 1e-6)
    assert many.epsilon < 10_000 * 0.01


@pytest.mark.parametrize(("args", "exc", "match"), [
    ((0.0, 0.0, 10, 1e-6), ValueError, "epsilon must be > 0"),
    ((0.1, 1.0, 10, 1e-6), ValueError, r"delta must be in \[0, 1\)"),
    ((0.1, 0.0, 0, 1e-6), ValueError, "k must be >= 1"),
    ((0.1, 0.0, 2.5, 1e-6), TypeError, "k must be an integer"),
    ((0.1, 0.0, 10, 0.0), ValueError, "delta_slack must be > 0"),
    ((0.1, 0.2, 10, 1e-6), ValueError, r"k \* delta \+ delta_slack = 2 >= 1"),
])
def test_advanced_composition_rejects_bad_inputs(args, exc, match):
    with pytest.raises(exc, match=match):
        advanced_composition(*args)


def test_per_step_budget_inverts_advanced_composition():
    eps_total, delta_total, k = 1.0, 1e-6, 20
    eps_step, delta_step = per_step_budget_advanced(eps_total, delta_total, k)
    assert delta_step == 0.0
    composed = advanced_composition(eps_step, delta_step, k, delta_total)
    assert composed.epsilon <= eps_total
    assert composed.epsilon == pytest.approx(eps_total, rel=1e-12)
    assert composed.delta == pytest.approx(delta_total)


def test_per_step_budget_beats_001_closed_form():
    """001 App. B.2.2 closed form eps / (sqrt(alpha) (1 + sqrt(2 log(1/delta)))).

    Stated for eps <= sqrt(alpha) ln 2; the brentq inverse gives at least as much.
    """
    for alpha, eps, delta in [(10, 1.0, 1e-6), (16, 2.0, 1e-9), (30, 3.0, 1e-5)]:
        assert eps <= math.sqrt(alpha) * math.log(2)
        closed = eps / (math.sqrt(alpha) * (1 + math.sqrt(2 * math.log(1 / delta))))
        solved, _ = per_step_budget_advanced(eps, delta, alpha)
        assert closed <= solved
        # The closed form is itself a valid split: it composes to at most eps.
        assert advanced_composition(closed, 0.0, alpha, delta).epsilon <= eps


def test_per_step_budget_with_partial_slack_leaves_delta_per_step():
    eps_step, delta_step = per_step_budget_advanced(2.0, 1e-5, 10, delta_slack=4e-6)
    assert delta_step == pytest.approx(6e-7)
    composed = advanced_composition(eps_step, delta_step, 10, 4e-6)
    assert composed.epsilon == pytest.approx(2.0, rel=1e-12)
    assert composed.delta == pytest.approx(1e-5)


@settings(deadline=None, max_examples=60, derandomize=True)
@given(eps_total=st.floats(0.01, 20.0), log_delta=st.floats(-12.0, -1.0),
       k=st.integers(1, 1000))
def test_per_step_budget_round_trip(eps_total, log_delta, k):
    delta = 10.0**log_delta
    eps_step, _ = per_step_budget_advanced(eps_total, delta, k)
    composed = advanced_composition(eps_step, 0.0, k, delta).epsilon
    assert composed <= eps_total
    assert composed == pytest.approx(eps_total, rel=1e-9)


@pytest.mark.parametrize(("kwargs", "exc", "match"), [
    ({"epsilon_total": -1.0, "delta_total": 1e-6, "k": 3}, ValueError,
     "epsilon_total must be > 0"),
    ({"epsilon_total": 1.0, "delta_total": 0.0, "k": 3}, ValueError,
     "delta_total must be > 0 for advanced composition"),
    ({"epsilon_total": 1.0, "delta_total": 1e-6, "k": 0}, ValueError, "k must be >= 1"),
    ({"epsilon_total": 1.0, "delta_total": 1e-6, "k": 3, "delta_slack": 1e-5}, ValueError,
     r"delta_slack must be in \(0, delta_total"),
    ({"epsilon_total": 1.0, "delta_total": 1e-6, "k": 3, "delta_slack": 0.0}, ValueError,
     r"delta_slack must be in \(0, delta_total"),
])
def test_per_step_budget_rejects_bad_inputs(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        per_step_budget_advanced(**kwargs)


def test_split_budget_is_proportional_and_sums_back():
    parts = split_budget(2.0, [1, 1, 2])
    np.testing.assert_allclose(parts, [0.5, 0.5, 1.0])
    np.testing.assert_allclose(split_budget(1.0, np.ones(8)), np.full(8, 1 / 8))
    composed = basic_composition(*[PrivacyGuarantee(float(e)) for e in parts])
    assert composed.epsilon == pytest.approx(2.0, rel=1e-15)


@settings(deadline=None, max_examples=50, derandomize=True)
@given(eps=st.floats(0.001, 100.0),
       weights=st.lists(st.floats(1e-3, 1e3), min_size=1, max_size=20))
def test_split_budget_sums_to_total(eps, weights):
    parts = split_budget(eps, weights)
    assert parts.sum() == pytest.approx(eps, rel=1e-12)
    assert np.all(parts > 0)


@pytest.mark.parametrize(("args", "match"), [
    ((0.0, [1.0]), "epsilon must be > 0"),
    ((1.0, [1.0, 0.0]), "weights must be positive"),
    ((1.0, [1.0, -2.0]), "weights must be positive"),
    ((1.0, []), "weights is empty"),
    ((1.0, [1.0, np.nan]), "weights contains 1 NaN"),
])
def test_split_budget_rejects_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        split_budget(*args)
