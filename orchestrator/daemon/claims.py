"""Which hosts this daemon's own work holds now: the host lease's local view.

Ownership of a host is its lease, on the host (:mod:`orchestrator.host.lease`): every sweep,
restore and adopt of this daemon takes it before its first change, as a foreground ``run`` or
another daemon does. These claims are only what this process knows of its own leases without
asking a host: the scheduler does not start a sweep whose host another of its own sweeps (or
a restore) is using, which would only wait for that lease. A host other controllers hold is
found by its lease, when the sweep tries to take it (``policy.hosts_busy``).

A host is held by its keys (:func:`orchestrator.daemon.order.host_keys`); two holders may share
a key (a restore of a host a finished sweep still names), so each key is counted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable


class HostClaims:
    """Counted claims on host keys; ``on_release`` runs whenever a claim is given back (the
    scheduler wakes: a waiting sweep may now start)."""

    def __init__(self, on_release: Callable[[], None] | None = None) -> None:
        self._held: Counter[str] = Counter()
        self.on_release = on_release

    def busy(self) -> set[str]:
        return set(self._held)

    def is_free(self, keys: Iterable[str]) -> bool:
        return not any(key in self._held for key in keys)

    def claim(self, keys: Iterable[str]) -> None:
        self._held.update(keys)

    def release(self, keys: Iterable[str]) -> None:
        self._held.subtract(keys)
        self._held = +self._held  # drop keys whose count reached zero
        if self.on_release is not None:
            self.on_release()
