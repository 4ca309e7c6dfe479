"""A trial measures the plan stored with it, not the sweep file's matrix.

A search strategy (behind the runner's trial source) may plan a trial at a lower fidelity,
e.g. screening on one cell with fewer rounds. Here a source stores each trial with one of the
sweep's two cells: the runner measures exactly that cell, with the plan's rounds, and the
trial's total in the live progress counts only what was planned.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from orchestrator.plan import plan_sweep
from orchestrator.runner import run_sweep
from orchestrator.store import MatrixCell, NewTrial, Store, SweepRecord
from orchestrator.sweepfile import Sweep, parse_sweep
from orchestrator.trialsource import PlanTrialSource, SourcedTrial, TrialSource, trial_plan
from tests.faults.harness import HEALTHY, assert_restored, fault_host, sweep_yaml

ADDRESS = "127.0.0.214"  # outside the fault tests' 120-139: each test its own address
SCREEN = MatrixCell(60, 2)


async def _screening_source(store: Store, record: SweepRecord, sweep: Sweep) -> TrialSource:
    plan = plan_sweep(sweep)
    screening = dataclasses.replace(trial_plan(sweep), cells=(SCREEN,), rounds=1)
    stored = await store.add_trials(
        record.id,
        [
            NewTrial(t.key, t.host, t.config, t.ordinal, t.is_baseline, plan=screening)
            for t in plan.trials
        ],
    )
    planned = {(t.key, t.host): t for t in plan.trials}
    return PlanTrialSource([SourcedTrial(planned[(r.key, r.host)], r) for r in stored])


class _Totals:
    """Records each progress report's ``total`` (the planned points of the trial)."""

    def __init__(self) -> None:
        self.totals: set[int] = set()

    def update(self, host: str, **fields: Any) -> None:
        if "total" in fields:
            self.totals.add(int(fields["total"]))


async def test_the_runner_measures_the_trials_stored_plan(tmp_path: Path) -> None:
    async with fault_host(tmp_path, ADDRESS) as host:
        text = sweep_yaml(host, "screening", [HEALTHY], benchmark={"concurrency": [1, 2]})
        sweep = parse_sweep(text, "screening.yaml")
        assert len(trial_plan(sweep).cells) == 2  # the sweep file's matrix
        progress = _Totals()
        async with await Store.open(tmp_path / "orchestrator.db") as store:
            outcome = await run_sweep(
                sweep, text, store, trials=_screening_source, progress=progress
            )
        (trial,) = outcome.results["trials"]
        assert trial["state"] == "done", trial
        cells = [
            (p["context"], p["concurrency"]) for p in trial["points"] if p["kind"] == "throughput"
        ]
        assert cells == [(SCREEN.context, SCREEN.concurrency)]
        assert trial["plan"]["rounds"] == 1
        assert progress.totals == {1}
        await assert_restored(host)
