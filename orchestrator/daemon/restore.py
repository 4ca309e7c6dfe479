"""Putting hosts back as their sweeps found them: by hand, after a crash, after a runner that
failed outright. One function restores one backed-up host (:func:`restore_host`); the
:class:`Restorer` decides which backups to restore and holds their hosts meanwhile.

The daemon uses it through its API; ``orchestrator restore --db PATH`` uses it on a store file
with no daemon running (then nothing else holds a host, and no sweep is active).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Container, Coroutine
from typing import Any, Literal

import structlog

from orchestrator.api import RestoreOutcome
from orchestrator.daemon.claims import HostClaims
from orchestrator.daemon.order import ParsedSweeps
from orchestrator.host.connect import open_host
from orchestrator.host.fence import held
from orchestrator.host.handle import HostHandle
from orchestrator.host.lease import (
    Controller,
    HostBusy,
    Taken,
    take_at_once,
    take_over_fields,
)
from orchestrator.host.systemd import ForeignChange
from orchestrator.lifecycle import restore_retrying
from orchestrator.log import get_logger
from orchestrator.sessions import backup_to_snapshot, host_session
from orchestrator.store import Store, SweepRecord, UnitBackup
from orchestrator.sweepfile import Sweep, parse_sweep

RestoreWhy = Literal["operator", "recovery", "runner-failed"]
"""Who asked: ``restore`` by hand, the daemon's start (a sweep that will not resume), or the
daemon after a runner that failed outright."""

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


class UnknownHost(ValueError):
    """No sweep in the store names this host (a typo, or another store)."""

    def __init__(self, host: str) -> None:
        super().__init__(f"unknown host {host!r}: no sweep in this store names it")
        self.host = host


async def take_for_command(
    handle: HostHandle, controller: Controller, sweep: Sweep, record: SweepRecord
) -> Taken:
    """The host's lease for a person's command on ``record``'s sweep (a restore, an adopt):
    taken now or refused (:func:`take_at_once`), with the sweep's lease expiry and connect
    timeout."""
    return await take_at_once(
        handle,
        controller.holder(sweep.name, record.id),
        expiry_s=sweep.policy.lease_expiry,
        timeout=sweep.timeouts.connect,
    )


async def restore_from_backup(
    store: Store,
    record: SweepRecord,
    backup: UnitBackup,
    *,
    controller: Controller | None = None,
    force: bool = False,
) -> list[ForeignChange]:
    """Put ``backup``'s host back as the sweep found it, then mark it restored.

    The sweep's own file says how to reach the host and which restore policy applies; the
    unit's original files come from the store, never from the host's current (changed) state.
    The host's lease is taken first (refused, :class:`HostBusy`, while another controller's
    live lease holds it) and given back after. Returns other people's files that changed
    meanwhile (reported, never overwritten; another sweep's trial drop-in is left alone
    unless ``force``).
    """
    sweep = parse_sweep(record.yaml_text, f"sweep {record.name} (id {record.id})")
    host = next((h for h in sweep.hosts if h.name == backup.host), None)
    if host is None:
        raise ValueError(f"sweep {record.name} has no host {backup.host!r}")
    controller = controller or Controller("restore", str(store.path))
    handle = open_host(host, connect_timeout=sweep.timeouts.connect)

    async def events(kind: str, /, **fields: Any) -> None:
        await store.add_event(record.id, kind, host=host.name, fields=fields)

    try:
        taken = await take_for_command(handle, controller, sweep, record)
        if taken.took_over is not None:
            await events("lease.taken_over", **take_over_fields(taken))
        lease = taken.lease
        assert lease is not None
        async with held(lease, handle) as fenced_handle:
            session = host_session(sweep, host, fenced_handle, unit=backup.unit, events=events)
            session.found = backup_to_snapshot(backup)
            # Undoing an adopt puts the unit back running as adopt found it.
            policy = "as-found" if backup.adopted else sweep.policy.restore
            foreign = await restore_retrying(session, policy, owner=sweep.name, force=force)
        await lease.release()
    finally:
        await handle.close()
    await store.mark_restored(record.id, backup.host)
    return foreign


async def restore_host(
    store: Store,
    record: SweepRecord,
    backup: UnitBackup,
    *,
    why: RestoreWhy,
    controller: Controller | None = None,
    force: bool = False,
) -> RestoreOutcome:
    """Restore one backed-up host and say how it went; a failure is logged and returned, never
    raised (the host stays pending, so a later restore tries again)."""
    log = get_logger(why=why)
    # The lifecycle's and the transport's events during the restore carry the same context.
    with structlog.contextvars.bound_contextvars(
        sweep=record.name, sweep_id=record.id, host=backup.host
    ):
        log.info("host.restoring")
        try:
            foreign = await restore_from_backup(
                store, record, backup, controller=controller, force=force
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Someone else's live lease is no error of the restore: its words name the holder.
            error = str(exc) if isinstance(exc, HostBusy) else f"{type(exc).__name__}: {exc}"
            log.error("host.restore_failed", error=error)
            return RestoreOutcome(backup.host, record.name, record.id, ok=False, error=error)
        log.info("host.restored", foreign_changes=[f.to_json() for f in foreign])
    return RestoreOutcome(
        backup.host, record.name, record.id, ok=True, foreign_changes=tuple(foreign)
    )


class Restorer:
    """Chooses the backups to restore and holds each host's keys while it is restored."""

    def __init__(
        self,
        store: Store,
        sweeps: ParsedSweeps,
        claims: HostClaims,
        *,
        running: Container[int] = (),
        spawn: Spawn | None = None,
        controller: Controller | None = None,
    ) -> None:
        self.store = store
        self.sweeps = sweeps
        self.claims = claims
        self.controller = controller or Controller("restore", str(store.path))
        """Who restores, as each host's lease names it (the daemon, or ``restore --db``)."""
        self._running = running
        """Ids of the sweeps running now (their hosts are theirs until they end)."""
        self._spawn = spawn

    async def _held(
        self,
        record: SweepRecord,
        backup: UnitBackup,
        keys: frozenset[str],
        why: RestoreWhy,
        force: bool = False,
    ) -> RestoreOutcome:
        try:
            return await restore_host(
                self.store, record, backup, why=why, controller=self.controller, force=force
            )
        finally:
            self.claims.release(keys)

    async def recover(self) -> None:
        """Restore, in the background, hosts left changed by sweeps that will not resume
        (before any sweep may use them: their keys are held from now on)."""
        resuming = {r.id for r in await self.store.list_sweeps(["running", "queued"])}
        for backup in await self.store.pending_restores():
            if backup.sweep_id in resuming:
                continue  # the resumed runner restores its hosts at its end
            record = await self.store.get_sweep(backup.sweep_id)
            keys = self.sweeps.host_keys(record, backup.host)
            if not self.claims.is_free(keys):
                continue
            self.claims.claim(keys)
            job = self._held(record, backup, keys, "recovery")
            if self._spawn is None:
                await job
            else:
                self._spawn(job, f"restore {backup.host}")

    async def after_runner_failed(self, record: SweepRecord) -> None:
        """Every host a failed runner changed goes back (its keys are still held by the sweep,
        so nothing else starts there meanwhile)."""
        for backup in await self.store.pending_restores(sweep_id=record.id):
            await restore_host(
                self.store, record, backup, why="runner-failed", controller=self.controller
            )

    async def known_host(self, host: str) -> bool:
        """Whether any sweep in the store names ``host`` (in its file or its host list)."""
        for record in await self.store.list_sweeps(include_replaced=True):
            if self.sweeps.host(record, host) is not None:
                return True
            if any(h.name == host for h in await self.store.hosts(record.id)):
                return True
        return False

    async def restore_hosts(self, host: str | None, *, force: bool = False) -> list[RestoreOutcome]:
        """Restore every pending backup of ``host`` (or of every host), now, in parallel;
        ``force`` also removes another sweep's trial drop-in found in our drop-in's place.

        Raises :class:`UnknownHost` when no sweep names ``host``: "nothing to restore" would
        hide a typo.
        """
        pending = await self.store.pending_restores(host=host)
        if host is not None and not pending and not await self.known_host(host):
            raise UnknownHost(host)
        seen: set[tuple[int, str]] = set()
        jobs = []
        skipped = []
        for backup in pending:
            if (backup.sweep_id, backup.host) in seen:
                continue
            seen.add((backup.sweep_id, backup.host))
            record = await self.store.get_sweep(backup.sweep_id)
            keys = self.sweeps.host_keys(record, backup.host)
            refusal = (
                "its sweep is running: cancel it to restore its hosts"
                if record.id in self._running
                else None
                if self.claims.is_free(keys)
                else "the host is busy with another sweep"
            )
            if refusal is not None:
                skipped.append(
                    RestoreOutcome(backup.host, record.name, record.id, ok=False, error=refusal)
                )
                continue
            self.claims.claim(keys)
            jobs.append(self._held(record, backup, keys, "operator", force))
        restored = list(await asyncio.gather(*jobs))
        return restored + skipped


__all__ = [
    "RestoreOutcome",
    "RestoreWhy",
    "Restorer",
    "UnknownHost",
    "restore_from_backup",
    "restore_host",
]
