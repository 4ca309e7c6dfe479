"""Open-loop points: requests arrive at a rate, on a schedule fixed before the point starts.

A serving fleet does not wait for one answer before the next user asks; so a rate point
sends each request at its scheduled time whether or not the earlier ones have finished, up to
``max_concurrency`` in flight, for ``duration_s`` after a warm-up. What it measures is what
operators judge a config by: latency percentiles and goodput (requests per second that met
every latency bound) at a load the server did not choose.

The schedule is data, not a side effect of sleeping: :func:`arrival_schedule` draws every
offset from the seed before the phase starts, the point stores it, and the client then sends
against it on the monotonic clock. A client that cannot keep to it (its event loop is late,
or the in-flight cap holds a request back) does not silently bunch or drop requests: every
send's lateness against its slot in the schedule is recorded (``send_lag``), requests still
waiting for a slot when the phase ends are counted as unsent, and the point reports the rate
it really sent at (``achieved_rate``), flagged ``rate_short`` below 95% of the schedule's own.

Compared with SGLang's ``bench_serving --request-rate R [--max-concurrency C]``, whose
definitions the metrics follow (``orchestrator.bench.point.point_metrics``):

- bench_serving sends a fixed number of prompts, sleeping an exponential gap after each send
  (so its sleeps' lateness accumulates into the schedule). A rate point sends for a fixed
  time against absolute offsets (lateness does not accumulate; it is measured instead), so a
  slow server cannot stretch the phase without bound.
- Like bench_serving, the first request goes at offset 0, requests still running at the end
  of sending are awaited and counted, and the duration that throughputs divide by runs from
  the phase's start to the last response's end (the drain included): ``request_s`` is
  completed requests over that time, as bench_serving's request throughput.
- Like bench_serving's ``--max-concurrency`` semaphore, a request whose slot is not free
  waits for one; bench_serving's wait is invisible in its numbers, here it is ``send_lag``.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from orchestrator.bench.client import BenchClient, Phase, RawExchange
from orchestrator.bench.point import (
    FLAG_RATE_SHORT,
    MeasuredRequests,
    PointSpec,
    latency,
    point_metrics,
    send_request,
)
from orchestrator.bench.stats import summarize
from orchestrator.engines.base import Prompt
from orchestrator.points import ThroughputMetrics
from orchestrator.types import Arrivals

__all__ = [
    "OpenLoop",
    "OpenLoopRun",
    "arrival_schedule",
    "offered_rate",
    "open_loop",
    "rate_metrics",
]


def arrival_schedule(
    rate: float, duration_s: float, arrivals: Arrivals, seed: int
) -> tuple[float, ...]:
    """Send offsets (s from the measured phase's start) of every request in ``duration_s``.

    ``poisson``: a Poisson process of intensity ``rate``, gaps drawn as exponentials from
    ``random.Random(seed)`` (the draw is specified by Python, so the same arguments give the
    same schedule on every host and version); ``constant``: ``1/rate`` apart. Both start at
    offset 0, as bench_serving's first request does, and keep the offsets below
    ``duration_s``. The same seed at another rate gives the same schedule scaled in time, so
    every config and every rate of a sweep face the same arrival pattern (common random
    numbers: differences between configs are not differences between draws).
    """
    if not rate > 0 or not math.isfinite(rate):
        raise ValueError(f"rate must be a positive finite number of requests/s, got {rate}")
    if not duration_s > 0 or not math.isfinite(duration_s):
        raise ValueError(f"duration_s must be a positive finite number, got {duration_s}")
    if arrivals == "constant":
        count = math.ceil(rate * duration_s - 1e-9)
        return tuple(index / rate for index in range(count))
    if arrivals != "poisson":
        raise ValueError(f"arrivals must be 'poisson' or 'constant', got {arrivals!r}")
    rng = random.Random(seed)
    offsets: list[float] = []
    offset = 0.0
    while offset < duration_s:
        offsets.append(offset)
        offset += rng.expovariate(rate)
    return tuple(offsets)


def offered_rate(schedule: Sequence[float], duration_s: float) -> float:
    """The schedule's own rate: its requests over the phase (not the nominal ``rate``,
    from which a Poisson draw differs by chance)."""
    return len(schedule) / duration_s


@dataclass
class _Sent:
    due: float
    """The monotonic time the schedule gave this request."""
    prompt: str | Prompt
    raw: RawExchange


@dataclass(frozen=True)
class OpenLoopRun:
    """What one open loop sent, in schedule order, and how many it could not send."""

    start: float
    sent: list[_Sent]
    unsent: int
    spec: PointSpec
    schedule: tuple[float, ...]

    @property
    def exchanges(self) -> Sequence[RawExchange]:
        return [s.raw for s in self.sent]

    @property
    def prompts(self) -> Sequence[str | Prompt]:
        return [s.prompt for s in self.sent]

    def metrics(self, measured: MeasuredRequests) -> tuple[ThroughputMetrics, tuple[str, ...]]:
        dues = [s.due for s in self.sent]
        return rate_metrics(
            measured, dues, schedule=self.schedule, start=self.start, unsent=self.unsent
        )


class _Slots:
    """The open loop's in-flight cap: a slot is taken per send and freed when it ends."""

    def __init__(self, size: int) -> None:
        self.size, self.in_flight = size, 0
        self.freed = asyncio.Event()

    async def take(self, *, deadline: float) -> bool:
        """Take a slot, waiting for one until ``deadline`` (monotonic); False when none
        came free by then (the request is not sent)."""
        while self.in_flight >= self.size and (left := deadline - time.monotonic()) > 0:
            self.freed.clear()
            try:
                async with asyncio.timeout(left):
                    await self.freed.wait()
            except TimeoutError:
                break
        if self.in_flight >= self.size:
            return False
        self.in_flight += 1
        return True

    def release(self) -> None:
        self.in_flight -= 1
        self.freed.set()


async def open_loop(
    client: BenchClient,
    prompts: Sequence[str | Prompt],
    schedule: Sequence[float],
    *,
    spec: PointSpec,
    max_concurrency: int,
    duration_s: float,
    phase: Phase = "measured",
) -> OpenLoopRun:
    """Send ``prompts[i]`` at ``start + schedule[i]``, at most ``max_concurrency`` in flight.

    One dispatcher walks the schedule in order: it sleeps until a request's time (never
    sending early), then, if every slot is busy, waits for one; the request's real send
    stamp is taken by the client, so its lateness is the stamp minus its due time. Once the
    phase's ``duration_s`` is over, a request still waiting for a slot is not sent (nor are
    the ones behind it): it is counted as unsent. A request whose time came, however late,
    while a slot was free goes out. Every sent request is awaited before this returns.
    """
    if len(prompts) < len(schedule):
        raise ValueError(f"{len(schedule)} arrivals need as many prompts, got {len(prompts)}")
    clock = time.monotonic
    slots = _Slots(max_concurrency)

    async def send(index: int, prompt: str | Prompt) -> RawExchange:
        try:
            return await send_request(client, spec, prompt, index=index, phase=phase)
        finally:
            slots.release()

    start = clock()
    tasks: list[tuple[float, str | Prompt, asyncio.Task[RawExchange]]] = []
    unsent = 0
    try:
        for index, offset in enumerate(schedule):
            due = start + offset
            delay = due - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            if not await slots.take(deadline=start + duration_s):
                unsent = len(schedule) - index
                break
            prompt = prompts[index]
            tasks.append((due, prompt, asyncio.create_task(send(index, prompt))))
        raws = await asyncio.gather(*(task for _, _, task in tasks))
    finally:
        # Cancelled (the sweep is stopping) or failed: no request outlives the point.
        pending = [task for _, _, task in tasks if not task.done()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    sent = [_Sent(due, prompt, raw) for (due, prompt, _), raw in zip(tasks, raws, strict=True)]
    return OpenLoopRun(start, sent, unsent, spec, tuple(schedule))


def rate_metrics(
    measured: MeasuredRequests,
    dues: Sequence[float],
    *,
    schedule: Sequence[float],
    start: float,
    unsent: int,
) -> tuple[ThroughputMetrics, tuple[str, ...]]:
    """Metrics and quality flags of a rate point's measured requests (pure).

    :func:`~orchestrator.bench.point.point_metrics` from the phase's ``start``, plus the
    load the client really generated:

    - ``achieved_rate``: requests sent over the sending window, ``duration_s`` (or up to
      the last send when the loop woke past the end); it counts what went out, so unsent
      requests lower it, and it is never the nominal ``rate``;
    - ``send_lag``: each sent request's send stamp minus its due time;
    - ``rate_short`` when ``achieved_rate`` is below ``min_rate_fraction`` of the
      schedule's own rate (``len(schedule) / duration_s``).

    ``measured.records`` and ``dues`` are the sent requests in schedule order.
    """
    records, spec = measured.records, measured.spec
    if spec.rate is None or spec.duration_s is None:
        raise ValueError("rate_metrics needs a rate point (rate and duration_s set)")
    metrics, flags = point_metrics(
        measured,
        # About a second of completions per batch: the rate's standard error by batch means.
        batch=max(1, math.ceil(spec.rate)),
        origin=start,
        min_wall=spec.duration_s,
    )
    last_send = max((r.send_time for r in records), default=start)
    window = max(spec.duration_s, last_send - start)
    achieved = len(records) / window
    metrics = replace(
        metrics,
        achieved_rate=achieved,
        requests_scheduled=len(schedule),
        requests_unsent=unsent,
        send_lag=latency(
            summarize(r.send_time - due for r, due in zip(records, dues, strict=True))
        ),
    )
    if achieved < measured.thresholds.min_rate_fraction * offered_rate(schedule, spec.duration_s):
        flags.insert(0, FLAG_RATE_SHORT)
    return metrics, tuple(flags)


@dataclass(frozen=True)
class OpenLoop:
    """The open loop of ``spec``: its arrival schedule (drawn before the point starts, kept
    with it), at most ``max_concurrency`` in flight; warmed up as bench_serving does, all at
    once within the cap (a :class:`~orchestrator.bench.point.Loop`)."""

    spec: PointSpec
    duration_s: float
    max_concurrency: int
    schedule: tuple[float, ...]

    @classmethod
    def of(cls, spec: PointSpec, client: BenchClient) -> OpenLoop:
        """ValueError when ``spec`` is not a rate point or the client's pool is smaller than
        its in-flight cap (a request queued inside the client would be sent late without its
        lateness being seen)."""
        rate, duration_s, arrivals = spec.rate, spec.duration_s, spec.arrivals
        max_concurrency, seed = spec.max_concurrency, spec.seed
        if rate is None or duration_s is None or arrivals is None or seed is None:
            raise ValueError("a rate point needs its rate, arrivals, duration_s and seed")
        if max_concurrency is None or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_concurrency > client.concurrency:
            raise ValueError(
                f"client pool sized {client.concurrency} < max_concurrency {max_concurrency}"
            )
        schedule = arrival_schedule(rate, duration_s, arrivals, seed)
        return cls(spec, duration_s, max_concurrency, schedule)

    @property
    def warmup_concurrency(self) -> int:
        return max(1, min(self.spec.warmup_requests, self.max_concurrency))

    @property
    def measured_requests(self) -> int:
        return len(self.schedule)

    async def send(self, client: BenchClient, prompts: Sequence[str | Prompt]) -> OpenLoopRun:
        return await open_loop(
            client,
            prompts,
            self.schedule,
            spec=self.spec,
            max_concurrency=self.max_concurrency,
            duration_s=self.duration_s,
        )
