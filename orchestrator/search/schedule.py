"""A sweep's last restarts on each host type: the speculative schedule its answer across load
proposes, measured as trials of their own on the same hosts and matrix.

A wrapper of any :class:`~orchestrator.trialsource.TrialSource` (the plan, or a search): once
the wrapped source has nothing more for a host, the host type's answer is read from the store
as it stands (:func:`~orchestrator.answers.answer_sweep`), and if it proposes a schedule the
engine takes natively, the host runs it: a trial whose config is the schedule's fixed settings
and whose plan carries the schedule's :class:`~orchestrator.types.LaunchOverlay` (purpose
``schedule``), up to ``search.schedule_trials`` restarts per type. The answers then judge it
against the best fixed config at every load (:func:`~orchestrator.answers.schedule.judge_schedule`).
The search keeps those restarts out of what it explores with
(:func:`~orchestrator.search.budget.exploring_cap`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence

from orchestrator.answers import answer_sweep
from orchestrator.engines.schedule import NativeSchedule
from orchestrator.points import Point
from orchestrator.store import Attempt, NewTrial, Store, SweepRecord, TrialPlan, TrialRecord
from orchestrator.store.results import is_schedule_plan
from orchestrator.sweepfile import Sweep
from orchestrator.trialsource import (
    SourcedTrial,
    TrialSource,
    TrialSourceFactory,
    sourced,
    trial_plan,
)

SCHEDULE_EVENT = "schedule.proposed"


def schedule_key(host: str, native: NativeSchedule, repeat: int) -> str:
    """``<host>.schedule.<12 hex of the schedule>`` (``~rN`` for its later restarts)."""
    text = json.dumps(native.to_json(), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    key = f"{host}.schedule.{digest}"
    return key if repeat == 1 else f"{key}~r{repeat}"


class ScheduleTrials:
    """``inner``'s trials, then each host type's schedule trials (module docstring)."""

    def __init__(
        self, inner: TrialSource, store: Store, record: SweepRecord, sweep: Sweep
    ) -> None:
        self.inner, self.store, self.record, self.sweep = inner, store, record, sweep
        self.type_of = {host.name: host.host_type for host in sweep.hosts}
        self.wanted = sweep.schedule_restarts()
        self._pending: dict[str, list[SourcedTrial]] = {}
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls, inner: TrialSource, store: Store, record: SweepRecord, sweep: Sweep
    ) -> ScheduleTrials:
        """The wrapper; schedule trials a crash left unfinished are offered first."""
        source = cls(inner, store, record, sweep)
        finished = {(o.key, o.host) for o in (await store.results(record.id)).latest()
                    if o.state in ("done", "failed", "skipped", "cancelled")}  # fmt: skip
        for row in await store.trials(record.id):
            if is_schedule_plan(row.plan) and (row.key, row.host) not in finished:
                source._pending.setdefault(row.host, []).append(sourced(row))
        return source

    @property
    def known(self) -> int | None:
        return self.inner.known

    async def next_trial(self, host: str) -> SourcedTrial | None:
        pending = self._pending.get(host)
        if pending:
            return pending.pop(0)
        sourced = await self.inner.next_trial(host)
        if sourced is not None or not self.wanted:
            return sourced
        async with self._lock:
            return await self._schedule_trial(host)

    async def tell(self, trial: SourcedTrial, outcome: Attempt | None) -> None:
        if not is_schedule_plan(trial.record.plan):
            await self.inner.tell(trial, outcome)

    def withdraw(self, host: str) -> list[SourcedTrial]:
        return [*self.inner.withdraw(host), *self._pending.pop(host, [])]

    async def extend(self, trial: TrialRecord, points: Sequence[Point]) -> TrialPlan | None:
        if is_schedule_plan(trial.plan):
            return None  # a schedule trial measures its plan, nothing more
        return await self.inner.extend(trial, points)

    async def _schedule_trial(self, host: str) -> SourcedTrial | None:
        """The host type's next schedule trial, or None when it has run its share, its answer
        proposes none the engine takes, or nothing is measured yet."""
        host_type = self.type_of[host]
        rows = await self.store.trials(self.record.id)
        ran = [
            r for r in rows if is_schedule_plan(r.plan) and self.type_of.get(r.host) == host_type
        ]
        if len(ran) >= self.wanted:
            return None
        native = await self._proposal(host_type)
        if native is None:
            return None
        repeat = 1 + sum(1 for r in ran if r.config == dict(native.config))
        plan = trial_plan(self.sweep, repeat=repeat)
        plan = TrialPlan(
            cells=plan.cells,
            rounds=plan.rounds,
            model=plan.model,
            purpose="schedule",
            repeat=repeat,
            overlay=native.overlay,
        )
        ordinal = max((r.ordinal for r in rows), default=-1) + 1
        key = schedule_key(host, native, repeat)
        stored = await self.store.add_trials(
            self.record.id, [NewTrial(key, host, dict(native.config), ordinal, plan=plan)]
        )
        (row,) = [r for r in stored if r.key == key and r.host == host]
        await self.store.add_event(
            self.record.id, SCHEDULE_EVENT, host=host,
            fields={"host_type": host_type, "trial": key, "schedule": native.to_json()},
        )  # fmt: skip
        return sourced(row)

    async def _proposal(self, host_type: str) -> NativeSchedule | None:
        """The native schedule the type's answer across load proposes from what is stored."""
        results = await self.store.results(self.record.id)
        for answer in answer_sweep(results, self.sweep):
            if answer.host_type == host_type and answer.schedule is not None:
                return answer.schedule.native
        return None


def with_schedule_trials(factory: TrialSourceFactory) -> TrialSourceFactory:
    """``factory``'s source, wrapped so each host type spends its last restarts on its
    proposed schedule."""

    async def wrapped(store: Store, record: SweepRecord, sweep: Sweep) -> TrialSource:
        return await ScheduleTrials.open(await factory(store, record, sweep), store, record, sweep)

    return wrapped


__all__ = ["SCHEDULE_EVENT", "ScheduleTrials", "schedule_key", "with_schedule_trials"]
