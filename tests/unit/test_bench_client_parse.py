"""Parsing of raw streamed exchanges into request records (SSE framing, token attribution)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator import engines
from orchestrator.bench.client import (
    Chunk,
    ErrorKind,
    RawExchange,
    TokenSource,
    parse_exchange,
    split_sse_events,
    spread_by_weight,
)
from orchestrator.types import ApiKind

SGLANG = engines.get("sglang")
CHAT = SGLANG.dialect("chat")
GENERATE = SGLANG.dialect("generate")


def _sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def _raw(api: ApiKind, blocks: list[tuple[float, bytes]], **kw: Any) -> RawExchange:
    return RawExchange(
        label="t",
        phase="measured",
        api=api,
        max_tokens=8,
        ignore_eos=True,
        send_time=0.0,
        blocks=blocks,
        end_time=blocks[-1][0] if blocks else 1.0,
        **kw,
    )


def test_sse_lines_split_across_blocks_take_the_completing_block_time() -> None:
    payload = _sse({"a": 1}) + _sse({"b": 2})
    blocks = [(1.0, payload[:5]), (2.0, payload[5:20]), (3.0, payload[20:])]
    events = split_sse_events(blocks)
    assert events == [(2.0, '{"a": 1}'), (3.0, '{"b": 2}')]


def test_spread_by_weight_is_exact_and_gives_every_text_chunk_a_token() -> None:
    assert spread_by_weight(10, [0, 5, 5, 0]) == [0, 5, 5, 0]
    spread = spread_by_weight(7, [1, 100, 1])
    assert sum(spread) == 7 and min(spread) >= 1
    assert spread_by_weight(1, [3, 3]) in ([1, 0], [0, 1])
    assert spread_by_weight(0, [3]) == [0]


def _gen(cumulative: int, finish: Any = None, **meta: Any) -> dict[str, Any]:
    return {
        "text": "x" * cumulative,
        "meta_info": {
            "id": "rid-1",
            "prompt_tokens": 60,
            "completion_tokens": cumulative,
            "cached_tokens": 0,
            "finish_reason": finish,
            **meta,
        },
    }


def test_generate_tokens_come_from_cumulative_meta_info() -> None:
    blocks = [
        (1.0, _sse(_gen(1))),
        (1.1, _sse(_gen(4))),  # a 3-token speculative step
        (
            1.2,
            _sse(
                _gen(8, {"type": "length", "length": 8}, spec_verify_ct=3, spec_accept_length=8 / 3)
            ),
        ),
        (1.21, _sse(b"[DONE]")),
    ]
    record = parse_exchange(_raw("generate", blocks), GENERATE)
    assert record.ok, record.error_detail
    assert record.token_source is TokenSource.CUMULATIVE_PER_CHUNK
    assert record.chunks == [Chunk(1.0, 1), Chunk(1.1, 3), Chunk(1.2, 4)]
    assert record.completion_tokens == 8 and record.prompt_tokens == 60
    assert record.finish_reason == "length"
    assert record.response_id == "rid-1"
    assert record.spec_verify_ct == 3
    assert record.ttft == 1.0
    assert record.itl_samples() == pytest.approx([0.1 / 3] * 3 + [0.1 / 4] * 4)
    assert record.tpot == pytest.approx(0.2 / 7)


def test_generate_abort_and_error_events_are_classified() -> None:
    aborted = parse_exchange(
        _raw("generate", [(1.0, _sse(_gen(2, {"type": "abort", "message": "x"})))]), GENERATE
    )
    assert aborted.error is ErrorKind.ABORTED
    error = _sse({"error": {"message": "boom"}})
    failed = parse_exchange(_raw("generate", [(1.0, error)]), GENERATE)
    assert failed.error is ErrorKind.SERVER_ERROR
    cut = parse_exchange(_raw("generate", [(1.0, _sse(_gen(2)))]), GENERATE)
    assert cut.error is ErrorKind.CONNECTION
    junk = parse_exchange(_raw("generate", [(1.0, b"data: {not json\n\n")]), GENERATE)
    assert junk.error is ErrorKind.PROTOCOL


def _chat(content: str | None, finish: str | None = None, usage: Any = None) -> dict[str, Any]:
    delta = {"role": "assistant", "content": content, "reasoning_content": None}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "chatcmpl-1", "choices": [choice], "usage": usage}


def test_chat_without_per_chunk_usage_spreads_the_total_by_text_length() -> None:
    blocks = [
        (1.0, _sse(_chat("Hello"))),
        (1.1, _sse(_chat(" big world"))),
        (1.2, _sse(_chat("", "length"))),
        (
            1.2,
            _sse(
                {
                    "id": "chatcmpl-1",
                    "choices": [],
                    "usage": {"prompt_tokens": 60, "completion_tokens": 3},
                }
            ),
        ),
        (1.25, _sse(b"[DONE]")),
    ]
    record = parse_exchange(_raw("chat", blocks), CHAT)
    assert record.ok, record.error_detail
    assert record.token_source is TokenSource.TEXT_WEIGHTED
    assert [c.tokens for c in record.chunks] == [1, 2, 0]
    assert record.completion_tokens == 3 and record.prompt_tokens == 60
    assert record.finish_reason == "length" and record.response_id == "chatcmpl-1"


def test_chat_with_continuous_usage_is_exact_per_chunk() -> None:
    def usage(n: int) -> dict[str, int]:
        return {"prompt_tokens": 60, "completion_tokens": n}

    blocks = [
        (1.0, _sse(_chat("a", usage=usage(1)))),
        (1.1, _sse(_chat("bcdefgh", usage=usage(2)))),
        (1.2, _sse(_chat("", "stop", usage=usage(2)))),
        (1.25, _sse(b"[DONE]")),
    ]
    record = parse_exchange(_raw("chat", blocks), CHAT)
    assert record.ok, record.error_detail
    assert record.token_source is TokenSource.USAGE_PER_CHUNK
    assert [c.tokens for c in record.chunks] == [1, 1, 0]


def test_chat_without_usage_is_a_protocol_error_not_a_chunk_count() -> None:
    blocks = [(1.0, _sse(_chat("a", "stop"))), (1.1, _sse(b"[DONE]"))]
    record = parse_exchange(_raw("chat", blocks), CHAT)
    assert record.error is ErrorKind.PROTOCOL
    assert record.completion_tokens is None


def test_transport_errors_pass_through_with_no_tokens() -> None:
    record = parse_exchange(
        _raw("chat", [], error=ErrorKind.TIMEOUT, error_detail="no answer in 1 s"), CHAT
    )
    assert record.error is ErrorKind.TIMEOUT and not record.ok
    assert record.token_source is TokenSource.NONE and record.ttft is None
