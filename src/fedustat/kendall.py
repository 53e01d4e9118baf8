"""Kendall's rank correlation, private, shaped like ``scipy.stats.kendalltau``.

``variant="b"`` (SciPy's default) is the ratio of three private U-statistics, tau-a's
and the two tie fractions; ``variant="a"`` is tau-a itself (000 eq. 6); ``variant="c"``
(Stuart's tau-c) is tau-a rescaled by the public n and the public number of categories.
The p-values add the release's error law to Kendall's null law (:func:`kendall_tau_pvalue`).
docs/user-guide.md ("Kendall's tau") and docs/parity.md say what equals what.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedustat._inputs import accepts_random_state, column_inputs
from fedustat._lazy import lazy_module
from fedustat._one_call import (
    _check_budget,
    _check_params,
    _in_range,
    _protocol_for,
    _release,
    _spend,
)
from fedustat._validation import RandomLike, as_rng, check_budget, check_delta, check_positive_int
from fedustat.privacy.budget import BudgetAccountant
from fedustat.privacy.errors import (
    BoundedBias,
    ErrorDistribution,
    NormalError,
    error_sum,
    has_closed_tail,
    upper_tail,
)
from fedustat.privacy.noise import NoiseSource
from fedustat.protocols import registry
from fedustat.protocols.base import Estimate
from fedustat.stats import kernels
from fedustat.stats.exact import kendall_counts

sps = lazy_module("scipy.stats")

__all__ = ["ALTERNATIVES", "KENDALL_METHODS", "NAN_POLICIES", "TAU_B_BUDGET_SPLIT",
           "VARIANTS", "KendallTauResult", "kendall_tau_pvalue", "kendalltau"]

#: The variants, as ``scipy.stats.kendalltau`` names them (plus tau-a, the U-statistic).
VARIANTS = ("a", "b", "c")
#: ``alternative=`` values, as SciPy.
ALTERNATIVES = ("two-sided", "less", "greater")
#: ``method=`` values for the p-value, as SciPy.
KENDALL_METHODS = ("auto", "asymptotic", "exact")
#: ``nan_policy=`` values, as SciPy.
NAN_POLICIES = ("propagate", "raise", "omit")
#: How a private tau-b splits (epsilon, delta) among its three releases: tau-a's U, the
#: fraction of pairs tied in x, tied in y. tau-a's kernel has twice the sensitivity of a
#: tie kernel and the largest gradient in the ratio (1 / sqrt((1 - p_x)(1 - p_y)) against
#: tau_b / (2 (1 - p)) for a tie fraction p), so it gets half.
TAU_B_BUDGET_SPLIT = (0.5, 0.25, 0.25)


@dataclass(frozen=True, eq=False)
class KendallTauResult(Estimate):
    """A private Kendall's tau that unpacks like SciPy's result: ``tau, p = result``.

    It is the full :class:`~fedustat.protocols.base.Estimate` (value, error bar, guarantee,
    costs) plus ``pvalue``: the p-value of the test of tau = 0 (``alternative`` as asked)
    computed from the release and public quantities only (see :func:`kendall_tau_pvalue`).

    Parameters
    ----------
    value, quantity, protocol, privacy, std_error, cost, diagnostics, error:
        The fields of :class:`~fedustat.protocols.base.Estimate`, as are ``noise``,
        ``clip_range``, ``unclipped`` and ``statistic_map``.
    pvalue:
        The p-value of the test of tau = 0.

    Examples
    --------
    >>> result = fedustat.kendalltau([1, 2, 3, 4, 5], [1, 3, 2, 5, 4], epsilon=math.inf)
    >>> isinstance(result, fedustat.KendallTauResult), round(result.statistic, 4)
    (True, 0.6)
    """

    pvalue: float = math.nan

    def __iter__(self) -> Iterator[float]:
        return iter((float(self.statistic), float(self.pvalue)))

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> float:
        return (float(self.statistic), float(self.pvalue))[index]

    def to_dict(self, confidence_level: float = 0.95) -> dict[str, Any]:
        """:meth:`Estimate.to_dict` with the p-value (computed from the release alone).

        Parameters
        ----------
        confidence_level:
            Level of the intervals, in (0, 1).

        Returns
        -------
        dict
            :meth:`Estimate.to_dict`'s entries plus ``pvalue``.

        Examples
        --------
        >>> result = fedustat.kendalltau([1, 2, 3, 4, 5], [1, 3, 2, 5, 4], epsilon=math.inf)
        >>> out = result.to_dict()
        >>> out["value"], round(out["pvalue"], 4)
        (0.6, 0.2333)
        """
        return {**super().to_dict(confidence_level), "pvalue": float(self.pvalue)}


# Up to this many records the null law of tau-a is computed exactly (Kendall's permutation
# law, O(n^3) flops, 0.2 s at 300); above it the normal law with a continuity correction,
# which is conservative in the tails from n = 30 on (checked against the exact law for
# n = 30-500 at z = 2-5: the exact tail is 0.42-0.99 times the normal one).
_KENDALL_EXACT_MAX_N = 300


@functools.lru_cache(maxsize=8)
def _kendall_null_law(n: int) -> np.ndarray:
    """``P(I = k)``, k = 0..n(n-1)/2, for the number I of inversions of a uniformly random
    permutation of n items: the null law of tau-a without ties, ``tau = 1 - 4 I / (n(n-1))``.

    Kendall's recursion (Kendall and Gibbons, Rank Correlation Methods, 1990, Sec. 5.3;
    the Mahonian numbers): adding the m-th item adds a uniform number of inversions in
    {0, ..., m-1}, so the law is the running mean of m consecutive entries of the previous
    one. The law is symmetric; the lower half is computed by cumulative sums (sums of
    comparable positive terms, so its small tail keeps relative accuracy) and mirrored.
    """
    law = np.ones(1)
    for m in range(2, n + 1):
        cumulative = np.concatenate(([0.0], np.cumsum(law)))
        top = len(law) + m - 2
        k = np.arange(top + 1)
        law_next = (cumulative[np.minimum(k + 1, len(law))]
                    - cumulative[np.maximum(k - m + 1, 0)]) / m
        half = (top + 1) // 2
        law_next[top + 1 - half:] = law_next[:half][::-1]
        law = law_next
    return law


def _kendall_null_tail(t: np.ndarray, n: int, error: ErrorDistribution | None,
                       method: str = "auto") -> np.ndarray:
    """``P(T + Z >= t)`` for the null tau-a T of n records (no ties) plus an independent
    release error Z of law ``error`` (None: no error), vectorised over ``t``.

    ``method="exact"`` (or ``"auto"`` with n <= ``_KENDALL_EXACT_MAX_N``): T's exact
    permutation law, summed over its atoms: ``sum_k P(T = tau_k) P(Z >= t - tau_k)``, a sum
    of positive terms that keeps the tail's relative accuracy. ``"asymptotic"`` (or
    ``"auto"`` above that n): T is ``N(0, 2(2n + 5) / (9n(n - 1)))`` (Kendall 1938,
    Biometrika 30, 81-93) taken at ``t - 1 / N`` (continuity correction, N = n(n - 1)/2
    pairs) and convolved with Z in closed form where there is one (normal, Laplace,
    normal-Laplace).
    """
    t = np.asarray(t, dtype=np.float64)
    pairs = n * (n - 1) / 2.0
    exact = method == "exact" or (method == "auto" and n <= _KENDALL_EXACT_MAX_N)
    if not exact:
        null_sd = math.sqrt(2.0 * (2 * n + 5) / (9.0 * n * (n - 1)))
        total = error_sum([NormalError(null_sd)] + ([error] if error is not None else []))
        return upper_tail(total, t - 1.0 / pairs)
    law = _kendall_null_law(n)
    if error is None or (error.variance == 0.0 and not isinstance(error, BoundedBias)):
        # P(T >= t) = P(I <= (1 - t) N / 2); a point within rounding of an atom counts.
        last = np.floor((1.0 - t) * pairs / 2.0 + 1e-9).astype(np.int64)
        lower = np.concatenate(([0.0], np.cumsum(law)))
        return np.clip(lower[np.clip(last + 1, 0, len(law))], 0.0, 1.0)
    keep = law > 0.0
    atoms = (1.0 - 2.0 * np.arange(len(law)) / pairs)[keep]
    mass = law[keep]
    if not has_closed_tail(error) and len(atoms) > 400:
        # Each tail of such a law is a numerical inversion: merge T's atoms into 400 bins,
        # each moved to its bin's top atom (T only grows, so the tail only grows).
        edges = np.linspace(-1.0, 1.0, 401)
        bins = np.clip(np.searchsorted(edges, atoms, side="left"), 1, 400)
        mass = np.bincount(bins, weights=mass, minlength=401)[1:]
        tops = np.full(400, -np.inf)
        np.maximum.at(tops, bins - 1, atoms)
        atoms, mass = tops[mass > 0], mass[mass > 0]
    tails = upper_tail(error, t[..., None] - atoms)
    return np.clip(tails @ mass, 0.0, 1.0)


def _check_choice(caller: str, name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{caller}(): {name} must be one of "
                         f"{', '.join(repr(c) for c in choices)}; got {value!r}")
    return value


def kendall_tau_pvalue(release: Estimate, n: int, alternative: str = "two-sided",
                       method: str = "auto") -> float:
    """p-value of tau = 0 from a private tau-a release of ``n`` (public) records.

    The release is ``t = T + Z``: T the exact tau-a, Z its error, independent of the data,
    of law ``release.error`` (a release with only a standard error gets a normal Z). Under
    independence and without ties, T's law is Kendall's permutation law; ties only
    concentrate T, so with them the test is conservative. ``alternative``:
    ``"two-sided"`` gives ``min(1, 2 P(T + Z >= |t|))``, ``"greater"`` ``P(T + Z >= t)``,
    ``"less"`` ``P(T + Z <= t)`` (= ``P(T + Z >= -t)``: T's null law and every error law
    here are symmetric), at the unclipped release. ``method``: ``"exact"`` uses the exact
    permutation law (n <= 300), ``"asymptotic"`` the normal law with a continuity
    correction, ``"auto"`` the exact law up to n = 300 and the normal one above (see
    :func:`_kendall_null_tail`); either is convolved with Z, summed over T's atoms with Z's
    tail in closed form, so it is accurate far in its tails and valid: under independence
    ``P(p <= a) <= a``. Post-processing of the release and public n only: it costs no
    privacy. NaN for a private release without an error law or standard error.

    Parameters
    ----------
    release:
        A tau-a release (an :class:`~fedustat.protocols.base.Estimate`).
    n:
        The public number of records it was computed from.
    alternative:
        ``"two-sided"``, ``"less"`` or ``"greater"``.
    method:
        ``"auto"``, ``"asymptotic"`` or ``"exact"``.

    Returns
    -------
    float
        The p-value.

    Examples
    --------
    >>> tau = fedustat.kendalltau([1, 2, 3, 4, 5], [1, 3, 2, 5, 4], epsilon=math.inf,
    ...                           variant="a")
    >>> round(fedustat.kendall_tau_pvalue(tau, 5), 4)
    0.2333
    """
    caller = "fedustat.kendall_tau_pvalue"
    if not isinstance(release, Estimate):
        raise TypeError(f"{caller}(): release must be a tau-a release (an Estimate, e.g. "
                        f"fedustat.kendalltau(..., variant='a')), got {type(release).__name__}")
    n = check_positive_int(n, "n", minimum=2)
    _check_choice(caller, "alternative", alternative, ALTERNATIVES)
    _check_choice(caller, "method", method, KENDALL_METHODS)
    if method == "exact" and n > _KENDALL_EXACT_MAX_N:
        raise ValueError(f"{caller}(): method='exact' computes Kendall's permutation law "
                         f"up to n = {_KENDALL_EXACT_MAX_N} records; this release has "
                         f"n = {n}: use method='asymptotic' or 'auto'")
    raw = release.raw_value
    if math.isnan(raw):
        return math.nan
    error = release.error
    if error is None or (error.variance == 0.0 and not isinstance(error, BoundedBias)):
        if release.std_error is None and release.noise != "none":
            return math.nan  # a private release with no error bar: no valid test
        error = NormalError(release.std_error) if release.std_error else None
    if alternative == "two-sided":
        if raw == 0.0:
            return 1.0
        tail = float(_kendall_null_tail(np.array(abs(raw)), n, error, method))
        return float(min(1.0, 2.0 * tail))
    at = raw if alternative == "greater" else -raw
    return float(_kendall_null_tail(np.array(at), n, error, method))


def _nan_result(caller: str, name: str, variant: str, epsilon: float,
                delta: float) -> KendallTauResult:
    """SciPy's ``nan_policy="propagate"``: a NaN tau and p-value; nothing is released."""
    from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel

    # Nothing is released (the model of a non-private answer, whose epsilon is inf).
    privacy = PrivacyGuarantee(epsilon=math.inf, delta=0.0, model=PrivacyModel.NONE,
                               adjacency="nothing released")
    return KendallTauResult(value=math.nan, quantity=f"kendall_tau_{variant}", protocol=name,
                            privacy=privacy, std_error=math.nan, noise="none",
                            diagnostics={"nan_policy": "propagate",
                                         "note": f"{caller}: x or y holds a NaN; nothing "
                                                 "was released and no budget spent"},
                            pvalue=math.nan)


def _levels(caller: str, levels: Any) -> tuple[np.ndarray, np.ndarray]:
    """``levels=(x_levels, y_levels)``: the public sets of values of x and of y."""
    if (not isinstance(levels, Sequence) or isinstance(levels, str) or len(levels) != 2):
        raise TypeError(f"{caller}(): levels must be a pair (x_levels, y_levels) of the "
                        f"public category values of x and of y, got {levels!r}")
    out = []
    for name, values in zip("xy", levels, strict=True):
        arr = np.unique(np.asarray(values, dtype=np.float64))
        if arr.size < 2 or not np.all(np.isfinite(arr)):
            raise ValueError(f"{caller}(): levels of {name} must hold at least two finite "
                             f"values, got {values!r}")
        out.append(arr)
    return out[0], out[1]


def _within_levels(data: np.ndarray, levels: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """A record check: each x and y is one of its public levels (tau-c's m is theirs)."""
    for column, allowed in enumerate(levels):
        outside = ~np.isin(data[:, column], allowed)
        if np.any(outside):
            raise ValueError(f"{'xy'[column]} holds values outside its declared levels "
                             f"({data[outside, column][:3].tolist()}); tau-c's number of "
                             "categories is that of the public levels")
    return data


def _tau_c_factor(n: int, m: int) -> float:
    """tau_c = 2 (C - D) / (n^2 (m - 1) / m) (Stuart 1953, Biometrika 40, 105-110; SciPy's
    ``variant="c"``) = U C(n,2) 2 m / (n^2 (m - 1)) = U (n - 1) m / (n (m - 1))."""
    return (n - 1) * m / (n * (m - 1))


def _scaled(release: Estimate, factor: float, quantity: str) -> Estimate:
    """``release`` times the public ``factor`` (post-processing), unclipped."""
    raw = release.unclipped_release()
    return replace(raw, value=raw.value * factor, quantity=quantity,
                   std_error=None if raw.std_error is None else raw.std_error * factor,
                   error=None if raw.error is None else raw.error.scaled(factor),
                   clip_range=None, unclipped=None)


def _exact_tau(x: np.ndarray, y: np.ndarray, variant: str) -> float:
    """tau-a, tau-b or tau-c in O(n log n), in SciPy's order of operations."""
    cmd, tot, xtie, ytie = kendall_counts(x, y)
    if variant == "a":
        return cmd / tot
    if xtie == tot or ytie == tot:
        return math.nan  # SciPy's answer for a constant input
    if variant == "b":
        return float(cmd / np.sqrt(tot - xtie) / np.sqrt(tot - ytie))
    n = x.size
    m = min(np.unique(x).size, np.unique(y).size)
    return float(2 * cmd / (n**2 * (m - 1) / m))


def _tau_b_release(kernel_a: kernels.Kernel, records: np.ndarray, *, caller: str,
                   epsilon: float, delta: float, protocol: str, rng: RandomLike, noise: Any,
                   params: dict[str, Any], engine: Any, workers: int | None,
                   clip: bool) -> tuple[Estimate, Estimate]:
    """Private tau-b: (the tau-b release, the tau-a release inside it).

    tau_b = U / sqrt((1 - p_x)(1 - p_y)) with U tau-a's U-statistic and p_x, p_y the
    fractions of pairs tied in x, in y (Kendall 1945, Biometrika 33, 239-251; C(n,2)
    cancels). Each is released by ``protocol`` with the share of :data:`TAU_B_BUDGET_SPLIT`
    of (epsilon, delta); by basic composition (Dwork and Roth 2014, Thm. 3.16) the three
    together are (epsilon, delta)-DP, and the ratio is post-processing. The released tie
    fractions are clipped into [0, 1 - 1/C(n,2)] (a defined tau-b has at least one pair
    untied in each column). Standard error by the delta method: the gradient of the
    ratio at the released values, (1/s, tau_b / (2(1 - p_x)), tau_b / (2(1 - p_y))) with
    s = sqrt((1 - p_x)(1 - p_y)), against the three independent releases' error
    variances; its error law is taken normal with that deviation (an approximation, good
    when the tie fractions are well inside [0, 1)).
    """
    _check_params(caller, protocol, params)
    for column in ("x", "y"):
        try:
            registry.make(protocol, kernels.kendall_tie_kernel(column), epsilon=epsilon,
                          delta=delta, **params)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"{caller}(): protocol {protocol!r} releases tau-a but not the fraction of "
                f"pairs tied in {column} that tau-b needs ({str(exc).splitlines()[0]}); it "
                "can release variant='a', and variant='c' with public levels=") from None
    eps = check_budget(epsilon, allow_inf=True)
    dlt = check_delta(delta)
    stream = None if rng is None else as_rng(rng)  # one stream, drawn in turn
    parts = []
    for share, kernel in zip(TAU_B_BUDGET_SPLIT, (kernel_a, kernels.kendall_tie_kernel("x"),
                                                  kernels.kendall_tie_kernel("y")),
                             strict=True):
        parts.append(_release(kernel, records, epsilon=eps * share, delta=dlt * share,
                              protocol=protocol, rng=stream, noise=noise, batch_size=None,
                              caller=caller, params=params, engine=engine,
                              workers=workers, clip=False))
    tau_a, tie_x, tie_y = parts
    n = records.shape[0]
    top = 1.0 - 1.0 / (n * (n - 1) / 2.0)
    u = tau_a.raw_value
    p_x = min(max(tie_x.raw_value, 0.0), top)
    p_y = min(max(tie_y.raw_value, 0.0), top)
    scale = math.sqrt((1.0 - p_x) * (1.0 - p_y))
    tau_b = u / scale
    ses = [p.std_error for p in parts]
    gradient = (1.0 / scale, tau_b / (2.0 * (1.0 - p_x)), tau_b / (2.0 * (1.0 - p_y)))
    std_error = (math.sqrt(sum((g * s) ** 2 for g, s in zip(gradient, ses, strict=True)))
                 if all(s is not None for s in ses) else None)
    # A tie fraction whose 95% interval reaches 1 leaves the denominator undetermined.
    degenerate = [c for c, p, s in (("x", tie_x.raw_value, ses[1]),
                                    ("y", tie_y.raw_value, ses[2]))
                  if s is None or p + 1.96 * s >= top]
    if degenerate:
        warnings.warn(f"{caller}(): the released fraction of pairs tied in "
                      f"{' and '.join(degenerate)} is within its error of 1, so tau-b's "
                      "denominator is near 0 and its delta-method error bar is unreliable "
                      "(diagnostics['degenerate_denominator']); consider variant='a'",
                      RuntimeWarning, stacklevel=3)
    cost = type(tau_a.cost)(**{f.name: sum(getattr(p.cost, f.name) for p in parts)
                               for f in dataclasses.fields(tau_a.cost)})
    privacy = replace(tau_a.privacy, epsilon=eps, delta=dlt)
    release = replace(tau_a, value=tau_b, quantity="kendall_tau_b", privacy=privacy,
                      std_error=std_error,
                      error=None if std_error is None else NormalError(std_error),
                      cost=cost, clip_range=None, unclipped=None,
                      diagnostics={**tau_a.diagnostics,
                                   "budget_split": dict(zip(("tau_a", "ties_x", "ties_y"),
                                                            TAU_B_BUDGET_SPLIT, strict=True)),
                                   "composition": "basic (Dwork and Roth 2014, Thm. 3.16)",
                                   "components": {"tau_a": u, "ties_x": tie_x.raw_value,
                                                  "ties_y": tie_y.raw_value},
                                   "degenerate_denominator": bool(degenerate)})
    return _in_range(release, kernel_a, clip), tau_a


@accepts_random_state
def kendalltau(x: Any, y: Any, *, epsilon: float, delta: float = 0.0, variant: str = "b",
               alternative: str = "two-sided", method: str = "auto",
               nan_policy: str = "raise", levels: Any = None,
               data: Any = None, protocol: str | None = None, rng: RandomLike = None,
               noise: str | NoiseSource | None = None, engine: Any = None,
               workers: int | None = None, clip: bool = True,
               budget: BudgetAccountant | None = None, **params: Any) -> KendallTauResult:
    """Private Kendall rank correlation; mirrors ``scipy.stats.kendalltau``.

    ``variant="b"`` (SciPy's default) releases tau-a's U-statistic and the two tie
    fractions with (1/2, 1/4, 1/4) of the budget (:data:`TAU_B_BUDGET_SPLIT`, basic
    composition) and returns their ratio, with a delta-method error bar; protocols that
    cannot release a tie fraction refuse it. ``variant="a"`` is tau-a, the U-statistic
    (000 eq. 6). ``variant="c"`` (Stuart's tau-c) needs the number of categories m, which
    is public only through ``levels=(x_levels, y_levels)`` (m = the smaller count;
    each record is checked against them); at ``epsilon=math.inf`` m comes from the data,
    as in SciPy. At ``epsilon=math.inf`` every variant's value equals SciPy's (tau-a:
    ``(C - D) / C(n,2)``, which SciPy does not offer).

    The result unpacks like SciPy's (``tau, p = fedustat.kendalltau(x, y, epsilon=1)``,
    also ``.statistic`` and ``.pvalue``) and is the full release: a
    :class:`KendallTauResult`, an :class:`~fedustat.protocols.base.Estimate`. A private
    p-value tests tau = 0 from the tau-a release inside it (tau-b and tau-c are 0 exactly
    when tau-a is): Kendall's null law convolved with that release's error law
    (:func:`kendall_tau_pvalue`), conservative with ties. At ``epsilon=math.inf`` the
    p-value of tau-b and tau-c is SciPy's (tie-corrected), with ``alternative`` and
    ``method`` passed on.

    Parameters
    ----------
    x, y:
        The paired values, one pair per party (column names of ``data`` also work).
    epsilon, delta:
        The privacy budget; ``epsilon=math.inf`` gives the exact statistic.
    variant:
        ``"b"`` (default, SciPy's), ``"a"`` or ``"c"``.
    alternative:
        ``"two-sided"`` (default), ``"less"`` or ``"greater"``: the alternative of the test.
    method:
        How the p-value's null law is taken. Private: ``"exact"`` Kendall's permutation
        law convolved with the error law (n <= 300, else refused), ``"asymptotic"`` the
        normal law (continuity-corrected) convolved with it, ``"auto"`` exact up to
        n = 300. Exact tau-b/tau-c: SciPy's meaning.
    nan_policy:
        ``"raise"`` (default; SciPy's default is ``"propagate"``: here a NaN is refused
        loudly, as every other bad record is): a ValueError naming x or y.
        ``"propagate"``: a NaN in x or y gives a NaN result and releases nothing.
        ``"omit"``: pairs with a NaN are dropped and the release is of the kept pairs
        (their number is the public n).
    levels:
        ``(x_levels, y_levels)``: the public category values, for a private tau-c.
    data:
        A pandas/polars table whose columns ``x`` and ``y`` name.
    protocol:
        A registered protocol name (None: ``"exact"`` for ``epsilon=math.inf``, else
        ``"central-laplace"``).
    rng, noise:
        Seed or Generator for the simulation (``random_state=`` is the same), and where
        the randomness comes from (``"simulation"`` or ``"deployment"``), as in
        :func:`fedustat.estimate`.
    engine, workers:
        Run on the distributed engine, as in :func:`fedustat.estimate`.
    clip:
        Clip the release into [-1, 1] (the raw release stays in ``raw_value``).
    budget:
        A :class:`~fedustat.privacy.budget.BudgetAccountant`, checked before and spent
        after (tau-b's three releases as one composed charge of (epsilon, delta)).
    **params:
        Protocol-specific parameters (docs/protocols/).

    Returns
    -------
    KendallTauResult
        The release, unpacking as ``(statistic, pvalue)``.

    Examples
    --------
    >>> tau, p = fedustat.kendalltau([1, 2, 3, 4, 5], [1, 3, 2, 5, 4], epsilon=math.inf)
    >>> round(tau, 4)
    0.6
    >>> round(fedustat.kendalltau([1, 1, 2, 3], [1, 2, 2, 3], epsilon=math.inf), 4)
    0.8
    """
    caller = "fedustat.kendalltau"
    cols = column_inputs(caller, params, data, x=x, y=y)
    _check_choice(caller, "variant", variant, VARIANTS)
    _check_choice(caller, "alternative", alternative, ALTERNATIVES)
    _check_choice(caller, "method", method, KENDALL_METHODS)
    _check_choice(caller, "nan_policy", nan_policy, NAN_POLICIES)
    name = _protocol_for(epsilon, protocol)
    xs, ys = cols["x"], cols["y"]
    if xs.dtype.kind in "fc" or ys.dtype.kind in "fc":
        missing = np.zeros(max(xs.size, ys.size), dtype=bool)
        holders = []
        for label, values in (("x", xs), ("y", ys)):
            if values.dtype.kind in "fc" and values.ndim == 1 and values.size == missing.size:
                nan = np.isnan(values)
                missing |= nan
                holders += [label] if nan.any() else []
        if missing.any():
            if nan_policy == "raise":
                raise ValueError(f"{caller}(): {' and '.join(holders)} "
                                 f"{'contains' if len(holders) == 1 else 'contain'} NaN "
                                 "(nan_policy='raise', the default); pass nan_policy='omit' "
                                 "to drop those pairs, or 'propagate' for a NaN result")
            if nan_policy == "propagate":
                return _nan_result(caller, name, variant, epsilon, delta)
            xs, ys = xs[~missing], ys[~missing]
    kernel = kernels.kendall_tau_kernel("a")
    public_levels = None if levels is None else _levels(caller, levels)
    if public_levels is not None:
        kernel = replace(kernel, validate=functools.partial(_within_levels,
                                                            levels=public_levels))
    records = kernel.pack(xs, ys)
    n = records.shape[0]
    if method == "exact" and n > _KENDALL_EXACT_MAX_N and (name != "exact" or variant == "a"):
        raise ValueError(f"{caller}(): method='exact' takes Kendall's permutation law (up "
                         f"to n = {_KENDALL_EXACT_MAX_N}), convolved with the release's "
                         f"error; n = {n} here: use method='asymptotic' or 'auto'")
    if name == "exact":
        _check_budget(budget, kernel, epsilon, delta, name, data=records, params=params)
        release = _spend(budget, _release(kernel, records, epsilon=epsilon, delta=delta,
                                          protocol=name, rng=rng, noise=noise,
                                          batch_size=None, caller=caller, params=params,
                                          engine=engine, workers=workers, clip=clip), name)
        value = _exact_tau(records[:, 0], records[:, 1], variant)
        if variant == "a":
            pvalue = kendall_tau_pvalue(release, n, alternative, method)
        else:
            # Nothing is private here, so the test may read the ties: SciPy's.
            pvalue = float(sps.kendalltau(records[:, 0], records[:, 1], variant=variant,
                                          alternative=alternative, method=method).pvalue)
        release = replace(release, value=value, quantity=f"kendall_tau_{variant}",
                          unclipped=None)
        return KendallTauResult(**_fields(release), pvalue=pvalue)
    if variant == "c" and public_levels is None:
        raise ValueError(f"{caller}(): a private tau-c needs its number of categories m as "
                         "public information: pass levels=(x_levels, y_levels), the public "
                         "category values (m = the smaller count); m read from the data "
                         "would leak them. variant='b' or 'a' need no levels")
    if variant == "b":
        _check_budget(budget, kernel, epsilon, delta, name, single=False, data=records,
                      params=params)
        release, tau_a = _tau_b_release(kernel, records, caller=caller, epsilon=epsilon,
                                        delta=delta, protocol=name, rng=rng, noise=noise,
                                        params=params, engine=engine, workers=workers,
                                        clip=clip)
        release = _spend(budget, release, name, single=False)
        pvalue = kendall_tau_pvalue(tau_a, n, alternative, method)
        return KendallTauResult(**_fields(release), pvalue=pvalue)
    _check_budget(budget, kernel, epsilon, delta, name, data=records, params=params)
    tau_a = _spend(budget, _release(kernel, records, epsilon=epsilon, delta=delta,
                                    protocol=name, rng=rng, noise=noise, batch_size=None,
                                    caller=caller, params=params, engine=engine,
                                    workers=workers, clip=False), name)
    pvalue = kendall_tau_pvalue(tau_a, n, alternative, method)
    release = tau_a
    if variant == "c":
        m = min(public_levels[0].size, public_levels[1].size)  # type: ignore[index]
        release = replace(_scaled(tau_a, _tau_c_factor(n, m), "kendall_tau_c"),
                          diagnostics={**tau_a.diagnostics, "categories": m})
    release = _in_range(release, kernel, clip)
    return KendallTauResult(**_fields(release), pvalue=pvalue)


def _fields(release: Estimate) -> dict[str, Any]:
    return {f.name: getattr(release, f.name) for f in dataclasses.fields(release)
            if f.name in {g.name for g in dataclasses.fields(Estimate)}}
