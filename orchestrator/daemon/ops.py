"""The API's operations (:class:`orchestrator.api.DaemonOps`) over the daemon's parts: a facade
that reads the store, asks the scheduler and the restorer, and answers in typed values
(JSON is the API's own job)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from orchestrator import __version__
from orchestrator.answers import AnsweredResults, answered
from orchestrator.api import (
    Adoption,
    CancelOutcome,
    Conflict,
    RestoreOutcome,
    Submitted,
    SweepStatus,
    sweep_status,
)
from orchestrator.daemon.adopt import HostsBusy, adopt_sweep
from orchestrator.daemon.metrics import Exposition, ServiceMetrics
from orchestrator.daemon.restore import Restorer
from orchestrator.daemon.scheduler import ActiveSweep, Scheduler
from orchestrator.dashboard.board import Board, EndedAnswers, board
from orchestrator.hostloop import cancel_trials
from orchestrator.log import get_logger
from orchestrator.report import ReportFormat, render_report
from orchestrator.store import Store, SweepRecord
from orchestrator.store.records import TERMINAL_SWEEP_STATES
from orchestrator.sweepfile import StoredWorkloads, SweepFileError, parse_sweep
from orchestrator.sweepview import SweepView


def sweep_view(
    record: SweepRecord, active: ActiveSweep | None, *, daemon: str | None = None
) -> SweepView:
    """One sweep as the API lists it; ``daemon``: which daemon runs it (a shared store). A
    sweep whose stored state has ended is not active, though its task may still be letting go
    of its hosts for a moment: a reader never sees "cancelled" and running at once."""
    if active is None or record.state in TERMINAL_SWEEP_STATES:
        return SweepView(record, daemon=daemon)
    return SweepView(
        record,
        active=True,
        stopping=active.stop.reason,
        progress=active.progress.snapshot(),
        daemon=daemon,
    )


class DaemonApi:
    """What ``orchestrator.api`` serves, answered from the store and the running parts."""

    def __init__(
        self, store: Store, scheduler: Scheduler, restorer: Restorer, metrics: ServiceMetrics
    ) -> None:
        self.store = store
        self._scheduler = scheduler
        self._restorer = restorer
        self._metrics = metrics
        self._active = scheduler.active  # the scheduler's own dict: always current
        self._ended = EndedAnswers(self.results)
        self._log = get_logger(component="daemon")

    async def submit(
        self, text: str, *, filename: str, replace: bool, workloads: Mapping[str, str]
    ) -> Submitted:
        """Parse the sweep with the workload files sent along (never from any disk: the
        submitter's files are not the daemon's to read) and queue it."""
        if self._scheduler.closed:
            raise Conflict("the daemon is stopping; submit again after it restarts")
        sweep = parse_sweep(text, filename, workloads=StoredWorkloads(workloads))
        return await self._scheduler.submit(sweep, text, source_path=None, replace=replace)

    async def list_sweeps(self, *, include_replaced: bool) -> list[SweepView]:
        records = await self.store.list_sweeps(include_replaced=include_replaced)
        runners = await self._runners()
        return [sweep_view(r, self._active.get(r.id), daemon=runners.get(r.id)) for r in records]

    async def dashboard(self) -> Board:
        """The dashboard's document: the queue, the running sweeps, the latest ended ones."""
        views = await self.list_sweeps(include_replaced=False)
        return await board(views, self._ended, version=__version__, now=time.time())

    async def metrics(self, accept: str) -> Exposition:
        return await self._metrics.exposition(accept)

    async def sweep_status(self, ref: str) -> SweepStatus:
        record = await self.store.get_sweep(ref)
        active = self._active.get(record.id)
        live = active.progress.hosts if active is not None else {}
        view = sweep_view(record, active, daemon=(await self._runners()).get(record.id))
        return await sweep_status(self.store, view, live)

    async def _runners(self) -> dict[int, str]:
        """Which daemon runs each running sweep, over a shared store (none over our own)."""
        team = self._scheduler.team
        if team.identity is None:
            return {}
        runners = {sweep_id: claim.daemon for sweep_id, claim in (await team.elsewhere()).items()}
        return runners | dict.fromkeys(self._active, team.identity.name)

    async def cancel(self, ref: str) -> CancelOutcome:
        record = await self.store.get_sweep(ref)
        active = self._active.get(record.id)
        if active is not None:
            active.stop.stop("cancel")
            self._log.info("sweep.cancelling", sweep=record.name, sweep_id=record.id)
            return CancelOutcome(record, cancelling=True)
        if record.state not in ("queued", "running", "interrupted"):
            raise Conflict(f"sweep {record.name} (id {record.id}) already ended: {record.state}")
        team = self._scheduler.team
        async with team.hold(record.id) as elsewhere:  # no daemon starts it meanwhile
            if elsewhere is not None and await team.request_stop(record.id, "cancel"):
                self._log.info(
                    "sweep.cancelling", sweep=record.name, sweep_id=record.id, by=elsewhere.daemon
                )
                return CancelOutcome(record, cancelling=True)
            updated = await self.store.set_sweep_state(record.id, "cancelled")
            self._log.info("sweep.cancelled", sweep=record.name, sweep_id=record.id)
            if record.state in ("running", "interrupted"):  # not resumed: hosts may be changed
                await cancel_trials(self.store, record.id, await self.store.trials(record.id))
                await self._restorer.recover()
        return CancelOutcome(updated, cancelling=False)

    async def resume(self, ref: str) -> SweepRecord:
        """An interrupted sweep queued again: the scheduler continues it (what it measured is
        kept, nothing is measured twice). A sweep that ended stays ended: ``cancel`` is final
        (``submit --replace`` of its file starts it again)."""
        record = await self.store.get_sweep(ref)
        if record.state != "interrupted":
            raise Conflict(
                f"sweep {record.name} (id {record.id}) is {record.state}, not interrupted:"
                " only an interrupted sweep resumes"
            )
        updated = await self.store.set_sweep_state(record.id, "queued")
        self._scheduler.wake.set()
        self._log.info("sweep.resumed", sweep=record.name, sweep_id=record.id)
        return updated

    async def results(self, ref: str) -> AnsweredResults:
        """The results with their answers, from the sweep file stored with them (parsed once);
        a file that no longer parses gets its results without answers."""
        results = await self.store.results(ref)
        record = await self.store.get_sweep(results.id)
        try:
            sweep = self._scheduler.sweeps.get(record)
        except SweepFileError:
            return AnsweredResults(results)
        return answered(results, sweep)

    async def report(
        self, refs: Sequence[str], fmt: ReportFormat, *, include_requests: bool
    ) -> str:
        """The sweeps' report, as ``orchestrator report --db`` renders it from the file."""
        return await render_report(
            self.store, list(refs), fmt, include_requests=include_requests
        )

    async def restore_hosts(self, host: str | None, *, force: bool = False) -> list[RestoreOutcome]:
        """Restore every pending backup of ``host`` (or of every host), now, in parallel."""
        return await self._restorer.restore_hosts(host, force=force)

    async def adopt(
        self, ref: str, host_type: str, *, allow_tie: bool, allow_unexplored: bool = False
    ) -> Adoption:
        """Install the sweep's answer for ``host_type`` on that type's hosts, one at a time."""
        record = await self.store.get_sweep(ref)
        if record.id in self._active or record.id in await self._scheduler.team.elsewhere():
            raise Conflict(f"sweep {record.name} is running: adopt its answer once it has ended")
        sweep = self._restorer.sweeps.get(record)
        try:
            return await adopt_sweep(
                self.store,
                record,
                sweep,
                host_type,
                self._restorer.claims,
                allow_tie=allow_tie,
                allow_unexplored=allow_unexplored,
            )
        except HostsBusy as busy:
            raise Conflict(str(busy)) from busy
