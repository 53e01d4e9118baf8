"""Input checks shared by the public API.

Every check raises ``ValueError`` (or ``TypeError``) with a message that names the
offending argument and says how to fix it, so bad input never turns into a silent
wrong number (ARCHITECTURE.md, principle 6).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

RandomLike = int | np.random.Generator | np.random.SeedSequence | None

#: The smallest privacy budget a release takes. Below it the noise is more than a million
#: times the statistic's sensitivity, so the release says nothing about the data, and
#: toward 1e-150 the noise's variance (sensitivity / epsilon)^2 overflows float64.
SMALLEST_EPSILON = 1e-6
#: The largest finite privacy budget a release takes. Above it the guarantee protects
#: nothing (e^epsilon > 10^434) and the calibrations that compute e^epsilon overflow
#: float64 (beyond epsilon = 709.8); ``math.inf`` asks for the exact value instead.
LARGEST_EPSILON = 1000.0


class InputRangeError(ValueError, OverflowError):
    """An input that makes a value too large for the number format it must fit (a ring
    of ``Z_{2^l}``, a float64): a ``ValueError`` (the caller's input to change, its
    message names it) and, as it always was, an ``OverflowError``."""


def _refuse_text(value: Any, name: str, expected: str) -> None:
    # float("1") == 1.0 would otherwise be taken silently: a number given as text is a
    # mistake in the caller's code (or an unparsed configuration), not a number.
    if isinstance(value, str | bytes):
        raise TypeError(f"{name} must be {expected}, got {value!r} (text, not a number); "
                        f"pass a number such as {name}=1.0")


def _check_seed(rng: Any) -> None:
    if isinstance(rng, bool | np.bool_):
        raise TypeError(f"rng must be None, a non-negative integer seed or a "
                        f"numpy.random.Generator, got the boolean {rng!r}")
    if isinstance(rng, int | np.integer) and rng < 0:
        raise ValueError(f"rng must be a non-negative integer seed, got {int(rng)} (NumPy "
                         "seeds are >= 0)")


def as_rng(rng: RandomLike) -> np.random.Generator:
    """Turn a seed, a SeedSequence, a Generator or None into a ``numpy.random.Generator``."""
    if isinstance(rng, np.random.Generator):
        return rng
    _check_seed(rng)
    if rng is None or isinstance(rng, int | np.integer | np.random.SeedSequence):
        return np.random.default_rng(rng)
    raise TypeError(
        f"rng must be None, an integer seed or a numpy.random.Generator, got {type(rng).__name__}"
    )


def as_seed_sequence(rng: RandomLike) -> np.random.SeedSequence:
    """One ``SeedSequence`` to spawn independent streams from (a Generator seeds a fresh one)."""
    if isinstance(rng, np.random.SeedSequence):
        return rng
    if isinstance(rng, np.random.Generator):
        # Derive the seed from the Generator so runs stay reproducible.
        return np.random.SeedSequence(int(rng.integers(0, 2**63 - 1)))
    _check_seed(rng)
    if rng is None or (isinstance(rng, int | np.integer) and not isinstance(rng, bool)):
        return np.random.SeedSequence(rng)
    raise TypeError("rng must be None, an integer seed, a SeedSequence or a "
                    f"numpy.random.Generator, got {rng!r}")


def as_float_array(values: Any, name: str, *, ndim: int | Sequence[int] = 1) -> np.ndarray:
    """Convert to a finite float64 array with the given number of dimensions.

    Accepts lists, NumPy arrays and pandas/polars columns (anything ``np.asarray`` takes).
    Complex numbers (whose imaginary part a conversion would drop) and text (numbers kept
    as strings) are refused.
    """
    _refuse_non_real(values, name)
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric; could not convert it to floats ({exc})") from exc
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if arr.ndim not in allowed:
        raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} dimension(s), "
                         f"got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; at least one value is needed")
    if not np.all(np.isfinite(arr)):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise ValueError(f"{name} contains {bad} NaN or infinite value(s); "
                         "remove or impute them before computing the statistic")
    return arr


def _refuse_non_real(values: Any, name: str) -> None:
    """Complex values and strings, refused with their argument's name (a float conversion
    would drop an imaginary part silently, or parse text that should have been numbers)."""
    if isinstance(values, np.ndarray):
        kind = values.dtype.kind
    elif isinstance(values, str | bytes):
        kind = "U"
    else:
        try:
            kind = np.asarray(values).dtype.kind
        except (TypeError, ValueError):  # ragged input: the conversion below says so
            return
    if kind == "c":
        raise TypeError(f"{name} contains complex numbers; give real numbers (a complex "
                        "value's imaginary part would be dropped)")
    if kind in "USa":
        raise TypeError(f"{name} must be numeric, got text (numbers kept as strings?); "
                        "convert it to numbers first (e.g. pandas.to_numeric)")


def as_int_array(values: Any, name: str, *, ndim: int = 1) -> np.ndarray:
    """Convert to an int64 array, refusing non-integral floats."""
    arr = as_float_array(values, name, ndim=ndim)
    as_int = arr.astype(np.int64)
    if not np.array_equal(as_int, arr):
        raise ValueError(f"{name} must contain whole numbers (category codes), got non-integers")
    return as_int


def as_binary_labels(values: Any, name: str = "y_true", *, require_both: bool = True) -> np.ndarray:
    """Labels as an int8 array of 0/1. {-1, 1}, booleans and {0, 1} are accepted."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; at least one label is needed")
    if arr.dtype.kind == "c":
        raise TypeError(f"{name} contains complex numbers; labels must be 0/1, -1/1 or "
                        "booleans")
    if arr.dtype == bool:
        labels = arr.astype(np.int8)
    else:
        try:
            num = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{name} must be binary (0/1, -1/1 or booleans); "
                             f"got values that are not numbers ({exc})") from exc
        if not np.all(np.isfinite(num)):
            raise ValueError(f"{name} contains NaN or infinite labels")
        values_seen = set(np.unique(num).tolist())
        if values_seen <= {0.0, 1.0}:
            labels = num.astype(np.int8)
        elif values_seen <= {-1.0, 1.0}:
            labels = (num > 0).astype(np.int8)
        else:
            shown = sorted(values_seen)[:5]
            raise ValueError(f"{name} must be binary (0/1, -1/1 or booleans); "
                             f"found values {shown}")
    if require_both:
        n_pos = int(labels.sum())
        if n_pos == 0 or n_pos == labels.size:
            which = "positive" if n_pos == 0 else "negative"
            raise ValueError(f"{name} has no {which} example; the statistic needs both classes")
    return labels


def check_consistent_length(**arrays: Any) -> int:
    """All arrays must have the same first dimension; returns it."""
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise ValueError(f"inputs have inconsistent lengths: {shown}")
    return next(iter(lengths.values()))


def _refuse_bool(value: Any, name: str, expected: str) -> None:
    # float(True) == 1.0 would otherwise be taken silently.
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be {expected}, got the boolean {value!r}")


def _number(value: Any, name: str, expected: str) -> float:
    """``value`` as a float; booleans, text and what ``float`` refuses are TypeErrors that
    name the argument and what was expected."""
    _refuse_bool(value, name, expected)
    _refuse_text(value, name, expected)
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be {expected}, got {value!r}") from exc


def check_epsilon(epsilon: Any, name: str = "epsilon", *, allow_inf: bool = False) -> float:
    """A privacy budget: a positive number (``inf`` only where non-private runs make sense).

    Booleans and strings are refused: ``epsilon=True`` or ``epsilon="1"`` is a mistake,
    not a budget of 1.
    """
    eps = _number(epsilon, name, "a positive number")
    if math.isnan(eps) or eps <= 0:
        raise ValueError(f"{name} must be > 0, got {epsilon!r}")
    if math.isinf(eps) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {epsilon!r}")
    return eps


def check_budget(epsilon: Any, name: str = "epsilon", *, allow_inf: bool = False) -> float:
    """A release's privacy budget: :func:`check_epsilon`, and a finite budget within
    [:data:`SMALLEST_EPSILON`, :data:`LARGEST_EPSILON`] (outside it the release is noise
    only, or protects nothing, and its calibration leaves float64).

    Public entry points (the one-call functions, ``estimate``, the registry's
    constructors, the command line) check the budget here, before anything runs.
    """
    eps = check_epsilon(epsilon, name, allow_inf=allow_inf)
    if eps < SMALLEST_EPSILON:
        raise ValueError(
            f"{name}={epsilon!r} is below {SMALLEST_EPSILON:g}, the smallest budget a release "
            "takes: the noise would exceed a million times the statistic's sensitivity (the "
            "release would say nothing, and toward 1e-150 its variance overflows float64); "
            f"use {name} >= {SMALLEST_EPSILON:g}")
    if math.isfinite(eps) and eps > LARGEST_EPSILON:
        raise ValueError(
            f"{name}={epsilon!r} is above {LARGEST_EPSILON:g}, the largest finite budget a "
            "release takes: it protects nothing (e^epsilon > 10^434) and the calibrations "
            f"overflow float64; use {name} <= {LARGEST_EPSILON:g}, or {name}=math.inf for "
            "the exact value")
    return eps


def check_positive_float(value: Any, name: str) -> float:
    """A finite number > 0 (booleans and strings refused)."""
    x = _number(value, name, "a positive number")
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return x


def check_delta(delta: Any, name: str = "delta") -> float:
    """A failure probability in [0, 1) (booleans and strings refused)."""
    d = _number(delta, name, "a number in [0, 1)")
    if not 0.0 <= d < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {delta!r}")
    return d


def check_positive_int(value: Any, name: str, *, minimum: int = 1) -> int:
    """An integer >= minimum (bools refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_probability(value: Any, name: str, *, open_left: bool = False,
                      open_right: bool = False) -> float:
    """A number in [0, 1] (optionally excluding an end; booleans and strings refused)."""
    p = _number(value, name, "a number in [0, 1]")
    lo_ok = p > 0 if open_left else p >= 0
    hi_ok = p < 1 if open_right else p <= 1
    if math.isnan(p) or not (lo_ok and hi_ok):
        lo = "(" if open_left else "["
        hi = ")" if open_right else "]"
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {value!r}")
    return p


#: The largest magnitude of a public bound. Beyond it the width, divided by the smallest
#: budget (the noise scale) and squared (its variance; the variance kernel), overflows
#: float64 (which ends near 1.8e308).
LARGEST_BOUND = 1e100


def check_bounds_pair(bounds: Any, name: str = "bounds") -> tuple[float, float]:
    """Public bounds ``(lo, hi)``: two real numbers (not text, booleans or complex), finite,
    ``lo < hi``, each within +-:data:`LARGEST_BOUND`."""
    pair = f"{name} must be a pair (lower, upper) of real numbers, got {bounds!r}"
    try:
        lo_raw, hi_raw = bounds
    except (TypeError, ValueError):
        raise TypeError(pair) from None
    for raw in (lo_raw, hi_raw):
        if isinstance(raw, str | bytes | bool | np.bool_) or np.iscomplexobj(raw):
            raise TypeError(pair)
    try:
        lo, hi = float(lo_raw), float(hi_raw)
    except (TypeError, ValueError):
        raise TypeError(pair) from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"{name} must be finite with lower < upper, got {bounds!r}; give "
                         "the public range of the values")
    if max(abs(lo), abs(hi)) > LARGEST_BOUND:
        raise ValueError(f"{name} {bounds!r} reach beyond +-{LARGEST_BOUND:g}: the noise "
                         "scale (hi - lo) / epsilon and its square would overflow float64; "
                         "rescale the values (e.g. to thousands instead of units)")
    return lo, hi


def check_bounds(values: np.ndarray, bounds: tuple[float, float] | None, name: str) -> None:
    """Values must lie in the declared [lower, upper] range (the range fixes the sensitivity)."""
    if bounds is None:
        return
    lo, hi = float(bounds[0]), float(bounds[1])
    if not lo < hi:
        raise ValueError(f"bounds for {name} must satisfy lower < upper, got {bounds}")
    if values.size and (values.min() < lo or values.max() > hi):
        raise ValueError(
            f"{name} has values outside the declared bounds [{lo}, {hi}] "
            f"(min {values.min():.6g}, max {values.max():.6g}); clip the data or widen the bounds"
        )


class RecordCheckError(ValueError):
    """A party's own records fail a public check (declared bounds, labels, a domain).

    ``str(error)`` is the full message, which may quote the party's values (its minimum
    and maximum, an unknown category): it stays with that party, which prints or raises
    it. ``check`` names the public check that failed without any value of the records
    (``"values outside the declared bounds of column 'income'"``): the only part a
    transport sends to the server and the other parties.
    """

    def __init__(self, check: str, detail: str | None = None) -> None:
        super().__init__(check if detail is None else detail)
        self.check = check


class RecordCheck:
    """``with RecordCheck(check): ...`` turns a ``ValueError`` raised inside into a
    :class:`RecordCheckError` for ``check``.

    It wraps a check a party runs on its own records, so the message that quotes its
    values becomes the private detail and ``check`` is all that may leave the party.
    """

    def __init__(self, check: str) -> None:
        self.check = check

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> bool:
        if isinstance(error, ValueError) and not isinstance(error, RecordCheckError):
            raise RecordCheckError(self.check, str(error)) from None
        return False
