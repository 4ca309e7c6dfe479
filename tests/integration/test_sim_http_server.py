"""The simulated server's HTTP/1.1 layer on a real loopback socket: keep-alive, pipelining,
chunked streams, FastAPI's 404/405, ``Expect: 100-continue``, a client that goes away."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest

from orchestrator.sim.http_server import (
    EventStream,
    HttpRequest,
    HttpResponse,
    HttpServer,
    Router,
)


class App:
    def __init__(self) -> None:
        self.answered: list[tuple[str, str, int]] = []
        self.peers: list[tuple[str, int] | None] = []
        self.stream_error: BaseException | None = None
        self.stream_done = asyncio.Event()

    async def echo(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse.json({"body": request.json(), "q": dict(request.query),
                                  "header": request.headers.get("x-test")})

    async def hello(self, _request: HttpRequest) -> HttpResponse:
        return HttpResponse.text("hello")

    async def events(self, request: HttpRequest) -> EventStream:
        stream = request.stream()
        try:
            for i in range(int(request.query.get("n", "3"))):
                await stream.write(f"data: {i}\n\n".encode())
                await asyncio.sleep(float(request.query.get("gap", "0")))
        except ConnectionResetError as exc:
            self.stream_error = exc
        finally:
            self.stream_done.set()
        return stream

    async def broken(self, _request: HttpRequest) -> HttpResponse:
        raise RuntimeError("a bug")

    def log(self, request: HttpRequest, status: int) -> None:
        self.answered.append((request.method, request.target, status))
        self.peers.append(request.peer)


@pytest.fixture
async def served() -> AsyncIterator[tuple[App, int]]:
    app = App()
    router = Router()
    router.add("POST", "/echo", app.echo)
    router.add("GET", "/hello", app.hello)
    router.add("GET", "/events", app.events)
    router.add("GET", "/broken", app.broken)
    server = HttpServer(router.dispatch, on_answer=app.log)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    await server.start(sock)
    try:
        yield app, sock.getsockname()[1]
    finally:
        await server.close()


async def _raw(port: int, data: bytes, *, until: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        out = b""
        while until not in out:
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            if not chunk:
                break
            out += chunk
        return out
    finally:
        writer.close()


async def test_json_text_keep_alive_and_the_access_log(served: tuple[App, int]) -> None:
    app, port = served
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.post(f"http://127.0.0.1:{port}/echo?a=1&b=x%20y", json={"k": [1, 2]},
                          headers={"X-Test": "yes"}) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"] == "application/json"
            assert resp.headers["server"] == "uvicorn" and "date" in resp.headers
            assert await resp.json() == {"body": {"k": [1, 2]}, "q": {"a": "1", "b": "x y"},
                                         "header": "yes"}
        async with s.get(f"http://127.0.0.1:{port}/hello") as resp:
            assert resp.headers["content-type"] == "text/plain; charset=utf-8"
            assert await resp.text() == "hello"
    assert app.answered == [("POST", "/echo?a=1&b=x%20y", 200), ("GET", "/hello", 200)]
    # One connection carried both: the same client port (keep-alive).
    assert app.peers[0] == app.peers[1] and app.peers[0] is not None


async def test_unknown_path_and_method_answer_as_fastapi(served: tuple[App, int]) -> None:
    _, port = served
    async with aiohttp.ClientSession() as s:
        async with s.get(f"http://127.0.0.1:{port}/nope") as resp:
            assert resp.status == 404 and await resp.json() == {"detail": "Not Found"}
        async with s.post(f"http://127.0.0.1:{port}/hello") as resp:
            assert resp.status == 405 and await resp.json() == {"detail": "Method Not Allowed"}
        async with s.head(f"http://127.0.0.1:{port}/hello") as resp:
            assert resp.status == 200 and resp.headers["content-length"] == "5"
        async with s.get(f"http://127.0.0.1:{port}/broken") as resp:
            assert resp.status == 500


async def test_stream_is_chunked_and_pipelined_requests_wait_their_turn(
    served: tuple[App, int],
) -> None:
    _, port = served
    out = await _raw(
        port,
        b"GET /events?n=2 HTTP/1.1\r\nhost: x\r\n\r\nGET /hello HTTP/1.1\r\nhost: x\r\n\r\n",
        until=b"hello",
    )
    head, _, rest = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"transfer-encoding: chunked" in head.lower()
    assert b"content-type: text/event-stream; charset=utf-8" in head
    assert rest.startswith(b"9\r\ndata: 0\n\n\r\n9\r\ndata: 1\n\n\r\n0\r\n\r\nHTTP/1.1 200 OK")
    assert rest.endswith(b"\r\n\r\nhello")


async def test_expect_100_continue_and_a_malformed_request(served: tuple[App, int]) -> None:
    _, port = served
    body = json.dumps({"x": 1}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /echo HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\n"
                 b"content-length: %d\r\n\r\n" % len(body))
    assert (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)).startswith(
        b"HTTP/1.1 100 Continue")
    writer.write(body)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 200 ")
    writer.close()
    out = await _raw(port, b"NOT HTTP AT ALL\r\n\r\n", until=b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 Bad Request")


async def test_a_client_that_goes_away_fails_the_streams_next_write(
    served: tuple[App, int],
) -> None:
    app, port = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /events?n=1000&gap=0.01 HTTP/1.1\r\nhost: x\r\n\r\n")
    await asyncio.wait_for(reader.readuntil(b"data: 1\n\n"), 5)
    writer.transport.abort()
    await asyncio.wait_for(app.stream_done.wait(), 5)
    assert isinstance(app.stream_error, ConnectionResetError)
