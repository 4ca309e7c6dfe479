"""What an attempt keeps as its evidence, typed where it is made and JSON only in the store.

An attempt ends with one of these (or a :class:`~orchestrator.lifecycle.TrialFailed`, the
failure's own record): the server a done attempt measured (:class:`ServerEvidence`, with the
:class:`Timeline` of its restart), why a trial was refused before any restart
(:class:`RefusalEvidence`), or why it was stopped (:class:`StopEvidence`). Each writes the keys
the report, ``results --json`` and older stores have always read, so the stored JSON is
unchanged by the typing.

It sits under the lifecycle, the preflight and the host loop that make these, and over the
engine seam's data it records (:mod:`orchestrator.engines.base`): it imports neither the
lifecycle nor anything above the seam.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from orchestrator.types import JsonObject

if TYPE_CHECKING:
    from orchestrator.engines.base import ConfigDifference, ParseVerdict, Provenance


class Evidence(Protocol):
    """Anything an attempt may end with: it becomes the attempt's stored JSON object."""

    def to_json(self) -> JsonObject: ...


TimelineStep = Literal[
    "begin",
    "dropin_installed",
    "stop_requested",
    "stopped",
    "memory_released",
    "start_requested",
    "started",
    "ready",
]
"""The restart protocol's steps, in order, as a timeline stamps them."""


@dataclass
class Timeline:
    """When each step of one restart happened (Unix time): what the report's lifecycle table
    and the attempt's evidence show, stamped as the protocol goes."""

    stamps: dict[TimelineStep, float] = field(default_factory=dict)

    def mark(self, step: TimelineStep) -> float:
        """Stamp ``step`` now; returns the stamp."""
        self.stamps[step] = time.time()
        return self.stamps[step]

    def span(self, start: TimelineStep, end: TimelineStep) -> float:
        """Seconds from ``start`` to ``end`` (both stamped)."""
        return self.stamps[end] - self.stamps[start]

    def to_json(self) -> dict[str, float]:
        return {step: stamp for step, stamp in self.stamps.items()}


@dataclass(frozen=True, slots=True)
class ServerEvidence:
    """The server a done attempt was measured on: the process, when each restart step
    happened, what it reported of itself, and the knobs it ran with other values."""

    invocation_id: str
    main_pid: int
    timeline: Timeline
    provenance: Provenance
    overridden: tuple[ConfigDifference, ...] = ()

    def to_json(self) -> JsonObject:
        return {
            "invocation_id": self.invocation_id,
            "main_pid": self.main_pid,
            "timeline": self.timeline.to_json(),
            "provenance": self.provenance.to_json(),
            "overridden": [
                {
                    "knob": d.knob,
                    "where": d.where,
                    "expected": d.expected,
                    "actual": d.actual,
                    "why": d.reason,
                }
                for d in self.overridden
            ],
        }


RefusedBy = Literal["preflight", "drop-in"]


@dataclass(frozen=True, slots=True)
class RefusalEvidence:
    """Why a trial was refused before any restart: the step that found it (the preflight's
    parser, or building the drop-in) and what it said."""

    found_by: RefusedBy
    parser: str | None = None
    """The engine whose parser refused the argv (preflight)."""
    error: str | None = None
    """The parser's own words."""
    unknown_flags: Sequence[str] = ()
    """Flags this build does not know (preflight, from ``--help``)."""
    message: str | None = None
    """Why the drop-in could not be built (an extra flag the unit has with another value)."""
    flag: str | None = None

    @classmethod
    def of(cls, verdict: ParseVerdict) -> RefusalEvidence:
        """The preflight's refusal: the host's own parser refused the trial's argv."""
        return cls("preflight", parser=verdict.parser, error=verdict.error)

    def to_json(self) -> JsonObject:
        data: JsonObject = {"found_by": self.found_by}
        if self.parser is not None or self.error is not None:
            data.update(parser=self.parser, error=self.error)
        if self.unknown_flags:
            data["unknown_flags"] = list(self.unknown_flags)
        if self.message is not None:
            data.update(message=self.message, flag=self.flag)
        return data


@dataclass(frozen=True, slots=True)
class StopEvidence:
    """Why an attempt in flight was stopped (``cancel``, ``deadline``, ...)."""

    reason: str

    def to_json(self) -> JsonObject:
        return {"reason": self.reason}


CANCELLED = StopEvidence("cancel")
"""What a trial or attempt the operator's cancel called off keeps."""

__all__ = [
    "CANCELLED",
    "Evidence",
    "RefusalEvidence",
    "RefusedBy",
    "ServerEvidence",
    "StopEvidence",
    "Timeline",
    "TimelineStep",
]
