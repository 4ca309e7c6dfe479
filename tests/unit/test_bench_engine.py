"""The bench reaches the server's engine only through the seam: a fake engine registered here,
with its own request path, stream shape and ``/metrics`` counter names, is measured by
``orchestrator bench --engine`` against a tiny loopback server that speaks only that engine.

The server also serves the default engine's counter names, frozen: a bench that read those
instead of the fake's would find no verify call; a request in the default engine's dialect
would find no route.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator, Sequence
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from orchestrator import engines
from orchestrator.bench import cli
from orchestrator.bench.acceptlen import from_metrics
from orchestrator.engines.base import (
    AcceptanceCounters,
    Chunk,
    Engine,
    ErrorKind,
    Generation,
    Reply,
    StreamParse,
    TokenSource,
    WireRequest,
    as_prompt,
)
from orchestrator.types import EXIT_BAD_INPUT, EXIT_OK, ApiKind

ENGINE = "toy-bench"
PATH = "/toy/stream"
STEP = 3
"""Tokens each verify step gives: two accepted drafts and the bonus (accept length 3)."""
COUNTERS = AcceptanceCounters(
    verify_steps="toy:verify_steps_total",
    tokens="toy:accepted_drafts_total",
    tokens_include_first=False,
    tokens_include_bonus=False,
)


class ToyDialect:
    """The fake engine's one API: ``{"input", "max_tokens"}`` to :data:`PATH`, answered with
    events ``{"n": tokens}``, the last also ``{"finish", "verify", "drafts"}``."""

    def __init__(self, api: ApiKind) -> None:
        self._api = api

    @property
    def api(self) -> ApiKind:
        return self._api

    def request(self, ask: Generation) -> WireRequest:
        text = as_prompt(ask.prompt).plain_text()
        return WireRequest(PATH, {"input": text, "max_tokens": ask.max_tokens})

    def parse_final(self, data: Any) -> Reply:
        return Reply(data.get("text"), None, data.get("finish"), data.get("n"))

    def parse_stream(self, events: Sequence[tuple[float, str]]) -> StreamParse:
        parsed = StreamParse(TokenSource.USAGE_PER_CHUNK)
        for arrival, payload in events:
            event = json.loads(payload)
            parsed.chunks.append(Chunk(arrival, event["n"]))
            parsed.prompt_tokens = event.get("prompt", parsed.prompt_tokens)
            if "finish" in event:
                parsed.finish_reason = event["finish"]
                parsed.spec_verify_ct = event["verify"]
                parsed.spec_correct_drafts = event["drafts"]
        parsed.completion_tokens = sum(c.tokens for c in parsed.chunks)
        if parsed.finish_reason is None:
            return parsed.fail(ErrorKind.CONNECTION, "stream ended without finish")
        return parsed


class ToyBenchEngine:
    """Only what the bench asks of an engine: its name, dialect and acceptance counters."""

    name = ENGINE
    acceptance_counters = COUNTERS

    def dialect(self, api: ApiKind) -> ToyDialect:
        return ToyDialect(api)


class ToyServer:
    """Speaks only the fake engine; counts its verify steps and accepted drafts."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.verify_steps = 0
        self.drafts = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(PATH, self.stream)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_route("*", "/{tail:.*}", self.unknown)
        return app

    async def unknown(self, request: web.Request) -> web.Response:
        self.paths.append(request.path)
        return web.Response(status=404, text="not this engine")

    async def stream(self, request: web.Request) -> web.StreamResponse:
        self.paths.append(request.path)
        body = await request.json()
        prompt = len(body["input"].split())
        steps, rest = divmod(body["max_tokens"] - 1, STEP)
        assert rest == 0, "the test asks for 1 + k * STEP tokens"
        self.verify_steps += steps
        self.drafts += steps * (STEP - 1)
        events: list[dict[str, Any]] = [{"n": 1, "prompt": prompt}]
        events += [{"n": STEP} for _ in range(steps)]
        events[-1].update(finish="length", verify=steps, drafts=steps * (STEP - 1))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(f"data: {json.dumps(event)}\n\n".encode())
        await response.write_eof()
        return response

    async def metrics(self, _request: web.Request) -> web.Response:
        text = (
            f'toy:verify_steps_total{{model="m"}} {self.verify_steps}\n'
            f'toy:accepted_drafts_total{{model="m"}} {self.drafts}\n'
        )
        frozen = engines.get(engines.DEFAULT_ENGINE).acceptance_counters
        text += f"{frozen.verify_steps} 5\n{frozen.tokens} 999\n"
        return web.Response(text=text)


@pytest.fixture
def toy_engine() -> Iterator[None]:
    engines.register(cast(Engine, ToyBenchEngine()))
    try:
        yield
    finally:
        engines.unregister(ENGINE)


def test_counters_say_what_their_tokens_count() -> None:
    # 12 accepted drafts over 6 steps, each step's bonus not counted: 18 decode tokens.
    assert COUNTERS.decode_tokens(12, 6, requests=4) == 18
    everything = AcceptanceCounters("v", "t")  # first tokens and bonuses both counted
    assert everything.decode_tokens(22, 6, requests=4) == 18
    before = "toy:verify_steps_total 10\ntoy:accepted_drafts_total 20\n"
    after = "toy:verify_steps_total 16\ntoy:accepted_drafts_total 32\n"
    estimate = from_metrics(before, after, requests=4, counters=COUNTERS)
    assert (estimate.value, estimate.count) == (3.0, 6)
    lacking = from_metrics(before, "other_total 1\n", requests=4, counters=COUNTERS)
    assert lacking.value is None and "toy:verify_steps_total" in (lacking.reason or "")


async def test_bench_measures_with_the_named_engines_dialect_and_counters(
    toy_engine: None,
) -> None:
    server = ToyServer()
    async with TestServer(server.app(), host="127.0.0.1") as loopback:
        url = str(loopback.make_url("")).rstrip("/")
        args = cli.configure_parser(argparse.ArgumentParser()).parse_args([
            "--url", url, "--model", "m", "--engine", ENGINE, "--contexts", "24",
            "--concurrency", "2", "--rate", "40", "--duration", "0.3", "--rounds", "2",
            "--warmup", "1", "--max-tokens", str(1 + 2 * STEP), "--json",
        ])  # fmt: skip
        code, document, points = await cli.run_async(args)
    assert code == EXIT_OK, document
    assert document["engine"] == ENGINE
    assert server.paths and set(server.paths) == {PATH}  # every request in the toy dialect
    assert [(p["concurrency"], p["rate"]) for p in document["points"]] == [(2, None), (None, 40)]
    for point in document["points"]:
        assert point["errors"] == 0
        assert point["accept_len_meta_info"] == pytest.approx(STEP)
        assert point["accept_len_meta_info_exact_requests"] == point["requests"]
        # Read from the toy's counters: the default engine's, frozen, show no verify call.
        assert point["accept_len_metrics"] == pytest.approx(STEP)
        assert point["accept_len_metrics_verify_calls"] == 2 * point["requests"]
    assert all(r.token_source is TokenSource.USAGE_PER_CHUNK for p in points for r in p.records)


def test_an_unknown_engine_is_a_usage_error_naming_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main(["--url", "http://127.0.0.1:1", "--model", "m", "--engine", "nope"])
    assert code == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert "--engine" in error and "'nope'" in error
    assert all(name in error for name in engines.names())
