"""How much time a sweep spends on anything but loading servers and benchmarking them.

A 16-trial sweep (4 simulated hosts x 4 configs) runs through ``orchestrator run``. The
simulated hosts stop instantly and release GPU memory at once, so the only unavoidable costs
are each server's load (from the simulated systemd's ``Started`` line to the server's own
millisecond stamp on the line it writes just before its scheduler admits requests: from then on
it can generate, although its own warm-up and ready line come later) and each point's
measured window (as the store records
it, warm-up included). Per host:

    overhead = (host wall - sum of its loads - sum of its point windows) / host wall

summed over hosts (host-seconds), host wall running from the sweep's start to the host's
``restore.done``. Per-trial gaps between the timeline marks say where the rest went.

    python benchmarks/overhead.py [--quick | --smoke] [--json]
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from common import (
    PYTHON,
    REPO,
    SimFleet,
    emit,
    machine,
    note,
    orchestrator_env,
    parse_args,
    run_main,
    server_runs,
    sim_fleet,
    summary,
    sweep_yaml,
)

from orchestrator.store import Store

HOSTS = 4
BASE_ADDRESS = "127.0.0.160"
PORT = 2290
CONFIGS = [
    {"algorithm": "DDTREE", "draft_model": "/models/Kimi-K2.6-DFlash", "budget": b, "topk": 4}
    for b in (8, 10, 12, 16)
]


def host_settings(load_s: float) -> dict[str, Any]:
    return {
        "*": {
            "unit_running": False,
            "memory_release_lag_s": 0,
            "server": {"load_s": load_s, "warmup_s": 0.5, "stop_delay_s": 0},
        }
    }


def sweep_for(
    fleet: SimFleet, *, max_tokens: int, rounds: int, configs: list[dict[str, Any]]
) -> str:
    server = dict(fleet.sweep["server"])
    server["environment"] = {"SGLANG_LOG_MS": "1"}
    return sweep_yaml(
        fleet.sweep,
        name="bench-overhead",
        baseline=False,
        configs=configs,
        server=server,
        benchmark={
            "api": "chat",
            "contexts": [512],
            "concurrency": [1, 4],
            "max_tokens": max_tokens,
            "rounds": rounds,
            "warmup_requests": 1,
            "temperature": 0.0,
        },
        coding=None,
        policy={"on_trial_failure": "continue", "trial_retries": 0, "restore": "as-found"},
    )


async def analyse(fleet: SimFleet, db: Path) -> dict[str, Any]:
    store = await Store.open(db)
    try:
        (sweep,) = await store.list_sweeps()
        events = await store.events(sweep.id)
        attempts = await store.attempts(sweep.id)
        trials = {t.id: t for t in await store.trials(sweep.id)}
        points = await store.points(sweep_id=sweep.id)
    finally:
        await store.close()
    started = min(e.ts for e in events if e.kind == "sweep.started")
    finished = max(e.ts for e in events if e.kind == "sweep.finished")
    host_end = {
        e.host: e.ts for e in events if e.kind == "restore.done" and e.host is not None
    }
    points_by_attempt: dict[int, list[Any]] = defaultdict(list)
    for point in points:
        points_by_attempt[point.attempt_id].append(point)

    gaps: dict[str, list[float]] = defaultdict(list)
    per_host: dict[str, dict[str, float]] = {}
    ready_lags: list[float] = []
    failed = [a for a in attempts if a.state != "done"]
    for host in fleet.hosts:
        runs = server_runs(await fleet.journal(host))
        runs_by_invocation = {r.invocation: r for r in runs}
        load = sum(r.load_s or 0.0 for r in runs)
        host_attempts = sorted(
            (a for a in attempts if trials[a.trial_id].host == host.name),
            key=lambda a: a.started_at or 0.0,
        )
        bench = 0.0
        previous_end = started
        for attempt in host_attempts:
            timeline = (attempt.evidence or {}).get("timeline") or {}
            windows = sorted(
                (p.started_at, p.finished_at)
                for p in points_by_attempt[attempt.id]
                if p.started_at is not None and p.finished_at is not None
            )
            bench += sum(end - begin for begin, end in windows)
            run = runs_by_invocation.get(attempt.invocation_id or "")
            can_generate = None if run is None else (run.can_generate or run.ready)
            if not timeline or not windows or can_generate is None:
                continue
            marks = [
                ("between_trials", previous_end, timeline["begin"]),
                ("dropin_and_cursor", timeline["begin"], timeline["stop_requested"]),
                ("stop", timeline["stop_requested"], timeline["stopped"]),
                ("memory_wait", timeline["stopped"], timeline["memory_released"]),
                ("start_command", timeline["memory_released"], timeline["started"]),
                ("ready_lag", can_generate, timeline["ready"]),
                ("ready_to_first_point", timeline["ready"], windows[0][0]),
            ]
            marks += [
                ("between_points", a[1], b[0]) for a, b in itertools.pairwise(windows)
            ]
            marks.append(("after_last_point", windows[-1][1], attempt.finished_at or 0.0))
            for label, begin, end in marks:
                gaps[label].append(end - begin)
            ready_lags.append(timeline["ready"] - can_generate)
            previous_end = attempt.finished_at or previous_end
        end = host_end.get(host.name, finished)
        gaps["restore"].append(end - previous_end)
        wall = end - started
        per_host[host.name] = {
            "wall_s": round(wall, 3),
            "load_s": round(load, 3),
            "bench_s": round(bench, 3),
            "overhead_s": round(wall - load - bench, 3),
            "server_runs": len(runs),
        }
    wall_total = sum(h["wall_s"] for h in per_host.values())
    overhead_total = sum(h["overhead_s"] for h in per_host.values())
    trials_done = sum(1 for a in attempts if a.state == "done")
    return {
        "overhead_ratio": round(overhead_total / wall_total, 5) if wall_total else None,
        "overhead_s_per_trial": round(overhead_total / max(trials_done, 1), 3),
        "trials": len(attempts),
        "trials_done": trials_done,
        "failed_trials": [{"trial": trials[a.trial_id].key, "cause": a.cause} for a in failed],
        "sweep_wall_s": round(finished - started, 3),
        "host_seconds": {
            "wall": round(wall_total, 3),
            "load": round(sum(h["load_s"] for h in per_host.values()), 3),
            "bench": round(sum(h["bench_s"] for h in per_host.values()), 3),
            "overhead": round(overhead_total, 3),
        },
        "per_host": per_host,
        "gaps_s": {k: summary(v, digits=3) | {"sum": round(sum(v), 3)} for k, v in gaps.items()},
        "ready_lag_s": summary(ready_lags, digits=4),
    }


async def main() -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0])
    # The quick form's trials are toys (13 s): fixed per-trial seconds weigh far more there than
    # on a real host. The full form loads for 90 s (real 8-GPU loads take minutes) and
    # benchmarks for about half a minute per trial, still shorter than any real trial.
    load_s, max_tokens, rounds = (6.0, 256, 1) if args.quick else (90.0, 1024, 2)
    hosts, configs = HOSTS, CONFIGS
    if args.smoke:
        load_s, max_tokens, hosts, configs = 0.5, 16, 1, CONFIGS[:2]
    note(f"overhead: {hosts} hosts x {len(configs)} configs, load {load_s}s")
    async with sim_fleet(
        hosts, base_address=BASE_ADDRESS, port=PORT, settings=host_settings(load_s),
        keep=args.keep,
    ) as fleet:
        sweep_file = fleet.state_dir / "overhead.yaml"
        sweep_file.write_text(
            sweep_for(fleet, max_tokens=max_tokens, rounds=rounds, configs=configs)
        )
        db = fleet.state_dir / "overhead.db"
        begin = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "orchestrator.cli", "--log-level", "warning", "run", str(sweep_file),
            "--db", str(db), "--json", cwd=REPO, env=orchestrator_env(),
            stdout=subprocess.PIPE, stderr=(fleet.state_dir / "run.log").open("wb"),
        )
        out, _ = await proc.communicate()
        process_wall = time.monotonic() - begin
        if proc.returncode not in (0, 1):
            raise RuntimeError(f"orchestrator run exited {proc.returncode}: {out[-2000:]!r}")
        json.loads(out)
        note(f"sweep finished in {process_wall:.1f}s; reading the ground truth")
        result = await analyse(fleet, db)
    result["run_process_wall_s"] = round(process_wall, 3)
    result["settings"] = {
        "hosts": hosts, "configs": len(configs), "load_s": load_s, "warmup_s": 0.5,
        "stop_delay_s": 0, "memory_release_lag_s": 0, "contexts": [512],
        "concurrency": [1, 4], "max_tokens": max_tokens, "rounds": rounds, "quick": args.quick,
        "smoke": args.smoke,
    }
    result["machine"] = machine()
    emit(result, args.json)
    return result


if __name__ == "__main__":
    run_main(main())
