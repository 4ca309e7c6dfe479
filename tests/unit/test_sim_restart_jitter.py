"""Restart jitter: one server process's speed factor, and the scheduler's clock that applies it.

The factor has mean 1 and the configured relative standard deviation over many invocations,
stays positive, is a function of (seed, invocation) only, and is exactly 1 when switched off.
The scheduler multiplies every prefill and decode step by it, on a clock that does not let the
event loop's lateness pile up into slower steps.
"""

from __future__ import annotations

import asyncio
import io
import json
import statistics
import time
from pathlib import Path

import pytest

from orchestrator.sim import server_engine
from orchestrator.sim.perfmodel import (
    BASELINE,
    PerfParams,
    prefill_time_ms,
    restart_speed_factor,
    step_time_ms,
)
from orchestrator.sim.server_engine import MAX_LAG_S, Scheduler
from orchestrator.sim.server_log import SglangLog
from orchestrator.sim.settings import ServerSimSettings, SimSettingsError
from orchestrator.sim.thinking import Completion

DRAWS = 20_000


@pytest.mark.parametrize("relative_sd", [0.02, 0.3])
def test_factor_has_mean_one_and_the_given_spread(relative_sd: float) -> None:
    factors = [restart_speed_factor(0, f"{i:032x}", relative_sd) for i in range(DRAWS)]
    assert min(factors) > 0
    # The mean of DRAWS draws is within 4 standard errors of 1.
    assert abs(statistics.fmean(factors) - 1.0) < 4 * relative_sd / DRAWS**0.5
    assert statistics.stdev(factors) == pytest.approx(relative_sd, rel=0.05)


def test_factor_is_a_function_of_seed_and_invocation() -> None:
    first = restart_speed_factor(7, "4f0c1d2e3b4a59687766554433221100", 0.02)
    assert restart_speed_factor(7, "4f0c1d2e3b4a59687766554433221100", 0.02) == first
    assert restart_speed_factor(8, "4f0c1d2e3b4a59687766554433221100", 0.02) != first
    assert restart_speed_factor(7, "4f0c1d2e3b4a59687766554433221101", 0.02) != first


def test_zero_jitter_is_exactly_one() -> None:
    assert {restart_speed_factor(s, str(s), 0.0) for s in range(50)} == {1.0}


def test_restart_jitter_setting(tmp_path: Path) -> None:
    assert ServerSimSettings().restart_jitter == 0.02
    path = tmp_path / "sim.json"
    path.write_text(json.dumps({"restart_jitter": 0}))
    assert ServerSimSettings.load(path).restart_jitter == 0.0
    assert ServerSimSettings.from_mapping({"restart_jitter": 0.1}).restart_jitter == 0.1
    for bad in (-0.01, "big", True):
        with pytest.raises(SimSettingsError, match="restart_jitter"):
            ServerSimSettings.from_mapping({"restart_jitter": bad})


def _scheduler(speed_factor: float) -> Scheduler:
    return Scheduler(
        shape=BASELINE,
        perf=PerfParams(),
        time_scale=1.0,
        seed=0,
        max_running=8,
        max_total_tokens=100_000,
        decode_log_interval=40,
        radix_cache=False,
        log=SglangLog(ms=False, stream=io.StringIO()),
        speed_factor=speed_factor,
    )


class _RecordedSleeps:
    """Stands in for asyncio.sleep in the scheduler: records, then yields at once."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._real = asyncio.sleep

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        await self._real(0)


async def test_every_step_is_scaled_by_the_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 5-token request on a baseline server: one prefill and 4 decode steps, each the
    model's time times 1.5, back to back on the scheduler's clock."""
    monkeypatch.setattr(server_engine.asyncio, "sleep", _RecordedSleeps())
    scheduler = _scheduler(1.5)
    prompt = tuple(f" w{i}" for i in range(100))
    request = scheduler.submit(prompt, Completion(tuple(" x" for _ in range(5)), "length"))
    loop = asyncio.create_task(scheduler.run())
    started = scheduler._step_end
    try:
        while (await request.queue.get()).finish is None:
            pass
    finally:
        loop.cancel()
    perf = PerfParams()
    model_ms = prefill_time_ms(100, perf) + sum(
        step_time_ms(BASELINE, [100 + emitted], perf) for emitted in range(1, 5)
    )
    assert scheduler._step_end - started == pytest.approx(1.5 * model_ms / 1000.0, rel=1e-3)


async def test_a_late_wake_up_is_taken_from_the_next_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleeps = _RecordedSleeps()
    monkeypatch.setattr(server_engine.asyncio, "sleep", sleeps)
    scheduler = _scheduler(1.0)
    scheduler._step_end = time.monotonic() - 0.010  # the loop woke us 10 ms late
    await scheduler._sleep_ms(20.0)
    assert sleeps.seconds[-1] == pytest.approx(0.010, abs=0.003)
    scheduler._step_end = time.monotonic() - 2 * MAX_LAG_S  # stalled: forgiven, not repaid
    await scheduler._sleep_ms(20.0)
    assert sleeps.seconds[-1] == pytest.approx(0.020, abs=0.003)
