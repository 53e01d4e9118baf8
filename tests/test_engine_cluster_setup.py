"""A cluster the engine starts claims no fixed port, and its workers find relative paths.

One local cluster (one worker process) is started by ``DaskEngine()`` while this test
holds Dask's default dashboard port 8787 and while the working directory is an empty
folder: the worker process runs there, so a Parquet file named relative to the folder
the user works in later is found only if the path was made absolute before it was
shipped (the situation of an external cluster, whose workers run in directories of
their own).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("distributed")
pytest.importorskip("pyarrow")

import fedustat
from fedustat.runtime.engine import DaskEngine, parquet_directory, parquet_partitions
from fedustat.runtime.engine.partitions import ParquetPartition
from fedustat.runtime.engine.stored import _tasks
from fedustat.stats import auc_kernel

DASK_DEFAULT_DASHBOARD = 8787


@contextlib.contextmanager
def holding_port(port: int) -> Iterator[None]:
    """Listen on ``port`` for the block; if another process already holds it, the port is
    taken either way, which is what the test needs."""
    probe = socket.socket()
    try:
        try:
            probe.bind(("", port))
            probe.listen(1)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
        yield
    finally:
        probe.close()


@pytest.fixture(scope="module")
def started() -> Iterator[tuple[DaskEngine, list[str], Path]]:
    """An engine started by the library with port 8787 held and the working directory an
    empty folder (where its worker process runs); the warnings the start gave."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        workers_home, users_home = Path(tmp, "workers"), Path(tmp, "user")
        workers_home.mkdir()
        users_home.mkdir()
        old = os.getcwd()
        engine = None
        try:
            with holding_port(DASK_DEFAULT_DASHBOARD):
                os.chdir(workers_home)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    engine = DaskEngine(n_workers=1)
                os.chdir(users_home)
                messages = [str(w.message) for w in caught]
                yield engine, messages, users_home
        finally:
            if engine is not None:
                engine.close()
            os.chdir(old)


def test_a_started_cluster_leaves_port_8787_alone(started):
    engine, messages, _ = started
    assert not [m for m in messages if "8787" in m], messages
    services = engine.client.scheduler_info()["services"]
    assert services.get("dashboard") not in (None, DASK_DEFAULT_DASHBOARD), services


def test_a_worker_reads_a_relative_parquet_path_from_the_users_directory(started):
    engine, _, users_home = started
    worker_dirs = engine.client.run(os.getcwd)
    assert all(Path(d) != users_home for d in worker_dirs.values()), worker_dirs
    pd.DataFrame({"x": [0.25, 0.5, 0.75]}).to_parquet(users_home / "values.parquet")
    for partition in [*parquet_partitions(["values.parquet"], columns=["x"]),
                      *parquet_directory("values.parquet"),
                      ParquetPartition("./values.parquet")]:
        rows = engine.client.submit(partition.load, pure=False).result(timeout=120)
        assert rows[:, 0].tolist() == [0.25, 0.5, 0.75]


def test_estimate_on_a_relative_partition_directory(started):
    engine, _, users_home = started
    rng = np.random.default_rng(4)
    folder = users_home / "scores"
    folder.mkdir()
    for i in range(2):
        label = rng.integers(0, 2, 30)
        pd.DataFrame({"score": rng.normal(size=30) + label, "label": label}).to_parquet(
            folder / f"part-{i}.parquet")
    relative, absolute = (
        fedustat.estimate(auc_kernel(), epsilon=1.0, protocol="fedauc-rr", rng=3,
                          engine=engine, partitions=where)
        for where in ("scores", str(folder)))
    assert relative.value == absolute.value


def test_partition_paths_are_made_absolute_where_they_are_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert ParquetPartition("a.parquet").path == str(tmp_path / "a.parquet")
    assert parquet_partitions(["sub/b.parquet"])[0].path == str(tmp_path / "sub" / "b.parquet")
    # A stored collection's partitions, grouped into tasks: absolute too.
    assert _tasks([Path("p-0.parquet"), Path("p-1.parquet")], [3, 4], 100) == [
        [str(tmp_path / "p-0.parquet"), str(tmp_path / "p-1.parquet")]]
