"""A stand-in ``org.freedesktop.systemd1`` on a private bus, for the D-Bus unit control tests.

Run as ``python -m tests.integration.fake_systemd1 --address ADDR --units UNITS.json``; it
prints ``ready`` once it owns the name. It speaks the real manager's interface for the parts the
orchestrator uses (Manager: Subscribe, LoadUnit, GetUnit, StartUnit, StopUnit, RestartUnit,
ResetFailedUnit, Reload and the JobRemoved signal; Unit and Service properties with their real
D-Bus types) and behaves like it where it matters: starting a unit forks its ExecStart argv as a
real child (with ``INVOCATION_ID`` in its environment, as systemd sets it), the start job of a
Type=simple unit is done right after the fork, a stop job only ends once the process is gone
(SIGTERM, SIGKILL after TimeoutStopUSec), JobRemoved goes out only after someone subscribed,
``replace`` cancels a pending job of the same unit, and Reload re-reads the unit file (until
then ``NeedDaemonReload`` is true). A test control interface (``org.orchestrator.test``) can
delay a unit's jobs, force a job result, and send a JobRemoved of some other job first.

UNITS.json: ``{"NAME.service": {"argv": [...], "type": "simple", "kill_mode": "control-group",
"timeout_stop_usec": 5000000, "fragment_path": "...", "drop_in_paths": [...]}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from dbus_fast import PropertyAccess
from dbus_fast.aio import MessageBus
from dbus_fast.annotations import (
    DBusBool,
    DBusBytes,
    DBusDouble,
    DBusInt32,
    DBusObjectPath,
    DBusSignature,
    DBusStr,
    DBusUInt32,
    DBusUInt64,
)
from dbus_fast.errors import DBusError
from dbus_fast.service import ServiceInterface, dbus_method, dbus_property, dbus_signal

BUS_NAME = "org.freedesktop.systemd1"
MANAGER_PATH = "/org/freedesktop/systemd1"
CONTROL_PATH = "/org/orchestrator/test"
NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"
CLD_EXITED, CLD_KILLED = 1, 2
EXIT_EXEC = 203

# dbus-fast reads a method's reply signature from its return annotation; "" is no reply body.
DBusVoid = Annotated[None, DBusSignature("")]
DBusStrList = Annotated[list[str], DBusSignature("as")]
DBusJobRef = Annotated[list[Any], DBusSignature("(uo)")]
DBusExecList = Annotated[list[list[Any]], DBusSignature("a(sasbttttuii)")]
DBusJobRemoved = Annotated[list[Any], DBusSignature("uoss")]


def _label_escape(name: str) -> str:
    """systemd's bus_label_escape, written here independently of the code under test."""
    out = []
    for index, byte in enumerate(name.encode()):
        if (65 <= byte <= 90 or 97 <= byte <= 122) or (index > 0 and 48 <= byte <= 57):
            out.append(chr(byte))
        else:
            out.append(f"_{byte:02x}")
    return "".join(out) or "_"


def unit_path(name: str) -> str:
    return f"{MANAGER_PATH}/unit/{_label_escape(name)}"


@dataclass
class Unit:
    name: str
    config: dict[str, Any] | None
    load_state: str = "loaded"
    active_state: str = "inactive"
    sub_state: str = "dead"
    result: str = "success"
    invocation: bytes = b""
    main_pid: int = 0
    exec_code: int = 0
    exec_status: int = 0
    exec_start_mono_us: int = 0
    exec_start_rt_us: int = 0
    exec_pid: int = 0
    job: tuple[int, str] = (0, "/")
    job_task: asyncio.Task[None] | None = None
    process: asyncio.subprocess.Process | None = None
    watcher: asyncio.Task[None] | None = None
    stopping: bool = False
    job_delay_s: float = 0.0
    forced_result: str | None = None
    foreign_first: str | None = None
    units_file: Path | None = None
    loaded_mtime_ns: int = 0

    def cfg(self, key: str, default: Any) -> Any:
        return (self.config or {}).get(key, default)


class UnitInterface(ServiceInterface):
    def __init__(self, unit: Unit) -> None:
        super().__init__("org.freedesktop.systemd1.Unit")
        self.u = unit

    @dbus_property(access=PropertyAccess.READ)
    def Id(self) -> DBusStr:
        return self.u.name

    @dbus_property(access=PropertyAccess.READ)
    def LoadState(self) -> DBusStr:
        return self.u.load_state

    @dbus_property(access=PropertyAccess.READ)
    def ActiveState(self) -> DBusStr:
        return self.u.active_state

    @dbus_property(access=PropertyAccess.READ)
    def SubState(self) -> DBusStr:
        return self.u.sub_state

    @dbus_property(access=PropertyAccess.READ)
    def InvocationID(self) -> DBusBytes:
        return self.u.invocation

    @dbus_property(access=PropertyAccess.READ)
    def Job(self) -> DBusJobRef:
        return list(self.u.job)

    @dbus_property(access=PropertyAccess.READ)
    def NeedDaemonReload(self) -> DBusBool:
        # As systemd: the unit's files changed on disk since the last (re)load.
        units_file = self.u.units_file
        if self.u.config is None or units_file is None:
            return False
        return units_file.stat().st_mtime_ns != self.u.loaded_mtime_ns

    @dbus_property(access=PropertyAccess.READ)
    def DropInPaths(self) -> DBusStrList:
        return list(self.u.cfg("drop_in_paths", []))

    @dbus_property(access=PropertyAccess.READ)
    def FragmentPath(self) -> DBusStr:
        return str(self.u.cfg("fragment_path", ""))


class ServiceIface(ServiceInterface):
    def __init__(self, unit: Unit) -> None:
        super().__init__("org.freedesktop.systemd1.Service")
        self.u = unit

    @dbus_property(access=PropertyAccess.READ)
    def Type(self) -> DBusStr:
        return str(self.u.cfg("type", "simple"))

    @dbus_property(access=PropertyAccess.READ)
    def Result(self) -> DBusStr:
        return self.u.result

    @dbus_property(access=PropertyAccess.READ)
    def MainPID(self) -> DBusUInt32:
        return self.u.main_pid

    @dbus_property(access=PropertyAccess.READ)
    def ExecMainStatus(self) -> DBusInt32:
        return self.u.exec_status

    @dbus_property(access=PropertyAccess.READ)
    def ExecMainCode(self) -> DBusInt32:
        return self.u.exec_code

    @dbus_property(access=PropertyAccess.READ)
    def ExecMainStartTimestampMonotonic(self) -> DBusUInt64:
        return self.u.exec_start_mono_us

    @dbus_property(access=PropertyAccess.READ)
    def NRestarts(self) -> DBusUInt32:
        return 0

    @dbus_property(access=PropertyAccess.READ)
    def KillMode(self) -> DBusStr:
        return str(self.u.cfg("kill_mode", "control-group"))

    @dbus_property(access=PropertyAccess.READ)
    def TimeoutStopUSec(self) -> DBusUInt64:
        return int(self.u.cfg("timeout_stop_usec", 90_000_000))

    @dbus_property(access=PropertyAccess.READ)
    def ExecStart(self) -> DBusExecList:
        argv = [str(a) for a in self.u.cfg("argv", [])]
        if not argv:
            return []
        return [
            [
                argv[0],
                argv,
                False,
                self.u.exec_start_rt_us,
                self.u.exec_start_mono_us,
                0,
                0,
                self.u.exec_pid,
                self.u.exec_code,
                self.u.exec_status,
            ]
        ]


class Manager(ServiceInterface):
    def __init__(self, bus: MessageBus, units_file: Path) -> None:
        super().__init__("org.freedesktop.systemd1.Manager")
        self.bus = bus
        self.units_file = units_file
        self.units: dict[str, Unit] = {}
        self.subscribed = False
        self.next_job = 100
        self.reloads = 0
        self._load_file()

    # -- units -----------------------------------------------------------------------------

    def _load_file(self) -> None:
        mtime = self.units_file.stat().st_mtime_ns
        configs: dict[str, dict[str, Any]] = json.loads(self.units_file.read_text())
        for name, config in configs.items():
            unit = self.units.get(name)
            if unit is None:
                self._add(Unit(name, config, units_file=self.units_file, loaded_mtime_ns=mtime))
            else:
                unit.config, unit.load_state = config, "loaded"
                unit.units_file, unit.loaded_mtime_ns = self.units_file, mtime
        for name, unit in self.units.items():
            if name not in configs:
                unit.config, unit.load_state = None, "not-found"

    def _add(self, unit: Unit) -> Unit:
        self.units[unit.name] = unit
        path = unit_path(unit.name)
        self.bus.export(path, UnitInterface(unit))
        self.bus.export(path, ServiceIface(unit))
        return unit

    def _loaded(self, name: str) -> Unit:
        unit = self.units.get(name)
        if unit is None or unit.load_state != "loaded":
            raise DBusError(NO_SUCH_UNIT, f"Unit {name} not found.")
        return unit

    # -- jobs ------------------------------------------------------------------------------

    def _queue(self, unit: Unit, kind: str) -> str:
        if unit.job_task is not None and not unit.job_task.done():
            # mode "replace": the pending job of this unit is canceled.
            unit.job_task.cancel()
            old_id, old_path = unit.job
            self._removed(old_id, old_path, unit.name, "canceled")
        self.next_job += 1
        job = (self.next_job, f"{MANAGER_PATH}/job/{self.next_job}")
        unit.job = job
        unit.job_task = asyncio.get_running_loop().create_task(self._run_job(unit, kind, job))
        return job[1]

    async def _run_job(self, unit: Unit, kind: str, job: tuple[int, str]) -> None:
        await asyncio.sleep(unit.job_delay_s)
        forced, unit.forced_result = unit.forced_result, None
        if forced is not None:
            result = forced
            if forced == "failed" and kind in ("start", "restart"):
                unit.active_state, unit.sub_state, unit.result = "failed", "failed", "resources"
        else:
            if kind in ("stop", "restart"):
                await self._stop_process(unit)
            if kind in ("start", "restart"):
                await self._start_process(unit)
            result = "done"
        if unit.foreign_first is not None:
            self.next_job += 1
            other = self.next_job
            self._removed(other, f"{MANAGER_PATH}/job/{other}", unit.name, unit.foreign_first)
            unit.foreign_first = None
        unit.job = (0, "/")
        self._removed(job[0], job[1], unit.name, result)

    def _removed(self, job_id: int, job: str, unit: str, result: str) -> None:
        if self.subscribed:
            self.JobRemoved(job_id, job, unit, result)

    async def _start_process(self, unit: Unit) -> None:
        if unit.active_state == "active":
            return
        unit.invocation = secrets.token_bytes(16)
        unit.result, unit.exec_code, unit.exec_status = "success", 0, 0
        unit.exec_start_mono_us = time.monotonic_ns() // 1000
        unit.exec_start_rt_us = time.time_ns() // 1000
        argv = [str(a) for a in unit.cfg("argv", [])]
        environment = {**os.environ, "INVOCATION_ID": unit.invocation.hex()}
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                env=environment,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError:
            # systemd: the job is done (forked), then the exec fails with status 203/EXEC.
            unit.active_state, unit.sub_state, unit.result = "failed", "failed", "exit-code"
            unit.exec_code, unit.exec_status, unit.main_pid = CLD_EXITED, EXIT_EXEC, 0
            return
        unit.process, unit.stopping = process, False
        unit.main_pid = unit.exec_pid = process.pid
        unit.active_state, unit.sub_state = "active", "running"
        unit.watcher = asyncio.get_running_loop().create_task(self._watch(unit, process))

    async def _watch(self, unit: Unit, process: asyncio.subprocess.Process) -> None:
        returncode = await process.wait()
        if unit.process is not process:
            return
        unit.process, unit.main_pid = None, 0
        if returncode < 0:
            unit.exec_code, unit.exec_status = CLD_KILLED, -returncode
        else:
            unit.exec_code, unit.exec_status = CLD_EXITED, returncode
        if unit.stopping or returncode == 0:
            unit.active_state, unit.sub_state = "inactive", "dead"
        else:
            unit.active_state, unit.sub_state = "failed", "failed"
            unit.result = "exit-code" if returncode > 0 else "signal"

    async def _stop_process(self, unit: Unit) -> None:
        process, watcher = unit.process, unit.watcher
        if process is None or watcher is None:
            if unit.active_state == "active":
                unit.active_state, unit.sub_state = "inactive", "dead"
            return
        unit.stopping = True
        unit.active_state, unit.sub_state = "deactivating", "stop-sigterm"
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        timeout_s = int(unit.cfg("timeout_stop_usec", 90_000_000)) / 1e6
        try:
            await asyncio.wait_for(asyncio.shield(watcher), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await watcher

    async def shutdown(self) -> None:
        for unit in self.units.values():
            if unit.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(unit.process.pid, signal.SIGKILL)
                await unit.process.wait()

    # -- the D-Bus interface ---------------------------------------------------------------

    @dbus_method()
    def Subscribe(self) -> DBusVoid:
        self.subscribed = True

    @dbus_method()
    def LoadUnit(self, name: DBusStr) -> DBusObjectPath:
        unit = self.units.get(name)
        if unit is None:
            unit = self._add(Unit(name, None, load_state="not-found"))
        return unit_path(unit.name)

    @dbus_method()
    def GetUnit(self, name: DBusStr) -> DBusObjectPath:
        if name not in self.units:
            raise DBusError(NO_SUCH_UNIT, f"Unit {name} not loaded.")
        return unit_path(name)

    @dbus_method()
    def StartUnit(self, name: DBusStr, mode: DBusStr) -> DBusObjectPath:
        return self._queue(self._loaded(name), "start")

    @dbus_method()
    def StopUnit(self, name: DBusStr, mode: DBusStr) -> DBusObjectPath:
        return self._queue(self._loaded(name), "stop")

    @dbus_method()
    def RestartUnit(self, name: DBusStr, mode: DBusStr) -> DBusObjectPath:
        return self._queue(self._loaded(name), "restart")

    @dbus_method()
    def ResetFailedUnit(self, name: DBusStr) -> DBusVoid:
        unit = self._loaded(name)
        if unit.active_state == "failed":
            unit.active_state, unit.sub_state = "inactive", "dead"
        unit.result = "success"

    @dbus_method()
    def Reload(self) -> DBusVoid:
        self.reloads += 1
        self._load_file()

    @dbus_signal()
    def JobRemoved(self, job_id: int, job: str, unit: str, result: str) -> DBusJobRemoved:
        return [job_id, job, unit, result]


class Control(ServiceInterface):
    """What a test may ask of the stand-in beyond systemd's own interface."""

    def __init__(self, manager: Manager) -> None:
        super().__init__("org.orchestrator.test.FakeSystemd1")
        self.manager = manager

    def _unit(self, name: str) -> Unit:
        return self.manager._loaded(name)

    @dbus_method()
    def SetJobDelay(self, unit: DBusStr, seconds: DBusDouble) -> DBusVoid:
        self._unit(unit).job_delay_s = seconds

    @dbus_method()
    def ForceJobResult(self, unit: DBusStr, result: DBusStr) -> DBusVoid:
        self._unit(unit).forced_result = result

    @dbus_method()
    def ForeignJobRemovedFirst(self, unit: DBusStr, result: DBusStr) -> DBusVoid:
        self._unit(unit).foreign_first = result

    @dbus_method()
    def Reloads(self) -> DBusUInt32:
        return self.manager.reloads


async def serve(address: str, units_file: Path) -> None:
    bus = await MessageBus(bus_address=address).connect()
    manager = Manager(bus, units_file)
    bus.export(MANAGER_PATH, manager)
    bus.export(CONTROL_PATH, Control(manager))
    await bus.request_name(BUS_NAME)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print("ready", flush=True)
    gone = asyncio.ensure_future(bus.wait_for_disconnect())  # type: ignore[no-untyped-call]
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({gone, stopped}, return_when=asyncio.FIRST_COMPLETED)
    for task in (gone, stopped):
        task.cancel()
    await manager.shutdown()
    bus.disconnect()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--units", required=True, type=Path)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.address, args.units))
    sys.exit(0)


if __name__ == "__main__":
    main()
