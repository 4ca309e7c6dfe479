"""Words a new user reads first say what the code does (issue 22, item 9): the README's demo
paragraph names what the packaged demo sweep runs, the sweep-file reference has one section
per key, a verb's help is a whole sentence, and a count of one reads in the singular."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator import cli
from orchestrator.verbs.demo import DEMO_TIME_SCALE, load_demo_sweep
from orchestrator.verbs.outcome import outcome_lines

ROOT = Path(__file__).resolve().parents[2]
WORDS = {1: "one", 2: "two", 3: "three", 4: "four"}


def _demo_paragraph() -> str:
    text = (ROOT / "README.md").read_text("utf-8")
    start = text.index("`make demo` starts")
    return " ".join(text[start : text.index("\n\n", start)].split())


def _numeric(levels: list[Any]) -> list[str]:
    return [str(level) for level in sorted(levels, key=lambda level: float(str(level)))]


def _either(levels: list[Any]) -> str:
    words = _numeric(levels)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def test_the_readmes_demo_paragraph_names_what_the_demo_sweep_runs() -> None:
    sweep, _ = load_demo_sweep()
    said = _demo_paragraph()
    assert sweep.grid is not None and sweep.objective is not None
    grid_configs = 1
    for levels in sweep.grid.values():
        grid_configs *= len(levels)
    assert sweep.search.strategy in said
    assert f"at most {sweep.search.max_restarts} restarts" in said
    assert f"{grid_configs}-config grid" in said
    assert f"budget {_either(sweep.grid['budget'])}" in said
    assert f"top-k {_either(sweep.grid['topk'])}" in said
    assert f"{WORDS[len(sweep.configs)]} listed configs" in said
    objective = sweep.objective
    assert f"context {objective.context}, concurrency {objective.concurrency}" in said
    assert ("runs the baseline first" in said) == sweep.baseline
    assert f"{WORDS[len(sweep.hosts)]} simulated hosts" in said


def test_the_readmes_demo_table_is_the_demo_sweeps_space() -> None:
    sweep, _ = load_demo_sweep()
    assert sweep.grid is not None
    text = (ROOT / "README.md").read_text("utf-8")
    header = text.index("| budget \\ topk |")
    rows = text[header : text.index("\n\n", header)].splitlines()
    columns = [cell.strip() for cell in rows[0].strip("|").split("|")[1:]]
    assert columns == _numeric(sweep.grid["topk"])
    budgets = [row.strip("|").split("|")[0].strip() for row in rows[2:]]
    assert budgets == _numeric(sweep.grid["budget"])
    assert f"runs at {1 / DEMO_TIME_SCALE:g}x speed in the demo" in " ".join(text.split())


def test_the_sweep_file_reference_has_one_section_per_key() -> None:
    headings = re.findall(r"^## (.+)$", (ROOT / "docs" / "sweep-file.md").read_text(), re.M)
    assert headings.count("search") == 1
    assert len(headings) == len(set(headings))


def test_every_verbs_help_is_a_whole_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    # `validate --help` stopped at "...and list every": the summary was the docstring's first
    # line, not its first paragraph.
    for name, module in cli.VERBS.items():
        summary = cli._summary(module)
        assert summary.endswith("."), (name, summary)
    assert cli.main(["validate", "--help"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    whole = "and list every problem, a workload file's bad lines each with its own file and line."
    assert whole in shown


def test_a_trial_that_measured_one_point_says_1_point() -> None:
    screen: dict[str, Any] = {
        "key": "k",
        "host": "sim-01",
        "config": {"budget": 8},
        "state": "done",
        "attempt": 1,
        "points": [{"kind": "throughput", "metrics": {"output_tok_s": 4100.0}}],
    }
    results = {"sweep": "demo", "id": 1, "state": "done", "trials": [screen]}
    (line,) = outcome_lines(results)[1:]
    assert line.endswith("done: 1 point, up to 4,100 tok/s")
    two = {**screen, "points": screen["points"] * 2}
    (line,) = outcome_lines({**results, "trials": [two]})[1:]
    assert "done: 2 points" in line
