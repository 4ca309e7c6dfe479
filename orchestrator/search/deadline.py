"""``schedule.finish_by`` as a budget of time: learn a host type's times, keep a reserve.

A search under a deadline learns, from its host type's first trials, how long a restart, a
screening look and a full trial take (the stored attempt and point timestamps; the sweep's
``estimate:`` until a trial has finished). It explores only while the time left on a host
covers the next exploration, that host's share of the confirmation reserve and its restore;
once only the reserve is left it spends it on confirmation restarts of the leaders, and it
starts nothing that cannot finish before the deadline.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def local_deadline(clock: str, now: dt.datetime) -> dt.datetime:
    """The next time ``HH:MM`` (control machine local time) at or after ``now``."""
    hours, minutes = (int(part) for part in clock.split(":"))
    moment = now.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    return moment if moment >= now else moment + dt.timedelta(days=1)


@dataclass(frozen=True, slots=True)
class TrialTimes:
    """Seconds one host of a type takes for each kind of work (learned or assumed)."""

    restart_s: float
    screen_s: float
    full_s: float
    learned: bool


@dataclass(frozen=True, slots=True)
class TimedTrial:
    """One finished attempt's timing: ``first_point_at`` is when its first point began."""

    started_at: float
    finished_at: float
    first_point_at: float | None
    full: bool


def learn_times(trials: Sequence[TimedTrial], assumed: TrialTimes) -> TrialTimes:
    """Medians of the type's finished trials, each kind falling back to ``assumed``."""
    restarts = [t.first_point_at - t.started_at for t in trials if t.first_point_at is not None]
    fulls = [t.finished_at - t.started_at for t in trials if t.full]
    screens = [t.finished_at - t.started_at for t in trials if not t.full]
    if not trials:
        return assumed
    restart_s = statistics.median(restarts) if restarts else assumed.restart_s
    full_s = statistics.median(fulls) if fulls else max(assumed.full_s, restart_s)
    screen_s = statistics.median(screens) if screens else min(assumed.screen_s, full_s)
    return TrialTimes(restart_s, screen_s, full_s, learned=True)


@dataclass(frozen=True, slots=True)
class TimeBudget:
    """Where a host stands against the deadline when it asks for its next trial."""

    left_s: float
    times: TrialTimes
    reserve_restarts: int
    """Confirmation restarts of the type not yet handed out."""
    hosts: int
    """Hosts of the type still taking part (they share the reserve)."""

    @property
    def reserve_s(self) -> float:
        """This host's share of the confirmation reserve, plus its restore at the end."""
        share = math.ceil(self.reserve_restarts / max(self.hosts, 1))
        return share * self.times.full_s + self.times.restart_s

    def may_explore(self, cost_s: float) -> bool:
        return self.left_s >= cost_s + self.reserve_s

    def may_confirm(self) -> bool:
        return self.left_s >= self.times.full_s + self.times.restart_s
