"""The async Store: one connection to the store's database, owned by one worker thread.

The database is a SQLite file (the embedded default, that needs nothing) or, given a
``postgresql://`` URL, a PostgreSQL database that several daemons share
(:mod:`orchestrator.store.postgres`); the operations and records are the same for both
(:mod:`orchestrator.store.connection` says what differs).

Database calls block (a durable commit waits for fsync), so none of them runs on the event
loop: every operation is handed to a single-thread executor that owns the connection, which
also serialises this process's writers without a lock. Many asyncio tasks may share one Store.
Several processes may open the same store: each write takes its locks as it begins and waits up
to the busy timeout.

A write whose awaiting task is cancelled still completes or rolls back as a whole on the
worker; it is never left half-done.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Concatenate, Literal, ParamSpec, Self, TypeVar

import orchestrator.store.claims as claims
import orchestrator.store.ops as ops
from orchestrator.store.connection import Connection
from orchestrator.store.errors import StoreClosed
from orchestrator.store.postgres import is_postgres_url, open_postgres
from orchestrator.store.protocol import TrialStore
from orchestrator.store.records import (
    Attempt,
    AttemptState,
    ClaimOutcome,
    DaemonIdentity,
    DropinSlot,
    EventRecord,
    HostEntry,
    HostRecord,
    NewPoint,
    NewTrial,
    PointRecord,
    StoredRequest,
    SubmitResult,
    SweepClaim,
    SweepRecord,
    SweepState,
    TrialPlan,
    TrialRecord,
    UnfinishedAttempt,
    UnitBackup,
)
from orchestrator.store.results import Point, SweepResults, TrialState
from orchestrator.store.schema import MIGRATIONS, Migration
from orchestrator.store.sqlite import open_sqlite
from orchestrator.store.workloads import StoredWorkload, sweep_workloads
from orchestrator.types import JsonObject

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT_S = 30.0

StoreObserver = Callable[[str, float], None]
"""What a :class:`Store` tells of each operation: its name (``record_point``) and seconds."""


def open_connection(
    path: Path,
    *,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> sqlite3.Connection:
    """The sqlite3 connection of a store file (WAL, durable commits, schema up to date), for
    tools and tests that read the file with plain SQL."""
    return open_sqlite(path, busy_timeout_s=busy_timeout_s, migrations=migrations).raw


def open_store_connection(
    target: str | os.PathLike[str],
    *,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    migrations: Sequence[Migration] = MIGRATIONS,
) -> Connection:
    """A ``postgresql://`` URL's database, else the SQLite file at the path, migrated."""
    if is_postgres_url(target):
        return open_postgres(str(target), busy_timeout_s=busy_timeout_s, migrations=migrations)
    path = Path(target).expanduser().absolute()
    return open_sqlite(path, busy_timeout_s=busy_timeout_s, migrations=migrations)


def default_db_path() -> Path:
    """``$XDG_STATE_HOME/orchestrator/orchestrator.db`` (``~/.local/state`` when unset), dir made.

    The XDG spec says a relative ``$XDG_STATE_HOME`` is invalid and must be ignored.
    """
    state_home = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state_home) if os.path.isabs(state_home) else Path.home() / ".local" / "state"
    directory = base / "orchestrator"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    return directory / "orchestrator.db"


class Store:
    """The orchestrator's durable record. Open with ``await Store.open(path_or_url)``; close it."""

    def __init__(
        self,
        executor: ThreadPoolExecutor,
        conn: Connection,
        *,
        busy_timeout_s: float,
        clock: Callable[[], float],
    ) -> None:
        self.path: Path | str = conn.location
        """Where the store is, as a person reads it: the file's path, or a PostgreSQL store's
        URL without its user, password and query (what errors, logs and host leases show)."""
        self.shared = conn.shared
        """Several daemons may run this store's sweeps (PostgreSQL): they claim each one."""
        self._executor = executor
        self._conn: Connection | None = conn
        self._busy_timeout_s = busy_timeout_s
        self._clock = clock
        self.observer: StoreObserver | None = None
        """Told each operation's name and seconds, from the call to its answer (the wait for
        the store's thread included): the daemon's metrics time the writes with it."""

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        clock: Callable[[], float] = time.time,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> Store:
        """Open a SQLite file, or the PostgreSQL database a ``postgresql://`` URL names
        (creating and migrating as needed); raises StoreOpenError or SchemaTooNew."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store")
        loop = asyncio.get_running_loop()
        try:
            conn = await loop.run_in_executor(
                executor,
                functools.partial(
                    open_store_connection,
                    path,
                    busy_timeout_s=busy_timeout_s,
                    migrations=migrations,
                ),
            )
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(executor, conn, busy_timeout_s=busy_timeout_s, clock=clock)

    async def close(self) -> None:
        """Finish queued work, close the connection (a file's WAL checkpointed), stop the thread."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self._executor, conn.close)
        finally:
            self._executor.shutdown(wait=False)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._conn is None

    async def _run(
        self,
        fn: Callable[Concatenate[Connection, P], T],
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        conn = self._conn
        if conn is None:
            raise StoreClosed(f"{self.path}: store is closed")
        loop = asyncio.get_running_loop()
        call = functools.partial(fn, conn, *args, **kwargs)
        began = time.perf_counter()
        try:
            return await loop.run_in_executor(self._executor, call)
        except Exception as exc:
            mapped = conn.store_error(exc)
            if mapped is not None:
                raise mapped from exc
            raise
        finally:
            if self.observer is not None:
                self.observer(fn.__name__, time.perf_counter() - began)

    # --- sweeps -----------------------------------------------------------------------------

    async def submit_sweep(
        self,
        name: str,
        yaml_text: str,
        *,
        priority: int = 0,
        source_path: str | None = None,
        replace: bool = False,
        workloads: Mapping[str, str] | None = None,
    ) -> SubmitResult:
        """Queue a sweep. Same name and content as the current one: that one, ``created=False``.

        Same name, other content: :class:`SweepNameConflict`, unless ``replace``, which marks
        the old sweep replaced (its results stay under its id) and queues the new one.
        ``workloads`` (path -> content) are the sweep's workload files, stored with it and
        part of its content.
        """
        return await self._run(
            ops.submit_sweep,
            name,
            yaml_text,
            priority=priority,
            source_path=source_path,
            replace=replace,
            now=self._clock(),
            workloads=workloads,
        )

    async def sweep_workloads(self, sweep_id: int) -> list[StoredWorkload]:
        """The workload files stored with the sweep (empty when it names none)."""
        return await self._run(sweep_workloads, sweep_id)

    async def find_sweep(self, ref: str | int) -> SweepRecord | None:
        """By id (an int, or digits that are no sweep's name) or by name (its latest run)."""
        return await self._run(ops.find_sweep, ref)

    async def get_sweep(self, ref: str | int) -> SweepRecord:
        """As :meth:`find_sweep`, raising :class:`SweepNotFound` instead of returning None."""
        return await self._run(ops.get_sweep, ref)

    async def list_sweeps(
        self,
        states: Collection[SweepState] | None = None,
        *,
        include_replaced: bool = False,
    ) -> list[SweepRecord]:
        """Queue order: priority (highest first), then submission."""
        return await self._run(ops.list_sweeps, states, include_replaced)

    async def set_sweep_state(
        self, sweep_id: int, state: SweepState, *, summary: Mapping[str, Any] | None = None
    ) -> SweepRecord:
        return await self._run(ops.set_sweep_state, sweep_id, state, summary, self._clock())

    # --- hosts and trials -------------------------------------------------------------------

    async def add_hosts(self, sweep_id: int, hosts: Sequence[HostEntry]) -> list[HostRecord]:
        """Idempotent; returns all the sweep's hosts."""
        return await self._run(ops.add_hosts, sweep_id, list(hosts))

    async def set_host_aside(self, sweep_id: int, host: str, reason: str | None) -> None:
        """Record why a host takes no part (failed preflight); ``None`` takes it back."""
        await self._run(ops.set_host_aside, sweep_id, host, reason)

    async def hosts(self, sweep_id: int) -> list[HostRecord]:
        return await self._run(ops.hosts_of, sweep_id)

    async def add_trials(self, sweep_id: int, trials: Sequence[NewTrial]) -> list[TrialRecord]:
        """Idempotent on (key, host); returns all the sweep's trials in plan order."""
        return await self._run(ops.add_trials, sweep_id, list(trials))

    async def set_trial_plan(self, trial_id: int, plan: TrialPlan) -> TrialRecord:
        """Replace the plan stored with a trial (what it measures), e.g. when a screening
        trial is promoted to the full matrix on its running server."""
        return await self._run(ops.set_trial_plan, trial_id, plan)

    async def trials(self, sweep_id: int) -> list[TrialRecord]:
        return await self._run(ops.trials_of, sweep_id)

    # --- attempts ---------------------------------------------------------------------------

    async def start_attempt(self, trial_id: int, *, invocation_id: str | None = None) -> Attempt:
        """A new running attempt, numbered after the trial's last (a retry never overwrites)."""
        return await self._run(ops.start_attempt, trial_id, invocation_id, self._clock())

    async def set_attempt_invocation(self, attempt_id: int, invocation_id: str) -> Attempt:
        return await self._run(ops.set_attempt_invocation, attempt_id, invocation_id)

    async def resume_attempt(self, attempt_id: int, *, invocation_id: str | None = None) -> Attempt:
        """Take over an attempt a crash left running; its committed points are kept."""
        return await self._run(ops.resume_attempt, attempt_id, invocation_id)

    async def finish_attempt(
        self,
        attempt_id: int,
        state: AttemptState,
        cause: str | None = None,
        evidence: Mapping[str, Any] | None = None,
    ) -> Attempt:
        """End a running attempt as done, failed, skipped or cancelled; a finished one raises."""
        return await self._run(
            ops.finish_attempt, attempt_id, state, cause, evidence, self._clock()
        )

    async def skip_trial(
        self,
        trial_id: int,
        cause: str | None,
        evidence: Mapping[str, Any] | None = None,
        *,
        state: Literal["skipped", "cancelled"] = "skipped",
    ) -> Attempt:
        """Record a trial that will not run as skipped (host set aside, sweep aborted) or
        cancelled (its sweep was cancelled before it ran)."""
        return await self._run(ops.skip_trial, trial_id, cause, evidence, self._clock(), state)

    async def get_attempt(self, attempt_id: int) -> Attempt:
        return await self._run(ops.get_attempt, attempt_id)

    async def attempts(self, sweep_id: int) -> list[Attempt]:
        """Every attempt of the sweep, in plan order then number."""
        return await self._run(ops.attempts_of, sweep_id)

    async def running_attempts(self, sweep_id: int) -> list[UnfinishedAttempt]:
        """What a crash left running, each with the point keys it had committed."""
        return await self._run(ops.running_attempts, sweep_id)

    # --- points -----------------------------------------------------------------------------

    async def record_point(
        self, attempt_id: int, point: NewPoint | Point, requests: Sequence[StoredRequest]
    ) -> int:
        """Commit a point and its requests in one transaction; returns the point's id.

        Raises :class:`PointAlreadyRecorded` if the attempt has this point already and
        :class:`AttemptNotRunning` if the attempt has finished.
        """
        return await self._run(ops.record_point, attempt_id, point, list(requests), self._clock())

    async def committed_point_keys(self, attempt_id: int) -> frozenset[str]:
        return await self._run(ops.committed_point_keys, attempt_id)

    async def points(
        self, *, attempt_id: int | None = None, sweep_id: int | None = None
    ) -> list[PointRecord]:
        """Points of one attempt or one sweep (exactly one of the two), in commit order."""
        return await self._run(ops.points_of, attempt_id=attempt_id, sweep_id=sweep_id)

    async def requests(self, point_id: int) -> list[StoredRequest]:
        return await self._run(ops.requests_of, point_id)

    # --- events -----------------------------------------------------------------------------

    async def add_event(
        self,
        sweep_id: int,
        kind: str,
        *,
        host: str | None = None,
        attempt_id: int | None = None,
        fields: Mapping[str, Any] | None = None,
        ts: float | None = None,
    ) -> EventRecord:
        return await self._run(
            ops.add_event,
            sweep_id,
            kind,
            host=host,
            attempt_id=attempt_id,
            fields=fields,
            ts=self._clock() if ts is None else ts,
        )

    async def events(
        self,
        sweep_id: int,
        *,
        host: str | None = None,
        attempt_id: int | None = None,
        kinds: Collection[str] | None = None,
        after_id: int | None = None,
    ) -> list[EventRecord]:
        return await self._run(
            ops.events_of,
            sweep_id,
            host=host,
            attempt_id=attempt_id,
            kinds=kinds,
            after_id=after_id,
        )

    # --- unit backups -----------------------------------------------------------------------

    async def save_unit_backup(
        self,
        sweep_id: int,
        host: str,
        unit: str,
        files: Mapping[str, bytes | None],
        state: Mapping[str, str],
        *,
        dropin: DropinSlot | None = None,
    ) -> UnitBackup:
        """Keep the unit as found, once per sweep: a second call returns the first backup."""
        return await self._run(
            ops.save_unit_backup,
            sweep_id,
            host,
            unit,
            dict(files),
            dict(state),
            self._clock(),
            dropin,
        )

    async def rearm_unit_backup(
        self,
        sweep_id: int,
        host: str,
        unit: str,
        files: Mapping[str, bytes | None],
        state: Mapping[str, str],
        *,
        dropin: DropinSlot | None = None,
        adopted: str | None = None,
    ) -> UnitBackup:
        """The unit as found now becomes the host's pending backup, refused while an earlier
        backup of the host is pending (see ``ops.save_unit_backup``); ``adopted``
        is the trial key adopt installs as the unit's lasting config."""
        return await self._run(
            ops.save_unit_backup,
            sweep_id,
            host,
            unit,
            dict(files),
            dict(state),
            self._clock(),
            dropin,
            adopted,
            rearm=True,
        )

    async def get_unit_backup(self, sweep_id: int, host: str, unit: str) -> UnitBackup | None:
        return await self._run(ops.get_unit_backup, sweep_id, host, unit)

    async def pending_restores(
        self, *, sweep_id: int | None = None, host: str | None = None
    ) -> list[UnitBackup]:
        """Backups whose host has not been marked restored, oldest first."""
        return await self._run(ops.pending_restores, sweep_id, host)

    async def mark_restored(self, sweep_id: int, host: str) -> int:
        return await self._run(ops.mark_restored, sweep_id, host, self._clock())

    # --- results ----------------------------------------------------------------------------

    async def results(self, ref: str | int) -> SweepResults:
        """The sweep's typed results (see :mod:`orchestrator.store.results`)."""
        return await self._run(ops.sweep_results, ref)

    async def sweep_results(self, ref: str | int) -> JsonObject:
        """The results as the JSON document ``results --json`` prints: for scripts and tests;
        the orchestrator itself works on :meth:`results`."""
        return (await self.results(ref)).to_json()

    async def trial_states(self, sweep_id: int) -> dict[tuple[str, str], TrialState]:
        """Each (key, host)'s latest state, read without any point (cheap enough to poll)."""
        return await self._run(ops.trial_states, sweep_id)


    # --- claims: which daemon runs which sweep of a shared store ----------------------------

    async def claim_sweep(
        self,
        sweep_id: int,
        daemon: DaemonIdentity,
        *,
        expiry_s: float,
        wait: bool = False,
        interrupted: bool = False,
    ) -> ClaimOutcome:
        """Claim the sweep for ``daemon`` (see :func:`orchestrator.store.claims.claim_sweep`)."""
        return await self._run(
            claims.claim_sweep,
            sweep_id,
            daemon,
            self._clock(),
            expiry_s,
            wait=wait,
            interrupted=interrupted,
        )

    async def renew_claims(self, daemon_id: str, *, expiry_s: float) -> list[SweepClaim]:
        """The heartbeat: ``daemon_id``'s claims pushed on; the ones it still holds."""
        return await self._run(claims.renew_claims, daemon_id, self._clock(), expiry_s)

    async def release_claim(self, sweep_id: int, daemon_id: str) -> bool:
        return await self._run(claims.release_claim, sweep_id, daemon_id, self._clock())

    async def request_stop(self, sweep_id: int, reason: str) -> SweepClaim | None:
        """Ask the daemon whose live claim holds the sweep to stop it; None when none does."""
        return await self._run(claims.request_stop, sweep_id, reason, self._clock())

    async def sweep_claims(self) -> list[SweepClaim]:
        """Every sweep's claim, live or not."""
        return await self._run(claims.sweep_claims)


_STORE_RUNS_TRIALS: type[TrialStore] = Store
"""The host loop's view of the store (mypy checks every signature here)."""
