"""Settings of one simulated SGLang server process, read from the JSON file ORCH_SIM_CONFIG names.

The simulated host writes this file per host (faults, GPU layout, time scale) and starts the
server with ``ORCH_SIM_CONFIG`` in its environment; the server's command line stays exactly what
a real SGLang would get. No env var, or no file: every default (a healthy, realistic server).

Every fault is either a plain value or ``{"value": V, "when_args": [tokens...]}``: with
``when_args`` the fault fires only when all those tokens are in the server's argv (so one host
can crash only for, say, ``--speculative-algorithm DFLASH``). ``faults.when_args`` at the top
applies to each fault that has none of its own.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from orchestrator.sim.perfmodel import PerfParams

CONFIG_ENV = "ORCH_SIM_CONFIG"
ROOT_ENV = "ORCH_SIM_ROOT"
"""Set for every process a simulated unit starts: the host's private root (SFTP's ``/``). Its
programs run on this machine's filesystem, so one that opens a host path the orchestrator named
(a launch file written over SFTP) reads it below this root, as a real host's would at ``/``."""

CrashAtStart = Literal["oom", "port-in-use", "exited"]
CRASH_AT_START_KINDS: tuple[str, ...] = ("oom", "port-in-use", "exited")

T = TypeVar("T")


class SimSettingsError(ValueError):
    """The sim config file is unreadable or holds a value of the wrong kind."""

    def __init__(self, path: str | None, problem: str) -> None:
        super().__init__(f"{path or '<settings>'}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class Fault(Generic[T]):
    """One fault's value and the argv tokens that must all be present for it to fire."""

    value: T
    when_args: tuple[str, ...] = ()

    def active(self, argv: Sequence[str]) -> T | None:
        """The value when this fault applies to a process started with ``argv``, else None."""
        if self.value is None:
            return None
        if all(token in argv for token in self.when_args):
            return self.value
        return None


@dataclass(frozen=True)
class ServerFaults:
    """Fault knobs of the simulated server (see docs/simulator.md, "Server faults")."""

    crash_at_start: Fault[CrashAtStart | None] = field(default_factory=lambda: Fault(None))
    crash_after_requests: Fault[int | None] = field(default_factory=lambda: Fault(None))
    hang_request_every: Fault[int | None] = field(default_factory=lambda: Fault(None))
    ignore_sigterm: Fault[bool | None] = field(default_factory=lambda: Fault(None))
    leftover_child_s: Fault[float | None] = field(default_factory=lambda: Fault(None))
    slow_load_s: Fault[float | None] = field(default_factory=lambda: Fault(None))


@dataclass(frozen=True)
class ServerSimSettings:
    """Everything about a simulated server that is not on its command line."""

    time_scale: float = 1.0
    """Every simulated duration (load, warm-up, steps, stop delay, lingering) is multiplied."""
    sglang_version: str = "0.5.23"
    """Which SGLang build the flags behave like (window flag spelling)."""
    ddtree: bool = True
    """Whether this build has the DDTree fork (``--speculative-algorithm DDTREE``)."""
    load_s: float = 3.0
    warmup_s: float = 0.5
    stop_delay_s: float = 0.3
    """After SIGTERM the process keeps serving HTTP this long, then exits 0."""
    gpu_count: int = 8
    gpu_total_mib: int = 97887
    weights_mib_per_gpu: int = 80000
    gpu_state_dir: str | None = None
    """Where the GPU memory registration ``<pid>.json`` goes; None: not registered."""
    seed: int = 0
    coding_wrong_rate: float = 0.15
    """Probability that the final answer to a coding problem is wrong (seeded per prompt)."""
    max_total_tokens: int = 1_000_000
    """KV cache capacity in tokens, for ``token usage`` in the log lines."""
    restart_jitter: float = 0.02
    """Relative standard deviation of the per-process speed factor (mean 1) that multiplies
    every prefill and decode step: real hardware varies from restart to restart, so repeats of
    one config differ by more than request sampling. 0: every process runs at the model's
    speed."""
    perf: PerfParams = field(default_factory=PerfParams)
    """Performance-model constants; the JSON object ``perf`` overrides any of them by name."""
    faults: ServerFaults = field(default_factory=ServerFaults)

    def scaled(self, seconds: float) -> float:
        """A simulated duration in wall-clock seconds."""
        return seconds * self.time_scale

    def effective_load_s(self, argv: Sequence[str]) -> float:
        slow = self.faults.slow_load_s.active(argv)
        return self.load_s if slow is None else slow

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None) -> ServerSimSettings:
        """Read settings from a JSON file; None means all defaults."""
        if path is None:
            return cls()
        where = str(path)
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise SimSettingsError(where, f"cannot read: {exc}") from exc
        if not isinstance(raw, dict):
            raise SimSettingsError(where, "top level must be a JSON object")
        return _from_mapping(raw, where)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], where: str = "<settings>") -> ServerSimSettings:
        """Settings from a parsed JSON object (what ``server:`` holds in a faults file)."""
        return _from_mapping(dict(raw), where)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerSimSettings:
        """Settings named by ``ORCH_SIM_CONFIG`` (unset or empty: defaults)."""
        env = os.environ if environ is None else environ
        return cls.load(env.get(CONFIG_ENV) or None)


_SCALARS: dict[str, tuple[type, ...]] = {
    "time_scale": (int, float),
    "sglang_version": (str,),
    "ddtree": (bool,),
    "load_s": (int, float),
    "warmup_s": (int, float),
    "stop_delay_s": (int, float),
    "gpu_count": (int,),
    "gpu_total_mib": (int,),
    "weights_mib_per_gpu": (int,),
    "gpu_state_dir": (str, type(None)),
    "seed": (int,),
    "coding_wrong_rate": (int, float),
    "max_total_tokens": (int,),
    "restart_jitter": (int, float),
}

_FAULT_TYPES: dict[str, tuple[type, ...]] = {
    "crash_at_start": (str,),
    "crash_after_requests": (int,),
    "hang_request_every": (int,),
    "ignore_sigterm": (bool,),
    "leftover_child_s": (int, float),
    "slow_load_s": (int, float),
}


def _check(where: str, key: str, value: Any, kinds: tuple[type, ...]) -> Any:
    if isinstance(value, bool) and bool not in kinds:
        raise SimSettingsError(where, f"{key}: expected {kinds}, got a boolean")
    if not isinstance(value, kinds):
        raise SimSettingsError(where, f"{key}: expected {kinds}, got {type(value).__name__}")
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _when_args(where: str, key: str, raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
        raise SimSettingsError(where, f"{key}.when_args: expected a list of strings")
    return tuple(raw)


def _fault(where: str, key: str, raw: Any, default_when: tuple[str, ...]) -> Fault[Any]:
    when = default_when
    value = raw
    if isinstance(raw, dict):
        unknown = set(raw) - {"value", "kind", "when_args"}
        if unknown:
            raise SimSettingsError(where, f"faults.{key}: unknown keys {sorted(unknown)}")
        value = raw.get("value", raw.get("kind"))
        if "when_args" in raw:
            when = _when_args(where, f"faults.{key}", raw["when_args"])
    if value is None:
        return Fault(None, when)
    value = _check(where, f"faults.{key}", value, _FAULT_TYPES[key])
    if key == "crash_at_start" and value not in CRASH_AT_START_KINDS:
        raise SimSettingsError(
            where, f"faults.crash_at_start: {value!r} is not one of {CRASH_AT_START_KINDS}"
        )
    return Fault(value, when)


def _from_mapping(raw: dict[str, Any], where: str) -> ServerSimSettings:
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _SCALARS:
            kwargs[key] = _check(where, key, value, _SCALARS[key])
        elif key == "perf":
            if not isinstance(value, dict):
                raise SimSettingsError(where, "perf: expected an object")
            names = {f.name for f in dataclasses.fields(PerfParams)}
            unknown = set(value) - names
            if unknown:
                raise SimSettingsError(where, f"perf: unknown keys {sorted(unknown)}")
            perf = {k: float(_check(where, f"perf.{k}", v, (int, float))) for k, v in value.items()}
            kwargs["perf"] = PerfParams(**perf)
        elif key == "faults":
            kwargs["faults"] = _faults(where, value)
        else:
            raise SimSettingsError(where, f"unknown key {key!r}")
    settings = ServerSimSettings(**kwargs)
    if settings.time_scale <= 0:
        raise SimSettingsError(where, "time_scale must be > 0")
    if settings.restart_jitter < 0:
        raise SimSettingsError(where, "restart_jitter must be >= 0")
    return settings


def _faults(where: str, raw: Any) -> ServerFaults:
    if raw is None:
        return ServerFaults()
    if not isinstance(raw, dict):
        raise SimSettingsError(where, "faults: expected an object")
    default_when = _when_args(where, "faults", raw.get("when_args"))
    unknown = set(raw) - set(_FAULT_TYPES) - {"when_args"}
    if unknown:
        raise SimSettingsError(where, f"faults: unknown keys {sorted(unknown)}")
    built = {
        key: _fault(where, key, raw[key], default_when) for key in _FAULT_TYPES if key in raw
    }
    return ServerFaults(**built)
