"""U-MPC in process: wall time and peak memory per party, against the lockstep version.

Run:  .venv/bin/python benchmarks/bench_umpc.py [--n 10000 100000] [--kernels auc gini]
          [--comparisons fss circuit] [--no-lockstep] [--max-gib 8]

Each row is one ``fedustat.estimate(kernel, data, protocol="umpc", epsilon=1, rng=2,
comparison=...)`` call (the default one-call path: the simulator with every party in one
batch; |E| = 2n, BalancedSamp, M_HF noise with the defaults), run in a fresh Python
process so that its peak memory is its own:

* ``wall s``: the call's wall time, after a warm-up call at n = 64 (lazy imports);
* ``peak MiB``: the process's peak resident set (``ru_maxrss``) after the call;
* ``bytes/party``: (peak after the call - peak after the warm-up) / n: what the run adds
  per party at its peak (records, design, shares, dealt material, messages);
* ``lockstep s`` and ``ratio``: the same call on the lockstep version of U-MPC (every
  edge's members evaluated side by side, before the per-party relay steps: the source
  tree of commit ``40fb842^``, extracted with ``git archive`` into a temporary folder),
  run right after, at the same load; ratio = wall / lockstep.

Data: AUC on scores N(label, 1) with balanced random labels (bounds (-8, 9)); Gini mean
difference on U[0, 1] (bounds (0, 1)). The load average (``uptime``) is printed beside
each row: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKSTEP_COMMIT = "40fb842^"

CHILD = r"""
import json, resource, sys, time
import numpy as np
import fedustat
from fedustat.stats import auc_kernel, gini_kernel

def case(kernel, n):
    rng = np.random.default_rng(0)
    if kernel == "auc":
        y = rng.integers(0, 2, n)
        y[:2] = (0, 1)
        return auc_kernel(), np.c_[rng.normal(size=n) + y, y], {"bounds": (-8.0, 9.0)}
    return gini_kernel((0.0, 1.0)), rng.uniform(size=(n, 1)), {}

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

kernel, n, comparison = sys.argv[1], int(sys.argv[2]), sys.argv[3]
k, data, kw = case(kernel, 64)
fedustat.estimate(k, data, protocol="umpc", epsilon=1.0, rng=2, comparison=comparison, **kw)
k, data, kw = case(kernel, n)
before = peak_mib()
start = time.perf_counter()
est = fedustat.estimate(k, data, protocol="umpc", epsilon=1.0, rng=2, comparison=comparison,
                        **kw)
wall = time.perf_counter() - start
after = peak_mib()
print(json.dumps({"wall": wall, "peak": after, "added": after - before,
                  "value": float(est.value)}))
"""


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def run_child(src: Path, kernel: str, n: int, comparison: str, max_gib: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    limit = int(max_gib * 2**30)
    # A hard cap on the child's address space keeps a run from crowding the machine.
    prelude = f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
    out = subprocess.run([sys.executable, "-c", prelude + CHILD, kernel, str(n), comparison],
                         env=env, capture_output=True, text=True, timeout=3600, check=False)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": tail}
    return json.loads(out.stdout.strip().splitlines()[-1])


def lockstep_tree(tmp: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", LOCKSTEP_COMMIT, "src"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
    return tmp / "src"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--kernels", nargs="+", default=["auc", "gini"],
                        choices=["auc", "gini"])
    parser.add_argument("--comparisons", nargs="+", default=["fss", "circuit"],
                        choices=["fss", "circuit"])
    parser.add_argument("--no-lockstep", action="store_true",
                        help="skip the lockstep version's runs")
    parser.add_argument("--max-gib", type=float, default=8.0,
                        help="address-space cap of each run (GiB)")
    args = parser.parse_args()
    header = ["n", "kernel", "comparison", "wall s", "peak MiB", "bytes/party", "lockstep s",
              "ratio", "load (1/5/15 min)"]
    print(" | ".join(header))
    with tempfile.TemporaryDirectory() as tmp:
        old = None if args.no_lockstep else lockstep_tree(Path(tmp))
        for n in args.n:
            for kernel in args.kernels:
                for comparison in args.comparisons:
                    at = load()
                    new = run_child(ROOT / "src", kernel, n, comparison, args.max_gib)
                    ref = (run_child(old, kernel, n, comparison, args.max_gib)
                           if old is not None else {"error": "skipped"})
                    if "error" in new:
                        print(f"{n} | {kernel} | {comparison} | failed: {new['error']}")
                        continue
                    per_party = new["added"] * 2**20 / n
                    lock = f"{ref['wall']:.2f}" if "wall" in ref else ref["error"][:40]
                    ratio = f"{new['wall'] / ref['wall']:.2f}" if "wall" in ref else "-"
                    print(f"{n} | {kernel} | {comparison} | {new['wall']:.2f} | "
                          f"{new['peak']:.0f} | {per_party:.0f} | {lock} | {ratio} | {at}",
                          flush=True)


if __name__ == "__main__":
    main()
