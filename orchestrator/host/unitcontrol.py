"""The unit operations the restart protocol needs, whichever way they reach systemd.

Over SSH they are ``systemctl`` commands through a :class:`Transport`; on this machine
(``address: local``) they are D-Bus calls (``host/dbus.py``). The lifecycle takes a
:class:`UnitControl` and never knows which it has. Both sides raise the same errors: a job that
did not end ``done`` is :class:`JobFailed`, one that did not end within its bound is
:class:`JobTimeout`, so a caller decides on the failure, not on the mechanism.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

from orchestrator.host import systemd
from orchestrator.host.systemd import STATE_PROPERTIES, SystemdError, UnitFile, UnitState
from orchestrator.host.transport import CommandTimeout, CompletedCommand, Transport
from orchestrator.types import FailureCause

JobOperation = Literal["start", "stop", "restart"]
JobResult = Literal["done", "canceled", "timeout", "failed", "dependency", "skipped"]
JOB_RESULTS: tuple[JobResult, ...] = (
    "done",
    "canceled",
    "timeout",
    "failed",
    "dependency",
    "skipped",
)


class JobError(SystemdError):
    """A start/stop/restart job that did not end ``done``: failed, or past its bound."""

    def __init__(
        self,
        unit: str,
        operation: JobOperation,
        what: str,
        *,
        job: str | None,
        start_cause: FailureCause,
        command: CompletedCommand | None = None,
    ) -> None:
        super().__init__(unit, f"{operation} {what}", command)
        self.operation: JobOperation = operation
        self.job = job
        # A stop that did not end ``done`` leaves the old process's fate unknown, failed or
        # past its bound alike; a start's failure says what became of the new process.
        self.cause: FailureCause = "stop-timeout" if operation == "stop" else start_cause

    @property
    def evidence(self) -> dict[str, Any]:
        return {**super().evidence, "operation": self.operation}


class JobFailed(JobError):
    """A start/stop/restart job ended without ``done``.

    ``result`` is systemd's job result where it is known (D-Bus ``JobRemoved``); ``systemctl``
    only says it exited non-zero, so there it is None and ``command`` holds the output.
    """

    def __init__(
        self,
        unit: str,
        operation: JobOperation,
        result: JobResult | str | None,
        *,
        job: str | None = None,
        command: CompletedCommand | None = None,
    ) -> None:
        what = f"job result {result}" if result is not None else "systemctl failed"
        # A start that failed is the new process dying at startup.
        super().__init__(unit, operation, what, job=job, start_cause="exited", command=command)
        self.job_result = result

    @property
    def evidence(self) -> dict[str, Any]:
        return {**super().evidence, "job_result": self.job_result}


class JobTimeout(JobError):
    """A job did not finish within ``timeout_s``; it may still be queued or running."""

    def __init__(
        self, unit: str, operation: JobOperation, timeout_s: float, *, job: str | None = None
    ) -> None:
        what = f"did not finish within {timeout_s:g}s"
        super().__init__(unit, operation, what, job=job, start_cause="ready-timeout")
        self.timeout_s = timeout_s

    @property
    def evidence(self) -> dict[str, Any]:
        return {**super().evidence, "timeout_s": self.timeout_s}


@runtime_checkable
class UnitControl(Protocol):
    """Read and drive one host's units. ``start``/``stop`` return when systemd's job is over
    (start: the service is started per its Type; stop: its control group is empty)."""

    async def show(
        self, unit: str, props: Sequence[str] = STATE_PROPERTIES, *, timeout: float
    ) -> UnitState:
        """The unit's state; an unknown unit is ``LoadState=not-found``, not an error.
        ``props`` is a hint: an implementation may return more."""
        ...

    async def cat(self, unit: str, *, timeout: float) -> list[UnitFile]:
        """The unit's fragment and drop-ins as the manager lists them, with their text."""
        ...

    async def start(self, unit: str, *, timeout: float) -> None: ...

    async def stop(self, unit: str, *, timeout: float) -> None: ...

    async def reset_failed(self, unit: str, *, timeout: float) -> None: ...

    async def daemon_reload(self, *, timeout: float) -> None: ...


class SystemctlControl:
    """:class:`UnitControl` as ``systemctl`` commands over a transport (SSH or local)."""

    mechanism = "systemctl"

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def show(
        self, unit: str, props: Sequence[str] = STATE_PROPERTIES, *, timeout: float
    ) -> UnitState:
        return await systemd.show(self.transport, unit, props, timeout=timeout)

    async def cat(self, unit: str, *, timeout: float) -> list[UnitFile]:
        return await systemd.cat(self.transport, unit, timeout=timeout)

    async def start(self, unit: str, *, timeout: float) -> None:
        await self._job("start", unit, timeout)

    async def stop(self, unit: str, *, timeout: float) -> None:
        await self._job("stop", unit, timeout)

    async def reset_failed(self, unit: str, *, timeout: float) -> None:
        await systemd.reset_failed(self.transport, unit, timeout=timeout)

    async def daemon_reload(self, *, timeout: float) -> None:
        await systemd.daemon_reload(self.transport, timeout=timeout)

    async def _job(self, operation: JobOperation, unit: str, timeout: float) -> None:
        """``systemctl start|stop`` with its errors told apart: a non-zero exit is a failed
        job, a command past its timeout a job that did not finish (the transport stopped it)."""
        try:
            if operation == "start":
                await systemd.start(self.transport, unit, timeout=timeout)
            else:
                await systemd.stop(self.transport, unit, timeout=timeout)
        except CommandTimeout as exc:
            raise JobTimeout(unit, operation, timeout) from exc
        except SystemdError as exc:
            raise JobFailed(unit, operation, None, command=exc.result) from exc
