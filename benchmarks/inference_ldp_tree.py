"""Section ``ldp_tree`` of ``bench_inference.py``: bias and interval of ``ldp-tree``'s AUC
(issue item 4).

Each run is one call of ``fedustat.roc_auc_score(labels, scores, epsilon=...,
protocol="ldp-tree", rng=seed, ...)`` with the protocol's defaults (the unbiased full
recursion; real scores binned by each party into the default 2^6 bins of the public
bounds). The target is the exact AUC of the records (scikit-learn's, ties 1/2):

* ``lognormal``, ``pareto``: the scores mapped into [0, 1) by ``s / (1 + s)``, a monotone
  map (the AUC is unchanged) that a user applies to put unbounded scores on public bounds
  ``(0, 1)``; the parties then bin them;
* ``beta-mixture``: scores in [0, 1], bounds ``(0, 1)``;
* ``tied``: the integer scores 0..11 themselves, ``d = 16`` (no binning).

The binning gap (AUC of the binned scores minus that of the records) is measured per data
set: the estimator is unbiased for the binned AUC, so the gap is its only bias against
the records' AUC. Bias is measured on ``raw_value`` (the release before the clip into
[0, 1], which is unbiased); the interval is ``confidence_interval(0.95)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import fedustat
from fedustat.stats import roc_auc
from inference_common import Row, binomial_tolerance, mean_z, scored_labels

EPSILONS = (0.25, 1.0, 4.0)
KINDS = ("lognormal", "pareto", "tied", "beta-mixture")


def _inputs(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Scores, labels and the protocol's public parameters for one data set."""
    scores, labels = scored_labels(kind, n, np.random.default_rng([seed, KINDS.index(kind)]))
    if kind == "tied":
        return scores, labels, {"d": 16}
    if kind in ("lognormal", "pareto"):
        scores = scores / (1.0 + scores)
    return scores, labels, {"bounds": (0.0, 1.0)}


def _binned_auc(scores: np.ndarray, labels: np.ndarray, params: dict[str, Any]) -> float:
    """The AUC the protocol is unbiased for: the records on the parties' grid."""
    if "bounds" not in params:
        return roc_auc(scores, labels)
    d = fedustat.protocols.local.auc_tree.DEFAULT_BINNED_DOMAIN
    return roc_auc(np.minimum(np.floor(scores * d), d - 1), labels)


def rows(quick: bool, seed: int) -> list[Row]:
    """The measured figures of this section beside their goals."""
    runs = 40 if quick else 200
    n = 10_000 if quick else 20_000
    # The goal, 93.5-96.5%, is checked on all cells pooled (2400 runs: binomial
    # s.e. 0.44 points); one cell of 200 runs has s.e. 1.5 points, so a cell is checked
    # against its 3-sigma binomial band around 95%.
    half_band = binomial_tolerance(0.95, runs)
    pooled_covered = pooled_runs = 0
    out: list[Row] = []
    for kind in KINDS:
        scores, labels, params = _inputs(kind, n, seed)
        exact = roc_auc(scores, labels)
        gap = _binned_auc(scores, labels, params) - exact
        sds = []
        for eps in EPSILONS:
            values, ses, covered = [], [], 0
            for r in range(runs):
                est = fedustat.roc_auc_score(labels, scores, epsilon=eps, protocol="ldp-tree",
                                             rng=np.random.SeedSequence(
                                                 [seed, KINDS.index(kind), int(eps * 100), r]),
                                             **params)
                values.append(est.raw_value)
                ses.append(est.std_error)
                low, high = est.confidence_interval(0.95)
                covered += int(low <= exact <= high)
            arr = np.asarray(values)
            sd = float(arr.std(ddof=1))
            sds.append(sd)
            z = mean_z(arr, exact)
            setting = f"{kind}, n={n}, eps={eps:g}, AUC {exact:.3f}"
            out.append(Row("4 ldp-tree bias", setting, f"bias z vs records' AUC ({runs} runs)",
                           f"{z:+.2f} (bias {arr.mean() - exact:+.4f}, sd {sd:.4f})",
                           "|z| < 3", abs(z) < 3))
            share = covered / runs
            pooled_covered += covered
            pooled_runs += runs
            out.append(Row("4 ldp-tree coverage", setting, f"95% interval coverage ({runs} runs)",
                           f"{100 * share:.1f}%",
                           f"{100 * (0.95 - half_band):.1f}-{100 * (0.95 + half_band):.1f}% "
                           "(3 s.e.)", abs(share - 0.95) <= half_band))
            ratio = float(np.mean(ses)) / sd
            # The sd of a sample sd from R runs is about sd / sqrt(2 (R - 1)).
            tol = 3.0 / math.sqrt(2.0 * (runs - 1))
            out.append(Row("4 ldp-tree s.e./sd", setting, "mean std_error / spread",
                           f"{ratio:.3f}", f"1 +- {tol:.2f} (3 s.e.)", abs(ratio - 1) <= tol))
        out.append(Row("4 ldp-tree binning", f"{kind}, n={n}, "
                       f"{'d=16 integers' if 'd' in params else 'bounds (0, 1), d=2^6'}",
                       "|binned AUC - records' AUC| / smallest sd (eps 4)",
                       f"{abs(gap) / min(sds):.3f} (gap {gap:+.5f})", "< 0.1",
                       abs(gap) / min(sds) < 0.1))
    pooled = pooled_covered / pooled_runs
    # A quick run's pool is smaller: its goal widens to the 3-sigma band when wider.
    pooled_band = max(0.015, binomial_tolerance(0.95, pooled_runs))
    out.append(Row("4 ldp-tree coverage", f"all {len(KINDS)} data sets x eps "
                   f"{', '.join(f'{e:g}' for e in EPSILONS)}, n={n}",
                   f"95% interval coverage, pooled ({pooled_runs} runs)", f"{100 * pooled:.2f}%",
                   f"{100 * (0.95 - pooled_band):.1f}-{100 * (0.95 + pooled_band):.1f}%",
                   abs(pooled - 0.95) <= pooled_band))
    return out
