"""Benchmark cases of the two-party subsampling protocol (``"pairs-2pc"``, 000 Sec. 5).

Usage::

    .venv/bin/python benchmarks/pairs_2pc_cases.py [--quick]

``rows(quick)`` returns one dict per case with the columns ``protocol, kernel, n, P,
epsilon, runs, seconds, online_bits_per_party, offline_bits_per_party, mse, theory_mse,
notes`` (``benchmarks/bench_secure.py`` prints them in its table).

Data: Kendall's tau-a between body-mass index and disease progression of the 442
diabetes patients bundled with scikit-learn (``fedustat.datasets.load_diabetes_pairs``,
tau-a = 0.389), a real stand-in for 000 Sec. 6's TripAdvisor ratings (not available
offline; 000 had 246K records, so its errors are smaller at every setting).

Cases, the shape of 000 Fig. 4:

* the subsampling protocol for ``P in {1, 2, 4, 8}`` and ``eps in {0.5, 1, 2, 10}``,
  default noise (each party adds a full discrete Laplace draw: DP even if the aggregator
  colludes with other parties), FSS comparisons;
* ``P = 1`` with the split noise (one discrete Laplace per pair, the paper's setting,
  DP against the aggregator alone): half the noise variance;
* the all-pairs variant with advanced composition and ``delta = 1e-8`` (as 000's
  Kendall experiment), with the boolean-circuit comparisons (FSS would take about 3 s
  per run for the 97,461 pairs; the bits columns then show the circuit's costs).

Every run is the real protocol: fixed-point encoding, secret sharing, dealer material,
comparisons and products on shares, noise added to the shares, reconstruction by the
aggregator. ``mse`` is the mean squared error over ``runs`` runs around the exact
tau-a of the data (its standard error over the runs is in the notes: with 20 runs
and heavy-tailed noise it is about a third of the MSE); ``theory_mse`` the prediction
given the data: the exact subsampling variance of the design
(:func:`permutation_conditional_variance`) plus the noise variance over the number of
pairs (000 Thm 5 conditioned on the data, with the noise term corrected; for all pairs
the noise term alone). ``online_bits_per_party`` is what a party sends to its partners
and to the aggregator, ``offline_bits_per_party`` what it receives from the dealer (both
from ``Estimate.cost``, measured by the runtime from the messages and the peer traffic
each party step reports from its transcript). ``seconds`` is the mean wall time of one
run.
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

import numpy as np

from fedustat.datasets import load_diabetes_pairs
from fedustat.protocols.mpc.pairs_2pc import PairsTwoParty, permutation_conditional_variance
from fedustat.runtime.simulate import simulate
from fedustat.stats import kendall_tau_kernel, ustatistic

KERNEL = kendall_tau_kernel("a")
P_VALUES = (1, 2, 4, 8)
EPSILONS = (0.5, 1.0, 2.0, 10.0)
DELTA = 1e-8


def _data() -> np.ndarray:
    ds = load_diabetes_pairs()
    return KERNEL.pack(ds["bmi"], ds["progression"])


def _case(data: np.ndarray, exact: float, proto: PairsTwoParty, runs: int, seed: int
          ) -> dict[str, Any]:
    errors, seconds = [], []
    est = None
    for r in range(runs):
        start = time.perf_counter()
        est = simulate(proto, data, rng=seed * 1000 + r)
        seconds.append(time.perf_counter() - start)
        errors.append((est.raw_value - exact) ** 2)
    assert est is not None
    d = est.diagnostics
    mse_se = np.std(errors, ddof=1) / math.sqrt(runs) if runs > 1 else math.nan
    n = data.shape[0]
    noise = d["pair_noise_variance"] * d["n_computed_pairs"] / d["n_pairs"] ** 2
    design = 0.0 if proto.all_pairs else permutation_conditional_variance(KERNEL, data, proto.P)
    return {
        "protocol": proto.name,
        "kernel": KERNEL.name,
        "n": n,
        "P": "all" if proto.all_pairs else proto.P,
        "epsilon": proto.epsilon,
        "runs": runs,
        "seconds": float(np.mean(seconds)),
        "online_bits_per_party": est.cost.bits_per_party,
        "offline_bits_per_party": est.cost.offline_bits_per_party,
        "mse": float(np.mean(errors)),
        "theory_mse": design + noise,
        "notes": (f"mse s.e. {mse_se:.2g}; "
                  f"{proto.noise_split} noise, {proto.comparison}; eps/pair "
                  f"{d['pair_epsilon']:.3g}" + (f", delta={DELTA:g} ({d['composition']})"
                                                if proto.all_pairs else "")),
    }


def rows(quick: bool = False) -> list[dict[str, Any]]:
    """The benchmark rows (see the module docstring); ``quick`` runs fewer repetitions."""
    data = _data()
    exact = ustatistic(KERNEL, data)
    runs, all_runs = (3, 1) if quick else (20, 10)
    out = []
    for eps in EPSILONS:
        for P in P_VALUES:
            out.append(_case(data, exact, PairsTwoParty(KERNEL, eps, P=P), runs, seed=P))
        out.append(_case(data, exact, PairsTwoParty(KERNEL, eps, P=1, noise_split="split"),
                         runs, seed=11))
        out.append(_case(data, exact, PairsTwoParty(KERNEL, eps, delta=DELTA, all_pairs=True,
                                                    comparison="circuit"),
                         all_runs, seed=12))
    return out


def _format(row: dict[str, Any]) -> str:
    return (f"{row['protocol']:<10} {row['kernel']:<15} {row['n']:>6} {row['P']!s:>4} "
            f"{row['epsilon']:>5g} {row['runs']:>4} {row['seconds']:>8.3f} "
            f"{row['online_bits_per_party']:>10.0f} {row['offline_bits_per_party']:>12.0f} "
            f"{row['mse']:>10.3g} {row['theory_mse']:>10.3g}  {row['notes']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs per case")
    args = parser.parse_args()
    start = time.perf_counter()
    table = rows(quick=args.quick)
    print(f"{'protocol':<10} {'kernel':<15} {'n':>6} {'P':>4} {'eps':>5} {'runs':>4} "
          f"{'seconds':>8} {'online/pty':>10} {'offline/pty':>12} {'mse':>10} {'theory':>10}"
          "  notes")
    for row in table:
        print(_format(row))
    print(f"total {time.perf_counter() - start:.1f} s; data: diabetes bmi vs progression, "
          f"tau-a = {ustatistic(KERNEL, _data()):.4f}")
    assert all(math.isfinite(r["mse"]) for r in table)


if __name__ == "__main__":
    main()
