"""Loading a unit from a host's private root: search paths, drop-ins, merge, reload check.

What a daemon-reload does for one unit (FACTS: systemd): the first fragment in /etc, /run, /lib
wins; drop-ins from ``UNIT.d/``, prefix directories and ``service.d/`` merge by file name in
lexical order across all directories; ``ExecStart=``/``Environment=`` resets; a missing reset or
no ExecStart is ``bad-setting``. ``need_daemon_reload`` is systemd's unit_need_daemon_reload.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from orchestrator.sim.journal import RateLimit
from orchestrator.sim.unitfile import (
    USEC,
    ExecCommand,
    SpecifierError,
    is_utf8_clean,
    merge_environment,
    parse_environment,
    parse_exec,
    parse_timespan_us,
    parse_unit_text,
    parse_unset_environment,
)

UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/lib/systemd/system")
DEFAULT_TIMEOUT_STOP_US = 90 * USEC
DEFAULT_START_LIMIT_INTERVAL_US = 10 * USEC
DEFAULT_START_LIMIT_BURST = 5


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
