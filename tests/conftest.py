"""Settings every test shares."""

from __future__ import annotations

import copy
import os

import pytest

# Fixtures wider than one test, defined here or by pytest itself: they do not tie a file's
# tests to one worker (each worker has its own copy, and they cost nothing to build).
_SHARED_EVERYWHERE = {"_run_directories", "tmp_path_factory", "worker_id",
                      "testrun_uid", "monkeypatch", "request", "pytestconfig"}


@pytest.fixture(autouse=True, scope="session")
def _run_directories(tmp_path_factory):
    """Networked servers write each run to a run directory (docs/network.md,
    "Durability"); those the tests do not name go under pytest's temporary directory,
    not the user's ``~/.local/share/fedustat/runs`` (inherited by server processes)."""
    if "FEDUSTAT_RUN_ROOT" not in os.environ:
        os.environ["FEDUSTAT_RUN_ROOT"] = str(tmp_path_factory.mktemp("runs"))
    yield


def _module_fixtures(item: pytest.Item) -> list[str]:
    """The fixtures of module (or wider) scope of the test's own file that it uses."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [name for name, definitions in info.name2fixturedefs.items()
            if name not in _SHARED_EVERYWHERE
            and any(d.scope in ("module", "package", "session") for d in definitions)]


def _group(item: pytest.Item) -> str:
    """One group per file, or per instance of a parametrized module fixture (each instance
    is built once per worker anyway, and pytest runs a file's tests instance by instance)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    instance = [f"{name}={params[name]}" for name in _module_fixtures(item) if name in params]
    return ":".join([f"file:{item.path.name}", *instance])


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (the Makefile's ``make test``), the tests of a file that
    builds a module fixture (a deployment, a Dask cluster, a Flower SuperLink, a
    comparison) run on one worker, so the fixture is built once; every other test goes to
    whichever worker is free, so one slow file no longer holds a worker while the other
    idles. Runs before pytest-xdist reads the marks (``tryfirst``)."""
    if not getattr(config.option, "loadgroup", False):  # set on xdist's workers
        return
    grouped = {item.path for item in items if _module_fixtures(item)}
    for item in items:
        if item.path in grouped:
            item.add_marker(pytest.mark.xdist_group(_group(item)))


@pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_suffix(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-xdist sends a group to one worker by the ``@group`` suffix of a test's id,
    which it writes to ``item._nodeid``; pytest 9 keeps the id in ``item._id`` instead,
    so the marks would be silently ignored (every test scheduled alone). Where xdist's
    suffix is missing, write it into the id's text (its structured parts stay as they
    are)."""
    if not getattr(config.option, "loadgroup", False):
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        suffix = "@" + "_".join(names)
        if not names or item.nodeid.endswith(suffix):
            continue
        node_id = getattr(item, "_id", None)
        if node_id is None or not hasattr(node_id, "_str_cache"):
            continue  # an older pytest: xdist's own suffix applies
        grouped = copy.copy(node_id)
        object.__setattr__(grouped, "_str_cache", f"{item.nodeid}{suffix}")
        item._id = grouped
