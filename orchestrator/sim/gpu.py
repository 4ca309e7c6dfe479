"""Simulated GPUs of one host: who holds memory, and for how long after they die.

The simulated SGLang server registers its allocations as ``<state_dir>/<pid>.json``
(``{"pid", "gpus": [index...], "used_mib", "started"}``, MiB per listed GPU) and never removes
them. A registration counts as used while its process lives, and for the host's release lag after
the process is first seen dead (the driver's teardown lag, FACTS: GPU memory): the first reader
that sees it dead stamps ``dead_since`` into the file, a later reader deletes it once the lag has
passed. A registration stamped ``held_until`` (a process stuck in D-state) counts as alive until
then. All state lives in files, so the host's SSH server and a stand-in ``nvidia-smi`` process on
a real-systemd test host read the same thing.

The host's GPUs themselves are described by ``<state_dir>/host.json`` (:class:`GpuHostSpec`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

SPEC_FILE = "host.json"
_PID_START_SLACK_S = 5.0


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    uuid: str
    name: str
    total_mib: int
    baseline_mib: int


@dataclass(frozen=True, slots=True)
class GpuHostSpec:
    """The GPUs of one host and how its driver releases memory."""

    gpus: tuple[GpuDevice, ...]
    driver_version: str = "580.95.05"
    release_lag_s: float = 1.0
    never_released: bool = False
    memory_reporting: str = "discrete"
    """``unified``: the driver reports no memory figures (GB10 / DGX Spark): nvidia-smi prints
    ``[N/A]`` for ``memory.*``; compute processes are still listed with their memory."""

    @property
    def reports_memory(self) -> bool:
        return self.memory_reporting != "unified"

    @staticmethod
    def build(
        seed: str,
        *,
        count: int = 8,
        name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition",
        total_mib: int = 97887,
        baseline_mib: int = 3,
        driver_version: str = "580.95.05",
        release_lag_s: float = 1.0,
        never_released: bool = False,
        memory_reporting: str = "discrete",
    ) -> GpuHostSpec:
        """A spec whose GPU UUIDs are stable for ``seed`` (the host's name)."""
        gpus = tuple(
            GpuDevice(index, gpu_uuid(seed, index), name, total_mib, baseline_mib)
            for index in range(count)
        )
        return GpuHostSpec(gpus, driver_version, release_lag_s, never_released, memory_reporting)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @staticmethod
    def from_json(text: str) -> GpuHostSpec:
        raw = json.loads(text)
        gpus = tuple(GpuDevice(**gpu) for gpu in raw.pop("gpus"))
        return GpuHostSpec(gpus=gpus, **raw)


def gpu_uuid(seed: str, index: int) -> str:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``, derived from host and index."""
    digest = hashlib.sha256(f"{seed}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


@dataclass(frozen=True, slots=True)
class Registration:
    """One process's allocation as the server recorded it (plus our stamps)."""

    pid: int
    gpus: tuple[int, ...]
    used_mib: int
    started: float
    dead_since: float | None = None
    held_until: float | None = None


@dataclass(frozen=True, slots=True)
class ComputeApp:
    gpu_index: int
    pid: int
    used_mib: int
    process_name: str


@dataclass(frozen=True, slots=True)
class GpuReading:
    device: GpuDevice
    used_mib: int

    @property
    def free_mib(self) -> int:
        return max(self.device.total_mib - self.used_mib, 0)


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    gpus: tuple[GpuReading, ...]
    apps: tuple[ComputeApp, ...]
    reports_memory: bool = True


def _boot_time() -> float:
    with open("/proc/stat", encoding="ascii") as stat:
        for line in stat:
            if line.startswith("btime "):
                return float(line.split()[1])
    return 0.0


def process_start_time(pid: int) -> float | None:
    """Epoch seconds the process started, or None if it is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return _boot_time() + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def pid_alive(pid: int, registered_at: float) -> bool:
    """Alive, not a zombie, and not a newer process that reused the pid."""
    started = process_start_time(pid)
    return started is not None and started <= registered_at + _PID_START_SLACK_S


def process_name(pid: int) -> str:
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        return "[Not Found]"
    return argv0.decode("utf-8", errors="replace") or "[Not Found]"


def holding(registration: Registration, alive: bool, now: float, spec: GpuHostSpec) -> bool:
    """Whether a registration still holds memory (pure: liveness is given)."""
    if alive or spec.never_released:
        return True
    if registration.held_until is not None and now < registration.held_until:
        return True
    dead_since = registration.dead_since if registration.dead_since is not None else now
    if registration.held_until is not None:
        dead_since = max(dead_since, registration.held_until)
    return now < dead_since + spec.release_lag_s


def account(
    spec: GpuHostSpec,
    registrations: Iterable[tuple[Registration, bool]],
    now: float,
    names: dict[int, str] | None = None,
) -> GpuSnapshot:
    """Memory per GPU and the compute apps, from registrations and their liveness (pure)."""
    used = {gpu.index: gpu.baseline_mib for gpu in spec.gpus}
    apps: list[ComputeApp] = []
    for registration, alive in registrations:
        if not holding(registration, alive, now, spec):
            continue
        listed = alive or (registration.held_until is not None and now < registration.held_until)
        for index in registration.gpus:
            if index not in used:
                continue
            used[index] += registration.used_mib
            if listed:
                name = (names or {}).get(registration.pid, "[Not Found]")
                apps.append(ComputeApp(index, registration.pid, registration.used_mib, name))
    readings = tuple(
        GpuReading(gpu, min(used[gpu.index], gpu.total_mib)) for gpu in spec.gpus
    )
    apps.sort(key=lambda app: (app.gpu_index, app.pid))
    return GpuSnapshot(readings, tuple(apps), spec.reports_memory)


class GpuState:
    """Reads and maintains one host's GPU state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir

    def write_spec(self, spec: GpuHostSpec) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.state_dir / SPEC_FILE, spec.to_json())

    def spec(self) -> GpuHostSpec:
        path = self.state_dir / SPEC_FILE
        try:
            return GpuHostSpec.from_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return GpuHostSpec.build(str(self.state_dir.resolve()))

    def registrations(self) -> list[tuple[Path, Registration]]:
        found: list[tuple[Path, Registration]] = []
        for path in sorted(self.state_dir.glob("*.json")):
            if not path.stem.isdigit():
                continue
            try:
                raw = json.loads(path.read_text(encoding="utf-8"))
                found.append(
                    (
                        path,
                        Registration(
                            pid=int(raw["pid"]),
                            gpus=tuple(int(i) for i in raw.get("gpus", [])),
                            used_mib=int(raw.get("used_mib", 0)),
                            started=float(raw.get("started", 0.0)),
                            dead_since=raw.get("dead_since"),
                            held_until=raw.get("held_until"),
                        ),
                    )
                )
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return found

    def snapshot(self, now: float | None = None) -> GpuSnapshot:
        """Current memory and apps; stamps newly dead registrations, deletes expired ones."""
        now = time.time() if now is None else now
        spec = self.spec()
        judged: list[tuple[Registration, bool]] = []
        names: dict[int, str] = {}
        for path, registration in self.registrations():
            alive = pid_alive(registration.pid, registration.started)
            if alive:
                names[registration.pid] = process_name(registration.pid)
            elif registration.dead_since is None:
                registration = replace(registration, dead_since=now)
                _stamp(path, dead_since=now)
            if not holding(registration, alive, now, spec):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            judged.append((registration, alive))
        return account(spec, judged, now, names)

    def hold(self, pids: Iterable[int], until: float) -> None:
        """Mark the registrations of ``pids`` as held (D-state) until ``until``."""
        wanted = set(pids)
        for path, registration in self.registrations():
            if registration.pid in wanted:
                _stamp(path, held_until=until)


def _stamp(path: Path, **values: float) -> None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    raw.update(values)
    _write_atomic(path, json.dumps(raw))


def _write_atomic(path: Path, text: str) -> None:
    # Unique per writer: several nvidia-smi queries (threads of one process, or processes)
    # may stamp the same registration at once.
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temp.write_text(text, encoding="utf-8")
    os.replace(temp, path)
