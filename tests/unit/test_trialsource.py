"""The trial source seam on a real store: the plan source gives each host its plan in order,
and the store learned to record cancelled trials (schema version 2) without losing a row."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from orchestrator.plan import plan_sweep
from orchestrator.store import MIGRATIONS, HostEntry, NewPoint, NewTrial, Store
from orchestrator.sweepfile import load_sweep_with_text
from orchestrator.trialsource import PlanTrialSource, TrialSource, plan_trial_source

FULL = Path(__file__).parents[1] / "data" / "sweeps" / "good" / "full.yaml"


async def test_the_plan_source_gives_each_host_its_plan_in_order(tmp_path: Path) -> None:
    sweep, text = load_sweep_with_text(str(FULL))
    plan = plan_sweep(sweep)
    async with await Store.open(tmp_path / "store.db") as store:
        record = (await store.submit_sweep(sweep.name, text)).sweep
        await store.add_hosts(record.id, [HostEntry(h.name, h.host_type) for h in sweep.hosts])
        source: TrialSource = await plan_trial_source(store, record, sweep)
        assert source.known == len(plan.trials)
        for host in sweep.hosts:
            offered = []
            while (trial := await source.next_trial(host.name)) is not None:
                assert trial.record.key == trial.planned.key and trial.record.host == host.name
                offered.append(trial.planned)
                await source.tell(trial, None)
            assert offered == plan.for_host(host.name)  # the plan's order, each trial once
            assert source.withdraw(host.name) == []
        assert await source.next_trial("no-such-host") is None

        # A resumed run gets the same stored rows; what a host will not run is withdrawn.
        again = await PlanTrialSource.open(store, record, sweep)
        first = await again.next_trial("here")
        assert first is not None
        rest = again.withdraw("here")
        assert [t.planned for t in [first, *rest]] == plan.for_host("here")
        assert await again.next_trial("here") is None
        ids = {t.record.id for t in [first, *rest]}
        assert ids == {t.id for t in await store.trials(record.id) if t.host == "here"}


async def test_a_store_from_before_cancelled_attempts_learns_them_and_keeps_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    async with await Store.open(path, migrations=MIGRATIONS[:2]) as old:  # before v3
        record = (await old.submit_sweep("s", "name: s\n")).sweep
        (trial, queued) = await old.add_trials(
            record.id, [NewTrial("k1", "h", {}, 0), NewTrial("k2", "h", {}, 1)]
        )
        attempt = await old.start_attempt(trial.id)
    point = NewPoint("throughput", {"x": 1.0}, context=60, concurrency=1)
    with sqlite3.connect(path) as raw:  # a point as that version wrote it (no rate, workload)
        raw.execute(
            "INSERT INTO points (attempt_id, point_key, kind, context, concurrency, metrics, "
            "committed_at) VALUES (?, ?, 'throughput', 60, 1, '{\"x\": 1.0}', 0)",
            (attempt.id, point.key),
        )
    async with await Store.open(path) as store:
        assert (await store.finish_attempt(attempt.id, "cancelled")).state == "cancelled"
        skipped = await store.skip_trial(queued.id, None, {"reason": "cancel"}, state="cancelled")
        assert (skipped.state, skipped.cause, skipped.number) == ("cancelled", None, 1)
        assert [p.key for p in await store.points(attempt_id=attempt.id)] == [point.key]
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1].version
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert raw.execute("PRAGMA foreign_key_check").fetchall() == []
