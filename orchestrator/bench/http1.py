"""A minimal HTTP/1.1 client for the load generator's streamed POSTs, on asyncio protocols.

Why not aiohttp: its per-read machinery (HTTP parser, ``StreamReader`` iteration) was most of
the load generator's CPU while it measured, and every block's arrival stamp waited for it.
Here each read (``buffer_updated``) does only what timing needs: stamp it with
``time.monotonic()``, keep ``(stamp, bytes)``, and a cheap end-of-response check. The status
line and headers are parsed from the first bytes (for status and framing); the chunked
framing is removed in one pass over the reads once the response's end has been seen, not on
the per-read path.

Scope, on purpose: ``POST`` with a JSON body to ``http(s)://host:port`` (IPv4, ``[IPv6]``,
hostnames; https verified against the system's trust store, which honours ``SSL_CERT_FILE``);
one request per connection at a time; keep-alive connections reused from a small pool; bodies
framed by ``Transfer-Encoding: chunked`` (what SGLang's uvicorn sends for streams),
``Content-Length`` (error answers) or the connection's close. No redirects, no proxies, no
compression.

Arrival stamps from the kernel. With 64 streams, one event loop reads a burst of ready sockets
in turn, so a read's ``time.monotonic()`` says when the loop got to it, not when the bytes
arrived (p99 3.6 ms of error at concurrency 64). On Linux each plain-TCP connection asks for
``SO_TIMESTAMPNS`` and is read by :class:`StampedTransport`, which calls ``recvmsg`` itself
(no asyncio transport between: its per-read layers cost more than ``recvmsg`` adds over
``recv_into``), so each read carries the kernel's receive stamp. Because the stamp no longer
depends on when the read happens, the stamped sockets are read in bursts (:class:`ReadPoller`:
one look at all ready sockets, then the next look 1 ms later), which takes most of the
per-wakeup CPU out of a read at high concurrency.
That stamp is CLOCK_REALTIME; it is moved onto the monotonic clock by the offset between the
two clocks, read together at each request's start (the offset moves only when the wall clock
is stepped: NTP's slewing moves both clocks alike). Where the platform lacks it (or for TLS,
where the socket is read by the SSL layer), reads are stamped by the loop as before.

What one stamp means, from the Linux TCP receive path (net/ipv4/tcp_input.c, net/ipv4/tcp.c):
a segment that arrives while the socket's receive queue is empty becomes its own skb, stamped
on arrival. One that arrives behind unread bytes is merged into the queue's tail skb
(``tcp_queue_rcv`` -> ``tcp_try_coalesce``), which then takes the newer segment's stamp
(``to->tstamp = from->tstamp``): the earlier segment's stamp is gone. ``tcp_recvmsg_locked``
reports the stamp of the last skb it copied from (``tcp_update_recv_tstamps`` per skb). So a
read's stamp is exact for its newest segment, and each chunk keeps its own stamp exactly when
the client reads it before the stream's next chunk arrives, i.e. within one decode step.
Reading at chunk boundaries cannot recover more: the merge happens on arrival, before any read
(a reader late by 15 ms gets the newest stamp for every byte, however small its reads; the
test ``test_a_late_reader_gets_one_stamp_for_merged_segments`` shows it on loopback). A read
that carries two chunks therefore means the client was late by a whole step; both chunks
carry the newer one's arrival, and the benchmark counts such chunks apart.

The collector held off the heap while requests stream. A full (generation 2) collection scans
every tracked object the process holds, which in the daemon or a benchmark is tens of
milliseconds of CPU (323 ms of wall on a loaded machine, in one run at concurrency 64), with
the loop stopped: every stream then falls a decode step behind and its stamps merge. While any
request is in flight the objects that existed before are moved out of the collector's scans
(``gc.freeze``, a list splice) and moved back when the last one ends (``gc.unfreeze``), so a
collection during a measurement scans only what the measurement allocated. Nothing is lost:
frozen objects are still freed by reference counting, and cycles among them are found again
after the unfreeze. A process that froze its heap itself is left as it is.

Connection policy. ``keep-alive`` (the default) reuses a pooled connection for the next
request, as pooled clients do (the OpenAI SDK's httpx pool, aiohttp sessions kept open);
``per-request`` opens a fresh TCP connection for every request and closes it, from this side,
once the response has ended, as SGLang's ``bench_serving`` does (a new aiohttp session per
request) and as clients that connect per call do. Either way the caller's clock starts before
the connection is acquired, so a per-request TTFT includes the connect, exactly where
bench_serving's ``st`` (stamped before ``session.post``, which connects) puts it. A numeric
host is turned into its address without the event loop's resolver thread (as aiohttp and
asyncio's ``create_connection`` do), so a connect costs no thread hop.

Reuse and retries. A pooled connection whose transport is closing (the server closed it while
idle) is discarded before anything is sent on it. If a request sent on a *reused* connection
fails before a single byte of the answer arrived (the server closed or reset it at the moment
we wrote), it is sent again, once, on a fresh connection, with a fresh send stamp: nothing of
it was measured. Any other failure is raised; a measurement is never retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import re
import select
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast
from urllib.parse import urlsplit

from orchestrator.log import get_logger

Read = tuple[float, bytes]
ConnectionPolicy = Literal["keep-alive", "per-request"]
"""How requests use connections (see the module's docstring); ``keep-alive`` is the default."""

_HEAD_LIMIT = 64 * 1024
_READ_BUFFER = 64 * 1024
_CRLF2 = b"\r\n\r\n"
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,16}")
_HEX_DIGITS = b"0123456789abcdefABCDEF"
_URL_FORBIDDEN = re.compile(r"[\x00-\x20\x7f]")
_monotonic = time.monotonic

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
"""Linux's value where Python lacks the constant (it does on 3.11)."""
_TIMESPEC = struct.Struct("@qq")
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size) if SO_TIMESTAMPNS is not None else 0
_unpack_timespec = _TIMESPEC.unpack_from
Ancillary = list[tuple[int, int, bytes]]
_HAVE_EPOLL = hasattr(select, "epoll")
COALESCE_S = 0.001
"""How long the kernel-stamped sockets are left to fill after a burst was read (see
:class:`ReadPoller`): well below a decode step, and the resolution of the loop's timers."""


def realtime_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now, in ns (the two read back to back: the error is
    well under 1 us)."""
    return time.time_ns() - time.monotonic_ns()


def kernel_stamp(ancillary: Ancillary, offset_ns: int) -> float | None:
    """The SCM_TIMESTAMPNS in a read's ancillary data as monotonic seconds (``offset_ns``:
    :func:`realtime_offset_ns`); None when the kernel gave none."""
    for _level, kind, data in ancillary:
        if kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = cast(tuple[int, int], _unpack_timespec(data))
            return (seconds * 1_000_000_000 + nanoseconds - offset_ns) / 1e9
    return None


def stamped_socket(family: int) -> socket.socket | None:
    """A non-blocking TCP socket asking the kernel for receive stamps, or None where the
    platform cannot (the caller then connects as usual and the loop stamps reads)."""
    if SO_TIMESTAMPNS is None:
        return None
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        sock.close()
        return None
    sock.setblocking(False)
    return sock


class StampedTransport(asyncio.Transport):
    """The transport of a kernel-stamped connection: the loop's reader callback calls
    ``recvmsg`` and hands the bytes and their ancillary data to the protocol.

    Only what :class:`Http1Connection` uses: ``write`` (sent at once; what the socket does not
    take waits for the loop's writer callback), ``close``/``abort`` (both close at once: a
    connection is closed only when its exchange is over or abandoned) and ``is_closing``. As
    with asyncio's transports, ``connection_lost`` follows the close from the loop, with the
    error that closed it (None for the server's EOF or our own close).
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, protocol: Http1Connection
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._protocol = protocol
        self._recvmsg = sock.recvmsg
        self._closing = False
        self._unsent = b""
        self._poller = read_poller(loop)
        protocol.connection_made(self)
        if self._poller is not None:
            self._poller.add(self._fd, self._read_ready)
        else:
            loop.add_reader(self._fd, self._read_ready)

    def _read_ready(self) -> None:
        try:
            data, ancillary, _flags, _address = self._recvmsg(_READ_BUFFER, _ANCILLARY)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(exc)
            return
        if data:
            self._protocol.kernel_read(ancillary, data)
        else:
            self._protocol.eof_received()
            self._close(None)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        if self._unsent:
            self._unsent += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._close(exc)
            return
        if sent < len(data):
            self._unsent = bytes(data[sent:])
            self._loop.add_writer(self._fd, self._write_ready)

    def _write_ready(self) -> None:
        try:
            sent = self._sock.send(self._unsent)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(exc)
            return
        self._unsent = self._unsent[sent:]
        if not self._unsent:
            self._loop.remove_writer(self._fd)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._close(None)

    def abort(self) -> None:
        self._close(None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._sock if name == "socket" else default

    def _close(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        if self._poller is not None:
            self._poller.remove(self._fd)
        else:
            self._loop.remove_reader(self._fd)
        if self._unsent:
            self._loop.remove_writer(self._fd)
            self._unsent = b""
        self._sock.close()
        self._loop.call_soon(self._protocol.connection_lost, exc)


class ReadPoller:
    """The kernel-stamped sockets of one event loop in one epoll set, read in bursts at most
    every :data:`COALESCE_S`.

    Why: the client's CPU per token was mostly per wakeup (the loop's ``epoll_wait``, its
    dispatch of a handle per ready socket, caches gone cold while other processes ran), and a
    client that reads each chunk the moment it lands wakes once or twice per chunk. A read's
    stamp is the kernel's, so when the read happens changes nothing, provided the stream's
    next chunk has not arrived meanwhile (TCP would merge the two and keep the newer stamp,
    see the module's docstring): a decode step is several milliseconds, so a read up to 1 ms
    late keeps every stamp. So: while idle, the loop watches the set as one reader; when it
    is readable, every ready socket is read (one ``epoll_wait`` with no timeout), then the
    set is looked at again after ``COALESCE_S`` instead of on the next arrival; a look that
    finds nothing ready goes back to watching. Level-triggered, as asyncio's own: a socket
    left unread is reported again. The set lives while a socket is in it (:func:`read_poller`).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._epoll = select.epoll()
        self._fd = self._epoll.fileno()
        self._readers: dict[int, Callable[[], None]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        loop.add_reader(self._fd, self._readable)

    def add(self, fd: int, callback: Callable[[], None]) -> None:
        self._epoll.register(fd, select.EPOLLIN)
        self._readers[fd] = callback

    def remove(self, fd: int) -> None:
        """Stop watching ``fd`` (before it is closed); the last one closes the set."""
        if self._readers.pop(fd, None) is None:
            return
        with contextlib.suppress(OSError):  # already closed: the kernel dropped it
            self._epoll.unregister(fd)
        if not self._readers:
            self._closed = True
            _pollers.pop(self._loop, None)
            if self._timer is not None:
                self._timer.cancel()
            self._loop.remove_reader(self._fd)
            self._epoll.close()

    def _readable(self) -> None:
        self._loop.remove_reader(self._fd)
        self._read_ready()

    def _read_ready(self) -> None:
        """Read every ready socket; look again after ``COALESCE_S``, or (none was ready)
        watch the set."""
        self._timer = None
        ready: list[tuple[int, int]] = []
        try:
            ready = self._epoll.poll(0)
            readers = self._readers
            for fd, _events in ready:
                callback = readers.get(fd)  # None: closed by an earlier read of this burst
                if callback is not None:
                    callback()
        finally:
            if not self._closed:
                if ready:
                    self._timer = self._loop.call_later(COALESCE_S, self._read_ready)
                else:
                    self._loop.add_reader(self._fd, self._readable)


_pollers: dict[asyncio.AbstractEventLoop, ReadPoller] = {}


def read_poller(loop: asyncio.AbstractEventLoop) -> ReadPoller | None:
    """The loop's :class:`ReadPoller` (made on first use), or None without epoll (the
    transport then registers its socket with the loop itself)."""
    if not _HAVE_EPOLL:
        return None
    poller = _pollers.get(loop)
    if poller is None:
        poller = _pollers[loop] = ReadPoller(loop)
    return poller


class _HeapFreeze:
    """``gc.freeze`` while at least one request is in flight (see the module's docstring)."""

    def __init__(self) -> None:
        self.holders = 0
        self.frozen = False

    def hold(self) -> None:
        if self.holders == 0 and gc.get_freeze_count() == 0:
            gc.freeze()
            self.frozen = True
        self.holders += 1

    def release(self) -> None:
        self.holders -= 1
        if self.holders == 0 and self.frozen:
            gc.unfreeze()
            self.frozen = False


_heap_freeze = _HeapFreeze()


class HttpConnectionError(Exception):
    """The connection failed or ended before the response did (the exchange is unusable)."""


class HttpProtocolError(HttpConnectionError):
    """The server's bytes are not a valid HTTP/1.1 response (status line, headers, framing)."""


class ConnectTimeoutError(TimeoutError):
    """No TCP connection within the connect timeout."""


# --------------------------------------------------------------------------- URLs (pure)


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: the TCP address, TLS or not, the ``Host`` header, the base path."""

    host: str
    port: int
    host_header: str
    base_path: str
    tls: bool = False

    def target(self, path: str) -> str:
        """The request target for ``path`` below the base URL's own path."""
        return self.base_path + path


def parse_base_url(url: str) -> Endpoint:
    """``http(s)://host[:port][/prefix]`` as an endpoint; ValueError naming the URL otherwise."""
    if _URL_FORBIDDEN.search(url) or not url.isascii():
        raise ValueError(f"base URL {url!r} has whitespace, control or non-ASCII characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"base URL {url!r}: scheme must be http or https")
    tls = parts.scheme == "https"
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"base URL {url!r}: credentials in the URL are not supported")
    if parts.query or parts.fragment:
        raise ValueError(f"base URL {url!r}: no query or fragment expected")
    host = parts.hostname
    if not host:
        raise ValueError(f"base URL {url!r} has no host")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"base URL {url!r}: {exc}") from None
    netloc_host = f"[{host}]" if ":" in host else host
    host_header = netloc_host if port is None else f"{netloc_host}:{port}"
    return Endpoint(
        host=host,
        port=(443 if tls else 80) if port is None else port,
        host_header=host_header,
        base_path=parts.path.rstrip("/"),
        tls=tls,
    )


def base_url_from_user(text: str) -> str:
    """A base URL as a person types it: without a scheme it is ``http://`` (``host:port``);
    anything ``parse_base_url`` cannot use is a ValueError naming the URL and why."""
    url = text.strip()
    if url and "://" not in url:
        url = "http://" + url
    parse_base_url(url)
    return url.rstrip("/")


def request_bytes(endpoint: Endpoint, path: str, body: bytes, *, accept: str) -> bytes:
    """The whole request, head and body, for one write. ``path`` is the caller's constant."""
    if not path.startswith("/") or _URL_FORBIDDEN.search(path) or not path.isascii():
        raise ValueError(f"request path {path!r} must be ASCII, start with / and have no spaces")
    head = (
        f"POST {endpoint.target(path)} HTTP/1.1\r\n"
        f"Host: {endpoint.host_header}\r\n"
        "User-Agent: orchestrator-bench\r\n"
        "Content-Type: application/json\r\n"
        f"Accept: {accept}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "\r\n"
    )
    return head.encode("ascii") + body


# --------------------------------------------------------------------------- framing (pure)


@dataclass
class ResponseHead:
    """Status line and headers (names lower-cased, in order) of one response."""

    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]

    def values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k == name]

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for v in self.values("connection") for t in v.split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


def parse_head(raw: bytes) -> ResponseHead:
    """Parse ``HTTP/1.x status reason`` and header lines (without the final blank line)."""
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
        raise HttpProtocolError(f"undecodable response head: {exc}") from None
    status_line, *lines = text.split("\r\n")
    version, _, rest = status_line.partition(" ")
    code, _, reason = rest.partition(" ")
    if version not in ("HTTP/1.1", "HTTP/1.0") or len(code) != 3 or not code.isdigit():
        raise HttpProtocolError(f"bad status line: {status_line[:200]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise HttpProtocolError(f"bad header line: {line[:200]!r}")
        headers.append((name.lower(), value.strip()))
    return ResponseHead(version=version, status=int(code), reason=reason, headers=headers)


Framing = tuple[str, int | None]  # ("chunked" | "length" | "close", content length)


def body_framing(head: ResponseHead) -> Framing:
    """How the body's end is known (RFC 9112 section 6.3, for a response to a POST)."""
    if 100 <= head.status < 200 or head.status in (204, 304):
        return ("length", 0)
    encodings = [t.strip().lower() for v in head.values("transfer-encoding") for t in v.split(",")]
    if encodings:
        return ("chunked", None) if encodings[-1] == "chunked" else ("close", None)
    lengths = {v.strip() for v in head.values("content-length")}
    if lengths:
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():
            raise HttpProtocolError(f"bad Content-Length: {sorted(lengths)}")
        return ("length", int(next(iter(lengths))))
    return ("close", None)


_SIZE_LINE, _DATA_END, _TRAILERS = 0, 1, 2


class ChunkedDecoder:
    """Incremental de-chunker over the stamped reads of one body.

    ``blocks``: the payload bytes of each read (framing removed), stamped with that read's
    arrival; a read that carried only framing yields none, and a read's pieces from several
    chunks are one block, so blocks mean what aiohttp's ``iter_any`` gave: the payload bytes
    as they arrived. ``feed`` is called only when the stream's tail looks like an end, so on
    the common path it runs once, over all reads, after the last one arrived.
    """

    def __init__(self) -> None:
        self.blocks: list[Read] = []
        self.reads_fed = 0
        self.complete = False
        self.extra = 0  # bytes after the end of the body
        self._state = _SIZE_LINE
        self._left = 0  # payload bytes still to come in the current chunk
        self._line = b""  # the start of a line cut by a read boundary

    def feed(self, reads: Sequence[Read]) -> bool:
        """Take the reads not seen yet; True once the body is complete. A read that is
        exactly one whole chunk (what a server writing one event per chunk gives a reader in
        time) is taken here, inline: this runs inside the measurement, once per read."""
        blocks = self.blocks
        for index in range(self.reads_fed, len(reads)):
            stamp, data = reads[index]
            if self.complete:
                self.extra += len(data)
                continue
            if self._state == _SIZE_LINE and not self._left and not self._line:
                eol = data.find(b"\r\n", 0, 18)
                if eol > 0:
                    size_text = data[:eol]
                    if not size_text.strip(_HEX_DIGITS):
                        start = eol + 2
                        stop = start + int(size_text, 16)
                        if start < stop == len(data) - 2 and data.endswith(b"\r\n"):
                            blocks.append((stamp, data[start:stop]))
                            continue
            self._read(stamp, data)
        self.reads_fed = len(reads)
        return self.complete

    def _read(self, stamp: float, data: bytes) -> None:
        """One read: whole chunks at a chunk boundary are taken by a ``find`` and a slice
        each (the common case: a read holds one chunk, or several when the client was late);
        anything else (a cut line or chunk, the last chunk, trailers, chunk extensions) goes
        through the state machine over lines and data runs."""
        pos, end = 0, len(data)
        pieces: list[bytes] = []
        while pos < end:
            left = self._left
            if left:
                take = min(left, end - pos)
                pieces.append(data[pos : pos + take])
                pos += take
                self._left = left - take
                if not self._left:
                    self._state = _DATA_END
                continue
            if self._state == _SIZE_LINE and not self._line:
                eol = data.find(b"\r\n", pos, pos + 18)
                if eol > pos:
                    size_text = data[pos:eol]
                    if not size_text.strip(_HEX_DIGITS):
                        start = eol + 2
                        stop = start + int(size_text, 16)
                        if start < stop and data.startswith(b"\r\n", stop):
                            pieces.append(data[start:stop])
                            pos = stop + 2
                            continue
            eol = data.find(b"\n", pos)
            if eol < 0:
                self._line += data[pos:]
                if len(self._line) > _HEAD_LIMIT:
                    raise HttpProtocolError("chunk-size or trailer line too long")
                break
            line = self._line + data[pos : eol + 1]
            self._line = b""
            pos = eol + 1
            self._on_line(line)
            if self.complete:
                self.extra += end - pos
                break
        if pieces:
            self.blocks.append((stamp, pieces[0] if len(pieces) == 1 else b"".join(pieces)))

    def _on_line(self, line: bytes) -> None:
        if not line.endswith(b"\r\n"):
            raise HttpProtocolError(f"chunked line not ended by CRLF: {line[:100]!r}")
        if self._state == _DATA_END:
            if line != b"\r\n":
                raise HttpProtocolError(f"chunk data not followed by CRLF: {line[:100]!r}")
            self._state = _SIZE_LINE
        elif self._state == _SIZE_LINE:
            size_text = line[:-2].split(b";", 1)[0].strip()
            if not _CHUNK_SIZE.fullmatch(size_text):
                raise HttpProtocolError(f"bad chunk-size line: {line[:100]!r}")
            size = int(size_text, 16)
            if size:
                self._left = size
            else:
                self._state = _TRAILERS
        elif line == b"\r\n":  # the blank line after the last chunk (and its trailers)
            self.complete = True


def _tail_is_blank_line(reads: Sequence[Read]) -> bool:
    """Whether all body bytes so far end with CRLF CRLF (for reads shorter than 4 bytes)."""
    tail = b""
    for _stamp, data in reversed(reads):
        tail = data + tail
        if len(tail) >= 4:
            break
    return tail.endswith(_CRLF2)


# --------------------------------------------------------------------------- the protocol


@dataclass
class Http1Response:
    """One complete response. ``blocks``: payload bytes with the arrival of their read."""

    head: ResponseHead
    blocks: list[Read]
    started: float  # the send stamp of the attempt that was answered (see Http1Pool.post)
    completed: float  # arrival of the read that completed the response
    retried: bool = False

    @property
    def status(self) -> int:
        return self.head.status

    def body(self) -> bytes:
        return b"".join(data for _stamp, data in self.blocks)


@dataclass
class _Outcome:
    head: ResponseHead
    reads: list[Read]
    chunked: ChunkedDecoder | None  # the de-chunked payload; None: the reads are the payload
    length: int | None
    completed: float


class Http1Connection(asyncio.BufferedProtocol):
    """One keep-alive TCP connection; at most one request in flight on it.

    A ``BufferedProtocol``: the selector loop then reads with ``recv_into`` this connection's
    own buffer instead of ``recv(256 KiB)``, which allocates a 256 KiB object per read and
    shrinks it to the few hundred bytes a stream event has (about 0.4 us of 6.5 us per read
    in a loopback micro-benchmark; the copy out of the buffer is a few hundred bytes). On a
    kernel-stamped connection :class:`StampedTransport` reads instead and calls
    :meth:`kernel_read` (``recvmsg`` has no ``_into`` form cheaper than its own allocation of
    64 KiB, which stays below malloc's mmap threshold).
    """

    def __init__(self) -> None:
        self._buffer = memoryview(bytearray(_READ_BUFFER))
        self._offset_s, self._offset_ns = divmod(realtime_offset_ns(), 1_000_000_000)
        """CLOCK_REALTIME - CLOCK_MONOTONIC, as whole seconds and nanoseconds."""
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reusable = True
        self.requests = 0
        self.sent = 0.0
        """When the current request was handed to the socket (``time.monotonic()``)."""
        self._waiter: asyncio.Future[_Outcome] | None = None
        self._head_buffer = b""
        self._head_bytes = 0
        self._head: ResponseHead | None = None
        self._reads: list[Read] = []
        self._in_body = False
        self._chunked = False
        self._length: int | None = None
        self._received = 0
        self._decoder: ChunkedDecoder | None = None

    @property
    def bytes_received(self) -> int:
        """Bytes of the current response so far (head included); 0: nothing answered yet."""
        body = sum(len(data) for _stamp, data in self._reads)
        return len(self._head_buffer) + self._head_bytes + body

    # asyncio callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        """A read through asyncio's transport (TLS, platforms without kernel stamps)."""
        data = bytes(self._buffer[:nbytes])
        if self._in_body:
            self._body_received(_monotonic(), data)
        else:
            self._head_received(_monotonic(), data)

    def kernel_read(self, ancillary: Ancillary, data: bytes) -> None:
        """A read through :class:`StampedTransport`, stamped by the kernel (the hot path:
        the common ancillary layout, one SCM_TIMESTAMPNS, is taken without a loop)."""
        stamp: float | None = None
        if len(ancillary) == 1 and ancillary[0][1] == SO_TIMESTAMPNS:
            try:
                seconds, nanoseconds = _unpack_timespec(ancillary[0][2])
            except struct.error:  # a short timespec: the kernel truncated it
                pass
            else:
                # Small integers only (whole seconds and nanoseconds apart), then one float.
                stamp = (seconds - self._offset_s) + (nanoseconds - self._offset_ns) * 1e-9
        elif ancillary:
            stamp = kernel_stamp(ancillary, self._offset_s * 1_000_000_000 + self._offset_ns)
        if stamp is None:
            stamp = _monotonic()
        if self._in_body:
            self._body_received(stamp, data)
        else:
            self._head_received(stamp, data)

    def eof_received(self) -> bool | None:
        return None  # let the transport close; connection_lost settles the request

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reusable = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if exc is not None:
            waiter.set_exception(exc)
            return
        if self._in_body and (
            (not self._chunked and self._length is None)  # close-delimited: this is its end
            or (self._chunked and self._chunked_body_complete())
        ):
            self._complete(_monotonic())
            return
        if waiter.done():  # the final scan found bad framing
            return
        received = self.bytes_received
        waiter.set_exception(
            HttpConnectionError(
                "server closed the connection before answering"
                if received == 0
                else f"server closed the connection mid-response after {received} bytes"
            )
        )

    # request lifecycle ---------------------------------------------------------------

    def start(self, request: bytes) -> asyncio.Future[_Outcome]:
        """Write one request; the future settles with the response or the failure."""
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            raise HttpConnectionError("connection closed before the request was sent")
        if self._waiter is not None and not self._waiter.done():
            raise RuntimeError("a request is already in flight on this connection")
        self._waiter = asyncio.get_running_loop().create_future()
        self._head_buffer, self._head_bytes, self._head, self._reads = b"", 0, None, []
        self._in_body, self._chunked, self._length = False, False, None
        self._received, self._decoder = 0, None
        self._offset_s, self._offset_ns = divmod(realtime_offset_ns(), 1_000_000_000)
        self.requests += 1
        self.sent = _monotonic()
        transport.write(request)
        return self._waiter

    def abort(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    # internals -----------------------------------------------------------------------

    def _body_received(self, stamp: float, data: bytes) -> None:
        """The hot path: keep the stamped read, then a cheap end-of-response check."""
        self._reads.append((stamp, data))
        if self._chunked:
            # A chunked body ends with a blank line (after the last chunk or its trailers);
            # only a read ending so (or too short to tell) is worth parsing the framing for.
            ends_blank = data.endswith(_CRLF2) or (
                len(data) < 4 and _tail_is_blank_line(self._reads)
            )
            if ends_blank and self._chunked_body_complete():
                self._complete(stamp)
        elif self._length is not None:
            self._received += len(data)
            if self._received >= self._length:
                self._complete(stamp)

    def _head_received(self, stamp: float, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self.abort()  # bytes nobody asked for: this connection is not trustworthy
            return
        buffer = self._head_buffer + data
        while True:
            end = buffer.find(_CRLF2)
            if end < 0:
                if len(buffer) > _HEAD_LIMIT:
                    self._fail(HttpProtocolError("response head larger than 64 KiB"))
                else:
                    self._head_buffer = buffer
                return
            try:
                head = parse_head(buffer[:end])
                kind, length = body_framing(head)
            except HttpProtocolError as exc:
                self._fail(exc)
                return
            self._head_bytes += end + 4
            buffer = buffer[end + 4 :]
            if not 100 <= head.status < 200:
                break  # else an interim answer: the real one follows
        self._head, self._head_buffer = head, b""
        self._chunked, self._length = kind == "chunked", length
        if not head.keep_alive or kind == "close":
            self.reusable = False
        if length == 0:
            self.reusable = self.reusable and not buffer
            self._complete(stamp)
            return
        self._in_body = True
        if buffer:
            self._body_received(stamp, buffer)

    def _chunked_body_complete(self) -> bool:
        """Feed the de-chunker; True when the body is complete (False and the request
        failed when the framing is bad)."""
        if self._decoder is None:
            self._decoder = ChunkedDecoder()
        try:
            return self._decoder.feed(self._reads)
        except HttpProtocolError as exc:
            self._fail(exc)
            return False

    def _complete(self, stamp: float) -> None:
        waiter, head = self._waiter, self._head
        self._in_body = False
        if waiter is None or waiter.done() or head is None:
            return
        decoder = self._decoder if self._chunked else None
        if decoder is not None and decoder.extra:
            self.reusable = False  # bytes after the response: don't trust the connection
        elif self._length is not None and self._received > self._length:
            self.reusable = False
        waiter.set_result(_Outcome(head, self._reads, decoder, self._length, stamp))

    def _fail(self, exc: Exception) -> None:
        self._in_body = False
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.abort()


def _response(outcome: _Outcome, started: float, retried: bool) -> Http1Response:
    """The payload blocks: de-chunked (done once the end was seen) or trimmed to length."""
    if outcome.chunked is not None:
        blocks = outcome.chunked.blocks
    elif outcome.length is not None:
        blocks, left = [], outcome.length
        for stamp, data in outcome.reads:
            if left <= 0:
                break
            blocks.append((stamp, data[:left]))
            left -= len(data)
    else:
        blocks = outcome.reads
    return Http1Response(outcome.head, blocks, started, outcome.completed, retried)


# --------------------------------------------------------------------------- the pool


class Http1Pool:
    """Connections to one endpoint, at most ``size`` at once (callers beyond that wait for
    one, as with aiohttp's connector limit): kept alive and reused, or with ``connections``
    ``per-request`` one fresh connection per request, closed after its response."""

    def __init__(
        self,
        base_url: str,
        *,
        size: int,
        connect_timeout: float,
        connections: ConnectionPolicy = "keep-alive",
    ) -> None:
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.endpoint = parse_base_url(base_url)
        self.size = size
        self.connect_timeout = connect_timeout
        self.connections: ConnectionPolicy = connections
        self.connections_opened = 0
        self._idle: list[Http1Connection] = []
        self._slots = asyncio.Semaphore(size)
        self._closed = False
        self._tls = ssl.create_default_context() if self.endpoint.tls else None

    async def post(
        self, path: str, body: bytes, *, started: float, accept: str = "text/event-stream"
    ) -> Http1Response:
        """One POST, answered completely (any status), or an exception:
        ``HttpConnectionError``/``OSError`` (refused, reset, ended early, bad HTTP),
        ``ConnectTimeoutError``; cancellation (the caller's timeout) aborts the connection.

        The response's ``started`` is the moment the request was handed to the socket when it
        went out on a keep-alive connection at once, else the caller's ``started`` (a connect,
        or a wait for a free connection, is then part of the exchange's time)."""
        request = request_bytes(self.endpoint, path, body, accept=accept)
        _heap_freeze.hold()
        try:
            return await self._post(request, started)
        finally:
            _heap_freeze.release()

    async def _post(self, request: bytes, started: float) -> Http1Response:
        waited = self._slots.locked()
        async with self._slots:
            connection, reused = await self._acquire()
            # On an open connection taken without waiting, nothing between the caller's
            # stamp and the socket's send belongs to the request: stamp the send itself, so a
            # preemption of this process in between is not a TTFT error. A connect (or a
            # wait for a pool slot) stays in, from the caller's stamp, as before.
            stamp = None if reused and not waited else started
            try:
                return await self._exchange(connection, request, stamp, retried=False)
            except (HttpConnectionError, OSError) as exc:
                if (
                    not reused
                    or connection.bytes_received > 0
                    or isinstance(exc, HttpProtocolError)
                ):
                    raise
                get_logger(component="bench.http1").debug(
                    "request.resent", reason=f"{type(exc).__name__}: {exc}"
                )
            started = _monotonic()
            connection = await self._connect()
            return await self._exchange(connection, request, started, retried=True)

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def _acquire(self) -> tuple[Http1Connection, bool]:
        if self.connections == "per-request":
            return await self._connect(), False
        while self._idle:
            connection = self._idle.pop()
            transport = connection.transport
            if connection.reusable and transport is not None and not transport.is_closing():
                return connection, True
            connection.abort()
        return await self._connect(), False

    async def _connect(self) -> Http1Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                sock = None if self._tls else await self._stamped_connection(loop)
                if sock is not None:
                    connection = Http1Connection()
                    StampedTransport(loop, sock, connection)
                else:
                    _transport, connection = await loop.create_connection(
                        Http1Connection,
                        self.endpoint.host,
                        self.endpoint.port,
                        ssl=self._tls,
                        server_hostname=self.endpoint.host if self._tls else None,
                    )
        except TimeoutError:
            raise ConnectTimeoutError(
                f"no connection to {self.endpoint.host_header} within {self.connect_timeout} s"
            ) from None
        self.connections_opened += 1
        return connection

    async def _stamped_connection(
        self, loop: asyncio.AbstractEventLoop
    ) -> socket.socket | None:
        """A connected socket keeping kernel receive stamps (the first address that answers,
        as ``create_connection`` would try them), or None where the platform cannot."""
        try:  # a numeric host: no lookup, so no hop through the resolver's thread
            addresses = socket.getaddrinfo(
                self.endpoint.host,
                self.endpoint.port,
                type=socket.SOCK_STREAM,
                flags=socket.AI_NUMERICHOST,
            )
        except socket.gaierror:
            addresses = await loop.getaddrinfo(
                self.endpoint.host, self.endpoint.port, type=socket.SOCK_STREAM
            )
        error: OSError | None = None
        for family, _type, _proto, _name, address in addresses:
            sock = stamped_socket(family)
            if sock is None:
                return None
            try:
                await loop.sock_connect(sock, address)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        raise error or OSError(f"no address for {self.endpoint.host_header}")

    async def _exchange(
        self,
        connection: Http1Connection,
        request: bytes,
        started: float | None,
        *,
        retried: bool,
    ) -> Http1Response:
        """One request on ``connection``; ``started``: the send stamp to report (None: the
        moment the request was handed to the socket)."""
        try:
            outcome = await connection.start(request)
        except BaseException:
            connection.abort()
            raise
        self._release(connection)
        return _response(outcome, connection.sent if started is None else started, retried)

    def _release(self, connection: Http1Connection) -> None:
        transport = connection.transport
        if (
            self._closed
            or self.connections == "per-request"
            or not connection.reusable
            or transport is None
            or transport.is_closing()
            or len(self._idle) >= self.size
        ):
            connection.close()
            return
        self._idle.append(connection)
