"""A sweep's results as typed values, with their JSON form defined next to each type.

Inside the orchestrator results travel as :class:`SweepResults`, :class:`TrialOutcome` and the
point types of :mod:`orchestrator.points` (re-exported here); JSON is made only where a person
or another program reads it (``results --json``, ``run --json``, the API, the webhook) by
``to_json()``, and read back by ``from_json()``. A stored row
(:class:`~orchestrator.store.records.PointRecord`) is decoded into its point here.

The JSON shape is the contract of ``orchestrator results --json`` and ``run --json`` (issue 6):
``{"sweep", "id", "state", "trials": [{"key", "host", "config", "state", "cause", "attempt",
"points": [{"kind", "context", "concurrency", "problem", "metrics", "accept_len"}]}]}``, one
trial entry per attempt; a trial never attempted appears once with ``attempt`` null, as
``queued``, or ``cancelled`` when its sweep was cancelled first.
More keys (timestamps, evidence, quality flags, hosts, the trial's plan) ride along; keys are
only ever added.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast, get_args

from orchestrator.points import AcceptEstimate as AcceptEstimate
from orchestrator.points import AcceptLength as AcceptLength
from orchestrator.points import CodingPoint as CodingPoint
from orchestrator.points import LatencySummary as LatencySummary
from orchestrator.points import Point as Point
from orchestrator.points import PointProvenance as PointProvenance
from orchestrator.points import ThroughputMetrics as ThroughputMetrics
from orchestrator.points import ThroughputPoint as ThroughputPoint
from orchestrator.points import (
    point_from_json,
    read_int,
    read_mapping,
    read_number,
    read_text,
)
from orchestrator.store.records import (
    SWEEP_STATES,
    Attempt,
    AttemptState,
    HostRecord,
    PointRecord,
    SweepRecord,
    SweepState,
    TrialPlan,
    TrialRecord,
)
from orchestrator.types import JsonObject

TrialState = AttemptState
"""A trial's state as a reader sees it: its latest attempt's (the same states, one definition),
or for a trial never attempted ``queued``, or ``cancelled`` when its sweep was cancelled before
it ran."""

TRIAL_STATES: tuple[TrialState, ...] = get_args(TrialState)


def format_knob(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def config_label(config: Mapping[str, Any], *, omit: frozenset[str] = frozenset()) -> str:
    """A config named by its knob values, ``algorithm=DDTREE budget=8``; ``baseline`` when no
    knob is set. What a person reads wherever a config is shown (never a trial key)."""
    if not config:
        return "baseline"
    shown = [f"{name}={format_knob(config[name])}" for name in sorted(config) if name not in omit]
    return (
        " ".join(shown)
        if shown
        else " ".join(f"{name}={format_knob(config[name])}" for name in sorted(config))
    )


SCHEDULE_LABEL = "schedule (across load)"
"""A schedule trial in a person's words. Its config is the schedule's fixed settings (vLLM's
largest draft length, say), and named by it the trial would read as one more run of that
fixed config."""


def is_schedule_plan(plan: TrialPlan | None) -> bool:
    """A trial planned to run a proposed speculative schedule (its plan's overlay)."""
    return plan is not None and plan.purpose == "schedule"


def trial_label(config: Mapping[str, Any], plan: TrialPlan | None) -> str:
    """What a person reads for a trial: :data:`SCHEDULE_LABEL` for a schedule trial, else its
    config's :func:`config_label`."""
    return SCHEDULE_LABEL if is_schedule_plan(plan) else config_label(config)


# --- points ---------------------------------------------------------------------------------


def point_from_record(record: PointRecord) -> Point:
    """Decode a stored row into its typed point."""
    data = {
        "kind": record.kind,
        "context": record.context,
        "concurrency": record.concurrency,
        "rate": record.rate,
        "workload": record.workload,
        "problem": record.problem,
        "metrics": record.metrics,
        "accept_len": record.accept_len,
        "quality": record.quality,
        "provenance": {
            "invocation_id": record.invocation_id,
            "cursor_start": record.cursor_start,
            "cursor_end": record.cursor_end,
            "started_at": record.started_at,
            "finished_at": record.finished_at,
        },
    }
    return point_from_json(data)


# --- trials and the sweep -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """One attempt of one trial (or a trial never attempted) with the points it committed."""

    key: str
    host: str
    config: JsonObject
    baseline: bool
    state: TrialState
    cause: str | None = None
    evidence: JsonObject | None = None
    attempt: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    points: tuple[Point, ...] = ()
    plan: TrialPlan | None = None
    attempt_id: int | None = None
    """The attempt's id in its store (events name their attempt by it); None when never
    attempted."""

    @property
    def label(self) -> str:
        """The config by its knob values."""
        return config_label(self.config)

    @property
    def throughput(self) -> tuple[ThroughputPoint, ...]:
        return tuple(p for p in self.points if isinstance(p, ThroughputPoint))

    @property
    def coding(self) -> tuple[CodingPoint, ...]:
        return tuple(p for p in self.points if isinstance(p, CodingPoint))

    def to_json(self) -> JsonObject:
        return {
            "key": self.key,
            "host": self.host,
            "config": self.config,
            "label": self.label,
            "baseline": self.baseline,
            "state": self.state,
            "cause": self.cause,
            "evidence": self.evidence,
            "attempt": self.attempt,
            "attempt_id": self.attempt_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "plan": None if self.plan is None else self.plan.to_json(),
            "points": [point.to_json() for point in self.points],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialOutcome:
        state = data.get("state")
        if state not in TRIAL_STATES:
            raise ValueError(f"unknown trial state {state!r}")
        plan = data.get("plan")
        evidence = data.get("evidence")
        return cls(
            key=str(data["key"]),
            host=str(data["host"]),
            config=dict(read_mapping(data.get("config"))),
            baseline=bool(data.get("baseline")),
            state=cast(TrialState, state),
            cause=read_text(data.get("cause")),
            evidence=dict(evidence) if isinstance(evidence, Mapping) else None,
            attempt=read_int(data.get("attempt")),
            attempt_id=read_int(data.get("attempt_id")),
            started_at=read_number(data.get("started_at")),
            finished_at=read_number(data.get("finished_at")),
            points=tuple(point_from_json(p) for p in data.get("points") or ()),
            plan=TrialPlan.from_json(plan) if isinstance(plan, Mapping) else None,
        )


def latest_outcomes(outcomes: Iterable[TrialOutcome]) -> list[TrialOutcome]:
    """Each (key, host)'s latest attempt, in first-seen order: a retried trial counts once,
    as it ended. The one definition of "latest state per trial"."""
    latest: dict[tuple[str, str], TrialOutcome] = {}
    for outcome in outcomes:
        current = latest.get((outcome.key, outcome.host))
        if current is None or (outcome.attempt or 0) >= (current.attempt or 0):
            latest[(outcome.key, outcome.host)] = outcome
    return list(latest.values())


def count_states(states: Iterable[str]) -> dict[str, int]:
    """``{"done": 3, "failed": 1}``, keys in name order (what status and the webhook show)."""
    return dict(sorted(Counter(states).items()))


@dataclass(frozen=True, slots=True)
class HostOutcome:
    name: str
    type: str
    set_aside: str | None = None

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostOutcome:
        return cls(str(data["name"]), str(data["type"]), read_text(data.get("set_aside")))


EXPLORATION_STOPPED_EVENT = "search.exploration_stopped"
"""The event a search stores when it stops exploring a host type, with why."""


@dataclass(frozen=True, slots=True)
class ExplorationStop:
    """A search stopped proposing new configs on a host type: why, and how far it got."""

    host_type: str
    reason: str
    explored: int | None = None
    space: int | None = None

    def to_json(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExplorationStop:
        return cls(
            str(data.get("host_type", "")),
            str(data.get("reason", "")),
            read_int(data.get("explored")),
            read_int(data.get("space")),
        )


@dataclass(frozen=True, slots=True)
class SweepResults:
    """A sweep and every attempt of its trials, in plan order then attempt number."""

    sweep: str
    id: int
    state: SweepState
    priority: int = 0
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    replaced_by: int | None = None
    summary: JsonObject | None = None
    hosts: tuple[HostOutcome, ...] = ()
    trials: tuple[TrialOutcome, ...] = ()
    exploration_stops: tuple[ExplorationStop, ...] = ()
    """Where an adaptive search stopped exploring, per host type (none for a plan)."""

    def latest(self) -> list[TrialOutcome]:
        return latest_outcomes(self.trials)

    def state_counts(self) -> dict[str, int]:
        """Trials by their latest state."""
        return count_states(t.state for t in self.latest())

    @property
    def all_succeeded(self) -> bool:
        """The sweep ended done and every trial's latest attempt is done."""
        return self.state == "done" and all(t.state == "done" for t in self.latest())

    def failed_attempts(self) -> list[TrialOutcome]:
        return [t for t in self.trials if t.state == "failed"]

    def to_json(self) -> JsonObject:
        return {
            "sweep": self.sweep,
            "id": self.id,
            "state": self.state,
            "priority": self.priority,
            "submitted_at": self.submitted_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "replaced_by": self.replaced_by,
            "summary": self.summary,
            "hosts": [host.to_json() for host in self.hosts],
            "trials": [trial.to_json() for trial in self.trials],
            "exploration_stops": [stop.to_json() for stop in self.exploration_stops],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepResults:
        summary = data.get("summary")
        state = data.get("state")
        if state not in SWEEP_STATES:
            raise ValueError(f"unknown sweep state {state!r}")
        return cls(
            sweep=str(data["sweep"]),
            id=int(data["id"]),
            state=cast(SweepState, state),
            priority=read_int(data.get("priority")) or 0,
            submitted_at=read_number(data.get("submitted_at")),
            started_at=read_number(data.get("started_at")),
            finished_at=read_number(data.get("finished_at")),
            replaced_by=read_int(data.get("replaced_by")),
            summary=dict(summary) if isinstance(summary, Mapping) else None,
            hosts=tuple(HostOutcome.from_json(h) for h in data.get("hosts") or ()),
            trials=tuple(TrialOutcome.from_json(t) for t in data.get("trials") or ()),
            exploration_stops=tuple(
                ExplorationStop.from_json(e) for e in data.get("exploration_stops") or ()
            ),
        )


def unattempted_state(sweep_state: SweepState) -> TrialState:
    """A trial with no attempt: ``cancelled`` when its sweep was cancelled before it ran,
    else ``queued`` (a sweep aborted by its failure policy keeps them queued, as the fault
    tests pin; the sweep's own state and summary say why they never ran)."""
    return "cancelled" if sweep_state == "cancelled" else "queued"


def trial_outcome(
    trial: TrialRecord,
    attempt: Attempt | None,
    points: Sequence[PointRecord],
    sweep_state: SweepState,
) -> TrialOutcome:
    state: TrialState = unattempted_state(sweep_state) if attempt is None else attempt.state
    return TrialOutcome(
        key=trial.key,
        host=trial.host,
        config=trial.config,
        baseline=trial.is_baseline,
        state=state,
        cause=None if attempt is None else attempt.cause,
        evidence=None if attempt is None else attempt.evidence,
        attempt=None if attempt is None else attempt.number,
        attempt_id=None if attempt is None else attempt.id,
        started_at=None if attempt is None else attempt.started_at,
        finished_at=None if attempt is None else attempt.finished_at,
        points=tuple(point_from_record(p) for p in points),
        plan=trial.plan,
    )


def attempts_and_points(
    attempts: Sequence[Attempt], points: Sequence[PointRecord]
) -> tuple[dict[int, list[Attempt]], dict[int, list[PointRecord]]]:
    """Attempts by trial id and points by attempt id, each in the order given: how the
    results and the report both walk a sweep's records."""
    attempts_by_trial: dict[int, list[Attempt]] = {}
    for attempt in attempts:
        attempts_by_trial.setdefault(attempt.trial_id, []).append(attempt)
    points_by_attempt: dict[int, list[PointRecord]] = {}
    for point in points:
        points_by_attempt.setdefault(point.attempt_id, []).append(point)
    return attempts_by_trial, points_by_attempt


def trial_outcomes(
    trials: Sequence[TrialRecord],
    attempts: Sequence[Attempt],
    points: Sequence[PointRecord],
    sweep_state: SweepState,
) -> list[TrialOutcome]:
    """Trials in plan order, each trial's attempts by number (a trial never attempted once),
    each attempt's points as committed."""
    attempts_by_trial, points_by_attempt = attempts_and_points(attempts, points)
    entries: list[TrialOutcome] = []
    for trial in trials:
        tried = sorted(attempts_by_trial.get(trial.id, []), key=lambda a: a.number)
        if not tried:
            entries.append(trial_outcome(trial, None, [], sweep_state))
        entries.extend(
            trial_outcome(trial, a, points_by_attempt.get(a.id, []), sweep_state) for a in tried
        )
    return entries


def build_results(
    sweep: SweepRecord,
    trials: Sequence[TrialRecord],
    attempts: Sequence[Attempt],
    points: Sequence[PointRecord],
    hosts: Sequence[HostRecord] = (),
    exploration_stops: Sequence[ExplorationStop] = (),
) -> SweepResults:
    return SweepResults(
        sweep=sweep.name,
        id=sweep.id,
        state=sweep.state,
        priority=sweep.priority,
        submitted_at=sweep.submitted_at,
        started_at=sweep.started_at,
        finished_at=sweep.finished_at,
        replaced_by=sweep.replaced_by,
        summary=sweep.summary,
        hosts=tuple(HostOutcome(h.name, h.type, h.set_aside_reason) for h in hosts),
        trials=tuple(trial_outcomes(trials, attempts, points, sweep.state)),
        exploration_stops=tuple(exploration_stops),
    )


def latest_states(
    trials: Sequence[TrialRecord], attempts: Sequence[Attempt], sweep_state: SweepState
) -> dict[tuple[str, str], TrialState]:
    """Each trial's latest state from its attempts alone (no point read): what status counts."""
    outcomes = trial_outcomes(trials, attempts, (), sweep_state)
    return {(t.key, t.host): t.state for t in latest_outcomes(outcomes)}
