"""An objective the offered load caps: the search does not race or confirm configs that all
sit at the cap (more restarts of them measure the cap again), spends those restarts on configs
it has not measured, and says why in its stop event (issue 22, item 4).

The rule on synthetic standings, then the source over a store with synthetic goodput: under
a second.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from orchestrator.search.budget import RESTART_EVENT
from orchestrator.search.score import Objective
from orchestrator.search.source import (
    STOPPED_EVENT,
    SearchTrialSource,
    Standing,
    capped_reason,
)
from orchestrator.store import HostEntry, NewPoint, Store, SweepRecord
from orchestrator.sweepfile import Sweep, parse_sweep
from orchestrator.trialsource import SourcedTrial
from orchestrator.types import MatrixCell

AT_16 = (MatrixCell(60, rate=16.0),)


def _standings(*means: float) -> list[Standing]:
    return [Standing({"budget": i}, (mean,)) for i, mean in enumerate(means)]


def test_two_configs_at_the_offered_rate_are_a_capped_objective() -> None:
    goodput = Objective("goodput", AT_16, minimized=False)
    reason = capped_reason(goodput, _standings(15.9, 15.8, 12.0))
    assert reason is not None
    assert "the objective goodput is capped by the offered rate 16 req/s" in reason
    assert "raise benchmark rate to tell configs apart" in reason
    assert "2 configs are at the cap" in reason
    fraction = capped_reason(Objective("goodput_fraction", AT_16, False), _standings(1.0, 0.99))
    assert fraction is not None and "capped at 1" in fraction


def test_the_cap_is_the_rate_the_schedule_really_offered_not_the_nominal_one() -> None:
    """Issue 32, item 4: a seeded Poisson schedule at a nominal 16 req/s may offer 20; configs
    at 16 then fall 20 % short of what they were offered, which the race can still tell
    apart. One that offered 12.8 caps configs at 12.7, which the nominal rate missed."""
    goodput = Objective("goodput", AT_16, minimized=False)
    short = [Standing({"budget": i}, (mean,), cap=20.0) for i, mean in enumerate((16.0, 15.9))]
    assert capped_reason(goodput, short) is None
    kept_up = [Standing({"budget": i}, (mean,), cap=12.8) for i, mean in enumerate((12.7, 12.6))]
    reason = capped_reason(goodput, kept_up)
    assert reason is not None
    assert "capped by the offered rate 12.8 req/s (nominal 16)" in reason


def test_the_race_goes_on_where_it_can_still_tell_configs_apart() -> None:
    goodput = Objective("goodput", AT_16, minimized=False)
    assert capped_reason(goodput, _standings(15.9)) is None  # one at the cap: nothing to tie
    assert capped_reason(goodput, _standings(15.9, 14.0, 10.0)) is None  # 12 % below: apart
    assert capped_reason(goodput, []) is None
    # Closed-loop cells, a token rate, a latency: nothing but the server bounds them.
    closed = (MatrixCell(60, concurrency=16),)
    assert capped_reason(Objective("goodput", closed, False), _standings(16, 16)) is None
    tokens = Objective("output_tok_s", AT_16, minimized=False)
    assert capped_reason(tokens, _standings(16, 16)) is None
    latency = Objective("tpot_p50_s", AT_16, minimized=True)
    assert capped_reason(latency, _standings(-0.01, -0.01)) is None


def _sweep(max_restarts: int, offered: float) -> tuple[Sweep, str]:
    document: dict[str, Any] = {
        "name": "search-capped",
        "hosts": [{"name": "h1", "address": "127.0.0.1", "base_url": "http://127.0.0.1:30000"}],
        "server": {
            "model": "m",
            "extra_flags": ["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"],
            "knobs": {
                "budget": {"flag": "--speculative-num-draft-tokens"},
                "topk": {"flag": "--speculative-eagle-topk"},
            },
        },
        "baseline": False,
        "grid": {"budget": [4, 8, 16, 32], "topk": [1, 2, 4]},
        "benchmark": {
            "contexts": [60],
            "concurrency": [],
            "rate": [offered],
            "rounds": 2,
            "slo": {"tpot_ms": 50},
        },
        "objective": {"metric": "goodput", "context": 60, "rate": offered},
        "search": {
            "strategy": "adaptive",
            "max_restarts": max_restarts,
            "seed": 7,
            "confirmations": 2,
            "race": 2,
        },
    }
    text = yaml.safe_dump(document, sort_keys=False)
    return parse_sweep(text, "search-capped.yaml"), text


def _goodput(config: Mapping[str, Any]) -> float:
    """Every config keeps up with 16 req/s (15.8-16.0); each has its own capacity above it."""
    return min(16.0 - 0.05 * (int(str(config["topk"])) % 3), 8.0 + float(str(config["budget"])))


SECONDS = 8.0


async def _run(
    store: Store, record: SweepRecord, trial: SourcedTrial, scheduled: float | None = None
) -> None:
    """What the runner does with a trial, without extending it: count its restart, measure
    its plan's cells, finish it. ``scheduled``: the rate the schedule really offered, stored
    as its arrivals over :data:`SECONDS` (the nominal rate, with nothing stored, otherwise)."""
    attempt = await store.start_attempt(trial.record.id)
    await store.add_event(record.id, RESTART_EVENT, host=trial.record.host, attempt_id=attempt.id)
    assert trial.record.plan is not None
    for cell in trial.record.plan.cells:
        value = min(_goodput(trial.record.config), scheduled or cell.rate or 0.0)
        metrics: dict[str, Any] = {"goodput": value}
        if scheduled is not None:
            metrics |= {"requests_scheduled": round(scheduled * SECONDS), "duration_s": SECONDS}
        point = NewPoint("throughput", metrics, context=cell.context, rate=cell.rate)
        await store.record_point(attempt.id, point, [])
    await store.finish_attempt(attempt.id, "done")


async def _purposes(
    tmp_path: Path, offered: float, scheduled: float | None = None
) -> tuple[list[str], list[str]]:
    sweep, text = _sweep(max_restarts=8, offered=offered)
    async with await Store.open(tmp_path / f"s{offered:g}-{scheduled}.db") as store:
        record = (await store.submit_sweep(sweep.name, text)).sweep
        await store.add_hosts(record.id, [HostEntry(h.name, h.host_type) for h in sweep.hosts])
        source = await SearchTrialSource.open(store, record, sweep)
        purposes = []
        while (trial := await source.next_trial("h1")) is not None:
            assert trial.record.plan is not None
            purposes.append(trial.record.plan.purpose)
            await _run(store, record, trial, scheduled)
        stops = await store.events(record.id, kinds=(STOPPED_EVENT,))
    return purposes, [str(e.fields["reason"]) for e in stops]


async def test_a_capped_objective_is_not_raced_and_its_reserve_explores(tmp_path: Path) -> None:
    # Offered 16 req/s: every config keeps up, so the 4 restarts the race and confirmations
    # would have measured the cap with go to configs not yet measured, and the stop says why.
    purposes, reasons = await _purposes(tmp_path, 16.0)
    assert purposes == ["screen"] * 8
    assert len(reasons) == 1
    assert reasons[0].startswith("max_restarts reached; the objective goodput is capped by the")
    assert "offered rate 16 req/s" in reasons[0]
    # Offered 64 req/s: the configs' own capacities (12-40) tell them apart; the reserve races
    # and confirms as before.
    purposes, reasons = await _purposes(tmp_path, 64.0)
    assert purposes == ["screen"] * 4 + ["measure"] * 2 + ["confirm"] * 2
    assert reasons == ["only the confirmation reserve of max_restarts is left"]


async def test_configs_short_of_what_the_schedule_really_offered_are_raced(
    tmp_path: Path,
) -> None:
    # Nominal 16 req/s, but the seeded schedule offered 20 (160 arrivals in 8 s): the configs'
    # 15.8-16.0 are 20 % short of it, not at a cap, so the race and confirmations run. On the
    # nominal rate the search called them capped and raced nothing.
    purposes, reasons = await _purposes(tmp_path, 16.0, scheduled=20.0)
    assert purposes == ["screen"] * 4 + ["measure"] * 2 + ["confirm"] * 2
    assert reasons == ["only the confirmation reserve of max_restarts is left"]
    # A schedule that offered 12.5 (nominal 16) caps every config at 12.5: none is raced.
    purposes, reasons = await _purposes(tmp_path, 16.0, scheduled=12.5)
    assert purposes == ["screen"] * 8
    assert "offered rate 12.5 req/s (nominal 16)" in reasons[0]
