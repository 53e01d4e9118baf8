"""The cost of durability: a collection window with and without its run database.

    python benchmarks/bench_durability.py [--devices 1000,10000] [--processes 2]
                                          [--in-flight 100] [--seed 7]

For each N, ``fedustat collect`` runs as its own process twice, driven by
``bench_devices.py``'s load processes (``run_once``: N real devices, each its own
certificate and TLS connection, at most ``--in-flight`` connected per load process, each
sending its one ldp-quantized report with ``report_async``):

* **durable** (the default): every accepted report (identity, frame, digest) is
  group-committed to the run directory's SQLite database (WAL, ``synchronous=FULL``,
  batches of ~10 ms) before its device is acknowledged;
* **not durable** (``--no-durable``): the identities in a temporary database
  (``synchronous=OFF``), the reports in memory only, acknowledged at once.

The table gives the wall time from the start of the load processes to the release,
reports per second over the server's own time, the server's peak resident memory, the
failures, whether the release equals the simulator's for the seed, the run database's
size and the load average (1 min) at the end of the row. The machine's load is printed
before and after: other processes on it change the rates.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_devices

MODES = (("durable", False), ("not durable", True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", default="1000,10000",
                        help="comma-separated sizes (default 1000,10000)")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7,
                        help="simulation randomness, so that each release can be checked "
                             "against the simulator's")
    args = parser.parse_args()
    sizes = [int(float(s)) for s in args.devices.split(",")]
    with tempfile.TemporaryDirectory(prefix="fedustat-durability-") as tmp:
        scratch = Path(tmp)
        tic = time.perf_counter()
        certs = bench_devices.create_deployment(scratch / "certs", max(sizes))
        print(f"certificates for {max(sizes)} devices: {time.perf_counter() - tic:.1f} s; "
              f"load average before: {os.getloadavg()[0]:.2f}; {args.processes} load "
              f"processes, {args.in_flight} devices in flight each; seed {args.seed}",
              flush=True)
        print("| devices | durability | wall s | reports/s | server peak MiB | failed | "
              "= simulator | run database MiB | load avg |")
        print("|---|---|---|---|---|---|---|---|---|")
        for n in sizes:
            for label, off in MODES:
                run_dir = scratch / f"run-{n}-{'off' if off else 'on'}"
                options = ["--no-durable"] if off else ["--run-dir", str(run_dir)]
                row = bench_devices.run_once("ldp-quantized", n, certs, args.processes,
                                             args.in_flight, scratch, args.seed, 600.0,
                                             server_options=options)
                database = run_dir / "run.sqlite"
                size = "-" if off else (
                    f"{sum(p.stat().st_size for p in run_dir.glob('run.sqlite*')) / 2**20:.1f}"
                    if database.exists() else "?")
                print(f"| {n} | {label} | {row['wall']:.1f} | {row['rate']:.0f} | "
                      f"{row['rss']:.0f} | {row['failed']} | {row['same']} | {size} | "
                      f"{os.getloadavg()[0]:.2f} |", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
