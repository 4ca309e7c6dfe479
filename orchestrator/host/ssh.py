"""The SSH side of the Transport seam: one supervised asyncssh connection per host.

What the seeds' nights taught (FACTS.md, SSH): OpenSSH allows 10 sessions per connection, so
channels are capped by a semaphore; one non-UTF-8 byte with a text encoding killed a whole
connection, so everything is bytes; a frozen peer is only noticed with keepalives; asyncssh never
reconnects by itself; and closing a channel does not stop a remote command that is not writing,
so abandoned commands are stopped with a signal. A connection that drops is reopened with
exponential backoff, but a command is re-run only when the caller said it is idempotent: a
``systemctl start`` whose outcome is unknown must surface as an error, never run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import secrets
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncssh
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from orchestrator.host.transport import (
    AuthenticationFailed,
    CommandFailed,
    CommandTimeout,
    CompletedCommand,
    HostKeyMismatch,
    HostUnreachable,
    LineStream,
    TransportError,
    sudo_read_file,
    sudo_remove_file,
    sudo_write_file_atomic,
    temp_path_beside,
)
from orchestrator.log import get_logger

T = TypeVar("T")

_PREFERRED_CIPHERS = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
"""AES-GCM first, then asyncssh's default list (which starts with chacha20-poly1305): with
AES-NI, asyncssh spends well under half the CPU per packet on AES-GCM that it spends on
chacha20-poly1305, which builds two cipher contexts for every packet. Every OpenSSH server
offers both; a server without AES-GCM still gets the rest of the defaults."""

# How long a remote command gets between SIGTERM and SIGKILL, and SIGKILL and giving up on it.
_TERMINATE_GRACE_S = 2.0
_KILL_GRACE_S = 1.0

_KILL_COMMAND_TIMEOUT_S = 5.0
# Waits before re-opening a channel the host refused while the connection stayed up.
_REFUSED_CHANNEL_WAITS_S = (0.05, 0.1, 0.2, 0.4, 0.8)
# The codes of a session refused while the connection has its MaxSessions: OpenSSH 9.2's
# serverloop.c answers "open failed" with SSH2_OPEN_CONNECT_FAILED, the simulated sshd with
# ADMINISTRATIVELY_PROHIBITED. No exec request went out, so waiting and asking again is safe.
_REFUSED_WHILE_FULL = (asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, asyncssh.OPEN_CONNECT_FAILED)
# How long a finished command's channel may take to close before its slot is given back.
_CHANNEL_CLOSE_WAIT_S = 2.0
# Run by the remote login shell before every command: report the process group, then exec.
_REPORT_GROUP_THEN_EXEC = 'printf "%s\\n" "$$" && exec "$@"'

# Errors that mean the connection itself went away (as opposed to the command failing).
_CONNECTION_LOST_ERRORS: tuple[type[BaseException], ...] = (
    asyncssh.DisconnectError,
    asyncssh.ConnectionLost,
    asyncssh.SFTPConnectionLost,  # the drop as an SFTP call sees it: no SFTPError of the file
    ConnectionError,
    BrokenPipeError,
)


@dataclass(frozen=True, slots=True)
class JumpHost:
    """A ProxyJump hop: ``[user@]host[:port]``; the user defaults to the target's."""

    user: str
    address: str
    port: int


def parse_jump(spec: str, default_user: str) -> JumpHost:
    """Parse ``[user@]host[:port]`` (``[v6addr]:port`` too) as sweep files write ``jump:``."""
    user, _, hostport = spec.rpartition("@")
    user = user or default_user
    if hostport.startswith("["):
        address, _, rest = hostport[1:].partition("]")
        port_text = rest.removeprefix(":") if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise ValueError(f"jump host {spec!r}: expected [address]:port")
    elif hostport.count(":") == 1:
        address, _, port_text = hostport.partition(":")
    else:
        address, port_text = hostport, ""
    if not address:
        raise ValueError(f"jump host {spec!r}: no host")
    if port_text and not port_text.isdigit():
        raise ValueError(f"jump host {spec!r}: port {port_text!r} is not a number")
    port = int(port_text) if port_text else 22
    if not 0 < port < 65536:
        raise ValueError(f"jump host {spec!r}: port {port} out of range")
    return JumpHost(user=user, address=address, port=port)


@dataclass(frozen=True, slots=True)
class SSHSettings:
    """How to reach one host over SSH: one typed object from the sweep file to the transport.

    ``known_hosts`` may be None only with ``insecure_no_host_check`` (never a silent
    trust-on-first-use). ``reconnect_attempts`` counts connection attempts per call,
    with exponential backoff from ``reconnect_backoff_initial`` up to ``reconnect_backoff_max``.
    """

    name: str
    address: str
    identity_file: str
    known_hosts: str | None
    port: int = 22
    user: str = "root"
    insecure_no_host_check: bool = False
    sudo: bool = False
    jump: str | None = None
    connect_timeout: float = 10.0
    keepalive_interval: float = 5.0
    keepalive_count_max: int = 3
    max_channels: int = 8
    reconnect_attempts: int = 5
    reconnect_backoff_initial: float = 0.5
    reconnect_backoff_max: float = 8.0

    def __post_init__(self) -> None:
        if self.known_hosts is None and not self.insecure_no_host_check:
            raise ValueError(
                f"{self.name}: known_hosts is required unless insecure_no_host_check is set"
            )
        if self.max_channels < 1:
            raise ValueError(f"{self.name}: max_channels must be at least 1")
        if self.reconnect_attempts < 1:
            raise ValueError(f"{self.name}: reconnect_attempts must be at least 1")
        if self.jump is not None:
            parse_jump(self.jump, self.user)

    @property
    def uses_sudo(self) -> bool:
        """Privileged commands and file writes go through ``sudo -n``."""
        return self.sudo and self.user != "root"


class _Reconnectable(HostUnreachable):
    """A connection failed or dropped in a way that a fresh connection may cure."""


@dataclass(frozen=True, slots=True)
class _Started:
    conn: asyncssh.SSHClientConnection
    process: asyncssh.SSHClientProcess[bytes]
    group: int


class _SSHLineStream:
    """stdout lines of one remote process; a dropped connection ends it with HostUnreachable."""

    def __init__(
        self,
        host: str,
        process: asyncssh.SSHClientProcess[bytes],
        conn: asyncssh.SSHClientConnection,
    ) -> None:
        self._host = host
        self._process = process
        self._conn = conn

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for line in self._process.stdout:
                yield line[:-1] if line.endswith(b"\n") else line
        except _CONNECTION_LOST_ERRORS as exc:
            raise HostUnreachable(self._host, f"connection lost while streaming: {exc}") from exc
        if self._conn.is_closed():
            raise HostUnreachable(self._host, "connection lost while streaming")


class SSHTransport:
    """Transport over one lazily opened, supervised asyncssh connection to a host."""

    def __init__(self, settings: SSHSettings) -> None:
        self.settings = settings
        self._log = get_logger(host=settings.name)
        self._channels = asyncio.Semaphore(settings.max_channels)
        self._connect_lock = asyncio.Lock()
        self._conn: asyncssh.SSHClientConnection | None = None
        self._jump_conn: asyncssh.SSHClientConnection | None = None
        self._generation = 0
        # Signals to abandoned commands travel on one extra channel: max_channels + 1 stays
        # under OpenSSH's MaxSessions 10 with the default of 8.
        self._control_channel = asyncio.Semaphore(1)
        self._watchers: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def connection_generation(self) -> int:
        """Incremented by every (re)connect: a caller can tell that a reconnect happened."""
        return self._generation

    # -- commands -------------------------------------------------------------------------

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
        asked = tuple(argv)
        if not asked:
            raise ValueError("argv must not be empty")

        async def once(conn: asyncssh.SSHClientConnection) -> CompletedCommand:
            return await self._run_once(conn, asked, privileged, timeout=timeout, stdin=stdin)

        result = await self._call(once, idempotent=idempotent, what=asked[0])
        if check and not result.ok:
            raise CommandFailed(self.name, result)
        return result

    async def _run_once(
        self,
        conn: asyncssh.SSHClientConnection,
        argv: tuple[str, ...],
        privileged: bool,
        *,
        timeout: float,
        stdin: bytes | None,
    ) -> CompletedCommand:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._channels:
            process = await self._start(conn, argv, privileged, stderr=asyncssh.PIPE)
            group: int | None = None
            try:
                if stdin:
                    process.stdin.write(stdin)
                process.stdin.write_eof()
                try:
                    group = await self._read_process_group(conn, process, timeout)
                    done = await process.wait(timeout=max(0.0, deadline - loop.time()))
                except (asyncssh.TimeoutError, TimeoutError):
                    self._log.warning("ssh.command_timeout", argv=list(argv), timeout_s=timeout)
                    if group is not None:
                        await self._stop_remote(conn, process, group, privileged)
                    raise CommandTimeout(
                        self.name,
                        f"{argv[0]} ran past {timeout:g} s; stopped with SIGTERM on the host",
                    ) from None
            finally:
                self._abandon(conn, process, group, privileged)
                if process.returncode is not None:
                    # Keep the slot until the host has the close too: it counts the session
                    # against MaxSessions until then.
                    with contextlib.suppress(TimeoutError, *_CONNECTION_LOST_ERRORS):
                        async with asyncio.timeout(_CHANNEL_CLOSE_WAIT_S):
                            await process.wait_closed()
        if done.returncode is None:
            # The channel closed without an exit status: the connection went away under it.
            raise asyncssh.ConnectionLost("channel closed without an exit status")
        return CompletedCommand(
            argv=argv,
            exit_status=done.returncode,
            stdout=_as_bytes(done.stdout),
            stderr=_as_bytes(done.stderr),
        )

    def stream(
        self, argv: Sequence[str], *, privileged: bool = False
    ) -> AbstractAsyncContextManager[LineStream]:
        return self._stream(tuple(argv), privileged)

    @asynccontextmanager
    async def _stream(self, argv: tuple[str, ...], privileged: bool) -> AsyncIterator[LineStream]:
        async with self._channels:

            async def start(conn: asyncssh.SSHClientConnection) -> _Started:
                process = await self._start(conn, argv, privileged, stderr=asyncssh.DEVNULL)
                try:
                    process.stdin.write_eof()
                    group = await self._read_process_group(
                        conn, process, self.settings.connect_timeout
                    )
                except BaseException:
                    self._abandon(conn, process, None, privileged)
                    raise
                return _Started(conn, process, group)

            # Starting a reader twice is harmless, so a drop while starting may retry.
            started = await self._call(start, idempotent=True, what=argv[0])
            conn, process, group = started.conn, started.process, started.group
            try:
                yield _SSHLineStream(self.name, process, conn)
            finally:
                if process.returncode is None and not conn.is_closed():
                    with contextlib.suppress(Exception):
                        await self._stop_remote(conn, process, group, privileged)
                self._abandon(conn, process, group, privileged)

    async def _start(
        self,
        conn: asyncssh.SSHClientConnection,
        argv: tuple[str, ...],
        privileged: bool,
        *,
        stderr: Any,
    ) -> asyncssh.SSHClientProcess[bytes]:
        # The remote shell reports its PID (= its process group: sshd's session child calls
        # setsid) and then execs argv, so an abandoned command can be signalled by group.
        command = shlex.join(
            ["exec", "sh", "-c", _REPORT_GROUP_THEN_EXEC, "sh", *self._with_sudo(argv, privileged)]
        )
        for wait_s in (*_REFUSED_CHANNEL_WAITS_S, None):
            try:
                process: asyncssh.SSHClientProcess[bytes] = await conn.create_process(
                    command, encoding=None, stderr=stderr
                )
            except asyncssh.ChannelOpenError as exc:
                if conn.is_closed():
                    # No exec request went out, so even a non-idempotent command may be retried.
                    raise _Reconnectable(self.name, f"connection closed: {exc.reason}") from exc
                if exc.code not in _REFUSED_WHILE_FULL or wait_s is None:
                    raise TransportError(
                        self.name, f"the host refused a channel: {exc.reason}"
                    ) from exc
                # sshd frees a closed session only on its next loop turn, so a channel opened
                # right after another closed can meet MaxSessions for a moment.
                self._log.debug("ssh.channel_refused", reason=exc.reason, wait_s=wait_s)
                await asyncio.sleep(wait_s)
            else:
                return process
        raise AssertionError("the last wait re-raises")  # pragma: no cover

    async def _read_process_group(
        self,
        conn: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[bytes],
        timeout: float,
    ) -> int:
        # asyncio.timeout, not wait_for: on 3.11 wait_for drops a cancel that arrives as the
        # line does, and the caller (a daemon shutting down) then waits out the whole command.
        async with asyncio.timeout(timeout):
            header: bytes = await process.stdout.readline()
        if header.endswith(b"\n") and header[:-1].isdigit():
            return int(header)
        if conn.is_closed():
            raise asyncssh.ConnectionLost("connection closed before the command started")
        raise TransportError(
            self.name, f"the remote shell did not start the command (said {header[:200]!r})"
        )

    async def _stop_remote(
        self,
        conn: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[bytes],
        group: int,
        privileged: bool,
    ) -> None:
        """SIGTERM the command's process group, SIGKILL it after a grace period.

        Not the SSH "signal" request: OpenSSH refuses it for root logins ("session signalling
        requires privilege separation"), and root is the usual login here.
        """
        for signal_name, grace in (("TERM", _TERMINATE_GRACE_S), ("KILL", _KILL_GRACE_S)):
            if process.returncode is not None or conn.is_closed():
                return
            kill = ("kill", f"-{signal_name}", "--", f"-{group}")
            try:
                async with self._control_channel:
                    await conn.run(
                        shlex.join(self._with_sudo(kill, privileged)),
                        encoding=None,
                        timeout=_KILL_COMMAND_TIMEOUT_S,
                    )
            except (asyncssh.Error, OSError, TimeoutError) as exc:
                self._log.warning(
                    "ssh.signal_failed", group=group, signal=signal_name, error=str(exc)
                )
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await process.wait_closed()
                return

    def _abandon(
        self,
        conn: asyncssh.SSHClientConnection,
        process: asyncssh.SSHClientProcess[bytes],
        group: int | None,
        privileged: bool,
    ) -> None:
        """Free the channel; a command still running (e.g. its caller was cancelled) is
        stopped in the background, since closing the channel alone would leave it running."""
        if process.returncode is None and group is not None and not conn.is_closed():
            task = asyncio.create_task(self._stop_remote(conn, process, group, privileged))
            self._background.add(task)
            task.add_done_callback(self._background.discard)
            task.add_done_callback(lambda _task: process.close())
        else:
            process.close()

    def _with_sudo(self, argv: tuple[str, ...], privileged: bool) -> tuple[str, ...]:
        if privileged and self.settings.uses_sudo:
            return ("sudo", "-n", "--", *argv)
        return argv

    # -- files ----------------------------------------------------------------------------

    async def read_file(self, path: str, *, timeout: float) -> bytes:
        if self.settings.uses_sudo:
            return await sudo_read_file(self, path, timeout=timeout)

        async def read(sftp: asyncssh.SFTPClient) -> bytes:
            async with sftp.open(path, "rb") as remote:
                data: bytes = await remote.read()
                return data

        return await self._sftp(read, path=path, timeout=timeout, what="read")

    async def write_file_atomic(
        self, path: str, data: bytes, *, mode: int = 0o644, timeout: float
    ) -> None:
        temp = temp_path_beside(path, secrets.token_hex(6))
        if self.settings.uses_sudo:
            await sudo_write_file_atomic(self, path, temp, data, mode=mode, timeout=timeout)
            return

        async def write(sftp: asyncssh.SFTPClient) -> None:
            try:
                async with sftp.open(temp, "wb") as remote:
                    await remote.write(data)
                    await remote.chmod(mode)
                    await remote.fsync()
                await sftp.posix_rename(temp, path)
            except BaseException:
                with contextlib.suppress(asyncssh.SFTPError, *_CONNECTION_LOST_ERRORS):
                    await sftp.remove(temp)
                raise

        # Rewriting the same bytes is harmless: a drop mid-write writes the same temp file again.
        await self._sftp(write, path=path, timeout=timeout, what="write")

    async def remove_file(self, path: str, *, timeout: float) -> bool:
        if self.settings.uses_sudo:
            return await sudo_remove_file(self, path, timeout=timeout)

        async def remove(sftp: asyncssh.SFTPClient) -> bool:
            try:
                await sftp.remove(path)
            except asyncssh.SFTPNoSuchFile:
                return False
            return True

        return await self._sftp(remove, path=path, timeout=timeout, what="remove")

    async def _sftp(
        self,
        op: Callable[[asyncssh.SFTPClient], Awaitable[T]],
        *,
        path: str,
        timeout: float,
        what: str,
    ) -> T:
        async def once(conn: asyncssh.SSHClientConnection) -> T:
            async with self._channels:
                try:
                    async with asyncio.timeout(timeout), conn.start_sftp_client() as sftp:
                        return await op(sftp)
                except TimeoutError:
                    raise CommandTimeout(
                        self.name, f"sftp {what} {path} ran past {timeout:g} s"
                    ) from None
                except asyncssh.SFTPConnectionLost:
                    raise  # reconnected and re-run by _call, like any dropped connection
                except asyncssh.ChannelOpenError as exc:
                    if conn.is_closed():  # the drop, met as the SFTP channel was opened
                        raise _Reconnectable(self.name, f"connection closed: {exc.reason}") from exc
                    raise TransportError(
                        self.name, f"the host refused an SFTP channel: {exc.reason}"
                    ) from exc
                except asyncssh.SFTPNoSuchFile as exc:
                    raise FileNotFoundError(errno.ENOENT, exc.reason, path) from exc
                except asyncssh.SFTPPermissionDenied as exc:
                    raise PermissionError(errno.EACCES, exc.reason, path) from exc
                except asyncssh.SFTPError as exc:
                    raise TransportError(self.name, f"sftp {what} {path}: {exc.reason}") from exc

        return await self._call(once, idempotent=True, what=f"sftp {what} {path}")

    # -- the connection -------------------------------------------------------------------

    async def _call(
        self,
        op: Callable[[asyncssh.SSHClientConnection], Awaitable[T]],
        *,
        idempotent: bool,
        what: str,
    ) -> T:
        """Run ``op`` on a live connection; reconnect and re-run it only when idempotent."""
        settings = self.settings
        retrying = AsyncRetrying(
            stop=stop_after_attempt(settings.reconnect_attempts),
            wait=wait_exponential(
                multiplier=settings.reconnect_backoff_initial,
                max=settings.reconnect_backoff_max,
            ),
            retry=retry_if_exception_type(_Reconnectable),
            before_sleep=self._log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                conn = await self._connection()
                try:
                    return await op(conn)
                except _CONNECTION_LOST_ERRORS as exc:
                    self._forget(conn)
                    if not idempotent:
                        raise HostUnreachable(
                            self.name,
                            f"connection lost during {what!r}: outcome unknown, "
                            f"not re-run because it is not idempotent ({exc})",
                        ) from exc
                    raise _Reconnectable(
                        self.name, f"connection lost during {what!r} ({exc})"
                    ) from exc
        raise AssertionError("tenacity stops by raising")  # pragma: no cover

    def _log_retry(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        self._log.warning(
            "ssh.reconnect_wait",
            attempt=state.attempt_number,
            wait_s=round(state.upcoming_sleep, 3),
            error=str(error),
        )

    async def _connection(self) -> asyncssh.SSHClientConnection:
        async with self._connect_lock:
            conn = self._conn
            if conn is not None and not conn.is_closed():
                return conn
            conn = await self._open()
            self._conn = conn
            self._generation += 1
            watcher = asyncio.create_task(self._watch(conn, self._generation))
            self._watchers.add(watcher)
            watcher.add_done_callback(self._watchers.discard)
            return conn

    async def _watch(self, conn: asyncssh.SSHClientConnection, generation: int) -> None:
        """Supervise one connection: notice and log the drop the moment it happens."""
        await conn.wait_closed()
        if self._conn is conn:
            self._conn = None
            self._log.warning("ssh.disconnected", generation=generation)

    def _forget(self, conn: asyncssh.SSHClientConnection) -> None:
        """A command saw ``conn`` drop. It may see that before the watcher does, so the drop
        is logged here too (once: the watcher logs only the connection still current)."""
        if self._conn is conn:
            self._conn = None
            self._log.warning("ssh.disconnected", generation=self._generation)
        conn.close()

    async def _open(self) -> asyncssh.SSHClientConnection:
        settings = self.settings
        tunnel: asyncssh.SSHClientConnection | None = None
        if settings.jump is not None:
            hop = parse_jump(settings.jump, settings.user)
            if self._jump_conn is None or self._jump_conn.is_closed():
                self._jump_conn = await self._connect_one(hop.address, hop.port, hop.user, None)
            tunnel = self._jump_conn
        conn = await self._connect_one(settings.address, settings.port, settings.user, tunnel)
        self._log.info(
            "ssh.connected",
            address=settings.address,
            port=settings.port,
            user=settings.user,
            jump=settings.jump,
            generation=self._generation + 1,
        )
        return conn

    async def _connect_one(
        self,
        address: str,
        port: int,
        user: str,
        tunnel: asyncssh.SSHClientConnection | None,
    ) -> asyncssh.SSHClientConnection:
        settings = self.settings
        where = f"{user}@{address}:{port}"
        try:
            return await asyncssh.connect(
                address,
                port,
                tunnel=tunnel,
                username=user,
                config=None,
                client_keys=[settings.identity_file],
                known_hosts=settings.known_hosts,
                agent_path=None,
                password=None,
                kbdint_auth=False,
                encryption_algs=_PREFERRED_CIPHERS,
                keepalive_interval=settings.keepalive_interval,
                keepalive_count_max=settings.keepalive_count_max,
                connect_timeout=settings.connect_timeout,
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            entry = address if port == 22 else f"[{address}]:{port}"
            raise HostKeyMismatch(
                self.name,
                f"host key of {address}:{port} is not trusted: no matching entry for "
                f"{entry} in known_hosts file {settings.known_hosts} ({exc.reason}); "
                "refusing to connect",
            ) from exc
        except asyncssh.PermissionDenied as exc:
            raise AuthenticationFailed(
                self.name, f"{where} refused the key {settings.identity_file}: {exc.reason}"
            ) from exc
        except (OSError, asyncssh.Error, TimeoutError) as exc:
            detail = str(exc) or type(exc).__name__  # a connect timeout has no message
            raise _Reconnectable(self.name, f"cannot connect to {where}: {detail}") from exc

    async def close(self) -> None:
        if self._background:
            await asyncio.wait(list(self._background), timeout=_TERMINATE_GRACE_S + _KILL_GRACE_S)
        # Forget the connections before closing them: the watcher warns only about a drop
        # of the current connection, and an orderly close is no drop.
        conns, self._conn, self._jump_conn = (self._conn, self._jump_conn), None, None
        for conn in conns:
            if conn is not None:
                conn.close()
                with contextlib.suppress(Exception):
                    await conn.wait_closed()
        for watcher in list(self._watchers):
            watcher.cancel()


def _as_bytes(output: Any) -> bytes:
    if output is None:
        return b""
    if isinstance(output, str):  # pragma: no cover - encoding=None always gives bytes
        return output.encode()
    return bytes(output)
