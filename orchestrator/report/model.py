"""A sweep as typed report data: what every renderer (Markdown, HTML, CSV, JSON) draws from.

:func:`load_report` is the only I/O (reads the store); :func:`build_report` turns the store's
records into the report's vocabulary with no clock and no network, so the renderers and the
analysis (best config per cell, speedup over the baseline, losslessness, warnings) are tested
on plain values. Numbers carry their quality: every point keeps the flags the benchmark and
the accept_len cross-check raised, and a failed trial keeps its cause and evidence instead of
turning into zeros.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.answers import Answer, answered_from_text
from orchestrator.bench.coding import CodingSummary, Outcome
from orchestrator.bench.lossless import check_lossless
from orchestrator.store import (
    AcceptLength,
    AttemptState,
    CodingPoint,
    EventRecord,
    JsonObject,
    Store,
    StoredRequest,
    ThroughputMetrics,
    TrialPlan,
    TrialState,
    point_key,
)
from orchestrator.store import ThroughputPoint as StoredThroughput
from orchestrator.store.results import (
    SCHEDULE_LABEL,
    HostOutcome,
    SweepResults,
    TrialOutcome,
    config_label,
    is_schedule_plan,
    trial_label,
    unattempted_state,
)
from orchestrator.types import SYNTHETIC_WORKLOAD, MatrixCell


def main_workload(cells: Iterable[MatrixCell]) -> str:
    """The workload of the report's closed-loop grid: the first one a trial measures (the
    sweep file's first), synthetic when none is named."""
    return next((c.workload for c in cells if c.concurrency is not None), SYNTHETIC_WORKLOAD)


@dataclass(frozen=True, slots=True)
class FlagInfo:
    """How a quality flag shows in a table (a one-letter code) and what it means."""

    code: str
    meaning: str


FLAGS: dict[str, FlagInfo] = {
    "errors": FlagInfo("E", "some requests failed"),
    "truncated": FlagInfo("T", "outputs were truncated"),
    "too_few_requests": FlagInfo("N", "too few successful requests to trust the numbers"),
    "concurrency_short": FlagInfo("C", "the client held less than the requested concurrency"),
    "client_saturated": FlagInfo("S", "the client's CPU or event loop was saturated"),
    "accept_len_disagree": FlagInfo(
        "A", "accept_len sources (journal, meta_info, /metrics) disagree"
    ),
    "no_decode_lines": FlagInfo("L", "no decode line with accept len in the journal window"),
    "short_outputs": FlagInfo("O", "outputs ended before max_tokens despite ignore_eos"),
    "prompt_length_inexact": FlagInfo("P", "prompt lengths missed the requested context"),
    "rate_short": FlagInfo("R", "the client sent below 95% of the offered arrival rate"),
}
"""Quality flags a point can carry, in the order tables list them."""

UNTRUSTED_FLAGS = frozenset(
    {"errors", "too_few_requests", "concurrency_short", "client_saturated", "rate_short"}
)
"""A point with one of these is not a clean server measurement: it wins a cell only when the
cell has no clean point, and then shows its flags."""


def flag_info(flag: str) -> FlagInfo:
    return FLAGS.get(flag, FlagInfo("?", flag.replace("_", " ")))


def flag_codes(flags: Sequence[str]) -> str:
    """``"E,T"`` for a point flagged with errors and truncation; ``""`` when clean."""
    return ",".join(flag_info(flag).code for flag in flags)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


# --- points --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PointView:
    """One (context, concurrency) cell of one trial as the report shows it: the stored point,
    the quality flags of the benchmark and the accept_len cross-check joined, and the measured
    (not warm-up) requests' TTFTs for the distribution plots."""

    measured: StoredThroughput
    flags: tuple[str, ...]
    ttft_samples_s: tuple[float, ...] = ()
    requests: tuple[JsonObject, ...] = ()

    @property
    def context(self) -> int:
        return self.measured.context

    @property
    def concurrency(self) -> int | None:
        return self.measured.concurrency

    @property
    def cell(self) -> MatrixCell:
        return self.measured.cell

    @property
    def metrics(self) -> ThroughputMetrics:
        return self.measured.metrics

    @property
    def accept(self) -> AcceptLength:
        return self.measured.accept

    @property
    def started_at(self) -> float | None:
        return self.measured.provenance.started_at

    @property
    def finished_at(self) -> float | None:
        return self.measured.provenance.finished_at

    @property
    def output_tok_s(self) -> float | None:
        """Aggregate output tokens per second over the point's wall time."""
        return self.metrics.output_tok_s

    @property
    def request_tok_s(self) -> float | None:
        """Median per-request decode tokens per second."""
        return self.metrics.request_decode_tok_s_p50

    @property
    def ttft_p50_s(self) -> float | None:
        return self.metrics.ttft.p50_s

    @property
    def ttft_p99_s(self) -> float | None:
        return self.metrics.ttft.p99_s

    @property
    def accept_len(self) -> float | None:
        return self.accept.value

    @property
    def achieved_rate(self) -> float | None:
        return self.metrics.achieved_rate

    @property
    def goodput(self) -> float | None:
        return self.metrics.goodput

    @property
    def tpot_p50_s(self) -> float | None:
        return self.metrics.tpot.p50_s

    @property
    def output_len_p50(self) -> float | None:
        return self.metrics.output_len_p50

    @property
    def trusted(self) -> bool:
        """A clean server measurement: it has a throughput and no flag that voids it."""
        return self.output_tok_s is not None and not UNTRUSTED_FLAGS.intersection(self.flags)


# --- trials --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """How long the restart protocol's steps took for one attempt (seconds)."""

    stop_s: float | None
    memory_release_s: float | None
    load_s: float | None
    reconfigure_s: float | None
    source: str
    """``timeline`` (the attempt's own stamps) or ``events`` (the host's event log)."""


@dataclass(frozen=True, slots=True)
class AttemptView:
    number: int
    state: AttemptState
    cause: str | None
    evidence: JsonObject
    started_at: float | None
    finished_at: float | None
    lifecycle: Lifecycle | None
    events: tuple[JsonObject, ...] = ()

    def evidence_lines(self, limit: int = 8) -> list[str]:
        """The first lines that explain a failure: the message, then the journal excerpt."""
        evidence = self.evidence
        lines: list[str] = []
        message = evidence.get("message") or evidence.get("reason")
        if message:
            lines.append(str(message))
        if evidence.get("exit_status") is not None:
            lines.append(f"exit status {evidence['exit_status']}")
        if evidence.get("unknown_flags"):
            lines.append("unknown flags: " + " ".join(map(str, evidence["unknown_flags"])))
        for mismatch in evidence.get("mismatches") or []:
            if isinstance(mismatch, Mapping):
                lines.append(
                    f"{mismatch.get('knob')}: expected {mismatch.get('expected')!r}, "
                    f"server reports {mismatch.get('actual')!r}"
                )
        excerpt = [str(line) for line in evidence.get("excerpt") or []]
        lines.extend(excerpt[-max(limit - len(lines), 0) :] if excerpt else [])
        return lines[:limit]


@dataclass(frozen=True, slots=True)
class Drift:
    """The losslessness check of one config's coding outputs against the baseline's."""

    baseline_key: str
    compared: int
    exact_matches: int
    drifted: bool
    differing: tuple[str, ...]
    earliest_divergence_char: int | None


@dataclass(slots=True)
class TrialView:
    """One config on one host: its outcome, points, provenance and losslessness."""

    key: str
    host: str
    host_type: str
    config: JsonObject
    is_baseline: bool
    ordinal: int
    label: str
    attempts: tuple[AttemptView, ...]
    throughput: tuple[PointView, ...]
    coding: tuple[CodingPoint, ...]
    short_label: str = ""
    lossless: Drift | None = None
    plan: TrialPlan | None = None
    never_run_state: TrialState = "queued"
    """What a trial without an attempt is: ``queued``, or ``cancelled`` when its sweep was."""

    @property
    def identity(self) -> str:
        """What this trial's restarts on any host share, as the report pools them: its
        config's knob values (:func:`config_key`), or for a schedule trial the schedule, whose
        config is only its fixed settings: its points are never that fixed config's."""
        key = config_key(self.config)
        return f"schedule {key}" if is_schedule_plan(self.plan) else key

    @property
    def latest(self) -> AttemptView | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def state(self) -> TrialState:
        return self.latest.state if self.latest else self.never_run_state

    @property
    def cause(self) -> str | None:
        return self.latest.cause if self.latest else None

    @property
    def done_attempt(self) -> AttemptView | None:
        return next((a for a in reversed(self.attempts) if a.state == "done"), None)

    @property
    def provenance(self) -> JsonObject | None:
        done = self.done_attempt
        value = done.evidence.get("provenance") if done else None
        return value if isinstance(value, dict) else None

    @property
    def overridden(self) -> list[JsonObject]:
        done = self.done_attempt
        values = done.evidence.get("overridden") if done else None
        return [v for v in values or [] if isinstance(v, dict)]

    @property
    def lifecycle(self) -> Lifecycle | None:
        for attempt in reversed(self.attempts):
            if attempt.lifecycle is not None:
                return attempt.lifecycle
        return None

    def point_at(self, cell: MatrixCell) -> PointView | None:
        for point in self.throughput:
            if point.cell == cell:
                return point
        return None

    def coding_summary(self) -> CodingSummary:
        counts = Counter(c.outcome.value for c in self.coding)
        return CodingSummary(
            passed=sum(1 for c in self.coding if c.passed),
            scored=sum(1 for c in self.coding if c.scored),
            total=len(self.coding),
            counts=dict(counts),
        )

    def coding_failures(self) -> list[tuple[str, Outcome]]:
        """(problem, outcome) of every problem that did not pass, truncated ones included."""
        return [(c.problem, c.outcome) for c in self.coding if not c.passed]


# --- hosts, groups, the sweep --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HostView:
    name: str
    type: str
    set_aside_reason: str | None
    provenance: JsonObject | None
    """What the host runs (SGLang version, GPUs, model) as its first successful trial saw it."""
    baseline_exec_start: tuple[str, ...] | None = None
    """The baseline's command line on this host; None when the host ran no baseline."""


@dataclass(frozen=True, slots=True)
class ReportWarning:
    """Something a reader must know before trusting a number."""

    kind: str
    host: str | None
    trial: str | None
    message: str


@dataclass(slots=True)
class HostTypeGroup:
    """The trials of every host of one type: the unit a report's tables compare within."""

    host_type: str
    hosts: tuple[HostView, ...]
    trials: tuple[TrialView, ...]
    contexts: tuple[int, ...]
    concurrencies: tuple[int, ...]
    main_workload: str = SYNTHETIC_WORKLOAD
    other_cells: tuple[MatrixCell, ...] = ()
    """The cells outside the closed-loop grid: open-loop rates and other workloads."""

    @property
    def all_cells(self) -> list[MatrixCell]:
        """The grid's cells then the others, each workload in the sweep's order."""
        return [self.grid_cell(c, n) for c, n in self.cells] + list(self.other_cells)

    @property
    def cells(self) -> list[tuple[int, int]]:
        return [(ctx, conc) for ctx in self.contexts for conc in self.concurrencies]

    @property
    def show_host(self) -> bool:
        return len({t.host for t in self.trials}) > 1

    def baseline_for(self, trial: TrialView) -> TrialView | None:
        """The baseline on the trial's own host, else one on another host of the same type."""
        baselines = [t for t in self.trials if t.is_baseline]
        same_host = [t for t in baselines if t.host == trial.host]
        for candidate in same_host + baselines:
            if candidate.state == "done" or candidate.throughput:
                return candidate
        return None

    def grid_cell(self, context: int, concurrency: int) -> MatrixCell:
        return MatrixCell(context, concurrency, workload=self.main_workload)

    def point(self, trial: TrialView, context: int, concurrency: int) -> PointView | None:
        """``trial``'s closed-loop point at (context, concurrency) on the grid's workload."""
        return trial.point_at(self.grid_cell(context, concurrency))

    def planned(self, trial: TrialView, context: int, concurrency: int) -> bool:
        """Whether ``trial`` set out to measure (context, concurrency): a search's screen
        measures only the objective's cells, so its others are no result by design, never
        a failure (a trial stored before plans existed measured the whole matrix)."""
        cells = trial.plan.cells if trial.plan is not None else ()
        return not cells or self.grid_cell(context, concurrency) in cells

    def speedup(self, trial: TrialView, context: int, concurrency: int) -> float | None:
        return self.speedup_at(trial, self.grid_cell(context, concurrency))

    def speedup_at(self, trial: TrialView, cell: MatrixCell) -> float | None:
        """Aggregate tok/s over the baseline's in the same cell (None when either is missing)."""
        baseline = self.baseline_for(trial)
        if baseline is None:
            return None
        mine, theirs = trial.point_at(cell), baseline.point_at(cell)
        if mine is None or theirs is None:
            return None
        a, b = mine.output_tok_s, theirs.output_tok_s
        return a / b if a is not None and b else None

    def best(self, context: int, concurrency: int) -> tuple[TrialView, PointView] | None:
        return self.best_at(self.grid_cell(context, concurrency))

    def best_at(self, cell: MatrixCell) -> tuple[TrialView, PointView] | None:
        """The trial with the highest aggregate tok/s in the cell among its trusted points;
        only when the cell has none, the highest flagged one (its flags travel with it)."""
        candidates = [
            (trial, point)
            for trial in self.trials
            if (point := trial.point_at(cell)) is not None and point.output_tok_s is not None
        ]
        trusted = [c for c in candidates if c[1].trusted]
        pool = trusted or candidates
        if not pool:
            return None
        return max(pool, key=lambda c: c[1].output_tok_s or 0.0)

    def display(self, trial: TrialView) -> str:
        """The trial's name in this group's tables: short label, with the host when needed."""
        label = trial.short_label or trial.label
        return f"{label} @{trial.host}" if self.show_host else label


@dataclass(slots=True)
class SweepReport:
    name: str
    id: int
    state: str
    submitted_at: float | None
    started_at: float | None
    finished_at: float | None
    summary: JsonObject | None
    model: str | None
    coding_temperature: float | None
    groups: tuple[HostTypeGroup, ...]
    warnings: tuple[ReportWarning, ...]
    sweep_events: tuple[JsonObject, ...] = ()
    answers: tuple[Answer, ...] = ()
    """Which config to deploy per host type (per cell without an objective), computed by the
    answers layer; empty for a sweep without them, and the report then reads as it always did."""

    @property
    def trials(self) -> list[TrialView]:
        return [t for g in self.groups for t in g.trials]

    def answers_for(self, host_type: str) -> tuple[Answer, ...]:
        return tuple(a for a in self.answers if a.host_type == host_type)


# --- building ------------------------------------------------------------------------------


def _event_json(event: EventRecord) -> JsonObject:
    return {"kind": event.kind, "ts": event.ts, "host": event.host, **event.fields}


def _lifecycle(evidence: Mapping[str, Any], events: Sequence[EventRecord]) -> Lifecycle | None:
    timeline = evidence.get("timeline")
    if isinstance(timeline, Mapping) and timeline:
        stamps = {k: float(v) for k, v in timeline.items() if _number(v) is not None}

        def span(start: str, end: str) -> float | None:
            if start in stamps and end in stamps:
                return stamps[end] - stamps[start]
            return None

        return Lifecycle(
            stop_s=span("stop_requested", "stopped"),
            memory_release_s=span("stopped", "memory_released"),
            load_s=span("started", "ready"),
            reconfigure_s=span("begin", "ready"),
            source="timeline",
        )
    by_kind = {e.kind: e.fields for e in events}
    if not any(k in by_kind for k in ("unit.stopped", "memory.released", "server.ready")):
        return None
    return Lifecycle(
        stop_s=_number(by_kind.get("unit.stopped", {}).get("waited_s")),
        memory_release_s=_number(by_kind.get("memory.released", {}).get("waited_s")),
        load_s=_number(by_kind.get("server.ready", {}).get("load_s")),
        reconfigure_s=None,
        source="events",
    )


def _attempt_events(
    attempt: TrialOutcome, host: str, events: Sequence[EventRecord], next_start: float | None
) -> list[EventRecord]:
    """The host's events during the attempt (the lifecycle logs by host, not by attempt)."""
    if attempt.started_at is None:
        return [e for e in events if e.attempt_id == attempt.attempt_id]
    end = attempt.finished_at if attempt.finished_at is not None else next_start
    return [
        e
        for e in events
        if e.attempt_id == attempt.attempt_id
        or (
            e.attempt_id is None
            and e.host == host
            and e.ts >= attempt.started_at
            and (end is None or e.ts <= end)
        )
    ]


def _point_flags(point: StoredThroughput) -> tuple[str, ...]:
    flags = point.flags
    order = list(FLAGS)
    return tuple(sorted(flags, key=lambda f: (order.index(f) if f in order else len(order), f)))


def _request_json(request: StoredRequest) -> JsonObject:
    return {
        "sent_at": request.sent_at,
        "ttft_s": request.ttft_s,
        "e2e_s": request.e2e_s,
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": request.completion_tokens,
        "finish_reason": request.finish_reason,
        "error": request.error,
        "warmup": request.warmup,
        "extra": dict(request.extra) if request.extra else None,
    }


def _throughput_point(
    point: StoredThroughput, requests: Sequence[StoredRequest], include_requests: bool
) -> PointView:
    return PointView(
        measured=point,
        flags=_point_flags(point),
        ttft_samples_s=tuple(
            r.ttft_s for r in requests if not r.warmup and r.ttft_s is not None and r.error is None
        ),
        requests=tuple(_request_json(r) for r in requests) if include_requests else (),
    )


def _drift(trial: TrialView, baseline: TrialView, temperature: float) -> Drift | None:
    if not trial.coding or not baseline.coding or trial is baseline:
        return None
    report = check_lossless(baseline.coding, trial.coding, temperature=temperature)
    if report.compared == 0:
        return None
    return Drift(
        baseline_key=baseline.key,
        compared=report.compared,
        exact_matches=report.exact_matches,
        drifted=report.drifted,
        differing=tuple(c.problem_id for c in report.comparisons if not c.identical),
        earliest_divergence_char=report.earliest_divergence_char,
    )


def _planned(trials: Sequence[Sequence[TrialOutcome]]) -> list[TrialPlan]:
    return [t[0].plan for t in trials if t[0].plan is not None]


def shared_knobs(configs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The knobs every config that sets any knob sets to the same value (the baseline, which
    sets none, aside): said once for all (``every config: algorithm=DDTREE``), left out of
    each config's name. Empty with fewer than two such configs (nothing to compare)."""
    varied = [config for config in configs if config]
    if len(varied) < 2:
        return {}
    first = varied[0]
    return {
        name: value
        for name, value in first.items()
        if all(name in config and _same(config[name], value) for config in varied[1:])
    }


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def short_labels(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each config named by every knob that varies among ``configs`` and no other: the knobs
    they all share are said once (:func:`shared_knobs`). Two different configs differ on some
    knob, which is then shown in both names, so no two read alike; a knob that varies is
    always shown, so ``topk=4`` never stands for ``budget=4 topk=4`` beside ``budget=8
    topk=2``. The report's tables, its answers and the live display use it."""
    omit = frozenset(shared_knobs(configs))
    return [config_label(config, omit=omit) for config in configs]


def config_key(config: Mapping[str, Any]) -> str:
    """A config's identity across trials, answers and pictures (its knob values)."""
    return json.dumps(dict(config), sort_keys=True, default=str)


def trial_labels(configs: Sequence[Mapping[str, Any]], scheduled: Sequence[bool]) -> list[str]:
    """Each trial's name: :func:`short_labels` of the fixed configs' trials, and
    :data:`SCHEDULE_LABEL` for those that ran a schedule (``scheduled``)."""
    fixed = iter(short_labels([c for c, s in zip(configs, scheduled, strict=True) if not s]))
    return [SCHEDULE_LABEL if s else next(fixed) for s in scheduled]


def _short_labels(trials: Sequence[TrialView]) -> None:
    labels = trial_labels([t.config for t in trials], [is_schedule_plan(t.plan) for t in trials])
    for trial, label in zip(trials, labels, strict=True):
        trial.short_label = label


def _warnings(
    report_groups: Sequence[HostTypeGroup], events: Sequence[EventRecord]
) -> list[ReportWarning]:
    found: list[ReportWarning] = []
    for group in report_groups:
        for host in group.hosts:
            if host.set_aside_reason:
                found.append(
                    ReportWarning("host-set-aside", host.name, None, host.set_aside_reason)
                )
        for trial in group.trials:
            found.extend(_trial_warnings(trial, group.display(trial)))
    found.extend(_event_warnings(events))
    return found


def _trial_warnings(trial: TrialView, name: str) -> list[ReportWarning]:
    """One trial's warnings: knobs the server overrode, coding outputs that drifted from the
    baseline's, its points' flags, coding outputs cut off."""
    found: list[ReportWarning] = []
    for item in trial.overridden:
        why = f" ({item['why']})" if item.get("why") else ""
        found.append(
            ReportWarning(
                "overridden",
                trial.host,
                name,
                f"{item.get('knob')}: asked {item.get('expected')!r}, the server runs "
                f"{item.get('actual')!r}{why}",
            )
        )
    drift = trial.lossless
    if drift is not None and drift.drifted:
        where = (
            f", first divergence at character {drift.earliest_divergence_char}"
            if drift.earliest_divergence_char is not None
            else ""
        )
        found.append(
            ReportWarning(
                "output-drift",
                trial.host,
                name,
                f"{drift.compared - drift.exact_matches} of {drift.compared} coding "
                f"outputs differ from the baseline's at temperature 0 "
                f"({', '.join(drift.differing)}){where}",
            )
        )
    for point in trial.throughput:
        found.extend(_point_warnings(trial, name, point))
    truncated = [c.problem for c in trial.coding if c.outcome is Outcome.TRUNCATED]
    if truncated:
        found.append(
            ReportWarning(
                "coding-truncated",
                trial.host,
                name,
                f"coding outputs cut off (not scored): {', '.join(truncated)}",
            )
        )
    return found


def _event_warnings(events: Sequence[EventRecord]) -> list[ReportWarning]:
    """The sweep's events that are warnings (:data:`_EVENT_WARNINGS`), with their fields."""
    found: list[ReportWarning] = []
    for event in events:
        if event.kind in _EVENT_WARNINGS:
            details = ", ".join(f"{k}={v}" for k, v in event.fields.items())
            found.append(
                ReportWarning(
                    event.kind,
                    event.host,
                    None,
                    f"{_EVENT_WARNINGS[event.kind]}: {details}"
                    if details
                    else _EVENT_WARNINGS[event.kind],
                )
            )
    return found


_EVENT_WARNINGS = {
    "memory.not_released": "GPU memory was not released after the stop",
    "restore.foreign_changes": "someone else changed the unit's files during the sweep",
    "dropin.stale_found": "a drop-in left by an earlier run was found and ignored",
    "host.unreachable": "the host became unreachable",
}


def _point_warnings(trial: TrialView, name: str, point: PointView) -> list[ReportWarning]:
    """A point's flags as warnings, in :data:`_POINT_FLAGS`' order, each with its numbers."""
    where = f"context {point.context}, concurrency {point.concurrency}"
    flags = set(point.flags)
    return [
        ReportWarning(kind, trial.host, name, f"{where}: {detail(point)}")
        for flag, kind, detail in _POINT_FLAGS
        if flag in flags
    ]


def _concurrency_short(point: PointView) -> str:
    held = point.metrics.concurrency_held
    held_text = f"{held:.2f}" if held is not None else "unknown"
    return f"the client held {held_text} of {point.concurrency} requests in flight"


def _client_saturated(point: PointView) -> str:
    cpu = point.metrics.client_cpu_fraction
    lag = point.metrics.loop_lag_p99_s
    return (
        f"client CPU {_pct(cpu)}, event-loop lag p99 "
        f"{'?' if lag is None else f'{lag * 1000:.1f} ms'}"
    )


def _accept_len_disagree(point: PointView) -> str:
    return ", ".join(
        f"{source} {value:.2f}"
        for source in ("journal", "meta_info", "metrics")
        if (value := point.accept.source(source).value) is not None
    )


def _errors(point: PointView) -> str:
    kinds = point.metrics.errors_by_kind
    detail = ", ".join(f"{k} x{v}" for k, v in kinds.items()) if kinds else ""
    return (
        f"{point.metrics.errors} of {point.metrics.requests} "
        f"requests failed{f' ({detail})' if detail else ''}"
    )


_POINT_FLAGS: tuple[tuple[str, str, Callable[[PointView], str]], ...] = (
    ("concurrency_short", "concurrency-short", _concurrency_short),
    ("client_saturated", "client-saturated", _client_saturated),
    ("accept_len_disagree", "accept-len-disagree", _accept_len_disagree),
    ("errors", "errors", _errors),
    ("truncated", "truncated", lambda p: f"{p.metrics.truncated} outputs truncated"),
    (
        "too_few_requests",
        "too-few-requests",
        lambda p: f"only {p.metrics.requests_ok} successful requests",
    ),
)
"""The point flags that are warnings: flag, warning kind, and what the warning says after
the point's context and concurrency."""


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value * 100:.0f}%"


def _attempt_views(
    tried: Sequence[TrialOutcome], host: str, host_events: Sequence[EventRecord]
) -> tuple[AttemptView, ...]:
    """A trial's attempts in number order, each with its own events and lifecycle."""
    views: list[AttemptView] = []
    for index, attempt in enumerate(tried):
        next_start = tried[index + 1].started_at if index + 1 < len(tried) else None
        mine = _attempt_events(attempt, host, host_events, next_start)
        views.append(
            AttemptView(
                number=attempt.attempt or 0,
                state=attempt.state,
                cause=attempt.cause,
                evidence=dict(attempt.evidence or {}),
                started_at=attempt.started_at,
                finished_at=attempt.finished_at,
                lifecycle=_lifecycle(attempt.evidence or {}, mine)
                if attempt.state != "skipped"
                else None,
                events=tuple(_event_json(e) for e in mine),
            )
        )
    return tuple(views)


RequestsKey = tuple[str, str, int, str]
"""A throughput point's raw requests by what the results call the point: its trial's key and
host, the attempt's number, and the point's key within the attempt."""


def requests_key(attempt: TrialOutcome, point: StoredThroughput) -> RequestsKey:
    cell = point_key(
        "throughput",
        context=point.context,
        concurrency=point.concurrency,
        rate=point.rate,
        workload=point.workload,
    )
    return (attempt.key, attempt.host, attempt.attempt or 0, cell)


@dataclass(frozen=True, slots=True)
class _Records:
    """What the report reads beside the results: the host's events and each point's requests."""

    events_by_host: Mapping[str | None, Sequence[EventRecord]]
    requests: Mapping[RequestsKey, Sequence[StoredRequest]]
    include_requests: bool


def _by_trial(results: SweepResults) -> list[list[TrialOutcome]]:
    """Each trial's outcomes (its attempts by number, or its one never-attempted entry), the
    trials in plan order."""
    trials: dict[tuple[str, str], list[TrialOutcome]] = {}
    for outcome in results.trials:
        trials.setdefault((outcome.key, outcome.host), []).append(outcome)
    return list(trials.values())


def _trial_view(
    ordinal: int,
    outcomes: Sequence[TrialOutcome],
    host_type: str,
    records: _Records,
    never_run: TrialState,
) -> TrialView:
    """One trial as the report shows it: its attempts, and its last attempt's points."""
    first = outcomes[0]
    tried = [o for o in outcomes if o.attempt is not None]
    # The trial's numbers are its last attempt's: a retry never mixes with a failed try.
    shown = tried[-1] if tried else None
    throughput: tuple[PointView, ...] = ()
    if shown is not None:
        throughput = tuple(
            _throughput_point(
                p, records.requests.get(requests_key(shown, p), ()), records.include_requests
            )
            for p in shown.throughput
        )
    return TrialView(
        key=first.key,
        host=first.host,
        host_type=host_type,
        config=dict(first.config),
        is_baseline=first.baseline,
        ordinal=ordinal,
        label=trial_label(first.config, first.plan),
        attempts=_attempt_views(tried, first.host, records.events_by_host.get(first.host, [])),
        throughput=throughput,
        coding=shown.coding if shown else (),
        plan=first.plan,
        never_run_state=never_run,
    )


def _host_type_group(
    host_type: str,
    members: Sequence[TrialView],
    hosts: Sequence[HostOutcome],
    temperature: float | None,
) -> HostTypeGroup:
    """One host type's section: its trials (short-labelled), its matrix, its hosts, and the
    losslessness of each config against its baseline at temperature 0."""
    _short_labels(members)
    # The planned cells of every trial, with what was measured (a trial planned before plans
    # were stored shows what it measured).
    ordered = [c for v in members if v.plan is not None for c in v.plan.cells]
    ordered += [p.measured.cell for v in members for p in v.throughput]
    cells = set(ordered)
    main = main_workload(ordered)
    grid = [c for c in cells if c.concurrency is not None and c.workload == main]
    host_views = tuple(
        HostView(
            name=h.name,
            type=h.type,
            set_aside_reason=h.set_aside,
            provenance=_host_provenance([v for v in members if v.host == h.name]),
            baseline_exec_start=_baseline_exec_start([v for v in members if v.host == h.name]),
        )
        for h in hosts
        if h.type == host_type
    )
    group = HostTypeGroup(
        host_type=host_type,
        hosts=host_views,
        trials=tuple(members),
        contexts=tuple(sorted({c.context for c in grid})),
        concurrencies=tuple(sorted({c.concurrency for c in grid if c.concurrency is not None})),
        main_workload=main,
        other_cells=tuple(sorted(c for c in cells if c not in set(grid))),
    )
    if temperature == 0.0:
        for member in members:
            baseline = group.baseline_for(member)
            if baseline is not None and not member.is_baseline:
                member.lossless = _drift(member, baseline, temperature)
    return group


def build_report(
    results: SweepResults,
    events: Sequence[EventRecord],
    requests: Mapping[RequestsKey, Sequence[StoredRequest]],
    *,
    include_requests: bool = False,
    answers: Sequence[Answer] = (),
) -> SweepReport:
    """The report of one sweep from its results (pure: no store, no clock), the host's events
    and the points' raw requests (:func:`requests_key`); ``answers`` are the caller's, built
    by the answers layer from the same results."""
    trials = _by_trial(results)
    plans = _planned(trials)
    models = [p.model for p in plans if p.model]
    temperatures = {p.coding_temperature for p in plans if p.coding_temperature is not None}
    temperature = next(iter(temperatures)) if len(temperatures) == 1 else None
    never_run = unattempted_state(results.state)
    host_types = {h.name: h.type for h in results.hosts}
    events_by_host: dict[str | None, list[EventRecord]] = {}
    for event in events:
        events_by_host.setdefault(event.host, []).append(event)
    records = _Records(events_by_host, requests, include_requests)
    views = [
        _trial_view(
            ordinal, outcomes, host_types.get(outcomes[0].host, "unknown"), records, never_run
        )
        for ordinal, outcomes in enumerate(trials)
    ]
    type_order: list[str] = []
    for name in [h.name for h in results.hosts] + [v.host for v in views]:
        host_type = host_types.get(name, "unknown")
        if host_type not in type_order:
            type_order.append(host_type)
    groups = [
        _host_type_group(
            kind, [v for v in views if v.host_type == kind], results.hosts, temperature
        )
        for kind in type_order
    ]
    return SweepReport(
        name=results.sweep,
        id=results.id,
        state=results.state,
        submitted_at=results.submitted_at,
        started_at=results.started_at,
        finished_at=results.finished_at,
        summary=results.summary,
        model=models[0] if models else None,
        coding_temperature=temperature,
        groups=tuple(groups),
        warnings=tuple(_warnings(groups, events)),
        sweep_events=tuple(_event_json(e) for e in events if e.host is None),
        answers=tuple(answers),
    )


def _baseline_exec_start(trials: Sequence[TrialView]) -> tuple[str, ...] | None:
    """The command line the host's own baseline ran; None when the host ran none (another
    config's command line is no baseline's)."""
    for trial in trials:
        provenance = trial.provenance if trial.is_baseline else None
        argv = provenance.get("exec_start") if provenance else None
        if isinstance(argv, list) and argv:
            return tuple(str(a) for a in argv)
    return None


def _host_provenance(trials: Sequence[TrialView]) -> JsonObject | None:
    """The host's provenance as its baseline trial saw it (else its first successful trial)."""
    ordered = sorted(trials, key=lambda t: (not t.is_baseline, t.ordinal))
    return next((p for t in ordered if (p := t.provenance) is not None), None)


async def load_report(
    store: Store, ref: str | int, *, include_requests: bool = False
) -> SweepReport:
    """Read one sweep (by name or id) from the store; raises ``SweepNotFound``."""
    sweep = await store.get_sweep(ref)
    results = await store.results(sweep.id)
    # The answers from the sweep file stored with the results (none if it no longer parses).
    answers = answered_from_text(
        results, sweep.yaml_text, f"sweep {sweep.name} (id {sweep.id})"
    ).answers
    return build_report(
        results,
        await store.events(sweep.id),
        await _requests(store, sweep.id),
        include_requests=include_requests,
        answers=answers,
    )


async def _requests(store: Store, sweep_id: int) -> dict[RequestsKey, list[StoredRequest]]:
    """Every throughput point's raw requests, by :func:`requests_key`."""
    trials = {t.id: t for t in await store.trials(sweep_id)}
    attempts = {a.id: a for a in await store.attempts(sweep_id)}
    requests: dict[RequestsKey, list[StoredRequest]] = {}
    for point in await store.points(sweep_id=sweep_id):
        if point.kind == "throughput":
            attempt = attempts[point.attempt_id]
            trial = trials[attempt.trial_id]
            key = (trial.key, trial.host, attempt.number, point.key)
            requests[key] = await store.requests(point.id)
    return requests


__all__ = [
    "FLAGS",
    "UNTRUSTED_FLAGS",
    "AttemptView",
    "CodingSummary",
    "Drift",
    "FlagInfo",
    "HostTypeGroup",
    "HostView",
    "Lifecycle",
    "PointView",
    "ReportWarning",
    "RequestsKey",
    "SweepReport",
    "TrialView",
    "build_report",
    "config_key",
    "config_label",
    "flag_codes",
    "flag_info",
    "load_report",
    "requests_key",
    "short_labels",
    "trial_labels",
]
