"""fedustat's protocols inside a Flower deployment (SuperLink + SuperNodes, no Ray).

A Flower app whose ServerApp is the aggregator and whose ClientApp is one silo per
SuperNode (``server_app`` and ``client_app``; they import ``flwr``). The app directory
holds only a ``pyproject.toml`` naming them and declaring the run config;
:func:`write_app` (or ``python -m fedustat.runtime.flower DIRECTORY``) writes it.
docs/flower.md shows the commands.
"""

from fedustat.runtime.flower.config import (
    DEFAULT_RUN_CONFIG,
    STATISTICS,
    NodeConfig,
    RunConfig,
    app_pyproject,
    load_silo,
    write_app,
)

__all__ = ["DEFAULT_RUN_CONFIG", "STATISTICS", "NodeConfig", "RunConfig", "app_pyproject",
           "load_silo", "write_app"]
