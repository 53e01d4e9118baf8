"""In-process simulation of a protocol: all parties in one process, messages as arrays.

The simulator is a transport: it calls the protocol's pure steps, moves the
:class:`~fedustat.protocols.base.Message` objects between them and counts every bit,
so the :class:`~fedustat.protocols.base.Cost` attached to the result is measured from
what the steps emitted, not from a formula. Exchanges among parties inside a party step
(secure computation) are counted from the
:class:`~fedustat.protocols.base.PeerTraffic` the step attaches to its message.

A party step may address its rows to other parties (a relay round,
:attr:`~fedustat.protocols.base.Message.is_peer`): the simulator then delivers every row
to the batch holding its destination party, as the next step's inbox, counts the rows'
bits as peer traffic and does not call the server step (:func:`deliver_peer_rows`).

A protocol's record-less service roles (a shuffler, a dealer:
:meth:`~fedustat.protocols.base.Protocol.service_roles`) step after the parties each round,
with what was addressed to their reserved ids; each draws from its own seed stream
(:func:`service_seed`), so runs without services keep the numbers they always had.

Parties can be split into several batches (``batch_size``) to show — and test — that a
protocol's steps give the same result whichever way the parties are grouped: each
batch draws from its own random stream spawned from the seed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_float_array,
    as_seed_sequence,
    check_positive_int,
)
from fedustat.protocols.base import (
    PEER_FROM,
    PEER_TO,
    Cost,
    Estimate,
    Message,
    PeerTraffic,
    Protocol,
    Role,
)

MAX_ROUNDS = 10_000
# Spawn-key offset of the services' seed streams: past the public client split's 2**31,
# so neither the batches' nor the server's streams move when a protocol has services.
_SERVICE_STREAMS = 2**31 + 1


def service_seed(root: np.random.SeedSequence, index: int) -> np.random.SeedSequence:
    """The seed stream of the ``index``-th service role of a run seeded with ``root``."""
    return np.random.SeedSequence(root.entropy,
                                  spawn_key=(*root.spawn_key, _SERVICE_STREAMS + int(index)))


@dataclass
class MessageLog:
    """Every bit sent, per party and in total, and the number of rounds.

    Messages between the parties and the aggregator are counted from their fields; the
    :class:`~fedustat.protocols.base.PeerTraffic` a party message carries (exchanges
    among parties and dealer material, measured by the party step) is added to the same
    per-party counters, and its rounds to the round count.

    Rows naming a service's id (``n_parties`` .. ``n_parties + n_services - 1``) are
    counted for that service (``service_sent``, ``service_received``): they enter
    ``total_bits``, not the per-party means.
    """

    n_parties: int
    n_services: int = 0
    sent_by_party: np.ndarray = field(init=False)
    received_by_party: np.ndarray = field(init=False)
    peer_sent_by_party: np.ndarray = field(init=False)
    peer_received_by_party: np.ndarray = field(init=False)
    offline_by_party: np.ndarray = field(init=False)
    server_sent: int = 0
    rounds: int = 0
    peer_rounds: int = 0

    def __post_init__(self) -> None:
        for name in ("sent_by_party", "received_by_party", "peer_sent_by_party",
                     "peer_received_by_party", "offline_by_party"):
            setattr(self, name, np.zeros(self.n_parties, dtype=np.int64))
        self.service_sent = np.zeros(self.n_services, dtype=np.int64)
        self.service_received = np.zeros(self.n_services, dtype=np.int64)

    def _add(self, party_counts: np.ndarray, service_counts: np.ndarray, ids: np.ndarray,
             bits: Any) -> None:
        """Add ``bits`` per row to the party or service each row's id names."""
        ids = np.asarray(ids, dtype=np.int64)
        bits = np.broadcast_to(np.asarray(bits, dtype=np.int64), ids.shape)
        party = ids < self.n_parties
        np.add.at(party_counts, ids[party], bits[party])
        if not np.all(party):
            np.add.at(service_counts, ids[~party] - self.n_parties, bits[~party])

    def record(self, message: Message) -> None:
        self.rounds += 1
        bits = message.bits_per_row()
        if message.sender is Role.PARTY:
            if message.parties is None:
                raise ValueError("a message from parties must say which party sent each row")
            self._check_ids(np.asarray(message.parties), "sender", "a message row")
            self._add(self.sent_by_party, self.service_sent, message.parties, bits)
            if message.peer is not None:
                self._record_peer(message.peer)
        elif message.parties is None:
            # A broadcast reaches every party (and service); each one downloads it.
            self.server_sent += int(bits) * (self.n_parties + self.n_services)
            self.received_by_party += int(bits)
            self.service_received += int(bits)
        else:
            self._check_ids(np.asarray(message.parties), "receiver", "a message row")
            self.server_sent += int(np.sum(bits))
            self._add(self.received_by_party, self.service_received, message.parties, bits)

    def _check_ids(self, ids: np.ndarray, name: str, what: str = "a relayed row") -> None:
        ids = ids.astype(np.int64, copy=False)
        bad = ids[(ids < 0) | (ids >= self.n_parties + self.n_services)]
        if bad.size:
            services = (f" and services {self.n_parties}.."
                        f"{self.n_parties + self.n_services - 1}" if self.n_services else "")
            raise ValueError(f"{what} names {name} party {int(bad[0])}, but the "
                             f"run has parties 0..{self.n_parties - 1}{services}")

    def record_peer_rows(self, senders: np.ndarray, receivers: np.ndarray,
                         bits: np.ndarray) -> None:
        """One relay round: row ``r`` carried ``bits[r]`` bits from party ``senders[r]`` to
        party ``receivers[r]`` (counted by both ends, and as one peer round)."""
        senders, receivers = np.asarray(senders, np.int64), np.asarray(receivers, np.int64)
        for name, ids in (("sender", senders), ("receiver", receivers)):
            self._check_ids(ids, name)
        self._add(self.peer_sent_by_party, self.service_sent, senders, bits)
        self._add(self.peer_received_by_party, self.service_received, receivers, bits)
        self.peer_rounds += 1

    def record_relay(self, message: Message) -> None:
        """A relay-round message (rows addressed to parties): its payload bits."""
        self.record_peer_rows(np.asarray(message.parties), np.asarray(message.fields[PEER_TO]),
                              message.payload_bits_per_row())

    def _record_peer(self, peer: PeerTraffic) -> None:
        if peer.parties.size and int(peer.parties.max()) >= self.n_parties:
            raise ValueError(f"peer traffic names party {int(peer.parties.max())}, but the run "
                             f"has parties 0..{self.n_parties - 1}")
        np.add.at(self.peer_sent_by_party, peer.parties, peer.sent)
        np.add.at(self.peer_received_by_party, peer.parties, peer.received)
        np.add.at(self.offline_by_party, peer.parties, peer.offline_received)
        # The peer exchanges of a step precede its message to the aggregator.
        self.peer_rounds += peer.rounds

    def cost(self, server_operations: int = 0, offline_bits: int = 0) -> Cost:
        """The measured :class:`~fedustat.protocols.base.Cost`.

        ``offline_bits`` is the protocol's own figure (from its estimate). It is used
        only when no party reported dealer bits in its peer traffic: a protocol that
        measures its dealer traffic may also state it, and adding both would count it
        twice. It is then not attributed to parties (``offline_bits_per_party`` = 0).
        """
        if self.n_parties == 0:
            return Cost(server_operations=server_operations, offline_bits=offline_bits)
        sent = self.sent_by_party + self.peer_sent_by_party
        received = self.received_by_party + self.peer_received_by_party
        measured_offline = int(self.offline_by_party.sum())
        return Cost(
            bits_per_party=float(sent.mean()),
            max_bits_per_party=int(sent.max()),
            bits_received_per_party=float(received.mean()),
            # A peer bit crosses the network once: count it by its sender.
            total_bits=int(sent.sum()) + self.server_sent + int(self.service_sent.sum()),
            rounds=self.rounds + self.peer_rounds,
            server_operations=server_operations,
            offline_bits=measured_offline if measured_offline else offline_bits,
            peer_bits_per_party=float(self.peer_sent_by_party.mean()),
            peer_rounds=self.peer_rounds,
            offline_bits_per_party=float(self.offline_by_party.mean()),
        )


def merge_party_messages(messages: list[Message]) -> Message:
    if len(messages) == 1:
        return messages[0]
    first = messages[0]
    fields = {
        name: np.concatenate([np.asarray(m.fields[name]) for m in messages], axis=0)
        for name in first.fields
    }
    parties = np.concatenate([np.asarray(m.parties) for m in messages])
    reports = [m.peer for m in messages if m.peer is not None]
    peer = PeerTraffic.side_by_side(reports) if reports else None
    return Message(first.sender, first.receiver, fields, first.bits_per_value, parties, peer)


def merge_round(party_messages: list[Message], service_messages: list[Message]) -> Message:
    """The parties' and the services' messages of one round as one message.

    Without service messages this is :func:`merge_party_messages` (unchanged numbers).
    With them, messages that carry no rows (and no measured peer traffic) are left out:
    parties that only wait for a service may send an empty message of any layout.
    """
    if not service_messages:
        return merge_party_messages(party_messages)
    every = [*party_messages, *service_messages]
    kept = [m for m in every if len(np.asarray(m.parties)) or m.peer is not None] \
        or every[:1]
    layouts = {tuple(sorted(m.fields)) for m in kept}
    if len(layouts) > 1:
        raise ValueError(f"the rows of one round must carry the same fields; got "
                         f"{sorted(layouts)} from the parties and services")
    return merge_party_messages(kept)


def deliver_peer_rows(message: Message) -> Message:
    """The rows of a relay-round message as their recipients receive them.

    ``parties`` becomes each row's recipient and the reserved field ``from`` its origin
    (``to`` is dropped). Rows are ordered by recipient, then origin, keeping each origin's
    own order, so what a party receives does not depend on how parties are batched.
    """
    if not message.is_peer or PEER_TO not in message.fields:
        raise ValueError("only a relay-round message (rows with a 'to' field, from parties "
                         "to parties) can be delivered to parties")
    origin = np.asarray(message.parties, dtype=np.int64)
    target = np.asarray(message.fields[PEER_TO], dtype=np.int64)
    step, same = np.diff(target), np.diff(origin)
    if np.all((step > 0) | ((step == 0) & (same >= 0))):
        # Already in delivery order (senders may write it so): no sort, no copy of the rows.
        fields = {name: np.asarray(v) for name, v in message.fields.items() if name != PEER_TO}
        fields[PEER_FROM] = origin
    else:
        order = np.lexsort((origin, target))
        fields = {name: np.asarray(v)[order] for name, v in message.fields.items()
                  if name != PEER_TO}
        fields[PEER_FROM], target = origin[order], target[order]
    bits = {name: b for name, b in message.bits_per_value.items() if name != PEER_TO}
    bits[PEER_FROM] = message.bits_per_value[PEER_TO]
    return Message(Role.PARTY, Role.PARTY, fields, bits, target)


def _message_for_batch(message: Message | None, group: slice) -> Message | None:
    """The part of a server message meant for one batch of parties (ids in ``group``)."""
    if message is None or message.parties is None:
        return message
    addressed = np.asarray(message.parties)
    if addressed.size and np.all(addressed[1:] >= addressed[:-1]):
        # Rows in recipient order (every relay round's delivery): the batch's rows are one
        # range, taken as views, so the batches together hold the rows once.
        a, b = np.searchsorted(addressed, [group.start, group.stop])
        if a == 0 and b == addressed.size:
            return message              # all of it (one batch)
        fields = {name: np.asarray(v)[a:b] for name, v in message.fields.items()}
        return Message(message.sender, message.receiver, fields, message.bits_per_value,
                       addressed[a:b])
    mine = (addressed >= group.start) & (addressed < group.stop)
    if mine.all():
        return message                  # all of it (one batch): no copy of the rows
    fields = {name: np.asarray(v)[mine] for name, v in message.fields.items()}
    return Message(message.sender, message.receiver, fields, message.bits_per_value,
                   addressed[mine])


def check_round_kind(messages: list[Message], describe: Callable[[int], str]) -> bool:
    """Whether the batches' messages of one round form a relay round (all addressed to
    parties) rather than an upload (all to the server); a mix is refused, naming a batch
    of each kind (``describe(i)`` names batch ``i``)."""
    peer = [m.is_peer for m in messages]
    if all(peer):
        return True
    if any(peer):
        to_parties, to_server = peer.index(True), peer.index(False)
        raise ValueError(f"in one round {describe(to_parties)} sent its message to parties "
                         f"and {describe(to_server)} to the server; every batch of a round "
                         "must do the same")
    return False


def service_inbox(message: Message | None, own: int) -> Message | None:
    """What service ``own`` receives of a round's message: a broadcast whole, the rows
    addressed to it, or ``None`` when none are (every transport hands it the same)."""
    part = _message_for_batch(message, slice(own, own + 1))
    if part is not None and part.parties is not None and len(part.parties) == 0:
        return None
    return part


def check_service_message(message: Message, role: str, own: int) -> None:
    """A service's message must come from the service (every row names its id ``own``)."""
    if not isinstance(message, Message):
        raise TypeError(f"service {role!r} must return a Message or None, got "
                        f"{type(message).__name__}")
    ids = np.asarray(message.parties) if message.parties is not None else None
    if message.sender is not Role.PARTY or ids is None or np.any(ids != own):
        raise ValueError(f"service {role!r} (id {own}) may send only rows that name its own "
                         "id, as a party does")


def _party_of_rows(parties: Any, n_rows: int) -> tuple[np.ndarray, int]:
    """Validated party id of every row (ids 0..K-1, every party holding a row) and K."""
    owner = np.asarray(parties)
    if owner.shape != (n_rows,) or (owner.size and owner.dtype.kind not in "iu"):
        raise ValueError(f"parties must give an integer party id for each of the {n_rows} "
                         f"rows of data, got shape {owner.shape} and dtype {owner.dtype}")
    owner = owner.astype(np.int64)
    if owner.min() < 0:
        raise ValueError("parties must be ids 0..K-1; found a negative id")
    n_parties = int(owner.max()) + 1
    held = np.bincount(owner, minlength=n_parties)
    if np.any(held == 0):
        empty = int(np.flatnonzero(held == 0)[0])
        raise ValueError(f"party {empty} holds no samples; ids must be 0..K-1 with every "
                         "party holding at least one row")
    return owner, n_parties


def _batches(n: int, batch_size: int | Sequence[int] | None) -> list[slice]:
    """Consecutive groups of party ids: equal groups of ``batch_size``, or given sizes.

    Given sizes may include 0: an empty batch (a networked run's silo that did not join)
    still takes its random stream, so the other batches keep theirs.
    """
    if not isinstance(batch_size, Sequence) or isinstance(batch_size, str):
        size = n if batch_size is None else check_positive_int(batch_size, "batch_size")
        return [slice(start, min(start + size, n)) for start in range(0, n, size)]
    sizes = [check_positive_int(s, "batch_size entries", minimum=0) for s in batch_size]
    if sum(sizes) != n:
        raise ValueError(f"batch sizes {sizes} add up to {sum(sizes)}, but the run has {n} "
                         "parties")
    ends = np.cumsum([0, *sizes])
    return [slice(int(a), int(b)) for a, b in itertools.pairwise(ends)]


@dataclass
class SimulationRun:
    """A simulated run: the release and, for studies only, the final states.

    ``server_state`` and ``party_states`` hold what a simulation keeps of every role at
    once (shares, keys, noise draws, records). A deployment never produces this object:
    each role holds only its own state and the release is :attr:`estimate` alone.
    """

    estimate: Estimate
    server_state: Any
    party_states: list[Any]


def simulate(protocol: Protocol, data: Any, *, rng: RandomLike = None,
             batch_size: int | Sequence[int] | None = None, parties: Any = None,
             dropouts: Mapping[int, Any] | None = None) -> Estimate:
    """Run ``protocol`` on ``data`` in this process and return the release.

    See :func:`simulate_run` for the parameters; this returns its ``estimate``.
    """
    return simulate_run(protocol, data, rng=rng, batch_size=batch_size,
                        parties=parties, dropouts=dropouts).estimate


def _check_dropouts(dropouts: Mapping[int, Any] | None, n: int) -> dict[int, np.ndarray]:
    """``{round: party ids}`` checked: rounds >= 0, ids in 0..n-1, each party once."""
    if dropouts is None:
        return {}
    if not isinstance(dropouts, Mapping):
        raise TypeError(f"dropouts must map a round index to the party ids that fall silent "
                        f"in it, e.g. {{2: [5, 7]}}; got {type(dropouts).__name__}")
    out: dict[int, np.ndarray] = {}
    seen: set[int] = set()
    for round_index, ids in dropouts.items():
        r = check_positive_int(round_index, "dropouts round", minimum=0)
        arr = np.atleast_1d(np.asarray(ids)).astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            raise ValueError(f"dropouts[{r}] names party {int(arr[(arr < 0) | (arr >= n)][0])}"
                             f", but the run has parties 0..{n - 1}")
        again = seen.intersection(arr.tolist())
        if again:
            raise ValueError(f"dropouts names party {min(again)} in two rounds; a party "
                             "falls silent once and stays out")
        seen.update(arr.tolist())
        out[r] = arr
    return out


def _without(message: Message | None, silent: np.ndarray, by: str) -> Message | None:
    """``message`` without the rows of silent parties (``by``: ``"parties"``, the rows'
    senders or addressees; ``"to"``, a relay row's receiver)."""
    if message is None or silent.size == 0 or message.parties is None:
        return message
    ids = np.asarray(message.parties if by == "parties" else message.fields[by])
    keep = ~np.isin(ids, silent)
    if np.all(keep):
        return message
    fields = {name: np.asarray(v)[keep] for name, v in message.fields.items()}
    return Message(message.sender, message.receiver, fields, message.bits_per_value,
                   np.asarray(message.parties)[keep], message.peer)


def simulate_run(protocol: Protocol, data: Any, *, rng: RandomLike = None,
                 batch_size: int | Sequence[int] | None = None, parties: Any = None,
                 relay: Callable[[Message], Message] | None = None,
                 dropouts: Mapping[int, Any] | None = None) -> SimulationRun:
    """Run ``protocol`` on ``data`` in this process; the release and the final states.

    Parameters
    ----------
    protocol:
        Any :class:`~fedustat.protocols.base.Protocol`.
    data:
        Array of shape (n_rows, n_columns), or (n_rows,) for one column.
    rng:
        Seed or Generator: a reproducible study (the same seed gives the same estimate).
        None (default): the protocol's undecided source of private draws becomes the OS
        CSPRNG (:meth:`~fedustat.protocols.base.Protocol.for_run`) and the release is
        labelled deployment-grade; public coins (designs, client splits) still come from
        fresh NumPy streams.
    batch_size:
        Parties per batch (default: all parties in one batch), or the sizes of
        consecutive batches (a networked run's silos, so its seeded numbers match).
    parties:
        Party id (0..K-1) of each row, for protocols whose parties hold several rows
        (e.g. clients holding many samples). Default: the protocol's own
        ``assign_parties`` (a public client split), else one party per row.
    relay:
        A function every message passes through on its way (e.g. wire encoding and
        decoding), so a transport's treatment of messages can be tested on every
        protocol; default: messages are handed over as they are.
    dropouts:
        ``{round: party ids}``: those parties fall silent in that round (0 = the parties'
        first step; a relay round counts as a round) and stay out, as a networked
        server's silos that stop answering: their messages of that round and later are
        not sent, rows addressed to them are not delivered, and a batch whose parties all
        fell silent takes no step. Each round that loses a party must be one the
        protocol's :meth:`~fedustat.protocols.base.Protocol.dropout_rule` lets go on, else
        the run stops with its reason. With one party per batch (``batch_size=1``) a
        seeded run equals a networked run of one-party silos with the same dropouts.

    Returns
    -------
    SimulationRun
        ``estimate`` is the protocol's estimate with ``cost`` replaced by the measured
        costs (bits are counted per party, whatever number of rows it holds, and include
        the peer traffic party steps report; see :meth:`MessageLog.cost` for the offline
        bits); ``server_state`` and ``party_states`` are the final states (simulation only).
    """
    if not isinstance(protocol, Protocol):
        raise TypeError(f"protocol must be a fedustat Protocol, got {type(protocol).__name__}")
    records = as_float_array(data, "data", ndim=(1, 2))
    if records.ndim == 1:
        records = records[:, None]
    n_rows = records.shape[0]
    root = as_seed_sequence(rng)
    # No seed: private draws come from the OS CSPRNG (a seed asks for a study).
    protocol = protocol.for_run(rng).configure(n_rows)
    if parties is None:
        # The split of rows among parties is public; it draws from its own stream so
        # one-row-per-party runs keep the streams they always had.
        split_rng = np.random.default_rng(
            np.random.SeedSequence(root.entropy, spawn_key=(*root.spawn_key, 2**31)))
        parties = protocol.assign_parties(records, split_rng)
    if parties is None:
        owner, n = np.arange(n_rows), n_rows
    else:
        owner, n = _party_of_rows(parties, n_rows)
        order = np.argsort(owner, kind="stable")
        records, owner = records[order], owner[order]
    batches = _batches(n, batch_size)
    seeds = root.spawn(len(batches) + 1)
    server_rng = np.random.default_rng(seeds[0])
    batch_rngs = [np.random.default_rng(s) for s in seeds[1:]]
    # An empty batch keeps its stream (above) and takes no step.
    kept = [i for i, b in enumerate(batches) if b.stop > b.start]
    batches, batch_rngs = [batches[i] for i in kept], [batch_rngs[i] for i in kept]
    # Rows of the parties start..stop-1 (owners are sorted).
    row_start = np.searchsorted(owner, np.arange(n + 1))

    silent_at = _check_dropouts(dropouts, n)
    silent = np.zeros(0, dtype=np.int64)
    party_states = [protocol.init_parties(records[row_start[b.start]:row_start[b.stop]],
                                          owner[row_start[b.start]:row_start[b.stop]])
                    for b in batches]
    server_state = protocol.init_server(n)
    roles = tuple(protocol.service_roles())
    # Services: reserved ids n, n+1, ... and their own seed streams (service_seed).
    service_states = [protocol.init_service(role, n) for role in roles]
    service_rngs = [np.random.default_rng(service_seed(root, j)) for j in range(len(roles))]
    log = MessageLog(n, len(roles))
    to_parties: Message | None = None
    for round_index in range(MAX_ROUNDS):
        now_silent = silent_at.get(round_index, np.zeros(0, np.int64))
        if now_silent.size:
            rule = protocol.dropout_rule(server_state, round_index)
            if not rule.proceed:
                raise ValueError(f"round {round_index}: parties {now_silent.tolist()} fell "
                                 f"silent; {protocol.name} cannot go on without them: "
                                 f"{rule.reason}")
            silent = np.union1d(silent, now_silent)
        outgoing, stepped = [], []
        for i, group in enumerate(batches):
            if silent.size and np.all(np.isin(np.arange(group.start, group.stop), silent)):
                continue
            stepped.append(group)
            party_states[i], msg = protocol.party_step(
                party_states[i], _without(_message_for_batch(to_parties, group), silent,
                                          "parties"), batch_rngs[i])
            msg = _without(msg, silent, "parties")
            if msg.is_peer and PEER_TO in msg.fields:
                msg = _without(msg, silent, PEER_TO)
            outgoing.append(msg)
        from_services = []
        for j, role in enumerate(roles):
            own = n + j
            service_states[j], msg = protocol.service_step(
                role, service_states[j], service_inbox(to_parties, own), service_rngs[j])
            if msg is not None:
                check_service_message(msg, role, own)
                from_services.append(msg)
        if relay is not None:
            outgoing = [relay(msg) for msg in outgoing]
            from_services = [relay(msg) for msg in from_services]
        if not outgoing and not from_services:
            raise ValueError(f"round {round_index}: every party fell silent; no release")
        # Every batch has taken this round's inbox: drop it, so that a round's rows are
        # held at most twice (as sent and merged, or merged and delivered), never more.
        to_parties = None
        names = [f"the batch of parties {b.start}..{b.stop - 1}" for b in stepped] \
            + [f"service {msg.parties[0]}" for msg in from_services]
        if check_round_kind([*outgoing, *from_services], names.__getitem__):
            # A relay round: the transport routes the rows; no server step runs.
            relayed = merge_round(outgoing, from_services)
            outgoing = from_services = []
            log.record_relay(relayed)
            to_parties = deliver_peer_rows(relayed)
            del relayed
            if relay is not None:
                to_parties = relay(to_parties)
            continue
        to_server = merge_round(outgoing, from_services)
        log.record(to_server)
        server_state, out = protocol.server_step(server_state, to_server, server_rng)
        if isinstance(out, Estimate):
            ops = int(out.cost.server_operations)
            estimate = out.with_cost(log.cost(server_operations=ops,
                                              offline_bits=out.cost.offline_bits))
            if estimate.noise != "none":
                estimate = replace(estimate, noise=protocol.randomness_grade)
            return SimulationRun(estimate, server_state, party_states)
        log.record(out)
        to_parties = out if relay is None else relay(out)
    raise RuntimeError(f"protocol {protocol.name!r} did not finish within {MAX_ROUNDS} rounds")
