"""systemd's notify protocol (``sd_notify(3)``), written out: one datagram per message.

The daemon's unit is ``Type=notify`` with ``WatchdogSec``: systemd considers it started when it
sends ``READY=1``, restarts it when ``WATCHDOG=1`` stops coming, and shows ``STATUS=`` in
``systemctl status``. The protocol is a few lines of text sent to ``$NOTIFY_SOCKET`` (a path, or
an abstract socket when it starts with ``@``), so it is hand-written rather than a dependency.
Outside systemd (no ``$NOTIFY_SOCKET``) every call is a no-op.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from orchestrator.log import get_logger


def socket_address(value: str) -> str | bytes:
    """``$NOTIFY_SOCKET`` as a ``sendto`` address: ``@name`` is the abstract socket ``\\0name``."""
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    return value


def render_message(fields: Mapping[str, str | int]) -> bytes:
    """``KEY=value`` lines; a value may not contain a newline (it would start another field)."""
    lines = []
    for key, value in fields.items():
        text = str(value)
        if "\n" in text:
            text = text.replace("\n", " ")
        lines.append(f"{key}={text}")
    return ("\n".join(lines) + "\n").encode()


def watchdog_interval_s(environ: Mapping[str, str] | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings: half of ``$WATCHDOG_USEC`` (systemd's advice),
    or None when the watchdog is off or meant for another process (``$WATCHDOG_PID``)."""
    env = os.environ if environ is None else environ
    usec = env.get("WATCHDOG_USEC", "")
    if not usec.isdigit() or int(usec) == 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid and (not pid.isdigit() or int(pid) != os.getpid()):
        return None
    return int(usec) / 1_000_000 / 2


class Notifier:
    """Sends notify messages to systemd; silent (and harmless) when not run by systemd."""

    def __init__(self, notify_socket: str | None = None) -> None:
        value = os.environ.get("NOTIFY_SOCKET") if notify_socket is None else notify_socket
        self.address: str | bytes | None = socket_address(value) if value else None
        self._sock: socket.socket | None = None
        self._last_status: str | None = None
        self._log = get_logger(component="sdnotify")

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def send(self, **fields: str | int) -> bool:
        """Send one message; never raises (a lost notification must not stop the daemon)."""
        if self.address is None:
            return False
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(render_message(fields), self.address)
        except OSError as exc:
            self._log.warning("sdnotify.failed", error=str(exc), fields=sorted(fields))
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        fields: dict[str, str | int] = {"READY": 1, "MAINPID": os.getpid()}
        if status is not None:
            fields["STATUS"] = status
            self._last_status = status
        return self.send(**fields)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG=1)

    def status(self, text: str) -> bool:
        """``STATUS=``, sent only when it changed (it is polled every second or so)."""
        if text == self._last_status:
            return False
        self._last_status = text
        return self.send(STATUS=text)

    def stopping(self, status: str | None = None) -> bool:
        fields: dict[str, str | int] = {"STOPPING": 1}
        if status is not None:
            fields["STATUS"] = status
            self._last_status = status
        return self.send(**fields)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
