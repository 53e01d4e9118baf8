"""Private running sums of a stream under continual observation (003 App. A.1, Thm 3).

The Gaussian variant is ``eta ~ N(0, ceil((L + 1) / 2) sigma^2)`` per node and is
``1 / (2 sigma^2)``-zCDP: the shift that explains a changed element has at most
``k = ceil((L + 1) / 2)`` entries ``±Delta`` (Lemma 1), so its squared L2 norm is at most
``k Delta^2``, and ``N(0, s^2)`` noise on a shift of squared norm ``k Delta^2`` is
``k Delta^2 / (2 s^2)``-zCDP (Bun & Steinke 2016, Prop. 1.6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_float_array,
    check_bounds,
    check_delta,
    check_epsilon,
)
from fedustat.privacy.errors import ErrorDistribution, LaplaceError, NormalError, error_sum
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel, trusted_curator
from fedustat.privacy.noise import NoiseSource, resolve_noise
from fedustat.protocols.ecdf.tree_noise import Distribution, apply_tree_noise, draw_tree_noise
from fedustat.stats.ecdf import (
    DyadicTree,
)

__all__ = [
    "PrivatePrefixSums",
    "dp_prefix_sums",
]


# ------------------------------------------------------------ continual observation


@dataclass(frozen=True)
class PrivatePrefixSums:
    """Private running sums of a stream, 003 Thm 3 (continual observation).

    Attributes
    ----------
    values:
        ``s_hat_t = sum_{i <= t} x_i + sum_l eta_{(l, t >> l)}`` for every t.
    tree, distribution, scale:
        Noise structure; ``scale`` is the Laplace ``b`` or the Gaussian ``sigma`` per node.
    rho:
        The zCDP parameter for Gaussian noise, else None.
    privacy:
        The (eps, delta) guarantee (for Gaussian noise converted from rho-zCDP).
    """

    #: Fields that depend on the data: the noisy running sums.
    released_fields: ClassVar[tuple[str, ...]] = ("values",)

    values: np.ndarray
    tree: DyadicTree
    distribution: Distribution
    scale: float
    rho: float | None
    privacy: PrivacyGuarantee
    #: Where the noise came from (``"simulation"`` or ``"deployment"``).
    noise_kind: str = "simulation"

    @property
    def variance(self) -> float:
        """Noise variance of each released sum: ``L + 1`` node variances."""
        node = 2.0 * self.scale**2 if self.distribution == "laplace" else self.scale**2
        return self.tree.n_levels * node

    @property
    def error(self) -> ErrorDistribution:
        """Law of each released sum minus the exact one: ``L + 1`` independent node
        noises (003 Thm 3), an exact Laplace sum or a normal law."""
        if self.distribution == "gaussian":
            return NormalError(math.sqrt(self.tree.n_levels) * self.scale)
        return error_sum([LaplaceError(self.scale)] * self.tree.n_levels)


def dp_prefix_sums(stream: Any, *, epsilon: float | None = None, rho: float | None = None,
                   delta: float | None = None, bounds: tuple[float, float] = (0.0, 1.0),
                   rng: RandomLike = None, noise: NoiseSource | None = None
                   ) -> PrivatePrefixSums:
    """All prefix sums of a stream with tree noise: 003 Thm 3 (continual observation).

    Two streams are adjacent if one element differs (values within ``bounds``, width
    ``Delta``). The change moves every later prefix sum by at most ``Delta``: a suffix,
    which a signed sum of at most ``k = ceil((L + 1) / 2)`` dyadic nodes explains (003
    Lemma 1; :meth:`~fedustat.stats.ecdf.DyadicTree.suffix_cover`) — half the ``L + 1``
    of an interval, hence the constant-factor gain over the binary mechanism.

    * Laplace (``epsilon``): ``eta ~ Lap(k Delta / eps)`` per node, pure eps-DP.
    * Gaussian (``rho``): ``eta ~ N(0, k Delta^2 / (2 rho))`` per node, ``rho``-zCDP
      (003 writes ``N(0, ceil((L+1)/2) sigma^2)`` and ``1/(2 sigma^2)``-zCDP with
      ``Delta = 1``). The returned guarantee converts it to ``(rho + 2 sqrt(rho
      ln(1/delta)), delta)``-DP (Bun & Steinke 2016, Prop. 1.3), so ``delta`` is required.

    Parameters
    ----------
    stream:
        The stream ``x_1 .. x_N`` (finite numbers inside ``bounds``).
    epsilon, rho:
        Exactly one: the Laplace budget or the zCDP parameter (both > 0).
    delta:
        With ``rho``: the delta of the (eps, delta) statement of the guarantee.
    bounds:
        Public range of one element (default [0, 1], e.g. a 0/1 event stream).
    rng, noise:
        Seed / Generator, or a :class:`NoiseSource`.

    Returns
    -------
    PrivatePrefixSums
        The noisy prefix sums (``values``) with their guarantee.

    Examples
    --------
    >>> stream = [1, 0, 1, 1, 0, 1, 1, 1]
    >>> np.cumsum(stream)
    array([1, 1, 2, 3, 3, 4, 5, 6])
    >>> sums = fedustat.protocols.ecdf.dp_prefix_sums(stream, epsilon=20.0, rng=0)
    >>> np.round(sums.values, 1), sums.scale
    (array([1.2, 1.1, 2.1, 3.1, 3. , 4.1, 4.3, 5.3]), 0.1)
    """
    x = as_float_array(stream, "stream")
    lo, hi = float(bounds[0]), float(bounds[1])
    check_bounds(x, (lo, hi), "stream")
    width = hi - lo
    if (epsilon is None) == (rho is None):
        raise ValueError("give exactly one of epsilon (Laplace, eps-DP) or rho (Gaussian, "
                         "zCDP)")
    tree = DyadicTree(x.size)
    k = -(-tree.n_levels // 2)  # ceil((L + 1) / 2)
    source = resolve_noise(rng, noise)
    adjacency = f"replace one stream element (values in [{lo:g}, {hi:g}])"
    if epsilon is not None:
        if delta is not None:
            raise ValueError("delta applies to the Gaussian (rho) variant only")
        eps = check_epsilon(epsilon)
        draw = draw_tree_noise(x.size, k * width / eps, noise=source)
        guarantee = PrivacyGuarantee(eps, 0.0, PrivacyModel.CENTRAL, adjacency,
                                     assumptions=(trusted_curator(),))
        rho_value = None
    else:
        rho_value = check_epsilon(rho, "rho")
        if delta is None:
            raise ValueError("delta is required with rho, to state the zCDP guarantee as "
                             "(epsilon, delta)-DP")
        delta = check_delta(delta)
        if delta == 0.0:
            raise ValueError("delta must be > 0 to convert zCDP to (epsilon, delta)-DP")
        sigma = math.sqrt(k / (2.0 * rho_value)) * width
        draw = draw_tree_noise(x.size, sigma, distribution="gaussian", noise=source)
        eps_conv = rho_value + 2.0 * math.sqrt(rho_value * math.log(1.0 / delta))
        guarantee = PrivacyGuarantee(eps_conv, delta, PrivacyModel.CENTRAL,
                                     f"{adjacency}; {rho_value:g}-zCDP",
                                     assumptions=(trusted_curator(),))
    values = apply_tree_noise(np.cumsum(x), draw)
    return PrivatePrefixSums(values, tree, draw.distribution, draw.scale, rho_value, guarantee,
                             source.kind)
