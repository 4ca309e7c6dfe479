"""The collision issue 24 began with: a sweep on the daemon (its own store) and a foreground
``orchestrator run --db other.db`` on the same simulated host.

Exactly one holds the host at a time. With ``policy.hosts_busy: wait`` (the default) the
foreground run names the daemon's sweep as the holder, waits, and runs once the daemon gives the
lease back; with ``set-aside`` it is refused at once with the holder named. Either way no trial of
either sweep is ruined (every attempt ``done``, none crashed, none memory-not-released, none
exited) and the host ends as found. The daemon is a real process, started and stopped by its
pid; the moments are read from the two stores' events.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from tests.faults.test_lease_faults import (
    FINISH_S,
    REACH_S,
    TIME_SCALE,
    attempts,
    db_ready,
    events,
    sweep_file,
    unit_dirs,
)
from tests.integration.daemon_proc import DaemonProcess
from tests.soak import harness
from tests.soak.harness import HostAsFound, RunnerProcess

pytestmark = pytest.mark.slow

SLOW_LOADS = {"server": {"load_s": 20}}
"""Two seconds a server load at the hosts' time scale: the daemon's two trials hold the host
long enough for the foreground run to start up and meet the lease."""


async def daemon_event(daemon: DaemonProcess, db: Path, kind: str) -> harness.Event:
    """The first ``kind`` event in the daemon's store; fails when the daemon exits first."""
    deadline = time.monotonic() + REACH_S
    while True:
        found = db_ready(lambda: bool(events(db, kind))) and events(db, kind)
        if found:
            return found[0]
        assert daemon.process is not None and daemon.process.poll() is None, daemon.log()[-3000:]
        assert time.monotonic() < deadline, f"no {kind} in {REACH_S:g}s\n{daemon.log()[-3000:]}"
        await asyncio.sleep(harness.POLL_S)


async def daemon_sweep_ended(daemon: DaemonProcess, db: Path, name: str) -> str:
    """The daemon's sweep's final state, once it has one."""
    deadline = time.monotonic() + FINISH_S
    while (state := harness.sweep_summary(db, name).state) in ("queued", "running"):
        assert time.monotonic() < deadline, f"{name} still {state}\n{daemon.log()[-3000:]}"
        await asyncio.sleep(0.2)
    return state


@pytest.mark.parametrize("busy", ["wait", "set-aside"])
async def test_a_daemon_sweep_and_a_foreground_run_on_one_host(busy: str, tmp_path: Path) -> None:
    address = "127.0.0.167" if busy == "wait" else "127.0.0.168"
    async with harness.sim_hosts(
        tmp_path / "sim",
        [address],
        defaults=harness.fast_host_defaults(TIME_SCALE),
        faults={"*": SLOW_LOADS},
    ) as cluster:
        host = cluster.hosts[0]
        as_found, dirs_found = HostAsFound.read(host), unit_dirs(host)
        daemon = DaemonProcess(tmp_path / "state")
        await asyncio.to_thread(daemon.start)
        try:
            daemon_db = daemon.state_dir / "orchestrator.db"
            night = sweep_file(tmp_path, cluster, "night-d", configs=2)
            status, _ = await asyncio.to_thread(daemon.submit, night)
            assert status in (200, 201, 202), daemon.log()[-3000:]
            taken = await daemon_event(daemon, daemon_db, "lease.taken")

            fg_db = tmp_path / "other.db"
            fg_file = sweep_file(tmp_path, cluster, "fg-run", busy=busy)
            foreground = await RunnerProcess.start(fg_file, fg_db, tmp_path / "logs", "fg")
            code = await foreground.finish(FINISH_S)
            assert await daemon_sweep_ended(daemon, daemon_db, "night-d") == "done"
        finally:
            await asyncio.to_thread(daemon.terminate)

        holder_named = "held by sweep 'night-d' (daemon on "
        (released,) = events(daemon_db, "lease.released")
        assert taken.fields["token"] == 1 and released.fields["token"] == 1
        assert attempts(daemon_db) == [("done", None), ("done", None)]
        log = foreground.log_tail(200_000)
        assert "Traceback" not in log
        if busy == "wait":
            assert code == 0, log[-3000:]
            (waited,) = events(fg_db, "lease.waiting")
            assert holder_named in waited.fields["holder"]
            assert holder_named in log  # told to the person too, not only recorded
            (fg_taken,) = events(fg_db, "lease.taken")
            # One holder at a time: the foreground took generation 2 after the daemon's release.
            assert fg_taken.fields["token"] == 2 and fg_taken.ts >= released.ts
            assert waited.ts <= released.ts
            assert not events(fg_db, "lease.taken_over")
            assert harness.sweep_summary(fg_db, "fg-run").state == "done"
            assert attempts(fg_db) == [("done", None)]
        else:
            assert code == 1, log[-3000:]
            (refused,) = events(fg_db, "lease.refused")
            assert holder_named in refused.fields["holder"]
            assert holder_named in log
            assert refused.ts <= released.ts
            assert not events(fg_db, "lease.taken")
            assert harness.sweep_summary(fg_db, "fg-run").state == "failed"
            assert attempts(fg_db) == [("skipped", "host-set-aside")]
        assert as_found.differences(host) == []
        assert unit_dirs(host) == dirs_found
