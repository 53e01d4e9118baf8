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
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import RandomLike, as_float_array, as_seed_sequence
from fedustat.protocols.base import Protocol, Role
from fedustat.runtime.network.certs import Credentials
from fedustat.runtime.network.e2e import PeerKeys, verify_party_certificates
from fedustat.runtime.network.relay import open_reply, seal_rows
from fedustat.runtime.network.service import (
    ABORT,
    CHANNEL_OPTIONS,
    JOIN,
    PEERS,
    RELAY,
    REPLY_MESSAGE,
    REPLY_RELAYED,
    REPLY_RELEASE,
    ROUND,
    NetworkRunError,
    check_randomness,
    fingerprint,
)
from fedustat.runtime.simulate import MAX_ROUNDS
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

__all__ = ["PartyResult", "run_party"]


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
    """Pairwise keys with every silo, from certificates checked against the CA."""
    try:
        public = verify_party_certificates(credentials.ca, certificates)
    except ValueError as exc:
        raise NetworkRunError(f"{credentials.identity}: the server's list of parties is "
                              f"refused: {exc}") from None
    return PeerKeys(int(assignment["silo"]), credentials.key, public, mark,
                    assignment["run"])


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
        ``None`` (default): deployment randomness (the protocol must hold a deployment
        noise source for its private draws). A seed asks for simulation randomness
        explicitly: the simulator's numbers for the same seed and split of rows.
    timeout:
        Seconds to wait for each of the server's answers.
    """
    grpc = _grpc()
    check_randomness(protocol, rng)
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
