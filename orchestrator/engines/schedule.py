"""A speculative schedule in an engine's own form: which settings at which running batch size.

The answers propose a schedule from the per-load answers (:mod:`orchestrator.answers.schedule`);
an engine that takes one natively says how (vLLM 0.33: ``num_speculative_tokens_per_batch_size``
inside ``--speculative-config``; SGLang 0.5.23: ``--speculative-adaptive`` with a JSON file
keyed by batch size), or why it cannot for these configs. Pure: no host, no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from orchestrator.types import JsonObject, KnobValue


@dataclass(frozen=True, slots=True)
class KnobTarget:
    """Where a knob lands on the command line: its flag and, for a JSON-valued flag, its key
    (the sweep file's ``server.knobs`` entry, as the engine reads it)."""

    flag: str | None
    json_key: str | None = None


@dataclass(frozen=True, slots=True)
class ScheduleBand:
    """One measured load's config: from running batch size ``start`` (inclusive) up to the
    next band's start (the last band has no end)."""

    start: int
    config: Mapping[str, KnobValue]


@dataclass(frozen=True, slots=True)
class NativeSchedule:
    """What the engine takes for a schedule: the fixed config it starts from, the flags whose
    values the schedule sets (a JSON-valued flag by its whole value) and the files it reads
    (by the flag that names each, with their content)."""

    config: Mapping[str, KnobValue]
    """The knobs the server starts with (the settings that do not vary by batch size)."""
    flags: Mapping[str, str | None] = field(default_factory=dict)
    """Flags the schedule adds or replaces (None: a bare switch)."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Launch files by the flag that names them, with their content."""
    fallback_line: str = ""
    """The log line prefix with which the engine says it ignored the schedule and runs its
    static settings (a schedule trial that logs it failed, never measured)."""

    def to_json(self) -> JsonObject:
        return {
            "config": dict(self.config),
            "flags": dict(self.flags),
            "files": dict(self.files),
            "fallback_line": self.fallback_line,
        }


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


__all__ = [
    "KnobTarget",
    "NativeSchedule",
    "NoNativeSchedule",
    "ScheduleBand",
    "ScheduleForm",
    "check_bands",
    "varying_knobs",
]
