"""Where a sweep's trials come from: the seam between "what to try next" and "run it".

The runner drives each host through a :class:`TrialSource`: when the host is free it asks
``next_trial(host)``, runs what it gets, and ``tell``\\ s the source how it ended. Today the
source is the plan (:class:`PlanTrialSource`: each host's trials in plan order, all stored up
front); a search strategy that proposes one trial at a time from the results so far plugs in
behind the same protocol, storing each trial when it proposes it. Resume needs nothing from a
source's memory: the runner skips what the store already holds as finished. After a trial
measured its plan the runner asks ``extend`` whether it goes on, on the same server, with more
(a search's promising screen continues with the full matrix).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from orchestrator.bench.problems import (
    CodingProblem,
    ProblemFileError,
    builtin_problems,
    load_problem_file,
    select,
)
from orchestrator.plan import Trial, plan_sweep
from orchestrator.store import (
    Attempt,
    NewTrial,
    Point,
    Store,
    SweepRecord,
    TrialPlan,
    TrialRecord,
)
from orchestrator.sweepfile import Sweep


def sweep_problems(sweep: Sweep) -> list[CodingProblem]:
    """The coding anchor's problems as the sweep selects them (its file read now)."""
    assert sweep.coding is not None
    spec = sweep.coding
    problems = (
        builtin_problems() if spec.problems == "builtin" else load_problem_file(spec.problems)
    )
    return select(problems, spec.select) if spec.select else problems


def trial_plan(sweep: Sweep, *, repeat: int = 1) -> TrialPlan:
    """What each of the sweep's trials measures, as stored with the trial when it is planned;
    ``repeat`` says which measurement of its config the trial is (a grid round).

    A problem file that cannot be read leaves the plan's problem list empty: each trial then
    fails on it when it measures, with the error as evidence, as it did before plans existed.
    """
    bench = sweep.benchmark
    problems: tuple[str, ...] = ()
    if sweep.coding:
        with contextlib.suppress(OSError, ProblemFileError):
            problems = tuple(p.id for p in sweep_problems(sweep))
    return TrialPlan(
        cells=bench.matrix_cells(),
        rounds=bench.rounds,
        problems=problems,
        coding_temperature=sweep.coding.temperature if sweep.coding else None,
        model=sweep.server.model,
        repeat=repeat,
    )


@dataclass(frozen=True, slots=True)
class SourcedTrial:
    """A trial for one host: the plan's view (config, key) and its row in the store."""

    planned: Trial
    record: TrialRecord


def sourced(record: TrialRecord) -> SourcedTrial:
    """A stored trial as a source offers it (its plan view rebuilt from its row): what a
    source that proposes as it goes hands the host loop."""
    planned = Trial(
        key=record.key,
        host=record.host,
        config=dict(record.config),
        is_baseline=record.is_baseline,
        ordinal=record.ordinal,
    )
    return SourcedTrial(planned, record)


class TrialSource(Protocol):
    """A sweep's supply of trials, asked per host; hosts ask concurrently, each one at a time."""

    @property
    def known(self) -> int | None:
        """How many trials are stored ahead of running (None: proposed as the sweep goes)."""
        ...

    async def next_trial(self, host: str) -> SourcedTrial | None:
        """The next trial ``host`` should run, or None when it has nothing more to do."""
        ...

    async def tell(self, trial: SourcedTrial, outcome: Attempt | None) -> None:
        """``trial`` is over on its host for this run: ``outcome`` is its latest attempt as
        stored (None when it has none)."""
        ...

    def withdraw(self, host: str) -> list[SourcedTrial]:
        """The stored trials ``host`` will no longer be asked for (host set aside, lost, the
        sweep cancelled), so the runner records why; a source that proposes as it goes has
        stored none ahead and returns nothing."""
        ...

    async def extend(self, trial: TrialRecord, points: Sequence[Point]) -> TrialPlan | None:
        """``trial`` measured its plan (``points``, all of its attempt's so far) and its server
        still runs: the plan to go on with on that server, in the same attempt (e.g. a
        promising screen's full matrix and coding anchor), or None to end the trial. The runner
        stores the new plan with the trial and measures what it adds."""
        ...


TrialSourceFactory = Callable[[Store, SweepRecord, Sweep], Awaitable[TrialSource]]
"""Makes a sweep's source once the sweep's hosts are in the store (``run_sweep`` calls it)."""


class PlanTrialSource:
    """The plan, in order: each host's trials by ordinal, each offered once per run."""

    def __init__(self, trials: Sequence[SourcedTrial]) -> None:
        self._pending: dict[str, list[SourcedTrial]] = {}
        for trial in sorted(trials, key=lambda t: t.record.ordinal):
            self._pending.setdefault(trial.record.host, []).append(trial)
        self._count = len(trials)

    @classmethod
    async def open(cls, store: Store, record: SweepRecord, sweep: Sweep) -> PlanTrialSource:
        """Plan ``sweep`` and store its trials (idempotent: a resumed sweep gets its rows)."""
        plan = plan_sweep(sweep)
        measures = {r: trial_plan(sweep, repeat=r) for r in {t.repeat for t in plan.trials}}
        stored = await store.add_trials(
            record.id,
            [
                NewTrial(t.key, t.host, t.config, t.ordinal, t.is_baseline, plan=measures[t.repeat])
                for t in plan.trials
            ],
        )
        planned: Mapping[tuple[str, str], Trial] = {(t.key, t.host): t for t in plan.trials}
        # The store holds every trial of the sweep; the plan's are those it made (a schedule
        # trial added as the sweep went is its own source's, :mod:`orchestrator.search.schedule`).
        return cls(
            [
                SourcedTrial(planned[(row.key, row.host)], row)
                for row in stored
                if (row.key, row.host) in planned
            ]
        )

    @property
    def known(self) -> int | None:
        return self._count

    async def next_trial(self, host: str) -> SourcedTrial | None:
        pending = self._pending.get(host)
        return pending.pop(0) if pending else None

    async def tell(self, trial: SourcedTrial, outcome: Attempt | None) -> None:
        del trial, outcome  # the order is fixed; what ran changes nothing

    def withdraw(self, host: str) -> list[SourcedTrial]:
        return self._pending.pop(host, [])

    async def extend(self, trial: TrialRecord, points: Sequence[Point]) -> TrialPlan | None:
        del trial, points  # a planned trial measures its plan, nothing more
        return None


async def plan_trial_source(store: Store, record: SweepRecord, sweep: Sweep) -> TrialSource:
    """Today's source for every sweep (a :data:`TrialSourceFactory`)."""
    return await PlanTrialSource.open(store, record, sweep)
