"""The Flower messages of a fedustat run: their types and their validated records.

Every exchange is one Flower ``query`` message carrying one ``ConfigRecord`` named
``fedustat``. Protocol messages travel inside it as fedustat wire frames (bytes,
:mod:`fedustat.runtime.wire`), never pickled; the other entries are plain strings and
integers. :func:`read_record` checks a record's exact key set and each value's type
before anything else reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

RECORD = "fedustat"

#: ``query.<action>`` message types the ClientApp answers.
JOIN = "fedustat_join"
ROUND = "fedustat_round"
RELEASE = "fedustat_release"

# What each record holds: key -> the Python type of its value.
# ``configuration``: the server's public configuration (JSON), which a node compares key
# by key with its own, so a refusal names each option that differs.
JOIN_REQUEST = {"run": str, "fingerprint": str, "configuration": str}
# ``certificate``: the node's party certificate (PEM) for relay rounds, "" without one.
JOIN_REPLY = {"rows": int, "silo": int, "fingerprint": str, "certificate": str}
ROUND_REQUEST = {"assignment": str, "round": int, "frame": bytes}
ROUND_REPLY = {"frame": bytes}
RELEASE_REQUEST = {"run": str, "release": str}
RELEASE_REPLY = {"received": bool}
REFUSAL = {"refused": str}


class RecordError(ValueError):
    """A Flower record that does not have the expected keys and types."""


def read_record(content: Mapping[str, Any], schema: Mapping[str, type], sender: str
                ) -> dict[str, Any]:
    """The ``fedustat`` record of a message, checked against ``schema``.

    A refusal (``{"refused": reason}``) from the other side raises :class:`RecordError`
    with its reason, so a node that declines a run is named with why.
    """
    if set(content) != {RECORD}:
        raise RecordError(f"message from {sender}: expected exactly one record "
                          f"{RECORD!r}, got {sorted(content)}")
    record = dict(content[RECORD])
    if set(record) == set(REFUSAL) and isinstance(record["refused"], str):
        raise RecordError(f"{sender} refused: {record['refused']}")
    if set(record) != set(schema):
        raise RecordError(f"message from {sender}: record keys must be {sorted(schema)}, "
                          f"got {sorted(record)}")
    for key, kind in schema.items():
        # bool is an int in Python: an int field must not accept True/False.
        value = record[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise RecordError(f"message from {sender}: {key} must be {kind.__name__}, got "
                              f"{type(value).__name__}")
    return record


def read_json(text: str, keys: Mapping[str, Any], what: str) -> dict[str, Any]:
    """A JSON object with exactly ``keys`` of the given types (lists for list entries)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError(f"{what} is not valid JSON ({exc})") from None
    if not isinstance(value, dict) or set(value) != set(keys):
        raise RecordError(f"{what} must be an object with keys {sorted(keys)}")
    for key, kind in keys.items():
        if not isinstance(value[key], kind) or (kind is int and isinstance(value[key], bool)):
            raise RecordError(f"{what}: {key} must be {kind.__name__}")
    return value


#: The assignment the server sends a node with every round (JSON).
#: ``bounds`` are the silos' first party ids and the end (where relayed rows go);
#: ``certificates`` every silo's party certificate, in silo order ("" for none): each
#: node checks them against its own copy of the deployment CA before deriving keys.
ASSIGNMENT = {"run": str, "fingerprint": str, "n_rows": int, "n_parties": int, "silo": int,
              "n_silos": int, "ids": list, "bounds": list, "certificates": list}
