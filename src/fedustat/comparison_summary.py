"""Which protocol to use under each trust model, from a comparison's measured table.

For every statistic of a :func:`fedustat.compare.run_comparison` result and every trust
model (local DP, a trusted curator, secure computation, label DP), the protocols that
meet the trust model (as the advisor registers them, :data:`fedustat.advisor.TRUST_MODELS`)
and ran at every budget of the grid are ranked by their *measured* RMSE: the geometric
mean over the budgets, so that each budget weighs the same whatever its error's size
(the arithmetic mean where a protocol was exact in every repetition at some budget).
The choice is the lowest; the reason given is its measured error and bits per party
against the runner-up's. Nothing here is predicted or fixed in advance: a different
data set or seed can change the choice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fedustat.advisor import Advice


# What the summary reads of a comparison, stated structurally: fedustat.compare imports this
# module to print the summary, so naming its classes here would close an import cycle.
class RunRow(Protocol):
    """One measured cell of a comparison (:class:`fedustat.compare.RunRow`)."""

    @property
    def protocol(self) -> str: ...
    @property
    def epsilon(self) -> float: ...
    @property
    def rmse(self) -> float: ...
    @property
    def bits_per_party(self) -> float | None: ...


class ComparisonResult(Protocol):
    """A comparison (:class:`fedustat.compare.ComparisonResult`), as the summary reads it."""

    @property
    def settings(self) -> Mapping[str, Any]: ...
    @property
    def statistics(self) -> Sequence[str]: ...
    @property
    def advice(self) -> Mapping[tuple[str, float], Advice]: ...

    def rows_for(self, statistic: str) -> Sequence[RunRow]: ...

__all__ = ["SUMMARY_TRUST_MODELS", "TrustChoice", "summarize", "summary_rows"]

#: The trust models the summary covers, in order, with the words a reader knows.
SUMMARY_TRUST_MODELS: Mapping[str, str] = {
    "local": "local DP (nobody trusted)",
    "curator": "central DP (trusted curator)",
    "secure": "secure computation (MPC / computational)",
    "label": "label DP (server sees scores, not labels)",
}


@dataclass(frozen=True)
class TrustChoice:
    """The measured best protocol for one statistic under one trust model.

    Attributes
    ----------
    statistic, trust
        The statistic and the trust model (a key of :data:`SUMMARY_TRUST_MODELS`).
    protocol
        The protocol to use, or None when no protocol meeting the trust model ran at
        every budget.
    rmse
        Its measured RMSE at each budget epsilon.
    score
        Geometric mean of those RMSEs (the ranking key); the arithmetic mean where a
        protocol of the statistic measured an RMSE of 0 at some budget (a release that
        hit the exact value in every repetition), which a geometric mean cannot rank.
    bits_per_party
        Its measured bits per party (mean over the budgets), or None if not measured.
    runner_up, runner_up_score, runner_up_bits
        The next protocol meeting the trust model, its score and bits (None if none).
    candidates
        How many protocols meeting the trust model ran at every budget.
    resolvable_ratio
        The smallest ratio of scores the run resolves: two standard errors of the log
        ratio of two geometric-mean RMSEs, ``exp(2 / sqrt(R E))`` for R repetitions at E
        budgets, R the fewest repetitions of a row (an RMSE from R near-Gaussian errors
        has relative s.e. ``1/sqrt(2R)``;
        the mean of E independent logs divides it by ``sqrt(E)``, a difference of two
        multiplies it by ``sqrt(2)``). 1 when unknown.
    """

    statistic: str
    trust: str
    protocol: str | None
    rmse: Mapping[float, float]
    score: float
    bits_per_party: float | None
    runner_up: str | None
    runner_up_score: float
    runner_up_bits: float | None
    candidates: int
    resolvable_ratio: float = 1.0
    averaging: str = "geometric"

    def reason(self) -> str:
        """Why this protocol: its measured error and cost against the runner-up.

        Returns
        -------
        str
            One sentence for people.

        Examples
        --------
        >>> from fedustat.comparison_summary import TrustChoice
        >>> text = TrustChoice("auc", "local", "ldp-quantized", {1.0: 0.05}, 0.05, 5.0,
        ...                    "ldp-tree", 0.2, 65.0, 2).reason()
        >>> for part in text.split("; "):
        ...     print(part)
        measured RMSE 0.05 at eps=1
        0.05 against ldp-tree's 0.2 (4x lower), at 5 bits/party against 65
        """
        if self.protocol is None:
            return "no protocol meeting this trust model ran at every budget"
        eps = sorted(self.rmse)
        values = [self.rmse[e] for e in eps]
        if len(eps) == 1:
            error = f"measured RMSE {_g(values[0])} at eps={eps[0]:g}"
        else:
            error = (f"measured RMSE {_g(values[0])} at eps={eps[0]:g} to "
                     f"{_g(values[-1])} at eps={eps[-1]:g}")
        if self.runner_up is None:
            return error + "; the only protocol meeting this trust model that ran"
        mean = f"{self.averaging} mean over the budgets " if len(eps) > 1 else ""
        if self.score > 0:
            ratio = self.runner_up_score / self.score
            lower = f"{ratio:.3g}x lower"
        else:  # exact in every repetition at every budget: no ratio to state
            ratio = math.inf if self.runner_up_score > 0 else 1.0
            lower = "exact at every budget" if ratio > 1 else "both exact at every budget"
        text = (f"{error}; {mean}{_g(self.score)} against {self.runner_up}'s "
                f"{_g(self.runner_up_score)} ({lower}), at "
                f"{_bits(self.bits_per_party)} bits/party against "
                f"{_bits(self.runner_up_bits)}")
        if ratio < self.resolvable_ratio:
            text += (f"; not resolved by this run (ratios below "
                     f"{self.resolvable_ratio:.2f} are within its sampling error)")
        return text


def _g(x: float) -> str:
    return f"{x:.3g}"


def _bits(bits: float | None) -> str:
    return "unmeasured" if bits is None else f"{bits:.4g}"


def _mean(values: Sequence[float], averaging: str) -> float:
    if averaging == "arithmetic":
        return sum(values) / len(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _mean_bits(rows: Sequence[RunRow]) -> float | None:
    bits = [r.bits_per_party for r in rows if r.bits_per_party is not None]
    return sum(bits) / len(bits) if bits else None


def summarize(result: ComparisonResult) -> list[TrustChoice]:
    """The measured best protocol per statistic and trust model.

    Parameters
    ----------
    result
        A comparison (:func:`fedustat.compare.run_comparison`).

    Returns
    -------
    list of TrustChoice
        One per statistic and trust model of :data:`SUMMARY_TRUST_MODELS`, in the
        result's statistic order; ``protocol`` is None where none ran.

    Examples
    --------
    >>> from fedustat.compare import run_comparison
    >>> from fedustat.comparison_summary import summarize
    >>> result = run_comparison(["duplicate"], epsilons=[1.0], repetitions=2,
    ...                         protocols=["central-laplace", "ldp-quantized"],
    ...                         progress=False)
    >>> for choice in summarize(result):
    ...     print(choice.trust, choice.protocol)
    local ldp-quantized
    curator central-laplace
    secure ldp-quantized
    label None
    """
    grid = [float(e) for e in result.settings["epsilons"]]
    choices = []
    for st in result.statistics:
        rows = result.rows_for(st)
        # Repetitions vary by row under the stopping rule: the fewest a row of this
        # statistic had sets what the run resolves (conservative).
        fewest = min((r.repetitions for r in rows), default=result.settings["repetitions"])
        resolvable = math.exp(2.0 / math.sqrt(fewest * len(grid)))
        advice = result.advice.get((st, grid[0]))
        by_protocol: dict[str, list[RunRow]] = {}
        for r in rows:
            by_protocol.setdefault(r.protocol, []).append(r)
        complete = {name: mine for name, mine in by_protocol.items()
                    if sorted(r.epsilon for r in mine) == sorted(grid)
                    and all(math.isfinite(r.rmse) for r in mine)}
        # A geometric mean cannot rank an RMSE of 0 (exact in every repetition, as a
        # quantile's level error can be): then every protocol of it is ranked by the
        # arithmetic mean.
        averaging = ("arithmetic" if any(r.rmse <= 0 for mine in complete.values()
                                         for r in mine) else "geometric")
        ranked = [(_mean([r.rmse for r in mine], averaging), name, mine)
                  for name, mine in complete.items()]
        ranked.sort(key=lambda item: (item[0], item[1]))
        for trust in SUMMARY_TRUST_MODELS:
            meeting = [item for item in ranked
                       if advice is not None and _meets(advice, item[1], trust)]
            if not meeting:
                choices.append(TrustChoice(st, trust, None, {}, math.nan, None, None,
                                           math.nan, None, 0))
                continue
            score, name, mine = meeting[0]
            nxt = meeting[1] if len(meeting) > 1 else None
            choices.append(TrustChoice(
                st, trust, name, {r.epsilon: r.rmse for r in mine}, score, _mean_bits(mine),
                None if nxt is None else nxt[1], math.nan if nxt is None else nxt[0],
                None if nxt is None else _mean_bits(nxt[2]), len(meeting),
                resolvable if averaging == "geometric" else 1.0, averaging))
    return choices


def _meets(advice: Advice, protocol: str, trust: str) -> bool:
    try:
        prediction = advice.prediction(protocol)
    except KeyError:
        return False
    return trust in prediction.trust


def summary_rows(choices: Sequence[TrustChoice]) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the summary table (one row per statistic and trust model).

    Parameters
    ----------
    choices
        The output of :func:`summarize`.

    Returns
    -------
    tuple
        ``(headers, rows)`` for :func:`fedustat.advisor.format_table` or a Markdown table.

    Examples
    --------
    >>> from fedustat.comparison_summary import TrustChoice, summary_rows
    >>> headers, rows = summary_rows([TrustChoice("auc", "label", None, {}, math.nan,
    ...                                           None, None, math.nan, None, 0)])
    >>> print(headers)
    ['statistic', 'trust model', 'use', 'why (measured)']
    >>> print(rows[0][:3])
    ['auc', 'label DP (server sees scores, not labels)', '-']
    """
    headers = ["statistic", "trust model", "use", "why (measured)"]
    rows = [[c.statistic, SUMMARY_TRUST_MODELS[c.trust], c.protocol or "-", c.reason()]
            for c in choices]
    return headers, rows
