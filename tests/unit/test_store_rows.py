"""The store's one row mapping (``store/rows.py``) and the host loop's protocol of the store."""

from __future__ import annotations

from pathlib import Path

from orchestrator.store import (
    MatrixCell,
    NewPoint,
    NewTrial,
    PointRecord,
    Store,
    TrialPlan,
    TrialRecord,
    TrialStore,
    open_connection,
)
from orchestrator.store.rows import (
    ATTEMPTS,
    CLAIMS,
    EVENTS,
    HOSTS,
    POINTS,
    REQUESTS,
    SWEEPS,
    TRIALS,
    UNIT_BACKUPS,
)

TABLES = (
    SWEEPS,
    HOSTS,
    TRIALS,
    ATTEMPTS,
    POINTS,
    REQUESTS,
    EVENTS,
    UNIT_BACKUPS,
    CLAIMS,
)


def test_every_mapped_column_is_a_column_of_the_migrated_schema(tmp_path: Path) -> None:
    conn = open_connection(tmp_path / "s.db")
    try:
        for table in TABLES:
            found = {row["name"] for row in conn.execute(f"PRAGMA table_info({table.name})")}
            mapped = {column.name for column in table.columns}
            assert mapped <= found, (table.name, mapped - found)
    finally:
        conn.close()


def test_a_new_trial_is_written_and_read_back_through_its_columns_codecs() -> None:
    plan = TrialPlan(cells=(MatrixCell(context=1024, concurrency=4),), rounds=2)
    new = NewTrial("b8", "h1", {"budget": 8}, ordinal=1, is_baseline=True, plan=plan)
    stored = TRIALS.dump(new, sweep_id=3)
    assert "id" not in stored
    assert stored["is_baseline"] == 1 and stored["config"] == '{"budget":8}'
    # A row read by column name, as any driver's mapping row gives it.
    assert TRIALS.load({**stored, "id": 7}) == TrialRecord(
        id=7,
        sweep_id=3,
        key="b8",
        host="h1",
        config={"budget": 8},
        ordinal=1,
        is_baseline=True,
        plan=plan,
    )


def test_a_point_s_key_is_its_point_key_column_and_a_nan_is_stored_as_null() -> None:
    new = NewPoint(kind="coding", problem="p1", metrics={"score": float("nan")})
    stored = POINTS.dump(new, attempt_id=5, committed_at=10.0)
    assert stored["point_key"] == "coding/p1" and stored["metrics"] == '{"score":null}'
    record = POINTS.load({column.name: None for column in POINTS.columns} | stored | {"id": 1})
    assert isinstance(record, PointRecord)
    assert record.key == "coding/p1" and record.metrics == {"score": None}


async def test_the_store_is_what_the_host_loop_needs(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db") as store:
        assert isinstance(store, TrialStore)
