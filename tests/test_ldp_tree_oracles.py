"""Tests for the per-level frequency oracles of ``"ldp-tree"`` (``oracle="auto"``,
``"subset-selection"``; ``"hadamard"`` is covered by test_ldp_auc_tree.py).

Monte Carlo tolerances are derived: a node estimate is a sum over parties of independent
contributions with a known discrete law (users split: ``alpha (Y - q)/(p - q)`` with
probability ``1/alpha``, else 0; budget split: ``(Y - q)/(p - q)``, ``Y`` the
membership bit), so its mean, variance and fourth central moment are exact; with R
replications a mean is checked within 5 sqrt(Var/R) and a variance within
5 sqrt((mu4 - Var^2)/R).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fedustat.datasets.synthetic import ur
from fedustat.privacy import DeploymentNoise, HadamardResponse, SubsetSelection, verify_ldp
from fedustat.privacy.frequency_oracles import subset_selection_moments
from fedustat.protocols import registry
from fedustat.protocols.base import Message, Role
from fedustat.protocols.local import auc_tree as tree
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel
from fedustat.stats.exact import roc_auc

KERNEL = auc_kernel()
Z = 5.0


def _bound(m1: float, m0: float, alpha: int, split: str) -> float:
    """Largest node variance over all data, per party (count 0 or n)."""
    if split == "users":
        return max(alpha * m0, alpha * m1 - 1)
    return max(m0, m1 - 1)


def _mean(m1: float, m0: float, alpha: int, split: str, d: int) -> float:
    """Node variance averaged over the d nodes of a level, per party (count n/d)."""
    f = 1 / d
    if split == "users":
        return alpha * (f * m1 + (1 - f) * m0) - f
    return f * (m1 - 1) + (1 - f) * m0


# ------------------------------------------------------------------ the choice per level


@pytest.mark.parametrize("split", ["users", "budget-basic"])
@pytest.mark.parametrize("epsilon", [0.5, 2.0, 6.0])
def test_auto_takes_the_least_average_variance_below_the_one_bit_oracle(split, epsilon):
    alpha, bits = 7, 40
    eps_l = epsilon if split == "users" else epsilon / alpha
    oracles = tree.level_oracles(alpha, eps_l, "auto", bits, split)
    rng = np.random.default_rng(2)
    for level, oracle in enumerate(oracles, 1):
        d = 1 << level
        ks = np.arange(1, min(d - 1, bits // alpha) + 1)
        _, _, m1, m0 = subset_selection_moments(d, eps_l, ks)
        hadamard = HadamardResponse(d, eps_l)
        # Candidates: both report moments at most the one-bit oracle's c^2, so that every
        # node's variance (linear in its count) is at most the one-bit oracle's.
        c2 = hadamard.report_moments[0]
        candidates = [_mean(a, b, alpha, split, d) for a, b in zip(m1, m0, strict=True)
                      if a <= c2 and b <= c2]
        candidates.append(_mean(*hadamard.report_moments, alpha, split, d))
        chosen = _mean(*oracle.report_moments, alpha, split, d)
        assert chosen == pytest.approx(min(candidates), rel=1e-12)
        assert oracle.report_width * alpha <= max(bits, 2 * alpha)
        # The average is the same for any data: check it on random counts.
        counts = rng.multinomial(1000, np.full(d, 1 / d))
        m1_o, m0_o = oracle.report_moments
        exact = (alpha * (counts * m1_o + (1000 - counts) * m0_o) - counts
                 if split == "users" else counts * (m1_o - 1) + (1000 - counts) * m0_o)
        assert exact.mean() == pytest.approx(1000 * chosen, rel=1e-9)
        # ... and no node's variance exceeds the one-bit oracle's, whatever its count.
        one_bit = (alpha * 1000 * c2 - counts if split == "users"
                   else 1000 * c2 - counts)
        assert np.all(exact <= one_bit * (1 + 1e-12))
    # The tree's v is the largest level bound (count 0 or n) of the chosen oracles.
    n = 1000
    auto = tree.node_variance_bound(n, alpha, eps_l, split, "auto", bits)
    assert auto == pytest.approx(max(n * _bound(*o.report_moments, alpha, split)
                                     for o in oracles))
    assert auto <= tree.node_variance_bound(n, alpha, eps_l, split, "hadamard") * (1 + 1e-12)


def test_named_oracles_and_large_epsilon_choice():
    assert all(isinstance(o, HadamardResponse)
               for o in tree.level_oracles(5, 1.0, "hadamard"))
    assert all(isinstance(o, SubsetSelection)
               for o in tree.level_oracles(5, 1.0, "subset-selection"))
    # At eps = 4 on small levels subset selection has the smaller variance by far.
    auto = tree.level_oracles(4, 4.0, "auto")
    assert isinstance(auto[0], SubsetSelection) and auto[0].k == 1
    # A level whose values do not fit the bit budget falls back to the Hadamard response.
    assert isinstance(tree.level_oracles(6, 4.0, "auto", max_report_bits=5)[5],
                      HadamardResponse)


# ------------------------------------------------------------------------- privacy


def _output_code(rnd: tree.TreeReportRandomizer, reports: dict, row: int) -> int:
    """Index of one party's report in the order of output_distribution."""
    def level_code(level: int, cells: np.ndarray) -> int:
        oracle = rnd.oracle(level)
        if isinstance(oracle, HadamardResponse):
            return int(2 * cells[0] + cells[1])
        subsets = list(itertools.combinations(range(oracle.d), oracle.k))
        return subsets.index(tuple(int(c) for c in cells[:oracle.k]))

    if rnd.split == "users":
        level = int(reports["level"][row])
        offset = sum(rnd.oracle(lvl).output_size for lvl in range(1, level))
        return offset + level_code(level, reports["report"][row])
    code, start = 0, 0
    for level in range(1, rnd.alpha + 1):
        width = rnd.oracle(level).report_width
        code = code * rnd.oracle(level).output_size + level_code(
            level, reports["report"][row, start:start + width])
        start += width
    return code


@pytest.mark.parametrize("split", ["users", "budget-basic"])
@pytest.mark.parametrize("oracle", ["auto", "subset-selection"])
def test_tree_randomizer_with_new_oracles_is_exactly_eps_ldp(split, oracle):
    eps = 3.0
    rnd = tree.TreeReportRandomizer(8, eps, split=split, oracle=oracle)
    assert any(isinstance(o, SubsetSelection) for o in rnd.oracles)
    check = verify_ldp(rnd)
    assert check.passed and check.observed_epsilon == pytest.approx(eps)
    assert not verify_ldp(rnd, epsilon=0.99 * eps).passed


@pytest.mark.parametrize("split", ["users", "budget-basic"])
def test_tree_randomizer_samples_the_verified_distribution(split):
    rnd = tree.TreeReportRandomizer(8, 2.5, split=split, oracle="subset-selection")
    draws = 20000
    reports = rnd.randomize(np.full(draws, 5), np.random.default_rng(4))
    codes = np.array([_output_code(rnd, reports, r) for r in range(draws)])
    probs = rnd.output_distribution(5)
    counts = np.bincount(codes, minlength=probs.size)
    tol = Z * np.sqrt(draws * probs * (1 - probs))
    assert np.all(np.abs(counts - draws * probs) <= tol)


# ------------------------------------------------------ node estimates: bias, variance


SCORES_8 = np.repeat(np.arange(8), [60, 0, 10, 25, 5, 70, 0, 30])


def _node_law(rnd: tree.TreeReportRandomizer, level: int, node: int
              ) -> tuple[float, float, float]:
    """Exact mean, variance and mu4 of a node estimate under subset selection."""
    oracle = rnd.oracle(level)
    p, q = oracle.include_probability, oracle.other_probability
    hold = rnd.prefix(SCORES_8, level) == node
    y = np.where(hold, p, q)  # P(node in the party's subset)
    alpha = rnd.alpha
    if rnd.split == "users":
        values = np.array([alpha * (1 - q) / (p - q), alpha * -q / (p - q), 0.0])
        probs = np.stack([y / alpha, (1 - y) / alpha, np.full(y.shape, 1 - 1 / alpha)], -1)
    else:
        values = np.array([(1 - q) / (p - q), -q / (p - q)])
        probs = np.stack([y, 1 - y], -1)
    mean = (values * probs).sum(-1)
    centred = values - mean[:, None]
    var = (centred**2 * probs).sum(-1)
    mu4 = (centred**4 * probs).sum(-1)
    total = float(var.sum())
    return float(mean.sum()), total, float((mu4 - 3 * var**2).sum()) + 3 * total**2


@pytest.mark.parametrize("split,epsilon", [("users", 2.0), ("budget-basic", 6.0)])
def test_subset_selection_node_estimates_unbiased_with_exact_variance(split, epsilon):
    rnd = tree.TreeReportRandomizer(8, epsilon, split=split, oracle="subset-selection")
    rng = np.random.default_rng(21)
    reps = 1500
    est = {lvl: np.empty((reps, 1 << lvl)) for lvl in (1, 2, 3)}
    for r in range(reps):
        node_est = tree.LevelEstimates.from_reports(rnd, rnd.randomize(SCORES_8, rng))
        for lvl in est:
            est[lvl][r] = node_est(lvl, np.arange(1 << lvl))
    n = SCORES_8.size
    for lvl, values in est.items():
        m1, m0 = rnd.oracle(lvl).report_moments
        for node in range(1 << lvl):
            mean, var, mu4 = _node_law(rnd, lvl, node)
            count = int(np.count_nonzero(rnd.prefix(SCORES_8, lvl) == node))
            assert mean == pytest.approx(count)
            # The module's exact formula (linear in the count).
            exact = (rnd.alpha * (count * m1 + (n - count) * m0) - count
                     if split == "users" else count * (m1 - 1) + (n - count) * m0)
            assert var == pytest.approx(exact)
            assert var <= rnd.node_variance(n) * (1 + 1e-12)
            x = values[:, node]
            assert abs(x.mean() - count) <= Z * math.sqrt(var / reps)
            assert abs(x.var(ddof=1) - var) <= Z * math.sqrt((mu4 - var**2) / reps)


# ------------------------------------------------------------------- the protocol


def _data(alpha: int, n: int, seed: int) -> tuple[np.ndarray, float]:
    ds = ur(alpha, n, rng=seed)
    s, y = ds.columns["score"], ds.columns["label"]
    return KERNEL.pack(s, y), roc_auc(s, y)


@pytest.mark.parametrize("split", ["users", "budget-basic"])
def test_reduced_server_step_equals_the_in_process_release(split):
    data, _ = _data(6, 800, 3)
    proto = registry.make("ldp-tree", KERNEL, epsilon=3.0, d=64, split=split)
    assert proto.oracle == "auto"
    state = proto.init_parties(data, np.arange(len(data)))
    _, msg = proto.party_step(state, None, np.random.default_rng(8))
    _, whole = proto.server_step(proto.init_server(len(data)), msg, np.random.default_rng(0))
    # Three batches reduced in another order give the same numbers.
    cuts = [0, 250, 500, len(data)]
    batches = []
    for a, b in itertools.pairwise(cuts):
        rows = {k: np.asarray(v)[a:b] for k, v in msg.fields.items()}
        batches.append(proto.summarize_batch(
            Message(Role.PARTY, Role.SERVER, rows, msg.bits_per_value, msg.parties[a:b]),
            None))
    total = proto.combine_summaries(batches[2], proto.combine_summaries(batches[0],
                                                                        batches[1]))
    _, reduced = proto.server_step_reduced(proto.init_server(len(data)), total,
                                           np.random.default_rng(0))
    assert reduced.value == whole.value and reduced.std_error == whole.std_error
    assert reduced.diagnostics["oracle_per_level"] == whole.diagnostics["oracle_per_level"]


def test_auto_is_more_accurate_than_the_one_bit_oracle_at_large_epsilon():
    # At eps = 4 the per-report variance of the small levels drops from c^2 = 1.08 to a
    # few hundredths (subset selection, k = 1..4): over 30 runs the MSE must drop too.
    data, exact = _data(8, 4000, 5)
    mse = {}
    for oracle in ("hadamard", "auto"):
        errs = [simulate(registry.make("ldp-tree", KERNEL, epsilon=4.0, d=256,
                                       oracle=oracle, recursion="pruned"), data,
                         rng=r).value - exact
                for r in range(30)]
        mse[oracle] = float(np.mean(np.square(errs)))
    assert mse["auto"] < mse["hadamard"]


def test_message_bits_and_diagnostics():
    data, _ = _data(5, 300, 8)
    for split in ("users", "budget-basic"):
        proto = tree.LdpAucTree(KERNEL, 4.0, d=32, split=split, recursion="pruned")
        est = simulate(proto, data, rng=9)
        eps_l = proto.randomizer.level_epsilon
        assert est.cost.bits_per_party == tree.report_bits_per_party(5, eps_l, split)
        assert est.diagnostics["oracle"] == "auto"
        assert len(est.diagnostics["oracle_per_level"]) == 5
        assert est.diagnostics["v_pos"] == pytest.approx(
            proto.randomizer.node_variance(est.diagnostics["n_pos"]))
    assert "oracle='auto'" in repr(proto)


def test_deployment_noise_with_subset_selection():
    proto = tree.LdpAucTree(KERNEL, 4.0, d=16, noise=DeploymentNoise(),
                            oracle="subset-selection")
    state = proto.init_parties(KERNEL.pack([3, 15, 0, 7], [1, 0, 1, 0]), np.arange(4))
    _, msg = proto.party_step(state, None, np.random.default_rng(0))
    summary = proto.summarize_batch(msg, None)
    assert summary["n_pos"] == 2 and summary["n_neg"] == 2
    assert sum(n for _, _, n in summary["levels"][0]) == 2


# ---------------------------------------------------------------------- bad inputs


def _message(proto: tree.LdpAucTree, **fields: np.ndarray) -> Message:
    bits = {"label": 1, "report": proto.randomizer.element_bits, "level": 3}
    return Message(Role.PARTY, Role.SERVER, fields, {k: bits[k] for k in fields},
                   np.arange(len(fields["label"])))


def test_bad_inputs():
    with pytest.raises(ValueError, match="oracle must be one of"):
        tree.LdpAucTree(KERNEL, 1.0, d=8, oracle="olh")
    with pytest.raises(ValueError, match="cannot hold one 3-bit value"):
        tree.TreeReportRandomizer(8, 1.0, oracle="subset-selection", max_report_bits=2)
    with pytest.raises(ValueError, match="max_report_bits must be >= 1"):
        tree.level_oracles(3, 1.0, "auto", 0)
    proto = tree.LdpAucTree(KERNEL, 0.5, d=8, oracle="subset-selection")
    width = proto.randomizer.report_width
    assert proto.randomizer.oracle(1).report_width == 1 < width
    good = np.zeros((2, width), np.int64)
    good[:, 0] = 1
    with pytest.raises(ValueError, match=r"report levels must be in 1\.\.3"):
        proto.summarize_batch(_message(proto, label=np.array([0, 1]), level=np.array([0, 1]),
                                       report=good), None)
    padded = good.copy()
    padded[:, -1] = 1  # level 1 reports one value; the rest must stay 0
    with pytest.raises(ValueError, match="level 1 reports must leave columns"):
        proto.summarize_batch(_message(proto, label=np.array([0, 1]), level=np.array([1, 1]),
                                       report=padded), None)
    with pytest.raises(ValueError, match="columns"):
        proto.summarize_batch(_message(proto, label=np.array([0, 1]), level=np.array([1, 1]),
                                       report=good[:, :1].repeat(width + 1, 1)), None)
    outside = good.copy()
    outside[:, 0] = 2  # level 1 has the values 0 and 1
    with pytest.raises(ValueError, match="outside the input domain"):
        proto.summarize_batch(_message(proto, label=np.array([0, 1]), level=np.array([1, 1]),
                                       report=outside), None)
