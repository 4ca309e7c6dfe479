"""One daemon driving 8, 32 and 64 simulated hosts at once: its CPU while every host waits on
a server load, its memory, and each host's step lag.

For each size N, ``sim up --hosts N`` (one process serving N SSH hosts on 127.0.0.160..) and
``orchestrator daemon`` start; a one-trial-per-host sweep goes into the daemon's inbox. The
servers load for long enough that, once the N-th ``unit.started`` event is in the store, every
host is in the restart protocol's ready wait (journal follow, unit-state poll, probe backoff).
The daemon's CPU seconds (/proc, threads included) over the next ``window`` seconds, divided
by the window, is its share of one core. No host may become ready inside the window (the
benchmark checks). Then a tiny matrix runs, every host is restored, and the per-host step lag is
read against the servers' own stamps:

- ready lag: the server can generate (its millisecond stamp on ``max_total_num_tokens=``) to
  the daemon's ``Server.timeline.stamps["ready"]`` (the attempt's evidence);
- start spread: the first to the last ``unit.started`` (how long the daemon takes to fan out).

    python benchmarks/scale.py [--quick | --smoke --sizes 2] [--json]

The team shape (``--team``): three daemons over one PostgreSQL store (Debian's, started
durable, as deployed: commits fsynced) share one queue of eight sweeps over ``--hosts``
simulated hosts (64; eight in ``--smoke``), each sweep a disjoint eighth of them. Once every
unit has started, the three daemons' CPU over the window, per host; then the daemon running
the most sweeps is SIGKILLed and the other two take its sweeps over once their claims expire
(``claim_expiry_s``) and finish every sweep. Figures: claims and take-overs (from the
``sweep.claimed`` events), the take-over lag (kill to new claim), the store's write latency
(a writer beside the daemons commits one event every 0.1 s through its own Store, from the
first submit to the last sweep's end), and that no point was stored or measured twice.

    python benchmarks/scale.py --team [--hosts 64 | --smoke] [--json]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import time
from pathlib import Path
from typing import Any

from common import (
    PYTHON,
    REPO,
    SCHEDULER_UP,
    SimFleet,
    cpu_seconds,
    emit,
    log_stamp,
    machine,
    note,
    orchestrator_env,
    parse_args,
    peak_rss_mib,
    rss_mib,
    run_main,
    sim_fleet,
    summary,
    sweep_yaml,
    terminate,
)

BASE_ADDRESS = "127.0.0.160"
PORT = 2310
IDLE_FRAMES = ("select (selectors.py", "_worker (concurrent", "wait (threading")
"""Leaf frames of a waiting thread: epoll, an idle executor, a lock or condition wait."""
END_GRACE_S = 120.0  # after the loads, how long the sweep may take to end before it is given up


def host_settings(load_s: float) -> dict[str, Any]:
    return {"*": {
        "unit_running": False,
        "memory_release_lag_s": 0.2,
        "server": {"load_s": load_s, "warmup_s": 0.5, "stop_delay_s": 0.1},
    }}


def sweep_for(
    fleet: SimFleet, *, name: str = "bench-scale", hosts: list[Any] | None = None
) -> str:
    """One trial on each of ``hosts`` (every host of the fleet when None)."""
    server = dict(fleet.sweep["server"])
    server["environment"] = {"SGLANG_LOG_MS": "1"}
    return sweep_yaml(
        fleet.sweep,
        name=name,
        hosts=fleet.sweep["hosts"] if hosts is None else hosts,
        baseline=False,
        configs=[{"algorithm": "DDTREE", "draft_model": "/models/Kimi-K2.6-DFlash",
                  "budget": 8, "topk": 4}],
        server=server,
        benchmark={"api": "chat", "contexts": [60], "concurrency": [1], "max_tokens": 8,
                   "rounds": 1, "warmup_requests": 0, "temperature": 0.0},
        coding=None,
        timeouts={"stop": 60, "memory_release": 120, "ready": 600, "request": 120,
                  "connect": 60},
        policy={"on_trial_failure": "continue", "trial_retries": 0, "restore": "as-found"},
    )


def events(db: Path) -> list[tuple[str, str | None, float]]:
    if not db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            return list(conn.execute("SELECT kind, host, ts FROM events ORDER BY id"))
    except sqlite3.Error:
        return []


def attempts(db: Path) -> list[tuple[str, str, dict[str, Any]]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT t.host, a.state, a.evidence FROM attempts a JOIN trials t ON t.id = a.trial_id"
        )
        return [(host, state, json.loads(evidence or "{}")) for host, state, evidence in rows]


async def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout}s")
        await asyncio.sleep(0.5)


async def hot_functions(
    profiler: asyncio.subprocess.Process | None, raw: Path, top: int = 12
) -> dict[str, float]:
    """py-spy's samples of the daemon in the window: share of busy samples per function (self)."""
    if profiler is None:
        return {}
    await profiler.wait()
    if not raw.exists():
        return {}
    counts: dict[str, int] = {}
    busy = 0
    for line in raw.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        leaf = stack.split(";")[-1]
        if any(idle in leaf for idle in IDLE_FRAMES):
            continue
        busy += int(number)
        counts[leaf] = counts.get(leaf, 0) + int(number)
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
    return {name: round(n / busy, 3) for name, n in ranked} if busy else {}


async def one_size(
    hosts: int, *, load_s: float, window_s: float, keep: bool, profile: bool
) -> dict[str, Any]:
    note(f"scale: {hosts} hosts, server load {load_s:g}s")
    async with sim_fleet(hosts, base_address=BASE_ADDRESS, port=PORT + hosts,
                         settings=host_settings(load_s), keep=keep,
                         start_timeout=120 + 4 * hosts) as fleet:
        state = fleet.state_dir / "daemon"
        db = state / "orchestrator.db"
        daemon_log = (fleet.state_dir / "daemon.log").open("wb")
        daemon = await asyncio.create_subprocess_exec(
            PYTHON, "-m", "orchestrator.cli", "--log-level", "warning", "daemon",
            "--state-dir", str(state), cwd=REPO, env=orchestrator_env(),
            stdout=subprocess.DEVNULL, stderr=daemon_log,
        )
        try:
            inbox = state / "inbox"
            await wait_for(inbox.is_dir, 60, "the daemon's inbox")
            staged = state / "scale.yaml.tmp"
            staged.write_text(sweep_for(fleet))
            staged.rename(inbox / "scale.yaml")
            submitted = time.time()

            def started() -> list[float]:
                return [ts for kind, _h, ts in events(db) if kind == "unit.started"]

            await wait_for(lambda: len(started()) >= hosts, load_s, "every unit started")
            starts = started()
            profiler = None
            if profile:
                profiler = await asyncio.create_subprocess_exec(
                    str(Path(PYTHON).parent / "py-spy"), "record", "--nonblocking", "-r", "200",
                    "-d", str(int(window_s)), "--format", "raw", "-o",
                    str(fleet.state_dir / "daemon.raw"), "-p", str(daemon.pid),
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
            cpu_before, wall_before = cpu_seconds(daemon.pid), time.monotonic()
            await asyncio.sleep(window_s)
            cpu_after, wall_after = cpu_seconds(daemon.pid), time.monotonic()
            hot = await hot_functions(profiler, fleet.state_dir / "daemon.raw")
            window_end = time.time()
            ready_in_window = [
                ts for kind, _h, ts in events(db) if kind == "server.ready" and ts < window_end
            ]
            rss_waiting = rss_mib(daemon.pid)
            with contextlib.suppress(TimeoutError):
                await wait_for(
                    lambda: any(kind == "sweep.finished" for kind, _h, _t in events(db)),
                    load_s + END_GRACE_S, "the sweep's end",
                )
            peak = peak_rss_mib(daemon.pid)
            final = events(db)
            ready_hosts = {h for kind, h, _t in final if kind == "server.ready" and h}
            stuck = sorted(
                {h for kind, h, _t in final if kind == "unit.started" and h} - ready_hosts
            )
            stuck_since = {
                h: round(time.time() - ts, 1) for kind, h, ts in final
                if kind == "unit.started" and h in stuck
            }
            lags = await ready_lags(fleet, db)
        finally:
            await terminate(daemon)
            daemon_log.close()
    cpu_frac = (cpu_after - cpu_before) / (wall_after - wall_before)
    return {
        "hosts": hosts,
        "cpu_frac_waiting": round(cpu_frac, 4),
        "window_s": round(wall_after - wall_before, 2),
        "hosts_ready_inside_window": len(ready_in_window),
        "rss_mib_waiting": round(rss_waiting, 1),
        "peak_rss_mib": None if peak is None else round(peak, 1),
        "submit_to_last_start_s": round(max(starts) - submitted, 2),
        "start_spread_s": round(max(starts) - min(starts), 2),
        "ready_lag_s": summary(lags["ready"], digits=4),
        "trials_done": lags["done"],
        "hosts_never_ready": stuck,
        "profile_busy_self_top": hot,
        "never_ready_s_since_start": stuck_since,
    }


async def ready_lags(fleet: SimFleet, db: Path) -> dict[str, Any]:
    by_host = {host: evidence for host, state, evidence in attempts(db) if state == "done"}
    lags: list[float] = []

    async def one(host_name: str, evidence: dict[str, Any]) -> None:
        host = next(h for h in fleet.hosts if h.name == host_name)
        lines = await fleet.journal(host)
        invocation = evidence.get("invocation_id")
        stamp = next(
            (log_stamp(line.message) for line in lines
             if line.invocation == invocation and SCHEDULER_UP in line.message),
            None,
        )
        ready = (evidence.get("timeline") or {}).get("ready")
        if stamp is not None and ready is not None:
            lags.append(ready - stamp)

    semaphore = asyncio.Semaphore(8)

    async def limited(host_name: str, evidence: dict[str, Any]) -> None:
        async with semaphore:
            await one(host_name, evidence)

    await asyncio.gather(*(limited(h, e) for h, e in by_host.items()))
    return {"ready": lags, "done": len(by_host)}


async def main() -> dict[str, Any]:
    args = parse_args(__doc__.splitlines()[0], [
        ("--sizes", {"default": "8,32,64", "help": "host counts, comma-separated"}),
        ("--profile", {"action": "store_true",
                       "help": "py-spy the daemon in each window (its hottest functions)"}),
        ("--team", {"action": "store_true",
                    "help": "three daemons over one PostgreSQL store, eight sweeps"}),
        ("--hosts", {"type": int, "default": None,
                     "help": "--team: simulated hosts (default 64; 8 with --smoke)"}),
    ])
    if args.team:
        from scale_team import team_shape

        result = await team_shape(args)
        emit(result, args.json)
        return result
    window_s = 1.0 if args.smoke else 10.0 if args.quick else 30.0
    sizes = []
    for hosts in (int(n) for n in args.sizes.split(",")):
        # Long enough for the daemon to start every host and then wait out the window.
        load_s = (12.0 + 0.45 * hosts if args.quick else 30.0 + 0.6 * hosts) + window_s
        if args.smoke:
            load_s = 6.0 + 0.45 * hosts + window_s
        sizes.append(await one_size(hosts, load_s=load_s, window_s=window_s, keep=args.keep,
                                    profile=args.profile))
    at_64 = next((size for size in sizes if size["hosts"] == 64), None)
    result = {
        "cpu_frac_64_hosts": at_64["cpu_frac_waiting"] if at_64 else None,
        "sizes": sizes,
        "goal": {"cpu_frac_64_hosts": 0.05},
        "settings": {"quick": args.quick, "smoke": args.smoke, "window_s": window_s,
                     "server": "the full simulated SGLang server (no lightweight mode needed)"},
        "machine": machine(),
    }
    emit(result, args.json)
    return result


if __name__ == "__main__":
    run_main(main())
