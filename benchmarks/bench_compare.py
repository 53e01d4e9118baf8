"""Wall time of ``fedustat compare`` per preset, with the load average beside each.

    .venv/bin/python benchmarks/bench_compare.py              # --quick and the default
    .venv/bin/python benchmarks/bench_compare.py --full       # also --full (long)
    .venv/bin/python benchmarks/bench_compare.py --workers 1  # one process

Each preset runs the command as `make run` does (every default statistic, the report
written to a temporary folder) in a fresh process; the table gives its wall time, the
CPU time of it and its workers, and the 1-minute load average before and after (other
users' work on a shared machine slows a run: state the load with the time).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

FEDUSTAT = Path(sys.executable).with_name("fedustat")


def run(preset: str | None, workers: int | None) -> tuple[float, float, float, float]:
    before = os.getloadavg()[0]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryDirectory() as out:
        cmd = [str(FEDUSTAT), "compare", "--no-progress", "--out", out]
        cmd += [f"--{preset}"] if preset else []
        cmd += ["--workers", str(workers)] if workers else []
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return wall, cpu, before, os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also time --full")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    presets: list[str | None] = ["quick", None] + (["full"] if args.full else [])
    print(f"{'preset':<10} {'wall s':>8} {'CPU s':>8} {'load before':>12} {'load after':>11}")
    for preset in presets:
        wall, cpu, lb, la = run(preset, args.workers)
        print(f"{preset or 'default':<10} {wall:8.1f} {cpu:8.1f} {lb:12.2f} {la:11.2f}",
              flush=True)


if __name__ == "__main__":
    main()
