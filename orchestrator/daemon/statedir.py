"""The daemon's state directory: its layout, its mode, the one-daemon lock, the API socket and
the TCP listener's token. Nothing here knows about sweeps."""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import socket
import stat
from pathlib import Path

from orchestrator.log import get_logger

DEFAULT_STATE_DIR = Path("/var/lib/orchestrator")
SOCKET_NAME = "orchestrator.sock"
DB_NAME = "orchestrator.db"
LOCK_NAME = "daemon.lock"
INBOX, ACCEPTED, REJECTED = "inbox", "accepted", "rejected"
MIN_TOKEN_CHARS = 16


class DaemonError(Exception):
    """The daemon cannot start as configured (the message says what to change)."""


def check_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise DaemonError(f"TCP listen address {host} is not loopback (127.0.0.0/8 or ::1)")


def read_token(token_file: Path | None) -> str:
    """The TCP listener's bearer token: a private file (mode 0600), at least 16 characters."""
    if token_file is None:
        raise DaemonError("listening on TCP needs a token_file (the bearer token)")
    try:
        info = token_file.stat()
        token = token_file.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise DaemonError(f"{token_file}: cannot read the token: {exc.strerror}") from exc
    if info.st_mode & 0o077:
        raise DaemonError(
            f"{token_file}: mode {stat.S_IMODE(info.st_mode):04o} lets others read the "
            "token; chmod 600 it"
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise DaemonError(f"{token_file}: the token is shorter than {MIN_TOKEN_CHARS} characters")
    return token


def daemon_holds(state_dir: Path) -> bool:
    """Whether a daemon holds ``state_dir``'s lock now (a client then goes through its API)."""
    path = state_dir / LOCK_NAME
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # closing drops a lock taken here
    return False


class StateDir:
    """``state_dir`` with ``inbox/``, ``accepted/``, ``rejected/``, the store, the lock and
    (by default) the socket; ours alone (mode 0700)."""

    def __init__(self, root: Path | str, socket_path: Path | str | None = None) -> None:
        self.root = Path(root).expanduser().absolute()
        self.socket_path = (
            Path(socket_path).expanduser().absolute() if socket_path else self.root / SOCKET_NAME
        )
        self.inbox = self.root / INBOX
        self.accepted = self.root / ACCEPTED
        self.rejected = self.root / REJECTED
        self.db = self.root / DB_NAME
        self._lock_fd: int | None = None
        self._log = get_logger(component="daemon")

    def prepare(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            mode = stat.S_IMODE(self.root.stat().st_mode)
            if mode & 0o077:
                # It holds the store (unit backups, results) and the socket: ours alone.
                self.root.chmod(0o700)
                self._log.warning("state_dir.mode_tightened", was=f"{mode:04o}", now="0700")
            for directory in (self.inbox, self.accepted, self.rejected):
                directory.mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            raise DaemonError(f"{self.root}: cannot prepare: {exc.strerror}") from exc

    def take_lock(self) -> None:
        """One daemon per state directory: two would run the same queue twice."""
        path = self.root / LOCK_NAME
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise DaemonError(f"another daemon is running on {self.root} ({path})") from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        self._lock_fd = descriptor

    def release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def bind_socket(self) -> socket.socket:
        """The API socket, created mode 0600 (its mode is its access control)."""
        path = self.socket_path
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise DaemonError(f"{path} exists and is not a socket")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(path))
            except OSError:
                path.unlink()  # left by a daemon that died
            else:
                raise DaemonError(f"{path}: another daemon is listening there")
            finally:
                probe.close()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        return sock

    def remove_socket(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
