"""Streaming request driver: per-request timings and token counts against an SGLang server.

The client must not be what is measured. While a response streams, the driver only stamps
each received block with ``time.monotonic()`` and keeps its bytes (``orchestrator.bench.http1``,
a raw ``asyncio.Protocol`` client: no HTTP parser or stream reader per read); chunked framing,
SSE framing, JSON and token attribution happen after the stream ends (``parse_exchange``), off
the timed path.
The clock is ``time.monotonic`` so that times compare with a server on the same machine.

Token counts come from the server (``meta_info.completion_tokens`` for ``/generate``, ``usage``
for chat), never from the number of chunks: with speculative decoding one chunk can carry
several tokens.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

import aiohttp

from orchestrator.bench.http1 import ConnectTimeoutError, Http1Pool, HttpConnectionError
from orchestrator.bench.stats import spread_gaps
from orchestrator.log import get_logger
from orchestrator.types import ApiKind

Phase = Literal["calibration", "warmup", "measured", "probe"]


def _log() -> Any:
    """The module logger, bound at call time (after the entry point configured logging)."""
    return get_logger(component="bench.client")


_ERROR_BODY_LIMIT = 2000


class ErrorKind(StrEnum):
    """Why a request failed; one class per cause an operator would act on differently."""

    TIMEOUT = "timeout"  # no complete answer within request_timeout
    HTTP_STATUS = "http-status"  # non-200 answer
    CONNECTION = "connection"  # refused, reset, or the stream ended before its end marker
    ABORTED = "aborted"  # the server finished the request with finish reason ``abort``
    SERVER_ERROR = "server-error"  # an ``error`` object inside the stream
    PROTOCOL = "protocol"  # unparseable stream, or no token counts where they must be


class TokenSource(StrEnum):
    """Where a record's per-chunk token counts came from (exact, or estimated)."""

    META_INFO = "meta_info"  # /generate: cumulative meta_info.completion_tokens per chunk
    USAGE_PER_CHUNK = "usage-per-chunk"  # chat with continuous usage stats: exact
    TEXT_WEIGHTED = "text-weighted"  # chat: usage total spread over chunks by text length
    NONE = "none"  # no counts (failed request)


@dataclass(frozen=True)
class Chunk:
    """One streamed event: when its last byte arrived and how many tokens it carried."""

    arrival: float
    tokens: int


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


def spread_by_weight(total: int, weights: Sequence[int]) -> list[int]:
    """Integers summing to ``total`` proportional to ``weights`` (largest remainder).

    Every positive weight gets at least one token when ``total`` allows it: a chunk that
    carried text carried at least one token.
    """
    n_positive = sum(1 for w in weights if w > 0)
    if total <= 0 or n_positive == 0:
        return [0] * len(weights)
    base = [1 if w > 0 else 0 for w in weights] if total >= n_positive else [0] * len(weights)
    remaining = total - sum(base)
    weight_sum = sum(w for w in weights if w > 0)
    shares = [remaining * w / weight_sum if w > 0 else 0.0 for w in weights]
    result = [b + int(s) for b, s in zip(base, shares, strict=True)]
    leftover = total - sum(result)
    order = sorted(range(len(weights)), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    for i in order[:leftover]:
        result[i] += 1
    return result


def _record_from_raw(raw: RawExchange, chunks: list[Chunk], source: TokenSource) -> RequestRecord:
    return RequestRecord(
        label=raw.label,
        phase=raw.phase,
        api=raw.api,
        max_tokens=raw.max_tokens,
        ignore_eos=raw.ignore_eos,
        send_time=raw.send_time,
        end_time=raw.end_time,
        chunks=chunks,
        token_source=source,
        http_status=raw.http_status,
        error=raw.error,
        error_detail=raw.error_detail,
    )


def _fail(record: RequestRecord, kind: ErrorKind, detail: str) -> RequestRecord:
    if record.error is None:
        record.error = kind
        record.error_detail = detail
    return record


def _decode_events(raw: RawExchange) -> tuple[list[tuple[float, dict[str, Any]]], bool]:
    """JSON payloads and whether the ``[DONE]`` marker arrived; raises ValueError on junk."""
    payloads: list[tuple[float, dict[str, Any]]] = []
    done = False
    for arrival, data in split_sse_events(raw.blocks):
        if data == "[DONE]":
            done = True
            continue
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ValueError(f"stream event is not an object: {data[:200]}")
        payloads.append((arrival, obj))
    return payloads, done


def _parse_generate(raw: RawExchange) -> RequestRecord:
    record = _record_from_raw(raw, [], TokenSource.META_INFO)
    if raw.error is not None:
        record.token_source = TokenSource.NONE
        return record
    try:
        payloads, done = _decode_events(raw)
    except ValueError as exc:
        return _fail(record, ErrorKind.PROTOCOL, f"bad stream event: {exc}")
    seen = 0
    meta: dict[str, Any] = {}
    for arrival, obj in payloads:
        if "error" in obj:
            return _fail(record, ErrorKind.SERVER_ERROR, json.dumps(obj["error"])[:500])
        meta = obj.get("meta_info") or {}
        cumulative = meta.get("completion_tokens")
        if not isinstance(cumulative, int):
            return _fail(record, ErrorKind.PROTOCOL, "meta_info.completion_tokens missing")
        record.chunks.append(Chunk(arrival, max(cumulative - seen, 0)))
        seen = max(seen, cumulative)
    record.completion_tokens = seen
    record.prompt_tokens = meta.get("prompt_tokens")
    record.cached_tokens = meta.get("cached_tokens")
    record.response_id = meta.get("id")
    if meta.get("spec_verify_ct") is not None:
        record.spec_verify_ct = int(meta["spec_verify_ct"])
    if meta.get("spec_accept_length") is not None:
        record.spec_accept_length = float(meta["spec_accept_length"])
    finish = meta.get("finish_reason")
    record.finish_reason = finish.get("type") if isinstance(finish, dict) else finish
    if record.finish_reason == "abort":
        return _fail(record, ErrorKind.ABORTED, json.dumps(finish)[:500])
    if record.finish_reason is None:
        return _fail(record, ErrorKind.CONNECTION, f"stream ended without finish (done={done})")
    return record


def _parse_chat(raw: RawExchange) -> RequestRecord:
    record = _record_from_raw(raw, [], TokenSource.TEXT_WEIGHTED)
    if raw.error is not None:
        record.token_source = TokenSource.NONE
        return record
    try:
        payloads, done = _decode_events(raw)
    except ValueError as exc:
        return _fail(record, ErrorKind.PROTOCOL, f"bad stream event: {exc}")
    arrivals: list[float] = []
    text_lengths: list[int] = []
    cumulative_usage: list[int | None] = []
    usage: dict[str, Any] | None = None
    for arrival, obj in payloads:
        if "error" in obj:
            return _fail(record, ErrorKind.SERVER_ERROR, json.dumps(obj["error"])[:500])
        record.response_id = record.response_id or obj.get("id")
        chunk_usage = obj.get("usage")
        if isinstance(chunk_usage, dict):
            usage = chunk_usage
        choices = obj.get("choices") or []
        if not choices:
            continue
        choice = choices[0]
        delta = choice.get("delta") or {}
        length = len(delta.get("content") or "") + len(delta.get("reasoning_content") or "")
        arrivals.append(arrival)
        text_lengths.append(length)
        per_chunk = chunk_usage.get("completion_tokens") if isinstance(chunk_usage, dict) else None
        cumulative_usage.append(per_chunk if isinstance(per_chunk, int) else None)
        if choice.get("finish_reason") is not None:
            record.finish_reason = choice["finish_reason"]
    if usage is None or not isinstance(usage.get("completion_tokens"), int):
        return _fail(record, ErrorKind.PROTOCOL, "no usage in stream (include_usage ignored?)")
    record.completion_tokens = int(usage["completion_tokens"])
    record.prompt_tokens = usage.get("prompt_tokens")
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        record.cached_tokens = details.get("cached_tokens")
    if arrivals and all(c is not None for c in cumulative_usage):
        record.token_source = TokenSource.USAGE_PER_CHUNK
        seen = 0
        for arrival, cumulative in zip(arrivals, cumulative_usage, strict=True):
            assert cumulative is not None
            record.chunks.append(Chunk(arrival, max(cumulative - seen, 0)))
            seen = max(seen, cumulative)
    else:
        tokens = spread_by_weight(record.completion_tokens, text_lengths)
        record.chunks = [Chunk(a, k) for a, k in zip(arrivals, tokens, strict=True)]
    if record.finish_reason == "abort":
        return _fail(record, ErrorKind.ABORTED, "finish_reason abort")
    if record.finish_reason is None or not done:
        return _fail(record, ErrorKind.CONNECTION, f"stream ended early (done={done})")
    return record


def parse_exchange(raw: RawExchange) -> RequestRecord:
    """Turn a raw exchange into a record: token counts per chunk, finish, ids, error class."""
    return _parse_generate(raw) if raw.api == "generate" else _parse_chat(raw)


# --------------------------------------------------------------------------- I/O


class BenchClient:
    """One server's streaming client: a keep-alive connection pool sized to the concurrency.

    ``request_timeout`` bounds each request from send to the end of its stream; a request
    past it is cancelled and recorded as ``ErrorKind.TIMEOUT``, never retried (a measurement
    is never retried). The one resend: a request on a reused keep-alive connection that the
    server closed or reset before answering a single byte goes out again, once, on a fresh
    connection, with a fresh send stamp (see ``orchestrator.bench.http1``). ``http://`` and
    ``https://`` base URLs (ValueError otherwise).
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
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url = base_url.rstrip("/")
        self.api: ApiKind = api
        self.model = model
        self.concurrency = concurrency
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.continuous_usage_stats = continuous_usage_stats
        self.extra_body = dict(extra_body or {})
        self._pool = Http1Pool(self.base_url, size=concurrency, connect_timeout=connect_timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

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
        self._pool = Http1Pool(
            self.base_url, size=self.concurrency, connect_timeout=self.connect_timeout
        )
        if self._session is not None:
            await self._session.close()
            self._session = None

    def request_body(
        self, prompt: str, *, max_tokens: int, temperature: float, ignore_eos: bool
    ) -> tuple[str, dict[str, Any]]:
        """URL path and JSON body of one streamed request."""
        if self.api == "generate":
            body: dict[str, Any] = {
                "text": prompt,
                "sampling_params": {
                    "max_new_tokens": max_tokens,
                    "temperature": temperature,
                    "ignore_eos": ignore_eos,
                },
                "stream": True,
            }
            path = "/generate"
        else:
            stream_options: dict[str, Any] = {"include_usage": True}
            if self.continuous_usage_stats:
                stream_options["continuous_usage_stats"] = True
            body = {
                "model": self.model,
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": max_tokens,
                "temperature": temperature,
                "ignore_eos": ignore_eos,
                "stream": True,
                "stream_options": stream_options,
            }
            path = "/v1/chat/completions"
        body.update(self.extra_body)
        return path, body

    async def stream(
        self,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        label: str = "",
        phase: Phase = "measured",
    ) -> RawExchange:
        """Send one streamed request and stamp every block that arrives; no parsing here."""
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
            raw.send_time = response.started  # later only when resent (see the class doc)
            raw.http_status = response.status
            if response.status != 200:
                text = response.body().decode("utf-8", errors="replace")
                raw.end_time = response.completed
                raw.error = ErrorKind.HTTP_STATUS
                raw.error_detail = f"HTTP {response.status}: {text[:_ERROR_BODY_LIMIT]}"
            else:
                raw.blocks = response.blocks
                raw.end_time = response.blocks[-1][0] if response.blocks else response.completed
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
        prompt: str,
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
        return parse_exchange(raw)

    async def scrape_metrics(self, *, timeout: float = 10.0) -> str | None:
        """The Prometheus ``/metrics`` text, or None when the server has none (no
        ``--enable-metrics``) or it cannot be read in ``timeout``."""
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
