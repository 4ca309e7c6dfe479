"""The service manager of one simulated host: jobs, processes, unit states, its journal lines.

It reproduces what the orchestrator's restart protocol depends on (FACTS: systemd): changes
visible only after ``daemon-reload`` (``NeedDaemonReload``, including the quirk that a drop-in in
a ``.d`` directory that did not exist at the last reload goes unnoticed), Type=simple semantics
(active/running right after fork), stop = SIGTERM to the control group then SIGKILL after
TimeoutStopSec, KillMode, the start rate limit, unit garbage collection, and systemd's own
journal lines. Units are read by unitload.py; the control group is procscan.py's stand-in.

Limits of the model: only Type=simple is modelled (other types run as simple). Everything is in
one process; the manager's state is lost when the host stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import time
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.sim.journal import LINE_MAX, Journal, StreamSource
from orchestrator.sim.procscan import (
    group_members,
    kill_quietly,
    process_comm,
    scan_processes,
    signal_name,
)
from orchestrator.sim.unitfile import (
    USEC,
    ExecCommand,
    apply_unset_environment,
    env_assignments_to_dict,
    format_timespan,
    format_timestamp,
    shell_maybe_quote,
    substitute_env,
)
from orchestrator.sim.unitload import (
    UNIT_DIRS,
    UnitConfig,
    host_path,
    list_unit_dirs,
    load_unit,
    need_daemon_reload,
)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_POLL_S = 0.05

EXIT_STATUS_NAMES = {
    0: "SUCCESS",
    1: "FAILURE",
    2: "INVALIDARGUMENT",
    3: "NOTIMPLEMENTED",
    4: "NOPERMISSION",
    5: "NOTINSTALLED",
    6: "NOTCONFIGURED",
    7: "NOTRUNNING",
    200: "CHDIR",
    203: "EXEC",
}
CLEAN_SIGNALS = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE}
CLD_EXITED, CLD_KILLED = 1, 2

def exit_description(code: int, status: int) -> str:
    """``code=exited, status=1/FAILURE`` or ``code=killed, status=9/KILL``."""
    if code == CLD_EXITED:
        return f"code=exited, status={status}/{EXIT_STATUS_NAMES.get(status, 'n/a')}"
    return f"code=killed, status={status}/{signal_name(status)}"


# --- the manager ----------------------------------------------------------------------------


@dataclass(slots=True)
class ServiceRuntime:
    """What systemd keeps about a service between jobs."""

    active_state: str = "inactive"
    sub_state: str = "dead"
    result: str = "success"
    main_pid: int = 0
    invocation_id: str = ""
    exec_main_start_us: int = 0
    exec_main_start_mono_us: int = 0
    exec_main_exit_us: int = 0
    exec_main_exit_mono_us: int = 0
    exec_main_pid: int = 0
    exec_main_code: int = 0
    exec_main_status: int = 0
    nrestarts: int = 0
    job_id: int = 0
    starts: deque[float] = field(default_factory=deque)
    sessions: set[int] = field(default_factory=set)
    process: asyncio.subprocess.Process | None = None
    command: ExecCommand | None = None
    run_serial: int = 0
    finished_serial: int = 0
    stopping: bool = False
    stuck_pids: set[int] = field(default_factory=set)
    stuck_until: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    main_exited: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)


class UnitError(Exception):
    """A unit that a job or a reset cannot act on, as systemctl reports it by ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class UnitNotFound(UnitError):
    """No unit file by that name (and nothing of it still running)."""


class BadUnitSetting(UnitError):
    """The unit file loaded with a setting systemd refuses to start."""


class JobFailed(Exception):
    """A start job ended in failure; ``result`` is the unit's Result (e.g. start-limit-hit)."""

    def __init__(self, name: str, result: str) -> None:
        super().__init__(f"{name}: {result}")
        self.name = name
        self.result = result


@dataclass(frozen=True, slots=True)
class ManagerOptions:
    hostname: str
    child_env: Mapping[str, str] = field(default_factory=dict)
    """Added to every service's environment (under its Environment=)."""
    survives_sigkill_s: float = 0.0
    on_stuck: Callable[[list[int], float], None] | None = None
    """Called with the pids stuck in D-state and the epoch time they stay 'around' until."""


class ServiceManager:
    """The service manager of one simulated host."""

    def __init__(self, root: Path, journal: Journal, options: ManagerOptions) -> None:
        self.root = root
        self.journal = journal
        self.options = options
        self._units: dict[str, UnitConfig] = {}
        self._runtime: dict[str, ServiceRuntime] = {}
        self._dir_cache: set[str] = set()
        self._next_job = 100
        self._specifiers = {
            "H": options.hostname,
            "l": options.hostname.split(".")[0],
            "h": "/root",
            "u": "root",
            "U": "0",
            "g": "root",
            "G": "0",
            "t": "/run",
            "s": "/bin/sh",
            "E": "/etc",
            "S": "/var/lib",
            "C": "/var/cache",
            "L": "/var/log",
            "T": "/tmp",
            "V": "/var/tmp",
            "b": journal.boot_id,
            "m": journal.machine_id,
            "i": "",
            "I": "",
        }
        self._closed = False

    # loading

    def daemon_reload(self) -> None:
        self._dir_cache = list_unit_dirs(self.root)
        names = set(self._units) | set(self._runtime)
        for base in UNIT_DIRS:
            real = host_path(self.root, base)
            if real.is_dir():
                names |= {p.name for p in real.iterdir() if p.is_file()}
        self._units = {}
        for name in sorted(names):
            self._load(name)

    def _load(self, name: str) -> UnitConfig:
        config = load_unit(self.root, name, self._specifiers)
        if config.load_state != "not-found":
            self._units[name] = config
        for warning in config.warnings:
            self.journal.log_manager(
                f"{name}: {warning}", unit=name, invocation_id="", priority=3
            )
        return config

    def unit(self, name: str) -> UnitConfig:
        """The loaded unit; a unit never referenced before, or garbage-collected since, is loaded
        now from the files on disk (as systemd does: no daemon-reload needed for it)."""
        if name in self._units and not self._collect(name):
            return self._units[name]
        config = load_unit(self.root, name, self._specifiers)
        if config.load_state != "not-found":
            self._units[name] = config
        return config

    def _referenced(self, name: str) -> bool:
        """Whether another unit holds a dependency on ``name``: here, the enablement symlinks
        (``*.wants/NAME``, ``*.requires/NAME``) of the targets a booted host has active."""
        for base in UNIT_DIRS:
            real = host_path(self.root, base)
            if real.is_dir():
                for child in real.iterdir():
                    if child.name.endswith((".wants", ".requires")) and (child / name).exists():
                        return True
        return False

    def _collect(self, name: str) -> bool:
        """systemd's unit GC (CollectMode=inactive): an unreferenced unit that is inactive with
        no job and no process left is unloaded, forgetting its runtime state (ExecMain*,
        InvocationID, the start-limit count). Returns whether ``name`` was collected."""
        runtime = self._runtime.get(name)
        if runtime is not None and (
            runtime.active_state != "inactive"
            or runtime.job_id
            or runtime.lock.locked()
            or self._members(runtime)
        ):
            return False
        if self._referenced(name):
            return False
        self._units.pop(name, None)
        self._runtime.pop(name, None)
        return True

    def runtime(self, name: str) -> ServiceRuntime:
        return self._runtime.setdefault(name, ServiceRuntime())

    def needs_reload(self, name: str) -> bool:
        return need_daemon_reload(self.root, self.unit(name), self._dir_cache)

    def _new_job(self) -> int:
        self._next_job += 1
        return self._next_job

    def _log(self, name: str, message: str, priority: int = 6, **extra: str) -> None:
        runtime = self.runtime(name)
        self.journal.log_manager(
            message, unit=name, invocation_id=runtime.invocation_id, priority=priority, **extra
        )

    # jobs

    def _startable(self, name: str) -> UnitConfig:
        """The unit, or systemctl's refusal to start it (not found, a bad setting)."""
        config = self.unit(name)
        if config.load_state == "not-found":
            raise UnitNotFound(name)
        if config.load_state == "bad-setting":
            raise BadUnitSetting(name)
        return config

    async def start(self, name: str) -> None:
        config = self._startable(name)
        runtime = self.runtime(name)
        async with runtime.lock:
            await self._start_locked(config, runtime, automatic=False)

    async def stop(self, name: str) -> None:
        config = self.unit(name)
        runtime = self.runtime(name)
        if config.load_state == "not-found" and runtime.active_state == "inactive":
            raise UnitNotFound(name)
        async with runtime.lock:
            await self._stop_locked(config, runtime)

    async def restart(self, name: str) -> None:
        config = self._startable(name)
        runtime = self.runtime(name)
        async with runtime.lock:
            await self._stop_locked(config, runtime)
            await self._start_locked(config, runtime, automatic=False)

    def reset_failed(self, name: str) -> None:
        config = self.unit(name)
        runtime = self.runtime(name)
        if config.load_state == "not-found" and runtime.active_state == "inactive":
            raise UnitNotFound(name)
        runtime.starts.clear()
        if runtime.active_state == "failed":
            runtime.active_state, runtime.sub_state, runtime.result = "inactive", "dead", "success"
            runtime.invocation_id = ""

    async def _start_locked(
        self, config: UnitConfig, runtime: ServiceRuntime, *, automatic: bool
    ) -> None:
        if runtime.active_state in ("active", "activating", "deactivating") and not automatic:
            return
        now = time.monotonic()
        window = config.start_limit_interval_us / USEC
        while runtime.starts and now - runtime.starts[0] > window:
            runtime.starts.popleft()
        if config.start_limit_interval_us > 0 and len(runtime.starts) >= config.start_limit_burst:
            runtime.active_state, runtime.sub_state = "failed", "failed"
            runtime.result = "start-limit-hit"
            self._log(config.name, f"{config.name}: Start request repeated too quickly.", 4)
            self._log(config.name, f"{config.name}: Failed with result 'start-limit-hit'.", 4)
            self._log(config.name, f"Failed to start {config.display_name}.", 3)
            raise JobFailed(config.name, "start-limit-hit")
        runtime.starts.append(now)
        leftovers = self._members(runtime)
        runtime.invocation_id = secrets.token_hex(16)
        runtime.result = "success"
        runtime.stuck_pids.clear()
        procs = scan_processes()
        for pid in sorted(leftovers):
            comm = procs[pid].comm if pid in procs else "?"
            self._log(
                config.name,
                f"{config.name}: Found left-over process {pid} ({comm}) in control group while "
                "starting unit. Ignoring.",
                4,
            )
            self._log(
                config.name,
                "This usually indicates unclean termination of a previous run, or service "
                "implementation deficiencies.",
                4,
            )
        command = config.exec_start[0]
        env = {
            "LANG": "C.UTF-8",
            "PATH": DEFAULT_PATH,
            "INVOCATION_ID": runtime.invocation_id,
            **self.options.child_env,
        }
        assignments = env_assignments_to_dict(config.environment)
        env.update(assignments)
        env = apply_unset_environment(env, config.unset_environment)
        argv = substitute_env(command.argv, env)
        runtime.command = command
        runtime.run_serial += 1
        runtime.main_exited = asyncio.Event()
        runtime.exec_main_code = runtime.exec_main_status = 0
        runtime.exec_main_exit_us = runtime.exec_main_exit_mono_us = 0
        runtime.exec_main_start_us = time.time_ns() // 1000
        runtime.exec_main_start_mono_us = time.monotonic_ns() // 1000
        # The stream is a pipe of our own, not asyncio's: on Python 3.11 Process.wait() waits
        # for asyncio's pipes to close too, which a left-over child holding them would block.
        read_fd, write_fd = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                executable=command.path,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=write_fd,
                stderr=write_fd,
                env=env,
                cwd="/",
                start_new_session=True,
            )
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            runtime.active_state, runtime.sub_state, runtime.main_pid = "active", "running", 0
            self._log(config.name, f"Started {config.display_name}.")
            reason = exc.strerror or str(exc)
            self._log(config.name, f"{config.name}: Failed to execute {command.path}: {reason}", 3)
            self._log(
                config.name,
                f"{config.name}: Failed at step EXEC spawning {command.path}: {reason}",
                3,
            )
            self._log(
                config.name,
                f"{config.name}: Main process exited, {exit_description(CLD_EXITED, 203)}",
                5,
            )
            runtime.finished_serial = runtime.run_serial
            self._finish_exit(config, runtime, CLD_EXITED, 203)
            return
        os.close(write_fd)
        runtime.process = process
        runtime.main_pid = runtime.exec_main_pid = process.pid
        runtime.sessions.add(process.pid)
        runtime.active_state, runtime.sub_state = "active", "running"
        self._log(config.name, f"Started {config.display_name}.")
        source = StreamSource(
            unit=config.name,
            invocation_id=runtime.invocation_id,
            pid=process.pid,
            comm=process_comm(process.pid, command.path),
            exe=command.path,
            cmdline=" ".join(argv),
            identifier=config.syslog_identifier or os.path.basename(argv[0] if argv else ""),
            rate_limit=config.rate_limit,
        )
        self._spawn(runtime, self._pump_output(read_fd, source))
        self._spawn(runtime, self._watch_main(config, runtime, process, runtime.run_serial))

    def _spawn(self, runtime: ServiceRuntime, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.ensure_future(coro)
        runtime.tasks.add(task)
        task.add_done_callback(runtime.tasks.discard)

    async def _pump_output(self, read_fd: int, source: StreamSource) -> None:
        """Copy the service's stdout+stderr stream into the journal line by line, until every
        process holding the stream (left-over children too) has closed it."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        try:
            await self._copy_lines(reader, source)
        finally:
            transport.close()

    async def _copy_lines(self, reader: asyncio.StreamReader, source: StreamSource) -> None:
        buffer = b""
        while True:
            chunk = await reader.read(65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self.journal.log_stream_line(source, line)
            while len(buffer) >= LINE_MAX:
                self.journal.log_stream_line(source, buffer[:LINE_MAX], broken=True)
                buffer = buffer[LINE_MAX:]
        if buffer:
            self.journal.log_stream_line(source, buffer)

    async def _watch_main(
        self,
        config: UnitConfig,
        runtime: ServiceRuntime,
        process: asyncio.subprocess.Process,
        serial: int,
    ) -> None:
        returncode = await process.wait()
        if returncode < 0:
            code, status = CLD_KILLED, -returncode
        else:
            code, status = CLD_EXITED, returncode
        runtime.exec_main_code, runtime.exec_main_status = code, status
        runtime.exec_main_exit_us = time.time_ns() // 1000
        runtime.exec_main_exit_mono_us = time.monotonic_ns() // 1000
        runtime.main_exited.set()
        if runtime.stopping or self._closed:
            return
        async with runtime.lock:
            if runtime.run_serial != serial or runtime.finished_serial == serial:
                return
            runtime.finished_serial = serial
            clean = (code == CLD_EXITED and status == 0) or (
                code == CLD_KILLED and status in CLEAN_SIGNALS
            )
            if not clean:
                self._log(config.name, f"{config.name}: Main process exited, "
                          f"{exit_description(code, status)}", 5)
            runtime.main_pid = 0
            if config.kill_mode in ("control-group", "mixed") and self._members(runtime):
                runtime.active_state, runtime.sub_state = "deactivating", "stop-sigterm"
                for pid in self._members(runtime):
                    kill_quietly(pid, signal.SIGTERM)
                    kill_quietly(pid, signal.SIGCONT)
                await self._wait_gone(config, runtime, config.timeout_stop_us)
            self._finish_exit(config, runtime, code, status)
            if (
                not clean
                and config.restart in ("on-failure", "always", "on-abnormal")
                and not self._closed
            ) or (clean and config.restart == "always" and not self._closed):
                self._spawn(runtime, self._auto_restart(config, runtime, serial))

    async def _auto_restart(self, config: UnitConfig, runtime: ServiceRuntime, serial: int) -> None:
        runtime.active_state, runtime.sub_state = "activating", "auto-restart"
        await asyncio.sleep(config.restart_sec_us / USEC)
        async with runtime.lock:
            if runtime.run_serial != serial or runtime.sub_state != "auto-restart":
                return
            runtime.nrestarts += 1
            self._log(
                config.name,
                f"{config.name}: Scheduled restart job, restart counter is at "
                f"{runtime.nrestarts}.",
            )
            self._log(config.name, f"Stopped {config.display_name}.")
            with contextlib.suppress(JobFailed):
                await self._start_locked(self.unit(config.name), runtime, automatic=True)

    def _finish_exit(
        self, config: UnitConfig, runtime: ServiceRuntime, code: int, status: int
    ) -> None:
        runtime.exec_main_code, runtime.exec_main_status = code, status
        runtime.main_pid = 0
        runtime.process = None
        clean = (code == CLD_EXITED and status == 0) or (
            code == CLD_KILLED and status in CLEAN_SIGNALS
        )
        if clean and runtime.result == "success":
            self._log(config.name, f"{config.name}: Deactivated successfully.")
            runtime.active_state, runtime.sub_state = "inactive", "dead"
            runtime.invocation_id = ""
            return
        if runtime.result == "success":
            runtime.result = "exit-code" if code == CLD_EXITED else "signal"
        self._log(config.name, f"{config.name}: Failed with result '{runtime.result}'.", 4)
        runtime.active_state, runtime.sub_state = "failed", "failed"

    def _members(self, runtime: ServiceRuntime) -> set[int]:
        members = group_members(runtime.sessions, scan_processes())
        if runtime.stuck_pids and time.monotonic() < runtime.stuck_until:
            members |= runtime.stuck_pids
        return members

    async def _wait_gone(
        self, config: UnitConfig, runtime: ServiceRuntime, timeout_us: int | None
    ) -> bool:
        """Wait until the processes the stop waits for are gone; False on timeout."""
        deadline = None if timeout_us is None else time.monotonic() + timeout_us / USEC
        while True:
            main_done = runtime.main_exited.is_set() or runtime.process is None
            if config.kill_mode in ("process", "none"):
                stuck = bool(runtime.stuck_pids) and time.monotonic() < runtime.stuck_until
                if main_done and not stuck:
                    return True
            elif main_done and not self._members(runtime):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)

    async def _stop_locked(self, config: UnitConfig, runtime: ServiceRuntime) -> None:
        if runtime.sub_state == "auto-restart":
            runtime.active_state, runtime.sub_state = "inactive", "dead"
            return
        if runtime.active_state not in ("active", "activating", "deactivating"):
            return
        runtime.job_id = self._new_job()
        runtime.stopping = True
        runtime.finished_serial = runtime.run_serial
        try:
            await self._stop_sequence(config, runtime)
        finally:
            runtime.stopping = False
            runtime.job_id = 0

    async def _stop_sequence(self, config: UnitConfig, runtime: ServiceRuntime) -> None:
        name = config.name
        runtime.active_state, runtime.sub_state = "deactivating", "stop-sigterm"
        self._log(name, f"Stopping {config.display_name}...")
        main = runtime.main_pid
        members = self._members(runtime)
        stuck = self.options.survives_sigkill_s > 0
        if stuck:
            for pid in members:
                kill_quietly(pid, signal.SIGSTOP)
        if config.kill_mode in ("control-group",):
            targets = members
        elif config.kill_mode in ("process", "mixed"):
            targets = {main} if main else set()
        else:
            targets = set()
        for pid in targets:
            kill_quietly(pid, signal.SIGTERM)
            if not stuck:
                kill_quietly(pid, signal.SIGCONT)
        done = config.kill_mode == "none" or await self._wait_gone(
            config, runtime, config.timeout_stop_us
        )
        if not done:
            self._log(name, f"{name}: State 'stop-sigterm' timed out. Killing.", 4)
            runtime.sub_state = "stop-sigkill"
            runtime.result = "timeout"
            procs = scan_processes()
            if config.kill_mode in ("control-group", "mixed"):
                victims = self._members(runtime)
            else:
                victims = {main} if main else set()
            for pid in sorted(victims):
                comm = procs[pid].comm if pid in procs else "?"
                self._log(name, f"{name}: Killing process {pid} ({comm}) with signal SIGKILL.", 4)
                kill_quietly(pid, signal.SIGKILL)
            if stuck:
                until = time.monotonic() + self.options.survives_sigkill_s
                runtime.stuck_pids, runtime.stuck_until = set(victims), until
                if self.options.on_stuck is not None:
                    held_until = time.time() + self.options.survives_sigkill_s
                    self.options.on_stuck(sorted(victims), held_until)
            done = await self._wait_gone(config, runtime, config.timeout_stop_us)
            if not done:
                self._log(
                    name, f"{name}: Processes still around after final SIGKILL. Entering failed "
                    "mode.", 4,
                )
        if runtime.main_exited.is_set() and runtime.exec_main_pid == main:
            code, status = runtime.exec_main_code, runtime.exec_main_status
            clean = (code == CLD_EXITED and status == 0) or (
                code == CLD_KILLED and status in CLEAN_SIGNALS
            )
            if not clean:
                self._log(name, f"{name}: Main process exited, {exit_description(code, status)}", 5)
                if runtime.result == "success":
                    runtime.result = "exit-code" if code == CLD_EXITED else "signal"
        if config.kill_mode in ("process", "none"):
            procs = scan_processes()
            for pid in sorted(self._members(runtime) - {main}):
                comm = procs[pid].comm if pid in procs else "?"
                self._log(
                    name, f"{name}: Unit process {pid} ({comm}) remains running after unit "
                    "stopped.", 4,
                )
        runtime.main_pid = 0
        runtime.process = None
        if runtime.result == "success":
            self._log(name, f"{name}: Deactivated successfully.")
            self._log(name, f"Stopped {config.display_name}.")
            runtime.active_state, runtime.sub_state = "inactive", "dead"
            runtime.invocation_id = ""
        else:
            self._log(name, f"{name}: Failed with result '{runtime.result}'.", 4)
            self._log(name, f"Stopped {config.display_name}.")
            runtime.active_state, runtime.sub_state = "failed", "failed"

    # shutdown

    async def shutdown(self, timeout: float = 5.0) -> None:
        """Kill every process any unit ever started (SIGKILL, by pid) and wait for them."""
        self._closed = True
        for runtime in self._runtime.values():
            for task in list(runtime.tasks):
                task.cancel()
        deadline = time.monotonic() + timeout
        while True:
            procs = scan_processes()
            alive: set[int] = set()
            for runtime in self._runtime.values():
                alive |= group_members(runtime.sessions, procs)
            for pid in alive:
                kill_quietly(pid, signal.SIGKILL)
            for runtime in self._runtime.values():
                if runtime.process is not None and runtime.process.returncode is None:
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(0.5):
                            await runtime.process.wait()
            if not alive or time.monotonic() > deadline:
                return
            await asyncio.sleep(_POLL_S)

    def unit_programs(self) -> set[str]:
        """argv[0] (and path) of every loaded unit's ExecStart: commands that run for real."""
        programs: set[str] = set()
        for config in self._units.values():
            for command in config.exec_start:
                programs.add(command.path)
                if command.argv:
                    programs.add(command.argv[0])
        return programs

    def unit_pids(self) -> set[int]:
        pids: set[int] = set()
        procs = scan_processes()
        for runtime in self._runtime.values():
            pids |= group_members(runtime.sessions, procs)
        return pids

    # properties

    def properties(self, name: str) -> list[tuple[str, str]]:
        """``systemctl show`` properties in systemd's order (Service, cgroup, exec, kill, Unit)."""
        config = self.unit(name)
        rt = self.runtime(name)
        exec_lines = [_exec_property(cmd, rt) for cmd in config.exec_start] or [""]
        found = config.load_state != "not-found"
        if not found:
            exec_lines = []  # an empty exec list prints no line at all
        running = rt.active_state in ("active", "deactivating") or bool(self._members(rt))
        props: list[tuple[str, str]] = [
            ("Type", config.type if found else ""),
            ("Restart", config.restart),
            ("TimeoutStopUSec", format_timespan(config.timeout_stop_us)),
            ("MainPID", str(rt.main_pid)),
            ("Result", rt.result),
            ("NRestarts", str(rt.nrestarts)),
            ("ExecMainStartTimestamp", format_timestamp(rt.exec_main_start_us)),
            ("ExecMainStartTimestampMonotonic", str(rt.exec_main_start_mono_us)),
            ("ExecMainExitTimestamp", format_timestamp(rt.exec_main_exit_us)),
            ("ExecMainExitTimestampMonotonic", str(rt.exec_main_exit_mono_us)),
            ("ExecMainPID", str(rt.exec_main_pid)),
            ("ExecMainCode", str(rt.exec_main_code)),
            ("ExecMainStatus", str(rt.exec_main_status)),
            *(("ExecStart", line) for line in exec_lines),
            ("Slice", "system.slice" if config.load_state != "not-found" else ""),
            ("ControlGroup", f"/system.slice/{name}" if running else ""),
            ("Environment", " ".join(shell_maybe_quote(e) for e in config.environment)),
            ("UnsetEnvironment", " ".join(shell_maybe_quote(e) for e in config.unset_environment)),
            ("KillMode", config.kill_mode),
            ("Id", name),
            ("Names", name),
            ("Description", config.display_name),
            ("LoadState", config.load_state),
            ("ActiveState", rt.active_state),
            ("SubState", rt.sub_state),
            ("FragmentPath", config.fragment_path),
            ("DropInPaths", " ".join(config.dropin_paths)),
            ("Job", str(rt.job_id) if rt.job_id else ""),
            ("NeedDaemonReload", "yes" if self.needs_reload(name) else "no"),
            ("LoadError", config.load_error),
            ("InvocationID", rt.invocation_id),
        ]
        return props

    def cat(self, name: str) -> tuple[bytes, bool]:
        """``systemctl cat`` output of the loaded unit's files as they are on disk now."""
        config = self.unit(name)
        if config.load_state == "not-found":
            return b"", False
        out = b""
        for index, path in enumerate([config.fragment_path, *config.dropin_paths]):
            try:
                content = host_path(self.root, path).read_bytes()
            except OSError:
                continue
            out += (b"\n" if index else b"") + f"# {path}\n".encode() + content
        return out, True


def _exec_property(command: ExecCommand, rt: ServiceRuntime) -> str:
    """``{ path=... ; argv[]=... ; ignore_errors=no ; start_time=[...] ; ... }``."""
    ran = rt.command == command and rt.exec_main_start_us > 0
    start = format_timestamp(rt.exec_main_start_us) if ran else ""
    stop = format_timestamp(rt.exec_main_exit_us) if ran else ""
    pid = rt.exec_main_pid if ran else 0
    code, status = (rt.exec_main_code, rt.exec_main_status) if ran else (0, 0)
    code_name = {CLD_EXITED: "exited", CLD_KILLED: "killed"}.get(code, "(null)")
    status_text = f"{status}" if code == CLD_EXITED else f"{status}/{signal_name(status)}"
    return (
        f"{{ path={command.path} ; argv[]={' '.join(command.argv)} ; "
        f"ignore_errors={'yes' if command.ignore_errors else 'no'} ; "
        f"start_time=[{start or 'n/a'}] ; stop_time=[{stop or 'n/a'}] ; pid={pid} ; "
        f"code={code_name} ; status={status_text} }}"
    )
