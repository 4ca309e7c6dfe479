"""What is wrong with a sweep file, located by file, line and field path."""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass

FieldPath = tuple[str | int, ...]
"""Where a value sits in the document: ``("hosts", 0, "port")``."""

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a sweep file, located by line (1-based) and field path."""

    file: str
    line: int
    field_path: str
    message: str

    def __str__(self) -> str:
        field = f" {self.field_path}:" if self.field_path else ""
        return f"{self.file}:{self.line}:{field} {self.message}"


class SweepFileError(Exception):
    """A sweep file was rejected; ``problems`` lists every problem found, in line order."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(problem) for problem in problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Located:
    """A problem (or a warning) before it knows its file and line: a path and a message."""

    path: FieldPath
    message: str


def format_path(path: FieldPath) -> str:
    """``('hosts', 0, 'port')`` -> ``hosts[0].port``; odd keys are JSON-quoted."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part) or re.fullmatch(r"[A-Za-z0-9_.-]+", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out


def unknown_key_message(key: str, allowed: list[str], *, hint: str = "") -> str:
    """``unknown key (did you mean 'budget'?)``, or the list of what is allowed."""
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key (did you mean {close[0]!r}?)"
    if not allowed:
        return f"unknown key{hint} (none are declared)"
    return f"unknown key{hint} (expected one of: {', '.join(allowed)})"


def control_character(value: str, *, allow_newline: bool) -> str | None:
    """What makes ``value`` unfit for a unit file or a command line, or None."""
    for char in value:
        code = ord(char)
        if char == "\0":
            return "NUL"
        if char in "\n\r\x85\u2028\u2029" and not allow_newline:
            return "a newline"
        if (code < 0x20 and char not in "\t\n\r") or code == 0x7F:
            return f"control character {char!r}"
    return None
