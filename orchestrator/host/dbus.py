"""systemd on this machine over D-Bus (``address: local``), with dbus-fast.

Why D-Bus here rather than ``systemctl`` as a subprocess: a job's end is its own ``JobRemoved``
signal carrying systemd's job result (done|canceled|timeout|failed|dependency|skipped), not an
exit status to interpret; and ``Service.ExecStart`` (``a(sasbttttuii)``) is the exact argv that
``systemctl show`` prints joined and unquoted. Facts this rests on (FACTS: systemd, D-Bus):
``Manager.StartUnit/StopUnit/RestartUnit(name, "replace")`` return a job path at once; the
client must ``Subscribe()`` and listen for ``JobRemoved(id, job, unit, result)`` BEFORE queueing
the job (a quick job can end before the reply is read) and pick its own job by path (other
clients' jobs on the same unit arrive too); ``Unit.InvocationID`` is 16 bytes whose hex is what
``systemctl`` prints; ``Manager.Reload()`` is daemon-reload and replies when it is done.

dbus-fast rather than pydbus (the project card's choice): pydbus is unmaintained since 2016,
synchronous and needs PyGObject; dbus-fast is asyncio-native and maintained.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dbus_fast import BusType, Message, MessageType
from dbus_fast.aio import MessageBus
from dbus_fast.errors import DBusError

from orchestrator.host.systemd import (
    STATE_PROPERTIES,
    SystemdError,
    UnitFile,
    UnitState,
    listed_files,
    unit_state,
)
from orchestrator.host.transport import Transport
from orchestrator.host.unitcontrol import JOB_RESULTS, JobFailed, JobOperation, JobTimeout
from orchestrator.log import get_logger
from orchestrator.types import FailureCause

SYSTEMD_BUS_NAME = "org.freedesktop.systemd1"
DEFAULT_SYSTEM_BUS_ADDRESS = "unix:path=/run/dbus/system_bus_socket"
MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER_INTERFACE = "org.freedesktop.systemd1.Manager"
UNIT_INTERFACE = "org.freedesktop.systemd1.Unit"
SERVICE_INTERFACE = "org.freedesktop.systemd1.Service"
PROPERTIES_INTERFACE = "org.freedesktop.DBus.Properties"
DBUS_NAME = "org.freedesktop.DBus"
DBUS_PATH = "/org/freedesktop/DBus"
UNIT_PATH_PREFIX = "/org/freedesktop/systemd1/unit"
JOB_MODE = "replace"
USEC_INFINITY = 2**64 - 1
_ALREADY_SUBSCRIBED = "org.freedesktop.systemd1.AlreadySubscribed"
_UNKNOWN_INTERFACE = (
    "org.freedesktop.DBus.Error.UnknownInterface",
    "org.freedesktop.DBus.Error.InvalidArgs",
)
JOB_REMOVED_MATCH = (
    f"type='signal',sender='{SYSTEMD_BUS_NAME}',path='{MANAGER_PATH}',"
    f"interface='{MANAGER_INTERFACE}',member='JobRemoved'"
)
_HEX = "0123456789abcdef"
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


# --- errors --------------------------------------------------------------------------------


class BusCallFailed(SystemdError):
    """systemd (or the bus) answered a call with a D-Bus error; its name is the evidence
    (e.g. ``org.freedesktop.systemd1.NoSuchUnit``)."""

    def __init__(self, unit: str, method: str, error_name: str, text: str) -> None:
        super().__init__(unit, f"{method}: {error_name}: {text}")
        self.method = method
        self.error_name = error_name
        self.text = text

    @property
    def evidence(self) -> dict[str, Any]:
        return {**super().evidence, "method": self.method, "error_name": self.error_name}


class BusUnavailable(SystemdError):
    """No connection to the bus, or it dropped, or nobody owns ``org.freedesktop.systemd1``:
    for a local host the bus is the way to it."""

    cause: FailureCause = "host-unreachable"

    def __init__(self, address: str, reason: str) -> None:
        super().__init__("(manager)", f"D-Bus {address}: {reason}")
        self.address = address
        self.reason = reason


def system_bus_address(environ: Mapping[str, str] = os.environ) -> str:
    """The system bus as libdbus finds it: ``DBUS_SYSTEM_BUS_ADDRESS`` when set and not empty,
    else the standard socket."""
    return environ.get("DBUS_SYSTEM_BUS_ADDRESS") or DEFAULT_SYSTEM_BUS_ADDRESS


# --- pure: object paths --------------------------------------------------------------------


def bus_label_escape(label: str) -> str:
    """systemd's ``bus_label_escape``: every byte outside [A-Za-z0-9] becomes ``_xx`` (lower
    hex), and so does a digit in first place; the empty label is ``_``."""
    if not label:
        return "_"
    escaped: list[str] = []
    for position, byte in enumerate(label.encode()):
        char = chr(byte)
        if (char.isascii() and char.isalpha()) or (position > 0 and char in "0123456789"):
            escaped.append(char)
        else:
            escaped.append("_" + _HEX[byte >> 4] + _HEX[byte & 15])
    return "".join(escaped)


def bus_label_unescape(label: str) -> str:
    """systemd's ``bus_label_unescape``: ``_xx`` (hex, either case) is a byte, any other
    character itself; ``_`` alone is the empty label."""
    if label == "_":
        return ""
    out = bytearray()
    position = 0
    while position < len(label):
        pair = label[position + 1 : position + 3]
        if label[position] == "_" and len(pair) == 2 and all(c in _HEX_DIGITS for c in pair):
            out.append(int(pair, 16))
            position += 3
        else:
            out.extend(label[position].encode())
            position += 1
    return out.decode("utf-8", errors="surrogateescape")


def unit_object_path(name: str) -> str:
    """The object path systemd gives unit ``name`` (``sd_bus_path_encode`` of the unit prefix):
    ``sglang.service`` -> ``/org/freedesktop/systemd1/unit/sglang_2eservice``."""
    return f"{UNIT_PATH_PREFIX}/{bus_label_escape(name)}"


def unit_name_from_path(path: str) -> str:
    """The unit name an object path under :data:`UNIT_PATH_PREFIX` stands for."""
    prefix = UNIT_PATH_PREFIX + "/"
    if not path.startswith(prefix) or "/" in path[len(prefix) :]:
        raise ValueError(f"not a unit object path: {path!r}")
    return bus_label_unescape(path[len(prefix) :])


# --- pure: properties ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ExecCommand:
    """One entry of ``Service.ExecStart`` (``a(sasbttttuii)``): the exact argv systemd runs."""

    path: str
    argv: tuple[str, ...]
    ignore_errors: bool
    start_realtime_us: int
    start_monotonic_us: int
    exit_realtime_us: int
    exit_monotonic_us: int
    pid: int
    code: int
    status: int


def exec_commands(value: Sequence[Sequence[Any]]) -> tuple[ExecCommand, ...]:
    """``Service.ExecStart`` as D-Bus delivers it -> typed commands."""
    commands = []
    for entry in value:
        path, argv, ignore, start_rt, start_mono, exit_rt, exit_mono, pid, code, status = entry
        commands.append(
            ExecCommand(
                path=str(path),
                argv=tuple(str(a) for a in argv),
                ignore_errors=bool(ignore),
                start_realtime_us=int(start_rt),
                start_monotonic_us=int(start_mono),
                exit_realtime_us=int(exit_rt),
                exit_monotonic_us=int(exit_mono),
                pid=int(pid),
                code=int(code),
                status=int(status),
            )
        )
    return tuple(commands)


def shown_exec(commands: Sequence[ExecCommand]) -> str:
    """The commands as ``systemctl show -p ExecStart`` prints them (argv joined unquoted), so
    text-based checks such as :func:`systemd.shown_exec_argv` read both sources alike."""
    return " ".join(
        f"{{ path={c.path} ; argv[]={' '.join(c.argv)} ; "
        f"ignore_errors={'yes' if c.ignore_errors else 'no'} ; start_time=[n/a] ; "
        f"stop_time=[n/a] ; pid={c.pid} ; code=(null) ; status={c.status}/0 }}"
        for c in commands
    )


def _timespan_text(usec: int) -> str:
    return "infinity" if usec >= USEC_INFINITY else f"{usec}us"


def show_properties(properties: Mapping[str, Any]) -> dict[str, str]:
    """Unit and Service property values (unwrapped from their variants) -> the strings
    ``systemctl show`` prints for them, for every property of :data:`STATE_PROPERTIES` found.

    ``InvocationID`` (``ay``) becomes its lowercase hex, empty when unset; ``Job`` (``(uo)``)
    its id, empty when none; booleans ``yes``/``no``; lists space-joined; time spans in us.
    """
    shown: dict[str, str] = {}
    for key in STATE_PROPERTIES:
        if key not in properties:
            continue
        value = properties[key]
        if key == "InvocationID":
            shown[key] = bytes(value).hex()
        elif key == "Job":
            job_id = int(value[0]) if value else 0
            shown[key] = str(job_id) if job_id else ""
        elif key == "ExecStart":
            shown[key] = shown_exec(exec_commands(value))
        elif key == "TimeoutStopUSec":
            shown[key] = _timespan_text(int(value))
        elif isinstance(value, bool):
            shown[key] = "yes" if value else "no"
        elif isinstance(value, list | tuple):
            shown[key] = " ".join(str(v) for v in value)
        else:
            shown[key] = str(value)
    return shown


def _unwrap(properties: Mapping[str, Any]) -> dict[str, Any]:
    return {key: getattr(variant, "value", variant) for key, variant in properties.items()}


# --- I/O -----------------------------------------------------------------------------------


class _JobWatch:
    """``JobRemoved`` results by job path, collected from before a job is queued, so a job
    that ends before its StartUnit reply is read is not missed."""

    def __init__(self) -> None:
        self.results: dict[str, str] = {}
        self._arrived = asyncio.Event()

    def handle(self, message: Message) -> None:
        if (
            message.message_type is MessageType.SIGNAL
            and message.member == "JobRemoved"
            and message.interface == MANAGER_INTERFACE
            and message.path == MANAGER_PATH
            and message.signature == "uoss"
        ):
            _job_id, job, _unit, result = message.body
            self.results[str(job)] = str(result)
            self._arrived.set()

    async def result_of(self, job: str) -> str:
        while job not in self.results:
            self._arrived.clear()
            await self._arrived.wait()
        return self.results[job]


class SystemdBus:
    """A connection to systemd's manager over D-Bus: unit state and jobs awaited to their end.

    ``address`` None means the system bus (``DBUS_SYSTEM_BUS_ADDRESS`` or the standard socket);
    tests give a private bus's address. Every call is bounded by an explicit ``timeout``.
    """

    def __init__(self, address: str | None = None, *, name: str = "local") -> None:
        self.address = address
        self.name = name
        self._bus: MessageBus | None = None
        self._gone: asyncio.Future[None] | None = None
        self._log = get_logger(host=name)

    @property
    def _where(self) -> str:
        return self.address or "system bus"

    async def connect(self, *, timeout: float = 10.0) -> None:
        """Connect, add the JobRemoved match and ``Subscribe()`` (once per connection)."""
        if self._bus is not None and self._bus.connected:
            return
        if self.address is None:
            bus = MessageBus(bus_type=BusType.SYSTEM)
        else:
            bus = MessageBus(bus_address=self.address)
        try:
            async with asyncio.timeout(timeout):
                await bus.connect()
                (owned,) = await self._raw_call(
                    bus, DBUS_NAME, DBUS_PATH, DBUS_NAME, "NameHasOwner", "s", [SYSTEMD_BUS_NAME]
                )
                if not owned:  # asked anyway, the bus would try to activate it, and fail
                    raise BusUnavailable(self._where, f"{SYSTEMD_BUS_NAME} is not on the bus")
                await self._raw_call(
                    bus, DBUS_NAME, DBUS_PATH, DBUS_NAME, "AddMatch", "s", [JOB_REMOVED_MATCH]
                )
                try:
                    await self._raw_call(
                        bus, SYSTEMD_BUS_NAME, MANAGER_PATH, MANAGER_INTERFACE, "Subscribe"
                    )
                except DBusError as exc:
                    if exc.type != _ALREADY_SUBSCRIBED:
                        raise
        except BusUnavailable:
            bus.disconnect()
            raise
        except (OSError, TimeoutError) as exc:
            bus.disconnect()
            raise BusUnavailable(self._where, f"cannot connect: {exc!r}") from exc
        except DBusError as exc:
            bus.disconnect()
            raise BusUnavailable(self._where, f"{exc.type}: {exc.text}") from exc
        except Exception as exc:  # dbus-fast's AuthError and friends
            bus.disconnect()
            raise BusUnavailable(self._where, f"cannot connect: {exc!r}") from exc
        self._bus = bus
        disconnected = bus.wait_for_disconnect()  # type: ignore[no-untyped-call]
        self._gone = asyncio.ensure_future(disconnected)
        self._gone.add_done_callback(self._disconnected)
        self._log.info("dbus.connected", address=self._where, unique_name=bus.unique_name)

    def _disconnected(self, gone: asyncio.Future[None]) -> None:
        error = None if gone.cancelled() else gone.exception()
        self._log.info(
            "dbus.disconnected", address=self._where, error=repr(error) if error else None
        )

    async def close(self) -> None:
        bus, gone = self._bus, self._gone
        self._bus = self._gone = None
        if bus is not None:
            bus.disconnect()
        if gone is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                async with asyncio.timeout(5.0):
                    await gone

    async def __aenter__(self) -> SystemdBus:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- calls ---------------------------------------------------------------------------------

    @staticmethod
    async def _raw_call(
        bus: MessageBus,
        destination: str,
        path: str,
        interface: str,
        member: str,
        signature: str = "",
        body: Sequence[Any] = (),
    ) -> list[Any]:
        reply = await bus.call(
            Message(
                destination=destination,
                path=path,
                interface=interface,
                member=member,
                signature=signature,
                body=list(body),
            )
        )
        if reply.message_type is MessageType.ERROR:
            raise DBusError(reply.error_name or "unknown", str(reply.body[0] if reply.body else ""))
        return list(reply.body)

    async def _call(
        self,
        unit: str,
        path: str,
        interface: str,
        member: str,
        signature: str = "",
        body: Sequence[Any] = (),
    ) -> list[Any]:
        """One call to systemd; D-Bus errors become :class:`BusCallFailed`, a lost bus
        :class:`BusUnavailable`. The caller bounds it with a timeout."""
        await self.connect()
        assert self._bus is not None
        bus = self._bus
        try:
            return await self._raw_call(
                bus, SYSTEMD_BUS_NAME, path, interface, member, signature, body
            )
        except DBusError as exc:
            if exc.type in (
                "org.freedesktop.DBus.Error.ServiceUnknown",
                "org.freedesktop.DBus.Error.NameHasNoOwner",
            ):
                raise BusUnavailable(self._where, f"{exc.type}: {exc.text}") from exc
            raise BusCallFailed(unit, member, exc.type, exc.text) from exc
        except (OSError, EOFError) as exc:
            self._bus = None
            raise BusUnavailable(self._where, f"connection lost: {exc!r}") from exc

    async def get_unit(self, name: str, *, timeout: float = 10.0) -> str:
        """The unit's object path, loading it if needed (``LoadUnit``: an unknown unit still
        gets an object, with ``LoadState=not-found``)."""
        async with asyncio.timeout(timeout):
            (path,) = await self._call(
                name, MANAGER_PATH, MANAGER_INTERFACE, "LoadUnit", "s", [name]
            )
        return str(path)

    async def _all_properties(self, unit: str, path: str, interface: str) -> dict[str, Any]:
        try:
            (properties,) = await self._call(
                unit, path, PROPERTIES_INTERFACE, "GetAll", "s", [interface]
            )
        except BusCallFailed as exc:
            if exc.error_name in _UNKNOWN_INTERFACE:
                return {}  # not a service (e.g. a socket unit)
            raise
        return _unwrap(properties)

    async def properties(self, name: str, *, timeout: float = 10.0) -> dict[str, Any]:
        """All Unit and Service properties of ``name`` (Unit's win on a clash), unwrapped."""
        async with asyncio.timeout(timeout):
            path = await self.get_unit(name, timeout=timeout)
            unit_props, service_props = await asyncio.gather(
                self._all_properties(name, path, UNIT_INTERFACE),
                self._all_properties(name, path, SERVICE_INTERFACE),
            )
        return {**service_props, **unit_props}

    async def unit_state(self, name: str, *, timeout: float = 10.0) -> UnitState:
        """The same :class:`UnitState` ``systemctl show`` gives, read from the Unit and
        Service interfaces (``raw`` holds the values as systemctl would print them)."""
        return unit_state(show_properties(await self.properties(name, timeout=timeout)))

    async def exec_start(self, name: str, *, timeout: float = 10.0) -> list[str]:
        """The exact argv of the unit's (last) ``ExecStart``; empty when it has none."""
        async with asyncio.timeout(timeout):
            path = await self.get_unit(name, timeout=timeout)
            (variant,) = await self._call(
                name, path, PROPERTIES_INTERFACE, "Get", "ss", [SERVICE_INTERFACE, "ExecStart"]
            )
        commands = exec_commands(getattr(variant, "value", variant))
        return list(commands[-1].argv) if commands else []

    # -- jobs ----------------------------------------------------------------------------------

    async def _job(self, operation: JobOperation, method: str, name: str, timeout: float) -> str:
        """Queue a job and wait for ITS ``JobRemoved``; raise unless the result is ``done``."""
        await self.connect()
        assert self._bus is not None and self._gone is not None
        bus, gone = self._bus, self._gone
        watch = _JobWatch()
        bus.add_message_handler(watch.handle)  # before the call: the job may end at once
        job: str | None = None
        try:
            async with asyncio.timeout(timeout):
                (job_path,) = await self._call(
                    name, MANAGER_PATH, MANAGER_INTERFACE, method, "ss", [name, JOB_MODE]
                )
                job = str(job_path)
                result = await _unless_disconnected(gone, watch.result_of(job), self._where)
        except TimeoutError as exc:
            raise JobTimeout(name, operation, timeout, job=job) from exc
        finally:
            bus.remove_message_handler(watch.handle)
        log = self._log.bind(unit=name, job=job, result=result)
        if result != "done":
            log.warning("unit.job_failed", operation=operation)
            raise JobFailed(
                name, operation, result if result in JOB_RESULTS else str(result), job=job
            )
        log.info(f"unit.{operation}_done")
        return job

    async def start(self, name: str, *, timeout: float) -> str:
        """``StartUnit``; returns the job path once the job is done (Type=simple: forked)."""
        return await self._job("start", "StartUnit", name, timeout)

    async def stop(self, name: str, *, timeout: float) -> str:
        """``StopUnit``; returns once the unit's processes are gone (the job is done)."""
        return await self._job("stop", "StopUnit", name, timeout)

    async def restart(self, name: str, *, timeout: float) -> str:
        """``RestartUnit``: stop then start as one job (the lifecycle uses stop, then start)."""
        return await self._job("restart", "RestartUnit", name, timeout)

    async def reset_failed(self, name: str, *, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            await self._call(name, MANAGER_PATH, MANAGER_INTERFACE, "ResetFailedUnit", "s", [name])

    async def reload(self, *, timeout: float = 60.0) -> None:
        """``Manager.Reload()`` (daemon-reload); systemd replies once the reload is complete."""
        async with asyncio.timeout(timeout):
            await self._call("(manager)", MANAGER_PATH, MANAGER_INTERFACE, "Reload")
        self._log.info("manager.reloaded")


async def _unless_disconnected(
    gone: asyncio.Future[None], waiting: Coroutine[Any, Any, str], where: str
) -> str:
    """Await ``waiting`` (a job result), failing at once if the connection drops (``gone``
    completes). ``gone`` is the connection's own watch and is never cancelled here: cancelling
    a task that awaits dbus-fast's disconnect future would cancel that future itself."""
    result_task: asyncio.Task[str] = asyncio.ensure_future(waiting)
    try:
        either: set[asyncio.Future[Any]] = {result_task, gone}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if result_task.done():
            return result_task.result()
        raise BusUnavailable(where, "connection lost while waiting for a job")
    finally:
        if not result_task.done():
            result_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await result_task


class BusUnitControl:
    """:class:`~orchestrator.host.unitcontrol.UnitControl` over :class:`SystemdBus`; the unit's
    files are read through ``files`` (this machine's transport) at the paths the manager
    gives, as ``systemctl cat`` reads them."""

    mechanism = "dbus"

    def __init__(self, bus: SystemdBus, files: Transport) -> None:
        self.bus = bus
        self.files = files

    async def show(
        self, unit: str, props: Sequence[str] = STATE_PROPERTIES, *, timeout: float
    ) -> UnitState:
        return await self.bus.unit_state(unit, timeout=timeout)

    async def cat(self, unit: str, *, timeout: float) -> list[UnitFile]:
        state = await self.bus.unit_state(unit, timeout=timeout)
        return await listed_files(self.files, unit, state, timeout=timeout)

    async def start(self, unit: str, *, timeout: float) -> None:
        await self.bus.start(unit, timeout=timeout)

    async def stop(self, unit: str, *, timeout: float) -> None:
        await self.bus.stop(unit, timeout=timeout)

    async def reset_failed(self, unit: str, *, timeout: float) -> None:
        await self.bus.reset_failed(unit, timeout=timeout)

    async def daemon_reload(self, *, timeout: float) -> None:
        await self.bus.reload(timeout=timeout)
