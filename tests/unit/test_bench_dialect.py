"""SGLang's HTTP dialect: the one definition of each request body and of how final and streamed
answers are read, shared by the bench client, the coding anchor and the readiness probe."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.bench.client import BenchClient, RawExchange, parse_exchange, read_exchange
from orchestrator.engines.base import (
    ChatMessage,
    Dialect,
    Engine,
    ErrorKind,
    Generation,
    Prompt,
    Reply,
    TokenSource,
)
from orchestrator.engines.sglang.engine import (
    SGLANG,
    ChatDialect,
    GenerateDialect,
    build_probe_request,
    dialect,
    served_model,
)
from orchestrator.types import ApiKind

CHAT = SGLANG.dialect("chat")
GENERATE = SGLANG.dialect("generate")


def _sse(obj: Any) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def _raw(api: ApiKind, events: list[Any]) -> RawExchange:
    blocks = [(float(i + 1), _sse(e)) for i, e in enumerate(events)]
    return RawExchange(
        label="t",
        phase="probe",
        api=api,
        max_tokens=8,
        ignore_eos=False,
        send_time=0.0,
        blocks=blocks,
        end_time=float(len(blocks)),
    )


def test_sglang_fills_the_engine_seam() -> None:
    assert isinstance(SGLANG, Engine)
    assert SGLANG.name == "sglang"
    for api in ("chat", "generate"):
        assert isinstance(SGLANG.dialect(api), Dialect)
        assert SGLANG.dialect(api).api == api
    assert isinstance(dialect("chat"), ChatDialect)
    assert isinstance(dialect("generate"), GenerateDialect)


def test_streamed_bodies_are_the_bench_clients_as_before() -> None:
    chat = BenchClient(
        "http://127.0.0.1:1", api="chat", model="m", concurrency=1, request_timeout=1, engine=SGLANG
    )
    path, body = chat.request_body("hi", max_tokens=4, temperature=0.5, ignore_eos=True)
    assert path == "/v1/chat/completions"
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "temperature": 0.5,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    usage = BenchClient(
        "http://127.0.0.1:1",
        api="chat",
        model="m",
        concurrency=1,
        request_timeout=1,
        continuous_usage_stats=True,
        extra_body={"top_p": 0.9}, engine=SGLANG,
    )
    _, body = usage.request_body("hi", max_tokens=4, temperature=0.0, ignore_eos=False)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["top_p"] == 0.9 and body["ignore_eos"] is False
    generate = BenchClient(
        "http://127.0.0.1:1", api="generate", model="m", concurrency=1, request_timeout=1,
        engine=SGLANG,
    )
    path, body = generate.request_body("hi", max_tokens=4, temperature=0.0, ignore_eos=True)
    assert (path, body) == (
        "/generate",
        {
            "text": "hi",
            "sampling_params": {"max_new_tokens": 4, "temperature": 0.0, "ignore_eos": True},
            "stream": True,
        },
    )


def test_final_bodies_of_the_coding_anchor_and_the_probe_as_before() -> None:
    coding = dialect("chat").request(Generation("p", 9, 0.0, stream=False, model="m"))
    assert coding.body == {
        "model": "m",
        "messages": [{"role": "user", "content": "p"}],
        "max_tokens": 9,
        "temperature": 0.0,
        "stream": False,
    }
    generate = dialect("generate").request(Generation("p", 9, 0.0, stream=False, model="m"))
    assert generate.body == {
        "text": "p",
        "sampling_params": {"max_new_tokens": 9, "temperature": 0.0},
        "stream": False,
    }
    path, body = build_probe_request("chat", "")
    assert path == "/v1/chat/completions" and "model" not in body  # an empty name is not sent
    assert body == {
        "messages": [{"role": "user", "content": "Count from one to five."}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": False,
    }


def test_final_answers_read_once_for_both_apis() -> None:
    chat = dialect("chat").parse_final(
        {
            "choices": [
                {
                    "message": {"content": None, "reasoning_content": "think"},
                    "finish_reason": "length",
                }
            ],
            "usage": {"completion_tokens": 12},
        }
    )
    assert chat == Reply("", "think", "length", 12)
    assert dialect("chat").parse_final({"usage": {"completion_tokens": 3}}) == Reply(
        None, None, None, 3
    )  # no message at all: the caller knows there is no answer, the probe still counts
    generate = dialect("generate").parse_final(
        {"text": "x", "meta_info": {"finish_reason": {"type": "stop"}, "completion_tokens": 2.0}}
    )
    assert generate == Reply("x", None, "stop", 2)
    with pytest.raises(ValueError, match="not a JSON object"):
        dialect("generate").parse_final(["x"])


def test_one_stream_read_gives_the_record_and_the_text() -> None:
    chat = _raw(
        "chat",
        [
            {"id": "c1", "choices": [{"delta": {"reasoning_content": "<plan>"}}]},
            {"id": "c1", "choices": [{"delta": {"content": "def f"}}]},
            {"id": "c1", "choices": [{"delta": {"content": "(): pass"}, "finish_reason": "stop"}]},
            {"id": "c1", "choices": [], "usage": {"completion_tokens": 5, "prompt_tokens": 9}},
            b"[DONE]",
        ],
    )
    record, answer = read_exchange(chat, CHAT)
    assert record == parse_exchange(chat, CHAT)
    assert record.ok and record.completion_tokens == 5 and record.finish_reason == "stop"
    assert record.token_source is TokenSource.TEXT_WEIGHTED
    assert sum(c.tokens for c in record.chunks) == 5
    assert answer == Reply("def f(): pass", "<plan>", "stop", 5)

    def gen(text: str, tokens: int, finish: Any = None) -> dict[str, Any]:
        return {"text": text, "meta_info": {"completion_tokens": tokens, "finish_reason": finish}}

    cumulative = _raw("generate", [gen("a", 1), gen("ab", 2), gen("abc", 3, {"type": "stop"})])
    record, answer = read_exchange(cumulative, GENERATE)
    assert record.ok and [c.tokens for c in record.chunks] == [1, 1, 1]
    assert answer.content == "abc" and answer.reasoning_content is None
    incremental = _raw("generate", [gen("a", 1), gen("b", 2, {"type": "length"})])
    assert read_exchange(incremental, GENERATE)[1].content == "ab"


def test_a_stream_error_keeps_what_was_read_before_it() -> None:
    raw = _raw(
        "generate",
        [
            {"text": "a", "meta_info": {"completion_tokens": 1}},
            {"error": {"message": "boom"}},
        ],
    )
    record, answer = read_exchange(raw, GENERATE)
    assert record.error is ErrorKind.SERVER_ERROR and "boom" in (record.error_detail or "")
    assert len(record.chunks) == 1 and record.completion_tokens is None
    assert answer.content == "a"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "-m", "sglang.launch_server", "--model-path", "/m/K", "--tp", "8"], "/m/K"),
        (["sglang", "--model-path", "/m/K", "--served-model-name", "k"], "k"),
        (["sglang", "--served-model-name=k", "--model-path=/m/K"], "k"),
        (["sglang", "--model", "/m/K"], "/m/K"),
        (["sglang", "--served-model-name", "a", "--served-model-name", "b"], "b"),
        (["/opt/run-sglang.sh"], None),
    ],
)
def test_the_served_model_name_a_command_line_gives(argv: list[str], expected: str | None) -> None:
    found = served_model(argv)
    assert (found.name if found else None) == expected


def _final_meta(**spec: Any) -> RawExchange:
    first = {"text": "a", "meta_info": {"completion_tokens": 1, "finish_reason": None}}
    meta = {"id": "g1", "completion_tokens": 37, "finish_reason": {"type": "length", "length": 37},
            **spec}
    return _raw("generate", [first, {"text": "ab", "meta_info": meta}, b"[DONE]"])


def test_a_finished_generate_gives_its_correct_and_proposed_drafts() -> None:
    # fill_spec_decoding_meta: the counters under their new names and the old aliases.
    record = parse_exchange(_final_meta(
        spec_accept_rate=0.5, spec_accept_length=37 / 6, spec_num_correct_drafts=33,
        spec_num_proposed_drafts=42, spec_verify_ct=6, spec_accepted_drafts=33,
        spec_proposed_drafts=42,
    ), GENERATE)
    assert (record.spec_verify_ct, record.spec_correct_drafts, record.spec_proposed_drafts) == (
        6, 33, 42,
    )
    assert record.spec_accept_length == pytest.approx(37 / 6)
    assert record.to_dict()["spec_num_correct_drafts"] == 33
    # Builds before the rename wrote only the old names.
    old = parse_exchange(_final_meta(spec_verify_ct=6, spec_accepted_drafts=30,
                                     spec_proposed_drafts=42), GENERATE)
    assert (old.spec_correct_drafts, old.spec_proposed_drafts) == (30, 42)
    # Speculative decoding off: nothing.
    off = parse_exchange(_final_meta(), GENERATE)
    assert (off.spec_verify_ct, off.spec_correct_drafts, off.spec_proposed_drafts) == (
        None, None, None,
    )


def test_a_conversation_prompt_goes_as_messages_to_chat_and_as_text_to_generate() -> None:
    talk = Prompt(messages=(ChatMessage("system", "Be brief."), ChatMessage("user", "Why?"),
                            ChatMessage("assistant", "Because."), ChatMessage("user", "Why not?")))
    chat = ChatDialect().request(Generation(talk, 4, 0.0, stream=False))
    assert chat.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "Because."},
        {"role": "user", "content": "Why not?"},
    ]
    generate = GenerateDialect().request(Generation(talk, 4, 0.0, stream=False))
    assert generate.body["text"] == (
        "System: Be brief.\n\nUser: Why?\n\nAssistant: Because.\n\nUser: Why not?\n\nAssistant:"
    )
    one_turn = Prompt(messages=(ChatMessage("user", "hello"),))
    assert GenerateDialect().request(Generation(one_turn, 4, 0.0, stream=False)).body[
        "text"] == "hello"
    text = ChatDialect().request(Generation(Prompt(text="hi"), 4, 0.0, stream=False))
    assert text.body["messages"] == [{"role": "user", "content": "hi"}]
    with pytest.raises(ValueError, match="exactly one"):
        Prompt()
