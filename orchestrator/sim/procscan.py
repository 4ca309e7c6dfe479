"""The host's processes as ``/proc`` shows them, and the control-group stand-in built on it.

There are no real cgroups here: a unit's "control group" is the set of live processes in the
sessions the manager started, plus their descendants (a process that calls ``setsid()`` and is
re-parented escapes it).
"""

from __future__ import annotations

import contextlib
import os
import signal
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
    procs: dict[int, ProcInfo] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as handle:
                raw = handle.read()
        except OSError:
            continue
        comm = raw[raw.index("(") + 1 : raw.rindex(")")]
        rest = raw[raw.rindex(")") + 2 :].split()
        procs[int(entry.name)] = ProcInfo(
            int(entry.name), int(rest[1]), int(rest[3]), rest[0], comm
        )
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
