"""Local-DP protocols of paper 000/001 and the Ghazi et al. baselines of paper 002.

quantization   quantizers, grids and the quantized kernels A^Mid / A^Avg (001 App. A.2)
quantized_rr   ``ldp-quantized``: quantize, k-ary RR, the unbiased estimate (000 Alg. 1)
hierarchical   hierarchical histograms and the exact and pruned UAUC recursions (000 Sec. 4)
auc_tree       ``ldp-tree``: LDP AUC on hierarchical histograms (000 Sec. 4, Thm 3-4)
ghazi          ``ldp-ghazi``: the projection baseline as 002 describes it
ghazi_shuffle  ``ghazi-shuffle``: the same projections in the shuffle model (002's GhaziSM)
"""
