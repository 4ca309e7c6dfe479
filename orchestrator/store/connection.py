"""One connection to the store, whichever database holds it: the seam between the operations
and the two backends.

The operations (:mod:`.ops`, :mod:`.claims`, :mod:`.workloads`) are written once, in SQL that
SQLite and PostgreSQL both run (``?`` placeholders, ``INSERT ... ON CONFLICT``,
``RETURNING id``), against :class:`Connection`. What differs lives behind it, and nowhere
else: how a write transaction begins (SQLite's ``BEGIN IMMEDIATE`` takes the one write lock up
front; PostgreSQL's transactions lock the rows they touch, ``FOR UPDATE``), how a read sees one
snapshot, how the schema's version is kept, how a migration's statements are spelled, and which
driver errors mean "busy" or "gone". The two connections are :mod:`orchestrator.store.sqlite`'s
and :mod:`orchestrator.store.postgres`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from orchestrator.store.errors import StoreError
from orchestrator.store.migration import Migration


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
