"""The message log of the secure layer: every bit the primitives send, by phase and round.

Each primitive of :mod:`fedustat.secure` records what it sends as it runs: an opening
(every member of a group sends its share to the other members), a dealing (the trusted
dealer sends correlated randomness to each member, offline), a delivery to the
aggregator. A record holds, per (round, kind), the bits sent and received by each
member of each group as an array — not one Python object per message — so a record for
200,000 groups costs a few arrays.

Layouts
-------
Primitives run on *groups* of parties: shares of shape ``(p, m, ...)`` belong to ``m``
groups of ``p`` parties (member ``j`` of group ``g`` holds ``shares[j, g, ...]``). A
:class:`Transcript` carries such a layout, optionally with the global party id of each
(member, group) slot (``party_ids`` of shape ``(p, m)``). :meth:`Transcript.view` gives
another layout on the same log (same records, same round counter), e.g. the edges of a
hypergraph for the kernel circuits and all ``n`` parties for the noise. Totals per
global party (:meth:`Transcript.party_bits`) and a :class:`~fedustat.cost.Cost`
(:meth:`Transcript.cost`) are then computed over every layout at once.

Rounds count sequential online exchanges: each opening advances the counter by one;
primitives run inside :meth:`Transcript.parallel` branches share rounds (the counter
ends at the longest branch). Offline records have no round: the dealer's messages are
sent before the online phase (002 App. A.3).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from fedustat._validation import check_positive_int
from fedustat.cost import Cost

__all__ = ["Layout", "PartyBits", "Phase", "Record", "Transcript"]

Phase = Literal["offline", "online"]
_PHASES = ("offline", "online")


@dataclass(frozen=True, eq=False)
class Layout:
    """``n_groups`` groups of ``group_size`` parties; ``party_ids[j, g]`` is member ``j`` of
    group ``g`` (default: every slot a distinct party, ``j * n_groups + g``)."""

    group_size: int
    n_groups: int
    party_ids: np.ndarray | None = None

    def ids(self) -> np.ndarray:
        if self.party_ids is not None:
            return self.party_ids
        return np.arange(self.group_size * self.n_groups, dtype=np.int64).reshape(
            self.group_size, self.n_groups)


@dataclass(frozen=True, eq=False)
class Record:
    """What one step sent: bits per member of each group (arrays broadcastable to
    ``(group_size, n_groups)``), plus the bits the aggregator received and the dealer sent."""

    phase: Phase
    kind: str
    round: int | None
    layout: Layout
    sent: np.ndarray
    received: np.ndarray
    server_received: int = 0
    dealer_sent: int = 0

    def sent_full(self) -> np.ndarray:
        shape = (self.layout.group_size, self.layout.n_groups)
        return np.broadcast_to(self.sent, shape)

    def received_full(self) -> np.ndarray:
        shape = (self.layout.group_size, self.layout.n_groups)
        return np.broadcast_to(self.received, shape)

    @property
    def total_sent(self) -> int:
        """Bits that crossed the network in this record (members' plus dealer's)."""
        return int(self.sent_full().sum(dtype=np.int64)) + self.dealer_sent


@dataclass
class PartyBits:
    """Per-party totals over a transcript (arrays of length ``n_parties``)."""

    online_sent: np.ndarray
    online_received: np.ndarray
    offline_received: np.ndarray

    def __add__(self, other: PartyBits) -> PartyBits:
        return PartyBits(self.online_sent + other.online_sent,
                         self.online_received + other.online_received,
                         self.offline_received + other.offline_received)


@dataclass
class _Log:
    records: list[Record] = field(default_factory=list)
    round: int = 0


def _bits_array(bits: Any, layout: Layout, name: str) -> np.ndarray:
    arr = np.asarray(bits, dtype=np.int64)
    shape = (layout.group_size, layout.n_groups)
    try:
        fits = np.broadcast_shapes(arr.shape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{name} of shape {arr.shape} does not broadcast to the layout "
                         f"(group_size, n_groups) = {shape}")
    if np.any(arr < 0):
        raise ValueError(f"{name} must be >= 0 bits")
    return arr


class Transcript:
    """A log of the bits the secure primitives send, per phase, kind and round.

    Parameters
    ----------
    group_size:
        Parties per group ``p`` (the first axis of share arrays).
    n_groups:
        Number of groups ``m`` (the second axis of share arrays when ``m > 1``).
    party_ids:
        Optional global party ids, shape ``(p, m)``; sets ``group_size`` and
        ``n_groups`` from its shape.
    """

    def __init__(self, group_size: int = 2, n_groups: int = 1, *,
                 party_ids: Any = None, _log: _Log | None = None) -> None:
        if party_ids is not None:
            ids = np.asarray(party_ids)
            if ids.ndim != 2 or ids.dtype.kind not in "iu":
                raise ValueError(f"party_ids must be a 2-d integer array (group_size, n_groups), "
                                 f"got shape {ids.shape} and dtype {ids.dtype}")
            if ids.size and ids.min() < 0:
                raise ValueError("party_ids must be >= 0")
            self._layout = Layout(ids.shape[0], ids.shape[1], ids.astype(np.int64))
        else:
            self._layout = Layout(check_positive_int(group_size, "group_size"),
                                  check_positive_int(n_groups, "n_groups"))
        self._log = _log if _log is not None else _Log()

    # -- layout -----------------------------------------------------------------------
    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def group_size(self) -> int:
        return self._layout.group_size

    @property
    def n_groups(self) -> int:
        return self._layout.n_groups

    def view(self, group_size: int = 2, n_groups: int = 1, *,
             party_ids: Any = None) -> Transcript:
        """Another layout writing into the same log and round counter."""
        return Transcript(group_size, n_groups, party_ids=party_ids, _log=self._log)

    def elements_per_group(self, secret_shape: tuple[int, ...]) -> int:
        """Secrets per group in an array of shares of shape ``(p, *secret_shape)``.

        With one group every element belongs to it; with ``m > 1`` groups the first
        axis of ``secret_shape`` must be the group axis (length ``m``).
        """
        shape = tuple(int(d) for d in secret_shape)
        if self.n_groups == 1:
            return int(np.prod(shape, dtype=np.int64))
        if not shape or shape[0] != self.n_groups:
            raise ValueError(f"shares of secret shape {shape} do not match the transcript's "
                             f"{self.n_groups} groups: the group axis (axis 1 of the shares) "
                             f"must have length {self.n_groups}")
        return int(np.prod(shape[1:], dtype=np.int64))

    # -- recording --------------------------------------------------------------------
    def record(self, *, phase: Phase, kind: str, sent: Any, received: Any,
               server_received: int = 0, dealer_sent: int = 0,
               new_round: bool = True) -> Record:
        """Append a record.

        An online record takes the next round when ``new_round`` is true, and joins the
        most recent round otherwise (a message sent alongside the previous one).
        """
        if phase not in _PHASES:
            raise ValueError(f"phase must be 'offline' or 'online', got {phase!r}")
        rnd: int | None = None
        if phase == "online":
            if new_round or self._log.round == 0:
                rnd = self._log.round
                self._log.round += 1
            else:
                rnd = self._log.round - 1
        rec = Record(phase, kind, rnd, self._layout,
                     _bits_array(sent, self._layout, "sent"),
                     _bits_array(received, self._layout, "received"),
                     int(server_received), int(dealer_sent))
        self._log.records.append(rec)
        return rec

    def record_open(self, kind: str, bits_per_member: int) -> Record:
        """One online round in which every member of every group broadcasts a payload of
        ``bits_per_member`` bits to the ``p - 1`` other members (an opening): each member
        sends and receives ``(p - 1) * bits_per_member`` bits."""
        per_member = (self.group_size - 1) * int(bits_per_member)
        bits = np.full((self.group_size, 1), per_member, dtype=np.int64)
        return self.record(phase="online", kind=kind, sent=bits, received=bits)

    def record_deal(self, kind: str, bits_per_member: int) -> Record:
        """Offline: the dealer sends ``bits_per_member`` bits to every member of every group."""
        received = np.full((self.group_size, 1), int(bits_per_member), dtype=np.int64)
        total = int(bits_per_member) * self.group_size * self.n_groups
        return self.record(phase="offline", kind=kind, sent=np.zeros((1, 1), np.int64),
                           received=received, dealer_sent=total)

    def record_to_server(self, kind: str, bits_per_member: int) -> Record:
        """One online round in which every member sends ``bits_per_member`` bits to the
        aggregator."""
        sent = np.full((self.group_size, 1), int(bits_per_member), dtype=np.int64)
        return self.record(phase="online", kind=kind, sent=sent,
                           received=np.zeros((1, 1), np.int64),
                           server_received=int(bits_per_member) * self.group_size
                           * self.n_groups)

    @contextmanager
    def parallel(self) -> Iterator[_Parallel]:
        """Run primitives side by side: each ``branch()`` starts at the same round and
        the counter continues after the longest branch.

        Examples
        --------
        >>> t = Transcript(2)
        >>> with t.parallel() as par:
        ...     with par.branch():
        ...         _ = t.record_open("a", 64)
        ...     with par.branch():
        ...         _ = t.record_open("b", 64)
        ...         _ = t.record_open("c", 64)
        >>> t.rounds
        2
        """
        par = _Parallel(self._log)
        yield par
        self._log.round = max(par.ends, default=par.start)

    # -- totals -----------------------------------------------------------------------
    @property
    def records(self) -> tuple[Record, ...]:
        return tuple(self._log.records)

    @property
    def rounds(self) -> int:
        """Online rounds so far."""
        return self._log.round

    def total_bits(self, phase: Phase = "online") -> int:
        """Every bit sent in ``phase`` (members, dealer) across all layouts."""
        return sum(r.total_sent for r in self._log.records if r.phase == phase)

    def member_bits(self, phase: Phase = "online", direction: str = "sent") -> np.ndarray:
        """Bits per (member, group) of this view's layout, shape ``(p, m)``."""
        if direction not in ("sent", "received"):
            raise ValueError(f"direction must be 'sent' or 'received', got {direction!r}")
        out = np.zeros((self.group_size, self.n_groups), dtype=np.int64)
        for r in self._log.records:
            if r.layout is self._layout and r.phase == phase:
                out += r.sent_full() if direction == "sent" else r.received_full()
        return out

    def bits_by_kind(self) -> dict[tuple[str, str], int]:
        """Total bits per (phase, kind), in the order first recorded."""
        out: dict[tuple[str, str], int] = {}
        for r in self._log.records:
            key = (r.phase, r.kind)
            out[key] = out.get(key, 0) + r.total_sent
        return out

    def party_bits(self, n_parties: int) -> PartyBits:
        """Per-party totals over every record, using each layout's party ids."""
        n = check_positive_int(n_parties, "n_parties")
        totals = {k: np.zeros(n, dtype=np.int64) for k in ("os", "or", "fr")}
        for r in self._log.records:
            ids = r.layout.ids().ravel()
            if ids.size and ids.max() >= n:
                raise ValueError(f"a record names party {int(ids.max())} but n_parties={n}")
            if r.phase == "online":
                totals["os"] += np.bincount(ids, weights=r.sent_full().ravel(),
                                            minlength=n).astype(np.int64)
                totals["or"] += np.bincount(ids, weights=r.received_full().ravel(),
                                            minlength=n).astype(np.int64)
            else:
                totals["fr"] += np.bincount(ids, weights=r.received_full().ravel(),
                                            minlength=n).astype(np.int64)
        return PartyBits(totals["os"], totals["or"], totals["fr"])

    def cost(self, n_parties: int, *, server_operations: int = 0) -> Cost:
        """The online costs as a :class:`~fedustat.cost.Cost`; ``offline_bits``
        is every bit the dealer sent."""
        bits = self.party_bits(n_parties)
        return Cost(
            bits_per_party=float(bits.online_sent.mean()),
            max_bits_per_party=int(bits.online_sent.max()),
            bits_received_per_party=float(bits.online_received.mean()),
            total_bits=self.total_bits("online"),
            rounds=self.rounds,
            server_operations=int(server_operations),
            offline_bits=self.total_bits("offline"),
        )

    def __repr__(self) -> str:
        return (f"Transcript(group_size={self.group_size}, n_groups={self.n_groups}, "
                f"rounds={self.rounds}, online_bits={self.total_bits('online')}, "
                f"offline_bits={self.total_bits('offline')})")


class _Parallel:
    """Helper of :meth:`Transcript.parallel`."""

    def __init__(self, log: _Log) -> None:
        self._log = log
        self.start = log.round
        self.ends: list[int] = []

    @contextmanager
    def branch(self) -> Iterator[None]:
        self._log.round = self.start
        yield
        self.ends.append(self._log.round)
