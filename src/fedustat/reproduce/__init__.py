"""Reproduce the experiments of the papers: ``fedustat reproduce NAME``.

Every experiment is an :class:`Experiment` in :data:`EXPERIMENTS`: a name, the paper and
figure or table it reproduces, the data it runs on (the paper's own when it can be bundled
offline, otherwise a named substitute or the paper's synthetic generator, with the reason)
and a ``run(quick, seed)`` returning an :class:`ExperimentResult` — rows with our numbers
and, where the paper's text gives them, the paper's numbers beside them.

Our numbers are never tuned toward the papers'. Where they differ the experiment's notes
(and ``docs/reproduce.md``) say why: a substituted data set, a defect in the baseline code
the paper ran, or an ambiguity in the text.

``quick=True`` runs a reduced grid (fewer axes values and repetitions) in seconds; the
full size follows the paper's axes and repetitions where they are feasible here.

One module per paper registers its experiments; importing this package registers all of
them, in the papers' order.
"""

from __future__ import annotations

# Imported for their registrations; `available()` lists them by name.
from fedustat.reproduce import (  # noqa: F401
    ecdf_experiments,
    fedauc_experiments,
    ldp_experiments,
    umpc_experiments,
)
from fedustat.reproduce.framework import (
    EXPERIMENTS,
    Experiment,
    ExperimentResult,
    available,
    get_experiment,
    run_experiment,
    write_report,
)

__all__ = [
    "EXPERIMENTS",
    "Experiment",
    "ExperimentResult",
    "available",
    "get_experiment",
    "run_experiment",
    "write_report",
]
