"""The simulated server's stamping sockets: a request's kernel arrival, a chunk's send.

Real sockets on loopback (127.0.0.233, an ephemeral port), no server around them.
"""

from __future__ import annotations

import socket
import sys
import time

import pytest

from orchestrator.sim import stamped

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SO_TIMESTAMPNS is Linux's")


def _wait_until_the_kernel_stamps(listener: socket.socket) -> None:
    """Linux turns receive stamping on for the whole machine only from a work queue
    (``net_enable_timestamp`` defers the static key to ``netstamp_work`` when no other socket
    had asked), so on a quiet machine the first packets after the listener asked usually
    arrive unstamped. The simulated server then keeps its handler's stamp; this test, which is about
    the stamp itself, waits until stamping is live (while the listener stays open it stays so).
    """
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        with socket.create_connection(listener.getsockname()) as probe:
            probe.sendall(b"x")
            conn, _ = listener.accept()
            with conn:
                conn.recv(10)
                if stamped.arrival_of(conn) is not None:
                    return
        time.sleep(0.01)
    pytest.fail("the kernel did not stamp a loopback arrival within 10 s")


def test_arrival_is_the_kernel_stamp_and_send_is_when_the_socket_took_the_bytes() -> None:
    listener = stamped.listener()
    listener.bind(("127.0.0.233", 0))
    listener.listen()
    _wait_until_the_kernel_stamps(listener)
    with listener, socket.create_connection(listener.getsockname()) as client:
        sent = time.monotonic()
        client.sendall(b"POST / HTTP/1.1\r\n\r\n")
        conn, _ = listener.accept()
        with conn:
            time.sleep(0.02)  # the server reads late; the arrival stamp does not move
            assert conn.recv(100).startswith(b"POST")
            arrival = stamped.arrival_of(conn)
            assert arrival is not None and sent <= arrival < sent + 0.01
            assert stamped.arrival_of(conn) is None  # claimed once per request

            before = time.monotonic()
            conn.send(b"chunk")
            after = time.monotonic()
            at = stamped.sent_of(conn, before)
            assert at is not None and before <= at <= after
            # A write after that one that did not reach the socket (asyncio buffered it):
            # the older send is not its stamp.
            assert stamped.sent_of(conn, after + 0.001) is None
        assert client.recv(100) == b"chunk"
    assert stamped.sent_of(client, 0.0) is None  # not a stamping socket
