"""Test-only: several devices of ``ecdf-secagg`` (SecAgg+) in one process that kills itself.

Run by tests/test_secagg_plus_network.py as ``python secagg_dropout_child.py CONFIG``
(JSON: certificate directory, server address, device identities and their values, the
protocol's options, the seed, the timeout, and the round to die in). The first time any
of its devices reaches its step of that round, the process sends itself SIGKILL: none of
its devices sends that round's message, and the server sees their connections drop at
once, as for phones that lose power mid-round.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Any

import numpy as np

from fedustat.protocols import registry
from fedustat.protocols.ecdf.secagg_plus import SecAggPlusECDF
from fedustat.runtime.network import load_credentials, run_party_async


def die_at(round_index: int) -> None:
    """Every device of this process dies (the process is killed) at its step of
    ``round_index``: the class's step is wrapped, in this process only, so each device's
    protocol and its public configuration stay those of the others."""
    step = SecAggPlusECDF.party_step

    def step_or_die(self: SecAggPlusECDF, state: Any, inbox: Any, rng: Any) -> Any:
        if state.step == round_index:
            os.kill(os.getpid(), signal.SIGKILL)
        return step(self, state, inbox, rng)

    SecAggPlusECDF.party_step = step_or_die  # type: ignore[method-assign]


async def main(config: dict[str, Any]) -> None:
    die_at(config["die_at"])
    await asyncio.gather(*(
        run_party_async(registry.make_curve("ecdf-secagg", **config["options"]),
                        np.array([[value]]),
                        load_credentials(config["certs"], f"party-{identity}"),
                        config["server"], rng=config["seed"], timeout=config["timeout"])
        for identity, value in zip(config["identities"], config["values"], strict=True)))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
