"""The aggregator of a networked run: waits for the parties, runs the server steps.

:func:`serve` starts a gRPC server with mutually authenticated TLS, accepts exactly the
expected parties (certificate names ``party-0`` ... ``party-{K-1}``), and runs the
protocol's rounds: each round it collects one validated frame per party, merges them in
party order (as the simulator does), runs the server step and answers every party with
its part of the reply. Nothing but the release leaves the server's process to its caller.

The server is one event loop (gRPC's asyncio API): a waiting party is a suspended call,
not a thread, so one process holds thousands of members (devices with one record each)
at the cost of their connections' buffers. The state machine below is only ever touched
from that loop, so it needs no lock; a call that waits is resumed when the run's state
changes (:class:`_Signal`), and a member whose connection drops has its waiting calls
cancelled by gRPC, which the run learns at once.

In a relay round (the parties' steps address rows to other parties) the server runs no
protocol code: it routes each silo's sealed payloads to their destination silos
(:mod:`fedustat.runtime.network.relay`), counting their declared bits as peer traffic. It
cannot read them: they are sealed end to end with keys derived from the parties'
certificates, which it hands out in the ``Join`` reply and which every party checks
against the deployment CA (:mod:`fedustat.runtime.network.e2e`).

A protocol's record-less service roles (a shuffler, a dealer:
``Protocol.service_roles``) join like parties, each by its certificate name (the role's
name, e.g. ``shuffler``); the run waits for every one of them (``min_silos`` never lets it
go on without a service) and a missing one is named. A service occupies a slot after the
silos: its public id follows the data parties' (``service_id``), relayed rows reach it and
leave it sealed end to end exactly as between silos, and in an upload round its rows are
merged after the parties' (``merge_round``). A service with nothing to send calls
``Pass`` and gets what was addressed to it.

Failures never yield a wrong number: a party that sends a frame that fails validation
stops the run with a :class:`~fedustat.runtime.network.service.NetworkRunError` naming
the party, and every waiting party is told why. A round that lasts ``timeout`` seconds
without some party's frame, or a party whose connection drops (its presence call ends:
the server learns it at once), stops the run the same way, naming the party and which of
the two happened, unless ``min_silos`` allows going on and the protocol declares that this
round's server step may run on the rows that arrived
(:meth:`~fedustat.protocols.base.Protocol.dropout_rule`): then the step runs on the
silos that answered, the silent ones are out of the run for good (a late frame of theirs
is refused), and the release states the n it used and who dropped (docs/network.md,
"Faults").

The run is durable (:mod:`fedustat.runtime.network.run_journal`, docs/network.md
"Durability"): its members, every accepted frame (committed before it counts), the state
after each round (committed before any reply of it leaves) and the release are written
to the run directory's database. A server restarted on that directory resumes the run:
the parties resend their current frame, a frame seen before is answered as the first
(matched by its digest), other bytes for an accepted round are refused, and no round
whose replies may have left is run again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import pickle
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedustat._lazy import warm_up
from fedustat._validation import (
    RandomLike,
    RecordCheckError,
    as_seed_sequence,
    check_positive_int,
)
from fedustat.protocols.base import Estimate, Message, Protocol, Role, service_id
from fedustat.runtime.network.certs import Credentials, party_identity, party_index
from fedustat.runtime.network.observe import Observer, observed_by
from fedustat.runtime.network.relay import RelayedPayload, parse_request, reply_for
from fedustat.runtime.network.run_journal import (
    RunJournal,
    StoredRun,
    dumps,
    frame_digest,
    frame_position,
    loads,
    new_run_id,
)
from fedustat.runtime.network.service import (
    HOLD_METADATA,
    MAX_ABORT_REASON,
    MAX_HELLO_BYTES,
    REPLY_MESSAGE,
    REPLY_PENDING,
    REPLY_RELAYED,
    REPLY_RELEASE,
    SERVER_OPTIONS,
    SERVICE,
    VALIDATION_FAILED,
    NetworkRunError,
    configuration_differences,
    fingerprint,
    limit_heap_arenas,
    listen,
    load_grpc,
    public_configuration,
    release_summary,
    resolve_randomness,
)
from fedustat.runtime.simulate import MAX_ROUNDS, MessageLog, merge_round
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

__all__ = ["ServerRun", "serve"]


def _grpc() -> Any:
    return load_grpc("networked runs")


@dataclass
class _Party:
    identity: str
    rows: int
    certificate: str = ""
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: It keeps its own journal (``run_party(state_dir=)``): when its connection drops it
    #: may come back within the stage timeout, so the run does not stop at once.
    resumable: bool = False


@dataclass
class ServerRun:
    """What the server's caller gets: the release and who took part.

    ``parties``: the silos whose parties the release covers; ``absent``: expected silos
    that never joined (only with ``min_silos``); ``dropped``: silos that joined but fell
    silent during the run, in a round whose server step could go on without them;
    ``n_parties``: the n the release used.
    ``wire_bytes``: bytes of all round frames and replies as they crossed the network
    (framing, headers and sealing included; TLS records not), to set beside the payload
    the release's cost counts (``estimate.cost.total_bits``). ``services``: the service
    roles that took part (a shuffler, a dealer), in the order of their ids.
    """

    estimate: Estimate
    parties: list[str]
    rounds: int
    seconds: float
    absent: list[str] = field(default_factory=list)
    n_parties: int = 0
    wire_bytes: int = 0
    dropped: list[str] = field(default_factory=list)
    services: list[str] = field(default_factory=list)
    #: The run directory holding the run's database, and the run's id.
    run_dir: str = ""
    run_id: str = ""
    #: The run was resumed from its run directory (a restarted server).
    resumed: bool = False
    #: The run had finished: its release was read back from the run directory, not
    #: computed again.
    read_back: bool = False

    @property
    def framing_overhead(self) -> float:
        """Wire bytes over payload bytes (1.0: no overhead)."""
        payload = self.estimate.cost.total_bits / 8.0
        return self.wire_bytes / payload if payload else float("nan")


class _RefusedCallError(Exception):
    """A call the server turns down: the gRPC status and the reason the member is told."""

    def __init__(self, code: Any, details: str, reason: str | None = None) -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.reason = reason  # the metrics' label, where the status does not say it


def _refuse(code_name: str, details: str, reason: str | None = None) -> _RefusedCallError:
    return _RefusedCallError(getattr(_grpc().StatusCode, code_name), details, reason)


class _Signal:
    """Wakes every waiting call when the run's state changes (one event loop, no lock)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify_all(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def changed(self) -> None:
        await self._event.wait()


def _handler(method: Callable[[bytes, Any], Awaitable[bytes]]) -> Any:
    """A gRPC handler from a coordinator method: a refusal ends the call with its status."""
    async def handle(request: bytes, context: Any) -> bytes:
        try:
            return await method(request, context)
        except _RefusedCallError as refusal:
            # Counted and logged by its public reason (observe.py).
            names = context.auth_context().get("x509_common_name") or [b""]
            method.__self__.observer.refused_call(refusal.code.name, names[0].decode(
                "utf-8", errors="replace"), refusal.details, refusal.reason)
            await context.abort(refusal.code, refusal.details)
            raise  # abort raises; never reached
    return _grpc().unary_unary_rpc_method_handler(handle)


class _Coordinator:
    """The server's state machine; the calls of every member wait on its signal."""

    def __init__(self, protocol: Protocol, n_silos: int, rng: RandomLike,
                 timeout: float, grade: str, min_silos: int, journal: RunJournal,
                 run_id: str) -> None:
        self.protocol = protocol
        self.grade = grade
        self.n_silos = n_silos
        # Service roles take the slots after the silos (slot n_silos + j for role j).
        self.roles = tuple(protocol.service_roles())
        self.services: dict[int, _Party] = {}
        self.min_silos = min_silos
        # The silos taking part: every one, or those that joined in time (min_silos).
        self.active: list[int] = []
        self._activate(range(n_silos))
        self.timeout = timeout
        self.configuration = public_configuration(protocol)
        self.fingerprint = fingerprint(protocol)
        # Every accepted frame, the state after each round and the release are
        # committed here before they count or leave (docs/network.md, "Durability").
        self.journal = journal
        self.run = run_id
        # Digests of this round's accepted frames (a resent frame is matched by them),
        # and the members whose frame is being committed.
        self.digests: dict[int, str] = {}
        self.accepting: set[int] = set()
        self.resumed = False
        self.seeded = rng is not None
        self.root = as_seed_sequence(rng) if self.seeded else None
        self.signal = _Signal()
        self.joined: dict[int, _Party] = {}
        self.assigned = False
        self.round = 0
        # Per silo: ("round", Message) or ("relay", (origins, targets, bits, payloads)).
        self.inbox: dict[int, tuple[str, Any]] = {}
        self.replies: dict[int, bytes] = {}
        self.reply_round = -1
        self.failure: str | None = None
        self.estimate: Estimate | None = None
        self.server_state: Any = None
        self.log: MessageLog | None = None
        self.server_rng: np.random.Generator | None = None
        self.done = asyncio.Event()
        # When the current stage began: it may last `timeout`. Joining begins with the
        # first join (or the server's start, if nobody comes), each round when the one
        # before ended. Every member waiting in a stage called after it began, so its
        # own deadline (party_deadline) ends after the server's.
        self.stage_started = time.monotonic()
        # Members per second in the stage before (paces "come back in"; 0 before any).
        self.stage_rate = 0.0
        self.first_join = True
        # Bytes of every Round/Relay frame received and every reply sent (framing included).
        self.wire_bytes = 0
        # Why a party was turned away at Join (configuration, duplicate): named on timeout.
        self.refused: dict[str, str] = {}
        self.directory: bytes | None = None
        # Silos whose waiting call ended or whose connection dropped: they will not send
        # again.
        self.gone: set[int] = set()
        # Open presence calls per slot (a restarted process may hold a second one).
        self.connections: dict[int, int] = {}
        # Silos that fell silent in a round that went on without them: silo -> round.
        self.dropped: dict[int, int] = {}
        self.dropout_reason = ""
        # Members that received the release (the server stays until every one has).
        self.released_to: set[int] = set()
        # Metrics, health and event log (observe.py); serve gives it the run's.
        self.observer = Observer()

    # ---------------------------------------------------------------- helpers
    def _identity(self, context: Any) -> tuple[str, int]:
        names = context.auth_context().get("x509_common_name") or []
        identity = names[0].decode() if names else ""
        if identity in self.roles:
            return identity, self.n_silos + self.roles.index(identity)
        index = party_index(identity)
        if index is None or index >= self.n_silos:
            services = f" or its services {', '.join(self.roles)}" if self.roles else ""
            raise _refuse("PERMISSION_DENIED",
                          f"{identity or 'an unnamed peer'} is not one of this run's parties "
                          f"(party-0 .. party-{self.n_silos - 1}){services}")
        return identity, index

    def _name(self, slot: int) -> str:
        """The identity in a slot: a silo's party name, or a service role."""
        return party_identity(slot) if slot < self.n_silos else self.roles[slot - self.n_silos]

    def _member(self, slot: int) -> _Party | None:
        return self.joined.get(slot) if slot < self.n_silos else self.services.get(slot)

    def _activate(self, silos: Any) -> None:
        """Set the silos taking part; ``slots`` (who sends each round: the active silos,
        then every service) and its set are kept with them, as every call consults them
        (a list scan per call would make a round of n devices cost n^2)."""
        self.active = list(silos)
        self.slots = [*self.active, *range(self.n_silos, self.n_silos + len(self.roles))]
        self.slot_set = frozenset(self.slots)

    def absent(self) -> list[str]:
        """Silos that never took part: neither active nor dropped during the run."""
        return [party_identity(i) for i in range(self.n_silos)
                if i not in self.slot_set and i not in self.dropped]

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
            self.observer.failed(reason)
        self.signal.notify_all()
        self.done.set()

    async def _wait(self, ready: Callable[[], bool], index: int,
                    hold: float | None = None) -> bool:
        """Suspend a call until ``ready()`` or a failure (the watchdog bounds the wait);
        a detached member's call (``hold`` seconds) returns False when it is not ready by
        then, and the member asks again later (Fetch)."""
        until = None if hold is None else time.monotonic() + hold
        try:
            while not ready() and self.failure is None:
                if until is None:
                    await self.signal.changed()
                    continue
                left = until - time.monotonic()
                if left <= 0:
                    return False
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.signal.changed(), left)
        except asyncio.CancelledError:
            # gRPC cancels the call when the member's connection drops or it gives up
            # waiting: it can receive no reply, so the watchdog need not wait out the
            # timeout. A detached member's connection comes and goes by design.
            if hold is None:
                self._gone(index)
            raise
        if self.failure is not None:
            raise _refuse("ABORTED", self.failure)
        return True

    def watch(self) -> None:
        """Fail the run when a stage has lasted ``timeout`` seconds, or at once when a
        party it waits for has lost its connection and the run cannot go on without it;
        or go on without the silent silos where ``min_silos`` and the protocol allow it."""
        if self.failure is not None or self.estimate is not None:
            return
        stalled = time.monotonic() - self.stage_started > self.timeout
        # Called every 0.2 s: with 10^5 members, a scan of every slot each time cost a
        # tenth of the server's core. Nobody gone and no timeout: nothing to decide.
        if not stalled and not self.gone:
            return
        if self.assigned:
            silent = [i for i in self.active if i not in self.inbox]
            services = [i for i in self.slots if i >= self.n_silos and i not in self.inbox]
            if services:
                # Every round needs every service (its rows, or its pass): no round
                # goes on without one.
                if stalled or any(self._lost(i) for i in services):
                    self._fail(self._silence(f"round {self.round}", [*services, *silent],
                                             waited=stalled))
                return
            # Every silent silo's connection closed: no need to wait out the timeout.
            # (A resumable member that dropped may come back within the stage.)
            closed = bool(silent) and all(self._lost(i) for i in silent)
            # Without min_silos every silo is needed: one that is gone ends the run now.
            needed = self.min_silos >= self.n_silos and any(self._lost(i) for i in silent)
            if stalled or closed or needed:
                self._round_without(silent, stop=True, waited=stalled)
            return
        waiting = [i for i in range(self.n_silos + len(self.roles)) if self._member(i) is None]
        # Every missing silo had joined and left: no need to wait out the timeout.
        left = all(i in self.gone for i in waiting)
        if len(self.joined) >= self.min_silos and len(self.services) == len(self.roles) \
                and (stalled or left):
            # Silos that never joined (or left before the start) contributed
            # nothing: the run goes on with the others, and the release names who
            # took part.
            self._assign()
            return
        if not stalled:
            return
        names = [self._name(i) for i in waiting]
        named = [f"{name} (refused: {self.refused[name]})" if name in self.refused
                 else name for name in names]
        self._fail(f"joining: no answer within {self.timeout:g} s from "
                   f"{_listed(named)}; no release")

    def _lost(self, slot: int) -> bool:
        """Whether a member's dropped connection ends its part at once: one that keeps
        its own journal (it said so at join) may come back within the stage timeout."""
        if slot not in self.gone:
            return False
        member = self._member(slot)
        return member is None or not member.resumable

    def _silence(self, stage: str, slots: list[int], why: str = "",
                 waited: bool = True) -> str:
        """Why a stage stopped: whose connection dropped, who did not answer in time.

        ``waited``: the stage timed out. When a dropped connection stopped it before,
        the members still busy are named as not having answered *yet* (on a loaded
        machine a slow member's answer may simply not have arrived), never as silent
        for the whole timeout."""
        dropped = [self._name(i) for i in slots if i in self.gone]
        quiet = [self._name(i) for i in slots if i not in self.gone]
        parts = []
        if dropped:
            parts.append(f"the connection of {_listed(dropped)} dropped (its process "
                         "ended or its network failed)")
        if quiet and waited:
            parts.append(f"no answer within {self.timeout:g} s from {_listed(quiet)}")
        elif quiet:
            parts.append(f"no answer yet from {_listed(quiet)}")
        return f"{stage}: {'; '.join(parts)}{'; ' + why if why else ''}; no release"

    def _round_without(self, silent: list[int], stop: bool, waited: bool = True) -> None:
        """Run this round's server step without the silent silos, or stop the run.

        It goes on only with ``min_silos`` below ``n_silos``, at least ``min_silos`` silos
        answered and the protocol's :meth:`~fedustat.protocols.base.Protocol.dropout_rule`
        allowing it. A relay round that goes on routes the rows that arrived; rows
        addressed to a silent silo are not delivered.
        Otherwise the run stops when ``stop`` (the stage timed out, or the silent silos'
        connections are gone).
        """
        current = self.round
        why = ""
        if self.min_silos < self.n_silos:
            answered = sum(1 for i in self.inbox if i < self.n_silos)
            if answered < self.min_silos:
                why = (f"{answered} of {len(self.active)} silos answered, fewer than "
                       f"min_silos = {self.min_silos}")
            else:
                rule = self.protocol.dropout_rule(self.server_state, current)
                if rule.proceed:
                    # The silent silos are out of the run for good: their later frames
                    # are refused, so none of their rows is mixed into a later round.
                    for i in silent:
                        self.dropped[i] = current
                    self._activate(i for i in self.active if i in self.inbox)
                    self.dropout_reason = rule.reason
                    if any(kind == "relay" for kind, _ in self.inbox.values()):
                        self._route(current)
                    else:
                        self._server_step(current)
                    return
                why = f"{self.protocol.name} cannot go on without it: {rule.reason}"
        if stop:
            self._fail(self._silence(f"round {current}", silent, why, waited))

    # ---------------------------------------------------------------- presence
    async def presence(self, request: bytes, context: Any) -> bytes:
        """A member's call held open for the whole run: when its connection drops (its
        process was killed, its network failed) gRPC ends the call, and the run learns it
        at once instead of after the stage timeout. The reply, when the run ends, is why
        it stopped (empty after a release), so a member busy in its own step when the run
        failed still learns the reason."""
        _, index = self._identity(context)
        self.connections[index] = self.connections.get(index, 0) + 1
        if (member := self._member(index)) is not None and member.resumable:
            # Its restarted process is back (it resends its frame next).
            self.gone.discard(index)
        try:
            # gRPC cancels this wait when the call ends from the member's side.
            await self.done.wait()
        finally:
            self._disconnected(index)
        return (self.failure or "").encode()

    def _disconnected(self, index: int) -> None:
        self.connections[index] = self.connections.get(index, 1) - 1
        if self.connections[index] > 0 or self.done.is_set() or self._member(index) is None:
            return
        self._gone(index)

    def _gone(self, index: int) -> None:
        """Member ``index`` can no longer answer. Before the start nothing
        of it has been used: it is as if it had never joined (a restarted process may join
        in its place)."""
        self.gone.add(index)
        if not self.assigned:
            if index >= self.n_silos:
                self.services.pop(index, None)
            else:
                self.joined.pop(index, None)
        self.signal.notify_all()

    # ---------------------------------------------------------------- Join
    async def join(self, request: bytes, context: Any) -> bytes:
        identity, index = self._identity(context)
        try:
            if len(request) > MAX_HELLO_BYTES:
                raise ValueError(f"{len(request)} bytes, more than {MAX_HELLO_BYTES}")
            hello = json.loads(request.decode())
            # A service holds no records (its hello names its role instead).
            rows = 0 if index >= self.n_silos else check_positive_int(hello["rows"], "rows")
            party_fingerprint = str(hello["fingerprint"])
            configuration = hello.get("configuration")
            if configuration is not None and not isinstance(configuration, dict):
                raise TypeError("configuration must be a JSON object")
            resumable = hello.get("resumable", False) is True
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError,
                AttributeError) as exc:
            raise _refuse("INVALID_ARGUMENT",
                          f"hello from {identity} is malformed: {exc}") from None
        if party_fingerprint != self.fingerprint or (
                configuration is not None and configuration != self.configuration):
            reason = self._mismatch(identity, party_fingerprint, configuration)
            self.refused[identity] = reason
            raise _refuse("FAILED_PRECONDITION", reason, "configuration")
        existing = self._member(index)
        if existing is not None and existing.resumable and resumable \
                and existing.rows == rows:
            # The same member's restarted process, which had not kept its assignment:
            # it rejoins under its identity and gets the same assignment.
            self.gone.discard(index)
            if not await self._wait(lambda: self.assigned, index, _hold(context)):
                return self._pending()
            return self._assignment(index)
        if existing is not None:
            raise _refuse("ALREADY_EXISTS", f"{identity} has already joined this run")
        if self.assigned:
            raise _refuse("FAILED_PRECONDITION",
                          f"{identity} joined too late: the run started without it", "late")
        pem = context.auth_context().get("x509_pem_cert") or [b""]
        member = _Party(identity, rows, pem[0].decode(), resumable=resumable)
        if index >= self.n_silos:
            self.services[index] = member
        else:
            self.joined[index] = member
        self.gone.discard(index)
        self.observer.joined(identity, len(self.joined) + len(self.services))
        if self.first_join:
            self.first_join = False
            self.stage_started = time.monotonic()
        if len(self.joined) == self.n_silos and len(self.services) == len(self.roles):
            self._assign()
        if not await self._wait(lambda: self.assigned, index, _hold(context)):
            return self._pending()
        return self._assignment(index)

    def _assignment(self, index: int) -> bytes:
        """A member's join reply: the run, its size, the member's ids and the slots'."""
        party = self._member(index)
        assert party is not None
        return json.dumps({"run": self.run, "n_rows": self.n_rows,
                           "n_parties": self.n_parties, "silo": index,
                           "n_silos": self.n_silos,
                           "ids": [int(party.ids[0]), int(party.ids[-1]) + 1],
                           # O(1) per member: every slot's ids and certificates, which
                           # only relay rounds need, come from Peers.
                           "services": list(self.roles)}).encode()

    def _mismatch(self, identity: str, party_fingerprint: str,
                  configuration: dict[str, Any] | None) -> str:
        """Why a member's configuration is refused, naming each option that differs."""
        differences = [] if configuration is None else configuration_differences(
            configuration, self.configuration, me=identity, them="server")
        if not differences:
            # Nothing to compare key by key (or the same settings hashed otherwise, e.g.
            # another version of fedustat): the hashes are all there is to show.
            return (f"{identity}'s protocol configuration {party_fingerprint} differs from "
                    f"the server's {self.fingerprint}")
        return (f"{identity}'s protocol configuration differs from the server's: "
                + "; ".join(differences))

    def _assign(self) -> None:
        """Party ids per silo: its own id when a silo is one party, else one id per row."""
        self._activate(sorted(self.joined))
        self.n_rows = sum(p.rows for p in self.joined.values())
        self.protocol = self.protocol.configure(self.n_rows)
        start, firsts = 0, []
        for i in range(self.n_silos):
            # A silo that did not join holds no party ids (an empty range).
            firsts.append(start)
            if i in self.joined:
                party = self.joined[i]
                width = 1 if self.protocol.silo_is_one_party else party.rows
                party.ids = np.arange(start, start + width, dtype=np.int64)
                start += width
        self.n_parties = start
        # Each service's one id follows the data parties' (service_id).
        for j, role in enumerate(self.roles):
            sid = service_id(self.n_parties, self.roles, role)
            self.services[self.n_silos + j].ids = np.array([sid], dtype=np.int64)
        self.bounds = np.array([*firsts, start, *(start + 1 + np.arange(len(self.roles)))],
                               dtype=np.int64)
        self.server_state = self.protocol.init_server(self.n_parties)
        self.log = MessageLog(self.n_parties, len(self.roles))
        self._stage_ended(len(self.joined) + len(self.services))
        if self.seeded:
            # The simulator's streams for batches of these sizes: same seed, same numbers.
            self.server_rng = np.random.default_rng(self.root.spawn(self.n_silos + 1)[0])
        else:
            self.server_rng = np.random.default_rng(np.random.SeedSequence())
        self.assigned = True
        self._record_start()
        self.signal.notify_all()

    # ---------------------------------------------------------------- Round / Relay
    def _expectation(self, identity: str, party: _Party, current: int) -> Expectation:
        # A service speaks for the whole run (e.g. the shuffled multiset of every message).
        rows = party.rows if party.rows else self.n_rows
        return Expectation(self.fingerprint, self.run, current, "party", identity,
                           Role.SERVER, party_ids=party.ids,
                           max_elements=max(1 << 20, 64 * rows * 1024))

    async def round_trip(self, request: bytes, context: Any) -> bytes:
        return await self._arrive("round", request, context)

    async def relay_trip(self, request: bytes, context: Any) -> bytes:
        return await self._arrive("relay", request, context)

    async def pass_trip(self, request: bytes, context: Any) -> bytes:
        """A service with nothing to send this round; the reply is what it was sent."""
        return await self._arrive("pass", request, context)

    async def _arrive(self, kind: str, request: bytes, context: Any) -> bytes:
        identity, index = self._identity(context)
        party = self._member(index)
        if index in self.dropped:
            # Checked first (a dropped silo has left the round's slots) and before
            # decoding: a late frame is no fault of the run's.
            raise _refuse("FAILED_PRECONDITION",
                          f"{identity} dropped out of this run in round "
                          f"{self.dropped[index]} (no answer in time); its rows are not used")
        if not self.assigned or party is None or index not in self.slot_set:
            raise _refuse("FAILED_PRECONDITION", f"{identity} sent a round before joining")
        if self.failure is not None:
            raise _refuse("ABORTED", self.failure)
        if kind == "pass" and index < self.n_silos:
            raise _refuse("INVALID_ARGUMENT",
                          f"{identity} is a party: only a service may pass a round")
        current = self.round
        assert party is not None
        digest = frame_digest(request)
        resent = self._resent(kind, request, digest, identity, index, current)
        if resent is not None:
            return await self._answer(resent, index, context)
        try:
            entry = self._parse(kind, request, identity, index, current)
        except WireError as exc:
            self._fail(f"round {current}: {exc}; no release")
            raise _refuse("INVALID_ARGUMENT", str(exc)) from None
        if index in self.inbox or index in self.accepting:
            raise _refuse("ALREADY_EXISTS", f"{identity} already sent round {current}")
        # Durable before it counts: committed with the frames that arrive with it, then
        # counted (even if this call is cancelled meanwhile).
        self.accepting.add(index)

        def counted() -> None:
            self.accepting.discard(index)
            # Unless the round went on without this silo meanwhile (it dropped out).
            if self.round == current and index in self.slot_set and self.failure is None:
                self._accept(index, kind, entry, len(request), digest)

        try:
            await self.journal.frame(current, index, kind, digest, request, counted)
        except OSError as exc:
            self.accepting.discard(index)
            self._fail(f"round {current}: {exc}; no release")
        if self.failure is not None:
            raise _refuse("ABORTED", self.failure)
        if index in self.dropped:
            raise _refuse("FAILED_PRECONDITION",
                          f"{identity} dropped out of this run in round "
                          f"{self.dropped[index]} (no answer in time); its rows are not used")
        return await self._answer(current, index, context)

    def _parse(self, kind: str, request: bytes, identity: str, index: int,
               current: int) -> Any:
        """A member's frame of round ``current``, validated (a WireError if it fails)."""
        expect = self._expectation(identity, self._member(index), current)
        if kind == "pass":
            # A service's pass names its run and round (one that names none is taken
            # for the current round).
            if request and frame_position(request, kind, identity) != (self.run, current):
                raise WireError(identity, "pass", f"does not name run {self.run!r} and "
                                                  f"round {current}")
            return None
        if kind == "round":
            return decode(request, expect).message
        return parse_request(request, expect, index, self.bounds)

    def _resent(self, kind: str, request: bytes, digest: str, identity: str, index: int,
                current: int) -> int | None:
        """For a frame seen before (a member that retried after a lost connection, or
        resent from its journal after a restart): the round whose answer it gets, the
        original's. None for a new frame of this round. A frame of another run, or other
        bytes for a round whose frame was accepted, is refused (no frame counts twice)."""
        try:
            run, round_ = frame_position(request, kind, f"party {identity!r}")
        except WireError:
            return None  # decoding names the fault
        if run != self.run:
            raise _refuse("FAILED_PRECONDITION",
                          f"{identity} sent a frame of run {run!r}, but this server's "
                          f"run is {self.run!r}")
        if round_ > current:
            return None
        known = (self.digests.get(index) if round_ == current
                 else self.journal.digest(round_, index))
        if known is None:
            if round_ == current:
                return None
            raise _refuse("FAILED_PRECONDITION",
                          f"{identity} sent a frame for round {round_}, which is over "
                          f"(the run is in round {current})")
        if known != digest:
            raise _refuse("ALREADY_EXISTS",
                          f"{identity} sent other bytes for round {round_}, whose frame "
                          f"was accepted (sha256 {known[:12]}); a round's frame counts "
                          "once and cannot be replaced")
        if round_ < current and round_ != self.reply_round:
            raise _refuse("FAILED_PRECONDITION",
                          f"{identity} resent its frame of round {round_}, which was "
                          f"answered (the run is in round {current})")
        return round_

    async def _answer(self, round_: int, index: int, context: Any) -> bytes:
        """The reply of ``round_`` to member ``index`` once it is ready."""
        if not await self._wait(lambda: self.reply_round >= round_, index, _hold(context)):
            return self._pending()
        return self._reply(index)

    def _accept(self, index: int, kind: str, entry: Any, size: int, digest: str) -> None:
        """A committed frame counts: into this round's inbox; the last one runs the
        round (the server step, or routing the relayed rows)."""
        current = self.round
        self.inbox[index] = (kind, entry)
        self.digests[index] = digest
        self.wire_bytes += size
        self.observer.accept(size)
        if len(self.inbox) == len(self.slots):
            kinds = {i: k for i, (k, _) in self.inbox.items() if k != "pass"}
            if len(set(kinds.values())) > 1:
                relayed = min(i for i, k in kinds.items() if k == "relay")
                uploaded = min(i for i, k in kinds.items() if k == "round")
                self._fail(f"round {current}: {self._name(relayed)} sent rows to "
                           f"parties and {self._name(uploaded)} a message to the "
                           "server; every party of a round must do the same; no release")
            elif "relay" in kinds.values():
                self._route(current)
            else:
                self._server_step(current)

    def _pending(self) -> bytes:
        """"Not yet", with when to come back: the time the stage still needs for the
        members missing, at the rate members have arrived in it (in its first seconds, at
        the rate of the stage before, when there was one), at least 0.5 s and at most
        what is left of the stage timeout. A detached device returns once, about when the
        stage ends, instead of taking every minute a TLS handshake that the members still
        missing need: with 10^5 devices, early joiners asking every 60 s had starved the
        late ones of the server's handshakes."""
        if self.assigned:
            arrived, missing = len(self.inbox), len(self.slots) - len(self.inbox)
        else:
            arrived = len(self.joined) + len(self.services)
            missing = self.n_silos + len(self.roles) - arrived
        elapsed = time.monotonic() - self.stage_started
        rate = arrived / max(elapsed, 1e-3)
        if elapsed < PACE_WARMUP_SECONDS and self.stage_rate:
            rate = self.stage_rate
        left = self.timeout - elapsed
        wait = min(max(missing / max(rate, 1.0), PENDING_MIN_SECONDS),
                   max(left, PENDING_MIN_SECONDS))
        return REPLY_PENDING + json.dumps({"retry_after": round(wait, 3)}).encode()

    def _stage_ended(self, members: int) -> None:
        """A stage (joining, a round) ended with ``members`` arrivals: their rate paces
        the next stage's first "not yet" answers (:meth:`_pending`), and the next stage
        begins now."""
        elapsed = time.monotonic() - self.stage_started
        self.stage_rate = members / max(elapsed, 1e-3)
        self.stage_started = time.monotonic()

    def _reply(self, index: int) -> bytes:
        reply = self.replies[index]
        self.wire_bytes += len(reply)
        self.observer.sent(len(reply))
        if self.estimate is not None and index not in self.released_to:
            self.released_to.add(index)
            self.journal.released_to(index)
        return reply

    async def fetch(self, request: bytes, context: Any) -> bytes:
        """A detached member asks again for what its last call did not wait for: its
        assignment (``{"join": true}``) or the reply to the round it sent
        (``{"round": r}``); held like that call, answered "not yet" again if need be."""
        identity, index = self._identity(context)
        try:
            asked = json.loads(bytes(request[:256]).decode())
            wanted = -1 if asked.get("join") is True else int(asked["round"])
        except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError,
                AttributeError) as exc:
            raise _refuse("INVALID_ARGUMENT",
                          f"{identity}'s fetch is malformed: {exc}") from None
        if index in self.dropped:
            raise _refuse("FAILED_PRECONDITION",
                          f"{identity} dropped out of this run in round "
                          f"{self.dropped[index]} (no answer in time); its rows are not used")
        if self._member(index) is None:
            raise _refuse("FAILED_PRECONDITION", f"{identity} fetched before joining")
        hold = _hold(context)
        if wanted < 0:
            if not await self._wait(lambda: self.assigned, index, hold):
                return self._pending()
            return self._assignment(index)
        # Its reply is kept until the member sends the next round, which needs it.
        sent = index in self.inbox and self.round == wanted
        if not (sent or self.reply_round == wanted):
            raise _refuse("FAILED_PRECONDITION",
                          f"{identity} fetched the reply of round {wanted}, which it has "
                          f"not sent (the run is in round {self.round})")
        if not await self._wait(lambda: self.reply_round >= wanted, index, hold):
            return self._pending()
        return self._reply(index)

    async def peers(self, request: bytes, context: Any) -> bytes:
        """For relay rounds: every slot's first party id (silos, then services, then the
        end) and every silo's certificate (empty for one that did not join), which each
        party checks against the CA before deriving a key with it. Built once."""
        identity, index = self._identity(context)
        if not self.assigned or self._member(index) is None:
            raise _refuse("FAILED_PRECONDITION",
                          f"{identity} asked for the parties' certificates before joining")
        if self.directory is None:
            # Silos, then services (their slots follow, as their ids do).
            self.directory = json.dumps({
                "bounds": [int(b) for b in self.bounds],
                "certificates": [
                    member.certificate if (member := self._member(i)) is not None else ""
                    for i in range(self.n_silos + len(self.roles))]}).encode()
        return self.directory

    async def abort(self, request: bytes, context: Any) -> bytes:
        """A party stops the run, saying why (a relayed payload it cannot open, or its own
        records failing a public check: then only the check's name, never their values)."""
        identity, _ = self._identity(context)
        reason = bytes(request[:MAX_ABORT_REASON]).decode("utf-8", errors="replace")
        if self.estimate is None:
            stage = f"round {self.round}" if self.assigned else "joining"
            told = (f"{identity} {reason}" if reason.startswith(VALIDATION_FAILED)
                    else f"{identity} stopped the run: {reason}")
            self._fail(f"{stage}: {told}; no release")
        return b""

    def _route(self, current: int) -> None:
        """A relay round: count the declared peer rows, forward each sealed payload."""
        entries = [self.inbox[i][1] for i in self.slots if self.inbox[i][0] == "relay"]
        self.inbox = {}
        try:
            self.log.record_peer_rows(np.concatenate([e[0] for e in entries]),
                                      np.concatenate([e[1] for e in entries]),
                                      np.concatenate([e[2] for e in entries]))
        except ValueError as exc:
            self._fail(f"round {current}: {exc}; no release")
            return
        inbound: dict[int, list[RelayedPayload]] = {i: [] for i in self.slots}
        for entry in entries:
            for payload in entry[3]:
                # Rows for a member that fell silent this round (a relay round that the
                # protocol lets go on without it) are not delivered: it is out of the run.
                if payload.receiver in inbound:
                    inbound[payload.receiver].append(_forward(payload))
        self.replies = {i: REPLY_RELAYED + reply_for(inbound[i], protocol=self.fingerprint,
                                                      run=self.run, round_=current)
                        for i in self.slots}
        self._next_round(current)

    def _server_step(self, current: int) -> None:
        merged = merge_round([self.inbox[i][1] for i in self.active],
                             [self.inbox[i][1] for i in self.slots
                              if i >= self.n_silos and self.inbox[i][0] == "round"])
        self.inbox = {}
        try:
            self.log.record(merged)
            self.server_state, out = self.protocol.server_step(self.server_state, merged,
                                                               self.server_rng)
        except (ValueError, TypeError, RuntimeError) as exc:
            # A records check run on the server (the trusted curator's) names only the
            # public check: every party is told this reason.
            told = exc.check if isinstance(exc, RecordCheckError) else exc
            self._fail(f"round {current}: the server step refused the parties' messages: "
                       f"{told}; no release")
            return
        if isinstance(out, Estimate):
            ops = int(out.cost.server_operations)
            if out.noise != "none":
                out = replace(out, noise=self.grade)
            used = self.n_used()
            if self.dropped:
                # Who fell silent and why the step could go on: public facts of the run.
                out = replace(out, diagnostics={**out.diagnostics, "dropout": {
                    "n_parties": used, "silos": len(self.active),
                    "dropped": {party_identity(i): r for i, r in sorted(self.dropped.items())},
                    "rule": self.dropout_reason}})
            self.estimate = out.with_cost(self.log.cost(server_operations=ops,
                                                        offline_bits=out.cost.offline_bits))
            # Who took part, compactly: the count, and the names of those who did not.
            summary = release_summary(self.estimate) | {
                "n_parties": used, "silos": len(self.active),
                "absent": self.absent(),
                "dropped": [party_identity(i) for i in sorted(self.dropped)]}
            reply = REPLY_RELEASE + json.dumps(summary).encode()
            self.replies = dict.fromkeys(self.slots, reply)
            self.done.set()
        else:
            self.log.record(out)
            parts = parts_for(out, [self._member(i).ids for i in self.slots])
            self.replies = {i: REPLY_MESSAGE + encode(Envelope(
                self.fingerprint, self.run, current, "server", "server", part))
                for i, part in zip(self.slots, parts, strict=True)}
        self._next_round(current)

    def n_used(self) -> int:
        """Parties of the silos still in the run: the n of a release."""
        return sum(self.joined[i].ids.size for i in self.active)

    def progress(self) -> dict[str, Any]:
        """The run's public progress for its metrics and health check (observe.py): read
        from the metrics listener's thread, so only numbers and lengths."""
        members = self.n_silos + len(self.roles)
        return {"state": "running" if self.assigned else "joining", "round": self.round,
                "arrived": len(self.inbox) if self.assigned else len(self.joined)
                + len(self.services),
                "expected": len(self.slots) if self.assigned else members,
                "joined": len(self.joined) + len(self.services), "dropped": len(self.dropped),
                "stage_seconds": time.monotonic() - self.stage_started,
                "stage_timeout": self.timeout}

    def _next_round(self, current: int) -> None:
        self.round = current + 1
        self.reply_round = current
        self.digests = {}
        self._stage_ended(len(self.slots))
        self.observer.round_ended(current, len(self.slots))
        if self.round > MAX_ROUNDS:
            self._fail(f"protocol {self.protocol.name!r} did not finish within {MAX_ROUNDS} "
                       "rounds")
        # Committed before any waiting call is woken: no reply of this round leaves
        # before the state, rng and replies it came from are on disk.
        self._checkpoint(current)
        self.signal.notify_all()

    # ---------------------------------------------------------------- durability
    def _snapshot(self) -> bytes:
        """The server's state between rounds: enough to go on as if never stopped."""
        assert self.server_rng is not None
        return dumps({
            "round": self.round, "reply_round": self.reply_round, "replies": self.replies,
            "server_state": self.server_state, "log": self.log,
            "rng": self.server_rng.bit_generator.state, "active": self.active,
            "dropped": self.dropped, "dropout_reason": self.dropout_reason,
            "wire_bytes": self.wire_bytes, "estimate": self.estimate,
            "n_rows": self.n_rows, "n_parties": self.n_parties, "bounds": self.bounds,
            "ids": {slot: member.ids for slot, member in
                    [*self.joined.items(), *self.services.items()]}})

    def _record_start(self) -> None:
        """The run has started: its members and the state before round 0."""
        members = [(slot, member.identity, member.rows, member.certificate,
                    member.resumable)
                   for slot, member in sorted([*self.joined.items(), *self.services.items()])]
        try:
            self.journal.start(members, self._snapshot())
        except (OSError, sqlite3.Error, pickle.PicklingError, TypeError,
                AttributeError) as exc:
            self._fail(f"joining: the run database refused the start of the run "
                       f"({type(exc).__name__}: {exc}); no release")

    def _checkpoint(self, current: int) -> None:
        """Commit the state after round ``current`` (and the release it made)."""
        if self.failure is not None:
            return
        release = None
        if self.estimate is not None:
            summary = json.loads(next(iter(self.replies.values()))[1:])
            release = (dumps(self.estimate), summary)
        try:
            self.journal.checkpoint(self.round, self._snapshot(), release)
        except (OSError, sqlite3.Error, pickle.PicklingError, TypeError,
                AttributeError) as exc:
            self.estimate = None
            self._fail(f"round {current}: the run database refused the state after the "
                       f"round ({type(exc).__name__}: {exc}); no release")

    def restore(self, stored: StoredRun) -> None:
        """Go on with a run from its run directory: the state after its last committed
        round, then the frames accepted since (a round they complete runs again from the
        same state and rng state: nothing of it had left). Before the start nothing is
        restored but the run id: the members join again."""
        if stored.checkpoint is None:
            return
        self.resumed = True
        for slot, identity, rows, certificate, resumable in stored.members:
            member = _Party(identity, rows, certificate, resumable=resumable)
            (self.services if slot >= self.n_silos else self.joined)[slot] = member
        state = loads(stored.checkpoint[1])
        self.n_rows, self.n_parties = state["n_rows"], state["n_parties"]
        self.protocol = self.protocol.configure(self.n_rows)
        for slot, ids in state["ids"].items():
            self._member(slot).ids = ids
        self.bounds = state["bounds"]
        self.round, self.reply_round = state["round"], state["reply_round"]
        self.replies, self.server_state, self.log = (state["replies"],
                                                     state["server_state"], state["log"])
        self.server_rng = np.random.default_rng()
        self.server_rng.bit_generator.state = state["rng"]
        self.dropped, self.dropout_reason = state["dropped"], state["dropout_reason"]
        self.wire_bytes, self.estimate = state["wire_bytes"], state["estimate"]
        self._activate(state["active"])
        self.assigned, self.first_join = True, False
        self.released_to = set(stored.released)
        self.stage_started = time.monotonic()
        if self.estimate is not None:
            self.done.set()
            return
        for round_, slot, kind, body in stored.frames:
            if round_ == self.round and slot in self.slot_set:
                entry = self._parse(kind, body, self._name(slot), slot, round_)
                self._accept(slot, kind, entry, len(body), frame_digest(body))


#: Bounds of the "come back in" a detached member is told (seconds).
PENDING_MIN_SECONDS = 0.5
#: Seconds into a stage before its own arrival rate paces the "come back in" answers.
PACE_WARMUP_SECONDS = 5.0
#: Members named in a reason at most; a run of 10^4 devices names the first and counts
#: the rest (the reason travels to every member and into logs).
NAMED_AT_MOST = 20


def _listed(names: list[str]) -> str:
    """``a, b, c`` or, beyond :data:`NAMED_AT_MOST`, the first ones and how many more."""
    if len(names) <= NAMED_AT_MOST:
        return ", ".join(names)
    return (f"{', '.join(names[:NAMED_AT_MOST])} and {len(names) - NAMED_AT_MOST} more "
            f"({len(names)} in all)")


def _hold(context: Any) -> float | None:
    """The seconds a detached member lets the server hold its call (its metadata), or
    None for a member that keeps its connection and waits for the answer."""
    for key, value in context.invocation_metadata() or ():
        if key == HOLD_METADATA:
            try:
                return min(max(float(value), 0.0), 60.0)
            except ValueError:
                return None
    return None


def _forward(payload: RelayedPayload) -> RelayedPayload:
    """What the server does with a sealed payload: pass it on as it came."""
    return payload


def parts_for(message: Message, members: list[np.ndarray]) -> list[Message]:
    """A server message restricted to each member's party ids (broadcasts go whole).

    Each member's ids are one contiguous range, so its rows are found by a binary search
    in the addressed ids sorted once, in the order they were addressed: O(rows log rows)
    for the round, not O(rows) per member.
    """
    if message.parties is None:
        return [message] * len(members)
    addressed = np.asarray(message.parties)
    fields = {k: np.asarray(v) for k, v in message.fields.items()}
    order = np.argsort(addressed, kind="stable")
    ranked = addressed[order]
    parts = []
    for ids in members:
        if ids.size == 0:
            rows = order[:0]
        elif int(ids[-1]) - int(ids[0]) + 1 == ids.size:
            low = np.searchsorted(ranked, ids[0], side="left")
            high = np.searchsorted(ranked, ids[-1], side="right")
            rows = np.sort(order[low:high])
        else:
            rows = np.flatnonzero(np.isin(addressed, ids))
        parts.append(Message(message.sender, message.receiver,
                             {k: v[rows] for k, v in fields.items()},
                             message.bits_per_value, addressed[rows]))
    return parts


def serve(protocol: Protocol, n_silos: int, credentials: Credentials, *,
          address: str = "127.0.0.1:0", rng: RandomLike = None, timeout: float = 60.0,
          min_silos: int | None = None, on_ready: Any = None,
          metrics_address: str | None = None, observer: Observer | None = None,
          run_dir: str | os.PathLike[str] | None = None) -> ServerRun:
    """Run the aggregator of ``protocol`` for ``n_silos`` parties; return the release.

    Parameters
    ----------
    protocol:
        The protocol, configured exactly as the parties configure theirs: each member's
        public configuration (``service.public_configuration``) is compared key by key
        at join, and one that differs is refused naming each option.
    n_silos:
        Number of party processes (certificates ``party-0`` ...). A silo holding m rows
        acts for m parties, or for one party where the protocol's party is a client
        holding samples (FedAUC).
    credentials:
        The server's certificate, key and the deployment CA (``load_credentials``).
    address:
        ``host:port`` to listen on; port 0 picks a free port (``on_ready`` gets it).
    rng:
        ``None`` (default): deployment randomness; a protocol whose noise is unset draws
        its private values from the OS CSPRNG, and the server's public coins come from
        the OS. A seed asks for the simulator's streams
        explicitly, to compare a networked run with a simulation.
    timeout:
        The stage timeout: seconds each stage may last (joining, from the first join, or
        from the start when nobody joins; each round, from the end of the one before).
        Give the parties the same number: they wait for each answer up to
        :func:`~fedustat.runtime.network.service.party_deadline` of it, a margin longer,
        so the server decides first and an honest party is never named absent for having
        given up early. A party whose connection drops is noticed at once, not after the
        timeout.
    min_silos:
        If fewer than ``n_silos`` parties have joined when the joining stage times out,
        go on without the others provided at least this many joined (default: all must
        join). Parties that never joined contributed nothing, so the release is the
        protocol's release over those who did; :attr:`ServerRun.parties` names them and
        the release summary states their number of parties. During the run, a round in
        which some silos fall silent (no frame within ``timeout``, or their connection
        closed) goes on with at least this many silos only where the protocol's
        :meth:`~fedustat.protocols.base.Protocol.dropout_rule` allows it for that round
        (one-shot LDP reports, the central curator's complete design); otherwise the run
        stops naming them and saying why (docs/network.md, "Faults").
    on_ready:
        Called with the bound port once the server listens.
    metrics_address:
        ``host:port`` to serve ``/metrics`` (Prometheus) and ``/health`` on while the
        server runs (off by default; port 0 picks a free port, named in the ``start``
        log event); see docs/deployment-guide.md, "Operating a run".
    observer:
        Instead of ``metrics_address``: an :class:`~fedustat.runtime.network.observe.
        Observer` the caller owns (its endpoint outlives the run; ``observer.port``).
    run_dir:
        The run directory, where the run's database is written (docs/network.md,
        "Durability"): joined members, every accepted frame before it counts, the state
        after each round before its replies leave, and the release. ``None`` (default):
        a new directory under ``fedustat.runtime.network.run_journal.default_run_root()``
        named after the run (:attr:`ServerRun.run_dir`). A directory holding a run of
        the same configuration (the same protocol configuration, ``n_silos``,
        ``min_silos`` and seed) resumes it: a server killed at any point and restarted
        on it goes on with the same run, and the parties reconnect. A finished run's
        release is read back, not computed again (:attr:`ServerRun.read_back`). A run
        of another configuration is refused, naming each option that differs.
    """
    n_silos = check_positive_int(n_silos, "n_silos")
    _grpc()  # the optional dependency, named if missing
    warm_up()  # SciPy's modules import while the parties join, not inside a stage
    protocol, grade = resolve_randomness(protocol, rng)
    least = n_silos if min_silos is None else check_positive_int(min_silos, "min_silos")
    if least > n_silos:
        raise ValueError(f"min_silos ({least}) cannot exceed n_silos ({n_silos})")
    observed = observed_by(metrics_address, observer)
    meta = _run_meta(protocol, n_silos, least, rng)
    journal, stored = RunJournal.open(run_dir, meta)
    try:
        if stored is not None:
            _check_same_run(journal, stored, meta)
        run_id = meta["run"] if stored is None else stored.meta["run"]
        return asyncio.run(_serve(protocol, n_silos, credentials, address, rng,
                                  float(timeout), grade, least, on_ready, journal, stored,
                                  run_id, observed))
    finally:
        journal.close()


def _run_meta(protocol: Protocol, n_silos: int, least: int, rng: RandomLike
              ) -> dict[str, Any]:
    """What fixes a run, as written to (and compared with) its run directory."""
    if rng is None:
        randomness = "deployment"
    else:
        root = as_seed_sequence(rng)
        seed = json.dumps([str(root.entropy), list(root.spawn_key)])
        randomness = f"seed sha256 {hashlib.sha256(seed.encode()).hexdigest()[:16]}"
    return {"run": new_run_id(), "fingerprint": fingerprint(protocol),
            "configuration": json.loads(json.dumps(public_configuration(protocol))),
            "n_silos": n_silos, "min_silos": least, "randomness": randomness,
            "services": list(protocol.service_roles())}


def _check_same_run(journal: RunJournal, stored: StoredRun, meta: dict[str, Any]) -> None:
    """A run directory resumes only the run of the same configuration."""
    theirs = stored.meta
    differences: list[str] = []
    if theirs.get("fingerprint") != meta["fingerprint"]:
        differences = configuration_differences(
            meta["configuration"], theirs.get("configuration") or {},
            me="this server", them="the run directory") or [
            f"protocol configuration {meta['fingerprint']} (this server) vs "
            f"{theirs.get('fingerprint')} (the run directory)"]
    for key, option in (("n_silos", "n_silos (--parties)"),
                        ("min_silos", "min_silos (--min-parties)"),
                        ("randomness", "randomness (--seed)"), ("services", "services")):
        if theirs.get(key) != meta[key]:
            differences.append(f"{option} = {json.dumps(meta[key])} (this server) vs "
                               f"{json.dumps(theirs.get(key))} (the run directory)")
    if differences:
        raise ValueError(f"run_dir {str(journal.directory)!r} holds run {theirs.get('run')} "
                         f"of another configuration: {'; '.join(differences)}; give the "
                         "same options to resume it, or another run directory for a new run")


async def _serve(protocol: Protocol, n_silos: int, credentials: Credentials, address: str,
                 rng: RandomLike, timeout: float, grade: str, least: int,
                 on_ready: Any, journal: RunJournal, stored: StoredRun | None,
                 run_id: str, observed: tuple[Observer, bool]) -> ServerRun:
    grpc = _grpc()
    limit_heap_arenas()
    coordinator = _Coordinator(protocol, n_silos, rng, timeout, grade, least, journal,
                               run_id)
    read_back = stored is not None and stored.release is not None
    if stored is not None:
        coordinator.restore(stored)
    observer, owned = observed
    coordinator.observer = observer
    observer.bind("serve", coordinator.run, protocol.name, coordinator.progress,
                  store=journal.directory)

    async def ping(request: bytes, context: Any) -> bytes:
        return b""

    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Join": _handler(coordinator.join),
        "Round": _handler(coordinator.round_trip),
        "Relay": _handler(coordinator.relay_trip),
        "Abort": _handler(coordinator.abort),
        "Peers": _handler(coordinator.peers),
        "Pass": _handler(coordinator.pass_trip),
        "Presence": _handler(coordinator.presence),
        "Fetch": _handler(coordinator.fetch),
        "Ping": _handler(ping),
    })
    members = n_silos + len(coordinator.roles)
    # Each member holds a presence call and, while it waits, one Join/Round/Relay call.
    server = grpc.aio.server(options=SERVER_OPTIONS,
                             maximum_concurrent_rpcs=4 * members + 8)
    server.add_generic_rpc_handlers((handler,))
    server_credentials = grpc.ssl_server_credentials(
        [(credentials.key, credentials.certificate)], root_certificates=credentials.ca,
        require_client_auth=True)
    port = listen(server, address, server_credentials)
    started = time.monotonic()
    await server.start()
    try:
        observer.start()
        observer.event("start", protocol=protocol.name, address=f"{address.rpartition(':')[0]}"
                       f":{port}", metrics_address=observer.address,
                       expected=n_silos + len(coordinator.roles), timeout=timeout)
        if on_ready is not None:
            on_ready(port)
        # Each stage (joining, every round) must end within `timeout`; a member whose
        # connection dropped is noticed at the next check.
        while not coordinator.done.is_set():
            coordinator.watch()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(coordinator.done.wait(), timeout=0.2)
        if coordinator.estimate is not None:
            observer.released(rounds=coordinator.round, n_parties=coordinator.n_used(),
                              dropped=len(coordinator.dropped), absent=len(coordinator.absent()))
        # Every member receives the release before the server goes away (a detached
        # member comes back for it, a party of a restarted server resends its last
        # frame for it), for at most a stage; then the last replies get time to reach
        # the parties.
        until = time.monotonic() + timeout
        while coordinator.estimate is not None and time.monotonic() < until \
                and not coordinator.slot_set <= coordinator.released_to:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
    finally:
        await server.stop(grace=1.0)
        observer.serving = False
        if owned:
            observer.stop()
    if coordinator.estimate is None:
        raise NetworkRunError(coordinator.failure or "the run ended without a release")
    return ServerRun(coordinator.estimate, [party_identity(i) for i in coordinator.active],
                     coordinator.round, time.monotonic() - started,
                     coordinator.absent(),
                     coordinator.n_used(), coordinator.wire_bytes,
                     [party_identity(i) for i in sorted(coordinator.dropped)],
                     list(coordinator.roles), run_dir=str(journal.directory),
                     run_id=coordinator.run, resumed=coordinator.resumed,
                     read_back=read_back)
