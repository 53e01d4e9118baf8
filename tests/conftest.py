"""Settings every test shares."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _run_directories(tmp_path_factory):
    """Networked servers write each run to a run directory (docs/network.md,
    "Durability"); those the tests do not name go under pytest's temporary directory,
    not the user's ``~/.local/share/fedustat/runs`` (inherited by server processes)."""
    if "FEDUSTAT_RUN_ROOT" not in os.environ:
        os.environ["FEDUSTAT_RUN_ROOT"] = str(tmp_path_factory.mktemp("runs"))
    yield
