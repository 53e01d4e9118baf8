"""One catalogue of statistics (``fedustat.catalogue``) behind every entry point.

Walks the catalogue against ``fedustat estimate``, ``advise``, ``compare``, ``protocols``
and :func:`fedustat.estimate`: every statistic and every protocol name is accepted, and
each (statistic, protocol) pair either runs or is refused with that pair's own reason,
never argparse's "invalid choice". Randomness is seeded; the command line's releases are
checked against the Python API's for the same seed (both draw from the catalogue), and
the curves' exact values against NumPy.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps
from sklearn.metrics import rand_score

import fedustat
from fedustat import catalogue, compare, datasets
from fedustat.cli import _all_protocols, build_parser, flag_hint, main
from fedustat.cli._options import curve_grid_points
from fedustat.protocols import registry

STATISTICS = list(catalogue.STATISTICS)
PROTOCOLS = _all_protocols()
#: Statistics that only the non-private reference computes (tau-b: its tie correction
#: reads private tie counts, so every private protocol refuses it).
EXACT_ONLY = [name for name in STATISTICS if catalogue.protocols_for(name) == ["exact"]]


def mann_whitney_u(score: np.ndarray, label: np.ndarray) -> float:
    return float(sps.mannwhitneyu(score[label == 1], score[label == 0]).statistic)


#: The statistics the Flower run config had before the catalogue, against the library
#: that defines them (tau-b as SciPy's default variant).
REFERENCES = {
    "kendall-b": lambda x, y: float(sps.kendalltau(x, y, variant="b").statistic),
    "rand": lambda a, b: float(rand_score(a, b)),
    "mann-whitney": mann_whitney_u,
}
# Exact algorithms and the references sum the same pair counts in another order: equal
# up to float64 rounding of a ratio of counts below 2^53.
REFERENCE_RTOL = 1e-12


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def listed(protocol: str, names: set[str] | dict) -> bool:
    """``protocol`` is among ``names``, or an alias of one (the same registered factory)."""
    if protocol in names:
        return True
    known = {e.name for e in registry.available()}
    return protocol in known and any(
        other in known and registry.factory(other) is registry.factory(protocol)
        for other in names)


def bundled_columns(name: str) -> list[np.ndarray]:
    stat = catalogue.get(name)
    data = datasets.load(stat.data)
    return [np.asarray(data[c], dtype=np.float64) for c in stat.data_columns]


def grid(name: str) -> np.ndarray:
    lo, hi = catalogue.get(name).default_bounds
    # The command line's default grid: the Python function's (fedustat.ecdf, roc_curve).
    return np.linspace(lo, hi, curve_grid_points(name))


# ------------------------------------------------------------------ the catalogue itself


def test_every_statistic_has_a_protocol_and_every_protocol_a_statistic() -> None:
    for name in STATISTICS:
        assert catalogue.protocols_for(name), name
    for protocol in PROTOCOLS:
        assert catalogue.statistics_served(protocol), protocol
    # The curve releases serve exactly the curve statistics, and the others the rest.
    assert set(catalogue.statistics_served("dp-ecdf")) == {"ecdf", "quantile", "median"}
    assert catalogue.statistics_served("fedauc-rr") == ["auc"]
    assert "vus" not in catalogue.statistics_served("ldp-quantized")  # degree 3


def test_unknown_names_are_refused_with_the_list() -> None:
    with pytest.raises(ValueError, match=r"unknown statistic 'mode'; known statistics: auc"):
        catalogue.get("mode")
    assert catalogue.protocol_refusal("auc", "nope").startswith(
        "unknown protocol 'nope'; available protocols: ")


def test_subcommands_offer_every_statistic() -> None:
    sub = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for command in ("estimate", "advise"):
        option = next(a for a in sub[command]._actions if "--statistic" in a.option_strings)
        assert set(STATISTICS) <= set(option.choices), command


# ------------------------------------------------------------------ fedustat estimate


@pytest.mark.parametrize("name", STATISTICS)
def test_estimate_runs_every_statistic_with_its_default_protocol(
        capsys: pytest.CaptureFixture[str], name: str) -> None:
    if name in EXACT_ONLY:
        with pytest.raises(SystemExit) as info:
            main(["estimate", "--statistic", name, "--seed", "3"])
        refusal = catalogue.protocol_refusal(name, "central-laplace")
        assert refusal is not None and "private" in refusal
        assert info.value.code == flag_hint(f"error: {name} with protocol central-laplace: "
                                            f"{refusal}")
        return
    (row,) = run_json(capsys, "estimate", "--statistic", name, "--format", "json",
                      "--seed", "3")
    assert row["statistic"] == name
    stat = catalogue.get(name)
    columns = bundled_columns(name)
    if stat.kind == "u-statistic":
        assert row["protocol"] == "central-laplace"
        api = fedustat.estimate(name, stat.kernel(stat.default_bounds).pack(*columns),
                                epsilon=1.0, rng=3, **({"bounds": stat.default_bounds}
                                                        if stat.needs_bounds else {}))
        assert row["estimate"] == api.value
        return
    assert row["protocol"] == catalogue.DEFAULT_CURVE_RELEASE[name]
    if name in ("quantile", "median"):
        # The command line passes its bounds, as a Python user does: the continuous default.
        x, levels = columns[0], row["levels"]
        api = (fedustat.median(x, epsilon=1.0, bounds=stat.default_bounds, rng=3)
               if name == "median" else
               fedustat.quantile(x, levels, epsilon=1.0, bounds=stat.default_bounds, rng=3))
        assert api.method.startswith("continuous")
        assert row["values"] == [float(v) for v in np.atleast_1d(np.asarray(api))]
        exact = np.quantile(np.clip(x, *stat.default_bounds), levels, method="inverted_cdf")
        assert row["exact_values"] == [float(v) for v in exact]
        return
    options = {} if name == "hl" else {"thresholds": grid(name)}
    api = fedustat.estimate(name, np.column_stack(columns), epsilon=1.0, rng=3, **options)
    if name == "ecdf":
        assert row["values"] == [float(v) for v in api.values]
        x = columns[0]
        exact = (x[:, None] <= grid(name)[None, :]).mean(axis=0)
        np.testing.assert_allclose(row["exact_values"], exact, rtol=0, atol=1e-12)
    elif name == "roc":
        assert row["estimate"] == float(api.auc.value)
        assert row["tpr"] == [float(v) for v in api.tpr]
    else:
        assert row["estimate"] == float(api.statistic)
        assert row["pvalue"] == float(api.pvalue)


@pytest.mark.parametrize("name", STATISTICS)
def test_estimate_accepts_every_protocol_name(capsys: pytest.CaptureFixture[str],
                                             name: str) -> None:
    """Every pair runs, or is refused naming the pair and the protocol's reason."""
    served = catalogue.protocols_for(name)
    for protocol in PROTOCOLS:
        argv = ["estimate", "--statistic", name, "--protocol", protocol, "--format", "json"]
        try:
            code = main(argv)
        except SystemExit as exc:
            message = exc.code
            assert isinstance(message, str), (name, protocol, message)  # not argparse's 2
            assert message.startswith(f"error: {name} with protocol {protocol}: "), message
            if protocol not in served:
                refusal = catalogue.protocol_refusal(name, protocol)
                assert message == flag_hint(f"error: {name} with protocol {protocol}: "
                                            f"{refusal}")
            capsys.readouterr()
            continue
        assert code == 0 and protocol in served, (name, protocol)
        (row,) = json.loads(capsys.readouterr().out)
        assert row["statistic"] == name
        if row["protocol"] != protocol:  # an alias reports the protocol it stands for
            assert registry.factory(row["protocol"]) is registry.factory(protocol)


def test_a_served_pair_refused_for_its_parameters_says_which(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match=r"auc with protocol fedauc-gaussian: .*delta > 0"):
        main(["estimate", "--statistic", "auc", "--protocol", "fedauc-gaussian"])
    (row,) = run_json(capsys, "estimate", "--statistic", "auc", "--protocol",
                      "fedauc-gaussian", "--delta", "1e-6", "--format", "json")
    assert row["protocol"] == "fedauc-gaussian"


def test_curve_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = run_json(capsys, "estimate", "--statistic", "quantile", "--param",
                      "levels=0.2,0.8", "--param", "grid_points=16", "--format", "json")
    assert row["levels"] == [0.2, 0.8] and len(row["values"]) == 2
    with pytest.raises(SystemExit, match=r"ecdf with protocol dp-ecdf: unknown --param k"):
        main(["estimate", "--statistic", "ecdf", "--param", "k=3"])
    with pytest.raises(SystemExit, match=r"hl with protocol dp-ecdf-hl: its grid is fixed"):
        main(["estimate", "--statistic", "hl", "--bounds", "0,1"])


def test_curve_error_bars_are_printed(capsys: pytest.CaptureFixture[str]) -> None:
    # A quantile's error bar is the levels it answers (fedustat.curves.level_error_bound);
    # the ECDF's is its per-point interval. Both reach the JSON and the table.
    (row,) = run_json(capsys, "estimate", "--statistic", "median", "--epsilon", "0.4",
                      "--seed", "2", "--format", "json")
    bmi = fedustat.datasets.load("diabetes_pairs")["bmi"]
    # The command line passes its bounds (fedustat.quantile's continuous default).
    again = fedustat.median(bmi, epsilon=0.4, bounds=catalogue.get("median").default_bounds,
                            rng=np.random.default_rng(2))
    assert row["values"] == [again.value]
    assert row["level_intervals"] == [list(again.level_interval(0.95))]
    assert main(["estimate", "--statistic", "median", "--epsilon", "0.4", "--seed", "2"]) == 0
    low, high = again.level_interval(0.95)
    assert f"[{low:.3f}, {high:.3f}]" in capsys.readouterr().out
    (row,) = run_json(capsys, "estimate", "--statistic", "ecdf", "--epsilon", "1",
                      "--format", "json")
    assert len(row["std_error"]) == len(row["values"]) and min(row["std_error"]) > 0


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_the_flower_statistics_equal_scipy_and_sklearn_at_infinite_epsilon(
        capsys: pytest.CaptureFixture[str], name: str) -> None:
    columns = bundled_columns(name)
    reference = REFERENCES[name](*columns)
    release = fedustat.estimate(name, np.column_stack(columns), epsilon=math.inf)
    assert release.value == pytest.approx(reference, rel=REFERENCE_RTOL, abs=0)
    (row,) = run_json(capsys, "estimate", "--statistic", name, "--epsilon", "inf",
                      "--evaluate", "--format", "json")
    assert row["estimate"] == pytest.approx(reference, rel=REFERENCE_RTOL, abs=0)
    assert row["exact"] == row["estimate"] and row["privacy"] == "not private"


def test_the_new_statistics_default_data_are_bundled_columns_with_public_descriptions(
) -> None:
    # Rand: the diabetes patients grouped by sex and by progression class (public codes).
    rand = catalogue.get("rand")
    assert (rand.data, rand.data_columns) == ("diabetes_pairs", ("sex", "progression_class"))
    assert catalogue.public_description(rand, rand.data, rand.data_columns) == (
        {}, {"a": [1.0, 2.0], "b": [0.0, 1.0, 2.0]})
    sex = np.asarray(datasets.load("diabetes_pairs")["sex"])
    assert set(np.unique(sex)) == {1.0, 2.0}  # the declared codes are the data's codes
    assert catalogue.get("mann-whitney").labelled
    assert catalogue.get("kendall-b").kernel().name == "kendall_tau_b"


# ------------------------------------------------------------------ advise and compare


def advise_sizes(name: str) -> list[str]:
    stat = catalogue.get(name)
    sizes = (["--n-pos", "100", "--n-neg", "150"] if stat.columns[-1] == "label"
             else ["--n", "250"])
    if stat.needs_bounds:
        sizes += ["--bounds", "0,1"]
    if name == "duplicate":
        sizes += ["--domain-size", "3"]
    if name == "rand":
        sizes += ["--domain-size", "2,3"]  # sex and progression class
    return sizes


@pytest.mark.parametrize("name", STATISTICS)
def test_advise_lists_every_protocol_of_every_statistic(
        capsys: pytest.CaptureFixture[str], name: str) -> None:
    advice = run_json(capsys, "advise", "--statistic", name, "--epsilon", "1",
                      "--format", "json", *advise_sizes(name))
    predicted = {p["protocol"]: p for p in advice["predictions"]}
    for protocol in catalogue.protocols_for(name):
        if protocol != "exact":
            assert listed(protocol, predicted), (name, protocol)
    for p in predicted.values():
        if p["kind"] == "no prediction":
            assert not p["eligible"] and p["reason"]
            refusal = catalogue.protocol_refusal(name, p["protocol"])
            if refusal is not None:
                assert p["reason"] == f"cannot compute {name}: {refusal}"


@pytest.mark.parametrize("name", STATISTICS)
def test_compare_runs_every_statistic(capsys: pytest.CaptureFixture[str], name: str) -> None:
    result = run_json(capsys, "compare", "--statistic", name, "--epsilons", "1",
                      "--repetitions", "1", "--grid-points", "16", "--out", "",
                      "--no-progress", "--format", "json")
    ran = {r["protocol"] for r in result["rows"]}
    if name in EXACT_ONLY:
        # Nothing runs; each protocol's refusal is said.
        assert not ran
        refused = {e.name for e in registry.available()} - {"exact"}
        assert result["skipped"] == [
            f"{name}: {protocol} ({catalogue.protocol_refusal(name, protocol)})"
            for protocol in sorted(refused)]
        return
    assert ran, name
    assert {r["statistic"] for r in result["rows"]} == {name}
    for row in result["rows"]:
        assert math.isfinite(row["rmse"]), row
    # What did not run says why.
    for protocol in set(catalogue.protocols_for(name)) - ran - {"exact"}:
        said = any(protocol in line for line in result["skipped"])
        assert listed(protocol, ran) or said, (name, protocol)


def test_compare_describes_the_metric_of_every_statistic() -> None:
    # The text report's header reads it for every statistic compared.
    assert set(catalogue.STATISTICS) <= set(compare._METRIC)


def test_advise_asks_for_the_rand_clusterings_sizes() -> None:
    with pytest.raises(SystemExit, match=r"error: --domain-size is required for rand: the "
                                         r"public number of clusters in each of the two "
                                         r"clusterings"):
        main(["advise", "--statistic", "rand", "--n", "250", "--epsilon", "1"])


def test_advise_has_no_formula_for_the_exact_only_statistics(
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in EXACT_ONLY:
        advice = run_json(capsys, "advise", "--statistic", name, "--epsilon", "1",
                          "--n", "250", "--format", "json")
        assert advice["predictions"]
        assert all(p["kind"] == "no prediction" and not p["eligible"]
                   and p["reason"].startswith(f"cannot compute {name}: ")
                   for p in advice["predictions"])
        assert any(f"no error formula for {name}" in note for note in advice["notes"])


def test_compare_names_the_pair_it_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "compare", "--statistic", "vus", "--protocols",
                      "ldp-quantized,central-laplace", "--epsilons", "1", "--repetitions",
                      "1", "--out", "", "--no-progress", "--format", "json")
    assert [r["protocol"] for r in result["rows"]] == ["central-laplace"]
    assert result["skipped"] == [
        f"vus: ldp-quantized ({catalogue.protocol_refusal('vus', 'ldp-quantized')})"]


# ------------------------------------------------------------------ fedustat protocols


def test_protocols_lists_every_protocol_with_its_statistics(
        capsys: pytest.CaptureFixture[str]) -> None:
    listing = run_json(capsys, "protocols", "--format", "json")
    names = [item["name"] for item in listing]
    expected = ({e.name for e in registry.available()}
                | {e.name for e in registry.available_curves()} | set(catalogue.CURVE_RELEASES))
    assert names == sorted(expected)
    for item in listing:
        assert item["statistics"] == catalogue.statistics_served(item["name"])
    kinds = {item["name"]: item["kind"] for item in listing}
    assert kinds["ecdf-secagg"] == "federated curve release"
    assert kinds["dp-roc"] == "central curve release"
    assert kinds["umpc"] == "u-statistic"
    text = main(["protocols"]) == 0 and capsys.readouterr().out
    assert text
    for line, item in zip(text.splitlines(), listing, strict=True):
        assert line.split()[:2] == [item["name"], item["model"]]
        assert f"(statistics: {', '.join(item['statistics'])})" in line


# ------------------------------------------------------------------ fedustat.estimate


@pytest.mark.parametrize("name", STATISTICS)
def test_python_estimate_takes_every_statistic_by_name(name: str) -> None:
    stat = catalogue.get(name)
    columns = bundled_columns(name)
    options: dict = {}
    if stat.needs_bounds or (stat.kind == "curve" and name != "hl"):
        options["bounds"] = stat.default_bounds
    release = fedustat.estimate(name, np.column_stack(columns), epsilon=math.inf, **options)
    if stat.kind == "u-statistic":
        kernel = stat.kernel(stat.default_bounds)
        exact = fedustat.estimate(kernel, kernel.pack(*columns), epsilon=math.inf,
                                  protocol="exact")
        assert release.value == exact.value
    else:
        assert release.privacy.epsilon == math.inf
    for protocol in PROTOCOLS:
        refusal = catalogue.protocol_refusal(name, protocol)
        if refusal is None:
            continue
        with pytest.raises(ValueError) as info:
            fedustat.estimate(name, np.column_stack(columns), epsilon=1.0, protocol=protocol,
                              rng=0, **options)
        assert str(info.value) == f"fedustat.estimate({name!r}): {refusal}"


def test_a_curve_release_spends_the_budget_file(capsys: pytest.CaptureFixture[str],
                                                tmp_path) -> None:
    budget = tmp_path / "b.json"
    assert main(["budget", str(budget), "--epsilon", "1"]) == 0
    assert main(["estimate", "--statistic", "median", "--epsilon", "0.6", "--budget",
                 str(budget)]) == 0
    with pytest.raises(SystemExit, match=r"error: ecdf refused before any party sent "
                                         r"anything: .*nothing was spent"):
        main(["estimate", "--statistic", "ecdf", "--epsilon", "0.6", "--budget", str(budget)])
    capsys.readouterr()
    spent = json.loads(budget.read_text())
    assert [e["epsilon"] for e in spent["ledger"]] == [0.6]
    assert spent["ledger"][0]["name"].startswith("median")


def test_a_curve_of_your_own_file_is_release_only_unless_evaluated(
        capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    path = tmp_path / "values.csv"
    x = np.array([1.0, 2.0, 2.0, 3.0, 5.0])
    path.write_text("v\n" + "\n".join(f"{v:g}" for v in x) + "\n")
    argv = ["estimate", "--statistic", "ecdf", "--file", str(path), "--columns", "v",
            "--param", "thresholds=1,2,3,4,5", "--format", "json"]
    (row,) = run_json(capsys, *argv)
    assert row["exact_values"] is None and len(row["values"]) == 5
    (row,) = run_json(capsys, *argv, "--evaluate")
    assert row["exact_values"] == [0.2, 0.6, 0.8, 0.8, 1.0]
    assert main(argv[:-2]) == 0
    text = capsys.readouterr().out
    assert "exact F" not in text and "exact: not shown (release only" in text
    with pytest.raises(SystemExit, match=r"ecdf on your own columns needs their public "
                                         r"bounds for the grid: --bounds LO,HI"):
        main(["estimate", "--statistic", "ecdf", "--file", str(path), "--columns", "v"])
