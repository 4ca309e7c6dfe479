"""Several daemons, one queue: which controller runs which sweep of a shared store.

Over a SQLite file there is one daemon (its state directory's lock says so) and every sweep in
the store is its own to run: :class:`Solo` grants every claim and has nothing to renew. Over a
PostgreSQL store several daemons, on several machines, share one queue. Each is a
:class:`Team` member: before it runs a sweep it claims it in the store (one row per sweep,
written under the sweep row's lock, :mod:`orchestrator.store.claims`), and its heartbeat
renews every claim it holds each quarter of the claim's expiry. A sweep whose claim is
released (it ended, or its daemon stopped) is free at once; one whose claim expired (its
daemon died, or lost the store) is taken over by the next daemon that looks, which continues it
as a restart does: committed points kept, each host's lease taken over as the lease allows.

A member that cannot renew stops its sweeps (at their next safe step, hosts not restored: the
next runner continues them) once three quarters of the expiry have passed without a renewal,
by its own monotonic clock, before any other daemon may take them; one that finds a claim gone
at a renewal (taken over) stops that sweep the same way. Hosts stay arbitrated by their leases
(:mod:`orchestrator.host.lease`): a claim decides who runs a sweep, never who drives a host.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Collection
from typing import Protocol

from orchestrator.log import get_logger
from orchestrator.store import DaemonIdentity, Store, StoreError, SweepClaim

DEFAULT_CLAIM_EXPIRY_S = 60.0
"""A sweep's claim lasts this long unrenewed (renewed every quarter of it): a dead daemon's
sweeps wait at most this long for another daemon."""
CLAIMED_EVENT = "sweep.claimed"

StopSweep = Callable[[int, str, str], None]
"""Stop a running sweep: its id, the stop's reason (``shutdown``: suspended for the next
runner; ``cancel``) and why, in words."""


def daemon_identity(name: str | None = None, *, kind: str = "daemon") -> DaemonIdentity:
    """This process as a team member: a new id, and ``NAME (daemon, pid N)`` (the machine's
    name unless the config names it)."""
    who = name or socket.gethostname()
    return DaemonIdentity(uuid.uuid4().hex, f"{who} ({kind}, pid {os.getpid()})")


class Membership(Protocol):
    """What a scheduler asks of the queue it shares (or does not)."""

    @property
    def identity(self) -> DaemonIdentity | None: ...

    async def claim(self, sweep_id: int) -> bool:
        """Whether this controller may run the sweep now (claimed for it)."""

    async def release(self, sweep_id: int) -> None: ...

    async def elsewhere(self) -> dict[int, SweepClaim]:
        """The sweeps other controllers run now, by id, with their claims."""

    def hold(self, sweep_id: int) -> contextlib.AbstractAsyncContextManager[SweepClaim | None]:
        """While a person's command changes a sweep (cancel, replace): the sweep held, so
        no controller starts it meanwhile; yields the claim of the controller that runs it
        now, if another does (the command then asks it, :meth:`request_stop`)."""

    async def request_stop(self, sweep_id: int, reason: str) -> bool: ...

    async def keep(self, running: Callable[[], Collection[int]], stop: StopSweep) -> None:
        """Renew the claims until cancelled, stopping the sweeps whose claim is lost."""


class Solo:
    """The only daemon of its store: every sweep is its own."""

    identity: DaemonIdentity | None = None

    async def claim(self, sweep_id: int) -> bool:
        return True

    async def release(self, sweep_id: int) -> None:
        return None

    async def elsewhere(self) -> dict[int, SweepClaim]:
        return {}

    @contextlib.asynccontextmanager
    async def hold(self, sweep_id: int) -> AsyncIterator[SweepClaim | None]:
        yield None

    async def request_stop(self, sweep_id: int, reason: str) -> bool:
        return False

    async def keep(self, running: Callable[[], Collection[int]], stop: StopSweep) -> None:
        await asyncio.Event().wait()  # nothing to renew


class Team:
    """One member of a team of controllers over a shared store."""

    def __init__(
        self,
        store: Store,
        identity: DaemonIdentity,
        *,
        expiry_s: float = DEFAULT_CLAIM_EXPIRY_S,
        renew_every_s: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._identity = identity
        self.expiry_s = expiry_s
        self.renew_every_s = expiry_s / 4 if renew_every_s is None else renew_every_s
        self._monotonic = monotonic
        self._wall = wall
        self._log = get_logger(component="team", daemon=identity.name)

    @property
    def identity(self) -> DaemonIdentity:
        return self._identity

    async def claim(self, sweep_id: int, *, wait: bool = False, interrupted: bool = False) -> bool:
        """``wait`` for a claim being written by another member; ``interrupted``: a foreground
        run continues an interrupted sweep too (:func:`orchestrator.store.claims.claim_sweep`)."""
        outcome = await self.store.claim_sweep(
            sweep_id, self._identity, expiry_s=self.expiry_s, wait=wait, interrupted=interrupted
        )
        claim = outcome.claim
        if claim is None:
            return False
        if claim.renewed_at == claim.claimed_at:  # a new claim, not one of ours renewed
            await self.store.add_event(
                sweep_id,
                CLAIMED_EVENT,
                fields={
                    "daemon": claim.daemon,
                    "daemon_id": claim.daemon_id,
                    "generation": claim.generation,
                    "took_over_from": claim.took_over_from,
                },
            )
            if claim.took_over_from is not None:
                self._log.warning(
                    "sweep.taken_over",
                    sweep_id=sweep_id,
                    generation=claim.generation,
                    took_over_from=claim.took_over_from,
                )
        return True

    async def release(self, sweep_id: int) -> None:
        try:
            await self.store.release_claim(sweep_id, self._identity.id)
        except StoreError as exc:  # it expires on its own
            self._log.warning("claim.release_failed", sweep_id=sweep_id, error=str(exc))

    async def elsewhere(self) -> dict[int, SweepClaim]:
        now = self._wall()
        return {
            claim.sweep_id: claim
            for claim in await self.store.sweep_claims()
            if claim.daemon_id != self._identity.id and claim.live(now)
        }

    @contextlib.asynccontextmanager
    async def hold(self, sweep_id: int) -> AsyncIterator[SweepClaim | None]:
        if await self.claim(sweep_id, wait=True):
            try:
                yield None
            finally:
                await self.release(sweep_id)
            return
        yield (await self.elsewhere()).get(sweep_id)

    async def request_stop(self, sweep_id: int, reason: str) -> bool:
        asked = await self.store.request_stop(sweep_id, reason)
        if asked is not None:
            self._log.info("sweep.stop_asked", sweep_id=sweep_id, of=asked.daemon, reason=reason)
        return asked is not None

    async def keep(self, running: Callable[[], Collection[int]], stop: StopSweep) -> None:
        renewed = self._monotonic()
        stale = False
        while True:
            await asyncio.sleep(self.renew_every_s)
            began = self._monotonic()
            # Only what ran before the renewal began: a sweep claimed meanwhile is not in it.
            before = set(running())
            try:
                mine = {
                    claim.sweep_id: claim
                    for claim in await self.store.renew_claims(
                        self._identity.id, expiry_s=self.expiry_s
                    )
                }
            except StoreError as exc:
                self._log.warning("claims.renew_failed", error=str(exc))
                if not stale and self._monotonic() - renewed >= self.expiry_s * 0.75:
                    stale = True  # before another daemon may take them: stop them all
                    for sweep_id in before:
                        stop(sweep_id, "shutdown", "its claim could not be renewed")
                continue
            renewed, stale = began, False
            for sweep_id in before & set(running()):
                claim = mine.get(sweep_id)
                if claim is None:
                    stop(sweep_id, "shutdown", "another daemon took its claim over")
                elif claim.stop_requested is not None:
                    stop(sweep_id, claim.stop_requested, "another daemon asked")
