"""A host's lease: which controller may change it now, written on the host itself.

A GPU fleet is shared: a daemon, a foreground ``run`` and another operator's store can all name
the same host. Whichever of them a sweep runs from, the host says who holds it, so ownership
lives in a directory on the host (:data:`LEASE_DIR`), not in any one store:

``/run/orchestrator/lease/gen-0000000007/holder.json``

Each take of the lease creates the next generation's directory with ``mkdir``, which is atomic
on every POSIX file system and fails when the directory exists: of two controllers racing for
generation N+1, exactly one creates it (the exclusive lock). The winner then writes
``holder.json`` (atomically, a temporary file renamed over it) naming itself, the time it was
renewed and when it expires, and removes older generations. The generation number is the
**fencing token**: it increases on every take, so a holder that stalled past its expiry and
comes back finds a newer generation than its own and changes nothing (:meth:`HostLease.check`).

Why ``mkdir`` and not ``flock``: the critical section (read the lease, decide, write) spans
several commands over SSH, and a ``flock`` is released when the one command holding it ends;
``mkdir`` needs nothing but the commands every host (and the simulated one) answers. Why
``/run``: it is the host's runtime state (a tmpfs), so the heartbeat's writes every few seconds
wear no disk and never touch ``/etc`` (config management, etckeeper), systemd never reads
``/run/orchestrator`` as unit configuration, and a reboot, which ends every server process the
lease guarded, clears it; a holder from before the reboot then finds its generation gone.

Expiry is judged on the controllers' wall clocks (the holder writes ``expires_at``; a
contender compares it with its own time), so controllers' clocks must agree within the
expiry's quarter (NTP). The holder itself never relies on the wall clock: it stops changing
the host a quarter of the expiry before the lease could lapse, by its monotonic clock.

Every controller meets the lease the same way (:func:`take_or_wait`, :func:`take_at_once`,
at the end of this module); while it holds the lease, it changes the host only through the
handle the lease fences (:func:`orchestrator.host.fence.held`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from orchestrator.host.errors import HostError
from orchestrator.host.handle import HostHandle
from orchestrator.host.transport import Transport
from orchestrator.log import get_logger
from orchestrator.types import DEFAULT_LEASE_EXPIRY_S, FailureCause

LEASE_DIR = "/run/orchestrator/lease"
HOLDER_FILE = "holder.json"
DEFAULT_EXPIRY_S = DEFAULT_LEASE_EXPIRY_S
_GEN_PREFIX = "gen-"

LeaseState = Literal["free", "held", "expired", "released", "dead", "taking"]
"""What a contender finds: no lease, a live holder, one whose expiry passed, one given back,
one whose holder process is gone (on this machine), or a generation being taken right now."""


def _gen_name(token: int) -> str:
    return f"{_GEN_PREFIX}{token:010d}"


def _process_start(pid: int) -> int | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat field 22): with the
    pid it names one process, whatever reuses the number later."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds (or wants) a host: the controller machine and process, the store it records
    into (or the daemon's state directory), and the sweep."""

    controller: str
    pid: int
    pid_start: int | None
    store: str
    kind: str
    """``daemon``, ``run`` (a foreground sweep), ``restore`` or ``adopt``."""
    sweep: str
    sweep_id: int
    holder_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @classmethod
    def here(cls, *, store: str, kind: str, sweep: str, sweep_id: int) -> Holder:
        """This process, on this machine."""
        pid = os.getpid()
        return cls(socket.gethostname(), pid, _process_start(pid), store, kind, sweep, sweep_id)

    def describe(self) -> str:
        """``sweep 'night' (daemon on ctl-2, pid 4411)``."""
        return f"sweep '{self.sweep}' ({self.kind} on {self.controller}, pid {self.pid})"

    def same_owner(self, other: Holder) -> bool:
        """The same process working for the same sweep of the same store (an earlier take of
        its own that was never given back: a host lost and later restored)."""
        return (self.controller, self.pid, self.pid_start, self.store, self.sweep_id) == (
            other.controller,
            other.pid,
            other.pid_start,
            other.store,
            other.sweep_id,
        )

    def process_gone(self) -> bool:
        """The holder ran on this machine and its process is gone: it is dead, whatever its
        expiry says (a run killed and started again need not wait out its own lease)."""
        if self.controller != socket.gethostname():
            return False
        start = _process_start(self.pid)
        return start is None or (self.pid_start is not None and start != self.pid_start)

    def to_json(self) -> dict[str, Any]:
        return {
            "controller": self.controller,
            "pid": self.pid,
            "pid_start": self.pid_start,
            "store": self.store,
            "kind": self.kind,
            "sweep": self.sweep,
            "sweep_id": self.sweep_id,
            "holder_id": self.holder_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Holder:
        return cls(
            controller=str(data["controller"]),
            pid=int(data["pid"]),
            pid_start=None if data.get("pid_start") is None else int(data["pid_start"]),
            store=str(data["store"]),
            kind=str(data["kind"]),
            sweep=str(data["sweep"]),
            sweep_id=int(data["sweep_id"]),
            holder_id=str(data["holder_id"]),
        )


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """What one generation's ``holder.json`` says."""

    token: int
    holder: Holder
    taken_at: float
    renewed_at: float
    expires_at: float
    released_at: float | None = None
    took_over_from: Holder | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "holder": self.holder.to_json(),
            "taken_at": self.taken_at,
            "renewed_at": self.renewed_at,
            "expires_at": self.expires_at,
            "released_at": self.released_at,
            "took_over_from": None
            if self.took_over_from is None
            else self.took_over_from.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LeaseRecord:
        before = data.get("took_over_from")
        return cls(
            token=int(data["token"]),
            holder=Holder.from_json(data["holder"]),
            taken_at=float(data["taken_at"]),
            renewed_at=float(data["renewed_at"]),
            expires_at=float(data["expires_at"]),
            released_at=None if data.get("released_at") is None else float(data["released_at"]),
            took_over_from=None if before is None else Holder.from_json(before),
        )

    def state(self, now: float) -> LeaseState:
        if self.released_at is not None:
            return "released"
        if self.holder.process_gone():
            return "dead"
        return "expired" if now >= self.expires_at else "held"


def _clock(stamp: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(stamp))


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The lease directory as read: the newest generation and what its holder file says
    (None while it is being taken, or never was)."""

    token: int
    record: LeaseRecord | None

    def state(self, now: float) -> LeaseState:
        if self.token == 0:
            return "free"
        return "taking" if self.record is None else self.record.state(now)

    def describe(self, host: str, now: float) -> str:
        """In plain words, for a person: who holds ``host`` and until when."""
        state, record = self.state(now), self.record
        if record is None:
            return f"{host} is free" if state == "free" else f"{host} is being taken right now"
        who = record.holder.describe()
        if state == "released":
            return f"{host} is free (last held by {who})"
        if state == "dead":
            return f"{host} was held by {who}, whose process is gone"
        ago = max(0.0, now - record.renewed_at)
        if state == "expired":
            return (
                f"{host} was held by {who} since {_clock(record.taken_at)}; its lease expired "
                f"at {_clock(record.expires_at)} (renewed {ago:.0f} s ago)"
            )
        return (
            f"{host} is held by {who} since {_clock(record.taken_at)}, lease renewed "
            f"{ago:.0f} s ago, expires at {_clock(record.expires_at)}"
        )

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "token": self.token,
            "state": self.state(now),
            "lease": None if self.record is None else self.record.to_json(),
        }


class LeaseLost(HostError):
    """A change to the host was refused: the lease is no longer the holder's (a newer
    generation exists, the lease directory is gone, or the holder's own expiry passed)."""

    def __init__(
        self,
        host: str,
        token: int,
        why: str,
        *,
        found: LeaseView | None = None,
        seen: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{host}: lease {token} lost: {why}")
        self.cause: FailureCause = "lease-lost"
        self.host, self.token, self.why, self.found = host, token, why, found
        self.seen = seen
        """The failure the holder saw before it found the lease lost, with its evidence."""

    def behind(self, seen: dict[str, Any]) -> LeaseLost:
        """This loss as the cause of a failure the holder saw (kept in the evidence)."""
        return LeaseLost(self.host, self.token, self.why, found=self.found, seen=seen)

    @property
    def evidence(self) -> dict[str, Any]:
        now = time.time()
        return {
            "token": self.token,
            "why": self.why,
            "found": None if self.found is None else self.found.to_json(now),
            **({} if self.seen is None else {"seen": self.seen}),
        }


class HostBusy(Exception):
    """A live lease of someone else holds the host; the message names the holder."""

    def __init__(self, host: str, view: LeaseView, now: float) -> None:
        super().__init__(view.describe(host, now))
        self.host, self.view = host, view


@dataclass(frozen=True, slots=True)
class LeasePlace:
    """Where a host's lease lives and how it is reached: the host's transport (the same SSH
    connection as everything else), the directory, and each command's bound."""

    transport: Transport
    directory: str = LEASE_DIR
    timeout: float = 30.0

    @property
    def host(self) -> str:
        return self.transport.name

    def holder_path(self, token: int) -> str:
        return f"{self.directory}/{_gen_name(token)}/{HOLDER_FILE}"

    async def generations(self) -> list[int]:
        listing = await self.transport.run(
            ["ls", "-1", "--", self.directory], timeout=self.timeout, privileged=True
        )
        if not listing.ok:
            return []
        names = listing.stdout_text().split()
        return sorted(
            int(n[len(_GEN_PREFIX) :])
            for n in names
            if n.startswith(_GEN_PREFIX) and n[len(_GEN_PREFIX) :].isdigit()
        )

    async def read(self) -> LeaseView:
        """The newest generation and its holder file."""
        generations = await self.generations()
        if not generations:
            return LeaseView(0, None)
        token = generations[-1]
        try:
            data = await self.transport.read_file(self.holder_path(token), timeout=self.timeout)
            record = LeaseRecord.from_json(json.loads(data))
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            record = None  # being written, or torn: the generation is someone's all the same
        return LeaseView(token, record)

    async def write(self, record: LeaseRecord) -> None:
        data = json.dumps(record.to_json(), sort_keys=True).encode()
        await self.transport.write_file_atomic(
            self.holder_path(record.token), data, mode=0o644, timeout=self.timeout
        )

    async def create_generation(self, token: int) -> bool:
        """``mkdir`` of generation ``token``: True for the one controller that created it."""
        await self.transport.run(
            ["mkdir", "-p", "--", self.directory], timeout=self.timeout, privileged=True
        )
        made = await self.transport.run(
            ["mkdir", "--", f"{self.directory}/{_gen_name(token)}"],
            timeout=self.timeout,
            privileged=True,
            idempotent=False,  # a second mkdir after a reconnect would read as a lost race
        )
        return made.ok

    async def remove_generation(self, token: int) -> None:
        await self.transport.run(
            ["rm", "-rf", "--", f"{self.directory}/{_gen_name(token)}"],
            timeout=self.timeout,
            privileged=True,
        )

    async def remove_older(self, token: int) -> None:
        for old in await self.generations():
            if old < token:
                await self.remove_generation(old)


@dataclass
class HostLease:
    """A lease this process holds: renewed by :meth:`heartbeat`, checked before every change
    (:meth:`check`, the fence), given back by :meth:`release`."""

    place: LeasePlace
    record: LeaseRecord
    expiry_s: float
    valid_until: float
    """Monotonic time after which this holder changes nothing (a quarter of the expiry before
    the lease could lapse for a contender)."""
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    lost: LeaseLost | None = None
    fenced: list[str] = field(default_factory=list)
    """The changes refused since the lease was lost (what the holder tried, in order)."""

    @property
    def token(self) -> int:
        return self.record.token

    @property
    def host(self) -> str:
        return self.place.host

    async def check(self, change: str) -> None:
        """The fence, before every change to the host: raises :class:`LeaseLost` unless the
        lease is still this holder's (its own expiry not passed, and no newer generation, nor
        a vanished one, on the host)."""
        if self.lost is None:
            if self.monotonic() >= self.valid_until:
                self.lost = LeaseLost(
                    self.host, self.token, "its expiry passed (the holder stalled)"
                )
            else:
                await self.taken_over()
        if self.lost is not None:
            self.fenced.append(change)
            get_logger(host=self.host).error(
                "lease.fenced", generation=self.token, change=change, why=self.lost.why
            )
            raise self.lost

    async def taken_over(self) -> LeaseLost | None:
        """What the host says, changing nothing: the loss when another generation or holder is
        there now (why a server this holder started went away under it), else None."""
        if self.lost is None:
            view = await self.place.read()
            mine = view.record is not None and view.record.holder.holder_id == (
                self.record.holder.holder_id
            )
            if view.token != self.token or not mine:
                why = "the host holds no lease" if view.token == 0 else "taken over"
                if view.token == self.token:
                    why = "its holder file names someone else"
                self.lost = LeaseLost(self.host, self.token, why, found=view)
        return self.lost

    async def renew(self) -> None:
        """Push the expiry on (after the fence's check); a lost lease stays lost."""
        started = self.monotonic()
        await self.check("renew")
        now = self.wall()
        record = replace(self.record, renewed_at=now, expires_at=now + self.expiry_s)
        await self.place.write(record)
        self.record = record
        self.valid_until = started + self.expiry_s * 0.75

    async def release(self) -> None:
        """Give the lease back (after the restore): the next contender takes it at once."""
        if self.lost is not None:
            return
        with contextlib.suppress(LeaseLost):
            await self.check("release")
            await self.place.write(replace(self.record, released_at=self.wall()))
            get_logger(host=self.host).info("lease.released", generation=self.token)

    @property
    def heartbeat_s(self) -> float:
        return self.expiry_s / 4

    async def heartbeat(self) -> None:
        """Renew every quarter of the expiry until cancelled or lost; a renewal that fails on
        the way (SSH) is tried again at the next beat, while the lease is still valid."""
        log = get_logger(host=self.host)
        while self.lost is None:
            await asyncio.sleep(self.heartbeat_s)
            try:
                await self.renew()
            except LeaseLost:
                return
            except HostError as exc:
                log.warning("lease.renew_failed", generation=self.token, error=str(exc))

    @contextlib.asynccontextmanager
    async def renewed(self) -> AsyncIterator[HostLease]:
        """The heartbeat runs while the context is open."""
        task = asyncio.create_task(self.heartbeat(), name=f"lease:{self.host}")
        try:
            yield self
        finally:
            # Cancelled until it ends: a cancellation swallowed on the way (Python 3.11's
            # wait_for could) must not leave the caller waiting on a heartbeat forever.
            while not task.done():
                task.cancel()
                await asyncio.wait({task}, timeout=1.0)
            if not task.cancelled():
                task.exception()  # retrieved: the heartbeat ends only by LeaseLost or cancel


@dataclass(frozen=True, slots=True)
class Taken:
    """The outcome of one try to take a lease: the lease, or the view that refused it; and the
    earlier holder whose expired (or dead) lease this take replaced."""

    lease: HostLease | None
    view: LeaseView
    took_over: LeaseRecord | None = None


async def try_take(
    place: LeasePlace,
    holder: Holder,
    *,
    expiry_s: float = DEFAULT_EXPIRY_S,
    monotonic: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    taking_seen: dict[int, float] | None = None,
) -> Taken:
    """Take ``place``'s lease if no live holder has it: free, released, expired, or its holder
    process gone. ``taking_seen``: when a contender first saw each generation without a holder
    file (one that stays so past the expiry was abandoned mid-take)."""
    view = await place.read()
    now, started = wall(), monotonic()
    state = view.state(now)
    if state == "taking":
        seen = (taking_seen if taking_seen is not None else {}).setdefault(view.token, started)
        if started - seen < expiry_s:
            return Taken(None, view)
    elif state == "held" and not (view.record and view.record.holder.same_owner(holder)):
        return Taken(None, view)
    token = view.token + 1
    if not await place.create_generation(token):
        return Taken(None, await place.read())  # another controller won generation ``token``
    before = view.record if state in ("expired", "dead", "held") else None
    record = LeaseRecord(
        token=token,
        holder=holder,
        taken_at=now,
        renewed_at=now,
        expires_at=now + expiry_s,
        took_over_from=None if before is None else before.holder,
    )
    try:
        await place.write(record)
    except HostError:
        # Our own generation, never named: others would wait out an expiry for it.
        with contextlib.suppress(HostError):
            await place.remove_generation(token)
        raise
    await place.remove_older(token)
    lease = HostLease(place, record, expiry_s, started + expiry_s * 0.75, monotonic, wall)
    get_logger(host=place.host).info(
        "lease.taken",
        generation=token,
        sweep=holder.sweep,
        took_over_from=None if before is None else before.holder.describe(),
    )
    return Taken(lease, view, before)



# --------------------------------------------------------------------------------------------
# Meeting the lease: the policy every controller applies to it
# --------------------------------------------------------------------------------------------
# The runner (foreground ``run`` and the daemon's sweeps), the restore (by hand or at the
# daemon's start) and adopt meet a host's lease the same way: take it, or, while someone
# else's live lease holds it, wait (``policy.hosts_busy: wait``, until the sweep stops: its
# ``finish_by`` or a cancel) or refuse at once (``set-aside``, and a restore or adopt by hand,
# which a person watches). After a take-over the dead holder's leftovers are cleared first
# (``lifecycle.clear_stale``), recorded by :func:`take_over_fields`.


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
    directory: str = LEASE_DIR,
) -> Taken:
    """The host's lease for ``holder``; while someone else's live lease holds it, ``wait``
    polls (``waiting`` is told who holds it, once per holder) until ``stop`` is set, and
    ``set-aside`` raises :class:`HostBusy` at once (but for the lease of the daemon this one
    took the sweep over from: :func:`earlier_run_of`). Raises :class:`HostBusy` when the wait
    ended by ``stop``."""
    place = LeasePlace(handle.transport, directory=directory, timeout=timeout)
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
        refuse = busy == "set-aside" and not earlier_run_of(taken.view, holder)
        if refuse or (stop is not None and stop.is_set()):
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


def earlier_run_of(view: LeaseView, holder: Holder) -> bool:
    """The live lease is the same sweep's, of the same store, held by another daemon: the
    daemon that ran the sweep before this one took its claim over (it died, or lost the store,
    and stops at its next safe step). Its lease is waited out, whatever ``hosts_busy`` says:
    setting the host aside would leave the sweep's own trials there unrun."""
    record = view.record
    if record is None or holder.kind != "daemon" or record.holder.kind != "daemon":
        return False
    before = record.holder
    return (before.store, before.sweep_id) == (holder.store, holder.sweep_id)


async def take_at_once(
    handle: HostHandle, holder: Holder, *, expiry_s: float, timeout: float
) -> Taken:
    """The lease for a person's command on a sweep's host (a restore, an adopt): taken now or
    refused with :class:`HostBusy` naming the holder, never waited for. ``expiry_s`` and
    ``timeout`` are the sweep's ``policy.lease_expiry`` and ``timeouts.connect``."""
    taken = await take_or_wait(handle, holder, expiry_s=expiry_s, timeout=timeout)
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
    "DEFAULT_EXPIRY_S",
    "LEASE_DIR",
    "Controller",
    "ControllerKind",
    "Holder",
    "HostBusy",
    "HostLease",
    "HostsBusy",
    "LeaseLost",
    "LeasePlace",
    "LeaseRecord",
    "LeaseState",
    "LeaseView",
    "Taken",
    "earlier_run_of",
    "take_at_once",
    "take_or_wait",
    "take_over_fields",
    "took_over_someone_else",
    "try_take",
]
