"""Protocols by name, so the API and the command line can pick one with a string.

A factory takes the kernel, the budget and protocol-specific keyword parameters and
returns a :class:`~fedustat.protocols.base.Protocol`. Each protocol module registers its
own factories when it is imported; ``fedustat.protocols`` imports them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedustat.privacy.guarantee import PrivacyModel
from fedustat.protocols.base import Protocol
from fedustat.stats.kernels import Kernel

Factory = Callable[..., Protocol]


@dataclass(frozen=True)
class ProtocolEntry:
    name: str
    factory: Factory
    model: PrivacyModel
    summary: str
    source: str


_REGISTRY: dict[str, ProtocolEntry] = {}


def register(name: str, factory: Factory, *, model: PrivacyModel, summary: str,
             source: str) -> None:
    """Make ``factory`` available as ``protocol=name``."""
    if name in _REGISTRY and _REGISTRY[name].factory is not factory:
        raise ValueError(f"a protocol named {name!r} is already registered")
    _REGISTRY[name] = ProtocolEntry(name, factory, model, summary, source)


def available() -> list[ProtocolEntry]:
    """Registered protocols, sorted by name."""
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def factory(name: str) -> Factory:
    """The factory registered as ``name``."""
    return _entry(name).factory


def _entry(name: str) -> ProtocolEntry:
    try:
        return _REGISTRY[name]
    except KeyError:
        names = ", ".join(sorted(_REGISTRY)) or "(none)"
        raise ValueError(f"unknown protocol {name!r}; available protocols: {names}") from None


def make(name: str, kernel: Kernel, *, epsilon: float, delta: float = 0.0,
         **params: Any) -> Protocol:
    """Build the protocol registered as ``name``."""
    return _entry(name).factory(kernel, epsilon=epsilon, delta=delta, **params)
