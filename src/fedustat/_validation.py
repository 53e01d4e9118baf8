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


def as_rng(rng: RandomLike) -> np.random.Generator:
    """Turn a seed, a SeedSequence, a Generator or None into a ``numpy.random.Generator``."""
    if isinstance(rng, np.random.Generator):
        return rng
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
    if rng is None or (isinstance(rng, int | np.integer) and not isinstance(rng, bool)):
        return np.random.SeedSequence(rng)
    raise TypeError("rng must be None, an integer seed, a SeedSequence or a "
                    f"numpy.random.Generator, got {rng!r}")


def as_float_array(values: Any, name: str, *, ndim: int | Sequence[int] = 1) -> np.ndarray:
    """Convert to a finite float64 array with the given number of dimensions.

    Accepts lists, NumPy arrays and pandas/polars columns (anything ``np.asarray`` takes).
    """
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


def check_epsilon(epsilon: Any, name: str = "epsilon", *, allow_inf: bool = False) -> float:
    """A privacy budget: a positive number (``inf`` only where non-private runs make sense).

    Booleans are refused: ``epsilon=True`` is a mistake, not a budget of 1.
    """
    _refuse_bool(epsilon, name, "a positive number")
    try:
        eps = float(epsilon)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a positive number, got {epsilon!r}") from exc
    if math.isnan(eps) or eps <= 0:
        raise ValueError(f"{name} must be > 0, got {epsilon!r}")
    if math.isinf(eps) and not allow_inf:
        raise ValueError(f"{name} must be finite, got {epsilon!r}")
    return eps


def check_positive_float(value: Any, name: str) -> float:
    """A finite number > 0 (booleans refused)."""
    _refuse_bool(value, name, "a positive number")
    try:
        x = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a positive number, got {value!r}") from exc
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return x


def check_delta(delta: Any, name: str = "delta") -> float:
    """A failure probability in [0, 1) (booleans refused)."""
    _refuse_bool(delta, name, "a number in [0, 1)")
    try:
        d = float(delta)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a number in [0, 1), got {delta!r}") from exc
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
    """A number in [0, 1] (optionally excluding an end)."""
    p = float(value)
    lo_ok = p > 0 if open_left else p >= 0
    hi_ok = p < 1 if open_right else p <= 1
    if math.isnan(p) or not (lo_ok and hi_ok):
        lo = "(" if open_left else "["
        hi = ")" if open_right else "]"
        raise ValueError(f"{name} must be in {lo}0, 1{hi}, got {value!r}")
    return p


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
