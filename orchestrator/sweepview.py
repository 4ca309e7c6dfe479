"""One sweep as the daemon lists it (the API's status, the dashboard, the team's view): its
stored record, whether a daemon runs it now, and its live progress. Its own module because the
API and the dashboard both show it and neither may import the other's side."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.progress.snapshot import ProgressSnapshot
from orchestrator.store import JsonObject, SweepRecord


def sweep_brief(record: SweepRecord) -> JsonObject:
    """A sweep by its id, name and state: how an answer about one sweep (submitted, cancelled,
    resumed) names it."""
    return {"id": record.id, "name": record.name, "state": record.state}


@dataclass(frozen=True, slots=True)
class SweepView:
    """One sweep as the API lists it: its record and whether the daemon is running it."""

    record: SweepRecord
    active: bool = False
    stopping: str | None = None
    """Why a running sweep was asked to stop (``cancel``, ``shutdown``), if it was."""
    progress: ProgressSnapshot | None = None
    """A running sweep's progress, ETA and best so far; None when it is not running."""
    daemon: str | None = None
    """The daemon that runs it now, over a store several daemons share (``ctl-2 (daemon, pid
    4411)``); None over a daemon's own store, and for a sweep no daemon runs."""

    def to_json(self) -> JsonObject:
        r = self.record
        return {
            "name": r.name,
            "id": r.id,
            "state": r.state,
            "priority": r.priority,
            "submitted_at": r.submitted_at,
            "started_at": r.started_at,
            "finished_at": r.finished_at,
            "source_path": r.source_path,
            "content_hash": r.content_hash,
            "replaced_by": r.replaced_by,
            "active": self.active,
            "stopping": self.stopping,
            "summary": r.summary,
            "progress": None if self.progress is None else self.progress.to_json(),
            "daemon": self.daemon,
        }
