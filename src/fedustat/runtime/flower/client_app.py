"""fedustat's ClientApp: one silo of a run, hosted by a Flower SuperNode.

The SuperNode's node config names the silo's data file (and optionally its silo index
and the largest epsilon its owner accepts). The silo's records never leave the node:
only the protocol's party-step messages do, as validated wire frames.

Flower starts a new ClientApp process for every message, so the party's state between
rounds is not kept in memory. What the node keeps instead, in its Flower context state
(held by the SuperNode, never sent to the SuperLink), is the run's assignment, the
server's validated frames so far and, without a seed, the 128 bits of OS entropy its
random stream starts from. Each round replays the party steps from the start on the
same stream and the same inbound frames: steps are pure (``Protocol``'s contract), so the
replayed state is the state the party would have kept, at the price of repeating earlier
steps (protocols have few rounds).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np

from fedustat._validation import as_seed_sequence
from fedustat.protocols.base import Protocol, Role
from fedustat.runtime.flower import records
from fedustat.runtime.flower.config import NodeConfig, RunConfig, load_silo
from fedustat.runtime.network.service import fingerprint
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

try:
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.clientapp import ClientApp
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("running inside Flower needs flwr: pip install 'fedustat[flower]'"
                      ) from exc

__all__ = ["app"]

_LOG = logging.getLogger(__name__)
_MEMORY = {"run": str, "assignment": str, "entropy": str, "inbox": list}

app = ClientApp()


class _RefusalError(ValueError):
    """This node declines the request; the reason goes back to the server."""


def _reply(message: Message, content: dict[str, Any]) -> Message:
    return Message(RecordDict({records.RECORD: ConfigRecord(content)}), reply_to=message)


def _answer(message: Message, context: Context, handler: Any) -> Message:
    """Run ``handler``; a refusal or a bad request becomes a refusal record (with why)."""
    try:
        return _reply(message, handler(message, context))
    except (_RefusalError, records.RecordError, WireError, ValueError, TypeError, OSError) as exc:
        _LOG.warning("fedustat: refused %s: %s", message.metadata.message_type, exc)
        return _reply(message, {"refused": str(exc)})


def _node_protocol(context: Context) -> tuple[RunConfig, NodeConfig, Protocol, str]:
    run = RunConfig.parse(context.run_config)
    node = NodeConfig.parse(context.node_config)
    if node.max_epsilon is not None and run.epsilon > node.max_epsilon:
        raise _RefusalError(f"epsilon {run.epsilon:g} exceeds this node's max-epsilon "
                       f"{node.max_epsilon:g}")
    protocol = run.make_protocol()
    return run, node, protocol, fingerprint(protocol)


def _join(message: Message, context: Context) -> dict[str, Any]:
    request = records.read_record(message.content, records.JOIN_REQUEST, "the server")
    _, node, _, mark = _node_protocol(context)
    if request["fingerprint"] != mark:
        raise _RefusalError(f"the server runs protocol configuration {request['fingerprint']}, "
                       f"this node runs {mark}")
    rows = load_silo(node)
    return {"rows": int(rows.shape[0]), "silo": -1 if node.silo is None else node.silo,
            "fingerprint": mark}


def _check_assignment(assignment: dict[str, Any], rows: int, protocol: Protocol,
                      node_id: int) -> np.ndarray:
    """This node's party ids, after checking the assignment is one it can accept."""
    ids = assignment["ids"]
    if len(ids) != 2 or not all(type(i) is int for i in ids) or not 0 <= ids[0] < ids[1]:
        raise _RefusalError(f"assignment ids {ids!r} are not a range [first, stop)")
    width = 1 if protocol.silo_is_one_party else rows
    if ids[1] - ids[0] != width or ids[1] > assignment["n_parties"] \
            or not 0 <= assignment["silo"] < assignment["n_silos"] \
            or assignment["n_rows"] < rows:
        raise _RefusalError(f"assignment {assignment} does not fit node-{node_id}'s {rows} rows")
    return np.arange(ids[0], ids[1], dtype=np.int64)


def _round(message: Message, context: Context) -> dict[str, Any]:
    request = records.read_record(message.content, records.ROUND_REQUEST, "the server")
    assignment = records.read_json(request["assignment"], records.ASSIGNMENT, "assignment")
    run_config, node, protocol, mark = _node_protocol(context)
    if assignment["fingerprint"] != mark:
        raise _RefusalError(f"the server runs protocol configuration {assignment['fingerprint']}, "
                       f"this node runs {mark}")
    rows = load_silo(node)
    node_id = int(context.node_id)
    ids = _check_assignment(assignment, rows.shape[0], protocol, node_id)
    current, run = request["round"], assignment["run"]
    if current < 0:
        raise _RefusalError(f"round {current} is negative")
    memory = _memory(context, run)
    if current == 0:
        if request["frame"]:
            raise _RefusalError("round 0 carries a server frame")
        entropy = "" if run_config.seed is not None else str(np.random.SeedSequence().entropy)
        memory = {"run": run, "assignment": request["assignment"], "entropy": entropy,
                  "inbox": []}
    else:
        if memory is None or memory["assignment"] != request["assignment"]:
            raise _RefusalError(f"round {current} of a run this node has not started "
                           "(or with another assignment)")
        inbox = list(memory["inbox"])
        if len(inbox) not in (current - 1, current) or \
                (len(inbox) == current and inbox[-1] != request["frame"]):
            raise _RefusalError(f"round {current} arrives after {len(inbox)} server frames")
        # Checked now, before it is stored; the replay decodes the stored frames again.
        decode(request["frame"], _server_expectation(mark, run, current - 1))
        memory["inbox"] = [*inbox[:current - 1], request["frame"]]
    configured = protocol.configure(assignment["n_rows"])
    owner = ids if ids.size == rows.shape[0] else np.full(rows.shape[0], ids[0],
                                                           dtype=np.int64)
    if run_config.seed is not None:
        # Silo i draws from the simulator's stream of batch i for the same seed.
        streams = as_seed_sequence(run_config.seed).spawn(assignment["n_silos"] + 1)
        party_rng = np.random.default_rng(streams[1 + assignment["silo"]])
    else:
        party_rng = np.random.default_rng(np.random.SeedSequence(int(memory["entropy"])))
    state = configured.init_parties(rows, owner)
    inbound = None
    for step in range(current + 1):
        state, outbound = configured.party_step(state, inbound, party_rng)
        if step < current:
            inbound = decode(memory["inbox"][step],
                             _server_expectation(mark, run, step)).message
    context.state[records.RECORD] = ConfigRecord(memory)
    return {"frame": encode(Envelope(mark, run, current, "party", f"node-{node_id}",
                                     outbound))}


def _server_expectation(mark: str, run: str, round_: int) -> Expectation:
    return Expectation(mark, run, round_, "server", "server", Role.PARTY,
                       allow_nonfinite=frozenset())


def _memory(context: Context, run: str) -> dict[str, Any] | None:
    """What this node kept of ``run`` (None for another run or nothing kept)."""
    if records.RECORD not in context.state:
        return None
    kept = dict(context.state[records.RECORD])
    if set(kept) != set(_MEMORY) or kept["run"] != run:
        return None
    return kept


def _release(message: Message, context: Context) -> dict[str, Any]:
    request = records.read_record(message.content, records.RELEASE_REQUEST, "the server")
    summary = records.read_json(request["release"], {
        "value": float, "std_error": (float, type(None)), "interval": list, "level": float,
        "epsilon": (float, str, type(None)), "delta": (float, type(None)), "noise": str},
        "release summary")
    node = NodeConfig.parse(context.node_config)
    _LOG.info("fedustat: run %s released %s", request["run"], summary)
    if node.release is not None:
        node.release.parent.mkdir(parents=True, exist_ok=True)
        node.release.write_text(json.dumps({"run": request["run"], **summary}) + "\n")
    return {"received": True}


@app.query(records.JOIN)
def join(message: Message, context: Context) -> Message:
    """A run asks this node to take part: its row count and configuration fingerprint."""
    return _answer(message, context, _join)


@app.query(records.ROUND)
def round_trip(message: Message, context: Context) -> Message:
    """One round: the server's part for this silo in, the party step's frame out."""
    return _answer(message, context, _round)


@app.query(records.RELEASE)
def release(message: Message, context: Context) -> Message:
    """The run's release summary (DP outputs only)."""
    return _answer(message, context, _release)
