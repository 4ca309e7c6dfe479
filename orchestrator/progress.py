"""The live display of a foreground sweep, on stderr: per host its trial, step, points, elapsed
time, an ETA from measured load and point times, and the best config so far.

On a TTY it is a rich Live table; elsewhere (CI, a pipe) it stays silent and the structured
log carries the same facts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table


@dataclass
class _HostView:
    trial: str | None = None
    attempt: int | None = None
    step: str = "waiting"
    done: int = 0
    total: int = 0
    trials_seen: list[str] = field(default_factory=list)
    trial_started: float | None = None
    point_started: float | None = None
    point_seconds: list[float] = field(default_factory=list)
    load_seconds: list[float] = field(default_factory=list)


class LiveProgress:
    """Implements the runner's ``Progress``; use as a context manager around the sweep."""

    def __init__(self, *, trials_per_host: dict[str, int], console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self.trials_per_host = trials_per_host
        self.started = time.monotonic()
        self.hosts: dict[str, _HostView] = {name: _HostView() for name in trials_per_host}
        self.best: tuple[float, str] | None = None
        self._live: Live | None = None

    def __enter__(self) -> LiveProgress:
        if self.console.is_terminal:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)

    def update(self, host: str, **fields: Any) -> None:
        view = self.hosts.setdefault(host, _HostView())
        now = time.monotonic()
        trial = fields.get("trial", view.trial)
        if trial != view.trial and trial is not None:
            view.trial, view.trial_started, view.point_started = trial, now, None
            view.trials_seen.append(trial)
        elif "trial" in fields and trial is None:
            view.trial = None
        if "attempt" in fields:
            view.attempt = fields["attempt"]
        if "step" in fields:
            step = fields["step"]
            if view.step == "reconfigure" and step != "reconfigure" and view.trial_started:
                view.load_seconds.append(now - view.trial_started)
            if step.startswith(("ctx", "coding")):
                view.point_started = now
            view.step = step
        if "done" in fields:
            if fields["done"] > view.done and view.point_started is not None:
                view.point_seconds.append(now - view.point_started)
            view.done, view.total = fields["done"], fields.get("total", view.total)
        point = fields.get("last_point")
        if point and view.trial:
            rate = point.get("output_tok_s")
            if isinstance(rate, int | float) and (self.best is None or rate > self.best[0]):
                self.best = (float(rate), view.trial)
        if self._live is not None:
            self._live.update(self._render())

    def _eta(self, host: str, view: _HostView) -> float | None:
        if not view.point_seconds:
            return None
        per_point = sum(view.point_seconds) / len(view.point_seconds)
        per_load = sum(view.load_seconds) / len(view.load_seconds) if view.load_seconds else 0.0
        trials_left = max(self.trials_per_host.get(host, 0) - len(view.trials_seen), 0)
        points_left = max(view.total - view.done, 0)
        return points_left * per_point + trials_left * (per_load + view.total * per_point)

    def _render(self) -> Table:
        elapsed = time.monotonic() - self.started
        title = f"sweep running {elapsed:.0f}s"
        if self.best:
            title += f" | best so far: {self.best[1]} at {self.best[0]:.0f} tok/s"
        table = Table(title=title, expand=False)
        for column in ("host", "trial", "step", "points", "ETA"):
            table.add_column(column)
        for name, view in self.hosts.items():
            eta = self._eta(name, view)
            trials = f"{len(view.trials_seen)}/{self.trials_per_host.get(name, 0)}"
            trial = f"{view.trial or '-'} ({trials})"
            if view.attempt and view.attempt > 1:
                trial += f" attempt {view.attempt}"
            table.add_row(
                name,
                trial,
                view.step,
                f"{view.done}/{view.total}",
                "-" if eta is None else f"{eta:.0f}s",
            )
        return table
