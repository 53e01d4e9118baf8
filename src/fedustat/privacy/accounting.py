"""Privacy accounting: basic and advanced composition, budget splits.

Sources
-------
* Basic composition: Dwork & Roth (2014), Theorem 3.16; used in 001 App. B.2.2
  ("splitting privacy budget across layers", pure DP, ``eps/alpha`` per level) and in
  000 Thm 5 (each party in ``P`` pairs).
* Advanced composition: Dwork, Rothblum & Vadhan (FOCS 2010), Theorem III.3 (Dwork &
  Roth 2014, Theorem 3.20): ``k`` mechanisms, each ``(eps, delta)``-DP, compose to
  ``(sqrt(2k ln(1/delta')) eps + k eps (e^eps - 1), k delta + delta')``-DP for any
  ``delta' > 0``. 001 App. B.2.2 / Table 1 uses it to split the budget over the
  ``alpha`` levels of the hierarchical histogram.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import as_float_array, check_delta, check_epsilon, check_positive_int
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel

optimize = lazy_module("scipy.optimize")

__all__ = [
    "advanced_composition",
    "basic_composition",
    "per_step_budget_advanced",
    "split_budget",
]


def basic_composition(*guarantees: PrivacyGuarantee) -> PrivacyGuarantee:
    """Sequential composition: epsilons add up and deltas add up (Dwork & Roth Thm 3.16).

    All guarantees must share the model and the adjacency relation (otherwise their sum
    means nothing); a non-private part makes the whole non-private.

    Parameters
    ----------
    *guarantees:
        One or more :class:`PrivacyGuarantee`, one per release on the same data.
    """
    if not guarantees:
        raise ValueError("basic_composition needs at least one guarantee")
    for g in guarantees:
        if not isinstance(g, PrivacyGuarantee):
            raise TypeError(f"guarantees must be PrivacyGuarantee objects, got "
                            f"{type(g).__name__}")
    if any(g.model is PrivacyModel.NONE for g in guarantees):
        return PrivacyGuarantee.none()
    models = {g.model for g in guarantees}
    adjacencies = {g.adjacency for g in guarantees}
    if len(models) > 1 or len(adjacencies) > 1:
        raise ValueError(
            "guarantees must share the privacy model and the adjacency relation to compose; "
            f"got models {sorted(m.value for m in models)} and adjacencies "
            f"{sorted(adjacencies)}")
    epsilon = math.fsum(g.epsilon for g in guarantees)
    delta = math.fsum(g.delta for g in guarantees)
    if delta >= 1.0:
        raise ValueError(f"the composed delta is {delta:g} >= 1, which guarantees nothing; "
                         "give each release a smaller delta")
    return PrivacyGuarantee(epsilon, delta, guarantees[0].model, guarantees[0].adjacency)


def _advanced_epsilon(epsilon: float, k: int, delta_slack: float) -> float:
    # Dwork, Rothblum & Vadhan 2010, Thm III.3. e^eps beyond float64 (eps > 709.78) makes
    # the bound infinite: it guarantees nothing there.
    try:
        growth = math.expm1(epsilon)
    except OverflowError:
        return math.inf
    return math.sqrt(2.0 * k * math.log(1.0 / delta_slack)) * epsilon + k * epsilon * growth


def advanced_composition(epsilon: float, delta: float, k: int, delta_slack: float, *,
                         model: PrivacyModel = PrivacyModel.CENTRAL,
                         adjacency: str = "replace one record") -> PrivacyGuarantee:
    """k-fold adaptive composition of ``(epsilon, delta)``-DP mechanisms (DRV 2010).

    Returns ``(sqrt(2k ln(1/delta_slack)) eps + k eps (e^eps - 1), k delta + delta_slack)``.
    The theorem is an upper bound: for few steps or large ``eps`` the basic composition
    ``(k eps, k delta)`` can be smaller; compare both.

    Parameters
    ----------
    epsilon, delta:
        Guarantee of each step (``epsilon > 0``, ``delta`` in ``[0, 1)``).
    k:
        Number of steps (>= 1).
    delta_slack:
        The extra failure probability ``delta'`` in ``(0, 1)``.
    model, adjacency:
        Recorded in the returned guarantee.
    """
    epsilon = check_epsilon(epsilon, "epsilon")
    delta = check_delta(delta, "delta")
    k = check_positive_int(k, "k")
    delta_slack = check_delta(delta_slack, "delta_slack")
    if delta_slack == 0.0:
        raise ValueError("delta_slack must be > 0 for advanced composition; use "
                         "basic_composition for pure DP")
    total_delta = k * delta + delta_slack
    if total_delta >= 1.0:
        raise ValueError(f"k * delta + delta_slack = {total_delta:g} >= 1, which guarantees "
                         "nothing; lower delta or delta_slack")
    composed = _advanced_epsilon(epsilon, k, delta_slack)
    if not math.isfinite(composed):
        raise ValueError(f"epsilon={epsilon:g} per step: the advanced composition bound "
                         f"k eps (e^eps - 1) over k={k} steps overflows float64 (it guarantees "
                         "nothing); use basic_composition, whose k eps is far smaller here")
    return PrivacyGuarantee(composed, total_delta, PrivacyModel(model), adjacency)


def per_step_budget_advanced(epsilon_total: float, delta_total: float, k: int,
                             delta_slack: float | None = None) -> tuple[float, float]:
    """Largest per-step ``(eps, delta)`` whose k-fold advanced composition fits the total.

    Inverts :func:`advanced_composition` with brentq: finds ``eps`` such that
    ``sqrt(2k ln(1/delta')) eps + k eps (e^eps - 1) = epsilon_total``. This is the
    budget split of 001 App. B.2.2 / Table 1 ("privacy budget, advanced composition"),
    whose closed form ``eps / (sqrt(alpha) (1 + sqrt(2 log(1/delta))))`` (for
    ``eps <= sqrt(alpha) ln 2``) is a smaller, conservative choice.

    Parameters
    ----------
    epsilon_total, delta_total:
        Budget of the whole composition (``delta_total`` in ``(0, 1)``).
    k:
        Number of steps (e.g. the ``alpha`` levels of a hierarchical histogram).
    delta_slack:
        The ``delta'`` of the theorem, in ``(0, delta_total]``. Defaults to
        ``delta_total``: the steps are then pure ``eps``-DP, as the Hadamard frequency
        oracles of 001 are. A smaller value leaves ``(delta_total - delta_slack)/k`` to
        each step.

    Returns
    -------
    (eps_step, delta_step)
        With basic composition ``epsilon_total / k`` per step; when that is larger,
        basic composition is the better split.
    """
    epsilon_total = check_epsilon(epsilon_total, "epsilon_total")
    delta_total = check_delta(delta_total, "delta_total")
    k = check_positive_int(k, "k")
    if delta_total == 0.0:
        raise ValueError("delta_total must be > 0 for advanced composition; with pure DP "
                         "split the budget by basic composition (epsilon_total / k)")
    if delta_slack is None:
        delta_slack = delta_total
    delta_slack = check_delta(delta_slack, "delta_slack")
    if not 0.0 < delta_slack <= delta_total:
        raise ValueError(f"delta_slack must be in (0, delta_total={delta_total:g}], "
                         f"got {delta_slack!r}")
    delta_step = (delta_total - delta_slack) / k

    def excess(eps: float) -> float:
        return _advanced_epsilon(eps, k, delta_slack) - epsilon_total

    lo, hi = 0.0, epsilon_total
    while excess(hi) <= 0.0:
        lo, hi = hi, hi * 2.0
    # The bound grows like e^eps, so a bracket end can overflow (excess = inf); the root
    # finder needs a finite one: halve towards the last end below the total.
    while not math.isfinite(excess(hi)):
        hi = (lo + hi) / 2.0
        if excess(hi) <= 0.0:
            lo, hi = hi, 2.0 * hi - lo
    eps_step = optimize.brentq(excess, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps)
    # Never overshoot the total because of the root finder's last bit.
    while excess(eps_step) > 0.0:
        eps_step = math.nextafter(eps_step, 0.0)
    return float(eps_step), float(delta_step)


def split_budget(epsilon: float, weights: Any) -> np.ndarray:
    """Split ``epsilon`` proportionally to ``weights`` (the parts add up to it).

    Under basic composition the parts compose back to ``epsilon``; e.g. 004's
    LocalLaplace/GlobalLaplace budget allocation or 001's per-level split ``eps/alpha``
    (equal weights).

    Parameters
    ----------
    epsilon:
        Total budget (> 0).
    weights:
        Positive weights, one per part.
    """
    epsilon = check_epsilon(epsilon, "epsilon")
    w = as_float_array(weights, "weights")
    if w.min() <= 0:
        raise ValueError(f"weights must be positive, got minimum {w.min():g}")
    return epsilon * w / w.sum()
