"""Tasks the daemon starts and does not wait for (webhooks, crash-recovery restores), kept so
that shutdown can give them a bounded chance to finish."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

ABANDON_WAIT_S = 5.0


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def drain(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for what is still running, then cancel the rest."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=timeout_s)
        for task in late:
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=ABANDON_WAIT_S)
