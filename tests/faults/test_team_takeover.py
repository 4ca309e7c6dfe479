"""Several daemons, one queue (issue 36): two real daemons over one real PostgreSQL store, on
two simulated hosts. The daemon that claims the sweep is SIGKILLed mid-trial, with a point of
the trial committed and the next one not; the other daemon takes the sweep over once its claim
expires and finishes it: the attempt in flight resumed (its committed point kept, only the
missing one measured), no point stored twice or lost, every host as found, and the store's
password nowhere it could be read (logs, events, status, the hosts' lease files).

The daemons are real processes started and stopped by pid; claims expire in a few seconds
(``claim_expiry_s``), the hosts run at a tenth of real time; the moments are found in the
store, never by sleeping blindly.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from orchestrator.host.lease import LEASE_DIR
from orchestrator.sim.host import SimHost
from tests.faults.test_lease_faults import EXPIRY_S, FINISH_S, REACH_S, TIME_SCALE, unit_dirs
from tests.integration.daemon_proc import DaemonProcess
from tests.soak import harness
from tests.soak.harness import HostAsFound

pytest_plugins = ["tests.postgres_fixture"]
pytestmark = pytest.mark.slow

ADDRESSES = ["127.0.0.191", "127.0.0.192"]
CLAIM_EXPIRY_S = 3.0
CONTEXTS = (60, 1024)
"""Two points a trial: a daemon killed between them leaves an attempt half measured."""
SLOW_LOADS = {"server": {"load_s": 10}}


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(sql).fetchall())


def committed_points(url: str) -> dict[tuple[str, str, int, str], tuple[Any, ...]]:
    """Every point: (trial key, host, attempt number, point key) -> what was stored."""
    found = rows(
        url,
        "SELECT t.key, t.host, a.number, p.point_key, p.id, p.metrics, p.committed_at "
        "FROM points p JOIN attempts a ON a.id = p.attempt_id "
        "JOIN trials t ON t.id = a.trial_id ORDER BY p.id",
    )
    points = {(r[0], r[1], int(r[2]), r[3]): tuple(r[4:]) for r in found}
    assert len(points) == len(found), "a point stored twice"
    return points


def half_measured(url: str) -> list[tuple[Any, ...]]:
    """Running attempts that committed a point and not yet all of them."""
    return rows(
        url,
        "SELECT a.id, count(p.id) FROM attempts a JOIN points p ON p.attempt_id = a.id "
        f"WHERE a.state = 'running' GROUP BY a.id HAVING count(p.id) < {len(CONTEXTS)}",
    )


def daemon_config(tmp_path: Path, label: str, url: str | None) -> Path:
    settings: dict[str, Any] = {"name": f"ctl-{label}", "claim_expiry_s": CLAIM_EXPIRY_S}
    if url is not None:
        settings["store"] = url
    path = tmp_path / f"{label}.yaml"
    path.write_text(yaml.safe_dump(settings))
    path.chmod(0o600)
    return path


def lease_files(host: SimHost) -> str:
    return "".join(p.read_text() for p in (host.root / LEASE_DIR.lstrip("/")).rglob("*.json"))


async def until(condition: Any, what: str, daemons: list[DaemonProcess]) -> Any:
    deadline = time.monotonic() + REACH_S
    while not (found := await asyncio.to_thread(condition)):
        for daemon in daemons:
            assert daemon.process is not None and daemon.process.poll() is None, daemon.log()
        assert time.monotonic() < deadline, f"never {what}"
        await asyncio.sleep(harness.POLL_S)
    return found


async def test_a_sweep_whose_daemon_is_killed_is_finished_by_another(
    tmp_path: Path, postgres_url: str
) -> None:
    password = postgres_url.split(":")[2].split("@")[0]
    async with harness.sim_hosts(
        tmp_path / "sim",
        ADDRESSES,
        defaults=harness.fast_host_defaults(TIME_SCALE),
        faults={"*": SLOW_LOADS},
    ) as cluster:
        found = {h.name: (HostAsFound.read(h), unit_dirs(h)) for h in cluster.hosts}
        sweep = harness.tiny_sweep(
            cluster, name="team-night", baseline=False, configs=2, contexts=CONTEXTS, problems=()
        )
        sweep["policy"].update(lease_expiry=EXPIRY_S, trial_retries=0)
        sweep_path = harness.write_sweep(tmp_path / "team-night.yaml", sweep)
        # One daemon names the store in its config file, the other on its command line.
        daemons = {
            "a": DaemonProcess(
                tmp_path / "a", ["--config", str(daemon_config(tmp_path, "a", postgres_url))]
            ),
            "b": DaemonProcess(
                tmp_path / "b",
                ["--config", str(daemon_config(tmp_path, "b", None)), "--db", postgres_url],
            ),
        }
        await asyncio.gather(*(asyncio.to_thread(d.start) for d in daemons.values()))
        try:
            status, _ = await asyncio.to_thread(daemons["b"].submit, sweep_path)
            assert status in (200, 201), daemons["b"].log()[-3000:]
            await until(lambda: half_measured(postgres_url), "a trial half measured", [
                *daemons.values()
            ])
            (runner_name,) = rows(postgres_url, "SELECT daemon FROM sweep_claims")[0]
            label = "a" if runner_name.startswith("ctl-a ") else "b"
            killed, survivor = daemons[label], daemons["b" if label == "a" else "a"]
            # status on either daemon: every sweep, and which daemon runs it
            for daemon in daemons.values():
                _, listing = await asyncio.to_thread(daemon.api, "/sweeps")
                (view,) = listing["sweeps"]
                assert view["daemon"] == runner_name and view["state"] == "running"
            before = committed_points(postgres_url)
            killed.kill()  # SIGKILL, mid-trial
            ended = await asyncio.to_thread(
                survivor.wait_for, "team-night", ("done", "failed", "cancelled"), FINISH_S
            )
        finally:
            for daemon in daemons.values():
                if daemon.process is not None and daemon.process.poll() is None:
                    await asyncio.to_thread(daemon.terminate)

        assert ended["state"] == "done", survivor.log()[-5000:]
        after = committed_points(postgres_url)
        assert harness.lost_points(before, after) == []
        # Nothing measured twice: one attempt per trial, resumed where it was cut.
        attempts = rows(
            postgres_url,
            "SELECT t.key, t.host, a.number, a.state, a.resumes FROM attempts a "
            "JOIN trials t ON t.id = a.trial_id ORDER BY a.id",
        )
        assert {r[3] for r in attempts} == {"done"} and {r[2] for r in attempts} == {1}
        assert len(attempts) == 2 * len(cluster.hosts)
        assert sum(r[4] for r in attempts) >= 1  # the half-measured one was resumed
        expected = harness.expected_point_keys((), CONTEXTS)
        for key, host, *_ in attempts:
            assert {p for (k, h, _n, p) in after if (k, h) == (key, host)} == expected
        assert len(after) == len(attempts) * len(CONTEXTS)
        # The take-over, as the store recorded it.
        claimed = rows(postgres_url, "SELECT fields FROM events WHERE kind = 'sweep.claimed'")
        generations = [json.loads(r[0]) for r in claimed]
        assert [(g["generation"], g["took_over_from"]) for g in generations] == [
            (1, None),
            (2, runner_name),
        ]
        assert generations[1]["daemon"].startswith(f"ctl-{'b' if label == 'a' else 'a'} ")
        (unrestored,) = rows(
            postgres_url, "SELECT count(*) FROM unit_backups WHERE restored_at IS NULL"
        )[0]
        assert unrestored == 0
        for host in cluster.hosts:
            as_found, dirs = found[host.name]
            assert as_found.differences(host) == [], host.name
            assert unit_dirs(host) == dirs
            assert password not in lease_files(host)
        # The password: handed to the driver, shown nowhere.
        events = rows(postgres_url, "SELECT kind, fields FROM events")
        assert password not in json.dumps(events)
        for daemon in daemons.values():
            assert password not in daemon.log() and "Traceback" not in daemon.log()
        assert "127.0.0.1" in survivor.events("daemon.ready")[0]["store"]


async def test_a_foreground_run_over_the_team_s_store_claims_its_sweep_as_a_daemon_does(
    tmp_path: Path, postgres_url: str
) -> None:
    """``orchestrator run --db postgresql://...`` claims the sweep before it runs it: refused
    while a daemon runs the same sweep, and no daemon starts a sweep the run holds."""
    password = postgres_url.split(":")[2].split("@")[0]
    async with harness.sim_hosts(
        tmp_path / "sim",
        ["127.0.0.193"],
        defaults=harness.fast_host_defaults(TIME_SCALE),
        faults={"*": SLOW_LOADS},
    ) as cluster:
        as_found = HostAsFound.read(cluster.hosts[0])
        files = {}
        for name in ("by-daemon", "by-run"):
            sweep = harness.tiny_sweep(cluster, name=name, baseline=False, problems=())
            sweep["policy"].update(lease_expiry=EXPIRY_S, trial_retries=0)
            files[name] = harness.write_sweep(tmp_path / f"{name}.yaml", sweep)
        daemon = DaemonProcess(
            tmp_path / "a", ["--config", str(daemon_config(tmp_path, "a", postgres_url))]
        )
        await asyncio.to_thread(daemon.start)
        try:
            status, _ = await asyncio.to_thread(daemon.submit, files["by-daemon"])
            assert status in (200, 201), daemon.log()[-3000:]
            await until(
                lambda: rows(postgres_url, "SELECT 1 FROM sweep_claims WHERE released_at IS NULL"),
                "the daemon's claim",
                [daemon],
            )
            refused = await harness.RunnerProcess.start(
                files["by-daemon"], postgres_url, tmp_path / "logs", "refused"
            )
            assert await refused.finish(FINISH_S) == 1
            assert "is run by ctl-a (daemon, pid" in refused.log_tail()
            await asyncio.to_thread(daemon.wait_for, "by-daemon", ("done",), FINISH_S)

            own = await harness.RunnerProcess.start(
                files["by-run"], postgres_url, tmp_path / "logs", "own"
            )
            assert await own.finish(FINISH_S) == 0, own.log_tail()
        finally:
            await asyncio.to_thread(daemon.terminate)
        claims = rows(
            postgres_url,
            "SELECT s.name, c.daemon, c.generation, c.released_at IS NOT NULL "
            "FROM sweep_claims c JOIN sweeps s ON s.id = c.sweep_id ORDER BY s.id",
        )
        assert [(name, generation, released) for name, _, generation, released in claims] == [
            ("by-daemon", 1, True),
            ("by-run", 1, True),
        ]
        assert claims[0][1].startswith("ctl-a (daemon, pid ") and "(run, pid " in claims[1][1]
        states = rows(postgres_url, "SELECT name, state FROM sweeps ORDER BY id")
        assert states == [("by-daemon", "done"), ("by-run", "done")]
        assert as_found.differences(cluster.hosts[0]) == []
        for runner in (refused, own):
            assert password not in runner.log_tail(200_000)
        assert password not in (tmp_path / "logs" / "own.json").read_text()
