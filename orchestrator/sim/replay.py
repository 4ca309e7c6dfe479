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
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.sim.content import ContentClass
from orchestrator.sim.drafting import BatchDraft
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
ADVANCE_TRIES = 64
"""Draws of a running request's past steps before :meth:`StepSampler.advance` gives up."""


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
        return asdict(self)


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
    draft: BatchDraft | None = None
    """A speculative schedule: the shape of each step by its running batch's size (``shape``
    is then the server's static one); None: ``shape`` at every step."""


def cell_truth(model: CellModel, *, time_scale: float, replications: int) -> CellTruth:
    """The mean and spread of ``replications`` replays of one point (see the module text)."""
    sampler = Samplers(model.perf)
    rates: list[float] = []
    accepts: list[float] = []
    for index in range(max(2, replications)):
        rng = random.Random(f"truth:{model.context}:{model.concurrency}:{index}")
        replay = replay_point(model, sampler, rng)
        rates.append(replay.output_tokens / (replay.wall_ms * time_scale / 1000.0))
        if replay.accept_len is not None:
            accepts.append(replay.accept_len)
    speculative = len(accepts) == len(rates)
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

    def advance(
        self,
        rng: random.Random,
        context: int,
        need: int,
        steps: int,
        content: ContentClass = ContentClass.PLAIN,
    ) -> int:
        """Tokens ``steps`` verify steps gained a request that still needs ``need`` of them
        from ``context`` and did not finish in those steps: the sum of its gains, drawn
        given that it stayed below ``need`` (so exact in law: its still running is all that
        is known of its past once its finish is drawn again). Gains step by step, each at its
        context; a path that reached ``need`` is drawn again (at most :data:`ADVANCE_TRIES`
        times, then the most it may have gained)."""
        if not self.shape.speculative:
            return steps
        draw = rng.random
        for _ in range(ADVANCE_TRIES):
            gained = 0
            for _ in range(steps):
                gained += 1 + bisect.bisect_right(self._table(context + gained, content), draw())
                if gained >= need:
                    break
            if gained < need:
                return gained
        return need - 1

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


@dataclass(eq=False)
class _Running:
    """A request in the decode batch, as drawn at decode step ``start``: ``steps`` to go for
    the tokens left after ``emitted`` (beyond the prefill's first), its context ramping from
    ``base`` by ``rate`` tokens a step (the mean gain of those steps), with ``shape``'s law.
    ``draw`` counts its draws: an event of an earlier one is stale."""

    length: int
    content: ContentClass
    rng: random.Random
    shape: SpecShape
    start: int = 0
    steps: int = 0
    emitted: int = 0
    base: int = 0
    rate: float = 0.0
    capped: bool = False
    draw: int = 0


class _Batch:
    """The running batch's size and context sums as linear functions of the decode step count.

    A request's context at its k-th step of a draw is taken as ``base + rate * k``: its own
    tokens spread evenly over its own steps (exact at both ends; the step time is linear in the
    sums, so only the context terms, a few percent of a step, see the in-between
    approximation). The drafter's sum counts a request at the window once its ramp reaches it
    (``capped``)."""

    def __init__(self, window: int | None) -> None:
        self.window = window
        self.members: dict[int, _Running] = {}
        self.size = 0
        self.base = 0
        self.rate = 0.0
        self.offset = 0.0
        self.linear_base = 0
        self.linear_rate = 0.0
        self.linear_offset = 0.0
        self.capped = 0

    def add(self, request: _Running, sign: int = 1) -> None:
        if sign > 0:
            self.members[id(request)] = request
        else:
            del self.members[id(request)]
        self.size += sign
        self.base += sign * request.base
        self.rate += sign * request.rate
        self.offset += sign * request.rate * request.start
        self._group(request, sign)

    def _group(self, request: _Running, sign: int) -> None:
        if request.capped:
            self.capped += sign
        else:
            self.linear_base += sign * request.base
            self.linear_rate += sign * request.rate
            self.linear_offset += sign * request.rate * request.start

    def cap(self, request: _Running) -> None:
        self._group(request, -1)
        request.capped = True
        self._group(request, 1)

    def sums(self, step: float) -> tuple[float, float]:
        """(context sum, drafter's context sum) at decode step ``step`` (may be fractional)."""
        total = self.base + self.rate * step - self.offset
        if self.window is None:
            return total, total
        seen = self.linear_base + self.linear_rate * step - self.linear_offset
        return total, seen + self.capped * self.window


_CAP, _FINISH = 0, 1


class Samplers:
    """A :class:`StepSampler` per shape, kept across a cell's replays."""

    def __init__(self, perf: PerfParams, *known: StepSampler) -> None:
        self.perf = perf
        self._by_shape = {sampler.shape: sampler for sampler in known}

    def of(self, shape: SpecShape) -> StepSampler:
        sampler = self._by_shape.get(shape)
        if sampler is None:
            sampler = self._by_shape[shape] = StepSampler(shape, self.perf)
        return sampler


def replay_point(
    model: CellModel, sampler: StepSampler | Samplers, rng: random.Random
) -> Replay:
    """One closed-loop point against the simulated scheduler, in model milliseconds.

    All ``concurrency`` requests arrive at time 0 at an idle server. An iteration is one
    prefill of every waiting request (as many as ``max_running`` leaves room for; each emits
    its first token), else one decode step of every running request. A request that finished
    in an iteration is replaced by its worker's next one, which reaches the server
    ``turnaround_ms`` later, and never before the next iteration has begun (the scheduler
    hands out chunks only between iterations); it waits for the end of the iteration it
    arrives in, or wakes an idle server. The wall time runs to the last request's end.

    Each request's verify steps are drawn when it is prefilled, so decode steps between two
    events (a finish, a request's context reaching the draft window) are summed at once. Each
    request draws from a stream of its own (seeded from ``rng`` and its place in the order of
    admission), so two configs, or a schedule and a fixed config, meet the same requests.

    With a schedule (``model.draft``) a step runs the shape of its batch's size. When the
    batch changes to a size of another shape, each running request's steps since its last
    draw are drawn given that it is still running (:meth:`StepSampler.advance`), and what is
    left of it again under the new shape: exact in law, at the cost of a step-by-step draw
    of those steps."""
    samplers = sampler if isinstance(sampler, Samplers) else Samplers(model.perf, sampler)
    return _PointReplay(model, samplers, rng.getrandbits(64)).run()


class _PointReplay:
    """The state of one :func:`replay_point`; each method one kind of scheduler iteration."""

    def __init__(self, model: CellModel, samplers: Samplers, seed: int) -> None:
        self.model = model
        self.samplers = samplers
        self.seed = seed
        self.draft = model.draft
        self.batch = _Batch(model.shape.window)
        self.events: list[tuple[int, int, int, int, _Running]] = []
        self.order = itertools.count()
        self.arrivals: deque[float] = deque()  # when each replacement reaches the server
        self.step = 0
        self.verify_steps = 0
        self.admitted = 0
        self.now = 0.0

    def shape(self, batch: int) -> SpecShape:
        return self.model.shape if self.draft is None else self.draft.shape(batch)

    def run(self) -> Replay:
        model = self.model
        total = model.rounds * model.concurrency
        issued = waiting = min(model.concurrency, total)
        done = tokens = decode_tokens = 0
        end = 0.0
        while done < total:
            finished: list[int] = []
            if waiting and self.batch.size < model.max_running:
                admitted = min(waiting, model.max_running - self.batch.size)
                waiting -= admitted
                finished = self.prefill(admitted)
            elif self.batch.size:
                finished = self.decode()
            else:  # idle until the next replacement arrives
                self.now = max(self.now, self.arrivals[0])
            while self.arrivals and self.arrivals[0] <= self.now:
                self.arrivals.popleft()
                waiting += 1
            for length in finished:
                done += 1
                tokens += length
                decode_tokens += length - 1
                end = self.now
                if issued < total:
                    issued += 1
                    self.arrivals.append(self.now + model.turnaround_ms)
        shapes = (model.shape,) if self.draft is None else self.draft.shapes
        speculative = any(shape.speculative for shape in shapes)
        verify = self.verify_steps
        return Replay(tokens, end, decode_tokens / verify if speculative and verify else None)

    def prefill(self, count: int) -> list[int]:
        """Admit ``count`` waiting requests, each drawn for the batch it joins; the lengths of
        those done at their first token."""
        model = self.model
        self.now += prefill_time_ms(count * model.context, model.perf)
        shape = self.shape(self.batch.size + count)
        finished: list[int] = []
        for _ in range(count):
            index = self.admitted
            self.admitted += 1
            content = model.content[index % len(model.content)]
            stream = random.Random(self.seed + index)
            length = _length(model, stream, content)
            if length <= 1:
                finished.append(length)
                continue
            request = _Running(length, content, stream, shape)
            self.draw(request, shape)
            self.batch.add(request)
        return finished

    def draw(self, request: _Running, shape: SpecShape) -> None:
        """Draw ``request``'s steps under ``shape`` from this step for the tokens it has left,
        and its events."""
        context = self.model.context + request.emitted
        steps = self.samplers.of(shape).steps(
            request.rng, context, request.length - request.emitted, request.content
        )
        request.shape, request.start, request.steps = shape, self.step, steps
        request.base = context + 1
        request.rate = (request.length - 1 - request.emitted) / steps
        request.draw += 1
        self.verify_steps += steps
        window = self.model.shape.window
        request.capped = False
        if window is not None:
            reach = (window - request.base) / request.rate
            request.capped = reach <= 0
            if 0 < reach < steps:
                self._event(self.step + math.ceil(reach), _CAP, request)
        self._event(self.step + steps, _FINISH, request)

    def _event(self, at: int, kind: int, request: _Running) -> None:
        heapq.heappush(self.events, (at, kind, next(self.order), request.draw, request))

    def redraw(self, shape: SpecShape) -> None:
        """The batch now runs ``shape``: every request drawn under another is drawn again for
        what is left of it, its steps since its last draw drawn given it is still running."""
        for request in list(self.batch.members.values()):
            if request.shape == shape:
                continue
            elapsed = self.step - request.start
            self.batch.add(request, -1)
            self.verify_steps -= request.steps - elapsed
            request.emitted += self.samplers.of(request.shape).advance(
                request.rng, self.model.context + 1 + request.emitted,
                request.length - 1 - request.emitted, elapsed, request.content,
            )  # fmt: skip
            self.draw(request, shape)
            self.batch.add(request)

    def decode(self) -> list[int]:
        """Decode steps of the running batch up to its next event (one step while a
        replacement is on its way); the lengths of the requests that finished."""
        model, batch = self.model, self.batch
        shape = self.shape(batch.size)
        if self.draft is not None:
            self.redraw(shape)
        count = 1 if self.arrivals else self.events[0][0] - self.step
        total_ctx, seen_ctx = batch.sums(self.step + (count - 1) / 2.0)
        self.now += count * batch_step_time_ms(shape, batch.size, total_ctx, seen_ctx, model.perf)
        self.step += count
        finished: list[int] = []
        while self.events and self.events[0][0] == self.step:
            _, kind, _, draw, request = heapq.heappop(self.events)
            if draw != request.draw:
                continue  # of an earlier draw
            if kind == _CAP:
                batch.cap(request)
            else:
                batch.add(request, -1)
                finished.append(request.length)
        return finished


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
    "Samplers",
    "StepSampler",
    "cell_truth",
    "replay_point",
]
