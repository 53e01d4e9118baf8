"""003 Sec. 4.2: the private ECDF through function secret sharing (two servers).

Each party uploads the two keys of a DCF for ``1[x_i > tau_b]`` once; afterwards the servers
answer any threshold query alone (see :mod:`fedustat.protocols.ecdf.federated`). As protocol
steps the two servers are the parties 0 and 1 and the keys reach them in a relay round.
"""

from __future__ import annotations

import copy
import dataclasses
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
from fedustat.protocols.ecdf.hierarchical import HierarchicalPlan, NodeNoise
from fedustat.protocols.ecdf.shared_noise import (
    Randomness,
    SharedTreeNoise,
    check_randomness,
    check_ring,
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
from fedustat.secure.dcf import FssKey, dcf_gen, dcf_sum_at
from fedustat.secure.fixedpoint import FixedPoint
from fedustat.secure.ring import Ring, as_share_rng
from fedustat.secure.sharing import share
from fedustat.secure.transcript import Transcript
from fedustat.stats.ecdf import DyadicTree

__all__ = [
    "FssECDF",
    "FssECDFServers",
    "fss_ecdf",
    "fss_ecdf_setup",
]


# --------------------------------------------------------------- Sec. 4.2: FSS servers


@dataclass(eq=False)
class FssECDFServers:
    """The two FSS servers after the key upload: they answer threshold queries alone.

    Server ``j`` holds ``keys[j]`` (one DCF key per party for ``f_i(b) = 1[x_i > tau_b]``)
    and its row of the noise shares. :meth:`query` is 003 Sec. 4.2's evaluation phase.
    """

    keys: tuple[FssKey, FssKey]
    grid: np.ndarray
    tree: DyadicTree
    n: int
    epsilon: float
    fixed_point: FixedPoint
    noise: SharedTreeNoise | None
    setup_cost: Cost
    diagnostics: dict[str, Any] = field(default_factory=dict)
    queries: int = 0
    keygen_seconds: float = 0.0
    last_query_seconds: list[float] = field(default_factory=list)

    protocol: str = "ecdf-fss"
    #: Hierarchical release (None: 003's tree): the first query opens the noisy nodes of
    #: this tree, every later query is answered from that released curve.
    tree_plan: HierarchicalPlan | None = None
    released: FederatedECDF | None = None

    def query(self, query: Any = None) -> FederatedECDF:
        """Evaluate the private ECDF at the grid positions ``query`` (None: all).

        The querier sends ``B`` to both servers (``2 |B| w`` bits); server ``j`` computes
        ``Y_j(b) = sum_i Eval(j, k_i^j, b)`` (:func:`dcf_sum_at`), its count share
        (``n - Y_0`` and ``-Y_1``: the count of ``x_i <= tau_b`` is ``n`` minus that of
        ``x_i > tau_b``), scales it to fixed point, adds its noise share and sends it to
        the querier (``2 |B| l`` bits). Independent of n: 2 rounds, ``2 |B| (w + l)`` bits.
        Every answer is an entry of the same eps-DP curve, whatever the number of queries.

        Hierarchical (``tree_plan``): the first query evaluates every grid point, forms the
        node shares (``c_{e-1} - c_{s-1}``) plus the node-noise shares and opens the noisy
        node vector (``2 #nodes l`` bits); the querier's least squares gives the whole
        curve, and this and every later query return its entries (post-processing: no
        further traffic, no further DCF evaluation).
        """
        idx = query_indices(query, self.grid.size)
        if self.tree_plan is not None:
            return self._hierarchical_query(idx)
        transcript = Transcript(2)
        w = index_bits(self.grid.size)
        transcript.view(1).record(phase="online", kind="ecdf.query",
                                  sent=np.array([[2 * idx.size * w]]),
                                  received=np.zeros((1, 1), np.int64))
        ring = self.fixed_point.ring
        seconds = []
        count_shares = np.empty((2, idx.size), dtype=np.uint64)
        for j in (0, 1):
            start = time.perf_counter()
            above = dcf_sum_at(j, self.keys[j], idx.astype(np.uint64))
            base = np.uint64(self.n) if j == 0 else np.uint64(0)
            count_shares[j] = ring.sub(ring.reduce(base), above)
            seconds.append(time.perf_counter() - start)
        counts = open_counts(count_shares, idx, self.noise, self.fixed_point, transcript)
        self.queries += 1
        online = transcript.total_bits("online")
        cost = Cost(total_bits=online, rounds=transcript.rounds,
                    server_operations=2 * self.n * idx.size)
        # Server-side timing stays with the servers; a release carries public counts only.
        self.last_query_seconds = seconds
        diagnostics = {**self.diagnostics, "bits_query": 2 * idx.size * w,
                       "bits_servers_to_querier": online - 2 * idx.size * w,
                       "dcf_evaluations_per_server": self.n * idx.size,
                       "query_number": self.queries}
        return release_curve(self.protocol, self.grid, self.tree, idx, counts, self.n,
                             self.epsilon, self.fixed_point, self.noise, cost, self.setup_cost,
                             diagnostics)


    def _hierarchical_query(self, idx: np.ndarray) -> FederatedECDF:
        assert self.tree_plan is not None
        if self.released is None:
            points = np.arange(self.grid.size, dtype=np.int64)
            transcript = Transcript(2)
            w = index_bits(self.grid.size)
            transcript.view(1).record(phase="online", kind="ecdf.query",
                                      sent=np.array([[2 * w]]),
                                      received=np.zeros((1, 1), np.int64))
            ring = self.fixed_point.ring
            count_shares = np.empty((2, points.size), dtype=np.uint64)
            seconds = []
            for j in (0, 1):
                start = time.perf_counter()
                above = dcf_sum_at(j, self.keys[j], points.astype(np.uint64))
                base = np.uint64(self.n) if j == 0 else np.uint64(0)
                count_shares[j] = ring.sub(ring.reduce(base), above)
                seconds.append(time.perf_counter() - start)
            nodes = open_nodes(count_shares, self.tree_plan, self.noise, self.fixed_point,
                               transcript)
            self.last_query_seconds = seconds
            online = transcript.total_bits("online")
            cost = Cost(total_bits=online, rounds=transcript.rounds,
                        server_operations=2 * self.n * points.size)
            diagnostics = {**self.diagnostics, "bits_query": 2 * w,
                           "bits_servers_to_querier": online - 2 * w,
                           "dcf_evaluations_per_server": self.n * points.size}
            self.released = release_curve(self.protocol, self.grid, self.tree, points, nodes,
                                          self.n, self.epsilon, self.fixed_point, self.noise,
                                          cost, self.setup_cost, diagnostics,
                                          tree_plan=self.tree_plan)
            cost_now = cost
        else:
            cost_now = Cost()  # post-processing of the released curve: nothing travels
        self.queries += 1
        full = self.released
        return dataclasses.replace(
            full, thresholds=full.grid[idx], values=full.values[idx], counts=full.counts[idx],
            indices=idx, cost=cost_now,
            diagnostics={**full.diagnostics, "query_number": self.queries})


@dataclass
class _FssParties:
    positions: np.ndarray
    parties: np.ndarray
    step: int = 0
    # A computing party's key for every party (its own state, never sent on).
    keys: dict[int, FssKey] = field(default_factory=dict)
    # A computing party: the parties whose keys reached it (all of 0..n-1 unless some
    # fell silent in the key round).
    present: np.ndarray | None = None


@dataclass
class _FssServerState:
    n: int
    batches: list[dict[str, np.ndarray]] = field(default_factory=list)
    received: int = 0
    upload_bits: int = 0
    max_upload_bits: int = 0
    # The two servers' keys and noise shares once set up (their own state, never released).
    servers: FssECDFServers | None = None


_KEY_FIELDS = ("key_seed", "key_cw_seed", "key_cw_t", "key_cw_value", "key_cw_out")


class FssECDF(Protocol):
    """003 Sec. 4.2: each party sends DCF keys once; the two key holders answer alone.

    The two servers of Sec. 4.2 are the parties 0 and 1 (*computing parties*); the
    aggregator is the querier. Each party computes on its own value and the rows it
    received only, so any grouping of parties into batches or silos runs the same steps:

    * Relay round (keys): party ``i`` computes ``g_i = #{tau < x_i}``, runs ``dcf_gen``
      for ``f(b) = 1[b < g_i]`` (``= 1[x_i > tau_b]``, 003's ``phi_>``) on ``d =
      bitlen(N)`` bits with payload 1, and sends key ``j`` to computing party ``j``: one
      row each with the key's real fields (``key_seed`` 128 bits, ``key_cw_seed`` d x 128,
      ``key_cw_t`` 2d, ``key_cw_value`` d l, ``key_cw_out`` l), ``2 K_DCF(d)`` peer bits
      per party, ``K_DCF(d) = 128 + d (130 + l) + l`` = ``FssKey.bits_per_key``.
    * Relay round (noise; distributed noise only): each contributor (parties ``0..K-1``,
      002 Protocol B.1) sends the two computing parties additive shares of its Pólya part
      at the queried points (:func:`~fedustat.protocols.ecdf.shared_noise.
      contributor_point_units`): ``2 |B| l`` bits per contributor.
    * Upload: computing party ``j`` checks it holds one key from every party (and one
      noise share from every contributor), evaluates ``Y_j(b) = sum_i Eval(j, k_i^j, b)``
      (:func:`dcf_sum_at`), forms its count share (``n - Y_0`` and ``-Y_1``), scales it to
      fixed point, adds its noise shares and uploads ``|B|`` ring elements.
    * Server step: the querier adds the two shares; the :class:`Estimate` carries the
      curve (``diagnostics["curve"]``).

    The keys stay with the computing parties (their party state); the aggregator never
    holds them. :func:`fss_ecdf_setup` runs the servers in one process instead
    (:class:`FssECDFServers`, for repeated queries on one noise draw). Parameters as in
    :class:`PointwiseECDF`; ``n_servers`` must be 2 (the DCF is a two-party FSS scheme).
    """

    name = "ecdf-fss"
    released_fields = (*Protocol.released_fields, "diagnostics.curve.values",
                       "diagnostics.curve.counts")

    def __init__(self, thresholds: Any = None, query: Any = None, *, epsilon: float,
                 n_servers: int = 2, noise: SharedTreeNoise | None = None,
                 tree_noise: TreeNoise | NodeNoise | None = None,
                 contributors: int | None = None,
                 min_honest: int = 1, frac_bits: int | None = None, ring_bits: int = 64,
                 randomness: Randomness | None = None, bounds: Any = None,
                 precision: float | None = None, method: str | None = None) -> None:
        if n_servers != 2:
            raise ValueError(f"n_servers must be 2: the comparison keys (DCF, Boyle et al. "
                             f"2021) are a two-party FSS scheme, got {n_servers!r}")
        self.thresholds, self.bounds = grid_from_bounds(thresholds, bounds, precision)
        self.tree = DyadicTree(self.thresholds.size)
        self.query = query_indices(query, self.thresholds.size)
        self.method, self.tree_plan = resolve_federated_method(
            method, self.query, self.thresholds.size, noise, tree_noise)
        # The hierarchical tree needs every bin: the key holders evaluate every point.
        self.points = (np.arange(self.thresholds.size, dtype=np.int64)
                       if self.tree_plan is not None else self.query)
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.n_servers = 2
        self.fixed_point, self.noise, self._plan = resolve_noise_plan(
            self.tree, self.epsilon, 2, noise, tree_noise, contributors, min_honest,
            frac_bits, ring_bits, self.tree_plan)
        self.randomness = check_randomness(randomness)
        # Positions run over 0..N (N: above the grid), so d bits with 2^d > N.
        self.domain_bits = int(self.thresholds.size).bit_length()
        self._n = 0  # the run's size, from configure (not configuration: n is public)

    @property
    def ring(self) -> Ring:
        return self.fixed_point.ring

    def key_bits(self) -> int:
        """``K_DCF(d) = 128 + d (128 + 2 + l) + l``: one key's wire size."""
        return 128 + self.domain_bits * (128 + 2 + self.ring.bits) + self.ring.bits

    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _FssParties:
        check_in_bounds(np.asarray(data, dtype=np.float64).ravel(), self.bounds)
        return _FssParties(grid_positions(self.thresholds, data), np.asarray(parties, np.int64))

    def public_settings(self) -> dict[str, Any]:
        """The noise plan (who draws the distributed noise, how many must be honest),
        kept under a private name: part of the public configuration parties agree on."""
        return {"noise_plan": self._plan}

    def init_server(self, n_parties: int) -> _FssServerState:
        n = check_positive_int(n_parties, "n_parties")
        check_ring(self.fixed_point, n, self.tree, self.epsilon, self.noise, self._plan)
        return _FssServerState(n)

    def keys_for_servers(self, state: _FssParties, rng: np.random.Generator) -> Message:
        """Both DCF keys of every party of the batch as one message (fields ``(rows, 2,
        ...)``): :func:`fss_ecdf_setup`'s upload to servers run in one process."""
        source = as_share_rng("os") if self.randomness == "os" else rng
        k0, k1 = dcf_gen(state.positions, 1, domain_bits=self.domain_bits, ring=self.ring,
                         rng=source)
        rows, d = state.positions.size, self.domain_bits
        # Correction words are common to both keys but travel to both servers.
        fields = {
            "key_seed": np.stack([k0.seed, k1.seed], axis=1),
            "key_cw_seed": np.broadcast_to(np.moveaxis(k0.cw_seed, 0, 1)[:, None],
                                           (rows, 2, d, 2)),
            "key_cw_t": np.broadcast_to(np.moveaxis(k0.cw_t, 0, 1)[:, None], (rows, 2, d, 2)),
            "key_cw_value": np.broadcast_to(np.moveaxis(k0.cw_value, 0, 1)[:, None],
                                            (rows, 2, d)),
            "key_cw_out": np.broadcast_to(k0.cw_out[:, None], (rows, 2)),
        }
        bits = {"key_seed": 64, "key_cw_seed": 64, "key_cw_t": 1,
                "key_cw_value": self.ring.bits, "key_cw_out": self.ring.bits}
        return Message(Role.PARTY, Role.SERVER, fields, bits, state.parties)

    def configure(self, n_rows: int) -> FssECDF:
        """This evaluation for a run of ``n_rows`` parties (public; each computing party
        expects that many keys)."""
        k = self._plan.get("contributors", 0) if self._plan["mode"] == "distributed" else 0
        out = copy.copy(self)
        out._n = check_run_size(check_positive_int(n_rows, "n_rows"), 2, k)
        return out

    def party_step(self, state: _FssParties, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_FssParties, Message]:
        if self._n == 0:
            raise ValueError("configure(n_rows) gives the evaluation the run's size first")
        distributed = self._plan["mode"] == "distributed"
        if state.step == 0:
            state.step = 1
            keys = self.keys_for_servers(state, rng)
            bits = dict(keys.bits_per_value)
            return state, rows_to_servers(dict(keys.fields), bits, state.parties)
        check_no_rows_for(inbox, 2)
        if state.step == 1:
            for j in (int(p) for p in state.parties if p < 2):
                rows, present = surviving_rows(inbox, j, self._n, "DCF keys")
                if state.present is not None and not np.array_equal(state.present, present):
                    raise ValueError("the two computing parties received keys from "
                                     "different parties")
                state.present = present
                state.keys[j] = self._key_from_rows(rows, j)
            if distributed:
                state.step = 2
                return state, self._noise_round(state, rng)
        servers = sorted(state.keys)
        present = state.present
        dropped = present is not None and present.size < self._n
        withhold = dropped and withheld_reason(self._plan, present, 2) is not None
        sums = [self._count_share(state, j, inbox if distributed and not withhold else None)
                for j in servers]
        state.step = 3
        width = self.query.size if self.tree_plan is None else self.tree_plan.n_noisy_nodes
        upload = upload_sums(sums, servers, width, self.fixed_point)
        if not servers:
            # No rows, so no bits; the empty mask keeps the round's messages of one
            # layout when the computing parties send theirs.
            return state, with_summed(upload, np.zeros(0, np.int64), self._n, False)
        if dropped:
            assert present is not None
            upload = with_summed(upload, present, self._n, withhold)
        return state, upload

    def dropout_rule(self, state: _FssServerState, round_index: int) -> DropoutRule:
        """A party silent in the key round (round 0) sent nothing: the two key holders
        evaluate the keys that arrived (the count is ``n' - Y_0`` and ``-Y_1`` over those
        n' keys), if both key holders and at least ``min_honest`` noise contributors took
        part (002 Protocol B.1: each contributor draws a ``1/h`` share of the Pólya
        shape). Later rounds stop: the keys of every party are already held."""
        return dropout_rule_for(self.name, self.noise, round_index,
                                "after the key round the key holders hold every party's "
                                "keys (and a contributor's noise part is on its way): a "
                                "party silent now would be counted in a run that no "
                                "longer has it, and a silent key holder holds a share of "
                                "every count")

    def _noise_round(self, state: _FssParties, rng: np.random.Generator) -> Message:
        """Relay round: each contributor's noise part at the points, shared between the
        two computing parties; other parties send no rows."""
        mine = state.parties[state.parties < self._plan["contributors"]]
        noise_rng = "os" if self.randomness == "os" else rng
        if self.tree_plan is not None:
            parts = np.zeros((mine.size, self.tree_plan.n_noisy_nodes), dtype=np.uint64)
            for r in range(mine.size):
                parts[r] = contributor_node_units(self._plan, self.epsilon, self.fixed_point,
                                                  noise_rng)
            source = as_share_rng("os") if self.randomness == "os" else rng
            shares = share(parts, 2, source, ring=self.ring)  # (2, rows, nodes)
            return rows_to_servers({"noise": np.moveaxis(shares, 0, 1)},
                                   {"noise": self.ring.bits}, mine)
        parts = np.zeros((mine.size, self.query.size), dtype=np.uint64)
        for r in range(mine.size):
            parts[r] = contributor_point_units(self._plan, self.tree, self.epsilon,
                                               self.fixed_point, self.query, noise_rng)
        source = as_share_rng("os") if self.randomness == "os" else rng
        shares = share(parts, 2, source, ring=self.ring)  # (2, rows, |B|)
        return rows_to_servers({"noise": np.moveaxis(shares, 0, 1)},
                               {"noise": self.ring.bits}, mine)

    def _key_from_rows(self, rows: dict[str, np.ndarray], j: int) -> FssKey:
        """Computing party ``j``'s key for every party, from the rows it received."""
        return FssKey(j, "dcf", self.domain_bits, self.ring,
                      np.ascontiguousarray(rows["key_seed"], dtype=np.uint64),
                      np.ascontiguousarray(np.moveaxis(rows["key_cw_seed"], 1, 0),
                                           dtype=np.uint64),
                      np.ascontiguousarray(np.moveaxis(rows["key_cw_t"], 1, 0), dtype=bool),
                      np.ascontiguousarray(np.moveaxis(rows["key_cw_value"], 1, 0),
                                           dtype=np.uint64),
                      np.ascontiguousarray(rows["key_cw_out"], dtype=np.uint64))

    def _count_share(self, state: _FssParties, j: int, inbox: Message | None) -> np.ndarray:
        """Computing party ``j``: ``2^c`` times its share of the count ``<= tau_b`` (``n``
        minus the DCF sum, 003 Sec. 4.2) plus its noise shares."""
        ring = self.ring
        above = dcf_sum_at(j, state.keys[j], self.points.astype(np.uint64))
        # n (of the keys held: fewer after a dropout in the key round) minus the DCF sum.
        held = self._n if state.present is None else int(state.present.size)
        base = np.uint64(held) if j == 0 else np.uint64(0)
        units = ring.mul(ring.sub(ring.reduce(base), above),
                         np.uint64(1 << self.fixed_point.frac_bits))
        if self.tree_plan is not None:
            # Hierarchical: shares of the nodes (linear in the counts) plus node noise.
            units = ring.add(node_shares(units, self.tree_plan, self.fixed_point),
                             held_node_units(self._plan, self.noise, self.fixed_point, j))
        else:
            units = ring.add(units, held_point_units(self._plan, self.noise, self.fixed_point,
                                                     self.tree, self.query, j))
        if inbox is not None:
            contributors = np.arange(self._plan["contributors"])
            if state.present is not None:
                # Only the contributors that took part in the key round send noise parts.
                contributors = state.present[state.present < self._plan["contributors"]]
            rows = rows_for(inbox, j, contributors, "noise shares")
            units = ring.add(units, ring.sum(np.asarray(rows["noise"], np.uint64), axis=0))
        return units

    def absorb(self, state: _FssServerState, inbox: Message) -> _FssServerState:
        """Servers store one batch of keys (server ``j`` keeps slot ``j`` of each field)."""
        missing = set(_KEY_FIELDS) - set(inbox.fields)
        if missing:
            raise ValueError(f"the key upload lacks the fields {sorted(missing)}")
        state.batches.append({name: np.asarray(inbox.fields[name]) for name in _KEY_FIELDS})
        bits = np.asarray(inbox.bits_per_row())
        state.received += int(bits.size)
        state.upload_bits += int(bits.sum())
        state.max_upload_bits = max(state.max_upload_bits, int(bits.max(initial=0)))
        return state

    def _server_key(self, batches: list[dict[str, np.ndarray]], j: int) -> FssKey:
        def cat(name: str) -> np.ndarray:
            return np.concatenate([b[name][:, j] for b in batches], axis=0)

        return FssKey(j, "dcf", self.domain_bits, self.ring, np.ascontiguousarray(cat("key_seed")),
                      np.ascontiguousarray(np.moveaxis(cat("key_cw_seed"), 1, 0)),
                      np.ascontiguousarray(np.moveaxis(cat("key_cw_t"), 1, 0)),
                      np.ascontiguousarray(np.moveaxis(cat("key_cw_value"), 1, 0)),
                      np.ascontiguousarray(cat("key_cw_out")))

    def servers(self, state: _FssServerState, rng: Any) -> FssECDFServers:
        """The servers once every key is in: keys assembled, noise shares set up."""
        if state.received != state.n:
            raise ValueError(f"the servers received keys from {state.received} of "
                             f"{state.n} parties")
        keys = (self._server_key(state.batches, 0), self._server_key(state.batches, 1))
        noise = self.noise
        if noise is None:
            noise_rng = "os" if self.randomness == "os" else rng
            noise = draw_noise(self._plan, self.tree, self.epsilon, 2, self.fixed_point,
                                noise_rng)
        check_ring(self.fixed_point, state.n, self.tree, self.epsilon, noise, self._plan)
        noise_bits = 0 if noise is None else noise.setup_bits
        setup = Cost(bits_per_party=state.upload_bits / state.n,
                     max_bits_per_party=state.max_upload_bits,
                     total_bits=state.upload_bits + noise_bits, rounds=1,
                     offline_bits=noise_bits)
        diagnostics = {"bits_key_upload": state.upload_bits,
                       "key_bits_per_server": keys[0].bits_per_key,
                       "domain_bits": self.domain_bits, "noise_setup_bits": noise_bits,
                       "n_servers": 2, "ring_bits": self.ring.bits,
                       "frac_bits": self.fixed_point.frac_bits,
                       "secrecy": "computational (AES-128 PRG of the DCF keys) against either "
                                  "server alone; the two servers must not collude"}
        return FssECDFServers(keys, self.thresholds, self.tree, state.n, self.epsilon,
                              self.fixed_point, noise, setup, diagnostics,
                              tree_plan=self.tree_plan)

    def server_step(self, state: _FssServerState, inbox: Message,
                    rng: np.random.Generator) -> tuple[_FssServerState, Estimate]:
        """The querier opens ``count + noise`` from the two computing parties' shares."""
        width = self.query.size if self.tree_plan is None else self.tree_plan.n_noisy_nodes
        present = survivors_at_querier(inbox, self._plan, state.n, 2)
        counts = open_sums(sums_only(inbox), 2, width, self.fixed_point)
        # After a dropout in the key round: n and the noise contributors of those whose
        # keys arrived (the mask the key holders uploaded).
        n = state.n if present is None else int(present.size)
        b = self.points.size
        law = survivor_law(noise_law(self._plan, self.tree, self.epsilon, 2, self.fixed_point,
                                     self.noise, self.randomness), self._plan, present)
        setup_bits = 0 if self.noise is None else self.noise.setup_bits
        received = int(np.sum(inbox.bits_per_row()))
        # The querier measures what reached it; the run's traffic is the transport's.
        cost = Cost(total_bits=received, rounds=1, server_operations=2 * n * b)
        setup = Cost(total_bits=setup_bits, rounds=int(setup_bits > 0),
                     offline_bits=setup_bits)
        diagnostics = {"bits_servers_to_querier": received, "noise_setup_bits": setup_bits,
                       "domain_bits": self.domain_bits, "n_servers": 2,
                       "ring_bits": self.ring.bits, "frac_bits": self.fixed_point.frac_bits,
                       "dcf_evaluations_per_server": n * b,
                       "secrecy": "computational (AES-128 PRG of the DCF keys) against either "
                                  "computing party alone; the two must not collude"}
        if present is not None:
            diagnostics["parties_summed"] = n
        curve = release_curve(self.name, self.thresholds, self.tree, self.query, counts, n,
                              self.epsilon, self.fixed_point, law, cost, setup, diagnostics,
                              relayed=True, tree_plan=self.tree_plan)
        return state, curve_estimate(curve).with_cost(Cost(server_operations=2 * n * b,
                                                           offline_bits=setup_bits))


def fss_ecdf_setup(values: Any, thresholds: Any, *, epsilon: float,
                   noise: SharedTreeNoise | None = None,
                   tree_noise: TreeNoise | NodeNoise | None = None,
                   contributors: int | None = None, min_honest: int = 1,
                   frac_bits: int | None = None, ring_bits: int = 64,
                   batch_size: int = DEFAULT_BATCH, rng: RandomLike = None,
                   randomness: Randomness | None = None, method: str | None = None
                   ) -> FssECDFServers:
    """003 Sec. 4.2's preprocessing: every party uploads its two DCF keys, once.

    Runs the party steps of :class:`FssECDF` batch by batch; the returned servers answer
    any later query with :meth:`FssECDFServers.query`. ``setup_cost`` is measured from
    the key messages (``2 K_DCF(d)`` bits per party) plus the noise shares.
    ``method``: ``"hierarchical"`` (default: the servers hold node noise of the b-ary tree
    and open the noisy nodes once) or ``"003-tree"`` (003 Sec. 4.2 as written).
    """
    protocol = FssECDF(thresholds, None, epsilon=epsilon, noise=noise, tree_noise=tree_noise,
                       contributors=contributors, min_honest=min_honest, frac_bits=frac_bits,
                       ring_bits=ring_bits,
                       randomness=run_randomness(randomness, rng), method=method)
    x = as_float_array(values, "values")
    size = check_positive_int(batch_size, "batch_size")
    root = as_seed_sequence(rng)
    n = x.size
    seeds = root.spawn(1 + (n + size - 1) // size)
    state = protocol.init_server(n)
    start = time.perf_counter()
    for i, lo in enumerate(range(0, n, size)):
        rows = slice(lo, min(lo + size, n))
        parties = protocol.init_parties(x[rows], np.arange(rows.start, rows.stop))
        upload = protocol.keys_for_servers(parties, np.random.default_rng(seeds[1 + i]))
        state = protocol.absorb(state, upload)
    keygen = time.perf_counter() - start
    servers = protocol.servers(state, np.random.default_rng(seeds[0]))
    servers.keygen_seconds = keygen
    return servers


def fss_ecdf(values: Any, thresholds: Any, query: Any = None, *, epsilon: float,
             noise: SharedTreeNoise | None = None,
             tree_noise: TreeNoise | NodeNoise | None = None,
             contributors: int | None = None, min_honest: int = 1,
             frac_bits: int | None = None, ring_bits: int = 64,
             batch_size: int = DEFAULT_BATCH, rng: RandomLike = None,
             randomness: Randomness | None = None, method: str | None = None
             ) -> FederatedECDF:
    """003 Sec. 4.2 in one call: key upload (:func:`fss_ecdf_setup`), then one query.

    Parameters as in :class:`PointwiseECDF` (two servers). ``cost`` is the query's
    (``2 |B| (w + l)`` bits, 2 rounds, independent of n); ``setup_cost`` the key upload
    and the noise shares. ``method`` as :class:`PointwiseECDF` (default: hierarchical when
    the query covers every grid point).
    """
    grid_size = np.asarray(thresholds).size
    chosen, _ = resolve_federated_method(method, query_indices(query, grid_size), grid_size,
                                         noise, tree_noise)
    servers = fss_ecdf_setup(values, thresholds, epsilon=epsilon, noise=noise,
                             tree_noise=tree_noise, contributors=contributors,
                             min_honest=min_honest, frac_bits=frac_bits, ring_bits=ring_bits,
                             batch_size=batch_size, rng=rng, randomness=randomness,
                             method=chosen)
    return servers.query(query)
