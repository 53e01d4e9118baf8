"""Experiments of 000 and 001 (Bell et al.): local-DP U-statistics and the LDP AUC tree."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedustat import datasets
from fedustat.api import estimate
from fedustat.protocols.base import Estimate
from fedustat.reproduce.framework import ExperimentResult, fmt, new_figure, register_experiment
from fedustat.stats import kernels, roc_auc


# ------------------------------------------------------- 000: Bell et al. (AISTATS 2020)
def _abs_errors(kernel: kernels.Kernel, data: np.ndarray, truth: float, runs: int,
                seed: Sequence[int], **params: Any) -> np.ndarray:
    """|estimate - truth| over ``runs`` independent runs of one protocol."""
    # clip=False: the papers measure their raw (unbiased) estimators.
    return np.array([abs(estimate(kernel, data, rng=np.random.default_rng([*seed, r]),
                                  clip=False, **params).value - truth) for r in range(runs)])


@register_experiment(
    "000-fig3", "000 (Bell et al.)", "Figure 3",
    "bundled `digits_scores` (classifier scores, n = 899, 448 positives) in place of "
    "the Diabetes 130-US hospitals readmission scores",
    "Mean and std over runs of the absolute error of the LDP AUC protocol on "
    "hierarchical histograms (000 Sec. 4) for several domain sizes d and epsilon; "
    "scores are discretized into [0, d-1] before the protocol.")
def _ldp_tree_fig3(quick: bool, seed: int) -> ExperimentResult:
    ds = datasets.load("digits_scores")
    scores, labels = np.asarray(ds["score"]), np.asarray(ds["label"])
    kernel = kernels.auc_kernel()
    truth = roc_auc(scores, labels)
    alphas = (4, 8) if quick else (2, 4, 6, 8, 10, 12)
    epsilons = (1.0, 4.0) if quick else (0.5, 1.0, 2.0, 4.0, 8.0)
    runs = 5 if quick else 20
    rows: list[list[Any]] = []
    fig, ax = new_figure()
    for eps in epsilons:
        means = []
        for alpha in alphas:
            d = 1 << alpha
            # fp(s, d): the score's bin on the public range [0, 1] (000 Sec. 6).
            binned = np.clip(np.floor(scores * d), 0, d - 1)
            err = _abs_errors(kernel, kernel.pack(binned, labels), truth, runs,
                              [seed, alpha, int(eps * 100)], epsilon=eps, protocol="ldp-tree",
                              d=d, oracle="hadamard")  # 000's Hadamard response as written
            means.append(err.mean())
            rows.append([f"{eps:g}", f"2^{alpha}", f"{err.mean():.4f}",
                         f"{err.std(ddof=1):.4f}", f"{roc_auc(binned, labels):.4f}", "-"])
        ax.plot([1 << a for a in alphas], means, "o-", label=f"eps = {eps:g}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("domain size d")
    ax.set_ylabel("mean |AUC error|")
    ax.set_title("000 Fig. 3 (digits_scores stand-in)")
    ax.legend()
    notes = [
        "The Diabetes 130-US hospitals data (UCI) and 000's logistic-regression scores "
        "cannot be bundled offline. `digits_scores` are held-out classifier scores in "
        "[0, 1] with a binary label, the same kind of input; it is smaller (n = 899 vs "
        "000's test set with a smallest class of 693) but its smallest class (448) is of "
        "the same order, and 000 notes the error depends on the smallest class.",
        f"Errors are against the AUC of the continuous scores ({truth:.4f}), so they "
        "include the discretization error (the 'AUC of binned scores' column); "
        f"{runs} runs per cell (000: 20).",
        "000 gives Figure 3 only as a plot: no numbers to print beside ours. The trend it "
        "describes (robust to d, little gain beyond eps = 2) is what to compare.",
    ]
    return ExperimentResult("000-fig3", "LDP AUC error vs domain size and epsilon",
                            ["eps", "d", "mean |error| (ours)", "std", "AUC of binned scores",
                             "paper"], rows, notes,
                            [("fig3_error_vs_d", fig, "mean absolute error vs d")])


def _ratings(values: np.ndarray, bounds: tuple[float, float], levels: int) -> np.ndarray:
    """Equal-width levels 0..levels-1 on public bounds (a ratings-scale stand-in)."""
    lo, hi = bounds
    return np.clip(np.floor((values - lo) / (hi - lo) * levels), 0, levels - 1)


@register_experiment(
    "000-fig4", "000 (Bell et al.)", "Figure 4",
    "bundled `diabetes_pairs` bmi and progression cut into 6 levels each on public "
    "bounds (a 6 x 6 ratings stand-in for TripAdvisor's room / cleanliness ratings)",
    "Mean and std over runs of the absolute error in Kendall's tau: randomized "
    "response on the 36 joint values (000 Alg. 1 without quantization), the 2PC "
    "subsampling protocol with P in {1, 2, 4, 8} and the 2PC all-pairs protocol "
    "with advanced composition (delta = 1e-8), against epsilon.")
def _kendall_fig4(quick: bool, seed: int) -> ExperimentResult:
    ds = datasets.load("diabetes_pairs")
    # Public ranges (the same as `fedustat compare` uses), never the data's min and max.
    x = _ratings(np.asarray(ds["bmi"]), (10.0, 60.0), 6)
    y = _ratings(np.asarray(ds["progression"]), (0.0, 400.0), 6)
    if quick:
        x, y = x[:150], y[:150]
    kernel = kernels.kendall_tau_kernel("a")
    data = kernel.pack(x, y)
    truth = estimate(kernel, data, epsilon=math.inf, protocol="exact").value
    epsilons = (1.0, 10.0) if quick else (0.5, 1.0, 2.0, 5.0, 10.0)
    runs = 3 if quick else 20
    levels = list(range(6))
    methods: list[tuple[str, dict[str, Any]]] = [
        ("RR (ldp-quantized, 36 values)",
         dict(protocol="ldp-quantized", domain={"x": levels, "y": levels})),
        *[(f"2PC subsampling P = {P}", dict(protocol="pairs-2pc", P=P)) for P in (1, 2, 4, 8)],
        ("2PC all pairs (delta 1e-8)", dict(protocol="pairs-2pc", all_pairs=True,
                                            delta=1e-8)),
    ]
    rows: list[list[Any]] = []
    fig, ax = new_figure()
    for i, (label, params) in enumerate(methods):
        means = []
        for eps in epsilons:
            err = _abs_errors(kernel, data, truth, runs, [seed, i, int(eps * 100)],
                              epsilon=eps, **params)
            means.append(err.mean())
            rows.append([f"{eps:g}", label, f"{err.mean():.4f}", f"{err.std(ddof=1):.4f}",
                         "-"])
        ax.semilogy(epsilons, means, "o-", label=label)
    ax.set_xlabel("epsilon")
    ax.set_ylabel("mean |tau error|")
    ax.set_title("000 Fig. 4 (6 x 6 ratings stand-in)")
    ax.legend(fontsize=7)
    notes = [
        "TripAdvisor's hotel ratings (Wang 2010, 246K records) are not redistributable "
        "offline. We cut the bundled diabetes bmi and disease progression into 6 "
        "equal-width levels on public ranges ([10, 60] and [0, 400]) to get a 6 x 6 "
        f"ratings table, n = {x.size} (the quick run keeps the first 150 rows), exact "
        f"tau-a {truth:.4f} (TripAdvisor's: 0.58).",
        "With n in the hundreds instead of 246K every error is about 500x larger in "
        "variance than 000's; the comparison is of the ordering between protocols "
        "(000: all pairs worst, RR next, subsampling best for eps <= 2, larger P helps "
        "at large eps), not of values. 000 gives the figure only as a plot.",
        "Our RR is the correct k-ary randomized response (true value w.p. "
        "e^eps / (k + e^eps - 1)); 000 eq. 9 as printed keeps the true value w.p. "
        "1 - beta, which is not a distribution; see docs/reproduce.md.",
        f"{runs} runs per cell (000: 20).",
    ]
    return ExperimentResult("000-fig4", "Kendall's tau: RR vs 2PC subsampling vs all pairs",
                            ["eps", "protocol", "mean |error| (ours)", "std", "paper"],
                            rows, notes, [("fig4_error_vs_eps", fig,
                                           "mean absolute error of tau-a vs epsilon")])



# ------------------------------------------- 001 App. D.1: LDP AUC on synthetic data
def _d1_dataset(name: str, alpha: int, n_per_class: int, seed: int
                ) -> tuple[np.ndarray, np.ndarray, float]:
    """A 001 App. D.1 data set at depth ``alpha``: integer scores in [0, 2^alpha - 1], the
    labels and the AUC the experiment measures the error against (for ``ithdigit`` the
    continuous AUC 1, which the discretization can lose; otherwise the data's own AUC)."""
    if name == "auc_one":
        ds = datasets.auc_one(alpha, n_per_class, rng=seed)
    elif name == "ur":
        ds = datasets.ur(alpha, n_per_class, rng=seed)
    else:
        ds = datasets.ithdigit(n_per_class, alpha=alpha, rng=seed)
    scores = np.asarray(ds["score"], dtype=np.float64)
    labels = np.asarray(ds["label"]).astype(np.int64)
    truth = 1.0 if name == "ithdigit" else roc_auc(scores, labels)
    return scores, labels, truth


def _d1_errors(protocol: str, scores: np.ndarray, labels: np.ndarray, truth: float,
               eps: float, runs: int, seed: Sequence[int], **params: Any
               ) -> tuple[np.ndarray, Estimate]:
    """|AUC^ - truth| over ``runs`` runs, and the last estimate (for its diagnostics)."""
    kernel = kernels.auc_kernel()
    data = kernel.pack(scores, labels)
    errors, est = [], None
    for r in range(runs):
        est = estimate(kernel, data, epsilon=eps, protocol=protocol, clip=False,
                       rng=np.random.default_rng([*seed, r]), **params)
        errors.append(abs(est.value - truth))
    assert est is not None
    return np.asarray(errors), est


D1_DATASETS = ("auc_one", "ur", "ithdigit")


@register_experiment(
    "001-fig5-6", "001 (Bell et al., arXiv)", "App. D.1, Figures 5 and 6",
    "the paper's synthetic data sets auc_one, ur and ithdigit (001 App. D.1)",
    "Mean and std over runs of the absolute AUC error of the hierarchical-histogram "
    "LDP protocol (Fig. 5, 'ldp-tree') and of the generic LDP protocol (Fig. 6, "
    "'ldp-quantized': k-ary randomized response on the d score values) against the "
    "domain size d = 2^alpha and epsilon, beside the square root of Theorem 3's MSE "
    "bound; then the splitting strategies of 001 Table 1 side by side.")
def _ldp_d1_fig56(quick: bool, seed: int) -> ExperimentResult:
    n_per_class = 10_000 if quick else 10**6
    runs = 5 if quick else 20
    tree_alphas = (4, 10, 14) if quick else (2, 4, 6, 8, 10, 12, 13, 14, 16, 18, 20)
    generic_alphas = (2, 6) if quick else (2, 4, 6, 8, 10)
    epsilons = (1.0, 4.0) if quick else (0.5, 1.0, 2.0, 4.0)
    rows: list[list[Any]] = []
    curves: dict[tuple[str, str, float], list[tuple[int, float]]] = {}
    for name in D1_DATASETS:
        for fig, protocol, alphas in (("5", "ldp-tree", tree_alphas),
                                      ("6", "ldp-quantized", generic_alphas)):
            for alpha in alphas:
                scores, labels, truth = _d1_dataset(name, alpha, n_per_class, seed)
                d = 1 << alpha
                # 001's one-bit Hadamard response, as the paper runs it.
                params: dict[str, Any] = ({"d": d, "oracle": "hadamard"}
                                          if protocol == "ldp-tree"
                                          else {"domain": {"score": list(range(d))}})
                input_auc = roc_auc(scores, labels)
                for eps in epsilons:
                    err, est = _d1_errors(protocol, scores, labels, truth, eps, runs,
                                          [seed, D1_DATASETS.index(name), int(fig), alpha,
                                           int(eps * 100)], **params)
                    bound = (math.sqrt(est.diagnostics["mse_bound"])
                             if protocol == "ldp-tree" else None)
                    rows.append([f"Fig. {fig}", name, protocol, "users" if fig == "5" else "-",
                                 f"2^{alpha}", f"{eps:g}", f"{input_auc:.4f}",
                                 f"{err.mean():.4f}", f"{err.std(ddof=1):.4f}", fmt(bound),
                                 _D1_PAPER.get((name, fig), "-")])
                    curves.setdefault((fig, name, eps), []).append((d, float(err.mean())))
    # Splitting strategies (001 App. B.2.2, Table 1) at one depth.
    split_alpha = 10 if quick else 16
    split_eps = (1.0,) if quick else (1.0, 4.0)
    for name in ("auc_one", "ur"):
        scores, labels, truth = _d1_dataset(name, split_alpha, n_per_class, seed)
        for eps in split_eps:
            for split, delta in (("users", 0.0), ("budget-basic", 0.0),
                                 ("budget-advanced", 1e-6)):
                err, est = _d1_errors("ldp-tree", scores, labels, truth, eps, runs,
                                      [seed, 99, D1_DATASETS.index(name), int(eps * 100),
                                       len(split)], d=1 << split_alpha, split=split,
                                      delta=delta, oracle="hadamard")
                # budget-advanced falls back to basic composition when that gives the
                # larger per-level budget (few levels); the protocol reports which.
                rows.append(["Table 1", name, "ldp-tree",
                             f"{split} ({est.diagnostics['composition'].split(' (')[0]})",
                             f"2^{split_alpha}", f"{eps:g}", f"{roc_auc(scores, labels):.4f}",
                             f"{err.mean():.4f}", f"{err.std(ddof=1):.4f}",
                             fmt(math.sqrt(est.diagnostics["mse_bound"])), "-"])
    fig_out, axes = new_figure(3)
    for ax, name in zip(axes, D1_DATASETS, strict=True):
        for (fig, dname, eps), pts in curves.items():
            if dname == name:
                ax.loglog(*zip(*pts, strict=True), "o-" if fig == "5" else "s--",
                          label=f"{'tree' if fig == '5' else 'generic'}, eps = {eps:g}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("domain size d")
        ax.set_title(name)
    axes[0].set_ylabel("mean |AUC error|")
    axes[0].legend(fontsize=7)
    fig_out.suptitle("001 Figs. 5 (tree, o-) and 6 (generic, s--)")
    notes = [
        f"{n_per_class:,} inputs per class and {runs} runs per cell "
        + ("(quick size; 001 uses 10^6 and 20)." if quick else "(as in 001)."),
        "Errors are against the data's AUC; for ithdigit against the continuous AUC 1, "
        "so the error includes the discretization (the 'AUC of input' column: 0.5 while "
        "all inputs share bin 0, d <= 2^13, as 001 App. D.1 says).",
        "'Thm 3 RMSE bound' is the square root of 000 Theorem 3's MSE bound with the node "
        "variances of `ldp_auc_tree` (the protocol's diagnostics). With users split "
        "across levels 001 App. B.2.2 proves it only up to a factor alpha for this "
        "sample error; with budget splits it holds as stated.",
        "Splitting rows: the split column names the composition used; 'users' needs "
        "none (one level per party). With delta = 1e-6 advanced composition gives a "
        "smaller per-level budget than basic at these alpha and eps, so "
        "'budget-advanced' falls back to basic (the protocol's rule) and differs from "
        "'budget-basic' only by the random draw.",
        "The pruning parameter a minimizes Theorem 3's bound (001 does not report its a).",
        "The generic protocol (Fig. 6) runs k-RR on the d score values with public labels "
        "(no quantization beyond the data's own d); its server work grows as d^2, so "
        f"d stops at 2^{generic_alphas[-1]}. For ithdigit it sees the discretized scores, "
        "hence the error 0.5 for d <= 2^13 whatever eps.",
        "001 gives Figures 5 and 6 only as plots; the 'paper' column quotes what its text "
        "says about each panel. The splitting rows compare 001 Table 1's strategies "
        "(a table of bounds, no measured numbers).",
    ]
    return ExperimentResult("001-fig5-6", "LDP AUC on auc_one / ur / ithdigit",
                            ["part", "data", "protocol", "split", "d", "eps", "AUC of input",
                             "mean |error| (ours)", "std", "Thm 3 RMSE bound",
                             "paper (text)"], rows, notes,
                            [("fig5_6_error_vs_d", fig_out,
                              "mean absolute error vs d: tree (Fig. 5) and generic (Fig. 6)")])


# What 001 App. D.1's text says of each panel (the figures carry no printed numbers).
_D1_PAPER = {
    ("auc_one", "5"): "considerable error (recursion error at every level)",
    ("ur", "5"): "much lower error",
    ("ithdigit", "5"): "learns nothing for d <= 2^13, low error for d >= 2^14",
    ("auc_one", "6"): "good for small d, poor scaling with d",
    ("ur", "6"): "good for small d, poor scaling with d",
    ("ithdigit", "6"): "very large error in all regimes",
}
