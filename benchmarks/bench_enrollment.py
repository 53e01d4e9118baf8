"""Enrollment throughput: N devices from one process against the real service process.

    python benchmarks/bench_enrollment.py [--devices 1000,10000] [--in-flight 200]

For each N: a fresh token store with N tokens, the service started as its own process
(``fedustat enroll-server``), and N devices in this process, each generating its own
ECDSA P-256 key, opening its own TLS connection (no shared subchannel, so every device pays
a full handshake) and sending its CSR with its token (``enroll_async``); at most
``--in-flight`` devices are connected at once. Reported: wall time from the first device
to the last certificate, certificates per second, refusals or failures, the service's CPU
per certificate, its resident memory when idle (started, no device yet) and at its
peak (VmHWM), and the load average before and after.
Every certificate is checked against the deployment CA and every identity must be distinct.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cryptography import x509

from fedustat.runtime.network.certs import create_deployment
from fedustat.runtime.network.enroll import TokenStore, enroll_async, mint_tokens


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far (proc(5), fields 14 and 15 of stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int, field: str = "VmHWM") -> float:
    """A process's peak (VmHWM) or current (VmRSS) resident memory in MiB (proc(5))."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


async def drive(address: str, ca: bytes, tokens: list[str], in_flight: int
                ) -> tuple[list, float]:
    gate = asyncio.Semaphore(in_flight)

    async def device(token: str):
        async with gate:
            return await enroll_async(address, ca, token, timeout=120.0, attempts=6)

    start = time.perf_counter()
    results = await asyncio.gather(*(device(t) for t in tokens), return_exceptions=True)
    return results, time.perf_counter() - start


def run(certs: Path, work: Path, n: int, in_flight: int) -> dict:
    store = work / f"store-{n}.db"
    tokens = mint_tokens(n)
    with TokenStore(store) as fresh:
        fresh.add(tokens)
    proc = subprocess.Popen([sys.executable, "-m", "fedustat.cli", "enroll-server",
                             "--certs", str(certs), "--store", str(store),
                             "--address", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"listening on port (\d+)", line)
        if not match:
            raise RuntimeError(f"the service did not start: {line!r} {proc.stderr.read()!r}")
        ca_pem = (certs / "ca.pem").read_bytes()
        load_before = os.getloadavg()[0]
        cpu_before = cpu_seconds(proc.pid)
        idle = rss_mib(proc.pid, "VmRSS")
        results, wall = asyncio.run(drive(f"localhost:{match.group(1)}", ca_pem, tokens,
                                          in_flight))
        cpu = cpu_seconds(proc.pid) - cpu_before
        rss = rss_mib(proc.pid)
        load_after = os.getloadavg()[0]
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    failures = [r for r in results if isinstance(r, BaseException)]
    issued = [r for r in results if not isinstance(r, BaseException)]
    ca = x509.load_pem_x509_certificate(ca_pem)
    for credentials in issued:
        x509.load_pem_x509_certificate(credentials.certificate).verify_directly_issued_by(ca)
    identities = {c.identity for c in issued}
    if len(identities) != len(issued):
        raise RuntimeError("two devices got one identity")
    return {"n": n, "in_flight": in_flight, "wall": wall, "rate": len(issued) / wall,
            "failed": len(failures), "first_failure": str(failures[0]) if failures else "",
            "cpu_ms": 1000 * cpu / max(1, len(issued)), "rss": rss, "idle": idle,
            "load": (load_before, load_after)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1000,10000",
                        help="comma-separated numbers of devices")
    parser.add_argument("--in-flight", type=int, default=200,
                        help="devices connected to the service at once")
    args = parser.parse_args()
    sizes = [int(x) for x in args.devices.split(",") if x]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        certs = create_deployment(work / "certs", 1)
        print(f"enrollment throughput, {os.cpu_count()} cores, service and devices on one "
              "machine")
        print(f"{'N':>7} {'in flight':>9} {'wall s':>8} {'certs/s':>8} {'failed':>6} "
              f"{'svc CPU ms/cert':>15} {'svc RSS idle/peak MiB':>21} "
              f"{'load avg before/after':>22}")
        for n in sizes:
            row = run(certs, work, n, args.in_flight)
            print(f"{row['n']:>7} {row['in_flight']:>9} {row['wall']:>8.1f} "
                  f"{row['rate']:>8.0f} {row['failed']:>6} {row['cpu_ms']:>15.2f} "
                  f"{row['idle']:>10.0f} / {row['rss']:<8.0f} "
                  f"{row['load'][0]:>10.2f} / {row['load'][1]:<9.2f}",
                  flush=True)
            if row["failed"]:
                print(f"        first failure: {row['first_failure']}")


if __name__ == "__main__":
    main()
