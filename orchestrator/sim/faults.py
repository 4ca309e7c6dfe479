"""Per-host settings and fault knobs of a simulated host, and the faults file that sets them.

A faults file (``orchestrator sim up --faults FILE``) is a YAML mapping from a host name, or
``"*"`` for every host, to :class:`HostSettings` fields; a named host's entry is applied over the
``"*"`` entry, key by key (the ``server`` and ``server.faults`` mappings are merged one level
deeper). Validation is strict (pydantic, unknown keys rejected) because a misspelt fault that
silently does nothing would make a fault test prove nothing.

The ``server`` mapping is passed through to the simulated SGLang server as JSON (the host adds
``time_scale``, ``sglang_version``, ``ddtree``, ``gpu_count``, ``gpu_total_mib`` and
``gpu_state_dir``); its keys belong to the server, so they are not checked here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

ALL_HOSTS = "*"


class FaultsFileError(Exception):
    """The faults file is unreadable or invalid; ``problems`` lists each one."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        super().__init__(f"{path}: " + "; ".join(problems))
        self.path = path
        self.problems = problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CommandTrigger(_Strict):
    """When a fault fires: on a command matching ``command`` (a regex searched in the
    shell-quoted command line), and/or ``after_s`` seconds after the host started."""

    command: str | None = None
    after_s: float | None = Field(default=None, ge=0)
    times: int = Field(default=1, ge=0)
    """How many times the command pattern fires; 0 = every time."""

    @field_validator("command", "armed_by", check_fields=False)  # armed_by: CommandFailFault
    @classmethod
    def _valid_regex(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)
        return value

    def matches(self, command_line: str) -> bool:
        return self.command is not None and re.search(self.command, command_line) is not None


class SshDropFault(CommandTrigger):
    """Close every SSH connection abruptly (no disconnect message)."""

    delay_s: float = Field(default=0.1, ge=0)
    """After a matching command started: the command itself keeps running on the host (as a
    systemctl job does when sshd's connection dies), the connections drop this much later."""


class FrozenFault(CommandTrigger):
    """Stop answering: connections stay open, nothing is read or written, new TCP connections are
    accepted and never greeted. ``duration_s`` None = frozen until the host stops."""

    duration_s: float | None = Field(default=None, gt=0)


class CommandFailFault(CommandTrigger):
    """Make a matching command fail as the real tool does, without running it: exit
    ``exit_status`` with ``stderr`` (``journalctl`` on a corrupt journal file, a
    ``daemon-reload`` the manager refuses)."""

    exit_status: int = Field(default=1, ge=1, le=255)
    stderr: str = ""
    armed_by: str | None = None
    """A regex: the fault fires only on commands after one matching it ran (e.g. only once a
    restore began: its first command, listing the drop-in directory)."""

    @model_validator(mode="after")
    def _fires_on_commands_only(self) -> CommandFailFault:
        if self.command is None or self.after_s is not None:
            raise ValueError("command_fails needs `command` and fires on commands only, no after_s")
        return self


class HostSettings(_Strict):
    """Everything that makes one simulated host differ from another."""

    time_scale: float = Field(default=1.0, gt=0)
    """Multiplies every simulated duration (server load, warm-up, memory release lag)."""
    sglang_version: str = "0.5.23"
    ddtree: bool = False
    """Whether this host's (simulated) SGLang build has the DDTree fork feature."""
    gpu_count: int = Field(default=8, ge=1, le=16)
    gpu_name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    gpu_total_mib: int = Field(default=97887, gt=0)
    gpu_baseline_mib: int = Field(default=3, ge=0)
    gpu_memory_reporting: Literal["discrete", "unified"] = "discrete"
    """``unified``: GPUs that report no memory (GB10 / DGX Spark): nvidia-smi prints ``[N/A]``
    for ``memory.used``/``memory.total``; compute processes are still listed."""
    driver_version: str = "580.95.05"
    unit_running: bool = True
    """Whether the SGLang unit is started when the host comes up."""
    memory_release_lag_s: float | None = Field(default=None, ge=0)
    """Seconds GPU memory stays used after its process died; None = 1.0 x time_scale."""
    memory_never_released: bool = False
    survives_sigkill_s: float = Field(default=0.0, ge=0)
    """> 0: the unit's processes are stuck in D-state on stop (SIGTERM does nothing, the final
    SIGKILL leaves them 'around') and their GPU memory stays held this long after the SIGKILL."""
    journal_drop_rate: float = Field(default=0.0, ge=0, le=1)
    """Fraction of the service's log lines journald silently loses."""
    ssh_drop: SshDropFault | None = None
    frozen: FrozenFault | None = None
    command_fails: list[CommandFailFault] = Field(default_factory=list)
    """Each entry fails its own matching commands (its own ``times``, its own arming)."""
    seed: int = 0
    server: dict[str, Any] = Field(default_factory=dict)
    """Passed through to the simulated SGLang server (load_s, warmup_s, faults{...}, ...)."""

    @property
    def release_lag_s(self) -> float:
        if self.memory_release_lag_s is not None:
            return self.memory_release_lag_s
        return 1.0 * self.time_scale


def _merge(base: Mapping[str, Any], over: Mapping[str, Any], depth: int) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if depth > 0 and isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value, depth - 1)
        else:
            merged[key] = value
    return merged


def settings_for(
    host: str, faults: Mapping[str, Mapping[str, Any]], defaults: Mapping[str, Any] | None = None
) -> HostSettings:
    """The settings of ``host``: ``defaults``, then the ``"*"`` entry, then the host's own."""
    merged = _merge({}, defaults or {}, 2)
    for key in (ALL_HOSTS, host):
        if key in faults:
            merged = _merge(merged, faults[key], 2)
    return HostSettings.model_validate(merged)


def load_faults_file(path: Path, host_names: list[str]) -> dict[str, dict[str, Any]]:
    """Read and validate a faults file; every entry must name a host that exists (or ``*``)."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise FaultsFileError(path, [str(exc)]) from exc
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise FaultsFileError(path, ["top level must be a mapping of host name -> settings"])
    problems: list[str] = []
    entries: dict[str, dict[str, Any]] = {}
    for name, value in document.items():
        key = str(name)
        if key != ALL_HOSTS and key not in host_names:
            problems.append(f"{key}: no such host (hosts: {', '.join(host_names)})")
            continue
        if not isinstance(value, dict):
            problems.append(f"{key}: must be a mapping of settings")
            continue
        entries[key] = value
    for key in entries:
        try:
            settings_for(key, entries)
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(part) for part in error["loc"])
                problems.append(f"{key}.{where}: {error['msg']}")
    if problems:
        raise FaultsFileError(path, problems)
    return entries
