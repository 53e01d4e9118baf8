"""The public entry points, shaped like the scikit-learn / SciPy functions users know.

``estimate`` is the general one: a kernel, the parties' records, a protocol and a budget.
``roc_auc_score``, ``kendalltau``, ``gini_mean_difference``, ``duplicate_pair_ratio`` and
``rand_score`` wrap it for the common statistics. All return an
:class:`~fedustat.protocols.base.Estimate`; ``epsilon=math.inf`` (with the default
protocol) gives the exact, non-private value. ``noise="deployment"`` draws every private
value from the operating system's CSPRNG through fixed-work samplers instead of a seeded
simulation; the release records which (``Estimate.noise``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from fedustat._validation import RandomLike, check_delta, check_epsilon
from fedustat.privacy.noise import DeploymentNoise, NoiseSource
from fedustat.protocols import registry
from fedustat.protocols.base import Estimate
from fedustat.runtime.simulate import simulate
from fedustat.stats import kernels
from fedustat.stats.kernels import Kernel

DEFAULT_PROTOCOL = "central-laplace"
#: Values of the ``noise`` argument: seeded NumPy draws for studies, or the OS CSPRNG and
#: fixed-work samplers of fedustat.privacy.samplers, for releases that protect people.
NOISE_CHOICES = ("simulation", "deployment")


def _noise_source(noise: Any, rng: RandomLike) -> NoiseSource | None:
    """The deployment source ``noise`` asks for, or None for a seeded simulation."""
    if isinstance(noise, NoiseSource):
        if noise.kind == "deployment" and rng is not None:
            raise ValueError("deployment noise cannot be seeded: pass rng=None with "
                             "noise='deployment' (a seed would make the release reproducible "
                             "by anyone who knows it)")
        return noise
    if noise is None or noise == "simulation":
        return None
    if noise == "deployment":
        if rng is not None:
            raise ValueError("deployment noise cannot be seeded: pass rng=None with "
                             "noise='deployment' (a seed would make the release reproducible "
                             "by anyone who knows it)")
        return DeploymentNoise()
    raise ValueError(f"noise must be 'simulation' or 'deployment' (or a NoiseSource), "
                     f"got {noise!r}")


def _release(kernel: Kernel, data: Any, *, epsilon: float, delta: float, protocol: str,
             rng: RandomLike, noise: Any, batch_size: int | None, caller: str,
             params: dict[str, Any]) -> Estimate:
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a fedustat Kernel, got {type(kernel).__name__}")
    if not isinstance(protocol, str):
        raise TypeError(f"protocol must be a protocol name (a string), got {protocol!r}")
    eps = check_epsilon(epsilon, allow_inf=True)
    dlt = check_delta(delta)
    accepted = registry.parameters(protocol)
    unknown = [key for key in params if key not in accepted]
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}: it is "
                        f"not an argument of {caller} nor a parameter of protocol "
                        f"{protocol!r} (its parameters: {', '.join(accepted) or 'none'})")
    source = _noise_source(noise, rng)
    records = kernel.check_data(data)
    if source is not None:
        if not registry.takes(protocol, "noise"):
            raise ValueError(f"protocol {protocol!r} takes no noise source, so it cannot run "
                             f"with {source.kind} noise")
        params = {**params, "noise": source}
    proto = registry.make(protocol, kernel, epsilon=eps, delta=dlt, **params)
    # With deployment noise the protocol draws every private value (noise, shares, masks,
    # keys) from ``source``; the simulator's own streams, seeded from OS entropy here,
    # only carry public coins (designs, client splits).
    release = simulate(proto, records, rng=rng, batch_size=batch_size)
    if source is not None and release.noise != "none":
        release = replace(release, noise=source.kind)
    return release


def estimate(kernel: Kernel, data: Any, *, epsilon: float, delta: float = 0.0,
             protocol: str = DEFAULT_PROTOCOL, rng: RandomLike = None,
             noise: str | NoiseSource | None = None,
             batch_size: int | None = None, **params: Any) -> Estimate:
    """Estimate the U-statistic of ``kernel`` over ``data`` with a private protocol.

    Parameters
    ----------
    kernel:
        A :class:`~fedustat.stats.kernels.Kernel` (e.g. ``fedustat.stats.auc_kernel()``).
    data:
        One row per party, columns as ``kernel.columns`` (build it with ``kernel.pack``).
    epsilon, delta:
        The privacy budget. ``epsilon=math.inf`` runs the protocol without noise where it
        allows it, or use ``protocol="exact"``.
    protocol:
        A registered protocol name; ``fedustat.protocols.registry.available()`` lists them.
    rng:
        Seed or Generator for the simulation; the same seed gives the same estimate.
    noise:
        ``"simulation"`` (the default, seeded NumPy draws: fast and reproducible, not fit
        to protect people) or ``"deployment"`` (the operating system's CSPRNG for shares,
        masks and keys, fixed-work samplers for the noise; refuses a seed).
        A :class:`~fedustat.privacy.noise.NoiseSource` is used as given. The release's
        ``noise`` attribute, and its printed form, say which one was used.
    batch_size:
        Parties per simulated batch (the result does not depend on it).
    **params:
        Protocol-specific parameters (see the protocol's page in docs/protocols/); a name
        the protocol does not take is refused with the list of those it does.
    """
    return _release(kernel, data, epsilon=epsilon, delta=delta, protocol=protocol, rng=rng,
                    noise=noise, batch_size=batch_size, caller="fedustat.estimate",
                    params=params)


def _protocol_for(epsilon: float, protocol: str | None) -> str:
    if protocol is not None:
        return protocol
    return "exact" if math.isinf(check_epsilon(epsilon, allow_inf=True)) else DEFAULT_PROTOCOL


def roc_auc_score(y_true: Any, y_score: Any, *, epsilon: float, delta: float = 0.0,
                  protocol: str | None = None, rng: RandomLike = None,
                  noise: str | NoiseSource | None = None,
                  **params: Any) -> Estimate:
    """Private area under the ROC curve; mirrors ``sklearn.metrics.roc_auc_score``.

    Ties in ``y_score`` count one half, as in scikit-learn. The class sizes are treated
    as public, as in the papers (000 Sec. 4; 004 Sec. 3).
    """
    kernel = kernels.auc_kernel()
    return _release(kernel, kernel.pack(y_score, y_true), epsilon=epsilon, delta=delta,
                    protocol=_protocol_for(epsilon, protocol), rng=rng, noise=noise,
                    batch_size=None, caller="fedustat.roc_auc_score", params=params)


def kendalltau(x: Any, y: Any, *, epsilon: float, delta: float = 0.0, variant: str = "a",
               protocol: str | None = None, rng: RandomLike = None,
               noise: str | NoiseSource | None = None, **params: Any) -> Estimate:
    """Private Kendall rank correlation; mirrors ``scipy.stats.kendalltau``.

    ``variant="a"`` (the U-statistic, 000 eq. 6) is the default because tau-b's
    tie correction uses tie counts of the private data; ``variant="b"`` is available
    exactly (``epsilon=math.inf``) and equals SciPy's default.
    """
    kernel = kernels.kendall_tau_kernel(variant)
    return _release(kernel, kernel.pack(x, y), epsilon=epsilon, delta=delta,
                    protocol=_protocol_for(epsilon, protocol), rng=rng, noise=noise,
                    batch_size=None, caller="fedustat.kendalltau", params=params)


def gini_mean_difference(x: Any, *, bounds: tuple[float, float], epsilon: float,
                         delta: float = 0.0, protocol: str | None = None,
                         rng: RandomLike = None,
                         noise: str | NoiseSource | None = None, **params: Any) -> Estimate:
    """Private Gini mean difference (000 eq. 4) of values within the public ``bounds``."""
    kernel = kernels.gini_kernel(bounds)
    return _release(kernel, kernel.pack(x), epsilon=epsilon, delta=delta,
                    protocol=_protocol_for(epsilon, protocol), rng=rng, noise=noise,
                    batch_size=None, caller="fedustat.gini_mean_difference", params=params)


def duplicate_pair_ratio(x: Any, *, epsilon: float, delta: float = 0.0,
                         protocol: str | None = None, rng: RandomLike = None,
                         noise: str | NoiseSource | None = None, **params: Any) -> Estimate:
    """Private fraction of pairs with equal values (000 eq. 5, inside the logarithm)."""
    kernel = kernels.duplicate_pair_kernel()
    return _release(kernel, kernel.pack(x), epsilon=epsilon, delta=delta,
                    protocol=_protocol_for(epsilon, protocol), rng=rng, noise=noise,
                    batch_size=None, caller="fedustat.duplicate_pair_ratio", params=params)


def rand_score(labels_true: Any, labels_pred: Any, *, epsilon: float, delta: float = 0.0,
               protocol: str | None = None, rng: RandomLike = None,
               noise: str | NoiseSource | None = None, **params: Any) -> Estimate:
    """Private Rand index; mirrors ``sklearn.metrics.rand_score``."""
    kernel = kernels.rand_index_kernel()
    return _release(kernel, kernel.pack(labels_true, labels_pred), epsilon=epsilon,
                    delta=delta,
                    protocol=_protocol_for(epsilon, protocol), rng=rng, noise=noise,
                    batch_size=None, caller="fedustat.rand_score", params=params)


__all__ = ["duplicate_pair_ratio", "estimate", "gini_mean_difference", "kendalltau",
           "rand_score", "roc_auc_score"]
