"""Faults while a trial is being measured: the server dies mid-point, journald loses the log
lines accept_len is read from, a request never finishes. What was measured stays recorded,
what was not is marked as such (never invented, never retried into success), and the sweep
goes on."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tests.faults.harness import (
    FAULTY,
    HEALTHY,
    assert_restored,
    excerpt_text,
    fault_host,
    on_faulty,
    point_count,
    run,
    sweep_yaml,
    unit_text,
)


def stored_requests(db: Path, context: int) -> list[dict[str, Any]]:
    """The measured requests of every stored point at ``context``."""
    with sqlite3.connect(db) as conn:
        conn.row_factory = sqlite3.Row
        rows = conn.execute(
            "SELECT r.* FROM requests r JOIN points p ON p.id = r.point_id "
            "WHERE p.context = ? AND r.warmup = 0 ORDER BY r.id",
            (context,),
        ).fetchall()
    return [dict(row) for row in rows]


async def test_crash_in_the_middle_of_a_point(tmp_path: Path) -> None:
    """The server crashes (CUDA illegal memory access) after its 5th request: the first of the
    point's three measured requests (the probe and the prompt calibration come before). The
    point is kept with what it measured and its failed requests flagged, the trial is failed
    ``crashed`` with the scheduler's traceback, and the next config is measured."""
    async with fault_host(
        tmp_path,
        "127.0.0.137",
        server={"perf": {"step_base_ms": 600}},  # 30 ms a step: a request outlives the crash
        server_faults={"crash_after_requests": on_faulty(5)},
    ) as host:
        text = sweep_yaml(host, "crash", [FAULTY, HEALTHY], benchmark={"rounds": 3})
        done = await run(tmp_path, text)

        failed = done.trial(FAULTY)
        assert (failed["state"], failed["cause"]) == ("failed", "crashed"), failed
        (point,) = failed["points"]
        assert "errors" in point["quality"], point
        requests = stored_requests(tmp_path / "orchestrator.db", 60)[:3]
        # Measured before the crash are kept as measured; those after it are errors, never
        # dropped. (How many came first depends on how many requests the probe and the prompt
        # calibration took, so only the shape is asserted.)
        outcomes = [r["error"] is None for r in requests]
        assert len(requests) == 3 and not outcomes[-1], requests
        assert outcomes == sorted(outcomes, reverse=True), requests
        evidence = failed["evidence"]
        assert "CUDA error: an illegal memory access was encountered" in excerpt_text(evidence)
        assert evidence["exit_status"] == 1
        healthy = done.trial(HEALTHY)
        assert healthy["state"] == "done" and point_count(healthy) == 1
        (good,) = healthy["points"]
        assert "errors" not in good["quality"]
        await assert_restored(host)


async def test_journal_lines_lost(tmp_path: Path) -> None:
    """journald drops every line of the service: the point's accept_len from the journal is
    missing and flagged, the value reported is the one the requests measured themselves."""
    config = {**HEALTHY, "log_interval": 2}  # a decode line every 2 steps: several per point
    async with fault_host(tmp_path, "127.0.0.136", settings={"journal_drop_rate": 1.0}) as host:
        text = sweep_yaml(
            host,
            "journal-lost",
            [config],
            knobs={"log_interval": {"flag": "--decode-log-interval"}},
        )
        done = await run(tmp_path, text)

        trial = done.trial(config)
        assert trial["state"] == "done", trial
        (point,) = trial["points"]
        accept = point["accept_len"]
        assert accept["accept_len_journal"] is None
        assert accept["accept_len_journal_lines"] == 0
        assert "no_decode_lines" in accept["accept_len_flags"]
        # the chat API carries no per-request verify counts: the counters' delta is what is left
        assert accept["accept_len_metrics"] is not None
        assert accept["accept_len"] == accept["accept_len_metrics"]
        # the server did log decode lines (it is the journal that lost them)
        (request,) = stored_requests(tmp_path / "orchestrator.db", 60)
        assert request["completion_tokens"] >= 8
        await assert_restored(host)


async def test_request_that_hangs_forever(tmp_path: Path) -> None:
    """The measured request gets its first token and then nothing, while /health stays 200.
    It ends at the request timeout, the point is flagged with the error, and it is not sent
    again: exactly one measured request, failed. The hung server does not exit on SIGTERM;
    systemd kills it at TimeoutStopSec and the next config is measured."""
    address = "127.0.0.138"
    async with fault_host(
        tmp_path,
        address,
        unit=unit_text(address, timeout_stop_s=3),
        server_faults={"hang_request_every": on_faulty(5)},
    ) as host:
        text = sweep_yaml(host, "hang", [FAULTY, HEALTHY], timeouts={"request": 3})
        done = await run(tmp_path, text)

        trial = done.trial(FAULTY)
        assert trial["state"] == "done"  # a failed request is a measurement, not a crash
        (point,) = trial["points"]
        assert "errors" in point["quality"], point
        assert point["metrics"]["errors"] == 1
        (request,) = stored_requests(tmp_path / "orchestrator.db", 60)[:1]
        assert (request["error"], request["finish_reason"]) == ("timeout", None)
        assert request["e2e_s"] is None or request["e2e_s"] >= 3
        stops = done.of_kind("unit.stopped")
        assert stops[1]["result"] == "timeout"  # the hung server had to be killed
        healthy = done.trial(HEALTHY)
        assert healthy["state"] == "done" and point_count(healthy) == 1
        (good,) = healthy["points"]
        assert "errors" not in good["quality"]
        await assert_restored(host)
