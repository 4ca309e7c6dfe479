"""Kernel receive stamps on the simulated server's connections: when a request really arrived.

The server's handler runs only after its event loop has parsed the request, which behind 64
streaming responses is tens of milliseconds after the bytes arrived. For ``/sim/requests`` to
be a reference the load generator can be held against, each accepted connection asks the kernel
for ``SO_TIMESTAMPNS`` and keeps the receive stamp of the first read since the last request
took it (HTTP/1.1 without pipelining: one request at a time per connection). The stamp is
CLOCK_REALTIME, moved onto the monotonic clock with the two clocks read together.

The same connections stamp their sends: ``time.monotonic()`` as the send call returns (what
asyncio's transport calls for each chunk the handler writes). On loopback the receiver's
kernel stamp is taken inside that call, so this is the send as the wire saw it, within the
call's own few microseconds; the handler's stamp, after aiohttp's write path returned, is
later by whatever ran (or preempted the server) in between, which on a loaded machine is
milliseconds at p99 and would count as the client's error.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import sys
import time
from typing import Any, cast

_SO_TIMESTAMPNS: int | None = getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None
)
_TIMESPEC = struct.Struct("@qq")
_CMSG_ROOM = socket.CMSG_SPACE(_TIMESPEC.size)


def _monotonic_from(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    for level, kind, data in ancillary:
        if level != socket.SOL_SOCKET or kind != _SO_TIMESTAMPNS:
            continue
        if len(data) < _TIMESPEC.size:
            return None
        seconds, nanoseconds = cast(tuple[int, int], _TIMESPEC.unpack_from(data))
        realtime_minus_monotonic = time.time_ns() - time.monotonic_ns()
        return (seconds * 10**9 + nanoseconds - realtime_minus_monotonic) / 1e9
    return None


class StampedConnection(socket.socket):
    """An accepted connection whose ``recv`` (what asyncio's transport calls for aiohttp's
    protocol) keeps the kernel stamp of the first read a request has not claimed yet."""

    unclaimed: float | None = None
    last_send: float | None = None
    """When the last send call returned (monotonic seconds)."""

    def send(self, data: Any, flags: int = 0, /) -> int:
        sent = super().send(data, flags)
        self.last_send = time.monotonic()
        return sent

    def sendmsg(self, *args: Any) -> int:
        sent = super().sendmsg(*args)
        self.last_send = time.monotonic()
        return sent

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data, ancillary, _flags, _address = self.recvmsg(bufsize, _CMSG_ROOM, flags)
        if data and self.unclaimed is None:
            self.unclaimed = _monotonic_from(ancillary)
        return data

    def claim_arrival(self) -> float | None:
        """The arrival of the request now being handled (None: no kernel stamp)."""
        stamp, self.unclaimed = self.unclaimed, None
        return stamp


class StampedListener(socket.socket):
    """A listening socket whose accepted connections are :class:`StampedConnection`."""

    def accept(self) -> tuple[socket.socket, Any]:
        fd, address = self._accept()  # type: ignore[attr-defined]
        conn = StampedConnection(self.family, self.type, self.proto, fileno=fd)
        if socket.getdefaulttimeout() is None and self.gettimeout():
            conn.setblocking(True)
        # Inherited from the listener; asked again where the listener could not set it.
        with contextlib.suppress(OSError):
            conn.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS or 0, 1)
        return conn, address


def listener(family: int = socket.AF_INET) -> socket.socket:
    """A TCP listening socket that stamps arrivals where the platform can.

    The option is set on the listener itself: accepted connections inherit it, and the kernel
    stamps packets only once some socket asks, so a request sent with the connection's
    handshake would otherwise arrive unstamped. Linux turns stamping on for the machine from a
    work queue when no other socket had asked, so the first packets after a fresh listener can
    still arrive unstamped; their requests keep the handler's stamp (the first request a
    server sees is a readiness probe, long before any benchmark)."""
    if _SO_TIMESTAMPNS is None:
        return socket.socket(family, socket.SOCK_STREAM)
    sock = StampedListener(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return sock  # accepted connections try again, and keep the handler's stamp if not
    return sock


def arrival_of(transport_socket: object) -> float | None:
    """The kernel arrival stamp of the request on a transport's socket (asyncio hands out a
    ``TransportSocket`` wrapper whose ``_sock`` is the socket itself)."""
    sock = getattr(transport_socket, "_sock", transport_socket)
    if isinstance(sock, StampedConnection):
        return sock.claim_arrival()
    return None


def sent_of(transport_socket: object, since: float) -> float | None:
    """When the transport's socket last took bytes, if that was at or after ``since`` (the
    caller's clock before its write: an older stamp means the write was buffered, not sent);
    None otherwise or without a stamping socket (the caller then stamps itself)."""
    sock = getattr(transport_socket, "_sock", transport_socket)
    if isinstance(sock, StampedConnection) and sock.last_send is not None:
        return sock.last_send if sock.last_send >= since else None
    return None
