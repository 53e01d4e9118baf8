"""Client partitions for the FedAUC protocols (004 Sec. 6.2.2): IID and by-score splits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedustat.datasets.partitions import (
    PARTITIONS,
    by_score_partition,
    check_client_assignment,
    client_sizes,
    iid_partition,
    partition_clients,
)

HYP = settings(deadline=None, max_examples=60, derandomize=True)


def assert_balanced(client: np.ndarray, n_clients: int) -> None:
    sizes = np.bincount(client, minlength=n_clients)
    assert sizes.size == n_clients
    m = client.size
    assert set(np.unique(sizes).tolist()) <= {m // n_clients, math.ceil(m / n_clients)}
    assert sizes.sum() == m


@HYP
@given(m=st.integers(1, 300), data=st.data())
def test_both_splits_are_balanced_and_cover_every_client(m, data):
    k = data.draw(st.integers(1, m))
    scores = np.arange(m, dtype=float)[::-1]
    for client in (iid_partition(m, k, rng=3), by_score_partition(scores, k)):
        assert client.dtype == np.int64 and client.shape == (m,)
        assert_balanced(client, k)


def test_one_sample_per_client_when_k_equals_m():
    m = 50
    client = iid_partition(m, m, rng=0)
    assert sorted(client.tolist()) == list(range(m))
    scores = np.random.default_rng(1).normal(size=m)
    by_score = by_score_partition(scores, m)
    # With one sample per client, the client id is the sample's rank.
    np.testing.assert_array_equal(by_score, np.argsort(np.argsort(scores)))


def test_iid_is_reproducible_and_seeded():
    a = iid_partition(1000, 7, rng=5)
    np.testing.assert_array_equal(a, iid_partition(1000, 7, rng=5))
    assert not np.array_equal(a, iid_partition(1000, 7, rng=6))
    np.testing.assert_array_equal(a, iid_partition(1000, 7, rng=np.random.default_rng(5)))


def test_iid_assigns_each_sample_uniformly():
    # Sample 0's client over R seeds is uniform on 0..K-1 (equal group sizes here):
    # mean (K-1)/2, variance (K^2-1)/12; allow 5 standard errors.
    k, r = 8, 4000
    draws = np.array([iid_partition(64, k, rng=seed)[0] for seed in range(r)])
    se = math.sqrt((k * k - 1) / 12 / r)
    assert abs(draws.mean() - (k - 1) / 2) <= 5 * se
    counts = np.bincount(draws, minlength=k)
    # Each count is Binomial(r, 1/k).
    assert np.all(np.abs(counts - r / k) <= 5 * math.sqrt(r / k * (1 - 1 / k)))


def test_by_score_groups_neighbouring_scores():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=1003)
    k = 10
    client = by_score_partition(scores, k)
    assert_balanced(client, k)
    highs = np.array([scores[client == c].max() for c in range(k)])
    lows = np.array([scores[client == c].min() for c in range(k)])
    assert np.all(highs[:-1] < lows[1:])


def test_by_score_breaks_ties_in_input_order():
    scores = np.zeros(6)
    np.testing.assert_array_equal(by_score_partition(scores, 3), [0, 0, 1, 1, 2, 2])


def test_partition_clients_dispatch():
    scores = np.linspace(0, 1, 20)
    np.testing.assert_array_equal(partition_clients(scores, 4, "by-score"),
                                  by_score_partition(scores, 4))
    np.testing.assert_array_equal(partition_clients(scores, 4, "iid", rng=9),
                                  iid_partition(20, 4, rng=9))
    assert PARTITIONS == ("iid", "by-score")
    with pytest.raises(ValueError, match="partition must be one of 'iid', 'by-score'"):
        partition_clients(scores, 4, "dirichlet")


@pytest.mark.parametrize("call, match", [
    (lambda: iid_partition(5, 6), r"n_clients \(6\) exceeds the number of samples \(5\)"),
    (lambda: iid_partition(5, 0), "n_clients must be >= 1"),
    (lambda: iid_partition(5, 2.5), "n_clients must be an integer"),
    (lambda: by_score_partition([0.1, np.nan], 1), "scores contains 1 NaN"),
    (lambda: by_score_partition([0.1, 0.2], 3), "exceeds the number of samples"),
])
def test_bad_partition_arguments(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_check_client_assignment():
    ids, k = check_client_assignment([0, 1, 1, 2])
    assert k == 3 and ids.dtype == np.int64
    np.testing.assert_array_equal(client_sizes([0, 1, 1, 2]), [1, 2, 1])
    with pytest.raises(ValueError, match=r"leaves 1 client\(s\) with no samples \(ids 1\)"):
        check_client_assignment([0, 2, 2])
    with pytest.raises(ValueError, match="leaves 2 client"):
        check_client_assignment([0, 1], n_clients=4)
    with pytest.raises(ValueError, match="must be >= 0"):
        check_client_assignment([0, -1])
    with pytest.raises(ValueError, match="whole numbers"):
        check_client_assignment([0, 0.5])
    with pytest.raises(ValueError, match="has 2 entries but there are 3 samples"):
        check_client_assignment([0, 1], n_samples=3)
    with pytest.raises(ValueError, match="has id 3 but n_clients is 2"):
        check_client_assignment([0, 1, 3], n_clients=2)
    with pytest.raises(TypeError, match="booleans"):
        check_client_assignment(np.array([True, False]))
