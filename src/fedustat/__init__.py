"""fedustat: private and secure U-statistics over data held by many parties.

The entry points mirror scikit-learn and SciPy (``roc_auc_score``, ``kendalltau``);
``estimate`` takes any kernel and protocol. Every call returns an
:class:`~fedustat.protocols.base.Estimate` carrying its privacy guarantee, standard error
and measured communication cost. ``advise`` predicts every protocol's error and cost and
recommends one; ``fedustat.compare.run_comparison`` runs them side by side.
"""

from fedustat.advisor import advise
from fedustat.api import (
    KendallTauResult,
    duplicate_pair_ratio,
    estimate,
    gini_mean_difference,
    kendalltau,
    rand_score,
    roc_auc_score,
)
from fedustat.privacy.budget import BudgetAccountant, BudgetExceededError
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.protocols.base import Cost, Estimate
from fedustat.protocols.ecdf import (
    dp_ecdf,
    dp_hosmer_lemeshow,
    dp_prefix_sums,
    dp_quantile,
    dp_quantiles,
    dp_roc_curve,
)
from fedustat.protocols.ecdf.smoothing import isotonic_projection, smooth

__version__ = "0.1.0"

__all__ = [
    "BudgetAccountant",
    "BudgetExceededError",
    "Cost",
    "Estimate",
    "KendallTauResult",
    "PrivacyGuarantee",
    "PrivacyModel",
    "advise",
    "dp_ecdf",
    "dp_hosmer_lemeshow",
    "dp_prefix_sums",
    "dp_quantile",
    "dp_quantiles",
    "dp_roc_curve",
    "duplicate_pair_ratio",
    "estimate",
    "gini_mean_difference",
    "isotonic_projection",
    "kendalltau",
    "rand_score",
    "roc_auc_score",
    "smooth",
]
