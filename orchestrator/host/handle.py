"""One host as the control code holds it: commands and files, its units, its GPUs.

The three travel together because they are one host: the unit control and the GPU probe of an
SSH host run over that host's transport, those of ``address: local`` use this machine's
subprocesses and NVML. ``connect.open_host`` builds a handle from a sweep file's host entry (the
one place that decides which sides a host gets); the lifecycle, the preflight and the runner
only take what a handle gives them. A test may build one from any transport, control and probe.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.host.gpu import GpuProbe
from orchestrator.host.transport import Transport
from orchestrator.host.unitcontrol import UnitControl


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

    async def close(self) -> None:
        """Release the probe's own handle, then the connection (outstanding commands stop)."""
        self.gpu.close()
        await self.transport.close()
