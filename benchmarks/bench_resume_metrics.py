"""What an operator sees when a collection server is killed and resumed.

    python benchmarks/bench_resume_metrics.py [--devices 400] [--kill-after 200]

``fedustat collect`` runs as its own process with ``--metrics-address`` and JSON logs,
on a run directory. Real devices (each its own certificate and TLS connection,
``report_async``, deployment randomness) report; once ``--kill-after`` reports are
committed the server is scraped and SIGKILLed, the remaining devices start while it is
down (they retry), and the same command is started again on the same run directory and
port. The server is scraped at four points: before the kill, right after the restart,
when every device has been acknowledged, and after the release (during ``--linger``).
The table shows the metrics an alert would watch (docs/deployment-guide.md, "Operating
a run"); the last lines are the JSON log events of both processes, by kind.

Counters (``*_total``) belong to one server process and start from 0 after a restart;
gauges read from the run's state (``fedustat_rows``, ``fedustat_parties_joined``,
``fedustat_store_bytes``, ``fedustat_stage_seconds``: the window's age) carry on from
the run directory. A shown metric without a sample (no refusal by any reason) is 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from fedustat.protocols import registry
from fedustat.runtime.network import create_deployment, load_credentials
from fedustat.runtime.network.collect import report_async
from fedustat.runtime.report_store import DATABASE
from fedustat.stats import auc_kernel

#: The metrics shown, in order.
SHOWN = ("fedustat_up", "fedustat_released", "fedustat_parties_joined", "fedustat_rows",
         "fedustat_reports_accepted_total", "fedustat_reports_refused_total",
         "fedustat_received_bytes_total", "fedustat_store_bytes",
         "fedustat_stage_seconds", "fedustat_uptime_seconds")
GUARD = 300.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _committed(database: Path) -> int:
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as reader:
            return int(reader.execute("SELECT COUNT(*) FROM reports").fetchone()[0])
    except sqlite3.Error:
        return 0


def _scrape(port: int) -> dict[str, float]:
    """Each shown metric, summed over its labels (refusals over their reasons)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in SHOWN:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def _wait(condition: Any, what: str) -> None:
    stop = time.monotonic() + GUARD
    while not condition():
        if time.monotonic() > stop:
            raise SystemExit(f"error: never happened within {GUARD:g} s: {what}")
        time.sleep(0.05)


def _scrapable(port: int) -> bool:
    """The endpoint answers with the run's view (it listens before the run is bound)."""
    try:
        return "fedustat_rows" in _scrape(port)
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=400)
    parser.add_argument("--kill-after", type=int, default=200,
                        help="committed reports before the SIGKILL")
    args = parser.parse_args()
    if not 0 < args.kill_after < args.devices:
        raise SystemExit("error: --kill-after must be between 0 and --devices")

    def make() -> Any:
        return registry.make("ldp-quantized", auc_kernel(), epsilon=1.0, k=8,
                             bounds=(0.0, 1.0))

    generator = np.random.default_rng(1)  # the benchmark's data, not the devices' noise
    rows = np.column_stack([generator.beta(2, 5, args.devices),
                            np.arange(args.devices) % 2])
    with tempfile.TemporaryDirectory(prefix="fedustat-resume-") as tmp:
        scratch = Path(tmp)
        certs = create_deployment(scratch / "certs", args.devices)
        port, metrics_port = _free_port(), _free_port()
        run_dir, logs = scratch / "run", scratch / "server.log"
        command = [sys.executable, "-m", "fedustat.cli", "collect", "--statistic", "auc",
                   "--protocol", "ldp-quantized", "--epsilon", "1", "--param", "k=8",
                   "--bounds", "0,1", "--certs", str(certs), "--window", "600",
                   "--quorum", str(args.devices), "--linger", "10", "--listen",
                   f"127.0.0.1:{port}", "--run-dir", str(run_dir), "--metrics-address",
                   f"127.0.0.1:{metrics_port}", "--log-format", "json"]
        servers: list[subprocess.Popen] = []

        def start() -> subprocess.Popen:
            with open(logs, "a") as log:
                server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log,
                                          start_new_session=True)
            servers.append(server)
            return server

        def devices(first: int, last: int, out: list[Any]) -> threading.Thread:
            async def every() -> list[Any]:
                gate = asyncio.Semaphore(50)

                async def device(i: int) -> Any:
                    async with gate:
                        return await report_async(
                            make(), rows[i:i + 1], load_credentials(certs, f"party-{i}"),
                            f"127.0.0.1:{port}", timeout=GUARD)
                return await asyncio.gather(*(device(i) for i in range(first, last)),
                                            return_exceptions=True)
            thread = threading.Thread(target=lambda: out.extend(asyncio.run(every())))
            thread.start()
            return thread

        points: list[tuple[str, dict[str, float]]] = []
        sent_first: list[Any] = []
        sent_rest: list[Any] = []
        try:
            server = start()
            _wait(lambda: _scrapable(metrics_port), "the first server's metrics")
            first = devices(0, args.kill_after, sent_first)
            _wait(lambda: _committed(run_dir / DATABASE) >= args.kill_after,
                  f"{args.kill_after} committed reports")
            points.append(("before the kill", _scrape(metrics_port)))
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=30)
            first.join(GUARD)
            rest = devices(args.kill_after, args.devices, sent_rest)
            time.sleep(1.0)  # the devices find the server down and retry
            server = start()
            _wait(lambda: _scrapable(metrics_port), "the restarted server's metrics")
            points.append(("after the restart", _scrape(metrics_port)))
            rest.join(GUARD)
            points.append(("every device acknowledged", _scrape(metrics_port)))
            _wait(lambda: _scrape(metrics_port).get("fedustat_released", 0) == 1
                  if _scrapable(metrics_port) else True, "the release")
            points.append(("released (linger)", _scrape(metrics_port)))
            server.wait(timeout=GUARD)
        finally:
            for process in servers:
                if process.poll() is None:
                    os.kill(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)
        failed = [s for s in sent_first + sent_rest if isinstance(s, Exception)]
        print(f"{args.devices} devices, SIGKILL after {args.kill_after} committed reports; "
              f"devices failed: {len(failed)}; server exit: {server.returncode}; "
              f"load average: {os.getloadavg()[0]:.2f}")
        print("| metric | " + " | ".join(name for name, _ in points) + " |")
        print("|---|" + "---|" * len(points))
        for metric in SHOWN:
            cells = [f"{values.get(metric, 0.0):g}" for _, values in points]
            print(f"| `{metric}` | " + " | ".join(cells) + " |")
        events = Counter()
        for line in logs.read_text().splitlines():
            if line.startswith("{"):
                events[json.loads(line)["event"]] += 1
        print("log events (both processes): "
              + ", ".join(f"{name} {count}" for name, count in sorted(events.items())))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
