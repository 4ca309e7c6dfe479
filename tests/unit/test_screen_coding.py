"""A search's screen measures the objective's cells and no coding anchor (docs/search.md): the
runner reads the plan, not the sweep file, to decide whether a trial pays for the coding
problems. A promising screen's extension and an ordinary trial still run them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.runner import _planned_problems
from orchestrator.search.score import sweep_objective
from orchestrator.search.source import screen_plan
from orchestrator.sweepfile import Sweep, parse_sweep
from orchestrator.trialsource import trial_plan


def _sweep(problems: str = "builtin") -> Sweep:
    document: dict[str, Any] = {
        "name": "screen-coding",
        "hosts": [
            {"name": "h1", "address": "127.0.0.1", "base_url": "http://127.0.0.1:30000"},
        ],
        "server": {
            "model": "m",
            "extra_flags": ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"],
            "knobs": {"budget": {"flag": "--speculative-num-draft-tokens"}},
        },
        "baseline": False,
        "grid": {"budget": [4, 8, 16]},
        "benchmark": {"contexts": [60, 120], "concurrency": [1, 4], "rounds": 2},
        "objective": {"metric": "output_tok_s", "context": 60, "concurrency": 1},
        "coding": {"problems": problems, "select": ["fib", "gcd"]},
        "search": {"strategy": "adaptive", "max_restarts": 6, "seed": 7},
    }
    return parse_sweep(yaml.safe_dump(document, sort_keys=False), "screen-coding.yaml")


def test_a_screen_runs_no_coding_problem() -> None:
    sweep = _sweep()
    screen = screen_plan(sweep, sweep_objective(sweep))
    assert screen.purpose == "screen"
    assert _planned_problems(sweep, screen) == []
    assert screen.total_points == len(screen.cells)


def test_a_promising_screen_extended_to_the_full_plan_runs_the_coding_anchor() -> None:
    sweep = _sweep()
    extended = dataclasses.replace(trial_plan(sweep), purpose="screen")
    assert [p.id for p in _planned_problems(sweep, extended)] == ["fib", "gcd"]


def test_a_trial_whose_problem_file_was_unreadable_still_reads_it_and_fails_there(
    tmp_path: Path,
) -> None:
    sweep = _sweep(problems=str(tmp_path / "missing.jsonl"))
    plan = trial_plan(sweep)
    assert plan.problems == ()
    with pytest.raises(OSError):
        _planned_problems(sweep, plan)
