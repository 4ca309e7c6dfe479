"""The OpenAI-compatible chat API as a dialect: how a request is written and its answer read
(final and streamed), for every engine that serves ``/v1/chat/completions`` (SGLang, vLLM,
llama.cpp's server). Token counts come from the stream's ``usage``: per chunk where the server
sends continuous usage stats, else the total spread over the chunks by text length.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from orchestrator.engines.base import (
    Chunk,
    ErrorKind,
    Generation,
    Reply,
    ResponseShapeError,
    StreamParse,
    TokenSource,
    WireRequest,
    as_prompt,
    spread_by_weight,
)
from orchestrator.types import ApiKind

ERROR_DETAIL_LIMIT = 500


def count(value: Any) -> int | None:
    """A token count as the server wrote it (an int; a float is truncated), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return None


def stream_payloads(
    events: Sequence[tuple[float, str]],
) -> tuple[list[tuple[float, dict[str, Any]]], bool]:
    """JSON objects of the ``data:`` payloads and whether ``[DONE]`` came; ValueError on junk."""
    payloads: list[tuple[float, dict[str, Any]]] = []
    done = False
    for arrival, data in events:
        if data == "[DONE]":
            done = True
            continue
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ValueError(f"stream event is not an object: {data[:200]}")
        payloads.append((arrival, obj))
    return payloads, done


def json_object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ResponseShapeError(f"response is not a JSON object: {str(data)[:200]}")
    return data


class ChatDialect:
    """``/v1/chat/completions``: OpenAI's chat API with the extensions SGLang and vLLM share
    (``ignore_eos``, ``reasoning_content`` when the server runs a reasoning parser, continuous
    usage stats)."""

    api: ApiKind = "chat"

    def request(self, ask: Generation) -> WireRequest:
        body: dict[str, Any] = {}
        if ask.model is not None:
            body["model"] = ask.model
        body["messages"] = [
            {"role": m.role, "content": m.content} for m in as_prompt(ask.prompt).chat_messages()
        ]
        body["max_tokens"] = ask.max_tokens
        body["temperature"] = ask.temperature
        if ask.ignore_eos is not None:
            body["ignore_eos"] = ask.ignore_eos
        body["stream"] = ask.stream
        if ask.stream:
            # The usage chunk is the only exact token count a chat stream gives.
            options: dict[str, Any] = {"include_usage": True}
            if ask.continuous_usage_stats:
                options["continuous_usage_stats"] = True
            body["stream_options"] = options
        return WireRequest("/v1/chat/completions", body)

    def parse_final(self, data: Any) -> Reply:
        response = json_object(data)
        usage = response.get("usage")
        tokens = count(usage.get("completion_tokens")) if isinstance(usage, dict) else None
        choices = response.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not isinstance(message, dict):
            return Reply(None, None, None, tokens)
        reasoning = message.get("reasoning_content")
        return Reply(
            content=message.get("content") or "",
            reasoning_content=reasoning if isinstance(reasoning, str) else None,
            finish_reason=choice.get("finish_reason"),
            completion_tokens=tokens,
        )

    def parse_stream(self, events: Sequence[tuple[float, str]]) -> StreamParse:
        parsed = StreamParse(TokenSource.TEXT_WEIGHTED)
        try:
            payloads, done = stream_payloads(events)
        except ValueError as exc:
            return parsed.fail(ErrorKind.PROTOCOL, f"bad stream event: {exc}")
        arrivals: list[float] = []
        text_lengths: list[int] = []
        cumulative_usage: list[int | None] = []
        usage: dict[str, Any] | None = None
        for arrival, obj in payloads:
            if "error" in obj:
                detail = json.dumps(obj["error"])[:ERROR_DETAIL_LIMIT]
                return parsed.fail(ErrorKind.SERVER_ERROR, detail)
            parsed.response_id = parsed.response_id or obj.get("id")
            chunk_usage = obj.get("usage")
            if isinstance(chunk_usage, dict):
                usage = chunk_usage
            choices = obj.get("choices") or []
            if not choices:
                continue
            choice = choices[0]
            delta = choice.get("delta") or {}
            content = delta.get("content") or ""
            reasoning = delta.get("reasoning_content") or ""
            parsed.content_parts.append(content)
            parsed.reasoning_parts.append(reasoning)
            arrivals.append(arrival)
            text_lengths.append(len(content) + len(reasoning))
            per_chunk = (
                chunk_usage.get("completion_tokens") if isinstance(chunk_usage, dict) else None
            )
            cumulative_usage.append(per_chunk if isinstance(per_chunk, int) else None)
            if choice.get("finish_reason") is not None:
                parsed.finish_reason = choice["finish_reason"]
        if usage is None or not isinstance(usage.get("completion_tokens"), int):
            return parsed.fail(ErrorKind.PROTOCOL, "no usage in stream (include_usage ignored?)")
        parsed.completion_tokens = int(usage["completion_tokens"])
        parsed.prompt_tokens = usage.get("prompt_tokens")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            parsed.cached_tokens = details.get("cached_tokens")
        if arrivals and all(c is not None for c in cumulative_usage):
            parsed.token_source = TokenSource.USAGE_PER_CHUNK
            seen = 0
            for arrival, cumulative in zip(arrivals, cumulative_usage, strict=True):
                assert cumulative is not None
                parsed.chunks.append(Chunk(arrival, max(cumulative - seen, 0)))
                seen = max(seen, cumulative)
        else:
            tokens = spread_by_weight(parsed.completion_tokens, text_lengths)
            parsed.chunks = [Chunk(a, k) for a, k in zip(arrivals, tokens, strict=True)]
        if parsed.finish_reason == "abort":
            return parsed.fail(ErrorKind.ABORTED, "finish_reason abort")
        if parsed.finish_reason is None or not done:
            return parsed.fail(ErrorKind.CONNECTION, f"stream ended early (done={done})")
        return parsed


__all__ = ["ERROR_DETAIL_LIMIT", "ChatDialect", "count", "json_object", "stream_payloads"]
