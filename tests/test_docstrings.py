"""The public API's docstrings are numpydoc with runnable examples.

Walked: every name in ``fedustat.__all__``, plus the public functions and classes of the
documented entry modules (``fedustat.privacy.budget.__all__``, the functions of
``fedustat.runtime.engine.__all__``, ``fedustat.compare.run_comparison``,
``fedustat.advisor.advise`` and the public functions and classes of
``fedustat.protocols.registry``). Each docstring needs the numpydoc sections
``Parameters`` (when the object takes any), ``Returns`` (functions that return a value)
and ``Examples`` with at least one ``>>>`` line; every example then runs as a doctest
(``NORMALIZE_WHITESPACE | ELLIPSIS``) in a fresh namespace holding ``fedustat``, ``np``
and ``math``, with NumPy's global generator seeded.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import fedustat
from fedustat.protocols import registry

# An example that uses a deprecated name teaches it: fail instead.
pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning")

_FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def _public_objects() -> dict[str, Any]:
    """Qualified name -> object, for every callable the test walks."""
    found: dict[str, Any] = {}
    for name in fedustat.__all__:
        found[f"fedustat.{name}"] = getattr(fedustat, name)
    budget = importlib.import_module("fedustat.privacy.budget")
    for name in budget.__all__:
        found[f"fedustat.privacy.budget.{name}"] = getattr(budget, name)
    engine = importlib.import_module("fedustat.runtime.engine")
    for name in engine.__all__:
        obj = getattr(engine, name)
        if inspect.isfunction(obj):
            found[f"fedustat.runtime.engine.{name}"] = obj
    for name, obj in vars(registry).items():
        if (not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj))
                and obj.__module__ == registry.__name__):
            found[f"fedustat.protocols.registry.{name}"] = obj
    found["fedustat.compare.run_comparison"] = importlib.import_module(
        "fedustat.compare").run_comparison
    found["fedustat.advisor.advise"] = importlib.import_module("fedustat.advisor").advise
    return {name: obj for name, obj in found.items() if callable(obj)}


PUBLIC = _public_objects()


def _params() -> list[str]:
    return sorted(PUBLIC)


def _takes_parameters(obj: Callable[..., Any]) -> bool:
    if inspect.isclass(obj):
        init = obj.__init__
        if init is object.__init__ or init is BaseException.__init__:
            return False
        if issubclass(obj, BaseException):  # an exception's message is not a parameter
            return False
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    return any(name != "self" for name in signature.parameters)


def _returns_value(obj: Callable[..., Any]) -> bool:
    if inspect.isclass(obj):
        return False
    annotation = inspect.signature(obj).return_annotation
    return annotation not in (None, "None")


def _sections(doc: str) -> set[str]:
    """Numpydoc section titles: a line followed by a line of dashes as long."""
    lines = inspect.cleandoc(doc).splitlines()
    return {lines[i].strip() for i in range(len(lines) - 1)
            if lines[i].strip() and re.fullmatch(r"-{3,}", lines[i + 1].strip())
            and len(lines[i + 1].strip()) == len(lines[i].strip())}


def _missing_sections(obj: Callable[..., Any]) -> list[str]:
    """The numpydoc sections ``obj``'s docstring lacks (``">>>"`` for an empty Examples)."""
    doc = obj.__doc__ or ""
    sections = _sections(doc)
    missing = []
    if _takes_parameters(obj) and "Parameters" not in sections:
        missing.append("Parameters")
    if _returns_value(obj) and not sections & {"Returns", "Yields"}:
        missing.append("Returns")
    if "Examples" not in sections:
        missing.append("Examples")
    elif ">>>" not in inspect.cleandoc(doc).split("Examples\n--------", 1)[1]:
        missing.append(">>>")
    return missing


@pytest.mark.parametrize("qualname", _params())
def test_docstring_has_numpydoc_sections(qualname: str) -> None:
    obj = PUBLIC[qualname]
    assert (obj.__doc__ or "").strip(), f"{qualname} has no docstring"
    missing = _missing_sections(obj)
    assert not missing, f"{qualname}: docstring lacks numpydoc section(s) {missing}"


def test_section_check_finds_what_is_missing() -> None:
    def one_line(x: int) -> int:
        """Twice ``x``."""
        return 2 * x

    def no_prompt(x: int) -> int:
        """Twice ``x``.

        Parameters
        ----------
        x:
            A number.

        Returns
        -------
        int

        Examples
        --------
        Doubling 2 gives 4.
        """
        return 2 * x

    def nothing() -> None:
        """Do nothing.

        Examples
        --------
        >>> nothing()
        """

    assert _missing_sections(one_line) == ["Parameters", "Returns", "Examples"]
    assert _missing_sections(no_prompt) == [">>>"]
    assert _missing_sections(nothing) == []


def _run_examples(obj: Any, qualname: str) -> tuple[int, int, str]:
    """Run ``obj``'s docstring examples: (examples run, failed, the runner's report)."""
    np.random.seed(0)
    globs = {"fedustat": fedustat, "np": np, "math": math}
    output: list[str] = []
    attempted = failed = 0
    for test in doctest.DocTestFinder(recurse=False).find(obj, qualname, globs=globs):
        result = doctest.DocTestRunner(optionflags=_FLAGS).run(test, out=output.append)
        attempted += result.attempted
        failed += result.failed
    return attempted, failed, "".join(output)


@pytest.mark.parametrize("qualname", _params())
def test_docstring_examples_run(qualname: str) -> None:
    attempted, failed, report = _run_examples(PUBLIC[qualname], qualname)
    assert attempted, f"{qualname}: no doctest examples"
    assert not failed, f"{qualname}: doctest failed\n{report}"


def test_example_runner_reports_a_wrong_output() -> None:
    def halve(x: float) -> float:
        """Half of ``x``.

        Examples
        --------
        >>> float(np.float64(3.0) / 2)
        1.0
        """
        return x / 2

    attempted, failed, report = _run_examples(halve, "halve")
    assert (attempted, failed) == (1, 1)
    assert "Expected:\n    1.0\nGot:\n    1.5" in report
