"""A sweep's results as one JSON document, for scripts that should not know the tables.

The shape is the contract of ``orchestrator results --json`` and ``run --json`` (issue 6):
``{"sweep", "id", "state", "trials": [{"key", "host", "config", "state", "cause", "attempt",
"points": [{"kind", "context", "concurrency", "problem", "metrics", "accept_len"}]}]}``, one
trial entry per attempt; a trial never attempted appears once, queued, with ``attempt`` null.
A few more keys (timestamps, evidence, quality flags, hosts) ride along; none of the above changes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from orchestrator.store.records import (
    Attempt,
    HostRecord,
    JsonObject,
    PointRecord,
    SweepRecord,
    TrialRecord,
)


def point_result(point: PointRecord) -> JsonObject:
    return {
        "kind": point.kind,
        "context": point.context,
        "concurrency": point.concurrency,
        "problem": point.problem,
        "metrics": point.metrics,
        "accept_len": point.accept_len,
        "quality": point.quality,
    }


def trial_result(
    trial: TrialRecord, attempt: Attempt | None, points: Sequence[PointRecord]
) -> JsonObject:
    return {
        "key": trial.key,
        "host": trial.host,
        "config": trial.config,
        "baseline": trial.is_baseline,
        "state": "queued" if attempt is None else attempt.state,
        "cause": None if attempt is None else attempt.cause,
        "evidence": None if attempt is None else attempt.evidence,
        "attempt": None if attempt is None else attempt.number,
        "started_at": None if attempt is None else attempt.started_at,
        "finished_at": None if attempt is None else attempt.finished_at,
        "points": [point_result(point) for point in points],
    }


def build_results(
    sweep: SweepRecord,
    trials: Sequence[TrialRecord],
    attempts: Sequence[Attempt],
    points: Sequence[PointRecord],
    hosts: Sequence[HostRecord] = (),
) -> JsonObject:
    """Trials in plan order, each trial's attempts by number, each attempt's points as committed."""
    attempts_by_trial: defaultdict[int, list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        attempts_by_trial[attempt.trial_id].append(attempt)
    points_by_attempt: defaultdict[int, list[PointRecord]] = defaultdict(list)
    for point in points:
        points_by_attempt[point.attempt_id].append(point)

    entries: list[JsonObject] = []
    for trial in trials:
        tried = sorted(attempts_by_trial.get(trial.id, []), key=lambda a: a.number)
        if not tried:
            entries.append(trial_result(trial, None, []))
        entries.extend(trial_result(trial, a, points_by_attempt.get(a.id, [])) for a in tried)
    return {
        "sweep": sweep.name,
        "id": sweep.id,
        "state": sweep.state,
        "priority": sweep.priority,
        "submitted_at": sweep.submitted_at,
        "started_at": sweep.started_at,
        "finished_at": sweep.finished_at,
        "replaced_by": sweep.replaced_by,
        "summary": sweep.summary,
        "hosts": [{"name": h.name, "type": h.type, "set_aside": h.set_aside_reason} for h in hosts],
        "trials": entries,
    }
