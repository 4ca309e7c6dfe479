"""One point of a sweep replayed against the simulated scheduler: what it is expected to
measure, as :mod:`orchestrator.sim.truth` states it for every cell of a sweep.

A point is a closed loop of ``rounds x concurrency`` requests of ``max_tokens`` tokens each,
started together after an idle server; its ``output_tok_s`` is all output tokens over the wall
time from the first send to the last end. :func:`replay_point` replays the simulated server's
scheduler (:mod:`orchestrator.sim.server_engine`) against that client, each step lasting what
:mod:`orchestrator.sim.perfmodel` says for its batch, and :func:`cell_truth` averages many
replays (see :mod:`orchestrator.sim.truth` for what the truth covers).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import random
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.sim.content import ContentClass
from orchestrator.sim.perfmodel import (
    PerfParams,
    SpecShape,
    accepted_distribution,
    batch_step_time_ms,
    prefill_time_ms,
)
from orchestrator.sim.thinking import NATURAL_LENGTHS

BLOCK = 8
"""Verify steps drawn at once far from a request's end (see :class:`StepSampler`)."""


@dataclass(frozen=True)
class CellTruth:
    """One config's expected measurement in one matrix cell.

    ``output_tok_s``: expected aggregate output tokens per wall second of the point;
    ``accept_len``: expected decode tokens per verify step over the point's requests (None
    without speculative decoding, as the server reports none). The ``*_sd`` fields are the
    standard deviation of ONE measurement from request sampling alone (restart jitter comes
    on top): what a scorer needs to simulate a measurement, or a test to set its tolerance.
    """

    context: int
    concurrency: int
    output_tok_s: float
    accept_len: float | None
    output_tok_s_sd: float
    accept_len_sd: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "context": self.context,
            "concurrency": self.concurrency,
            "output_tok_s": self.output_tok_s,
            "accept_len": self.accept_len,
            "output_tok_s_sd": self.output_tok_s_sd,
            "accept_len_sd": self.accept_len_sd,
        }


@dataclass(frozen=True)
class CellModel:
    """What one point of the closed loop depends on, in the model's units."""

    shape: SpecShape
    perf: PerfParams
    context: int
    concurrency: int
    rounds: int
    max_tokens: int
    ignore_eos: bool
    max_running: int
    turnaround_ms: float = 0.0
    """From a request's end to its worker's next request reaching the server (model ms)."""
    content: tuple[ContentClass, ...] = (ContentClass.PLAIN,)
    """The content classes of the point's requests in the order they are sent, cycled (one
    class: every request's; :mod:`orchestrator.sim.content`). A request's class shifts its
    drafter's acceptance and, without ``ignore_eos``, sets its natural length
    (:data:`orchestrator.sim.thinking.NATURAL_LENGTHS`, or ``max_tokens`` if sooner)."""


def cell_truth(model: CellModel, *, time_scale: float, replications: int) -> CellTruth:
    """The mean and spread of ``replications`` replays of one point (see the module text)."""
    sampler = StepSampler(model.shape, model.perf)
    rates: list[float] = []
    accepts: list[float] = []
    for index in range(max(2, replications)):
        rng = random.Random(f"truth:{model.context}:{model.concurrency}:{index}")
        replay = replay_point(model, sampler, rng)
        rates.append(replay.output_tokens / (replay.wall_ms * time_scale / 1000.0))
        if replay.accept_len is not None:
            accepts.append(replay.accept_len)
    speculative = model.shape.speculative and len(accepts) == len(rates)
    return CellTruth(
        context=model.context,
        concurrency=model.concurrency,
        output_tok_s=math.fsum(rates) / len(rates),
        accept_len=math.fsum(accepts) / len(accepts) if speculative else None,
        output_tok_s_sd=statistics.stdev(rates),
        accept_len_sd=statistics.stdev(accepts) if speculative else None,
    )


@dataclass(frozen=True)
class Replay:
    """One replayed point: its output tokens, wall time (model ms) and meta_info accept len."""

    output_tokens: int
    wall_ms: float
    accept_len: float | None


class StepSampler:
    """Draws a request's verify steps from :func:`accepted_distribution`, exactly in law and
    faster than step by step: where the law does not change with the context, far from the
    request's end, :data:`BLOCK` steps at a time from their sum's law (no block there can
    reach the end, so the step count is exact), the rest one uniform per step."""

    def __init__(self, shape: SpecShape, perf: PerfParams) -> None:
        self.shape = shape
        self.perf = perf
        self._tables: dict[tuple[ContentClass, int], list[float]] = {}
        self._blocks: dict[tuple[ContentClass, int], list[float]] = {}
        self._paths: dict[tuple[ContentClass, int, int], list[list[float]]] = {}

    def _key(self, context: int) -> tuple[int, int]:
        seen = context if self.shape.window is None else min(context, self.shape.window)
        return (seen if seen > self.perf.long_context_ref else -1), seen

    def _table(self, context: int, content: ContentClass) -> list[float]:
        key, seen = self._key(context)
        table = self._tables.get((content, key))
        if table is None:
            table = _cumulative(accepted_distribution(self.shape, seen, self.perf, content))
            self._tables[(content, key)] = table
        return table

    def _block(self, context: int, content: ContentClass) -> list[float]:
        key, seen = self._key(context)
        table = self._blocks.get((content, key))
        if table is None:
            law = accepted_distribution(self.shape, seen, self.perf, content)
            total: list[float] = [1.0]
            for _ in range(BLOCK):
                total = _convolve(total, law)
            table = _cumulative(total)
            self._blocks[(content, key)] = table
        return table

    def steps(
        self,
        rng: random.Random,
        prompt: int,
        length: int,
        content: ContentClass = ContentClass.PLAIN,
    ) -> int:
        """Verify steps a request of ``length`` tokens needs after its prefill's first one:
        each step gains what the law (of the request's ``content`` class) draws at the
        request's context then, the last one cut at ``length`` (it still counts as a step)."""
        need = length - 1
        if not self.shape.speculative:
            return need
        draw = rng.random
        emitted = steps = 0
        if self._constant(prompt + 1, prompt + length):
            table = self._table(prompt + 1, content)
            block = self._block(prompt + 1, content)
            reach = BLOCK * len(table)
            while need - emitted > reach:
                emitted += BLOCK + bisect.bisect_right(block, draw())
                steps += BLOCK
            while emitted < need:
                emitted += 1 + bisect.bisect_right(table, draw())
                steps += 1
            return steps
        tables = self._along(prompt, length, content)
        while emitted < need:
            emitted += 1 + bisect.bisect_right(tables[emitted], draw())
            steps += 1
        return steps

    def _along(self, prompt: int, length: int, content: ContentClass) -> list[list[float]]:
        """The table at each emitted count of a request (its context moves the law)."""
        tables = self._paths.get((content, prompt, length))
        if tables is None:
            tables = [self._table(prompt + 1 + emitted, content) for emitted in range(length)]
            self._paths[(content, prompt, length)] = tables
        return tables

    def _constant(self, first: int, last: int) -> bool:
        """Whether the law is the same at every context in [first, last]."""
        window = self.shape.window
        highest = last if window is None else min(last, window)
        return highest <= self.perf.long_context_ref or (
            window is not None and first >= window
        )


@dataclass
class _Running:
    """A request in the decode batch: joined at decode step ``start``, ``steps`` to go, its
    context ramping by ``rate`` tokens a step (the mean gain of its own steps)."""

    start: int
    steps: int
    length: int
    rate: float
    capped: bool


class _Batch:
    """The running batch's size and context sums as linear functions of the decode step count.

    A request's context at its k-th step is taken as ``prompt + 1 + rate * k``: its own tokens
    spread evenly over its own steps (exact at both ends; the step time is linear in the sums,
    so only the context terms, a few percent of a step, see the in-between approximation). The
    drafter's sum counts a request at the window once its ramp reaches it (``capped``)."""

    def __init__(self, prompt: int, window: int | None) -> None:
        self.prompt = prompt
        self.window = window
        self.size = 0
        self.rate = 0.0
        self.offset = 0.0
        self.linear = 0
        self.linear_rate = 0.0
        self.linear_offset = 0.0
        self.capped = 0

    def add(self, request: _Running, sign: int = 1) -> None:
        self.size += sign
        self.rate += sign * request.rate
        self.offset += sign * request.rate * request.start
        self._group(request, sign)

    def _group(self, request: _Running, sign: int) -> None:
        if request.capped:
            self.capped += sign
        else:
            self.linear += sign
            self.linear_rate += sign * request.rate
            self.linear_offset += sign * request.rate * request.start

    def cap(self, request: _Running) -> None:
        self._group(request, -1)
        request.capped = True
        self._group(request, 1)

    def sums(self, step: float) -> tuple[float, float]:
        """(context sum, drafter's context sum) at decode step ``step`` (may be fractional)."""
        base = self.prompt + 1
        total = self.size * base + self.rate * step - self.offset
        if self.window is None:
            return total, total
        seen = self.linear * base + self.linear_rate * step - self.linear_offset
        return total, seen + self.capped * self.window


_CAP, _FINISH = 0, 1


def replay_point(model: CellModel, sampler: StepSampler, rng: random.Random) -> Replay:
    """One closed-loop point against the simulated scheduler, in model milliseconds.

    All ``concurrency`` requests arrive at time 0 at an idle server. An iteration is one
    prefill of every waiting request (as many as ``max_running`` leaves room for; each emits
    its first token), else one decode step of every running request. A request that finished
    in an iteration is replaced by its worker's next one, which reaches the server
    ``turnaround_ms`` later, and never before the next iteration has begun (the scheduler
    hands out chunks only between iterations); it waits for the end of the iteration it
    arrives in, or wakes an idle server. The wall time runs to the last request's end.

    Each request's verify steps are drawn when it is prefilled, so decode steps between two
    events (a finish, a request's context reaching the draft window) are summed at once.
    """
    context = model.context
    window = model.shape.window
    total = model.rounds * model.concurrency
    issued = min(model.concurrency, total)
    waiting = issued
    arrivals: deque[float] = deque()  # when each replacement reaches the server
    batch = _Batch(context, window)
    events: list[tuple[int, int, int, _Running]] = []
    order = itertools.count()
    step = 0
    done = tokens = decode_tokens = verify_steps = admitted_so_far = 0
    now = end = 0.0
    while done < total:
        finished: list[int] = []
        if waiting and batch.size < model.max_running:
            admitted = min(waiting, model.max_running - batch.size)
            waiting -= admitted
            now += prefill_time_ms(admitted * context, model.perf)
            for _ in range(admitted):
                content = model.content[admitted_so_far % len(model.content)]
                admitted_so_far += 1
                length = _length(model, rng, content)
                steps = sampler.steps(rng, context, length, content) if length > 1 else 0
                verify_steps += steps
                if steps == 0:
                    finished.append(length)
                    continue
                request = _Running(step, steps, length, (length - 1) / steps, False)
                if window is not None:
                    reach = (window - context - 1) / request.rate
                    request.capped = reach <= 0
                    if 0 < reach < steps:
                        heapq.heappush(events, (step + math.ceil(reach), _CAP, next(order),
                                                request))
                batch.add(request)
                heapq.heappush(events, (step + steps, _FINISH, next(order), request))
        elif batch.size:
            count = 1 if arrivals else events[0][0] - step
            total_ctx, seen_ctx = batch.sums(step + (count - 1) / 2.0)
            now += count * batch_step_time_ms(
                model.shape, batch.size, total_ctx, seen_ctx, model.perf
            )
            step += count
            while events and events[0][0] == step:
                _, kind, _, request = heapq.heappop(events)
                if kind == _CAP:
                    batch.cap(request)
                else:
                    batch.add(request, -1)
                    finished.append(request.length)
        else:  # idle until the next replacement arrives
            now = max(now, arrivals[0])
        while arrivals and arrivals[0] <= now:
            arrivals.popleft()
            waiting += 1
        for length in finished:
            done += 1
            tokens += length
            decode_tokens += length - 1
            end = now
            if issued < total:
                issued += 1
                arrivals.append(now + model.turnaround_ms)
    speculative = model.shape.speculative
    accept = decode_tokens / verify_steps if speculative and verify_steps else None
    return Replay(tokens, end, accept)


def _cumulative(law: Sequence[float]) -> list[float]:
    """The law's cumulative table for a bisect draw; the last entry exactly 1."""
    table = list(itertools.accumulate(law))
    table[-1] = 1.0
    return table


def _convolve(left: Sequence[float], right: Sequence[float]) -> list[float]:
    """The law of the sum of two independent draws (index = value - its minimum)."""
    out = [0.0] * (len(left) + len(right) - 1)
    for i, a in enumerate(left):
        for j, b in enumerate(right):
            out[i + j] += a * b
    return out


def _length(model: CellModel, rng: random.Random, content: ContentClass) -> int:
    if model.ignore_eos:
        return model.max_tokens
    return min(rng.randint(*NATURAL_LENGTHS[content]), model.max_tokens)


__all__ = [
    "BLOCK",
    "CellModel",
    "CellTruth",
    "Replay",
    "StepSampler",
    "cell_truth",
    "replay_point",
]
