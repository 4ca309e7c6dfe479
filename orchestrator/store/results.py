"""A sweep's results as typed values, with their JSON form defined next to each type.

Inside the orchestrator results travel as :class:`SweepResults`, :class:`TrialOutcome` and the
point types (:class:`ThroughputPoint`, :class:`CodingPoint`); JSON is made only where a person or
another program reads it (``results --json``, ``run --json``, the API, the webhook) by
``to_json()``, and read back by ``from_json()``. A point's encoding into the store's row
(:class:`~orchestrator.store.records.NewPoint`) and its decoding from one
(:class:`~orchestrator.store.records.PointRecord`) live here too, so no other module knows the
names under which a metric is stored.

The JSON shape is the contract of ``orchestrator results --json`` and ``run --json`` (issue 6):
``{"sweep", "id", "state", "trials": [{"key", "host", "config", "state", "cause", "attempt",
"points": [{"kind", "context", "concurrency", "problem", "metrics", "accept_len"}]}]}``, one
trial entry per attempt; a trial never attempted appears once with ``attempt`` null, as
``queued``, or ``cancelled`` when its sweep was cancelled first.
More keys (timestamps, evidence, quality flags, hosts, the trial's plan) ride along; keys are
only ever added.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, cast, get_args

from orchestrator.store.records import (
    SWEEP_STATES,
    Attempt,
    AttemptState,
    HostRecord,
    NewPoint,
    PointRecord,
    SweepRecord,
    SweepState,
    TrialPlan,
    TrialRecord,
)
from orchestrator.types import (
    INTEGER_SCALARS,
    LATENCIES,
    SYNTHETIC_WORKLOAD,
    THROUGHPUT_SCALARS,
    JsonObject,
    MatrixCell,
    Outcome,
    ThroughputScalars,
    point_metric_names,
)

TrialState = AttemptState
"""A trial's state as a reader sees it: its latest attempt's (the same states, one definition),
or for a trial never attempted ``queued``, or ``cancelled`` when its sweep was cancelled before
it ran."""

TRIAL_STATES: tuple[TrialState, ...] = get_args(TrialState)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


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


# --- throughput points ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Count, mean and tail percentiles of one latency over a point's measured requests."""

    count: int = 0
    mean_s: float | None = None
    p50_s: float | None = None
    p90_s: float | None = None
    p99_s: float | None = None
    max_s: float | None = None

    def to_json(self, prefix: str) -> JsonObject:
        """Flat fields: ``ttft_count``, ``ttft_mean_s``, ``ttft_p50_s``, ..."""
        return {
            f"{prefix}_count": self.count,
            f"{prefix}_mean_s": self.mean_s,
            f"{prefix}_p50_s": self.p50_s,
            f"{prefix}_p90_s": self.p90_s,
            f"{prefix}_p99_s": self.p99_s,
            f"{prefix}_max_s": self.max_s,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], prefix: str) -> LatencySummary:
        return cls(
            count=_int(data.get(f"{prefix}_count")) or 0,
            mean_s=_number(data.get(f"{prefix}_mean_s")),
            p50_s=_number(data.get(f"{prefix}_p50_s")),
            p90_s=_number(data.get(f"{prefix}_p90_s")),
            p99_s=_number(data.get(f"{prefix}_p99_s")),
            max_s=_number(data.get(f"{prefix}_max_s")),
        )


_LATENCIES = LATENCIES
_SCALARS = THROUGHPUT_SCALARS
_WITHIN_RUN = ("output_tok_s_se", "output_tok_s_batches")
_LOAD = ("arrivals", "seed", "duration_s", "max_concurrency", "slo", "arrival_schedule")
_KNOWN_METRICS = point_metric_names() | {"errors_by_kind", "calibration", *_WITHIN_RUN, *_LOAD}


@dataclass(frozen=True, slots=True)
class ThroughputMetrics(ThroughputScalars):
    """What one (context, concurrency) point measured; latencies in seconds, rates per second.

    The scalars are :class:`~orchestrator.types.ThroughputScalars`' (the one list of them);
    this adds the errors by kind, the latency summaries, how the load was shaped and the
    within-run spread. ``calibration`` is how the prompts were sized (filler words, measured
    tokens, tolerance); ``extra`` keeps metrics this version does not name, so a newer
    writer's fields survive.
    """

    errors_by_kind: Mapping[str, int] = field(default_factory=dict)
    ttft: LatencySummary = LatencySummary()
    itl: LatencySummary = LatencySummary()
    tpot: LatencySummary = LatencySummary()
    e2e: LatencySummary = LatencySummary()
    send_lag: LatencySummary = LatencySummary()
    """An open-loop point's send stamps minus their scheduled times."""
    calibration: JsonObject | None = None
    arrivals: str | None = None
    """An open-loop point's schedule: ``poisson`` or ``constant``, its seed, measured seconds,
    cap on requests in flight, and the offsets (s) it sent against; the ``slo`` it was judged
    by (any point)."""
    seed: int | None = None
    duration_s: float | None = None
    max_concurrency: int | None = None
    arrival_schedule: tuple[float, ...] = ()
    slo: JsonObject | None = None
    output_tok_s_se: float | None = None
    """Request-to-request standard error of ``output_tok_s`` within the run (batch means over
    its waves); None when the point had fewer than two waves or predates it."""
    output_tok_s_batches: int = 0
    extra: JsonObject = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        out: JsonObject = {}
        for name in _SCALARS:
            out[name] = getattr(self, name)
            if name == "errors":
                out["errors_by_kind"] = dict(self.errors_by_kind)
        for name in _LATENCIES:
            out.update(cast(LatencySummary, getattr(self, name)).to_json(name))
        out["calibration"] = self.calibration
        if self.arrivals is not None:
            out.update(
                arrivals=self.arrivals,
                seed=self.seed,
                duration_s=self.duration_s,
                max_concurrency=self.max_concurrency,
                arrival_schedule=list(self.arrival_schedule),
            )
        if self.slo is not None:
            out["slo"] = dict(self.slo)
        out["output_tok_s_se"] = self.output_tok_s_se
        out["output_tok_s_batches"] = self.output_tok_s_batches
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ThroughputMetrics:
        scalars: dict[str, Any] = {
            name: (_int if name in INTEGER_SCALARS else _number)(data.get(name))
            for name in _SCALARS
        }
        kinds = data.get("errors_by_kind")
        calibration = data.get("calibration")
        arrivals, slo = data.get("arrivals"), data.get("slo")
        schedule = data.get("arrival_schedule")
        return cls(
            **scalars,
            errors_by_kind={
                str(k): v for k, v in (kinds.items() if isinstance(kinds, Mapping) else ())
            },
            ttft=LatencySummary.from_json(data, "ttft"),
            itl=LatencySummary.from_json(data, "itl"),
            tpot=LatencySummary.from_json(data, "tpot"),
            e2e=LatencySummary.from_json(data, "e2e"),
            send_lag=LatencySummary.from_json(data, "send_lag"),
            calibration=dict(calibration) if isinstance(calibration, Mapping) else None,
            arrivals=arrivals if isinstance(arrivals, str) else None,
            seed=_int(data.get("seed")),
            duration_s=_number(data.get("duration_s")),
            max_concurrency=_int(data.get("max_concurrency")),
            arrival_schedule=tuple(
                float(x) for x in (schedule if isinstance(schedule, list) else ())
                if isinstance(x, int | float)
            ),
            slo=dict(slo) if isinstance(slo, Mapping) else None,
            output_tok_s_se=_number(data.get("output_tok_s_se")),
            output_tok_s_batches=_int(data.get("output_tok_s_batches")) or 0,
            extra={k: v for k, v in data.items() if k not in _KNOWN_METRICS},
        )


@dataclass(frozen=True, slots=True)
class AcceptEstimate:
    """One source's accept length for a point, with how many samples it rests on, or why not.

    The benchmark makes it (``orchestrator.bench.acceptlen``) and the store keeps it as made:
    one type from the measurement to ``results --json``.
    """

    value: float | None = None
    count: int = 0
    reason: str | None = None
    exact: int = 0
    """Of ``count``, how many were exact counts rather than estimates (meta_info only: the
    requests whose server reported its correct drafts)."""


_ACCEPT_SOURCES = {
    "journal": "accept_len_journal_lines",
    "meta_info": "accept_len_meta_info_requests",
    "metrics": "accept_len_metrics_verify_calls",
}
_ACCEPT_EXACT = {"meta_info": "accept_len_meta_info_exact_requests"}
"""The sources whose exact count is written (only meta_info's can be exact)."""


_ACCEPT_FLAG_NAMES = {"disagree": "accept_len_disagree", "no_decode_lines": "no_decode_lines"}
"""An accept-length flag's name among a point's quality flags."""


@dataclass(frozen=True, slots=True)
class AcceptLength:
    """A point's accept length by source (journal decode lines, meta_info, /metrics).

    ``value`` is the most tightly scoped available one; ``flags`` says where the sources
    disagree (``disagree``) or the journal had no decode line (``no_decode_lines``).
    """

    value: float | None = None
    journal: AcceptEstimate = AcceptEstimate()
    meta_info: AcceptEstimate = AcceptEstimate()
    metrics: AcceptEstimate = AcceptEstimate()
    flags: tuple[str, ...] = ()

    @property
    def speculative(self) -> bool:
        """Some source saw drafts verified (speculative decoding was on)."""
        return any(e.value is not None for e in (self.journal, self.meta_info, self.metrics))

    def source(self, name: str) -> AcceptEstimate:
        return cast(AcceptEstimate, getattr(self, name))

    def to_json(self) -> JsonObject:
        out: JsonObject = {"accept_len": self.value}
        for name, count_key in _ACCEPT_SOURCES.items():
            estimate = self.source(name)
            out[f"accept_len_{name}"] = estimate.value
            out[count_key] = estimate.count
            if name in _ACCEPT_EXACT:
                out[_ACCEPT_EXACT[name]] = estimate.exact
            out[f"accept_len_{name}_reason"] = estimate.reason
        out["accept_len_flags"] = list(self.flags)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AcceptLength:
        sources = {
            name: AcceptEstimate(
                value=_number(data.get(f"accept_len_{name}")),
                count=_int(data.get(count_key)) or 0,
                reason=_text(data.get(f"accept_len_{name}_reason")),
                exact=_int(data.get(_ACCEPT_EXACT.get(name, ""))) or 0,
            )
            for name, count_key in _ACCEPT_SOURCES.items()
        }
        flags = data.get("accept_len_flags")
        return cls(
            value=_number(data.get("accept_len")),
            flags=tuple(str(f) for f in flags) if isinstance(flags, list) else (),
            **sources,
        )


@dataclass(frozen=True, slots=True)
class PointProvenance:
    """Which server process measured a point, where in its journal, and when (Unix time)."""

    invocation_id: str | None = None
    cursor_start: str | None = None
    cursor_end: str | None = None
    started_at: float | None = None
    finished_at: float | None = None


@dataclass(frozen=True, slots=True)
class ThroughputPoint:
    """One cell of one attempt: a context at a closed-loop concurrency or an open-loop rate,
    on a workload.

    ``quality`` names the benchmark's quality flags the point carries (``errors``,
    ``truncated``, ``concurrency_short``, ``rate_short``, ...); the accept-length flags are in
    ``accept``.
    """

    kind: ClassVar[Literal["throughput"]] = "throughput"
    context: int
    concurrency: int | None
    metrics: ThroughputMetrics
    accept: AcceptLength = AcceptLength()
    quality: tuple[str, ...] = ()
    provenance: PointProvenance = PointProvenance()
    rate: float | None = None
    """Offered requests per second of an open-loop point; None for a closed-loop one."""
    workload: str = SYNTHETIC_WORKLOAD

    def __post_init__(self) -> None:
        self.cell  # noqa: B018 - validates concurrency xor rate

    @property
    def flags(self) -> tuple[str, ...]:
        """Every quality flag of the point by name: the benchmark's, then the accept length's
        (``accept_len_disagree``, ``no_decode_lines``). A missing decode line counts only when
        another source saw drafts verified: without speculative decoding none is expected."""
        flags = list(self.quality)
        for flag in self.accept.flags:
            name = _ACCEPT_FLAG_NAMES.get(flag, f"accept_len_{flag}")
            if name == "no_decode_lines" and not self.accept.speculative:
                continue
            if name not in flags:
                flags.append(name)
        return tuple(flags)

    @property
    def cell(self) -> MatrixCell:
        return MatrixCell(self.context, self.concurrency, self.rate, self.workload)

    def to_new_point(self) -> NewPoint:
        """The store's row for this point."""
        return NewPoint(
            kind="throughput",
            context=self.context,
            concurrency=self.concurrency,
            rate=self.rate,
            workload=None if self.workload == SYNTHETIC_WORKLOAD else self.workload,
            metrics=self.metrics.to_json(),
            accept_len=self.accept.to_json(),
            quality={flag: True for flag in self.quality},
            **_provenance_fields(self.provenance),
        )

    def to_json(self) -> JsonObject:
        return {
            "kind": self.kind,
            "context": self.context,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "workload": self.workload,
            "problem": None,
            "metrics": self.metrics.to_json(),
            "accept_len": self.accept.to_json(),
            "quality": {flag: True for flag in self.quality},
            "provenance": _provenance_fields(self.provenance),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ThroughputPoint:
        context, concurrency = _int(data.get("context")), _int(data.get("concurrency"))
        rate = _number(data.get("rate"))
        if context is None or (concurrency is None) == (rate is None):
            raise ValueError("a throughput point has a context and a concurrency or a rate")
        accept = data.get("accept_len")
        workload = data.get("workload")
        return cls(
            context=context,
            concurrency=concurrency,
            rate=rate,
            workload=workload if isinstance(workload, str) and workload else SYNTHETIC_WORKLOAD,
            metrics=ThroughputMetrics.from_json(_mapping(data.get("metrics"))),
            accept=AcceptLength.from_json(accept if isinstance(accept, Mapping) else {}),
            quality=_quality(data.get("quality")),
            provenance=_provenance_from_json(data.get("provenance")),
        )


# --- coding points --------------------------------------------------------------------------

_UNSCORED = frozenset({Outcome.TRUNCATED, Outcome.REQUEST_ERROR})


def parse_outcome(value: Any) -> Outcome:
    """A stored outcome (any case); one this version does not know reads as ``error``."""
    try:
        return Outcome(str(value).lower())
    except ValueError:
        return Outcome.ERROR


@dataclass(frozen=True, slots=True)
class CodingPoint:
    """One coding problem's outcome with the evidence: the code run and the raw output."""

    kind: ClassVar[Literal["coding"]] = "coding"
    problem: str
    outcome: Outcome
    detail: str | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None
    elapsed_s: float | None = None
    tokens_per_s: float | None = None
    code: str | None = None
    output: str = ""
    """Everything the model generated, reasoning first (what the lossless check compares)."""
    containment: str | None = None
    provenance: PointProvenance = PointProvenance()

    @property
    def passed(self) -> bool:
        return self.outcome is Outcome.PASS

    @property
    def scored(self) -> bool:
        """A cut-off answer or a failed request says nothing about the model's code."""
        return self.outcome not in _UNSCORED

    def metrics_json(self) -> JsonObject:
        return {
            "outcome": self.outcome.value,
            "detail": self.detail,
            "finish_reason": self.finish_reason,
            "completion_tokens": self.completion_tokens,
            "elapsed_s": self.elapsed_s,
            "tokens_per_s": self.tokens_per_s,
            "code": self.code,
            "output": self.output,
            "containment": self.containment,
        }

    def to_new_point(self) -> NewPoint:
        return NewPoint(
            kind="coding",
            problem=self.problem,
            metrics=self.metrics_json(),
            quality={"truncated": True} if self.outcome is Outcome.TRUNCATED else {},
            **_provenance_fields(self.provenance),
        )

    def to_json(self) -> JsonObject:
        return {
            "kind": self.kind,
            "context": None,
            "concurrency": None,
            "problem": self.problem,
            "metrics": self.metrics_json(),
            "accept_len": None,
            "quality": {"truncated": True} if self.outcome is Outcome.TRUNCATED else {},
            "provenance": _provenance_fields(self.provenance),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CodingPoint:
        problem = _text(data.get("problem"))
        if not problem:
            raise ValueError("a coding point names its problem")
        metrics = _mapping(data.get("metrics"))
        return cls(
            problem=problem,
            outcome=parse_outcome(metrics.get("outcome")),
            detail=_text(metrics.get("detail")),
            finish_reason=_text(metrics.get("finish_reason")),
            completion_tokens=_int(metrics.get("completion_tokens")),
            elapsed_s=_number(metrics.get("elapsed_s")),
            tokens_per_s=_number(metrics.get("tokens_per_s")),
            code=_text(metrics.get("code")),
            output=_text(metrics.get("output")) or "",
            containment=_text(metrics.get("containment")),
            provenance=_provenance_from_json(data.get("provenance")),
        )


Point = ThroughputPoint | CodingPoint
"""A measured point of either kind."""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _quality(value: Any) -> tuple[str, ...]:
    return tuple(str(k) for k, on in _mapping(value).items() if on)


def _provenance_fields(provenance: PointProvenance) -> dict[str, Any]:
    return {f.name: getattr(provenance, f.name) for f in dataclasses.fields(provenance)}


def _provenance_from_json(value: Any) -> PointProvenance:
    data = _mapping(value)
    return PointProvenance(
        invocation_id=_text(data.get("invocation_id")),
        cursor_start=_text(data.get("cursor_start")),
        cursor_end=_text(data.get("cursor_end")),
        started_at=_number(data.get("started_at")),
        finished_at=_number(data.get("finished_at")),
    )


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


def point_from_json(data: Mapping[str, Any]) -> Point:
    if data.get("kind") == "throughput":
        return ThroughputPoint.from_json(data)
    if data.get("kind") == "coding":
        return CodingPoint.from_json(data)
    raise ValueError(f"unknown point kind {data.get('kind')!r}")


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
            config=dict(_mapping(data.get("config"))),
            baseline=bool(data.get("baseline")),
            state=cast(TrialState, state),
            cause=_text(data.get("cause")),
            evidence=dict(evidence) if isinstance(evidence, Mapping) else None,
            attempt=_int(data.get("attempt")),
            attempt_id=_int(data.get("attempt_id")),
            started_at=_number(data.get("started_at")),
            finished_at=_number(data.get("finished_at")),
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
        return {"name": self.name, "type": self.type, "set_aside": self.set_aside}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HostOutcome:
        return cls(str(data["name"]), str(data["type"]), _text(data.get("set_aside")))


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
        return {
            "host_type": self.host_type,
            "reason": self.reason,
            "explored": self.explored,
            "space": self.space,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExplorationStop:
        return cls(
            str(data.get("host_type", "")),
            str(data.get("reason", "")),
            _int(data.get("explored")),
            _int(data.get("space")),
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
            priority=_int(data.get("priority")) or 0,
            submitted_at=_number(data.get("submitted_at")),
            started_at=_number(data.get("started_at")),
            finished_at=_number(data.get("finished_at")),
            replaced_by=_int(data.get("replaced_by")),
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
