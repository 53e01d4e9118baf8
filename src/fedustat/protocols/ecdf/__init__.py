"""Differentially private ECDFs, quantiles, ROC curves and Hosmer-Lemeshow (paper 003).

The central release and its post-processing:

tree_noise       one noise variable per dyadic node, drawn apart from the counts (Sec. 3.1, Thm 1)
hierarchical     the default release: b-ary histogram tree, least squares, exact variances
release          the eps-DP ECDF on a grid (default: hierarchical; "003-tree": Eq. 2)
continual        private running sums of a stream (App. A.1, Thm 3)
smoothing        monotone, bounded curves by Eq. 3's LP/QP on the tree noise; isotonic projection
quantiles        inverse ECDF by binary search (Sec. 4.3, Alg. 1)
private_quantiles  quantiles from the data: permute-and-flip, JointExp, or the curve (auto)
roc              DP ROC curves from two ECDFs (Sec. 5.1) and their L1 distance (Sec. 6.5)
hosmer_lemeshow  the DP Hosmer-Lemeshow statistic (Sec. 5.2, Alg. 2, Thm 2)
plots            the ROC figure (matplotlib, optional)

The federated evaluation (Sec. 4), with the noise held in shares by the servers:

shared_noise     tree noise as server shares: distributed (002 Protocol B.1) or dealt
federated        the released curve both evaluations return
secagg           pointwise evaluation through secure aggregation (Sec. 4.1)
fss              evaluation by two servers holding DCF keys (Sec. 4.2)
registration     both by name in the curve registry (ecdf-secagg, ecdf-fss)
"""

from fedustat.protocols.ecdf import registration as _registration  # noqa: F401
from fedustat.protocols.ecdf.continual import PrivatePrefixSums, dp_prefix_sums
from fedustat.protocols.ecdf.federated import FederatedECDF, index_bits
from fedustat.protocols.ecdf.fss import FssECDF, FssECDFServers, fss_ecdf, fss_ecdf_setup
from fedustat.protocols.ecdf.hierarchical import HierarchicalPlan, default_plan
from fedustat.protocols.ecdf.hosmer_lemeshow import (
    DPHosmerLemeshow,
    dp_hosmer_lemeshow,
    hosmer_lemeshow,
)
from fedustat.protocols.ecdf.private_quantiles import PrivateQuantiles, dp_quantiles
from fedustat.protocols.ecdf.quantiles import Quantiles, dp_quantile, quantile_interval
from fedustat.protocols.ecdf.release import ECDF_METHODS, PrivateECDF, dp_ecdf
from fedustat.protocols.ecdf.roc import (
    DPROCCurve,
    dp_roc_curve,
    roc_curve_on_grid,
    roc_l1_distance,
)
from fedustat.protocols.ecdf.secagg import PointwiseECDF, pointwise_ecdf
from fedustat.protocols.ecdf.shared_noise import (
    SharedTreeNoise,
    distributed_tree_noise,
    share_tree_noise,
)
from fedustat.protocols.ecdf.smoothing import (
    SmoothedECDF,
    isotonic_projection,
    smooth,
    smooth_counts,
)
from fedustat.protocols.ecdf.tree_noise import (
    TreeNoise,
    apply_tree_noise,
    draw_tree_noise,
    ecdf_noise_scale,
)

__all__ = [
    "ECDF_METHODS",
    "DPHosmerLemeshow",
    "DPROCCurve",
    "FederatedECDF",
    "FssECDF",
    "FssECDFServers",
    "HierarchicalPlan",
    "PointwiseECDF",
    "PrivateECDF",
    "PrivatePrefixSums",
    "PrivateQuantiles",
    "Quantiles",
    "SharedTreeNoise",
    "SmoothedECDF",
    "TreeNoise",
    "apply_tree_noise",
    "default_plan",
    "distributed_tree_noise",
    "dp_ecdf",
    "dp_hosmer_lemeshow",
    "dp_prefix_sums",
    "dp_quantile",
    "dp_quantiles",
    "dp_roc_curve",
    "draw_tree_noise",
    "ecdf_noise_scale",
    "fss_ecdf",
    "fss_ecdf_setup",
    "hosmer_lemeshow",
    "index_bits",
    "isotonic_projection",
    "pointwise_ecdf",
    "quantile_interval",
    "roc_curve_on_grid",
    "roc_l1_distance",
    "share_tree_noise",
    "smooth",
    "smooth_counts",
]
