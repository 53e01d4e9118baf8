"""A networked deployment on localhost: wall time, bytes on the wire, server memory.

    python benchmarks/bench_deployment.py [--quick] [--silos 10,100,1000] [--protocols umpc]
                                          [--timeout 900] [--silo-processes 4]

The server runs as its own process (`fedustat serve`, which reports its peak resident
memory); the silos run as threads of this process (or, with ``--silo-processes P``, of P
processes), each with its own TLS channel and 10 rows (umpc: one record per silo, see
CASES). Every run is seeded, so its release must
equal the in-process simulator's on the same data (checked in the last column). Bytes on
the wire are the frames as sent (framing, JSON headers, packing and sealing included, TLS
records not), beside the payload the release's cost counts.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np

from fedustat.protocols import registry
from fedustat.runtime.network import create_deployment, load_credentials, run_party
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, gini_kernel

ROWS_PER_SILO = 10
SEED = 1

# name -> (CLI options, protocol factory for the silos and the simulator, columns used)
CASES = {
    "ldp-quantized": (["--statistic", "gini", "--bounds", "0,1", "--param", "k=256"],
                      lambda silos: registry.make("ldp-quantized", gini_kernel((0.0, 1.0)),
                                                  epsilon=1.0, k=256,
                                                  bounds=(0.0, 1.0)), 1),
    "fedauc-rr": (["--statistic", "auc"],
                  lambda silos: registry.make("fedauc-rr", auc_kernel(), epsilon=1.0,
                                              n_clients=silos), 2),
    # U-MPC's AUC with public labels (FSS comparisons, M_HF noise, |E| = 2n BalancedSamp).
    # One record per silo: U-MPC's parties are records, so a silo of 10 rows would be 10
    # parties and 1000 silos 10^4 parties (a few minutes more of relay rounds).
    "umpc": (["--statistic", "auc", "--column-bounds", "score=0,1"],
             lambda silos: registry.make("umpc", auc_kernel(), epsilon=1.0,
                                         bounds={"score": (0.0, 1.0)}), 2),
}

#: Rows per silo where a protocol needs another number than ROWS_PER_SILO.
ROWS = {"umpc": 1}


def run_silos(name: str, silos: int, certs: Path, address: str, indices: list[int],
              parts: list[np.ndarray], timeout: float) -> None:
    """Silos ``indices`` (rows ``parts``) as threads of this process."""
    make = CASES[name][1]
    errors: list[BaseException] = []

    def one(i: int, rows: np.ndarray) -> None:
        try:
            run_party(make(silos), rows, load_credentials(certs, f"party-{i}"), address,
                      rng=SEED, timeout=timeout)
        except BaseException as exc:  # reported by the process's exit code
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, rows))
               for i, rows in zip(indices, parts, strict=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def deployment(certs: Path, name: str, silos: int, data: np.ndarray,
               timeout: float = 120.0, processes: int = 1) -> dict:
    options, make, columns = CASES[name]
    if name == "fedauc-rr":
        options = [*options, "--param", f"n_clients={silos}"]
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "release.json"
        server = subprocess.Popen(
            [sys.executable, "-m", "fedustat.cli", "serve", "--protocol", name, "--epsilon",
             "1", "--seed", str(SEED), *options, "--certs", str(certs), "--parties",
             str(silos), "--listen", "127.0.0.1:0", "--timeout", str(timeout), "--output",
             str(output)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        try:
            port = re.search(r"port (\d+)", server.stdout.readline()).group(1)
            parts = np.array_split(data[:, :columns], silos)
            started = time.perf_counter()
            address, wait = f"127.0.0.1:{port}", max(300.0, timeout)
            if processes == 1:
                run_silos(name, silos, certs, address, list(range(silos)), parts, wait)
            else:
                # Silos spread over processes: one Python process's threads share one
                # interpreter lock, which bounds a thousand silos' work more than the
                # server does.
                spawn = multiprocessing.get_context("spawn")
                groups = np.array_split(np.arange(silos), processes)
                workers = [spawn.Process(target=run_silos, args=(
                    name, silos, certs, address, g.tolist(), [parts[i] for i in g], wait))
                    for g in groups if g.size]
                for worker in workers:
                    worker.start()
                for worker in workers:
                    worker.join()
            _, err = server.communicate(timeout=max(300.0, timeout))
            wall = time.perf_counter() - started
            if server.returncode != 0:
                raise RuntimeError(err)
            release = json.loads(output.read_text())
        finally:
            if server.poll() is None:
                server.kill()
    tracemalloc.start()
    start = time.perf_counter()
    if make(silos).silo_is_one_party:
        owner = np.repeat(np.arange(silos), [len(p) for p in parts])
        expected = simulate(make(silos), data[:, :columns], rng=SEED, parties=owner,
                            batch_size=[1] * silos)
    else:
        expected = simulate(make(silos), data[:, :columns], rng=SEED,
                            batch_size=[len(p) for p in parts])
    simulated = time.perf_counter() - start
    simulated_peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return {"wall": wall, "wire": release["wire_bytes"],
            "payload": release["total_bits"] / 8, "rss": release["server_peak_rss_mib"],
            "simulated": simulated, "simulated_peak": simulated_peak,
            "same": release["value"] == expected.value}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 and 100 silos only")
    parser.add_argument("--silos", default=None, help="comma-separated silo counts")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds the server waits for a join or a round (a loaded "
                             "machine needs more at 1000 silos)")
    parser.add_argument("--silo-processes", type=int, default=1,
                        help="processes the silos are spread over (threads within each)")
    parser.add_argument("--protocols", default=",".join(CASES),
                        help=f"comma-separated, from {', '.join(CASES)}")
    args = parser.parse_args()
    counts = ([int(c) for c in args.silos.split(",")] if args.silos
              else [10, 100] if args.quick else [10, 100, 1000])
    certs = Path(tempfile.mkdtemp(prefix="fedustat-bench-deploy-"))
    create_deployment(certs, max(counts))
    rng = np.random.default_rng(0)
    print(f"Networked runs on localhost, {ROWS_PER_SILO} rows per silo (umpc: "
          f"{ROWS['umpc']}), seed {SEED}; server in its own process, silos as threads of "
          f"{args.silo_processes} process(es)")
    print(f"{'protocol':>14} | {'silos':>5} | {'wall s':>7} | {'wire KiB':>9} | "
          f"{'payload KiB':>11} | {'server MiB':>10} | {'sim s':>6} | {'sim MiB':>7} | same")
    for name in args.protocols.split(","):
        if name not in CASES:
            parser.error(f"unknown protocol {name!r}; choose from {', '.join(CASES)}")
        for silos in counts:
            n = silos * ROWS.get(name, ROWS_PER_SILO)
            data = np.column_stack([rng.beta(2, 5, n), (rng.random(n) < 0.4).astype(float)])
            row = deployment(certs, name, silos, data, args.timeout,
                             min(args.silo_processes, silos))
            print(f"{name:>14} | {silos:>5} | {row['wall']:>7.2f} | {row['wire'] / 1024:>9.1f} | "
                  f"{row['payload'] / 1024:>11.1f} | {row['rss']:>10.0f} | "
                  f"{row['simulated']:>6.3f} | {row['simulated_peak']:>7.1f} | "
                  f"{'yes' if row['same'] else 'NO'}")


if __name__ == "__main__":
    main()
