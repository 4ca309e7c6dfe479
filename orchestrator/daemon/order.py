"""Which sweeps may run now, and each queued sweep's file parsed once (pure but for the cache).

A sweep waits while any of its hosts (same name, or same address and port) is in use, and a
waiting sweep keeps its hosts reserved so a later one cannot overtake it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from orchestrator.store import Store, SweepRecord
from orchestrator.sweepfile import HostSpec, StoredWorkloads, Sweep, SweepFileError, parse_sweep

T = TypeVar("T")


def host_keys(host: HostSpec) -> frozenset[str]:
    """What identifies a host for mutual exclusion: its name and where it is reached."""
    where = "local" if host.address == "local" else f"{host.address.lower()}:{host.port}"
    return frozenset({f"name:{host.name}", f"address:{where}"})


def sweep_host_keys(sweep: Sweep) -> frozenset[str]:
    keys: set[str] = set()
    for host in sweep.hosts:
        keys |= host_keys(host)
    return frozenset(keys)


def pick_runnable(
    queue: Sequence[tuple[T, frozenset[str]]], busy: Iterable[str], slots: int
) -> list[T]:
    """The sweeps to start now, from ``queue`` in run order, each with its host keys.

    A sweep starts when none of its hosts is busy and a slot is free. A sweep that must wait
    reserves its hosts, so a later sweep sharing any of them waits behind it (no overtaking,
    no starvation); a later sweep on other hosts starts at once.
    """
    claimed = set(busy)
    picked: list[T] = []
    for item, keys in queue:
        if len(picked) >= slots:
            break
        if not keys & claimed:
            picked.append(item)
        claimed |= keys
    return picked


def run_order(records: Sequence[SweepRecord]) -> list[SweepRecord]:
    """Interrupted (running) sweeps first, then the queue by priority, then submission."""
    return sorted(records, key=lambda r: (r.state != "running", -r.priority, r.submitted_at, r.id))


def _label(record: SweepRecord) -> str:
    return f"sweep {record.name} (id {record.id})"


class ParsedSweeps:
    """Each stored sweep's file parsed once, by record id.

    A record's text never changes (a new submission is a new record), so the scheduler's tick,
    a restore and a host lookup all reuse one parse; a file that no longer parses (the schema
    moved on) keeps raising the same :class:`SweepFileError`.
    """

    def __init__(self) -> None:
        self._parsed: dict[int, Sweep | SweepFileError] = {}

    def get(self, record: SweepRecord) -> Sweep:
        """The record's sweep: the runnable parse when :meth:`runnable` made one, else the
        text alone (hosts, policy, objective; no workload content)."""
        found = self._parsed.get(record.id)
        if found is None:
            return self._parse(record, None)
        if isinstance(found, SweepFileError):
            raise found
        return found

    async def runnable(self, record: SweepRecord, store: Store) -> Sweep:
        """The record's sweep with its workload files' content from the store (what a run
        needs), parsed once; the daemon never reads a file the sweep names from disk."""
        found = self._parsed.get(record.id)
        if isinstance(found, Sweep) and found.benchmark.workloads_resolved:
            return found
        stored = {w.path: w.content for w in await store.sweep_workloads(record.id)}
        return self._parse(record, StoredWorkloads(stored, "stored with the sweep"))

    def _parse(self, record: SweepRecord, workloads: StoredWorkloads | None) -> Sweep:
        """Parse, keep the sweep or the error for the next caller, and answer it."""
        try:
            found: Sweep | SweepFileError = parse_sweep(
                record.yaml_text, _label(record), workloads=workloads
            )
        except SweepFileError as exc:
            found = exc
        self._parsed[record.id] = found
        if isinstance(found, SweepFileError):
            raise found
        return found

    def host(self, record: SweepRecord, name: str) -> HostSpec | None:
        """The host ``name`` as the record's file describes it (None: unknown or unparsable)."""
        try:
            sweep = self.get(record)
        except SweepFileError:
            return None
        return next((h for h in sweep.hosts if h.name == name), None)

    def host_keys(self, record: SweepRecord, name: str) -> frozenset[str]:
        """The keys a restore of host ``name`` holds (its name alone when the file is gone)."""
        host = self.host(record, name)
        return host_keys(host) if host is not None else frozenset({f"name:{name}"})
