"""Label-DP AUC in vertical federated learning (paper 004).

protocol   ranks, client statistics and the releases: ``fedauc-rr`` and the Laplace and
           Gaussian variants with their budget allocations
variance   the analytic and corrected standard errors (004 App. I, N, O)
"""
