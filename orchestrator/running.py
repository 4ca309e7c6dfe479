"""A proven server while it is measured: the one type the host loop measures a trial on.

The lifecycle proves a server (:func:`orchestrator.lifecycle.reconfigure`,
:class:`~orchestrator.lifecycle.Server`); :class:`RunningServer` is that server while a trial
is measured on it (the host loop's :class:`~orchestrator.hostloop.Served`). It measures the
trial's points (its cells, then its coding problems) and yields each as it is made: where the
journal stands before a point, the point's own lines once the journal has settled (lines lag
a little behind the process that wrote them), its engine's accept-length samples from them,
the point's provenance; and it tells whether the same process still serves after a point (a
server that died during a point fails the attempt, its points kept). What is committed,
when to stop, what is recorded and shown is the host loop's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace

from orchestrator.bench import acceptlen
from orchestrator.bench.client import BenchClient
from orchestrator.bench.coding import run_coding
from orchestrator.bench.point import with_journal
from orchestrator.bench.problems import CodingProblem
from orchestrator.bench.sandbox import SandboxConfig
from orchestrator.cells import PromptSources, WorkloadSamples, client_connections, measure_cell
from orchestrator.evidence import ServerEvidence
from orchestrator.host import journal
from orchestrator.lifecycle import HostSession, Server, TrialFailed, last_cursor
from orchestrator.points import CodingPoint, Point, ThroughputPoint, cell_point_key, point_key
from orchestrator.store.records import TrialPlan
from orchestrator.sweepfile import Sweep
from orchestrator.trialsource import sweep_problems
from orchestrator.types import MatrixCell

JOURNAL_SETTLE_S = 0.2
JOURNAL_SETTLE_MAX_S = 3.0


@dataclass(frozen=True, slots=True)
class JournalWindow:
    """A point's journal lines: this invocation's entries after ``start``, up to ``end``."""

    start: str | None
    end: str | None
    entries: tuple[journal.JournalEntry, ...]

    @property
    def messages(self) -> list[str]:
        return [e.message for e in self.entries if e.message]


@dataclass
class RunningServer:
    """``server`` on ``session``'s host while ``sweep``'s trial is measured on it (the host
    loop's :class:`~orchestrator.hostloop.Served`); ``samples`` are the sweep's workloads."""

    session: HostSession
    server: Server
    sweep: Sweep
    samples: WorkloadSamples
    _since: str | None = field(default=None, init=False)
    """Where the journal stood when the last point began (what a crash report reads from)."""
    _problems: dict[TrialPlan, list[CodingProblem]] = field(default_factory=dict, init=False)

    @property
    def invocation_id(self) -> str:
        return self.server.invocation_id

    def evidence(self) -> ServerEvidence:
        return self.server.evidence()

    def planned(self, plan: TrialPlan) -> list[str]:
        """The keys of ``plan``'s points on this server, in the order :meth:`points` measures
        them: its cells, then its coding problems (the problem file read now: one that cannot
        be read fails the attempt, with the error as evidence)."""
        cells = [cell_point_key(cell) for cell in plan.cells]
        return cells + [point_key("coding", problem=p.id) for p in self._coding(plan)]

    async def points(self, plan: TrialPlan, skip: frozenset[str]) -> AsyncGenerator[Point, None]:
        """Measure ``plan``'s points but those in ``skip``, each yielded as it is made, over
        one client of the sweep's benchmark settings."""
        sweep, bench = self.sweep, self.sweep.benchmark
        async with BenchClient(
            self.server.base_url,
            api=bench.api,
            model=sweep.server.model,
            concurrency=client_connections(bench),
            request_timeout=sweep.timeouts.request,
            engine=self.session.engine,
        ) as client:
            sources = PromptSources(
                self.session.name, client, bench, self.samples, plan.cells, plan.rounds
            )
            for cell in plan.cells:
                if cell_point_key(cell) not in skip:
                    yield await self._cell(client, sources, cell, plan.rounds)
            for problem in self._coding(plan):
                if point_key("coding", problem=problem.id) not in skip:
                    yield await self._problem(client, problem)

    def _coding(self, plan: TrialPlan) -> list[CodingProblem]:
        if plan not in self._problems:
            self._problems[plan] = planned_problems(self.sweep, plan)
        return self._problems[plan]

    async def _cell(
        self, client: BenchClient, sources: PromptSources, cell: MatrixCell, rounds: int
    ) -> ThroughputPoint:
        """One cell: the measurement, then its journal window once settled (its decode lines'
        accept length), and which process, where in its journal, measured it."""
        measured = await measure_cell(
            client,
            sources,
            cell,
            self.sweep.benchmark,
            rounds=rounds,
            seed=self.sweep.search.seed,
            before_measured=self.cursor,
        )
        self._since = measured.marker
        window = await self.window(measured.marker)
        point = with_journal(
            measured.point,
            self.decode_samples(window),
            lines_expected=self.decode_lines_expected(measured.metrics.wall_s),
        )
        provenance = replace(
            point.provenance,
            invocation_id=self.invocation_id,
            cursor_start=measured.marker,
            cursor_end=window.end,
        )
        return replace(point, provenance=provenance)

    async def _problem(self, client: BenchClient, problem: CodingProblem) -> CodingPoint:
        """One coding problem, asked and scored as the sweep's ``coding`` section says."""
        coding = self.sweep.coding
        assert coding is not None  # planned_problems plans none without it
        self._since = await self.cursor()
        (point,) = await run_coding(
            client,
            [problem],
            api=self.sweep.benchmark.api,
            model=self.sweep.server.model,
            max_tokens=coding.max_tokens,
            temperature=coding.temperature,
            timeout_s=self.sweep.timeouts.request,
            sandbox=SandboxConfig(wall_timeout_s=coding.timeout_s),
        )
        provenance = replace(point.provenance, invocation_id=self.invocation_id)
        return replace(point, provenance=provenance)

    async def cursor(self) -> str | None:
        """Where the unit's journal stands now: what is logged after it is the next point's."""
        return await last_cursor(
            self.session.transport, self.session.unit, self.session.timeouts.command
        )

    async def window(self, start: str | None) -> JournalWindow:
        """This invocation's entries after ``start``, read once the journal has settled: two
        reads a settle interval apart that agree, or the last read at the bound."""
        session = self.session
        previous = -1
        began = time.monotonic()
        while True:
            entries = await journal.read_entries(
                session.transport, session.unit, start, timeout=session.timeouts.command
            )
            settled = len(entries) == previous
            if settled or time.monotonic() - began >= JOURNAL_SETTLE_MAX_S:
                mine = tuple(e for e in entries if e.invocation_id in (None, self.invocation_id))
                return JournalWindow(start, mine[-1].cursor if mine else start, mine)
            previous = len(entries)
            await asyncio.sleep(JOURNAL_SETTLE_S)

    def decode_samples(self, window: JournalWindow) -> list[acceptlen.DecodeSample]:
        """The window's decode lines as the server's engine reads them, each weighted by the
        decode-log interval the running server reports."""
        engine = self.session.engine
        return acceptlen.decode_samples_from_messages(
            window.messages,
            decode_log_interval=engine.decode_log_interval(self.server.server_info),
            parse=engine.parse_log_line,
        )

    def decode_lines_expected(self, wall_s: float | None) -> bool:
        """Whether a point measured for ``wall_s`` seconds must have a decode line in its
        window: always where lines follow the decoding; where the engine logs on a timer,
        only when the point lasted a whole period (a shorter one may fall between two)."""
        environment = self.server.provenance.environment
        period = self.session.engine.decode_log_period_s(environment)
        return period is None or (wall_s is not None and wall_s >= period)

    async def check_alive(self) -> None:
        """Raise ``crashed`` (with the journal since the last point began) unless the same
        process still runs: the unit's InvocationID and a running state."""
        session = self.session
        state = await session.control.show(session.unit, timeout=session.timeouts.command)
        if state.invocation_id == self.invocation_id and state.running:
            return
        entries = await journal.read_entries(
            session.transport, session.unit, self._since, timeout=session.timeouts.command
        )
        raise TrialFailed(
            "crashed",
            f"the server died during the benchmark (ActiveState={state.active_state})",
            excerpt=[e.message for e in entries if e.message][-60:],
            exit_status=state.exec_main_status,
            invocation_id=self.invocation_id,
        )


def planned_problems(sweep: Sweep, plan: TrialPlan) -> list[CodingProblem]:
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


__all__ = [
    "JOURNAL_SETTLE_MAX_S",
    "JOURNAL_SETTLE_S",
    "JournalWindow",
    "RunningServer",
    "planned_problems",
]
