"""The experiment registry and report writer behind ``fedustat reproduce``.

An :class:`Experiment` is a name, the paper and figure or table it reproduces, the data it
runs on and a ``run(quick, seed)`` returning an :class:`ExperimentResult`. The modules
beside this one register the experiments of each paper with :func:`register_experiment`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedustat.report import MarkdownReport, markdown_table


# --------------------------------------------------------------------------- framework
@dataclass
class ExperimentResult:
    """What one experiment run produced.

    Attributes
    ----------
    name, title:
        The experiment's registry name and a one-line title.
    headers, rows:
        The result table: our numbers and, in columns named ``paper ...``, the paper's
        ("-" where the paper gives none).
    notes:
        Data substitutions, differences from the paper and their explanation.
    figures:
        ``(name, matplotlib Figure, caption)`` triples.
    quick, seed, seconds:
        How it was run and its wall time.
    """

    name: str
    title: str
    headers: list[str]
    rows: list[list[Any]]
    notes: list[str] = field(default_factory=list)
    figures: list[tuple[str, Any, str]] = field(default_factory=list)
    quick: bool = False
    seed: int = 0
    seconds: float = 0.0

    def table(self) -> str:
        """The result table as Markdown."""
        return markdown_table(self.headers, self.rows)


@dataclass(frozen=True)
class Experiment:
    """One reproducible experiment of a paper."""

    name: str
    paper: str
    target: str
    data: str
    summary: str
    runner: Callable[[bool, int], ExperimentResult]

    def run(self, quick: bool = False, seed: int = 0) -> ExperimentResult:
        """Run it (``quick``: reduced grid and repetitions); the same seed, the same rows."""
        if not isinstance(quick, bool):
            raise TypeError(f"quick must be a bool, got {type(quick).__name__}")
        if not isinstance(seed, int | np.integer) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        start = time.perf_counter()
        result = self.runner(quick, int(seed))
        result.quick, result.seed = quick, int(seed)
        result.seconds = time.perf_counter() - start
        return result


EXPERIMENTS: dict[str, Experiment] = {}


def register_experiment(name: str, paper: str, target: str, data: str, summary: str
              ) -> Callable[[Callable[[bool, int], ExperimentResult]],
                            Callable[[bool, int], ExperimentResult]]:
    def wrap(fn: Callable[[bool, int], ExperimentResult]) -> Callable[[bool, int],
                                                                       ExperimentResult]:
        EXPERIMENTS[name] = Experiment(name, paper, target, data, summary, fn)
        return fn
    return wrap


def available() -> list[Experiment]:
    """The registered experiments, by name: the papers' order (000 ... 004)."""
    return [EXPERIMENTS[name] for name in sorted(EXPERIMENTS)]


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``; a ValueError listing the names otherwise."""
    if not isinstance(name, str) or name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; available: "
                         f"{', '.join(sorted(EXPERIMENTS))} (see `fedustat reproduce --list`)")
    return EXPERIMENTS[name]


def run_experiment(name: str, *, quick: bool = False, seed: int = 0) -> ExperimentResult:
    """Run the experiment called ``name``."""
    return get_experiment(name).run(quick=quick, seed=seed)


def write_report(result: ExperimentResult, out_dir: str | Path) -> Path:
    """Write ``report.md`` and ``figures/*.png`` for ``result`` into ``out_dir``."""
    exp = get_experiment(result.name)
    report = MarkdownReport(f"{exp.paper} {exp.target}: {result.title}")
    report.paragraph(exp.summary)
    report.bullets([f"data: {exp.data}",
                    f"size: {'quick (reduced grid and repetitions)' if result.quick else 'full'}"
                    f", seed {result.seed}, wall time {result.seconds:.1f} s"])
    report.heading("Results")
    report.table(result.headers, result.rows)
    if result.notes:
        report.heading("Notes and differences from the paper")
        report.bullets(result.notes)
    for fig_name, fig, caption in result.figures:
        report.figure(fig, fig_name, caption)
    return report.write(out_dir)


def fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def new_figure(ncols: int = 1) -> tuple[Any, Any]:
    """A pyplot-free matplotlib Figure (no global backend is touched)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5 * ncols, 4.0))
    axes = fig.subplots(1, ncols)
    return fig, axes

