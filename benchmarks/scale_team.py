"""scale.py's team shape (``python benchmarks/scale.py --team``): three daemons over one
PostgreSQL store, eight sweeps over 64 simulated hosts, one daemon SIGKILLed mid-run. The
module docstring of scale.py says what is measured and how."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from common import (
    PYTHON,
    REPO,
    SimFleet,
    cpu_seconds,
    machine,
    note,
    orchestrator_env,
    sim_fleet,
    summary,
    terminate,
)
from scale import sweep_for

sys.path.insert(0, str(REPO))  # the tests' PostgreSQL launcher
from orchestrator.store import Store
from tests.pgserver import PostgresServer, postgres_server

BASE_ADDRESS = "127.0.3.1"
PORT = 2410
DAEMONS = 3
SWEEPS = 8
PROBE_EVERY_S = 0.1
END_GRACE_S = 300.0


@dataclass
class TeamDaemon:
    """One ``orchestrator daemon --db URL`` of the team, stopped by its pid."""

    name: str
    state: Path
    process: asyncio.subprocess.Process | None = None

    async def start(self, url: str, claim_expiry_s: float, log: Path) -> None:
        self.state.mkdir(parents=True, exist_ok=True)
        config = self.state.parent / f"{self.name}.yaml"
        config.write_text(yaml.safe_dump(
            {"store": url, "name": self.name, "claim_expiry_s": claim_expiry_s}
        ))
        config.chmod(0o600)
        with log.open("wb") as stderr:
            self.process = await asyncio.create_subprocess_exec(
                PYTHON, "-m", "orchestrator.cli", "--log-level", "warning", "daemon",
                "--state-dir", str(self.state), "--config", str(config),
                cwd=REPO, env=orchestrator_env(), stdout=subprocess.DEVNULL, stderr=stderr,
            )

    @property
    def inbox(self) -> Path:
        return self.state / "inbox"

    async def stop(self) -> None:
        if self.process is not None:
            await terminate(self.process)


@contextlib.asynccontextmanager
async def team(
    url: str, root: Path, claim_expiry_s: float
) -> AsyncIterator[list[TeamDaemon]]:
    daemons = [TeamDaemon(f"ctl-{i}", root / f"ctl-{i}") for i in range(1, DAEMONS + 1)]
    try:
        for daemon in daemons:
            await daemon.start(url, claim_expiry_s, root / f"{daemon.name}.log")
        yield daemons
    finally:
        await asyncio.gather(*(daemon.stop() for daemon in daemons))


@dataclass
class Probe:
    """A writer beside the daemons: one event every 0.1 s through a Store of its own, each
    commit timed from the call to its answer."""

    store: Store
    sweep_id: int
    seconds: list[float] = field(default_factory=list)

    @classmethod
    async def beside(cls, store: Store) -> Probe:
        """Its events hang on a record of its own, ended before any daemon reads the queue."""
        record = (await store.submit_sweep("probe", "probe: {}\n")).sweep
        await store.set_sweep_state(record.id, "done")
        return cls(store, record.id)

    async def run(self) -> None:
        while True:
            began = time.perf_counter()
            await self.store.add_event(self.sweep_id, "probe.write")
            self.seconds.append(time.perf_counter() - began)
            await asyncio.sleep(PROBE_EVERY_S)


def sweeps_for(fleet: SimFleet) -> list[str]:
    """Eight sweeps, each over a disjoint eighth of the hosts, one trial a host."""
    hosts = fleet.sweep["hosts"]
    share = max(len(hosts) // SWEEPS, 1)
    return [
        sweep_for(fleet, name=f"team-{i + 1}", hosts=hosts[i * share:(i + 1) * share])
        for i in range(SWEEPS)
    ]


def rows(server: PostgresServer, database: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(server.url(database), autocommit=True) as conn:
        return list(conn.execute(sql).fetchall())


def events_of(server: PostgresServer, db: str, kind: str) -> list[tuple[float, dict[str, Any]]]:
    found = rows(server, db, f"SELECT ts, fields FROM events WHERE kind = '{kind}' ORDER BY id")
    return [(float(ts), json.loads(fields)) for ts, fields in found]


def live_claims(server: PostgresServer, db: str) -> Counter[str]:
    """Sweeps held now, by daemon name."""
    found = rows(server, db, "SELECT daemon FROM sweep_claims WHERE released_at IS NULL "
                             f"AND expires_at > {time.time()}")
    return Counter(name.split(" ")[0] for (name,) in found)


def sweep_states(server: PostgresServer, db: str) -> Counter[str]:
    found = rows(server, db, "SELECT state FROM sweeps WHERE name LIKE 'team-%'")
    return Counter(state for (state,) in found)


def ended(server: PostgresServer, db: str) -> bool:
    states = sweep_states(server, db)
    return sum(states[s] for s in ("done", "failed", "cancelled")) >= SWEEPS


def measured_twice(server: PostgresServer, db: str) -> int:
    """Points of one trial measured in two attempts of which neither failed, or twice."""
    (count,) = rows(server, db, (
        "SELECT count(*) FROM (SELECT t.id, p.point_key FROM points p "
        "JOIN attempts a ON a.id = p.attempt_id JOIN trials t ON t.id = a.trial_id "
        "WHERE a.state != 'failed' GROUP BY t.id, p.point_key HAVING count(*) > 1) d"
    ))[0]
    return int(count)


async def wait_for(predicate: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := await asyncio.to_thread(predicate)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {timeout:g}s")
        await asyncio.sleep(0.5)
    return found


def settings(args: argparse.Namespace) -> dict[str, Any]:
    hosts = args.hosts or (8 if args.smoke else 64)
    window_s = 1.0 if args.smoke else 10.0 if args.quick else 30.0
    return {
        "hosts": hosts,
        "window_s": window_s,
        "load_s": (6.0 + 0.45 * hosts if args.smoke else 30.0 + 0.6 * hosts) + window_s,
        "claim_expiry_s": 3.0 if args.smoke else 10.0,
    }


async def team_shape(args: argparse.Namespace) -> dict[str, Any]:
    shape = settings(args)
    note(f"team: {DAEMONS} daemons, {SWEEPS} sweeps, {shape['hosts']} hosts, PostgreSQL")
    host_settings = {"*": {
        "unit_running": False,
        "memory_release_lag_s": 0.2,
        "server": {"load_s": shape["load_s"], "warmup_s": 0.5, "stop_delay_s": 0.1},
    }}
    with postgres_server(durable=True) as server:
        url = server.create_database("team")
        db = url.rsplit("/", 1)[1]
        async with sim_fleet(shape["hosts"], base_address=BASE_ADDRESS, port=PORT,
                             settings=host_settings, keep=args.keep,
                             start_timeout=120 + 4 * shape["hosts"]) as fleet, \
                await Store.open(url) as store:
            probe = await Probe.beside(store)
            async with team(url, fleet.state_dir / "team", shape["claim_expiry_s"]) as daemons:
                found = await measured(server, db, probe, fleet, daemons, shape)
    return {**found, "settings": {**shape, "daemons": DAEMONS, "sweeps": SWEEPS,
                                    "quick": args.quick, "smoke": args.smoke},
            "machine": machine()}


async def measured(
    server: PostgresServer, db: str, probe: Probe, fleet: SimFleet,
    daemons: list[TeamDaemon], shape: dict[str, Any],
) -> dict[str, Any]:
    hosts, window_s = shape["hosts"], shape["window_s"]
    await wait_for(lambda: all(d.inbox.is_dir() for d in daemons), 60, "the daemons' inboxes")
    probing = asyncio.create_task(probe.run())
    try:
        for i, text in enumerate(sweeps_for(fleet)):
            staged = daemons[i % DAEMONS].state / f"team-{i}.yaml.tmp"
            staged.write_text(text)
            staged.rename(daemons[i % DAEMONS].inbox / f"team-{i}.yaml")
        await wait_for(lambda: len(events_of(server, db, "unit.started")) >= hosts,
                       shape["load_s"], "every unit started")
        cpu = await cpu_window(daemons, window_s)
        killed, kill_at = await kill_busiest(server, db, daemons)
        await wait_for(lambda: ended(server, db), shape["load_s"] + END_GRACE_S,
                       "every sweep's end")
    finally:
        probing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await probing
    return figures(server, db, cpu, killed, kill_at, probe, hosts)


async def cpu_window(daemons: list[TeamDaemon], window_s: float) -> dict[str, float]:
    """Each daemon's CPU seconds over the window, as its share of one core."""
    pids = {d.name: d.process.pid for d in daemons if d.process is not None}
    before, began = {n: cpu_seconds(p) for n, p in pids.items()}, time.monotonic()
    await asyncio.sleep(window_s)
    after, ended = {n: cpu_seconds(p) for n, p in pids.items()}, time.monotonic()
    return {n: (after[n] - before[n]) / (ended - began) for n in pids}


async def kill_busiest(
    server: PostgresServer, db: str, daemons: list[TeamDaemon]
) -> tuple[str, float]:
    """SIGKILL the daemon that holds the most sweeps now; its name and when."""
    held = live_claims(server, db)
    name = held.most_common(1)[0][0]
    victim = next(d for d in daemons if d.name == name)
    assert victim.process is not None
    note(f"team: SIGKILL {name}, which runs {held[name]} of the sweeps")
    kill_at = time.time()
    victim.process.kill()
    await victim.process.wait()
    return name, kill_at


def figures(
    server: PostgresServer, db: str, cpu: dict[str, float], killed: str, kill_at: float,
    probe: Probe, hosts: int,
) -> dict[str, Any]:
    claimed = events_of(server, db, "sweep.claimed")
    first = Counter(f["daemon"].split(" ")[0] for _, f in claimed if f["generation"] == 1)
    over = [(ts, f) for ts, f in claimed if f["took_over_from"] is not None]
    done = events_of(server, db, "sweep.finished")
    return {
        "claims": len(claimed),
        "first_claims_by_daemon": dict(sorted(first.items())),
        "take_overs": len(over),
        "killed_daemon": killed,
        "killed_daemon_claims": first.get(killed, 0),
        "take_over_lag_s": summary([ts - kill_at for ts, _ in over], digits=2),
        "sweeps": dict(sweep_states(server, db)),
        "sweeps_finished_events": len(done),
        "points_measured_twice": measured_twice(server, db),
        "store_write_s": summary(probe.seconds, digits=5),
        "store_write_p99_s": summary(probe.seconds, digits=5)["p99"],
        "daemon_cpu_frac": {n: round(f, 4) for n, f in sorted(cpu.items())},
        "daemon_cpu_frac_per_host": round(sum(cpu.values()) / hosts, 6),
        "hosts": hosts,
    }


