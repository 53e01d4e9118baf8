"""What watching a collection costs: reports/s and memory with metrics and logs off and on.

    python benchmarks/bench_observe.py [--devices 2000] [--repeats 2] [--processes 2]
                                       [--in-flight 100]

A real ``fedustat collect`` process (ldp-quantized AUC, k = 16, a window closing at a quorum
of N reports) takes N one-record devices, each with its own certificate and TLS
connection, driven by ``bench_devices.py``'s load processes. Each repeat runs it three
times, in turn: with nothing observed; with ``--metrics-address 127.0.0.1:0 --log-format
json`` (what an operator runs); and with ``--log-level debug`` too (one JSON line per
accepted report: the most a server logs); a scraper reads ``/metrics`` every 0.5 s while
the metrics are on. The table gives the reports/s
over the server's own time, its peak memory, the scrapes made and their latency, and the
log's lines and bytes, with the load average before each run. A second table times the
per-report calls on the event loop (``Observer.reported``) with logging off and with the
JSON handler writing to /dev/null.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_devices import server_command
from fedustat.runtime.network import create_deployment
from fedustat.runtime.network.observe import LOGGER, Observer, configure_logging

#: The server's options per mode: nothing observed; what an operator runs (metrics, JSON
#: logs at info: start, refusals, close, release); and the most (one line per report).
MODES = {"off": [],
         "metrics + JSON logs (info)": ["--metrics-address", "127.0.0.1:0", "--log-format",
                                        "json"],
         "metrics + JSON logs (debug)": ["--metrics-address", "127.0.0.1:0", "--log-format",
                                         "json", "--log-level", "debug"]}
SCRAPE_EVERY = 0.5


def load() -> float:
    return os.getloadavg()[0]


def one_run(n: int, certs: Path, scratch: Path, mode: str, processes: int,
            in_flight: int) -> dict[str, object]:
    output = scratch / "release.json"
    log_path = scratch / "server.log"
    command = server_command("ldp-quantized", n, certs, output, None, 600.0) + MODES[mode]
    load_before = load()
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True,
                                  start_new_session=True)
    clients: list[subprocess.Popen] = []
    latencies: list[float] = []
    stop = threading.Event()
    try:
        line = server.stdout.readline()
        match = re.search(r"listening on port (\d+)", line)
        if not match:
            raise RuntimeError(f"the server did not start: {line!r} {log_path.read_text()}")
        metrics = re.search(r"metrics on (http://\S+/metrics)", line)

        def scrape() -> None:
            while not stop.wait(SCRAPE_EVERY):
                began = time.perf_counter()
                try:
                    with urllib.request.urlopen(metrics.group(1), timeout=10) as answer:
                        answer.read()
                except OSError:
                    return  # the server has gone
                latencies.append(time.perf_counter() - began)

        scraper = threading.Thread(target=scrape, daemon=True)
        if metrics:
            scraper.start()
        bench = Path(__file__).resolve().parent / "bench_devices.py"
        for share in np.array_split(np.arange(n), processes):
            clients.append(subprocess.Popen(
                [sys.executable, str(bench), "--client", "--protocol", "ldp-quantized",
                 "--n", str(n), "--address", f"127.0.0.1:{match.group(1)}", "--certs",
                 str(certs), "--first", str(int(share[0])), "--count", str(share.size),
                 "--in-flight", str(in_flight), "--timeout", "600"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                start_new_session=True))
        failed = 0
        for client in clients:
            out, err = client.communicate(timeout=1800)
            if client.returncode != 0:
                raise RuntimeError(f"a load process failed: {err[-2000:]}")
            failed += int(json.loads(out.strip().splitlines()[-1])["failed"])
        server.communicate(timeout=600)
        if server.returncode != 0:
            raise RuntimeError(f"the server failed: {log_path.read_text()[-2000:]}")
    finally:
        stop.set()
        for proc in [server, *clients]:
            if proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)
    release = json.loads(output.read_text())
    lines = [x for x in log_path.read_text().splitlines() if x.startswith("{")]
    return {"mode": mode, "rate": n / float(release["seconds"]),
            "rss": release["server_peak_rss_mib"], "failed": failed,
            "scrapes": len(latencies),
            "scrape_ms": (1e3 * statistics.median(latencies), 1e3 * max(latencies))
            if latencies else None,
            "log_lines": len(lines), "log_bytes": sum(len(x) + 1 for x in lines),
            "load": load_before}


def per_report_calls(calls: int = 100_000) -> list[tuple[str, float]]:
    """Microseconds per ``Observer.reported`` call, logging off and JSON to /dev/null."""
    out = []
    for label, configure in (("logging off", None), ("json at debug, to /dev/null", "json")):
        handler = None
        with open(os.devnull, "w") as sink:
            if configure:
                handler = configure_logging(configure, "debug", stream=sink)
            observer = Observer()
            observer.bind("collect", "window-bench", "ldp-quantized", dict)
            began = time.perf_counter()
            for i in range(calls):
                observer.reported(f"party-{i}", 117)
            out.append((label, 1e6 * (time.perf_counter() - began) / calls))
            if handler is not None:
                logging.getLogger(LOGGER).removeHandler(handler)
                logging.getLogger(LOGGER).setLevel(logging.NOTSET)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fedustat-observe-") as tmp:
        scratch = Path(tmp)
        certs = create_deployment(scratch / "certs", args.devices)
        rows = []
        for _ in range(args.repeats):
            for mode in MODES:
                rows.append(one_run(args.devices, certs, scratch, mode, args.processes,
                                    args.in_flight))
    table = io.StringIO()
    table.write(f"{args.devices} devices, ldp-quantized AUC (k = 16), collection window\n\n")
    table.write("| server | reports/s | server peak MiB | failed | scrapes | scrape ms "
                "(median / max) | log lines | log KiB | load before |\n")
    table.write("|---|---|---|---|---|---|---|---|---|\n")
    for row in rows:
        scrape = ("-" if row["scrape_ms"] is None
                  else f"{row['scrape_ms'][0]:.1f} / {row['scrape_ms'][1]:.1f}")
        table.write(f"| {row['mode']} | "
                    f"{row['rate']:.0f} | {row['rss']:.0f} | {row['failed']} | "
                    f"{row['scrapes']} | {scrape} | {row['log_lines']} | "
                    f"{row['log_bytes'] / 1024:.0f} | {row['load']:.2f} |\n")
    table.write(f"\nper report on the event loop (load {load():.2f}):\n\n| logging | µs per "
                "report |\n|---|---|\n")
    for label, micro in per_report_calls():
        table.write(f"| {label} | {micro:.2f} |\n")
    print(table.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
