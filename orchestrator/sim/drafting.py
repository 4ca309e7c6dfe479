"""What a server drafts at each decode step: one shape, or a shape chosen by the running batch.

A static server drafts the same way every step (:class:`FixedDraft`). A server given a
speculative schedule looks its draft length up by the size of the batch it is about to run:
vLLM 0.33 through ``num_speculative_tokens_per_batch_size``'s dense lookup, SGLang 0.5.23
through ``--speculative-adaptive``'s slots (:mod:`orchestrator.sim.vllm_schedule`,
:mod:`orchestrator.sim.sglang_adaptive`). Both resolve, once the server's rules are applied, to
lower bounds of batch size with the shape each one runs (:class:`BatchDraft`); an adaptive
slot with several candidates also moves with the acceptance it sees (:class:`AdaptiveDraft`).

The frozen descriptions live in the resolved server args; :meth:`policy` gives the running
scheduler (or a truth replay) its own state. Pure: no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, Self

from orchestrator.sim.perfmodel import SpecShape


class DraftPolicy(Protocol):
    """The shape a scheduler runs for a batch, told what each step accepted."""

    def shape(self, batch: int) -> SpecShape:
        """The shape of the next decode step of a running batch of ``batch`` requests."""
        ...

    def observe(self, batch: int, correct_drafts: Sequence[int]) -> str | None:
        """One verify step of ``batch`` requests accepted these drafts each (bonus not
        counted); what the server logs about it, if anything."""
        ...


class _Unmoved:
    """A schedule that acceptance never moves: its description is its own running policy, and
    what each step accepted changes nothing, so nothing is logged."""

    def observe(self, batch: int, correct_drafts: Sequence[int]) -> str | None:
        return None

    def policy(self) -> Self:
        return self


@dataclass(frozen=True)
class FixedDraft(_Unmoved):
    """The same shape at every batch size: a server without a schedule."""

    fixed: SpecShape

    def shape(self, batch: int) -> SpecShape:
        return self.fixed

    @property
    def shapes(self) -> tuple[SpecShape, ...]:
        return (self.fixed,)


@dataclass(frozen=True)
class BatchDraft(_Unmoved):
    """A shape per range of batch sizes: ``starts[i]`` (rising, the first 1) up to the next
    start runs ``steps[i]``. What a vLLM schedule's dense lookup and an adaptive config of
    pinned slots both come to."""

    starts: tuple[int, ...]
    steps: tuple[SpecShape, ...]

    def __post_init__(self) -> None:
        if not self.starts or self.starts[0] != 1 or len(self.starts) != len(self.steps):
            raise ValueError("a batch schedule starts at batch size 1, one shape per start")
        if any(b <= a for a, b in zip(self.starts, self.starts[1:], strict=False)):
            raise ValueError("a batch schedule's starts rise")

    def shape(self, batch: int) -> SpecShape:
        return self.steps[max(0, bisect.bisect_right(self.starts, batch) - 1)]

    @property
    def shapes(self) -> tuple[SpecShape, ...]:
        return self.steps

    @classmethod
    def from_dense(cls, dense: Sequence[SpecShape]) -> BatchDraft:
        """From a shape per batch size, index 1 up (index 0 unused, as vLLM's lookup has it):
        adjacent equal shapes merged; the last one runs beyond the table."""
        starts: list[int] = []
        shapes: list[SpecShape] = []
        for batch in range(1, len(dense)):
            if not shapes or dense[batch] != shapes[-1]:
                starts.append(batch)
                shapes.append(dense[batch])
        return cls(tuple(starts), tuple(shapes))


@dataclass(frozen=True)
class SlotRule:
    """One adaptive slot: its candidate steps and how it moves among them
    (``AdaptiveStepSlot``'s settings, with SGLang's defaults)."""

    candidates: tuple[int, ...]
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0
    ceiling_coeff: float = 0.0

    @property
    def pinned(self) -> bool:
        return len(self.candidates) == 1


@dataclass(frozen=True)
class AdaptiveDraft:
    """SGLang's adaptive steps: the slot of the largest key not above the batch, each slot's
    steps moved by the EMA of the drafts its batches accepted. ``shapes`` has the shape of
    every candidate step count (0: no drafting)."""

    keys: tuple[int, ...]
    slots: tuple[SlotRule, ...]
    initial_steps: int
    shapes: Mapping[int, SpecShape]

    def policy(self) -> AdaptiveSteps:
        return AdaptiveSteps(self)

    def pinned(self) -> BatchDraft:
        """The same schedule as a :class:`BatchDraft` when every slot has one candidate (the
        first key is taken as 1: a batch below it goes to it, as SGLang routes it)."""
        if not all(slot.pinned for slot in self.slots):
            raise ValueError("an adaptive slot with several candidates moves with acceptance")
        starts = (1, *self.keys[1:])
        return BatchDraft(starts, tuple(self.shapes[slot.candidates[0]] for slot in self.slots))


@dataclass
class _SlotState:
    rule: SlotRule
    steps: int
    ema: float
    batches: int = 0


@dataclass
class AdaptiveSteps:
    """The running state of an :class:`AdaptiveDraft` (``AdaptiveStepSlot.update`` and
    ``_recompute_params``, SGLang 0.5.23): each slot starts at the server's steps when they
    are one of its candidates, else at its middle candidate, with the EMA at steps - 1."""

    plan: AdaptiveDraft
    states: list[_SlotState] = field(init=False)
    changes: list[tuple[int, int, int]] = field(init=False, default_factory=list)
    """(slot key, old steps, new steps) of every switch, oldest first."""

    def __post_init__(self) -> None:
        self.states = []
        for rule in self.plan.slots:
            steps = self.plan.initial_steps
            if steps not in rule.candidates:
                steps = rule.candidates[len(rule.candidates) // 2]
            self.states.append(_SlotState(rule, steps, float(steps - 1)))

    def _slot(self, batch: int) -> int:
        return max(0, bisect.bisect_right(self.plan.keys, batch) - 1)

    def shape(self, batch: int) -> SpecShape:
        return self.plan.shapes[self.states[self._slot(batch)].steps]

    def observe(self, batch: int, correct_drafts: Sequence[int]) -> str | None:
        """``AdaptiveSpeculativeParams.on_verify_complete``; a switch logs SGLang's line."""
        if not correct_drafts:
            return None
        index = self._slot(batch)
        state = self.states[index]
        rule = state.rule
        if state.steps > 0:
            average = sum(correct_drafts) / len(correct_drafts)
            state.ema = (1 - rule.ema_alpha) * state.ema + rule.ema_alpha * average
        state.batches += 1
        if state.batches <= rule.warmup_batches:
            return None
        if (state.batches - rule.warmup_batches) % rule.update_interval != 0:
            return None
        target = next_steps(state.steps, state.ema, rule)
        if target == state.steps:
            return None
        self.changes.append((self.plan.keys[index], state.steps, target))
        if state.steps == 0 and state.ema < 0:
            state.ema = float(target - 1)
        old, state.steps = state.steps, target
        return (
            f"Adaptive spec params updated: steps {old} -> {target} "
            f"(ema_accept_len={state.ema:.2f})"
        )

    def init_line(self) -> str:
        """What SGLang logs when the adaptive params are built (its first slot's state)."""
        first = self.states[0]
        return (
            f"AdaptiveSpeculativeParams initialized: steps={first.steps}, "
            f"candidate_steps={list(first.rule.candidates)}"
        )


def next_steps(current: int, ema: float, rule: SlotRule) -> int:
    """``AdaptiveStepSlot._recompute_params``: from zero steps probe the next candidate; else
    step down while the EMA is at or below the threshold under the current candidate, or, if
    it did not move down, up while above the one at it; the ceiling only caps a move down."""
    candidates = rule.candidates
    index = candidates.index(current)
    if current == 0:
        return candidates[min(index + 1, len(candidates) - 1)]
    start = index
    while index > 0:
        below = candidates[index - 1]
        threshold = (0.5 if below == 0 else below - 0.5) + rule.down_hysteresis
        if ema > threshold:
            break
        index -= 1
    if index == start:
        while index < len(candidates) - 1 and ema > candidates[index] - 0.5 + rule.up_hysteresis:
            index += 1
    target = candidates[index]
    if rule.ceiling_coeff > 0:
        ceiling = max(1, math.ceil(ema * rule.ceiling_coeff))
        if ceiling < target <= current:
            while index > 0 and candidates[index] > ceiling:
                index -= 1
            target = candidates[index]
    return target


DraftSchedule = FixedDraft | BatchDraft | AdaptiveDraft
"""What a resolved server drafts by: the description its scheduler builds a policy from."""


__all__ = [
    "AdaptiveDraft",
    "AdaptiveSteps",
    "BatchDraft",
    "DraftPolicy",
    "DraftSchedule",
    "FixedDraft",
    "SlotRule",
    "next_steps",
]
