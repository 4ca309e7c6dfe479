"""The simulated scheduler: one asyncio task running continuous batching over all requests.

Each loop iteration either prefills newly arrived requests (one prefill batch, first token each)
or runs one decode step for every running request. A step lasts what the performance model says
for the CURRENT batch (so concurrency really changes step time), then each request gains the
tokens its verify step accepted, delivered as one chunk. The step's shape is what the server's
draft policy gives for the batch's size (:mod:`orchestrator.sim.drafting`: one shape, or a
speculative schedule's), told after each step what its requests accepted. Requests learn of
their chunks through a per-request queue; the HTTP layer writes them and stamps the
ground-truth emission times.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from orchestrator.sim.content import ContentClass
from orchestrator.sim.drafting import DraftPolicy, FixedDraft
from orchestrator.sim.perfmodel import (
    PerfParams,
    SpecShape,
    prefill_time_ms,
    sample_accepted,
    step_time_ms,
)
from orchestrator.sim.server_log import SglangLog, decode_line, prefill_line
from orchestrator.sim.thinking import Completion

TRUTH_RING = 10_000
CACHE_PAGE = 16
"""Prefix-cache granularity in tokens (hash per page boundary)."""
CACHE_MAX_PAGES = 200_000
MAX_LAG_S = 0.1
"""How far behind the model's clock a busy scheduler may fall and still catch up."""


@dataclass(frozen=True)
class Chunk:
    """Tokens one scheduler event hands to a request; ``finish`` set on the last one."""

    tokens: tuple[str, ...]
    finish: str | None
    verify_step: bool


@dataclass(kw_only=True)
class TruthRecord:
    """Ground truth of one request, as /sim/requests reports it: its fields, in their order."""

    id: str
    arrival_monotonic: float
    arrival_kernel_monotonic: float | None = None
    """When the request's bytes reached the server's socket (the kernel's stamp), before the
    event loop got to parse it; None where the socket keeps no stamps."""
    first_emit_monotonic: float | None = None
    chunks: list[list[float]] = field(default_factory=list)
    prompt_tokens: int
    content: ContentClass = ContentClass.PLAIN
    """The request's content class (:mod:`orchestrator.sim.content`): what its drafter
    acceptance and natural answer length were drawn for."""
    completion_tokens: int = 0
    verify_steps: int = 0
    finish_reason: str | None = None

    def stamp(self, n_tokens: int, at: float | None = None) -> None:
        """Record that a chunk of ``n_tokens`` was just written to the socket (``at``: when
        the socket took it, where the connection knows)."""
        now = time.monotonic() if at is None else at
        if self.first_emit_monotonic is None:
            self.first_emit_monotonic = now
        self.chunks.append([now, n_tokens])

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: the fields by name, the content class by its value."""
        return {**asdict(self), "content": self.content.value}


@dataclass
class Request:
    """One generation in the scheduler."""

    rid: str
    prompt: tuple[str, ...]
    plan: Completion
    truth: TruthRecord
    content: ContentClass = ContentClass.PLAIN
    internal: bool = False
    hang: bool = False
    emitted: int = 0
    cached_tokens: int = 0
    verify_steps: int = 0
    correct_drafts: int = 0
    """Draft tokens its verify steps accepted (the bonus not counted), SGLang's
    ``spec_num_correct_drafts``: as DFLASH's and EAGLE's non-overlap verify count them, up to
    the token that finished the request."""
    spec_tokens: int = 0
    aborted: bool = False
    finish: str | None = None
    queue: asyncio.Queue[Chunk] = field(default_factory=asyncio.Queue)

    @property
    def context(self) -> int:
        return len(self.prompt) + self.emitted

    @property
    def remaining(self) -> int:
        return len(self.plan.tokens) - self.emitted


@dataclass
class Counters:
    """Lifetime totals (metrics, /sim/truth) and the running average /server_info reports."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    spec_verify_calls: int = 0
    spec_accepted_tokens: int = 0
    avg_since_flush_tokens: int = 0
    avg_since_flush_steps: int = 0
    completed_requests: int = 0
    last_accept_len: float | None = None
    last_gen_throughput: float = 0.0


class PrefixCache:
    """Radix-cache stand-in: hashes of page-aligned prompt prefixes seen before."""

    def __init__(self) -> None:
        self._pages: dict[bytes, None] = {}

    def _hashes(self, tokens: Sequence[str]) -> list[bytes]:
        h = hashlib.blake2b(digest_size=16)
        out: list[bytes] = []
        for i in range(len(tokens) // CACHE_PAGE):
            for tok in tokens[i * CACHE_PAGE : (i + 1) * CACHE_PAGE]:
                h.update(tok.encode())
                h.update(b"\0")
            out.append(h.copy().digest())
        return out

    def match_and_insert(self, tokens: Sequence[str]) -> int:
        """Cached prefix length of ``tokens`` (at most len - 1); then remember them."""
        hashes = self._hashes(tokens)
        hit = 0
        for digest in hashes:
            if digest not in self._pages:
                break
            hit += 1
        for digest in hashes:
            self._pages[digest] = None
        while len(self._pages) > CACHE_MAX_PAGES:
            self._pages.pop(next(iter(self._pages)))
        return min(hit * CACHE_PAGE, max(0, len(tokens) - 1))

    def clear(self) -> None:
        self._pages.clear()


class Scheduler:
    """Continuous batching over the performance model; see the module docstring."""

    def __init__(
        self,
        *,
        shape: SpecShape,
        perf: PerfParams,
        time_scale: float,
        seed: int,
        max_running: int,
        max_total_tokens: int,
        decode_log_interval: int,
        radix_cache: bool,
        log: SglangLog,
        on_completed: Callable[[int], None] | None = None,
        speed_factor: float = 1.0,
        on_step: Callable[[Sequence[int], int], None] | None = None,
        batch_lines: bool = True,
        draft: DraftPolicy | None = None,
    ) -> None:
        self.shape = shape
        """The server's speculative settings as it reports them (speculative or not)."""
        self.draft: DraftPolicy = draft if draft is not None else FixedDraft(shape)
        """The shape of each step by the running batch's size."""
        self.perf = perf
        self.time_scale = time_scale
        self.speed_factor = speed_factor
        """This process's multiplier on every prefill and decode step (restart jitter)."""
        self.rng = random.Random(seed)
        self.max_running = max_running
        self.max_total_tokens = max_total_tokens
        self.decode_log_interval = max(1, decode_log_interval)
        self.radix_cache = radix_cache
        self.log = log
        self.on_completed = on_completed
        self.on_step = on_step
        """Told each drafting decode step's accepted draft tokens per client request (the
        bonus token not counted) and the step's draft length: how an engine that counts
        drafts (vLLM) keeps its statistics."""
        self.batch_lines = batch_lines
        """Whether SGLang's ``Prefill batch`` / ``Decode batch`` lines are written."""
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.stalled: list[Request] = []
        self.counters = Counters()
        self.cache = PrefixCache()
        self.truth: deque[TruthRecord] = deque(maxlen=TRUTH_RING)
        self._truth_index: dict[str, TruthRecord] = {}
        self._wake = asyncio.Event()
        self._decode_iter = 0
        self._start_interval(time.monotonic())
        self._step_end = self._interval_start
        """When the current (or last) step is due to end on the model's clock."""

    # --- intake -----------------------------------------------------------------------------

    def submit(
        self,
        prompt: Sequence[str],
        plan: Completion,
        *,
        content: ContentClass = ContentClass.PLAIN,
        internal: bool = False,
        hang: bool = False,
        arrival: float | None = None,
    ) -> Request:
        rid = uuid.uuid4().hex
        truth = TruthRecord(
            id=rid,
            arrival_monotonic=time.monotonic(),
            prompt_tokens=len(prompt),
            arrival_kernel_monotonic=arrival,
            content=content,
        )
        req = Request(
            rid, tuple(prompt), plan, truth, content=content, internal=internal, hang=hang
        )
        if not internal:
            if len(self.truth) == self.truth.maxlen:
                old = self.truth.popleft()
                self._truth_index.pop(old.id, None)
            self.truth.append(truth)
            self._truth_index[rid] = truth
        self.waiting.append(req)
        self._wake.set()
        return req

    def abort(self, req: Request) -> None:
        """The client went away: stop spending steps on it."""
        req.aborted = True
        if req in self.stalled:
            self.stalled.remove(req)
        if req.truth.finish_reason is None:
            req.truth.finish_reason = "abort"

    def lookup(self, ids: Sequence[str] | None) -> list[TruthRecord]:
        if ids is None:
            return list(self.truth)
        return [self._truth_index[i] for i in ids if i in self._truth_index]

    def flush_cache(self) -> None:
        self.cache.clear()
        self.counters.avg_since_flush_tokens = 0
        self.counters.avg_since_flush_steps = 0

    def avg_spec_accept_length(self) -> float | None:
        c = self.counters
        if not self.shape.speculative or c.avg_since_flush_steps == 0:
            return None
        return c.avg_since_flush_tokens / c.avg_since_flush_steps

    def kv_tokens(self) -> int:
        return sum(r.context for r in self.running)

    # --- the loop ---------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            self.running = [r for r in self.running if not r.aborted]
            while self.waiting and self.waiting[0].aborted:
                self.waiting.popleft()
            if not self.waiting and not self.running:
                self._wake.clear()
                await self._wake.wait()
                self._interval_start = time.monotonic()  # idle time is not decode time
                self._step_end = self._interval_start  # and owes the next step nothing
                continue
            if self.waiting and len(self.running) < self.max_running:
                await self._prefill()
            else:
                await self._decode_step()

    async def _sleep_ms(self, ms: float) -> None:
        """One prefill or decode step of ``ms`` model milliseconds, in this process's time.

        A busy scheduler's steps follow each other back to back on the model's clock: each
        ends ``ms`` after the previous one was due to end, not after the event loop woke the
        scheduler from the previous one. The loop's lateness (about a millisecond a wake-up,
        several on a loaded machine, plus the work between steps) is taken from the next step
        instead of piling up, as a GPU's steps do not slow down because the host's Python is
        late; so a point measures what the performance model says. A debt past
        ``MAX_LAG_S`` (the process was stopped, the machine stalled) is forgiven, not repaid
        by a burst of instant steps."""
        now = time.monotonic()
        start = self._step_end if now - self._step_end < MAX_LAG_S else now
        self._step_end = start + ms * self.speed_factor * self.time_scale / 1000.0
        await asyncio.sleep(max(0.0, self._step_end - now))

    async def _prefill(self) -> None:
        batch: list[Request] = []
        while self.waiting and len(self.running) + len(batch) < self.max_running:
            req = self.waiting.popleft()
            if not req.aborted:
                batch.append(req)
        if not batch:
            return
        cached = 0
        new = 0
        for req in batch:
            req.cached_tokens = self.cache.match_and_insert(req.prompt) if self.radix_cache else 0
            cached += req.cached_tokens
            new += len(req.prompt) - req.cached_tokens
        started = time.monotonic()
        await self._sleep_ms(prefill_time_ms(new, self.perf))
        elapsed = max(1e-9, time.monotonic() - started)
        if self.batch_lines:
            self._log_prefill(batch, new, cached, elapsed)
        for req in batch:
            if req.aborted:
                continue
            if not req.internal:
                self.counters.prompt_tokens += len(req.prompt)
            self._emit(req, 1, verify_step=False)
            if req.finish is None:
                if req.hang:
                    self.stalled.append(req)
                else:
                    self.running.append(req)

    def _log_prefill(self, batch: list[Request], new: int, cached: int, elapsed: float) -> None:
        self.log.rank(
            prefill_line(
                new_seq=len(batch),
                new_token=new,
                cached_token=cached,
                token_usage=self.kv_tokens() / self.max_total_tokens,
                running_req=len(self.running),
                queue_req=len(self.waiting),
                input_throughput=new / elapsed,
            )
        )

    async def _decode_step(self) -> None:
        batch = list(self.running)
        step = self.draft.shape(len(batch))
        await self._sleep_ms(step_time_ms(step, [r.context for r in batch], self.perf))
        accepted: list[int] = []
        correct: list[int] = []
        for req in batch:
            if req.aborted or req.finish is not None:
                continue
            gained = sample_accepted(self.rng, step, req.context, self.perf, req.content)
            n = min(gained, req.remaining)
            req.verify_steps += 1
            req.truth.verify_steps = req.verify_steps
            req.correct_drafts += n - 1
            correct.append(n - 1)
            self._interval_steps += 1
            self._interval_spec_tokens += n
            self._interval_correct += n - 1
            self._interval_proposed += step.verify_width - 1
            self.counters.avg_since_flush_steps += 1
            self.counters.avg_since_flush_tokens += n
            if not req.internal:
                self.counters.spec_verify_calls += 1
                self.counters.spec_accepted_tokens += n
                accepted.append(n - 1)
            self._emit(req, n, verify_step=True)
        self.running = [r for r in self.running if r.finish is None and not r.aborted]
        if self.shape.speculative:
            said = self.draft.observe(len(batch), correct)
            if said is not None:
                self.log.tp0(said)
        if self.on_step is not None and step.speculative:
            self.on_step(accepted, step.verify_width - 1)
        self._decode_iter += 1
        if self._decode_iter % self.decode_log_interval == 0 and self.batch_lines:
            self._log_decode()

    def _emit(self, req: Request, n: int, *, verify_step: bool) -> None:
        tokens = req.plan.tokens[req.emitted : req.emitted + n]
        req.emitted += len(tokens)
        self._interval_tokens += len(tokens)
        if not req.internal:
            self.counters.generation_tokens += len(tokens)
        finish = req.plan.finish if req.remaining <= 0 else None
        req.finish = finish
        req.truth.completion_tokens = req.emitted
        if finish is not None:
            req.truth.finish_reason = finish
        req.queue.put_nowait(Chunk(tuple(tokens), finish, verify_step))
        if finish is not None and not req.internal:
            self.counters.completed_requests += 1
            if self.on_completed is not None:
                self.on_completed(self.counters.completed_requests)

    def _log_decode(self) -> None:
        now = time.monotonic()
        elapsed = max(1e-9, now - self._interval_start)
        throughput = self._interval_tokens / elapsed
        accept_len: float | None = None
        accept_rate: float | None = None
        if self.shape.speculative and self._interval_steps:
            accept_len = self._interval_spec_tokens / self._interval_steps
            accept_rate = self._interval_correct / max(1, self._interval_proposed)
            self.counters.last_accept_len = accept_len
        self.counters.last_gen_throughput = throughput
        self.log.rank(
            decode_line(
                running_req=len(self.running),
                tokens=self.kv_tokens(),
                token_usage=self.kv_tokens() / self.max_total_tokens,
                accept_len=accept_len,
                accept_rate=accept_rate,
                cuda_graph=True,
                gen_throughput=throughput,
                queue_req=len(self.waiting),
            )
        )
        self._start_interval(now)

    def _start_interval(self, now: float) -> None:
        """Start the decode-log interval the next decode line sums (at ``now``)."""
        self._interval_start = now
        self._interval_tokens = 0
        self._interval_spec_tokens = 0
        self._interval_steps = 0
        self._interval_correct = 0
        self._interval_proposed = 0
