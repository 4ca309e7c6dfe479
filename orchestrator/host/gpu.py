"""GPU memory release: never start a server over memory the previous one still holds.

The seeds' sweep started each new SGLang while the old one's scheduler children still held
VRAM. Released means (FACTS: GPU memory): the unit's processes are gone, no compute process is
left on the unit's GPUs, and ``used`` is back within a margin of the idle baseline. Over a
transport this reads ``nvidia-smi``'s CSV; on this machine NVML directly (``nvidia-ml-py``).

Unified-memory GPUs (GB10 / DGX Spark) report no memory at all: ``nvidia-smi`` prints ``[N/A]``
for ``memory.used`` and ``memory.total`` and NVML answers NOT_SUPPORTED, while the compute-process
list still works. There release is judged by that list and the unit's empty control group alone
(:data:`ReleaseMethod` ``compute-processes``), and the method is said wherever a release is.

A host with no NVIDIA GPU at all (no ``nvidia-smi``: the command is not found, exit 127; on
this machine no NVML either) runs its server on the CPU, from the host's RAM: there
:class:`HostMemoryProbe` reads ``/proc/meminfo`` and reports the RAM in use (``MemTotal -
MemAvailable``) as the one "GPU" (:data:`HOST_MEMORY`), with no process list (method
``host-memory``). Without a process list nothing tells the running server's share of the RAM
from the idle level, so no baseline is read before the stop (:func:`idle_baseline` gives None):
it is read once the unit's first stop has emptied its control group (the kernel frees a
process's memory when it exits), and later releases are judged against it, with the control
group's emptiness checked first on every poll as everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from orchestrator.host.errors import HostError
from orchestrator.host.transport import CompletedCommand, Transport
from orchestrator.log import get_logger
from orchestrator.types import FailureCause

GPU_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,uuid,memory.used,memory.total",
    "--format=csv,noheader,nounits",
]
APPS_QUERY = [
    "nvidia-smi",
    "--query-compute-apps=gpu_uuid,pid,used_memory",
    "--format=csv,noheader,nounits",
]
IDENTITY_QUERY = ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]
MEMINFO_QUERY = ["cat", "/proc/meminfo"]
HOST_MEMORY = "host-memory"
"""The mechanism and the one "GPU"'s uuid of a host without NVIDIA GPUs: its RAM."""
_COMMAND_NOT_FOUND = 127

DEFAULT_MARGIN_MIB = 512
_MIB = 1024 * 1024

ReleaseMethod = Literal["memory", "compute-processes", "mixed", "host-memory"]
"""How release is judged: ``memory`` (used back at the idle baseline, no compute process, the
unit's control group empty), ``compute-processes`` (GPUs that report no memory: no compute
process and an empty control group), ``mixed`` (some GPUs of each kind), ``host-memory`` (no
NVIDIA GPU: the host's RAM in use back at its level after the first stop, and the control
group empty)."""

# Text some drivers print in CSV mode instead of rows (no comma in the line): not a row.
_TEXT_LINE = re.compile(r"^(?:No running (?:compute )?processes found\.?|\[[^\],]*\])$", re.I)


class GpuQueryError(HostError):
    """nvidia-smi or NVML did not give a usable answer; carries what it said."""

    cause: FailureCause = "gpu-query-failed"

    def __init__(self, message: str, output: str = "", exit_status: int | None = None) -> None:
        super().__init__(f"{message}: {output.strip()[:400]}" if output else message)
        self.output = output
        self.exit_status = exit_status

    @property
    def evidence(self) -> dict[str, Any]:
        return {"gpu_output": self.output.strip()[:400]} if self.output else {}


class NvmlUnavailable(GpuQueryError):
    """The NVML library (the NVIDIA driver) is not on this machine."""


@dataclass(frozen=True, slots=True)
class GpuMemory:
    index: int
    uuid: str
    used_mib: int | None
    total_mib: int | None

    @property
    def reports_memory(self) -> bool:
        """False on a unified-memory GPU: neither ``used`` nor ``total`` is readable."""
        return self.used_mib is not None or self.total_mib is not None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A compute process; ``gpu_uuid`` or ``used_mib`` may be unreadable (None)."""

    gpu_uuid: str | None
    pid: int
    used_mib: int | None


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    name: str
    driver_version: str


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    gpus: tuple[GpuMemory, ...]
    processes: tuple[GpuProcess, ...]
    host_memory: bool = False
    """The figures are the host's RAM (no NVIDIA GPU), with no process list."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """Idle ``used`` MiB per GPU index, measured while the unit was down."""

    used_mib: Mapping[int, int]
    processes: tuple[GpuProcess, ...] = ()
    unreported: frozenset[int] = frozenset()
    """GPUs that report no memory (unified memory): judged by compute processes alone."""
    host_memory: bool = False
    """The host's RAM, read after a stop (no NVIDIA GPU)."""

    @property
    def method(self) -> ReleaseMethod:
        if self.host_memory:
            return "host-memory"
        if not self.unreported:
            return "memory"
        return "mixed" if self.used_mib else "compute-processes"


@dataclass(frozen=True, slots=True)
class Leftover:
    """A compute process still on one of the unit's GPUs (``gpu`` None: unknown GPU)."""

    pid: int
    gpu: int | None
    used_mib: int | None


@dataclass(frozen=True, slots=True)
class ReleaseStatus:
    released: bool
    leftovers: tuple[Leftover, ...]
    excess_mib: Mapping[int, int]
    unit_processes_alive: bool = False
    method: ReleaseMethod = "memory"


class MemoryNotReleased(HostError):
    """The unit's GPUs were still held when the wait ran out: the unit must not be started."""

    cause: FailureCause = "memory-not-released"

    def __init__(self, status: ReleaseStatus, waited_s: float) -> None:
        parts = [f"GPU memory not released after {waited_s:.1f}s"]
        if status.unit_processes_alive:
            parts.append("unit processes still alive")
        if status.leftovers:
            parts.append(
                "leftover processes "
                + ", ".join(
                    f"pid {p.pid} on GPU {p.gpu} ({p.used_mib} MiB)" for p in status.leftovers
                )
            )
        over = {gpu: mib for gpu, mib in status.excess_mib.items() if mib > 0}
        if over:
            parts.append(f"used above baseline (MiB): {over}")
        super().__init__("; ".join(parts))
        self.status = status
        self.leftovers = status.leftovers
        self.waited_s = waited_s

    @property
    def evidence(self) -> dict[str, Any]:
        return {
            "leftovers": [
                {"pid": item.pid, "gpu": item.gpu, "used_mib": item.used_mib}
                for item in self.leftovers
            ],
            "excess_mib": dict(self.status.excess_mib),
            "unit_processes_alive": self.status.unit_processes_alive,
            "method": self.status.method,
        }


# --- parsing ------------------------------------------------------------------------------


def _cell_int(cell: str) -> int | None:
    """``81234`` -> 81234; ``[N/A]``, ``[Insufficient Permissions]``, ``N/A`` -> None."""
    text = cell.strip()
    try:
        return int(float(text))
    except ValueError:
        return None


def _cell_text(cell: str) -> str | None:
    text = cell.strip()
    return None if not text or text.startswith("[") or text == "N/A" else text


def _rows(text: str, width: int) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        if not line.strip() or _TEXT_LINE.match(line.strip()):
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != width:
            raise GpuQueryError(f"expected {width} CSV cells", line)
        rows.append(cells)
    return rows


def parse_gpu_memory(text: str) -> tuple[GpuMemory, ...]:
    """``--query-gpu=index,uuid,memory.used,memory.total --format=csv,noheader,nounits``."""
    gpus = []
    for index, uuid, used, total in _rows(text, 4):
        position = _cell_int(index)
        if position is None:
            raise GpuQueryError("GPU index unreadable", index)
        gpus.append(GpuMemory(position, uuid, _cell_int(used), _cell_int(total)))
    return tuple(gpus)


def parse_compute_apps(text: str) -> tuple[GpuProcess, ...]:
    """``--query-compute-apps=gpu_uuid,pid,used_memory``: empty output means no processes, and
    so do the text lines some drivers print instead (``No running processes found``, a lone
    ``[Not Supported]``)."""
    processes = []
    for uuid, pid, used in _rows(text, 3):
        number = _cell_int(pid)
        if number is None:
            raise GpuQueryError("process pid unreadable", pid)
        processes.append(GpuProcess(_cell_text(uuid), number, _cell_int(used)))
    return tuple(processes)


def parse_gpu_identities(text: str) -> tuple[GpuIdentity, ...]:
    """``--query-gpu=name,driver_version --format=csv,noheader``."""
    identities = []
    for line in text.splitlines():
        if line.strip():
            name, _, driver = line.rpartition(",")
            identities.append(GpuIdentity(name.strip(), driver.strip()))
    return tuple(identities)


# --- release logic -------------------------------------------------------------------------


def _selected(snapshot: GpuSnapshot, gpus: Collection[int] | None) -> list[GpuMemory]:
    return [g for g in snapshot.gpus if gpus is None or g.index in gpus]


def baseline_from(snapshot: GpuSnapshot, gpus: Collection[int] | None) -> Baseline:
    """The idle baseline of ``gpus`` (None: all) from one snapshot taken while the unit is down."""
    chosen = _selected(snapshot, gpus)
    missing = set(gpus or ()) - {g.index for g in chosen}
    if missing:
        raise GpuQueryError(f"GPUs {sorted(missing)} not found on the host")
    unreadable = [g.index for g in chosen if g.used_mib is None and g.reports_memory]
    if unreadable:
        raise GpuQueryError(f"memory.used unreadable on GPUs {unreadable}")
    return Baseline(
        used_mib={g.index: g.used_mib for g in chosen if g.used_mib is not None},
        processes=snapshot.processes,
        unreported=frozenset(g.index for g in chosen if not g.reports_memory),
        host_memory=snapshot.host_memory,
    )


def idle_baseline(snapshot: GpuSnapshot, gpus: Collection[int] | None) -> Baseline | None:
    """The idle baseline read while the server still runs: each GPU's ``used`` less what the
    compute processes on it hold. None when a process's GPU or memory is unreadable.

    A reading taken right after the stop is no baseline: the driver frees memory some time after
    the processes exit, so it would count the old server's memory as idle and every later wait
    would pass at once. Read before the stop, the processes' own figures say what is theirs.
    The host's RAM comes with no process list, so it has no such reading (None: read it once
    the unit is stopped).
    """
    if snapshot.host_memory:
        return None
    base = baseline_from(snapshot, gpus)
    if not base.used_mib:
        return Baseline({}, unreported=base.unreported)  # no memory to read: nothing to correct
    by_uuid = {g.uuid: g.index for g in snapshot.gpus}
    held: dict[int, int] = {}
    for process in snapshot.processes:
        index = by_uuid.get(process.gpu_uuid) if process.gpu_uuid else None
        if index in base.unreported:
            continue
        if index is None or process.used_mib is None:
            return None
        held[index] = held.get(index, 0) + process.used_mib
    idle = {index: max(used - held.get(index, 0), 0) for index, used in base.used_mib.items()}
    return Baseline(used_mib=idle, unreported=base.unreported)


def release_status(
    snapshot: GpuSnapshot,
    baseline: Baseline,
    unit_gpu_indices: Collection[int] | None,
    margin_mib: int,
) -> ReleaseStatus:
    """Released when no compute process is on the unit's GPUs and each GPU's ``used`` is within
    ``margin_mib`` of its baseline (a GPU that reports no memory: the processes alone). A
    process whose GPU is unreadable counts against us."""
    chosen = _selected(snapshot, unit_gpu_indices)
    by_uuid = {g.uuid: g.index for g in snapshot.gpus}
    leftovers = []
    for process in snapshot.processes:
        gpu = by_uuid.get(process.gpu_uuid) if process.gpu_uuid else None
        if gpu is None or unit_gpu_indices is None or gpu in unit_gpu_indices:
            leftovers.append(Leftover(process.pid, gpu, process.used_mib))
    excess: dict[int, int] = {}
    over = False
    for gpu_memory in chosen:
        if gpu_memory.index in baseline.unreported:
            continue
        base = baseline.used_mib.get(gpu_memory.index)
        if gpu_memory.used_mib is None or base is None:
            over = True  # unreadable is not released
            continue
        excess[gpu_memory.index] = gpu_memory.used_mib - base
        over = over or excess[gpu_memory.index] > margin_mib
    return ReleaseStatus(
        released=not leftovers and not over,
        leftovers=tuple(leftovers),
        excess_mib=excess,
        method=baseline.method,
    )


# --- probes --------------------------------------------------------------------------------


class GpuProbe(Protocol):
    """One host's GPUs: memory and compute processes now, and what the GPUs are."""

    async def snapshot(self) -> GpuSnapshot: ...

    async def identities(self) -> tuple[GpuIdentity, ...]:
        """Name and driver of each GPU, for a trial's provenance."""
        ...

    def close(self) -> None:
        """Release what the probe holds of its own (NVML's handle)."""
        ...


class NvidiaSmiProbe:
    """GPU memory over a transport with ``nvidia-smi`` (both queries run concurrently)."""

    mechanism = "nvidia-smi"

    def __init__(self, transport: Transport, *, timeout: float = 15.0) -> None:
        self._transport = transport
        self._timeout = timeout

    async def _query(self, argv: list[str]) -> CompletedCommand:
        return await _run_query(self._transport, argv, self._timeout)

    async def snapshot(self) -> GpuSnapshot:
        # Both are awaited to the end even when one fails: no query outlives the snapshot.
        results = await asyncio.gather(
            self._query(GPU_QUERY), self._query(APPS_QUERY), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result
        memory, apps = (r for r in results if isinstance(r, CompletedCommand))
        return GpuSnapshot(
            parse_gpu_memory(memory.stdout_text()), parse_compute_apps(apps.stdout_text())
        )

    async def identities(self) -> tuple[GpuIdentity, ...]:
        result = await self._query(IDENTITY_QUERY)
        return parse_gpu_identities(result.stdout_text())

    def close(self) -> None:
        """Nothing of its own to release: the transport belongs to the host handle."""


class NvmlProbe:
    """GPU memory on this machine through NVML; calls run in a thread (NVML blocks)."""

    mechanism = "nvml"

    def __init__(self) -> None:
        self._initialised = False

    def _nvml(self) -> Any:
        import pynvml

        if not self._initialised:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError_LibraryNotFound as exc:
                raise NvmlUnavailable(
                    "NVML library not found: no NVIDIA driver on this machine", str(exc)
                ) from exc
            except pynvml.NVMLError as exc:
                raise GpuQueryError("nvmlInit failed", str(exc)) from exc
            self._initialised = True
        return pynvml

    def _read(self) -> GpuSnapshot:
        nvml = self._nvml()
        gpus, processes = [], []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nvml.nvmlDeviceGetUUID(handle)
                uuid = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
                try:
                    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                except nvml.NVMLError_NotSupported:
                    # Unified memory (GB10): no framebuffer figures; processes still listed.
                    gpus.append(GpuMemory(index, uuid, None, None))
                else:
                    gpus.append(
                        GpuMemory(index, uuid, memory.used // _MIB, memory.total // _MIB)
                    )
                for process in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    used = process.usedGpuMemory
                    processes.append(
                        GpuProcess(uuid, int(process.pid), None if used is None else used // _MIB)
                    )
        except nvml.NVMLError as exc:
            raise GpuQueryError("NVML query failed", str(exc)) from exc
        return GpuSnapshot(tuple(gpus), tuple(processes))

    def _identities(self) -> tuple[GpuIdentity, ...]:
        nvml = self._nvml()
        driver = nvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        names = []
        for index in range(nvml.nvmlDeviceGetCount()):
            name = nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(index))
            names.append(
                GpuIdentity(name.decode() if isinstance(name, bytes) else str(name), driver)
            )
        return tuple(names)

    async def snapshot(self) -> GpuSnapshot:
        return await asyncio.to_thread(self._read)

    async def identities(self) -> tuple[GpuIdentity, ...]:
        return await asyncio.to_thread(self._identities)

    def close(self) -> None:
        if self._initialised:
            import pynvml

            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            self._initialised = False


async def _run_query(transport: Transport, argv: list[str], timeout: float) -> CompletedCommand:
    result = await transport.run(argv, timeout=timeout, idempotent=True)
    if not result.ok:
        raise GpuQueryError(
            f"{' '.join(argv[:2])} exited {result.exit_status}",
            result.stderr_text() or result.stdout_text(),
            exit_status=result.exit_status,
        )
    return result


def parse_meminfo(text: str) -> GpuMemory:
    """``/proc/meminfo`` as the one "GPU" of a host without one: RAM in use (``MemTotal -
    MemAvailable``, what the kernel could not hand out without swapping) and the total, MiB."""
    kib: dict[str, int] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        words = rest.split()
        if words and words[0].isdigit():
            kib[name.strip()] = int(words[0])
    if "MemTotal" not in kib or "MemAvailable" not in kib:
        raise GpuQueryError("/proc/meminfo has no MemTotal or MemAvailable", text[:400])
    total, available = kib["MemTotal"] // 1024, kib["MemAvailable"] // 1024
    return GpuMemory(0, HOST_MEMORY, total - available, total)


class HostMemoryProbe:
    """A host without NVIDIA GPUs: its RAM, over a transport (``cat /proc/meminfo``). It
    lists no processes and names no GPU."""

    mechanism = HOST_MEMORY

    def __init__(self, transport: Transport, *, timeout: float = 15.0) -> None:
        self._transport = transport
        self._timeout = timeout

    async def snapshot(self) -> GpuSnapshot:
        result = await _run_query(self._transport, MEMINFO_QUERY, self._timeout)
        return GpuSnapshot((parse_meminfo(result.stdout_text()),), (), host_memory=True)

    async def identities(self) -> tuple[GpuIdentity, ...]:
        return ()

    def close(self) -> None:
        """Nothing of its own to release."""


class NvidiaSmiOrHostMemory:
    """A host's GPUs by ``nvidia-smi`` over its transport; where the host has no
    ``nvidia-smi`` (the command is not found: exit 127) it has no NVIDIA GPU, and its RAM is
    read instead (:class:`HostMemoryProbe`). Chosen at the first read and logged
    (``gpu_reader.chosen``); any other failure of ``nvidia-smi`` stays a GPU query failure."""

    def __init__(self, transport: Transport, *, timeout: float = 15.0) -> None:
        self._transport = transport
        self._smi = NvidiaSmiProbe(transport, timeout=timeout)
        self._ram = HostMemoryProbe(transport, timeout=timeout)
        self._chosen: GpuProbe | None = None
        self.mechanism: str | None = None
        """``nvidia-smi`` or ``host-memory``; None before the first read."""
        self.detail = ""

    async def snapshot(self) -> GpuSnapshot:
        if self._chosen is not None:
            return await self._chosen.snapshot()
        try:
            snapshot = await self._smi.snapshot()
        except GpuQueryError as exc:
            if exc.exit_status != _COMMAND_NOT_FOUND:
                self._chosen, self.mechanism = self._smi, NvidiaSmiProbe.mechanism
                raise
            self._chosen, self.mechanism = self._ram, HostMemoryProbe.mechanism
            self.detail = "no nvidia-smi on the host: release judged by its RAM"
            get_logger(host=self._transport.name).warning(
                "gpu_reader.chosen", mechanism=HOST_MEMORY, reason=str(exc)
            )
            return await self._ram.snapshot()
        self._chosen, self.mechanism = self._smi, NvidiaSmiProbe.mechanism
        return snapshot

    async def identities(self) -> tuple[GpuIdentity, ...]:
        if self._chosen is None:
            await self.snapshot()
        assert self._chosen is not None
        return await self._chosen.identities()

    def close(self) -> None:
        """Nothing of its own to release: the transport belongs to the host handle."""


# --- waiting -------------------------------------------------------------------------------


async def record_baseline(probe: GpuProbe, gpus: Collection[int] | None) -> Baseline:
    """Measure the idle baseline now; call it only while the unit's processes are gone."""
    baseline = baseline_from(await probe.snapshot(), gpus)
    get_logger().info(
        "gpu.baseline",
        used_mib=dict(baseline.used_mib),
        processes=len(baseline.processes),
        method=baseline.method,
    )
    return baseline


async def record_idle_baseline(probe: GpuProbe, gpus: Collection[int] | None) -> Baseline | None:
    """:func:`idle_baseline` of a snapshot taken now (before the unit is stopped)."""
    baseline = idle_baseline(await probe.snapshot(), gpus)
    if baseline is not None:
        get_logger().info(
            "gpu.baseline",
            used_mib=dict(baseline.used_mib),
            read="before-stop",
            method=baseline.method,
        )
    return baseline


async def wait_released(
    probe: GpuProbe,
    baseline: Baseline,
    gpus: Collection[int] | None,
    *,
    unit_pids_gone: Callable[[], Awaitable[bool]] | None = None,
    timeout: float,
    poll_interval: float = 0.2,
    margin_mib: int = DEFAULT_MARGIN_MIB,
) -> ReleaseStatus:
    """Poll until the unit's GPUs are released; raise :class:`MemoryNotReleased` at ``timeout``.

    ``unit_pids_gone`` (e.g. the unit's cgroup is empty) is checked first on every poll: memory
    looks free for a moment while a process is still tearing down.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline = started + timeout
    status = ReleaseStatus(False, (), {}, True, baseline.method)
    while True:
        alive = unit_pids_gone is not None and not await unit_pids_gone()
        try:
            status = release_status(await probe.snapshot(), baseline, gpus, margin_mib)
        except GpuQueryError as exc:
            # One failed query is not a verdict: keep polling until the deadline.
            get_logger().warning("gpu.query_failed", error=str(exc))
        else:
            if alive:
                status = ReleaseStatus(
                    False, status.leftovers, status.excess_mib, True, status.method
                )
        now = loop.time()
        if status.released:
            get_logger().info(
                "memory.released", waited_s=round(now - started, 3), method=status.method
            )
            return status
        if now >= deadline:
            raise MemoryNotReleased(status, now - started)
        await asyncio.sleep(min(poll_interval, deadline - now))
