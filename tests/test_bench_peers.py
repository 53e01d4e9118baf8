"""Smoke tests of benchmarks/bench_peers.py: every comparison at its smallest size.

A comparison whose peer package is missing is skipped (pure-ldp, OpenDP); diffprivlib and
CVXOPT are optional inside their comparisons (a row or a column says they are missing).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from fedustat.privacy.frequency_oracles import LocalHashing, best_frequency_oracle
from fedustat.privacy.randomizers import HadamardResponse

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_peers.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_peers", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_peers"] = module
    spec.loader.exec_module(module)
    return module


def _peer_records(table) -> list[dict]:
    return [r for r in table.records if r]


def test_exact_reuses_bench_exact(bench: ModuleType) -> None:
    table = bench.exact_comparison(n=2000, repeats=1, brute_n=200, seed=0)
    records = _peer_records(table)
    assert [r["statistic"] for r in records] == ["AUC vs sklearn"] * 2 + [
        "Kendall tau-b vs SciPy"] * 2
    for r in records:
        assert r["n"] == 2000
        assert r["max_abs_diff"] < 1e-12
        assert r["ours"] > 0 and r["theirs"] > 0 and r["ratio"] >= 0
        # The ratio column is ours / theirs, printed to 2 decimals from the unrounded times
        # (printed to 4): a fast call of ours beside a slow reference prints 0.00.
        low = max(r["ours"] - 5e-5, 0.0) / (r["theirs"] + 5e-5)
        high = (r["ours"] + 5e-5) / (r["theirs"] - 5e-5)
        assert low - 0.005 <= r["ratio"] <= high + 0.005, r
    text = table.render()
    assert "ratio" in text and "brute force" in text


def test_hadamard_variances_match_exact(bench: ModuleType) -> None:
    pytest.importorskip("pure_ldp.frequency_oracles")
    d, n, reps, seed = 64, 2000, 20, 0
    table = bench.hadamard_comparison(domains=(d,), sizes=(n,), epsilons=(1.0, 4.0),
                                      reps=reps, seed=seed)
    records = _peer_records(table)
    names = [r["name"] for r in records]
    peers = ["pure-ldp DE", "pure-ldp OUE", "pure-ldp OLH (exact law)",
             "pure-ldp SUE (exact law)"]
    assert names == ["ours: 1-bit HR", "ours: chooser -> subset sel. k=17",
                     "ours: local hashing g=3",
                     "pure-ldp HM t=1 (same)", "pure-ldp HR high-priv.", *peers,
                     "ours: 1-bit HR", "ours: chooser -> subset sel. k=1",
                     "ours: local hashing g=41",
                     "pure-ldp HM t=1 (same)", "pure-ldp HR general", *peers]
    # The benchmark's data: the first draw of its generator.
    codes = bench._zipf_data(d, n, np.random.default_rng(seed))
    counts = np.bincount(codes, minlength=d)
    for r in records:
        if r["runs"] == 0:  # exact law only
            assert r["var_exact"] > 0 and r["var_emp"] is None
            continue
        assert r["t_total"] > 0 and r["var_exact"] > 0
        if r["name"] == "pure-ldp HR general":
            continue  # its exact variance is checked against its own runs in the benchmark
        eps = r["epsilon"]
        if r["name"].startswith("ours: chooser"):
            oracle = best_frequency_oracle(d, eps)
            var_i = oracle.count_variance(counts)
            p, q = oracle.include_probability, oracle.other_probability
            var_pure = bench._pure_variance(p, q, counts.astype(float))
            assert var_pure == pytest.approx(var_i.mean(), rel=1e-9)
            # At most the least pure-ldp variance of the cell (a tie at eps = 4: k = 1 is
            # pure-ldp's direct encoding).
            assert r["best_over_peer_exact"] <= 1 + 1e-12
        elif r["name"].startswith("ours: local hashing"):
            var_i = LocalHashing(d, eps).count_variance(counts)
        elif r["name"] in ("pure-ldp DE", "pure-ldp OUE"):
            e = math.exp(eps)
            p, q = ((e / (e + d - 1), 1 / (e + d - 1)) if r["name"] == "pure-ldp DE"
                    else (0.5, 1 / (e + 1)))
            var_i = (counts * p * (1 - p) + (n - counts) * q * (1 - q)) / (p - q) ** 2
        else:
            # Same law for ours, pure-ldp HM (t = 1) and high-privacy HR: n c^2 - count_i.
            var_i = HadamardResponse(d, eps).count_variance(counts)
        assert r["var_exact"] == pytest.approx(var_i.mean() / n, rel=1e-9)
        # Mean of runs * d squared, nearly Gaussian errors treated as uncorrelated: its
        # relative standard deviation is sqrt(2 sum var_i^2 / runs) / sum var_i.
        rel_sd = math.sqrt(2 * np.sum(var_i**2) / r["runs"]) / np.sum(var_i)
        assert abs(r["emp_over_exact"] - 1) < 5 * rel_sd, r
    assert "var ratio" in table.render() and "best/peer best exact" in table.render()


def test_hadamard_leaves_global_random_state(bench: ModuleType) -> None:
    pytest.importorskip("pure_ldp.frequency_oracles")
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    bench.hadamard_comparison(domains=(64,), sizes=(200,), epsilons=(4.0,), reps=1)
    assert np.random.random() == expected


def test_ldp_tree_comparison_rows(bench: ModuleType) -> None:
    table = bench.ldp_tree_comparison(alphas=(6,), n_per_class=2000, epsilons=(1.0, 4.0),
                                      data_sets=("ur",), runs=3, seed=0)
    records = _peer_records(table)
    assert [(r["epsilon"], r["oracle"]) for r in records] == [
        (1.0, "hadamard"), (1.0, "auto"), (4.0, "hadamard"), (4.0, "auto")]
    for r in records:
        assert r["runs"] == 3 and 0 < r["rmse"] < 0.5
        if r["oracle"] == "hadamard":
            assert r["bits"] == 6 + 3 and set(r["oracle_per_level"]) == {"hadamard"}
        else:
            assert any(o.startswith("subset-selection") for o in r["oracle_per_level"])
    assert "RMSE ratio auto/hadamard" in table.render()


def test_ecdf_comparison_rows(bench: ModuleType) -> None:
    pytest.importorskip("opendp")
    table = bench.ecdf_comparison(n_bins_list=(256,), epsilons=(1.0,), reps=2, seed=0)
    records = _peer_records(table)
    names = [r["name"] for r in records]
    assert names[:3] == ["ours: hierarchical (default) + Alg. 1", "ours: 003 tree + Alg. 1",
                         "ours: 003 tree + QP smooth + Alg. 1"]
    assert any(name.startswith("OpenDP tree b=2") for name in names)
    assert "OpenDP exp. mech. (eps/4 per q)" in names
    assert any(name.startswith("diffprivlib") for name in names)
    for r in records:
        if "time" not in r:  # a peer that could not be loaded
            continue
        assert r["runs"] == 2 and r["time"] > 0
        assert len(r["q_mae"]) == 4 and all(np.isfinite(r["q_mae"]))
        curve = not ("exp. mech." in r["name"] or r["name"].startswith("diffprivlib"))
        assert (r["cdf_rmse"] is not None) == curve
        if curve:
            assert 0 < r["cdf_rmse"] < 0.5
    assert "RMSE ratio" in table.render()
    # The ratio to OpenDP's best tree at equal privacy (d_in = 2), per row.
    best = min(r["cdf_rmse"] for r in records if r.get("cdf_rmse") is not None
               and r["name"].startswith("OpenDP tree") and "(*)" not in r["name"])
    assert records[0]["rmse_vs_opendp_best"] == pytest.approx(records[0]["cdf_rmse"] / best)


def test_fedecdf_comparison_rows(bench: ModuleType) -> None:
    table = bench.fedecdf_comparison(n_bins_list=(64,), epsilons=(1.0,), reps=2, seed=0)
    rows = {r["release"]: r for r in table.records if r}
    assert len(rows) == 6
    central = rows["central hierarchical (dp_ecdf default)"]["exact_rmse"]
    # One discrete Laplace per node (h = K): the central variance, within the integer
    # discrete Laplace's few percent; h = 1 doubles the variance.
    assert rows["federated hierarchical (K=2, h=2)"]["exact_rmse"] == pytest.approx(central,
                                                                                    rel=0.03)
    assert rows["federated hierarchical (default, K=2, h=1)"]["exact_rmse"] == pytest.approx(
        math.sqrt(2) * central, rel=0.03)
    assert rows["federated 003 tree (K=2, h=2)"]["exact_rmse"] > 2 * central
    assert all(r["cdf_rmse"] > 0 and r["seconds"] > 0 for r in rows.values())


def test_opendp_tree_spends_exactly_epsilon(bench: ModuleType) -> None:
    pytest.importorskip("opendp")
    dp, _ = bench._load_opendp()
    for d_in in (1, 2):
        *_, loss = bench._opendp_tree(dp, 64, 4, d_in, 0.7)
        assert loss == pytest.approx(0.7, rel=1e-9)
    meas = bench._opendp_exp_quantiles(dp, 64, 0.25, 2)
    assert len(meas) == 4
    assert all(m.map(2) == pytest.approx(0.25, rel=1e-9) for m in meas)


def test_quantile_comparison_rows(bench: ModuleType) -> None:
    pytest.importorskip("opendp")
    assert bench.quantile_levels(1) == (0.5,)
    assert bench.quantile_levels(4) == (0.25, 0.5, 0.75, 0.9)
    assert bench.quantile_levels(16) == tuple(j / 17 for j in range(1, 17))
    table = bench.quantile_comparison(data=("lognormal", "tied"), epsilons=(1.0,),
                                      level_counts=(1, 4), reps=4, tree_reps=2, n=400, seed=0)
    records = _peer_records(table)
    for kind in ("lognormal", "tied"):
        for m in (1, 4):
            block = [r for r in records if r["m"] == m and r["data"] == kind]
            names = [r["name"] for r in block]
            # Ours is the one-call default, first; then the three peers.
            assert names[0].startswith("ours: fedustat.quantile (-> ")
            assert names[1:] == [f"OpenDP exp. mech. (eps/{m} per q)", "OpenDP tree",
                                 f"diffprivlib (eps/{m} per q)"]
            picked = names[0].split("-> ")[1].rstrip(")")
            if kind == "tied":
                assert picked in ("exponential", "curve")
            else:
                assert picked == ("continuous" if m == 1 else "continuous-joint")
            peers = [r for r in block if r["peer"]]
            ours = block[0]
            assert [r["runs"] for r in block] == [4, 4, 2, 4]
            def basis(r: dict, key: str) -> float:  # exact where the row has its law
                return r[key] if r[f"exact_{key}"] is None else r[f"exact_{key}"]

            # The exact laws at one level: the gap mechanism (ours on bounds, diffprivlib)
            # and OpenDP's permute-and-flip at the median.
            assert (ours["exact_value"] is not None) == (
                m == 1 and (kind == "lognormal" or picked == "exponential"))
            assert (peers[0]["exact_value"] is not None) == (m == 1)
            for key in ("value", "level"):
                best = min(basis(r, key) for r in peers)
                mine = basis(ours, key)
                expected = (mine / best if best > 0
                            else 1.0 if mine == 0 else math.inf)
                assert ours[f"{key}_ratio"] == pytest.approx(expected)
                assert not ours[f"{key}_ratio_se"] < 0  # NaN where the best peer is exact
            assert all(math.isfinite(r["value"]) and r["level"] >= 0 for r in block)
    assert "level ours/best" in table.render()


def test_lattice_exponential_errors_are_the_one_call_law(bench: ModuleType) -> None:
    import fedustat
    from fedustat.protocols.ecdf.private_quantiles import expected_errors

    rng = np.random.default_rng(0)
    x = np.clip(np.round(rng.lognormal(1.0, 0.6, 300)), 0, 20)
    lattice = np.arange(0.0, 21.0)  # eps 0.1: expected errors 0.32 and 0.013
    value, level = bench.lattice_exponential_errors(x, lattice, 0.5, 0.1)
    # The value error on a unit-step lattice is the library's exact error in grid steps.
    steps = expected_errors(x, [0.5], epsilon=0.1, thresholds=lattice, method="exponential")
    assert value == pytest.approx(float(steps[0]), rel=1e-9)
    assert fedustat.quantile(x, 0.5, epsilon=0.1, thresholds=lattice, rng=0).method == (
        "exponential")
    runs = [bench.quantile_errors(x, [0.5], fedustat.quantile(
        x, 0.5, epsilon=0.1, thresholds=lattice, rng=seed)) for seed in range(400)]
    measured = np.array(runs)
    for k, exact in enumerate((value, level)):
        se = measured[:, k].std(ddof=1) / math.sqrt(len(runs))
        assert abs(measured[:, k].mean() - exact) <= 4 * se + 1e-12


def test_quantile_errors_charge_an_exact_tied_answer_nothing(bench: ModuleType) -> None:
    x = np.array([1.0, 2.0, 2.0, 2.0, 5.0])
    # 2 is the exact 0.5 quantile (F(2^-) = 0.2 < 0.5 <= F(2) = 0.8): no level error,
    # though |F(2) - 0.5| = 0.3; 3.5 sits above 4 of the 5 records: level error 0.3.
    assert bench.quantile_errors(x, [0.5], [2.0]) == (0.0, 0.0)
    value, level = bench.quantile_errors(x, [0.5], [3.5])
    assert value == pytest.approx(1.5) and level == pytest.approx(0.3)


def test_diffprivlib_loader_leaves_no_stub(bench: ModuleType) -> None:
    quantile, label = bench._load_diffprivlib_quantile()
    if quantile is None:
        assert "diffprivlib" in label
        return
    value = quantile(np.arange(1.0, 101.0), 0.5, epsilon=1.0, bounds=(0, 101),
                     random_state=0, accountant=None)
    assert 0 <= value <= 101
    parent = sys.modules.get("diffprivlib")
    assert parent is None or hasattr(parent, "__version__")


def test_smoothing_reuses_bench_ecdf(bench: ModuleType) -> None:
    table = bench.smoothing_comparison(min_exp=8, max_exp=8, epsilon=1.0, thm1_reps=20)
    records = _peer_records(table)
    assert [(r["N"], r["p"]) for r in records] == [(256, 1), (256, 2)]
    has_cvxopt = importlib.util.find_spec("cvxopt") is not None
    for r in records:
        assert r["ours"] > 0
        assert (r["ratio"] is not None) == has_cvxopt
        if has_cvxopt:
            assert abs(r["rel_objective"]) < 1e-4
    assert "Thm 1 check" in table.render()


def test_fedauc_row_says_why(bench: ModuleType) -> None:
    table = bench.fedauc_comparison()
    assert len(table.rows) == 1
    if table.records[0]["status"] == "not run":
        assert "network" in table.rows[0][2]
        assert "TensorFlow" in " ".join(table.notes)


def test_unknown_comparison_is_rejected(bench: ModuleType, capsys) -> None:
    with pytest.raises(ValueError, match="unknown comparison 'nope'"):
        bench.run(bench.QUICK, ["nope"])
    with pytest.raises(SystemExit):
        bench.main(["--only", "exact,nope"])
    assert "unknown comparison(s) ['nope']" in capsys.readouterr().err


def test_table_render_aligns_and_formats(bench: ModuleType) -> None:
    table = bench.Table("T", ["name", "value", "ratio"])
    table.add(["a", 1.23456, bench._ratio(1.0, 4.0)], x=1)
    table.gap()
    table.add(["bb", float("nan"), bench._ratio(1.0, 0.0)], x=2)
    lines = table.render().splitlines()
    assert lines[0] == "T" and lines[1] == "="
    assert lines[4].split() == ["a", "1.235", "0.25"]
    assert lines[6].split() == ["bb", "-", "-"]
    assert len({len(line) for line in (lines[2], lines[4], lines[6])}) == 1
    markdown = table.render_markdown().splitlines()
    assert markdown[0] == "### T"
    assert markdown[2:6] == ["| name | value | ratio |", "|---|---|---|",
                             "| a | 1.235 | 0.25 |", "| bb | - | - |"]
