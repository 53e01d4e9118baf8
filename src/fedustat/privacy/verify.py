"""Exact verification of local differential privacy on small domains.

ARCHITECTURE.md principle 5: privacy is checked, not assumed. For a local randomizer
``R`` whose outputs form a finite set, ``(epsilon, delta)``-LDP (000 Sec. 2.2,
Definition 2; 002 App. A.4, Definition A.3) says that for all inputs ``x, x'``

    P[R(x) ∈ S] <= e^eps P[R(x') ∈ S] + delta   for every set S of outputs.

The worst set is ``{o : P(o|x) > e^eps P(o|x')}``, so the condition is exactly the
hockey-stick divergence ``sum_o max(0, P(o|x) - e^eps P(o|x')) <= delta``; for
``delta = 0`` it reduces to ``P(o|x) <= e^eps P(o|x')`` for every single output ``o``.
:func:`verify_ldp` enumerates the exact output distribution of every input and checks
these conditions for every ordered pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import check_delta, check_epsilon

__all__ = ["LDPVerification", "verify_ldp"]

# Probabilities are computed in floating point; a ratio bound e^eps can be met exactly
# by construction (e.g. k-RR), so allow rounding error but nothing a mechanism could use.
_RATIO_RTOL = 1e-9
_DIVERGENCE_ATOL = 1e-12


@dataclass(frozen=True)
class LDPVerification:
    """Outcome of :func:`verify_ldp`.

    Attributes
    ----------
    passed:
        Whether the claimed ``(epsilon, delta)``-LDP holds (up to float rounding).
    epsilon, delta:
        The claim that was checked.
    worst_ratio:
        ``max_{x, x', o} P(o|x) / P(o|x')`` (``inf`` if some output is possible for one
        input and impossible for another).
    observed_epsilon:
        ``log(worst_ratio)``: the smallest epsilon for which the randomizer is pure LDP.
    worst_ratio_pair, worst_ratio_output:
        The inputs ``(x, x')`` and the output index attaining ``worst_ratio``.
    worst_divergence:
        ``max_{x, x'} sum_o max(0, P(o|x) - e^eps P(o|x'))``: the smallest delta that
        makes the claimed epsilon hold.
    worst_divergence_pair:
        The inputs attaining ``worst_divergence``.
    n_inputs, n_outputs:
        Size of the enumerated input set and of the output space.
    """

    passed: bool
    epsilon: float
    delta: float
    worst_ratio: float
    observed_epsilon: float
    worst_ratio_pair: tuple[Any, Any]
    worst_ratio_output: int
    worst_divergence: float
    worst_divergence_pair: tuple[Any, Any]
    n_inputs: int
    n_outputs: int

    def __str__(self) -> str:
        verdict = "PASSED" if self.passed else "FAILED"
        return (f"LDP check {verdict} for (eps={self.epsilon:g}, delta={self.delta:g}) over "
                f"{self.n_inputs} inputs x {self.n_outputs} outputs: observed eps "
                f"{self.observed_epsilon:.6g} at inputs {self.worst_ratio_pair}, output "
                f"{self.worst_ratio_output}; worst divergence {self.worst_divergence:.3g} at "
                f"inputs {self.worst_divergence_pair}")


def _distribution_matrix(dist: Callable[[Any], Any], inputs: Sequence[Any]) -> np.ndarray:
    rows = []
    for x in inputs:  # one row per input of a small, enumerated domain
        row = np.asarray(dist(x), dtype=np.float64).ravel()
        if row.size == 0 or not np.all(np.isfinite(row)) or row.min() < 0:
            raise ValueError(f"output distribution for input {x!r} must be finite "
                             f"non-negative probabilities")
        total = float(row.sum())
        if abs(total - 1.0) > 1e-9:
            raise ValueError(f"output distribution for input {x!r} sums to {total!r}, not 1; "
                             "every possible output must be enumerated")
        rows.append(row)
    sizes = {row.size for row in rows}
    if len(sizes) > 1:
        raise ValueError(f"output distributions have different lengths {sorted(sizes)}; "
                         "enumerate the same outputs in the same order for every input")
    return np.vstack(rows)


def verify_ldp(randomizer: Any, inputs: Sequence[Any] | None = None,
               epsilon: float | None = None, delta: float = 0.0) -> LDPVerification:
    """Check ``(epsilon, delta)``-LDP exactly from the output distributions.

    Parameters
    ----------
    randomizer:
        An object with ``output_distribution(x)`` (e.g. a
        :class:`~fedustat.privacy.randomizers.LocalRandomizer`), or a callable mapping an
        input to the probability vector of all outputs (same order for every input).
    inputs:
        The inputs to compare (at least two). Defaults to ``randomizer.input_domain``.
    epsilon:
        The claimed budget. Defaults to ``randomizer.epsilon``.
    delta:
        The claimed delta in ``[0, 1)``; with ``delta = 0`` the per-output ratio is checked.

    Returns
    -------
    LDPVerification
        ``.passed`` and the worst ratio / divergence with the pair attaining it.
    """
    if hasattr(randomizer, "output_distribution"):
        dist = randomizer.output_distribution
        if inputs is None:
            inputs = list(randomizer.input_domain)
        if epsilon is None:
            epsilon = randomizer.epsilon
    elif callable(randomizer):
        dist = randomizer
        if inputs is None or epsilon is None:
            raise ValueError("inputs and epsilon are required when randomizer is a plain "
                             "callable")
    else:
        raise TypeError("randomizer must have an output_distribution method or be callable, "
                        f"got {type(randomizer).__name__}")
    eps = check_epsilon(epsilon, "epsilon")
    delta = check_delta(delta, "delta")
    # Plain Python values make the reported pairs readable (no np.int64(...) wrappers).
    inputs = inputs.tolist() if isinstance(inputs, np.ndarray) else list(inputs)
    if len(inputs) < 2:
        raise ValueError(f"inputs must hold at least two values to compare, got {len(inputs)}")

    probs = _distribution_matrix(dist, inputs)
    n_inputs, n_outputs = probs.shape

    # Pure DP: for each output, the worst pair is (most likely input, least likely input).
    hi = probs.argmax(axis=0)
    lo = probs.argmin(axis=0)
    cols = np.arange(n_outputs)
    top, bottom = probs[hi, cols], probs[lo, cols]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(top == 0.0, 1.0, top / bottom)
    worst_o = int(np.argmax(ratios))
    worst_ratio = float(ratios[worst_o])
    ratio_pair = (inputs[hi[worst_o]], inputs[lo[worst_o]])

    # Approximate DP: exact hockey-stick divergence for every ordered pair.
    factor = math.exp(eps)
    worst_div, div_pair = -1.0, (inputs[0], inputs[1])
    for a in range(n_inputs):
        div = np.maximum(probs[a][None, :] - factor * probs, 0.0).sum(axis=1)
        b = int(np.argmax(div))
        if div[b] > worst_div:
            worst_div, div_pair = float(div[b]), (inputs[a], inputs[b])

    if delta == 0.0:
        passed = worst_ratio <= factor * (1.0 + _RATIO_RTOL)
    else:
        passed = worst_div <= delta + _DIVERGENCE_ATOL
    return LDPVerification(
        passed=bool(passed), epsilon=eps, delta=delta, worst_ratio=worst_ratio,
        observed_epsilon=math.log(worst_ratio) if worst_ratio > 0 else -math.inf,
        worst_ratio_pair=ratio_pair, worst_ratio_output=worst_o,
        worst_divergence=worst_div, worst_divergence_pair=div_pair,
        n_inputs=n_inputs, n_outputs=n_outputs,
    )
