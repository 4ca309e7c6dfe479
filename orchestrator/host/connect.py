"""From a sweep file's host entry to a Transport and a GPU probe.

``address: local`` is this machine: commands run as local subprocesses and GPU memory is read
through NVML; any other address is reached over SSH with the host's typed settings.
"""

from __future__ import annotations

import os
from typing import Protocol

from orchestrator.host.gpu import GpuProbe, NvidiaSmiProbe, NvmlProbe
from orchestrator.host.local import LocalTransport
from orchestrator.host.ssh import SSHSettings, SSHTransport
from orchestrator.host.transport import Transport

DEFAULT_IDENTITY = "~/.ssh/id_ed25519"


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
        known_hosts=None
        if host.insecure_no_host_check
        else os.path.expanduser(host.known_hosts),
        insecure_no_host_check=host.insecure_no_host_check,
        sudo=host.sudo,
        jump=host.jump,
        connect_timeout=connect_timeout,
    )


def open_transport(host: HostAddress, *, connect_timeout: float = 10.0) -> Transport:
    """A transport for the host (connections are made lazily, on first use)."""
    if host.address == "local":
        return LocalTransport(host.name, sudo=host.sudo)
    return SSHTransport(ssh_settings(host, connect_timeout=connect_timeout))


def gpu_probe(host: HostAddress, transport: Transport) -> GpuProbe:
    """NVML on this machine, nvidia-smi over the transport elsewhere."""
    if host.address == "local":
        return NvmlProbe()
    return NvidiaSmiProbe(transport)
