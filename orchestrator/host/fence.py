"""A host handle whose every change is fenced by the host's lease.

Every change the orchestrator makes to a host is a file written or removed through the
transport (a drop-in, its restore) or a unit job through the unit control (``daemon-reload``,
``stop``, ``start``, ``reset-failed``); the lifecycle, the restore and adopt all make them through
the :class:`~orchestrator.host.handle.HostHandle` they are given. :func:`fenced` gives them one
whose transport and control first ask :meth:`HostLease.check` (the one check), so a controller
whose lease was taken over changes nothing, whichever code path it is on. Reads pass through;
a command is a change when its program is one of :data:`CHANGING_PROGRAMS` (a drop-in's
directory made or removed) or a ``systemctl`` verb outside :data:`READING_SYSTEMCTL_VERBS`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager

from orchestrator.host.handle import HostHandle
from orchestrator.host.lease import HostLease
from orchestrator.host.systemd import STATE_PROPERTIES, UnitFile, UnitState
from orchestrator.host.transport import CompletedCommand, LineStream, Transport
from orchestrator.host.unitcontrol import UnitControl

CHANGING_PROGRAMS = frozenset(
    {"mkdir", "rmdir", "rm", "mv", "cp", "ln", "touch", "tee", "install", "truncate", "chmod",
     "chown", "kill", "pkill"}
)  # fmt: skip
"""Programs a command line runs to change the host: fenced like a file write. (Unfenced, a
stalled holder, resumed, made its drop-in's directory again after the new holder had cleared
it, and the new holder took the directory for the host's own.)"""
READING_SYSTEMCTL_VERBS = frozenset(
    {"show", "cat", "status", "is-active", "is-failed", "is-enabled", "is-system-running",
     "list-units", "list-unit-files", "list-jobs"}
)  # fmt: skip


def changes_host(argv: Sequence[str]) -> bool:
    """Whether running ``argv`` on a host changes it (as far as our own commands go)."""
    if not argv:
        return False
    program = argv[0].rsplit("/", 1)[-1]
    if program == "systemctl":
        verbs = [word for word in argv[1:] if not word.startswith("-")]
        return bool(verbs) and verbs[0] not in READING_SYSTEMCTL_VERBS
    return program in CHANGING_PROGRAMS


class FencedTransport:
    """A transport whose file writes and removals, and commands that change the host, are
    fenced."""

    def __init__(self, inner: Transport, lease: HostLease) -> None:
        self.inner, self.lease = inner, lease

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def sudo(self) -> bool:
        return bool(getattr(self.inner, "sudo", False))

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        check: bool = False,
        privileged: bool = False,
        idempotent: bool = True,
        stdin: bytes | None = None,
    ) -> CompletedCommand:
        if changes_host(argv):
            await self.lease.check(" ".join(argv))
        return await self.inner.run(
            argv,
            timeout=timeout,
            check=check,
            privileged=privileged,
            idempotent=idempotent,
            stdin=stdin,
        )

    async def read_file(self, path: str, *, timeout: float) -> bytes:
        return await self.inner.read_file(path, timeout=timeout)

    async def write_file_atomic(
        self, path: str, data: bytes, *, mode: int = 0o644, timeout: float
    ) -> None:
        await self.lease.check(f"write {path}")
        await self.inner.write_file_atomic(path, data, mode=mode, timeout=timeout)

    async def remove_file(self, path: str, *, timeout: float) -> bool:
        await self.lease.check(f"remove {path}")
        return await self.inner.remove_file(path, timeout=timeout)

    def stream(
        self, argv: Sequence[str], *, privileged: bool = False
    ) -> AbstractAsyncContextManager[LineStream]:
        return self.inner.stream(argv, privileged=privileged)

    async def close(self) -> None:
        await self.inner.close()


class FencedControl:
    """A unit control whose jobs and reloads are fenced."""

    def __init__(self, inner: UnitControl, lease: HostLease) -> None:
        self.inner, self.lease = inner, lease

    @property
    def mechanism(self) -> str | None:
        return getattr(self.inner, "mechanism", type(self.inner).__name__)

    @property
    def detail(self) -> str:
        return str(getattr(self.inner, "detail", ""))

    async def show(
        self, unit: str, props: Sequence[str] = STATE_PROPERTIES, *, timeout: float
    ) -> UnitState:
        return await self.inner.show(unit, props, timeout=timeout)

    async def cat(self, unit: str, *, timeout: float) -> list[UnitFile]:
        return await self.inner.cat(unit, timeout=timeout)

    async def start(self, unit: str, *, timeout: float) -> None:
        await self.lease.check(f"start {unit}")
        await self.inner.start(unit, timeout=timeout)

    async def stop(self, unit: str, *, timeout: float) -> None:
        await self.lease.check(f"stop {unit}")
        await self.inner.stop(unit, timeout=timeout)

    async def reset_failed(self, unit: str, *, timeout: float) -> None:
        await self.lease.check(f"reset-failed {unit}")
        await self.inner.reset_failed(unit, timeout=timeout)

    async def daemon_reload(self, *, timeout: float) -> None:
        await self.lease.check("daemon-reload")
        await self.inner.daemon_reload(timeout=timeout)


def fenced(handle: HostHandle, lease: HostLease) -> HostHandle:
    """``handle`` with every change checked against ``lease`` first (closing it closes the
    original's connection)."""
    return HostHandle(
        FencedTransport(handle.transport, lease), FencedControl(handle.control, lease), handle.gpu
    )


@contextlib.asynccontextmanager
async def held(lease: HostLease, handle: HostHandle) -> AsyncIterator[HostHandle]:
    """``handle`` fenced by ``lease``, renewed by its heartbeat while the context is open."""
    async with lease.renewed():
        yield fenced(handle, lease)


__all__ = [
    "CHANGING_PROGRAMS",
    "READING_SYSTEMCTL_VERBS",
    "FencedControl",
    "FencedTransport",
    "changes_host",
    "fenced",
    "held",
]
