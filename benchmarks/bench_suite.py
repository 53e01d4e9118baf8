"""Where the test suite's time goes: per-test and per-file seconds, with the load beside them.

    python benchmarks/bench_suite.py tests/test_coverage.py tests/test_network.py
    python benchmarks/bench_suite.py --from-xml suite.xml      # a run's --junitxml

Runs pytest the way ``make test`` does (three workers, ``--dist loadgroup``) on the given
files, or reads a JUnit XML file of an earlier run, and prints the slowest tests and each
file's total (worker seconds: setup, call and teardown of its tests, summed over the
workers), with the 1-minute load average before and after. Timings on a shared machine
move with its load; compare files measured at similar loads.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _load() -> float:
    return os.getloadavg()[0]


def read_times(xml_path: Path) -> list[tuple[float, str, str]]:
    """(seconds, file, test) for every test case of a JUnit XML file."""
    out = []
    for case in ET.parse(xml_path).iter("testcase"):
        parts = (case.get("classname") or "").split(".")
        module = parts[1] if len(parts) > 1 else parts[0]
        out.append((float(case.get("time") or 0.0), f"{module}.py", case.get("name") or ""))
    return out


def report(times: list[tuple[float, str, str]], top: int) -> str:
    per_file: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for seconds, module, _ in times:
        per_file[module] += seconds
        count[module] += 1
    lines = [f"{'seconds':>9}  test", f"{'-' * 9}  {'-' * 60}"]
    lines += [f"{s:9.1f}  {m}::{name}" for s, m, name in sorted(times, reverse=True)[:top]]
    lines += ["", f"{'seconds':>9} {'tests':>6}  file", f"{'-' * 9} {'-' * 6}  {'-' * 40}"]
    lines += [f"{s:9.1f} {count[m]:6d}  {m}" for m, s in per_file.most_common()]
    lines.append(f"{sum(per_file.values()):9.1f} {sum(count.values()):6d}  total (worker seconds)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="test files to run (pytest node ids)")
    parser.add_argument("--from-xml", type=Path, help="read this JUnit XML instead of running")
    parser.add_argument("--top", type=int, default=30, help="slowest tests to list (30)")
    parser.add_argument("--workers", type=int, default=3,
                        help="pytest-xdist workers, as make test's TEST_WORKERS (3)")
    args = parser.parse_args(argv)
    if args.from_xml is not None:
        print(report(read_times(args.from_xml), args.top))
        return
    if not args.files:
        parser.error("give test files to run, or --from-xml")
    with tempfile.TemporaryDirectory() as scratch:
        xml_path = Path(scratch) / "run.xml"
        before, start = _load(), time.perf_counter()
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-n", str(args.workers),
                                "--dist", "loadgroup", "-p", "no:cacheprovider",
                                f"--junitxml={xml_path}", *args.files], cwd=ROOT,
                               stdout=subprocess.DEVNULL)
        wall, after = time.perf_counter() - start, _load()
        print(report(read_times(xml_path), args.top))
    print(f"\nwall {wall:.1f} s; load average (1 min) {before:.2f} before, {after:.2f} after; "
          f"pytest exit code {code}")


if __name__ == "__main__":
    main()
