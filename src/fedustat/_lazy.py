"""Modules imported on first use.

Every networked party, Flower ClientApp and CLI call is a fresh Python process, and most
of them never touch most of SciPy: importing ``scipy.stats``, ``scipy.signal`` and
``scipy.optimize`` up front took about 0.6 s of the 1.2 s that ``import fedustat`` took on
a quiet core. A module-level ``sps = lazy_module("scipy.stats")`` keeps the call sites as
they were (``sps.norm.ppf(...)``) and imports the module the first time one of its names
is read.

The import itself is ``importlib.import_module``, which holds Python's import lock, so
threads (the gRPC server's) that reach a lazy module together import it once.

A long-lived process with deadlines (a networked server or party) calls
:func:`warm_up` when it starts: the modules are imported in a background thread while it
waits for the others to join, so the first release does not pay for them inside a stage
timeout.
"""

from __future__ import annotations

import importlib
import threading
from types import ModuleType
from typing import Any

#: Every module named to :func:`lazy_module`, in the order first named.
_DECLARED: dict[str, None] = {}


class LazyModule:
    """Stands for the module ``name`` until an attribute is read; then imports it.

    Each attribute read once is kept on the proxy, so later reads cost what a module's do.

    Examples
    --------
    >>> special = lazy_module("scipy.special")
    >>> float(special.expit(0.0))
    0.5
    """

    def __init__(self, name: str) -> None:
        self.__dict__["_lazy_name"] = name
        _DECLARED.setdefault(name, None)

    def _module(self) -> ModuleType:
        return importlib.import_module(self.__dict__["_lazy_name"])

    def __getattr__(self, attribute: str) -> Any:
        value = getattr(self._module(), attribute)
        self.__dict__[attribute] = value
        return value

    def __setattr__(self, attribute: str, value: Any) -> None:
        raise AttributeError(f"{self.__dict__['_lazy_name']} is read-only through its "
                             f"lazy proxy; import it to change {attribute!r}")

    def __dir__(self) -> list[str]:
        return dir(self._module())

    def __repr__(self) -> str:
        return f"<lazy module {self.__dict__['_lazy_name']!r}>"


def lazy_module(name: str) -> Any:
    """A proxy for the module ``name`` that imports it when a name is first read from it.

    Parameters
    ----------
    name : str
        The module's full dotted name, e.g. ``"scipy.stats"``.

    Returns
    -------
    LazyModule
        Typed ``Any``: call sites use it as the module itself.

    Examples
    --------
    >>> optimize = lazy_module("scipy.optimize")
    >>> round(float(optimize.brentq(lambda x: x - 0.5, 0.0, 1.0)), 6)
    0.5
    """
    return LazyModule(name)


def warm_up() -> threading.Thread:
    """Import every lazily declared module in a background (daemon) thread.

    For processes that live through several exchanges with deadlines: the imports
    happen while the process waits for its peers instead of inside a stage the others
    time. One-shot processes (a device's single report, a Flower ClientApp per message)
    should not call it: they would import what they never use.

    Returns
    -------
    threading.Thread
        The started thread (joining it is optional).

    Examples
    --------
    >>> warm_up().join()
    """
    names = list(_DECLARED)

    def import_all() -> None:
        for name in names:
            importlib.import_module(name)

    thread = threading.Thread(target=import_all, name="fedustat-warm-up", daemon=True)
    thread.start()
    return thread
