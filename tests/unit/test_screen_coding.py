"""A search's screen measures the objective's cells and no coding anchor (docs/search.md): the
served server reads the plan, not the sweep file, to decide whether a trial pays for the coding
problems. A promising screen's extension and an ordinary trial still run them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from orchestrator.running import planned_problems
from orchestrator.search.score import sweep_objective
from orchestrator.search.source import screen_plan
from orchestrator.sweepfile import Sweep
from orchestrator.trialsource import trial_plan
from tests.unit.tinysweep import tiny_sweep


def _sweep(problems: str = "builtin") -> Sweep:
    return tiny_sweep(
        benchmark={"contexts": [60, 120], "concurrency": [1, 4], "rounds": 2},
        coding={"problems": problems, "select": ["fib", "gcd"]},
        search={"strategy": "adaptive", "max_restarts": 6, "seed": 7},
    )


def test_a_screen_runs_no_coding_problem() -> None:
    sweep = _sweep()
    screen = screen_plan(sweep, sweep_objective(sweep))
    assert screen.purpose == "screen"
    assert planned_problems(sweep, screen) == []
    assert screen.total_points == len(screen.cells)


def test_a_promising_screen_extended_to_the_full_plan_runs_the_coding_anchor() -> None:
    sweep = _sweep()
    extended = dataclasses.replace(trial_plan(sweep), purpose="screen")
    assert [p.id for p in planned_problems(sweep, extended)] == ["fib", "gcd"]


def test_a_trial_whose_problem_file_was_unreadable_still_reads_it_and_fails_there(
    tmp_path: Path,
) -> None:
    sweep = _sweep(problems=str(tmp_path / "missing.jsonl"))
    plan = trial_plan(sweep)
    assert plan.problems == ()
    with pytest.raises(OSError):
        planned_problems(sweep, plan)
