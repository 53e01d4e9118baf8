"""A party of a networked run: its own records, its own steps, one TLS channel to the server.

:func:`run_party` joins the server (which authenticates it by its certificate), receives
its party ids and the public size of the run, and then loops: run the protocol's party
step on its own state and the server's last message, send the frame, wait for the reply.
The party's records never leave this process; only the step's message does.

When its step addresses rows to other parties (a relay round), the party seals them for
their destination silos with keys derived from the certificates it received at ``Join``
(each checked against the deployment CA first) and sends them with ``Relay``; the reply
holds the rows others sealed for it, which it opens and checks before its next step sees
them (:mod:`fedustat.runtime.network.relay`).

The party's logic is written once (a generator that says which call to make next and is
sent the reply) and driven by two links: :func:`run_party` over a blocking channel, and
:func:`run_party_async` over gRPC's asyncio API, so that one process's event loop can act
for thousands of device identities, each with its own TLS channel and certificate.

:func:`run_service` runs one of the protocol's record-less service roles (a shuffler, a
dealer) the same way: it joins by its certificate (named after its role), holds no
records, and each round runs the protocol's service step on what was addressed to it,
sending its rows to the server, relaying them sealed to parties, or passing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import secrets
import threading
import time
import weakref
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._lazy import warm_up
from fedustat._validation import (
    RandomLike,
    RecordCheckError,
    as_float_array,
    as_seed_sequence,
)
from fedustat.protocols.base import Message, Protocol, Role
from fedustat.runtime.network.certs import Credentials, party_identity
from fedustat.runtime.network.e2e import CertificateRefusedError, PartyDirectory, PeerKeys
from fedustat.runtime.network.relay import open_reply, seal_rows
from fedustat.runtime.network.run_journal import PartyJournal, dumps
from fedustat.runtime.network.service import (
    ABORT,
    CHANNEL_OPTIONS,
    DEVICE_CHANNEL_OPTIONS,
    FETCH,
    HOLD_METADATA,
    JOIN,
    MAX_ABORT_REASON,
    PASS,
    PEERS,
    PING,
    PRESENCE,
    RELAY,
    REPLY_MESSAGE,
    REPLY_PENDING,
    REPLY_RELAYED,
    REPLY_RELEASE,
    ROUND,
    NetworkRunError,
    configuration_hash,
    load_grpc,
    party_deadline,
    public_configuration,
    public_reason,
    resolve_randomness,
    tls_failure,
)
from fedustat.runtime.simulate import (
    MAX_ROUNDS,
    check_service_message,
    service_inbox,
    service_seed,
)
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

__all__ = ["PartyResult", "ServiceResult", "run_party", "run_party_async", "run_service"]


@dataclass(frozen=True)
class PartyResult:
    """What a party learns: the release summary the server sent (DP outputs only)."""

    release: dict[str, Any]
    party_ids: tuple[int, int]
    rounds: int


def _grpc() -> Any:
    return load_grpc("networked runs")


#: Seconds the server may keep closing the connection mid-handshake before the party
#: concludes that it refuses this party's certificate (once can be a server restarting;
#: gRPC retries the connection with a backoff of about a second at first).
_CLOSED_HANDSHAKES_SECONDS = 3.0
#: TLS handshakes the devices of one event loop have under way at once. Ten thousand
#: devices connecting in the same instant overflow the server's accept queue (the kernel's
#: somaxconn, 4096 on Linux by default) and the refused ones back off; admitted in turns,
#: they connect as fast as the server completes handshakes.
CONCURRENT_HANDSHAKES = 64
#: How long a detached member stays offline before it asks again when the server does not
#: say.
DETACHED_PAUSE_SECONDS = 0.5


def _retry_after(reply: bytes, longest: float) -> float:
    """The seconds a "not yet" answer says to wait (the server paces detached members by
    the members still missing), at most ``longest``, or :data:`DETACHED_PAUSE_SECONDS`."""
    try:
        return min(max(float(json.loads(reply[1:])["retry_after"]), 0.05), longest)
    except (ValueError, KeyError, TypeError):
        return DETACHED_PAUSE_SECONDS


_HANDSHAKE_GATES: weakref.WeakKeyDictionary[Any, asyncio.Semaphore] = \
    weakref.WeakKeyDictionary()


def _handshake_gate() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    gate = _HANDSHAKE_GATES.get(loop)
    if gate is None:
        gate = _HANDSHAKE_GATES[loop] = asyncio.Semaphore(CONCURRENT_HANDSHAKES)
    return gate


class _Reachability:
    """Why a member's channel does not reach the server, from its failed probes: a TLS
    handshake that fails is named at once (a certificate from another CA, a host name it
    does not carry), never reported as a server that did not answer."""

    def __init__(self, identity: str, server: str, deadline: float) -> None:
        self.identity = identity
        self.server = server
        self.deadline = deadline
        self.give_up = time.monotonic() + deadline
        self.closed_since: float | None = None
        self.last = "no connection attempt finished"

    def reached(self, grpc: Any, error: Any) -> bool:
        """Whether a probe that failed with ``error`` reached the server anyway (any
        answer but UNAVAILABLE or a deadline); raises when the handshake failed."""
        code = error.code()
        if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return True
        if code == grpc.StatusCode.UNAVAILABLE:
            self.last = str(error.details() or "")
            why = tls_failure(self.last)
            if why is not None:
                raise NetworkRunError(f"{self.identity}: the TLS handshake with the server "
                                      f"at {self.server} failed: {why}") from None
            lowered = self.last.lower()
            if "socket closed" not in lowered and "connection reset" not in lowered:
                self.closed_since = None
            elif self.closed_since is None:
                self.closed_since = time.monotonic()
            elif time.monotonic() - self.closed_since >= _CLOSED_HANDSHAKES_SECONDS:
                raise NetworkRunError(
                    f"{self.identity}: the TLS handshake with the server at {self.server} "
                    "failed: the server closed the connection, refusing this party's "
                    "certificate (one signed by another deployment's CA?)") from None
        return False

    def check(self) -> None:
        """Give up once the member's deadline has passed."""
        if time.monotonic() > self.give_up:
            raise NetworkRunError(f"{self.identity}: could not reach the server at "
                                  f"{self.server} within {self.deadline:g} s "
                                  f"({self.last.rpartition(': ')[2] or self.last})")


def _failure(grpc: Any, error: Any, deadline: float, told: str | None) -> str:
    """Why a call failed: the server's verdict if it gave one (in the call's status, or
    ``told``: the presence call's reply when the server was already gone)."""
    if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"the server did not answer within {deadline:g} s"
    if error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED) \
            and told is not None:
        return told or ("the connection to the server dropped "
                        f"({error.details() or error.code().name})")
    return str(error.details())


def _dropped(grpc: Any, error: Any) -> bool:
    return error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


#: Calls a party makes again, with the same bytes, when the server went down (a server
#: restarted on its run directory answers a resent frame as it answered the first).
_RESENDABLE = frozenset({"join", "round", "relay", "pass", "peers", "fetch"})
#: How a call ends when its connection is lost (gRPC reports a reset stream as any of
#: these); the presence call then tells a server that went down from one that is up.
_CONNECTION_LOST = frozenset({"UNAVAILABLE", "CANCELLED", "UNKNOWN", "INTERNAL"})
#: Pauses between attempts to reach a server that went down: doubling from the first to
#: the most, each jittered by +-50% so that the parties do not return together.
_RESEND_FIRST_SECONDS = 0.25
_RESEND_MOST_SECONDS = 2.0
#: A party's channel retries a refused connection within this many milliseconds (gRPC's
#: default backoff grows to 2 minutes, longer than a server takes to restart).
_RECONNECT_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 250),
                      ("grpc.max_reconnect_backoff_ms", 2000)]


class _Resend:
    """Paces the attempts to reach a server that went down, within the party's deadline
    counted from the outage's first failure (its stage deadline, as for any answer)."""

    def __init__(self, identity: str, server: str, deadline: float) -> None:
        self.identity = identity
        self.server = server
        self.deadline = deadline
        self.since = time.monotonic()
        self.attempt = 0

    def pause(self, where: str, last: str) -> float:
        """Seconds to wait before the next attempt; raises once the deadline is past."""
        if time.monotonic() - self.since > self.deadline:
            raise NetworkRunError(f"{where}: the server at {self.server} went down and "
                                  f"was not back within {self.deadline:g} s ({last})")
        pause = min(_RESEND_FIRST_SECONDS * 2 ** self.attempt, _RESEND_MOST_SECONDS)
        self.attempt += 1
        return pause * (0.5 + secrets.randbelow(1000) / 1000)


_METHODS = (("join", JOIN), ("round", ROUND), ("relay", RELAY), ("pass", PASS),
            ("abort", ABORT), ("peers", PEERS), ("presence", PRESENCE), ("ping", PING),
            ("fetch", FETCH))


@dataclass(frozen=True)
class _Call:
    """The party asks its link for one call; the reply (bytes) is sent back to it."""

    name: str
    payload: bytes
    where: str
    #: The round a Round or Relay frame belongs to (a detached member fetches its reply
    #: by it); -1 for the join.
    round_: int = -1


@dataclass(frozen=True)
class _Abort:
    """The party tells the server why it stops (best effort); nothing comes back."""

    reason: str


#: What the party's logic asks of its link, and what it gets back.
_Steps = Generator[_Call | _Abort, bytes | None, Any]


class _Link:
    """A member's TLS channel to the server: its calls, its presence call, its deadline.

    ``timeout`` is the run's stage timeout; each answer is awaited up to
    :func:`~fedustat.runtime.network.service.party_deadline` of it.
    """

    def __init__(self, credentials: Credentials, server: str, timeout: float,
                 resend: bool = False) -> None:
        self.grpc = _grpc()
        self.identity = credentials.identity
        self.server = server
        self.deadline = party_deadline(timeout)
        # A party goes on with a restarted server: it reconnects and resends.
        self.resend = resend
        self.channel = self.grpc.secure_channel(
            server, self.grpc.ssl_channel_credentials(credentials.ca, credentials.key,
                                                      credentials.certificate),
            options=[*CHANNEL_OPTIONS, *(_RECONNECT_OPTIONS if resend else [])])
        self.calls = {name: self.channel.unary_unary(path) for name, path in _METHODS}
        self.presence: Any = None

    def connect(self) -> None:
        """Wait for the TLS channel (the server may start later), then open the presence
        call; a failed handshake is named (:class:`_Reachability`)."""
        grpc = self.grpc
        ready = grpc.channel_ready_future(self.channel)
        watch = _Reachability(self.identity, self.server, self.deadline)
        try:
            while True:
                try:
                    ready.result(timeout=0.25)
                    break
                except grpc.FutureTimeoutError:
                    pass
                # The channel's state does not say why it failed; a call that must not
                # wait for it does (the gRPC status details of the last attempt).
                try:
                    self.calls["ping"](b"", timeout=2.0, wait_for_ready=False)
                    break
                except grpc.RpcError as exc:
                    if watch.reached(grpc, exc):
                        break
                watch.check()
                time.sleep(0.25)
        finally:
            ready.cancel()
        self.presence = self.calls["presence"].future(b"")

    def perform(self, request: _Call | _Abort) -> bytes | None:
        """Carry out what the party's logic asked for."""
        if isinstance(request, _Abort):
            self.abort(request.reason)
            return None
        return self.call(request.name, request.payload, request.where)

    def call(self, name: str, payload: bytes, where: str) -> bytes:
        """One call; a failure raises :class:`NetworkRunError` with the true reason.

        When the server went down (the call lost its connection and the presence call
        ended without the server's verdict), the call is made again with the same bytes
        once the server is back, after reopening the presence call: each outage may last
        up to the party's deadline (:class:`_Resend`)."""
        resend: _Resend | None = None
        while True:
            try:
                return self.calls[name](payload, timeout=self.deadline,
                                        wait_for_ready=name == "join")
            except self.grpc.RpcError as exc:
                if not (self.resend and name in _RESENDABLE and self._server_down(exc)):
                    raise NetworkRunError(f"{where}: {self.reason(exc)}") from None
                last = str(exc.details() or exc.code().name)
            resend = resend or _Resend(self.identity, self.server, self.deadline)
            while True:
                time.sleep(resend.pause(where, last))
                try:
                    self.calls["ping"](b"", timeout=2.0, wait_for_ready=False)
                    break
                except self.grpc.RpcError as exc:
                    last = str(exc.details() or exc.code().name)
            self.presence = self.calls["presence"].future(b"")
            resend = None  # back: another outage gets its own deadline

    def _server_down(self, error: Any) -> bool:
        """Whether a failed call means the server went down: its connection failed and
        the presence call ended without the server's verdict (a server that ended the
        run answers it with the reason; one that is up keeps it open)."""
        grpc = self.grpc
        if error.code().name not in _CONNECTION_LOST:
            return False
        if self.presence is None:
            return error.code() == grpc.StatusCode.UNAVAILABLE
        try:
            self.presence.result(timeout=2.0)
        except (grpc.RpcError, grpc.FutureCancelledError):
            return True
        except grpc.FutureTimeoutError:
            return False
        return False

    def reason(self, error: Any) -> str:
        """Why a call failed (:func:`_failure`), asking the presence call if need be."""
        grpc = self.grpc
        told = None
        if _dropped(grpc, error) and self.presence is not None:
            try:
                told = self.presence.result(timeout=2.0).decode("utf-8", errors="replace")
            except (grpc.RpcError, grpc.FutureTimeoutError, grpc.FutureCancelledError):
                told = ""
        return _failure(grpc, error, self.deadline, told)

    def abort(self, reason: str) -> None:
        """Tell the server why this member stops (best effort: it may be gone)."""
        with contextlib.suppress(self.grpc.RpcError):
            self.calls["abort"](reason.encode()[:MAX_ABORT_REASON], timeout=self.deadline)

    def close(self) -> None:
        if self.presence is not None:
            self.presence.cancel()
        self.channel.close()


class _AsyncLink:
    """:class:`_Link` on gRPC's asyncio API: many members share one event loop, each with
    its own TLS channel (its own certificate) and no thread of its own.

    ``hold``: a detached member (see :func:`run_party_async`): no presence call, and an
    answer not ready within ``hold`` seconds is fetched later on a new connection.
    """

    def __init__(self, credentials: Credentials, server: str, timeout: float,
                 hold: float | None = None) -> None:
        self.grpc = _grpc()
        self.identity = credentials.identity
        self.server = server
        self.deadline = party_deadline(timeout)
        self.credentials = credentials
        self.hold = hold
        self.metadata = None if hold is None else ((HOLD_METADATA, f"{hold:g}"),)
        self.presence: Any = None
        self._open()

    def _open(self) -> None:
        credentials = self.credentials
        self.channel = self.grpc.aio.secure_channel(
            self.server, self.grpc.ssl_channel_credentials(credentials.ca, credentials.key,
                                                           credentials.certificate),
            options=DEVICE_CHANNEL_OPTIONS)
        self.calls = {name: self.channel.unary_unary(path) for name, path in _METHODS}

    async def connect(self) -> None:
        """Probe until the channel reaches the server (it may start later); a probe that
        fails says why (:class:`_Reachability`). Then open the presence call."""
        grpc = self.grpc
        watch = _Reachability(self.identity, self.server, self.deadline)
        while True:
            async with _handshake_gate():
                try:
                    await self.calls["ping"](b"", timeout=2.0, wait_for_ready=False)
                    break
                except grpc.RpcError as exc:
                    if watch.reached(grpc, exc):
                        break
            watch.check()
            await asyncio.sleep(0.25)
        if self.hold is None:
            self.presence = self.calls["presence"](b"")

    async def perform(self, request: _Call | _Abort) -> bytes | None:
        """Carry out what the party's logic asked for."""
        if isinstance(request, _Abort):
            await self.abort(request.reason)
            return None
        reply = await self.call(request.name, request.payload, request.where)
        while self.hold is not None and reply[:1] == REPLY_PENDING:
            # Not ready within the hold: go offline, come back when the server says the
            # stage should be over, never before (an early return costs the server a
            # handshake for nothing), and up to half as long again so that the devices
            # do not all return at once.
            await self.channel.close()
            await asyncio.sleep(_retry_after(reply, self.deadline)
                                * (1.0 + secrets.randbelow(500) / 1000))
            self._open()
            await self.connect()
            asked = {"join": True} if request.name == "join" else {"round": request.round_}
            reply = await self.call("fetch", json.dumps(asked).encode(), request.where)
        return reply

    async def call(self, name: str, payload: bytes, where: str) -> bytes:
        """One call; a failure raises :class:`NetworkRunError` with the true reason.
        When the server went down, the call is made again with the same bytes once it
        is back, within the deadline (as :meth:`_Link.call`)."""
        resend: _Resend | None = None
        while True:
            try:
                return await self.calls[name](payload, timeout=self.deadline,
                                              wait_for_ready=name == "join",
                                              metadata=self.metadata)
            except self.grpc.RpcError as exc:
                if not (name in _RESENDABLE and await self._server_down(exc)):
                    raise NetworkRunError(f"{where}: {await self.reason(exc)}") from None
                last = str(exc.details() or exc.code().name)
            resend = resend or _Resend(self.identity, self.server, self.deadline)
            while True:
                await asyncio.sleep(resend.pause(where, last))
                try:
                    await self.calls["ping"](b"", timeout=2.0, wait_for_ready=False)
                    break
                except self.grpc.RpcError as exc:
                    last = str(exc.details() or exc.code().name)
            if self.hold is None:
                self.presence = self.calls["presence"](b"")
            resend = None  # back: another outage gets its own deadline

    async def _server_down(self, error: Any) -> bool:
        """As :meth:`_Link._server_down` (a detached member has no presence call: a
        connection refused or reset, UNAVAILABLE, is all it has)."""
        grpc = self.grpc
        if error.code().name not in _CONNECTION_LOST:
            return False
        if self.presence is None:
            return error.code() == grpc.StatusCode.UNAVAILABLE
        try:
            await asyncio.wait_for(asyncio.shield(self.presence), 2.0)
        except (grpc.RpcError, asyncio.CancelledError):
            return True
        except TimeoutError:
            return False
        return False

    async def reason(self, error: Any) -> str:
        """Why a call failed (:func:`_failure`), asking the presence call if need be."""
        grpc = self.grpc
        told = None
        if _dropped(grpc, error) and self.presence is not None:
            try:
                answer = await asyncio.wait_for(asyncio.shield(self.presence), 2.0)
                told = answer.decode("utf-8", errors="replace")
            except (grpc.RpcError, TimeoutError):
                told = ""
        return _failure(grpc, error, self.deadline, told)

    async def abort(self, reason: str) -> None:
        """Tell the server why this member stops (best effort: it may be gone)."""
        with contextlib.suppress(self.grpc.RpcError):
            await self.calls["abort"](reason.encode()[:MAX_ABORT_REASON],
                                      timeout=self.deadline)

    async def close(self) -> None:
        if self.presence is not None:
            self.presence.cancel()
        await self.channel.close()


#: Directories already read in this process, by digest of (CA, directory, names): the
#: same bytes checked against the same CA give the same keys, so device identities driven
#: from one process (:func:`run_party_async`) share one :class:`PartyDirectory` (each
#: certificate checked once, when a device first needs its key), not n identities times
#: n certificates. A few runs' worth, the oldest dropped first, each for a few minutes
#: only (a certificate's validity period is checked again after that).
_CHECKED_DIRECTORIES: dict[bytes, tuple[float, PartyDirectory, np.ndarray]] = {}
_CHECKED_DIRECTORIES_KEPT = 8
_CHECKED_DIRECTORY_SECONDS = 300.0
_CHECKED_DIRECTORIES_LOCK = threading.Lock()  # run_party may run in threads


def _peer_keys(credentials: Credentials, assignment: dict[str, Any], mark: str,
               directory: bytes) -> tuple[PeerKeys, np.ndarray]:
    """Pairwise keys with every silo (and service), from the server's directory of
    certificates (each checked against the CA when its key is first used; a service's
    certificate must carry its role's name), and every slot's first party id."""
    names = [*(party_identity(i) for i in range(int(assignment["n_silos"]))),
             *assignment.get("services", [])]
    digest = hashlib.sha256(b"\0".join([credentials.ca, directory,
                                        "|".join(names).encode()])).digest()
    with _CHECKED_DIRECTORIES_LOCK:
        checked_at, public, bounds = _CHECKED_DIRECTORIES.get(digest, (0.0, None, None))
    if public is None or time.monotonic() - checked_at > _CHECKED_DIRECTORY_SECONDS:
        try:
            listed = json.loads(directory)
            certificates, bounds = listed["certificates"], listed["bounds"]
            bounds = np.asarray(bounds, dtype=np.int64)
        except (ValueError, KeyError, TypeError) as exc:
            raise NetworkRunError(f"{credentials.identity}: the server's list of parties "
                                  f"is malformed ({exc})") from None
        if len(certificates) != len(names) or bounds.shape != (len(names) + 1,):
            raise NetworkRunError(f"{credentials.identity}: the server lists "
                                  f"{len(certificates)} certificates and {bounds.size} "
                                  f"bounds for {len(names)} members")
        public = PartyDirectory(credentials.ca, certificates, names=names)
        with _CHECKED_DIRECTORIES_LOCK:
            _CHECKED_DIRECTORIES.pop(digest, None)
            while len(_CHECKED_DIRECTORIES) >= _CHECKED_DIRECTORIES_KEPT:
                _CHECKED_DIRECTORIES.pop(next(iter(_CHECKED_DIRECTORIES)))
            _CHECKED_DIRECTORIES[digest] = (time.monotonic(), public, bounds)
    return PeerKeys(int(assignment["silo"]), credentials.key, public, mark,
                    assignment["run"], names=names), bounds


def _refused_directory(identity: str, error: CertificateRefusedError) -> NetworkRunError:
    return NetworkRunError(f"{identity}: the server's list of parties is refused: {error}")


def _hello(protocol: Protocol, **fields: Any) -> tuple[str, bytes]:
    """The protocol's fingerprint and the join hello: ``fields`` with the public
    configuration itself, which the server compares key by key with its own."""
    configuration = public_configuration(protocol)
    mark = configuration_hash(protocol.name, configuration)
    return mark, json.dumps({**fields, "fingerprint": mark,
                             "configuration": configuration}).encode()


def _own_step(step: Any, where: str) -> Generator[_Abort, Any, Any]:
    """Run this member's own step on its records. A failure stays here in full; the
    server and the others learn only which public check failed (or the error's kind),
    never the records' values (:func:`~fedustat.runtime.network.service.public_reason`)."""
    try:
        return step()
    except Exception as exc:  # whatever it says may quote the records
        yield _Abort(public_reason(exc))
        if isinstance(exc, RecordCheckError):
            raise NetworkRunError(f"{where}: its records failed validation "
                                  f"({exc.check}): {exc}") from None
        raise NetworkRunError(f"{where}: its own step failed: "
                              f"{type(exc).__name__}: {exc}") from exc


def _party_rows(protocol: Protocol, records: Any, rng: RandomLike
                ) -> tuple[Protocol, np.ndarray]:
    protocol, _ = resolve_randomness(protocol, rng)
    rows = as_float_array(records, "records", ndim=(1, 2))
    return protocol, rows[:, None] if rows.ndim == 1 else rows


def _party(protocol: Protocol, rows: np.ndarray, credentials: Credentials,
           rng: RandomLike, state_dir: Any = None) -> _Steps:
    """A party's whole run, written once for every link: it yields the calls to make
    (:class:`_Call`, :class:`_Abort`) and is sent their replies; it returns the
    :class:`PartyResult`. Its own steps run here, on the caller's thread or event loop
    (a one-record device's steps are light).

    With ``state_dir`` it keeps its own journal (:class:`PartyJournal`): its assignment,
    and before each frame is sent that frame and its state after the step; a restarted
    process reads them back, resends the same frame and goes on from that state."""
    identity = credentials.identity
    resumable = {"resumable": True} if state_dir is not None else {}
    mark, hello = _hello(protocol, rows=int(rows.shape[0]), **resumable)
    journal = None if state_dir is None else PartyJournal(state_dir, identity, mark)
    assignment = None if journal is None else journal.assignment()
    if journal is not None and assignment is not None \
            and (finished := journal.release()) is not None:
        return PartyResult(finished["release"], tuple(assignment["ids"]), finished["rounds"])
    if assignment is None:
        assignment = json.loads((yield _Call("join", hello, f"{identity} could not join")))
        if journal is not None:
            journal.joined(assignment)
    saved = None if journal is None else journal.round()
    first, stop = assignment["ids"]
    ids = np.arange(first, stop, dtype=np.int64)
    owner = ids if ids.size == rows.shape[0] else np.full(rows.shape[0], first,
                                                           dtype=np.int64)
    configured = protocol.configure(int(assignment["n_rows"]))
    if rng is None:
        party_rng = np.random.default_rng(np.random.SeedSequence())
    else:
        streams = as_seed_sequence(rng).spawn(int(assignment["n_silos"]) + 1)
        party_rng = np.random.default_rng(streams[1 + int(assignment["silo"])])
    # What each step consumed and sent, from the rng's first state: a state that cannot
    # be saved as it is is rebuilt from them (_replayed).
    history: dict[str, Any] = {"rng": party_rng.bit_generator.state, "inboxes": [],
                               "messages": []}
    if saved is None:
        state = yield from _own_step(lambda: configured.init_parties(rows, owner),
                                     f"{identity}, round 0")
    else:
        # Its own state after the step of the last round it wrote, and its rng's.
        history = saved["history"]
        state = saved["state"]
        if state is None:
            state = _replayed(configured, rows, owner, history, party_rng, identity)
        party_rng.bit_generator.state = saved["rng"]
    inbox = None
    keys: PeerKeys | None = None
    bounds = np.zeros(0, dtype=np.int64)
    for current in range(0 if saved is None else saved["round"], MAX_ROUNDS):
        where = f"{identity}, round {current}"
        resumed = saved is not None and current == saved["round"]
        if resumed:
            assert saved is not None
            message, kind, frame = saved["message"], saved["kind"], saved["frame"]
        else:
            state, message = yield from _own_step(
                lambda s=state, i=inbox: configured.party_step(s, i, party_rng), where)
        if message.is_peer and keys is None:
            directory = yield _Call("peers", b"", where)
            assert directory is not None
            keys, bounds = _peer_keys(credentials, assignment, mark, directory)
        if resumed:
            pass
        elif message.is_peer:
            assert keys is not None
            try:
                kind, frame = "relay", seal_rows(message, keys, bounds, protocol=mark,
                                                 run=assignment["run"], round_=current,
                                                 identity=identity)
            except CertificateRefusedError as exc:
                raise _refused_directory(identity, exc) from None
        else:
            kind, frame = "round", encode(Envelope(mark, assignment["run"], current,
                                                   "party", identity, message))
        if journal is not None and not resumed:
            # On disk before it leaves: a restart resends these very bytes (a report
            # drawn again would leak) and goes on from this state.
            history["inboxes"].append(inbox)
            history["messages"].append(message)
            journal.before_sending({"round": current, "kind": kind, "frame": frame,
                                    "state": state, "message": message,
                                    "rng": party_rng.bit_generator.state,
                                    "history": history})
        reply = yield _Call(kind, frame, where, current)
        assert reply is not None
        if message.is_peer and reply[:1] == REPLY_RELAYED:
            assert keys is not None
            try:
                inbox = open_reply(reply[1:], keys, bounds, int(assignment["silo"]),
                                   message, protocol=mark, run=assignment["run"],
                                   round_=current)
            except CertificateRefusedError as exc:
                raise _refused_directory(identity, exc) from None
            except WireError as exc:
                # Tell the server why, so the run stops at once with the cause.
                yield _Abort(str(exc))
                raise NetworkRunError(f"{where}: {exc}") from None
            continue
        if reply[:1] == REPLY_RELEASE:
            release = json.loads(reply[1:])
            if journal is not None:
                journal.finished(release, current + 1)
            return PartyResult(release, (first, stop), current + 1)
        if reply[:1] != REPLY_MESSAGE:
            raise NetworkRunError(f"round {current}: the server's reply is not a "
                                  "message or a release")
        try:
            inbox = decode(reply[1:], Expectation(
                mark, assignment["run"], current, "server", "server", Role.PARTY,
                allow_nonfinite=frozenset())).message
        except WireError as exc:
            raise NetworkRunError(str(exc)) from None
    raise NetworkRunError(f"no release after {MAX_ROUNDS} rounds")


def _replayed(configured: Protocol, rows: np.ndarray, owner: np.ndarray,
              history: dict[str, Any], party_rng: np.random.Generator,
              identity: str) -> Any:
    """A party's state after its last written step, rebuilt by running its steps again
    on what they consumed, from its rng's first state: for a state that could not be
    saved as it is (pairs-2pc's circuit is a running Python generator). Each step must
    send again exactly what it sent; one that drew randomness elsewhere than the party's
    generator cannot be replayed, and the party says so rather than go on from another
    state."""
    party_rng.bit_generator.state = history["rng"]
    try:
        state = configured.init_parties(rows, owner)
        for round_, (inbox, sent) in enumerate(zip(history["inboxes"],
                                                   history["messages"], strict=True)):
            state, message = configured.party_step(state, inbox, party_rng)
            if dumps(message) != dumps(sent):
                raise NetworkRunError(
                    f"{identity}: cannot resume from its state directory: its state "
                    "could not be saved as it is, and running its steps again gave "
                    f"another message in round {round_} (a step draws randomness "
                    "outside the party's generator)")
    except NetworkRunError:
        raise
    except Exception as exc:  # its own step, on its own records: stays here
        raise NetworkRunError(f"{identity}: cannot resume from its state directory: "
                              f"running its steps again failed ({type(exc).__name__}: "
                              f"{exc})") from exc
    return state


def _drive(steps: _Steps, link: _Link) -> Any:
    """Run a member's logic over a blocking link; its return value."""
    reply: bytes | None = None
    while True:
        try:
            request = steps.send(reply)
        except StopIteration as done:
            return done.value
        reply = link.perform(request)


async def _drive_async(steps: _Steps, link: _AsyncLink) -> Any:
    """Run a member's logic over an asyncio link; its return value."""
    reply: bytes | None = None
    while True:
        try:
            request = steps.send(reply)
        except StopIteration as done:
            return done.value
        reply = await link.perform(request)


def run_party(protocol: Protocol, records: Any, credentials: Credentials, server: str, *,
              rng: RandomLike = None, timeout: float = 60.0,
              state_dir: Any = None) -> PartyResult:
    """Take part in a run of ``protocol`` served at ``server`` (``host:port``).

    Parameters
    ----------
    protocol:
        Configured exactly as the server's: the server compares the public
        configurations key by key at join and refuses another, naming each option that
        differs, before any data step.
    records:
        This party's rows, shape (m, columns) or (m,); they are checked here, by the
        protocol's own party step, before anything is sent. If they fail a public check
        the error (with their values) is raised here; the server and the other parties
        learn only which check failed.
    credentials:
        This party's certificate (its name says which party it is), key and the CA.
    rng:
        ``None`` (default): deployment randomness (a protocol whose noise is unset draws
        from the OS CSPRNG). A seed asks for simulation randomness explicitly: the
        simulator's numbers for the same seed and split of rows.
    timeout:
        The run's stage timeout, the number the server is given: each answer is awaited
        up to :func:`~fedustat.runtime.network.service.party_deadline` of it (a margin
        longer than the server waits, so the server's verdict comes first). When the
        server goes down (killed, then restarted on its run directory), the party
        reconnects and resends its current frame, pausing between attempts (jittered),
        for up to that deadline.
    state_dir:
        This party's own state directory (made if missing; one per party and run). It
        writes there its assignment and, before sending each round's frame, that frame
        and its state after the step (fsynced, renamed into place). A process restarted
        with the same directory rejoins under the same identity, resends the same bytes
        and goes on from that state; the server waits for such a party, when its
        connection drops, up to the stage timeout instead of stopping at once. A
        finished run's release is read back from it. ``None`` (default): no journal.
    """
    warm_up()  # SciPy's modules import while this party waits for the others to join
    protocol, rows = _party_rows(protocol, records, rng)
    link = _Link(credentials, server, timeout, resend=True)
    try:
        link.connect()
        return _drive(_party(protocol, rows, credentials, rng, state_dir), link)
    finally:
        link.close()


async def run_party_async(protocol: Protocol, records: Any, credentials: Credentials,
                          server: str, *, rng: RandomLike = None, timeout: float = 60.0,
                          hold: float | None = None, state_dir: Any = None) -> PartyResult:
    """:func:`run_party` on the caller's event loop: one process drives many device
    identities (each its own TLS channel and certificate), with no thread per party.

    The same party, call for call, with the same errors; its own steps run on the event
    loop, which suits devices of one or a few records. docs/network.md ("Many devices
    from one process") shows N devices gathered on one loop.

    ``hold``: ``None`` (default) keeps the connection open for the whole run, with a
    presence call, so the server learns at once when the device drops. A number of
    seconds makes the device *detached*: the server holds each of its calls at most that
    long; an answer not ready by then (the others have not all sent their round yet) is
    "not yet", with when to come back (the time the members still missing need at the
    rate they have arrived), and the device closes its connection, waits that long and
    up to half as long again, and asks again on a new connection. The server then
    holds no connection for a device that is waiting, at the cost of a TLS handshake per
    return; a device that never comes back is noticed at the stage timeout only.

    ``state_dir``: this device's own journal, as for :func:`run_party`; a device whose
    call fails while the server is down reconnects and resends, as there.
    """
    if hold is not None and not (0.0 <= float(hold) <= 60.0):
        raise ValueError(f"hold must be between 0 and 60 seconds (the server caps it at "
                         f"60), got {hold!r}")
    protocol, rows = _party_rows(protocol, records, rng)
    link = _AsyncLink(credentials, server, timeout, None if hold is None else float(hold))
    try:
        await link.connect()
        return await _drive_async(_party(protocol, rows, credentials, rng, state_dir),
                                  link)
    finally:
        await link.close()


@dataclass(frozen=True)
class ServiceResult:
    """What a service learns: the release summary the server sent (DP outputs only)."""

    release: dict[str, Any]
    role: str
    service_id: int
    rounds: int


def run_service(protocol: Protocol, role: str, credentials: Credentials, server: str, *,
                rng: RandomLike = None, timeout: float = 60.0) -> ServiceResult:
    """Run the service ``role`` of ``protocol`` (e.g. ``"shuffler"``) in a run at ``server``.

    Parameters
    ----------
    protocol:
        Configured exactly as the server's and the parties' (compared key by key at join).
    role:
        One of ``protocol.service_roles()``; the certificate must carry this name.
    credentials:
        The service's certificate (``fedustat certs --services ...``), key and the CA.
    rng:
        ``None`` (default): the OS CSPRNG. A seed asks for the simulator's stream of this
        service (``fedustat.runtime.simulate.service_seed``), to compare with a simulation.
    timeout:
        The run's stage timeout, as for :func:`run_party`.
    """
    protocol, _ = resolve_randomness(protocol, rng)
    roles = tuple(protocol.service_roles())
    if role not in roles:
        raise ValueError(f"protocol {protocol.name!r} has no service role {role!r}; its "
                         f"service roles are {list(roles) or 'none'}")
    if credentials.identity != role:
        raise ValueError(f"the {role} service needs the certificate named {role!r}, got "
                         f"{credentials.identity!r}")
    warm_up()
    link = _Link(credentials, server, timeout, resend=True)
    try:
        link.connect()
        return _service_loop(link, protocol, role, credentials, rng)
    finally:
        link.close()


def _service_loop(link: _Link, protocol: Protocol, role: str, credentials: Credentials,
                  rng: RandomLike) -> ServiceResult:
    mark, hello = _hello(protocol, service=role)
    assignment = json.loads(link.call("join", hello, f"{role} could not join"))
    own = int(assignment["ids"][0])
    slot = int(assignment["silo"])
    configured = protocol.configure(int(assignment["n_rows"]))
    index = tuple(configured.service_roles()).index(role)
    gen = np.random.default_rng(service_seed(as_seed_sequence(rng), index) if rng is not None
                                else np.random.SeedSequence())
    state = configured.init_service(role, int(assignment["n_parties"]))
    run = assignment["run"]
    keys: PeerKeys | None = None
    bounds = np.zeros(0, dtype=np.int64)
    inbox: Message | None = None

    def peer_keys(current: int) -> PeerKeys:
        nonlocal keys, bounds
        if keys is None:
            directory = link.call("peers", b"", f"{role}, round {current}")
            keys, bounds = _peer_keys(credentials, assignment, mark, directory)
        return keys

    for current in range(MAX_ROUNDS):
        where = f"{role}, round {current}"
        state, message = configured.service_step(role, state, inbox, gen)
        if message is not None:
            check_service_message(message, role, own)
        if message is None:
            # Its run and round: a pass resent to a restarted server counts once.
            reply = link.call("pass", json.dumps({"run": run, "round": current}).encode(),
                              where)
        elif message.is_peer:
            keys_now = peer_keys(current)
            try:
                sealed = seal_rows(message, keys_now, bounds, protocol=mark, run=run,
                                   round_=current, identity=role)
            except CertificateRefusedError as exc:
                raise _refused_directory(role, exc) from None
            reply = link.call("relay", sealed, where)
        else:
            reply = link.call("round", encode(Envelope(mark, run, current, "party", role,
                                                       message)), where)
        tag = reply[:1]
        if tag == REPLY_RELEASE:
            return ServiceResult(json.loads(reply[1:]), role, own, current + 1)
        if tag == REPLY_RELAYED:
            keys_now = peer_keys(current)
            try:
                delivered = open_reply(reply[1:], keys_now, bounds, slot,
                                       message if message is not None and message.is_peer
                                       else None, protocol=mark, run=run, round_=current)
            except CertificateRefusedError as exc:
                raise _refused_directory(role, exc) from None
            except WireError as exc:
                link.abort(str(exc))
                raise NetworkRunError(f"{where}: {exc}") from None
            inbox = service_inbox(delivered, own)
            continue
        if tag != REPLY_MESSAGE:
            raise NetworkRunError(f"{where}: the server's reply is not a "
                                  "message or a release")
        try:
            inbox = service_inbox(decode(reply[1:], Expectation(
                mark, run, current, "server", "server", Role.PARTY,
                allow_nonfinite=frozenset())).message, own)
        except WireError as exc:
            raise NetworkRunError(f"{role}: {exc}") from None
    raise NetworkRunError(f"{role}: no release after {MAX_ROUNDS} rounds")
