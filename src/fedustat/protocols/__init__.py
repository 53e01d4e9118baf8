"""Protocols: pure, vectorized steps over a batch of parties (see ``base``).

The contract (``base``) and the registry sit at the top of the package; each protocol
family of the papers is a subpackage: ``local`` (000/001 and the Ghazi baselines of 002),
``mpc`` (000 Sec. 5 and 002's U-MPC), ``fedauc`` (004) and ``ecdf`` (003). ``central`` is
the trusted-curator baseline every family is compared with.

Importing this package registers every protocol with :mod:`fedustat.protocols.registry`
(the federated ECDF releases in its curve registry).
"""

from fedustat.protocols import central
from fedustat.protocols.base import ConfidenceInterval, Cost, Estimate, Message, Protocol, Role
from fedustat.protocols.central import CentralLaplace
from fedustat.protocols.ecdf import registration as _ecdf_registration  # noqa: F401
from fedustat.protocols.fedauc import protocol as fedauc
from fedustat.protocols.local import auc_tree, ghazi, ghazi_shuffle, quantized_rr
from fedustat.protocols.mpc import pairs_2pc, umpc

__all__ = ["CentralLaplace", "ConfidenceInterval", "Cost", "Estimate", "Message", "Protocol",
           "Role", "auc_tree", "central", "fedauc", "ghazi", "ghazi_shuffle", "pairs_2pc",
           "quantized_rr", "umpc"]
