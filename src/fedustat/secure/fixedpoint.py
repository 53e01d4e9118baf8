"""Fixed-point encoding of real numbers into Z_{2^l} (paper 002, App. A.1 and Sec. 6.1).

A real number ``x`` is represented by the integer ``round(x * 2^c)`` in two's
complement on ``l`` bits, so the representable values are ``int * h`` with
``h = 2^{-c}`` and ``int`` in ``[-2^{l-1}, 2^{l-1})`` (002 App. A.1: the top bit is the
sign). 002 Sec. 6.1 uses ``l = 40`` and ``c = 14``, which represents
``[-2^25, 2^25)`` — our defaults.

Encoding never wraps silently: a value outside the range raises ``OverflowError``
naming the range. ``headroom`` reserves top bits, e.g. ``headroom=1`` keeps values in
``[-2^{l-2}, 2^{l-2})`` so that the difference of two encoded values cannot overflow
(the cheaper half-range comparisons of :mod:`fedustat.secure.compare` need this).

Secure products
---------------
The product of two encodings carries ``2c`` fractional bits. The kernels of the
protocols multiply a fixed-point value by an integer (a comparison bit or a sign), which
needs no rescaling; a product of two fractional values is decoded with
:meth:`FixedPoint.product_format` (``2c`` fractional bits) after checking with
:meth:`FixedPoint.check_product` that it fits. No secure truncation is offered: the
probabilistic truncation of Catrina & Saxena needs ``k + sigma + 1 <= l`` bits, which a
64-bit ring cannot give with a 40-bit statistical security ``sigma`` for products of
14-fractional-bit values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import InputRangeError, as_float_array, check_positive_int
from fedustat.secure.ring import MAX_RING_BITS, Ring

__all__ = ["DEFAULT_BITS", "DEFAULT_FRAC_BITS", "FixedPoint"]

DEFAULT_BITS = 40       # l of 002 Sec. 6.1
DEFAULT_FRAC_BITS = 14  # c of 002 Sec. 6.1 (h = 2^-14)

_ANY_NDIM = tuple(range(33))


@dataclass(frozen=True)
class FixedPoint:
    """Encode reals as ``round(x 2^c)`` in ``l``-bit two's complement (002 App. A.1).

    Parameters
    ----------
    bits:
        Ring size ``l`` (1..64); default 40 (002 Sec. 6.1).
    frac_bits:
        Fractional bits ``c`` (``0 <= c < l``); default 14 (002 Sec. 6.1).
    headroom:
        Top bits kept free (``0 <= headroom < l - c``): values are restricted to
        ``[-2^{l-1-headroom}, 2^{l-1-headroom})`` in integer units.
    """

    bits: int = DEFAULT_BITS
    frac_bits: int = DEFAULT_FRAC_BITS
    headroom: int = 0

    def __post_init__(self) -> None:
        bits = check_positive_int(self.bits, "bits")
        if bits > MAX_RING_BITS:
            raise ValueError(f"bits must be <= {MAX_RING_BITS}, got {bits}")
        frac = check_positive_int(self.frac_bits, "frac_bits", minimum=0)
        if frac >= bits:
            raise ValueError(f"frac_bits must be < bits ({bits}), got {frac}")
        headroom = check_positive_int(self.headroom, "headroom", minimum=0)
        if headroom >= bits - frac:
            raise ValueError(f"headroom must be < bits - frac_bits ({bits - frac}), got {headroom}")
        object.__setattr__(self, "bits", bits)
        object.__setattr__(self, "frac_bits", frac)
        object.__setattr__(self, "headroom", headroom)

    @property
    def ring(self) -> Ring:
        return Ring(self.bits)

    @property
    def scale(self) -> float:
        """``2^c``: one unit of the real value in integer units."""
        return float(2.0**self.frac_bits)

    @property
    def resolution(self) -> float:
        """``h = 2^{-c}``, the spacing of representable values."""
        return float(2.0 ** (-self.frac_bits))

    @property
    def min_int(self) -> int:
        return -(1 << (self.bits - 1 - self.headroom))

    @property
    def max_int(self) -> int:
        return (1 << (self.bits - 1 - self.headroom)) - 1

    @property
    def min_value(self) -> float:
        """Smallest encodable real number."""
        return self.min_int / self.scale

    @property
    def max_value(self) -> float:
        """Largest encodable real number that is a float64 (for ``l - headroom > 54``
        the float nearest ``max_int`` rounds up out of range, so the next float down)."""
        top = float(self.max_int)
        if int(top) > self.max_int:
            top = float(np.nextafter(top, 0.0))
        return top / self.scale

    def _range_text(self) -> str:
        return (f"[{self.min_value:.17g}, {self.max_value:.17g}] (l={self.bits} bits, "
                f"c={self.frac_bits} fractional bits, headroom={self.headroom})")

    def encode(self, values: Any, name: str = "values") -> np.ndarray:
        """Reals to ring elements: ``round(x 2^c) mod 2^l`` (round half to even).

        Raises
        ------
        OverflowError
            If a value rounds outside the representable range.
        """
        x = as_float_array(values, name, ndim=_ANY_NDIM)
        scaled = np.rint(x * self.scale)
        # Both limits are powers of two, exact in float64, so the test is exact.
        limit = float(2.0 ** (self.bits - 1 - self.headroom))
        outside = (scaled < -limit) | (scaled >= limit)
        if np.any(outside):
            bad = x[outside]
            raise InputRangeError(
                f"{name} has {int(outside.sum())} value(s) outside the fixed-point range "
                f"{self._range_text()}: min {bad.min():.6g}, max {bad.max():.6g}; rescale "
                f"the data or use more bits")
        return self.ring.reduce(scaled.astype(np.int64))

    def encode_int(self, values: Any, name: str = "values") -> np.ndarray:
        """Integers already in units of ``2^{-c}`` to ring elements, with the range check."""
        arr = np.asarray(values)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{name} must be integers (units of 2^-{self.frac_bits}), "
                            f"got dtype {arr.dtype}")
        as_int = arr.astype(np.int64)
        outside = (as_int < self.min_int) | (as_int > self.max_int)
        if arr.dtype.kind == "u":
            outside |= arr > np.uint64(self.max_int)
        if np.any(outside):
            raise InputRangeError(
                f"{name} has {int(outside.sum())} value(s) outside the fixed-point range "
                f"{self._range_text()} (integer units [{self.min_int}, {self.max_int}])")
        return self.ring.reduce(as_int)

    def decode(self, elements: Any) -> np.ndarray:
        """Ring elements to reals: ``signed(e) 2^{-c}`` (exact while ``|signed(e)| < 2^53``)."""
        return self.ring.to_signed(elements).astype(np.float64) / self.scale

    def product_format(self) -> FixedPoint:
        """The format of a product of two encodings: same ring, ``2c`` fractional bits."""
        if 2 * self.frac_bits >= self.bits:
            raise InputRangeError(f"a product has {2 * self.frac_bits} fractional bits, which "
                                f"does not fit in l={self.bits} bits")
        return FixedPoint(self.bits, 2 * self.frac_bits)

    def check_product(self, bound_a: float, bound_b: float) -> None:
        """Raise ``OverflowError`` unless every product ``a b`` of encodings of ``|a| <=
        bound_a`` and ``|b| <= bound_b`` fits in :meth:`product_format`.

        Checked in integer units: ``ceil(bound_a 2^c) ceil(bound_b 2^c) < 2^{l-1}``.
        """
        ia = math.ceil(abs(float(bound_a)) * self.scale)
        ib = math.ceil(abs(float(bound_b)) * self.scale)
        if ia * ib >= 1 << (self.bits - 1):
            limit = 2.0 ** (self.bits - 1 - 2 * self.frac_bits)
            raise InputRangeError(
                f"products of values bounded by {bound_a:g} and {bound_b:g} do not fit the "
                f"product range (-{limit:g}, {limit:g}) of l={self.bits} bits with "
                f"2c={2 * self.frac_bits} fractional bits; use more bits or fewer fractional bits")
