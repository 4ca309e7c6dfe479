"""The store's operations as plain functions on one sqlite3 connection.

Each write is exactly one ``BEGIN IMMEDIATE`` ... ``COMMIT``: taking the write lock up front
means a writer waits (busy timeout) instead of failing when another process committed in
between, and a crash leaves either all of a write or none of it. Reads of several tables run in
one read transaction so they see one snapshot. Callers pass ``now`` so the logic has no clock.
These functions run only on the store's worker thread (see :mod:`orchestrator.store.db`).
"""

from __future__ import annotations

import base64
import json
import math
import sqlite3
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, cast

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
    PointKind,
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
from orchestrator.store.workloads import insert_workloads, stored_hashes, workload_hashes
from orchestrator.types import content_hash

# --- transactions and JSON ------------------------------------------------------------------


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One snapshot for several reads; inside an open transaction it simply joins it."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a value that could not be computed is stored as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def to_json(value: Any) -> str:
    return json.dumps(_finite(value), allow_nan=False, separators=(",", ":"))


def to_json_or_null(value: Any) -> str | None:
    return None if value is None else to_json(value)


def from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# --- row -> record --------------------------------------------------------------------------

_SWEEP_COLUMNS = (
    "id, name, content_hash, yaml_text, source_path, priority, submitted_at, state, "
    "started_at, finished_at, summary, replaced_by, replaced_at"
)
_ATTEMPT_COLUMNS = (
    "id, trial_id, number, state, cause, evidence, started_at, finished_at, invocation_id, resumes"
)
_TRIAL_COLUMNS = "id, sweep_id, key, host, config, ordinal, is_baseline, plan"
_POINT_COLUMNS = (
    "id, attempt_id, point_key, kind, context, concurrency, problem, metrics, accept_len, "
    "quality, invocation_id, cursor_start, cursor_end, started_at, finished_at, committed_at, "
    "rate, workload"
)
_BACKUP_COLUMNS = "id, sweep_id, host, unit, files, state, taken_at, restored_at, dropin, adopted"
_LEGACY_DROPIN = ("__dropin_path", "__dropin_dir_existed", "__dropin_mode")
_LEGACY_ADOPTED = "__adopted"
"""The reserved keys a backup's state held before version 6 gave them their own columns."""


def _sweep(row: sqlite3.Row) -> SweepRecord:
    return SweepRecord(
        id=row["id"],
        name=row["name"],
        content_hash=row["content_hash"],
        yaml_text=row["yaml_text"],
        source_path=row["source_path"],
        priority=row["priority"],
        submitted_at=row["submitted_at"],
        state=cast(SweepState, row["state"]),
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        summary=from_json(row["summary"]),
        replaced_by=row["replaced_by"],
        replaced_at=row["replaced_at"],
    )


def _trial(row: sqlite3.Row) -> TrialRecord:
    return TrialRecord(
        id=row["id"],
        sweep_id=row["sweep_id"],
        key=row["key"],
        host=row["host"],
        config=from_json(row["config"]),
        ordinal=row["ordinal"],
        is_baseline=bool(row["is_baseline"]),
        plan=None if row["plan"] is None else TrialPlan.from_json(from_json(row["plan"])),
    )


def _attempt(row: sqlite3.Row) -> Attempt:
    return Attempt(
        id=row["id"],
        trial_id=row["trial_id"],
        number=row["number"],
        state=cast(AttemptState, row["state"]),
        cause=row["cause"],
        evidence=from_json(row["evidence"]),
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        invocation_id=row["invocation_id"],
        resumes=row["resumes"],
    )


def _point(row: sqlite3.Row) -> PointRecord:
    return PointRecord(
        id=row["id"],
        attempt_id=row["attempt_id"],
        key=row["point_key"],
        kind=cast(PointKind, row["kind"]),
        context=row["context"],
        concurrency=row["concurrency"],
        problem=row["problem"],
        metrics=from_json(row["metrics"]),
        accept_len=from_json(row["accept_len"]),
        rate=row["rate"],
        workload=row["workload"],
        quality=from_json(row["quality"]),
        invocation_id=row["invocation_id"],
        cursor_start=row["cursor_start"],
        cursor_end=row["cursor_end"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        committed_at=row["committed_at"],
    )


def _request(row: sqlite3.Row) -> StoredRequest:
    return StoredRequest(
        sent_at=row["sent_at"],
        ttft_s=row["ttft_s"],
        e2e_s=row["e2e_s"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        finish_reason=row["finish_reason"],
        error=row["error"],
        warmup=bool(row["warmup"]),
        extra=from_json(row["extra"]),
    )


def _event(row: sqlite3.Row) -> EventRecord:
    return EventRecord(
        id=row["id"],
        sweep_id=row["sweep_id"],
        attempt_id=row["attempt_id"],
        host=row["host"],
        kind=row["kind"],
        ts=row["ts"],
        fields=from_json(row["fields"]),
    )


def _backup(row: sqlite3.Row) -> UnitBackup:
    files = from_json(row["files"])
    state: dict[str, str] = dict(from_json(row["state"]))
    dropin = _dropin_slot(from_json(row["dropin"])) if row["dropin"] is not None else None
    if dropin is None and "__dropin_path" in state:  # written before version 6
        dropin = DropinSlot(
            state["__dropin_path"],
            state.get("__dropin_dir_existed") == "yes",
            int(state.get("__dropin_mode", "0o644"), 8),
        )
    adopted = row["adopted"] if row["adopted"] is not None else state.get(_LEGACY_ADOPTED)
    for key in (*_LEGACY_DROPIN, _LEGACY_ADOPTED):
        state.pop(key, None)
    return UnitBackup(
        id=row["id"],
        sweep_id=row["sweep_id"],
        host=row["host"],
        unit=row["unit"],
        files={
            path: None if content is None else base64.b64decode(content)
            for path, content in files.items()
        },
        state=state,
        taken_at=row["taken_at"],
        restored_at=row["restored_at"],
        dropin=dropin,
        adopted=adopted,
    )


def _dropin_slot(data: Mapping[str, Any]) -> DropinSlot:
    return DropinSlot(str(data["path"]), bool(data["dir_existed"]), int(data["mode"]))


# --- sweeps ---------------------------------------------------------------------------------


def _current_sweep_named(conn: sqlite3.Connection, name: str) -> SweepRecord | None:
    row = conn.execute(
        f"SELECT {_SWEEP_COLUMNS} FROM sweeps WHERE name = ? AND replaced_at IS NULL", (name,)
    ).fetchone()
    return None if row is None else _sweep(row)


def _sweep_by_id(conn: sqlite3.Connection, sweep_id: int) -> SweepRecord | None:
    row = conn.execute(f"SELECT {_SWEEP_COLUMNS} FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
    return None if row is None else _sweep(row)


def submit_sweep(
    conn: sqlite3.Connection,
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
        existing = _current_sweep_named(conn, name)
        if existing is not None:
            same_files = stored_hashes(conn, existing.id) == workload_hashes(files)
            final = existing.state in ("cancelled", "failed")
            if existing.content_hash == digest and same_files and not (replace and final):
                return SubmitResult(sweep=existing, created=False)
            if not replace:
                raise SweepNameConflict(name, existing, digest)
            conn.execute("UPDATE sweeps SET replaced_at = ? WHERE id = ?", (now, existing.id))
        cursor = conn.execute(
            "INSERT INTO sweeps (name, content_hash, yaml_text, source_path, priority, "
            "submitted_at) VALUES (?, ?, ?, ?, ?, ?)",
            (name, digest, yaml_text, source_path, priority, now),
        )
        new_id = cast(int, cursor.lastrowid)
        insert_workloads(conn, new_id, files)
        if existing is not None:
            conn.execute("UPDATE sweeps SET replaced_by = ? WHERE id = ?", (new_id, existing.id))
        created = _sweep_by_id(conn, new_id)
    assert created is not None
    return SubmitResult(sweep=created, created=True)


def find_sweep(conn: sqlite3.Connection, ref: str | int) -> SweepRecord | None:
    """An int is an id; a string is a name (its current run), else an id written in digits."""
    if isinstance(ref, int):
        return _sweep_by_id(conn, ref)
    with read_transaction(conn):
        by_name = _current_sweep_named(conn, ref)
        if by_name is None:
            row = conn.execute(
                f"SELECT {_SWEEP_COLUMNS} FROM sweeps WHERE name = ? ORDER BY id DESC LIMIT 1",
                (ref,),
            ).fetchone()
            by_name = None if row is None else _sweep(row)
        if by_name is not None:
            return by_name
        return _sweep_by_id(conn, int(ref)) if ref.isdigit() else None


def get_sweep(conn: sqlite3.Connection, ref: str | int) -> SweepRecord:
    sweep = find_sweep(conn, ref)
    if sweep is None:
        raise SweepNotFound(ref)
    return sweep


def list_sweeps(
    conn: sqlite3.Connection,
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
    rows = conn.execute(
        f"SELECT {_SWEEP_COLUMNS} FROM sweeps {where} ORDER BY priority DESC, submitted_at, id",
        params,
    ).fetchall()
    return [_sweep(row) for row in rows]


def set_sweep_state(
    conn: sqlite3.Connection,
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


def add_hosts(
    conn: sqlite3.Connection, sweep_id: int, hosts: Sequence[HostEntry]
) -> list[HostRecord]:
    with write_transaction(conn):
        if _sweep_by_id(conn, sweep_id) is None:
            raise SweepNotFound(sweep_id)
        conn.executemany(
            "INSERT INTO sweep_hosts (sweep_id, name, type) VALUES (?, ?, ?) "
            "ON CONFLICT (sweep_id, name) DO UPDATE SET type = excluded.type",
            [(sweep_id, host.name, host.type) for host in hosts],
        )
        return hosts_of(conn, sweep_id)


def set_host_aside(conn: sqlite3.Connection, sweep_id: int, host: str, reason: str | None) -> None:
    with write_transaction(conn):
        cursor = conn.execute(
            "UPDATE sweep_hosts SET set_aside_reason = ? WHERE sweep_id = ? AND name = ?",
            (reason, sweep_id, host),
        )
        if cursor.rowcount == 0:
            raise KeyError(f"sweep {sweep_id} has no host {host!r}")


def hosts_of(conn: sqlite3.Connection, sweep_id: int) -> list[HostRecord]:
    rows = conn.execute(
        "SELECT sweep_id, name, type, set_aside_reason FROM sweep_hosts WHERE sweep_id = ? "
        "ORDER BY name",
        (sweep_id,),
    ).fetchall()
    return [HostRecord(r["sweep_id"], r["name"], r["type"], r["set_aside_reason"]) for r in rows]


def add_trials(
    conn: sqlite3.Connection, sweep_id: int, trials: Sequence[NewTrial]
) -> list[TrialRecord]:
    """Insert the plan's trials; ones already present (same key and host) are kept as they are."""
    with write_transaction(conn):
        if _sweep_by_id(conn, sweep_id) is None:
            raise SweepNotFound(sweep_id)
        conn.executemany(
            "INSERT INTO trials (sweep_id, key, host, config, ordinal, is_baseline, plan) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (sweep_id, key, host) DO NOTHING",
            [
                (
                    sweep_id,
                    t.key,
                    t.host,
                    to_json(t.config),
                    t.ordinal,
                    int(t.is_baseline),
                    None if t.plan is None else to_json(t.plan.to_json()),
                )
                for t in trials
            ],
        )
        return trials_of(conn, sweep_id)


def set_trial_plan(conn: sqlite3.Connection, trial_id: int, plan: TrialPlan) -> TrialRecord:
    """Replace what a trial measures (a screen promoted to the full matrix on its server)."""
    with write_transaction(conn):
        cursor = conn.execute(
            "UPDATE trials SET plan = ? WHERE id = ?", (to_json(plan.to_json()), trial_id)
        )
        if cursor.rowcount == 0:
            raise TrialNotFound(trial_id)
        row = conn.execute(
            f"SELECT {_TRIAL_COLUMNS} FROM trials WHERE id = ?", (trial_id,)
        ).fetchone()
        return _trial(row)


def trials_of(conn: sqlite3.Connection, sweep_id: int) -> list[TrialRecord]:
    rows = conn.execute(
        f"SELECT {_TRIAL_COLUMNS} FROM trials WHERE sweep_id = ? ORDER BY ordinal, host, id",
        (sweep_id,),
    ).fetchall()
    return [_trial(row) for row in rows]


# --- attempts -------------------------------------------------------------------------------


def _attempt_by_id(conn: sqlite3.Connection, attempt_id: int) -> Attempt:
    row = conn.execute(
        f"SELECT {_ATTEMPT_COLUMNS} FROM attempts WHERE id = ?", (attempt_id,)
    ).fetchone()
    if row is None:
        raise AttemptNotFound(attempt_id)
    return _attempt(row)


def _running_attempt(conn: sqlite3.Connection, attempt_id: int) -> Attempt:
    attempt = _attempt_by_id(conn, attempt_id)
    if attempt.state != "running":
        raise AttemptNotRunning(attempt_id, attempt.state)
    return attempt


def _new_attempt(
    conn: sqlite3.Connection,
    trial_id: int,
    state: AttemptState,
    cause: str | None,
    evidence: Mapping[str, Any] | None,
    now: float,
) -> Attempt:
    if conn.execute("SELECT 1 FROM trials WHERE id = ?", (trial_id,)).fetchone() is None:
        raise TrialNotFound(trial_id)
    finished = now if state in FINISHED_ATTEMPT_STATES else None
    cursor = conn.execute(
        "INSERT INTO attempts (trial_id, number, state, cause, evidence, started_at, finished_at) "
        "SELECT ?, COALESCE(MAX(number), 0) + 1, ?, ?, ?, ?, ? FROM attempts WHERE trial_id = ?",
        (trial_id, state, cause, to_json_or_null(evidence), now, finished, trial_id),
    )
    return _attempt_by_id(conn, cast(int, cursor.lastrowid))


def start_attempt(
    conn: sqlite3.Connection, trial_id: int, invocation_id: str | None, now: float
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
    conn: sqlite3.Connection,
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
    conn: sqlite3.Connection, attempt_id: int, invocation_id: str
) -> Attempt:
    """The server process now serving this attempt (systemd's InvocationID)."""
    with write_transaction(conn):
        _running_attempt(conn, attempt_id)
        conn.execute(
            "UPDATE attempts SET invocation_id = ? WHERE id = ?", (invocation_id, attempt_id)
        )
        return _attempt_by_id(conn, attempt_id)


def resume_attempt(conn: sqlite3.Connection, attempt_id: int, invocation_id: str | None) -> Attempt:
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
    conn: sqlite3.Connection,
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


def get_attempt(conn: sqlite3.Connection, attempt_id: int) -> Attempt:
    return _attempt_by_id(conn, attempt_id)


def attempts_of(conn: sqlite3.Connection, sweep_id: int) -> list[Attempt]:
    rows = conn.execute(
        f"SELECT {', '.join('a.' + c.strip() for c in _ATTEMPT_COLUMNS.split(','))} "
        "FROM attempts a JOIN trials t ON t.id = a.trial_id WHERE t.sweep_id = ? "
        "ORDER BY t.ordinal, t.host, a.number",
        (sweep_id,),
    ).fetchall()
    return [_attempt(row) for row in rows]


def _committed_keys(conn: sqlite3.Connection, attempt_id: int) -> frozenset[str]:
    rows = conn.execute(
        "SELECT point_key FROM points WHERE attempt_id = ?", (attempt_id,)
    ).fetchall()
    return frozenset(row[0] for row in rows)


def committed_point_keys(conn: sqlite3.Connection, attempt_id: int) -> frozenset[str]:
    return _committed_keys(conn, attempt_id)


def running_attempts(conn: sqlite3.Connection, sweep_id: int) -> list[UnfinishedAttempt]:
    """Attempts a crash left running, in plan order, each with the points it committed."""
    with read_transaction(conn):
        rows = conn.execute(
            "SELECT a.id AS attempt_id, t.id AS trial_id FROM attempts a "
            "JOIN trials t ON t.id = a.trial_id WHERE t.sweep_id = ? AND a.state = 'running' "
            "ORDER BY t.ordinal, t.host, a.number",
            (sweep_id,),
        ).fetchall()
        found = []
        for row in rows:
            trial_row = conn.execute(
                f"SELECT {_TRIAL_COLUMNS} FROM trials WHERE id = ?", (row["trial_id"],)
            ).fetchone()
            found.append(
                UnfinishedAttempt(
                    trial=_trial(trial_row),
                    attempt=_attempt_by_id(conn, row["attempt_id"]),
                    committed_point_keys=_committed_keys(conn, row["attempt_id"]),
                )
            )
        return found


# --- points and requests --------------------------------------------------------------------


def record_point(
    conn: sqlite3.Connection,
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
            raise PointAlreadyRecorded(attempt_id, key, existing[0])
        cursor = conn.execute(
            "INSERT INTO points (attempt_id, point_key, kind, context, concurrency, problem, "
            "metrics, accept_len, quality, invocation_id, cursor_start, cursor_end, started_at, "
            "finished_at, committed_at, rate, workload) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                attempt_id,
                key,
                point.kind,
                point.context,
                point.concurrency,
                point.problem,
                to_json(point.metrics),
                to_json_or_null(point.accept_len),
                to_json(point.quality),
                point.invocation_id,
                point.cursor_start,
                point.cursor_end,
                point.started_at,
                point.finished_at,
                now,
                point.rate,
                point.workload,
            ),
        )
        point_id = cast(int, cursor.lastrowid)
        conn.executemany(
            "INSERT INTO requests (point_id, seq, sent_at, ttft_s, e2e_s, prompt_tokens, "
            "completion_tokens, finish_reason, error, warmup, extra) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    point_id,
                    seq,
                    r.sent_at,
                    r.ttft_s,
                    r.e2e_s,
                    r.prompt_tokens,
                    r.completion_tokens,
                    r.finish_reason,
                    r.error,
                    int(r.warmup),
                    to_json_or_null(r.extra),
                )
                for seq, r in enumerate(requests)
            ],
        )
    return point_id


def points_of(
    conn: sqlite3.Connection, *, attempt_id: int | None = None, sweep_id: int | None = None
) -> list[PointRecord]:
    """Points of one attempt or of a whole sweep, in the order they were committed."""
    if (attempt_id is None) == (sweep_id is None):
        raise ValueError("give exactly one of attempt_id and sweep_id")
    if attempt_id is not None:
        rows = conn.execute(
            f"SELECT {_POINT_COLUMNS} FROM points WHERE attempt_id = ? ORDER BY id", (attempt_id,)
        ).fetchall()
    else:
        rows = conn.execute(
            f"SELECT {', '.join('p.' + c.strip() for c in _POINT_COLUMNS.split(','))} "
            "FROM points p JOIN attempts a ON a.id = p.attempt_id "
            "JOIN trials t ON t.id = a.trial_id WHERE t.sweep_id = ? ORDER BY p.id",
            (sweep_id,),
        ).fetchall()
    return [_point(row) for row in rows]


def requests_of(conn: sqlite3.Connection, point_id: int) -> list[StoredRequest]:
    rows = conn.execute(
        "SELECT sent_at, ttft_s, e2e_s, prompt_tokens, completion_tokens, finish_reason, error, "
        "warmup, extra FROM requests WHERE point_id = ? ORDER BY seq",
        (point_id,),
    ).fetchall()
    return [_request(row) for row in rows]


# --- events ---------------------------------------------------------------------------------


def add_event(
    conn: sqlite3.Connection,
    sweep_id: int,
    kind: str,
    *,
    host: str | None,
    attempt_id: int | None,
    fields: Mapping[str, Any] | None,
    ts: float,
) -> EventRecord:
    with write_transaction(conn):
        cursor = conn.execute(
            "INSERT INTO events (sweep_id, attempt_id, host, kind, ts, fields) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (sweep_id, attempt_id, host, kind, ts, to_json(fields or {})),
        )
        row = conn.execute(
            "SELECT id, sweep_id, attempt_id, host, kind, ts, fields FROM events WHERE id = ?",
            (cursor.lastrowid,),
        ).fetchone()
    return _event(row)


def events_of(
    conn: sqlite3.Connection,
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
    rows = conn.execute(
        "SELECT id, sweep_id, attempt_id, host, kind, ts, fields FROM events "
        f"WHERE {' AND '.join(clauses)} ORDER BY ts, id",
        params,
    ).fetchall()
    return [_event(row) for row in rows]


# --- unit backups ---------------------------------------------------------------------------


def _backup_row(
    conn: sqlite3.Connection, sweep_id: int, host: str, unit: str
) -> sqlite3.Row | None:
    return cast(
        sqlite3.Row | None,
        conn.execute(
            f"SELECT {_BACKUP_COLUMNS} FROM unit_backups "
            "WHERE sweep_id = ? AND host = ? AND unit = ?",
            (sweep_id, host, unit),
        ).fetchone(),
    )


def _encoded_files(files: Mapping[str, bytes | None]) -> dict[str, str | None]:
    """A backup's file bytes as stored: base64 text, None for a file that was absent."""
    return {
        path: None if content is None else base64.b64encode(content).decode("ascii")
        for path, content in files.items()
    }


def save_unit_backup(
    conn: sqlite3.Connection,
    sweep_id: int,
    host: str,
    unit: str,
    files: Mapping[str, bytes | None],
    state: Mapping[str, str],
    now: float,
    dropin: DropinSlot | None = None,
) -> UnitBackup:
    """The first backup of a unit in a sweep wins: a resumed run never backs up its own changes."""
    encoded = _encoded_files(files)
    slot = None if dropin is None else to_json(dropin.to_json())
    with write_transaction(conn):
        conn.execute(
            "INSERT INTO unit_backups (sweep_id, host, unit, files, state, taken_at, dropin) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (sweep_id, host, unit) DO NOTHING",
            (sweep_id, host, unit, to_json(encoded), to_json(dict(state)), now, slot),
        )
        row = _backup_row(conn, sweep_id, host, unit)
    assert row is not None
    return _backup(row)


def rearm_unit_backup(
    conn: sqlite3.Connection,
    sweep_id: int,
    host: str,
    unit: str,
    files: Mapping[str, bytes | None],
    state: Mapping[str, str],
    now: float,
    dropin: DropinSlot | None = None,
    adopted: str | None = None,
) -> UnitBackup:
    """Keep the unit as found NOW as the sweep's pending backup of ``host`` (what ``adopt``
    changes is undone by ``restore`` to this). Refused while an earlier backup of the host is
    still pending: that one holds the unit as the operator left it, and must not be lost."""
    encoded = _encoded_files(files)
    with write_transaction(conn):
        pending = conn.execute(
            "SELECT sweep_id FROM unit_backups WHERE host = ? AND restored_at IS NULL", (host,)
        ).fetchone()
        if pending is not None:
            raise BackupPending(host, int(pending[0]))
        slot = None if dropin is None else to_json(dropin.to_json())
        conn.execute(
            "INSERT INTO unit_backups "
            "(sweep_id, host, unit, files, state, taken_at, dropin, adopted) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (sweep_id, host, unit) DO UPDATE SET "
            "files = excluded.files, state = excluded.state, taken_at = excluded.taken_at, "
            "dropin = excluded.dropin, adopted = excluded.adopted, restored_at = NULL",
            (sweep_id, host, unit, to_json(encoded), to_json(dict(state)), now, slot, adopted),
        )
        row = _backup_row(conn, sweep_id, host, unit)
    assert row is not None
    return _backup(row)


def get_unit_backup(
    conn: sqlite3.Connection, sweep_id: int, host: str, unit: str
) -> UnitBackup | None:
    row = _backup_row(conn, sweep_id, host, unit)
    return None if row is None else _backup(row)


def pending_restores(
    conn: sqlite3.Connection, sweep_id: int | None, host: str | None
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
    rows = conn.execute(
        f"SELECT {_BACKUP_COLUMNS} FROM unit_backups WHERE {' AND '.join(clauses)} "
        "ORDER BY taken_at, id",
        params,
    ).fetchall()
    return [_backup(row) for row in rows]


def mark_restored(conn: sqlite3.Connection, sweep_id: int, host: str, now: float) -> int:
    """Mark every backed-up unit of ``host`` in the sweep restored; returns how many."""
    with write_transaction(conn):
        cursor = conn.execute(
            "UPDATE unit_backups SET restored_at = ? "
            "WHERE sweep_id = ? AND host = ? AND restored_at IS NULL",
            (now, sweep_id, host),
        )
        return cursor.rowcount


# --- results --------------------------------------------------------------------------------


def sweep_results(conn: sqlite3.Connection, ref: str | int) -> SweepResults:
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


def trial_states(conn: sqlite3.Connection, sweep_id: int) -> dict[tuple[str, str], TrialState]:
    """Each trial's latest state without reading a point (status asks this every refresh)."""
    with read_transaction(conn):
        sweep = _sweep_by_id(conn, sweep_id)
        if sweep is None:
            raise SweepNotFound(sweep_id)
        return latest_states(trials_of(conn, sweep_id), attempts_of(conn, sweep_id), sweep.state)
