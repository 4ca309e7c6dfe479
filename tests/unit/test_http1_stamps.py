"""What a kernel receive stamp means for the load generator's reads, on real loopback sockets.

The servers are plain threads that stamp their own sends with ``time.monotonic()`` (what the
wire saw); the client's event loop is blocked on purpose where a test needs a late reader.
Addresses 127.0.0.231-232, ephemeral ports. The decoder's properties run on bytes alone.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.bench import http1
from orchestrator.bench.http1 import ChunkedDecoder, Http1Pool, Read, kernel_stamp

ADDRESS = "127.0.0.231"
GAP_S = 0.05  # between the two chunks: a loop on a loaded machine still reads within it
LATE_S = 0.15  # how long a late reader's loop is blocked, from before the first chunk
SLACK_S = 0.005  # a loaded kernel may put a segment out after the send call returned (2.1 ms
# seen here); a stamp from a busy loop would be 15 ms or more late in these tests
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")
HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def two_chunk_server(
    listener: socket.socket,
    sent: list[tuple[float, float]],
    before_first: Callable[[], None],
    end_after: float,
) -> None:
    """Answer one request with two chunks, each its own segment, ``GAP_S`` apart, and the
    body's end ``end_after`` seconds after the second. ``sent``: the clock before and after
    each send (the receiver's kernel stamps a loopback segment inside the sender's call)."""
    conn, _ = listener.accept()
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        conn.sendall(HEAD)
        before_first()
        for payload in (b"first", b"second"):
            before = time.monotonic()
            conn.sendall(b"%x\r\n%s\r\n" % (len(payload), payload))
            sent.append((before, time.monotonic()))
            if payload == b"first":
                time.sleep(GAP_S)
        time.sleep(end_after)
        conn.sendall(b"0\r\n\r\n")


async def exchange(
    before_first: Callable[[asyncio.AbstractEventLoop], None], end_after: float = 0.0
) -> tuple[list[Read], list[tuple[float, float]]]:
    listener = socket.create_server((ADDRESS, 0))
    sent: list[tuple[float, float]] = []
    loop = asyncio.get_running_loop()
    thread = threading.Thread(
        target=two_chunk_server,
        args=(listener, sent, lambda: before_first(loop), end_after),
        daemon=True,
    )
    thread.start()
    pool = Http1Pool(f"http://{ADDRESS}:{listener.getsockname()[1]}", size=1, connect_timeout=5)
    try:
        response = await pool.post("/generate", b"{}", started=time.monotonic())
    finally:
        await pool.close()
        thread.join(5)
        listener.close()
    assert response.body() == b"firstsecond"
    return response.blocks, sent


def block_loop(seconds: float) -> Callable[[asyncio.AbstractEventLoop], None]:
    """Make the client's loop busy for ``seconds`` from just before the first chunk."""

    def block(loop: asyncio.AbstractEventLoop) -> None:
        loop.call_soon_threadsafe(time.sleep, seconds)
        time.sleep(0.01)  # the loop is inside its sleep before the first chunk goes out

    return block


@linux_only
async def test_chunks_read_in_time_keep_one_kernel_stamp_each() -> None:
    blocks, sent = await exchange(lambda _loop: None)
    assert [data for _stamp, data in blocks] == [b"first", b"second"]
    for (stamp, _data), (before, after) in zip(blocks, sent, strict=True):
        assert before - SLACK_S <= stamp <= after + SLACK_S, (blocks, sent)


@linux_only
async def test_a_chunk_that_waited_for_a_busy_loop_keeps_its_arrival() -> None:
    """The loop is busy when the first chunk arrives and free again before the second: the
    read comes late, its stamp does not (the loop's clock would say when it got there)."""
    blocks, sent = await exchange(block_loop(0.8 * GAP_S))
    assert [data for _stamp, data in blocks] == [b"first", b"second"]
    for (stamp, _data), (before, after) in zip(blocks, sent, strict=True):
        assert before - SLACK_S <= stamp <= after + SLACK_S, (blocks, sent)


@linux_only
async def test_a_late_reader_gets_one_stamp_for_merged_segments() -> None:
    """The second chunk arrives behind the unread first one, so TCP merges it into the first's
    skb with the newer stamp (``tcp_try_coalesce``): one read brings both, stamped at the
    second's arrival, and no read size could have kept the first's. The client says so by
    giving both one block (the benchmark counts such chunks as sharing a read)."""
    blocks, sent = await exchange(block_loop(LATE_S), end_after=LATE_S)
    assert [data for _stamp, data in blocks] == [b"firstsecond"]
    ((stamp, _data),) = blocks
    assert sent[1][0] - SLACK_S <= stamp <= sent[1][1] + SLACK_S, (blocks, sent)
    assert stamp - sent[0][1] > GAP_S / 2


def burst_server(
    listener: socket.socket, streams: int, rounds: int, sent: dict[bytes, tuple[float, float]]
) -> None:
    """Answer ``streams`` requests, then ``rounds`` times one chunk to every stream back to
    back (one decode step of a batch), 100 ms apart: far enough that a loaded machine's
    stall does not leave two of a stream's chunks waiting for one read. ``sent``: each
    payload's clock before and after its send."""
    conns = [listener.accept()[0] for _ in range(streams)]
    for conn in conns:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        conn.sendall(HEAD)
    for step in range(rounds):
        time.sleep(0.1)
        for index, conn in enumerate(conns):
            payload = b"%02d/%d;" % (index, step)
            before = time.monotonic()
            conn.sendall(b"%x\r\n%s\r\n" % (len(payload), payload))
            sent[payload] = (before, time.monotonic())
    for conn in conns:
        conn.sendall(b"0\r\n\r\n")
        conn.close()


@linux_only
async def test_a_burst_over_many_streams_is_read_in_few_wakeups_and_keeps_its_stamps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client's CPU per token is mostly per wakeup. With kernel stamps the moment of a
    read changes no stamp, so a burst of chunks landing on many sockets is read in a couple
    of looks at the ready set (one when the first lands, one ``COALESCE_S`` later for the
    rest), not one wakeup per socket, and every chunk keeps its own arrival."""
    looks: list[int] = []
    reads: list[int] = []
    look, read = http1.ReadPoller._read_ready, http1.StampedTransport._read_ready

    def counted_look(self: http1.ReadPoller) -> None:
        looks.append(1)
        look(self)

    def counted_read(self: http1.StampedTransport) -> None:
        reads.append(1)
        read(self)

    monkeypatch.setattr(http1.ReadPoller, "_read_ready", counted_look)
    monkeypatch.setattr(http1.StampedTransport, "_read_ready", counted_read)
    streams, rounds = 16, 4
    listener = socket.create_server((ADDRESS, 0), backlog=streams)
    sent: dict[bytes, tuple[float, float]] = {}
    thread = threading.Thread(
        target=burst_server, args=(listener, streams, rounds, sent), daemon=True
    )
    thread.start()
    url = f"http://{ADDRESS}:{listener.getsockname()[1]}"
    pool = Http1Pool(url, size=streams, connect_timeout=5)
    try:
        responses = await asyncio.gather(
            *(pool.post("/generate", b"{}", started=0.0) for _ in range(streams))
        )
    finally:
        await pool.close()
        thread.join(5)
        listener.close()
    blocks = [block for response in responses for block in response.blocks]
    assert sorted(data for _stamp, data in blocks) == sorted(sent)  # a read per chunk
    for stamp, data in blocks:
        before, after = sent[data]
        assert before - SLACK_S <= stamp <= after + SLACK_S, (data, stamp, sent[data])
    assert len(reads) > 2 * len(looks), (len(reads), len(looks))


async def test_without_kernel_stamps_the_loop_stamps_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fallback: a platform without the option (None), and one that refuses it (an
    option number the kernel does not know), connect through asyncio and stamp on the loop,
    so a read made late by a busy loop carries the loop's time."""
    for option in (None, 0x7FFF):
        monkeypatch.setattr(http1, "SO_TIMESTAMPNS", option)
        blocked_until: list[float] = []

        def block(loop: asyncio.AbstractEventLoop, out: list[float] = blocked_until) -> None:
            def sleep() -> None:
                time.sleep(GAP_S * 2)
                out.append(time.monotonic())

            loop.call_soon_threadsafe(sleep)
            time.sleep(0.01)

        blocks, sent = await exchange(block, end_after=2 * GAP_S)
        assert b"".join(data for _stamp, data in blocks) == b"firstsecond"
        assert blocks[0][0] >= blocked_until[0] > sent[0][1]


def test_kernel_stamp_reads_scm_timestampns_onto_the_monotonic_clock() -> None:
    option = http1.SO_TIMESTAMPNS or 35
    timespec = struct.pack("@qq", 1_764_600_000, 250_000_000)
    offset_ns = 1_764_599_400 * 1_000_000_000
    other = (socket.SOL_SOCKET, option + 1, b"\0" * 16)
    assert kernel_stamp([other, (socket.SOL_SOCKET, option, timespec)], offset_ns) == 600.25
    assert kernel_stamp([other], offset_ns) is None
    assert kernel_stamp([(socket.SOL_SOCKET, option, timespec[:8])], offset_ns) is None


@linux_only
async def test_a_request_larger_than_the_socket_takes_at_once_is_sent_whole() -> None:
    """The stamped transport writes what the socket takes and the rest when it drains."""
    body = b"x" * (8 * 1024 * 1024)
    received: list[int] = []

    def server(listener: socket.socket) -> None:
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            _head, _, rest = data.partition(b"\r\n\r\n")
            total = len(rest)
            while total < len(body):
                time.sleep(0.001)  # a slow reader: the client's socket buffer fills
                total += len(conn.recv(1 << 20))
            received.append(total)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    listener = socket.create_server(("127.0.0.232", 0))
    thread = threading.Thread(target=server, args=(listener,), daemon=True)
    thread.start()
    pool = Http1Pool(f"http://127.0.0.232:{listener.getsockname()[1]}", size=1, connect_timeout=5)
    try:
        response = await asyncio.wait_for(pool.post("/x", body, started=0.0), 30)
    finally:
        await pool.close()
        thread.join(5)
        listener.close()
    assert (response.status, response.body(), received) == (200, b"ok", [len(body)])


# --------------------------------------------------------------------------- the decoder


def chunked(payloads: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


@settings(max_examples=100, deadline=None)
@given(
    payloads=st.lists(st.binary(min_size=1, max_size=40), min_size=1, max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=30),
)
def test_decoder_over_any_read_boundaries(payloads: list[bytes], cuts: list[int]) -> None:
    """Whatever the read boundaries: the payload comes out whole, each block carries the
    stamp of the read whose bytes it holds, a read without payload bytes yields no block, and
    the body is complete exactly at its last byte."""
    wire = chunked(payloads)
    points = [*sorted({c for c in cuts if c < len(wire)}), len(wire)]
    spans = list(zip([0, *points], points, strict=False))
    reads = [(float(i), wire[a:b]) for i, (a, b) in enumerate(spans)]
    payload_at = bytearray(len(wire))  # 1 where the wire byte is payload
    pos = 0
    for p in payloads:
        pos += len(b"%x\r\n" % len(p))
        payload_at[pos : pos + len(p)] = b"\1" * len(p)
        pos += len(p) + 2
    decoder = ChunkedDecoder()
    for index in range(len(reads)):
        assert not decoder.complete
        decoder.feed(reads[: index + 1])
    assert decoder.complete and decoder.extra == 0
    assert b"".join(data for _stamp, data in decoder.blocks) == b"".join(payloads)
    expected = []
    for (stamp, data), (a, b) in zip(reads, spans, strict=True):
        piece = bytes(wire[i] for i in range(a, b) if payload_at[i])
        assert len(piece) <= len(data)
        if piece:
            expected.append((stamp, piece))
    assert decoder.blocks == expected


# --------------------------------------------------------------------------- the collector


@linux_only
async def test_requests_in_flight_keep_the_existing_heap_out_of_the_collectors_scans() -> None:
    """A full collection during a measurement would stop the loop for as long as it takes to
    scan the whole heap; while a request streams the older objects are frozen out of it."""
    assert gc.get_freeze_count() == 0
    during: list[int] = []
    await exchange(lambda _loop: during.append(gc.get_freeze_count()))
    assert during[0] > 1000  # the interpreter, the test runner, this package
    assert gc.get_freeze_count() == 0  # all back in the collector's generations
    gc.freeze()  # a process that froze its heap itself keeps it frozen
    try:
        await exchange(lambda _loop: None)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
