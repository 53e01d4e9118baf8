"""A fresh process that imports fedustat (every networked party, Flower ClientApp and CLI
call is one) does not pay for the SciPy modules it has not used yet."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fedustat._lazy import LazyModule, lazy_module

HEAVY = ("scipy.stats", "scipy.signal", "scipy.optimize", "scipy.integrate", "scipy.sparse",
         "scipy.spatial")


@pytest.mark.parametrize("module", ["fedustat", "fedustat.runtime.network.party",
                                    "fedustat.protocols.registry"])
def test_importing_fedustat_leaves_scipys_heavy_modules_unloaded(module: str) -> None:
    probe = (f"import sys, {module}\n"
             f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_lazy_module_is_the_module_once_read() -> None:
    stats = lazy_module("scipy.stats")
    assert isinstance(stats, LazyModule) and "scipy.stats" in repr(stats)
    import scipy.stats

    assert stats.norm is scipy.stats.norm
    assert "norm" in dir(stats)
    with pytest.raises(AttributeError, match="read-only"):
        stats.norm = None


def test_a_missing_name_raises_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="no_such_function"):
        lazy_module("scipy.special").no_such_function  # noqa: B018
