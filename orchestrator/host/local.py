"""The local side of the Transport seam: the same protocol on this machine (``address: local``).

Commands run as asyncio subprocesses in their own session, so a timeout or an abandoned call
stops the whole process group (a shell's children included), as the SSH side does on a host.
Files are written beside their target, fsynced, and renamed with ``os.replace``; the directory
is fsynced too, so a crash leaves the old file or the new one, never half of either.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TypeVar

from orchestrator.host.transport import (
    CommandFailed,
    CommandTimeout,
    CompletedCommand,
    LineStream,
    sudo_read_file,
    sudo_remove_file,
    sudo_write_file_atomic,
    temp_path_beside,
)
from orchestrator.log import get_logger

T = TypeVar("T")

_TERMINATE_GRACE_S = 2.0
_KILL_GRACE_S = 1.0
# What a shell answers for a program it cannot find; the SSH side gets it from the remote shell.
_NOT_FOUND_STATUS = 127


class _LocalLineStream:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert self._process.stdout is not None
        async for line in self._process.stdout:
            yield line[:-1] if line.endswith(b"\n") else line


class LocalTransport:
    """Transport for this machine; ``sudo`` adds ``sudo -n`` to privileged work when not root."""

    def __init__(self, name: str = "local", *, sudo: bool = False) -> None:
        self._name = name
        self._sudo = sudo and os.geteuid() != 0
        self._log = get_logger(host=name)
        self._processes: set[asyncio.subprocess.Process] = set()

    @property
    def name(self) -> str:
        return self._name

    @property
    def sudo(self) -> bool:
        """Privileged work goes through ``sudo -n`` (asked for, and not root)."""
        return self._sudo

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
        """Run ``argv`` (no shell); ``idempotent`` is moot here: nothing can drop."""
        asked = tuple(argv)
        try:
            process = await self._spawn(
                asked,
                privileged,
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError as exc:
            result = CompletedCommand(asked, _NOT_FOUND_STATUS, b"", f"{exc}\n".encode())
        else:
            try:
                async with asyncio.timeout(timeout):
                    stdout, stderr = await process.communicate(stdin)
            except TimeoutError:
                self._log.warning("local.command_timeout", argv=list(asked), timeout_s=timeout)
                await self._stop(process)
                raise CommandTimeout(
                    self.name, f"{asked[0]} ran past {timeout:g} s; stopped with SIGTERM"
                ) from None
            finally:
                await self._forget(process)
            assert process.returncode is not None
            result = CompletedCommand(asked, process.returncode, stdout, stderr)
        if check and not result.ok:
            raise CommandFailed(self.name, result)
        return result

    def stream(
        self, argv: Sequence[str], *, privileged: bool = False
    ) -> AbstractAsyncContextManager[LineStream]:
        return self._stream(tuple(argv), privileged)

    @asynccontextmanager
    async def _stream(self, argv: tuple[str, ...], privileged: bool) -> AsyncIterator[LineStream]:
        process = await self._spawn(
            argv, privileged, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
        )
        try:
            yield _LocalLineStream(process)
        finally:
            await self._forget(process)

    async def _spawn(
        self, argv: tuple[str, ...], privileged: bool, *, stdin: int, stderr: int
    ) -> asyncio.subprocess.Process:
        if not argv:
            raise ValueError("argv must not be empty")
        full = ("sudo", "-n", "--", *argv) if privileged and self._sudo else argv
        process = await asyncio.create_subprocess_exec(
            *full,
            stdin=stdin,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            start_new_session=True,  # its own process group, so a stop reaches its children
        )
        self._processes.add(process)
        return process

    async def _stop(self, process: asyncio.subprocess.Process) -> None:
        """SIGTERM the process group, SIGKILL it after a grace period."""
        for sig, grace in ((signal.SIGTERM, _TERMINATE_GRACE_S), (signal.SIGKILL, _KILL_GRACE_S)):
            if process.returncode is not None:
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await process.wait()

    async def _forget(self, process: asyncio.subprocess.Process) -> None:
        """Stop a process still running (its caller left or was cancelled) and reap it."""
        self._processes.discard(process)
        if process.returncode is None:
            await asyncio.shield(self._stop(process))

    # -- files ----------------------------------------------------------------------------

    async def read_file(self, path: str, *, timeout: float) -> bytes:
        if self._sudo:
            return await sudo_read_file(self, path, timeout=timeout)
        return await self._in_thread(Path(path).read_bytes, path=path, timeout=timeout)

    async def write_file_atomic(
        self, path: str, data: bytes, *, mode: int = 0o644, timeout: float
    ) -> None:
        temp = temp_path_beside(path, secrets.token_hex(6))
        if self._sudo:
            await sudo_write_file_atomic(self, path, temp, data, mode=mode, timeout=timeout)
            return
        await self._in_thread(
            lambda: write_atomic(path, temp, data, mode), path=path, timeout=timeout
        )

    async def remove_file(self, path: str, *, timeout: float) -> bool:
        if self._sudo:
            return await sudo_remove_file(self, path, timeout=timeout)

        def remove() -> bool:
            try:
                os.unlink(path)
            except FileNotFoundError:
                return False
            return True

        return await self._in_thread(remove, path=path, timeout=timeout)

    async def _in_thread(self, work: Callable[[], T], *, path: str, timeout: float) -> T:
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.to_thread(work)
        except TimeoutError:
            raise CommandTimeout(
                self.name, f"file operation on {path} ran past {timeout:g} s"
            ) from None

    async def close(self) -> None:
        for process in list(self._processes):
            await self._forget(process)


def write_atomic(path: str, temp: str, data: bytes, mode: int) -> None:
    """Write ``data`` to ``temp``, fsync, rename over ``path``, fsync the directory."""
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
