"""The privacy guarantee a release carries, as data (ARCHITECTURE.md, principle 2).

A guarantee is (epsilon, delta) in a model under an adjacency, and the trust it rests on:
who must behave (a curator, a dealer, servers that do not collude), what the adversary is
assumed unable to do (break AES), and who must not collude with whom. The assumptions are
data too, so a release can be judged by what it asks the user to believe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import StrEnum

from fedustat._validation import check_delta, check_epsilon


class PrivacyModel(StrEnum):
    """Who must be trusted for the guarantee to hold.

    Parameters
    ----------
    value:
        The model's name: ``"local"``, ``"central"``, ``"label"``, ``"computational"`` or
        ``"none"``.

    Examples
    --------
    >>> from fedustat import PrivacyModel
    >>> PrivacyModel("local") is PrivacyModel.LOCAL
    True
    >>> [model.value for model in PrivacyModel]
    ['local', 'central', 'label', 'computational', 'none']
    """

    LOCAL = "local"  # each party randomizes its own input; the aggregator is untrusted
    CENTRAL = "central"  # a trusted curator (or secure computation emulating one) adds noise
    LABEL = "label"  # only the labels are protected (label differential privacy)
    COMPUTATIONAL = "computational"  # holds against computationally bounded adversaries
    NONE = "none"  # exact, non-private computation


class Trust(StrEnum):
    """Kinds of trust a guarantee may rest on."""

    CURATOR = "trusted curator"
    DEALER = "trusted dealer"
    NON_COLLUDING_SERVERS = "non-colluding servers"
    SEMI_HONEST = "semi-honest parties"
    COMPUTATIONAL = "computational security"
    HONEST_NOISE = "honest noise contributors"
    SHUFFLER = "trusted shuffler"
    LOCAL = "no trusted party"


@dataclass(frozen=True)
class Assumption:
    """One assumption a guarantee rests on: its kind and what exactly is assumed."""

    kind: Trust
    detail: str

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.detail}"


def trusted_curator() -> Assumption:
    return Assumption(Trust.CURATOR, "one party sees every record in the clear and adds the "
                                     "noise honestly")


def trusted_dealer(what: str) -> Assumption:
    return Assumption(Trust.DEALER, f"an offline dealer deals {what}, colludes with no one "
                                    "and sees nothing of the online phase")


def non_colluding_servers(count: int, tolerated: int | None = None) -> Assumption:
    tolerated = count - 1 if tolerated is None else tolerated
    return Assumption(Trust.NON_COLLUDING_SERVERS,
                      f"{count} servers of which at most {tolerated} collude")


def semi_honest(who: str = "parties and servers") -> Assumption:
    return Assumption(Trust.SEMI_HONEST, f"the {who} follow the protocol (they may try to "
                                         "learn from what they see, not deviate)")


def computational(primitive: str) -> Assumption:
    return Assumption(Trust.COMPUTATIONAL, f"the adversary cannot break {primitive}")


def honest_noise(contributors: int, honest: int) -> Assumption:
    return Assumption(Trust.HONEST_NOISE, f"at least {honest} of the {contributors} noise "
                                          "contributors keep their noise secret")


def trusted_shuffler() -> Assumption:
    return Assumption(Trust.SHUFFLER, "a shuffler mixes the messages and hides who sent them")


def local_only() -> Assumption:
    return Assumption(Trust.LOCAL, "each party randomizes its own record; the aggregator and "
                                   "the other parties may all be adversarial")


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An (epsilon, delta) differential-privacy guarantee in a stated model.

    ``adjacency`` names the neighbouring relation, e.g. ``"replace one record"``
    (bounded DP) or ``"change one label"``. ``assumptions`` are what the guarantee rests
    on (a trusted curator, a dealer, non-colluding servers, semi-honest parties,
    computational security and its primitive); see :class:`Assumption`. They are not part
    of equality: two guarantees with the same (epsilon, delta, model, adjacency) make the
    same DP statement, whatever each asks the user to trust.

    Parameters
    ----------
    epsilon, delta:
        The privacy loss (``epsilon > 0``, ``math.inf`` only for a non-private release) and
        failure probability (in ``[0, 1)``).
    model:
        The :class:`PrivacyModel`: who must be trusted.
    adjacency:
        The neighbouring relation the guarantee is stated under.
    assumptions:
        The :class:`Assumption` objects the guarantee rests on.

    Examples
    --------
    >>> from fedustat import PrivacyGuarantee, PrivacyModel
    >>> print(PrivacyGuarantee(0.5, 1e-6, PrivacyModel.LOCAL))
    (eps=0.5, delta=1e-06) local DP, adjacency: replace one record
    """

    epsilon: float
    delta: float = 0.0
    model: PrivacyModel = PrivacyModel.CENTRAL
    adjacency: str = "replace one record"
    assumptions: tuple[Assumption, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not all(isinstance(a, Assumption) for a in self.assumptions):
            raise TypeError("assumptions must be Assumption objects")
        object.__setattr__(self, "assumptions", tuple(self.assumptions))
        if self.model is PrivacyModel.NONE:
            if not math.isinf(self.epsilon):
                raise ValueError("a non-private release must have epsilon = inf")
            return
        check_epsilon(self.epsilon, "epsilon", allow_inf=True)
        check_delta(self.delta, "delta")

    def assuming(self, *assumptions: Assumption) -> PrivacyGuarantee:
        """This guarantee with ``assumptions`` added.

        Parameters
        ----------
        *assumptions:
            The :class:`Assumption` objects to add.

        Returns
        -------
        PrivacyGuarantee
            A copy; equal to this one, since assumptions are not part of equality.

        Examples
        --------
        >>> from fedustat.privacy.guarantee import trusted_curator
        >>> g = fedustat.PrivacyGuarantee(1.0).assuming(trusted_curator())
        >>> [a.kind.value for a in g.assumptions], g == fedustat.PrivacyGuarantee(1.0)
        (['trusted curator'], True)
        """
        return replace(self, assumptions=(*self.assumptions, *assumptions))

    @classmethod
    def none(cls) -> PrivacyGuarantee:
        """The 'guarantee' of an exact, non-private computation.

        Returns
        -------
        PrivacyGuarantee
            ``epsilon = inf`` in :attr:`PrivacyModel.NONE`.

        Examples
        --------
        >>> g = fedustat.PrivacyGuarantee.none()
        >>> str(g), g.epsilon, g.model.value
        ('not private', inf, 'none')
        """
        return cls(math.inf, 0.0, PrivacyModel.NONE, "none")

    @property
    def is_pure(self) -> bool:
        """Whether the guarantee is pure epsilon-DP: ``delta == 0`` and epsilon finite.

        Examples
        --------
        >>> fedustat.PrivacyGuarantee(1.0).is_pure, fedustat.PrivacyGuarantee(1.0, 1e-6).is_pure
        (True, False)
        """
        return self.delta == 0.0 and math.isfinite(self.epsilon)

    def __str__(self) -> str:
        if self.model is PrivacyModel.NONE:
            return "not private"
        eps = f"eps={self.epsilon:g}"
        d = f", delta={self.delta:g}" if self.delta else ""
        trust = ""
        if self.assumptions:
            trust = "; assuming " + "; ".join(str(a) for a in self.assumptions)
        return f"({eps}{d}) {self.model.value} DP, adjacency: {self.adjacency}{trust}"
