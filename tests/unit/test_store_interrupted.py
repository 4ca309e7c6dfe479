"""Sweeps may be interrupted (store v7, issue 24): a store from before keeps every sweep and
accepts the new state; ``submit --replace`` of the same file after a cancel starts it again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from orchestrator.store import MIGRATIONS, Store

TEXT = "name: n\n"


async def test_a_store_from_before_keeps_its_sweeps_and_takes_the_new_state(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    async with await Store.open(path, migrations=MIGRATIONS[:6]) as old:  # before v7
        running = (await old.submit_sweep("n", TEXT)).sweep
        await old.set_sweep_state(running.id, "running")
        with pytest.raises(sqlite3.IntegrityError):
            await old.set_sweep_state(running.id, "interrupted")  # v6 refuses the state
    async with await Store.open(path) as store:
        assert (await store.get_sweep(running.id)).state == "running"
        assert (await store.set_sweep_state(running.id, "interrupted")).state == "interrupted"
        assert [r.id for r in await store.list_sweeps(["interrupted"])] == [running.id]
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1].version
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


async def test_replace_of_the_same_file_after_a_cancel_starts_it_again(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db") as store:
        first = (await store.submit_sweep("n", TEXT)).sweep
        again = await store.submit_sweep("n", TEXT)
        assert not again.created and again.sweep.id == first.id  # the same file: the same run
        await store.set_sweep_state(first.id, "cancelled")
        assert not (await store.submit_sweep("n", TEXT)).created  # cancel stays final
        restarted = await store.submit_sweep("n", TEXT, replace=True)
        assert restarted.created and restarted.sweep.state == "queued"
        assert (await store.get_sweep(first.id)).replaced_by == restarted.sweep.id
        interrupted = restarted.sweep.id
        await store.set_sweep_state(interrupted, "interrupted")
        kept = await store.submit_sweep("n", TEXT, replace=True)
        assert not kept.created and kept.sweep.id == interrupted  # continued, not replaced
