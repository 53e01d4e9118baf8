"""The command line's privacy budget file: created, spent by `estimate`, refused when spent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedustat.cli import main


def _budget(tmp_path: Path, *extra: str) -> Path:
    path = tmp_path / "budget.json"
    assert main(["budget", str(path), "--epsilon", "1", "--adjacency", "score", *extra]) == 0
    return path


def _estimate(path: Path, statistic: str, epsilon: str) -> int:
    return main(["estimate", "--statistic", statistic, "--epsilon", epsilon,
                 "--budget", str(path), "--format", "json"])


def test_releases_spend_the_file_and_the_next_one_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _budget(tmp_path)
    assert _estimate(path, "auc", "0.4") == 0
    assert _estimate(path, "kendall", "0.4") == 0
    ledger = json.loads(path.read_text())["ledger"]
    assert len(ledger) == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        _estimate(path, "auc", "0.4")
    message = str(info.value.code)
    assert message.startswith("error: auc refused before any party sent anything: ")
    assert "over the total (epsilon=1" in message
    assert json.loads(path.read_text())["ledger"] == ledger  # nothing spent
    assert capsys.readouterr().out == ""  # no release printed
    assert main(["budget", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "spent: epsilon 0.8, delta 0; remaining: epsilon 0.2, delta 0" in shown


def test_budget_file_errors_name_the_fix(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(SystemExit, match=r"no budget file .*fedustat budget .* --epsilon E"):
        _estimate(missing, "auc", "0.4")
    path = _budget(tmp_path)
    with pytest.raises(SystemExit, match=r"exists; add --force"):
        main(["budget", str(path), "--epsilon", "2"])
    assert _budget(tmp_path, "--force") == path
    path.write_text("{not json")
    with pytest.raises(SystemExit, match=r"budget file .*: not valid JSON \(truncated"):
        _estimate(path, "auc", "0.4")
    with pytest.raises(SystemExit, match=r"rule='advanced' needs delta_slack"):
        main(["budget", str(tmp_path / "adv.json"), "--epsilon", "1", "--delta", "1e-6",
              "--rule", "advanced"])
