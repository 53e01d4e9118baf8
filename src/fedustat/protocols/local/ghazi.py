"""Baseline of Ghazi et al. (2024) for degree-2 U-statistics under LDP, as 002 describes it.

Source: 002 (Sinh & Ramon) Sec. 1.1 and App. D.1.3 (with the cost model of App. D.2),
describing Ghazi, Kamath, Kumar, Manurangsi and Sealfon, "On computing pairwise statistics
with local differential privacy", NeurIPS 2023 (proceedings 2024). 002 compares its
protocol against this one; we implement it from 002's description, not from the original
paper, and state below every choice 002 leaves open.

What 002 states
---------------
* The input space is discretized into t bins and the kernel becomes a t x t matrix A
  (``A_ij = f(r_i, r_j)``, "as in Bell", 002 App. A.3 and D.1.3).
* A is factorized as ``A ~ L^T R`` with ``L, R in R^{d x t}``; the Johnson-Lindenstrauss
  (JL) theorem allows a small d.
* Each party sends ``o^L_i = R_eps(L e_{x_i})`` and ``o^R_i = R_eps(R e_{x_i})`` with an
  eps-LDP randomizer from Błasiok et al. (2019); the aggregator releases
  ``< (1/n) sum_i o^L_i , (1/n) sum_i o^R_i >``.
* Its error depends on ``gamma_2(A) = min_{A = L^T R} ||L||_{1->2} ||R||_{1->2}`` (the
  largest column norms), eq. 19: ``gamma_2^2 / (eps^2 n) + gamma_2^2 d / (eps^4 n^2)``.

What we infer (each choice is recorded in the estimate's diagnostics)
---------------------------------------------------------------------
1. **Quantized kernel.** The same grid and quantized kernel as ``ldp-quantized``
   (:mod:`fedustat.protocols.local.quantization`; default the midpoint kernel, ``"center"``
   gives 002's ``f(r_i, r_j)``), so the two baselines differ only in how they privatize.
2. **Factorization.** 002 does not say how L and R are found (gamma_2 is a semidefinite
   program). We use the balanced eigendecomposition of the symmetric A:
   ``A = V Lambda V^T``, ``L = |Lambda|^{1/2} V^T``, ``R = sign(Lambda) |Lambda|^{1/2} V^T``,
   so ``L^T R = A`` exactly with rank r (eigenvalues below ``t * eps_machine * max|lambda|``
   dropped), and ``||L||_{1->2} = ||R||_{1->2}``; the product of the two column norms is an
   upper bound on gamma_2(A), reported as ``gamma2_upper_bound``. ``rank=`` keeps only
   the largest |eigenvalues| (a biased approximation; the error is reported).
3. **JL.** With ``dim=d < r`` a public Gaussian matrix ``G`` (d x r, entries N(0, 1/d),
   drawn from ``projection_seed``) maps ``L -> G L`` and ``R -> G R``; ``E[G^T G] = I``, so
   the estimate stays unbiased over G. By default d = r (no projection): 002's
   d = O(eps^2 n log t) exceeds the rank t for the n of interest.
4. **Randomizer.** 002 names Błasiok et al. (2019) without giving the mechanism. We use
   the eps-LDP l2-ball randomizer of Duchi, Jordan & Wainwright (JASA 2018), which is
   unbiased with second moment ``E[Z Z^T] = (B^2/D) I`` (the per-direction variance
   O(1/eps^2) that eq. 19 relies on). The two projections are stacked into one vector
   ``v_x = [L e_x; R e_x]`` of dimension D = 2d and randomized once with budget eps (002's
   notation applies R twice; two eps-LDP releases would spend 2 eps). Alternatively
   ``mechanism="laplace"`` adds Laplace noise of scale ``Delta_1 / eps`` per coordinate with
   ``Delta_1 = max_{x,x'} ||v_x - v_x'||_1``.
5. **Pairs i != j only.** The inner product of the sums contains the n terms
   ``< o^L_i, o^R_i >`` of each party with itself, whose mean is not ``A_{x_i x_i}``
   (the two halves of one randomized vector are dependent). We subtract them exactly:
   ``U_hat = (< S_L, S_R > - sum_i < o^L_i, o^R_i >) / (n (n - 1))``, whose expectation is
   ``sum_{i != j} (L e_{x_i})^T (R e_{x_j}) / (n (n-1))``, the U-statistic of the quantized
   kernel (parties are independent). This costs O(n d) more work at the aggregator.

l2-ball randomizer (Duchi et al. 2018)
--------------------------------------
For ``||v|| <= r``: draw ``s = +1`` with probability ``1/2 + ||v||/(2r)`` (else -1) and set
``u = s v / ||v||`` (any fixed unit vector if v = 0); with probability
``pi = e^eps / (1 + e^eps)`` output a uniform point of the hemisphere ``{z : <z, u> > 0}``
of the sphere of radius B, otherwise of the opposite hemisphere. The output density with
respect to the uniform law on the sphere is ``2 pi`` or ``2 (1 - pi)`` for each s, so every
density ratio between two inputs lies in ``[(1-pi)/pi, pi/(1-pi)] = [e^-eps, e^eps]``:
eps-LDP, whatever the input. ``E[Z | u] = B m (2 pi - 1) u`` with ``m = E|w_1| =
Gamma(D/2) / (sqrt(pi) Gamma((D+1)/2))`` for w uniform on the unit sphere, and
``E[u] = v / r``, so ``B = r (e^eps + 1)/(e^eps - 1) / m`` makes ``E[Z] = v``. By the symmetry
w -> -w, ``E[Z Z^T] = (B^2 / D) I`` for every input.

Standard error
--------------
With ``K_s`` the symmetric form of ``<o^L, o^R>`` (``tr K_s^2 = d/2``), noise covariance at
most ``c I`` (``c = B^2/D``, or ``2 b^2`` for Laplace), ``v_bar`` the mean projected vector:

    Var(U_hat) <= 4 [c (n^2 (n-2) ||K_s v_bar||^2 + n max_x ||K_s v_x||^2)
                      + C(n,2) c^2 d / 2] / (n (n-1))^2,

from the same decomposition as the generic protocol (linear plus pair terms). The
aggregator plugs in ``||K_s o_bar||^2 - c d / (2n)`` (clipped at 0, plus the public
``max_x ||K_s v_x||^2 / n``) for ``||K_s v_bar||^2``: an upper-leaning estimate computed
from the reports only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import check_epsilon, check_positive_int
from fedustat.privacy.errors import NormalError
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.privacy.noise import NoiseSource
from fedustat.protocols.base import Cost, Estimate, statistic_release
from fedustat.protocols.local.quantization import (
    DEFAULT_AVG_TOL,
    DEFAULT_MAX_EVALUATIONS,
    ProductGrid,
)
from fedustat.protocols.local.quantized_rr import QuantizedLocalProtocol
from fedustat.protocols.registry import register
from fedustat.stats.kernels import Kernel

special = lazy_module("scipy.special")
distance = lazy_module("scipy.spatial.distance")

__all__ = [
    "Factorization",
    "GhaziProjection",
    "L2SphereRandomizer",
    "LaplaceVectorRandomizer",
    "balanced_factorization",
    "factorization_diagnostics",
]

FLOAT_BITS = 64
MECHANISMS = ("l2-sphere", "laplace")


# --------------------------------------------------------------------------------------
# Factorization A ~ L^T R
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Factorization:
    """``A ~ L^T R`` with L, R of shape (d, t).

    ``error`` is ``max |A - sym(L^T R)|`` with ``sym(B) = (B + B^T)/2`` (the estimator
    only sees the symmetric part); ``rank`` the number of eigenpairs kept.
    """

    left: np.ndarray
    right: np.ndarray
    rank: int
    error: float

    @property
    def gamma2_upper_bound(self) -> float:
        """``||L||_{1->2} ||R||_{1->2}``: an upper bound on gamma_2 of the factorized matrix."""
        return float(np.linalg.norm(self.left, axis=0).max()
                     * np.linalg.norm(self.right, axis=0).max())


def balanced_factorization(matrix: Any, *, rank: int | None = None, dim: int | None = None,
                           projection_seed: int = 0) -> Factorization:
    """Factorize a symmetric matrix as ``L^T R`` by its eigendecomposition (inferred choice).

    ``A = V Lambda V^T``; ``L = |Lambda|^{1/2} V^T`` and ``R = sign(Lambda) |Lambda|^{1/2} V^T``
    over the kept eigenpairs (all numerically non-zero ones, or the ``rank`` largest in
    absolute value). With ``dim`` smaller than the rank, both are multiplied by a public
    Gaussian JL matrix G (dim x rank, N(0, 1/dim) entries from ``projection_seed``), for
    which ``E[G^T G] = I``.
    """
    a = np.asarray(matrix, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"matrix must be square, got shape {a.shape}")
    if not np.allclose(a, a.T, rtol=0, atol=1e-12 * max(1.0, float(np.abs(a).max()))):
        raise ValueError("matrix must be symmetric (a quantized symmetric kernel)")
    lam, vec = np.linalg.eigh(0.5 * (a + a.T))
    order = np.argsort(-np.abs(lam))
    lam, vec = lam[order], vec[:, order]
    tol = a.shape[0] * np.finfo(float).eps * max(float(np.abs(lam).max()), 1e-300)
    keep = int(np.count_nonzero(np.abs(lam) > tol))
    if rank is not None:
        keep = min(keep, check_positive_int(rank, "rank"))
    keep = max(keep, 1)
    lam, vec = lam[:keep], vec[:, :keep]
    root = np.sqrt(np.abs(lam))
    left = root[:, None] * vec.T
    right = (np.sign(lam) * root)[:, None] * vec.T
    if dim is not None and check_positive_int(dim, "dim") < keep:
        g = np.random.default_rng(projection_seed).normal(0.0, 1.0 / math.sqrt(dim),
                                                          (dim, keep))
        left, right = g @ left, g @ right
    product = left.T @ right
    error = float(np.abs(a - 0.5 * (product + product.T)).max())
    return Factorization(left, right, keep, error)


# --------------------------------------------------------------------------------------
# Local randomizers for vectors
# --------------------------------------------------------------------------------------



def factorization_diagnostics(grid: Any, k_rule: str, quantized_kernel: str,
                              factorization: Factorization, dim: int,
                              requested_dim: int | None, projection_seed: int | None
                              ) -> dict[str, Any]:
    """The diagnostics of the quantization grid and the factorization of A they used
    (shared by Ghazi's protocol and its shuffle-model variant)."""
    projected = requested_dim is not None and requested_dim < factorization.rank
    return {
        "k": grid.size, "bins": grid.bins, "k_rule": k_rule,
        "quantizer": grid.quantizer, "quantized_kernel": quantized_kernel,
        "factorization": "balanced eigendecomposition" + (
            f" + JL to d = {requested_dim} (seed {projection_seed})" if projected else ""),
        "rank": factorization.rank, "dim": dim, "factorization_error": factorization.error,
        "gamma2_upper_bound": factorization.gamma2_upper_bound,
    }

class L2SphereRandomizer:
    """eps-LDP unbiased randomizer for vectors in the l2 ball of radius ``radius``.

    Duchi, Jordan & Wainwright (JASA 2018), the l2 mechanism; see the module docstring
    for the privacy and unbiasedness proofs. Outputs lie on the sphere of radius
    :attr:`scale` in R^dim.
    """

    def __init__(self, dim: int, radius: float, epsilon: float) -> None:
        self.dim = check_positive_int(dim, "dim")
        self.radius = check_epsilon(radius, "radius")
        self.epsilon = check_epsilon(epsilon)
        self.keep = float(special.expit(self.epsilon))  # e^eps / (1 + e^eps)
        # m = E|w_1| for w uniform on the unit sphere of R^dim.
        log_m = special.gammaln(self.dim / 2) - special.gammaln((self.dim + 1) / 2)
        mean_abs = math.exp(log_m) / math.sqrt(math.pi)
        self.scale = self.radius / math.tanh(self.epsilon / 2.0) / mean_abs

    @property
    def second_moment(self) -> float:
        """``E[Z Z^T] = (B^2 / dim) I`` for every input: this per-coordinate value."""
        return self.scale**2 / self.dim

    def _directions(self, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        norms = np.linalg.norm(v, axis=1)
        if np.any(norms > self.radius * (1 + 1e-9)):
            raise ValueError(f"inputs must have l2 norm <= {self.radius:g}")
        unit = np.zeros_like(v)
        unit[:, 0] = 1.0
        nz = norms > 0
        unit[nz] = v[nz] / norms[nz, None]
        p_plus = 0.5 + np.minimum(norms, self.radius) / (2.0 * self.radius)
        return unit, p_plus

    def randomize(self, v: Any, noise: NoiseSource) -> np.ndarray:
        """Randomize each row of ``v`` (shape (n, dim)) independently."""
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        unit, p_plus = self._directions(v)
        n = v.shape[0]
        sign = np.where(noise.uniform(n) < p_plus, 1.0, -1.0)
        toward = noise.bernoulli(self.keep, n)
        w = noise.gaussian(1.0, (n, self.dim))
        w /= np.linalg.norm(w, axis=1, keepdims=True)
        side = np.sign(np.einsum("ij,ij->i", w, unit))
        side[side == 0] = 1.0
        wanted = np.where(toward, sign, -sign)
        return self.scale * w * (side * wanted)[:, None]

    def density(self, z: Any, v: Any) -> np.ndarray:
        """Density of output ``z`` (on the sphere) given input ``v``, w.r.t. the uniform law.

        ``z``: (m, dim) outputs, ``v``: (n, dim) inputs; returns (n, m). Used to check the
        e^eps ratio on a grid of outputs.
        """
        z = np.atleast_2d(np.asarray(z, dtype=np.float64))
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        unit, p_plus = self._directions(v)
        dots = unit @ z.T
        pi = self.keep
        plus = np.where(dots > 0, 2 * pi, 2 * (1 - pi))
        minus = np.where(dots < 0, 2 * pi, 2 * (1 - pi))
        return p_plus[:, None] * plus + (1 - p_plus[:, None]) * minus


class LaplaceVectorRandomizer:
    """``v + Lap(Delta_1 / eps)^dim``: eps-LDP for inputs at L1 distance <= ``sensitivity``."""

    def __init__(self, dim: int, sensitivity: float, epsilon: float) -> None:
        self.dim = check_positive_int(dim, "dim")
        self.sensitivity = check_epsilon(sensitivity, "sensitivity")
        self.epsilon = check_epsilon(epsilon)
        self.scale = self.sensitivity / self.epsilon

    @property
    def second_moment(self) -> float:
        """Per-coordinate noise variance ``2 b^2``."""
        return 2.0 * self.scale**2

    def randomize(self, v: Any, noise: NoiseSource) -> np.ndarray:
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        return v + noise.laplace(self.scale, v.shape)

    def density(self, z: Any, v: Any) -> np.ndarray:
        """Density of output ``z`` given input ``v``: (n inputs, m outputs)."""
        z = np.atleast_2d(np.asarray(z, dtype=np.float64))
        v = np.atleast_2d(np.asarray(v, dtype=np.float64))
        dist = np.abs(v[:, None, :] - z[None, :, :]).sum(axis=2)
        return np.exp(-dist / self.scale) / (2 * self.scale) ** self.dim


# --------------------------------------------------------------------------------------
# The protocol
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ProjectionSetup:
    grid: ProductGrid
    vectors: np.ndarray  # (D, t): column x is [L e_x; R e_x]
    half: int  # d, the length of each projection
    randomizer: L2SphereRandomizer | LaplaceVectorRandomizer
    factorization: Factorization


class GhaziProjection(QuantizedLocalProtocol):
    """Ghazi et al. (2024) as in 002 App. D.1.3: randomized projections, inner product.

    Parameters
    ----------
    kernel, epsilon, k, bounds, domain, quantizer, quantized_kernel, n_parties, lipschitz,
    noise, max_evaluations, avg_tol:
        As for :class:`~fedustat.protocols.local.quantized_rr.QuantizedRandomizedResponse` (the
        same public grid and quantized kernel). Kernels with public columns (AUC) are
        not supported: use ``ldp-quantized``.
    rank:
        Keep this many eigenpairs of A (default: all numerically non-zero).
    dim:
        JL dimension d of each projection when smaller than the rank (default: none).
    projection_seed:
        Public seed of the JL matrix.
    mechanism:
        ``"l2-sphere"`` (default, Duchi et al. 2018) or ``"laplace"``.
    """

    name = "ldp-ghazi"

    def __init__(self, kernel: Kernel, epsilon: float, *, k: Any = None, bounds: Any = None,
                 domain: Any = None, quantizer: str = "round",
                 quantized_kernel: str | None = None, n_parties: int | None = None,
                 lipschitz: float | None = None, noise: NoiseSource | None = None,
                 rank: int | None = None, dim: int | None = None, projection_seed: int = 0,
                 mechanism: str = "l2-sphere",
                 max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
                 avg_tol: float = DEFAULT_AVG_TOL) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
        self.mechanism = mechanism
        self.rank = None if rank is None else check_positive_int(rank, "rank")
        self.dim = None if dim is None else check_positive_int(dim, "dim")
        if isinstance(projection_seed, bool) or not isinstance(projection_seed, int):
            raise TypeError(f"projection_seed must be an integer, got {projection_seed!r}")
        self.projection_seed = projection_seed
        self._fixed_setup: _ProjectionSetup | None = None
        super().__init__(kernel, epsilon, k=k, bounds=bounds, domain=domain,
                         public_columns=None, quantizer=quantizer,
                         quantized_kernel=quantized_kernel, n_parties=n_parties,
                         lipschitz=lipschitz, noise=noise, max_evaluations=max_evaluations,
                         avg_tol=avg_tol)
        if self.plan.public:
            raise ValueError(
                f"kernel {kernel.name!r} has public columns {[c.name for c in self.plan.public]}; "
                "the projection baseline (002 App. D.1.3) is implemented for kernels on one "
                "grid only; use protocol='ldp-quantized' (or the hierarchical-histogram AUC "
                "protocol)")

    def setup_for(self, grid: ProductGrid) -> _ProjectionSetup:
        """Factorization, stacked vectors and randomizer on ``grid`` (all public)."""
        if self._fixed_setup is not None and self._fixed_bins == grid.continuous_bins:
            return self._fixed_setup
        qk = self.quantized_kernel_for(grid)
        fac = balanced_factorization(qk.matrices[0, 0], rank=self.rank, dim=self.dim,
                                     projection_seed=self.projection_seed)
        vectors = np.vstack([fac.left, fac.right])
        half = fac.left.shape[0]
        if self.mechanism == "l2-sphere":
            radius = float(np.linalg.norm(vectors, axis=0).max())
            randomizer: Any = L2SphereRandomizer(2 * half, max(radius, 1e-300), self.epsilon)
        else:
            # Delta_1 = max_{x, x'} ||v_x - v_x'||_1 over all pairs of cells.
            sens = float(distance.cdist(vectors.T, vectors.T, "cityblock").max())
            randomizer = LaplaceVectorRandomizer(2 * half, max(sens, 1e-300), self.epsilon)
        setup = _ProjectionSetup(grid, vectors, half, randomizer, fac)
        if self._fixed_bins == grid.continuous_bins:
            self._fixed_setup = setup
        return setup

    def _party_setup(self, grid: ProductGrid) -> _ProjectionSetup:
        return self.setup_for(grid)

    def _party_fields(self, setup: _ProjectionSetup, records: np.ndarray,
                      source: NoiseSource) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        cells = setup.grid.encode(records, source)
        out = setup.randomizer.randomize(setup.vectors[:, cells].T, source)
        return {"projection": out}, {"projection": FLOAT_BITS}

    def _estimate(self, fields: dict[str, np.ndarray], grid: ProductGrid,
                  k_rule: str) -> Estimate:
        return self.estimate_from_projections(fields["projection"], grid, k_rule=k_rule)

    def estimate_from_projections(self, projections: Any, grid: ProductGrid, *,
                                  k_rule: str | None = None) -> Estimate:
        """The aggregator: inner product of the summed halves minus each party's own term."""
        setup = self.setup_for(grid)
        o = np.asarray(projections, dtype=np.float64)
        d = setup.half
        if o.ndim != 2 or o.shape[1] != 2 * d:
            raise ValueError(f"projections must have shape (n, {2 * d}), got {o.shape}")
        n = o.shape[0]
        if n < 2:
            raise ValueError("at least two parties must report")
        left, right = o[:, :d], o[:, d:]
        s_left, s_right = left.sum(axis=0), right.sum(axis=0)
        own = float(np.einsum("ij,ij->", left, right))
        u = (float(s_left @ s_right) - own) / (n * (n - 1))

        # Standard error (module docstring): noise covariance <= c I per coordinate.
        c = setup.randomizer.second_moment
        mean = o.mean(axis=0)
        ks_mean2 = 0.25 * float(mean @ mean)  # ||K_s o_bar||^2 = (|o_L|^2 + |o_R|^2) / 4
        ks_max2 = 0.25 * float((setup.vectors**2).sum(axis=0).max())
        ks_vbar2 = max(ks_mean2 - c * d / (2.0 * n), 0.0) + ks_max2 / n
        var_half = (c * (n * n * (n - 2) * ks_vbar2 + n * ks_max2)
                    + n * (n - 1) / 2.0 * c * c * d / 2.0)
        u_se = math.sqrt(4.0 * var_half) / (n * (n - 1))

        public = grid.public_data(np.array([n]))
        # U_hat - U is a sum over the n parties of independent zero-mean terms (each
        # party's noise against the others' true vectors) plus a degenerate pair term
        # (module docstring): normal by the CLT for U-statistics (Hoeffding 1948), with
        # no single party's term dominating (each is O(1/n) of the sum). Renyi-2's -ln U
        # clips U into [1/C(n,2), 1] first and maps U's interval (statistic_release).
        release = statistic_release(self.kernel, u, NormalError(u_se), public)
        fac = setup.factorization
        diagnostics: dict[str, Any] = {
            **factorization_diagnostics(grid, k_rule or self.k_rule, self.quantized_kernel,
                                        fac, d, self.dim, self.projection_seed),
            "mechanism": self.mechanism,
            "noise_second_moment": c, "u_statistic": u, "u_std_error": u_se,
            "std_error_method": "upper-leaning plug-in of the variance decomposition "
                                "(ldp_ghazi module docstring)",
            "party_noise": self.noise.kind if self.noise is not None else "simulation",
        }
        if self.mechanism == "l2-sphere":
            diagnostics["sphere_radius"] = setup.randomizer.scale
            diagnostics["norm_bound"] = setup.randomizer.radius
        else:
            diagnostics["laplace_scale"] = setup.randomizer.scale
            diagnostics["l1_sensitivity"] = setup.randomizer.sensitivity
        operations = 2 * n * 2 * d + d
        # In range on every transport: the clip is part of the server's release step.
        return release.estimate(self.kernel, public, protocol=self.name,
                                privacy=self.guarantee,
                                cost=Cost(server_operations=int(operations)),
                                diagnostics=diagnostics)


def _ldp_ghazi(kernel: Kernel, *, epsilon: float, delta: float = 0.0, k: Any = None,
               bounds: Any = None, domain: Any = None, quantizer: str = "round",
               quantized_kernel: str | None = None, n_parties: int | None = None,
               lipschitz: float | None = None, noise: NoiseSource | None = None,
               rank: int | None = None, dim: int | None = None, projection_seed: int = 0,
               mechanism: str = "l2-sphere", max_evaluations: int = DEFAULT_MAX_EVALUATIONS,
               avg_tol: float = DEFAULT_AVG_TOL) -> GhaziProjection:
    # Both randomizers are pure epsilon-LDP; an allowed delta is not used.
    return GhaziProjection(kernel, epsilon, k=k, bounds=bounds, domain=domain,
                           quantizer=quantizer, quantized_kernel=quantized_kernel,
                           n_parties=n_parties, lipschitz=lipschitz, noise=noise, rank=rank,
                           dim=dim, projection_seed=projection_seed, mechanism=mechanism,
                           max_evaluations=max_evaluations, avg_tol=avg_tol)


register("ldp-ghazi", _ldp_ghazi, model=PrivacyModel.LOCAL,
         summary="baseline: factorize the quantized kernel A = L^T R, parties send randomized "
                 "projections, inner product of the sums (pairs i != j)",
         source="002 Sec. 1.1, App. D.1.3 (Ghazi et al. 2024)")
