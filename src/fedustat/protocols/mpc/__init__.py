"""Protocols on secret shares: paper 000 Sec. 5 (two parties) and paper 002 (U-MPC).

kernel_circuits  the built-in kernels as secure circuits (comparisons, products) on shares
umpc             ``umpc``: degree-k U-statistics over a sampled edge set, distributed noise (002)
pairs_2pc        ``pairs-2pc``: the kernel on subsampled pairs by two-party computation (000 Sec. 5)
"""
