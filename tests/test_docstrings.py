"""The public API's docstrings are numpydoc with runnable examples.

Walked: every name in ``fedustat.__all__``, plus the public functions and classes of the
documented entry modules (``fedustat.privacy.budget.__all__``, the functions of
``fedustat.runtime.engine.__all__``, ``fedustat.compare.run_comparison``,
``fedustat.advisor.advise``, the public functions and classes of
``fedustat.protocols.registry``, ``fedustat.curves.__all__`` and
``fedustat.catalogue.__all__``), plus the public methods and properties of every walked
class: names without a leading underscore defined in the class itself or in a fedustat
base class (not those inherited from ``object``, ``float``, ``str``, ``Enum`` or made by
``dataclass``), each walked once, under the class that defines it.

Each docstring needs the numpydoc sections ``Parameters`` (when the object takes any),
``Returns`` (functions and methods that return a value) and ``Examples`` with at least
one ``>>>`` line. A property is documented as numpydoc documents an attribute: a summary
line saying what its value is, and an ``Examples`` section; it takes no parameters and
needs no ``Returns`` section, since its summary describes the value and its getter's
return annotation (required) gives the type. Every example then runs as a doctest
(``NORMALIZE_WHITESPACE | ELLIPSIS``) in a fresh namespace holding ``fedustat``, ``np``
and ``math``, with NumPy's global generator seeded.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import math
import re
from typing import Any

import numpy as np
import pytest

import fedustat
from fedustat.protocols import registry

# An example that uses a deprecated name teaches it: fail instead.
pytestmark = pytest.mark.filterwarnings("error::DeprecationWarning")

_FLAGS = doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS


def _module_objects() -> dict[str, Any]:
    """Qualified name -> object, for every module-level function and class the test walks."""
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
    for module_name in ("fedustat.curves", "fedustat.catalogue"):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            found.setdefault(f"{module_name}.{name}", getattr(module, name))
    # One entry per object (fedustat.ecdf is fedustat.curves.ecdf): the first name wins.
    seen: set[int] = set()
    unique: dict[str, Any] = {}
    for name, obj in found.items():
        if callable(obj) and id(obj) not in seen:
            seen.add(id(obj))
            unique[name] = obj
    return unique


def _is_fedustat_class(klass: type) -> bool:
    return klass.__module__ == "fedustat" or klass.__module__.startswith("fedustat.")


def _public_members(classes: list[type]) -> dict[str, Any]:
    """Qualified name -> function or property, for the public methods and properties of
    ``classes``: defined in the class or a fedustat base, keyed by the defining class."""
    found: dict[str, Any] = {}
    for cls in classes:
        for name in dir(cls):
            if name.startswith("_"):
                continue
            owner = next((k for k in cls.__mro__ if name in vars(k)), None)
            if owner is None or not _is_fedustat_class(owner):
                continue  # object, float, str, Enum or dataclass machinery
            attr = vars(owner)[name]
            if isinstance(attr, classmethod | staticmethod):
                attr = attr.__func__
            if inspect.isfunction(attr) or isinstance(attr, property):
                found[f"{owner.__module__}.{owner.__qualname__}.{name}"] = attr
    return found


def _public_objects() -> dict[str, Any]:
    """Qualified name -> object, for everything the test walks."""
    found = _module_objects()
    found.update(_public_members([obj for obj in found.values() if inspect.isclass(obj)]))
    return found


PUBLIC = _public_objects()

def _params() -> list[str]:
    return sorted(PUBLIC)


def test_walk_covers_methods_and_properties_of_the_public_classes() -> None:
    for qualname in ("fedustat.protocols.base.Estimate.confidence_interval",
                     "fedustat.protocols.base.Estimate.raw_value",
                     "fedustat.privacy.budget.BudgetAccountant.from_json",
                     "fedustat.curves.CurveRelease.to_dict",
                     "fedustat.curves.ROCCurveResult.auc",
                     "fedustat.catalogue.Statistic.kernel"):
        assert qualname in PUBLIC, qualname
    # Inherited from str / Enum, or made by dataclass: not walked.
    assert not [name for name in PUBLIC if name.endswith((".upper", ".replace", ".name"))]


def test_member_walk_keeps_public_members_of_fedustat_classes_only() -> None:
    class Outside:
        def foreign(self) -> None:
            """Not a fedustat method."""

    class Base:
        def shared(self) -> None:
            """Inherited by Child, walked under Base."""

        def overridden(self) -> None:
            """Replaced in Child."""

    class Child(Base, Outside, float):
        limit = 3

        @property
        def size(self) -> int:
            """A property."""
            return 1

        @classmethod
        def make(cls) -> Child:
            """A class method."""
            return cls(0.0)

        def overridden(self) -> None:
            """Child's own."""

        def _private(self) -> None:
            """Not public."""

    for klass in (Base, Child):
        klass.__module__, klass.__qualname__ = "fedustat.example", klass.__name__
    found = _public_members([Child])
    assert sorted(found) == ["fedustat.example.Base.shared", "fedustat.example.Child.make",
                             "fedustat.example.Child.overridden",
                             "fedustat.example.Child.size"]
    assert isinstance(found["fedustat.example.Child.size"], property)
    assert found["fedustat.example.Child.make"] is vars(Child)["make"].__func__


def _takes_parameters(obj: Any) -> bool:
    if isinstance(obj, property):
        return False
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
    return any(name not in ("self", "cls") for name in signature.parameters)


def _returns_value(obj: Any) -> bool:
    if inspect.isclass(obj) or isinstance(obj, property):
        return False
    annotation = inspect.signature(obj).return_annotation
    return annotation not in (None, "None")


def _sections(doc: str) -> set[str]:
    """Numpydoc section titles: a line followed by a line of dashes as long."""
    lines = inspect.cleandoc(doc).splitlines()
    return {lines[i].strip() for i in range(len(lines) - 1)
            if lines[i].strip() and re.fullmatch(r"-{3,}", lines[i + 1].strip())
            and len(lines[i + 1].strip()) == len(lines[i].strip())}


def _missing_sections(obj: Any) -> list[str]:
    """The numpydoc sections ``obj``'s docstring lacks (``">>>"`` for an empty Examples;
    ``"annotation"`` for a property whose getter does not annotate its type)."""
    doc = obj.__doc__ or ""
    sections = _sections(doc)
    missing = []
    if isinstance(obj, property) and (
            obj.fget is None
            or inspect.signature(obj.fget).return_annotation is inspect.Signature.empty):
        missing.append("annotation")
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

    class Holder:
        @property
        def annotated(self) -> int:
            """Two.

            Examples
            --------
            >>> 2
            2
            """
            return 2

        @property
        def bare(self):  # type: ignore[no-untyped-def]
            """Two."""
            return 2

    assert _missing_sections(one_line) == ["Parameters", "Returns", "Examples"]
    assert _missing_sections(no_prompt) == [">>>"]
    assert _missing_sections(nothing) == []
    assert _missing_sections(vars(Holder)["annotated"]) == []
    assert _missing_sections(vars(Holder)["bare"]) == ["annotation", "Examples"]


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
