"""Section ``auc`` of ``bench_inference.py``: bias and 95% coverage of every AUC protocol's
interval (issue 24, item 4; ``ldp-tree`` has its own section, ``ldp_tree``).

Each cell releases ``fedustat.roc_auc_score(labels, scores, epsilon=..., protocol=...,
rng=seed)`` for ``runs`` seeds on one generated data set (``scored_labels``: lognormal,
Pareto, tied, beta mixture). The bias z is that of the mean raw (unclipped, unbiased)
release against the exact AUC of the records; the coverage is the share of the released
95% intervals (clipped to [0, 1]) that contain it. ``ldp-quantized`` estimates the AUC of
its quantized scores (000 Sec. 3): its interval is for that AUC, so its coverage is
measured against it, and two more rows give its bias z and coverage against the records'
exact AUC, the goal (the quantization error, with the clipping of the scores into the
public bounds that the protocol needs; zero on the tied data, whose values are its
cells). Its number of bins is the default for the AUC of continuous scores (the smallest
k with k^2 (k + e^eps - 1) >= 40 sqrt(n) (e^eps - 1), docs/protocols/ldp-quantized.md),
which makes the quantization gap negligible against the noise. The public bounds are
what a user would declare: the 0.1% and 99.9% quantiles of the scores' law (of log(score)
for lognormal and Pareto scores), so about 0.2% of the records are clipped into the end
bins; beta-mixture scores are on [0, 1]. One larger n (20,000) per epsilon checks the rule
as n grows.

Protocols that release no AUC (``ldp-ghazi``, ``ghazi-shuffle``: kernels on one grid only)
are not measured. The slower protocols run on smaller n or fewer cells (said in the row).
A coverage goal is met when the measured share is within the Monte Carlo tolerance
(``binomial_tolerance``, 3 sigma) of the band 0.935-0.965; a bias goal when |z| < 3.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import fedustat
from fedustat.protocols import registry
from fedustat.protocols.local.quantized_rr import evaluate_quantization
from fedustat.stats import auc_kernel
from inference_common import Row, binomial_tolerance, mean_z, scored_labels

EPSILONS = (0.25, 1.0, 4.0)
KINDS = ("lognormal", "pareto", "tied", "beta-mixture")
BAND = (0.935, 0.965)
# ldp-quantized needs public bounds (or a domain) for the scores of each data kind.
QUANTIZED_PARAMS: dict[str, dict[str, Any]] = {
    # Of log(score) (the AUC is rank-invariant): the law's 0.1% and 99.9% quantiles,
    # 0.7 N(0, 1) + 0.3 N(0.8, 1) -> (-2.99, 3.56); 0.7 Exp(1.5) + 0.3 (0.8 + Exp(1.5))
    # -> (0.001, 4.96).
    "lognormal": {"bounds": (-3.0, 3.6)},
    "pareto": {"bounds": (0.0, 5.0)},
    "tied": {"domain": list(range(12))},
    "beta-mixture": {"bounds": (0.0, 1.0)},
}


@dataclass(frozen=True)
class Cell:
    protocol: str
    kind: str
    n: int
    epsilon: float
    params: dict[str, Any] = field(default_factory=dict)
    note: str = ""


def _cells(quick: bool) -> list[Cell]:
    cells: list[Cell] = []
    every = [(kind, eps) for kind in KINDS for eps in EPSILONS]
    # One data kind per epsilon (rotating) for the slower protocols.
    rotating = list(zip(("lognormal", "pareto", "tied"), EPSILONS, strict=True))
    if quick:
        every, rotating = rotating, [("beta-mixture", 1.0)]
    cells += [Cell("central-laplace", k, 2000, e) for k, e in every]
    cells += [Cell("ldp-quantized", k, 4000, e, QUANTIZED_PARAMS[k]) for k, e in every]
    cells += [Cell("fedauc-laplace", k, 20000, e, note="K = M") for k, e in rotating]
    ten = {"n_clients": 10}
    cells += [Cell("fedauc-laplace", k, 4000, e, ten, "K = 10") for k, e in every]
    for name, params in (("fedauc-gaussian", {**ten, "delta": 1e-5}),
                         ("fedauc-adaptive", ten), ("fedauc-laplace-global", ten),
                         ("fedauc-rr", {})):
        cells += [Cell(name, k, 4000, e, params, f"K = {params.get('n_clients', 'M')}")
                  for k, e in rotating]
    cells += [Cell("pairs-2pc", k, 500, e) for k, e in rotating]
    cells += [Cell("umpc", k, 500, e) for k, e in rotating]
    # Last, so that the other cells keep their run seeds (_run_seed uses the cell index).
    continuous = list(zip(("lognormal", "pareto", "beta-mixture"), EPSILONS, strict=True))
    cells += [Cell("ldp-quantized", k, 20000, e, QUANTIZED_PARAMS[k])
              for k, e in (continuous[:1] if quick else continuous)]
    return cells


def _quantized_auc(cell: Cell, scores: np.ndarray, labels: np.ndarray) -> float:
    """The AUC of the quantized scores (what ldp-quantized estimates): an evaluation on
    the true data, outside the protocol."""
    kernel = auc_kernel()
    protocol = registry.make("ldp-quantized", kernel, epsilon=cell.epsilon, **cell.params)
    data = kernel.pack(scores, labels)
    return float(evaluate_quantization(protocol, data, rng=0)["u_quantized"]
                 * math.comb(labels.size, 2) / (labels.sum() * (labels.size - labels.sum())))


def _run_seed(seed: int, cell_index: int, run: int) -> int:
    """A distinct seed per (cell, run): cells whose noise is one scale family would
    otherwise repeat the same standardized errors."""
    return int(np.random.SeedSequence([seed, cell_index, run]).generate_state(1)[0])


def _measure(cell: Cell, cell_index: int, runs: int, seed: int) -> list[Row]:
    rng = np.random.default_rng([seed, cell.n, KINDS.index(cell.kind)])
    scores, labels = scored_labels(cell.kind, cell.n, rng)
    exact = fedustat.roc_auc_score(labels, scores, epsilon=math.inf).value
    if "bounds" in cell.params:
        # The protocol refuses values outside its public bounds: the user takes the log of
        # the heavy-tailed scores (the AUC is rank-invariant), then clips.
        if cell.kind in ("lognormal", "pareto"):
            scores = np.log(scores)
        scores = np.clip(scores, *cell.params["bounds"])
    target = _quantized_auc(cell, scores, labels) if cell.protocol == "ldp-quantized" \
        else exact
    params = dict(cell.params)
    delta = params.pop("delta", 0.0)
    raw, covered, covered_exact = [], 0, 0
    with warnings.catch_warnings():
        # A projected noisy count warns (FedAUC), and the MPC protocols warn that
        # undeclared bounds mean their fixed-point encoding; the release is measured.
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)
        for run in range(runs):
            est = fedustat.roc_auc_score(labels, scores, epsilon=cell.epsilon, delta=delta,
                                         protocol=cell.protocol,
                                         rng=_run_seed(seed, cell_index, run),
                                         **params)
            raw.append(est.raw_value)
            low, high = est.confidence_interval(0.95)
            covered += int(low <= target <= high)
            covered_exact += int(low <= exact <= high)
    values = np.asarray(raw)
    note = f", {cell.note}" if cell.note else ""
    setting = f"{cell.protocol}, {cell.kind}, n={cell.n}{note}, eps={cell.epsilon:g}"
    share = covered / runs
    tol = binomial_tolerance(0.95, runs)
    what = "quantized AUC" if cell.protocol == "ldp-quantized" else "exact AUC"
    z = mean_z(values, target)
    rows = [
        Row("4 AUC bias", setting, f"bias z vs {what} ({runs} runs)", f"{z:+.2f}", "|z| < 3",
            abs(z) < 3.0),
        Row("4 AUC coverage", setting, f"95% coverage of {what} ({runs} runs)",
            f"{share:.3f}", f"{BAND[0]}-{BAND[1]} (MC +-{tol:.3f})",
            BAND[0] - tol <= share <= BAND[1] + tol),
    ]
    if cell.protocol == "ldp-quantized":
        z_exact = mean_z(values, exact)
        share_exact = covered_exact / runs
        rows += [Row("4 AUC bias", setting, f"bias z vs exact AUC ({runs} runs; "
                     f"quantization error {target - exact:+.4f})", f"{z_exact:+.2f}",
                     "|z| < 3", abs(z_exact) < 3.0),
                 Row("4 AUC coverage", setting, f"95% coverage of exact AUC ({runs} runs)",
                     f"{share_exact:.3f}", f"{BAND[0]}-{BAND[1]} (MC +-{tol:.3f})",
                     BAND[0] - tol <= share_exact <= BAND[1] + tol)]
    return rows


def rows(quick: bool, seed: int) -> list[Row]:
    """The measured figures of this section beside their goals."""
    runs = 40 if quick else 200
    out: list[Row] = []
    for index, cell in enumerate(_cells(quick)):
        out += _measure(cell, index, runs, seed)
    return out
