"""The random and adaptive trial sources on a real store, without hosts: what the runner does
with each proposal (an attempt, its restart, its points) is written straight to the store.

Each test pins one promise of docs/search.md: replay after a kill, the deadline's confirmation
reserve, no restart paid twice for one server, max_restarts counted across a resume.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from orchestrator.daemon import scheduler
from orchestrator.plan import repeat_key, trial_key
from orchestrator.search.budget import RESTART_EVENT, RestartBudget, race_restarts
from orchestrator.search.deadline import TimeBudget, TimedTrial, TrialTimes, learn_times
from orchestrator.search.propose import Seen, propose, startup_trials
from orchestrator.search.score import objective_value, penalty, sweep_objective
from orchestrator.search.source import (
    PROPOSED_EVENT,
    SearchTrialSource,
    trial_source_for,
)
from orchestrator.search.space import search_space, server_identity
from orchestrator.store import HostEntry, NewPoint, Store, SweepRecord
from orchestrator.sweepfile import Sweep, parse_sweep
from orchestrator.trialsource import SourcedTrial, plan_trial_source

BUDGET = "--speculative-num-draft-tokens"
TOPK = "--speculative-eagle-topk"


def _sweep(
    *,
    strategy: str = "adaptive",
    max_restarts: int = 12,
    hosts: int = 1,
    types: tuple[str, ...] = (),
    search: Mapping[str, Any] | None = None,
    **top: Any,
) -> tuple[Sweep, str]:
    document: dict[str, Any] = {
        "name": "search-unit",
        "hosts": [
            {
                "name": f"h{i + 1}",
                "address": f"127.0.0.{i + 1}",
                "base_url": f"http://127.0.0.{i + 1}:30000",
                "type": types[i] if types else "b300",
            }
            for i in range(hosts)
        ],
        "server": {
            "model": "m",
            "extra_flags": ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"],
            "knobs": {
                "budget": {"flag": BUDGET, "overridden_by_server": True},
                "topk": {"flag": TOPK},
            },
        },
        "baseline": False,
        "grid": {"budget": [4, 8, 16, 32], "topk": [1, 2, 4]},
        "benchmark": {"contexts": [60], "concurrency": [1, 4], "rounds": 2},
        "objective": {"metric": "output_tok_s", "context": 60, "concurrency": 1},
        "search": {
            "strategy": strategy,
            "max_restarts": max_restarts,
            "seed": 7,
            **(search or {}),
        },
        **top,
    }
    text = yaml.safe_dump(document, sort_keys=False)
    return parse_sweep(text, "search-unit.yaml"), text


def _speed(config: Mapping[str, Any]) -> float:
    """A response surface with an interior optimum (budget 16, topk 2)."""
    budget, topk = float(config.get("budget") or 1), float(config.get("topk") or 1)
    return 100.0 - (budget - 16) ** 2 / 8 - (topk - 2) ** 2 * 3


async def _open(store: Store, sweep: Sweep, text: str) -> SweepRecord:
    record = (await store.submit_sweep(sweep.name, text)).sweep
    await store.add_hosts(record.id, [HostEntry(h.name, h.host_type) for h in sweep.hosts])
    return record


async def _run_one(
    store: Store,
    record: SweepRecord,
    source: SearchTrialSource,
    trial: SourcedTrial,
    *,
    clock: list[float] | None = None,
    speed: Callable[[Mapping[str, Any]], float] = _speed,
) -> None:
    """What the runner does with a trial: count its restart, measure its plan (and what
    ``extend`` adds on the same server), finish it."""
    started = clock[0] if clock else 0.0
    attempt = await store.start_attempt(trial.record.id)
    if clock:
        clock[0] += 20.0  # the restart: the first point begins 20 s after the attempt
    await store.add_event(record.id, RESTART_EVENT, host=trial.record.host, attempt_id=attempt.id)
    row = trial.record
    plan = row.plan
    assert plan is not None
    while plan is not None:
        done = await store.committed_point_keys(attempt.id)
        for cell in plan.cells:
            point = NewPoint(
                "throughput",
                {"output_tok_s": speed(trial.record.config) * (1 if cell.concurrency == 1 else 3)},
                context=cell.context,
                concurrency=cell.concurrency,
                started_at=clock[0] if clock else None,
                finished_at=clock[0] if clock else None,
            )
            if point.key not in done:
                await store.record_point(attempt.id, point, [])
        points = [p for p in (await store.results(record.id)).trials if p.key == row.key]
        extended = await source.extend(row, points[-1].points)
        if extended is not None:
            row = await store.set_trial_plan(row.id, extended)
        plan = extended
    if clock:
        clock[0] = started + 100.0  # every trial takes 100 s, whatever it measured
    await store.finish_attempt(attempt.id, "done")


def test_configs_sglang_resolves_to_one_server_share_an_identity() -> None:
    sweep, _ = _sweep()
    host = sweep.hosts[0]
    # With top-k 1 and steps given, EAGLE forces draft tokens = steps + 1: the budget knob
    # (marked overridden_by_server) makes no difference there, and 4 / "4" / 4.0 are one value.
    assert server_identity(sweep, host, {"budget": 4, "topk": 1}) == server_identity(
        sweep, host, {"budget": 32, "topk": 1}
    )
    assert server_identity(sweep, host, {"budget": 8, "topk": 2}) == server_identity(
        sweep, host, {"budget": "8.0", "topk": "2"}
    )
    assert server_identity(sweep, host, {"budget": 8, "topk": 2}) != server_identity(
        sweep, host, {"budget": 16, "topk": 2}
    )


async def test_no_restart_is_paid_twice_for_one_server(tmp_path: Path) -> None:
    """A random search over the whole space proposes each server once: the four top-k 1
    configs (one server) cost one restart, so the 12 configs are 9 trials."""
    sweep, text = _sweep(
        strategy="random", max_restarts=50, search={"confirmations": 0, "race": 0}
    )
    async with await Store.open(tmp_path / "s.db") as store:
        record = await _open(store, sweep, text)
        source = await SearchTrialSource.open(store, record, sweep)
        identities = []
        while (trial := await source.next_trial("h1")) is not None:
            identities.append(server_identity(sweep, sweep.hosts[0], trial.record.config))
            await _run_one(store, record, source, trial)
        assert len(identities) == len(set(identities)) == 9
        assert len(search_space(sweep)) == 12


async def test_a_config_sglang_refused_is_never_proposed_again(tmp_path: Path) -> None:
    """Refused with invalid-config on one host type, the config is not paid for on the other."""
    sweep, text = _sweep(
        strategy="random",
        max_restarts=50,
        hosts=2,
        types=("b200", "b300"),
        search={"confirmations": 0, "race": 0},
    )
    async with await Store.open(tmp_path / "s.db") as store:
        record = await _open(store, sweep, text)
        source = await SearchTrialSource.open(store, record, sweep)
        first = await source.next_trial("h1")
        assert first is not None
        attempt = await store.start_attempt(first.record.id)
        await store.finish_attempt(attempt.id, "failed", cause="invalid-config")
        on_other_type = []
        while (trial := await source.next_trial("h2")) is not None:
            on_other_type.append(trial.record.config)
            await _run_one(store, record, source, trial)
        assert len(on_other_type) == 8  # the 9 servers of the space, less the refused one
        assert first.record.config not in on_other_type


async def test_a_fresh_strategy_over_the_store_asks_what_the_killed_one_would_have(
    tmp_path: Path,
) -> None:
    sweep, text = _sweep(max_restarts=12, search={"confirmations": 0, "race": 0})
    path = tmp_path / "s.db"
    async with await Store.open(path) as store:
        record = await _open(store, sweep, text)
        source = await SearchTrialSource.open(store, record, sweep)
        for _ in range(5):  # past TPE's random start (3 proposals for 12 restarts)
            trial = await source.next_trial("h1")
            assert trial is not None
            await _run_one(store, record, source, trial)
        in_flight = await source.next_trial("h1")  # proposed and stored; then the kill
        assert in_flight is not None
    shutil.copy(path, tmp_path / "killed.db")
    async with await Store.open(tmp_path / "killed.db") as store:
        fresh = await SearchTrialSource.open(store, record, sweep)
        rerun = await fresh.next_trial("h1")  # the trial in flight at the kill comes first
        assert rerun is not None and rerun.record.id == in_flight.record.id
        await _run_one(store, record, fresh, rerun)
        replayed = await fresh.next_trial("h1")
        assert replayed is not None
    async with await Store.open(path) as store:
        # The killed run, had it lived: the in-flight trial finishes, then it asks again.
        lived = source_for(store, source)
        await _run_one(store, record, lived, in_flight)
        expected = await lived.next_trial("h1")
        assert expected is not None
        assert replayed.record.config == expected.record.config
        assert replayed.record.key == expected.record.key
        # Each proposal is a function of the seed and the results it saw, as recorded.
        proposals = await store.events(record.id, kinds=(PROPOSED_EVENT,))
        assert [e.fields["k"] for e in proposals] == list(range(1, len(proposals) + 1))
        space = search_space(sweep)
        objective = sweep_objective(sweep)
        results = {o.key: o for o in (await store.results(record.id)).latest()}
        for event in proposals[-3:]:
            seen = [
                Seen(results[key].config, objective_value(objective, results[key].points))
                for key in event.fields["seen"]
            ]
            paid = {
                server_identity(sweep, sweep.hosts[0], c)
                for c in [
                    p.fields["config"] for p in proposals if p.fields["k"] < event.fields["k"]
                ]
            }
            candidates, chosen = [], set(paid)
            for index, config in enumerate(space.configs):
                identity = server_identity(sweep, sweep.hosts[0], config)
                if identity not in chosen:
                    chosen.add(identity)
                    candidates.append(index)
            again = propose(
                "adaptive",
                space,
                candidates,
                seen,
                seed=7,
                host_type="b300",
                k=event.fields["k"],
                n_startup=startup_trials(12),
            )
            assert space.configs[again] == event.fields["config"]


def source_for(store: Store, old: SearchTrialSource) -> SearchTrialSource:
    """The killed run's source, reattached to the reopened store (its memory holds nothing the
    store does not)."""
    old.store = store
    return old


async def test_max_restarts_counts_every_start_and_survives_a_resume(tmp_path: Path) -> None:
    sweep, text = _sweep(max_restarts=3, hosts=2)
    async with await Store.open(tmp_path / "s.db") as store:
        record = await _open(store, sweep, text)
        budget = await RestartBudget.load(store, record.id, sweep)
        assert budget.take("h1") and budget.take("h2") and budget.take("h1")
        assert not budget.take("h2")  # one type, one cap: both hosts count
        for host in ("h1", "h2", "h1"):
            await store.add_event(record.id, RESTART_EVENT, host=host)
        resumed = await RestartBudget.load(store, record.id, sweep)
        assert resumed.left("h1") == 0 and not resumed.take("h1")
        # The source proposes nothing once the type's starts are spent.
        source = await SearchTrialSource.open(store, record, sweep)
        assert await source.next_trial("h2") is None


async def test_the_budget_keeps_a_reserve_that_races_then_confirms_the_leaders(
    tmp_path: Path,
) -> None:
    sweep, text = _sweep(max_restarts=8, search={"confirmations": 2, "race": 2})
    async with await Store.open(tmp_path / "s.db") as store:
        record = await _open(store, sweep, text)
        source = await SearchTrialSource.open(store, record, sweep)
        purposes = []
        while (trial := await source.next_trial("h1")) is not None:
            assert trial.record.plan is not None
            purposes.append(trial.record.plan.purpose)
            await _run_one(store, record, source, trial)
        # Exploring stops with the race's and the confirmations' restarts in hand; the race
        # measures the leaders again (the least measured first), so the pick rests on more
        # than one restart each; the confirmations then measure what was picked.
        assert purposes == ["screen"] * 4 + ["measure"] * 2 + ["confirm"] * 2
        trials = await store.trials(record.id)
        raced = [t for t in trials if t.plan and t.plan.purpose == "measure"]
        assert [t.plan.repeat for t in raced if t.plan] == [2, 2]
        assert len({t.key for t in raced}) == 2  # two leaders, once each
        confirms = [
            t for t in await store.trials(record.id) if t.plan and t.plan.purpose == "confirm"
        ]
        assert len({t.key for t in confirms}) == 2
        assert all("~r" in t.key for t in confirms)  # a repeat of a config on the same host


def test_the_deadline_reserve_is_learned_from_the_types_first_trials() -> None:
    assumed = TrialTimes(restart_s=300, screen_s=400, full_s=900, learned=False)
    learned = learn_times(
        [
            TimedTrial(started_at=0, finished_at=100, first_point_at=60, full=False),
            TimedTrial(started_at=100, finished_at=300, first_point_at=160, full=True),
        ],
        assumed,
    )
    assert (learned.restart_s, learned.screen_s, learned.full_s) == (60, 100, 200)
    # 2 confirmations on 1 host: 2 full trials and the restore (460 s) must stay in hand.
    budget = TimeBudget(left_s=600, times=learned, reserve_restarts=2, hosts=1)
    assert budget.reserve_s == 460
    assert budget.may_explore(100) is True and budget.may_explore(150) is False
    assert TimeBudget(300, learned, 2, 2).may_explore(100) is False  # 2 hosts share it
    assert budget.may_confirm()
    assert not TimeBudget(250, learned, 1, 1).may_confirm()


async def test_under_finish_by_exploring_stops_when_only_the_reserve_is_left(
    tmp_path: Path,
) -> None:
    """A fake clock: each trial takes 100 s; 1000 s to the deadline; 2 confirmations."""
    sweep, text = _sweep(
        max_restarts=50,
        search={"confirmations": 2, "race": 0},
        schedule={"finish_by": "23:59"},
        estimate={"restart": 50},
    )
    now = [1_800_000_000.0]
    async with await Store.open(tmp_path / "s.db", clock=lambda: now[0]) as store:
        record = await _open(store, sweep, text)
        source = await SearchTrialSource.open(store, record, sweep, clock=lambda: now[0])
        assert source.finish_at is not None
        now[0] = source.finish_at - 1000
        purposes = []
        while (trial := await source.next_trial("h1")) is not None:
            assert trial.record.plan is not None
            purposes.append(trial.record.plan.purpose)
            await _run_one(store, record, source, trial, clock=now)
        # Learned: a restart 20 s, a trial 100 s. Exploring goes on while the time left covers
        # the next trial, 2 confirmations and the restore (100 + 200 + 20 s), then the two
        # confirmations run: 7 explorations (1000 s -> 300 s left), 2 confirmations, and the
        # restore still fits before the deadline.
        assert purposes == ["screen"] * 7 + ["confirm"] * 2
        assert now[0] == source.finish_at - 100
        stopped = await store.events(record.id, kinds=("search.exploration_stopped",))
        assert "finish_by" in stopped[0].fields["reason"]


async def test_under_finish_by_a_long_race_does_not_keep_a_short_night_from_exploring(
    tmp_path: Path,
) -> None:
    """The same clock with a race of 20 restarts: the time held back is the confirmations
    and a race of at most half the configs screened so far, so the night explores, races
    while a race trial and the confirmations still fit, then confirms."""
    sweep, text = _sweep(
        max_restarts=50,
        search={"confirmations": 2, "race": 20},
        schedule={"finish_by": "23:59"},
        estimate={"restart": 50},
    )
    now = [1_800_000_000.0]
    async with await Store.open(tmp_path / "s.db", clock=lambda: now[0]) as store:
        record = await _open(store, sweep, text)
        source = await SearchTrialSource.open(store, record, sweep, clock=lambda: now[0])
        assert source.finish_at is not None
        now[0] = source.finish_at - 1000
        purposes = []
        while (trial := await source.next_trial("h1")) is not None:
            assert trial.record.plan is not None
            purposes.append(trial.record.plan.purpose)
            await _run_one(store, record, source, trial, clock=now)
        # 5 screens (after them 500 s left: a 6th, 2 confirmations, 2 race trials and the
        # restore no longer fit), 2 race trials while one more and the confirmations fit
        # (500 s, 400 s left), the 2 confirmations, and the restore before the deadline.
        assert purposes == ["screen"] * 5 + ["measure"] * 2 + ["confirm"] * 2
        assert now[0] == source.finish_at - 100


def test_the_objective_value_negates_a_minimized_metric_and_penalty_ranks_last() -> None:
    sweep, _ = _sweep(objective={"metric": "ttft_p99_s", "context": 60, "concurrency": 1})
    assert sweep_objective(sweep).minimized
    assert penalty([1.0, 3.0]) == -1.0 and penalty([]) < 0


async def test_the_daemon_and_run_pick_the_source_by_strategy(tmp_path: Path) -> None:
    grid, _ = _sweep(strategy="grid")
    assert trial_source_for(grid) is plan_trial_source
    assert scheduler.trial_source_for(grid) is plan_trial_source
    sweep, text = _sweep(strategy="random")
    async with await Store.open(tmp_path / "s.db") as store:
        record = await _open(store, sweep, text)
        source = await scheduler.trial_source_for(sweep)(store, record, sweep)
        assert isinstance(source, SearchTrialSource) and source.known is None


def test_repeat_keys_are_distinct() -> None:
    key = trial_key("h1", "sglang.service", {"budget": 8})
    assert repeat_key(key, 1) == key and repeat_key(key, 2) == f"{key}~r2"


async def test_a_screen_is_promoted_only_in_the_top_fraction_of_its_types_screens(
    tmp_path: Path,
) -> None:
    sweep, text = _sweep(max_restarts=12, search={"confirmations": 0, "race": 0})
    async with await Store.open(tmp_path / "s.db") as store:
        record = await _open(store, sweep, text)
        source = await SearchTrialSource.open(store, record, sweep)
        for _ in range(7):
            trial = await source.next_trial("h1")
            assert trial is not None
            await _run_one(store, record, source, trial)
        stored = await store.trials(record.id)
        promoted = []
        values: list[float] = []
        for row in stored:  # one host: each screen's rivals are the screens before it
            assert row.plan is not None and row.plan.purpose == "screen"
            value = _speed(row.config)
            ahead = sum(v > value for v in values)
            expected = ahead < math.ceil((len(values) + 1) / 3)
            promoted.append(len(row.plan.cells) == 2)
            assert promoted[-1] == expected, (row.config, values)
            values.append(value)
        assert promoted[0] and not all(promoted)


def test_the_random_start_is_an_eighth_of_the_budget_and_the_race_a_quarter() -> None:
    """The proposals step from the leaders once TPE's random start is over, so the start is
    short: 25 restarts start with 3 random screens (a quarter, 6, before) and race 6 (a
    third, 8, before the pick was smoothed over neighbouring configs)."""
    assert startup_trials(25) == 3 and startup_trials(80) == 10 and startup_trials(8) == 3
    assert race_restarts(_sweep(max_restarts=25)[0]) == 6
    assert race_restarts(_sweep(max_restarts=25, search={"race": 9})[0]) == 9
