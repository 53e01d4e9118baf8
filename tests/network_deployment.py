"""Server and silos of a networked run in threads of one process (each silo with its own
TLS channel over loopback), for the tests of the networked protocols."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from fedustat.protocols.base import Protocol
from fedustat.runtime.network.certs import load_credentials
from fedustat.runtime.network.party import run_party
from fedustat.runtime.network.server import serve


def run_deployment(certs: Any, make: Callable[[], Protocol], silos: list[np.ndarray], *,
                   rng: Any = 5, n_silos: int | None = None,
                   party_make: Callable[[int], Protocol] | None = None,
                   timeout: float = 10.0, min_silos: int | None = None,
                   identities: list[int] | None = None,
                   start_after: dict[int, float] | None = None) -> tuple[Any, list[Any]]:
    """Server and parties in threads; (server result or exception, party results or exceptions).

    Silo ``i`` uses the certificate ``party-{identities[i]}`` (default ``party-i``) and starts
    ``start_after[i]`` seconds after the others (default at once).
    """
    expected = len(silos) if n_silos is None else n_silos
    names = list(range(len(silos))) if identities is None else identities
    delays = start_after or {}
    ready, port = threading.Event(), {}
    outcome: dict[str, Any] = {}

    def server() -> None:
        try:
            outcome["server"] = serve(make(), expected, load_credentials(certs, "server"),
                                      rng=rng, timeout=timeout, min_silos=min_silos,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:  # the test inspects it
            outcome["server"] = exc
            ready.set()

    parties: list[Any] = [None] * len(silos)

    def party(i: int) -> None:
        protocol = make() if party_make is None else party_make(i)
        time.sleep(delays.get(i, 0.0))
        try:
            parties[i] = run_party(protocol, silos[i],
                                   load_credentials(certs, f"party-{names[i]}"),
                                   f"127.0.0.1:{port['p']}", rng=rng,
                                   timeout=timeout)  # the same stage timeout as the server
        except Exception as exc:
            parties[i] = exc

    server_thread = threading.Thread(target=server)
    server_thread.start()
    assert ready.wait(30)
    threads = [threading.Thread(target=party, args=(i,)) for i in range(len(silos))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(6 * timeout)
    server_thread.join(4 * timeout)
    assert not server_thread.is_alive(), "the server must never hang"
    return outcome["server"], parties
