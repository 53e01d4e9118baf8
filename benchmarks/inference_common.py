"""What every section of ``bench_inference.py`` shares: the row it prints and the data it
generates (skewed, heavy-tailed and tied, drawn inside the benchmark, never read from disk).

A section is a module ``benchmarks/inference_<name>.py`` with one function
``rows(quick: bool, seed: int) -> list[Row]``: each row is one measured figure next to its
goal. Monte Carlo tolerances come from the number of runs (``binomial_tolerance``,
``mean_z``), never guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Row:
    """One measured figure beside its goal."""

    item: str  # the issue item it checks, e.g. "1 HL size"
    setting: str  # data, n, epsilon, ...
    measure: str  # what is measured, e.g. "size at alpha 0.05 (400 runs)"
    figure: str  # the measured value, formatted
    goal: str  # the goal, formatted, e.g. "<= 0.060"
    met: bool


def binomial_tolerance(p: float, runs: int, z: float = 3.0) -> float:
    """Half-width of a z-sigma band for a proportion p estimated from ``runs`` runs."""
    return z * math.sqrt(p * (1.0 - p) / runs)


def mean_z(values: np.ndarray, target: float) -> float:
    """z of the mean of ``values`` against ``target`` (its standard error from the spread)."""
    values = np.asarray(values, dtype=np.float64)
    se = values.std(ddof=1) / math.sqrt(values.size)
    return float((values.mean() - target) / se) if se > 0 else 0.0


# ------------------------------------------------------------------------------- data


def lognormal(n: int, rng: np.random.Generator) -> np.ndarray:
    """Skewed: lognormal(0, 1)."""
    return rng.lognormal(0.0, 1.0, n)


def pareto(n: int, rng: np.random.Generator, shape: float = 1.5) -> np.ndarray:
    """Heavy-tailed: Pareto with tail index ``shape`` (infinite variance below 2)."""
    return rng.pareto(shape, n) + 1.0


def tied(n: int, rng: np.random.Generator, levels: int = 12) -> np.ndarray:
    """Heavily tied: a skewed law rounded onto ``levels`` distinct values."""
    return np.minimum(np.floor(rng.exponential(2.0, n)), levels - 1).astype(np.float64)


def beta_mixture(n: int, rng: np.random.Generator) -> np.ndarray:
    """Bimodal on [0, 1]: 0.7 Beta(2, 8) + 0.3 Beta(8, 2)."""
    first = rng.random(n) < 0.7
    return np.where(first, rng.beta(2.0, 8.0, n), rng.beta(8.0, 2.0, n))


SAMPLES = {"lognormal": lognormal, "pareto": pareto, "tied": tied, "beta-mixture": beta_mixture}


def scored_labels(kind: str, n: int, rng: np.random.Generator,
                  positive_share: float = 0.3) -> tuple[np.ndarray, np.ndarray]:
    """Scores and 0/1 labels whose AUC is well inside (0.5, 1): positives' scores are the
    negatives' law shifted on a log scale, so the scores keep the law's skew, tail or ties."""
    labels = (rng.random(n) < positive_share).astype(np.int64)
    base = SAMPLES[kind](n, rng)
    if kind == "tied":
        scores = np.minimum(base + labels * rng.integers(0, 3, n), 11.0)
    elif kind == "beta-mixture":
        scores = np.clip(base + 0.15 * labels, 0.0, 1.0)
    else:
        scores = base * np.exp(0.8 * labels)
    return scores, labels
