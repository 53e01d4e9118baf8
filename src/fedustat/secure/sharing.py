"""Additive (p, p) secret sharing over Z_{2^l} and XOR sharing of bit strings.

Additive sharing follows paper 002, App. A.2: ``Share(p, p, x)`` outputs
``[x]_1, ..., [x]_p`` with ``x = sum_i [x]_i mod 2^l``; the first ``p - 1`` shares are
uniform and the last one completes the sum, so any ``p - 1`` shares are uniform and
independent of ``x``. XOR (boolean) sharing is the same over bit strings:
``x = [x]_1 xor ... xor [x]_p``; a word of up to 64 bits is shared at once.

Array convention
----------------
Shares of secrets of shape ``s`` have shape ``(p, *s)``: ``shares[j]`` is what member
``j`` holds. Vectorized over groups, the secret shape starts with the group axis:
``(p, m)`` are ``m`` groups of ``p`` parties with one secret each, ``(p, m, k)`` ``k``
secrets per group. Local operations act share by share; an addition of a public
constant is done by member 0 only.

Openings
--------
:func:`open_shares` and :func:`open_xor` reconstruct values the way the parties do:
each member sends its share to the others (one round, recorded in a
:class:`~fedustat.secure.transcript.Transcript`) and everyone sums what it received.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

from fedustat._validation import RandomLike, check_positive_int
from fedustat.secure.ring import DEFAULT_RING, Ring, full_mask, random_words
from fedustat.secure.transcript import Transcript

__all__ = [
    "Material",
    "add_public",
    "as_shares",
    "evaluating_members",
    "member_openings",
    "mul_public",
    "open_shares",
    "open_xor",
    "public_shares",
    "reconstruct",
    "share",
    "xor_public",
    "xor_reconstruct",
    "xor_share",
]


class Material:
    """Base of correlated randomness dealt in the offline phase, for one use only.

    Subclasses are dataclasses with at least ``shape`` (the secret shape it was dealt
    for), ``ring`` and ``n_shares``. Reusing a Beaver triple, a mask or a key on a
    second input reveals the difference of the inputs, so :meth:`consume` refuses a
    second use.
    """

    shape: tuple[int, ...]
    ring: Ring
    n_shares: int

    @property
    def spent(self) -> bool:
        return bool(getattr(self, "_spent", False))

    def consume(self, shape: tuple[int, ...] | None = None) -> None:
        """Mark as used; check that the inputs have the dealt shape."""
        if self.spent:
            raise RuntimeError(f"{type(self).__name__} was already used: correlated randomness "
                               "must be used once (reusing it leaks the inputs)")
        if shape is not None and tuple(shape) != tuple(self.shape):
            raise ValueError(f"{type(self).__name__} was dealt for secrets of shape "
                             f"{tuple(self.shape)}, got {tuple(shape)}")
        self._spent = True


def as_shares(shares: Any, name: str = "shares", *, ring: Ring | None = None,
              n_shares: int | None = None) -> np.ndarray:
    """Validate an array of shares: integer, at least 1-d (the member axis), reduced."""
    arr = np.asarray(shares)
    if arr.dtype.kind not in "iub":
        raise TypeError(f"{name} must be an integer array of ring elements, got dtype "
                        f"{arr.dtype}")
    if arr.ndim < 1 or arr.shape[0] < 1:
        raise ValueError(f"{name} must have the member axis first, got shape {arr.shape}")
    if n_shares is not None and arr.shape[0] != n_shares:
        raise ValueError(f"{name} has {arr.shape[0]} shares per secret, expected {n_shares}")
    if ring is None:
        return arr.astype(np.uint64, copy=False)
    return ring.reduce(arr)


def share(secrets: Any, n_shares: int, rng: RandomLike | Any = None, *,
          ring: Ring = DEFAULT_RING) -> np.ndarray:
    """Additive (p, p) sharing: ``Share(p, p, x)`` of 002 App. A.2.

    Parameters
    ----------
    secrets:
        Integers (ring elements, or signed integers in two's complement) of any shape.
    n_shares:
        Number of shares ``p`` (>= 1).
    rng:
        Randomness for the shares (see :mod:`fedustat.secure.ring`).
    ring:
        The ring Z_{2^l} (default 64 bits).

    Returns
    -------
    ndarray of uint64, shape ``(p, *secrets.shape)``.
    """
    p = check_positive_int(n_shares, "n_shares")
    x = ring.reduce(secrets)
    out = np.empty((p, *x.shape), dtype=np.uint64)
    if p > 1:
        out[:-1] = ring.random((p - 1, *x.shape), rng)
        out[-1] = ring.sub(x, ring.sum(out[:-1], axis=0))
    else:
        out[0] = x
    return out


def reconstruct(shares: Any, *, ring: Ring = DEFAULT_RING) -> np.ndarray:
    """``Rec``: the sum of the shares modulo ``2^l`` (002 App. A.2)."""
    return ring.sum(as_shares(shares, ring=ring), axis=0)


def xor_share(words: Any, n_shares: int, rng: RandomLike | Any = None, *,
              width: int = 64) -> np.ndarray:
    """XOR sharing of bit strings of ``width`` bits stored in ``uint64`` words."""
    p = check_positive_int(n_shares, "n_shares")
    width = check_positive_int(width, "width")
    if width > 64:
        raise ValueError(f"width must be <= 64, got {width}")
    mask = full_mask(width)
    x = np.bitwise_and(Ring(64).reduce(words), mask)
    out = np.empty((p, *x.shape), dtype=np.uint64)
    if p > 1:
        out[:-1] = np.bitwise_and(random_words((p - 1, *x.shape), rng), mask)
        out[-1] = np.bitwise_xor(x, np.bitwise_xor.reduce(out[:-1], axis=0))
    else:
        out[0] = x
    return out


def xor_reconstruct(shares: Any) -> np.ndarray:
    """The XOR of the shares."""
    return np.asarray(np.bitwise_xor.reduce(as_shares(shares), axis=0))


def public_shares(value: Any, n_shares: int, shape: tuple[int, ...] | None = None, *,
                  ring: Ring = DEFAULT_RING) -> np.ndarray:
    """A trivial sharing of a public value: member 0 holds it, the others hold 0."""
    p = check_positive_int(n_shares, "n_shares")
    v = ring.reduce(value)
    if shape is not None:
        v = np.broadcast_to(v, shape)
    out = np.zeros((p, *v.shape), dtype=np.uint64)
    out[0] = v
    return out


def add_public(shares: np.ndarray, value: Any, *, ring: Ring = DEFAULT_RING) -> np.ndarray:
    """Shares of ``x + c`` for public ``c`` (member 0 adds it)."""
    x = as_shares(shares, ring=ring)
    c = ring.reduce(value)
    out = np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, (1, *c.shape))))
    out[0] = ring.add(out[0], c)
    return out


def mul_public(shares: np.ndarray, value: Any, *, ring: Ring = DEFAULT_RING) -> np.ndarray:
    """Shares of ``c x`` for public ``c`` (every member scales its share)."""
    return ring.mul(as_shares(shares, ring=ring), ring.reduce(value))


def xor_public(shares: np.ndarray, words: Any) -> np.ndarray:
    """XOR shares of ``x xor c`` for public ``c`` (member 0 applies it)."""
    x = as_shares(shares)
    c = Ring(64).reduce(words)
    out = np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, (1, *c.shape))))
    out[0] = np.bitwise_xor(out[0], c)
    return out


#: The opening hook of the current context (see :func:`member_openings`), or None.
_OPENINGS: ContextVar[Any] = ContextVar("fedustat_member_openings", default=None)


@contextmanager
def member_openings(hook: Any) -> Iterator[None]:
    """Within the block, :func:`open_shares` and :func:`open_xor` call ``hook`` instead of
    summing the members' rows.

    ``hook(op, arrays, active, ring)`` gets ``op`` (``"add"`` or ``"xor"``), the arrays of
    shares (member axis first), the active-bit mask of each array (XOR openings: an
    ``int``, or None when ``bits_per_element`` bits of bit 0 up travel) and the ring; it
    returns the opened values. A party that holds only its own row of each array (the
    other rows are placeholders) uses it to send its row to its peers and to take the
    opened values from their answers, so the lockstep circuits run member by member.
    """
    token = _OPENINGS.set(hook)
    try:
        yield
    finally:
        _OPENINGS.reset(token)


def evaluating_members(p: int) -> range | tuple[int, ...]:
    """The members whose rows a local step must compute: all ``p``, or under
    :func:`member_openings` only the hook's ``members`` (the rows a batch holds) or its
    one ``member`` (the other rows are placeholders: skipping them spares e.g. the
    evaluation of FSS keys the batch does not hold)."""
    hook = _OPENINGS.get()
    members = None if hook is None else getattr(hook, "members", None)
    if members is None and hook is not None and getattr(hook, "member", None) is not None:
        members = (hook.member,)
    if members is None:
        return range(p)
    held = tuple(int(r) for r in members)
    return range(p) if held == tuple(range(p)) else held


def open_shares(*shares: np.ndarray, ring: Ring = DEFAULT_RING,
                transcript: Transcript | None = None, kind: str = "open") -> tuple[np.ndarray, ...]:
    """Open additive sharings in one round: every member broadcasts its shares to its
    group and sums what it receives. All arrays open in the same round.

    Returns the opened values, one array per argument.
    """
    if not shares:
        raise ValueError("open_shares needs at least one array of shares")
    arrays = [as_shares(s, f"shares[{i}]", ring=ring) for i, s in enumerate(shares)]
    p = arrays[0].shape[0]
    if any(a.shape[0] != p for a in arrays):
        raise ValueError("all arrays opened together must have the same number of shares")
    hook = _OPENINGS.get()
    if hook is not None:
        return tuple(hook("add", arrays, [None] * len(arrays), ring))
    if transcript is not None:
        _check_group_size(transcript, p)
        per_group = sum(transcript.elements_per_group(a.shape[1:]) for a in arrays)
        transcript.record_open(kind, ring.bits * per_group)
    return tuple(ring.sum(a, axis=0) for a in arrays)


def open_xor(*shares: np.ndarray, bits_per_element: int, transcript: Transcript | None = None,
             kind: str = "open_xor", active: Sequence[int] | None = None
             ) -> tuple[np.ndarray, ...]:
    """Open XOR sharings in one round (each member broadcasts ``bits_per_element`` bits
    per shared word: only the word's active bits travel). ``active``: the active-bit mask
    of each array, when the travelling bits are not bits ``0..bits_per_element - 1``."""
    if not shares:
        raise ValueError("open_xor needs at least one array of shares")
    arrays = [as_shares(s, f"shares[{i}]") for i, s in enumerate(shares)]
    p = arrays[0].shape[0]
    if any(a.shape[0] != p for a in arrays):
        raise ValueError("all arrays opened together must have the same number of shares")
    hook = _OPENINGS.get()
    if hook is not None:
        masks = ([int(full_mask(bits_per_element))] * len(arrays) if active is None
                 else [int(a) for a in active])
        return tuple(hook("xor", arrays, masks, None))
    if transcript is not None:
        _check_group_size(transcript, p)
        per_group = sum(transcript.elements_per_group(a.shape[1:]) for a in arrays)
        transcript.record_open(kind, int(bits_per_element) * per_group)
    return tuple(np.asarray(np.bitwise_xor.reduce(a, axis=0)) for a in arrays)


def _check_group_size(transcript: Transcript, p: int) -> None:
    if transcript.group_size != p:
        raise ValueError(f"shares have {p} members per group but the transcript's layout has "
                         f"group_size={transcript.group_size}")
