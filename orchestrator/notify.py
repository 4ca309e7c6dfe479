"""The optional webhook: a JSON summary POSTed when a sweep ends or fails.

An operator who queued sweeps in the evening learns in the morning (chat, pager) how the night
went without logging in. The notification is best effort: it has its own timeout, errors are
logged, and nothing about it can change a sweep's outcome or delay the next one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import aiohttp

from orchestrator import __version__
from orchestrator.log import get_logger

DEFAULT_TIMEOUT_S = 10.0


def sweep_summary(results: Mapping[str, Any], *, error: str | None = None) -> dict[str, Any]:
    """A short account of a sweep from its results document (``Store.sweep_results``).

    Counts use each trial's latest attempt (a retried trial counts once, as it ended); every
    failed attempt is listed with its cause so the reader sees what went wrong.
    """
    latest: dict[tuple[str, str], str] = {}
    failures: list[dict[str, Any]] = []
    for trial in results.get("trials", []):
        latest[(trial["key"], trial["host"])] = trial["state"]
        if trial["state"] == "failed":
            failures.append(
                {
                    "key": trial["key"],
                    "host": trial["host"],
                    "attempt": trial["attempt"],
                    "cause": trial["cause"],
                }
            )
    state = results.get("state")
    summary: dict[str, Any] = {
        "event": "sweep.failed" if state == "failed" or error else "sweep.finished",
        "sweep": results.get("sweep"),
        "id": results.get("id"),
        "state": state,
        "started_at": results.get("started_at"),
        "finished_at": results.get("finished_at"),
        "trials": dict(sorted(Counter(latest.values()).items())),
        "failed_attempts": failures,
        "hosts_set_aside": [
            {"name": h["name"], "reason": h["set_aside"]}
            for h in results.get("hosts", [])
            if h.get("set_aside")
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
