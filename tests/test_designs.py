"""Designs: degree bounds, distinct tuples, uniformity, reproducibility, bad input."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest

from fedustat.stats import (
    Design,
    balanced_sample,
    bernoulli_sample,
    complete_design,
    permutation_pairs,
    uniform_sample,
)
from fedustat.stats.designs import _unrank_colex

Z = 5.0  # Monte Carlo checks allow 5 standard errors


def assert_valid(design: Design, n: int, k: int) -> None:
    t = design.tuples
    assert t.dtype == np.int64 and t.shape[1] == k
    assert t.size == 0 or (t.min() >= 0 and t.max() < n)
    assert np.all(np.diff(t, axis=1) > 0)  # sorted rows of distinct parties
    assert design.degrees.sum() == k * design.size
    np.testing.assert_array_equal(design.degrees, np.bincount(t.ravel(), minlength=n))


# ----------------------------------------------------------------------------- BalancedSamp


@pytest.mark.parametrize(("n", "m", "k"), [
    (10, 20, 2), (10, 45, 2), (11, 30, 2), (50, 100, 2), (200, 333, 2),
    (9, 12, 3), (20, 100, 3), (30, 1000, 3), (31, 77, 3), (12, 40, 4), (7, 7, 7 - 1),
])
def test_balanced_sample_degrees_and_distinct_edges(n, m, k):
    cap = math.ceil(k * m / n)
    for seed in range(5):
        design = balanced_sample(m, k, n, rng=seed)
        assert_valid(design, n, k)
        assert design.size == m
        assert design.max_degree <= cap
        assert np.unique(design.tuples, axis=0).shape[0] == m  # E is a set


def test_balanced_sample_multiset_variant():
    design = balanced_sample(60, 2, 6, rng=1, distinct=False)  # 60 > C(6, 2) = 15
    assert_valid(design, 6, 2)
    assert design.size == 60 and design.max_degree <= 20
    assert np.unique(design.tuples, axis=0).shape[0] < 60


def test_balanced_sample_degrees_are_balanced_when_km_divisible_by_n():
    design = balanced_sample(300, 3, 100, rng=4)
    np.testing.assert_array_equal(design.degrees, np.full(100, 9))


def test_balanced_sample_large_is_fast():
    n = 100_000
    start = time.perf_counter()
    design = balanced_sample(2 * n, 2, n, rng=0)
    elapsed = time.perf_counter() - start
    assert design.size == 2 * n and design.max_degree <= 4
    assert elapsed < 5.0  # about 0.5 s here; generous for slow CI machines


def test_balanced_sample_edges_are_marginally_uniform():
    # relabelling symmetry: every pair is equally likely to be an edge
    n, m, reps = 6, 5, 3000
    counts = np.zeros((n, n))
    rng = np.random.default_rng(8)
    for _ in range(reps):
        t = balanced_sample(m, 2, n, rng).tuples
        np.add.at(counts, (t[:, 0], t[:, 1]), 1)
    pairs = counts[np.triu_indices(n, 1)]
    p = m / 15
    se = math.sqrt(reps * p * (1 - p))
    assert np.all(np.abs(pairs - reps * p) <= Z * se)


def test_balanced_sample_reproducible_and_bad_input():
    a = balanced_sample(40, 3, 15, rng=3)
    b = balanced_sample(40, 3, 15, rng=np.random.default_rng(3))
    np.testing.assert_array_equal(a.tuples, b.tuples)
    with pytest.raises(ValueError, match="k=4 exceeds the number of parties n=3"):
        balanced_sample(2, 4, 3)
    with pytest.raises(ValueError, match=r"m=11 exceeds the number of distinct 2-subsets"):
        balanced_sample(11, 2, 5)
    with pytest.raises(ValueError, match="m must be >= 1"):
        balanced_sample(0, 2, 5)
    with pytest.raises(TypeError, match="n must be an integer"):
        balanced_sample(3, 2, 5.5)


def test_balanced_sample_restarts_and_gives_up():
    # m = n = 5, k = 2: every party has capacity 2, so E must be a 5-cycle; a run that
    # closes a triangle first leaves only the edge {3, 4} twice and must restart (Alg. 1
    # lines 5-6)
    failures = 0
    for seed in range(60):
        try:
            balanced_sample(5, 2, 5, rng=seed, max_restarts=0)
        except RuntimeError as exc:
            assert "restarted 0 times" in str(exc)
            failures += 1
        design = balanced_sample(5, 2, 5, rng=seed)  # restarts until it succeeds
        np.testing.assert_array_equal(design.degrees, np.full(5, 2))
    assert failures > 0


# ----------------------------------------------------------------------------- permutations


@pytest.mark.parametrize(("n", "P"), [(10, 1), (10, 3), (11, 2), (2, 5), (101, 4)])
def test_permutation_pairs_degrees(n, P):
    design = permutation_pairs(n, P, rng=n * P)
    assert_valid(design, n, 2)
    assert design.size == P * (n // 2)
    assert design.max_degree == P
    if n % 2 == 0:
        np.testing.assert_array_equal(design.degrees, np.full(n, P))
    else:
        assert design.degrees.min() >= 0 and design.degrees.sum() == P * (n - 1)


def test_permutation_pairs_reproducible_and_bad_input():
    a = permutation_pairs(9, 3, rng=5)
    np.testing.assert_array_equal(a.tuples, permutation_pairs(9, 3, rng=5).tuples)
    with pytest.raises(ValueError, match="n must be >= 2"):
        permutation_pairs(1, 2)
    with pytest.raises(ValueError, match="P must be >= 1"):
        permutation_pairs(4, 0)


# ----------------------------------------------------------------------------- uniform


def test_colex_unranking_enumerates_all_subsets():
    for n, k in [(7, 1), (7, 3), (9, 4), (6, 6), (12, 2)]:
        total = math.comb(n, k)
        rows = _unrank_colex(np.arange(total), n, k, total)
        assert {tuple(r) for r in rows.tolist()} == set(itertools.combinations(range(n), k))


@pytest.mark.parametrize(("n", "m", "k"), [(10, 45, 2), (10, 7, 3), (3000, 5000, 2),
                                           (500, 20_000, 3), (60, 100, 25)])
def test_uniform_sample_distinct(n, m, k):
    design = uniform_sample(m, k, n, rng=1)
    assert_valid(design, n, k)
    assert design.size == m
    assert np.unique(design.tuples, axis=0).shape[0] == m


@pytest.mark.parametrize("n", [7, 3000])  # ranking path and rejection path
def test_uniform_sample_is_uniform(n):
    # each fixed pair is included with probability m / C(n, 2)
    rng = np.random.default_rng(n)
    m, reps, N = 5, 4000, math.comb(n, 2)
    watched = {(0, 1), (2, 5), (1, 6)}
    hits = dict.fromkeys(watched, 0)
    for _ in range(reps):
        for row in uniform_sample(m, 2, n, rng).tuples.tolist():
            if tuple(row) in hits:
                hits[tuple(row)] += 1
    p = m / N
    se = math.sqrt(reps * p * (1 - p))
    for count in hits.values():
        assert abs(count - reps * p) <= Z * se + 1


def test_uniform_sample_bad_input():
    with pytest.raises(ValueError, match=r"m=11 exceeds .* 3-subsets C\(5, 3\) = 10"):
        uniform_sample(11, 3, 5)
    with pytest.raises(ValueError, match="k=6 exceeds the number of parties n=5"):
        uniform_sample(1, 6, 5)
    assert uniform_sample(0, 2, 5).size == 0


# ----------------------------------------------------------------------------- Bernoulli


def test_bernoulli_sample_count_is_binomial():
    rng = np.random.default_rng(12)
    n, k, p, reps = 30, 3, 0.01, 300
    N = math.comb(n, k)
    sizes = np.array([bernoulli_sample(p, k, n, rng).size for _ in range(reps)])
    se = math.sqrt(N * p * (1 - p) / reps)
    assert abs(sizes.mean() - N * p) <= Z * se


def test_bernoulli_sample_huge_population_does_not_enumerate():
    design = bernoulli_sample(1e-9, 2, 10**6, rng=0)  # C(n, 2) ~ 5e11 subsets
    assert_valid(design, 10**6, 2)
    N = math.comb(10**6, 2)
    assert abs(design.size - N * 1e-9) <= Z * math.sqrt(N * 1e-9)
    assert bernoulli_sample(1.0, 2, 6, rng=0).size == 15
    assert bernoulli_sample(0.0, 2, 6, rng=0).size == 0
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        bernoulli_sample(1.5, 2, 6)


# ----------------------------------------------------------------------------- complete / Design


def test_complete_design():
    design = complete_design(7, 3)
    assert design.size == 35 and design.max_degree == math.comb(6, 2)
    assert [tuple(r) for r in design.tuples.tolist()] == list(itertools.combinations(range(7), 3))
    assert complete_design(5, 1).size == 5
    with pytest.raises(ValueError, match=r"C\(100, 3\) = 1.62e\+05 tuples, .* max_size=1000"):
        complete_design(100, 3, max_size=1000)


def test_design_validation():
    d = Design(np.array([[0, 1], [1, 2]]), 3, "x")
    assert d.k == 2 and len(d) == 2 and d.max_degree == 2
    np.testing.assert_array_equal(d.degrees, [1, 2, 1])
    with pytest.raises(ValueError, match="repeated party"):
        Design(np.array([[0, 0]]), 3)
    with pytest.raises(ValueError, match=r"outside \[0, 3\)"):
        Design(np.array([[0, 3]]), 3)
    with pytest.raises(ValueError, match=r"shape \(m, k\)"):
        Design(np.array([0, 1]), 3)
    with pytest.raises(TypeError, match="integer indices"):
        Design(np.array([[0.0, 1.0]]), 3)
    with pytest.raises(ValueError, match="read-only"):
        d.tuples[0, 0] = 2


@pytest.mark.parametrize("n,m", [(7, 21), (10, 40), (12, 66), (50, 1225), (1000, 2000)])
@pytest.mark.parametrize("distinct", [True, False])
def test_balanced_pairs_path_draws_the_general_paths_design(n, m, distinct):
    # k = 2 has its own, faster loop; for a seed it must be the same design, or
    # the same restart, as the loop for any k.
    from fedustat.stats.designs import _balanced_attempt_any, _balanced_attempt_pairs

    capacity = -(-2 * m // n)
    for seed in range(4):
        pairs = _balanced_attempt_pairs(m, n, capacity, np.random.default_rng(seed), distinct)
        general = _balanced_attempt_any(m, 2, n, capacity, np.random.default_rng(seed),
                                        distinct)
        assert (pairs is None) == (general is None)
        if pairs is not None:
            np.testing.assert_array_equal(pairs, general)
