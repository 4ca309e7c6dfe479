"""The package's imports point one way: no module reaches itself through its imports.

A cycle is found however it is hidden: every import counts, at module level, under ``if
TYPE_CHECKING:`` and inside a function (an import moved into a function to get around a cycle
is still the cycle, and a type-only one still ties the two modules' layers together). The graph
is read from the source with :mod:`ast`, so nothing is imported to draw it. ``from pkg import
name`` counts as an import of ``pkg`` and, where ``pkg.name`` is a module, of it too: a
submodule imports its siblings directly (``import orchestrator.report.fmt as fmt``), never
through its own package's ``__init__``, which imports it.

Below everything: ``types.py`` imports nothing of the package, and ``points.py`` (the one type
of a measured point) nothing but ``types.py``.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

PACKAGE = "orchestrator"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE


def _modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path) -> Iterator[str]:
    """The dotted names ``path`` imports, relative imports resolved, wherever they stand."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Each module to the package's modules it imports (a name resolved to the nearest module
    that holds it: ``orchestrator.store.Store`` is ``orchestrator.store``)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = (resolve(n) for n in _imported(module, path) if n.split(".")[0] == PACKAGE)
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def _cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules, as the modules in import
    order with the first repeated at the end."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(start: str) -> None:
        # Tarjan's algorithm without recursion: each frame is a module and its unvisited edges.
        frames = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while frames:
            node, edges = frames[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    frames.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                frames.pop()
                if frames:
                    parent = frames[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_in(group, graph) for group in groups]


def _cycle_in(group: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    """The shortest cycle through the group's first module (breadth first, inside the group)."""
    start = min(group)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & group):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # a strongly connected group has one


@functools.cache
def _package_graph() -> dict[str, set[str]]:
    return _graph(_modules())


def _words(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_no_module_imports_itself_through_others() -> None:
    cycles = _cycles(_package_graph())
    assert not cycles, f"import cycles (each import counts, type-only included):\n{_words(cycles)}"


def test_types_imports_nothing_of_the_package() -> None:
    imports = _package_graph()[f"{PACKAGE}.types"]
    assert not imports, f"orchestrator/types.py is the bottom layer, yet imports {sorted(imports)}"


def test_points_imports_only_types() -> None:
    graph = _package_graph()
    if f"{PACKAGE}.points" not in graph:
        pytest.skip("orchestrator/points.py does not exist yet")
    imports = graph[f"{PACKAGE}.points"] - {f"{PACKAGE}.types"}
    assert not imports, f"orchestrator/points.py imports more than types.py: {sorted(imports)}"


def test_the_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The checks above are only as good as the graph: a cycle closed by a type-only import, by
    an import inside a function, by a relative import, or through a package's ``__init__``
    is found."""
    package = tmp_path / PACKAGE
    (package / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from orchestrator.high import High\n",
        "high.py": "def f():\n    from .low import x\n",
        "sub/__init__.py": "from orchestrator.sub.part import thing\n",
        "sub/part.py": "from orchestrator.sub import other\n",
        "sub/other.py": "import orchestrator.types\n",
        "types.py": "",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    graph = _graph(_modules(package))
    assert graph["orchestrator.high"] == {"orchestrator.low"}
    assert graph["orchestrator.sub.part"] == {"orchestrator.sub", "orchestrator.sub.other"}
    assert sorted(map(sorted, map(set, _cycles(graph)))) == [
        ["orchestrator.high", "orchestrator.low"],
        ["orchestrator.sub", "orchestrator.sub.part"],
    ]
