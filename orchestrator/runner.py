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
import traceback
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from orchestrator.bench.client import BenchClient
from orchestrator.bench.coding import run_coding
from orchestrator.bench.point import with_journal
from orchestrator.bench.problems import CodingProblem
from orchestrator.bench.sandbox import SandboxConfig
from orchestrator.cells import PromptSources, WorkloadSamples, client_connections, measure_cell
from orchestrator.evidence import CANCELLED, RefusalEvidence, ServerEvidence
from orchestrator.host import gpu
from orchestrator.host.connect import open_host
from orchestrator.host.dropin import ExtraFlagConflict
from orchestrator.host.errors import HostError
from orchestrator.host.fence import held
from orchestrator.host.handle import HostHandle
from orchestrator.host.lease import (
    Controller,
    HostBusy,
    HostLease,
    LeaseLost,
    take_or_wait,
    take_over_fields,
    took_over_someone_else,
)
from orchestrator.hostloop import (
    INTERRUPT,
    RESTORE_ATTEMPTS_AFTER_LOSS,
    NoProgress,
    Progress,
    Refusal,
    Served,
    Stopped,
    StopSignal,
    SweepContext,
    run_host_trials,
)
from orchestrator.lifecycle import (
    RESTORE_ATTEMPTS,
    HostSession,
    Server,
    TrialDropin,
    TrialFailed,
    clear_stale,
    failure_from,
    reconfigure,
    restore_retrying,
    trial_config,
)
from orchestrator.log import get_logger
from orchestrator.plan import Trial
from orchestrator.preflight import HostCheck, check_sweep_host
from orchestrator.running import RunningServer
from orchestrator.search.budget import RestartBudget
from orchestrator.search.deadline import local_deadline
from orchestrator.sessions import (
    backup_to_snapshot,
    host_session,
    snapshot_to_backup,
)
from orchestrator.store import (
    Attempt,
    HostEntry,
    HostRecord,
    Store,
    SweepRecord,
    SweepResults,
    SweepState,
    TrialPlan,
    TrialRecord,
    cell_point_key,
    point_key,
)
from orchestrator.sweepfile import HostSpec, Sweep
from orchestrator.trialsource import (
    SourcedTrial,
    TrialSourceFactory,
    plan_trial_source,
    sweep_problems,
)
from orchestrator.types import DEADLINE_STOP, SYNTHETIC_WORKLOAD, MatrixCell


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

    samples: WorkloadSamples = field(kw_only=True)
    """The workloads' samples, parsed once for the sweep."""
    controller: Controller = field(kw_only=True)
    """Who runs the sweep, as each host's lease names it."""
    unrestored: list[str] = field(default_factory=list, kw_only=True)
    """Hosts whose restore did not complete: the sweep ends failed and names them."""
    cleared_on_take: set[str] = field(default_factory=set, kw_only=True)
    """Hosts whose lease this sweep took over from another sweep's dead or stalled holder:
    its leftovers are cleared before anything else."""


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
            sweep,
            record,
            store,
            progress or NoProgress(),
            stop or StopSignal(),
            now,
            trials,
            controller,
        )


async def _run_sweep(
    sweep: Sweep,
    record: SweepRecord,
    store: Store,
    progress: Progress,
    stop: StopSignal,
    now: Callable[[], dt.datetime],
    trials: TrialSourceFactory,
    controller: Controller,
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
            _stop_at(stop, (finish_at - now()).total_seconds(), DEADLINE_STOP)
        )

    await store.add_hosts(record.id, [HostEntry(h.name, h.host_type) for h in sweep.hosts])
    source = await trials(store, record, sweep)
    budget = await RestartBudget.load(store, record.id, sweep)
    samples = WorkloadSamples(sweep.benchmark)
    run = _SweepRun(
        sweep, record, store, progress, stop, source, budget, samples=samples, controller=controller
    )
    resumed = record.state in ("running", "interrupted")
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
            await store.skip_trial(trial.id, None, CANCELLED.to_json(), state="cancelled")
        elif last.state == "running":
            await store.finish_attempt(last.id, "cancelled", evidence=CANCELLED.to_json())


async def _stop_at(stop: StopSignal, seconds: float, reason: str) -> None:
    await asyncio.sleep(max(seconds, 0.0))
    stop.stop(reason)


# --- one host ------------------------------------------------------------------------------


async def _run_host(run: _SweepRun, host: HostSpec) -> None:
    """The host's lease (waited for or set aside per ``policy.hosts_busy``), then preflight,
    backup, the trials the source gives this host and the restore, every change fenced by the
    lease; the lease given back after the restore. Crash-safe at each step."""
    structlog.contextvars.bind_contextvars(host=host.name)  # this host's task and its children
    sweep, store = run.sweep, run.store
    log = get_logger()
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
        await _host_busy(run, host, busy)
        return None
    except HostError as exc:
        # Nothing on the host has changed yet: set aside as the preflight sets aside a host
        # it cannot reach (the reason is the error itself, the trials skipped).
        await _set_aside_before_change(run, host, str(exc))
        return None
    assert taken.lease is not None
    await events("lease.taken", token=taken.lease.token, expiry_s=policy.lease_expiry)
    if took_over_someone_else(taken, holder):
        await events("lease.taken_over", **take_over_fields(taken))
        run.cleared_on_take.add(host.name)
    return taken.lease


async def _host_busy(run: _SweepRun, host: HostSpec, busy: HostBusy) -> None:
    """Another controller holds the host: its trials are not run by this sweep (cancelled when
    the sweep was cancelled meanwhile, left queued for an interrupted one to continue)."""
    await run.event("lease.refused", {"holder": str(busy)}, host=host.name)
    await _set_aside_before_change(run, host, f"busy: {busy}")


async def _host_sweep(
    run: _SweepRun, host: HostSpec, session: HostSession, lease: HostLease
) -> bool:
    """What the sweep does on a host it holds; True when the host was restored (or left as
    the sweep's policy says) and the lease may be given back."""
    if host.name in run.cleared_on_take:
        await clear_stale(session)
    check = await _preflight(run, host, session)
    if not check.ok:
        await _set_aside(run, host, run.source.withdraw(host.name), check)
        return True
    await _load_or_take_backup(run, session)
    driver = SessionDriver(run, session, host, check, lease)
    kept = await _until_aborted(run, host.name, run_host_trials(run, driver))
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


async def _until_aborted(run: _SweepRun, host: str, trials: Coroutine[Any, Any, bool]) -> bool:
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


async def _preflight(run: _SweepRun, host: HostSpec, session: HostSession) -> HostCheck:
    """Everything about the host that can be known before anything on it changes, every
    config of the space asked of the host's own engine (:mod:`orchestrator.preflight`)."""
    run.progress.update(host.name, step="preflight", trial=None, config=None)
    check = await check_sweep_host(session.host, run.sweep, host, engine=session.engine)
    await session.events("preflight", **check.to_json())
    return check


async def _set_aside_before_change(run: _SweepRun, host: HostSpec, reason: str) -> None:
    """A host that failed before this sweep changed anything on it: its trials withdrawn and
    skipped (cancelled under a cancel; left queued for an interrupted sweep to continue)."""
    withdrawn = run.source.withdraw(host.name)
    if run.stop.reason == "cancel":
        await cancel_trials(run.store, run.record.id, [t.record for t in withdrawn])
        return
    if run.stop.resumable:
        return
    await _skip_set_aside(run, host, withdrawn, reason)


async def _set_aside(
    run: _SweepRun, host: HostSpec, trials: Sequence[SourcedTrial], check: HostCheck
) -> None:
    await _skip_set_aside(run, host, trials, check.reason or "preflight failed")


async def _skip_set_aside(
    run: _SweepRun, host: HostSpec, trials: Sequence[SourcedTrial], reason: str
) -> None:
    await run.store.set_host_aside(run.record.id, host.name, reason)
    for trial in trials:
        await run.store.skip_trial(trial.record.id, "host-set-aside", {"reason": reason})
    get_logger(host=host.name).warning("host.set_aside", reason=reason)


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


# --- one trial -----------------------------------------------------------------------------


class SessionDriver:
    """A host reached through its :class:`HostSession`: refusals the preflight showed, the
    drop-in and clean restart of :func:`~orchestrator.lifecycle.reconfigure`, and the
    measurement of the proven server (the host loop's :class:`~orchestrator.hostloop.Driver`)."""

    def __init__(
        self,
        run: _SweepRun,
        session: HostSession,
        host: HostSpec,
        check: HostCheck,
        lease: HostLease,
    ) -> None:
        self.run, self.session, self.spec, self.check = run, session, host, check
        self.lease = lease
        self.knobs = host.effective_knobs(run.sweep.server.knobs)
        self._dropins: dict[str, TrialDropin] = {}

    @property
    def host(self) -> str:
        return self.session.name

    async def events(self, kind: str, /, **fields: Any) -> None:
        await self.session.events(kind, **fields)

    async def refusal(self, planned: Trial, trial: TrialRecord) -> Refusal | None:
        """A flag this build does not know, an argv the host's own parser refused (it would
        die at startup the same way), or an extra flag the unit's real command line has with
        another value: nothing is restarted for any of them."""
        unknown = sorted(
            self.knobs[name].flag or ""
            for name, value in planned.config.items()
            if value is not None and self.knobs[name].flag in self.check.unknown_flags
        )
        if unknown:
            return Refusal(
                "bad-flag",
                RefusalEvidence("preflight", unknown_flags=tuple(unknown)),
                f"unknown to this build: {' '.join(unknown)}",
            )
        refused = self.check.refusal(planned.key)
        if refused is not None and refused.cause is not None:
            return Refusal(refused.cause, RefusalEvidence.of(refused), refused.error or "")
        sweep, session = self.run.sweep, self.session
        assert session.found is not None
        try:
            self._dropins[trial.key] = trial_config(
                session.found,
                sweep=sweep.name,
                key=trial.key,
                knobs=self.knobs,
                config=planned.config,
                extra_flags=sweep.server.extra_flags,
                environment=sweep.server.environment,
                metrics=sweep.server.metrics,
                engine=session.engine,
            )
        except ExtraFlagConflict as conflict:
            # Only the host's real command line shows it (validate saw the sweep's
            # exec_start): which value the server would take is up to its parser.
            evidence = RefusalEvidence("drop-in", message=str(conflict), flag=conflict.flag)
            return Refusal("invalid-config", evidence, str(conflict))
        return None

    @contextlib.asynccontextmanager
    async def serve(self, planned: Trial, trial: TrialRecord) -> AsyncIterator[Served]:
        """The trial's drop-in installed, the unit restarted cleanly, the new process proven
        (the next trial's restart, or the restore, replaces it)."""
        del planned
        try:
            server = await reconfigure(self.session, self._dropins[trial.key])
            yield _MeasuredServer(self.run, self.session, server)
        except (Stopped, LeaseLost):
            raise
        except Exception as exc:
            # A server that died or never came up while another controller took the host
            # over was restarted by that controller, not crashed: the take-over is the cause.
            try:
                lost = await self.lease.taken_over()
            except HostError:
                lost = None  # the host cannot tell now: the failure stands as it was seen
            if lost is not None:
                raise lost.behind(failure_from(exc).to_json()) from exc
            raise


@dataclass(frozen=True, slots=True)
class _MeasuredServer:
    """A proven server as the host loop measures it."""

    run: _SweepRun
    session: HostSession
    server: Server

    @property
    def invocation_id(self) -> str:
        return self.server.invocation_id

    async def measure(self, attempt: Attempt, plan: TrialPlan) -> None:
        await _measure(self.run, self.session, attempt, self.server, plan)

    def evidence(self) -> ServerEvidence:
        return self.server.evidence()


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
                raise Stopped
            run.progress.update(session.name, step=_cell_step(cell), done=done, total=total)
            measured = await measure_cell(
                client,
                sources,
                cell,
                bench,
                rounds=plan.rounds,
                seed=sweep.search.seed,
                before_measured=running.cursor,
            )
            cursor = measured.marker
            window = await running.window(cursor)
            point = with_journal(
                measured.point,
                running.decode_samples(window),
                lines_expected=running.decode_lines_expected(measured.metrics.wall_s),
            )
            point = replace(
                point,
                provenance=replace(
                    point.provenance,
                    invocation_id=server.invocation_id,
                    cursor_start=cursor,
                    cursor_end=window.end,
                ),
            )
            await store.record_point(attempt.id, point, point.requests)
            done += 1
            run.progress.update(
                session.name,
                done=done,
                total=total,
                last_point=point.metrics.measured_json(),
                point=point,
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
    problems: Sequence[CodingProblem],
    done: int,
    total: int,
) -> None:
    """The coding anchor's problems not committed yet, each a point as it is scored."""
    sweep, host = run.sweep, running.session.name
    assert sweep.coding is not None
    for problem in problems:
        if run.stop.stopping:
            raise Stopped
        run.progress.update(host, step=f"coding {problem.id}", done=done, total=total)
        cursor = await running.cursor()
        (point,) = await run_coding(
            client,
            [problem],
            api=sweep.benchmark.api,
            model=sweep.server.model,
            max_tokens=sweep.coding.max_tokens,
            temperature=sweep.coding.temperature,
            timeout_s=sweep.timeouts.request,
            sandbox=SandboxConfig(wall_timeout_s=sweep.coding.timeout_s),
        )
        provenance = replace(point.provenance, invocation_id=running.invocation_id)
        await run.store.record_point(attempt.id, replace(point, provenance=provenance), [])
        done += 1
        run.progress.update(host, done=done, total=total)
        await running.check_alive(cursor)


def _cell_step(cell: MatrixCell) -> str:
    """The live display's step: ``ctx 4096 x c32``, ``ctx 4096 x 8 req/s`` (``, chat``...)."""
    step = f"ctx {cell.context} x {cell.load}"
    return step if cell.workload == SYNTHETIC_WORKLOAD else f"{step}, {cell.workload}"


def _planned_problems(sweep: Sweep, plan: TrialPlan) -> list[CodingProblem]:
    """The coding problems the plan names, read from the sweep's problem file now (a file that
    cannot be read fails the attempt here, with the error as evidence); a plan that runs coding
    but names no problems (stored when the file could not be read) takes the file's. A plan
    without a coding temperature runs no coding (a search's screen), whatever the sweep has."""
    if sweep.coding is None or plan.coding_temperature is None:
        return []
    problems = sweep_problems(sweep)
    if not plan.problems:
        return problems
    wanted = set(plan.problems)
    return [p for p in problems if p.id in wanted]
