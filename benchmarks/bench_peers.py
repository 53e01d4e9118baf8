"""Side-by-side benchmarks with existing tools, in one run.

Usage::

    .venv/bin/python benchmarks/bench_peers.py [--quick] [--only exact,hadamard,...]
                                               [--seed 0] [--markdown]

Prints one table per comparison; every ratio is *ours / theirs* (below 1: we are faster,
or our error is smaller):

1. ``exact``: AUC vs ``sklearn.metrics.roc_auc_score`` and Kendall's tau-b vs
   ``scipy.stats.kendalltau`` at n = 10^6 (the table of ``bench_exact.py``, reused).
2. ``hadamard``: our frequency oracles (001's one-bit Hadamard response and the oracle of
   least exact variance, subset selection) vs pure-ldp's Hadamard mechanism with t = 1
   (the same one-bit mechanism), its Hadamard response (Acharya, Sun and Zhang), direct
   encoding, OUE, OLH and SUE at equal epsilon: time to privatize and aggregate, the
   empirical variance of the count estimates next to each mechanism's exact variance, and
   our best over pure-ldp's best per cell.
3. ``ecdf``: our DP ECDF (003 Sec. 3.1, Eq. 2) and quantiles (003 Alg. 1) vs OpenDP's
   b-ary tree (``make_b_ary_tree`` + ``make_consistent_b_ary_tree`` + ``make_cdf`` /
   ``make_quantiles_from_counts``), OpenDP's exponential-mechanism quantile
   (``make_private_quantile``) and diffprivlib's ``tools.quantile`` on the Poisson data of
   003 Sec. 6.2, all at the same epsilon under the same adjacency (replace one record).
4. ``smoothing``: our solvers for 003 Eq. 3 vs its CVXOPT formulation (the table of
   ``bench_ecdf.py``, reused, with the ratio ours / CVXOPT added).
5. ``fedauc``: FedAUC (004) vs the authors' DPAUC code: whether it can run here, and why not.
6. ``quantiles``: private quantiles at m = 1, 4 and 16 levels and equal total epsilon: our
   ``dp_quantiles`` (default and each method) vs OpenDP's exponential mechanism and b-ary
   tree quantiles and diffprivlib's ``tools.quantile``, with the ratio ours / best peer.
7. ``roc``: the DP ROC curve (003 Sec. 5.1) per class-curve release (hierarchical with a
   private total, 003's tree) and estimator (raw, 003's smoothing, isotonic, debiased) on
   issue 15's setting (n = 2000, 256 thresholds, exact AUC 0.801): bias, RMSE,
   reported standard error and interval coverage of the AUC, L1 distance of the curve. No
   peer library releases a DP ROC curve, so the table compares our options.
8. ``ldp_tree``: ``ldp-tree``'s AUC error vs epsilon in 001's Fig. 5 setting with 001's
   one-bit Hadamard response and with the default per-level oracle (no peer: the
   before/after of issue 15).
9. ``fedecdf``: the federated ECDF (secure aggregation, 003 Sec. 4.1) on the hierarchical
   tree vs 003's tree and vs the central release.

``--quick`` finishes in about 45 s here, the full run in about 8 minutes (2 shared cores;
``quantiles`` alone about 4). A peer
that is not installed gives a row saying so (``pip install pure-ldp diffprivlib opendp
cvxopt``; pure-ldp also imports scikit-learn and statsmodels without declaring them).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import math
import random
import re
import statistics
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedustat.datasets import poisson_ecdf
from fedustat.privacy.frequency_oracles import LocalHashing, best_frequency_oracle
from fedustat.privacy.randomizers import HadamardResponse
from fedustat.protocols.ecdf import dp_ecdf, dp_quantile, pointwise_ecdf
from fedustat.protocols.ecdf.smoothing import smooth

COMPARISONS = ("exact", "hadamard", "ecdf", "smoothing", "fedauc", "quantiles", "roc",
               "ldp_tree", "fedecdf")
QUANTILE_LEVELS = (0.25, 0.5, 0.75, 0.9)


# --------------------------------------------------------------------------- tables


@dataclass
class Table:
    """A printed comparison: formatted rows plus the raw numbers behind them."""

    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    preamble: list[str] = field(default_factory=list)

    def add(self, cells: Sequence[Any], **record: Any) -> None:
        self.rows.append([_fmt(c) for c in cells])
        self.records.append(record)

    def gap(self) -> None:
        """A blank separator row between groups."""
        self.rows.append([""] * len(self.header))

    def render(self) -> str:
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) if self.rows else len(h)
                  for i, h in enumerate(self.header)]

        def line(cells: Sequence[str]) -> str:
            first = cells[0].ljust(widths[0])
            rest = [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
            return "  ".join([first, *rest]).rstrip()

        out = [self.title, "=" * len(self.title), *self.preamble]
        if self.header:
            out += [line(self.header), "-" * len(line(self.header))]
            out += [line(r) for r in self.rows]
        out += [f"  {n}" for n in self.notes]
        return "\n".join(out)


    def render_markdown(self) -> str:
        """The same table in Markdown (a text preamble goes into a code block)."""
        out = [f"### {self.title}", ""]
        if self.preamble:
            out += ["```text", *self.preamble, "```", ""]
        if self.header:
            def line(cells: Sequence[str]) -> str:
                return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

            out += [line(self.header), "|" + "|".join("---" for _ in self.header) + "|"]
            out += [line(r) for r in self.rows if any(r)]
            out.append("")
        out += [f"* {n}" for n in self.notes]
        return "\n".join(out)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if value == 0.0:
            return "0"
        if abs(value) >= 1e4 or abs(value) < 1e-3:
            return f"{value:.3e}"
        return f"{value:.4g}"
    return str(value)


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    if ours is None or theirs is None or not theirs > 0 or math.isnan(ours):
        return None
    return ours / theirs


def _progress(message: str) -> None:
    print(f"  [bench_peers] {message}", file=sys.stderr, flush=True)


def _timed(func: Callable[[], Any]) -> tuple[float, Any]:
    """Wall time of one call, and its value."""
    start = time.perf_counter()
    out = func()
    return time.perf_counter() - start, out


# --------------------------------------------------------------------------- 1. exact


def exact_comparison(n: int = 1_000_000, repeats: int = 3, brute_n: int = 2000,
                     seed: int = 0) -> Table:
    """AUC vs scikit-learn and Kendall tau-b vs SciPy: ``bench_exact.main``, reused.

    Its table already carries the ratio ours / reference (median of ``repeats`` timed
    calls after a warm-up) and the largest absolute difference of the values.
    """
    import bench_exact

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        bench_exact.main(["--n", str(n), "--repeats", str(repeats), "--brute-n", str(brute_n),
                          "--seed", str(seed)])
    lines = buf.getvalue().rstrip("\n").splitlines()
    table = Table("1. Exact statistics vs scikit-learn / SciPy (bench_exact.py)", [])
    table.preamble = lines
    # Keep the numbers of the peer rows for callers (tests, documentation).
    pattern = re.compile(r"^(AUC vs sklearn|Kendall tau-b vs SciPy)\s+(.+?)\s+(\d+)\s+"
                         r"([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)$")
    for text in lines:
        match = pattern.match(text)
        if match:
            table.records.append({"statistic": match[1], "data": match[2], "n": int(match[3]),
                                  "ours": float(match[4]), "theirs": float(match[5]),
                                  "ratio": float(match[6]), "max_abs_diff": float(match[7])})
    table.notes.append("ratio = our time / the reference's time (median of the timed calls).")
    return table


# --------------------------------------------------------------------------- 2. Hadamard


@contextlib.contextmanager
def _seeded_global_random(key: list[int]) -> Iterator[None]:
    """pure-ldp draws from the global ``random`` and ``numpy.random`` states: seed them from
    ``key`` and restore them afterwards, so that the benchmark is reproducible and leaves
    no trace."""
    py_state, np_state = random.getstate(), np.random.get_state()
    seed = int(np.random.SeedSequence(key).generate_state(1)[0])
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)


def _load_pure_ldp() -> tuple[types.ModuleType | None, str]:
    try:
        module = importlib.import_module("pure_ldp.frequency_oracles")
    except ImportError as exc:  # not installed, or its undeclared imports are missing
        return None, f"pure-ldp not available (cannot import {exc.name or exc})"
    return module, "pure-ldp " + _version("pure-ldp")


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def _zipf_data(d: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """Codes 0..d-1 with Zipf(1.1) frequencies: a skewed histogram, fixed per configuration."""
    weights = 1.0 / np.arange(1, d + 1) ** 1.1
    return rng.choice(d, size=n, p=weights / weights.sum())


def _hr_general_variance(hr: Any, codes: np.ndarray, epsilon: float, d: int) -> float:
    """Mean over the domain of Var(count estimate) for pure-ldp's general-regime HR.

    Derived from its encoder (``Hadamard_Rand_general_original.encode_symbol``): with
    ``B`` blocks of ``b`` outputs, ``r = 2B - 1 + e^eps`` and ``m = e^eps - 1``, a report
    is uniform on all ``B b`` outputs with probability ``2B / r`` and otherwise uniform on
    the ``b/2`` outputs of its block where the input's Hadamard row is +1. The decoder's
    count estimate for ``i`` sums ``(r/m)(2 Z - W)`` over the reports (``W``: the report
    lies in ``i``'s block; ``Z``: it lies where row ``i`` is +1), whose square is
    ``(r/m)^2 W`` with ``P(W) = (2 + m [x in block(i)]) / r``. Hence
    ``Var_i = (r/m^2)(2n + m n_block(i)) - count_i``, averaged over ``i`` below.
    """
    n = codes.size
    e = math.exp(epsilon)
    r, m = 2 * hr.part - 1 + e, e - 1.0
    per_block = hr.partsz - 1  # inputs per block (the block's first row is never used)
    block_of = np.asarray(hr.permute, dtype=np.int64) // per_block
    block_size = np.bincount(block_of)
    # sum_i n_block(i) = sum over reports of the size of the report's block.
    sum_n_block = float(block_size[block_of[codes]].sum())
    return (r / m**2) * 2 * n + (r / m) * sum_n_block / d - n / d


def _pure_variance(p: float, q: float, counts: np.ndarray) -> float:
    """Mean over the domain of the exact count variance of a "pure" oracle (support
    probabilities p for the input, q for any other value; Wang et al. 2017, Eq. 2):
    ``(n_v p(1-p) + (n - n_v) q(1-q)) / (p - q)^2``."""
    n = float(counts.sum())
    return float(np.mean(counts * p * (1 - p) + (n - counts) * q * (1 - q)) / (p - q) ** 2)


def _pure_ldp_laws(pure_ldp: types.ModuleType, d: int, eps: float
                   ) -> dict[str, tuple[float, float]]:
    """(p, q) of pure-ldp's DE, OUE, SUE and OLH, read from its own clients (and, as
    "OLH bits", OLH's report size: a value below g and a 63-bit hash seed)."""
    de = pure_ldp.DEClient(eps, d)
    oue = pure_ldp.UEClient(eps, d, use_oue=True)
    sue = pure_ldp.UEClient(eps, d, use_oue=False)
    olh = pure_ldp.LHClient(eps, d, use_olh=True)
    # OLH: a value other than the input hashes onto the report with probability 1/g
    # (ideal hashing; pure-ldp hashes with xxhash).
    return {"DE": (de.p, de.q), "OUE": (oue.p, oue.q), "SUE": (sue.p, sue.q),
            "OLH": (olh.p, 1.0 / olh.g), "OLH bits": (max(1, (olh.g - 1).bit_length()) + 63,
                                                     0.0)}


def hadamard_comparison(domains: Sequence[int] = (64, 1024),
                        sizes: Sequence[int] = (100_000,),
                        epsilons: Sequence[float] = (1.0, 4.0),
                        reps: int | Callable[[int], int] = 5, seed: int = 0,
                        ue_max_cells: int = 110_000_000) -> Table:
    """Our frequency oracles vs pure-ldp's at equal epsilon.

    For each (d, n, eps) the data (Zipf over 0..d-1) are fixed and each mechanism runs
    ``reps`` times. Ours: the one-bit Hadamard response (001 App. B.2.1) and the oracle
    :func:`fedustat.privacy.frequency_oracles.best_frequency_oracle` picks by exact
    variance (subset selection with its best k in every cell here). pure-ldp: its
    Hadamard mechanism with t = 1, its Hadamard response (Acharya, Sun and Zhang), direct
    encoding (k-ary randomized response) and optimized unary encoding (OUE, run when
    n d <= ``ue_max_cells``: pure-ldp builds a d-vector per report), plus OLH and SUE
    by their exact law only (pure-ldp's OLH aggregation makes n d Python hash calls).
    Time: privatize every report plus aggregate and estimate all d counts (median over
    runs). Variance: the mean over runs and domain values of the squared error of the
    count estimates (all estimators are unbiased, so it estimates the mean variance),
    divided by n, next to the exact value; ``s.e.`` treats the d values per run as
    independent. The last two columns, on the row of the chooser's pick, divide its
    variance by the least of pure-ldp's rows (exact: every row; emp.: the rows run).
    """
    pure_ldp, peer_name = _load_pure_ldp()
    table = Table(
        "2. Frequency oracles: ours vs pure-ldp (equal epsilon; ratios ours 1-bit/this)",
        ["d", "n", "eps", "mechanism", "bits", "runs", "privatize (s)", "aggregate (s)",
         "total (s)", "time ratio", "var/n emp.", "var/n exact", "emp/exact", "+-s.e.",
         "var ratio", "best/peer best exact", "best/peer best emp."])
    rng = np.random.default_rng(seed)
    for d in domains:
        for n in sizes:
            codes = _zipf_data(d, n, rng)
            counts = np.bincount(codes, minlength=d).astype(np.float64)
            values_1 = (codes + 1).tolist()  # pure-ldp's default index mapper is x - 1
            runs = reps(n) if callable(reps) else reps
            for eps in epsilons:
                _progress(f"hadamard d={d} n={n} eps={eps:g}")
                ours = HadamardResponse(d, eps)
                exact_ours = float(ours.count_variance(counts).mean())
                # One seed sequence per configuration and mechanism, one child per run.
                key = [seed, d, n, round(eps * 1000)]
                results = [_run_ours(ours, codes, counts, runs, [*key, 0])]
                best = best_frequency_oracle(d, eps)
                if not isinstance(best, HadamardResponse):
                    results.append(_run_ours_oracle(best, codes, counts, runs, [*key, 5]))
                pick = len(results) - 1
                # Local hashing: O(log d) bits; its server evaluates every report's hash
                # on the whole domain (n d work), so it runs under the same cell limit.
                olh = LocalHashing(d, eps)
                if n * d <= ue_max_cells:
                    results.append(_run_ours_oracle(olh, codes, counts, min(runs, 3),
                                                    [*key, 6]))
                else:
                    results.append(_exact_only(f"ours: local hashing g={olh.g} (exact law)",
                                               olh.report_bits,
                                               float(olh.count_variance(counts).mean()), n))
                peers: list[dict[str, Any]] = []
                if pure_ldp is not None:
                    peers.append(_run_pure_ldp_hm(pure_ldp, d, eps, runs, counts, values_1,
                                                  exact_ours, [*key, 1]))
                    peers.append(_run_pure_ldp_hr(pure_ldp, d, eps, runs, counts, values_1,
                                                  codes, [*key, 2]))
                    laws = _pure_ldp_laws(pure_ldp, d, eps)
                    peers.append(_run_pure_ldp_simple(
                        pure_ldp, "DE", d, eps, runs, counts, values_1,
                        _pure_variance(*laws["DE"], counts), [*key, 3]))
                    exact_oue = _pure_variance(*laws["OUE"], counts)
                    if n * d <= ue_max_cells:
                        peers.append(_run_pure_ldp_simple(
                            pure_ldp, "OUE", d, eps, min(runs, 3), counts, values_1,
                            exact_oue, [*key, 4]))
                    else:
                        peers.append(_exact_only("pure-ldp OUE (exact law)", d, exact_oue,
                                                 n))
                    peers.append(_exact_only("pure-ldp OLH (exact law)",
                                             int(laws["OLH bits"][0]),
                                             _pure_variance(*laws["OLH"], counts), n))
                    peers.append(_exact_only("pure-ldp SUE (exact law)", d,
                                             _pure_variance(*laws["SUE"], counts), n))
                results += peers
                base = results[0]
                peer_exact = min((r["var_exact"] for r in peers), default=None)
                peer_emp = min((r["var_emp"] for r in peers if r["var_emp"] is not None),
                               default=None)
                for i, res in enumerate(results):
                    chosen = i == pick
                    if chosen:
                        res["best_over_peer_exact"] = _ratio(res["var_exact"], peer_exact)
                        res["best_over_peer_emp"] = _ratio(res["var_emp"], peer_emp)
                    table.add(
                        [d, n, _fmt(eps), res["name"], res["bits"], res["runs"],
                         res["t_priv"], res["t_agg"], res["t_total"],
                         _ratio(base["t_total"], res["t_total"]), res["var_emp"],
                         res["var_exact"], res["emp_over_exact"], res["se"],
                         _ratio(base["var_emp"], res["var_emp"]),
                         res.get("best_over_peer_exact") if chosen else None,
                         res.get("best_over_peer_emp") if chosen else None],
                        d=d, n=n, epsilon=eps, chosen=chosen, **res)
                if pure_ldp is None:
                    table.add([d, n, _fmt(eps), peer_name] + [None] * 13, d=d, n=n,
                              epsilon=eps, name=peer_name)
                table.gap()
    if table.rows and not any(table.rows[-1]):
        table.rows.pop()
    table.notes += [
        "var/n: mean over the domain of Var(count estimate) / n, i.e. n x the variance of a "
        "frequency; 'emp.' from the runs, 'exact' from each mechanism's output law.",
        "ours (chooser): fedustat.privacy.frequency_oracles.best_frequency_oracle, the "
        "oracle of least exact variance; subset selection (Wang et al. 2016; Ye and Barg "
        "2018) reports k values, k ceil(log2 d) bits; exact variance (n_v p(1-p) + "
        "(n - n_v) q(1-q))/(p - q)^2.",
        "ours: local hashing (Wang et al. 2017, OLH) with an exactly pairwise-uniform "
        "linear hash over Z_g, g the prime of least exact variance: (L + 2) ceil(log2 g) "
        "bits; what the chooser returns under a small bit budget (run when n d <= the "
        "cell limit, at most 3 runs).",
        "ours 1-bit and pure-ldp HM (t=1) are the same mechanism (index j uniform, the sign "
        "of H[j, x] kept w.p. e^eps/(1+e^eps)): exact variance n c^2 - count, "
        "c = (e^eps+1)/(e^eps-1) (001 Lemma 5 with the n - count term).",
        "pure-ldp HR is Acharya-Sun-Zhang's Hadamard response: eps <= 1 uses its "
        "high-privacy variant (2d outputs, like ours, and the same variance); eps > 1 its "
        "general variant with B = 2^floor(log2 min(2d, e^eps)) blocks; its exact variance "
        "is derived in _hr_general_variance.",
        "pure-ldp DE, OUE, SUE, OLH: exact variance by Wang et al. 2017 (Eq. 2) with the p "
        "and q of pure-ldp's clients (OLH: g = round(e^eps) + 1 and ideal hashing, q = 1/g); "
        "OLH and SUE are not run (OLH's server makes n d Python xxhash calls; SUE is OUE "
        "with worse p, q), OUE only when n d <= the cell limit. pure-ldp's other oracles "
        "(histogram encoding, RAPPOR, Apple CMS, sketches) add Laplace noise or hash "
        "collisions on top of these and have larger variance (Wang et al. 2017, Sec. 5).",
        "best/peer best: the chooser's pick over the least pure-ldp variance of the cell "
        "(exact: all pure-ldp rows; emp.: the rows that ran); below 1 we are more accurate.",
        "time: median over runs, one process; pure-ldp privatizes one report per Python "
        "call; subset selection privatizes and aggregates in blocks of 2^15 reports.",
    ]
    return table


def _exact_only(name: str, bits: int, var_exact: float, n: int) -> dict[str, Any]:
    return {"name": name, "bits": bits, "runs": 0, "t_priv": None, "t_agg": None,
            "t_total": None, "var_emp": None, "var_exact": var_exact / n,
            "emp_over_exact": None, "se": None}


def _run_ours_oracle(oracle: Any, codes: np.ndarray, counts: np.ndarray, runs: int,
                     key: list[int], block: int = 1 << 15) -> dict[str, Any]:
    """The chooser's oracle, privatized and summarized block by block (its summary adds
    up over blocks), then estimated once."""
    exact = float(oracle.count_variance(counts).mean())

    def run(k: int) -> tuple[float, float, np.ndarray]:
        run_rng = np.random.default_rng([*key, k])
        t_priv = t_agg = 0.0
        summary = None
        for start in range(0, codes.size, block):
            tp, reports = _timed(lambda s=start: oracle.randomize(codes[s:s + block], run_rng))
            ta, part = _timed(lambda r=reports: oracle.summarize(r))
            t_priv += tp
            t_agg += ta
            summary = part if summary is None else summary.combine(part)
        ta, est = _timed(lambda: oracle.estimate_from_summary(summary))
        return t_priv, t_agg + ta, est

    if isinstance(oracle, LocalHashing):
        label = f"ours: local hashing g={oracle.g}"
    elif hasattr(oracle, "k"):
        label = f"ours: chooser -> subset sel. k={oracle.k}"
    else:
        label = f"ours: chooser -> {oracle.name}"
    return _run_oracle(label, oracle.report_bits, runs, counts, run, lambda _k: exact)


def _run_pure_ldp_simple(pure_ldp: types.ModuleType, which: str, d: int, eps: float,
                         runs: int, counts: np.ndarray, values_1: list[int],
                         exact: float, key: list[int], block: int = 10_000
                         ) -> dict[str, Any]:
    """pure-ldp's direct encoding or OUE, privatized and aggregated block by block (an
    OUE report is a d-vector: blocks keep the memory bounded)."""
    def run(k: int) -> tuple[float, float, np.ndarray]:
        with _seeded_global_random([*key, k]), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            if which == "DE":
                client, server = pure_ldp.DEClient(eps, d), pure_ldp.DEServer(eps, d)
            else:
                client = pure_ldp.UEClient(eps, d, use_oue=True)
                server = pure_ldp.UEServer(eps, d, use_oue=True)
            t_priv = t_agg = 0.0
            for start in range(0, len(values_1), block):
                chunk = values_1[start:start + block]
                tp, reports = _timed(lambda c=chunk: [client.privatise(v) for v in c])
                ta, _ = _timed(lambda r=reports: server.aggregate_all(r))
                t_priv += tp
                t_agg += ta
            ta, est = _timed(lambda: np.asarray(
                server.estimate_all(range(1, d + 1), suppress_warnings=True)))
        return t_priv, t_agg + ta, est

    bits = max(1, (d - 1).bit_length()) if which == "DE" else d
    return _run_oracle(f"pure-ldp {which}", bits, runs, counts, run, lambda _k: exact)


def _run_oracle(name: str, bits: int, runs: int, counts: np.ndarray,
                run: Callable[[int], tuple[float, float, np.ndarray]],
                exact: Callable[[int], float]) -> dict[str, Any]:
    """Run one oracle ``runs`` times; summarize time and squared error per count / n."""
    n = float(counts.sum())
    t_priv, t_agg, sq, exact_values = [], [], [], []
    for k in range(runs):
        tp, ta, est = run(k)
        t_priv.append(tp)
        t_agg.append(ta)
        sq.append((np.asarray(est, dtype=np.float64) - counts) ** 2 / n)
        exact_values.append(exact(k))
    all_sq = np.concatenate(sq)
    var_emp = float(all_sq.mean())
    var_exact = float(np.mean(exact_values)) / n
    se = float(all_sq.std(ddof=1) / math.sqrt(all_sq.size)) / var_exact
    totals = [a + b for a, b in zip(t_priv, t_agg, strict=True)]
    return {"name": name, "bits": bits, "runs": runs, "t_priv": statistics.median(t_priv),
            "t_agg": statistics.median(t_agg), "t_total": statistics.median(totals),
            "var_emp": var_emp, "var_exact": var_exact,
            "emp_over_exact": var_emp / var_exact, "se": se}


def _run_ours(hr: HadamardResponse, codes: np.ndarray, counts: np.ndarray, runs: int,
              key: list[int]) -> dict[str, Any]:
    exact = float(hr.count_variance(counts).mean())

    def run(k: int) -> tuple[float, float, np.ndarray]:
        run_rng = np.random.default_rng([*key, k])
        t_priv, (j, bits) = _timed(lambda: hr.randomize(codes, run_rng))
        t_agg, est = _timed(lambda: hr.estimate_frequencies(j, bits))
        return t_priv, t_agg, est

    return _run_oracle("ours: 1-bit HR", int(math.log2(hr.d)) + 1, runs, counts,
                       run, lambda _k: exact)


def _run_pure_ldp_hm(pure_ldp: types.ModuleType, d: int, eps: float, runs: int,
                     counts: np.ndarray, values_1: list[int], exact_ours: float,
                     key: list[int]) -> dict[str, Any]:
    def run(k: int) -> tuple[float, float, np.ndarray]:
        with _seeded_global_random([*key, k]), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # its small-n / small-eps notes
            # Its high-privacy HR calls random.randint with a float bound (deprecated since
            # Python 3.10, an error from 3.12 on).
            warnings.simplefilter("ignore", DeprecationWarning)
            client = pure_ldp.HadamardMechClient(eps, d, t=1)
            server = pure_ldp.HadamardMechServer(eps, d, t=1)
            t_priv, reports = _timed(lambda: [client.privatise(v) for v in values_1])

            def aggregate() -> np.ndarray:
                server.aggregate_all(reports)
                return np.asarray(server.estimate_all(range(1, d + 1), suppress_warnings=True))

            t_agg, est = _timed(aggregate)
        return t_priv, t_agg, est

    return _run_oracle("pure-ldp HM t=1 (same)", int(math.log2(d)) + 1, runs,
                       counts, run, lambda _k: exact_ours)


def _run_pure_ldp_hr(pure_ldp: types.ModuleType, d: int, eps: float, runs: int,
                     counts: np.ndarray, values_1: list[int], codes: np.ndarray,
                     key: list[int]) -> dict[str, Any]:
    exact_by_run: dict[int, float] = {}
    bits = [0]
    c2 = (math.exp(eps) + 1) ** 2 / math.expm1(eps) ** 2
    n = codes.size

    def run(k: int) -> tuple[float, float, np.ndarray]:
        with _seeded_global_random([*key, k]), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # its small-n / small-eps notes
            # Its high-privacy HR calls random.randint with a float bound (deprecated since
            # Python 3.10, an error from 3.12 on).
            warnings.simplefilter("ignore", DeprecationWarning)
            # The server draws the input permutation of the general variant; the client
            # must use the same one (pure-ldp's get_hash_funcs).
            server = pure_ldp.HadamardResponseServer(eps, d)
            client = pure_ldp.HadamardResponseClient(eps, d, server.get_hash_funcs())
            t_priv, reports = _timed(lambda: [client.privatise(v) for v in values_1])

            def aggregate() -> np.ndarray:
                server.aggregate_all(reports)
                return np.asarray(server.estimate_all(range(1, d + 1), suppress_warnings=True))

            t_agg, est = _timed(aggregate)
        hr = server.hr
        bits[0] = int(hr.outbit)
        if hasattr(hr, "partsz"):
            exact_by_run[k] = _hr_general_variance(hr, codes, eps, d)
        else:
            # High-privacy HR: a report falls in row i's +1 half w.p. 1/2 + [x = i](p - 1/2),
            # so Var(count estimate) = n c^2 - count_i, as for ours.
            exact_by_run[k] = n * c2 - n / d
        return t_priv, t_agg, est

    res = _run_oracle("pure-ldp HR (Acharya et al.)", 0, runs, counts, run,
                      lambda k: exact_by_run[k])
    res["bits"] = bits[0]
    variant = "general" if eps > 1 else "high-priv."
    res["name"] = f"pure-ldp HR {variant}"
    return res


# --------------------------------------------------------------------------- 3. ECDF


def _load_opendp() -> tuple[Any, str]:
    try:
        import opendp.prelude as dp
    except ImportError as exc:
        return None, f"OpenDP not available (cannot import {exc.name or exc})"
    dp.enable_features("contrib")
    return dp, "OpenDP " + _version("opendp")


def _load_diffprivlib_quantile() -> tuple[Callable[..., Any] | None, str]:
    """diffprivlib's ``tools.quantile``, importable even where its models are not.

    diffprivlib 0.6.6's package ``__init__`` imports its machine-learning models, and those
    import ``sklearn.tree._tree.DOUBLE``, which scikit-learn 1.9 removed; the quantile tool
    needs none of them. If the normal import fails for that reason, the ``tools``
    subpackage is loaded under a bare parent package, which is then removed again.
    """
    spec = importlib.util.find_spec("diffprivlib")
    if spec is None:
        return None, "diffprivlib not installed"
    label = "diffprivlib " + _version("diffprivlib")
    try:
        from diffprivlib.tools import quantile
    except ImportError:
        parent = types.ModuleType("diffprivlib")
        parent.__path__ = list(spec.submodule_search_locations or [])
        previous = sys.modules.get("diffprivlib")
        sys.modules["diffprivlib"] = parent
        try:
            quantile = importlib.import_module("diffprivlib.tools.quantiles").quantile
        except ImportError as exc:
            return None, f"diffprivlib not available (cannot import {exc.name or exc})"
        finally:
            if previous is None:
                sys.modules.pop("diffprivlib", None)
            else:
                sys.modules["diffprivlib"] = previous
        label += " (tools only: its models do not import with this scikit-learn)"
    return quantile, label


@dataclass
class _Truth:
    """The exact ECDF on the grid and the exact quantiles of one data set."""

    cdf: np.ndarray
    quantiles: np.ndarray


@dataclass
class _Errors:
    """Per-run errors of one method on one configuration."""

    name: str
    times: list[float] = field(default_factory=list)
    cdf_sq: list[float] = field(default_factory=list)
    q_abs: list[np.ndarray] = field(default_factory=list)
    unavailable: str | None = None

    def record(self, truth: _Truth, seconds: float, cdf: Any, q: Any) -> None:
        self.times.append(seconds)
        if cdf is not None:
            self.cdf_sq.append(float(np.mean((np.asarray(cdf, dtype=np.float64)
                                              - truth.cdf) ** 2)))
        self.q_abs.append(np.abs(np.asarray(q, dtype=np.float64) - truth.quantiles))

    def summary(self) -> dict[str, Any]:
        q = np.mean(self.q_abs, axis=0) if self.q_abs else np.full(len(QUANTILE_LEVELS), np.nan)
        return {"name": self.name, "time": statistics.median(self.times) if self.times else None,
                "cdf_rmse": math.sqrt(float(np.mean(self.cdf_sq))) if self.cdf_sq else None,
                "q_mae": q.tolist(), "q_mean": float(np.mean(q)) if self.q_abs else None,
                "runs": len(self.times)}


def _opendp_tree(dp: Any, n_bins: int, branching: int, d_in: int, epsilon: float,
                 alphas: Sequence[float] = QUANTILE_LEVELS
                 ) -> tuple[Callable[[list[int]], Any], Callable[[Any], Any],
                            Callable[[Any], Any], Callable[[Any], Any], float]:
    """OpenDP's b-ary-tree CDF pipeline for integer data on 1..N, eps-DP at ``d_in``.

    Leaves are the counts of each value 1..N (``make_find_bin`` with edges 2..N, left
    inclusive). The Laplace scale is the tree's L1 sensitivity at ``d_in`` over epsilon;
    integer counts get OpenDP's discrete Laplace. Returns the measurement, the consistency
    post-processor, ``make_cdf``, ``make_quantiles_from_counts`` and the privacy loss.
    """
    space = (dp.vector_domain(dp.atom_domain(T=int)), dp.symmetric_distance())
    tree = (space
            >> dp.t.then_find_bin(edges=list(range(2, n_bins + 1)))
            >> dp.t.then_count_by_categories(categories=list(range(n_bins)),
                                             null_category=False)
            >> dp.t.then_b_ary_tree(leaf_count=n_bins, branching_factor=branching))
    meas = tree >> dp.m.then_laplace(tree.map(d_in) / epsilon)
    loss = meas.map(d_in)
    if loss > epsilon * (1 + 1e-9):
        raise RuntimeError(f"OpenDP tree: privacy loss {loss} exceeds epsilon {epsilon}")
    consistent = dp.t.make_consistent_b_ary_tree(branching_factor=branching)
    cdf = dp.t.make_cdf()
    # Bin of value k: [k - 1/2, k + 1/2); quantiles are interpolated linearly inside it.
    edges = [float(e) for e in np.arange(0.5, n_bins + 1.0, 1.0)]
    quantiles = dp.t.make_quantiles_from_counts(edges, alphas=list(alphas))
    return meas, consistent, cdf, quantiles, loss


def _opendp_exp_quantiles(dp: Any, n_bins: int, epsilon_each: float, d_in: int,
                          alphas: Sequence[float] = QUANTILE_LEVELS,
                          size: int | None = None) -> list[Any]:
    """One ``make_private_quantile`` per level (exponential mechanism on the candidates 1..N),
    each ``epsilon_each``-DP at ``d_in``; the loss scales as 1/scale, checked by ``map``.
    ``size``: the public number of records; OpenDP then uses its tighter sensitivity for
    sized data sets (away from the median, ``max(alpha, 1 - alpha)`` times smaller)."""
    domain = (dp.vector_domain(dp.atom_domain(T=int)) if size is None
              else dp.vector_domain(dp.atom_domain(T=int), size=size))
    space = (domain, dp.symmetric_distance())
    out = []
    for alpha in alphas:
        def make(scale: float, alpha: float = alpha) -> Any:
            return dp.m.make_private_quantile(*space, dp.max_divergence(),
                                              candidates=list(range(1, n_bins + 1)),
                                              alpha=alpha, scale=scale)
        unit = make(1.0).map(d_in)
        meas = make(unit / epsilon_each)
        if meas.map(d_in) > epsilon_each * (1 + 1e-9):
            raise RuntimeError("OpenDP private quantile: loss above its budget")
        out.append(meas)
    return out


def _ours_ecdf_runs(x: np.ndarray, tau: np.ndarray, eps: float, reps: int,
                    rng: np.random.Generator, truth: _Truth) -> list[_Errors]:
    """Our default release (hierarchical) and 003's tree, raw and smoothed (Eq. 3, p=2);
    quantiles by Alg. 1 on each curve."""
    levels = np.asarray(QUANTILE_LEVELS)
    default = _Errors("ours: hierarchical (default) + Alg. 1")
    raw = _Errors("ours: 003 tree + Alg. 1")
    smoothed = _Errors("ours: 003 tree + QP smooth + Alg. 1")
    for _ in range(reps):
        start = time.perf_counter()
        curve = dp_ecdf(x, tau, epsilon=eps, rng=rng)
        q_def = dp_quantile(curve, levels).upper
        default.record(truth, time.perf_counter() - start, curve.values, q_def)
        start = time.perf_counter()
        curve = dp_ecdf(x, tau, epsilon=eps, rng=rng, method="003-tree")
        q_raw = dp_quantile(curve, levels).upper
        t_raw = time.perf_counter() - start
        raw.record(truth, t_raw, curve.values, q_raw)
        start = time.perf_counter()
        sm = smooth(curve, p=2)
        q_sm = dp_quantile(sm, levels).upper
        smoothed.record(truth, t_raw + time.perf_counter() - start, sm.values, q_sm)
    return [default, raw, smoothed]


def _opendp_runs(dp: Any, x_list: list[int], n_bins: int, eps: float, reps: int,
                 truth: _Truth) -> list[_Errors]:
    branching = dp.t.choose_branching_factor(size_guess=len(x_list))
    out = []
    for b, d_in, tag in ((branching, 2, ""), (2, 2, ""),
                         (branching, 1, ", add/remove (*)")):
        err = _Errors(f"OpenDP tree b={b}{tag}")
        meas, consistent, cdf_fn, q_fn, _ = _opendp_tree(dp, n_bins, b, d_in, eps)
        for _ in range(reps):
            start = time.perf_counter()
            leaves = consistent(meas(x_list))
            cdf = cdf_fn(leaves)
            q = q_fn(leaves)
            err.record(truth, time.perf_counter() - start, cdf, q)
        out.append(err)
    err = _Errors("OpenDP exp. mech. (eps/4 per q)")
    quantile_meas = _opendp_exp_quantiles(dp, n_bins, eps / len(QUANTILE_LEVELS), 2)
    for _ in range(reps):
        start = time.perf_counter()
        q = [m(x_list) for m in quantile_meas]
        err.record(truth, time.perf_counter() - start, None, q)
    out.append(err)
    return out


def _diffprivlib_runs(quantile: Callable[..., Any], x: np.ndarray, n_bins: int, eps: float,
                      reps: int, rng: np.random.Generator, truth: _Truth) -> _Errors:
    accountant = importlib.import_module("diffprivlib.accountant").BudgetAccountant
    err = _Errors("diffprivlib (eps/4 per q)")
    for _ in range(reps):
        state = int(rng.integers(2**31 - 1))
        start = time.perf_counter()
        # diffprivlib splits epsilon evenly over the requested levels; a fresh accountant
        # keeps its default (global) one from growing over the runs.
        q = quantile(x, list(QUANTILE_LEVELS), epsilon=eps, bounds=(1, n_bins),
                     random_state=state, accountant=accountant())
        err.record(truth, time.perf_counter() - start, None, q)
    return err


def ecdf_comparison(n_bins_list: Sequence[int] = (4096,), epsilons: Sequence[float] = (1.0,),
                    reps: int = 10, lam: float = 3.0, seed: int = 0) -> Table:
    """DP ECDF and quantiles: ours vs OpenDP (b-ary tree; exponential mechanism) and
    diffprivlib, at equal epsilon under replace-one-record adjacency.

    Data: 003 Sec. 6.2's X_pois(lambda) on N values (n ~ N lambda), grid 1..N. Every method
    is eps-DP when one record is replaced (OpenDP: symmetric distance 2, since a
    replacement is one removal plus one addition; diffprivlib's quantile utility moves by
    at most 1 under a replacement). One extra OpenDP row uses add/remove-one (d_in = 1),
    its default; that is only 2 eps-DP under replacement, for reference.
    Quantile error: |estimate - true| with the true quantile the smallest value whose
    ECDF reaches q; ours reports the generalized inverse of the private curve (Alg. 1's
    bracket end ``upper``). Time: one release (all N CDF values and the 4 quantiles),
    median over runs; OpenDP's measurements are built once per configuration, untimed.
    """
    dp, odp_label = _load_opendp()
    dpl_quantile, dpl_label = _load_diffprivlib_quantile()
    table = Table(
        "3. DP ECDF and quantiles: ours vs OpenDP and diffprivlib "
        "(equal epsilon, replace-one; ratios ours/this)",
        ["N", "n", "eps", "method", "time (s)", "time ratio", "CDF RMSE", "RMSE ratio",
         "RMSE / OpenDP best", *(f"|err| q={q:g}" for q in QUANTILE_LEVELS), "mean |err|",
         "|err| ratio"])
    for n_bins in n_bins_list:
        x = poisson_ecdf(n_bins, lam, rng=seed).columns["x"]
        n = int(x.size)
        tau = np.arange(1, n_bins + 1, dtype=np.float64)
        truth = _Truth(np.searchsorted(np.sort(x), tau, side="right") / n,
                       np.quantile(x, QUANTILE_LEVELS, method="inverted_cdf").astype(float))
        for eps in epsilons:
            _progress(f"ecdf N={n_bins} n={n} eps={eps:g}")
            rng = np.random.default_rng([seed, n_bins, round(eps * 1000)])
            methods = _ours_ecdf_runs(x, tau, eps, reps, rng, truth)
            if dp is None:
                methods.append(_Errors(odp_label, unavailable=odp_label))
            else:
                methods += _opendp_runs(dp, x.tolist(), n_bins, eps, reps, truth)
            if dpl_quantile is None:
                methods.append(_Errors(dpl_label, unavailable=dpl_label))
            else:
                methods.append(_diffprivlib_runs(dpl_quantile, x, n_bins, eps, reps, rng,
                                                 truth))
            base = methods[0].summary()
            # OpenDP's best tree at equal privacy (d_in = 2), the CDF target of issue 15.
            odp_best = min((e.summary()["cdf_rmse"] for e in methods
                            if e.unavailable is None and e.name.startswith("OpenDP tree")
                            and "(*)" not in e.name), default=None)
            for err in methods:
                if err.unavailable is not None:
                    table.add([n_bins, n, _fmt(eps), err.unavailable]
                              + [None] * (len(table.header) - 4),
                              N=n_bins, n=n, epsilon=eps, name=err.name)
                    continue
                s = err.summary()
                table.add([n_bins, n, _fmt(eps), s["name"], s["time"],
                           _ratio(base["time"], s["time"]), s["cdf_rmse"],
                           _ratio(base["cdf_rmse"], s["cdf_rmse"]),
                           _ratio(s["cdf_rmse"], odp_best), *s["q_mae"], s["q_mean"],
                           _ratio(base["q_mean"], s["q_mean"])],
                          N=n_bins, n=n, epsilon=eps, rmse_vs_opendp_best=_ratio(
                              s["cdf_rmse"], odp_best), **s)
            table.gap()
    if table.rows and not any(table.rows[-1]):
        table.rows.pop()
    table.notes += [
        "ratios compare each row with our default curve (first row of each block); "
        "'RMSE / OpenDP best' divides each row's CDF RMSE by the best OpenDP tree row at "
        "equal privacy (d_in = 2).",
        "ours (default): dp_ecdf, b-ary histogram tree with least-squares consistency and "
        "the public n, b and budget split by the exact prefix variance "
        "(protocols/ecdf/hierarchical.py). ours (003 tree): method='003-tree', "
        "Laplace((L+1)/eps) per dyadic node of the cumulative counts (003 Eq. 2), "
        "optionally smoothed (003 Eq. 3, p=2). Quantiles by Alg. 1 (generalized "
        "inverse). OpenDP tree: make_b_ary_tree over the N value counts, discrete Laplace, "
        "make_consistent_b_ary_tree, make_cdf / make_quantiles_from_counts; b=... from "
        "choose_branching_factor(n) and b=2. Exp. mech.: make_private_quantile (candidates "
        "1..N) and diffprivlib.tools.quantile (bounds (1, N)).",
        "(*) d_in = 1 (add/remove one record), OpenDP's default: eps-DP for add/remove, only "
        "2 eps-DP for a replacement; shown for reference, not at equal privacy.",
        f"peers: {odp_label}; {dpl_label}.",
        "OpenDP's CDF is make_cdf of the consistent leaves (normalized by their noisy sum); "
        "its tree quantiles interpolate inside the bin [k - 1/2, k + 1/2) of value k.",
        "exp.-mechanism quantiles spend eps/4 on each of the 4 levels (basic composition); "
        "our curve and OpenDP's tree answer all levels from one eps-DP release.",
        "OpenDP draws from its own CSPRNG: its rows are not reproducible run to run.",
    ]
    return table


# --------------------------------------------------------------------------- 6. quantiles


def quantile_levels(m: int) -> tuple[float, ...]:
    """The benchmark's levels: the median for m = 1, (0.25, 0.5, 0.75, 0.9) for m = 4,
    else ``j / (m + 1)`` for j = 1..m."""
    if m == 1:
        return (0.5,)
    if m == 4:
        return QUANTILE_LEVELS
    return tuple(j / (m + 1) for j in range(1, m + 1))


#: The data of the quantile comparison: name -> (generator, what is public). Continuous
#: and skewed data get ``bounds`` (the one-call default); the tied data, integers, get
#: their lattice as ``thresholds`` (the candidates OpenDP's mechanisms are given too).
QUANTILE_DATA = ("normal", "lognormal", "tied")
QUANTILE_GRID_POINTS = 1024  # the peers' candidates/bins on bounds: our default grid size


def quantile_data(kind: str, n: int, seed: int) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    """``(x, public, candidates)``: ``public`` is what ``fedustat.quantile`` is given
    (``bounds`` or ``thresholds``), ``candidates`` the peers' grid on the same range.

    ``normal``: N(50, 15^2) clipped to [0, 100] (continuous); ``lognormal``: lognormal(0, 1)
    clipped to [0, 20] (skewed, 0.14% clipped); ``tied``: round(lognormal(2, 0.8)) on
    0..100 (about 40 distinct values for n = 5000: heavy ties), lattice 0..100."""
    rng = np.random.default_rng([seed, QUANTILE_DATA.index(kind)])
    if kind == "normal":
        x, bounds = np.clip(rng.normal(50.0, 15.0, n), 0.0, 100.0), (0.0, 100.0)
    elif kind == "lognormal":
        x, bounds = np.clip(rng.lognormal(0.0, 1.0, n), 0.0, 20.0), (0.0, 20.0)
    elif kind == "tied":
        lattice = np.arange(0.0, 101.0)
        x = np.clip(np.round(rng.lognormal(2.0, 0.8, n)), 0.0, 100.0)
        return x, {"thresholds": lattice}, lattice
    else:
        raise ValueError(f"unknown quantile data {kind!r}; choose from {QUANTILE_DATA}")
    return x, {"bounds": bounds}, np.linspace(*bounds, QUANTILE_GRID_POINTS)


def quantile_errors(x: np.ndarray, levels: Sequence[float], estimate: Any
                    ) -> tuple[float, float]:
    """``(value error, level error)`` of one release, each the mean over the levels.

    Value error ``|estimate - x_q|`` with ``x_q`` numpy's ``inverted_cdf`` quantile; level
    error ``dist(q, [F(t^-), F(t)])`` with ``F`` the data's ECDF: 0 when ``t`` is an exact
    q-quantile (also on a tied atom, where ``|F(t) - q|`` would not be), else
    ``|F(t) - q|`` up to which side of ``t`` the records lie."""
    s = np.sort(x)
    q = np.asarray(levels, dtype=np.float64)
    t = np.asarray(estimate, dtype=np.float64).reshape(q.shape)
    truth = np.quantile(s, q, method="inverted_cdf")
    below = np.searchsorted(s, t, side="left") / s.size
    upto = np.searchsorted(s, t, side="right") / s.size
    level = np.maximum(0.0, np.maximum(below - q, q - upto))
    return float(np.mean(np.abs(t - truth))), float(np.mean(level))


def gap_mechanism_errors(x: np.ndarray, level: float, epsilon: float, low: float,
                         high: float, grid: np.ndarray | None = None
                         ) -> tuple[float, float]:
    """Exact expected (value error, level error) at one level of the exponential
    mechanism over the gaps between the records (diffprivlib's ``tools.quantile``; with
    ``grid``, ours: plus the atoms of ``CONTINUOUS_ATOM_WEIGHT`` grid steps at the grid
    points, costed by their cell, as in ``private_quantiles._gap_draw``), free of Monte
    Carlo noise: gap ``i`` has probability ``~ length_i exp(-eps/2 |i - q n|)`` and a
    uniform answer inside it (``E|U - x_q|`` in closed form; level error ``|i/n - q|``)."""
    from fedustat.protocols.ecdf.private_quantiles import CONTINUOUS_ATOM_WEIGHT

    s = np.sort(np.clip(x, low, high))
    n = s.size
    rho = level * n
    truth = float(np.quantile(s, level, method="inverted_cdf"))
    edges = np.concatenate([[low], s, [high]])
    a, b = edges[:-1], edges[1:]
    with np.errstate(divide="ignore"):
        log_w = np.log(b - a) - epsilon / 2 * np.abs(np.arange(n + 1) - rho)
    span = np.where(b > a, b - a, 1.0)
    inside = ((truth - a) ** 2 + (b - truth) ** 2) / (2 * span)
    value = np.where(b <= truth, truth - (a + b) / 2,
                     np.where(a >= truth, (a + b) / 2 - truth, inside))
    level_err = np.abs(np.arange(n + 1) / n - level)
    if grid is not None:
        step = (grid[-1] - grid[0]) / (grid.size - 1)
        upto = np.searchsorted(s, grid, side="right").astype(np.float64)
        prev = np.concatenate([[0.0], upto[:-1]])
        cost = np.maximum(0.0, np.maximum(prev - rho, rho - upto))
        log_w = np.concatenate([log_w, np.log(CONTINUOUS_ATOM_WEIGHT * step)
                                - epsilon / 2 * cost])
        value = np.concatenate([value, np.abs(grid - truth)])
        below = np.searchsorted(s, grid, side="left") / n
        level_err = np.concatenate([level_err, np.maximum(
            0.0, np.maximum(below - level, level - upto / n))])
    w = np.exp(log_w - log_w.max())
    p = w / w.sum()
    return float(p @ value), float(p @ level_err)


def opendp_median_errors(x: np.ndarray, candidates: np.ndarray, epsilon: float
                         ) -> tuple[float, float]:
    """Exact expected (value error, level error) of OpenDP's ``make_private_quantile`` at
    the median on the sized domain: permute-and-flip (McKenna and Sheldon 2020, which
    OpenDP cites) on its score ``|#{x < c} - #{x > c}|``, twice the distance from n/2 to
    the middle of candidate c's block of ranks, whose sensitivity under a replacement
    OpenDP states as 2 (``make_quantile_score_candidates(...).map(2) == 2``): acceptance
    ``exp(-(eps/2) |mid(c) - n/2|)``. The measured row checks this law."""
    from fedustat.protocols.ecdf.private_quantiles import permute_and_flip_distribution

    s = np.sort(x)
    n = s.size
    below = np.searchsorted(s, candidates, side="left")
    upto = np.searchsorted(s, candidates, side="right")
    law = permute_and_flip_distribution(np.abs((below + upto) / 2.0 - n / 2.0), epsilon / 2)
    truth = float(np.quantile(s, 0.5, method="inverted_cdf"))
    level = np.maximum(0.0, np.maximum(below / n - 0.5, 0.5 - upto / n))
    return float(law @ np.abs(candidates - truth)), float(law @ level)


def lattice_exponential_errors(x: np.ndarray, thresholds: np.ndarray, level: float,
                               epsilon: float) -> tuple[float, float]:
    """Exact expected (value error, level error) at one level of ours on given
    ``thresholds`` with the method ``"exponential"``: permute-and-flip (McKenna and
    Sheldon 2020, Alg. 1) with ``private_quantiles.rank_costs`` at ``beta = eps / 2``,
    its law from ``permute_and_flip_distribution``, free of Monte Carlo noise (the
    measured row checks this law)."""
    from fedustat.protocols.ecdf.private_quantiles import (
        permute_and_flip_distribution,
        rank_costs,
        target_ranks,
    )

    s = np.sort(x)
    n = s.size
    below = np.searchsorted(s, thresholds, side="left")
    upto = np.searchsorted(s, thresholds, side="right")
    rank = int(target_ranks(np.array([level]), n)[0])
    law = permute_and_flip_distribution(rank_costs(upto, rank).astype(np.float64),
                                        epsilon / 2)
    truth = float(np.quantile(s, level, method="inverted_cdf"))
    level_err = np.maximum(0.0, np.maximum(below / n - level, level - upto / n))
    return float(law @ np.abs(thresholds - truth)), float(law @ level_err)


def _opendp_float_quantiles(dp: Any, candidates: np.ndarray, epsilon_each: float, n: int,
                            levels: Sequence[float]) -> list[Any]:
    """One ``make_private_quantile`` per level on float data of public size n over the
    candidates, each ``epsilon_each``-DP at ``d_in = 2`` (one replacement), checked by
    ``map``."""
    domain = dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n)
    out = []
    for alpha in levels:
        def make(scale: float, alpha: float = alpha) -> Any:
            return dp.m.make_private_quantile(domain, dp.symmetric_distance(),
                                              dp.max_divergence(),
                                              candidates=[float(c) for c in candidates],
                                              alpha=alpha, scale=scale)
        meas = make(make(1.0).map(2) / epsilon_each)
        if meas.map(2) > epsilon_each * (1 + 1e-9):
            raise RuntimeError("OpenDP private quantile: loss above its budget")
        out.append(meas)
    return out


def _opendp_float_tree(dp: Any, edges: np.ndarray, n: int, epsilon: float,
                       levels: Sequence[float]) -> Callable[[list[float]], Any]:
    """OpenDP's b-ary tree quantiles on float data: counts of the bins between ``edges``
    (``make_find_bin`` on the inner edges), ``make_b_ary_tree``, Laplace at the tree's
    sensitivity at ``d_in = 2`` over eps (checked), consistency, then
    ``make_quantiles_from_counts`` interpolating linearly inside the bins."""
    bins = edges.size - 1
    branching = dp.t.choose_branching_factor(size_guess=n)
    space = (dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance())
    tree = (space
            >> dp.t.then_find_bin(edges=[float(e) for e in edges[1:-1]])
            >> dp.t.then_count_by_categories(categories=list(range(bins)),
                                             null_category=False)
            >> dp.t.then_b_ary_tree(leaf_count=bins, branching_factor=branching))
    meas = tree >> dp.m.then_laplace(tree.map(2) / epsilon)
    if meas.map(2) > epsilon * (1 + 1e-9):
        raise RuntimeError("OpenDP tree: privacy loss above epsilon")
    consistent = dp.t.make_consistent_b_ary_tree(branching_factor=branching)
    quantiles = dp.t.make_quantiles_from_counts([float(e) for e in edges],
                                                alphas=list(levels))
    return lambda data: quantiles(consistent(meas(data)))


def _quantile_cell(x: np.ndarray, public: dict[str, Any], candidates: np.ndarray, eps: float,
                   levels: tuple[float, ...], reps: int, tree_reps: int, seed: int, dp: Any,
                   dpl_quantile: Callable[..., Any] | None, odp_label: str, dpl_label: str
                   ) -> list[dict[str, Any]]:
    """Every method of one (data, eps, m) cell: name, peer, per-run value and level
    errors, per-run times, or why the row is missing. Ours is the one-call default
    ``fedustat.quantile(x, levels, epsilon=eps, <public>, rng=seed)``."""
    import fedustat

    m = len(levels)
    x_list = [float(v) for v in x]
    rows: list[dict[str, Any]] = []

    # Run k of every row draws with seed base + k: one base per cell, so that no set of
    # seeds repeats across the cells (a lucky set would tilt every cell the same way).
    base = int(np.random.default_rng([seed, len(x), round(eps * 1000), m,
                                      int("bounds" in public)]).integers(2**31))

    def run(name: str, peer: bool, once: Callable[[int], Any], runs: int,
            exact: tuple[float, float] | None = None) -> None:
        value, level, times = [], [], []
        for k in range(runs):
            t, est = _timed(lambda k=k: once(base + k))
            times.append(t)
            v, lv = quantile_errors(x, levels, est)
            value.append(v)
            level.append(lv)
        rows.append({"name": name, "peer": peer, "value": value, "level": level,
                     "times": times, "exact": exact})

    picked = fedustat.quantile(x, list(levels), epsilon=eps, rng=seed, **public).method
    gap_law = m == 1 and "bounds" in public  # ours and diffprivlib: exact laws
    low, high = (public["bounds"] if "bounds" in public
                 else (float(candidates[0]), float(candidates[-1])))
    ours_exact = (gap_mechanism_errors(x, levels[0], eps, low, high, grid=candidates)
                  if gap_law and picked == "continuous" else None)
    if m == 1 and "thresholds" in public and picked == "exponential":
        ours_exact = lattice_exponential_errors(x, candidates, levels[0], eps)
    run(f"ours: fedustat.quantile (-> {picked})", False,
        lambda k: np.asarray(fedustat.quantile(x, list(levels), epsilon=eps, rng=k,
                                               **public)), reps, ours_exact)
    if dp is None:
        rows.append({"name": odp_label, "peer": True, "missing": odp_label})
    else:
        meas = _opendp_float_quantiles(dp, candidates, eps / m, x.size, levels)
        run(f"OpenDP exp. mech. (eps/{m} per q)", True,
            lambda k: [f(x_list) for f in meas], reps,
            opendp_median_errors(x, candidates, eps) if levels == (0.5,) else None)
        if "bounds" in public:
            edges = candidates
        else:  # one bin per lattice value, [v - 1/2, v + 1/2)
            edges = np.concatenate([candidates - 0.5, [candidates[-1] + 0.5]])
        tree = _opendp_float_tree(dp, edges, x.size, eps, levels)
        run("OpenDP tree", True, lambda k: tree(x_list), min(tree_reps, reps))
    if dpl_quantile is None:
        rows.append({"name": dpl_label, "peer": True, "missing": dpl_label})
    else:
        accountant = importlib.import_module("diffprivlib.accountant")

        def dpl(k: int) -> Any:
            # A fresh accountant keeps diffprivlib's global one from growing over the runs.
            return dpl_quantile(x, list(levels), epsilon=eps, bounds=(low, high),
                                random_state=k, accountant=accountant.BudgetAccountant())
        run(f"diffprivlib (eps/{m} per q)", True, dpl, reps,
            gap_mechanism_errors(x, levels[0], eps, low, high) if m == 1 else None)
    return rows


def _mean_se(values: list[float]) -> tuple[float, float]:
    mean = float(np.mean(values))
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else 0.0
    return mean, se


def _ratio_se(ours: tuple[float, float], peer: tuple[float, float]) -> tuple[float, float]:
    """``ours / peer`` and its Monte Carlo standard error (delta method, independent
    runs)."""
    if peer[0] == 0.0:
        return (1.0, 0.0) if ours[0] == 0.0 else (math.inf, math.nan)
    r = ours[0] / peer[0]
    rel = math.hypot(ours[1] / ours[0] if ours[0] > 0 else 0.0, peer[1] / peer[0])
    return r, r * rel


def quantile_comparison(data: Sequence[str] = QUANTILE_DATA, epsilons: Sequence[float] = (1.0,),
                        level_counts: Sequence[int] = (1, 4, 16), reps: int = 100,
                        tree_reps: int = 30, n: int = 5000, seed: int = 0,
                        many_level_reps: int | None = None) -> Table:
    """Private quantiles at equal total epsilon and the same adjacency (one replacement:
    OpenDP at ``d_in = 2`` on the sized domain, diffprivlib's utility moves by 1 under a
    replacement as ours does): the one-call default ``fedustat.quantile`` vs OpenDP's
    exponential mechanism per level, OpenDP's b-ary tree quantiles and diffprivlib's
    ``tools.quantile``, on continuous, skewed and heavily tied data
    (:func:`quantile_data`), m = 1, 4, 16 levels (:func:`quantile_levels`).

    Two errors per run, each the mean over the levels (:func:`quantile_errors`): value
    ``|t - x_q|`` and level ``dist(q, [F(t^-), F(t)])``; the table gives their mean over
    runs with its standard error and, for ours, the ratio to the best peer of the cell
    in each error (its own best: the peer may differ) with the ratio's Monte Carlo
    standard error. ``many_level_reps`` (default ``reps``) runs for m > 4, where the
    per-level peers take 0.3-0.6 s a run.
    """
    dp, odp_label = _load_opendp()
    dpl_quantile, dpl_label = _load_diffprivlib_quantile()
    table = Table(
        "6. Private quantiles: the one-call default vs OpenDP and diffprivlib (equal total "
        "epsilon, replace-one)",
        ["data", "eps", "m", "method", "runs", "value err", "s.e.", "level err", "s.e.",
         "exact value", "exact level", "time (s)", "value ours/best", "+-",
         "level ours/best", "+-"])
    for kind in data:
        x, public, candidates = quantile_data(kind, n, seed)
        for eps in epsilons:
            for m in level_counts:
                _progress(f"quantiles {kind} eps={eps:g} m={m}")
                runs = reps if m <= 4 or many_level_reps is None else many_level_reps
                rows = _quantile_cell(x, public, candidates, eps, quantile_levels(m), runs,
                                      tree_reps, seed, dp, dpl_quantile, odp_label, dpl_label)
                done = [r for r in rows if not r.get("missing")]
                # The ratios use a row's exact expected errors where it has them (free of
                # Monte Carlo noise; s.e. 0), else its measured means.
                stats = {r["name"]: ((r["exact"][0], 0.0), (r["exact"][1], 0.0))
                         if r.get("exact") else (_mean_se(r["value"]), _mean_se(r["level"]))
                         for r in done}
                peers = [r["name"] for r in done if r["peer"]]
                best_value = min(peers, key=lambda p: stats[p][0][0]) if peers else None
                best_level = min(peers, key=lambda p: stats[p][1][0]) if peers else None
                for r in rows:
                    if r.get("missing"):
                        table.add([kind, _fmt(eps), m, r["missing"]]
                                  + [None] * (len(table.header) - 4),
                                  data=kind, epsilon=eps, m=m, name=r["name"], peer=True)
                        continue
                    (v, v_se), (lv, lv_se) = _mean_se(r["value"]), _mean_se(r["level"])
                    rv = rl = (None, None)
                    if not r["peer"] and best_value is not None and best_level is not None:
                        rv = _ratio_se(stats[r["name"]][0], stats[best_value][0])
                        rl = _ratio_se(stats[r["name"]][1], stats[best_level][1])
                    t = statistics.median(r["times"])
                    ex = r.get("exact") or (None, None)
                    table.add([kind, _fmt(eps), m, r["name"], len(r["value"]), v, v_se, lv,
                               lv_se, ex[0], ex[1], t, rv[0], rv[1], rl[0], rl[1]],
                              data=kind, epsilon=eps, m=m, name=r["name"], peer=r["peer"],
                              runs=len(r["value"]), value=v, value_se=v_se, level=lv,
                              level_se=lv_se, exact_value=ex[0], exact_level=ex[1],
                              time=t, value_ratio=rv[0],
                              value_ratio_se=rv[1], level_ratio=rl[0], level_ratio_se=rl[1],
                              best_value_peer=best_value, best_level_peer=best_level)
                table.gap()
    if table.rows and not any(table.rows[-1]):
        table.rows.pop()
    table.notes += [
        "ours: fedustat.quantile(x, levels, epsilon=eps, bounds=... | thresholds=..., "
        "rng=seed) with its defaults (the method it picked in brackets); 'ours/best' "
        "divides our mean error by the smallest peer mean error of the cell, separately "
        "for value and level error, '+-' its Monte Carlo standard error.",
        f"data (n = {n}): normal = N(50, 15^2) on bounds (0, 100); lognormal = "
        "lognormal(0, 1) on bounds (0, 20); tied = round(lognormal(2, 0.8)) on the lattice "
        "0..100 (thresholds). Peers get the same public range: OpenDP's candidates and tree "
        f"bins are {QUANTILE_GRID_POINTS} even points of the bounds (the tied data: the "
        "lattice; tree bins [v - 1/2, v + 1/2)), diffprivlib the bounds.",
        "level error: dist(q, [F(t^-), F(t)]) (0 for an exact quantile, also on a tied "
        "atom); value error |t - x_q| (numpy inverted_cdf).",
        "exact: the expected errors from the mechanism's exact law on these data, at m = 1: "
        "the exponential mechanism over the gaps (ours 'continuous' and diffprivlib on "
        "bounds: the same law but for our error bar's atoms), ours 'exponential' on "
        "thresholds (permute-and-flip on rank_costs) and OpenDP's permute-and-flip "
        "on its median score; the ratios use them there "
        "(their +- then counts the other side's runs only), the measured means elsewhere. "
        "Each cell draws its own seeds.",
        "peers at d_in = 2 (a replacement): OpenDP make_private_quantile per level at eps/m "
        "on the sized float domain; OpenDP make_b_ary_tree + consistency + "
        "make_quantiles_from_counts at eps (fewer runs: slow); diffprivlib tools.quantile "
        "(splits eps over the levels; its utility |i - q n| moves by 1 under a replacement).",
        f"peers: {odp_label}; {dpl_label}.",
    ]
    return table


# --------------------------------------------------------------------------- 4. smoothing


_SMOOTH_ROW = re.compile(
    r"^\s*(\d+)\s+([12])\s+(\S.*?)\s+([\d.]+)\s+(\d+)\s+"
    r"(?:([\d.]+)\s+(\d+)\s+([\d.]+)x|-\s+-\s+-)\s+(\S+)\s+(\S+)\s*$")


def smoothing_comparison(min_exp: int = 10, max_exp: int = 14, epsilon: float = 1.0,
                         thm1_reps: int = 500, seed: int = 0) -> Table:
    """003 Eq. 3 smoothing vs CVXOPT: ``bench_ecdf.main``, reused, plus ours / CVXOPT."""
    import bench_ecdf

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        bench_ecdf.main(["--min-exp", str(min_exp), "--max-exp", str(max_exp),
                         "--eps", repr(float(epsilon)), "--reps", str(thm1_reps),
                         "--seed", str(seed)])
    lines = buf.getvalue().rstrip("\n").splitlines()
    table = Table("4. Smoothing (003 Eq. 3): ours vs the CVXOPT formulation (bench_ecdf.py)",
                  ["N", "p", "ours", "ours (s)", "CVXOPT (s)", "time ratio ours/CVXOPT",
                   "rel. objective diff"])
    table.preamble = [*lines, "", "Summary with the ratio ours / CVXOPT:"]
    for text in lines:
        match = _SMOOTH_ROW.match(text)
        if not match:
            continue
        ours_t = float(match[4])
        ref_t = float(match[6]) if match[6] else None
        rel = None if match[10] == "-" else float(match[10])
        table.add([int(match[1]), int(match[2]), match[3], ours_t, ref_t,
                   _ratio(ours_t, ref_t), rel],
                  N=int(match[1]), p=int(match[2]), ours=ours_t, cvxopt=ref_t,
                  ratio=_ratio(ours_t, ref_t), rel_objective=rel)
    if not table.rows:
        table.notes.append("no rows parsed from bench_ecdf's table (format changed?); "
                           "see its output above.")
    table.notes.append("CVXOPT missing gives '-' (pip install cvxopt).")
    return table


# --------------------------------------------------------------------------- 5. FedAUC


def fedauc_comparison() -> Table:
    """Whether the authors' DPAUC code can run here; a row with the reasons if not."""
    table = Table("5. FedAUC (004) vs the authors' DPAUC implementation",
                  ["peer", "status", "reason"])
    module = next((m for m in ("dpauc", "DPAUC", "fedauc") if importlib.util.find_spec(m)),
                  None)
    if module is not None:
        table.add([module, "importable, not benchmarked",
                   "an unknown package with this name; no known API to call"], status="found")
        return table
    has_tf = importlib.util.find_spec("tensorflow") is not None
    table.add(["DPAUC (Sun et al., AAAI 2023)", "not run",
               "no package on the package index ships it (no importable dpauc module); the "
               "code is a GitHub repository, which cannot be fetched without network access"],
              status="not run")
    table.notes += [
        "Even with the code, it would not be a like-for-like peer: 004 (FedAUC_RR, "
        "FedAUC_Lap, vertical FL, labels at the clients) names no code; the public DPAUC "
        "code belongs to the companion paper (arXiv 2208.12294, labels on devices, noisy "
        "TP/FP/TN/FN per threshold) and runs on Criteo prediction pickles (not bundled) "
        f"with TensorFlow 2.x (installed here: {'yes' if has_tf else 'no'}).",
        "FedAUC itself is checked against exact AUC and 004's own numbers by "
        "benchmarks/bench_fedauc.py (004 Table 7), `fedustat compare` and "
        "`fedustat reproduce`.",
    ]
    return table


# --------------------------------------------------------------------------- 7. ROC curve


def roc_comparison(epsilons: Sequence[float] = (0.5, 1.0, 4.0), reps: int = 400,
                   smoothed_reps: int = 100, smoothed_bootstrap: int = 50,
                   seed: int = 0) -> Table:
    """The DP ROC curve's class-curve releases and estimators on issue 15's setting, at
    each epsilon.

    Binormal scores of 800 positives and 1,200 negatives (population AUC 0.8, data seed 0;
    exact AUC 0.8012, 0.8012 on the grid), 256 thresholds evenly spaced on the public
    bounds [-5, 5]. Per class-curve release (``curve_method``: the hierarchical tree with a
    private total, 003's tree; 003's smoothing only on 003's tree) and estimator: mean AUC,
    bias against the grid's exact AUC, bias over the mean reported standard error, the
    bias's Monte Carlo z, RMSE, mean reported SE, coverage of the 95% interval, mean L1
    distance of the curve (003 Sec. 6.5), and the Monte Carlo z of the bias of the fitted
    curve's own area. The AUC is the unclipped release (``auc.raw_value``, unbiased; the
    value is clipped into [0, 1]); ``isotonic`` and ``raw`` release the same bilinear AUC
    (their curves differ).
    """
    from fedustat.datasets import classifier_scores
    from fedustat.protocols.ecdf import dp_roc_curve, roc_curve_on_grid
    from fedustat.protocols.ecdf.roc import (
        DEFAULT_ROC_CURVE_METHOD,
        DEFAULT_ROC_ESTIMATOR,
        ROC_CURVE_METHODS,
        ROC_ESTIMATORS,
    )

    data = classifier_scores(800, 1200, 0.8, rng=0)
    y, s = data.columns["label"], data.columns["score"]
    tau = np.linspace(-5.0, 5.0, 256)
    fpr0, tpr0, _ = roc_curve_on_grid(y, s, tau)
    grid_auc = float(np.trapezoid(tpr0, fpr0))
    table = Table("7. DP ROC curve (003 Sec. 5.1): estimators of the curve and its AUC",
                  ["eps", "curves", "estimator", "runs", "mean AUC", "bias", "bias/SE", "bias z",
                   "RMSE", "sd", "mean SE", "95% CI cover", "L1 curve",
                   "curve-area bias z"])
    cells = [(method, name) for method in ROC_CURVE_METHODS for name in ROC_ESTIMATORS
             if name != "smoothed" or method == "003-tree"]
    for eps in epsilons:
        for method, name in cells:
            runs = smoothed_reps if name == "smoothed" else reps
            extra = {"n_bootstrap": smoothed_bootstrap} if name == "smoothed" else {}
            values, ses, covered, l1, areas = [], [], 0, [], []
            for r in range(runs):
                rng = np.random.default_rng([seed, 15, int(eps * 1000), r])
                curve = dp_roc_curve(y, s, epsilon=eps, thresholds=tau, estimator=name,
                                     curve_method=method, rng=rng, **extra)
                values.append(curve.auc.raw_value)
                areas.append(curve.auc.diagnostics["curve_area"])
                ses.append(curve.auc.std_error)
                low, high = curve.auc_interval()
                covered += int(low <= grid_auc <= high)
                if name != "raw":  # the raw curve can cross itself: no area between curves
                    l1.append(curve.l1_distance(y, s))
            v = np.asarray(values)
            bias = float(v.mean() - grid_auc)
            sd = float(v.std(ddof=1))
            mean_se = float(np.mean(ses))
            default = name == DEFAULT_ROC_ESTIMATOR and method == DEFAULT_ROC_CURVE_METHOD
            label = name + (" (default)" if default else "")
            rmse = float(np.sqrt(np.mean((v - grid_auc) ** 2)))
            l1_mean = float(np.mean(l1)) if l1 else None
            area = np.asarray(areas)
            area_z = float((area.mean() - grid_auc) / (area.std(ddof=1) / math.sqrt(runs)))
            table.add([f"{eps:g}", method, label, runs, float(v.mean()), bias, bias / mean_se,
                       bias / (sd / math.sqrt(runs)), rmse, sd, mean_se, covered / runs,
                       l1_mean, area_z],
                      epsilon=eps, curve_method=method, estimator=name, runs=runs,
                      mean_auc=float(v.mean()),
                      bias=bias, rmse=rmse, sd=sd, mean_se=mean_se, coverage=covered / runs,
                      l1=l1_mean, curve_area_z=area_z)
            _progress(f"roc eps={eps:g} {method} {name}: RMSE {rmse:.4f}")
        table.gap()
    table.notes += [
        f"exact AUC on the grid {grid_auc:.4f} (of the scores: 0.8012); bias = mean AUC - "
        "exact on the grid; bias/SE divides by the mean reported standard error; bias z "
        "by the Monte Carlo standard error of the mean (sd / sqrt(runs)).",
        "AUC: the unclipped release (auc.raw_value). isotonic (default) and raw release "
        "the same AUC, estimated from the unsmoothed class curves without bias (bilinear, "
        "roc._bilinear_auc); debiased and smoothed release their curve's area. "
        "curve-area bias z: that of the area under the released curve (isotonic: the "
        "AUC released before, biased low by the projection).",
        "L1 curve: integral |TPR - TPR_exact| dFPR (003 Sec. 6.5); '-' for raw, whose curve "
        "can cross itself.",
        "curves: how each class curve is released at eps/2 (hierarchical: b-ary tree with "
        "least squares and a private total, protocols/ecdf/hierarchical.py; 003-tree: 003 "
        "Eq. 2); smoothed (003 Eq. 3) is written for 003's tree and runs on it only.",
        f"smoothed (003 Eq. 3, p = 2) takes a {smoothed_bootstrap}-draw bootstrap for its "
        "SE (by default it reports none) and fewer runs: its solver is slower.",
        "No peer library releases a DP ROC curve: diffprivlib 0.6 and OpenDP 0.16 have no "
        "ROC or AUC release (their modules were searched); the R package dsROCGLM "
        "(DataSHIELD) fits a parametric ROC-GLM to noisy scores on an Opal server, not an "
        "ECDF-based curve, and cannot run here.",
    ]
    return table




# --------------------------------------------------------------------------- 8. ldp-tree


def ldp_tree_comparison(alphas: Sequence[int] = (10, 16), n_per_class: int = 100_000,
                        epsilons: Sequence[float] = (0.5, 1.0, 2.0, 4.0),
                        data_sets: Sequence[str] = ("ur", "auc_one"), runs: int = 10,
                        seed: int = 0) -> Table:
    """``ldp-tree``'s AUC error in 001's Fig. 5 setting (App. D.1: the synthetic data
    sets, users split, d = 2^alpha) with 001's one-bit Hadamard response
    (``oracle="hadamard"``, before) and the per-level oracle of least exact variance
    (``oracle="auto"``, the default since issue 15), on the same data and seeds."""
    from fedustat import datasets
    from fedustat.api import estimate
    from fedustat.stats import auc_kernel, roc_auc

    kernel = auc_kernel()
    table = Table(
        "8. ldp-tree AUC error vs epsilon (001 Fig. 5 setting): one-bit Hadamard vs auto",
        ["data", "d", "n/class", "eps", "oracle", "runs", "RMSE", "+-s.e.", "mean |err|",
         "mean std_error", "Thm 3 RMSE bound", "bits/party", "time/run (s)",
         "RMSE ratio auto/hadamard"])
    for name in data_sets:
        for alpha in alphas:
            ds = getattr(datasets, name)(alpha, n_per_class, rng=seed)
            scores = np.asarray(ds["score"], dtype=np.float64)
            labels = np.asarray(ds["label"]).astype(np.int64)
            data, truth = kernel.pack(scores, labels), roc_auc(scores, labels)
            for eps in epsilons:
                _progress(f"ldp_tree {name} d=2^{alpha} eps={eps:g}")
                rmse: dict[str, float] = {}
                for oracle in ("hadamard", "auto"):
                    errors, ses, times = [], [], []
                    for r in range(runs):
                        run_rng = np.random.default_rng([seed, alpha, r])
                        # Both with 000 eq. 10's pruned recursion (001's estimator), so
                        # that only the oracle differs.
                        params = {"epsilon": eps, "protocol": "ldp-tree", "d": 1 << alpha,
                                  "oracle": oracle, "recursion": "pruned", "rng": run_rng}
                        t, est = _timed(lambda p=params, x=data: estimate(kernel, x, **p))
                        # The raw release: the bound holds for the unclipped estimator.
                        errors.append(est.raw_value - truth)
                        ses.append(est.std_error)
                        times.append(t)
                    sq = np.square(errors)
                    rmse[oracle] = math.sqrt(float(sq.mean()))
                    # s.e. of the RMSE by the delta method: sd(err^2) / (2 RMSE sqrt(R)).
                    se = (float(sq.std(ddof=1)) / (2 * rmse[oracle] * math.sqrt(runs))
                          if runs > 1 and rmse[oracle] > 0 else None)
                    table.add([name, f"2^{alpha}", n_per_class, _fmt(eps), oracle, runs,
                               rmse[oracle], se, float(np.mean(np.abs(errors))),
                               float(np.mean(ses)), est.diagnostics["rmse_bound"],
                               int(est.cost.bits_per_party), statistics.median(times),
                               _ratio(rmse["auto"], rmse["hadamard"])
                               if oracle == "auto" else None],
                              data=name, alpha=alpha, epsilon=eps, oracle=oracle,
                              rmse=rmse[oracle], se=se, runs=runs,
                              bits=int(est.cost.bits_per_party),
                              oracle_per_level=est.diagnostics["oracle_per_level"])
            table.gap()
    if table.rows and not any(table.rows[-1]):
        table.rows.pop()
    table.notes += [
        "001 App. D.1 / Fig. 5: synthetic data sets (ur: uniform random scores, auc_one: "
        "the two classes at two scores, AUC 1), users split, errors against the data's own "
        "AUC; the paper uses 10^6 parties per class and 20 runs.",
        "hadamard: 001's one-bit Hadamard response at every level (what `fedustat "
        "reproduce 001-fig5-6` runs); auto: per level, among the one-bit oracle and the "
        "subset-selection oracles whose every node variance is at most the one-bit "
        "oracle's, the one of least exact node variance averaged over the level "
        "(fedustat.protocols.local.auc_tree.level_oracles), reports of at most 64 bits.",
        "Thm 3 RMSE bound: from the largest exact node variance of the chosen oracles, "
        "hence never above the one-bit oracle's.",
        "auc_one's error is dominated by a few runs (heavy tails): its RMSE over 10 runs "
        "moves by a factor 2 between seeds; compare it over many runs.",
        "Both oracles run with the pruned recursion (recursion='pruned', 001's estimator); "
        "the default for d <= 2^12 is the unbiased full recursion (issue 24), whose "
        "validity bench_inference.py --only ldp_tree measures.",
    ]
    return table


# ------------------------------------------------------- 9. federated ECDF (secagg)


def fedecdf_comparison(n_bins_list: Sequence[int] = (1024, 4096),
                       epsilons: Sequence[float] = (0.5, 1.0, 4.0), reps: int = 10,
                       lam: float = 3.0, seed: int = 0) -> Table:
    """The federated ECDF (secure aggregation, 003 Sec. 4.1) on the hierarchical tree vs
    003's tree, and vs the central release, at equal epsilon (replace-one).

    Data as the ECDF comparison (003's X_pois(3) on N values, grid 1..N). Each federated
    run is the whole protocol in one process (``pointwise_ecdf``: parties share their
    indicators among m = 2 servers, distributed noise from K = 2 contributors); its noise
    only differs from the central one by the contributors' parts: ``min_honest=1`` (the
    default: each part alone is a full discrete Laplace, twice the central variance) or
    ``min_honest=2`` (one discrete Laplace per node, the central variance). CDF RMSE over
    the grid and runs; "exact" is the RMSE the variance formulas predict.
    """
    table = Table("9. Federated ECDF (secure aggregation): hierarchical tree vs 003's tree "
                  "and vs the central release (equal epsilon, replace-one)",
                  ["N", "n", "eps", "release", "CDF RMSE", "exact RMSE",
                   "RMSE / central hier.", "exact / central hier.", "time (s)"])
    rows = [
        ("federated hierarchical (default, K=2, h=1)", "hierarchical", 1, True),
        ("federated hierarchical (K=2, h=2)", "hierarchical", 2, True),
        ("federated 003 tree (K=2, h=1)", "003-tree", 1, True),
        ("federated 003 tree (K=2, h=2)", "003-tree", 2, True),
        ("central hierarchical (dp_ecdf default)", "hierarchical", 0, False),
        ("central 003 tree", "003-tree", 0, False),
    ]
    for n_bins in n_bins_list:
        x = poisson_ecdf(n_bins, lam, rng=seed).columns["x"]
        n = int(x.size)
        tau = np.arange(1, n_bins + 1, dtype=np.float64)
        truth = np.searchsorted(np.sort(x), tau, side="right") / n
        for eps in epsilons:
            _progress(f"fedecdf N={n_bins} n={n} eps={eps:g}")
            rng = np.random.default_rng([seed, n_bins, round(eps * 1000), 7])
            results = []
            for label, method, honest, federated in rows:
                sq, times, exact_var = [], [], 0.0
                for _ in range(reps):
                    start = time.perf_counter()
                    if federated:
                        curve: Any = pointwise_ecdf(x, tau, epsilon=eps, method=method,
                                                    contributors=2, min_honest=honest,
                                                    rng=rng)
                    else:
                        curve = dp_ecdf(x, tau, epsilon=eps, method=method, rng=rng)
                    times.append(time.perf_counter() - start)
                    sq.append(float(np.mean((curve.values - truth) ** 2)))
                    exact_var = float(np.mean(np.broadcast_to(curve.point_variances,
                                                              (n_bins,))))
                results.append((label, math.sqrt(float(np.mean(sq))), math.sqrt(exact_var),
                                float(np.median(times))))
            central, central_exact = results[4][1], results[4][2]
            for label, rmse, exact, secs in results:
                table.add([n_bins, n, _fmt(eps), label, rmse, exact, _ratio(rmse, central),
                           _ratio(exact, central_exact), secs], N=n_bins, n=n,
                          epsilon=eps, release=label, cdf_rmse=rmse, exact_rmse=exact,
                          seconds=secs)
            table.gap()
    if table.rows and not any(table.rows[-1]):
        table.rows.pop()
    table.notes += [
        f"{reps} releases per row and cell; ratios divide by the central hierarchical row.",
        "federated hierarchical: every party shares its indicators at all N points; each "
        "server turns its count shares into shares of the b-ary tree's nodes, adds its "
        "shares of the per-level node noise and opens the noisy node vector; least squares "
        "in the clear (protocols/ecdf/secagg.py, method='hierarchical'). 003 tree: "
        "method='003-tree' (003 Eq. 2 at every point).",
        "h=2: both contributors' parts are needed for one discrete Laplace per node (the "
        "central variance); h=1: each part alone is one (eps-DP against either "
        "contributor), twice the variance.",
    ]
    return table


# --------------------------------------------------------------------------- main


@dataclass(frozen=True)
class Config:
    """Sizes of one run; ``QUICK`` and ``FULL`` are the two presets."""

    exact_n: int
    exact_repeats: int
    exact_brute_n: int
    hr_domains: tuple[int, ...]
    hr_sizes: tuple[int, ...]
    hr_epsilons: tuple[float, ...]
    hr_reps: Callable[[int], int]
    hr_ue_max_cells: int
    ecdf_bins: tuple[int, ...]
    ecdf_epsilons: tuple[float, ...]
    ecdf_reps: int
    smooth_max_exp: int
    smooth_thm1_reps: int
    quantile_data: tuple[str, ...] = QUANTILE_DATA
    quantile_epsilons: tuple[float, ...] = (0.1, 1.0, 4.0)
    quantile_level_counts: tuple[int, ...] = (1, 4, 16)
    quantile_reps: int = 150
    quantile_tree_reps: int = 30
    quantile_many_level_reps: int = 40
    roc_epsilons: tuple[float, ...] = (0.5, 1.0, 4.0)
    roc_reps: int = 400
    roc_smoothed_reps: int = 100
    roc_smoothed_bootstrap: int = 50
    tree_n_per_class: int = 100_000
    tree_runs: int = 30
    fedecdf_bins: tuple[int, ...] = (1024, 4096)
    fedecdf_epsilons: tuple[float, ...] = (0.5, 1.0, 4.0)
    fedecdf_reps: int = 10


QUICK = Config(exact_n=1_000_000, exact_repeats=1, exact_brute_n=1000,
               hr_domains=(64, 1024), hr_sizes=(100_000,), hr_epsilons=(1.0, 4.0),
               hr_reps=lambda n: 5, hr_ue_max_cells=110_000_000, ecdf_bins=(4096,),
               ecdf_epsilons=(1.0,), ecdf_reps=30,
               smooth_max_exp=14, smooth_thm1_reps=500,
               quantile_epsilons=(1.0,), quantile_reps=30, quantile_tree_reps=10,
               quantile_many_level_reps=20,
               roc_epsilons=(1.0,), roc_reps=100,
               roc_smoothed_reps=20, roc_smoothed_bootstrap=30,
               tree_n_per_class=20_000, tree_runs=5, fedecdf_bins=(1024,),
               fedecdf_epsilons=(1.0,), fedecdf_reps=5)
FULL = Config(exact_n=1_000_000, exact_repeats=3, exact_brute_n=2000,
              hr_domains=(64, 1024), hr_sizes=(100_000, 1_000_000), hr_epsilons=(1.0, 4.0),
              hr_reps=lambda n: 10 if n <= 100_000 else 3, hr_ue_max_cells=110_000_000,
              ecdf_bins=(4096, 16384),
              ecdf_epsilons=(0.5, 1.0, 4.0), ecdf_reps=20, smooth_max_exp=16,
              smooth_thm1_reps=2000)


def run_one(config: Config, name: str, seed: int = 0) -> Table:
    """Run one comparison (a name of ``COMPARISONS``) with the given sizes."""
    start = time.perf_counter()
    if name == "exact":
        table = exact_comparison(config.exact_n, config.exact_repeats, config.exact_brute_n,
                                 seed)
    elif name == "hadamard":
        table = hadamard_comparison(config.hr_domains, config.hr_sizes, config.hr_epsilons,
                                    config.hr_reps, seed, config.hr_ue_max_cells)
    elif name == "ecdf":
        table = ecdf_comparison(config.ecdf_bins, config.ecdf_epsilons, config.ecdf_reps,
                                seed=seed)
    elif name == "smoothing":
        table = smoothing_comparison(10, config.smooth_max_exp, 1.0, config.smooth_thm1_reps,
                                     seed)
    elif name == "fedauc":
        table = fedauc_comparison()
    elif name == "quantiles":
        table = quantile_comparison(config.quantile_data, config.quantile_epsilons,
                                    config.quantile_level_counts, config.quantile_reps,
                                    config.quantile_tree_reps, seed=seed,
                                    many_level_reps=config.quantile_many_level_reps)
    elif name == "roc":
        table = roc_comparison(config.roc_epsilons, config.roc_reps, config.roc_smoothed_reps,
                               config.roc_smoothed_bootstrap, seed)
    elif name == "ldp_tree":
        table = ldp_tree_comparison(n_per_class=config.tree_n_per_class,
                                    runs=config.tree_runs, seed=seed)
    elif name == "fedecdf":
        table = fedecdf_comparison(config.fedecdf_bins, config.fedecdf_epsilons,
                                   config.fedecdf_reps, seed=seed)
    else:
        raise ValueError(f"unknown comparison {name!r}; choose from {COMPARISONS}")
    table.notes.append(f"(this comparison ran in {time.perf_counter() - start:.1f} s)")
    return table


def run(config: Config, only: Sequence[str] = COMPARISONS, seed: int = 0) -> list[Table]:
    """Run the selected comparisons and return their tables."""
    return [run_one(config, name, seed) for name in only]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (~1 minute)")
    parser.add_argument("--only", default=",".join(COMPARISONS),
                        help=f"comma-separated subset of {','.join(COMPARISONS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--markdown", action="store_true",
                        help="print Markdown tables (for docs/benchmarks.md)")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = sorted(set(only) - set(COMPARISONS))
    if unknown:
        parser.error(f"unknown comparison(s) {unknown}; choose from {list(COMPARISONS)}")
    start = time.perf_counter()
    print(f"Peer benchmarks ({'quick' if args.quick else 'full'} mode, seed {args.seed}); "
          "every ratio is ours / theirs.", flush=True)
    for name in only:
        # Each table is printed as soon as its comparison ends.
        table = run_one(QUICK if args.quick else FULL, name, args.seed)
        print("\n" + (table.render_markdown() if args.markdown else table.render()), flush=True)
    print(f"\nTotal: {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
