"""Repeats in the grid plan: rounds interleaved (A B C A B C), spread over a type's hosts, keys
stable and derived, the restart cap cutting whole rounds first, and the estimate counting it."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.plan import (
    Plan,
    PlanCut,
    estimate_plan,
    plan_json,
    plan_notes,
    plan_sweep,
    repeat_key,
    repeat_warnings,
    trial_key,
)
from orchestrator.store import HostEntry, Store
from orchestrator.sweepfile import Sweep, parse_sweep
from orchestrator.trialsource import PlanTrialSource

HEAD = """\
name: r
hosts:
  - {name: a1, address: 10.0.0.1, base_url: "http://10.0.0.1:30000", type: a}
  - {name: a2, address: 10.0.0.2, base_url: "http://10.0.0.2:30000", type: a}
  - {name: b1, address: 10.0.0.4, base_url: "http://10.0.0.4:30000", type: b}
server:
  model: m
  knobs:
    budget: {flag: --speculative-ddtree-budget}
baseline: true
grid:
  budget: [1, 2, 3]
"""
BENCH = (
    "benchmark: {contexts: [60], concurrency: [1], max_tokens: 10, rounds: 1,"
    " warmup_requests: 0, repeats: %d}\n"
)


def _sweep(extra: str = "", repeats: int = 3, head: str = HEAD) -> Sweep:
    return parse_sweep(head + BENCH % repeats + extra)


def _budgets(plan: Plan, host: str) -> list[int | None]:
    return [t.config.get("budget") for t in plan.for_host(host)]  # type: ignore[misc]


def test_repeat_key_keeps_the_first_and_derives_the_others() -> None:
    key = trial_key("a1", "sglang.service", {"budget": 1})
    assert repeat_key(key, 1) == key
    assert repeat_key(key, 2) == f"{key}~r2"
    assert repeat_key(key, 12) == f"{key}~r12"
    with pytest.raises(ValueError):
        repeat_key(key, 0)


def test_each_host_interleaves_rounds_on_one_host_and_on_two() -> None:
    lines = HEAD.splitlines(keepends=True)
    one = _sweep(
        head="".join(line for line in lines if "name: a2" not in line and "name: b1" not in line)
    )
    assert [h.name for h in one.hosts] == ["a1"]
    plan = plan_sweep(one)
    assert _budgets(plan, "a1") == [None, 1, 2, 3] * 3  # A B C A B C, not A A B B
    assert [t.repeat for t in plan] == [1] * 4 + [2] * 4 + [3] * 4
    assert [t.is_baseline for t in plan] == [True, False, False, False] * 3

    plan = plan_sweep(_sweep())
    for host in ("a1", "a2", "b1"):
        assert _budgets(plan, host) == [None, 1, 2, 3] * 3
        assert [t.repeat for t in plan.for_host(host)] == [1] * 4 + [2] * 4 + [3] * 4
    # the six measurements of budget 1 on type a: both hosts in every round
    ones = [(t.repeat, t.host) for t in plan if t.config == {"budget": 1} and t.host != "b1"]
    assert ones == [(r, h) for r in (1, 2, 3) for h in ("a1", "a2")]
    assert [t.ordinal for t in plan] == list(range(len(plan)))
    assert len({(t.key, t.host) for t in plan}) == len(plan) == 4 * 3 * 3


def test_across_type_moves_each_config_to_the_next_host_every_round() -> None:
    plan = plan_sweep(_sweep("distribute: across-type\n"))
    by_config: dict[int, list[str]] = {}
    for trial in plan:
        if trial.host != "b1" and not trial.is_baseline:
            by_config.setdefault(trial.config["budget"], []).append(trial.host)  # type: ignore[arg-type]
    # round 1 as balanced_assignment places it, then alternating over a1/a2
    assert by_config == {1: ["a1", "a2", "a1"], 2: ["a2", "a1", "a2"], 3: ["a1", "a2", "a1"]}
    # the baseline, each host's own reference, runs on every host in every round
    assert [(t.repeat, t.host) for t in plan if t.is_baseline and t.host != "b1"] == [
        (r, h) for r in (1, 2, 3) for h in ("a1", "a2")
    ]
    # each host's own order is still round after round
    for host in ("a1", "a2"):
        rounds = [t.repeat for t in plan.for_host(host)]
        assert rounds == sorted(rounds)
    assert len(plan.for_host("a1")) + len(plan.for_host("a2")) == 3 * (2 + 3)
    assert _budgets(plan, "b1") == [None, 1, 2, 3] * 3  # one host: nowhere to move
    # moving over the rounds spreads each budget over both hosts: nothing to warn about
    assert plan.warnings == ()
    assert "budget=2 only on a2" in str(plan_sweep(_sweep("distribute: across-type\n", 1)).warnings)


def test_keys_are_stable_and_repeats_one_is_todays_plan() -> None:
    once = plan_sweep(_sweep(repeats=1))
    thrice = plan_sweep(_sweep())
    assert [(t.key, t.host, t.ordinal) for t in once] == [
        (t.key, t.host, t.ordinal) for t in thrice if t.repeat == 1
    ]
    for trial in thrice:
        first = trial_key(trial.host, "sglang.service", trial.config)
        assert trial.key == repeat_key(first, trial.repeat)
    assert [t.key for t in thrice] == [t.key for t in plan_sweep(_sweep())]


async def test_a_resumed_sweep_matches_every_stored_repeat(tmp_path: Path) -> None:
    sweep = _sweep("distribute: across-type\n", repeats=2)
    async with await Store.open(tmp_path / "store.db") as store:
        record = (await store.submit_sweep(sweep.name, "text")).sweep
        await store.add_hosts(record.id, [HostEntry(h.name, h.host_type) for h in sweep.hosts])
        first = await PlanTrialSource.open(store, record, sweep)
        again = await PlanTrialSource.open(store, record, sweep)
        for host in ("a1", "a2", "b1"):
            offered = [t for t in first.withdraw(host)]
            resumed = [t for t in again.withdraw(host)]
            assert [t.record.id for t in offered] == [t.record.id for t in resumed]
            assert [t.planned for t in resumed] == plan_sweep(sweep).for_host(host)
        stored = await store.trials(record.id)
        assert len(stored) == len(plan_sweep(sweep))
        assert {(t.key.endswith("~r2"), t.plan.repeat if t.plan else 0) for t in stored} == {
            (False, 1),
            (True, 2),
        }


def test_the_cap_cuts_each_type_in_round_order_and_says_what_it_cut() -> None:
    sweep = _sweep("search: {max_restarts: 11}\n")  # type a: 2 hosts x 4 configs x 3 rounds
    plan = plan_sweep(sweep)
    kept_a = [(t.repeat, t.config.get("budget"), t.host) for t in plan if t.host != "b1"]
    # round 1 whole (8), then round 2's first configs in order
    assert kept_a == [(r, b, h) for r in (1, 2) for b in (None, 1, 2, 3) for h in ("a1", "a2")][:11]
    assert _budgets(plan, "b1") == [None, 1, 2, 3, None, 1, 2, 3, None, 1, 2]
    assert [t.ordinal for t in plan] == list(range(len(plan)))
    assert plan.cuts == (
        PlanCut("a", max_restarts=11, planned=24, configs_cut=0, repeats_cut=13),
        PlanCut("b", max_restarts=11, planned=12, configs_cut=0, repeats_cut=1),
    )
    cuts = plan_json(plan, sweep)["search"]["cuts"]
    assert cuts[0] == {
        "host_type": "a",
        "planned": 24,
        "kept": 11,
        "configs_cut": 0,
        "repeats_cut": 13,
    }
    notes = plan_notes(sweep, plan)
    assert notes[0] == (
        "host type a: search.max_restarts 11 keeps 11 of 24 trials: 0 config(s) not measured, "
        "13 further measurement(s) of the others cut"
    )
    assert notes[-1] == "retries count against search.max_restarts when the sweep runs"

    short = plan_sweep(_sweep("search: {max_restarts: 3}\n", repeats=1))
    assert _budgets(short, "b1") == [None, 1, 2]
    assert short.cuts[1] == PlanCut("b", max_restarts=3, planned=4, configs_cut=1, repeats_cut=0)
    assert short.cuts[0] == PlanCut("a", max_restarts=3, planned=8, configs_cut=2, repeats_cut=1)
    assert plan_sweep(_sweep("search: {max_restarts: 100}\n")).cuts == ()


def test_the_estimate_counts_every_repeat_and_the_cap() -> None:
    once, thrice = _sweep(repeats=1), _sweep()
    single, triple = (
        estimate_plan(plan_sweep(once), once),
        estimate_plan(plan_sweep(thrice), thrice),
    )
    assert single.trial_s == triple.trial_s
    restart = single.restart_s
    assert triple.per_host_s["a1"] == 12 * triple.trial_s + restart
    assert single.per_host_s["a1"] == 4 * single.trial_s + restart
    assert any("benchmark.repeats" in line for line in triple.assumptions)
    capped = _sweep("search: {strategy: adaptive, max_restarts: 6}\n")
    estimate = estimate_plan(plan_sweep(capped), capped)
    assert estimate.per_host_s == {
        "a1": 3 * estimate.trial_s + restart,
        "a2": 3 * estimate.trial_s + restart,
        "b1": 6 * estimate.trial_s + restart,
    }
    assert any(line.startswith("strategy adaptive") for line in estimate.assumptions)
    assert plan_notes(capped, plan_sweep(capped))[0].startswith(
        "strategy adaptive (seed 0): the search proposes its own trials from these 4 configs"
    )


OBJECTIVE = "objective: {metric: output_tok_s, context: 60, concurrency: 1}\n"


def test_plan_warns_about_single_restarts_only_when_an_objective_asks(tmp_path: Path) -> None:
    assert repeat_warnings(_sweep(repeats=1)) == []
    assert repeat_warnings(_sweep(OBJECTIVE, repeats=2)) == []
    (warning,) = repeat_warnings(_sweep(OBJECTIVE, repeats=1))
    assert "\n" not in warning and "within-run only" in warning

    path = tmp_path / "r.yaml"
    path.write_text(HEAD + BENCH % 1 + OBJECTIVE + "search: {max_restarts: 3}\n")
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["plan", str(path)]) == 0
    assert f"warning: {warning}\n" in err.getvalue()
    assert "sweep r: 6 trials on 3 hosts" in out.getvalue()
    assert "host type a: search.max_restarts 3 keeps 3 of 8 trials" in out.getvalue()

    path.write_text(HEAD + BENCH % 2)
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["plan", str(path)]) == 0
    assert "warning" not in err.getvalue()
    assert "    budget=3 (repeat 2)\n" in out.getvalue()
