"""From a sweep file's host entry to a :class:`~orchestrator.host.handle.HostHandle`.

The one place that decides how a host is reached. ``address: local`` is this machine: commands
run as local subprocesses; units go over D-Bus to systemd on the system bus
(``DBUS_SYSTEM_BUS_ADDRESS``, else ``unix:path=/run/dbus/system_bus_socket``), with
``systemctl`` subprocesses only where there is no bus (no socket, no connection, or no
``org.freedesktop.systemd1`` on it) or where privilege comes from ``sudo`` (the bus would ask
polkit for a non-root caller's jobs); GPUs are read through NVML, with ``nvidia-smi`` on PATH
where NVML is missing (no ``pynvml``, or ``nvmlInit`` fails), and the host's RAM where neither
is (no NVIDIA GPU: a CPU server). Each choice is made once per host, at its first use, and
logged; the preflight says which were used. Any other address is reached over SSH with the
host's typed settings, and its units and GPUs through that connection (``systemctl``,
``nvidia-smi``; the host's RAM where ``nvidia-smi`` is not found).
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

from orchestrator.host.dbus import BusUnavailable, BusUnitControl, SystemdBus, system_bus_address
from orchestrator.host.gpu import (
    GpuIdentity,
    GpuProbe,
    GpuSnapshot,
    HostMemoryProbe,
    NvidiaSmiOrHostMemory,
    NvidiaSmiProbe,
    NvmlProbe,
)
from orchestrator.host.handle import HostHandle
from orchestrator.host.local import LocalTransport
from orchestrator.host.ssh import SSHSettings, SSHTransport
from orchestrator.host.systemd import STATE_PROPERTIES, UnitFile, UnitState
from orchestrator.host.unitcontrol import SystemctlControl, UnitControl
from orchestrator.log import get_logger

DEFAULT_IDENTITY = "~/.ssh/id_ed25519"
T = TypeVar("T")


class HostAddress(Protocol):
    """The parts of a sweep file's host entry that say how to reach it."""

    @property
    def name(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def identity_file(self) -> str | None: ...
    @property
    def known_hosts(self) -> str: ...
    @property
    def insecure_no_host_check(self) -> bool: ...
    @property
    def sudo(self) -> bool: ...
    @property
    def jump(self) -> str | None: ...


def ssh_settings(host: HostAddress, *, connect_timeout: float = 10.0) -> SSHSettings:
    """The host's SSH settings with ``~`` expanded; known_hosts stays on unless disabled."""
    return SSHSettings(
        name=host.name,
        address=host.address,
        port=host.port,
        user=host.user,
        identity_file=os.path.expanduser(host.identity_file or DEFAULT_IDENTITY),
        known_hosts=None if host.insecure_no_host_check else os.path.expanduser(host.known_hosts),
        insecure_no_host_check=host.insecure_no_host_check,
        sudo=host.sudo,
        jump=host.jump,
        connect_timeout=connect_timeout,
    )


class _ChosenOnce(Generic[T]):
    """A side of a local host that is chosen once, at its first use: concurrent first calls
    wait for the one choice, and later calls never choose again."""

    def __init__(self) -> None:
        self._chosen: T | None = None
        self._mechanism: str | None = None
        self._lock = asyncio.Lock()
        self.detail = ""
        """Where the side goes, or why not to the first choice."""

    @property
    def mechanism(self) -> str | None:
        """``dbus``/``systemctl`` or ``nvml``/``nvidia-smi``; None before the first use."""
        return self._mechanism

    async def _once(self, choose: Callable[[], Awaitable[tuple[T, str, str]]]) -> T:
        """The chosen side; ``choose`` gives (side, mechanism, detail) at the first call."""
        if self._chosen is None:
            async with self._lock:
                if self._chosen is None:
                    self._chosen, self._mechanism, self.detail = await choose()
        return self._chosen


class LocalUnitControl(_ChosenOnce[UnitControl]):
    """This machine's units over D-Bus where systemd is on the system bus, else ``systemctl``.

    Chosen once, at the first call, and logged (``unit_control.chosen``): a sweep does not
    switch mechanisms between calls, and a bus lost after the choice is an error
    (:class:`~orchestrator.host.dbus.BusUnavailable`, host-unreachable), not a quiet switch.
    """

    def __init__(
        self,
        transport: LocalTransport,
        *,
        bus_address: str | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        super().__init__()
        self.transport = transport
        self.bus_address = bus_address or system_bus_address()
        self.connect_timeout = connect_timeout
        self._bus: SystemdBus | None = None

    async def _control(self, timeout: float) -> UnitControl:
        return await self._once(lambda: self._choose(min(timeout, self.connect_timeout)))

    async def _choose(self, timeout: float) -> tuple[UnitControl, str, str]:
        log = get_logger(host=self.transport.name)
        if self.transport.sudo:
            why = "not root: privilege comes from sudo, and the bus would ask polkit"
        else:
            bus = SystemdBus(self.bus_address, name=self.transport.name)
            try:
                await bus.connect(timeout=timeout)
            except BusUnavailable as exc:
                why = exc.reason
            else:
                self._bus = bus
                log.info("unit_control.chosen", mechanism="dbus", address=self.bus_address)
                detail = f"units over D-Bus at {self.bus_address}"
                return BusUnitControl(bus, self.transport), BusUnitControl.mechanism, detail
        log.warning(
            "unit_control.chosen", mechanism="systemctl", address=self.bus_address, reason=why
        )
        detail = f"units by systemctl: no D-Bus ({why})"
        return SystemctlControl(self.transport), SystemctlControl.mechanism, detail

    async def show(
        self, unit: str, props: Sequence[str] = STATE_PROPERTIES, *, timeout: float
    ) -> UnitState:
        return await (await self._control(timeout)).show(unit, props, timeout=timeout)

    async def cat(self, unit: str, *, timeout: float) -> list[UnitFile]:
        return await (await self._control(timeout)).cat(unit, timeout=timeout)

    async def start(self, unit: str, *, timeout: float) -> None:
        await (await self._control(timeout)).start(unit, timeout=timeout)

    async def stop(self, unit: str, *, timeout: float) -> None:
        await (await self._control(timeout)).stop(unit, timeout=timeout)

    async def reset_failed(self, unit: str, *, timeout: float) -> None:
        await (await self._control(timeout)).reset_failed(unit, timeout=timeout)

    async def daemon_reload(self, *, timeout: float) -> None:
        await (await self._control(timeout)).daemon_reload(timeout=timeout)

    async def close(self) -> None:
        if self._bus is not None:
            await self._bus.close()


def nvml_missing() -> str | None:
    """Why NVML cannot be used on this machine (None: it can). Blocks: run it in a thread."""
    try:
        import pynvml
    except ImportError as exc:
        return f"pynvml cannot be imported: {exc}"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"nvmlInit failed: {exc}"
    pynvml.nvmlShutdown()  # init counts: NvmlProbe holds its own
    return None


class LocalGpuProbe(_ChosenOnce[GpuProbe]):
    """This machine's GPUs through NVML, or ``nvidia-smi`` on PATH where NVML is missing, or
    the machine's RAM where neither is (no NVIDIA GPU); chosen once, at the first read, and
    logged (``gpu_reader.chosen``)."""

    def __init__(self, transport: LocalTransport) -> None:
        super().__init__()
        self.transport = transport

    async def _probe(self) -> GpuProbe:
        return await self._once(self._choose)

    async def _choose(self) -> tuple[GpuProbe, str, str]:
        log = get_logger(host=self.transport.name)
        why = await asyncio.to_thread(nvml_missing)
        if why is None:
            log.info("gpu_reader.chosen", mechanism=NvmlProbe.mechanism)
            return NvmlProbe(), NvmlProbe.mechanism, "GPUs through NVML"
        if shutil.which("nvidia-smi") is None:
            log.warning("gpu_reader.chosen", mechanism=HostMemoryProbe.mechanism, reason=why)
            detail = f"no GPU: no NVML ({why}) and no nvidia-smi on PATH: the host's RAM"
            return HostMemoryProbe(self.transport), HostMemoryProbe.mechanism, detail
        log.warning("gpu_reader.chosen", mechanism=NvidiaSmiProbe.mechanism, reason=why)
        detail = f"GPUs by nvidia-smi: no NVML ({why})"
        return NvidiaSmiProbe(self.transport), NvidiaSmiProbe.mechanism, detail

    async def snapshot(self) -> GpuSnapshot:
        return await (await self._probe()).snapshot()

    async def identities(self) -> tuple[GpuIdentity, ...]:
        return await (await self._probe()).identities()

    def close(self) -> None:
        if self._chosen is not None:
            self._chosen.close()


def open_host(host: HostAddress, *, connect_timeout: float = 10.0) -> HostHandle:
    """The host's handle (its connection, or a local host's bus and GPU reader, is made
    lazily, on first use)."""
    if host.address == "local":
        local = LocalTransport(host.name, sudo=host.sudo)
        control = LocalUnitControl(local, connect_timeout=connect_timeout)
        return HostHandle(local, control, LocalGpuProbe(local))
    remote = SSHTransport(ssh_settings(host, connect_timeout=connect_timeout))
    return HostHandle(remote, SystemctlControl(remote), NvidiaSmiOrHostMemory(remote))
