"""A speculative schedule in an engine's own form: which settings at which running batch size.

The answers propose a schedule from the per-load answers (:mod:`orchestrator.answers.schedule`);
an engine that takes one natively says how (vLLM 0.33: ``num_speculative_tokens_per_batch_size``
inside ``--speculative-config``; SGLang 0.5.23: ``--speculative-adaptive`` with a JSON file
keyed by batch size), or why it cannot for these configs. Pure: no host, no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from orchestrator.host.dropin import KnobTarget
from orchestrator.types import JsonObject, KnobValue, LaunchOverlay


@dataclass(frozen=True, slots=True)
class ScheduleBand:
    """One measured load's config: from running batch size ``start`` (inclusive) up to the
    next band's start (the last band has no end)."""

    start: int
    config: Mapping[str, KnobValue]


@dataclass(frozen=True, slots=True)
class NativeSchedule:
    """What the engine takes for a schedule: the fixed config it starts from (the settings
    that do not vary by batch size, the varying one at its largest) and what the launch adds
    beyond those knobs (:class:`~orchestrator.types.LaunchOverlay`: keys of a JSON-valued
    flag, flags, files, and the line with which the engine says it ignored them)."""

    config: Mapping[str, KnobValue]
    overlay: LaunchOverlay

    def to_json(self) -> JsonObject:
        return {"config": dict(self.config), "overlay": self.overlay.to_json()}


@dataclass(frozen=True, slots=True)
class NoNativeSchedule:
    """Why the engine cannot take these bands as one schedule (the answer gives the per-band
    configs as they are)."""

    reason: str


@runtime_checkable
class ScheduleForm(Protocol):
    """An engine that takes a speculative schedule natively."""

    def native_schedule(
        self, bands: Sequence[ScheduleBand], knobs: Mapping[str, KnobTarget]
    ) -> NativeSchedule | NoNativeSchedule:
        """The engine's form of ``bands`` (sorted by start, the first at 1), or why not."""
        ...


def varying_knobs(bands: Sequence[ScheduleBand]) -> set[str]:
    """The knobs whose value differs between bands (a knob a band leaves out is None)."""
    names = {name for band in bands for name in band.config}
    return {name for name in names if len({band.config.get(name) for band in bands}) > 1}


def check_bands(bands: Sequence[ScheduleBand]) -> None:
    """``bands`` sorted by a strictly rising start, the first at batch size 1."""
    if not bands or bands[0].start != 1:
        raise ValueError("a schedule's first band starts at batch size 1")
    for before, after in itertools.pairwise(bands):
        if after.start <= before.start:
            raise ValueError("a schedule's bands start at rising batch sizes")


PROBE_KEY = "schedule-probe"
"""The preflight's key for a sweep's representative schedule (:func:`probe_schedule`)."""


def probe_schedule(
    engine: object, configs: Sequence[Mapping[str, KnobValue]], knobs: Mapping[str, KnobTarget]
) -> NativeSchedule | None:
    """A schedule of two of ``configs`` (the first that the engine takes as one, from batch 1
    and from batch 8) in ``engine``'s own form: what the preflight asks the host's engine to
    parse before a sweep that will measure schedules runs one; None when no two configs make
    one (or the engine takes no schedule)."""
    if not isinstance(engine, ScheduleForm):
        return None
    speculative = [c for c in configs if any(v is not None for v in c.values())]
    for first in speculative:
        for second in speculative:
            if first == second:
                continue
            form = engine.native_schedule(
                [ScheduleBand(1, first), ScheduleBand(8, second)], knobs
            )
            if isinstance(form, NativeSchedule):
                return form
    return None


__all__ = [
    "PROBE_KEY",
    "NativeSchedule",
    "NoNativeSchedule",
    "ScheduleBand",
    "ScheduleForm",
    "check_bands",
    "probe_schedule",
    "varying_knobs",
]
