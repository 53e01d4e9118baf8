"""Networked runs over mutually authenticated gRPC: exchange latency and whole runs.

    python benchmarks/bench_network.py [--quick]

Table 1: one request/reply over the transport (TLS 1.3, client certificates) for frames of
several sizes, median of repeated calls on loopback. Table 2: whole runs, server and
parties as threads of this process with their own channels, against the in-process
simulator on the same data and seed (the released value must agree).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from concurrent import futures

import grpc
import numpy as np

from fedustat.protocols import registry
from fedustat.runtime.network.certs import create_deployment, load_credentials
from fedustat.runtime.network.party import run_party
from fedustat.runtime.network.server import serve
from fedustat.runtime.network.service import CHANNEL_OPTIONS
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, gini_kernel, kendall_tau_kernel


def exchange_latency(certs: str, sizes: list[int], repeats: int) -> list[tuple[int, float]]:
    server_creds = load_credentials(certs, "server")
    party = load_credentials(certs, "party-0")
    handler = grpc.method_handlers_generic_handler(
        "bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(lambda r, c: r)})
    server = grpc.server(futures.ThreadPoolExecutor(2), options=CHANNEL_OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
        [(server_creds.key, server_creds.certificate)], root_certificates=server_creds.ca,
        require_client_auth=True))
    server.start()
    channel = grpc.secure_channel(f"127.0.0.1:{port}", grpc.ssl_channel_credentials(
        party.ca, party.key, party.certificate), options=CHANNEL_OPTIONS)
    echo = channel.unary_unary("/bench.Echo/Echo")
    rows = []
    for size in sizes:
        payload = b"\x00" * size
        echo(payload, timeout=30)
        times = []
        for _ in range(repeats if size < 1 << 20 else max(5, repeats // 10)):
            start = time.perf_counter()
            echo(payload, timeout=30)
            times.append(time.perf_counter() - start)
        rows.append((size, statistics.median(times)))
    channel.close()
    server.stop(0)
    return rows


def whole_run(certs: str, name: str, kernel, params: dict, data: np.ndarray, silos: int
              ) -> tuple[float, float, float, float]:
    def make():
        return registry.make(name, kernel, epsilon=1.0, **params)

    parts = np.array_split(data, silos)
    ready, port, out = threading.Event(), {}, {}

    def server() -> None:
        out["run"] = serve(make(), silos, load_credentials(certs, "server"), rng=1,
                           timeout=120, on_ready=lambda p: (port.update(p=p), ready.set()))

    start = time.perf_counter()
    thread = threading.Thread(target=server)
    thread.start()
    ready.wait()
    parties = [threading.Thread(target=run_party, args=(
        make(), parts[i], load_credentials(certs, f"party-{i}"), f"127.0.0.1:{port['p']}"),
        kwargs={"rng": 1, "timeout": 120}) for i in range(silos)]
    for p in parties:
        p.start()
    for p in parties:
        p.join()
    thread.join()
    networked = time.perf_counter() - start
    start = time.perf_counter()
    if make().silo_is_one_party:
        owner = np.repeat(np.arange(silos), [len(p) for p in parts])
        expected = simulate(make(), data, rng=1, parties=owner, batch_size=[1] * silos)
    else:
        expected = simulate(make(), data, rng=1, batch_size=[len(p) for p in parts])
    simulated = time.perf_counter() - start
    return out["run"].estimate.value, expected.value, networked, simulated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller runs")
    args = parser.parse_args()
    certs = tempfile.mkdtemp(prefix="fedustat-bench-certs-")
    silos = 4
    create_deployment(certs, 200)
    repeats = 50 if args.quick else 300
    print("Table 1. One exchange over gRPC with mutual TLS (loopback, median)")
    print(f"{'frame bytes':>12} | {'ms':>8}")
    for size, seconds in exchange_latency(certs, [100, 10_000, 1_000_000], repeats):
        print(f"{size:>12} | {seconds * 1e3:>8.3f}")
    n = 20_000 if args.quick else 200_000
    rng = np.random.default_rng(0)
    labelled = np.column_stack([rng.random(n), (rng.random(n) < 0.4).astype(float)])
    runs = [("ldp-quantized", gini_kernel((0.0, 1.0)), {"k": 256}, labelled[:, :1]),
            ("fedauc-rr", auc_kernel(), {"n_clients": silos}, labelled),
            ("central-laplace", auc_kernel(), {}, labelled)]
    print(f"\nTable 2. Whole runs, {silos} silos holding {n} rows in all (seed 1)")
    print(f"{'protocol':>16} | {'networked s':>11} | {'simulated s':>11} | same value")
    for name, kernel, params, data in runs:
        got, expected, networked, simulated = whole_run(certs, name, kernel, params, data,
                                                        silos)
        same = "yes" if got == expected else f"NO ({got} vs {expected})"
        print(f"{name:>16} | {networked:>11.3f} | {simulated:>11.3f} | {same}")

    # Secure: pairs of parties run 2PC, their messages relayed end-to-end encrypted.
    n_secure = 400 if args.quick else 4000
    pairs = np.column_stack([rng.random(n_secure), rng.random(n_secure)])
    print(f"\nTable 3. pairs-2pc (Kendall, P = 2, FSS comparisons), {silos} silos")
    print(f"{'n':>6} | {'networked s':>11} | {'simulated s':>11} | same value")
    got, expected, networked, simulated = whole_run(
        certs, "pairs-2pc", kendall_tau_kernel("a"), {"P": 2, "comparison": "fss"}, pairs,
        silos)
    same = "yes" if got == expected else f"NO ({got} vs {expected})"
    print(f"{n_secure:>6} | {networked:>11.3f} | {simulated:>11.3f} | {same}")

    # How the one-thread-per-silo server scales with the number of silos.
    print("\nTable 4. ldp-quantized (Gini, k = 256), 10 rows per silo, by number of silos")
    print(f"{'silos':>6} | {'networked s':>11} | {'simulated s':>11} | same value")
    for count in ((10, 50) if args.quick else (10, 50, 200)):
        data = labelled[:10 * count, :1]
        got, expected, networked, simulated = whole_run(
            certs, "ldp-quantized", gini_kernel((0.0, 1.0)), {"k": 256}, data, count)
        same = "yes" if got == expected else f"NO ({got} vs {expected})"
        print(f"{count:>6} | {networked:>11.3f} | {simulated:>11.3f} | {same}")


if __name__ == "__main__":
    main()
