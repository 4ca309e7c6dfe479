"""Sample prompts at exact context lengths, as the server counts them (a ``PromptSource``).

A cell of length T sends the sample's requests, each made exactly T tokens long:

- a request longer than T keeps its system prompt and its newest turns, the oldest kept
  turn cut at a word (method ``trimmed``); a request that is one long user turn keeps its
  start (the built-in code contexts put the question first for this reason);
- a request shorter than T is padded at message boundaries with earlier exchanges taken
  from OTHER lines of the sample (the next lines, in order, wrapping around; a line's model
  reply counts as its last answer), placed before the request's own turns, one turn of the
  oldest exchange cut at a word (method ``padded-turns``; see ``_Line`` for the order and
  why same-role neighbours are joined). Padding is never filler words.

Both are one axis: the number of *units* (a word or a punctuation mark with its leading
space) taken from the request's turns, newest first, then from the padding turns. Every
prompt starts with a per-request nonce (five words, the synthetic prompts' nonce) at the
start of its first message, so the radix cache serves nothing beyond the chat template's
fixed prefix. (/generate writes a conversation as ``Role: content`` turns, see
``Prompt.plain_text``: there the nonce follows the first ``Role:``.)

Exactness is measured, never assumed: every prepared prompt is probed (``max_tokens=1``,
reading ``prompt_tokens``) with a nonce of the same length, and searched until exact. So that
a point's many prompts do not each need many probes, the probes fit one linear model of the
server's count, ``a + b * messages + c * units`` (template constant, per-message template
cost, tokens per unit), shared by all prompts of the source: each prompt's first guess comes
from the model, and after the first few prompts that guess is usually exact (always, on the
simulated server, whose tokenizer counts exactly these units). A miss is corrected by a
secant search over units (``next_guess``, as the synthetic calibration). When no cut gives T
(one more unit adds two tokens, or a new turn's template cost jumps over T), the prompt
closest to T is kept and the calibration's ``method`` says ``closest: <reason>``.

The calibration is per (context, workload); it prepares up to ``max_distinct`` distinct
prompts (sample lines, evenly spaced when the sample holds more). A point that asks for more
requests than that gets the same prompts again, each behind a fresh nonce and marked
``Prompt.reused``; ``Prompt.origin`` is the line a prompt came from.

Output lengths: with ``workload_output_lengths`` a prompt's ``max_tokens`` is its line's
``output_tokens``, or, for a line without one whose model reply was cut off (ShareGPT), the
reply's length in the server's tokens, estimated from its units by the fitted tokens-per-unit
(the reply is the real answer to exactly the turn sent, so its length is the natural output
length; ``bench_serving`` uses it the same way). Lines with neither use the point's
``max_tokens``.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import itertools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from orchestrator.bench.prompts import (
    NONCE_WORDS,
    Calibration,
    CalibrationError,
    PromptSender,
    calibration_key,
    next_guess,
    nonce_text,
)
from orchestrator.bench.workloads.sample import SampleRequest, WorkloadSample
from orchestrator.engines.base import ChatMessage, Prompt
from orchestrator.log import get_logger

_UNIT = re.compile(r"\s*(?:\w+|[^\w\s])|\s+")
"""A word or one punctuation mark with its leading whitespace (trailing whitespace at the end
of a text is a unit of its own): where a turn may be cut, and what the count model counts."""

_PRIOR = np.array([0.0, 4.0, 1.0])
"""The count model before any probe: no constant, 4 template tokens a message, 1 token a
unit; pulled towards by a small ridge term so that a few probes of one shape still fit."""
_RIDGE = 1e-3


def _log() -> Any:
    """The module logger, bound at call time (after the entry point configured logging)."""
    return get_logger(component="bench.workloads")


def units(text: str) -> int:
    """How many units ``text`` has."""
    return sum(1 for _ in _UNIT.finditer(text))


def cut(text: str, keep: int) -> str:
    """The first ``keep`` units of ``text`` (its original spacing and line breaks kept)."""
    if keep <= 0:
        return ""
    end = 0
    for end_match in itertools.islice(_UNIT.finditer(text), keep):
        end = end_match.end()
    return text[:end]


@dataclass
class _Turn:
    """One turn that may be included (whole or cut) in a prompt; its unit count cached.
    ``when`` orders the included turns in time (padding before the request's own turns)."""

    role: str
    content: str
    when: tuple[int, int]
    _units: int | None = None

    @property
    def size(self) -> int:
        if self._units is None:
            self._units = _units_of(self.content)
        return self._units


@functools.lru_cache(maxsize=4096)
def _units_of(text: str) -> int:
    """``units`` of a sample turn, counted once per process: every prompt of every context
    walks the same turns (a string's hash is cached, so a hit costs nothing)."""
    return units(text)


@dataclass
class _Layout:
    """A line's prompt at one point of the units axis: its messages (no nonce yet)."""

    messages: tuple[ChatMessage, ...]
    own_units: int
    taken: int

    @property
    def method(self) -> str:
        if self.taken == self.own_units:
            return "whole"
        return "padded-turns" if self.taken > self.own_units else "trimmed"


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One calibrated prompt: messages without the nonce, the line, the server's count."""

    messages: tuple[ChatMessage, ...]
    line: int
    measured: int
    max_tokens: int | None
    method: str
    reason: str | None


@dataclass
class _CountModel:
    """The server's prompt count as ``a + b * messages + c * units``, fitted to every probe."""

    rows: list[tuple[float, float, float]] = field(default_factory=list)
    counts: list[float] = field(default_factory=list)
    theta: npt.NDArray[np.float64] = field(default_factory=lambda: _PRIOR.copy())

    def add(self, messages: int, unit_count: int, measured: int) -> None:
        self.rows.append((1.0, float(messages), float(unit_count)))
        self.counts.append(float(measured))
        x = np.array(self.rows)
        y = np.array(self.counts)
        ridge = np.sqrt(_RIDGE) * np.eye(3)
        a = np.vstack([x, ridge])
        b = np.concatenate([y, ridge @ _PRIOR])
        self.theta = np.linalg.lstsq(a, b, rcond=None)[0]

    def estimate(self, messages: int, unit_count: int) -> float:
        return float(self.theta @ np.array([1.0, messages, unit_count]))

    @property
    def tokens_per_unit(self) -> float:
        return max(float(self.theta[2]), 0.1)


class _Line:
    """The units axis of one sample line for one target, in the order turns are taken: the
    line's own turns newest first (so a long request loses its oldest history first), then
    exchanges (user turns and the model's answer) of the other lines, newest exchange first,
    each exchange taken user turn first. So the prompt always opens with a user turn, and
    the turn that is cut is the oldest one, or the answer of the oldest exchange."""

    def __init__(self, request: SampleRequest, others: list[SampleRequest], cap: int) -> None:
        self.request = request
        self.system = tuple(m for m in request.messages if m.role == "system")
        own = [m for m in request.messages if m.role != "system"]
        self.turns = [_Turn(m.role, m.content, (0, i)) for i, m in reversed(list(enumerate(own)))]
        self.own_units = sum(t.size for t in self.turns)
        total = self.own_units
        for turn in _padding(others):
            if total >= cap:
                break
            self.turns.append(turn)
            total += turn.size
        self.max_units = total
        self.system_units = sum(units(m.content) for m in self.system)

    def _taken(self, taken: int) -> list[tuple[_Turn, int]]:
        """The turns ``taken`` units include, each with the units it keeps."""
        included: list[tuple[_Turn, int]] = []
        left = taken
        for turn in self.turns:
            if left <= 0:
                break
            included.append((turn, min(turn.size, left)))
            left -= turn.size
        return included

    def layout(self, taken: int, shave: int = 0) -> _Layout:
        """The prompt of ``taken`` units; ``shave`` units off the end of the whole turn taken
        just before the cut one (how a target inside a new turn's template cost is met).
        Adjacent turns of one role (a line whose last turn is the user's, padding the next
        user turn) are joined into one message, as chat templates want roles to alternate."""
        included = self._taken(taken)
        if shave and len(included) >= 2:
            whole, kept = included[-2]
            included[-2] = (whole, kept - shave)
        in_time = sorted(included, key=lambda pair: pair[0].when)
        messages: list[ChatMessage] = []
        for turn, kept in in_time:
            text = turn.content if kept >= turn.size else cut(turn.content, kept)
            if messages and messages[-1].role == turn.role:
                messages[-1] = ChatMessage(turn.role, f"{messages[-1].content}\n\n{text}")
            else:
                messages.append(ChatMessage(turn.role, text))
        return _Layout((*self.system, *messages), self.own_units, taken)

    def opened(self, taken: int) -> tuple[int, int] | None:
        """When unit ``taken`` is the first of a turn taken after a whole one: that turn's
        index and size, else None."""
        before = 0
        for index, turn in enumerate(self.turns):
            if before + 1 == taken:
                return (index, turn.size) if index > 0 else None
            before += turn.size
            if before >= taken:
                return None
        return None

    def features(self, taken: int, shave: int = 0) -> tuple[int, int]:
        """(messages, units) of the prompt at ``taken``, the nonce's units included."""
        roles = [turn.role for turn, _ in sorted(self._taken(taken), key=lambda p: p[0].when)]
        runs = sum(1 for i, role in enumerate(roles) if i == 0 or roles[i - 1] != role)
        unit_count = self.system_units + min(taken, self.max_units) + NONCE_WORDS - shave
        return len(self.system) + runs, unit_count


def _padding(others: list[SampleRequest]) -> Iterator[_Turn]:
    """Exchanges of the other lines, line after line (wrapping around), each line's newest
    exchange first, each exchange in its own order (user turns, then the answer)."""
    if not others:
        return
    group = 0
    for request in itertools.cycle(others):
        turns = [m for m in request.messages if m.role != "system"]
        if request.reply is not None:
            turns.append(ChatMessage("assistant", request.reply))
        exchanges: list[list[ChatMessage]] = []
        for message in turns:
            if not exchanges or (message.role == "user" and exchanges[-1][-1].role != "user"):
                exchanges.append([])
            exchanges[-1].append(message)
        for exchange in reversed(exchanges):
            group += 1
            for position, message in enumerate(exchange):
                yield _Turn(message.role, message.content, (-group, position))


def with_nonce(messages: tuple[ChatMessage, ...], nonce: int) -> tuple[ChatMessage, ...]:
    """``messages`` with the nonce at the start of the first one."""
    first, rest = messages[0], messages[1:]
    return (ChatMessage(first.role, f"{nonce_text(nonce)}\n\n{first.content}"), *rest)


class WorkloadPrompts:
    """Prompts from a workload sample at exact lengths: a ``PromptSource`` like
    ``PromptFactory``, for ``file:`` and ``builtin:`` workloads (see the module doc)."""

    def __init__(
        self,
        sender: PromptSender,
        sample: WorkloadSample,
        *,
        nonce_source: Callable[[], int] | None = None,
        max_distinct: int = 256,
        max_probes: int = 8,
        probe_concurrency: int = 4,
        workload_output_lengths: bool = False,
    ) -> None:
        if max_distinct < 1:
            raise ValueError(f"max_distinct must be >= 1, got {max_distinct}")
        self.sender = sender
        self.sample = sample
        self.max_probes = max_probes
        self.probe_concurrency = probe_concurrency
        self.workload_output_lengths = workload_output_lengths
        self._nonce_base = (nonce_source or (lambda: int.from_bytes(os.urandom(8), "big")))()
        self._nonces = 0
        self._model = _CountModel()
        self._memory: dict[str, Calibration] = {}
        self._prepared: dict[str, list[_Prepared]] = {}
        self._issued: dict[str, int] = {}
        self._chosen = _spread(len(sample.requests), max_distinct)

    @property
    def workload(self) -> str:
        return self.sample.label

    def rebound(self, sender: PromptSender) -> WorkloadPrompts:
        """This source for another client of the same server, model and API (the next trial
        on a host): the calibrations and prepared prompts are shared, and so is what either
        learns later; nonces and issue counts start afresh, so each trial's reuse is its own.

        A calibration stays valid across restarts while the served model and its chat
        template do not change; every point still reads back the server's own prompt counts
        (``prompt_tokens_tolerance``), so a stale one would show, never pass unseen."""
        other = copy.copy(self)
        other.sender = sender
        other._nonce_base = int.from_bytes(os.urandom(8), "big")
        other._nonces = 0
        other._issued = {}
        return other

    def _key(self, target_tokens: int) -> str:
        return calibration_key(
            self.sender.base_url, self.sender.model, self.sender.api, target_tokens, self.workload
        )

    def prompt(self, calibration: Calibration) -> Prompt:
        """The next prepared prompt of this calibration behind a fresh nonce; after every
        prepared prompt was issued once, they come round again marked ``reused``."""
        prepared = self._prepared.get(calibration.key)
        if prepared is None:
            raise KeyError(f"calibration {calibration.key} was not made by this source")
        issued = self._issued.get(calibration.key, 0)
        self._issued[calibration.key] = issued + 1
        chosen = prepared[issued % len(prepared)]
        return Prompt(
            messages=with_nonce(chosen.messages, self._next_nonce()),
            max_tokens=chosen.max_tokens,
            origin=chosen.line,
            reused=issued >= len(prepared),
        )

    def distinct(self, calibration: Calibration) -> int:
        """How many distinct prompts the calibration prepared."""
        return len(self._prepared.get(calibration.key, ()))

    async def calibrate(self, target_tokens: int) -> Calibration:
        """Prepare (once per context) this workload's prompts of ``target_tokens``."""
        if target_tokens < 1:
            raise ValueError(f"target_tokens must be >= 1, got {target_tokens}")
        key = self._key(target_tokens)
        cached = self._memory.get(key)
        if cached is not None:
            return cached
        probes_before = len(self._model.counts)
        requests = self.sample.requests
        first, *rest = self._chosen
        prepared = [await self._prepare(requests, first, target_tokens)]
        gate = asyncio.Semaphore(self.probe_concurrency)

        async def one(index: int) -> _Prepared:
            async with gate:
                return await self._prepare(requests, index, target_tokens)

        tasks = [asyncio.ensure_future(one(i)) for i in rest]
        try:
            prepared += await asyncio.gather(*tasks)
        finally:  # a failed probe fails the calibration: no other probe left running
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        calibration = self._summarise(target_tokens, prepared,
                                      len(self._model.counts) - probes_before)
        self._memory[key] = calibration
        self._prepared[key] = prepared
        logger = _log()
        log = logger.info if calibration.tolerance == 0 else logger.warning
        log("prompt.calibrated", target=target_tokens, workload=self.workload,
            prompts=len(prepared), method=calibration.method,
            measured=calibration.measured_tokens, requests=calibration.requests)
        return calibration

    def _summarise(self, target: int, prepared: list[_Prepared], probes: int) -> Calibration:
        worst = max(prepared, key=lambda p: abs(p.measured - target))
        inexact = [p for p in prepared if p.measured != target]
        if inexact:
            method = f"closest: {worst.reason} ({len(inexact)} of {len(prepared)} prompts)"
        else:
            method = "+".join(sorted({p.method for p in prepared}))
        return Calibration(
            base_url=self.sender.base_url.rstrip("/"),
            model=self.sender.model,
            api=self.sender.api,
            target_tokens=target,
            filler_words=0,
            measured_tokens=worst.measured,
            requests=probes,
            workload=self.workload,
            method=method,
        )

    async def _prepare(
        self, requests: tuple[SampleRequest, ...], index: int, target: int
    ) -> _Prepared:
        request = requests[index]
        others = [*requests[index + 1:], *requests[:index]]
        line = _Line(request, others, cap=2 * target + 64)
        probes: dict[int, int] = {}
        guess: int | None = self._first_guess(line, target)
        while guess is not None and len(probes) < self.max_probes:
            probes[guess] = await self._probe(line, guess)
            if probes[guess] == target:
                break
            guess = next_guess(probes, target, line.max_units)
            if guess is not None and guess < 1:
                guess = None
        best = min(probes, key=lambda u: (abs(probes[u] - target), u))
        layout, measured = line.layout(best), probes[best]
        reason = None if measured == target else _why(probes, best, target, line,
                                                      self.max_probes)
        if measured != target:
            shaved = await self._across_boundary(line, probes, target)
            if shaved is not None:
                layout, measured, reason = shaved[0], shaved[1], None
        return _Prepared(
            messages=layout.messages,
            line=request.line,
            measured=measured,
            max_tokens=self._output_length(request),
            method=layout.method,
            reason=reason,
        )

    async def _across_boundary(
        self, line: _Line, probes: dict[int, int], target: int
    ) -> tuple[_Layout, int] | None:
        """Meet a target that falls in the jump a new turn's template cost makes: open the
        new turn with a few units and shave the end of the whole turn after it (in time)."""
        above = [u for u, t in probes.items() if t > target]
        below = [u for u, t in probes.items() if t < target]
        if not above or not below or min(above) - max(below) != 1:
            return None
        opened = line.opened(min(above))
        if opened is None:
            return None
        index, size = opened
        whole = line.turns[index - 1].size
        # A few units read better than one; one leaves the most room to shave.
        for opening in dict.fromkeys((min(size, 8), 1)):
            taken = max(below) + opening
            kept: dict[int, int] = {}  # units kept of the whole turn -> measured
            estimate = self._model.estimate(*line.features(taken))
            guess: int | None = whole - round((estimate - target) / self._model.tokens_per_unit)
            while guess is not None and 1 <= guess < whole and len(kept) < self.max_probes:
                kept[guess] = await self._probe(line, taken, shave=whole - guess)
                if kept[guess] == target:
                    return line.layout(taken, shave=whole - guess), target
                guess = next_guess(kept, target, whole - 1)
        return None

    def _first_guess(self, line: _Line, target: int) -> int:
        """The units the count model says give ``target`` (a binary search on the axis)."""
        lo, hi = 1, max(line.max_units, 1)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._model.estimate(*line.features(mid)) < target - 0.5:
                lo = mid + 1
            else:
                hi = mid
        return lo

    async def _probe(self, line: _Line, taken: int, shave: int = 0) -> int:
        layout = line.layout(taken, shave)
        prompt = Prompt(messages=with_nonce(layout.messages, self._next_nonce()))
        record = await self.sender.send(
            prompt, max_tokens=1, label=f"calibrate-{line.request.line}-{taken}",
            phase="calibration",
        )
        if not record.ok or record.prompt_tokens is None:
            raise CalibrationError(
                f"calibration probe (line {line.request.line}, {taken} units) failed: "
                f"{record.error} {record.error_detail}",
                record,
            )
        measured = int(record.prompt_tokens)
        self._model.add(*line.features(taken, shave), measured)
        return measured

    def _output_length(self, request: SampleRequest) -> int | None:
        if not self.workload_output_lengths:
            return None
        if request.output_tokens is not None:
            return request.output_tokens
        if request.reply is not None:
            return max(1, round(units(request.reply) * self._model.tokens_per_unit))
        return None

    def _next_nonce(self) -> int:
        self._nonces += 1
        return self._nonce_base + self._nonces


def _why(probes: dict[int, int], best: int, target: int, line: _Line, max_probes: int) -> str:
    """Why no prompt of exactly ``target`` tokens was found for a line."""
    if best >= line.max_units and probes[best] < target:
        if line.max_units == line.own_units:
            return f"the sample has no other line to pad with (at most {probes[best]} tokens)"
        return f"padding gives at most {probes[best]} tokens"
    if best == 1 and probes[best] > target:
        return f"the shortest prompt (nonce and template) is already {probes[best]} tokens"
    below = [u for u, t in probes.items() if t < target]
    above = [u for u, t in probes.items() if t > target]
    if below and above and min(above) - max(below) == 1:
        return (f"no cut at a word gives {target} tokens ({probes[max(below)]} or "
                f"{probes[min(above)]})")
    return f"not exact within {max_probes} probes"


def _spread(count: int, most: int) -> list[int]:
    """``min(count, most)`` indices spread evenly over ``range(count)``, in order."""
    if count <= most:
        return list(range(count))
    return sorted({i * count // most for i in range(most)})
