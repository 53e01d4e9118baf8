"""Secure multiplication with Beaver triples, boolean AND gates and B2A conversion.

Beaver multiplication (Beaver 1991; the triples of 002 App. E.1.1): with a dealt
triple ``[a], [b], [c = a b]``, the members of a group open ``d = x - a`` and
``e = y - b`` (each broadcasts its shares of both: one round, ``2 (p - 1) l`` bits
sent per member per product) and set

    [x y] = [c] + d [b] + e [a] + d e        (d e added by member 0 only).

``d`` and ``e`` are uniform whatever ``x, y`` are, so the opening reveals nothing. The
same identity over GF(2) with XOR and AND evaluates AND gates on XOR shares
(:func:`and_gates`): bit-sliced, a word of up to 64 gates per secret, only the active
bits travel (2 bits per gate per member).

B2A (:func:`b2a`) turns an XOR-shared bit ``x`` into additive shares with a dealt daBit
``b``: open ``v = x xor b`` (1 bit per member), then ``[x] = v + (1 - 2 v) [b]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedustat.secure.dealer import AndTriples, BeaverTriples, DaBits, Dealer, popcount
from fedustat.secure.ring import Ring
from fedustat.secure.sharing import as_shares, open_shares, open_xor
from fedustat.secure.transcript import Transcript

__all__ = ["and_gates", "b2a", "mul", "mul_many"]


def _triples(source: BeaverTriples | Dealer, shape: tuple[int, ...]) -> BeaverTriples:
    if isinstance(source, BeaverTriples):
        return source
    if isinstance(source, Dealer):
        return source.beaver_triples(shape)
    raise TypeError(f"source must be BeaverTriples or a Dealer, got {type(source).__name__}")


def mul_many(pairs: Sequence[tuple[np.ndarray, np.ndarray, BeaverTriples | Dealer]], *,
             transcript: Transcript | None = None, kind: str = "beaver.open"
             ) -> list[np.ndarray]:
    """Several Beaver products in **one** round: ``[(x, y, triples_or_dealer), ...]``.

    Every ``x, y`` are additive shares of the same member count; the products may have
    different shapes.
    """
    if not pairs:
        raise ValueError("mul_many needs at least one (x, y, source) triple")
    prepared = []
    masked: list[np.ndarray] = []
    ring: Ring | None = None
    for i, (x, y, source) in enumerate(pairs):
        xs, ys = as_shares(x, f"x[{i}]"), as_shares(y, f"y[{i}]")
        shape = np.broadcast_shapes(xs.shape, ys.shape)
        tri = _triples(source, shape[1:])
        if ring is not None and tri.ring != ring:
            raise ValueError("all products in one round must use the same ring")
        ring = tri.ring
        if shape[0] != tri.n_shares:
            raise ValueError(f"x[{i}], y[{i}] have {shape[0]} shares per secret but the "
                             f"triples were dealt for {tri.n_shares}")
        tri.consume(shape[1:])
        xs, ys = ring.reduce(np.broadcast_to(xs, shape)), ring.reduce(np.broadcast_to(ys, shape))
        prepared.append(tri)
        masked += [ring.sub(xs, tri.a), ring.sub(ys, tri.b)]
    assert ring is not None
    opened = open_shares(*masked, ring=ring, transcript=transcript, kind=kind)
    out = []
    for k, tri in enumerate(prepared):
        d, e = opened[2 * k], opened[2 * k + 1]
        z = ring.add(tri.c, ring.add(ring.mul(d, tri.b), ring.mul(e, tri.a)))
        z[0] = ring.add(z[0], ring.mul(d, e))
        out.append(z)
    return out


def mul(x: np.ndarray, y: np.ndarray, source: BeaverTriples | Dealer, *,
        transcript: Transcript | None = None) -> np.ndarray:
    """Shares of ``x y`` (elementwise, broadcasting) with a Beaver triple: one round.

    Parameters
    ----------
    x, y:
        Additive shares ``(p, *s)`` over the triples' ring.
    source:
        Pre-dealt :class:`~fedustat.secure.dealer.BeaverTriples` of secret shape ``s``,
        or a :class:`~fedustat.secure.dealer.Dealer` that deals them now.
    transcript:
        Where the opening of ``d, e`` is recorded (``2 (p - 1) l`` bits per member per
        product).
    """
    return mul_many([(x, y, source)], transcript=transcript)[0]


def and_gates(gates: Sequence[tuple[np.ndarray, np.ndarray, AndTriples | Dealer]], *,
              active: Sequence[int] | None = None, transcript: Transcript | None = None,
              kind: str = "and.open") -> list[np.ndarray]:
    """AND gates on XOR-shared words, all in **one** round.

    Parameters
    ----------
    gates:
        ``[(x, y, triples_or_dealer), ...]``: XOR shares ``(p, *s)`` of words; the gate
        computes ``x and y`` on the triples' active bits (other bits come out 0).
    active:
        Active-bit masks, one per gate, required when a gate's source is a Dealer.
    transcript:
        Where the opening is recorded: 2 bits per active bit per member.

    Returns
    -------
    XOR shares of ``x and y`` per gate.
    """
    if not gates:
        raise ValueError("and_gates needs at least one (x, y, source) triple")
    prepared = []
    masked: list[np.ndarray] = []
    per_group = 0
    for i, (x, y, source) in enumerate(gates):
        xs, ys = as_shares(x, f"x[{i}]"), as_shares(y, f"y[{i}]")
        shape = np.broadcast_shapes(xs.shape, ys.shape)
        if isinstance(source, AndTriples):
            tri = source
        elif isinstance(source, Dealer):
            if active is None:
                raise ValueError("active masks are needed when the dealer deals the triples")
            tri = source.and_triples(shape[1:], active[i])
        else:
            raise TypeError(f"gates[{i}] source must be AndTriples or a Dealer, got "
                            f"{type(source).__name__}")
        tri.consume(shape[1:])
        mask = np.uint64(tri.active)
        prepared.append(tri)
        masked += [np.bitwise_and(np.bitwise_xor(xs, tri.a), mask),
                   np.bitwise_and(np.bitwise_xor(ys, tri.b), mask)]
        if transcript is not None:
            per_group += 2 * popcount(tri.active) * transcript.elements_per_group(shape[1:])
    opened = open_xor(*masked, bits_per_element=0, transcript=None,
                      active=[t.active for t in prepared for _ in (0, 1)])
    if transcript is not None:
        transcript.record_open(kind, per_group)
    out = []
    for k, tri in enumerate(prepared):
        d, e = opened[2 * k], opened[2 * k + 1]
        z = np.bitwise_xor(tri.c, np.bitwise_xor(np.bitwise_and(d, tri.b),
                                                 np.bitwise_and(e, tri.a)))
        z[0] = np.bitwise_xor(z[0], np.bitwise_and(d, e))
        out.append(z)
    return out


def b2a(bits: np.ndarray, source: DaBits | Dealer, *, transcript: Transcript | None = None,
        ring: Ring | None = None) -> np.ndarray:
    """Additive shares of the bit held XOR-shared in bit 0 of ``bits`` (one round, 1 bit).

    ``ring`` is needed only when ``source`` is a pre-dealt :class:`DaBits` whose ring
    should be checked; the result lives in the daBits' ring.
    """
    xs = as_shares(bits, "bits")
    if isinstance(source, DaBits):
        dab = source
    elif isinstance(source, Dealer):
        dab = source.dabits(xs.shape[1:])
    else:
        raise TypeError(f"source must be DaBits or a Dealer, got {type(source).__name__}")
    if ring is not None and dab.ring != ring:
        raise ValueError("the daBits were dealt over a different ring")
    dab.consume(xs.shape[1:])
    r = dab.ring
    (v,) = open_xor(np.bitwise_and(np.bitwise_xor(xs, dab.bits), np.uint64(1)),
                    bits_per_element=1, transcript=transcript, kind="b2a.open")
    out = r.mul(r.sub(np.uint64(1), r.mul(np.uint64(2), v)), dab.arith)
    out[0] = r.add(out[0], v)
    return out

