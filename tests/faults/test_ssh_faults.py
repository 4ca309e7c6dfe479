"""The SSH connection to a host drops (no disconnect message) in the middle of each step of a
trial, or the host freezes. Idempotent commands are re-run on a fresh connection, a start whose
outcome is unknown is never repeated (the unit's InvocationID says whether it happened), the
sweep goes on, and the host ends as it was found."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import structlog

from orchestrator.daemon import restore_from_backup
from orchestrator.host import connect
from orchestrator.host.ssh import SSHSettings
from orchestrator.store import Store
from orchestrator.store.records import EventRecord
from tests.faults.harness import (
    HEALTHY,
    OTHER,
    FaultHost,
    assert_restored,
    fault_host,
    point_count,
    run,
    sweep_yaml,
)

STARTED_LINE = "Started SGLang server"


def record_drops(host: FaultHost) -> list[float]:
    """The times the simulated sshd dropped every connection (wraps its method, same effect)."""
    sshd = host.cluster.hosts[0].sshd
    assert sshd is not None
    drops: list[float] = []
    drop = sshd.drop_connections

    def recorded() -> None:
        drops.append(time.time())
        drop()

    sshd.drop_connections = recorded  # type: ignore[method-assign]
    return drops


def point_windows(db: Path) -> list[tuple[float, float]]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT started_at, finished_at FROM points ORDER BY id").fetchall()
    return [(float(a), float(b)) for a, b in rows]


PHASE_EVENTS = {
    "stop": ("unit.stopping", "unit.stopped"),
    "start": ("unit.starting", "unit.started"),
    "memory-wait": ("unit.stopped", "memory.released"),
    "readiness": ("unit.started", "server.ready"),
}


def phase_windows(events: list[EventRecord], begin: str, end: str) -> list[tuple[float, float]]:
    """(begin, end) times of each phase, from the events the lifecycle stored."""
    windows, opened = [], None
    for event in events:
        if event.kind == begin:
            opened = event.ts
        elif event.kind == end and opened is not None:
            windows.append((opened, event.ts))
            opened = None
    return windows


DROPS: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    # phase: (address, ssh_drop fault, server settings)
    "stop": ("127.0.0.128", {"command": "systemctl stop", "delay_s": 0.3}, {"stop_delay_s": 30}),
    "start": ("127.0.0.129", {"command": "systemctl start", "delay_s": 0.0}, {}),
    # only the memory wait's poll asks for exactly these two properties
    "memory-wait": (
        "127.0.0.130",
        {"command": "show -p ActiveState,MainPID,ControlGroup ", "delay_s": 0.0},
        {},
    ),
    "readiness": ("127.0.0.131", {"command": "--follow", "delay_s": 0.2}, {"load_s": 20}),
    "point": (
        "127.0.0.132",
        {"command": "--lines=1", "times": 2, "delay_s": 0.15},
        {"perf": {"step_base_ms": 600}},  # 30 ms a step: the point lasts ~0.5 s
    ),
}


@pytest.mark.parametrize("phase", list(DROPS))
async def test_ssh_drop(tmp_path: Path, phase: str) -> None:
    address, drop, server = DROPS[phase]
    settings: dict[str, Any] = {"ssh_drop": drop}
    if phase == "memory-wait":
        settings["memory_release_lag_s"] = 1.0
    async with fault_host(tmp_path, address, settings=settings, server=server) as host:
        drops = record_drops(host)
        journal_before = await host.journal()
        done = await run(tmp_path, sweep_yaml(host, f"drop-{phase}", [HEALTHY, OTHER]))

        assert drops, "the fault never fired"
        for config in (HEALTHY, OTHER):  # both trials measured: the sweep went on
            trial = done.trial(config)
            assert trial["state"] == "done", trial
            assert point_count(trial) == 1
        # no duplicate start: one per trial plus the restore's, each a new invocation
        journal = (await host.journal())[len(journal_before) :]
        assert sum(STARTED_LINE in line for line in journal) == 3, journal
        assert len(done.of_kind("unit.started")) == 3
        invocations = {e["invocation"] for e in done.of_kind("unit.started")}
        assert len(invocations) == 3
        # the drop fell inside the phase it was aimed at
        if phase == "point":
            windows = point_windows(tmp_path / "orchestrator.db")
        else:
            windows = phase_windows(done.events, *PHASE_EVENTS[phase])
        assert any(start <= t <= end for t in drops for start, end in windows), (drops, windows)
        await assert_restored(host)


def quick_keepalive(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keepalives every second and two short-spaced connect attempts for the hosts the runner
    opens: the same detection and failed reconnects as the defaults (5 s x 3 keepalives, five
    attempts with backoff up to 8 s, for the trial and again for the restore), in seconds
    instead of most of a minute."""
    ssh_settings = connect.ssh_settings

    def quick(host: Any, **kwargs: Any) -> SSHSettings:
        return dataclasses.replace(
            ssh_settings(host, **kwargs),
            keepalive_interval=1.0,
            keepalive_count_max=3,
            reconnect_attempts=2,
            reconnect_backoff_max=1.0,
        )

    monkeypatch.setattr(connect, "ssh_settings", quick)


async def test_frozen_host_is_caught_by_keepalive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host stops answering during a stop and never thaws: the SSH keepalive notices (no
    command timeout would: the stop may take minutes), reconnects fail, the trial is failed
    with ``host-unreachable`` and the host set aside, all in bounded time. The backup stays
    pending; once the host answers again, the restore puts it back byte-identical."""
    quick_keepalive(monkeypatch)
    address = "127.0.0.133"
    frozen = {"command": "systemctl stop"}
    async with fault_host(
        tmp_path, address, settings={"frozen": frozen}, server={"stop_delay_s": 30}
    ) as host:
        text = sweep_yaml(
            host, "frozen", [HEALTHY], timeouts={"connect": 2, "stop": 120, "ready": 30}
        )
        with structlog.testing.capture_logs() as logs:
            done = await run(tmp_path, text, deadline_s=110)  # the stop's own bound is 120 s

        failed = done.trial(HEALTHY)
        # not stop-timeout: the connection was declared dead (keepalive), the stop's bound
        # never ran out; reconnecting to a host that accepts TCP but never greets failed
        assert (failed["state"], failed["cause"]) == ("failed", "host-unreachable")
        assert "cannot connect" in failed["evidence"]["message"], failed["evidence"]
        events = [e["event"] for e in logs]
        assert "ssh.disconnected" in events and "ssh.reconnect_wait" in events
        assert events.index("ssh.disconnected") < events.index("ssh.reconnect_wait")
        (record,) = done.results["hosts"]
        assert (record["set_aside"] or "").startswith("unreachable"), record
        assert host.unit_files() != host.unit_files_before  # our drop-in is still there

        sshd = host.cluster.hosts[0].sshd
        assert sshd is not None
        await sshd.thaw()
        async with await Store.open(tmp_path / "orchestrator.db") as store:
            (backup,) = await store.pending_restores(sweep_id=done.outcome.sweep_id)
            sweep = await store.get_sweep(done.outcome.sweep_id)
            await asyncio.wait_for(restore_from_backup(store, sweep, backup), 60)
            assert not await store.pending_restores(sweep_id=done.outcome.sweep_id)
        await assert_restored(host)


async def test_an_sftp_write_met_by_a_drop_is_written_again(tmp_path: Path) -> None:
    """The host's sshd goes away as an SFTP write starts: the call meets the drop as asyncssh's
    ChannelOpenError on a closed connection (or SFTPConnectionLost mid-call), not as
    ConnectionLost. The write is idempotent (its temp file is written again, then renamed), so
    it is made again on a new connection, as a dropped command is re-run. It was an error of the
    file: a soak's SSH outage during a lease's holder write set the host aside for good."""
    from orchestrator.host.ssh import SSHTransport
    from tests.soak import harness as soak
    from tests.soak.soak import ssh_outage

    async with soak.sim_hosts(
        tmp_path / "sim", ["127.0.0.133"], defaults=soak.fast_host_defaults(0.1)
    ) as cluster:
        host = cluster.hosts[0]
        transport = SSHTransport(
            SSHSettings(
                name=host.name,
                address=host.address,
                port=host.port,
                identity_file=str(cluster.key_path),
                known_hosts=str(cluster.known_hosts),
                reconnect_backoff_initial=0.1,
            )
        )
        try:
            await transport.run(["true"], timeout=10)
            outage = asyncio.create_task(ssh_outage(host, 0.3))
            await asyncio.sleep(0)  # the listener closed, every connection aborted
            await transport.write_file_atomic("/run/holder.json", b"{}", timeout=30)
            await outage
            assert (host.root / "run/holder.json").read_bytes() == b"{}"
            assert transport.connection_generation == 2
        finally:
            await transport.close()
