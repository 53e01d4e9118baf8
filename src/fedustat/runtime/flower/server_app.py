"""fedustat's ServerApp: the aggregator of a run inside Flower's deployment engine.

It reads the run config, waits for the SuperNodes, lets
:func:`fedustat.runtime.flower.driver.drive` run the protocol's rounds over Flower
messages (one ``query`` per node and exchange) and writes the release (value, interval,
epsilon, noise grade, measured cost) to the JSON file the run config names. Nothing but
that release leaves the ServerApp.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedustat.runtime.flower import records
from fedustat.runtime.flower.config import RunConfig
from fedustat.runtime.flower.driver import FlowerRun, drive, release_document
from fedustat.runtime.network.service import NetworkRunError

try:
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.serverapp import Grid, ServerApp
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("running inside Flower needs flwr: install fedustat's flower extra "
                      "(pip install '.[flower]' in the fedustat checkout)") from exc

__all__ = ["app", "run_server", "write_release"]

# How often the ServerApp asks the SuperLink which nodes are connected.
_NODE_POLL_SECONDS = 0.5
# How often it asks the SuperLink for the replies of an exchange. Grid.send_and_receive
# polls every 3 s; a shorter poll takes seconds off every exchange (docs/flower.md).
_REPLY_POLL_SECONDS = 0.2


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


def _grid_delivery(grid: Grid, run: str, timeout: float) -> Any:
    """``deliver`` for :func:`drive` over Flower: push one query per node, pull replies."""

    def deliver(action: str, contents: dict[int, dict[str, Any]], stage: str
                ) -> dict[int, tuple[Any, str | None]]:
        messages = [Message(RecordDict({records.RECORD: ConfigRecord(content)}),
                            dst_node_id=node, message_type=f"query.{action}",
                            group_id=f"{run}-{stage}")
                    for node, content in contents.items()]
        waiting = set(grid.push_messages(messages))
        deadline = time.monotonic() + timeout
        replies: dict[int, tuple[Any, str | None]] = {}
        while waiting and time.monotonic() < deadline:
            pulled = list(grid.pull_messages(list(waiting)))
            for reply in pulled:
                node = int(reply.metadata.src_node_id)
                if reply.has_error():
                    replies[node] = (None, str(reply.error.reason))
                else:
                    replies[node] = (reply.content, None)
            waiting.difference_update(m.metadata.reply_to_message_id for m in pulled)
            if waiting:
                time.sleep(_REPLY_POLL_SECONDS)
        return replies

    return deliver


def run_server(grid: Grid, config: RunConfig, run_id: int,
               publish: Callable[[FlowerRun], None] | None = None) -> FlowerRun:
    """Run the aggregator of ``config``'s protocol over the grid's SuperNodes.

    ``publish`` gets the release before the nodes are sent its summary (see ``drive``).
    """
    run = f"flower-{run_id}"
    nodes = _wait_for_nodes(grid, config.nodes, config.timeout)
    return drive(_grid_delivery(grid, run, config.timeout), nodes, config, run, publish)


def write_release(config: RunConfig, result: FlowerRun) -> Path:
    """Write the release file the run config names (relative to the ServerApp's directory)."""
    path = Path(config.release).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a reader never sees half a release.
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(release_document(config, result), indent=2) + "\n")
    partial.replace(path)
    return path


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Flower's entry point: run the configured protocol, write the release file."""
    config = RunConfig.parse(context.run_config)
    run_server(grid, config, int(context.run_id),
               publish=lambda result: write_release(config, result))
