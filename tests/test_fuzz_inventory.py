"""An inventory of bad inputs across every public entry point, generated from tables.

Each case calls one entry point with one argument given a bad value (every other argument
valid) and must end, within a hang guard, in one of two ways:

* a valid release (a finite value, finite error bars; only for values that have a valid
  meaning, e.g. ``epsilon=math.inf`` for the exact value), or
* a refusal: a ``ValueError`` or ``TypeError`` whose one-line message names the argument
  (the command line: an exit with one ``error: ...`` line naming the option).

Any other exception, a traceback, a hang, a release that is not finite, or a release of a
value that must be refused (a string epsilon, complex scores, ...) is a failure. The
entry points: the one-call functions of ``fedustat.__all__``, ``fedustat.estimate`` by
kernel and by name, the curve functions, every registered protocol and curve release
built through the registry (and run on small data when built), and the command line's
subcommands through ``main([...])`` (two cases in a real process). The run prints the
number of cases by outcome.

The bad values come from one list per kind of argument (:func:`_numbers`,
:func:`_budgets`, :func:`_sizes`, :func:`bad_columns`, :func:`bad_labels`,
:data:`BAD_BOUNDS`, :data:`BAD_THRESHOLDS`, :data:`BAD_LEVELS`, ...); a case allows a
release only where the value is a valid one (``may_release``). The whole inventory runs
in about ten seconds on a quiet machine (small data, one budget per case).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import signal
import subprocess
import sys
import typing
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fedustat
from fedustat import catalogue
from fedustat._validation import LARGEST_EPSILON, SMALLEST_EPSILON
from fedustat.cli import main
from fedustat.curves import CurveRelease, QuantilesResult, ROCCurveResult
from fedustat.protocols import registry
from fedustat.protocols.base import Estimate
from fedustat.runtime.simulate import simulate
from fedustat.stats import kernels

#: Seconds a case may run before the guard stops it (a guard against hangs, not a timing
#: criterion: every case takes well under a second on a quiet machine).
GUARD_SECONDS = 30.0
#: Records of the small data every case runs on.
N = 30

_rng = np.random.default_rng(20240611)
LABELS = np.arange(N) % 2
SCORES = np.clip(_rng.normal(0.5, 0.15, N) + 0.1 * LABELS, 0.0, 1.0)
VALUES = _rng.uniform(0.0, 1.0, N)
OTHER = _rng.uniform(0.0, 1.0, N)
INTEGERS = _rng.integers(0, 5, N).astype(float)
CLUSTERS = _rng.integers(0, 3, N)
PROBS = np.clip(SCORES, 0.05, 0.95)


# ------------------------------------------------------------------ bad values by kind


@dataclass(frozen=True)
class Bad:
    """A bad value of some kind of argument; ``ok`` says a valid release may follow."""

    label: str
    value: Any
    ok: bool = False


def _numbers(*valid: str) -> list[Bad]:
    """Bad values of a real number (a budget, a spacing, a level); ``valid`` names those
    for which a release is a valid end."""
    table = [("nan", math.nan), ("inf", math.inf), ("-inf", -math.inf), ("negative", -1.0),
             ("zero", 0.0), ("huge", 1e308), ("tiny", 1e-300), ("string-number", "1"),
             ("complex", 1 + 1j), ("bool", True), ("none", None), ("list", [1.0]),
             ("array", np.array([0.5, 0.5])), ("object", object())]
    return [Bad(label, value, label in valid) for label, value in table]


def _budgets(*valid: str) -> list[Bad]:
    """Bad values of a budget epsilon, and the two ends of the range a release takes
    (valid: a release must follow)."""
    return [*_numbers(*valid), Bad("smallest", SMALLEST_EPSILON, ok=True),
            Bad("largest", LARGEST_EPSILON, ok=True)]


def _sizes(*valid: str) -> list[Bad]:
    """Bad values of a count or size (grid points, groups, batches, parameters)."""
    table = [("nan", math.nan), ("inf", math.inf), ("negative", -1), ("zero", 0), ("one", 1),
             ("fraction", 2.5), ("huge", 10**9), ("2**25", 2**25),
             ("string-number", "8"), ("complex", 8 + 0j), ("bool", True), ("none", None),
             ("whole-float", 8.0)]
    return [Bad(label, value, label in valid) for label, value in table]


def bad_columns(good: np.ndarray, *valid: str) -> list[Bad]:
    """Bad values of a column of one value per record."""
    with_nan = good.astype(float).copy()
    with_nan[3] = math.nan
    with_inf = good.astype(float).copy()
    with_inf[4] = math.inf
    table = [("nan", with_nan), ("inf", with_inf), ("empty", []),
             ("2-D", np.column_stack([good, good, good])),
             ("3-D", good.reshape(1, -1, 1).repeat(2, axis=0)), ("scalar", 0.5),
             ("strings", ["a"] * good.size), ("string-numbers", [str(v) for v in good]),
             ("complex", good + 1j), ("complex-zero-imaginary", good + 0j),
             ("mismatched-length", good[:-1]), ("none", None), ("dict", {"a": 1}),
             ("objects", [object()] * good.size), ("huge-values", good * 1e300),
             ("booleans", good > np.median(good)), ("one-record", good[:1]),
             ("constant", np.full(good.size, 0.5))]
    return [Bad(label, value, label in valid) for label, value in table]


def bad_labels(*valid: str) -> list[Bad]:
    """Bad values of binary labels."""
    with_nan = LABELS.astype(float)
    with_nan[2] = math.nan
    table = [("one-class", np.zeros(N)), ("three-classes", np.arange(N) % 3),
             ("nan", with_nan), ("strings-without-pos_label", np.where(LABELS, "yes", "no")),
             ("fractions", np.full(N, 0.5)), ("empty", []), ("2-D", np.ones((N, 3))),
             ("mismatched-length", LABELS[:-1]), ("complex", LABELS + 1j), ("none", None),
             ("booleans", LABELS.astype(bool))]
    return [Bad(label, value, label in valid) for label, value in table]


#: Bad public bounds (lo, hi).
BAD_BOUNDS = [Bad("reversed", (1.0, 0.0)), Bad("equal", (0.5, 0.5)),
              Bad("nan", (0.0, math.nan)), Bad("inf", (0.0, math.inf)),
              Bad("huge", (0.0, 1e308), ok=True), Bad("one-number", (0.0,)),
              Bad("three-numbers", (0.0, 0.5, 1.0)), Bad("string", "0,1"),
              Bad("complex", (0.0, 1j)), Bad("scalar", 1.0), Bad("excluding-the-data", (0.6, 0.7)),
              Bad("strings", ("0", "1"))]

#: Bad public grids (thresholds).
BAD_THRESHOLDS = [Bad("unsorted", [0.5, 0.2, 0.9]), Bad("duplicates", [0.2, 0.2, 0.9]),
                  Bad("empty", []), Bad("nan", [0.1, math.nan, 0.9]),
                  Bad("2-D", [[0.1, 0.5], [0.6, 0.9]]), Bad("strings", ["a", "b"]),
                  Bad("complex", [0.1 + 1j, 0.5]), Bad("one-point", [0.5], ok=True),
                  Bad("above-the-cap", np.linspace(0.0, 1.0, 2**21 + 1)),
                  Bad("none-and-no-bounds", None)]

#: Bad quantile levels.
BAD_LEVELS = [Bad("zero", 0.0), Bad("above-one", 1.5), Bad("negative", -0.1),
              Bad("nan", math.nan), Bad("empty", []),
              Bad("1e5-levels", np.linspace(0.01, 1.0, 10**5)),
              Bad("string", "0.5"), Bad("2-D", [[0.5]]), Bad("complex", 0.5 + 1j),
              Bad("bool", True), Bad("none", None)]

#: Bad seeds (``rng``).
BAD_RNG = [Bad("negative", -1), Bad("string", "a"), Bad("fraction", 1.5), Bad("bool", True),
           Bad("list-of-strings", ["a"])]

#: Bad choices (a string argument with a fixed set of values).
BAD_CHOICES = [Bad("unknown", "bogus"), Bad("number", 3), Bad("empty", ""), Bad("none", None)]


# ------------------------------------------------------------------ cases and outcomes


@dataclass(frozen=True)
class Case:
    """One entry point called with one bad argument."""

    entry: str
    argument: str
    label: str
    call: Callable[[], Any]
    names: tuple[str, ...]
    may_release: bool

    @property
    def id(self) -> str:
        return f"{self.entry}({self.argument}={self.label})"


class HangGuard(BaseException):
    """Raised by the alarm: a BaseException, so that no ``except Exception`` swallows it."""


@contextlib.contextmanager
def hang_guard(seconds: float) -> Iterator[None]:
    def fire(signum: int, frame: Any) -> None:
        raise HangGuard

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


@dataclass(frozen=True)
class CliRun:
    """What ``main(argv)`` printed when it returned."""

    status: int
    out: str
    err: str


class CliRefusalError(Exception):
    """``main(argv)`` exited with an error line (``line``) and a status."""

    def __init__(self, line: str, status: Any, err: str) -> None:
        super().__init__(line)
        self.line, self.status, self.err = line, status, err


def _numbers_in(value: Any) -> Iterator[float]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _numbers_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from _numbers_in(v)
    elif isinstance(value, float):
        yield value


def names_an_argument(message: str, names: tuple[str, ...]) -> bool:
    """Whether ``message`` names one of ``names`` as a word (``n`` in "n must be", not in
    "number")."""
    return any(re.search(rf"(?<![\w-]){re.escape(name)}(?!\w)", message) for name in names)


def invalid_release(result: Any) -> str | None:
    """Why ``result`` is not a valid release (None if it is)."""
    if isinstance(result, Estimate):
        if not math.isfinite(result.value):
            return f"value {result.value}"
        if result.std_error is not None and not math.isfinite(result.std_error):
            return f"std_error {result.std_error}"
        return None
    if isinstance(result, ROCCurveResult):
        rates = np.concatenate([result.fpr, result.tpr])
        return None if np.all(np.isfinite(rates)) else "non-finite rates"
    if isinstance(result, CurveRelease):
        values = np.asarray(result, dtype=np.float64)
        if not np.all(np.isfinite(values)):
            return "non-finite curve"
        std_error = np.asarray(result.std_error, dtype=np.float64)
        # A quantile method without a data-independent level bound (fedustat.quantile's
        # JointExp for several levels) reports NaN for it, never a made-up number.
        unbounded = isinstance(result, QuantilesResult) and math.isnan(result.level_error())
        if not (np.all(np.isfinite(std_error)) or (unbounded and np.all(np.isnan(std_error)))):
            return "non-finite std_error"
        return None
    if isinstance(result, CliRun):
        if result.status != 0:
            return f"exit status {result.status}"
        if "Traceback" in result.err:
            return "traceback on stderr"
        try:
            printed = json.loads(result.out)
        except ValueError:
            return "NaN printed" if re.search(r"\bnan\b", result.out.lower()) else None
        return "NaN in the JSON" if any(math.isnan(v) for v in _numbers_in(printed)) else None
    if isinstance(result, np.ndarray):
        return None if np.all(np.isfinite(result)) else "non-finite array"
    return None


def outcome(case: Case) -> tuple[str, str]:
    """(outcome, detail): "release" or "refused" pass; anything else fails."""
    with warnings.catch_warnings():
        # A complex value cast to a real one drops its imaginary part: silent, so an error.
        warnings.simplefilter("error", np.exceptions.ComplexWarning)
        warnings.simplefilter("ignore", UserWarning)
        try:
            with hang_guard(GUARD_SECONDS):
                result = case.call()
        except HangGuard:
            return "hang", f"still running after {GUARD_SECONDS:g} s"
        except np.exceptions.ComplexWarning as exc:
            return "silently accepted", f"ComplexWarning: {exc}"
        except CliRefusalError as exc:
            if "Traceback" in exc.err:
                return "traceback", exc.err
            if "error:" not in exc.line:
                return "refusal without an error line", exc.line
            if not names_an_argument(exc.line, case.names):
                return "refusal not naming the argument", exc.line
            return "refused", exc.line
        except (ValueError, TypeError) as exc:
            message = str(exc)
            if "\n" in message.strip():
                return "message of several lines", message
            if not names_an_argument(message, case.names):
                return "refusal not naming the argument", message
            return "refused", message
        except Exception as exc:  # any other exception is a traceback for the user
            return "traceback", f"{type(exc).__name__}: {exc}"
    try:
        problem = invalid_release(result)
    except Exception as exc:  # the release's own error bars fail to compute
        problem = f"{type(exc).__name__}: {exc}"
    if problem is not None:
        return "invalid release", problem
    if not case.may_release:
        return "silently accepted", repr(result)[:160]
    return "release", ""


def cases_for(entry: str, argument: str, bads: list[Bad], call: Callable[[Any], Any],
              names: tuple[str, ...] | None = None) -> list[Case]:
    """One case per bad value of ``argument``; ``call(value)`` makes the call."""
    return [Case(entry, argument, bad.label, (lambda v=bad.value: call(v)),
                 names or (argument,), bad.ok) for bad in bads]


# ------------------------------------------------------------------ the one-call functions

SEED = {"rng": 0}


def u_statistic_cases() -> list[Case]:
    out: list[Case] = []

    def auc(**kw: Any) -> Any:
        args = {"y_true": LABELS, "y_score": SCORES, "epsilon": 1.0, **SEED, **kw}
        return fedustat.roc_auc_score(args.pop("y_true"), args.pop("y_score"), **args)

    e = "fedustat.roc_auc_score"
    out += cases_for(e, "y_true", bad_labels("booleans"), lambda v: auc(y_true=v),
                     ("y_true", "label"))
    out += cases_for(e, "y_score", bad_columns(SCORES, "booleans", "huge-values", "constant"),
                     lambda v: auc(y_score=v), ("y_score", "score"))
    out += cases_for(e, "epsilon", _budgets("inf"), lambda v: auc(epsilon=v))
    out += cases_for(e, "delta", _numbers("zero"), lambda v: auc(delta=v))
    out += cases_for(e, "pos_label", [Bad("absent", "x"), Bad("absent-number", 2)],
                     lambda v: auc(pos_label=v))
    out += cases_for(e, "multi_class", BAD_CHOICES, lambda v: auc(multi_class=v))
    out += cases_for(e, "average", [Bad("unknown", "bogus"), Bad("number", 3), Bad("empty", "")],
                     lambda v: auc(average=v))
    out += cases_for(e, "labels", [Bad("one-class", [1]), Bad("repeated", [0, 0, 1]),
                                   Bad("missing-a-class", [0, 2])],
                     lambda v: auc(labels=v))
    out += cases_for(e, "protocol", [*BAD_CHOICES[:3], Bad("none", None, ok=True)],
                     lambda v: auc(protocol=v))
    out += cases_for(e, "rng", BAD_RNG, lambda v: auc(rng=v))
    out += cases_for(e, "noise", [*BAD_CHOICES[:3]], lambda v: auc(noise=v))
    out += cases_for(e, "noise", [Bad("deployment-with-a-seed", "deployment")],
                     lambda v: auc(noise=v), ("rng", "seed"))
    out += cases_for(e, "clip", [Bad("string", "yes"), Bad("number", 1)],
                     lambda v: auc(clip=v))
    out += cases_for(e, "unknown keyword", [Bad("bogus", 1)], lambda v: auc(bogus=v),
                     ("bogus",))
    out += cases_for(e, "sample_weight", [Bad("weights", np.ones(N))],
                     lambda v: auc(sample_weight=v))
    out += cases_for(e, "data", [Bad("missing-column", {"a": LABELS})],
                     lambda v: fedustat.roc_auc_score("label", "score", data=v, epsilon=1.0,
                                                      **SEED), ("label", "data"))

    def tau(**kw: Any) -> Any:
        args = {"x": VALUES, "y": OTHER, "epsilon": 1.0, **SEED, **kw}
        return fedustat.kendalltau(args.pop("x"), args.pop("y"), **args)

    e = "fedustat.kendalltau"
    out += cases_for(e, "x", bad_columns(VALUES, "booleans", "huge-values", "constant"),
                     lambda v: tau(x=v), ("x", "inconsistent"))
    out += cases_for(e, "y", bad_columns(OTHER, "booleans", "huge-values", "constant")[:8],
                     lambda v: tau(y=v), ("y", "inconsistent"))
    out += cases_for(e, "epsilon", _budgets("inf"), lambda v: tau(epsilon=v))
    out += cases_for(e, "variant", BAD_CHOICES, lambda v: tau(variant=v))
    for argument in ("alternative", "method", "nan_policy"):
        out += cases_for(e, argument, BAD_CHOICES, lambda v, a=argument: tau(**{a: v}))
    out += cases_for(e, "levels", [Bad("one-list", [0, 1, 2]), Bad("string", "ab"),
                                   Bad("single-level", ([0], [0, 1])),
                                   Bad("nan-level", ([0, math.nan], [0, 1])),
                                   Bad("values-outside", ([0, 1], [0, 1]))],
                     lambda v: tau(variant="c", levels=v), ("levels",))
    out += cases_for(e, "random_state", [Bad("string", "a"), Bad("fraction", 1.5),
                                         Bad("bool", True), Bad("list-of-strings", ["a"])],
                     lambda v: fedustat.kendalltau(VALUES, OTHER, epsilon=1.0, random_state=v),
                     ("random_state",))
    out += cases_for(e, "random_state", [Bad("with-rng", 1)],
                     lambda v: tau(random_state=v), ("random_state", "rng"))

    e = "fedustat.kendall_tau_pvalue"
    exact_tau = fedustat.kendalltau(VALUES, OTHER, epsilon=math.inf, variant="a")
    out += cases_for(e, "release", [Bad("number", 0.5), Bad("none", None), Bad("string", "t")],
                     lambda v: fedustat.kendall_tau_pvalue(v, N), ("release",))
    out += cases_for(e, "n", [b for b in _numbers() if b.label != "huge"] +
                     [Bad("one", 1), Bad("huge-int", 10**12, ok=True)],
                     lambda v: fedustat.kendall_tau_pvalue(exact_tau, v), ("n",))
    for argument in ("alternative", "method"):
        out += cases_for(e, argument, BAD_CHOICES,
                         lambda v, a=argument: fedustat.kendall_tau_pvalue(exact_tau, N,
                                                                         **{a: v}))

    def gini(**kw: Any) -> Any:
        args = {"x": VALUES, "bounds": (0.0, 1.0), "epsilon": 1.0, **SEED, **kw}
        return fedustat.gini_mean_difference(args.pop("x"), **args)

    e = "fedustat.gini_mean_difference"
    out += cases_for(e, "x", bad_columns(VALUES, "booleans", "constant", "mismatched-length"),
                     lambda v: gini(x=v), ("x", "record"))
    out += cases_for(e, "bounds", BAD_BOUNDS, lambda v: gini(bounds=v))
    out += cases_for(e, "epsilon", _budgets("inf"), lambda v: gini(epsilon=v))
    out += cases_for(e, "epsilon", [Bad("tiny-with-huge-bounds", 1e-300)],
                     lambda v: gini(epsilon=v, bounds=(0.0, 1e308)), ("epsilon",))

    def duplicates(**kw: Any) -> Any:
        args = {"x": INTEGERS, "epsilon": 1.0, **SEED, **kw}
        return fedustat.duplicate_pair_ratio(args.pop("x"), **args)

    e = "fedustat.duplicate_pair_ratio"
    out += cases_for(e, "x", bad_columns(INTEGERS, "booleans", "huge-values", "constant",
                                         "mismatched-length"),
                     lambda v: duplicates(x=v), ("x", "record"))
    out += cases_for(e, "epsilon", _budgets("inf"),
                     lambda v: duplicates(epsilon=v))

    def rand(**kw: Any) -> Any:
        args = {"labels_true": CLUSTERS, "labels_pred": CLUSTERS[::-1], "epsilon": 1.0,
                **SEED, **kw}
        return fedustat.rand_score(args.pop("labels_true"), args.pop("labels_pred"), **args)

    e = "fedustat.rand_score"
    # Only the equality of two labels matters: strings, booleans and complex numbers are
    # labels like any other.
    out += cases_for(e, "labels_true",
                     bad_columns(CLUSTERS.astype(float), "booleans", "huge-values", "constant",
                                 "strings", "string-numbers", "complex",
                                 "complex-zero-imaginary", "objects"),
                     lambda v: rand(labels_true=v), ("labels_true", "inconsistent"))
    out += cases_for(e, "epsilon", _budgets("inf"),
                     lambda v: rand(epsilon=v))
    return out


def estimate_cases() -> list[Case]:
    out: list[Case] = []
    auc_kernel = kernels.auc_kernel()
    good = auc_kernel.pack(SCORES, LABELS)

    def run(**kw: Any) -> Any:
        args = {"kernel": auc_kernel, "data": good, "epsilon": 1.0, **SEED, **kw}
        return fedustat.estimate(args.pop("kernel"), args.pop("data"), **args)

    e = "fedustat.estimate"
    out += cases_for(e, "kernel", [Bad("unknown-name", "bogus"), Bad("number", 3),
                                   Bad("none", None), Bad("factory", kernels.auc_kernel)],
                     lambda v: run(kernel=v), ("kernel", "statistic", "bogus"))
    with_nan = good.copy()
    with_nan[2, 0] = math.nan
    not_binary = good.copy()
    not_binary[0, 1] = 2.0
    out += cases_for(e, "data", [
        Bad("nan", with_nan), Bad("empty", np.empty((0, 2))), Bad("1-D", SCORES),
        Bad("three-columns", np.column_stack([good, good[:, :1]])),
        Bad("strings", [["a", "b"]] * N), Bad("complex", good + 1j),
        Bad("labels-not-binary", not_binary), Bad("none", None),
        Bad("one-row", good[:1]), Bad("3-D", good[None])],
        lambda v: run(data=v), ("data", "label", "score"))
    out += cases_for(e, "epsilon", _budgets("inf"), lambda v: run(epsilon=v))
    out += cases_for(e, "delta", _numbers("zero"), lambda v: run(delta=v))
    out += cases_for(e, "protocol", BAD_CHOICES[:3], lambda v: run(protocol=v))
    out += cases_for(e, "batch_size", _sizes("one", "huge", "2**25", "none"),
                     lambda v: run(batch_size=v))
    out += cases_for(e, "batch_size", [Bad("sizes-not-adding-up", [10, 10])],
                     lambda v: run(batch_size=v), ("batch_size", "batch sizes"))
    out += cases_for(e, "clip", [Bad("string", "no")], lambda v: run(clip=v))
    out += cases_for(e, "unknown keyword", [Bad("bogus", 1)], lambda v: run(bogus=v),
                     ("bogus",))

    # By name: every statistic of the catalogue, with data that is no good for it.
    data_for = {"auc": good, "mann-whitney": good, "vus": np.column_stack([SCORES, CLUSTERS]),
                "kendall": np.column_stack([VALUES, OTHER]),
                "kendall-b": np.column_stack([VALUES, OTHER]),
                "gini": VALUES[:, None], "variance": VALUES[:, None],
                "duplicate": INTEGERS[:, None], "renyi2": INTEGERS[:, None],
                "rand": np.column_stack([CLUSTERS, CLUSTERS[::-1]]),
                "ecdf": VALUES, "quantile": VALUES, "median": VALUES,
                "roc": np.column_stack([SCORES, LABELS]), "hl": np.column_stack([PROBS, LABELS])}
    assert set(data_for) == set(catalogue.STATISTICS)
    for name, data in data_for.items():
        spec = catalogue.get(name)
        extra: dict[str, Any] = {}
        if spec.needs_bounds or name in ("ecdf", "quantile", "median", "roc"):
            extra["bounds"] = (0.0, 1.0)

        def by_name(v: Any, name: str = name, extra: dict[str, Any] = extra) -> Any:
            return fedustat.estimate(name, v, epsilon=1.0, **SEED, **extra)

        wrong = np.asarray(data, dtype=float).copy()
        flat = wrong.reshape(wrong.shape[0], -1)
        flat[1, 0] = math.nan
        out += cases_for(f"fedustat.estimate({name!r})", "data",
                         [Bad("nan", flat.reshape(wrong.shape)), Bad("none", None),
                          Bad("empty", np.empty((0, *wrong.shape[1:]))),
                          Bad("too-many-columns", np.column_stack([flat, flat, flat]))],
                         by_name, ("data", *spec.columns, "x", "y_true", "y_score", "y_prob",
                                   "values", "labels"))
    e = "fedustat.estimate('quantile')"
    out += cases_for(e, "bounds", BAD_BOUNDS[:4],
                     lambda v: fedustat.estimate("quantile", VALUES, epsilon=1.0, bounds=v,
                                                 **SEED))
    # levels=None asks for the default levels.
    out += cases_for(e, "levels", [Bad(b.label, b.value, b.label == "none") for b in BAD_LEVELS],
                     lambda v: fedustat.estimate("quantile", VALUES, epsilon=1.0,
                                                 bounds=(0, 1), levels=v, **SEED))
    e = "fedustat.estimate('gini')"
    out += cases_for(e, "bounds", BAD_BOUNDS[:4],
                     lambda v: fedustat.estimate("gini", VALUES[:, None], epsilon=1.0,
                                                 bounds=v, **SEED))
    hl_data = np.column_stack([PROBS, LABELS])
    for key, value in (("thresholds", [0.2, 0.5, 0.8]), ("bounds", (0.0, 1.0)),
                       ("levels", [0.5])):
        out += cases_for("fedustat.estimate('hl')", key, [Bad("not-taken", value)],
                         lambda v, key=key: fedustat.estimate("hl", hl_data, epsilon=1.0,
                                                              **{key: v}, **SEED))
    out += cases_for("fedustat.estimate('roc')", "levels", [Bad("not-taken", [0.5])],
                     lambda v: fedustat.estimate("roc", np.column_stack([SCORES, LABELS]),
                                                 epsilon=1.0, bounds=(0, 1), levels=v,
                                                 **SEED))
    out += cases_for("fedustat.estimate('ecdf')", "delta", [Bad("positive", 1e-6)],
                     lambda v: fedustat.estimate("ecdf", VALUES, epsilon=1.0,
                                                 bounds=(0, 1), delta=v, **SEED))
    out += cases_for("fedustat.estimate('bogus')", "kernel", [Bad("unknown-name", "bogus")],
                     lambda v: fedustat.estimate(v, VALUES, epsilon=1.0),
                     ("bogus", "statistic"))
    return out


def curve_cases() -> list[Case]:
    out: list[Case] = []
    grid = {"bounds": (0.0, 1.0), "grid_points": 32}

    def ecdf(**kw: Any) -> Any:
        args = {"x": VALUES, "epsilon": 1.0, **grid, **SEED, **kw}
        return fedustat.ecdf(args.pop("x"), **args)

    e = "fedustat.ecdf"
    out += cases_for(e, "x", bad_columns(VALUES, "booleans", "huge-values", "constant",
                                         "one-record", "mismatched-length"),
                     lambda v: ecdf(x=v), ("x",))
    out += cases_for(e, "epsilon", _budgets("inf"), lambda v: ecdf(epsilon=v))
    out += cases_for(e, "bounds", BAD_BOUNDS[:10], lambda v: ecdf(bounds=v))
    out += cases_for(e, "thresholds", BAD_THRESHOLDS,
                     lambda v: ecdf(bounds=None, thresholds=v), ("thresholds", "bounds"))
    out += cases_for(e, "grid_points", _sizes(), lambda v: ecdf(grid_points=v))
    out += cases_for(e, "method", BAD_CHOICES[:3], lambda v: ecdf(method=v))
    out += cases_for(e, "protocol", BAD_CHOICES[:3], lambda v: ecdf(protocol=v))
    for name in ("ecdf-secagg", "ecdf-fss"):
        out += cases_for(e, "protocol", [Bad(f"{name}-at-epsilon-inf", name)],
                         lambda v: ecdf(protocol=v, epsilon=math.inf), ("protocol",))
        out += cases_for(e, "grid_points", [Bad(f"2**20-with-{name}", 2**20)],
                         lambda v, name=name: ecdf(protocol=name, grid_points=v))
    out += cases_for(e, "thresholds", [Bad("with-bounds-too", [0.2, 0.5])],
                     lambda v: ecdf(thresholds=v), ("thresholds", "bounds"))

    def quantile(**kw: Any) -> Any:
        args = {"x": VALUES, "q": [0.25, 0.5], "epsilon": 1.0, **grid, **SEED, **kw}
        return fedustat.quantile(args.pop("x"), args.pop("q"), **args)

    e = "fedustat.quantile"
    out += cases_for(e, "x", bad_columns(VALUES, "booleans", "huge-values", "constant",
                                         "one-record", "mismatched-length")[:12],
                     lambda v: quantile(x=v), ("x",))
    out += cases_for(e, "q", BAD_LEVELS, lambda v: quantile(q=v))
    out += cases_for(e, "epsilon", _budgets("inf"),
                     lambda v: quantile(epsilon=v))
    out += cases_for(e, "bounds", BAD_BOUNDS[:8], lambda v: quantile(bounds=v))
    out += cases_for(e, "grid_points", _sizes(), lambda v: quantile(grid_points=v))
    out += cases_for(e, "grid_points", [Bad("large-grid", 2**17)],
                     lambda v: quantile(grid_points=v))
    out += cases_for(e, "method", BAD_CHOICES[:3], lambda v: quantile(method=v))

    def median(**kw: Any) -> Any:
        args = {"x": VALUES, "epsilon": 1.0, **grid, **SEED, **kw}
        return fedustat.median(args.pop("x"), **args)

    e = "fedustat.median"
    out += cases_for(e, "epsilon", _budgets("inf"),
                     lambda v: median(epsilon=v))
    out += cases_for(e, "thresholds", BAD_THRESHOLDS[:5],
                     lambda v: median(bounds=None, thresholds=v))

    def roc(**kw: Any) -> Any:
        args = {"y_true": LABELS, "y_score": SCORES, "epsilon": 1.0, **grid, **SEED, **kw}
        return fedustat.roc_curve(args.pop("y_true"), args.pop("y_score"), **args)

    e = "fedustat.roc_curve"
    out += cases_for(e, "y_true", bad_labels("booleans"), lambda v: roc(y_true=v),
                     ("y_true", "label"))
    out += cases_for(e, "y_score", bad_columns(SCORES, "booleans", "huge-values", "constant")[:11],
                     lambda v: roc(y_score=v), ("y_score", "score"))
    out += cases_for(e, "epsilon", _budgets("inf"),
                     lambda v: roc(epsilon=v))
    out += cases_for(e, "grid_points", _sizes()[:8], lambda v: roc(grid_points=v))
    out += cases_for(e, "estimator", BAD_CHOICES[:3], lambda v: roc(estimator=v))

    def hl(**kw: Any) -> Any:
        args = {"y_true": LABELS, "y_prob": PROBS, "epsilon": 1.0, **SEED, **kw}
        return fedustat.hosmer_lemeshow(args.pop("y_true"), args.pop("y_prob"), **args)

    e = "fedustat.hosmer_lemeshow"
    out += cases_for(e, "y_true", bad_labels("booleans", "one-class"), lambda v: hl(y_true=v),
                     ("y_true", "label"))
    out += cases_for(e, "y_prob", [*bad_columns(PROBS, "booleans", "constant")[:12],
                                   Bad("above-one", PROBS + 1.0)],
                     lambda v: hl(y_prob=v), ("y_prob",))
    out += cases_for(e, "epsilon", _budgets("inf"), lambda v: hl(epsilon=v))
    out += cases_for(e, "n_groups", [*_sizes(), Bad("two", 2), Bad("more-than-records", 50)],
                     lambda v: hl(n_groups=v))
    out += cases_for(e, "n_groups", [Bad("more-groups-than-records", 50)],
                     lambda v: hl(n_groups=v, y_true=LABELS[:6], y_prob=PROBS[:6]))
    out += cases_for(e, "gamma", _numbers(), lambda v: hl(gamma=v))
    out += cases_for(e, "gamma", [Bad("grid-above-the-cap", 2.0**-30), Bad("above-one", 2.0)],
                     lambda v: hl(gamma=v))
    out += cases_for(e, "thresholds", [Bad("not-taken", [0.3, 0.6])],
                     lambda v: hl(thresholds=v))

    def cumsum(**kw: Any) -> Any:
        args = {"x": LABELS, "epsilon": 1.0, **SEED, **kw}
        return fedustat.cumsum(args.pop("x"), **args)

    e = "fedustat.cumsum"
    out += cases_for(e, "x", bad_columns(LABELS.astype(float), "booleans", "huge-values",
                                         "constant", "one-record", "mismatched-length"),
                     lambda v: cumsum(x=v), ("x",))
    out += cases_for(e, "bounds", BAD_BOUNDS[:10], lambda v: cumsum(bounds=v))
    out += cases_for(e, "epsilon", _budgets(), lambda v: cumsum(epsilon=v))
    return out


def other_function_cases() -> list[Case]:
    out: list[Case] = []
    e = "fedustat.advise"
    out += cases_for(e, "n", _sizes("huge", "2**25"),
                     lambda v: fedustat.advise("kendall", n=v, epsilon=1.0), ("n",))
    out += cases_for(e, "epsilon", _budgets(),
                     lambda v: fedustat.advise("kendall", n=1000, epsilon=v))
    out += cases_for(e, "statistic", BAD_CHOICES, lambda v: fedustat.advise(v, n=1000,
                                                                           epsilon=1.0),
                     ("statistic", "bogus"))
    release = fedustat.ecdf(VALUES, epsilon=1.0, bounds=(0.0, 1.0), grid_points=16, rng=0)
    e = "fedustat.isotonic_projection"
    out += cases_for(e, "curve", bad_columns(release.curve)[:11],
                     lambda v: fedustat.isotonic_projection(v))
    out += cases_for(e, "subset", [Bad("out-of-range", [0, 99]), Bad("strings", ["a"]),
                                   Bad("2-D", [[0, 1]]), Bad("fraction", [0.5]),
                                   Bad("mask-of-another-length", [True, False])],
                     lambda v: fedustat.isotonic_projection(release.release, subset=v))
    e = "ECDFResult.confidence_interval"
    out += cases_for(e, "confidence_level", _numbers("tiny"), release.confidence_interval)
    e = "fedustat.smooth"
    out += cases_for(e, "curve", [Bad("array", release.curve), Bad("none", None)],
                     lambda v: fedustat.smooth(v), ("curve",))
    out += _plotting_cases(release)
    return out


def _plotting_cases(ecdf_release: Any) -> list[Case]:
    """The plotting helpers (the ``plot`` extra): a value that is not the release they
    draw is refused naming the argument; no figure is a release, so none may end so."""
    import matplotlib

    matplotlib.use("Agg")
    auc = fedustat.roc_auc_score(LABELS, SCORES, epsilon=1.0, rng=0)
    not_releases = [Bad("array", np.linspace(0.0, 1.0, 5)), Bad("none", None),
                    Bad("string", "roc"), Bad("estimate", auc)]
    out = cases_for("fedustat.plot_roc", "curve", not_releases,
                    lambda v: fedustat.plot_roc(v))
    out += cases_for("fedustat.plot_ecdf", "result", not_releases[:3],
                     lambda v: fedustat.plot_ecdf(v))
    out += cases_for("fedustat.plot_ecdf", "confidence_level", _numbers()[:6],
                     lambda v: fedustat.plot_ecdf(ecdf_release, confidence_level=v))
    out += cases_for("fedustat.plot_estimates", "estimates",
                     [Bad("empty", []), Bad("floats", [0.5, 0.6]), Bad("none", [None])],
                     lambda v: fedustat.plot_estimates(v))
    out += cases_for("fedustat.plot_estimates", "labels",
                     [Bad("too-few", []), Bad("too-many", ["a", "b"])],
                     lambda v: fedustat.plot_estimates([auc], labels=v))
    return out


# ------------------------------------------------------------------ protocols by registry


#: A kernel each protocol computes, its data and the parameters it needs.
PROTOCOL_BASES: dict[str, tuple[Any, np.ndarray, dict[str, Any]]] = {}


def _protocol_bases() -> dict[str, tuple[Any, np.ndarray, dict[str, Any]]]:
    auc_data = kernels.auc_kernel().pack(SCORES, LABELS)
    gini = kernels.gini_kernel((0.0, 1.0))
    integer_scores = kernels.auc_kernel().pack(np.round(SCORES * 15), LABELS)
    fedauc = (kernels.auc_kernel(), auc_data, {"n_clients": 3})
    return {
        "central-laplace": (kernels.auc_kernel(), auc_data, {}),
        "exact": (kernels.auc_kernel(), auc_data, {}),
        "ldp-quantized": (kernels.auc_kernel(), auc_data, {"k": 8, "bounds": (0.0, 1.0)}),
        "ldp-ghazi": (gini, VALUES[:, None], {"k": 8}),
        "ghazi-shuffle": (gini, VALUES[:, None], {"k": 8, "frac_bits": 8}),
        "ldp-tree": (kernels.auc_kernel(), integer_scores, {"d": 16}),
        "pairs-2pc": (kernels.auc_kernel(), auc_data, {"bounds": (0.0, 1.0)}),
        "umpc": (kernels.auc_kernel(), auc_data, {"bounds": (0.0, 1.0)}),
        "fedauc-rr": fedauc, "fedauc-laplace": fedauc, "fedauc-laplace-local": fedauc,
        "fedauc-laplace-global": fedauc, "fedauc-adaptive": fedauc, "fedauc-gaussian": fedauc,
    }


def _numeric_parameters(name: str) -> list[str]:
    hints = typing.get_type_hints(registry.factory(name))
    keys = []
    for key in registry.parameters(name):
        args = set(typing.get_args(hints.get(key))) or {hints.get(key)}
        if args - {type(None)} and args - {type(None)} <= {int, float}:
            keys.append(key)
    return keys


#: Bad values of a protocol's numeric parameter (each its own case).
PARAMETER_BADS = [Bad("nan", math.nan), Bad("inf", math.inf), Bad("negative", -1),
                  Bad("zero", 0), Bad("huge", 10**9), Bad("string", "abc"), Bad("bool", True),
                  Bad("complex", 1 + 1j)]


#: (bad value, parameter) pairs that are valid: a seed of 0, a large cap or pruning
#: constant, and ghazi-shuffle's integer encoding (frac_bits=0, whose encoding error its
#: stated error then carries).
VALID_PARAMETER_VALUES = {
    ("zero", "projection_seed"), ("huge", "projection_seed"), ("huge", "max_evaluations"),
    ("huge", "max_pairs"), ("huge", "max_report_bits"), ("huge", "a"), ("zero", "frac_bits"),
    # Planning counts and tolerances: a larger value plans for more parties, or bounds
    # the Lipschitz constant or the averaging error more loosely (with k given, unused).
    ("huge", "n_parties"), ("huge", "lipschitz"), ("huge", "avg_tol"),
}
def protocol_cases() -> list[Case]:
    out: list[Case] = []
    bases = _protocol_bases()
    assert set(bases) == {entry.name for entry in registry.available()}
    for name, (kernel, data, params) in bases.items():
        delta = 1e-5 if name == "fedauc-gaussian" else 0.0

        def run(name: str = name, kernel: Any = kernel, data: np.ndarray = data,
                params: dict[str, Any] = params, delta: float = delta, **kw: Any) -> Any:
            budget = {"epsilon": math.inf if name == "exact" else 1.0, "delta": delta}
            for key in ("epsilon", "delta"):
                if key in kw:
                    budget[key] = kw.pop(key)
            protocol = registry.make(name, kernel, **budget, **{**params, **kw})
            return simulate(protocol, data, rng=0)

        e = f"registry.make({name!r})"
        out += cases_for(e, "epsilon", _budgets("inf"),
                         lambda v, run=run: run(epsilon=v))
        out += cases_for(e, "delta", _numbers("zero", "tiny"),
                         lambda v, run=run: run(delta=v))
        for key in [k for k in _numeric_parameters(name) if k != "precision"]:
            # Zero and a huge value are valid for some parameters (a seed, a cap); the
            # others must be refused.
            bads = [Bad(b.label, b.value, (b.label, key) in VALID_PARAMETER_VALUES)
                    for b in PARAMETER_BADS]
            out += cases_for(e, key, bads, lambda v, key=key, run=run: run(**{key: v}))
        if registry.takes(name, "bounds"):
            out += cases_for(e, "bounds", BAD_BOUNDS[:5] + BAD_BOUNDS[10:11],
                             lambda v, run=run: run(bounds=v))
        if registry.takes(name, "precision"):
            out += cases_for(e, "precision",
                             [*_numbers()[:8], Bad("wider-than-the-bounds", 10.0),
                              Bad("equal-to-the-width", 1.0)],
                             lambda v, run=run: run(precision=v))
        out += cases_for(e, "unknown parameter", [Bad("bogus", 1)],
                         lambda v, run=run: run(bogus=v), ("bogus",))
    for name in ("ecdf-secagg", "ecdf-fss"):
        def curve(name: str = name, **kw: Any) -> Any:
            args = {"epsilon": 1.0, "bounds": (0.0, 1.0), "precision": 1 / 16, **kw}
            return simulate(registry.make_curve(name, **args), VALUES[:, None], rng=0)

        e = f"registry.make_curve({name!r})"
        out += cases_for(e, "epsilon", _budgets("inf"),
                         lambda v, curve=curve: curve(epsilon=v))
        out += cases_for(e, "precision", [*_numbers()[:8], Bad("wider-than-the-bounds", 10.0),
                                          Bad("grid-above-the-cap", 1e-9)],
                         lambda v, curve=curve: curve(precision=v))
        out += cases_for(e, "bounds", BAD_BOUNDS[:5], lambda v, curve=curve: curve(bounds=v))
        out += cases_for(e, "thresholds", BAD_THRESHOLDS[:7],
                         lambda v, curve=curve: curve(bounds=None, precision=None,
                                                      thresholds=v))
        out += cases_for(e, "n_servers", _sizes("huge")[:8],
                         lambda v, curve=curve: curve(n_servers=v))
    return out


# ------------------------------------------------------------------ the command line


def cli(*argv: str) -> Callable[[], CliRun]:
    """``main(argv)`` in this process: a CliRun, or CliRefusalError with the error line."""
    def call() -> CliRun:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(argv))
            except SystemExit as exc:
                if isinstance(exc.code, str):   # the one-line error of a command
                    raise CliRefusalError(exc.code, 1, err.getvalue()) from None
                lines = err.getvalue().strip().splitlines()   # argparse: usage, then error
                raise CliRefusalError(lines[-1] if lines else "", exc.code,
                                 err.getvalue()) from None
        return CliRun(status, out.getvalue(), err.getvalue())
    return call


def cli_cases(tmp: Path) -> list[Case]:
    csv = tmp / "scores.csv"
    csv.write_text("score,label,x\n" + "".join(
        f"{s:.4f},{y},{x:.4f}\n" for s, y, x in zip(SCORES, LABELS, VALUES, strict=True)))
    base = ["estimate", "--statistic", "auc", "--file", str(csv), "--columns", "score,label",
            "--seed", "0", "--format", "json"]
    curve = ["estimate", "--file", str(csv), "--columns", "x", "--seed", "0",
             "--format", "json", "--bounds", "0,1"]
    out: list[Case] = []

    def option(entry: str, flag: str, values: list[Bad], argv: list[str],
               names: tuple[str, ...] | None = None) -> None:
        # The message names the option, or the argument it sets ("epsilon must be > 0").
        named = names or (flag, flag.lstrip("-").replace("-", "_"))
        for bad in values:
            out.append(Case(entry, flag, bad.label, cli(*argv, f"{flag}={bad.value}"), named,
                            bad.ok))

    numbers = [Bad("nan", "nan"), Bad("negative", "-1"), Bad("zero", "0"),
               Bad("word", "abc"), Bad("inf", "inf"), Bad("tiny", "1e-300"),
               Bad("huge", "1e308"), Bad("complex", "1+1j")]
    ends = [Bad("smallest", f"{SMALLEST_EPSILON!r}", ok=True),
            Bad("largest", f"{LARGEST_EPSILON!r}", ok=True)]
    e = "fedustat estimate"
    option(e, "--epsilon", numbers + ends, base)
    option(e, "--delta", [b for b in numbers if b.label != "zero"] + [Bad("positive", "1e-6")],
           base)
    option(e, "--seed", [Bad("negative", "-1"), Bad("word", "abc"), Bad("fraction", "1.5")],
           base)
    option(e, "--protocol", [Bad("unknown", "bogus")], base)
    option(e, "--bounds", [Bad("reversed", "1,0"), Bad("nan", "0,nan"), Bad("one", "1"),
                           Bad("word", "a,b"), Bad("huge", "0,1e308")],
           ["estimate", "--statistic", "gini", "--file", str(csv), "--columns", "x",
            "--seed", "0", "--format", "json"])
    option(e, "--precision", [Bad("word", "abc"), Bad("zero", "0"), Bad("negative", "-1"),
                              Bad("wider-than-the-bounds", "10")],
           [*base, "--protocol", "umpc", "--bounds", "0,1"])
    option(e, "--param", [Bad("not-key-value", "k"), Bad("unknown", "bogus=1"),
                          Bad("k-huge", "k=1000000000"), Bad("k-word", "k=abc"),
                          Bad("k-negative", "k=-1"), Bad("k-nan", "k=nan")],
           [*base, "--protocol", "ldp-quantized", "--bounds", "0,1"], ("--param", "k", "bogus"))
    for statistic in ("ecdf", "quantile", "median"):
        option(f"{e} --statistic {statistic}", "--param",
               [Bad("grid_points-2**22", "grid_points=4194304"),
                Bad("grid_points-1e9", "grid_points=1000000000"),
                Bad("grid_points-word", "grid_points=abc"),
                Bad("grid_points-one", "grid_points=1"),
                Bad("thresholds-unsorted", "thresholds=0.5,0.1")],
               [*curve, "--statistic", statistic], ("grid_points", "thresholds", "--param"))
    option(e, "--param", [Bad("levels-1e5", "levels=" + ",".join(["0.5"] * 10**5)),
                          Bad("levels-zero", "levels=0"), Bad("levels-word", "levels=a")],
           [*curve, "--statistic", "quantile"], ("levels", "--param"))
    option(f"{e} --statistic quantile", "--bounds", [Bad("reversed", "1,0")],
           [*curve, "--statistic", "quantile"])
    option(e, "--file", [Bad("missing", str(tmp / "none.csv")), Bad("directory", str(tmp))],
           ["estimate", "--statistic", "auc", "--columns", "score,label"],
           ("--file", "no such file", "none.csv"))
    option(e, "--columns", [Bad("unknown", "bogus,label"), Bad("one", "score")],
           ["estimate", "--statistic", "auc", "--file", str(csv), "--seed", "0"],
           ("--columns", "bogus", "column"))
    option(e, "--statistic", [Bad("unknown", "bogus")], ["estimate"])
    option(e, "--workers", [Bad("without-engine", "2")], base, ("--workers", "--engine"))

    e = "fedustat advise"
    advise = ["advise", "--statistic", "kendall", "--epsilon", "1"]
    option(e, "--n", [Bad("zero", "0"), Bad("negative", "-5"), Bad("word", "abc")], advise)
    option(e, "--epsilon", numbers[:5], ["advise", "--statistic", "kendall", "--n", "1000"])
    e = "fedustat compare"
    compare = ["compare", "--statistic", "auc", "--no-progress", "--out", str(tmp / "cmp")]
    option(e, "--repetitions", [Bad("zero", "0"), Bad("negative", "-1")], compare)
    option(e, "--epsilons", [Bad("word", "a,b"), Bad("negative", "-1"), Bad("nan", "nan"),
                             Bad("below-the-range", "1e-7,1"), Bad("above-the-range", "2000")],
           compare)
    option(e, "--grid-points", [Bad("1e9", "1000000000"), Bad("one", "1")],
           ["compare", "--statistic", "ecdf", "--no-progress", "--out", str(tmp / "cmp")])
    option(e, "--seed", [Bad("negative", "-1")], compare)
    e = "fedustat reproduce"
    option(e, "--seed", [Bad("negative", "-1")], ["reproduce", "umpc-table"])
    out.append(Case(e, "NAME", "unknown", cli("reproduce", "bogus"), ("bogus", "experiment"),
                    False))
    e = "fedustat budget"
    option(e, "--epsilon", numbers[:5], ["budget", str(tmp / "budget.json")])
    e = "fedustat protocols"
    option(e, "--format", [Bad("unknown", "xml")], ["protocols"])
    e = "fedustat certs"
    option(e, "--parties", [Bad("zero", "0"), Bad("word", "abc")],
           ["certs", "--out", str(tmp / "certs")])
    e = "fedustat serve"
    option(e, "--parties", [Bad("zero", "0")],
           ["serve", "--protocol", "central-laplace", "--epsilon", "1", "--certs",
            str(tmp / "none")])
    option(e, "--epsilon", [Bad("nan", "nan"), Bad("negative", "-1")],
           ["serve", "--parties", "2", "--protocol", "central-laplace", "--statistic", "auc",
            "--certs", str(tmp / "none"), "--timeout", "1"])
    option(e, "--seed", [Bad("negative", "-1")],
           ["serve", "--parties", "2", "--protocol", "central-laplace", "--statistic", "auc",
            "--epsilon", "1", "--certs", str(tmp / "none"), "--timeout", "1"])
    return out


# ------------------------------------------------------------------ the inventory


def all_cases(tmp: Path) -> list[Case]:
    cases = [*u_statistic_cases(), *estimate_cases(), *curve_cases(),
             *other_function_cases(), *protocol_cases(), *cli_cases(tmp)]
    return cases


FAILURES = ("traceback", "hang", "invalid release", "silently accepted",
            "refusal not naming the argument", "message of several lines",
            "refusal without an error line")


def test_the_inventory_covers_every_public_entry_point(tmp_path: Path) -> None:
    cases = all_cases(tmp_path)
    assert len(cases) >= 600
    entries = {c.entry for c in cases}
    functions = {f"fedustat.{name}" for name in fedustat.__all__
                 if callable(getattr(fedustat, name))
                 and not isinstance(getattr(fedustat, name), type)}
    assert functions <= entries, functions - entries
    assert {f"registry.make({e.name!r})" for e in registry.available()} <= entries
    assert {f"registry.make_curve({e.name!r})" for e in registry.available_curves()} <= entries
    assert {f"fedustat.estimate({name!r})" for name in catalogue.STATISTICS} <= entries
    commands = {"estimate", "advise", "compare", "reproduce", "budget", "protocols", "certs",
                "serve"}
    assert {f"fedustat {c}" for c in commands} <= entries
    assert len({c.id for c in cases}) == len(cases), "case ids must be unique"


def test_every_bad_input_ends_in_a_release_or_a_named_refusal(tmp_path: Path) -> None:
    results = [(case, *outcome(case)) for case in all_cases(tmp_path)]
    counts = Counter(kind for _, kind, _ in results)
    print(f"\nfuzz inventory: {len(results)} cases: "
          + ", ".join(f"{kind} {counts[kind]}" for kind in sorted(counts)))
    failed = [f"{case.id}: {kind}: {detail}"[:400] for case, kind, detail in results
              if kind in FAILURES]
    assert set(counts) <= {"release", "refused", *FAILURES}
    assert not failed, f"{len(failed)} of {len(results)} case(s) failed ({dict(counts)}):\n" \
        + "\n".join(failed)


@pytest.mark.parametrize(("argv", "option"), [
    (["estimate", "--statistic", "auc", "--seed", "-1"], "--seed"),
    (["estimate", "--statistic", "ecdf", "--param", "grid_points=4194304"], "grid_points"),
])
def test_in_a_real_process(argv: list[str], option: str) -> None:
    done = subprocess.run([sys.executable, "-m", "fedustat.cli", *argv], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and option in lines[0], lines
