"""Answers from typed results with a known answer: verdicts, constraints, pooling, repeats.

Each test builds a sweep's results the way the store hands them over (one TrialOutcome per
attempt, typed points, each trial's plan) with values drawn around known true means, and
checks what `answer_sweep` decides from them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.answers import Answer, answer_sweep, answered_from_text
from orchestrator.answers.pooling import check_pool
from orchestrator.bench.coding import Outcome
from orchestrator.cli import main
from orchestrator.store import (
    CodingPoint,
    HostEntry,
    HostOutcome,
    LatencySummary,
    MatrixCell,
    NewTrial,
    Store,
    SweepResults,
    ThroughputMetrics,
    ThroughputPoint,
    TrialOutcome,
    TrialPlan,
)
from orchestrator.sweepfile import Sweep, parse_sweep

CELL = (1024, 4)
B4, B8, B16 = {"budget": 4}, {"budget": 8}, {"budget": 16}


def sweep_text(
    *, hosts: Sequence[str] = ("a",), extra: str = "", objective: bool = True, name: str = "t"
) -> str:
    lines = [
        f"name: {name}",
        "hosts:",
        *(
            f'  - {{name: {h}, address: 127.0.0.{i + 1}, base_url: "http://127.0.0.{i + 1}:30000",'
            " type: gpu}"
            for i, h in enumerate(hosts)
        ),
        "server:",
        "  model: m",
        "  knobs: {budget: {flag: --speculative-ddtree-budget}}",
        "baseline: true",
        "configs: [{budget: 4}, {budget: 8}, {budget: 16}]",
        "benchmark: {contexts: [1024, 4096], concurrency: [4]}",
    ]
    if objective:
        lines.append("objective: {metric: output_tok_s, context: 1024, concurrency: 4}")
    return "\n".join(lines) + "\n" + extra


def make_sweep(**kwargs: Any) -> Sweep:
    return parse_sweep(sweep_text(**kwargs), "t.yaml")


class Bench:
    """Builds attempts in the order they finish."""

    def __init__(self) -> None:
        self.trials: list[TrialOutcome] = []
        self._clock = itertools.count(1)

    def run(
        self,
        host: str,
        config: Mapping[str, Any],
        value: float | None,
        *,
        purpose: str = "measure",
        ttft_p99: float = 0.5,
        coding: Sequence[tuple[str, Outcome, str]] = (),
        state: str = "done",
        cause: str | None = None,
        cells: Sequence[tuple[int, int]] = (CELL,),
        quality: tuple[str, ...] = (),
    ) -> None:
        points: list[Any] = []
        if value is not None:
            points.extend(
                ThroughputPoint(
                    context=c,
                    concurrency=k,
                    metrics=ThroughputMetrics(
                        output_tok_s=value, ttft=LatencySummary(count=4, p99_s=ttft_p99)
                    ),
                    quality=quality,
                )
                for c, k in cells
            )
        self._add(
            host,
            config,
            points,
            cells=tuple(MatrixCell(c, k) for c, k in cells),
            purpose=purpose,
            coding=coding,
            state=state,
            cause=cause,
        )

    def run_goodput(
        self, host: str, config: Mapping[str, Any], value: float, *, rate: float
    ) -> None:
        """A restart measured at one open-loop cell (context 1024 at ``rate`` req/s)."""
        point = ThroughputPoint(
            context=1024, concurrency=None, rate=rate, metrics=ThroughputMetrics(goodput=value)
        )
        self._add(host, config, [point], cells=(MatrixCell(1024, rate=rate),))

    def _add(
        self,
        host: str,
        config: Mapping[str, Any],
        points: list[Any],
        *,
        cells: tuple[MatrixCell, ...],
        purpose: str = "measure",
        coding: Sequence[tuple[str, Outcome, str]] = (),
        state: str = "done",
        cause: str | None = None,
    ) -> None:
        n = next(self._clock)
        points.extend(CodingPoint(problem=p, outcome=o, output=text) for p, o, text in coding)
        plan = TrialPlan(
            cells=cells,
            rounds=2,
            problems=tuple(p for p, _, _ in coding),
            coding_temperature=0.0 if coding else None,
            purpose=purpose,  # type: ignore[arg-type]
        )
        self.trials.append(
            TrialOutcome(
                key=f"{host}.{json.dumps(dict(config), sort_keys=True)}.{n}",
                host=host,
                config=dict(config),
                baseline=not config,
                state=state,  # type: ignore[arg-type]
                cause=cause,
                attempt=1,
                started_at=float(n),
                finished_at=float(n) + 0.5,
                points=tuple(points),
                plan=plan,
            )
        )

    def results(self, hosts: Sequence[str] = ("a",), state: str = "done") -> SweepResults:
        return SweepResults(
            sweep="t",
            id=1,
            state=state,  # type: ignore[arg-type]
            hosts=tuple(HostOutcome(h, "gpu") for h in hosts),
            trials=tuple(self.trials),
        )


def noisy(rng: np.random.Generator, mean: float, n: int, cv: float = 0.01) -> Iterator[float]:
    return (float(mean * (1 + cv * z)) for z in rng.standard_normal(n))


def interleaved(
    bench: Bench, rng: np.random.Generator, means: Mapping[str, float], repeats: int, **kw: Any
) -> None:
    """A B C A B C: each config's repeats interleaved with the others'."""
    configs = {"{}": {}, "4": B4, "8": B8, "16": B16}
    draws = {k: list(noisy(rng, m, repeats, **kw)) for k, m in means.items()}
    for r in range(repeats):
        for key, values in draws.items():
            bench.run("a", configs[key], values[r])


def only(answers: Sequence[Answer]) -> Answer:
    assert len(answers) == 1
    return answers[0]


# --- verdicts ---------------------------------------------------------------------------------


def test_a_clear_winner_is_better_with_speedup_and_margin_intervals() -> None:
    bench = Bench()
    interleaved(bench, np.random.default_rng(1), {"{}": 80, "4": 100, "8": 130, "16": 110}, 3)
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert answer.verdict == "better" and answer.tied == ()
    assert answer.best is not None and answer.best.config == B8
    assert answer.runner_up is not None and answer.runner_up.config == B16
    best = answer.best
    assert best.estimate.basis == "restarts" and best.estimate.restarts == 3
    assert best.estimate.ci95 is not None and best.estimate.ci95[0] < 130 < best.estimate.ci95[1]
    assert best.speedup_vs_baseline == pytest.approx(130 / 80, rel=0.03)
    assert best.speedup_ci95 is not None and best.speedup_ci95[0] > 1.5
    assert answer.margin is not None and answer.margin.ci95 is not None
    assert answer.margin.ci95[0] > 0 and answer.margin.relative == pytest.approx(
        130 / 110 - 1, abs=0.03
    )
    assert (answer.explored, answer.space, answer.restarts_used) == (4, 4, 12)
    assert [c.config for c in answer.contenders] == [B8, B16, B4, {}]
    assert any("picked on" in note for note in answer.notes)  # no confirmation restarts
    document = json.loads(json.dumps([answer.to_json()], allow_nan=False))[0]
    assert document["best"]["config"] == B8 and document["verdict"] == "better"
    assert len(document["best"]["ci95"]) == 2 and document["restarts_used"] == 12


def test_configs_closer_than_the_noise_tie_and_every_indistinguishable_one_is_listed() -> None:
    bench = Bench()
    means = {"{}": 80, "4": 100, "8": 100.4, "16": 99.8}
    interleaved(bench, np.random.default_rng(2), means, 3, cv=0.02)
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert answer.verdict == "tie"
    assert answer.best is not None
    tied = [c.config for c in answer.tied]
    assert answer.best.config not in tied
    assert sorted([answer.best.config, *tied], key=lambda c: c["budget"]) == [B4, B8, B16]
    estimates = {json.dumps(c.config): c.estimate.value for c in answer.contenders}
    assert estimates[json.dumps(answer.best.config)] == max(
        v for k, v in estimates.items() if k != "{}"
    )  # the tied config with the highest estimate


def test_a_minimized_objective_prefers_the_lowest_latency() -> None:
    bench = Bench()
    rng = np.random.default_rng(3)
    latency = {"{}": 2.0, "4": 1.2, "8": 0.8, "16": 1.0}
    configs = {"{}": {}, "4": B4, "8": B8, "16": B16}
    for _ in range(3):
        for key, config in configs.items():
            bench.run("a", config, 100.0, ttft_p99=next(noisy(rng, latency[key], 1)))
    objective = "objective: {metric: ttft_p99_s, context: 1024, concurrency: 4}\n"
    sweep = parse_sweep(sweep_text(objective=False) + objective, "t.yaml")
    answer = only(answer_sweep(bench.results(), sweep))
    assert answer.objective.minimized and answer.verdict == "better"
    assert answer.best is not None and answer.best.config == B8
    assert answer.best.speedup_vs_baseline == pytest.approx(2.0 / 0.8, rel=0.03)
    assert answer.margin is not None and answer.margin.relative == pytest.approx(0.25, abs=0.03)


def test_nothing_valid_measured_is_no_valid_config() -> None:
    bench = Bench()
    bench.run("a", B8, None, state="failed", cause="oom")
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert answer.verdict == "no-valid-config" and answer.best is None
    assert answer.restarts_used == 1 and [f.cause for f in answer.failed] == ["oom"]
    assert answer.explored == 0 and answer.convergence[-1].best is None


def test_without_an_objective_every_cell_gets_its_own_answer() -> None:
    bench = Bench()
    rng = np.random.default_rng(4)
    for _ in range(2):
        bench.run("a", {}, next(noisy(rng, 80, 1)), cells=((1024, 4), (4096, 4)))
        bench.run("a", B8, next(noisy(rng, 120, 1)), cells=((1024, 4), (4096, 4)))
    answers = answer_sweep(bench.results(), make_sweep(objective=False))
    assert [a.objective.cells for a in answers] == [(MatrixCell(1024, 4),), (MatrixCell(4096, 4),)]
    assert all(a.best is not None and a.best.config == B8 for a in answers)


# --- constraints ------------------------------------------------------------------------------


def test_a_faster_config_that_breaks_a_latency_bound_cannot_win() -> None:
    bench = Bench()
    rng = np.random.default_rng(5)
    for _ in range(3):
        bench.run("a", {}, next(noisy(rng, 80, 1)), ttft_p99=1.0)
        bench.run("a", B8, next(noisy(rng, 140, 1)), ttft_p99=2.4)  # fastest, too slow to start
        bench.run("a", B4, next(noisy(rng, 110, 1)), ttft_p99=1.5)
    sweep = make_sweep(extra='constraints: {ttft_p99_s: "<= 2.0"}\n')
    answer = only(answer_sweep(bench.results(), sweep))
    assert answer.best is not None and answer.best.config == B4
    assert answer.verdict == "better" and answer.runner_up is not None
    assert answer.runner_up.config == {}
    loser = next(c for c in answer.contenders if c.config == B8)
    assert loser.violations and "breaks <= 2" in loser.violations[0]
    assert answer.contenders[-1].config == B8  # invalid configs rank after every valid one


def _coding(passes: int, text: str = "same") -> list[tuple[str, Outcome, str]]:
    problems = ["p1", "p2", "p3", "p4", "p5"]
    return [(p, Outcome.PASS if i < passes else Outcome.FAIL, text) for i, p in enumerate(problems)]


def test_coding_pass_rate_at_least_the_baseline_and_lossless_decide_who_may_win() -> None:
    bench = Bench()
    rng = np.random.default_rng(6)
    for _ in range(2):
        bench.run("a", {}, next(noisy(rng, 80, 1)), coding=_coding(5))
        bench.run("a", B16, next(noisy(rng, 150, 1)), coding=_coding(3))  # fastest, worse code
        bench.run("a", B8, next(noisy(rng, 130, 1)), coding=_coding(5, "drifted"))  # not lossless
        bench.run("a", B4, next(noisy(rng, 100, 1)), coding=_coding(5))
    sweep = make_sweep(extra='constraints: {coding_pass_rate: ">= baseline", lossless: true}\n')
    answer = only(answer_sweep(bench.results(), sweep))
    assert answer.best is not None and answer.best.config == B4
    by = {json.dumps(c.config): c for c in answer.contenders}
    assert "coding_pass_rate 0.6 breaks >= baseline (1)" in by['{"budget": 16}'].violations
    assert by['{"budget": 8}'].violations[0].startswith("lossless broken: 5 of 5")
    assert by["{}"].violations == ()


def test_a_lossless_constraint_that_cannot_be_judged_says_so() -> None:
    bench = Bench()
    for value in (80.0, 81.0):
        bench.run("a", {}, value)
        bench.run("a", B8, value + 40)
    answer = only(
        answer_sweep(bench.results(), make_sweep(extra="constraints: {lossless: true}\n"))
    )
    b8 = next(c for c in answer.contenders if c.config == B8)
    assert b8.violations == (
        "lossless cannot be judged: no baseline coding outputs at temperature 0",
    )
    assert answer.best is not None and answer.best.config == {}


# --- pooling ----------------------------------------------------------------------------------


def _three_hosts(sick: float, seed: int) -> SweepResults:
    bench = Bench()
    rng = np.random.default_rng(seed)
    configs = ({}, B4, B8, B16)
    means = (80.0, 100.0, 130.0, 110.0)
    for _ in range(2):
        for config, mean in zip(configs, means, strict=True):
            for host in ("a", "b", "c"):
                factor = sick if host == "c" else 1.0
                bench.run(host, config, next(noisy(rng, mean * factor, 1, cv=0.02)))
    return bench.results(hosts=("a", "b", "c"))


def test_a_sick_host_is_flagged_and_kept_out_of_the_pool() -> None:
    sweep = make_sweep(hosts=("a", "b", "c"))
    answer = only(answer_sweep(_three_hosts(0.85, 7), sweep))
    assert [f.host for f in answer.flags] == ["c"]
    assert "-1" in answer.flags[0].message and "kept out of the pool" in answer.flags[0].message
    assert answer.best is not None and answer.best.estimate.hosts == ("a", "b")
    assert answer.best.estimate.value == pytest.approx(130, rel=0.03)
    assert answer.restarts_used == 24  # the sick host's restarts were spent all the same


def test_healthy_siblings_are_not_flagged() -> None:
    sweep = make_sweep(hosts=("a", "b", "c"))
    for seed in range(8):
        answer = only(answer_sweep(_three_hosts(1.0, seed), sweep))
        assert answer.flags == (), answer.flags
        assert answer.best is not None and answer.best.estimate.hosts == ("a", "b", "c")


def test_two_hosts_that_disagree_are_a_note_not_a_flag() -> None:
    rng = np.random.default_rng(8)
    data = {
        str(i): {"a": list(noisy(rng, m, 2)), "b": list(noisy(rng, 0.8 * m, 2))}
        for i, m in enumerate((80, 100, 120))
    }
    check = check_pool("gpu", data, ["a", "b"])
    assert check.flags == () and len(check.notes) == 1 and "cannot be told" in check.notes[0]


# --- repeats, noise, confirmation -------------------------------------------------------------


def test_one_restart_borrows_the_variance_of_the_repeated_configs_and_says_so() -> None:
    bench = Bench()
    rng = np.random.default_rng(9)
    for _ in range(3):
        bench.run("a", {}, next(noisy(rng, 80, 1)))
        bench.run("a", B4, next(noisy(rng, 100, 1)))
    bench.run("a", B8, 130.0)
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert answer.best is not None and answer.best.config == B8
    assert answer.best.estimate.basis == "borrowed-restart-variance"
    assert answer.best.estimate.ci95 is not None
    assert any("borrows the restart variance" in note for note in answer.notes)
    # How much of the space was measured is said once, by explored/space (the report's
    # "Explored 3 of 4 configs" line), not again in a note.
    assert (answer.explored, answer.space) == (3, 4)
    assert not any("not measured" in n for n in answer.notes)


def test_nothing_repeated_gives_a_within_run_interval_labelled_so() -> None:
    bench = Bench()
    bench.run("a", {}, 80.0)
    bench.run("a", B8, 120.0)
    point = bench.trials[-1].points[0]
    assert isinstance(point, ThroughputPoint)
    within = ThroughputMetrics(output_tok_s=120.0, output_tok_s_se=1.5, output_tok_s_batches=4)
    bench.trials[-1] = dataclasses.replace(
        bench.trials[-1], points=(dataclasses.replace(point, metrics=within),)
    )
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert answer.best is not None and answer.best.config == B8
    assert answer.best.estimate.basis == "within-run-only"
    # The interval shown is the one the tie rule reads: the run's own error (1.5 of 120) with
    # the assumed 5 % restart spread added, t with 3 df, on the log scale.
    low, high = answer.best.estimate.ci95 or (1.0, 1.0)
    assert math.log(high / low) == pytest.approx(2 * 3.182 * math.hypot(1.5 / 120, 0.05), rel=1e-3)
    assert any("within-run only" in note for note in answer.notes)
    baseline = next(c for c in answer.contenders if c.config == {})
    assert baseline.estimate.basis == "none" and baseline.estimate.ci95 is None
    assert answer.verdict == "tie"  # no interval on the baseline: nothing can be claimed


def test_a_stored_file_that_no_longer_parses_gets_results_without_answers() -> None:
    bench = Bench()
    bench.run("a", B8, 120.0)
    document = answered_from_text(bench.results(), "name: t\nconfigs: 3\n", "t").to_json()
    assert document["answers"] == [] and len(document["trials"]) == 1


def test_noisy_config_is_flagged() -> None:
    bench = Bench()
    for value in (100.0, 120.0, 85.0):
        bench.run("a", B8, value)
    for value in (80.0, 80.5, 79.5):
        bench.run("a", {}, value)
    answer = only(answer_sweep(bench.results(), make_sweep()))
    b8 = next(c for c in answer.contenders if c.config == B8)
    base = next(c for c in answer.contenders if c.config == {})
    assert b8.estimate.noisy and b8.estimate.cv is not None and b8.estimate.cv > 0.05
    assert not base.estimate.noisy
    assert any("budget=8 is noisy" in note for note in answer.notes)


def test_the_winner_is_reported_from_its_confirmation_restarts_only() -> None:
    """Picked on a lucky 140, confirmed at 120: the answer says 120, not 130."""
    bench = Bench()
    for value in (80.0, 81.0):
        bench.run("a", {}, value)
    bench.run("a", B8, 140.0)
    bench.run("a", B4, 100.0)
    for value in (119.0, 121.0, 120.0):
        bench.run("a", B8, value, purpose="confirm")
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert answer.best is not None and answer.best.config == B8
    assert answer.best.estimate.value == pytest.approx(120.0)
    # Its value rests on the 3 confirmations, its interval on all 4 restarts' variance.
    assert answer.best.estimate.restarts == 4 and answer.best.estimate.basis == "restarts"
    assert any("confirmation restart" in note for note in answer.notes)
    assert answer.restarts_used == 7 and len(answer.convergence) == 7


def test_screened_only_configs_are_marked() -> None:
    bench = Bench()
    for value in (80.0, 81.0):
        bench.run("a", {}, value)
    bench.run("a", B16, 90.0, purpose="screen")
    bench.run("a", B8, 130.0, purpose="screen", cells=(CELL, (4096, 4)))  # went on to the matrix
    answer = only(answer_sweep(bench.results(), make_sweep()))
    by = {json.dumps(c.config): c for c in answer.contenders}
    assert by['{"budget": 16}'].screened_only and not by['{"budget": 8}'].screened_only


def test_restarts_used_counts_failed_and_retried_starts_and_convergence_follows_them() -> None:
    bench = Bench()
    bench.run("a", {}, 80.0)
    bench.run("a", B8, None, state="failed", cause="exited")
    bench.run("a", B8, 120.0)  # the retry
    bench.run("a", B16, None, state="failed", cause="oom")
    bench.run("a", B4, 100.0)
    answer = only(answer_sweep(bench.results(state="cancelled"), make_sweep()))
    assert answer.restarts_used == 5
    assert [(f.label, f.cause) for f in answer.failed] == [("budget=16", "oom")]
    assert [(s.restarts, s.best) for s in answer.convergence] == [
        (1, 80.0),
        (2, 80.0),
        (3, 120.0),
        (4, 120.0),
        (5, 120.0),
    ]
    assert answer.stopped == "the sweep was cancelled"


# --- the JSON edge ----------------------------------------------------------------------------


async def test_results_json_carries_the_answers_of_a_stored_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "store.db"
    text = sweep_text(name="stored")
    store = await Store.open(path)
    sweep_id = (await store.submit_sweep("stored", text)).sweep.id
    await store.add_hosts(sweep_id, [HostEntry("a", "gpu")])
    trials = await store.add_trials(
        sweep_id,
        [NewTrial(f"a.{i}", "a", config, i) for i, config in enumerate(({}, B8, {}, B8))],
    )
    for trial, value in zip(trials, (80.0, 120.0, 81.0, 121.0), strict=True):
        attempt = await store.start_attempt(trial.id)
        point = ThroughputPoint(1024, 4, ThroughputMetrics(output_tok_s=value))
        await store.record_point(attempt.id, point, [])
        await store.finish_attempt(attempt.id, "done")
    await store.set_sweep_state(sweep_id, "done")
    await store.close()

    argv = ["results", "stored", "--db", str(path), "--json"]
    assert await asyncio.to_thread(main, argv) == 0
    document = json.loads(capsys.readouterr().out)
    assert [t["config"] for t in document["trials"]] == [{}, B8, {}, B8]  # as before
    (answer,) = document["answers"]
    assert answer["host_type"] == "gpu" and answer["verdict"] == "better"
    assert answer["best"]["config"] == B8 and answer["best"]["restarts"] == 2
    assert answer["best"]["speedup_vs_baseline"] == pytest.approx(120.5 / 80.5)
    assert answer["explored"] == 2 and answer["space"] == 4 and answer["restarts_used"] == 4


def _one_restart_each(values: Mapping[str, float], se_rel: float = 0.002) -> SweepResults:
    """One restart per config, each with a tight within-run error: a grid without repeats."""
    bench = Bench()
    for config, value in ((B8, values["8"]), (B16, values["16"])):
        bench.run("a", config, value)
        point = bench.trials[-1].points[0]
        assert isinstance(point, ThroughputPoint)
        within = ThroughputMetrics(
            output_tok_s=value, output_tok_s_se=value * se_rel, output_tok_s_batches=8
        )
        bench.trials[-1] = dataclasses.replace(
            bench.trials[-1], points=(dataclasses.replace(point, metrics=within),)
        )
    return bench.results()


def test_a_one_restart_gap_within_the_assumed_restart_spread_is_a_tie() -> None:
    # 2 % apart with 0.2 % within-run errors: "better" on request noise alone, but one restart
    # each cannot tell a 2 % config effect from restart-to-restart variance.
    answer = only(answer_sweep(_one_restart_each({"8": 102.0, "16": 100.0}), make_sweep()))
    assert answer.best is not None and answer.best.estimate.basis == "within-run-only"
    assert answer.verdict == "tie"
    assert any("assumes restarts vary by 5%" in note for note in answer.notes)


def test_a_one_restart_gap_far_beyond_any_restart_spread_is_better() -> None:
    answer = only(answer_sweep(_one_restart_each({"8": 150.0, "16": 100.0}), make_sweep()))
    assert answer.verdict == "better"
    assert answer.best is not None and answer.best.config == B8


def test_a_configs_screens_and_full_restarts_are_pooled_for_the_pick() -> None:
    """A screen measures the objective's cells, so it is one more restart of the pick's value:
    budget 8 (a 96 screen, then 104 and 105 raced) averages 101.7 and loses to budget 16's
    steady 103, where dropping its screen (the old rule) made it win on 104.5."""
    bench = Bench()
    for value in (80.0, 81.0):
        bench.run("a", {}, value)
    bench.run("a", B8, 96.0, purpose="screen")
    bench.run("a", B8, 104.0)
    bench.run("a", B8, 105.0)
    for value in (103.0, 103.0, 103.0):
        bench.run("a", B16, value)
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert answer.best is not None and answer.best.config == B16
    by = {json.dumps(c.config): c for c in answer.contenders}
    assert by['{"budget": 8}'].estimate.value == pytest.approx((96.0 + 104.0 + 105.0) / 3)
    assert by['{"budget": 8}'].estimate.restarts == 3


def test_the_notes_say_what_the_restarts_column_counts() -> None:
    """A config picked on one restart and confirmed once has 2 in its restarts column: its
    notes say so rather than "one restart", and the best's note says its interval rests on all
    of its restarts while its value is its confirmations'."""
    bench = Bench()
    for value in (80.0, 81.0):
        bench.run("a", {}, value)
    bench.run("a", B8, 130.0)
    bench.run("a", B8, 120.0, purpose="confirm")
    bench.run("a", B4, 100.0)
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert answer.best is not None and answer.best.config == B8
    assert answer.best.estimate.restarts == 2
    assert answer.best.estimate.basis == "borrowed-restart-variance"
    b8_notes = [note for note in answer.notes if note.startswith("budget=8")]
    assert any("has no two restarts of one kind (2: picked on, confirmed)" in n for n in b8_notes)
    assert not any("has one restart" in n for n in b8_notes)
    assert any("its interval's variance rests on all 2 of its restarts" in n for n in b8_notes)
    b4 = next(c for c in answer.contenders if c.config == B4)
    assert b4.estimate.restarts == 1
    assert any(n.startswith("budget=4 has one restart") for n in answer.notes)
