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

Reservations and budget files
-----------------------------
The release functions call :meth:`BudgetAccountant.before_release` with the guarantee the
protocol will deliver (``Protocol.planned_guarantee``) just before any party runs, and
:meth:`BudgetAccountant.after_release` with the guarantee the release carries. A release
that delivers more than was checked is withheld (:class:`ReleaseWithheldError`) and what it
delivered is charged. :class:`BudgetFile` holds a budget file under an exclusive lock
(``flock`` on ``FILE.lock``) from the check to the commit, so processes sharing one file
spend it one after the other: the check is made against the file as it is under the lock,
the reservation is written (atomically: a temporary file in the same directory, ``fsync``,
``os.replace``) before any party runs, and it is replaced by the delivered guarantee after
the run, or removed if the run fails. A process killed during its run leaves its
reservation in the file, counted, with ``"status": "reserved"``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

try:  # POSIX file locks; budget files need them (BudgetFile refuses to work without)
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

from fedustat._lazy import lazy_module
from fedustat._validation import check_delta, check_epsilon
from fedustat.privacy.accounting import basic_composition
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.mechanisms import GaussianMechanism, gaussian_delta

optimize = lazy_module("scipy.optimize")

__all__ = [
    "ADJACENCY_CLASSES",
    "ADJACENCY_PATTERNS",
    "IMPLIES",
    "BudgetAccountant",
    "BudgetExceededError",
    "BudgetFile",
    "IncomparableGuaranteeError",
    "LedgerEntry",
    "LedgerError",
    "PrivacyBudget",
    "ReleaseProcess",
    "ReleaseWithheldError",
    "adjacency_class",
    "gaussian_rho",
]

RULES = ("basic", "advanced", "zcdp")
#: A ledger row's status: ``spent`` (released), ``reserved`` (counted before its run and
#: never committed: the run is going on, or its process ended during it) or ``withheld``
#: (the run delivered more than it reserved: not released, and charged what it delivered).
STATUSES = ("spent", "reserved", "withheld")
#: How a zCDP row's rho was found: from a pure epsilon (Bun & Steinke Prop. 1.4), from a
#: Gaussian mechanism calibrated to (epsilon, delta) (:func:`gaussian_rho`), or given.
RHO_SOURCES = ("epsilon", "gaussian", "given")

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


class ReleaseWithheldError(ValueError):
    """A release delivered more than was checked before it ran: it is withheld, and what it
    delivered is charged (its run touched the data). A planning error in a protocol's
    ``planned_guarantee``; the budget stays conservative.

    Examples
    --------
    >>> from fedustat import BudgetAccountant, PrivacyGuarantee
    >>> from fedustat.privacy.budget import ReleaseWithheldError
    >>> acct = BudgetAccountant(1.0, 1e-6)
    >>> acct.before_release(PrivacyGuarantee(0.5), name="auc")
    >>> try:
    ...     acct.after_release(PrivacyGuarantee(0.5, 1e-9), name="auc")
    ... except ReleaseWithheldError as refusal:
    ...     print(refusal)
    auc delivered (epsilon=0.5, delta=1e-09), more than the (epsilon=0.5, delta=0) checked
    before it ran: the release is withheld (not returned) and what it delivered is charged
    >>> acct.ledger[0].status
    'withheld'
    """


class LedgerError(ValueError):
    """A budget (dict, JSON or file) that cannot be read as it is; the message names what
    is wrong in one line.

    Examples
    --------
    >>> from fedustat import BudgetAccountant
    >>> try:
    ...     BudgetAccountant.from_json('{"epsilon": 1.0, "delta": 0.0')
    ... except ValueError as refusal:
    ...     print(refusal)
    not valid JSON (truncated or edited by hand?): Expecting ',' delimiter: line 1 column 30
    (char 29)
    """


@dataclass(frozen=True)
class ReleaseProcess:
    """The process that reserved a release (``pid``, ``host``) and when (``started``, UTC,
    ISO 8601): what a person needs to tell a run still going on from one that ended.

    Parameters
    ----------
    pid:
        The process id.
    host:
        The host name.
    started:
        When the reservation was made (UTC, ISO 8601).

    Examples
    --------
    >>> from fedustat.privacy.budget import ReleaseProcess
    >>> ReleaseProcess(4242, "analysis-host", "2024-05-01T10:00:00+00:00").pid
    4242
    """

    pid: int
    host: str
    started: str

    @classmethod
    def this(cls) -> ReleaseProcess:
        """The calling process, now.

        Returns
        -------
        ReleaseProcess

        Examples
        --------
        >>> import os
        >>> from fedustat.privacy.budget import ReleaseProcess
        >>> ReleaseProcess.this().pid == os.getpid()
        True
        """
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        return cls(os.getpid(), socket.gethostname(), now)

    def describe(self) -> str:
        """In words, for messages and ``fedustat budget FILE``.

        Returns
        -------
        str

        Examples
        --------
        >>> from fedustat.privacy.budget import ReleaseProcess
        >>> ReleaseProcess(4242, "h", "2024-05-01T10:00:00+00:00").describe()
        'process 4242 on h, started 2024-05-01T10:00:00+00:00'
        """
        return f"process {self.pid} on {self.host}, started {self.started}"


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
    status:
        ``"spent"``, ``"reserved"`` or ``"withheld"`` (:data:`STATUSES`); every status
        counts in :attr:`BudgetAccountant.spent`.
    process:
        The :class:`ReleaseProcess` that reserved it (budget files), else None.
    rho_source:
        How ``rho`` was found (:data:`RHO_SOURCES`), else None.

    Examples
    --------
    >>> from fedustat import BudgetAccountant, PrivacyGuarantee
    >>> acct = BudgetAccountant(1.0)
    >>> _ = acct.spend(PrivacyGuarantee(0.4), name="auc")
    >>> entry = acct.ledger[0]
    >>> entry.name, entry.cost.epsilon, entry.rho, entry.status
    ('auc', 0.4, None, 'spent')
    """

    name: str
    guarantee: PrivacyGuarantee
    cost: PrivacyGuarantee
    rho: float | None = None
    status: str = "spent"
    process: ReleaseProcess | None = None
    rho_source: str | None = None


def _advanced_total(eps: list[float], delta_slack: float) -> float:
    # DRV 2010 Thm III.3 with per-step ranges eps_i (see module docstring).
    return (math.sqrt(2.0 * math.log(1.0 / delta_slack) * math.fsum(e * e for e in eps))
            + math.fsum(e * math.expm1(e) for e in eps))


def _covers(covered: tuple[PrivacyGuarantee, float | None], cost: PrivacyGuarantee,
            rho: float | None) -> bool:
    """Whether a release's cost is within what was checked (or reserved) for it."""
    held, held_rho = covered
    within = (cost.epsilon <= held.epsilon * (1.0 + _SLACK)
              and cost.delta <= held.delta * (1.0 + _SLACK) + 1e-300)
    if rho is not None:
        within = within and held_rho is not None and rho <= held_rho * (1.0 + _SLACK)
    return within


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
        # Costs checked by before_release, waiting for their after_release (last first).
        self._planned: list[tuple[PrivacyGuarantee, float | None]] = []

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
              gaussian: bool) -> tuple[PrivacyGuarantee, float | None, str | None]:
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
        growth = (k - 1) * guarantee.epsilon
        # k e^{(k-1) eps} delta; past e^{700} (near a float's end) taken as 1 (refused).
        delta = (k * math.exp(growth) * guarantee.delta if growth < 700.0
                 else (1.0 if guarantee.delta > 0.0 else 0.0))
        if delta >= 1.0:
            raise BudgetExceededError(f"over {k} neighbouring steps the release's delta becomes "
                                 f"{delta:g} >= 1, which guarantees nothing")
        cost = PrivacyGuarantee(eps, delta, self.model, self.adjacency)
        if self.rule != "zcdp":
            if rho is not None:
                raise ValueError(f"rho is a zCDP cost; rule {self.rule!r} does not use it")
            return cost, None, None
        if rho is not None:
            base, source = check_epsilon(rho, "rho"), "given"
        elif guarantee.delta == 0.0:
            base, source = guarantee.epsilon**2 / 2.0, "epsilon"  # Bun & Steinke Prop. 1.4
        elif gaussian:
            base, source = gaussian_rho(guarantee.epsilon, guarantee.delta), "gaussian"
        else:
            raise IncomparableGuaranteeError(
                f"an ({guarantee.epsilon:g}, {guarantee.delta:g})-DP guarantee does not "
                "determine a zCDP rho: pass rho= (a Gaussian release with sensitivity D "
                "and scale sigma has rho = D^2 / (2 sigma^2)) or gaussian=True for a "
                "Gaussian mechanism calibrated to that (epsilon, delta)")
        return cost, k * k * base, source  # Bun & Steinke Prop. 1.9

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
        cost, r, source = self._cost(guarantee, rho, gaussian)
        costs = [e.cost for e in self._ledger] + [cost]
        rhos = [e.rho for e in self._ledger if e.rho is not None]
        if r is not None:
            rhos.append(r)
        entry = LedgerEntry("", guarantee, cost, r, rho_source=source)
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
        self._ledger.append(replace(entry, name=self._label(name)))
        return entry.cost

    def _label(self, name: str | None) -> str:
        return f"release {len(self._ledger) + 1}" if name is None else str(name)

    # -- reservations -------------------------------------------------------------------

    def reserve(self, guarantee: PrivacyGuarantee, *, name: str | None = None,
                rho: float | None = None, gaussian: bool = False,
                process: ReleaseProcess | None = None) -> LedgerEntry:
        """Count a release before it runs: checked as by :meth:`check`, then recorded with
        status ``"reserved"``; :meth:`commit` or :meth:`cancel` settles it.

        Parameters
        ----------
        guarantee, name, rho, gaussian:
            As for :meth:`spend`: the guarantee the release will deliver.
        process:
            Who reserved it (:class:`ReleaseProcess`), kept in the ledger.

        Returns
        -------
        LedgerEntry
            The reservation (pass it to :meth:`commit` or :meth:`cancel`).

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> held = budget.reserve(PrivacyGuarantee(0.6), name="auc")
        >>> budget.spent, held.status
        ((0.6, 0.0), 'reserved')
        >>> print(budget.commit(held, PrivacyGuarantee(0.6)))
        (eps=0.6) central DP, adjacency: replace one record
        >>> [entry.status for entry in budget.ledger]
        ['spent']
        """
        self.check(guarantee, rho=rho, gaussian=gaussian)
        entry, _ = self._after(guarantee, rho, gaussian)
        held = replace(entry, name=self._label(name), status="reserved", process=process)
        self._ledger.append(held)
        return held

    def _position(self, reservation: LedgerEntry) -> int:
        for i, entry in enumerate(self._ledger):
            if entry is reservation:
                if entry.status != "reserved":
                    break
                return i
        raise ValueError(f"{reservation.name!r} is not an open reservation of this budget")

    def cancel(self, reservation: LedgerEntry) -> None:
        """Remove a reservation whose run failed before it released anything.

        Parameters
        ----------
        reservation:
            What :meth:`reserve` returned.

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> budget.cancel(budget.reserve(PrivacyGuarantee(0.6)))
        >>> budget.spent
        (0.0, 0.0)
        """
        del self._ledger[self._position(reservation)]

    def commit(self, reservation: LedgerEntry, delivered: PrivacyGuarantee, *,
               name: str | None = None, rho: float | None = None,
               gaussian: bool = False) -> PrivacyGuarantee:
        """Replace a reservation by the guarantee its release delivered.

        A release that delivered more than its reservation (a larger epsilon, delta or rho
        under the budget's relation) is withheld: the row becomes ``"withheld"``, charged
        with what the release delivered (the whole budget if that cannot be priced), and
        :class:`ReleaseWithheldError` is raised, so the caller never shows it.

        Parameters
        ----------
        reservation:
            What :meth:`reserve` returned.
        delivered:
            The release's guarantee (``release.privacy``).
        name:
            The row's final name (default: the reservation's).
        rho, gaussian:
            As for :meth:`spend`.

        Returns
        -------
        PrivacyGuarantee
            What the release cost, under the budget's adjacency and model.

        Raises
        ------
        ReleaseWithheldError
            The release delivered more than was reserved for it.

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> held = budget.reserve(PrivacyGuarantee(0.5), name="tau")
        >>> budget.commit(held, PrivacyGuarantee(0.4)).epsilon, budget.spent
        (0.4, (0.4, 0.0))
        """
        index = self._position(reservation)
        label = reservation.name if name is None else str(name)
        return self._settle(label, (reservation.cost, reservation.rho), delivered, rho,
                            gaussian, reservation.process, index)

    def _settle(self, label: str, covered: tuple[PrivacyGuarantee, float | None] | None,
                delivered: PrivacyGuarantee, rho: float | None, gaussian: bool,
                process: ReleaseProcess | None, index: int | None) -> PrivacyGuarantee:
        """Record a release that ran (at ``index``, a reservation, or appended): spent if
        ``covered`` (what was checked before it ran; None: nothing was) covers what it
        delivered, else withheld, charged, and :class:`ReleaseWithheldError` raised."""
        why = None
        try:
            cost, r, source = self._cost(delivered, rho, gaussian)
        except IncomparableGuaranteeError as exc:
            # It ran, yet cannot be priced under this budget: charge the whole budget, so
            # that nothing more is spent until a person looks at it.
            why = f"a guarantee this budget cannot price ({exc}); the whole budget is charged"
            charged = PrivacyGuarantee(self.epsilon, 0.0, self.model, self.adjacency)
            cost, r, source = self._cost(charged, None, False)
            entry = LedgerEntry(label, charged, cost, r, "withheld", process, source)
        else:
            entry = LedgerEntry(label, delivered, cost, r, "spent", process, source)
            if covered is None:
                _, (eps, delta) = self._after(delivered, rho, gaussian)
                fits = self._fits(eps, delta)
                checked = "the budget's remainder (nothing was checked before it ran)"
            else:
                fits = _covers(covered, cost, r)
                checked = (f"the (epsilon={covered[0].epsilon:g}, "
                           f"delta={covered[0].delta:g}) checked before it ran")
            if not fits:
                why = (f"(epsilon={delivered.epsilon:g}, delta={delivered.delta:g}), more "
                       f"than {checked}: the release is withheld (not returned) and what it "
                       "delivered is charged")
                entry = replace(entry, status="withheld")
        if index is None:
            self._ledger.append(entry)
        else:
            self._ledger[index] = entry
        if why is not None:
            raise ReleaseWithheldError(f"{label} delivered {why}")
        return entry.cost

    # -- what the release functions call ------------------------------------------------

    def before_release(self, guarantee: PrivacyGuarantee, *, name: str | None = None,
                       rho: float | None = None, gaussian: bool = False) -> None:
        """Called by the release functions just before any party runs, with the guarantee
        the protocol will deliver (``Protocol.planned_guarantee``): :meth:`check` it, and
        remember it for :meth:`after_release`. (The budget of a :class:`BudgetFile`
        reserves it in the file instead.)

        Parameters
        ----------
        guarantee, name, rho, gaussian:
            As for :meth:`spend`.

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> budget.before_release(PrivacyGuarantee(0.5), name="auc")
        >>> budget.spent
        (0.0, 0.0)
        """
        self.check(guarantee, rho=rho, gaussian=gaussian)
        entry, _ = self._after(guarantee, rho, gaussian)
        self._planned.append((entry.cost, entry.rho))

    def after_release(self, delivered: PrivacyGuarantee, *, name: str | None = None,
                      rho: float | None = None, gaussian: bool = False) -> PrivacyGuarantee:
        """Called by the release functions after the run, with the release's guarantee:
        spent if the guarantee checked by :meth:`before_release` covers it; otherwise
        charged as ``"withheld"`` and :class:`ReleaseWithheldError` raised (the caller
        never shows the release).

        Parameters
        ----------
        delivered, name, rho, gaussian:
            As for :meth:`spend`.

        Returns
        -------
        PrivacyGuarantee
            What the release cost.

        Examples
        --------
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> budget = BudgetAccountant(1.0)
        >>> budget.before_release(PrivacyGuarantee(0.5), name="auc")
        >>> budget.after_release(PrivacyGuarantee(0.5), name="auc").epsilon, budget.spent
        (0.5, (0.5, 0.0))
        """
        covered = self._planned.pop() if self._planned else None
        return self._settle(self._label(name), covered, delivered, rho, gaussian, None, None)

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
            "ledger": [_row(e, self._group_size(e.guarantee)) for e in self._ledger],
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

        Every field is checked for its type and range, and under ``"zcdp"`` a row's rho
        against its guarantee; a row ``"reserved"`` (a run that never committed) counts
        as spent. Anything wrong raises :class:`LedgerError` (a ``ValueError``) with a
        one-line message naming the row and the field.

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
        fedustat.privacy.budget.LedgerError: the ledger spends more than its total: ledger row 1
        ('auc') brings the spent budget to (epsilon=1.5, delta=0), over the total ...
        """
        if not isinstance(data, dict):
            raise LedgerError(f"a budget must be a JSON object, got {_kind(data)}")
        _check_keys(data, _BUDGET_KEYS, {"delta_slack"}, "the budget")
        rule = _text(data["rule"], "rule")
        slack = data.get("delta_slack")
        try:
            acct = cls(_number(data["epsilon"], "epsilon"), _number(data["delta"], "delta"),
                       rule=rule,
                       delta_slack=None if slack is None else _number(slack, "delta_slack"),
                       adjacency=_text(data["adjacency"], "adjacency"),
                       model=_text(data["model"], "model"))
        except (TypeError, ValueError) as exc:
            raise LedgerError(f"the budget's total: {exc}") from None
        rows = data["ledger"]
        if not isinstance(rows, list):
            raise LedgerError(f"field 'ledger' must be a list of rows, got {_kind(rows)}")
        for number, row in enumerate(rows, start=1):
            acct._restore(number, row)
        return acct

    def _restore(self, number: int, row: Any) -> None:
        """Spend ledger row ``number`` again, as :meth:`from_dict` reads it."""
        where = f"ledger row {number}"
        if not isinstance(row, dict):
            raise LedgerError(f"{where} must be an object, got {_kind(row)}")
        _check_keys(row, _ROW_KEYS, {"rho", "rho_from", "status", "process"}, where)
        name = _text(row["name"], f"{where}: name", empty=True)
        where = f"{where} ({name!r})"
        status = row.get("status", "spent")
        if status not in STATUSES:
            raise LedgerError(f"{where}: status must be one of {', '.join(STATUSES)}, got "
                              f"{status!r}")
        process = _process(row.get("process"), where)
        if status == "reserved" and process is None:
            raise LedgerError(f"{where}: a reserved row must name the process that reserved "
                              "it (field 'process')")
        try:
            model = _model(row["model"])
            guarantee = PrivacyGuarantee(_number(row["epsilon"], "epsilon"),
                                         _number(row["delta"], "delta"), model,
                                         _text(row["adjacency"], "adjacency"))
        except (TypeError, ValueError) as exc:
            raise LedgerError(f"{where}: {exc}") from None
        rho = row.get("rho")
        source = row.get("rho_from")
        if rho is not None:
            rho = _number(rho, f"{where}: rho")
            source = self._check_rho(guarantee, rho, source, where)
        elif source is not None:
            raise LedgerError(f"{where}: rho_from {source!r} is given but rho is null")
        try:
            # A stored rho (checked against its guarantee above) is charged as it is.
            entry, (eps, delta) = self._after(guarantee, rho, False)
            if rho is not None:
                entry = replace(entry, rho_source=source)
        except (TypeError, ValueError) as exc:
            raise LedgerError(f"{where}: {exc}") from None
        except ArithmeticError:  # sums of epsilons near the largest float
            raise LedgerError(f"{where}: its epsilon or rho is too large to compose") from None
        # A withheld row was charged after its run, beyond what was checked: it is kept
        # whatever the total. Any other row must fit, as when it was spent.
        if status != "withheld" and not self._fits(eps, delta):
            raise LedgerError(
                f"the ledger spends more than its total: {where} brings the spent budget to "
                f"(epsilon={eps:.6g}, delta={delta:.3g}), over the total "
                f"(epsilon={self.epsilon:g}, delta={self.delta:g}); was the file edited?")
        self._ledger.append(replace(entry, name=name, status=status, process=process))

    def _check_rho(self, guarantee: PrivacyGuarantee, rho: float, source: Any,
                   where: str) -> str:
        """The rho source of a stored row, checked against its guarantee: a zCDP row whose
        rho does not follow from its epsilon (and delta) is refused."""
        if self.rule != "zcdp":
            raise LedgerError(f"{where}: rho is a zCDP cost, but the budget's rule is "
                              f"{self.rule!r} (set it to null)")
        if source is None:  # files written before rho_from was recorded
            source = "epsilon" if guarantee.delta == 0.0 else "given"
        if source not in RHO_SOURCES:
            raise LedgerError(f"{where}: rho_from must be one of {', '.join(RHO_SOURCES)}, "
                              f"got {source!r}")
        eps, delta = guarantee.epsilon, guarantee.delta
        if source == "epsilon":
            if delta != 0.0:
                raise LedgerError(f"{where}: rho_from 'epsilon' is for pure epsilon-DP rows, "
                                  f"but delta is {delta:g}")
            expected = eps**2 / 2.0  # Bun & Steinke Prop. 1.4
            if not math.isclose(rho, expected, rel_tol=1e-9):
                raise LedgerError(f"{where}: rho {rho:.6g} does not match its epsilon {eps:g} "
                                  f"(a pure epsilon-DP release has rho = epsilon^2 / 2 = "
                                  f"{expected:.6g})")
        elif source == "gaussian":
            if delta == 0.0:
                raise LedgerError(f"{where}: rho_from 'gaussian' needs delta > 0")
            # The Gaussian mechanism of this rho has unit scale sigma = 1 / sqrt(2 rho)
            # (Bun & Steinke Prop. 1.6); it is the one calibrated to (eps, delta) iff its
            # delta at eps (Balle & Wang 2018, Thm 8) is delta. Checked in this direction
            # (no root finding), so an edited row cannot make the reader search for long.
            try:
                at_rho = gaussian_delta(1.0 / math.sqrt(2.0 * rho), 1.0, eps)
            except (ArithmeticError, ValueError):
                at_rho = math.nan
            if not abs(at_rho - delta) <= 1e-3 * delta + 1e-15:
                raise LedgerError(f"{where}: rho {rho:.6g} does not match its epsilon {eps:g} "
                                  f"and delta {delta:g}: the Gaussian mechanism of that rho "
                                  f"has delta {at_rho:.3g} at epsilon {eps:g}")
        return source

    @classmethod
    def from_json(cls, text: str) -> BudgetAccountant:
        """Inverse of :meth:`to_json`; refuses what :meth:`from_dict` refuses, and text
        that is not JSON (a truncated file), with :class:`LedgerError`.

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
        if not isinstance(text, str | bytes):
            raise LedgerError(f"a budget file's text must be a string, got {_kind(text)}")
        try:
            data = json.loads(text, parse_constant=_refuse_constant)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise LedgerError(f"not valid JSON (truncated or edited by hand?): {exc}"
                              ) from None
        except RecursionError:
            raise LedgerError("not a budget: JSON nested too deeply") from None
        return cls.from_dict(data)


_BUDGET_KEYS = ("epsilon", "delta", "rule", "adjacency", "model", "ledger")
_ROW_KEYS = ("name", "epsilon", "delta", "model", "adjacency")


def _row(entry: LedgerEntry, group: int) -> dict[str, Any]:
    """A ledger row as :meth:`BudgetAccountant.to_dict` writes it."""
    g = entry.guarantee
    row: dict[str, Any] = {"name": entry.name, "epsilon": g.epsilon, "delta": g.delta,
                           "model": g.model.value, "adjacency": g.adjacency,
                           # The release's own rho (before group privacy): from_dict
                           # charges it again.
                           "rho": None if entry.rho is None else entry.rho / group**2,
                           "status": entry.status}
    if entry.rho_source is not None:
        row["rho_from"] = entry.rho_source
    if entry.process is not None:
        row["process"] = {"pid": entry.process.pid, "host": entry.process.host,
                          "started": entry.process.started}
    return row


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _refuse_constant(name: str) -> float:
    raise LedgerError(f"{name} is not a number a budget can hold")


def _check_keys(data: dict[str, Any], required: tuple[str, ...], optional: set[str],
                where: str) -> None:
    missing = [k for k in required if k not in data]
    if missing:
        raise LedgerError(f"{where} misses the field(s) {', '.join(missing)}")
    unknown = sorted(str(k) for k in data if k not in required and k not in optional)
    if unknown:
        raise LedgerError(f"{where} has unknown field(s) {', '.join(unknown)}")


def _number(value: Any, what: str) -> float:
    """A JSON number (not a boolean, not a string), finite: ranges are the callers'."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LedgerError(f"{what} must be a number, got {_kind(value)} {value!r}")
    try:
        number = float(value)
    except OverflowError:
        raise LedgerError(f"{what} is too large: {value}") from None
    if not math.isfinite(number):
        raise LedgerError(f"{what} must be finite, got {value!r}")
    return number


def _text(value: Any, what: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty):
        raise LedgerError(f"{what} must be a{'' if empty else ' non-empty'} string, got "
                          f"{_kind(value)} {value!r}")
    return value


def _model(value: Any) -> PrivacyModel:
    try:
        return PrivacyModel(_text(value, "model"))
    except ValueError:
        raise LedgerError(f"model must be one of {', '.join(m.value for m in PrivacyModel)}, "
                          f"got {value!r}") from None


def _process(value: Any, where: str) -> ReleaseProcess | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise LedgerError(f"{where}: process must be an object, got {_kind(value)}")
    _check_keys(value, ("pid", "host", "started"), set(), f"{where}: process")
    pid = value["pid"]
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise LedgerError(f"{where}: process pid must be a positive integer, got {pid!r}")
    return ReleaseProcess(pid, _text(value["host"], f"{where}: process host"),
                          _text(value["started"], f"{where}: process started"))


# -- budget files shared by processes ---------------------------------------------------

def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _named(path: Path) -> str:
    return f"budget file {str(path)!r}"


@contextlib.contextmanager
def _exclusive_lock(path: Path, on_wait: Callable[[], None] | None,
                    wait: bool = True) -> Iterator[bool]:
    """Hold ``flock(LOCK_EX)`` on ``path``'s sidecar lock file; yields whether it was taken
    (always True when ``wait``). The lock file is never removed: removing it while another
    process waits on it would let two processes hold "the" lock."""
    if fcntl is None:  # pragma: no cover - not POSIX
        raise LedgerError(f"{_named(path)}: sharing a budget file needs POSIX file locks "
                          "(fcntl), which this platform does not have")
    lock = _lock_path(path)
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise LedgerError(f"{_named(path)}: cannot open its lock file {str(lock)!r}: "
                          f"{exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            taken = True
        except BlockingIOError:
            taken = wait
            if wait:
                if on_wait is not None:
                    on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield taken
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` so that a reader (or a crash) sees the old file or the
    new one, never a part: a temporary file in the same directory, fsync, os.replace, and
    an fsync of the directory for the rename."""
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise LedgerError(f"{_named(path)}: cannot write the ledger: {exc.strerror or exc}"
                          ) from None
    with contextlib.suppress(OSError):  # not every file system syncs directories
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _read(path: Path, kind: type[BudgetAccountant]) -> Any:
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise LedgerError(f"{_named(path)}: no such file") from None
    except UnicodeDecodeError:
        raise LedgerError(f"{_named(path)}: not a budget (not UTF-8 text)") from None
    except OSError as exc:
        raise LedgerError(f"{_named(path)}: cannot read it: {exc.strerror}") from None
    try:
        return kind.from_json(text)
    except LedgerError as exc:
        raise LedgerError(f"{_named(path)}: {exc}") from None


class FileBudget(BudgetAccountant):
    """The budget of a :class:`BudgetFile` while its lock is held: every change is written
    to the file at once, and :meth:`before_release` reserves.

    Build it with ``with BudgetFile(path) as budget:``; pass it as ``budget=`` to
    :func:`fedustat.estimate` and the one-call functions.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._file: BudgetFile | None = None
        self._stale: tuple[LedgerEntry, ...] = ()
        # Reservations made by before_release and not yet committed (last first).
        self._open: list[LedgerEntry] = []

    def _save(self) -> None:
        if self._file is None:
            raise LedgerError("this budget is not held by a BudgetFile")
        _write_atomically(self._file.path, self.to_json(indent=2) + "\n")

    @property
    def stale(self) -> tuple[LedgerEntry, ...]:
        """Reservations found in the file when its lock was taken: runs whose process
        ended before committing (killed, crashed). They stay counted as spent."""
        return self._stale

    def spend(self, guarantee: PrivacyGuarantee, *, name: str | None = None,
              rho: float | None = None, gaussian: bool = False) -> PrivacyGuarantee:
        cost = super().spend(guarantee, name=name, rho=rho, gaussian=gaussian)
        self._save()
        return cost

    def reserve(self, guarantee: PrivacyGuarantee, *, name: str | None = None,
                rho: float | None = None, gaussian: bool = False,
                process: ReleaseProcess | None = None) -> LedgerEntry:
        held = super().reserve(guarantee, name=name, rho=rho, gaussian=gaussian,
                               process=ReleaseProcess.this() if process is None else process)
        try:
            self._save()
        except LedgerError:
            super().cancel(held)  # not written, so the release must not run
            raise
        return held

    def cancel(self, reservation: LedgerEntry) -> None:
        super().cancel(reservation)
        self._save()

    def commit(self, reservation: LedgerEntry, delivered: PrivacyGuarantee, *,
               name: str | None = None, rho: float | None = None,
               gaussian: bool = False) -> PrivacyGuarantee:
        try:
            return super().commit(reservation, delivered, name=name, rho=rho,
                                  gaussian=gaussian)
        finally:  # a withheld release is charged in the file too
            self._save()

    def before_release(self, guarantee: PrivacyGuarantee, *, name: str | None = None,
                       rho: float | None = None, gaussian: bool = False) -> None:
        """Reserve the release in the file (written before this returns, so before any
        party runs)."""
        self._open.append(self.reserve(guarantee, name=name, rho=rho, gaussian=gaussian))

    def after_release(self, delivered: PrivacyGuarantee, *, name: str | None = None,
                      rho: float | None = None, gaussian: bool = False) -> PrivacyGuarantee:
        """Commit the last open reservation with the delivered guarantee (written before
        this returns); a release that delivered more is withheld and charged."""
        if self._open:
            return self.commit(self._open.pop(), delivered, name=name, rho=rho,
                               gaussian=gaussian)
        try:
            return super().after_release(delivered, name=name, rho=rho, gaussian=gaussian)
        finally:
            self._save()

    @contextlib.contextmanager
    def attempt(self) -> Iterator[None]:
        """Around one release: reservations made inside it are removed from the file if it
        raises (a refusal, a failed run; ``SystemExit`` too). An interrupt
        (``KeyboardInterrupt``) leaves them counted, as a killed process does.

        Examples
        --------
        >>> import math, tempfile
        >>> from pathlib import Path
        >>> from fedustat import BudgetAccountant, PrivacyGuarantee
        >>> from fedustat.privacy.budget import BudgetFile
        >>> path = Path(tempfile.mkdtemp()) / "b.json"
        >>> BudgetFile.create(path, BudgetAccountant(1.0))
        >>> with BudgetFile(path) as budget:
        ...     try:
        ...         with budget.attempt():
        ...             budget.before_release(PrivacyGuarantee(0.5), name="auc")
        ...             raise ValueError("the run failed")
        ...     except ValueError:
        ...         pass
        >>> BudgetFile.read(path)[0].spent
        (0.0, 0.0)
        """
        mark = len(self._open)
        try:
            yield
        except (Exception, SystemExit):
            self._cancel_open(mark)
            raise

    def _cancel_open(self, mark: int) -> None:
        held, self._open[mark:] = self._open[mark:], []
        for reservation in held:
            BudgetAccountant.cancel(self, reservation)
        if held:
            # If this write fails the reservations stay in the file: counted, which is safe.
            with contextlib.suppress(LedgerError):
                self._save()


class BudgetFile:
    """A budget file shared by processes: ``with BudgetFile(path) as budget:`` holds an
    exclusive lock on it (``flock`` on ``path.lock``), reads the ledger as it is now and
    yields its :class:`FileBudget`.

    While the lock is held, each release is checked against that fresh ledger and reserved
    in the file before any party runs (:meth:`FileBudget.before_release`), then committed
    with what it delivered (:meth:`FileBudget.after_release`). A release that raises inside
    :meth:`FileBudget.attempt` (or the ``with`` block) has its reservation removed; a
    process killed during a run leaves its reservation in the file, counted as spent, with
    ``"status": "reserved"`` and the process that made it, for a person to see. Other
    processes wait for the lock (``on_wait`` is called once if they must).

    Parameters
    ----------
    path:
        The budget file (made by :meth:`create` or ``fedustat budget FILE --epsilon E``).
    on_wait:
        Called once when another process holds the lock, before waiting for it.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> import fedustat
    >>> from fedustat import BudgetAccountant
    >>> from fedustat.privacy.budget import BudgetFile
    >>> path = Path(tempfile.mkdtemp()) / "study.budget.json"
    >>> BudgetFile.create(path, BudgetAccountant(1.0, adjacency="score"))
    >>> y = np.array([0, 1] * 50)
    >>> s = np.linspace(0.0, 1.0, 100) + 0.3 * y
    >>> with BudgetFile(path) as budget:
    ...     auc = fedustat.roc_auc_score(y, s, epsilon=0.4, rng=1, budget=budget)
    >>> [(entry.name, entry.status) for entry in BudgetFile.read(path)[0].ledger]
    [('auc (central-laplace)', 'spent')]
    """

    def __init__(self, path: str | os.PathLike[str], *,
                 on_wait: Callable[[], None] | None = None) -> None:
        self.path = Path(path)
        self.on_wait = on_wait
        self._stack: contextlib.ExitStack | None = None
        self.budget: FileBudget | None = None

    def __enter__(self) -> FileBudget:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_exclusive_lock(self.path, self.on_wait))
            budget = _read(self.path, FileBudget)
            budget._file = self
            budget._stale = tuple(e for e in budget.ledger if e.status == "reserved")
            self._stack = stack.pop_all()
        self.budget = budget
        return budget

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if self.budget is not None and exc_type is not None \
                    and issubclass(exc_type, Exception | SystemExit):
                self.budget._cancel_open(0)
        finally:
            self.budget = None
            if self._stack is not None:
                self._stack.close()
                self._stack = None

    @staticmethod
    def create(path: str | os.PathLike[str], budget: BudgetAccountant, *,
               replace: bool = False, on_wait: Callable[[], None] | None = None) -> None:
        """Write ``budget`` as a new budget file, under the file's lock.

        Parameters
        ----------
        path:
            Where to write it.
        budget:
            The budget (usually a fresh :class:`BudgetAccountant`).
        replace:
            Replace an existing file (its ledger is lost); else FileExistsError.
        on_wait:
            As for :class:`BudgetFile`.

        Examples
        --------
        >>> import tempfile
        >>> from pathlib import Path
        >>> from fedustat import BudgetAccountant
        >>> from fedustat.privacy.budget import BudgetFile
        >>> path = Path(tempfile.mkdtemp()) / "b.json"
        >>> BudgetFile.create(path, BudgetAccountant(2.0))
        >>> BudgetFile.read(path)[0].epsilon
        2.0
        """
        target = Path(path)
        with _exclusive_lock(target, on_wait):
            if target.exists() and not replace:
                raise FileExistsError(f"{str(target)!r} exists; replacing it would lose its "
                                      "ledger")
            _write_atomically(target, budget.to_json(indent=2) + "\n")

    @staticmethod
    def read(path: str | os.PathLike[str]) -> tuple[BudgetAccountant, bool]:
        """The budget in a file, read without waiting for its lock, and whether a run holds
        the lock now (then its ``"reserved"`` rows may be running, not stale).

        Parameters
        ----------
        path:
            The budget file.

        Returns
        -------
        (BudgetAccountant, bool)

        Examples
        --------
        >>> import tempfile
        >>> from pathlib import Path
        >>> from fedustat import BudgetAccountant
        >>> from fedustat.privacy.budget import BudgetFile
        >>> path = Path(tempfile.mkdtemp()) / "b.json"
        >>> BudgetFile.create(path, BudgetAccountant(1.0))
        >>> BudgetFile.read(path)[1]
        False
        """
        target = Path(path)
        with _exclusive_lock(target, None, wait=False) as taken:
            return _read(target, BudgetAccountant), not taken


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
