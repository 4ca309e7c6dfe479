"""One sweep, unattended: hosts in parallel, on each host its trials one at a time.

The store is the truth. Every point is committed the moment it is measured; a restarted runner
keeps every committed point, re-applies the trial's config on the host (never trusting the
host's state) and measures only what is missing. A failed config is recorded with its evidence
and the sweep goes on (or stops, per policy); at the end or on cancel every host is restored
from the backup taken before the first change.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from orchestrator import engines
from orchestrator.bench import acceptlen
from orchestrator.bench.client import BenchClient, RequestRecord
from orchestrator.bench.coding import CodingResult, run_coding
from orchestrator.bench.matrix import PointResult
from orchestrator.bench.problems import Problem
from orchestrator.bench.sandbox import SandboxConfig
from orchestrator.causes import DETERMINISTIC_CAUSES
from orchestrator.cells import PromptSources, WorkloadSamples, client_connections, measure_cell
from orchestrator.host import gpu, systemd
from orchestrator.host.connect import open_host
from orchestrator.host.dropin import ExtraFlagConflict
from orchestrator.host.errors import HostError
from orchestrator.host.handle import HostHandle
from orchestrator.lifecycle import (
    RESTORE_ATTEMPTS,
    EventSink,
    HostSession,
    LifecycleTimeouts,
    Server,
    TrialDropin,
    TrialFailed,
    failure_from,
    reconfigure,
    restore_retrying,
    trial_config,
)
from orchestrator.log import get_logger
from orchestrator.plan import Trial, space_trials
from orchestrator.preflight import HostCheck, check_host, mapped_flags
from orchestrator.running import RunningServer
from orchestrator.search.budget import RESTART_EVENT, RestartBudget
from orchestrator.search.deadline import local_deadline
from orchestrator.store import (
    AcceptEstimate,
    AcceptLength,
    Attempt,
    CodingPoint,
    HostEntry,
    HostRecord,
    PointProvenance,
    Store,
    StoredRequest,
    SweepRecord,
    SweepResults,
    SweepState,
    ThroughputMetrics,
    ThroughputPoint,
    TrialPlan,
    TrialRecord,
    cell_point_key,
    point_from_record,
    point_key,
)
from orchestrator.store.results import config_label
from orchestrator.sweepfile import HostSpec, KnobMapping, Sweep
from orchestrator.trialsource import (
    SourcedTrial,
    TrialSource,
    TrialSourceFactory,
    plan_trial_source,
    sweep_problems,
    trial_plan,
)
from orchestrator.types import SYNTHETIC_WORKLOAD, MatrixCell


class Progress(Protocol):
    """Where the runner reports what each host is doing (the live display, the daemon)."""

    def update(self, host: str, **fields: Any) -> None: ...


class _NoProgress:
    def update(self, host: str, **fields: Any) -> None:
        pass


@dataclass
class SweepOutcome:
    """How a sweep ended, and its typed results."""

    sweep_id: int
    name: str
    state: str
    sweep_results: SweepResults

    @property
    def results(self) -> dict[str, Any]:
        """The results as ``run --json`` prints them (the JSON edge)."""
        return self.sweep_results.to_json()

    @property
    def all_succeeded(self) -> bool:
        return self.state == "done" and self.sweep_results.all_succeeded


@dataclass
class StopSignal:
    """Asks a running sweep to stop at its next safe step (between points and trials)."""

    reason: str | None = None
    event: asyncio.Event = field(default_factory=asyncio.Event)

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.event.set()

    @property
    def stopping(self) -> bool:
        return self.event.is_set()


def host_session(
    sweep: Sweep, host: HostSpec, handle: HostHandle, *, unit: str, events: EventSink
) -> HostSession:
    """The lifecycle's view of one of ``sweep``'s hosts over ``handle``: the same for a trial
    and for a restore by hand or after a crash."""
    return HostSession(
        host=handle,
        unit=unit,
        base_url=str(host.base_url).rstrip("/"),
        api=sweep.benchmark.api,
        model=sweep.server.model,
        gpus=tuple(host.gpus) if host.gpus else None,
        timeouts=lifecycle_timeouts(sweep),
        events=events,
        engine=engines.get(sweep.engine),
    )


def lifecycle_timeouts(sweep: Sweep) -> LifecycleTimeouts:
    """The restart protocol's bounds from a sweep file's ``timeouts``."""
    t = sweep.timeouts
    return LifecycleTimeouts(
        stop=t.stop,
        memory_release=t.memory_release,
        ready=t.ready,
        command=t.connect,
        probe_request=min(t.probe, t.request),
    )


@dataclass
class _SweepRun:
    """Shared state of one running sweep."""

    sweep: Sweep
    record: SweepRecord
    store: Store
    progress: Progress
    stop: StopSignal
    source: TrialSource
    """Where each host's next trial comes from (the plan in order, or a search)."""
    budget: RestartBudget
    """``search.max_restarts``: every unit start of a host type counts against it."""
    samples: WorkloadSamples
    """The workloads' samples, parsed once for the sweep."""
    failures: int = 0
    unrestored: list[str] = field(default_factory=list)
    """Hosts whose restore did not complete: the sweep ends failed and names them."""

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


async def run_sweep(
    sweep: Sweep,
    yaml_text: str,
    store: Store,
    *,
    source_path: str | None = None,
    replace: bool = False,
    progress: Progress | None = None,
    stop: StopSignal | None = None,
    now: Callable[[], dt.datetime] = dt.datetime.now,
    trials: TrialSourceFactory = plan_trial_source,
) -> SweepOutcome:
    """Run (or resume) ``sweep`` to its end; a sweep already finished is not run again.

    Each host asks ``trials``' source for its next trial (today: the plan, in order).
    """
    submitted = await store.submit_sweep(
        sweep.name,
        yaml_text,
        priority=sweep.priority,
        source_path=source_path,
        replace=replace,
        workloads=sweep.benchmark.workload_files(),
    )
    record = submitted.sweep
    if record.state in ("done", "failed", "cancelled"):
        return SweepOutcome(record.id, record.name, record.state, await store.results(record.id))
    # Every event of this sweep (ours, the lifecycle's, the transport's) carries its name and
    # id; the host tasks started below inherit them and add their host.
    with structlog.contextvars.bound_contextvars(sweep=sweep.name, sweep_id=record.id):
        return await _run_sweep(
            sweep, record, store, progress or _NoProgress(), stop or StopSignal(), now, trials
        )


async def _run_sweep(
    sweep: Sweep,
    record: SweepRecord,
    store: Store,
    progress: Progress,
    stop: StopSignal,
    now: Callable[[], dt.datetime],
    trials: TrialSourceFactory,
) -> SweepOutcome:
    log = get_logger()

    if sweep.schedule and sweep.schedule.not_before and record.state == "queued":
        start_at = local_deadline(sweep.schedule.not_before, now())
        wait_s = (start_at - now()).total_seconds()
        if wait_s > 0:
            log.info("sweep.waiting", not_before=start_at.isoformat())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await stop.event.wait()
    deadline_task: asyncio.Task[None] | None = None
    if sweep.schedule and sweep.schedule.finish_by:
        finish_at = local_deadline(sweep.schedule.finish_by, now())
        deadline_task = asyncio.create_task(
            _stop_at(stop, (finish_at - now()).total_seconds(), "finish_by deadline")
        )

    await store.add_hosts(record.id, [HostEntry(h.name, h.host_type) for h in sweep.hosts])
    source = await trials(store, record, sweep)
    budget = await RestartBudget.load(store, record.id, sweep)
    run = _SweepRun(
        sweep, record, store, progress, stop, source, budget, WorkloadSamples(sweep.benchmark)
    )
    resumed = record.state == "running"
    await store.set_sweep_state(record.id, "running")
    await run.event("sweep.started", {"trials": run.source.known, "resumed": resumed})
    log.info("sweep.started", trials=run.source.known, resumed=resumed)
    try:
        async with asyncio.TaskGroup() as group:
            for host in sweep.hosts:
                group.create_task(_run_host(run, host))
    finally:
        if deadline_task is not None:
            deadline_task.cancel()
    if stop.reason == "shutdown":
        # The daemon is stopping: the sweep stays running and the next start resumes it.
        await run.event("sweep.suspended", {"stopped": stop.reason})
        log.info("sweep.suspended")
        return SweepOutcome(record.id, record.name, "running", await store.results(record.id))
    state: SweepState
    error = None
    if stop.reason == "cancel":
        state = "cancelled"
    elif (stop.reason is not None and stop.reason.startswith("abort")) or run.unrestored:
        state = "failed"
    else:
        error = nothing_ran(await store.hosts(record.id), await store.attempts(record.id))
        state = "failed" if error else "done"
    summary: dict[str, Any] = {
        "stopped": stop.reason,
        "failed_attempts": run.failures,
        "unrestored_hosts": run.unrestored,
    }
    if error:
        summary["error"] = error
    await store.set_sweep_state(record.id, state, summary=summary)
    await run.event("sweep.finished", {"state": state, "stopped": stop.reason, "error": error})
    log.info("sweep.finished", state=state, stopped=stop.reason, error=error)
    return SweepOutcome(record.id, record.name, state, await store.results(record.id))


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


async def cancel_trials(store: Store, sweep_id: int, trials: Sequence[TrialRecord]) -> None:
    """``trials`` will not run because their sweep was cancelled: one never attempted gets a
    cancelled attempt, one left running (in flight, or interrupted earlier) ends cancelled;
    finished ones stay as they ended."""
    latest: dict[int, Attempt] = {}
    for attempt in await store.attempts(sweep_id):
        latest[attempt.trial_id] = attempt  # by number within a trial: the last one wins
    for trial in trials:
        last = latest.get(trial.id)
        if last is None:
            await store.skip_trial(trial.id, None, {"reason": "cancel"}, state="cancelled")
        elif last.state == "running":
            await store.finish_attempt(last.id, "cancelled", evidence={"reason": "cancel"})


async def _latest_attempt(store: Store, sweep_id: int, trial_id: int) -> Attempt | None:
    attempts = [a for a in await store.attempts(sweep_id) if a.trial_id == trial_id]
    return attempts[-1] if attempts else None


async def _stop_at(stop: StopSignal, seconds: float, reason: str) -> None:
    await asyncio.sleep(max(seconds, 0.0))
    stop.stop(reason)


# --- one host ------------------------------------------------------------------------------


async def _run_host(run: _SweepRun, host: HostSpec) -> None:
    """Preflight, backup, the trials the source gives this host, then restore. Crash-safe at
    each step."""
    structlog.contextvars.bind_contextvars(host=host.name)  # this host's task and its children
    sweep, store = run.sweep, run.store
    log = get_logger()
    handle = open_host(host, connect_timeout=sweep.timeouts.connect)

    async def events(kind: str, /, **fields: Any) -> None:
        await run.event(kind, fields, host=host.name)

    session = host_session(sweep, host, handle, unit=sweep.server.unit, events=events)
    try:
        check = await _preflight(run, host, session)
        if not check.ok:
            await _set_aside(run, host, run.source.withdraw(host.name), check)
            return
        await _load_or_take_backup(run, session)
        restore_attempts = await _run_trials(run, session, host, check)
        if run.stop.reason == "cancel":
            await cancel_trials(
                store, run.record.id, [t.record for t in run.source.withdraw(host.name)]
            )
        await _restore_host(run, session, attempts=restore_attempts)
    except HostError as exc:
        # Outside a trial (reading the unit as found): the host, not a bug of ours.
        failed = failure_from(exc)
        unreachable = failed.cause == "host-unreachable"
        kind = "host.unreachable" if unreachable else "host.failed"
        log.error(kind, cause=failed.cause, error=str(exc))
        await events(kind, cause=failed.cause, error=str(exc))
        reason = f"unreachable: {exc}" if unreachable else f"{failed.cause}: {exc}"
        await store.set_host_aside(run.record.id, host.name, reason)
        if await store.pending_restores(sweep_id=run.record.id, host=host.name):
            run.unrestored.append(host.name)
    except Exception as exc:
        # Other hosts go on; this host's state is in the events and its backup in the store.
        log.exception("host.error")
        await events("host.error", error=repr(exc), traceback=traceback.format_exc()[-4000:])
        await store.set_host_aside(run.record.id, host.name, f"orchestrator error: {exc!r}")
        if await store.pending_restores(sweep_id=run.record.id, host=host.name):
            run.unrestored.append(host.name)
    finally:
        run.progress.update(host.name, step="done", trial=None, config=None)
        await handle.close()


async def _preflight(run: _SweepRun, host: HostSpec, session: HostSession) -> HostCheck:
    """Everything about the host that can be known before anything on it changes, every
    config of the space asked of the host's own engine (:mod:`orchestrator.preflight`)."""
    sweep = run.sweep
    knobs = host.effective_knobs(sweep.server.knobs)
    run.progress.update(host.name, step="preflight", trial=None, config=None)
    check = await check_host(
        session.host,
        unit=sweep.server.unit,
        flags=mapped_flags(knobs, sweep.server.extra_flags),
        gpus=host.gpus,
        command_timeout=sweep.timeouts.connect,
        model=sweep.server.model,
        api=sweep.benchmark.api,
        base_url=session.base_url,
        extra_flags=sweep.server.extra_flags,
        metrics=sweep.server.metrics,
        trials=space_trials(sweep, host.name),
        knobs=knobs,
        environment=sweep.server.environment,
        engine=session.engine,
    )
    await session.events("preflight", **check.to_json())
    return check


async def _run_trials(
    run: _SweepRun, session: HostSession, host: HostSpec, check: HostCheck
) -> int:
    """The trials the source gives this host, one at a time, each told back to it; returns
    how many tries the host's restore gets (one when the host was just lost)."""
    store = run.store
    while not run.stop.stopping and not _cap_reached(run, host.name):
        # At the type's max_restarts nothing more can start here: what was not offered
        # stays queued (attempt null), never a "skipped" entry that is no start.
        sourced = await run.source.next_trial(host.name)
        if sourced is None:
            break
        planned, trial = sourced.planned, sourced.record
        lost: _HostLost | None = None
        try:
            with structlog.contextvars.bound_contextvars(trial=trial.key):
                await _run_trial(run, session, host, planned, trial, check)
        except _HostLost as error:
            lost = error
        await run.source.tell(sourced, await _latest_attempt(store, run.record.id, trial.id))
        if lost is not None:
            # Each further trial would spend the whole reconnect budget to fail the same
            # way: set the host aside now; the restore below still gets its one chance.
            for rest in run.source.withdraw(host.name):
                await store.skip_trial(rest.record.id, "host-unreachable", {"reason": str(lost)})
            await store.set_host_aside(run.record.id, host.name, f"unreachable: {lost}")
            return 1
    return RESTORE_ATTEMPTS


async def _set_aside(
    run: _SweepRun, host: HostSpec, trials: Sequence[SourcedTrial], check: HostCheck
) -> None:
    reason = check.reason or "preflight failed"
    await run.store.set_host_aside(run.record.id, host.name, reason)
    for trial in trials:
        await run.store.skip_trial(trial.record.id, "host-set-aside", {"reason": reason})
    get_logger(host=host.name).warning("host.set_aside", reason=reason)


def snapshot_to_backup(
    snapshot: systemd.UnitSnapshot,
) -> tuple[dict[str, bytes | None], dict[str, str]]:
    files: dict[str, bytes | None] = {f.path: f.data for f in snapshot.files}
    files[snapshot.dropin_path] = snapshot.dropin_before
    state = dict(snapshot.state.raw)
    state["__dropin_path"] = snapshot.dropin_path
    state["__dropin_dir_existed"] = "yes" if snapshot.dropin_dir_existed else "no"
    state["__dropin_mode"] = oct(snapshot.dropin_mode)
    return files, state


def backup_to_snapshot(
    unit: str, files: Mapping[str, bytes | None], state: Mapping[str, str]
) -> systemd.UnitSnapshot:
    raw = {k: v for k, v in state.items() if not k.startswith("__")}
    dropin = state["__dropin_path"]
    decoded = dict(files)
    return systemd.UnitSnapshot(
        unit=unit,
        state=systemd.unit_state(raw),
        files=tuple(
            systemd.FileBytes(p, d) for p, d in decoded.items() if d is not None and p != dropin
        ),
        dropin_path=dropin,
        dropin_before=decoded.get(dropin),
        dropin_dir_existed=state["__dropin_dir_existed"] == "yes",
        dropin_mode=int(state["__dropin_mode"], 8),
    )


async def _load_or_take_backup(run: _SweepRun, session: HostSession) -> None:
    """The unit as found, from the store when this sweep already backed it up (a resumed run
    must not take the host's current, changed state for the original)."""
    backup = await run.store.get_unit_backup(run.record.id, session.name, session.unit)
    if backup is not None:
        session.found = backup_to_snapshot(session.unit, backup.files, backup.state)
        session.baseline = await _stored_baseline(run, session.name)
        await session.events("backup.loaded", baseline=session.baseline is not None)
        return
    snapshot = await session.read_found()
    files, state = snapshot_to_backup(snapshot)
    await run.store.save_unit_backup(run.record.id, session.name, session.unit, files, state)
    await session.events("backup.saved", files=sorted(files))


async def _stored_baseline(run: _SweepRun, host: str) -> gpu.Baseline | None:
    """The idle GPU baseline this sweep measured on ``host`` before it changed anything.

    A resumed run must not measure it again: killed during a memory wait, the old server's
    memory is still held with no process listed, and a fresh reading would count it as idle.
    """
    found = await run.store.events(run.record.id, host=host, kinds=("gpu.baseline",))
    for event in found:
        used = event.fields.get("used_mib")
        if isinstance(used, dict) and used:
            return gpu.Baseline(used_mib={int(k): int(v) for k, v in used.items()})
    return None


async def _restore_host(
    run: _SweepRun, session: HostSession, *, attempts: int = RESTORE_ATTEMPTS
) -> None:
    if run.stop.reason == "shutdown":
        return  # the daemon stops; the sweep resumes later, so the host keeps its trial
    run.progress.update(session.name, step="restore", trial=None, config=None)
    try:
        foreign = await restore_retrying(session, run.sweep.policy.restore, attempts=attempts)
    except TrialFailed as exc:
        # e.g. memory-not-released: the files are back, the unit is not started over held
        # memory; the host stays pending for a later restore.
        await session.events("restore.failed", cause=exc.cause, error=exc.message)
        reason = (
            f"unreachable: {exc.message}"
            if exc.cause == "host-unreachable"
            else f"restore incomplete: {exc.cause}"
        )
        await run.store.set_host_aside(run.record.id, session.name, reason)
        run.unrestored.append(session.name)
        return
    await run.store.mark_restored(run.record.id, session.name)
    if foreign:
        await session.events("restore.foreign_changes", paths=foreign)


# --- one trial -----------------------------------------------------------------------------


async def _run_trial(
    run: _SweepRun,
    session: HostSession,
    host: HostSpec,
    planned: Trial,
    trial: TrialRecord,
    check: HostCheck,
) -> TrialDropin | None:
    """Attempts of one trial until it succeeds, fails for good, or the sweep stops."""
    store, sweep = run.store, run.sweep
    attempts = [a for a in await store.attempts(run.record.id) if a.trial_id == trial.id]
    latest = attempts[-1] if attempts else None
    retries = sweep.policy.trial_retries
    if latest is not None and latest.state in ("done", "skipped", "cancelled"):
        return None
    if latest is not None and latest.state == "failed" and not _may_retry(latest, retries):
        return None
    knobs = host.effective_knobs(sweep.server.knobs)
    if await _refused_by_preflight(run, planned, trial, latest, check, knobs):
        return None
    assert session.found is not None
    if latest is not None and latest.state == "running":
        attempt = await store.resume_attempt(latest.id)
    else:
        attempt = await store.start_attempt(trial.id)
    try:
        config = trial_config(
            session.found,
            sweep=sweep.name,
            key=trial.key,
            knobs=knobs,
            config=planned.config,
            extra_flags=sweep.server.extra_flags,
            environment=sweep.server.environment,
            metrics=sweep.server.metrics,
            engine=session.engine,
        )
    except ExtraFlagConflict as conflict:
        # Only the host's real command line shows it (validate saw the sweep's exec_start):
        # which value the server would take is up to its parser, so this config cannot run.
        evidence = {"found_by": "drop-in", "message": str(conflict), "flag": conflict.flag}
        await _fail_attempt(run, planned, attempt, "invalid-config", evidence, str(conflict))
        return None
    while True:
        run.progress.update(
            session.name,
            trial=trial.key,
            config=config_label(planned.config),
            step="reconfigure",
            attempt=attempt.number,
        )
        if not await _take_restart(run, session, attempt):
            return None
        try:
            server = await reconfigure(session, config)
            await store.set_attempt_invocation(attempt.id, server.invocation_id)
            await _measure_trial(run, session, attempt, server, trial)
            await store.finish_attempt(attempt.id, "done", evidence=_server_evidence(server))
            return config
        except _Stopped:
            await _stopped_attempt(run, attempt)
            return config
        except Exception as exc:
            if not await _retry_after(run, session, planned, trial, attempt, exc):
                return config
            attempt = await store.start_attempt(trial.id)


async def _stopped_attempt(run: _SweepRun, attempt: Attempt) -> None:
    """The attempt in flight when the sweep was asked to stop: a cancel is not a failure (the
    operator called it off); a shutdown leaves it running, so the next start resumes it."""
    if run.stop.reason == "cancel":
        await run.store.finish_attempt(attempt.id, "cancelled", evidence={"reason": "cancel"})
    elif run.stop.reason != "shutdown":
        await run.store.finish_attempt(
            attempt.id, "failed", cause="stopped", evidence={"reason": run.stop.reason}
        )


async def _retry_after(
    run: _SweepRun,
    session: HostSession,
    planned: Trial,
    trial: TrialRecord,
    attempt: Attempt,
    exc: Exception,
) -> bool:
    """Record a failed attempt; True when the trial gets another. The one mapping: a host's
    failure with its cause and evidence; anything else is a bug of ours, recorded as
    orchestrator-error with its traceback (never retried) so that it does not end the night.
    A host that cannot be reached raises :class:`_HostLost`."""
    failed = failure_from(exc)
    run.failures += 1
    if failed.cause == "orchestrator-error":
        log = get_logger(sweep=run.sweep.name, host=session.name, trial=trial.key)
        log.exception("trial.orchestrator_error", exc_info=exc)
    await run.store.finish_attempt(
        attempt.id, "failed", cause=failed.cause, evidence=failed.to_json()
    )
    _warn_failed(planned, failed.cause, failed.message, attempt=attempt.number)
    await session.events(
        "trial.failed", trial=trial.key, attempt=attempt.number, cause=failed.cause
    )
    finished = await run.store.get_attempt(attempt.id)
    if (
        run.stop.stopping
        or not _may_retry(finished, run.sweep.policy.trial_retries)
        or _cap_reached(run, session.name)  # a retry is a start like any other
    ):
        await _after_failure(run)
        if failed.cause == "host-unreachable":
            raise _HostLost(failed.message) from failed
        return False
    return True


async def _refused_by_preflight(
    run: _SweepRun,
    planned: Trial,
    trial: TrialRecord,
    latest: Attempt | None,
    check: HostCheck,
    knobs: Mapping[str, KnobMapping],
) -> bool:
    """Fail the trial without a restart when the preflight showed it cannot start: a flag
    this build does not know, or an argv the host's own parser refused (a bad value or
    choice, a resolution error: it would die at startup the same way)."""
    unknown = sorted(
        knobs[name].flag or ""
        for name, value in planned.config.items()
        if value is not None and knobs[name].flag in check.unknown_flags
    )
    refused = check.refusal(planned.key)
    if not unknown and (refused is None or refused.cause is None):
        return False
    running = latest if latest is not None and latest.state == "running" else None
    attempt = running or await run.store.start_attempt(trial.id)
    if unknown:
        evidence = {"found_by": "preflight", "unknown_flags": unknown}
        message = f"unknown to this build: {' '.join(unknown)}"
        await _fail_attempt(run, planned, attempt, "bad-flag", evidence, message)
    elif refused is not None and refused.cause is not None:
        await _fail_attempt(
            run, planned, attempt, refused.cause, refused.evidence(), refused.error or ""
        )
    return True


async def _fail_attempt(
    run: _SweepRun,
    planned: Trial,
    attempt: Attempt,
    cause: str,
    evidence: Mapping[str, Any],
    message: str,
) -> None:
    """An attempt that failed before any restart was made for it: recorded with its evidence,
    warned of, and held against the failure policy."""
    await run.store.finish_attempt(attempt.id, "failed", cause=cause, evidence=dict(evidence))
    run.failures += 1
    _warn_failed(planned, cause, message)
    await _after_failure(run)


def _cap_reached(run: _SweepRun, host: str) -> bool:
    """``host``'s type has spent its ``search.max_restarts``."""
    left = run.budget.left(host)
    return left is not None and left <= 0


async def _take_restart(run: _SweepRun, session: HostSession, attempt: Attempt) -> bool:
    """Count the unit start about to be made against ``search.max_restarts`` (recorded before
    the start, so a resumed run counts it too); a start past the cap is not made and its
    attempt ends skipped."""
    host = session.name
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


async def _measure_trial(
    run: _SweepRun, session: HostSession, attempt: Attempt, server: Server, trial: TrialRecord
) -> None:
    """The trial's stored plan, then whatever its source extends it with on the same server
    (a promising screen goes on with the full matrix: no second restart); each extension is
    stored with the trial before it is measured, so a resumed attempt measures the same."""
    plan = trial.plan or trial_plan(run.sweep)
    while True:
        await _measure(run, session, attempt, server, plan)
        stored = await run.store.points(attempt_id=attempt.id)
        extended = await run.source.extend(trial, [point_from_record(p) for p in stored])
        if extended is None or extended == plan:
            return
        trial = await run.store.set_trial_plan(trial.id, extended)
        await session.events(
            "trial.extended",
            trial=trial.key,
            purpose=extended.purpose,
            cells=len(extended.cells),
            problems=len(extended.problems),
        )
        plan = extended


def _warn_failed(planned: Trial, cause: str, message: str, *, attempt: int = 1) -> None:
    """A failed attempt is a warning: a person at the terminal (which shows warnings only)
    learns of it when it happens, not at the sweep's end; the host and trial are bound."""
    get_logger().warning(
        "trial.failed",
        config=config_label(planned.config),
        attempt=attempt,
        cause=cause,
        message=message[:300],
    )


def _may_retry(attempt: Attempt, retries: int) -> bool:
    return attempt.number <= retries and attempt.cause not in DETERMINISTIC_CAUSES


async def _after_failure(run: _SweepRun) -> None:
    if run.sweep.policy.on_trial_failure == "abort":
        run.stop.stop("abort: a trial failed and policy.on_trial_failure is abort")


def _server_evidence(server: Server) -> dict[str, Any]:
    return {
        "invocation_id": server.invocation_id,
        "main_pid": server.main_pid,
        "timeline": dict(server.timeline),
        "provenance": server.provenance.to_json(),
        "overridden": [
            {
                "knob": d.knob,
                "where": d.where,
                "expected": d.expected,
                "actual": d.actual,
                "why": d.reason,
            }
            for d in server.overridden
        ],
    }


class _HostLost(Exception):
    """A trial failed for good because the host cannot be reached."""


class _Stopped(Exception):
    """The sweep was asked to stop between two points; the attempt stays resumable."""


# --- measuring -----------------------------------------------------------------------------


async def _measure(
    run: _SweepRun, session: HostSession, attempt: Attempt, server: Server, plan: TrialPlan
) -> None:
    """The trial's planned cells, then the coding anchor; each point committed as measured,
    committed points of a resumed attempt skipped.

    What is measured is the plan stored with the trial when it was planned (its cells and
    rounds), not the sweep file's matrix: a trial source may plan trials of other fidelities.
    """
    sweep, store = run.sweep, run.store
    bench = sweep.benchmark
    committed = await store.committed_point_keys(attempt.id)
    problems = _planned_problems(sweep, plan)
    total = len(plan.cells) + len(problems)
    done = len(committed)
    async with BenchClient(
        server.base_url,
        api=bench.api,
        model=sweep.server.model,
        concurrency=client_connections(bench),
        request_timeout=sweep.timeouts.request,
        engine=session.engine,
    ) as client:
        running = RunningServer(session, server)
        sources = PromptSources(session.name, client, bench, run.samples, plan.cells, plan.rounds)
        for cell in plan.cells:
            if cell_point_key(cell) in committed:
                continue
            if run.stop.stopping:
                raise _Stopped
            run.progress.update(session.name, step=_cell_step(cell), done=done, total=total)
            point = await measure_cell(
                client,
                sources,
                cell,
                bench,
                rounds=plan.rounds,
                seed=sweep.search.seed,
                before_measured=running.cursor,
            )
            cursor = point.measured_marker
            window = await running.window(cursor)
            point.attach_journal(running.decode_samples(window))
            point.invocation_id = server.invocation_id
            point.journal_cursor_start = cursor
            point.journal_cursor_end = window.end
            stored, requests = _throughput_point(point)
            await store.record_point(attempt.id, stored, requests)
            done += 1
            run.progress.update(
                session.name,
                done=done,
                total=total,
                last_point=point.metrics.as_fields(),
                point=stored,
            )
            # After the journal window has settled, not beside it: a server that crashed
            # at the point's end exits a little later (tests/faults caught the race).
            await running.check_alive(cursor)
        if sweep.coding is not None:
            pending = [p for p in problems if point_key("coding", problem=p.id) not in committed]
            await _measure_coding(run, running, client, attempt, pending, done, total)


async def _measure_coding(
    run: _SweepRun,
    running: RunningServer,
    client: BenchClient,
    attempt: Attempt,
    problems: Sequence[Problem],
    done: int,
    total: int,
) -> None:
    """The coding anchor's problems not committed yet, each a point as it is scored."""
    sweep, host = run.sweep, running.session.name
    assert sweep.coding is not None
    for problem in problems:
        if run.stop.stopping:
            raise _Stopped
        run.progress.update(host, step=f"coding {problem.id}", done=done, total=total)
        started = time.time()
        cursor = await running.cursor()
        (result,) = await run_coding(
            client,
            [problem],
            api=sweep.benchmark.api,
            model=sweep.server.model,
            max_tokens=sweep.coding.max_tokens,
            temperature=sweep.coding.temperature,
            timeout_s=sweep.timeouts.request,
            sandbox=SandboxConfig(wall_timeout_s=sweep.coding.timeout_s),
        )
        await run.store.record_point(
            attempt.id, _coding_point(result, running.invocation_id, started), []
        )
        done += 1
        run.progress.update(host, done=done, total=total)
        await running.check_alive(cursor)


def _cell_step(cell: MatrixCell) -> str:
    """The live display's step: ``ctx 4096 x c32``, ``ctx 4096 x 8 req/s`` (``, chat``...)."""
    step = f"ctx {cell.context} x {cell.load}"
    return step if cell.workload == SYNTHETIC_WORKLOAD else f"{step}, {cell.workload}"


def _planned_problems(sweep: Sweep, plan: TrialPlan) -> list[Problem]:
    """The coding problems the plan names, read from the sweep's problem file now (a file that
    cannot be read fails the attempt here, with the error as evidence); a plan that names none
    while the sweep has coding (stored when the file could not be read) takes the file's."""
    if sweep.coding is None:
        return []
    problems = sweep_problems(sweep)
    if not plan.problems:
        return problems
    wanted = set(plan.problems)
    return [p for p in problems if p.id in wanted]


def _stored_request(record: RequestRecord) -> StoredRequest:
    data = record.to_dict()
    return StoredRequest(
        sent_at=record.send_time,
        ttft_s=record.ttft,
        e2e_s=record.e2e,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens,
        finish_reason=record.finish_reason,
        error=None if record.error is None else record.error.value,
        warmup=record.phase == "warmup",
        extra={
            k: data[k]
            for k in (
                "tpot_s",
                "chunks",
                "spec_verify_ct",
                "spec_accept_length",
                "spec_num_correct_drafts",
                "spec_num_proposed_drafts",
                "http_status",
                "error_detail",
                "token_source",
                "label",
            )
        },
    )


def _throughput_point(point: PointResult) -> tuple[ThroughputPoint, list[StoredRequest]]:
    spec, c = point.spec, point.calibration
    fields: dict[str, Any] = {
        **point.metrics.as_fields(),
        "calibration": {
            "filler_words": c.filler_words,
            "measured_tokens": c.measured_tokens,
            "tolerance": c.tolerance,
            "requests": c.requests,
            "workload": c.workload,
            "method": c.method,
        },
        "slo": None if spec.slo is None else spec.slo.to_dict(),
    }
    if spec.rate is not None:
        fields.update(
            arrivals=spec.arrivals,
            seed=spec.seed,
            duration_s=spec.duration_s,
            max_concurrency=spec.max_concurrency,
            arrival_schedule=list(point.schedule),
        )
    metrics = ThroughputMetrics.from_json(fields)
    accept = point.accept_len
    new = ThroughputPoint(
        context=spec.context,
        concurrency=spec.concurrency,
        rate=spec.rate,
        workload=spec.workload,
        metrics=metrics,
        accept=AcceptLength(
            value=accept.best,
            journal=_estimate(accept.journal),
            meta_info=_estimate(accept.meta_info),
            metrics=_estimate(accept.metrics),
            flags=tuple(accept.flags),
        ),
        quality=tuple(point.flags),
        provenance=PointProvenance(
            invocation_id=point.invocation_id,
            cursor_start=point.journal_cursor_start,
            cursor_end=point.journal_cursor_end,
            started_at=point.started_unix,
            finished_at=point.started_unix + (point.ended_monotonic - point.started_monotonic),
        ),
    )
    return new, [_stored_request(r) for r in point.requests]


def _estimate(estimate: acceptlen.Estimate) -> AcceptEstimate:
    return AcceptEstimate(estimate.value, estimate.count, estimate.reason)


def _coding_point(result: CodingResult, invocation_id: str, started: float) -> CodingPoint:
    return CodingPoint(
        problem=result.problem_id,
        outcome=result.outcome,
        detail=result.detail,
        finish_reason=result.finish_reason,
        completion_tokens=result.completion_tokens,
        elapsed_s=result.elapsed_s,
        tokens_per_s=result.tokens_per_s,
        code=result.code,
        output=result.output_text,
        containment=result.sandbox.containment if result.sandbox else None,
        provenance=PointProvenance(
            invocation_id=invocation_id, started_at=started, finished_at=time.time()
        ),
    )
