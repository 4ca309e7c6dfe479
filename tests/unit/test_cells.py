"""Matrix cells: closed-loop and open-loop, on workloads; their keys, order and stored shape."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from orchestrator.report import fmt
from orchestrator.store import MIGRATIONS, NewPoint, NewTrial, Store, cell_point_key
from orchestrator.store.records import TrialPlan
from orchestrator.store.results import ThroughputMetrics, ThroughputPoint, point_from_record
from orchestrator.types import MatrixCell


def test_a_synthetic_closed_cell_keeps_the_key_stores_resume_by() -> None:
    assert cell_point_key(MatrixCell(4096, 32)) == "throughput/context=4096/concurrency=32"
    assert cell_point_key(MatrixCell(4096, rate=8.0)) == "throughput/context=4096/rate=8"
    assert (
        cell_point_key(MatrixCell(2048, rate=0.5, workload="builtin:chat"))
        == "throughput/workload=builtin:chat/context=2048/rate=0.5"
    )


def test_a_cell_has_a_concurrency_or_a_rate() -> None:
    with pytest.raises(ValueError, match="not both"):
        MatrixCell(60)
    with pytest.raises(ValueError, match="not both"):
        MatrixCell(60, 4, 2.0)


def test_cells_sort_by_workload_context_then_closed_before_open() -> None:
    cells = [
        MatrixCell(60, rate=2.0),
        MatrixCell(60, 32),
        MatrixCell(60, 4),
        MatrixCell(60, 1, workload="builtin:chat"),
        MatrixCell(30, rate=8.0),
    ]
    assert sorted(cells) == [
        MatrixCell(60, 1, workload="builtin:chat"),
        MatrixCell(30, rate=8.0),
        MatrixCell(60, 4),
        MatrixCell(60, 32),
        MatrixCell(60, rate=2.0),
    ]
    assert MatrixCell(60, rate=2.0).words == "context 60 / rate 2 req/s"


def test_plans_round_trip_and_read_the_old_cell_shape() -> None:
    plan = TrialPlan(
        cells=(MatrixCell(60, 1), MatrixCell(60, rate=2.5, workload="file:traffic.jsonl")),
        rounds=2,
    )
    data = plan.to_json()
    assert data["cells"][0] == [60, 1]  # what plans stored before rates and workloads
    assert TrialPlan.from_json(data) == plan


async def test_rate_points_are_stored_and_read_back_typed(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db") as store:
        record = (await store.submit_sweep("s", "name: s\n")).sweep
        (trial,) = await store.add_trials(record.id, [NewTrial("k", "h", {}, 0)])
        attempt = await store.start_attempt(trial.id)
        point = ThroughputPoint(
            context=60,
            concurrency=None,
            rate=4.0,
            workload="builtin:codegen",
            metrics=ThroughputMetrics(requests=3),
        )
        await store.record_point(attempt.id, point.to_new_point(), [])
        (stored,) = await store.points(attempt_id=attempt.id)
        assert stored.key == "throughput/workload=builtin:codegen/context=60/rate=4"
        back = point_from_record(stored)
        assert isinstance(back, ThroughputPoint)
        assert back.cell == MatrixCell(60, rate=4.0, workload="builtin:codegen")
        assert await store.committed_point_keys(attempt.id) == {stored.key}


async def test_a_store_from_before_rates_gains_the_columns_and_keeps_its_points(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    async with await Store.open(path, migrations=MIGRATIONS[:4]) as old:  # before v5
        record = (await old.submit_sweep("s", "name: s\n")).sweep
        (trial,) = await old.add_trials(record.id, [NewTrial("k", "h", {}, 0)])
        attempt = await old.start_attempt(trial.id)
    key = NewPoint("throughput", {}, context=60, concurrency=1).key
    with sqlite3.connect(path) as raw:
        raw.execute(
            "INSERT INTO points (attempt_id, point_key, kind, context, concurrency, metrics, "
            "committed_at) VALUES (?, ?, 'throughput', 60, 1, '{}', 0)",
            (attempt.id, key),
        )
    async with await Store.open(path) as store:
        (stored,) = await store.points(attempt_id=attempt.id)
        back = point_from_record(stored)
        assert isinstance(back, ThroughputPoint) and back.cell == MatrixCell(60, 1)


def test_report_units_for_request_rates_and_shares() -> None:
    assert fmt.metric("goodput", 7.03) == "7.0 req/s"
    assert fmt.metric("achieved_rate", 6.0) == "6.0 req/s"  # a rate, not a percentage
    assert fmt.metric("request_s", 150.0) == "150 req/s"  # not milliseconds
    assert fmt.metric("goodput_fraction", 0.9) == "90%"
    assert fmt.metric("coding_pass_rate", 0.8) == "80%"
    assert fmt.metric("tpot_p50_s", 0.012) == "12.0 ms"


def test_a_cell_becomes_the_point_spec_the_one_dispatcher_measures() -> None:
    from orchestrator.bench.point import PointSpec
    from orchestrator.cells import cell_spec, schedule_seed
    from orchestrator.sweepfile.schema import BenchmarkSpec

    bench = BenchmarkSpec.model_validate(
        {"contexts": [60], "concurrency": [4], "rate": [2.0], "arrivals": "constant"}
    )
    closed = cell_spec(MatrixCell(60, 4), bench, rounds=3, seed=7)
    assert (closed.concurrency, closed.rounds, closed.rate, closed.seed) == (4, 3, None, None)
    assert closed.measured_requests == 12
    rate_cell = MatrixCell(60, rate=2.0)
    opened = cell_spec(rate_cell, bench, rounds=3, seed=7)
    assert opened == PointSpec(
        context=60,
        concurrency=None,
        rounds=None,
        warmup_requests=bench.warmup_requests,
        max_tokens=bench.max_tokens,
        temperature=bench.temperature,
        ignore_eos=bench.ignore_eos,
        rate=2.0,
        arrivals="constant",
        duration_s=bench.rate_duration_s,
        max_concurrency=bench.max_concurrency,
        seed=schedule_seed(7, rate_cell),
    )
