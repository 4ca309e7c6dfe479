"""The load generator's connection policy against a real loopback server that counts the
connections it accepts: ``keep-alive`` reuses one, ``per-request`` opens a fresh one for every
request, closes it after the response, and starts the request's clock before the connect (as
``bench_serving``'s ``st``, so a per-request TTFT includes the connect)."""

from __future__ import annotations

import argparse
import asyncio
import time

import pytest

from orchestrator import engines
from orchestrator.bench.cli import configure_parser
from orchestrator.bench.client import BenchClient, parse_exchange
from orchestrator.bench.http1 import ConnectionPolicy
from tests.integration.test_bench_http1 import (
    STREAM_HEAD,
    Connection,
    RawServer,
    chunk,
    generate_events,
)

SGLANG = engines.get("sglang")
GENERATE = SGLANG.dialect("generate")

ADDRESS = "127.0.0.240"


class CountingServer(RawServer):
    """A RawServer that also keeps, per accepted connection, when it was accepted and whether
    the client closed it (EOF) once its answers were sent."""

    def __init__(self) -> None:
        self.accepted_at: list[float] = []
        self.client_closed: list[asyncio.Event] = []
        super().__init__(self._answer, ADDRESS)

    async def _answer(self, conn: Connection) -> None:
        self.accepted_at.append(time.monotonic())
        self.client_closed.append(asyncio.Event())
        while await conn.read_request() is not None:
            await conn.send(STREAM_HEAD + b"".join(chunk(e) for e in generate_events(3)))
            await conn.send(b"0\r\n\r\n")
        # read_request returned None: the client closed its side
        self.client_closed[conn.index].set()


def bench_client(url: str, connections: ConnectionPolicy, concurrency: int = 2) -> BenchClient:
    return BenchClient(
        url,
        api="generate",
        model="m",
        concurrency=concurrency,
        request_timeout=5.0,
        connections=connections, engine=SGLANG,
    )


async def test_per_request_opens_a_connection_per_request_and_closes_it_after() -> None:
    async with CountingServer() as server:
        async with bench_client(server.url, "per-request") as client:
            sequential = [await client.stream("p", max_tokens=3) for _ in range(3)]
            together = await asyncio.gather(*(client.stream("p", max_tokens=3) for _ in range(2)))
            assert [len(c.requests) for c in server.connections] == [1, 1, 1, 1, 1]
            # each closed by the client after its response (the last EOFs may still be on
            # their way)
            async with asyncio.timeout(5.0):
                await asyncio.gather(*(closed.wait() for closed in server.client_closed))
        for raw in [*sequential, *together]:
            record = parse_exchange(raw, GENERATE)
            assert record.error is None and record.completion_tokens == 3
        # Each request's clock started before its connection was accepted: the connect is
        # inside its TTFT, as bench_serving's (``st`` before ``session.post``).
        for raw, accepted in zip(sequential, server.accepted_at[:3], strict=True):
            assert raw.send_time <= accepted <= raw.blocks[0][0]


async def test_keep_alive_reuses_its_connection_and_its_clock_starts_at_the_send() -> None:
    async with CountingServer() as server:
        async with bench_client(server.url, "keep-alive") as client:
            sequential = [await client.stream("p", max_tokens=3) for _ in range(3)]
        assert [len(c.requests) for c in server.connections] == [3]
        assert all(parse_exchange(raw, GENERATE).error is None for raw in sequential)
        (accepted,) = server.accepted_at
        assert sequential[0].send_time <= accepted < sequential[1].send_time


def test_connections_option_defaults_to_keep_alive_and_names_two_policies() -> None:
    parser = configure_parser(argparse.ArgumentParser())
    base = ["--url", "http://127.0.0.1:1", "--model", "m"]
    assert parser.parse_args(base).connections == "keep-alive"
    chosen = parser.parse_args([*base, "--connections", "per-request"])
    assert chosen.connections == "per-request"
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--connections", "pooled"])
