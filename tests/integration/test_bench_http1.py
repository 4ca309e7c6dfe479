"""The load generator's raw HTTP/1.1 client against real TCP servers on loopback.

Each server is a few lines of ``asyncio.start_server`` that write exactly the bytes a test
needs (a terminator split byte by byte, a reset mid-stream, a hang), and record what it saw:
connections, requests, write times. Addresses: 127.0.0.230-239, ephemeral ports.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import random
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.bench.client import BenchClient, ErrorKind, parse_exchange, split_sse_events
from orchestrator.bench.http1 import (
    ChunkedDecoder,
    Http1Pool,
    HttpConnectionError,
    HttpProtocolError,
    parse_base_url,
)

SGLANG = engines.get("sglang")
GENERATE = SGLANG.dialect("generate")

ADDRESS = "127.0.0.230"
PAUSE = 0.005  # between writes meant to arrive as separate reads


@dataclass
class Request:
    head: str
    body: bytes

    @property
    def request_line(self) -> str:
        return self.head.split("\r\n", 1)[0]


@dataclass
class Connection:
    index: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    requests: list[Request] = field(default_factory=list)

    async def read_request(self) -> Request | None:
        """The next request on this connection, or None when the client closed it."""
        try:
            head = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        length = next(
            int(line.split(":", 1)[1])
            for line in head.split("\r\n")
            if line.lower().startswith("content-length:")
        )
        request = Request(head, await self.reader.readexactly(length))
        self.requests.append(request)
        return request

    async def send(self, data: bytes, *, pause: float = 0.0) -> float:
        """Write and flush; the monotonic time just before the write."""
        stamp = time.monotonic()
        self.writer.write(data)
        await self.writer.drain()
        if pause:
            await asyncio.sleep(pause)
        return stamp

    def reset(self) -> None:
        """Close with RST (SO_LINGER 0), as a crashing server's kernel would."""
        sock = self.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


Handler = Callable[[Connection], Awaitable[None]]


class RawServer:
    """A TCP server on loopback running ``handler`` per connection; records connections."""

    def __init__(
        self, handler: Handler, address: str = ADDRESS, *, tls: ssl.SSLContext | None = None
    ) -> None:
        self.handler = handler
        self.address = address
        self.tls = tls
        self.connections: list[Connection] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, self.address, 0, ssl=self.tls)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for connection in self.connections:
            connection.writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls else 'http'}://{self.address}:{port}"

    @property
    def requests(self) -> list[Request]:
        return [r for c in self.connections for r in c.requests]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = Connection(len(self.connections), reader, writer)
        self.connections.append(connection)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self.handler(connection)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def generate_events(tokens: int) -> list[bytes]:
    """SGLang ``/generate`` stream events: cumulative completion_tokens, then [DONE]."""
    events = []
    for n in range(1, tokens + 1):
        meta = {
            "id": "req-1",
            "prompt_tokens": 5,
            "completion_tokens": n,
            "finish_reason": {"type": "length", "length": tokens} if n == tokens else None,
        }
        events.append(b"data: " + json.dumps({"text": "x" * n, "meta_info": meta}).encode())
    events.append(b"data: [DONE]")
    return [e + b"\n\n" for e in events]


def client(url: str, *, concurrency: int = 1, timeout: float = 5.0) -> BenchClient:
    return BenchClient(
        url, api="generate", model="m", concurrency=concurrency, request_timeout=timeout,
        engine=SGLANG,
    )


# --------------------------------------------------------------------------- framing


async def test_chunked_end_split_byte_by_byte_and_payload_stamped_per_read() -> None:
    """Chunks whose own bytes look like an end (``0\\r\\n``, a blank CRLF line) must not end
    the body; the real terminator, written one byte at a time, must; stamps are per read."""
    payloads = [b"data: first\n\n", b"tricky0\r\n", b"data: crlf\r\n\r\n", b"data: last\n\n"]
    writes: list[float] = []

    async def handler(conn: Connection) -> None:
        while await conn.read_request() is not None:
            await conn.send(STREAM_HEAD, pause=PAUSE)
            writes.clear()
            for payload in payloads:
                writes.append(await conn.send(chunk(payload), pause=3 * PAUSE))
            for byte in b"0\r\n\r\n":
                await conn.send(bytes([byte]), pause=PAUSE)

    async with RawServer(handler) as server:
        pool = Http1Pool(server.url, size=1, connect_timeout=2.0)
        try:
            started = time.monotonic()
            async with asyncio.timeout(5.0):
                response = await pool.post("/generate", b"{}", started=started)
            assert response.status == 200 and not response.retried
            assert response.body() == b"".join(payloads)
            assert [data for _stamp, data in response.blocks] == payloads
            stamps = [stamp for stamp, _data in response.blocks]
            assert stamps == sorted(stamps) and started <= stamps[0]
            # Each block was stamped when its read arrived, before the next chunk was written.
            for i, stamp in enumerate(stamps):
                assert writes[i] <= stamp
                if i + 1 < len(writes):
                    assert stamp < writes[i + 1]
            assert response.completed >= stamps[-1]
            # The connection stayed open: the end came from the framing, not from a close.
            assert server.connections[0].writer.transport.is_closing() is False
        finally:
            await pool.close()
        assert server.requests[0].request_line == "POST /generate HTTP/1.1"
        assert f"Host: {server.url.removeprefix('http://')}" in server.requests[0].head


async def test_bench_client_stream_parses_as_before() -> None:
    """Through ``BenchClient.stream``: SSE events split across reads, then parse_exchange."""
    events = generate_events(6)
    wire = b"".join(chunk(e) for e in events) + b"0\r\n\r\n"

    async def handler(conn: Connection) -> None:
        request = await conn.read_request()
        assert request is not None
        await conn.send(STREAM_HEAD)
        for start in range(0, len(wire), 37):  # cuts through size lines, events and CRLFs
            await conn.send(wire[start : start + 37], pause=PAUSE / 5)
        await conn.read_request()

    async with RawServer(handler, "127.0.0.231") as server, client(server.url) as bench:
        raw = await bench.stream("hello", max_tokens=6)
        assert raw.error is None and raw.http_status == 200
        assert b"".join(data for _stamp, data in raw.blocks) == b"".join(events)
        assert len(split_sse_events(raw.blocks)) == len(events)
        record = parse_exchange(raw, GENERATE)
        assert record.ok and record.completion_tokens == 6 and record.finish_reason == "length"
        assert [c.tokens for c in record.chunks] == [1] * 6
        arrivals = [c.arrival for c in record.chunks]
        assert arrivals == sorted(arrivals) and raw.send_time < arrivals[0]
        assert raw.end_time == raw.blocks[-1][0]
        body = json.loads(server.requests[0].body)
        assert body["stream"] is True and body["sampling_params"]["max_new_tokens"] == 6
        assert "Content-Type: application/json" in server.requests[0].head


def test_chunked_decoder_on_random_cuts() -> None:
    """The de-chunker, fed at every read, finds the end only at the end, whatever the cuts;
    reads that are exactly one chunk (its fast path) and reads that are not give the same."""
    rng = random.Random(7)
    for _ in range(300):
        payloads = [rng.randbytes(rng.randint(1, 40)) for _ in range(rng.randint(0, 6))]
        trailers = b"X-T: 1\r\n" if rng.random() < 0.3 else b""
        last = b"0;ext=1\r\n" if rng.random() < 0.5 else b"0\r\n"
        chunks = [chunk(p) for p in payloads]
        wire = b"".join(chunks) + last + trailers + b"\r\n"
        if rng.random() < 0.5:
            cuts = sorted(rng.sample(range(1, len(wire)), k=min(len(wire) - 1, rng.randint(0, 8))))
        else:  # one read per chunk, as a server writing one event per chunk gives
            cuts = [sum(map(len, chunks[: i + 1])) for i in range(len(chunks))]
            cuts = [c for c in cuts if 0 < c < len(wire)]
        pieces = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
        reads = [(float(i), piece) for i, piece in enumerate(pieces)]
        decoder = ChunkedDecoder()
        ends = [decoder.feed(reads[: i + 1]) for i in range(len(reads))]
        assert ends == [False] * (len(reads) - 1) + [True]
        assert decoder.extra == 0
        assert b"".join(data for _stamp, data in decoder.blocks) == b"".join(payloads)
        assert all(data for _stamp, data in decoder.blocks)
        stamps = [stamp for stamp, _data in decoder.blocks]
        assert stamps == sorted(set(stamps))  # at most one block per read, in read order


def test_chunked_decoder_rejects_bad_framing() -> None:
    for wire in (
        b"zz\r\nabc\r\n0\r\n\r\n",
        b"3\r\nabcX\r\n0\r\n\r\n",
        b"3\nabc\r\n",
        b"0x3\r\nabc\r\n",  # int(..., 16) takes a 0x prefix; HTTP's chunk-size does not
    ):
        with pytest.raises(HttpProtocolError):
            ChunkedDecoder().feed([(0.0, wire)])
    decoder = ChunkedDecoder()
    assert decoder.feed([(0.0, chunk(b"abc") + b"0\r\n\r\nHTTP/1.1 200 OK")])
    assert decoder.extra == len(b"HTTP/1.1 200 OK")


def test_base_urls() -> None:
    v6 = parse_base_url("http://[::1]:30000/")
    assert (v6.host, v6.port, v6.host_header, v6.base_path) == ("::1", 30000, "[::1]:30000", "")
    named = parse_base_url("http://gpu-box.lan/sglang/")
    assert (named.host, named.port, named.host_header) == ("gpu-box.lan", 80, "gpu-box.lan")
    assert named.target("/generate") == "/sglang/generate"
    secure = parse_base_url("https://gpu-box.lan")
    assert (secure.port, secure.tls) == (443, True)
    for bad in ("ftp://h/", "http://h:1/a b", "http://h:1/\r\nX: y", "http://:1"):
        with pytest.raises(ValueError, match="base URL"):
            parse_base_url(bad)


# --------------------------------------------------------------------------- errors


async def test_content_length_error_answer_is_http_status_with_body() -> None:
    body = b'{"error": {"message": "max_new_tokens must be positive"}}'

    async def handler(conn: Connection) -> None:
        while await conn.read_request() is not None:
            await conn.send(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body) + body[:10],
                pause=PAUSE,
            )
            await conn.send(body[10:])

    async with RawServer(handler, "127.0.0.232") as server, client(server.url) as bench:
        first = parse_exchange(await bench.stream("a", max_tokens=4), GENERATE)
        second = parse_exchange(await bench.stream("b", max_tokens=4), GENERATE)
    for record in (first, second):
        assert record.error is ErrorKind.HTTP_STATUS and record.http_status == 400
        assert record.error_detail == "HTTP 400: " + body.decode()
    assert len(server.connections) == 1  # a complete error answer leaves the connection usable


async def test_reset_and_early_close_mid_stream_are_connection_errors() -> None:
    async def handler(conn: Connection) -> None:
        await conn.read_request()
        await conn.send(STREAM_HEAD + chunk(generate_events(3)[0]), pause=PAUSE)
        if conn.index == 0:
            conn.reset()
        else:
            conn.writer.close()

    async with RawServer(handler, "127.0.0.233") as server, client(server.url) as bench:
        reset = parse_exchange(await bench.stream("a", max_tokens=3), GENERATE)
        ended = parse_exchange(await bench.stream("b", max_tokens=3), GENERATE)
    assert reset.error is ErrorKind.CONNECTION
    assert "ConnectionResetError" in (reset.error_detail or "")
    assert ended.error is ErrorKind.CONNECTION
    assert "mid-response" in (ended.error_detail or "")
    assert len(server.requests) == 2  # neither was resent: bytes of an answer had arrived


async def test_refused_is_connection_error() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.234", 0))
    port = probe.getsockname()[1]
    probe.close()
    async with client(f"http://127.0.0.234:{port}") as bench:
        record = parse_exchange(await bench.stream("a", max_tokens=3), GENERATE)
    assert record.error is ErrorKind.CONNECTION
    assert "ConnectionRefusedError" in (record.error_detail or "")


async def test_server_that_never_finishes_is_timeout_and_connection_dropped() -> None:
    async def handler(conn: Connection) -> None:
        await conn.read_request()
        await conn.send(STREAM_HEAD + chunk(generate_events(3)[0]))
        await conn.reader.read()  # until the client gives up and closes

    async with RawServer(handler, "127.0.0.235") as server:
        async with client(server.url, timeout=0.4) as bench:
            raw = await bench.stream("a", max_tokens=3)
        assert raw.error is ErrorKind.TIMEOUT
        # the server never finishes: only the client's 0.4 s timeout ended the request
        assert raw.end_time is not None and raw.end_time - raw.send_time > 0.35
        await asyncio.sleep(PAUSE * 4)
        assert server.connections[0].reader.at_eof()  # the client aborted the connection


# --------------------------------------------------------------------------- keep-alive


def stream_response(text: bytes) -> bytes:
    return STREAM_HEAD + chunk(text) + b"0\r\n\r\n"


async def test_sequential_requests_share_one_connection() -> None:
    async def handler(conn: Connection) -> None:
        while (request := await conn.read_request()) is not None:
            await conn.send(stream_response(b"answer to " + request.body))

    async with RawServer(handler, "127.0.0.236") as server:
        pool = Http1Pool(server.url, size=4, connect_timeout=2.0)
        try:
            for word in (b"one", b"two", b"three"):
                response = await pool.post("/generate", word, started=time.monotonic())
                assert response.body() == b"answer to " + word
        finally:
            await pool.close()
    assert len(server.connections) == 1 and pool.connections_opened == 1
    assert [r.body for r in server.connections[0].requests] == [b"one", b"two", b"three"]


async def test_the_send_stamp_is_the_send_itself_on_an_open_connection() -> None:
    """The caller's stamp holds for a request that needed a connect; on a keep-alive
    connection the response's ``started`` is when the request went to the socket, so time
    this process spent between the two (a preemption on a busy host) is no TTFT error."""

    async def handler(conn: Connection) -> None:
        while await conn.read_request() is not None:
            await conn.send(stream_response(b"ok"))

    async with RawServer(handler, "127.0.0.236") as server:
        pool = Http1Pool(server.url, size=1, connect_timeout=2.0)
        try:
            first = await pool.post("/generate", b"1", started=-1.0)
            before = time.monotonic()
            second = await pool.post("/generate", b"2", started=-1.0)
        finally:
            await pool.close()
    assert pool.connections_opened == 1
    assert first.started == -1.0  # the connect is part of the first exchange
    assert before <= second.started <= second.completed


async def test_idle_connection_closed_by_server_is_not_reused_nor_double_sent() -> None:
    async def handler(conn: Connection) -> None:
        request = await conn.read_request()
        assert request is not None
        await conn.send(stream_response(b"ok " + request.body))
        conn.writer.close()  # the server's keep-alive timeout, while the client is idle

    async with RawServer(handler, "127.0.0.237") as server, client(server.url) as bench:
        pool = bench._pool
        first = await pool.post("/generate", b"1", started=time.monotonic())
        await asyncio.sleep(PAUSE * 4)  # the FIN arrives while the connection sits idle
        second = await pool.post("/generate", b"2", started=time.monotonic())
    assert (first.body(), second.body()) == (b"ok 1", b"ok 2")
    assert not second.retried
    assert [[r.body for r in c.requests] for c in server.connections] == [[b"1"], [b"2"]]


async def test_reused_connection_dropped_unanswered_is_resent_once() -> None:
    """The server closes a kept-alive connection just as a request arrives on it: the request
    goes out once more on a fresh connection (nothing of it was measured). A failure on a
    fresh connection is never resent."""

    async def handler(conn: Connection) -> None:
        while (request := await conn.read_request()) is not None:
            if request.body == b"drop" or (request.body == b"late" and len(conn.requests) > 1):
                conn.writer.close()
                return
            await conn.send(stream_response(b"ok " + request.body))

    async with RawServer(handler, "127.0.0.238") as server, client(server.url) as bench:
        pool = bench._pool
        await pool.post("/generate", b"warm", started=time.monotonic())
        before = time.monotonic()
        late = await pool.post("/generate", b"late", started=before)
        assert late.retried and late.body() == b"ok late" and late.started > before
        with pytest.raises(HttpConnectionError, match="before answering"):
            await pool.post("/generate", b"drop", started=time.monotonic())
        raw = await bench.stream("x", max_tokens=1)  # fresh pool connection still fine
        assert raw.http_status == 200
    bodies = [[r.body for r in c.requests] for c in server.connections]
    assert bodies[:3] == [[b"warm", b"late"], [b"late", b"drop"], [b"drop"]]


async def test_close_delimited_body_and_interim_answer() -> None:
    async def handler(conn: Connection) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 100 Continue\r\n\r\n", pause=PAUSE)
        await conn.send(
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\npart one ", pause=PAUSE
        )
        await conn.send(b"part two", pause=PAUSE)
        conn.writer.close()

    async with RawServer(handler, "127.0.0.239") as server:
        pool = Http1Pool(server.url, size=1, connect_timeout=2.0)
        try:
            first = await pool.post("/x", b"", started=time.monotonic())
            second = await pool.post("/x", b"", started=time.monotonic())
        finally:
            await pool.close()
    assert first.body() == second.body() == b"part one part two"
    assert len(first.blocks) == 2 and not second.retried
    assert len(server.connections) == 2  # a close-delimited answer's connection is not reused


# --------------------------------------------------------------------------- TLS


def self_signed(directory: Path, address: str) -> tuple[Path, Path]:
    """A certificate for ``address`` (IP SAN) and its key, as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_https_streams_when_the_certificate_is_trusted_and_fails_when_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = "127.0.0.238"
    cert_path, key_path = self_signed(tmp_path, address)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert_path, key_path)
    events = generate_events(3)
    wire = b"".join(chunk(e) for e in events) + b"0\r\n\r\n"

    async def handler(conn: Connection) -> None:
        while await conn.read_request() is not None:
            await conn.send(STREAM_HEAD)
            for event_chunk in (wire[:40], wire[40:]):
                await conn.send(event_chunk, pause=PAUSE)

    async with RawServer(handler, address, tls=server_tls) as server:
        # Not trusted: verification is on, the request fails as a connection error.
        async with client(server.url) as bench:
            refused = await bench.stream("hello", max_tokens=3)
        assert refused.error is ErrorKind.CONNECTION
        assert "CERTIFICATE_VERIFY_FAILED" in (refused.error_detail or "")
        # Trusted through the standard SSL_CERT_FILE: streams like plain HTTP.
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_path))
        async with client(server.url) as bench:
            raw = await bench.stream("hello", max_tokens=3)
        record = parse_exchange(raw, GENERATE)
        assert record.ok and record.completion_tokens == 3, record.error_detail
        assert b"".join(data for _stamp, data in raw.blocks) == b"".join(events)
