"""One point of the benchmark: what it asks for, how its measured phase is bracketed, and the
point it yields, the store's own type (:class:`~orchestrator.points.ThroughputPoint`).

A closed loop (``orchestrator.bench.closedloop``: ``concurrency`` requests in flight) and an
open loop (``orchestrator.bench.openloop``: requests at a rate) are two :class:`Loop` s of the
same path, :func:`orchestrator.bench.measure.measure_point`: calibrate and warm up, a measured
phase bracketed by :func:`measured_phase`, metrics by the one function :func:`point_metrics`,
the point assembled by :func:`assemble_point`.

A point is trusted only if the client really held the load it claims. Established load
generators silently fall short of the requested concurrency when their client saturates and
then report client latency as server latency; so every point measures the load it actually
held, its own CPU use and event-loop lag, and carries quality flags that say when it is not a
server result. Responses are parsed after the phase, off the timed path, by the client's
engine (its dialect, and its counters for ``/metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from orchestrator.bench import acceptlen
from orchestrator.bench.acceptlen import DecodeSample
from orchestrator.bench.client import BenchClient, Phase, RawExchange, RequestRecord
from orchestrator.bench.prompts import Calibration
from orchestrator.bench.stats import (
    Summary,
    batch_rate_se,
    median,
    summarize,
    time_weighted_in_flight,
)
from orchestrator.engines.base import AcceptanceCounters, Prompt
from orchestrator.log import get_logger
from orchestrator.points import (
    AcceptEstimate,
    AcceptLength,
    LatencySummary,
    PointProvenance,
    StoredRequest,
    ThroughputMetrics,
    ThroughputPoint,
)
from orchestrator.types import Arrivals


def _log() -> Any:
    """The module logger, bound at call time (after the entry point configured logging)."""
    return get_logger(component="bench.point")


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

    def to_json(self) -> dict[str, Any]:
        """What the point asked for, as the bench's JSON writes it."""
        return {
            "context": self.context,
            "concurrency": self.concurrency,
            "rounds": self.rounds,
            "warmup_requests": self.warmup_requests,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "ignore_eos": self.ignore_eos,
            "workload": self.workload,
            "rate": self.rate,
            "arrivals": self.arrivals,
            "duration_s": self.duration_s,
            "max_concurrency": self.max_concurrency,
            "seed": self.seed,
            "slo": None if self.slo is None else self.slo.to_dict(),
        }


@dataclass(frozen=True)
class QualityThresholds:
    """When a point stops counting as a server measurement."""

    min_concurrency_fraction: float = 0.95
    min_rate_fraction: float = 0.95
    """A rate point whose achieved rate is below this share of its schedule's is flagged."""
    max_loop_lag_p99_s: float = 0.025
    max_client_cpu_fraction: float = 0.9
    min_requests: int = 5


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured point: the point as the store keeps it (its requests with it), and what
    only the code that measured it reads: the spec it asked for, every request as the client
    saw it (warm-up labelled, chunk by chunk), what ``before_measured`` returned at the start
    of the measured phase (the runner's journal cursor), the phase's monotonic span and the
    ``/metrics`` text around it."""

    point: ThroughputPoint
    spec: PointSpec
    records: tuple[RequestRecord, ...]
    marker: Any = None
    started_monotonic: float = 0.0
    ended_monotonic: float = 0.0
    metrics_text_before: str | None = None
    metrics_text_after: str | None = None

    @property
    def metrics(self) -> ThroughputMetrics:
        return self.point.metrics

    @property
    def flags(self) -> tuple[str, ...]:
        """The benchmark's quality flags (the accept length's are in ``point.accept``)."""
        return self.point.quality

    def to_json(self, *, include_requests: bool = True) -> dict[str, Any]:
        """The point as ``orchestrator bench`` writes it: the spec, the flags, how the prompts
        were sized, when, the measured values flat, the accept length and (``include_requests``)
        every request as the client saw it."""
        point, provenance = self.point, self.point.provenance
        out = self.spec.to_json()
        schedule = point.metrics.arrival_schedule
        out.update(
            arrival_schedule=list(schedule) if point.rate is not None else None,
            flags=list(point.quality),
            prompt_calibration=point.metrics.calibration,
            started_unix=provenance.started_at,
            started_monotonic=self.started_monotonic,
            ended_monotonic=self.ended_monotonic,
            invocation_id=provenance.invocation_id,
            journal_cursor_start=provenance.cursor_start,
            journal_cursor_end=provenance.cursor_end,
        )
        out.update(point.metrics.measured_json())
        out.update(point.accept.to_json())
        if include_requests:
            out["raw_requests"] = [r.to_dict() for r in self.records]
        return out


def calibration_json(c: Calibration) -> dict[str, Any]:
    """How a point's prompts were sized, as its JSON and its stored metrics both show it."""
    return {
        "filler_words": c.filler_words,
        "measured_tokens": c.measured_tokens,
        "tolerance": c.tolerance,
        "requests": c.requests,
        "workload": c.workload,
        "method": c.method,
    }


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


# --- metrics (pure) --------------------------------------------------------------------------


def latency(summary: Summary) -> LatencySummary:
    """A latency's summary as the point keeps it (seconds)."""
    return LatencySummary(
        count=summary.count,
        mean_s=summary.mean,
        p50_s=summary.p50,
        p90_s=summary.p90,
        p99_s=summary.p99,
        max_s=summary.max,
    )


def _per_s(count: float | None, wall: float | None) -> float | None:
    return count / wall if count is not None and wall else None


@dataclass(frozen=True)
class MeasuredRequests:
    """A point's measured requests as parsed, with what the client saw while it sent them: what
    every point's metrics read, whichever loop sent them. ``prompts`` is what the phase sent
    (for :func:`prompt_reuse`; None: not counted)."""

    records: Sequence[RequestRecord]
    spec: PointSpec
    thresholds: QualityThresholds
    cpu_seconds: float | None = None
    loop_lag_samples: Sequence[float] = ()
    prompts: Sequence[str | Prompt] | None = None


def point_metrics(
    measured: MeasuredRequests,
    *,
    batch: int,
    origin: float | None = None,
    steady: tuple[float, float] | None = None,
    min_wall: float = 0.0,
) -> tuple[ThroughputMetrics, list[str]]:
    """Metrics and the load-independent quality flags of a point's measured requests (pure).

    The one metrics function of closed and open points; each adds its own load facts
    (``closedloop.closed_metrics``, ``openloop.rate_metrics``). ``origin`` is the measured
    phase's start (None: the first send), ``steady`` the window the concurrency held is read
    over (None: the whole phase), ``batch`` the completions per batch of the rate's standard
    error, ``min_wall`` the shortest wall time the rates divide by (a rate point's
    ``duration_s``: its load was offered over the whole window, so a fast server's early drain
    does not inflate its rates).
    """
    records, spec, prompts = measured.records, measured.spec, measured.prompts
    ok = [r for r in records if r.ok]
    window = _phase_window(records, origin=origin, steady=steady, min_wall=min_wall)
    wall = window.wall
    rate_se, batches = batch_rate_se(
        [(r.end_time, float(r.completion_tokens or 0)) for r in ok if r.end_time is not None],
        window.start if window.start is not None else 0.0,
        batch,
    )
    good = good_requests(records, spec.slo) if spec.slo is not None and spec.slo.bounds() else None
    distinct, reused = prompt_reuse(prompts) if prompts is not None else (None, None)
    lag = summarize(measured.loop_lag_samples)
    metrics = replace(
        _request_metrics(records, ok, context=spec.context, wall=wall),
        concurrency_held=window.held,
        concurrency_held_full=window.held_full,
        client_cpu_fraction=_per_s(measured.cpu_seconds, wall),
        loop_lag_max_s=lag.max,
        loop_lag_p99_s=lag.p99,
        good_requests=good,
        goodput=_per_s(good, wall),
        goodput_fraction=good / len(records) if good is not None and records else None,
        prompts_distinct=distinct,
        prompts_reused=reused,
        output_tok_s_se=rate_se,
        output_tok_s_batches=batches,
    )
    return metrics, quality_flags(metrics, measured.thresholds)


def _request_metrics(
    records: Sequence[RequestRecord],
    ok: Sequence[RequestRecord],
    *,
    context: int,
    wall: float | None,
) -> ThroughputMetrics:
    """What the responses themselves say: counts, tokens, lengths, latencies, and the rates
    over ``wall``, bench_serving's (completed requests, their prompt and output tokens over the
    time from the measured phase's start to the last response's end).

    Lengths are judged per request, against the ``max_tokens``/``ignore_eos`` it was sent
    with: ``short_outputs`` are requests under ``ignore_eos`` that stopped before their own
    ``max_tokens``; ``truncated`` are requests without ``ignore_eos`` that hit theirs.
    """
    errors = Counter(r.error.value for r in records if r.error is not None)
    output_tokens = sum(r.completion_tokens or 0 for r in ok)
    input_tokens = sum(r.prompt_tokens or 0 for r in ok)
    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    lengths = summarize(float(r.completion_tokens or 0) for r in ok)
    ttft, itl, tpot, e2e = _latencies(ok)
    return ThroughputMetrics(
        requests=len(records),
        requests_ok=len(ok),
        errors=sum(errors.values()),
        errors_by_kind=dict(errors),
        truncated=sum(1 for r in ok if not r.ignore_eos and r.finish_reason == "length"),
        short_outputs=sum(
            1 for r in ok if r.ignore_eos and (r.completion_tokens or 0) < r.max_tokens
        ),
        wall_s=wall,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        output_tok_s=_per_s(output_tokens, wall),
        request_decode_tok_s_p50=median([x for r in ok if (x := r.decode_tok_s) is not None]),
        prompt_tokens_min=min(prompt_counts, default=None),
        prompt_tokens_max=max(prompt_counts, default=None),
        prompt_tokens_tolerance=max((abs(c - context) for c in prompt_counts), default=None),
        request_s=_per_s(len(ok), wall),
        input_tok_s=_per_s(input_tokens, wall),
        output_len_mean=lengths.mean,
        output_len_p50=lengths.p50,
        output_len_p90=lengths.p90,
        output_len_p99=lengths.p99,
        output_len_max=lengths.max,
        output_len_count=lengths.count,
        ttft=ttft,
        itl=itl,
        tpot=tpot,
        e2e=e2e,
    )


def _latencies(
    ok: Sequence[RequestRecord],
) -> tuple[LatencySummary, LatencySummary, LatencySummary, LatencySummary]:
    """TTFT, ITL (each chunk's gap spread over its tokens), TPOT and E2E of the completed
    requests."""
    return (
        latency(summarize(t for r in ok if (t := r.ttft) is not None)),
        latency(summarize(x for r in ok for x in r.itl_samples())),
        latency(summarize(t for r in ok if (t := r.tpot) is not None)),
        latency(summarize(t for r in ok if (t := r.e2e) is not None)),
    )


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


def quality_flags(metrics: ThroughputMetrics, thresholds: QualityThresholds) -> list[str]:
    """The load-independent quality flags of a point, read from its metrics alone (so every
    kind of point is judged by the same rules); each kind adds its load's flag in front."""
    flags: list[str] = []
    lag_p99, cpu_fraction = metrics.loop_lag_p99_s, metrics.client_cpu_fraction
    if (lag_p99 is not None and lag_p99 > thresholds.max_loop_lag_p99_s) or (
        cpu_fraction is not None and cpu_fraction > thresholds.max_client_cpu_fraction
    ):
        flags.append(FLAG_CLIENT_SATURATED)
    if metrics.errors:
        flags.append(FLAG_ERRORS)
    if metrics.truncated:
        flags.append(FLAG_TRUNCATED)
    if metrics.short_outputs:
        flags.append(FLAG_SHORT_OUTPUTS)
    if (metrics.requests_ok or 0) < thresholds.min_requests:
        flags.append(FLAG_TOO_FEW_REQUESTS)
    if metrics.prompt_tokens_tolerance:
        flags.append(FLAG_PROMPT_LENGTH_INEXACT)
    return flags


# --- the measured phase ----------------------------------------------------------------------


class LoopRun(Protocol):
    """What one loop's measured phase sent: its exchanges and their prompts in send (or
    schedule) order, and how its load facts turn their parsed records into the point's metrics
    and flags."""

    @property
    def exchanges(self) -> Sequence[RawExchange]: ...

    @property
    def prompts(self) -> Sequence[str | Prompt]: ...

    def metrics(self, measured: MeasuredRequests) -> tuple[ThroughputMetrics, tuple[str, ...]]:
        """``measured``: the parsed :attr:`exchanges`, in their order, with :attr:`prompts`."""
        ...


async def send_request(
    client: BenchClient, spec: PointSpec, prompt: str | Prompt, *, index: int, phase: Phase
) -> RawExchange:
    """One request of ``spec``'s point, as every loop sends it: the point's sampling settings
    (a Prompt's own ``max_tokens`` overrides the point's) and a label naming the phase, the
    point and the request's place in it."""
    return await client.stream(
        prompt,
        max_tokens=spec.max_tokens,
        temperature=spec.temperature,
        ignore_eos=spec.ignore_eos,
        label=f"{phase}-{spec.tag}-{index}",
        phase=phase,
    )


class Loop(Protocol):
    """How a point's measured phase sends its prompts: the closed loop at a concurrency
    (``closedloop.ClosedLoop``) or the open loop at a rate (``openloop.OpenLoop``)."""

    @property
    def warmup_concurrency(self) -> int:
        """How many warm-up requests go out together."""
        ...

    @property
    def measured_requests(self) -> int:
        """How many prompts the measured phase may send."""
        ...

    @property
    def schedule(self) -> tuple[float, ...]:
        """The arrival offsets (s) a rate point sends against; empty for a closed point."""
        ...

    async def send(self, client: BenchClient, prompts: Sequence[str | Prompt]) -> LoopRun:
        """Send the measured phase's ``prompts``; every request ended when it returns."""
        ...


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
    metrics: ThroughputMetrics,
    flags: tuple[str, ...],
    phase: MeasuredPhase,
    scrape_metrics: bool,
    counters: AcceptanceCounters,
    schedule: tuple[float, ...] = (),
) -> Measurement:
    """The measured point: its metrics with how its load was shaped, its accept_len from the
    responses and ``/metrics`` (read by the engine's ``counters``; the journal's is the
    caller's, :func:`with_journal`), its requests and when it ran; logged once."""
    _log().bind(context=spec.context, concurrency=spec.concurrency, rate=spec.rate).info(
        "point.measured",
        workload=spec.workload,
        output_tok_s=metrics.output_tok_s,
        request_s=metrics.request_s,
        achieved_rate=metrics.achieved_rate,
        goodput=metrics.goodput,
        ttft_p50_s=metrics.ttft.p50_s,
        itl_p50_s=metrics.itl.p50_s,
        concurrency_held=metrics.concurrency_held,
        errors=metrics.errors,
        flags=list(flags),
    )
    ended = phase.ended if phase.ended is not None else time.monotonic()
    every = (*ready.warmup, *records)
    point = ThroughputPoint(
        context=spec.context,
        concurrency=spec.concurrency,
        rate=spec.rate,
        workload=spec.workload,
        metrics=_shaped(metrics, spec, ready.calibration, schedule),
        accept=_accept(records, phase if scrape_metrics else None, counters),
        quality=flags,
        provenance=PointProvenance(
            started_at=ready.started_unix, finished_at=ready.started_unix + (ended - ready.started)
        ),
        requests=tuple(stored_request(r) for r in every),
    )
    return Measurement(
        point=point,
        spec=spec,
        records=every,
        marker=phase.marker,
        started_monotonic=ready.started,
        ended_monotonic=ended,
        metrics_text_before=phase.metrics_before,
        metrics_text_after=phase.metrics_after,
    )


def _accept(
    records: Sequence[RequestRecord], scraped: MeasuredPhase | None, counters: AcceptanceCounters
) -> AcceptLength:
    """The accept length the client can see: per request (meta_info) and over the phase's
    ``/metrics`` (when ``scraped``); the journal's is attached by the caller that reads it."""
    return acceptlen.combine(
        acceptlen.from_journal(None),
        acceptlen.from_meta_info(
            acceptlen.RequestSpec(r.completion_tokens or 0, r.spec_verify_ct, r.spec_correct_drafts)
            for r in records
            if r.ok
        ),
        AcceptEstimate(None, 0, "/metrics not scraped")
        if scraped is None
        else acceptlen.from_metrics(
            scraped.metrics_before, scraped.metrics_after, requests=len(records), counters=counters
        ),
    )


def _shaped(
    metrics: ThroughputMetrics,
    spec: PointSpec,
    calibration: Calibration,
    schedule: tuple[float, ...],
) -> ThroughputMetrics:
    """``metrics`` with how the point's load was shaped: how its prompts were sized, the slo
    it was judged by and a rate point's schedule."""
    shaped = replace(
        metrics,
        calibration=calibration_json(calibration),
        slo=None if spec.slo is None else spec.slo.to_dict(),
    )
    if spec.rate is None:
        return shaped
    return replace(
        shaped,
        arrivals=spec.arrivals,
        seed=spec.seed,
        duration_s=spec.duration_s,
        max_concurrency=spec.max_concurrency,
        arrival_schedule=schedule,
    )


def with_journal(
    point: ThroughputPoint, samples: Sequence[DecodeSample], *, lines_expected: bool = True
) -> ThroughputPoint:
    """``point`` with its accept_len recombined with the journal window's decode lines
    (``lines_expected``: whether the window must hold one, :func:`acceptlen.combine`)."""
    accept = acceptlen.combine(
        acceptlen.from_journal(samples),
        point.accept.meta_info,
        point.accept.metrics,
        lines_expected=lines_expected,
    )
    return replace(point, accept=accept)


__all__ = [
    "FLAG_CLIENT_SATURATED",
    "FLAG_CONCURRENCY_SHORT",
    "FLAG_ERRORS",
    "FLAG_PROMPT_LENGTH_INEXACT",
    "FLAG_RATE_SHORT",
    "FLAG_SHORT_OUTPUTS",
    "FLAG_TOO_FEW_REQUESTS",
    "FLAG_TRUNCATED",
    "Loop",
    "LoopLagMonitor",
    "LoopRun",
    "MeasuredPhase",
    "MeasuredRequests",
    "Measurement",
    "PointSpec",
    "PreparedPoint",
    "QualityThresholds",
    "Slo",
    "assemble_point",
    "calibration_json",
    "good_requests",
    "latency",
    "measured_phase",
    "point_metrics",
    "prompt_reuse",
    "quality_flags",
    "send_request",
    "stored_request",
    "with_journal",
]
