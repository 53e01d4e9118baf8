"""What a SuperNode does for a run, without Flower: answer join, round and release.

:func:`answer` maps (the request's record, the node's run and node config, what the node
kept of the run) to (the reply record, what to keep). ``client_app`` wraps it in Flower's
ClientApp; tests drive it directly.

Flower starts a new ClientApp process for every message, so the party's state between
rounds is not kept in memory. What the node keeps instead, in its Flower context state
(held by the SuperNode, never sent to the SuperLink), is the run's assignment, the
server's validated frames so far and, without a seed, 256 bits of OS entropy its
random streams start from: its NumPy stream and, for deployment randomness (shares,
masks, noise), a CSPRNG keyed by them
(:func:`~fedustat.privacy.samplers.replayable_source`). Each round replays the party
steps from the start on the same streams and the same inbound frames: steps are pure
(``Protocol``'s contract), so the replayed state is the state the party would have kept,
at the price of repeating earlier steps (protocols have few rounds). The node also keeps
a digest of every frame it sent, and a replay that would have sent another frame (a
step that drew from the operating system behind its streams' back) stops with a refusal
instead of going on from a state the other parties never saw.

Relay rounds: when a step addresses rows to other parties, the node seals them per
destination silo (:func:`~fedustat.runtime.network.relay.seal_rows`) with pairwise keys
derived from its party key and the other silos' party certificates
(:class:`~fedustat.runtime.network.e2e.PeerKeys`). The certificates come from the
ServerApp (in the assignment) and are each checked against the deployment CA of the
node's own ``certs`` directory, with the name ``party-<silo>`` at its silo index, so the
ServerApp can route the rows but neither read, alter nor redirect them, nor put a key of
its own in place of a silo's — unless it holds the CA's key (docs/flower.md, "Relay
rounds"). The relayed rows of a round arrive as the next round's frame and are opened
during the replay.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedustat._validation import as_seed_sequence
from fedustat.privacy.samplers import replayable_source
from fedustat.protocols.base import Protocol, Role
from fedustat.runtime.flower import records
from fedustat.runtime.flower.config import NodeConfig, RunConfig, load_silo
from fedustat.runtime.network.certs import Credentials, load_credentials, party_identity
from fedustat.runtime.network.e2e import PeerKeys, verify_party_certificates
from fedustat.runtime.network.relay import open_reply, seal_rows
from fedustat.runtime.network.service import (
    configuration_differences,
    public_configuration,
    public_reason,
)
from fedustat.runtime.wire import MAGIC, Envelope, Expectation, WireError, decode, encode

__all__ = ["MEMORY", "RefusalError", "answer"]

_LOG = logging.getLogger(__name__)

#: What a node keeps of a run between messages (keys and types).
MEMORY = {"run": str, "assignment": str, "entropy": str, "inbox": list, "sent": list}

_RELEASE_SUMMARY = {"value": float, "raw_value": float, "clip_range": (list, type(None)),
                    "std_error": (float, type(None)), "interval": (list, type(None)),
                    "level": float, "epsilon": (float, str, type(None)),
                    "delta": (float, type(None)), "noise": str}


class RefusalError(ValueError):
    """This node declines the request; the reason goes back to the server."""


def answer(action: str, content: Mapping[str, Any], run_config: Mapping[str, Any],
           node_config: Mapping[str, Any], node_id: int,
           memory: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The reply record to a request and what the node keeps of the run afterwards.

    ``content`` is the request message's content (one ``fedustat`` record); ``memory``
    what the node kept so far (``None`` at first). A request this node cannot or will not
    serve gets a refusal record ``{"refused": reason}``, and the memory is unchanged.
    """
    handlers = {records.JOIN: _join, records.ROUND: _round, records.RELEASE: _release}
    kept = None if memory is None else dict(memory)
    try:
        if action not in handlers:
            raise RefusalError(f"unknown request {action!r}")
        return handlers[action](content, run_config, node_config, node_id, kept)
    except (RefusalError, records.RecordError, WireError, ValueError, TypeError,
            OSError) as exc:
        _LOG.warning("fedustat: node-%s refused %s: %s", node_id, action, exc)
        return {"refused": str(exc)}, kept


def _node_protocol(run_config: Mapping[str, Any], node_config: Mapping[str, Any]
                   ) -> tuple[RunConfig, NodeConfig, Protocol, str]:
    run = RunConfig.parse(run_config)
    node = NodeConfig.parse(node_config)
    if node.max_epsilon is not None and run.epsilon > node.max_epsilon:
        raise RefusalError(f"epsilon {run.epsilon:g} exceeds this node's max-epsilon "
                           f"{node.max_epsilon:g}")
    protocol = run.make_protocol()
    return run, node, protocol, run.mark(protocol)


def _join(content: Mapping[str, Any], run_config: Mapping[str, Any],
          node_config: Mapping[str, Any], node_id: int, memory: dict[str, Any] | None
          ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    request = records.read_record(content, records.JOIN_REQUEST, "the server")
    _, node, protocol, mark = _node_protocol(run_config, node_config)
    if request["fingerprint"] != mark:
        raise RefusalError(_mismatch(request, protocol, mark))
    rows = _silo(node, node_id)
    certificate = "" if node.certs is None else _credentials(node).certificate.decode()
    return {"rows": int(rows.shape[0]), "silo": -1 if node.silo is None else node.silo,
            "fingerprint": mark, "certificate": certificate}, memory


def _mismatch(request: Mapping[str, Any], protocol: Protocol, mark: str) -> str:
    """Why this node refuses the server's configuration: each option that differs."""
    try:
        theirs = json.loads(request["configuration"])
    except json.JSONDecodeError:
        theirs = None
    differences = [] if not isinstance(theirs, dict) else configuration_differences(
        theirs, public_configuration(protocol), me="server", them="this node")
    if not differences:
        return (f"the server runs protocol configuration {request['fingerprint']}, this "
                f"node runs {mark}")
    return ("the server's protocol configuration differs from this node's: "
            + "; ".join(differences))


def _silo(node: NodeConfig, node_id: int) -> np.ndarray:
    """This silo's rows; an error about their content stays in this node's log (it may
    quote a value), the server learns only that the file could not be read."""
    try:
        return load_silo(node)
    except ValueError as exc:
        _LOG.warning("fedustat: node-%s cannot read its data: %s", node_id, exc)
        raise RefusalError("its data file could not be read as numbers (the details are "
                           "in the node's log)") from None


def _own_step(step: Any, node_id: int) -> Any:
    """A step on this node's own records: its failure stays here in full (the node's log);
    the server learns only which public check failed, never the values."""
    try:
        return step()
    except Exception as exc:  # whatever it says may quote the records
        _LOG.warning("fedustat: node-%s: its own step failed: %s", node_id, exc)
        raise RefusalError(public_reason(exc)) from None


def _credentials(node: NodeConfig) -> Credentials:
    """This silo's party credentials (``certs`` directory, ``party-<silo>``)."""
    assert node.certs is not None and node.silo is not None
    return load_credentials(node.certs, party_identity(node.silo))


def _peer_keys(node: NodeConfig, assignment: dict[str, Any], mark: str,
               protocol: Protocol) -> PeerKeys:
    """Pairwise keys with every silo, from the certificates the ServerApp handed over,
    each checked against this node's own copy of the deployment CA."""
    if node.certs is None:
        raise RefusalError(f"protocol {protocol.name!r} sends rows between parties, "
                           "relayed sealed end to end: the node config needs certs=DIR "
                           "(ca.pem and party-<silo>.pem/.key, from `fedustat certs`)")
    if assignment["silo"] != node.silo:
        raise RefusalError(f"the assignment puts this node at silo {assignment['silo']}, "
                           f"but its certificate is {party_identity(node.silo or 0)}")
    credentials = _credentials(node)
    try:
        public = verify_party_certificates(credentials.ca, assignment["certificates"])
    except ValueError as exc:
        raise RefusalError(f"the ServerApp's list of parties is refused: {exc}") from None
    if len(public) != assignment["n_silos"]:
        raise RefusalError(f"the assignment lists {len(public)} certificates for "
                           f"{assignment['n_silos']} silos")
    return PeerKeys(node.silo, credentials.key, public, mark, assignment["run"])


def _check_assignment(assignment: dict[str, Any], rows: int, protocol: Protocol,
                      node_id: int) -> np.ndarray:
    """This node's party ids, after checking the assignment is one it can accept."""
    ids = assignment["ids"]
    if len(ids) != 2 or not all(type(i) is int for i in ids) or not 0 <= ids[0] < ids[1]:
        raise RefusalError(f"assignment ids {ids!r} are not a range [first, stop)")
    width = 1 if protocol.silo_is_one_party else rows
    if ids[1] - ids[0] != width or ids[1] > assignment["n_parties"] \
            or not 0 <= assignment["silo"] < assignment["n_silos"] \
            or assignment["n_rows"] < rows:
        raise RefusalError(f"assignment {assignment} does not fit node-{node_id}'s "
                           f"{rows} rows")
    return np.arange(ids[0], ids[1], dtype=np.int64)


def _server_expectation(mark: str, run: str, round_: int) -> Expectation:
    return Expectation(mark, run, round_, "server", "server", Role.PARTY,
                       allow_nonfinite=frozenset())


def _round(content: Mapping[str, Any], run_config: Mapping[str, Any],
           node_config: Mapping[str, Any], node_id: int, memory: dict[str, Any] | None
           ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    request = records.read_record(content, records.ROUND_REQUEST, "the server")
    assignment = records.read_json(request["assignment"], records.ASSIGNMENT, "assignment")
    config, node, protocol, mark = _node_protocol(run_config, node_config)
    if assignment["fingerprint"] != mark:
        raise RefusalError(f"the server runs protocol configuration "
                           f"{assignment['fingerprint']}, this node runs {mark}")
    rows = _silo(node, node_id)
    ids = _check_assignment(assignment, rows.shape[0], protocol, node_id)
    current, run = request["round"], assignment["run"]
    if current < 0:
        raise RefusalError(f"round {current} is negative")
    if memory is not None and (set(memory) != set(MEMORY) or memory["run"] != run):
        memory = None  # kept from another run
    if current == 0:
        if request["frame"]:
            raise RefusalError("round 0 carries a server frame")
        entropy = "" if config.seed is not None else str(secrets.randbits(256))
        kept = {"run": run, "assignment": request["assignment"], "entropy": entropy,
                "inbox": [], "sent": []}
    else:
        if memory is None or memory["assignment"] != request["assignment"]:
            raise RefusalError(f"round {current} of a run this node has not started "
                               "(or with another assignment)")
        inbox = list(memory["inbox"])
        if len(inbox) not in (current - 1, current) or \
                (len(inbox) == current and inbox[-1] != request["frame"]):
            raise RefusalError(f"round {current} arrives after {len(inbox)} server frames")
        # A server frame is checked now, before it is kept; relayed rows are opened (and
        # checked) by the replay, which decodes the kept frames again.
        if request["frame"][:len(MAGIC)] == MAGIC:
            decode(request["frame"], _server_expectation(mark, run, current - 1))
        kept = {**memory, "inbox": [*inbox[:current - 1], request["frame"]]}
    configured = protocol.configure(assignment["n_rows"])
    owner = ids if ids.size == rows.shape[0] else np.full(rows.shape[0], ids[0],
                                                           dtype=np.int64)
    if config.seed is not None:
        # Silo i draws from the simulator's stream of batch i for the same seed.
        streams = as_seed_sequence(config.seed).spawn(assignment["n_silos"] + 1)
        party_rng = np.random.default_rng(streams[1 + assignment["silo"]])
    else:
        party_rng = np.random.default_rng(np.random.SeedSequence(int(kept["entropy"])))
    if config.seed is None:
        # Deployment draws come from a CSPRNG keyed by the kept entropy, so the replay
        # draws the very values the earlier rounds sent (a fresh OS draw would not).
        key = hashlib.sha256(b"fedustat flower node csprng|"
                             + int(kept["entropy"]).to_bytes(32, "big")).digest()
        with replayable_source(key):
            return _replay(configured, rows, owner, current, kept, assignment, node,
                           node_id, protocol, mark, run, party_rng)
    return _replay(configured, rows, owner, current, kept, assignment, node, node_id,
                   protocol, mark, run, party_rng)


def _replay(configured: Protocol, rows: np.ndarray, owner: np.ndarray, current: int,
            kept: dict[str, Any], assignment: dict[str, Any], node: NodeConfig,
            node_id: int, protocol: Protocol, mark: str, run: str,
            party_rng: np.random.Generator) -> tuple[dict[str, Any], dict[str, Any]]:
    """The party steps of rounds 0..current on the kept frames; this round's frame."""
    state = _own_step(lambda: configured.init_parties(rows, owner), node_id)
    bounds = np.asarray(assignment["bounds"], dtype=np.int64)
    keys: PeerKeys | None = None
    inbound = None
    sent = list(kept["sent"])
    for step in range(current + 1):
        state, outbound = _own_step(
            lambda s=state, i=inbound: configured.party_step(s, i, party_rng), node_id)
        if outbound.is_peer and keys is None:
            keys = _peer_keys(node, assignment, mark, protocol)
        if outbound.is_peer:
            assert keys is not None
            frame = seal_rows(outbound, keys, bounds, protocol=mark, run=run, round_=step,
                              identity=party_identity(assignment["silo"]))
        else:
            frame = encode(Envelope(mark, run, step, "party", f"node-{node_id}", outbound))
        digest = hashlib.sha256(frame).hexdigest()
        if step < len(sent) and step < current and sent[step] != digest:
            raise RefusalError(f"replaying round {step} gives another message than the one "
                               "this node sent: the protocol's party step draws randomness from "
                               "outside the node's streams, which a replay cannot repeat (Flower "
                               "starts a new process per message); run it with a seed, or "
                               "in the standalone runtime")
        if step < current:
            if outbound.is_peer:
                assert keys is not None
                inbound = open_reply(kept["inbox"][step], keys, bounds, assignment["silo"],
                                     outbound, protocol=mark, run=run, round_=step)
            else:
                inbound = decode(kept["inbox"][step],
                                 _server_expectation(mark, run, step)).message
    kept["sent"] = [*sent[:current], digest]
    return {"frame": frame}, kept


def _release(content: Mapping[str, Any], run_config: Mapping[str, Any],
             node_config: Mapping[str, Any], node_id: int, memory: dict[str, Any] | None
             ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    request = records.read_record(content, records.RELEASE_REQUEST, "the server")
    summary = records.read_json(request["release"], _RELEASE_SUMMARY, "release summary")
    node = NodeConfig.parse(node_config)
    _LOG.info("fedustat: run %s released %s", request["run"], summary)
    if node.release is not None:
        # One line per run: the releases this node took part in.
        node.release.parent.mkdir(parents=True, exist_ok=True)
        with node.release.open("a") as log:
            log.write(json.dumps({"run": request["run"], **summary}) + "\n")
    return {"received": True}, memory
