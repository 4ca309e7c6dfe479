"""The traffic-sample parser: both shapes, every bad line with its number, the empty sample."""

from __future__ import annotations

import json

import pytest

from orchestrator.bench.workloads import WorkloadFileError, parse_sample
from orchestrator.engines.base import ChatMessage
from orchestrator.types import content_hash


def _jsonl(*rows: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_openai_shape_with_and_without_output_tokens() -> None:
    text = _jsonl(
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "What is a mutex?"}], "output_tokens": 120},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi "},
                                                    {"type": "text", "text": "there"}]}]},
    )
    sample = parse_sample(text, filename="t.jsonl", label="file:t.jsonl")
    assert sample.label == "file:t.jsonl"
    assert sample.content_hash == content_hash(text)
    first, second = sample.requests
    assert first.messages == (ChatMessage("system", "Be brief."),
                              ChatMessage("user", "What is a mutex?"))
    assert (first.output_tokens, first.line, first.reply) == (120, 1, None)
    assert second.messages == (ChatMessage("user", "Hi there"),)
    assert (second.output_tokens, second.line) == (None, 2)


def test_sharegpt_is_cut_at_the_last_user_turn_and_keeps_the_reply() -> None:
    text = "\n" + _jsonl({"conversations": [
        {"from": "system", "value": "You help with Python."},
        {"from": "human", "value": "How do I sort a dict by value?"},
        {"from": "gpt", "value": "Use sorted(d.items(), key=...)."},
        {"from": "human", "value": "And in reverse?"},
        {"from": "gpt", "value": "Pass reverse=True."},
    ]})
    (request,) = parse_sample(text, filename="s.jsonl", label="file:s.jsonl").requests
    assert request.line == 2  # blank line 1 is skipped, numbering is the file's
    assert [m.role for m in request.messages] == ["system", "user", "assistant", "user"]
    assert request.messages[-1].content == "And in reverse?"
    assert request.reply == "Pass reverse=True."
    assert request.output_tokens is None
    converted = _jsonl({"conversations": [{"role": "user", "content": "Hi"}],
                        "output_tokens": 7})
    (plain,) = parse_sample(converted, filename="c.jsonl", label="file:c.jsonl").requests
    assert (plain.messages, plain.output_tokens) == ((ChatMessage("user", "Hi"),), 7)


def test_every_bad_line_is_reported_with_its_number() -> None:
    good = {"messages": [{"role": "user", "content": "ok"}]}
    text = "\n".join([
        json.dumps(good),
        "{not json",
        json.dumps([1, 2]),
        json.dumps({"prompt": "x"}),
        json.dumps({"messages": [{"role": "robot", "content": "x"}]}),
        json.dumps({"conversations": [{"from": "gpt", "value": "only the model"}]}),
        json.dumps({"messages": [{"role": "user", "content": "x"}], "output_tokens": 0}),
        json.dumps({"messages": [{"role": "user", "content": "  "}]}),
        json.dumps(good),
    ])
    with pytest.raises(WorkloadFileError) as caught:
        parse_sample(text, filename="traffic.jsonl", label="file:traffic.jsonl")
    problems = caught.value.problems
    assert [p.split(": ", 1)[0] for p in problems] == [
        f"traffic.jsonl:{n}" for n in (2, 3, 4, 5, 6, 7, 8)
    ]
    assert "not JSON" in problems[0]
    assert "'robot'" in problems[3]
    assert "no user turn" in problems[4]
    assert "output_tokens" in problems[5]


def test_an_empty_sample_is_an_error() -> None:
    with pytest.raises(WorkloadFileError) as caught:
        parse_sample("\n  \n", filename="empty.jsonl", label="file:empty.jsonl")
    assert caught.value.problems == [
        "empty.jsonl: the sample holds no request (no non-blank line)"
    ]
