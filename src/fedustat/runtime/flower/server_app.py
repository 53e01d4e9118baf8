"""fedustat's ServerApp: the aggregator of a run inside Flower's deployment engine.

It drives the protocol's rounds exactly as the standalone server
(:mod:`fedustat.runtime.network.server`) does: every SuperNode is one silo; a join
exchange learns each silo's row count and checks that it runs the same protocol
configuration (:func:`~fedustat.runtime.network.service.fingerprint`); then each round
it sends every node its part of the server's last message, collects one validated wire
frame per node, merges them in silo order, runs the server step, and at the end writes
the release (value, interval, epsilon, noise grade, measured cost) to the JSON file the
run config names and sends every node the release summary.

Failures never yield a number: a node that does not answer within ``timeout`` seconds,
answers with an error or a refusal, or sends a frame that fails validation stops the run
with a :class:`~fedustat.runtime.network.service.NetworkRunError` naming the node.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedustat._validation import as_seed_sequence
from fedustat.protocols.base import Estimate, Message, Role
from fedustat.runtime.flower import records
from fedustat.runtime.flower.config import RunConfig
from fedustat.runtime.network.server import _part_for
from fedustat.runtime.network.service import NetworkRunError, fingerprint, release_summary
from fedustat.runtime.simulate import MAX_ROUNDS, MessageLog, merge_party_messages
from fedustat.runtime.wire import Envelope, Expectation, WireError, decode, encode

try:
    from flwr.app import ConfigRecord, Context, RecordDict
    from flwr.app import Message as FlowerMessage
    from flwr.serverapp import Grid, ServerApp
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("running inside Flower needs flwr: pip install 'fedustat[flower]'"
                      ) from exc

__all__ = ["FlowerRun", "app", "run_server"]

# How often the ServerApp asks the SuperLink which nodes are connected.
_NODE_POLL_SECONDS = 0.5
# How often it asks the SuperLink for the replies of an exchange.
_REPLY_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class FlowerRun:
    """What the ServerApp produced: the release, the silos in order, the timing."""

    estimate: Estimate
    nodes: list[int]
    rows: list[int]
    rounds: int
    exchanges: int
    seconds: float


def _node_name(node_id: int) -> str:
    return f"node-{node_id}"


class _Exchange:
    """Sends one query per node and returns the validated records, by node id."""

    def __init__(self, grid: Grid, run: str, timeout: float) -> None:
        self.grid = grid
        self.run = run
        self.timeout = timeout
        self.count = 0

    def __call__(self, action: str, contents: dict[int, dict[str, Any]],
                 schema: dict[str, type], stage: str) -> dict[int, dict[str, Any]]:
        self.count += 1
        messages = [FlowerMessage(RecordDict({records.RECORD: ConfigRecord(content)}),
                                  dst_node_id=node, message_type=f"query.{action}",
                                  group_id=f"{self.run}-{stage}")
                    for node, content in contents.items()]
        replies = self._send_and_receive(messages)
        got: dict[int, dict[str, Any]] = {}
        for reply in replies:
            node = int(reply.metadata.src_node_id)
            if node not in contents or node in got:
                raise NetworkRunError(f"{stage}: a reply from {_node_name(node)}, which was "
                                      "not asked or already answered; no release")
            if reply.has_error():
                raise NetworkRunError(f"{stage}: {_node_name(node)} failed: "
                                      f"{reply.error.reason}; no release")
            try:
                got[node] = records.read_record(reply.content, schema, _node_name(node))
            except records.RecordError as exc:
                raise NetworkRunError(f"{stage}: {exc}; no release") from None
        missing = [_node_name(n) for n in contents if n not in got]
        if missing:
            raise NetworkRunError(f"{stage}: no answer within {self.timeout:g} s from "
                                  f"{', '.join(missing)}; no release")
        return got


    def _send_and_receive(self, messages: list[FlowerMessage]) -> list[FlowerMessage]:
        """Push, then pull the replies until all are in or ``timeout`` passes.

        ``Grid.send_and_receive`` does the same but polls every 3 s; a shorter poll takes
        seconds off every exchange (docs/flower.md, measurements).
        """
        waiting = set(self.grid.push_messages(messages))
        deadline = time.monotonic() + self.timeout
        replies: list[FlowerMessage] = []
        while waiting and time.monotonic() < deadline:
            pulled = list(self.grid.pull_messages(list(waiting)))
            replies.extend(pulled)
            waiting.difference_update(m.metadata.reply_to_message_id for m in pulled)
            if waiting:
                time.sleep(_REPLY_POLL_SECONDS)
        return replies


def _wait_for_nodes(grid: Grid, wanted: int, timeout: float) -> list[int]:
    """The connected nodes: ``wanted`` of them, or all connected ones when ``wanted`` is 0."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(int(n) for n in grid.get_node_ids())
        if wanted and len(nodes) > wanted:
            raise NetworkRunError(f"joining: {len(nodes)} SuperNodes are connected but the "
                                  f"run config says nodes = {wanted}; stop the extra nodes "
                                  "or set nodes = 0; no release")
        if (wanted == 0 and nodes) or (wanted and len(nodes) == wanted):
            return nodes
        if time.monotonic() > deadline:
            raise NetworkRunError(f"joining: {len(nodes)} SuperNode(s) connected within "
                                  f"{timeout:g} s, the run needs {wanted or 'at least 1'}; "
                                  "no release")
        time.sleep(_NODE_POLL_SECONDS)


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


def run_server(grid: Grid, config: RunConfig, run_id: int) -> FlowerRun:
    """Run the aggregator of ``config``'s protocol over the grid's SuperNodes."""
    started = time.monotonic()
    protocol = config.make_protocol()
    mark = fingerprint(protocol)
    run = f"flower-{run_id}"
    exchange = _Exchange(grid, run, config.timeout)
    nodes = _wait_for_nodes(grid, config.nodes, config.timeout)

    joined = exchange(records.JOIN, {key: {"run": run, "fingerprint": mark} for key in nodes},
                      records.JOIN_REPLY, "joining")
    for node, reply in joined.items():
        if reply["fingerprint"] != mark:
            raise NetworkRunError(f"joining: {_node_name(node)} runs protocol configuration "
                                  f"{reply['fingerprint']}, the server runs {mark}; no release")
        if reply["rows"] < 1:
            raise NetworkRunError(f"joining: {_node_name(node)} holds {reply['rows']} rows; "
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
    assignments = {node: json.dumps({
        "run": run, "fingerprint": mark, "n_rows": n_rows, "n_parties": n_parties,
        "silo": i, "n_silos": len(order), "ids": [int(ids[i][0]), int(ids[i][-1]) + 1]})
        for i, node in enumerate(order)}
    if config.seed is not None:
        # The simulator's streams for batches of these sizes: same seed, same numbers.
        server_rng = np.random.default_rng(as_seed_sequence(config.seed).spawn(len(order) + 1)[0])
    else:
        server_rng = np.random.default_rng(np.random.SeedSequence())

    state = protocol.init_server(n_parties)
    log = MessageLog(n_parties)
    to_parties: Message | None = None
    for current in range(MAX_ROUNDS):
        contents = {node: {"assignment": assignments[node], "round": current,
                           "frame": b"" if to_parties is None else encode(Envelope(
                               mark, run, current - 1, "server", "server",
                               _part_for(to_parties, ids[i])))}
                    for i, node in enumerate(order)}
        frames = exchange(records.ROUND, contents, records.ROUND_REPLY, f"round {current}")
        inbox = []
        for i, node in enumerate(order):
            expect = Expectation(mark, run, current, "party", _node_name(node), Role.SERVER,
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
            raise NetworkRunError(f"round {current}: the server step refused the nodes' "
                                  f"messages: {exc}; no release") from None
        if isinstance(out, Estimate):
            ops = int(out.cost.server_operations)
            estimate = out.with_cost(log.cost(server_operations=ops,
                                              offline_bits=out.cost.offline_bits))
            result = FlowerRun(estimate, order, rows, current + 1, exchange.count + 1,
                               time.monotonic() - started)
            summary = json.dumps(release_summary(estimate))
            exchange(records.RELEASE, {key: {"run": run, "release": summary} for key in order},
                     records.RELEASE_REPLY, "release")
            return result
        log.record(out)
        to_parties = out
    raise NetworkRunError(f"protocol {protocol.name!r} did not finish within {MAX_ROUNDS} "
                          "rounds")


def release_document(config: RunConfig, result: FlowerRun) -> dict[str, Any]:
    """The release file: the published summary, what was run, and the measured cost."""
    estimate = result.estimate
    return {**release_summary(estimate), "quantity": estimate.quantity,
            "protocol": estimate.protocol, "privacy": str(estimate.privacy),
            "model": str(estimate.privacy.model), "cost": asdict(estimate.cost),
            "run_config": {"protocol": config.protocol, "statistic": config.statistic,
                           "epsilon": config.epsilon, "delta": config.delta,
                           "params": json.loads(json.dumps(config.params)),
                           "seeded": config.seed is not None},
            "silos": [{"node": _node_name(n), "rows": r}
                      for n, r in zip(result.nodes, result.rows, strict=True)],
            "rounds": result.rounds, "flower_exchanges": result.exchanges,
            "seconds": round(result.seconds, 3)}


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower's entry point: run the configured protocol, write the release file."""
    config = RunConfig.parse(context.run_config)
    result = run_server(grid, config, int(context.run_id))
    path = Path(config.release).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a reader never sees half a release.
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(release_document(config, result), indent=2) + "\n")
    partial.replace(path)
