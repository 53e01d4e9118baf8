"""The distributed engine against the in-process simulator: wall time and peak memory.

Usage::

    .venv/bin/python benchmarks/bench_engine.py [--parties 1e7 1e8] [--workers 2]
        [--batch 2500000] [--skip-local-above 1e8]
    # the Gini job on Ray instead (an environment with ray installed), one JSON line:
    PYTHONPATH=src <ray-env>/bin/python benchmarks/bench_engine.py --one gini ray 1e7

Jobs (issue 14): ``ldp-quantized`` Gini mean difference with k = 256 cells on Beta(2, 5)
values, and ``fedauc-rr`` (epsilon = 1, one client per sample) on normal scores with
logistic labels. Each configuration runs in its own process (a fresh local cluster for
the engine) so that peak memory is its own: the resident-set high-water mark of the
process (``ru_maxrss``) for the in-process simulator; for the engine that of the driver
and of the largest worker. Data come from one generator per partition
(:func:`fedustat.runtime.engine.generated_partitions`), so the engine never holds the
full data in one process; the in-process run concatenates the same partitions, with
``batch_size`` = the partition sizes, and must give the same release (checked).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np


def gini_rows(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.beta(2.0, 5.0, n)


def auc_rows(n: int, rng: np.random.Generator) -> np.ndarray:
    s = rng.normal(0.0, 1.0, n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-s))).astype(np.float64)
    return np.column_stack([s, y])


def _protocol(job: str) -> Any:
    from fedustat.protocols.registry import make
    from fedustat.stats.kernels import auc_kernel, gini_kernel

    if job == "gini":
        return make("ldp-quantized", gini_kernel((0.0, 1.0)), epsilon=1.0, k=256,
                    bounds=(0.0, 1.0))
    return make("fedauc-rr", auc_kernel(), epsilon=1.0)


def _sizes(n: int, batch: int) -> list[int]:
    return [min(batch, n - start) for start in range(0, n, batch)]


def _warm_up() -> None:
    import fedustat.protocols.fedauc.protocol
    import fedustat.protocols.local.quantized_rr  # noqa: F401


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_one(job: str, mode: str, n: int, workers: int, batch: int) -> dict[str, Any]:
    from fedustat.runtime.engine import DaskEngine, generated_partitions, load_all
    from fedustat.runtime.simulate import simulate

    gen = gini_rows if job == "gini" else auc_rows
    parts = generated_partitions(gen, _sizes(n, batch), seed=2026)
    protocol = _protocol(job)
    out: dict[str, Any] = {"job": job, "mode": mode, "parties": n, "batches": len(parts)}
    if mode == "local":
        start = time.perf_counter()
        data = load_all(parts)
        est = simulate(protocol, data, rng=1, batch_size=_sizes(n, batch))
        out["seconds"] = time.perf_counter() - start
        out["peak_mib"] = _peak_mib()
    else:
        with DaskEngine(n_workers=workers) as engine:
            # Workers import fedustat once (about 2 s); a long-lived cluster pays it once.
            engine.client.run(_warm_up)
            start = time.perf_counter()
            est = engine.run(protocol, parts, rng=1)
            out["seconds"] = time.perf_counter() - start
            worker_peaks = engine.client.run(_peak_mib)
        out["workers"] = workers
        out["peak_mib"] = max(worker_peaks.values())
        out["driver_peak_mib"] = _peak_mib()
    out["value"], out["std_error"] = est.value, est.std_error
    return out


def run_ray(n: int, workers: int, batch: int) -> dict[str, Any]:
    """The Gini job on Ray (the alternative measured, issue 14): the engine's own task
    functions as Ray tasks, summaries reduced by a tree of tasks, the server step on the
    driver; run from a separate environment with Ray installed (docs/engine.md)."""
    import ray

    from fedustat._validation import as_seed_sequence
    from fedustat.protocols.base import Estimate
    from fedustat.runtime.engine import driver as d
    from fedustat.runtime.engine import generated_partitions

    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    task = {f.__name__: ray.remote(num_cpus=1)(f) for f in
            (d._init_batch, d._party_round, d._summarize, d._combine)}
    ray.get([ray.remote(_warm_up).remote() for _ in range(workers)])
    protocol = _protocol("gini")
    sizes = _sizes(n, batch)
    parts = generated_partitions(gini_rows, sizes, seed=2026)
    start = time.perf_counter()
    seeds = as_seed_sequence(1).spawn(len(parts) + 1)
    server_rng = np.random.default_rng(seeds[0])
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).tolist()
    batches = [task["_init_batch"].remote(protocol, p, int(o), s)
               for p, o, s in zip(parts, offsets, seeds[1:], strict=True)]
    state = protocol.init_server(n)
    batches = [task["_party_round"].remote(protocol, b) for b in batches]
    level = [task["_summarize"].remote(protocol, b, protocol.distributed_round(state)[1])
             for b in batches]
    while len(level) > 1:
        level = [task["_combine"].remote(protocol, *level[i:i + 8])
                 for i in range(0, len(level), 8)]
    state, est = protocol.server_step_reduced(state, ray.get(level[0]), server_rng)
    assert isinstance(est, Estimate)
    seconds = time.perf_counter() - start
    ray.shutdown()
    return {"job": "gini", "mode": "ray", "parties": n, "batches": len(parts),
            "workers": workers, "seconds": seconds, "driver_peak_mib": _peak_mib(),
            "peak_mib": float("nan"), "value": est.value, "std_error": est.std_error}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parties", type=float, nargs="+", default=[1e7, 1e8])
    parser.add_argument("--jobs", nargs="+", default=["gini", "fedauc"],
                        choices=["gini", "fedauc"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2_500_000)
    parser.add_argument("--skip-local-above", type=float, default=1e8,
                        help="no in-process run above this many parties")
    parser.add_argument("--one", nargs=3, metavar=("JOB", "MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        job, mode, n = args.one
        run = run_ray if mode == "ray" else (
            lambda n, w, b: run_one(job, mode, n, w, b))
        print(json.dumps(run(int(float(n)), args.workers, args.batch)))
        return 0
    print("| job | parties | runtime | wall s | peak MiB (largest process) | driver MiB | "
          "same release |")
    print("|---|---|---|---|---|---|---|")
    for job in args.jobs:
        for n in (int(p) for p in args.parties):
            results = {}
            modes = ["engine"] + (["local"] if n <= args.skip_local_above else [])
            for mode in modes:
                cmd = [sys.executable, __file__, "--workers", str(args.workers), "--batch",
                       str(args.batch), "--one", job, mode, str(n)]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
                    print(f"| {job} | {n:.0e} | {mode} | failed: {tail[0]} | | | |")
                    continue
                results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
            for mode, r in results.items():
                same = ""
                if len(results) == 2:
                    a, b = results["engine"], results["local"]
                    # The engine's rank sums are exact integers; in process, np.dot of the
                    # ranks rounds above M ~ 2e5, which moves fedauc-rr's s.e. (only).
                    rel = abs(a["std_error"] - b["std_error"]) / abs(b["std_error"])
                    same = ("NO" if a["value"] != b["value"] else
                            "yes" if rel == 0 else f"value yes, s.e. rel. diff {rel:.0e}")
                runtime = (f"engine, {r['workers']} workers, {r['batches']} batches"
                           if mode == "engine" else "in-process")
                print(f"| {job} | {n:.0e} | {runtime} | {r['seconds']:.1f} | "
                      f"{r['peak_mib']:.0f} | {r.get('driver_peak_mib', float('nan')):.0f} | "
                      f"{same} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
