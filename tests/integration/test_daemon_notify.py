"""What the daemon tells others: systemd (sd_notify) and the sweep's webhook."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from orchestrator import store as store_types
from orchestrator.notify import sweep_summary
from orchestrator.store import NewTrial, Store
from tests.integration.daemon_proc import (
    HostEntry,
    UntrustedSSHServer,
    clock_a_minute_ago,
    free_port,
    running_daemon,
    sweep_yaml,
)


@pytest.fixture(scope="module")
def untrusted() -> Iterator[UntrustedSSHServer]:
    with UntrustedSSHServer() as server:
        yield server


# --- sd_notify ------------------------------------------------------------------------------


def test_sd_notify_ready_watchdog_status_stopping(
    tmp_path: Path, untrusted: UntrustedSSHServer
) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify_path = tmp_path / "notify.sock"
    listener.bind(str(notify_path))
    listener.settimeout(0.1)
    env = {"NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "400000"}
    messages: list[str] = []
    done = threading.Event()

    def drain() -> None:
        # Read all the time, as systemd does: a datagram queue holds only ~10 messages, and
        # WATCHDOG=1 every 0.2 s fills it while the test waits for a CLI run.
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                messages.append(listener.recv(4096).decode())

    def receive_until(predicate: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(predicate in m for m in list(messages)):
            assert time.monotonic() < deadline, f"no {predicate!r} in {messages}"
            time.sleep(0.05)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        with running_daemon(tmp_path / "state", env=env) as daemon:
            receive_until("READY=1")
            ready = next(m for m in messages if "READY=1" in m)
            assert f"MAINPID={daemon.process.pid}" in ready  # type: ignore[union-attr]
            sweep = tmp_path / "n.yaml"
            sweep.write_text(
                sweep_yaml(
                    "notified",
                    [HostEntry("n", untrusted.port)],
                    tmp_path / "keys",
                    not_before=clock_a_minute_ago(),
                )
            )
            assert daemon.cli("submit", str(sweep)).returncode == 0
            receive_until("STATUS=1 running")
            count = sum(m.count("WATCHDOG=1") for m in list(messages))
            # Three more pings while the sweep runs (one every 0.2 s): waited for, not slept
            # for, so a loaded machine that delays them cannot fail it; 30 s catches a stop.
            deadline = time.monotonic() + 30
            while sum(m.count("WATCHDOG=1") for m in list(messages)) - count < 3:
                assert time.monotonic() < deadline, messages[-5:]
                time.sleep(0.05)
            status = [m for m in messages if "STATUS=1 running" in m][-1]
            assert "notified" in status
            daemon.terminate()
            receive_until("STOPPING=1")
    finally:
        done.set()
        reader.join(5)
        listener.close()


# --- the webhook ----------------------------------------------------------------------------


async def test_webhook_gets_the_summary_and_a_down_webhook_changes_nothing(
    tmp_path: Path, untrusted: UntrustedSSHServer
) -> None:
    received: list[dict[str, object]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    keys = tmp_path / "keys"
    try:
        with running_daemon(tmp_path / "state") as daemon:
            for name, url in (
                ("hooked", f"http://127.0.0.1:{port}/hook"),
                ("hook-down", f"http://127.0.0.1:{free_port()}/hook"),
            ):
                path = tmp_path / f"{name}.yaml"
                host = HostEntry(f"h-{name}", untrusted.port)
                path.write_text(sweep_yaml(name, [host], keys, webhook=url))
                result = await asyncio.to_thread(daemon.cli, "submit", str(path))
                assert result.returncode == 0
            for name in ("hooked", "hook-down"):
                # Each sweep's only host is set aside: nothing ran, so it ends failed.
                await asyncio.to_thread(daemon.wait_for, name, ("failed",))
            deadline = time.monotonic() + 10
            while not received or not daemon.events("webhook.failed"):
                assert time.monotonic() < deadline, (received, daemon.log()[-2000:])
                await asyncio.sleep(0.1)
    finally:
        await runner.cleanup()
    (summary,) = received
    assert summary["event"] == "sweep.failed" and summary["sweep"] == "hooked"
    assert summary["state"] == "failed"
    assert summary["trials"] == {"skipped": 1}
    assert summary["hosts_set_aside"][0]["name"] == "h-hooked"  # type: ignore[index]
    json.dumps(summary)


async def test_webhook_summary_counts_latest_attempts_and_names_configs(tmp_path: Path) -> None:
    """A retried trial counts once, as it ended; each failed attempt names its config by its
    knob values (the summary is built from the typed results, JSON only for the POST)."""
    async with await Store.open(tmp_path / "store.db") as store:
        sweep = (await store.submit_sweep("night", "name: night\n")).sweep
        await store.add_hosts(sweep.id, [store_types.HostEntry("gpu-a", "h200")])
        base, b8 = await store.add_trials(
            sweep.id,
            [
                NewTrial("k0", "gpu-a", {}, 0, is_baseline=True),
                NewTrial("k1", "gpu-a", {"algorithm": "DDTREE", "budget": 8}, 1),
            ],
        )
        await store.finish_attempt((await store.start_attempt(base.id)).id, "done")
        await store.finish_attempt((await store.start_attempt(b8.id)).id, "failed", cause="oom")
        await store.finish_attempt((await store.start_attempt(b8.id)).id, "done")
        await store.set_sweep_state(sweep.id, "done")
        summary = sweep_summary(await store.results(sweep.id))
    assert summary["trials"] == {"done": 2}
    assert summary["failed_attempts"] == [
        {
            "key": "k1",
            "host": "gpu-a",
            "config": "algorithm=DDTREE budget=8",
            "attempt": 1,
            "cause": "oom",
        }
    ]
    assert summary["event"] == "sweep.finished"
    json.dumps(summary, allow_nan=False)
