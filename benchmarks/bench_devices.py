"""Devices at scale: N one-record devices take part in one run against a real server process.

    python benchmarks/bench_devices.py [--protocol ldp-quantized|fedauc-rr|umpc]
                                       [--devices 1000,10000,100000] [--processes 2]
                                       [--in-flight 100] [--timeout 600] [--seed S] [--quick]
                                       [--hold SECONDS]

The server is its own process and every device opens its own TLS connection with its own
certificate (``party-<i>``), driven from ``--processes`` load processes, each an event loop
of async clients:

* ``ldp-quantized`` (one-shot reports): the server is ``fedustat collect`` (a collection
  window closing at a quorum of N reports); at most ``--in-flight`` devices per load
  process are connected at once; each checks the run's terms and sends its one report
  (``report_async``), as a phone would.
* ``fedauc-rr``, ``umpc`` (rounds in lockstep): the server is ``fedustat serve --parties
  N``; every device is a party of the run (``run_party_async``), so all N are connected at
  once for the whole run (in flight = N). U-MPC releases the AUC over its default design
  (|E| = 2n pairs, public labels).

Both servers report their peak resident memory. The table gives the wall time from the
start of the load processes to the release, devices per second (over the server's own
time), the server's peak memory, the bytes on the wire per device (frames as sent, every
round and reply, TLS records not counted) beside the payload per device the release's
cost counts, and the in-process simulator's time and value for the same job (the same
protocol on the same N records). Runs use deployment randomness unless ``--seed`` asks
for the simulator's streams; then the release must equal the simulator's, one record per
device (the "same" column).

A lockstep server holds one connection per device: the machine's limit of open files per
process (``ulimit -Hn``) bounds N for fedauc-rr and umpc, and a larger N is refused here
with that reason before anything starts. ``--hold S`` makes the lockstep devices
detached (``run_party_async(hold=S)``): a device holds no connection while it waits for
the others; it comes back on a new connection (a new TLS handshake) for each answer.

Data: generated here, skewed and tied: labels Bernoulli(0.3), scores lognormal by class,
clipped to [0, 1] and rounded to 0.01; device i's record depends on i alone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedustat.protocols import registry
from fedustat.runtime.network import (
    create_deployment,
    load_credentials,
    report_async,
    run_party_async,
)
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel

K = 16
#: Protocol options on the server's command line, per protocol (fedauc-rr adds its
#: n_clients = N); the devices build the same protocol with make_protocol.
CLI_OPTIONS = {
    "ldp-quantized": ["--statistic", "auc", "--protocol", "ldp-quantized", "--epsilon", "1",
                      "--param", f"k={K}", "--bounds", "0,1"],
    "fedauc-rr": ["--statistic", "auc", "--protocol", "fedauc-rr", "--epsilon", "1"],
    "umpc": ["--statistic", "auc", "--protocol", "umpc", "--epsilon", "1",
             "--column-bounds", "score=0,1"],
}
LOCKSTEP = ("fedauc-rr", "umpc")
#: Open files a process needs beyond one per connection (its libraries, pipes, epoll,
#: certificates being read).
SPARE_FILES = 256


def make_protocol(name: str, n: int) -> Any:
    if name == "ldp-quantized":
        return registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=K,
                             bounds=(0.0, 1.0))
    if name == "fedauc-rr":
        return registry.make("fedauc-rr", auc_kernel(), epsilon=1.0, n_clients=n)
    return registry.make("umpc", auc_kernel(), epsilon=1.0, bounds={"score": (0.0, 1.0)})


def records(first: int, count: int) -> np.ndarray:
    """Device i's record depends on i alone, so any split into load processes agrees."""
    out = np.empty((count, 2))
    for j in range(count):
        rng = np.random.default_rng([7, first + j])
        label = float(rng.random() < 0.3)
        score = min(1.0, rng.lognormal(-1.6 + 0.8 * label, 0.7))
        out[j] = (round(score, 2), label)
    return out


async def _drive(name: str, n: int, address: str, certs: Path, first: int, count: int,
                 in_flight: int, seed: int | None, timeout: float,
                 hold: float | None = None) -> dict[str, object]:
    rows = records(first, count)
    # A lockstep run needs every party connected at once; reports may queue.
    gate = asyncio.Semaphore(count if name in LOCKSTEP else in_flight)
    failures: list[tuple[float, str]] = []

    async def device(j: int) -> None:
        async with gate:
            credentials = load_credentials(certs, f"party-{first + j}")
            try:
                if name in LOCKSTEP:
                    await run_party_async(make_protocol(name, n), rows[j:j + 1], credentials,
                                          address, rng=seed, timeout=timeout, hold=hold)
                else:
                    await report_async(make_protocol(name, n), rows[j:j + 1], credentials,
                                       address, rng=seed, timeout=timeout)
            except Exception as exc:  # counted and shown, the run goes on
                failures.append((time.time(), f"party-{first + j}: {type(exc).__name__}: "
                                              f"{exc}"))

    started = time.monotonic()
    await asyncio.gather(*(device(j) for j in range(count)))
    return {"sent": count - len(failures), "failed": len(failures),
            # The earliest failure (wall clock, comparable across load processes) is the
            # cause; the later ones are usually the server's verdict on it.
            "first_failure": list(min(failures)) if failures else None,
            "seconds": time.monotonic() - started}


def client_main(args: argparse.Namespace) -> int:
    result = asyncio.run(_drive(args.protocol, args.n, args.address, Path(args.certs),
                                args.first, args.count, args.in_flight, args.seed,
                                args.timeout, args.hold))
    print(json.dumps(result), flush=True)
    return 0


def server_command(name: str, n: int, certs: Path, output: Path, seed: int | None,
                   timeout: float, server_options: Sequence[str] = ()) -> list[str]:
    """The server's command line; ``server_options``: more server options (``--run-dir
    DIR``; ``fedustat collect``'s ``--partitions``, ``--no-durable``)."""
    seeded = [] if seed is None else ["--seed", str(seed)]
    if name in LOCKSTEP:
        extra = ["--param", f"n_clients={n}"] if name == "fedauc-rr" else []
        return [sys.executable, "-m", "fedustat.cli", "serve", *CLI_OPTIONS[name], *extra,
                *seeded, "--certs", str(certs), "--parties", str(n), "--timeout",
                str(timeout), "--listen", "127.0.0.1:0", "--output", str(output),
                *server_options]
    return [sys.executable, "-m", "fedustat.cli", "collect", *CLI_OPTIONS[name], *seeded,
            "--certs", str(certs), "--window", "3600", "--quorum", str(n), "--linger", "0",
            "--listen", "127.0.0.1:0", "--output", str(output), *server_options]


def simulated(name: str, n: int, seed: int | None) -> tuple[float, float, float | None]:
    """The simulator's value on the same N records and its time: one batch, or with a
    seed the networked split (one record per device) so that the numbers must agree."""
    data = records(0, n)
    protocol = make_protocol(name, n)
    options: dict[str, Any] = {}
    if protocol.silo_is_one_party:
        options["parties"] = np.arange(n)
    if seed is not None:
        options.update(rng=seed, batch_size=[1] * n)
    tic = time.perf_counter()
    expected = simulate(protocol, data, **options)
    return time.perf_counter() - tic, float(expected.value), expected.std_error


def run_once(name: str, n: int, certs: Path, processes: int, in_flight: int, scratch: Path,
             seed: int | None, timeout: float, server_options: Sequence[str] = (),
             hold: float | None = None) -> dict[str, object]:
    """One run of ``n`` devices. ``seed``: the devices and the server draw from the
    simulator's streams (a study; the release then equals the simulator's for that seed).
    ``server_options``: more options of the server; without ``--run-dir`` or
    ``--no-durable`` its run directory is a new one in ``scratch`` (removed with it: a
    run of 10^5 devices writes about 150 MB)."""
    output = scratch / f"release-{name}-{n}.json"
    logs = scratch / f"server-{name}-{n}.log"
    if not {"--run-dir", "--no-durable"} & set(server_options):
        server_options = [*server_options, "--run-dir",
                          str(tempfile.mkdtemp(prefix=f"run-{n}-", dir=scratch))]
    with open(logs, "w") as server_log:
        server = subprocess.Popen(server_command(name, n, certs, output, seed, timeout,
                                                 server_options),
                                  stdout=subprocess.PIPE, stderr=server_log, text=True,
                                  start_new_session=True)
    clients: list[subprocess.Popen] = []
    try:
        line = server.stdout.readline()
        match = re.search(r"listening on port (\d+)", line)
        if not match:
            raise RuntimeError(f"the server did not start: {line!r} {logs.read_text()}")
        started = time.monotonic()
        for share in np.array_split(np.arange(n), processes):
            if not share.size:
                continue
            command = [sys.executable, __file__, "--client", "--protocol", name, "--n",
                       str(n), "--address", f"127.0.0.1:{match.group(1)}", "--certs",
                       str(certs), "--first", str(int(share[0])), "--count", str(share.size),
                       "--in-flight", str(in_flight), "--timeout", str(timeout)]
            if hold is not None:
                command += ["--hold", str(hold)]
            if seed is not None:
                command += ["--seed", str(seed)]
            clients.append(subprocess.Popen(command, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True,
                                            start_new_session=True))
        driven = []
        for client in clients:
            out, err = client.communicate(timeout=3 * timeout + 600)
            if client.returncode != 0:
                raise RuntimeError(f"a load process failed: {err[-2000:]}")
            driven.append(json.loads(out.strip().splitlines()[-1]))
        failed = sum(int(d["failed"]) for d in driven)
        first_failure = min((tuple(d["first_failure"]) for d in driven
                             if d["first_failure"]), default=(0.0, None))[1]
        try:
            # Every device has finished or given up: the release comes now (a lockstep
            # server has already stopped if a party failed; a window closes at its quorum
            # unless some devices failed, and then never will).
            server.communicate(timeout=600 if failed == 0 else 10)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{failed} of {n} devices failed; the first: {first_failure}"
                               ) from None
        wall = time.monotonic() - started
        if server.returncode != 0:
            raise RuntimeError(f"the server failed: {logs.read_text()[-2000:]}"
                               + (f"; the first device failure: {first_failure}"
                                  if first_failure else ""))
    finally:
        for proc in [server, *clients]:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)
    release = json.loads(output.read_text())
    sim_seconds, sim_value, sim_std = simulated(name, n, seed)
    if name in LOCKSTEP:
        wire, payload = release["wire_bytes"] / n, release["total_bits"] / 8 / n
    else:
        wire = release["wire_bytes"] / release["n_reports"]
        payload = release["payload_bytes"] / release["n_reports"]
    return {"devices": n, "wall": wall, "rate": n / float(release["seconds"]),
            "rss": release["server_peak_rss_mib"], "wire": wire, "payload": payload,
            "failed": failed, "first_failure": first_failure, "value": release["value"],
            "std": release["std_error"], "sim_seconds": sim_seconds, "sim_value": sim_value,
            "sim_std": sim_std, "same": "-" if seed is None else
            ("yes" if release["value"] == sim_value else "NO")}


def open_files_for(name: str, sizes: list[int], processes: int) -> str | None:
    """Raise this process's open-files limit to the hard one (the server and the load
    processes inherit it); why the largest size cannot run, if it cannot."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if name not in LOCKSTEP or hard == resource.RLIM_INFINITY:
        return None
    n = max(sizes)
    if n + SPARE_FILES > hard:
        return (f"{name} at {n} devices: a lockstep run holds every device connected to "
                f"one server process at once, which needs about {n + SPARE_FILES} open "
                f"files, and this machine allows {hard} per process (ulimit -Hn); use at "
                f"most {hard - SPARE_FILES} devices")
    per_process = math.ceil(n / processes) + SPARE_FILES
    if per_process > hard:
        return (f"{name} at {n} devices: each of the {processes} load processes would hold "
                f"{math.ceil(n / processes)} connections, more than the {hard} open files "
                f"allowed per process (ulimit -Hn); give more --processes")
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--protocol", choices=sorted(CLI_OPTIONS), default="ldp-quantized")
    parser.add_argument("--devices", default=None,
                        help="comma-separated sizes (default: 1000,10000,100000; umpc: "
                             "100,1000)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=100,
                        help="devices connected at once per load process (one-shot "
                             "reports only; a lockstep run connects all of them)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="the run's stage timeout (lockstep) and each device's wait")
    parser.add_argument("--seed", type=int, default=None,
                        help="simulation randomness: the release must equal the "
                             "simulator's (default: deployment randomness)")
    parser.add_argument("--quick", action="store_true", help="200 and 1000 devices "
                        "(umpc: 50 and 100)")
    parser.add_argument("--hold", type=float, default=None,
                        help="lockstep devices detached: the server holds each call at "
                             "most this many seconds; a device reconnects for its answer")
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--certs", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        return client_main(args)
    name = args.protocol
    if args.quick:
        sizes = [50, 100] if name == "umpc" else [200, 1000]
    elif args.devices:
        sizes = [int(s) for s in args.devices.split(",")]
    else:
        sizes = [100, 1000] if name == "umpc" else [1000, 10000, 100000]
    if args.processes < 1 or min(sizes) < 2:
        parser.error("--processes must be >= 1 and every size >= 2 devices")
    refused = open_files_for(name, sizes, args.processes)
    if refused and args.hold is None:  # detached devices hold no connection while waiting
        parser.error(refused)
    with tempfile.TemporaryDirectory(prefix="fedustat-devices-") as tmp:
        scratch = Path(tmp)
        tic = time.perf_counter()
        certs = create_deployment(scratch / "certs", max(sizes))
        print(f"certificates for {max(sizes)} devices: {time.perf_counter() - tic:.1f} s",
              flush=True)
        in_flight = (f"lockstep devices detached (hold {args.hold:g} s)"
                     if name in LOCKSTEP and args.hold is not None
                     else "all devices connected at once (lockstep)" if name in LOCKSTEP
                     else f"{args.in_flight} devices in flight each")
        print(f"{name}; load average before: {os.getloadavg()[0]:.2f}; {args.processes} "
              f"load processes, {in_flight}; "
              + ("deployment randomness" if args.seed is None else f"seed {args.seed}"),
              flush=True)
        rate = "parties/s" if name in LOCKSTEP else "reports/s"
        print(f"| devices | wall s | {rate} | server peak MiB | wire B/device | "
              "payload B/device | failed | release (s.e.) | simulator s | simulator value "
              "| same | load avg |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            row = run_once(name, n, certs, args.processes, args.in_flight, scratch,
                           args.seed, args.timeout, hold=args.hold)
            std = "-" if row["std"] is None else f"{row['std']:.4f}"
            print(f"| {n} | {row['wall']:.1f} | {row['rate']:.0f} | {row['rss']:.0f} | "
                  f"{row['wire']:.0f} | {row['payload']:.0f} | {row['failed']} | "
                  f"{row['value']:.4f} ({std}) | {row['sim_seconds']:.2f} | "
                  f"{row['sim_value']:.4f} | {row['same']} | {os.getloadavg()[0]:.2f} |",
                  flush=True)
            if row["first_failure"]:
                print(f"  first failure: {row['first_failure']}", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
