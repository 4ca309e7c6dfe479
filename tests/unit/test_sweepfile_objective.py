"""The sweep file's answer keys: objective, constraints, search, benchmark.repeats."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.sweepfile import SweepFileError, load_sweep
from orchestrator.types import MatrixCell

BASE = """\
name: t
hosts:
  - {name: a, address: 127.0.0.1, base_url: "http://127.0.0.1:30000", type: gpu}
server:
  model: m
  knobs: {budget: {flag: --speculative-ddtree-budget}}
configs: [{budget: 8}]
benchmark: {contexts: [1024, 4096], concurrency: [1, 32], repeats: 3}
"""


def load(tmp_path: Path, extra: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "s.yaml"
    path.write_text(BASE + extra)
    return load_sweep(path)


def problems(tmp_path: Path, extra: str) -> str:
    with pytest.raises(SweepFileError) as caught:
        load(tmp_path, extra)
    return str(caught.value)


def test_objective_constraints_and_search_parse(tmp_path: Path) -> None:
    sweep = load(
        tmp_path,
        "objective: {metric: ttft_p99_s, context: 4096, concurrency: 32}\n"
        'constraints: {coding_pass_rate: ">= baseline", lossless: true, ttft_p99_s: "<= 2.0"}\n'
        "search: {strategy: adaptive, max_restarts: 40, seed: 7}\n",
    )
    assert sweep.benchmark.repeats == 3
    assert sweep.objective is not None
    assert sweep.objective.minimized and sweep.objective.target_cells == (MatrixCell(4096, 32),)
    bound = sweep.constraints["coding_pass_rate"]
    assert not isinstance(bound, bool) and (bound.op, bound.value) == (">=", "baseline")
    ttft = sweep.constraints["ttft_p99_s"]
    assert not isinstance(ttft, bool) and (ttft.op, ttft.value) == ("<=", 2.0)
    assert sweep.constraints["lossless"] is True
    assert (sweep.search.strategy, sweep.search.max_restarts, sweep.search.seed) == (
        "adaptive",
        40,
        7,
    )


def test_defaults_are_todays_behaviour(tmp_path: Path) -> None:
    sweep = load(tmp_path, "")
    assert sweep.objective is None and sweep.constraints == {}
    assert sweep.search.strategy == "grid" and sweep.search.max_restarts is None


def test_objective_over_cells_is_maximized_for_throughput(tmp_path: Path) -> None:
    sweep = load(
        tmp_path,
        "objective:\n  metric: output_tok_s\n  cells:\n"
        "    - {context: 1024, concurrency: 1}\n    - {context: 4096, concurrency: 32}\n",
    )
    assert sweep.objective is not None and not sweep.objective.minimized
    assert sweep.objective.target_cells == (MatrixCell(1024, 1), MatrixCell(4096, 32))


def test_an_objective_cell_outside_the_matrix_names_its_line(tmp_path: Path) -> None:
    text = problems(tmp_path, "objective: {metric: output_tok_s, context: 8192, concurrency: 32}\n")
    assert "s.yaml:9: objective: cell context 8192 / concurrency 32 is not in the" in text


def test_an_unknown_metric_is_named_with_a_suggestion(tmp_path: Path) -> None:
    text = problems(tmp_path, "objective: {metric: output_toks, context: 1024, concurrency: 1}\n")
    assert "'output_toks' is not a stored point metric (did you mean 'output_tok_s'?)" in text


def test_a_bad_bound_is_one_clear_error(tmp_path: Path) -> None:
    text = problems(tmp_path, 'constraints: {ttft_p99_s: "about 2"}\n')
    assert text.count("constraints.ttft_p99_s") == 1
    assert "'about 2' is not a bound such as '<= 2.0' or '>= baseline'" in text
    assert "lossless takes true or false" in problems(tmp_path, 'constraints: {lossless: "<= 1"}\n')


def test_a_search_without_a_budget_is_refused_at_its_line(tmp_path: Path) -> None:
    text = problems(tmp_path, "search: {strategy: random}\n")
    assert "s.yaml:9: search: strategy random needs max_restarts" in text
