"""The command line's privacy budget file: created, spent by `estimate`, refused when spent,
safe when several processes spend it at once, and refused in one line when damaged."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


# -- concurrency ------------------------------------------------------------------------------

def test_concurrent_estimates_never_spend_more_than_the_file_holds(tmp_path: Path) -> None:
    # Before: each process read the ledger, ran, and wrote its own copy back: three
    # processes against a total of 1.0 printed 1.8 of releases and the file kept one 0.6.
    path = _budget(tmp_path)
    n_processes = 4
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o666)
    procs: list[subprocess.Popen[bytes]] = []
    outs, errs = [], []
    try:
        # Hold the file's lock while the processes start, so that all of them are running
        # and contending for it at once; then let them go together.
        fcntl.flock(lock, fcntl.LOCK_EX)
        for i in range(n_processes):
            outs.append(tmp_path / f"out{i}.json")
            errs.append(tmp_path / f"err{i}.txt")
            with outs[-1].open("wb") as out, errs[-1].open("wb") as err:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "fedustat.cli", "estimate", "--statistic", "auc",
                     "--epsilon", "0.6", "--budget", str(path), "--format", "json"],
                    stdout=out, stderr=err))
        deadline = time.monotonic() + 300  # a hang guard only

        def waited() -> list[bool]:
            return ["waiting for budget file" in e.read_text() for e in errs]

        while not all(waited()) and any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, [e.read_text() for e in errs]
            time.sleep(0.1)
        contended = waited()
        fcntl.flock(lock, fcntl.LOCK_UN)
        codes = [p.wait(timeout=300) for p in procs]
    finally:
        os.close(lock)
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=60)
    printed: dict[int, float] = {}
    for proc, code, out, err in zip(procs, codes, outs, errs, strict=True):
        text, message = out.read_text(), err.read_text()
        if code == 0:
            (row,) = json.loads(text)
            eps = float(re.match(r"\(eps=([0-9.e+-]+)\)", row["privacy"]).group(1))
            printed[proc.pid] = eps
        else:
            assert code == 1 and text == "", message
            assert "error: auc refused before any party sent anything: this release (0.6, 0)" \
                in message
    assert sum(printed.values()) <= 1.0
    assert len(printed) == 1  # room for exactly one 0.6 in 1.0
    rows = json.loads(path.read_text())["ledger"]
    assert [r["status"] for r in rows] == ["spent"] * len(printed)  # no reservation left
    assert {r["process"]["pid"]: r["epsilon"] for r in rows} == printed
    assert all(contended)  # every process was running and waiting for the file at once


# -- what the budget is checked with, and what it refuses ----------------------------------------

def _no_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the private protocols that ran (fedustat.api._release) from now on; the exact
    value of a bundled (public) data set, shown beside its release, is not recorded."""
    import fedustat.api as api

    calls: list[str] = []
    real = api._release

    def spy(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("protocol") != "exact":
            calls.append(str(kwargs.get("protocol")))
        return real(*args, **kwargs)

    monkeypatch.setattr(api, "_release", spy)
    return calls


def test_ghazi_shuffle_is_refused_with_its_own_delta_before_it_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    calls = _no_run(monkeypatch)
    pure = tmp_path / "pure.json"
    assert main(["budget", str(pure), "--epsilon", "1"]) == 0
    args = ["estimate", "--statistic", "kendall", "--protocol", "ghazi-shuffle", "--epsilon",
            "0.3", "--format", "json", "--budget"]
    with pytest.raises(SystemExit, match=r"kendall refused before any party sent anything: "
                                         r"this release \(0\.3, 5\.5[0-9]*e-13\)"):
        main([*args, str(pure)])
    assert calls == []
    approximate = tmp_path / "approximate.json"
    assert main(["budget", str(approximate), "--epsilon", "1", "--delta", "1e-9"]) == 0
    capsys.readouterr()
    assert main([*args, str(approximate)]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    (spent,) = json.loads(approximate.read_text())["ledger"]
    assert calls == ["ghazi-shuffle"]
    assert (spent["epsilon"], spent["status"]) == (0.3, "spent")
    assert 0.0 < spent["delta"] < 1e-12 and f"delta={spent['delta']:g}" in row["privacy"]


def test_evaluate_with_a_budget_is_refused_before_anything_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _no_run(monkeypatch)
    path = _budget(tmp_path)
    before = path.read_text()
    with pytest.raises(SystemExit, match=r"--evaluate computes the exact value .* no privacy "
                                         r"budget can account for; drop --evaluate"):
        main(["estimate", "--statistic", "auc", "--epsilon", "0.4", "--budget", str(path),
              "--evaluate"])
    assert calls == [] and path.read_text() == before


def test_a_failed_run_releases_its_reservation(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import fedustat.api as api

    path = _budget(tmp_path)
    during: list[list[str]] = []
    real = api._release

    def failing(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("protocol") == "exact":  # the bundled data's exact value
            return real(*args, **kwargs)
        during.append([r["status"] for r in json.loads(path.read_text())["ledger"]])
        raise ValueError("the aggregator stopped")

    monkeypatch.setattr(api, "_release", failing)
    with pytest.raises(SystemExit, match="auc with protocol central-laplace: the aggregator "
                                         "stopped"):
        _estimate(path, "auc", "0.4")
    assert during == [["reserved"]]  # reserved while it ran
    assert json.loads(path.read_text())["ledger"] == []  # and released after


def test_a_curve_statistic_is_reserved_and_committed(tmp_path: Path) -> None:
    path = _budget(tmp_path)
    assert main(["estimate", "--statistic", "median", "--epsilon", "0.5", "--budget",
                 str(path), "--format", "json"]) == 0
    rows = json.loads(path.read_text())["ledger"]
    assert [(r["epsilon"], r["status"]) for r in rows] == [(0.5, "spent")]


def test_a_killed_run_is_counted_named_and_shown(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = _budget(tmp_path)
    script = (
        "import os, signal, sys\n"
        "from fedustat import PrivacyGuarantee\n"
        "from fedustat.privacy.budget import BudgetFile\n"
        "with BudgetFile(sys.argv[1]) as budget:\n"
        "    budget.before_release(PrivacyGuarantee(0.5, adjacency='score'),\n"
        "                          name='auc (central-laplace)')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n")
    child = subprocess.run([sys.executable, "-c", script, str(path)], timeout=120,
                           capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL, child.stderr
    capsys.readouterr()
    assert main(["budget", str(path)]) == 0
    shown = capsys.readouterr().out
    assert "spent: epsilon 0.5, delta 0; remaining: epsilon 0.5" in shown
    assert re.search(r"\[reserved by process \d+ on .*; never committed: that run ended "
                     r"before it finished; counted as spent\]", shown)
    with pytest.raises(SystemExit, match=r"over the total \(epsilon=1"):
        _estimate(path, "auc", "0.6")  # the killed run's 0.5 still counts
    err = capsys.readouterr().err
    assert re.search(r"warning: budget file .*: 'auc \(central-laplace\)' \(epsilon 0.5, delta "
                     r"0\) was reserved by process \d+ .* never committed", err)
    assert _estimate(path, "auc", "0.4") == 0
    statuses = [r["status"] for r in json.loads(path.read_text())["ledger"]]
    assert statuses == ["reserved", "spent"]


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["ledger"].__setitem__(0, None), r"ledger row 1 must be an object, got null"),
    (lambda d: d["ledger"][0].pop("delta"), r"ledger row 1 misses the field\(s\) delta"),
    (lambda d: d["ledger"][0].__setitem__("epsilon", -0.4), r"epsilon must be > 0"),
    (lambda d: d["ledger"][0].__setitem__("epsilon", "0.4"), r"epsilon must be a number"),
    (lambda d: d.pop("adjacency"), r"misses the field\(s\) adjacency"),
    (lambda d: (d["ledger"][0].__setitem__("status", "reserved"),
                d["ledger"][0].pop("process")), r"a reserved row must name the process"),
    (lambda d: d["ledger"][0]["process"].__setitem__("pid", -3),
     r"process pid must be a positive integer, got -3"),
])
def test_a_corrupted_budget_file_is_refused_in_one_line(
        tmp_path: Path, edit: Any, message: str) -> None:
    path = _budget(tmp_path)
    assert _estimate(path, "auc", "0.4") == 0
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    for command in (["budget", str(path)],
                    ["estimate", "--statistic", "auc", "--epsilon", "0.1", "--budget",
                     str(path)]):
        with pytest.raises(SystemExit) as info:
            main(command)
        text = str(info.value.code)
        assert text.startswith(f"error: budget file {str(path)!r}: ")
        assert re.search(message, text) and "\n" not in text


def test_a_zcdp_row_whose_rho_does_not_match_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "z.json"
    assert main(["budget", str(path), "--epsilon", "5", "--delta", "1e-6", "--rule", "zcdp",
                 "--adjacency", "score"]) == 0
    assert _estimate(path, "auc", "0.4") == 0
    data = json.loads(path.read_text())
    assert data["ledger"][0]["rho"] == pytest.approx(0.4**2 / 2)
    data["ledger"][0]["rho"] = 0.0001
    path.write_text(json.dumps(data))
    with pytest.raises(SystemExit, match=r"ledger row 1 .*rho 0.0001 does not match its "
                                         r"epsilon 0.4"):
        _estimate(path, "auc", "0.1")
