"""The Ghazi et al. (2024) baseline as 002 App. D.1.3 describes it: factorization, JL,
the l2-sphere and Laplace randomizers (density-ratio checks on a grid of outputs), the
estimator over pairs i != j, unbiasedness by Monte Carlo with tolerances from the exact
variance, and bad input.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fedustat
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.privacy.noise import SimulationNoise
from fedustat.protocols import registry
from fedustat.protocols.local import ghazi as gz
from fedustat.runtime.simulate import simulate
from fedustat.stats import auc_kernel, gini_kernel, kendall_tau_kernel
from fedustat.stats.ustat import ustatistic

# ------------------------------------------------------------------------------ factorization


def test_balanced_factorization_is_exact_and_balanced() -> None:
    proto = gz.GhaziProjection(gini_kernel((0, 1)), 1.0, k=12)
    a = proto.quantized_kernel_for(proto.grid_for(2)).matrices[0, 0]
    fac = gz.balanced_factorization(a)
    np.testing.assert_allclose(fac.left.T @ fac.right, a, atol=1e-12)
    assert fac.error < 1e-12 and fac.rank == 12
    np.testing.assert_allclose(np.linalg.norm(fac.left, axis=0),
                               np.linalg.norm(fac.right, axis=0), rtol=1e-12)
    # gamma_2(A) >= max |A_xx| and >= the bound's definition for any factorization.
    assert fac.gamma2_upper_bound >= np.abs(np.diag(a)).max() - 1e-12


def test_truncated_factorization_error_is_the_dropped_eigenvalue() -> None:
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    lam = np.array([5.0, -3.0, 2.0, 1.0, -0.5, 0.1])
    a = q @ np.diag(lam) @ q.T
    fac = gz.balanced_factorization(a, rank=3)
    residual = a - fac.left.T @ fac.right
    np.testing.assert_allclose(np.linalg.norm(residual, 2), 1.0, rtol=1e-10)


def test_jl_projection_is_unbiased_over_the_public_seed() -> None:
    rng = np.random.default_rng(2)
    a = rng.normal(size=(5, 5))
    a = a + a.T
    exact = gz.balanced_factorization(a)
    dim, seeds = 3, 2000
    draws = np.array([gz.balanced_factorization(a, dim=dim, projection_seed=s).left.T
                      @ gz.balanced_factorization(a, dim=dim, projection_seed=s).right
                      for s in range(seeds)])
    # u^T G^T G w with N(0, 1/d) entries: mean u.w, variance (|u|^2 |w|^2 + (u.w)^2) / d.
    u, w = exact.left, exact.right
    var = (np.outer((u**2).sum(0), (w**2).sum(0)) + (u.T @ w) ** 2) / dim
    assert np.all(np.abs(draws.mean(axis=0) - a) <= 5 * np.sqrt(var / seeds))


# ------------------------------------------------------------------------------ randomizers


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 3.0])
def test_sphere_randomizer_density_ratio_is_bounded(epsilon: float) -> None:
    proto = gz.GhaziProjection(gini_kernel((0, 1)), epsilon, k=8)
    setup = proto.setup_for(proto.grid_for(2))
    rand = setup.randomizer
    inputs = setup.vectors.T  # every possible input: one vector per cell
    rng = np.random.default_rng(3)
    z = rng.normal(size=(4000, rand.dim))
    # Add outputs on and next to the hemisphere boundaries of every input direction.
    z = np.vstack([z, inputs, -inputs, inputs + 1e-9 * z[: len(inputs)]])
    z = rand.scale * z / np.linalg.norm(z, axis=1, keepdims=True)
    dens = rand.density(z, inputs)
    ratio = dens.max(axis=0) / dens.min(axis=0)
    assert ratio.max() <= math.exp(epsilon) * (1 + 1e-12)
    # Densities are 2 pi or 2 (1 - pi) mixtures: the bounds of the proof are met.
    pi = math.exp(epsilon) / (1 + math.exp(epsilon))
    assert dens.min() >= 2 * (1 - pi) - 1e-12 and dens.max() <= 2 * pi + 1e-12


def test_sphere_randomizer_is_unbiased_with_isotropic_second_moment() -> None:
    rand = gz.L2SphereRandomizer(4, 2.0, 1.0)
    v = np.array([1.2, -0.4, 0.0, 0.9])
    draws = 100_000
    z = rand.randomize(np.tile(v, (draws, 1)), SimulationNoise(4))
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), rand.scale, rtol=1e-12)
    # Per coordinate Var <= E Z_j^2 = B^2 / D.
    se = math.sqrt(rand.second_moment / draws)
    assert np.all(np.abs(z.mean(axis=0) - v) <= 5 * se)
    second = z.T @ z / draws
    # Z_j^2 <= B^2, so each entry's standard error is at most B^2 / sqrt(draws).
    se2 = rand.scale**2 / math.sqrt(draws)
    assert np.all(np.abs(second - rand.second_moment * np.eye(4)) <= 5 * se2)


def test_zero_vector_and_norm_check() -> None:
    rand = gz.L2SphereRandomizer(3, 1.0, 1.0)
    z = rand.randomize(np.zeros((5, 3)), SimulationNoise(0))
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), rand.scale)
    with pytest.raises(ValueError, match="l2 norm <= 1"):
        rand.randomize(np.array([[2.0, 0.0, 0.0]]), SimulationNoise(0))


def test_laplace_randomizer_density_ratio_is_bounded() -> None:
    proto = gz.GhaziProjection(gini_kernel((0, 1)), 1.0, k=5, mechanism="laplace")
    setup = proto.setup_for(proto.grid_for(2))
    rand = setup.randomizer
    inputs = setup.vectors.T
    l1 = np.abs(inputs[:, None, :] - inputs[None, :, :]).sum(axis=2)
    assert rand.sensitivity == pytest.approx(l1.max())
    rng = np.random.default_rng(5)
    z = np.vstack([rng.laplace(0, 3 * rand.scale, (3000, rand.dim)), inputs])
    log_dens = np.log(rand.density(z, inputs))
    spread = log_dens.max(axis=0) - log_dens.min(axis=0)
    assert spread.max() <= 1.0 + 1e-9


# ------------------------------------------------------------------------------ estimator


def test_estimator_equals_the_sum_over_distinct_pairs() -> None:
    proto = gz.GhaziProjection(gini_kernel((0, 1)), 1.0, k=6)
    grid = proto.grid_for(2)
    rng = np.random.default_rng(6)
    o = rng.normal(size=(40, 12))
    est = proto.estimate_from_projections(o, grid)
    brute = sum(o[i, :6] @ o[j, 6:] for i in range(40) for j in range(40) if i != j)
    assert est.diagnostics["u_statistic"] == pytest.approx(brute / (40 * 39), rel=1e-12)


def _exact_variance(setup: gz._ProjectionSetup, cells: np.ndarray, sphere: bool) -> float:
    """Exact variance of U_hat given the cells: noise covariance c I - v v^T (sphere) or
    2 b^2 I (Laplace), the linear and pair terms of the module docstring, party by party."""
    v = setup.vectors[:, cells].T  # (n, D)
    n, dim = v.shape
    d = setup.half
    c = setup.randomizer.second_moment
    k_mat = np.zeros((dim, dim))
    k_mat[:d, d:] = np.eye(d)
    ks = 0.5 * (k_mat + k_mat.T)
    w = v.sum(axis=0)[None, :] - v
    kw = w @ ks
    lin = c * np.sum(kw**2)
    if sphere:
        lin -= np.sum(np.einsum("ij,ij->i", v, kw) ** 2)
    pair = c * c * np.trace(ks @ ks) * n * (n - 1) / 2
    if sphere:
        ks2 = ks @ ks
        pair -= c * (n - 1) * np.einsum("ij,jk,ik->", v, ks2, v)
        g = v @ ks @ v.T
        pair += 0.5 * (np.sum(g**2) - np.sum(np.diag(g) ** 2))
    return 4 * (lin + pair) / (n * (n - 1)) ** 2


@pytest.mark.parametrize("mechanism", ["l2-sphere", "laplace"])
def test_unbiased_by_monte_carlo(mechanism: str) -> None:
    rng = np.random.default_rng(7)
    n, runs = 1500, 300
    data = rng.beta(2.0, 3.0, n)[:, None]
    proto = gz.GhaziProjection(gini_kernel((0, 1)), 2.0, k=6, mechanism=mechanism)
    grid = proto.grid_for(n)
    setup = proto.setup_for(grid)
    cells = grid.encode(data)
    a = proto.quantized_kernel_for(grid).matrices[0, 0]
    counts = np.bincount(cells, minlength=6)
    target = (counts @ a @ counts - counts @ np.diag(a)) / (n * (n - 1))
    variance = _exact_variance(setup, cells, mechanism == "l2-sphere")
    estimates = [simulate(proto, data, rng=s) for s in np.random.SeedSequence(8).spawn(runs)]
    draws = np.array([e.diagnostics["u_statistic"] for e in estimates])
    assert abs(draws.mean() - target) <= 5 * math.sqrt(variance / runs)
    centred = draws - draws.mean()
    se_var = math.sqrt(max(np.mean(centred**4) - variance**2, 0.0) / runs)
    assert abs(np.var(draws, ddof=1) - variance) <= 5 * se_var
    # The released standard error leans upward: on average it is not below the truth.
    reported = np.array([e.std_error for e in estimates]) ** 2
    assert reported.mean() + 5 * reported.std(ddof=1) / math.sqrt(runs) >= variance


def test_kendall_ratings_and_costs() -> None:
    rng = np.random.default_rng(9)
    y = rng.integers(1, 7, 3000)
    z = np.clip(y + rng.integers(-1, 2, 3000), 1, 6)
    kt = kendall_tau_kernel("a")
    data = kt.pack(y, z)
    est = fedustat.estimate(kt, data, protocol="ldp-ghazi", epsilon=4.0, rng=1,
                            domain=[range(1, 7), range(1, 7)])
    d = est.diagnostics["dim"]
    assert est.diagnostics["k"] == 36 and est.diagnostics["factorization_error"] < 1e-12
    assert est.cost.bits_per_party == 2 * d * 64 and est.cost.rounds == 1
    assert est.cost.server_operations == 4 * 3000 * d + d
    assert abs(est.value - ustatistic(kt, data)) <= 5 * est.std_error


def test_default_k_counts_the_parties_and_jl_dimension() -> None:
    rng = np.random.default_rng(10)
    x = rng.random(4096)
    est = fedustat.estimate(gini_kernel((0, 1)), x, protocol="ldp-ghazi", epsilon=1.0, rng=2)
    assert est.diagnostics["k"] == 8 and est.cost.rounds == 3
    low = fedustat.estimate(gini_kernel((0, 1)), x, protocol="ldp-ghazi", epsilon=1.0, rng=2,
                            k=8, dim=3)
    assert low.diagnostics["dim"] == 3 and "JL" in low.diagnostics["factorization"]
    assert low.cost.bits_per_party == 6 * 64


def test_guarantee_registry_and_bad_inputs() -> None:
    proto = registry.make("ldp-ghazi", gini_kernel((0, 1)), epsilon=0.5, k=4)
    assert isinstance(proto, gz.GhaziProjection)
    assert (proto.guarantee.epsilon, proto.guarantee.model) == (0.5, PrivacyModel.LOCAL)
    with pytest.raises(ValueError, match="public columns"):
        gz.GhaziProjection(auc_kernel(), 1.0, k=4, bounds=(0, 1))
    with pytest.raises(ValueError, match="mechanism must be one of"):
        gz.GhaziProjection(gini_kernel((0, 1)), 1.0, k=4, mechanism="gauss")
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        gz.GhaziProjection(gini_kernel((0, 1)), 0.0, k=4)
    with pytest.raises(ValueError, match="rank must be >= 1"):
        gz.GhaziProjection(gini_kernel((0, 1)), 1.0, k=4, rank=0)
    with pytest.raises(ValueError, match="outside the declared bounds"):
        simulate(gz.GhaziProjection(gini_kernel((0, 1)), 1.0, k=4), np.array([0.5, 2.0]),
                 rng=0)
    with pytest.raises(ValueError, match="must be symmetric"):
        gz.balanced_factorization(np.array([[0.0, 1.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match=r"projections must have shape \(n, 8\)"):
        proto.estimate_from_projections(np.zeros((3, 5)), proto.grid_for(2))


@pytest.mark.parametrize("mechanism", ["l2-sphere", "laplace"])
def test_deployment_noise_path(mechanism: str) -> None:
    pytest.importorskip("opendp")
    from fedustat.privacy.noise import DeploymentNoise

    proto = gz.GhaziProjection(gini_kernel((0, 1)), 1.0, k=4, mechanism=mechanism,
                               noise=DeploymentNoise())
    est = simulate(proto, np.linspace(0.0, 1.0, 30))
    assert est.diagnostics["party_noise"] == "deployment"
    assert est.cost.bits_per_party == 2 * est.diagnostics["dim"] * 64
