"""One connection to the store, whichever database holds it: the seam between the operations
and the two backends.

The operations (:mod:`.ops`, :mod:`.claims`, :mod:`.workloads`) are written once, in SQL that
SQLite and PostgreSQL both run (``?`` placeholders, ``INSERT ... ON CONFLICT``,
``RETURNING id``), against :class:`Connection`. What differs lives behind it, and nowhere
else: how a write transaction begins (SQLite's ``BEGIN IMMEDIATE`` takes the one write lock up
front; PostgreSQL's transactions lock the rows they touch, ``FOR UPDATE``), how a read sees one
snapshot, how the schema's version is kept, how a migration's statements are spelled, and which
driver errors mean "busy" or "gone". :class:`SqliteConnection` is here; the PostgreSQL one is
:mod:`orchestrator.store.postgres`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator.store.errors import StoreBusy, StoreError, StoreOpenError

if TYPE_CHECKING:
    from orchestrator.store.rows import Row
    from orchestrator.store.schema import Migration


class Cursor(Protocol):
    """A statement's result: rows read by column name (see :class:`~.rows.Row`)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> Sequence[Any]: ...


class Connection(Protocol):
    """What the operations need of a database connection (one thread uses it at a time)."""

    location: Path | str
    """Where the store is, as a person reads it (never a password)."""
    shared: bool
    """Several daemons may run sweeps from this store at once (they claim each sweep)."""
    for_update: str
    """Appended to a SELECT of rows a write transaction goes on to change: ``FOR UPDATE``
    where transactions lock rows, nothing where the write lock is already the whole file's."""
    skip_locked: str
    """As :attr:`for_update`, for a row another transaction holds that may be passed over
    (a sweep another daemon is claiming right now)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None: ...

    @property
    def in_transaction(self) -> bool: ...

    def begin_write(self) -> None:
        """Begin a transaction that will write."""

    def begin_read(self) -> None:
        """Begin a transaction whose reads all see one snapshot."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    def lock(self, key: str) -> None:
        """Inside a write transaction: wait until no other transaction holds ``key``, and hold
        it to the end (two submits of one name, two rearms of one host's backup)."""

    def schema_lock(self) -> AbstractContextManager[None]:
        """Held around a migration's transaction: of two processes opening one store at once,
        the second migrates (nothing left to do) after the first committed."""

    def schema_version(self) -> int: ...

    def set_schema_version(self, version: int) -> None: ...

    def migration_statements(self, step: Migration) -> Sequence[str]:
        """``step``'s statements as this database spells them."""

    def store_error(self, exc: Exception) -> StoreError | None:
        """The store's own error for a driver's (busy, gone), or None to let it through."""

    def close(self) -> None: ...


def one(row: Row | None, column: str) -> Any:
    """``column`` of a row a query is known to return."""
    assert row is not None
    return row[column]


# --- SQLite ----------------------------------------------------------------------------------


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
    """A store file in WAL mode with durable commits: each write takes the file's one write
    lock up front (``BEGIN IMMEDIATE``), waiting up to the busy timeout, so a writer waits
    instead of failing when another process committed in between."""

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


def open_sqlite(
    path: Path, *, busy_timeout_s: float, migrations: Sequence[Migration]
) -> SqliteConnection:
    """Open ``path`` in WAL mode with durable commits and bring its schema up to date."""
    from orchestrator.store.schema import check_not_newer, migrate

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
        mode = raw.execute("PRAGMA journal_mode = WAL").fetchone()[0]
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
