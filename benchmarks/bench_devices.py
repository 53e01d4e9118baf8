"""Devices at scale: N one-record devices report once to a real collection server.

    python benchmarks/bench_devices.py [--devices 1000,10000,100000] [--processes 2]
                                       [--in-flight 100] [--quick]

The server is its own process (``fedustat collect``: the asyncio gRPC server with mutual
TLS, closing at a quorum of N reports, which reports its peak resident memory). The
devices are driven from ``--processes`` load processes, each an event loop of async
clients with at most ``--in-flight`` devices connected at once; every device opens its
own TLS connection with its own certificate (``party-<i>``), checks the run's terms and
sends its one report, as a phone would. The table gives the wall time from the server's
start to its release, reports per second, the server's peak memory, the bytes of a report
frame beside its bit-packed payload (TLS records not counted), and the in-process
simulator's time for the same job (the same protocol on the same N records, one batch).
Runs use deployment randomness (no seed), as a deployment would; the release's value
is shown beside the simulator's on the same data.

Data: generated here, skewed and tied: labels Bernoulli(0.3), scores lognormal by class,
clipped to [0, 1] and rounded to 0.01.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fedustat.protocols import registry
from fedustat.runtime.network import create_deployment, load_credentials, report_async
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel

K = 16
CLI_OPTIONS = ["--statistic", "auc", "--protocol", "ldp-quantized", "--epsilon", "1",
               "--param", f"k={K}", "--bounds", "0,1"]


def make_protocol() -> object:
    return registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=K, bounds=(0.0, 1.0))


def records(first: int, count: int) -> np.ndarray:
    """Device i's record depends on i alone, so any split into load processes agrees."""
    out = np.empty((count, 2))
    for j in range(count):
        rng = np.random.default_rng([7, first + j])
        label = float(rng.random() < 0.3)
        score = min(1.0, rng.lognormal(-1.6 + 0.8 * label, 0.7))
        out[j] = (round(score, 2), label)
    return out


async def _drive(address: str, certs: Path, first: int, count: int, in_flight: int,
                 seed: int | None = None) -> dict[str, object]:
    rows = records(first, count)
    gate = asyncio.Semaphore(in_flight)
    failures: list[str] = []

    async def device(j: int) -> None:
        async with gate:
            try:
                await report_async(make_protocol(), rows[j:j + 1],
                                   load_credentials(certs, f"party-{first + j}"), address,
                                   rng=seed, timeout=600.0)
            except Exception as exc:  # counted and shown, the run goes on
                failures.append(f"{type(exc).__name__}: {exc}")

    started = time.monotonic()
    await asyncio.gather(*(device(j) for j in range(count)))
    return {"sent": count - len(failures), "failed": len(failures),
            "first_failure": failures[0] if failures else None,
            "seconds": time.monotonic() - started}


def client_main(args: argparse.Namespace) -> int:
    result = asyncio.run(_drive(args.address, Path(args.certs), args.first, args.count,
                                args.in_flight, args.seed))
    print(json.dumps(result), flush=True)
    return 0


def run_once(n: int, certs: Path, processes: int, in_flight: int, scratch: Path,
             seed: int | None = None, store: Path | None = None) -> dict[str, object]:
    """One window of ``n`` devices. ``seed``: the devices and the server draw from the
    simulator's streams (a study; the release then equals the simulator's for that seed).
    ``store``: the server writes the reports to this run directory and releases from it
    on a local Dask cluster (``fedustat collect --store``)."""
    output = scratch / f"release-{n}.json"
    extra = [*(["--seed", str(seed)] if seed is not None else []),
             *(["--store", str(store)] if store is not None else [])]
    server = subprocess.Popen(
        [sys.executable, "-m", "fedustat.cli", "collect", *CLI_OPTIONS, "--certs", str(certs),
         "--window", "3600", "--quorum", str(n), "--linger", "0", "--listen",
         "127.0.0.1:0", "--output", str(output), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    clients: list[subprocess.Popen] = []
    try:
        line = server.stdout.readline()
        match = re.search(r"listening on port (\d+)", line)
        if not match:
            raise RuntimeError(f"the server did not start: {line!r} {server.stderr.read()}")
        started = time.monotonic()
        shares = np.array_split(np.arange(n), processes)
        for share in shares:
            clients.append(subprocess.Popen(
                [sys.executable, __file__, "--client", "--address",
                 f"127.0.0.1:{match.group(1)}", "--certs", str(certs), "--first",
                 str(int(share[0])), "--count", str(share.size), "--in-flight",
                 str(in_flight), *(["--seed", str(seed)] if seed is not None else [])],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True))
        driven = []
        for client in clients:
            out, err = client.communicate(timeout=3600)
            if client.returncode != 0:
                raise RuntimeError(f"a load process failed: {err[-2000:]}")
            driven.append(json.loads(out.strip().splitlines()[-1]))
        failed = sum(int(d["failed"]) for d in driven)
        try:
            # Every device has reported or given up: the quorum closes the window now,
            # unless some failed (then it never will).
            _, err = server.communicate(timeout=600 if failed == 0 else 5)
        except subprocess.TimeoutExpired:
            first = next(d["first_failure"] for d in driven if d["first_failure"])
            raise RuntimeError(f"{failed} of {n} devices failed; the first: {first}"
                               ) from None
        wall = time.monotonic() - started
        if server.returncode != 0:
            raise RuntimeError(f"the server failed: {err[-2000:]}")
    finally:
        for proc in [server, *clients]:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)
    release = json.loads(output.read_text())
    data = records(0, n)
    tic = time.perf_counter()
    expected = (simulate(make_protocol(), data) if seed is None else
                simulate(make_protocol(), data, rng=seed, batch_size=[1] * n))
    sim_seconds = time.perf_counter() - tic
    return {"devices": n, "wall": wall, "server": float(release["seconds"]),
            "rate": n / float(release["seconds"]), "rss": release["server_peak_rss_mib"],
            "wire": release["wire_bytes"] / release["n_reports"],
            "payload": release["payload_bytes"] / release["n_reports"],
            "failed": failed,
            "first_failure": next((d["first_failure"] for d in driven
                                   if d["first_failure"]), None),
            "value": release["value"], "std": release["std_error"],
            "sim_seconds": sim_seconds, "sim_value": expected.value,
            "sim_std": expected.std_error}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="1000,10000,100000")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="200 and 1000 devices")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--certs", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        return client_main(args)
    sizes = [200, 1000] if args.quick else [int(s) for s in args.devices.split(",")]
    with tempfile.TemporaryDirectory(prefix="fedustat-devices-") as tmp:
        scratch = Path(tmp)
        tic = time.perf_counter()
        certs = create_deployment(scratch / "certs", max(sizes))
        print(f"certificates for {max(sizes)} devices: {time.perf_counter() - tic:.1f} s",
              flush=True)
        print(f"load average before: {os.getloadavg()[0]:.2f}; {args.processes} load "
              f"processes, {args.in_flight} devices in flight each", flush=True)
        print("| devices | wall s | reports/s | server peak MiB | frame B | payload B | "
              "failed | release (s.e.) | simulator s | simulator value |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            row = run_once(n, certs, args.processes, args.in_flight, scratch)
            print(f"| {n} | {row['wall']:.1f} | {row['rate']:.0f} | {row['rss']:.0f} | "
                  f"{row['wire']:.0f} | {row['payload']:.0f} | {row['failed']} | "
                  f"{row['value']:.4f} ({row['std']:.4f}) | {row['sim_seconds']:.2f} | "
                  f"{row['sim_value']:.4f} |", flush=True)
            if row["first_failure"]:
                print(f"  first failure: {row['first_failure']}", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
