"""The SGLang unit as systemd sees it: state, files, our drop-in applied and verified, restore.

Facts this code rests on (FACTS: systemd): ``systemctl show`` prints ``Key=value`` lines in
systemd's order, unset values as ``Key=``; ``show -p ExecStart`` joins argv unquoted, so the
exact argv comes from the unit files (``systemctl cat``) read with systemd's own rules; after
writing a drop-in only ``daemon-reload`` makes it count, and a later drop-in (lexical order across
/etc, /run, /lib) silently overrides ours, so every install is verified against what loaded.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, Protocol

from orchestrator.host.dropin import (
    DropinHeader,
    ExecLineError,
    TrialInvocation,
    dropin_path,
    parse_dropin_header,
    parse_environment_line,
    parse_exec_line,
)
from orchestrator.host.errors import HostError
from orchestrator.host.launchdir import (
    launch_files_differing,
    put_launch_files,
    read_found_launch_files,
    restore_launch_files,
)
from orchestrator.host.launchfile import LaunchFile
from orchestrator.host.transport import (
    CompletedCommand,
    Transport,
    command_evidence,
    is_temp_beside,
)
from orchestrator.log import get_logger
from orchestrator.types import FailureCause

STATE_PROPERTIES = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "MainPID",
    "InvocationID",
    "ExecMainStatus",
    "ExecMainCode",
    "ExecMainStartTimestampMonotonic",
    "NRestarts",
    "Job",
    "NeedDaemonReload",
    "DropInPaths",
    "FragmentPath",
    "KillMode",
    "TimeoutStopUSec",
    "Type",
    "ExecStart",
)

_EXEC_PREFIX = re.compile(r"^[-@:+!]+")
_TIMESPAN = re.compile(r"(\d+(?:\.\d+)?)\s*([a-zμ]*)")
_TIMESPAN_UNITS = {
    "": 1.0,
    "us": 1e-6,
    "usec": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "msec": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
    "w": 604800.0,
    "week": 604800.0,
    "weeks": 604800.0,
    "month": 2629800.0,
    "months": 2629800.0,
    "M": 2629800.0,
    "y": 31557600.0,
    "year": 31557600.0,
    "years": 31557600.0,
}
# Highest priority first: a same-named drop-in in /etc masks those in /run and /lib.
_DIR_PRIORITY = (
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
)
_UNIT_FILE_SUFFIX = re.compile(
    r"\.(conf|service|socket|target|timer|mount|automount|swap|path|slice|scope|device)$"
)


# --- errors --------------------------------------------------------------------------------


class SystemdError(HostError):
    """A systemd operation on a unit failed (``systemctl`` exited non-zero, ``daemon-reload``
    failed); carries the unit and the command's output."""

    def __init__(self, unit: str, message: str, result: CompletedCommand | None = None) -> None:
        detail = f": {result.stderr_text().strip()[-400:]}" if result is not None else ""
        super().__init__(f"{unit}: {message}{detail}")
        self.unit = unit
        self.result = result

    @property
    def evidence(self) -> dict[str, Any]:
        found: dict[str, Any] = {"unit": self.unit}
        if self.result is not None:
            found.update(command_evidence(self.result))
        return found


class UnitFileError(ValueError):
    """A unit file line systemd would not take, or whose argv cannot be read literally."""

    def __init__(self, path: str, line: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}: {line!r}")
        self.path = path
        self.line = line
        self.reason = reason


class DropInNotApplied(SystemdError):
    """After daemon-reload, systemd is not running what our drop-in says; ``problems`` says why."""

    cause: FailureCause = "config-mismatch"

    def __init__(
        self, unit: str, problems: Sequence[str], state: UnitState, files: Sequence[UnitFile]
    ) -> None:
        super().__init__(unit, "drop-in not applied: " + "; ".join(problems))
        self.problems = tuple(problems)
        self.state = state
        self.files = tuple(files)

    @property
    def evidence(self) -> dict[str, Any]:
        return {**super().evidence, "problems": list(self.problems)}


class RestoreIncomplete(SystemdError):
    """After restore, one of the files we changed does not hold its original bytes: what is on
    the host is not what we wrote."""

    cause: FailureCause = "config-mismatch"

    def __init__(self, unit: str, paths: Sequence[str]) -> None:
        super().__init__(unit, f"files not restored byte-identical: {', '.join(paths)}")
        self.paths = tuple(paths)

    @property
    def evidence(self) -> dict[str, Any]:
        return {**super().evidence, "paths": list(self.paths)}


# --- pure: systemctl show --------------------------------------------------------------------


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show`` output -> {key: value}; order-free, ``Key=`` gives ``""``, the value
    keeps every ``=`` after the first."""
    properties: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            properties[key] = value
    return properties


def parse_timespan(text: str) -> float:
    """systemd's time span (``1min 30s``, ``500ms``, ``infinity``, ``90``) -> seconds."""
    value = text.strip()
    if value == "infinity":
        return math.inf
    if not value:
        raise ValueError("empty time span")
    total = 0.0
    position = 0
    for found in _TIMESPAN.finditer(value):
        if value[position : found.start()].strip():
            break
        number, unit = found.groups()
        if unit not in _TIMESPAN_UNITS:
            raise ValueError(f"unknown time unit {unit!r} in {text!r}")
        total += float(number) * _TIMESPAN_UNITS[unit]
        position = found.end()
    if value[position:].strip() or position == 0:
        raise ValueError(f"not a time span: {text!r}")
    return total


def _optional_int(text: str | None) -> int | None:
    if text is None or text == "" or text == "[not set]":
        return None
    try:
        return int(text)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class UnitState:
    """The typed subset of ``systemctl show`` the restart protocol decides on."""

    load_state: str
    active_state: str
    sub_state: str
    result: str
    main_pid: int | None
    invocation_id: str | None
    exec_main_status: int | None
    exec_main_code: int | None
    exec_main_start_monotonic: int | None
    n_restarts: int | None
    job: str | None
    need_daemon_reload: bool | None
    drop_in_paths: tuple[str, ...]
    fragment_path: str | None
    kill_mode: str | None
    timeout_stop_s: float | None
    type: str | None
    exec_start_shown: str | None
    raw: Mapping[str, str] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        return self.load_state not in ("not-found", "")

    @property
    def running(self) -> bool:
        return self.active_state in ("active", "activating", "reloading")


def unit_state(properties: Mapping[str, str]) -> UnitState:
    """Typed state from parsed ``show`` output; absent or empty properties become None."""

    def text(key: str) -> str | None:
        value = properties.get(key)
        return value if value else None

    main_pid = _optional_int(properties.get("MainPID"))
    reload_flag = properties.get("NeedDaemonReload")
    timeout = text("TimeoutStopUSec")
    return UnitState(
        load_state=properties.get("LoadState", ""),
        active_state=properties.get("ActiveState", ""),
        sub_state=properties.get("SubState", ""),
        result=properties.get("Result", ""),
        main_pid=main_pid if main_pid else None,
        invocation_id=text("InvocationID"),
        exec_main_status=_optional_int(properties.get("ExecMainStatus")),
        exec_main_code=_optional_int(properties.get("ExecMainCode")),
        exec_main_start_monotonic=_optional_int(properties.get("ExecMainStartTimestampMonotonic")),
        n_restarts=_optional_int(properties.get("NRestarts")),
        job=text("Job"),
        need_daemon_reload=None if reload_flag in (None, "") else reload_flag == "yes",
        drop_in_paths=tuple((properties.get("DropInPaths") or "").split()),
        fragment_path=text("FragmentPath"),
        kill_mode=text("KillMode"),
        timeout_stop_s=parse_timespan(timeout) if timeout else None,
        type=text("Type"),
        exec_start_shown=text("ExecStart"),
        raw=dict(properties),
    )


def shown_exec_argv(exec_start_shown: str) -> str | None:
    """The space-joined ``argv[]=`` of ``show -p ExecStart`` (ambiguous, but it is what LOADED)."""
    found = re.search(r"argv\[\]=(.*?) ; ignore_errors=", exec_start_shown)
    return found.group(1) if found else None


# --- pure: unit files ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UnitFile:
    path: str
    text: str

    @property
    def is_dropin(self) -> bool:
        return PurePosixPath(self.path).parent.name.endswith(".d")


def parse_cat(text: str) -> list[UnitFile]:
    """``systemctl cat UNIT`` -> its files in order. Each starts with a ``# /path`` header; files
    after the first are preceded by one blank line that systemctl adds (removed here)."""
    files: list[UnitFile] = []
    path: str | None = None
    lines: list[str] = []
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\n")
        if (
            stripped.startswith("# /")
            and _UNIT_FILE_SUFFIX.search(stripped)
            and (path is None or (lines and lines[-1] == "\n"))
        ):
            if path is not None:
                files.append(UnitFile(path, "".join(lines[:-1])))
            path, lines = stripped[2:], []
            continue
        if path is not None:
            lines.append(line)
    if path is not None:
        files.append(UnitFile(path, "".join(lines)))
    return files


def _priority(path: str) -> int:
    for rank, directory in enumerate(_DIR_PRIORITY):
        if path.startswith(directory + "/"):
            return rank
    return len(_DIR_PRIORITY)


def order_files(files: Iterable[UnitFile]) -> list[UnitFile]:
    """The fragment first, then drop-ins in systemd's order: by file name across directories,
    a same-named file in a higher-priority directory masking the others."""
    files = list(files)
    fragments = [f for f in files if not f.is_dropin]
    chosen: dict[str, UnitFile] = {}
    for dropin in sorted((f for f in files if f.is_dropin), key=lambda f: _priority(f.path)):
        chosen.setdefault(PurePosixPath(dropin.path).name, dropin)
    return fragments[:1] + [chosen[name] for name in sorted(chosen)]


def _logical_lines(text: str) -> Iterable[str]:
    """Unit-file lines with comments dropped and backslash continuations joined (systemd
    replaces the trailing backslash with a space; comment lines inside a continuation are
    skipped)."""
    continuation: str | None = None
    # systemd ends a line only at \n, \r or NUL (str.splitlines would also break at U+0085,
    # U+2028, form feed, ... and read back an argv other than the one systemd runs).
    for raw_line in re.split(r"\r\n|[\n\r\0]", text):
        line = raw_line.strip()
        if line.startswith(("#", ";")):
            continue
        if continuation is None and not line:
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            continuation = (continuation or "") + line[:-1] + " "
            continue
        yield (continuation or "") + line
        continuation = None
    if continuation is not None:
        yield continuation


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """The ``[Service]`` settings that result from a unit's fragment and drop-ins."""

    exec_start: tuple[str, ...]
    exec_start_prefix: str
    exec_start_source: str | None
    environment: Mapping[str, str]
    environment_files: tuple[str, ...]
    kill_mode: str | None
    timeout_stop_s: float | None
    type: str | None
    user: str | None
    settings: Mapping[str, tuple[str, ...]]


def _service_assignments(files: Iterable[UnitFile]) -> Iterator[tuple[str, str, str, str]]:
    """Every ``[Service]`` assignment of the unit's files in the order systemd applies them:
    the file's path, the logical line, its key and its value."""
    for unit_file in order_files(files):
        section = ""
        for line in _logical_lines(unit_file.text):
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                continue
            key, sep, value = line.partition("=")
            if section == "Service" and sep:
                yield unit_file.path, line, key.strip(), value.strip()


def _exec_start(value: str, source: str) -> tuple[tuple[str, ...], str]:
    """The argv of the ``ExecStart=`` that counts (``value``, from ``source``) and its prefix
    characters (``-``, ``@``, ``+``, ...)."""
    try:
        words = parse_exec_line(value)
    except ExecLineError as exc:
        raise UnitFileError(source, value, exc.reason) from exc
    if not words:
        return (), ""
    found = _EXEC_PREFIX.match(words[0])
    prefix = found.group(0) if found else ""
    words[0] = words[0][len(prefix) :]
    # '@': the first word is the executable, the second argv[0].
    return tuple(words[1:] if "@" in prefix else words), prefix


def merged_service(files: Iterable[UnitFile]) -> ServiceConfig:
    """Apply the unit's files with systemd's drop-in semantics: ``ExecStart=`` empty resets the
    list, ``Environment=`` accumulates (empty resets), later single-valued keys win."""
    exec_lines: list[tuple[str, str]] = []
    environment: dict[str, str] = {}
    environment_files: list[str] = []
    settings: dict[str, list[str]] = {}
    for path, line, key, value in _service_assignments(files):
        try:
            if key == "ExecStart":
                exec_lines = [] if not value else [*exec_lines, (value, path)]
            elif key == "Environment":
                if value:
                    environment.update(parse_environment_line(value))
                else:
                    environment.clear()
            elif key == "EnvironmentFile":
                if value:
                    environment_files.append(value)
                else:
                    environment_files.clear()
        except ExecLineError as exc:
            raise UnitFileError(path, line, exc.reason) from exc
        settings.setdefault(key, []).append(value)

    def last(key: str) -> str | None:
        values = [v for v in settings.get(key, []) if v]
        return values[-1] if values else None

    source = exec_lines[-1][1] if exec_lines else None
    argv, prefix = _exec_start(*exec_lines[-1]) if exec_lines else ((), "")
    timeout = last("TimeoutStopSec") or last("TimeoutSec")
    return ServiceConfig(
        exec_start=argv,
        exec_start_prefix=prefix,
        exec_start_source=source,
        environment=environment,
        environment_files=tuple(environment_files),
        kill_mode=last("KillMode"),
        timeout_stop_s=parse_timespan(timeout) if timeout else None,
        type=last("Type"),
        user=last("User"),
        settings={key: tuple(values) for key, values in settings.items()},
    )


def verify_loaded(
    state: UnitState,
    service: ServiceConfig,
    expected_dropin_path: str,
    expected: TrialInvocation,
) -> list[str]:
    """Why systemd is NOT running what our drop-in asks (empty: it is)."""
    problems: list[str] = []
    if state.load_state != "loaded":
        problems.append(f"LoadState={state.load_state or '(none)'}")
    if state.need_daemon_reload:
        problems.append("NeedDaemonReload=yes: the loaded unit is older than its files")
    if expected_dropin_path not in state.drop_in_paths:
        problems.append(f"{expected_dropin_path} not in DropInPaths {list(state.drop_in_paths)}")
    if service.exec_start_source != expected_dropin_path:
        problems.append(
            f"ExecStart is set by {service.exec_start_source}, a drop-in applied after ours"
        )
    if service.exec_start != tuple(expected.argv):
        problems.append(f"ExecStart argv {list(service.exec_start)} != {list(expected.argv)}")
    if state.exec_start_shown is not None:
        shown = shown_exec_argv(state.exec_start_shown)
        # systemd 252 joins argv unquoted; accept a shell-quoted join should a version quote.
        joined = (" ".join(expected.argv), shlex.join(expected.argv))
        if shown is not None and shown not in joined:
            problems.append(f"loaded ExecStart argv[] is {shown!r}")
    if dict(service.environment) != dict(expected.environment):
        keys = set(service.environment) | set(expected.environment)
        differing = sorted(
            k for k in keys if service.environment.get(k) != expected.environment.get(k)
        )
        problems.append(f"Environment differs in {differing}")
    return problems


# --- I/O -----------------------------------------------------------------------------------


def _check_unit(unit: str) -> None:
    if not unit or unit.startswith("-") or "/" in unit or any(c.isspace() for c in unit):
        raise ValueError(f"not a unit name: {unit!r}")


async def _systemctl(
    transport: Transport,
    args: Sequence[str],
    unit: str,
    *,
    timeout: float,
    idempotent: bool = True,
) -> CompletedCommand:
    _check_unit(unit)
    result = await transport.run(
        ["systemctl", *args, unit], timeout=timeout, privileged=True, idempotent=idempotent
    )
    if not result.ok:
        raise SystemdError(unit, f"systemctl {' '.join(args)} exited {result.exit_status}", result)
    return result


async def show(
    transport: Transport,
    unit: str,
    props: Sequence[str] = STATE_PROPERTIES,
    *,
    timeout: float = 10.0,
) -> UnitState:
    """One ``systemctl show -p A,B,...`` call. An unknown unit is ``LoadState=not-found``."""
    result = await _systemctl(transport, ["show", "-p", ",".join(props)], unit, timeout=timeout)
    return unit_state(parse_show(result.stdout_text()))


async def cat(transport: Transport, unit: str, *, timeout: float = 10.0) -> list[UnitFile]:
    """``systemctl cat UNIT``: its files as the host's manager lists them."""
    result = await _systemctl(transport, ["cat", "--"], unit, timeout=timeout)
    return parse_cat(result.stdout_text())


async def listed_files(
    transport: Transport, unit: str, state: UnitState, *, timeout: float = 10.0
) -> list[UnitFile]:
    """The unit's files as ``systemctl cat`` finds them, for a caller that reads the manager
    itself (D-Bus): ``state``'s ``FragmentPath``, then its ``DropInPaths``, each read whole
    through ``transport``. That is what ``systemctl cat`` does with the manager's answer, less
    the headers it prints and ``parse_cat`` takes off again. Like it, a unit with no file is
    an error, and so is a listed file that is gone (the unit changed since it was loaded)."""
    paths = [p for p in (state.fragment_path, *state.drop_in_paths) if p]
    if not paths:
        raise SystemdError(unit, f"no files found (LoadState={state.load_state or '(none)'})")
    files = []
    for path in paths:
        try:
            data = await transport.read_file(path, timeout=timeout)
        except FileNotFoundError:
            raise SystemdError(unit, f"{path} is listed by the manager but absent") from None
        files.append(UnitFile(path, data.decode("utf-8", errors="replace")))
    return files


async def daemon_reload(transport: Transport, *, timeout: float = 60.0) -> None:
    result = await transport.run(
        ["systemctl", "daemon-reload"], timeout=timeout, privileged=True, idempotent=True
    )
    if not result.ok:
        raise SystemdError("(manager)", f"daemon-reload exited {result.exit_status}", result)


async def start(transport: Transport, unit: str, *, timeout: float, no_block: bool = False) -> None:
    """Start job; never retried after a reconnect (a start must not happen twice)."""
    args = ["start", "--no-block"] if no_block else ["start"]
    await _systemctl(transport, args, unit, timeout=timeout, idempotent=False)
    get_logger(host=transport.name, unit=unit).info("unit.start_requested")


async def stop(transport: Transport, unit: str, *, timeout: float) -> None:
    """Stop job; returns once the cgroup is empty (or raises after ``timeout``)."""
    await _systemctl(transport, ["stop"], unit, timeout=timeout)
    get_logger(host=transport.name, unit=unit).info("unit.stopped")


async def reset_failed(transport: Transport, unit: str, *, timeout: float = 10.0) -> None:
    await _systemctl(transport, ["reset-failed"], unit, timeout=timeout)


@dataclass(frozen=True, slots=True)
class ForeignChange:
    """A unit file someone else changed during the sweep: reported by a restore, never
    overwritten. ``sweep``/``trial``: the other sweep whose trial drop-in it is (its
    ``# managed-by:`` header), None for anyone else's edit."""

    path: str
    sweep: str | None = None
    trial: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"path": self.path, "sweep": self.sweep, "trial": self.trial}

    def describe(self) -> str:
        if self.sweep is None:
            return f"{self.path} changed by someone else"
        return f"{self.path} holds sweep '{self.sweep}' trial {self.trial} (left alone)"


@dataclass(frozen=True, slots=True)
class FileBytes:
    path: str
    data: bytes


@dataclass(frozen=True, slots=True)
class UnitSnapshot:
    """The unit as found, for backup and byte-exact restore: its files' bytes, our drop-in's
    prior content (None: absent), whether its directory existed, and the operator's launch
    files found beside it, with their modes (:mod:`orchestrator.host.launchdir`; any other
    there, a crashed run's of ours included, is absent, so a restore removes it)."""

    unit: str
    state: UnitState
    files: tuple[FileBytes, ...]
    dropin_path: str
    dropin_before: bytes | None
    dropin_dir_existed: bool
    dropin_mode: int = 0o644
    launch_before: tuple[LaunchFile, ...] = ()
    launch_managed: bool = False
    """Whether the engine launches from files, so its launch files were read as found and a
    restore puts them back (False: none can be ours, and nothing is listed for them)."""

    @property
    def stale_dropin(self) -> DropinHeader | None:
        """The header of a drop-in of ours left by an earlier (crashed) run, if one was found."""
        if self.dropin_before is None:
            return None
        return parse_dropin_header(self.dropin_before.decode("utf-8", errors="replace"))

    def without_stale_dropin(self) -> UnitSnapshot:
        """The snapshot as if our stale drop-in were absent, so restore removes it. The launch
        files it named are not in ``launch_before`` already (their marks say they are ours);
        an operator's file there (put back by a restore that stopped before the drop-in) is."""
        return replace(
            self,
            dropin_before=None,
            files=tuple(f for f in self.files if f.path != self.dropin_path),
        )


class UnitLoader(Protocol):
    """What reading a unit and installing or restoring its files need of the host's unit
    control: its state, its files as the manager lists them, and a reload. Every
    :class:`~orchestrator.host.unitcontrol.UnitControl` is one; it is declared here, under the
    control (which drives this module's ``systemctl`` commands), so the two import one way."""

    async def show(
        self, unit: str, props: Sequence[str] = STATE_PROPERTIES, *, timeout: float
    ) -> UnitState: ...

    async def cat(self, unit: str, *, timeout: float) -> list[UnitFile]: ...

    async def daemon_reload(self, *, timeout: float) -> None: ...


async def read_unit(
    transport: Transport,
    unit: str,
    *,
    control: UnitLoader,
    path: str | None = None,
    timeout: float = 20.0,
    launch_files: bool = False,
) -> UnitSnapshot:
    """Read the unit as found: state (from the host's unit control: D-Bus on a local host with
    a bus), and the exact bytes of its fragment and drop-ins (through the transport); with
    ``launch_files`` (an engine that launches from files), our drop-in's launch files too."""
    state = await control.show(unit, timeout=timeout)
    if not state.exists:
        raise SystemdError(unit, f"unit not loadable: LoadState={state.load_state}")
    target = path or str(dropin_path(unit))
    paths = [p for p in (state.fragment_path, *state.drop_in_paths) if p]
    files = [FileBytes(p, await transport.read_file(p, timeout=timeout)) for p in paths]
    before = next((f.data for f in files if f.path == target), None)
    if before is None:
        try:
            before = await transport.read_file(target, timeout=timeout)
        except FileNotFoundError:
            before = None
    directory = str(PurePosixPath(target).parent)
    probe = await transport.run(["test", "-d", directory], timeout=timeout, privileged=True)
    mode = 0o644
    if before is not None:
        stat = await transport.run(["stat", "-c", "%a", "--", target], timeout=timeout)
        if stat.ok and stat.stdout_text().strip().isdigit():
            mode = int(stat.stdout_text().strip(), 8)
    launch = (
        await read_found_launch_files(transport, target, timeout=timeout) if launch_files else ()
    )
    return UnitSnapshot(
        unit, state, tuple(files), target, before, probe.exit_status == 0, mode, launch,
        launch_files,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class LoadedUnit:
    """What systemd loaded after an install, proven equal to the drop-in's request."""

    state: UnitState
    files: tuple[UnitFile, ...]
    service: ServiceConfig


async def verify_unit(
    transport: Transport,
    unit: str,
    expected: TrialInvocation,
    *,
    control: UnitLoader,
    path: str,
    timeout: float = 20.0,
) -> LoadedUnit:
    """Read back state and files and raise :class:`DropInNotApplied` unless they match."""
    state = await control.show(unit, timeout=timeout)
    files = await control.cat(unit, timeout=timeout)
    service = merged_service(files)
    problems = verify_loaded(state, service, path, expected)
    if problems:
        raise DropInNotApplied(unit, problems, state, files)
    return LoadedUnit(state, tuple(files), service)


async def install_dropin(
    transport: Transport,
    unit: str,
    text: str,
    expected: TrialInvocation,
    *,
    control: UnitLoader,
    path: str | None = None,
    timeout: float = 60.0,
    launch_files: bool = False,
) -> LoadedUnit:
    """Write the invocation's launch files and then our drop-in atomically (the drop-in names
    the files, so it never points at one not yet written), daemon-reload (through the host's
    unit control), and prove systemd loaded exactly it and the files hold their bytes. With
    ``launch_files`` False (an engine that launches from no file) and none in the invocation,
    no file beside the drop-in is listed or touched."""
    target = path or str(dropin_path(unit))
    directory = str(PurePosixPath(target).parent)
    await transport.run(
        ["mkdir", "-p", "--", directory], timeout=timeout, check=True, privileged=True
    )
    managed = launch_files or bool(expected.launch_files)
    if managed:
        await put_launch_files(transport, target, expected.launch_files, timeout=timeout)
    await transport.write_file_atomic(target, text.encode(), mode=0o644, timeout=timeout)
    await control.daemon_reload(timeout=timeout)
    loaded = await verify_unit(
        transport, unit, expected, control=control, path=target, timeout=timeout
    )
    wanted = {f.path: f.content for f in expected.launch_files}
    differ = (
        await launch_files_differing(transport, target, wanted, timeout=timeout) if managed else []
    )
    if differ:
        problems = [f"launch file {p} does not hold the trial's bytes" for p in differ]
        raise DropInNotApplied(unit, problems, loaded.state, loaded.files)
    get_logger(host=transport.name, unit=unit).info(
        "dropin.installed", path=target, launch_files=[f.path for f in expected.launch_files]
    )
    return loaded


async def remove_stale_temp_files(
    transport: Transport, target: str, *, timeout: float = 20.0
) -> list[str]:
    """Remove the temporary files of our atomic writes to ``target`` that a killed run left
    beside it (a SIGKILL between write and rename). systemd ignores them (not ``*.conf``), but
    the host must end as found. Returns the paths removed."""
    path = PurePosixPath(target)
    listing = await transport.run(
        ["ls", "-1A", "--", str(path.parent)], timeout=timeout, privileged=True
    )
    if not listing.ok:
        return []
    stale = [
        str(path.parent / name)
        for name in listing.stdout_text().splitlines()
        if is_temp_beside(name, path.name)
    ]
    for leftover in stale:
        await transport.remove_file(leftover, timeout=timeout)
    if stale:
        get_logger(host=transport.name).warning("dropin.stale_temp_removed", paths=stale)
    return stale


async def restore_files(
    transport: Transport, snapshot: UnitSnapshot, *, control: UnitLoader, timeout: float = 60.0
) -> list[ForeignChange]:
    """Put back what we changed (our drop-in: its old bytes, or gone, and its directory if we
    made it), daemon-reload, and verify byte-identity. Returns the paths of OTHER unit files
    that changed meanwhile (someone else's edits: reported, never overwritten)."""
    target = snapshot.dropin_path
    # The launch files first: the drop-in's directory is removed only once it is empty.
    managed = snapshot.launch_managed or bool(snapshot.launch_before)
    if managed:
        await restore_launch_files(transport, target, snapshot.launch_before, timeout=timeout)
    await remove_stale_temp_files(transport, target, timeout=timeout)
    if snapshot.dropin_before is None:
        await transport.remove_file(target, timeout=timeout)
        if not snapshot.dropin_dir_existed:
            directory = str(PurePosixPath(target).parent)
            await transport.run(
                ["rmdir", "--ignore-fail-on-non-empty", "--", directory],
                timeout=timeout,
                privileged=True,
            )
    else:
        await transport.write_file_atomic(
            target, snapshot.dropin_before, mode=snapshot.dropin_mode, timeout=timeout
        )
    await control.daemon_reload(timeout=timeout)

    try:
        now = await transport.read_file(target, timeout=timeout)
    except FileNotFoundError:
        now = None
    if now != snapshot.dropin_before:
        raise RestoreIncomplete(snapshot.unit, [target])
    before = {f.path: f.content for f in snapshot.launch_before}
    differ = (
        await launch_files_differing(transport, target, before, timeout=timeout) if managed else []
    )
    if differ:
        raise RestoreIncomplete(snapshot.unit, differ)
    foreign: list[ForeignChange] = []
    for unit_file in snapshot.files:
        if unit_file.path == target:
            continue
        try:
            current = await transport.read_file(unit_file.path, timeout=timeout)
        except FileNotFoundError:
            current = None
        if current != unit_file.data:
            foreign.append(ForeignChange(unit_file.path))
    get_logger(host=transport.name, unit=snapshot.unit).info(
        "unit.restored", path=target, foreign_changes=[f.path for f in foreign]
    )
    return foreign
