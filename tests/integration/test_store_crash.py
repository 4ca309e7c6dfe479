"""The store under real processes: SIGKILL between and during writes, writers in parallel.

The writers are this file run as a script (``python test_store_crash.py crash|concurrent ...``),
so the process that is killed is a real orchestrator-store client, not a thread in the test.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.store import MIGRATIONS, NewPoint, NewTrial, Store, StoredRequest

CRASH_YAML = "name: crash\nconfigs:\n  - {budget: 8}\n"
SHARED_YAML = "name: shared\nconfigs:\n  - {budget: 4}\n"
CRASH_POINTS = 400
SUBPROCESS_TIMEOUT_S = 60.0


def _request_count(index: int) -> int:
    """Varied sizes so kills land inside transactions of different lengths."""
    return 40 + (index * 37) % 300


def _requests(count: int) -> list[StoredRequest]:
    return [
        StoredRequest(
            sent_at=time.time(),
            ttft_s=0.01,
            e2e_s=0.2,
            prompt_tokens=60,
            completion_tokens=64,
            finish_reason="stop",
            extra={"i": i},
        )
        for i in range(count)
    ]


# --- the writer processes -------------------------------------------------------------------


async def crash_writer(db: Path, points: int) -> None:
    """Resume-style writer: skip what is committed, record the rest, print each commit."""
    async with await Store.open(db) as store:
        sweep = (await store.submit_sweep("crash", CRASH_YAML)).sweep
        [trial] = await store.add_trials(sweep.id, [NewTrial("b8", "h1", {"budget": 8}, 0)])
        if any(a.state == "done" for a in await store.attempts(sweep.id)):
            print("finished", flush=True)
            return
        unfinished = await store.running_attempts(sweep.id)
        if unfinished:
            attempt = await store.resume_attempt(unfinished[0].attempt.id)
            done = set(unfinished[0].committed_point_keys)
        else:
            attempt = await store.start_attempt(trial.id)
            done = set()
        print(f"attempt {attempt.id} resumes {attempt.resumes}", flush=True)
        for index in range(points):
            size = _request_count(index)
            point = NewPoint(kind="coding", problem=f"p{index:04d}", metrics={"requests": size})
            if point.key in done:
                continue
            await store.record_point(attempt.id, point, _requests(size))
            print(f"committed {point.key}", flush=True)
            await store.add_event(
                sweep.id, "point.committed", attempt_id=attempt.id, fields={"key": point.key}
            )
        await store.finish_attempt(attempt.id, "done")
        print("finished", flush=True)


async def concurrent_writer(db: Path, writer: str, writers: int, points: int) -> None:
    """One of several processes writing the same file at once, released together on stdin."""
    async with await Store.open(db) as store:
        submitted = await store.submit_sweep("shared", SHARED_YAML)
        trials = await store.add_trials(
            submitted.sweep.id,
            [NewTrial(f"w{i}", "h1", {"writer": i}, i) for i in range(writers)],
        )
        mine = next(t for t in trials if t.key == f"w{writer}")
        print(json.dumps({"ready": writer, "created": submitted.created}), flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        started = time.time()

        async def lane(lane_id: int) -> None:
            attempt = await store.start_attempt(mine.id)
            for index in range(points):
                point = NewPoint(
                    kind="throughput",
                    context=index + 1,
                    concurrency=lane_id + 1,
                    metrics={"writer": writer},
                )
                await store.record_point(attempt.id, point, _requests(20))
                await store.add_event(submitted.sweep.id, "point.committed", host=f"w{writer}")
            await store.finish_attempt(attempt.id, "done")

        await asyncio.gather(lane(0), lane(1))
        print(json.dumps({"writer": writer, "start": started, "end": time.time()}), flush=True)


# --- the tests ------------------------------------------------------------------------------


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _read_db(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    return conn


def _schema_version(conn: sqlite3.Connection) -> int:
    """A migration is all or nothing: version 0 with no tables, or the latest with all."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    tables = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
    assert (version, tables == 0) in {(0, True), (MIGRATIONS[-1].version, False)}, version
    return version


def _assert_no_partial_point(conn: sqlite3.Connection) -> int:
    """Every stored point holds exactly the requests it was written with, numbered 0..n-1."""
    rows = conn.execute(
        "SELECT p.id, p.metrics, count(r.id) AS n, min(r.seq) AS lo, max(r.seq) AS hi "
        "FROM points p LEFT JOIN requests r ON r.point_id = p.id GROUP BY p.id"
    ).fetchall()
    for row in rows:
        expected = json.loads(row["metrics"])["requests"]
        assert (row["n"], row["lo"], row["hi"]) == (expected, 0, expected - 1), dict(row)
    orphans = conn.execute(
        "SELECT count(*) FROM requests WHERE point_id NOT IN (SELECT id FROM points)"
    ).fetchone()[0]
    assert orphans == 0
    return len(rows)


def test_sigkill_at_random_moments_leaves_no_partial_point(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    seed = int(os.environ.get("STORE_CRASH_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    acknowledged: set[str] = set()
    kills = 0
    for _ in range(8):
        proc = _spawn("crash", str(db), str(CRASH_POINTS))
        assert proc.stdout is not None
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.0, 0.3))  # sometimes during start-up and migration
        else:
            first = proc.stdout.readline()  # store open, attempt started or resumed
            assert first.startswith("attempt") or proc.poll() is not None, first
            time.sleep(rng.uniform(0.0, 0.1))  # a full run takes about a second
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
        if proc.returncode == -signal.SIGKILL:
            kills += 1
        else:
            assert proc.returncode == 0, (seed, err)
        acknowledged |= {line.split()[1] for line in out.splitlines() if line.startswith("commit")}

        conn = _read_db(db)
        try:
            if _schema_version(conn) == 0:  # killed before the migration committed: nothing
                assert not acknowledged
                continue
            _assert_no_partial_point(conn)
            stored = {r[0] for r in conn.execute("SELECT point_key FROM points")}
        finally:
            conn.close()
        # What a writer was told is committed survived the kill.
        assert acknowledged <= stored, (seed, acknowledged - stored)
    assert kills >= 4, f"seed {seed}: the writer finished before most kills"

    # A final, unkilled run resumes the same attempt and completes the rest, duplicating nothing.
    proc = _spawn("crash", str(db), str(CRASH_POINTS))
    out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    assert proc.returncode == 0, (seed, err)
    assert out.splitlines()[-1] == "finished"
    conn = _read_db(db)
    try:
        assert _assert_no_partial_point(conn) == CRASH_POINTS
        attempts = conn.execute("SELECT number, state, resumes FROM attempts").fetchall()
        assert len(attempts) == 1, (seed, [dict(a) for a in attempts])
        assert attempts[0]["state"] == "done" and attempts[0]["resumes"] >= 1
        assert conn.execute("SELECT count(*) FROM sweeps").fetchone()[0] == 1
        event_keys = [json.loads(r[0])["key"] for r in conn.execute("SELECT fields FROM events")]
        assert len(event_keys) == len(set(event_keys)) <= CRASH_POINTS
    finally:
        conn.close()


def test_processes_writing_one_file_at_once_lose_nothing(tmp_path: Path) -> None:
    db = tmp_path / "shared.db"
    writers, points = 3, 60
    procs = [
        _spawn("concurrent", str(db), str(n), str(writers), str(points)) for n in range(writers)
    ]
    ready = []
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)[1]
        ready.append(json.loads(line))
    assert sum(r["created"] for r in ready) == 1  # the sweep was submitted once, seen thrice
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    windows = []
    for proc in procs:
        out, err = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
        assert proc.returncode == 0, err
        assert "locked" not in err and "busy" not in err.lower(), err
        finished = json.loads(out.splitlines()[-1])
        windows.append((finished["start"], finished["end"]))
    # The writers really ran at the same time (else this proved nothing about locking).
    # SQLite's lock is not fair, so one writer's commits may all land while another waits:
    # overlap is judged on each process's working window, not on commit times.
    overlapping = [
        (a, b) for a, b in itertools.combinations(windows, 2) if a[0] < b[1] and b[0] < a[1]
    ]
    assert overlapping, windows

    conn = _read_db(db)
    try:
        per_writer = conn.execute(
            "SELECT t.key, count(p.id) FROM trials t JOIN attempts a ON a.trial_id = t.id "
            "JOIN points p ON p.attempt_id = a.id GROUP BY t.key ORDER BY t.key"
        ).fetchall()
        assert [tuple(r) for r in per_writer] == [(f"w{n}", 2 * points) for n in range(writers)]
        assert _assert_no_partial_point_shared(conn) == writers * 2 * points
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == writers * 2 * points
        numbers = conn.execute(
            "SELECT t.key, group_concat(a.number) FROM trials t JOIN attempts a "
            "ON a.trial_id = t.id GROUP BY t.key"
        ).fetchall()
        assert all(sorted(r[1].split(",")) == ["1", "2"] for r in numbers)
    finally:
        conn.close()


def _assert_no_partial_point_shared(conn: sqlite3.Connection) -> int:
    counts = conn.execute(
        "SELECT count(r.id) FROM points p LEFT JOIN requests r ON r.point_id = p.id GROUP BY p.id"
    ).fetchall()
    assert {c[0] for c in counts} == {20}
    return len(counts)


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    if mode == "crash":
        asyncio.run(crash_writer(Path(rest[0]), int(rest[1])))
    elif mode == "concurrent":
        asyncio.run(concurrent_writer(Path(rest[0]), rest[1], int(rest[2]), int(rest[3])))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
