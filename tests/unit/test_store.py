"""The store on both its backends, a real SQLite file and a real PostgreSQL database (one server
per session, one new database per test): schema versions, sweeps, attempts, points, backups,
results, and which daemon runs which sweep. What only one backend has (a file's mode and WAL,
SQLite's pragmas, a server that refuses the connection) is tested on that one."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import orchestrator
from orchestrator.bench.coding import Outcome
from orchestrator.cli import main
from orchestrator.store import (
    MIGRATIONS,
    AcceptEstimate,
    AcceptLength,
    AttemptNotRunning,
    ClaimOutcome,
    CodingPoint,
    DaemonIdentity,
    HostEntry,
    LatencySummary,
    MatrixCell,
    Migration,
    NewPoint,
    NewTrial,
    PointAlreadyRecorded,
    PointProvenance,
    SchemaTooNew,
    Store,
    StoreBusy,
    StoreClosed,
    StoredRequest,
    StoreOpenError,
    StoreUnavailable,
    SweepNameConflict,
    SweepNotFound,
    SweepResults,
    ThroughputMetrics,
    ThroughputPoint,
    TrialPlan,
    count_states,
    default_db_path,
    latest_outcomes,
    open_connection,
    point_key,
)
from orchestrator.store.db import open_store_connection
from orchestrator.sweepfile import parse_sweep
from orchestrator.trialsource import trial_plan

pytest_plugins = ["tests.postgres_fixture"]

LATEST = MIGRATIONS[-1].version
SWEEP_YAML = "name: demo\nconfigs:\n  - {budget: 8}\n"
TABLES = {
    "sweeps",
    "sweep_hosts",
    "trials",
    "attempts",
    "points",
    "requests",
    "events",
    "unit_backups",
    "sweep_workloads",
    "sweep_claims",
}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A SQLite store file (for what only a file has)."""
    return tmp_path / "store.db"


@pytest.fixture(params=["sqlite", "postgres"])
def target(request: pytest.FixtureRequest, db_path: Path) -> str:
    """What ``--db`` takes: the SQLite file's path, or a new PostgreSQL database's URL."""
    if request.param == "sqlite":
        return str(db_path)
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def store(target: str) -> AsyncIterator[Store]:
    opened = await Store.open(target)
    yield opened
    await opened.close()


class Raw:
    """Plain SQL on the store's database beside the Store: the tests' own look at what is
    stored, through the database's own driver."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.postgres = target.startswith("postgresql://")

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if self.postgres:
            with psycopg.connect(self.target, autocommit=True) as conn:
                return list(conn.execute(sql).fetchall())
        conn = sqlite3.connect(self.target)
        try:
            return list(conn.execute(sql).fetchall())
        finally:
            conn.close()

    def execute(self, *statements: str) -> None:
        if self.postgres:
            with psycopg.connect(self.target, autocommit=True) as conn:
                for statement in statements:
                    conn.execute(statement)
            return
        conn = sqlite3.connect(self.target, isolation_level=None)
        try:
            for statement in statements:
                conn.execute(statement)
        finally:
            conn.close()

    def version(self) -> int:
        if self.postgres:
            if not self.rows("SELECT 1 FROM pg_tables WHERE tablename = 'store_schema'"):
                return 0
            return int(self.rows("SELECT version FROM store_schema")[0][0])
        return int(self.rows("PRAGMA user_version")[0][0])

    def set_version(self, version: int) -> None:
        if self.postgres:
            self.execute(
                "CREATE TABLE store_schema (id INTEGER PRIMARY KEY, version INTEGER NOT NULL)",
                f"INSERT INTO store_schema VALUES (1, {version})",
            )
        else:
            self.execute(f"PRAGMA user_version = {version}")

    def tables(self) -> set[str]:
        if self.postgres:
            found = self.rows("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        else:
            found = self.rows("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {row[0] for row in found}


@pytest.fixture
def raw(target: str) -> Raw:
    return Raw(target)


def _requests(count: int, *, warmup: int = 0) -> list[StoredRequest]:
    return [
        StoredRequest(
            sent_at=1000.0 + i,
            ttft_s=0.05 + i / 1000,
            e2e_s=1.5,
            prompt_tokens=60,
            completion_tokens=128,
            finish_reason="length",
            warmup=i < warmup,
            extra={"chunk_times": [0.05, 0.06]},
        )
        for i in range(count)
    ]


def _throughput(context: int, concurrency: int, **metrics: float) -> NewPoint:
    return NewPoint(
        kind="throughput",
        context=context,
        concurrency=concurrency,
        metrics={"output_tok_s": 100.0, **metrics},
        accept_len={"journal": {"mean": 3.2, "count": 12}},
        quality={"truncated": 2},
        invocation_id="inv-1",
        cursor_start="s=1;i=1",
        cursor_end="s=1;i=9",
        started_at=1000.0,
        finished_at=1010.0,
    )


async def _sweep_with_trials(store: Store, name: str = "demo") -> tuple[int, list[int]]:
    sweep = (await store.submit_sweep(name, SWEEP_YAML + f"# {name}\n")).sweep
    trials = await store.add_trials(
        sweep.id,
        [
            NewTrial(key="baseline", host="h1", config={}, ordinal=0, is_baseline=True),
            NewTrial(key="b8", host="h1", config={"budget": 8}, ordinal=1),
            NewTrial(key="b16", host="h1", config={"budget": 16}, ordinal=2),
        ],
    )
    return sweep.id, [t.id for t in trials]


# --- schema and opening ---------------------------------------------------------------------


async def test_an_empty_store_is_migrated_to_latest(target: str, raw: Raw) -> None:
    async with await Store.open(target) as store:
        assert not store.closed
    assert raw.version() == LATEST
    assert raw.tables() >= TABLES


async def test_an_empty_file_is_private_and_in_wal_mode(db_path: Path) -> None:
    async with await Store.open(db_path):
        pass
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()
    assert stat.S_IMODE(os.stat(db_path).st_mode) == 0o600


def test_connection_is_durable_and_enforces_foreign_keys(target: str) -> None:
    conn = open_store_connection(target, busy_timeout_s=2.5)
    try:
        if conn.shared:
            assert conn.execute("SHOW synchronous_commit").fetchone()["synchronous_commit"] == "on"
            assert conn.execute("SHOW lock_timeout").fetchone()["lock_timeout"] == "2500ms"
            error: type[Exception] = psycopg.errors.ForeignKeyViolation
        else:
            assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
            assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
            assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 2500
            error = sqlite3.IntegrityError
        with pytest.raises(error):
            conn.execute(
                "INSERT INTO trials (sweep_id, key, host, config, ordinal) "
                "VALUES (99, 'k', 'h', '{}', 0)"
            )
    finally:
        conn.close()


async def test_reopening_keeps_data_and_version(target: str) -> None:
    async with await Store.open(target) as store:
        await store.submit_sweep("demo", SWEEP_YAML)
    async with await Store.open(target) as store:
        assert (await store.get_sweep("demo")).yaml_text == SWEEP_YAML


async def test_newer_schema_is_refused_untouched(target: str, raw: Raw) -> None:
    raw.execute("CREATE TABLE future (x INTEGER)")
    raw.set_version(LATEST + 3)
    with pytest.raises(SchemaTooNew) as caught:
        await Store.open(target)
    assert (caught.value.found, caught.value.known) == (LATEST + 3, LATEST)
    assert "newer" in str(caught.value)
    assert raw.version() == LATEST + 3
    assert "sweeps" not in raw.tables()
    if not raw.postgres:
        assert str(caught.value.path) == target
        assert raw.rows("PRAGMA journal_mode")[0][0] == "delete"


async def test_older_store_migrates_forward_keeping_rows(target: str, raw: Raw) -> None:
    async with await Store.open(target) as store:
        await store.submit_sweep("demo", SWEEP_YAML)
    step = Migration(
        version=LATEST + 1,
        summary="a note per sweep",
        statements=("ALTER TABLE sweeps ADD COLUMN note TEXT NOT NULL DEFAULT 'none'",),
    )
    async with await Store.open(target, migrations=(*MIGRATIONS, step)) as store:
        assert (await store.get_sweep("demo")).yaml_text == SWEEP_YAML
    assert raw.version() == LATEST + 1
    assert raw.rows("SELECT note FROM sweeps") == [("none",)]
    # The original code now refuses the upgraded store instead of misreading it.
    with pytest.raises(SchemaTooNew):
        await Store.open(target)


async def test_failed_migration_leaves_store_at_previous_version(target: str, raw: Raw) -> None:
    async with await Store.open(target):
        pass
    broken = Migration(
        version=LATEST + 1,
        summary="half a step",
        statements=("CREATE TABLE half (x INTEGER)", "THIS IS NOT SQL"),
    )
    with pytest.raises(StoreOpenError):
        await Store.open(target, migrations=(*MIGRATIONS, broken))
    assert raw.version() == LATEST
    assert "half" not in raw.tables()


async def test_two_stores_opening_one_empty_database_at_once_migrate_it_once(
    target: str, raw: Raw
) -> None:
    first, second = await asyncio.gather(Store.open(target), Store.open(target))
    await first.close()
    await second.close()
    assert raw.version() == LATEST


def _write_garbage(path: Path) -> None:
    path.write_bytes(b"this is a sweep yaml, not a database\n" * 200)


async def test_a_file_that_is_not_sqlite_is_refused(db_path: Path) -> None:
    _write_garbage(db_path)
    with pytest.raises(StoreOpenError) as caught:
        await Store.open(db_path)
    assert caught.value.path == db_path


async def test_a_refused_connection_is_an_open_error_that_keeps_the_password(
    postgres_url: str,
) -> None:
    password = postgres_url.split(":")[2].split("@")[0]
    wrong = postgres_url.replace(password, "not-the-password")
    with pytest.raises(StoreOpenError) as caught:
        await Store.open(wrong)
    assert "password authentication failed" in str(caught.value)
    assert "not-the-password" not in str(caught.value) and password not in str(caught.value)
    assert str(caught.value.path).startswith("postgresql://127.0.0.1:")
    nobody = postgres_url.rsplit(":", 1)[0] + ":1/none"  # no server on port 1
    with pytest.raises(StoreOpenError) as caught:
        await Store.open(nobody)
    assert password not in str(caught.value)


async def test_a_lost_database_connection_fails_one_operation_and_the_next_reconnects(
    postgres_url: str,
) -> None:
    async with await Store.open(postgres_url) as store:
        await store.submit_sweep("demo", SWEEP_YAML)
        Raw(postgres_url).rows(  # what a server restart or a dropped network does to it
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'orchestrator' AND pid != pg_backend_pid()"
        )
        with pytest.raises(StoreUnavailable) as caught:
            await store.list_sweeps()
        assert str(caught.value).startswith(str(store.path))
        assert [s.name for s in await store.list_sweeps()] == ["demo"]


async def test_closed_store_refuses_work(target: str) -> None:
    store = await Store.open(target)
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreClosed):
        await store.list_sweeps()


async def test_the_store_names_itself_without_the_password(target: str) -> None:
    async with await Store.open(target) as store:
        shown = str(store.path)
    if target.startswith("postgresql://"):
        port, database = target.rsplit(":", 1)[1].split("/")
        assert shown == f"postgresql://127.0.0.1:{port}/{database}"
    else:
        assert shown == target


def test_default_db_path_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    path = default_db_path()
    assert path == tmp_path / "state" / "orchestrator" / "orchestrator.db"
    assert path.parent.is_dir()
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home/.local/state/orchestrator/orchestrator.db"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_db_path() == tmp_path / "home/.local/state/orchestrator/orchestrator.db"


# --- sweeps ---------------------------------------------------------------------------------


async def test_same_name_and_content_is_not_submitted_twice(store: Store) -> None:
    first = await store.submit_sweep("demo", SWEEP_YAML, priority=3, source_path="/x/demo.yaml")
    again = await store.submit_sweep("demo", SWEEP_YAML, priority=3)
    assert first.created and not again.created
    assert again.sweep == first.sweep
    assert first.sweep.state == "queued" and first.sweep.priority == 3
    assert first.sweep.source_path == "/x/demo.yaml"
    assert len(first.sweep.content_hash) == 64
    assert len(await store.list_sweeps()) == 1


async def test_same_name_other_content_conflicts_unless_replaced(store: Store) -> None:
    old = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
    with pytest.raises(SweepNameConflict) as caught:
        await store.submit_sweep("demo", SWEEP_YAML + "# changed\n")
    assert caught.value.existing == old and "--replace" in str(caught.value)

    trial = (await store.add_trials(old.id, [NewTrial("b8", "h1", {"budget": 8}, 0)]))[0]
    attempt = await store.start_attempt(trial.id)
    await store.record_point(attempt.id, _throughput(60, 1), _requests(3))

    new = await store.submit_sweep("demo", SWEEP_YAML + "# changed\n", replace=True)
    assert new.created and new.sweep.id != old.id
    kept = await store.get_sweep(old.id)
    assert kept.replaced_by == new.sweep.id and kept.replaced_at is not None
    assert (await store.get_sweep("demo")).id == new.sweep.id
    assert [s.id for s in await store.list_sweeps()] == [new.sweep.id]
    assert {s.id for s in await store.list_sweeps(include_replaced=True)} == {old.id, new.sweep.id}
    old_results = await store.sweep_results(old.id)
    assert old_results["trials"][0]["points"][0]["context"] == 60
    # Replacing with content identical to the current sweep is a plain resubmission.
    same = await store.submit_sweep("demo", SWEEP_YAML + "# changed\n", replace=True)
    assert not same.created and same.sweep.id == new.sweep.id


async def test_sweep_lookup_by_name_or_id(store: Store) -> None:
    named = (await store.submit_sweep("alpha", SWEEP_YAML)).sweep
    digits = (await store.submit_sweep(str(named.id), SWEEP_YAML)).sweep  # a name of digits
    assert (await store.get_sweep(named.id)).name == "alpha"
    assert (await store.get_sweep(str(named.id))).id == digits.id  # the name wins
    assert (await store.get_sweep(str(digits.id))).id == digits.id
    assert await store.find_sweep("nope") is None
    with pytest.raises(SweepNotFound):
        await store.get_sweep("nope")
    with pytest.raises(SweepNotFound):
        await store.sweep_results(999)


async def test_list_sweeps_in_queue_order_and_by_state(store: Store) -> None:
    low = (await store.submit_sweep("low", "a: 1\n", priority=0)).sweep
    high = (await store.submit_sweep("high", "a: 2\n", priority=5)).sweep
    low2 = (await store.submit_sweep("low2", "a: 3\n", priority=0)).sweep
    assert [s.name for s in await store.list_sweeps()] == ["high", "low", "low2"]
    await store.set_sweep_state(high.id, "running")
    assert [s.id for s in await store.list_sweeps(["queued"])] == [low.id, low2.id]
    assert [s.id for s in await store.list_sweeps(states={"running", "done"})] == [high.id]
    with pytest.raises(ValueError):
        await store.list_sweeps(["paused"])  # type: ignore[list-item]


async def test_sweep_state_stamps(store: Store) -> None:
    sweep = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
    running = await store.set_sweep_state(sweep.id, "running")
    assert running.started_at is not None and running.finished_at is None
    resumed = await store.set_sweep_state(sweep.id, "running")
    assert resumed.started_at == running.started_at
    done = await store.set_sweep_state(sweep.id, "done", summary={"trials": 3, "failed": 0})
    assert done.finished_at is not None and done.summary == {"trials": 3, "failed": 0}
    with pytest.raises(SweepNotFound):
        await store.set_sweep_state(12345, "done")


# --- hosts, trials, attempts ----------------------------------------------------------------


async def test_hosts_are_idempotent_and_can_be_set_aside(store: Store) -> None:
    sweep = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
    hosts = [HostEntry("h1", "rtxpro6000"), HostEntry("h2", "rtxpro6000")]
    await store.add_hosts(sweep.id, hosts)
    again = await store.add_hosts(sweep.id, hosts)
    assert [h.name for h in again] == ["h1", "h2"]
    await store.set_host_aside(sweep.id, "h2", "preflight: flag --foo unknown")
    reasons = {h.name: h.set_aside_reason for h in await store.hosts(sweep.id)}
    assert reasons == {"h1": None, "h2": "preflight: flag --foo unknown"}
    with pytest.raises(KeyError):
        await store.set_host_aside(sweep.id, "h9", "no such host")


async def test_add_trials_is_idempotent(store: Store) -> None:
    sweep_id, first_ids = await _sweep_with_trials(store)
    again = await store.add_trials(
        sweep_id,
        [
            NewTrial(key="b8", host="h1", config={"budget": 8}, ordinal=1),
            NewTrial(key="b8", host="h2", config={"budget": 8}, ordinal=1),
        ],
    )
    assert [t.id for t in again if t.host == "h1"] == first_ids
    assert [(t.key, t.host) for t in again] == [
        ("baseline", "h1"),
        ("b8", "h1"),
        ("b8", "h2"),
        ("b16", "h1"),
    ]
    assert again[0].is_baseline and again[1].config == {"budget": 8}


async def test_attempts_are_numbered_and_never_overwritten(store: Store) -> None:
    sweep_id, (baseline, b8, b16) = await _sweep_with_trials(store)
    first = await store.start_attempt(b8)
    assert (first.number, first.state, first.started_at is not None) == (1, "running", True)
    failed = await store.finish_attempt(
        first.id, "failed", cause="oom", evidence={"journal": ["CUDA out of memory"]}
    )
    assert failed.state == "failed" and failed.finished_at is not None
    with pytest.raises(AttemptNotRunning):
        await store.finish_attempt(first.id, "done")
    with pytest.raises(AttemptNotRunning):
        await store.record_point(first.id, _throughput(60, 1), _requests(1))
    with pytest.raises(ValueError):
        await store.finish_attempt(first.id, "running")

    retry = await store.start_attempt(b8, invocation_id="inv-2")
    assert (retry.number, retry.invocation_id) == (2, "inv-2")
    assert (await store.get_attempt(first.id)).cause == "oom"
    skipped = await store.skip_trial(b16, "aborted", {"after": "b8"})
    assert (skipped.state, skipped.number, skipped.cause) == ("skipped", 1, "aborted")
    attempts = await store.attempts(sweep_id)
    assert [(a.trial_id, a.number) for a in attempts] == [(b8, 1), (b8, 2), (b16, 1)]
    assert baseline not in {a.trial_id for a in attempts}


async def test_resume_keeps_committed_points(store: Store) -> None:
    sweep_id, (_, b8, _) = await _sweep_with_trials(store)
    attempt = await store.start_attempt(b8)
    await store.set_attempt_invocation(attempt.id, "inv-a")
    await store.record_point(attempt.id, _throughput(60, 1), _requests(4))
    await store.record_point(attempt.id, _throughput(60, 8), _requests(4))

    unfinished = await store.running_attempts(sweep_id)
    assert len(unfinished) == 1
    assert unfinished[0].trial.key == "b8" and unfinished[0].attempt.id == attempt.id
    assert unfinished[0].committed_point_keys == {
        point_key("throughput", context=60, concurrency=1),
        point_key("throughput", context=60, concurrency=8),
    }
    resumed = await store.resume_attempt(attempt.id, invocation_id="inv-b")
    assert (resumed.resumes, resumed.invocation_id, resumed.number) == (1, "inv-b", 1)
    await store.finish_attempt(attempt.id, "done")
    assert await store.running_attempts(sweep_id) == []
    with pytest.raises(AttemptNotRunning):
        await store.resume_attempt(attempt.id)


# --- points ---------------------------------------------------------------------------------


async def test_point_and_requests_round_trip(store: Store) -> None:
    _, (_, b8, _) = await _sweep_with_trials(store)
    attempt = await store.start_attempt(b8)
    sent = _requests(5, warmup=2)
    point_id = await store.record_point(
        attempt.id, _throughput(1024, 8, ttft_p99_s=float("nan")), sent
    )
    [point] = await store.points(attempt_id=attempt.id)
    assert point.id == point_id and point.key == "throughput/context=1024/concurrency=8"
    assert point.metrics == {"output_tok_s": 100.0, "ttft_p99_s": None}  # NaN has no JSON
    assert point.accept_len == {"journal": {"mean": 3.2, "count": 12}}
    assert point.quality == {"truncated": 2}
    assert (point.cursor_start, point.cursor_end, point.invocation_id) == (
        "s=1;i=1",
        "s=1;i=9",
        "inv-1",
    )
    assert await store.requests(point_id) == sent
    assert [r.warmup for r in await store.requests(point_id)] == [True, True, False, False, False]


async def test_a_point_is_never_stored_twice(store: Store) -> None:
    sweep_id, (_, b8, b16) = await _sweep_with_trials(store)
    attempt = await store.start_attempt(b8)
    first = await store.record_point(attempt.id, _throughput(60, 1), _requests(2))
    with pytest.raises(PointAlreadyRecorded) as caught:
        await store.record_point(attempt.id, _throughput(60, 1), _requests(2))
    assert caught.value.point_id == first
    coding = NewPoint(kind="coding", problem="fib", metrics={"outcome": "pass"})
    await store.record_point(attempt.id, coding, _requests(1))
    assert await store.committed_point_keys(attempt.id) == {
        "throughput/context=60/concurrency=1",
        "coding/fib",
    }
    # The same key in another attempt (a retry) is a different point.
    other = await store.start_attempt(b16)
    await store.record_point(other.id, _throughput(60, 1), _requests(2))
    assert len(await store.points(sweep_id=sweep_id)) == 3


def test_point_keys_reject_incoherent_points() -> None:
    with pytest.raises(ValueError):
        NewPoint(kind="throughput", context=60, metrics={})
    with pytest.raises(ValueError):
        NewPoint(kind="coding", metrics={})
    with pytest.raises(ValueError):
        NewPoint(kind="throughput", context=60, concurrency=1, problem="fib", metrics={})


# --- events and backups ---------------------------------------------------------------------


async def test_events_filtered_and_in_order(store: Store) -> None:
    sweep_id, (_, b8, _) = await _sweep_with_trials(store)
    attempt = await store.start_attempt(b8)
    stopped = await store.add_event(
        sweep_id, "unit.stopped", host="h1", ts=10.0, fields={"took_s": 4.2}
    )
    await store.add_event(sweep_id, "memory.released", host="h1", attempt_id=attempt.id, ts=12.0)
    await store.add_event(sweep_id, "unit.stopped", host="h2", ts=11.0)
    all_events = await store.events(sweep_id)
    assert [(e.kind, e.host, e.ts) for e in all_events] == [
        ("unit.stopped", "h1", 10.0),
        ("unit.stopped", "h2", 11.0),
        ("memory.released", "h1", 12.0),
    ]
    assert stopped.fields == {"took_s": 4.2} and all_events[2].fields == {}
    assert [e.host for e in await store.events(sweep_id, kinds=["unit.stopped"])] == ["h1", "h2"]
    assert [e.kind for e in await store.events(sweep_id, host="h1")] == [
        "unit.stopped",
        "memory.released",
    ]
    assert [e.ts for e in await store.events(sweep_id, attempt_id=attempt.id)] == [12.0]
    assert len(await store.events(sweep_id, after_id=stopped.id)) == 2


async def test_unit_backup_is_taken_once_per_sweep(store: Store) -> None:
    sweep_id, _ = await _sweep_with_trials(store)
    unit_file = b"[Service]\nExecStart=/opt/sglang --port 30000\n\xff\xfe not utf-8\n"
    files = {
        "/etc/systemd/system/sglang.service": unit_file,
        "/etc/systemd/system/sglang.service.d/90-orchestrator.conf": None,
    }
    first = await store.save_unit_backup(
        sweep_id, "h1", "sglang.service", files, {"ActiveState": "active"}
    )
    second = await store.save_unit_backup(
        sweep_id, "h1", "sglang.service", {"/x": b"changed by the sweep"}, {"ActiveState": "failed"}
    )
    assert second == first
    assert first.files == files and first.state == {"ActiveState": "active"}
    assert await store.get_unit_backup(sweep_id, "h1", "sglang.service") == first
    assert await store.get_unit_backup(sweep_id, "h2", "sglang.service") is None

    await store.save_unit_backup(sweep_id, "h2", "sglang.service", {}, {"ActiveState": "inactive"})
    assert [b.host for b in await store.pending_restores()] == ["h1", "h2"]
    assert await store.mark_restored(sweep_id, "h1") == 1
    assert [b.host for b in await store.pending_restores(sweep_id=sweep_id)] == ["h2"]
    assert await store.pending_restores(host="h1") == []
    restored = await store.get_unit_backup(sweep_id, "h1", "sglang.service")
    assert restored is not None and restored.restored_at is not None


# --- results --------------------------------------------------------------------------------


async def test_results_document_shape(store: Store) -> None:
    sweep_id, (baseline, b8, _) = await _sweep_with_trials(store)
    await store.set_sweep_state(sweep_id, "running")
    await store.add_hosts(sweep_id, [HostEntry("h1", "b300"), HostEntry("h2", "b300")])
    await store.set_host_aside(sweep_id, "h2", "unreachable")
    base = await store.start_attempt(baseline)
    await store.record_point(base.id, _throughput(60, 1), _requests(2))
    await store.record_point(
        base.id, NewPoint(kind="coding", problem="gcd", metrics={"outcome": "pass"}), _requests(1)
    )
    await store.finish_attempt(base.id, "done")
    first = await store.start_attempt(b8)
    await store.finish_attempt(first.id, "failed", cause="invalid-config", evidence={"line": "x"})
    await store.start_attempt(b8)

    results = await store.sweep_results("demo")
    json.dumps(results, allow_nan=False)  # a plain JSON document
    assert {"sweep", "id", "state", "trials"} <= results.keys()
    assert (results["sweep"], results["id"], results["state"]) == ("demo", sweep_id, "running")
    entries = [(t["key"], t["attempt"], t["state"], t["cause"]) for t in results["trials"]]
    assert entries == [
        ("baseline", 1, "done", None),
        ("b8", 1, "failed", "invalid-config"),
        ("b8", 2, "running", None),
        ("b16", None, "queued", None),
    ]
    for entry in results["trials"]:
        assert {"key", "host", "config", "state", "cause", "attempt", "points"} <= entry.keys()
    assert results["trials"][1]["config"] == {"budget": 8}
    points = results["trials"][0]["points"]
    assert [p["kind"] for p in points] == ["throughput", "coding"]
    required = {"kind", "context", "concurrency", "problem", "metrics", "accept_len"}
    assert all(required <= point.keys() for point in points)
    assert (points[0]["context"], points[0]["concurrency"], points[0]["problem"]) == (60, 1, None)
    assert points[0]["metrics"]["output_tok_s"] == 100.0
    assert (points[1]["problem"], points[1]["accept_len"]) == ("gcd", None)
    assert results["trials"][3]["points"] == []
    assert results["hosts"] == [
        {"name": "h1", "type": "b300", "set_aside": None},
        {"name": "h2", "type": "b300", "set_aside": "unreachable"},
    ]


# --- concurrency and the event loop ---------------------------------------------------------


async def test_many_tasks_write_through_one_store(store: Store) -> None:
    sweep_id = (await store.submit_sweep("demo", SWEEP_YAML)).sweep.id
    trials = await store.add_trials(
        sweep_id, [NewTrial(f"t{i}", "h1", {"i": i}, i) for i in range(20)]
    )

    async def one_trial(trial_id: int) -> None:
        attempt = await store.start_attempt(trial_id)
        for concurrency in (1, 2, 4, 8, 16):
            await store.add_event(sweep_id, "point.started", attempt_id=attempt.id)
            await store.record_point(attempt.id, _throughput(60, concurrency), _requests(10))
        await store.finish_attempt(attempt.id, "done")

    async def submit(n: int) -> bool:
        return (await store.submit_sweep("same", "same: true\n")).created

    outcomes = await asyncio.gather(
        *(one_trial(t.id) for t in trials), *(submit(n) for n in range(10))
    )
    assert outcomes[len(trials) :].count(True) == 1  # submitted once, recognised nine times
    points = await store.points(sweep_id=sweep_id)
    assert len(points) == 100
    assert [len(await store.requests(p.id)) for p in points] == [10] * 100
    assert len(await store.events(sweep_id)) == 100
    assert {a.state for a in await store.attempts(sweep_id)} == {"done"}


async def test_event_loop_stays_responsive_while_writing(store: Store) -> None:
    """Heavy commits run on the worker thread: the loop keeps ticking on time meanwhile."""
    _, (_, b8, _) = await _sweep_with_trials(store)
    attempt = await store.start_attempt(b8)
    big = _requests(20_000)
    ticking = True
    ticks_during_writes = 0
    writing = False

    async def ticker() -> None:
        nonlocal ticks_during_writes
        while ticking:
            await asyncio.sleep(0.005)
            ticks_during_writes += writing

    tick_task = asyncio.create_task(ticker())
    await asyncio.sleep(0.02)
    writes = 4
    for concurrency in range(1, writes + 1):
        writing = True
        await store.record_point(attempt.id, _throughput(8192, concurrency), big)
        writing = False
    ticking = False
    await tick_task
    # A write that blocked the loop would let the ticker run at most once per write (between
    # them); counted rather than timed, so a loaded machine cannot fail it.
    assert ticks_during_writes > 3 * writes, ticks_during_writes


@contextlib.contextmanager
def _write_lock_held(target: str) -> Iterator[None]:
    """Another connection holding what a write and an opening must wait for: SQLite's one
    write lock; PostgreSQL's sweeps table and the schema's migration lock."""
    if target.startswith("postgresql://"):
        with psycopg.connect(target) as holder:  # a transaction, open until the block ends
            holder.execute("LOCK TABLE sweeps IN EXCLUSIVE MODE")
            holder.execute("SELECT pg_advisory_xact_lock(hashtext('orchestrator:schema'))")
            yield
            holder.rollback()
        return
    holder = sqlite3.connect(target, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


async def test_lock_held_elsewhere_surfaces_as_store_busy(target: str) -> None:
    async with await Store.open(target, busy_timeout_s=0.2) as store:
        with _write_lock_held(target):
            started = time.monotonic()
            with pytest.raises(StoreBusy) as caught:
                await store.submit_sweep("demo", SWEEP_YAML)
            assert time.monotonic() - started >= 0.15
            assert caught.value.path == store.path and caught.value.timeout_s == 0.2
            with pytest.raises(StoreBusy):  # opening migrates under the same lock
                await Store.open(target, busy_timeout_s=0.2)
        assert (await store.submit_sweep("demo", SWEEP_YAML)).created


def test_connections_opening_a_new_file_at_once_all_open(tmp_path: Path) -> None:
    """Six connections released together on a new SQLite file: each asks to switch it to WAL,
    which takes an exclusive lock, and SQLite answers one of two such askers "database is
    locked" at once rather than wait (about one round in twenty did before the switch was
    retried). Every one must open, as daemons started together must."""
    failures: list[BaseException] = []
    for round_ in range(200):
        target = tmp_path / f"{round_}.db"
        release = threading.Barrier(6)

        def opener(target: Path = target, release: threading.Barrier = release) -> None:
            release.wait()
            try:
                open_store_connection(target).close()
            except BaseException as exc:  # collected, and shown by the assertion
                failures.append(exc)

        threads = [threading.Thread(target=opener) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []


async def test_cancelled_write_is_all_or_nothing(store: Store) -> None:
    _, (_, b8, _) = await _sweep_with_trials(store)
    attempt = await store.start_attempt(b8)
    tasks = [
        asyncio.create_task(store.record_point(attempt.id, _throughput(60, c), _requests(200)))
        for c in range(1, 21)
    ]
    await asyncio.sleep(0.01)
    for task in tasks[::2]:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.sleep(0)
    points = await store.points(attempt_id=attempt.id)
    assert points, "some writes completed"
    assert [len(await store.requests(p.id)) for p in points] == [200] * len(points)


def test_store_file_mode_stays_private_with_wal(db_path: Path) -> None:
    conn = open_connection(db_path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO sweeps (name, content_hash, yaml_text, submitted_at) "
            "VALUES ('x', 'h', 'y', 0)"
        )
        conn.execute("COMMIT")
        wal = Path(f"{db_path}-wal")
        assert wal.exists()
        assert stat.S_IMODE(os.stat(wal).st_mode) == 0o600
    finally:
        conn.close()


# --- typed results: encode, decode, latest state --------------------------------------------

PLAN = TrialPlan(
    cells=(MatrixCell(60, 1), MatrixCell(60, 4), MatrixCell(1024, 1)),
    rounds=3,
    problems=("fib", "gcd"),
    coding_temperature=0.0,
    model="kimi-k2.6",
)


def _typed_throughput() -> ThroughputPoint:
    return ThroughputPoint(
        context=60,
        concurrency=4,
        metrics=ThroughputMetrics(
            requests=12,
            requests_ok=11,
            errors=1,
            errors_by_kind={"timeout": 1},
            truncated=0,
            output_tok_s=812.5,
            request_decode_tok_s_p50=203.1,
            concurrency_held=3.9,
            loop_lag_p99_s=0.002,
            ttft=LatencySummary(11, 0.05, 0.04, 0.08, 0.09, 0.1),
            e2e=LatencySummary(11, 1.5, 1.4, 1.9, 2.0, 2.1),
            calibration={"filler_words": 40, "measured_tokens": 60, "tolerance": 0},
            extra={"a_metric_of_a_newer_version": 7},
        ),
        accept=AcceptLength(
            value=3.2,
            journal=AcceptEstimate(3.1, 40),
            meta_info=AcceptEstimate(3.2, 11),
            metrics=AcceptEstimate(None, 0, "no /metrics"),
            flags=("disagree",),
        ),
        quality=("errors",),
        provenance=PointProvenance("inv-1", "c-1", "c-2", 1000.0, 1012.5),
    )


def _typed_coding(outcome: Outcome, problem: str) -> CodingPoint:
    return CodingPoint(
        problem=problem,
        outcome=outcome,
        detail="" if outcome is Outcome.PASS else "assert failed",
        finish_reason="stop",
        completion_tokens=300,
        elapsed_s=2.5,
        tokens_per_s=120.0,
        code="def f():\n    return 1\n",
        output="<think>x</think>def f(): ...",
        containment="rlimits",
        provenance=PointProvenance("inv-1", None, None, 1013.0, 1015.5),
    )


async def test_typed_points_and_plan_round_trip_through_sqlite_and_json(store: Store) -> None:
    sweep = (await store.submit_sweep("typed", SWEEP_YAML)).sweep
    (trial,) = await store.add_trials(sweep.id, [NewTrial("b8", "h1", {"budget": 8}, 0, plan=PLAN)])
    assert trial.plan == PLAN
    attempt = await store.start_attempt(trial.id)
    written = [
        _typed_throughput(),
        _typed_coding(Outcome.PASS, "fib"),
        _typed_coding(Outcome.TRUNCATED, "gcd"),
    ]
    for point in written:
        await store.record_point(attempt.id, point, _requests(2))
    await store.finish_attempt(attempt.id, "done")

    results = await store.results("typed")
    (outcome,) = results.trials
    assert outcome.points == tuple(written)
    assert outcome.plan == PLAN and outcome.state == "done" and outcome.label == "budget=8"
    assert outcome.coding[1].scored is False and outcome.coding[0].passed
    document = json.loads(json.dumps(results.to_json(), allow_nan=False))
    assert SweepResults.from_json(document) == results
    assert document == await store.sweep_results("typed")
    # The stored row keeps the documented metric names (scripts read them).
    (row, *_) = await store.points(attempt_id=attempt.id)
    assert row.metrics["output_tok_s"] == 812.5 and row.metrics["ttft_p99_s"] == 0.09
    assert row.accept_len is not None and row.accept_len["accept_len_meta_info"] == 3.2


async def test_trial_plan_column_is_added_to_an_older_store(target: str) -> None:
    """A version-1 store gains the plan column; its trials read back with no plan."""
    conn = open_store_connection(target, migrations=MIGRATIONS[:1])
    conn.execute(
        "INSERT INTO sweeps (name, content_hash, yaml_text, submitted_at) "
        "VALUES ('old', 'h', 'name: old', 1.0)"
    )
    conn.execute(
        "INSERT INTO trials (sweep_id, key, host, config, ordinal) VALUES (1, 'k', 'h1', '{}', 0)"
    )
    conn.close()
    async with await Store.open(target) as store:
        (trial,) = await store.trials(1)
        assert trial.plan is None
        assert [t.state for t in (await store.results("old")).trials] == ["queued"]


async def test_latest_state_and_cheap_counts_agree(store: Store) -> None:
    sweep_id, (baseline, b8, _) = await _sweep_with_trials(store)
    await store.set_sweep_state(sweep_id, "running")
    done = await store.start_attempt(baseline)
    await store.finish_attempt(done.id, "done")
    first = await store.start_attempt(b8)
    await store.finish_attempt(first.id, "failed", cause="oom")
    await store.start_attempt(b8)

    results = await store.results(sweep_id)
    assert [(t.key, t.attempt) for t in results.latest()] == [
        ("baseline", 1),
        ("b8", 2),
        ("b16", None),
    ]
    assert results.state_counts() == {"done": 1, "queued": 1, "running": 1}
    states = await store.trial_states(sweep_id)
    assert count_states(states.values()) == results.state_counts()
    assert latest_outcomes(reversed(results.trials))[1].attempt == 2  # order does not matter


async def test_never_started_trials_of_a_cancelled_sweep_are_cancelled(store: Store) -> None:
    sweep_id, (baseline, b8, _) = await _sweep_with_trials(store)
    await store.set_sweep_state(sweep_id, "running")
    attempt = await store.start_attempt(baseline)
    await store.finish_attempt(attempt.id, "done")
    stopped = await store.start_attempt(b8)
    await store.finish_attempt(stopped.id, "failed", cause="stopped")
    assert (await store.trial_states(sweep_id))[("b16", "h1")] == "queued"
    await store.set_sweep_state(sweep_id, "cancelled")

    results = await store.results(sweep_id)
    assert [(t.key, t.state, t.cause) for t in results.latest()] == [
        ("baseline", "done", None),
        ("b8", "failed", "stopped"),
        ("b16", "cancelled", None),
    ]
    assert (await store.trial_states(sweep_id))[("b16", "h1")] == "cancelled"


# --- `orchestrator results`: what a person reads ---------------------------------------------


async def test_results_shows_coding_passes_per_attempt_by_config(
    store: Store, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The store holds outcomes as ``pass``; the table counted ``PASS`` and showed 0/N."""
    _, (_, b8, _) = await _sweep_with_trials(store)
    first = await store.start_attempt(b8)
    await store.record_point(first.id, _typed_coding(Outcome.FAIL, "fib"), [])
    await store.finish_attempt(first.id, "failed", cause="crashed")
    second = await store.start_attempt(b8)
    for outcome, problem in ((Outcome.PASS, "fib"), (Outcome.PASS, "gcd"), (Outcome.FAIL, "lcm")):
        await store.record_point(second.id, _typed_coding(outcome, problem), [])
    await store.finish_attempt(second.id, "done")
    await store.close()

    assert await asyncio.to_thread(main, ["results", "demo", "--db", target]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "budget=8" in line]
    assert len(rows) == 2  # one row per attempt
    assert "coding 0/1 pass" in rows[0] and "failed" in rows[0]
    assert "coding 2/3 pass" in rows[1] and "done" in rows[1]
    assert "b8" not in out.replace("budget=8", "")  # named by knob values, not the trial key
    assert "baseline" in out


def test_trial_plan_is_what_the_sweep_file_asks_each_trial_to_measure(tmp_path: Path) -> None:
    text = (Path(orchestrator.__file__).parent / "data" / "demo.yaml").read_text()
    plan = trial_plan(parse_sweep(text, "demo.yaml"))
    assert plan.cells == tuple(MatrixCell(c, n) for c in (60, 1024) for n in (1, 4))
    assert plan.rounds == 8 and plan.total_points == 4 + 3
    assert plan.problems == ("is_palindrome", "fib", "gcd")
    assert (plan.coding_temperature, plan.model) == (0.0, "kimi-k2.6")
    # A problem file that cannot be read: the trials fail on it when they measure, as before.
    missing = text.replace("problems: builtin", f"problems: {tmp_path / 'gone.jsonl'}")
    assert trial_plan(parse_sweep(missing, "demo.yaml")).problems == ()


# --- claims: which daemon runs which sweep --------------------------------------------------

D1 = DaemonIdentity("d1", "ctl-1 (pid 11)")
D2 = DaemonIdentity("d2", "ctl-2 (pid 22)")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_sweep_is_claimed_by_one_daemon_until_its_claim_expires(target: str) -> None:
    clock = Clock()
    async with await Store.open(target, clock=clock) as store:
        sweep = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
        first = await store.claim_sweep(sweep.id, D1, expiry_s=10)
        assert first.claim is not None and first.holder is None
        assert (first.claim.daemon, first.claim.generation) == ("ctl-1 (pid 11)", 1)
        refused = await store.claim_sweep(sweep.id, D2, expiry_s=10)
        assert refused.claim is None and refused.holder == first.claim
        clock.now += 8
        (renewed,) = await store.renew_claims("d1", expiry_s=10)
        assert renewed.expires_at == clock.now + 10 and renewed.claimed_at == 1000.0
        clock.now += 9  # within the renewed expiry
        assert (await store.claim_sweep(sweep.id, D2, expiry_s=10)).holder is not None
        clock.now += 2  # past it: d1 died, or lost the store
        taken = await store.claim_sweep(sweep.id, D2, expiry_s=10)
        assert taken.claim is not None and taken.claim.daemon_id == "d2"
        assert (taken.claim.generation, taken.claim.took_over_from) == (2, "ctl-1 (pid 11)")
        assert await store.renew_claims("d1", expiry_s=10) == []  # d1 must stop it
        (again,) = await store.renew_claims("d2", expiry_s=10)
        assert again.generation == 2


async def test_a_released_claim_is_free_at_once(target: str) -> None:
    clock = Clock()
    async with await Store.open(target, clock=clock) as store:
        sweep = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
        await store.claim_sweep(sweep.id, D1, expiry_s=60)
        assert await store.release_claim(sweep.id, "d1")
        assert not await store.release_claim(sweep.id, "d1")
        taken = await store.claim_sweep(sweep.id, D2, expiry_s=60)
        assert taken.claim is not None
        assert (taken.claim.generation, taken.claim.took_over_from) == (2, None)
        (claim,) = await store.sweep_claims()
        assert claim.daemon_id == "d2" and claim.live(clock.now)


async def test_only_a_queued_or_running_sweep_is_claimed(target: str) -> None:
    async with await Store.open(target) as store:
        done = (await store.submit_sweep("done", "a: 1\n")).sweep
        await store.set_sweep_state(done.id, "done")
        paused = (await store.submit_sweep("paused", "a: 2\n")).sweep
        await store.set_sweep_state(paused.id, "interrupted")
        old = (await store.submit_sweep("old", "a: 3\n")).sweep
        await store.submit_sweep("old", "a: 4\n", replace=True)
        for sweep_id in (done.id, paused.id, old.id, 999):
            assert await store.claim_sweep(sweep_id, D1, expiry_s=60) == ClaimOutcome()
        # A foreground run continues an interrupted sweep: it claims one too.
        assert (await store.claim_sweep(paused.id, D1, expiry_s=60, interrupted=True)).claim
        running = (await store.submit_sweep("running", "a: 5\n")).sweep
        await store.set_sweep_state(running.id, "running")  # its daemon gone: continued
        assert (await store.claim_sweep(running.id, D1, expiry_s=60)).claim is not None


async def test_a_stop_is_asked_of_the_daemon_that_holds_the_sweep(target: str) -> None:
    clock = Clock()
    async with await Store.open(target, clock=clock) as store:
        sweep = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
        assert await store.request_stop(sweep.id, "cancel") is None  # nobody runs it
        await store.claim_sweep(sweep.id, D1, expiry_s=10)
        asked = await store.request_stop(sweep.id, "cancel")
        assert asked is not None and asked.daemon_id == "d1"
        (mine,) = await store.renew_claims("d1", expiry_s=10)
        assert mine.stop_requested == "cancel"
        clock.now += 11
        assert await store.request_stop(sweep.id, "cancel") is None  # expired: nobody


async def test_daemons_racing_for_the_queue_claim_each_sweep_once(target: str) -> None:
    """Two daemons, each its own connection, claim the same sweeps at the same moments."""
    async with await Store.open(target) as one, await Store.open(target) as two:
        sweeps = [(await one.submit_sweep(f"s{i}", f"a: {i}\n")).sweep.id for i in range(12)]

        async def claims(store: Store, daemon: DaemonIdentity) -> list[int]:
            won = []
            for sweep_id in sweeps:
                if (await store.claim_sweep(sweep_id, daemon, expiry_s=60)).claim is not None:
                    won.append(sweep_id)
            return won

        first, second = await asyncio.gather(claims(one, D1), claims(two, D2))
        assert sorted(first + second) == sweeps
        held = {claim.sweep_id: claim.daemon_id for claim in await one.sweep_claims()}
        assert held == {**dict.fromkeys(first, "d1"), **dict.fromkeys(second, "d2")}
