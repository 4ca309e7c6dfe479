"""A small systemd over a host's private root: unit files, drop-ins, one service manager.

It reproduces what the orchestrator's restart protocol depends on (FACTS: systemd): drop-ins
merged in lexical order across /etc, /run and /lib with the ``ExecStart=`` reset rule (a missing
reset is ``bad-setting`` and the old process keeps running), changes visible only after
``daemon-reload`` (``NeedDaemonReload``, including the quirk that a drop-in in a ``.d`` directory
that did not exist at the last reload goes unnoticed), Type=simple semantics (active/running right
after fork), stop = SIGTERM to the control group then SIGKILL after TimeoutStopSec, KillMode,
the start rate limit, and systemd's own journal lines.

Limits of the model: the "control group" is the set of processes in the sessions the manager
started (plus their descendants), since there are no real cgroups here: a process that calls
``setsid()`` and is re-parented escapes it. Only Type=simple is modelled (other types run as
simple). Everything is in one process; the manager's state is lost when the host stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import getopt
import os
import re
import secrets
import signal
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from orchestrator.sim.journal import LINE_MAX, Journal, RateLimit, StreamSource

UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
USEC = 1_000_000
DEFAULT_TIMEOUT_STOP_US = 90 * USEC
DEFAULT_START_LIMIT_INTERVAL_US = 10 * USEC
DEFAULT_START_LIMIT_BURST = 5
_POLL_S = 0.05

EXIT_STATUS_NAMES = {
    0: "SUCCESS",
    1: "FAILURE",
    2: "INVALIDARGUMENT",
    3: "NOTIMPLEMENTED",
    4: "NOPERMISSION",
    5: "NOTINSTALLED",
    6: "NOTCONFIGURED",
    7: "NOTRUNNING",
    200: "CHDIR",
    203: "EXEC",
}
CLEAN_SIGNALS = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE}
CLD_EXITED, CLD_KILLED = 1, 2


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


# --- loading --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnitConfig:
    """A unit as loaded by the last daemon-reload (or first reference)."""

    name: str
    load_state: str
    load_error: str = ""
    fragment_path: str = ""
    dropin_paths: tuple[str, ...] = ()
    description: str = ""
    type: str = "simple"
    restart: str = "no"
    restart_sec_us: int = 100_000
    exec_start: tuple[ExecCommand, ...] = ()
    environment: tuple[str, ...] = ()
    unset_environment: tuple[str, ...] = ()
    kill_mode: str = "control-group"
    timeout_stop_us: int | None = DEFAULT_TIMEOUT_STOP_US
    rate_limit: RateLimit = field(default_factory=RateLimit)
    start_limit_interval_us: int = DEFAULT_START_LIMIT_INTERVAL_US
    start_limit_burst: int = DEFAULT_START_LIMIT_BURST
    syslog_identifier: str = ""
    fragment_mtime_ns: int = 0
    dropin_mtime_ns: int = 0
    warnings: tuple[str, ...] = ()

    @property
    def display_name(self) -> str:
        return self.description or self.name


def host_path(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def dropin_dir_names(name: str) -> list[str]:
    """``a-b.service`` -> ``a-b.service.d``, ``a-.service.d``, ``service.d`` (most specific
    first)."""
    stem, _, suffix = name.rpartition(".")
    names = [f"{name}.d"]
    pieces = stem.split("-")
    for count in range(len(pieces) - 1, 0, -1):
        names.append("-".join(pieces[:count]) + f"-.{suffix}.d")
    names.append(f"{suffix}.d")
    return names


def list_unit_dirs(root: Path) -> set[str]:
    """Directories that exist now (the unit path cache a daemon-reload takes)."""
    found: set[str] = set()
    for base in UNIT_DIRS:
        real = host_path(root, base)
        if real.is_dir():
            found.add(base)
            for child in real.iterdir():
                if child.is_dir():
                    found.add(f"{base}/{child.name}")
    return found


def find_unit_files(root: Path, name: str, dir_cache: set[str] | None) -> tuple[str, list[str]]:
    """The fragment path and the drop-in paths in the order they apply."""
    fragment = ""
    for base in UNIT_DIRS:
        if host_path(root, f"{base}/{name}").is_file():
            fragment = f"{base}/{name}"
            break
    chosen: dict[str, str] = {}
    for base in UNIT_DIRS:
        for dirname in dropin_dir_names(name):
            directory = f"{base}/{dirname}"
            if dir_cache is not None and directory not in dir_cache:
                continue
            real = host_path(root, directory)
            if not real.is_dir():
                continue
            for entry in sorted(real.iterdir()):
                if entry.name.endswith(".conf") and entry.is_file():
                    chosen.setdefault(entry.name, f"{directory}/{entry.name}")
    return fragment, [chosen[key] for key in sorted(chosen)]


def _mtime_ns(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def load_unit(root: Path, name: str, specifiers: Mapping[str, str]) -> UnitConfig:
    """Read and merge a unit's files now (what a daemon-reload does for one unit)."""
    fragment, dropins = find_unit_files(root, name, None)
    if not fragment:
        return UnitConfig(
            name=name,
            load_state="not-found",
            load_error=f'org.freedesktop.systemd1.NoSuchUnit "Unit {name} not found."',
        )
    specs = {**specifiers, "n": name, "N": name.rsplit(".", 1)[0], "p": name.split("@")[0]}
    specs["y"] = fragment
    values: dict[str, object] = {}
    exec_start: list[ExecCommand] = []
    environment: list[str] = []
    unset_environment: list[str] = []
    warnings: list[str] = []
    for path in [fragment, *dropins]:
        text = host_path(root, path).read_text(encoding="utf-8", errors="replace")
        for section, key, value in parse_unit_text(text):
            if not is_utf8_clean(value):
                warnings.append(
                    f"{path}: String is not UTF-8 clean, ignoring assignment: {key}={value}"
                )
                continue
            if section == "Service" and key == "ExecStart":
                if not value:
                    exec_start = []
                    continue
                try:
                    exec_start.extend(parse_exec(value, specs))
                except (SpecifierError, ValueError) as exc:
                    warnings.append(f"{path}: Failed to parse ExecStart= ({exc}): {value}")
            elif section == "Service" and key == "Environment":
                if not value:
                    environment = []
                    continue
                try:
                    environment = merge_environment(environment, parse_environment(value, specs))
                except (SpecifierError, ValueError):
                    warnings.append(f"{path}: Failed to parse Environment=, ignoring: {value}")
            elif section == "Service" and key == "UnsetEnvironment":
                if not value:
                    unset_environment = []
                    continue
                try:
                    for entry in parse_unset_environment(value, specs):
                        if entry not in unset_environment:
                            unset_environment.append(entry)
                except (SpecifierError, ValueError):
                    warnings.append(f"{path}: Failed to parse UnsetEnvironment=, ignoring: {value}")
            else:
                values[f"{section}.{key}"] = value
    config = UnitConfig(
        name=name,
        load_state="loaded",
        fragment_path=fragment,
        dropin_paths=tuple(dropins),
        description=str(values.get("Unit.Description", "")),
        type=str(values.get("Service.Type", "simple")) or "simple",
        restart=str(values.get("Service.Restart", "no")) or "no",
        exec_start=tuple(exec_start),
        environment=tuple(environment),
        unset_environment=tuple(unset_environment),
        kill_mode=str(values.get("Service.KillMode", "control-group")) or "control-group",
        syslog_identifier=str(values.get("Service.SyslogIdentifier", "")),
        fragment_mtime_ns=_mtime_ns(host_path(root, fragment)),
        dropin_mtime_ns=max([_mtime_ns(host_path(root, p)) for p in dropins], default=0),
    )
    config = _apply_timespans(config, values, warnings)
    problem = ""
    if not config.exec_start:
        problem = "Service has no ExecStart=, ExecStop=, or SuccessAction=. Refusing."
    elif len(config.exec_start) > 1 and config.type != "oneshot":
        problem = (
            "Service has more than one ExecStart= setting, which is only allowed for "
            "Type=oneshot services. Refusing."
        )
    if problem:
        warnings.append(problem)
        config = replace(
            config,
            load_state="bad-setting",
            load_error=(
                "org.freedesktop.systemd1.BadUnitSetting "
                f'"Unit {name} has a bad unit file setting."'
            ),
        )
    return replace(config, warnings=tuple(warnings))


def _apply_timespans(
    config: UnitConfig, values: Mapping[str, object], warnings: list[str]
) -> UnitConfig:
    def span(key: str, current: int | None) -> int | None:
        raw = values.get(key)
        if raw is None or raw == "":
            return current
        try:
            parsed = parse_timespan_us(str(raw))
        except ValueError:
            warnings.append(f"Failed to parse {key.split('.')[1]}={raw}, ignoring.")
            return current
        return None if parsed == 0 else parsed

    stop = span("Service.TimeoutStopSec", config.timeout_stop_us)
    if "Service.TimeoutSec" in values and "Service.TimeoutStopSec" not in values:
        stop = span("Service.TimeoutSec", config.timeout_stop_us)
    restart_sec = span("Service.RestartSec", config.restart_sec_us) or 0
    rate_interval = config.rate_limit.interval_us
    if "Service.LogRateLimitIntervalSec" in values:
        try:
            rate_interval = parse_timespan_us(str(values["Service.LogRateLimitIntervalSec"])) or 0
        except ValueError:
            warnings.append("Failed to parse LogRateLimitIntervalSec=, ignoring.")
    burst = config.rate_limit.burst
    with contextlib.suppress(ValueError):
        burst = int(str(values.get("Service.LogRateLimitBurst", burst)))
    limit_interval = config.start_limit_interval_us
    if "Unit.StartLimitIntervalSec" in values:
        with contextlib.suppress(ValueError):
            limit_interval = parse_timespan_us(str(values["Unit.StartLimitIntervalSec"])) or 0
    limit_burst = config.start_limit_burst
    with contextlib.suppress(ValueError):
        limit_burst = int(str(values.get("Unit.StartLimitBurst", limit_burst)))
    return replace(
        config,
        timeout_stop_us=stop,
        restart_sec_us=restart_sec,
        rate_limit=RateLimit(interval_us=rate_interval, burst=burst),
        start_limit_interval_us=limit_interval,
        start_limit_burst=limit_burst,
    )


def need_daemon_reload(root: Path, config: UnitConfig, dir_cache: set[str]) -> bool:
    """systemd's unit_need_daemon_reload: fragment newer or gone, drop-in list changed (as seen
    through the path cache of the last reload), or a drop-in newer than at load time."""
    if config.fragment_path:
        real = host_path(root, config.fragment_path)
        if not real.exists() or _mtime_ns(real) > config.fragment_mtime_ns:
            return True
    current: list[str] = []
    if config.load_state == "loaded":
        _, current = find_unit_files(root, config.name, dir_cache)
    if tuple(current) != config.dropin_paths:
        return True
    return any(
        _mtime_ns(host_path(root, path)) > config.dropin_mtime_ns for path in config.dropin_paths
    )


# --- processes ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    sid: int
    state: str
    comm: str


def scan_processes() -> dict[int, ProcInfo]:
    procs: dict[int, ProcInfo] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as handle:
                raw = handle.read()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2 :].split()
        procs[int(entry.name)] = ProcInfo(
            int(entry.name), int(rest[1]), int(rest[3]), rest[0], comm
        )
    return procs


def group_members(sessions: set[int], procs: Mapping[int, ProcInfo]) -> set[int]:
    """Live processes in ``sessions`` plus their descendants (our stand-in for a cgroup)."""
    members = {p.pid for p in procs.values() if p.sid in sessions and p.state not in "ZX"}
    changed = True
    while changed:
        changed = False
        for proc in procs.values():
            if proc.pid not in members and proc.ppid in members and proc.state not in "ZX":
                members.add(proc.pid)
                changed = True
    return members


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return str(number)


def exit_description(code: int, status: int) -> str:
    """``code=exited, status=1/FAILURE`` or ``code=killed, status=9/KILL``."""
    if code == CLD_EXITED:
        return f"code=exited, status={status}/{EXIT_STATUS_NAMES.get(status, 'n/a')}"
    return f"code=killed, status={status}/{_signal_name(status)}"


# --- the manager ----------------------------------------------------------------------------


@dataclass(slots=True)
class ServiceRuntime:
    """What systemd keeps about a service between jobs."""

    active_state: str = "inactive"
    sub_state: str = "dead"
    result: str = "success"
    main_pid: int = 0
    invocation_id: str = ""
    exec_main_start_us: int = 0
    exec_main_start_mono_us: int = 0
    exec_main_exit_us: int = 0
    exec_main_exit_mono_us: int = 0
    exec_main_pid: int = 0
    exec_main_code: int = 0
    exec_main_status: int = 0
    nrestarts: int = 0
    job_id: int = 0
    starts: deque[float] = field(default_factory=deque)
    sessions: set[int] = field(default_factory=set)
    process: asyncio.subprocess.Process | None = None
    command: ExecCommand | None = None
    run_serial: int = 0
    finished_serial: int = 0
    stopping: bool = False
    stuck_pids: set[int] = field(default_factory=set)
    stuck_until: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    main_exited: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class UnitNotFound(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class BadUnitSetting(Exception):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class JobFailed(Exception):
    """A start job ended in failure; ``result`` is the unit's Result (e.g. start-limit-hit)."""

    def __init__(self, name: str, result: str) -> None:
        super().__init__(f"{name}: {result}")
        self.name = name
        self.result = result


@dataclass(frozen=True, slots=True)
class ManagerOptions:
    hostname: str
    child_env: Mapping[str, str] = field(default_factory=dict)
    """Added to every service's environment (under its Environment=)."""
    survives_sigkill_s: float = 0.0
    on_stuck: Callable[[list[int], float], None] | None = None
    """Called with the pids stuck in D-state and the epoch time they stay 'around' until."""


class ServiceManager:
    """The service manager of one simulated host."""

    def __init__(self, root: Path, journal: Journal, options: ManagerOptions) -> None:
        self.root = root
        self.journal = journal
        self.options = options
        self._units: dict[str, UnitConfig] = {}
        self._runtime: dict[str, ServiceRuntime] = {}
        self._dir_cache: set[str] = set()
        self._next_job = 100
        self._specifiers = {
            "H": options.hostname,
            "l": options.hostname.split(".")[0],
            "h": "/root",
            "u": "root",
            "U": "0",
            "g": "root",
            "G": "0",
            "t": "/run",
            "s": "/bin/sh",
            "E": "/etc",
            "S": "/var/lib",
            "C": "/var/cache",
            "L": "/var/log",
            "T": "/tmp",
            "V": "/var/tmp",
            "b": journal.boot_id,
            "m": journal.machine_id,
            "i": "",
            "I": "",
        }
        self._closed = False

    # loading

    def daemon_reload(self) -> None:
        self._dir_cache = list_unit_dirs(self.root)
        names = set(self._units) | set(self._runtime)
        for base in UNIT_DIRS:
            real = host_path(self.root, base)
            if real.is_dir():
                names |= {p.name for p in real.iterdir() if p.is_file()}
        self._units = {}
        for name in sorted(names):
            self._load(name)

    def _load(self, name: str) -> UnitConfig:
        config = load_unit(self.root, name, self._specifiers)
        if config.load_state != "not-found":
            self._units[name] = config
        for warning in config.warnings:
            self.journal.log_manager(
                f"{name}: {warning}", unit=name, invocation_id="", priority=3
            )
        return config

    def unit(self, name: str) -> UnitConfig:
        """The loaded unit; a unit never referenced before, or garbage-collected since, is loaded
        now from the files on disk (as systemd does: no daemon-reload needed for it)."""
        if name in self._units and not self._collect(name):
            return self._units[name]
        config = load_unit(self.root, name, self._specifiers)
        if config.load_state != "not-found":
            self._units[name] = config
        return config

    def _referenced(self, name: str) -> bool:
        """Whether another unit holds a dependency on ``name``: here, the enablement symlinks
        (``*.wants/NAME``, ``*.requires/NAME``) of the targets a booted host has active."""
        for base in UNIT_DIRS:
            real = host_path(self.root, base)
            if real.is_dir():
                for child in real.iterdir():
                    if child.name.endswith((".wants", ".requires")) and (child / name).exists():
                        return True
        return False

    def _collect(self, name: str) -> bool:
        """systemd's unit GC (CollectMode=inactive): an unreferenced unit that is inactive with
        no job and no process left is unloaded, forgetting its runtime state (ExecMain*,
        InvocationID, the start-limit count). Returns whether ``name`` was collected."""
        runtime = self._runtime.get(name)
        if runtime is not None and (
            runtime.active_state != "inactive"
            or runtime.job_id
            or runtime.lock.locked()
            or self._members(runtime)
        ):
            return False
        if self._referenced(name):
            return False
        self._units.pop(name, None)
        self._runtime.pop(name, None)
        return True

    def runtime(self, name: str) -> ServiceRuntime:
        return self._runtime.setdefault(name, ServiceRuntime())

    def needs_reload(self, name: str) -> bool:
        return need_daemon_reload(self.root, self.unit(name), self._dir_cache)

    def _new_job(self) -> int:
        self._next_job += 1
        return self._next_job

    def _log(self, name: str, message: str, priority: int = 6, **extra: str) -> None:
        runtime = self.runtime(name)
        self.journal.log_manager(
            message, unit=name, invocation_id=runtime.invocation_id, priority=priority, **extra
        )

    # jobs

    async def start(self, name: str) -> None:
        config = self.unit(name)
        if config.load_state == "not-found":
            raise UnitNotFound(name)
        if config.load_state == "bad-setting":
            raise BadUnitSetting(name)
        runtime = self.runtime(name)
        async with runtime.lock:
            await self._start_locked(config, runtime, automatic=False)

    async def stop(self, name: str) -> None:
        config = self.unit(name)
        runtime = self.runtime(name)
        if config.load_state == "not-found" and runtime.active_state == "inactive":
            raise UnitNotFound(name)
        async with runtime.lock:
            await self._stop_locked(config, runtime)

    async def restart(self, name: str) -> None:
        config = self.unit(name)
        if config.load_state == "not-found":
            raise UnitNotFound(name)
        if config.load_state == "bad-setting":
            raise BadUnitSetting(name)
        runtime = self.runtime(name)
        async with runtime.lock:
            await self._stop_locked(config, runtime)
            await self._start_locked(config, runtime, automatic=False)

    def reset_failed(self, name: str) -> None:
        config = self.unit(name)
        runtime = self.runtime(name)
        if config.load_state == "not-found" and runtime.active_state == "inactive":
            raise UnitNotFound(name)
        runtime.starts.clear()
        if runtime.active_state == "failed":
            runtime.active_state, runtime.sub_state, runtime.result = "inactive", "dead", "success"
            runtime.invocation_id = ""

    async def _start_locked(
        self, config: UnitConfig, runtime: ServiceRuntime, *, automatic: bool
    ) -> None:
        if runtime.active_state in ("active", "activating", "deactivating") and not automatic:
            return
        now = time.monotonic()
        window = config.start_limit_interval_us / USEC
        while runtime.starts and now - runtime.starts[0] > window:
            runtime.starts.popleft()
        if config.start_limit_interval_us > 0 and len(runtime.starts) >= config.start_limit_burst:
            runtime.active_state, runtime.sub_state = "failed", "failed"
            runtime.result = "start-limit-hit"
            self._log(config.name, f"{config.name}: Start request repeated too quickly.", 4)
            self._log(config.name, f"{config.name}: Failed with result 'start-limit-hit'.", 4)
            self._log(config.name, f"Failed to start {config.display_name}.", 3)
            raise JobFailed(config.name, "start-limit-hit")
        runtime.starts.append(now)
        leftovers = self._members(runtime)
        runtime.invocation_id = secrets.token_hex(16)
        runtime.result = "success"
        runtime.stuck_pids.clear()
        procs = scan_processes()
        for pid in sorted(leftovers):
            comm = procs[pid].comm if pid in procs else "?"
            self._log(
                config.name,
                f"{config.name}: Found left-over process {pid} ({comm}) in control group while "
                "starting unit. Ignoring.",
                4,
            )
            self._log(
                config.name,
                "This usually indicates unclean termination of a previous run, or service "
                "implementation deficiencies.",
                4,
            )
        command = config.exec_start[0]
        env = {
            "LANG": "C.UTF-8",
            "PATH": DEFAULT_PATH,
            "INVOCATION_ID": runtime.invocation_id,
            **self.options.child_env,
        }
        assignments = env_assignments_to_dict(config.environment)
        env.update(assignments)
        env = apply_unset_environment(env, config.unset_environment)
        argv = substitute_env(command.argv, env)
        runtime.command = command
        runtime.run_serial += 1
        runtime.main_exited = asyncio.Event()
        runtime.exec_main_code = runtime.exec_main_status = 0
        runtime.exec_main_exit_us = runtime.exec_main_exit_mono_us = 0
        runtime.exec_main_start_us = time.time_ns() // 1000
        runtime.exec_main_start_mono_us = time.monotonic_ns() // 1000
        # The stream is a pipe of our own, not asyncio's: on Python 3.11 Process.wait() waits
        # for asyncio's pipes to close too, which a left-over child holding them would block.
        read_fd, write_fd = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                executable=command.path,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                env=env,
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            runtime.active_state, runtime.sub_state, runtime.main_pid = "active", "running", 0
            self._log(config.name, f"Started {config.display_name}.")
            reason = exc.strerror or str(exc)
            self._log(config.name, f"{config.name}: Failed to execute {command.path}: {reason}", 3)
            self._log(
                config.name,
                f"{config.name}: Failed at step EXEC spawning {command.path}: {reason}",
                3,
            )
            self._log(
                config.name,
                f"{config.name}: Main process exited, {exit_description(CLD_EXITED, 203)}",
                5,
            )
            runtime.finished_serial = runtime.run_serial
            self._finish_exit(config, runtime, CLD_EXITED, 203)
            return
        os.close(write_fd)
        runtime.process = process
        runtime.main_pid = runtime.exec_main_pid = process.pid
        runtime.sessions.add(process.pid)
        runtime.active_state, runtime.sub_state = "active", "running"
        self._log(config.name, f"Started {config.display_name}.")
        source = StreamSource(
            unit=config.name,
            invocation_id=runtime.invocation_id,
            pid=process.pid,
            comm=_comm(process.pid, command.path),
            exe=command.path,
            cmdline=" ".join(argv),
            identifier=config.syslog_identifier or os.path.basename(argv[0] if argv else ""),
            rate_limit=config.rate_limit,
        )
        self._spawn(runtime, self._pump_output(read_fd, source))
        self._spawn(runtime, self._watch_main(config, runtime, process, runtime.run_serial))

    def _spawn(self, runtime: ServiceRuntime, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.ensure_future(coro)
        runtime.tasks.add(task)
        task.add_done_callback(runtime.tasks.discard)

    async def _pump_output(self, read_fd: int, source: StreamSource) -> None:
        """Copy the service's stdout+stderr stream into the journal line by line, until every
        process holding the stream (left-over children too) has closed it."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            await self._copy_lines(reader, source)
        finally:
            transport.close()

    async def _copy_lines(self, reader: asyncio.StreamReader, source: StreamSource) -> None:
        buffer = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self.journal.log_stream_line(source, line)
            while len(buffer) >= LINE_MAX:
                self.journal.log_stream_line(source, buffer[:LINE_MAX], broken=True)
                buffer = buffer[LINE_MAX:]
        if buffer:
            self.journal.log_stream_line(source, buffer)

    async def _watch_main(
        self,
        config: UnitConfig,
        runtime: ServiceRuntime,
        process: asyncio.subprocess.Process,
        serial: int,
    ) -> None:
        returncode = await process.wait()
        if returncode < 0:
            code, status = CLD_KILLED, -returncode
        else:
            code, status = CLD_EXITED, returncode
        runtime.exec_main_code, runtime.exec_main_status = code, status
        runtime.exec_main_exit_us = time.time_ns() // 1000
        runtime.exec_main_exit_mono_us = time.monotonic_ns() // 1000
        runtime.main_exited.set()
        if runtime.stopping or self._closed:
            return
        async with runtime.lock:
            if runtime.run_serial != serial or runtime.finished_serial == serial:
                return
            runtime.finished_serial = serial
            clean = (code == CLD_EXITED and status == 0) or (
                code == CLD_KILLED and status in CLEAN_SIGNALS
            )
            if not clean:
                self._log(config.name, f"{config.name}: Main process exited, "
                          f"{exit_description(code, status)}", 5)
            runtime.main_pid = 0
            if config.kill_mode in ("control-group", "mixed") and self._members(runtime):
                runtime.active_state, runtime.sub_state = "deactivating", "stop-sigterm"
                for pid in self._members(runtime):
                    _kill(pid, signal.SIGTERM)
                    _kill(pid, signal.SIGCONT)
                await self._wait_gone(config, runtime, config.timeout_stop_us)
            self._finish_exit(config, runtime, code, status)
            if (
                not clean
                and config.restart in ("on-failure", "always", "on-abnormal")
                and not self._closed
            ) or (clean and config.restart == "always" and not self._closed):
                self._spawn(runtime, self._auto_restart(config, runtime, serial))

    async def _auto_restart(self, config: UnitConfig, runtime: ServiceRuntime, serial: int) -> None:
        runtime.active_state, runtime.sub_state = "activating", "auto-restart"
        await asyncio.sleep(config.restart_sec_us / USEC)
        async with runtime.lock:
            if runtime.run_serial != serial or runtime.sub_state != "auto-restart":
                return
            runtime.nrestarts += 1
            self._log(
                config.name,
                f"{config.name}: Scheduled restart job, restart counter is at "
                f"{runtime.nrestarts}.",
            )
            self._log(config.name, f"Stopped {config.display_name}.")
            with contextlib.suppress(JobFailed):
                await self._start_locked(self.unit(config.name), runtime, automatic=True)

    def _finish_exit(
        self, config: UnitConfig, runtime: ServiceRuntime, code: int, status: int
    ) -> None:
        runtime.exec_main_code, runtime.exec_main_status = code, status
        runtime.main_pid = 0
        runtime.process = None
        clean = (code == CLD_EXITED and status == 0) or (
            code == CLD_KILLED and status in CLEAN_SIGNALS
        )
        if clean and runtime.result == "success":
            self._log(config.name, f"{config.name}: Deactivated successfully.")
            runtime.active_state, runtime.sub_state = "inactive", "dead"
            runtime.invocation_id = ""
            return
        if runtime.result == "success":
            runtime.result = "exit-code" if code == CLD_EXITED else "signal"
        self._log(config.name, f"{config.name}: Failed with result '{runtime.result}'.", 4)
        runtime.active_state, runtime.sub_state = "failed", "failed"

    def _members(self, runtime: ServiceRuntime) -> set[int]:
        members = group_members(runtime.sessions, scan_processes())
        if runtime.stuck_pids and time.monotonic() < runtime.stuck_until:
            members |= runtime.stuck_pids
        return members

    async def _wait_gone(
        self, config: UnitConfig, runtime: ServiceRuntime, timeout_us: int | None
    ) -> bool:
        """Wait until the processes the stop waits for are gone; False on timeout."""
        deadline = None if timeout_us is None else time.monotonic() + timeout_us / USEC
        while True:
            main_done = runtime.main_exited.is_set() or runtime.process is None
            if config.kill_mode in ("process", "none"):
                stuck = bool(runtime.stuck_pids) and time.monotonic() < runtime.stuck_until
                if main_done and not stuck:
                    return True
            elif main_done and not self._members(runtime):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)

    async def _stop_locked(self, config: UnitConfig, runtime: ServiceRuntime) -> None:
        if runtime.sub_state == "auto-restart":
            runtime.active_state, runtime.sub_state = "inactive", "dead"
            return
        if runtime.active_state not in ("active", "activating", "deactivating"):
            return
        runtime.job_id = self._new_job()
        runtime.stopping = True
        runtime.finished_serial = runtime.run_serial
        try:
            await self._stop_sequence(config, runtime)
        finally:
            runtime.stopping = False
            runtime.job_id = 0

    async def _stop_sequence(self, config: UnitConfig, runtime: ServiceRuntime) -> None:
        name = config.name
        runtime.active_state, runtime.sub_state = "deactivating", "stop-sigterm"
        self._log(name, f"Stopping {config.display_name}...")
        main = runtime.main_pid
        members = self._members(runtime)
        stuck = self.options.survives_sigkill_s > 0
        if stuck:
            for pid in members:
                _kill(pid, signal.SIGSTOP)
        if config.kill_mode in ("control-group",):
            targets = members
        elif config.kill_mode in ("process", "mixed"):
            targets = {main} if main else set()
        else:
            targets = set()
        for pid in targets:
            _kill(pid, signal.SIGTERM)
            if not stuck:
                _kill(pid, signal.SIGCONT)
        done = config.kill_mode == "none" or await self._wait_gone(
            config, runtime, config.timeout_stop_us
        )
        if not done:
            self._log(name, f"{name}: State 'stop-sigterm' timed out. Killing.", 4)
            runtime.sub_state = "stop-sigkill"
            runtime.result = "timeout"
            procs = scan_processes()
            if config.kill_mode in ("control-group", "mixed"):
                victims = self._members(runtime)
            else:
                victims = {main} if main else set()
            for pid in sorted(victims):
                comm = procs[pid].comm if pid in procs else "?"
                self._log(name, f"{name}: Killing process {pid} ({comm}) with signal SIGKILL.", 4)
                _kill(pid, signal.SIGKILL)
            if stuck:
                until = time.monotonic() + self.options.survives_sigkill_s
                runtime.stuck_pids, runtime.stuck_until = set(victims), until
                if self.options.on_stuck is not None:
                    held_until = time.time() + self.options.survives_sigkill_s
                    self.options.on_stuck(sorted(victims), held_until)
            done = await self._wait_gone(config, runtime, config.timeout_stop_us)
            if not done:
                self._log(
                    name, f"{name}: Processes still around after final SIGKILL. Entering failed "
                    "mode.", 4,
                )
        if runtime.main_exited.is_set() and runtime.exec_main_pid == main:
            code, status = runtime.exec_main_code, runtime.exec_main_status
            clean = (code == CLD_EXITED and status == 0) or (
                code == CLD_KILLED and status in CLEAN_SIGNALS
            )
            if not clean:
                self._log(name, f"{name}: Main process exited, {exit_description(code, status)}", 5)
                if runtime.result == "success":
                    runtime.result = "exit-code" if code == CLD_EXITED else "signal"
        if config.kill_mode in ("process", "none"):
            procs = scan_processes()
            for pid in sorted(self._members(runtime) - {main}):
                comm = procs[pid].comm if pid in procs else "?"
                self._log(
                    name, f"{name}: Unit process {pid} ({comm}) remains running after unit "
                    "stopped.", 4,
                )
        runtime.main_pid = 0
        runtime.process = None
        if runtime.result == "success":
            self._log(name, f"{name}: Deactivated successfully.")
            self._log(name, f"Stopped {config.display_name}.")
            runtime.active_state, runtime.sub_state = "inactive", "dead"
            runtime.invocation_id = ""
        else:
            self._log(name, f"{name}: Failed with result '{runtime.result}'.", 4)
            self._log(name, f"Stopped {config.display_name}.")
            runtime.active_state, runtime.sub_state = "failed", "failed"

    # shutdown

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Kill every process any unit ever started (SIGKILL, by pid) and wait for them."""
        self._closed = True
        for runtime in self._runtime.values():
            for task in list(runtime.tasks):
                task.cancel()
        deadline = time.monotonic() + timeout
        while True:
            procs = scan_processes()
            alive: set[int] = set()
            for runtime in self._runtime.values():
                alive |= group_members(runtime.sessions, procs)
            for pid in alive:
                _kill(pid, signal.SIGKILL)
            for runtime in self._runtime.values():
                if runtime.process is not None and runtime.process.returncode is None:
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(runtime.process.wait(), 0.5)
            if not alive or time.monotonic() > deadline:
                return
            await asyncio.sleep(_POLL_S)

    def unit_programs(self) -> set[str]:
        """argv[0] (and path) of every loaded unit's ExecStart: commands that run for real."""
        programs: set[str] = set()
        for config in self._units.values():
            for command in config.exec_start:
                programs.add(command.path)
                if command.argv:
                    programs.add(command.argv[0])
        return programs

    def unit_pids(self) -> set[int]:
        pids: set[int] = set()
        procs = scan_processes()
        for runtime in self._runtime.values():
            pids |= group_members(runtime.sessions, procs)
        return pids

    # properties

    def properties(self, name: str) -> list[tuple[str, str]]:
        """``systemctl show`` properties in systemd's order (Service, cgroup, exec, kill, Unit)."""
        config = self.unit(name)
        rt = self.runtime(name)
        exec_lines = [_exec_property(cmd, rt) for cmd in config.exec_start] or [""]
        found = config.load_state != "not-found"
        if not found:
            exec_lines = []  # an empty exec list prints no line at all
        running = rt.active_state in ("active", "deactivating") or bool(self._members(rt))
        props: list[tuple[str, str]] = [
            ("Type", config.type if found else ""),
            ("Restart", config.restart),
            ("TimeoutStopUSec", format_timespan(config.timeout_stop_us)),
            ("MainPID", str(rt.main_pid)),
            ("Result", rt.result),
            ("NRestarts", str(rt.nrestarts)),
            ("ExecMainStartTimestamp", format_timestamp(rt.exec_main_start_us)),
            ("ExecMainStartTimestampMonotonic", str(rt.exec_main_start_mono_us)),
            ("ExecMainExitTimestamp", format_timestamp(rt.exec_main_exit_us)),
            ("ExecMainExitTimestampMonotonic", str(rt.exec_main_exit_mono_us)),
            ("ExecMainPID", str(rt.exec_main_pid)),
            ("ExecMainCode", str(rt.exec_main_code)),
            ("ExecMainStatus", str(rt.exec_main_status)),
            *(("ExecStart", line) for line in exec_lines),
            ("Slice", "system.slice" if config.load_state != "not-found" else ""),
            ("ControlGroup", f"/system.slice/{name}" if running else ""),
            ("Environment", " ".join(shell_maybe_quote(e) for e in config.environment)),
            ("UnsetEnvironment", " ".join(shell_maybe_quote(e) for e in config.unset_environment)),
            ("KillMode", config.kill_mode),
            ("Id", name),
            ("Names", name),
            ("Description", config.display_name),
            ("LoadState", config.load_state),
            ("ActiveState", rt.active_state),
            ("SubState", rt.sub_state),
            ("FragmentPath", config.fragment_path),
            ("DropInPaths", " ".join(config.dropin_paths)),
            ("Job", str(rt.job_id) if rt.job_id else ""),
            ("NeedDaemonReload", "yes" if self.needs_reload(name) else "no"),
            ("LoadError", config.load_error),
            ("InvocationID", rt.invocation_id),
        ]
        return props

    def cat(self, name: str) -> tuple[bytes, bool]:
        """``systemctl cat`` output of the loaded unit's files as they are on disk now."""
        config = self.unit(name)
        if config.load_state == "not-found":
            return b"", False
        out = b""
        for index, path in enumerate([config.fragment_path, *config.dropin_paths]):
            try:
                content = host_path(self.root, path).read_bytes()
            except OSError:
                continue
            out += (b"\n" if index else b"") + f"# {path}\n".encode() + content
        return out, True


def _comm(pid: int, fallback: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return os.path.basename(fallback)[:15]


def _exec_property(command: ExecCommand, rt: ServiceRuntime) -> str:
    """``{ path=... ; argv[]=... ; ignore_errors=no ; start_time=[...] ; ... }``."""
    ran = rt.command == command and rt.exec_main_start_us > 0
    start = format_timestamp(rt.exec_main_start_us) if ran else ""
    stop = format_timestamp(rt.exec_main_exit_us) if ran else ""
    pid = rt.exec_main_pid if ran else 0
    code, status = (rt.exec_main_code, rt.exec_main_status) if ran else (0, 0)
    code_name = {CLD_EXITED: "exited", CLD_KILLED: "killed"}.get(code, "(null)")
    status_text = f"{status}" if code == CLD_EXITED else f"{status}/{_signal_name(status)}"
    return (
        f"{{ path={command.path} ; argv[]={' '.join(command.argv)} ; "
        f"ignore_errors={'yes' if command.ignore_errors else 'no'} ; "
        f"start_time=[{start or 'n/a'}] ; stop_time=[{stop or 'n/a'}] ; pid={pid} ; "
        f"code={code_name} ; status={status_text} }}"
    )


# --- systemctl ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommandOutput:
    exit_status: int
    stdout: bytes = b""
    stderr: bytes = b""


_JOB_EXPLANATIONS = {
    "start-limit-hit": "start of the service was attempted too often",
    "exit-code": "the control process exited with error code",
    "timeout": "a timeout was exceeded",
    "signal": "a fatal signal was delivered to the control process",
}


def _job_failed_message(name: str, result: str) -> str:
    why = _JOB_EXPLANATIONS.get(result)
    head = f"Job for {name} failed because {why}." if why else f"Job for {name} failed."
    text = f'{head}\nSee "systemctl status {name}" and "journalctl -xeu {name}" for details.\n'
    if result == "start-limit-hit":
        text += (
            f'To force a start use "systemctl reset-failed {name}"\n'
            f'followed by "systemctl start {name}" again.\n'
        )
    return text


def _reload_warning(name: str) -> str:
    return (
        f"Warning: The unit file, source configuration file or drop-ins of {name} changed on "
        "disk. Run 'systemctl daemon-reload' to reload units.\n"
    )


async def run_systemctl(manager: ServiceManager, argv: Sequence[str]) -> CommandOutput:
    """``systemctl ARGS`` against ``manager`` with systemctl's output and exit codes.

    Jobs run as tasks of their own: a caller that goes away (SSH connection dropped) does not
    cancel a job, as on a real host where the job belongs to PID 1, not to systemctl.
    """
    try:
        options, words = getopt.gnu_getopt(
            list(argv),
            "p:P:aql",
            ["property=", "value", "all", "no-block", "no-pager", "quiet", "no-legend", "full",
             "system", "no-ask-password", "plain"],
        )
    except getopt.GetoptError as exc:
        return CommandOutput(1, stderr=f"systemctl: unrecognized option '{exc.opt}'\n".encode())
    properties: list[str] = []
    value_only = show_all = no_block = quiet = False
    for option, value in options:
        if option in ("-p", "--property", "-P"):
            properties += [part for part in value.split(",") if part]
            value_only = value_only or option == "-P"
        elif option == "--value":
            value_only = True
        elif option in ("-a", "--all"):
            show_all = True
        elif option == "--no-block":
            no_block = True
        elif option in ("-q", "--quiet"):
            quiet = True
    if not words:
        return CommandOutput(1, stderr=b"Too few arguments.\n")
    verb, names = words[0], [mangle_unit_name(n) for n in words[1:]]
    if verb == "daemon-reload":
        manager.daemon_reload()
        return CommandOutput(0)
    if verb == "show":
        return _show(manager, names, properties, value_only, show_all)
    if verb == "cat":
        return _cat(manager, names)
    if verb in ("is-active", "is-failed"):
        return _is_state(manager, verb, names, quiet)
    if verb == "reset-failed":
        return _reset_failed(manager, names)
    if verb in ("start", "stop", "restart"):
        if not names:
            return CommandOutput(1, stderr=b"Too few arguments.\n")
        return await _job_verb(manager, verb, names, no_block)
    return CommandOutput(1, stderr=f"Unknown command verb '{verb}'.\n".encode())


def _show(
    manager: ServiceManager,
    names: list[str],
    wanted: list[str],
    value_only: bool,
    show_all: bool,
) -> CommandOutput:
    if not names:
        return CommandOutput(1, stderr=b"systemctl show without a unit is not simulated\n")
    blocks: list[str] = []
    for name in names:
        lines: list[str] = []
        for key, value in manager.properties(name):
            if wanted and key not in wanted:
                continue
            if not wanted and not show_all and value == "":
                continue
            lines.append(value if value_only else f"{key}={value}")
        blocks.append("".join(line + "\n" for line in lines))
    return CommandOutput(0, stdout="\n".join(blocks).encode())


def _cat(manager: ServiceManager, names: list[str]) -> CommandOutput:
    out, err = b"", b""
    for index, name in enumerate(names):
        content, found = manager.cat(name)
        if not found:
            missing = f"No files found for {name}.\n".encode()
            return CommandOutput(1, stdout=out, stderr=err + missing)
        if manager.needs_reload(name):
            err += (
                f"# Warning: {name} changed on disk, the version systemd has loaded is outdated.\n"
                "# This output shows the current version of the unit's original fragment and "
                "drop-in files.\n"
                "# If fragments or drop-ins were added or removed, they are not properly "
                "reflected in this output.\n"
                "# Run 'systemctl daemon-reload' to reload units.\n"
            ).encode()
        out += (b"\n" if index else b"") + content
    return CommandOutput(0, stdout=out, stderr=err)


def _is_state(manager: ServiceManager, verb: str, names: list[str], quiet: bool) -> CommandOutput:
    states = [manager.runtime(name).active_state for name in names]
    good = {"active", "reloading"} if verb == "is-active" else {"failed"}
    ok = any(state in good for state in states)
    out = b"" if quiet else "".join(f"{s}\n" for s in states).encode()
    return CommandOutput(0 if ok else (3 if verb == "is-active" else 1), stdout=out)


def _reset_failed(manager: ServiceManager, names: list[str]) -> CommandOutput:
    for name in names:
        try:
            manager.reset_failed(name)
        except UnitNotFound:
            return CommandOutput(
                1, stderr=f"Failed to reset failed state of unit {name}: Unit {name} not loaded.\n"
                .encode()
            )
    return CommandOutput(0)


async def _job_verb(
    manager: ServiceManager, verb: str, names: list[str], no_block: bool
) -> CommandOutput:
    err = b""
    operation = {"start": manager.start, "stop": manager.stop, "restart": manager.restart}[verb]
    for name in names:
        config = manager.unit(name)
        enqueues = config.load_state == "loaded" or (
            verb == "stop" and config.load_state != "not-found"
        )
        if verb != "stop" and enqueues and manager.needs_reload(name):
            err += _reload_warning(name).encode()
        job = asyncio.ensure_future(operation(name))
        job.add_done_callback(_consume_outcome)
        if no_block:
            await asyncio.sleep(0)
            if not job.done():
                continue
        try:
            await asyncio.shield(job)
        except UnitNotFound:
            what = "not found" if verb != "stop" else "not loaded"
            return CommandOutput(
                5, stderr=err + f"Failed to {verb} {name}: Unit {name} {what}.\n".encode()
            )
        except BadUnitSetting:
            return CommandOutput(
                1,
                stderr=err
                + (
                    f"Failed to {verb} {name}: Unit {name} has a bad unit file setting.\n"
                    f"See system logs and 'systemctl status {name}' for details.\n"
                ).encode(),
            )
        except JobFailed as exc:
            return CommandOutput(1, stderr=err + _job_failed_message(name, exc.result).encode())
    return CommandOutput(0, stderr=err)


def _consume_outcome(job: asyncio.Future[None]) -> None:
    """A job's failure is reported to the caller that waited; nobody else needs it."""
    if not job.cancelled():
        job.exception()
