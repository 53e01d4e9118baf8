"""ecdf-secagg with SecAgg+ between real processes: devices that die mid-round.

100 one-record devices against a real server (gRPC with mutual TLS): 90 on one event loop
of this process (``run_party_async``), 10 in a child process that SIGKILLs itself when its
first device reaches the masked-input round (tests/secagg_dropout_child.py). The server
sees the ten connections drop, SecAgg+'s dropout rule lets the round go on, the survivors
send the shares of the dead devices' masking keys, and the release over the 90 equals the
simulator's for the seed with those ten silent in that round.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")

from fedustat.protocols import registry
from fedustat.runtime.network import create_deployment, load_credentials, run_party_async, serve
from fedustat.runtime.simulate import simulate

SEED = 21
DEVICES = 100
KILLED = list(range(5, DEVICES, 10))  # party-5, party-15, ..., party-95
MASKED_ROUND = 2  # rounds: 0 keys, 1 shares (relay), 2 masked inputs, 3 unmasking
OPTIONS = {"epsilon": 1.0, "bounds": [0.0, 1.0], "precision": 0.0625, "min_honest": 30,
           "degree": 16, "threshold": 5, "aggregation": "secagg+"}
CHILD = Path(__file__).with_name("secagg_dropout_child.py")


def make() -> Any:
    return registry.make_curve("ecdf-secagg", **OPTIONS)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return create_deployment(tmp_path_factory.mktemp("certs"), DEVICES)


def test_ten_of_100_devices_killed_mid_round_release_over_the_90(certs):
    values = np.round(np.random.default_rng(4).uniform(0.0, 1.0, DEVICES), 3)
    timeout = 40.0
    ready, port, outcome = threading.Event(), {}, {}

    def server() -> None:
        try:
            outcome["server"] = serve(make(), DEVICES, load_credentials(certs, "server"),
                                      rng=SEED, timeout=timeout, min_silos=DEVICES // 2,
                                      on_ready=lambda p: (port.update(p=p), ready.set()))
        except Exception as exc:  # the test inspects it
            outcome["server"] = exc
            ready.set()

    thread = threading.Thread(target=server)
    thread.start()
    child = None
    try:
        assert ready.wait(30)
        address = f"127.0.0.1:{port['p']}"
        config = {"certs": str(certs), "server": address, "identities": KILLED,
                  "values": [float(values[i]) for i in KILLED], "options": OPTIONS,
                  "seed": SEED, "timeout": timeout, "die_at": MASKED_ROUND}
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parents[1] / "src"), os.environ.get("PYTHONPATH", "")])}
        child = subprocess.Popen([sys.executable, str(CHILD), json.dumps(config)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        kept = [i for i in range(DEVICES) if i not in KILLED]

        async def devices() -> list[Any]:
            return await asyncio.gather(*(
                run_party_async(make(), values[i:i + 1, None],
                                load_credentials(certs, f"party-{i}"), address, rng=SEED,
                                timeout=timeout) for i in kept), return_exceptions=True)

        results = asyncio.run(asyncio.wait_for(devices(), 6 * timeout))  # a hang guard
        assert child.wait(timeout=60) == -signal.SIGKILL, child.stderr.read().decode()
    finally:
        if child is not None and child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        thread.join(4 * timeout)
    assert not thread.is_alive(), "the server must never hang"
    run = outcome["server"]
    assert not isinstance(run, Exception), run
    assert not any(isinstance(r, Exception) for r in results), results
    assert sorted(run.dropped) == sorted(f"party-{i}" for i in KILLED), run.dropped
    expected = simulate(make(), values, rng=SEED, batch_size=[1] * DEVICES,
                        dropouts={MASKED_ROUND: KILLED})
    released = run.estimate.diagnostics["curve"]
    assert released.n == DEVICES - len(KILLED) == expected.diagnostics["curve"].n
    np.testing.assert_array_equal(released.values, expected.diagnostics["curve"].values)
    assert run.estimate.value == expected.value
