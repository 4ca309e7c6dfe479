"""Hosts have one owner, on REAL systemd + journald + sshd (issue 24, item 5): the faults whose
consequences are systemd's.

A holder (``orchestrator run``, store A) is SIGKILLed mid-trial: its drop-in stays installed and
the unit keeps running the trial's config under systemd. A second controller (store B) waits out
the dead holder's lease, takes it over (generation 2), and before anything else removes the stale
drop-in, reloads systemd and restarts the unit on its own files; then it runs its own sweep and
restores, and the host ends byte for byte as found. A holder SIGSTOPped past its expiry and
resumed makes no further change: its fence refuses (``lease-lost``) while the other sweep runs.

The lease lives in the host's own ``/run`` (a tmpfs of its mount namespace), read here over SSH.
Expiries are 3 s, the simulated server runs at a twentieth of real time, and every moment is
found in the stores' events, never by sleeping blindly.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.host.dropin import DROPIN_NAME
from orchestrator.host.lease import LEASE_DIR
from orchestrator.sim.gpu import GpuHostSpec, GpuState
from tests.realhost.realhost import RealHost
from tests.realhost.test_lifecycle_real import UNIT, _install_host
from tests.soak import harness
from tests.soak.harness import RunnerProcess

EXPIRY_S = 3.0
REACH_S = 60.0
FINISH_S = 120.0
SIM = {"time_scale": 0.05, "load_s": 10.0, "warmup_s": 2.0, "stop_delay_s": 2.0}
KNOBS = {
    "algorithm": {"flag": "--speculative-algorithm"},
    "block": {"flag": "--speculative-num-draft-tokens"},
    "window": {"flag": "--speculative-draft-window-size"},
}
CONFIGS = (
    {"algorithm": "DFLASH", "block": 16, "window": 2048},
    {"algorithm": "DFLASH", "block": 8},
)


def install(host: RealHost) -> None:
    """The simulated server as the unit's program, running as found; its GPU memory released
    a tenth of a second after its process dies (a second by default, paid at every stop)."""
    gpu_dir = _install_host(host, SIM)
    GpuState(gpu_dir).write_spec(GpuHostSpec.build(str(gpu_dir.resolve()), release_lag_s=0.1))
    host.ssh(["systemctl", "start", UNIT])


def sweep_file(host: RealHost, path: Path, *, configs: int) -> Path:
    """One quick sweep: ``configs`` configs, no baseline, one matrix cell, no coding."""
    sweep = {
        "name": path.stem,
        "hosts": [
            {
                "name": host.name,
                "address": host.address,
                "port": host.port,
                "user": "root",
                "identity_file": str(host.identity_file),
                "known_hosts": str(host.known_hosts),
                "base_url": f"http://{host.address}:30000",
            }
        ],
        "server": {"unit": UNIT, "model": "kimi-k2.6", "knobs": KNOBS},
        "baseline": False,
        "configs": list(CONFIGS[:configs]),
        "benchmark": {
            "contexts": [60],
            "concurrency": [1],
            "max_tokens": 16,
            "rounds": 1,
            "warmup_requests": 0,
        },
        "objective": {"metric": "output_tok_s", "context": 60, "concurrency": 1},
        "timeouts": {"connect": 15, "stop": 30, "memory_release": 20, "ready": 40, "request": 60},
        "policy": {
            "trial_retries": 0,
            "restore": "as-found",
            "hosts_busy": "wait",
            "lease_expiry": EXPIRY_S,
        },
    }
    return harness.write_sweep(path, sweep)


async def holder_in_a_trial(
    host: RealHost, tmp_path: Path, name: str
) -> tuple[RunnerProcess, harness.Event]:
    """The first controller (store ``a.db``) on a two-config sweep, once its first trial's
    server is ready: its drop-in installed and the unit running the trial's config."""
    db = tmp_path / "a.db"
    runner = await RunnerProcess.start(
        sweep_file(host, tmp_path / f"{name}.yaml", configs=2), db, tmp_path / "logs", "a"
    )
    try:
        ready = await harness.wait_for_event(
            db, runner, ["server.ready"], after_id=0, timeout=REACH_S
        )
    except BaseException:
        await runner.kill()
        raise
    return runner, ready


async def taker(host: RealHost, tmp_path: Path) -> RunnerProcess:
    """The second controller (store ``b.db``) on a one-config sweep of its own."""
    return await RunnerProcess.start(
        sweep_file(host, tmp_path / "taker.yaml", configs=1),
        tmp_path / "b.db",
        tmp_path / "logs",
        "b",
    )


@dataclass(frozen=True)
class UnitAsFound:
    """What the unit must be given back as: every path under /etc/systemd/system (files byte
    for byte, directories by name), what systemd says of it, and the program it runs."""

    tree: dict[str, bytes | None]
    shown: dict[str, str]
    argv: list[str]

    @classmethod
    def read(cls, host: RealHost) -> UnitAsFound:
        tree = {
            str(p.relative_to(host.unit_dir)): p.read_bytes() if p.is_file() else None
            for p in sorted(host.unit_dir.rglob("*"))
        }
        return cls(tree, show(host), running_argv(host))

    def differences(self, host: RealHost) -> list[str]:
        """What is not as found, in words (empty when the host is given back whole)."""
        now = UnitAsFound.read(host)
        problems = [
            f"{path}: {'missing' if path not in now.tree else 'changed or added'}"
            for path in sorted(set(self.tree) | set(now.tree))
            if self.tree.get(path, b"?") != now.tree.get(path, b"?")
        ]
        if now.shown != self.shown:
            problems.append(f"systemd shows {now.shown}, found {self.shown}")
        if now.argv != self.argv:
            problems.append(f"the unit runs {now.argv}, found {self.argv}")
        return problems


def show(host: RealHost) -> dict[str, str]:
    """systemd's own view: running or not, and which drop-ins it merged."""
    out = host.ssh(["systemctl", "show", "-p", "ActiveState,DropInPaths,MainPID", UNIT])
    fields = dict(line.split("=", 1) for line in out.stdout.decode().splitlines() if "=" in line)
    return {k: v for k, v in fields.items() if k != "MainPID"}


def running_argv(host: RealHost) -> list[str]:
    """The command line of the unit's main process (the host shares our pid namespace)."""
    out = host.ssh(["systemctl", "show", "-p", "MainPID", "--value", UNIT])
    pid = int(out.stdout.decode().strip())
    assert pid > 0, "the unit runs no process"
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")


def lease(host: RealHost) -> tuple[int, dict[str, Any]]:
    """The newest generation on the host and its holder file."""
    names = host.ssh(["ls", "-1", LEASE_DIR]).stdout.decode().split()
    newest = sorted(names)[-1]
    text = host.ssh(["cat", f"{LEASE_DIR}/{newest}/holder.json"]).stdout.decode()
    return int(newest.removeprefix("gen-")), json.loads(text)


def moved_elsewhere(host: RealHost) -> dict[str, Any]:
    """The dead holder's lease rewritten as if it ran on another controller machine, so only
    its expiry (not a pid lookup here) tells that it is gone."""
    token, record = lease(host)
    record["holder"]["controller"] = "ctl-elsewhere"
    path = f"{LEASE_DIR}/gen-{token:010d}/holder.json"
    host.ssh(["sh", "-c", f"printf %s {shlex.quote(json.dumps(record))} > {path}"])
    return record


def events(db: Path, *kinds: str) -> list[harness.Event]:
    return [e for e in harness.events_after(db, 0) if not kinds or e.kind in kinds]


def attempts(db: Path) -> list[tuple[str, str | None]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return [(r[0], r[1]) for r in conn.execute("SELECT state, cause FROM attempts ORDER BY id")]


def backed_up_files(db: Path) -> dict[str, Any]:
    """The unit's files as the sweep of ``db`` found them (its backup in the store)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (files,) = conn.execute("SELECT files FROM unit_backups").fetchone()
    found: dict[str, Any] = json.loads(files)
    return found


async def test_a_killed_holder_is_taken_over_and_the_unit_restored_on_real_systemd(
    real_host: RealHost, tmp_path: Path
) -> None:
    install(real_host)
    as_found = UnitAsFound.read(real_host)
    db_b = tmp_path / "b.db"
    holder, _ = await holder_in_a_trial(real_host, tmp_path, "killed")
    await holder.kill()
    # Dead mid-trial: systemd still runs the trial's config from the dead sweep's drop-in.
    assert DROPIN_NAME in show(real_host)["DropInPaths"]
    assert show(real_host)["ActiveState"] == "active"
    assert running_argv(real_host) != as_found.argv
    dead = moved_elsewhere(real_host)

    second = await taker(real_host, tmp_path)
    assert await second.finish(FINISH_S) == 0, second.log_tail()
    assert "Traceback" not in second.log_tail(200_000)

    (over,) = events(db_b, "lease.taken_over")
    assert over.fields["old_holder"]["sweep"] == "killed" and over.fields["old_token"] == 1
    assert over.fields["old_holder"]["pid"] == holder.process.pid
    assert over.fields["token"] == 2 and over.fields["holder_gone"] is False
    assert over.ts >= dead["expires_at"]  # waited out the expiry
    kinds = [e.kind for e in events(db_b)]
    # The stale drop-in gone and the unit restarted on its own files before anything else.
    clearing, cleared = kinds.index("takeover.clearing"), kinds.index("takeover.cleared")
    # B waits for the expiry first when the dead lease had not yet expired as it started (how
    # long the kill and B's start took decides which), then takes it over.
    taking = ["lease.taken", "lease.taken_over"]
    assert kinds[:clearing] in (
        ["sweep.started", *taking], ["sweep.started", "lease.waiting", *taking]
    ), kinds
    restart = kinds[clearing:cleared]
    assert {"unit.stopping", "unit.starting", "restore.serving"} <= set(restart), restart
    assert cleared < kinds.index("preflight") < kinds.index("dropin.installed")
    assert events(db_b, "takeover.cleared")[0].fields["sweep"] == "killed"
    found = backed_up_files(db_b)  # what B read as found: the drop-in already gone
    assert [found[path] for path in found if path.endswith(DROPIN_NAME)] == [None]
    assert attempts(db_b) == [("done", None)]
    assert events(db_b, "sweep.finished")[-1].fields["state"] == "done"

    assert as_found.differences(real_host) == []
    token, record = lease(real_host)
    assert token == 2 and record["released_at"] is not None
    assert record["took_over_from"]["sweep"] == "killed"


async def test_a_stalled_holder_resumed_changes_nothing_on_real_systemd(
    real_host: RealHost, tmp_path: Path
) -> None:
    install(real_host)
    as_found = UnitAsFound.read(real_host)
    db_a, db_b = tmp_path / "a.db", tmp_path / "b.db"
    stalled, ready = await holder_in_a_trial(real_host, tmp_path, "stalled")
    os.kill(stalled.process.pid, signal.SIGSTOP)
    try:
        _, record = lease(real_host)
        second = await taker(real_host, tmp_path)
        cleared = await harness.wait_for_event(
            db_b, second, ["takeover.cleared"], after_id=0, timeout=REACH_S
        )
    finally:
        os.kill(stalled.process.pid, signal.SIGCONT)
    # Its own lease: a live process here, so only its expiry let the taker in.
    (over,) = events(db_b, "lease.taken_over")
    assert over.ts >= record["expires_at"] and over.fields["holder_gone"] is False
    assert cleared.fields["sweep"] == "stalled"
    assert await second.finish(FINISH_S) == 0, second.log_tail()
    assert await stalled.finish(FINISH_S) != 0
    after = [e.kind for e in events(db_a) if e.id > ready.id]
    changes = {"dropin.installed", "unit.stopping", "unit.starting", "restore.begin"}
    assert not [kind for kind in after if kind in changes], after
    # The trial in flight when the taker restarted the unit failed by the take-over, not as
    # a crash of its server: every failed attempt of the stalled holder says lease-lost.
    failed = [cause for state, cause in attempts(db_a) if state == "failed"]
    assert failed and set(failed) == {"lease-lost"}, attempts(db_a)
    (skipped,) = events(db_a, "restore.skipped")
    assert "lease lost" in skipped.fields["why"]
    assert attempts(db_b) == [("done", None)]
    assert "Traceback" not in stalled.log_tail(200_000)
    assert as_found.differences(real_host) == []
