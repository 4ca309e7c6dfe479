"""A small HTTP/1.1 server on asyncio protocols and h11: what the simulated SGLang server serves on.

Why not aiohttp: every simulated server is a process of its own, started again for each trial,
and importing aiohttp (whose client half loads the system CA bundle twice at import) costs
about 0.35 s of CPU per start: most of what a short simulated trial costs the machine, hundreds
of times over in a sweep or the test suite. The simulated server needs routing, JSON and text
answers and chunked event streams; h11 parses and frames HTTP/1.1 (keep-alive, chunked
encoding, ``Expect: 100-continue``), so the wire stays correct without a framework.

Where a client could tell, it answers as uvicorn (SGLang's server) does: ``date`` and
``server: uvicorn`` headers, FastAPI's JSON bodies for an unknown path or method. A client that
goes away mid-response does not cancel its handler (a stream's next write raises
:class:`ConnectionResetError`), as with aiohttp's default before.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import socket
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import h11

from orchestrator.sim.stamped import arrival_of

JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"
EVENT_STREAM_TYPE = "text/event-stream; charset=utf-8"
SERVER_NAME = b"uvicorn"
LISTEN_BACKLOG = 1024


@dataclass(frozen=True)
class HttpResponse:
    """A whole response: status, body and its content type."""

    status: int = 200
    body: bytes = b""
    content_type: str | None = None

    @classmethod
    def json(cls, data: Any, status: int = 200) -> HttpResponse:
        return cls(status, json.dumps(data).encode(), JSON_TYPE)

    @classmethod
    def text(cls, text: str, status: int = 200) -> HttpResponse:
        return cls(status, text.encode(), TEXT_TYPE)


def reason(status: int) -> str:
    """The status line's phrase (``OK``, ``Service Unavailable``), as uvicorn logs it."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


class HttpRequest:
    """One received request, its body read whole (the simulated API's bodies are JSON)."""

    def __init__(
        self, head: h11.Request, body: bytes, connection: _Connection, arrival: float | None
    ) -> None:
        self.method = head.method.decode("ascii")
        self.target = head.target.decode("ascii", "replace")
        parts = urlsplit(self.target)
        self.path = unquote(parts.path)
        self.query: Mapping[str, str] = dict(parse_qsl(parts.query))
        self.headers: Mapping[str, str] = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in head.headers
        }
        """Lower-case names (h11 normalises them)."""
        self.body = body
        self.arrival = arrival
        """The kernel's receive stamp of the request's first bytes (monotonic seconds), where
        the socket keeps one (:mod:`orchestrator.sim.stamped`)."""
        self._connection = connection

    @property
    def socket(self) -> object:
        """The connection's socket, as asyncio's transport hands it out."""
        return self._connection.socket

    @property
    def peer(self) -> tuple[str, int] | None:
        return self._connection.peer

    def json(self) -> Any:
        """The body as JSON (:class:`json.JSONDecodeError` when it is not)."""
        return json.loads(self.body or b"null")

    def stream(self) -> EventStream:
        """Start a streamed ``200`` (``text/event-stream``, chunked); the handler writes to it
        and returns it when done."""
        return self._connection.start_stream()


class EventStream:
    """A response being streamed: each :meth:`write` goes out as one chunk."""

    status = 200

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection

    @property
    def socket(self) -> object:
        return self._connection.socket

    async def write(self, data: bytes) -> None:
        """Send one chunk, waiting while the socket's send buffer is full; raises
        :class:`ConnectionResetError` once the client has gone."""
        await self._connection.write_chunk(data)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse | EventStream]]

Route = tuple[str, str]
"""(method, path)."""


class Router:
    """Handlers by exact path and method; FastAPI's 404 and 405 otherwise. A GET route also
    answers HEAD."""

    def __init__(self) -> None:
        self._routes: dict[str, dict[str, Handler]] = {}

    def add(self, method: str, path: str, handler: Handler) -> None:
        methods = self._routes.setdefault(path, {})
        methods[method] = handler
        if method == "GET":
            methods.setdefault("HEAD", handler)

    async def dispatch(self, request: HttpRequest) -> HttpResponse | EventStream:
        methods = self._routes.get(request.path)
        if methods is None:
            return HttpResponse.json({"detail": "Not Found"}, 404)
        handler = methods.get(request.method)
        if handler is None:
            return HttpResponse.json({"detail": "Method Not Allowed"}, 405)
        return await handler(request)


class _Clock:
    """The ``date`` header, formatted once a second."""

    second = -1
    value = b""

    @classmethod
    def date(cls) -> bytes:
        now = int(time.time())
        if now != cls.second:
            cls.second = now
            cls.value = email.utils.formatdate(now, usegmt=True).encode()
        return cls.value


def _headers(
    content_type: str | None, extra: list[tuple[bytes, bytes]]
) -> list[tuple[bytes, bytes]]:
    headers = [(b"date", _Clock.date()), (b"server", SERVER_NAME)]
    if content_type is not None:
        headers.append((b"content-type", content_type.encode()))
    return headers + extra


class _Connection(asyncio.Protocol):
    """One client connection: requests one at a time (h11 holds a pipelined next one until
    this one's response is complete)."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._h11 = h11.Connection(h11.SERVER)
        self._transport: asyncio.Transport | None = None
        self.socket: object = None
        self.peer: tuple[str, int] | None = None
        self._head: h11.Request | None = None
        self._arrival: float | None = None
        self._body = bytearray()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._writable: asyncio.Future[None] | None = None

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        self.socket = sock
        # As uvicorn's sockets are: asyncio sets it only where the socket's proto says TCP,
        # which an accepted StampedConnection's does not; without it a chunk written after the
        # headers waits out the client's delayed ACK (tens of ms on loopback).
        with contextlib.suppress(OSError, AttributeError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.peer = (str(peer[0]), int(peer[1])) if peer else None
        self._server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._h11.receive_data(data)
        self._advance()

    def eof_received(self) -> bool:
        self._h11.receive_data(b"")
        self._advance()
        return self._task is not None  # keep the write side open for a response under way

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server.connections.discard(self)
        if self._writable is not None and not self._writable.done():
            self._writable.set_exception(ConnectionResetError("the client went away"))

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # --- requests -----------------------------------------------------------------------------

    def _advance(self) -> None:
        """Take events until a whole request is in (then answer it) or more data is needed."""
        while self._task is None and not self._closed:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._refuse(exc)
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._head = event
                self._body = bytearray()
                # Claimed by every request, so a keep-alive connection's next one gets its own.
                self._arrival = arrival_of(self.socket)
                if self._h11.they_are_waiting_for_100_continue:
                    self._send(h11.InformationalResponse(
                        status_code=100, headers=[], reason=b"Continue"))
            elif isinstance(event, h11.Data):
                self._body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert self._head is not None
                request = HttpRequest(self._head, bytes(self._body), self, self._arrival)
                self._head, self._body = None, bytearray()
                self._task = asyncio.get_running_loop().create_task(self._respond(request))
                self._server.tasks.add(self._task)
                self._task.add_done_callback(self._server.tasks.discard)
            elif isinstance(event, h11.ConnectionClosed):
                self._close()
                return

    def _refuse(self, exc: h11.RemoteProtocolError) -> None:
        if self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            status = exc.error_status_hint
            self._send(
                h11.Response(status_code=status, reason=reason(status), headers=_headers(
                    TEXT_TYPE, [(b"content-length", b"0"), (b"connection", b"close")])),
                h11.EndOfMessage(),
            )
        self._close()

    async def _respond(self, request: HttpRequest) -> None:
        try:
            response = await self._server.handler(request)
        except Exception:
            # A bug of the simulator's: the traceback to its log, a 500 to the client.
            traceback.print_exc(file=sys.stderr)
            response = HttpResponse.text("Internal Server Error", 500)
        if isinstance(response, EventStream):
            self._send(h11.EndOfMessage())
        elif self._h11.our_state is h11.SEND_RESPONSE:
            body = b"" if request.method == "HEAD" else response.body
            self._send(
                h11.Response(
                    status_code=response.status, reason=reason(response.status),
                    headers=_headers(
                    response.content_type,
                    [(b"content-length", str(len(response.body)).encode())])),
                *([h11.Data(data=body)] if body else []),
                h11.EndOfMessage(),
            )
        else:
            self._close()  # a stream that failed half-way: nothing valid can follow it
        self._server.answered(request, response.status)
        self._task = None
        self._next_cycle()

    def _next_cycle(self) -> None:
        if self._closed:
            return
        if self._server.closing:
            self._close()
        elif self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            self._advance()
        else:  # either side asked to close (HTTP/1.0, ``connection: close``) or has closed
            self._close()

    # --- responses ----------------------------------------------------------------------------

    def start_stream(self) -> EventStream:
        self._send(h11.Response(status_code=200, reason=b"OK", headers=_headers(
            EVENT_STREAM_TYPE, [(b"transfer-encoding", b"chunked")])))
        return EventStream(self)

    async def write_chunk(self, data: bytes) -> None:
        if self._closed:
            raise ConnectionResetError("the client went away")
        if data:
            self._send(h11.Data(data=data))
        if self._writable is not None and not self._writable.done():
            await self._writable

    def _send(self, *events: h11.Event) -> None:
        out = b"".join(self._h11.send(event) or b"" for event in events)
        if self._transport is not None and not self._closed and out:
            self._transport.write(out)

    def _close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    def close_when_idle(self) -> None:
        """Close now if no response is under way (else :meth:`_next_cycle` closes it after)."""
        if self._task is None:
            self._close()


class HttpServer:
    """Serves ``handler`` on a listening socket; ``on_answer`` hears of each response (the
    access log)."""

    def __init__(
        self, handler: Handler, on_answer: Callable[[HttpRequest, int], None] | None = None
    ) -> None:
        self.handler = handler
        self._on_answer = on_answer
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.closing = False
        """Shutting down: no new request is taken, a connection closes after its response."""
        self._server: asyncio.Server | None = None

    def answered(self, request: HttpRequest, status: int) -> None:
        if self._on_answer is not None:
            self._on_answer(request, status)

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Connection(self), sock=sock, backlog=LISTEN_BACKLOG
        )

    async def close(self) -> None:
        """Shut down as uvicorn does by default: stop listening, close idle connections, and
        wait, without a bound, for the responses under way; each connection closes after its
        own. A response that never ends (a hung request) keeps the process alive until the
        service manager kills it, as it keeps a real SGLang server."""
        self.closing = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close_when_idle()
        while self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)
