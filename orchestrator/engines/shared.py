"""What several engines read alike: the answers of a parse script run on the host (one marked
JSON line per argv), a command-line number or boolean as argparse's ``type=`` reads it, and
the first failure text a line holds. Each engine keeps its own markers, flags and texts."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.engine import ParserUnavailable, ParseVerdict
from orchestrator.types import FailureCause


def read_marked_answers(
    stdout: str, stderr: str, count: int, *, marker: str, import_line: str, parser: str
) -> list[ParseVerdict] | ParserUnavailable:
    """A parse script's answers to ``count`` argvs, in order, from its lines that start with
    ``marker``; an argv it never answered (it died or timed out on the way) is ``unchecked``.
    Without any answer, what the command said instead is the reason; an ``import_error``
    answer says ``import_line`` failed."""
    lines = [line for line in stdout.splitlines() if line.startswith(marker)]
    if not lines:
        tail = (stderr.strip() or stdout.strip())[-200:]
        return ParserUnavailable(f"the parse script gave no answer{': ' + tail if tail else ''}")
    answers: dict[int, Mapping[str, Any]] = {}
    for line in lines:
        try:
            answer = json.loads(line[len(marker) :])
        except ValueError as exc:
            return ParserUnavailable(f"the parse script's answer is not JSON: {exc}")
        if not isinstance(answer, dict):
            return ParserUnavailable("the parse script's answer is not an object")
        if "import_error" in answer:
            return ParserUnavailable(f"{import_line} failed: {answer['import_error']}")
        index = answer.get("index")
        if isinstance(index, int) and 0 <= index < count:
            answers[index] = answer
    tail = stderr.strip()[-200:]
    missing = ParseVerdict(
        ok=None,
        kind="unchecked",
        error=f"no answer from the parse script{': ' + tail if tail else ''}",
        parser=parser,
    )
    return [_verdict(answers[i], parser) if i in answers else missing for i in range(count)]


def _verdict(answer: Mapping[str, Any], parser: str) -> ParseVerdict:
    ok = answer.get("ok")
    kind = answer.get("kind")
    error = answer.get("error")
    speculative = answer.get("speculative")
    return ParseVerdict(
        ok=ok if isinstance(ok, bool) else None,
        kind=kind if kind in ("argparse", "resolution", "unchecked") else None,
        error=str(error) if error is not None else None,
        speculative=speculative if isinstance(speculative, dict) else {},
        parser=parser,
    )


def normal_scalar_word(text: str) -> str:
    """A value as argparse's ``type=int``/``float`` and a boolean flag read it: numbers by
    value (``8`` and ``8.0`` alike), booleans in one spelling, anything else as written."""
    if text in ("True", "true", "False", "false"):
        return text.lower()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else repr(number)


def first_failure(
    patterns: Sequence[tuple[FailureCause, re.Pattern[str]]], text: str
) -> tuple[FailureCause, str] | None:
    """The cause of the first of ``patterns`` (most specific first) that ``text`` holds, with
    the matched text."""
    for cause, pattern in patterns:
        found = pattern.search(text)
        if found is not None:
            return cause, found.group(0).strip()
    return None


__all__ = ["first_failure", "normal_scalar_word", "read_marked_answers"]
