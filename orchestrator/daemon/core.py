"""The daemon itself: a small owner that builds its parts over one state directory, starts
their loops, and stops them in order."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from aiohttp import web

from orchestrator.api import Submitted, build_app
from orchestrator.daemon.background import Background
from orchestrator.daemon.claims import HostClaims
from orchestrator.daemon.inbox import Inbox
from orchestrator.daemon.metrics import ServiceMetrics
from orchestrator.daemon.ops import DaemonApi
from orchestrator.daemon.order import ParsedSweeps
from orchestrator.daemon.restore import Restorer
from orchestrator.daemon.scheduler import ActiveSweep, Scheduler
from orchestrator.daemon.statedir import (
    DEFAULT_STATE_DIR,
    DaemonError,
    StateDir,
    check_loopback,
    read_token,
)
from orchestrator.host.lease import Controller
from orchestrator.log import get_logger
from orchestrator.notify import DEFAULT_TIMEOUT_S as WEBHOOK_TIMEOUT_S
from orchestrator.sdnotify import Notifier, watchdog_interval_s
from orchestrator.store import Store, StoreError
from orchestrator.sweepfile import Sweep
from orchestrator.team import DEFAULT_CLAIM_EXPIRY_S, Membership, Solo, Team, daemon_identity

DEFAULT_MAX_PARALLEL = 8
DEFAULT_SHUTDOWN_GRACE_S = 30.0
API_SHUTDOWN_S = 2.0
STATUS_EVERY_S = 1.0
STATUS_MAX_CHARS = 400
BACKGROUND_GRACE_S = 5.0


class Daemon:
    """One daemon over one state directory; ``await run()`` until SIGTERM/SIGINT or ``stop()``.

    Its parts, each with one job: :class:`StateDir` (layout, lock, socket), :class:`Inbox`
    (the spool directory), :class:`Scheduler` (which sweep runs when, and running it),
    :class:`HostClaims` (which hosts are in use), :class:`Restorer` (putting hosts back) and
    :class:`DaemonApi` (the API's operations). They exist while ``run()`` runs.
    """

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
        store: str | None = None,
        name: str | None = None,
        claim_expiry_s: float = DEFAULT_CLAIM_EXPIRY_S,
    ) -> None:
        if max_parallel < 1:
            raise DaemonError(f"max_parallel must be at least 1, not {max_parallel}")
        if tcp is not None:
            check_loopback(tcp[0])
        self.dirs = StateDir(state_dir, socket_path)
        self.tcp = tcp
        self.token_file = Path(token_file).expanduser() if token_file else None
        self.max_parallel = max_parallel
        self.webhook = webhook
        self.webhook_timeout_s = webhook_timeout_s
        self.inbox_poll_s = inbox_poll_s
        self.shutdown_grace_s = shutdown_grace_s
        self.notifier = notifier or Notifier()
        self.store_target: Path | str = store or self.dirs.db
        """The store: the state directory's file, or a PostgreSQL URL several daemons share
        (the URL is handed to the driver alone: every message names ``Store.path``)."""
        self.name = name
        self.claim_expiry_s = claim_expiry_s
        self._log = get_logger(component="daemon")
        self._store: Store | None = None
        self._scheduler: Scheduler | None = None
        self._api: DaemonApi | None = None
        self._background = Background()
        self._stop_requested = asyncio.Event()

    @property
    def state_dir(self) -> Path:
        return self.dirs.root

    @property
    def socket_path(self) -> Path:
        return self.dirs.socket_path

    @property
    def store(self) -> Store:
        if self._store is None:
            raise RuntimeError("the daemon is not running")
        return self._store

    @property
    def api(self) -> DaemonApi:
        """The API's operations (what the socket serves), for callers in the same process."""
        if self._api is None:
            raise RuntimeError("the daemon is not running")
        return self._api

    # --- lifetime ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Begin the shutdown (what SIGTERM does): intake closes at once."""
        if self._scheduler is not None:
            self._scheduler.closed = True
        self._stop_requested.set()

    async def run(self) -> None:
        """Serve until stopped. Raises :class:`DaemonError` when it cannot start."""
        token = read_token(self.token_file) if self.tcp is not None else None
        self.dirs.prepare()
        self.dirs.take_lock()
        runners: list[web.AppRunner] = []
        loops: list[asyncio.Task[None]] = []
        loop = asyncio.get_running_loop()
        try:
            try:
                store = self._store = await Store.open(self.store_target)
            except StoreError as exc:  # its words name the store, never a password
                raise DaemonError(str(exc)) from None
            team = self._team(store)
            restorer, scheduler = self._scheduler_parts(store, team)
            self._scheduler = scheduler
            metrics = ServiceMetrics(store, scheduler.claims, scheduler.active)
            store.observer = metrics.observe_store
            self._api = DaemonApi(store, scheduler, restorer, metrics)
            inbox = Inbox(
                self.dirs.inbox,
                self.dirs.accepted,
                self.dirs.rejected,
                submit=self._submit_file,
                poll_s=self.inbox_poll_s,
            )
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
            await restorer.recover()
            runners = await self._listen(self._api, token)
            loops = [
                asyncio.create_task(inbox.loop(), name="inbox"),
                asyncio.create_task(scheduler.loop(), name="scheduler"),
                asyncio.create_task(self._status_loop(), name="status"),
                asyncio.create_task(
                    team.keep(lambda: list(scheduler.active), scheduler.stop_sweep), name="claims"
                ),
            ]
            interval = watchdog_interval_s()
            if interval is not None:
                loops.append(asyncio.create_task(self._watchdog_loop(interval), name="watchdog"))
            self.notifier.ready(status="ready, no sweep running")
            self._log.info(
                "daemon.ready",
                state_dir=str(self.state_dir),
                store=str(store.path),
                daemon=None if team.identity is None else team.identity.name,
                socket=str(self.socket_path),
                tcp=f"{self.tcp[0]}:{self.tcp[1]}" if self.tcp else None,
                max_parallel=self.max_parallel,
            )
            await self._stop_requested.wait()
            running = len(scheduler.active)
            self.notifier.stopping(status=f"stopping: {running} sweep(s) to suspend")
            self._log.info("daemon.stopping", running=running)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self._shutdown(runners, loops)

    def _team(self, store: Store) -> Membership:
        """The daemon's place in the queue: one of a team over a shared store, else alone."""
        if not store.shared:
            return Solo()
        return Team(store, daemon_identity(self.name), expiry_s=self.claim_expiry_s)

    def _scheduler_parts(self, store: Store, team: Membership) -> tuple[Restorer, Scheduler]:
        """The restorer and the scheduler over ``store``, sharing the sweeps parsed once, the
        hosts' claims, the sweeps running now and this daemon's lease identity."""
        sweeps = ParsedSweeps()
        claims = HostClaims()
        active: dict[int, ActiveSweep] = {}
        controller = Controller("daemon", str(store.path))
        restorer = Restorer(
            store,
            sweeps,
            claims,
            running=active,
            spawn=self._background.spawn,
            controller=controller,
        )
        scheduler = Scheduler(
            store,
            sweeps,
            claims,
            restorer,
            self._background,
            active=active,
            max_parallel=self.max_parallel,
            tick_s=max(self.inbox_poll_s * 4, 1.0),
            webhook=self.webhook,
            webhook_timeout_s=self.webhook_timeout_s,
            controller=controller,
            team=team,
        )
        claims.on_release = scheduler.wake.set  # a freed host may let a waiting sweep start
        scheduler.closed = self._stop_requested.is_set()
        return restorer, scheduler

    async def _submit_file(self, sweep: Sweep, text: str, source_path: str) -> Submitted:
        assert self._scheduler is not None
        return await self._scheduler.submit(sweep, text, source_path=source_path, replace=False)

    async def _shutdown(
        self, runners: list[web.AppRunner], loops: list[asyncio.Task[None]]
    ) -> None:
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        for runner in runners:
            await runner.cleanup()
        self.dirs.remove_socket()
        if self._scheduler is not None:
            await self._scheduler.suspend_all(self.shutdown_grace_s)
        await self._background.drain(min(self.webhook_timeout_s, BACKGROUND_GRACE_S))
        if self._store is not None:
            await self._store.close()
        self.dirs.release_lock()
        self.notifier.close()
        self._log.info("daemon.stopped")

    async def _listen(self, ops: DaemonApi, token: str | None) -> list[web.AppRunner]:
        runners: list[web.AppRunner] = []
        unix_runner = web.AppRunner(
            build_app(ops), access_log=None, shutdown_timeout=API_SHUTDOWN_S
        )
        await unix_runner.setup()
        runners.append(unix_runner)
        await web.SockSite(unix_runner, self.dirs.bind_socket()).start()
        if self.tcp is not None:
            tcp_runner = web.AppRunner(
                build_app(ops, token=token), access_log=None, shutdown_timeout=API_SHUTDOWN_S
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

    # --- heartbeat ---------------------------------------------------------------------------

    def status_line(self) -> str:
        """``STATUS=``: what runs where, in one line."""
        if self._scheduler is None:
            return "starting"
        text = self._scheduler.describe()
        return text if len(text) <= STATUS_MAX_CHARS else text[: STATUS_MAX_CHARS - 3] + "..."

    async def _watchdog_loop(self, interval: float) -> None:
        while True:
            self.notifier.watchdog()
            await asyncio.sleep(interval)

    async def _status_loop(self) -> None:
        while True:
            self.notifier.status(self.status_line())
            await asyncio.sleep(STATUS_EVERY_S)
