"""The ``fedustat`` command line (``fedustat.cli``), run in-process with ``main([...])``.

The "exact" values the command prints are compared with the statistics computed here
directly (scikit-learn, NumPy, brute force over pairs and triples); its private estimate
with the API's result for the same seed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

import fedustat
from fedustat import datasets
from fedustat.cli import build_parser, main
from fedustat.stats import gini_kernel, variance_kernel

TOL = 1e-12
#: Valid ranges of the statistics (Kernel.statistic_range; Gini and variance are also
#: bounded above by their column bounds, far from these releases). The Mann-Whitney U's
#: is [0, n+ n-] (106 x 179 on the breast-cancer scores); Renyi-2's [0, ln C(n,2)].
VALID_RANGE = {"auc": (0.0, 1.0), "mann-whitney": (0.0, 106.0 * 179.0),
               "kendall": (-1.0, 1.0), "gini": (0.0, math.inf),
               "variance": (0.0, math.inf), "duplicate": (0.0, 1.0),
               "renyi2": (0.0, math.inf), "rand": (0.0, 1.0), "vus": (0.0, 1.0)}
#: The default table's rows: every U-statistic but tau-b, which no private protocol
#: releases (its tie correction reads private tie counts).
STATISTICS = ["auc", "mann-whitney", "kendall", "gini", "variance", "duplicate", "renyi2",
              "rand", "vus"]
JSON_KEYS = {"statistic", "data", "n", "exact", "estimate", "std_error", "ci95_low",
             "ci95_high", "error", "protocol", "privacy", "bits_per_party", "noise", "trust"}
OPTIONS = ["--statistic", "--data", "--file", "--evaluate", "--columns", "--epsilon", "--delta",
           "--column-bounds", "--column-values", "--precision", "--noise",
           "--protocol", "--param", "--bounds", "--seed", "--format",
           "--engine", "--workers", "--partitions", "--budget", "--grid-points",
           "--progress", "--no-progress"]


CsvFile = tuple[Path, np.ndarray, np.ndarray, np.ndarray]


def pair_mean(x: np.ndarray, f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> float:
    i, j = np.triu_indices(len(x), 1)
    return float(np.mean(f(x[i], x[j])))


def brute_vus(scores: np.ndarray, classes: np.ndarray) -> float:
    """P(S0 < S1 < S2), ties broken uniformly (average over the 6 tie-break orders)."""
    s = [scores[classes == c] for c in range(3)]
    grid = np.meshgrid(*s, indexing="ij")
    total = np.zeros(grid[0].shape)
    for prio in itertools.permutations(range(3)):
        def before(a: int, b: int, prio: tuple[int, ...] = prio) -> np.ndarray:
            return (grid[a] < grid[b]) | ((grid[a] == grid[b]) & (prio[a] < prio[b]))
        total += before(0, 1) & before(1, 2)
    return float(np.mean(total / 6.0))


def direct_exact_values() -> dict[str, float]:
    """Every statistic of the default table, computed without fedustat's kernels."""
    bc = datasets.load("breast_cancer_scores")
    db = datasets.load("diabetes_pairs")
    wine = datasets.load("wine_cultivars")
    bmi, prog = np.asarray(db["bmi"]), np.asarray(db["progression"])
    cultivar = np.asarray(wine["cultivar"])
    duplicate = pair_mean(cultivar, lambda a, b: a == b)
    score, label = np.asarray(bc["score"]), np.asarray(bc["label"])
    positive, negative = score[label == 1], score[label == 0]
    sex, progression_class = np.asarray(db["sex"]), np.asarray(db["progression_class"])
    return {
        "auc": roc_auc_score(bc["label"], bc["score"]),
        # Pairs (positive, negative) with the positive scored higher, ties 1/2.
        "mann-whitney": float(np.sum(positive[:, None] > negative[None, :])
                              + 0.5 * np.sum(positive[:, None] == negative[None, :])),
        "kendall": pair_mean(np.arange(bmi.size), lambda i, j: np.sign(bmi[i] - bmi[j])
                             * np.sign(prog[i] - prog[j])),
        "gini": pair_mean(bmi, lambda a, b: np.abs(a - b)),
        "variance": float(np.var(bmi, ddof=1)),
        "duplicate": duplicate,
        "renyi2": -math.log(duplicate),
        # Pairs that both groupings put together, or both apart.
        "rand": pair_mean(np.arange(sex.size), lambda i, j: (sex[i] == sex[j])
                          == (progression_class[i] == progression_class[j])),
        "vus": brute_vus(bmi, np.asarray(db["progression_class"])),
    }


@pytest.fixture(scope="module")
def exact_values() -> dict[str, float]:
    return direct_exact_values()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> list[dict]:
    return json.loads(run(capsys, "estimate", "--format", "json", *argv))


def fails(capsys: pytest.CaptureFixture[str], *argv: str, match: str) -> str:
    """The command exits with a non-zero status and a message matching ``match``."""
    with pytest.raises(SystemExit, match=match) as info:
        main(list(argv))
    code = info.value.code
    assert isinstance(code, str) and code.startswith("error: ")  # exit status 1
    return code


HEADERS = ["statistic", "data", "n", "exact", "estimate", "std_error", "95% CI", "error",
           "protocol", "bits/party"]
#: The table of release-only mode (a user's file without --evaluate).
RELEASE_HEADERS = [h for h in HEADERS if h not in ("exact", "error")]


def table_rows(text: str, exact: bool = True) -> list[list[str]]:
    lines = text.splitlines()
    dashes = next(i for i, line in enumerate(lines) if set(line) <= {"-", " "} and line)
    header = [h for h in lines[dashes - 1].split("  ") if h.strip()]
    rows = []
    for line in lines[dashes + 1:]:
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        if len(cells) != len(header):
            break
        rows.append(cells)
    assert [h.strip() for h in header] == (HEADERS if exact else RELEASE_HEADERS)
    return rows


# ------------------------------------------------------------------ estimate


def test_default_table_has_every_statistic(capsys: pytest.CaptureFixture[str],
                                           exact_values: dict[str, float]) -> None:
    out = run(capsys, "estimate")
    assert out.startswith("Exact statistics and the central-laplace release "
                          "(epsilon=1, delta=0, seed=0: a simulation study, not a "
                          "protection)")
    rows = table_rows(out)
    assert [r[0] for r in rows] == STATISTICS
    for name, _data, n, exact, *_rest, protocol, bits in rows:
        assert exact == f"{exact_values[name]:.4f}", name
        assert protocol == "central-laplace"
        assert int(n) > 100
        assert float(bits) in (64.0, 128.0)
    assert "computed from public quantities only" in out
    assert "not computed: kendall-b with protocol central-laplace: kernel 'kendall_tau_b' " \
           "maps U to its statistic with private data" in out


def test_json_has_the_documented_keys_and_values(capsys: pytest.CaptureFixture[str],
                                                 exact_values: dict[str, float]) -> None:
    rows = run_json(capsys, "--seed", "5", "--epsilon", "0.5")
    assert [r["statistic"] for r in rows] == STATISTICS
    for row in rows:
        assert set(row) == JSON_KEYS
        assert row["exact"] == pytest.approx(exact_values[row["statistic"]], rel=TOL)
        assert row["error"] == pytest.approx(row["estimate"] - row["exact"], rel=TOL, abs=TOL)
        half = row["std_error"] / math.sqrt(2.0) * math.log(20.0)  # Laplace: b ln(1/0.05)
        # The interval is intersected with the statistic's valid range (releases are
        # clipped into it by default; none of these estimates is itself clipped).
        low, high = VALID_RANGE[row["statistic"]]
        assert low < row["estimate"] < high
        if row["statistic"] == "renyi2":
            # -ln U: U's Laplace interval mapped through -ln (the s.e. is U's, times the
            # slope 1 / U of the map).
            u = math.exp(-row["estimate"])
            half *= u
            assert row["ci95_low"] == pytest.approx(-math.log(u + half), rel=1e-9)
            assert row["ci95_high"] == pytest.approx(-math.log(u - half), rel=1e-9)
        else:
            assert row["ci95_low"] == pytest.approx(max(row["estimate"] - half, low),
                                                    rel=1e-9)
            assert row["ci95_high"] == pytest.approx(min(row["estimate"] + half, high),
                                                     rel=1e-9)
        assert row["protocol"] == "central-laplace"
        assert row["privacy"].startswith("(eps=0.5) central DP")
        assert row["noise"] == "simulation" and isinstance(row["trust"], list)
    auc = rows[0]
    assert auc["data"] == "breast_cancer_scores:score,label"
    assert auc["n"] == 285 and auc["bits_per_party"] == 128.0
    bc = datasets.load("breast_cancer_scores")
    api = fedustat.roc_auc_score(bc["label"], bc["score"], epsilon=0.5, rng=5)
    assert auc["estimate"] == api.value and auc["std_error"] == api.std_error


def test_seed_reproduces_and_changes_the_release(capsys: pytest.CaptureFixture[str]) -> None:
    first = run_json(capsys, "--statistic", "auc", "--seed", "3")[0]
    again = run_json(capsys, "--statistic", "auc", "--seed", "3")[0]
    other = run_json(capsys, "--statistic", "auc", "--seed", "4")[0]
    assert first == again
    assert first["estimate"] != other["estimate"]


def test_infinite_epsilon_and_exact_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (("--epsilon", "inf"), ("--protocol", "exact")):
        row = run_json(capsys, "--statistic", "kendall", *argv)[0]
        assert row["protocol"] == "exact"
        assert row["estimate"] == row["exact"] and row["error"] == 0.0
        assert row["privacy"] == "not private"


def test_bundled_data_with_other_columns(capsys: pytest.CaptureFixture[str]) -> None:
    row = run_json(capsys, "--statistic", "kendall", "--data", "linnerud_exercise",
                   "--columns", "chins,situps")[0]
    ln = datasets.load("linnerud_exercise")
    x, y = np.asarray(ln["chins"]), np.asarray(ln["situps"])
    tau_a = pair_mean(np.arange(x.size),
                      lambda i, j: np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]))
    assert row["data"] == "linnerud_exercise:chins,situps" and row["n"] == 20
    assert row["exact"] == pytest.approx(tau_a, rel=TOL)


@pytest.fixture
def scores_csv(tmp_path: Path) -> CsvFile:
    rng = np.random.default_rng(0)
    n = 50
    label = rng.integers(0, 2, n)
    score = (rng.normal(size=n) + label).round(2)
    income = rng.uniform(0, 100, n).round(3)
    path = tmp_path / "scores.csv"
    lines = ["id,income,score,label"] + [f"{i},{income[i]},{score[i]},{label[i]}"
                                         for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path, score, label, income


def test_auc_from_a_csv_file(capsys: pytest.CaptureFixture[str], scores_csv: CsvFile) -> None:
    path, score, label, _ = scores_csv
    row = run_json(capsys, "--statistic", "auc", "--file", str(path), "--columns",
                   "score,label", "--epsilon", "2", "--seed", "1", "--evaluate")[0]
    assert row["data"] == f"{path}:score,label"
    assert row["n"] == 50
    assert row["exact"] == pytest.approx(roc_auc_score(label, score), rel=TOL)
    api = fedustat.roc_auc_score(label, score, epsilon=2.0, rng=1)
    assert row["estimate"] == api.value
    # The table format works on a file too.
    out = run(capsys, "estimate", "--statistic", "auc", "--file", str(path), "--columns",
              "score,label", "--evaluate")
    assert table_rows(out)[0][0] == "auc"


def test_gini_and_variance_from_a_csv_file_with_bounds(capsys: pytest.CaptureFixture[str],
                                                       scores_csv: CsvFile) -> None:
    path, _, _, income = scores_csv
    gini = run_json(capsys, "--statistic", "gini", "--file", str(path), "--columns", "income",
                    "--bounds", "0,100", "--evaluate")[0]
    assert gini["exact"] == pytest.approx(pair_mean(income, lambda a, b: np.abs(a - b)),
                                          rel=TOL)
    assert gini["std_error"] == pytest.approx(
        math.sqrt(2) * 2 / 50 * gini_kernel((0, 100)).sensitivity, rel=1e-6)
    var = run_json(capsys, "--statistic", "variance", "--file", str(path), "--columns",
                   "income", "--bounds", "0,100", "--evaluate")[0]
    assert var["exact"] == pytest.approx(np.var(income, ddof=1), rel=TOL)
    assert var["std_error"] == pytest.approx(
        math.sqrt(2) * 2 / 50 * variance_kernel((0, 100)).sensitivity, rel=1e-6)


def test_auc_from_a_parquet_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    score = np.array([0.1, 0.4, 0.35, 0.8, 0.5, 0.9])
    label = np.array([0, 1, 0, 1, 0, 1])
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"s": score, "y": label}), path)
    row = run_json(capsys, "--statistic", "auc", "--file", str(path), "--columns", "s,y",
                   "--evaluate")[0]
    assert row["exact"] == pytest.approx(roc_auc_score(label, score), rel=TOL)


# ------------------------------------------------------------------ release-only mode


def test_a_file_gets_the_release_only_unless_evaluate_is_given(
        capsys: pytest.CaptureFixture[str], scores_csv: CsvFile) -> None:
    path, score, label, _ = scores_csv
    exact = roc_auc_score(label, score)
    args = ("--statistic", "auc", "--file", str(path), "--columns", "score,label",
            "--epsilon", "2", "--seed", "1")
    (row,) = run_json(capsys, *args)
    # The same keys as always, the exact value and the error withheld.
    assert set(row) == JSON_KEYS
    assert row["exact"] is None and row["error"] is None
    api = fedustat.roc_auc_score(label, score, epsilon=2.0, rng=1)
    assert row["estimate"] == api.value and row["std_error"] == api.std_error
    assert row["ci95_low"] < row["estimate"] < row["ci95_high"]
    assert row["privacy"].startswith("(eps=2) central DP")
    # --evaluate adds the exact value and the error; the release itself is unchanged.
    (evaluated,) = run_json(capsys, *args, "--evaluate")
    assert evaluated["exact"] == pytest.approx(exact, rel=TOL)
    assert evaluated["error"] == pytest.approx(api.value - exact, rel=TOL, abs=TOL)
    assert {k: v for k, v in evaluated.items() if k not in ("exact", "error")} == \
        {k: v for k, v in row.items() if k not in ("exact", "error")}


def test_release_only_table_has_no_exact_column_nor_value(
        capsys: pytest.CaptureFixture[str], scores_csv: CsvFile) -> None:
    path, score, label, _ = scores_csv
    exact = f"{roc_auc_score(label, score):.4f}"
    args = ("estimate", "--statistic", "auc", "--file", str(path), "--columns", "score,label")
    out = run(capsys, *args)
    (row,) = table_rows(out, exact=False)
    assert out.startswith("The central-laplace release (epsilon=1")
    assert row[0] == "auc" and row[2] == "50"
    assert exact not in out
    assert "exact: not shown (release only, for your own data); --evaluate" in out
    assert "privacy: (eps=1) central DP" in out
    evaluated = run(capsys, *args, "--evaluate")
    (row,) = table_rows(evaluated)
    assert row[3] == exact
    assert "exact: not shown" not in evaluated


def test_a_non_private_release_of_a_file_needs_evaluate(
        capsys: pytest.CaptureFixture[str], scores_csv: CsvFile) -> None:
    path, score, label, _ = scores_csv
    args = ("--statistic", "auc", "--file", str(path), "--columns", "score,label")
    for extra in (("--epsilon", "inf"), ("--protocol", "exact")):
        fails(capsys, "estimate", *args, *extra,
              match="--epsilon inf and --protocol exact print the exact, non-private value "
                    "of your data; add --evaluate to confirm")
        (row,) = run_json(capsys, *args, *extra, "--evaluate")
        assert row["estimate"] == pytest.approx(roc_auc_score(label, score), rel=TOL)
        assert row["privacy"] == "not private"


def test_bundled_data_still_show_the_exact_value(capsys: pytest.CaptureFixture[str],
                                                 exact_values: dict[str, float]) -> None:
    (row,) = run_json(capsys, "--statistic", "auc", "--data", "breast_cancer_scores")
    assert row["exact"] == pytest.approx(exact_values["auc"], rel=TOL)


def test_evaluate_is_refused_with_partitions(capsys: pytest.CaptureFixture[str],
                                            tmp_path: Path) -> None:
    fails(capsys, "estimate", "--statistic", "auc", "--engine", "local", "--partitions",
          str(tmp_path), "--evaluate", match="--evaluate computes the exact value from the "
          "rows in this process; with --partitions the rows stay with the workers")


def test_help_says_evaluate_reads_the_raw_data(capsys: pytest.CaptureFixture[str]) -> None:
    est = _subparsers(build_parser())["estimate"]
    text = " ".join(est.format_help().split())
    assert "exact (non-private) value of --file's raw rows" in text
    assert "is NOT private" in text
    assert "Bundled data sets are public demo data and always show the exact value" in text


# ------------------------------------------------------------------ estimate errors


def test_unknown_data_set(capsys: pytest.CaptureFixture[str]) -> None:
    fails(capsys, "estimate", "--data", "nope",
          match=r"unknown data set 'nope'; available data sets: breast_cancer_scores")


def test_file_without_columns(capsys: pytest.CaptureFixture[str], scores_csv: CsvFile) -> None:
    fails(capsys, "estimate", "--statistic", "auc", "--file", str(scores_csv[0]),
          match=r"--file needs --columns naming the file's columns for auc "
                r"\(in order: score, label\)")


def test_file_with_all_statistics(capsys: pytest.CaptureFixture[str], scores_csv: CsvFile) -> None:
    fails(capsys, "estimate", "--file", str(scores_csv[0]), "--columns", "score,label",
          match=r"with --file choose one --statistic")


@pytest.mark.parametrize("statistic", ["gini", "variance"])
def test_bounded_statistic_on_a_file_needs_bounds(capsys: pytest.CaptureFixture[str],
                                                  scores_csv: CsvFile, statistic: str) -> None:
    fails(capsys, "estimate", "--statistic", statistic, "--file", str(scores_csv[0]),
          "--columns", "income",
          match=rf"{statistic} on a file needs --bounds LO,HI \(public bounds\)")


@pytest.mark.parametrize("bounds", ["1", "a,b", "1,2,3"])
def test_malformed_bounds(capsys: pytest.CaptureFixture[str], bounds: str) -> None:
    fails(capsys, "estimate", "--statistic", "gini", "--bounds", bounds,
          match=r"--bounds must be two numbers separated by a comma")


def test_values_outside_the_bounds(capsys: pytest.CaptureFixture[str], scores_csv: CsvFile) -> None:
    fails(capsys, "estimate", "--statistic", "gini", "--file", str(scores_csv[0]),
          "--columns", "income", "--bounds", "0,50",
          match=r"gini on .*scores.csv:income: x has values outside the declared bounds")


@pytest.mark.parametrize("epsilon", ["0", "-1", "nan"])
def test_bad_epsilon(capsys: pytest.CaptureFixture[str], epsilon: str) -> None:
    fails(capsys, "estimate", "--statistic", "auc", f"--epsilon={epsilon}",
          match=r"--epsilon must be > 0, got ")


@pytest.mark.parametrize("delta", ["1", "-0.5", "nan"])
def test_bad_delta(capsys: pytest.CaptureFixture[str], delta: str) -> None:
    fails(capsys, "estimate", "--statistic", "auc", f"--delta={delta}",
          match=r"--delta must be in \[0, 1\), got ")


def test_unknown_column_in_bundled_data(capsys: pytest.CaptureFixture[str]) -> None:
    fails(capsys, "estimate", "--statistic", "auc", "--columns", "score,nolabel",
          match=r"data set 'breast_cancer_scores' has no column 'nolabel'")


def test_unknown_column_in_a_file(capsys: pytest.CaptureFixture[str], scores_csv: CsvFile) -> None:
    fails(capsys, "estimate", "--statistic", "auc", "--file", str(scores_csv[0]),
          "--columns", "score,nolabel", match=r"no column\(s\) \['nolabel'\]")


def test_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fails(capsys, "estimate", "--statistic", "auc", "--file", str(tmp_path / "none.csv"),
          "--columns", "score,label", match=r"no such file: .*none.csv")


def test_unknown_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    fails(capsys, "estimate", "--statistic", "auc", "--protocol", "nope",
          match=r"unknown protocol 'nope'; available protocols: .*central-laplace")


def test_wrong_number_of_columns(capsys: pytest.CaptureFixture[str]) -> None:
    fails(capsys, "estimate", "--statistic", "auc", "--columns", "score",
          match=r"auc needs 2 column\(s\) \(score, label\), got 1")


def test_non_binary_labels_in_a_file(capsys: pytest.CaptureFixture[str],
                                     scores_csv: CsvFile) -> None:
    fails(capsys, "estimate", "--statistic", "auc", "--file", str(scores_csv[0]),
          "--columns", "score,income", match=r"auc on .*: label must be binary")


def test_unknown_statistic_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--statistic", "mode"])
    assert info.value.code == 2
    assert "invalid choice: 'mode'" in capsys.readouterr().err


def test_a_subcommand_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2
    assert "required: command" in capsys.readouterr().err


# ------------------------------------------------------------------ other commands and help


def test_datasets_lists_every_bundled_data_set(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(capsys, "datasets")
    for name in datasets.available():
        ds = datasets.load(name)
        assert f"{name}  ({ds.n} rows; task: {ds.task})" in out
        assert f"columns: {', '.join(ds.column_names)}" in out
    assert "breast_cancer_scores" in out and "wine_cultivars" in out


def test_protocols_lists_every_registered_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    lines = run(capsys, "protocols").splitlines()
    names = [line.split()[0] for line in lines]
    models = [line.split()[1] for line in lines]
    assert names == sorted(names)
    assert {"central-laplace", "exact"} <= set(names)
    assert models[names.index("central-laplace")] == "central"
    assert models[names.index("exact")] == "none"


def test_estimate_help_mentions_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["estimate", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in OPTIONS:
        assert option in out
    for name in STATISTICS:
        assert name in out
    # Nothing the parser accepts is left out of the list above.
    est = build_parser()._subparsers._group_actions[0].choices["estimate"]  # type: ignore
    declared = {s for a in est._actions for s in a.option_strings if s.startswith("--")}
    assert declared == {*OPTIONS, "--help"}


def test_installed_console_script() -> None:
    script = Path(sys.executable).parent / "fedustat"
    if not script.exists():
        pytest.skip(f"no console script next to {sys.executable}")
    done = subprocess.run([str(script), "estimate", "--statistic", "auc"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stdout)
    assert rows[0][0] == "auc" and rows[0][2] == "285"
    bad = subprocess.run([str(script), "estimate", "--epsilon=0"], capture_output=True,
                         text=True, timeout=60, check=False)
    assert bad.returncode == 1
    assert "error: --epsilon must be > 0" in bad.stderr


def test_param_passes_protocol_parameters_and_rejects_unknown_ones(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="protocol 'central-laplace' has no parameter 'foo'; "
                                         "its parameters are: design, noise"):
        main(["estimate", "--statistic", "auc", "--param", "foo=1"])
    with pytest.raises(SystemExit, match="--param must look like key=value"):
        main(["estimate", "--statistic", "auc", "--param", "k"])


def test_local_protocol_uses_public_column_domains_and_lists_refused_statistics(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["estimate", "--protocol", "ldp-quantized", "--epsilon", "2"]) == 0
    out = capsys.readouterr().out
    names = [row[0] for row in table_rows(out)]
    assert "auc" in names and "duplicate" in names and "vus" not in names
    assert "not computed: vus with protocol ldp-quantized" in out
    assert "degree 3" in out


def test_single_statistic_refused_by_protocol_exits_with_reason() -> None:
    with pytest.raises(SystemExit, match=r"vus with protocol ldp-quantized: .*degree 3"):
        main(["estimate", "--statistic", "vus", "--protocol", "ldp-quantized"])


def test_column_bounds_must_name_kernel_columns() -> None:
    with pytest.raises(SystemExit, match="--column-bounds/--column-values name bmi"):
        main(["estimate", "--statistic", "kendall", "--protocol", "ldp-quantized",
              "--column-bounds", "bmi=10,60"])


# ------------------------------------------------------------------ help and version


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"fedustat {fedustat.__version__}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def test_no_help_text_shows_a_default_of_none(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    commands = _subparsers(parser)
    assert {"estimate", "advise", "compare", "reproduce", "serve", "party"} <= set(commands)
    for name, sub in [("", parser), *commands.items()]:
        text = sub.format_help()
        assert "(default: None)" not in text, name
        assert "default: False" not in text, name
    # Options with a real default still say it.
    assert "(default: 1.0)" in commands["estimate"].format_help()
    assert "(default: 0)" in commands["reproduce"].format_help()


# ------------------------------------------------------------------ hints in flags


@pytest.fixture
def small_csv(tmp_path: Path) -> Path:
    path = tmp_path / "small.csv"
    path.write_text("score,label,x\n0.1,0,1\n0.4,1,2\n0.35,0,1\n0.8,1,3\n0.5,0,2\n0.9,1,3\n")
    return path


def test_column_bounds_hint_names_the_flag_and_the_column(
        capsys: pytest.CaptureFixture[str], small_csv: Path) -> None:
    code = fails(capsys, "estimate", "--statistic", "auc", "--protocol", "ldp-quantized",
                 "--file", str(small_csv), "--columns", "score,label",
                 match="column 'score' of kernel 'auc' needs declared --column-bounds "
                       "score=LO,HI .* or --column-values score=V1,V2,...")
    assert "bounds=(" not in code and "domain=" not in code
    # The hint works as written.
    assert main(["estimate", "--statistic", "auc", "--protocol", "ldp-quantized", "--file",
                 str(small_csv), "--columns", "score,label", "--column-bounds",
                 "score=0,1"]) == 0


def test_domain_hint_names_the_column_values_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code = fails(capsys, "estimate", "--statistic", "duplicate", "--protocol",
                 "ldp-quantized", "--column-values", "x=0,1",
                 match=r"x has values that are not in the declared domain: 2; declare every "
                       r"possible value in --column-values x=V1,V2,\.\.\.")
    assert "domain=" not in code


def test_precision_hint_names_the_bounds_flag(capsys: pytest.CaptureFixture[str],
                                              small_csv: Path) -> None:
    args = ["estimate", "--statistic", "auc", "--protocol", "pairs-2pc", "--precision", "0.001",
            "--file", str(small_csv), "--columns", "score,label"]
    code = fails(capsys, *args, match="precision needs --bounds LO,HI: the ring is sized")
    assert "bounds=(" not in code
    assert main([*args, "--bounds", "0,1"]) == 0


def test_score_domain_hint_names_param_d_and_bounds(capsys: pytest.CaptureFixture[str],
                                                    small_csv: Path) -> None:
    fails(capsys, "estimate", "--statistic", "auc", "--protocol", "ldp-tree", "--file",
          str(small_csv), "--columns", "score,label",
          match=r"domain size d \(--param d=D\) .* or public score --bounds LO,HI to bin")


def test_compare_hints_name_flags(capsys: pytest.CaptureFixture[str], small_csv: Path) -> None:
    code = fails(capsys, "compare", "--statistic", "gini", "--file", str(small_csv),
                 "--columns", "x", "--out", "", "--no-progress",
                 match=r"gini needs public bounds of the values \(--bounds LO,HI\)")
    assert "bounds=(" not in code
    fails(capsys, "compare", "--statistic", "auc", "--column-bounds", "q=0,1", "--out", "",
          "--no-progress", match="--column-bounds names 'q'")


def test_flag_hint_rewrites_keyword_spellings_only() -> None:
    from fedustat.cli import flag_hint

    # The curve releases' grid (reached through the networked roles).
    assert flag_hint("pass exactly one of thresholds (the public candidate grid) or "
                     "bounds=(low, high) (public bounds for an even grid)") == (
        "pass exactly one of --param thresholds=T1,T2,... (the public candidate grid) or "
        "--bounds LO,HI (public bounds for an even grid)")
    assert flag_hint("give the public grid: thresholds, or bounds=(lo, hi) (and precision=, "
                     "the grid spacing)") == (
        "give the public grid: --param thresholds=T1,T2,..., or --bounds LO,HI (and "
        "--precision P, the grid spacing)")
    # Messages already in flags are left alone.
    for text in ("error: give bounds with --bounds, not --param bounds=...",
                 "error: --param must look like key=value, got 'k'",
                 "error: --precision=12 is not a parameter",
                 "error: --param thresholds must be comma-separated numbers, got '0,1,x'"):
        assert flag_hint(text) == text


# ------------------------------------------------------------------ reproduce


def test_reproduce_json_is_the_experiment_result(capsys: pytest.CaptureFixture[str]) -> None:
    from fedustat import reproduce

    assert main(["reproduce", "003-thm1", "--quick", "--seed", "2", "--out", "",
                 "--json"]) == 0
    captured = capsys.readouterr()
    (entry,) = json.loads(captured.out)
    assert captured.err == ""  # no bar when stderr is not a terminal
    exp = reproduce.get_experiment("003-thm1")
    want = exp.run(quick=True, seed=2)
    assert {k: entry[k] for k in ("name", "paper", "target", "data", "title")} == {
        "name": exp.name, "paper": exp.paper, "target": exp.target, "data": exp.data,
        "title": want.title}
    assert entry["headers"] == want.headers
    # Seeded: the same rows as a direct run, through a JSON round trip.
    assert entry["rows"] == json.loads(json.dumps(want.rows, default=lambda v: v.item()))
    assert entry["notes"] == want.notes
    assert entry["quick"] is True and entry["seed"] == 2 and entry["report"] is None
    assert entry["seconds"] >= 0.0
    # --format json is the same output.
    assert main(["reproduce", "003-thm1", "--quick", "--seed", "2", "--out", "",
                 "--format", "json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [{k: v for k, v in e.items() if k != "seconds"} for e in again] == \
        [{k: v for k, v in entry.items() if k != "seconds"}]


def test_reproduce_progress_bar_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "003-thm1", "--quick", "--out", "", "--progress"]) == 0
    captured = capsys.readouterr()
    assert "003-thm1" in captured.err and "1/1" in captured.err
    assert "Theorem 1" in captured.out and "wall time" in captured.out
    assert "1/1" not in captured.out
    assert main(["reproduce", "003-thm1", "--quick", "--out", "", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_reproduce_several_experiments_write_one_report_each(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "reports"
    assert main(["reproduce", "003-thm1", "000-fig3", "--quick", "--out", str(out),
                 "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in entries] == ["003-thm1", "000-fig3"]
    for e in entries:
        assert e["report"] == str(out / e["name"] / "report.md")
        assert (out / e["name"] / "report.md").exists()


def test_reproduce_needs_a_known_name(capsys: pytest.CaptureFixture[str]) -> None:
    fails(capsys, "reproduce", match=r"name an experiment or pass --list; available: "
                                     r"000-fig3, .*, or all")
    fails(capsys, "reproduce", "003-thm1", "nope", match="unknown experiment 'nope'")


@pytest.mark.parametrize(("argv", "message"), [
    (["--statistic", "gini", "--n", "100"],
     "error: --bounds is required for gini: public LO,HI of the values"),
    (["--statistic", "auc"], "error: auc needs the class sizes --n-pos and --n-neg"),
    (["--statistic", "duplicate", "--n", "100"], "error: --domain-size is required for "
                                                "duplicate"),
    (["--statistic", "gini", "--n", "100", "--bounds", "0,1", "--domain-size", "3"],
     "error: gini is computed on a continuous column with bounds; --domain-size does not "
     "apply"),
    (["--statistic", "gini", "--n", "100", "--bounds", "0,1", "--n-pos", "3"],
     "error: --n-pos / --n-neg apply to labelled statistics"),
], ids=["bounds", "class-sizes", "domain-size", "domain-size-continuous", "n-pos"])
def test_advise_hints_name_its_options(capsys: pytest.CaptureFixture[str], argv: list[str],
                                       message: str) -> None:
    code = fails(capsys, "advise", "--epsilon", "1", *argv, match=".")
    assert code.startswith(message), code
    assert not any(word in code for word in ("n_pos", "n_neg", "domain_size", "(lo, hi)"))


def test_library_warnings_are_one_line_with_flags(capsys: pytest.CaptureFixture[str],
                                                  small_csv: Path) -> None:
    # U-MPC without declared bounds warns that it falls back to 002's fixed-point format.
    args = ["estimate", "--statistic", "kendall", "--protocol", "umpc", "--file",
            str(small_csv), "--columns", "score,x"]
    assert main(args) == 0
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith("warning: kendall_tau_a: no bounds declared")
    assert line.endswith("Declare --bounds LO,HI and --precision P (the smallest difference "
                         "that matters)")
    # The hint works as written: no warning with the bounds declared.
    assert main([*args, "--bounds", "0,3", "--precision", "0.01"]) == 0
    assert capsys.readouterr().err == ""


def test_a_warning_repeated_by_every_run_is_printed_once(
        capsys: pytest.CaptureFixture[str]) -> None:
    # compare runs U-MPC once per repetition and budget, each warning of the undeclared
    # fixed-point format; the reader needs it once.
    assert main(["compare", "--statistic", "duplicate", "--protocols", "umpc",
                 "--repetitions", "2", "--epsilons", "1,2", "--out", "", "--no-progress"]) == 0
    warnings_printed = [line for line in capsys.readouterr().err.splitlines()
                        if line.startswith("warning: ")]
    assert len(warnings_printed) == 1, warnings_printed
    assert "no bounds declared" in warnings_printed[0]


@pytest.mark.parametrize(("argv", "message"), [
    (["--statistic", "vus", "--protocol", "umpc", "--param", "comparison=fss"],
     "error: vus with protocol umpc: --param comparison=fss is a two-party construction; "
     "kernel 'vus' has groups of 3: use --param comparison=circuit (or 'auto')"),
    (["--statistic", "auc", "--protocol", "fedauc-laplace", "--param", "mechanism=gaussian"],
     "error: auc with protocol fedauc-laplace: --param mechanism=gaussian needs delta > 0 "
     "((epsilon, delta)-LabelDP); use --param mechanism=laplace for pure epsilon"),
    (["--statistic", "auc", "--protocol", "ldp-tree", "--param", "d=64", "--param",
      "split=budget-advanced"],
     "error: auc with protocol ldp-tree: --param split=budget-advanced needs delta > 0 "
     "(advanced composition gives (epsilon, delta)-LDP); use --param split=budget-basic"),
], ids=["comparison", "mechanism", "split"])
def test_protocol_parameter_hints_are_param_flags(capsys: pytest.CaptureFixture[str],
                                                  argv: list[str], message: str) -> None:
    code = fails(capsys, "estimate", *argv, match=".")
    assert code.startswith(message), code


def test_keyword_hints_of_the_library_become_options() -> None:
    from fedustat.cli import flag_hint
    from fedustat.protocols import registry
    from fedustat.stats import kernels

    # The real message of an LDP protocol asked for an infinite budget.
    with pytest.raises(ValueError) as info:
        registry.make("ldp-quantized", kernels.auc_kernel(), epsilon=math.inf,
                      bounds={"score": (0.0, 1.0)})
    assert "protocol='exact'" in str(info.value)
    assert "(use --protocol exact for the non-private value)" in flag_hint(str(info.value))
    assert flag_hint("column 'score' has no number of bins; pass k= or let the protocol "
                     "derive it") == ("column 'score' has no number of bins; pass --param "
                                      "k=K or let the protocol derive it")
    assert flag_hint("P=3 does not apply with all_pairs=True") == \
        "P=3 does not apply with --param all_pairs=true"
    # Keywords that are no protocol parameter are left as they are.
    text = "give the data either as data= (in memory) or as partitions= (stored data)"
    assert flag_hint(text) == text


def test_reproduce_list_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    from fedustat import reproduce

    assert main(["reproduce", "--list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in listed] == [e.name for e in reproduce.available()]
    first = reproduce.available()[0]
    assert listed[0] == {"name": first.name, "paper": first.paper, "target": first.target,
                         "data": first.data, "summary": first.summary}
