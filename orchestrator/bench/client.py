"""Streaming request driver: per-request timings and token counts against a serving engine.

The client must not be what is measured. While a response streams, the driver only stamps
each received block with ``time.monotonic()`` and keeps its bytes (``orchestrator.bench.http1``,
a raw ``asyncio.Protocol`` client: no HTTP parser or stream reader per read); chunked framing,
SSE framing, JSON and token attribution happen after the stream ends (``parse_exchange``), off
the timed path.
The clock is ``time.monotonic`` so that times compare with a server on the same machine.

Token counts come from the server, as the engine's dialect reads them (per-chunk counts,
or ``usage`` for chat), never from the number of chunks: with speculative decoding one chunk
can carry several tokens. The client is built for one engine (``engine``): its requests,
stream parsing and ``/metrics`` counters are that engine's, and the matrix reads them here.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

from orchestrator.bench.http1 import (
    ConnectionPolicy,
    ConnectTimeoutError,
    Http1Pool,
    Http1Response,
    HttpConnectionError,
)
from orchestrator.bench.stats import spread_gaps
from orchestrator.engines.base import (
    AcceptanceCounters,
    Chunk,
    Dialect,
    Engine,
    ErrorKind,
    Generation,
    Prompt,
    Reply,
    StreamParse,
    TokenSource,
    spread_by_weight,
)
from orchestrator.log import get_logger
from orchestrator.types import ApiKind

Phase = Literal["calibration", "warmup", "measured", "probe"]

__all__ = [
    "BenchClient",
    "Chunk",
    "ErrorKind",
    "Phase",
    "RawExchange",
    "RequestRecord",
    "TokenSource",
    "parse_exchange",
    "read_exchange",
    "split_sse_events",
    "spread_by_weight",
]


def _log() -> Any:
    """The module logger, bound at call time (after the entry point configured logging)."""
    return get_logger(component="bench.client")


_ERROR_BODY_LIMIT = 2000


@dataclass
class RawExchange:
    """What the wire gave for one request, with arrival stamps; parsed later."""

    label: str
    phase: Phase
    api: ApiKind
    max_tokens: int
    ignore_eos: bool
    send_time: float
    blocks: list[tuple[float, bytes]] = field(default_factory=list)
    end_time: float | None = None
    http_status: int | None = None
    error: ErrorKind | None = None
    error_detail: str | None = None


@dataclass
class RequestRecord:
    """One request's measured facts. Times are ``time.monotonic()`` seconds."""

    label: str
    phase: Phase
    api: ApiKind
    max_tokens: int
    ignore_eos: bool
    send_time: float
    end_time: float | None
    chunks: list[Chunk]
    token_source: TokenSource
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_correct_drafts: int | None = None
    spec_proposed_drafts: int | None = None
    http_status: int | None = None
    error: ErrorKind | None = None
    error_detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def first_token_time(self) -> float | None:
        return next((c.arrival for c in self.chunks if c.tokens > 0), None)

    @property
    def last_token_time(self) -> float | None:
        return next((c.arrival for c in reversed(self.chunks) if c.tokens > 0), None)

    @property
    def ttft(self) -> float | None:
        first = self.first_token_time
        return None if first is None else first - self.send_time

    @property
    def e2e(self) -> float | None:
        return None if self.end_time is None else self.end_time - self.send_time

    def itl_samples(self) -> list[float]:
        """Inter-token latencies, a k-token chunk's gap spread over its k tokens."""
        return spread_gaps([(c.arrival, c.tokens) for c in self.chunks])

    @property
    def tpot(self) -> float | None:
        """Mean time per output token after the first chunk (= mean of ``itl_samples``)."""
        first, last = self.first_token_time, self.last_token_time
        token_chunks = [c for c in self.chunks if c.tokens > 0]
        if first is None or last is None or not token_chunks:
            return None
        later_tokens = sum(c.tokens for c in token_chunks[1:])
        if later_tokens <= 0:
            return None
        return (last - first) / later_tokens

    @property
    def decode_tok_s(self) -> float | None:
        tpot = self.tpot
        return None if tpot is None or tpot <= 0 else 1.0 / tpot

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, raw chunks included (``[[arrival, tokens], ...]``)."""
        return {
            "label": self.label,
            "phase": self.phase,
            "api": self.api,
            "max_tokens": self.max_tokens,
            "ignore_eos": self.ignore_eos,
            "send_time": self.send_time,
            "end_time": self.end_time,
            "first_token_time": self.first_token_time,
            "ttft_s": self.ttft,
            "e2e_s": self.e2e,
            "tpot_s": self.tpot,
            "chunks": [[c.arrival, c.tokens] for c in self.chunks],
            "token_source": self.token_source.value,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "finish_reason": self.finish_reason,
            "response_id": self.response_id,
            "spec_verify_ct": self.spec_verify_ct,
            "spec_accept_length": self.spec_accept_length,
            "spec_num_correct_drafts": self.spec_correct_drafts,
            "spec_num_proposed_drafts": self.spec_proposed_drafts,
            "http_status": self.http_status,
            "error": None if self.error is None else self.error.value,
            "error_detail": self.error_detail,
        }


# --------------------------------------------------------------------------- parsing (pure)


def split_sse_events(blocks: Sequence[tuple[float, bytes]]) -> list[tuple[float, str]]:
    """``data:`` payloads with the arrival time of the block that completed each line."""
    events: list[tuple[float, str]] = []
    pending = b""
    for arrival, block in blocks:
        pending += block
        *lines, pending = pending.split(b"\n")
        for line in lines:
            text = line.rstrip(b"\r").decode("utf-8", errors="replace")
            if text.startswith("data:"):
                events.append((arrival, text[5:].strip()))
    if pending.strip().startswith(b"data:") and blocks:
        events.append((blocks[-1][0], pending.decode("utf-8", errors="replace")[5:].strip()))
    return events


def _record(raw: RawExchange, parsed: StreamParse) -> RequestRecord:
    return RequestRecord(
        label=raw.label,
        phase=raw.phase,
        api=raw.api,
        max_tokens=raw.max_tokens,
        ignore_eos=raw.ignore_eos,
        send_time=raw.send_time,
        end_time=raw.end_time,
        chunks=parsed.chunks,
        token_source=parsed.token_source,
        prompt_tokens=parsed.prompt_tokens,
        completion_tokens=parsed.completion_tokens,
        cached_tokens=parsed.cached_tokens,
        finish_reason=parsed.finish_reason,
        response_id=parsed.response_id,
        spec_verify_ct=parsed.spec_verify_ct,
        spec_accept_length=parsed.spec_accept_length,
        spec_correct_drafts=parsed.spec_correct_drafts,
        spec_proposed_drafts=parsed.spec_proposed_drafts,
        http_status=raw.http_status,
        error=raw.error if raw.error is not None else parsed.error,
        error_detail=raw.error_detail if raw.error is not None else parsed.error_detail,
    )


def read_exchange(raw: RawExchange, reader: Dialect) -> tuple[RequestRecord, Reply]:
    """A raw exchange read by its API's dialect: the record (token counts per chunk, finish,
    ids, error class) and the streamed text as an answer. A request that failed on the wire
    is not parsed (its record has no counts). ``reader`` is the client's dialect
    (:attr:`BenchClient.dialect`): the server's engine's, always named."""
    if raw.error is not None:
        parsed = StreamParse(TokenSource.NONE)
    else:
        parsed = reader.parse_stream(split_sse_events(raw.blocks))
    return _record(raw, parsed), parsed.reply()


def parse_exchange(raw: RawExchange, reader: Dialect) -> RequestRecord:
    """Turn a raw exchange into a record: token counts per chunk, finish, ids, error class."""
    return read_exchange(raw, reader)[0]


# --------------------------------------------------------------------------- I/O


def _record_answer(raw: RawExchange, response: Http1Response) -> None:
    """A complete answer's stamps and blocks into ``raw``, or its status as the error."""
    # The send itself on an open connection, a fresh stamp when resent (see the client's
    # class doc); the stamp the caller made when a connection had to be opened first.
    raw.send_time = response.started
    raw.http_status = response.status
    if response.status != 200:
        text = response.body().decode("utf-8", errors="replace")
        raw.end_time = response.completed
        raw.error = ErrorKind.HTTP_STATUS
        raw.error_detail = f"HTTP {response.status}: {text[:_ERROR_BODY_LIMIT]}"
    else:
        raw.blocks = response.blocks
        raw.end_time = response.blocks[-1][0] if response.blocks else response.completed


class BenchClient:
    """One server's streaming client: a connection pool sized to the concurrency, its
    connections kept alive (the default) or, with ``connections="per-request"``, one fresh
    connection per request whose connect falls inside the request's clock, as with
    ``bench_serving`` (see ``orchestrator.bench.http1``).

    ``request_timeout`` bounds each request from send to the end of its stream; a request
    past it is cancelled and recorded as ``ErrorKind.TIMEOUT``, never retried (a measurement
    is never retried). The one resend: a request on a reused keep-alive connection that the
    server closed or reset before answering a single byte goes out again, once, on a fresh
    connection, with a fresh send stamp (see ``orchestrator.bench.http1``). ``http://`` and
    ``https://`` base URLs (ValueError otherwise).

    ``engine`` is the server's engine: its dialect writes the requests and reads the answers
    (``reader`` overrides the dialect alone), its :attr:`acceptance_counters` are what the
    matrix reads from ``/metrics``. It has no default: a client of the wrong engine would
    read another engine's counters without an error.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api: ApiKind,
        model: str,
        concurrency: int,
        request_timeout: float,
        connect_timeout: float = 10.0,
        continuous_usage_stats: bool = False,
        extra_body: dict[str, Any] | None = None,
        reader: Dialect | None = None,
        connections: ConnectionPolicy = "keep-alive",
        engine: Engine,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url = base_url.rstrip("/")
        self.api: ApiKind = api
        self.engine: Engine = engine
        self.dialect: Dialect = reader or self.engine.dialect(api)
        self.model = model
        self.concurrency = concurrency
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.continuous_usage_stats = continuous_usage_stats
        self.extra_body = dict(extra_body or {})
        self.connections: ConnectionPolicy = connections
        self._pool = self._new_pool()
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    def _new_pool(self) -> Http1Pool:
        return Http1Pool(
            self.base_url,
            size=self.concurrency,
            connect_timeout=self.connect_timeout,
            connections=self.connections,
        )

    def _metrics_session(self) -> aiohttp.ClientSession:
        """aiohttp for ``/metrics`` only: off the timed path, two connections of its own."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=2),
                timeout=aiohttp.ClientTimeout(total=None, connect=self.connect_timeout),
            )
        return self._session

    async def close(self) -> None:
        """Close the idle connections (a stream still running closes its own when it ends)."""
        await self._pool.close()
        self._pool = self._new_pool()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def request_body(
        self, prompt: str | Prompt, *, max_tokens: int, temperature: float, ignore_eos: bool
    ) -> tuple[str, dict[str, Any]]:
        """URL path and JSON body of one streamed request (``max_tokens`` as given: the
        caller has already let a Prompt's own output length override it)."""
        request = self.dialect.request(
            Generation(
                prompt,
                max_tokens,
                temperature,
                stream=True,
                model=self.model,
                ignore_eos=ignore_eos,
                continuous_usage_stats=self.continuous_usage_stats,
            )
        )
        body = dict(request.body)
        body.update(self.extra_body)
        return request.path, body

    async def stream(
        self,
        prompt: str | Prompt,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        label: str = "",
        phase: Phase = "measured",
    ) -> RawExchange:
        """Send one streamed request and stamp every block that arrives; no parsing here.

        A Prompt that carries its own ``max_tokens`` (a workload's per-request output length)
        overrides the call's; the exchange records the length actually asked."""
        if isinstance(prompt, Prompt) and prompt.max_tokens is not None:
            max_tokens = prompt.max_tokens
        path, body = self.request_body(
            prompt, max_tokens=max_tokens, temperature=temperature, ignore_eos=ignore_eos
        )
        payload = json.dumps(body).encode()
        clock = time.monotonic
        raw = RawExchange(
            label=label,
            phase=phase,
            api=self.api,
            max_tokens=max_tokens,
            ignore_eos=ignore_eos,
            send_time=clock(),
        )
        try:
            async with asyncio.timeout(self.request_timeout):
                response = await self._pool.post(path, payload, started=raw.send_time)
            _record_answer(raw, response)
        except ConnectTimeoutError as exc:
            raw.end_time = clock()
            raw.error = ErrorKind.TIMEOUT
            raw.error_detail = str(exc)
        except TimeoutError:
            raw.end_time = clock()
            raw.error = ErrorKind.TIMEOUT
            raw.error_detail = f"no complete answer within {self.request_timeout} s"
        except (HttpConnectionError, OSError) as exc:
            raw.end_time = clock()
            raw.error = ErrorKind.CONNECTION
            raw.error_detail = f"{type(exc).__name__}: {exc}"[:_ERROR_BODY_LIMIT]
        if raw.error is not None:
            _log().debug(
                "request.failed", label=label, error=raw.error.value, detail=raw.error_detail
            )
        return raw

    async def send(
        self,
        prompt: str | Prompt,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        label: str = "",
        phase: Phase = "measured",
    ) -> RequestRecord:
        """``stream`` then ``parse_exchange``: for callers that don't batch the parsing."""
        raw = await self.stream(
            prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            ignore_eos=ignore_eos,
            label=label,
            phase=phase,
        )
        return parse_exchange(raw, self.dialect)

    @property
    def acceptance_counters(self) -> AcceptanceCounters:
        """The engine's ``/metrics`` counters of accept length (what :meth:`scrape_metrics`
        texts are read for)."""
        return self.engine.acceptance_counters

    async def scrape_metrics(self, *, timeout: float = 10.0) -> str | None:
        """The Prometheus ``/metrics`` text, or None when the server has none (started
        without its metrics flag) or it cannot be read in ``timeout``."""
        session = self._metrics_session()
        try:
            async with asyncio.timeout(timeout):
                async with session.get(self.base_url + "/metrics") as response:
                    if response.status != 200:
                        return None
                    return await response.text(errors="replace")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            _log().info("metrics.unavailable", url=self.base_url, error=type(exc).__name__)
            return None
