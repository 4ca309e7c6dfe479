"""The store's schema as forward migrations, one list for both databases.

A store at version N gets migrations N+1.. applied in one write transaction, so two processes
opening the same empty store at once cannot both migrate it, and a crash mid-migration leaves
it at N. A store newer than :data:`MIGRATIONS` knows is refused before anything is written.
Migrations are append-only: a released step is never edited, a change is a new step.

The statements are SQLite's; PostgreSQL runs the same schema, each statement spelled its way by
:func:`orchestrator.store.postgres.postgres_statement` (identity ids, ``DOUBLE PRECISION``,
JSON checked by a cast), or by a step's own ``postgres`` statements where SQLite needed a
procedure of its own (widening a CHECK). Where the version is kept (``PRAGMA user_version``, a
one-row table) is the connection's business (:mod:`orchestrator.store.connection`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from orchestrator.store.errors import SchemaTooNew
from orchestrator.store.migration import Migration

if TYPE_CHECKING:
    from orchestrator.store.connection import Connection

__all__ = ["MIGRATIONS", "Migration", "check_not_newer", "latest_version", "migrate"]


_V1 = Migration(
    version=1,
    summary="sweeps, hosts, trials, attempts, points, requests, events, unit backups",
    statements=(
        """
        CREATE TABLE sweeps (
            id            INTEGER PRIMARY KEY,
            name          TEXT NOT NULL,
            content_hash  TEXT NOT NULL,
            yaml_text     TEXT NOT NULL,
            source_path   TEXT,
            priority      INTEGER NOT NULL DEFAULT 0,
            submitted_at  REAL NOT NULL,
            state         TEXT NOT NULL DEFAULT 'queued'
                          CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
            started_at    REAL,
            finished_at   REAL,
            summary       TEXT CHECK (summary IS NULL OR json_valid(summary)),
            replaced_by   INTEGER REFERENCES sweeps(id),
            replaced_at   REAL
        ) STRICT
        """,
        # One current (not replaced) sweep per name: the dedup rule, enforced by the file itself.
        "CREATE UNIQUE INDEX sweeps_current_name ON sweeps(name) WHERE replaced_at IS NULL",
        "CREATE INDEX sweeps_queue ON sweeps(state, priority DESC, submitted_at, id)",
        """
        CREATE TABLE sweep_hosts (
            sweep_id          INTEGER NOT NULL REFERENCES sweeps(id),
            name              TEXT NOT NULL,
            type              TEXT NOT NULL,
            set_aside_reason  TEXT,
            PRIMARY KEY (sweep_id, name)
        ) STRICT
        """,
        """
        CREATE TABLE trials (
            id           INTEGER PRIMARY KEY,
            sweep_id     INTEGER NOT NULL REFERENCES sweeps(id),
            key          TEXT NOT NULL,
            host         TEXT NOT NULL,
            config       TEXT NOT NULL CHECK (json_valid(config)),
            ordinal      INTEGER NOT NULL,
            is_baseline  INTEGER NOT NULL DEFAULT 0 CHECK (is_baseline IN (0, 1)),
            UNIQUE (sweep_id, key, host)
        ) STRICT
        """,
        """
        CREATE TABLE attempts (
            id             INTEGER PRIMARY KEY,
            trial_id       INTEGER NOT NULL REFERENCES trials(id),
            number         INTEGER NOT NULL CHECK (number >= 1),
            state          TEXT NOT NULL
                           CHECK (state IN ('queued', 'running', 'done', 'failed', 'skipped')),
            cause          TEXT,
            evidence       TEXT CHECK (evidence IS NULL OR json_valid(evidence)),
            started_at     REAL,
            finished_at    REAL,
            invocation_id  TEXT,
            resumes        INTEGER NOT NULL DEFAULT 0,
            UNIQUE (trial_id, number)
        ) STRICT
        """,
        "CREATE INDEX attempts_state ON attempts(state)",
        """
        CREATE TABLE points (
            id             INTEGER PRIMARY KEY,
            attempt_id     INTEGER NOT NULL REFERENCES attempts(id),
            point_key      TEXT NOT NULL,
            kind           TEXT NOT NULL CHECK (kind IN ('throughput', 'coding')),
            context        INTEGER,
            concurrency    INTEGER,
            problem        TEXT,
            metrics        TEXT NOT NULL CHECK (json_valid(metrics)),
            accept_len     TEXT CHECK (accept_len IS NULL OR json_valid(accept_len)),
            quality        TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(quality)),
            invocation_id  TEXT,
            cursor_start   TEXT,
            cursor_end     TEXT,
            started_at     REAL,
            finished_at    REAL,
            committed_at   REAL NOT NULL,
            UNIQUE (attempt_id, point_key)
        ) STRICT
        """,
        """
        CREATE TABLE requests (
            id                 INTEGER PRIMARY KEY,
            point_id           INTEGER NOT NULL REFERENCES points(id),
            seq                INTEGER NOT NULL,
            sent_at            REAL NOT NULL,
            ttft_s             REAL,
            e2e_s              REAL,
            prompt_tokens      INTEGER,
            completion_tokens  INTEGER,
            finish_reason      TEXT,
            error              TEXT,
            warmup             INTEGER NOT NULL DEFAULT 0 CHECK (warmup IN (0, 1)),
            extra              TEXT CHECK (extra IS NULL OR json_valid(extra)),
            UNIQUE (point_id, seq)
        ) STRICT
        """,
        """
        CREATE TABLE events (
            id          INTEGER PRIMARY KEY,
            sweep_id    INTEGER NOT NULL REFERENCES sweeps(id),
            attempt_id  INTEGER REFERENCES attempts(id),
            host        TEXT,
            kind        TEXT NOT NULL,
            ts          REAL NOT NULL,
            fields      TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(fields))
        ) STRICT
        """,
        "CREATE INDEX events_sweep ON events(sweep_id, ts, id)",
        """
        CREATE TABLE unit_backups (
            id           INTEGER PRIMARY KEY,
            sweep_id     INTEGER NOT NULL REFERENCES sweeps(id),
            host         TEXT NOT NULL,
            unit         TEXT NOT NULL,
            files        TEXT NOT NULL CHECK (json_valid(files)),
            state        TEXT NOT NULL CHECK (json_valid(state)),
            taken_at     REAL NOT NULL,
            restored_at  REAL,
            UNIQUE (sweep_id, host, unit)
        ) STRICT
        """,
        "CREATE INDEX unit_backups_pending ON unit_backups(restored_at) WHERE restored_at IS NULL",
    ),
)

_V2 = Migration(
    version=2,
    summary="each trial's plan (cells, rounds, coding problems), fixed when it is planned",
    statements=(
        # NULL for trials planned before this version: readers fall back to their points.
        "ALTER TABLE trials ADD COLUMN plan TEXT CHECK (plan IS NULL OR json_valid(plan))",
    ),
)

_V3 = Migration(
    version=3,
    summary="attempts may end cancelled (a cancelled sweep's in-flight and never-started trials)",
    # SQLite cannot ALTER a CHECK constraint, and rebuilding `attempts` would delete the rows
    # that points and events reference (foreign keys are on and cannot be turned off inside
    # the migration's transaction). Widening a CHECK changes no stored row, so the schema text
    # is edited in place: the procedure sqlite.org/lang_altertable.html ("Making Other Kinds Of
    # Table Schema Changes") gives for CHECK constraints. RESET reloads this connection's schema.
    statements=(
        "PRAGMA writable_schema = ON",
        "UPDATE sqlite_schema SET sql = replace(sql, '''skipped'')', "
        "'''skipped'', ''cancelled'')') WHERE type = 'table' AND name = 'attempts'",
        "PRAGMA writable_schema = RESET",
    ),
    # PostgreSQL names a column's CHECK <table>_<column>_check, and alters it in place.
    postgres=(
        "ALTER TABLE attempts DROP CONSTRAINT attempts_state_check",
        "ALTER TABLE attempts ADD CONSTRAINT attempts_state_check CHECK (state IN "
        "('queued', 'running', 'done', 'failed', 'skipped', 'cancelled'))",
    ),
)

_V4 = Migration(
    version=4,
    summary="the workload files (traffic samples) each sweep carries, with their sha256",
    statements=(
        """
        CREATE TABLE sweep_workloads (
            sweep_id      INTEGER NOT NULL REFERENCES sweeps(id),
            path          TEXT NOT NULL,
            content       TEXT NOT NULL,
            content_hash  TEXT NOT NULL,
            PRIMARY KEY (sweep_id, path)
        ) STRICT
        """,
    ),
)

_V5 = Migration(
    version=5,
    summary="throughput points at an open-loop rate and on a named workload",
    # NULL for every point written before: a closed-loop point on the synthetic workload.
    statements=(
        "ALTER TABLE points ADD COLUMN rate REAL",
        "ALTER TABLE points ADD COLUMN workload TEXT",
    ),
)

_V6 = Migration(
    version=6,
    summary="a unit backup's drop-in slot and adopt's mark in their own columns",
    # NULL for backups written before: their state holds the same under reserved keys
    # (__dropin_path, __dropin_dir_existed, __dropin_mode, __adopted), which readers take out.
    statements=(
        "ALTER TABLE unit_backups ADD COLUMN dropin TEXT "
        "CHECK (dropin IS NULL OR json_valid(dropin))",
        "ALTER TABLE unit_backups ADD COLUMN adopted TEXT",
    ),
)

_V7 = Migration(
    version=7,
    summary="sweeps may be interrupted (a foreground run stopped by Ctrl-C: resumable)",
    # As _V3: widening a CHECK changes no stored row, so the schema text is edited in place.
    statements=(
        "PRAGMA writable_schema = ON",
        "UPDATE sqlite_schema SET sql = replace(sql, '''running'', ''done''', "
        "'''running'', ''interrupted'', ''done''') WHERE type = 'table' AND name = 'sweeps'",
        "PRAGMA writable_schema = RESET",
    ),
    postgres=(
        "ALTER TABLE sweeps DROP CONSTRAINT sweeps_state_check",
        "ALTER TABLE sweeps ADD CONSTRAINT sweeps_state_check CHECK (state IN "
        "('queued', 'running', 'interrupted', 'done', 'failed', 'cancelled'))",
    ),
)

_V8 = Migration(
    version=8,
    summary="which daemon runs each sweep: its claim, renewed by a heartbeat (a team's service)",
    # One row per sweep ever claimed; a released or expired claim may be taken by another
    # daemon, which raises the generation (how many daemons have run the sweep, in turn).
    statements=(
        """
        CREATE TABLE sweep_claims (
            sweep_id        INTEGER NOT NULL REFERENCES sweeps(id),
            daemon_id       TEXT NOT NULL,
            daemon          TEXT NOT NULL,
            generation      INTEGER NOT NULL CHECK (generation >= 1),
            claimed_at      REAL NOT NULL,
            renewed_at      REAL NOT NULL,
            expires_at      REAL NOT NULL,
            released_at     REAL,
            stop_requested  TEXT,
            took_over_from  TEXT,
            PRIMARY KEY (sweep_id)
        ) STRICT
        """,
        "CREATE INDEX sweep_claims_daemon ON sweep_claims(daemon_id) WHERE released_at IS NULL",
    ),
)

MIGRATIONS: tuple[Migration, ...] = (_V1, _V2, _V3, _V4, _V5, _V6, _V7, _V8)


def latest_version(migrations: Sequence[Migration] = MIGRATIONS) -> int:
    return migrations[-1].version if migrations else 0


def check_not_newer(conn: Connection, migrations: Sequence[Migration] = MIGRATIONS) -> None:
    found, known = conn.schema_version(), latest_version(migrations)
    if found > known:
        raise SchemaTooNew(conn.location, found, known)


def migrate(conn: Connection, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the store to the latest version in one transaction; returns the version reached.

    The transaction is ours (the connection is in autocommit mode between operations). The
    version is re-read under the write lock, so a concurrent opener's work is not redone.
    """
    for index, step in enumerate(migrations, start=1):
        if step.version != index:
            raise ValueError(f"migration {index} is numbered {step.version}")
    with conn.schema_lock():
        conn.begin_write()
        try:
            check_not_newer(conn, migrations)
            current = conn.schema_version()
            for step in migrations[current:]:
                for statement in conn.migration_statements(step):
                    conn.execute(statement)
                conn.set_schema_version(step.version)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    return conn.schema_version()
