"""The typed records that cross the store's boundary.

``New*`` classes are what callers hand in; ``*Record`` classes (and :class:`Attempt`,
:class:`UnitBackup`) are what the store hands back, ids and timestamps included. Open-ended data
(metrics, configs, evidence, event fields) travels as JSON objects; timestamps are Unix seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from orchestrator.types import SYNTHETIC_WORKLOAD, JsonObject, MatrixCell, format_rate

SweepState = Literal["queued", "running", "interrupted", "done", "failed", "cancelled"]
"""docs/operator-guide.md has the table of states and their transitions: ``interrupted`` is a
sweep a foreground run was asked to stop (Ctrl-C, SIGTERM), its hosts restored; running it
again (or ``resume`` through the daemon) continues it."""
AttemptState = Literal["queued", "running", "done", "failed", "skipped", "cancelled"]
PointKind = Literal["throughput", "coding"]

SWEEP_STATES: tuple[SweepState, ...] = get_args(SweepState)
ATTEMPT_STATES: tuple[AttemptState, ...] = get_args(AttemptState)
FINISHED_ATTEMPT_STATES: tuple[AttemptState, ...] = (
    "done",
    "failed",
    "skipped",
    "cancelled",
)
TERMINAL_SWEEP_STATES: tuple[SweepState, ...] = ("done", "failed", "cancelled")
RESUMABLE_SWEEP_STATES: tuple[SweepState, ...] = ("running", "interrupted")
"""A sweep a run continues: ``running`` in the store with no runner (crashed, killed, the
daemon stopped) or ``interrupted``."""
POINT_KINDS: tuple[PointKind, ...] = get_args(PointKind)



def point_key(
    kind: PointKind,
    *,
    context: int | None = None,
    concurrency: int | None = None,
    problem: str | None = None,
    rate: float | None = None,
    workload: str | None = None,
) -> str:
    """The identity of a point within an attempt, so a resumed run can skip what is committed.

    A throughput point is one cell: a context at a closed-loop concurrency or an open-loop
    rate, on a workload; a coding point is one problem. A synthetic closed-loop cell keeps the
    key it had before workloads and rates existed, so stores written then resume unchanged.
    """
    if kind == "throughput":
        if context is None or problem is not None or (concurrency is None) == (rate is None):
            raise ValueError(
                "a throughput point has a context and a concurrency or a rate, no problem"
            )
        load = f"concurrency={concurrency}" if rate is None else f"rate={format_rate(rate)}"
        head = "" if workload in (None, SYNTHETIC_WORKLOAD) else f"workload={workload}/"
        return f"throughput/{head}context={context}/{load}"
    if kind == "coding":
        if not problem:
            raise ValueError("a coding point names its problem")
        return f"coding/{problem}"
    raise ValueError(f"unknown point kind {kind!r}")


@dataclass(frozen=True, slots=True)
class SweepRecord:
    """One submitted sweep. ``replaced_by`` is set when a later submission superseded it."""

    id: int
    name: str
    content_hash: str
    yaml_text: str
    source_path: str | None
    priority: int
    submitted_at: float
    state: SweepState
    started_at: float | None
    finished_at: float | None
    summary: JsonObject | None
    replaced_by: int | None
    replaced_at: float | None


@dataclass(frozen=True, slots=True)
class SubmitResult:
    """``created`` is False when the same name and content was already submitted."""

    sweep: SweepRecord
    created: bool


@dataclass(frozen=True, slots=True)
class HostEntry:
    """A host taking part in a sweep, as the runner declares it."""

    name: str
    type: str


@dataclass(frozen=True, slots=True)
class HostRecord:
    sweep_id: int
    name: str
    type: str
    set_aside_reason: str | None


def cell_point_key(cell: MatrixCell) -> str:
    """The point key of a throughput cell."""
    return point_key(
        "throughput",
        context=cell.context,
        concurrency=cell.concurrency,
        rate=cell.rate,
        workload=cell.workload,
    )


TrialPurpose = Literal["measure", "screen", "confirm"]
TRIAL_PURPOSES: tuple[TrialPurpose, ...] = get_args(TrialPurpose)


@dataclass(frozen=True, slots=True)
class TrialPlan:
    """What a trial is to measure, fixed when the trial is planned: its cells and rounds, its
    coding problems and their temperature, the model it serves.

    Each trial carries its own plan (a search strategy may propose trials one by one, at other
    fidelities), so a reader never re-derives it from the sweep file.
    """

    cells: tuple[MatrixCell, ...]
    rounds: int
    problems: tuple[str, ...] = ()
    coding_temperature: float | None = None
    """None when the trial runs no coding problems."""
    model: str | None = None
    purpose: TrialPurpose = "measure"
    """Why the trial runs: ``measure`` (a grid or random trial, or a repeat of one), ``screen``
    (a search's cheap first look, on the objective's cells), ``confirm`` (a restart that
    measures a chosen config again, so its estimate is not the one it was picked on)."""
    repeat: int = 1
    """Which measurement of this config on its host type (1 = the first)."""

    @property
    def total_points(self) -> int:
        return len(self.cells) + len(self.problems)

    def to_json(self) -> JsonObject:
        return {
            "cells": [cell.to_json() for cell in self.cells],
            "rounds": self.rounds,
            "problems": list(self.problems),
            "coding_temperature": self.coding_temperature,
            "model": self.model,
            "purpose": self.purpose,
            "repeat": self.repeat,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialPlan:
        cells = data.get("cells") or []
        temperature = data.get("coding_temperature")
        model = data.get("model")
        purpose = data.get("purpose")
        return cls(
            cells=tuple(MatrixCell.from_json(c) for c in cells),
            rounds=int(data.get("rounds") or 0),
            problems=tuple(str(p) for p in data.get("problems") or ()),
            coding_temperature=float(temperature) if isinstance(temperature, int | float) else None,
            model=model if isinstance(model, str) else None,
            purpose=purpose if purpose in TRIAL_PURPOSES else "measure",
            repeat=int(data.get("repeat") or 1),
        )


@dataclass(frozen=True, slots=True)
class NewTrial:
    """One (config, host) the plan produced; ``key`` is the plan's stable trial key."""

    key: str
    host: str
    config: Mapping[str, Any]
    ordinal: int
    is_baseline: bool = False
    plan: TrialPlan | None = None


@dataclass(frozen=True, slots=True)
class TrialRecord:
    id: int
    sweep_id: int
    key: str
    host: str
    config: JsonObject
    ordinal: int
    is_baseline: bool
    plan: TrialPlan | None = None
    """None for a trial stored before plans were kept (schema version 1)."""


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try of a trial. ``resumes`` counts how often a crashed run picked it up again."""

    id: int
    trial_id: int
    number: int
    state: AttemptState
    cause: str | None
    evidence: JsonObject | None
    started_at: float | None
    finished_at: float | None
    invocation_id: str | None
    resumes: int


@dataclass(frozen=True, slots=True)
class UnfinishedAttempt:
    """A running attempt found after a restart, with what it already committed."""

    trial: TrialRecord
    attempt: Attempt
    committed_point_keys: frozenset[str]


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """One benchmark request as kept: times in seconds, ``sent_at`` as Unix time.

    Distinct from ``bench.client.RequestRecord`` (what the client observed, chunk by chunk);
    the runner maps one onto the other. ``extra`` holds what not every request has (chunk
    times, per-request accept length, ...).
    """

    sent_at: float
    ttft_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    warmup: bool = False
    extra: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class NewPoint:
    """One measured point: a matrix cell or a coding problem, with its provenance."""

    kind: PointKind
    metrics: Mapping[str, Any]
    context: int | None = None
    concurrency: int | None = None
    problem: str | None = None
    rate: float | None = None
    workload: str | None = None
    """None for coding points and for synthetic throughput points."""
    accept_len: Mapping[str, Any] | None = None
    quality: Mapping[str, Any] = field(default_factory=dict)
    invocation_id: str | None = None
    cursor_start: str | None = None
    cursor_end: str | None = None
    started_at: float | None = None
    finished_at: float | None = None

    def __post_init__(self) -> None:
        self.key  # noqa: B018 - validates the identity fields

    @property
    def key(self) -> str:
        return point_key(
            self.kind,
            context=self.context,
            concurrency=self.concurrency,
            problem=self.problem,
            rate=self.rate,
            workload=self.workload,
        )


@dataclass(frozen=True, slots=True)
class PointRecord:
    id: int
    attempt_id: int
    key: str
    kind: PointKind
    context: int | None
    concurrency: int | None
    problem: str | None
    metrics: JsonObject
    accept_len: JsonObject | None
    rate: float | None
    workload: str | None
    quality: JsonObject
    invocation_id: str | None
    cursor_start: str | None
    cursor_end: str | None
    started_at: float | None
    finished_at: float | None
    committed_at: float


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A lifecycle event (``unit.stopped``, ``memory.released``) with its fields."""

    id: int
    sweep_id: int
    attempt_id: int | None
    host: str | None
    kind: str
    ts: float
    fields: JsonObject


@dataclass(frozen=True, slots=True)
class DropinSlot:
    """Where our drop-in goes on a unit, as found: its path, whether its directory existed
    and the mode to put back (a restore removes what the sweep created, nothing more)."""

    path: str
    dir_existed: bool
    mode: int

    def to_json(self) -> JsonObject:
        return {"path": self.path, "dir_existed": self.dir_existed, "mode": self.mode}


@dataclass(frozen=True, slots=True)
class UnitBackup:
    """A unit's files and state as found before the sweep touched it.

    ``files`` maps each path to its exact bytes, or None where the file did not exist (so a
    restore deletes it). ``state`` is what ``systemctl show`` said (ActiveState, ...).
    """

    id: int
    sweep_id: int
    host: str
    unit: str
    files: dict[str, bytes | None]
    state: dict[str, str]
    taken_at: float
    restored_at: float | None
    dropin: DropinSlot | None = None
    """Where our drop-in goes (None only for a backup taken without one)."""
    adopted: str | None = None
    """The trial key ``adopt`` installed as the unit's lasting config, when the backup was
    re-armed by adopt (a restore then puts the unit back as found, whatever the policy)."""
