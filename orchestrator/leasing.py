"""Meeting a host's lease: take it, wait for it, or set the host aside; and after a take-over,
the dead holder's leftovers cleared before anything else.

The lease itself is the host's (:mod:`orchestrator.host.lease`); this is the policy every
controller applies to it the same way: the runner (foreground ``run`` and the daemon's sweeps),
the restore (by hand or at the daemon's start) and adopt. A live lease of someone else is
waited for (``policy.hosts_busy: wait``, until the sweep stops: its ``finish_by`` or a cancel)
or refused at once (``set-aside``, and a restore or adopt by hand, which a person watches).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from orchestrator.host.fence import fenced
from orchestrator.host.handle import HostHandle
from orchestrator.host.lease import (
    DEFAULT_EXPIRY_S,
    Holder,
    HostBusy,
    HostLease,
    LeasePlace,
    Taken,
    try_take,
)
from orchestrator.log import get_logger

if TYPE_CHECKING:
    from orchestrator.sweepfile import Sweep

HostsBusy = Literal["wait", "set-aside"]
ControllerKind = Literal["daemon", "run", "restore", "adopt"]
WAIT_POLL_MAX_S = 10.0
TAKING_RETRIES = 10
TAKING_RETRY_S = 0.1


@dataclass(frozen=True, slots=True)
class Controller:
    """Who is asking, as a lease names it: a daemon (its store in its state directory), a
    foreground ``run``, a restore or an adopt by hand, and the store each records into."""

    kind: ControllerKind
    store: str

    def holder(self, sweep: str, sweep_id: int) -> Holder:
        return Holder.here(store=self.store, kind=self.kind, sweep=sweep, sweep_id=sweep_id)


async def take_or_wait(
    handle: HostHandle,
    holder: Holder,
    *,
    expiry_s: float = DEFAULT_EXPIRY_S,
    busy: HostsBusy = "set-aside",
    stop: asyncio.Event | None = None,
    waiting: Callable[[str], Awaitable[None]] | None = None,
    timeout: float = 30.0,
) -> Taken:
    """The host's lease for ``holder``; while someone else's live lease holds it, ``wait``
    polls (``waiting`` is told who holds it, once per holder) until ``stop`` is set, and
    ``set-aside`` raises :class:`HostBusy` at once. Raises :class:`HostBusy` when the wait
    ended by ``stop``."""
    place = LeasePlace(handle.transport, timeout=timeout)
    seen: dict[int, float] = {}
    told: tuple[int, bool] | None = None
    poll_s = min(max(expiry_s / 4, 0.25), WAIT_POLL_MAX_S)
    while True:
        taken = await try_take(place, holder, expiry_s=expiry_s, taking_seen=seen)
        if taken.lease is not None:
            return taken
        if taken.view.record is None:
            # Another controller is between its mkdir and its holder file (milliseconds):
            # look again before saying who holds the host.
            taken = await _once_written(place, holder, expiry_s, seen)
            if taken.lease is not None:
                return taken
        if busy == "set-aside" or (stop is not None and stop.is_set()):
            raise HostBusy(handle.name, taken.view, time.time())
        if told != (taken.view.token, taken.view.record is None) and waiting is not None:
            told = (taken.view.token, taken.view.record is None)
            await waiting(taken.view.describe(handle.name, time.time()))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(poll_s):
                if stop is None:
                    await asyncio.Event().wait()
                else:
                    await stop.wait()


async def take_at_once(
    handle: HostHandle, controller: Controller, sweep: Sweep, sweep_id: int
) -> Taken:
    """The lease for a person's command on one of ``sweep``'s hosts (a restore, an adopt):
    taken now or refused with :class:`HostBusy` naming the holder, never waited for."""
    taken = await take_or_wait(
        handle,
        controller.holder(sweep.name, sweep_id),
        expiry_s=sweep.policy.lease_expiry,
        timeout=sweep.timeouts.connect,
    )
    assert taken.lease is not None
    return taken


async def _once_written(
    place: LeasePlace, holder: Holder, expiry_s: float, seen: dict[int, float]
) -> Taken:
    """Try again while the newest generation has no holder file yet, up to a second."""
    for _ in range(TAKING_RETRIES):
        await asyncio.sleep(TAKING_RETRY_S)
        taken = await try_take(place, holder, expiry_s=expiry_s, taking_seen=seen)
        if taken.lease is not None or taken.view.record is not None:
            return taken
    return taken


def took_over_someone_else(taken: Taken, holder: Holder) -> bool:
    """The take replaced another sweep's dead or expired lease (not a run of this same sweep
    and store, whose own backup covers what it left)."""
    if taken.took_over is None:
        return False
    before = taken.took_over.holder
    return (before.store, before.sweep_id) != (holder.store, holder.sweep_id)


@contextlib.asynccontextmanager
async def held(lease: HostLease, handle: HostHandle) -> AsyncIterator[HostHandle]:
    """``handle`` fenced by ``lease``, renewed by its heartbeat while the context is open."""
    async with lease.renewed():
        yield fenced(handle, lease)


def take_over_fields(taken: Taken) -> dict[str, object]:
    """What a take-over's event records: the new token and the old holder, whole."""
    assert taken.took_over is not None and taken.lease is not None
    before = taken.took_over
    get_logger(host=taken.lease.host).warning(
        "lease.taken_over", generation=taken.lease.token, old_holder=before.holder.describe()
    )
    return {
        "token": taken.lease.token,
        "old_token": before.token,
        "old_holder": before.holder.to_json(),
        "old_renewed_at": before.renewed_at,
        "old_expires_at": before.expires_at,
        "holder_gone": before.holder.process_gone(),
    }


__all__ = [
    "Controller",
    "ControllerKind",
    "HostBusy",
    "HostsBusy",
    "held",
    "take_at_once",
    "take_or_wait",
    "take_over_fields",
    "took_over_someone_else",
]
