"""What a person at a terminal sees of a foreground sweep while it runs, on stderr.

The live display has one row per host: the config in its own words (``budget=8``, never a trial
key), which trial it is (of the host's plan under a grid, of its host type's restart budget
under a search), the step, and points done of the trial's total; its title has the elapsed time
and the sweep's ETA as a clock time, the line below it the best config so far by the sweep's
objective. The numbers come from :class:`~orchestrator.progress.tracker.SweepTracker` (the
daemon's ``status`` shows the same). It redraws four times a second, from the state the runner
last reported. On a TTY it is a rich Live table; elsewhere (CI, a pipe) it stays silent and the
JSON log carries the same facts. How the sweep ended is printed after it
(:mod:`orchestrator.verbs.outcome`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orchestrator.progress.snapshot import ProgressSnapshot, clock_time, duration
from orchestrator.progress.tracker import PlannedTrial, SweepShape, SweepTracker

STEP_WORDS = {
    "preflight": "preflight",
    "reconfigure": "restart + load",
    "restore": "restoring",
    "done": "finished",
}
"""The runner's step names as the display shows them; the others (``ctx 60 x c4``,
``coding fib``) read as they are."""


def _cells(*values: str) -> list[Text]:
    """Table cells as plain text: a config or an excerpt line is never read as rich markup."""
    return [Text(value) for value in values]


class LiveProgress:
    """Implements the runner's ``Progress``; use as a context manager around the sweep.

    ``shape`` is what is known ahead (the plan's trials, the restart cap, ``finish_by``, the
    objective); a bare list of planned trials is a grid without any of the rest."""

    def __init__(
        self,
        trials: Sequence[PlannedTrial] | SweepShape,
        *,
        sweep: str = "",
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.console = console or Console(stderr=True)
        self.sweep = sweep
        self.clock, self.wall_clock = clock, wall_clock
        shape = trials if isinstance(trials, SweepShape) else SweepShape(tuple(trials))
        self.tracker = SweepTracker(shape, started=clock())
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> LiveProgress:
        if self.console.is_terminal:
            # get_renderable: the refresh thread draws a fresh frame each time, so the elapsed
            # time and the ETA move between the runner's reports.
            self._live = Live(
                console=self.console, get_renderable=self.render, refresh_per_second=4
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(None, None, None)

    def update(self, host: str, **fields: Any) -> None:
        with self._lock:
            self.tracker.update(host, fields, self.clock())

    def snapshot(self) -> ProgressSnapshot:
        with self._lock:
            return self.tracker.snapshot(self.clock(), self.wall_clock())

    def render(self) -> Group:
        return render_snapshot(self.snapshot(), self.sweep, self.tracker.shape.shared)


def render_snapshot(snapshot: ProgressSnapshot, sweep: str = "", shared: str = "") -> Group:
    """The title (elapsed, ETA), the knobs every config shares, one row per host, and the best
    config so far."""
    title = f"sweep {sweep} " if sweep else "sweep "
    title += f"· {duration(snapshot.elapsed_s)} elapsed · {snapshot.eta_words(clock_time)}"
    if shared:
        title += f"\nevery config: {shared}"
    by = snapshot.best_by.words()
    best = f"best so far{f' ({by})' if by else ''}: {snapshot.best_words()}"
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("host", no_wrap=True)
    table.add_column("config", overflow="fold")
    table.add_column("trial", no_wrap=True)
    table.add_column("step", no_wrap=True)
    table.add_column("points", no_wrap=True, justify="right")
    for host in snapshot.hosts:
        if host.finished:
            table.add_row(*_cells(host.name, "-", host.trial, STEP_WORDS["done"], "-"))
            continue
        words = host.config or "-"
        if host.config is not None and host.attempt and host.attempt > 1:
            words += f" (attempt {host.attempt})"
        points = f"{host.done}/{host.total}" if host.config is not None and host.total else "-"
        step = STEP_WORDS.get(host.step, host.step)
        table.add_row(*_cells(host.name, words, host.trial, step, points))
    return Group(Text(title), table, Text(best))
