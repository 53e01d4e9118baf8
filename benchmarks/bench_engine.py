"""The distributed engine against the in-process simulator: wall time and peak memory.

Usage::

    PYTHONPATH=src .venv/bin/python benchmarks/bench_engine.py [--parties 1e7 1e8 1e9]
        [--jobs gini fedauc] [--workers 2] [--batch 2500000] [--max-minutes 30]
        [--scaling-at 1e8] [--modes engine local]
    # the Gini job on Ray instead (an environment with ray installed), one JSON line:
    PYTHONPATH=src <ray-env>/bin/python benchmarks/bench_engine.py --one gini ray 1e7

Jobs (issue 14): ``ldp-quantized`` Gini mean difference with k = 256 cells on Beta(2, 5)
values, and ``fedauc-rr`` (epsilon = 1, one client per sample) on normal scores with
logistic labels (``fedauc-laplace`` and ``fedauc-gaussian``, delta = 1e-6: its noisy
variants, the same ranking). Each configuration runs in its own process (a fresh local cluster for
the engine) so that peak memory is its own: the resident-set high-water mark of the
process (``ru_maxrss``) for the in-process simulator; for the engine that of the driver
and of the largest worker. Data come from one generator per partition
(:func:`fedustat.runtime.engine.generated_partitions`), so the engine never holds the
full data in one process; the in-process run concatenates the same partitions, with
``batch_size`` = the partition sizes, and must give the same release (checked).

Job ``pairs`` (issue 28): ``pairs-2pc`` AUC (epsilon = 1, P = 2 permutations, FSS
comparisons) on the fedauc job's scores, its server steps gathered on the driver and its
relay rounds between workers (``--jobs pairs pairs-kendall --parties 1e5 4e5 --batch
100000``); job
``pairs-kendall``: Kendall's tau-a (P = 2, the boolean circuit, 8 rounds of openings) on
correlated normal pairs, where every step on the engine replays the rounds before it.

A run is not started when the smaller runs say it cannot finish here: the in-process
simulator (or a worker) when its peak, projected from the bytes per party measured at the
largest smaller n, exceeds 80 % of the available memory ("does not fit", with that
estimate); an engine run projected from the two largest smaller runs (t = a n^b) to take
more than ``--max-minutes`` ("PROJECTED", with the fit). Sizes run from small to large.
"""

from __future__ import annotations

import argparse
import json
import math
import os
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


def kendall_rows(n: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.normal(0.0, 1.0, n)
    return np.column_stack([x, 0.6 * x + 0.8 * rng.normal(0.0, 1.0, n)])


def _protocol(job: str) -> Any:
    from fedustat.protocols.registry import make
    from fedustat.stats.kernels import auc_kernel, gini_kernel, kendall_tau_kernel

    if job == "gini":
        return make("ldp-quantized", gini_kernel((0.0, 1.0)), epsilon=1.0, k=256,
                    bounds=(0.0, 1.0))
    if job == "pairs":  # 000 Sec. 5: P = 2 permutations, each pair's AUC term by 2PC (FSS)
        return make("pairs-2pc", auc_kernel(), epsilon=1.0, P=2)
    if job == "pairs-kendall":  # Kendall's tau-a by the boolean circuit: 8 opening rounds
        return make("pairs-2pc", kendall_tau_kernel("a"), epsilon=1.0, P=2,
                    comparison="circuit")
    if job == "fedauc-laplace":   # Laplace on each client's rank statistic (local DP)
        return make("fedauc-laplace", auc_kernel(), epsilon=1.0)
    if job == "fedauc-gaussian":
        return make("fedauc-gaussian", auc_kernel(), epsilon=1.0, delta=1e-6)
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
    if job == "pairs-kendall":
        gen = kendall_rows
    parts = generated_partitions(gen, _sizes(n, batch), seed=2026)
    protocol = _protocol(job)
    out: dict[str, Any] = {"job": job, "mode": mode, "parties": n, "batches": len(parts),
                           "load": os.getloadavg()[0]}  # 1-minute load average at the start
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
            # pairs-2pc: party steps and relay rounds on the workers, server steps gathered.
            est = engine.run(protocol, parts, rng=1,
                             server_steps="gathered" if job.startswith("pairs")
                             else "distributed")
            out["seconds"] = time.perf_counter() - start
            worker_peaks = engine.client.run(_peak_mib)
        out["workers"] = workers
        out["worker_peaks_mib"] = sorted(worker_peaks.values())
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


def _available_mib() -> float:
    """MemAvailable of /proc/meminfo: what a new process can take without swapping."""
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


#: Resident size of a process that has imported fedustat and NumPy, before any data
#: (measured: about 150 MiB); subtracted to get bytes per party from a measured peak.
BASE_MIB = 150.0
#: A run is started only if its projected peak fits in this share of the available memory.
FIT_SHARE = 0.8


def _run(job: str, mode: str, n: int, workers: int, batch: int) -> dict[str, Any] | str:
    cmd = [sys.executable, __file__, "--workers", str(workers), "--batch", str(batch),
           "--one", job, mode, str(n)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or ["?"]
        return f"failed: {tail[0]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parties", type=float, nargs="+", default=[1e7, 1e8, 1e9])
    parser.add_argument("--jobs", nargs="+", default=["gini", "fedauc"],
                        choices=["gini", "fedauc", "fedauc-laplace", "fedauc-gaussian",
                                 "pairs", "pairs-kendall"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2_500_000)
    parser.add_argument("--max-minutes", type=float, default=30.0,
                        help="an engine run projected (from the smaller runs) to take longer "
                             "is not started; its projection is printed instead")
    parser.add_argument("--scaling-at", type=float, default=None,
                        help="also run the ldp-quantized job with 1 worker at this many "
                             "parties (time against workers)")
    parser.add_argument("--modes", nargs="+", default=["engine", "local"],
                        choices=["engine", "local"],
                        help="engine and/or the in-process simulator")
    parser.add_argument("--prior", nargs="+", default=[], metavar="JOB:N=SECONDS",
                        help="engine wall times measured earlier (e.g. fedauc:1e8=455.5), "
                             "used only to project the time of larger runs; the projection "
                             "says so")
    parser.add_argument("--one", nargs=3, metavar=("JOB", "MODE", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--umpc", nargs="+", default=None, choices=sorted(UMPC_JOBS),
                        help="run only these U-MPC jobs (their own table; see umpc_main)")
    parser.add_argument("--umpc-batches", type=int, default=4,
                        help="batches of a U-MPC run (in process and on the engine)")
    args = parser.parse_args(argv)
    if args.umpc or (args.one and args.one[0] in UMPC_JOBS):
        return umpc_main(args)
    if args.one:
        job, mode, n = args.one
        run = run_ray if mode == "ray" else (
            lambda n, w, b: run_one(job, mode, n, w, b))
        print(json.dumps(run(int(float(n)), args.workers, args.batch)))
        return 0
    print(f"available memory at start: {_gib(_available_mib())}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| job | parties | runtime | wall s | peak MiB per worker (or process) | "
          "driver peak MiB | same release |")
    print("|---|---|---|---|---|---|---|")
    notes: list[str] = []
    for job in args.jobs:
        # Bytes per party and seconds per party of the largest runs so far, per mode: the
        # basis of the "does not fit" and "projected" rows.
        per_party_mib: dict[str, float] = {}
        timings: list[tuple[int, float]] = []
        for item in args.prior:
            name, _, rest = item.partition(":")
            size, _, seconds = rest.partition("=")
            if name == job:
                timings.append((int(float(size)), float(seconds)))
                notes.append(f"prior measurement used for projections: {job} at "
                             f"{float(size):.0e} parties, {float(seconds)} s (engine)")
        timings.sort()
        for n in sorted(int(p) for p in args.parties):
            results: dict[str, dict[str, Any]] = {}
            for mode in args.modes:
                label = (f"engine, {args.workers} workers, {math.ceil(n / args.batch)} batches"
                         if mode == "engine" else "in-process")
                need = per_party_mib.get(mode, 0.0) * n + BASE_MIB
                if mode == "engine":
                    need = per_party_mib.get(mode, 0.0) * n / args.workers + BASE_MIB
                room = FIT_SHARE * _available_mib() / (args.workers if mode == "engine" else 1)
                if mode in per_party_mib and need > room:
                    print(f"| {job} | {n:.0e} | {label} | - | does not fit: needs ~"
                          f"{_gib(need)}{' per worker' if mode == 'engine' else ''} "
                          f"(measured {per_party_mib[mode] * 2**20:.0f} B per party), "
                          f"{_gib(room)} free{' per worker' if mode == 'engine' else ''} | "
                          f"- | - |", flush=True)
                    if mode == "engine":
                        _print_projection(job, n, label, timings, notes)
                    continue
                if mode == "engine" and len(timings) >= 2:
                    projected = _project(timings, n)
                    if projected > 60.0 * args.max_minutes:
                        _print_projection(job, n, label, timings, notes)
                        continue
                r = _run(job, mode, n, args.workers, args.batch)
                if isinstance(r, str):
                    print(f"| {job} | {n:.0e} | {label} | {r} | | | |", flush=True)
                    continue
                results[mode] = r
                peaks = r.get("worker_peaks_mib", [r["peak_mib"]])
                per_party_mib[mode] = max(0.0, max(peaks) - BASE_MIB) / (
                    n / args.workers if mode == "engine" else n)
                if mode == "engine":
                    timings = sorted([t for t in timings if t[0] != n] + [(n, r["seconds"])])
            for mode, r in results.items():
                same = ""
                if len(results) == 2:
                    a, b = results["engine"], results["local"]
                    # The engine's rank sums are exact integers; in process, np.dot of the
                    # ranks rounds above M ~ 2e5, which moves fedauc-rr's s.e. (only).
                    rel = abs(a["std_error"] - b["std_error"]) / abs(b["std_error"])
                    same = ("NO" if a["value"] != b["value"] else
                            "yes" if rel == 0 else f"value yes, s.e. rel. diff {rel:.0e}")
                label = (f"engine, {r['workers']} workers, {r['batches']} batches"
                         if mode == "engine" else "in-process")
                peaks = " / ".join(f"{p:.0f}" for p in r.get("worker_peaks_mib",
                                                             [r["peak_mib"]]))
                driver = f"{r['driver_peak_mib']:.0f}" if "driver_peak_mib" in r else "-"
                load = f" (load {r['load']:.1f})" if "load" in r else ""
                print(f"| {job} | {n:.0e} | {label} | {r['seconds']:.1f}{load} | {peaks} | "
                      f"{driver} | {same} |", flush=True)
        if job == "gini" and args.scaling_at:
            n = int(args.scaling_at)
            r = _run(job, "engine", n, 1, args.batch)
            if not isinstance(r, str):
                print(f"| {job} | {n:.0e} | engine, 1 worker, {r['batches']} batches | "
                      f"{r['seconds']:.1f} | {r['peak_mib']:.0f} | "
                      f"{r['driver_peak_mib']:.0f} | (time against workers) |", flush=True)
    for note in notes:
        print(note)
    return 0


def _project(timings: list[tuple[int, float]], n: int) -> float:
    """Seconds at n from the last two measured engine runs, t = a n^b (b fitted on them)."""
    (n1, t1), (n2, t2) = timings[-2:]
    b = math.log(t2 / t1) / math.log(n2 / n1)
    return t2 * (n / n2) ** b


def _print_projection(job: str, n: int, label: str, timings: list[tuple[int, float]],
                      notes: list[str]) -> None:
    if len(timings) < 2:
        print(f"| {job} | {n:.0e} | {label} | not run, no projection (needs two smaller "
              "runs) | | | |", flush=True)
        return
    (n1, t1), (n2, t2) = timings[-2:]
    b = math.log(t2 / t1) / math.log(n2 / n1)
    projected = _project(timings, n)
    print(f"| {job} | {n:.0e} | {label} | PROJECTED {projected:.0f} ({projected / 60:.0f} min), "
          f"not run | | | |", flush=True)
    notes.append(f"PROJECTED ({job}, {n:.0e}): t = {t2:.1f} s x ({n:.0e} / {n2:.0e})^{b:.2f} "
                 f"= {projected:.0f} s, the exponent fitted on the measured {n1:.0e} "
                 f"({t1:.1f} s) and {n2:.0e} ({t2:.1f} s) engine runs; not measured.")


# ------------------------------------------------------------------ U-MPC (issue 28)
#
#     PYTHONPATH=src .venv/bin/python benchmarks/bench_engine.py --umpc umpc-auc-fss \
#         umpc-auc-circuit umpc-gini-fss umpc-gini-circuit --parties 1e4 1e5 [--modes ...]
#
# U-MPC (002 Protocol 3.1) with |E| = 2n BalancedSamp edges, epsilon = 1, noise under M_HF
# (the subgroup Z, 002 Sec. 4), on the engine's gathered mode (party steps on the workers,
# relay rows between them, the check-in routed and the aggregation reduced) and in
# process with the same batches: wall seconds, peak MiB per worker, driver MiB, whether
# the releases are equal, and the busiest party's bits (a noise contributor: its n - 1
# Protocol B.1 shares, (n - 1) l bits, dominate) beside that (n - 1) l.

#: job -> (kernel, comparison)
UMPC_JOBS = {"umpc-auc-fss": ("auc", "fss"), "umpc-auc-circuit": ("auc", "circuit"),
             "umpc-gini-fss": ("gini", "fss"), "umpc-gini-circuit": ("gini", "circuit")}


def umpc_auc_rows(n: int, rng: np.random.Generator) -> np.ndarray:
    y = rng.integers(0, 2, n).astype(np.float64)
    return np.column_stack([np.clip(rng.normal(0.45 + 0.15 * y, 0.2, n), 0.0, 1.0), y])


def umpc_protocol(job: str) -> Any:
    from fedustat.protocols.registry import make
    from fedustat.stats.kernels import auc_kernel, gini_kernel

    kernel, comparison = UMPC_JOBS[job]
    built = auc_kernel() if kernel == "auc" else gini_kernel((0.0, 1.0))
    return make("umpc", built, epsilon=1.0, comparison=comparison, threat_model="hf",
                bounds=(0.0, 1.0), precision=2.0**-10)


def umpc_run_one(job: str, mode: str, n: int, workers: int, batches: int) -> dict[str, Any]:
    from fedustat.runtime.engine import DaskEngine, generated_partitions, load_all
    from fedustat.runtime.simulate import simulate

    sizes = _sizes(n, math.ceil(n / batches))
    gen = umpc_auc_rows if UMPC_JOBS[job][0] == "auc" else gini_rows
    parts = generated_partitions(gen, sizes, seed=2026)
    out: dict[str, Any] = {"job": job, "mode": mode, "parties": n, "batches": len(sizes)}
    if mode == "local":
        start = time.perf_counter()
        est = simulate(umpc_protocol(job), load_all(parts), rng=1, batch_size=sizes)
        out["seconds"] = time.perf_counter() - start
        out["peak_mib"] = _peak_mib()
    else:
        with DaskEngine(n_workers=workers) as engine:
            engine.client.run(_warm_up_umpc)
            start = time.perf_counter()
            est = engine.run(umpc_protocol(job), parts, rng=1, server_steps="gathered")
            out["seconds"] = time.perf_counter() - start
            out["worker_peaks_mib"] = sorted(engine.client.run(_peak_mib).values())
        out["workers"] = workers
        out["peak_mib"] = max(out["worker_peaks_mib"])
        out["driver_peak_mib"] = _peak_mib()
    out["value"], out["std_error"] = est.value, est.std_error
    out["max_bits"] = int(est.cost.max_bits_per_party)
    out["ring_bits"] = int(est.diagnostics["fixed_point"]["bits"])
    return out


def _warm_up_umpc() -> None:
    import fedustat.protocols.mpc.umpc  # noqa: F401


def umpc_main(args: argparse.Namespace) -> int:
    if args.one:
        job, mode, n = args.one
        print(json.dumps(umpc_run_one(job, mode, int(float(n)), args.workers,
                                      args.umpc_batches)))
        return 0
    print(f"available memory at start: {_gib(_available_mib())}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print("| job | parties | runtime | wall s | peak MiB per worker (or process) | "
          "driver peak MiB | same release | busiest party's bits | (n - 1) l | load |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for job in args.umpc:
        for n in sorted(int(p) for p in args.parties):
            results: dict[str, dict[str, Any]] = {}
            for mode in args.modes:
                cmd = [sys.executable, __file__, "--workers", str(args.workers),
                       "--umpc-batches", str(args.umpc_batches), "--one", job, mode, str(n)]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                load = f"{os.getloadavg()[0]:.1f}"
                if proc.returncode != 0:
                    tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
                    print(f"| {job} | {n:.0e} | {mode} | failed: {tail} | | | | | | {load} |",
                          flush=True)
                    continue
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                r["load"] = load
                results[mode] = r
            for mode, r in results.items():
                same = ""
                if len(results) == 2:
                    a, b = results["engine"], results["local"]
                    same = "yes" if (a["value"], a["std_error"], a["max_bits"]) == (
                        b["value"], b["std_error"], b["max_bits"]) else "NO"
                label = (f"engine, {r['workers']} workers, {r['batches']} batches"
                         if mode == "engine" else f"in-process, {r['batches']} batches")
                peaks = " / ".join(f"{p:.0f}" for p in r.get("worker_peaks_mib",
                                                             [r["peak_mib"]]))
                driver = f"{r['driver_peak_mib']:.0f}" if "driver_peak_mib" in r else "-"
                print(f"| {job} | {n:.0e} | {label} | {r['seconds']:.1f} | {peaks} | {driver} "
                      f"| {same} | {r['max_bits']} | {(n - 1) * r['ring_bits']} | "
                      f"{r['load']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
