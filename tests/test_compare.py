"""``fedustat compare`` (``fedustat.compare``) and the Markdown report (``fedustat.report``).

A reduced comparison (one budget, two repetitions) runs every statistic; the report it
writes must hold a table and at least one image per statistic, and the command line must
run it and reject bad input with a clear message.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

import fedustat
from fedustat.advisor import NO_PREDICTION
from fedustat.cli import main
from fedustat.compare import (
    COMPARED_STATISTICS,
    PUBLIC_BOUNDS,
    ComparisonResult,
    _advice_for,
    _build_case,
    _Outcome,
    _run_curve,
    available_data,
    level_errors,
    load_data,
    run_comparison,
    write_report,
)
from fedustat.report import MarkdownReport, markdown_table

TINY = {"epsilons": [1.0], "repetitions": 2, "progress": False}


@pytest.fixture(scope="module")
def tiny() -> ComparisonResult:
    return run_comparison(**TINY)


def test_tiny_run_covers_every_statistic(tiny: ComparisonResult) -> None:
    assert tiny.statistics == list(COMPARED_STATISTICS)
    for st in COMPARED_STATISTICS:
        rows = tiny.rows_for(st)
        assert rows, f"no protocol ran for {st}"
        for r in rows:
            assert r.repetitions == 2 and r.epsilon == 1.0
            assert math.isfinite(r.rmse) and r.rmse >= 0
            if r.prediction_kind == NO_PREDICTION:  # no formula (e.g. ecdf-fss): measured
                assert math.isnan(r.predicted_rmse)
            else:
                assert math.isfinite(r.predicted_rmse) and r.predicted_rmse > 0
            assert r.seconds_per_run >= 0
        table = tiny.table(st)
        assert "pred. RMSE" in table and "CI95 cover" in table
    names = {r.protocol for r in tiny.rows_for("auc")}
    assert {"central-laplace", "ldp-quantized", "ldp-tree", "fedauc-rr"} <= names
    assert {"dp-ecdf", "dp-ecdf-smoothed"} <= {r.protocol for r in tiny.rows_for("ecdf")}


def test_every_recommended_protocol_runs(tiny: ComparisonResult) -> None:
    # Each protocol gets the case's public bounds / domains when its factory takes them,
    # so none of the advisor's eligible protocols fails for want of them.
    assert not [s for s in tiny.skipped if "declared bounds" in s], tiny.skipped
    for st in ("kendall", "duplicate"):
        assert "ghazi-shuffle" in {r.protocol for r in tiny.rows_for(st)}


def test_exact_values_are_the_data_statistics(tiny: ComparisonResult) -> None:
    from sklearn.metrics import roc_auc_score

    scores = load_data("digits_scores")
    auc = tiny.rows_for("auc")[0]
    assert auc.exact == pytest.approx(roc_auc_score(scores["label"], scores["score"]),
                                      abs=1e-12)
    digits = load_data("digits_images")
    counts = np.bincount(digits["digit"].astype(int))
    ratio = float(np.sum(counts * (counts - 1)) / (digits.n * (digits.n - 1)))
    assert tiny.rows_for("duplicate")[0].exact == pytest.approx(ratio, abs=1e-12)
    central = next(r for r in tiny.rows_for("gini") if r.protocol == "central-laplace")
    assert central.model == "central" and central.bits_per_party == 64
    # The central release's predicted RMSE is Laplace's: sqrt(2) 2 (hi - lo) / (n eps).
    lo, hi = PUBLIC_BOUNDS["digits_images"]["ink"]
    assert central.predicted_rmse == pytest.approx(math.sqrt(2) * 2 * (hi - lo) / digits.n)


def test_report_has_a_table_and_an_image_per_statistic(tiny: ComparisonResult,
                                                       tmp_path: Path) -> None:
    path = write_report(tiny, tmp_path / "rep")
    text = path.read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    titled = {s.split(":")[0]: s for s in sections}
    for st in COMPARED_STATISTICS:
        body = titled[st]
        assert "| protocol | model |" in body, f"no table for {st}"
        images = re.findall(r"!\[[^\]]*\]\((figures/[^)]+\.png)\)", body)
        assert images, f"no image for {st}"
        for rel in images:
            png = tmp_path / "rep" / rel
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert len(data["rows"]) == len(tiny.rows)
    with (tmp_path / "rep" / "results.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == len(tiny.rows)


def test_same_seed_same_tables() -> None:
    kw = {"epsilons": [0.5, 2.0], "repetitions": 3, "progress": False,
          "protocols": ["central-laplace", "ldp-quantized", "dp-ecdf"]}
    a = run_comparison(["duplicate", "ecdf"], seed=7, **kw)
    b = run_comparison(["duplicate", "ecdf"], seed=7, **kw)
    strip = re.compile(r"\s+\d+\.\d+\s*$")  # the last column is wall time
    for st in ("duplicate", "ecdf"):
        assert [strip.sub("", line) for line in a.table(st).splitlines()] == \
            [strip.sub("", line) for line in b.table(st).splitlines()]
    c = run_comparison(["duplicate"], seed=8, **kw)
    assert c.rows_for("duplicate")[0].rmse != a.rows_for("duplicate")[0].rmse


def test_central_coverage_and_rmse_track_the_prediction() -> None:
    """Many repetitions of the exact-prediction protocol: RMSE/pred near 1, coverage 95%."""
    res = run_comparison(["duplicate"], protocols=["central-laplace"], epsilons=[1.0],
                         repetitions=400, progress=False)
    row = res.rows_for("duplicate")[0]
    # Laplace: the relative s.e. of a mean of squares is sqrt(5/R); the RMSE's is half.
    assert abs(row.ratio - 1.0) <= 5 * 0.5 * math.sqrt(5 / 400)
    # Binomial s.e. of a 95% coverage over 400 runs is 0.011.
    assert abs(row.coverage - 0.95) <= 5 * 0.011


def test_other_bundled_data() -> None:
    res = run_comparison(["auc"], data="breast_cancer_scores", epsilons=[1.0], repetitions=2,
                         protocols=["central-laplace", "ldp-tree"], progress=False)
    assert res.cases["auc"].source == "breast_cancer_scores:score,label"
    assert res.cases["auc"].bounds["score"] == PUBLIC_BOUNDS["breast_cancer_scores"]["score"]
    res = run_comparison(["kendall"], data="diabetes_pairs", columns=["age", "bmi"],
                         epsilons=[1.0], repetitions=2, protocols=["ldp-quantized"],
                         progress=False)
    assert res.rows_for("kendall")[0].bits_per_party > 0


def test_file_input(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 10, 300)
    y = x + rng.normal(0, 3, 300)
    f = tmp_path / "data.csv"
    f.write_text("x,y\n" + "\n".join(f"{a},{b}" for a, b in zip(x, y, strict=True)))
    res = run_comparison(["gini", "ecdf"], file=str(f), columns=["x"], bounds=(0, 10),
                         epsilons=[2.0], repetitions=2, progress=False)
    assert res.cases["gini"].source.endswith("data.csv:x")
    assert res.rows_for("gini")[0].exact == pytest.approx(
        fedustat.gini_mean_difference(x, bounds=(0, 10), epsilon=math.inf).value)
    with pytest.raises(ValueError, match="public bounds"):
        run_comparison(["gini"], file=str(f), columns=["x"], repetitions=1, progress=False)
    with pytest.raises(ValueError, match="outside its public bounds"):
        run_comparison(["gini"], file=str(f), columns=["y"], bounds=(0, 10), repetitions=1,
                       progress=False)
    with pytest.raises(ValueError, match="compare one kind at a time"):
        run_comparison(["gini", "kendall"], file=str(f), columns=["x"], bounds=(0, 10),
                       repetitions=1, progress=False)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"statistics": ["mode"]}, "unknown statistic"),
    ({"epsilons": [0.0]}, "epsilons must be > 0"),
    ({"epsilons": []}, "at least one budget"),
    ({"repetitions": 0}, "repetitions must be >= 1"),
    ({"protocols": ["nope"]}, "unknown protocols"),
    ({"statistics": ["gini"], "data": "wine_cultivars"}, "give columns for gini"),
    ({"statistics": ["duplicate"], "data": "nope", "columns": ["x"]}, "unknown data set"),
])
def test_bad_inputs(kwargs: dict, match: str) -> None:
    kwargs.setdefault("progress", False)
    with pytest.raises(ValueError, match=match):
        run_comparison(**kwargs)


def test_cli_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli-report"
    assert main(["compare", "--statistic", "duplicate,quantile", "--epsilons", "1,2",
                 "--repetitions", "2", "--no-progress", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "DUPLICATE" in text and "QUANTILE" in text and "report written to" in text
    assert (out / "report.md").exists() and (out / "figures" / "duplicate_error.png").exists()
    assert main(["compare", "--statistic", "kendall", "--epsilons", "1", "--repetitions",
                 "2", "--no-progress", "--out", "", "--format", "json",
                 "--protocols", "central-laplace"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["protocol"] for r in data["rows"]] == ["central-laplace"]
    bad = [
        (["--statistic", "mode"], "unknown statistic"),
        (["--epsilons", "a,b"], "--epsilons must be numbers"),
        (["--repetitions", "0"], "repetitions must be >= 1"),
        (["--file", "x.csv"], "--file needs --columns"),
        (["--statistic", "gini", "--file", str(tmp_path / "missing.csv"), "--columns", "x",
          "--bounds", "0,1"], "missing.csv"),
    ]
    for args, match in bad:
        with pytest.raises(SystemExit, match=match):
            main(["compare", "--no-progress", "--out", "", *args])


def test_available_data_lists_the_digits_tables() -> None:
    names = available_data()
    assert {"digits_images", "digits_scores", "breast_cancer_scores"} <= set(names)
    ds = load_data("digits_images")
    assert ds.n == 1797 and ds["ink"].max() <= 1024
    scores = load_data("digits_scores")
    assert scores.n == 899 and set(np.unique(scores["label"])) == {0.0, 1.0}


def test_markdown_report_writer(tmp_path: Path) -> None:
    from matplotlib.figure import Figure

    assert markdown_table(["a", "b"], [["x|y", 1]]) == "| a | b |\n| --- | --- |\n| x\\|y | 1 |"
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        markdown_table(["a", "b"], [["x"]])
    rep = MarkdownReport("t")
    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    rep.figure(fig, "line", "a line")
    with pytest.raises(ValueError, match="already in the report"):
        rep.figure(fig, "line")
    with pytest.raises(ValueError, match="plain file name"):
        rep.figure(fig, "../escape")
    with pytest.raises(TypeError, match="matplotlib Figure"):
        rep.figure("not a figure", "x")
    path = rep.write(tmp_path)
    assert "![a line](figures/line.png)" in path.read_text()
    assert (tmp_path / "figures" / "line.png").stat().st_size > 0


# --------------------------------------------------------------------------- summary, figures

SUMMARY_RUN = {"statistics": ["auc"], "epsilons": [0.5, 2.0], "repetitions": 3, "seed": 0,
               "progress": False,
               "protocols": ["central-laplace", "ldp-quantized", "ldp-tree", "fedauc-rr",
                             "fedauc-laplace-local"]}


@pytest.fixture(scope="module")
def small() -> ComparisonResult:
    return run_comparison(**SUMMARY_RUN)


def test_summary_names_the_measured_best_per_trust_model(small: ComparisonResult,
                                                         tmp_path: Path) -> None:
    from fedustat.comparison_summary import SUMMARY_TRUST_MODELS, summarize

    advice = small.advice[("auc", 0.5)]
    rows = small.rows_for("auc")
    choices = {c.trust: c for c in summarize(small)}
    assert set(choices) == set(SUMMARY_TRUST_MODELS)
    for trust, choice in choices.items():
        # The definition, from the table: the protocol meeting the trust model with the
        # lowest geometric-mean measured RMSE over the two budgets.
        scores = {}
        for name in {r.protocol for r in rows}:
            if trust in advice.prediction(name).trust:
                mine = [r.rmse for r in rows if r.protocol == name]
                scores[name] = math.sqrt(mine[0] * mine[1])
        best = min(scores, key=scores.__getitem__)
        assert choice.protocol == best, trust
        assert choice.score == pytest.approx(scores[best], rel=1e-12)
        assert choice.candidates == len(scores)
        runner = sorted(scores, key=scores.__getitem__)[1]
        assert choice.runner_up == runner
        assert f"against {runner}'s {scores[runner]:.3g}" in choice.reason()
        # 3 repetitions at 2 budgets resolve ratios from exp(2 / sqrt(6)) = 2.26 on.
        assert choice.resolvable_ratio == pytest.approx(math.exp(2.0 / math.sqrt(6.0)))
        unresolved = scores[runner] / scores[best] < choice.resolvable_ratio
        assert ("not resolved by this run" in choice.reason()) == unresolved
    assert choices["local"].protocol in {"ldp-quantized", "ldp-tree"}
    assert choices["label"].protocol in {"fedauc-rr", "fedauc-laplace-local"}
    # The report opens with the summary (its first section) and the CLI text holds it.
    text = write_report(small, tmp_path / "rep").read_text(encoding="utf-8")
    first = re.split(r"^## ", text, flags=re.M)[1]
    assert first.startswith("Summary: which protocol under each trust model")
    for choice in choices.values():
        assert f"| auc | {SUMMARY_TRUST_MODELS[choice.trust]} | {choice.protocol} |" in first
    assert choices["curator"].protocol in small.summary()


def test_summary_says_when_no_protocol_meets_a_trust_model() -> None:
    from fedustat.comparison_summary import summarize

    result = run_comparison(["duplicate"], epsilons=[1.0], repetitions=2, progress=False,
                            protocols=["central-laplace"])
    choices = {c.trust: c for c in summarize(result)}
    assert choices["curator"].protocol == "central-laplace"
    assert choices["curator"].reason().endswith("the only protocol meeting this trust model "
                                                "that ran")
    assert choices["local"].protocol is None
    assert choices["local"].reason() == ("no protocol meeting this trust model ran at every "
                                         "budget")


def test_summary_ranks_rmse_zero_by_the_arithmetic_mean() -> None:
    # A quantile's level error can be 0 in every repetition at a large budget; a geometric
    # mean would then tie every such protocol at 0 and print an infinite ratio.
    from types import SimpleNamespace

    from fedustat.comparison_summary import summarize

    def row(protocol: str, eps: float, rmse: float) -> SimpleNamespace:
        return SimpleNamespace(protocol=protocol, epsilon=eps, rmse=rmse, bits_per_party=64.0,
                               repetitions=3)

    rows = [row("dp-quantiles", 0.5, 0.004), row("dp-quantiles", 4.0, 0.0),
            row("dp-ecdf", 0.5, 0.002), row("dp-ecdf", 4.0, 0.0),
            row("ecdf-secagg", 0.5, 0.0), row("ecdf-secagg", 4.0, 0.0)]
    trust = {"dp-quantiles": {"curator"}, "dp-ecdf": {"curator"},
             "ecdf-secagg": {"curator", "secure"}}
    advice = SimpleNamespace(
        prediction=lambda name: SimpleNamespace(trust=frozenset(trust[name])))
    result = SimpleNamespace(settings={"epsilons": [0.5, 4.0], "repetitions": 3},
                             statistics=["quantile"], advice={("quantile", 0.5): advice},
                             rows_for=lambda st: rows)
    choices = {c.trust: c for c in summarize(result)}
    curator = choices["curator"]
    assert curator.averaging == "arithmetic"
    assert curator.protocol == "ecdf-secagg" and curator.score == 0.0
    assert curator.runner_up == "dp-ecdf" and curator.runner_up_score == pytest.approx(0.001)
    assert "(exact at every budget)" in curator.reason()
    assert "arithmetic mean over the budgets" in curator.reason()
    assert "inf" not in curator.reason()


def test_error_figure_is_readable(small: ComparisonResult) -> None:
    from matplotlib.colors import to_hex

    from fedustat.compare import MAX_SERIES_PER_PANEL, _error_figure
    from fedustat.plotting import protocol_style

    fig = _error_figure(small, "auc")
    rows = small.rows_for("auc")
    # One panel per privacy model, in a fixed order, each with its protocols only.
    models = {r.protocol: r.model for r in rows}
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == [f"{m} DP" for m in ("local", "label", "central")
                      if m in models.values()]
    for ax in fig.axes:
        names = [n for n, m in models.items() if f"{m} DP" == ax.get_title()]
        assert 0 < len(names) <= MAX_SERIES_PER_PANEL
        solid = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]
        dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
        assert len(solid) == len(names) and len(dashed) <= len(names)
        # Each protocol in its own fixed style, whatever else is in the figure.
        assert [to_hex(ln.get_color()).upper() for ln in solid] == \
            [protocol_style(n)[0].upper() for n in names]
        assert [ln.get_marker() for ln in solid] == [protocol_style(n)[1] for n in names]
        assert [t.get_text() for t in ax.get_legend().get_texts()] == names
        assert ax.collections  # the Monte Carlo error bars
    ax = fig.axes[0]
    # ldp-tree's bound (> 1) is vacuous for an AUC: the axis stops at the AUC's range
    # width and each such prediction is an arrow with its value, not a stretched axis.
    tree = [r for r in rows if r.protocol == "ldp-tree"]
    assert all(r.predicted_rmse > 1 for r in tree)
    assert ax.get_ylim()[1] <= 1.0
    notes = [t.get_text() for t in ax.texts]
    assert sorted(notes) == sorted(f"pred. {r.predicted_rmse:.3g}" for r in tree)
    # Every measured value and every in-range prediction is inside the axis.
    y0, y1 = ax.get_ylim()
    shown = [v for r in rows for v in (r.rmse, r.predicted_rmse) if v <= 1.0]
    assert y0 <= min(shown) and max(shown) <= y1
    assert ax.get_yscale() == "log"
    ticks = [t for t in ax.get_yticks() if y0 <= t <= y1]
    assert len(ticks) >= 3  # readable: several labelled values, plain numbers
    # x: the budgets 0.5 and 2 (a 4-fold spread, log spacing) with 8% margins.
    x0, x1 = (math.log10(v) for v in ax.get_xlim())
    span = math.log10(4.0)
    assert x0 == pytest.approx(math.log10(0.5) - 0.08 * span, abs=1e-9)
    assert x1 == pytest.approx(math.log10(2.0) + 0.08 * span, abs=1e-9)
    assert "epsilon" in ax.get_xlabel() and "AUC units" in ax.get_ylabel()
    assert "n=899" in fig._suptitle.get_text()


def test_protocol_colour_does_not_depend_on_the_other_protocols(
        small: ComparisonResult) -> None:
    import dataclasses

    from matplotlib.colors import to_hex

    from fedustat.compare import _error_figure

    def colours(result: ComparisonResult) -> dict[str, str]:
        fig = _error_figure(result, "auc")
        return {t.get_text(): to_hex(h.get_color()) for ax in fig.axes
                for h, t in zip(ax.get_legend().legend_handles, ax.get_legend().get_texts(),
                                strict=True)}

    fewer = dataclasses.replace(small, rows=[r for r in small.rows
                                             if r.protocol not in ("central-laplace",
                                                                   "ldp-quantized")])
    both, some = colours(small), colours(fewer)
    assert set(some) < set(both)
    assert all(some[name] == both[name] for name in some)


def test_panels_hold_at_most_six_series() -> None:
    from types import SimpleNamespace

    from fedustat.compare import _panels

    rows = [SimpleNamespace(model="label", protocol=f"p{i}") for i in range(8)]
    rows += [SimpleNamespace(model="local", protocol="q")]
    assert _panels(rows) == [("local DP", ["q"]),
                             ("label DP (1/2)", [f"p{i}" for i in range(6)]),
                             ("label DP (2/2)", ["p6", "p7"])]


def test_ecdf_curve_figure_shows_where_the_data_are() -> None:
    from fedustat.compare import _curve_figure

    result = run_comparison(["ecdf"], epsilons=[1.0], repetitions=1, progress=False,
                            protocols=["dp-ecdf-smoothed"])
    ax = _curve_figure(result, "ecdf").axes[0]
    x = result.cases["ecdf"].arrays[0]
    grid = result.cases["ecdf"].grid
    # The public grid is [0, 1024]; the ink values fill a narrower range. The axis runs
    # from the last threshold below every value to the first one above them all (where
    # the exact ECDF is 0 and 1), plus 8% of that span either side.
    start = float(grid[grid < x.min()].max())
    stop = float(grid[grid >= x.max()].min())
    margin = 0.08 * (stop - start)
    assert ax.get_xlim() == pytest.approx((start - margin, stop + margin))
    assert stop - start < 0.7 * (grid[-1] - grid[0])
    assert ax.get_ylim() == pytest.approx((-0.03, 1.03))


def test_level_error_by_hand() -> None:
    # x = 1, 2, 2, 4 on the grid 1..4: F = 0.25, 0.75, 0.75, 1 at the grid points, so 2 is
    # the exact grid quantile for q in (0.25, 0.75], 3 for none (an empty cell: lo = hi =
    # 0.75) and 4 for q in (0.75, 1]; a value between grid points uses the point below.
    x = np.array([1.0, 2.0, 2.0, 4.0])
    grid = np.array([1.0, 2.0, 3.0, 4.0])
    released = [2.0, 2.0, 2.0, 3.0, 4.0, 1.0, 2.5]
    levels = [0.5, 0.75, 0.9, 0.5, 0.5, 0.6, 0.5]
    expected = [0.0, 0.0, 0.15, 0.25, 0.25, 0.35, 0.25]
    assert level_errors(x, grid, released, levels) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("statistic", ["quantile", "median"])
def test_every_quantile_row_scores_zero_for_the_exact_grid_quantile(statistic: str) -> None:
    # At eps = inf every release is the grid's generalized inverse min{t : F(t) >= q},
    # an exact quantile at q itself; an error in rank F(t) - q would charge it up to a
    # cell's mass (about 0.01 on this data).
    case = _build_case(statistic, data=None, file=None, columns=None, bounds=None,
                       column_bounds=None, column_values=None, grid_points=64)
    rows = [p for p in _advice_for(case, 1.0, 1e-6).predictions if p.registered]
    assert {"dp-ecdf", "dp-ecdf-smoothed", "dp-quantiles", "ecdf-secagg"} <= {
        p.protocol for p in rows}
    x = np.sort(case.arrays[0])
    assert case.grid is not None
    rank_floor = np.searchsorted(x, case.grid, side="right") / x.size
    assert np.max(np.diff(rank_floor)) > 0.01  # the rank metric's floor is not vacuous
    for pred in rows:
        out = _Outcome()
        _run_curve(case, pred, math.inf, [np.random.SeedSequence(7)], out, lambda: None)
        assert out.sq_errors and max(out.sq_errors) == 0.0, pred.protocol
