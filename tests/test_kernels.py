"""Kernels: fast paths equal brute force, statistics equal scikit-learn / SciPy / NumPy."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn.metrics import rand_score, roc_auc_score

from fedustat.stats import (
    KERNEL_FACTORIES,
    Kernel,
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
    mann_whitney_kernel,
    rand_index_kernel,
    renyi2_entropy_kernel,
    user_kernel,
    ustatistic,
    variance_kernel,
    vus_kernel,
)

TOL = 1e-12
HYP = settings(deadline=None, max_examples=60, derandomize=True)


def brute_pairs(func, values) -> float:
    """Mean of a scalar pair function over i < j (an independent reference loop)."""
    pairs = list(itertools.combinations(range(len(values)), 2))
    return sum(func(values[i], values[j]) for i, j in pairs) / len(pairs)


def vus_reference(scores, classes) -> float:
    """P(S0 < S1 < S2) over all (class 0, 1, 2) triples, ties broken uniformly."""
    s0 = [s for s, c in zip(scores, classes, strict=True) if c == 0]
    s1 = [s for s, c in zip(scores, classes, strict=True) if c == 1]
    s2 = [s for s, c in zip(scores, classes, strict=True) if c == 2]
    total = 0.0
    for a, b, c in itertools.product(s0, s1, s2):
        # enumerate the tie-breaking orders: the fraction of the 6 strict orderings of
        # (a, b, c) consistent with the values that put a < b < c
        consistent = [p for p in itertools.permutations(range(3))
                      if all((a, b, c)[p[i]] <= (a, b, c)[p[i + 1]] for i in range(2))]
        total += sum(p == (0, 1, 2) for p in consistent) / len(consistent)
    return total / (len(s0) * len(s1) * len(s2))


# ----------------------------------------------------------------------------- AUC

tied_scores = st.lists(st.integers(0, 6), min_size=4, max_size=60)
free_scores = st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=4, max_size=60,
                       unique=True)


@HYP
@given(scores=st.one_of(tied_scores, free_scores), data=st.data())
def test_auc_statistic_equals_sklearn(scores, data):
    labels = data.draw(st.lists(st.integers(0, 1), min_size=len(scores), max_size=len(scores)))
    assume(0 < sum(labels) < len(labels))
    kernel = auc_kernel()
    packed = kernel.pack(scores, labels)
    u = ustatistic(kernel, packed)
    assert u == pytest.approx(ustatistic(kernel, packed, use_fast_path=False), abs=TOL)
    assert kernel.statistic(u, packed) == pytest.approx(roc_auc_score(labels, scores), abs=TOL)


@HYP
@given(scores=st.one_of(tied_scores, free_scores), data=st.data())
def test_mann_whitney_statistic_equals_scipy(scores, data):
    labels = np.array(data.draw(st.lists(st.integers(0, 1), min_size=len(scores),
                                         max_size=len(scores))))
    assume(0 < labels.sum() < labels.size)
    kernel = mann_whitney_kernel()
    packed = kernel.pack(scores, labels)
    s = np.asarray(scores, dtype=float)
    ref = scipy.stats.mannwhitneyu(s[labels == 1], s[labels == 0]).statistic
    assert kernel.statistic(ustatistic(kernel, packed), packed) == pytest.approx(ref, abs=1e-9)


def test_auc_labels_minus_one_and_bool_are_normalized():
    scores = [0.1, 0.4, 0.35, 0.8]
    kernel = auc_kernel()
    a = kernel.pack(scores, [-1, -1, 1, 1])
    b = kernel.pack(scores, [False, False, True, True])
    np.testing.assert_array_equal(a, b)
    assert kernel.statistic(ustatistic(kernel, a), a) == pytest.approx(0.75, abs=TOL)


# ----------------------------------------------------------------------------- Kendall

pairs_tied = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=3, max_size=60)
pairs_free = st.lists(st.tuples(st.floats(-100, 100, allow_nan=False),
                                st.floats(-100, 100, allow_nan=False)), min_size=3, max_size=60)


@HYP
@given(pairs=st.one_of(pairs_tied, pairs_free))
def test_kendall_kernels_equal_scipy_and_brute_force(pairs):
    x = np.array([p[0] for p in pairs], dtype=float)
    y = np.array([p[1] for p in pairs], dtype=float)
    assume(np.unique(x).size > 1 and np.unique(y).size > 1)
    for variant in ("a", "b"):
        kernel = kendall_tau_kernel(variant)
        packed = kernel.pack(x, y)
        u = ustatistic(kernel, packed)
        assert u == pytest.approx(ustatistic(kernel, packed, use_fast_path=False), abs=TOL)
        stat = kernel.statistic(u, packed)
        if variant == "a":
            ref = brute_pairs(lambda a, b: np.sign(a[0] - b[0]) * np.sign(a[1] - b[1]),
                              list(zip(x, y, strict=True)))
        else:
            ref = scipy.stats.kendalltau(x, y).statistic
        assert stat == pytest.approx(ref, abs=TOL)


def test_kendall_b_constant_column_raises():
    kernel = kendall_tau_kernel("b")
    packed = kernel.pack([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="x is constant"):
        kernel.statistic(ustatistic(kernel, packed), packed)


# ------------------------------------------------------- every built-in: fast == brute


def random_tied_data(name: str, n: int, rng: np.random.Generator) -> tuple[Kernel, np.ndarray]:
    if name in ("auc", "mann_whitney"):
        kernel = KERNEL_FACTORIES[name]()
        labels = rng.integers(0, 2, n)
        labels[:2] = [0, 1]
        return kernel, kernel.pack(rng.integers(0, 8, n), labels)
    if name == "kendall_tau":
        kernel = kendall_tau_kernel("b")
        return kernel, kernel.pack(rng.integers(0, 5, n), rng.integers(0, 6, n))
    if name in ("gini_mean_difference", "variance"):
        kernel = KERNEL_FACTORIES[name](bounds=(0.0, 10.0))
        return kernel, kernel.pack(np.round(rng.uniform(0, 10, n), 1))
    if name in ("duplicate_pair_ratio", "renyi2_entropy"):
        kernel = KERNEL_FACTORIES[name]()
        return kernel, kernel.pack(rng.integers(0, 6, n))
    if name == "rand_index":
        kernel = rand_index_kernel()
        return kernel, kernel.pack(rng.integers(0, 3, n), rng.integers(0, 4, n))
    if name == "vus":
        kernel = vus_kernel()
        classes = rng.integers(0, 3, n)
        classes[:3] = [0, 1, 2]
        return kernel, kernel.pack(rng.integers(0, 4, n), classes)
    raise AssertionError(name)


@pytest.mark.parametrize("name", sorted(KERNEL_FACTORIES))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_builtin_fast_path_equals_brute_force(name, seed):
    rng = np.random.default_rng(seed)
    n = 30 if name == "vus" else 45
    kernel, data = random_tied_data(name, n, rng)
    assert kernel.exact is not None
    fast = ustatistic(kernel, data)
    brute = ustatistic(kernel, data, use_fast_path=False)
    scale = max(1.0, abs(brute))
    assert fast == pytest.approx(brute, abs=TOL * scale)


@pytest.mark.parametrize("name", sorted(KERNEL_FACTORIES))
def test_row_sums_equal_brute_force(name):
    rng = np.random.default_rng(17)
    kernel, data = random_tied_data(name, 37, rng)
    if kernel.degree != 2:
        assert kernel.row_sums is None
        return
    if name == "kendall_tau":
        assert kernel.row_sums is None  # per-record concordance counts have no fast path here
        return
    n = data.shape[0]
    i, j = np.triu_indices(n, 1)
    values = kernel.evaluate(data, np.stack([i, j], axis=1))
    F = np.zeros((n, n))
    F[i, j] = values
    F[j, i] = values
    R, Q = kernel.row_sums(data)
    scale = max(1.0, float(np.abs(F).max()) ** 2 * n)
    np.testing.assert_allclose(R, F.sum(axis=1), rtol=0, atol=TOL * scale)
    np.testing.assert_allclose(Q, (F**2).sum(axis=1), rtol=0, atol=TOL * scale)


def test_row_sums_only_for_degree_two():
    with pytest.raises(ValueError, match="row_sums is defined for degree-2 kernels only"):
        Kernel("k", 3, ("x",), (0.0, 1.0), func=lambda a, b, c: a[:, 0],
               row_sums=lambda d: (d[:, 0], d[:, 0]))


@pytest.mark.parametrize("seed", [0, 1])
def test_builtin_statistics_equal_references(seed):
    rng = np.random.default_rng(seed)
    n = 50
    x = np.round(rng.uniform(0, 10, n), 1)
    codes = rng.integers(0, 6, n).astype(float)

    k = gini_kernel((0.0, 10.0))
    ref = brute_pairs(lambda a, b: abs(a - b), list(x))
    assert k.statistic(ustatistic(k, x), x) == pytest.approx(ref, abs=TOL)

    k = variance_kernel((0.0, 10.0))
    assert k.statistic(ustatistic(k, x), x) == pytest.approx(np.var(x, ddof=1), abs=TOL)

    k = duplicate_pair_kernel()
    ratio = brute_pairs(lambda a, b: float(a == b), list(codes))
    assert k.statistic(ustatistic(k, codes), codes) == pytest.approx(ratio, abs=TOL)

    k = renyi2_entropy_kernel()
    assert k.statistic(ustatistic(k, codes), codes) == pytest.approx(-math.log(ratio), abs=TOL)

    a, b = rng.integers(0, 3, n), rng.integers(0, 4, n)
    k = rand_index_kernel()
    packed = k.pack(a, b)
    assert k.statistic(ustatistic(k, packed), packed) == pytest.approx(rand_score(a, b), abs=TOL)

    scores, classes = rng.integers(0, 4, 24).astype(float), rng.integers(0, 3, 24)
    classes[:3] = [0, 1, 2]
    k = vus_kernel()
    packed = k.pack(scores, classes)
    assert k.statistic(ustatistic(k, packed), packed) == pytest.approx(
        vus_reference(scores, classes), abs=TOL)


def test_renyi2_without_duplicates_is_infinite():
    k = renyi2_entropy_kernel()
    x = np.arange(5.0)
    assert k.statistic(ustatistic(k, x), x) == math.inf


def test_vus_kernel_tie_weights():
    k = vus_kernel()
    data = k.pack([1.0, 1.0, 2.0, 5.0, 5.0, 5.0], [0, 1, 2, 0, 1, 2])
    # (s0, s1, s2) = (1, 1, 2), (5, 5, 5), (1, 5, 5), (5, 1, 2); [0, 1, 3] has two of class 0
    values = k.evaluate(data, [[0, 1, 2], [3, 4, 5], [0, 4, 5], [3, 1, 2], [0, 1, 3]])
    np.testing.assert_allclose(values, [0.5, 1 / 6, 0.5, 0.0, 0.0])
    # symmetric: the order of the records in a tuple does not matter
    assert k.evaluate(data, [[2, 1, 0]])[0] == values[0]


# ----------------------------------------------------------------------------- user kernels


def test_degree3_user_kernel_equals_itertools_loop():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(14, 2))

    def median_of_sums(a, b, c):
        return np.median(np.stack([a.sum(1), b.sum(1), c.sum(1)]), axis=0)

    k = user_kernel(median_of_sums, 3, ("u", "v"), (-2.0, 2.0), name="median3")
    expected = np.mean([np.median([x[i].sum(), x[j].sum(), x[h].sum()])
                        for i, j, h in itertools.combinations(range(14), 3)])
    assert ustatistic(k, x) == pytest.approx(expected, abs=TOL)
    assert ustatistic(k, x, block_size=7) == pytest.approx(expected, abs=TOL)
    assert k.exact is None and k.sensitivity == 4.0


def test_degree1_and_degree4_user_kernels():
    x = np.linspace(0, 1, 9)
    k1 = user_kernel(lambda a: a[:, 0] ** 2, 1, "x", (0.0, 1.0))
    assert ustatistic(k1, x) == pytest.approx(np.mean(x**2), abs=TOL)
    k4 = user_kernel(lambda a, b, c, d: np.maximum.reduce([a, b, c, d])[:, 0], 4, "x", (0, 1))
    expected = np.mean([max(q) for q in itertools.combinations(x, 4)])
    assert ustatistic(k4, x) == pytest.approx(expected, abs=TOL)


def test_kernel_properties():
    k = gini_kernel((2.0, 7.0))
    assert k.sensitivity == 5.0 and k.lipschitz == 1.0 and k.degree == 2
    assert kendall_tau_kernel().sensitivity == 2.0
    v = variance_kernel((0.0, 4.0))
    assert v.output_range == (0.0, 8.0) and v.lipschitz == 4.0
    assert "auc" in repr(auc_kernel())
    assert auc_kernel().columns == ("score", "label")


# ----------------------------------------------------------------------------- bad input


def test_user_kernel_out_of_range_values_raise():
    k = user_kernel(lambda a, b: a[:, 0] + b[:, 0], 2, "x", (0.0, 1.0))
    with pytest.raises(ValueError, match="outside its declared output_range"):
        ustatistic(k, [0.4, 0.9, 0.7])


def test_user_kernel_wrong_output_shape_raises():
    k = user_kernel(lambda a, b: np.zeros(3), 2, "x", (0.0, 1.0))
    with pytest.raises(ValueError, match="one value per tuple"):
        k.evaluate([0.1, 0.2], [[0, 1]])


@pytest.mark.parametrize("degree", [0, -2])
def test_degree_below_one_raises(degree):
    with pytest.raises(ValueError, match="degree must be >= 1"):
        user_kernel(lambda a: a[:, 0], degree, "x", (0.0, 1.0))


def test_bad_kernel_definitions_raise():
    with pytest.raises(ValueError, match="output_range must be finite with lo < hi"):
        user_kernel(lambda a, b: a[:, 0], 2, "x", (1.0, 1.0))
    with pytest.raises(ValueError, match="columns must be a non-empty"):
        user_kernel(lambda a, b: a[:, 0], 2, (), (0.0, 1.0))
    with pytest.raises(ValueError, match="lipschitz must be"):
        user_kernel(lambda a, b: a[:, 0], 2, "x", (0.0, 1.0), lipschitz=-1.0)
    with pytest.raises(TypeError, match="func must be callable"):
        user_kernel(3, 2, "x", (0.0, 1.0))
    with pytest.raises(ValueError, match="variant must be 'a' or 'b'"):
        kendall_tau_kernel("c")
    with pytest.raises(ValueError, match="bounds must be finite with lower < upper"):
        gini_kernel((3.0, 1.0))


def test_nan_raises():
    with pytest.raises(ValueError, match="score contains 1 NaN"):
        auc_kernel().pack([0.1, np.nan, 0.3], [0, 1, 1])
    with pytest.raises(ValueError, match="data contains 1 NaN"):
        ustatistic(duplicate_pair_kernel(), [1.0, np.nan, 2.0])


def test_mismatched_lengths_raise():
    with pytest.raises(ValueError, match="inconsistent lengths: score=3, label=4"):
        auc_kernel().pack([0.1, 0.2, 0.3], [0, 1, 1, 0])


def test_non_binary_labels_raise():
    with pytest.raises(ValueError, match="label must be binary"):
        auc_kernel().pack([0.1, 0.2, 0.3], [0, 1, 2])


def test_single_class_raises():
    with pytest.raises(ValueError, match="label has no negative example"):
        auc_kernel().pack([0.1, 0.2, 0.3], [1, 1, 1])
    with pytest.raises(ValueError, match="label has no positive example"):
        mann_whitney_kernel().pack([0.1, 0.2, 0.3], [0, 0, 0])


def test_data_outside_gini_bounds_raises():
    k = gini_kernel((0.0, 1.0))
    with pytest.raises(ValueError, match=r"x has values outside the declared bounds \[0.0, 1.0\]"):
        k.pack([0.2, 1.5, 0.3])
    with pytest.raises(ValueError, match="outside the declared bounds"):
        ustatistic(variance_kernel((0.0, 1.0)), [-0.5, 0.5])


def test_wrong_number_of_columns_raises():
    k = auc_kernel()
    with pytest.raises(ValueError, match=r"data has 3 column\(s\) but kernel 'auc' needs 2"):
        ustatistic(k, np.zeros((4, 3)))
    with pytest.raises(ValueError, match="data is 1-D but kernel 'auc' needs 2 columns"):
        ustatistic(k, np.zeros(4))
    with pytest.raises(ValueError, match=r"kernel 'auc' takes 2 column\(s\)"):
        k.pack([0.1, 0.2])


def test_too_few_records_raise():
    with pytest.raises(ValueError, match="degree 3 needs at least 3"):
        ustatistic(vus_kernel(), np.array([[0.1, 0.0], [0.2, 1.0]]))


def test_vus_bad_classes_raise():
    k = vus_kernel()
    with pytest.raises(ValueError, match="class must contain the ordinal classes 0, 1, 2"):
        k.pack([0.1, 0.2, 0.3], [0, 1, 3])
    with pytest.raises(ValueError, match=r"class has no record of class \[2\]"):
        k.pack([0.1, 0.2, 0.3], [0, 1, 1])


def test_bad_tuples_raise():
    k = duplicate_pair_kernel()
    x = [1.0, 2.0, 1.0]
    with pytest.raises(ValueError, match="repeated index"):
        k.evaluate(x, [[0, 0]])
    with pytest.raises(ValueError, match=r"tuples must have shape \(m, 2\)"):
        k.evaluate(x, [[0, 1, 2]])
    with pytest.raises(ValueError, match=r"indices outside \[0, 3\)"):
        k.evaluate(x, [[0, 3]])
    with pytest.raises(TypeError, match="integer indices"):
        k.evaluate(x, [[0.0, 1.0]])


def test_statistic_with_error_is_the_delta_method() -> None:
    # Renyi-2 entropy is -ln(U): slope 1 / U. Without a statistic map the
    # statistic is U itself and the error passes through unchanged.
    from fedustat.stats.kernels import duplicate_pair_kernel, renyi2_entropy_kernel

    rows = np.zeros((5, 1))
    value, se = renyi2_entropy_kernel().statistic_with_error(0.25, 0.01, rows)
    assert value == pytest.approx(math.log(4.0))
    assert se == pytest.approx(0.01 / 0.25, rel=1e-6)
    assert duplicate_pair_kernel().statistic_with_error(0.25, 0.01, rows) == (0.25, 0.01)
