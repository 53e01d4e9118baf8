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

:func:`run_service` runs one of the protocol's record-less service roles (a shuffler, a
dealer) the same way: it joins by its certificate (named after its role), holds no
records, and each round runs the protocol's service step on what was addressed to it,
sending its rows to the server, relaying them sealed to parties, or passing.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import RandomLike, as_float_array, as_seed_sequence
from fedustat.protocols.base import Message, Protocol, Role
from fedustat.runtime.network.certs import Credentials, party_identity
from fedustat.runtime.network.e2e import PeerKeys, verify_party_certificates
from fedustat.runtime.network.relay import open_reply, seal_rows
from fedustat.runtime.network.service import (
    ABORT,
    CHANNEL_OPTIONS,
    JOIN,
    PASS,
    PEERS,
    RELAY,
    REPLY_MESSAGE,
    REPLY_RELAYED,
    REPLY_RELEASE,
    ROUND,
    NetworkRunError,
    fingerprint,
    resolve_randomness,
)
from fedustat.runtime.simulate import (
    MAX_ROUNDS,
    check_service_message,
    service_inbox,
    service_seed,
)
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

__all__ = ["PartyResult", "ServiceResult", "run_party", "run_service"]


@dataclass(frozen=True)
class PartyResult:
    """What a party learns: the release summary the server sent (DP outputs only)."""

    release: dict[str, Any]
    party_ids: tuple[int, int]
    rounds: int


def _grpc() -> Any:
    try:
        import grpc
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError("networked runs need gRPC: pip install 'fedustat[network]'") from exc
    return grpc


def _reason(error: Any, timeout: float) -> str:
    if error.code() == _grpc().StatusCode.DEADLINE_EXCEEDED:
        return f"the server did not answer within {timeout:g} s"
    return str(error.details())


def _peer_keys(credentials: Credentials, assignment: dict[str, Any], mark: str,
               certificates: list[str]) -> PeerKeys:
    """Pairwise keys with every silo (and service), from certificates checked against the
    CA; a service's certificate must carry its role's name."""
    names = [*(party_identity(i) for i in range(int(assignment["n_silos"]))),
             *assignment.get("services", [])]
    if len(certificates) != len(names):
        raise NetworkRunError(f"{credentials.identity}: the server lists "
                              f"{len(certificates)} certificates for {len(names)} members")
    try:
        public = verify_party_certificates(credentials.ca, certificates, names=names)
    except ValueError as exc:
        raise NetworkRunError(f"{credentials.identity}: the server's list of parties is "
                              f"refused: {exc}") from None
    return PeerKeys(int(assignment["silo"]), credentials.key, public, mark,
                    assignment["run"], names=names)


def run_party(protocol: Protocol, records: Any, credentials: Credentials, server: str, *,
              rng: RandomLike = None, timeout: float = 60.0) -> PartyResult:
    """Take part in a run of ``protocol`` served at ``server`` (``host:port``).

    Parameters
    ----------
    protocol:
        Configured exactly as the server's (the server refuses another configuration).
    records:
        This party's rows, shape (m, columns) or (m,); they are checked here, by the
        protocol's own party step, before anything is sent.
    credentials:
        This party's certificate (its name says which party it is), key and the CA.
    rng:
        ``None`` (default): deployment randomness (a protocol whose noise is unset draws
        from the OS CSPRNG). A seed asks for simulation randomness explicitly: the
        simulator's numbers for the same seed and split of rows.
    timeout:
        Seconds to wait for each of the server's answers.
    """
    grpc = _grpc()
    protocol, _ = resolve_randomness(protocol, rng)
    rows = as_float_array(records, "records", ndim=(1, 2))
    rows = rows[:, None] if rows.ndim == 1 else rows
    channel = grpc.secure_channel(
        server, grpc.ssl_channel_credentials(credentials.ca, credentials.key,
                                             credentials.certificate),
        options=CHANNEL_OPTIONS)
    identity = credentials.identity
    try:
        join = channel.unary_unary(JOIN)
        exchange = channel.unary_unary(ROUND)
        relay = channel.unary_unary(RELAY)
        abort = channel.unary_unary(ABORT)
        peers = channel.unary_unary(PEERS)
        mark = fingerprint(protocol)
        try:
            assignment = json.loads(join(json.dumps({"rows": int(rows.shape[0]),
                                                     "fingerprint": mark}).encode(),
                                         timeout=timeout, wait_for_ready=True))
        except grpc.RpcError as exc:
            raise NetworkRunError(f"{identity} could not join: {_reason(exc, timeout)}") from None
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
        state = configured.init_parties(rows, owner)
        inbox = None
        keys: PeerKeys | None = None
        bounds = np.asarray(assignment["bounds"], dtype=np.int64)
        for current in range(MAX_ROUNDS):
            state, message = configured.party_step(state, inbox, party_rng)
            if message.is_peer and keys is None:
                try:
                    directory = json.loads(peers(b"", timeout=timeout))
                except grpc.RpcError as exc:
                    raise NetworkRunError(f"{identity}, round {current}: "
                                          f"{_reason(exc, timeout)}") from None
                keys = _peer_keys(credentials, assignment, mark, directory["certificates"])
            try:
                if message.is_peer:
                    assert keys is not None
                    reply = relay(seal_rows(message, keys, bounds, protocol=mark,
                                            run=assignment["run"], round_=current,
                                            identity=identity), timeout=timeout)
                else:
                    reply = exchange(encode(Envelope(mark, assignment["run"], current,
                                                     "party", identity, message)),
                                     timeout=timeout)
            except grpc.RpcError as exc:
                raise NetworkRunError(f"{identity}, round {current}: "
                                      f"{_reason(exc, timeout)}") from None
            if message.is_peer and reply[:1] == REPLY_RELAYED:
                assert keys is not None
                try:
                    inbox = open_reply(reply[1:], keys, bounds, int(assignment["silo"]),
                                       message, protocol=mark, run=assignment["run"],
                                       round_=current)
                except WireError as exc:
                    # Tell the server why, so the run stops at once with the cause.
                    with contextlib.suppress(grpc.RpcError):
                        abort(str(exc).encode(), timeout=timeout)
                    raise NetworkRunError(f"{identity}, round {current}: {exc}") from None
                continue
            if reply[:1] == REPLY_RELEASE:
                return PartyResult(json.loads(reply[1:]), (first, stop), current + 1)
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
    finally:
        channel.close()


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
        Configured exactly as the server's and the parties' (same fingerprint).
    role:
        One of ``protocol.service_roles()``; the certificate must carry this name.
    credentials:
        The service's certificate (``fedustat certs --services ...``), key and the CA.
    rng:
        ``None`` (default): the OS CSPRNG. A seed asks for the simulator's stream of this
        service (``fedustat.runtime.simulate.service_seed``), to compare with a simulation.
    timeout:
        Seconds to wait for each of the server's answers.
    """
    grpc = _grpc()
    protocol, _ = resolve_randomness(protocol, rng)
    roles = tuple(protocol.service_roles())
    if role not in roles:
        raise ValueError(f"protocol {protocol.name!r} has no service role {role!r}; its "
                         f"service roles are {list(roles) or 'none'}")
    if credentials.identity != role:
        raise ValueError(f"the {role} service needs the certificate named {role!r}, got "
                         f"{credentials.identity!r}")
    channel = grpc.secure_channel(
        server, grpc.ssl_channel_credentials(credentials.ca, credentials.key,
                                             credentials.certificate),
        options=CHANNEL_OPTIONS)
    try:
        return _service_loop(grpc, channel, protocol, role, credentials, rng, timeout)
    finally:
        channel.close()


def _service_loop(grpc: Any, channel: Any, protocol: Protocol, role: str,
                  credentials: Credentials, rng: RandomLike, timeout: float) -> ServiceResult:
    calls = {name: channel.unary_unary(path) for name, path in
             (("join", JOIN), ("round", ROUND), ("relay", RELAY), ("pass", PASS),
              ("abort", ABORT), ("peers", PEERS))}
    mark = fingerprint(protocol)
    try:
        assignment = json.loads(calls["join"](
            json.dumps({"service": role, "fingerprint": mark}).encode(), timeout=timeout,
            wait_for_ready=True))
    except grpc.RpcError as exc:
        raise NetworkRunError(f"{role} could not join: {_reason(exc, timeout)}") from None
    own = int(assignment["ids"][0])
    slot = int(assignment["silo"])
    configured = protocol.configure(int(assignment["n_rows"]))
    index = tuple(configured.service_roles()).index(role)
    gen = np.random.default_rng(service_seed(as_seed_sequence(rng), index) if rng is not None
                                else np.random.SeedSequence())
    state = configured.init_service(role, int(assignment["n_parties"]))
    bounds = np.asarray(assignment["bounds"], dtype=np.int64)
    run = assignment["run"]
    keys: PeerKeys | None = None
    inbox: Message | None = None

    def peer_keys(current: int) -> PeerKeys:
        nonlocal keys
        if keys is None:
            try:
                directory = json.loads(calls["peers"](b"", timeout=timeout))
            except grpc.RpcError as exc:
                raise NetworkRunError(f"{role}, round {current}: "
                                      f"{_reason(exc, timeout)}") from None
            keys = _peer_keys(credentials, assignment, mark, directory["certificates"])
        return keys

    for current in range(MAX_ROUNDS):
        state, message = configured.service_step(role, state, inbox, gen)
        if message is not None:
            check_service_message(message, role, own)
        try:
            if message is None:
                reply = calls["pass"](b"", timeout=timeout)
            elif message.is_peer:
                reply = calls["relay"](seal_rows(message, peer_keys(current), bounds,
                                                 protocol=mark, run=run, round_=current,
                                                 identity=role), timeout=timeout)
            else:
                reply = calls["round"](encode(Envelope(mark, run, current, "party", role,
                                                       message)), timeout=timeout)
        except grpc.RpcError as exc:
            raise NetworkRunError(f"{role}, round {current}: {_reason(exc, timeout)}") from None
        tag = reply[:1]
        if tag == REPLY_RELEASE:
            return ServiceResult(json.loads(reply[1:]), role, own, current + 1)
        if tag == REPLY_RELAYED:
            try:
                delivered = open_reply(reply[1:], peer_keys(current), bounds, slot,
                                       message if message is not None and message.is_peer
                                       else None, protocol=mark, run=run, round_=current)
            except WireError as exc:
                with contextlib.suppress(grpc.RpcError):
                    calls["abort"](str(exc).encode(), timeout=timeout)
                raise NetworkRunError(f"{role}, round {current}: {exc}") from None
            inbox = service_inbox(delivered, own)
            continue
        if tag != REPLY_MESSAGE:
            raise NetworkRunError(f"{role}, round {current}: the server's reply is not a "
                                  "message or a release")
        try:
            inbox = service_inbox(decode(reply[1:], Expectation(
                mark, run, current, "server", "server", Role.PARTY,
                allow_nonfinite=frozenset())).message, own)
        except WireError as exc:
            raise NetworkRunError(f"{role}: {exc}") from None
    raise NetworkRunError(f"{role}: no release after {MAX_ROUNDS} rounds")
