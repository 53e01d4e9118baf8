"""The cost record of a run: bits, rounds and server work measured from its messages.

It sits below every layer that measures or reports costs: the secure layer's
:class:`~fedustat.secure.transcript.Transcript` fills one, transports measure one from the
messages they move, and every :class:`~fedustat.protocols.base.Estimate` carries one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cost"]


@dataclass(frozen=True)
class Cost:
    """Communication and computation measured from the messages a run emitted.

    Online bits are those sent while the protocol runs: a party's messages to the
    aggregator, the aggregator's messages to the parties, and the exchanges among
    parties that party steps report as :class:`PeerTraffic`. Offline bits are the
    correlated randomness a dealer sends before (Beaver triples, function-secret-sharing
    keys); they are counted apart.

    Parameters
    ----------
    bits_per_party:
        Mean online bits a party sent in total: to the aggregator and to other parties.
    max_bits_per_party:
        The largest such total over the parties.
    bits_received_per_party:
        Mean online bits a party received: from the aggregator (a broadcast counts once
        per receiving party) and from other parties.
    total_bits:
        Every online bit that crossed the network: parties to aggregator, aggregator to
        parties, and among parties (each peer bit once, by its sender).
    rounds:
        Sequential exchanges: one per message between the parties and the aggregator,
        plus the peer rounds.
    server_operations:
        A protocol-defined count of the aggregator's work (documented by each protocol).
    offline_bits:
        Total bits from the offline dealer.
    peer_bits_per_party:
        The part of ``bits_per_party`` a party sent to other parties.
    peer_rounds:
        The part of ``rounds`` spent in exchanges among parties.
    offline_bits_per_party:
        Mean dealer bits a party received (0 when a protocol only declares an offline
        total that no party received, e.g. a setup among servers).

    Examples
    --------
    >>> est = fedustat.roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], epsilon=math.inf)
    >>> est.cost.bits_per_party, est.cost.rounds
    (128.0, 1)
    """

    bits_per_party: float = 0.0
    max_bits_per_party: int = 0
    bits_received_per_party: float = 0.0
    total_bits: int = 0
    rounds: int = 0
    server_operations: int = 0
    offline_bits: int = 0
    peer_bits_per_party: float = 0.0
    peer_rounds: int = 0
    offline_bits_per_party: float = 0.0
