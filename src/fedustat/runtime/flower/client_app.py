"""fedustat's ClientApp: one silo of a run, hosted by a Flower SuperNode.

The SuperNode's node config names the silo's data file (and optionally its silo index,
the largest epsilon its owner accepts and a file for the release summary). The silo's
records never leave the node: only the protocol's party-step messages do, as validated
wire frames. The work is :func:`fedustat.runtime.flower.node.answer`; this module only
moves Flower messages and keeps the node's memory of the run in the Flower context state.
"""

from __future__ import annotations

from typing import Any

from fedustat.runtime.flower import records
from fedustat.runtime.flower.node import answer

try:
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.clientapp import ClientApp
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("running inside Flower needs flwr: install fedustat's flower extra "
                      "(pip install '.[flower]' in the fedustat checkout)") from exc

__all__ = ["app"]

app = ClientApp()


def _handle(action: str, message: Message, context: Context) -> Message:
    kept: Any = context.state.get(records.RECORD, None)
    reply, memory = answer(action, message.content, context.run_config, context.node_config,
                           int(context.node_id), kept)
    if memory is not None:
        context.state[records.RECORD] = ConfigRecord(memory)
    return Message(RecordDict({records.RECORD: ConfigRecord(reply)}), reply_to=message)


@app.query(records.JOIN)
def join(message: Message, context: Context) -> Message:
    """A run asks this node to take part: its row count and configuration fingerprint."""
    return _handle(records.JOIN, message, context)


@app.query(records.ROUND)
def round_trip(message: Message, context: Context) -> Message:
    """One round: the server's part for this silo in, the party step's frame out."""
    return _handle(records.ROUND, message, context)


@app.query(records.RELEASE)
def release(message: Message, context: Context) -> Message:
    """The run's release summary (DP outputs only)."""
    return _handle(records.RELEASE, message, context)
