"""Which protocol to use: predicted error and cost of every applicable protocol.

``advise(statistic, n=..., epsilon=..., trust=...)`` evaluates, for each protocol that can
compute the statistic, the papers' analytic error formula at the given sizes and budget,
and the protocol's communication from its own message encoding, then recommends the
protocol with the lowest predicted mean squared error among those that meet the trust
model and the bits budget, with its parameters (bins k, tree depth d, pruning a, split,
permutations P, edges |E|, grid size N). None of the papers has such a selector; 002
names one as future work.

All predictions are of the error against the statistic of the parties' own data (the
"sample" MSE): the noise, randomization and subsampling a protocol adds, plus the
quantization error where a paper bounds it without looking at the data. Each
:class:`Prediction` says which kind of number it is (``kind``):

* ``"exact"``: the formula is the protocol's exact MSE (Laplace noise, 003 Thm 1);
* ``"upper bound"``: a proven bound (000 Thm 1-3, 002 Lemma D.3, ...);
* ``"upper bound (randomization only)"``: a proven bound on the randomization error
  that leaves out a quantization error the papers bound only with assumptions on the
  data (non-Lipschitz kernels on continuous columns);
* ``"approximate"``: a first-order (delta-method) value, not a bound (FedAUC).

Predictors are registered by protocol name (:func:`register_predictor`): each is a
function of a :class:`Query` returning a :class:`Prediction` (or None when the protocol
does not apply to the statistic), so a new protocol needs one function and one call.
The formulas, with the equation each follows, are listed in ``docs/compare.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedustat import catalogue
from fedustat._validation import (
    check_budget,
    check_delta,
    check_epsilon,
    check_positive_int,
    check_probability,
)
from fedustat.curves import default_grid_points
from fedustat.privacy.accounting import per_step_budget_advanced
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.protocols import registry
from fedustat.protocols.fedauc.protocol import FedAUCLap
from fedustat.protocols.fedauc.variance import (
    global_laplace_std_eq8,
    laplace_linearized_std,
    local_laplace_std_eq9,
    rr_std_corrected,
    rr_std_eq7,
)
from fedustat.protocols.local.auc_tree import (
    DEFAULT_BINNED_DOMAIN,
    node_variance_bound,
    optimal_a,
    report_bits_per_party,
    theorem3_mse_bound,
)
from fedustat.protocols.local.ghazi import GhaziProjection
from fedustat.protocols.local.ghazi_shuffle import JOIN_BITS, GhaziShuffle, table1_bins
from fedustat.protocols.local.quantization import QuantizationPlan, plan_for_kernel
from fedustat.protocols.local.quantized_rr import theorem1_variance_bound
from fedustat.stats.ecdf import tree_depth
from fedustat.stats.kernels import Kernel
from fedustat.stats.ustat import permutation_design_variance, ustat_variance

__all__ = [
    "APPROX",
    "BOUND",
    "CURVE_RELEASES",
    "EXACT",
    "PARTIAL",
    "STATISTICS",
    "TRUST_MODELS",
    "Advice",
    "Prediction",
    "Query",
    "advise",
    "format_table",
    "predicted_statistics",
    "predictors",
    "register_predictor",
]

# Kinds of prediction (see the module docstring).
EXACT = "exact"
BOUND = "upper bound"
PARTIAL = "upper bound (randomization only)"
APPROX = "approximate"

FLOAT_BITS = 64  # a record column or a statistic sent as an IEEE double
DEFAULT_SCORE_BOUNDS = (0.0, 1.0)  # classifier scores are probabilities by default
RING_BITS = 40  # 002 Sec. 6.1: l = 40-bit fixed-point ring elements

# Statistics the advisor knows: every statistic of the catalogue, U-statistics (a
# kernel) and curve releases (003).
STATISTICS: dict[str, str] = {s.name: s.description for s in catalogue.STATISTICS.values()}
# Two public classes given by their sizes n_pos, n_neg.
_LABELLED = tuple(s.name for s in catalogue.STATISTICS.values() if s.columns[-1] == "label")
_CURVES = tuple(catalogue.names("curve"))

# What a user may trust, and which protocols meet it. A protocol lists the settings it
# satisfies when registered (register_predictor(trust=...)):
TRUST_MODELS: dict[str, str] = {
    "local": "nobody: each party randomizes its own record (local DP)",
    "secure": ("no single party sees another's record: semi-honest secure computation "
               "(2PC, MPC) releasing a DP output is acceptable, and so is local DP"),
    "label": ("the server may see the scores but not the labels (vertical FL, 004): "
              "label DP"),
    "curator": ("a trusted aggregator may see the records; the release must be DP for "
                "them (central, secure-computation or local DP)"),
}
_ALL_BUT_LABEL = frozenset({"local", "secure", "curator"})
_SECURE = frozenset({"secure", "curator"})
_CURATOR = frozenset({"curator"})
_LABEL = frozenset({"label"})


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class Query:
    """The validated inputs of :func:`advise`, as every predictor receives them.

    ``bounds`` is normalized to a mapping ``{kernel column: (lo, hi)}`` (continuous
    columns), ``domain`` to ``{kernel column: number of values}`` (discrete columns);
    ``grid_points`` is N for the curve statistics.
    """

    statistic: str
    n: int
    n_pos: int | None
    n_neg: int | None
    epsilon: float
    delta: float
    bounds: Mapping[str, tuple[float, float]]
    domain: Mapping[str, int]
    zeta: tuple[float, float] | None
    auc: float | None
    grid_points: int
    silos: int | None = None
    records_per_silo: int | None = None

    @property
    def kernel(self) -> Kernel | None:
        """The kernel of a U-statistic (None for the curve statistics)."""
        return _kernel_for(self.statistic, self.bounds)

    @property
    def n_min(self) -> int:
        return min(self.n_pos or 0, self.n_neg or 0)

    @property
    def setting(self) -> str:
        """The user's setting in words.

        Returns
        -------
        str
            ``"12 silos holding 5,000 records each"`` when the data sit in silos, else
            ``"n=..."`` (``"n+=..., n-=..."`` for the labelled statistics).

        Examples
        --------
        >>> from fedustat.advisor import advise
        >>> advise("kendall", silos=12, records_per_silo=5000, epsilon=1.0).query.setting
        '12 silos holding 5,000 records each'
        >>> advise("kendall", n=500, epsilon=1.0).query.setting
        'n=500'
        """
        labelled = (f"n+={self.n_pos}, n-={self.n_neg}" if self.statistic in _LABELLED
                    else f"n={self.n}")
        if self.silos is None:
            return labelled
        text = f"{self.silos:,} silos holding {self.records_per_silo:,} records each"
        return text + (f" ({labelled})" if self.statistic in _LABELLED else "")


@dataclass(frozen=True)
class Prediction:
    """One protocol's predicted error and cost for a :class:`Query`.

    Attributes
    ----------
    protocol:
        Registry name (or the curve release's name, e.g. ``"dp-ecdf"``).
    model, epsilon, delta:
        The guarantee the protocol delivers with these parameters.
    mse:
        Predicted mean squared error of the released value against the statistic of the
        parties' data (per point for curves; for quantiles the level error, the distance
        from q to the levels at which the release is an exact grid quantile).
    kind:
        ``"exact"``, ``"upper bound"``, ``"upper bound (randomization only)"`` or
        ``"approximate"`` (module docstring).
    formula:
        The equations used, with their paper and section.
    components:
        The MSE's parts (e.g. randomization, quantization) and reference values (e.g.
        the paper's own formula where we use a corrected one).
    bits_per_party, rounds:
        Bits a party sends and message exchanges, from the protocol's encoding (the
        values the simulator measures); None when the protocol is not implemented here
        and its cost cannot be derived from its messages.
    bits_per_silo:
        When the data sit in silos (``advise(..., silos=K, records_per_silo=m)``): the
        bits one silo sends, as the protocol runs in that setting (m parties' messages
        when each record is a party; one client's when the protocol has a silo form).
    parameters:
        The chosen parameters, for people (k, d, a, split, P, |E|, N, ...).
    run_params:
        Keyword parameters that run the protocol with exactly these choices
        (``fedustat.estimate(..., protocol=protocol, **run_params)``); the caller adds the
        public ``bounds`` / ``domain`` of its columns.
    registered:
        Whether the protocol is available in :mod:`fedustat.protocols.registry` (or is
        one of the curve releases of :mod:`fedustat.protocols.ecdf`).
    trust:
        The trust settings of :data:`TRUST_MODELS` the protocol meets.
    eligible, reason:
        Set by :func:`advise`: meets the trust model and the bits budget, or why not.
    notes:
        Assumptions and caveats.
    """

    protocol: str
    model: PrivacyModel
    epsilon: float
    delta: float
    mse: float
    kind: str
    formula: str
    components: Mapping[str, float] = field(default_factory=dict)
    bits_per_party: float | None = None
    rounds: int | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
    run_params: Mapping[str, Any] = field(default_factory=dict)
    registered: bool = True
    trust: frozenset[str] = frozenset()
    eligible: bool = True
    reason: str = ""
    notes: tuple[str, ...] = ()
    bits_per_silo: float | None = None

    @property
    def rmse(self) -> float:
        if math.isnan(self.mse):  # no prediction
            return math.nan
        return math.sqrt(self.mse) if math.isfinite(self.mse) else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "model": self.model.value,
                "epsilon": self.epsilon, "delta": self.delta, "mse": self.mse,
                "rmse": self.rmse, "kind": self.kind, "formula": self.formula,
                "components": dict(self.components), "bits_per_party": self.bits_per_party,
                "rounds": self.rounds, "bits_per_silo": self.bits_per_silo,
                "parameters": _plain(self.parameters),
                "run_params": _plain(self.run_params), "registered": self.registered,
                "meets_trust": sorted(self.trust),
                "eligible": self.eligible, "reason": self.reason, "notes": list(self.notes)}


@dataclass(frozen=True)
class Advice:
    """The advisor's answer: every candidate protocol, and the recommended one.

    ``predictions`` lists every protocol that can compute the statistic, sorted by
    predicted MSE, each marked eligible or not (trust model, bits budget, delta);
    ``recommended`` is the eligible one with the lowest predicted MSE (fewer bits break
    ties), or None.
    """

    query: Query
    trust: str | None
    max_bits_per_party: float | None
    predictions: tuple[Prediction, ...]
    recommended: Prediction | None
    notes: tuple[str, ...] = ()

    def prediction(self, protocol: str) -> Prediction:
        """The prediction for ``protocol``."""
        for p in self.predictions:
            if p.protocol == protocol:
                return p
        names = ", ".join(p.protocol for p in self.predictions)
        raise KeyError(f"no prediction for protocol {protocol!r}; the advice covers {names}")

    def table(self) -> str:
        """A plain-text table of every candidate, the recommended one marked ``*``.

        Below the table: the recommendation in the user's terms, the recommended
        protocol's notes (trust and collusion assumptions, costs that could not be
        computed), why each other protocol was not chosen, and the advice's own notes.

        Returns
        -------
        str
            The text ``fedustat advise`` prints.

        Examples
        --------
        >>> from fedustat.advisor import advise
        >>> text = advise("kendall", silos=12, records_per_silo=5000, epsilon=1.0,
        ...               trust="local").table()
        >>> print(text.splitlines()[0])
        Advice for kendall (12 silos holding 5,000 records each, epsilon=1, delta=0, trust=local)
        >>> "Why not the others:" in text
        True
        """
        q = self.query
        head = (f"Advice for {q.statistic} ({q.setting}, epsilon={q.epsilon:g}, "
                f"delta={q.delta:g}, trust={self.trust or 'any'}"
                + (f", at most {self.max_bits_per_party:g} bits/"
                   f"{'silo' if q.silos is not None else 'party'}"
                   if self.max_bits_per_party is not None else "") + ")")
        headers = ["", "protocol", "model", "meets trust", "pred. RMSE", "kind", "bits/party",
                   "rounds", "parameters", "eligible"]
        if q.silos is not None:
            headers.insert(7, "bits/silo")
        rows = []
        for p in self.predictions:
            mark = "*" if self.recommended is not None and p is self.recommended else ""
            row = [mark, p.protocol, p.model.value, ",".join(sorted(p.trust)),
                   _fmt(p.rmse), p.kind,
                   "?" if p.bits_per_party is None else f"{p.bits_per_party:g}",
                   "?" if p.rounds is None else str(p.rounds),
                   _params_text(p.parameters),
                   "yes" if p.eligible else f"no: {p.reason}"]
            if q.silos is not None:
                row.insert(7, "?" if p.bits_per_silo is None else f"{p.bits_per_silo:g}")
            rows.append(row)
        lines = [head, format_table(headers, rows)]
        if self.recommended is None:
            lines.append("No protocol meets the trust model and the budget.")
        else:
            r = self.recommended
            where = "" if q.silos is None else f" for {q.setting}"
            lines.append(f"Recommended{where}: {r.protocol} ({r.model.value} DP) with "
                         f"{_params_text(r.parameters) or 'its defaults'}; predicted RMSE "
                         f"{_fmt(r.rmse)} ({r.kind}; {r.formula}).")
            lines.append(f"Notes on {r.protocol}:")
            lines += [f"  - {n}" for n in _recommended_notes(r)]
            others = [p for p in self.predictions if p is not r]
            if others:
                lines.append("Why not the others:")
                lines += [f"  - {p.protocol}: {_why_not(p, r)}" for p in others]
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        q = self.query
        return {"statistic": q.statistic, "n": q.n, "n_pos": q.n_pos, "n_neg": q.n_neg,
                "silos": q.silos, "records_per_silo": q.records_per_silo,
                "setting": q.setting, "epsilon": q.epsilon, "delta": q.delta, "trust": self.trust,
                "max_bits_per_party": self.max_bits_per_party,
                "recommended": None if self.recommended is None
                else self.recommended.protocol,
                "predictions": [p.to_dict() for p in self.predictions],
                "notes": list(self.notes)}


Predictor = Callable[[Query], "Prediction | None"]


@dataclass(frozen=True)
class _PredictorEntry:
    name: str
    func: Predictor
    trust: frozenset[str]
    statistics: tuple[str, ...]


_PREDICTORS: dict[str, _PredictorEntry] = {}


def register_predictor(name: str, func: Predictor, *, trust: Sequence[str],
                       statistics: Sequence[str]) -> None:
    """Make ``func`` the predictor of protocol ``name`` for the given statistics.

    ``func(query)`` returns a :class:`Prediction` or None when the protocol does not
    apply to that query; ``trust`` lists the settings of :data:`TRUST_MODELS` the
    protocol meets (e.g. ``("local", "secure", "curator")`` for a local-DP protocol).
    """
    unknown = set(statistics) - set(STATISTICS)
    if unknown:
        raise ValueError(f"unknown statistics {sorted(unknown)}; known: {list(STATISTICS)}")
    bad = set(trust) - set(TRUST_MODELS)
    if bad:
        raise ValueError(f"unknown trust settings {sorted(bad)}; known: {list(TRUST_MODELS)}")
    _PREDICTORS[name] = _PredictorEntry(name, func, frozenset(trust), tuple(statistics))


def predicted_statistics() -> list[str]:
    """The statistics some registered predictor covers, in the catalogue's order.

    Returns
    -------
    list of str
        Names of :data:`STATISTICS` with at least one error formula.

    Examples
    --------
    >>> from fedustat.advisor import predicted_statistics
    >>> "auc" in predicted_statistics(), "hl" in predicted_statistics()
    (True, False)
    """
    covered = {s for entry in _PREDICTORS.values() for s in entry.statistics}
    return [s for s in STATISTICS if s in covered]


def predictors() -> list[str]:
    """Names of the protocols the advisor can predict."""
    return sorted(_PREDICTORS)


# --------------------------------------------------------------------------- helpers


def _plain(mapping: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in mapping.items():
        if isinstance(v, Mapping):
            out[k] = _plain(v)
        elif isinstance(v, np.integer | np.floating):
            out[k] = v.item()
        elif isinstance(v, tuple):
            out[k] = list(v)
        else:
            out[k] = v
    return out


def _fmt(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "-"
    if not math.isfinite(x):
        return "inf" if x > 0 else "nan"
    return f"{x:.3g}"


def _params_text(params: Mapping[str, Any]) -> str:
    parts = []
    for k, v in params.items():
        if isinstance(v, float):
            v = f"{v:.3g}"
        elif isinstance(v, Mapping):
            v = "x".join(str(x) for x in v.values())
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def _recommended_notes(rec: Prediction) -> list[str]:
    """The recommended protocol's caveats, plus the costs the advisor could not compute."""
    notes = list(rec.notes)
    missing = [what for what, value in (("bits per party", rec.bits_per_party),
                                        ("rounds", rec.rounds)) if value is None]
    if missing:
        notes.append(f"not computed: {' and '.join(missing)} (the protocol's cost is "
                     "measured from its transcript when it runs)")
    return notes or ["none"]


def _why_not(other: Prediction, rec: Prediction) -> str:
    """Why ``other`` was not recommended over ``rec``."""
    if not other.eligible:
        return f"not eligible ({other.reason})"
    if other.mse > rec.mse:
        return f"predicted RMSE {_fmt(other.rmse)} > {_fmt(rec.rmse)}"
    return (f"same predicted RMSE {_fmt(other.rmse)}, more bits per party or later by name")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned plain-text columns."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in rows]
    return "\n".join(out)


def _kernel_for(statistic: str, bounds: Mapping[str, tuple[float, float]]) -> Kernel | None:
    stat = catalogue.get(statistic)
    if stat.kind == "curve":
        return None
    return stat.kernel(bounds.get(stat.value_column) if stat.needs_bounds else None)


def _n_pairs(n: int) -> float:
    return n * (n - 1) / 2.0


def _statistic_scale(q: Query) -> float:
    """d statistic / d U: ``C(n,2) / (n+ n-)`` for the AUC, 1 otherwise."""
    if q.statistic == "auc":
        return _n_pairs(q.n) / (q.n_pos * q.n_neg)
    return 1.0


def _column_arguments(q: Query, kernel: Kernel) -> dict[str, Any]:
    """The ``bounds=`` and ``domain=`` arguments of the quantizing protocols for the query:
    public bounds of its continuous columns, public values of its discrete ones."""
    domain = {c: list(range(m)) for c, m in q.domain.items()}
    bounds = {c: b for c, b in q.bounds.items() if c not in q.domain}
    if kernel.name in ("gini_mean_difference", "variance"):
        bounds = {}  # these kernels carry their own bounds
    return {"bounds": bounds or None, "domain": domain or None}


def _plan(q: Query) -> QuantizationPlan:
    """The public quantization plan ``ldp-quantized`` / ``ldp-ghazi`` use for the query."""
    kernel = q.kernel
    assert kernel is not None
    return plan_for_kernel(kernel, **_column_arguments(q, kernel))


def _bins(q: Query, plan: QuantizationPlan) -> dict[str, int]:
    # The protocols' own default rule: 000 Cor. 1, k = n^{1/4} sqrt(L eps), or for the
    # AUC of continuous scores the AUC rule (quantization.auc_bins).
    return plan.bins_for(q.n, q.epsilon)


def _k_param(bins: Mapping[str, int]) -> Any:
    if not bins:
        return None
    if len(bins) == 1:
        return next(iter(bins.values()))
    return dict(bins)


def _lipschitz_term(q: Query, plan: QuantizationPlan, bins: Mapping[str, int]
                    ) -> tuple[float, str] | None:
    """Quantization MSE of a Lipschitz kernel on one continuous column (000 Thm 2 / 001
    Lemma 2, midpoint kernel): ``width^2 L^2 / (2 k^2)`` with L on the unit-rescaled
    domain; None when the kernel is not Lipschitz or the columns are discrete."""
    kernel = q.kernel
    assert kernel is not None
    if not bins:
        return 0.0, "discrete columns: no quantization"
    lip = plan.unit_lipschitz()
    if lip is None:
        return None
    k = next(iter(bins.values()))
    return kernel.sensitivity**2 * lip**2 / (2.0 * k * k), "000 Thm 2 (L_f^2 / 2k^2)"


def _add_quantization(term: tuple[float, str] | None, components: dict[str, float],
                      notes: list[str], formula: str, source: str) -> tuple[str, str]:
    """Fold a :func:`_lipschitz_term` into a prediction: its MSE joins ``components`` and,
    when non-zero, ``source`` joins ``formula``; without a bound the prediction is PARTIAL
    and ``notes`` says why. Returns ``(kind, formula)``."""
    if term is None:
        notes.append("quantization error of a non-Lipschitz kernel not included")
        return PARTIAL, formula
    components["quantization"] = term[0]
    if term[0] > 0:
        formula += " + " + source
    return BOUND, formula


# --------------------------------------------------------------------------- predictors


def _central_laplace(q: Query) -> Prediction | None:
    kernel = q.kernel
    if kernel is None:
        return None
    # 002 App. C.2.3: Delta U = delta_G^max Delta f / |E| = k Delta f / n (complete design);
    # the AUC's active share gives Delta AUC = 1 / min(n+, n-). Laplace: Var = 2 (Delta/eps)^2.
    if q.statistic == "auc":
        sens = 1.0 / q.n_min
        text = "Laplace, Delta AUC = 1/min(n+, n-) (002 App. C.2.3, active share)"
    else:
        sens = kernel.degree * kernel.sensitivity / q.n
        text = "Laplace, Delta U = 2 Delta f / n (002 App. C.2.3)"
    mse = 2.0 * (sens / q.epsilon) ** 2
    return Prediction(
        "central-laplace", PrivacyModel.CENTRAL, q.epsilon, 0.0, mse, EXACT, text,
        components={"noise": mse}, bits_per_party=FLOAT_BITS * kernel.n_columns, rounds=1,
        parameters={"sensitivity": sens})


def _ldp_quantized(q: Query) -> Prediction | None:
    kernel = q.kernel
    if kernel is None:
        return None
    plan = _plan(q)
    bins = _bins(q, plan)
    grid = plan.grid(bins)
    size = grid.size
    em = math.exp(-q.epsilon)
    beta = size * em / (1.0 + (size - 1) * em)  # 000 Alg. 1: beta = k / (k + e^eps - 1)
    s = 1.0 - beta
    notes: list[str] = []
    auc_rule = q.statistic == "auc" and plan.auc_rule_applies and not plan.resolved
    if q.statistic == "auc":
        # 000 Thm 1's argument (001 App. A.1) for two public groups: each party's linear
        # term has variance <= (range of its kernel row)^2 / (4 (1-beta)^2), each cross pair
        # <= (1+beta)^2 / (4 (1-beta)^4); derived here, see docs/compare.md.
        randomization = ((1.0 / q.n_pos + 1.0 / q.n_neg) / (4.0 * s * s)
                         + (1.0 + beta) ** 2 / (4.0 * q.n_pos * q.n_neg * s**4))
        formula = ("000 Thm 1 for two public groups (derived), k from "
                   + ("the AUC rule (docs/protocols/ldp-quantized.md)" if auc_rule
                      else "000 Cor. 1"))
    else:
        randomization = theorem1_variance_bound(q.n, size, q.epsilon, kernel.output_range)
        formula = "000 Thm 1, k from 000 Cor. 1"
    components = {"randomization": randomization}
    term = _lipschitz_term(q, plan, bins)
    kind = BOUND
    if term is None:
        kind = PARTIAL
        if auc_rule:
            notes.append("the AUC rule's k keeps the quantization gap below a tenth of the "
                         "noise's standard deviation for score densities smooth within bins "
                         "(docs/protocols/ldp-quantized.md); it is not included")
        else:
            notes.append("the quantization error of this non-Lipschitz kernel on a "
                         "continuous column depends on the data (000 Thm 2 needs a "
                         "Lipschitz density); it is not included")
    else:
        components["quantization"] = term[0]
        if term[0] > 0:
            formula += " + " + term[1]
    mse = sum(components.values())
    report_bits = max(1, (size - 1).bit_length())
    public_bits = max(1, (grid.n_groups - 1).bit_length()) if grid.has_public else 0
    params: dict[str, Any] = {"k": size, "beta": beta}
    if len(bins) > 1:
        params["bins"] = dict(bins)
    run = {} if not bins else {"k": _k_param(bins)}
    return Prediction(
        "ldp-quantized", PrivacyModel.LOCAL, q.epsilon, 0.0, mse, kind, formula,
        components=components, bits_per_party=report_bits + public_bits, rounds=1,
        parameters=params, run_params=run, notes=tuple(notes))


def _ldp_ghazi(q: Query) -> Prediction | None:
    kernel = q.kernel
    if kernel is None or q.statistic == "auc":
        return None  # the projection baseline has no public-label variant
    plan = _plan(q)
    bins = _bins(q, plan)
    proto = GhaziProjection(kernel, q.epsilon, k=_k_param(bins), **_column_arguments(q, kernel))
    setup = proto.setup_for(proto.plan.grid(bins))
    n, c, d = q.n, setup.randomizer.second_moment, setup.half
    ks_max2 = 0.25 * float((setup.vectors**2).sum(axis=0).max())
    # 002 eq. 19 with the constants of our randomizer (ldp_ghazi module docstring): noise
    # covariance <= c I, ||K_s v_bar|| <= max_x ||K_s v_x||, hence the data-free bound
    # Var <= 4 [c (n^2 (n-2) + n) max||K_s v_x||^2 + C(n,2) c^2 d/2] / (n (n-1))^2.
    var = 4.0 * (c * (n * n * (n - 2) + n) * ks_max2 + _n_pairs(n) * c * c * d / 2.0) \
        / (n * (n - 1.0)) ** 2
    components = {"randomization": var}
    formula = "002 eq. 19 with our randomizer's constants"
    notes: list[str] = []
    kind, formula = _add_quantization(_lipschitz_term(q, plan, bins), components, notes,
                                      formula, "001 Lemma 2 (002 eq. 18 is for the centre kernel)")
    gamma2 = setup.factorization.gamma2_upper_bound
    components["eq19_leading_order"] = (gamma2**2 / (q.epsilon**2 * n)
                                        + gamma2**2 * d / (q.epsilon**4 * n * n))
    mse = components["randomization"] + components.get("quantization", 0.0)
    params: dict[str, Any] = {"t": setup.grid.size, "d": d, "mechanism": "l2-sphere"}
    if len(bins) > 1:
        params["bins"] = dict(bins)
    run = {} if not bins else {"k": _k_param(bins)}
    return Prediction(
        "ldp-ghazi", PrivacyModel.LOCAL, q.epsilon, 0.0, mse, kind, formula,
        components=components, bits_per_party=2 * d * FLOAT_BITS, rounds=1,
        parameters=params, run_params=run, notes=tuple(notes))


def _ghazi_shuffle(q: Query) -> Prediction | None:
    kernel = q.kernel
    if kernel is None or q.statistic == "auc":
        return None  # like ldp-ghazi, no public-label variant
    plan = _plan(q)
    bins = table1_bins(plan, q.n, q.epsilon)  # the protocol's own default (002 Table 1)
    try:
        proto = GhaziShuffle(kernel, q.epsilon, delta=q.delta, k=_k_param(bins),
                             n_parties=q.n, **_column_arguments(q, kernel))
        enc = proto.encoding_for(proto.grid_for(q.n))
        params = proto.parameters_for(q.n, enc)
    except (OverflowError, ValueError) as exc:
        return Prediction("ghazi-shuffle", PrivacyModel.CENTRAL, q.epsilon, q.delta, math.inf,
                          BOUND, "002 Table 1 (GhaziSM)", reason=f"the protocol refuses: {exc}")
    n, t, d = q.n, enc.grid.size, enc.half
    # Exact variance given the data (ghazi_shuffle docstring) with ||s_L||^2 + ||s_R||^2 <=
    # n^2 max_x ||z_x||^2 / 4^c: a data-free bound.
    components = {"noise": proto.variance_bound(n)}
    # Fixed-point encoding bias: max |A_enc - A| plus the diagonal code's 2^-c-1 / (n-1).
    components["encoding"] = (enc.encoding_error
                              + 2.0 ** (-enc.frac_bits - 1) / (n - 1)) ** 2
    formula = "exact noise variance of GhaziSM (data-free bound) + fixed-point encoding"
    notes = ["assumes a trusted shuffler that hides each message's sender and does not "
             "collude with the aggregator (002 Sec. 5)"]
    kind, formula = _add_quantization(_lipschitz_term(q, plan, bins), components, notes,
                                      formula, "001 Lemma 2")
    mse = sum(components.values())
    # 002 Table 1's rate, for reference: 1/t^2 + t^2 log t / (eps^2 n^2).
    components["table1_rate"] = 1.0 / t**2 + t * t * math.log(t) / (q.epsilon * n) ** 2
    reason = ""
    if q.delta == 0.0:
        reason = (f"delivers (eps, {params.delta:.1e})-DP (a finite number of messages "
                  "cannot give delta = 0); pass delta > 0 to consider it")
    params_out: dict[str, Any] = {"t": t, "d": d, "r": params.n_messages,
                                  "coordinates": enc.n_coordinates,
                                  "ring_bits": proto.ring.bits, "frac_bits": enc.frac_bits}
    if len(bins) > 1:
        params_out["bins"] = dict(bins)
    run = {} if not bins else {"k": _k_param(bins)}
    # Without n_parties the run first counts the parties: a 1-bit check-in, the broadcast
    # of (n, r, bins), then r (D + 1) ring elements per party.
    bits = params.n_messages * enc.n_coordinates * proto.ring.bits + JOIN_BITS
    return Prediction(
        "ghazi-shuffle", PrivacyModel.CENTRAL, q.epsilon, params.delta, mse, kind, formula,
        components=components, bits_per_party=bits, rounds=3, parameters=params_out,
        run_params=run, reason=reason, notes=tuple(notes))


def _tree_split_c(q: Query, alpha: int, split: str) -> tuple[float, float, float] | None:
    """(C, epsilon per level, delta) of a splitting strategy (001 Table 1)."""
    if split == "users":
        eps_l, dlt = q.epsilon, 0.0
    elif split == "budget-basic":
        eps_l, dlt = q.epsilon / alpha, 0.0
    else:
        if q.delta <= 0:
            return None
        eps_l, _ = per_step_budget_advanced(q.epsilon, q.delta, alpha)
        if eps_l <= q.epsilon / alpha:
            return None  # falls back to basic composition: same as budget-basic
        dlt = q.delta
    v = node_variance_bound(q.n_pos, alpha, eps_l, split)
    return v / (q.n_pos * alpha), eps_l, dlt


def _ldp_tree(q: Query) -> Prediction | None:
    if q.statistic != "auc":
        return None
    if "score" in q.domain:
        d = 1 << max(1, (q.domain["score"] - 1).bit_length())
        run: dict[str, Any] = {"d": d}
        d_note = "scores are integers 0..domain_size-1"
    else:
        d = DEFAULT_BINNED_DOMAIN
        run = {}
        d_note = "real scores binned into d equal bins of the public bounds"
    alpha = d.bit_length() - 1
    best = None
    for split in ("users", "budget-basic", "budget-advanced"):
        got = _tree_split_c(q, alpha, split)
        if got is None:
            continue
        C, eps_l, dlt = got
        a = optimal_a(q.n_pos, q.n_neg, alpha, C)
        mse = theorem3_mse_bound(q.n_pos, q.n_neg, alpha, C, a)
        if best is None or mse < best[0]:
            best = (mse, split, C, a, eps_l, dlt)
    assert best is not None
    mse, split, C, a, eps_l, dlt = best
    bits = report_bits_per_party(alpha, eps_l, split)
    notes = [d_note + " (000 Sec. 4); Thm 3 bounds the error against the AUC of those "
             "integer scores"]
    if split == "users":
        notes.append("with the users split 001 App. B.2.2 proves Thm 3 for the sample AUC "
                     "only up to a factor alpha; the unmultiplied bound is reported")
    if alpha > math.sqrt(q.n):
        notes.append(f"Thm 3 assumes alpha <= sqrt(n); here alpha = {alpha}, n = {q.n}")
    run.update(split=split, a=a)
    return Prediction(
        "ldp-tree", PrivacyModel.LOCAL, q.epsilon, dlt, mse, BOUND,
        "000 Thm 3 (001 App. B.1 form), a minimizing the bound",
        components={"theorem3": mse}, bits_per_party=bits, rounds=1,
        parameters={"d": d, "alpha": alpha, "split": split, "a": a, "C": C,
                    "epsilon_level": eps_l},
        run_params=run, notes=tuple(notes))


_AUC_GRID = np.linspace(0.0, 1.0, 101)


def _worst_over_auc(q: Query, std_at: Callable[[float], float]) -> tuple[float, float]:
    """(largest value of std_at over the AUC, the AUC where it occurs), or at ``q.auc``."""
    if q.auc is not None:
        return std_at(q.auc), q.auc
    values = [std_at(float(a)) for a in _AUC_GRID]
    i = int(np.argmax(values))
    return values[i], float(_AUC_GRID[i])


def _fedauc_rr(q: Query) -> Prediction | None:
    if q.statistic != "auc":
        return None
    m, p = q.n, q.n_pos
    try:
        # 004 eq. 3-4, App. P with the corrected delta-method s.e. (fedauc_variance).
        std, at = _worst_over_auc(q, lambda a: rr_std_corrected(m, p, a, q.epsilon))
    except ValueError:
        std, at = math.inf, math.nan
    eq7 = rr_std_eq7(m, p, q.epsilon)
    # Each label is flipped on its own (004 Alg. 1): the error does not depend on how
    # the samples are split among clients, only the upload does.
    notes = [_clients_note(q) + "; " + _auc_note(q, at)]
    rho = math.exp(-q.epsilon) / (1.0 + math.exp(-q.epsilon))  # 1 / (1 + e^eps), no overflow
    # Standard deviation of the debiased positive count P' (004 App. P eq. 11).
    count_sd = math.sqrt(m * rho * (1.0 - rho)) / (1.0 - 2.0 * rho)
    notes += _linearity_note(count_sd, q)
    if not math.isfinite(std):
        notes.append("the debiased estimate is undefined at the expected noisy counts "
                     "(P' or N' <= 0): too small a budget or sample")
    return Prediction(
        "fedauc-rr", PrivacyModel.LABEL, q.epsilon, 0.0, std * std, APPROX,
        "004 eq. 3-4 with the corrected s.e. (fedauc_variance.rr_std_corrected)",
        components={"corrected": std * std, "paper_eq7": eq7 * eq7},
        bits_per_party=_client_upload_bits(q) or FLOAT_BITS + 3 * FLOAT_BITS, rounds=3,
        parameters={"clients": q.silos or m}, notes=tuple(notes),
        bits_per_silo=_client_upload_bits(q))


def _clients_note(q: Query) -> str:
    if q.silos is None:
        return "one sample per client (K = M)"
    return (f"each silo is one client of 004 (K = {q.silos:,} clients of "
            f"{q.records_per_silo:,} samples): it uploads its samples' scores and three "
            "noisy sums")


def _client_upload_bits(q: Query) -> float | None:
    """Bits a silo uploads as one FedAUC client (004 Sec. 4.2 / 5.1): a 64-bit score per
    sample, then localSum, localP and localN; None outside the silo setting."""
    if q.silos is None:
        return None
    assert q.records_per_silo is not None
    return float(FLOAT_BITS * q.records_per_silo + 3 * FLOAT_BITS)


def _client_ranks(q: Query) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ranks grouped by client, client of each, segment starts, sizes) of the clients the
    prediction assumes.

    One sample per client without silos: client r holds rank r. With K silos of m
    records: a round-robin split (client c holds ranks c, c + K, ..., c + (m-1) K, an
    even spread like an i.i.d. split); its largest ranks M-K, ..., M-1 are the largest K
    distinct ranks, the worst case for LocalLaplace's per-client sensitivity (004 Sec.
    5.2, Delta_k = client k's largest rank).
    """
    total = q.n
    clients = q.silos or total
    per_client = total // clients
    ranks = np.arange(total, dtype=np.float64).reshape(per_client, clients).T.ravel()
    local = np.repeat(np.arange(clients), per_client)
    starts = np.arange(clients) * per_client
    return ranks, local, starts, np.full(clients, per_client, dtype=np.int64)


def _linearity_note(count_sd: float, q: Query) -> list[str]:
    """The delta method linearizes a ratio in the noisy positive count: it is reliable
    only when that count's noise is small against the smaller class."""
    share = count_sd / q.n_min
    if share <= 0.1:
        return []
    return [f"the positive count's noise (s.d. {count_sd:.3g}) is {100 * share:.0f}% of the "
            "smaller class: the estimate is far from linear in it, so the delta method "
            "understates the error and some releases can be undefined"]


def _auc_note(q: Query, at: float) -> str:
    if q.auc is not None:
        return f"evaluated at the given AUC {q.auc:g}"
    return f"largest value over the unknown AUC (at AUC = {at:g})"


def _fedauc_lap(name: str, sensitivity: str, allocation: str, mechanism: str
                ) -> Predictor:
    def predict(q: Query) -> Prediction | None:
        if q.statistic != "auc":
            return None
        if mechanism == "gaussian" and q.delta <= 0:
            return _needs_delta(name, q)
        m, p, n_neg = q.n, q.n_pos, q.n_neg
        proto = FedAUCLap(q.epsilon, delta=q.delta if mechanism == "gaussian" else 0.0,
                          sensitivity=sensitivity, allocation=allocation,  # type: ignore[arg-type]
                          mechanism=mechanism, n_samples=m)  # type: ignore[arg-type]
        # The noise scales come from the protocol's own release plan, as the server
        # computes them from the clients' ranks (004 Sec. 5).
        plan = proto.release_plan(*_client_ranks(q))
        var = 2.0 * plan.scales**2 if mechanism == "laplace" else plan.scales**2
        var_pos = float(var[0].sum())
        cov = float(np.dot(plan.lam, var[0]))
        var_sum = float(np.dot(plan.lam**2, var[0]) + var[1].sum())

        def std_at(a: float) -> float:
            g = a * p * n_neg + p * (p - 1) / 2.0  # eq. 1 solved for the rank sum
            return laplace_linearized_std(g, p, m, var_sum, var_pos, cov)

        std, at = _worst_over_auc(q, std_at)
        components = {"delta_method": std * std}
        lin = _linearity_note(math.sqrt(var_pos), q)
        silo = [_clients_note(q) + "; " + _auc_note(q, at)]
        if q.silos is not None:
            if allocation != "fixed":
                split = ("each client's split beta follows the spread of its ranks: predicted "
                         "at a round-robin (i.i.d.-like) split of the ranks; a split by score "
                         "(004 Sec. 6.2.2) changes it")
            elif sensitivity == "global":
                split = "the noise scale (M-1)/(alpha eps) does not depend on the split"
            else:
                split = ("predicted at a round-robin split of the ranks, whose largest ranks "
                         "M-K..M-1 are the worst case for the per-client sensitivity")
            silo.append(f"noise is drawn once per client ({q.silos:,} draws instead of one "
                        f"per sample); {split}")
        formula = "004 eq. 1, delta method with the protocol's noise (fedauc_variance)"
        if name == "fedauc-laplace-global":
            eq8 = global_laplace_std_eq8(m, p, m, 0.5 * q.epsilon)
            components["paper_eq8_exact_counts"] = eq8 * eq8
            formula += "; paper: 004 eq. 8"
        elif name == "fedauc-laplace-local":
            eq9 = local_laplace_std_eq9(m, p, 0.5 * q.epsilon)
            components["paper_eq9_exact_counts"] = eq9 * eq9
            formula += "; paper: 004 eq. 9"
        params: dict[str, Any] = {"clients": q.silos or m}
        if allocation == "fixed":
            params["alpha"] = 0.5
        else:
            params["beta"] = float(np.mean(plan.beta)) if plan.beta is not None else 1.0
        return Prediction(
            name, PrivacyModel.LABEL, q.epsilon, q.delta if mechanism == "gaussian" else 0.0,
            std * std, APPROX, formula, components=components,
            bits_per_party=_client_upload_bits(q) or FLOAT_BITS + 3 * FLOAT_BITS, rounds=3,
            parameters=params, bits_per_silo=_client_upload_bits(q), notes=(*silo, *lin))
    return predict


def _needs_delta(name: str, q: Query) -> Prediction:
    return Prediction(name, PrivacyModel.LABEL, q.epsilon, 0.0, math.inf, APPROX,
                      "(eps, delta) mechanism", eligible=False,
                      reason="needs delta > 0", notes=("pass delta > 0 to consider it",))


def _balanced_edges(q: Query, width: float, var_pairs: float) -> int:
    """The |E| at which Lemma D.3's sampling term falls to its noise term (doubling from
    2n, at most C(n, 2)); beyond it more edges cost communication for < 2x less MSE."""
    n = q.n
    total = int(_n_pairs(n))
    m = 2 * n
    while m < total:
        e_inc = (total - m) / ((total - 1) * m) * var_pairs
        e_dp = 2.0 * (math.ceil(2 * m / n) * width / (q.epsilon * m)) ** 2
        if e_inc <= e_dp:
            break
        m *= 2
    return min(m, total)


def _umpc_cost(q: Query, m: int) -> tuple[float | None, int | None, str, str]:
    """Online bits per party and rounds from the U-MPC module's own count (002 Lemma C.3
    with its corrections, for a BalancedSamp design of m edges), when it is installed;
    the last item is the module's refusal (e.g. values too wide for its fixed point)."""
    try:
        from fedustat.protocols.mpc.umpc import UMPC
        from fedustat.stats.designs import balanced_sample
    except ImportError:
        return None, None, "U-MPC module not installed: cost unknown", ""
    kernel = q.kernel
    assert kernel is not None
    try:
        proto = UMPC(kernel, q.epsilon, edges=m, min_honest=None)
    except (OverflowError, ValueError) as exc:
        return None, None, "cost unknown: the protocol refuses these parameters", str(exc)
    if q.n > MAX_COSTED_PARTIES:
        return None, None, f"cost not counted for n > {MAX_COSTED_PARTIES}", ""
    try:
        design = balanced_sample(m, kernel.degree, q.n, rng=0)
        public = None
        if q.statistic == "auc":
            # The labels are public; which parties hold them does not change the count
            # beyond the design's randomness.
            public = np.r_[np.ones(q.n_pos), np.zeros(q.n_neg)]
        count = proto.expected_communication(q.n, design, public)
    except (AttributeError, TypeError, ValueError) as exc:
        return None, None, f"cost unknown ({exc})", ""
    # Lemma C.3 counts the secure phases and the upload; the first round adds a 1-bit
    # check-in (or the public label) per party and the aggregator's broadcast of the coin.
    # The dealt material travels among the parties too (relay rounds, as the runtime counts).
    return ((count["online_bits"] + count["offline_bits"]) / q.n + 1.0,
            int(count["relay_rounds"]) + 3,
            "cost: 002 Lemma C.3 count (fedustat.protocols.mpc.umpc) plus the 1-bit check-in", "")


MAX_COSTED_PARTIES = 20_000  # drawing a BalancedSamp design for the count is O(|E|)


def _umpc(q: Query) -> Prediction | None:
    kernel = q.kernel
    if kernel is None:
        return None
    n, w = q.n, kernel.sensitivity
    total = _n_pairs(n)
    var_pairs = q.zeta[1] if q.zeta is not None else w * w / 4.0
    # |E| = 2n, the choice of 002's experiments (Sec. 6.2, Figs. 1-4).
    m = min(2 * n, int(total))
    dmax = math.ceil(2 * m / n)  # BalancedSamp: every degree is floor or ceil of k|E|/n
    # 002 Lemma D.3: Var <= (N - |E|) / (4 |E| (N-1)) + 2 (delta_max Delta f / (eps |E|))^2,
    # the 1/4 being Var(f) <= (range/2)^2, replaced by zeta_2 when given. The second term
    # is the Laplace variance; the protocol's discrete Laplace (Protocol B.1) has variance
    # 2t/(1-t)^2 <= 2 (s/eps)^2, so the lemma remains an upper bound.
    e_inc = (total - m) / ((total - 1) * m) * var_pairs
    e_dp = 2.0 * (dmax * w / (q.epsilon * m)) ** 2
    scale = _statistic_scale(q) ** 2
    zeta_note = ("zeta_2 as given" if q.zeta is not None
                 else "Var(f) <= (range/2)^2 (data-free worst case)")
    bits, rounds, cost_note, refusal = _umpc_cost(q, m)
    notes = [f"sampling term with {zeta_note}",
             "run with min_honest=None, 002's noise r = 1/|contributors| (Lemma D.3's "
             "accuracy; DP against the aggregator, not against its collusion with noise "
             "contributors); the module's default min_honest=1 survives that collusion at "
             "|contributors| times the noise variance",
             cost_note,
             f"|E| = {_balanced_edges(q, w, var_pairs)} would bring the sampling term down "
             "to the noise term"]
    return Prediction(
        "umpc", PrivacyModel.CENTRAL, q.epsilon, 0.0, scale * (e_inc + e_dp), BOUND,
        "002 Lemma D.3 (Claims D.1-D.2), BalancedSamp",
        components={"sampling": scale * e_inc, "noise": scale * e_dp},
        bits_per_party=bits, rounds=rounds,
        parameters={"edges": m, "design": "BalancedSamp", "delta_max": dmax,
                    "ring_bits": RING_BITS, "min_honest": None},
        run_params={"edges": m, "min_honest": None}, registered=False,
        reason=f"the protocol refuses: {refusal}" if refusal else "", notes=tuple(notes))


def _pair_noise_variance(kernel: Kernel, pair_epsilon: float) -> tuple[float, str]:
    """Variance of one released pair value: ``Lap(Delta f / eps_pair)`` (000 Thm 5), or
    randomized response for a 0/1 kernel (the extension 000 Sec. 5 mentions), debiased:
    ``e^a / (e^a - 1)^2`` with ``a = eps_pair``."""
    if kernel.name == "duplicate_pair_ratio":
        a = pair_epsilon
        return math.exp(-a) / (-math.expm1(-a)) ** 2, "randomized response"
    return 2.0 * (kernel.sensitivity / pair_epsilon) ** 2, "Laplace"


def _pairs_2pc_terms(q: Query, kernel: Kernel, P: int, zeta: tuple[float, float]
                     ) -> tuple[float, float, float]:
    """(subsampling error vs the sample U, noise term, population MSE of 000 Thm 5)."""
    n = q.n
    z1, z2 = zeta
    # 000 Thm 5 / 001 eq. 25: Var(U_P) over data and permutations
    # (permutation_design_variance); the error against the sample U subtracts
    # Var(U_n) = 2/(n(n-1)) (2 (n-2) z1 + z2) (law of total variance, E[U_P | data] = U_n).
    pop = permutation_design_variance(z1, z2, n, P)
    sub = max(pop - ustat_variance(z1, z2, n), 0.0)
    # P floor(n/2) pairs, each with its own noise at eps/P (each party is in P pairs):
    # Laplace gives 4 P Delta f^2 / (n eps^2); 001 App. C.1 prints 2P / (n eps^2).
    pairs = P * (n // 2)
    v, _ = _pair_noise_variance(kernel, q.epsilon / P)
    noise = v / pairs
    return sub, noise, pop + noise


def _pairs_2pc(q: Query) -> Prediction | None:
    kernel = q.kernel
    if kernel is None:
        return None
    n, w = q.n, kernel.sensitivity
    if q.zeta is not None:
        zeta, zeta_note = q.zeta, "zeta_1, zeta_2 as given"
    else:
        # Data-free: zeta_2 <= (range/2)^2; zeta_1 enters the sample MSE with a negative
        # sign, so zeta_1 = 0 is the worst case.
        zeta, zeta_note = (0.0, w * w / 4.0), "zeta_1 = 0, zeta_2 = (range/2)^2 (worst case)"
    best = None
    for P in range(1, 65):
        sub, noise, pop = _pairs_2pc_terms(q, kernel, P, zeta)
        if best is None or sub + noise < best[0]:
            best = (sub + noise, P, sub, noise, pop)
    assert best is not None
    mse, P, sub, noise, pop = best
    scale = _statistic_scale(q) ** 2
    _, mechanism = _pair_noise_variance(kernel, q.epsilon / P)
    components = {"subsampling": scale * sub, "noise": scale * noise,
                  "population_mse_thm5": scale * pop}
    if mechanism == "Laplace":
        components["paper_noise_term_2P_over_n_eps2"] = scale * 2.0 * P * w * w / (
            n * q.epsilon**2)
    return Prediction(
        "pairs-2pc", PrivacyModel.COMPUTATIONAL, q.epsilon, 0.0, scale * mse, BOUND,
        f"000 Thm 5 ({mechanism}; noise term corrected to 4P/(n eps^2)), error vs the "
        "sample U",
        components=components, bits_per_party=None, rounds=None,
        parameters={"P": P, "pairs": P * (n // 2), "noise": mechanism,
                    "noise_split": "split"},
        run_params={"P": P, "noise_split": "split"}, registered=False,
        notes=(zeta_note,
               "run with noise_split='split' (one noise draw per pair, as in 000 Thm 5; DP "
               "against the aggregator alone); 'independent' noise survives collusion with "
               "a partner at twice the noise variance",
               "cost: O(P) two-party kernel evaluations per party (000 Thm 5); measured by "
               "the protocol's transcript when it runs"))


def _ecdf_mse(q: Query, epsilon: float, count: int) -> float:
    """003 Thm 1: per-point variance 2 (L+1)^3 / (eps^2 n^2) of the count / n."""
    L = tree_depth(q.grid_points)
    return 2.0 * (L + 1) ** 3 / (epsilon**2 * float(count) ** 2)


def _hierarchical_ecdf_mse(q: Query, epsilon: float, count: int) -> float:
    """The default (hierarchical) release: its exact mean variance over the N points,
    ``mean_i Var(c_hat_i) / (eps^2 n^2)`` (protocols/ecdf/hierarchical.py)."""
    from fedustat.protocols.ecdf.hierarchical import default_plan

    return default_plan(q.grid_points).mean_variance() / (epsilon**2 * float(count) ** 2)


def _quantile_from_curve(q: Query, point_mse: float, formula: str, notes: list[str]
                         ) -> tuple[float, str]:
    """The mean square level error of quantiles read from a curve of point variance
    ``point_mse`` (003 Alg. 1): :func:`~fedustat.protocols.ecdf.private_quantiles.
    curve_level_mse` at :data:`ADVISED_QUANTILE_LEVELS` on Poisson model data."""
    from fedustat.protocols.ecdf.private_quantiles import curve_level_mse

    notes.append("quantiles: the level error (the distance from q to the levels at which "
                 "the release is an exact grid quantile of the data): the curve's error at "
                 "the quantile less what the data's grid cell there absorbs, on Poisson "
                 "model data (n / N records per grid point); smaller on data with "
                 "heavier cells")
    mse = curve_level_mse(ADVISED_QUANTILE_LEVELS, q.n, q.grid_points, point_mse)
    return mse, formula + ", inverted by 003 Alg. 1 (level error on model data)"


def _ecdf(name: str, smooth: bool) -> Predictor:
    def predict(q: Query) -> Prediction | None:
        if q.statistic not in _CURVES:
            return None
        L = tree_depth(q.grid_points)
        params: dict[str, Any] = {"N": q.grid_points, "L": L}
        if smooth:
            params["p"] = 2
        notes = []
        if smooth:
            notes.append("smoothing (003 Eq. 3) is post-processing with no error formula; "
                         "the unsmoothed Thm 1 value is given (003 Sec. 6.3 measures a "
                         "reduction)")
        if q.statistic == "roc":
            # Two eps/2-DP class ECDFs (003 Sec. 5.1), each over all n records; TPR(t) =
            # 1 - F_TP(t)/F_TP(tau_N): delta method, covariance dropped and F_TP(t) <=
            # F_TP(tau_N), so Var(TPR) <= 2 v / pi+^2 with v the largest point variance
            # at eps/2: 003 Thm 1 for 003's tree (smoothed), else the default class
            # curve's exact one (dp_roc_curve's hierarchical tree with a private total).
            if smooth:
                v = _ecdf_mse(q, q.epsilon / 2.0, q.n)
            else:
                from fedustat.protocols.ecdf.hierarchical import private_total_plan

                plan = private_total_plan(q.grid_points)
                v = float(np.max(plan.point_variances(q.epsilon / 2.0))) / float(q.n) ** 2
                params.update(method="hierarchical", b=plan.branching)
            tpr = 2.0 * v * (q.n / q.n_pos) ** 2
            fpr = 2.0 * v * (q.n / q.n_neg) ** 2
            mse = 0.5 * (tpr + fpr)
            comps = {"tpr": tpr, "fpr": fpr}
            kind = APPROX
            formula = ("003 Thm 1 at eps/2 per class (Sec. 5.1), delta method" if smooth
                       else "hierarchical class curves at eps/2 (exact largest point "
                       "variance), delta method")
            cols = 2
        elif not smooth:
            # dp_ecdf's default release; smoothing (003 Eq. 3) needs 003's tree.
            from fedustat.protocols.ecdf.hierarchical import default_plan

            params.update(method="hierarchical", b=default_plan(q.grid_points).branching)
            mse = _hierarchical_ecdf_mse(q, q.epsilon, q.n)
            comps = {"per_point": mse}
            kind = EXACT if q.statistic == "ecdf" else APPROX
            formula = ("hierarchical tree with least squares: exact mean variance over the "
                       "grid points / (eps^2 n^2)")
            if q.statistic == "quantile":
                mse, formula = _quantile_from_curve(q, mse, formula, notes)
            cols = 1
        else:
            mse = _ecdf_mse(q, q.epsilon, q.n)
            comps = {"per_point": mse}
            kind = APPROX
            formula = "003 Thm 1: 2 (L+1)^3 / (eps^2 n^2)"
            if q.statistic == "quantile":
                mse, formula = _quantile_from_curve(q, mse, formula, notes)
            cols = 1
        return Prediction(name, PrivacyModel.CENTRAL, q.epsilon, 0.0, mse, kind, formula,
                          components=comps, bits_per_party=FLOAT_BITS * cols, rounds=1,
                          parameters=params, run_params={"smooth": smooth},
                          notes=tuple(notes))
    return predict


#: Levels a quantile question is predicted for (the advisor's Query has no levels; these
#: are the ones ``fedustat compare`` measures).
ADVISED_QUANTILE_LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9)


def _dp_quantiles(q: Query) -> Prediction | None:
    """Direct private quantiles (:func:`fedustat.protocols.ecdf.dp_quantiles`): the method
    its ``"auto"`` would pick and that method's predicted level error, from
    :func:`~fedustat.protocols.ecdf.private_quantiles.predict_quantile_errors` (exact error
    laws on Poisson model data from a public seed; approximate for other data)."""
    if q.statistic != "quantile":
        return None
    from fedustat.protocols.ecdf.private_quantiles import (
        QUANTILE_METHODS,
        predict_quantile_errors,
    )

    preds = predict_quantile_errors(ADVISED_QUANTILE_LEVELS, q.n, q.grid_points, q.epsilon)
    pick = min(QUANTILE_METHODS, key=lambda name: preds[name].mean_steps)
    mse = float(np.mean(preds[pick].level_mse))
    return Prediction(
        "dp-quantiles", PrivacyModel.CENTRAL, q.epsilon, 0.0, mse, APPROX,
        f"dp_quantiles(method='auto') picks {pick!r}: {preds[pick].source}, on Poisson "
        "model data",
        components={name: float(np.mean(p.level_mse)) for name, p in preds.items()},
        bits_per_party=FLOAT_BITS, rounds=1,
        parameters={"N": q.grid_points, "method": pick, "levels": len(ADVISED_QUANTILE_LEVELS),
                    "steps": round(preds[pick].mean_steps, 4)},
        run_params={"method": pick},
        notes=(f"levels {ADVISED_QUANTILE_LEVELS} at a total eps (m = "
               f"{len(ADVISED_QUANTILE_LEVELS)}); the pick depends on m, n, N and eps; steps: "
               "its predicted mean |error| in grid steps",))


SECAGG_SERVERS = 2  # fedustat.protocols.ecdf's default m (contributors K = m)


def _secagg_ecdf_mse(q: Query, epsilon: float, count: int) -> float:
    """The federated default (hierarchical tree, distributed integer noise): the exact
    mean variance over the N points with each level's node variance ``K/h 2t/(1-t)^2``,
    ``t = exp(-1/s_l)`` (002 Protocol B.1 per level, ``h = 1``; protocols/ecdf/
    shared_noise.py ``distributed_node_noise``)."""
    from fedustat.protocols.ecdf.hierarchical import default_plan, point_variances_with

    plan = default_plan(q.grid_points)
    t = np.exp(-1.0 / plan.scales(epsilon))
    var = SECAGG_SERVERS * 2.0 * t / (1.0 - t) ** 2
    return float(np.mean(point_variances_with(plan, var))) / float(count) ** 2


def _ecdf_secagg(q: Query) -> Prediction | None:
    """003 Sec. 4.1 with the central default's tree: the noisy nodes of the hierarchical
    release, counts aggregated in secret by m servers.

    The node noise is 002 Protocol B.1's distributed discrete Laplace from K = m
    contributors with ``min_honest = 1`` (the module's default, which keeps the release
    eps-DP when the servers are the contributors): each contributor's part is a full
    discrete Laplace per node, so the variance is about K times the central release's."""
    if q.statistic not in ("ecdf", "quantile"):
        return None
    L = tree_depth(q.grid_points)
    point_mse = _secagg_ecdf_mse(q, q.epsilon, q.n)
    kind = EXACT if q.statistic == "ecdf" else APPROX
    formula = (f"hierarchical tree, exact mean variance with Protocol B.1 noise from "
               f"{SECAGG_SERVERS} contributors per node (min_honest = 1)")
    notes = ["every party secret-shares its N indicators with the servers (003 Sec. 4.1): "
             "m N l bits each, l = 64"]
    mse = point_mse
    if q.statistic == "quantile":
        mse, formula = _quantile_from_curve(q, point_mse, formula, notes)
    return Prediction(
        "ecdf-secagg", PrivacyModel.CENTRAL, q.epsilon, 0.0, mse, kind, formula,
        components={"per_point": point_mse}, bits_per_party=SECAGG_SERVERS * q.grid_points * 64,
        rounds=3, parameters={"N": q.grid_points, "L": L, "servers": SECAGG_SERVERS},
        notes=tuple(notes))


def _formula_applies(statistic: catalogue.Statistic) -> bool:
    """Whether the kernel-general formulas below predict the statistic's error: they bound
    the error of the U-statistic itself (000 Thm 1, 002 App. C.2.3, Lemma D.3), so they
    hold for every kernel whose statistic is U and whose records have no public groups;
    the AUC (public classes) has its own terms in each predictor. A statistic that is a
    function of U (Renyi-2: -log U) or has public groups of its own (VUS) has no formula
    here: :func:`advise` lists its protocols without a prediction."""
    if statistic.kind == "curve":
        return False
    if statistic.name == "auc":
        return True
    kernel = statistic.kernel(statistic.default_bounds)
    # tau-b's statistic reads private tie counts: no private protocol releases it.
    return (not statistic.labelled and kernel.statistic_fn is None
            and kernel.statistic_is_public)


_U_STATS = tuple(s.name for s in catalogue.STATISTICS.values() if _formula_applies(s))
register_predictor("central-laplace", _central_laplace, trust=_CURATOR, statistics=_U_STATS)
register_predictor("ldp-quantized", _ldp_quantized, trust=_ALL_BUT_LABEL, statistics=_U_STATS)
_UNLABELLED = tuple(s for s in _U_STATS if s != "auc")
register_predictor("ldp-ghazi", _ldp_ghazi, trust=_ALL_BUT_LABEL, statistics=_UNLABELLED)
register_predictor("ghazi-shuffle", _ghazi_shuffle, trust=_SECURE, statistics=_UNLABELLED)
register_predictor("ldp-tree", _ldp_tree, trust=_ALL_BUT_LABEL, statistics=("auc",))
register_predictor("fedauc-rr", _fedauc_rr, trust=_LABEL, statistics=("auc",))
for _name, _sens, _alloc, _mech in (
        ("fedauc-laplace-local", "local", "fixed", "laplace"),
        ("fedauc-laplace-global", "global", "fixed", "laplace"),
        ("fedauc-adaptive", "local", "adaptive", "laplace"),
        ("fedauc-gaussian", "local", "fixed", "gaussian")):
    register_predictor(_name, _fedauc_lap(_name, _sens, _alloc, _mech), trust=_LABEL,
                       statistics=("auc",))
register_predictor("umpc", _umpc, trust=_SECURE, statistics=_U_STATS)
# pairs-2pc has no two-party circuit for the variance or the Rand index
# (pairs_2pc.SUPPORTED_KERNELS).
register_predictor("pairs-2pc", _pairs_2pc, trust=_SECURE,
                   statistics=tuple(s for s in _U_STATS if s not in ("variance", "rand")))
register_predictor("dp-ecdf", _ecdf("dp-ecdf", False), trust=_CURATOR,
                   statistics=("ecdf", "quantile"))
register_predictor("dp-ecdf-smoothed", _ecdf("dp-ecdf-smoothed", True), trust=_CURATOR,
                   statistics=("ecdf", "quantile"))
register_predictor("ecdf-secagg", _ecdf_secagg, trust=_SECURE, statistics=("ecdf", "quantile"))
register_predictor("dp-quantiles", _dp_quantiles, trust=_CURATOR, statistics=("quantile",))
register_predictor("dp-roc", _ecdf("dp-roc", False), trust=_CURATOR, statistics=("roc",))
register_predictor("dp-roc-smoothed", _ecdf("dp-roc-smoothed", True), trust=_CURATOR,
                   statistics=("roc",))

# Curve releases are functions of fedustat.protocols.ecdf (and ecdf_federated), not
# registry protocols.
CURVE_RELEASES = frozenset(catalogue.CURVE_RELEASES)
try:
    from fedustat.protocols.ecdf import pointwise_ecdf as _pointwise_ecdf  # noqa: F401
except ImportError:
    pass
else:
    CURVE_RELEASES = CURVE_RELEASES | {"ecdf-secagg"}


# --------------------------------------------------------------------------- validation


def _check_pair(value: Any, name: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (lo, hi) of numbers, got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"{name} must be finite with lo < hi, got {value!r}")
    return lo, hi


def _columns(statistic: str) -> tuple[str, ...]:
    """The statistic's columns that bounds or domain sizes describe (not public labels)."""
    stat = catalogue.get(statistic)
    return stat.columns[:-1] if stat.labelled else stat.columns


def _normalize_bounds(statistic: str, bounds: Any) -> dict[str, tuple[float, float]]:
    cols = _columns(statistic)
    if bounds is None:
        if catalogue.get(statistic).needs_bounds:
            raise ValueError(f"bounds is required for {statistic}: public (lo, hi) of the "
                             "values, which fix the sensitivity (never take them from the data)")
        return {}
    if isinstance(bounds, Mapping):
        unknown = set(bounds) - set(cols)
        if unknown:
            raise ValueError(f"bounds names unknown columns {sorted(unknown)}; {statistic}'s "
                             f"columns are {list(cols)}")
        return {c: _check_pair(b, f"bounds[{c!r}]") for c, b in bounds.items()}
    if len(cols) == 1:
        return {cols[0]: _check_pair(bounds, "bounds")}
    try:
        items = list(bounds)
    except TypeError:
        raise ValueError(f"bounds for {statistic} must give one (lo, hi) per column "
                         f"{list(cols)}, got {bounds!r}") from None
    if len(items) != len(cols):
        raise ValueError(f"bounds for {statistic} must give one (lo, hi) per column "
                         f"{list(cols)}, got {bounds!r}")
    return {c: _check_pair(b, f"bounds[{c!r}]") for c, b in zip(cols, items, strict=True)}


def _normalize_domain(statistic: str, domain_size: Any) -> dict[str, int]:
    if domain_size is None:
        if statistic == "duplicate":
            raise ValueError("domain_size is required for duplicate: the public number of "
                             "categories")
        if statistic == "rand":
            raise ValueError("domain_size is required for rand: the public number of "
                             "clusters in each of the two clusterings")
        return {}
    if statistic in _CURVES:
        return {}
    cols = _columns(statistic)
    if isinstance(domain_size, Mapping):
        sizes = dict(domain_size)
    elif isinstance(domain_size, int | np.integer) and not isinstance(domain_size, bool):
        sizes = dict.fromkeys(cols, domain_size)
    else:
        try:
            sizes = dict(zip(cols, list(domain_size), strict=True))
        except (TypeError, ValueError):
            raise ValueError(f"domain_size must be an integer or one per column {list(cols)}, "
                             f"got {domain_size!r}") from None
    if catalogue.get(statistic).needs_bounds:
        raise ValueError(f"{statistic} is computed on a continuous column with bounds; "
                         "domain_size does not apply")
    return {c: check_positive_int(m, f"domain_size[{c!r}]", minimum=2) for c, m in sizes.items()}


def _sizes(statistic: str, n: Any, n_pos: Any, n_neg: Any
           ) -> tuple[int, int | None, int | None]:
    if statistic in _LABELLED:
        if n_pos is None or n_neg is None:
            raise ValueError(f"{statistic} needs the class sizes n_pos and n_neg (public, as "
                             "in the papers)")
        p = check_positive_int(n_pos, "n_pos")
        m = check_positive_int(n_neg, "n_neg")
        if n is not None and check_positive_int(n, "n") != p + m:
            raise ValueError(f"n ({n}) must equal n_pos + n_neg ({p + m})")
        return p + m, p, m
    if n is None:
        raise ValueError(f"{statistic} needs n, the number of parties")
    if n_pos is not None or n_neg is not None:
        raise ValueError(f"n_pos / n_neg apply to labelled statistics "
                         f"({', '.join(_LABELLED)}), not {statistic}")
    return check_positive_int(n, "n", minimum=4), None, None


def _check_zeta(zeta: Any) -> tuple[float, float] | None:
    if zeta is None:
        return None
    try:
        z1, z2 = (float(v) for v in zeta)
    except (TypeError, ValueError):
        raise ValueError(f"zeta must be a pair (zeta_1, zeta_2) of variances, got {zeta!r}"
                         ) from None
    if not (math.isfinite(z1) and math.isfinite(z2) and z1 >= 0 and z2 >= 0):
        raise ValueError(f"zeta must hold two finite variances >= 0, got {zeta!r}")
    if z2 < 2 * z1 * (1 - 1e-9):
        raise ValueError(f"zeta must satisfy zeta_2 >= 2 zeta_1 (Hoeffding), got {zeta!r}")
    return z1, z2


def _silo_sizes(silos: Any, records_per_silo: Any) -> tuple[int | None, int | None]:
    if silos is None and records_per_silo is None:
        return None, None
    if silos is None or records_per_silo is None:
        raise ValueError("silos and records_per_silo go together: K silos each holding m "
                         "records (or give n for n single-record parties)")
    return (check_positive_int(silos, "silos", minimum=2),
            check_positive_int(records_per_silo, "records_per_silo"))


# What each protocol does when K silos hold m records each (advise(silos=...)). Only the
# FedAUC protocols have a silo form (004: K clients of many samples); every other protocol
# runs with each record a party, whose messages its silo sends.
_PER_RECORD = ("no silo form: every record is a party of the protocol, so a silo runs its "
               "{m:,} records' steps and sends their messages ({m:,} times a party's bits)")
_SILO_NOTES: dict[str, str] = {
    "central-laplace": ("each silo sends its {m:,} records to the curator, which releases "
                        "over all {n:,} records; a silo's own noisy release is not this "
                        "protocol"),
    "ldp-quantized": ("each silo randomizes every one of its {m:,} records separately (000 "
                      "Alg. 1, n = {n:,} reports, DP per record); a silo perturbing only its "
                      "own aggregate is not a form of this protocol"),
    "ldp-ghazi": ("each silo randomizes every one of its {m:,} records separately (n = {n:,} "
                  "reports, DP per record); no silo form"),
    "ldp-tree": ("each silo randomizes every one of its {m:,} records separately (000 Sec. "
                 "4, n = {n:,} reports, DP per record); no silo form"),
    "ghazi-shuffle": ("every record sends its own messages through the shuffler (n = {n:,} "
                      "senders): the shuffler hides which record sent a message, not which "
                      "silo; " + _PER_RECORD),
    "umpc": ("every record is a party of U-MPC (002's parties hold one record each): a "
             "silo runs its {m:,} parties' steps and relays their rows, rows between two of "
             "its own records included, so it sends {m:,} times a party's bits; a {K}-party "
             "computation over silos of {m:,} records is not implemented. A silo counts as "
             "{m:,} colluding parties: it knows its records' noise parts, so DP against a "
             "coalition of silos needs min_honest counted in records"),
    "pairs-2pc": ("every record is a party paired with P others (000 Sec. 5); a pair inside "
                  "one silo is still run as a two-party computation; " + _PER_RECORD),
    "ecdf-secagg": ("every record secret-shares its own N indicators with the servers (003 "
                    "Sec. 4.1), {m:,} N l bits per server for a silo; sharing the sum of a "
                    "silo's indicators (its own counts) would send one vector per silo, but "
                    "the protocol does not do that"),
}
for _curve in ("dp-ecdf", "dp-ecdf-smoothed", "dp-roc", "dp-roc-smoothed", "dp-quantiles"):
    _SILO_NOTES[_curve] = ("each silo sends its {m:,} records to the curator, which "
                           "releases over all {n:,} records (003 Sec. 3); no silo form")


def _in_silos(pred: Prediction, q: Query) -> Prediction:
    """The prediction as the protocol runs in K silos of m records: a protocol with a silo
    form sets ``bits_per_silo`` itself; for the others each record is a party."""
    if pred.bits_per_silo is not None:
        return pred
    m = q.records_per_silo
    assert m is not None
    bits = None if pred.bits_per_party is None else m * pred.bits_per_party
    note = _SILO_NOTES.get(pred.protocol, _PER_RECORD).format(K=q.silos, m=m, n=q.n)
    return replace(pred, bits_per_silo=bits, notes=(note, *pred.notes))


def advise(statistic: str, *, n: int | None = None, n_pos: int | None = None,
           n_neg: int | None = None, epsilon: float, delta: float = 0.0,
           trust: str | None = None, max_bits_per_party: float | None = None,
           bounds: Any = None, domain_size: Any = None, zeta: Any = None,
           auc: float | None = None, silos: int | None = None,
           records_per_silo: int | None = None) -> Advice:
    """Predict every applicable protocol's error and cost, and recommend one.

    Parameters
    ----------
    statistic:
        A statistic of the catalogue (:data:`fedustat.catalogue.STATISTICS`). Errors are
        predicted for ``"auc"``, ``"kendall"``, ``"gini"``, ``"variance"``,
        ``"duplicate"``, ``"rand"``, ``"ecdf"``, ``"quantile"`` and ``"roc"``; for the
        others (``"renyi2"``, ``"vus"``, ``"mann-whitney"``, ``"median"``, ``"hl"``) the
        protocols that compute them are listed without a prediction, and the rest with the
        reason they cannot (every private protocol refuses ``"kendall-b"``: its tie
        counts are private).
    n, n_pos, n_neg:
        Number of parties; the class sizes (public) for ``"auc"`` and ``"roc"``.
    epsilon, delta:
        The budget. Protocols that need ``delta > 0`` (Gaussian mechanisms, advanced
        composition) are considered only when it is given.
    trust:
        Who may be trusted: ``"local"`` (nobody), ``"secure"`` (secure computation
        with a DP output), ``"label"`` (the server may see the scores, not the labels),
        ``"curator"`` (a trusted aggregator), or None (every protocol).
    max_bits_per_party:
        Communication budget: protocols that send more bits per party are not eligible.
    bounds:
        Public bounds: ``(lo, hi)`` of the values (required for gini and variance; the
        score range of auc/roc; one pair per column, or a mapping, for kendall).
    domain_size:
        Number of public values of a discrete column (required for duplicate; one per
        clustering for rand, e.g. ``(2, 3)``; integer
        scores ``0..domain_size-1`` for auc; one per column for kendall on ratings), or
        the number N of grid thresholds for ecdf, quantile and roc (default 256).
    zeta:
        ``(zeta_1, zeta_2)`` of the Hoeffding decomposition, for the subsampling terms
        of pairs-2pc and umpc; by default their data-free worst case (range/2)^2.
    auc:
        A public guess of the AUC for the FedAUC predictions; by default their largest
        value over AUC in [0, 1].
    silos, records_per_silo:
        The cross-silo setting: K silos each holding m records (give both; n = K m, and
        ``n_pos + n_neg`` must equal it for auc and roc). Every prediction is then for
        that setting: the local-DP protocols randomize per record (n = K m reports),
        U-MPC and the other secure protocols run with every record a party (a silo sends
        its m parties' messages), the FedAUC protocols take each silo as one client of
        004 (K clients of m samples, noise per client); each prediction's notes say which,
        and ``bits_per_silo`` is what one silo sends. ``max_bits_per_party`` then bounds
        the bits of a silo.

    Returns
    -------
    Advice
        ``.table()`` prints the comparison; ``.recommended`` is the chosen
        :class:`Prediction` (None if no protocol qualifies).

    Examples
    --------
    >>> from fedustat.advisor import advise
    >>> a = advise("kendall", silos=12, records_per_silo=5000, epsilon=1.0, trust="local")
    >>> a.recommended.protocol, a.query.n
    ('ldp-ghazi', 60000)
    >>> a.recommended.bits_per_silo == 5000 * a.recommended.bits_per_party
    True
    """
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
    eps = check_budget(epsilon)  # the range a release takes
    dlt = check_delta(delta)
    if trust is not None and trust not in TRUST_MODELS:
        raise ValueError(f"trust must be one of {', '.join(TRUST_MODELS)} or None, got "
                         f"{trust!r}")
    if max_bits_per_party is not None:
        max_bits_per_party = check_epsilon(max_bits_per_party, "max_bits_per_party")
    n_silos, per_silo = _silo_sizes(silos, records_per_silo)
    if n_silos is not None:
        if n is not None and check_positive_int(n, "n") != n_silos * per_silo:
            raise ValueError(f"n ({n}) must equal silos * records_per_silo "
                             f"({n_silos * per_silo}); give one or the other")
        if statistic not in _LABELLED:
            n = n_silos * per_silo
        elif n_pos is not None and n_neg is not None and \
                check_positive_int(n_pos, "n_pos") + check_positive_int(n_neg, "n_neg") \
                != n_silos * per_silo:
            raise ValueError(f"n_pos + n_neg ({n_pos + n_neg}) must equal silos * "
                             f"records_per_silo ({n_silos * per_silo})")
    total, p, m = _sizes(statistic, n, n_pos, n_neg)
    bnds = _normalize_bounds(statistic, bounds)
    dom = _normalize_domain(statistic, domain_size)
    if statistic in ("auc", "roc") and "score" not in bnds and "score" not in dom:
        bnds["score"] = DEFAULT_SCORE_BOUNDS
    if statistic == "kendall":
        for c in ("x", "y"):
            if c not in bnds and c not in dom:
                bnds[c] = (0.0, 1.0)  # Thm 1 and the sign kernel ignore the scale
    # The grid the release would get from its bounds (the one-call functions' default).
    grid_points = default_grid_points(statistic)
    if statistic in _CURVES and domain_size is not None:
        grid_points = check_positive_int(domain_size, "domain_size", minimum=2)
    query = Query(statistic, total, p, m, eps, dlt, bnds, dom, _check_zeta(zeta),
                  None if auc is None else check_probability(auc, "auc"), grid_points,
                  n_silos, per_silo)

    found: list[Prediction] = []
    for entry in _PREDICTORS.values():
        if statistic not in entry.statistics:
            continue
        pred = entry.func(query)
        if pred is None:
            continue
        registered = (entry.name in CURVE_RELEASES
                      or entry.name in {e.name for e in registry.available()})
        pred = replace(pred, registered=registered, trust=entry.trust)
        if query.silos is not None:
            pred = _in_silos(pred, query)
        reasons = [pred.reason] if pred.reason else []
        if trust is not None and trust not in entry.trust:
            reasons.append(f"does not meet trust={trust!r}")
        if max_bits_per_party is not None:
            # In silos the budget bounds what one silo sends.
            bits = pred.bits_per_party if query.silos is None else pred.bits_per_silo
            if bits is None:
                reasons.append("cost unknown (protocol not registered)")
            elif bits > max_bits_per_party:
                reasons.append(f"{bits:g} bits > budget")
        if not math.isfinite(pred.mse) and not reasons:
            reasons.append("no finite prediction")
        found.append(replace(pred, eligible=not reasons, reason="; ".join(reasons)))
    found += _without_formula(query, {p.protocol for p in found})
    found.sort(key=lambda pr: (not math.isfinite(pr.mse), pr.mse, pr.protocol))
    eligible = [pr for pr in found if pr.eligible]
    recommended = (min(eligible, key=lambda pr: (pr.mse, pr.bits_per_party or math.inf,
                                                 pr.protocol))
                   if eligible else None)
    notes = _advice_notes(query, found, recommended, trust)
    return Advice(query, trust, max_bits_per_party, tuple(found), recommended, tuple(notes))


#: The ``kind`` of a protocol listed without a prediction (no error formula, or refused).
NO_PREDICTION = "no prediction"
#: The trust settings a protocol meets, by its privacy model, for protocols without a
#: predictor (which states them when registered).
_TRUST_OF_MODEL: dict[PrivacyModel, frozenset[str]] = {
    PrivacyModel.CENTRAL: _CURATOR, PrivacyModel.LOCAL: _ALL_BUT_LABEL,
    PrivacyModel.LABEL: _LABEL, PrivacyModel.COMPUTATIONAL: _SECURE,
    PrivacyModel.NONE: frozenset()}


def _protocol_model(name: str) -> PrivacyModel:
    release = catalogue.curve_release(name)
    if release is not None:
        return release.model
    entries = [*registry.available(), *registry.available_curves()]
    return next(e.model for e in entries if e.name == name)


def _without_formula(q: Query, predicted: set[str]) -> list[Prediction]:
    """The protocols that compute the statistic but have no formula here (all of them for
    renyi2, vus, median, hl; e.g. ecdf-fss for the ECDF), without a prediction; for a
    statistic no formula covers, also each protocol of its kind that refuses it, with the
    protocol's own reason. None is eligible (nothing to rank them by); ``fedustat
    compare`` runs those that compute it and measures them. An alias of a listed protocol
    (the same factory) and the exact reference are left out."""
    stat = catalogue.get(q.statistic)
    serving = set(catalogue.protocols_for(q.statistic))
    if stat.kind == "curve":
        candidates = [*catalogue.CURVE_RELEASES, *(e.name for e in registry.available_curves())]
    else:
        factories = {registry.factory(name) for name in predicted
                     if name in {e.name for e in registry.available()}}
        candidates = [e.name for e in registry.available()
                      if e.name != "exact" and e.factory not in factories]
    if q.statistic in predicted_statistics():
        candidates = [name for name in candidates if name in serving]
    candidates = [name for name in candidates if name not in predicted]
    rows = []
    for name in sorted(candidates, key=lambda name: name not in serving):
        if name in serving:
            reason = f"computes {q.statistic}, no error formula"
        else:
            refusal = catalogue.protocol_refusal(q.statistic, name)
            reason = f"cannot compute {q.statistic}: {refusal}"
        model = _protocol_model(name)
        trust = _PREDICTORS[name].trust if name in _PREDICTORS else _TRUST_OF_MODEL[model]
        rows.append(Prediction(name, model, q.epsilon, 0.0, math.nan, NO_PREDICTION, "none",
                               registered=name in serving, trust=trust, eligible=False,
                               reason=reason))
    return rows


def _advice_notes(q: Query, found: list[Prediction], rec: Prediction | None,
                  trust: str | None) -> list[str]:
    notes = []
    unpredicted = [p for p in found if p.kind == NO_PREDICTION]
    if unpredicted and len(unpredicted) == len(found):
        notes.append(f"the advisor has no error formula for {q.statistic} (its formulas bound "
                     "the error of a U-statistic itself, of the ECDF, of the ROC curve and of "
                     "quantiles): the protocols that compute it are listed without a "
                     "prediction; `fedustat compare` measures their error")
    else:
        # Some protocols have a formula: name only those without one.
        notes.extend(f"{p.protocol}: no error formula; `fedustat compare` measures it"
                     for p in unpredicted)
    if rec is not None and not rec.registered:
        notes.append(f"{rec.protocol} is predicted from its paper but is not registered "
                     "in this installation; the best registered eligible protocol is "
                     + next((p.protocol for p in found if p.eligible and p.registered),
                            "none"))
    if rec is not None and rec.kind == PARTIAL:
        notes.append("the recommended protocol's prediction leaves out its quantization "
                     "error, which depends on the data")
    span = {"auc": 1.0, "kendall": 2.0, "duplicate": 1.0}.get(q.statistic)
    vacuous = [p.protocol for p in found
               if span is not None and math.isfinite(p.rmse) and p.rmse > span]
    if vacuous:
        notes.append("predicted RMSE larger than the statistic's range (the bound is "
                     "vacuous at this size): " + ", ".join(vacuous))
    if q.silos is not None:
        native = sorted(p.protocol for p in found if p.protocol.startswith("fedauc"))
        per_record = (f"runs with each record a party (n = {q.n:,}), its silo sending that "
                      "party's messages")
        notes.append(f"{q.setting}: " + (f"{', '.join(native)} take each silo as one client; "
                                         f"every other protocol {per_record}" if native
                                         else f"every protocol {per_record}"))
    if q.statistic in _CURVES and trust in ("local", "label"):
        notes.append("the private ECDFs and ROC curves of this library are released by a "
                     "curator (003 Sec. 3) or by secure aggregation among servers (003 Sec. "
                     "4.1, trust='secure'); none is local or label DP")
    return notes
