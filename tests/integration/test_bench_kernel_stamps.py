"""Each read's arrival comes from the kernel, not from when a busy event loop got to it.

The server is a plain thread (its own clock readings are what the wire saw): it answers with a
chunked stream whose first chunk goes out at once and whose second goes out later, while the
client's event loop is blocked across the first chunk's arrival. Address 127.0.0.238.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time

import pytest

from orchestrator.bench.http1 import Http1Pool

ADDRESS = "127.0.0.238"
BLOCK_S = 0.15
SECOND_CHUNK_AFTER_S = 0.3

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")


def serve_once(
    listener: socket.socket, sent: list[float], loop: asyncio.AbstractEventLoop
) -> None:
    conn, _ = listener.accept()
    with conn:
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        # The client's loop is made busy, then the first chunk arrives while it is.
        loop.call_soon_threadsafe(time.sleep, BLOCK_S)
        time.sleep(0.03)
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        conn.sendall(head + b"5\r\nfirst\r\n")
        sent.append(time.monotonic())
        time.sleep(SECOND_CHUNK_AFTER_S)
        conn.sendall(b"6\r\nsecond\r\n")
        sent.append(time.monotonic())
        conn.sendall(b"0\r\n\r\n")


async def test_reads_carry_the_kernel_arrival_while_the_loop_was_busy() -> None:
    listener = socket.create_server((ADDRESS, 0))
    port = listener.getsockname()[1]
    sent: list[float] = []
    loop = asyncio.get_running_loop()
    thread = threading.Thread(target=serve_once, args=(listener, sent, loop), daemon=True)
    thread.start()
    pool = Http1Pool(f"http://{ADDRESS}:{port}", size=1, connect_timeout=5)
    try:
        response = await pool.post("/generate", b"{}", started=time.monotonic())
    finally:
        await pool.close()
        thread.join(5)
        listener.close()
    assert response.body() == b"firstsecond"
    (first, _), (second, _) = response.blocks
    # The loop read the first chunk only after its block ended, yet the stamp is the
    # kernel's: within a millisecond of the server's send, on the monotonic clock.
    assert abs(first - sent[0]) < 0.001, (first, sent)
    assert abs(second - sent[1]) < 0.001, (second, sent)
    assert second - first == pytest.approx(SECOND_CHUNK_AFTER_S, abs=0.01)
