"""One host's trials as a policy over a driver: which trial next, the restart budget, retries,
a stop, the extension of a promising screen, and what is recorded of each attempt.

The driver owns the host and its servers (:class:`Driver`): whether a trial is refused before
any restart, and ``async with driver.serve(planned, trial) as server`` (the drop-in, the clean
restart, proven readiness). The server measures (:class:`Served`: ``async for point in
server.points(plan, skip)``) and knows no store, stop signal or progress; this loop alone
reads what the attempt committed, stops between points, records each point, tells the
progress and asks the server whether it still serves. The runner drives real hosts
(:mod:`orchestrator.driver`); ``benchmarks/search.py`` drives the simulator's truth with the
same loop; the tests drive a fake in milliseconds (tests/unit/test_hostloop.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from orchestrator.causes import DETERMINISTIC_CAUSES, HOST_LOSING_CAUSES
from orchestrator.evidence import CANCELLED, Evidence, RefusalEvidence, StopEvidence
from orchestrator.lifecycle import failure_from
from orchestrator.log import get_logger
from orchestrator.plan import Trial
from orchestrator.points import Point, ThroughputPoint, cell_point_key
from orchestrator.search.budget import RESTART_EVENT, RestartBudget
from orchestrator.store import (
    Attempt,
    SweepRecord,
    TrialPlan,
    TrialRecord,
    TrialStore,
    point_from_record,
)
from orchestrator.store.results import trial_label
from orchestrator.sweepfile import Sweep
from orchestrator.trialsource import SourcedTrial, TrialSource, trial_plan
from orchestrator.types import SYNTHETIC_WORKLOAD


class Progress(Protocol):
    """Where the runner reports what each host is doing (the live display, the daemon)."""

    def update(self, host: str, **fields: Any) -> None: ...


class NoProgress:
    def update(self, host: str, **fields: Any) -> None:
        pass


INTERRUPT = "interrupt"
"""The stop of a Ctrl-C or SIGTERM to a foreground run: the hosts are restored and the sweep
ends ``interrupted``, to be continued by running it again (the attempt in flight stays
resumable)."""


@dataclass
class StopSignal:
    """Asks a running sweep to stop at its next safe step (between points and trials); an
    :meth:`abort` (a second Ctrl-C) ends each host's current step at once, then its restore
    runs."""

    reason: str | None = None
    event: asyncio.Event = field(default_factory=asyncio.Event)
    aborted: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.event.set()

    def abort(self, reason: str) -> None:
        self.stop(reason)
        self.aborted.set()

    async def at(self, seconds: float, reason: str) -> None:
        """Stop with ``reason`` in ``seconds`` (a sweep's ``schedule.finish_by``)."""
        await asyncio.sleep(max(seconds, 0.0))
        self.stop(reason)

    @property
    def stopping(self) -> bool:
        return self.event.is_set()

    @property
    def resumable(self) -> bool:
        """The attempt in flight stays running in the store, for a later run to resume: a
        daemon's shutdown (the hosts keep their trial) or an interrupt (they are restored)."""
        return self.reason in ("shutdown", INTERRUPT)


@dataclass
class SweepContext:
    """What every host's loop of one sweep shares."""

    sweep: Sweep
    record: SweepRecord
    store: TrialStore
    """What the loop records: the store's attempts, points, plans and events (a protocol, so
    the fake-driver tests and the benchmark hand it what they like)."""
    progress: Progress
    stop: StopSignal
    source: TrialSource
    """Where each host's next trial comes from (the plan in order, or a search)."""
    budget: RestartBudget
    """``search.max_restarts``: every unit start of a host type counts against it."""
    failures: int = 0

    async def event(
        self,
        kind: str,
        fields: Mapping[str, Any] | None = None,
        *,
        host: str | None = None,
        attempt_id: int | None = None,
    ) -> None:
        await self.store.add_event(
            self.record.id, kind, host=host, attempt_id=attempt_id, fields=dict(fields or {})
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a trial cannot start, known before any restart (the host's parser refused its
    argv, a flag the build does not know, an extra flag the unit has with another value)."""

    cause: str
    evidence: RefusalEvidence
    message: str


class Served(Protocol):
    """A server proven to run one attempt's config, while it is measured."""

    @property
    def invocation_id(self) -> str: ...

    def planned(self, plan: TrialPlan) -> Sequence[str]:
        """The keys of the points ``plan`` measures on this server, in the order
        :meth:`points` yields them."""
        ...

    def points(self, plan: TrialPlan, skip: frozenset[str]) -> AsyncGenerator[Point, None]:
        """Measure ``plan``'s points but those whose key is in ``skip``, each yielded as it
        is made (its provenance attached)."""
        ...

    async def check_alive(self) -> None:
        """Raise (``crashed``, with the server's log as evidence) unless the process that
        measured the last point still serves."""
        ...

    def evidence(self) -> Evidence:
        """What the done attempt keeps of its server (its process, timeline, provenance)."""
        ...


class Driver(Protocol):
    """One host as the loop drives it."""

    @property
    def host(self) -> str: ...

    async def refusal(self, planned: Trial, trial: TrialRecord) -> Refusal | None:
        """Why ``planned`` cannot start on this host, known without a restart; None when it
        may be tried."""
        ...

    def serve(self, planned: Trial, trial: TrialRecord) -> AbstractAsyncContextManager[Served]:
        """Bring up ``planned``'s server (raising :class:`~orchestrator.lifecycle.TrialFailed`
        or a host error when it cannot)."""
        ...

    async def events(self, kind: str, /, **fields: Any) -> None:
        """Record one of the host's events."""
        ...


class HostLost(Exception):
    """A trial failed for good because the host cannot be reached, or its lease was taken
    over (``cause``): each further trial would fail the same way."""

    def __init__(self, message: str, cause: str = "host-unreachable") -> None:
        super().__init__(message)
        self.cause = cause

    @property
    def reason(self) -> str:
        """Why the host is set aside, as its record says."""
        return f"lease lost: {self}" if self.cause == "lease-lost" else f"unreachable: {self}"


class Stopped(Exception):
    """The sweep was asked to stop between two points; the attempt stays resumable."""


RESTORE_ATTEMPTS_AFTER_LOSS = 1
"""A host just lost gets one restore try: each further one would spend the reconnect budget."""


async def until_aborted(run: SweepContext, host: str, trials: Coroutine[Any, Any, bool]) -> bool:
    """The host's trials, unless the sweep is aborted (a second Ctrl-C): then the current
    step ends at once (the attempt in flight stays resumable) and the restore follows."""
    task = asyncio.create_task(trials)
    aborted = asyncio.create_task(run.stop.aborted.wait())
    try:
        await asyncio.wait({task, aborted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        aborted.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await run.event("host.aborted", {"reason": run.stop.reason}, host=host)
        return True
    return task.result()


async def run_host_trials(run: SweepContext, driver: Driver) -> bool:
    """The trials the source gives ``driver``'s host, one at a time, each told back to it.
    Returns False when the host was lost (its remaining trials skipped, the host set aside)."""
    store, host = run.store, driver.host
    while not run.stop.stopping and not cap_reached(run, host):
        # At the type's max_restarts nothing more can start here: what was not offered
        # stays queued (attempt null), never a "skipped" entry that is no start.
        sourced = await run.source.next_trial(host)
        if sourced is None:
            break
        planned, trial = sourced.planned, sourced.record
        lost: HostLost | None = None
        try:
            with structlog.contextvars.bound_contextvars(trial=trial.key):
                await run_trial(run, driver, planned, trial)
        except HostLost as error:
            lost = error
        await run.source.tell(sourced, await _latest_attempt(store, run.record.id, trial.id))
        if lost is not None:
            # Each further trial would spend the whole reconnect budget to fail the same
            # way: set the host aside now; the restore still gets its one chance.
            for rest in run.source.withdraw(host):
                await store.skip_trial(rest.record.id, lost.cause, {"reason": str(lost)})
            await store.set_host_aside(run.record.id, host, lost.reason)
            return False
    return True


async def run_trial(run: SweepContext, driver: Driver, planned: Trial, trial: TrialRecord) -> None:
    """Attempts of one trial until it succeeds, fails for good, or the sweep stops."""
    store = run.store
    attempts = [a for a in await store.attempts(run.record.id) if a.trial_id == trial.id]
    latest = attempts[-1] if attempts else None
    if latest is not None and latest.state in ("done", "skipped", "cancelled"):
        return
    if latest is not None and latest.state == "failed" and not _may_retry(run, latest):
        return
    resumable = latest if latest is not None and latest.state == "running" else None
    refused = await driver.refusal(planned, trial)
    if refused is not None:
        attempt = resumable or await store.start_attempt(trial.id)
        await _fail_attempt(run, trial_label(planned.config, trial.plan), attempt, refused)
        return
    if resumable is not None:
        attempt = await store.resume_attempt(resumable.id)
    else:
        attempt = await store.start_attempt(trial.id)
    while True:
        run.progress.update(
            driver.host,
            trial=trial.key,
            config=trial_label(planned.config, trial.plan),
            step="reconfigure",
            attempt=attempt.number,
        )
        if not await _take_restart(run, driver.host, attempt):
            return
        try:
            async with driver.serve(planned, trial) as server:
                await store.set_attempt_invocation(attempt.id, server.invocation_id)
                await _measure_trial(run, driver, server, attempt, trial)
                await store.finish_attempt(attempt.id, "done", evidence=server.evidence().to_json())
            return
        except Stopped:
            await _stopped_attempt(run, attempt)
            return
        except Exception as exc:
            if not await _retry_after(run, driver, planned, trial, attempt, exc):
                return
            attempt = await store.start_attempt(trial.id)


async def _measure_trial(
    run: SweepContext, driver: Driver, server: Served, attempt: Attempt, trial: TrialRecord
) -> None:
    """The trial's stored plan, then whatever its source extends it with on the same server
    (a promising screen goes on with the full matrix: no second restart); each extension is
    stored with the trial before it is measured, so a resumed attempt measures the same."""
    plan = trial.plan or trial_plan(run.sweep)
    while True:
        await measure_plan(run, driver.host, server, attempt, plan)
        stored = await run.store.points(attempt_id=attempt.id)
        extended = await run.source.extend(trial, [point_from_record(p) for p in stored])
        if extended is None or extended == plan:
            return
        trial = await run.store.set_trial_plan(trial.id, extended)
        await driver.events(
            "trial.extended",
            trial=trial.key,
            purpose=extended.purpose,
            cells=len(extended.cells),
            problems=len(extended.problems),
        )
        plan = extended


async def measure_plan(
    run: SweepContext, host: str, server: Served, attempt: Attempt, plan: TrialPlan
) -> None:
    """``plan`` on ``server``, one point at a time: what the attempt committed before is
    skipped, the sweep's stop is checked before each point (:class:`Stopped`: the attempt stays
    resumable, its points kept), each point is committed as it comes and shown, and the server
    must still serve after it: checked once the point's journal window has settled, not beside
    it (a server that crashed at the point's end exits a little later; tests/faults caught the
    race)."""
    committed = await run.store.committed_point_keys(attempt.id)
    planned = server.planned(plan)
    pending = [key for key in planned if key not in committed]
    done, total = len(committed), len(planned)
    if not pending:
        return
    async with contextlib.aclosing(server.points(plan, committed)) as points:
        for key in pending:
            if run.stop.stopping:
                raise Stopped
            run.progress.update(host, step=point_step(key, plan), done=done, total=total)
            point = await anext(points, None)
            if point is None or point.key != key:
                found = None if point is None else point.key
                raise RuntimeError(f"the server measured {found}, the plan's next is {key}")
            await run.store.record_point(attempt.id, point, point.requests)
            done += 1
            if isinstance(point, ThroughputPoint):
                last = point.metrics.measured_json()
                run.progress.update(host, done=done, total=total, last_point=last, point=point)
            else:
                run.progress.update(host, done=done, total=total)
            await server.check_alive()


def point_step(key: str, plan: TrialPlan) -> str:
    """The live display's step while the point ``key`` of ``plan`` is measured: ``ctx 4096 x
    c32``, ``ctx 4096 x 8 req/s`` (``, chat`` on a workload), ``coding gcd``."""
    for cell in plan.cells:
        if cell_point_key(cell) == key:
            step = f"ctx {cell.context} x {cell.load}"
            return step if cell.workload == SYNTHETIC_WORKLOAD else f"{step}, {cell.workload}"
    return f"coding {key.removeprefix('coding/')}"


async def _fail_attempt(
    run: SweepContext, label: str, attempt: Attempt, refused: Refusal
) -> None:
    """An attempt that failed before any restart was made for it: recorded with its evidence,
    warned of, and held against the failure policy."""
    await run.store.finish_attempt(
        attempt.id, "failed", cause=refused.cause, evidence=refused.evidence.to_json()
    )
    run.failures += 1
    _warn_failed(label, refused.cause, refused.message)
    await _after_failure(run)


async def _stopped_attempt(run: SweepContext, attempt: Attempt) -> None:
    """The attempt in flight when the sweep was asked to stop: a cancel is not a failure (the
    operator called it off); a shutdown leaves it running, so the next start resumes it."""
    if run.stop.reason == "cancel":
        await run.store.finish_attempt(attempt.id, "cancelled", evidence=CANCELLED.to_json())
    elif not run.stop.resumable:
        await run.store.finish_attempt(
            attempt.id,
            "failed",
            cause="stopped",
            evidence=StopEvidence(run.stop.reason or "stopped").to_json(),
        )


async def _retry_after(
    run: SweepContext,
    driver: Driver,
    planned: Trial,
    trial: TrialRecord,
    attempt: Attempt,
    exc: Exception,
) -> bool:
    """Record a failed attempt; True when the trial gets another. The one mapping: a host's
    failure with its cause and evidence; anything else is a bug of ours, recorded as
    orchestrator-error with its traceback (never retried) so that it does not end the night.
    A host that cannot be reached raises :class:`HostLost`."""
    failed = failure_from(exc)
    run.failures += 1
    if failed.cause == "orchestrator-error":
        log = get_logger(sweep=run.sweep.name, host=driver.host, trial=trial.key)
        log.exception("trial.orchestrator_error", exc_info=exc)
    await run.store.finish_attempt(
        attempt.id, "failed", cause=failed.cause, evidence=failed.to_json()
    )
    _warn_failed(
        trial_label(planned.config, trial.plan), failed.cause, failed.message,
        attempt=attempt.number,
    )  # fmt: skip
    await driver.events("trial.failed", trial=trial.key, attempt=attempt.number, cause=failed.cause)
    finished = await run.store.get_attempt(attempt.id)
    if (
        run.stop.stopping
        or not _may_retry(run, finished)
        or cap_reached(run, driver.host)  # a retry is a start like any other
    ):
        await _after_failure(run)
        if failed.cause in HOST_LOSING_CAUSES:
            raise HostLost(failed.message, failed.cause) from failed
        return False
    return True


async def withdraw(run: SweepContext, host: str, reason: str) -> None:
    """A host that failed before this sweep changed anything on it: its trials withdrawn and
    skipped (cancelled under a cancel; left queued for an interrupted sweep to continue)."""
    withdrawn = run.source.withdraw(host)
    if run.stop.reason == "cancel":
        await cancel_trials(run.store, run.record.id, [t.record for t in withdrawn])
        return
    if run.stop.resumable:
        return
    await set_aside(run, host, withdrawn, reason)


async def set_aside(
    run: SweepContext, host: str, trials: Sequence[SourcedTrial], reason: str
) -> None:
    """``host`` set aside for ``reason``, ``trials`` (withdrawn from it) skipped."""
    await run.store.set_host_aside(run.record.id, host, reason)
    for trial in trials:
        await run.store.skip_trial(trial.record.id, "host-set-aside", {"reason": reason})
    get_logger(host=host).warning("host.set_aside", reason=reason)


async def cancel_trials(
    store: TrialStore, sweep_id: int, trials: Sequence[TrialRecord]
) -> None:
    """``trials`` will not run because their sweep was cancelled: one never attempted gets a
    cancelled attempt, one left running (in flight, or interrupted earlier) ends cancelled;
    finished ones stay as they ended."""
    latest: dict[int, Attempt] = {}
    for attempt in await store.attempts(sweep_id):
        latest[attempt.trial_id] = attempt  # by number within a trial: the last one wins
    for trial in trials:
        last = latest.get(trial.id)
        if last is None:
            await store.skip_trial(trial.id, None, CANCELLED.to_json(), state="cancelled")
        elif last.state == "running":
            await store.finish_attempt(last.id, "cancelled", evidence=CANCELLED.to_json())


def cap_reached(run: SweepContext, host: str) -> bool:
    """``host``'s type has spent its ``search.max_restarts``."""
    left = run.budget.left(host)
    return left is not None and left <= 0


async def _take_restart(run: SweepContext, host: str, attempt: Attempt) -> bool:
    """Count the unit start about to be made against ``search.max_restarts`` (recorded before
    the start, so a resumed run counts it too); a start past the cap is not made and its
    attempt ends skipped."""
    if run.budget.take(host):
        run.progress.update(host, restarts_left=run.budget.left(host))
        await run.event(
            RESTART_EVENT,
            {"host_type": run.budget.type_of[host], "left": run.budget.left(host)},
            host=host,
            attempt_id=attempt.id,
        )
        return True
    await run.store.finish_attempt(
        attempt.id,
        "skipped",
        evidence={
            "reason": f"max_restarts ({run.budget.cap}) reached for host type "
            f"{run.budget.type_of[host]}"
        },
    )
    return False


def _warn_failed(label: str, cause: str, message: str, *, attempt: int = 1) -> None:
    """A failed attempt is a warning: a person at the terminal (which shows warnings only)
    learns of it when it happens, not at the sweep's end; the host and trial are bound."""
    get_logger().warning(
        "trial.failed",
        config=label,
        attempt=attempt,
        cause=cause,
        message=message[:300],
    )


def _may_retry(run: SweepContext, attempt: Attempt) -> bool:
    return (
        attempt.number <= run.sweep.policy.trial_retries
        and attempt.cause not in DETERMINISTIC_CAUSES
    )


async def _after_failure(run: SweepContext) -> None:
    if run.sweep.policy.on_trial_failure == "abort":
        run.stop.stop("abort: a trial failed and policy.on_trial_failure is abort")


async def _latest_attempt(store: TrialStore, sweep_id: int, trial_id: int) -> Attempt | None:
    attempts = [a for a in await store.attempts(sweep_id) if a.trial_id == trial_id]
    return attempts[-1] if attempts else None


__all__ = [
    "INTERRUPT",
    "RESTORE_ATTEMPTS_AFTER_LOSS",
    "Driver",
    "HostLost",
    "NoProgress",
    "Progress",
    "Refusal",
    "Served",
    "StopSignal",
    "Stopped",
    "SweepContext",
    "cancel_trials",
    "cap_reached",
    "measure_plan",
    "point_step",
    "run_host_trials",
    "run_trial",
    "set_aside",
    "until_aborted",
    "withdraw",
]
