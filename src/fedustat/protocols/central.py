"""Trusted-curator baseline: the Laplace mechanism on an exact (or incomplete) U-statistic.

Every party sends its record to a curator it trusts; the curator computes the
U-statistic over a tuple design E (all k-subsets by default) and releases

    U_hat = U_{f,E} + Lap(Delta U / epsilon),   Delta U = delta_G^max * Delta f / |E|

(002 App. C.2.3: one record appears in at most delta_G^max of the |E| tuples and each
kernel value moves by at most Delta f, the width of the kernel's output range; for the
complete design delta_G^max / |E| = C(n-1, k-1) / C(n, k) = k / n). This is the
central-DP accuracy every distributed protocol is compared against; it protects the
parties from whoever sees the release, not from the curator.

The reported statistic is the kernel's ``statistic`` of the noisy U (e.g. AUC rescales
U by C(n, 2) / (n+ n-)); that post-processing keeps the guarantee because the kernels
admitted here only use public quantities (n, and the class sizes for AUC, which the
papers treat as public) in it. The release is then clipped into the statistic's valid
range (``fedustat.protocols.base.in_statistic_range``; the raw value kept); a statistic
that is a monotone, non-affine map of U (Rényi-2's ``-ln U``) clips U before the map and
maps U's Laplace interval through it (``statistic_release``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import check_epsilon
from fedustat.privacy.errors import ErrorDistribution, LaplaceError, NormalError
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, trusted_curator
from fedustat.privacy.mechanisms import LaplaceMechanism
from fedustat.privacy.noise import NoiseSource, SimulationNoise
from fedustat.protocols.base import (
    Cost,
    DropoutRule,
    Estimate,
    Message,
    Protocol,
    Role,
    statistic_release,
)
from fedustat.protocols.registry import register
from fedustat.stats.designs import Design
from fedustat.stats.kernels import Kernel
from fedustat.stats.ustat import incomplete_ustatistic, ustatistic

FLOAT_BITS = 64


@dataclass
class _PartyState:
    records: np.ndarray
    parties: np.ndarray


@dataclass
class _ServerState:
    n_parties: int


class CentralLaplace(Protocol):
    """Central epsilon-DP Laplace release of a U-statistic by a trusted curator.

    Parameters
    ----------
    kernel:
        The U-statistic's kernel; its output range fixes Delta f.
    epsilon:
        Privacy budget (> 0), or ``math.inf`` for the exact, non-private value.
    design:
        Tuples to average over; ``None`` means all k-subsets (the complete U-statistic,
        computed with the kernel's fast exact path when it has one).
    noise:
        Where the curator's noise comes from: ``None`` draws from the server step's
        seeded generator (simulation); pass ``DeploymentNoise()`` to use vetted
        samplers when protecting real people.
    """

    released_fields = (*Protocol.released_fields, *Protocol.statistic_map_fields)

    def __init__(self, kernel: Kernel, epsilon: float, *, design: Design | None = None,
                 noise: NoiseSource | None = None) -> None:
        self.kernel = kernel
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.name = "exact" if math.isinf(self.epsilon) else "central-laplace"
        self.design = design
        self.noise = noise
        if not kernel.statistic_is_public and math.isfinite(self.epsilon):
            raise ValueError(
                f"kernel {kernel.name!r} maps U to its statistic with private data (e.g. "
                "tau-b's tie counts), so its release would not be covered by the "
                "guarantee; use kendall_tau_kernel('a') for a private Kendall's tau")
        if design is not None and design.tuples.shape[1] != kernel.degree:
            raise ValueError(f"design has tuples of size {design.tuples.shape[1]} but the "
                             f"kernel {kernel.name!r} has degree {kernel.degree}")

    @property
    def guarantee(self) -> PrivacyGuarantee:
        if math.isinf(self.epsilon):
            return PrivacyGuarantee.none()
        return PrivacyGuarantee(self.epsilon, 0.0, PrivacyModel.CENTRAL,
                                self.kernel.adjacency, assumptions=(trusted_curator(),))

    def u_sensitivity(self, data: np.ndarray) -> float:
        """Delta U = delta_G^max * Delta f / |E| (002 App. C.2.3).

        For the complete design delta_G^max / |E| = k / n, or the kernel's tighter
        ``active_share`` where public information fixes some kernel values (AUC).
        """
        public = self.kernel.public_view(data)
        n_parties = public.n
        if self.design is None:
            return self.kernel.active_share_of(public) * self.kernel.sensitivity
        if self.design.n_parties != n_parties:
            raise ValueError(f"design is for {self.design.n_parties} parties, data has "
                             f"{n_parties}")
        return self.design.max_degree * self.kernel.sensitivity / self.design.size

    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _PartyState:
        return _PartyState(np.asarray(data, dtype=np.float64), np.asarray(parties))

    def init_server(self, n_parties: int) -> _ServerState:
        return _ServerState(n_parties)

    def party_step(self, state: _PartyState, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_PartyState, Message]:
        # The curator is trusted: each party sends its record in the clear (64-bit floats).
        msg = Message(Role.PARTY, Role.SERVER, {"record": state.records},
                      {"record": FLOAT_BITS}, state.parties)
        return state, msg

    def server_step(self, state: _ServerState, inbox: Message,
                    rng: np.random.Generator) -> tuple[_ServerState, Estimate]:
        order = np.argsort(inbox.parties, kind="stable")
        data = np.asarray(inbox.fields["record"])[order]
        data = self.kernel.check_data(data)
        n = data.shape[0]
        if self.design is None:
            u = ustatistic(self.kernel, data)
            operations = n * max(1, math.ceil(math.log2(max(n, 2)))) \
                if self.kernel.exact is not None else math.comb(n, self.kernel.degree)
        else:
            u = incomplete_ustatistic(self.kernel, data, self.design.tuples)
            operations = self.design.size
        if math.isinf(self.epsilon):
            # The exact computation may read the records (tau-b's ties): not a release.
            return state, Estimate(
                value=float(self.kernel.statistic(u, data)), quantity=self.kernel.name,
                protocol=self.name, privacy=self.guarantee, std_error=0.0,
                error=NormalError(0.0), cost=Cost(server_operations=int(operations)))
        mechanism = LaplaceMechanism(self.u_sensitivity(data), self.epsilon,
                                     PrivacyModel.CENTRAL, self.kernel.adjacency)
        source = self.noise if self.noise is not None else SimulationNoise(rng)
        noisy_u = float(mechanism.release(u, source))
        diagnostics: dict[str, Any] = {"u_statistic_noise_scale": mechanism.scale,
                                       "u_sensitivity": mechanism.sensitivity,
                                       "noise_source": source.kind}
        # A release reads only n and the public columns. The noisy U is U + Lap(b)
        # exactly (Dwork et al. 2006), so its interval uses the Laplace quantile
        # b ln(1/(1 - level)), not 1.96 sd (which covers 93.7%). A statistic that is an
        # affine map of U (AUC, Gini, tau-a) carries the law scaled by the slope exactly;
        # Renyi-2's -ln U maps U's interval (statistic_release).
        public = self.kernel.public_view(data)
        u_law: ErrorDistribution = LaplaceError(mechanism.scale)
        release = statistic_release(self.kernel, noisy_u, u_law, public)
        return state, release.estimate(self.kernel, public, protocol=self.name,
                                       privacy=self.guarantee,
                                       cost=Cost(server_operations=int(operations)),
                                       diagnostics=diagnostics)


    def collection_rule(self) -> DropoutRule:
        # Each party uploads its record once; the curator's sensitivity uses the number of
        # records received (dropout_rule), unless a design fixed n beforehand.
        return self.dropout_rule(self.init_server(1), 0)

    def dropout_rule(self, state: _ServerState, round_index: int) -> DropoutRule:
        # The complete design's sensitivity k/n (002 App. C.2.3) is computed from the
        # records the curator holds (u_sensitivity), not from a public n fixed before the
        # round, so the release over the records that arrived is this mechanism applied
        # to them. A given design was drawn for n parties: its tuples name the silent
        # ones and its delta_max/|E| no longer holds.
        if self.design is not None:
            return DropoutRule(False, f"its tuple design was fixed for "
                                      f"{self.design.n_parties} parties before the round")
        return DropoutRule(True, "the sensitivity k/n uses the number of records received")


def _central_laplace(kernel: Kernel, *, epsilon: float, delta: float = 0.0,
                     design: Design | None = None,
                     noise: NoiseSource | None = None) -> CentralLaplace:
    # The Laplace mechanism is pure epsilon-DP (Dwork et al. 2006): registry.make refuses
    # a delta > 0 it would ignore, as for every pure protocol.
    return CentralLaplace(kernel, epsilon, design=design, noise=noise)


def _exact(kernel: Kernel, *, epsilon: float = math.inf, delta: float = 0.0,
           design: Design | None = None, noise: NoiseSource | None = None) -> CentralLaplace:
    return CentralLaplace(kernel, math.inf, design=design)


register("central-laplace", _central_laplace, model=PrivacyModel.CENTRAL,
         summary="trusted curator adds Laplace noise to the exact U-statistic",
         source="002 App. C.2.3 (sensitivity); Dwork et al. 2006 (Laplace mechanism)")
register("exact", _exact, model=PrivacyModel.NONE,
         summary="the exact statistic, no privacy (reference value)",
         source="000 eq. 2")
