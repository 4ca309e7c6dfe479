"""The context x concurrency matrix: one point = warm-up, then a closed loop at concurrency C.

A point is trusted only if the client really held the load it claims. Established load
generators silently fall short of the requested concurrency when their client saturates and
then report client latency as server latency; so every point measures the concurrency it
actually held, its own CPU use and event-loop lag, and carries quality flags that say when
it is not a server result.

Each worker of the pool issues its next request as soon as its previous one finished, so
exactly ``concurrency`` requests are in flight (minus the client's own turnaround, which is
what ``concurrency_held`` measures). Responses are parsed after the phase, off the timed path.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.bench import acceptlen
from orchestrator.bench.acceptlen import AcceptLen, DecodeSample
from orchestrator.bench.client import BenchClient, Phase, RawExchange, RequestRecord, parse_exchange
from orchestrator.bench.prompts import Calibration, PromptFactory
from orchestrator.bench.stats import (
    Summary,
    batch_rate_se,
    median,
    summarize,
    time_weighted_in_flight,
)
from orchestrator.engine import Prompt
from orchestrator.log import get_logger


def _log() -> Any:
    """The module logger, bound at call time (after the entry point configured logging)."""
    return get_logger(component="bench.matrix")


FLAG_CONCURRENCY_SHORT = "concurrency_short"
FLAG_CLIENT_SATURATED = "client_saturated"
FLAG_ERRORS = "errors"
FLAG_TRUNCATED = "truncated"
FLAG_SHORT_OUTPUTS = "short_outputs"
FLAG_TOO_FEW_REQUESTS = "too_few_requests"
FLAG_PROMPT_LENGTH_INEXACT = "prompt_length_inexact"


@dataclass(frozen=True)
class PointSpec:
    """What one point asks for."""

    context: int
    concurrency: int
    rounds: int
    warmup_requests: int
    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = True

    @property
    def measured_requests(self) -> int:
        return self.rounds * self.concurrency


@dataclass(frozen=True)
class QualityThresholds:
    """When a point stops counting as a server measurement."""

    min_concurrency_fraction: float = 0.95
    max_loop_lag_p99_s: float = 0.025
    max_client_cpu_fraction: float = 0.9
    min_requests: int = 5


@dataclass(frozen=True)
class PointMetrics:
    """Everything measured at one point; latencies in seconds, rates per second."""

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

    def as_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "requests": self.requests,
            "requests_ok": self.requests_ok,
            "errors": self.errors,
            "errors_by_kind": dict(self.errors_by_kind),
            "truncated": self.truncated,
            "short_outputs": self.short_outputs,
            "wall_s": self.wall_s,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "output_tok_s": self.output_tok_s,
            "request_decode_tok_s_p50": self.request_decode_tok_s_p50,
            "concurrency_held": self.concurrency_held,
            "concurrency_held_full": self.concurrency_held_full,
            "client_cpu_fraction": self.client_cpu_fraction,
            "loop_lag_max_s": self.loop_lag.max,
            "loop_lag_p99_s": self.loop_lag.p99,
            "prompt_tokens_min": self.prompt_tokens_min,
            "prompt_tokens_max": self.prompt_tokens_max,
            "prompt_tokens_tolerance": self.prompt_tokens_tolerance,
            "output_tok_s_se": self.output_tok_s_se,
            "output_tok_s_batches": self.output_tok_s_batches,
        }
        for name, summary in (
            ("ttft", self.ttft),
            ("itl", self.itl),
            ("tpot", self.tpot),
            ("e2e", self.e2e),
        ):
            for key, value in summary.as_fields(name).items():
                fields[key if key.endswith("_count") else key + "_s"] = value
        return fields


@dataclass
class PointResult:
    """One measured point, its raw requests (warm-up labelled) and provenance.

    ``invocation_id`` and the journal cursors are filled by the caller that knows the unit
    (the runner); ``attach_journal`` adds the journal's accept_len once the window is read.
    """

    spec: PointSpec
    metrics: PointMetrics
    flags: tuple[str, ...]
    calibration: Calibration
    requests: list[RequestRecord]
    started_monotonic: float
    ended_monotonic: float
    started_unix: float
    accept_len: AcceptLen
    metrics_text_before: str | None = None
    metrics_text_after: str | None = None
    invocation_id: str | None = None
    journal_cursor_start: str | None = None
    journal_cursor_end: str | None = None
    measured_marker: Any = None
    """What ``before_measured`` returned at the start of the measured phase."""

    def attach_journal(self, samples: Sequence[DecodeSample]) -> None:
        """Recombine accept_len with the journal window's decode lines for this point."""
        self.accept_len = acceptlen.combine(
            acceptlen.from_journal(samples), self.accept_len.meta_info, self.accept_len.metrics
        )

    def to_dict(self, *, include_requests: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "context": self.spec.context,
            "concurrency": self.spec.concurrency,
            "rounds": self.spec.rounds,
            "warmup_requests": self.spec.warmup_requests,
            "max_tokens": self.spec.max_tokens,
            "temperature": self.spec.temperature,
            "ignore_eos": self.spec.ignore_eos,
            "flags": list(self.flags),
            "prompt_calibration": {
                "filler_words": self.calibration.filler_words,
                "measured_tokens": self.calibration.measured_tokens,
                "tolerance": self.calibration.tolerance,
                "requests": self.calibration.requests,
            },
            "started_unix": self.started_unix,
            "started_monotonic": self.started_monotonic,
            "ended_monotonic": self.ended_monotonic,
            "invocation_id": self.invocation_id,
            "journal_cursor_start": self.journal_cursor_start,
            "journal_cursor_end": self.journal_cursor_end,
        }
        out.update(self.metrics.as_fields())
        out.update(self.accept_len.to_dict())
        if include_requests:
            out["raw_requests"] = [r.to_dict() for r in self.requests]
        return out


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


async def _closed_loop(
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
            raw = await client.stream(
                prompts[mine],
                max_tokens=spec.max_tokens,
                temperature=spec.temperature,
                ignore_eos=spec.ignore_eos,
                label=f"{phase}-{spec.context}-{spec.concurrency}-{mine}",
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


def compute_metrics(
    records: Sequence[RequestRecord],
    workers: Sequence[int],
    *,
    spec: PointSpec,
    cpu_seconds: float | None,
    loop_lag_samples: Sequence[float],
    thresholds: QualityThresholds,
) -> tuple[PointMetrics, tuple[str, ...]]:
    """Metrics and quality flags of the measured requests (pure)."""
    ok = [r for r in records if r.ok]
    errors = Counter(r.error.value for r in records if r.error is not None)
    sends = [r.send_time for r in records]
    ends = [r.end_time for r in records if r.end_time is not None]
    wall = (max(ends) - min(sends)) if sends and ends else None
    output_tokens = sum(r.completion_tokens or 0 for r in ok)
    input_tokens = sum(r.prompt_tokens or 0 for r in ok)
    truncated = 0 if spec.ignore_eos else sum(1 for r in ok if r.finish_reason == "length")
    short = (
        sum(1 for r in ok if (r.completion_tokens or 0) < spec.max_tokens) if spec.ignore_eos else 0
    )
    decode_rates = [rate for r in ok if (rate := r.decode_tok_s) is not None]
    intervals = [(r.send_time, r.end_time) for r in records if r.end_time is not None]
    held_full = (
        time_weighted_in_flight(intervals, min(sends), max(ends))
        if wall is not None and wall > 0
        else None
    )
    window = steady_window(
        [
            (w, r.send_time, r.end_time)
            for w, r in zip(workers, records, strict=True)
            if r.end_time is not None
        ]
    )
    held = time_weighted_in_flight(intervals, *window) if window is not None else held_full
    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    lag = summarize(loop_lag_samples)
    cpu_fraction = cpu_seconds / wall if cpu_seconds is not None and wall else None
    rate_se, batches = batch_rate_se(
        [(r.end_time, float(r.completion_tokens or 0)) for r in ok if r.end_time is not None],
        min(sends) if sends else 0.0,
        spec.concurrency,
    )
    output_tok_s = output_tokens / wall if wall else None
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
        output_tok_s=output_tok_s,
        request_decode_tok_s_p50=median(decode_rates),
        ttft=summarize(t for r in ok if (t := r.ttft) is not None),
        itl=summarize(x for r in ok for x in r.itl_samples()),
        tpot=summarize(t for r in ok if (t := r.tpot) is not None),
        e2e=summarize(t for r in ok if (t := r.e2e) is not None),
        concurrency_held=held,
        concurrency_held_full=held_full,
        client_cpu_fraction=cpu_fraction,
        loop_lag=lag,
        prompt_tokens_min=min(prompt_counts) if prompt_counts else None,
        prompt_tokens_max=max(prompt_counts) if prompt_counts else None,
        prompt_tokens_tolerance=(
            max(abs(c - spec.context) for c in prompt_counts) if prompt_counts else None
        ),
        output_tok_s_se=rate_se,
        output_tok_s_batches=batches,
    )
    flags: list[str] = []
    wanted = min(spec.concurrency, max(len(records), 1))
    if held is None or held < thresholds.min_concurrency_fraction * wanted:
        flags.append(FLAG_CONCURRENCY_SHORT)
    if (lag.p99 is not None and lag.p99 > thresholds.max_loop_lag_p99_s) or (
        cpu_fraction is not None and cpu_fraction > thresholds.max_client_cpu_fraction
    ):
        flags.append(FLAG_CLIENT_SATURATED)
    if metrics.errors:
        flags.append(FLAG_ERRORS)
    if truncated:
        flags.append(FLAG_TRUNCATED)
    if short:
        flags.append(FLAG_SHORT_OUTPUTS)
    if len(ok) < thresholds.min_requests:
        flags.append(FLAG_TOO_FEW_REQUESTS)
    if metrics.prompt_tokens_tolerance:
        flags.append(FLAG_PROMPT_LENGTH_INEXACT)
    return metrics, tuple(flags)


async def run_point(
    client: BenchClient,
    prompts: PromptFactory,
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
) -> PointResult:
    """Measure one point: calibrate the context, warm up, then the closed loop."""
    if concurrency > client.concurrency:
        raise ValueError(f"client pool sized {client.concurrency} < concurrency {concurrency}")
    spec = PointSpec(
        context=context,
        concurrency=concurrency,
        rounds=rounds,
        warmup_requests=warmup_requests,
        max_tokens=max_tokens,
        temperature=temperature,
        ignore_eos=ignore_eos,
    )
    log = _log().bind(context=context, concurrency=concurrency)
    calibration = await prompts.calibrate(context)
    started_unix = time.time()
    started = time.monotonic()
    warm: list[_Timed] = []
    if warmup_requests > 0:
        warm_prompts = [prompts.prompt(calibration) for _ in range(warmup_requests)]
        warm = await _closed_loop(
            client, warm_prompts, concurrency=concurrency, spec=spec, phase="warmup"
        )
    measured_prompts = [prompts.prompt(calibration) for _ in range(spec.measured_requests)]
    # The caller marks where the measured phase starts (e.g. the journal cursor), so every
    # accept_len source covers the same requests and no warm-up.
    marker = await before_measured() if before_measured is not None else None
    before = await client.scrape_metrics(timeout=metrics_timeout) if scrape_metrics else None
    monitor = LoopLagMonitor()
    monitor.start()
    cpu_start = time.process_time()
    try:
        measured = await _closed_loop(
            client, measured_prompts, concurrency=concurrency, spec=spec, phase="measured"
        )
    finally:
        cpu_seconds = time.process_time() - cpu_start
        await monitor.stop()
    after = await client.scrape_metrics(timeout=metrics_timeout) if scrape_metrics else None
    ended = time.monotonic()

    records = [parse_exchange(t.raw) for t in measured]
    metrics, flags = compute_metrics(
        records,
        [t.worker for t in measured],
        spec=spec,
        cpu_seconds=cpu_seconds,
        loop_lag_samples=monitor.samples,
        thresholds=thresholds or QualityThresholds(),
    )
    accept = acceptlen.combine(
        acceptlen.from_journal(None),
        acceptlen.from_meta_info(
            acceptlen.RequestSpec(
                r.completion_tokens or 0, r.spec_verify_ct, r.spec_correct_drafts
            )
            for r in records
            if r.ok
        ),
        acceptlen.from_metrics(before, after, requests=len(records))
        if scrape_metrics
        else acceptlen.Estimate(None, 0, "/metrics not scraped"),
    )
    log.info(
        "point.measured",
        output_tok_s=metrics.output_tok_s,
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
        calibration=calibration,
        requests=[parse_exchange(t.raw) for t in warm] + records,
        started_monotonic=started,
        ended_monotonic=ended,
        started_unix=started_unix,
        accept_len=accept,
        metrics_text_before=before,
        metrics_text_after=after,
        measured_marker=marker,
    )


__all__ = [
    "LoopLagMonitor",
    "PointMetrics",
    "PointResult",
    "PointSpec",
    "QualityThresholds",
    "compute_metrics",
    "run_point",
    "steady_window",
]
