"""The host's processes as ``/proc`` shows them, and the control-group stand-in built on it.

There are no real cgroups here: a unit's "control group" is the set of live processes in the
sessions the manager started, plus their descendants (a process that calls ``setsid()`` and is
re-parented escapes it). Also: which process listens on a TCP address, so that a port the
simulator cannot take is reported with what holds it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ProcInfo:
    pid: int
    ppid: int
    sid: int
    state: str
    comm: str


def scan_processes() -> dict[int, ProcInfo]:
    """Every process's ``/proc/PID/stat``. The manager scans at each start, stop and ``systemctl
    show``, on a machine with hundreds of processes: one ``os.read`` of bytes per process costs
    well under half of a text-mode ``open().read()``."""
    procs: dict[int, ProcInfo] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            raw = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        close = raw.rfind(b")")
        if close < 0:
            continue  # gone between the listing and the read
        comm = raw[raw.index(b"(") + 1 : close].decode("utf-8", errors="replace")
        rest = raw[close + 2 :].split(None, 4)
        pid = int(name)
        procs[pid] = ProcInfo(pid, int(rest[1]), int(rest[3]), rest[0].decode("ascii"), comm)
    return procs


def group_members(sessions: set[int], procs: Mapping[int, ProcInfo]) -> set[int]:
    """Live processes in ``sessions`` plus their descendants (our stand-in for a cgroup)."""
    members = {p.pid for p in procs.values() if p.sid in sessions and p.state not in "ZX"}
    changed = True
    while changed:
        changed = False
        for proc in procs.values():
            if proc.pid not in members and proc.ppid in members and proc.state not in "ZX":
                members.add(proc.pid)
                changed = True
    return members


def kill_quietly(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return str(number)


def process_comm(pid: int, fallback: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text(encoding="utf-8").strip()
    except OSError:
        return os.path.basename(fallback)[:15]


_TCP_LISTEN = "0A"


@dataclass(frozen=True, slots=True)
class Listener:
    """A process with a listening TCP socket open."""

    pid: int
    command: str


def _proc_net_address(text: str) -> str:
    """``0B00007F`` (IPv4) or 32 hex digits (IPv6) from /proc/net/tcp*: words in host order."""
    raw = bytes.fromhex(text)
    words = struct.unpack(f">{len(raw) // 4}I", raw)
    packed = struct.pack(f"={len(words)}I", *words)
    family = socket.AF_INET if len(packed) == 4 else socket.AF_INET6
    return socket.inet_ntop(family, packed)


def _blocks(listening: str, address: str) -> bool:
    """Whether a socket listening on ``listening`` keeps ``address`` (same port) from binding."""
    if listening in (address, "0.0.0.0", "::"):
        return True
    mapped = ipaddress.ip_address(listening)
    return isinstance(mapped, ipaddress.IPv6Address) and str(mapped.ipv4_mapped) == address


def listening_inodes(address: str, port: int) -> set[int]:
    """Socket inodes of TCP listeners on ``address:port`` or on a wildcard of that port."""
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            host, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port and _blocks(_proc_net_address(host), address):
                inodes.add(int(fields[9]))
    return inodes


def listeners(address: str, port: int) -> list[Listener]:
    """The processes holding a listening socket on ``address:port`` (empty when not visible to
    us: another user's process without root, or another network namespace)."""
    wanted = {f"socket:[{inode}]" for inode in listening_inodes(address, port)}
    found: list[Listener] = []
    if not wanted:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{entry.name}/fd/{fd}")
            except OSError:
                continue
            if target in wanted:
                found.append(Listener(int(entry.name), process_command(int(entry.name))))
                break
    return found


def process_command(pid: int) -> str:
    """The process's command line as one string (``[comm]`` for a kernel thread)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in raw.split(b"\0") if w]
    return " ".join(words) if words else f"[{process_comm(pid, '?')}]"
