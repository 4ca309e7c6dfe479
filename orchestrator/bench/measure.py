"""One point from its :class:`~orchestrator.bench.point.PointSpec`, by the one path every point
takes: calibrate, warm up, the measured phase of its :class:`~orchestrator.bench.point.Loop`
(the closed loop at a concurrency, the open loop at a rate), the point.

The ``bench`` verb and a sweep's cells (:func:`orchestrator.cells.measure_cell`) measure a
point the same way: each says what the point is, as a spec, and nothing else decides which
loop runs it or how its result is made.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.bench.client import BenchClient, RequestRecord, parse_exchange
from orchestrator.bench.closedloop import ClosedLoop, closed_loop
from orchestrator.bench.openloop import OpenLoop
from orchestrator.bench.point import (
    Loop,
    MeasuredRequests,
    Measurement,
    PointSpec,
    PreparedPoint,
    QualityThresholds,
    assemble_point,
    measured_phase,
)
from orchestrator.bench.prompts import PromptSource


def loop_of(spec: PointSpec, client: BenchClient) -> Loop:
    """The open loop when ``spec`` has a rate (its arrivals, duration, in-flight cap and seed
    all set), else the closed loop at its concurrency and rounds; ValueError when the spec
    lacks what its loop needs or the client's pool is too small for it."""
    return OpenLoop.of(spec, client) if spec.rate is not None else ClosedLoop.of(spec, client)


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


async def measure_point(
    client: BenchClient,
    prompts: PromptSource,
    spec: PointSpec,
    *,
    scrape_metrics: bool = False,
    before_measured: Callable[[], Awaitable[Any]] | None = None,
    thresholds: QualityThresholds | None = None,
    metrics_timeout: float = 10.0,
) -> Measurement:
    """Measure ``spec`` on ``client``: calibrate its context, warm up, then its loop's
    measured phase (:func:`loop_of`), bracketed by ``before_measured`` (its value is the
    measurement's ``marker``) and, with ``scrape_metrics``, ``/metrics`` before and after.

    The responses are parsed after the phase, off the timed path, by the client's engine.
    """
    loop = loop_of(spec, client)
    ready = await prepare_point(
        client,
        prompts,
        spec,
        warmup_concurrency=loop.warmup_concurrency,
        measured_requests=loop.measured_requests,
    )
    async with measured_phase(
        client,
        scrape_metrics=scrape_metrics,
        metrics_timeout=metrics_timeout,
        before_measured=before_measured,
    ) as phase:
        sent = await loop.send(client, ready.prompts)
    records = [parse_exchange(raw, client.dialect) for raw in sent.exchanges]
    metrics, flags = sent.metrics(
        MeasuredRequests(
            records,
            spec,
            thresholds or QualityThresholds(),
            cpu_seconds=phase.cpu_seconds,
            loop_lag_samples=phase.loop_lag,
            prompts=sent.prompts,
        )
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
        schedule=loop.schedule,
    )


__all__ = ["loop_of", "measure_point", "prepare_point"]
