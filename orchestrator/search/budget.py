"""``search.max_restarts``: a hard cap on the unit starts of one host type in one sweep.

Every start counts, whatever it is for (baseline, screening, a promotion, a repeat, a retry, a
confirmation, the re-run of a trial a crash interrupted): the runner asks :meth:`take` right
before each restart and records the start as a ``restart.counted`` event first, so a resumed
run counts what the killed one spent (:meth:`RestartBudget.load`). A start the budget refuses
is not made; its attempt ends ``skipped``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from orchestrator.store import EventRecord, Store
from orchestrator.sweepfile import Sweep

RESTART_EVENT = "restart.counted"


def host_types(sweep: Sweep) -> dict[str, str]:
    """Each host's type, by host name."""
    return {host.name: host.host_type for host in sweep.hosts}


def restarts_used(events: Iterable[EventRecord], type_of: Mapping[str, str]) -> dict[str, int]:
    """Unit starts per host type, from the ``restart.counted`` events."""
    used: dict[str, int] = {}
    for event in events:
        if event.kind == RESTART_EVENT and event.host is not None and event.host in type_of:
            host_type = type_of[event.host]
            used[host_type] = used.get(host_type, 0) + 1
    return used


@dataclass
class RestartBudget:
    """What each host type may still start. ``cap`` None: no cap (a grid without one)."""

    cap: int | None
    type_of: Mapping[str, str]
    used: dict[str, int] = field(default_factory=dict)

    @classmethod
    async def load(cls, store: Store, sweep_id: int, sweep: Sweep) -> RestartBudget:
        type_of = host_types(sweep)
        events = await store.events(sweep_id, kinds=(RESTART_EVENT,))
        return cls(sweep.search.max_restarts, type_of, restarts_used(events, type_of))

    def left(self, host: str) -> int | None:
        if self.cap is None:
            return None
        return self.cap - self.used.get(self.type_of[host], 0)

    def take(self, host: str) -> bool:
        """Spend one start of ``host``'s type, or refuse when its cap is reached. No await
        between the check and the count: hosts of one type ask on one event loop."""
        left = self.left(host)
        if left is not None and left <= 0:
            return False
        host_type = self.type_of[host]
        self.used[host_type] = self.used.get(host_type, 0) + 1
        return True
