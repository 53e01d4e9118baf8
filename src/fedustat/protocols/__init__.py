"""Protocols: pure, vectorized steps over a batch of parties (see ``base``).

Importing this package registers every protocol with :mod:`fedustat.protocols.registry`.
"""

from fedustat.protocols import (
    central,
    fedauc,
    ghazi_shuffle,
    ldp_auc_tree,
    ldp_generic,
    ldp_ghazi,
    pairs_2pc,
    umpc,
)
from fedustat.protocols.base import ConfidenceInterval, Cost, Estimate, Message, Protocol, Role
from fedustat.protocols.central import CentralLaplace

__all__ = ["CentralLaplace", "ConfidenceInterval", "Cost", "Estimate", "Message", "Protocol",
           "Role", "central", "fedauc", "ghazi_shuffle", "ldp_auc_tree", "ldp_generic", "ldp_ghazi",
           "pairs_2pc", "umpc"]
