"""A private network for each pytest-xdist worker, so that fixed loopback addresses stay safe.

Tests bind fixed loopback addresses and ports on purpose: the real-systemd host's sshd at
127.0.0.41:2241, the demo's hosts at 127.0.0.11-12 (SSH 2222, SGLang 30000), one address per
fault test so that a socket left in TIME_WAIT never blocks the next. Run one after another they
never meet; run by several workers at once they would. Each worker therefore moves into a network
namespace of its own (``unshare(CLONE_NEWNET)``, then its loopback device is brought up): every
process the worker starts (sshd, systemd, the daemon, simulated hosts) lives in it, and two
workers can both listen on 127.0.0.41:2241. Nothing else changes: the same kernel, loopback and
TCP stack as a serial run, only not shared between workers.

A private namespace has no route out, so packages are installed in the machine's own network
(``host_network_argv``): the namespace the worker started in stays open as a file descriptor.
Needs CAP_SYS_ADMIN (root, as in CI); ``why_unavailable`` says why not, and a run without it
stays serial.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sh"  # struct ifreq: the interface name, then ifr_flags (the rest is never read)

_host_network_fd: int | None = None
"""The network namespace this process started in, held open once it has moved out of it."""


def _unshare_network() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare(CLONE_NEWNET): {os.strerror(errno)}")


def _bring_up_loopback() -> None:
    """``ip link set lo up`` without iproute2 (a fresh machine may lack it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def enter_private_network() -> None:
    """Move this process (and all it starts from now on) into a new network namespace whose
    loopback is up; the namespace it leaves stays reachable for ``host_network_argv``."""
    global _host_network_fd
    if _host_network_fd is not None:
        return
    original = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _unshare_network()
        _bring_up_loopback()
    except OSError:
        os.close(original)
        raise
    _host_network_fd = original


def why_unavailable() -> str | None:
    """Why workers cannot have private networks here (tried in a child process), or None."""
    if sys.platform != "linux":
        return "private networks per worker need Linux"
    probe = subprocess.run(
        [sys.executable, "-c", "from tests.parallel import enter_private_network as e; e()"],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        return lines[-1] if lines else f"the probe exited {probe.returncode}"
    return None


def host_network_argv(argv: list[str]) -> tuple[list[str], tuple[int, ...]]:
    """``argv`` to run in the machine's own network, and the descriptors it must inherit.

    Unchanged when this process never left that network (a serial run)."""
    if _host_network_fd is None:
        return argv, ()
    fd = _host_network_fd
    return ["nsenter", f"--net=/proc/self/fd/{fd}", "--", *argv], (fd,)
