"""The distributed engine from the public API and the CLI (``engine=``, ``--engine``).

One small in-process Dask cluster (2 workers, threads) serves the module; a release on
the engine must equal the in-process release for the same seed and the same split
(``batch_size=[partition sizes]``), whichever way the engine and the data are given.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

import fedustat  # noqa: E402
from fedustat import cli  # noqa: E402
from fedustat.api import _partition_sizes  # noqa: E402
from fedustat.runtime.engine import DaskEngine, EngineError  # noqa: E402
from fedustat.stats.kernels import auc_kernel, gini_kernel  # noqa: E402

GINI = {"protocol": "ldp-quantized", "k": 16, "bounds": (0.0, 1.0)}


@pytest.fixture(scope="module")
def cluster():
    # Threads, not processes: starts in about a second; the tcp transport gives the
    # scheduler an address other clients (and the CLI) can connect to.
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  protocol="tcp", dashboard_address=":0") as lc, \
            distributed.Client(lc) as client:
        yield client


def _without_engine(diagnostics):
    return {k: v for k, v in diagnostics.items() if k != "engine"}


def _same(a, b) -> None:
    assert a.value == b.value
    assert a.std_error == b.std_error
    assert a.cost == b.cost
    assert _without_engine(a.diagnostics) == _without_engine(b.diagnostics)


def _labelled(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(float)
    s = np.clip(rng.normal(0.45, 0.15, n) + 0.1 * y, 0.0, 1.0)
    return np.column_stack([s, y])


def _write_parts(directory: Path, rows: np.ndarray, sizes: list[int]) -> None:
    directory.mkdir()
    start = 0
    for i, size in enumerate(sizes):
        part = rows[start:start + size]
        start += size
        pq.write_table(pa.table({"score": part[:, 0], "label": part[:, 1]}),
                       directory / f"part-{i:03d}.parquet")


# ------------------------------------------------------------------ same release


def test_estimate_on_a_client_equals_in_process_on_the_same_split(cluster):
    x = np.random.default_rng(3).beta(2.0, 5.0, 1500)
    kernel = gini_kernel((0.0, 1.0))
    sizes = [400, 700, 400]
    on_engine = fedustat.estimate(kernel, x, epsilon=1.0, rng=11, batch_size=sizes,
                                  engine=cluster, **GINI)
    in_process = fedustat.estimate(kernel, x, epsilon=1.0, rng=11, batch_size=sizes, **GINI)
    _same(on_engine, in_process)
    info = on_engine.diagnostics["engine"]
    assert info["partitions"] == 3 and info["workers"] == 2
    assert info["scheduler"] == cluster.scheduler.address
    assert "engine" not in in_process.diagnostics
    # The client given by the caller stays open.
    assert cluster.status == "running"


def test_one_call_function_on_a_daskengine_with_the_default_split(cluster):
    data = _labelled(900, 5)
    engine = DaskEngine(cluster)
    on_engine = fedustat.roc_auc_score(data[:, 1], data[:, 0], epsilon=1.0, rng=2,
                                       protocol="fedauc-rr", engine=engine)
    # Below 2^21 rows the default split is two near-equal slices.
    assert _partition_sizes(900, None) == [450, 450]
    in_process = fedustat.estimate(auc_kernel(), data, epsilon=1.0, rng=2,
                                   protocol="fedauc-rr", batch_size=[450, 450])
    _same(on_engine, in_process)
    assert on_engine.diagnostics["engine"]["partitions"] == 2


def test_parquet_directory_with_public_labels_equals_in_process(cluster, tmp_path):
    rows = _labelled(1200, 8)
    sizes = [500, 300, 400]
    _write_parts(tmp_path / "parts", rows, sizes)
    kernel = auc_kernel()
    params = {"protocol": "ldp-quantized", "k": 8, "bounds": (0.0, 1.0)}
    # The scheduler's address, as a user would type it.
    on_engine = fedustat.estimate(kernel, partitions=tmp_path / "parts", epsilon=2.0, rng=4,
                                  engine=cluster.scheduler.address, **params)
    in_process = fedustat.estimate(kernel, rows, epsilon=2.0, rng=4, batch_size=sizes,
                                   **params)
    _same(on_engine, in_process)
    assert on_engine.diagnostics["engine"]["partitions"] == 3


def test_umpc_through_estimate_runs_gathered_and_equals_in_process(cluster):
    # U-MPC has relay rounds and no distributed server step: estimate() runs it with its
    # relay rows moving between workers and its aggregation reduced on the cluster.
    rows = _labelled(60, 3)
    params = {"protocol": "umpc", "bounds": (0.0, 1.0)}
    on_engine = fedustat.estimate(auc_kernel(), rows, epsilon=1.0, rng=7,
                                  engine=DaskEngine(cluster), batch_size=[25, 35], **params)
    in_process = fedustat.estimate(auc_kernel(), rows, epsilon=1.0, rng=7,
                                   batch_size=[25, 35], **params)
    _same(on_engine, in_process)
    assert on_engine.diagnostics["engine"]["server_steps"] == "gathered"


def test_engine_local_starts_and_closes_its_own_cluster():
    x = np.random.default_rng(1).beta(2.0, 5.0, 600)
    kernel = gini_kernel((0.0, 1.0))
    on_engine = fedustat.estimate(kernel, x, epsilon=1.0, rng=5, engine="local", workers=1,
                                  **GINI)
    assert on_engine.diagnostics["engine"] == {"kind": "dask", "scheduler": "local cluster",
                                               "workers": 1, "partitions": 2,
                                               "server_steps": "distributed"}
    _same(on_engine, fedustat.estimate(kernel, x, epsilon=1.0, rng=5, batch_size=[300, 300],
                                       **GINI))


# ------------------------------------------------------------------ clear errors


def test_protocol_the_engine_cannot_run_is_refused_before_any_cluster_starts(monkeypatch):
    def no_cluster(*args, **kwargs):
        raise AssertionError("a cluster was started for a protocol the engine refuses")

    monkeypatch.setattr(DaskEngine, "__init__", no_cluster)
    x = np.random.default_rng(0).beta(2.0, 5.0, 50)
    with pytest.raises(EngineError, match=r"protocol 'central-laplace' has no distributed "
                                          r"server step.*run it in process"):
        fedustat.gini_mean_difference(x, bounds=(0, 1), epsilon=1.0, rng=0,
                                      protocol="central-laplace", engine="local")
    with pytest.raises(EngineError, match=r"protocol 'fedauc-rr' cannot run on the "
                                          r"distributed engine: .*one client per sample"):
        fedustat.roc_auc_score(np.arange(50) % 2, x, epsilon=1.0, rng=0,
                               protocol="fedauc-rr", n_clients=5, engine="local")


@pytest.mark.parametrize("engine, message", [
    ("tcp://nohost", "looks like 'tcp://host:8786'"),
    ("http://host:8786", "looks like 'tcp://host:8786'"),
    ("tcp://host:99999", "port of scheduler address 'tcp://host:99999' must be in 1..65535"),
    ("lcoal", "engine must be None \\(in process\\), 'local', a scheduler address"),
    (3, "engine must be None \\(in process\\), 'local', a scheduler address"),
])
def test_bad_engine_is_refused_with_the_reason(engine, message):
    x = np.random.default_rng(0).beta(2.0, 5.0, 50)
    with pytest.raises(ValueError, match=message):
        fedustat.estimate(gini_kernel((0, 1)), x, epsilon=1.0, rng=0, engine=engine, **GINI)


def test_unreachable_scheduler_is_a_clear_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EngineError, match=f"could not reach a Dask scheduler at "
                                          f"tcp://127.0.0.1:{port} within 1 s"):
        DaskEngine(address=f"tcp://127.0.0.1:{port}", timeout=1.0)


def test_inconsistent_engine_arguments_are_refused(cluster, tmp_path):
    kernel = gini_kernel((0, 1))
    x = np.random.default_rng(0).beta(2.0, 5.0, 50)
    with pytest.raises(ValueError, match=r"fedustat.estimate\(\) needs data \(one row per "
                                         r"party\) or, with an engine, partitions="):
        fedustat.estimate(kernel, epsilon=1.0, rng=0, **GINI)
    with pytest.raises(ValueError, match="partitions= and workers= are for the distributed "
                                         "engine"):
        fedustat.estimate(kernel, x, epsilon=1.0, rng=0, workers=2, **GINI)
    with pytest.raises(ValueError, match="workers= sets the size of a local cluster"):
        fedustat.estimate(kernel, x, epsilon=1.0, rng=0, engine=cluster, workers=2, **GINI)
    with pytest.raises(ValueError, match=r"either as data= .* or as partitions="):
        fedustat.estimate(kernel, x, partitions=tmp_path, epsilon=1.0, rng=0,
                          engine=cluster, **GINI)
    with pytest.raises(FileNotFoundError, match=r"holds no \*\.parquet file"):
        fedustat.estimate(kernel, partitions=tmp_path, epsilon=1.0, rng=0, engine=cluster,
                          **GINI)
    with pytest.raises(TypeError, match="partitions must be a Parquet file or directory"):
        fedustat.estimate(kernel, partitions=[x], epsilon=1.0, rng=0, engine=cluster, **GINI)


def test_missing_dask_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if it were not installed
    x = np.random.default_rng(0).beta(2.0, 5.0, 50)
    with pytest.raises(ImportError, match=r"engine extra \(pip install '\.\[engine\]' in "
                                          r"the fedustat checkout\)"):
        fedustat.estimate(gini_kernel((0, 1)), x, epsilon=1.0, rng=0, engine="local", **GINI)


# ------------------------------------------------------------------ the command line


def _cli_json(capsys, argv: list[str]) -> list[dict]:
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_estimate_on_parquet_partitions_at_an_address(cluster, tmp_path, capsys):
    rows = _labelled(1000, 9)
    sizes = [250, 250, 500]
    _write_parts(tmp_path / "parts", rows, sizes)
    out = _cli_json(capsys, [
        "estimate", "--statistic", "auc", "--protocol", "ldp-quantized", "--param", "k=8",
        "--column-bounds", "score=0,1", "--epsilon", "2", "--seed", "4", "--format", "json",
        "--engine", cluster.scheduler.address, "--partitions", str(tmp_path / "parts")])
    (row,) = out
    want = fedustat.estimate(auc_kernel(), rows, epsilon=2.0, rng=4, batch_size=sizes,
                             protocol="ldp-quantized", k=8, bounds={"score": (0.0, 1.0)})
    assert row["estimate"] == want.value and row["std_error"] == want.std_error
    assert row["n"] == 1000 and row["exact"] is None and row["error"] is None
    assert row["partitions"] == 3
    assert row["engine"] == {"kind": "dask", "scheduler": cluster.scheduler.address,
                             "workers": 2, "partitions": 3,
                             "server_steps": "distributed"}


def test_cli_estimate_local_engine_on_a_file_and_its_table(cluster, tmp_path, capsys):
    rows = _labelled(400, 2)
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.table({"score": rows[:, 0], "label": rows[:, 1]}), path)
    args = ["estimate", "--statistic", "auc", "--protocol", "fedauc-rr", "--file", str(path),
            "--columns", "score,label", "--evaluate", "--seed", "3", "--engine", "local",
            "--workers", "1"]
    (row,) = _cli_json(capsys, [*args, "--format", "json"])
    want = fedustat.estimate(auc_kernel(), rows, epsilon=1.0, rng=3, batch_size=[200, 200],
                             protocol="fedauc-rr")
    assert row["estimate"] == want.value
    assert row["engine"]["workers"] == 1 and row["partitions"] == 2
    assert row["exact"] == fedustat.estimate(auc_kernel(), rows, epsilon=np.inf,
                                             protocol="exact").value
    # The table, on the module's cluster (a second local cluster would cost seconds).
    address = cluster.scheduler.address
    assert cli.main([*args[:-4], "--engine", address]) == 0
    table = capsys.readouterr().out
    assert f"engine: dask at {address}, 2 worker(s), 2 partition(s)" in table
    assert f"{want.value:.4f}" in table


@pytest.mark.parametrize("extra, message", [
    (["--workers", "2"], "--workers and --partitions are for the distributed engine"),
    (["--engine", "tcp://127.0.0.1:8786", "--workers", "2"],
     "--workers sets the size of a local cluster"),
    (["--engine", "local", "--workers", "0"], "--workers must be at least 1, got 0"),
    (["--engine", "local", "--partitions", "nowhere"],
     "with --partitions choose one --statistic"),
    (["--statistic", "gini", "--engine", "local", "--partitions", "nowhere"],
     "'nowhere' is neither a Parquet file nor a directory"),
    (["--statistic", "gini", "--protocol", "central-laplace", "--engine", "local"],
     "protocol 'central-laplace' has no distributed server step"),
    (["--statistic", "gini", "--engine", "tcp://nohost"], "looks like 'tcp://host:8786'"),
])
def test_cli_engine_errors_are_one_line(extra, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["estimate", "--protocol", "ldp-quantized", *extra])
    assert message in str(exc.value)
    assert str(exc.value).startswith("error: ")


# ------------------------------------------------------------------ driver memory


def test_public_label_release_on_the_driver_is_o_groups_not_o_n():
    """ldp-quantized AUC with public labels: the server's last step (on the engine's
    driver) reads only the combined (label, report) histogram; the class sizes come from
    its row sums, never from an n-entry label column. A histogram of 10^12 parties would
    need terabytes if any per-party array were built."""
    import tracemalloc

    protocol = fedustat.protocols.registry.make("ldp-quantized", auc_kernel(), epsilon=1.0,
                                                k=8, bounds=(0.0, 1.0))
    protocol = protocol.configure(10**12)
    state = protocol.init_server(10**12)
    join = {"join": np.int64(10**12)}
    state, _ = protocol.server_step_reduced(state, join, np.random.default_rng(0))
    grid = protocol.plan.grid(state.bins)
    rng = np.random.default_rng(1)
    small = rng.integers(1, 50, size=(grid.n_groups, grid.size))
    scale = 10**12 // int(small.sum())
    tracemalloc.start()
    big = protocol.server_step_reduced(state, {"counts": small * scale}, rng)[1]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2**22  # a few MiB of O(m^2 k^2) work, whatever n
    # The same map from U to AUC as the per-party label column gives (small n).
    few = protocol.server_step_reduced(state, {"counts": small}, rng)[1]
    pos = int(small[1].sum())
    labels = np.repeat([0.0, 1.0], [int(small.sum()) - pos, pos])
    u = few.diagnostics["u_statistic"]
    want = auc_kernel().statistic(u, fedustat.stats.kernels.PublicData(labels.size,
                                                                       {"label": labels}))
    assert few.value == pytest.approx(want, rel=1e-12)
    n_pos = int(small[1].sum()) * scale
    n = int(small.sum()) * scale
    assert big.value == pytest.approx(
        big.diagnostics["u_statistic"] * n * (n - 1) / 2 / (n_pos * (n - n_pos)), rel=1e-12)
    assert big.diagnostics["group_counts"] == [n - n_pos, n_pos]


def test_batch_summaries_do_not_grow_with_the_batch():
    protocol = fedustat.protocols.registry.make("ldp-quantized", auc_kernel(), epsilon=1.0,
                                                k=8, bounds=(0.0, 1.0))
    rng = np.random.default_rng(2)
    sizes = set()
    for n in (10, 10_000):
        rows = _labelled(n, n)
        state = protocol.init_parties(rows, np.arange(n))
        state, _ = protocol.party_step(state, None, rng)  # the check-in
        bins = protocol.plan.bins_for(10**9, protocol.epsilon, protocol.lipschitz)
        context = dict(bins)
        names = [c.name for c in protocol.plan.continuous]
        reply = fedustat.protocols.base.Message(
            fedustat.protocols.base.Role.SERVER, fedustat.protocols.base.Role.PARTY,
            {"bins": np.array([bins[c] for c in names])}, {"bins": 32})
        _, reports = protocol.party_step(state, reply, rng)
        summary = protocol.summarize_batch(reports, context)
        assert int(summary["counts"].sum()) == n
        sizes.add(summary["counts"].nbytes)
    assert len(sizes) == 1


def test_replayed_batches_equal_kept_states_and_deployment_noise_runs(cluster):
    # Default: no batch state kept between ldp-quantized's rounds (each round's task
    # rebuilds its batch); keeping them must give the same release.
    x = np.random.default_rng(6).beta(2.0, 5.0, 1200)
    kernel = gini_kernel((0.0, 1.0))
    replayed = fedustat.estimate(kernel, x, epsilon=1.0, rng=9, engine=DaskEngine(cluster),
                                 batch_size=500, **GINI)
    kept = fedustat.estimate(kernel, x, epsilon=1.0, rng=9, batch_size=500,
                             engine=DaskEngine(cluster, keep_states=True), **GINI)
    _same(replayed, kept)
    assert replayed.diagnostics["engine"]["partitions"] == 3
    # Deployment noise (OS entropy, never replayed) runs on the engine too.
    deployed = fedustat.estimate(kernel, x, epsilon=1.0, noise="deployment", engine=cluster,
                                 **GINI)
    assert deployed.noise == "deployment"
    assert deployed.diagnostics["party_noise"] == "deployment"
