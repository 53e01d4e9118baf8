"""Dropout-tolerant secure aggregation (SecAgg+): Shamir shares, masks, ecdf-secagg over it.

The networked case (100 one-record devices, 10 of them killed in a child process) is in
tests/test_secagg_plus_network.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedustat.protocols import registry
from fedustat.protocols.ecdf.secagg_plus import SecAggPlusECDF
from fedustat.runtime.network.service import fingerprint, public_configuration
from fedustat.runtime.simulate import simulate, simulate_run
from fedustat.secure import secagg_plus as sa
from fedustat.secure import shamir
from fedustat.secure.ring import Ring

# --------------------------------------------------------------------------- Shamir


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8), st.integers(0, 6), st.integers(0, 2**32 - 1))
def test_any_t_shares_reconstruct_the_secret(t, extra, seed):
    rng = np.random.default_rng(seed)
    secret = rng.integers(0, shamir.PRIME, size=5, dtype=np.uint64)
    holders = rng.choice(np.arange(1, 10_000), size=t + extra, replace=False)
    shares = shamir.share(secret, holders, t, rng)
    assert shares.shape == (t + extra, 5)
    subset = rng.choice(t + extra, size=t, replace=False)
    assert np.array_equal(shamir.reconstruct(shares[subset], holders[subset], t), secret)


def test_fewer_than_t_shares_are_refused_and_say_how_many_are_needed():
    rng = np.random.default_rng(1)
    shares = shamir.share(np.array([7, 9], np.uint64), np.arange(1, 6), 3, rng)
    with pytest.raises(ValueError, match="2 shares cannot reconstruct a secret shared with "
                                         "threshold 3: at least 3 are needed"):
        shamir.reconstruct(shares[:2], np.arange(1, 3), 3)


def test_t_minus_one_shares_are_uniform_whatever_the_secret():
    # Perfect secrecy over a field: with t - 1 = 1 holder, the share f(x) = s + a x is
    # uniform for uniform a. Over 4000 draws the share's top bit is a fair coin for two
    # secrets: both frequencies within 5 standard errors of 1/2.
    rng = np.random.default_rng(2)
    for secret in (0, shamir.PRIME - 1):
        shares = shamir.share(np.full((4000, 1), secret, np.uint64), np.array([5, 9]), 2, rng)
        top = (shares[:, 0, 0] >> np.uint64(30)).astype(float)
        assert abs(top.mean() - 0.5) < 5 * 0.5 / np.sqrt(4000)


def test_byte_strings_travel_as_16_bit_chunks():
    data = np.random.default_rng(3).integers(0, 256, (4, 32), dtype=np.uint8)
    chunks = shamir.bytes_to_chunks(data)
    assert chunks.shape == (4, 16) and int(chunks.max()) < 2**16
    assert np.array_equal(shamir.chunks_to_bytes(chunks), data)
    with pytest.raises(ValueError, match="holders must be distinct field points"):
        shamir.share(chunks[0], np.array([3, 3]), 1, 0)
    with pytest.raises(ValueError, match=r"holders must be field points in 1\.\."):
        shamir.share(chunks[0], np.array([0, 3]), 1, 0)


# ------------------------------------------------------------------------ the masks


def _masked(n: int, width: int, seed: int) -> tuple[sa.SecAggPlus, dict]:
    rng = np.random.default_rng(seed)
    ring = Ring(32)
    agg = sa.SecAggPlus(4, 3, ring, width)
    ids = np.arange(n)
    secrets, public = agg.advertise(n, rng)
    neighbours = agg.graph(ids, rng)
    seeds, key_shares, seed_shares = agg.share_secrets(neighbours, secrets, rng)
    inputs = rng.integers(0, 2**32, (n, width), dtype=np.uint64)
    held = np.ones(neighbours.shape, bool)
    masked = agg.mask(ids, inputs, secrets, seeds, neighbours, public[neighbours], held)
    return agg, {"ids": ids, "secrets": secrets, "public": public, "neighbours": neighbours,
                 "seeds": seeds, "key_shares": key_shares, "seed_shares": seed_shares,
                 "inputs": inputs, "masked": masked}


def test_pairwise_masks_cancel_exactly_and_the_self_masks_hide_each_input():
    agg, run = _masked(9, 6, seed=4)
    ring = agg.ring
    total = ring.sum(run["masked"], axis=0)
    self_masks = ring.sum(np.stack([sa.prg_mask(s.tobytes(), 6, ring) for s in run["seeds"]]),
                          axis=0)
    assert np.array_equal(ring.sub(total, self_masks), ring.sum(run["inputs"], axis=0))
    # Each masked input differs from its input.
    assert not np.any(np.all(run["masked"] == run["inputs"], axis=1))
    # The Harary graph: every party has k = 4 distinct neighbours, the relation symmetric.
    nb = run["neighbours"]
    assert all(len(set(row)) == 4 and u not in row for u, row in enumerate(nb))
    assert all(u in nb[v] for u, row in enumerate(nb) for v in row)


def test_the_server_unmasks_the_survivors_sum_from_t_shares():
    agg, run = _masked(9, 6, seed=5)
    ring, nb = agg.ring, run["neighbours"]
    dropped = {2}
    alive = [u for u in range(9) if u not in dropped]
    # Survivors' shares: of b_v for a survivor v, of the key for the dropped one.
    shares: dict[int, list] = {}
    for w in alive:
        for v in nb[w]:
            # Holder w has slot position of itself in v's row.
            slot = int(np.flatnonzero(nb[v] == w)[0])
            source = run["seed_shares"] if v not in dropped else run["key_shares"]
            shares.setdefault(int(v), []).append((w, source[v, slot]))
    total = ring.sum(run["masked"][alive], axis=0)
    masked_with = {u: nb[u] for u in alive}
    public = {u: run["public"][u] for u in range(9)}
    out = agg.unmask(total, np.array(alive), masked_with, public, shares)
    assert np.array_equal(out, ring.sum(run["inputs"][alive], axis=0))
    # With fewer than t shares of a secret the server refuses.
    shares[2] = shares[2][:2]
    with pytest.raises(ValueError, match="only 2 surviving neighbours sent shares of party "
                                         "2's masking key, fewer than the threshold t = 3"):
        agg.unmask(total, np.array(alive), masked_with, public, shares)


def test_a_disconnected_survivor_graph_is_detected():
    members = np.arange(6)
    ring_graph = np.array([[(u - 1) % 6, (u + 1) % 6] for u in range(6)])
    assert sa.connected(members, ring_graph, np.array([0, 1, 2]))
    assert not sa.connected(members, ring_graph, np.array([0, 1, 3, 4]))


# -------------------------------------------------------- ecdf-secagg with secagg+

N = 60


def values(n: int = N, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 1.0, n)


def make(**options) -> SecAggPlusECDF:
    params = {"bounds": (0.0, 1.0), "precision": 1 / 16, "epsilon": 1.0, "min_honest": 10,
              "threshold": 4, "max_dropout": 0.8, "aggregation": "secagg+", **options}
    return registry.make_curve("ecdf-secagg", **params)


def dropping(n: int, fraction: float, seed: int, rounds: int = 4) -> dict[int, list[int]]:
    """``fraction`` of the parties still in the run fall silent at each round."""
    rng = np.random.default_rng(seed)
    left = list(range(n))
    out = {}
    for r in range(rounds):
        gone = rng.choice(left, size=round(fraction * len(left)), replace=False)
        out[r] = sorted(int(v) for v in gone)
        left = [v for v in left if v not in set(out[r])]
    return out


def survivors_of(n: int, dropouts: dict[int, list[int]]) -> np.ndarray:
    """Who uploaded a masked input: silent in none of rounds 0..2."""
    gone = {v for r in (0, 1, 2) for v in dropouts.get(r, [])}
    return np.array([v for v in range(n) if v not in gone])


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("method", ["003-tree", "hierarchical"])
def test_the_release_is_the_survivors_exact_sum_plus_their_seeded_noise(fraction, method):
    x = values()
    drops = dropping(N, fraction, seed=7)
    options = {"method": method} if method == "hierarchical" else {"query": [2, 5, 11]}
    run = simulate_run(make(**options), x, rng=9, batch_size=1, dropouts=drops)
    alive = survivors_of(N, drops)
    ring = make(**options).fixed_point.ring
    contributions = np.stack([run.party_states[int(u)].contribution[0] for u in alive])
    assert np.array_equal(run.server_state.unmasked, ring.sum(contributions, axis=0))
    assert run.estimate.diagnostics["secagg_survivors"] == alive.size
    curve = run.estimate.diagnostics["curve"]
    assert curve.n == alive.size
    # Without noise the same dropouts release the survivors' exact ECDF.
    exact = simulate(make(epsilon=float("inf"), **options), x, rng=9, batch_size=1,
                     dropouts=drops).diagnostics["curve"]
    grid = exact.thresholds
    assert np.allclose(exact.values, (x[alive][:, None] <= grid[None, :]).mean(axis=0))


def test_the_same_seed_and_dropouts_give_the_same_release():
    drops = dropping(N, 0.2, seed=3)
    a = simulate(make(), values(), rng=5, batch_size=1, dropouts=drops)
    b = simulate(make(), values(), rng=5, batch_size=1, dropouts=drops)
    assert np.array_equal(a.diagnostics["curve"].values, b.diagnostics["curve"].values)
    assert a.noise == "simulation"
    deployed = simulate(make(), values(), batch_size=1, dropouts=drops)
    assert deployed.noise == "deployment"


def test_fewer_than_h_survivors_are_refused_with_the_reason():
    drops = {1: list(range(0, 45))}  # 15 survive, h = 20
    with pytest.raises(ValueError, match="only 15 masked inputs survived, fewer than "
                                         "min_honest h = 20"):
        simulate(make(min_honest=20), values(), rng=1, batch_size=1, dropouts=drops)


def test_too_few_shares_of_a_dropped_partys_key_are_refused():
    # k = 4, t = 4: a party dropped after sharing needs all 4 neighbours in the last round.
    drops = {2: [0], 3: [1, 2, 3, 4, 5, 55, 56, 57, 58, 59]}
    with pytest.raises(ValueError, match="fewer than the threshold t = 4: too many parties "
                                         "dropped; no release"):
        simulate(make(degree=4, threshold=4), values(), rng=1, batch_size=1, dropouts=drops)


def test_the_guarantee_states_k_t_the_dropout_fraction_and_h():
    estimate = simulate(make(degree=20, threshold=6, max_dropout=0.3), values(), rng=2,
                        batch_size=1, dropouts={2: [3, 4]})
    text = str(estimate.privacy)
    for part in ("degree k = 20", "threshold t = 6", "sized for 30% of parties dropping",
                 "release refused below h = 10 surviving masked inputs",
                 "at least 10 of the 58 noise contributors", "X25519", "ChaCha20"):
        assert part in text, part
    assert estimate.privacy.model.value == "computational"
    # The release carries the curve and public figures only (no keys, shares, masks).
    assert set(estimate.diagnostics) == {
        "aggregation", "secagg_survivors", "secagg_degree", "secagg_threshold", "ring_bits",
        "frac_bits", "secrecy", "curve", "noise_contributors", "noise_min_honest",
        "noise_tolerated_colluders", "method", "branching", "height", "noisy_nodes"}
    planned = make(degree=20, threshold=6, max_dropout=0.3).planned_guarantee(N)
    assert planned == estimate.privacy


def test_default_parameters_keep_the_failure_bound():
    k, t = sa.default_parameters(1000, 0.3)
    assert k < 999 and 2 * t > k
    assert sa.failure_probability(k, t, 0.3, 1000) <= 2.0**-20
    assert sa.tolerated_dropout(k, t, 1000) >= 0.3


def test_secagg_options_are_named_and_change_the_configuration():
    with pytest.raises(ValueError, match="aggregation must be 'servers'"):
        registry.make_curve("ecdf-secagg", epsilon=1.0, aggregation="secagg")
    with pytest.raises(ValueError, match="degree, threshold and max_dropout apply to "
                                         "aggregation='secagg\\+'"):
        registry.make_curve("ecdf-secagg", epsilon=1.0, degree=8)
    with pytest.raises(ValueError, match="threshold \\(9\\) cannot exceed degree \\(8\\)"):
        make(degree=8, threshold=9)
    base = make()
    assert fingerprint(base) != fingerprint(registry.make_curve(
        "ecdf-secagg", epsilon=1.0, bounds=(0.0, 1.0), precision=1 / 16))
    for change in ({"degree": 8}, {"threshold": 5}, {"max_dropout": 0.5}):
        assert public_configuration(make(**change)) != public_configuration(base), change


def test_simulator_dropouts_are_checked_and_follow_the_dropout_rule():
    with pytest.raises(ValueError, match=r"dropouts\[1\] names party 99, but the run has "
                                         r"parties 0\.\.59"):
        simulate(make(), values(), rng=1, dropouts={1: [99]})
    with pytest.raises(ValueError, match="dropouts names party 3 in two rounds"):
        simulate(make(), values(), rng=1, dropouts={1: [3], 2: [3]})
    plain = registry.make_curve("ecdf-secagg", epsilon=1.0, bounds=(0.0, 1.0),
                                precision=1 / 16)
    # The computing parties' aggregation lets a data party miss only the sharing round.
    with pytest.raises(ValueError, match="round 1: parties \\[7\\] fell silent; "
                                         "ecdf-pointwise-secagg cannot go on without them"):
        simulate(plain, values(), rng=1, dropouts={1: [7]})


def test_the_release_holds_dp_outputs_and_public_configuration_only():
    import release_cases as rc

    protocol = make(degree=20, threshold=6)
    drops = {1: [4, 9], 2: [11]}
    data = values()
    neighbour = data.copy()
    neighbour[0] = 1.0 - data[0]  # one record replaced
    first = simulate(protocol, data, rng=11, batch_size=1, dropouts=drops)
    second = simulate(protocol, neighbour, rng=11, batch_size=1, dropouts=drops)
    assert rc.leaked_fields(first, second, ()) != []  # the neighbour moves the release
    assert rc.leaked_fields(first, second, protocol.released_fields) == []
    other_seed = simulate(protocol, data, rng=12, batch_size=1, dropouts=drops)
    assert rc.leaked_fields(first, other_seed, protocol.released_fields
                            + protocol.public_coin_fields) == []


def test_the_stated_noise_variance_is_that_of_the_survivors_parts():
    # 8 parties, h = 2, 4 silent in the masked round: 4 survivors, each adding a Pólya
    # part of shape 1/2, so a node's noise is 4/2 = 2 independent discrete Laplace draws
    # (counting all 8 parties would double the variance, counting h would halve it).
    # F_hat - F at a point sums the L + 1 = 6 dyadic nodes of the 17-point grid (003
    # Eq. 2): 12 independent discrete Laplace terms of kurtosis 6.01 (t = e^(-1/6)), so
    # kurtosis 3 + 3.01/12 < 3.3. Over R = 300 seeds the sample variance's relative
    # standard error is sqrt((kurtosis - 1) / R) < sqrt(2.3 / 300); 5 of them < 0.44.
    x = values(8, seed=3)
    drops = {2: [1, 3, 5, 6]}
    alive = survivors_of(8, drops)
    options = {"query": [3], "min_honest": 2, "threshold": 2, "max_dropout": 0.3}
    exact = (x[alive] <= make(**options).thresholds[3]).mean()
    errors, stated = [], None
    for seed in range(300):
        curve = simulate(make(**options), x, rng=seed, batch_size=1,
                         dropouts=drops).diagnostics["curve"]
        errors.append(curve.values[0] - exact)
        stated = float(curve.point_variances[0])
    assert curve.n == 4 and curve.diagnostics["noise_contributors"] == 4
    assert curve.tree.n_levels == 6
    assert abs(np.var(errors) / stated - 1.0) < 5 * np.sqrt(2.3 / 300)
