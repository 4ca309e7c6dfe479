"""The simulated host's SSH server: asyncssh with OpenSSH's behaviour where it matters.

- public-key authentication from an authorized_keys file, a host key of its own;
- ``MaxSessions 10`` per connection: the 11th concurrent session channel is refused with
  "administratively prohibited: open failed", as OpenSSH does (FACTS: SSH);
- exec requests go to a command handler as raw bytes (``encoding=None``), so non-UTF-8 output
  passes through untouched; a signal from the client or a closed channel stops the command;
- SFTP chrooted to the host's private root (posix-rename supported);
- faults: every connection can be dropped abruptly, and the host can freeze (connections stay
  open but nothing is read or written; new TCP connections are accepted and never greeted).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncssh
from asyncssh.channel import SSHChannel

from orchestrator.log import get_logger
from orchestrator.sim.procscan import Listener, listeners

MAX_SESSIONS = 10
SFTP_VERSION = 3

CommandHandler = Callable[[str, "ChannelIO"], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class SshServerConfig:
    address: str
    port: int
    host_key: Path
    authorized_keys: Path
    sftp_root: Path
    max_sessions: int = MAX_SESSIONS


class BindError(OSError):
    """The SSH server cannot listen on its address: ``str()`` is the one line a person reads,
    naming the address and, when /proc shows it, the process that holds it."""

    def __init__(
        self, address: str, port: int, code: int, reason: str, holders: list[Listener]
    ) -> None:
        super().__init__(code, reason)
        self.address = address
        self.port = port
        self.holders = holders

    def __str__(self) -> str:
        where = f"{self.address}:{self.port}"
        if self.errno != errno.EADDRINUSE:
            return f"cannot listen on {where}: {self.strerror}"
        if not self.holders:
            return f"{where} is in use (is `orchestrator sim up` or `orchestrator demo` running?)"
        holder = self.holders[0]
        command = " ".join(holder.command.split())
        if len(command) > 100:
            command = command[:97] + "..."
        return f"{where} is in use by pid {holder.pid} ({command})"


class FreezeGate:
    """Open normally; closed while the host is frozen (writers wait at it)."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()

    @property
    def frozen(self) -> bool:
        return not self._open.is_set()

    def freeze(self) -> None:
        self._open.clear()

    def thaw(self) -> None:
        self._open.set()

    async def wait_open(self) -> None:
        await self._open.wait()


class ChannelIO:
    """A command's view of its channel: output writers and a 'caller went away' event."""

    def __init__(self, process: asyncssh.SSHServerProcess[bytes], gate: FreezeGate) -> None:
        self._process = process
        self._gate = gate
        self._stopped = asyncio.Event()

    @property
    def stopped(self) -> asyncio.Event:
        return self._stopped

    async def _write(self, stream: asyncssh.SSHWriter[bytes], data: bytes) -> None:
        if self._gate.frozen:
            await self._gate.wait_open()
        if self._stopped.is_set():
            return
        try:
            stream.write(data)
            await stream.drain()
        except (BrokenPipeError, ConnectionError, asyncssh.Error):
            self._stopped.set()

    async def write_out(self, data: bytes) -> None:
        await self._write(self._process.stdout, data)

    async def write_err(self, data: bytes) -> None:
        await self._write(self._process.stderr, data)


class _Session(asyncssh.SSHServerProcess[bytes]):
    """A session channel that frees its MaxSessions slot and stops its command on close."""

    def __init__(self, server: _ConnectionServer) -> None:
        super().__init__(server.start_process, server.start_sftp, SFTP_VERSION, False)
        self._server = server
        self.io: ChannelIO | None = None

    def signal_received(self, signal: str) -> None:
        if self.io is not None:
            self.io.stopped.set()
        super().signal_received(signal)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.release_slot()
        if self.io is not None:
            self.io.stopped.set()
        super().connection_lost(exc)


class _ConnectionServer(asyncssh.SSHServer):
    """One per connection: authentication and the session count."""

    def __init__(self, sshd: SimSshServer) -> None:
        self._sshd = sshd
        self._sessions = 0
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self._sshd.connections.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self._sshd.connections.discard(self.conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def session_requested(self) -> _Session:
        if self._sessions >= self._sshd.config.max_sessions:
            prohibited = asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED
            raise asyncssh.ChannelOpenError(prohibited, "open failed")
        self._sessions += 1
        return _Session(self)

    def release_slot(self) -> None:
        self._sessions = max(self._sessions - 1, 0)

    async def start_process(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        await self._sshd.serve_process(process)

    def start_sftp(self, chan: SSHChannel[bytes]) -> asyncssh.SFTPServer:
        assert isinstance(chan, asyncssh.SSHServerChannel)
        return asyncssh.SFTPServer(chan, chroot=str(self._sshd.config.sftp_root).encode())


class SimSshServer:
    """Listen on one loopback address and port; run commands through ``handler``."""

    def __init__(self, config: SshServerConfig, handler: CommandHandler, gate: FreezeGate) -> None:
        self.config = config
        self.handler = handler
        self.gate = gate
        self.connections: set[asyncssh.SSHServerConnection] = set()
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._black_hole: asyncio.Server | None = None
        self._held: list[asyncio.Transport] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._frozen = False
        self._log = get_logger(component="sim.sshd", address=config.address, port=config.port)

    async def start(self) -> None:
        """Listen; a port that cannot be taken raises :class:`BindError`."""
        try:
            self._acceptor = await self._listen()
        except OSError as exc:
            if exc.errno not in (errno.EADDRINUSE, errno.EADDRNOTAVAIL):
                raise  # not the socket's (a key file, say): its own message says what
            address, port = self.config.address, self.config.port
            holders = listeners(address, port) if exc.errno == errno.EADDRINUSE else []
            raise BindError(address, port, exc.errno, os.strerror(exc.errno), holders) from None

    async def _listen(self) -> asyncssh.SSHAcceptor:
        return await asyncssh.create_server(
            lambda: _ConnectionServer(self),
            self.config.address,
            self.config.port,
            server_host_keys=[str(self.config.host_key)],
            authorized_client_keys=str(self.config.authorized_keys),
            encoding=None,
            keepalive_interval=0,
            line_editor=False,
            allow_scp=False,
            x509_trusted_certs=None,
        )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None
        self._close_black_hole()
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()

    async def serve_process(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        io = ChannelIO(process, self.gate)
        if isinstance(process, _Session):
            process.io = io
        command = process.command
        if command is None:
            await io.write_err(b"This simulated host runs commands only (no interactive shell).\n")
            self._exit(process, 1)
            return
        try:
            status = await self.handler(command, io)
        except asyncio.CancelledError:
            status = 255
        except Exception as exc:
            self._log.exception("sshd.command_failed", command=command, error=str(exc))
            await io.write_err(f"simulator error: {exc}\n".encode())
            status = 1
        if self.gate.frozen:
            await self.gate.wait_open()
        self._exit(process, status)

    @staticmethod
    def _exit(process: asyncssh.SSHServerProcess[bytes], status: int) -> None:
        with contextlib.suppress(Exception):
            process.exit(status)

    def drop_connections(self) -> None:
        """Close every connection at once, without a disconnect message."""
        self._log.info("sshd.connections_dropped", count=len(self.connections))
        for conn in list(self.connections):
            conn.abort()
        self.connections.clear()

    async def freeze(self) -> None:
        """Stop answering: no reads on open connections, new connections never greeted."""
        if self._frozen:
            return
        self._frozen = True
        self.gate.freeze()
        self._log.info("sshd.frozen")
        for conn in self.connections:
            transport = getattr(conn, "_transport", None)
            if transport is not None:
                with contextlib.suppress(Exception):
                    transport.pause_reading()
        if self._acceptor is not None:
            self._acceptor.close()
            await self._acceptor.wait_closed()
            self._acceptor = None
        held = self._held

        class _Silent(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                held.append(transport)  # type: ignore[arg-type]

        loop = asyncio.get_running_loop()
        self._black_hole = await loop.create_server(
            _Silent, self.config.address, self.config.port, reuse_address=True
        )

    async def thaw(self) -> None:
        if not self._frozen:
            return
        self._frozen = False
        self._close_black_hole()
        for conn in self.connections:
            transport = getattr(conn, "_transport", None)
            if transport is not None:
                with contextlib.suppress(Exception):
                    transport.resume_reading()
        self.gate.thaw()
        await self.start()
        self._log.info("sshd.thawed")

    def _close_black_hole(self) -> None:
        if self._black_hole is not None:
            self._black_hole.close()
            self._black_hole = None
        for transport in self._held:
            transport.abort()
        self._held.clear()
