"""003 Sec. 4.1: the private ECDF at a query of grid points through secure aggregation.

Every party secret-shares its indicator vector ``1[x_i <= tau_b]`` among ``m >= 2``
servers; the servers add their shares of the tree noise and open only noisy counts
(see :mod:`fedustat.protocols.ecdf.federated`). As protocol steps the servers are the
parties ``0..m-1`` and the shares reach them in a relay round.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedustat._validation import (
    RandomLike,
    as_float_array,
    as_seed_sequence,
    check_epsilon,
    check_positive_int,
)
from fedustat.protocols.base import Cost, DropoutRule, Estimate, Message, Protocol, Role
from fedustat.protocols.ecdf.federated import (
    DEFAULT_BATCH,
    FederatedECDF,
    check_in_bounds,
    check_no_rows_for,
    check_run_size,
    curve_estimate,
    grid_from_bounds,
    grid_positions,
    index_bits,
    node_shares,
    open_counts,
    open_nodes,
    open_sums,
    query_indices,
    release_curve,
    resolve_federated_method,
    rows_for,
    rows_to_servers,
    upload_sums,
)
from fedustat.protocols.ecdf.hierarchical import NodeNoise
from fedustat.protocols.ecdf.shared_noise import (
    Randomness,
    SharedTreeNoise,
    check_randomness,
    check_ring,
    check_servers,
    contributor_node_units,
    contributor_point_units,
    draw_noise,
    dropout_rule_for,
    held_node_units,
    held_point_units,
    noise_law,
    resolve_noise_plan,
    run_randomness,
    sums_only,
    surviving_rows,
    survivor_law,
    survivors_at_querier,
    with_summed,
    withheld_reason,
)
from fedustat.protocols.ecdf.tree_noise import TreeNoise
from fedustat.secure.ring import Ring, as_share_rng
from fedustat.secure.sharing import share
from fedustat.secure.transcript import Transcript
from fedustat.stats.ecdf import DyadicTree

__all__ = [
    "PointwiseECDF",
    "pointwise_ecdf",
]


# -------------------------------------------------------- Sec. 4.1: secure aggregation


@dataclass
class _PointwiseParties:
    positions: np.ndarray
    parties: np.ndarray
    step: int = 0
    # Hierarchical: a computing party's sum of the indicator shares (its own state).
    count_units: dict[int, np.ndarray] = field(default_factory=dict)
    # A computing party: the parties whose shares reached it (all of 0..n-1 unless some
    # fell silent in the sharing round).
    present: np.ndarray | None = None


@dataclass
class _PointwiseServers:
    n: int
    sums: np.ndarray  # (m, |B|): each server's sum of the shares it received
    indices: np.ndarray
    received: int = 0
    upload_bits: int = 0
    max_upload_bits: int = 0
    query_bits_per_party: int = 0
    seconds: float = 0.0


class PointwiseECDF(Protocol):
    """003 Sec. 4.1: the private ECDF at a query ``B`` through secure aggregation.

    The ``m`` servers of Sec. 4.1 are the parties ``0..m-1`` (*computing parties*); the
    aggregator is the querier. Each party computes on its own value and the rows it
    received only, so any grouping of parties into batches or silos runs the same steps:

    * Relay round: party ``i`` computes ``1[x_i <= tau_b]`` for ``b in B`` (the U-statistic
      kernel of 003 Eq. 4) in fixed point (``2^c`` per count); a noise contributor (parties
      ``0..K-1``, distributed noise) adds its Pólya part at the queried points
      (:func:`~fedustat.protocols.ecdf.shared_noise.contributor_point_units`, 002 Protocol
      B.1). It sends computing party ``j`` the ``j``-th additive share over Z_{2^l} (002
      App. A.2): ``m`` rows of ``|B|`` ring elements, ``m |B| l`` peer bits per party. The
      query is a protocol parameter or arrives as a server broadcast ``{"query": B}``.
    * Upload: computing party ``j`` checks it holds one row from every party, sums them,
      adds the noise share it held before the run (given shares, or a dealer's draw at
      party 0) and uploads ``|B|`` ring elements; the others upload no rows.
    * Server step: the querier adds the ``m`` shares: ``count + noise``, nothing else. The
      result is an :class:`Estimate` (see :func:`curve_estimate`) whose
      ``diagnostics["curve"]`` is the :class:`FederatedECDF`; ``server_operations`` counts
      the computing parties' ring additions, ``m n |B|``. Under
      :func:`~fedustat.runtime.simulate.simulate` (or a networked run) the cost is
      measured by the transport; :func:`pointwise_ecdf` runs the evaluation in one process
      with the servers in the aggregator (the same arithmetic, the noise drawn there).

    Parameters
    ----------
    thresholds:
        Public, strictly increasing grid (N points).
    query:
        Grid positions to evaluate (None: all), a boolean mask or integer positions.
    epsilon:
        Budget (> 0) or ``math.inf`` for the exact counts.
    n_servers:
        m >= 2 aggregation servers.
    noise:
        Noise shares the servers already hold (:class:`SharedTreeNoise`), reused across
        queries so that all answers come from one eps-DP curve. Only for the same data:
        if a party joined, left or changed its value in between, two answers with the same
        noise differ by the exact change — draw new noise then (a new eps). Without
        ``noise``, every run draws fresh noise and is its own eps-DP release.
    tree_noise:
        A Laplace draw for a dealer to share (:func:`share_tree_noise`): the curve then
        equals ``dp_ecdf(..., tree_noise=tree_noise)`` up to fixed-point rounding.
    contributors, min_honest:
        With neither ``noise`` nor ``tree_noise``, :func:`distributed_tree_noise` draws
        the noise in the first server step with these parameters.
    frac_bits:
        c (default 0 for distributed noise, 20 for a dealer-shared continuous draw).
    ring_bits:
        l (default 64).
    randomness:
        ``"simulation"`` (the steps' seeded generators), ``"os"`` (OS CSPRNG), or None
        (default): decided by the run, the OS CSPRNG unless a seed is given.
    bounds, precision:
        Public ``(lo, hi)`` of the values: with ``thresholds=None`` the grid is
        ``absolute_grid(lo, hi, precision)`` (default precision ``(hi - lo) / 2^10``), and
        each party checks its value against the bounds.
    method:
        ``"hierarchical"`` (the default when the query covers every grid point): the
        central default's mechanism, ``dp_ecdf(method="hierarchical")``. Parties share
        their indicators at every grid point; each computing party turns its share of the
        prefix counts into shares of the b-ary tree's nodes (``c_{e-1} - c_{s-1}``,
        linear), adds its shares of the node noise (one Laplace scale per level:
        :func:`~fedustat.protocols.ecdf.shared_noise.distributed_node_noise`, or a
        dealer's :class:`~fedustat.protocols.ecdf.hierarchical.NodeNoise` as
        ``tree_noise``) and uploads ``#nodes`` ring elements; the querier opens the noisy
        node vector (the central mechanism's output: eps-DP) and runs the least squares
        in the clear (post-processing). With distributed noise the contributors send their
        node parts in a second relay round. ``"003-tree"`` (the default for a subset
        query): 003 Sec. 4.1 as written, ``|B|`` points and the dyadic tree's noise.
    """

    name = "ecdf-pointwise-secagg"
    released_fields = (*Protocol.released_fields, "diagnostics.curve.values",
                       "diagnostics.curve.counts")

    def __init__(self, thresholds: Any = None, query: Any = None, *, epsilon: float,
                 n_servers: int = 2, noise: SharedTreeNoise | None = None,
                 tree_noise: TreeNoise | NodeNoise | None = None,
                 contributors: int | None = None,
                 min_honest: int = 1, frac_bits: int | None = None, ring_bits: int = 64,
                 randomness: Randomness | None = None, bounds: Any = None,
                 precision: float | None = None, method: str | None = None) -> None:
        self.thresholds, self.bounds = grid_from_bounds(thresholds, bounds, precision)
        self.tree = DyadicTree(self.thresholds.size)
        self.query = query_indices(query, self.thresholds.size)
        self.method, self.tree_plan = resolve_federated_method(
            method, self.query, self.thresholds.size, noise, tree_noise)
        # The hierarchical tree needs every bin: the parties evaluate every grid point.
        self.points = (np.arange(self.thresholds.size, dtype=np.int64)
                       if self.tree_plan is not None else self.query)
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.n_servers = check_servers(n_servers)
        self.fixed_point, self.noise, self._plan = resolve_noise_plan(
            self.tree, self.epsilon, self.n_servers, noise, tree_noise, contributors,
            min_honest, frac_bits, ring_bits, self.tree_plan)
        self.randomness = check_randomness(randomness)
        self._n = 0  # the run's size, from configure (not configuration: n is public)

    @property
    def ring(self) -> Ring:
        return self.fixed_point.ring

    def query_message(self) -> Message:
        """The querier's broadcast of ``B`` to the parties: ``|B| w`` bits (``w`` =
        :func:`index_bits`)."""
        return Message(Role.SERVER, Role.PARTY, {"query": self.query},
                       {"query": index_bits(self.thresholds.size)})

    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _PointwiseParties:
        check_in_bounds(np.asarray(data, dtype=np.float64).ravel(), self.bounds)
        return _PointwiseParties(grid_positions(self.thresholds, data),
                                 np.asarray(parties, dtype=np.int64))

    def public_settings(self) -> dict[str, Any]:
        """The noise plan (who draws the distributed noise, how many must be honest),
        kept under a private name: part of the public configuration parties agree on."""
        return {"noise_plan": self._plan}

    def init_server(self, n_parties: int) -> _PointwiseServers:
        n = check_positive_int(n_parties, "n_parties")
        check_ring(self.fixed_point, n, self.tree, self.epsilon, self.noise, self._plan)
        return _PointwiseServers(n, np.zeros((self.n_servers, self.points.size), np.uint64),
                                 self.query)

    def configure(self, n_rows: int) -> PointwiseECDF:
        """This evaluation for a run of ``n_rows`` parties (public; each computing party
        expects that many rows)."""
        k = self._plan.get("contributors", 0) if self._plan["mode"] == "distributed" else 0
        out = copy.copy(self)
        out._n = check_run_size(check_positive_int(n_rows, "n_rows"), self.n_servers, k)
        return out

    def shares_for_servers(self, state: _PointwiseParties, inbox: Message | None,
                           rng: np.random.Generator) -> Message:
        """The parties' shares of their indicators for the ``m`` servers, as one message
        (field ``shares``, ``(rows, m, |B|)``): :func:`pointwise_ecdf`'s upload to servers
        run in the aggregator, whose noise is added there."""
        indicators = self._indicators(state, inbox)
        source = as_share_rng("os") if self.randomness == "os" else rng
        shares = share(indicators, self.n_servers, source, ring=self.ring)  # (m, rows, |B|)
        return Message(Role.PARTY, Role.SERVER, {"shares": np.moveaxis(shares, 0, 1)},
                       {"shares": self.ring.bits}, state.parties)

    def _indicators(self, state: _PointwiseParties, inbox: Message | None) -> np.ndarray:
        idx = self.query
        if inbox is not None and "query" in inbox.fields:
            idx = query_indices(np.asarray(inbox.fields["query"]), self.thresholds.size)
            if not np.array_equal(idx, self.query):
                raise ValueError("the broadcast query differs from the query the servers "
                                 "aggregate for; build one PointwiseECDF per query")
        idx = self.points
        return (state.positions[:, None] <= idx[None, :]).astype(np.uint64)

    def party_step(self, state: _PointwiseParties, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_PointwiseParties, Message]:
        if self._n == 0:
            raise ValueError("configure(n_rows) gives the evaluation the run's size first")
        if state.step == 0:
            state.step = 1
            return state, self._share_round(state, inbox, rng)
        check_no_rows_for(inbox, self.n_servers)
        servers = [int(p) for p in state.parties if p < self.n_servers]
        if self.tree_plan is not None:
            return self._node_step(state, inbox, rng, servers)
        sums = []
        for j in servers:
            rows = self._indicator_rows(state, inbox, j)
            total = self.ring.sum(np.asarray(rows["shares"], np.uint64), axis=0)
            sums.append(self.ring.add(total, held_point_units(
                self._plan, self.noise, self.fixed_point, self.tree, self.query, j)))
        state.step = 2
        return state, self._upload(state, sums, servers, self.query.size)

    def _indicator_rows(self, state: _PointwiseParties, inbox: Message | None,
                        j: int) -> dict[str, np.ndarray]:
        """Computing party ``j``'s rows of the sharing round, from the parties that sent
        theirs (parties silent in it are left out, :meth:`dropout_rule`)."""
        rows, present = surviving_rows(inbox, j, self._n, "indicator shares")
        if state.present is not None and not np.array_equal(state.present, present):
            raise ValueError("the computing parties of this batch received shares from "
                             "different parties")
        state.present = present
        return rows

    def _upload(self, state: _PointwiseParties, sums: list[np.ndarray], servers: list[int],
                width: int) -> Message:
        """The computing parties' upload; after a dropout with the mask of whom they
        summed, and their sums withheld when they may not be opened
        (:func:`~fedustat.protocols.ecdf.shared_noise.withheld_reason`)."""
        upload = upload_sums(sums, servers, width, self.fixed_point)
        present = state.present
        if not servers:
            # No rows, so no bits; the empty mask keeps the round's messages of one
            # layout when the computing parties send theirs.
            return with_summed(upload, np.zeros(0, np.int64), self._n, False)
        if present is None or present.size == self._n:
            return upload
        withhold = withheld_reason(self._plan, present, self.n_servers) is not None
        return with_summed(upload, present, self._n, withhold)

    def dropout_rule(self, state: _PointwiseServers, round_index: int) -> DropoutRule:
        """A party silent in the sharing round (round 0) sent nothing: the computing
        parties sum the rows that arrived, if every computing party and at least
        ``min_honest`` noise contributors took part (each contributor's part is a ``1/h``
        share of the Pólya shape, 002 Protocol B.1, so h honest ones still carry the
        noise). Later rounds stop: every party's shares are already in the sums."""
        return dropout_rule_for(self.name, self.noise, round_index,
                                "after the sharing round every party's indicator shares "
                                "are in the computing parties' sums (and a contributor's "
                                "noise part is on its way): a party silent now would be "
                                "counted in a run that no longer has it, and a silent "
                                "computing party holds a share of every count")

    def _node_step(self, state: _PointwiseParties, inbox: Message | None,
                   rng: np.random.Generator, servers: list[int]
                   ) -> tuple[_PointwiseParties, Message]:
        """Hierarchical: after the indicator round, the contributors' node-noise round
        (distributed noise only), then each computing party's share of the noisy nodes."""
        distributed = self._plan["mode"] == "distributed"
        if state.step == 1:
            # Computing parties keep their sums of the indicator shares (their own state).
            state.count_units = {j: self.ring.sum(np.asarray(self._indicator_rows(
                state, inbox, j)["shares"], np.uint64), axis=0) for j in servers}
            if distributed:
                state.step = 2
                return state, self._node_noise_round(state, rng)
        assert self.tree_plan is not None
        present = state.present
        contributors = np.arange(self._plan["contributors"]) if distributed else None
        withhold = False
        if distributed and present is not None and present.size < self._n:
            # Only the contributors that took part in the sharing round send noise parts.
            contributors = present[present < self._plan["contributors"]]
            withhold = withheld_reason(self._plan, present, self.n_servers) is not None
        sums = []
        for j in servers:
            units = self.ring.add(node_shares(state.count_units[j], self.tree_plan,
                                              self.fixed_point),
                                  held_node_units(self._plan, self.noise, self.fixed_point, j))
            if contributors is not None and not withhold:
                rows = rows_for(inbox, j, contributors, "noise shares")
                units = self.ring.add(units, self.ring.sum(np.asarray(rows["noise"], np.uint64),
                                                           axis=0))
            sums.append(units)
        state.step = 3
        return state, self._upload(state, sums, servers, self.tree_plan.n_noisy_nodes)

    def _node_noise_round(self, state: _PointwiseParties, rng: np.random.Generator) -> Message:
        """Relay round: each contributor's Pólya part of every node's noise (002 Protocol
        B.1 per level), shared among the computing parties; other parties send no rows."""
        assert self.tree_plan is not None
        mine = state.parties[state.parties < self._plan["contributors"]]
        noise_rng = "os" if self.randomness == "os" else rng
        parts = np.zeros((mine.size, self.tree_plan.n_noisy_nodes), dtype=np.uint64)
        for r in range(mine.size):
            parts[r] = contributor_node_units(self._plan, self.epsilon, self.fixed_point,
                                              noise_rng)
        source = as_share_rng("os") if self.randomness == "os" else rng
        shares = share(parts, self.n_servers, source, ring=self.ring)  # (m, rows, nodes)
        return rows_to_servers({"noise": np.moveaxis(shares, 0, 1)},
                               {"noise": self.ring.bits}, mine)

    def _share_round(self, state: _PointwiseParties, inbox: Message | None,
                     rng: np.random.Generator) -> Message:
        """Relay round: fixed-point indicators (plus a contributor's noise part), shared
        among the computing parties."""
        units = self.ring.mul(self._indicators(state, inbox),
                              np.uint64(1 << self.fixed_point.frac_bits))
        if self._plan["mode"] == "distributed" and self.tree_plan is None:
            noise_rng = "os" if self.randomness == "os" else rng
            for r in np.flatnonzero(state.parties < self._plan["contributors"]):
                units[r] = self.ring.add(units[r], contributor_point_units(
                    self._plan, self.tree, self.epsilon, self.fixed_point, self.query,
                    noise_rng))
        source = as_share_rng("os") if self.randomness == "os" else rng
        shares = share(units, self.n_servers, source, ring=self.ring)  # (m, rows, |B|)
        return rows_to_servers({"shares": np.moveaxis(shares, 0, 1)},
                               {"shares": self.ring.bits}, state.parties)

    def absorb(self, state: _PointwiseServers, inbox: Message) -> _PointwiseServers:
        """Servers add the shares of one batch of parties (server ``j`` sums column j)."""
        start = time.perf_counter()
        shares = np.asarray(inbox.fields["shares"])
        if shares.ndim != 3 or shares.shape[1:] != state.sums.shape:
            raise ValueError(f"shares must have shape (rows, {self.n_servers}, "
                             f"{state.indices.size}) for this query, got {shares.shape}")
        state.sums = self.ring.add(state.sums, self.ring.sum(shares, axis=0))
        bits = np.asarray(inbox.bits_per_row())
        state.received += int(shares.shape[0])
        state.upload_bits += int(bits.sum())
        state.max_upload_bits = max(state.max_upload_bits, int(bits.max(initial=0)))
        state.seconds += time.perf_counter() - start
        return state

    def finish(self, state: _PointwiseServers, rng: Any) -> FederatedECDF:
        """Servers: draw or take the noise, open ``count + noise`` to the querier."""
        if state.received != state.n:
            raise ValueError(f"the servers received shares from {state.received} of "
                             f"{state.n} parties; every party must take part in a query")
        noise = self.noise
        if noise is None:
            noise_rng = "os" if self.randomness == "os" else rng
            noise = draw_noise(self._plan, self.tree, self.epsilon, self.n_servers,
                                self.fixed_point, noise_rng)
        check_ring(self.fixed_point, state.n, self.tree, self.epsilon, noise, self._plan)
        transcript = Transcript(self.n_servers)
        if self.tree_plan is not None:
            counts = open_nodes(state.sums, self.tree_plan, noise, self.fixed_point, transcript)
        else:
            counts = open_counts(state.sums, state.indices, noise, self.fixed_point, transcript)
        n, m, b = state.n, self.n_servers, self.points.size
        online = transcript.total_bits("online")
        query_rounds = 1 if state.query_bits_per_party else 0
        cost = Cost(bits_per_party=state.upload_bits / n, max_bits_per_party=state.max_upload_bits,
                    bits_received_per_party=float(state.query_bits_per_party),
                    total_bits=state.upload_bits + n * state.query_bits_per_party + online,
                    rounds=query_rounds + 1 + transcript.rounds, server_operations=m * n * b)
        setup_bits = 0 if noise is None else noise.setup_bits
        setup = Cost(total_bits=setup_bits, rounds=int(setup_bits > 0),
                     offline_bits=setup_bits)
        diagnostics = {"bits_upload": state.upload_bits,
                       "bits_query": n * state.query_bits_per_party,
                       "bits_servers_to_querier": online, "noise_setup_bits": setup_bits,
                       "n_servers": m, "ring_bits": self.ring.bits,
                       "frac_bits": self.fixed_point.frac_bits,
                       "secrecy": f"information-theoretic against any {m - 1} of the {m} "
                                  f"servers (additive shares)"}
        return release_curve(self.name, self.thresholds, self.tree, state.indices, counts, n,
                             self.epsilon, self.fixed_point, noise, cost, setup, diagnostics,
                             tree_plan=self.tree_plan)

    def server_step(self, state: _PointwiseServers, inbox: Message,
                    rng: np.random.Generator) -> tuple[_PointwiseServers, Estimate]:
        """The querier opens ``count + noise`` from the computing parties' shares."""
        width = (self.query.size if self.tree_plan is None
                 else self.tree_plan.n_noisy_nodes)
        present = survivors_at_querier(inbox, self._plan, state.n, self.n_servers)
        counts = open_sums(sums_only(inbox), self.n_servers, width, self.fixed_point)
        # After a dropout in the sharing round: n and the noise contributors of those
        # whose rows arrived (the mask the computing parties uploaded).
        n = state.n if present is None else int(present.size)
        m, b = self.n_servers, self.points.size
        law = survivor_law(noise_law(self._plan, self.tree, self.epsilon, m, self.fixed_point,
                                     self.noise, self.randomness), self._plan, present)
        setup_bits = 0 if self.noise is None else self.noise.setup_bits
        received = int(np.sum(inbox.bits_per_row()))
        # The querier measures what reached it; the run's traffic is the transport's.
        cost = Cost(total_bits=received, rounds=1, server_operations=m * n * b)
        setup = Cost(total_bits=setup_bits, rounds=int(setup_bits > 0),
                     offline_bits=setup_bits)
        diagnostics = {"bits_servers_to_querier": received, "noise_setup_bits": setup_bits,
                       "n_servers": m, "ring_bits": self.ring.bits,
                       "frac_bits": self.fixed_point.frac_bits,
                       "secrecy": f"information-theoretic against any {m - 1} of the {m} "
                                  f"computing parties (additive shares)"}
        if present is not None:
            diagnostics["parties_summed"] = n
        curve = release_curve(self.name, self.thresholds, self.tree, self.query, counts, n,
                              self.epsilon, self.fixed_point, law, cost, setup, diagnostics,
                              relayed=True, tree_plan=self.tree_plan)
        return state, curve_estimate(curve).with_cost(Cost(server_operations=m * n * b,
                                                           offline_bits=setup_bits))


def pointwise_ecdf(values: Any, thresholds: Any, query: Any = None, *, epsilon: float,
                   n_servers: int = 2, noise: SharedTreeNoise | None = None,
                   tree_noise: TreeNoise | NodeNoise | None = None,
                   contributors: int | None = None, min_honest: int = 1,
                   frac_bits: int | None = None, ring_bits: int = 64,
                   batch_size: int = DEFAULT_BATCH, rng: RandomLike = None,
                   randomness: Randomness | None = None, method: str | None = None
                   ) -> FederatedECDF:
    """003 Sec. 4.1 in one process: the private ECDF at ``query`` by secure aggregation.

    Runs :class:`PointwiseECDF` batch by batch (the servers add each batch's shares as it
    arrives, so memory stays bounded): the querier broadcasts ``B`` (``|B| w`` bits per
    party), every party uploads ``m |B| l`` bits of shares, the servers send ``m |B| l``
    bits to the querier. ``cost`` is measured from those messages:
    ``total_bits = n |B| (w + m l) + m |B| l`` and 3 rounds; ``setup_cost`` is the noise
    sharing. Parameters as in :class:`PointwiseECDF`; ``values`` one per party; ``rng``
    seeds the shares, the batches and (for distributed noise) the contributors.
    ``method="hierarchical"`` (the default for ``query=None``): every party shares its
    indicators at all N points, the servers send ``m #nodes l`` bits (the noisy nodes).

    Returns
    -------
    FederatedECDF
    """
    protocol = PointwiseECDF(thresholds, query, epsilon=epsilon, n_servers=n_servers,
                             noise=noise, tree_noise=tree_noise, contributors=contributors,
                             min_honest=min_honest, frac_bits=frac_bits, ring_bits=ring_bits,
                             randomness=run_randomness(randomness, rng), method=method)
    x = as_float_array(values, "values")
    size = check_positive_int(batch_size, "batch_size")
    root = as_seed_sequence(rng)
    n = x.size
    seeds = root.spawn(1 + (n + size - 1) // size)
    server = protocol.init_server(n)
    ask = protocol.query_message()
    server.query_bits_per_party = int(ask.bits_per_row())
    for i, lo in enumerate(range(0, n, size)):
        rows = slice(lo, min(lo + size, n))
        parties = protocol.init_parties(x[rows], np.arange(rows.start, rows.stop))
        upload = protocol.shares_for_servers(parties, ask, np.random.default_rng(seeds[1 + i]))
        server = protocol.absorb(server, upload)
    return protocol.finish(server, np.random.default_rng(seeds[0]))
