"""The code's shape holds where issue 33 left it, so that it does not creep back: the runner
keeps to lease, preflight, backup, restore and the outcome (under 450 lines), no function
outside the simulator is over 60 lines, and no class but the store's facade has over 25
methods."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "orchestrator"
MAX_RUNNER_LINES = 450
MAX_FUNCTION_LINES = 60
MAX_METHODS = 25
LARGE_CLASSES = {"store/db.py:Store"}
"""The store's facade: one method per store operation, its row mapping written once."""


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(PACKAGE)), ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
        if "sim" not in path.relative_to(PACKAGE).parts
    ]


def test_the_runner_is_under_450_lines() -> None:
    lines = len((PACKAGE / "runner.py").read_text().splitlines())
    assert lines < MAX_RUNNER_LINES, lines


def test_no_function_outside_the_simulator_is_over_60_lines() -> None:
    long = [
        f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for name, module in _modules()
        for node in ast.walk(module)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_no_class_but_the_stores_facade_has_over_25_methods() -> None:
    large = {
        f"{name}:{node.name}"
        for name, module in _modules()
        for node in ast.walk(module)
        if isinstance(node, ast.ClassDef)
        and sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in node.body)
        > MAX_METHODS
    }
    assert large == LARGE_CLASSES
