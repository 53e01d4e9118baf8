"""docs/flower.md's commands are the ones Flower accepts, read by Flower's own parsers.

* every ``flwr run ... --run-config X`` parses with flwr's ``parse_config_args`` (a TOML
  file the page shows, or key=value words after the shell's quoting) into a run config
  fedustat accepts, whose ``params`` is the JSON object the page means;
* every ``flower-superlink`` / ``flower-supernode`` command parses with flwr's argument
  parsers, and the SuperLink listens beyond 127.0.0.1 (the page is for several machines).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from flwr.common.config import parse_config_args
from flwr.superlink.cli.flower_superlink import _parse_args_run_superlink
from flwr.supernode.cli.flower_supernode import _parse_args_run_supernode

from fedustat.runtime.flower import RunConfig

PAGE = Path(__file__).resolve().parents[1] / "docs" / "flower.md"


def _commands(program: str) -> list[str]:
    """The page's command lines starting with ``program`` (backslash continuations joined)."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.strip().startswith(program):
            command = line.strip()
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            found.append(command)
    return found


def _toml_files() -> dict[str, str]:
    """The page's ```toml blocks whose first line is ``# NAME.toml``."""
    text = PAGE.read_text(encoding="utf-8")
    files = {}
    for body in re.findall(r"```toml\n(.*?)```", text, flags=re.S):
        first = body.splitlines()[0]
        if first.startswith("# ") and first.endswith(".toml"):
            files[first[2:].strip()] = body
    return files


def test_every_documented_run_config_parses_with_flowers_parser(tmp_path):
    runs = _commands("flwr run ")
    assert len(runs) >= 3, runs
    files = _toml_files()
    for command in runs:
        words = shlex.split(command, comments=True)
        value = words[words.index("--run-config") + 1]
        if value.endswith(".toml"):
            assert value in files, f"{command}: the page shows no {value}"
            (tmp_path / value).write_text(files[value], encoding="utf-8")
            value = str(tmp_path / value)
        overrides = parse_config_args([value])
        config = RunConfig.parse(overrides)
        assert isinstance(json.loads(overrides.get("params", "{}")), dict)
        config.make_protocol()
        assert config.nodes == 3, command


def test_the_old_escaped_quotes_are_refused_by_flower():
    # The page used to say params="{\"n_clients\": 3}": Flower's parser refuses it.
    import click

    with pytest.raises(click.ClickException, match="invalid format"):
        parse_config_args(['protocol="fedauc-rr" params="{\\"n_clients\\": 3}" nodes=3'])


def test_the_superlink_and_supernode_commands_parse_with_flowers_parsers():
    links = _commands("flower-superlink ")
    nodes = _commands("flower-supernode ")
    assert links and nodes
    for command in links:
        args = _parse_args_run_superlink().parse_args(shlex.split(command, comments=True)[1:])
        assert args.host not in ("127.0.0.1", "localhost"), \
            f"{command}: a SuperLink on 127.0.0.1 is out of the data holders' reach"
    for command in nodes:
        args = _parse_args_run_supernode().parse_args(shlex.split(command, comments=True)[1:])
        assert args.isolation == "subprocess"
        assert args.host == "127.0.0.1"  # the runtime API carries rows and key: loopback
