"""Crash-resume soak: SIGKILL ``orchestrator run`` at seeded random instants until the sweep ends.

Two simulated hosts run a sweep; the runner process is killed with SIGKILL after a random delay
(seeded; counted from the run's start, or on every other run from its first drop-in, so that
kills land both in start-up and inside trials), restarted on the same store, killed again,
``--kills`` times, then left to finish. Once
in the middle, one host's SSH server goes away for a few seconds and comes back. After every
kill the store must still hold every point committed before it, unchanged. At the end the store
is compared with an uninterrupted run of the same sweep (its own store, same hosts): the same
(trial, host, point) set, none lost, none measured twice, every host's unit files byte-identical
to before and the unit running as found.

Run on demand::

    .venv/bin/python tests/soak/soak.py --kills 25 --seed 7 --json

Exit status 0 when every check held, 1 otherwise (the JSON report says which).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `tests.soak` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.log import configure_logging
from orchestrator.sim.cli import SimCluster
from orchestrator.sim.host import SimHost
from tests.soak import harness
from tests.soak.harness import HostAsFound, RunnerProcess

DEFAULT_ADDRESSES = ("127.0.0.116", "127.0.0.117")
TIME_SCALE = 0.1
PROBLEMS = ("fib",)
CONTEXTS = (60,)
KILL_BUDGET = 0.75
OUTAGE_S = 2.0
OUTAGE_CYCLE_S = 3 * OUTAGE_S
FINISH_TIMEOUT_S = 600.0
START_TIMEOUT_S = 60.0
# At a tenth of real time with a restart every second or two, systemd's default start limit
# (5 starts in 10 s) would fail trials an overnight sweep never fails; the soak is about resume.
UNIT_LINES = ("StartLimitIntervalSec=0",)

# Where a host stood at a kill, from the last event the store has of it.
STEP_OF_EVENT = {
    "sweep.started": "startup",
    "host.unreachable": "unreachable",
    "host.error": "error",
    "preflight": "preflight",
    "backup.saved": "preflight",
    "backup.loaded": "preflight",
    "dropin.installed": "stop",
    "gpu.baseline": "stop",
    "unit.stopping": "stop",
    "unit.stopped": "memory-wait",
    "memory.released": "readiness",
    "unit.starting": "readiness",
    "unit.started": "readiness",
    "server.ready": "point",
    "trial.failed": "retry",
    "restore.begin": "restore",
    "restore.done": "done",
}


@dataclass
class SoakReport:
    """The soak's figures; ``ok`` only when every check held."""

    seed: int
    kills_planned: int
    kills_survived: int = 0
    restarts: int = 0
    kill_delays_s: list[float] = field(default_factory=list)
    ssh_outages: int = 0
    host_steps_at_kill: dict[str, int] = field(default_factory=dict)
    points_compared: int = 0
    reference_points: int = 0
    lost: int = 0
    duplicated: int = 0
    measured_twice: int = 0
    missing_vs_reference: list[str] = field(default_factory=list)
    extra_vs_reference: list[str] = field(default_factory=list)
    hosts_restored: bool = False
    host_differences: dict[str, list[str]] = field(default_factory=dict)
    final_state: str = ""
    trials: int = 0
    attempts: int = 0
    resumed_attempts: int = 0
    duration_s: float = 0.0
    reference_duration_s: float = 0.0
    typical_trial_s: float = 0.0
    problems: list[str] = field(default_factory=list)
    command: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def soak_sweep(cluster: SimCluster, *, name: str, trials_per_host: int) -> dict[str, Any]:
    """A baseline and ``trials_per_host - 1`` DDTree configs (budgets 8, 12, ...) per host."""
    sweep = harness.tiny_sweep(
        cluster, name=name, baseline=True, configs=1, contexts=CONTEXTS, problems=PROBLEMS
    )
    template = dict(sweep["configs"][0])
    sweep["configs"] = [
        {**template, "budget": 8 + 4 * index} for index in range(max(trials_per_host - 1, 0))
    ]
    return sweep


def default_trials_per_host(kills: int) -> int:
    """A sweep long enough to spread ``kills`` kills over: ~1.4 trials per host per kill keeps
    the mean time between kills (~3 s at ~2.5 s a trial) above a restart's own cost."""
    return max(4, math.ceil(1.4 * kills))


def kill_delays(rng: random.Random, kills: int, sweep_s: float, reserved_s: float) -> list[float]:
    """Seconds from each run's start to its kill: seeded random shapes scaled so that together
    they stay within :data:`KILL_BUDGET` of a typical uninterrupted sweep (``sweep_s``). A killed
    run advances no faster than an uninterrupted one, so the sweep outlasts the last kill."""
    shapes = [rng.uniform(0.2, 1.8) for _ in range(kills)]
    budget = max(KILL_BUDGET * sweep_s - reserved_s, 0.5 * kills)
    scale = budget / sum(shapes)
    return [round(max(shape * scale, 0.3), 2) for shape in shapes]


async def ssh_outage(host: SimHost, seconds: float) -> None:
    """The host's SSH server goes away (listener closed, every connection aborted) and comes
    back ``seconds`` later; the host itself (its units, GPUs, server) carries on."""
    assert host.sshd is not None
    await host.sshd.close()
    await asyncio.sleep(seconds)
    await host.sshd.start()


def _step_at_kill(db: Path, since: int, hosts: Sequence[str]) -> list[str]:
    """Per host, the step it was in when the runner died (``startup`` if nothing yet)."""
    steps = []
    events = harness.events_after(db, since)
    for host in hosts:
        mine = [e for e in events if e.host == host and e.kind in STEP_OF_EVENT]
        steps.append(STEP_OF_EVENT[mine[-1].kind] if mine else "startup")
    return steps


@dataclass(frozen=True)
class Reference:
    """The uninterrupted run: what it stored, how long it took, how long a trial typically took."""

    summary: harness.SweepSummary
    duration_s: float
    typical_trial_s: float


async def run_reference(sweep: Path, name: str, workdir: Path) -> Reference:
    """The same sweep, uninterrupted, in a store of its own."""
    db = workdir / "reference.db"
    started = time.monotonic()
    runner = await RunnerProcess.start(sweep, db, workdir / "logs", "reference")
    status = await runner.finish(FINISH_TIMEOUT_S)
    if status != 0:
        raise harness.HarnessError(f"reference run exited {status}\n{runner.log_tail()}")
    return Reference(
        harness.sweep_summary(db, name), time.monotonic() - started, typical_trial_s(db)
    )


def typical_trial_s(db: Path) -> float:
    """The median time from one trial's drop-in to the next step on the same host: robust to
    the odd stalled start, which would otherwise stretch every kill delay."""
    marks: dict[str, list[float]] = {}
    for event in harness.events_after(db, 0):
        if event.host is not None and event.kind in ("dropin.installed", "restore.begin"):
            marks.setdefault(event.host, []).append(event.ts)
    spans = [b - a for times in marks.values() for a, b in itertools.pairwise(times)]
    return statistics.median(spans) if spans else 5.0


async def run_soak(
    *,
    kills: int,
    seed: int,
    workdir: Path,
    addresses: Sequence[str] = DEFAULT_ADDRESSES,
    trials_per_host: int | None = None,
    ssh_outage_at: int | None = None,
    command: str = "",
) -> SoakReport:
    """The whole soak: the reference run, then the killed-and-restarted one, then the verdict."""
    rng = random.Random(seed)
    report = SoakReport(seed=seed, kills_planned=kills, command=command)
    trials_per_host = trials_per_host or default_trials_per_host(kills)
    outage_at = kills // 2 if ssh_outage_at is None else ssh_outage_at
    async with harness.sim_hosts(
        workdir / "sim",
        addresses,
        defaults=harness.fast_host_defaults(TIME_SCALE),
        unit_lines=UNIT_LINES,
    ) as cluster:
        names = [h.name for h in cluster.hosts]
        as_found = {h.name: HostAsFound.read(h) for h in cluster.hosts}
        reference_file = harness.write_sweep(
            workdir / "reference.yaml",
            soak_sweep(cluster, name="soak-reference", trials_per_host=trials_per_host),
        )
        reference = await run_reference(reference_file, "soak-reference", workdir)
        report.reference_duration_s = round(reference.duration_s, 1)
        report.typical_trial_s = round(reference.typical_trial_s, 2)
        _check_hosts(cluster.hosts, as_found, report, "after the reference run")

        name = "soak"
        sweep = harness.write_sweep(
            workdir / "soak.yaml", soak_sweep(cluster, name=name, trials_per_host=trials_per_host)
        )
        db = workdir / "soak.db"
        started = time.monotonic()
        committed: dict[harness.PointId, tuple[Any, ...]] = {}
        steps: Counter[str] = Counter()
        delays = kill_delays(
            rng, kills, reference.typical_trial_s * trials_per_host, OUTAGE_CYCLE_S
        )
        report.kill_delays_s = delays
        for cycle in range(kills + 1):
            since = harness.last_event_id(db)
            runner = await RunnerProcess.start(sweep, db, workdir / "logs", f"run-{cycle:02d}")
            report.restarts += cycle > 0
            if cycle == kills:
                status = await runner.finish(FINISH_TIMEOUT_S)
                if status != 0:
                    report.problems.append(f"the last run exited {status}")
                break
            delay = delays[cycle]
            outage: asyncio.Task[None] | None = None
            if cycle == outage_at:
                # The outage starts a third into the cycle: the runner is at work on both hosts.
                host = cluster.hosts[rng.randrange(len(cluster.hosts))]
                delay = max(delay, OUTAGE_CYCLE_S)
                outage = asyncio.create_task(_outage_later(host, delay / 3, OUTAGE_S))
                report.ssh_outages += 1
            # Instants count from the run's own start (its sweep.started), not the process's:
            # a kill during interpreter start-up tests nothing.
            await harness.wait_for_event(
                db, runner, ["sweep.started"], after_id=since, timeout=START_TIMEOUT_S
            )
            if cycle % 2:
                # Every other kill counts from the cycle's first drop-in, so some land inside a
                # trial however long the start-up (lease, preflight) took on a loaded machine:
                # counted from the start alone, a loaded run's five kills all fell before any
                # trial began and nothing was resumed.
                await harness.wait_for_event(
                    db, runner, ["dropin.installed"], after_id=since, timeout=START_TIMEOUT_S
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(runner.process.wait(), delay)
            if outage is not None:
                await outage
            if not runner.running:
                report.problems.append(
                    f"the sweep ended (exit {runner.process.returncode}) after {cycle} of "
                    f"{kills} kills: give it more trials"
                )
                break
            await runner.kill()
            report.kills_survived += 1
            steps.update(_step_at_kill(db, since, names))
            now = harness.committed_points(db)
            gone = harness.lost_points(committed, now)
            report.lost += len(gone)
            report.problems.extend(f"kill {cycle + 1}: {problem}" for problem in gone)
            committed = now
        report.duration_s = round(time.monotonic() - started, 1)
        report.host_steps_at_kill = dict(sorted(steps.items()))
        _verdict(db, name, reference.summary, committed, report)
        _check_hosts(cluster.hosts, as_found, report, "after the soak")
    return report


async def _outage_later(host: SimHost, after_s: float, seconds: float) -> None:
    await asyncio.sleep(after_s)
    await ssh_outage(host, seconds)


def _verdict(
    db: Path,
    name: str,
    reference: harness.SweepSummary,
    committed: dict[harness.PointId, tuple[Any, ...]],
    report: SoakReport,
) -> None:
    final = harness.committed_points(db)
    gone = harness.lost_points(committed, final)
    report.lost += len(gone)
    report.problems.extend(f"at the end: {problem}" for problem in gone)
    duplicated = harness.duplicated_points(db)
    twice = harness.measured_more_than_once(db)
    report.duplicated = len(duplicated)
    report.measured_twice = len(twice)
    report.problems.extend(f"stored twice: {d}" for d in duplicated)
    report.problems.extend(f"measured twice: {t}" for t in twice)
    summary = harness.sweep_summary(db, name)
    report.final_state = summary.state
    report.trials = len(summary.trials)
    report.attempts = summary.attempts
    report.resumed_attempts = summary.resumes
    if summary.state != "done":
        report.problems.append(f"sweep state {summary.state}")
    not_done = {k: s for k, s in summary.trials.items() if s != "done"}
    if not_done:
        report.problems.append(f"trials not done: {not_done}")
    soaked = _point_set(summary)
    expected = _point_set(reference)
    report.points_compared = len(soaked)
    report.reference_points = len(expected)
    report.missing_vs_reference = sorted(expected - soaked)
    report.extra_vs_reference = sorted(soaked - expected)
    if report.missing_vs_reference or report.extra_vs_reference:
        report.problems.append("the point set differs from the uninterrupted run")
    if summary.unrestored_backups:
        report.problems.append(f"{summary.unrestored_backups} unit backups never restored")


def _point_set(summary: harness.SweepSummary) -> set[str]:
    return {
        f"{key} @ {host}: {point}"
        for (key, host), points in summary.final_points.items()
        for point in points
    }


def _check_hosts(
    hosts: Sequence[SimHost], as_found: dict[str, HostAsFound], report: SoakReport, when: str
) -> None:
    report.host_differences = {
        h.name: found for h in hosts if (found := as_found[h.name].differences(h))
    }
    report.hosts_restored = not report.host_differences
    for host, found in report.host_differences.items():
        report.problems.append(f"{when}: {host} not as found: {found}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=25, help="SIGKILLs of the runner (25)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill instants")
    parser.add_argument("--trials-per-host", type=int, help="default: from --kills")
    parser.add_argument("--workdir", type=Path, help="keep stores and logs here (default: temp)")
    parser.add_argument(
        "--addresses", default=",".join(DEFAULT_ADDRESSES), help="two loopback addresses"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--log-level", default="warning", help="the hosts' log on stderr")
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    command = "python tests/soak/soak.py " + " ".join(sys.argv[1:] if argv is None else argv)
    with contextlib.ExitStack() as stack:
        workdir = args.workdir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="orchestrator-soak-"))
        )
        workdir.mkdir(parents=True, exist_ok=True)
        report = asyncio.run(
            run_soak(
                kills=args.kills,
                seed=args.seed,
                workdir=workdir,
                addresses=args.addresses.split(","),
                trials_per_host=args.trials_per_host,
                command=command,
            )
        )
    document = {**asdict(report), "ok": report.ok}
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        for key, value in document.items():
            print(f"{key}: {value}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
