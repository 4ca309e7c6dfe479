"""How fast the orchestrator sees readiness, a startup crash, and released GPU memory, against
the simulated host's own record, beside fixed polling at 1 s and 10 s in the same run.

One simulated host (time scale 0.5: load 1-2 s, varied per restart so no poll phase is
favoured; warm-up 0.25 s; stop 0.15 s; GPU memory released 0.5 s after death).

- ready lag: from the moment the server can really generate (its scheduler is up and admits
  requests: the server's own millisecond stamp, ``SGLANG_LOG_MS=1``, on the
  ``max_total_num_tokens=`` line it writes just before) to the moment the protocol declares the
  server ready (``Server.timeline.stamps["ready"]``). The server's warm-up and ready line come
  later; the lag from the ready line is reported too (it can be negative: a probe may succeed
  first);
- crash lag: the crashing server's last log line (it exits right after) to the moment
  ``reconfigure`` raises ``TrialFailed``;
- memory gate lag: GPU memory back at baseline (the old process's death, stamped within 20 ms by
  a watcher standing in for the driver, plus the host's release lag) to ``systemctl start``
  being issued (``Server.timeline.stamps["start_requested"]``).

The fixed pollers do what vLLM's benchmark sweep and auto_tune do: ``systemctl stop``, read
nvidia-smi every P seconds until the memory is back, ``systemctl start``, then every P seconds
``GET /health`` (ready on 200) and ``systemctl show`` (a crash on ``failed``).

    python benchmarks/detect.py [--quick | --smoke] [--json]
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from common import (
    SCHEDULER_UP,
    SimFleet,
    SimHost,
    emit,
    log_stamp,
    machine,
    note,
    parse_args,
    run_main,
    server_runs,
    sim_fleet,
    summary,
    sweep_yaml,
)

from orchestrator.host.connect import open_host
from orchestrator.host.transport import Transport
from orchestrator.lifecycle import TrialFailed, no_events, reconfigure, trial_config
from orchestrator.log import configure_logging
from orchestrator.sessions import host_session
from orchestrator.sim.gpu import GpuState
from orchestrator.sweepfile import load_sweep

BASE_ADDRESS = "127.0.0.165"
PORT = 2295
TIME_SCALE = 0.5
LOAD_RANGE_S = (2.0, 4.0)  # before the time scale
RELEASE_LAG_S = 0.5
WATCH_INTERVAL_S = 0.02
CRASH_KINDS = ("exited", "oom")
SLOW_S = 1.0  # a restart slower than this keeps its timeline in the result, as evidence
STUCK_S = 30.0  # a restart still running after this leaves every task's stack as evidence
CONFIGS = [
    {"algorithm": "DDTREE", "draft_model": "/models/Kimi-K2.6-DFlash", "budget": b, "topk": 4}
    for b in (8, 12)
]


class MemoryWatcher:
    """Stands in for the driver's clock: reads the host's GPU state every 20 ms, so a dead
    server's ``dead_since`` is stamped within 20 ms of its death (the simulator stamps it when
    first observed), and remembers each registration's release moment."""

    def __init__(self, gpu_dir: Path, release_lag_s: float) -> None:
        self.state = GpuState(gpu_dir)
        self.release_lag_s = release_lag_s
        self.released_at: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(WATCH_INTERVAL_S):
            self.state.snapshot()
            for _path, registration in self.state.registrations():
                if registration.dead_since is not None:
                    self.released_at[registration.pid] = (
                        registration.dead_since + self.release_lag_s
                    )

    def __enter__(self) -> MemoryWatcher:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def set_server_settings(host: SimHost, **values: Any) -> None:
    """Change what the host's next server process loads with (its ORCH_SIM_CONFIG file)."""
    path = host.state_dir / "hosts" / host.name / "sim-server.json"
    settings = json.loads(path.read_text())
    for key, value in values.items():
        if value is None:
            settings.pop(key, None)
        else:
            settings[key] = value
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(settings))
    os.replace(tmp, path)


def vary_load(host: SimHost, rng: random.Random) -> None:
    set_server_settings(host, load_s=round(rng.uniform(*LOAD_RANGE_S), 3))


def crash_next(host: SimHost, crash: str | None) -> None:
    """``exited`` dies without a classifiable line; ``oom`` logs CUDA's OOM traceback."""
    set_server_settings(host, faults={"crash_at_start": crash} if crash else None)


class Truth:
    """The host's journal, read after the fact: each server run's stamps by invocation."""

    def __init__(self, fleet: SimFleet, host: SimHost) -> None:
        self.fleet, self.host = fleet, host

    async def run(
        self, invocation: str, want: str, timeout: float = 10.0
    ) -> dict[str, float | None]:
        """The stamps of one invocation, once the ``want`` stamp has reached the journal."""
        deadline = time.monotonic() + timeout
        while True:
            stamps = await self._read(invocation)
            if stamps[want] is not None or time.monotonic() > deadline:
                return stamps
            await asyncio.sleep(0.2)

    async def _read(self, invocation: str) -> dict[str, float | None]:
        lines = await self.fleet.journal(self.host)
        runs = {r.invocation: r for r in server_runs(lines)}
        scheduler_up = next(
            (log_stamp(line.message) for line in lines
             if line.invocation == invocation and SCHEDULER_UP in line.message),
            None,
        )
        run = runs.get(invocation)
        return {
            "ready": run.ready if run else None,
            "last_line": run.last_line if run else None,
            "scheduler_up": scheduler_up,
        }


async def orchestrator_restarts(
    fleet: SimFleet, host: SimHost, watcher: MemoryWatcher, *, restarts: int, crashes: int,
    rng: random.Random, slow: list[dict[str, float]], stuck: list[str],
) -> dict[str, list[float]]:
    sweep_file = fleet.state_dir / "detect.yaml"
    server_section = dict(fleet.sweep["server"])
    server_section["environment"] = {"SGLANG_LOG_MS": "1"}
    sweep_file.write_text(sweep_yaml(fleet.sweep, name="bench-detect", configs=CONFIGS,
                                     server=server_section, coding=None))
    sweep = load_sweep(sweep_file)
    spec = sweep.hosts[0]
    handle = open_host(spec, connect_timeout=sweep.timeouts.connect)
    # Built as the runner builds it, so the benchmark follows the session's fields.
    session = host_session(sweep, spec, handle, unit=sweep.unit, events=no_events)
    knobs = spec.effective_knobs(sweep.server.knobs)
    truth = Truth(fleet, host)
    out: dict[str, list[float]] = defaultdict(list)
    plan = ["ok"] * restarts
    for index in sorted(rng.sample(range(2, restarts + crashes), crashes)):
        plan.insert(index, "crash")
    previous_pid: int | None = None
    try:
        found = await session.read_found()
        for number, kind in enumerate(plan):
            vary_load(host, rng)
            crash_next(host, CRASH_KINDS[number % 2] if kind == "crash" else None)
            trial = trial_config(
                found, sweep=sweep.name, key=f"restart-{number}", knobs=knobs,
                config=CONFIGS[number % len(CONFIGS)], extra_flags=sweep.server.extra_flags,
                environment=sweep.server.environment, engine=session.engine,
            )
            watchdog = asyncio.create_task(_stacks_after(STUCK_S, stuck))
            try:
                server = await reconfigure(session, trial)
            except TrialFailed as failed:
                failed_at = time.time()
                if kind != "crash" or failed.invocation_id is None:
                    raise
                stamps = await truth.run(failed.invocation_id, "last_line")
                assert stamps["last_line"] is not None
                out["crash"].append(failed_at - stamps["last_line"])
                out[f"crash_{failed.cause}"].append(failed_at - stamps["last_line"])
                previous_pid = None
                continue
            finally:
                watchdog.cancel()
            if kind == "crash":
                raise RuntimeError("a crash run came up ready")
            stamps = await truth.run(server.invocation_id, "ready")
            assert stamps["ready"] is not None and stamps["scheduler_up"] is not None
            out["ready"].append(server.timeline.stamps["ready"] - stamps["scheduler_up"])
            out["ready_from_ready_line"].append(server.timeline.stamps["ready"] - stamps["ready"])
            if out["ready"][-1] > SLOW_S:
                slow.append({k: round(v - stamps["scheduler_up"], 3)
                             for k, v in server.timeline.stamps.items()}
                            | {"ready_line": round(stamps["ready"] - stamps["scheduler_up"], 3)})
            released = watcher.released_at.get(previous_pid or -1)
            if released is not None:
                out["memory_gate"].append(server.timeline.stamps["start_requested"] - released)
            previous_pid = server.main_pid
            note(f"orchestrator restart {number + 1}/{len(plan)}: ready lag "
                 f"{out['ready'][-1] * 1000:.0f} ms")
    finally:
        crash_next(host, None)
        await handle.close()
    return out


async def _stacks_after(seconds: float, sink: list[str]) -> None:
    """Every asyncio task's stack, once ``seconds`` have passed (a restart that hangs)."""
    await asyncio.sleep(seconds)
    for task in asyncio.all_tasks():
        buffer = io.StringIO()
        task.print_stack(file=buffer)
        sink.append(buffer.getvalue())
    note(f"a restart is still running after {seconds:g}s; task stacks kept")


async def _show(transport: Transport, properties: str) -> dict[str, str]:
    result = await transport.run(
        ["systemctl", "show", "-p", properties, "sglang.service"], timeout=30, privileged=True
    )
    return dict(line.split("=", 1) for line in result.stdout_text().splitlines() if "=" in line)


async def _memory_at_baseline(transport: Transport, baseline: int) -> bool:
    result = await transport.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], timeout=30
    )
    return all(int(v) <= baseline for v in result.stdout_text().split())


async def _poll_until(check: Callable[[], Any], interval: float) -> Any:
    while True:
        value = await check()
        if value:
            return value
        await asyncio.sleep(interval)


async def polling_restarts(
    fleet: SimFleet, host: SimHost, watcher: MemoryWatcher, interval: float, *, restarts: int,
    crashes: int, rng: random.Random,
) -> dict[str, list[float]]:
    """The fixed-interval protocol of vLLM's sweep tools, on the same host and ground truth."""
    sweep = load_sweep(_write_sweep(fleet))
    spec = sweep.hosts[0]
    handle = open_host(spec, connect_timeout=30)
    transport = handle.transport
    truth = Truth(fleet, host)
    out: dict[str, list[float]] = defaultdict(list)
    plan = ["ok"] * restarts + ["crash"] * crashes
    rng.shuffle(plan)
    try:
        baseline = 3
        async with aiohttp.ClientSession() as http:
            for number, kind in enumerate(plan):
                vary_load(host, rng)
                crash_next(host, CRASH_KINDS[number % 2] if kind == "crash" else None)
                old = await _show(transport, "MainPID")
                old_pid = int(old.get("MainPID", "0") or 0)
                await transport.run(["systemctl", "stop", "sglang.service"], timeout=60,
                                    privileged=True)
                await _poll_until(lambda: _memory_at_baseline(transport, baseline), interval)
                start_requested = time.time()
                await transport.run(["systemctl", "reset-failed", "sglang.service"], timeout=30,
                                    privileged=True)
                await transport.run(["systemctl", "start", "sglang.service"], timeout=60,
                                    privileged=True)
                started = await _show(transport, "InvocationID")

                async def ready_or_failed() -> str | None:
                    state = await _show(transport, "ActiveState")
                    if state.get("ActiveState") == "failed":
                        return "failed"
                    try:
                        async with http.get(f"{host.base_url}/health",
                                            timeout=aiohttp.ClientTimeout(total=5)) as response:
                            return "ready" if response.status == 200 else None
                    except (aiohttp.ClientError, TimeoutError):
                        return None

                outcome = await _poll_until(ready_or_failed, interval)
                seen = time.time()
                stamps = await truth.run(
                    started["InvocationID"], "last_line" if kind == "crash" else "ready"
                )
                if kind == "crash":
                    assert outcome == "failed" and stamps["last_line"] is not None
                    out["crash"].append(seen - stamps["last_line"])
                    out[f"crash_{CRASH_KINDS[number % 2]}"].append(seen - stamps["last_line"])
                else:
                    assert outcome == "ready" and stamps["scheduler_up"] is not None
                    out["ready"].append(seen - stamps["scheduler_up"])
                    out["ready_from_ready_line"].append(seen - (stamps["ready"] or seen))
                released = watcher.released_at.get(old_pid)
                if released is not None and old_pid:
                    out["memory_gate"].append(start_requested - released)
                note(f"poll {interval:g}s {kind}: {outcome}")
    finally:
        crash_next(host, None)
        await handle.close()
    return out


def _write_sweep(fleet: SimFleet) -> Path:
    path = fleet.state_dir / "poll.yaml"
    path.write_text(sweep_yaml(fleet.sweep, name="bench-poll", coding=None))
    return path


def lags(samples: dict[str, list[float]]) -> dict[str, Any]:
    return {name: summary(values, digits=4) for name, values in samples.items()}


async def main() -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0])
    configure_logging("warning")
    rng = random.Random(9)
    if args.smoke:
        counts = {"orch": (2, 1), 1.0: (1, 1)}  # no 10 s poller: one of its restarts is 20 s
    elif args.quick:
        counts = {"orch": (20, 3), 1.0: (5, 2), 10.0: (2, 1)}
    else:
        counts = {"orch": (40, 8), 1.0: (12, 4), 10.0: (6, 2)}
    settings = {"*": {
        "unit_running": False, "memory_release_lag_s": RELEASE_LAG_S,
        "server": {"warmup_s": 0.5, "stop_delay_s": 0.3},
    }}
    async with sim_fleet(1, base_address=BASE_ADDRESS, port=PORT, settings=settings,
                         time_scale=TIME_SCALE, keep=args.keep) as fleet:
        host = fleet.hosts[0]
        with MemoryWatcher(host.gpu_dir, RELEASE_LAG_S) as watcher:
            restarts, crashes = counts["orch"]
            slow: list[dict[str, float]] = []
            stuck: list[str] = []
            orch = await orchestrator_restarts(fleet, host, watcher, restarts=restarts,
                                               crashes=crashes, rng=rng, slow=slow, stuck=stuck)
            polls = {}
            for interval in (1.0, 10.0):
                if interval not in counts:
                    continue
                restarts, crashes = counts[interval]
                polls[f"poll_{interval:g}s"] = await polling_restarts(
                    fleet, host, watcher, interval, restarts=restarts, crashes=crashes, rng=rng
                )
    p95 = summary(orch["ready"])["p95"]
    result: dict[str, Any] = {
        "ready_lag_p95_s": p95,
        "ready_lag_p50_s": summary(orch["ready"])["p50"],
        "crash_lag_s": summary(orch["crash"])["max"],
        "memory_gate_lag_s": summary(orch["memory_gate"])["p95"],
        "orchestrator": lags(orch),
        "orchestrator_slow_restarts": slow,
        "orchestrator_stuck_task_stacks": stuck,
        **{name: lags(samples) for name, samples in polls.items()},
        "goals": {"ready_lag_p95_s": 0.25, "crash_lag_s": 2.0, "memory_gate_lag_s": 0.5},
        "settings": {
            "time_scale": TIME_SCALE, "load_s": [x * TIME_SCALE for x in LOAD_RANGE_S],
            "warmup_s": 0.5 * TIME_SCALE, "stop_delay_s": 0.3 * TIME_SCALE,
            "memory_release_lag_s": RELEASE_LAG_S, "quick": args.quick,
            "smoke": args.smoke,
            "counts": {str(k): v for k, v in counts.items()},
        },
        "machine": machine(),
    }
    emit(result, args.json)
    return result


if __name__ == "__main__":
    run_main(main())
