"""The daemon as operators use it: a real process, its inbox, its socket, its store, the CLI."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.daemon import pick_runnable
from tests.integration.daemon_proc import (
    ORCHESTRATOR,
    DaemonProcess,
    HostEntry,
    UntrustedSSHServer,
    clock_a_minute_ago,
    free_port,
    running_daemon,
    sweep_yaml,
)

BAD = Path(__file__).parents[1] / "data" / "sweeps" / "bad" / "unknown_keys.yaml"


@pytest.fixture(scope="module")
def untrusted() -> Iterator[UntrustedSSHServer]:
    with UntrustedSSHServer() as server:
        yield server


@pytest.fixture(scope="module")
def untrusted_too() -> Iterator[UntrustedSSHServer]:
    with UntrustedSSHServer() as server:
        yield server


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    with running_daemon(tmp_path / "state") as process:
        yield process


def wait_path(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.1)


def drop(inbox: Path, name: str, text: str) -> None:
    """Write elsewhere, then rename in: the way the operator guide recommends."""
    staging = inbox.parent / f".{name}.staging"
    staging.write_text(text)
    os.replace(staging, inbox / name)


# --- intake ---------------------------------------------------------------------------------


def test_bad_inbox_file_is_rejected_with_every_problem(daemon: DaemonProcess) -> None:
    inbox, rejected = daemon.state_dir / "inbox", daemon.state_dir / "rejected"
    shutil.copy(BAD, inbox / "night.yaml")
    wait_path(rejected / "night.yaml.error")
    wait_path(rejected / "night.yaml")
    errors = (rejected / "night.yaml.error").read_text().splitlines()
    assert "night.yaml:2: hostz: unknown key (did you mean 'hosts'?)" in errors
    assert "night.yaml:1: hosts: required key missing" in errors
    assert len(errors) >= 5 and all(line.startswith("night.yaml:") for line in errors)
    assert not (inbox / "night.yaml").exists()
    assert (rejected / "night.yaml").read_bytes() == BAD.read_bytes()
    # The same name again does not overwrite the first rejection.
    shutil.copy(BAD, inbox / "night.yaml")
    wait_path(rejected / "night.1.yaml.error")
    status = daemon.cli("status", "--json")
    assert status.returncode == 0 and status.json() == {"sweeps": []}


def test_good_inbox_file_is_accepted_and_queued(
    daemon: DaemonProcess, untrusted: UntrustedSSHServer, tmp_path: Path
) -> None:
    inbox, accepted = daemon.state_dir / "inbox", daemon.state_dir / "accepted"
    text = sweep_yaml("inbox-good", [HostEntry("h1", untrusted.port)], tmp_path / "keys")
    # Written slowly in two halves: the first half alone is invalid and must not be taken.
    with open(inbox / "good.yaml", "w") as handle:
        handle.write(text[: len(text) // 2])
        handle.flush()
        time.sleep(0.2)
        handle.write(text[len(text) // 2 :])
    (inbox / "ignored.yaml.part").write_text("not: taken")
    wait_path(accepted / "good.yaml")
    assert (accepted / "good.yaml").read_text() == text
    assert not (daemon.state_dir / "rejected" / "good.yaml.error").exists()
    sweeps = daemon.cli("status", "--json").json()["sweeps"]
    assert [(s["name"], s["source_path"]) for s in sweeps] == [
        ("inbox-good", str(accepted / "good.yaml"))
    ]
    assert sweeps[0]["state"] in ("queued", "running", "failed")
    # Its only host is set aside (the untrusted host key is refused): nothing ran, so failed.
    ended = daemon.wait_for("inbox-good", ("failed",))
    assert ended["hosts"][0]["set_aside"]
    assert ended["summary"]["error"].startswith("every host was set aside: h1: host key of")
    assert "  every host was set aside: h1:" in daemon.cli("status", "inbox-good").stdout
    assert (inbox / "ignored.yaml.part").exists()
    # The same file dropped again is recognised: accepted, not queued a second time.
    drop(inbox, "good.yaml", text)
    wait_path(accepted / "good.1.yaml")
    assert len(daemon.cli("status", "--json").json()["sweeps"]) == 1


# --- scheduling -----------------------------------------------------------------------------


def test_pick_runnable_keeps_order_per_host() -> None:
    a, b, c, d = frozenset({"x"}), frozenset({"x", "y"}), frozenset({"y"}), frozenset({"z"})
    queue = [("a", a), ("b", b), ("c", c), ("d", d)]
    assert pick_runnable(queue, busy=set(), slots=8) == ["a", "d"]  # b waits for x, c behind b
    assert pick_runnable(queue, busy={"z"}, slots=8) == ["a"]
    assert pick_runnable(queue, busy=set(), slots=1) == ["a"]


def test_sweeps_sharing_a_host_wait_and_others_run_at_once(
    daemon: DaemonProcess,
    untrusted: UntrustedSSHServer,
    untrusted_too: UntrustedSSHServer,
    tmp_path: Path,
) -> None:
    keys = tmp_path / "keys"
    closed = free_port()
    files = {
        # About 7.5 s on host "x": nothing listens, the transport retries.
        "slow": sweep_yaml("slow", [HostEntry("x", closed)], keys),
        # Also host "x" (same name, other address): must wait; higher priority goes first.
        "low": sweep_yaml("low", [HostEntry("x", untrusted.port)], keys, priority=0),
        "high": sweep_yaml("high", [HostEntry("x", untrusted.port)], keys, priority=5),
        # Host "y" only (another name, another address): runs at once, beside "slow".
        "other": sweep_yaml("other", [HostEntry("y", untrusted_too.port)], keys),
    }
    # Submitted through the API from this process (the CLI's submit has tests of its own): four
    # CLI start-ups on a busy machine could outlast "slow" and leave nothing to wait for.
    for name in ("slow", "low", "high", "other"):
        path = tmp_path / f"{name}.yaml"
        path.write_text(files[name])
        status, document = daemon.submit(path)
        assert status == 201 and document["created"] is True, document
    # Each sweep's only host is set aside, so each ends failed: what is tested is the order.
    other = daemon.wait_for("other", ("failed",), timeout=5)
    slow = daemon.api("/sweeps/slow")[1]
    assert slow["state"] == "running"  # "other" ran and ended while "slow" held host x
    for name in ("slow", "low", "high"):
        daemon.wait_for(name, ("failed",), timeout=30)
    sweeps = {s["name"]: s for s in daemon.cli("status", "--json").json()["sweeps"]}
    assert sweeps["slow"]["finished_at"] <= sweeps["high"]["started_at"]
    assert sweeps["high"]["finished_at"] <= sweeps["low"]["started_at"]
    assert other["finished_at"] < sweeps["slow"]["finished_at"]
    assert next(s["name"] for s in daemon.cli("status", "--json").json()["sweeps"]) == "high"


# --- cancel, results, status from the CLI ---------------------------------------------------


def test_cancel_results_and_status_from_the_cli(
    daemon: DaemonProcess, untrusted: UntrustedSSHServer, tmp_path: Path
) -> None:
    keys = tmp_path / "keys"
    waiting = tmp_path / "waiting.yaml"
    waiting.write_text(
        sweep_yaml(
            "waiting", [HostEntry("w", untrusted.port)], keys, not_before=clock_a_minute_ago()
        )
    )
    behind = tmp_path / "behind.yaml"
    behind.write_text(sweep_yaml("behind", [HostEntry("w", untrusted.port)], keys))
    assert daemon.cli("submit", str(waiting)).returncode == 0
    assert daemon.cli("submit", str(behind)).returncode == 0

    status = daemon.cli("status", "--json")
    document = status.json()  # exactly one JSON document on stdout
    assert {s["name"]: (s["state"], s["active"]) for s in document["sweeps"]} == {
        "waiting": ("queued", True),  # started, waiting for its not_before time
        "behind": ("queued", False),  # waits for host w
    }

    cancelled = daemon.cli("cancel", "behind", "--json")
    assert cancelled.returncode == 0
    assert cancelled.json()["state"] == "cancelled" and cancelled.json()["cancelling"] is False
    stopping = daemon.cli("cancel", "waiting", "--json")
    assert stopping.returncode == 0 and stopping.json()["cancelling"] is True
    final = daemon.wait_for("waiting", ("cancelled",))
    assert final["active"] is False
    again = daemon.cli("cancel", "waiting", "--json")
    assert again.returncode == 2 and "already ended" in again.json()["error"]

    results = daemon.cli("results", "behind", "--json")
    assert results.returncode == 0
    document = results.json()
    assert document["sweep"] == "behind" and document["state"] == "cancelled"
    assert document["trials"] == []  # never started: nothing was planned into the store
    # ... and it answers all the same: nothing valid was measured on its host type
    assert document["answers"] and {a["verdict"] for a in document["answers"]} == {
        "no-valid-config"
    }
    by_id = daemon.cli("results", str(final["id"]), "--json").json()
    assert by_id["sweep"] == "waiting" and by_id["state"] == "cancelled"

    missing = daemon.cli("results", "no-such-sweep", "--json")
    assert missing.returncode == 2 and "no sweep" in missing.json()["error"]
    tricky = daemon.cli("results", "../../etc/passwd")
    assert tricky.returncode == 2 and tricky.stdout == ""

    # --db reads the store file directly, with no daemon involved.
    direct = daemon.cli("results", "waiting", "--db", str(daemon.state_dir / "orchestrator.db"))
    assert direct.returncode == 0 and "waiting" in direct.stdout
    direct_json = daemon.cli(
        "results", "waiting", "--json", "--db", str(daemon.state_dir / "orchestrator.db")
    )
    assert direct_json.json()["state"] == "cancelled"
    assert direct_json.json()["answers"] == by_id["answers"]  # the store file and the daemon agree


def test_a_sweep_whose_every_host_was_set_aside_fails_with_the_reason(
    untrusted: UntrustedSSHServer, tmp_path: Path
) -> None:
    sweep = tmp_path / "aside.yaml"
    sweep.write_text(sweep_yaml("aside", [HostEntry("a1", untrusted.port)], tmp_path / "keys"))
    ran = subprocess.run(
        [*ORCHESTRATOR, "run", str(sweep), "--db", str(tmp_path / "store.db"), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 1, ran.stderr  # nothing was measured: not a success
    document = json.loads(ran.stdout)
    assert document["state"] == "failed"
    assert document["summary"]["error"].startswith("every host was set aside: a1: host key")
    assert [t["state"] for t in document["trials"]] == ["skipped"]
    # the answers say so: no restart was spent, nothing valid measured
    assert {(a["verdict"], a["restarts_used"]) for a in document["answers"]} == {
        ("no-valid-config", 0)
    }


def test_restore_of_an_unknown_host_is_refused_with_and_without_a_daemon(
    untrusted: UntrustedSSHServer, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    db = str(state / "orchestrator.db")
    sweep = tmp_path / "known.yaml"
    sweep.write_text(sweep_yaml("known", [HostEntry("known-host", untrusted.port)], tmp_path / "k"))
    with running_daemon(state) as daemon:
        assert daemon.cli("submit", str(sweep)).returncode == 0
        daemon.wait_for("known", ("done", "failed"))
        unknown = daemon.cli("restore", "nosuchhost")
        assert unknown.returncode == 2 and "unknown host 'nosuchhost'" in unknown.stderr
        known = daemon.cli("restore", "known-host")
        assert known.returncode == 0 and "nothing to restore" in known.stderr
        beside = daemon.cli("restore", "known-host", "--db", db)
        assert beside.returncode == 2 and "a daemon runs on" in beside.stderr
    nobody = DaemonProcess(tmp_path / "none")
    unknown = nobody.cli("restore", "nosuchhost", "--db", db, "--json")
    assert unknown.returncode == 2 and "unknown host" in unknown.json()["error"]
    known = nobody.cli("restore", "known-host", "--db", db, "--json")
    assert known.returncode == 0 and known.json() == {"restored": []}
    missing = nobody.cli("restore", "--all", "--db", str(tmp_path / "nothing.db"))
    assert missing.returncode == 2 and "no such store" in missing.stderr


def test_clients_without_a_daemon_fail_cleanly(tmp_path: Path) -> None:
    nobody = DaemonProcess(tmp_path / "none")
    for args in (("status", "--json"), ("cancel", "x"), ("results", "x"), ("restore", "--all")):
        result = nobody.cli(*args)
        assert result.returncode == 1, args
        assert "no daemon answers on" in result.stderr and result.stdout == ""


# --- stopping and resuming ------------------------------------------------------------------


def test_sigterm_exits_promptly_and_the_next_start_resumes(
    tmp_path: Path, untrusted: UntrustedSSHServer
) -> None:
    state = tmp_path / "state"
    sweep = tmp_path / "long.yaml"
    sweep.write_text(
        sweep_yaml(
            "long",
            [HostEntry("l", untrusted.port)],
            tmp_path / "keys",
            not_before=clock_a_minute_ago(),
        )
    )
    with running_daemon(state) as first:
        assert first.cli("submit", str(sweep)).returncode == 0
        first.wait_for("long", ("queued",))
        assert first.cli("status", "long", "--json").json()["active"] is True
        # terminate() fails on a hang (SIGKILL after STOP_TIMEOUT_S); exit status 0 is the
        # daemon's own clean stop, not waiting out the sweep.
        first.terminate()
        assert first.process is not None and first.process.returncode == 0
        assert first.events("daemon.stopped")
        assert first.events("sweep.suspended")
    assert not (state / "orchestrator.sock").exists()
    with sqlite3.connect(state / "orchestrator.db") as db:
        (stored,) = db.execute("SELECT state FROM sweeps WHERE name = 'long'").fetchone()
    assert stored == "running"  # suspended, not finished: the next start picks it up
    with running_daemon(state) as second:
        ended = second.wait_for("long", ("failed",))
        assert ended["hosts"][0]["set_aside"]
        starting = [e for e in second.events("sweep.starting") if e["sweep"] == "long"][-1]
        assert starting["resumed"] is True


def test_a_second_daemon_on_the_same_state_dir_is_refused(daemon: DaemonProcess) -> None:
    second = subprocess.run(
        [*ORCHESTRATOR, "daemon", "--state-dir", str(daemon.state_dir), "--socket", "/tmp/x"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert second.returncode == 1
    assert "another daemon is running on" in second.stderr
    assert daemon.cli("status", "--json").returncode == 0
