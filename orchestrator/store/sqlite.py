"""A store in a SQLite file: the embedded default, that needs nothing.

WAL mode with durable commits (``synchronous=FULL``); each write takes the file's one write
lock up front (``BEGIN IMMEDIATE``), waiting up to the busy timeout, so a writer waits
instead of failing when another process committed in between.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from orchestrator.store.connection import Cursor
from orchestrator.store.errors import StoreBusy, StoreError, StoreOpenError
from orchestrator.store.migration import Migration
from orchestrator.store.schema import check_not_newer, migrate


def _create_private(path: Path) -> None:
    """Create the file 0600 before SQLite does: backups hold unit files, which may hold secrets.

    SQLite gives the -wal and -shm files the database file's mode.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)


def is_busy(exc: BaseException) -> bool:
    """Another connection held SQLite's lock past the busy timeout ("database is locked")."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class SqliteConnection:
    """One sqlite3 connection to a store file, in autocommit mode, our transactions begun by
    hand."""

    shared = False
    for_update = ""
    skip_locked = ""

    def __init__(self, raw: sqlite3.Connection, path: Path, busy_timeout_s: float) -> None:
        self.raw = raw
        self.location: Path | str = path
        self.busy_timeout_s = busy_timeout_s

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self.raw.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.raw.executemany(sql, rows)

    @property
    def in_transaction(self) -> bool:
        return self.raw.in_transaction

    def begin_write(self) -> None:
        self.raw.execute("BEGIN IMMEDIATE")

    def begin_read(self) -> None:
        self.raw.execute("BEGIN")

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        self.raw.execute("ROLLBACK")

    def lock(self, key: str) -> None:
        del key  # BEGIN IMMEDIATE already holds the whole file's write lock

    def schema_lock(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # the migration's BEGIN IMMEDIATE is the lock

    def schema_version(self) -> int:
        return int(self.raw.execute("PRAGMA user_version").fetchone()[0])

    def set_schema_version(self, version: int) -> None:
        # PRAGMA takes no parameters; the version is an int from our own table.
        self.raw.execute(f"PRAGMA user_version = {int(version)}")

    def migration_statements(self, step: Migration) -> Sequence[str]:
        return step.statements

    def store_error(self, exc: Exception) -> StoreError | None:
        if isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
            return StoreBusy(self.location, self.busy_timeout_s, str(exc))
        return None

    def close(self) -> None:
        self.raw.close()


WAL_RETRY_S = 0.02


def _switch_to_wal(raw: sqlite3.Connection, busy_timeout_s: float) -> str:
    """``PRAGMA journal_mode = WAL``, retried while another connection holds the lock, up to
    the busy timeout. The switch needs an exclusive lock, and when two connections opening a
    new file ask for it at once SQLite answers one of them "database is locked" at once,
    without waiting (a wait could deadlock): daemons started together would otherwise fail to
    open their store, saying it was locked for the whole timeout."""
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            return str(raw.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(WAL_RETRY_S)


def open_sqlite(
    path: Path, *, busy_timeout_s: float, migrations: Sequence[Migration]
) -> SqliteConnection:
    """Open ``path`` in WAL mode with durable commits and bring its schema up to date."""
    try:
        _create_private(path)
        raw = sqlite3.connect(
            path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=True
        )
    except (OSError, sqlite3.Error) as exc:
        raise StoreOpenError(path, str(exc)) from exc
    conn = SqliteConnection(raw, path, busy_timeout_s)
    try:
        raw.row_factory = sqlite3.Row
        raw.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        check_not_newer(conn, migrations)
        mode = _switch_to_wal(raw, busy_timeout_s)
        if str(mode).lower() != "wal":
            raise StoreOpenError(path, f"journal_mode is {mode!r}, WAL is required")
        raw.execute("PRAGMA synchronous = FULL")
        raw.execute("PRAGMA foreign_keys = ON")
        migrate(conn, migrations)
    except sqlite3.Error as exc:
        raw.close()
        if is_busy(exc):
            raise StoreBusy(path, busy_timeout_s, str(exc)) from exc
        raise StoreOpenError(path, str(exc)) from exc
    except BaseException:
        raw.close()
        raise
    return conn
