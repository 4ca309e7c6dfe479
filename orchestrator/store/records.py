"""The typed records that cross the store's boundary.

``New*`` classes are what callers hand in; ``*Record`` classes (and :class:`Attempt`,
:class:`UnitBackup`) are what the store hands back, ids and timestamps included. Open-ended data
(metrics, configs, evidence, event fields) travels as JSON objects; timestamps are Unix seconds.
A point's identity, row and requests (:func:`point_key`, :class:`NewPoint`,
:class:`StoredRequest`) are :mod:`orchestrator.points`', re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from orchestrator.points import POINT_KINDS as POINT_KINDS
from orchestrator.points import NewPoint as NewPoint
from orchestrator.points import PointKind as PointKind
from orchestrator.points import StoredRequest as StoredRequest
from orchestrator.points import cell_point_key as cell_point_key
from orchestrator.points import point_key as point_key
from orchestrator.types import JsonObject, LaunchOverlay, MatrixCell

SweepState = Literal["queued", "running", "interrupted", "done", "failed", "cancelled"]
"""docs/operator-guide.md has the table of states and their transitions: ``interrupted`` is a
sweep a foreground run was asked to stop (Ctrl-C, SIGTERM), its hosts restored; running it
again (or ``resume`` through the daemon) continues it."""
AttemptState = Literal["queued", "running", "done", "failed", "skipped", "cancelled"]

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


TrialPurpose = Literal["measure", "screen", "confirm", "schedule"]
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
    measures a chosen config again, so its estimate is not the one it was picked on),
    ``schedule`` (the proposed speculative schedule, :attr:`overlay`, measured as a trial)."""
    repeat: int = 1
    """Which measurement of this config on its host type (1 = the first)."""
    overlay: LaunchOverlay | None = None
    """A ``schedule`` trial's launch beyond its knobs: the speculative schedule the answers
    proposed, in the engine's own form, measured against the best fixed config."""

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
            **({} if self.overlay is None else {"overlay": self.overlay.to_json()}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialPlan:
        cells = data.get("cells") or []
        temperature = data.get("coding_temperature")
        model = data.get("model")
        purpose = data.get("purpose")
        overlay = data.get("overlay")
        return cls(
            cells=tuple(MatrixCell.from_json(c) for c in cells),
            rounds=int(data.get("rounds") or 0),
            problems=tuple(str(p) for p in data.get("problems") or ()),
            coding_temperature=float(temperature) if isinstance(temperature, int | float) else None,
            model=model if isinstance(model, str) else None,
            purpose=purpose if purpose in TRIAL_PURPOSES else "measure",
            repeat=int(data.get("repeat") or 1),
            overlay=LaunchOverlay.from_json(overlay) if isinstance(overlay, Mapping) else None,
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
    and the mode to put back (a restore removes what the sweep created, nothing more); for an
    engine that launches from files, that its launch files are ours to clear and the modes of
    the operator's found in their place (path -> mode)."""

    path: str
    dir_existed: bool
    mode: int
    launch_managed: bool = False
    launch_modes: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> JsonObject:
        out: JsonObject = {"path": self.path, "dir_existed": self.dir_existed, "mode": self.mode}
        if self.launch_managed:
            out["launch_managed"] = True
            out["launch_modes"] = {path: f"{mode:04o}" for path, mode in self.launch_modes.items()}
        return out


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


@dataclass(frozen=True, slots=True)
class DaemonIdentity:
    """A daemon as the claims of a shared store name it: ``id`` is this process's alone (a
    restarted daemon is a new one), ``name`` what a person reads (``ctl-2 (pid 4411)``)."""

    id: str
    name: str


@dataclass(frozen=True, slots=True)
class SweepClaim:
    """Which daemon runs a sweep of a shared store, until when (renewed by its heartbeat).

    A claim that expired, or was released, may be taken by another daemon: the generation then
    rises by one and ``took_over_from`` names the daemon whose unreleased claim expired.
    ``stop_requested`` is another daemon's ask (a cancel through it) that the holder stop it.
    """

    sweep_id: int
    daemon_id: str
    daemon: str
    generation: int
    claimed_at: float
    renewed_at: float
    expires_at: float
    released_at: float | None = None
    stop_requested: str | None = None
    took_over_from: str | None = None

    def live(self, now: float) -> bool:
        """Held now: neither released nor expired."""
        return self.released_at is None and now < self.expires_at


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """A try to claim a sweep: ``claim`` when it is now this daemon's; else ``holder`` when
    another daemon's live claim holds it, or neither when the sweep cannot run (ended,
    interrupted, replaced) or another daemon is claiming it this very moment."""

    claim: SweepClaim | None = None
    holder: SweepClaim | None = None


def nothing_ran(hosts: Sequence[HostRecord], attempts: Sequence[Attempt]) -> str | None:
    """Why a sweep that was not stopped has nothing to show, or None when a trial ran.

    A sweep whose every host was set aside (or whose every trial was skipped) measured nothing:
    that is a failure with a reason, not ``done``.
    """
    if any(a.state not in ("skipped", "cancelled") for a in attempts):
        return None
    if hosts and all(h.set_aside_reason for h in hosts):
        reasons = "; ".join(
            reason if reason.startswith(f"{h.name}:") else f"{h.name}: {reason}"
            for h in hosts
            if (reason := h.set_aside_reason)
        )
        return f"every host was set aside: {reasons}"
    return "no trial ran"
