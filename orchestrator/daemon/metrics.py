"""The daemon's Prometheus metrics (``GET /metrics``): what the store holds, read when scraped,
and what only this process knows (the hosts it holds, the sweeps it runs, its store writes).

The counts come from the store at scrape time, never from counters bumped along the way: the
store is the truth, so a restarted daemon (or another daemon over the same store) reports the
same numbers. An ended sweep's counts never change, so each is read once; a running or queued
one is read at every scrape. Only the store write latency is this process's own: a histogram
fed by the store's observer (``Store.observer``), from the call to the commit.

docs/operator-guide.md ("Scraping the metrics") lists the metrics with a scrape config.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.process_collector import ProcessCollector

from orchestrator import __version__
from orchestrator.daemon.claims import HostClaims
from orchestrator.search.budget import RESTART_EVENT
from orchestrator.store import SWEEP_STATES, Attempt, EventRecord, Store, SweepRecord, TrialRecord
from orchestrator.store.records import TERMINAL_SWEEP_STATES
from orchestrator.store.results import latest_outcomes, trial_outcomes

STORE_WRITES = frozenset(
    {
        "submit_sweep",
        "set_sweep_state",
        "add_hosts",
        "set_host_aside",
        "add_trials",
        "set_trial_plan",
        "start_attempt",
        "set_attempt_invocation",
        "resume_attempt",
        "finish_attempt",
        "skip_trial",
        "record_point",
        "add_event",
        "save_unit_backup",
        "mark_restored",
    }
)
"""The store operations that write (each one ``BEGIN IMMEDIATE`` ... ``COMMIT``); a unit test
holds this list to ``orchestrator.store.ops``."""

WRITE_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0)
"""A commit waits for fsync (a few ms on SSD), and up to the busy timeout (30 s) for the lock."""


@dataclass(frozen=True, slots=True)
class SweepTally:
    """One sweep's trials by their latest attempt's (state, cause), and its unit starts by
    host type."""

    trials: Mapping[tuple[str, str], int]
    restarts: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class PointAge:
    """A running sweep's last committed point, in seconds before the scrape (since the sweep
    started, before its first point)."""

    sweep: str
    sweep_id: int
    seconds: float


@dataclass(frozen=True, slots=True)
class StoreReading:
    """What the store holds, at one scrape."""

    sweeps: Mapping[str, int]
    """Sweeps by state, every state present."""
    trials: Mapping[tuple[str, str], int]
    restarts: Mapping[str, int]
    last_points: tuple[PointAge, ...]


@dataclass(frozen=True, slots=True)
class DaemonReading:
    """What only this daemon knows, at one scrape."""

    hosts_held: int
    sweeps_active: int


def sweep_tally(
    record: SweepRecord,
    trials: Sequence[TrialRecord],
    attempts: Sequence[Attempt],
    restarts: Iterable[EventRecord],
) -> SweepTally:
    """Each trial counted once, as its latest attempt stands (``status``'s rule; cause ``""``
    when it has none), and each ``restart.counted`` event by the host type it names."""
    outcomes = latest_outcomes(trial_outcomes(trials, attempts, (), record.state))
    counted = Counter[tuple[str, str]]((t.state, t.cause or "") for t in outcomes)
    types = Counter[str](str(e.fields.get("host_type", "")) for e in restarts)
    return SweepTally(dict(counted), dict(types))


def families(store: StoreReading, daemon: DaemonReading) -> list[Metric]:
    """The scrape's metric families, from its two readings."""
    sweeps = GaugeMetricFamily(
        "orchestrator_sweeps", "Sweeps in the store by state.", labels=["state"]
    )
    for state, count in store.sweeps.items():
        sweeps.add_metric([state], count)
    trials = GaugeMetricFamily(
        "orchestrator_trials",
        "Trials in the store by their latest attempt's state and cause (empty: none).",
        labels=["state", "cause"],
    )
    for (state, cause), count in sorted(store.trials.items()):
        trials.add_metric([state, cause], count)
    restarts = CounterMetricFamily(
        "orchestrator_restarts",
        "Unit starts the sweeps made (each counted before it is made), by host type.",
        labels=["host_type"],
    )
    for host_type, count in sorted(store.restarts.items()):
        restarts.add_metric([host_type], count)
    ages = GaugeMetricFamily(
        "orchestrator_sweep_last_point_age_seconds",
        "Seconds since a running sweep committed its last point (since it started, before one).",
        labels=["sweep", "id"],
    )
    for age in store.last_points:
        ages.add_metric([age.sweep, str(age.sweep_id)], age.seconds)
    info = InfoMetricFamily("orchestrator_build", "The daemon's version.")
    info.add_metric([], {"version": __version__})
    return [
        sweeps,
        GaugeMetricFamily(
            "orchestrator_queue_depth", "Sweeps queued, waiting to run.", store.sweeps["queued"]
        ),
        trials,
        restarts,
        ages,
        GaugeMetricFamily(
            "orchestrator_hosts_held",
            "Hosts this daemon's sweeps, restores and adopts hold now.",
            daemon.hosts_held,
        ),
        GaugeMetricFamily(
            "orchestrator_sweeps_active",
            "Sweeps this daemon is running now.",
            daemon.sweeps_active,
        ),
        info,
    ]


async def last_point_at(store: Store, attempts: Sequence[Attempt]) -> float | None:
    """When the sweep committed its latest point, reading the points of as few attempts as
    can hold it: an attempt's points are committed before it ends, so once a point is found
    no earlier than the latest end still unread, no other attempt can beat it."""

    def ends_by(attempt: Attempt) -> float:
        return float("inf") if attempt.finished_at is None else attempt.finished_at

    latest: float | None = None
    for attempt in sorted(attempts, key=ends_by, reverse=True):
        if latest is not None and latest >= ends_by(attempt):
            break
        for point in await store.points(attempt_id=attempt.id):
            latest = point.committed_at if latest is None else max(latest, point.committed_at)
    return latest


class StoreCounts:
    """Reads the store's counts at each scrape; an ended sweep's tally is read once."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock
        self._ended: dict[int, SweepTally] = {}

    async def read(self) -> StoreReading:
        records = await self.store.list_sweeps(include_replaced=True)
        now = self.clock()
        states = Counter[str]({state: 0 for state in SWEEP_STATES})
        trials, restarts = Counter[tuple[str, str]](), Counter[str]()
        ages = []
        for record in records:
            states[record.state] += 1
            tally, last = await self._sweep(record)
            trials.update(tally.trials)
            restarts.update(tally.restarts)
            if record.state == "running":
                since = last if last is not None else record.started_at
                ages.append(PointAge(record.name, record.id, max(0.0, now - (since or now))))
        return StoreReading(dict(states), dict(trials), dict(restarts), tuple(ages))

    async def _sweep(self, record: SweepRecord) -> tuple[SweepTally, float | None]:
        """The sweep's tally, and for a running sweep when it committed its last point."""
        ended = record.state in TERMINAL_SWEEP_STATES
        if ended and record.id in self._ended:
            return self._ended[record.id], None
        attempts = await self.store.attempts(record.id)
        tally = sweep_tally(
            record,
            await self.store.trials(record.id),
            attempts,
            await self.store.events(record.id, kinds=(RESTART_EVENT,)),
        )
        if ended:
            self._ended[record.id] = tally
        last = await last_point_at(self.store, attempts) if record.state == "running" else None
        return tally, last


def hosts_held(claims: HostClaims) -> int:
    """Hosts claimed now, each once (a host is claimed by its name and by its address:
    :func:`orchestrator.daemon.order.host_keys`)."""
    return sum(1 for key in claims.busy() if key.startswith("name:"))


@dataclass(frozen=True, slots=True)
class Exposition:
    """One scrape's answer: the body and its media type."""

    body: bytes
    content_type: str


class _Scrape:
    """One scrape as prometheus_client's encoders read it: the families read for it, then
    the registry's own (the write latency histogram, the process's CPU and memory)."""

    def __init__(self, read: list[Metric], registry: CollectorRegistry) -> None:
        self.read, self.registry = read, registry

    def collect(self) -> Iterator[Metric]:
        yield from self.read
        yield from self.registry.collect()


class ServiceMetrics:
    """This daemon's metrics: the store's counts, its own state, its store write latency."""

    def __init__(
        self, store: Store, claims: HostClaims, active: Mapping[int, object]
    ) -> None:
        self.counts = StoreCounts(store)
        self.claims = claims
        self.active = active
        """The running sweeps by id (the scheduler's own dict: always current)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.writes = Histogram(
            "orchestrator_store_write_seconds",
            "Seconds from a store write's call to its commit (the wait for the store included).",
            ["op"],
            registry=self.registry,
            buckets=WRITE_BUCKETS_S,
        )
        ProcessCollector(registry=self.registry)

    def observe_store(self, operation: str, seconds: float) -> None:
        """The store's observer: times each write by its operation."""
        if operation in STORE_WRITES:
            self.writes.labels(operation).observe(seconds)

    async def exposition(self, accept: str = "") -> Exposition:
        """The metrics in the format the scraper's ``Accept`` asks for (the Prometheus text
        format by default, OpenMetrics when asked)."""
        store = await self.counts.read()
        daemon = DaemonReading(hosts_held(self.claims), len(self.active))
        encode, content_type = choose_encoder(accept)
        return Exposition(encode(_Scrape(families(store, daemon), self.registry)), content_type)
