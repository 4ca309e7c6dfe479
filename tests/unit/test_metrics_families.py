"""The daemon's metrics without a daemon: the families from two readings as Prometheus's own
text parser reads them back, which store operations count as writes, and how few attempts'
points the last point's age reads."""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import orchestrator.store.ops as store_ops
from orchestrator.daemon.metrics import (
    STORE_WRITES,
    DaemonReading,
    PointAge,
    StoreReading,
    families,
    last_point_at,
)
from orchestrator.store import SWEEP_STATES, Attempt


class _Families:
    def __init__(self, store: StoreReading, daemon: DaemonReading) -> None:
        self.store, self.daemon = store, daemon

    def collect(self) -> Any:
        return families(self.store, self.daemon)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_families_read_back_through_the_prometheus_parser() -> None:
    sweeps = dict.fromkeys(SWEEP_STATES, 0) | {"queued": 2, "running": 1, "done": 3}
    store = StoreReading(
        sweeps=sweeps,
        trials={("done", ""): 7, ("failed", "oom"): 2},
        restarts={"h200": 9},
        last_points=(PointAge("night run", 4, 12.5),),
    )
    text = generate_latest(_Families(store, DaemonReading(hosts_held=3, sweeps_active=1)))
    samples = _samples(text.decode())
    assert samples[("orchestrator_sweeps", (("state", "queued"),))] == 2
    assert samples[("orchestrator_sweeps", (("state", "cancelled"),))] == 0
    assert samples[("orchestrator_queue_depth", ())] == 2
    assert samples[("orchestrator_trials", (("cause", "oom"), ("state", "failed")))] == 2
    assert samples[("orchestrator_trials", (("cause", ""), ("state", "done")))] == 7
    assert samples[("orchestrator_restarts_total", (("host_type", "h200"),))] == 9
    age = ("orchestrator_sweep_last_point_age_seconds", (("id", "4"), ("sweep", "night run")))
    assert samples[age] == 12.5
    assert samples[("orchestrator_hosts_held", ())] == 3
    assert samples[("orchestrator_sweeps_active", ())] == 1
    assert ("orchestrator_build_info", (("version", _version()),)) in samples


def _version() -> str:
    from orchestrator import __version__

    return __version__


def _writes_directly(function: Any) -> bool:
    return "write_transaction(" in inspect.getsource(function)


def _called_names(function: Any) -> set[str]:
    tree = ast.parse(inspect.getsource(function))
    return {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }


def test_the_writes_timed_are_the_store_operations_that_open_a_write_transaction() -> None:
    """A store operation writes when it, or a helper of ``ops`` it calls, opens
    ``write_transaction``: a new write the list misses would go untimed."""
    functions = {
        name: fn
        for name, fn in inspect.getmembers(store_ops, inspect.isfunction)
        if fn.__module__ == store_ops.__name__
    }
    helpers = {n for n, fn in functions.items() if n.startswith("_") and _writes_directly(fn)}
    writes = {
        name
        for name, fn in functions.items()
        if not name.startswith("_")
        and name != "write_transaction"
        and (_writes_directly(fn) or _called_names(fn) & helpers)
    }
    assert writes == STORE_WRITES


@dataclass
class _Points:
    committed: dict[int, list[float]]
    read: list[int] = field(default_factory=list)

    async def points(self, *, attempt_id: int) -> list[Any]:
        self.read.append(attempt_id)
        return [_Point(at) for at in self.committed.get(attempt_id, [])]


@dataclass(frozen=True)
class _Point:
    committed_at: float


def _attempt(number: int, finished_at: float | None) -> Attempt:
    state = "running" if finished_at is None else "done"
    return Attempt(number, number, 1, state, None, None, 0.0, finished_at, None, 0)


async def test_the_last_point_is_found_without_reading_attempts_that_ended_before_it() -> None:
    store = _Points({1: [10.0, 20.0], 2: [30.0, 55.0], 3: [60.0], 4: []})
    attempts = [_attempt(1, 25.0), _attempt(2, 58.0), _attempt(3, 61.0), _attempt(4, None)]
    assert await last_point_at(store, attempts) == 60.0  # type: ignore[arg-type]
    assert store.read == [4, 3]  # attempt 2 ended at 58, before the point found at 60
