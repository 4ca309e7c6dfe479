"""The store's operations as plain functions on one connection, SQLite's or PostgreSQL's.

Each write is exactly one write transaction (SQLite's ``BEGIN IMMEDIATE`` ... ``COMMIT``, which
takes the write lock up front so a writer waits, up to the busy timeout, instead of failing when
another process committed in between; PostgreSQL's ``BEGIN``, with the rows a write reads
before changing them locked, :attr:`Connection.for_update`), and a crash leaves either all of a
write or none of it. Reads of several tables run in one read transaction so they see one
snapshot. Callers pass ``now`` so the logic has no clock. A row becomes a record, and a record
its row, only through :mod:`orchestrator.store.rows`; a row is read by column name only. These
functions run only on the store's worker thread (see :mod:`orchestrator.store.db`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal

from orchestrator.store.connection import Connection
from orchestrator.store.errors import (
    AttemptNotFound,
    AttemptNotRunning,
    BackupPending,
    PointAlreadyRecorded,
    SweepNameConflict,
    SweepNotFound,
    TrialNotFound,
)
from orchestrator.store.records import (
    FINISHED_ATTEMPT_STATES,
    SWEEP_STATES,
    TERMINAL_SWEEP_STATES,
    Attempt,
    AttemptState,
    DropinSlot,
    EventRecord,
    HostEntry,
    HostRecord,
    NewPoint,
    NewTrial,
    PointRecord,
    StoredRequest,
    SubmitResult,
    SweepRecord,
    SweepState,
    TrialPlan,
    TrialRecord,
    UnfinishedAttempt,
    UnitBackup,
)
from orchestrator.store.results import (
    EXPLORATION_STOPPED_EVENT,
    ExplorationStop,
    Point,
    SweepResults,
    TrialState,
    build_results,
    latest_states,
)
from orchestrator.store.rows import (
    ATTEMPTS,
    EVENTS,
    HOSTS,
    PLAN,
    POINTS,
    REQUESTS,
    SWEEPS,
    TRIALS,
    UNIT_BACKUPS,
    R,
    Table,
    to_json_or_null,
)
from orchestrator.store.workloads import insert_workloads, stored_hashes, workload_hashes
from orchestrator.types import content_hash

# --- transactions and statements -----------------------------------------------------------


@contextmanager
def _transaction(conn: Connection, begin: Callable[[], None]) -> Iterator[None]:
    """The transaction ``begin`` opens: committed when the block ends, rolled back when it
    raises (a read's as a write's, so neither is ever left open)."""
    begin()
    try:
        yield
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


def write_transaction(conn: Connection) -> AbstractContextManager[None]:
    return _transaction(conn, conn.begin_write)


@contextmanager
def read_transaction(conn: Connection) -> Iterator[None]:
    """One snapshot for several reads; inside an open transaction it simply joins it."""
    if conn.in_transaction:
        yield
        return
    with _transaction(conn, conn.begin_read):
        yield


def _select(
    conn: Connection,
    table: Table[R],
    tail: str,
    params: Sequence[Any] = (),
    *,
    alias: str = "",
) -> list[R]:
    """The records of ``table`` a query finds; ``tail`` is what follows the table's name (an
    alias and joins, then WHERE and ORDER BY); ``alias`` prefixes the selected columns."""
    rows = conn.execute(f"SELECT {table.select(alias)} FROM {table.name} {tail}", params)
    return [table.load(row) for row in rows.fetchall()]


def _select_one(
    conn: Connection, table: Table[R], tail: str, params: Sequence[Any]
) -> R | None:
    found = _select(conn, table, tail, params)
    return found[0] if found else None


def _insert_sql(table: str, columns: Collection[str], tail: str) -> str:
    marks = ", ".join("?" * len(columns))
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}) {tail}".rstrip()


def _insert(
    conn: Connection, table: str, values: Mapping[str, Any], tail: str = ""
) -> int | None:
    """One row (column -> stored value, as :meth:`Table.dump` writes it); returns its id (None
    when ``tail``'s ``ON CONFLICT ... DO NOTHING`` kept the row that was there)."""
    sql = _insert_sql(table, values.keys(), tail) + " RETURNING id"
    row = conn.execute(sql, tuple(values.values())).fetchone()
    return None if row is None else int(row["id"])


def _insert_new(conn: Connection, table: str, values: Mapping[str, Any]) -> int:
    """One row that no conflict can keep out; returns its id."""
    new_id = _insert(conn, table, values)
    assert new_id is not None
    return new_id


def _insert_many(
    conn: Connection, table: str, rows: Sequence[Mapping[str, Any]], tail: str = ""
) -> None:
    """Rows that name the same columns, in one statement."""
    if rows:
        sql = _insert_sql(table, rows[0].keys(), tail)
        conn.executemany(sql, [tuple(row.values()) for row in rows])


# --- sweeps ---------------------------------------------------------------------------------


def _current_sweep_named(conn: Connection, name: str) -> SweepRecord | None:
    return _select_one(conn, SWEEPS, "WHERE name = ? AND replaced_at IS NULL", (name,))


def _sweep_by_id(conn: Connection, sweep_id: int) -> SweepRecord | None:
    return _select_one(conn, SWEEPS, "WHERE id = ?", (sweep_id,))


def submit_sweep(
    conn: Connection,
    name: str,
    yaml_text: str,
    *,
    priority: int,
    source_path: str | None,
    replace: bool,
    now: float,
    workloads: Mapping[str, str] | None = None,
) -> SubmitResult:
    """``workloads``: the sweep's workload files by path (content kept with the sweep; the
    same YAML with other workload content is other content)."""
    digest = content_hash(yaml_text)
    files = dict(workloads or {})
    with write_transaction(conn):
        conn.lock(f"sweep-name:{name}")  # two submits of one name: one after the other
        existing = _current_sweep_named(conn, name)
        if existing is not None:
            same_files = stored_hashes(conn, existing.id) == workload_hashes(files)
            final = existing.state in ("cancelled", "failed")
            if existing.content_hash == digest and same_files and not (replace and final):
                return SubmitResult(sweep=existing, created=False)
            if not replace:
                raise SweepNameConflict(name, existing, digest)
            conn.execute("UPDATE sweeps SET replaced_at = ? WHERE id = ?", (now, existing.id))
        new = SWEEPS.dump(
            name=name,
            content_hash=digest,
            yaml_text=yaml_text,
            source_path=source_path,
            priority=priority,
            submitted_at=now,
        )
        new_id = _insert_new(conn, "sweeps", new)
        insert_workloads(conn, new_id, files)
        if existing is not None:
            conn.execute("UPDATE sweeps SET replaced_by = ? WHERE id = ?", (new_id, existing.id))
        created = _sweep_by_id(conn, new_id)
    assert created is not None
    return SubmitResult(sweep=created, created=True)


def find_sweep(conn: Connection, ref: str | int) -> SweepRecord | None:
    """An int is an id; a string is a name (its current run), else an id written in digits."""
    if isinstance(ref, int):
        return _sweep_by_id(conn, ref)
    with read_transaction(conn):
        by_name = _current_sweep_named(conn, ref)
        if by_name is None:
            by_name = _select_one(conn, SWEEPS, "WHERE name = ? ORDER BY id DESC LIMIT 1", (ref,))
        if by_name is not None:
            return by_name
        return _sweep_by_id(conn, int(ref)) if ref.isdigit() else None


def get_sweep(conn: Connection, ref: str | int) -> SweepRecord:
    sweep = find_sweep(conn, ref)
    if sweep is None:
        raise SweepNotFound(ref)
    return sweep


def list_sweeps(
    conn: Connection,
    states: Collection[SweepState] | None,
    include_replaced: bool,
) -> list[SweepRecord]:
    clauses: list[str] = []
    params: list[Any] = []
    if states is not None:
        bad = set(states) - set(SWEEP_STATES)
        if bad:
            raise ValueError(f"unknown sweep states {sorted(bad)}")
        clauses.append(f"state IN ({', '.join('?' * len(states))})")
        params.extend(states)
    if not include_replaced:
        clauses.append("replaced_at IS NULL")
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    return _select(conn, SWEEPS, f"{where} ORDER BY priority DESC, submitted_at, id", params)


def set_sweep_state(
    conn: Connection,
    sweep_id: int,
    state: SweepState,
    summary: Mapping[str, Any] | None,
    now: float,
) -> SweepRecord:
    """``running`` stamps ``started_at`` once (a resume keeps the first); an end stamps
    ``finished_at``."""
    if state not in SWEEP_STATES:
        raise ValueError(f"unknown sweep state {state!r}")
    finished = now if state in TERMINAL_SWEEP_STATES else None
    with write_transaction(conn):
        cursor = conn.execute(
            "UPDATE sweeps SET state = ?, started_at = CASE WHEN ? = 'running' "
            "THEN COALESCE(started_at, ?) ELSE started_at END, finished_at = ?, "
            "summary = COALESCE(?, summary) WHERE id = ?",
            (state, state, now, finished, to_json_or_null(summary), sweep_id),
        )
        if cursor.rowcount == 0:
            raise SweepNotFound(sweep_id)
        sweep = _sweep_by_id(conn, sweep_id)
    assert sweep is not None
    return sweep


# --- hosts and trials -----------------------------------------------------------------------


def _add_to_sweep(
    conn: Connection,
    sweep_id: int,
    table: Table[R],
    items: Sequence[object],
    on_conflict: str,
    all_of: Callable[[Connection, int], list[R]],
) -> list[R]:
    """Insert ``items`` as rows of the sweep (which must exist); then all of the sweep's."""
    with write_transaction(conn):
        if _sweep_by_id(conn, sweep_id) is None:
            raise SweepNotFound(sweep_id)
        rows = [table.dump(item, sweep_id=sweep_id) for item in items]
        _insert_many(conn, table.name, rows, on_conflict)
        return all_of(conn, sweep_id)


def add_hosts(
    conn: Connection, sweep_id: int, hosts: Sequence[HostEntry]
) -> list[HostRecord]:
    return _add_to_sweep(
        conn,
        sweep_id,
        HOSTS,
        hosts,
        "ON CONFLICT (sweep_id, name) DO UPDATE SET type = excluded.type",
        hosts_of,
    )


def set_host_aside(conn: Connection, sweep_id: int, host: str, reason: str | None) -> None:
    with write_transaction(conn):
        cursor = conn.execute(
            "UPDATE sweep_hosts SET set_aside_reason = ? WHERE sweep_id = ? AND name = ?",
            (reason, sweep_id, host),
        )
        if cursor.rowcount == 0:
            raise KeyError(f"sweep {sweep_id} has no host {host!r}")


def hosts_of(conn: Connection, sweep_id: int) -> list[HostRecord]:
    return _select(conn, HOSTS, "WHERE sweep_id = ? ORDER BY name", (sweep_id,))


def add_trials(
    conn: Connection, sweep_id: int, trials: Sequence[NewTrial]
) -> list[TrialRecord]:
    """Insert the plan's trials; ones already present (same key and host) are kept as they are."""
    return _add_to_sweep(
        conn, sweep_id, TRIALS, trials, "ON CONFLICT (sweep_id, key, host) DO NOTHING", trials_of
    )


def set_trial_plan(conn: Connection, trial_id: int, plan: TrialPlan) -> TrialRecord:
    """Replace what a trial measures (a screen promoted to the full matrix on its server)."""
    with write_transaction(conn):
        conn.execute("UPDATE trials SET plan = ? WHERE id = ?", (PLAN.dump(plan), trial_id))
        return _trial_by_id(conn, trial_id)


def _trial_by_id(conn: Connection, trial_id: int) -> TrialRecord:
    trial = _select_one(conn, TRIALS, "WHERE id = ?", (trial_id,))
    if trial is None:
        raise TrialNotFound(trial_id)
    return trial


def trials_of(conn: Connection, sweep_id: int) -> list[TrialRecord]:
    return _select(conn, TRIALS, "WHERE sweep_id = ? ORDER BY ordinal, host, id", (sweep_id,))


# --- attempts -------------------------------------------------------------------------------


def _attempt_by_id(conn: Connection, attempt_id: int, *, lock: bool = False) -> Attempt:
    """``lock``: the row stays this write's until it commits (the running attempt a point,
    an invocation or the attempt's end is written to)."""
    tail = "WHERE id = ?" + (conn.for_update if lock else "")
    attempt = _select_one(conn, ATTEMPTS, tail, (attempt_id,))
    if attempt is None:
        raise AttemptNotFound(attempt_id)
    return attempt


def _running_attempt(conn: Connection, attempt_id: int) -> Attempt:
    attempt = _attempt_by_id(conn, attempt_id, lock=True)
    if attempt.state != "running":
        raise AttemptNotRunning(attempt_id, attempt.state)
    return attempt


def _new_attempt(
    conn: Connection,
    trial_id: int,
    state: AttemptState,
    cause: str | None,
    evidence: Mapping[str, Any] | None,
    now: float,
) -> Attempt:
    # The trial's row, locked: its attempts are numbered one at a time.
    found = conn.execute("SELECT id FROM trials WHERE id = ?" + conn.for_update, (trial_id,))
    if found.fetchone() is None:
        raise TrialNotFound(trial_id)
    finished = now if state in FINISHED_ATTEMPT_STATES else None
    row = conn.execute(
        "INSERT INTO attempts (trial_id, number, state, cause, evidence, started_at, finished_at) "
        "VALUES (?, (SELECT COALESCE(MAX(number), 0) + 1 FROM attempts WHERE trial_id = ?), "
        "?, ?, ?, ?, ?) RETURNING id",
        (trial_id, trial_id, state, cause, to_json_or_null(evidence), now, finished),
    ).fetchone()
    return _attempt_by_id(conn, int(row["id"]))


def start_attempt(
    conn: Connection, trial_id: int, invocation_id: str | None, now: float
) -> Attempt:
    """A new running attempt numbered after the trial's last one; earlier ones stay as they were."""
    with write_transaction(conn):
        attempt = _new_attempt(conn, trial_id, "running", None, None, now)
        if invocation_id is not None:
            conn.execute(
                "UPDATE attempts SET invocation_id = ? WHERE id = ?", (invocation_id, attempt.id)
            )
            attempt = _attempt_by_id(conn, attempt.id)
        return attempt


def skip_trial(
    conn: Connection,
    trial_id: int,
    cause: str | None,
    evidence: Mapping[str, Any] | None,
    now: float,
    state: Literal["skipped", "cancelled"] = "skipped",
) -> Attempt:
    """Record that a trial was not run as a finished attempt: skipped (host set aside, sweep
    aborted) or cancelled (its sweep was cancelled first)."""
    with write_transaction(conn):
        return _new_attempt(conn, trial_id, state, cause, evidence, now)


def set_attempt_invocation(
    conn: Connection, attempt_id: int, invocation_id: str
) -> Attempt:
    """The server process now serving this attempt (systemd's InvocationID)."""
    with write_transaction(conn):
        _running_attempt(conn, attempt_id)
        conn.execute(
            "UPDATE attempts SET invocation_id = ? WHERE id = ?", (invocation_id, attempt_id)
        )
        return _attempt_by_id(conn, attempt_id)


def resume_attempt(conn: Connection, attempt_id: int, invocation_id: str | None) -> Attempt:
    """Take over a running attempt after a restart: its committed points stay, ``resumes`` += 1."""
    with write_transaction(conn):
        _running_attempt(conn, attempt_id)
        conn.execute(
            "UPDATE attempts SET resumes = resumes + 1, "
            "invocation_id = COALESCE(?, invocation_id) WHERE id = ?",
            (invocation_id, attempt_id),
        )
        return _attempt_by_id(conn, attempt_id)


def finish_attempt(
    conn: Connection,
    attempt_id: int,
    state: AttemptState,
    cause: str | None,
    evidence: Mapping[str, Any] | None,
    now: float,
) -> Attempt:
    if state not in FINISHED_ATTEMPT_STATES:
        raise ValueError(f"an attempt finishes as one of {FINISHED_ATTEMPT_STATES}, not {state!r}")
    with write_transaction(conn):
        _running_attempt(conn, attempt_id)
        conn.execute(
            "UPDATE attempts SET state = ?, cause = ?, evidence = ?, finished_at = ? WHERE id = ?",
            (state, cause, to_json_or_null(evidence), now, attempt_id),
        )
        return _attempt_by_id(conn, attempt_id)


def get_attempt(conn: Connection, attempt_id: int) -> Attempt:
    return _attempt_by_id(conn, attempt_id)


def attempts_of(conn: Connection, sweep_id: int) -> list[Attempt]:
    return _select(
        conn,
        ATTEMPTS,
        "a JOIN trials t ON t.id = a.trial_id WHERE t.sweep_id = ? "
        "ORDER BY t.ordinal, t.host, a.number",
        (sweep_id,),
        alias="a",
    )


def _committed_keys(conn: Connection, attempt_id: int) -> frozenset[str]:
    rows = conn.execute(
        "SELECT point_key FROM points WHERE attempt_id = ?", (attempt_id,)
    ).fetchall()
    return frozenset(row["point_key"] for row in rows)


def committed_point_keys(conn: Connection, attempt_id: int) -> frozenset[str]:
    return _committed_keys(conn, attempt_id)


def running_attempts(conn: Connection, sweep_id: int) -> list[UnfinishedAttempt]:
    """Attempts a crash left running, in plan order, each with the points it committed."""
    with read_transaction(conn):
        rows = conn.execute(
            "SELECT a.id AS attempt_id, t.id AS trial_id FROM attempts a "
            "JOIN trials t ON t.id = a.trial_id WHERE t.sweep_id = ? AND a.state = 'running' "
            "ORDER BY t.ordinal, t.host, a.number",
            (sweep_id,),
        ).fetchall()
        return [
            UnfinishedAttempt(
                trial=_trial_by_id(conn, row["trial_id"]),
                attempt=_attempt_by_id(conn, row["attempt_id"]),
                committed_point_keys=_committed_keys(conn, row["attempt_id"]),
            )
            for row in rows
        ]


# --- points and requests --------------------------------------------------------------------


def record_point(
    conn: Connection,
    attempt_id: int,
    point: NewPoint | Point,
    requests: Sequence[StoredRequest],
    now: float,
) -> int:
    """The point and all its requests in one transaction: a crash leaves both or neither."""
    if not isinstance(point, NewPoint):
        point = point.to_new_point()
    key = point.key
    with write_transaction(conn):
        _running_attempt(conn, attempt_id)
        existing = conn.execute(
            "SELECT id FROM points WHERE attempt_id = ? AND point_key = ?", (attempt_id, key)
        ).fetchone()
        if existing is not None:
            raise PointAlreadyRecorded(attempt_id, key, existing["id"])
        point_id = _insert_new(
            conn, "points", POINTS.dump(point, attempt_id=attempt_id, committed_at=now)
        )
        _insert_many(
            conn,
            "requests",
            [REQUESTS.dump(r, point_id=point_id, seq=seq) for seq, r in enumerate(requests)],
        )
    return point_id


def points_of(
    conn: Connection, *, attempt_id: int | None = None, sweep_id: int | None = None
) -> list[PointRecord]:
    """Points of one attempt or of a whole sweep, in the order they were committed."""
    if (attempt_id is None) == (sweep_id is None):
        raise ValueError("give exactly one of attempt_id and sweep_id")
    if attempt_id is not None:
        return _select(conn, POINTS, "WHERE attempt_id = ? ORDER BY id", (attempt_id,))
    return _select(
        conn,
        POINTS,
        "p JOIN attempts a ON a.id = p.attempt_id "
        "JOIN trials t ON t.id = a.trial_id WHERE t.sweep_id = ? ORDER BY p.id",
        (sweep_id,),
        alias="p",
    )


def requests_of(conn: Connection, point_id: int) -> list[StoredRequest]:
    return _select(conn, REQUESTS, "WHERE point_id = ? ORDER BY seq", (point_id,))


# --- events ---------------------------------------------------------------------------------


def add_event(
    conn: Connection,
    sweep_id: int,
    kind: str,
    *,
    host: str | None,
    attempt_id: int | None,
    fields: Mapping[str, Any] | None,
    ts: float,
) -> EventRecord:
    new = EVENTS.dump(
        sweep_id=sweep_id, attempt_id=attempt_id, host=host, kind=kind, ts=ts, fields=fields or {}
    )
    with write_transaction(conn):
        event = _select_one(conn, EVENTS, "WHERE id = ?", (_insert_new(conn, "events", new),))
    assert event is not None
    return event


def events_of(
    conn: Connection,
    sweep_id: int,
    *,
    host: str | None,
    attempt_id: int | None,
    kinds: Collection[str] | None,
    after_id: int | None,
) -> list[EventRecord]:
    """Events in the order they happened; ``after_id`` lets a follower poll for new ones."""
    clauses: list[str] = ["sweep_id = ?"]
    params: list[Any] = [sweep_id]
    for column, value in (("host", host), ("attempt_id", attempt_id)):
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if kinds is not None:
        clauses.append(f"kind IN ({', '.join('?' * len(kinds))})")
        params.extend(kinds)
    if after_id is not None:
        clauses.append("id > ?")
        params.append(after_id)
    return _select(conn, EVENTS, f"WHERE {' AND '.join(clauses)} ORDER BY ts, id", params)


# --- unit backups ---------------------------------------------------------------------------


def _backup(conn: Connection, sweep_id: int, host: str, unit: str) -> UnitBackup | None:
    return _select_one(
        conn, UNIT_BACKUPS, "WHERE sweep_id = ? AND host = ? AND unit = ?", (sweep_id, host, unit)
    )


_KEEP_FIRST = "ON CONFLICT (sweep_id, host, unit) DO NOTHING"
_REARM = (
    "ON CONFLICT (sweep_id, host, unit) DO UPDATE SET "
    "files = excluded.files, state = excluded.state, taken_at = excluded.taken_at, "
    "dropin = excluded.dropin, adopted = excluded.adopted, restored_at = NULL"
)


def save_unit_backup(
    conn: Connection,
    sweep_id: int,
    host: str,
    unit: str,
    files: Mapping[str, bytes | None],
    state: Mapping[str, str],
    now: float,
    dropin: DropinSlot | None = None,
    adopted: str | None = None,
    *,
    rearm: bool = False,
) -> UnitBackup:
    """The first backup of a unit in a sweep wins: a resumed run never backs up its own changes.

    ``rearm`` keeps the unit as found NOW as the sweep's pending backup of ``host`` instead
    (what ``adopt`` changes is undone by ``restore`` to this). A rearm is refused while an
    earlier backup of the host is still pending: that one holds the unit as the operator left
    it, and must not be lost.
    """
    new = UNIT_BACKUPS.dump(
        sweep_id=sweep_id,
        host=host,
        unit=unit,
        files=files,
        state=state,
        taken_at=now,
        dropin=dropin,
        adopted=adopted,
    )
    with write_transaction(conn):
        if rearm:
            conn.lock(f"backup-host:{host}")  # two rearms of one host: one after the other
            pending = conn.execute(
                "SELECT sweep_id FROM unit_backups WHERE host = ? AND restored_at IS NULL", (host,)
            ).fetchone()
            if pending is not None:
                raise BackupPending(host, int(pending["sweep_id"]))
        _insert(conn, "unit_backups", new, _REARM if rearm else _KEEP_FIRST)
        backup = _backup(conn, sweep_id, host, unit)
    assert backup is not None
    return backup


def get_unit_backup(
    conn: Connection, sweep_id: int, host: str, unit: str
) -> UnitBackup | None:
    return _backup(conn, sweep_id, host, unit)


def pending_restores(
    conn: Connection, sweep_id: int | None, host: str | None
) -> list[UnitBackup]:
    """Backups whose host has not been put back yet, oldest first."""
    clauses: list[str] = ["restored_at IS NULL"]
    params: list[Any] = []
    if sweep_id is not None:
        clauses.append("sweep_id = ?")
        params.append(sweep_id)
    if host is not None:
        clauses.append("host = ?")
        params.append(host)
    return _select(
        conn, UNIT_BACKUPS, f"WHERE {' AND '.join(clauses)} ORDER BY taken_at, id", params
    )


def mark_restored(conn: Connection, sweep_id: int, host: str, now: float) -> int:
    """Mark every backed-up unit of ``host`` in the sweep restored; returns how many."""
    with write_transaction(conn):
        cursor = conn.execute(
            "UPDATE unit_backups SET restored_at = ? "
            "WHERE sweep_id = ? AND host = ? AND restored_at IS NULL",
            (now, sweep_id, host),
        )
        return cursor.rowcount


# --- results --------------------------------------------------------------------------------


def sweep_results(conn: Connection, ref: str | int) -> SweepResults:
    with read_transaction(conn):
        sweep = get_sweep(conn, ref)
        trials = trials_of(conn, sweep.id)
        attempts = attempts_of(conn, sweep.id)
        points = points_of(conn, sweep_id=sweep.id)
        hosts = hosts_of(conn, sweep.id)
        stops = events_of(
            conn,
            sweep.id,
            host=None,
            attempt_id=None,
            kinds=(EXPLORATION_STOPPED_EVENT,),
            after_id=None,
        )
    exploration = [ExplorationStop.from_json(event.fields) for event in stops]
    return build_results(sweep, trials, attempts, points, hosts, exploration)


def trial_states(conn: Connection, sweep_id: int) -> dict[tuple[str, str], TrialState]:
    """Each trial's latest state without reading a point (status asks this every refresh)."""
    with read_transaction(conn):
        sweep = _sweep_by_id(conn, sweep_id)
        if sweep is None:
            raise SweepNotFound(sweep_id)
        return latest_states(trials_of(conn, sweep_id), attempts_of(conn, sweep_id), sweep.state)
