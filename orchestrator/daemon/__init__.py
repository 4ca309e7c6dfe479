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
- **A team.** Over a PostgreSQL store (``store:`` / ``--db``) several daemons share one queue:
  each runs only the sweeps it has claimed, renews its claims by a heartbeat, and takes over
  the sweeps of a daemon whose claims expired (:mod:`orchestrator.team`). Over its own
  SQLite file a daemon claims nothing: every sweep there is its own.

The parts, one job each, composed by :class:`Daemon` (``core.py``): ``statedir.py`` (layout,
lock, socket, token), ``inbox.py`` (the spool directory), ``order.py`` (which sweeps may run,
pure, and each sweep's file parsed once), ``claims.py`` (which hosts are in use),
``scheduler.py`` (starting sweeps and seeing them end), ``restore.py`` (one way to put a host
back), ``ops.py`` (the API's operations), ``background.py`` (tasks not waited for).
"""

from orchestrator.daemon.claims import HostClaims
from orchestrator.daemon.core import (
    API_SHUTDOWN_S,
    DEFAULT_MAX_PARALLEL,
    DEFAULT_SHUTDOWN_GRACE_S,
    STATUS_EVERY_S,
    STATUS_MAX_CHARS,
    Daemon,
)
from orchestrator.daemon.inbox import (
    INBOX_SUFFIXES,
    FileStamp,
    Inbox,
    InboxWatcher,
    unique_destination,
)
from orchestrator.daemon.ops import DaemonApi, sweep_view
from orchestrator.daemon.order import (
    ParsedSweeps,
    host_keys,
    pick_runnable,
    run_order,
    sweep_host_keys,
)
from orchestrator.daemon.restore import (
    RestoreOutcome,
    Restorer,
    UnknownHost,
    restore_from_backup,
    restore_host,
)
from orchestrator.daemon.scheduler import ActiveSweep, Scheduler
from orchestrator.daemon.statedir import (
    ACCEPTED,
    DB_NAME,
    DEFAULT_STATE_DIR,
    INBOX,
    LOCK_NAME,
    REJECTED,
    SOCKET_NAME,
    DaemonError,
    StateDir,
    daemon_holds,
)

__all__ = [
    "ACCEPTED",
    "API_SHUTDOWN_S",
    "DB_NAME",
    "DEFAULT_MAX_PARALLEL",
    "DEFAULT_SHUTDOWN_GRACE_S",
    "DEFAULT_STATE_DIR",
    "INBOX",
    "INBOX_SUFFIXES",
    "LOCK_NAME",
    "REJECTED",
    "SOCKET_NAME",
    "STATUS_EVERY_S",
    "STATUS_MAX_CHARS",
    "ActiveSweep",
    "Daemon",
    "DaemonApi",
    "DaemonError",
    "FileStamp",
    "HostClaims",
    "Inbox",
    "InboxWatcher",
    "ParsedSweeps",
    "RestoreOutcome",
    "Restorer",
    "Scheduler",
    "StateDir",
    "UnknownHost",
    "daemon_holds",
    "host_keys",
    "pick_runnable",
    "restore_from_backup",
    "restore_host",
    "run_order",
    "sweep_host_keys",
    "sweep_view",
    "unique_destination",
]
