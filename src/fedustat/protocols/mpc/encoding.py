"""Encoding secret columns relative to their public bounds, and sizing the ring.

The secure protocols compute on integers of ``Z_{2^l}`` (002 App. A.1). A record ``x``
with declared public bounds ``lo <= x <= hi`` enters the ring as

    ``e(x) = round((x - lo) / h)``,  ``h = 2^-c`` the largest power of two ``<= precision``

(the fixed-point encoding of ``x - lo``, 002 App. A.1, with ``c`` chosen from what the
user declares instead of a fixed ``c = 14``). Every supported kernel is invariant to a
common shift of its inputs (comparisons, equalities, ``|x - y|``, ``(x - y)^2``), so
encoding ``x - lo`` changes nothing but the range the ring must hold.

* **Order kernels** (AUC, Mann-Whitney, VUS, Kendall's tau, duplicate pairs, Rand index)
  only compare or test equality; ``e`` is an order encoding: ``x < y`` gives
  ``e(x) <= e(y)``, with equality (a tie) only when ``|x - y| < h``. The ring holds the
  codes ``0 .. (hi - lo) / h`` and the kernel outputs (small integers).
* **Arithmetic kernels** (Gini mean difference ``|x - y|``, variance ``(x - y)^2 / 2``)
  compute on the codes: the release is exact up to the rounding of each value by ``h/2``.

The default precision is ``(hi - lo) / 2^20`` (:data:`DEFAULT_LEVELS_LOG2`): about a
million levels across the declared range. Values closer than ``h`` become equal: for an
order kernel, two scores closer than ``h`` are a tie (an AUC pair scores 1/2 instead of
0 or 1). Declare ``precision`` at most the smallest difference that matters in the data.

Ring size (public quantities only): the smallest ``l`` such that

1. the codes fit with one bit of headroom (``(hi - lo) / h < 2^(l - 2)``), so differences
   of codes cannot wrap and the half-range comparisons are exact;
2. a product of two codes fits (variance kernel: ``((hi - lo) / h)^2 < 2^(l - 1)``);
3. the sum over the ``|E|`` edges of the kernel outputs fits: ``|E| max|D f| < 2^(l - 2)``;
4. the distributed noise fits: ``P(|eta| >= 2^(l - 2)) < 2^-40``
   (:func:`fedustat.secure.noise.noise_magnitude_bound`),

so that ``sum + noise`` stays below ``2^(l - 1)`` and decodes without wrapping. If no
``l <= 64`` (the largest ring, elements are uint64) satisfies them, an
:class:`~fedustat._validation.InputRangeError` (a ``ValueError`` and an ``OverflowError``)
names the condition and suggests a coarser precision.

A ``precision`` at least the width of the bounds is refused: every value would encode to
one of at most two codes, so an order kernel would see ties almost everywhere (an AUC of
about 1/2 with a standard error of 0), a wrong number that looks like a release.

Rounding error in the stated error: each value moves by at most ``h / 2``, so the Gini
mean difference moves by at most ``h`` and the variance kernel by at most
``(hi - lo) h + h^2 / 2`` (:meth:`ColumnEncoding.rounding_bias`). That public bound is
added to the release's error law as a bias (:func:`with_rounding_bias`) whenever it is at
least 1% of the law's standard deviation; below that it would move a 95% half-width by
less than about 0.5%. Order kernels are exact except for ties between values closer than
``h``, whose effect depends on the data and has no public bound: the diagnostics say so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import InputRangeError, as_float_array, check_bounds_pair
from fedustat.privacy.errors import BoundedBias, ErrorDistribution
from fedustat.secure import FixedPoint
from fedustat.secure.noise import noise_magnitude_bound
from fedustat.secure.ring import MAX_RING_BITS
from fedustat.stats.kernels import Kernel

__all__ = [
    "DEFAULT_LEVELS_LOG2",
    "ColumnEncoding",
    "bounds_by_column",
    "declared_bounds",
    "frac_bits_for",
    "ring_bits_for",
    "with_rounding_bias",
]

#: Default precision: ``(hi - lo) / 2^20`` (about 10^6 levels over the declared range).
DEFAULT_LEVELS_LOG2 = 20
#: The smallest ring the encodings use (shares of fewer bits save nothing measurable).
MIN_RING_BITS = 16


def declared_bounds(kernel: Kernel) -> tuple[float, float] | None:
    """The public bounds a built-in kernel was declared with (Gini, variance), else None."""
    keywords = getattr(kernel.validate, "keywords", None)
    if isinstance(keywords, dict) and "bounds" in keywords:
        lo, hi = keywords["bounds"]
        return float(lo), float(hi)
    return None


def bounds_by_column(bounds: Any, names: Sequence[str]) -> Any:
    """Accept bounds as a mapping from column name to ``(lo, hi)`` (as the comparison
    tool passes them): the pairs of the secret columns ``names`` in order, or None for an
    empty mapping. Other forms are returned unchanged."""
    if not isinstance(bounds, Mapping):
        return bounds
    if not bounds:
        return None
    missing = [c for c in names if c not in bounds]
    if missing:
        raise ValueError(f"bounds has no (lo, hi) for the secret column(s) {missing}; give "
                         f"one for each of {list(names)}")
    return [tuple(bounds[c]) for c in names]


def frac_bits_for(precision: float) -> int:
    """``c`` with ``2^-c`` the largest power of two ``<= precision`` (``c >= 0``)."""
    return max(0, math.ceil(-math.log2(precision) - 1e-12))


def _check_bounds(bounds: Any, columns: int) -> tuple[tuple[float, float], ...]:
    """One ``(lo, hi)`` for every secret column, or one pair for all of them."""
    try:
        pairs = [bounds] if len(bounds) == 2 and np.ndim(bounds[0]) == 0 else list(bounds)
    except TypeError as exc:
        raise TypeError(f"bounds must be a pair (lo, hi) or one pair per secret column, got "
                        f"{bounds!r}") from exc
    out = tuple(check_bounds_pair(pair, "bounds") for pair in pairs)
    if len(out) == 1:
        out = out * columns
    if len(out) != columns:
        raise ValueError(f"bounds has {len(out)} pairs; the kernel has {columns} secret "
                         f"column(s): give one pair (lo, hi) or one per column")
    return out


@dataclass(frozen=True)
class ColumnEncoding:
    """Secret columns encoded relative to public bounds (see the module docstring).

    Attributes
    ----------
    bounds:
        ``(lo, hi)`` of each secret column.
    frac_bits:
        ``c``: the resolution is ``h = 2^-c``.
    precision:
        What the user declared (None: the default ``(hi - lo) / 2^20`` was used).
    """

    bounds: tuple[tuple[float, float], ...]
    frac_bits: int
    precision: float | None = None

    @classmethod
    def declare(cls, bounds: Any, precision: float | None, columns: int) -> ColumnEncoding:
        pairs = _check_bounds(bounds, columns)
        if precision is None:
            width = min(hi - lo for lo, hi in pairs)
            c = frac_bits_for(width / 2.0**DEFAULT_LEVELS_LOG2)
        else:
            if isinstance(precision, bool) or not isinstance(precision, int | float) \
                    or not math.isfinite(precision) or precision <= 0:
                raise ValueError(f"precision must be a finite number > 0, got {precision!r}")
            width = min(hi - lo for lo, hi in pairs)
            if precision >= width:
                raise ValueError(
                    f"precision={precision!r} is not below the width {width:g} of the bounds: "
                    "every value would encode to one of at most two codes, so an order "
                    "statistic (AUC, Kendall's tau, ...) would see ties almost everywhere "
                    "(an AUC near 0.5 with a standard error of 0); declare the smallest "
                    "difference that matters, well below the width (default: the width / "
                    f"2^{DEFAULT_LEVELS_LOG2})")
            c = frac_bits_for(float(precision))
        if c + 2 > MAX_RING_BITS:
            raise InputRangeError(
                f"precision={precision!r} needs {c} fractional bits, more than a "
                f"{MAX_RING_BITS}-bit ring holds with its sign and headroom; declare a "
                f"coarser precision (at least 2^-{MAX_RING_BITS - 2})")
        return cls(pairs, c, None if precision is None else float(precision))

    @property
    def resolution(self) -> float:
        return 2.0 ** -self.frac_bits

    @property
    def max_code(self) -> int:
        """The largest code: ``ceil((hi - lo) / h)`` over the columns."""
        return max(math.ceil((hi - lo) * 2.0**self.frac_bits) for lo, hi in self.bounds)

    def fixed_point(self, bits: int) -> FixedPoint:
        """The ring format: ``l`` bits, ``c`` fractional bits, one bit of headroom.

        The format holds at least its ``c`` fractional bits, the sign and the headroom: with
        bounds narrower than 1 the codes stay below ``2^c`` and the conditions of
        :func:`ring_bits_for` alone may ask for fewer bits.
        """
        return FixedPoint(max(bits, self.frac_bits + 2), self.frac_bits, headroom=1)

    def encode(self, values: Any, fixed_point: FixedPoint, name: str = "values") -> np.ndarray:
        """``(n, d)`` records of the secret columns to ring elements of ``fixed_point``.

        Raises ``ValueError`` naming the column and the bounds for a value outside them
        (each party checks its own record: the bounds are public).
        """
        x = as_float_array(values, name, ndim=(2,))
        shifted = np.empty_like(x)
        for j, (lo, hi) in enumerate(self.bounds):
            col = x[:, j]
            outside = (col < lo) | (col > hi)
            if np.any(outside):
                bad = col[outside]
                raise ValueError(f"{name}: {int(outside.sum())} value(s) outside the declared "
                                 f"bounds [{lo:g}, {hi:g}] (min {bad.min():.6g}, max "
                                 f"{bad.max():.6g}); declare bounds that hold every value")
            shifted[:, j] = col - lo
        return fixed_point.encode(shifted, name=name)

    def rounding_bias(self, kernel_name: str) -> float:
        """A public bound on how far the rounding of the codes moves the U-statistic.

        Each value moves by at most ``h / 2`` (round to nearest): ``|x - y|`` by at most
        ``h`` (Gini mean difference) and ``(x - y)^2 / 2`` by at most
        ``|a' - a| |a' + a| / 2 <= h (2 W + h) / 2 = W h + h^2 / 2`` with ``W = hi - lo``
        (variance kernel). Order kernels: 0, their only change is a tie between values
        closer than ``h`` (no public bound; see :meth:`describe`).
        """
        h = self.resolution
        width = max(hi - lo for lo, hi in self.bounds)
        if kernel_name == "gini_mean_difference":
            return h
        if kernel_name == "variance":
            return width * h + h * h / 2.0
        return 0.0

    def describe(self, fixed_point: FixedPoint, kernel_name: str | None = None
                 ) -> dict[str, Any]:
        """Public facts for an estimate's diagnostics (with ``kernel_name``, the bound of
        :meth:`rounding_bias`)."""
        out = {"bounds": [list(b) for b in self.bounds], "resolution": self.resolution,
               "declared_precision": self.precision, "ring_bits": fixed_point.bits,
               "ties": f"values closer than {self.resolution:.3g} encode equally (ties)"}
        if kernel_name is not None:
            out["rounding_bias_bound"] = self.rounding_bias(kernel_name)
        return out


#: The rounding bias enters the stated error when it is at least this share of the error
#: law's standard deviation (module docstring).
ROUNDING_BIAS_SHARE = 0.01


def with_rounding_bias(error: ErrorDistribution, bound: float) -> ErrorDistribution:
    """``error`` with the encoding's rounding bias ``|d| <= bound`` added
    (:class:`~fedustat.privacy.errors.BoundedBias`), unless ``bound`` is below
    :data:`ROUNDING_BIAS_SHARE` of the law's standard deviation (or 0)."""
    if bound <= 0.0 or bound < ROUNDING_BIAS_SHARE * error.std:
        return error
    return BoundedBias(error, bound)


def ring_bits_for(*, max_code: int, product: bool, output_total: int,
                  noise: tuple[float, float] | None, what: str) -> int:
    """The smallest ring size ``l`` meeting conditions 1-4 of the module docstring.

    Parameters
    ----------
    max_code:
        Largest code ``(hi - lo) / h``.
    product:
        True when two codes are multiplied (variance kernel).
    output_total:
        ``|E| max |D f|``: the largest absolute sum of the kernel outputs in ring units.
    noise:
        ``(t, total Pólya shape)`` of the distributed noise, or None without noise.
    what:
        Names the protocol in the error message.
    """
    need = {"the codes (hi - lo) / precision": (max(max_code, 1)).bit_length() + 2,
            "the sum of the kernel outputs": max(output_total, 1).bit_length() + 2}
    if product:
        need["products of two codes"] = (max(max_code, 1) ** 2).bit_length() + 1
    if noise is not None:
        try:
            need["the noise (tail 2^-40)"] = noise_magnitude_bound(*noise).bit_length() + 1
        except OverflowError:
            need["the noise (tail 2^-40)"] = 81
    bits = max(MIN_RING_BITS, *need.values())
    if bits > MAX_RING_BITS:
        worst = max(need, key=lambda k: need[k])
        raise InputRangeError(f"{what}: {worst} need a ring of {need[worst]} bits, more than the "
                            f"largest supported ({MAX_RING_BITS}); declare a coarser precision "
                            "(or tighter bounds), fewer edges, or a larger epsilon")
    return bits

