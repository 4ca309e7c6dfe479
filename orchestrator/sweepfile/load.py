"""Reading a sweep file: the three passes, and every problem located by file, line and field.

1. :mod:`yamlread` composes the YAML (no code, no aliases, caps on size and depth).
2. pydantic (strict, :mod:`schema`) checks keys, types and ranges; unknown keys get a
   did-you-mean.
3. :mod:`rules` checks across fields and sections, on the typed parts that parsed.
4. Each file workload is read from the sweep's :class:`WorkloadSource` (beside the sweep file
   on disk, or the content stored with it) and checked line by line; a bad line is a problem
   located in that file (``traffic.jsonl:7: ...``).

``validate`` needs the file and its workload files alone: nothing here touches the network.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ValidationError

import orchestrator.sweepfile.rules as rules
from orchestrator.bench.workloads import WorkloadFileError, parse_sample
from orchestrator.sweepfile.problems import (
    FieldPath,
    Located,
    Problem,
    SweepFileError,
    format_path,
    unknown_key_message,
)
from orchestrator.sweepfile.schema import Sweep
from orchestrator.sweepfile.workloads import DiskWorkloads, WorkloadSource, WorkloadUnreadable
from orchestrator.sweepfile.yamlread import MAX_FILE_BYTES, LimitExceeded, RawDocument, read_yaml


@dataclass(frozen=True, slots=True)
class CheckedSweep:
    """A valid sweep, the text it came from, and what the rules warn about (each warning
    located like a problem; the file is accepted all the same)."""

    sweep: Sweep
    text: str
    warnings: tuple[Problem, ...]


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated and ``X | None`` down to X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _model_at(path: FieldPath) -> type[BaseModel] | None:
    """The schema model that owns the mapping at ``path`` (for did-you-mean suggestions)."""
    annotation: Any = Sweep
    for part in path:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif typing.get_origin(annotation) is list:
            annotation = typing.get_args(annotation)[0]
        elif typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]
        else:
            return None
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _describe_input(value: object) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _pydantic_problems(exc: ValidationError) -> list[Located]:
    found: list[Located] = []
    for error in exc.errors(include_url=False):
        loc: FieldPath = tuple(error["loc"])
        kind = error["type"]
        if loc and loc[-1] == "[key]":
            message = "invalid key: " + error["msg"].removeprefix("Value error, ")
            found.append(Located(loc[:-1], message))
        elif kind == "extra_forbidden":
            model = _model_at(loc[:-1])
            allowed = list(model.model_fields) if model else []
            found.append(rules.UnknownKey(loc, unknown_key_message(str(loc[-1]), allowed)))
        elif kind == "missing":
            found.append(Located(loc, "required key missing"))
        elif kind in ("value_error", "assertion_error"):
            found.append(Located(loc, error["msg"].removeprefix("Value error, ")))
        else:
            message = error["msg"]
            if "input" in error and not isinstance(error["input"], dict | list):
                message += f" (got {_describe_input(error['input'])})"
            found.append(Located(loc, message[0].lower() + message[1:]))
    return found


def _under(path: FieldPath, prefixes: set[FieldPath]) -> bool:
    return any(prefix and path[: len(prefix)] == prefix for prefix in prefixes)


def _judge(doc: RawDocument) -> tuple[Sweep | None, list[Located], list[Located]]:
    """Passes 2 and 3 on a document that is a mapping: (sweep, problems, warnings).

    A value the reader refused is not judged again, and below an unknown key nothing but
    other unknown keys is reported (its value means nothing to the schema)."""
    assert isinstance(doc.data, dict)
    sweep: Sweep | None = None
    located: list[Located] = []
    try:
        sweep = Sweep.model_validate(doc.data)
    except ValidationError as exc:
        located.extend(_pydantic_problems(exc))
    rule_problems, warnings = rules.check(doc.data)
    located.extend(rule_problems)
    unknown = {found.path for found in located if isinstance(found, rules.UnknownKey)}
    refused = doc.refused_paths
    kept = [
        found
        for found in located
        if isinstance(found, rules.UnknownKey)
        or not (_under(found.path, refused) or _under(found.path, unknown))
    ]
    return sweep, kept, warnings


def _check_text(
    text: str, filename: str, workloads: WorkloadSource | None
) -> tuple[Sweep | None, list[Problem], list[Problem]]:
    def problem(line: int, path: FieldPath, message: str) -> Problem:
        return Problem(filename, line, format_path(path), message)

    size = len(text.encode("utf-8"))
    if size > MAX_FILE_BYTES:
        return None, [problem(1, (), f"file is {size} bytes; the limit is {MAX_FILE_BYTES}")], []
    try:
        doc = read_yaml(text)
    except LimitExceeded as exc:
        return None, [problem(exc.mark.line + 1, (), f"file too complex: {exc.message}")], []
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        detail = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        return None, [problem(line, (), f"YAML syntax error: {detail}")], []
    except yaml.YAMLError as exc:
        return None, [problem(1, (), f"YAML error: {exc}")], []

    read_problems = [problem(line, path, msg) for path, line, msg in doc.problems]
    if doc.data is None and not doc.problems:
        return None, [problem(1, (), "the file is empty")], []
    if not isinstance(doc.data, dict):
        what = "a sweep file is a mapping (name:, hosts:, server:, ...)"
        shape = problem(doc.lines[()], (), what)
        return None, [*read_problems, shape], []

    sweep, located, warned = _judge(doc)
    problems = read_problems + [
        problem(doc.line_of(found.path), found.path, found.message) for found in located
    ]
    warnings = [problem(doc.line_of(w.path), w.path, w.message) for w in warned]
    unique = sorted(set(problems), key=lambda p: (p.line, p.field_path, p.message))
    if unique or sweep is None:
        return None, unique, warnings
    if workloads is not None:
        workload_problems = _load_workloads(sweep, doc, filename, workloads)
        if workload_problems:
            return None, workload_problems, warnings
    return sweep, [], warnings


def _load_workloads(
    sweep: Sweep, doc: RawDocument, filename: str, source: WorkloadSource
) -> list[Problem]:
    """Pass 4: read and check each file workload, attaching the content when all are good;
    the problems of each file, every bad line of it, in the file's order."""
    bench = sweep.benchmark
    content: dict[str, str] = {}
    problems: list[Problem] = []
    for index, ref in enumerate(bench.workload_refs):
        if ref.file is None:
            continue
        where: FieldPath = (
            ("benchmark", "workloads", index, "file")
            if bench.workloads is not None
            else ("benchmark", "workload", "file")
        )
        line = doc.line_of(where)
        try:
            text = source.read(ref.file)
        except WorkloadUnreadable as exc:
            problems.append(Problem(filename, line, format_path(where), exc.reason))
            continue
        shown = source.display_name(ref.file)
        try:
            parse_sample(text, filename=shown, label=ref.label)
        except WorkloadFileError as exc:
            problems.extend(_sample_problem(p, shown, filename, line, where) for p in exc.problems)
            continue
        content[ref.file] = text
    if not problems:
        bench.attach_workload_content(content)
    return problems


def _sample_problem(text: str, shown: str, filename: str, line: int, where: FieldPath) -> Problem:
    """``FILE:LINE: message`` from :func:`parse_sample` as a problem located in that file; a
    problem of the whole sample (no line) is located at the sweep's workload field."""
    rest = text.removeprefix(f"{shown}:")
    number, sep, message = rest.partition(": ")
    if rest != text and sep and number.isdigit():
        return Problem(shown, int(number), "", message)
    return Problem(filename, line, format_path(where), f"{shown}: {rest.strip()}")


def check_sweep_text(
    text: str, filename: str = "sweep.yaml", *, workloads: WorkloadSource | None = None
) -> CheckedSweep:
    """The sweep in ``text`` with its warnings; raises :class:`SweepFileError` naming every
    problem. With ``workloads``, each file workload is read from it and checked (pass 4);
    without, file workloads stay unread (:meth:`BenchmarkSpec.workload_specs` refuses)."""
    sweep, problems, warnings = _check_text(text, filename, workloads)
    if problems or sweep is None:
        raise SweepFileError(problems)
    return CheckedSweep(sweep, text, tuple(warnings))


def parse_sweep(
    text: str, filename: str = "sweep.yaml", *, workloads: WorkloadSource | None = None
) -> Sweep:
    """The sweep in ``text``; raises :class:`SweepFileError` naming every problem.

    Without ``workloads`` the file workloads' content is not loaded: enough for what reads a
    stored sweep's hosts, objective and policy, not for a run."""
    return check_sweep_text(text, filename, workloads=workloads).sweep


def read_sweep_text(path: str | Path) -> str:
    """The file's text, refusing what is too big or not UTF-8 (problems located as usual)."""
    name = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SweepFileError([Problem(name, 1, "", f"cannot read: {exc.strerror}")]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise SweepFileError(
            [Problem(name, 1, "", f"file is over {MAX_FILE_BYTES} bytes, the limit")]
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SweepFileError([Problem(name, line, "", "not UTF-8 text")]) from None


def check_sweep(path: str | Path) -> CheckedSweep:
    """Read and validate a sweep file and its workload files (relative to it), keeping its
    text and warnings (``validate``, ``plan``, ``run``, ``submit``)."""
    workloads = DiskWorkloads(Path(path).parent)
    return check_sweep_text(read_sweep_text(path), str(path), workloads=workloads)


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file; raises :class:`SweepFileError` naming every problem."""
    return check_sweep(path).sweep


def load_sweep_with_text(path: str | Path) -> tuple[Sweep, str]:
    """The sweep and the exact text it came from (the store keeps the submitted YAML)."""
    checked = check_sweep(path)
    return checked.sweep, checked.text
