"""From a sweep file's host entry to a :class:`~orchestrator.host.handle.HostHandle`.

The one place that decides how a host is reached. ``address: local`` is this machine: commands
run as local subprocesses, units are driven by ``systemctl`` subprocesses (D-Bus,
``host/dbus.py``, is not wired here yet) and GPU memory is read through NVML; any other address
is reached over SSH with the host's typed settings, and its units and GPUs through that
connection (``systemctl``, ``nvidia-smi``).
"""

from __future__ import annotations

import os
from typing import Protocol

from orchestrator.host.gpu import NvidiaSmiProbe, NvmlProbe
from orchestrator.host.handle import HostHandle
from orchestrator.host.local import LocalTransport
from orchestrator.host.ssh import SSHSettings, SSHTransport
from orchestrator.host.unitcontrol import SystemctlControl

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


def open_host(host: HostAddress, *, connect_timeout: float = 10.0) -> HostHandle:
    """The host's handle (its connection is made lazily, on first use)."""
    if host.address == "local":
        local = LocalTransport(host.name, sudo=host.sudo)
        return HostHandle(local, SystemctlControl(local), NvmlProbe())
    remote = SSHTransport(ssh_settings(host, connect_timeout=connect_timeout))
    return HostHandle(remote, SystemctlControl(remote), NvidiaSmiProbe(remote))
