"""A real OpenSSH sshd on loopback for transport tests (a pytest plugin module).

Tests load it with ``pytest_plugins = ["tests.integration.sshd_fixture"]``. The server runs
from its own config (own host key, authorized_keys, PidFile, a free port on 127.0.0.1) as a
child of the test process and is stopped by process id: the listener AND every process it
forked (per-connection sshd processes and the commands they run), so a "killed sshd" really
drops the client's connection. Debian's openssh-server is installed when sshd is missing,
because CI starts from a fresh machine.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sysdeps import CannotInstall, apt_install

SSHD = Path("/usr/sbin/sshd")
# The non-root account of the sudo tests and its sudoers file: one per pytest-xdist worker, so
# that one worker's teardown never removes the account another worker is logged in with.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
SUDO_USER = f"orchssh{_WORKER.removeprefix('gw')}"
_SUDOERS_FILE = Path(f"/etc/sudoers.d/orchestrator-test{_WORKER and '-' + _WORKER}")
_START_TIMEOUT_S = 10.0


def ensure_openssh_server() -> None:
    """Install Debian's openssh-server when sshd is missing; skip when that is impossible."""
    if SSHD.exists():
        return
    try:
        apt_install("openssh-server")
    except CannotInstall as missing:
        pytest.skip(str(missing))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", str(path)],
        check=True,
        capture_output=True,
    )


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (from /proc), children first found first."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


@dataclass
class SSHDServer:
    """One sshd instance: its files live in ``root``; ``port`` stays the same across restarts."""

    root: Path
    port: int
    address: str = "127.0.0.1"
    process: subprocess.Popen[bytes] | None = None

    @property
    def host_key(self) -> Path:
        return self.root / "host_key"

    @property
    def client_key(self) -> Path:
        return self.root / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def log_path(self) -> Path:
        return self.root / "sshd.log"

    @staticmethod
    def new_key(path: Path) -> None:
        """An ed25519 key pair without passphrase at ``path`` and ``path.pub``."""
        keygen(path)

    def known_hosts_line(self) -> str:
        keytype, key = self.host_key.with_suffix(".pub").read_text().split()[:2]
        return f"[{self.address}]:{self.port} {keytype} {key}\n"

    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # a non-root login must read authorized_keys (StrictModes no)
        keygen(self.host_key)
        keygen(self.client_key)
        authorized = self.root / "authorized_keys"
        authorized.write_text(self.client_key.with_suffix(".pub").read_text())
        authorized.chmod(0o644)
        self.known_hosts.write_text(self.known_hosts_line())
        (self.root / "sshd_config").write_text(
            f"Port {self.port}\n"
            f"ListenAddress {self.address}\n"
            f"HostKey {self.host_key}\n"
            f"AuthorizedKeysFile {authorized}\n"
            f"PidFile {self.root}/sshd.pid\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "AllowTcpForwarding yes\n"
            "MaxSessions 10\n"
            "MaxStartups 100:30:200\n"
            "LogLevel INFO\n"
            "Subsystem sftp internal-sftp\n"
            # Sessions get a HOME of their own: bash started by sshd reads ~/.bashrc, and this
            # machine's root one runs `pyenv init` (0.3 s per command) whose rehash lock, left
            # behind when a test kills a session mid-rehash, stalls every later session 60 s.
            f"SetEnv HOME={self.root}\n"
        )

    def start(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(self.root / "sshd_config")],
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited at start: {self.log_path.read_text()[-2000:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.address, self.port), timeout=0.5),
            ):
                return
            time.sleep(0.05)
        raise RuntimeError(f"sshd did not listen on {self.port}: {self.log_path.read_text()}")

    def stop(self) -> None:
        """SIGKILL the listener and everything it forked, then reap the listener."""
        if self.process is None:
            return
        for pid in [self.process.pid, *descendants(self.process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=5)
        self.process = None

    def forked_pids(self) -> list[int]:
        """The per-connection sshd processes (and what they run) below the listener."""
        return [] if self.process is None else descendants(self.process.pid)

    def restart(self) -> None:
        self.stop()
        self.start()


def make_sshd(root: Path) -> Iterator[SSHDServer]:
    ensure_openssh_server()
    server = SSHDServer(root=root, port=free_port())
    server.prepare()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def sshd() -> Iterator[SSHDServer]:
    """A shared sshd for tests that do not disturb the server itself."""
    with tempfile.TemporaryDirectory(prefix="orch-sshd-") as root:
        yield from make_sshd(Path(root))


@pytest.fixture
def private_sshd() -> Iterator[SSHDServer]:
    """An sshd of this test's own, for tests that kill and restart it."""
    with tempfile.TemporaryDirectory(prefix="orch-sshd-") as root:
        yield from make_sshd(Path(root))


@pytest.fixture(scope="session")
def sudo_user() -> Iterator[str]:
    """A non-root login with passwordless sudo; installs sudo when missing."""
    if os.geteuid() != 0:
        pytest.skip("creating a sudo test user needs root")
    if shutil.which("sudo") is None:
        try:
            apt_install("sudo")
        except CannotInstall as missing:
            pytest.skip(str(missing))
    created = False
    try:
        pwd.getpwnam(SUDO_USER)
    except KeyError:
        subprocess.run(
            [
                "useradd",
                "--system",
                "--shell",
                "/bin/sh",
                "--no-create-home",
                "--home-dir",
                "/nonexistent",
                SUDO_USER,
            ],
            check=True,
            capture_output=True,
        )
        created = True
    # A "!" password (useradd's default) is a locked account, which sshd refuses without PAM.
    subprocess.run(["usermod", "-p", "*", SUDO_USER], check=True, capture_output=True)
    _SUDOERS_FILE.write_text(f"{SUDO_USER} ALL=(root) NOPASSWD: ALL\n")
    _SUDOERS_FILE.chmod(0o440)
    try:
        yield SUDO_USER
    finally:
        _SUDOERS_FILE.unlink(missing_ok=True)
        if created:
            subprocess.run(["userdel", SUDO_USER], check=False, capture_output=True)
