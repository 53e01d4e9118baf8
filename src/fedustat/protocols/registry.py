"""Protocols by name, so the API and the command line can pick one with a string.

A factory takes the kernel, the budget and protocol-specific keyword parameters and
returns a :class:`~fedustat.protocols.base.Protocol`. Each protocol module registers its
own factories when it is imported; ``fedustat.protocols`` imports them all.

Curve releases (the federated ECDF of 003 Sec. 4) are protocols too, but they release a
curve over a public grid of one column, not a U-statistic of a kernel: they live in a
separate *curve registry* (:func:`register_curve`, :func:`available_curves`,
:func:`make_curve`) whose factories take the budget and the curve's parameters and no
kernel. One name space covers both registries, so a name picks one protocol.
"""

from __future__ import annotations

import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedustat._validation import check_budget, check_delta
from fedustat.privacy.guarantee import PrivacyModel
from fedustat.protocols.base import Protocol
from fedustat.stats.kernels import Kernel

Factory = Callable[..., Protocol]


@dataclass(frozen=True)
class ProtocolEntry:
    """A registered protocol: its name, factory, privacy model and sources.

    Parameters
    ----------
    name:
        The name a caller passes as ``protocol=``.
    factory:
        Builds the protocol (see the module docstring).
    model:
        The :class:`~fedustat.privacy.guarantee.PrivacyModel` of its releases.
    summary:
        One line on what it does.
    source:
        Where its method comes from (paper file and section, or a published reference).

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> entry = registry.available()[0]
    >>> entry.name, entry.model.value
    ('central-laplace', 'central')
    """

    name: str
    factory: Factory
    model: PrivacyModel
    summary: str
    source: str


_REGISTRY: dict[str, ProtocolEntry] = {}


def register(name: str, factory: Factory, *, model: PrivacyModel, summary: str,
             source: str) -> None:
    """Make ``factory`` available as ``protocol=name``.

    Parameters
    ----------
    name:
        The protocol's name; taken by another factory (or by a curve release) is refused.
    factory:
        ``factory(kernel, *, epsilon, delta, **params)`` returning the protocol.
    model:
        The privacy model of its releases.
    summary, source:
        One line on what it does, and where its method comes from.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> entry = registry.available()[0]
    >>> registry.register(entry.name, entry.factory, model=entry.model,
    ...                   summary=entry.summary, source=entry.source)  # same factory: no-op
    >>> registry.register("exact", entry.factory, model=entry.model, summary="",
    ...                   source="")
    Traceback (most recent call last):
        ...
    ValueError: a protocol named 'exact' is already registered
    """
    if (name in _REGISTRY and _REGISTRY[name].factory is not factory) or name in _CURVES:
        raise ValueError(f"a protocol named {name!r} is already registered")
    _REGISTRY[name] = ProtocolEntry(name, factory, model, summary, source)


def available() -> list[ProtocolEntry]:
    """Registered protocols, sorted by name.

    Returns
    -------
    list of ProtocolEntry
        One entry per U-statistic protocol.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> [entry.name for entry in registry.available()][:3]
    ['central-laplace', 'exact', 'fedauc-adaptive']
    """
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def factory(name: str) -> Factory:
    """The factory registered as ``name``.

    Parameters
    ----------
    name:
        A registered protocol name (an unknown one is refused, listing those there are).

    Returns
    -------
    Callable
        ``factory(kernel, *, epsilon, delta, **params)``.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> from fedustat.stats.kernels import auc_kernel
    >>> registry.factory("exact")(auc_kernel(), epsilon=math.inf).name
    'exact'
    """
    return _entry(name).factory


def _entry(name: str) -> ProtocolEntry:
    try:
        return _REGISTRY[name]
    except KeyError:
        names = ", ".join(sorted(_REGISTRY)) or "(none)"
        raise ValueError(f"unknown protocol {name!r}; available protocols: {names}") from None


# ------------------------------------------------------------------ curve releases

_CURVES: dict[str, ProtocolEntry] = {}


def register_curve(name: str, factory: Factory, *, model: PrivacyModel, summary: str,
                   source: str) -> None:
    """Make the curve release ``factory(epsilon=..., **params)`` available as ``name``.

    Parameters
    ----------
    name:
        The release's name; taken by another factory (or by a protocol) is refused.
    factory:
        ``factory(*, epsilon, **params)`` returning the curve release.
    model:
        The privacy model of its releases.
    summary, source:
        One line on what it does, and where its method comes from.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> entry = registry.available_curves()[0]
    >>> registry.register_curve("exact", entry.factory, model=entry.model, summary="",
    ...                         source="")
    Traceback (most recent call last):
        ...
    ValueError: a protocol named 'exact' is already registered
    """
    if (name in _CURVES and _CURVES[name].factory is not factory) or name in _REGISTRY:
        raise ValueError(f"a protocol named {name!r} is already registered")
    _CURVES[name] = ProtocolEntry(name, factory, model, summary, source)


def available_curves() -> list[ProtocolEntry]:
    """Registered curve releases, sorted by name.

    Returns
    -------
    list of ProtocolEntry
        One entry per curve release.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> [entry.name for entry in registry.available_curves()]
    ['ecdf-fss', 'ecdf-secagg']
    """
    return [_CURVES[k] for k in sorted(_CURVES)]


def is_curve(name: str) -> bool:
    """Whether ``name`` is a registered curve release (not a U-statistic protocol).

    Parameters
    ----------
    name:
        Any name.

    Returns
    -------
    bool
        True for a curve release.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> registry.is_curve("ecdf-secagg"), registry.is_curve("umpc")
    (True, False)
    """
    return name in _CURVES


def _curve_entry(name: str) -> ProtocolEntry:
    try:
        return _CURVES[name]
    except KeyError:
        names = ", ".join(sorted(_CURVES)) or "(none)"
        raise ValueError(f"unknown curve release {name!r}; available curve releases: "
                         f"{names}") from None


def curve_parameters(name: str) -> dict[str, inspect.Parameter]:
    """The parameters the curve release ``name`` takes (besides its budget).

    Parameters
    ----------
    name:
        A registered curve release (an unknown one is refused, listing those there are).

    Returns
    -------
    dict of str to inspect.Parameter
        Its keyword parameters, in the factory's order.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> list(registry.curve_parameters("ecdf-secagg"))[:3]
    ['thresholds', 'query', 'n_servers']
    """
    sig = inspect.signature(_curve_entry(name).factory)
    return {p: v for p, v in sig.parameters.items()
            if p not in _CURVE_BUDGET and v.kind is not inspect.Parameter.VAR_KEYWORD}


def check_curve_parameters(name: str, params: Mapping[str, Any]) -> None:
    """:func:`check_parameters` for a curve release: unknown keys, wrong types and
    absurd sizes are refused naming the release and the parameter.

    Parameters
    ----------
    name:
        A registered curve release.
    params:
        The keyword parameters to check.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> registry.check_curve_parameters("ecdf-secagg", {"n_servers": 3})
    >>> registry.check_curve_parameters("ecdf-secagg", {"n_servers": 2**20})
    Traceback (most recent call last):
        ...
    ValueError: parameter 'n_servers' of protocol 'ecdf-secagg' is 1048576, above the limit 1024 ...
    """
    _check_entry(_curve_entry(name), curve_parameters(name), params, _CURVE_BUDGET)


def make_curve(name: str, *, epsilon: float, **params: Any) -> Protocol:
    """Build the curve release registered as ``name`` (parameters checked first).

    Parameters
    ----------
    name:
        A registered curve release.
    epsilon:
        The release's budget.
    **params:
        Its parameters (:func:`curve_parameters`).

    Returns
    -------
    Protocol
        The curve release, ready to run.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> release = registry.make_curve("ecdf-secagg", epsilon=1.0,
    ...                               thresholds=[0.25, 0.5, 0.75, 1.0])
    >>> release.name
    'ecdf-pointwise-secagg'
    """
    check_curve_parameters(name, params)
    return _curve_entry(name).factory(epsilon=check_budget(epsilon, allow_inf=True), **params)


#: Largest value accepted for a size parameter (grid cells, tree leaves, permutations,
#: messages, clients...). A protocol allocates arrays of about this many entries per
#: party or on the server, so a larger value is refused before any allocation rather
#: than ending in a MemoryError; each limit keeps one such array within a few hundred MB.
SIZE_LIMITS: dict[str, int] = {
    "k": 2**20, "d": 2**24, "P": 2**16, "n_messages": 2**16, "edges": 2**31,
    "n_clients": 2**24, "n_samples": 2**31, "n_parties": 2**31, "dim": 2**16,
    "rank": 2**16, "max_pairs": 2**31, "max_evaluations": 2**31, "security_bits": 1024,
    "frac_bits": 62, "ring_bits": 128, "n_servers": 2**10, "contributors": 2**31,
}
#: Arguments every factory takes from the caller's budget, never as protocol parameters.
_BUDGET = ("kernel", "epsilon", "delta")
#: A curve release's budget: epsilon only (003's releases are pure eps-DP, no kernel).
_CURVE_BUDGET = ("epsilon",)


def parameters(name: str) -> dict[str, inspect.Parameter]:
    """The protocol parameters the factory of ``name`` takes (besides kernel and budget).

    Parameters
    ----------
    name:
        A registered protocol name.

    Returns
    -------
    dict of str to inspect.Parameter
        Its keyword parameters, in the factory's order.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> list(registry.parameters("central-laplace"))
    ['design', 'noise']
    """
    sig = inspect.signature(_entry(name).factory)
    return {p: v for p, v in sig.parameters.items()
            if p not in _BUDGET and v.kind is not inspect.Parameter.VAR_KEYWORD}


def takes(name: str, parameter: str) -> bool:
    """Whether the factory of ``name`` accepts the keyword ``parameter``.

    Parameters
    ----------
    name:
        A registered protocol name.
    parameter:
        A keyword.

    Returns
    -------
    bool
        True if the factory takes it.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> registry.takes("ldp-tree", "split"), registry.takes("ldp-tree", "design")
    (True, False)
    """
    return parameter in parameters(name)


def _hints(factory: Factory) -> dict[str, Any]:
    try:
        return typing.get_type_hints(factory)
    except Exception:  # an annotation that cannot be resolved is simply not checked
        return {}


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the annotation ``hint`` (numbers, strings, literals, classes).

    Integers are accepted where a float is expected, NumPy scalars like Python ones,
    booleans only where ``bool`` is; anything this cannot judge is accepted.
    """
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_matches(value, h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return any(value == choice and type(value) is type(choice)
                   for choice in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool | np.bool_)
    if hint is int:
        return isinstance(value, int | np.integer) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float | np.integer | np.floating) \
            and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is not None:
        hint = origin
    return not isinstance(hint, type) or isinstance(value, hint)


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return " or ".join(_describe(h) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(c) for c in typing.get_args(hint))
    if hint is type(None):
        return "None"
    names = {bool: "True or False", int: "an integer", float: "a number", str: "a string"}
    if hint in names:
        return names[hint]
    return getattr(hint, "__name__", str(hint))


def _size_entries(value: Any) -> list[Any]:
    """The numbers in a size parameter (one value, or one per column as a list or dict)."""
    if isinstance(value, Mapping):
        return list(value.values())
    if isinstance(value, list | tuple | np.ndarray):
        return list(np.ravel(np.asarray(value, dtype=object)))
    return [value]


def check_parameters(name: str, params: Mapping[str, Any]) -> None:
    """Refuse protocol parameters the factory of ``name`` does not take, values of the
    wrong type, and absurd sizes, with a message naming the protocol and the parameter.

    Runs before the protocol is built, so nothing is allocated for a refused value.

    Parameters
    ----------
    name:
        A registered protocol name.
    params:
        The keyword parameters to check.

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> registry.check_parameters("central-laplace", {"grid": 3})
    Traceback (most recent call last):
        ...
    TypeError: protocol 'central-laplace' has no parameter 'grid'; its parameters are: design, noise
    """
    _check_entry(_entry(name), parameters(name), params, _BUDGET)


def _check_entry(entry: ProtocolEntry, accepted: Mapping[str, inspect.Parameter],
                 params: Mapping[str, Any], budget: tuple[str, ...]) -> None:
    name = entry.name
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD
                     for p in inspect.signature(entry.factory).parameters.values())
    for key in params:
        if key in budget:
            raise TypeError(f"{key} is an argument of its own, not a parameter of protocol "
                            f"{name!r}")
        if key not in accepted and not open_ended:
            listed = ", ".join(accepted) or "(none)"
            raise TypeError(f"protocol {name!r} has no parameter {key!r}; its parameters "
                            f"are: {listed}")
    hints = _hints(entry.factory)
    for key, value in params.items():
        if key in hints and not _matches(value, hints[key]):
            raise TypeError(f"parameter {key!r} of protocol {name!r} must be "
                            f"{_describe(hints[key])}, got {value!r}")
        if key in SIZE_LIMITS and value is not None:
            _check_size(name, key, value)
        if key.endswith("_seed") and isinstance(value, int | np.integer) and value < 0:
            raise ValueError(f"parameter {key!r} of protocol {name!r} must be a non-negative "
                             f"integer seed, got {value}")


def _check_size(name: str, key: str, value: Any) -> None:
    limit = SIZE_LIMITS[key]
    for entry in _size_entries(value):
        if entry is None:
            continue
        if isinstance(entry, bool) or not isinstance(entry, int | np.integer | float
                                                     | np.floating):
            raise TypeError(f"parameter {key!r} of protocol {name!r} must be an integer "
                            f"(or one per column), got {value!r}")
        if not math.isfinite(float(entry)) or float(entry) != int(entry):
            raise ValueError(f"parameter {key!r} of protocol {name!r} must be a whole "
                             f"number, got {entry!r}")
        if int(entry) > limit:
            raise ValueError(f"parameter {key!r} of protocol {name!r} is {int(entry)}, above "
                             f"the limit {limit} (fedustat.protocols.registry.SIZE_LIMITS); "
                             "such a size would not fit in memory")


def make(name: str, kernel: Kernel, *, epsilon: float, delta: float = 0.0,
         **params: Any) -> Protocol:
    """Build the protocol registered as ``name``.

    Parameters are checked first (:func:`check_parameters`): an unknown name, a value of
    the wrong type or a size above :data:`SIZE_LIMITS` is refused with a message that
    names the protocol and the parameter; so is a budget outside
    :func:`~fedustat._validation.check_budget`'s range or a delta outside [0, 1).

    Parameters
    ----------
    name:
        A registered protocol name.
    kernel:
        The :class:`~fedustat.stats.kernels.Kernel` to estimate.
    epsilon, delta:
        The release's budget.
    **params:
        The protocol's parameters (:func:`parameters`).

    Returns
    -------
    Protocol
        The protocol, ready to run (e.g. by :func:`fedustat.runtime.simulate.simulate`).

    Examples
    --------
    >>> from fedustat.protocols import registry
    >>> from fedustat.stats.kernels import auc_kernel
    >>> registry.make("central-laplace", auc_kernel(), epsilon=1.0).name
    'central-laplace'
    """
    check_parameters(name, params)
    # The budget is checked here for every protocol (a factory may use only part of it).
    eps, allowed = check_budget(epsilon, allow_inf=True), check_delta(delta)
    factory = _entry(name).factory
    protocol = factory(kernel, epsilon=eps, delta=allowed, **params)
    if allowed > 0.0:
        _refuse_unused_delta(name, protocol, lambda: factory(kernel, epsilon=eps, delta=0.0,
                                                             **params), allowed)
    return protocol


def _refuse_unused_delta(name: str, protocol: Protocol, without: Callable[[], Protocol],
                         delta: float) -> None:
    """A delta > 0 that changes nothing is refused: the same protocol built with delta = 0
    states the same pure epsilon-DP guarantee, so the caller would believe a delta was
    used or spent that the release ignores. A protocol that needs the delta for its
    parameters (a Gaussian mechanism, advanced composition, ghazi-shuffle's cap) refuses
    delta = 0 or states another guarantee, and keeps it."""
    try:
        planned = protocol.planned_guarantee(None)
        pure = without().planned_guarantee(None)
    except (NotImplementedError, TypeError, ValueError):
        return  # the delta is needed, or the guarantee waits for the run's size
    if planned.model is not PrivacyModel.NONE and planned.delta == 0.0 and pure == planned:
        raise ValueError(f"delta={delta!r}: {name} is pure epsilon-DP with these parameters "
                         "(its releases carry delta = 0) and would not use it; pass delta=0 "
                         "(the default), or a protocol that uses a delta (e.g. "
                         "fedauc-gaussian)")
