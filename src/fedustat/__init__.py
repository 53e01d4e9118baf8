"""fedustat: private and secure U-statistics over data held by many parties.

The entry points mirror scikit-learn, SciPy and NumPy (``roc_auc_score``, ``kendalltau``,
``ecdf``, ``quantile``, ``median``, ``roc_curve``, ``hosmer_lemeshow``, ``cumsum``);
``estimate`` takes any kernel and protocol. A U-statistic call returns an
:class:`~fedustat.protocols.base.Estimate` carrying its privacy guarantee, standard error
and measured communication cost; a curve call (:mod:`fedustat.curves`) a result with the
same guarantee, per-point standard errors and bands. ``advise`` predicts every protocol's
error and cost and recommends one; ``fedustat.compare.run_comparison`` runs them side by
side.
"""

import warnings
from typing import Any

from fedustat.advisor import advise
from fedustat.api import (
    KendallTauResult,
    duplicate_pair_ratio,
    estimate,
    gini_mean_difference,
    kendall_tau_pvalue,
    kendalltau,
    rand_score,
    roc_auc_score,
)
from fedustat.curves import cumsum, ecdf, hosmer_lemeshow, median, quantile, roc_curve
from fedustat.plotting import plot_ecdf, plot_estimates, plot_roc
from fedustat.privacy.budget import BudgetAccountant, BudgetExceededError
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.protocols.base import Cost, Estimate
from fedustat.protocols.ecdf.smoothing import isotonic_projection, smooth
from fedustat.results_pandas import install as _install_pandas_accessor

__version__ = "0.1.0"

# ``series.dp`` for a pandas column of releases, registered once pandas is imported
# (pandas stays optional and is never imported here).
_install_pandas_accessor()

__all__ = [
    "BudgetAccountant",
    "BudgetExceededError",
    "Cost",
    "Estimate",
    "KendallTauResult",
    "PrivacyGuarantee",
    "PrivacyModel",
    "advise",
    "cumsum",
    "duplicate_pair_ratio",
    "ecdf",
    "estimate",
    "gini_mean_difference",
    "hosmer_lemeshow",
    "isotonic_projection",
    "kendall_tau_pvalue",
    "kendalltau",
    "median",
    "plot_ecdf",
    "plot_estimates",
    "plot_roc",
    "quantile",
    "rand_score",
    "roc_auc_score",
    "roc_curve",
    "smooth",
]

#: The protocol-layer curve functions that left the top level, and what replaces them.
_MOVED = {
    "dp_ecdf": "fedustat.ecdf",
    "dp_quantiles": "fedustat.quantile",
    "dp_quantile": "fedustat.quantile (from the data) or fedustat.protocols.ecdf.dp_quantile "
                   "(inverting a released curve)",
    "dp_roc_curve": "fedustat.roc_curve",
    "dp_hosmer_lemeshow": "fedustat.hosmer_lemeshow",
    "dp_prefix_sums": "fedustat.cumsum",
}


def __getattr__(name: str) -> Any:
    """The old top-level names, with a DeprecationWarning naming the replacement."""
    if name in _MOVED:
        import fedustat.protocols.ecdf as protocol_layer

        warnings.warn(f"fedustat.{name} is deprecated; use {_MOVED[name]} "
                      f"(the protocol layer keeps fedustat.protocols.ecdf.{name})",
                      DeprecationWarning, stacklevel=2)
        return getattr(protocol_layer, name)
    raise AttributeError(f"module 'fedustat' has no attribute {name!r}")
