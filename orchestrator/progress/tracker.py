"""A running sweep's progress, folded from the runner's reports into a
:class:`~orchestrator.progress.snapshot.ProgressSnapshot`. Pure (callers pass the clocks), so the
live display and the daemon's ``status`` show the same numbers.

The ETA is the slowest host's. Under a plan (grid) a host still owes its remaining trials;
under a search it owes its share of the restarts its host type has left of
``search.max_restarts`` (the runner reports what is left after each start). Each trial is
priced at the measured restart (load) time plus its points at the measured point time, the
host's restore at the end at one more restart, and nothing ends past ``schedule.finish_by``
(the runner stops there and restores). A search may end sooner than its budget: its ETA is the
latest it can end. "Best so far" is the objective's metric at its cells (their geometric mean,
as the search scores a trial), smaller or larger as the metric says.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.answers.runs import point_metric
from orchestrator.answers.saturation import offered_rate
from orchestrator.plan import Trial, expand_configs, plan_sweep
from orchestrator.progress.snapshot import (
    Best,
    BestBy,
    Eta,
    EtaBound,
    HostProgress,
    ProgressSnapshot,
    Restarts,
)
from orchestrator.report.model import shared_knobs, short_labels
from orchestrator.search.deadline import local_deadline
from orchestrator.store import ThroughputPoint
from orchestrator.store.results import config_label
from orchestrator.sweepfile import Sweep
from orchestrator.types import MatrixCell


@dataclass(frozen=True, slots=True)
class PlannedTrial:
    """A trial as the display names it."""

    key: str
    host: str
    words: str


def planned_trials(
    trials: Sequence[Trial], labels: Mapping[str, str] | None = None
) -> list[PlannedTrial]:
    """The plan's trials with each config in its own words, in run order: by ``labels`` (each
    config's full label to its name in the space) when given, else as the trials differ."""
    if labels is None:
        words = short_labels([trial.config for trial in trials])
    else:
        words = [labels[config_label(trial.config)] for trial in trials]
    return [PlannedTrial(t.key, t.host, w) for t, w in zip(trials, words, strict=True)]


def best_by(sweep: Sweep) -> BestBy:
    """The sweep's objective as "best so far" ranks by; tok/s at any cell without one."""
    if sweep.objective is None:
        return BestBy()
    return BestBy(sweep.objective.metric, sweep.objective_cells())


@dataclass(frozen=True, slots=True)
class SweepShape:
    """What is known of a sweep before it runs: its planned trials (a grid; a search proposes
    them as it goes), each host's type, the restart cap, the deadline and the objective."""

    trials: tuple[PlannedTrial, ...] = ()
    host_types: Mapping[str, str] = field(default_factory=dict)
    max_restarts: int | None = None
    finish_at: float | None = None
    """``schedule.finish_by`` as a wall-clock time (Unix seconds)."""
    best_by: BestBy = field(default_factory=BestBy)
    shared: str = ""
    """The knobs every config of the space shares (``algorithm=DDTREE ...``), said once."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Each config of the space by its full label, as the runner reports a search's trial,
    to its name without the shared knobs."""

    @classmethod
    def of(cls, sweep: Sweep, *, now: dt.datetime | None = None) -> SweepShape:
        """A grid's plan in order; a search proposes its trials as it goes (no list ahead of
        them: its progress counts against ``max_restarts`` and ``finish_by`` instead), from
        the same space, so its configs are named as the plan's are."""
        # Named from the whole space, not the plan: ``max_restarts`` cuts the plan to its first
        # trials, whose configs may share a knob the rest of the space varies.
        configs = expand_configs(sweep)
        shared = shared_knobs(configs)
        labels = dict(zip((config_label(c) for c in configs), short_labels(configs), strict=True))
        grid = sweep.search.strategy == "grid"
        trials = planned_trials(plan_sweep(sweep).trials, labels) if grid else []
        finish_by = sweep.schedule.finish_by if sweep.schedule else None
        finish_at = (
            local_deadline(finish_by, now or dt.datetime.now()).timestamp() if finish_by else None
        )
        return cls(
            tuple(trials),
            {h.name: h.host_type for h in sweep.hosts},
            sweep.search.max_restarts,
            finish_at,
            best_by(sweep),
            config_label(shared) if shared else "",
            labels,
        )


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _combined(values: Sequence[float]) -> float | None:
    """The objective's cells as one value: the geometric mean (None when one is not
    positive), as :mod:`orchestrator.search.score` scores a trial."""
    if len(values) == 1:
        return values[0]
    if any(v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


@dataclass
class _HostState:
    trials: list[PlannedTrial]
    host_type: str | None
    index: int = -1
    """Position of the current (or last) trial in ``trials``; -1 before the first."""
    trial: PlannedTrial | None = None
    attempt: int | None = None
    step: str = "waiting"
    done: int = 0
    total: int = 0
    begun: int = 0
    """Trial attempts this host began in this run."""
    finished: bool = False
    trial_started: float | None = None
    point_started: float | None = None
    restore_started: float | None = None
    point_seconds: list[float] = field(default_factory=list)
    load_seconds: list[float] = field(default_factory=list)
    totals: list[int] = field(default_factory=list)
    """Points of each trial begun (a search's screens have fewer than its full trials)."""


class SweepTracker:
    """The runner's reports (``update(host, **fields)``) folded into one sweep's state; read
    with :meth:`snapshot`. Not thread-safe: a caller that reads from another thread locks."""

    def __init__(self, shape: SweepShape, *, started: float) -> None:
        self.shape = shape
        self.started = started
        self.hosts: dict[str, _HostState] = {}
        self.by_key: dict[tuple[str, str], PlannedTrial] = {}
        for name in shape.host_types:  # every host has a row, in the sweep file's order
            self._host(name)
        for trial in shape.trials:
            self._host(trial.host).trials.append(trial)
            self.by_key[(trial.key, trial.host)] = trial
        self.points_per_trial = 0
        self.restarts_left: dict[str, int] = {}
        """Per host type, what the runner last reported left of ``max_restarts``."""
        self.restarts_seen: dict[str, int] = {}
        """Per host type, restarts begun in this run (when the runner reports no cap)."""
        self.best: Best | None = None
        self._values: dict[tuple[str, str, int | None], dict[MatrixCell, float]] = {}

    def _host(self, name: str) -> _HostState:
        if name not in self.hosts:
            self.hosts[name] = _HostState([], self.shape.host_types.get(name))
        return self.hosts[name]

    def update(self, host: str, fields: Mapping[str, Any], now: float) -> None:
        view = self._host(host)
        if "trial" in fields:
            key = fields["trial"]
            if key is None:
                view.trial = None
            elif view.trial is None or view.trial.key != key:
                self._start_trial(view, host, key, now, fields.get("config"))
        if "attempt" in fields:
            view.attempt = fields["attempt"]
        if "step" in fields:
            self._step(view, fields["step"], now)
        left = fields.get("restarts_left")
        if isinstance(left, int) and view.host_type is not None:
            self.restarts_left[view.host_type] = left
        if "total" in fields:
            view.total = self.points_per_trial = int(fields["total"])
            if view.trial is not None and view.totals:
                view.totals[-1] = view.total
        if "done" in fields:
            done = int(fields["done"])
            if done > view.done and view.point_started is not None:
                view.point_seconds.append(now - view.point_started)
                view.point_started = None
            view.done = done
        point = fields.get("point")
        if isinstance(point, ThroughputPoint) and view.trial is not None:
            self._rank(host, view, point)

    def _start_trial(
        self, view: _HostState, host: str, key: str, now: float, config: object = None
    ) -> None:
        # A trial a search proposed is not in the plan: it is named by the config the runner
        # reports with it, never by its key.
        words = config if isinstance(config, str) and config else key
        words = self.shape.labels.get(words, words)
        planned = self.by_key.get((key, host)) or PlannedTrial(key, host, words)
        if planned in view.trials:
            view.index = view.trials.index(planned)
        view.trial, view.trial_started, view.point_started = planned, now, None
        view.done, view.total = 0, self.points_per_trial
        view.begun += 1
        view.totals.append(view.total)

    def _step(self, view: _HostState, step: str, now: float) -> None:
        if view.step == "reconfigure" and step != "reconfigure" and view.trial_started:
            view.load_seconds.append(now - view.trial_started)
        if step == "reconfigure" and view.host_type is not None:
            seen = self.restarts_seen
            seen[view.host_type] = seen.get(view.host_type, 0) + 1
        if step.startswith(("ctx", "coding")):
            view.point_started = now
        if step == "restore":
            view.restore_started = now
        if step == "done":
            view.finished, view.trial = True, None
        view.step = step

    def _rank(self, host: str, view: _HostState, point: ThroughputPoint) -> None:
        """Fold one measured point into "best so far" by the sweep's :class:`BestBy`."""
        assert view.trial is not None
        by = self.shape.best_by
        value = point_metric(point, by.metric)
        if value is None:
            return
        cell: MatrixCell | None = point.cell
        if by.cells:
            if point.cell not in by.cells:
                return
            values = self._values.setdefault((host, view.trial.key, view.attempt), {})
            values[point.cell] = value
            if any(c not in values for c in by.cells):
                return
            combined = _combined([values[c] for c in by.cells])
            if combined is None:
                return
            value, cell = combined, None
        best = self.best
        if best is None or (value < best.value if by.minimized else value > best.value):
            offered = offered_rate(point) if len(by.cells) <= 1 else None
            achieved = point.metrics.achieved_rate if offered is not None else None
            self.best = Best(view.trial.words, host, value, cell, offered, achieved)

    # --- reading -------------------------------------------------------------------------------

    def snapshot(self, now: float, wall: float) -> ProgressSnapshot:
        """The sweep at ``now`` (the tracker's clock), its ETA as a ``wall``-clock time."""
        views = self.hosts.values()
        planned = len(self.shape.trials)
        begun = sum(len(v.trials) if v.finished else v.index + 1 for v in views)
        return ProgressSnapshot(
            elapsed_s=now - self.started,
            finished=bool(self.hosts) and all(v.finished for v in views),
            eta=self._eta(now, wall),
            hosts=tuple(self._row(name, view) for name, view in self.hosts.items()),
            restarts=tuple(self._restarts()),
            trials=(begun, planned) if planned else None,
            best=self.best,
            best_by=self.shape.best_by,
        )

    def _restarts(self) -> list[Restarts]:
        types = dict.fromkeys(v.host_type for v in self.hosts.values() if v.host_type)
        found = []
        for host_type in types:
            assert host_type is not None
            left = self._type_left(host_type)
            cap = self.shape.max_restarts
            used = self.restarts_seen.get(host_type, 0) if left is None else (cap or 0) - left
            found.append(Restarts(host_type, used, cap))
        return found

    def _row(self, name: str, view: _HostState) -> HostProgress:
        trial = view.trial
        return HostProgress(
            name=name,
            config=None if trial is None else trial.words,
            attempt=view.attempt,
            step=view.step,
            done=view.done,
            total=view.total or self.points_per_trial,
            trial=self._trial_words(view),
            finished=view.finished,
        )

    def _trial_words(self, view: _HostState) -> str:
        """Which trial, of what is known: the host's plan, its type's restart budget, or
        neither (never ``-/0``: a search has no list of trials to count against)."""
        if view.trials:
            count = len(view.trials)
            if view.finished:
                return f"{count}/{count}"
            return f"{view.index + 1}/{count}" if view.index >= 0 else f"-/{count}"
        left = self._type_left(view.host_type)
        cap = self.shape.max_restarts
        if left is not None and cap is not None:
            return f"{cap - left}/{cap} restarts"
        return f"{view.begun - (view.trial is not None)} done"

    def _type_left(self, host_type: str | None) -> int | None:
        """Restarts ``host_type`` may still make; None without a cap."""
        cap = self.shape.max_restarts
        if cap is None or host_type is None:
            return None
        if host_type in self.restarts_left:
            return max(self.restarts_left[host_type], 0)
        return max(cap - self.restarts_seen.get(host_type, 0), 0)

    def _later(self, view: _HostState) -> int | None:
        """Trials the host will still begin after its current one: the rest of its plan, at
        most its share of its type's restarts left; None when nothing bounds them."""
        left = self._type_left(view.host_type)
        share = None
        if left is not None:
            sharing = [v for v in self.hosts.values() if v.host_type == view.host_type]
            share = math.ceil(left / max(sum(not v.finished for v in sharing), 1))
        if view.trials:
            later = len(view.trials) - (view.index + 1)
            return later if share is None else min(later, share)
        return share

    def _pace(self, view: _HostState) -> tuple[float, float, float] | None:
        """Seconds per point and per restart, and points per trial: the host's own, else any
        host's; None before the first point."""
        views = self.hosts.values()
        per_point = _mean(view.point_seconds) or _mean([s for v in views for s in v.point_seconds])
        if per_point is None:
            return None
        per_load = (
            _mean(view.load_seconds) or _mean([s for v in views for s in v.load_seconds]) or 0.0
        )
        points = (
            _mean([t for t in view.totals if t])
            or _mean([t for v in views for t in v.totals if t])
            or float(self.points_per_trial)
        )
        return per_point, per_load, points

    def _host_left(self, view: _HostState, now: float) -> float | None:
        """Seconds this host still needs: its trial's rest, its later trials, its restore."""
        if view.finished:
            return 0.0
        pace = self._pace(view)
        later = self._later(view)
        if pace is None or later is None:
            return None
        per_point, per_load, points = pace
        if view.step == "restore" and view.restore_started is not None:
            return max(per_load - (now - view.restore_started), 0.0)
        left = 0.0
        if view.trial is not None:
            if view.step == "reconfigure" and view.trial_started is not None:
                left += max(per_load - (now - view.trial_started), 0.0)
            left += max((view.total or self.points_per_trial) - view.done, 0) * per_point
        return left + later * (per_load + points * per_point) + per_load

    def _eta(self, now: float, wall: float) -> Eta | None:
        """The slowest host's end, never past ``finish_by`` and the restore after it."""
        if not self.hosts or all(v.finished for v in self.hosts.values()):
            return None
        lefts = [self._host_left(v, now) for v in self.hosts.values()]
        known = [left for left in lefts if left is not None]
        estimate = max(known) if len(known) == len(lefts) else None
        bound: EtaBound = "plan" if self.shape.trials else "restarts"
        types = {v.host_type for v in self.hosts.values()}
        lefts_by_type = [self._type_left(t) for t in types]
        restarts = sum(n for n in lefts_by_type if n is not None) if bound == "restarts" else None
        finish_at = self.shape.finish_at
        if finish_at is not None:
            views = self.hosts.values()
            restore = _mean([s for v in views for s in v.load_seconds]) or 0.0
            cut = max(finish_at - wall, 0.0) + restore
            if estimate is None or estimate > cut:
                return Eta(cut, wall + cut, "finish_by")
        if estimate is None:
            return None
        return Eta(estimate, wall + estimate, bound, restarts)
