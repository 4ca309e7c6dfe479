"""Closed-loop points: ``concurrency`` requests in flight, each worker sending its next at once.

Each worker of the pool issues its next request as soon as its previous one finished, so
exactly ``concurrency`` requests are in flight (minus the client's own turnaround, which is
what ``concurrency_held`` measures, over the steady window where every worker is busy). The
warm-up of every point, closed or open, is such a loop too. The point's path (calibrate, warm
up, the measured phase, the point) is :func:`orchestrator.bench.measure.measure_point`'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.bench.client import BenchClient, Phase, RawExchange
from orchestrator.bench.point import (
    FLAG_CONCURRENCY_SHORT,
    MeasuredRequests,
    PointSpec,
    point_metrics,
    send_request,
)
from orchestrator.engines.base import Prompt
from orchestrator.points import ThroughputMetrics


@dataclass
class Timed:
    """One exchange of a closed loop and the worker that sent it."""

    worker: int
    raw: RawExchange


async def closed_loop(
    client: BenchClient,
    prompts: Sequence[str | Prompt],
    *,
    concurrency: int,
    spec: PointSpec,
    phase: Phase,
) -> list[Timed]:
    """Issue ``prompts`` with ``concurrency`` workers, each sending its next at once."""
    results: list[Timed] = []
    position = 0

    async def worker(index: int) -> None:
        nonlocal position
        while position < len(prompts):
            mine = position
            position += 1
            raw = await send_request(client, spec, prompts[mine], index=mine, phase=phase)
            results.append(Timed(index, raw))

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


def closed_metrics(
    measured: MeasuredRequests, workers: Sequence[int]
) -> tuple[ThroughputMetrics, tuple[str, ...]]:
    """Metrics and quality flags of a closed point's measured requests (pure), ``workers[i]``
    the worker that sent ``measured.records[i]``.

    :func:`~orchestrator.bench.point.point_metrics`, with the concurrency held read over the
    steady window (every worker busy) and flagged when short of the concurrency asked for.
    """
    records, concurrency = measured.records, measured.spec.concurrency
    if concurrency is None:
        raise ValueError("closed_metrics is for closed points; a rate point has no concurrency")
    window = steady_window(
        [
            (w, r.send_time, r.end_time)
            for w, r in zip(workers, records, strict=True)
            if r.end_time is not None
        ]
    )
    metrics, flags = point_metrics(measured, batch=concurrency, steady=window)
    wanted = min(concurrency, max(len(records), 1))
    held = metrics.concurrency_held
    if held is None or held < measured.thresholds.min_concurrency_fraction * wanted:
        flags.insert(0, FLAG_CONCURRENCY_SHORT)
    return metrics, tuple(flags)


@dataclass(frozen=True)
class ClosedRun:
    """What a closed loop's measured phase sent, in the order the requests ended."""

    spec: PointSpec
    timed: tuple[Timed, ...]
    prompts: tuple[str | Prompt, ...]

    @property
    def exchanges(self) -> Sequence[RawExchange]:
        return [t.raw for t in self.timed]

    def metrics(self, measured: MeasuredRequests) -> tuple[ThroughputMetrics, tuple[str, ...]]:
        return closed_metrics(measured, [t.worker for t in self.timed])


@dataclass(frozen=True)
class ClosedLoop:
    """The closed loop of ``spec``: ``rounds`` waves at its concurrency, warmed up at the same
    concurrency (a :class:`~orchestrator.bench.point.Loop`)."""

    spec: PointSpec
    concurrency: int
    rounds: int

    @classmethod
    def of(cls, spec: PointSpec, client: BenchClient) -> ClosedLoop:
        """ValueError when ``spec`` has no concurrency and rounds or the client's pool is
        smaller than its concurrency."""
        concurrency, rounds = spec.concurrency, spec.rounds
        if concurrency is None or rounds is None:
            raise ValueError("a closed point needs its concurrency and rounds")
        if concurrency > client.concurrency:
            raise ValueError(f"client pool sized {client.concurrency} < concurrency {concurrency}")
        return cls(spec, concurrency, rounds)

    @property
    def warmup_concurrency(self) -> int:
        return self.concurrency

    @property
    def measured_requests(self) -> int:
        return self.rounds * self.concurrency

    @property
    def schedule(self) -> tuple[float, ...]:
        return ()

    async def send(self, client: BenchClient, prompts: Sequence[str | Prompt]) -> ClosedRun:
        timed = await closed_loop(
            client, prompts, concurrency=self.concurrency, spec=self.spec, phase="measured"
        )
        return ClosedRun(self.spec, tuple(timed), tuple(prompts))


__all__ = [
    "ClosedLoop",
    "ClosedRun",
    "Timed",
    "closed_loop",
    "closed_metrics",
    "steady_window",
]
