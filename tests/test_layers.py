"""The import structure: no circles, no lower layer importing a higher one.

Layers, bottom to top (docs/architecture.md):

    foundation    _lazy, _validation, cost, datasets
    stats/privacy statistics and privacy primitives (one layer; they may use each other)
    secure        secret sharing, dealer, FSS, distributed noise
    protocols     the contract and registry, then one subpackage per protocol family
    runtime       transports
    applications  the package itself, api, curves, advisor, compare, reproduce, report, cli

Every import counts, including those inside functions and under ``TYPE_CHECKING``: a
circle that only type checkers see still ties two modules together.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("fedustat._lazy", "fedustat._validation", "fedustat.cost", "fedustat.datasets"),
    ("fedustat.stats", "fedustat.privacy"),
    ("fedustat.secure",),
    ("fedustat.protocols",),
    # The names of statistics and what serves them: read by the runtime (the Flower run
    # config) and by every application.
    ("fedustat.catalogue",),
    ("fedustat.runtime",),
    ("fedustat", "fedustat.api", "fedustat.curves", "fedustat.advisor", "fedustat.compare",
     "fedustat.reproduce", "fedustat.report", "fedustat.cli", "fedustat.__main__"),
)
LAYER_NAMES = ("foundation", "stats/privacy", "secure", "protocols", "runtime", "applications")

# Inside protocols/: the contract sits below the baseline, the baseline below the families,
# and a family imports only the contract and itself (never another family).
PROTOCOL_CONTRACT = ("fedustat.protocols.base", "fedustat.protocols.registry")
PROTOCOL_FAMILIES = ("local", "mpc", "fedauc", "ecdf")


def discover_modules(src: Path) -> dict[str, Path]:
    modules = {}
    for path in sorted((src / "fedustat").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def import_edges(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the fedustat modules it imports (``from pkg import mod`` is an edge to
    ``pkg.mod``; ``from mod import name`` an edge to ``mod``)."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                for alias in node.names:
                    submodule = f"{origin}.{alias.name}"
                    targets.append(submodule if submodule in modules else origin)
            edges[name].update(t for t in targets if t in modules and t != name)
    return edges


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for level, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and len(prefix) > best_len:
                best, best_len = level, len(prefix)
    return best


def cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward_imports(edges: Mapping[str, Iterable[str]]) -> list[str]:
    problems = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(source):
                problems.append(f"{source} ({LAYER_NAMES[layer_of(source)]}) imports {target} "
                                f"({LAYER_NAMES[layer_of(target)]})")
    return problems


def _family(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "protocols" and parts[2] in PROTOCOL_FAMILIES:
        return parts[2]
    return None


def protocol_rank(module: str) -> int:
    """0 contract, 1 the central baseline, 2 a family, 3 the package that registers all."""
    if module in PROTOCOL_CONTRACT:
        return 0
    if module == "fedustat.protocols.central":
        return 1
    if _family(module) is not None:
        return 2
    return 3


def protocol_violations(edges: Mapping[str, Iterable[str]]) -> list[str]:
    problems = []
    for source, targets in sorted(edges.items()):
        if not source.startswith("fedustat.protocols"):
            continue
        for target in sorted(targets):
            if not target.startswith("fedustat.protocols"):
                continue
            if protocol_rank(target) > protocol_rank(source):
                problems.append(f"{source} imports {target}, which sits above it in protocols/")
            elif (_family(source) and _family(target) and _family(source) != _family(target)):
                problems.append(f"{source} (family {_family(source)}) imports {target} "
                                f"(family {_family(target)})")
            elif _family(source) and target == f"fedustat.protocols.{_family(source)}":
                problems.append(f"{source} imports its own package {target}; import the module")
    return problems


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    return import_edges(discover_modules(SRC))


def test_every_module_has_a_layer(edges: dict[str, set[str]]) -> None:
    unplaced = [m for m in edges if layer_of(m) < 0]
    assert not unplaced, f"modules outside every layer (add them to LAYERS): {unplaced}"


def test_no_import_cycles(edges: dict[str, set[str]]) -> None:
    assert cycles(edges) == []


def test_no_upward_imports(edges: dict[str, set[str]]) -> None:
    assert upward_imports(edges) == []


def test_protocol_families_import_only_the_contract_and_themselves(
        edges: dict[str, set[str]]) -> None:
    assert protocol_violations(edges) == []


def test_the_edges_are_real(edges: dict[str, set[str]]) -> None:
    # A few arrows the code certainly has: the checks above look at a real graph.
    assert "fedustat.stats.exact" in edges["fedustat.stats.kernels"]
    assert "fedustat.cost" in edges["fedustat.secure.transcript"]
    assert "fedustat.protocols.ecdf.release" in edges["fedustat.protocols.ecdf.smoothing"]
    assert "fedustat.protocols.mpc.umpc" in edges["fedustat.protocols"]


def test_checks_catch_a_planted_cycle_and_upward_import() -> None:
    planted = {
        "fedustat.stats.a": {"fedustat.stats.b"},
        "fedustat.stats.b": {"fedustat.stats.a", "fedustat.protocols.base"},
        "fedustat.protocols.base": set(),
        "fedustat.protocols.local.x": {"fedustat.protocols.mpc.y"},
        "fedustat.protocols.mpc.y": {"fedustat.protocols"},
        "fedustat.protocols": set(),
    }
    assert cycles(planted) == [["fedustat.stats.a", "fedustat.stats.b"]]
    assert upward_imports(planted) == [
        "fedustat.stats.b (stats/privacy) imports fedustat.protocols.base (protocols)"]
    assert protocol_violations(planted) == [
        "fedustat.protocols.local.x (family local) imports fedustat.protocols.mpc.y (family mpc)",
        "fedustat.protocols.mpc.y imports fedustat.protocols, which sits above it in protocols/",
    ]


def test_relative_and_type_checking_imports_count(tmp_path: Path) -> None:
    pkg = tmp_path / "fedustat"
    (pkg / "stats").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "stats" / "__init__.py").write_text("")
    (pkg / "stats" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n")
    (pkg / "stats" / "b.py").write_text("def f():\n    from fedustat.stats.a import g\n")
    found = import_edges(discover_modules(tmp_path))
    assert found["fedustat.stats.a"] == {"fedustat.stats.b"}
    assert found["fedustat.stats.b"] == {"fedustat.stats.a"}
    assert cycles(found) == [["fedustat.stats.a", "fedustat.stats.b"]]
