"""Bytes on the wire beside the payload they carry: one party's frames, and small networked runs.

    python benchmarks/bench_framing.py [--no-network] [--silos 10,100]

First table: a seeded simulation of each protocol with one party per batch (as one
device or one silo would send it); every message party 0 sends is encoded as the
transport encodes it (:func:`fedustat.runtime.wire.encode` for a message to the server,
:func:`fedustat.runtime.network.relay.seal_rows` with real pairwise keys for rows
addressed to other parties) and set beside its bit-packed payload (the bits the cost
accounting counts, rounded up to whole bytes per field).

Second table: small networked runs over gRPC + mutual TLS on loopback (server and silos as
threads of this process), with the server's own count of the bytes of every frame and
reply (``ServerRun.wire_bytes``, TLS records not included) over the release's payload
(``ServerRun.framing_overhead``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from fedustat.protocols import registry
from fedustat.protocols.base import Message, Protocol, Role
from fedustat.runtime.network import create_deployment, load_credentials, run_party
from fedustat.runtime.network.e2e import PeerKeys
from fedustat.runtime.network.relay import seal_rows
from fedustat.runtime.network.server import serve
from fedustat.runtime.network.service import fingerprint
from fedustat.runtime.simulate import simulate_run
from fedustat.runtime.wire import Envelope, encode, field_bytes
from fedustat.stats import auc_kernel, gini_kernel

SEED = 3
RUN = f"run-{int(time.time() * 1000):x}"  # the server's form of a run id
GINI = gini_kernel((0.0, 1.0))


def labelled(n: int) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    return np.column_stack([rng.random(n), (rng.random(n) < 0.4).astype(float)])


def integer_labelled(n: int) -> np.ndarray:
    rng = np.random.default_rng(SEED)
    return np.column_stack([rng.integers(0, 16, n).astype(float),
                            (rng.random(n) < 0.4).astype(float)])


# name -> (protocol factory, data, rows per party)
CASES: dict[str, tuple[Callable[[], Protocol], np.ndarray, int]] = {
    "ldp-quantized": (lambda: registry.make("ldp-quantized", GINI, epsilon=1.0, k=8),
                      labelled(200)[:, :1], 1),
    "ldp-tree": (lambda: registry.make("ldp-tree", auc_kernel(), epsilon=1.0, d=16),
                 integer_labelled(200), 1),
    "ldp-ghazi": (lambda: registry.make("ldp-ghazi", GINI, epsilon=1.0, k=8),
                  labelled(200)[:, :1], 1),
    "central-laplace": (lambda: registry.make("central-laplace", auc_kernel(), epsilon=1.0),
                        labelled(200), 1),
    "fedauc-rr": (lambda: registry.make("fedauc-rr", auc_kernel(), epsilon=1.0,
                                        n_clients=10), labelled(200), 20),
    "umpc": (lambda: registry.make("umpc", auc_kernel(), epsilon=1.0,
                                   bounds={"score": (0.0, 1.0)}), labelled(12), 1),
}


def _keys(n: int, own: int, mark: str) -> PeerKeys:
    private = [ec.generate_private_key(ec.SECP256R1()) for _ in range(n)]
    pem = private[own].private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())
    return PeerKeys(own, pem, [k.public_key() for k in private], mark, RUN)


def party_frames(name: str) -> dict[str, Any]:
    """Party 0's frames in a seeded simulation of ``name``: bytes and payload bytes."""
    make, data, rows = CASES[name]
    protocol = make()
    mark = fingerprint(protocol)
    sent: list[Message] = []

    def capture(message: Message) -> Message:
        if message.sender is Role.PARTY and message.parties is not None \
                and len(message.parties) and np.all(np.asarray(message.parties) == 0):
            sent.append(message)
        return message

    n_parties = len(data) // rows
    simulate_run(protocol, data, rng=SEED, batch_size=[1] * n_parties, relay=capture)
    bounds = np.arange(n_parties + 1)
    keys = _keys(n_parties, 0, mark) if any(m.is_peer for m in sent) else None
    wire = payload = 0
    for round_, message in enumerate(sent):
        if message.is_peer:
            frame = seal_rows(message, keys, bounds, protocol=mark, run=RUN, round_=round_,
                              identity="party-0")
            payload += (int(message.payload_bits_per_row().sum()) + 7) // 8
        else:
            frame = encode(Envelope(mark, RUN, round_, "party", "party-0", message))
            payload += sum(field_bytes(message).values())
        wire += len(frame)
    return {"rows": rows, "frames": len(sent), "wire": wire, "payload": payload}


# name -> (protocol factory for a number of silos, rows per silo)
NETWORK_CASES: dict[str, tuple[Callable[[int], Protocol], int]] = {
    "ldp-quantized": (lambda silos: registry.make("ldp-quantized", GINI, epsilon=1.0, k=8),
                      10),
    "fedauc-rr": (lambda silos: registry.make("fedauc-rr", auc_kernel(), epsilon=1.0,
                                              n_clients=silos), 10),
    # U-MPC's parties are records: one record per silo.
    "umpc": (lambda silos: registry.make("umpc", auc_kernel(), epsilon=1.0,
                                         bounds={"score": (0.0, 1.0)}), 1),
}


def networked(certs: Path, name: str, silos: int) -> Any:
    """A seeded networked run of ``name``: server and silos as threads (own TLS each)."""
    factory, rows = NETWORK_CASES[name]
    data = labelled(silos * rows)
    if name == "ldp-quantized":
        data = data[:, :1]
    parts = np.array_split(data, silos)
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            outcome["server"] = serve(factory(silos), silos, load_credentials(certs, "server"),
                                      rng=SEED, timeout=120.0,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:  # reported below
            outcome["server"] = exc
            ready.set()

    def party(i: int) -> None:
        run_party(factory(silos), parts[i], load_credentials(certs, f"party-{i}"),
                  f"127.0.0.1:{port['p']}", rng=SEED, timeout=120.0)

    main = threading.Thread(target=server)
    main.start()
    ready.wait(60)
    threads = [threading.Thread(target=party, args=(i,)) for i in range(silos)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    main.join()
    if isinstance(outcome["server"], Exception):
        raise outcome["server"]
    return outcome["server"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-network", action="store_true",
                        help="only the first table (no gRPC runs)")
    parser.add_argument("--silos", default="10",
                        help="comma-separated silo counts of the networked runs")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; seed {SEED}")
    print("One party's frames (party 0 of a seeded simulation, every round it sends)")
    print(f"{'protocol':>16} | {'rows':>4} | {'frames':>6} | {'wire B':>7} | "
          f"{'payload B':>9} | {'wire/payload':>12} | {'beyond payload B':>16}")
    for name in CASES:
        row = party_frames(name)
        print(f"{name:>16} | {row['rows']:>4} | {row['frames']:>6} | {row['wire']:>7} | "
              f"{row['payload']:>9} | {row['wire'] / row['payload']:>12.1f} | "
              f"{row['wire'] - row['payload']:>16}")
    if args.no_network:
        return
    counts = [int(c) for c in args.silos.split(",")]
    certs = create_deployment(Path(tempfile.mkdtemp(prefix="fedustat-bench-framing-")),
                              max(counts))
    print()
    print("Networked runs on loopback (ServerRun.wire_bytes: every frame and reply)")
    print(f"{'protocol':>16} | {'silos':>5} | {'rows':>5} | {'wire B':>9} | "
          f"{'payload B':>9} | {'wire/payload':>12} | {'wall s':>6} | load")
    for name, (_, rows) in NETWORK_CASES.items():
        for silos in counts:
            started = time.perf_counter()
            run = networked(certs, name, silos)
            wall = time.perf_counter() - started
            payload = run.estimate.cost.total_bits / 8
            print(f"{name:>16} | {silos:>5} | {silos * rows:>5} | {run.wire_bytes:>9} | "
                  f"{payload:>9.0f} | {run.framing_overhead:>12.1f} | {wall:>6.2f} | "
                  f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
