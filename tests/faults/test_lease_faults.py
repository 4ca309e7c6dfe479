"""Hosts have one owner: real ``orchestrator run`` processes, each with a store of its own, on
one simulated host reached over SSH (issue 24).

Two controllers race for a host (exactly one holds it; the other waits or sets it aside as its
file says); a holder SIGKILLed mid-trial is taken over once its lease expires and the new holder
clears its drop-in before anything else; a holder SIGSTOPped past its expiry and resumed makes no
further change (its fence refuses, recorded as ``lease-lost``); Ctrl-C once then the same command
again continues the sweep with nothing measured twice (a grid sweep, and an adaptive search whose
state is replayed from the store); Ctrl-C twice leaves the host restored and
prints no traceback. Lease expiries are a few seconds (``policy.lease_expiry``), the hosts run at
a tenth of real time. The moments are found in the stores' events, never by sleeping blindly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.host.lease import LEASE_DIR
from orchestrator.search.budget import RESTART_EVENT
from orchestrator.sim.cli import SimCluster
from orchestrator.sim.host import SimHost
from tests.soak import harness
from tests.soak.harness import HostAsFound, RunnerProcess

TIME_SCALE = 0.1
EXPIRY_S = 3.0
REACH_S = 60.0
FINISH_S = 120.0
DDTREE = ["--speculative-algorithm", "DDTREE"]
NO_START_LIMIT = ("StartLimitIntervalSec=0",)
"""Restarts every second or two, as no real sweep makes them (tests/soak does the same)."""

pytestmark = pytest.mark.slow


def sweep_file(
    tmp_path: Path,
    cluster: SimCluster,
    name: str,
    *,
    configs: int = 1,
    busy: str = "wait",
    baseline: bool = False,
    retries: int = 0,
) -> Path:
    sweep = harness.tiny_sweep(cluster, name=name, baseline=baseline, configs=configs, problems=())
    sweep["policy"].update(hosts_busy=busy, lease_expiry=EXPIRY_S, trial_retries=retries)
    return harness.write_sweep(tmp_path / f"{name}.yaml", sweep)


def adaptive_file(tmp_path: Path, cluster: SimCluster, name: str, *, restarts: int) -> Path:
    """An adaptive search over four DDTree budgets, ``restarts`` unit starts, one proposal per
    start: no baseline, no race, no confirmation, no retry (so trials == restarts)."""
    sweep = harness.tiny_sweep(cluster, name=name, baseline=False, problems=())
    draft = sweep["configs"][0]["draft_model"]
    sweep["configs"] = []
    sweep["grid"] = {
        "algorithm": ["DDTREE"],
        "draft_model": [draft],
        "budget": [4, 8, 12, 16],
        "topk": [4],
    }
    sweep["search"] = {
        "strategy": "adaptive",
        "max_restarts": restarts,
        "seed": 1,
        "confirmations": 0,
        "race": 0,
    }
    sweep["objective"] = {"metric": "output_tok_s", "context": 60, "concurrency": 1}
    sweep["policy"].update(lease_expiry=EXPIRY_S, trial_retries=0)
    return harness.write_sweep(tmp_path / f"{name}.yaml", sweep)


def events(db: Path, *kinds: str) -> list[harness.Event]:
    return [e for e in harness.events_after(db, 0) if not kinds or e.kind in kinds]


def sweep_state(db: Path, name: str) -> str:
    return harness.sweep_summary(db, name).state


def attempts(db: Path) -> list[tuple[str, str | None]]:
    """(state, cause) of every attempt, in order."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT state, cause FROM attempts ORDER BY id")]


def lease_file(host: SimHost) -> dict[str, Any]:
    top = host.root / LEASE_DIR.lstrip("/")
    (newest,) = sorted(top.iterdir())[-1:]
    data: dict[str, Any] = json.loads((newest / "holder.json").read_text())
    return data


async def until(condition: Callable[[], bool], runner: RunnerProcess, what: str) -> None:
    """Poll the store until ``condition`` holds (a store not yet created holds nothing);
    fails when the runner ends first."""
    deadline = time.monotonic() + REACH_S
    while not (db_ready(condition)):
        if not runner.running or time.monotonic() > deadline:
            raise harness.HarnessError(f"never {what}\n{runner.log_tail()}")
        await asyncio.sleep(harness.POLL_S)


def db_ready(condition: Callable[[], bool]) -> bool:
    try:
        return condition()
    except sqlite3.OperationalError:
        return False  # the runner has not created the store or its schema yet


def unit_dirs(host: SimHost) -> list[str]:
    """The directories under the host's /etc/systemd/system (HostAsFound compares files)."""
    base = host.root / harness.UNIT_DIR
    return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_dir())


def no_traceback(runner: RunnerProcess) -> None:
    assert "Traceback" not in runner.log_tail(200_000), runner.log_tail()


@pytest.mark.parametrize("busy", ["wait", "set-aside"])
async def test_two_controllers_race_for_one_host(busy: str, tmp_path: Path) -> None:
    """Started together with two stores: exactly one takes generation 1; the other waits and
    runs after the release (every trial of both measured, none ruined), or is set aside with
    the holder named."""
    settings = {"server": {"load_s": 20}}
    async with harness.sim_hosts(
        tmp_path / "sim",
        ["127.0.0.160" if busy == "wait" else "127.0.0.161"],
        defaults=harness.fast_host_defaults(TIME_SCALE),
        faults={"*": settings},
    ) as cluster:
        host = cluster.hosts[0]
        as_found = HostAsFound.read(host)
        files = {n: sweep_file(tmp_path, cluster, n, busy=busy) for n in ("race-a", "race-b")}
        dbs = {n: tmp_path / f"{n}.db" for n in files}
        runners = {
            n: await RunnerProcess.start(files[n], dbs[n], tmp_path / "logs", n) for n in files
        }
        codes = {n: await r.finish(FINISH_S) for n, r in runners.items()}
        taken = {n: [e.fields["token"] for e in events(dbs[n], "lease.taken")] for n in files}
        (winner,) = [n for n, tokens in taken.items() if tokens == [1]]
        (loser,) = [n for n in files if n != winner]
        assert codes[winner] == 0 and sweep_state(dbs[winner], winner) == "done"
        assert attempts(dbs[winner]) == [("done", None)]
        if busy == "wait":
            (waited,) = events(dbs[loser], "lease.waiting")
            assert f"held by sweep '{winner}'" in waited.fields["holder"]
            assert taken[loser] == [2] and codes[loser] == 0
            assert attempts(dbs[loser]) == [("done", None)]
            assert not events(dbs[loser], "lease.taken_over")  # released, not taken over
        else:
            (refused,) = events(dbs[loser], "lease.refused")
            assert f"held by sweep '{winner}'" in refused.fields["holder"]
            assert codes[loser] == 1 and sweep_state(dbs[loser], loser) == "failed"
            assert attempts(dbs[loser]) == [("skipped", "host-set-aside")]
            assert taken[loser] == []
        assert as_found.differences(host) == []
        for runner in runners.values():
            no_traceback(runner)


async def test_a_killed_holder_is_taken_over_once_its_lease_expires(tmp_path: Path) -> None:
    """A holder SIGKILLed mid-trial (on another controller machine, so only its expiry tells
    it is gone): a second controller waits out the expiry, takes over, records the old holder,
    removes the dead sweep's drop-in and restores the unit before anything else, then runs
    its own sweep and leaves the host as it was before either."""
    async with harness.sim_hosts(
        tmp_path / "sim",
        ["127.0.0.162"],
        defaults=harness.fast_host_defaults(TIME_SCALE),
    ) as cluster:
        host = cluster.hosts[0]
        as_found, dirs_found = HostAsFound.read(host), unit_dirs(host)
        db_a, db_b = tmp_path / "a.db", tmp_path / "b.db"
        first = await RunnerProcess.start(
            sweep_file(tmp_path, cluster, "killed", configs=2), db_a, tmp_path / "logs", "a"
        )
        try:
            await harness.wait_for_event(db_a, first, ["server.ready"], after_id=0, timeout=REACH_S)
        finally:
            await first.kill()
        # The dead holder ran on another machine: its process cannot be looked up from here.
        lease = lease_file(host)
        lease["holder"]["controller"] = "ctl-elsewhere"
        gen = host.root / LEASE_DIR.lstrip("/") / f"gen-{lease['token']:010d}"
        (gen / "holder.json").write_text(json.dumps(lease))
        assert any(p.name == "90-orchestrator.conf" for p in (host.root / "etc").rglob("*"))

        second = await RunnerProcess.start(
            sweep_file(tmp_path, cluster, "taker"), db_b, tmp_path / "logs", "b"
        )
        assert await second.finish(FINISH_S) == 0, second.log_tail()
        kinds = [e.kind for e in events(db_b)]
        (over,) = events(db_b, "lease.taken_over")
        assert over.fields["old_holder"]["sweep"] == "killed" and over.fields["old_token"] == 1
        assert over.fields["token"] == 2 and over.fields["holder_gone"] is False
        assert over.ts >= lease["expires_at"]  # waited out the expiry
        assert kinds.index("takeover.cleared") < kinds.index("preflight")
        assert (events(db_b, "takeover.cleared")[0]).fields["sweep"] == "killed"
        assert attempts(db_b) == [("done", None)]
        assert as_found.differences(host) == []
        assert unit_dirs(host) == dirs_found  # the dead sweep's drop-in directory gone too
        assert lease_file(host)["released_at"] is not None


async def test_a_stalled_holder_resumed_after_a_take_over_changes_nothing(
    tmp_path: Path,
) -> None:
    """A holder SIGSTOPped past its expiry is taken over; resumed, its fence refuses its next
    change (recorded as lease-lost), it skips its restore, and the new holder's sweep is not
    disturbed."""
    async with harness.sim_hosts(
        tmp_path / "sim",
        ["127.0.0.163"],
        defaults=harness.fast_host_defaults(TIME_SCALE),
        faults={"*": {"server": {"load_s": 20}}},
    ) as cluster:
        host = cluster.hosts[0]
        as_found, dirs_found = HostAsFound.read(host), unit_dirs(host)
        db_a, db_b = tmp_path / "a.db", tmp_path / "b.db"
        stalled = await RunnerProcess.start(
            sweep_file(tmp_path, cluster, "stalled", configs=3), db_a, tmp_path / "logs", "a"
        )
        ready = await harness.wait_for_event(
            db_a, stalled, ["server.ready"], after_id=0, timeout=REACH_S
        )
        os.kill(stalled.process.pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(EXPIRY_S + 0.5)
            taker = await RunnerProcess.start(
                sweep_file(tmp_path, cluster, "taker", configs=1), db_b, tmp_path / "logs", "b"
            )
            await harness.wait_for_event(
                db_b, taker, ["takeover.cleared"], after_id=0, timeout=REACH_S
            )
        finally:
            os.kill(stalled.process.pid, signal.SIGCONT)
        assert await taker.finish(FINISH_S) == 0, taker.log_tail()
        await stalled.finish(FINISH_S)
        after = [e for e in events(db_a) if e.id > ready.id]
        changes = {"dropin.installed", "unit.stopping", "unit.starting", "restore.begin"}
        assert not [e.kind for e in after if e.kind in changes], [e.kind for e in after]
        # The trial in flight when the taker restarted the unit failed by the take-over, not as
        # a crash of its server: every failed attempt of the stalled holder says lease-lost.
        failed = [cause for state, cause in attempts(db_a) if state == "failed"]
        assert failed and set(failed) == {"lease-lost"}, attempts(db_a)
        (skipped,) = events(db_a, "restore.skipped")
        assert "lease lost" in skipped.fields["why"]
        assert attempts(db_b) == [("done", None)]
        (over,) = events(db_b, "lease.taken_over")
        assert over.fields["old_holder"]["sweep"] == "stalled"
        assert as_found.differences(host) == []
        assert unit_dirs(host) == dirs_found  # no directory made again by the stalled one
        no_traceback(stalled)


@contextlib.asynccontextmanager
async def restartable_host(tmp_path: Path, address: str) -> AsyncIterator[SimCluster]:
    """One quick host whose unit may restart every second or two."""
    async with harness.sim_hosts(
        tmp_path / "sim",
        [address],
        defaults=harness.fast_host_defaults(TIME_SCALE),
        unit_lines=NO_START_LIMIT,
    ) as cluster:
        yield cluster


async def interrupt_once(
    path: Path, db: Path, host: SimHost, as_found: HostAsFound, ready: Callable[[], bool]
) -> dict[harness.PointId, tuple[Any, ...]]:
    """``run FILE`` stopped by one Ctrl-C once ``ready`` holds: it exits 1 without a
    traceback, the sweep is interrupted and the host as found. Returns the points kept."""
    first = await RunnerProcess.start(path, db, path.parent / "logs", "first")
    await until(ready, first, "ready for the Ctrl-C")
    os.kill(first.process.pid, signal.SIGINT)
    assert await first.finish(FINISH_S) == 1
    no_traceback(first)
    assert sweep_state(db, path.stem) == "interrupted"
    assert as_found.differences(host) == []
    return harness.committed_points(db)


async def run_again(
    path: Path, db: Path, at_stop: dict[harness.PointId, tuple[Any, ...]]
) -> harness.SweepSummary:
    """The same ``run FILE`` again: it says first that it continues, ends done with every
    trial done, and keeps every point of the first run, measuring none twice."""
    second = await RunnerProcess.start(path, db, path.parent / "logs", "second")
    assert await second.finish(FINISH_S) == 0, second.log_tail()
    assert second.log_tail(200_000).lstrip().startswith(f"continuing sweep {path.stem}")
    summary = harness.sweep_summary(db, path.stem)
    assert summary.state == "done" and set(summary.trials.values()) == {"done"}
    assert harness.lost_points(at_stop, harness.committed_points(db)) == []
    assert harness.duplicated_points(db) == []
    assert harness.measured_more_than_once(db) == []
    assert [e.fields["resumed"] for e in events(db, "sweep.started")] == [False, True]
    return summary


async def test_ctrl_c_once_then_run_again_continues(tmp_path: Path) -> None:
    """One Ctrl-C: the host is restored and the sweep is interrupted (not cancelled); the same
    command again says it continues, keeps the baseline and every committed point, and
    measures the rest once."""
    async with restartable_host(tmp_path, "127.0.0.164") as cluster:
        host = cluster.hosts[0]
        as_found = HostAsFound.read(host)
        db = tmp_path / "c.db"
        path = sweep_file(tmp_path, cluster, "ctrl-c", configs=2, baseline=True)

        def baseline_and_one() -> bool:
            return len(harness.committed_points(db)) >= 2

        at_stop = await interrupt_once(path, db, host, as_found, baseline_and_one)
        summary = await run_again(path, db, at_stop)
        assert summary.attempts == len(summary.trials) == 3  # nothing started over
        assert as_found.differences(host) == []


async def test_ctrl_c_twice_aborts_the_step_and_restores_without_a_traceback(
    tmp_path: Path,
) -> None:
    """Two Ctrl-Cs during a slow model load: the load is abandoned at once, the host is
    restored, the sweep is interrupted, and the person reads plain lines."""
    async with harness.sim_hosts(
        tmp_path / "sim",
        ["127.0.0.165"],
        defaults=harness.fast_host_defaults(TIME_SCALE),
        # Only a trial's server loads for ever: the restore's own start is quick.
        faults={"*": {"server": {"faults": {"slow_load_s": {"value": 600, "when_args": DDTREE}}}}},
    ) as cluster:
        host = cluster.hosts[0]
        as_found = HostAsFound.read(host)
        db = tmp_path / "d.db"
        path = sweep_file(tmp_path, cluster, "twice")
        runner = await RunnerProcess.start(path, db, tmp_path / "logs", "run")
        await harness.wait_for_event(db, runner, ["unit.started"], after_id=0, timeout=REACH_S)
        os.kill(runner.process.pid, signal.SIGINT)
        await asyncio.sleep(0.3)
        os.kill(runner.process.pid, signal.SIGINT)
        assert await runner.finish(FINISH_S) == 1
        log = runner.log_tail(200_000)
        assert "aborting the current step" in log and "Traceback" not in log
        assert "CancelledError" not in log
        assert sweep_state(db, "twice") == "interrupted"
        assert [e.kind for e in events(db, "host.aborted")] == ["host.aborted"]
        assert harness.sweep_summary(db, "twice").unrestored_backups == 0
        assert as_found.differences(host) == []


async def test_ctrl_c_once_then_run_again_continues_an_adaptive_search(tmp_path: Path) -> None:
    """An adaptive search stopped by one Ctrl-C after its first trial is measured: the host is
    restored and the sweep interrupted; the same command again says it continues, replays the
    search from the store (the next proposal is numbered on and has seen every config the
    first run finished), measures no config and no point twice, and spends exactly its
    restarts: a trial cut in flight is resumed, and its second start counts (source.py)."""
    restarts = 4
    async with restartable_host(tmp_path, "127.0.0.166") as cluster:
        host = cluster.hosts[0]
        as_found = HostAsFound.read(host)
        db = tmp_path / "s.db"
        path = adaptive_file(tmp_path, cluster, "search-c", restarts=restarts)
        at_stop = await interrupt_once(
            path, db, host, as_found, lambda: ("done", None) in attempts(db)
        )
        trials = harness.sweep_summary(db, "search-c").trials
        finished = {key for key, state in trials.items() if state == "done"}
        proposed_before = events(db, "search.proposed")
        resumed_at = harness.last_event_id(db)

        summary = await run_again(path, db, at_stop)
        assert len(events(db, RESTART_EVENT)) == restarts
        assert summary.attempts + summary.resumes == restarts  # a resumed trial started again
        assert summary.attempts == len(summary.trials)  # none started over in a new attempt
        proposed = events(db, "search.proposed")
        assert [e.fields["k"] for e in proposed] == list(range(1, len(summary.trials) + 1))
        assert len({e.fields["key"] for e in proposed}) == len(proposed)  # no config twice
        replayed = [e for e in proposed if e.id > resumed_at]
        assert replayed, "the second run proposed nothing new"
        assert replayed[0].fields["k"] == len(proposed_before) + 1
        assert {key for key, _host in finished} <= set(replayed[0].fields["seen"])
        assert as_found.differences(host) == []
