"""What running trials needs of the store: the host loop's side of it, as a protocol.

The host loop numbers attempts, commits points and records events and nothing else, so it
depends on :class:`TrialStore`, not on :class:`~orchestrator.store.Store`: a test can hand it a
fake, and a second backend only has to provide these methods. ``Store`` satisfies it (mypy
checks that in :mod:`orchestrator.store.db`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from orchestrator.store.records import (
    Attempt,
    AttemptState,
    EventRecord,
    NewPoint,
    PointRecord,
    StoredRequest,
    TrialPlan,
    TrialRecord,
)
from orchestrator.store.results import Point


@runtime_checkable
class TrialStore(Protocol):
    """The attempts, points, plans and events of a sweep's trials, as the host loop writes
    them (the methods mean what :class:`~orchestrator.store.Store`'s say)."""

    async def attempts(self, sweep_id: int) -> list[Attempt]: ...

    async def get_attempt(self, attempt_id: int) -> Attempt: ...

    async def start_attempt(self, trial_id: int, *, invocation_id: str | None = None) -> Attempt:
        ...

    async def resume_attempt(self, attempt_id: int, *, invocation_id: str | None = None) -> Attempt:
        ...

    async def set_attempt_invocation(self, attempt_id: int, invocation_id: str) -> Attempt: ...

    async def finish_attempt(
        self,
        attempt_id: int,
        state: AttemptState,
        cause: str | None = None,
        evidence: Mapping[str, Any] | None = None,
    ) -> Attempt: ...

    async def skip_trial(
        self,
        trial_id: int,
        cause: str | None,
        evidence: Mapping[str, Any] | None = None,
        *,
        state: Literal["skipped", "cancelled"] = "skipped",
    ) -> Attempt: ...

    async def set_host_aside(self, sweep_id: int, host: str, reason: str | None) -> None: ...

    async def set_trial_plan(self, trial_id: int, plan: TrialPlan) -> TrialRecord: ...

    async def committed_point_keys(self, attempt_id: int) -> frozenset[str]: ...

    async def record_point(
        self, attempt_id: int, point: NewPoint | Point, requests: Sequence[StoredRequest]
    ) -> int: ...

    async def points(
        self, *, attempt_id: int | None = None, sweep_id: int | None = None
    ) -> list[PointRecord]: ...

    async def add_event(
        self,
        sweep_id: int,
        kind: str,
        *,
        host: str | None = None,
        attempt_id: int | None = None,
        fields: Mapping[str, Any] | None = None,
        ts: float | None = None,
    ) -> EventRecord: ...
