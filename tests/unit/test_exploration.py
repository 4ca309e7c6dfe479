"""Issue 32, item 2: an answer says how much of the space it explored and what that risks,
says "Deploy" only when the risk is small, and a tight ``max_restarts`` still screens.

The tester's night: a 6-config grid on 3 hosts with ``max_restarts: 9``. The search spent 3
restarts on baselines, held 4 back for the race and the confirmations, explored 2 configs,
stopped on "only the confirmation reserve of max_restarts is left" and headlined "Deploy
budget=4 ... 1.52x"; run fully, budget=8 topk=4 was the best.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from orchestrator.answers import answer_sweep
from orchestrator.answers.exploration import explore_risk
from orchestrator.answers.model import EXPLORATION_THRESHOLD, named
from orchestrator.answers.runs import config_id
from orchestrator.answers.smooth import Axes, exceed_chances
from orchestrator.daemon.adopt import AdoptRefused, choose
from orchestrator.report.words import answer_words
from orchestrator.search.budget import reserve, screening_warnings
from orchestrator.search.source import STOPPED_EVENT, SearchTrialSource
from orchestrator.store import Store
from tests.unit.test_search import _open, _run_one, _sweep

GRID = {"budget": [4, 8], "topk": [1, 2, 4]}
SERVER = {
    "model": "m",
    "knobs": {"budget": {"flag": "--budget"}, "topk": {"flag": "--topk"}},
}
TRUTH = {
    (4, 1): 1520.0,
    (4, 2): 1480.0,
    (4, 4): 1700.0,
    (8, 1): 1450.0,
    (8, 2): 1900.0,
    (8, 4): 2430.0,
}


def _speed(config: Mapping[str, Any]) -> float:
    if not config:
        return 1000.0  # the baseline
    return TRUTH[(int(config["budget"]), int(config["topk"]))]


def _tester_sweep(search: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    return _sweep(
        max_restarts=9,
        hosts=3,
        search=search,
        baseline=True,
        grid=GRID,
        server=SERVER,
    )


async def _night(tmp_path: Path, search: Mapping[str, Any] | None = None) -> Any:
    """The tester's night on a real store: the three hosts ask in turn until none gets a
    trial; the results and the search's stop events."""
    sweep, text = _tester_sweep(search)
    async with await Store.open(tmp_path / "s.db") as store:
        record = await _open(store, sweep, text)
        source = await SearchTrialSource.open(store, record, sweep)
        busy = True
        while busy:
            busy = False
            for host in ("h1", "h2", "h3"):
                trial = await source.next_trial(host)
                if trial is not None:
                    busy = True
                    await _run_one(store, record, source, trial, speed=_speed)
        await store.set_sweep_state(record.id, "running")
        await store.set_sweep_state(record.id, "done")
        results = await store.results(record.id)
        stops = await store.events(record.id, kinds=(STOPPED_EVENT,))
    return sweep, results, stops


async def test_a_tight_budget_screens_most_of_a_small_space_before_confirming(
    tmp_path: Path,
) -> None:
    sweep, results, stops = await _night(tmp_path)
    explored = {config_id(t.config) for t in results.trials if t.config and t.state == "done"}
    # Before: 2 of 6 (the reserve of a 2-restart race and 2 confirmations held 4 of the 6
    # restarts left after the baselines). The defaults now yield to a screening of the
    # space: the reserve holds at most a third of them.
    assert len(explored) >= 4
    assert stops and stops[0].fields["explored"] >= 4
    held = reserve(sweep, baselines=3, space=6)
    assert (held.race, held.confirmations, held.screens) == (0, 2, 4)


async def test_an_answer_on_a_third_of_the_space_does_not_say_deploy(tmp_path: Path) -> None:
    # The tester's file with the reserve written out (as it was held by default then): the
    # search explores 2 of the 6 configs, as it did that night.
    sweep, results, _ = await _night(tmp_path, {"race": 2, "confirmations": 2})
    (answer,) = answer_sweep(results, sweep)
    exploration = answer.exploration
    assert exploration is not None
    assert exploration.explored == 3 and exploration.space == 7  # the baseline is one
    assert exploration.risk > EXPLORATION_THRESHOLD
    headline = answer_words(answer).headline
    assert not headline.startswith("Deploy") and "Deploy" not in headline
    if answer.verdict == "better":
        assert headline.startswith("Best found so far")
        assert "run next" in headline
    assert exploration.next  # what to run next
    with pytest.raises(AdoptRefused, match="--allow-unexplored"):
        choose([answer], "b300", allow_tie=True)
    adopted = choose([answer], "b300", allow_tie=True, allow_unexplored=True)
    assert adopted.best == named(answer)
    document = answer.to_json()["exploration"]
    assert isinstance(document, dict)
    assert set(document) >= {"explored", "space", "risk", "threshold", "next", "margin"}


def test_validate_and_plan_warn_when_max_restarts_cannot_screen_the_space() -> None:
    sweep, _ = _tester_sweep()
    (warning,) = screening_warnings(sweep)
    assert "max_restarts 9 leaves 4 start(s) to explore after 3 baseline start(s)" in warning
    assert "at most 4 of the 6 configs" in warning and "max_restarts 11" in warning
    roomy, _ = _sweep(max_restarts=11, hosts=3, baseline=True, grid=GRID, server=SERVER)
    assert screening_warnings(roomy) == []


AXES = Axes.of([{"budget": b, "topk": k} for b in (4, 8, 16, 32, 64) for k in (1, 2, 4)])


def _space() -> list[dict[str, Any]]:
    return [{"budget": b, "topk": k} for b in (4, 8, 16, 32, 64) for k in (1, 2, 4)]


def test_the_surface_sees_a_rising_edge_and_a_dead_end() -> None:
    """Measured along budget 4-16: where the values still rise toward the unexplored budget
    32, the surface gives it a real chance to beat the best; where they have fallen off, it
    gives the far configs little."""
    measured = [{"budget": b, "topk": k} for b in (4, 8, 16) for k in (1, 2, 4)]
    rising = [[1000.0 + 150 * (c["budget"] // 4) + 10 * c["topk"]] * 2 for c in measured]
    peaked = [[1600.0 - 200 * abs(c["budget"] - 8) // 4 + 10 * c["topk"]] * 2 for c in measured]
    targets = [{"budget": 32, "topk": 4}, {"budget": 64, "topk": 4}]
    best_rising = max(range(len(measured)), key=lambda i: rising[i][0])
    best_peaked = max(range(len(measured)), key=lambda i: peaked[i][0])
    up = exceed_chances(AXES, measured, rising, best_rising, targets, margin=0.02, minimized=False)
    flat = exceed_chances(
        AXES, measured, peaked, best_peaked, targets, margin=0.02, minimized=False
    )
    assert up is not None and flat is not None
    assert up.each[0] > flat.each[0]
    assert flat.each[0] < 0.5
    # the chance that either beats it is at least each one's, at most their union's bound
    assert max(flat.each) <= flat.any + 0.02 and flat.any <= sum(flat.each) + 0.02
    assert (
        exceed_chances(AXES, measured[:3], rising[:3], 0, targets, margin=0.02, minimized=False)
        is None
    )  # too few configs for a surface


def test_a_space_measured_whole_has_no_risk_and_too_few_configs_use_the_share() -> None:
    space = _space()
    every = {config_id(c): (c, [1000.0 + i]) for i, c in enumerate(space)}
    complete = explore_risk(AXES, space, every, frozenset(), config_id(space[-1]), minimized=False)
    assert complete.risk == 0.0 and complete.method == "complete" and not complete.next
    two = {config_id(c): (c, [1000.0 + i]) for i, c in enumerate(space[:2])}
    share = explore_risk(AXES, space, two, frozenset(), config_id(space[1]), minimized=False)
    assert share.method == "exchangeable" and share.risk == pytest.approx(13 / 15)
    # nearest budget=4 topk=2 first: one level away on one knob, then in space order
    assert share.next[:2] == ({"budget": 4, "topk": 4}, {"budget": 8, "topk": 2})
    failed = frozenset(config_id(c) for c in space[2:])
    none_left = explore_risk(AXES, space, two, failed, config_id(space[1]), minimized=False)
    assert none_left.risk == 0.0 and none_left.failed == 13
