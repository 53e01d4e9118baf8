"""Draw the user guide's plotting figure: docs/figures/plotting-helpers.png.

    .venv/bin/python benchmarks/docs_plotting_figure.py

The same calls as the user guide's "Plotting releases" example (seeded, so the picture
only changes when the library does): a released ROC curve, a released ECDF with its 95%
simultaneous band, and AUC releases at three budgets with their 95% intervals.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np

import fedustat

OUT = Path(__file__).resolve().parents[1] / "docs" / "figures" / "plotting-helpers.png"


def main() -> Path:
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 2000)
    scores = np.clip(rng.normal(0.4 + 0.2 * labels, 0.15), 0, 1)

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 4.2))
    curve = fedustat.roc_curve(labels, scores, epsilon=1.0, bounds=(0, 1), rng=1)
    fedustat.plot_roc(curve, ax=left)
    released = fedustat.ecdf(scores, epsilon=1.0, bounds=(0, 1), rng=1)
    fedustat.plot_ecdf(released, ax=middle)
    aucs = [fedustat.roc_auc_score(labels, scores, epsilon=e, rng=1)
            for e in (0.1, 0.5, 2.0)]
    aucs.append(fedustat.roc_auc_score(labels, scores, epsilon=1.0,
                                       protocol="ldp-quantized", bounds={"score": (0, 1)},
                                       rng=1))
    fedustat.plot_estimates(aucs, ax=right, limits=(0, 1))
    right.set_title("AUC releases, 95% intervals", fontsize=10)
    left.set_title("fedustat.plot_roc", fontsize=10)
    middle.set_title("fedustat.plot_ecdf", fontsize=10)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=90)
    plt.close(fig)
    return OUT


if __name__ == "__main__":
    print(main())
