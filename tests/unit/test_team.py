"""A daemon as one of a team over a shared store (orchestrator/team.py): claims, the heartbeat
that keeps them, and the sweeps it stops when a claim is lost. The claims live in a real store
(a SQLite file: the claim operations are the same on both backends, tests/unit/test_store.py
runs them on PostgreSQL too). Expiries are judged on clocks the tests move; only the
heartbeat's beat is real (a few hundredths of a second), and no assertion depends on it."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator.store import Store, SweepRecord
from orchestrator.sweepview import SweepView
from orchestrator.team import CLAIMED_EVENT, Solo, Team, daemon_identity
from orchestrator.verbs.status import print_sweep, print_sweeps

EXPIRY_S = 60.0
BEAT_S = 0.02
DEADLINE_S = 30.0
"""A deadline for a heartbeat that never comes, not a wait."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def store(tmp_path: Path, clock: Clock) -> AsyncIterator[Store]:
    async with await Store.open(tmp_path / "team.db", clock=clock) as opened:
        yield opened


def member(store: Store, name: str, clock: Clock, **kwargs: object) -> Team:
    return Team(
        store, daemon_identity(name), expiry_s=EXPIRY_S, renew_every_s=BEAT_S, wall=clock,
        **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


class Stops:
    def __init__(self) -> None:
        self.seen: list[tuple[int, str, str]] = []
        self.event = asyncio.Event()

    def __call__(self, sweep_id: int, reason: str, why: str) -> None:
        self.seen.append((sweep_id, reason, why))
        self.event.set()

    async def first(self, team: Team, running: list[int]) -> tuple[int, str, str]:
        keeping = asyncio.create_task(team.keep(lambda: running, self))
        try:
            await asyncio.wait_for(self.event.wait(), DEADLINE_S)
        finally:
            keeping.cancel()
        return self.seen[0]


async def test_a_claim_taken_over_stops_the_sweep_for_its_new_daemon(
    store: Store, clock: Clock
) -> None:
    sweep = (await store.submit_sweep("night", "a: 1\n")).sweep
    one, two = member(store, "ctl-1", clock), member(store, "ctl-2", clock)
    assert await one.claim(sweep.id) and not await two.claim(sweep.id)
    assert list(await two.elsewhere()) == [sweep.id] and await one.elsewhere() == {}
    clock.now += EXPIRY_S + 1  # one stalled past its claim's expiry
    assert await two.claim(sweep.id)
    stopped = await Stops().first(one, [sweep.id])  # one comes back: the sweep is two's now
    assert stopped == (sweep.id, "shutdown", "another daemon took its claim over")
    claimed = await store.events(sweep.id, kinds=[CLAIMED_EVENT])
    assert [(e.fields["generation"], e.fields["took_over_from"]) for e in claimed] == [
        (1, None),
        (2, one.identity.name),
    ]


async def test_a_cancel_through_another_daemon_reaches_the_one_running_it(
    store: Store, clock: Clock
) -> None:
    sweep = (await store.submit_sweep("night", "a: 1\n")).sweep
    runner, asker = member(store, "ctl-1", clock), member(store, "ctl-2", clock)
    assert await runner.claim(sweep.id)
    async with asker.hold(sweep.id) as elsewhere:
        assert elsewhere is not None and elsewhere.daemon == runner.identity.name
        assert await asker.request_stop(sweep.id, "cancel")
    stopped = await Stops().first(runner, [sweep.id])
    assert stopped == (sweep.id, "cancel", "another daemon asked")


async def test_a_sweep_nobody_runs_is_held_while_a_person_changes_it(
    store: Store, clock: Clock
) -> None:
    sweep = (await store.submit_sweep("night", "a: 1\n")).sweep
    asker, other = member(store, "ctl-2", clock), member(store, "ctl-3", clock)
    async with asker.hold(sweep.id) as elsewhere:
        assert elsewhere is None
        assert not await other.claim(sweep.id)  # nobody starts it meanwhile
    assert await other.claim(sweep.id)  # released after


async def test_a_member_that_cannot_renew_stops_its_sweeps_before_they_may_be_taken(
    tmp_path: Path, clock: Clock
) -> None:
    store = await Store.open(tmp_path / "team.db", clock=clock)
    sweep = (await store.submit_sweep("night", "a: 1\n")).sweep
    monotonic = Clock()
    team = member(store, "ctl-1", clock, monotonic=monotonic)
    assert await team.claim(sweep.id)
    await store.close()  # every renewal fails from now on
    stops = Stops()
    keeping = asyncio.create_task(team.keep(lambda: [sweep.id], stops))
    try:
        await asyncio.sleep(BEAT_S * 5)
        assert stops.seen == []  # failing, but well within the claim's expiry
        monotonic.now += EXPIRY_S * 0.75  # a quarter before another daemon may take them
        await asyncio.wait_for(stops.event.wait(), DEADLINE_S)
    finally:
        keeping.cancel()
    assert stops.seen == [(sweep.id, "shutdown", "its claim could not be renewed")]


async def test_alone_every_sweep_is_the_daemon_s_own() -> None:
    solo = Solo()
    assert await solo.claim(7) and await solo.elsewhere() == {}
    async with solo.hold(7) as elsewhere:
        assert elsewhere is None
    assert not await solo.request_stop(7, "cancel") and solo.identity is None


def test_status_names_the_daemon_that_runs_each_sweep_of_a_shared_store() -> None:
    record = SweepRecord(7, "night-b300", "h", "name: x\n", None, 0, 1.0, "running", 2.0, None,
                         None, None, None)  # fmt: skip
    runner = "ctl-2 (daemon, pid 4411)"
    shown = SweepView(record, daemon=runner).to_json()
    assert shown["daemon"] == runner
    assert SweepView(record).to_json()["daemon"] is None  # a daemon's own store: nobody named
    console = Console(file=io.StringIO(), width=120, color_system=None)
    print_sweeps([shown], console)
    print_sweep({**shown, "trials": {"running": 1}, "hosts": []}, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"night-b300: running on {runner} (priority 0)" in text
    assert f"sweep night-b300 (id 7): running on {runner}; trials: 1 running" in text
