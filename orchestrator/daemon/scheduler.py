"""Scheduling: which queued sweep runs now, running it, and what happens when it ends.

Sweeps the store calls running (interrupted by a stop or a crash) resume first, then queued
ones in priority, then submission order (:func:`orchestrator.daemon.order.run_order`); a sweep
starts when its hosts are free (:class:`~orchestrator.daemon.claims.HostClaims`) and a slot is.
Each sweep's file is parsed once (:class:`~orchestrator.daemon.order.ParsedSweeps`), and each
running sweep gets its trials from a trial source (:mod:`orchestrator.trialsource`).

Over a shared store (:mod:`orchestrator.team`) a sweep starts only once this daemon has claimed
it; the sweeps other daemons run hold their hosts as this daemon's own do (nothing overtakes
them), and a sweep whose claim is lost stops at its next safe step, for its new daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from orchestrator.api import Submitted
from orchestrator.daemon.background import Background
from orchestrator.daemon.claims import HostClaims
from orchestrator.daemon.order import ParsedSweeps, pick_runnable, run_order, sweep_host_keys
from orchestrator.daemon.restore import Restorer
from orchestrator.host.lease import Controller
from orchestrator.hostloop import StopSignal
from orchestrator.log import get_logger
from orchestrator.notify import post_webhook, sweep_summary
from orchestrator.progress.reports import SweepProgress
from orchestrator.runner import run_sweep, submit_sweep
from orchestrator.search.source import trial_source_for as search_source_for
from orchestrator.store import Store, SweepRecord, SweepResults
from orchestrator.sweepfile import Sweep, SweepFileError
from orchestrator.team import Membership, Solo
from orchestrator.trialsource import TrialSourceFactory

ABANDON_WAIT_S = 5.0


@dataclass
class ActiveSweep:
    record: SweepRecord
    sweep: Sweep
    keys: frozenset[str]
    stop: StopSignal = field(default_factory=StopSignal)
    progress: SweepProgress = field(default_factory=SweepProgress)
    task: asyncio.Task[None] | None = None


def trial_source_for(sweep: Sweep) -> TrialSourceFactory:
    """Where ``sweep``'s trials come from: its plan in order (``search.strategy: grid``), or
    the random or adaptive search (:mod:`orchestrator.search.source`)."""
    return search_source_for(sweep)


class Scheduler:
    """Starts queued sweeps on free hosts and sees each one to its end."""

    def __init__(
        self,
        store: Store,
        sweeps: ParsedSweeps,
        claims: HostClaims,
        restorer: Restorer,
        background: Background,
        *,
        active: dict[int, ActiveSweep],
        max_parallel: int,
        tick_s: float,
        webhook: str | None,
        webhook_timeout_s: float,
        controller: Controller | None = None,
        team: Membership | None = None,
    ) -> None:
        self.store = store
        self.team: Membership = team or Solo()
        """Which sweeps are this daemon's to run (all of them, unless the store is shared)."""
        self.controller = controller or Controller("daemon", str(store.path))
        """Who runs the sweeps, as each host's lease names it."""
        self.sweeps = sweeps
        self.claims = claims
        self.restorer = restorer
        self.max_parallel = max_parallel
        self.tick_s = tick_s
        self.webhook = webhook
        self.webhook_timeout_s = webhook_timeout_s
        self.active = active
        """The running sweeps by record id (the restorer reads the same dict)."""
        self.queued = 0
        self.closed = False
        """No sweep starts any more (the daemon is stopping)."""
        self.wake = asyncio.Event()
        self._spawn: Callable[..., asyncio.Task[Any]] = background.spawn
        self._log = get_logger(component="daemon")

    # --- intake ------------------------------------------------------------------------------

    async def submit(
        self, sweep: Sweep, text: str, *, source_path: str | None, replace: bool
    ) -> Submitted:
        """Queue ``sweep``; a replaced sweep that is running stops and restores its hosts."""
        previous = await self.store.find_sweep(sweep.name)
        submitted = await submit_sweep(
            self.store, sweep, text, source_path=source_path, replace=replace
        )
        record = submitted.sweep
        replaced = None
        if previous is not None and previous.id != record.id and previous.name == record.name:
            replaced = previous.id
            old = self.active.get(previous.id)
            if old is not None:
                old.stop.stop("cancel")  # replaced while running: stop it, restore its hosts
            elif previous.state in ("queued", "running"):
                async with self.team.hold(previous.id) as elsewhere:
                    if elsewhere is not None:  # another daemon runs it: asked to cancel it
                        await self.team.request_stop(previous.id, "cancel")
                    else:
                        await self.store.set_sweep_state(previous.id, "cancelled")
        self.wake.set()
        self._log.info(
            "sweep.submitted",
            sweep=record.name,
            sweep_id=record.id,
            created=submitted.created,
            replaced=replaced,
        )
        return Submitted(record, submitted.created, replaced)

    # --- the loop ----------------------------------------------------------------------------

    async def loop(self) -> None:
        while True:
            self.wake.clear()
            try:
                await self.schedule_once()
            except Exception as exc:
                self._log.exception("scheduler.error", error=type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick_s):
                    await self.wake.wait()

    async def schedule_once(self) -> None:
        records = await self.store.list_sweeps(["running", "queued"])
        elsewhere = await self.team.elsewhere()
        queue: list[tuple[tuple[SweepRecord, Sweep], frozenset[str]]] = []
        busy = self.claims.busy()
        for record in run_order(records):
            if record.id in self.active:
                continue
            try:
                sweep = await self.sweeps.runnable(record, self.store)
            except SweepFileError as exc:
                if record.id in elsewhere:
                    continue  # its daemon (another version, maybe) runs it
                # Valid when submitted, invalid now (the schema moved on): it cannot run.
                await self.store.set_sweep_state(
                    record.id, "failed", summary={"error": f"no longer valid: {exc}"}
                )
                continue
            if record.id in elsewhere:
                busy |= sweep_host_keys(sweep)  # another daemon's: its hosts are in use
                continue
            queue.append(((record, sweep), sweep_host_keys(sweep)))
        self.queued = len(queue)
        slots = self.max_parallel - len(self.active)
        if self.closed:
            return
        for record, sweep in pick_runnable(queue, busy, slots):
            if not await self.team.claim(record.id):
                continue  # another daemon claimed it first: it runs there
            self._start(record, sweep)
            self.queued -= 1

    def stop_sweep(self, sweep_id: int, reason: str, why: str) -> None:
        """Stop a running sweep at its next safe step (a lost claim: ``shutdown``, its hosts
        left for the daemon that continues it; a cancel asked through another daemon)."""
        active = self.active.get(sweep_id)
        if active is None or active.stop.reason is not None:
            return
        self._log.warning(
            "sweep.stopping", sweep=active.record.name, sweep_id=sweep_id, reason=reason, why=why
        )
        active.stop.stop(reason)

    def _start(self, record: SweepRecord, sweep: Sweep) -> None:
        progress = SweepProgress.for_sweep(sweep)
        active = ActiveSweep(record, sweep, sweep_host_keys(sweep), progress=progress)
        self.active[record.id] = active
        self.claims.claim(active.keys)
        active.task = asyncio.create_task(self._run_sweep(active), name=f"sweep {record.name}")

        def finished(_: asyncio.Task[None]) -> None:
            self.active.pop(record.id, None)
            self.claims.release(active.keys)  # wakes the loop: a waiting sweep may start
            if self.team.identity is not None:  # free for any daemon (it ended, or suspended)
                self._spawn(self.team.release(record.id), f"release {record.name}")

        active.task.add_done_callback(finished)

    async def _run_sweep(self, active: ActiveSweep) -> None:
        record, sweep = active.record, active.sweep
        # Bound for the task (and the runner's host tasks it starts): every event of this
        # sweep, ours or a library's, carries its name and id.
        structlog.contextvars.bind_contextvars(sweep=record.name, sweep_id=record.id)
        log = self._log
        current = await self.store.get_sweep(record.id)
        if current.state not in ("queued", "running") or current.replaced_by is not None:
            return  # cancelled or replaced between the scheduler's look and now
        log.info("sweep.starting", resumed=current.state == "running", hosts=len(sweep.hosts))
        try:
            outcome = await run_sweep(
                sweep,
                record.yaml_text,
                self.store,
                source_path=record.source_path,
                progress=active.progress,
                stop=active.stop,
                trials=trial_source_for(sweep),
                controller=self.controller,
            )
        except asyncio.CancelledError:
            log.warning("sweep.interrupted")  # left running in the store: the next start resumes
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.exception("sweep.crashed", error=error)
            await self.store.set_sweep_state(record.id, "failed", summary={"error": error})
            await self.restorer.after_runner_failed(record)
            self._announce(sweep, await self.store.results(record.id), error=error)
            return
        if outcome.state == "running":  # suspended by a shutdown: the next start resumes it
            log.info("sweep.suspended")
            return
        log.info("sweep.ended", state=outcome.state)
        self._announce(sweep, await self.store.results(record.id))

    def _announce(self, sweep: Sweep, results: SweepResults, *, error: str | None = None) -> None:
        url = str(sweep.notify.webhook) if sweep.notify else self.webhook
        if not url:
            return
        document = sweep_summary(results, error=error)
        self._spawn(
            post_webhook(url, document, timeout_s=self.webhook_timeout_s),
            f"webhook {sweep.name}",
        )

    # --- stopping ----------------------------------------------------------------------------

    async def suspend_all(self, grace_s: float) -> None:
        """Ask every running sweep to stop at its next safe step *without* restoring (the next
        start resumes), and after ``grace_s`` abandon what is still measuring."""
        self.closed = True
        sweeps = [a for a in self.active.values() if a.task is not None]
        for active in sweeps:
            active.stop.stop("shutdown")
        tasks = [a.task for a in sweeps if a.task is not None]
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=grace_s)
        for task in late:
            self._log.warning("sweep.abandoned", task=task.get_name())
            task.cancel()
        if late:
            await asyncio.wait(late, timeout=ABANDON_WAIT_S)

    def describe(self) -> str:
        """What runs where, for ``STATUS=``."""
        if not self.active:
            return f"idle, {self.queued} queued" if self.queued else "ready, no sweep running"
        running = "; ".join(
            f"{a.record.name}: {a.progress.describe() or 'starting'}" for a in self.active.values()
        )
        return f"{len(self.active)} running, {self.queued} queued; {running}"
