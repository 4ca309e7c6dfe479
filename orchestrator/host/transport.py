"""The seam between host control and how commands reach a host.

Lifecycle, systemd, journal and GPU code talk to a :class:`Transport` and never to asyncssh or
subprocess directly (as httpx's client never knows its transport). ``ssh.py`` and ``local.py``
are the two sides; a test may hand in any object with these methods.

Argv is always a sequence of strings: a transport quotes it for the remote shell itself, so no
caller ever builds a command line by concatenating sweep values.
"""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from orchestrator.host.errors import HostError
from orchestrator.types import FailureCause


@dataclass(frozen=True, slots=True)
class CompletedCommand:
    """What a finished command left behind: its exit status and raw output bytes."""

    argv: tuple[str, ...]
    exit_status: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def stdout_text(self) -> str:
        """stdout decoded leniently: hosts' output may hold non-UTF-8 bytes (FACTS: SSH)."""
        return self.stdout.decode("utf-8", errors="replace")

    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


def command_evidence(result: CompletedCommand) -> dict[str, Any]:
    """What a failed command leaves as evidence: its argv, exit status and output's tail."""
    return {
        "command": {
            "argv": list(result.argv),
            "exit_status": result.exit_status,
            "stderr": result.stderr_text().strip()[-400:],
        }
    }


class TransportError(HostError):
    """A host could not be reached or did not do what was asked; carries the host's name."""

    cause: FailureCause = "host-unreachable"

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.message = message

    @property
    def evidence(self) -> dict[str, Any]:
        return {"host": self.host}


class HostUnreachable(TransportError):
    """Connecting (or reconnecting) failed: refused, timed out, DNS, keepalive lost."""


class AuthenticationFailed(HostUnreachable):
    """The host answered but refused our key: a configuration error, never retried."""


class HostKeyMismatch(TransportError):
    """The host's key is unknown or differs from known_hosts: never trusted silently."""


class CommandTimeout(TransportError):
    """A command ran past its timeout; it was stopped with a signal on the host."""


class CommandFailed(TransportError):
    """A command run with ``check=True`` exited non-zero; the output is the evidence. The host
    answered, so it is not unreachable."""

    cause: FailureCause = "host-command-failed"

    def __init__(self, host: str, result: CompletedCommand) -> None:
        tail = result.stderr_text().strip()[-400:]
        super().__init__(host, f"{result.argv[0]} exited {result.exit_status}: {tail}")
        self.result = result

    @property
    def evidence(self) -> dict[str, Any]:
        return {**super().evidence, **command_evidence(self.result)}


# The scripts of the sudo file operations (sudo_read_file and its kin, below). Values travel
# as positional parameters, never spliced into the script. A missing file exits with
# SUDO_FILE_MISSING_STATUS.
SUDO_FILE_MISSING_STATUS = 44
SUDO_READ_SCRIPT = 'test -e "$1" || exit 44; exec cat -- "$1"'
SUDO_REMOVE_SCRIPT = 'test -e "$1" || test -L "$1" || exit 44; exec rm -f -- "$1"'
# $1 temp path beside the target, $2 octal mode, $3 target; the bytes arrive on stdin.
SUDO_WRITE_SCRIPT = (
    'umask 077; { cat > "$1" && chmod "$2" "$1" && sync "$1" && mv -f -- "$1" "$3"; } '
    '|| { rc=$?; rm -f -- "$1"; exit "$rc"; }'
)


TEMP_MARKER = "orchestrator-tmp-"


def temp_path_beside(path: str, token: str) -> str:
    """The temporary name a write goes to before it is renamed over ``path`` (same directory,
    so the rename is atomic; recognisable, so a leftover can be traced to us)."""
    return f"{path}.{TEMP_MARKER}{token}"


def is_temp_beside(name: str, target_name: str) -> bool:
    """Whether the file ``name`` is one of our temporary writes of ``target_name``."""
    return name.startswith(f"{target_name}.{TEMP_MARKER}")


class LineStream(Protocol):
    """Lines (bytes, without the trailing newline) of a long-running command's stdout."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...


@runtime_checkable
class Transport(Protocol):
    """Run commands and move files on one host."""

    @property
    def name(self) -> str:
        """The host's name, for errors and logs."""
        ...

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
        """Run ``argv``; ``privileged`` adds ``sudo -n`` for a non-root user with sudo.

        ``idempotent`` calls may be retried after a reconnect; others never are (a
        ``systemctl start`` must not run twice because a connection dropped).
        """
        ...

    async def read_file(self, path: str, *, timeout: float) -> bytes:
        """The file's bytes; raises FileNotFoundError when it does not exist."""
        ...

    async def write_file_atomic(
        self, path: str, data: bytes, *, mode: int = 0o644, timeout: float
    ) -> None:
        """Write to a temporary file beside ``path`` and rename it over ``path``."""
        ...

    async def remove_file(self, path: str, *, timeout: float) -> bool:
        """Remove ``path``; False when it did not exist."""
        ...

    def stream(
        self, argv: Sequence[str], *, privileged: bool = False
    ) -> AbstractAsyncContextManager[LineStream]:
        """Start ``argv`` and yield its stdout lines; leaving the context stops the command."""
        ...

    async def close(self) -> None:
        """Release the connection; outstanding commands are stopped."""
        ...


# File operations for a non-root user with sudo: SFTP runs as the login user, so files go
# through ``sudo -n sh -c SCRIPT sh ARGS...`` run by the transport itself, whichever side.


async def sudo_read_file(transport: Transport, path: str, *, timeout: float) -> bytes:
    """:meth:`Transport.read_file` through :data:`SUDO_READ_SCRIPT`."""
    result = await transport.run(
        ["sh", "-c", SUDO_READ_SCRIPT, "sh", path], timeout=timeout, privileged=True
    )
    if result.exit_status == SUDO_FILE_MISSING_STATUS:
        raise FileNotFoundError(errno.ENOENT, f"no such file on {transport.name}", path)
    if not result.ok:
        raise CommandFailed(transport.name, result)
    return result.stdout


async def sudo_write_file_atomic(
    transport: Transport, path: str, temp: str, data: bytes, *, mode: int, timeout: float
) -> None:
    """:meth:`Transport.write_file_atomic` through :data:`SUDO_WRITE_SCRIPT`, by way of
    ``temp`` (:func:`temp_path_beside`)."""
    await transport.run(
        ["sh", "-c", SUDO_WRITE_SCRIPT, "sh", temp, format(mode, "o"), path],
        timeout=timeout,
        privileged=True,
        stdin=data,
        check=True,
    )


async def sudo_remove_file(transport: Transport, path: str, *, timeout: float) -> bool:
    """:meth:`Transport.remove_file` through :data:`SUDO_REMOVE_SCRIPT`."""
    result = await transport.run(
        ["sh", "-c", SUDO_REMOVE_SCRIPT, "sh", path], timeout=timeout, privileged=True
    )
    if result.exit_status == SUDO_FILE_MISSING_STATUS:
        return False
    if not result.ok:
        raise CommandFailed(transport.name, result)
    return True
