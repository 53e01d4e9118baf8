"""A privacy budget accountant: what a data set has spent across releases.

A :class:`BudgetAccountant` holds a total ``(epsilon, delta)`` for one data set, under one
adjacency relation and one privacy model, and a composition rule. Every release is
checked *before* it runs (:meth:`BudgetAccountant.check`) and recorded after
(:meth:`BudgetAccountant.spend`); a release that would exceed the total is refused with
:class:`BudgetExceededError` and the ledger is left unchanged.

Sources
-------
* ``"basic"``: Dwork & Roth (2014), Theorem 3.16: epsilons and deltas add up
  (:func:`~fedustat.privacy.accounting.basic_composition`).
* ``"advanced"``: Dwork, Rothblum & Vadhan (FOCS 2010), Theorem III.3 (Dwork & Roth 2014,
  Theorem 3.20), in its heterogeneous form (the same Azuma argument with per-step ranges
  ``eps_i``): ``sqrt(2 ln(1/delta') sum eps_i^2) + sum eps_i (e^eps_i - 1)`` and
  ``sum delta_i + delta'``. For ``k`` equal steps it is
  :func:`~fedustat.privacy.accounting.advanced_composition`. The theorem is an upper
  bound, and basic composition is also valid: the accountant uses whichever fits.
* ``"zcdp"``: Bun & Steinke (TCC 2016): zCDP composes by adding ``rho`` (Lemma 2.3); an
  ``eps``-DP release is ``eps^2 / 2``-zCDP (Proposition 1.4); the Gaussian mechanism with
  sensitivity ``D`` and scale ``sigma`` is ``D^2 / (2 sigma^2)``-zCDP (Proposition 1.6);
  ``rho``-zCDP implies ``(rho + 2 sqrt(rho ln(1/delta)), delta)``-DP (Proposition 1.3).
* Group privacy, to turn a guarantee under one adjacency into one under a coarser one:
  ``(eps, delta)``-DP for neighbours gives ``(k eps, k e^{(k-1) eps} delta)``-DP for
  data sets ``k`` steps apart (Vadhan 2017, "The complexity of differential privacy",
  Lemma 2.2), and ``rho``-zCDP gives ``k^2 rho``-zCDP (Bun & Steinke 2016, Prop. 1.9).

Adjacency table
---------------
The relations the protocols state (grep ``adjacency`` in ``src/``) fall in four classes
(:data:`ADJACENCY_CLASSES`). A release composes into a budget when the budget's
neighbours are at most ``k`` steps of the release's neighbours (:data:`IMPLIES`):

* ``record`` (replace one record, n public) implies ``score`` (replace one record's
  score, labels public) and ``label`` (change one label) with ``k = 1``: those
  neighbours are replace-one neighbours too.
* ``add-remove`` (add or remove one record) implies ``record``, ``score`` and ``label``
  with ``k = 2``: a replacement is a removal then an addition.
* ``score`` and ``label`` are incomparable (a score-only guarantee says nothing about a
  label and the other way round), and ``record`` does not imply ``add-remove`` (``n``
  is public under replacement). Unknown relations compose only with the identical string.

So a budget stated under ``"replace one record's score; labels and class sizes public"``
takes the AUC (that relation), Kendall's tau, the ECDF, quantiles and the ROC curve (all
replace-one-record): this is how the AUC and tau of one data set share a budget.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from scipy import optimize

from fedustat._validation import check_delta, check_epsilon
from fedustat.privacy.accounting import basic_composition
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.mechanisms import GaussianMechanism

__all__ = [
    "ADJACENCY_CLASSES",
    "ADJACENCY_PATTERNS",
    "IMPLIES",
    "BudgetAccountant",
    "BudgetExceededError",
    "IncomparableGuaranteeError",
    "LedgerEntry",
    "PrivacyBudget",
    "adjacency_class",
    "gaussian_rho",
]

RULES = ("basic", "advanced", "zcdp")

#: Known adjacency strings (as the protocols state them) and their class.
ADJACENCY_CLASSES: dict[str, str] = {
    "replace one record": "record",
    "replace one record (n public)": "record",  # ECDF, quantiles
    "replace one record (score and label; n public)": "record",  # ROC curve
    "replace one record (prediction and label; n public)": "record",  # Hosmer-Lemeshow
    # Local randomizers: eps-LDP on each party's one record is eps-DP under replace-one.
    "any two inputs": "record",
    "any two inputs of one party": "record",
    "replace one record's score; labels and class sizes public": "score",  # AUC, VUS
    "any two scores of one party; labels public": "score",  # LDP AUC tree
    "any two scores of one party; labels and class sizes public": "score",  # LDP grids
    ("change one sample's label; scores, ranks and client sizes are known to the "
     "server"): "label",  # FedAUC
    "add or remove one record": "add-remove",
    # Short names, for budgets typed by hand.
    "record": "record",
    "score": "score",
    "label": "label",
    "add-remove": "add-remove",
}

#: (release class, budget class) -> group size k: the budget's neighbours are at most
#: k steps of the release's neighbours.
IMPLIES: dict[tuple[str, str], int] = {
    ("record", "record"): 1,
    ("record", "score"): 1,
    ("record", "label"): 1,
    ("score", "score"): 1,
    ("label", "label"): 1,
    ("add-remove", "add-remove"): 1,
    ("add-remove", "record"): 2,
    ("add-remove", "score"): 2,
    ("add-remove", "label"): 2,
}

# Who must be trusted, strongest guarantee first: an eps-LDP release is eps-DP for a
# central analyst too; a computational guarantee is weaker than a statistical one.
_MODEL_RANK = {PrivacyModel.LOCAL: 3, PrivacyModel.CENTRAL: 2, PrivacyModel.LABEL: 2,
               PrivacyModel.COMPUTATIONAL: 1}

# Sums of floats are compared with this relative slack so that ten spends of 0.1 fit a
# budget of 1.
_SLACK = 1e-12


class BudgetExceededError(ValueError):
    """A release would take the spent budget past the total; nothing was spent.

    Examples
    --------
    >>> from fedustat import BudgetAccountant, BudgetExceededError, PrivacyGuarantee
    >>> acct = BudgetAccountant(1.0)
    >>> _ = acct.spend(PrivacyGuarantee(0.8), name="auc")
    >>> try:
    ...     acct.spend(PrivacyGuarantee(0.5), name="tau")
    ... except BudgetExceededError as refusal:
    ...     print(refusal)
    this release (0.5, 0) would bring the spent budget from (epsilon=0.8, delta=0) to
    (epsilon=1.3, delta=0) under basic composition, over the total (epsilon=1, delta=0);
    it was refused and nothing was spent
    """


class IncomparableGuaranteeError(ValueError):
    """A release's guarantee says nothing about the budget's adjacency or model.

    Examples
    --------
    >>> from fedustat import BudgetAccountant, PrivacyGuarantee, PrivacyModel
    >>> from fedustat.privacy.budget import IncomparableGuaranteeError
    >>> acct = BudgetAccountant(1.0)
    >>> try:
    ...     acct.spend(PrivacyGuarantee(0.1, model=PrivacyModel.COMPUTATIONAL))
    ... except IncomparableGuaranteeError as refusal:
    ...     print(refusal)
    a computational guarantee is weaker than the budget's central model; state the budget
    in the computational model to compose it
    """


#: Relations that name their public parameters (a stream's bounds), by the fixed text
#: around them, and their class: the Laplace running sums (003 Thm 3) replace one
#: element, one record of a stream whose length is public.
ADJACENCY_PATTERNS: tuple[tuple[str, str, str], ...] = (
    ("replace one stream element (values in [", "])", "record"),
)


def adjacency_class(adjacency: str) -> str | None:
    """The class of a known adjacency string (see :data:`ADJACENCY_CLASSES` and
    :data:`ADJACENCY_PATTERNS`), else None.

    Parameters
    ----------
    adjacency:
        A neighbouring relation as a protocol states it.

    Returns
    -------
    str or None
        ``"record"``, ``"score"``, ``"label"`` or ``"add-remove"``; None if unknown.

    Examples
    --------
    >>> from fedustat.privacy.budget import adjacency_class
    >>> adjacency_class("replace one record (n public)"), adjacency_class("swap two rows")
    ('record', None)
    """
    known = ADJACENCY_CLASSES.get(adjacency)
    if known is not None:
        return known
    for start, end, cls in ADJACENCY_PATTERNS:
        if adjacency.startswith(start) and adjacency.endswith(end):
            return cls
    return None


def gaussian_rho(epsilon: float, delta: float) -> float:
    """zCDP ``rho`` of a Gaussian mechanism calibrated to ``(epsilon, delta)``.

    The analytic calibration (Balle & Wang 2018) gives ``sigma = D s(eps, delta)`` for
    sensitivity ``D``; the release is then ``D^2 / (2 sigma^2) = 1 / (2 s^2)``-zCDP
    (Bun & Steinke 2016, Prop. 1.6), whatever ``D``.

    Parameters
    ----------
    epsilon, delta:
        The ``(epsilon, delta)`` the mechanism is calibrated to (``delta > 0``).

    Returns
    -------
    float
        ``1 / (2 s^2)`` for the unit-sensitivity analytic scale ``s``.

    Examples
    --------
    >>> from fedustat.privacy.budget import gaussian_rho
    >>> round(gaussian_rho(1.0, 1e-5), 4)
    0.0359
    """
    unit_sigma = GaussianMechanism(1.0, epsilon, delta).sigma
    return 1.0 / (2.0 * unit_sigma**2)


@dataclass(frozen=True)
class LedgerEntry:
    """One release: its name, the guarantee it carried, and what it cost the budget.

    ``cost`` is the guarantee under the budget's adjacency (after group privacy);
    ``rho`` its zCDP cost under the ``"zcdp"`` rule (else None).

    Parameters
    ----------
    name:
        The release's name, as given to :meth:`BudgetAccountant.spend`.
    guarantee:
        The guarantee the release carried.
    cost:
        That guarantee under the budget's adjacency.
    rho:
        Its zCDP cost under the ``"zcdp"`` rule, else None.

    Examples
    --------
    >>> from fedustat import BudgetAccountant, PrivacyGuarantee
    >>> acct = BudgetAccountant(1.0)
    >>> _ = acct.spend(PrivacyGuarantee(0.4), name="auc")
    >>> entry = acct.ledger[0]
    >>> entry.name, entry.cost.epsilon, entry.rho
    ('auc', 0.4, None)
    """

    name: str
    guarantee: PrivacyGuarantee
    cost: PrivacyGuarantee
    rho: float | None = None


def _advanced_total(eps: list[float], delta_slack: float) -> float:
    # DRV 2010 Thm III.3 with per-step ranges eps_i (see module docstring).
    return (math.sqrt(2.0 * math.log(1.0 / delta_slack) * math.fsum(e * e for e in eps))
            + math.fsum(e * math.expm1(e) for e in eps))


def _zcdp_epsilon(rho: float, delta: float) -> float:
    # Bun & Steinke 2016, Prop. 1.3.
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


class BudgetAccountant:
    """The privacy budget of one data set, spent release by release.

    Parameters
    ----------
    epsilon, delta:
        The total budget (``epsilon > 0`` finite, ``delta`` in ``[0, 1)``).
    rule:
        ``"basic"`` (Dwork & Roth Thm 3.16), ``"advanced"`` (Dwork, Rothblum & Vadhan
        2010; needs ``delta_slack``) or ``"zcdp"`` (Bun & Steinke 2016; needs
        ``delta > 0``, used whole by the conversion of the spent ``rho`` to
        ``(epsilon, delta)``).
    delta_slack:
        The ``delta'`` of advanced composition, in ``(0, delta)``.
    adjacency:
        The neighbouring relation the total is stated under (see :data:`IMPLIES`).
    model:
        The weakest privacy model a release may have (``"central"`` by default: local
        releases are accepted, computational ones are not).

    Examples
    --------
    >>> from fedustat.privacy import BudgetAccountant, PrivacyGuarantee
    >>> acct = BudgetAccountant(1.0)
    >>> acct.spend(PrivacyGuarantee(0.4), name="auc").epsilon
    0.4
    >>> acct.remaining
    (0.6, 0.0)
    """

    def __init__(self, epsilon: float, delta: float = 0.0, *, rule: str = "basic",
                 delta_slack: float | None = None, adjacency: str = "replace one record",
                 model: PrivacyModel | str = PrivacyModel.CENTRAL) -> None:
        self.epsilon = check_epsilon(epsilon, "epsilon")
        self.delta = check_delta(delta, "delta")
        if rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
        self.rule = rule
        if rule == "advanced":
            if delta_slack is None:
                raise ValueError("rule='advanced' needs delta_slack (the delta' of Dwork, "
                                 "Rothblum & Vadhan), in (0, delta)")
            delta_slack = check_delta(delta_slack, "delta_slack")
            if not 0.0 < delta_slack < self.delta:
                raise ValueError(f"delta_slack must be in (0, delta={self.delta:g}), got "
                                 f"{delta_slack!r}")
        elif delta_slack is not None:
            raise ValueError(f"delta_slack is the slack of advanced composition; rule "
                             f"{rule!r} takes none")
        if rule == "zcdp" and self.delta == 0.0:
            raise ValueError("rule='zcdp' needs delta > 0: converting rho-zCDP to "
                             "(epsilon, delta)-DP costs a delta (Bun & Steinke Prop. 1.3)")
        self.delta_slack = delta_slack
        if not isinstance(adjacency, str) or not adjacency:
            raise TypeError(f"adjacency must be a non-empty string, got {adjacency!r}")
        self.adjacency = adjacency
        try:
            self.model = PrivacyModel(model)
        except ValueError:
            raise ValueError(f"model must be one of "
                             f"{', '.join(m.value for m in _MODEL_RANK)}, got {model!r}"
                             ) from None
        if self.model is PrivacyModel.NONE:
            raise ValueError("a budget cannot be stated in the non-private model")
        self._ledger: list[LedgerEntry] = []

    # -- conversion ---------------------------------------------------------------------

    def _group_size(self, guarantee: PrivacyGuarantee) -> int:
        if guarantee.adjacency == self.adjacency:
            return 1
        have = adjacency_class(guarantee.adjacency)
        want = adjacency_class(self.adjacency)
        if have is None or want is None:
            unknown = guarantee.adjacency if have is None else self.adjacency
            raise IncomparableGuaranteeError(
                f"adjacency {unknown!r} is not in the table of comparable relations "
                f"(fedustat.privacy.budget.ADJACENCY_CLASSES), so a release under "
                f"{guarantee.adjacency!r} cannot be charged to a budget under "
                f"{self.adjacency!r}; only identical relations compose")
        k = IMPLIES.get((have, want))
        if k is None:
            raise IncomparableGuaranteeError(
                f"a guarantee under {guarantee.adjacency!r} ({have}) says nothing about "
                f"neighbours under the budget's {self.adjacency!r} ({want}): "
                + _WHY.get((have, want), "the two relations are incomparable"))
        return k

    def _cost(self, guarantee: PrivacyGuarantee, rho: float | None,
              gaussian: bool) -> tuple[PrivacyGuarantee, float | None]:
        if not isinstance(guarantee, PrivacyGuarantee):
            raise TypeError(f"guarantee must be a PrivacyGuarantee, got "
                            f"{type(guarantee).__name__}")
        if guarantee.model is PrivacyModel.NONE or math.isinf(guarantee.epsilon):
            raise IncomparableGuaranteeError(
                "a non-private release (epsilon = inf) reveals the data exactly; no "
                "finite budget covers it")
        if _MODEL_RANK[guarantee.model] < _MODEL_RANK[self.model]:
            raise IncomparableGuaranteeError(
                f"a {guarantee.model.value} guarantee is weaker than the budget's "
                f"{self.model.value} model; state the budget in the "
                f"{guarantee.model.value} model to compose it")
        k = self._group_size(guarantee)
        # Group privacy (Vadhan 2017, Lemma 2.2).
        eps = k * guarantee.epsilon
        delta = k * math.exp((k - 1) * guarantee.epsilon) * guarantee.delta
        if delta >= 1.0:
            raise BudgetExceededError(f"over {k} neighbouring steps the release's delta becomes "
                                 f"{delta:g} >= 1, which guarantees nothing")
        cost = PrivacyGuarantee(eps, delta, self.model, self.adjacency)
        if self.rule != "zcdp":
            if rho is not None:
                raise ValueError(f"rho is a zCDP cost; rule {self.rule!r} does not use it")
            return cost, None
        if rho is not None:
            base = check_epsilon(rho, "rho")
        elif guarantee.delta == 0.0:
            base = guarantee.epsilon**2 / 2.0  # Bun & Steinke Prop. 1.4
        elif gaussian:
            base = gaussian_rho(guarantee.epsilon, guarantee.delta)
        else:
            raise IncomparableGuaranteeError(
                f"an ({guarantee.epsilon:g}, {guarantee.delta:g})-DP guarantee does not "
                "determine a zCDP rho: pass rho= (a Gaussian release with sensitivity D "
                "and scale sigma has rho = D^2 / (2 sigma^2)) or gaussian=True for a "
                "Gaussian mechanism calibrated to that (epsilon, delta)")
        return cost, k * k * base  # Bun & Steinke Prop. 1.9

    # -- composition --------------------------------------------------------------------

    def _compose(self, costs: list[PrivacyGuarantee],
                 rhos: list[float]) -> tuple[float, float]:
        if not costs:
            return 0.0, 0.0
        if self.rule == "zcdp":
            return _zcdp_epsilon(math.fsum(rhos), self.delta), self.delta
        basic = basic_composition(*costs) if math.fsum(c.delta for c in costs) < 1 else None
        basic_pair = ((basic.epsilon, basic.delta) if basic is not None
                      else (math.fsum(c.epsilon for c in costs),
                            math.fsum(c.delta for c in costs)))
        if self.rule == "basic":
            return basic_pair
        assert self.delta_slack is not None
        advanced = (_advanced_total([c.epsilon for c in costs], self.delta_slack),
                    math.fsum(c.delta for c in costs) + self.delta_slack)
        fits = [p for p in (basic_pair, advanced) if self._fits(*p)]
        # Both bounds hold; report the one that fits with the smaller epsilon.
        return min(fits or [basic_pair, advanced], key=lambda p: p[0])

    def _fits(self, eps: float, delta: float) -> bool:
        return (eps <= self.epsilon * (1.0 + _SLACK)
                and delta <= self.delta * (1.0 + _SLACK) + 1e-300)

    def _after(self, guarantee: PrivacyGuarantee, rho: float | None,
               gaussian: bool) -> tuple[LedgerEntry, tuple[float, float]]:
        cost, r = self._cost(guarantee, rho, gaussian)
        costs = [e.cost for e in self._ledger] + [cost]
        rhos = [e.rho for e in self._ledger if e.rho is not None]
        if r is not None:
            rhos.append(r)
        entry = LedgerEntry("", guarantee, cost, r)
        return entry, self._compose(costs, rhos)

    def check(self, guarantee: PrivacyGuarantee, *, rho: float | None = None,
              gaussian: bool = False) -> None:
        """Raise unless ``guarantee`` can be spent; never changes the ledger.

        Parameters
        ----------
        guarantee, rho, gaussian:
            As for :meth:`spend`.

        Raises
        ------
        BudgetExceededError
            The composed spend would exceed the total.
        IncomparableGuaranteeError
            The release's adjacency or model says nothing about the budget's.

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> spent = budget.spend(PrivacyGuarantee(0.4), name="auc")
        >>> budget.check(PrivacyGuarantee(0.6))
        >>> budget.check(PrivacyGuarantee(0.7))
        Traceback (most recent call last):
        ...
        fedustat.privacy.budget.BudgetExceededError: this release (0.7, 0) would bring ...
        >>> budget.spent
        (0.4, 0.0)
        """
        _, (eps, delta) = self._after(guarantee, rho, gaussian)
        if not self._fits(eps, delta):
            spent_eps, spent_delta = self.spent
            raise BudgetExceededError(
                f"this release ({guarantee.epsilon:g}, {guarantee.delta:g}) would bring the "
                f"spent budget from (epsilon={spent_eps:.6g}, delta={spent_delta:.3g}) to "
                f"(epsilon={eps:.6g}, delta={delta:.3g}) under {self.rule} composition, "
                f"over the total (epsilon={self.epsilon:g}, delta={self.delta:g}); it was "
                "refused and nothing was spent")

    def spend(self, guarantee: PrivacyGuarantee, *, name: str | None = None,
              rho: float | None = None, gaussian: bool = False) -> PrivacyGuarantee:
        """Record a release; refuse it (ledger unchanged) if it does not fit.

        Parameters
        ----------
        guarantee:
            The release's guarantee (``release.privacy``).
        name:
            A label for the ledger (default ``"release <i>"``).
        rho:
            Under ``"zcdp"``: the release's zCDP cost, when known.
        gaussian:
            Under ``"zcdp"``: the release is a Gaussian mechanism calibrated to its
            ``(epsilon, delta)`` (its rho is then :func:`gaussian_rho`).

        Returns
        -------
        PrivacyGuarantee
            What the release cost, under the budget's adjacency and model.

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> print(budget.spend(PrivacyGuarantee(0.4), name="auc"))
        (eps=0.4) central DP, adjacency: replace one record
        >>> budget.remaining
        (0.6, 0.0)
        """
        self.check(guarantee, rho=rho, gaussian=gaussian)
        entry, _ = self._after(guarantee, rho, gaussian)
        label = f"release {len(self._ledger) + 1}" if name is None else str(name)
        self._ledger.append(LedgerEntry(label, guarantee, entry.cost, entry.rho))
        return entry.cost

    # -- state --------------------------------------------------------------------------

    @property
    def ledger(self) -> tuple[LedgerEntry, ...]:
        """The releases spent so far, in order.

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> spent = budget.spend(PrivacyGuarantee(0.4), name="auc")
        >>> [(entry.name, entry.cost.epsilon) for entry in budget.ledger]
        [('auc', 0.4)]
        """
        return tuple(self._ledger)

    @property
    def spent(self) -> tuple[float, float]:
        """The composed ``(epsilon, delta)`` of the ledger under the rule.

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> spent = budget.spend(PrivacyGuarantee(0.4), name="auc")
        >>> spent = budget.spend(PrivacyGuarantee(0.25))
        >>> budget.spent
        (0.65, 0.0)
        """
        return self._compose([e.cost for e in self._ledger],
                             [e.rho for e in self._ledger if e.rho is not None])

    @property
    def spent_rho(self) -> float:
        """Under ``"zcdp"``: the summed rho of the ledger (0 under other rules).

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(5.0, 1e-6, rule="zcdp")
        >>> spent = budget.spend(PrivacyGuarantee(0.5))   # eps^2 / 2
        >>> budget.spent_rho
        0.125
        """
        return math.fsum(e.rho for e in self._ledger if e.rho is not None)

    @property
    def remaining(self) -> tuple[float, float]:
        """``(epsilon, delta)`` still available to one more release.

        ``epsilon``: the largest epsilon of one more pure-DP release that fits.
        ``delta``: what a further release may add (``"basic"``: the total minus the
        spent delta; ``"advanced"``: also minus ``delta_slack``; ``"zcdp"``: 0, since
            Gaussian releases there spend rho, not delta).

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> spent = budget.spend(PrivacyGuarantee(0.4), name="auc")
        >>> budget.remaining
        (0.6, 0.0)
        """
        costs = [e.cost for e in self._ledger]
        if self.rule == "zcdp":
            delta_left = 0.0
        else:
            delta_left = max(0.0, self.delta - math.fsum(c.delta for c in costs)
                             - (self.delta_slack or 0.0))
        if not self._fits(*self.spent):
            return 0.0, delta_left
        if self.rule == "basic":
            return max(0.0, self.epsilon - self.spent[0]), delta_left
        if self.rule == "zcdp":
            # Largest rho with rho + 2 sqrt(rho L) <= epsilon: sqrt(rho) = sqrt(L+eps)-sqrt(L).
            log_term = math.log(1.0 / self.delta)
            rho_max = (math.sqrt(log_term + self.epsilon) - math.sqrt(log_term)) ** 2
            return math.sqrt(2.0 * max(0.0, rho_max - self.spent_rho)), 0.0
        rhos: list[float] = []

        def excess(eps: float) -> float:
            pure = PrivacyGuarantee(eps, 0.0, self.model, self.adjacency)
            total_eps, total_delta = self._compose([*costs, pure], rhos)
            return -1.0 if self._fits(total_eps, total_delta) else 1.0

        if excess(self.epsilon * 1e-15) > 0:
            return 0.0, delta_left
        # One release never costs less than its epsilon, so the total bounds the answer.
        if excess(self.epsilon) < 0:
            return self.epsilon, delta_left
        eps = optimize.bisect(excess, self.epsilon * 1e-15, self.epsilon, xtol=1e-13)
        while excess(eps) > 0:  # never report more than fits
            eps = math.nextafter(eps, 0.0)
        return float(eps), delta_left

    def __repr__(self) -> str:
        eps, delta = self.spent
        return (f"BudgetAccountant(spent=({eps:.6g}, {delta:.3g}) of "
                f"({self.epsilon:g}, {self.delta:g}), rule={self.rule!r}, "
                f"releases={len(self._ledger)}, adjacency={self.adjacency!r})")

    # -- persistence --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the total, rule, relation and the ledger.

        Returns
        -------
        dict
            ``epsilon``, ``delta``, ``rule``, ``delta_slack``, ``adjacency``, ``model`` and
            ``ledger`` (one dict per release).

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> spent = budget.spend(PrivacyGuarantee(0.4), name="auc")
        >>> out = budget.to_dict()
        >>> out["epsilon"], out["rule"], [row["name"] for row in out["ledger"]]
        (1.0, 'basic', ['auc'])
        """
        return {
            "epsilon": self.epsilon, "delta": self.delta, "rule": self.rule,
            "delta_slack": self.delta_slack, "adjacency": self.adjacency,
            "model": self.model.value,
            "ledger": [{"name": e.name, "epsilon": e.guarantee.epsilon,
                        "delta": e.guarantee.delta, "model": e.guarantee.model.value,
                        "adjacency": e.guarantee.adjacency,
                        # The release's own rho (before group privacy): from_dict
                        # charges it again.
                        "rho": (None if e.rho is None
                                else e.rho / self._group_size(e.guarantee) ** 2)}
                       for e in self._ledger],
        }

    def to_json(self, **kwargs: Any) -> str:
        """The budget as JSON (the CLI's budget file); ``kwargs`` go to ``json.dumps``.

        Parameters
        ----------
        **kwargs:
            Passed to :func:`json.dumps` (``indent``, ``sort_keys``, ...).

        Returns
        -------
        str

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> spent = budget.spend(PrivacyGuarantee(0.4), name="auc")
        >>> budget.to_json()[:50]
        '{"epsilon": 1.0, "delta": 0.0, "rule": "basic", "d'
        """
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BudgetAccountant:
        """Rebuild a budget; its ledger is spent again, so a tampered file that overspends
        is refused.

        Parameters
        ----------
        data:
            A dict as made by :meth:`to_dict`.

        Returns
        -------
        BudgetAccountant

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> spent = budget.spend(PrivacyGuarantee(0.4), name="auc")
        >>> BudgetAccountant.from_dict(budget.to_dict()).spent
        (0.4, 0.0)
        >>> data = budget.to_dict()
        >>> data["ledger"][0]["epsilon"] = 1.5
        >>> BudgetAccountant.from_dict(data)
        Traceback (most recent call last):
        ...
        fedustat.privacy.budget.BudgetExceededError: this release (1.5, 0) would bring ...
        """
        if not isinstance(data, dict):
            raise TypeError(f"a budget must be a JSON object, got {type(data).__name__}")
        missing = [k for k in ("epsilon", "delta", "rule", "adjacency", "model", "ledger")
                   if k not in data]
        if missing:
            raise ValueError(f"budget file misses the field(s) {', '.join(missing)}")
        acct = cls(data["epsilon"], data["delta"], rule=data["rule"],
                   delta_slack=data.get("delta_slack"), adjacency=data["adjacency"],
                   model=data["model"])
        for row in data["ledger"]:
            g = PrivacyGuarantee(row["epsilon"], row["delta"], PrivacyModel(row["model"]),
                                 row["adjacency"])
            acct.spend(g, name=row["name"], rho=row.get("rho"))
        return acct

    @classmethod
    def from_json(cls, text: str) -> BudgetAccountant:
        """Inverse of :meth:`to_json`.

        Parameters
        ----------
        text:
            A JSON document as written by :meth:`to_json`.

        Returns
        -------
        BudgetAccountant

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> spent = budget.spend(PrivacyGuarantee(0.4), name="auc")
        >>> restored = BudgetAccountant.from_json(budget.to_json())
        >>> restored.spent, restored.ledger[0].name
        ((0.4, 0.0), 'auc')
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"a budget file must be JSON: {exc}") from None
        return cls.from_dict(data)


#: The name diffprivlib users look for.
PrivacyBudget = BudgetAccountant

_WHY = {
    ("score", "label"): "a guarantee for changing one score, labels public, does not "
                        "protect the labels",
    ("label", "score"): "a guarantee for changing one label does not protect the scores",
    ("score", "record"): "labels are public under the release's relation, so it does not "
                         "protect a whole record; state the budget under the score relation",
    ("label", "record"): "only labels are protected by the release, not whole records",
    ("record", "add-remove"): "n is public under replacement, so adding or removing a "
                              "record is not covered",
    ("score", "add-remove"): "labels and n are public under the release's relation",
    ("label", "add-remove"): "only labels are protected by the release",
}
