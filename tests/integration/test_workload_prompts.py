"""Workload prompts at exact lengths against the simulated SGLang server over HTTP: a traffic
file, the built-in sets and the synthetic control, with reuse accounting and per-request
output lengths. Small contexts and few distinct prompts keep it cheap."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from orchestrator import engines
from orchestrator.bench.client import BenchClient, RequestRecord
from orchestrator.bench.prompts import CalibrationError, PromptFactory
from orchestrator.bench.workloads import load_builtin, parse_sample
from orchestrator.bench.workloads.sample import WorkloadSample
from orchestrator.bench.workloads.source import WorkloadPrompts
from orchestrator.engines.base import ChatMessage, Prompt
from orchestrator.sim.tokenizer import count_tokens
from orchestrator.types import ApiKind
from tests.integration.sim_server_proc import SimServer, start_server

SGLANG = engines.get("sglang")

MODEL = "workload-model"
CONTEXTS = (512, 4096)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    flags = ["--model-path", "org/model", "--served-model-name", MODEL]
    sim = start_server(tmp_path_factory.mktemp("workload"), flags,
                       {"load_s": 0.2, "warmup_s": 0.1}, name="workload")
    try:
        sim.wait_ready_blocking(timeout=30.0)
        yield sim
    finally:
        sim.stop()


def _client(server: SimServer, api: ApiKind = "chat") -> BenchClient:
    return BenchClient(
        server.url, api=api, model=MODEL, concurrency=4, request_timeout=30, engine=SGLANG
    )


def _traffic() -> WorkloadSample:
    rows = [
        {"messages": [{"role": "system", "content": "You are a terse SQL expert."},
                      {"role": "user", "content": "Why is my LEFT JOIN dropping rows when I "
                       "filter on the right table in WHERE?"}], "output_tokens": 90},
        {"conversations": [
            {"from": "human", "value": "Plan a 3-day trip to Lisbon on a budget."},
            {"from": "gpt", "value": "Day 1: Alfama and the castle, tram 28 early to avoid "
             "queues. Day 2: Belem, pasteis at the original bakery. Day 3: Sintra by train."},
            {"from": "human", "value": "Swap Sintra for something by the sea."},
            {"from": "gpt", "value": "Take the train to Cascais instead: beaches, the "
             "seaside path to Estoril, and fresh fish by the harbour."}]},
        {"messages": [{"role": "user", "content": "Rewrite this so it sounds friendlier: "
                       "'Your ticket has been closed due to inactivity.'"}]},
        {"messages": [{"role": "user", "content": "Explain the difference between a "
                       "process and a thread, with an example from a web server. " * 40}]},
    ]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    return parse_sample(text, filename="traffic.jsonl", label="file:traffic.jsonl")


async def _sent_lengths(client: BenchClient, source: WorkloadPrompts | PromptFactory,
                        context: int, n: int) -> list[int | None]:
    calibration = await source.calibrate(context)
    assert calibration.tolerance == 0, calibration
    records = [await client.send(source.prompt(calibration), max_tokens=1) for _ in range(n)]
    return [r.prompt_tokens for r in records]


@pytest.mark.parametrize("api", ["chat", "generate"])
async def test_a_traffic_file_is_exact_at_every_context(server: SimServer, api: ApiKind) -> None:
    async with _client(server, api) as client:
        source = WorkloadPrompts(client, _traffic())
        for context in CONTEXTS:
            assert await _sent_lengths(client, source, context, 4) == [context] * 4
        small, large = [await source.calibrate(c) for c in CONTEXTS]
        assert small.workload == "file:traffic.jsonl"
        # The long line is cut to 512, the others padded with other lines' turns.
        assert small.method == "padded-turns+trimmed"
        assert large.method == "padded-turns"
        # One count model serves all prompts: a probe or two each, not a search per prompt
        # (chat on the simulator: the model is exact after the first prompt).
        assert large.requests <= (2 if api == "chat" else 3) * 4


async def test_builtin_sets_are_exact_and_padding_is_real_turns(server: SimServer) -> None:
    async with _client(server) as client:
        code = WorkloadPrompts(client, load_builtin("code-context"), max_distinct=3)
        assert await _sent_lengths(client, code, 4096, 3) == [4096] * 3
        chat = WorkloadPrompts(client, load_builtin("chat"), max_distinct=3)
        assert await _sent_lengths(client, chat, 512, 3) == [512] * 3
        calibration = await chat.calibrate(512)
        prompt = chat.prompt(calibration)
        sample_text = "\n\n".join(m.content for r in chat.sample.requests for m in r.messages)
        # After the nonce (the first paragraph), every paragraph sent is sample text (whole,
        # or cut at a word): padding is turns of the sample, never filler.
        nonce, *paragraphs = "\n\n".join(m.content for m in prompt.messages).split("\n\n")
        assert len(nonce.split()) == 5
        assert all(p in sample_text for p in paragraphs)
        assert [m.role for m in prompt.messages][:2] == ["system", "user"]
        assert prompt.messages[-1].role == "user"


async def test_reuse_is_marked_and_a_fresh_nonce_keeps_prompts_distinct(
    server: SimServer,
) -> None:
    async with _client(server) as client:
        source = WorkloadPrompts(client, _traffic(), workload_output_lengths=True)
        calibration = await source.calibrate(512)
        prompts = [source.prompt(calibration) for _ in range(6)]
    assert [p.origin for p in prompts] == [1, 2, 3, 4, 1, 2]
    assert [p.reused for p in prompts] == [False] * 4 + [True] * 2
    assert source.distinct(calibration) == 4
    assert prompts[0].messages[1:] == prompts[4].messages[1:]
    assert prompts[0].messages[0] != prompts[4].messages[0]  # a fresh nonce
    assert len({p.chat_messages()[0].content.split()[0:5].__repr__() for p in prompts}) == 6
    # output_lengths: workload -- the line's output_tokens, the cut reply's length, or none.
    reply = "Take the train to Cascais instead: beaches, the seaside path to Estoril, and " \
            "fresh fish by the harbour."
    assert prompts[0].max_tokens == 90
    assert prompts[1].max_tokens is not None
    assert abs(prompts[1].max_tokens - count_tokens(reply)) <= 1
    assert prompts[2].max_tokens is None


async def test_what_cannot_be_exact_is_the_closest_with_its_reason(server: SimServer) -> None:
    one_line = parse_sample(json.dumps({"messages": [{"role": "user", "content": "Hi!"}]}),
                            filename="one.jsonl", label="file:one.jsonl")
    async with _client(server) as client:
        source = WorkloadPrompts(client, one_line)
        calibration = await source.calibrate(512)
        assert calibration.tolerance > 0
        assert calibration.method.startswith("closest: the sample has no other line to pad")
        synthetic = PromptFactory(client)
        assert await _sent_lengths(client, synthetic, 512, 2) == [512, 512]
        assert (await synthetic.calibrate(512)).method == "filler"


async def test_a_target_inside_a_new_turns_template_cost_is_met_by_shaving(
    server: SimServer,
) -> None:
    # Chat on the simulator: 3 + 5 (nonce) + per message 4 + its units. "Why?" padded with
    # the other line's question (joined: one user message) is 18 tokens; opening its answer
    # splits that message in two, so one unit more is 27. 25 lies in the jump.
    rows = [{"messages": [{"role": "user", "content": "Why?"}]},
            {"conversations": [{"from": "human", "value": "Name a prime."},
                               {"from": "gpt", "value": "Seven is prime."}]}]
    sample = parse_sample("".join(json.dumps(r) + "\n" for r in rows), filename="g.jsonl",
                          label="file:g.jsonl")
    async with _client(server) as client:
        source = WorkloadPrompts(client, sample, max_distinct=1)
        assert await _sent_lengths(client, source, 25, 1) == [25]
        prompt = source.prompt(await source.calibrate(25))
    assert [m.role for m in prompt.messages] == ["user", "assistant", "user"]
    assert prompt.messages[0].content.endswith("\n\nName a")
    assert prompt.messages[1:] == (ChatMessage("assistant", "Seven"), ChatMessage("user", "Why?"))


async def test_a_prompts_own_output_length_overrides_the_calls(server: SimServer) -> None:
    async with _client(server) as client:
        own = await client.send(Prompt(text="Say something.", max_tokens=3), max_tokens=1)
        plain = await client.send("Say something.", max_tokens=2)
    assert (own.completion_tokens, plain.completion_tokens) == (3, 2)


async def test_a_failed_probe_fails_the_calibration_with_its_record() -> None:
    async with BenchClient("http://127.0.0.1:1", api="chat", model=MODEL, concurrency=2,
                           request_timeout=5, engine=SGLANG) as client:
        source = WorkloadPrompts(client, _traffic())
        with pytest.raises(CalibrationError, match="calibration probe \\(line 1") as caught:
            await source.calibrate(512)
    assert caught.value.record is not None and not caught.value.record.ok


class _Counting:
    """A prompt sender that counts the probes it forwards (the next trial's client)."""

    def __init__(self, client: BenchClient) -> None:
        self.client = client
        self.base_url, self.model, self.api = client.base_url, client.model, client.api
        self.sent = 0

    async def send(self, prompt: str | Prompt, **kwargs: Any) -> RequestRecord:
        self.sent += 1
        return await self.client.send(prompt, **kwargs)


async def test_a_later_trial_on_the_host_reuses_the_calibrated_prompts(server: SimServer) -> None:
    async with _client(server) as first:
        source = WorkloadPrompts(first, _traffic())
        calibration = await source.calibrate(512)
        issued = [source.prompt(calibration) for _ in range(5)]
        assert issued[-1].reused  # 4 lines, 5 prompts: the fifth comes round again
    async with _client(server) as second:
        counting = _Counting(second)
        again = source.rebound(counting)
        assert await again.calibrate(512) == calibration
        assert counting.sent == 0  # no probe repeated after the restart
        prompts = [again.prompt(calibration) for _ in range(4)]
        assert not any(p.reused for p in prompts)  # this trial's reuse is its own
        assert {p.origin for p in prompts} == {p.origin for p in issued[:4]}
        records = [await second.send(p, max_tokens=1) for p in prompts]
        assert [r.prompt_tokens for r in records] == [512] * 4
        await again.calibrate(4096)  # what the new trial learns is probed on its client
        assert counting.sent > 0
