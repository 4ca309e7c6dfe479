"""The daemon: takes sweeps in (spool directory and API), runs them, survives restarts.

Operators queue sweeps in the evening and read results in the morning, so the daemon must lose
nothing and leave no host broken:

- **Intake.** ``inbox/*.yaml`` (and ``*.yml``) is polled every ``inbox_poll_s``. A file is taken
  once its size and mtime are unchanged between two polls (so a file still being written is left
  alone); names starting with ``.`` and other suffixes (``x.yaml.part``) are ignored, so a writer
  that can should write elsewhere and rename the file in. A valid file is queued and moved to
  ``accepted/``; an invalid one (or one whose name is taken by other content) moves to
  ``rejected/`` beside ``<name>.error`` listing every problem as ``file:line: field: message``,
  and nothing is queued. Names never collide: ``x.yaml`` becomes ``x.1.yaml``, ``x.2.yaml``...
- **Scheduling.** Sweeps the store calls running (interrupted by a stop or a crash) resume
  first, then queued ones in priority, then submission order. Sweeps on different hosts run at
  the same time; a sweep waits while any of its hosts (same name, or same address and port) is
  in use, and a waiting sweep keeps its hosts reserved so a later one cannot overtake it.
- **Stopping.** Cancel stops a sweep at its next safe step and restores its hosts. SIGTERM or
  SIGINT stop intake and the API, ask every sweep to stop at its next safe step *without*
  restoring (the next start resumes), and after ``shutdown_grace_s`` abandon whatever is still
  measuring: an uncommitted point is simply measured again on resume.
- **Crash recovery.** On start, hosts whose backups were never restored and whose sweep will not
  resume (it was cancelled, failed, replaced) are restored before any sweep may use them.
- **systemd.** ``READY=1`` once the API listens, ``WATCHDOG=1`` at half ``WatchdogSec``,
  ``STATUS=`` naming each host's current trial, ``STOPPING=1`` on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import os
import signal
import socket
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from orchestrator.api import Conflict, build_app
from orchestrator.host.connect import open_host
from orchestrator.lifecycle import HostSession, restore
from orchestrator.log import get_logger
from orchestrator.notify import DEFAULT_TIMEOUT_S as WEBHOOK_TIMEOUT_S
from orchestrator.notify import post_webhook, sweep_summary
from orchestrator.runner import StopSignal, backup_to_snapshot, lifecycle_timeouts, run_sweep
from orchestrator.sdnotify import Notifier, watchdog_interval_s
from orchestrator.store import Store, SweepNameConflict, SweepRecord, UnitBackup
from orchestrator.sweepfile import HostSpec, Sweep, SweepFileError, parse_sweep, read_sweep_text

DEFAULT_STATE_DIR = Path("/var/lib/orchestrator")
SOCKET_NAME = "orchestrator.sock"
DB_NAME = "orchestrator.db"
LOCK_NAME = "daemon.lock"
INBOX, ACCEPTED, REJECTED = "inbox", "accepted", "rejected"
INBOX_SUFFIXES = (".yaml", ".yml")
DEFAULT_MAX_PARALLEL = 8
DEFAULT_SHUTDOWN_GRACE_S = 30.0
ABANDON_WAIT_S = 5.0
API_SHUTDOWN_S = 2.0
STATUS_EVERY_S = 1.0
STATUS_MAX_CHARS = 400

T = TypeVar("T")


class DaemonError(Exception):
    """The daemon cannot start as configured (the message says what to change)."""


# --- which sweeps may run now (pure) ---------------------------------------------------------


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


# --- the spool directory ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileStamp:
    size: int
    mtime_ns: int


class InboxWatcher:
    """Finds inbox files that have stopped changing (see the module docstring for the rule)."""

    def __init__(self, inbox: Path) -> None:
        self.inbox = inbox
        self._previous: dict[str, FileStamp] = {}

    def ready_files(self) -> list[Path]:
        """Files whose stamp equals the one seen at the previous poll, oldest name first."""
        current: dict[str, FileStamp] = {}
        with os.scandir(self.inbox) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.name.endswith(INBOX_SUFFIXES):
                    continue
                info = entry.stat(follow_symlinks=False)
                current[entry.name] = FileStamp(info.st_size, info.st_mtime_ns)
        ready = sorted(n for n, s in current.items() if self._previous.get(n) == s)
        self._previous = {n: s for n, s in current.items() if n not in ready}
        return [self.inbox / name for name in ready]


def unique_destination(directory: Path, name: str) -> Path:
    """``directory/name``, or ``stem.N.suffix`` with the first N not taken."""
    candidate = directory / name
    stem, suffix = os.path.splitext(name)
    number = 0
    while candidate.exists() or candidate.with_name(candidate.name + ".error").exists():
        number += 1
        candidate = directory / f"{stem}.{number}{suffix}"
    return candidate


def _write_private(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


# --- what the daemon tracks while a sweep runs -----------------------------------------------


class SweepProgress:
    """The runner's progress reports for one sweep, per host, for status and ``STATUS=``."""

    def __init__(self) -> None:
        self.hosts: dict[str, dict[str, Any]] = {}

    def update(self, host: str, **fields: Any) -> None:
        view = self.hosts.setdefault(host, {})
        view.update(fields)
        view["updated_at"] = time.time()

    def describe(self) -> str:
        parts = []
        for host, view in sorted(self.hosts.items()):
            trial = view.get("trial") or "-"
            counted = f" {view['done']}/{view['total']}" if "total" in view else ""
            parts.append(f"{host} {trial} {view.get('step', '')}{counted}".rstrip())
        return ", ".join(parts)


@dataclass
class ActiveSweep:
    record: SweepRecord
    sweep: Sweep
    keys: frozenset[str]
    stop: StopSignal = field(default_factory=StopSignal)
    progress: SweepProgress = field(default_factory=SweepProgress)
    task: asyncio.Task[None] | None = None


def sweep_view(record: SweepRecord, active: ActiveSweep | None) -> dict[str, Any]:
    """One sweep as the API lists it."""
    return {
        "name": record.name,
        "id": record.id,
        "state": record.state,
        "priority": record.priority,
        "submitted_at": record.submitted_at,
        "started_at": record.started_at,
        "finished_at": record.finished_at,
        "source_path": record.source_path,
        "content_hash": record.content_hash,
        "replaced_by": record.replaced_by,
        "active": active is not None,
        "stopping": active.stop.reason if active is not None else None,
        "summary": record.summary,
    }


# --- restoring a host by hand or after a crash -----------------------------------------------


async def restore_from_backup(store: Store, record: SweepRecord, backup: UnitBackup) -> list[str]:
    """Put ``backup``'s host back as the sweep found it, then mark it restored.

    The sweep's own file says how to reach the host and which restore policy applies; the
    unit's original files come from the store, never from the host's current (changed) state.
    Returns other people's files that changed meanwhile (reported, never overwritten).
    """
    sweep = parse_sweep(record.yaml_text, f"sweep {record.name} (id {record.id})")
    host = next((h for h in sweep.hosts if h.name == backup.host), None)
    if host is None:
        raise ValueError(f"sweep {record.name} has no host {backup.host!r}")
    handle = open_host(host, connect_timeout=sweep.timeouts.connect)

    async def events(kind: str, /, **fields: Any) -> None:
        await store.add_event(record.id, kind, host=host.name, fields=fields)

    try:
        session = HostSession(
            host=handle,
            unit=backup.unit,
            base_url=str(host.base_url).rstrip("/"),
            api=sweep.benchmark.api,
            model=sweep.server.model,
            gpus=tuple(host.gpus) if host.gpus else None,
            timeouts=lifecycle_timeouts(sweep),
            events=events,
        )
        session.found = backup_to_snapshot(backup.unit, backup.files, backup.state)
        foreign = await restore(session, sweep.policy.restore)
    finally:
        await handle.close()
    await store.mark_restored(record.id, backup.host)
    return foreign


# --- the daemon ------------------------------------------------------------------------------


class Daemon:
    """One daemon over one state directory; ``await run()`` until SIGTERM/SIGINT or ``stop()``."""

    def __init__(
        self,
        state_dir: Path | str = DEFAULT_STATE_DIR,
        *,
        socket_path: Path | str | None = None,
        tcp: tuple[str, int] | None = None,
        token_file: Path | str | None = None,
        max_parallel: int = DEFAULT_MAX_PARALLEL,
        webhook: str | None = None,
        webhook_timeout_s: float = WEBHOOK_TIMEOUT_S,
        inbox_poll_s: float = 0.5,
        shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
        notifier: Notifier | None = None,
    ) -> None:
        if max_parallel < 1:
            raise DaemonError(f"max_parallel must be at least 1, not {max_parallel}")
        if tcp is not None:
            _check_loopback(tcp[0])
        self.state_dir = Path(state_dir).expanduser().absolute()
        self.socket_path = (
            Path(socket_path).expanduser().absolute()
            if socket_path
            else self.state_dir / SOCKET_NAME
        )
        self.tcp = tcp
        self.token_file = Path(token_file).expanduser() if token_file else None
        self.max_parallel = max_parallel
        self.webhook = webhook
        self.webhook_timeout_s = webhook_timeout_s
        self.inbox_poll_s = inbox_poll_s
        self.shutdown_grace_s = shutdown_grace_s
        self.notifier = notifier or Notifier()
        self.inbox = self.state_dir / INBOX
        self.accepted = self.state_dir / ACCEPTED
        self.rejected = self.state_dir / REJECTED
        self._log = get_logger(component="daemon")
        self._store: Store | None = None
        self._active: dict[int, ActiveSweep] = {}
        self._restoring: dict[str, int] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._wake = asyncio.Event()
        self._stop_requested = asyncio.Event()
        self._queued = 0
        self._lock_fd: int | None = None

    # --- lifetime ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Begin the shutdown (what SIGTERM does)."""
        self._stop_requested.set()

    async def run(self) -> None:
        """Serve until stopped. Raises :class:`DaemonError` when it cannot start."""
        token = self._read_token()
        self._prepare_directories()
        self._take_lock()
        runners: list[web.AppRunner] = []
        loops: list[asyncio.Task[None]] = []
        loop = asyncio.get_running_loop()
        try:
            self._store = await Store.open(self.state_dir / DB_NAME)
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
            await self._recover()
            runners = await self._listen(token)
            loops = [
                asyncio.create_task(self._inbox_loop(), name="inbox"),
                asyncio.create_task(self._schedule_loop(), name="scheduler"),
                asyncio.create_task(self._status_loop(), name="status"),
            ]
            interval = watchdog_interval_s()
            if interval is not None:
                loops.append(asyncio.create_task(self._watchdog_loop(interval), name="watchdog"))
            self.notifier.ready(status="ready, no sweep running")
            self._log.info(
                "daemon.ready",
                state_dir=str(self.state_dir),
                socket=str(self.socket_path),
                tcp=f"{self.tcp[0]}:{self.tcp[1]}" if self.tcp else None,
                max_parallel=self.max_parallel,
            )
            await self._stop_requested.wait()
            self.notifier.stopping(status=f"stopping: {len(self._active)} sweep(s) to suspend")
            self._log.info("daemon.stopping", running=len(self._active))
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self._shutdown(runners, loops)

    async def _shutdown(
        self, runners: list[web.AppRunner], loops: list[asyncio.Task[None]]
    ) -> None:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        for runner in runners:
            await runner.cleanup()
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        sweeps = [a for a in self._active.values() if a.task is not None]
        for active in sweeps:
            active.stop.stop("shutdown")
        tasks = [a.task for a in sweeps if a.task is not None]
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=self.shutdown_grace_s)
            for task in late:
                self._log.warning("sweep.abandoned", task=task.get_name())
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=ABANDON_WAIT_S)
        background = list(self._background)
        if background:
            _, late = await asyncio.wait(background, timeout=min(self.webhook_timeout_s, 5.0))
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=ABANDON_WAIT_S)
        if self._store is not None:
            await self._store.close()
        self._release_lock()
        self.notifier.close()
        self._log.info("daemon.stopped")

    def _read_token(self) -> str | None:
        if self.tcp is None:
            return None
        if self.token_file is None:
            raise DaemonError("listening on TCP needs a token_file (the bearer token)")
        try:
            info = self.token_file.stat()
            token = self.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise DaemonError(f"{self.token_file}: cannot read the token: {exc.strerror}") from exc
        if info.st_mode & 0o077:
            raise DaemonError(
                f"{self.token_file}: mode {stat.S_IMODE(info.st_mode):04o} lets others read the "
                "token; chmod 600 it"
            )
        if len(token) < 16:
            raise DaemonError(f"{self.token_file}: the token is shorter than 16 characters")
        return token

    def _prepare_directories(self) -> None:
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            mode = stat.S_IMODE(self.state_dir.stat().st_mode)
            if mode & 0o077:
                # It holds the store (unit backups, results) and the socket: ours alone.
                self.state_dir.chmod(0o700)
                self._log.warning("state_dir.mode_tightened", was=f"{mode:04o}", now="0700")
            for directory in (self.inbox, self.accepted, self.rejected):
                directory.mkdir(exist_ok=True, mode=0o700)
        except OSError as exc:
            raise DaemonError(f"{self.state_dir}: cannot prepare: {exc.strerror}") from exc

    def _take_lock(self) -> None:
        """One daemon per state directory: two would run the same queue twice."""
        path = self.state_dir / LOCK_NAME
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise DaemonError(f"another daemon is running on {self.state_dir} ({path})") from None
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{os.getpid()}\n".encode())
        self._lock_fd = descriptor

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _unix_socket(self) -> socket.socket:
        """The API socket, created mode 0600 (its mode is its access control)."""
        path = self.socket_path
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise DaemonError(f"{path} exists and is not a socket")
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(str(path))
            except OSError:
                path.unlink()  # left by a daemon that died
            else:
                raise DaemonError(f"{path}: another daemon is listening there")
            finally:
                probe.close()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old_umask)
        os.chmod(path, 0o600)
        return sock

    async def _listen(self, token: str | None) -> list[web.AppRunner]:
        runners: list[web.AppRunner] = []
        unix_runner = web.AppRunner(
            build_app(self), access_log=None, shutdown_timeout=API_SHUTDOWN_S
        )
        await unix_runner.setup()
        runners.append(unix_runner)
        await web.SockSite(unix_runner, self._unix_socket()).start()
        if self.tcp is not None:
            tcp_runner = web.AppRunner(
                build_app(self, token=token), access_log=None, shutdown_timeout=API_SHUTDOWN_S
            )
            await tcp_runner.setup()
            runners.append(tcp_runner)
            try:
                await web.TCPSite(tcp_runner, self.tcp[0], self.tcp[1]).start()
            except OSError as exc:
                for runner in runners:
                    await runner.cleanup()
                raise DaemonError(f"cannot listen on {self.tcp[0]}:{self.tcp[1]}: {exc}") from exc
        return runners

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the daemon is not running")
        return self._store

    def _spawn(self, coroutine: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    # --- crash recovery ----------------------------------------------------------------------

    async def _recover(self) -> None:
        """Restore hosts left changed by sweeps that will not resume (before any sweep runs)."""
        resuming = {r.id for r in await self.store.list_sweeps(["running", "queued"])}
        for backup in await self.store.pending_restores():
            if backup.sweep_id in resuming:
                continue  # the resumed runner restores its hosts at its end
            record = await self.store.get_sweep(backup.sweep_id)
            keys = self._restore_keys(record, backup.host)
            if keys & self._busy_keys():
                continue
            self._claim(keys)
            self._spawn(self._restore_in_background(record, backup, keys), f"restore {backup.host}")

    async def _restore_in_background(
        self, record: SweepRecord, backup: UnitBackup, keys: frozenset[str]
    ) -> None:
        log = self._log.bind(sweep=record.name, sweep_id=record.id, host=backup.host)
        try:
            log.info("recovery.restore")
            await restore_from_backup(self.store, record, backup)
            log.info("recovery.restored")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("recovery.restore_failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            self._release(keys)

    def _restore_keys(self, record: SweepRecord, host_name: str) -> frozenset[str]:
        try:
            sweep = parse_sweep(record.yaml_text, record.name)
        except SweepFileError:
            return frozenset({f"name:{host_name}"})
        host = next((h for h in sweep.hosts if h.name == host_name), None)
        return host_keys(host) if host is not None else frozenset({f"name:{host_name}"})

    def _busy_keys(self) -> set[str]:
        busy = set(self._restoring)
        for active in self._active.values():
            busy |= active.keys
        return busy

    def _claim(self, keys: Iterable[str]) -> None:
        for key in keys:
            self._restoring[key] = self._restoring.get(key, 0) + 1

    def _release(self, keys: Iterable[str]) -> None:
        for key in keys:
            left = self._restoring.get(key, 0) - 1
            if left > 0:
                self._restoring[key] = left
            else:
                self._restoring.pop(key, None)
        self._wake.set()

    # --- intake ------------------------------------------------------------------------------

    async def _inbox_loop(self) -> None:
        watcher = InboxWatcher(self.inbox)
        while True:
            try:
                for path in watcher.ready_files():
                    await self._take_inbox_file(path)
            except OSError as exc:
                self._log.error("inbox.unreadable", error=str(exc))
            await asyncio.sleep(self.inbox_poll_s)

    async def _take_inbox_file(self, path: Path) -> None:
        log = self._log.bind(file=path.name)
        if not _is_regular_file(path):
            self._reject(path, [f"{path.name}:1: not a regular file"])
            return
        destination = unique_destination(self.accepted, path.name)
        try:
            text = read_sweep_text(path)
            sweep = parse_sweep(text, path.name)
            outcome = await self._submit(sweep, text, source_path=str(destination), replace=False)
        except SweepFileError as exc:
            self._reject(path, [str(p) for p in exc.problems])
            return
        except SweepNameConflict as exc:
            self._reject(path, [f"{path.name}:1: name: {exc} (`orchestrator submit --replace`)"])
            return
        os.replace(path, destination)
        log.info(
            "inbox.accepted",
            sweep=outcome["name"],
            sweep_id=outcome["id"],
            created=outcome["created"],
            moved_to=str(destination),
        )

    def _reject(self, path: Path, problems: Sequence[str]) -> None:
        destination = unique_destination(self.rejected, path.name)
        _write_private(
            destination.with_name(destination.name + ".error"), "\n".join(problems) + "\n"
        )
        os.replace(path, destination)
        self._log.warning(
            "inbox.rejected", file=path.name, moved_to=str(destination), problems=len(problems)
        )

    async def _submit(
        self, sweep: Sweep, text: str, *, source_path: str | None, replace: bool
    ) -> dict[str, Any]:
        previous = await self.store.find_sweep(sweep.name)
        submitted = await self.store.submit_sweep(
            sweep.name,
            text,
            priority=sweep.priority,
            source_path=source_path,
            replace=replace,
        )
        record = submitted.sweep
        replaced = None
        if previous is not None and previous.id != record.id and previous.name == record.name:
            replaced = previous.id
            old = self._active.get(previous.id)
            if old is not None:
                old.stop.stop("cancel")  # replaced while running: stop it, restore its hosts
            elif previous.state in ("queued", "running"):
                await self.store.set_sweep_state(previous.id, "cancelled")
        self._wake.set()
        self._log.info(
            "sweep.submitted",
            sweep=record.name,
            sweep_id=record.id,
            created=submitted.created,
            replaced=replaced,
        )
        return {
            "id": record.id,
            "name": record.name,
            "state": record.state,
            "priority": record.priority,
            "created": submitted.created,
            "replaced": replaced,
        }

    # --- scheduling --------------------------------------------------------------------------

    async def _schedule_loop(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self._schedule_once()
            except Exception as exc:
                self._log.exception("scheduler.error", error=type(exc).__name__)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(self.inbox_poll_s * 4, 1.0)):
                    await self._wake.wait()

    async def _schedule_once(self) -> None:
        records = await self.store.list_sweeps(["running", "queued"])
        queue: list[tuple[tuple[SweepRecord, Sweep], frozenset[str]]] = []
        for record in run_order(records):
            if record.id in self._active:
                continue
            try:
                sweep = parse_sweep(record.yaml_text, record.name)
            except SweepFileError as exc:
                # Valid when submitted, invalid now (the schema moved on): it cannot run.
                await self.store.set_sweep_state(
                    record.id, "failed", summary={"error": f"no longer valid: {exc}"}
                )
                continue
            queue.append(((record, sweep), sweep_host_keys(sweep)))
        self._queued = len(queue)
        slots = self.max_parallel - len(self._active)
        if self._stop_requested.is_set():
            return
        for record, sweep in pick_runnable(queue, self._busy_keys(), slots):
            self._start(record, sweep)
            self._queued -= 1

    def _start(self, record: SweepRecord, sweep: Sweep) -> None:
        active = ActiveSweep(record, sweep, sweep_host_keys(sweep))
        self._active[record.id] = active
        active.task = asyncio.create_task(self._run_sweep(active), name=f"sweep {record.name}")

        def finished(_: asyncio.Task[None]) -> None:
            self._active.pop(record.id, None)
            self._wake.set()

        active.task.add_done_callback(finished)

    async def _run_sweep(self, active: ActiveSweep) -> None:
        record, sweep = active.record, active.sweep
        log = self._log.bind(sweep=record.name, sweep_id=record.id)
        current = await self.store.get_sweep(record.id)
        if current.state not in ("queued", "running") or current.replaced_by is not None:
            return  # cancelled or replaced between the scheduler's look and now
        log.info("sweep.starting", resumed=current.state == "running", hosts=len(sweep.hosts))
        try:
            outcome = await run_sweep(
                sweep,
                record.yaml_text,
                self.store,
                source_path=record.source_path,
                progress=active.progress,
                stop=active.stop,
            )
        except asyncio.CancelledError:
            log.warning("sweep.interrupted")  # left running in the store: the next start resumes
            raise
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            log.exception("sweep.crashed", error=error)
            await self.store.set_sweep_state(record.id, "failed", summary={"error": error})
            await self._restore_sweep_hosts(record)
            self._announce(sweep, await self.store.sweep_results(record.id), error=error)
            return
        if outcome.state == "running":  # suspended by a shutdown: the next start resumes it
            log.info("sweep.suspended")
            return
        log.info("sweep.ended", state=outcome.state)
        self._announce(sweep, await self.store.sweep_results(record.id))

    async def _restore_sweep_hosts(self, record: SweepRecord) -> None:
        """After the runner failed outright: every host it changed goes back (its keys are
        still held by the sweep, so nothing else starts there meanwhile)."""
        for backup in await self.store.pending_restores(sweep_id=record.id):
            try:
                await restore_from_backup(self.store, record, backup)
            except Exception as exc:
                self._log.error(
                    "restore.failed",
                    sweep=record.name,
                    host=backup.host,
                    error=f"{type(exc).__name__}: {exc}",
                )

    def _announce(self, sweep: Sweep, results: dict[str, Any], *, error: str | None = None) -> None:
        url = str(sweep.notify.webhook) if sweep.notify else self.webhook
        if not url:
            return
        document = sweep_summary(results, error=error)
        self._spawn(
            post_webhook(url, document, timeout_s=self.webhook_timeout_s),
            f"webhook {sweep.name}",
        )

    # --- heartbeat ---------------------------------------------------------------------------

    async def _watchdog_loop(self, interval: float) -> None:
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    def status_line(self) -> str:
        """``STATUS=``: what runs where, in one line."""
        if not self._active:
            text = f"idle, {self._queued} queued" if self._queued else "ready, no sweep running"
        else:
            running = "; ".join(
                f"{a.record.name}: {a.progress.describe() or 'starting'}"
                for a in self._active.values()
            )
            text = f"{len(self._active)} running, {self._queued} queued; {running}"
        return text if len(text) <= STATUS_MAX_CHARS else text[: STATUS_MAX_CHARS - 3] + "..."

    async def _status_loop(self) -> None:
        while True:
            self.notifier.status(self.status_line())
            await asyncio.sleep(STATUS_EVERY_S)

    # --- the API's operations (api.DaemonOps) -------------------------------------------------

    async def submit(self, text: str, *, filename: str, replace: bool) -> dict[str, Any]:
        if self._stop_requested.is_set():
            raise Conflict("the daemon is stopping; submit again after it restarts")
        sweep = parse_sweep(text, filename)
        return await self._submit(sweep, text, source_path=None, replace=replace)

    async def list_sweeps(self, *, include_replaced: bool) -> list[dict[str, Any]]:
        records = await self.store.list_sweeps(include_replaced=include_replaced)
        return [sweep_view(r, self._active.get(r.id)) for r in records]

    async def sweep_status(self, ref: str) -> dict[str, Any]:
        record = await self.store.get_sweep(ref)
        active = self._active.get(record.id)
        view = sweep_view(record, active)
        results = await self.store.sweep_results(record.id)
        latest: dict[tuple[str, str], str] = {}
        for trial in results["trials"]:
            latest[(trial["key"], trial["host"])] = trial["state"]
        counts: dict[str, int] = {}
        for state in latest.values():
            counts[state] = counts.get(state, 0) + 1
        live = active.progress.hosts if active is not None else {}
        view["trials"] = counts
        view["hosts"] = [
            {
                "name": host["name"],
                "set_aside": host["set_aside"],
                "current": live.get(host["name"]),
            }
            for host in results["hosts"]
        ]
        return view

    async def cancel(self, ref: str) -> dict[str, Any]:
        record = await self.store.get_sweep(ref)
        active = self._active.get(record.id)
        if active is not None:
            active.stop.stop("cancel")
            self._log.info("sweep.cancelling", sweep=record.name, sweep_id=record.id)
            return {"id": record.id, "name": record.name, "state": record.state, "cancelling": True}
        if record.state not in ("queued", "running"):
            raise Conflict(f"sweep {record.name} (id {record.id}) already ended: {record.state}")
        updated = await self.store.set_sweep_state(record.id, "cancelled")
        self._log.info("sweep.cancelled", sweep=record.name, sweep_id=record.id)
        if record.state == "running":  # interrupted earlier, not resumed yet: hosts may be changed
            await self._recover()
        return {"id": record.id, "name": record.name, "state": updated.state, "cancelling": False}

    async def results(self, ref: str) -> dict[str, Any]:
        record = await self.store.get_sweep(ref)
        return await self.store.sweep_results(record.id)

    async def restore_hosts(self, host: str | None) -> dict[str, Any]:
        """Restore every pending backup of ``host`` (or of every host), now, in parallel."""
        pending = await self.store.pending_restores(host=host)
        seen: set[tuple[int, str]] = set()
        jobs = []
        skipped = []
        for backup in pending:
            if (backup.sweep_id, backup.host) in seen:
                continue
            seen.add((backup.sweep_id, backup.host))
            record = await self.store.get_sweep(backup.sweep_id)
            entry = {"host": backup.host, "sweep": record.name, "sweep_id": record.id}
            if record.id in self._active:
                skipped.append(
                    {
                        **entry,
                        "ok": False,
                        "error": "its sweep is running: cancel it to restore its hosts",
                    }
                )
                continue
            keys = self._restore_keys(record, backup.host)
            if keys & self._busy_keys():
                skipped.append(
                    {**entry, "ok": False, "error": "the host is busy with another sweep"}
                )
                continue
            self._claim(keys)
            jobs.append(self._restore_now(record, backup, keys, entry))
        restored = list(await asyncio.gather(*jobs))
        return {"restored": restored + skipped}

    async def _restore_now(
        self, record: SweepRecord, backup: UnitBackup, keys: frozenset[str], entry: dict[str, Any]
    ) -> dict[str, Any]:
        try:
            foreign = await restore_from_backup(self.store, record, backup)
        except Exception as exc:
            self._log.error(
                "restore.failed", host=backup.host, error=f"{type(exc).__name__}: {exc}"
            )
            return {**entry, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            self._release(keys)
        self._log.info("restore.done", host=backup.host, sweep=record.name)
        return {**entry, "ok": True, "foreign_changes": foreign}


def _is_regular_file(path: Path) -> bool:
    """Not a symlink (it could point anywhere the daemon may read), not a directory."""
    return stat.S_ISREG(os.lstat(path).st_mode)


def _check_loopback(host: str) -> None:
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise DaemonError(f"TCP listen address {host} is not loopback (127.0.0.0/8 or ::1)")
