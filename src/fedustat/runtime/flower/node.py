"""What a SuperNode does for a run, without Flower: answer join, round and release.

:func:`answer` maps (the request's record, the node's run and node config, what the node
kept of the run) to (the reply record, what to keep). ``client_app`` wraps it in Flower's
ClientApp; tests drive it directly.

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
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedustat._validation import as_seed_sequence
from fedustat.protocols.base import Protocol, Role
from fedustat.runtime.flower import records
from fedustat.runtime.flower.config import NodeConfig, RunConfig, load_silo
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

__all__ = ["MEMORY", "RefusalError", "answer"]

_LOG = logging.getLogger(__name__)

#: What a node keeps of a run between messages (keys and types).
MEMORY = {"run": str, "assignment": str, "entropy": str, "inbox": list}

_RELEASE_SUMMARY = {"value": float, "std_error": (float, type(None)), "interval": list,
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
    _, node, _, mark = _node_protocol(run_config, node_config)
    if request["fingerprint"] != mark:
        raise RefusalError(f"the server runs protocol configuration "
                           f"{request['fingerprint']}, this node runs {mark}")
    rows = load_silo(node)
    return {"rows": int(rows.shape[0]), "silo": -1 if node.silo is None else node.silo,
            "fingerprint": mark}, memory


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
    rows = load_silo(node)
    ids = _check_assignment(assignment, rows.shape[0], protocol, node_id)
    current, run = request["round"], assignment["run"]
    if current < 0:
        raise RefusalError(f"round {current} is negative")
    if memory is not None and (set(memory) != set(MEMORY) or memory["run"] != run):
        memory = None  # kept from another run
    if current == 0:
        if request["frame"]:
            raise RefusalError("round 0 carries a server frame")
        entropy = "" if config.seed is not None else str(np.random.SeedSequence().entropy)
        kept = {"run": run, "assignment": request["assignment"], "entropy": entropy,
                "inbox": []}
    else:
        if memory is None or memory["assignment"] != request["assignment"]:
            raise RefusalError(f"round {current} of a run this node has not started "
                               "(or with another assignment)")
        inbox = list(memory["inbox"])
        if len(inbox) not in (current - 1, current) or \
                (len(inbox) == current and inbox[-1] != request["frame"]):
            raise RefusalError(f"round {current} arrives after {len(inbox)} server frames")
        # Checked now, before it is kept; the replay decodes the kept frames again.
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
    state = configured.init_parties(rows, owner)
    inbound = None
    for step in range(current + 1):
        state, outbound = configured.party_step(state, inbound, party_rng)
        if step < current:
            inbound = decode(kept["inbox"][step], _server_expectation(mark, run, step)).message
    frame = encode(Envelope(mark, run, current, "party", f"node-{node_id}", outbound))
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
