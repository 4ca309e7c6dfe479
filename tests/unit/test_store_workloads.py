"""The workload files a sweep carries, kept in the store with the sweep (real SQLite)."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from orchestrator.store import Store, StoredWorkload, SweepNameConflict
from orchestrator.store.schema import MIGRATIONS

YAML = "name: n\nbenchmark: {workload: {file: t.jsonl}}\n"
SAMPLE = '{"messages": [{"role": "user", "content": "hi"}]}\n'


async def test_content_and_hash_are_kept_and_part_of_the_sweeps_identity(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db") as store:
        first = await store.submit_sweep("n", YAML, workloads={"t.jsonl": SAMPLE})
        assert await store.sweep_workloads(first.sweep.id) == [
            StoredWorkload("t.jsonl", SAMPLE, hashlib.sha256(SAMPLE.encode()).hexdigest())
        ]
        again = await store.submit_sweep("n", YAML, workloads={"t.jsonl": SAMPLE})
        assert not again.created and again.sweep.id == first.sweep.id
        other = SAMPLE.replace("hi", "hello")
        with pytest.raises(SweepNameConflict):  # same YAML, other traffic: other content
            await store.submit_sweep("n", YAML, workloads={"t.jsonl": other})
        replaced = await store.submit_sweep("n", YAML, workloads={"t.jsonl": other}, replace=True)
        assert replaced.created
        assert [w.content for w in await store.sweep_workloads(replaced.sweep.id)] == [other]
        assert [w.content for w in await store.sweep_workloads(first.sweep.id)] == [SAMPLE]
        plain = await store.submit_sweep("p", "name: p\n")
        assert await store.sweep_workloads(plain.sweep.id) == []


async def test_a_file_of_the_previous_version_gains_the_table(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with await Store.open(path, migrations=MIGRATIONS[:3]) as store:  # before v4
        old = await store.submit_sweep("n", "name: n\n")
    async with await Store.open(path) as store:
        assert (await store.get_sweep(old.sweep.id)).yaml_text == "name: n\n"
        assert await store.sweep_workloads(old.sweep.id) == []
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == MIGRATIONS[-1].version
    raw.close()
