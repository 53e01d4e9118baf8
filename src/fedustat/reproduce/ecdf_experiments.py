"""Experiments of 003: differentially private ECDFs, ROC curves and Hosmer-Lemeshow."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fedustat import datasets
from fedustat.protocols.ecdf import dp_ecdf, dp_hosmer_lemeshow, dp_quantile, dp_roc_curve
from fedustat.protocols.ecdf.smoothing import isotonic_projection, smooth
from fedustat.reproduce.framework import ExperimentResult, new_figure, register_experiment

# The paper's release as written (003 Sec. 3.1, Eq. 2), not the library's default.
PAPER_METHOD = "003-tree"


# ------------------------------------------------------------------- 003: DP ECDF
@register_experiment(
    "003-thm1", "003 (DP ECDFs)", "Theorem 1",
    "the paper's synthetic X_pois(lambda = 3) (003 Sec. 6.2)",
    "Mean squared error per grid point of the tree-noise DP ECDF (003 Eq. 2) against "
    "Theorem 1's 2 (L + 1)^3 / (eps^2 n^2), over N = 2^L grid points and epsilon.")
def _ecdf_thm1(quick: bool, seed: int) -> ExperimentResult:
    levels = (6, 10) if quick else (6, 10, 14)
    epsilons = (0.1, 1.0) if quick else (0.1, 0.5, 1.0, 10.0)
    runs = 20 if quick else 100
    rows: list[list[Any]] = []
    for level in levels:
        n_bins = 1 << level
        x = np.asarray(datasets.poisson_ecdf(n_bins, 3.0, rng=seed)["x"], dtype=np.float64)
        tau = np.arange(1, n_bins + 1, dtype=np.float64)
        exact = dp_ecdf(x, tau, epsilon=math.inf).values
        n = x.size
        L = math.ceil(math.log2(n_bins))  # 003's L: the tree has L + 1 levels
        for eps in epsilons:
            gens = [np.random.default_rng([seed, level, int(eps * 1000), r])
                    for r in range(runs)]
            sq = np.array([np.mean((dp_ecdf(x, tau, epsilon=eps, rng=g,
                                            method=PAPER_METHOD).values - exact) ** 2)
                           for g in gens])
            bound = 2.0 * (L + 1) ** 3 / (eps**2 * n**2)  # 003 Thm 1 (with the n^2)
            rows.append([f"2^{level}", f"{n:,}", f"{eps:g}", f"{sq.mean():.3g}",
                         f"{bound:.3g}", f"{sq.mean() / bound:.3f}",
                         f"{sq.std(ddof=1) / math.sqrt(runs) / bound:.2f}"])
    notes = ["003 states Theorem 1 as a formula, not a measured number; the 'Thm 1' column "
             "is that formula with the n^2 the extracted text drops (the noise of Eq. 2 is "
             "in counts, divided by n).",
             "The per-point variance is exactly 2 (L + 1)^3 / (eps^2 n^2) when every point "
             "sums L + 1 Laplace nodes; ratios are 1 within the Monte Carlo error given in "
             "the last column (one standard error, in units of the bound).",
             "n is random (sum of N Poisson(3) counts), as in 003's generator."]
    return ExperimentResult("003-thm1", "tree ECDF error vs Theorem 1",
                            ["N", "n", "eps", "MSE per point (ours)", "Thm 1",
                             "ours / Thm 1", "s.e. of ratio"], rows, notes)



# ------------------------------------------------ 003 Sec. 6.3-6.6: DP ECDF applications
def _smoothing_ratios(n_bins: int, lam: float, eps: float, runs: int, seed: int
                      ) -> dict[str, float]:
    """Mean over runs of ||F~ - F||_2 / ||F^ - F||_2 (003 Sec. 6.3) for p = 1, p = 2 and
    the pointwise isotonic projection, on X_pois(lam) with N = n_bins grid points."""
    x = np.asarray(datasets.poisson_ecdf(n_bins, lam, rng=seed)["x"], dtype=np.float64)
    tau = np.arange(1, n_bins + 1, dtype=np.float64)
    exact = dp_ecdf(x, tau, epsilon=math.inf).values
    out: dict[str, list[float]] = {"p = 1": [], "p = 2": [], "isotonic": []}
    for r in range(runs):
        curve = dp_ecdf(x, tau, epsilon=eps, method=PAPER_METHOD,
                        rng=np.random.default_rng([seed, int(lam * 100), int(eps * 1000), r]))
        raw = float(np.linalg.norm(curve.values - exact))
        for key, sm in (("p = 1", smooth(curve, p=1)), ("p = 2", smooth(curve, p=2)),
                        ("isotonic", isotonic_projection(curve))):
            out[key].append(float(np.linalg.norm(sm.values - exact)) / raw)
    return {k: float(np.mean(v)) for k, v in out.items()}


ECDF_N_BINS = 1 << 10  # 003 Sec. 6.2's N = 2^? is garbled in the extracted text


@register_experiment(
    "003-sec6", "003 (DP ECDFs)", "Sec. 6.3-6.6, Figures 2-6",
    "X_pois(lambda) (003 Sec. 6.2, the paper's generator, N = 2^10) for 6.3-6.4; "
    "bundled `digits_scores` (n = 899) in place of Bank-full for 6.5-6.6",
    "6.3: the smoothing ratio ||F~ - F|| / ||F^ - F|| for p = 1, p = 2 (003 Eq. 3) and "
    "the isotonic projection, vs epsilon (Fig. 2, lambda = 3) and vs lambda (Fig. 3, "
    "eps = 1). 6.4: MSE of the ECDF and of its inverse (Alg. 1), raw and smoothed "
    "(Fig. 4). 6.5: L1 distance between the DP ROC curve and the exact one (Fig. 5). "
    "6.6: the DP Hosmer-Lemeshow statistic (Alg. 2) vs the exact one (Fig. 6).")
def _ecdf_sec6(quick: bool, seed: int) -> ExperimentResult:
    runs = 10 if quick else 100  # 003 Sec. 6.1: "average over 100 runs"
    epsilons = (0.1, 1.0) if quick else (0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
    lambdas = (1.0, 30.0) if quick else (0.5, 1.0, 3.0, 10.0, 30.0, 100.0)
    rows: list[list[Any]] = []
    fig, (ax_eps, ax_lam, ax_roc) = new_figure(3)
    # 6.3, Fig. 2 (lambda = 3) and Fig. 3 (eps = 1).
    by_eps = {eps: _smoothing_ratios(ECDF_N_BINS, 3.0, eps, runs, seed) for eps in epsilons}
    by_lam = {lam: _smoothing_ratios(ECDF_N_BINS, lam, 1.0, runs, seed) for lam in lambdas}
    for eps, ratios in by_eps.items():
        for key, value in ratios.items():
            paper = ("< 1 for eps > ~0.2; above p = 1, esp. small eps" if key == "p = 2"
                     else "-")
            rows.append(["6.3 Fig. 2", f"lambda = 3, {key}", f"{eps:g}",
                         "||F~ - F|| / ||F^ - F||", f"{value:.3f}", paper])
    for lam, ratios in by_lam.items():
        for key, value in ratios.items():
            rows.append(["6.3 Fig. 3", f"lambda = {lam:g}, {key}", "1",
                         "||F~ - F|| / ||F^ - F||", f"{value:.3f}",
                         "near 1 for large lambda, < 1 for moderate" if key == "p = 2"
                         else "-"])
    for key in ("p = 1", "p = 2", "isotonic"):
        ax_eps.semilogx(epsilons, [by_eps[e][key] for e in epsilons], "o-", label=key)
        ax_lam.semilogx(lambdas, [by_lam[lam][key] for lam in lambdas], "o-", label=key)
    ax_eps.axhline(1.0, color="grey", lw=0.8)
    ax_lam.axhline(1.0, color="grey", lw=0.8)
    ax_eps.set_xlabel("epsilon (lambda = 3)")
    ax_eps.set_ylabel("smoothed / raw L2 error")
    ax_lam.set_xlabel("lambda (eps = 1)")
    ax_eps.legend(fontsize=7)
    # 6.4, Fig. 4: pointwise and inverse evaluation at uniform points.
    x = np.asarray(datasets.poisson_ecdf(ECDF_N_BINS, 3.0, rng=seed)["x"], dtype=np.float64)
    tau = np.arange(1, ECDF_N_BINS + 1, dtype=np.float64)
    exact = dp_ecdf(x, tau, epsilon=math.inf)
    gen = np.random.default_rng([seed, 64])
    points = gen.uniform(1.0, ECDF_N_BINS, 200)
    levels = gen.uniform(0.0, 1.0, 200)
    levels = levels[levels > 0]
    exact_inv = dp_quantile(exact, levels).upper
    for eps in epsilons:
        f_err, inv_raw, inv_sm = [], [], []
        for r in range(runs):
            curve = dp_ecdf(x, tau, epsilon=eps, method=PAPER_METHOD,
                            rng=np.random.default_rng([seed, 65, int(eps * 1000), r]))
            f_err.append(np.mean((curve(points) - exact(points)) ** 2))
            inv_raw.append(np.mean((dp_quantile(curve, levels).upper - exact_inv) ** 2))
            inv_sm.append(np.mean((dp_quantile(smooth(curve, p=2), levels).upper
                                   - exact_inv) ** 2))
        for what, vals in (("MSE of F^(x)", f_err), ("MSE of F^-1(q), raw", inv_raw),
                           ("MSE of F~^-1(q), p = 2", inv_sm)):
            rows.append(["6.4 Fig. 4", "lambda = 3", f"{eps:g}", what,
                         f"{np.mean(vals):.3g}", "raw and smoothed inverse of the same order"
                         if "F^-1" in what or "F~" in what else "-"])
    # 6.5, Fig. 5 and 6.6, Fig. 6 on classifier scores.
    ds = datasets.load("digits_scores")
    y, score = np.asarray(ds["label"]).astype(np.int64), np.asarray(ds["score"])
    grid = np.arange(1, ECDF_N_BINS + 1, dtype=np.float64) / ECDF_N_BINS
    hl_exact = dp_hosmer_lemeshow(y, score, epsilon=math.inf)
    roc_curves: dict[int, list[float]] = {1: [], 2: []}
    for eps in epsilons:
        for p in (1, 2):
            dist = [dp_roc_curve(y, score, epsilon=eps, thresholds=grid, p=p, smooth=True,
                                 rng=np.random.default_rng([seed, 65, p, int(eps * 1000), r])
                                 ).l1_distance(y, score) for r in range(runs)]
            roc_curves[p].append(float(np.mean(dist)))
            rows.append(["6.5 Fig. 5", f"digits_scores, p = {p}", f"{eps:g}",
                         "L1 distance of ROC curves", f"{np.mean(dist):.3g}",
                         "decreases with eps; p = 1 and p = 2 about equal"])
        hl = [dp_hosmer_lemeshow(y, score, epsilon=eps,
                                 rng=np.random.default_rng([seed, 66, int(eps * 1000), r]))
              for r in range(runs)]
        # Fig. 6 measures Alg. 2's own noisy H (kept in the diagnostics); the release's
        # statistic is the noise-aware one its p-value belongs to.
        h = np.array([t.statistic.diagnostics["alg2_statistic"] for t in hl])
        rows.append(["6.6 Fig. 6", f"digits_scores, Q = 10 (exact H {hl_exact.statistic.value:.1f}"
                     f", p {hl_exact.pvalue:.2g})", f"{eps:g}", "private H (Alg. 2): mean, MSE",
                     f"{h.mean():.3g}, {np.mean((h - hl_exact.statistic.value) ** 2):.3g}",
                     "large variance, esp. unbalanced classes"])
        rows.append(["6.6 Fig. 6", "digits_scores, Q = 10", f"{eps:g}",
                     "private p-value (bootstrap, valid under the noise): median",
                     f"{np.median([t.pvalue for t in hl]):.3g}",
                     "-"])
    for p, vals in roc_curves.items():
        ax_roc.loglog(epsilons, vals, "o-", label=f"p = {p}")
    ax_roc.set_xlabel("epsilon")
    ax_roc.set_ylabel("L1 distance to the exact ROC")
    ax_roc.legend(fontsize=7)
    fig.suptitle("003 Figs. 2, 3 and 5")
    notes = [
        "003 Sec. 6.2 gives N as '2%' in the extracted text (the exponent is lost); we use "
        f"N = 2^10 = {ECDF_N_BINS} grid points, lambda = 3 unless stated. {runs} runs per "
        "cell (003: 100).",
        "003 prints no numbers for Figs. 2-6; the 'paper' column quotes the text's "
        "statements. The ratio is the mean over runs of the per-run ratio of L2 errors "
        "(003 Sec. 6.3's formula, whose averaging the text does not specify).",
        "Difference: our p = 2 ratio is below 1 at every eps we run, including eps < 0.2 "
        "where 003 reports it above 1. Our smoothing is the exact optimum of Eq. 3 "
        "(active set for p = 2, dyadic dynamic program for p = 1), 003's is CVXOPT's "
        "interior-point solution; Eq. 3 also clips to [0, 1], which removes most of the "
        "error at small eps, where the raw curve leaves [0, 1] often. Both explain an "
        "effect of smoothing at least as large as 003's; we do not have 003's code to "
        "tell which.",
        "'isotonic' is the pointwise projection (not 003's estimator): cheaper, it ignores "
        "that the noise is shared along the dyadic tree.",
        "6.4: inverse by Alg. 1 (the smallest grid point whose private CDF reaches q), at "
        "200 uniform levels q and 200 uniform points x; the exact inverse uses the same "
        "search on the exact curve.",
        "6.5-6.6: Bank-full (45,211 rows, 11.7% positive, logistic regression scores) is "
        "not bundled and there is no network. `digits_scores` are held-out logistic "
        "regression probabilities with a binary label (n = 899, 448 positive), the same "
        "kind of input; `breast_cancer_scores` is smaller (n = 285). With n 50x smaller "
        "the DP noise on the ECDFs (~1/(eps n)) is 50x larger than on Bank, so compare "
        "trends in eps, not values. Grid: 1024 equal steps on [0, 1] (003 does not give "
        "its grid).",
        "6.6: the exact H of these scores is large (the classifier's probabilities are "
        "overconfident); Alg. 2 spends eps / (L + 9) per released count, L = 10 for the "
        "default grid 2^-10. The private p-value is the parametric bootstrap of the "
        "noise-aware statistic (docs/protocols/ecdf.md), not a chi-square tail of Alg. 2's "
        "noisy H: at small eps the noise hides the miscalibration and p-values are larger.",
    ]
    return ExperimentResult("003-sec6", "DP ECDF: smoothing, inverse, ROC, Hosmer-Lemeshow",
                            ["section", "setting", "eps", "quantity", "ours", "paper (text)"],
                            rows, notes,
                            [("sec6_smoothing_and_roc", fig,
                              "smoothing ratio vs eps (left) and lambda (middle); ROC L1 "
                              "distance vs eps (right)")])
