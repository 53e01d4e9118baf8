"""``python -m fedustat.runtime.flower DIRECTORY``: write the Flower app for ``flwr run``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from fedustat.runtime.flower.config import write_app


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fedustat.runtime.flower",
        description="Write a Flower app (pyproject.toml) that runs fedustat's protocols; "
                    "then: flwr run DIRECTORY <superlink>")
    parser.add_argument("directory", help="where to write the app")
    parser.add_argument("--name", default="fedustat-flower", help="the app's project name")
    args = parser.parse_args(argv)
    path = write_app(args.directory, args.name)
    print(f"wrote {path / 'pyproject.toml'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
