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
from orchestrator.bench.matrix import (
    PointResult,
    PointSpec,
    QualityThresholds,
    measure_closed_point,
)
from orchestrator.bench.openloop import measure_rate_point
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
    """Measure ``spec``: the open loop when it has a rate (its arrivals, duration, in-flight
    cap and seed all set; ValueError otherwise), else the closed loop at its concurrency and
    rounds."""
    measure = measure_rate_point if spec.rate is not None else measure_closed_point
    return await measure(
        client,
        prompts,
        spec,
        scrape_metrics=scrape_metrics,
        before_measured=before_measured,
        thresholds=thresholds,
    )


__all__ = ["measure_point"]
