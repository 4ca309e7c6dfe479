"""The context x concurrency matrix: one point = warm-up, then a closed loop at concurrency C.

Open-loop points (requests at a rate) live in ``orchestrator.bench.openloop``; both kinds
share :class:`PointSpec`, :class:`PointResult` and one metrics function, :func:`point_metrics`.

A point is trusted only if the client really held the load it claims. Established load
generators silently fall short of the requested concurrency when their client saturates and
then report client latency as server latency; so every point measures the concurrency it
actually held, its own CPU use and event-loop lag, and carries quality flags that say when
it is not a server result.

Each worker of the pool issues its next request as soon as its previous one finished, so
exactly ``concurrency`` requests are in flight (minus the client's own turnaround, which is
what ``concurrency_held`` measures). Responses are parsed after the phase, off the timed path,
by the client's engine (its dialect, and its counters for ``/metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.bench import acceptlen
from orchestrator.bench.acceptlen import DecodeSample
from orchestrator.bench.client import BenchClient, Phase, RawExchange, RequestRecord, parse_exchange
from orchestrator.bench.prompts import Calibration, PromptSource
from orchestrator.bench.stats import (
    EMPTY_SUMMARY,
    Summary,
    batch_rate_se,
    median,
    summarize,
    time_weighted_in_flight,
)
from orchestrator.engines.base import AcceptanceCounters, Prompt
from orchestrator.log import get_logger
from orchestrator.store.records import StoredRequest
from orchestrator.store.results import (
    AcceptEstimate,
    AcceptLength,
    PointProvenance,
    ThroughputMetrics,
    ThroughputPoint,
)
from orchestrator.types import LATENCIES, THROUGHPUT_SCALARS, Arrivals


def _log() -> Any:
    """The module logger, bound at call time (after the entry point configured logging)."""
    return get_logger(component="bench.matrix")


FLAG_CONCURRENCY_SHORT = "concurrency_short"
FLAG_RATE_SHORT = "rate_short"
FLAG_CLIENT_SATURATED = "client_saturated"
FLAG_ERRORS = "errors"
FLAG_TRUNCATED = "truncated"
FLAG_SHORT_OUTPUTS = "short_outputs"
FLAG_TOO_FEW_REQUESTS = "too_few_requests"
FLAG_PROMPT_LENGTH_INEXACT = "prompt_length_inexact"

@dataclass(frozen=True)
class Slo:
    """Per-request latency bounds, in seconds; None leaves that latency unbounded.

    A request is *good* when it succeeded and meets every bound given, as in bench_serving's
    ``--goodput ttft:MS tpot:MS e2el:MS`` (``metric <= bound``, bounds inclusive). Where the
    two differ, and why:

    - TPOT is the point's own :attr:`RequestRecord.tpot` (time from the first token-carrying
      chunk to the last, over the tokens after that chunk), so the bound tests the TPOT the
      point reports. bench_serving's is ``(latency - ttft) / (output_len - 1)``, which counts
      a multi-token first chunk (speculative decoding) as if it were one token. A request
      with no tokens after its first chunk has no TPOT and meets the bound, as
      bench_serving's ``tpot = 0`` for ``output_len <= 1`` does.
    - A request that streamed no token at all has no TTFT and fails a TTFT bound;
      bench_serving leaves its TTFT at 0.0 and counts it as meeting the bound.
    """

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def __post_init__(self) -> None:
        for name, bound in self.bounds():
            if not bound > 0:
                raise ValueError(f"slo {name} must be > 0 s, got {bound}")

    def bounds(self) -> tuple[tuple[str, float], ...]:
        """The bounds given, by name."""
        named = (("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s), ("e2e_s", self.e2e_s))
        return tuple((name, bound) for name, bound in named if bound is not None)

    def met_by(self, record: RequestRecord) -> bool:
        """Whether one request is good under these bounds."""
        if not record.ok:
            return False
        if self.ttft_s is not None and ((ttft := record.ttft) is None or ttft > self.ttft_s):
            return False
        if self.tpot_s is not None and (tpot := record.tpot) is not None and tpot > self.tpot_s:
            return False
        return not (self.e2e_s is not None and ((e2e := record.e2e) is None or e2e > self.e2e_s))

    def to_dict(self) -> dict[str, float | None]:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "e2e_s": self.e2e_s}


def good_requests(records: Iterable[RequestRecord], slo: Slo) -> int:
    """How many of ``records`` are good under ``slo`` (bench_serving's ``good_completed``)."""
    return sum(1 for r in records if slo.met_by(r))


@dataclass(frozen=True)
class PointSpec:
    """What one point asks for: a closed loop (``concurrency``, ``rounds``) or, when ``rate``
    is set, an open loop (``rate``, ``arrivals``, ``duration_s``, ``max_concurrency``, the
    schedule's ``seed``; ``concurrency`` and ``rounds`` None). ``max_tokens`` is the point's
    output length; a prompt's own ``max_tokens`` (workload output lengths) overrides it."""

    context: int
    concurrency: int | None
    rounds: int | None
    warmup_requests: int
    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True
    rate: float | None = None
    arrivals: Arrivals | None = None
    duration_s: float | None = None
    max_concurrency: int | None = None
    workload: str = "synthetic"
    seed: int | None = None
    slo: Slo | None = None

    @property
    def measured_requests(self) -> int | None:
        """A closed point's measured requests; None for a rate point (its schedule decides)."""
        if self.concurrency is None or self.rounds is None:
            return None
        return self.rounds * self.concurrency

    @property
    def tag(self) -> str:
        """The point in request labels: ``CONTEXT-CONCURRENCY`` or ``CONTEXT-rRATE``."""
        load = f"r{self.rate:g}" if self.rate is not None else str(self.concurrency)
        return f"{self.context}-{load}"


@dataclass(frozen=True)
class QualityThresholds:
    """When a point stops counting as a server measurement."""

    min_concurrency_fraction: float = 0.95
    min_rate_fraction: float = 0.95
    """A rate point whose achieved rate is below this share of its schedule's is flagged."""
    max_loop_lag_p99_s: float = 0.025
    max_client_cpu_fraction: float = 0.9
    min_requests: int = 5


@dataclass(frozen=True)
class PointMetrics:
    """Everything measured at one point; latencies in seconds, rates per second.

    Rates over the point's wall time (``request_s``, ``input_tok_s``, ``output_tok_s``,
    ``goodput``) are bench_serving's: completed requests (their prompt tokens, their output
    tokens, the good ones) divided by the time from the measured phase's start to the last
    response's end. ``achieved_rate`` and the schedule fields are a rate point's only.
    """

    requests: int
    requests_ok: int
    errors: int
    errors_by_kind: dict[str, int]
    truncated: int
    short_outputs: int
    wall_s: float | None
    input_tokens: int
    output_tokens: int
    output_tok_s: float | None
    request_decode_tok_s_p50: float | None
    ttft: Summary
    itl: Summary
    tpot: Summary
    e2e: Summary
    concurrency_held: float | None
    concurrency_held_full: float | None
    client_cpu_fraction: float | None
    loop_lag: Summary
    prompt_tokens_min: int | None
    prompt_tokens_max: int | None
    prompt_tokens_tolerance: int | None
    output_tok_s_se: float | None = None
    """Request-to-request standard error of ``output_tok_s`` within this run (batch means over
    its waves, :func:`~orchestrator.bench.stats.batch_rate_se`); None with fewer than 2."""
    output_tok_s_batches: int = 0
    request_s: float | None = None
    """Completed requests per second (bench_serving's request throughput)."""
    input_tok_s: float | None = None
    """Prompt tokens of the completed requests per second (bench_serving's input throughput)."""
    output_len: Summary = EMPTY_SUMMARY
    """The completed requests' output lengths (completion tokens): the distribution that
    natural stopping or workload output lengths produce."""
    good_requests: int | None = None
    goodput: float | None = None
    """Good requests per second (:class:`Slo`); None when the point has no bound."""
    goodput_fraction: float | None = None
    """Good requests over all measured requests (errors included): the share of the traffic
    that got its service level."""
    prompts_distinct: int | None = None
    """Distinct prompts among the measured requests: sample lines (``Prompt.origin``) counted
    once, every synthetic prompt on its own; None when the caller did not say."""
    prompts_reused: int | None = None
    """Measured requests whose sample prompt had been issued before (``Prompt.reused``)."""
    achieved_rate: float | None = None
    """Requests the client really sent per second over the measured phase (rate points)."""
    requests_scheduled: int | None = None
    requests_unsent: int | None = None
    """Scheduled requests never sent: still waiting for a free slot when the phase ended."""
    send_lag: Summary = EMPTY_SUMMARY
    """How late each request went out against its scheduled time (rate points)."""

    def as_fields(self) -> dict[str, Any]:
        """Flat fields by the store's names: every one of
        :data:`~orchestrator.types.THROUGHPUT_SCALARS` (this type's field of that name, or read
        off the loop-lag and output-length summaries), the within-run spread, and each latency
        as ``<latency>_<stat>``. The names are the store's list, so none is left behind."""
        from_summaries: dict[str, Any] = {
            "loop_lag_max_s": self.loop_lag.max,
            "loop_lag_p99_s": self.loop_lag.p99,
            **self.output_len.as_fields("output_len"),  # tokens, not seconds
        }
        fields: dict[str, Any] = {}
        for name in THROUGHPUT_SCALARS:
            fields[name] = from_summaries[name] if name in from_summaries else getattr(self, name)
            if name == "errors":
                fields["errors_by_kind"] = dict(self.errors_by_kind)
        fields["output_len_count"] = self.output_len.count
        fields["output_tok_s_se"] = self.output_tok_s_se
        fields["output_tok_s_batches"] = self.output_tok_s_batches
        for name in LATENCIES:
            summary: Summary = getattr(self, name)
            for key, value in summary.as_fields(name).items():
                fields[key if key.endswith("_count") else key + "_s"] = value
        return fields


def _calibration_json(c: Calibration) -> dict[str, Any]:
    """How a point's prompts were sized, as its JSON and its stored metrics both show it."""
    return {
        "filler_words": c.filler_words,
        "measured_tokens": c.measured_tokens,
        "tolerance": c.tolerance,
        "requests": c.requests,
        "workload": c.workload,
        "method": c.method,
    }


@dataclass
class PointResult:
    """One measured point, its raw requests (warm-up labelled) and provenance.

    ``invocation_id`` and the journal cursors are filled by the caller that knows the unit
    (the runner); ``attach_journal`` adds the journal's accept_len once the window is read.
    ``schedule`` is a rate point's arrival schedule (offsets in s from the measured phase's
    start; :func:`orchestrator.bench.openloop.arrival_schedule`), empty for a closed point.
    """

    spec: PointSpec
    metrics: PointMetrics
    flags: tuple[str, ...]
    calibration: Calibration
    requests: list[RequestRecord]
    started_monotonic: float
    ended_monotonic: float
    started_unix: float
    accept_len: AcceptLength
    metrics_text_before: str | None = None
    metrics_text_after: str | None = None
    invocation_id: str | None = None
    journal_cursor_start: str | None = None
    journal_cursor_end: str | None = None
    measured_marker: Any = None
    """What ``before_measured`` returned at the start of the measured phase."""
    schedule: tuple[float, ...] = ()

    def attach_journal(
        self, samples: Sequence[DecodeSample], *, lines_expected: bool = True
    ) -> None:
        """Recombine accept_len with the journal window's decode lines for this point
        (``lines_expected``: whether the window must hold one, :func:`acceptlen.combine`)."""
        self.accept_len = acceptlen.combine(
            acceptlen.from_journal(samples),
            self.accept_len.meta_info,
            self.accept_len.metrics,
            lines_expected=lines_expected,
        )

    def stored_metrics(self) -> ThroughputMetrics:
        """What the point measured, with how its prompts were sized, the slo it was judged
        by and a rate point's schedule: the store's metrics type."""
        spec = self.spec
        fields: dict[str, Any] = {
            **self.metrics.as_fields(),
            "calibration": _calibration_json(self.calibration),
            "slo": None if spec.slo is None else spec.slo.to_dict(),
        }
        if spec.rate is not None:
            fields.update(
                arrivals=spec.arrivals,
                seed=spec.seed,
                duration_s=spec.duration_s,
                max_concurrency=spec.max_concurrency,
                arrival_schedule=list(self.schedule),
            )
        return ThroughputMetrics.from_json(fields)

    def stored(self) -> tuple[ThroughputPoint, list[StoredRequest]]:
        """The point and its requests as the store keeps them: the producer returns the
        consumer's types, so the runner that records them converts nothing."""
        spec = self.spec
        point = ThroughputPoint(
            context=spec.context,
            concurrency=spec.concurrency,
            rate=spec.rate,
            workload=spec.workload,
            metrics=self.stored_metrics(),
            accept=self.accept_len,
            quality=tuple(self.flags),
            provenance=PointProvenance(
                invocation_id=self.invocation_id,
                cursor_start=self.journal_cursor_start,
                cursor_end=self.journal_cursor_end,
                started_at=self.started_unix,
                finished_at=self.started_unix + (self.ended_monotonic - self.started_monotonic),
            ),
        )
        return point, [stored_request(r) for r in self.requests]

    def to_dict(self, *, include_requests: bool = True) -> dict[str, Any]:
        spec = self.spec
        out: dict[str, Any] = {
            "context": spec.context,
            "concurrency": spec.concurrency,
            "rounds": spec.rounds,
            "warmup_requests": spec.warmup_requests,
            "max_tokens": spec.max_tokens,
            "temperature": spec.temperature,
            "ignore_eos": spec.ignore_eos,
            "workload": spec.workload,
            "rate": spec.rate,
            "arrivals": spec.arrivals,
            "duration_s": spec.duration_s,
            "max_concurrency": spec.max_concurrency,
            "seed": spec.seed,
            "slo": None if spec.slo is None else spec.slo.to_dict(),
            "arrival_schedule": list(self.schedule) if spec.rate is not None else None,
            "flags": list(self.flags),
            "prompt_calibration": _calibration_json(self.calibration),
            "started_unix": self.started_unix,
            "started_monotonic": self.started_monotonic,
            "ended_monotonic": self.ended_monotonic,
            "invocation_id": self.invocation_id,
            "journal_cursor_start": self.journal_cursor_start,
            "journal_cursor_end": self.journal_cursor_end,
        }
        out.update(self.metrics.as_fields())
        out.update(self.accept_len.to_json())
        if include_requests:
            out["raw_requests"] = [r.to_dict() for r in self.requests]
        return out


def stored_request(record: RequestRecord) -> StoredRequest:
    """One request as the store keeps it: the fields a reader of the raw requests needs."""
    data = record.to_dict()
    return StoredRequest(
        sent_at=record.send_time,
        ttft_s=record.ttft,
        e2e_s=record.e2e,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens,
        finish_reason=record.finish_reason,
        error=None if record.error is None else record.error.value,
        warmup=record.phase == "warmup",
        extra={
            k: data[k]
            for k in (
                "tpot_s",
                "chunks",
                "spec_verify_ct",
                "spec_accept_length",
                "spec_num_correct_drafts",
                "spec_num_proposed_drafts",
                "http_status",
                "error_detail",
                "token_source",
                "label",
            )
        },
    )


@dataclass
class _Timed:
    worker: int
    raw: RawExchange


@dataclass
class LoopLagMonitor:
    """Measures how late the event loop wakes a sleeper: the client's own saturation."""

    interval: float = 0.01
    samples: list[float] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        clock = time.monotonic
        while True:
            before = clock()
            await asyncio.sleep(self.interval)
            self.samples.append(max(clock() - before - self.interval, 0.0))

    def start(self) -> None:
        self._task = asyncio.create_task(self._tick())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def prompt_reuse(prompts: Iterable[str | Prompt]) -> tuple[int, int]:
    """(distinct, reused) over the prompts a point's measured phase sent.

    A sample prompt (``Prompt.origin``: its line) counts once however often it was sent; a
    plain or synthetic prompt (no origin) is distinct every time. ``reused`` counts the
    requests whose sample prompt the factory had issued before (``Prompt.reused``: it went out
    behind a fresh nonce).
    """
    origins: set[int] = set()
    synthetic = 0
    reused = 0
    for prompt in prompts:
        if isinstance(prompt, Prompt) and prompt.origin is not None:
            origins.add(prompt.origin)
            if prompt.reused:
                reused += 1
        else:
            synthetic += 1
    return synthetic + len(origins), reused


async def closed_loop(
    client: BenchClient,
    prompts: Sequence[str | Prompt],
    *,
    concurrency: int,
    spec: PointSpec,
    phase: Phase,
) -> list[_Timed]:
    """Issue ``prompts`` with ``concurrency`` workers, each sending its next at once."""
    results: list[_Timed] = []
    position = 0

    async def worker(index: int) -> None:
        nonlocal position
        while position < len(prompts):
            mine = position
            position += 1
            prompt = prompts[mine]
            raw = await client.stream(
                prompt,
                max_tokens=spec.max_tokens,  # a Prompt's own max_tokens overrides it
                temperature=spec.temperature,
                ignore_eos=spec.ignore_eos,
                label=f"{phase}-{spec.tag}-{mine}",
                phase=phase,
            )
            results.append(_Timed(index, raw))

    workers = min(concurrency, len(prompts))
    await asyncio.gather(*(worker(i) for i in range(workers)))
    return results


def steady_window(timed: Sequence[tuple[int, float, float]]) -> tuple[float, float] | None:
    """[last worker's first send, first worker's last end] from (worker, send, end) rows.

    The ramp-up and the ragged tail of a closed loop are not the client's fault; inside this
    window every worker should have a request in flight, so a shortfall there is client time.
    """
    first_send: dict[int, float] = {}
    last_end: dict[int, float] = {}
    for worker, send, end in timed:
        first_send[worker] = min(first_send.get(worker, send), send)
        last_end[worker] = max(last_end.get(worker, end), end)
    if not first_send:
        return None
    start = max(first_send.values())
    end = min(last_end.values())
    return (start, end) if end > start else None


def point_metrics(
    records: Sequence[RequestRecord],
    *,
    spec: PointSpec,
    cpu_seconds: float | None,
    loop_lag_samples: Sequence[float],
    thresholds: QualityThresholds,
    batch: int,
    origin: float | None = None,
    steady: tuple[float, float] | None = None,
    prompts: Sequence[str | Prompt] | None = None,
    min_wall: float = 0.0,
) -> tuple[PointMetrics, list[str]]:
    """Metrics and the load-independent quality flags of a point's measured requests (pure).

    The one metrics function of closed and open points; each adds its own load facts
    (:func:`compute_metrics`, ``openloop.rate_metrics``). ``origin`` is the measured phase's
    start (None: the first send), ``steady`` the window the concurrency held is read over
    (None: the whole phase), ``batch`` the completions per batch of the rate's standard
    error, ``prompts`` what the phase sent (for :func:`prompt_reuse`), ``min_wall`` the
    shortest wall time the rates divide by (a rate point's ``duration_s``: its load was offered
    over the whole window, so a fast server's early drain does not inflate its rates).

    Lengths are judged per request, against the ``max_tokens``/``ignore_eos`` it was sent
    with: ``short_outputs`` are requests under ``ignore_eos`` that stopped before their own
    ``max_tokens``; ``truncated`` are requests without ``ignore_eos`` that hit theirs.
    """
    ok = [r for r in records if r.ok]
    errors = Counter(r.error.value for r in records if r.error is not None)
    window = _phase_window(records, origin=origin, steady=steady, min_wall=min_wall)
    start, wall = window.start, window.wall
    output_tokens = sum(r.completion_tokens or 0 for r in ok)
    input_tokens = sum(r.prompt_tokens or 0 for r in ok)
    truncated = sum(1 for r in ok if not r.ignore_eos and r.finish_reason == "length")
    short = sum(1 for r in ok if r.ignore_eos and (r.completion_tokens or 0) < r.max_tokens)
    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    cpu_fraction = cpu_seconds / wall if cpu_seconds is not None and wall else None
    rate_se, batches = batch_rate_se(
        [(r.end_time, float(r.completion_tokens or 0)) for r in ok if r.end_time is not None],
        start if start is not None else 0.0,
        batch,
    )
    good = good_requests(records, spec.slo) if spec.slo is not None and spec.slo.bounds() else None
    distinct, reused = prompt_reuse(prompts) if prompts is not None else (None, None)
    metrics = PointMetrics(
        requests=len(records),
        requests_ok=len(ok),
        errors=sum(errors.values()),
        errors_by_kind=dict(errors),
        truncated=truncated,
        short_outputs=short,
        wall_s=wall,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        output_tok_s=output_tokens / wall if wall else None,
        request_decode_tok_s_p50=median([x for r in ok if (x := r.decode_tok_s) is not None]),
        ttft=summarize(t for r in ok if (t := r.ttft) is not None),
        itl=summarize(x for r in ok for x in r.itl_samples()),
        tpot=summarize(t for r in ok if (t := r.tpot) is not None),
        e2e=summarize(t for r in ok if (t := r.e2e) is not None),
        concurrency_held=window.held,
        concurrency_held_full=window.held_full,
        client_cpu_fraction=cpu_fraction,
        loop_lag=summarize(loop_lag_samples),
        prompt_tokens_min=min(prompt_counts, default=None),
        prompt_tokens_max=max(prompt_counts, default=None),
        prompt_tokens_tolerance=max((abs(c - spec.context) for c in prompt_counts), default=None),
        output_tok_s_se=rate_se,
        output_tok_s_batches=batches,
        request_s=len(ok) / wall if wall else None,
        input_tok_s=input_tokens / wall if wall else None,
        output_len=summarize(float(r.completion_tokens or 0) for r in ok),
        good_requests=good,
        goodput=good / wall if good is not None and wall else None,
        goodput_fraction=good / len(records) if good is not None and records else None,
        prompts_distinct=distinct,
        prompts_reused=reused,
    )
    return metrics, quality_flags(metrics, thresholds)


@dataclass(frozen=True)
class _PhaseWindow:
    """The measured phase's span as the rates and the concurrency held read it."""

    start: float | None
    wall: float | None
    held: float | None
    held_full: float | None


def _phase_window(
    records: Sequence[RequestRecord],
    *,
    origin: float | None,
    steady: tuple[float, float] | None,
    min_wall: float,
) -> _PhaseWindow:
    """Where the phase starts (``origin``, else the first send), the wall time the rates
    divide by (to the last response's end, at least ``min_wall``), and the requests in flight
    on average over the whole phase and over ``steady`` (the whole phase when None): one
    place decides the span every rate of the point shares."""
    sends = [r.send_time for r in records]
    ends = [r.end_time for r in records if r.end_time is not None]
    start = origin if origin is not None else (min(sends) if sends else None)
    wall = max(max(ends) - start, min_wall) if start is not None and ends else None
    intervals = [(r.send_time, r.end_time) for r in records if r.end_time is not None]
    held_full = (
        time_weighted_in_flight(intervals, start, max(ends))
        if start is not None and wall is not None and wall > 0
        else None
    )
    held = time_weighted_in_flight(intervals, *steady) if steady is not None else held_full
    return _PhaseWindow(start, wall, held, held_full)


def quality_flags(metrics: PointMetrics, thresholds: QualityThresholds) -> list[str]:
    """The load-independent quality flags of a point, read from its metrics alone (so every
    kind of point is judged by the same rules); each kind adds its load's flag in front."""
    flags: list[str] = []
    lag, cpu_fraction = metrics.loop_lag, metrics.client_cpu_fraction
    if (lag.p99 is not None and lag.p99 > thresholds.max_loop_lag_p99_s) or (
        cpu_fraction is not None and cpu_fraction > thresholds.max_client_cpu_fraction
    ):
        flags.append(FLAG_CLIENT_SATURATED)
    if metrics.errors:
        flags.append(FLAG_ERRORS)
    if metrics.truncated:
        flags.append(FLAG_TRUNCATED)
    if metrics.short_outputs:
        flags.append(FLAG_SHORT_OUTPUTS)
    if metrics.requests_ok < thresholds.min_requests:
        flags.append(FLAG_TOO_FEW_REQUESTS)
    if metrics.prompt_tokens_tolerance:
        flags.append(FLAG_PROMPT_LENGTH_INEXACT)
    return flags


def compute_metrics(
    records: Sequence[RequestRecord],
    workers: Sequence[int],
    *,
    spec: PointSpec,
    cpu_seconds: float | None,
    loop_lag_samples: Sequence[float],
    thresholds: QualityThresholds,
    prompts: Sequence[str | Prompt] | None = None,
) -> tuple[PointMetrics, tuple[str, ...]]:
    """Metrics and quality flags of a closed point's measured requests (pure).

    :func:`point_metrics`, with the concurrency held read over the steady window (every
    worker busy) and flagged when short of the concurrency asked for.
    """
    if spec.concurrency is None:
        raise ValueError("compute_metrics is for closed points; a rate point has no concurrency")
    window = steady_window(
        [
            (w, r.send_time, r.end_time)
            for w, r in zip(workers, records, strict=True)
            if r.end_time is not None
        ]
    )
    metrics, flags = point_metrics(
        records,
        spec=spec,
        cpu_seconds=cpu_seconds,
        loop_lag_samples=loop_lag_samples,
        thresholds=thresholds,
        batch=spec.concurrency,
        steady=window,
        prompts=prompts,
    )
    wanted = min(spec.concurrency, max(len(records), 1))
    held = metrics.concurrency_held
    if held is None or held < thresholds.min_concurrency_fraction * wanted:
        flags.insert(0, FLAG_CONCURRENCY_SHORT)
    return metrics, tuple(flags)


@dataclass
class PreparedPoint:
    """A point up to its measured phase: the calibration, the warm-up's records (labelled
    ``warmup``, in no metric), and the measured phase's prompts, issued in advance so that
    no prompt is built on the timed path."""

    calibration: Calibration
    started: float
    started_unix: float
    warmup: list[RequestRecord]
    prompts: list[Prompt]


async def prepare_point(
    client: BenchClient,
    prompts: PromptSource,
    spec: PointSpec,
    *,
    warmup_concurrency: int,
    measured_requests: int,
) -> PreparedPoint:
    """Calibrate ``spec.context``, run the warm-up closed loop, issue the measured prompts."""
    calibration = await prompts.calibrate(spec.context)
    started_unix = time.time()
    started = time.monotonic()
    warmup: list[RequestRecord] = []
    if spec.warmup_requests > 0:
        warm_prompts = [prompts.prompt(calibration) for _ in range(spec.warmup_requests)]
        timed = await closed_loop(
            client, warm_prompts, concurrency=warmup_concurrency, spec=spec, phase="warmup"
        )
        warmup = [parse_exchange(t.raw, client.dialect) for t in timed]
    measured = [prompts.prompt(calibration) for _ in range(measured_requests)]
    return PreparedPoint(calibration, started, started_unix, warmup, measured)


@dataclass
class MeasuredPhase:
    """What the client saw around one measured phase: the caller's marker, ``/metrics``
    before and after, and the client's own CPU time and event-loop lag during it."""

    marker: Any = None
    metrics_before: str | None = None
    metrics_after: str | None = None
    cpu_seconds: float | None = None
    loop_lag: list[float] = field(default_factory=list)
    ended: float | None = None
    """Monotonic time the phase ended (after the last response and the closing scrape)."""


@contextlib.asynccontextmanager
async def measured_phase(
    client: BenchClient,
    *,
    scrape_metrics: bool,
    metrics_timeout: float,
    before_measured: Callable[[], Awaitable[Any]] | None,
) -> AsyncIterator[MeasuredPhase]:
    """Bracket a measured phase (closed or open): mark it, scrape, watch the client, scrape."""
    phase = MeasuredPhase()
    # The caller marks where the measured phase starts (e.g. the journal cursor), so every
    # accept_len source covers the same requests and no warm-up.
    phase.marker = await before_measured() if before_measured is not None else None
    if scrape_metrics:
        phase.metrics_before = await client.scrape_metrics(timeout=metrics_timeout)
    monitor = LoopLagMonitor()
    monitor.start()
    cpu_start = time.process_time()
    try:
        yield phase
    finally:
        phase.cpu_seconds = time.process_time() - cpu_start
        await monitor.stop()
        phase.loop_lag = monitor.samples
    if scrape_metrics:
        phase.metrics_after = await client.scrape_metrics(timeout=metrics_timeout)
    phase.ended = time.monotonic()


def assemble_point(
    ready: PreparedPoint,
    *,
    spec: PointSpec,
    records: Sequence[RequestRecord],
    metrics: PointMetrics,
    flags: tuple[str, ...],
    phase: MeasuredPhase,
    scrape_metrics: bool,
    counters: AcceptanceCounters,
    schedule: tuple[float, ...] = (),
) -> PointResult:
    """The point's result: its accept_len from the responses and ``/metrics`` (read by the
    engine's ``counters``; the journal's is attached later by the caller that reads it),
    logged once."""
    accept = acceptlen.combine(
        acceptlen.from_journal(None),
        acceptlen.from_meta_info(
            acceptlen.RequestSpec(r.completion_tokens or 0, r.spec_verify_ct, r.spec_correct_drafts)
            for r in records
            if r.ok
        ),
        acceptlen.from_metrics(
            phase.metrics_before, phase.metrics_after, requests=len(records), counters=counters
        )
        if scrape_metrics
        else AcceptEstimate(None, 0, "/metrics not scraped"),
    )
    _log().bind(context=spec.context, concurrency=spec.concurrency, rate=spec.rate).info(
        "point.measured",
        workload=spec.workload,
        output_tok_s=metrics.output_tok_s,
        request_s=metrics.request_s,
        achieved_rate=metrics.achieved_rate,
        goodput=metrics.goodput,
        ttft_p50_s=metrics.ttft.p50,
        itl_p50_s=metrics.itl.p50,
        concurrency_held=metrics.concurrency_held,
        errors=metrics.errors,
        flags=list(flags),
    )
    return PointResult(
        spec=spec,
        metrics=metrics,
        flags=flags,
        calibration=ready.calibration,
        requests=[*ready.warmup, *records],
        started_monotonic=ready.started,
        ended_monotonic=phase.ended if phase.ended is not None else time.monotonic(),
        started_unix=ready.started_unix,
        accept_len=accept,
        metrics_text_before=phase.metrics_before,
        metrics_text_after=phase.metrics_after,
        measured_marker=phase.marker,
        schedule=schedule,
    )


async def run_point(
    client: BenchClient,
    prompts: PromptSource,
    *,
    context: int,
    concurrency: int,
    rounds: int,
    warmup_requests: int,
    max_tokens: int,
    temperature: float = 0.0,
    ignore_eos: bool = True,
    scrape_metrics: bool = False,
    thresholds: QualityThresholds | None = None,
    metrics_timeout: float = 10.0,
    before_measured: Callable[[], Awaitable[Any]] | None = None,
    slo: Slo | None = None,
    workload: str = "synthetic",
) -> PointResult:
    """Measure one closed point: calibrate the context, warm up, then the closed loop.

    ``slo`` adds goodput (good requests per second, :class:`Slo`); ``workload`` names the
    prompt source in the result (its label, e.g. ``builtin:chat``).
    """
    spec = PointSpec(
        context=context,
        concurrency=concurrency,
        rounds=rounds,
        warmup_requests=warmup_requests,
        max_tokens=max_tokens,
        temperature=temperature,
        ignore_eos=ignore_eos,
        workload=workload,
        slo=slo,
    )
    return await measure_closed_point(
        client,
        prompts,
        spec,
        scrape_metrics=scrape_metrics,
        before_measured=before_measured,
        thresholds=thresholds,
        metrics_timeout=metrics_timeout,
    )


async def measure_closed_point(
    client: BenchClient,
    prompts: PromptSource,
    spec: PointSpec,
    *,
    scrape_metrics: bool = False,
    before_measured: Callable[[], Awaitable[Any]] | None = None,
    thresholds: QualityThresholds | None = None,
    metrics_timeout: float = 10.0,
) -> PointResult:
    """Measure the closed point ``spec`` (:func:`run_point`'s work, from a spec already made,
    as :func:`~orchestrator.bench.measure.measure_point` holds one); ValueError when ``spec``
    has no concurrency and rounds or the client's pool is smaller than its concurrency."""
    concurrency, rounds = spec.concurrency, spec.rounds
    if concurrency is None or rounds is None:
        raise ValueError("a closed point needs its concurrency and rounds")
    if concurrency > client.concurrency:
        raise ValueError(f"client pool sized {client.concurrency} < concurrency {concurrency}")
    ready = await prepare_point(
        client,
        prompts,
        spec,
        warmup_concurrency=concurrency,
        measured_requests=rounds * concurrency,
    )
    async with measured_phase(
        client,
        scrape_metrics=scrape_metrics,
        metrics_timeout=metrics_timeout,
        before_measured=before_measured,
    ) as phase:
        measured = await closed_loop(
            client, ready.prompts, concurrency=concurrency, spec=spec, phase="measured"
        )
    records = [parse_exchange(t.raw, client.dialect) for t in measured]
    metrics, flags = compute_metrics(
        records,
        [t.worker for t in measured],
        spec=spec,
        cpu_seconds=phase.cpu_seconds,
        loop_lag_samples=phase.loop_lag,
        thresholds=thresholds or QualityThresholds(),
        prompts=ready.prompts,
    )
    return assemble_point(
        ready,
        spec=spec,
        records=records,
        metrics=metrics,
        flags=flags,
        phase=phase,
        scrape_metrics=scrape_metrics,
        counters=client.acceptance_counters,
    )


__all__ = [
    "FLAG_RATE_SHORT",
    "LoopLagMonitor",
    "MeasuredPhase",
    "PointMetrics",
    "PointResult",
    "PointSpec",
    "PreparedPoint",
    "QualityThresholds",
    "Slo",
    "assemble_point",
    "closed_loop",
    "compute_metrics",
    "good_requests",
    "measure_closed_point",
    "measured_phase",
    "point_metrics",
    "prepare_point",
    "prompt_reuse",
    "quality_flags",
    "run_point",
    "steady_window",
    "stored_request",
]
