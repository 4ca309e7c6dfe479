"""The one drop-in file the orchestrator owns on a host, as pure text in and text out.

A trial changes the SGLang unit only through ``/etc/systemd/system/<unit>.d/90-orchestrator.conf``:
an ``ExecStart=`` reset, the trial's argv, its ``Environment=`` lines. Everything here is pure
(no I/O) so the systemd helper, ``plan`` and the tests share one renderer and one parser.

Quoting follows systemd's unit-file rules (FACTS.md: systemd): every argv element is written
double-quoted with ``\\``, ``"``, ``%`` and ``$`` escaped, so no sweep value can split a word,
expand a specifier or an environment variable. :func:`parse_exec_line` is the inverse, written
after systemd's ``extract_first_word(EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE)`` plus the specifier
(``%%``) and exec-time (``$$``) passes, so units found on hosts can be read back exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Protocol

from orchestrator.host.launchfile import (
    LaunchFile,
    LaunchFormat,
    launch_file_path,
    render_launch_content,
)
from orchestrator.types import KnobValue, LaunchOverlay

DROPIN_NAME = "90-orchestrator.conf"
ADOPTED_DROPIN_NAME = "80-orchestrator-adopted.conf"
"""``orchestrator adopt``'s lasting drop-in: sorted before a trial's, so a later sweep's trials
still override it, and a sweep's restore (which owns only :data:`DROPIN_NAME`) leaves it."""
UNIT_DIR = PurePosixPath("/etc/systemd/system")
HEADER_PREFIX = "# managed-by: orchestrator"
_WRITTEN_BY = (
    "# Written by the orchestrator for one trial; removed when the sweep restores the unit."
)
_ADOPTED_BY = (
    "# The configuration `orchestrator adopt` chose from a sweep's answer; it lasts until "
    "`orchestrator restore` puts the unit back as adopt found it."
)


# No leading '-': systemctl would read the name as an option.
_SERVICE_NAME = re.compile(r"^[A-Za-z0-9:_.\\][A-Za-z0-9:_.\\-]*(@[A-Za-z0-9:_.\\-]+)?\.service$")
_UNIT_NAME_MAX = 255
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FORBIDDEN = ("\n", "\r", "\0")
_HEADER = re.compile(
    r"^# managed-by: orchestrator sweep=(?P<sweep>[A-Za-z0-9._-]+) trial=(?P<trial>\S+)[ \t]*$"
)
_WHITESPACE = " \t\n\r"
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "'": "'",
    "s": " ",
}


class UnsafeValueError(ValueError):
    """A value cannot be written into a unit file without changing its meaning."""

    def __init__(self, value: str, reason: str) -> None:
        super().__init__(f"{reason}: {value!r}")
        self.value = value
        self.reason = reason


class ExecLineError(ValueError):
    """An ``ExecStart=`` value systemd would reject, or one whose argv depends on run-time
    expansion (specifiers, ``$VAR``) and so cannot be read back as literal words."""

    def __init__(self, value: str, reason: str) -> None:
        super().__init__(f"{reason} in {value!r}")
        self.value = value
        self.reason = reason


class ExtraFlagConflict(ValueError):
    """An ``extra_flags`` flag the base command line already gives with another value: which
    one the server would use is up to its argument parser, so the trial is refused instead."""

    def __init__(self, flag: str, base_value: str | None, extra_value: str | None, index: int):
        super().__init__(
            f"{flag} {_shown(extra_value)} in extra_flags[{index}], but the command line "
            f"already has {flag} {_shown(base_value)}"
        )
        self.flag = flag
        self.base_value = base_value
        self.extra_value = extra_value
        self.index = index


def _shown(value: str | None) -> str:
    return "(no value)" if value is None else repr(value)


class UnknownKnobError(KeyError):
    """A trial names a knob the knob map does not declare."""

    def __init__(self, knob: str) -> None:
        super().__init__(knob)
        self.knob = knob


class KnobTarget(Protocol):
    """How one knob reaches the server: a command-line flag, a key of a JSON-valued flag
    (``flag`` with ``json_key``: the knobs that share the flag build one JSON object, as
    vLLM's ``--speculative-config``), or an environment variable."""

    @property
    def flag(self) -> str | None: ...

    @property
    def env(self) -> str | None: ...

    @property
    def json_key(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class TrialInvocation:
    """The argv and environment one trial's server runs with."""

    argv: tuple[str, ...]
    environment: dict[str, str] = field(default_factory=dict)
    unset_environment: tuple[str, ...] = ()
    """Knob variables this trial leaves unset: the drop-in must also remove any value the
    unit's own ``Environment=`` gives them, or the knob would not really be absent."""
    repeated_extra_flags: tuple[str, ...] = ()
    """``extra_flags`` left out because the base command line already has them with the same
    value (said in the drop-in, so the operator sees why they are not repeated)."""
    added_flags: tuple[str, ...] = ()
    """Bare flags the orchestrator added because the unit's command line lacked them
    (``server.metrics: auto`` adds ``--enable-metrics``): said in the drop-in and recorded in
    the trial's provenance, since the operator did not write them."""
    launch_files: tuple[LaunchFile, ...] = ()
    """Files the argv names that the trial writes on the host (an engine's config file, as
    TensorRT-LLM's ``--extra_llm_api_options``): installed with the drop-in, backed up and
    restored with it."""


@dataclass(frozen=True, slots=True)
class FlagArg:
    """One ``--flag`` on a command line with its value as written: ``--x 4``, ``--x=4`` (value
    ``"4"``) or a bare ``--x`` (value None). ``index`` is its first token's position."""

    flag: str
    value: str | None
    tokens: tuple[str, ...]
    index: int


@dataclass(frozen=True, slots=True)
class DropinHeader:
    """What the first line of one of our drop-ins says: which sweep and trial wrote it."""

    sweep: str
    trial: str


def is_valid_service_name(unit: str) -> bool:
    """systemd's rule for a service unit name (no path separators, so no traversal)."""
    return len(unit) <= _UNIT_NAME_MAX and _SERVICE_NAME.match(unit) is not None


def dropin_path(unit: str) -> PurePosixPath:
    """Where our drop-in for ``unit`` lives; refuses a name that is not a service unit."""
    if not is_valid_service_name(unit):
        raise UnsafeValueError(unit, "not a valid systemd service name")
    return UNIT_DIR / f"{unit}.d" / DROPIN_NAME


def adopted_dropin_path(unit: str) -> PurePosixPath:
    """Where ``orchestrator adopt`` puts ``unit``'s lasting configuration."""
    return dropin_path(unit).with_name(ADOPTED_DROPIN_NAME)


def _is_noncharacter(char: str) -> bool:
    code = ord(char)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


def _check_line_safe(value: str) -> None:
    for bad in _FORBIDDEN:
        if bad in value:
            raise UnsafeValueError(value, "newline, carriage return or NUL in a unit-file value")
    if any(_is_noncharacter(char) for char in value):
        # systemd drops the whole assignment ("String is not UTF-8 clean"): the server would
        # silently run without the knob, or the unit without an ExecStart.
        raise UnsafeValueError(value, "Unicode noncharacter in a unit-file value")


def _quote(value: str, *, escape_dollar: bool) -> str:
    _check_line_safe(value)
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    if escape_dollar:
        escaped = escaped.replace("$", "$$")
    return f'"{escaped}"'


def quote_exec_arg(value: str) -> str:
    """One argv element as a double-quoted ``ExecStart=`` word that systemd reads back verbatim."""
    return _quote(value, escape_dollar=True)


def quote_environment(name: str, value: str) -> str:
    """One ``Environment=`` assignment, quoted. systemd does no ``$`` expansion there, only
    specifiers, so ``$`` stays as is; control characters other than tab are invalid in values."""
    if not _ENV_NAME.match(name):
        raise UnsafeValueError(name, "not a valid environment variable name")
    if any((ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F for ch in value):
        raise UnsafeValueError(value, "control character in an environment value")
    return _quote(f"{name}={value}", escape_dollar=False)


def quote_environment_name(name: str) -> str:
    """A variable name for ``UnsetEnvironment=``, quoted like an assignment."""
    if not _ENV_NAME.match(name):
        raise UnsafeValueError(name, "not a valid environment variable name")
    return f'"{name}"'


def format_knob_value(value: KnobValue) -> str:
    """A knob value as text on a command line or in the environment."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def flag_args(tokens: Sequence[str]) -> list[FlagArg | str]:
    """``tokens`` as flags with their values, and the other words as they are.

    The token after a flag is taken as its value unless it starts with ``--`` (SGLang's flags
    are all long options and take at most one value), the same reading as the knob removal."""
    out: list[FlagArg | str] = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if not token.startswith("--"):
            out.append(token)
            index += 1
            continue
        flag, sep, inline = token.partition("=")
        if sep:
            out.append(FlagArg(flag, inline, (token,), index))
            index += 1
        elif index + 1 < len(tokens) and not tokens[index + 1].startswith("--"):
            out.append(FlagArg(flag, tokens[index + 1], (token, tokens[index + 1]), index))
            index += 2
        else:
            out.append(FlagArg(flag, None, (token,), index))
            index += 1
    return out


@dataclass(frozen=True, slots=True)
class MergedFlags:
    """``extra_flags`` as they join a base command line: the tokens added, the flags left out
    because the base already has them with the same value, and those it has with another."""

    added: tuple[str, ...]
    repeated: tuple[FlagArg, ...]
    conflicts: tuple[ExtraFlagConflict, ...]


def merge_extra_flags(base_argv: Sequence[str], extra_flags: Sequence[str]) -> MergedFlags:
    """``extra_flags`` joined to ``base_argv`` (program first): a flag the base (or an earlier
    extra flag) already gives with the same value is left out, one given with another value is
    a conflict (its ``index`` counts in ``extra_flags``)."""
    given: dict[str, list[str | None]] = {}
    for arg in flag_args(base_argv[1:]):
        if isinstance(arg, FlagArg):
            given.setdefault(arg.flag, []).append(arg.value)
    added: list[str] = []
    repeated: list[FlagArg] = []
    conflicts: list[ExtraFlagConflict] = []
    for arg in flag_args(extra_flags):
        if isinstance(arg, str):
            added.append(arg)
            continue
        values = given.get(arg.flag)
        if values is None:
            added.extend(arg.tokens)
            given[arg.flag] = [arg.value]
        elif arg.value in values:
            repeated.append(arg)
        else:
            conflicts.append(ExtraFlagConflict(arg.flag, values[0], arg.value, arg.index))
    return MergedFlags(tuple(added), tuple(repeated), tuple(conflicts))


def strip_flags(argv: Sequence[str], flags: Iterable[str]) -> list[str]:
    """``argv`` (program first) without any of ``flags``, however each is written."""
    return _strip_flags(argv, set(flags))


def _strip_flags(argv: Sequence[str], flags: set[str]) -> list[str]:
    """argv without any of ``flags``, whether written ``--f v``, ``--f=v`` or bare ``--f``
    (read by :func:`flag_args`)."""
    kept = list(argv[:1])
    for arg in flag_args(argv[1:]):
        if isinstance(arg, str):
            kept.append(arg)
        elif arg.flag not in flags:
            kept.extend(arg.tokens)
    return kept


def apply_knobs(
    base_argv: Sequence[str],
    base_environment: Mapping[str, str],
    knob_map: Mapping[str, KnobTarget],
    config: Mapping[str, KnobValue],
    extra_flags: Sequence[str] = (),
    environment: Mapping[str, str] | None = None,
    *,
    ensure_flags: Sequence[str] = (),
    file_flags: Mapping[str, LaunchFormat] | None = None,
    dropin: str | None = None,
    overlay: LaunchOverlay | None = None,
) -> TrialInvocation:
    """The trial's invocation: every knob removed from the base, then the trial's knobs added.

    A flag knob valued None or False is absent, True is a bare flag, anything else ``--f value``;
    an env knob valued None is absent (and listed in ``unset_environment``), True/False are
    ``1``/``0``. The baseline (every knob None) is the base with all knob
    flags and variables removed, so a sweep always starts from the same clean command line.
    ``extra_flags`` the base already has with the same value are not repeated
    (:func:`merge_extra_flags`; another value raises :class:`ExtraFlagConflict`).
    ``ensure_flags`` (bare flags) are added where the command line lacks them in any form and
    no knob owns them; what was added is ``added_flags``. A flag of ``file_flags`` (the
    engine's flags that take a file) whose keys the knobs fill is given the path of a launch
    file beside ``dropin`` holding them, in the flag's format, instead of a JSON value.
       ``overlay`` (a speculative schedule in the engine's form) adds its JSON keys to their
    flags' objects, its flags, and its files as launch files beside ``dropin``.
    """
    unknown = [name for name in config if name not in knob_map]
    if unknown:
        raise UnknownKnobError(unknown[0])
    knob_flags = {target.flag for target in knob_map.values() if target.flag}
    knob_envs = {target.env for target in knob_map.values() if target.env}
    argv, merged = _base_argv(base_argv, knob_flags, extra_flags)
    present = {arg.flag for arg in flag_args(argv[1:]) if isinstance(arg, FlagArg)}
    added_flags = tuple(
        dict.fromkeys(f for f in ensure_flags if f not in present and f not in knob_flags)
    )
    argv.extend(added_flags)
    env = {key: value for key, value in base_environment.items() if key not in knob_envs}
    env.update(environment or {})
    unset, objects = _apply_values(knob_map, config, argv, env)
    overlay = overlay or LaunchOverlay()
    for flag, keys in overlay.json.items():
        objects.setdefault(flag, {}).update(keys)
    launch = _object_flags(objects, argv, file_flags or {}, dropin)
    launch.extend(_overlay_flags(overlay, argv, dropin))
    return TrialInvocation(
        argv=tuple(argv),
        environment=env,
        unset_environment=tuple(unset),
        repeated_extra_flags=tuple(" ".join(arg.tokens) for arg in merged.repeated),
        added_flags=added_flags,
        launch_files=tuple(launch),
    )


def _base_argv(
    base_argv: Sequence[str], knob_flags: set[str], extra_flags: Sequence[str]
) -> tuple[list[str], MergedFlags]:
    """The base command line without any knob's flag, with ``extra_flags`` joined to it
    (raises the first :class:`ExtraFlagConflict`)."""
    argv = _strip_flags(base_argv, knob_flags)
    merged = merge_extra_flags(argv, extra_flags)
    if merged.conflicts:
        raise merged.conflicts[0]
    argv.extend(merged.added)
    return argv, merged


def _apply_values(
    knob_map: Mapping[str, KnobTarget],
    config: Mapping[str, KnobValue],
    argv: list[str],
    env: dict[str, str],
) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """Each knob's value onto ``argv`` (a flag) or ``env`` (a variable), in the knob map's
    order. Returns the variables left unset and, per JSON-valued flag, its keys' values."""
    unset: list[str] = []
    objects: dict[str, dict[str, Any]] = {}
    for name, target in knob_map.items():
        value = config.get(name)
        if target.flag and target.json_key:
            entries = objects.setdefault(target.flag, {})
            if value is not None:
                entries[target.json_key] = value
        elif target.flag:
            if value is True:
                argv.append(target.flag)
            elif value is not None and value is not False:
                argv.extend((target.flag, format_knob_value(value)))
        elif target.env:
            if value is None:
                unset.append(target.env)
            else:
                env[target.env] = format_knob_value(value)
    return unset, objects


def _object_flags(
    objects: Mapping[str, Mapping[str, Any]],
    argv: list[str],
    file_flags: Mapping[str, LaunchFormat],
    dropin: str | None,
) -> list[LaunchFile]:
    """Each JSON-valued flag onto ``argv``: its value inline as JSON, or, for a flag of
    ``file_flags``, the path of a launch file beside ``dropin`` holding it (returned)."""
    launch: list[LaunchFile] = []
    for flag, entries in objects.items():
        if not entries:  # every key absent: the flag is absent, as a flag knob valued None
            continue
        fmt = file_flags.get(flag)
        if fmt is None:
            argv.extend((flag, json.dumps(entries, sort_keys=True, separators=(",", ":"))))
            continue
        if dropin is None:
            raise ValueError(f"{flag} takes a launch file, but no drop-in path to put it beside")
        launch.append(
            LaunchFile(launch_file_path(dropin, flag, fmt), render_launch_content(entries, fmt))
        )
        argv.extend((flag, launch[-1].path))
    return launch


def _overlay_flags(
    overlay: LaunchOverlay, argv: list[str], dropin: str | None
) -> list[LaunchFile]:
    """An overlay's flags onto ``argv`` (None: a bare switch) and its files as launch files
    beside ``dropin``, each flag given its file's path (returned)."""
    for flag, value in overlay.flags.items():
        argv.extend((flag,) if value is None else (flag, value))
    launch: list[LaunchFile] = []
    for flag, content in overlay.files.items():
        if dropin is None:
            raise ValueError(f"{flag} takes a launch file, but no drop-in path to put it beside")
        launch.append(LaunchFile(launch_file_path(dropin, flag, "json"), content.encode()))
        argv.extend((flag, launch[-1].path))
    return launch


def render_header(sweep_name: str, trial_key: str) -> str:
    """The first line of our drop-in; :func:`parse_dropin_header` reads it back."""
    line = f"{HEADER_PREFIX} sweep={sweep_name} trial={trial_key}"
    if _HEADER.match(line) is None:
        raise UnsafeValueError(line, "sweep name or trial key not fit for the drop-in header")
    return line


def render_dropin(
    sweep_name: str,
    trial_key: str,
    invocation: TrialInvocation,
    *,
    extra_service_lines: Iterable[str] = (),
    adopted: bool = False,
) -> str:
    """The exact drop-in text a trial installs (``adopted``: the lasting one adopt installs).

    The empty ``ExecStart=`` resets the unit's list (without it the unit gets
    ``LoadState=bad-setting`` and the old process keeps running); ``LogRateLimitIntervalSec=0``
    keeps journald from dropping the decode lines the accept-length metric is read from.
    """
    if not invocation.argv:
        raise UnsafeValueError("", "empty argv")
    exec_lines = [
        "ExecStart=",
        "ExecStart=" + " ".join(quote_exec_arg(arg) for arg in invocation.argv),
    ]
    comments = [_ADOPTED_BY if adopted else _WRITTEN_BY]
    return _render(sweep_name, trial_key, invocation, comments, exec_lines, extra_service_lines)


def render_dropin_delta(
    sweep_name: str,
    trial_key: str,
    invocation: TrialInvocation,
    removed_flags: Sequence[str],
    *,
    if_missing: Sequence[str] = (),
) -> str:
    """What a trial changes when the unit's own ExecStart is not known (``plan`` without
    ``server.exec_start``): ``invocation`` was built on a one-word placeholder argv, so its
    words after the first are what the trial adds. The same text as :func:`render_dropin`
    below the ``[Service]`` line except the ExecStart lines, which are described instead.
    ``if_missing``: flags added only where the unit lacks them (``server.metrics: auto``)."""
    added = " ".join(quote_exec_arg(arg) for arg in invocation.argv[1:])
    comments = [
        "# server.exec_start is not given, so this is the change to the unit's own ExecStart:",
        f"#   removed: {' '.join(removed_flags) or '(no knob flags)'}",
        f"#   added:   {added or '(nothing)'}",
    ]
    if if_missing:
        comments.append(f"#   added where the unit lacks it: {' '.join(if_missing)}")
    return _render(sweep_name, trial_key, invocation, comments, [], ())


def _render(
    sweep_name: str,
    trial_key: str,
    invocation: TrialInvocation,
    comments: Sequence[str],
    exec_lines: Sequence[str],
    extra_service_lines: Iterable[str],
) -> str:
    lines = [render_header(sweep_name, trial_key), *comments]
    if invocation.repeated_extra_flags:
        lines.append(
            "# extra_flags already on the unit's command line, not repeated: "
            + " ".join(invocation.repeated_extra_flags)
        )
    if invocation.added_flags:
        lines.append(
            "# added because the unit's command line lacks them (server.metrics: auto): "
            + " ".join(invocation.added_flags)
        )
    lines.extend(
        f"# launch file, written with this drop-in and removed with it: {launch.path}"
        for launch in invocation.launch_files
    )
    for comment in lines:
        _check_line_safe(comment)
    lines.append("[Service]")
    lines.extend(exec_lines)
    lines.extend(
        "Environment=" + quote_environment(name, value)
        for name, value in sorted(invocation.environment.items())
    )
    lines.extend(
        "UnsetEnvironment=" + quote_environment_name(name) for name in invocation.unset_environment
    )
    lines.append("LogRateLimitIntervalSec=0")
    for extra in extra_service_lines:
        _check_line_safe(extra)
        lines.append(extra)
    return "\n".join(lines) + "\n"


def parse_dropin_header(text: str) -> DropinHeader | None:
    """The sweep and trial named by a drop-in's first line, or None if it is not ours."""
    first_line = text.split("\n", 1)[0]
    match = _HEADER.match(first_line)
    if match is None:
        return None
    return DropinHeader(sweep=match["sweep"], trial=match["trial"])


def _cunescape_one(value: str, start: int) -> tuple[str, int]:
    """Decode one escape after a backslash at ``value[start - 1]``; returns (text, next index).

    systemd's ``cunescape_one``: simple escapes, ``\\xNN``, ``\\uNNNN``, ``\\UNNNNNNNN`` and three
    octal digits; NUL and unknown escapes are errors (the unit line is rejected)."""
    if start >= len(value):
        raise ExecLineError(value, "trailing backslash")
    char = value[start]
    if char in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[char], start + 1
    widths = {"x": (16, 2), "u": (16, 4), "U": (16, 8)}
    if char in widths:
        base, width = widths[char]
        digits = value[start + 1 : start + 1 + width]
        if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
            raise ExecLineError(value, f"bad \\{char} escape")
        code = int(digits, base)
    elif char in "01234567":
        digits = value[start : start + 3]
        if len(digits) != 3 or not all(d in "01234567" for d in digits):
            raise ExecLineError(value, "bad octal escape")
        code = int(digits, 8)
        width = 2
    else:
        raise ExecLineError(value, f"unknown escape \\{char}")
    if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        raise ExecLineError(value, "escape of NUL or an invalid code point")
    return chr(code), start + 1 + width


def _ends_token(value: str, index: int) -> bool:
    return index >= len(value) or value[index] in _WHITESPACE


def split_unit_words(value: str, *, exec_line: bool = False) -> list[str]:
    """systemd's ``extract_first_word(EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE)`` applied repeatedly.

    Words split on whitespace; single and double quotes may open and close anywhere inside a
    word; backslash escapes apply inside and outside quotes. An unterminated quote or a
    trailing backslash is an error, as in systemd. With ``exec_line`` (``config_parse_exec``)
    an unquoted ``;`` word separates commands (refused here: one command only) and ``\\;``
    is a literal ``;`` word."""
    words: list[str] = []
    index = 0
    length = len(value)
    while True:
        while index < length and value[index] in _WHITESPACE:
            index += 1
        if index >= length:
            return words
        if exec_line and value[index] == ";" and _ends_token(value, index + 1):
            raise ExecLineError(value, "command separator ';'")
        if exec_line and value.startswith("\\;", index) and _ends_token(value, index + 2):
            words.append(";")
            index += 2
            continue
        word: list[str] = []
        quote: str | None = None
        while index < length:
            char = value[index]
            if char == "\\":
                text, index = _cunescape_one(value, index + 1)
                word.append(text)
                continue
            if quote is not None:
                if char == quote:
                    quote = None
                else:
                    word.append(char)
            elif char in "'\"":
                quote = char
            elif char in _WHITESPACE:
                break
            else:
                word.append(char)
            index += 1
        if quote is not None:
            raise ExecLineError(value, "unterminated quote")
        words.append("".join(word))


def _resolve_specifiers(word: str, line: str) -> str:
    """``%%`` -> ``%``; any other specifier depends on the unit and is refused; a lone
    trailing ``%`` stays literal (systemd's ``specifier_printf``)."""
    return _resolve_doubled(word, line, "%", lambda following: f"unit specifier %{following}")


def _resolve_dollars(word: str, line: str) -> str:
    """systemd's exec-time pass: ``$$`` -> ``$``; ``${VAR}`` anywhere and a whole word
    ``$VAR`` are environment expansions and are refused; any other ``$`` is literal."""
    if word.startswith("$") and word[1:2] not in ("{", "$"):
        raise ExecLineError(line, f"environment expansion {word!r}")
    return _resolve_doubled(
        word,
        line,
        "$",
        lambda following: "environment expansion ${...}" if following == "{" else None,
    )


def _resolve_doubled(
    word: str, line: str, marker: str, refused: Callable[[str], str | None]
) -> str:
    """``word`` with each doubled ``marker`` made one, the two passes' shared walk: a marker
    before another character is refused when ``refused`` names why, else kept literal."""
    out: list[str] = []
    index = 0
    while index < len(word):
        char = word[index]
        if char == marker and index + 1 < len(word):
            following = word[index + 1]
            if following == marker:
                out.append(marker)
                index += 2
                continue
            reason = refused(following)
            if reason is not None:
                raise ExecLineError(line, reason)
        out.append(char)
        index += 1
    return "".join(out)


def parse_exec_line(value: str) -> list[str]:
    """The argv an ``ExecStart=`` value gives the process, read as systemd reads it.

    The first word keeps any systemd prefix characters (``-``, ``@``, ``+``, ``!``, ``:``).
    An unquoted ``;`` (several commands) and run-time expansions are refused with
    :class:`ExecLineError`, since re-rendering them as literals would change their meaning."""
    words = split_unit_words(value, exec_line=True)
    return [_resolve_dollars(_resolve_specifiers(word, value), value) for word in words]


def parse_environment_line(value: str) -> dict[str, str]:
    """The variables one ``Environment=`` value sets (quoted assignments, specifiers refused)."""
    result: dict[str, str] = {}
    for word in split_unit_words(value):
        assignment = _resolve_specifiers(word, value)
        name, sep, content = assignment.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise ExecLineError(value, f"not an assignment: {assignment!r}")
        result[name] = content
    return result
