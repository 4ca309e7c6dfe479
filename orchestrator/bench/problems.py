"""Coding problems for the correctness anchor: the built-in set and JSONL problem files.

A problem asks for one Python function (`entry_point`) and carries hidden tests: Python source
(asserts) run after the candidate's code in the sandbox. A problem file is JSON Lines, one
object ``{"id", "prompt", "entry_point", "tests"}`` per line; a bad line is reported with its
file and line number so a sweep author can fix it without guessing.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

BUILTIN_RESOURCE = "builtin.jsonl"
SEED_PROBLEM_IDS = ("is_palindrome", "fib", "merge_sorted", "word_count", "gcd")
"""The seeds' five problems, in the seeds' order."""

_REQUIRED_FIELDS = ("id", "prompt", "entry_point", "tests")


@dataclass(frozen=True)
class CodingProblem:
    """One coding task: the prompt sent to the model and the hidden tests run on its answer."""

    id: str
    prompt: str
    entry_point: str
    tests: str


@dataclass(frozen=True)
class ProblemLineError:
    """One bad line of a problem file."""

    source: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}"


class ProblemFileError(ValueError):
    """A problem file (or a selection from it) is unusable; lists every problem found."""

    def __init__(self, errors: Sequence[ProblemLineError]) -> None:
        self.errors = tuple(errors)
        super().__init__("\n".join(str(e) for e in self.errors))


def parse_problems(text: str, *, source: str = "<problems>") -> list[CodingProblem]:
    """Parse JSONL problem text; raise `ProblemFileError` naming every bad line."""
    problems: list[CodingProblem] = []
    errors: list[ProblemLineError] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        problem, message = _parse_line(line)
        if message is not None:
            errors.append(ProblemLineError(source, number, message))
            continue
        assert problem is not None
        if problem.id in seen:
            errors.append(
                ProblemLineError(
                    source,
                    number,
                    f"duplicate id {problem.id!r} (first on line {seen[problem.id]})",
                )
            )
            continue
        seen[problem.id] = number
        problems.append(problem)
    if errors:
        raise ProblemFileError(errors)
    return problems


def _parse_line(line: str) -> tuple[CodingProblem | None, str | None]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} at column {exc.colno}"
    if not isinstance(obj, dict):
        return None, f"expected a JSON object, got {type(obj).__name__}"
    missing = [f for f in _REQUIRED_FIELDS if f not in obj]
    if missing:
        return None, f"missing field(s): {', '.join(missing)}"
    wrong = [f for f in _REQUIRED_FIELDS if not isinstance(obj[f], str) or not obj[f].strip()]
    if wrong:
        return None, f"field(s) must be non-empty strings: {', '.join(wrong)}"
    unknown = sorted(set(obj) - set(_REQUIRED_FIELDS))
    if unknown:
        return None, f"unknown field(s): {', '.join(unknown)}"
    entry_point = obj["entry_point"]
    if not entry_point.isidentifier():
        return None, f"entry_point {entry_point!r} is not a Python identifier"
    try:
        ast.parse(obj["tests"], filename="<tests>")
    except SyntaxError as exc:
        return None, f"tests are not valid Python: {exc.msg} (tests line {exc.lineno})"
    return CodingProblem(obj["id"], obj["prompt"], entry_point, obj["tests"]), None


def load_problem_file(path: str | Path) -> list[CodingProblem]:
    """Read a JSONL problem file from disk."""
    path = Path(path)
    return parse_problems(path.read_text(encoding="utf-8"), source=str(path))


def builtin_problems() -> list[CodingProblem]:
    """The problems shipped with the orchestrator (the seeds' five first, then the rest)."""
    resource = (
        resources.files("orchestrator")
        .joinpath("data")
        .joinpath("problems")
        .joinpath(BUILTIN_RESOURCE)
    )
    return parse_problems(
        resource.read_text(encoding="utf-8"), source=f"builtin:{BUILTIN_RESOURCE}"
    )


def select(problems: Iterable[CodingProblem], ids: Iterable[str]) -> list[CodingProblem]:
    """The problems with the given ids, in the order of `ids`; unknown ids raise."""
    by_id = {p.id: p for p in problems}
    wanted = list(ids)
    unknown = [i for i in wanted if i not in by_id]
    if unknown:
        raise ProblemFileError(
            [ProblemLineError("<selection>", 0, f"unknown problem id {i!r}") for i in unknown]
        )
    return [by_id[i] for i in wanted]
