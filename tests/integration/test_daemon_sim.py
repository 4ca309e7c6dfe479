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

from tests.integration.daemon_proc import (
    ORCHESTRATOR,
    DaemonProcess,
    running_daemon,
    stop_process,
)

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


def with_contexts(path: Path, contexts: list[int]) -> Path:
    """The same sweep with more matrix points per trial (so a cancel lands in a trial)."""
    sweep = yaml.safe_load(path.read_text())
    sweep["benchmark"]["contexts"] = contexts
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def unit_files(tmp_path: Path) -> dict[Path, bytes]:
    unit_dir = next((tmp_path / "sim").rglob("etc/systemd/system"))
    return {p.relative_to(unit_dir): p.read_bytes() for p in unit_dir.rglob("*") if p.is_file()}


def unrestored(state: Path) -> int:
    with sqlite3.connect(state / "orchestrator.db") as db:
        (count,) = db.execute(
            "SELECT COUNT(*) FROM unit_backups WHERE restored_at IS NULL"
        ).fetchone()
    return int(count)


DAEMON_WIDE = {"daemon.ready", "daemon.stopping", "daemon.stopped", "state_dir.mode_tightened"}
"""The daemon's own events: the only ones that belong to no sweep."""

IN_A_TRIAL = {"dropin.installed", "server.ready", "prompt.calibrated", "point.measured"}
"""Events that only happen while a trial runs on a host."""


def wait_for_a_point(daemon: DaemonProcess, state: Path, timeout: float = 90.0) -> None:
    """Until the sweep has committed its first point (a trial is being measured)."""
    deadline = time.monotonic() + timeout
    while not committed_points(state):
        assert time.monotonic() < deadline, daemon.log()[-3000:]
        time.sleep(0.3)


def assert_events_carry_their_context(daemon: DaemonProcess) -> None:
    """Every event of the sweep carries its name (the operator guide's jq filter finds it),
    and every event inside a trial carries its host and trial."""
    events = [json.loads(line) for line in daemon.log().splitlines() if line.startswith("{")]
    stray = [e for e in events if e["event"] not in DAEMON_WIDE and e.get("sweep") != "sim-resume"]
    assert not stray, stray
    in_trial = [e for e in events if e["event"] in IN_A_TRIAL]
    assert {e["event"] for e in in_trial} == IN_A_TRIAL
    assert all(e.get("host") == "sim-01" and e.get("trial") for e in in_trial), in_trial


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
        wait_for_a_point(first, state)
        before = committed_points(state)
        first.terminate(timeout=55)  # inside TimeoutStopSec=60, or it fails
        assert first.process is not None and first.process.returncode == 0
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
    assert_events_carry_their_context(second)
    after = committed_points(state)
    assert set(before) <= set(after)  # nothing committed was lost
    # ...nor measured twice, even in another attempt:
    assert not [k for k, n in Counter(after).items() if n > 1]
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for trial in results["trials"]:
        latest[(trial["key"], trial["host"])] = trial
    assert [t["state"] for t in latest.values()] == ["done", "done"]
    assert all(len(t["points"]) == 2 for t in latest.values())
    # the answers count every unit start, the attempt the kill cut short included
    assert results["answers"] and all(
        a["restarts_used"] == len(results["trials"]) and a["best"] is not None
        for a in results["answers"]
    )
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
        wait_for_a_point(first, state)
        first.terminate(timeout=45)
    dropins = list((tmp_path / "sim").rglob("90-orchestrator.conf"))
    assert dropins, "the trial's drop-in is on the host while the sweep is suspended"
    with sqlite3.connect(state / "orchestrator.db") as db:
        # As if it had failed outright with its host changed: nothing will resume it.
        db.execute("UPDATE sweeps SET state = 'failed'")
    with running_daemon(state) as second:
        deadline = time.monotonic() + 60
        while not [e for e in second.events("host.restored") if e["why"] == "recovery"]:
            assert not second.events("host.restore_failed"), second.log()[-3000:]
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
    with_contexts(sim_sweep, [60, 96, 128, 160])
    before = unit_files(tmp_path)
    with running_daemon(state) as daemon:
        assert daemon.cli("submit", str(sim_sweep)).returncode == 0
        wait_for_a_point(daemon, state)
        assert daemon.cli("cancel", "sim-resume").returncode == 0
        final = daemon.wait_for("sim-resume", ("cancelled",), timeout=90)
        results = daemon.cli("results", "sim-resume", "--json").json()
    assert final["state"] == "cancelled", results
    assert committed_points(state)  # what was measured before the cancel stays
    # The trial in flight and the one never started are cancelled, neither failed.
    (in_flight, never_started) = results["trials"]
    assert (in_flight["state"], in_flight["cause"], in_flight["attempt"]) == ("cancelled", None, 1)
    assert 0 < len(in_flight["points"]) < 4
    assert (never_started["state"], never_started["cause"]) == ("cancelled", None)
    assert never_started["points"] == []
    assert final["trials"] == {"cancelled": 2}
    assert unit_files(tmp_path) == before  # unit files byte-identical: our drop-in gone
    assert unrestored(state) == 0
    assert_events_carry_their_context(daemon)


def test_restore_from_the_store_file_without_a_daemon(sim_sweep: Path, tmp_path: Path) -> None:
    state = tmp_path / "state"
    before = unit_files(tmp_path)
    with running_daemon(state) as daemon:
        assert daemon.cli("submit", str(sim_sweep)).returncode == 0
        wait_for_a_point(daemon, state)
        daemon.terminate(timeout=45)  # suspended on its trial: the host keeps the drop-in
    assert unit_files(tmp_path) != before and unrestored(state) == 1
    restored = subprocess.run(
        [*ORCHESTRATOR, "restore", "sim-01", "--db", str(state / "orchestrator.db"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert restored.returncode == 0, restored.stderr
    (outcome,) = json.loads(restored.stdout)["restored"]
    assert (outcome["host"], outcome["sweep"], outcome["ok"]) == ("sim-01", "sim-resume", True)
    assert unit_files(tmp_path) == before  # byte-identical, with no daemon involved
    assert unrestored(state) == 0
