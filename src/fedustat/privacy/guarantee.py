"""The privacy guarantee a release carries, as data (ARCHITECTURE.md, principle 2)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from fedustat._validation import check_delta, check_epsilon


class PrivacyModel(StrEnum):
    """Who must be trusted for the guarantee to hold."""

    LOCAL = "local"  # each party randomizes its own input; the aggregator is untrusted
    CENTRAL = "central"  # a trusted curator (or secure computation emulating one) adds noise
    LABEL = "label"  # only the labels are protected (label differential privacy)
    COMPUTATIONAL = "computational"  # holds against computationally bounded adversaries
    NONE = "none"  # exact, non-private computation


@dataclass(frozen=True)
class PrivacyGuarantee:
    """An (epsilon, delta) differential-privacy guarantee in a stated model.

    ``adjacency`` names the neighbouring relation, e.g. ``"replace one record"``
    (bounded DP) or ``"change one label"``.
    """

    epsilon: float
    delta: float = 0.0
    model: PrivacyModel = PrivacyModel.CENTRAL
    adjacency: str = "replace one record"

    def __post_init__(self) -> None:
        if self.model is PrivacyModel.NONE:
            if not math.isinf(self.epsilon):
                raise ValueError("a non-private release must have epsilon = inf")
            return
        check_epsilon(self.epsilon, "epsilon", allow_inf=True)
        check_delta(self.delta, "delta")

    @classmethod
    def none(cls) -> PrivacyGuarantee:
        """The 'guarantee' of an exact, non-private computation."""
        return cls(math.inf, 0.0, PrivacyModel.NONE, "none")

    @property
    def is_pure(self) -> bool:
        return self.delta == 0.0 and math.isfinite(self.epsilon)

    def __str__(self) -> str:
        if self.model is PrivacyModel.NONE:
            return "not private"
        eps = f"eps={self.epsilon:g}"
        d = f", delta={self.delta:g}" if self.delta else ""
        return f"({eps}{d}) {self.model.value} DP, adjacency: {self.adjacency}"
