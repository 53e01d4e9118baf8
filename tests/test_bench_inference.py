"""The frame of benchmarks/bench_inference.py: its table, its section choice and its verdict.

The sections' Monte Carlo runs are not repeated here: each section's validity claims are
tested, with fewer runs, next to the code they measure.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("bench_inference",
                                                  BENCHMARKS / "bench_inference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_section_is_a_module_with_rows(bench: ModuleType) -> None:
    for name in bench.SECTIONS:
        module = importlib.import_module(f"inference_{name}")
        assert callable(module.rows), name


def test_an_unknown_section_is_refused_by_name(bench: ModuleType,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--only", "hl,nonsense"])
    assert "unknown section(s) nonsense" in capsys.readouterr().err


def test_a_missed_goal_or_an_empty_section_fails_the_run(
        bench: ModuleType, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    row = importlib.import_module("inference_common").Row
    module = importlib.import_module("inference_hl")
    monkeypatch.setattr(module, "rows", lambda quick, seed: [
        row("1", "n=10", "size", "0.040", "<= 0.060", True)])
    assert bench.main(["--only", "hl"]) == 0
    out = capsys.readouterr().out
    assert "0.040" in out and "all goals met" in out
    monkeypatch.setattr(module, "rows", lambda quick, seed: [
        row("1", "n=10", "size", "0.090", "<= 0.060", False)])
    assert bench.main(["--only", "hl"]) == 1
    assert "NO" in capsys.readouterr().out
    monkeypatch.setattr(module, "rows", lambda quick, seed: [])
    assert bench.main(["--only", "hl"]) == 1
    assert "measured nothing" in capsys.readouterr().out
