"""One convention across the subcommands: defaults read from the library, one spelling per
option, "did you mean" for misspellings, listings as JSON, progress on stderr only, help
texts that render their percent signs."""

from __future__ import annotations

import argparse
import inspect
import json
import math
from pathlib import Path

import numpy as np
import pytest

import fedustat
from fedustat import catalogue, datasets
from fedustat.advisor import advise
from fedustat.cli import build_parser, main
from fedustat.curves import default_grid_points
from fedustat.privacy.budget import BudgetAccountant


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def default(parser: argparse.ArgumentParser, option: str) -> object:
    (action,) = [a for a in parser._actions if option in a.option_strings]
    return action.default


def signature_default(function: object, name: str) -> object:
    return inspect.signature(function).parameters[name].default  # type: ignore[arg-type]


# ------------------------------------------------------------------ defaults


def test_every_parser_default_is_the_library_constant() -> None:
    commands = subcommands()
    python_delta = signature_default(fedustat.estimate, "delta")
    with_epsilon = [name for name, cmd in commands.items()
                    if any("--epsilon" in a.option_strings for a in cmd._actions)]
    # Every subcommand that takes --epsilon defaults it the same way, except budget,
    # where its absence means "show the file".
    assert set(with_epsilon) == {"estimate", "advise", "budget", "serve", "party", "collect",
                                 "report", "service"}
    for name in with_epsilon:
        expected = None if name == "budget" else catalogue.DEFAULT_EPSILON
        assert default(commands[name], "--epsilon") == expected, name
        want_delta = (signature_default(BudgetAccountant, "delta") if name == "budget"
                      else python_delta)
        assert default(commands[name], "--delta") == want_delta, name
    budget = commands["budget"]
    for option, parameter in (("--rule", "rule"), ("--adjacency", "adjacency")):
        assert default(budget, option) == signature_default(BudgetAccountant, parameter)
    # No option of estimate restates a grid size: the curve's Python function decides.
    assert default(commands["estimate"], "--grid-points") is None
    assert python_delta == 0.0 and catalogue.DEFAULT_EPSILON == 1.0


@pytest.mark.parametrize(("statistic", "function"), [("ecdf", "ecdf"), ("roc", "roc_curve")])
def test_a_curve_from_the_command_line_is_the_python_release(
        statistic: str, function: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The same question (bundled data, the statistic's public bounds, epsilon 1, seed 3)
    # gets the same grid and the same released values from both.
    assert main(["estimate", "--statistic", statistic, "--seed", "3", "--format",
                 "json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    spec = catalogue.STATISTICS[statistic]
    data = datasets.load(spec.data)
    columns = [data[c] for c in spec.data_columns]
    if statistic == "ecdf":
        python = fedustat.ecdf(columns[0], epsilon=1.0, bounds=spec.default_bounds, rng=3)
        assert row["values"] == pytest.approx(list(python.values), abs=1e-12)
    else:
        score, label = columns
        python = fedustat.roc_curve(label, score, epsilon=1.0, bounds=spec.default_bounds,
                                    rng=3)
        assert row["tpr"] == pytest.approx(list(python.tpr), abs=1e-12)
    points = signature_default(getattr(fedustat, function), "grid_points")
    assert len(row["thresholds"]) == len(python.thresholds)
    # The ROC curve lists its grid from the top, then -inf (as scikit-learn's does).
    finite = sorted(t for t in row["thresholds"] if not isinstance(t, str))
    assert finite == pytest.approx(list(np.linspace(*spec.default_bounds, points)))


def test_grid_points_has_one_meaning_in_either_spelling(
        capsys: pytest.CaptureFixture[str]) -> None:
    rows = []
    for spelling in (["--grid-points", "17"], ["--param", "grid_points=17"]):
        assert main(["estimate", "--statistic", "ecdf", "--seed", "1", "--format", "json",
                     *spelling]) == 0
        rows.append(json.loads(capsys.readouterr().out)[0])
    assert len(rows[0]["thresholds"]) == 17 and rows[0] == rows[1]
    with pytest.raises(SystemExit, match=r"give the grid's size once: --grid-points N"):
        main(["estimate", "--statistic", "ecdf", "--grid-points", "9", "--param",
              "grid_points=9"])
    with pytest.raises(SystemExit, match=r"--grid-points sets the grid of ecdf.*U-statistics"):
        main(["estimate", "--statistic", "auc", "--grid-points", "9"])
    with pytest.raises(SystemExit, match=r"^error: --grid-points must be an integer >= 2"):
        main(["estimate", "--statistic", "roc", "--grid-points", "1"])


def test_advise_takes_column_bounds_as_estimate_does(capsys) -> None:
    assert main(["advise", "--statistic", "kendall", "--n", "500", "--epsilon", "1",
                 "--column-bounds", "x=0,10", "--column-bounds", "y=-1,1", "--format",
                 "json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    python = advise("kendall", n=500, epsilon=1.0, bounds={"x": (0, 10), "y": (-1, 1)})
    assert cli == json.loads(json.dumps(python.to_dict(), default=float))
    with pytest.raises(SystemExit, match=r"^error: --bounds takes one pair LO,HI; give each "
                                         r"column's bounds with --column-bounds"):
        main(["advise", "--statistic", "kendall", "--n", "500", "--bounds", "0,10;-1,1"])
    with pytest.raises(SystemExit, match=r"--column-bounds must look like COLUMN=LO,HI"):
        main(["advise", "--statistic", "kendall", "--n", "500", "--column-bounds", "0,1"])


# ------------------------------------------------------------------ did you mean


@pytest.mark.parametrize(("argv", "message"), [
    (["estimate", "--statistic", "acu"], "invalid choice: 'acu'"),
    (["estimate", "--epsilom", "1"], "unrecognized arguments: --epsilom 1"),
    (["estimat"], "invalid choice: 'estimat'"),
    (["serve", "--statistic", "kendal"], "invalid choice: 'kendal'"),
])
def test_usage_errors_suggest_the_nearest_spelling(argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert message in err
    want = {"acu": "'auc'", "--epsilom": "'--epsilon'", "estimat": "'estimate'",
            "kendal": "'kendall'"}
    word = next(w for w in want if w in " ".join(argv))
    assert err.endswith(f"; did you mean {want[word]}?")


def test_nothing_close_gets_no_suggestion(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["estimate", "--statistic", "zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err


def test_an_unknown_protocol_names_the_nearest(capsys) -> None:
    with pytest.raises(SystemExit, match=r"^error: unknown protocol 'central-laplase'; "
                                         r"available protocols: .*; did you mean "
                                         r"'central-laplace'\?$"):
        main(["estimate", "--statistic", "auc", "--protocol", "central-laplase"])
    with pytest.raises(SystemExit, match=r"unknown statistic\(s\) acu; .*did you mean 'auc'"):
        main(["compare", "--statistic", "acu"])


def test_budget_adjacency_is_checked_when_the_file_is_made(tmp_path: Path, capsys) -> None:
    path = tmp_path / "budget.json"
    with pytest.raises(SystemExit) as stop:
        main(["budget", str(path), "--epsilon", "1", "--adjacency", "scor"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "argument --adjacency: unknown adjacency 'scor'" in err
    assert err.strip().endswith("did you mean 'score'?")
    assert not path.exists()
    for relation in ("score", "add or remove one record",
                     "replace one record's score; labels and class sizes public"):
        assert main(["budget", str(path), "--epsilon", "1", "--adjacency", relation,
                     "--force"]) == 0
        assert json.loads(path.read_text())["adjacency"] == relation


# ------------------------------------------------------------------ listings, progress, help


def test_datasets_and_protocols_as_json(capsys) -> None:
    assert main(["datasets", "--format", "json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [item["name"] for item in listing] == list(datasets.available())
    first = datasets.load(listing[0]["name"])
    assert listing[0]["rows"] == first.n and listing[0]["columns"] == list(first.column_names)
    assert main(["protocols", "--format", "json"]) == 0
    assert {"central-laplace", "dp-ecdf"} <= {p["name"] for p in
                                              json.loads(capsys.readouterr().out)}


def test_progress_goes_to_stderr_and_never_into_json(capsys) -> None:
    argv = ["estimate", "--statistic", "auc", "--seed", "0", "--format", "json"]
    assert main([*argv, "--progress"]) == 0
    shown = capsys.readouterr()
    assert "statistic" in shown.err and "1/1" in shown.err
    assert json.loads(shown.out)[0]["statistic"] == "auc"
    # Not a terminal (pytest captures stderr) and no --progress: nothing on stderr.
    assert main(argv) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and json.loads(quiet.out) == json.loads(shown.out)


def test_every_help_text_renders_its_percent_signs(capsys) -> None:
    for name in subcommands():
        with pytest.raises(SystemExit) as stop:
            main([name, "--help"])
        assert stop.value.code == 0
        out = capsys.readouterr().out
        assert "%%" not in out and "%(" not in out, name
    with pytest.raises(SystemExit):
        main(["estimate", "--help"])
    assert "95% interval" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["ecdf", "roc"])
def test_estimate_by_name_uses_the_one_call_functions_grid(name: str) -> None:
    """fedustat.estimate(name, bounds=...) gets the grid fedustat.ecdf / roc_curve get
    from the same bounds (one default, curves.default_grid_points)."""
    rng = np.random.default_rng(5)
    scores = rng.random(60)
    labels = (rng.random(60) < 0.4).astype(float)
    if name == "ecdf":
        by_name = fedustat.estimate("ecdf", scores, epsilon=math.inf, bounds=(0.0, 1.0))
        one_call = fedustat.ecdf(scores, epsilon=math.inf, bounds=(0.0, 1.0))
    else:
        by_name = fedustat.estimate("roc", np.column_stack([scores, labels]),
                                    epsilon=math.inf, bounds=(0.0, 1.0))
        one_call = fedustat.roc_curve(labels, scores, epsilon=math.inf, bounds=(0.0, 1.0))
    # (The ROC curve's thresholds end with -inf, scikit-learn's start of the curve.)
    assert np.isfinite(by_name.thresholds).sum() == default_grid_points(name)
    np.testing.assert_array_equal(by_name.thresholds, one_call.thresholds)
