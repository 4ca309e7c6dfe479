"""Unit-file syntax as systemd reads and prints it: pure functions, no files, no processes.

Assignments and continuation lines, specifiers, ExecStart word splitting with quotes and C
escapes, ``Environment=`` words, ``$VAR`` substitution, time spans, and the quoting
``systemctl show`` uses (FACTS: systemd). The loader (unitload.py) applies them to a host's files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

USEC = 1_000_000

# --- pure helpers: time spans, quoting ------------------------------------------------------

_TIMESPAN_UNITS = {
    "us": 1,
    "usec": 1,
    "ms": 1000,
    "msec": 1000,
    "s": USEC,
    "sec": USEC,
    "second": USEC,
    "seconds": USEC,
    "m": 60 * USEC,
    "min": 60 * USEC,
    "minute": 60 * USEC,
    "minutes": 60 * USEC,
    "h": 3600 * USEC,
    "hr": 3600 * USEC,
    "hour": 3600 * USEC,
    "hours": 3600 * USEC,
    "d": 86400 * USEC,
    "day": 86400 * USEC,
    "days": 86400 * USEC,
}


def parse_timespan_us(text: str, default_unit: int = USEC) -> int | None:
    """systemd's parse_sec: ``30``, ``1min 30s``, ``500ms``, ``infinity`` (None)."""
    value = text.strip()
    if value == "infinity":
        return None
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]*)", value)
    if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*([a-z]*)", "", value).strip():
        raise ValueError(text)
    total = 0.0
    for number, unit in parts:
        if unit and unit not in _TIMESPAN_UNITS:
            raise ValueError(text)
        total += float(number) * (_TIMESPAN_UNITS[unit] if unit else default_unit)
    return int(total)


def format_timespan(us: int | None) -> str:
    """systemd's format_timespan with accuracy 1us: ``1min 30s``, ``500ms``, ``infinity``."""
    if us is None:
        return "infinity"
    if us == 0:
        return "0"
    table = [
        ("y", 31_557_600 * USEC),
        ("month", 2_629_800 * USEC),
        ("w", 604_800 * USEC),
        ("d", 86_400 * USEC),
        ("h", 3_600 * USEC),
        ("min", 60 * USEC),
        ("s", USEC),
        ("ms", 1000),
        ("us", 1),
    ]
    words: list[str] = []
    remaining = us
    for name, size in table:
        if remaining >= size:
            count, remaining = divmod(remaining, size)
            words.append(f"{count}{name}")
    return " ".join(words)


def format_timestamp(realtime_us: int) -> str:
    """``Thu 2026-10-30 12:00:00 UTC`` in the host's local zone; empty for 0."""
    if realtime_us <= 0:
        return ""
    stamp = datetime.fromtimestamp(realtime_us / USEC).astimezone()
    return stamp.strftime("%a %Y-%m-%d %H:%M:%S %Z")


def quote_exec_word(word: str) -> str:
    """One argv element for a unit file (FACTS: systemd), so the file parses back exactly."""
    if "\n" in word or "\0" in word:
        raise ValueError("argv elements cannot hold newlines or NUL")
    escaped = (
        word.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    )
    return f'"{escaped}"'


_SHELL_NEED_QUOTES = '"\\`$*?[\'()<>|&;!'
_CESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
             "\v": "\\v"}  # fmt: skip


def is_unichar_valid(ch: str) -> bool:
    """systemd's unichar_is_valid: no surrogates, no U+FDD0..U+FDEF, no U+xFFFE/U+xFFFF."""
    code = ord(ch)
    return not (
        0xD800 <= code <= 0xDFFF or 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE
    )


def is_utf8_clean(text: str) -> bool:
    """What systemd's utf8_is_valid accepts (a unit-file assignment failing it is ignored)."""
    return all(is_unichar_valid(ch) for ch in text)


def _is_cc(ch: str) -> bool:
    return ord(ch) < 32 or ord(ch) == 127


def shell_maybe_quote(text: str) -> str:
    """systemd's shell_maybe_quote (how ``systemctl show`` prints string-array elements): quoted
    only for ASCII control characters, whitespace, shell specials or invalid code points; valid
    non-ASCII characters stay as they are (measured on systemd 252)."""
    if text and not any(
        _is_cc(ch) or not is_unichar_valid(ch) or ch in " \t\n\r" + _SHELL_NEED_QUOTES
        for ch in text
    ):
        return text
    escaped = "".join(
        _CESCAPES.get(ch, f"\\x{ord(ch):02x}")
        if _is_cc(ch)
        else "\\" + ch
        if ch in '"\\`$'
        else ch
        for ch in text
    )
    return f'"{escaped}"'


# --- pure helpers: unit files ----------------------------------------------------------------


_EOL = re.compile(r"\r\n|\r|\n|\0")
_WHITESPACE = " \t\n\r"


def parse_unit_text(text: str) -> list[tuple[str, str, str]]:
    """``(section, key, value)`` per assignment, with continuation lines joined.

    Lines end only where systemd's read_line ends them (``\\n``, ``\\r``, ``\\r\\n``, NUL), never
    at the other characters :meth:`str.splitlines` breaks on (U+0085, U+2028, form feed...), and
    only systemd's WHITESPACE is stripped: a value may well end in a no-break space."""
    assignments: list[tuple[str, str, str]] = []
    section = ""
    pending = ""
    for raw in _EOL.split(text):
        line = raw.strip(_WHITESPACE)
        if not pending and (not line or line[0] in "#;"):
            continue
        if pending and line and line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if sep:
            assignments.append((section, key.strip(_WHITESPACE), value.strip(_WHITESPACE)))
    if pending:
        key, sep, value = pending.partition("=")
        if sep:
            assignments.append((section, key.strip(_WHITESPACE), value.strip(_WHITESPACE)))
    return assignments


class SpecifierError(ValueError):
    pass


def expand_specifiers(text: str, values: Mapping[str, str]) -> str:
    """Resolve ``%x`` specifiers; ``%%`` is a literal percent."""
    out: list[str] = []
    index = 0
    while index < len(text):
        ch = text[index]
        if ch != "%":
            out.append(ch)
            index += 1
            continue
        if index + 1 >= len(text):
            raise SpecifierError(text)
        spec = text[index + 1]
        if spec == "%":
            out.append("%")
        elif spec in values:
            out.append(values[spec])
        else:
            raise SpecifierError(f"%{spec}")
        index += 2
    return "".join(out)


_C_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
              "\\": "\\", '"': '"', "'": "'", "s": " "}


def split_words(text: str) -> list[str]:
    """extract_first_word with UNQUOTE|CUNESCAPE: whitespace-separated words, quotes anywhere in
    a word, C escapes (``\\\\``, ``\\"``, ``\\n``, ``\\xNN``, octal) inside and outside quotes."""
    words: list[str] = []
    current: list[str] = []
    in_word = False
    quote: str | None = None
    index = 0
    while index < len(text):
        ch = text[index]
        if ch == "\\" and index + 1 < len(text):
            nxt = text[index + 1]
            if nxt == "x" and re.match(r"[0-9a-fA-F]{2}", text[index + 2 : index + 4]):
                current.append(chr(int(text[index + 2 : index + 4], 16)))
                index += 4
            elif re.match(r"[0-7]{3}", text[index + 1 : index + 4]):
                current.append(chr(int(text[index + 1 : index + 4], 8)))
                index += 4
            else:
                current.append(_C_ESCAPES.get(nxt, nxt))
                index += 2
            in_word = True
            continue
        if quote is not None:
            if ch == quote:
                quote = None
            else:
                current.append(ch)
            index += 1
            continue
        if ch in "\"'":
            quote = ch
            in_word = True
        elif ch in _WHITESPACE:  # systemd splits on ASCII whitespace only
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
        else:
            current.append(ch)
            in_word = True
        index += 1
    if quote is not None:
        raise ValueError(f"unbalanced quotes: {text}")
    if in_word:
        words.append("".join(current))
    return words


@dataclass(frozen=True, slots=True)
class ExecCommand:
    path: str
    argv: tuple[str, ...]
    ignore_errors: bool = False


def parse_exec(value: str, specifiers: Mapping[str, str]) -> list[ExecCommand]:
    """One ``ExecStart=`` value: prefixes ``-@:+!``, words, ``;`` between commands."""
    words = split_words(expand_specifiers(value, specifiers))
    commands: list[ExecCommand] = []
    while words:
        if ";" in words:
            cut = words.index(";")
            chunk, words = words[:cut], words[cut + 1 :]
        else:
            chunk, words = words, []
        if not chunk:
            continue
        first = chunk[0]
        prefix = re.match(r"^[-@:+!]*", first)
        flags = prefix.group(0) if prefix else ""
        path = first[len(flags) :]
        argv = chunk[1:] if "@" in flags else [path, *chunk[1:]]
        if "@" in flags and not argv:
            raise ValueError("@ prefix needs an argv[0]")
        commands.append(ExecCommand(path=path, argv=tuple(argv), ignore_errors="-" in flags))
    return commands


def substitute_env(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """systemd's replace_env_argv: ``$$`` -> ``$``; a word that is exactly ``$VAR`` splits on
    whitespace; ``${VAR}`` is replaced in place."""
    out: list[str] = []
    for word in argv:
        bare = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if bare is not None:
            out.extend(w for w in re.split(r"[ \t\n\r]+", env.get(bare.group(1), "")) if w)
            continue

        def replace_one(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            return env.get(match.group(1) or "", "")

        out.append(re.sub(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}", replace_one, word))
    return out


def parse_environment(value: str, specifiers: Mapping[str, str]) -> list[str]:
    """``Environment=`` words that are valid ``NAME=value`` assignments (others are ignored)."""
    words = split_words(expand_specifiers(value, specifiers))
    return [w for w in words if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]


def merge_environment(current: Sequence[str], added: Sequence[str]) -> list[str]:
    """systemd's strv_env_replace: a later ``NAME=`` replaces the earlier one IN PLACE (so
    ``Environment=`` shows each name once, where it was first set), new names are appended."""
    merged = list(current)
    for assignment in added:
        name = assignment.partition("=")[0]
        for index, existing in enumerate(merged):
            if existing.partition("=")[0] == name:
                merged[index] = assignment
                break
        else:
            merged.append(assignment)
    return merged


def parse_unset_environment(value: str, specifiers: Mapping[str, str]) -> list[str]:
    """``UnsetEnvironment=`` words: variable names, or ``NAME=VALUE`` (unset only if equal)."""
    words = split_words(expand_specifiers(value, specifiers))
    return [w for w in words if re.match(r"^[A-Za-z_][A-Za-z0-9_]*(=|$)", w)]


def apply_unset_environment(env: dict[str, str], unset: Sequence[str]) -> dict[str, str]:
    """The process environment after ``UnsetEnvironment=`` (applied last, to every source)."""
    result = dict(env)
    for entry in unset:
        name, sep, value = entry.partition("=")
        if not sep or result.get(name) == value:
            result.pop(name, None)
    return result


def env_assignments_to_dict(assignments: Sequence[str]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        merged[name] = value
    return merged


def mangle_unit_name(name: str) -> str:
    """``systemctl``'s unit_name_mangle: a name without a type suffix is a service."""
    if re.search(r"\.(service|socket|target|timer|mount|path|slice|scope|device|swap)$", name):
        return name
    return f"{name}.service"
