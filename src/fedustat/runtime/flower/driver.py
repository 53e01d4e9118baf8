"""The aggregator of a run, without Flower: the rounds of runtime/network/server.py.

:func:`drive` runs a protocol's rounds over a set of nodes through ``deliver``, a function
that sends one request record per node and returns each node's reply record (or the
error it reported). ``server_app`` gives it Flower's Grid; tests give it the nodes'
:func:`fedustat.runtime.flower.node.answer` directly.

Every silo is one node. A join exchange learns each silo's row count and checks that it
runs the same protocol configuration
(:func:`~fedustat.runtime.network.service.fingerprint`); then each round every node gets
its part of the server's last message, answers with one wire frame, validated here
against what the node may say (its own party ids, this run, this round), and the frames
are merged in silo order for the server step. At the end every node gets the release
summary.

Relay rounds (a party step addresses rows to other parties: ``pairs-2pc``, ``umpc``,
``ecdf-secagg``, ``ecdf-fss``) run
as in the standalone runtime (:mod:`fedustat.runtime.network.relay`): each node answers
with a relay frame whose payloads it sealed end to end for their destination silos; the
ServerApp checks the routing facts (origins its own, destinations in the run), counts
the declared rows as peer traffic, and sends every node, as the next round's frame, the
payloads addressed to it, unopened. The keys come from the nodes' party certificates,
collected at joining and handed to every node, which checks them against its own copy
of the deployment CA (:mod:`fedustat.runtime.flower.node`).

Failures never yield a number: a node that does not answer, answers with an error or a
refusal, or sends a frame that fails validation stops the run with a
:class:`~fedustat.runtime.network.service.NetworkRunError` naming the node.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from fedustat._validation import RecordCheckError, as_seed_sequence
from fedustat.protocols.base import Estimate, Role
from fedustat.runtime.flower import records
from fedustat.runtime.flower.config import RunConfig
from fedustat.runtime.network.certs import party_identity
from fedustat.runtime.network.relay import (
    RELAY_MAGIC,
    RelayedPayload,
    parse_request,
    reply_for,
)
from fedustat.runtime.network.server import parts_for
from fedustat.runtime.network.service import NetworkRunError, release_summary
from fedustat.runtime.simulate import MAX_ROUNDS, MessageLog, merge_party_messages
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

__all__ = ["Deliver", "FlowerRun", "drive", "node_name", "release_document"]


@dataclass(frozen=True)
class FlowerRun:
    """What the ServerApp produced: the release, the silos in order, the timing.

    ``exchange_seconds`` and ``seconds`` cover the run up to the release (join and
    rounds), not the exchange that sends the nodes its summary.
    """

    estimate: Estimate
    run: str
    nodes: list[int]
    rows: list[int]
    rounds: int
    exchange_seconds: list[float]
    seconds: float


def node_name(node_id: int) -> str:
    """How messages and errors name a node: by its Flower node id."""
    return f"node-{node_id}"


#: ``deliver(action, {node: request record}, stage)`` -> ``{node: (reply record, error)}``
#: for the nodes that answered in time; ``error`` is the reason a node reported a failure
#: (then the record is ignored).
Deliver = Callable[[str, dict[int, dict[str, Any]], str],
                   dict[int, tuple[Mapping[str, Any] | None, str | None]]]


class _Exchange:
    """One request per node through ``deliver``; the validated replies, by node id."""

    def __init__(self, deliver: Deliver, timeout: float) -> None:
        self.deliver = deliver
        self.timeout = timeout
        self.seconds: list[float] = []

    def __call__(self, action: str, contents: dict[int, dict[str, Any]],
                 schema: dict[str, type], stage: str) -> dict[int, dict[str, Any]]:
        started = time.monotonic()
        replies = self.deliver(action, contents, stage)
        self.seconds.append(time.monotonic() - started)
        got: dict[int, dict[str, Any]] = {}
        for node, (content, error) in replies.items():
            if node not in contents:
                raise NetworkRunError(f"{stage}: a reply from {node_name(node)}, which was "
                                      "not asked; no release")
            if error is not None:
                raise NetworkRunError(f"{stage}: {node_name(node)} failed: {error}; "
                                      "no release")
            try:
                got[node] = records.read_record(content or {}, schema, node_name(node))
            except records.RecordError as exc:
                raise NetworkRunError(f"{stage}: {exc}; no release") from None
        missing = [node_name(n) for n in contents if n not in got]
        if missing:
            raise NetworkRunError(f"{stage}: no answer within {self.timeout:g} s from "
                                  f"{', '.join(missing)}; no release")
        return got


def _silo_order(joined: dict[int, dict[str, Any]]) -> list[int]:
    """Node ids in silo order: by the silo index each node declares, else by node id."""
    declared = {node: reply["silo"] for node, reply in joined.items()}
    if all(s < 0 for s in declared.values()):
        return sorted(joined)
    if sorted(declared.values()) != list(range(len(joined))):
        raise NetworkRunError(f"joining: the nodes' silo indices {sorted(declared.values())} "
                              f"must be 0..{len(joined) - 1}, each once (node config "
                              "silo=...); no release")
    return sorted(joined, key=declared.__getitem__)


def drive(deliver: Deliver, nodes: list[int], config: RunConfig, run: str,
          publish: Callable[[FlowerRun], None] | None = None) -> FlowerRun:
    """Run the aggregator of ``config``'s protocol over ``nodes``; the release.

    ``run`` names this execution in every frame (frames of another run are refused).
    ``publish`` gets the release as soon as the server step yields it, before the nodes
    are sent its summary: the release is final then, whatever happens to that last
    exchange (whose failure still raises, naming the node).
    """
    started = time.monotonic()
    protocol = config.make_protocol()
    mark = config.mark(protocol)
    exchange = _Exchange(deliver, config.timeout)

    configuration = config.configuration(protocol)
    joined = exchange(records.JOIN, {key: {"run": run, "fingerprint": mark,
                                           "configuration": configuration} for key in nodes},
                      records.JOIN_REPLY, "joining")
    for node, reply in joined.items():
        if reply["fingerprint"] != mark:
            raise NetworkRunError(f"joining: {node_name(node)} runs protocol configuration "
                                  f"{reply['fingerprint']}, the server runs {mark}; no release")
        if reply["rows"] < 1:
            raise NetworkRunError(f"joining: {node_name(node)} holds {reply['rows']} rows; "
                                  "no release")
    order = _silo_order(joined)
    rows = [joined[node]["rows"] for node in order]

    # Party ids per silo, as runtime/network/server.py assigns them.
    n_rows = sum(rows)
    protocol = protocol.configure(n_rows)
    widths = [1 if protocol.silo_is_one_party else r for r in rows]
    starts = np.cumsum([0, *widths])
    ids = [np.arange(starts[i], starts[i + 1], dtype=np.int64) for i in range(len(order))]
    n_parties = int(starts[-1])
    bounds = [int(b) for b in starts]
    certificates = [joined[node]["certificate"] for node in order]
    assignments = {node: json.dumps({
        "run": run, "fingerprint": mark, "n_rows": n_rows, "n_parties": n_parties,
        "silo": i, "n_silos": len(order), "ids": [int(ids[i][0]), int(ids[i][-1]) + 1],
        "bounds": bounds, "certificates": certificates})
        for i, node in enumerate(order)}
    if config.seed is not None:
        # The simulator's streams for batches of these sizes: same seed, same numbers.
        server_rng = np.random.default_rng(as_seed_sequence(config.seed).spawn(len(order) + 1)[0])
    else:
        server_rng = np.random.default_rng(np.random.SeedSequence())

    state = protocol.init_server(n_parties)
    log = MessageLog(n_parties)
    # What each node gets with the next round: the server's frame, or the relayed rows.
    to_nodes = dict.fromkeys(order, b"")
    for current in range(MAX_ROUNDS):
        contents = {node: {"assignment": assignments[node], "round": current,
                           "frame": to_nodes[node]} for node in order}
        frames = exchange(records.ROUND, contents, records.ROUND_REPLY, f"round {current}")
        relayed = [node for node in order if frames[node]["frame"][:4] == RELAY_MAGIC]
        if relayed:
            to_nodes = _route(frames, order, ids, rows, relayed, log, mark, run, current,
                              np.asarray(bounds, dtype=np.int64))
            continue
        inbox = []
        for i, node in enumerate(order):
            expect = Expectation(mark, run, current, "party", node_name(node), Role.SERVER,
                                 party_ids=ids[i],
                                 max_elements=max(1 << 20, 64 * rows[i] * 1024))
            try:
                inbox.append(decode(frames[node]["frame"], expect).message)
            except WireError as exc:
                raise NetworkRunError(f"round {current}: {exc}; no release") from None
        merged = merge_party_messages(inbox)
        try:
            log.record(merged)
            state, out = protocol.server_step(state, merged, server_rng)
        except (ValueError, TypeError, RuntimeError) as exc:
            # A records check run on the server names only the public check.
            told = exc.check if isinstance(exc, RecordCheckError) else exc
            raise NetworkRunError(f"round {current}: the server step refused the nodes' "
                                  f"messages: {told}; no release") from None
        if isinstance(out, Estimate):
            ops = int(out.cost.server_operations)
            if out.noise != "none":
                out = replace(out, noise=config.noise)
            estimate = out.with_cost(log.cost(server_operations=ops,
                                              offline_bits=out.cost.offline_bits))
            result = FlowerRun(estimate, run, order, rows, current + 1, list(exchange.seconds),
                               time.monotonic() - started)
            if publish is not None:
                publish(result)
            summary = json.dumps(release_summary(estimate))
            exchange(records.RELEASE, {key: {"run": run, "release": summary} for key in order},
                     records.RELEASE_REPLY, "release")
            return result
        log.record(out)
        parts = parts_for(out, ids)
        to_nodes = {node: encode(Envelope(mark, run, current, "server", "server", parts[i]))
                    for i, node in enumerate(order)}
    raise NetworkRunError(f"protocol {protocol.name!r} did not finish within {MAX_ROUNDS} "
                          "rounds")


def _route(frames: dict[int, dict[str, Any]], order: list[int], ids: list[np.ndarray],
           rows: list[int], relayed: list[int], log: MessageLog, mark: str, run: str,
           current: int, bounds: np.ndarray) -> dict[int, bytes]:
    """A relay round: check each node's routing facts, count the declared rows as peer
    traffic, and give every node the sealed payloads addressed to it (never opened)."""
    if len(relayed) != len(order):
        uploaded = next(node for node in order if node not in relayed)
        raise NetworkRunError(f"round {current}: {node_name(relayed[0])} sent rows to "
                              f"parties and {node_name(uploaded)} a message to the server; "
                              "every node of a round must do the same; no release")
    entries = []
    for i, node in enumerate(order):
        # The frame speaks for silo i (its party certificate's name): the node Flower
        # reports for the reply is the node at silo i.
        expect = Expectation(mark, run, current, "party", party_identity(i), Role.SERVER,
                             party_ids=ids[i], max_elements=max(1 << 20, 64 * rows[i] * 1024))
        try:
            entries.append(parse_request(frames[node]["frame"], expect, i, bounds))
        except WireError as exc:
            raise NetworkRunError(f"round {current}: {node_name(node)}: {exc}; no release"
                                  ) from None
    try:
        log.record_peer_rows(np.concatenate([e[0] for e in entries]),
                             np.concatenate([e[1] for e in entries]),
                             np.concatenate([e[2] for e in entries]))
    except ValueError as exc:
        raise NetworkRunError(f"round {current}: {exc}; no release") from None
    inbound: dict[int, list[RelayedPayload]] = {i: [] for i in range(len(order))}
    for entry in entries:
        for payload in entry[3]:
            inbound[payload.receiver].append(payload)
    return {node: reply_for(inbound[i], protocol=mark, run=run, round_=current)
            for i, node in enumerate(order)}


def release_document(config: RunConfig, result: FlowerRun) -> dict[str, Any]:
    """The release file: the published summary, what was run, and the measured cost."""
    estimate = result.estimate
    curve = estimate.diagnostics.get("curve")
    # A curve release (ecdf-secagg, ecdf-fss) also publishes its points.
    points = {} if curve is None else {
        "thresholds": [float(t) for t in curve.thresholds],
        "values": [float(v) for v in curve.values],
        "indices": [int(i) for i in curve.indices]}
    return {"run": result.run, **release_summary(estimate), **points,
            "quantity": estimate.quantity,
            "protocol": estimate.protocol,
            "privacy": str(estimate.privacy),
            "model": str(estimate.privacy.model), "cost": asdict(estimate.cost),
            "run_config": {"protocol": config.protocol, "statistic": config.statistic,
                           "epsilon": config.epsilon, "delta": config.delta,
                           "noise": config.noise,
                           "params": json.loads(json.dumps(config.params)),
                           "seeded": config.seed is not None},
            "silos": [{"node": node_name(n), "rows": r}
                      for n, r in zip(result.nodes, result.rows, strict=True)],
            "rounds": result.rounds,
            "exchange_seconds": [round(t, 3) for t in result.exchange_seconds],
            "seconds": round(result.seconds, 3)}
