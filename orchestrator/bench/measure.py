"""One point from its :class:`~orchestrator.bench.matrix.PointSpec`: the closed loop at a
concurrency or the open loop at a rate.

The one dispatcher of both kinds, so the ``bench`` verb and a sweep's cells
(:func:`orchestrator.cells.measure_cell`) measure a point the same way: each says what the
point is, as a spec, and nothing else decides which loop runs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from orchestrator.bench.client import BenchClient
from orchestrator.bench.matrix import PointResult, PointSpec, QualityThresholds, run_point
from orchestrator.bench.openloop import run_rate_point
from orchestrator.bench.prompts import PromptSource


async def measure_point(
    client: BenchClient,
    prompts: PromptSource,
    spec: PointSpec,
    *,
    scrape_metrics: bool,
    before_measured: Callable[[], Awaitable[Any]] | None = None,
    thresholds: QualityThresholds | None = None,
) -> PointResult:
    """Measure ``spec``: :func:`~orchestrator.bench.openloop.run_rate_point` when it has a
    rate (its arrivals, duration, in-flight cap and seed all set; ValueError otherwise),
    else :func:`~orchestrator.bench.matrix.run_point` at its concurrency and rounds."""
    common: dict[str, Any] = {
        "context": spec.context,
        "warmup_requests": spec.warmup_requests,
        "max_tokens": spec.max_tokens,
        "temperature": spec.temperature,
        "ignore_eos": spec.ignore_eos,
        "scrape_metrics": scrape_metrics,
        "thresholds": thresholds,
        "before_measured": before_measured,
        "slo": spec.slo,
        "workload": spec.workload,
    }
    if spec.rate is not None:
        if (
            spec.arrivals is None
            or spec.duration_s is None
            or spec.max_concurrency is None
            or spec.seed is None
        ):
            raise ValueError("a rate point needs its arrivals, duration_s, max_concurrency, seed")
        return await run_rate_point(
            client,
            prompts,
            rate=spec.rate,
            arrivals=spec.arrivals,
            duration_s=spec.duration_s,
            max_concurrency=spec.max_concurrency,
            seed=spec.seed,
            **common,
        )
    if spec.concurrency is None or spec.rounds is None:
        raise ValueError("a closed point needs its concurrency and rounds")
    return await run_point(
        client, prompts, concurrency=spec.concurrency, rounds=spec.rounds, **common
    )


__all__ = ["measure_point"]
