"""One host as the control code holds it: commands and files, its units, its GPUs.

The three travel together because they are one host: the unit control and the GPU probe of an
SSH host run over that host's transport; those of ``address: local`` are this machine's system
bus (``systemctl`` where there is none) and NVML (``nvidia-smi`` where there is none), chosen at
first use. ``connect.open_host`` builds a handle from a sweep file's host entry (the one place
that decides which sides a host gets); the lifecycle, the preflight and the runner only take
what a handle gives them. A test may build one from any transport, control and probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from orchestrator.host.gpu import GpuProbe
from orchestrator.host.transport import Transport
from orchestrator.host.unitcontrol import UnitControl


@runtime_checkable
class Mechanism(Protocol):
    """A side that says how it reaches the host: ``dbus``/``systemctl`` for units,
    ``nvml``/``nvidia-smi`` for GPUs; None while a local host has not chosen yet."""

    @property
    def mechanism(self) -> str | None: ...


@runtime_checkable
class Explained(Protocol):
    """A side that chose among ways (a local host's): where it went, or why not the first."""

    @property
    def detail(self) -> str: ...


@runtime_checkable
class Closable(Protocol):
    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class HostAccess:
    """How a host's units and GPUs were reached, for the preflight and the events."""

    unit_control: str | None
    gpu_reader: str | None
    detail: str = ""
    """Where, or why not the first choice (a local host without a bus or without NVML)."""


@dataclass(frozen=True, slots=True)
class HostHandle:
    """How to reach one host: ``transport`` (commands, files, streams), ``control`` (its
    systemd units) and ``gpu`` (its GPUs' memory and identities)."""

    transport: Transport
    control: UnitControl
    gpu: GpuProbe

    @property
    def name(self) -> str:
        """The host's name, for errors, logs and events."""
        return self.transport.name

    @property
    def access(self) -> HostAccess:
        """Which unit control and GPU reader this host uses (a side that does not say is
        named by its type)."""
        details = [s.detail for s in (self.control, self.gpu) if isinstance(s, Explained)]
        return HostAccess(
            _mechanism(self.control), _mechanism(self.gpu), "; ".join(d for d in details if d)
        )

    async def close(self) -> None:
        """Release the probe's own handle and the control's bus, then the connection
        (outstanding commands stop)."""
        self.gpu.close()
        if isinstance(self.control, Closable):
            await self.control.close()
        await self.transport.close()


def _mechanism(side: object) -> str | None:
    return side.mechanism if isinstance(side, Mechanism) else type(side).__name__
