"""003 Sec. 4.1's ECDF by dropout-tolerant secure aggregation (SecAgg+).

``ecdf-secagg`` with ``aggregation="secagg+"``: instead of additive shares for ``m``
computing parties (:mod:`fedustat.protocols.ecdf.secagg`), each party masks its own
contribution and the server (the aggregator) adds the masked vectors and removes the masks
(:class:`fedustat.secure.secagg_plus.SecAggPlus`: Bell et al. 2020 on Bonawitz et
al. 2017 Fig. 4). Parties that fall silent after joining are left out: the release is the
curve of the parties whose masked inputs reached the server (the survivors, ``U3``), with
``n = |U3|``.

A party's contribution is what a computing party would have summed for it: its
fixed-point indicators ``2^c 1[x_i <= tau_b]`` (003 Eq. 4) at the queried points (003's
tree) or, hierarchical, the b-ary tree's node counts of them (linear), plus its part of the
distributed noise: every party is a noise contributor drawing ``Polya(1/h, t) - Polya(1/h,
t)`` per node (002 Protocol B.1, as ``ghazi-shuffle``'s ``1/h`` shares), so any ``h``
honest survivors' parts add up to the full discrete Laplace noise. The server refuses to
unmask when fewer than ``h`` masked inputs survived.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from fedustat._validation import check_epsilon, check_positive_int
from fedustat.privacy.guarantee import (
    Assumption,
    PrivacyGuarantee,
    PrivacyModel,
    Trust,
    computational,
    honest_noise,
    semi_honest,
)
from fedustat.protocols.base import Cost, DropoutRule, Estimate, Message, Protocol, Role
from fedustat.protocols.ecdf.federated import (
    ROUTE_BITS,
    check_in_bounds,
    curve_estimate,
    grid_from_bounds,
    grid_positions,
    node_shares,
    query_indices,
    release_curve,
    resolve_federated_method,
)
from fedustat.protocols.ecdf.release import ECDF_ADJACENCY
from fedustat.protocols.ecdf.shared_noise import (
    Randomness,
    check_randomness,
    check_ring,
    contributor_node_units,
    contributor_point_units,
    noise_law,
    resolve_noise_plan,
)
from fedustat.secure import secagg_plus as sa
from fedustat.secure.shamir import PRIME_BITS
from fedustat.stats.ecdf import DyadicTree

__all__ = ["SecAggPlusECDF"]

_INDEX_BITS = 32  # a neighbour's party id on the wire
_SHARE_CHUNKS = sa.SECRET_CHUNKS


@dataclass
class _Parties:
    positions: np.ndarray
    parties: np.ndarray
    step: int = 0
    active: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    secret_keys: np.ndarray | None = None
    seeds: np.ndarray | None = None
    neighbours: np.ndarray | None = None
    neighbour_keys: np.ndarray | None = None
    held_key_shares: np.ndarray | None = None
    held_seed_shares: np.ndarray | None = None
    held: np.ndarray | None = None
    # The party's own contribution (indicators + its noise part), kept for studies.
    contribution: np.ndarray | None = None


@dataclass
class _Server:
    n: int
    phase: int = 0
    members: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    neighbours: np.ndarray | None = None
    public_keys: dict[int, np.ndarray] = field(default_factory=dict)
    masked_sum: np.ndarray | None = None
    survivors: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    masked_with: dict[int, np.ndarray] = field(default_factory=dict)
    unmasked: np.ndarray | None = None  # the survivors' sum + noise, in ring units
    upload_bits: int = 0


class SecAggPlusECDF(Protocol):
    """The federated ECDF through SecAgg+ (Bell et al. 2020), tolerant to dropouts.

    Rounds (Bonawitz et al. 2017 Fig. 4, semi-honest; Bell et al. 2020's graph):

    0. *AdvertiseKeys*: each party draws an X25519 masking key pair and uploads the public
       key (256 bits).
    1. The server builds the neighbour graph over the parties that advertised (a Harary
       graph ``H(n, k)`` relabelled by a random permutation) and sends each its ``k``
       neighbours and their public keys. *ShareKeys* (a relay round): each party draws its
       self-mask seed ``b_u`` and sends each neighbour a Shamir share (threshold ``t``,
       field ``2^31 - 1``) of its masking key and of ``b_u``: ``k`` rows of ``2 x 16``
       field elements. The transport seals each row for its receiver: the server sees only
       who sends to whom (the graph it chose) and the rows' sizes.
    2. *MaskedInputCollection*: each party masks its contribution with ``PRG(b_u)`` and
       the pairwise masks of the neighbours whose shares it received, and uploads it
       (``width`` ring elements) with which neighbours it masked with.
    3. The server adds the masked inputs of the survivors ``U3`` (refusing when fewer
       than ``h`` survived, or when the survivors' graph is not connected) and tells each
       survivor which of its neighbours survived. *Unmasking*: each survivor sends, per
       held neighbour, the share of ``b_v`` (``v`` survived) or of ``v``'s masking key
       (``v`` dropped). The server reconstructs them (``t`` shares each), removes the
       masks and releases the curve over ``U3``.

    Parameters
    ----------
    thresholds, query, epsilon, bounds, precision, method, frac_bits, ring_bits, randomness:
        As :class:`~fedustat.protocols.ecdf.secagg.PointwiseECDF`.
    min_honest:
        h: the noise is calibrated so that any h honest survivors' parts are the full
        noise; the server refuses to release over fewer than h survivors.
    degree, threshold:
        k and t (default: :func:`fedustat.secure.secagg_plus.default_parameters` for the
        run's n and ``max_dropout``).
    max_dropout:
        The fraction of parties (dropping independently) the defaults are sized for.
    """

    name = "ecdf-secagg-plus"
    released_fields = (*Protocol.released_fields, "diagnostics.curve.values",
                       "diagnostics.curve.counts")
    # The measured traffic depends on the neighbour graph the server draws (public coins:
    # rows addressed to a party that dropped are not delivered, nor counted).
    public_coin_fields = ("cost.bits_per_party", "cost.bits_received_per_party",
                          "cost.peer_bits_per_party", "cost.total_bits",
                          "cost.max_bits_per_party")

    def __init__(self, thresholds: Any = None, query: Any = None, *, epsilon: float,
                 min_honest: int = 1, degree: int | None = None,
                 threshold: int | None = None, max_dropout: float = 0.3,
                 frac_bits: int | None = None, ring_bits: int = 64,
                 randomness: Randomness | None = None, bounds: Any = None,
                 precision: float | None = None, method: str | None = None) -> None:
        self.thresholds, self.bounds = grid_from_bounds(thresholds, bounds, precision)
        self.tree = DyadicTree(self.thresholds.size)
        self.query = query_indices(query, self.thresholds.size)
        self.method, self.tree_plan = resolve_federated_method(
            method, self.query, self.thresholds.size, None, None)
        self.points = (np.arange(self.thresholds.size, dtype=np.int64)
                       if self.tree_plan is not None else self.query)
        self.epsilon = check_epsilon(epsilon, allow_inf=True)
        self.min_honest = check_positive_int(min_honest, "min_honest")
        # Every party contributes noise; K is the run's n, checked at configure.
        self.fixed_point, _, self._plan = resolve_noise_plan(
            self.tree, self.epsilon, 2, None, None, max(2, self.min_honest), self.min_honest,
            frac_bits, ring_bits, self.tree_plan)
        if not (isinstance(max_dropout, float | int) and 0.0 <= max_dropout < 1.0):
            raise ValueError(f"max_dropout must be a fraction in [0, 1), got {max_dropout!r}")
        self.max_dropout = float(max_dropout)
        if degree is not None:
            degree = check_positive_int(degree, "degree", minimum=2)
        if threshold is not None:
            threshold = check_positive_int(threshold, "threshold", minimum=1)
            if degree is not None and threshold > degree:
                raise ValueError(f"threshold ({threshold}) cannot exceed degree ({degree}): "
                                 "a secret needs t of the owner's k neighbours")
        self.degree, self.threshold = degree, threshold
        self.randomness = check_randomness(randomness)
        self._n = 0
        self._aggregation: sa.SecAggPlus | None = None

    # ------------------------------------------------------------------ configuration
    @property
    def width(self) -> int:
        return self.query.size if self.tree_plan is None else self.tree_plan.n_noisy_nodes

    def configure(self, n_rows: int) -> SecAggPlusECDF:
        n = check_positive_int(n_rows, "n_rows")
        if n < self.min_honest:
            raise ValueError(f"the run has {n} parties, fewer than min_honest = "
                             f"{self.min_honest}: no release could be made")
        if self.degree is not None and self.degree % 2 and self.degree != n - 1:
            raise ValueError(f"degree must be even (a Harary graph H(n, k)) or n - 1 = "
                             f"{n - 1} (the complete graph), got {self.degree}")
        k, t = sa.default_parameters(n, self.max_dropout, None if self.degree is None
                                     else min(self.degree, n - 1), self.threshold)
        out = copy.copy(self)
        out._n = n
        out._plan = {**self._plan, "contributors": n} if self._plan["mode"] != "none" \
            else self._plan
        out._aggregation = sa.SecAggPlus(k, t, self.fixed_point.ring, self.width)
        return out

    def public_settings(self) -> dict[str, Any]:
        return {"noise_plan": self._plan}

    @property
    def aggregation(self) -> sa.SecAggPlus:
        if self._aggregation is None:
            raise ValueError("configure(n_rows) gives the evaluation the run's size first")
        return self._aggregation

    def _source(self, rng: np.random.Generator) -> Any:
        return "os" if self.randomness == "os" else rng

    # ------------------------------------------------------------------------ parties
    def encode_parties(self, data: np.ndarray, parties: np.ndarray) -> _Parties:
        check_in_bounds(np.asarray(data, dtype=np.float64).ravel(), self.bounds)
        positions = grid_positions(self.thresholds, data)
        return _Parties(positions, np.asarray(parties, dtype=np.int64),
                        active=np.ones(positions.size, dtype=bool))

    def party_step(self, state: _Parties, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[_Parties, Message]:
        agg = self.aggregation
        source = self._source(rng)
        if state.step == 0:  # AdvertiseKeys
            state.secret_keys, public = agg.advertise(state.parties.size, source)
            state.step = 1
            return state, Message(Role.PARTY, Role.SERVER, {"public_key": public},
                                  {"public_key": 8}, state.parties)
        if state.step == 1:  # ShareKeys (relay)
            rows = self._rows_addressed(state, inbox)
            state.active = rows >= 0
            take = rows[state.active]
            state.neighbours = np.asarray(inbox.fields["neighbours"], np.int64)[take]
            state.neighbour_keys = np.asarray(inbox.fields["keys"], np.uint8)[take]
            me = np.flatnonzero(state.active)
            state.seeds, key_shares, seed_shares = agg.share_secrets(
                state.neighbours, state.secret_keys[me], source)
            k = state.neighbours.shape[1]
            state.step = 2
            return state, Message(
                Role.PARTY, Role.PARTY,
                {"key_share": key_shares.reshape(me.size * k, _SHARE_CHUNKS),
                 "seed_share": seed_shares.reshape(me.size * k, _SHARE_CHUNKS),
                 "to": state.neighbours.reshape(-1)},
                {"key_share": PRIME_BITS, "seed_share": PRIME_BITS, "to": ROUTE_BITS},
                np.repeat(state.parties[me], k))
        if state.step == 2:  # MaskedInputCollection
            return self._masked_upload(state, inbox, source)
        if state.step == 3:  # Unmasking
            rows = self._rows_addressed(state, inbox)
            survivors = np.flatnonzero(rows >= 0)
            me = np.flatnonzero(state.active)  # rows of the neighbour arrays
            local = np.searchsorted(me, survivors)
            survived = np.asarray(inbox.fields["survived"], bool)[rows[survivors]]
            shares = agg.unmasking_shares(state.held_key_shares[local],
                                          state.held_seed_shares[local],
                                          state.held[local], survived)
            state.step = 4
            return state, Message(Role.PARTY, Role.SERVER,
                                  {"unmask": shares, "held": state.held[local]},
                                  {"unmask": PRIME_BITS, "held": 1}, state.parties[survivors])
        raise RuntimeError(f"{self.name}: the parties have already sent their shares")

    def _rows_addressed(self, state: _Parties, inbox: Message | None) -> np.ndarray:
        """For each party of the batch, its row in the server's addressed message (-1:
        none, the party is out of the run)."""
        if inbox is None or inbox.parties is None:
            raise ValueError("parties expect the server's addressed rows in this round")
        addressed = np.asarray(inbox.parties, np.int64)
        where = {int(p): r for r, p in enumerate(addressed)}
        return np.array([where.get(int(p), -1) for p in state.parties], dtype=np.int64)

    def _contribution(self, state: _Parties, rows: np.ndarray, source: Any) -> np.ndarray:
        """The parties' own vectors: fixed-point indicators (003 Eq. 4) at the points, as
        tree nodes (hierarchical, linear), plus each one's Pólya part of the noise (002
        Protocol B.1 with shape 1/h)."""
        fp, ring = self.fixed_point, self.fixed_point.ring
        units = ring.mul((state.positions[rows, None] <= self.points[None, :]).astype(
            np.uint64), np.uint64(1 << fp.frac_bits))
        if self.tree_plan is not None:
            units = node_shares(units, self.tree_plan, fp)
        if self._plan["mode"] == "distributed":
            for r in range(units.shape[0]):
                part = (contributor_node_units(self._plan, self.epsilon, fp, source)
                        if self.tree_plan is not None else
                        contributor_point_units(self._plan, self.tree, self.epsilon, fp,
                                                self.query, source))
                units[r] = ring.add(units[r], part)
        return units

    def _masked_upload(self, state: _Parties, inbox: Message | None, source: Any
                       ) -> tuple[_Parties, Message]:
        agg = self.aggregation
        me = np.flatnonzero(state.active)
        k = state.neighbours.shape[1]
        held = np.zeros((me.size, k), dtype=bool)
        key_shares = np.zeros((me.size, k, _SHARE_CHUNKS), np.uint64)
        seed_shares = np.zeros_like(key_shares)
        if inbox is not None and inbox.is_peer and inbox.parties is not None:
            to = np.asarray(inbox.parties, np.int64)
            origin = np.asarray(inbox.fields["from"], np.int64)
            for local, u in enumerate(state.parties[me]):
                for r in np.flatnonzero(to == u):
                    slot = np.flatnonzero(state.neighbours[local] == origin[r])
                    if slot.size != 1:
                        raise ValueError(f"party {int(u)} received shares from party "
                                         f"{int(origin[r])}, which is not its neighbour")
                    held[local, slot[0]] = True
                    key_shares[local, slot[0]] = inbox.fields["key_share"][r]
                    seed_shares[local, slot[0]] = inbox.fields["seed_share"][r]
        state.held, state.held_key_shares, state.held_seed_shares = held, key_shares, \
            seed_shares
        state.contribution = self._contribution(state, me, source)
        masked = agg.mask(state.parties[me], state.contribution, state.secret_keys[me],
                          state.seeds, state.neighbours, state.neighbour_keys, held)
        state.step = 3
        return state, Message(Role.PARTY, Role.SERVER,
                              {"masked": masked, "masked_with": held},
                              {"masked": self.fixed_point.bits, "masked_with": 1},
                              state.parties[me])

    # ------------------------------------------------------------------------- server
    def init_server(self, n_parties: int) -> _Server:
        n = check_positive_int(n_parties, "n_parties")
        check_ring(self.fixed_point, n, self.tree, self.epsilon, None, self._plan)
        return _Server(n)

    def dropout_rule(self, state: _Server, round_index: int) -> DropoutRule:
        reasons = {
            0: "secure aggregation with dropouts (SecAgg+): the neighbour graph is built "
               "over the parties that advertised keys",
            1: "secure aggregation with dropouts (SecAgg+): a party that did not share its "
               "keys is left out; a survivor's masked input is unmasked from its "
               "neighbours' shares, a dropped party's pairwise masks from t shares of its "
               "key",
            2: "secure aggregation with dropouts (SecAgg+): each needed secret is "
               "reconstructed from any t of the surviving neighbours' shares",
        }
        return DropoutRule(True, reasons[min(state.phase, 2)])

    def server_step(self, state: _Server, inbox: Message,
                    rng: np.random.Generator) -> tuple[_Server, Message | Estimate]:
        agg = self.aggregation
        state.upload_bits += int(np.sum(inbox.bits_per_row()))
        if state.phase == 0:
            members = np.asarray(inbox.parties, np.int64)
            order = np.argsort(members)
            members = members[order]
            keys = np.asarray(inbox.fields["public_key"], np.uint8)[order]
            state.members = members
            state.public_keys = {int(u): keys[r] for r, u in enumerate(members)}
            state.neighbours = agg.graph(members, self._source(rng))
            position = {int(u): r for r, u in enumerate(members)}
            neighbour_keys = keys[np.vectorize(position.__getitem__, otypes=[np.int64])(
                state.neighbours)]
            state.phase = 1
            return state, Message(Role.SERVER, Role.PARTY,
                                  {"neighbours": state.neighbours, "keys": neighbour_keys},
                                  {"neighbours": _INDEX_BITS, "keys": 8}, members)
        if state.phase == 1:
            return self._collect_masked(state, inbox)
        if state.phase == 2:
            return state, self._release(state, inbox)
        raise RuntimeError(f"{self.name}: the server has already released its estimate")

    def _collect_masked(self, state: _Server, inbox: Message) -> tuple[_Server, Message]:
        agg, h = self.aggregation, self.min_honest
        survivors = np.asarray(inbox.parties, np.int64)
        if survivors.size < h:
            raise ValueError(f"only {survivors.size} masked inputs survived, fewer than "
                             f"min_honest h = {h}: the noise is sized for h honest "
                             "survivors; no release")
        position = {int(u): r for r, u in enumerate(state.members)}
        masked_with = np.asarray(inbox.fields["masked_with"], bool)
        state.masked_with = {int(u): state.neighbours[position[int(u)]][masked_with[r]]
                             for r, u in enumerate(survivors)}
        alive = set(survivors.tolist())
        for u in alive:
            for v in state.masked_with[u]:
                if int(v) in alive and u not in state.masked_with[int(v)]:
                    raise ValueError(f"parties {u} and {int(v)} disagree on whether they "
                                     "masked with each other: no release")
        if not sa.connected(state.members, state.neighbours, survivors):
            raise ValueError(f"the {survivors.size} survivors' neighbour graph is not "
                             f"connected (degree k = {agg.degree}): unmasking would reveal "
                             "the sum of a part of them; no release")
        state.masked_sum = agg.ring.sum(np.asarray(inbox.fields["masked"], np.uint64), axis=0)
        state.survivors = np.sort(survivors)
        state.phase = 2
        rows = np.array([position[int(u)] for u in survivors], dtype=np.int64)
        survived = np.isin(state.neighbours[rows], survivors)
        return state, Message(Role.SERVER, Role.PARTY, {"survived": survived},
                              {"survived": 1}, survivors)

    def _release(self, state: _Server, inbox: Message) -> Estimate:
        agg = self.aggregation
        position = {int(u): r for r, u in enumerate(state.members)}
        holders = np.asarray(inbox.parties, np.int64)
        held = np.asarray(inbox.fields["held"], bool)
        unmask = np.asarray(inbox.fields["unmask"], np.uint64)
        shares: dict[int, list[tuple[int, np.ndarray]]] = {}
        for r, w in enumerate(holders):
            for j in np.flatnonzero(held[r]):
                v = int(state.neighbours[position[int(w)], j])
                shares.setdefault(v, []).append((int(w), unmask[r, j]))
        state.unmasked = agg.unmask(state.masked_sum, state.survivors, state.masked_with,
                                    state.public_keys, shares)
        state.phase = 3
        return self._estimate(state)

    @property
    def guarantee(self) -> PrivacyGuarantee:
        """The guarantee the run plans (noise contributors: the run's n)."""
        return self.guarantee_for()

    def guarantee_for(self, survivors: int | None = None) -> PrivacyGuarantee:
        """eps-DP in the computational model (X25519 and ChaCha20 hide the inputs), with
        SecAgg+'s parameters stated."""
        if math.isinf(self.epsilon):
            return PrivacyGuarantee.none()
        agg = self._aggregation
        n = self._n or None
        k = "k" if agg is None else str(agg.degree)
        t = "t" if agg is None else str(agg.threshold)
        tolerated = ("" if agg is None or n is None else
                     f"; sized for {self.max_dropout:.0%} of parties dropping (each secret "
                     f"keeps t holders with probability >= 1 - 2^-20 up to "
                     f"{sa.tolerated_dropout(agg.degree, agg.threshold, n):.0%})")
        h = self.min_honest
        contributors = survivors if survivors is not None else (n or h)
        assumptions = (
            semi_honest("server and parties"),
            Assumption(Trust.NON_COLLUDING_SERVERS,
                       f"secure aggregation with dropouts (SecAgg+, Bell et al. 2020): "
                       f"neighbour graph of degree k = {k}, Shamir threshold t = {t}; the "
                       f"server learns only the survivors' sum while fewer than t of any "
                       f"party's neighbours collude with it and the survivors' graph is "
                       f"connected (checked){tolerated}; release refused below h = {h} "
                       f"surviving masked inputs"),
            honest_noise(contributors, h),
            computational("X25519 key agreement and the ChaCha20 PRG of the masks"),
        )
        return PrivacyGuarantee(self.epsilon, 0.0, PrivacyModel.COMPUTATIONAL,
                                ECDF_ADJACENCY, assumptions=assumptions)

    def planned_guarantee(self, n_rows: int | None = None) -> PrivacyGuarantee:
        return (self if n_rows is None else self.configure(n_rows)).guarantee_for()

    def _estimate(self, state: _Server) -> Estimate:
        agg = self.aggregation
        n = int(state.survivors.size)
        counts = self.fixed_point.decode(state.unmasked)
        plan = {**self._plan, "contributors": n} if self._plan["mode"] != "none" else self._plan
        law = noise_law(plan, self.tree, self.epsilon, 2, self.fixed_point, None,
                        self.randomness or "simulation")
        diagnostics = {"aggregation": "secagg+", "secagg_survivors": n,
                       "secagg_degree": agg.degree, "secagg_threshold": agg.threshold,
                       "ring_bits": self.fixed_point.bits,
                       "frac_bits": self.fixed_point.frac_bits,
                       "secrecy": "SecAgg+ (Bell et al. 2020) on X25519 and ChaCha20: the "
                                  "server sees masked vectors and, per party, one of its two "
                                  "secrets"}
        cost = Cost(total_bits=state.upload_bits, rounds=1,
                    server_operations=n * self.width)
        curve = release_curve(self.name, self.thresholds, self.tree, self.query, counts, n,
                              self.epsilon, self.fixed_point, law, cost, Cost(), diagnostics,
                              relayed=True, tree_plan=self.tree_plan)
        curve = replace(curve, privacy=self.guarantee_for(n))
        return curve_estimate(curve).with_cost(Cost(server_operations=n * self.width))
