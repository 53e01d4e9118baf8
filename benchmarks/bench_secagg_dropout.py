"""The cost of dropout tolerance: ecdf-secagg with SecAgg+ against its computing parties.

    python benchmarks/bench_secagg_dropout.py [--parties 100,1000] [--drop 0,0.1,0.3]
                                              [--max-degree 200] [--seed S]

In the in-process simulator (``simulate``, one party per batch as on devices), for each
number of parties n and each fraction p: p of the parties still in the run fall silent at
each of SecAgg+'s four rounds (keys, shares, masked inputs, unmasking), drawn from the
seed. SecAgg+ is configured for that run's total dropout ``1 - (1 - p)^4``
(``max_dropout``): k and t are :func:`fedustat.secure.secagg_plus.default_parameters`, with
k capped at ``--max-degree`` (then t is the largest threshold whose failure bound stays
below 2^-20 at that dropout; the table states both). The plain protocol (``aggregation=
"servers"``: additive shares for computing parties 0 and 1) cannot lose a party; it runs
without dropouts, as the baseline.

Columns: survivors (whose masked inputs were summed; the release's n), k and t, the mean
bits a party sent (to the server and to its neighbours; the measured ``Cost``), the plain
protocol's, their ratio, the wall time of each run and the load average at the time.
Data: uniform on [0, 1], the hierarchical ECDF over a grid of 64 points, epsilon = 1,
h = n / 5.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from fedustat.protocols import registry
from fedustat.runtime.simulate import simulate
from fedustat.secure import secagg_plus as sa

ROUNDS = 4


def dropouts(n: int, fraction: float, seed: int) -> dict[int, list[int]]:
    rng = np.random.default_rng(seed)
    left = np.arange(n)
    out = {}
    for r in range(ROUNDS):
        gone = rng.choice(left, size=round(fraction * left.size), replace=False)
        out[r] = sorted(int(v) for v in gone)
        left = np.setdiff1d(left, gone)
    return out


def run(n: int, fraction: float, max_degree: int, seed: int) -> dict[str, object]:
    total = 1.0 - (1.0 - fraction) ** ROUNDS
    k, t = sa.default_parameters(n, total)
    if k > max_degree:
        k = max_degree - max_degree % 2
        k, t = sa.default_parameters(n, total, degree=k)
    options = {"epsilon": 1.0, "bounds": (0.0, 1.0), "precision": 1 / 64}
    values = np.random.default_rng(seed).uniform(0.0, 1.0, n)
    secagg = registry.make_curve("ecdf-secagg", aggregation="secagg+", degree=k, threshold=t,
                                 max_dropout=total, min_honest=max(2, n // 5), **options)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    release = simulate(secagg, values, rng=seed, batch_size=1,
                       dropouts=dropouts(n, fraction, seed))
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    plain = simulate(registry.make_curve("ecdf-secagg", **options), values, rng=seed,
                     batch_size=1)
    plain_seconds = time.perf_counter() - start
    return {"n": n, "p": fraction, "survivors": release.diagnostics["secagg_survivors"],
            "k": k, "t": t, "bits": release.cost.bits_per_party,
            "plain_bits": plain.cost.bits_per_party, "seconds": seconds,
            "plain_seconds": plain_seconds, "load": load}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parties", default="100,1000")
    parser.add_argument("--drop", default="0,0.1,0.3")
    parser.add_argument("--max-degree", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("| n | drop/round | survivors | k | t | bits/party SecAgg+ | bits/party plain | "
          "ratio | time SecAgg+ | time plain | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in (int(v) for v in args.parties.split(",")):
        for p in (float(v) for v in args.drop.split(",")):
            r = run(n, p, args.max_degree, args.seed)
            print(f"| {r['n']} | {r['p']:.0%} | {r['survivors']} | {r['k']} | {r['t']} | "
                  f"{r['bits']:,.0f} | {r['plain_bits']:,.0f} | "
                  f"{r['bits'] / r['plain_bits']:.1f} | {r['seconds']:.1f} s | "
                  f"{r['plain_seconds']:.2f} s | {r['load']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
