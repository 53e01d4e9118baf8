"""The ring Z_{2^l} on ``uint64`` arrays, and where share randomness comes from.

Secret sharing in paper 002 (App. A.1-A.2) works over l-bit values. We take the ring
Z_{2^l} with ``1 <= l <= 64`` (the paper writes F_{2^l} but uses integer addition modulo
2^l, which is what additive sharing and two's-complement signs need). Elements are
stored in ``numpy.uint64``; NumPy's unsigned arithmetic wraps modulo 2^64, and since
2^l divides 2^64 a final ``& mask`` gives the result modulo 2^l. All arithmetic goes
through NumPy ufuncs on arrays, never through Python operators on NumPy scalars, which
would warn on the (intended) wrap-around.

Randomness for shares, masks and keys
-------------------------------------
Every random function of :mod:`fedustat.secure` takes ``rng``:

* ``None``, an integer seed, a ``SeedSequence`` or a ``numpy.random.Generator``: a
  seeded NumPy generator. Fast and reproducible, for simulations and tests; **not**
  cryptographically secure.
* ``"os"``, a :class:`SystemRandomness`, or a
  :class:`~fedustat.privacy.noise.DeploymentNoise`: the operating system's CSPRNG
  (``os.urandom``), for deployments. No seed is accepted on purpose.
* A :class:`~fedustat.privacy.noise.SimulationNoise`: its NumPy generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import RandomLike, as_rng, check_positive_int
from fedustat.privacy.noise import DeploymentNoise, SimulationNoise
from fedustat.privacy.samplers import csprng_bytes

__all__ = [
    "DEFAULT_RING",
    "MAX_RING_BITS",
    "Ring",
    "SystemRandomness",
    "as_share_rng",
    "full_mask",
    "random_words",
]

MAX_RING_BITS = 64
_ALL_ONES = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


class SystemRandomness:
    """Uniform 64-bit words from the operating system's CSPRNG (``os.urandom`` through
    :func:`fedustat.privacy.samplers.csprng_bytes`).

    Mirrors the one ``numpy.random.Generator`` method the secure layer uses, so it can be
    passed wherever ``rng`` is accepted. Not reproducible by design.
    """

    def integers(self, low: int, high: int, size: Any = None, dtype: Any = np.uint64,
                 endpoint: bool = False) -> np.ndarray:
        if low != 0 or high != 1 << 64 or endpoint or np.dtype(dtype) != np.uint64:
            raise ValueError("SystemRandomness only draws uniform 64-bit words: "
                             "integers(0, 2**64, size, dtype=numpy.uint64)")
        shape = () if size is None else (size,) if isinstance(size, int | np.integer) \
            else tuple(size)
        count = int(np.prod(shape, dtype=np.int64))
        # The OS CSPRNG, or the replayable stream a Flower node sets (samplers).
        words = np.frombuffer(csprng_bytes(8 * count), dtype=np.uint64).copy()
        return words.reshape(shape)

    def __repr__(self) -> str:
        return "SystemRandomness()"


def as_share_rng(rng: RandomLike | str | Any = None) -> np.random.Generator | SystemRandomness:
    """Resolve an ``rng`` argument of the secure layer (see the module docstring)."""
    if isinstance(rng, SystemRandomness):
        return rng
    if isinstance(rng, str):
        if rng == "os":
            return SystemRandomness()
        raise ValueError(f"rng must be a seed, a Generator, a NoiseSource or 'os', got {rng!r}")
    if isinstance(rng, DeploymentNoise):
        return SystemRandomness()
    if isinstance(rng, SimulationNoise):
        return rng.rng
    return as_rng(rng)


def random_words(shape: int | tuple[int, ...], rng: RandomLike | str | Any = None) -> np.ndarray:
    """Uniform 64-bit words of the given shape."""
    source = as_share_rng(rng)
    return np.asarray(source.integers(0, 1 << 64, size=shape, dtype=np.uint64))


@dataclass(frozen=True)
class Ring:
    """The ring Z_{2^l}, ``1 <= bits <= 64``, on ``uint64`` arrays.

    Signed values use two's complement (002 App. A.1): ``{0, ..., 2^{l-1} - 1}`` are
    the non-negative numbers and ``{2^{l-1}, ..., 2^l - 1}`` the negative ones.
    """

    bits: int = 64

    def __post_init__(self) -> None:
        bits = check_positive_int(self.bits, "bits")
        if bits > MAX_RING_BITS:
            raise ValueError(f"bits must be <= {MAX_RING_BITS} (elements are stored in uint64), "
                             f"got {bits}")
        object.__setattr__(self, "bits", bits)

    @property
    def modulus(self) -> int:
        """``2^l`` as a Python integer."""
        return 1 << self.bits

    @property
    def mask(self) -> np.uint64:
        """``2^l - 1``: the bits an element may use."""
        return np.uint64((1 << self.bits) - 1)

    @property
    def min_signed(self) -> int:
        return -(1 << (self.bits - 1))

    @property
    def max_signed(self) -> int:
        return (1 << (self.bits - 1)) - 1

    # -- conversion -------------------------------------------------------------------
    def reduce(self, values: Any) -> np.ndarray:
        """Integers (signed or unsigned, any size) to ring elements modulo ``2^l``.

        Floats are refused: encode real numbers with
        :class:`~fedustat.secure.fixedpoint.FixedPoint` first.
        """
        arr = np.asarray(values)
        if arr.dtype.kind == "f" and not isinstance(values, np.ndarray | np.generic):
            # A list mixing ints >= 2^63 with negative ints becomes float64 in NumPy;
            # keep exact Python integers instead.
            exact = np.asarray(values, dtype=object)
            if all(isinstance(v, int | np.integer) and not isinstance(v, bool)
                   for v in exact.ravel()):
                arr = exact
        if arr.dtype == bool:
            arr = arr.astype(np.uint64)
        if arr.dtype.kind == "u":
            return np.bitwise_and(arr.astype(np.uint64), self.mask)
        if arr.dtype.kind == "i":
            # int64 -> uint64 reinterprets two's complement, which is reduction mod 2^64.
            return np.bitwise_and(arr.astype(np.int64).view(np.uint64), self.mask)
        if arr.dtype == object:
            try:
                reduced = [int(v) % self.modulus for v in arr.ravel()]
            except (TypeError, ValueError) as exc:
                raise TypeError(f"values must be integers to enter the ring ({exc})") from exc
            return np.asarray(reduced, dtype=np.uint64).reshape(arr.shape)
        raise TypeError(f"values must be integers to enter the ring Z_2^{self.bits}, got dtype "
                        f"{arr.dtype}; encode real numbers with FixedPoint.encode first")

    def to_signed(self, elements: Any) -> np.ndarray:
        """Ring elements to signed integers in ``[-2^{l-1}, 2^{l-1})`` (int64)."""
        e = np.bitwise_and(np.asarray(elements, dtype=np.uint64), self.mask)
        # Sign extension: move bit l-1 to bit 63, reinterpret, shift back arithmetically.
        shift = MAX_RING_BITS - self.bits
        moved = np.left_shift(e, np.uint64(shift)).view(np.int64)
        return np.asarray(np.right_shift(moved, np.int64(shift)))

    def from_signed(self, values: Any) -> np.ndarray:
        """Signed integers to ring elements (alias of :meth:`reduce` for int arrays)."""
        return self.reduce(values)

    # -- arithmetic -------------------------------------------------------------------
    def add(self, a: Any, b: Any) -> np.ndarray:
        return np.bitwise_and(np.add(np.asarray(a, dtype=np.uint64),
                                     np.asarray(b, dtype=np.uint64)), self.mask)

    def sub(self, a: Any, b: Any) -> np.ndarray:
        return np.bitwise_and(np.subtract(np.asarray(a, dtype=np.uint64),
                                          np.asarray(b, dtype=np.uint64)), self.mask)

    def neg(self, a: Any) -> np.ndarray:
        return np.bitwise_and(np.subtract(np.uint64(0), np.asarray(a, dtype=np.uint64)),
                              self.mask)

    def mul(self, a: Any, b: Any) -> np.ndarray:
        return np.bitwise_and(np.multiply(np.asarray(a, dtype=np.uint64),
                                          np.asarray(b, dtype=np.uint64)), self.mask)

    def sum(self, a: Any, axis: int = 0) -> np.ndarray:
        """Sum along ``axis`` modulo ``2^l``."""
        total = np.add.reduce(np.asarray(a, dtype=np.uint64), axis=axis, dtype=np.uint64)
        return np.asarray(np.bitwise_and(total, self.mask))

    def msb(self, a: Any) -> np.ndarray:
        """The top bit (the sign in two's complement), as 0/1 ``uint64``."""
        return np.bitwise_and(np.right_shift(np.asarray(a, dtype=np.uint64),
                                             np.uint64(self.bits - 1)), np.uint64(1))

    def random(self, shape: int | tuple[int, ...], rng: RandomLike | str | Any = None
               ) -> np.ndarray:
        """Uniform ring elements (2^l divides 2^64, so masking keeps them uniform)."""
        return np.bitwise_and(random_words(shape, rng), self.mask)


DEFAULT_RING = Ring(64)


def full_mask(width: int) -> np.uint64:
    """A word with the low ``width`` bits set (``0 <= width <= 64``)."""
    return _ALL_ONES if width >= 64 else np.uint64((1 << width) - 1)
