"""What can go wrong with the store, as types carrying their evidence.

Callers branch on the type (a CLI maps ``SweepNameConflict`` to exit 2, the runner treats
``PointAlreadyRecorded`` as "already measured"), never on message text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.store.records import SweepRecord


class StoreError(Exception):
    """Base of every store error."""


class StoreOpenError(StoreError):
    """The store could not be opened (a file that is not SQLite, no WAL, no access; a database
    server that refused the connection)."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"{path}: cannot open the store: {reason}")
        self.path = path
        self.reason = reason


class SchemaTooNew(StoreError):
    """The file was written by a newer orchestrator; opening it here could corrupt it."""

    def __init__(self, path: Path | str, found: int, known: int) -> None:
        super().__init__(
            f"{path}: store schema version {found} is newer than this orchestrator knows "
            f"({known}); upgrade the orchestrator or use another --db"
        )
        self.path = path
        self.found = found
        self.known = known


class StoreBusy(StoreError):
    """Another process held the database lock longer than the busy timeout."""

    def __init__(self, path: Path | str, timeout_s: float, detail: str) -> None:
        super().__init__(
            f"{path}: store locked by another writer for over {timeout_s:g}s ({detail})"
        )
        self.path = path
        self.timeout_s = timeout_s
        self.detail = detail


class StoreUnavailable(StoreError):
    """The database server could not be reached, or the connection to it broke during an
    operation (whose outcome is then unknown: a write may or may not have committed). The
    next operation connects again."""

    def __init__(self, path: Path | str, detail: str) -> None:
        super().__init__(f"{path}: the store's database is unavailable: {detail}")
        self.path = path
        self.detail = detail


class StoreClosed(StoreError):
    """An operation was attempted after :meth:`Store.close`."""


class SweepNameConflict(StoreError):
    """A sweep of this name exists with different content; submit with replace to supersede it."""

    def __init__(self, name: str, existing: SweepRecord, new_hash: str) -> None:
        super().__init__(
            f"sweep {name!r} already exists (id {existing.id}, "
            f"content {existing.content_hash[:12]}) with different content ({new_hash[:12]}); "
            "submit with --replace to supersede it"
        )
        self.name = name
        self.existing = existing
        self.new_hash = new_hash


class SweepNotFound(StoreError):
    """No sweep has this name or id."""

    def __init__(self, ref: str | int) -> None:
        super().__init__(f"no sweep named or numbered {ref!r}")
        self.ref = ref


class TrialNotFound(StoreError):
    def __init__(self, trial_id: int) -> None:
        super().__init__(f"no trial with id {trial_id}")
        self.trial_id = trial_id


class AttemptNotFound(StoreError):
    def __init__(self, attempt_id: int) -> None:
        super().__init__(f"no attempt with id {attempt_id}")
        self.attempt_id = attempt_id


class AttemptNotRunning(StoreError):
    """A finished attempt is never written again: a retry is a new attempt."""

    def __init__(self, attempt_id: int, state: str) -> None:
        super().__init__(f"attempt {attempt_id} is {state}, not running")
        self.attempt_id = attempt_id
        self.state = state


class PointAlreadyRecorded(StoreError):
    """This attempt already holds a point with this key: a point is never stored twice."""

    def __init__(self, attempt_id: int, point_key: str, point_id: int) -> None:
        super().__init__(f"attempt {attempt_id} already has point {point_key!r} (id {point_id})")
        self.attempt_id = attempt_id
        self.point_key = point_key
        self.point_id = point_id


class BackupPending(StoreError):
    """A host still has a backup that was never restored: nothing may replace it."""

    def __init__(self, host: str, sweep_id: int) -> None:
        super().__init__(
            f"host {host} still has a pending restore (sweep id {sweep_id}): "
            f"run `orchestrator restore {host}` first"
        )
        self.host = host
        self.sweep_id = sweep_id
