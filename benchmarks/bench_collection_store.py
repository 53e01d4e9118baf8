"""A stored collection released on the engine: 10^7 reports, none held by the releaser.

    python benchmarks/bench_collection_store.py [--reports 1e6,1e7] [--compare-at 1e6]
                                                [--devices 3000] [--workers 2]

Job: ldp-quantized AUC, k = 16, epsilon 1, bounds [0, 1], seed 7; the records follow
``bench_devices.records``'s law (labels Bernoulli(0.3), lognormal scores by class clipped
to [0, 1] and rounded to 0.01), drawn here one generator per 1000 devices.

**Stored rows.** For each size N a run directory is filled with N ldp-quantized reports
through :class:`fedustat.runtime.report_store.ReportWriter`, the code the collection
server calls on every accepted report (``append``: a buffer handed to the writer thread
every 4096 rows; Parquet partitions written, flushed and renamed). The reports are made
here by the protocol's own party step, 1000 devices per step with the simulator's
stream for that batch, and appended 1000 at a time: not through 10^7 network calls, which
at the server's ~400 reports/s (one fresh mutual-TLS handshake each,
``bench_devices.py``) would take about 7 hours. The writer's cost per accepted report
(one-row appends, as the server makes them) is measured apart on 10^5 reports.

The release then runs in a fresh process (so its peak memory is the release's alone) on
a local Dask cluster of ``--workers`` worker processes (free ports, no dashboard):
:func:`fedustat.runtime.engine.stored.release_stored`, each task summarizing a few
partitions on its worker, a tree of tasks combining the histograms, the server step on
the total. The table gives the release's wall time (cluster start included), the peak
resident memory of the releasing process and of each worker, the store's size on disk,
and, at ``--compare-at``, whether the release equals the in-process release of the same
reports (every partition read into one process, summarized and released as the
in-memory collection does) and the simulator's (``simulate`` with batches of 1000).

**Network row.** ``--devices`` real devices (async clients, real TLS, each its own
certificate, ``bench_devices.py``'s load processes) report to a real
``fedustat collect --run-dir DIR --partitions --seed 7`` process, which releases from
its partitions on a local cluster at the quorum; its release is compared with the
in-memory collection's number for the seed (the simulator with one record per batch,
which ``tests/test_collection.py`` shows the in-memory window releases).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_devices
from fedustat.runtime import report_store as rs
from fedustat.runtime.network.collect import _stream, window_run
from fedustat.runtime.network.service import (
    configuration_hash,
    public_configuration,
)

SEED = 7
CHUNK = 1000


def _peak_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def _terms() -> tuple[str, str, dict]:
    protocol = bench_devices.make_protocol("ldp-quantized", 0)
    configuration = public_configuration(protocol)
    fingerprint = configuration_hash(protocol.name, configuration)
    return window_run(fingerprint), fingerprint, configuration


def chunk_reports(i: int) -> object:
    """Devices i*CHUNK .. (i+1)*CHUNK-1's reports, made by the party step with the
    simulator's stream of batch i (batches of CHUNK devices)."""
    protocol = bench_devices.make_protocol("ldp-quantized", 0)
    rows = _records_fast(i)
    ids = i * CHUNK + np.arange(CHUNK, dtype=np.int64)
    state = protocol.init_parties(rows, ids)
    _, message = protocol.party_step(state, None, np.random.default_rng(_stream(SEED, 1 + i)))
    return message


def _records_fast(i: int) -> np.ndarray:
    # bench_devices.records draws one generator per device (about 20 us each: 200 s for
    # 10^7); here one generator per chunk of devices, the same law.
    rng = np.random.default_rng([11, i])
    label = (rng.random(CHUNK) < 0.3).astype(float)
    score = np.minimum(1.0, rng.lognormal(-1.6 + 0.8 * label, 0.7)).round(2)
    return np.column_stack([score, label])


def _open(directory: Path, run: str, fingerprint: str, configuration: dict) -> None:
    """A run directory with partitions, as ``fedustat collect --partitions`` makes it (the
    reports are appended here, not committed to its database)."""
    rs.open_store(directory, run, "ldp-quantized", fingerprint, configuration,
                  {"partitions": True}, opened_at=time.time(), partitions=True)


def fill(directory: Path, n: int) -> dict[str, float]:
    run, fingerprint, configuration = _terms()
    _open(directory, run, fingerprint, configuration)
    writer = rs.ReportWriter(directory, run)
    tic = time.perf_counter()
    for i in range(n // CHUNK):
        writer.append(chunk_reports(i), i + 1)
    writer.close()
    seconds = time.perf_counter() - tic
    size = sum(p.stat().st_size for p in rs.stored_partitions(directory))
    return {"fill_s": seconds, "partitions": writer.partitions_written,
            "store_mib": size / 2**20, "fill_peak_mib": _peak_mib()}


def append_cost(directory: Path, n: int = 100_000) -> float:
    """Microseconds of the event loop's share (``append``) per one-row report."""
    run, fingerprint, configuration = _terms()
    _open(directory, run, fingerprint, configuration)
    writer = rs.ReportWriter(directory, run)
    whole = chunk_reports(0)
    ones = [type(whole)(whole.sender, whole.receiver,
                        {k: np.asarray(v)[j:j + 1] for k, v in whole.fields.items()},
                        whole.bits_per_value, np.asarray(whole.parties)[j:j + 1])
            for j in range(CHUNK)]
    tic = time.perf_counter()
    for r in range(n):
        writer.append(ones[r % CHUNK], r + 1)
    loop = time.perf_counter() - tic
    writer.close()
    return 1e6 * loop / n


def release_main(directory: Path, workers: int) -> int:
    """In a fresh process: the release from the store on a local cluster."""
    from fedustat.runtime.engine import DaskEngine
    from fedustat.runtime.engine.stored import release_stored

    protocol = bench_devices.make_protocol("ldp-quantized", 0)
    tic = time.perf_counter()
    with DaskEngine(n_workers=workers) as engine:
        estimate, n = release_stored(protocol, directory, engine,
                                     server_rng=np.random.default_rng(_stream(SEED, 0)))
        seconds = time.perf_counter() - tic
        worker_peaks = sorted(engine.client.run(_peak_mib).values())
    print(json.dumps({"n": n, "value": estimate.value, "std": estimate.std_error,
                      "release_s": seconds, "driver_peak_mib": _peak_mib(),
                      "worker_peak_mib": worker_peaks}), flush=True)
    return 0


def in_process(directory: Path, n: int) -> tuple[object, object]:
    """The same reports released in one process (the in-memory collection's arithmetic)
    and the simulator on the same records."""
    from fedustat.runtime.simulate import merge_party_messages, simulate

    protocol = bench_devices.make_protocol("ldp-quantized", 0)
    run = rs.read_manifest(directory).run
    messages = [rs.read_reports(p, run) for p in rs.stored_partitions(directory)]
    reduces, context = rs.reduction_context(protocol)
    assert reduces
    summary = protocol.summarize_batch(merge_party_messages(messages), context)
    configured = protocol.configure(n)
    _, held = configured.server_step_reduced(configured.init_server(n), summary,
                                             np.random.default_rng(_stream(SEED, 0)))
    rows = np.concatenate([_records_fast(i) for i in range(n // CHUNK)])
    simulated = simulate(bench_devices.make_protocol("ldp-quantized", 0), rows, rng=SEED,
                         batch_size=[CHUNK] * (n // CHUNK))
    return held, simulated


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reports", default="1e6,1e7")
    parser.add_argument("--compare-at", default="1e6")
    parser.add_argument("--devices", type=int, default=3000,
                        help="devices of the network row (0: skip it)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--release", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.release:
        return release_main(Path(args.release), args.workers)
    sizes = [int(float(s)) for s in args.reports.split(",") if s]
    compare = int(float(args.compare_at)) if args.compare_at else None
    print(f"load average before: {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="fedustat-store-bench-") as tmp:
        scratch = Path(tmp)
        cost = append_cost(scratch / "append")
        print(f"writer, on the event loop: {cost:.2f} us per accepted one-row report "
              "(append; the partition is joined and written by the writer thread)",
              flush=True)
        print("| stored reports | partitions | store MiB | fill s | release s | releasing "
              "process peak MiB | worker peak MiB | release (s.e.) | = in-process | "
              "= simulator | load |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            directory = scratch / f"store-{n}"
            filled = fill(directory, n)
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, __file__, "--release", str(directory),
                                  "--workers", str(args.workers)], capture_output=True,
                                 text=True, timeout=7200)
            if out.returncode != 0:
                raise RuntimeError(f"the release failed: {out.stderr[-2000:]}")
            released = json.loads(out.stdout.strip().splitlines()[-1])
            same_held = same_sim = "-"
            if n == compare:
                held, simulated = in_process(directory, n)
                same_held = str(held.value == released["value"]
                                and held.std_error == released["std"])
                same_sim = str(simulated.value == released["value"]
                               and simulated.std_error == released["std"])
            print(f"| {n:.0e} | {filled['partitions']} | {filled['store_mib']:.1f} | "
                  f"{filled['fill_s']:.1f} | {released['release_s']:.1f} | "
                  f"{released['driver_peak_mib']:.0f} | "
                  f"{' / '.join(f'{w:.0f}' for w in released['worker_peak_mib'])} | "
                  f"{released['value']:.4f} ({released['std']:.4f}) | {same_held} | "
                  f"{same_sim} | {load:.2f} |", flush=True)
            for path in rs.stored_partitions(directory):
                path.unlink()
        if args.devices:
            certs = bench_devices.create_deployment(scratch / "certs", args.devices)
            load = os.getloadavg()[0]
            row = bench_devices.run_once("ldp-quantized", args.devices, certs, 2, 100,
                                         scratch, seed=SEED, timeout=600.0,
                                         server_options=["--run-dir",
                                                         str(scratch / "network-run"),
                                                         "--partitions"])
            parts = rs.stored_partitions(scratch / "network-run")
            print(f"\nnetwork: {args.devices} devices -> `fedustat collect --partitions` "
                  f"(seed {SEED}, load {load:.2f}): wall {row['wall']:.1f} s (release on a "
                  f"local cluster included), server peak {row['rss']:.0f} MiB, "
                  f"{len(parts)} partitions, failed {row['failed']}; release "
                  f"{row['value']!r} (s.e. {row['std']!r}); in-memory collection for the "
                  f"seed {row['sim_value']!r} (s.e. {row['sim_std']!r}): equal = "
                  f"{row['value'] == row['sim_value'] and row['std'] == row['sim_std']}")
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
