"""Crash-resume harness: simulated hosts, a runner process to SIGKILL, and the store's verdict.

Shared by the kill-at-each-step test (``tests/integration/test_resume_kill.py``) and the seeded
soak (``tests/soak/soak.py``). The hosts run in-process (``simulated_hosts``); the runner is a
real ``orchestrator run FILE --db DB`` process, killed with SIGKILL and started again on the same
store. The verdict reads the store with plain SQLite (read-only) and the host's private root, so
it trusts nothing the runner says about itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.sim.cli import SimCluster, render_sweep, simulated_hosts
from orchestrator.sim.host import UNIT_NAME, SimHost, render_unit, sglang_argv

ORCHESTRATOR = [sys.executable, "-m", "orchestrator.cli"]
SSH_PORT = 2222
POLL_S = 0.05
UNIT_DIR = Path("etc/systemd/system")

PointId = tuple[str, str, int, str]
"""(trial key, host, attempt number, point key): one committed point."""


class HarnessError(AssertionError):
    """The run did not do what the harness waited for; carries the runner's log tail."""


# --- the hosts -----------------------------------------------------------------------------


def fast_host_defaults(time_scale: float) -> dict[str, Any]:
    """Host settings for quick sweeps: every simulated duration scaled down."""
    return {"ddtree": True, "time_scale": time_scale}


@contextlib.asynccontextmanager
async def sim_hosts(
    state_dir: Path,
    addresses: Sequence[str],
    *,
    defaults: Mapping[str, Any],
    faults: Mapping[str, Any] | None = None,
    unit_lines: Sequence[str] = (),
) -> AsyncIterator[SimCluster]:
    """Simulated hosts ``sim-01``.. on ``addresses`` (SSH port :data:`SSH_PORT`); ``unit_lines``
    go into the ``[Unit]`` section of each host's SGLang unit as found."""
    specs = [(f"sim-{i:02d}", address, SSH_PORT) for i, address in enumerate(addresses, 1)]
    units = {name: unit_text(address, unit_lines) for name, address, _ in specs if unit_lines}
    async with simulated_hosts(
        state_dir, specs, defaults=dict(defaults), faults=dict(faults or {}), units=units
    ) as cluster:
        yield cluster


def unit_text(address: str, unit_lines: Sequence[str]) -> str:
    """The host's unit file as the simulator would write it, plus ``unit_lines`` in [Unit]."""
    text = render_unit(sglang_argv(address), description="SGLang server (simulated)")
    return text.replace("[Unit]\n", "[Unit]\n" + "".join(f"{line}\n" for line in unit_lines), 1)


def tiny_sweep(
    cluster: SimCluster,
    *,
    name: str,
    baseline: bool = True,
    configs: int = 1,
    contexts: Sequence[int] = (60,),
    problems: Sequence[str] = ("fib",),
    max_tokens: int = 16,
    timeouts: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """``sim up``'s sweep cut down: a baseline and ``configs`` DDTree configs, one matrix row,
    ``problems`` coding problems; a retry per trial so a fault injected by the soak (an SSH
    drop) costs an attempt, not the trial."""
    sweep = render_sweep(cluster.describe(), window_flag="--speculative-draft-window-size")
    sweep["name"] = name
    sweep["baseline"] = baseline
    sweep["configs"] = sweep["configs"][:configs]
    sweep["benchmark"].update(
        contexts=list(contexts),
        concurrency=[1],
        rounds=1,
        warmup_requests=0,
        max_tokens=max_tokens,
    )
    if problems:
        sweep["coding"].update(select=list(problems), max_tokens=256)
    else:
        sweep.pop("coding")
    sweep["timeouts"].update(
        timeouts or {"stop": 30, "memory_release": 30, "ready": 60, "request": 60}
    )
    sweep["policy"]["trial_retries"] = 1
    return sweep


def write_sweep(path: Path, sweep: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(sweep), sort_keys=False), encoding="utf-8")
    return path


def unit_files(host: SimHost) -> dict[str, bytes]:
    """Every file under the host's ``/etc/systemd/system`` (drop-in directories included)."""
    base = host.root / UNIT_DIR
    return {
        str(path.relative_to(base)): path.read_bytes()
        for path in sorted(base.rglob("*"))
        if path.is_file()
    }


def unit_active_state(host: SimHost) -> str:
    assert host.manager is not None
    return dict(host.manager.properties(UNIT_NAME))["ActiveState"]


@dataclass(frozen=True)
class HostAsFound:
    """What restore must give back: the unit's files byte for byte and whether it ran."""

    files: dict[str, bytes]
    active_state: str

    @classmethod
    def read(cls, host: SimHost) -> HostAsFound:
        return cls(unit_files(host), unit_active_state(host))

    def differences(self, host: SimHost) -> list[str]:
        now = HostAsFound.read(host)
        problems = [
            f"{path}: {_file_change(path in self.files, path in now.files)}"
            for path in sorted(set(self.files) | set(now.files))
            if self.files.get(path) != now.files.get(path)
        ]
        if now.active_state != self.active_state:
            problems.append(f"ActiveState {now.active_state}, found {self.active_state}")
        return problems


def _file_change(was: bool, is_now: bool) -> str:
    return "missing" if not is_now else "added" if not was else "changed"


# --- the runner process --------------------------------------------------------------------


@dataclass
class RunnerProcess:
    """One ``orchestrator run FILE --db DB --json``; its output goes to files of its own."""

    process: asyncio.subprocess.Process
    log_path: Path
    started: float = field(default_factory=time.monotonic)

    @classmethod
    async def start(
        cls, sweep: Path, db: Path | str, log_dir: Path, label: str
    ) -> RunnerProcess:
        """``db``: a store file, or a PostgreSQL store's URL."""
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{label}.log"
        with log_path.open("wb") as log, (log_dir / f"{label}.json").open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                *ORCHESTRATOR,
                "run",
                str(sweep),
                "--db",
                str(db),
                "--json",
                stdout=out,
                stderr=log,
                stdin=asyncio.subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, "COLUMNS": "120", "NO_COLOR": "1"},
            )
        return cls(process, log_path)

    @property
    def running(self) -> bool:
        return self.process.returncode is None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    async def kill(self) -> None:
        """SIGKILL the runner, then anything left in its session (a coding sandbox child)."""
        pid = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        await self.process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)

    async def finish(self, timeout: float) -> int:
        """Wait for a normal end; a runner still going after ``timeout`` is killed and fails."""
        try:
            async with asyncio.timeout(timeout):
                return await self.process.wait()
        except TimeoutError:
            await self.kill()
            raise HarnessError(
                f"runner still going after {timeout:g}s\n{self.log_tail()}"
            ) from None


# --- reading the store ---------------------------------------------------------------------


def _connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    return conn


@dataclass(frozen=True)
class Event:
    id: int
    kind: str
    host: str | None
    ts: float
    fields: dict[str, Any]


def events_after(db: Path, after_id: int) -> list[Event]:
    if not db.exists():
        return []
    try:
        with contextlib.closing(_connect(db)) as conn:
            rows = conn.execute(
                "SELECT id, kind, host, ts, fields FROM events WHERE id > ? ORDER BY id",
                (after_id,),
            ).fetchall()
    except sqlite3.OperationalError:
        return []  # the runner has not created the schema yet
    return [Event(r["id"], r["kind"], r["host"], r["ts"], json.loads(r["fields"])) for r in rows]


def last_event_id(db: Path) -> int:
    found = events_after(db, 0)
    return found[-1].id if found else 0


def committed_points(db: Path) -> dict[PointId, tuple[Any, ...]]:
    """Every committed point with its stored content (what "unchanged" compares)."""
    if not db.exists():
        return {}
    try:
        with contextlib.closing(_connect(db)) as conn:
            rows = conn.execute(
                "SELECT t.key, t.host, a.number, p.point_key, p.id, p.metrics, p.accept_len, "
                "p.quality, p.invocation_id, p.committed_at, "
                "(SELECT COUNT(*) FROM requests r WHERE r.point_id = p.id) "
                "FROM points p JOIN attempts a ON a.id = p.attempt_id "
                "JOIN trials t ON t.id = a.trial_id ORDER BY p.id"
            ).fetchall()
    except sqlite3.OperationalError:
        return {}
    found: dict[PointId, tuple[Any, ...]] = {}
    for row in rows:
        ident: PointId = (row[0], row[1], int(row[2]), row[3])
        if ident in found:
            raise HarnessError(f"point {ident} stored twice")
        found[ident] = tuple(row[4:])
    return found


def duplicated_points(db: Path) -> list[tuple[int, str, int]]:
    """(attempt id, point key, count) stored more than once: must be empty."""
    with contextlib.closing(_connect(db)) as conn:
        rows = conn.execute(
            "SELECT attempt_id, point_key, COUNT(*) FROM points "
            "GROUP BY attempt_id, point_key HAVING COUNT(*) > 1"
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def measured_more_than_once(db: Path) -> list[tuple[str, str, str]]:
    """(trial key, host, point key) measured in two attempts of which neither failed: a resumed
    attempt must measure only what it lacks, not start over in a new attempt."""
    with contextlib.closing(_connect(db)) as conn:
        rows = conn.execute(
            "SELECT t.key, t.host, p.point_key FROM points p "
            "JOIN attempts a ON a.id = p.attempt_id JOIN trials t ON t.id = a.trial_id "
            "WHERE a.state != 'failed'"
        ).fetchall()
    counts = Counter((r[0], r[1], r[2]) for r in rows)
    return [key for key, n in counts.items() if n > 1]


@dataclass(frozen=True)
class SweepSummary:
    state: str
    trials: dict[tuple[str, str], str]
    """(trial key, host) -> the latest attempt's state."""
    final_points: dict[tuple[str, str], frozenset[str]]
    """(trial key, host) -> the point keys of its latest attempt."""
    unrestored_backups: int
    attempts: int
    resumes: int


def sweep_summary(db: Path, name: str) -> SweepSummary:
    with contextlib.closing(_connect(db)) as conn:
        (sweep_id, state) = conn.execute(
            "SELECT id, state FROM sweeps WHERE name = ? AND replaced_at IS NULL", (name,)
        ).fetchone()
        rows = conn.execute(
            "SELECT t.key, t.host, a.id, a.number, a.state, a.resumes FROM trials t "
            "LEFT JOIN attempts a ON a.trial_id = t.id WHERE t.sweep_id = ? "
            "ORDER BY t.id, a.number",
            (sweep_id,),
        ).fetchall()
        latest: dict[tuple[str, str], tuple[int | None, str]] = {}
        attempts = resumes = 0
        for row in rows:
            latest[(row[0], row[1])] = (row[2], row[4] or "queued")
            if row[2] is not None:
                attempts += 1
                resumes += int(row[5])
        points: dict[tuple[str, str], frozenset[str]] = {}
        for trial, (attempt_id, _state) in latest.items():
            keys = conn.execute(
                "SELECT point_key FROM points WHERE attempt_id = ?", (attempt_id,)
            ).fetchall()
            points[trial] = frozenset(k[0] for k in keys)
        (unrestored,) = conn.execute(
            "SELECT COUNT(*) FROM unit_backups WHERE sweep_id = ? AND restored_at IS NULL",
            (sweep_id,),
        ).fetchone()
    return SweepSummary(
        state=state,
        trials={k: s for k, (_, s) in latest.items()},
        final_points=points,
        unrestored_backups=int(unrestored),
        attempts=attempts,
        resumes=resumes,
    )


def expected_point_keys(problems: Iterable[str], contexts: Iterable[int]) -> frozenset[str]:
    """The point keys a complete trial of :func:`tiny_sweep` has."""
    from orchestrator.store import point_key

    keys = {point_key("throughput", context=c, concurrency=1) for c in contexts}
    keys |= {point_key("coding", problem=p) for p in problems}
    return frozenset(keys)


def lost_points(
    before: Mapping[PointId, tuple[Any, ...]], after: Mapping[PointId, tuple[Any, ...]]
) -> list[str]:
    """Points committed before a kill that are gone or changed afterwards: must be empty."""
    problems = []
    for ident, content in before.items():
        if ident not in after:
            problems.append(f"{ident}: lost")
        elif after[ident] != content:
            problems.append(f"{ident}: changed")
    return problems


# --- waiting for a moment ------------------------------------------------------------------


async def wait_for_event(
    db: Path,
    runner: RunnerProcess,
    kinds: Iterable[str],
    *,
    after_id: int,
    timeout: float,
    where: Mapping[str, Any] | None = None,
) -> Event:
    """The first event of one of ``kinds`` (with ``where`` among its fields) newer than
    ``after_id``; fails when the runner ends first or ``timeout`` passes."""
    wanted = set(kinds)
    deadline = time.monotonic() + timeout
    seen = after_id
    while True:
        for event in events_after(db, seen):
            seen = event.id
            if event.kind in wanted and all(
                event.fields.get(k) == v for k, v in (where or {}).items()
            ):
                return event
        if not runner.running:
            raise HarnessError(
                f"runner exited ({runner.process.returncode}) before {sorted(wanted)}\n"
                + runner.log_tail()
            )
        if time.monotonic() > deadline:
            raise HarnessError(f"no {sorted(wanted)} within {timeout:g}s\n{runner.log_tail()}")
        await asyncio.sleep(POLL_S)


async def wait_for_points(
    db: Path, runner: RunnerProcess, count: int, *, timeout: float
) -> dict[PointId, tuple[Any, ...]]:
    """Poll until at least ``count`` points are committed."""
    deadline = time.monotonic() + timeout
    while True:
        points = committed_points(db)
        if len(points) >= count:
            return points
        if not runner.running:
            raise HarnessError(f"runner exited before {count} points\n{runner.log_tail()}")
        if time.monotonic() > deadline:
            raise HarnessError(f"fewer than {count} points after {timeout:g}s\n{runner.log_tail()}")
        await asyncio.sleep(POLL_S)
