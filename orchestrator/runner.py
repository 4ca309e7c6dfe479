"""One sweep, unattended: hosts in parallel, on each host its trials one at a time.

The store is the truth. Every point is committed the moment it is measured; a restarted runner
keeps every committed point, re-applies the trial's config on the host (never trusting the
host's state) and measures only what is missing. A failed config is recorded with its evidence
and the sweep goes on (or stops, per policy); at the end or on cancel every host is restored
from the backup taken before the first change.

The runner holds what is the sweep's and each host's: the schedule, each host's lease,
preflight, backup and restore, and how the sweep ended. A host's trials are the host loop's
(:func:`orchestrator.hostloop.run_host_trials`) over its session driver
(:class:`orchestrator.driver.SessionDriver`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from orchestrator.cells import WorkloadSamples
from orchestrator.driver import SessionDriver
from orchestrator.host import gpu
from orchestrator.host.connect import open_host
from orchestrator.host.errors import HostError
from orchestrator.host.fence import held
from orchestrator.host.handle import HostHandle
from orchestrator.host.lease import (
    Controller,
    HostBusy,
    HostLease,
    take_or_wait,
    take_over_fields,
    took_over_someone_else,
)
from orchestrator.hostloop import (
    INTERRUPT,
    RESTORE_ATTEMPTS_AFTER_LOSS,
    NoProgress,
    Progress,
    StopSignal,
    SweepContext,
    cancel_trials,
    run_host_trials,
    set_aside,
    until_aborted,
    withdraw,
)
from orchestrator.lifecycle import (
    RESTORE_ATTEMPTS,
    HostSession,
    TrialFailed,
    clear_stale,
    failure_from,
    restore_retrying,
)
from orchestrator.log import get_logger
from orchestrator.preflight import HostCheck, check_sweep_host
from orchestrator.search.budget import RestartBudget
from orchestrator.search.deadline import local_deadline
from orchestrator.sessions import backup_to_snapshot, host_session, snapshot_to_backup
from orchestrator.store import (
    HostEntry,
    Store,
    SubmitResult,
    SweepRecord,
    SweepResults,
    SweepState,
)
from orchestrator.store.records import nothing_ran
from orchestrator.sweepfile import HostSpec, Sweep
from orchestrator.trialsource import TrialSourceFactory, plan_trial_source
from orchestrator.types import DEADLINE_STOP


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
class _SweepRun(SweepContext):
    """Shared state of one running sweep: the host loop's, and what the runner's drivers and
    restores add to it."""

    store: Store  # all of it: the runner also backs up, restores and ends the sweep
    samples: WorkloadSamples = field(kw_only=True)
    """The workloads' samples, parsed once for the sweep."""
    controller: Controller = field(kw_only=True)
    """Who runs the sweep, as each host's lease names it."""
    unrestored: list[str] = field(default_factory=list, kw_only=True)
    """Hosts whose restore did not complete: the sweep ends failed and names them."""
    cleared_on_take: set[str] = field(default_factory=set, kw_only=True)
    """Hosts whose lease this sweep took over from another sweep's dead or stalled holder:
    its leftovers are cleared before anything else."""


async def submit_sweep(
    store: Store, sweep: Sweep, yaml_text: str, *, source_path: str | None, replace: bool
) -> SubmitResult:
    """Queue ``sweep`` (its text and workload files) in ``store``: a foreground run, the
    daemon's intake and a run's claim on a shared store queue it alike."""
    return await store.submit_sweep(
        sweep.name,
        yaml_text,
        priority=sweep.priority,
        source_path=source_path,
        replace=replace,
        workloads=sweep.benchmark.workload_files(),
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
    controller: Controller | None = None,
) -> SweepOutcome:
    """Run (or resume) ``sweep`` to its end; a sweep already finished is not run again.

    Each host asks ``trials``' source for its next trial (today: the plan, in order).
    ``controller``: who runs it, as each host's lease names it (a foreground ``run`` of
    ``store``'s file when None).
    """
    controller = controller or Controller("run", str(store.path))
    submitted = await submit_sweep(
        store, sweep, yaml_text, source_path=source_path, replace=replace
    )
    record = submitted.sweep
    if record.state in ("done", "failed", "cancelled"):
        return SweepOutcome(record.id, record.name, record.state, await store.results(record.id))
    # Every event of this sweep (ours, the lifecycle's, the transport's) carries its name and
    # id; the host tasks started below inherit them and add their host.
    with structlog.contextvars.bound_contextvars(sweep=sweep.name, sweep_id=record.id):
        stop = stop or StopSignal()
        deadline = await _scheduled(sweep, record, stop, now)
        try:
            await store.add_hosts(record.id, [HostEntry(h.name, h.host_type) for h in sweep.hosts])
            source = await trials(store, record, sweep)
            budget = await RestartBudget.load(store, record.id, sweep)
            run = _SweepRun(
                sweep, record, store, progress or NoProgress(), stop, source, budget,
                samples=WorkloadSamples(sweep.benchmark), controller=controller,
            )  # fmt: skip
            await _started(run)
            async with asyncio.TaskGroup() as group:
                for host in sweep.hosts:
                    group.create_task(_run_host(run, host))
        finally:
            if deadline is not None:
                deadline.cancel()
        return await _finished(run)


async def _scheduled(
    sweep: Sweep, record: SweepRecord, stop: StopSignal, now: Callable[[], dt.datetime]
) -> asyncio.Task[None] | None:
    """Wait for ``schedule.not_before`` (a sweep not started yet; a stop ends the wait), then
    arm ``schedule.finish_by``: the task that stops the sweep when it comes."""
    schedule = sweep.schedule
    if schedule and schedule.not_before and record.state == "queued":
        start_at = local_deadline(schedule.not_before, now())
        wait_s = (start_at - now()).total_seconds()
        if wait_s > 0:
            get_logger().info("sweep.waiting", not_before=start_at.isoformat())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await stop.event.wait()
    if not (schedule and schedule.finish_by):
        return None
    finish_at = local_deadline(schedule.finish_by, now())
    return asyncio.create_task(stop.at((finish_at - now()).total_seconds(), DEADLINE_STOP))


async def _started(run: _SweepRun) -> None:
    """The sweep marked running (``resumed`` when it had run before)."""
    resumed = run.record.state in ("running", "interrupted")
    await run.store.set_sweep_state(run.record.id, "running")
    await run.event("sweep.started", {"trials": run.source.known, "resumed": resumed})
    get_logger().info("sweep.started", trials=run.source.known, resumed=resumed)


async def _finished(run: _SweepRun) -> SweepOutcome:
    """How the sweep ended, recorded with its summary: cancelled, interrupted, failed (an
    abort, a host left unrestored, or nothing ran) or done; a daemon's shutdown leaves it
    running for the next start to resume."""
    store, record, stop, log = run.store, run.record, run.stop, get_logger()
    if stop.reason == "shutdown":
        # The daemon is stopping: the sweep stays running and the next start resumes it.
        await run.event("sweep.suspended", {"stopped": stop.reason})
        log.info("sweep.suspended")
        return SweepOutcome(record.id, record.name, "running", await store.results(record.id))
    state: SweepState
    error = None
    if stop.reason == "cancel":
        state = "cancelled"
    elif stop.reason == INTERRUPT:
        state = "interrupted"
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


# --- one host ------------------------------------------------------------------------------


async def _run_host(run: _SweepRun, host: HostSpec) -> None:
    """The host's lease (waited for or set aside per ``policy.hosts_busy``), then preflight,
    backup, the trials the source gives this host and the restore, every change fenced by the
    lease; the lease given back after the restore. Crash-safe at each step."""
    structlog.contextvars.bind_contextvars(host=host.name)  # this host's task and its children
    sweep, log = run.sweep, get_logger()
    handle = open_host(host, connect_timeout=sweep.timeouts.connect)

    async def events(kind: str, /, **fields: Any) -> None:
        await run.event(kind, fields, host=host.name)

    try:
        lease = await _take_lease(run, host, handle, events)
        if lease is None:
            return
        async with held(lease, handle) as fenced_handle:
            session = host_session(sweep, host, fenced_handle, unit=sweep.unit, events=events)
            restored = await _host_sweep(run, host, session, lease)
        if restored:
            await lease.release()
            await events("lease.released", token=lease.token)
    except HostError as exc:
        # Outside a trial (reading the unit as found): the host, not a bug of ours.
        failed = failure_from(exc)
        unreachable = failed.cause == "host-unreachable"
        kind = "host.unreachable" if unreachable else "host.failed"
        log.error(kind, cause=failed.cause, error=str(exc))
        await events(kind, cause=failed.cause, error=str(exc))
        reason = f"unreachable: {exc}" if unreachable else f"{failed.cause}: {exc}"
        await _host_failed(run, host.name, reason)
    except Exception as exc:
        # Other hosts go on; this host's state is in the events and its backup in the store.
        log.exception("host.error")
        await events("host.error", error=repr(exc), traceback=traceback.format_exc()[-4000:])
        await _host_failed(run, host.name, f"orchestrator error: {exc!r}")
    finally:
        run.progress.update(host.name, step="done", trial=None, config=None)
        await handle.close()


async def _host_failed(run: _SweepRun, host: str, reason: str) -> None:
    """``host`` failed outside a trial: set aside for ``reason``, and named unrestored while
    its backup is still pending."""
    await run.store.set_host_aside(run.record.id, host, reason)
    if await run.store.pending_restores(sweep_id=run.record.id, host=host):
        run.unrestored.append(host)


async def _take_lease(
    run: _SweepRun, host: HostSpec, handle: HostHandle, events: Any
) -> HostLease | None:
    """The host's lease for this sweep; None when the host is set aside instead (another
    controller holds it and the sweep does not wait, or stopped while it waited). A take-over
    of a dead or stalled holder is recorded with the old holder's identity."""
    policy = run.sweep.policy
    holder = run.controller.holder(run.sweep.name, run.record.id)

    async def waiting(words: str) -> None:
        run.progress.update(host.name, step=f"waiting: {words}", trial=None, config=None)
        get_logger().warning("host.busy", holder=words)
        await events("lease.waiting", holder=words)

    try:
        taken = await take_or_wait(
            handle,
            holder,
            expiry_s=policy.lease_expiry,
            busy=policy.hosts_busy,
            stop=run.stop.event,
            waiting=waiting,
            timeout=run.sweep.timeouts.connect,
        )
    except HostBusy as busy:
        # Another controller holds the host: its trials are not run by this sweep (cancelled
        # when the sweep was cancelled meanwhile, left queued for an interrupted one).
        await run.event("lease.refused", {"holder": str(busy)}, host=host.name)
        await withdraw(run, host.name, f"busy: {busy}")
        return None
    except HostError as exc:
        # Nothing on the host has changed yet: set aside as the preflight sets aside a host
        # it cannot reach (the reason is the error itself, the trials skipped).
        await withdraw(run, host.name, str(exc))
        return None
    assert taken.lease is not None
    await events("lease.taken", token=taken.lease.token, expiry_s=policy.lease_expiry)
    if took_over_someone_else(taken, holder):
        await events("lease.taken_over", **take_over_fields(taken))
        run.cleared_on_take.add(host.name)
    return taken.lease


async def _host_sweep(
    run: _SweepRun, host: HostSpec, session: HostSession, lease: HostLease
) -> bool:
    """What the sweep does on a host it holds; True when the host was restored (or left as
    the sweep's policy says) and the lease may be given back."""
    if host.name in run.cleared_on_take:
        await clear_stale(session)
    check = await _preflight(run, host, session)
    if not check.ok:
        reason = check.reason or "preflight failed"
        await set_aside(run, host.name, run.source.withdraw(host.name), reason)
        return True
    await _load_or_take_backup(run, session)
    driver = SessionDriver(run.sweep, run.samples, session, host, check, lease)
    kept = await until_aborted(run, host.name, run_host_trials(run, driver))
    if lease.lost is not None:
        # Another controller holds the host now and restores it as it took it: nothing of
        # ours may change it; the backup stays pending in this store.
        await session.events("restore.skipped", why=f"lease lost: {lease.lost.why}")
        return False
    restore_attempts = RESTORE_ATTEMPTS if kept else RESTORE_ATTEMPTS_AFTER_LOSS
    if run.stop.reason == "cancel":
        await cancel_trials(
            run.store, run.record.id, [t.record for t in run.source.withdraw(host.name)]
        )
    return await _restore_host(run, session, attempts=restore_attempts)


async def _preflight(run: _SweepRun, host: HostSpec, session: HostSession) -> HostCheck:
    """Everything about the host that can be known before anything on it changes, every
    config of the space asked of the host's own engine (:mod:`orchestrator.preflight`)."""
    run.progress.update(host.name, step="preflight", trial=None, config=None)
    check = await check_sweep_host(session.host, run.sweep, host, engine=session.engine)
    await session.events("preflight", **check.to_json())
    return check


async def _load_or_take_backup(run: _SweepRun, session: HostSession) -> None:
    """The unit as found, from the store when this sweep already backed it up (a resumed run
    must not take the host's current, changed state for the original)."""
    backup = await run.store.get_unit_backup(run.record.id, session.name, session.unit)
    if backup is not None:
        session.found = backup_to_snapshot(backup)
        session.baseline = await _stored_baseline(run, session.name)
        await session.events("backup.loaded", baseline=session.baseline is not None)
        return
    snapshot = await session.read_found()
    stored = snapshot_to_backup(snapshot)
    await run.store.save_unit_backup(
        run.record.id,
        session.name,
        session.unit,
        stored.files,
        stored.state,
        dropin=stored.dropin,
    )
    await session.events("backup.saved", files=sorted(stored.files))


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
) -> bool:
    """True when the host is back as found (its lease may be given back)."""
    if run.stop.reason == "shutdown":
        return False  # the daemon stops; the sweep resumes later, so the host keeps its trial
    run.progress.update(session.name, step="restore", trial=None, config=None)
    try:
        foreign = await restore_retrying(
            session, run.sweep.policy.restore, attempts=attempts, owner=run.sweep.name
        )
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
        return False
    await run.store.mark_restored(run.record.id, session.name)
    if foreign:
        await session.events(
            "restore.foreign_changes",
            paths=[f.path for f in foreign],
            changes=[f.to_json() for f in foreign],
        )
    return True
