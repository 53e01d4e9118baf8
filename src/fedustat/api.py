"""The public entry points, shaped like the scikit-learn / SciPy functions users know.

``estimate`` is the general one: a kernel, the parties' records, a protocol and a budget.
``roc_auc_score``, ``kendalltau``, ``gini_mean_difference``, ``duplicate_pair_ratio`` and
``rand_score`` wrap it for the common statistics. All return an
:class:`~fedustat.protocols.base.Estimate`; ``epsilon=math.inf`` (with the default
protocol) gives the exact, non-private value.
"""

from __future__ import annotations

import math
from typing import Any

from fedustat._validation import RandomLike, check_delta, check_epsilon
from fedustat.protocols import registry
from fedustat.protocols.base import Estimate
from fedustat.runtime.simulate import simulate
from fedustat.stats import kernels
from fedustat.stats.kernels import Kernel

DEFAULT_PROTOCOL = "central-laplace"


def estimate(kernel: Kernel, data: Any, *, epsilon: float, delta: float = 0.0,
             protocol: str = DEFAULT_PROTOCOL, rng: RandomLike = None,
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
    batch_size:
        Parties per simulated batch (the result does not depend on it).
    **params:
        Protocol-specific parameters (see the protocol's page in docs/protocols/).
    """
    if not isinstance(kernel, Kernel):
        raise TypeError(f"kernel must be a fedustat Kernel, got {type(kernel).__name__}")
    eps = check_epsilon(epsilon, allow_inf=True)
    dlt = check_delta(delta)
    records = kernel.check_data(data)
    proto = registry.make(protocol, kernel, epsilon=eps, delta=dlt, **params)
    return simulate(proto, records, rng=rng, batch_size=batch_size)


def _protocol_for(epsilon: float, protocol: str | None) -> str:
    if protocol is not None:
        return protocol
    return "exact" if math.isinf(check_epsilon(epsilon, allow_inf=True)) else DEFAULT_PROTOCOL


def roc_auc_score(y_true: Any, y_score: Any, *, epsilon: float, delta: float = 0.0,
                  protocol: str | None = None, rng: RandomLike = None,
                  **params: Any) -> Estimate:
    """Private area under the ROC curve; mirrors ``sklearn.metrics.roc_auc_score``.

    Ties in ``y_score`` count one half, as in scikit-learn. The class sizes are treated
    as public, as in the papers (000 Sec. 4; 004 Sec. 3).
    """
    kernel = kernels.auc_kernel()
    return estimate(kernel, kernel.pack(y_score, y_true), epsilon=epsilon, delta=delta,
                    protocol=_protocol_for(epsilon, protocol), rng=rng, **params)


def kendalltau(x: Any, y: Any, *, epsilon: float, delta: float = 0.0, variant: str = "a",
               protocol: str | None = None, rng: RandomLike = None,
               **params: Any) -> Estimate:
    """Private Kendall rank correlation; mirrors ``scipy.stats.kendalltau``.

    ``variant="a"`` (the U-statistic, 000 eq. 6) is the default because tau-b's
    tie correction uses tie counts of the private data; ``variant="b"`` is available
    exactly (``epsilon=math.inf``) and equals SciPy's default.
    """
    kernel = kernels.kendall_tau_kernel(variant)
    return estimate(kernel, kernel.pack(x, y), epsilon=epsilon, delta=delta,
                    protocol=_protocol_for(epsilon, protocol), rng=rng, **params)


def gini_mean_difference(x: Any, *, bounds: tuple[float, float], epsilon: float,
                         delta: float = 0.0, protocol: str | None = None,
                         rng: RandomLike = None, **params: Any) -> Estimate:
    """Private Gini mean difference (000 eq. 4) of values within the public ``bounds``."""
    kernel = kernels.gini_kernel(bounds)
    return estimate(kernel, kernel.pack(x), epsilon=epsilon, delta=delta,
                    protocol=_protocol_for(epsilon, protocol), rng=rng, **params)


def duplicate_pair_ratio(x: Any, *, epsilon: float, delta: float = 0.0,
                         protocol: str | None = None, rng: RandomLike = None,
                         **params: Any) -> Estimate:
    """Private fraction of pairs with equal values (000 eq. 5, inside the logarithm)."""
    kernel = kernels.duplicate_pair_kernel()
    return estimate(kernel, kernel.pack(x), epsilon=epsilon, delta=delta,
                    protocol=_protocol_for(epsilon, protocol), rng=rng, **params)


def rand_score(labels_true: Any, labels_pred: Any, *, epsilon: float, delta: float = 0.0,
               protocol: str | None = None, rng: RandomLike = None,
               **params: Any) -> Estimate:
    """Private Rand index; mirrors ``sklearn.metrics.rand_score``."""
    kernel = kernels.rand_index_kernel()
    return estimate(kernel, kernel.pack(labels_true, labels_pred), epsilon=epsilon,
                    delta=delta, protocol=_protocol_for(epsilon, protocol), rng=rng, **params)


__all__ = ["duplicate_pair_ratio", "estimate", "gini_mean_difference", "kendalltau",
           "rand_score", "roc_auc_score"]
