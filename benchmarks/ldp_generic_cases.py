"""Benchmark cases of the generic LDP protocol (``"ldp-quantized"``) and the Ghazi baseline.

Usage::

    .venv/bin/python benchmarks/ldp_generic_cases.py [--quick]

``rows(quick)`` returns one dict per case with the columns ``protocol, case, n, k,
epsilon, runs, seconds, mean_abs_error, bound, notes``:

* timing: the generic protocol end to end (quantize, randomize, histogram, estimate)
  with n = 10^7 parties and k = 256 through ``fedustat.estimate`` (which validates the
  data and runs :func:`fedustat.runtime.simulate.simulate`); target under 10 s;
* error: Gini mean difference (uniform data, 002 Sec. 6.1), Kendall's tau-a on 6 x 6
  ratings (the shape of 000 Sec. 6's TripAdvisor data, which is not available offline:
  synthetic correlated ratings), AUC with public labels, the duplicate-pair ratio of 11
  categories, and the generic protocol on 001 App. D.1's ``auc_one`` / ``ur`` /
  ``ithdigit`` (the shape of 001 Fig. 6);
* the Ghazi baseline (002 App. D.1.3) next to the generic protocol on the same data.

``k`` is the size of the randomized-response domain (for ``ldp-ghazi`` the number of
cells t; its projection dimension d is in the notes). ``seconds`` is the mean wall time
of one run (data generation and the exact statistic excluded). ``mean_abs_error`` is
measured against the exact statistic of the raw data, so it includes the quantization
error. ``bound`` is the square root of the protocol's MSE bound (an upper bound on the
RMSE, hence on the mean absolute error): Theorem 2 of 000 (Lipschitz kernel, simple
rounding) or Theorem 1 (discrete data, no quantization error) for ``ldp-quantized``; the
variance bound of :mod:`fedustat.protocols.local.ghazi` evaluated at the true data plus
the quantization term of Theorem 2 for ``ldp-ghazi``; empty where no bound applies.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import fedustat
from fedustat.datasets.synthetic import auc_one, classifier_scores, ithdigit, ur
from fedustat.protocols.local import ghazi as ldp_ghazi
from fedustat.protocols.local import quantized_rr as ldp_generic
from fedustat.stats import (
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
)
from fedustat.stats.ustat import ustatistic

GINI = gini_kernel((0.0, 1.0))
KENDALL = kendall_tau_kernel("a")
AUC = auc_kernel()
DUPLICATE = duplicate_pair_kernel()
RATINGS = list(range(1, 7))


def _ratings(n: int, rng: np.random.Generator) -> np.ndarray:
    """Correlated 1-6 ratings (y, z): z is y moved by -1, 0 or +1 step, clipped."""
    y = rng.integers(1, 7, n)
    z = np.clip(y + rng.integers(-1, 2, n), 1, 6)
    return KENDALL.pack(y, z)


def _run(protocol: str, kernel: Any, data: np.ndarray, exact: float, epsilon: float,
         runs: int, seed: int, **params: Any) -> tuple[list[Any], float, float]:
    """``runs`` estimates; returns them, the mean seconds and the mean absolute error."""
    estimates, seconds = [], []
    for r in range(runs):
        start = time.perf_counter()
        est = fedustat.estimate(kernel, data, protocol=protocol, epsilon=epsilon,
                                rng=seed * 1000 + r, **params)
        seconds.append(time.perf_counter() - start)
        estimates.append(est)
    errors = [abs(e.raw_value - exact) for e in estimates]  # bounds are for raw releases
    return estimates, float(np.mean(seconds)), float(np.mean(errors))


def _row(protocol: str, case: str, n: int, k: int, epsilon: float, runs: int,
         seconds: float, error: float, bound: float | None, notes: str) -> dict[str, Any]:
    return {"protocol": protocol, "case": case, "n": n, "k": k, "epsilon": epsilon,
            "runs": runs, "seconds": seconds, "mean_abs_error": error, "bound": bound,
            "notes": notes}


def _generic_notes(estimates: list[Any]) -> str:
    last = estimates[-1]
    diag = last.diagnostics
    se = np.mean([e.std_error for e in estimates if e.std_error is not None])
    parts = [f"mean std_error={se:.3g}", f"bits/party={last.cost.bits_per_party:g}",
             f"kernel={diag['quantized_kernel']}"]
    bound = diag.get("quantization_error_bound_estimate")
    if bound:
        parts.append(f"Remark-4 bound (from reports)={bound:.3g}")
    return ", ".join(parts)


def _theorem2_rmse(n: int, k: int, epsilon: float) -> float:
    # Gini on [0, 1]: f in [0, 1], 1-Lipschitz (000 Thm 2, first bullet).
    return math.sqrt(ldp_generic.theorem2_mse_bound(n, k, epsilon, lipschitz=1.0))


def timing_row(quick: bool) -> dict[str, Any]:
    """The 10^7-party, k = 256 end-to-end timing (10^6 in quick mode)."""
    n = 10**6 if quick else 10**7
    rng = np.random.default_rng(1)
    x = rng.random(n)
    exact = ustatistic(GINI, x)
    estimates, seconds, error = _run("ldp-quantized", GINI, x, exact, 1.0, 1, 1, k=256)
    return _row("ldp-quantized", "Gini, uniform [0,1], timing", n, 256, 1.0, 1, seconds,
                error, _theorem2_rmse(n, 256, 1.0),
                "end to end via fedustat.estimate; " + _generic_notes(estimates))


def gini_rows(quick: bool) -> list[dict[str, Any]]:
    n, runs = (20_000, 5) if quick else (100_000, 20)
    rng = np.random.default_rng(2)
    x = rng.random(n)
    exact = ustatistic(GINI, x)
    out = []
    for eps in (1.0, 4.0):
        k_default = fedustat.protocols.local.quantization.corollary1_k(n, eps)
        for k, label in ((None, f"k from Corollary 1 ({k_default})"), (8, "k = 8"),
                         (64, "k = 64")):
            estimates, seconds, error = _run("ldp-quantized", GINI, x, exact, eps, runs, 2,
                                             k=k)
            kk = estimates[-1].diagnostics["k"]
            out.append(_row("ldp-quantized", f"Gini, uniform [0,1], {label}", n, kk, eps, runs,
                            seconds, error, _theorem2_rmse(n, kk, eps),
                            _generic_notes(estimates)))
        for method in ("avg", "center"):
            estimates, seconds, error = _run("ldp-quantized", GINI, x, exact, eps, runs, 2, k=8,
                                             quantized_kernel=method)
            out.append(_row("ldp-quantized", f"Gini, uniform [0,1], k = 8, {method} kernel", n,
                            8, eps, runs, seconds, error, None, _generic_notes(estimates)))
        estimates, seconds, error = _run("ldp-quantized", GINI, x, exact, eps, runs, 2,
                                         k=k_default, quantizer="randomized")
        out.append(_row("ldp-quantized", f"Gini, randomized rounding, k = {k_default}", n,
                        k_default, eps, runs, seconds, error, None, _generic_notes(estimates)))
    return out


def ghazi_rows(quick: bool) -> list[dict[str, Any]]:
    n, runs = (20_000, 5) if quick else (100_000, 10)
    rng = np.random.default_rng(3)
    x = rng.random(n)
    exact = ustatistic(GINI, x)
    out = []
    for eps in (1.0, 4.0):
        for k in (8, 16):
            for mechanism in ("l2-sphere", "laplace"):
                estimates, seconds, error = _run("ldp-ghazi", GINI, x, exact, eps, runs, 3, k=k,
                                                 mechanism=mechanism)
                proto = ldp_ghazi.GhaziProjection(GINI, eps, k=k, mechanism=mechanism)
                bound = _ghazi_bound(proto, x[:, None], n, k, eps)
                diag = estimates[-1].diagnostics
                out.append(_row(
                    "ldp-ghazi", f"Gini, uniform [0,1], {mechanism}", n, k, eps, runs, seconds,
                    error, bound,
                    f"d={diag['dim']}, gamma2<={diag['gamma2_upper_bound']:.3g}, "
                    f"bits/party={estimates[-1].cost.bits_per_party:g}, mean std_error="
                    f"{np.mean([e.std_error for e in estimates]):.3g}"))
            estimates, seconds, error = _run("ldp-quantized", GINI, x, exact, eps, runs, 3, k=k)
            out.append(_row("ldp-quantized", "Gini, uniform [0,1], same data as ldp-ghazi", n,
                            k, eps, runs, seconds, error, _theorem2_rmse(n, k, eps),
                            _generic_notes(estimates)))
    data = _ratings(n, np.random.default_rng(4))
    exact_tau = ustatistic(KENDALL, data)
    for protocol in ("ldp-ghazi", "ldp-quantized"):
        estimates, seconds, error = _run(protocol, KENDALL, data, exact_tau, 4.0, runs, 4,
                                         domain=[RATINGS, RATINGS])
        bound = (math.sqrt(ldp_generic.theorem1_variance_bound(n, 36, 4.0, (-1, 1)))
                 if protocol == "ldp-quantized" else None)
        out.append(_row(protocol, "Kendall tau-a, 6 x 6 ratings", n, 36, 4.0, runs, seconds,
                        error, bound, f"bits/party={estimates[-1].cost.bits_per_party:g}, "
                        f"mean std_error={np.mean([e.std_error for e in estimates]):.3g}"))
    return out


def _ghazi_bound(proto: ldp_ghazi.GhaziProjection, data: np.ndarray, n: int, k: int,
                 eps: float) -> float:
    """sqrt(variance upper bound at the true cells + Theorem 2's quantization term)."""
    grid = proto.grid_for(n)
    setup = proto.setup_for(grid)
    v = setup.vectors[:, grid.encode(data)]
    d, c = setup.half, setup.randomizer.second_moment
    vbar = v.mean(axis=1)
    ks_vbar2 = 0.25 * float(vbar @ vbar)
    ks_max2 = 0.25 * float((setup.vectors**2).sum(axis=0).max())
    var_half = c * (n * n * (n - 2) * ks_vbar2 + n * ks_max2) + n * (n - 1) / 2 * c * c * d / 2
    variance = 4 * var_half / (n * (n - 1)) ** 2
    return math.sqrt(variance + 1.0 / (2 * k * k))


def kendall_auc_duplicate_rows(quick: bool) -> list[dict[str, Any]]:
    out = []
    n, runs = (24_600, 5) if quick else (246_000, 10)
    data = _ratings(n, np.random.default_rng(5))
    exact = ustatistic(KENDALL, data)
    for eps in (1.0, 2.0, 4.0):
        estimates, seconds, error = _run("ldp-quantized", KENDALL, data, exact, eps, runs, 5,
                                         domain=[RATINGS, RATINGS])
        out.append(_row("ldp-quantized", "Kendall tau-a, 6 x 6 ratings (discrete)", n, 36, eps,
                        runs, seconds, error,
                        math.sqrt(ldp_generic.theorem1_variance_bound(n, 36, eps, (-1, 1))),
                        f"tau-a={exact:.3f}; " + _generic_notes(estimates)))

    n_class, runs = (10_000, 5) if quick else (100_000, 10)
    ds = classifier_scores(n_class, n_class, 0.8, rng=6)
    scores = 1.0 / (1.0 + np.exp(-ds.columns["score"]))
    data = AUC.pack(scores, ds.columns["label"])
    exact = AUC.statistic(ustatistic(AUC, data), data)
    for k in (8, 32):
        estimates, seconds, error = _run("ldp-quantized", AUC, data, exact, 1.0, runs, 6, k=k,
                                         bounds=(0.0, 1.0))
        out.append(_row("ldp-quantized", "AUC, binormal 0.8 scores in [0,1], labels public",
                        2 * n_class, k, 1.0, runs, seconds, error, None,
                        _generic_notes(estimates)))

    n, runs = (20_000, 5) if quick else (100_000, 20)
    cats = np.random.default_rng(7).choice(11, size=n, p=np.arange(1, 12) / 66.0)
    exact = ustatistic(DUPLICATE, cats)
    estimates, seconds, error = _run("ldp-quantized", DUPLICATE, cats, exact, 1.0, runs, 7,
                                     domain=list(range(11)))
    out.append(_row("ldp-quantized", "duplicate-pair ratio, 11 categories", n, 11, 1.0, runs,
                    seconds, error, math.sqrt(ldp_generic.theorem1_variance_bound(n, 11, 1.0)),
                    f"ratio={exact:.4f}; " + _generic_notes(estimates)))
    return out


def paper_synthetic_rows(quick: bool) -> list[dict[str, Any]]:
    """001 App. D.1 data sets with the generic protocol (the shape of 001 Fig. 6)."""
    n_class, runs = (10_000, 3) if quick else (100_000, 5)
    out = []
    makers: list[tuple[str, Callable[[int], Any]]] = [
        ("auc_one", lambda a: auc_one(a, n_class, rng=8)),
        ("ur", lambda a: ur(a, n_class, rng=8)),
    ]
    for name, make in makers:
        for alpha in (2, 4, 6):
            ds = make(alpha)
            d = 2**alpha
            data = AUC.pack(ds.columns["score"], ds.columns["label"])
            exact = AUC.statistic(ustatistic(AUC, data), data)
            estimates, seconds, error = _run("ldp-quantized", AUC, data, exact, 1.0, runs, 8,
                                             domain=list(range(d)))
            out.append(_row("ldp-quantized", f"{name} (001 D.1), d = {d}, discrete", 2 * n_class,
                            d, 1.0, runs, seconds, error, None, _generic_notes(estimates)))
    ds = ithdigit(n_class, rng=8)
    data = AUC.pack(ds.columns["score"], ds.columns["label"])
    for k in (16, 256):
        estimates, seconds, error = _run("ldp-quantized", AUC, data, 1.0, 1.0, runs, 9, k=k,
                                         bounds=(0.0, 1.0))
        out.append(_row("ldp-quantized", f"ithdigit (001 D.1), [0,1] in k = {k} bins",
                        2 * n_class, k, 1.0, runs, seconds, error, None,
                        "all scores fall in bin 0: the quantized AUC is 1/2; "
                        + _generic_notes(estimates)))
    return out


def rows(quick: bool = False) -> list[dict[str, Any]]:
    """All benchmark rows (``quick`` uses smaller n and fewer runs)."""
    return [timing_row(quick), *gini_rows(quick), *kendall_auc_duplicate_rows(quick),
            *paper_synthetic_rows(quick), *ghazi_rows(quick)]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller n, fewer runs")
    args = parser.parse_args(argv)
    table = rows(args.quick)
    cols = ["protocol", "case", "n", "k", "epsilon", "runs", "seconds", "mean_abs_error",
            "bound", "notes"]
    print(" | ".join(cols))
    for row in table:
        print(" | ".join(_fmt(row[c]) for c in cols))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
