"""The daemon running a real sweep on a simulated GPU host: SIGTERM mid-sweep, then resume.

The host is ``orchestrator sim up`` (SSH, systemd, journald, the SGLang stand-in), reached over
the wire like a real one. The daemon is stopped while a trial is being measured; the next
start must finish the sweep without losing or repeating a committed point, and restore the host.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.daemon_proc import running_daemon, stop_process

SIM_ADDRESS = "127.0.0.71"


@pytest.fixture
def sim_sweep(tmp_path: Path) -> Iterator[Path]:
    """One simulated host; its ready-made sweep cut down to a baseline and one config."""
    state = tmp_path / "sim"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.sim.cli",
            "up",
            "--hosts",
            "1",
            "--json",
            "--state-dir",
            str(state),
            "--base-address",
            SIM_ADDRESS,
        ],
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "sim.log", "wb"),  # noqa: SIM115 - closed with the process
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            pytest.fail(f"sim up did not start: {(tmp_path / 'sim.log').read_text()[-2000:]}")
        described = json.loads(line)
        sweep: dict[str, Any] = yaml.safe_load(Path(described["sweep_file"]).read_text())
        sweep["name"] = "sim-resume"
        sweep["configs"] = sweep["configs"][:1]
        sweep["benchmark"].update(contexts=[60, 128], concurrency=[1], rounds=1)
        sweep.pop("coding", None)
        path = tmp_path / "sim-resume.yaml"
        path.write_text(yaml.safe_dump(sweep, sort_keys=False))
        yield path
    finally:
        stop_process(process)


def committed_points(state: Path) -> list[tuple[int, str]]:
    with sqlite3.connect(state / "orchestrator.db") as db:
        rows = db.execute(
            "SELECT a.trial_id, p.point_key FROM points p JOIN attempts a ON a.id = p.attempt_id"
        )
        return [(row[0], row[1]) for row in rows]


def test_sigterm_mid_sweep_then_restart_completes_it(sim_sweep: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    with running_daemon(state) as first:
        assert first.cli("submit", str(sim_sweep)).returncode == 0
        deadline = time.monotonic() + 90
        while not committed_points(state):
            assert time.monotonic() < deadline, first.log()[-3000:]
            time.sleep(0.3)
        before = committed_points(state)
        took = first.terminate(timeout=45)
        assert took < 40  # inside TimeoutStopSec=60
        assert first.events("sweep.suspended") or first.events("sweep.interrupted")
    with sqlite3.connect(state / "orchestrator.db") as db:
        (stored,) = db.execute("SELECT state FROM sweeps").fetchone()
        (unrestored,) = db.execute(
            "SELECT COUNT(*) FROM unit_backups WHERE restored_at IS NULL"
        ).fetchone()
    assert stored == "running" and unrestored == 1  # suspended on its trial, not restored

    with running_daemon(state) as second:
        final = second.wait_for("sim-resume", ("done", "failed"), timeout=150)
        results = second.cli("results", "sim-resume", "--json").json()
    assert final["state"] == "done", results
    after = committed_points(state)
    assert set(before) <= set(after)  # nothing committed was lost
    # ...nor measured twice, even in another attempt:
    assert not [k for k, n in Counter(after).items() if n > 1]
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for trial in results["trials"]:
        latest[(trial["key"], trial["host"])] = trial
    assert [t["state"] for t in latest.values()] == ["done", "done"]
    assert all(len(t["points"]) == 2 for t in latest.values())
    with sqlite3.connect(state / "orchestrator.db") as db:
        (unrestored,) = db.execute(
            "SELECT COUNT(*) FROM unit_backups WHERE restored_at IS NULL"
        ).fetchone()
    assert unrestored == 0


def test_start_restores_hosts_of_a_sweep_that_will_not_resume(
    sim_sweep: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with running_daemon(state) as first:
        assert first.cli("submit", str(sim_sweep)).returncode == 0
        deadline = time.monotonic() + 90
        while not committed_points(state):
            assert time.monotonic() < deadline, first.log()[-3000:]
            time.sleep(0.3)
        first.terminate(timeout=45)
    dropins = list((tmp_path / "sim").rglob("90-orchestrator.conf"))
    assert dropins, "the trial's drop-in is on the host while the sweep is suspended"
    with sqlite3.connect(state / "orchestrator.db") as db:
        # As if it had failed outright with its host changed: nothing will resume it.
        db.execute("UPDATE sweeps SET state = 'failed'")
    with running_daemon(state) as second:
        deadline = time.monotonic() + 60
        while not second.events("recovery.restored"):
            assert not second.events("recovery.restore_failed"), second.log()[-3000:]
            assert time.monotonic() < deadline, second.log()[-3000:]
            time.sleep(0.3)
        assert second.cli("status", "sim-resume", "--json").json()["state"] == "failed"
        nothing = second.cli("restore", "--all", "--json")
        assert nothing.returncode == 0 and nothing.json() == {"restored": []}
    with sqlite3.connect(state / "orchestrator.db") as db:
        (unrestored,) = db.execute(
            "SELECT COUNT(*) FROM unit_backups WHERE restored_at IS NULL"
        ).fetchone()
    assert unrestored == 0
    assert not any(path.exists() for path in dropins)


def test_cancel_mid_sweep_stops_at_a_safe_step_and_restores_the_host(
    sim_sweep: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    unit_dir = next((tmp_path / "sim").rglob("etc/systemd/system"))
    before = {p.relative_to(unit_dir): p.read_bytes() for p in unit_dir.rglob("*") if p.is_file()}
    with running_daemon(state) as daemon:
        assert daemon.cli("submit", str(sim_sweep)).returncode == 0
        deadline = time.monotonic() + 90
        while not committed_points(state):
            assert time.monotonic() < deadline, daemon.log()[-3000:]
            time.sleep(0.3)
        assert daemon.cli("cancel", "sim-resume").returncode == 0
        final = daemon.wait_for("sim-resume", ("cancelled",), timeout=90)
        results = daemon.cli("results", "sim-resume", "--json").json()
    assert final["state"] == "cancelled", results
    assert committed_points(state)  # what was measured before the cancel stays
    after = {p.relative_to(unit_dir): p.read_bytes() for p in unit_dir.rglob("*") if p.is_file()}
    assert after == before  # unit files byte-identical: our drop-in gone
    with sqlite3.connect(state / "orchestrator.db") as db:
        (unrestored,) = db.execute(
            "SELECT COUNT(*) FROM unit_backups WHERE restored_at IS NULL"
        ).fetchone()
    assert unrestored == 0
