"""The protocol contract: pure, vectorized steps over a batch of parties.

A protocol never performs I/O (ARCHITECTURE.md, principle 1). It is written as two
kinds of steps:

* a **party step** maps (the state of a batch of parties, the server's last message)
  to (new state, one message per party). Arrays in party state and party messages
  have the party as their first axis, so the same step serves one real device (a
  batch of one) and millions of simulated parties (one batch);
* a **server step** maps (server state, the parties' messages) to (new state, a
  message to the parties) or, at the end, to an :class:`Estimate`.

Transports (``fedustat.runtime.simulate``, later a networked runtime) only move the
:class:`Message` objects these steps emit and count their bits, so the costs an
:class:`Estimate` reports are measured from what was actually sent. A party step that
runs secure computation *among* parties (shares, openings, dealer material) measures
that traffic itself and attaches it to its message as :class:`PeerTraffic`; the
transport adds it to the same per-party counters.

A party step may instead address its message to **other parties** (a *relay round*,
:attr:`Message.is_peer`): every row names its destination party in the reserved field
``to``, and the transport delivers the rows to the destinations' next party step (field
``from`` then names each row's origin; ``parties`` its recipient). No server step runs in
a relay round: the simulator routes the rows between batches, the networked runtime has
the server forward them end-to-end encrypted without reading them. Their bits are peer
traffic, counted from the rows that travel.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import json
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum, StrEnum
from functools import partial
from typing import Any, ClassVar, NamedTuple

import numpy as np

from fedustat._lazy import lazy_module
from fedustat._validation import (
    RecordCheck,
    as_float_array,
    as_int_array,
    check_consistent_length,
    check_positive_int,
)
from fedustat.cost import Cost
from fedustat.privacy.errors import ErrorDistribution
from fedustat.privacy.guarantee import PrivacyGuarantee, PrivacyModel
from fedustat.privacy.noise import DeploymentNoise
from fedustat.stats.kernels import Kernel, PublicData

sps = lazy_module("scipy.stats")

NOISE_KINDS = ("simulation", "deployment", "none")


#: Reserved field of a relay-round message: the destination party of each row.
PEER_TO = "to"
#: Reserved field of a delivered relay-round message: the party each row came from.
PEER_FROM = "from"
ROUTING_FIELDS = (PEER_TO, PEER_FROM)


class Role(StrEnum):
    """Who sends or receives a message."""

    PARTY = "party"
    SERVER = "server"


@dataclass(frozen=True, eq=False)
class PeerTraffic:
    """Traffic among parties measured during one party step, plus dealer material.

    Secure protocols run party-to-party exchanges (secret shares, openings, noise
    shares) inside a party step, and may receive correlated randomness from an offline
    dealer before it. The step measures them (e.g. with a
    :class:`fedustat.secure.Transcript`) and reports them here, so the transport can
    count them with the messages it carries itself.

    Attributes
    ----------
    parties:
        Global party ids, shape ``(r,)``. An id may appear on several rows; its rows
        are added up.
    sent, received:
        Online bits each row's party sent to / received from *other parties* in this
        step (not its messages to or from the aggregator, which the transport counts).
    offline_received:
        Bits each row's party received from the offline dealer for this step.
    rounds:
        Sequential peer-to-peer rounds of this step (rounds that run side by side count
        once), all before the step's message to the aggregator.
    """

    parties: np.ndarray
    sent: np.ndarray
    received: np.ndarray
    offline_received: np.ndarray
    rounds: int = 0

    def __post_init__(self) -> None:
        arrays = {name: as_int_array(getattr(self, name), name)
                  for name in ("parties", "sent", "received", "offline_received")}
        check_consistent_length(**arrays)
        for name, values in arrays.items():
            if np.any(values < 0):
                what = "party ids" if name == "parties" else "bit counts"
                raise ValueError(f"{name} must be >= 0 ({what}), got {int(values.min())}")
            object.__setattr__(self, name, values)
        object.__setattr__(self, "rounds", check_positive_int(self.rounds, "rounds",
                                                              minimum=0))

    @classmethod
    def side_by_side(cls, parts: list[PeerTraffic]) -> PeerTraffic:
        """The traffic of batches that ran the same step at the same time: rows joined,
        rounds the longest batch's (the batches' exchanges overlap in time)."""
        if not parts:
            raise ValueError("parts must hold at least one PeerTraffic")
        return cls(np.concatenate([p.parties for p in parts]),
                   np.concatenate([p.sent for p in parts]),
                   np.concatenate([p.received for p in parts]),
                   np.concatenate([p.offline_received for p in parts]),
                   max(p.rounds for p in parts))


@dataclass(frozen=True)
class Message:
    """What one step sends: named array fields plus their wire size.

    For a message from parties, every field's first axis is the party (row ``r``
    belongs to party ``parties[r]``). A message from the server is either a broadcast
    (the same fields for every party; ``parties`` is ``None``) or addressed row by row.

    ``bits_per_value`` gives the encoded size of one element of each field, chosen by
    the protocol from its encoding (a k-ary report costs ceil(log2 k) bits, a ring
    element l bits, a float 64). The transport multiplies it by the element count.

    ``peer`` (messages from parties only) reports the traffic among parties and from
    the offline dealer that the step producing this message measured
    (:class:`PeerTraffic`); it is a measurement that the transport counts, not content
    delivered to the aggregator.

    A message from parties **to parties** (sender and receiver :attr:`Role.PARTY`, see
    :attr:`is_peer`) is a relay round: ``parties`` gives each row's sender and the
    reserved field ``to`` (:data:`PEER_TO`) its destination party. The transport delivers
    each row to its destination as a message whose ``parties`` are the recipients and
    whose reserved field ``from`` (:data:`PEER_FROM`) names the origins. Routing fields
    are not payload: :meth:`payload_bits_per_row` leaves them out, as ``parties``.
    """

    sender: Role
    receiver: Role
    fields: Mapping[str, np.ndarray]
    bits_per_value: Mapping[str, int]
    parties: np.ndarray | None = None
    peer: PeerTraffic | None = None

    def __post_init__(self) -> None:
        if self.peer is not None:
            if not isinstance(self.peer, PeerTraffic):
                raise TypeError(f"peer must be a PeerTraffic or None, got "
                                f"{type(self.peer).__name__}")
            if self.sender is not Role.PARTY:
                raise ValueError("peer traffic is reported on messages from parties only, "
                                 f"not on a message from the {self.sender}")
        if self.is_peer:
            self._check_peer_rows()
        missing = set(self.fields) - set(self.bits_per_value)
        if missing:
            raise ValueError(f"message fields {sorted(missing)} have no declared wire size")
        if self.parties is not None:
            n_rows = len(self.parties)
            for name, values in self.fields.items():
                if np.ndim(values) == 0 or len(values) != n_rows:
                    raise ValueError(f"field {name!r} must have one row per party ({n_rows})")

    def _check_peer_rows(self) -> None:
        if self.parties is None:
            raise ValueError("a message from parties to parties must say which party sent "
                             "(or receives) each row")
        if self.peer is not None:
            raise ValueError("a relay-round message carries its peer rows itself; it cannot "
                             "also report measured PeerTraffic")
        routing = [name for name in ROUTING_FIELDS if name in self.fields]
        if len(routing) != 1:
            raise ValueError(f"a message from parties to parties needs exactly one of the "
                             f"reserved fields {ROUTING_FIELDS} (destination or origin of "
                             f"each row), got {routing or 'none'}")
        ids = np.asarray(self.fields[routing[0]])
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu") \
                or (ids.size and int(ids.min()) < 0):
            raise ValueError(f"field {routing[0]!r} must hold one non-negative integer party "
                             f"id per row, got shape {ids.shape} and dtype {ids.dtype}")

    @property
    def is_broadcast(self) -> bool:
        return self.parties is None

    @property
    def is_peer(self) -> bool:
        """Whether this message goes from parties to parties (a relay round)."""
        return self.sender is Role.PARTY and self.receiver is Role.PARTY

    def payload_bits_per_row(self) -> np.ndarray:
        """Bits of each row of a relay-round message, routing fields left out."""
        if self.parties is None:
            raise ValueError("only messages with one row per party have per-row payloads")
        per_row = np.zeros(len(self.parties), dtype=np.int64)
        for name, values in self.fields.items():
            if name in ROUTING_FIELDS:
                continue
            arr = np.asarray(values)
            per_elem = int(np.prod(arr.shape[1:], dtype=np.int64)) if arr.ndim > 1 else 1
            per_row += per_elem * int(self.bits_per_value[name])
        return per_row

    def bits_per_row(self) -> np.ndarray | int:
        """Bits carried for each party (per row), or in total for a broadcast."""
        if self.parties is None:
            return int(sum(np.size(v) * self.bits_per_value[k] for k, v in self.fields.items()))
        per_row = np.zeros(len(self.parties), dtype=np.int64)
        for name, values in self.fields.items():
            arr = np.asarray(values)
            per_elem = int(np.prod(arr.shape[1:], dtype=np.int64)) if arr.ndim > 1 else 1
            per_row += per_elem * int(self.bits_per_value[name])
        return per_row


def service_id(n_parties: int, roles: tuple[str, ...], role: str) -> int:
    """The public id of service ``role``: reserved ids follow the data parties' ids
    ``0..n_parties-1`` in the order of ``roles`` (the protocol's :meth:`service_roles`)."""
    if role not in roles:
        raise ValueError(f"unknown service role {role!r}; this protocol's service roles are "
                         f"{list(roles) or 'none'}")
    return int(n_parties) + roles.index(role)


class ConfidenceInterval(NamedTuple):
    low: float
    high: float


@dataclass(frozen=True)
class StatisticMap:
    """A statistic released as a monotone, non-affine map ``g`` of a released U.

    Rényi-2's ``-ln U`` is infinite at U <= 0, where noise can carry a released U. Such a
    release is ``g(clip(u_value))``: the released U clipped into ``u_range`` (where ``g``
    is finite; it holds the exact U whenever the statistic is finite) and mapped. Its
    interval is U's interval (``u_value`` plus or minus the half-width of ``u_error``, the
    law of ``U_hat - U``) intersected with ``u_range`` and mapped through ``g``: the exact
    U is in the first exactly when the exact statistic is in the second (``g`` is
    monotone), so the coverage is U's. Clipping and mapping are post-processing of the DP
    U and cost no privacy (Dwork and Roth 2014, Prop. 2.1).

    Attributes
    ----------
    u_value:
        The released U, before clipping (a DP output).
    u_error:
        The law of ``U_hat - U`` (public).
    u_range:
        The public range U is clipped into.
    formula:
        The map, in words (``"-ln U"``).
    fn:
        The map from U to the statistic (public quantities only).
    """

    u_value: float
    u_error: ErrorDistribution
    u_range: tuple[float, float]
    formula: str
    fn: Callable[[float], float] = field(compare=False, repr=False)

    def interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """U's interval at ``confidence_level``, clipped into ``u_range`` and mapped."""
        half = self.u_error.half_width(confidence_level)
        low, high = self.u_range
        ends = [self.fn(min(max(u, low), high))
                for u in (self.u_value - half, self.u_value + half)]
        return ConfidenceInterval(float(min(ends)), float(max(ends)))


@dataclass(frozen=True, eq=False)  # equality and (no) hash defined below
class Estimate:
    """A released statistic with its error bar, privacy guarantee and measured costs.

    A release holds only DP outputs, public configuration and what is computed from those
    alone; each protocol lists its DP outputs in ``Protocol.released_fields`` (checked for
    every protocol by ``tests/test_release_privacy.py``). Internals a simulation needs
    (keys, shares, noise draws, records) stay in the protocol's state, never here.

    ``error`` is the law of ``value - exact`` (noise, randomization, subsampling) around the
    exact statistic of the parties' data, from public quantities only, so releasing it costs
    no privacy; ``std_error`` is its standard deviation. Sampling error of the data around a
    population parameter is not included. ``None`` where no formula applies.
    ``noise`` says where the randomness came from: ``"simulation"`` (seeded NumPy, for
    studies), ``"deployment"`` (OS CSPRNG and vetted samplers) or ``"none"`` (exact).

    A release behaves like the float :attr:`value` and is registered as a
    :class:`numbers.Real`: ``float(est)``, ``int(est)`` (truncation, as ``int(float)``),
    ``round(est, 3)``, ``math.floor``/``ceil``/``trunc``, ``f"{est:.3f}"``, arithmetic
    (``+ - * / // % ** divmod``, unary ``-``, ``abs``), ``math.isclose``, ``sorted``,
    ``statistics.mean``, ``np.asarray([e1, e2])`` (float64) and
    ``pd.Series(releases, dtype=float)``. Every derived number is a plain ``float`` (or
    ``int``), never an :class:`Estimate`: a number computed from a release carries no
    privacy claim of its own (no guarantee, error law or cost), so it is not presented as
    a release. (For the same reason ``Estimate(x)`` with one real number, the way numeric
    code such as :func:`statistics.mean` converts a result back to its inputs' type, gives
    ``float(x)``.) Comparisons are numeric, as for floats: ``est == x`` and
    ``est1 == est2`` compare values, and ``hash(est) == hash(est.value)``; whether two
    releases are the same release (every field) is :meth:`same_release`.
    ``json.dumps`` cannot serialise a non-dict object by itself: :meth:`to_json` gives
    the JSON text and :meth:`to_dict` the dict of JSON-native values
    (``json.dumps(est.to_dict())`` works).

    :meth:`clipped` post-processes a release into the statistic's valid range
    (:attr:`clip_range`): :attr:`value` and :meth:`confidence_interval` are then in range,
    and :attr:`raw_value` / :meth:`raw_interval` keep the unbiased, unclipped release
    (the one to average over many releases). ``unclipped`` is the stored raw value,
    ``None`` when nothing was clipped. A statistic that is a monotone, non-affine map of
    U (Rényi-2's ``-ln U``) carries a :attr:`statistic_map` instead: its U is clipped
    before the map, its interval is U's mapped through it, and its raw value is its value.

    Parameters
    ----------
    value:
        The released statistic.
    quantity:
        What it estimates (e.g. ``"auc"``).
    protocol:
        The registered name of the protocol that made it.
    privacy:
        The :class:`~fedustat.privacy.guarantee.PrivacyGuarantee` the release carries.
    std_error:
        Standard deviation of ``error`` (None where no formula applies).
    cost:
        The measured :class:`~fedustat.cost.Cost`.
    diagnostics:
        Public details of the run (parameters chosen, engine, ...).
    error:
        The law of ``value - exact`` (None where no formula applies).
    noise:
        ``"simulation"``, ``"deployment"`` or ``"none"``.
    clip_range:
        The statistic's valid range, or None.
    unclipped:
        The raw release when ``value`` was clipped, else None.
    statistic_map:
        For a statistic released as a monotone, non-affine map of a released U: the
        released U, its error law and the map (:class:`StatisticMap`); else None.

    Examples
    --------
    >>> est = fedustat.roc_auc_score([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8], epsilon=math.inf)
    >>> est.quantity, est.value, est.noise
    ('auc', 0.75, 'none')
    >>> f"{est:.2f}", est > 0.5
    ('0.75', True)
    """

    value: float
    quantity: str
    protocol: str
    privacy: PrivacyGuarantee
    std_error: float | None = None
    cost: Cost = field(default_factory=Cost)
    diagnostics: Mapping[str, Any] = field(default_factory=dict)
    error: ErrorDistribution | None = None
    noise: str = "simulation"
    clip_range: tuple[float, float] | None = None
    unclipped: float | None = None
    statistic_map: StatisticMap | None = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Numeric code converts a result back to its inputs' type with ``T(value)``
        # (statistics.mean, statistics.fsum's callers): a derived number is a float, not a
        # release (see the class docstring).
        if len(args) == 1 and not kwargs and isinstance(args[0], numbers.Real) \
                and not isinstance(args[0], Estimate):
            return float(args[0])
        return super().__new__(cls)

    def __post_init__(self) -> None:
        if self.noise not in NOISE_KINDS:
            raise ValueError(f"noise must be one of {NOISE_KINDS}, got {self.noise!r}")
        if self.privacy.model is PrivacyModel.NONE:
            object.__setattr__(self, "noise", "none")
        if self.error is not None and self.std_error is None:
            object.__setattr__(self, "std_error", self.error.std)
        if self.clip_range is not None:
            object.__setattr__(self, "clip_range", _check_range(self.clip_range))

    # ------------------------------------------------------------------ valid range

    def clipped(self, low: float, high: float) -> Estimate:
        """This release post-processed into ``[low, high]`` (the statistic's valid range).

        The value is clipped and the interval intersected with the range (an interval
        entirely outside it shrinks to the nearest end). Post-processing of a DP release
        costs no privacy (Dwork and Roth 2014, Prop. 2.1). The unclipped release stays
        available as :attr:`raw_value` and :meth:`raw_interval`.

        Parameters
        ----------
        low, high:
            The valid range (``low <= high``).

        Returns
        -------
        Estimate
            A copy with the clipped value, ``clip_range=(low, high)`` and the raw value
            kept as ``unclipped``.

        Examples
        --------
        >>> est = fedustat.Estimate(1.08, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> clipped = est.clipped(0.0, 1.0)
        >>> clipped.value, clipped.raw_value, clipped.clip_range
        (1.0, 1.08, (0.0, 1.0))
        """
        low, high = _check_range((low, high))
        raw = self.raw_value
        return replace(self, value=min(max(raw, low), high), clip_range=(low, high),
                       unclipped=raw)

    def unclipped_release(self) -> Estimate:
        """This release as its protocol made it: :attr:`raw_value` as the value, no range.

        Returns
        -------
        Estimate
            A copy with ``value=raw_value``, ``clip_range=None`` and ``unclipped=None``.

        Examples
        --------
        >>> est = fedustat.Estimate(1.08, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> raw = est.clipped(0.0, 1.0).unclipped_release()
        >>> raw.value, raw.clip_range, raw.unclipped
        (1.08, None, None)
        """
        return replace(self, value=self.raw_value, clip_range=None, unclipped=None)

    @property
    def raw_value(self) -> float:
        """The release before clipping into the valid range: unbiased where the protocol
        is, so the one to average over many releases; equals :attr:`value` if unclipped.

        Examples
        --------
        >>> est = fedustat.Estimate(1.08, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> est.raw_value, est.clipped(0.0, 1.0).raw_value
        (1.08, 1.08)
        """
        return float(self.value) if self.unclipped is None else float(self.unclipped)

    def raw_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """:meth:`confidence_interval` around :attr:`raw_value`, not intersected with the
        valid range.

        Parameters
        ----------
        confidence_level:
            The coverage, in (0, 1).

        Returns
        -------
        ConfidenceInterval
            ``(low, high)``; ValueError when the release has no error bar.

        Examples
        --------
        >>> est = fedustat.Estimate(1.08, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> low, high = est.clipped(0.0, 1.0).raw_interval()
        >>> round(low, 4), round(high, 4)
        (0.982, 1.178)
        """
        if not 0.0 < confidence_level < 1.0:
            raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
        if self.statistic_map is not None:
            return self.statistic_map.interval(confidence_level)
        raw = self.raw_value
        if self.error is not None:
            half = self.error.half_width(confidence_level)
            return ConfidenceInterval(raw - half, raw + half)
        if self.std_error is None:
            raise ValueError(f"protocol {self.protocol!r} gives no standard error for "
                             f"{self.quantity}; no confidence interval is available")
        z = float(sps.norm.ppf(0.5 + confidence_level / 2.0))
        return ConfidenceInterval(raw - z * self.std_error, raw + z * self.std_error)

    def confidence_interval(self, confidence_level: float = 0.95) -> ConfidenceInterval:
        """Interval for the exact statistic of the parties' data.

        From the release's error law (:attr:`error`: exact for Laplace and discrete
        Laplace noise, a numerical convolution or a conservative bound where terms add),
        else the normal approximation ``value ± z std_error``. A clipped release's interval
        is the raw one intersected with :attr:`clip_range`: the exact statistic lies in the
        range, so the intersection keeps the coverage.

        Parameters
        ----------
        confidence_level:
            The coverage, in (0, 1).

        Returns
        -------
        ConfidenceInterval
            ``(low, high)``; ValueError when the release has no error bar.

        Examples
        --------
        >>> est = fedustat.Estimate(1.08, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> low, high = est.confidence_interval(0.95)
        >>> round(low, 4), round(high, 4)
        (0.982, 1.178)
        >>> low, high = est.clipped(0.0, 1.0).confidence_interval(0.95)
        >>> round(low, 4), round(high, 4)
        (0.982, 1.0)
        """
        low, high = self.raw_interval(confidence_level)
        if self.clip_range is not None:
            lo, hi = self.clip_range
            low, high = min(max(low, lo), hi), min(max(high, lo), hi)
        return ConfidenceInterval(low, high)

    @property
    def interval_method(self) -> str:
        """How :meth:`confidence_interval` is computed, in words.

        Examples
        --------
        >>> est = fedustat.Estimate(1.08, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> est.interval_method
        'normal approximation'
        """
        if self.statistic_map is not None:
            return (f"U's error law {self.statistic_map.u_error} mapped through "
                    f"{self.statistic_map.formula}")
        if self.error is not None:
            return f"error law {self.error}"
        if self.std_error is not None:
            return "normal approximation"
        return "none"

    # SciPy's result objects call the released number ``statistic``; mirror that name.
    @property
    def statistic(self) -> float:
        """The released value, :attr:`value` (the name of SciPy's result objects).

        Examples
        --------
        >>> fedustat.kendalltau([1, 2, 3, 4, 5], [1, 3, 2, 5, 4], epsilon=math.inf).statistic
        0.6
        """
        return self.value

    def with_cost(self, cost: Cost) -> Estimate:
        """This release with its measured cost replaced by ``cost``.

        Parameters
        ----------
        cost:
            The :class:`~fedustat.cost.Cost` to carry.

        Returns
        -------
        Estimate

        Examples
        --------
        >>> est = fedustat.Estimate(1.08, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> est.with_cost(fedustat.Cost(bits_per_party=64.0, rounds=1)).cost.bits_per_party
        64.0
        """
        return replace(self, cost=cost)

    # ------------------------------------------------------------ a number's behaviour

    def __float__(self) -> float:
        return float(self.value)

    def __format__(self, spec: str) -> str:
        # An empty spec keeps f"{est}" == str(est); any other spec formats the value.
        return str(self) if not spec else format(float(self.value), spec)

    def __round__(self, ndigits: int | None = None) -> float | int:
        return round(float(self.value), ndigits)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        # NumPy 2 protocol: a release has no array to share, so copy=False cannot be met.
        if copy is False:
            raise ValueError("an Estimate holds a float, not an array: np.asarray(est) "
                             "always makes a new 0-d array, so copy=False is impossible")
        return np.asarray(float(self.value), dtype=dtype)

    def __eq__(self, other: object) -> bool:
        # Numeric, as a float's: a release equals any number (or release) of its value.
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) == number

    def __hash__(self) -> int:
        # Equal numbers hash alike (Python's numeric hash), so hash the value; a NaN value
        # equals nothing, so it hashes by identity (stable for this object).
        value = float(self.value)
        return object.__hash__(self) if math.isnan(value) else hash(value)

    def same_release(self, other: object) -> bool:
        """Whether ``other`` is the same release: the same type and every field equal
        (``==`` compares values only, as for floats).

        Parameters
        ----------
        other:
            Any object.

        Returns
        -------
        bool

        Examples
        --------
        >>> est = fedustat.Estimate(0.8, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> other = fedustat.Estimate(0.8, "auc", "exact", fedustat.PrivacyGuarantee.none())
        >>> est == other, est.same_release(other), est.same_release(est)
        (True, False, True)
        """
        return type(self) is type(other) and _fields(self) == _fields(other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __lt__(self, other: object) -> bool:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) < number

    def __le__(self, other: object) -> bool:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) <= number

    def __gt__(self, other: object) -> bool:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) > number

    def __ge__(self, other: object) -> bool:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) >= number

    def __add__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) + number

    def __radd__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else number + float(self.value)

    def __sub__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) - number

    def __rsub__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else number - float(self.value)

    def __mul__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) * number

    def __rmul__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else number * float(self.value)

    def __truediv__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) / number

    def __rtruediv__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else number / float(self.value)

    def __neg__(self) -> float:
        return -float(self.value)

    def __pos__(self) -> float:
        return float(self.value)

    def __abs__(self) -> float:
        return abs(float(self.value))

    def __int__(self) -> int:
        return int(float(self.value))  # truncation toward zero, as int(float)

    def __trunc__(self) -> int:
        return math.trunc(float(self.value))

    def __floor__(self) -> int:
        return math.floor(float(self.value))

    def __ceil__(self) -> int:
        return math.ceil(float(self.value))

    def __complex__(self) -> complex:
        return complex(float(self.value))

    def __pow__(self, other: object, modulo: None = None) -> float | complex:
        number = _as_number(other)
        if number is None or modulo is not None:  # three-argument pow is for integers
            return NotImplemented
        return float(self.value) ** number

    def __rpow__(self, other: object) -> float | complex:
        number = _as_number(other)
        return NotImplemented if number is None else number ** float(self.value)

    def __floordiv__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) // number

    def __rfloordiv__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else number // float(self.value)

    def __mod__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else float(self.value) % number

    def __rmod__(self, other: object) -> float:
        number = _as_number(other)
        return NotImplemented if number is None else number % float(self.value)

    def __divmod__(self, other: object) -> tuple[float, float]:
        number = _as_number(other)
        return NotImplemented if number is None else divmod(float(self.value), number)

    def __rdivmod__(self, other: object) -> tuple[float, float]:
        number = _as_number(other)
        return NotImplemented if number is None else divmod(number, float(self.value))

    # The rest of the numbers.Real interface, as a float's.

    @property
    def real(self) -> float:
        """The value as a float, as ``float.real``.

        Examples
        --------
        >>> est = fedustat.Estimate(2.5, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> est.real, est.imag
        (2.5, 0.0)
        """
        return float(self.value)

    @property
    def imag(self) -> float:
        """0.0, as ``float.imag``.

        Examples
        --------
        >>> est = fedustat.Estimate(2.5, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> est.imag
        0.0
        """
        return 0.0

    def conjugate(self) -> float:
        """The value as a float, as ``float.conjugate()``.

        Returns
        -------
        float

        Examples
        --------
        >>> est = fedustat.Estimate(2.5, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> est.conjugate()
        2.5
        """
        return float(self.value)

    def as_integer_ratio(self) -> tuple[int, int]:
        """The value's exact ratio, as ``float.as_integer_ratio()`` (what
        :func:`statistics.mean` sums exactly).

        Returns
        -------
        tuple of int
            ``(numerator, denominator)``.

        Examples
        --------
        >>> est = fedustat.Estimate(2.5, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> est.as_integer_ratio()
        (5, 2)
        """
        return float(self.value).as_integer_ratio()

    def is_integer(self) -> bool:
        """Whether the value is integral, as ``float.is_integer()``.

        Returns
        -------
        bool

        Examples
        --------
        >>> est = fedustat.Estimate(2.5, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> est.is_integer(), int(est), est // 1, est ** 2
        (False, 2, 2.0, 6.25)
        """
        return float(self.value).is_integer()

    # ---------------------------------------------------------------- serialisation

    def to_dict(self, confidence_level: float = 0.95) -> dict[str, Any]:
        """The release as plain, JSON-serialisable Python values.

        Only what an :class:`Estimate` holds goes in, and it holds only DP outputs and
        public configuration (see the class docstring), so this adds nothing private. The
        interval is at ``confidence_level`` (``None`` where no error bar is known); the
        guarantee, costs and diagnostics become dicts, lists, strings and numbers.

        Parameters
        ----------
        confidence_level:
            Level of the ``interval`` and ``raw_interval`` entries, in (0, 1).

        Returns
        -------
        dict
            ``quantity``, ``protocol``, ``value``, ``std_error``, ``confidence_level``,
            ``interval``, ``interval_method``, ``raw_value``, ``raw_interval``,
            ``clip_range``, ``statistic_map`` (the released U, its range and the map,
            or None), ``guarantee``, ``noise``, ``cost`` and ``diagnostics``.

        Examples
        --------
        >>> est = fedustat.Estimate(1.08, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> out = est.clipped(0.0, 1.0).to_dict()
        >>> out["value"], out["raw_value"], out["clip_range"], out["guarantee"]["epsilon"]
        (1.0, 1.08, [0.0, 1.0], 1.0)
        """
        try:
            interval: list[float] | None = list(self.confidence_interval(confidence_level))
            raw_interval: list[float] | None = list(self.raw_interval(confidence_level))
        except ValueError:
            if not 0.0 < confidence_level < 1.0:
                raise
            interval = raw_interval = None
        return {
            "quantity": self.quantity,
            "protocol": self.protocol,
            "value": float(self.value),
            "std_error": None if self.std_error is None else float(self.std_error),
            "confidence_level": float(confidence_level),
            "interval": interval,
            "interval_method": self.interval_method,
            "raw_value": self.raw_value,
            "raw_interval": raw_interval,
            "clip_range": None if self.clip_range is None else list(self.clip_range),
            "statistic_map": None if self.statistic_map is None else {
                "u_value": float(self.statistic_map.u_value),
                "u_range": list(self.statistic_map.u_range),
                "formula": self.statistic_map.formula},
            "guarantee": _plain(self.privacy),
            "noise": self.noise,
            "cost": _plain(self.cost),
            "diagnostics": _plain(self.diagnostics),
        }

    def to_json(self, confidence_level: float = 0.95, **kwargs: Any) -> str:
        """:meth:`to_dict` as a JSON string; ``kwargs`` go to :func:`json.dumps`
        (an infinite epsilon is written ``Infinity``, as Python's json does).

        Parameters
        ----------
        confidence_level:
            As for :meth:`to_dict`.
        **kwargs:
            Passed to :func:`json.dumps` (``indent``, ``sort_keys``, ...).

        Returns
        -------
        str

        Examples
        --------
        >>> est = fedustat.Estimate(1.08, "auc", "central-laplace",
        ...                         fedustat.PrivacyGuarantee(1.0), std_error=0.05)
        >>> est.to_json()[:60]
        '{"quantity": "auc", "protocol": "central-laplace", "value": '
        """
        return json.dumps(self.to_dict(confidence_level), **kwargs)

    def __str__(self) -> str:
        se = "" if self.std_error is None else f" ± {self.std_error:.3g} (s.e.)"
        grade = {"simulation": "simulation noise: a study, not a protection",
                 "deployment": "deployment noise", "none": "no noise"}[self.noise]
        return (f"{self.quantity} = {self.value:.6g}{se} [{self.protocol}; {self.privacy}; "
                f"{grade}; {self.cost.bits_per_party:g} bits/party]")


# A release is a real number for numeric code (isinstance checks, statistics, NumPy);
# registration adds no methods: the class defines what numbers.Real asks for above.
numbers.Real.register(Estimate)


def _check_range(bounds: Any) -> tuple[float, float]:
    try:
        low, high = (float(b) for b in bounds)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"a valid range must be a pair (low, high) of numbers, got "
                        f"{bounds!r}") from exc
    if math.isnan(low) or math.isnan(high) or not low <= high:
        raise ValueError(f"a valid range needs low <= high, got ({low}, {high})")
    return low, high


def _as_number(other: object) -> float | None:
    """``other`` as a float when it is a real number or a release, else None."""
    if isinstance(other, Estimate):
        return float(other.value)
    if isinstance(other, numbers.Real):
        return float(other)
    return None


def _fields(estimate: Estimate) -> tuple[Any, ...]:
    return tuple(getattr(estimate, f.name) for f in dataclasses.fields(estimate))


def _plain(obj: Any) -> Any:
    """``obj`` as JSON-ready Python values (dataclasses and mappings become dicts)."""
    if isinstance(obj, Enum):  # before str: a StrEnum is a str, yet no JSON-native one
        return _plain(obj.value)
    if obj is None or type(obj) in (bool, str):
        return obj
    if isinstance(obj, bool | str):
        return bool(obj) if isinstance(obj, bool) else str(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        # Before numbers.Real: a nested release (a Real) keeps its fields, not its value.
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        return _plain(obj.item())
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [_plain(v) for v in obj]
    return str(obj)


class DropoutRule(NamedTuple):
    """Whether a round's server step may run on the rows of the parties that answered.

    ``proceed``: the step may run without the silent parties; ``reason``: why (or why
    not), stated in the release's diagnostics or in the error that stops the run.
    """

    proceed: bool
    reason: str


def _recording_arguments(init: Any) -> Any:
    """``init`` that first records the arguments it is called with (``_arguments``).

    Only the outermost constructor records: a subclass calling ``super().__init__`` with
    derived values does not overwrite what its caller gave.
    """
    signature = inspect.signature(init)

    @functools.wraps(init)
    def recording(self: Any, *args: Any, **kwargs: Any) -> None:
        if "_arguments" not in self.__dict__:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            given = dict(bound.arguments)
            given.pop(next(iter(signature.parameters)))
            for name, parameter in signature.parameters.items():
                if parameter.kind is inspect.Parameter.VAR_KEYWORD:
                    given.update(given.pop(name, {}))
            self.__dict__["_arguments"] = given
        init(self, *args, **kwargs)

    recording._records_arguments = True  # type: ignore[attr-defined]
    return recording


class Protocol(ABC):
    """A protocol as pure steps. Subclasses name their paper, section and equations.

    The runtime drives it like this::

        party_state = protocol.init_parties(data, parties)
        server_state = protocol.init_server(n_parties)
        to_parties = None
        while True:
            party_state, to_server = protocol.party_step(party_state, to_parties, rng)
            server_state, out = protocol.server_step(server_state, to_server, rng)
            if isinstance(out, Estimate): break
            to_parties = out

    ``rng`` in a party step is that batch's randomness (a party's own coins); in the
    server step it is the server's. Steps must not keep hidden state outside the state
    objects they return.

    A party step that returns a message to parties (:attr:`Message.is_peer`) starts a
    relay round: the transport delivers its rows to the destination parties, whose next
    party step receives them as ``inbox``, and the server step does not run. Every batch
    must then return a message to parties (possibly with no rows).
    """

    name: str = "protocol"

    #: The fields of this protocol's :class:`Estimate` that may depend on the private data:
    #: its DP outputs and what is computed from them alone, as ``fnmatch`` patterns over
    #: dotted paths (``"diagnostics.u_statistic"``). Every other field is public
    #: configuration; ``tests/test_release_privacy.py`` runs each protocol on neighbouring
    #: data sets with one seed and fails on any other field that differs.
    released_fields: ClassVar[tuple[str, ...]] = ("value", "std_error", "error", "error.*",
                                                  "unclipped")
    #: The DP outputs of a statistic released as a monotone map of a released U
    #: (:class:`StatisticMap`), for the protocols that release a kernel's statistic.
    statistic_map_fields: ClassVar[tuple[str, ...]] = (
        "statistic_map.u_value", "statistic_map.u_error", "statistic_map.u_error.*")
    #: Fields that depend on public randomness only (a sampled design, a public coin, a
    #: simulated client split): they change with the seed, never with the data.
    public_coin_fields: ClassVar[tuple[str, ...]] = ()
    #: In a networked run, whether a process holding several rows is one party (a client
    #: holding samples, as in FedAUC) rather than one party per row (one record each).
    silo_is_one_party: ClassVar[bool] = False

    def configure(self, n_rows: int) -> Protocol:
        """This protocol set up with the run's public size (default: unchanged)."""
        return self

    def planned_guarantee(self, n_rows: int | None = None) -> PrivacyGuarantee:
        """The guarantee a run over ``n_rows`` records will deliver, from the public
        configuration alone, so that a budget can be checked (and a budget file reserved)
        before any party sends anything.

        Default: the protocol's ``guarantee`` once :meth:`configure` has set it up for
        ``n_rows`` (None: the size is not known yet; the guarantee must not need it). A
        protocol whose guarantee depends on more (ghazi-shuffle: its delta on the number
        of parties) overrides this; one with no ``guarantee`` must.
        """
        configured = self if n_rows is None else self.configure(n_rows)
        guarantee = getattr(configured, "guarantee", None)
        if not isinstance(guarantee, PrivacyGuarantee):
            raise NotImplementedError(
                f"protocol {self.name!r} does not state its guarantee before it runs: give "
                "it a guarantee property or a planned_guarantee method")
        return guarantee

    def assign_parties(self, records: np.ndarray, rng: np.random.Generator) -> np.ndarray | None:
        """Party id of each row when a party holds several rows (e.g. a client's samples).

        It describes how the data are spread over the parties in a simulation (an IID or
        a by-score split into K clients, from the protocol's configuration), not a step
        of the protocol. ``None`` (the default): one party per row.
        """
        return None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Every party validates its own records before encoding them, whatever transport
        # runs it; a protocol adapts what is checked through check_records, never by
        # replacing the step that runs the check.
        if "init_parties" in cls.__dict__:
            raise TypeError(f"{cls.__name__} overrides init_parties; implement encode_parties "
                            "(and check_records for protocol-specific public domains)")
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_records_arguments", False):
            cls.__init__ = _recording_arguments(init)  # type: ignore[method-assign]

    @property
    def public_arguments(self) -> dict[str, Any]:
        """The arguments this protocol was built with, defaults included (``k``,
        ``bounds``, the kernel, ``epsilon``...): its public configuration as its user gave
        it, which server and parties of a networked run compare option by option."""
        return dict(self.__dict__.get("_arguments", {}))

    def init_parties(self, data: np.ndarray, parties: np.ndarray) -> Any:
        """State of a batch of parties holding ``data``; ``parties`` is each row's party id.

        The party's own step: the records are checked against the protocol's public
        domain (:meth:`check_records`: shape, finiteness, labels, declared bounds and
        domains) and then encoded (:meth:`encode_parties`). Every transport calls this, so
        every transport enforces the public bounds. With one party per row the ids are
        distinct; a party holding several rows appears on each of them.
        """
        records = self.check_records(data)
        return self.encode_parties(records, np.asarray(parties))

    def check_records(self, data: Any) -> np.ndarray:
        """A party's records checked against the public domain; returns a 2-D float array.

        Default: the protocol's kernel's :meth:`~fedustat.stats.kernels.Kernel.check_records`
        (labels, the kernel's declared bounds), or finite floats when it has no kernel.
        Protocols with further public bounds or domains (quantization, fixed-point
        encodings) extend it.
        """
        kernel = getattr(self, "kernel", None)
        if kernel is not None:
            return kernel.check_records(data)
        with RecordCheck("records that are not finite numbers"):
            arr = as_float_array(data, "data", ndim=(1, 2))
        return arr[:, None] if arr.ndim == 1 else arr

    # ------------------------------------------------------------------ randomness

    @property
    def is_private(self) -> bool:
        """Whether a run draws private values (noise, shares, masks, randomized reports):
        False only for a release without privacy (the exact protocol, epsilon = inf)."""
        guarantee = getattr(self, "guarantee", None)
        return guarantee is None or guarantee.model is not PrivacyModel.NONE

    @property
    def randomness_grade(self) -> str:
        """Where this protocol's private draws come from: ``"deployment"`` (the OS CSPRNG
        and the fixed-work samplers of :mod:`fedustat.privacy.samplers`), ``"simulation"``
        (the step's seeded NumPy generator) or ``"none"`` (no privacy, nothing private is
        drawn). The release is labelled with it."""
        if not self.is_private:
            return "none"
        attributes = vars(self)
        if "randomness" in attributes:
            return "deployment" if attributes["randomness"] == "os" else "simulation"
        noise = attributes.get("noise")
        return "deployment" if getattr(noise, "kind", None) == "deployment" else "simulation"

    def with_deployment_randomness(self) -> Protocol:
        """A copy of this protocol that draws every private value (noise, shares, masks,
        keys, randomized reports) from the operating system's CSPRNG.

        Protocols name their source in one of two public attributes: ``randomness``
        (``"os"``, ``"simulation"`` or None until a run decides; the federated ECDF
        releases, whose ``noise`` is a shared tree noise) or else ``noise`` (a
        :class:`~fedustat.privacy.noise.NoiseSource`; None until a run decides). A
        protocol with neither cannot run on deployment randomness and is refused.
        """
        out = copy.copy(self)
        attributes = vars(out)
        if "randomness" in attributes:
            out.randomness = "os"  # type: ignore[attr-defined]
        elif "noise" in attributes:
            out.noise = DeploymentNoise()  # type: ignore[attr-defined]
        else:
            raise TypeError(f"protocol {self.name!r} names no source of its private draws "
                            "(a 'noise' or 'randomness' attribute), so it cannot run on "
                            "deployment randomness")
        return out

    def for_run(self, rng: Any) -> Protocol:
        """The protocol a transport runs when the caller gave ``rng``.

        Without a seed (``rng=None``) a private protocol whose source is still undecided
        (``noise=None`` or ``randomness=None``) draws from the OS CSPRNG: randomness that
        touches people's records is deployment-grade unless a seed asks for a
        reproducible study explicitly. A source the caller chose (a
        :class:`~fedustat.privacy.noise.NoiseSource`, ``randomness="simulation"``) is
        kept; a seed leaves an undecided source to the steps' seeded generators.
        """
        attributes = vars(self)
        source = "randomness" if "randomness" in attributes else "noise"
        undecided = source in attributes and attributes[source] is None
        if rng is None and self.is_private and undecided:
            return self.with_deployment_randomness()
        return self

    def service_roles(self) -> tuple[str, ...]:
        """The record-less service roles this protocol needs (default: none)."""
        return ()

    def init_service(self, role: str, n_parties: int) -> Any:
        """The initial state of service ``role`` in a run of ``n_parties`` data parties."""
        raise ValueError(f"protocol {self.name!r} has no service role {role!r}")

    def service_step(self, role: str, state: Any, inbox: Message | None,
                     rng: np.random.Generator) -> tuple[Any, Message | None]:
        """One round of service ``role``: its new state and its message, or ``None``."""
        raise ValueError(f"protocol {self.name!r} has no service role {role!r}")

    @abstractmethod
    def encode_parties(self, records: np.ndarray, parties: np.ndarray) -> Any:
        """State of a batch of parties holding the checked ``records`` (see
        :meth:`init_parties`); rows of one party are contiguous."""

    @abstractmethod
    def init_server(self, n_parties: int) -> Any:
        """The aggregator's initial state."""

    @abstractmethod
    def party_step(self, state: Any, inbox: Message | None,
                   rng: np.random.Generator) -> tuple[Any, Message]:
        """One round of the parties in a batch."""

    def copy_party_state(self, state: Any) -> Any:
        """A copy of a batch's state that :meth:`party_step` may change without changing
        ``state``: a transport that must be able to run a step again from its input (the
        distributed engine, whose tasks may be retried) steps the copy. Default: a deep
        copy. A protocol whose states hold large arrays that its steps never write in
        place may share them (U-MPC's dealt material).
        """
        return copy.deepcopy(state)

    @abstractmethod
    def server_step(self, state: Any, inbox: Message,
                    rng: np.random.Generator) -> tuple[Any, Message | Estimate]:
        """One round of the aggregator: a reply to the parties, or the final estimate."""

    def collection_rule(self) -> DropoutRule:
        """May this protocol collect one-shot reports in a window?

        In a collection window (:mod:`fedustat.runtime.network.collect`) each device sends
        one report whenever it is online and the server releases over the reports it
        accepted by the close. That is this protocol's run over those parties only when a
        party's first step is its whole contribution and needs nothing from the server
        (no check-in round, no n fixed before it), the first server step releases, and
        the estimator takes its n from the reports it receives. Default: no (a protocol
        with rounds keeps them).
        """
        return DropoutRule(False, f"protocol {self.name!r} needs more than one report per "
                                  "party (it runs in rounds)")

    def dropout_rule(self, state: Any, round_index: int) -> DropoutRule:
        """May round ``round_index``'s server step run without parties that fell silent?

        A networked server asks this when a round's deadline passes (or a waiting
        party's connection closes) before every silo has answered; ``state`` is the
        server state the step would receive. A protocol answers ``proceed`` only where
        the step's estimator takes its n from the rows it receives, each received row's
        guarantee holds without the others, and the state keeps nothing from earlier
        rounds that the step would combine with the missing parties' rows; the release
        is then the protocol's release over the parties that answered. Default: never
        (a step may rely on a public n fixed before the round, or on shares that need
        every member).
        """
        return DropoutRule(False, f"protocol {self.name!r} has no round that may go on "
                                  "without a party")


def normal_std_error(variance: float) -> float:
    """Standard error from a variance, refusing negative values from rounding."""
    if variance < 0 and variance > -1e-15:
        variance = 0.0
    if not math.isfinite(variance) or variance < 0:
        raise ValueError(f"variance must be finite and >= 0, got {variance}")
    return math.sqrt(variance)


class StatisticRelease(NamedTuple):
    """The reported statistic at a released U (:func:`statistic_release`): the fields of
    its :class:`Estimate`, and the slope ``|d statistic / d U|`` used for them."""

    value: float
    std_error: float | None
    error: ErrorDistribution | None
    statistic_map: StatisticMap | None
    slope: float

    def estimate(self, kernel: Kernel, public: PublicData, *, protocol: str,
                 privacy: PrivacyGuarantee, cost: Cost,
                 diagnostics: Mapping[str, Any]) -> Estimate:
        """The protocol's :class:`Estimate` of this statistic, clipped into the kernel's
        statistic range (:func:`in_statistic_range`): the last part of a server step's
        release, so a release is in range on every transport."""
        estimate = Estimate(value=float(self.value), quantity=kernel.name, protocol=protocol,
                            privacy=privacy, std_error=self.std_error, error=self.error,
                            statistic_map=self.statistic_map, cost=cost,
                            diagnostics=diagnostics)
        return in_statistic_range(estimate, kernel, public)


def statistic_release(kernel: Kernel, u: float, u_error: ErrorDistribution | None,
                      public: PublicData) -> StatisticRelease:
    """The reported statistic of ``kernel`` at a released U, with its error bar.

    ``u_error`` is the law of ``U_hat - U`` (None where the protocol has none), ``public``
    n and the public columns. An affine map of U (the identity, AUC, Mann-Whitney, VUS)
    carries U's law scaled by its slope exactly. A monotone, non-affine map (the kernel's
    ``monotone_u_range``: Rényi-2's ``-ln U``) is applied to U clipped into the range where
    it is finite, its interval is U's mapped through it (:class:`StatisticMap`) and its
    standard error the delta-method one at the clipped U (first order). Other maps (user
    maps) use the delta method at U. Everything here reads U, its public law and public
    data only: post-processing.

    Parameters
    ----------
    kernel:
        The kernel whose statistic is released.
    u:
        The released U.
    u_error:
        The law of ``U_hat - U``, or None.
    public:
        n and the public columns.

    Returns
    -------
    StatisticRelease
    """
    if kernel.monotone_u_range is not None and u_error is not None:
        low, high = kernel.monotone_u_range(public)
        clipped = min(max(float(u), low), high)
        slope = kernel.statistic_slope(clipped, public)
        statistic_map = StatisticMap(float(u), u_error, (low, high),
                                     kernel.description or kernel.name,
                                     partial(kernel.statistic, public=public))
        std_error = u_error.std * slope if math.isfinite(slope) else None
        return StatisticRelease(kernel.statistic(clipped, public), std_error, None,
                                statistic_map, slope)
    value = kernel.statistic(float(u), public)
    slope = kernel.statistic_slope(float(u), public)
    if u_error is None or not math.isfinite(slope):
        return StatisticRelease(value, None, None, None, slope)
    error = u_error.scaled(slope)
    return StatisticRelease(value, error.std, error, None, slope)


def in_statistic_range(estimate: Estimate, kernel: Kernel,
                       public: PublicData | None = None) -> Estimate:
    """``estimate`` clipped into ``kernel``'s statistic range (post-processing; the raw
    release kept as :attr:`Estimate.raw_value`), or unchanged where no range is known.

    Every private protocol's release passes through this in its own server step, so
    every transport (simulator, network, Flower, engine) releases values in range.
    ``public``: n and the public columns, for ranges that depend on them (Mann-Whitney,
    Rényi-2); None gives the widest range.
    """
    bounds = kernel.statistic_range(public)
    return estimate if bounds is None else estimate.clipped(*bounds)
