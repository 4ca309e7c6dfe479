"""A search on a simulated host: a screen continues on its running server,
``search.max_restarts`` holds against retries, and a cut sweep resumes its trial in flight
once, counted.

Kept tiny (two configs, two cells, one round, 24 tokens): the optimum-finding is measured by
``benchmarks/search.py``, not here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from orchestrator.hostloop import StopSignal
from orchestrator.runner import run_sweep
from orchestrator.search.budget import RESTART_EVENT
from orchestrator.search.source import trial_source_for
from orchestrator.store import Store
from orchestrator.sweepfile import parse_sweep
from tests.faults.harness import (
    FAULTY,
    HEALTHY,
    OTHER,
    assert_restored,
    fault_host,
    on_faulty,
    sweep_yaml,
)

ADDRESS = "127.0.0.247"  # outside the fault tests' 120-139 and the other single-test hosts


class _ShutdownAtFirstPoint:
    """Progress that asks for a daemon-style shutdown as the first point begins: the point
    is measured, then the attempt stays running in the store, as after a kill between two
    points."""

    def __init__(self, stop: StopSignal) -> None:
        self.stop = stop

    def update(self, host: str, **fields: Any) -> None:
        if str(fields.get("step", "")).startswith("ctx"):
            self.stop.stop("shutdown")


def _with(text: str, **top: object) -> str:
    document = yaml.safe_load(text)
    document.update(top)
    return yaml.safe_dump(document, sort_keys=False)


async def test_a_screen_continues_on_its_server_and_the_cap_holds_against_retries(
    tmp_path: Path,
) -> None:
    async with fault_host(
        tmp_path, ADDRESS, server_faults={"crash_at_start": on_faulty("oom")}
    ) as host:
        text = _with(
            sweep_yaml(host, "search-screen", [HEALTHY, OTHER], benchmark={"concurrency": [1, 2]}),
            objective={"metric": "output_tok_s", "context": 60, "concurrency": 1},
            search={"strategy": "adaptive", "max_restarts": 2, "seed": 3, "confirmations": 0},
        )
        sweep = parse_sweep(text, "search-screen.yaml")
        async with await Store.open(tmp_path / "orchestrator.db") as store:
            outcome = await run_sweep(sweep, text, store, trials=trial_source_for(sweep))
            events = await store.events(outcome.sweep_id)
        trials = outcome.sweep_results.trials
        assert [t.state for t in trials] == ["done", "done"], trials
        first = trials[0]
        # The first screen is promoted at once (nothing to compare with): one attempt, one
        # restart, the objective's cell then the rest of the matrix from the same process.
        assert first.plan is not None and first.plan.purpose == "screen"
        assert {(p.context, p.concurrency) for p in first.throughput} == {(60, 1), (60, 2)}
        assert len({p.provenance.invocation_id for p in first.throughput}) == 1
        assert [p.concurrency for p in first.throughput] == [1, 2]
        assert [e.kind for e in events].count("trial.extended") >= 1
        assert [e.kind for e in events].count(RESTART_EVENT) == 2  # two configs, two starts
        await assert_restored(host)

        # A config whose start always fails, retried up to 3 times, under a cap of 2 starts:
        # the third start is not made, and no entry stands for it (one entry per start).
        text = _with(
            sweep_yaml(host, "search-cap", [FAULTY], policy={"trial_retries": 3}),
            search={"strategy": "grid", "max_restarts": 2},
        )
        sweep = parse_sweep(text, "search-cap.yaml")
        async with await Store.open(tmp_path / "orchestrator.db") as store:
            outcome = await run_sweep(sweep, text, store, trials=trial_source_for(sweep))
            events = await store.events(outcome.sweep_id, kinds=(RESTART_EVENT,))
        attempts = outcome.sweep_results.trials
        assert [(a.state, a.cause) for a in attempts] == [
            ("failed", "oom"),
            ("failed", "oom"),
        ]
        assert len(events) == 2
        await assert_restored(host)

        # Cut at the first point of the first proposal, then resumed by a fresh source: the
        # trial in flight is re-run once (the same attempt, resumed), and its restart counts.
        text = _with(
            sweep_yaml(host, "search-resume", [HEALTHY], benchmark={"concurrency": [1, 2]}),
            search={
                "strategy": "random",
                "max_restarts": 3,
                "seed": 1,
                "confirmations": 0,
                "race": 0,  # one proposal: what is resumed is its attempt, nothing after it
            },
        )
        sweep = parse_sweep(text, "search-resume.yaml")
        async with await Store.open(tmp_path / "orchestrator.db") as store:
            stop = StopSignal()
            cut = await run_sweep(
                sweep,
                text,
                store,
                trials=trial_source_for(sweep),
                stop=stop,
                progress=_ShutdownAtFirstPoint(stop),
            )
            assert cut.state == "running"
            outcome = await run_sweep(sweep, text, store, trials=trial_source_for(sweep))
            events = await store.events(outcome.sweep_id, kinds=(RESTART_EVENT,))
            attempts = await store.attempts(outcome.sweep_id)
        assert outcome.state == "done"
        assert [(a.number, a.state, a.resumes) for a in attempts] == [(1, "done", 1)]
        assert len(outcome.sweep_results.trials[0].throughput) == 2
        assert [e.attempt_id for e in events] == [attempts[0].id] * 2
        await assert_restored(host)
