"""``fedustat datasets`` and ``fedustat protocols``: what is available, as a table or
JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from fedustat import catalogue, datasets
from fedustat.cli._options import _HelpFormatter, add_format
from fedustat.protocols import registry


def _dataset_listing() -> list[dict[str, Any]]:
    """Every bundled data set: name, rows, task, columns and the first line of its
    description."""
    listing = []
    for name in datasets.available():
        ds = datasets.load(name)
        listing.append({"name": name, "rows": int(ds.n), "task": ds.task,
                        "columns": list(ds.column_names),
                        "description": ds.description.splitlines()[0] if ds.description
                        else ""})
    return listing


def cmd_datasets(args: argparse.Namespace) -> int:
    listing = _dataset_listing()
    if args.format == "json":
        print(json.dumps(listing, indent=2))
        return 0
    for item in listing:
        print(f"{item['name']}  ({item['rows']} rows; task: {item['task']})")
        print(f"    columns: {', '.join(item['columns'])}")
        print(f"    {item['description']}")
    return 0


def _protocol_listing() -> list[dict[str, Any]]:
    """Every protocol: name, kind, privacy model, statistics served, summary, source."""
    listing = []
    for kind, entries in (("u-statistic", registry.available()),
                          ("federated curve release", registry.available_curves()),
                          ("central curve release", catalogue.CURVE_RELEASES.values())):
        for entry in entries:
            listing.append({"name": entry.name, "kind": kind, "model": entry.model.value,
                            "statistics": catalogue.statistics_served(entry.name),
                            "summary": entry.summary, "source": entry.source})
    return sorted(listing, key=lambda item: item["name"])


def cmd_protocols(args: argparse.Namespace) -> int:
    listing = _protocol_listing()
    if args.format == "json":
        print(json.dumps(listing, indent=2))
        return 0
    for item in listing:
        kind = "" if item["kind"] == "u-statistic" else f"{item['kind']}: "
        served = ", ".join(item["statistics"]) or "none"
        print(f"{item['name']:<22} {item['model']:<13} {kind}{item['summary']} "
              f"(statistics: {served})  [{item['source']}]")
    return 0



def add_parsers(sub: Any) -> None:
    """``fedustat datasets`` and ``fedustat protocols``."""
    ds = sub.add_parser("datasets", help="list the bundled data sets",
                        description="Every bundled data set: its rows, task and columns.",
                        formatter_class=_HelpFormatter)
    add_format(ds)
    ds.set_defaults(func=cmd_datasets)
    pr = sub.add_parser("protocols", help="list the available protocols",
                        description="Every protocol by name: the U-statistic protocols, the "
                                    "federated curve releases and the central curve "
                                    "releases, with their privacy model and the statistics "
                                    "each computes.", formatter_class=_HelpFormatter)
    add_format(pr)
    pr.set_defaults(func=cmd_protocols)
