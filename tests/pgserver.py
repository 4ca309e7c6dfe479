"""A real PostgreSQL server for the tests and benchmarks: Debian's package, one cluster in a
temporary directory, started as a child process and stopped by its pid.

``initdb`` makes the cluster (password authentication, one superuser with a random password,
so that every URL a test hands the orchestrator carries a password to keep secret), then
``postgres -D DIR -k SOCKDIR -p PORT -h 127.0.0.1`` serves it. PostgreSQL refuses to run as
root, so as root the cluster belongs to Debian's ``postgres`` account. For the tests the server
runs with ``fsync=off``: nothing there tests the server's own durability across a power cut,
and each test creates a database of its own (``CREATE DATABASE`` copies the template, fsynced a
few hundred milliseconds without it); the benchmarks run it ``durable``, as deployed.
Installed when missing (``apt-get install postgresql``), as the other real services of the
tests are.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.sysdeps import apt_install

PACKAGE = "postgresql"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
SUPERUSER = "orchestrator"


def bin_dir() -> Path | None:
    """The newest installed PostgreSQL's programs (``/usr/lib/postgresql/N/bin``)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def ensure_postgres() -> Path:
    """PostgreSQL's programs, installed from Debian's package when missing; raises
    :class:`tests.sysdeps.CannotInstall` when that is impossible here."""
    found = bin_dir()
    if found is None:
        apt_install(PACKAGE)
        found = bin_dir()
    if found is None:
        raise RuntimeError(f"{PACKAGE} installed, but no /usr/lib/postgresql/*/bin/postgres")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PostgresServer:
    """One cluster in ``root``, listening on 127.0.0.1:``port`` and a socket in ``root``."""

    root: Path
    port: int
    bindir: Path
    password: str = field(default_factory=lambda: secrets.token_hex(12))
    durable: bool = False
    """Commits fsynced, as a real deployment's (the benchmarks'); the tests' are not."""
    process: subprocess.Popen[bytes] | None = None
    _databases: int = 0

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def _run_as(self) -> str | None:
        """Whom the server runs as: root may not run it, so Debian's ``postgres`` account."""
        return "postgres" if os.geteuid() == 0 else None

    def _chown(self, path: Path) -> None:
        user = self._run_as()
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._chown(self.root)
        password_file = self.root / "password"
        password_file.write_text(self.password + "\n")
        password_file.chmod(0o600)
        self._chown(password_file)
        subprocess.run(
            [
                str(self.bindir / "initdb"),
                "-D", str(self.data),
                "-U", SUPERUSER,
                f"--pwfile={password_file}",
                "--auth=scram-sha-256",
                "-E", "UTF8",
                "--no-locale",
                "--no-sync",
            ],
            check=True, capture_output=True, user=self._run_as(), timeout=START_TIMEOUT_S,
        )  # fmt: skip
        password_file.unlink()

    def start(self) -> None:
        log = self.log_path.open("ab")
        self._chown(self.log_path)
        self.process = subprocess.Popen(
            [
                str(self.bindir / "postgres"),
                "-D", str(self.data),
                "-k", str(self.root),
                "-p", str(self.port),
                "-h", "127.0.0.1",
                "-c", "max_connections=200",
                *([] if self.durable else ["-c", "fsync=off", "-c", "full_page_writes=off"]),
            ],
            stdout=log, stderr=log, user=self._run_as(),
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited at start: {self.log_tail()}")
            if "ready to accept connections" in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.05)
        raise RuntimeError(f"postgres not ready within {START_TIMEOUT_S:g}s: {self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        """Fast shutdown (SIGINT: clients disconnected), SIGKILL when it does not end."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def sql(self, statement: str, database: str = "postgres") -> None:
        """One statement outside a transaction (``CREATE DATABASE`` must be)."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            conn.execute(statement)

    def create_database(self, prefix: str = "t") -> str:
        """A new empty database; returns its URL."""
        self._databases += 1
        name = f"{prefix}_{os.getpid()}_{self._databases}"
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with contextlib.suppress(Exception):
            self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def postgres_server(
    root: Path | None = None, *, durable: bool = False
) -> Iterator[PostgresServer]:
    """A running cluster in ``root`` (a new temporary directory when None), removed after."""
    bindir = ensure_postgres()
    made = root is None
    directory = Path(tempfile.mkdtemp(prefix="orch-pg-")) if root is None else root
    server = PostgresServer(directory, free_port(), bindir, durable=durable)
    try:
        server.init()
        server.start()
        yield server
    finally:
        server.stop()
        if made:
            shutil.rmtree(directory, ignore_errors=True)
