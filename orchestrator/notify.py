"""The optional webhook: a JSON summary POSTed when a sweep ends or fails.

An operator who queued sweeps in the evening learns in the morning (chat, pager) how the night
went without logging in. The notification is best effort: it has its own timeout, errors are
logged, and nothing about it can change a sweep's outcome or delay the next one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp

from orchestrator import __version__
from orchestrator.log import get_logger
from orchestrator.store import JsonObject, SweepResults

DEFAULT_TIMEOUT_S = 10.0


def sweep_summary(results: SweepResults, *, error: str | None = None) -> JsonObject:
    """A short account of a sweep as the webhook's JSON document.

    Counts use each trial's latest attempt (a retried trial counts once, as it ended); every
    failed attempt is listed with its cause and its config by knob values, so the reader sees
    what went wrong.
    """
    summary: JsonObject = {
        "event": "sweep.failed" if results.state == "failed" or error else "sweep.finished",
        "sweep": results.sweep,
        "id": results.id,
        "state": results.state,
        "started_at": results.started_at,
        "finished_at": results.finished_at,
        "trials": results.state_counts(),
        "failed_attempts": [
            {
                "key": t.key,
                "host": t.host,
                "config": t.label,
                "attempt": t.attempt,
                "cause": t.cause,
            }
            for t in results.failed_attempts()
        ],
        "hosts_set_aside": [
            {"name": h.name, "reason": h.set_aside} for h in results.hosts if h.set_aside
        ],
        "orchestrator": __version__,
    }
    if error is not None:
        summary["error"] = error
    return summary


async def post_webhook(
    url: str, document: Mapping[str, Any], *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> bool:
    """POST ``document`` as JSON; True on a 2xx answer. Never raises (except cancellation)."""
    log = get_logger(webhook=url, sweep=document.get("sweep"))
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.post(
                url,
                json=dict(document),
                headers={"User-Agent": f"orchestrator/{__version__}"},
            ) as response,
        ):
            if 200 <= response.status < 300:
                log.info("webhook.sent", status=response.status)
                return True
            log.warning("webhook.refused", status=response.status)
            return False
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        log.warning("webhook.failed", error=f"{type(exc).__name__}: {exc}")
        return False
