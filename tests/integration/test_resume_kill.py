"""SIGKILL of ``orchestrator run`` at each step of the restart protocol, then a plain rerun.

One simulated host per case, slowed down exactly where the case kills: a slow ``systemctl stop``,
a GPU memory release lag, a slow model load, a coding point in flight, the restore. The moment
is found by watching the store's events (never by sleeping blindly) and checked afterwards: the
event that closes the window was not yet written when the process died. The rerun of the same
command must finish the sweep with every point committed before the kill unchanged, no point
measured twice, every trial complete, and the host's unit files byte-identical to before with
the unit running (or not) as found.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.soak import harness
from tests.soak.harness import HostAsFound, RunnerProcess

ADDRESS = "127.0.0.100"
TIME_SCALE = 0.1
PROBLEMS = ("fib",)
CONTEXTS = (60,)
REACH_TIMEOUT_S = 60.0
FINISH_TIMEOUT_S = 150.0
LAG_S = 3.0

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Moment:
    """Where to kill: after the ``nth`` ``enter`` event, before any ``leave`` event."""

    id: str
    enter: str
    """An event kind, or ``"point"``: the first committed point (the next one is in flight)."""
    leave: str | None
    settings: dict[str, Any] = field(default_factory=dict)
    baseline: bool = False
    nth: int = 1
    delay_s: float = 0.3


MOMENTS = [
    # stop_delay_s is simulated time: 20 x 0.1 = 2 s of wall clock inside `systemctl stop`.
    Moment("stop", "unit.stopping", "unit.stopped", {"server": {"stop_delay_s": 20}}),
    # Found stopped, so the first trial measures an idle baseline; the second trial's stop then
    # leaves 3 s of GPU memory to wait for.
    Moment(
        "memory-wait",
        "unit.stopped",
        "memory.released",
        {"unit_running": False, "memory_release_lag_s": LAG_S},
        baseline=True,
        nth=2,
    ),
    Moment("readiness", "unit.started", "server.ready", {"server": {"load_s": 30}}),
    Moment("point", "point", None, delay_s=0.0),
    Moment("restore", "restore.begin", "restore.done", delay_s=0.1),
]


async def _reach(moment: Moment, db: Path, runner: RunnerProcess) -> int:
    """Wait for the moment; returns the id of the last event seen when it came."""
    if moment.enter == "point":
        await harness.wait_for_points(db, runner, 1, timeout=REACH_TIMEOUT_S)
        return harness.last_event_id(db)
    after = 0
    for _ in range(moment.nth):
        event = await harness.wait_for_event(
            db, runner, [moment.enter], after_id=after, timeout=REACH_TIMEOUT_S
        )
        after = event.id
    await asyncio.sleep(moment.delay_s)
    return after


@pytest.mark.parametrize("moment", MOMENTS, ids=[m.id for m in MOMENTS])
async def test_sigkill_then_rerun_completes_the_sweep(moment: Moment, tmp_path: Path) -> None:
    db = tmp_path / "orchestrator.db"
    logs = tmp_path / "logs"
    defaults = harness.fast_host_defaults(TIME_SCALE)
    async with harness.sim_hosts(
        tmp_path / "sim", [ADDRESS], defaults=defaults, faults={"*": moment.settings}
    ) as cluster:
        host = cluster.hosts[0]
        sweep = harness.write_sweep(
            tmp_path / "sweep.yaml",
            harness.tiny_sweep(
                cluster,
                name=f"kill-{moment.id}",
                baseline=moment.baseline,
                configs=1,
                contexts=CONTEXTS,
                problems=PROBLEMS,
            ),
        )
        as_found = HostAsFound.read(host)
        assert as_found.active_state == ("inactive" if moment.baseline else "active")

        first = await RunnerProcess.start(sweep, db, logs, "first")
        try:
            entered = await _reach(moment, db, first)
        finally:
            await first.kill()
        at_kill = harness.committed_points(db)
        later = [e.kind for e in harness.events_after(db, entered)]
        # The kill landed inside the window: what closes it was never written.
        assert moment.leave not in later, later
        if moment.enter == "point":
            assert len(at_kill) == 1, at_kill  # the second point was in flight

        second = await RunnerProcess.start(sweep, db, logs, "second")
        status = await second.finish(FINISH_TIMEOUT_S)
        assert status == 0, second.log_tail()

        summary = harness.sweep_summary(db, f"kill-{moment.id}")
        assert summary.state == "done"
        assert set(summary.trials.values()) == {"done"}
        assert len(summary.trials) == (2 if moment.baseline else 1)
        assert summary.attempts == len(summary.trials)  # resumed, never started over
        expected = harness.expected_point_keys(PROBLEMS, CONTEXTS)
        assert all(keys == expected for keys in summary.final_points.values())
        after = harness.committed_points(db)
        assert harness.lost_points(at_kill, after) == []
        assert harness.duplicated_points(db) == []
        assert harness.measured_more_than_once(db) == []
        assert summary.unrestored_backups == 0
        assert as_found.differences(host) == []
        events = harness.events_after(db, 0)
        assert [e.fields["resumed"] for e in events if e.kind == "sweep.started"] == [False, True]
        if moment.id == "memory-wait":
            # The resumed run waited out the old server's memory before starting a new one
            # (a baseline re-read on the host now would count that memory as idle).
            stopped = next(e for e in events if e.id == entered)
            restart = next(e for e in events if e.id > entered and e.kind == "unit.starting")
            assert restart.ts >= stopped.ts + LAG_S - 0.2, (stopped, restart)


async def test_restore_refused_by_the_start_rate_limit_is_retried(tmp_path: Path) -> None:
    """A host whose unit allows two starts a minute: the sim host's own start and the trial's
    use them up, so restore's start is refused (start-limit-hit). The runner retries it after
    reset-failed and the host still ends as found."""
    db = tmp_path / "orchestrator.db"
    async with harness.sim_hosts(
        tmp_path / "sim",
        [ADDRESS],
        defaults=harness.fast_host_defaults(TIME_SCALE),
        unit_lines=("StartLimitIntervalSec=60", "StartLimitBurst=2"),
    ) as cluster:
        host = cluster.hosts[0]
        sweep = harness.write_sweep(
            tmp_path / "sweep.yaml",
            harness.tiny_sweep(
                cluster, name="start-limit", baseline=False, contexts=CONTEXTS, problems=()
            ),
        )
        as_found = HostAsFound.read(host)
        runner = await RunnerProcess.start(sweep, db, tmp_path / "logs", "run")
        assert await runner.finish(FINISH_TIMEOUT_S) == 0, runner.log_tail()
        events = harness.events_after(db, 0)
        retries = [e for e in events if e.kind == "restore.retry"]
        assert retries and "start-limit" in retries[0].fields["error"], [e.kind for e in events]
        assert [e.kind for e in events if e.kind.startswith("restore.")][-1] == "restore.done"
        assert harness.sweep_summary(db, "start-limit").unrestored_backups == 0
        assert as_found.differences(host) == []
