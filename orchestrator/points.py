"""A measured point, as the benchmark makes it and the store keeps it: one type per kind.

A throughput point (:class:`ThroughputPoint`: a cell, its metrics, its accept length, its
provenance and quality flags, the requests it sent) and a coding point (:class:`CodingPoint`:
one problem's outcome with its evidence) are made where they are measured and recorded as
they are; their ``to_json()`` is the store's format and ``from_json()`` reads it back, so no
other module knows the names under which a metric is stored. A point's identity within its
attempt (:func:`point_key`) and its row (:class:`NewPoint`) are here too.

Nothing here imports from the rest of the package but :mod:`orchestrator.types`, so the
benchmark, the store, the host loop and the answers all speak of the same point.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, cast, get_args

from orchestrator.types import (
    INTEGER_SCALARS,
    LATENCIES,
    SYNTHETIC_WORKLOAD,
    THROUGHPUT_SCALARS,
    JsonObject,
    MatrixCell,
    Outcome,
    ThroughputScalars,
    format_rate,
    point_metric_names,
)

PointKind = Literal["throughput", "coding"]
POINT_KINDS: tuple[PointKind, ...] = get_args(PointKind)


# --- JSON values read back ------------------------------------------------------------------


def read_number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def read_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def read_mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


# --- identity, row and requests ------------------------------------------------------------


def point_key(
    kind: PointKind,
    *,
    context: int | None = None,
    concurrency: int | None = None,
    problem: str | None = None,
    rate: float | None = None,
    workload: str | None = None,
) -> str:
    """The identity of a point within an attempt, so a resumed run can skip what is committed.

    A throughput point is one cell: a context at a closed-loop concurrency or an open-loop
    rate, on a workload; a coding point is one problem. A synthetic closed-loop cell keeps the
    key it had before workloads and rates existed, so stores written then resume unchanged.
    """
    if kind == "throughput":
        if context is None or problem is not None or (concurrency is None) == (rate is None):
            raise ValueError(
                "a throughput point has a context and a concurrency or a rate, no problem"
            )
        load = f"concurrency={concurrency}" if rate is None else f"rate={format_rate(rate)}"
        head = "" if workload in (None, SYNTHETIC_WORKLOAD) else f"workload={workload}/"
        return f"throughput/{head}context={context}/{load}"
    if kind == "coding":
        if not problem:
            raise ValueError("a coding point names its problem")
        return f"coding/{problem}"
    raise ValueError(f"unknown point kind {kind!r}")


def cell_point_key(cell: MatrixCell) -> str:
    """The point key of a throughput cell."""
    return point_key(
        "throughput",
        context=cell.context,
        concurrency=cell.concurrency,
        rate=cell.rate,
        workload=cell.workload,
    )


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """One benchmark request as kept: times in seconds, ``sent_at`` as Unix time.

    Distinct from ``bench.client.RequestRecord`` (what the client observed, chunk by chunk);
    the benchmark maps one onto the other (``bench.point.stored_request``). ``extra`` holds
    what not every request has (chunk times, per-request accept length, ...).
    """

    sent_at: float
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    warmup: bool = False
    extra: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class NewPoint:
    """One measured point: a matrix cell or a coding problem, with its provenance."""

    kind: PointKind
    metrics: Mapping[str, Any]
    context: int | None = None
    concurrency: int | None = None
    problem: str | None = None
    rate: float | None = None
    workload: str | None = None
    """None for coding points and for synthetic throughput points."""
    accept_len: Mapping[str, Any] | None = None
    quality: Mapping[str, Any] = field(default_factory=dict)
    invocation_id: str | None = None
    cursor_start: str | None = None
    cursor_end: str | None = None
    started_at: float | None = None
    finished_at: float | None = None

    def __post_init__(self) -> None:
        self.key  # noqa: B018 - validates the identity fields

    @property
    def key(self) -> str:
        return point_key(
            self.kind,
            context=self.context,
            concurrency=self.concurrency,
            problem=self.problem,
            rate=self.rate,
            workload=self.workload,
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
            count=read_int(data.get(f"{prefix}_count")) or 0,
            mean_s=read_number(data.get(f"{prefix}_mean_s")),
            p50_s=read_number(data.get(f"{prefix}_p50_s")),
            p90_s=read_number(data.get(f"{prefix}_p90_s")),
            p99_s=read_number(data.get(f"{prefix}_p99_s")),
            max_s=read_number(data.get(f"{prefix}_max_s")),
        )


_LATENCIES = LATENCIES
_SCALARS = THROUGHPUT_SCALARS
_WITHIN_RUN = ("output_tok_s_se", "output_tok_s_batches", "output_len_count")
_LOAD = ("arrivals", "seed", "duration_s", "max_concurrency", "slo", "arrival_schedule")
_KNOWN_METRICS = point_metric_names() | {"errors_by_kind", "calibration", *_WITHIN_RUN, *_LOAD}


@dataclass(frozen=True, slots=True)
class ThroughputMetrics(ThroughputScalars):
    """What one point measured; latencies in seconds, rates per second.

    The scalars are :class:`~orchestrator.types.ThroughputScalars`' (the one list of them: a
    metric added there is measured by the benchmark's ``point_metrics``, stored and read back
    here with nothing else to change); this adds the errors by kind, the latency summaries,
    how the load was shaped and the within-run spread. ``calibration`` is how the prompts were
    sized (filler words, measured tokens, tolerance); ``extra`` keeps metrics this version
    does not name, so a newer writer's fields survive.
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
    output_len_count: int | None = None
    """How many output lengths ``output_len_*`` summarize (the completed requests)."""
    extra: JsonObject = field(default_factory=dict)

    def _values(self) -> JsonObject:
        out: JsonObject = {}
        for name in _SCALARS:
            out[name] = getattr(self, name)
            if name == "errors":
                out["errors_by_kind"] = dict(self.errors_by_kind)
        for name in _LATENCIES:
            out.update(cast(LatencySummary, getattr(self, name)).to_json(name))
        return out

    def _spread(self) -> JsonObject:
        return {
            "output_tok_s_se": self.output_tok_s_se,
            "output_tok_s_batches": self.output_tok_s_batches,
            "output_len_count": self.output_len_count,
        }

    def measured_json(self) -> JsonObject:
        """The measured values alone, flat by their stored names: the scalars (errors by kind
        beside ``errors``), each latency as ``<latency>_<stat>``, the within-run spread. What
        a live display shows of the last point; :meth:`to_json` adds how the load was shaped."""
        return {**self._values(), **self._spread()}

    def open_loop_load(self) -> JsonObject:
        """How an open-loop point's load was shaped, by the stored names (empty for a
        closed-loop point): what the stored metrics and an exported load config both write."""
        if self.arrivals is None:
            return {}
        return {
            "arrivals": self.arrivals,
            "seed": self.seed,
            "duration_s": self.duration_s,
            "max_concurrency": self.max_concurrency,
        }

    def to_json(self) -> JsonObject:
        out = self._values()
        out["calibration"] = self.calibration
        load = self.open_loop_load()
        if load:
            out.update(load, arrival_schedule=list(self.arrival_schedule))
        if self.slo is not None:
            out["slo"] = dict(self.slo)
        out.update(self._spread())
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ThroughputMetrics:
        scalars: dict[str, Any] = {
            name: (read_int if name in INTEGER_SCALARS else read_number)(data.get(name))
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
            seed=read_int(data.get("seed")),
            duration_s=read_number(data.get("duration_s")),
            max_concurrency=read_int(data.get("max_concurrency")),
            arrival_schedule=tuple(
                float(x) for x in (schedule if isinstance(schedule, list) else ())
                if isinstance(x, int | float)
            ),
            slo=dict(slo) if isinstance(slo, Mapping) else None,
            output_tok_s_se=read_number(data.get("output_tok_s_se")),
            output_tok_s_batches=read_int(data.get("output_tok_s_batches")) or 0,
            output_len_count=read_int(data.get("output_len_count")),
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
                value=read_number(data.get(f"accept_len_{name}")),
                count=read_int(data.get(count_key)) or 0,
                reason=read_text(data.get(f"accept_len_{name}_reason")),
                exact=read_int(data.get(_ACCEPT_EXACT.get(name, ""))) or 0,
            )
            for name, count_key in _ACCEPT_SOURCES.items()
        }
        flags = data.get("accept_len_flags")
        return cls(
            value=read_number(data.get("accept_len")),
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
    ``accept``. ``requests`` are the requests it sent, warm-up first, as the store keeps them
    beside the point (a point read back from the store has none: ``Store.requests`` reads
    them); they are no part of its JSON nor of its equality.
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
    requests: tuple[StoredRequest, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        self.cell  # noqa: B018 - validates concurrency xor rate

    @property
    def key(self) -> str:
        """The point's identity within its attempt (:func:`point_key`)."""
        return cell_point_key(self.cell)

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
        context, concurrency = read_int(data.get("context")), read_int(data.get("concurrency"))
        rate = read_number(data.get("rate"))
        if context is None or (concurrency is None) == (rate is None):
            raise ValueError("a throughput point has a context and a concurrency or a rate")
        accept = data.get("accept_len")
        workload = data.get("workload")
        return cls(
            context=context,
            concurrency=concurrency,
            rate=rate,
            workload=workload if isinstance(workload, str) and workload else SYNTHETIC_WORKLOAD,
            metrics=ThroughputMetrics.from_json(read_mapping(data.get("metrics"))),
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
    def key(self) -> str:
        """The point's identity within its attempt (:func:`point_key`)."""
        return point_key("coding", problem=self.problem)

    @property
    def requests(self) -> tuple[StoredRequest, ...]:
        """A coding point keeps no request rows: its output is its evidence."""
        return ()

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
        problem = read_text(data.get("problem"))
        if not problem:
            raise ValueError("a coding point names its problem")
        metrics = read_mapping(data.get("metrics"))
        return cls(
            problem=problem,
            outcome=parse_outcome(metrics.get("outcome")),
            detail=read_text(metrics.get("detail")),
            finish_reason=read_text(metrics.get("finish_reason")),
            completion_tokens=read_int(metrics.get("completion_tokens")),
            elapsed_s=read_number(metrics.get("elapsed_s")),
            tokens_per_s=read_number(metrics.get("tokens_per_s")),
            code=read_text(metrics.get("code")),
            output=read_text(metrics.get("output")) or "",
            containment=read_text(metrics.get("containment")),
            provenance=_provenance_from_json(data.get("provenance")),
        )


Point = ThroughputPoint | CodingPoint
"""A measured point of either kind."""


def _quality(value: Any) -> tuple[str, ...]:
    return tuple(str(k) for k, on in read_mapping(value).items() if on)


def _provenance_fields(provenance: PointProvenance) -> dict[str, Any]:
    return {f.name: getattr(provenance, f.name) for f in dataclasses.fields(provenance)}


def _provenance_from_json(value: Any) -> PointProvenance:
    data = read_mapping(value)
    return PointProvenance(
        invocation_id=read_text(data.get("invocation_id")),
        cursor_start=read_text(data.get("cursor_start")),
        cursor_end=read_text(data.get("cursor_end")),
        started_at=read_number(data.get("started_at")),
        finished_at=read_number(data.get("finished_at")),
    )



def point_from_json(data: Mapping[str, Any]) -> Point:
    if data.get("kind") == "throughput":
        return ThroughputPoint.from_json(data)
    if data.get("kind") == "coding":
        return CodingPoint.from_json(data)
    raise ValueError(f"unknown point kind {data.get('kind')!r}")

