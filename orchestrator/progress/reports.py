"""The daemon's record of each running sweep's progress (:class:`SweepProgress`): what its API
(``status``) and its ``STATUS=`` line say of the sweep while it runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from orchestrator.progress.snapshot import ProgressSnapshot
from orchestrator.progress.tracker import SweepShape, SweepTracker
from orchestrator.sweepfile import Sweep


class SweepProgress:
    """The runner's progress reports for one sweep: each host's latest fields (``status``'s
    ``current``, ``STATUS=``), and the tracker behind the sweep's progress and ETA (the same
    numbers the foreground display shows)."""

    def __init__(
        self,
        shape: SweepShape | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.hosts: dict[str, dict[str, Any]] = {}
        self.clock, self.wall_clock = clock, wall_clock
        self.tracker = SweepTracker(shape or SweepShape(), started=clock())

    @classmethod
    def for_sweep(
        cls,
        sweep: Sweep,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> SweepProgress:
        return cls(SweepShape.of(sweep), clock=clock, wall_clock=wall_clock)

    def update(self, host: str, **fields: Any) -> None:
        self.tracker.update(host, fields, self.clock())
        view = self.hosts.setdefault(host, {})
        # The typed point is the tracker's; the JSON fields keep its metrics (last_point).
        view.update((name, value) for name, value in fields.items() if name != "point")
        view["updated_at"] = self.wall_clock()

    def snapshot(self) -> ProgressSnapshot:
        return self.tracker.snapshot(self.clock(), self.wall_clock())

    def describe(self) -> str:
        parts = []
        for host, view in sorted(self.hosts.items()):
            trial = view.get("config") or view.get("trial") or "-"  # knob values, not a key
            counted = f" {view['done']}/{view['total']}" if "total" in view else ""
            parts.append(f"{host} {trial} {view.get('step', '')}{counted}".rstrip())
        return ", ".join(parts)
