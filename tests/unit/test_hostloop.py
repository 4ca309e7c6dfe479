"""The host loop's policy over a fake driver: retries, the restart budget, refusals, a cancel,
a lost host, and per point what is skipped, recorded, shown and checked. A real store (SQLite
in a temporary file) and the plan's own trial source; the driver is scripted, so each test
runs in milliseconds."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.evidence import RefusalEvidence
from orchestrator.hostloop import (
    INTERRUPT,
    NoProgress,
    Progress,
    Refusal,
    StopSignal,
    SweepContext,
    point_step,
    run_host_trials,
)
from orchestrator.lifecycle import TrialFailed
from orchestrator.plan import Trial
from orchestrator.points import (
    Point,
    PointProvenance,
    ThroughputMetrics,
    ThroughputPoint,
    cell_point_key,
)
from orchestrator.search.budget import RESTART_EVENT, RestartBudget
from orchestrator.store import HostEntry, Store, TrialPlan, TrialRecord
from orchestrator.sweepfile import parse_sweep
from orchestrator.trialsource import plan_trial_source
from orchestrator.types import MatrixCell

HOST = "a"


def sweep_text(*, retries: int = 0, extra: str = "", contexts: str = "[64]") -> str:
    return (
        "name: loop\n"
        "hosts:\n"
        f'  - {{name: {HOST}, address: 127.0.0.1, base_url: "http://127.0.0.1:30000", '
        "type: gpu}\n"
        "server:\n"
        "  model: m\n"
        "  knobs: {budget: {flag: --speculative-ddtree-budget}}\n"
        "configs: [{budget: 4}, {budget: 8}, {budget: 16}]\n"
        f"benchmark: {{contexts: {contexts}, concurrency: [1]}}\n"
        f"policy: {{trial_retries: {retries}}}\n" + extra
    )


Script = Callable[[int], str]
"""A config's behaviour on its n-th start: ``ok``, a failure cause, ``cancel`` or ``interrupt``
(the stop arrives while its first point is measured), or ``dies`` (its server is gone after
its first point)."""
SERVING = ("ok", "cancel", INTERRUPT, "dies")


@dataclass
class FakeDriver:
    """A host that starts servers as scripted, one behaviour per config and start."""

    run: SweepContext
    scripts: Mapping[int, Script]
    refused: Mapping[int, str] = field(default_factory=dict)
    starts: list[int] = field(default_factory=list)
    events_seen: list[str] = field(default_factory=list)
    measured: list[tuple[str, str]] = field(default_factory=list)
    """(invocation id, point key) of every point a server measured, in order."""

    @property
    def host(self) -> str:
        return HOST

    async def events(self, kind: str, /, **fields: Any) -> None:
        self.events_seen.append(kind)

    async def refusal(self, planned: Trial, trial: TrialRecord) -> Refusal | None:
        budget = int(planned.config["budget"])  # type: ignore[arg-type]
        cause = self.refused.get(budget)
        return None if cause is None else Refusal(cause, RefusalEvidence("preflight"), "refused")

    @contextlib.asynccontextmanager
    async def serve(self, planned: Trial, trial: TrialRecord) -> AsyncIterator[FakeServer]:
        budget = int(planned.config["budget"])  # type: ignore[arg-type]
        self.starts.append(budget)
        behaviour = self.scripts.get(budget, lambda n: "ok")(self.starts.count(budget))
        if behaviour not in SERVING:
            raise TrialFailed(behaviour, f"scripted {behaviour}")  # type: ignore[arg-type]
        yield FakeServer(self.run, f"inv-{budget}-{len(self.starts)}", behaviour, self.measured)


@dataclass(frozen=True)
class InvocationEvidence:
    """What a done attempt keeps of a server that is only an invocation id."""

    invocation_id: str

    def to_json(self) -> dict[str, Any]:
        return {"invocation_id": self.invocation_id}


@dataclass
class FakeServer:
    """A server that measures each cell at once; it knows no store, stop or progress (the
    stop it sets stands for an operator's, arriving while a point is measured)."""

    run: SweepContext
    invocation_id: str
    behaviour: str
    measured: list[tuple[str, str]]
    points_made: int = 0

    def planned(self, plan: TrialPlan) -> list[str]:
        return [cell_point_key(cell) for cell in plan.cells]

    async def points(self, plan: TrialPlan, skip: frozenset[str]) -> AsyncGenerator[Point, None]:
        for cell in plan.cells:
            if cell_point_key(cell) in skip:
                continue
            self.measured.append((self.invocation_id, cell_point_key(cell)))
            if self.behaviour in ("cancel", INTERRUPT):
                self.run.stop.stop(self.behaviour)
            self.points_made += 1
            yield ThroughputPoint(
                context=cell.context,
                concurrency=cell.concurrency,
                metrics=ThroughputMetrics(output_tok_s=100.0),
                provenance=PointProvenance(invocation_id=self.invocation_id),
            )

    async def check_alive(self) -> None:
        if self.behaviour == "dies" and self.points_made:
            raise TrialFailed("crashed", "scripted: the server died during the benchmark")

    def evidence(self) -> InvocationEvidence:
        return InvocationEvidence(self.invocation_id)


@contextlib.asynccontextmanager
async def context(
    tmp_path: Path, text: str, progress: Progress | None = None
) -> AsyncIterator[SweepContext]:
    """The sweep of ``text`` in ``tmp_path``'s store (submitted again, the same sweep: a
    second context over one store is the sweep run again, resuming it)."""
    sweep = parse_sweep(text, "loop.yaml")
    async with await Store.open(tmp_path / "loop.db") as store:
        record = (await store.submit_sweep(sweep.name, text)).sweep
        await store.add_hosts(record.id, [HostEntry(h.name, h.host_type) for h in sweep.hosts])
        source = await plan_trial_source(store, record, sweep)
        budget = await RestartBudget.load(store, record.id, sweep)
        yield SweepContext(
            sweep, record, store, progress or NoProgress(), StopSignal(), source, budget
        )


async def attempts_by_budget(run: SweepContext) -> dict[int, list[tuple[str, str | None]]]:
    trials = {t.id: t for t in await run.store.trials(run.record.id)}
    out: dict[int, list[tuple[str, str | None]]] = {}
    for attempt in await run.store.attempts(run.record.id):
        budget = int(trials[attempt.trial_id].config["budget"])  # type: ignore[arg-type]
        out.setdefault(budget, []).append((attempt.state, attempt.cause))
    return out


async def restarts(run: SweepContext) -> int:
    return len(await run.store.events(run.record.id, kinds=(RESTART_EVENT,)))


async def test_every_trial_runs_once_and_each_start_is_counted(tmp_path: Path) -> None:
    async with context(tmp_path, sweep_text()) as run:
        driver = FakeDriver(run, {})
        assert await run_host_trials(run, driver)
        assert await attempts_by_budget(run) == {4: [("done", None)], 8: [("done", None)],
                                                 16: [("done", None)]}  # fmt: skip
        assert driver.starts == [4, 8, 16] and await restarts(run) == 3
        points = await run.store.points(attempt_id=(await run.store.attempts(run.record.id))[0].id)
        assert len(points) == 1


async def test_a_crash_is_retried_and_a_deterministic_cause_is_not(tmp_path: Path) -> None:
    scripts = {4: lambda n: "crashed" if n == 1 else "ok", 8: lambda n: "config-mismatch"}
    async with context(tmp_path, sweep_text(retries=1)) as run:
        driver = FakeDriver(run, scripts)
        assert await run_host_trials(run, driver)
        found = await attempts_by_budget(run)
    assert found[4] == [("failed", "crashed"), ("done", None)]
    assert found[8] == [("failed", "config-mismatch")]  # a retry cannot cure it
    assert driver.starts == [4, 4, 8, 16] and run.failures == 2
    assert driver.events_seen.count("trial.failed") == 2


async def test_a_refused_config_fails_without_a_restart(tmp_path: Path) -> None:
    async with context(tmp_path, sweep_text()) as run:
        driver = FakeDriver(run, {}, refused={8: "bad-flag"})
        assert await run_host_trials(run, driver)
        found = await attempts_by_budget(run)
        assert found[8] == [("failed", "bad-flag")]
        assert driver.starts == [4, 16] and await restarts(run) == 2


async def test_the_restart_budget_stops_the_host(tmp_path: Path) -> None:
    text = sweep_text(retries=3, extra="search: {max_restarts: 2}\n")
    async with context(tmp_path, text) as run:
        driver = FakeDriver(run, {4: lambda n: "crashed"})
        assert await run_host_trials(run, driver)
        found = await attempts_by_budget(run)
        # Two starts of budget 4 spend the cap: no retry past it, no other trial started.
        assert found == {4: [("failed", "crashed"), ("failed", "crashed")]}
        assert driver.starts == [4, 4] and await restarts(run) == 2


TWO_CELLS = "[64, 128]"


async def test_a_cancel_mid_measurement_ends_the_attempt_cancelled(tmp_path: Path) -> None:
    async with context(tmp_path, sweep_text(contexts=TWO_CELLS)) as run:
        driver = FakeDriver(run, {8: lambda n: "cancel"})
        assert await run_host_trials(run, driver)
        found = await attempts_by_budget(run)
        assert found == {4: [("done", None)], 8: [("cancelled", None)]}
        assert driver.starts == [4, 8] and run.failures == 0
        # The point measured when the cancel came is kept; the next one was never started.
        assert [inv for inv, _ in driver.measured].count("inv-8-2") == 1


async def test_a_lost_host_skips_its_remaining_trials(tmp_path: Path) -> None:
    async with context(tmp_path, sweep_text(retries=2)) as run:
        driver = FakeDriver(run, {4: lambda n: "host-unreachable"})
        assert not await run_host_trials(run, driver)
        found = await attempts_by_budget(run)
        (host,) = await run.store.hosts(run.record.id)
    assert found[4][-1] == ("failed", "host-unreachable")
    assert found[8] == [("skipped", "host-unreachable")]
    assert found[16] == [("skipped", "host-unreachable")]
    assert host.set_aside_reason is not None and host.set_aside_reason.startswith("unreachable")


async def test_abort_stops_after_the_first_failure(tmp_path: Path) -> None:
    text = sweep_text().replace(
        "policy: {trial_retries: 0}", "policy: {trial_retries: 0, on_trial_failure: abort}"
    )
    async with context(tmp_path, text) as run:
        driver = FakeDriver(run, {4: lambda n: "oom"})
        await run_host_trials(run, driver)
        assert run.stop.reason is not None and run.stop.reason.startswith("abort")
        assert driver.starts == [4]


async def test_a_lost_lease_sets_the_host_aside_and_tries_nothing_more(tmp_path: Path) -> None:
    """Another controller took the host over: not retried (each try would be refused the same
    way), the host's other trials never started, the reason on the host."""
    async with context(tmp_path, sweep_text(retries=2)) as run:
        driver = FakeDriver(run, {4: lambda n: "lease-lost"})
        assert not await run_host_trials(run, driver)
        found = await attempts_by_budget(run)
        (host,) = await run.store.hosts(run.record.id)
    assert found == {
        4: [("failed", "lease-lost")],
        8: [("skipped", "lease-lost")],
        16: [("skipped", "lease-lost")],
    }
    assert driver.starts == [4]
    assert host.set_aside_reason is not None and host.set_aside_reason.startswith("lease lost")


async def test_an_interrupt_leaves_the_attempt_resumable_and_the_rest_queued(
    tmp_path: Path,
) -> None:
    """Ctrl-C mid-measurement: the attempt stays running (the next run resumes it, its points
    kept), the trials after it are not touched, and nothing counts as failed."""
    async with context(tmp_path, sweep_text(contexts=TWO_CELLS)) as run:
        driver = FakeDriver(run, {8: lambda n: INTERRUPT})
        assert await run_host_trials(run, driver)
        found = await attempts_by_budget(run)
        assert run.stop.resumable and run.failures == 0
        attempt = (await run.store.attempts(run.record.id))[-1]
        kept = await run.store.points(attempt_id=attempt.id)
    assert found == {4: [("done", None)], 8: [("running", None)]}
    assert driver.starts == [4, 8]
    # The stop came while the first point was measured: it is kept, the second never began.
    assert [p.key for p in kept] == ["throughput/context=64/concurrency=1"]
    assert driver.measured[-1] == ("inv-8-2", "throughput/context=64/concurrency=1")


async def test_a_resumed_attempt_measures_only_what_it_has_not_committed(tmp_path: Path) -> None:
    """The sweep run again after an interrupt: the attempt left running is resumed on a new
    server, which is asked for the missing point only; the committed one stays as measured."""
    text = sweep_text(contexts=TWO_CELLS)
    async with context(tmp_path, text) as run:
        assert await run_host_trials(run, FakeDriver(run, {8: lambda n: INTERRUPT}))
    async with context(tmp_path, text) as run:
        driver = FakeDriver(run, {})
        assert await run_host_trials(run, driver)
        found = await attempts_by_budget(run)
        attempt = next(a for a in await run.store.attempts(run.record.id) if a.resumes)
        points = await run.store.points(attempt_id=attempt.id)
    assert found == {4: [("done", None)], 8: [("done", None)], 16: [("done", None)]}
    assert driver.starts == [8, 16]  # 4 was done: never started again
    assert driver.measured[0] == ("inv-8-1", "throughput/context=128/concurrency=1")
    assert [(p.key, p.invocation_id) for p in points] == [
        ("throughput/context=64/concurrency=1", "inv-8-2"),
        ("throughput/context=128/concurrency=1", "inv-8-1"),
    ]


async def test_a_server_that_died_after_a_point_fails_crashed_with_its_points(
    tmp_path: Path,
) -> None:
    """The server is checked after each point: gone after the first, the attempt fails
    ``crashed`` (retried per policy), and the point it measured stays with it."""
    async with context(tmp_path, sweep_text(contexts=TWO_CELLS)) as run:
        driver = FakeDriver(run, {8: lambda n: "dies"})
        assert await run_host_trials(run, driver)
        found = await attempts_by_budget(run)
        failed = next(a for a in await run.store.attempts(run.record.id) if a.state == "failed")
        kept = await run.store.points(attempt_id=failed.id)
    assert found[8] == [("failed", "crashed")] and found[16] == [("done", None)]
    assert [p.key for p in kept] == ["throughput/context=64/concurrency=1"]
    assert ("inv-8-2", "throughput/context=128/concurrency=1") not in driver.measured


@dataclass
class RecordedProgress:
    updates: list[dict[str, Any]] = field(default_factory=list)

    def update(self, host: str, **fields: Any) -> None:
        self.updates.append(fields)


async def test_progress_shows_each_point_as_it_starts_and_as_it_is_recorded(
    tmp_path: Path,
) -> None:
    progress = RecordedProgress()
    text = sweep_text(contexts=TWO_CELLS).replace("[{budget: 4}, {budget: 8}, {budget: 16}]",
                                                  "[{budget: 4}]")  # fmt: skip
    async with context(tmp_path, text, progress) as run:
        assert await run_host_trials(run, FakeDriver(run, {}))
    per_point = [u for u in progress.updates if "done" in u]
    assert [(u.get("step"), u["done"], u["total"]) for u in per_point] == [
        ("ctx 64 x c1", 0, 2),
        (None, 1, 2),
        ("ctx 128 x c1", 1, 2),
        (None, 2, 2),
    ]
    recorded = [u for u in per_point if "point" in u]
    assert [u["point"].context for u in recorded] == [64, 128]
    assert all(u["last_point"]["output_tok_s"] == 100.0 for u in recorded)


@pytest.mark.parametrize(
    ("key", "step"),
    [
        ("throughput/context=4096/concurrency=32", "ctx 4096 x c32"),
        ("throughput/workload=chat/context=4096/rate=8", "ctx 4096 x 8 req/s, chat"),
        ("coding/gcd", "coding gcd"),
    ],
)
def test_the_step_names_the_point_being_measured(key: str, step: str) -> None:
    plan = TrialPlan(
        cells=(MatrixCell(4096, 32), MatrixCell(4096, rate=8.0, workload="chat")), rounds=1
    )
    assert point_step(key, plan) == step
