"""The tree noise of the DP ECDF: one variable per dyadic node (003 Sec. 3.1, Thm 1).

The noise is kept apart from the counts so that a federated evaluation can add the *same*
draw to securely aggregated counts: :func:`draw_tree_noise` draws one variable per dyadic
node, :func:`apply_tree_noise` adds it to any count vector (or to the counts at a subset of
grid points).

Formulas re-derived from the OCR text (which garbles them):

* Sec. 3.1: ``I[L] = {(j, l) : l in [0, L], j in [2^(L-l)]}``; Eq. (2) reads
  ``F_hat(X, tau_i) = F(X, tau_i) + (1/n) sum_{l=0}^{L} eta_{ceil(i / 2^l), l}`` with
  ``eta ~ Lap((L + 1) / eps)``: the noise is in counts, hence the ``1/n``.
* Thm 1: the expected squared error per point is ``2 (L + 1)^3 / (eps^2 n^2)`` (the text
  drops the ``n^2``; with the ``1/n`` of Eq. 2 each of the ``L + 1`` terms has variance
  ``2 ((L + 1) / eps)^2 / n^2``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_float_array,
    check_epsilon,
)
from fedustat.privacy.noise import NoiseSource, resolve_noise
from fedustat.stats.ecdf import (
    DyadicTree,
)

__all__ = [
    "Distribution",
    "TreeNoise",
    "apply_tree_noise",
    "draw_tree_noise",
    "ecdf_noise_scale",
]


Distribution = Literal["laplace", "gaussian"]


# --------------------------------------------------------------------------- tree noise


@dataclass(frozen=True)
class TreeNoise:
    """One draw of the tree noise: a variable per dyadic node (003 Sec. 3.1).

    Kept apart from any count vector so that the same draw can be added to counts
    computed centrally or aggregated securely (:func:`apply_tree_noise`). The values are
    secret: publishing them together with the noisy curve reveals the exact counts.

    Attributes
    ----------
    tree:
        The dyadic intervals over the grid.
    values:
        Noise per node, in counts (flat, level by level, see
        :class:`~fedustat.stats.ecdf.DyadicTree`).
    distribution, scale:
        ``"laplace"`` with scale ``b`` or ``"gaussian"`` with standard deviation ``sigma``.
    kind:
        ``"simulation"`` or ``"deployment"`` (the :class:`NoiseSource` used).
    """

    tree: DyadicTree
    values: np.ndarray
    distribution: Distribution
    scale: float
    kind: str

    @property
    def node_variance(self) -> float:
        return 2.0 * self.scale**2 if self.distribution == "laplace" else self.scale**2

    @property
    def point_variance(self) -> float:
        """Variance of the noise on one point: ``(L + 1)`` node variances."""
        return self.tree.n_levels * self.node_variance

    def at(self, indices: Any = None) -> np.ndarray:
        """Noise of each grid point (or of the points ``indices``), in counts."""
        return self.tree.sum_at(self.values, indices)


def ecdf_noise_scale(n_points: int, epsilon: float) -> float:
    """Laplace scale per node for an eps-DP ECDF on N points: ``(L + 1) / eps`` (003 Thm 1)."""
    tree = DyadicTree(n_points)
    return tree.n_levels / check_epsilon(epsilon)


def draw_tree_noise(n_points: int, scale: float, *, distribution: Distribution = "laplace",
                    rng: RandomLike | NoiseSource = None,
                    noise: NoiseSource | None = None) -> TreeNoise:
    """Draw one noise variable per dyadic node over ``n_points`` grid points.

    Parameters
    ----------
    n_points:
        N, the number of thresholds.
    scale:
        Laplace scale ``b`` (``(L + 1) / eps`` for 003 Thm 1, see
        :func:`ecdf_noise_scale`) or Gaussian ``sigma``.
    distribution:
        ``"laplace"`` or ``"gaussian"``.
    rng, noise:
        A seed or Generator (simulation) or a :class:`NoiseSource` (``noise``,
        e.g. ``DeploymentNoise()``).
    """
    tree = DyadicTree(n_points)
    scale = check_epsilon(scale, "scale")
    source = resolve_noise(rng, noise)
    if distribution == "laplace":
        values = source.laplace(scale, tree.n_nodes)
    elif distribution == "gaussian":
        values = source.gaussian(scale, tree.n_nodes)
    else:
        raise ValueError(f"distribution must be 'laplace' or 'gaussian', got {distribution!r}")
    return TreeNoise(tree, np.asarray(values, dtype=np.float64), distribution, scale,
                     source.kind)


def apply_tree_noise(counts: Any, tree_noise: TreeNoise, indices: Any = None) -> np.ndarray:
    """``counts + noise``: add a tree-noise draw to counts at all points or at ``indices``.

    ``counts`` has one entry per grid point (``indices=None``) or per entry of
    ``indices``; the result is Eq. (2) of 003 in counts. A federated evaluation adds the
    same :class:`TreeNoise` to its securely aggregated counts.
    """
    if not isinstance(tree_noise, TreeNoise):
        raise TypeError(f"tree_noise must be a TreeNoise, got {type(tree_noise).__name__}")
    c = as_float_array(counts, "counts")
    expected = tree_noise.tree.n_points if indices is None else np.asarray(indices).size
    if c.size != expected:
        raise ValueError(f"counts has {c.size} entries but the noise is for {expected} points")
    return c + tree_noise.at(indices)




def check_tree_noise(tree_noise: Any, n_points: int, scale: float) -> None:
    """A caller's draw must be Laplace noise over this grid at the budget's scale
    ``(L + 1) / eps`` (003 Thm 1), or the release would not be the one promised."""
    if not isinstance(tree_noise, TreeNoise):
        raise TypeError(f"tree_noise must be a TreeNoise, got {type(tree_noise).__name__}")
    if tree_noise.tree.n_points != n_points or tree_noise.distribution != "laplace":
        raise ValueError(f"tree_noise must be Laplace noise for {n_points} points, got "
                         f"{tree_noise.distribution} noise for "
                         f"{tree_noise.tree.n_points} points")
    if not math.isclose(tree_noise.scale, scale, rel_tol=1e-12):
        raise ValueError(f"tree_noise has scale {tree_noise.scale:g} but epsilon requires "
                         f"(L+1)/epsilon = {scale:g}")


def noisy_counts(counts: np.ndarray, n_points: int, scale: float, source: NoiseSource,
                    tree_noise: TreeNoise | None) -> np.ndarray:
    if tree_noise is None:
        tree_noise = draw_tree_noise(n_points, scale, noise=source)
    else:
        check_tree_noise(tree_noise, n_points, scale)
    return apply_tree_noise(counts, tree_noise)
