"""Statistics layer: kernels, complete and incomplete U-statistics, designs, variances.

Exact, non-private computations that the private protocols are tested against
(ARCHITECTURE.md, principle 3).
"""

from fedustat.stats.designs import (
    Design,
    balanced_sample,
    bernoulli_sample,
    complete_design,
    permutation_pairs,
    uniform_sample,
)
from fedustat.stats.exact import (
    duplicate_pair_ratio,
    gini_mean_difference,
    kendall_tau,
    mann_whitney_u,
    rand_index,
    renyi2_entropy,
    roc_auc,
    volume_under_surface,
)
from fedustat.stats.kernels import (
    KERNEL_FACTORIES,
    Kernel,
    auc_kernel,
    duplicate_pair_kernel,
    gini_kernel,
    kendall_tau_kernel,
    kendall_tie_kernel,
    mann_whitney_kernel,
    rand_index_kernel,
    renyi2_entropy_kernel,
    user_kernel,
    variance_kernel,
    vus_kernel,
)
from fedustat.stats.tuples import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_TUPLES
from fedustat.stats.ustat import (
    hoeffding_components,
    incomplete_ustat_variance,
    incomplete_ustatistic,
    permutation_design_variance,
    ustat_variance,
    ustatistic,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MAX_TUPLES",
    "KERNEL_FACTORIES",
    "Design",
    "Kernel",
    "auc_kernel",
    "balanced_sample",
    "bernoulli_sample",
    "complete_design",
    "duplicate_pair_kernel",
    "duplicate_pair_ratio",
    "gini_kernel",
    "gini_mean_difference",
    "hoeffding_components",
    "incomplete_ustat_variance",
    "incomplete_ustatistic",
    "kendall_tau",
    "kendall_tau_kernel",
    "kendall_tie_kernel",
    "mann_whitney_kernel",
    "mann_whitney_u",
    "permutation_design_variance",
    "permutation_pairs",
    "rand_index",
    "rand_index_kernel",
    "renyi2_entropy",
    "renyi2_entropy_kernel",
    "roc_auc",
    "uniform_sample",
    "user_kernel",
    "ustat_variance",
    "ustatistic",
    "variance_kernel",
    "volume_under_surface",
    "vus_kernel",
]
