"""The webhook endpoint is down when a sweep ends: one endpoint accepts the connection and never
answers, another refuses it. The daemon posts the summary in the background with its own
timeout: the sweep's outcome is unchanged and the next sweep starts at once, not after the
webhook gives up."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import structlog
import yaml

from orchestrator.daemon import Daemon
from orchestrator.sdnotify import Notifier
from tests.faults.harness import (
    HEALTHY,
    OTHER,
    assert_restored,
    fault_host,
    poll_until,
    sweep_yaml,
)

ENDPOINT_ADDRESS = "127.0.0.135"
WEBHOOK_TIMEOUT_S = 8.0


@contextlib.asynccontextmanager
async def silent_endpoint() -> AsyncIterator[tuple[str, list[float]]]:
    """A TCP server that accepts connections and never says a word; yields its URL and the
    times it accepted a connection."""
    accepted: list[float] = []
    held: list[asyncio.StreamWriter] = []

    async def hold(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(time.time())
        held.append(writer)

    server = await asyncio.start_server(hold, ENDPOINT_ADDRESS, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://{ENDPOINT_ADDRESS}:{port}/hook", accepted
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def refused_url() -> str:
    """A URL on a port nothing listens on (bound, then closed)."""
    import socket

    with socket.socket() as sock:
        sock.bind((ENDPOINT_ADDRESS, 0))
        port = sock.getsockname()[1]
    return f"http://{ENDPOINT_ADDRESS}:{port}/hook"


def with_webhook(text: str, url: str) -> str:
    document: dict[str, Any] = yaml.safe_load(text)
    document["notify"] = {"webhook": url}
    return yaml.safe_dump(document, sort_keys=False)


class ReadySignal(Notifier):
    """The daemon's sd_notify READY=1, seen as an asyncio event."""

    def __init__(self) -> None:
        super().__init__("")
        self.is_ready = asyncio.Event()

    def ready(self, status: str | None = None) -> bool:
        self.is_ready.set()
        return super().ready(status)


async def test_webhook_endpoint_down(tmp_path: Path) -> None:
    async with fault_host(tmp_path, "127.0.0.134") as host, silent_endpoint() as (silent, hits):
        first = with_webhook(sweep_yaml(host, "hook-silent", [HEALTHY]), silent)
        second = with_webhook(sweep_yaml(host, "hook-refused", [OTHER]), refused_url())
        ready = ReadySignal()
        daemon = Daemon(tmp_path / "state", webhook_timeout_s=WEBHOOK_TIMEOUT_S, notifier=ready)
        with structlog.testing.capture_logs() as logs:
            running = asyncio.create_task(daemon.run())
            try:
                await asyncio.wait_for(ready.is_ready.wait(), 30)
                await daemon.api.submit(first, filename="first.yaml", replace=False, workloads={})
                await daemon.api.submit(second, filename="second.yaml", replace=False, workloads={})

                async def both_ended() -> bool:
                    sweeps = await daemon.store.list_sweeps()
                    return len(sweeps) == 2 and all(s.state in ("done", "failed") for s in sweeps)

                async def refused_logged() -> bool:  # the refused endpoint fails at once
                    return any(e["event"] == "webhook.failed" for e in logs)

                await poll_until(both_ended, timeout=90)
                await poll_until(refused_logged, timeout=WEBHOOK_TIMEOUT_S / 2)
                by_name = {s.name: s for s in await daemon.store.list_sweeps()}
                results = {
                    name: await daemon.store.sweep_results(record.id)
                    for name, record in by_name.items()
                }
            finally:
                daemon.stop()
                stopping = time.monotonic()
                await asyncio.wait_for(running, 30)
                stopped_after = time.monotonic() - stopping
        await assert_restored(host)

    silent_sweep, refused_sweep = by_name["hook-silent"], by_name["hook-refused"]
    assert silent_sweep.state == "done" and refused_sweep.state == "done"
    assert [t["state"] for t in results["hook-silent"]["trials"]] == ["done"]
    assert [t["state"] for t in results["hook-refused"]["trials"]] == ["done"]
    # the first sweep's webhook was attempted and hung ...
    assert silent_sweep.finished_at is not None and hits
    assert hits[0] >= silent_sweep.finished_at - 0.5
    # ... while the next sweep started while it still hung: before its timeout could end it
    assert refused_sweep.started_at is not None
    assert refused_sweep.started_at < hits[0] + WEBHOOK_TIMEOUT_S
    failures = [e for e in logs if e["event"] == "webhook.failed"]
    assert any(e["webhook"].startswith(f"http://{ENDPOINT_ADDRESS}") for e in failures)
    assert stopped_after < WEBHOOK_TIMEOUT_S  # a hanging webhook does not hold the shutdown
